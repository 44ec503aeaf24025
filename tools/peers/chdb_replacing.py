"""ClickHouse (chdb, in-process) as an independent oracle for floe's keyed tables.

floe's keyed upsert merges changes by the ReplacingMergeTree(ver, is_deleted) rule. This
script asks ClickHouse itself: it loads the same changes into a real
`ReplacingMergeTree(ver, is_deleted) ORDER BY key` table and prints what
`SELECT ... FINAL` returns after every batch. Optionally it also reads an Iceberg table
(a floe v2 table) with `icebergLocal(...)`.

    python chdb_replacing.py SPEC.json      # or '-' / nothing: the spec on stdin
    python chdb_replacing.py '{"key": ...}' # or the spec itself as the argument
    python chdb_replacing.py --self-test    # checks the ClickHouse behaviour relied on

Several specs in one process (ClickHouse starts once): {"runs": [SPEC, ...]}; every output
line then starts with "run": <index>.

Spec (JSON):

    {"key": ["user_id"], "version": "ver", "delete": "is_deleted",
     "columns": ["user_id", "plan", "ver", "is_deleted"],
     "batches": [["/abs/b1.parquet", "/abs/b2.parquet"], ["/abs/b3.parquet"]],
     "read_iceberg": [{"dir": "/abs/warehouse/db/t", "snapshot_id": 123, "name": "t@1"}]}

- `columns`: the columns to load and print, in order: names (types are taken from the
  first Parquet file that has the column, made Nullable) or {"name", "type"} objects with
  ClickHouse types (used as given). Key and version columns are made non-Nullable (a NULL there fails the insert);
  the delete column is stored as UInt8 (0/1; booleans become 0/1; any other value fails
  the insert, as ClickHouse refuses is_deleted outside 0/1). Default: every column of the
  first file.
- `batches`: each batch is a list of Parquet files in arrival order; each file is one
  INSERT, read single-threaded with the row order preserved, so ClickHouse's own rule for
  equal versions ("the last inserted row wins": later INSERT, then later row of one
  INSERT) is the arrival order. `version`/`delete` may be null (plain ReplacingMergeTree:
  the last inserted row wins; nothing is deleted).
- `read_iceberg` (optional): Iceberg tables to read with `icebergLocal(dir)` (the newest
  metadata file in `dir/metadata`), each printed the same way: a directory, or a list of
  directories and {"dir", "snapshot_id", "name"} objects (`snapshot_id`: that snapshot, by
  the `iceberg_snapshot_id` setting; `name` is echoed). ClickHouse 26.9 reads v2 position
  deletes; it refuses v3 deletion vectors ("Position deletes are supported only for
  parquet format").

Output: one JSON line per batch, then one per Iceberg read:

    {"batch": 1, "files": 2, "columns": [...], "rows": 3, "checksum": "<sha256>",
     "live": [[1, "pro", 2, 0], ...]}
    {"iceberg": "/abs/warehouse/db/t", "snapshot_id": 123, "name": "t@1", "columns": [...],
     "rows": 3, "checksum": ..., "live": ...}

`live`: the rows as JSON arrays in `columns` order, sorted by the key (then by every
column). `checksum`: sha256 of the rows' compact JSON (`[1,"pro",2,0]`, UTF-8, no ASCII
escaping) joined by "\\n". Values: integers as numbers, strings as strings, NULL as null,
other types as their text.

ClickHouse behaviour relied on (26.9.2.1 as shipped by chdb 4.4.0; `--self-test` checks
each point and exits non-zero if one fails):
- FINAL keeps, per key, the row with the highest version; among equal versions the last
  inserted one (later INSERT, and within one INSERT the later row).
- A winning row with is_deleted = 1 is hidden by FINAL with no setting: since 23.x the
  `is_deleted` column is applied by FINAL itself (the old `clean_deleted_rows` table
  setting only concerned OPTIMIZE ... FINAL CLEANUP and is not needed here). A later
  INSERT of a lower version does not bring the key back; a higher version does, and so
  does an equal version inserted later (it is the later insert).
- The rule holds whether or not the parts were merged (the self test also runs
  OPTIMIZE TABLE ... FINAL and reads again).
"""

import hashlib
import json
import os
import sys
import tempfile

import pyarrow as pa

import chdb
import chdb.session as chs

# Read each file with one thread, in file order, and insert it as one block. A NULL in a
# key or version column fails the insert (by default ClickHouse would store the type's
# default, 0, in the non-Nullable column: insert_null_as_default).
INSERT_SETTINGS = (
    "max_threads = 1, max_insert_threads = 1, input_format_parquet_preserve_order = 1, "
    "input_format_null_as_default = 0, insert_null_as_default = 0"
)


def q(ident: str) -> str:
    return "`" + ident.replace("\\", "\\\\").replace("`", "\\`") + "`"


def lit(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def strip_nullable(t: str) -> str:
    t = t.strip()
    if t.startswith("Nullable(") and t.endswith(")"):
        return t[len("Nullable(") : -1]
    return t


def describe(sess, path: str) -> dict:
    tbl = sess.query(f"DESCRIBE TABLE file({lit(path)}, Parquet)", "ArrowTable")
    d = tbl.to_pydict()
    return dict(zip(d["name"], d["type"]))


def plain(v):
    """A value as JSON: ints, floats, strings and null as is; the rest as text."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    return str(v)


def rows_of(tbl: pa.Table, columns: list) -> list:
    d = tbl.to_pydict()
    n = tbl.num_rows
    return [[plain(d[c][i]) for c in columns] for i in range(n)]


def sort_key(row, key_idx):
    def k(v):
        # None first, then numbers, then strings: a total order over mixed JSON values.
        if v is None:
            return (0, 0, "")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (1, v, "")
        return (2, 0, json.dumps(v, ensure_ascii=False, sort_keys=True))

    return [k(row[i]) for i in key_idx] + [k(v) for v in row]


def report(rows: list, columns: list, key: list, head: dict) -> dict:
    key_idx = [columns.index(k) for k in key if k in columns]
    rows = sorted(rows, key=lambda r: sort_key(r, key_idx))
    text = "\n".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in rows)
    out = dict(head)
    out.update(
        {
            "columns": columns,
            "rows": len(rows),
            "checksum": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "live": rows,
        }
    )
    return out


def column_types(sess, spec: dict, files: list) -> list:
    """[(name, clickhouse type)] for the table, from the spec or the first files."""
    cols = spec.get("columns")
    described = {}

    def type_of(name):
        for f in files:
            if f not in described:
                described[f] = describe(sess, f)
            if name in described[f]:
                return described[f][name]
        raise SystemExit(f"column {name!r} is in no input file and has no type in the spec")

    if cols is None:
        if not files:
            raise SystemExit("no columns in the spec and no input file to take them from")
        described[files[0]] = describe(sess, files[0])
        cols = list(described[files[0]].keys())
    out = []
    for c in cols:
        if isinstance(c, dict):
            out.append((c["name"], c["type"]))
        else:
            out.append((c, type_of(c)))
    return out


def merge_tree(sess, spec: dict, files: list, out) -> None:
    key = list(spec["key"])
    ver = spec.get("version")
    dele = spec.get("delete")
    types = column_types(sess, spec, files)
    spec_types = {c["name"]: c["type"] for c in spec.get("columns") or [] if isinstance(c, dict)}
    names = [n for n, _ in types]
    for k in key + [x for x in (ver, dele) if x]:
        if k not in names:
            raise SystemExit(f"column {k!r} (key, version or delete) is not among the columns {names}")
    ddl = []
    for n, t in types:
        if n in key or n == ver:
            t = strip_nullable(t)
        elif n == dele:
            t = "UInt8"
        elif not isinstance(spec_types.get(n), str) and not t.startswith(
            ("Nullable(", "Array(", "Map(", "Tuple(", "LowCardinality(")
        ):
            # Inferred from a file without NULLs ClickHouse may say `String`: a later file
            # may hold NULLs all the same.
            t = f"Nullable({t})"
        ddl.append(f"{q(n)} {t}")
    if dele and not ver:
        raise SystemExit("a delete column needs a version column (ReplacingMergeTree(ver, is_deleted))")
    engine_args = ", ".join(q(x) for x in ([ver, dele] if dele else [ver] if ver else []))
    sess.query("CREATE DATABASE IF NOT EXISTS oracle")
    sess.query("DROP TABLE IF EXISTS oracle.t")
    sess.query(
        f"CREATE TABLE oracle.t ({', '.join(ddl)}) ENGINE = ReplacingMergeTree({engine_args}) "
        f"ORDER BY ({', '.join(q(k) for k in key)})"
    )
    select_cols = ", ".join(q(n) for n in names)
    for bi, batch in enumerate(spec.get("batches", []), start=1):
        for f in batch:
            have = describe(sess, f)
            present = [n for n in names if n in have]
            missing = [k for k in key + [x for x in (ver, dele) if x] if k not in have]
            if missing:
                raise SystemExit(f"{f}: no column {missing[0]!r}")
            exprs = []
            for n in present:
                if n == dele:
                    exprs.append(f"toUInt8({q(n)})")
                else:
                    exprs.append(q(n))
            sess.query(
                f"INSERT INTO oracle.t ({', '.join(q(n) for n in present)}) "
                f"SELECT {', '.join(exprs)} FROM file({lit(f)}, Parquet) SETTINGS {INSERT_SETTINGS}"
            )
        tbl = sess.query(
            f"SELECT {select_cols} FROM oracle.t FINAL ORDER BY {', '.join(q(k) for k in key)}",
            "ArrowTable",
        )
        out(report(rows_of(tbl, names), names, key, {"batch": bi, "files": len(batch)}))


def read_iceberg(sess, spec: dict, out) -> None:
    reads = spec["read_iceberg"]
    if isinstance(reads, (str, dict)):
        reads = [reads]
    cols = spec.get("columns")
    for r in reads:
        if isinstance(r, str):
            r = {"dir": r}
        d = r["dir"]
        settings = ""
        if r.get("snapshot_id") is not None:
            settings = f" SETTINGS iceberg_snapshot_id = {int(r['snapshot_id'])}"
        tbl = sess.query(f"SELECT * FROM icebergLocal({lit(d)}){settings}", "ArrowTable")
        names = [c["name"] if isinstance(c, dict) else c for c in cols] if cols else tbl.column_names
        for n in names:
            if n not in tbl.column_names:
                raise SystemExit(f"icebergLocal({d}): no column {n!r} (has {tbl.column_names})")
        head = {"iceberg": d}
        for k in ("snapshot_id", "name"):
            if r.get(k) is not None:
                head[k] = r[k]
        out(report(rows_of(tbl, names), names, list(spec.get("key") or []), head))


def self_test() -> int:
    """Checks the ClickHouse behaviour the oracle relies on (see the module docs)."""
    import pyarrow.parquet as pq

    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        def part(name, rows):
            p = os.path.join(tmp, name)
            pq.write_table(
                pa.table(
                    {
                        "k": pa.array([r[0] for r in rows], pa.int64()),
                        "v": pa.array([r[1] for r in rows], pa.string()),
                        "ver": pa.array([r[2] for r in rows], pa.int64()),
                        "del": pa.array([r[3] for r in rows], pa.int32()),
                    }
                ),
                p,
            )
            return p

        batches = [
            # ties inside one file: the later row wins (k=1 -> a2); k=2 at ver 5.
            [part("1.parquet", [(1, "a1", 1, 0), (2, "b", 5, 0), (1, "a2", 1, 0)])],
            # tie across files of one batch: the later file wins (k=1 -> a3).
            [part("2.parquet", [(1, "a3", 1, 0)]), part("3.parquet", [(3, "c", 1, 0)])],
            # delete k=2 at ver 6, then an older replay (ver 4): stays deleted.
            [part("4.parquet", [(2, None, 6, 1)]), part("5.parquet", [(2, "old", 4, 0)])],
            # older replay of k=1 (ver 0) ignored; equal-version delete of k=3 wins.
            [part("6.parquet", [(1, "zero", 0, 0), (3, None, 1, 1)])],
            # higher version re-inserts k=2; equal version after a delete re-inserts k=3.
            [part("7.parquet", [(2, "back", 7, 0)]), part("8.parquet", [(3, "c2", 1, 0)])],
        ]
        want = [
            [[1, "a2", 1, 0], [2, "b", 5, 0]],
            [[1, "a3", 1, 0], [2, "b", 5, 0], [3, "c", 1, 0]],
            [[1, "a3", 1, 0], [3, "c", 1, 0]],
            [[1, "a3", 1, 0]],
            [[1, "a3", 1, 0], [2, "back", 7, 0], [3, "c2", 1, 0]],
        ]
        spec = {"key": ["k"], "version": "ver", "delete": "del", "batches": batches}
        got = []
        sess = chs.Session(os.path.join(tmp, "session"))
        try:
            merge_tree(sess, spec, [f for b in batches for f in b], got.append)
            for i, (g, w) in enumerate(zip(got, want), start=1):
                if g["live"] != w:
                    ok = False
                    print(f"FAIL batch {i}: FINAL gave {g['live']}, expected {w}")
            sess.query("OPTIMIZE TABLE oracle.t FINAL")
            merged = sess.query("SELECT k, v, ver, del FROM oracle.t FINAL ORDER BY k", "ArrowTable")
            if rows_of(merged, ["k", "v", "ver", "del"]) != want[-1]:
                ok = False
                print(f"FAIL after OPTIMIZE FINAL: {rows_of(merged, ['k', 'v', 'ver', 'del'])}")
            version = str(sess.query("SELECT version()", "CSV")).strip().strip('"')
        finally:
            sess.close()
    print(json.dumps({"self_test": "ok" if ok else "failed", "clickhouse": version, "chdb": chdb.__version__}))
    return 0 if ok else 1


def absolute(spec: dict) -> dict:
    """`spec` with absolute paths (read_iceberg as a list of objects)."""
    spec = dict(spec)
    if spec.get("batches") is not None:
        spec["batches"] = [[os.path.abspath(f) for f in b] for b in spec["batches"]]
    reads = spec.get("read_iceberg")
    if isinstance(reads, (str, dict)):
        reads = [reads]
    if reads:
        spec["read_iceberg"] = [
            {"dir": os.path.abspath(r)} if isinstance(r, str) else dict(r, dir=os.path.abspath(r["dir"]))
            for r in reads
        ]
    return spec


def main(argv) -> int:
    if argv[1:2] == ["--self-test"]:
        return self_test()
    arg = argv[1] if len(argv) > 1 else "-"
    if arg == "-":
        spec = json.load(sys.stdin)
    elif arg.lstrip().startswith("{"):
        spec = json.loads(arg)
    else:
        with open(arg) as f:
            spec = json.load(f)
    # {"runs": [spec, ...]}: several specs in one process (one ClickHouse start), each
    # output line tagged with its run's index.
    runs = spec["runs"] if "runs" in spec else [spec]
    tagged = "runs" in spec
    # Paths as absolute paths, then work from "/": chdb resolves its `user_files_path` to the
    # current directory, and icebergLocal refuses a table outside it ("File path ... is not
    # inside .").
    runs = [absolute(r) for r in runs]
    os.chdir("/")

    with tempfile.TemporaryDirectory(prefix="chdb-oracle-") as tmp:
        sess = chs.Session(os.path.join(tmp, "session"))
        try:
            for ri, run in enumerate(runs):

                def out(obj, ri=ri):
                    if tagged:
                        obj = dict({"run": ri}, **obj)
                    sys.stdout.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
                    sys.stdout.flush()

                if run.get("batches") is not None:
                    files = [f for b in run["batches"] for f in b]
                    merge_tree(sess, run, files, out)
                if run.get("read_iceberg"):
                    read_iceberg(sess, run, out)
        except Exception as e:  # ClickHouse refused the input or the table
            print(f"chdb_replacing: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        finally:
            sess.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
