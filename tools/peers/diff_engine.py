#!/usr/bin/env python3
"""Answer many predicates over one set of rows with a reference engine, for floe's
differential tests (tests/it/differential.rs).

Usage (with the peer venv's python; see tools/peers/setup.sh):

    python tools/peers/diff_engine.py duckdb CASES.json OUT.jsonl
    python tools/peers/diff_engine.py spark  CASES.json OUT.jsonl

CASES.json:

    {"source": "/abs/rows.parquet",          # duckdb: plain Parquet, loaded into a table
     "table": "/abs/t/metadata/x.metadata.json",  # spark: also an Iceberg table (metadata file)
     "rows": 3000,                           # ids are 0..rows-1
     "cases": [{"name": "p17", "sql": "<predicate in this engine's dialect>",
                "iceberg_sql": "<spark: the same over the Iceberg table>"}, ...]}

For each case one JSON line: {"name", "count", "bitmap"} where bitmap is the hex of a
little-endian bit set of the matching ids (bit i of byte i // 8), or {"name", "error"}.
DuckDB runs with TimeZone=UTC; Spark with spark.sql.session.timeZone=UTC and ANSI off
(its default), which are the semantics floe follows.
"""

from __future__ import annotations

import json
import sys


def bitmap(ids, rows: int) -> str:
    b = bytearray((rows + 7) // 8)
    for i in ids:
        b[i // 8] |= 1 << (i % 8)
    return b.hex()


def run_duckdb(spec, out):
    import floe_peers

    con = floe_peers.duckdb_connect()
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_parquet('{spec['source']}')")
    for case in spec["cases"]:
        try:
            ids = [r[0] for r in con.execute(f"SELECT id FROM t WHERE {case['sql']}").fetchall()]
            out.write(json.dumps({"name": case["name"], "count": len(ids), "bitmap": bitmap(ids, spec["rows"])}) + "\n")
        except Exception as e:  # noqa: BLE001 - every engine error is an answer to compare
            out.write(json.dumps({"name": case["name"], "error": str(e).splitlines()[0][:300]}) + "\n")


def run_spark(spec, out):
    """Spark SQL's own semantics over the rows (plain Parquet, cached so no Parquet filter
    pushdown decides anything), then Spark reading the floe table through the Iceberg
    runtime (`<name>@iceberg`), where Iceberg Java's pruning takes part."""
    import floe_peers

    spark = floe_peers.spark_session(app="floe-diff")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    # The cache's own min/max pruning leaves NaN out; evaluate every cached row.
    spark.conf.set("spark.sql.inMemoryColumnarStorage.partitionPruning", "false")
    plain = spark.read.parquet(spec["source"]).cache()
    plain.count()
    plain.createOrReplaceTempView("t")
    spark.read.format("iceberg").load(spec["table"]).createOrReplaceTempView("ice")
    for view, suffix, key in (("t", "", "sql"), ("ice", "@iceberg", "iceberg_sql")):
        for case in spec["cases"]:
            name = case["name"] + suffix
            try:
                ids = [r[0] for r in spark.sql(f"SELECT id FROM {view} WHERE {case[key]}").collect()]
                out.write(json.dumps({"name": name, "count": len(ids), "bitmap": bitmap(ids, spec["rows"])}) + "\n")
            except Exception as e:  # noqa: BLE001
                out.write(json.dumps({"name": name, "error": str(e).splitlines()[0][:300]}) + "\n")
    spark.stop()


def main():
    engine, cases, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(cases) as f:
        spec = json.load(f)
    with open(out_path, "w") as out:
        {"duckdb": run_duckdb, "spark": run_spark}[engine](spec, out)


if __name__ == "__main__":
    sys.path.insert(0, __import__("os").path.dirname(__file__))
    main()
