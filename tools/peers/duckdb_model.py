#!/usr/bin/env python3
"""An independent model of row-level statements: run SQL on a plain copy of the rows in DuckDB.

    python duckdb_model.py BASE.parquet OUT.parquet [--source S.parquet] STATEMENT...

Loads BASE into table `t` (and, with --source, S into table `s`), runs each STATEMENT in
order (DELETE / UPDATE / MERGE INTO / INSERT written against `t` and `s`), and writes the
final rows of `t` to OUT. The floe tests compare floe's scan and the peers' reads with OUT.
"""

import sys

import duckdb


def main(argv):
    args = argv[1:]
    source = None
    if "--source" in args:
        i = args.index("--source")
        source = args[i + 1]
        del args[i : i + 2]
    base, out, statements = args[0], args[1], args[2:]
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE t AS SELECT * FROM read_parquet(?)", [base])
    if source:
        con.execute("CREATE TABLE s AS SELECT * FROM read_parquet(?)", [source])
    for st in statements:
        con.execute(st)
    con.execute(f"COPY t TO '{out}' (FORMAT parquet)")
    n = con.execute("SELECT count(*) FROM t").fetchone()[0]
    print(n)


if __name__ == "__main__":
    main(sys.argv)
