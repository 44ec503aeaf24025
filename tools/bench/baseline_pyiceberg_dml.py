#!/usr/bin/env python3
"""pyiceberg baseline for floe's row-level-change benchmark (benches/dml.rs).

    <peers-venv>/bin/python tools/bench/baseline_pyiceberg_dml.py --data DIR [--work DIR]
        [--ops delete,upsert] [--source MERGE.parquet] [--delete-mod 1000] [--delete-rem 7]

DIR (--data) holds the gen_data.py files (*.parquet, sorted by name; the benchmark
uses 20 files of 500,000 rows). Each file is read into its own Arrow table before
anything is timed. Per operation, a fresh format-v2 table (zstd level 1, other write
properties pyiceberg's defaults) is created in a SqlCatalog (SQLite --work/catalog.db,
warehouse file://--work/warehouse; a temp dir that is removed when --work is not given)
and loaded with ONE transaction of one `append` per input file, so the table holds one
data file per input file, like floe's tables (untimed; reported as `load_table_s`).

  delete  tbl.delete(In("id", ids)) with ids = every id in 0..rows-1 with
          id % delete-mod == delete-rem (10,000 ids for 10M rows). pyiceberg
          only does copy-on-write: every data file holding one of them is rewritten.
  upsert  tbl.upsert(source, join_cols=["id"]) with the gen_dml_source.py file
          (--source; updates of existing ids + inserts of new ids).

Only the pyiceberg call is inside the timer. "bytes" = the sum of `added-files-size`
over every snapshot the call committed (pyiceberg's delete/upsert may commit more than
one); the checks compare the table's `total-records` with the expected count.

Prints one JSON object on stdout:
  {"rows", "input_files", "load_s",
   "delete": {"seconds", "cpu_seconds", "bytes", "snapshots", "added_data_files",
              "removed_data_files", "deleted_records", "ids", "load_table_s"},
   "upsert": {"seconds", "cpu_seconds", "bytes", "snapshots", "added_data_files",
              "removed_data_files", "rows_updated", "rows_inserted", "source_rows",
              "load_table_s"},
   "versions", "cpu_count"}
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
    print(f"[baseline_pyiceberg_dml] {msg}", file=sys.stderr, flush=True)


def iceberg_schema_for(arrow_schema: pa.Schema):
    """Iceberg schema with field ids 1..n in column order, all optional (like the Parquet input)."""
    from pyiceberg.io.pyarrow import visit_pyarrow, _ConvertToIcebergWithoutIDs  # type: ignore
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    fields = []
    for i, f in enumerate(arrow_schema, start=1):
        itype = visit_pyarrow(f.type, _ConvertToIcebergWithoutIDs())
        fields.append(NestedField(field_id=i, name=f.name, field_type=itype, required=not f.nullable))
    return Schema(*fields)


def new_snapshots(tbl, before_id):
    """Snapshots committed after `before_id` on the main branch, oldest first."""
    out = []
    s = tbl.current_snapshot()
    while s is not None and s.snapshot_id != before_id:
        out.append(s)
        s = tbl.snapshot_by_id(s.parent_snapshot_id) if s.parent_snapshot_id is not None else None
    return list(reversed(out))


def summed(snaps, key: str) -> int:
    return sum(int((s.summary.get(key) if s.summary is not None else None) or 0) for s in snaps)


def total_records(tbl) -> int:
    s = tbl.current_snapshot()
    return int(s.summary.get("total-records") or 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="directory with the gen_data.py Parquet files")
    ap.add_argument("--work", help="scratch directory for the catalog and warehouse (default: a temp dir)")
    ap.add_argument("--ops", default="delete,upsert", help="comma-separated: delete, upsert")
    ap.add_argument("--source", help="gen_dml_source.py output (needed for upsert)")
    ap.add_argument("--delete-mod", type=int, default=1000)
    ap.add_argument("--delete-rem", type=int, default=7)
    args = ap.parse_args(argv)
    ops = [o for o in args.ops.split(",") if o]
    for o in ops:
        if o not in ("delete", "upsert"):
            ap.error(f"unknown op {o!r}")
    if "upsert" in ops and not args.source:
        ap.error("--source is required for upsert")

    import pyiceberg
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.expressions import In

    files = sorted(glob.glob(os.path.join(args.data, "*.parquet")))
    if not files:
        ap.error(f"no *.parquet in {args.data}")
    t = time.perf_counter()
    parts = [pq.read_table(f) for f in files]
    load_s = time.perf_counter() - t
    rows = sum(p.num_rows for p in parts)
    log(f"loaded {rows} rows from {len(files)} files in {load_s:.2f}s")

    tmp = None
    if args.work:
        work = os.path.abspath(args.work)
        os.makedirs(work, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="floe-bench-pyi-dml-")
        work = tmp
    db = os.path.join(work, "catalog.db")
    wh = os.path.join(work, "warehouse")
    if os.path.exists(db):
        os.remove(db)
    shutil.rmtree(wh, ignore_errors=True)
    os.makedirs(wh)
    try:
        catalog = SqlCatalog("bench", uri=f"sqlite:///{db}", warehouse=f"file://{wh}")
        catalog.create_namespace("bench")
        schema = iceberg_schema_for(parts[0].schema)
        props = {
            "format-version": "2",
            "write.parquet.compression-codec": "zstd",
            "write.parquet.compression-level": "1",
        }

        def fresh(name: str):
            tbl = catalog.create_table(f"bench.{name}", schema=schema, properties=props)
            t0 = time.perf_counter()
            with tbl.transaction() as tx:
                for p in parts:
                    tx.append(p)
            dt = time.perf_counter() - t0
            tbl = catalog.load_table(f"bench.{name}")
            n_files = len(tbl.inspect.files())
            if total_records(tbl) != rows:
                raise SystemExit(f"{name}: loaded {total_records(tbl)} rows, expected {rows}")
            log(f"{name}: {rows} rows in {n_files} data files, loaded in {dt:.2f}s")
            return tbl, dt

        def timed(fn):
            gc.collect()
            c0 = time.process_time()
            t0 = time.perf_counter()
            res = fn()
            return res, time.perf_counter() - t0, time.process_time() - c0

        out: dict = {"rows": rows, "input_files": len(files), "load_s": round(load_s, 4)}

        if "delete" in ops:
            ids = list(range(args.delete_rem, rows, args.delete_mod))
            tbl, load_tbl = fresh("t_delete")
            before = tbl.current_snapshot().snapshot_id
            _, secs, cpu = timed(lambda: tbl.delete(In("id", ids)))
            tbl = catalog.load_table("bench.t_delete")
            snaps = new_snapshots(tbl, before)
            if total_records(tbl) != rows - len(ids):
                raise SystemExit(f"delete left {total_records(tbl)} rows, expected {rows - len(ids)}")
            out["delete"] = {
                "seconds": round(secs, 4),
                "cpu_seconds": round(cpu, 4),
                "bytes": summed(snaps, "added-files-size"),
                "snapshots": [s.summary.operation.value for s in snaps],
                "added_data_files": summed(snaps, "added-data-files"),
                "removed_data_files": summed(snaps, "deleted-data-files"),
                "deleted_records": summed(snaps, "deleted-records") - summed(snaps, "added-records"),
                "ids": len(ids),
                "load_table_s": round(load_tbl, 4),
            }
            log(f"delete: {out['delete']}")
            catalog.drop_table("bench.t_delete")

        if "upsert" in ops:
            src = pq.read_table(args.source)
            tbl, load_tbl = fresh("t_upsert")
            before = tbl.current_snapshot().snapshot_id
            res, secs, cpu = timed(lambda: tbl.upsert(src, join_cols=["id"]))
            tbl = catalog.load_table("bench.t_upsert")
            snaps = new_snapshots(tbl, before)
            if total_records(tbl) != rows + res.rows_inserted:
                raise SystemExit(f"upsert left {total_records(tbl)} rows, expected {rows + res.rows_inserted}")
            out["upsert"] = {
                "seconds": round(secs, 4),
                "cpu_seconds": round(cpu, 4),
                "bytes": summed(snaps, "added-files-size"),
                "snapshots": [s.summary.operation.value for s in snaps],
                "added_data_files": summed(snaps, "added-data-files"),
                "removed_data_files": summed(snaps, "deleted-data-files"),
                "rows_updated": res.rows_updated,
                "rows_inserted": res.rows_inserted,
                "source_rows": src.num_rows,
                "load_table_s": round(load_tbl, 4),
            }
            log(f"upsert: {out['upsert']}")
            catalog.drop_table("bench.t_upsert")

        out["versions"] = {"pyiceberg": pyiceberg.__version__, "pyarrow": pa.__version__,
                           "python": sys.version.split()[0]}
        out["cpu_count"] = os.cpu_count()
        print(json.dumps(out))
        return 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
