#!/usr/bin/env python3
"""floe's Python API vs pyiceberg, same process, same data, and vs the CLI / Rust library.

    python tools/bench/python_api.py [--rows N] [--repeat R] [--pyiceberg-repeat P]
        [--floe-bin target/release/floe] [--rust-bin PATH] [--smoke]

Run with a python that has the floe wheel (release build: `pip install .`), pyiceberg 0.12.0
and pyarrow (tools/python/setup.sh's venv). Prints one line per measurement and the ratios:
  * scan().to_arrow() of the whole table: floe vs pyiceberg;
  * delete of 1% of rows: floe (merge-on-read, position deletes) vs pyiceberg (copy-on-write,
    its only mode);
  * upsert of 1% of rows (half updates, half inserts) by key: floe (keyed table) vs pyiceberg;
  * one 1-row append: the Python call vs `floe append` of a 1-row Parquet file (the CLI,
    a process start included) — the per-call overhead of the binding;
  * with --rust-bin (the `python_parity` bench binary: `cargo bench --bench python_parity
    --no-run` prints its path): the same scan / delete / upsert through the Rust library,
    and the ratio python/rust of each (the issue's goal: within 5%, i.e. <= 1.05).

Every number is the median of several runs after an untimed warm-up (scan: R runs on one
table; delete / upsert: one fresh table per run, all created by the same floe append of the
same rows, so every run starts from the same table state). The Rust runs are interleaved
with the Python runs (one process per run, its own warm-up on a small table first, the
catalog opened before the clock starts), so load from other work on the machine falls on
both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import floe

WHERE = "id % 100 = 7"


def clock(f):
    t = time.perf_counter()
    out = f()
    return time.perf_counter() - t, out


def timed(f, repeat):
    """Median seconds of `repeat` runs of f after one untimed warm-up run; f's last result."""
    f()
    times = []
    out = None
    for _ in range(repeat):
        s, out = clock(f)
        times.append(s)
    return statistics.median(times), out


def data(n, start=0, tag="a"):
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({
        "id": ids,
        "k": pc.cast(pc.bit_wise_and(ids, 1023), pa.int64()),
        "s": pa.array([f"{tag}{i % 997}" for i in range(start, start + n)]),
        "d": pa.array([i * 0.25 for i in range(start, start + n)], pa.float64()),
    }, schema=pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.int64()),
                         ("s", pa.string()), ("d", pa.float64())]))


def rust(bin_, *args):
    """Runs the python_parity bench binary; its JSON result (seconds and rows per run)."""
    out = subprocess.run([bin_, *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def ms(x):
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.3f} s"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=5, help="timed runs of floe (Python, Rust)")
    ap.add_argument("--pyiceberg-repeat", type=int, default=3, help="timed runs of pyiceberg")
    ap.add_argument("--floe-bin", default=None, help="the floe CLI (1-row append comparison)")
    ap.add_argument("--rust-bin", default=None, help="the python_parity bench binary")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    n = 20_000 if a.smoke else a.rows
    reps, preps = (2, 1) if a.smoke else (a.repeat, a.pyiceberg_repeat)
    small = min(n, 10_000)  # warm-up tables
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import In

    print(f"floe {floe.__version__} ({floe._floe.__file__}); {n} rows x 4 columns, one data "
          f"file; median of {reps} (floe) / {preps} (pyiceberg) runs; {os.cpu_count()} cores")
    tmp = tempfile.mkdtemp(prefix="floe-pybench-")
    wh = os.path.join(tmp, "wh")
    cat = floe.load_catalog("default", warehouse=wh)
    py = SqlCatalog("default", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    rows = data(n)
    rows_small = data(small)
    ratios, parity = {}, {}

    def make(name, src=rows, **kw):
        t = cat.create_table(name, schema=src.schema, **kw)
        t.append(src)
        return t

    # scan
    t = make("db.scan")
    p = py.load_table("db.scan")
    f_s, got = timed(lambda: t.scan().to_arrow(), reps)
    p_s, got2 = timed(lambda: p.scan().to_arrow(), preps)
    assert got.num_rows == got2.num_rows == n
    line = f"scan().to_arrow() {n} rows: floe {ms(f_s)}, pyiceberg {ms(p_s)}"
    ratios["scan"] = p_s / f_s
    if a.rust_bin:
        r = rust(a.rust_bin, "scan", wh, "db.scan", str(reps + 1))
        assert r["rows"] == [n] * (reps + 1), r
        r_s = statistics.median(r["seconds"][1:])
        line += f", Rust library {ms(r_s)}"
        parity["scan"] = f_s / r_s
    print(line, flush=True)

    # delete 1%: one fresh table per run (floe MoR; pyiceberg CoW)
    mor = {"write.delete.mode": "merge-on-read"}
    make("db.del_warm", rows_small, properties=mor).delete(WHERE)
    f_runs, r_runs = [], []
    expect = len(range(7, n, 100))
    for i in range(reps):
        t = make(f"db.del_py{i}", properties=mor)
        s, res = clock(lambda: t.delete(WHERE))
        assert res.mode == "merge-on-read" and t.scan().count() == n - expect, res
        f_runs.append(s)
        if a.rust_bin:
            make(f"db.del_rw{i}", rows_small, properties=mor)
            make(f"db.del_rs{i}", properties=mor)
            r = rust(a.rust_bin, "delete", wh, WHERE, f"db.del_rw{i}", f"db.del_rs{i}")
            assert r["rows"][1] == expect, r
            r_runs.append(r["seconds"][1])
    f_d = statistics.median(f_runs)
    make("db.del_piw", rows_small)
    py.load_table("db.del_piw").delete(In("id", set(range(7, small, 100))))
    p_runs = []
    for i in range(preps):
        make(f"db.del_pi{i}")
        p = py.load_table(f"db.del_pi{i}")
        s, _ = clock(lambda: p.delete(In("id", set(range(7, n, 100)))))
        assert py.load_table(f"db.del_pi{i}").scan().to_arrow().num_rows == n - expect
        p_runs.append(s)
    p_d = statistics.median(p_runs)
    line = f"delete 1%: floe {ms(f_d)} (merge-on-read), pyiceberg {ms(p_d)} (copy-on-write)"
    ratios["delete"] = p_d / f_d
    if a.rust_bin:
        r_d = statistics.median(r_runs)
        line += f", Rust library {ms(r_d)}"
        parity["delete"] = f_d / r_d
    print(line, flush=True)

    # upsert 1%: half existing keys, half new; one fresh keyed table per run
    m = max(2, n // 100)
    changes = pa.concat_tables([data(m // 2, 0, "u"), data(m - m // 2, n, "u")])
    changes = changes.combine_chunks()  # one batch, as the Rust side reads it
    changes_small = pa.concat_tables([data(50, 0, "u"), data(50, small, "u")])
    ch_file, ch_small_file = os.path.join(tmp, "changes.parquet"), os.path.join(tmp, "cs.parquet")
    pq.write_table(changes, ch_file)
    pq.write_table(changes_small, ch_small_file)
    make("db.up_warm", rows_small, primary_key="id").upsert(changes_small)
    f_runs, r_runs = [], []
    for i in range(reps):
        t = make(f"db.up_py{i}", primary_key="id")
        s, fu = clock(lambda: t.upsert(changes))
        assert (fu.updated_records_count, fu.inserted_records_count) == (m // 2, m - m // 2), fu
        f_runs.append(s)
        if a.rust_bin:
            make(f"db.up_rw{i}", rows_small, primary_key="id")
            make(f"db.up_rs{i}", primary_key="id")
            r = rust(a.rust_bin, "upsert", wh, ch_file, f"db.up_rw{i}", f"db.up_rs{i}")
            assert r["rows"][1] == m, r
            r_runs.append(r["seconds"][1])
    f_u = statistics.median(f_runs)
    make("db.up_piw", rows_small, primary_key="id")
    py.load_table("db.up_piw").upsert(changes_small, join_cols=["id"])
    p_runs = []
    for i in range(preps):
        make(f"db.up_pi{i}", primary_key="id")
        p = py.load_table(f"db.up_pi{i}")
        s, pu = clock(lambda: p.upsert(changes, join_cols=["id"]))
        assert (pu.rows_updated, pu.rows_inserted) == (m // 2, m - m // 2), pu
        p_runs.append(s)
    p_u = statistics.median(p_runs)
    line = f"upsert {m} rows: floe {ms(f_u)}, pyiceberg {ms(p_u)}"
    ratios["upsert"] = p_u / f_u
    if a.rust_bin:
        r_u = statistics.median(r_runs)
        line += f", Rust library {ms(r_u)}"
        parity["upsert"] = f_u / r_u
    print(line, flush=True)

    # 1-row append: Python call vs CLI process
    one = data(1, 10**9)
    t = cat.create_table("db.one", schema=rows.schema)
    f_a, _ = timed(lambda: t.append(one), 10)
    print(f"1-row append, Python API: {f_a * 1000:.1f} ms")
    if a.floe_bin:
        pq.write_table(one, os.path.join(tmp, "one.parquet"))
        cmd = [a.floe_bin, "--warehouse", wh, "append", "db.one", os.path.join(tmp, "one.parquet")]
        c_a, _ = timed(lambda: subprocess.run(cmd, check=True, capture_output=True), 10)
        print(f"1-row append, CLI process: {c_a * 1000:.1f} ms")
        ratios["append_cli_over_python"] = c_a / f_a
    print("ratios (higher: floe's Python API faster):",
          ", ".join(f"{k} {v:.1f}x" for k, v in ratios.items()))
    if parity:
        print("python/rust (1.00: same time; goal <= 1.05):",
              ", ".join(f"{k} {v:.3f}{'' if v <= 1.05 else ' (NOT within 5%)'}"
                        for k, v in parity.items()))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
