#!/usr/bin/env python3
"""Reference result of keyed dedup ("keep the highest version per key"), computed by DuckDB.

    python tools/bench/dedup_reference.py OUT_PARQUET --key date,product_id,store_id,attribute_id \\
        --version update_id [--threads N] FILE_OR_GLOB...

    # e.g. all snapshots of a gen_snapshots.py data set, in arrival order:
    python tools/bench/dedup_reference.py /tmp/ref.parquet --key date,product_id,store_id,attribute_id \\
        --version update_id '/tmp/snaps/snap-0/*.parquet' '/tmp/snaps/snap-1/*.parquet' ...

Reads the given Parquet files (a glob expands to its matches in sorted order; quote it
so the shell does not expand it). Arrival order = argument order, and within a file,
row order. Writes to OUT_PARQUET (zstd) the rows of

    QUALIFY ROW_NUMBER() OVER (PARTITION BY <key>
                               ORDER BY <version> DESC, <file index> DESC, <row in file> DESC) = 1

i.e. per key the row with the highest version, and among equal versions the one that
arrived last. Keys absent from later files are kept. NULL versions sort last (lose to
any non-NULL version); NULL key values form their own group. The output has the input
columns in input order (the helper columns are dropped), ordered by the key. A path
given more than once counts at its last position.

Prints one JSON object on stdout:

    {"out", "rows", "input_rows", "input_files", "key", "version", "seconds", "duckdb"}
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

import duckdb


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--key", required=True, help="comma-separated key columns")
    ap.add_argument("--version", required=True, help="version column (highest wins)")
    ap.add_argument("--threads", type=int, default=0, help="DuckDB threads (0 = DuckDB's default)")
    ap.add_argument("inputs", nargs="+", metavar="FILE_OR_GLOB")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    files: list[str] = []
    for arg in args.inputs:
        if glob.has_magic(arg):
            matches = sorted(glob.glob(arg))
            if not matches:
                ap.error(f"no file matches {arg!r}")
            files.extend(os.path.abspath(m) for m in matches)
        else:
            if not os.path.isfile(arg):
                ap.error(f"no such file: {arg}")
            files.append(os.path.abspath(arg))
    # arrival index per file: its last position in the argument order
    index = {f: i for i, f in enumerate(files)}
    unique_files = sorted(index, key=index.get)

    key = [k.strip() for k in args.key.split(",") if k.strip()]
    if not key:
        ap.error("--key is empty")

    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": "false",
                                              "autoload_known_extensions": "false"})
    if args.threads > 0:
        con.execute(f"SET threads = {int(args.threads)}")
    con.execute("CREATE TEMP TABLE __floe_arrival (__floe_file VARCHAR, __floe_file_idx BIGINT)")
    con.executemany("INSERT INTO __floe_arrival VALUES (?, ?)", [(f, index[f]) for f in unique_files])

    src = ("read_parquet(?, filename = '__floe_filename', file_row_number = true)")
    # the input's own columns, in order (file_row_number is appended by DuckDB)
    cols = [d[0] for d in con.execute(f"SELECT * FROM {src} LIMIT 0", [unique_files]).description]
    cols = [c for c in cols if c not in ("__floe_filename", "file_row_number")]
    for c in key + [args.version]:
        if c not in cols:
            ap.error(f"column {c!r} not in the input (columns: {cols})")
    if "file_row_number" in cols:
        ap.error("the input has a column named file_row_number, which this script uses internally")

    sel = ", ".join(quote_ident(c) for c in cols)
    part = ", ".join(quote_ident(c) for c in key)
    ver = quote_ident(args.version)
    query = f"""
        SELECT {sel} FROM (
            SELECT r.*, a.__floe_file_idx
            FROM {src} r JOIN __floe_arrival a ON r.__floe_filename = a.__floe_file
        )
        QUALIFY ROW_NUMBER() OVER (PARTITION BY {part}
                                   ORDER BY {ver} DESC NULLS LAST, __floe_file_idx DESC, file_row_number DESC) = 1
        ORDER BY {part}
    """
    out = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = out + ".tmp"
    out_sql = tmp.replace("'", "''")
    con.execute(f"COPY ({query}) TO '{out_sql}' (FORMAT parquet, COMPRESSION zstd)", [unique_files])
    os.replace(tmp, out)
    rows = con.execute("SELECT count(*) FROM read_parquet(?)", [out]).fetchone()[0]
    input_rows = con.execute(f"SELECT count(*) FROM {src} r JOIN __floe_arrival a ON r.__floe_filename = a.__floe_file",
                             [unique_files]).fetchone()[0]
    print(json.dumps({"out": out, "rows": rows, "input_rows": input_rows, "input_files": len(files),
                      "key": key, "version": args.version, "seconds": round(time.perf_counter() - t0, 3),
                      "duckdb": duckdb.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
