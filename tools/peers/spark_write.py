#!/usr/bin/env python3
"""Spark keeps writing a table floe created in a filesystem (Hadoop) catalog.

    python spark_write.py WAREHOUSE NS.TABLE SQL_VALUES [STATEMENT ...]

Runs `INSERT INTO local.NS.TABLE VALUES <SQL_VALUES>` (skipped when SQL_VALUES is empty), then
each further STATEMENT (`{t}` stands for local.NS.TABLE), through Spark's hadoop catalog
rooted at WAREHOUSE, then prints {"rows": <count after>, "snapshots": <n>} as one JSON line.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import floe_peers  # noqa: E402


def main(argv):
    warehouse, table, values = argv[1], argv[2], argv[3]
    spark = floe_peers.spark_session(warehouse=warehouse, app="floe-spark-write")
    try:
        if values:
            spark.sql(f"INSERT INTO local.{table} VALUES {values}")
        for stmt in argv[4:]:
            spark.sql(stmt.replace("{t}", f"local.{table}"))
        rows = spark.sql(f"SELECT count(*) AS n FROM local.{table}").collect()[0]["n"]
        snaps = spark.sql(f"SELECT count(*) AS n FROM local.{table}.snapshots").collect()[0]["n"]
        print(json.dumps({"rows": rows, "snapshots": snaps}))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
