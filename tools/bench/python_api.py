#!/usr/bin/env python3
"""floe's Python API vs pyiceberg, same process, same data, and vs the CLI / Rust library.

    python tools/bench/python_api.py [--rows N] [--floe-bin target/release/floe] [--smoke]

Run with a python that has the floe wheel (release build: `pip install .`), pyiceberg 0.12.0
and pyarrow (tools/python/setup.sh's venv). Prints one line per measurement and the ratios:
  * scan().to_arrow() of the whole table: floe vs pyiceberg;
  * delete of 1% of rows: floe (merge-on-read, position deletes) vs pyiceberg (copy-on-write,
    its only mode) on two copies of the same table;
  * upsert of 1% of rows (half updates, half inserts) by key: floe (keyed table) vs pyiceberg;
  * one 1-row append: the Python call vs `floe append` of a 1-row Parquet file (the CLI,
    a process start included) — the per-call overhead of the binding.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

import floe


def timed(f, repeat=3):
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def data(n, start=0, tag="a"):
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({
        "id": ids,
        "k": pa.compute.cast(pa.compute.bit_wise_and(ids, 1023), pa.int64()),
        "s": pa.array([f"{tag}{i % 997}" for i in range(start, start + n)]),
        "d": pa.array([i * 0.25 for i in range(start, start + n)], pa.float64()),
    }, schema=pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.int64()),
                         ("s", pa.string()), ("d", pa.float64())]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--floe-bin", default=None)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    n = 20_000 if a.smoke else a.rows
    from pyiceberg.catalog.sql import SqlCatalog

    tmp = tempfile.mkdtemp(prefix="floe-pybench-")
    wh = os.path.join(tmp, "wh")
    cat = floe.load_catalog("default", warehouse=wh)
    py = SqlCatalog("default", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    rows = data(n)
    ratios = {}

    def both(name, **kw):
        t = cat.create_table(name, schema=rows.schema, **kw)
        t.append(rows)
        return t, py.load_table(name)

    # scan
    t, p = both("db.scan")
    f_s, got = timed(lambda: t.scan().to_arrow())
    p_s, got2 = timed(lambda: p.scan().to_arrow())
    assert got.num_rows == got2.num_rows == n
    print(f"scan().to_arrow() {n} rows: floe {f_s:.3f}s, pyiceberg {p_s:.3f}s")
    ratios["scan"] = p_s / f_s

    # delete 1%
    t, _ = both("db.del_floe", properties={"write.delete.mode": "merge-on-read"})
    both("db.del_py")
    p = py.load_table("db.del_py")
    s = time.perf_counter(); r = t.delete("id % 100 = 7"); f_d = time.perf_counter() - s
    from pyiceberg.expressions import In

    s = time.perf_counter(); p.delete(In("id", set(range(7, n, 100)))); p_d = time.perf_counter() - s
    assert t.scan().count() == py.load_table("db.del_py").scan().to_arrow().num_rows
    print(f"delete 1%: floe {f_d:.3f}s ({r.mode}), pyiceberg {p_d:.3f}s (copy-on-write)")
    ratios["delete"] = p_d / f_d

    # upsert 1%: half existing keys, half new
    m = max(2, n // 100)
    changes = pa.concat_tables([data(m // 2, 0, "u"), data(m - m // 2, n, "u")])
    t = cat.create_table("db.up_floe", schema=rows.schema, primary_key="id")
    t.append(rows)
    cat.create_table("db.up_py", schema=rows.schema, primary_key="id").append(rows)
    p = py.load_table("db.up_py")
    s = time.perf_counter(); fu = t.upsert(changes); f_u = time.perf_counter() - s
    s = time.perf_counter(); pu = p.upsert(changes, join_cols=["id"]); p_u = time.perf_counter() - s
    assert (fu.updated_records_count, fu.inserted_records_count) == (pu.rows_updated, pu.rows_inserted)
    print(f"upsert {m} rows: floe {f_u:.3f}s, pyiceberg {p_u:.3f}s")
    ratios["upsert"] = p_u / f_u

    # 1-row append: Python call vs CLI process
    one = data(1, 10**9)
    t = cat.create_table("db.one", schema=rows.schema)
    f_a, _ = timed(lambda: t.append(one), repeat=10)
    print(f"1-row append, Python API: {f_a * 1000:.1f} ms")
    if a.floe_bin:
        pq.write_table(one, os.path.join(tmp, "one.parquet"))
        cmd = [a.floe_bin, "--warehouse", wh, "append", "db.one", os.path.join(tmp, "one.parquet")]
        c_a, _ = timed(lambda: subprocess.run(cmd, check=True, capture_output=True), repeat=10)
        print(f"1-row append, CLI process: {c_a * 1000:.1f} ms")
        ratios["append_cli_over_python"] = c_a / f_a
    print("ratios (higher: floe's Python API faster):",
          ", ".join(f"{k} {v:.1f}x" for k, v in ratios.items()))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
