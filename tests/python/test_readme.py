"""The README's Python section runs as written: its ```python blocks, in order, in one
fresh directory (so the examples cannot rot)."""

from __future__ import annotations

import os
import re

from conftest import REPO


def python_blocks() -> list:
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    section = text.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_readme_python_examples_run(tmp_path, monkeypatch):
    blocks = python_blocks()
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    for i, code in enumerate(blocks):
        exec(compile(code, f"README.md python block {i + 1}", "exec"), {"__name__": "__readme__"})
