import os
import sys

# Tests import the helpers next to them (cases.py).
sys.path.insert(0, os.path.dirname(__file__))
