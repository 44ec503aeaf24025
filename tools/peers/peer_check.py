#!/usr/bin/env python3
"""Cross-check Iceberg tables with peer engines (DuckDB, pyiceberg, Spark).

Usage (with the peer venv's python; see tools/peers/setup.sh):

    python tools/peers/peer_check.py CHECKS.json [--engines duckdb,pyiceberg,spark] [--max-diff N]

CHECKS.json is a JSON list of objects:

    {
      "name": "append-two-batches",                  # free text, echoed in the output
      "metadata": "/abs/tbl/metadata/v3.metadata.json",  # a metadata.json (plain path or file:// URI)
      "table_dir": "/abs/tbl",                        # optional; used when "metadata" is absent
                                                      #   (DuckDB/Spark/pyiceberg then follow metadata/version-hint.text)
      "expected": "/abs/expected.parquet",            # rows the table must contain
      "snapshot_id": 123,                             # optional time travel
      "ref": "my-branch",                             # optional, alternative to snapshot_id: a branch or tag
                                                      #   name, which pyiceberg and Spark resolve themselves
                                                      #   (DuckDB by the metadata's "refs")
      "ref_type": "tag",                              # optional with "ref": branch (default) or tag
      "engines": ["duckdb", "pyiceberg", "spark"],    # optional, default: all three
      "allow_moved_paths": false,                     # optional, DuckDB only (relocated tables)
      "refuse": ["pyiceberg"]                         # optional: engines that must REFUSE this read
                                                      #   (raise), e.g. pyiceberg 0.12 on equality deletes
    }

Tables on S3 ("metadata": "s3://bucket/…"): DuckDB (httpfs extension, loaded from its
wheel) and pyiceberg read them with the server named by FLOE_TEST_S3_ENDPOINT,
FLOE_TEST_S3_ACCESS_KEY_ID, FLOE_TEST_S3_SECRET_ACCESS_KEY, FLOE_TEST_S3_REGION (else
AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION), path-style.
Spark is skipped for them: it needs the hadoop-aws jars, which are not available offline.

For every (check, engine) one JSON line is printed on stdout:

    {"name", "engine", "rows", "expected_rows", "checksum", "expected_checksum", "ok"}

plus, when ok is false, "missing" (expected rows the engine did not return) and
"unexpected" (rows the engine returned that were not expected), each at most
--max-diff canonical rows (a row = JSON list of canonical strings / null, in
the expected file's column order), and "error" if the engine raised. A skipped engine
prints {"name", "engine", "skipped": reason, "ok": true}. For an engine listed
in the check's "refuse" the read must raise: it prints {"name", "engine",
"refused": true, "ok": true, "reason": "<the error>"}; if the engine returned
rows instead it prints {"name", "engine", "refused": false, "ok": false, "rows": n}.
Exit code 0 only if every line is ok.

Comparison: the engine's result is projected onto the expected file's columns
(by name), every value is turned into a canonical string by canon() (guided
by the expected Arrow type), rows become JSON arrays, are sorted, and the
sha256 of the joined rows is the checksum.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import decimal
import hashlib
import json
import os
import sys
import time
import uuid

# Everything in UTC: pyspark turns timestamps into naive *local* datetimes.
os.environ["TZ"] = "UTC"
time.tzset()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

ALL_ENGINES = ["duckdb", "pyiceberg", "spark"]

# ---------------------------------------------------------------------------
# Canonicalization (the single definition used for every engine and for the
# expected file).


def _is_uuid_type(t) -> bool:
    if t is None:
        return False
    # pyarrow's built-in uuid type is a BaseExtensionType, not an ExtensionType subclass.
    if getattr(t, "extension_name", None) in ("arrow.uuid", "uuid"):
        return True
    # Iceberg uuid surfaces as fixed_size_binary(16) in several engines; treating
    # every fixed[16] as a uuid is harmless since both sides get the same rule.
    return pa.types.is_fixed_size_binary(t) and t.byte_width == 16


def _storage(t):
    return t.storage_type if hasattr(t, "storage_type") else t


def _ts_str(v: dt.datetime) -> str:
    if v.tzinfo is not None:
        v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return v.isoformat(timespec="microseconds")


def _dec_str(v: decimal.Decimal) -> str:
    if v.is_nan():
        return "NaN"
    if v == 0:
        return "0"
    return format(v.normalize(), "f")


def canon(v, t=None):
    """Canonical string for one value (None stays None = the null marker).

    `t` is the expected column's Arrow type (or None): it decides how maps,
    structs and UUIDs are read, since engines hand these back differently
    (dict vs list of pairs, Row vs dict, uuid.UUID vs str vs 16 bytes)."""
    if v is None:
        return None
    uuid_hint = _is_uuid_type(t)
    st = _storage(t) if t is not None else None

    if st is not None and pa.types.is_map(st):
        items = v.items() if isinstance(v, dict) else v
        pairs = [[canon(k, st.key_type), canon(x, st.item_type)] for k, x in items]
        pairs.sort(key=lambda p: json.dumps(p))
        return json.dumps(pairs, separators=(",", ":"))
    if st is not None and pa.types.is_struct(st):
        if hasattr(v, "asDict"):
            v = v.asDict(recursive=False)
        out = {}
        if isinstance(v, dict):
            for f in st:
                out[f.name] = canon(v.get(f.name), f.type)
        else:  # positional tuple
            for f, x in zip(st, v):
                out[f.name] = canon(x, f.type)
        return json.dumps(out, separators=(",", ":"), sort_keys=True)
    if st is not None and (pa.types.is_list(st) or pa.types.is_large_list(st) or pa.types.is_fixed_size_list(st)):
        return json.dumps([canon(x, st.value_type) for x in v], separators=(",", ":"))

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, decimal.Decimal):
        return _dec_str(v)
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        if uuid_hint and len(b) == 16:
            return str(uuid.UUID(bytes=b))
        return b.hex()
    if isinstance(v, str):
        if uuid_hint:
            try:
                return str(uuid.UUID(v))
            except ValueError:
                return v
        return v
    if isinstance(v, dt.datetime):  # before date: datetime is a date subclass
        return _ts_str(v)
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, dt.time):
        return v.isoformat(timespec="microseconds")
    if isinstance(v, dt.timedelta):
        return str(v // dt.timedelta(microseconds=1))
    if hasattr(v, "asDict"):  # Spark Row without a type hint
        v = v.asDict(recursive=False)
    if isinstance(v, dict):
        return json.dumps({str(k): canon(x) for k, x in v.items()}, separators=(",", ":"), sort_keys=True)
    if isinstance(v, (list, tuple)):
        return json.dumps([canon(x) for x in v], separators=(",", ":"))
    return repr(v)


def canon_rows(columns, types, rows_iter):
    """rows_iter yields sequences aligned with `columns`; returns sorted list of row strings."""
    out = []
    for r in rows_iter:
        out.append(json.dumps([canon(x, t) for x, t in zip(r, types)], separators=(",", ":"), ensure_ascii=False))
    out.sort()
    return out


def checksum(rows) -> str:
    h = hashlib.sha256()
    for r in rows:
        h.update(r.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def arrow_rows(tbl: pa.Table, columns):
    missing = [c for c in columns if c not in tbl.column_names]
    if missing:
        raise KeyError(f"columns missing from engine result: {missing} (has {tbl.column_names})")
    cols = [tbl.column(c).to_pylist() for c in columns]
    return zip(*cols) if cols else iter([() for _ in range(tbl.num_rows)])


# ---------------------------------------------------------------------------
# Metadata helpers


def local_path(p: str) -> str:
    if p.startswith("file://"):
        p = p[len("file://"):]
    elif p.startswith("file:"):
        p = p[len("file:"):]
    return p


def metadata_of(check) -> str:
    """The metadata.json a check refers to (resolving table_dir via version-hint)."""
    if check.get("metadata"):
        return check["metadata"]
    td = local_path(check["table_dir"])
    hint = os.path.join(td, "metadata", "version-hint.text")
    with open(hint) as f:
        v = f.read().strip()
    cand = os.path.join(td, "metadata", f"v{v}.metadata.json")
    if os.path.exists(cand):
        return cand
    return os.path.join(td, "metadata", f"{v}.metadata.json")


def is_s3(loc) -> bool:
    return isinstance(loc, str) and loc.startswith(("s3://", "s3a://", "s3n://"))


def s3_settings():
    """(endpoint URL, key, secret, region) of the S3 server, from the environment."""
    env = os.environ.get
    endpoint = env("FLOE_TEST_S3_ENDPOINT") or env("AWS_ENDPOINT_URL_S3") or env("AWS_ENDPOINT_URL")
    key = env("FLOE_TEST_S3_ACCESS_KEY_ID") or env("AWS_ACCESS_KEY_ID")
    secret = env("FLOE_TEST_S3_SECRET_ACCESS_KEY") or env("AWS_SECRET_ACCESS_KEY")
    region = env("FLOE_TEST_S3_REGION") or env("AWS_REGION") or env("AWS_DEFAULT_REGION") or "us-east-1"
    if not (endpoint and key and secret):
        raise RuntimeError("S3 table but no S3 settings: set FLOE_TEST_S3_ENDPOINT, "
                           "FLOE_TEST_S3_ACCESS_KEY_ID, FLOE_TEST_S3_SECRET_ACCESS_KEY")
    return endpoint, key, secret, region


def resolve_snapshot(check):
    if check.get("snapshot_id") is not None:
        return int(check["snapshot_id"])
    ref = check.get("ref")
    if not ref:
        return None
    with open(local_path(metadata_of(check))) as f:
        md = json.load(f)
    refs = md.get("refs") or {}
    if ref not in refs:
        raise KeyError(f"ref {ref!r} not in metadata refs {sorted(refs)}")
    return int(refs[ref]["snapshot-id"])


# ---------------------------------------------------------------------------
# Engines: each returns a list of row tuples aligned with `columns`.


class Engines:
    def __init__(self):
        self._duck = None
        self._spark = None

    def close(self):
        if self._spark is not None:
            self._spark.stop()

    def duckdb(self, check, columns, snap):
        import floe_peers

        src = local_path(check["metadata"]) if check.get("metadata") else local_path(check["table_dir"])
        if is_s3(src) and self._duck is not None and not getattr(self, "_duck_s3", False):
            self._duck.close()
            self._duck = None
        if self._duck is None:
            self._duck = floe_peers.duckdb_connect(httpfs=is_s3(src))
            self._duck_s3 = is_s3(src)
            if is_s3(src):
                endpoint, key, secret, region = s3_settings()
                ssl = endpoint.startswith("https://")
                host = endpoint.split("://", 1)[-1].rstrip("/")
                q = lambda v: "'" + str(v).replace("'", "''") + "'"  # noqa: E731
                self._duck.execute(
                    f"CREATE SECRET floe_s3 (TYPE s3, KEY_ID {q(key)}, SECRET {q(secret)}, "
                    f"REGION {q(region)}, ENDPOINT {q(host)}, URL_STYLE 'path', "
                    f"USE_SSL {'true' if ssl else 'false'})"
                )
        args = ["?"]
        params = [src]
        if check.get("allow_moved_paths") and check.get("metadata"):
            # allow_moved_paths re-roots paths at the path given to iceberg_scan, so
            # it must be the table dir; the metadata file is then picked by `version`.
            mdir = os.path.dirname(src)
            if os.path.basename(mdir) == "metadata" and src.endswith(".metadata.json"):
                params = [os.path.dirname(mdir)]
                args.append("version => ?")
                params.append(os.path.basename(src)[: -len(".metadata.json")])
        if snap is not None:
            args.append(f"snapshot_from_id => {int(snap)}")
        if check.get("allow_moved_paths"):
            args.append("allow_moved_paths => true")
        sql = f"SELECT * FROM iceberg_scan({', '.join(args)})"
        tbl = self._duck.execute(sql, params).to_arrow_table()
        return tbl.num_rows, list(arrow_rows(tbl, columns))

    def pyiceberg(self, check, columns, snap):
        from pyiceberg.table import StaticTable

        src = check.get("metadata") or check["table_dir"]
        props = {}
        if is_s3(src):
            endpoint, key, secret, region = s3_settings()
            props = {
                "s3.endpoint": endpoint,
                "s3.access-key-id": key,
                "s3.secret-access-key": secret,
                "s3.region": region,
                "s3.force-virtual-addressing": "false",
            }
        t = StaticTable.from_metadata(src, properties=props)
        if check.get("ref") and check.get("snapshot_id") is None:
            # pyiceberg's own reading of the metadata's refs.
            r = t.metadata.refs.get(check["ref"])
            if r is None:
                raise KeyError(f"pyiceberg sees no ref {check['ref']!r} (has {sorted(t.metadata.refs)})")
            snap = r.snapshot_id
        scan = t.scan(snapshot_id=snap) if snap is not None else t.scan()
        tbl = scan.to_arrow()
        return tbl.num_rows, list(arrow_rows(tbl, columns))

    def spark(self, check, columns, snap):
        if self._spark is None:
            import floe_peers

            self._spark = floe_peers.spark_session(app="floe-peer-check")
        src = local_path(check["metadata"]) if check.get("metadata") else local_path(check["table_dir"])
        r = self._spark.read.format("iceberg")
        if check.get("ref") and check.get("snapshot_id") is None:
            # Spark resolves the ref by name (a branch or a tag, as the metadata types it).
            kind = check.get("ref_type") or "branch"
            r = r.option(kind, check["ref"])
        elif snap is not None:
            r = r.option("snapshot-id", str(int(snap)))
        df = r.load(src)
        # v3 row lineage metadata columns are selectable though not listed.
        lineage = ("_row_id", "_last_updated_sequence_number")
        missing = [c for c in columns if c not in df.columns and c not in lineage]
        if missing:
            raise KeyError(f"columns missing from engine result: {missing} (has {df.columns})")
        rows = df.select(*[f"`{c}`" for c in columns]).collect()
        return len(rows), [tuple(r) for r in rows]


def diff(expected_rows, got_rows, limit):
    ce = collections.Counter(expected_rows)
    cg = collections.Counter(got_rows)
    missing = [json.loads(r) for r in list((ce - cg).elements())[:limit]]
    unexpected = [json.loads(r) for r in list((cg - ce).elements())[:limit]]
    return missing, unexpected


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checks", help="JSON file with a list of checks ('-' for stdin)")
    ap.add_argument("--engines", help="comma list overriding every check's engines")
    ap.add_argument("--max-diff", type=int, default=5, help="differing rows shown per side (default 5)")
    a = ap.parse_args(argv)

    if a.checks == "-":
        checks = json.load(sys.stdin)
    else:
        with open(a.checks) as f:
            checks = json.load(f)
    if isinstance(checks, dict):
        checks = [checks]

    override = [e.strip() for e in a.engines.split(",") if e.strip()] if a.engines else None
    if override:
        bad = [e for e in override if e not in ALL_ENGINES]
        if bad:
            ap.error(f"unknown engines {bad}; known: {ALL_ENGINES}")
    no_spark = os.environ.get("FLOE_PEERS_NO_SPARK") == "1"

    eng = Engines()
    all_ok = True
    try:
        for check in checks:
            name = check.get("name", "?")
            engines = override or check.get("engines") or ALL_ENGINES
            try:
                exp_tbl = pq.read_table(check["expected"])
                columns = exp_tbl.column_names
                types = [f.type for f in exp_tbl.schema]
                exp_rows = canon_rows(columns, types, arrow_rows(exp_tbl, columns))
                exp_sum = checksum(exp_rows)
                snap = resolve_snapshot(check)
            except Exception as e:  # bad check definition
                for engine in engines:
                    all_ok = False
                    emit({"name": name, "engine": engine, "ok": False, "error": f"check setup: {type(e).__name__}: {e}"})
                continue
            for engine in engines:
                rec = {"name": name, "engine": engine}
                if engine not in ALL_ENGINES:
                    rec.update(ok=False, error=f"unknown engine {engine!r}")
                    all_ok = False
                    emit(rec)
                    continue
                if engine == "spark" and no_spark:
                    rec.update(skipped="FLOE_PEERS_NO_SPARK=1", ok=True)
                    emit(rec)
                    continue
                if engine == "spark" and is_s3(check.get("metadata") or check.get("table_dir")):
                    rec.update(skipped="S3 table: Spark needs the hadoop-aws jars (not available offline)", ok=True)
                    emit(rec)
                    continue
                if engine in (check.get("refuse") or []):
                    try:
                        n, _raw = getattr(eng, engine)(check, columns, snap)
                        rec.update(refused=False, ok=False, rows=n,
                                   error="expected the engine to refuse this read, but it returned rows")
                    except Exception as e:
                        msg = str(e).strip().splitlines()
                        rec.update(refused=True, ok=True,
                                   reason=f"{type(e).__name__}: {' | '.join(msg[:3])}"[:500])
                    all_ok = all_ok and rec["ok"]
                    emit(rec)
                    continue
                try:
                    n, raw = getattr(eng, engine)(check, columns, snap)
                    got = canon_rows(columns, types, raw)
                    got_sum = checksum(got)
                    ok = got_sum == exp_sum
                    rec.update(rows=n, expected_rows=len(exp_rows), checksum=got_sum, expected_checksum=exp_sum, ok=ok)
                    if not ok:
                        rec["missing"], rec["unexpected"] = diff(exp_rows, got, a.max_diff)
                except Exception as e:
                    msg = str(e).strip().splitlines()
                    rec.update(
                        rows=None, expected_rows=len(exp_rows), checksum=None, expected_checksum=exp_sum, ok=False,
                        error=f"{type(e).__name__}: {' | '.join(msg[:6])}"[:2000],
                    )
                all_ok = all_ok and rec["ok"]
                emit(rec)
    finally:
        eng.close()
    return 0 if all_ok else 1


def emit(rec):
    sys.stdout.write(json.dumps(rec, ensure_ascii=False) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
