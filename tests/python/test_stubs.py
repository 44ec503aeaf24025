"""The native module's stubs name exactly the methods it has; the package ships py.typed."""

import os
import re

import floe
from floe import _floe


def test_stubs_match_the_native_module():
    stub = open(os.path.join(os.path.dirname(floe.__file__), "_floe.pyi")).read()
    assert os.path.exists(os.path.join(os.path.dirname(floe.__file__), "py.typed"))
    for cls in ("Catalog", "Table", "ScanBatches"):
        body = stub.split(f"class {cls}:", 1)[1].split("\nclass ", 1)[0]
        stubbed = {n for n in re.findall(r"def (\w+)\(", body) if not n.startswith("_")}
        actual = {n for n in dir(getattr(_floe, cls)) if not n.startswith("_")}
        assert stubbed == actual, cls
