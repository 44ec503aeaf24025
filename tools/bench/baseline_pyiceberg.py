#!/usr/bin/env python3
"""pyiceberg baseline for floe's append/scan benchmark.

    <peers-venv>/bin/python tools/bench/baseline_pyiceberg.py --data DIR --work DIR [--repeat 1]

DIR (--data) holds the Parquet files of gen_data.py (all *.parquet, sorted by name).
They are read into ONE in-memory Arrow table before anything is timed. Then, per
repeat, on fresh tables in a pyiceberg SqlCatalog (SQLite file --work/catalog.db,
warehouse file://--work/warehouse):

  append_unpartitioned_s  tbl.append(arrow_table), unpartitioned format-v2 table
  append_day_s            tbl.append(arrow_table), table partitioned by day(ts)
  scan_to_arrow_s         tbl.scan().to_arrow() of that repeat's unpartitioned table

Only the pyiceberg call is inside the timer (table creation is not; the append
timing includes writing the data files, the manifests and the catalog commit).
Each figure is the best (minimum) over the repeats. Written tables use zstd level 1
(write.parquet.compression-codec/-level) like the input, other write properties are
pyiceberg defaults (512 MiB target file size, 1 Mi-row row groups).

Before each timed call the page cache is flushed (os.sync(), as the floe side does),
and (except in the last repeat) each table's files are deleted once it has been measured.

--work: catalog.db and warehouse/ in it are deleted at start; the tables of the
last repeat are left there (their metadata paths are in the output, so e.g.
baseline_duckdb.py can scan them).

Prints one JSON object on stdout:
  {"append_unpartitioned_s", "append_day_s", "scan_to_arrow_s", "rows",
   "runs": {name: [wall seconds per repeat]}, "cpu_runs": {name: [process CPU
   seconds (user+sys, all threads) per repeat]}, "load_s", "repeat", "versions",
   "unpartitioned_metadata", "day_metadata", "tables": {...file counts/bytes...}}
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import shutil
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq


def log(msg: str) -> None:
    print(f"[baseline_pyiceberg] {msg}", file=sys.stderr, flush=True)


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


def snapshot_info(tbl) -> dict:
    s = tbl.current_snapshot()
    summ = s.summary if s is not None else None
    get = (lambda k: summ.get(k) if summ is not None else None)
    return {
        "data_files": int(get("added-data-files") or 0),
        "data_bytes": int(get("added-files-size") or 0),
        "records": int(get("added-records") or 0),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="directory with the gen_data.py Parquet files")
    ap.add_argument("--work", required=True, help="scratch directory for the catalog and warehouse")
    ap.add_argument("--repeat", type=int, default=1, help="repeats; best (min) is reported")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")

    import pyiceberg
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform

    files = sorted(glob.glob(os.path.join(args.data, "*.parquet")))
    if not files:
        ap.error(f"no *.parquet in {args.data}")

    t = time.perf_counter()
    table = pq.read_table(files)
    load_s = time.perf_counter() - t
    rows = table.num_rows
    log(f"loaded {rows} rows from {len(files)} files in {load_s:.2f}s ({table.nbytes / 2**20:.0f} MiB in memory)")

    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    db = os.path.join(work, "catalog.db")
    wh = os.path.join(work, "warehouse")
    if os.path.exists(db):
        os.remove(db)
    shutil.rmtree(wh, ignore_errors=True)
    os.makedirs(wh)
    catalog = SqlCatalog("bench", uri=f"sqlite:///{db}", warehouse=f"file://{wh}")
    catalog.create_namespace("bench")

    schema = iceberg_schema_for(table.schema)
    ts_id = schema.find_field("ts").field_id
    day_spec = PartitionSpec(PartitionField(source_id=ts_id, field_id=1000, transform=DayTransform(), name="ts_day"))
    props = {
        "format-version": "2",
        "write.parquet.compression-codec": "zstd",
        "write.parquet.compression-level": "1",
    }

    runs: dict[str, list[float]] = {"append_unpartitioned_s": [], "append_day_s": [], "scan_to_arrow_s": []}
    tables: dict[str, dict] = {}
    unpart_meta = day_meta = None

    cpu_runs: dict[str, list[float]] = {k: [] for k in runs}

    def timed(name: str, fn):
        gc.collect()
        os.sync()  # like the floe side: earlier writes flushed before the clock starts
        c0 = time.process_time()
        t0 = time.perf_counter()
        res = fn()
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
        runs[name].append(dt)
        cpu_runs[name].append(cpu)
        log(f"{name} #{len(runs[name])}: {dt:.3f}s wall, {cpu:.3f}s cpu")
        return res

    for r in range(args.repeat):
        # (a) unpartitioned append
        unpart = catalog.create_table(f"bench.unpart_{r}", schema=schema, properties=props)
        timed("append_unpartitioned_s", lambda: unpart.append(table))
        unpart = catalog.load_table(f"bench.unpart_{r}")
        tables["unpartitioned"] = snapshot_info(unpart)
        unpart_meta = unpart.metadata_location

        # (c) full scan of the unpartitioned table into Arrow
        got = timed("scan_to_arrow_s", lambda: unpart.scan().to_arrow())
        if got.num_rows != rows:
            raise SystemExit(f"scan returned {got.num_rows} rows, expected {rows}")
        del got
        if r + 1 < args.repeat:
            # Written data left in the page cache slows later writes: each table's files go
            # once it has been measured (the last repeat's tables stay for other scripts).
            shutil.rmtree(unpart.location().removeprefix("file://"), ignore_errors=True)

        # (b) day(ts)-partitioned append
        day = catalog.create_table(f"bench.day_{r}", schema=schema, partition_spec=day_spec, properties=props)
        timed("append_day_s", lambda: day.append(table))
        day = catalog.load_table(f"bench.day_{r}")
        tables["day"] = snapshot_info(day)
        day_meta = day.metadata_location

        if r + 1 < args.repeat:
            shutil.rmtree(day.location().removeprefix("file://"), ignore_errors=True)

    out = {k: round(min(v), 4) for k, v in runs.items()}
    out.update(
        {
            "rows": rows,
            "runs": {k: [round(x, 4) for x in v] for k, v in runs.items()},
            "cpu_runs": {k: [round(x, 4) for x in v] for k, v in cpu_runs.items()},
            "repeat": args.repeat,
            "load_s": round(load_s, 4),
            "input_files": files,
            "unpartitioned_metadata": unpart_meta,
            "day_metadata": day_meta,
            "tables": tables,
            "versions": {"pyiceberg": pyiceberg.__version__, "pyarrow": pa.__version__, "python": sys.version.split()[0]},
            "cpu_count": os.cpu_count(),
        }
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
