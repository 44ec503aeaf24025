"""Random cases against an independent model: random batches (pyarrow and polars) and random
deletes / updates applied to a Python model; after every step floe's scan equals the model,
and at the end pyiceberg (same SQLite catalog) and DuckDB read the same rows. pyiceberg also
writes first: floe reads pyiceberg's table, writes to it, and pyiceberg reads floe's rows."""

from __future__ import annotations

import random

import polars as pl
import pyarrow as pa
import pytest

import floe
from conftest import duckdb_rows, plain, pyiceberg_catalog, rows

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("k", pa.int32()),
                    ("s", pa.string()), ("d", pa.float64())])


def batch(rng: random.Random, start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "k": pa.array([rng.randrange(20) for _ in ids], pa.int32()),
        "s": [None if rng.random() < 0.1 else f"s{rng.randrange(8)}" for _ in ids],
        "d": [rng.uniform(-100, 100) for _ in ids],
    }, schema=SCHEMA)


def predicate(rng: random.Random):
    """A SQL condition and the same condition in Python (NULL never satisfies one)."""
    kind = rng.randrange(4)
    if kind == 0:
        x = rng.randrange(20)
        return f"k < {x}", lambda r: r["k"] is not None and r["k"] < x
    if kind == 1:
        m, x = rng.randrange(2, 9), rng.randrange(2)
        return f"id % {m} = {x}", lambda r: r["id"] % m == x
    if kind == 2:
        v = f"s{rng.randrange(8)}"
        return f"s = '{v}'", lambda r: r["s"] == v
    x = rng.uniform(-50, 50)
    return f"d > {x!r} AND k <> 3", lambda r: r["d"] > x and r["k"] != 3


@pytest.mark.parametrize("seed", range(4))
def test_random_changes_match_the_model(warehouse, seed):
    rng = random.Random(seed)
    cat = floe.load_catalog("default", warehouse=warehouse, create=True)
    mode = rng.choice(["merge-on-read", "copy-on-write"])
    t = cat.create_table(
        "db.t", schema=SCHEMA, partition_by=rng.choice([None, "bucket(3, id)", "k"]),
        properties={"write.delete.mode": mode, "write.update.mode": mode},
    )
    model = {}
    next_id = 0
    for step in range(10):
        op = rng.choice(["append", "append", "delete", "update"])
        if op == "append" or not model:
            b = batch(rng, next_id, rng.randrange(1, 200))
            next_id += b.num_rows
            t.append(pl.from_arrow(b) if rng.random() < 0.5 else b)
            model.update({r["id"]: r for r in b.to_pylist()})
        elif op == "delete":
            sql, f = predicate(rng)
            r = t.delete(sql)
            gone = [k for k, v in model.items() if f(v)]
            # `>=`: a delete that drops whole files counts their record_count, rows already
            # deleted by earlier delete files included (reported to the lead); the rows
            # themselves are compared exactly below.
            assert r.deleted_records_count >= len(gone), sql
            for k in gone:
                del model[k]
        else:
            sql, f = predicate(rng)
            v = rng.randrange(100, 200)
            r = t.update({"k": v, "s": "upd"}, where=sql)
            hit = [k for k, row in model.items() if f(row)]
            assert r.added_records_count == len(hit), sql
            for k in hit:
                model[k] = dict(model[k], k=v, s="upd")
        want = rows(pa.Table.from_pylist(list(model.values()), schema=SCHEMA))
        assert rows(plain(t.scan().to_arrow())) == rows(plain(pa.Table.from_pylist(want, schema=SCHEMA))), step
    want_t = plain(pa.Table.from_pylist(list(model.values()), schema=SCHEMA))
    assert t.scan().count() == len(model)
    py = pyiceberg_catalog(warehouse).load_table("db.t")
    assert rows(plain(py.scan().to_arrow())) == rows(want_t)
    if model:
        assert rows(plain(duckdb_rows(t.metadata_location))) == rows(want_t)
    # compaction changes no row
    t.rewrite_data_files(rewrite_all=True)
    assert rows(plain(t.scan().to_arrow())) == rows(want_t)
    assert rows(plain(pyiceberg_catalog(warehouse).load_table("db.t").scan().to_arrow())) == rows(want_t)


def test_pyiceberg_writes_then_floe_then_pyiceberg(warehouse):
    cat = floe.load_catalog("default", warehouse=warehouse, create=True)
    py = pyiceberg_catalog(warehouse)
    py.create_namespace("db")
    pt = py.create_table("db.p", schema=SCHEMA)
    rng = random.Random(7)
    first = batch(rng, 0, 50)
    pt.append(first)
    t = cat.load_table("db.p")
    assert rows(plain(t.scan().to_arrow())) == rows(plain(first))
    t.append(batch(rng, 50, 50))
    t.delete("id % 4 = 0")
    t.update({"s": "floe"}, where="k < 5")
    got = t.scan().to_arrow()
    assert got.num_rows == 75
    assert rows(plain(py.load_table("db.p").scan().to_arrow())) == rows(plain(got))
    # and pyiceberg appends again onto floe's snapshot
    py.load_table("db.p").append(batch(rng, 100, 10))
    assert t.refresh().scan().count() == 85
