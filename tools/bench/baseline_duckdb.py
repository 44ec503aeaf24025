#!/usr/bin/env python3
"""DuckDB iceberg_scan baseline for floe's scan benchmark.

    <peers-venv>/bin/python tools/bench/baseline_duckdb.py --metadata PATH [--threads 2] [--repeat 3]

PATH is an Iceberg table's metadata JSON (a plain path or a file:// URI; a
file:// prefix is stripped). Times

    SELECT max(id),max(k),max(a),max(b),max(s1),max(s2),max(ts),max(d) FROM iceberg_scan(PATH)

with `SET threads=N`, after one untimed warm-up run, best (minimum) of --repeat
runs (wall time of execute + fetchall, one result row). The row count comes from
an untimed `SELECT count(*) FROM iceberg_scan(PATH)`.

With `--where COND` (the clustering benchmark's lookups) the query is instead
`SELECT count(*), sum(id) FROM iceberg_scan(PATH) WHERE COND`, and `rows` is its count.

The avro and iceberg extensions are loaded by path from the pinned
duckdb-extension-avro / duckdb-extension-iceberg wheels (avro first), on a
connection with autoinstall/autoload of known extensions disabled: nothing is
downloaded and ~/.duckdb is not used.

Prints one JSON object on stdout:
  {"duckdb_scan_s", "rows", "runs": [wall s], "cpu_runs": [process CPU s], "warmup_s", "threads", "metadata",
   "result": [the 8 maxima as strings], "versions": {...}}
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

QUERY_COLS = ["id", "k", "a", "b", "s1", "s2", "ts", "d"]


def extension_path(name: str) -> str:
    import duckdb

    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"python package duckdb-extension-{name} is not installed in {sys.prefix}")
    pkg = list(spec.submodule_search_locations)[0]
    path = os.path.join(pkg, "extensions", f"v{duckdb.__version__}", f"{name}.duckdb_extension")
    if not os.path.exists(path):
        raise SystemExit(f"{path} missing: the {name} extension wheel must match duckdb {duckdb.__version__}")
    return path


def connect(threads: int):
    import duckdb

    con = duckdb.connect(
        database=":memory:",
        config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"},
    )
    for name in ("avro", "iceberg"):  # avro first: iceberg's init would otherwise try to install it
        con.execute(f"LOAD '{extension_path(name)}'")
    con.execute(f"SET threads={int(threads)}")
    return con


def sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metadata", required=True, help="path (or file:// URI) of the table's *.metadata.json")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs after the warm-up; best is reported")
    ap.add_argument("--where", help="a filter: time SELECT count(*), sum(id) ... WHERE it instead")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.threads < 1:
        ap.error("--repeat and --threads must be >= 1")

    import duckdb

    path = args.metadata
    if path.startswith("file://"):
        path = path[len("file://"):]
    path = os.path.abspath(path)
    if not os.path.exists(path):
        ap.error(f"{path} does not exist")

    con = connect(args.threads)
    src = f"iceberg_scan({sql_str(path)})"
    if args.where:
        query = f"SELECT count(*), sum(id) FROM {src} WHERE {args.where}"
    else:
        query = "SELECT " + ",".join(f"max({c})" for c in QUERY_COLS) + f" FROM {src}"

    t0 = time.perf_counter()
    result = con.execute(query).fetchall()
    warmup_s = time.perf_counter() - t0

    runs, cpu_runs = [], []
    for _ in range(args.repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        result = con.execute(query).fetchall()
        runs.append(time.perf_counter() - t0)
        cpu_runs.append(time.process_time() - c0)
        print(f"[baseline_duckdb] scan: {runs[-1]:.3f}s", file=sys.stderr, flush=True)

    if args.where:
        rows = result[0][0]
    else:
        rows = con.execute(f"SELECT count(*) FROM {src}").fetchone()[0]

    out = {
        "duckdb_scan_s": round(min(runs), 4),
        "rows": int(rows),
        "runs": [round(x, 4) for x in runs],
        "cpu_runs": [round(x, 4) for x in cpu_runs],
        "warmup_s": round(warmup_s, 4),
        "threads": args.threads,
        "metadata": path,
        "query": query,
        "result": [str(v) for v in result[0]],
        "versions": {"duckdb": duckdb.__version__, "python": sys.version.split()[0]},
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
