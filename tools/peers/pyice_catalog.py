#!/usr/bin/env python3
"""SQL-catalog (SQLite or PostgreSQL) interop helpers around pyiceberg's SqlCatalog.

    python pyice_catalog.py [--catalog-name NAME] list   URI WAREHOUSE
    python pyice_catalog.py [--catalog-name NAME] create URI WAREHOUSE NS.TABLE
    python pyice_catalog.py [--catalog-name NAME] append URI WAREHOUSE NS.TABLE N

URI is an SQLAlchemy URL (sqlite:////abs/catalog.db); a bare path is turned
into one. PostgreSQL URIs as floe takes them (postgresql://user:pw@host:port/db
or postgres://...) get the psycopg2 driver (postgresql+psycopg2://...).
WAREHOUSE is a directory or file:// URI. The catalog name (the `catalog_name`
column in pyiceberg's iceberg_tables/iceberg_namespace_properties
tables) defaults to "default".

Each subcommand prints one JSON document on stdout:
  list   {"catalog", "namespaces": [[...]], "tables": [{"identifier", "metadata_location",
          "format_version", "snapshots", "current_snapshot_id", "rows",
          "identifier_fields"}]}
  create {"identifier", "metadata_location", "rows", "snapshots"}   (v2; id long, name string,
          ts timestamptz, partitioned by day(ts); 100 rows in 2 appends of 50)
  append {"identifier", "metadata_location", "rows_before", "appended", "rows", "snapshots"}
          (N deterministic rows shaped after the table's current schema)
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import os
import sys
import uuid

import pyarrow as pa


def catalog(name: str, uri: str, warehouse: str):
    from pyiceberg.catalog.sql import SqlCatalog

    if "://" not in uri:
        uri = "sqlite:///" + os.path.abspath(uri)
    scheme, rest = uri.split("://", 1)
    if scheme in ("postgresql", "postgres"):
        uri = "postgresql+psycopg2://" + rest
    if "://" not in warehouse:
        os.makedirs(warehouse, exist_ok=True)
        warehouse = "file://" + os.path.abspath(warehouse)
    return SqlCatalog(name, uri=uri, warehouse=warehouse)


def ident_str(ident) -> str:
    return ".".join(ident)


def count_rows(table) -> int:
    if table.current_snapshot() is None:
        return 0
    return table.scan().to_arrow().num_rows


def cmd_list(cat, _a):
    out = {"catalog": cat.name, "namespaces": [], "tables": []}

    def walk(ns):
        for child in cat.list_namespaces(ns):
            out["namespaces"].append(list(child))
            walk(child)

    walk(())
    for ns in out["namespaces"]:
        for ident in cat.list_tables(tuple(ns)):
            t = cat.load_table(ident)
            snap = t.current_snapshot()
            out["tables"].append(
                {
                    "identifier": ident_str(ident),
                    "metadata_location": t.metadata_location,
                    "format_version": t.metadata.format_version,
                    "snapshots": len(t.metadata.snapshots),
                    "current_snapshot_id": snap.snapshot_id if snap else None,
                    "rows": count_rows(t),
                    "identifier_fields": sorted(t.schema().identifier_field_names()),
                }
            )
    return out


BASE_TS = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def demo_rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"name-{i:04d}" for i in ids], pa.string()),
            # 7 hours apart -> spreads over several day partitions
            "ts": pa.array([BASE_TS + dt.timedelta(hours=7 * i) for i in ids], pa.timestamp("us", tz="UTC")),
        }
    )


def cmd_create(cat, a):
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    ident = tuple(a.name.split("."))
    if len(ident) < 2:
        sys.exit("NAME must be namespace.table")
    cat.create_namespace_if_not_exists(ident[:-1])
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "ts", TimestamptzType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=3, field_id=1000, transform=DayTransform(), name="ts_day"))
    t = cat.create_table(ident, schema=schema, partition_spec=spec, properties={"format-version": "2"})
    t.append(demo_rows(0, 50))
    t.append(demo_rows(50, 50))
    t = cat.load_table(ident)
    return {
        "identifier": ident_str(ident),
        "metadata_location": t.metadata_location,
        "rows": count_rows(t),
        "snapshots": len(t.metadata.snapshots),
    }


def _value_for(field_type, i: int, required: bool):
    """Deterministic value for row i of an Arrow field type (None if unsupported)."""
    t = field_type
    if pa.types.is_boolean(t):
        return i % 2 == 0
    if pa.types.is_integer(t):
        return i
    if pa.types.is_floating(t):
        return i + 0.5
    if pa.types.is_decimal(t):
        return decimal.Decimal(i).scaleb(-t.scale).quantize(decimal.Decimal(1).scaleb(-t.scale))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return f"row-{i}"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return f"b{i}".encode()
    if pa.types.is_fixed_size_binary(t):
        return uuid.UUID(int=i).bytes[: t.byte_width].rjust(t.byte_width, b"\0")
    if pa.types.is_timestamp(t):
        v = BASE_TS + dt.timedelta(hours=7 * i)
        return v if t.tz else v.replace(tzinfo=None)
    if pa.types.is_date(t):
        return (BASE_TS + dt.timedelta(days=i)).date()
    if pa.types.is_time(t):
        return dt.time(i % 24, i % 60)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_value_for(t.value_type, i, True)]
    if pa.types.is_struct(t):
        return {f.name: _value_for(f.type, i, not f.nullable) for f in t}
    if pa.types.is_map(t):
        return [(_value_for(t.key_type, i, True), _value_for(t.item_type, i, False))]
    if isinstance(t, pa.ExtensionType):
        if t.extension_name in ("arrow.uuid", "uuid"):
            return uuid.UUID(int=i)
        return None
    return None


def cmd_append(cat, a):
    ident = tuple(a.name.split("."))
    t = cat.load_table(ident)
    before = count_rows(t)
    start = before
    # continue after the largest id, if there is one
    if "id" in [f.name for f in t.schema().fields] and before:
        ids = t.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
        ids = [x for x in ids if x is not None]
        if ids:
            start = max(ids) + 1
    arrow_schema = t.schema().as_arrow()
    cols = {}
    for f in arrow_schema:
        cols[f.name] = pa.array([_value_for(f.type, start + k, not f.nullable) for k in range(a.n)], f.type)
    t.append(pa.table(cols, schema=arrow_schema))
    t = cat.load_table(ident)
    return {
        "identifier": ident_str(ident),
        "metadata_location": t.metadata_location,
        "rows_before": before,
        "appended": a.n,
        "rows": count_rows(t),
        "snapshots": len(t.metadata.snapshots),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--catalog-name", default="default")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("list", "create", "append"):
        p = sub.add_parser(name)
        p.add_argument("uri")
        p.add_argument("warehouse")
        if name in ("create", "append"):
            p.add_argument("name", help="namespace.table")
        if name == "append":
            p.add_argument("n", type=int)
    a = ap.parse_args(argv)
    cat = catalog(a.catalog_name, a.uri, a.warehouse)
    out = {"list": cmd_list, "create": cmd_create, "append": cmd_append}[a.cmd](cat, a)
    print(json.dumps(out, indent=None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
