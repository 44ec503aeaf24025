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

Every number is the median of several runs after an untimed warm-up (scan: 3R runs on one
table; delete: 3R runs, upsert: R runs, one fresh table per run, all created by the same floe append
of the same rows, so every run starts from the same table state; `os.sync()` before each run).
Each timed run, Python's and Rust's alike, comes right after untimed runs of the same work
in the same process (scan: 3; delete / upsert: 1, on a table of its own), so neither side is
timed cold just after the other side's process ran on the same cores. The
Rust runs are interleaved with the Python runs, the order alternating (one process per run,
its own untimed warm-up run on a full-size table first, the catalog opened before the clock
starts), so load from other work on the machine falls on both alike. Wall time and CPU time
(the process's, all threads: `time.process_time()` and the same clock in Rust) are both
reported: on a busy machine the CPU time is the steadier. The script re-runs itself with
glibc's malloc thresholds fixed (MALLOC_ENV below), inherited by the Rust processes.
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
    """f's wall seconds, CPU seconds (this process, all threads) and result; written data
    is flushed first (`os.sync()`, as the Rust side does), so no earlier write's writeback
    lands in the clock."""
    os.sync()
    c, t = time.process_time(), time.perf_counter()
    out = f()
    return time.perf_counter() - t, time.process_time() - c, out


def timed(f, repeat):
    """Median wall and CPU seconds of `repeat` runs of f after one untimed warm-up run."""
    f()
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        w, c, out = clock(f)
        walls.append(w)
        cpus.append(c)
    return statistics.median(walls), statistics.median(cpus), out


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
    """Runs the python_parity bench binary; its JSON result (seconds, cpu_seconds, rows)."""
    p = subprocess.run([bin_, *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{bin_} {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def ms(x):
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.3f} s"


# glibc's malloc returns freed memory to the kernel and faults it in again on the next large
# allocation unless its thresholds have grown; a long-running Python process gets there by
# itself, a fresh Rust process does not (measured: the same scan took ~30% more CPU time in the
# Rust process, all of it page faults). Both sides run with the thresholds fixed, so the
# comparison is of floe's work, not of the allocator's state.
MALLOC_ENV = {"MALLOC_TRIM_THRESHOLD_": str(1 << 30), "MALLOC_MMAP_THRESHOLD_": str(1 << 30)}


def main() -> None:
    if any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
        argv = getattr(sys, "orig_argv", [sys.executable, *sys.argv])  # keeps -W etc.
        os.execve(sys.executable, [sys.executable, *argv[1:]], {**os.environ, **MALLOC_ENV})
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=7, help="timed runs of floe (Python, Rust)")
    ap.add_argument("--pyiceberg-repeat", type=int, default=3, help="timed runs of pyiceberg")
    ap.add_argument("--floe-bin", default=None, help="the floe CLI (1-row append comparison)")
    ap.add_argument("--rust-bin", default=None, help="the python_parity bench binary")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    n = 20_000 if a.smoke else a.rows
    reps, preps = (2, 1) if a.smoke else (a.repeat, a.pyiceberg_repeat)
    small = min(n, 10_000)  # pyiceberg's warm-up tables (floe's are full size)
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import In

    print(f"floe {floe.__version__} ({floe._floe.__file__}); {n} rows x 4 columns, one data "
          f"file; median of {reps} (floe; scan and delete {3 * reps}) / {preps} (pyiceberg) runs; "
          f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}")
    tmp = tempfile.mkdtemp(prefix="floe-pybench-")
    wh = os.path.join(tmp, "wh")
    cat = floe.load_catalog("default", warehouse=wh, create=True)
    py = SqlCatalog("default", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    rows = data(n)
    rows_small = data(small)
    ratios, parity, parity_cpu = {}, {}, {}

    def make(name, src=rows, **kw):
        t = cat.create_table(name, schema=src.schema, **kw)
        t.append(src)
        return t

    def paired(name, prepare, py_run, rust_run, runs):
        """Runs the Python call and (with --rust-bin) the Rust library `runs` times each,
        interleaved, the order alternating per run, each run on what `prepare(i)` made for it
        beforehand and after an `os.sync()` (no writeback of earlier tables during the clock);
        records the medians of wall and CPU time and the python/rust ratios."""
        fw, fc, rw, rc = [], [], [], []
        for i in range(runs):
            ctx = prepare(i)
            for side in (("py", "rs") if i % 2 == 0 else ("rs", "py")):
                os.sync()
                if side == "py":
                    w, c = py_run(i, ctx)
                    fw.append(w)
                    fc.append(c)
                elif a.rust_bin:
                    r = rust_run(i, ctx)
                    rw.append(r["seconds"][-1])
                    rc.append(r["cpu_seconds"][-1])
        med = statistics.median
        out = {"py": med(fw), "py_cpu": med(fc)}
        if rw:
            out.update(rs=med(rw), rs_cpu=med(rc))
            parity[name], parity_cpu[name] = med(fw) / med(rw), med(fc) / med(rc)
        return out

    def rust_part(m):
        if "rs" not in m:
            return ""
        return (f", Rust library {ms(m['rs'])} (CPU: floe {ms(m['py_cpu'])}, "
                f"Rust {ms(m['rs_cpu'])})")

    # scan
    t = make("db.scan")
    p = py.load_table("db.scan")
    t.scan().to_arrow()  # warm-up

    def py_scan(i, _):
        # As the Rust side: three untimed scans right before the timed one (both sides are
        # then timed on their fourth consecutive scan, not the Python side just after the
        # other process ran on the same cores).
        for _ in range(3):
            t.scan().to_arrow()
        w, c, got = clock(lambda: t.scan().to_arrow())
        assert got.num_rows == n
        return w, c

    def rs_scan(i, _):
        # Three warm-up scans (the Python process has scanned before: its heap is grown), then
        # the timed one.
        r = rust(a.rust_bin, "scan", wh, "db.scan", "4")
        assert r["rows"] == [n] * 4, r
        return r

    f = paired("scan", lambda i: None, py_scan, rs_scan, 3 * reps)  # cheap: 3x the runs
    p_s, _, got2 = timed(lambda: p.scan().to_arrow(), preps)
    assert got2.num_rows == n
    ratios["scan"] = p_s / f["py"]
    print(f"scan().to_arrow() {n} rows: floe {ms(f['py'])}, pyiceberg {ms(p_s)}" + rust_part(f),
          flush=True)

    # delete 1%: one fresh table per run (floe MoR; pyiceberg CoW)
    mor = {"write.delete.mode": "merge-on-read"}
    expect = len(range(7, n, 100))
    make("db.del_warm", properties=mor).delete(WHERE)

    def prep_del(i):
        if a.rust_bin:
            make(f"db.del_rw{i}", properties=mor)  # the Rust process's warm-up
            make(f"db.del_rs{i}", properties=mor)
        # The Python side's warm-up, right before its timed run, as the Rust side's.
        return make(f"db.del_pw{i}", properties=mor), make(f"db.del_py{i}", properties=mor)

    def py_del(i, tables):
        warm, t = tables
        warm.delete(WHERE)
        w, c, res = clock(lambda: t.delete(WHERE))
        assert res.mode == "merge-on-read" and t.scan().count() == n - expect, res
        return w, c

    def rs_del(i, _):
        r = rust(a.rust_bin, "delete", wh, WHERE, f"db.del_rw{i}", f"db.del_rs{i}")
        assert r["rows"][1] == expect, r
        return r

    f = paired("delete", prep_del, py_del, rs_del, 3 * reps)  # short and noisy: 3x the runs
    make("db.del_piw", rows_small)
    py.load_table("db.del_piw").delete(In("id", set(range(7, small, 100))))
    p_runs = []
    for i in range(preps):
        make(f"db.del_pi{i}")
        p = py.load_table(f"db.del_pi{i}")
        os.sync()
        s, _, _ = clock(lambda: p.delete(In("id", set(range(7, n, 100)))))
        assert py.load_table(f"db.del_pi{i}").scan().to_arrow().num_rows == n - expect
        p_runs.append(s)
    p_d = statistics.median(p_runs)
    ratios["delete"] = p_d / f["py"]
    print(f"delete 1%: floe {ms(f['py'])} (merge-on-read), pyiceberg {ms(p_d)} (copy-on-write)"
          + rust_part(f), flush=True)

    # upsert 1%: half existing keys, half new; one fresh keyed table per run
    m = max(2, n // 100)
    changes = pa.concat_tables([data(m // 2, 0, "u"), data(m - m // 2, n, "u")])
    changes = changes.combine_chunks()  # one batch, as the Rust side reads it
    changes_small = pa.concat_tables([data(50, 0, "u"), data(50, small, "u")])
    ch_file = os.path.join(tmp, "changes.parquet")
    pq.write_table(changes, ch_file)
    make("db.up_warm", primary_key="id").upsert(changes)

    def prep_up(i):
        if a.rust_bin:
            make(f"db.up_rw{i}", primary_key="id")  # the Rust process's warm-up
            make(f"db.up_rs{i}", primary_key="id")
        return make(f"db.up_pw{i}", primary_key="id"), make(f"db.up_py{i}", primary_key="id")

    def py_up(i, tables):
        warm, t = tables
        warm.upsert(changes)
        w, c, fu = clock(lambda: t.upsert(changes))
        assert (fu.updated_records_count, fu.inserted_records_count) == (m // 2, m - m // 2), fu
        return w, c

    def rs_up(i, _):
        r = rust(a.rust_bin, "upsert", wh, ch_file, f"db.up_rw{i}", f"db.up_rs{i}")
        assert r["rows"][1] == m, r
        return r

    f = paired("upsert", prep_up, py_up, rs_up, reps)
    make("db.up_piw", rows_small, primary_key="id")
    py.load_table("db.up_piw").upsert(changes_small, join_cols=["id"])
    p_runs = []
    for i in range(preps):
        make(f"db.up_pi{i}", primary_key="id")
        p = py.load_table(f"db.up_pi{i}")
        os.sync()
        s, _, pu = clock(lambda: p.upsert(changes, join_cols=["id"]))
        assert (pu.rows_updated, pu.rows_inserted) == (m // 2, m - m // 2), pu
        p_runs.append(s)
    p_u = statistics.median(p_runs)
    ratios["upsert"] = p_u / f["py"]
    print(f"upsert {m} rows: floe {ms(f['py'])}, pyiceberg {ms(p_u)}" + rust_part(f), flush=True)

    # 1-row append: Python call vs CLI process
    one = data(1, 10**9)
    t = cat.create_table("db.one", schema=rows.schema)
    f_a, _, _ = timed(lambda: t.append(one), 10)
    print(f"1-row append, Python API: {f_a * 1000:.1f} ms")
    if a.floe_bin:
        pq.write_table(one, os.path.join(tmp, "one.parquet"))
        cmd = [a.floe_bin, "--warehouse", wh, "append", "db.one", os.path.join(tmp, "one.parquet")]
        c_a, _, _ = timed(lambda: subprocess.run(cmd, check=True, capture_output=True), 10)
        print(f"1-row append, CLI process: {c_a * 1000:.1f} ms")
        ratios["append_cli_over_python"] = c_a / f_a
    print("ratios (higher: floe's Python API faster):",
          ", ".join(f"{k} {v:.1f}x" for k, v in ratios.items()))
    for what, d in (("wall", parity), ("CPU", parity_cpu)):
        if d:
            print(f"python/rust, {what} time (1.00: same; goal <= 1.05):",
                  ", ".join(f"{k} {v:.3f}{'' if v <= 1.05 else ' (NOT within 5%)'}"
                            for k, v in d.items()))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
