"""Kept for old commands: the plot now ships in the package as
``python -m npu_ops_transformer_ext.plot CSV [-o out.png]`` (same arguments)."""
import sys

from npu_ops_transformer_ext.plot import main

if __name__ == "__main__":
    sys.exit(main())
