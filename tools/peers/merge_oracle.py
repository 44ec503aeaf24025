"""Independent answers for floe's merge engines (sum, aggregate, partial-update, first-row).

After every batch of change files, prints what the keyed table must hold, computed two
ways that share no code with floe:

- DuckDB: a plain GROUP BY over every raw row written so far, in arrival order (file order,
  then row order: `seq`), e.g. `sum(hits)`, `max(mx)`, `arg_max_null(last_s, seq)`,
  `avg(ms)`, `count(DISTINCT user_id)`;
- ClickHouse (chdb, in-process): a real SummingMergeTree (engine `sum`) or
  AggregatingMergeTree (engine `aggregate`, `-State` on insert and `-Merge` on read) fed the
  same files, one INSERT per file, read with FINAL / GROUP BY. Only the functions ClickHouse
  folds deterministically are asked of it (sum, min, max, count, avg, exact distinct count);
  `first`/`last` depend on merge timing there.

    python merge_oracle.py SPEC.json

Spec:

    {"engine": "aggregate", "key": ["k"],
     "columns": [{"name": "hits", "function": "sum"},
                 {"name": "avg_ms", "function": "avg", "input": "ms"}, ...],
     "drop_zero_rows": true,
     "batches": [["/abs/b1.parquet"], ["/abs/b2.parquet", "/abs/b3.parquet"]]}

`columns`: the table's non-key columns with their function (for `partial-update` and
`first-row` only names). Output: one JSON line per batch and oracle,
`{"batch": 1, "oracle": "duckdb"|"chdb", "columns": [...], "rows": [[...], ...]}`, rows
sorted by the key; `chdb` lines cover the key and the columns ClickHouse answers.
"""

import json
import os
import sys
import tempfile

import duckdb


def q(n: str) -> str:
    return '"' + n.replace('"', '""') + '"'


def lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def plain(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def duck_expr(engine: str, c: dict) -> str:
    n = q(c["name"])
    f = c.get("function")
    if engine == "first-row":
        return f"arg_min_null({n}, seq)"
    if engine == "partial-update":
        return f"arg_max({n}, seq) FILTER (WHERE {n} IS NOT NULL)"
    if f is None or f == "last":
        return f"arg_max_null({n}, seq)"
    inp = q(c["input"]) if c.get("input") else None
    return {
        "sum": f"sum({n})",
        "min": f"min({n})",
        "max": f"max({n})",
        "count": "count(*)",
        "first": f"arg_min_null({n}, seq)",
        "first_non_null": f"arg_min({n}, seq) FILTER (WHERE {n} IS NOT NULL)",
        "last_non_null": f"arg_max({n}, seq) FILTER (WHERE {n} IS NOT NULL)",
        "bool_and": f"bool_and({n})",
        "bool_or": f"bool_or({n})",
        "avg": f"avg({inp})",
        "count_distinct": f"count(DISTINCT {inp})",
        # The exact count: the caller compares floe's estimate within a tolerance.
        "approx_count_distinct": f"count(DISTINCT {inp})",
    }[f]


def duck_answer(con, spec: dict, files: list) -> list:
    key = spec["key"]
    cols = spec["columns"]
    order = ", ".join(f"({lit(f)}, {i})" for i, f in enumerate(files))
    src = (
        f"SELECT r.*, o.fi * 4294967296 + r.file_row_number AS seq FROM read_parquet("
        f"[{', '.join(lit(f) for f in files)}], union_by_name = true, filename = true, "
        f"file_row_number = true) r JOIN (VALUES {order}) o(fname, fi) ON r.filename = o.fname"
    )
    # Columns a file lacks are NULL (union_by_name); a column no file has is NULL too.
    have = {r[0] for r in con.execute(f"DESCRIBE {src}").fetchall()}
    exprs = []
    for c in cols:
        needed = c.get("input") or c["name"]
        if c.get("function") != "count" and needed not in have:
            exprs.append(f"NULL AS {q(c['name'])}")
        else:
            exprs.append(f"{duck_expr(spec['engine'], c)} AS {q(c['name'])}")
    sql = (
        f"SELECT {', '.join(q(k) for k in key)}, {', '.join(exprs)} FROM ({src}) "
        f"GROUP BY ALL ORDER BY {', '.join(q(k) for k in key)}"
    )
    rows = [list(map(plain, r)) for r in con.execute(sql).fetchall()]
    if spec["engine"] == "sum" and spec.get("drop_zero_rows", True):
        summed = [i + len(key) for i, c in enumerate(cols) if c.get("function") == "sum"]
        rows = [r for r in rows if not all(r[i] is not None and r[i] == 0 for i in summed)]
    return rows


CH_SIMPLE = {"sum": "sum", "min": "min", "max": "max"}


def chdb_columns(spec: dict) -> list:
    if spec["engine"] == "sum":
        return [c for c in spec["columns"] if c.get("function") == "sum"]
    if spec["engine"] == "aggregate":
        return [
            c
            for c in spec["columns"]
            if c.get("function") in ("sum", "min", "max", "count", "avg", "count_distinct")
        ]
    return []


def chdb_answers(spec: dict, out) -> None:
    import chdb.session as chs

    cols = chdb_columns(spec)
    if not cols:
        return
    key = spec["key"]
    files = [f for b in spec["batches"] for f in b]
    con = duckdb.connect()
    types = {}
    for f in files:
        for name, t, *_ in con.execute(f"DESCRIBE SELECT * FROM read_parquet({lit(f)})").fetchall():
            types.setdefault(name, t)
    ch_type = {
        "BIGINT": "Int64",
        "INTEGER": "Int32",
        "DOUBLE": "Float64",
        "VARCHAR": "String",
        "BOOLEAN": "Bool",
    }

    def t_of(n):
        t = types.get(n, "BIGINT")
        if t.startswith("DECIMAL"):
            return "Decimal" + t[len("DECIMAL"):]
        return ch_type.get(t, "Int64")

    ddl = [f"{q(k)} {t_of(k)}" for k in key]
    ins = [q(k) for k in key]
    read = [q(k) for k in key]
    for c in cols:
        n, f = c["name"], c["function"]
        if spec["engine"] == "sum":
            ddl.append(f"{q(n)} {t_of(n)}")
            ins.append(q(n))
            read.append(q(n))
        elif f in CH_SIMPLE:
            ddl.append(f"{q(n)} SimpleAggregateFunction({CH_SIMPLE[f]}, Nullable({t_of(n)}))")
            ins.append(f"{CH_SIMPLE[f]}({q(n)})")
            read.append(f"{CH_SIMPLE[f]}({q(n)})")
        elif f == "count":
            ddl.append(f"{q(n)} SimpleAggregateFunction(sum, UInt64)")
            ins.append("count()")
            read.append(f"sum({q(n)})")
        elif f == "avg":
            ddl.append(f"{q(n)} AggregateFunction(avg, Nullable(Float64))")
            ins.append(f"avgState(toNullable(toFloat64({q(c['input'])})))")
            read.append(f"avgMerge({q(n)})")
        elif f == "count_distinct":
            ddl.append(f"{q(n)} AggregateFunction(uniqExact, Nullable(Int64))")
            ins.append(f"uniqExactState(toNullable(toInt64({q(c['input'])})))")
            read.append(f"uniqExactMerge({q(n)})")
    keys = ", ".join(q(k) for k in key)
    if spec["engine"] == "sum":
        engine = f"SummingMergeTree(({', '.join(q(c['name']) for c in cols)}))"
    else:
        engine = "AggregatingMergeTree"
    with tempfile.TemporaryDirectory(prefix="chdb-merge-") as tmp:
        os.chdir("/")
        sess = chs.Session(os.path.join(tmp, "s"))
        try:
            sess.query("CREATE DATABASE IF NOT EXISTS o")
            sess.query(f"CREATE TABLE o.t ({', '.join(ddl)}) ENGINE = {engine} ORDER BY ({keys})")
            for bi, batch in enumerate(spec["batches"], start=1):
                for f in batch:
                    present = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet({lit(f)})").fetchall()}
                    if spec["engine"] == "sum":
                        sel = [q(k) for k in key] + [
                            q(c["name"]) if c["name"] in present else "0" for c in cols
                        ]
                        sess.query(f"INSERT INTO o.t SELECT {', '.join(sel)} FROM file({lit(f)}, Parquet)")
                    else:
                        sel = []
                        for e, c in zip(ins[len(key):], cols):
                            need = c.get("input") or c["name"]
                            if c["function"] != "count" and need not in present:
                                e = e.replace(q(need), "NULL")
                            sel.append(e)
                        sess.query(
                            f"INSERT INTO o.t SELECT {keys}, {', '.join(sel)} FROM file({lit(f)}, Parquet) "
                            f"GROUP BY {keys}"
                        )
                if spec["engine"] == "sum":
                    sql = f"SELECT {', '.join(read)} FROM o.t FINAL ORDER BY {keys}"
                else:
                    sql = f"SELECT {', '.join(read)} FROM o.t GROUP BY {keys} ORDER BY {keys}"
                tbl = sess.query(sql, "ArrowTable")
                rows = [list(map(plain, r.values())) for r in tbl.to_pylist()]
                out({"batch": bi, "oracle": "chdb", "columns": key + [c["name"] for c in cols], "rows": rows})
        finally:
            sess.close()


def main(argv) -> int:
    with open(argv[1]) as f:
        spec = json.load(f)

    def out(obj):
        sys.stdout.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    con = duckdb.connect()
    con.execute("SET threads = 1")
    files = []
    for bi, batch in enumerate(spec["batches"], start=1):
        files += batch
        rows = duck_answer(con, spec, files)
        out({"batch": bi, "oracle": "duckdb", "columns": spec["key"] + [c["name"] for c in spec["columns"]], "rows": rows})
    if spec.get("chdb", True):
        chdb_answers(spec, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
