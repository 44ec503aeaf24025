"""The Python examples run as written: the ```python blocks of the README (its quick start)
and of the user guide's Python page (docs/src/python.md), each document's blocks in order,
in a fresh directory of its own (so the examples cannot rot)."""

from __future__ import annotations

import os
import re

import pytest

from conftest import REPO

# Each document, with the least number of examples it holds.
DOCS = {"README.md": 1, "docs/src/python.md": 2}


def python_blocks(doc: str) -> list:
    text = open(os.path.join(REPO, doc), encoding="utf-8").read()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_readme_python_examples_run(doc, tmp_path, monkeypatch):
    blocks = python_blocks(doc)
    assert len(blocks) >= DOCS[doc], f"{doc}: no Python examples found"
    monkeypatch.chdir(tmp_path)
    for i, code in enumerate(blocks):
        exec(compile(code, f"{doc} python block {i + 1}", "exec"), {"__name__": "__readme__"})
