#!/usr/bin/env python3
"""Baseline for floe's compaction benchmark: Spark 3.5.8 + Iceberg 1.10.2
`rewrite_data_files` on a table in a Hadoop (filesystem) catalog.

    python baseline_spark_rewrite.py --warehouse DIR [--table bench.small]
        [--option rewrite-all=true --option target-file-size-bytes=134217728 ...]

Opens the local[2] Spark session of tools/peers/floe_peers.py with the hadoop catalog
`local` rooted at DIR, then times ONLY

    spark.sql("CALL local.system.rewrite_data_files(table => '<table>',
               options => map(<options>))").collect()

(wall clock, time.perf_counter; JVM start and session creation are reported separately
as `session_s`, not included). Afterwards, untimed: the live files of the table by content
(`<table>.files`), the row count, and the size of the data files. Prints one JSON object:

    {"seconds", "rewritten_data_files_count", "added_data_files_count",
     "rewritten_bytes_count", "removed_delete_files_count", "failed_data_files_count",
     "live_delete_files_after", "live_data_files_after", "data_bytes_after",
     "rows_after", "session_s", "options", "table", "versions"}

Progress goes to stderr. Nothing is cached: the caller hands in a fresh copy of the table
(the procedure commits to it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))

import floe_peers  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--table", default="bench.small")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()

    options = {}
    for kv in args.option or ["rewrite-all=true", "target-file-size-bytes=134217728"]:
        k, _, v = kv.partition("=")
        options[k] = v
    opt_sql = ", ".join(f"'{k}', '{v}'" for k, v in options.items())
    table = f"local.{args.table}"
    call = f"CALL local.system.rewrite_data_files(table => '{args.table}', options => map({opt_sql}))"

    t0 = time.perf_counter()
    spark = floe_peers.spark_session(warehouse=os.path.abspath(args.warehouse), app="floe-bench-rewrite")
    session_s = time.perf_counter() - t0
    try:
        print(f"[spark rewrite] session in {session_s:.1f}s; {call}", file=sys.stderr)
        t = time.perf_counter()
        rows = spark.sql(call).collect()
        seconds = time.perf_counter() - t
        r = rows[0].asDict() if rows else {}
        print(f"[spark rewrite] {seconds:.2f}s {r}", file=sys.stderr)

        by_content = {
            int(x["content"]): (int(x["n"]), int(x["b"] or 0))
            for x in spark.sql(
                f"SELECT content, count(*) AS n, sum(file_size_in_bytes) AS b FROM {table}.files GROUP BY content"
            ).collect()
        }
        rows_after = spark.sql(f"SELECT count(*) AS n FROM {table}").collect()[0]["n"]
        out = {
            "seconds": seconds,
            "rewritten_data_files_count": r.get("rewritten_data_files_count"),
            "added_data_files_count": r.get("added_data_files_count"),
            "rewritten_bytes_count": r.get("rewritten_bytes_count"),
            "removed_delete_files_count": r.get("removed_delete_files_count"),
            "failed_data_files_count": r.get("failed_data_files_count"),
            "live_data_files_after": by_content.get(0, (0, 0))[0],
            "data_bytes_after": by_content.get(0, (0, 0))[1],
            "live_delete_files_after": sum(n for c, (n, _) in by_content.items() if c != 0),
            "live_position_delete_files_after": by_content.get(1, (0, 0))[0],
            "live_equality_delete_files_after": by_content.get(2, (0, 0))[0],
            "rows_after": rows_after,
            "session_s": session_s,
            "options": options,
            "table": args.table,
            "versions": {"spark": spark.version, "iceberg_runtime": floe_peers.RUNTIME_JAR_NAME},
        }
    finally:
        spark.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
