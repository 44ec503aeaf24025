#!/usr/bin/env python3
"""Changelogs and incremental append reads as Spark and pyiceberg produce them, for floe's
comparison test.

    python changelog.py SPEC_JSON

SPEC_JSON: {"warehouse": DIR, "table": "NS.TABLE", "metadata": METADATA_JSON,
            "columns": [data columns],
            "checks": [{"kind": "changes", "from": ID|null, "to": ID|null,
                        "identifier_columns": [..]|null, "net_changes": bool},
                       {"kind": "appends", "from": ID, "to": ID|null}]}

Prints one JSON object {"spark": [rows per check], "pyiceberg": [rows per check or null]}:
a check's rows are lists of values (the data columns, then for changes _change_type,
_change_ordinal, _commit_snapshot_id), sorted. Spark reads the table through its hadoop
catalog rooted at DIR (`CALL local.system.create_changelog_view`, and
`spark.read.option("start-snapshot-id", ..)` for appends); pyiceberg reads the metadata file
(`incremental_append_scan`; it has no changelog). FLOE_PEERS_NO_SPARK=1 leaves Spark out.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

META = ["_change_type", "_change_ordinal", "_commit_snapshot_id"]


def canon(v):
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def sorted_rows(rows):
    return sorted(rows, key=lambda r: json.dumps(r, default=str))


def spark_checks(spec):
    import floe_peers

    spark = floe_peers.spark_session(warehouse=spec["warehouse"], app="floe-changelog")
    out = []
    try:
        cols = spec["columns"]
        table = spec["table"]
        for i, c in enumerate(spec["checks"]):
            if c["kind"] == "changes":
                opts = []
                if c.get("from") is not None:
                    opts += ["'start-snapshot-id'", f"'{c['from']}'"]
                if c.get("to") is not None:
                    opts += ["'end-snapshot-id'", f"'{c['to']}'"]
                args = [f"table => '{table}'", f"changelog_view => 'floe_changes_{i}'"]
                if opts:
                    args.append("options => map(" + ", ".join(opts) + ")")
                if c.get("identifier_columns"):
                    ids = ", ".join(f"'{x}'" for x in c["identifier_columns"])
                    args.append(f"identifier_columns => array({ids})")
                if c.get("net_changes"):
                    args.append("net_changes => true")
                spark.sql("CALL local.system.create_changelog_view(" + ", ".join(args) + ")")
                want = cols + META
                df = spark.sql(
                    "SELECT " + ", ".join(f"`{x}`" for x in want) + f" FROM floe_changes_{i}"
                )
            else:
                reader = spark.read.format("iceberg").option("start-snapshot-id", str(c["from"]))
                if c.get("to") is not None:
                    reader = reader.option("end-snapshot-id", str(c["to"]))
                want = cols
                df = reader.load(f"local.{table}").select(*cols)
            out.append(sorted_rows([[canon(r[x]) for x in want] for r in df.collect()]))
    finally:
        spark.stop()
    return out


def pyiceberg_checks(spec):
    from pyiceberg.table import StaticTable

    t = StaticTable.from_metadata(spec["metadata"])
    cols = spec["columns"]
    out = []
    for c in spec["checks"]:
        if c["kind"] != "appends":
            out.append(None)
            continue
        scan = t.incremental_append_scan(
            from_snapshot_id_exclusive=c["from"], to_snapshot_id_inclusive=c.get("to")
        )
        d = scan.to_arrow().select(cols).to_pylist()
        out.append(sorted_rows([[canon(r[x]) for x in cols] for r in d]))
    return out


def main(argv):
    with open(argv[1]) as f:
        spec = json.load(f)
    out = {"pyiceberg": pyiceberg_checks(spec)}
    if os.environ.get("FLOE_PEERS_NO_SPARK") != "1":
        out["spark"] = spark_checks(spec)
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
