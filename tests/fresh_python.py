"""Running a snippet in a fresh interpreter, for tests of what the package reads at start-up or
keeps for the life of a process (environment variables, the output cache's floor)."""
import os
import subprocess
import sys

import npu_ops_transformer_ext

# The subprocesses import the package this test process has.
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(npu_ops_transformer_ext.__file__)))


def fresh_env(**variables: str) -> dict:
    """This process's environment without any NPU_OPS_CPU_* setting, the package on PYTHONPATH,
    and ``variables`` set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NPU_OPS_CPU_")}
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    env.update(variables)
    return env


def run_python(script: str, *args: str, env: dict, timeout: int = 300) -> str:
    """stdout of ``python -c script args...`` under ``env``; fails the test if it fails."""
    r = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                       timeout=timeout, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout
