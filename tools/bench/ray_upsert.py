#!/usr/bin/env python3
"""A distributed upsert through Ray's sink: the tasks write (staged) vs the driver applies.

    python tools/bench/ray_upsert.py [--rows N] [--changes M] [--tasks T] [--cpus C]
        [--engine replace|aggregate]

Run with a python that has the floe wheel (release build for figures: `pip install .`) and
`ray[data]` (tools/python/setup.sh's venv). A keyed table (id long, v string, ver long;
version column ver) holds N rows; M changes (half updates of stored keys, half new keys,
one row per key; each `v` W bytes longer, to weigh the rows) arrive as a Ray Dataset of T blocks (made in Ray tasks, so the driver does
not hold them) and are upserted through
`floe.ray.FloeDatasink(mode="upsert")`:
  * staged: the sink's default for the replace engine: each task folds its rows and writes
    them as data files with a key list; the driver folds key lists only and commits once;
    with `--engine aggregate` (hits = sum, users = count_distinct:user, v = last; the
    table's rows loaded by an upsert) the sink's shuffle: each task folds its rows by key
    and splits them into shards, a Ray task per shard merges it with the stored rows and
    writes the new rows, the driver commits once;
  * driver: the tasks hand their rows to the driver (the path of evolve_schema), which
    applies them as one `Table.upsert`;
  * single: one `Table.upsert` of the same rows in one process, no Ray (the baseline).
Each variant runs in its own process (a fresh table cloned from the same base, zero-copy),
and reports wall time (for Ray: the write, from the sink's creation, with the driver's
`on_write_complete` on its own) and the driver process's peak RSS (VmHWM of /proc/self/status:
ru_maxrss would carry the parent's peak, which Linux folds into a child's at exec); the ratios are against
`single`. The rows of the three tables are compared at the end: they must be equal.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pyarrow as pa


def changes(rows: int, m: int, width: int = 0, engine: str = "replace") -> pa.Table:
    half = m // 2
    ids = list(range(0, 2 * half, 2)) + list(range(rows, rows + m - half))
    pad = "x" * width
    cols = {"id": pa.array(ids, pa.int64()), "v": [f"new{i}{pad}" for i in ids]}
    if engine == "aggregate":
        cols["hits"] = pa.array([1] * len(ids), pa.int64())
        cols["user"] = pa.array([i % 1000 for i in ids], pa.int64())
    else:
        cols["ver"] = pa.array([2] * len(ids), pa.int64())
    return pa.table(cols)


def peak_rss() -> int:
    """This process's peak resident set (bytes) since its exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def run_variant(args: argparse.Namespace) -> None:
    import floe
    cat = floe.load_catalog("default", warehouse=args.warehouse, create=False)
    name = f"db.{args.variant}"
    commit_s = 0.0
    if args.variant == "single":
        data = changes(args.rows, args.changes, args.width, args.engine)
        t0 = time.perf_counter()
        cat.load_table(name).upsert(data)
    else:
        import ray
        import floe.ray as fr
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        rows, m, tasks, width, engine = args.rows, args.changes, args.tasks, args.width, args.engine

        # The rows are made in the tasks (block i: the i-th slice of `changes`), not in
        # the driver, whose memory then holds what the sink sends it and nothing else.
        def block(batch):
            i = int(batch["id"][0])
            full = changes(rows, m, width, engine)
            per = -(-m // tasks)
            return full.slice(i * per, per)

        ds = ray.data.range(tasks, override_num_blocks=tasks).map_batches(
            block, batch_size=1, batch_format="pyarrow")
        ds = ds.materialize()

        class Timed(fr.FloeDatasink):
            def on_write_complete(self, write_result):
                nonlocal commit_s
                c = time.perf_counter()
                super().on_write_complete(write_result)
                commit_s = time.perf_counter() - c

        t0 = time.perf_counter()
        sink = Timed(cat, name, mode="upsert")
        if args.variant == "driver":
            sink.staged_upsert = sink.shuffled = False
        ds.write_datasink(sink)
    wall = time.perf_counter() - t0
    rss = peak_rss()
    print(json.dumps({"variant": args.variant, "wall_s": wall, "commit_s": commit_s,
                      "driver_peak_rss": rss}))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--changes", type=int, default=1_000_000)
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--width", type=int, default=0, help="extra bytes of each change's v")
    p.add_argument("--engine", choices=("replace", "aggregate"), default="replace")
    p.add_argument("--variant")
    p.add_argument("--warehouse")
    args = p.parse_args()
    if args.variant:
        return run_variant(args)
    import floe
    work = tempfile.mkdtemp(prefix="floe-ray-bench-")
    try:
        wh = os.path.join(work, "wh")
        cat = floe.load_catalog("default", warehouse=wh, create=True)
        ids = pa.array(range(args.rows), pa.int64())
        old = [f"old{i}" for i in range(args.rows)]
        if args.engine == "aggregate":
            base = cat.create_table(
                "db.base", schema="id long not null, v string, hits long, users long",
                primary_key="id", format_version=3,
                properties={"floe.merge-engine": "aggregate", "floe.aggregate.v": "last",
                            "floe.aggregate.hits": "sum",
                            "floe.aggregate.users": "count_distinct:user",
                            "write.merge.mode": "merge-on-read"})
            base.upsert(pa.table({"id": ids, "v": old,
                                  "hits": pa.array([1] * args.rows, pa.int64()),
                                  "user": pa.array([i % 1000 for i in range(args.rows)],
                                                   pa.int64())}))
        else:
            base = cat.create_table("db.base", schema="id long not null, v string, ver long",
                                    primary_key="id", format_version=3,
                                    properties={"floe.merge.version-column": "ver",
                                                "write.merge.mode": "merge-on-read"})
            base.append(pa.table({"id": ids, "v": old,
                                  "ver": pa.array([1] * args.rows, pa.int64())}))
        results = {}
        for variant in ("single", "staged", "driver"):
            base.clone(f"db.{variant}")
            out = subprocess.run(
                [sys.executable, __file__, "--variant", variant, "--warehouse", wh,
                 "--rows", str(args.rows), "--changes", str(args.changes),
                 "--tasks", str(args.tasks), "--cpus", str(args.cpus),
                 "--width", str(args.width), "--engine", args.engine],
                check=True, capture_output=True, text=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results[variant] = r
            print(f"{variant:7s} {r['wall_s']:7.2f} s (driver's on_write_complete "
                  f"{r['commit_s']:.2f} s)  driver peak RSS "
                  f"{r['driver_peak_rss'] / 2**20:7.0f} MiB", flush=True)
        s = results["single"]
        for v in ("staged", "driver"):
            r = results[v]
            print(f"{v}/single: time {r['wall_s'] / s['wall_s']:.2f}x, driver peak RSS "
                  f"{r['driver_peak_rss'] / s['driver_peak_rss']:.2f}x")
        print(f"staged/driver: time {results['staged']['wall_s'] / results['driver']['wall_s']:.2f}x, "
              f"driver peak RSS {results['staged']['driver_peak_rss'] / results['driver']['driver_peak_rss']:.2f}x")
        want = None
        for v in ("single", "staged", "driver"):
            got = cat.load_table(f"db.{v}").scan().to_arrow().sort_by("id")
            if want is None:
                want = got
            elif not got.equals(want):
                sys.exit(f"the {v} table's rows differ from single's")
        print(f"rows equal: {want.num_rows} in each table")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
