"""Fixtures of the Python package's tests (run by tools/test.sh through tools/python/test.sh):
a fresh warehouse per test, and the peers that read floe's tables from Python (pyiceberg on
the same SQLite catalog, DuckDB's iceberg extension on the metadata file), and Spark: tables
handed to `spark_check` are read by Spark (tools/peers/peer_check.py in the peers' venv,
FLOE_PEERS_PYTHON) once, at the end of the session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Sequence

import pyarrow as pa
import pytest

import floe

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tools", "peers"))


@pytest.fixture
def warehouse(tmp_path) -> str:
    return str(tmp_path / "warehouse")


@pytest.fixture
def catalog(warehouse) -> floe.Catalog:
    return floe.load_catalog("default", warehouse=warehouse, create=True)


def pyiceberg_catalog(warehouse: str):
    """pyiceberg's SqlCatalog on floe's SQLite catalog (same tables, same names)."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        "default",
        uri=f"sqlite:///{warehouse}/catalog.db",
        warehouse=f"file://{warehouse}",
    )


def duckdb_rows(metadata_location: str, columns: str = "*") -> pa.Table:
    from floe_peers import duckdb_connect

    con = duckdb_connect()
    return con.execute(
        f"SELECT {columns} FROM iceberg_scan('{metadata_location}')"
    ).to_arrow_table()


def rows(t: pa.Table, key: Sequence[str] = ("id",)) -> List[Dict[str, Any]]:
    """Rows as dicts sorted by `key` (then every column): order-free comparison."""
    cols = sorted(t.column_names)
    out = [{c: r[c] for c in cols} for r in t.to_pylist()]
    return sorted(out, key=lambda r: tuple((r[k] is None, r[k]) for k in list(key) + cols))


def plain(t: pa.Table) -> pa.Table:
    """`t` without field metadata or nullability differences (for equality of values)."""
    return pa.table({n: t.column(n).to_pylist() for n in t.column_names})


_SPARK_CHECKS: List[Dict[str, Any]] = []


def spark_check(t: "floe.Table", name: str) -> None:
    """Spark must read `t` (its current snapshot) as floe does: checked at session end."""
    import pyarrow.parquet as pq

    import tempfile

    # Outside the table's directory (an expected file there would be an orphan file).
    expected = os.path.join(tempfile.mkdtemp(prefix="floe-spark-"), "expected.parquet")
    pq.write_table(t.scan().to_arrow(), expected)
    _SPARK_CHECKS.append({"name": name, "metadata": t.metadata_location,
                          "expected": expected, "engines": ["spark"]})


@pytest.fixture(scope="session", autouse=True)
def spark_reads_what_floe_wrote(tmp_path_factory):
    yield
    peers = os.environ.get("FLOE_PEERS_PYTHON")
    if not _SPARK_CHECKS or not peers or os.environ.get("FLOE_PEERS_NO_SPARK") == "1":
        return
    path = tmp_path_factory.mktemp("spark") / "checks.json"
    path.write_text(json.dumps(_SPARK_CHECKS))
    out = subprocess.run([peers, os.path.join(REPO, "tools", "peers", "peer_check.py"), str(path)],
                         capture_output=True, text=True, timeout=900)
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    bad = [x for x in lines if not x.get("ok")]
    assert out.returncode == 0 and lines and not bad, (out.stdout[-4000:], out.stderr[-2000:])
