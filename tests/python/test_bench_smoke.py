"""The Python benchmark (tools/bench/python_api.py) runs, in its tiny smoke mode."""

import os
import subprocess
import sys

from conftest import REPO


def test_benchmark_smoke():
    o = subprocess.run([sys.executable, os.path.join(REPO, "tools", "bench", "python_api.py"),
                        "--smoke"], capture_output=True, text=True, timeout=300)
    assert o.returncode == 0, o.stderr
    assert "ratios" in o.stdout
