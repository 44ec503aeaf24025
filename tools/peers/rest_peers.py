#!/usr/bin/env python3
"""The peers on an Iceberg REST catalog: pyiceberg's RestCatalog and DuckDB's
`ATTACH ... (TYPE iceberg)` open tables by name through the catalog (not by
metadata file), read them and write to them.

    python rest_peers.py read   URI WAREHOUSE NS.TABLE EXPECTED.parquet
    python rest_peers.py append URI WAREHOUSE NS.TABLE ROWS.parquet ENGINE

URI is the catalog's http(s) URL (without floe's `rest+` prefix); WAREHOUSE is
sent to /v1/config (s3://lake for SeaweedFS). OAuth2 client credentials and S3
settings come from FLOE_TEST_S3_ACCESS_KEY_ID / FLOE_TEST_S3_SECRET_ACCESS_KEY /
FLOE_TEST_S3_ENDPOINT / FLOE_TEST_S3_REGION (the SeaweedFS admin key is also
its catalog client).

read    both engines read the current rows; each is compared with EXPECTED
        (same columns), canonicalised as peer_check.py does. One JSON line per
        engine: {"engine", "rows", "ok", "missing", "unexpected"}; exit 1 on a
        mismatch.
append  ENGINE (pyiceberg or duckdb) appends ROWS to the table through the
        catalog (a new snapshot committed by the server). Prints
        {"engine", "appended", "snapshot_id"}.
"""

from __future__ import annotations

import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_check import arrow_rows, canon_rows, diff, s3_settings  # noqa: E402


def q(v) -> str:
    return "'" + str(v).replace("'", "''") + "'"


def rest_catalog(uri: str, warehouse: str):
    from pyiceberg.catalog.rest import RestCatalog

    endpoint, key, secret, region = s3_settings()
    return RestCatalog(
        "rest",
        uri=uri,
        warehouse=warehouse,
        credential=f"{key}:{secret}",
        **{
            "s3.endpoint": endpoint,
            "s3.access-key-id": key,
            "s3.secret-access-key": secret,
            "s3.region": region,
            "s3.force-virtual-addressing": "false",
        },
    )


def duck(uri: str, warehouse: str):
    import floe_peers

    endpoint, key, secret, region = s3_settings()
    con = floe_peers.duckdb_connect(httpfs=True)
    host = endpoint.split("://", 1)[-1].rstrip("/")
    con.execute(
        f"CREATE SECRET floe_s3 (TYPE s3, KEY_ID {q(key)}, SECRET {q(secret)}, REGION {q(region)}, "
        f"ENDPOINT {q(host)}, URL_STYLE 'path', USE_SSL {'true' if endpoint.startswith('https') else 'false'})"
    )
    con.execute(
        f"CREATE SECRET floe_rest (TYPE iceberg, CLIENT_ID {q(key)}, CLIENT_SECRET {q(secret)}, "
        f"OAUTH2_SERVER_URI {q(uri.rstrip('/') + '/v1/oauth/tokens')})"
    )
    con.execute(
        f"ATTACH {q(warehouse)} AS lake (TYPE iceberg, ENDPOINT {q(uri)}, SECRET floe_rest, READ_ONLY false)"
    )
    return con


def quoted_name(ident: str) -> str:
    ns, table = ident.rsplit(".", 1)
    return f'lake."{ns}"."{table}"'


def read(uri, warehouse, ident, expected) -> int:
    exp = pq.read_table(expected)
    columns = exp.column_names
    types = [f.type for f in exp.schema]
    exp_rows = canon_rows(columns, types, arrow_rows(exp, columns))
    ok_all = True
    for engine in ("pyiceberg", "duckdb"):
        rec = {"engine": engine}
        try:
            if engine == "pyiceberg":
                tbl = rest_catalog(uri, warehouse).load_table(ident).scan().to_arrow()
            else:
                con = duck(uri, warehouse)
                tbl = con.execute(f"SELECT * FROM {quoted_name(ident)}").to_arrow_table()
            got = canon_rows(columns, types, arrow_rows(tbl, columns))
            rec.update(rows=tbl.num_rows, expected_rows=len(exp_rows), ok=got == exp_rows)
            if got != exp_rows:
                rec["missing"], rec["unexpected"] = diff(exp_rows, got, 5)
        except Exception as e:  # reported, not raised: the test shows it
            lines = str(e).strip().splitlines()
            rec.update(ok=False, error=f"{type(e).__name__}: {' | '.join(lines[:6])}"[:2000])
        ok_all = ok_all and rec["ok"]
        print(json.dumps(rec), flush=True)
    return 0 if ok_all else 1


def append(uri, warehouse, ident, rows, engine) -> int:
    data = pq.read_table(rows)
    if engine == "pyiceberg":
        t = rest_catalog(uri, warehouse).load_table(ident)
        # The table's own Arrow schema (field nullability included).
        data = data.cast(t.schema().as_arrow())
        t.append(data)
        t = t.refresh()
        snap = t.current_snapshot().snapshot_id
    elif engine == "duckdb":
        con = duck(uri, warehouse)
        con.register("src", data)
        cols = ", ".join(f'"{c}"' for c in data.column_names)
        con.execute(f"INSERT INTO {quoted_name(ident)} ({cols}) SELECT {cols} FROM src")
        snap = None
    else:
        raise SystemExit(f"unknown engine {engine!r}: pyiceberg or duckdb")
    print(json.dumps({"engine": engine, "appended": data.num_rows, "snapshot_id": snap}))
    return 0


def main(argv) -> int:
    if len(argv) >= 5 and argv[0] == "read":
        return read(*argv[1:5])
    if len(argv) >= 6 and argv[0] == "append":
        return append(*argv[1:6])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
