#!/usr/bin/env python3
"""Metadata tables as pyiceberg and Spark read them, for floe's comparison test.

    python metadata_tables.py WAREHOUSE NS.TABLE METADATA_JSON SPEC_JSON

SPEC_JSON is a list of queries, each
{"key": "files@123", "table": "files", "cols": ["file_path", "data_file.partition"],
 "snapshot": 123 or null, "engines": ["spark", "pyiceberg"]}.
A column may be a dotted path into a struct (`data_file.record_count`). Prints one JSON
object {"pyiceberg": {key: [rows]}, "spark": {key: [rows]}}, each row a list of values in the
columns' order, rows sorted. Values are canonical JSON: maps and structs as objects with
string keys (sorted), binary as lowercase hex, timestamps as microseconds since the epoch
(UTC), dates as ISO strings, file paths without the file:// scheme.
pyiceberg reads the metadata file (StaticTable, `inspect.<table>(snapshot_id=...)`), Spark the
table through its hadoop catalog rooted at WAREHOUSE (`local.NS.TABLE.<table>`, with
`VERSION AS OF` for a snapshot). FLOE_PEERS_NO_SPARK=1 leaves Spark out.
"""

import datetime
import decimal
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def canon(v):
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, float):
        return int(v) if v.is_integer() else v
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        return v[len("file://"):] if v.startswith("file://") else v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        d = v - EPOCH
        return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if hasattr(v, "asDict"):  # a Spark Row
        return canon(v.asDict(recursive=False))
    if isinstance(v, dict):
        return {str(k): canon(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        # pyarrow hands maps over as lists of (key, value) tuples.
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            return {str(k): canon(x) for k, x in sorted(v, key=lambda kv: str(kv[0]))}
        return [canon(x) for x in v]
    return str(v)


def pick(rec, col):
    for part in col.split("."):
        if rec is None:
            return None
        if hasattr(rec, "asDict"):
            rec = rec.asDict(recursive=False)
        rec = rec.get(part)
    return rec


def arrow_type(schema, col):
    """The pyarrow type of dotted column `col` (None when absent)."""
    import pyarrow as pa

    t = pa.struct(list(schema))
    for part in col.split("."):
        if not pa.types.is_struct(t) or t.get_field_index(part) < 0:
            return None
        t = t.field(part).type
    return t


def rows_of(recs, cols, schema=None):
    import pyarrow as pa

    maps = set()
    if schema is not None:
        # pyarrow hands an empty map over as [], like an empty list.
        maps = {c for c in cols if (t := arrow_type(schema, c)) is not None and pa.types.is_map(t)}

    def one(r, c):
        v = pick(r, c)
        return {} if c in maps and v == [] else canon(v)

    out = [[one(r, c) for c in cols] for r in recs]
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True))


def main(argv):
    warehouse, table, metadata, spec_path = argv[1:5]
    with open(spec_path) as f:
        spec = json.load(f)
    out = {"pyiceberg": {}, "spark": {}}
    from pyiceberg.table import StaticTable

    t = StaticTable.from_metadata(metadata)
    for q in spec:
        if "pyiceberg" not in q["engines"]:
            continue
        fn = getattr(t.inspect, q["table"])
        tbl = fn(snapshot_id=q["snapshot"]) if q.get("snapshot") is not None else fn()
        out["pyiceberg"][q["key"]] = rows_of(tbl.to_pylist(), q["cols"], tbl.schema)
    if os.environ.get("FLOE_PEERS_NO_SPARK") != "1":
        import floe_peers

        spark = floe_peers.spark_session(warehouse=warehouse, app="floe-metadata-tables")
        try:
            for q in spec:
                if "spark" not in q["engines"]:
                    continue
                sql = f"SELECT * FROM local.{table}.{q['table']}"
                if q.get("snapshot") is not None:
                    sql += f" VERSION AS OF {q['snapshot']}"
                recs = spark.sql(sql).collect()
                out["spark"][q["key"]] = rows_of(recs, q["cols"])
        finally:
            spark.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
