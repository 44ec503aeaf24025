#!/usr/bin/env python3
"""Metadata tables as pyiceberg and Spark read them, for floe's comparison test.

    python metadata_tables.py WAREHOUSE NS.TABLE METADATA_JSON SPEC_JSON

SPEC_JSON maps a metadata table name to the columns to compare, e.g.
{"snapshots": ["snapshot_id", "parent_id", "operation"]}. Prints one JSON object:
{"pyiceberg": {table: [rows]}, "spark": {table: [rows]}}, each row a list of values in the
columns' order, rows sorted. pyiceberg reads the metadata file (StaticTable, `inspect.<table>`),
Spark the table through its hadoop catalog rooted at WAREHOUSE (`local.NS.TABLE.<table>`).
FLOE_PEERS_NO_SPARK=1 leaves Spark out.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def canon(v):
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def rows_of(tbl, cols):
    d = tbl.select(cols).to_pylist()
    return sorted(([canon(r[c]) for c in cols] for r in d), key=lambda r: json.dumps(r, default=str))


def main(argv):
    warehouse, table, metadata, spec_path = argv[1:5]
    with open(spec_path) as f:
        spec = json.load(f)
    out = {"pyiceberg": {}, "spark": {}}
    from pyiceberg.table import StaticTable

    t = StaticTable.from_metadata(metadata)
    for name, cols in spec.items():
        out["pyiceberg"][name] = rows_of(getattr(t.inspect, name)(), cols)
    if os.environ.get("FLOE_PEERS_NO_SPARK") != "1":
        import floe_peers
        import pyarrow as pa

        spark = floe_peers.spark_session(warehouse=warehouse, app="floe-metadata-tables")
        try:
            for name, cols in spec.items():
                df = spark.sql(
                    "SELECT " + ", ".join(f"`{c}`" for c in cols) + f" FROM local.{table}.{name}"
                )
                recs = [r.asDict() for r in df.collect()]
                tbl = pa.Table.from_pylist(recs) if recs else pa.table({c: [] for c in cols})
                out["spark"][name] = rows_of(tbl, cols)
        finally:
            spark.stop()
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
