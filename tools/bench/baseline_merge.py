#!/usr/bin/env python3
"""Baselines for floe's merge-engine benchmark (benches/merge.rs).

    <peers-venv>/bin/python tools/bench/baseline_merge.py chdb --batches DIR [--threads 2] [--repeat 3]
    <peers-venv>/bin/python tools/bench/baseline_merge.py pyiceberg --batches DIR [--count 2]

--batches: `base.parquet` (the starting rows, one per key) and `batch-00001.parquet` ...
written by the benchmark: k long, hits long, mx double, ms double, user_id long. The table
folds them per key with hits = sum, mx = max, avg_ms = avg(ms), users = count(DISTINCT
user_id).

chdb (ClickHouse 26.9 in-process, chdb 4.4.0): `AggregatingMergeTree ORDER BY k` with
hits SimpleAggregateFunction(sum), mx SimpleAggregateFunction(max), avg_ms
AggregateFunction(avg), users AggregateFunction(uniqExact); the base inserted and merged
untimed (`OPTIMIZE ... FINAL`), then one `INSERT ... SELECT k, sum(hits), max(mx),
avgState(ms), uniqExactState(user_id) FROM file(batch) GROUP BY k` per batch, each timed
(`insert_s`); the final values read with `SELECT k, sum(hits), max(mx), avgMerge(avg_ms),
uniqExactMerge(users) ... GROUP BY k` into Arrow (best of --repeat, `query_s`;
`checksum`: sum(hits), count(), sum(users)).

pyiceberg 0.12 (what its users do today: read the table, fold in pyarrow, overwrite): a
format-v2 table (k, hits, mx, ms_sum, ms_count, users list<long>) in a SqlCatalog on SQLite,
loaded untimed from the base; then per batch (the first --count) the table is read, the
batch appended in the same layout, grouped by k (sums, max, the users lists flattened and
made distinct) and written back with `overwrite`, each timed (`fold_s`).

Prints one JSON object on stdout (progress on stderr).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def log(msg: str) -> None:
    print(f"[baseline_merge] {msg}", file=sys.stderr, flush=True)


def lit(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def batches(d: str) -> list[str]:
    return sorted(glob.glob(os.path.join(d, "batch-*.parquet")))


def chdb_run(a) -> dict:
    import chdb
    import chdb.session as chs

    with tempfile.TemporaryDirectory(prefix="chdb-merge-bench-") as tmp:
        os.chdir("/")
        sess = chs.Session(os.path.join(tmp, "s"))
        settings = f"SETTINGS max_threads = {a.threads}"
        sess.query("CREATE DATABASE b")
        sess.query(
            "CREATE TABLE b.t (k Int64, hits SimpleAggregateFunction(sum, Int64), "
            "mx SimpleAggregateFunction(max, Nullable(Float64)), "
            "avg_ms AggregateFunction(avg, Nullable(Float64)), "
            "users AggregateFunction(uniqExact, Nullable(Int64))) "
            "ENGINE = AggregatingMergeTree ORDER BY k"
        )
        ins = (
            "INSERT INTO b.t SELECT k, sum(hits), max(mx), avgState(ms), uniqExactState(user_id) "
            "FROM file({f}, Parquet) GROUP BY k " + settings
        )
        t0 = time.perf_counter()
        sess.query(ins.format(f=lit(os.path.join(a.batches, "base.parquet"))))
        sess.query("OPTIMIZE TABLE b.t FINAL")
        load_s = time.perf_counter() - t0
        log(f"base loaded in {load_s:.1f}s")
        insert_s = []
        for f in batches(a.batches):
            t = time.perf_counter()
            sess.query(ins.format(f=lit(f)))
            insert_s.append(round(time.perf_counter() - t, 5))
        query = (
            "SELECT k, sum(hits) AS hits, max(mx) AS mx, avgMerge(avg_ms) AS avg_ms, "
            "uniqExactMerge(users) AS users FROM b.t GROUP BY k " + settings
        )
        runs = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            tbl = sess.query(query, "ArrowTable")
            runs.append(round(time.perf_counter() - t, 5))
        check = {
            "rows": tbl.num_rows,
            "sum_hits": int(pc.sum(tbl["hits"]).as_py()),
            "sum_users": int(pc.sum(tbl["users"]).as_py()),
        }
        parts = sess.query("SELECT count() FROM system.parts WHERE database = 'b' AND active", "CSV")
        out = {
            "load_s": round(load_s, 3),
            "insert_s": insert_s,
            "query_s": min(runs),
            "query_runs": runs,
            "state": check,
            "parts": int(str(parts).strip() or 0),
            "versions": {
                "chdb": chdb.__version__,
                "clickhouse": str(sess.query("SELECT version()", "CSV")).strip().strip('"'),
            },
        }
        sess.close()
        return out


def layout(b: pa.Table) -> pa.Table:
    """A batch in the pyiceberg table's layout (states as columns, users as a list)."""
    ms = b["ms"]
    return pa.table(
        {
            "k": b["k"],
            "hits": b["hits"],
            "mx": b["mx"],
            "ms_sum": pc.if_else(pc.is_null(ms), 0.0, ms),
            "ms_count": pc.cast(pc.invert(pc.is_null(ms)), pa.int64()),
            "users": pa.array(
                [[u] if u is not None else [] for u in b["user_id"].to_pylist()], pa.list_(pa.int64())
            ),
        }
    )


def fold(t: pa.Table) -> pa.Table:
    sums = (
        t.group_by("k")
        .aggregate([("hits", "sum"), ("mx", "max"), ("ms_sum", "sum"), ("ms_count", "sum")])
        .sort_by("k")
    )
    # Users: one (k, user) row per list element (a null for an empty list, so every key has
    # a row), distinct non-null users per key; both sides sorted by k line up.
    empty = pc.equal(pc.list_value_length(t["users"]), 0)
    lists = pc.if_else(empty, pa.scalar([None], pa.list_(pa.int64())), t["users"])
    idx = pc.list_parent_indices(lists)
    flat = pa.table({"k": pc.take(t["k"], idx), "u": pc.list_flatten(lists)})
    users = (
        flat.group_by("k")
        .aggregate([("u", "distinct", pc.CountOptions(mode="only_valid"))])
        .sort_by("k")
    )
    return pa.table(
        {
            "k": sums["k"],
            "hits": sums["hits_sum"],
            "mx": sums["mx_max"],
            "ms_sum": sums["ms_sum_sum"],
            "ms_count": sums["ms_count_sum"],
            "users": pc.cast(users["u_distinct"], pa.list_(pa.int64())),
        }
    )


def pyiceberg_run(a) -> dict:
    from pyiceberg.catalog.sql import SqlCatalog

    with tempfile.TemporaryDirectory(prefix="pyi-merge-bench-") as tmp:
        cat = SqlCatalog("b", uri=f"sqlite:///{tmp}/c.db", warehouse=f"file://{tmp}/wh")
        cat.create_namespace("db")
        base = fold(layout(pq.read_table(os.path.join(a.batches, "base.parquet"))))
        tbl = cat.create_table(
            "db.t",
            schema=base.schema,
            properties={"format-version": "2", "write.parquet.compression-level": "1"},
        )
        t0 = time.perf_counter()
        tbl.append(base)
        load_s = time.perf_counter() - t0
        fold_s = []
        for f in batches(a.batches)[: a.count]:
            b = layout(pq.read_table(f))
            t = time.perf_counter()
            cur = tbl.scan().to_arrow()
            new = fold(pa.concat_tables([cur.cast(b.schema), b]))
            tbl.overwrite(new)
            fold_s.append(round(time.perf_counter() - t, 4))
            log(f"pyiceberg batch {len(fold_s)}: {fold_s[-1]:.1f}s")
        import pyiceberg

        return {"load_s": round(load_s, 3), "fold_s": fold_s, "versions": {"pyiceberg": pyiceberg.__version__}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["chdb", "pyiceberg"])
    ap.add_argument("--batches", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--count", type=int, default=2)
    a = ap.parse_args(argv)
    a.batches = os.path.abspath(a.batches)
    out = chdb_run(a) if a.mode == "chdb" else pyiceberg_run(a)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
