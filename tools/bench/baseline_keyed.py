#!/usr/bin/env python3
"""Baselines for floe's keyed-table (CDC upsert) benchmark (benches/keyed.rs).

    <peers-venv>/bin/python tools/bench/baseline_keyed.py chdb --data DIR --changes DIR
        [--big N] [--small M] [--work DIR] [--threads 2] [--repeat 3]
    <peers-venv>/bin/python tools/bench/baseline_keyed.py pyiceberg --data DIR --changes DIR
        [--batches 2] [--work DIR]

--data: the gen_data.py files (*.parquet, sorted by name; 20 files of rows/20 rows), the
starting table: every row gets `ver = 1` and `is_deleted = 0`. --changes: the change
batches written by the benchmark (`batch-00001.parquet` ...: id, k, a, b, s1, s2, ts, d,
ver long, is_deleted int; keys unique within a batch) and, for pyiceberg, `pyi-00001.parquet`
... (the same batches folded to their live upserts: the updates and inserts that win, no
deletes, no late replays, since pyiceberg's upsert can only do last-write-wins).

chdb (ClickHouse 26.9 in-process, chdb 4.4.0): a session in --work (or a temp dir);
`CREATE TABLE bench.t (...) ENGINE = ReplacingMergeTree(ver, is_deleted) ORDER BY id`,
the starting rows inserted from the --data files and merged with `OPTIMIZE TABLE ... FINAL`
(untimed, `load_s`), then ONE `INSERT INTO bench.t SELECT ... FROM file(batch, Parquet)` per
batch, each timed (`insert_s`: the first --big batches; `small_insert_s`: the next --small
ones). The current state is read with `SELECT count(), sum(k), sum(ver) FROM bench.t FINAL`
after the big batches (best of --repeat, `final_s`; `state_big`) and after all batches
(`state_all`). Background merges run as ClickHouse schedules them (`parts_before_final`:
active parts when the timed read starts). `SET max_threads = --threads`.

pyiceberg 0.12: a fresh format-v2 table (zstd level 1) in a SqlCatalog on SQLite, loaded
untimed with one transaction of one `append` per --data file; then per batch (the first
--batches) `tbl.upsert(pyi_batch, join_cols=["id"])`, each timed (the Parquet read is not).

Prints one JSON object on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import shutil
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq


def log(msg: str) -> None:
    print(f"[baseline_keyed] {msg}", file=sys.stderr, flush=True)


def lit(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def batch_files(changes: str, prefix: str) -> list[str]:
    return sorted(glob.glob(os.path.join(changes, f"{prefix}-*.parquet")))


COLUMNS = "id, k, a, b, s1, s2, ts, d, ver, toUInt8(is_deleted)"
DDL = (
    "id Int64, k Int64, a Float64, b Float64, s1 String, s2 String, ts DateTime64(6), d Date32, "
    "ver Int64, is_deleted UInt8"
)


def run_chdb(args) -> dict:
    import chdb
    import chdb.session as chs

    data = sorted(glob.glob(os.path.join(args.data, "*.parquet")))
    batches = batch_files(args.changes, "batch")
    need = args.big + args.small
    if len(batches) < need:
        raise SystemExit(f"{args.changes}: {len(batches)} batch files, need {need}")
    tmp = None
    if args.work:
        work = os.path.abspath(args.work)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
    else:
        tmp = tempfile.mkdtemp(prefix="floe-bench-chdb-")
        work = tmp
    sess = chs.Session(os.path.join(work, "session"))
    settings = f"SETTINGS max_threads = {args.threads}"

    def q(sql: str):
        return sess.query(sql)

    def rows(sql: str):
        r = sess.query(sql + f" {settings}, output_format_json_quote_64bit_integers = 0", "JSONCompact")
        return json.loads(str(r))["data"]

    def state() -> dict:
        (c, sk, sv), = rows("SELECT count(), sum(k), sum(ver) FROM bench.t FINAL")
        return {"rows": int(c), "sum_k": int(sk), "sum_ver": int(sv)}

    def parts() -> int:
        return int(rows("SELECT count() FROM system.parts WHERE database = 'bench' AND table = 't' AND active")[0][0])

    try:
        q(f"SET max_threads = {args.threads}")
        q("CREATE DATABASE IF NOT EXISTS bench")
        q(f"CREATE TABLE bench.t ({DDL}) ENGINE = ReplacingMergeTree(ver, is_deleted) ORDER BY id")
        t0 = time.perf_counter()
        for f in data:
            q(
                "INSERT INTO bench.t SELECT id, k, a, b, s1, s2, ts, d, toInt64(1), toUInt8(0) "
                f"FROM file({lit(f)}, Parquet) {settings}"
            )
        q("OPTIMIZE TABLE bench.t FINAL")
        load_s = time.perf_counter() - t0
        start = state()
        log(f"loaded {start['rows']} rows from {len(data)} files in {load_s:.1f}s ({parts()} parts)")

        def insert(f: str) -> tuple[float, float]:
            c0 = time.process_time()
            t = time.perf_counter()
            q(f"INSERT INTO bench.t SELECT {COLUMNS} FROM file({lit(f)}, Parquet) {settings}")
            return time.perf_counter() - t, time.process_time() - c0

        ins, ins_cpu = [], []
        for i, f in enumerate(batches[: args.big], start=1):
            s, c = insert(f)
            ins.append(round(s, 5))
            ins_cpu.append(round(c, 5))
            if i % 10 == 0 or i == args.big:
                log(f"insert {i}/{args.big}: {s:.3f}s")
        parts_before = parts()
        final_runs = []
        st_big = None
        for _ in range(args.repeat):
            t = time.perf_counter()
            st_big = state()
            final_runs.append(round(time.perf_counter() - t, 5))
        log(f"FINAL after {args.big} batches: {st_big} best {min(final_runs):.3f}s ({parts_before} parts before)")
        small = []
        for f in batches[args.big : need]:
            s, _ = insert(f)
            small.append(round(s, 5))
        st_all = state()
        out = {
            "load_s": round(load_s, 3),
            "start": start,
            "insert_s": ins,
            "insert_cpu_s": ins_cpu,
            "insert_rows": [pq.read_metadata(f).num_rows for f in batches[: args.big]],
            "parts_before_final": parts_before,
            "final_s": min(final_runs),
            "final_runs": final_runs,
            "state_big": st_big,
            "small_insert_s": small,
            "state_all": st_all,
            "threads": args.threads,
            "versions": {
                "chdb": chdb.__version__,
                "clickhouse": str(sess.query("SELECT version()", "CSV")).strip().strip('"'),
                "python": sys.version.split()[0],
            },
            "cpu_count": os.cpu_count(),
        }
        return out
    finally:
        sess.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def iceberg_schema_for(arrow_schema: pa.Schema):
    """Iceberg schema with field ids 1..n in column order (nullability as in Arrow)."""
    from pyiceberg.io.pyarrow import visit_pyarrow, _ConvertToIcebergWithoutIDs  # type: ignore
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    fields = []
    for i, f in enumerate(arrow_schema, start=1):
        itype = visit_pyarrow(f.type, _ConvertToIcebergWithoutIDs())
        fields.append(NestedField(field_id=i, name=f.name, field_type=itype, required=not f.nullable))
    return Schema(*fields)


def run_pyiceberg(args) -> dict:
    import pyiceberg
    from pyiceberg.catalog.sql import SqlCatalog

    data = sorted(glob.glob(os.path.join(args.data, "*.parquet")))
    pyi = batch_files(args.changes, "pyi")[: args.batches]
    if len(pyi) < args.batches:
        raise SystemExit(f"{args.changes}: {len(pyi)} pyi-*.parquet files, need {args.batches}")
    t = time.perf_counter()
    parts = []
    for f in data:
        p = pq.read_table(f)
        n = p.num_rows
        p = p.append_column("ver", pa.array([1] * n, pa.int64()))
        p = p.append_column("is_deleted", pa.array([0] * n, pa.int32()))
        parts.append(p)
    sources = [pq.read_table(f) for f in pyi]
    read_s = time.perf_counter() - t
    rows = sum(p.num_rows for p in parts)
    # The batches' schema (same columns and types as the table's rows).
    schema_arrow = sources[0].schema if sources else parts[0].schema
    parts = [p.cast(schema_arrow) for p in parts]
    log(f"read {rows} rows from {len(data)} files and {len(sources)} batches in {read_s:.1f}s")

    tmp = None
    if args.work:
        work = os.path.abspath(args.work)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
    else:
        tmp = tempfile.mkdtemp(prefix="floe-bench-pyi-keyed-")
        work = tmp
    try:
        catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{os.path.join(work, 'catalog.db')}", warehouse=f"file://{work}/warehouse"
        )
        catalog.create_namespace("bench")
        props = {
            "format-version": "2",
            "write.parquet.compression-codec": "zstd",
            "write.parquet.compression-level": "1",
        }
        tbl = catalog.create_table("bench.t", schema=iceberg_schema_for(schema_arrow), properties=props)
        t0 = time.perf_counter()
        with tbl.transaction() as tx:
            for p in parts:
                tx.append(p)
        load_s = time.perf_counter() - t0
        del parts
        gc.collect()
        tbl = catalog.load_table("bench.t")
        log(f"table loaded in {load_s:.1f}s")
        runs = []
        for i, src in enumerate(sources, start=1):
            gc.collect()
            before = tbl.current_snapshot()
            c0 = time.process_time()
            t0 = time.perf_counter()
            res = tbl.upsert(src, join_cols=["id"])
            secs = time.perf_counter() - t0
            cpu = time.process_time() - c0
            tbl = catalog.load_table("bench.t")
            snaps = []
            s = tbl.current_snapshot()
            while s is not None and (before is None or s.snapshot_id != before.snapshot_id):
                snaps.append(s)
                s = tbl.snapshot_by_id(s.parent_snapshot_id) if s.parent_snapshot_id is not None else None
            added = sum(int((x.summary.get("added-files-size") if x.summary else None) or 0) for x in snaps)
            total = int(tbl.current_snapshot().summary.get("total-records") or 0)
            r = {
                "seconds": round(secs, 4),
                "cpu_seconds": round(cpu, 4),
                "source_rows": src.num_rows,
                "rows_updated": res.rows_updated,
                "rows_inserted": res.rows_inserted,
                "bytes": added,
                "snapshots": len(snaps),
                "total_records": total,
            }
            log(f"upsert {i}: {r}")
            runs.append(r)
        return {
            "rows": rows,
            "load_s": round(load_s, 3),
            "batches": runs,
            "versions": {"pyiceberg": pyiceberg.__version__, "pyarrow": pa.__version__, "python": sys.version.split()[0]},
            "cpu_count": os.cpu_count(),
        }
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine", choices=["chdb", "pyiceberg"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--changes", required=True)
    ap.add_argument("--work")
    ap.add_argument("--big", type=int, default=50, help="chdb: 100k batches (timed, then FINAL)")
    ap.add_argument("--small", type=int, default=0, help="chdb: further (small) batches, then FINAL")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batches", type=int, default=2, help="pyiceberg: batches to upsert")
    args = ap.parse_args(argv)
    out = run_chdb(args) if args.engine == "chdb" else run_pyiceberg(args)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
