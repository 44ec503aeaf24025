"""Every call of the Python API, with pyarrow, polars and pandas inputs; results checked
against what the rows must be, and read back by pyiceberg and DuckDB."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import pickle

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import floe
from conftest import duckdb_rows, plain, pyiceberg_catalog, rows

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("price", pa.float64()),
    ]
)


def data(ids, name="n", price=1.0) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"{name}{i}" for i in ids],
            "price": [price * i for i in ids],
        }
    )


def test_inputs_pyarrow_polars_pandas_and_scans(catalog, warehouse):
    t = catalog.create_table("db.t", schema=SCHEMA, partition_by="bucket(4, id)")
    assert t.current_snapshot_id is None and t.scan().count() == 0
    assert t.scan().to_arrow().num_rows == 0
    r = t.append(data(range(0, 10)))
    assert isinstance(r, floe.AppendResult)
    assert (r.table, r.added_records_count) == ("db.t", 10) and r.added_data_files_count >= 1
    first = r.snapshot_id
    # polars, pandas, a RecordBatchReader, a RecordBatch, a list of batches
    t.append(pl.from_arrow(data(range(10, 20))))
    t.append(data(range(20, 30)).to_pandas())
    t.append(pa.RecordBatchReader.from_batches(SCHEMA, data(range(30, 40)).to_batches()))
    t.append(data(range(40, 50)).to_batches()[0])
    t.append(data(range(50, 60)).to_batches())
    # columns by name, in any order, cast to the table's types
    t.append(pa.table({"price": [60.0], "id": pa.array([60], pa.int32()), "name": ["n60"]}))
    assert t.scan().count() == 61
    full = t.scan().to_arrow()
    assert isinstance(full, pa.Table) and full.schema.names == ["id", "name", "price"]
    assert sorted(full.column("id").to_pylist()) == list(range(61))
    # filter, projection, limit, time travel
    sel = t.scan(row_filter="id >= 55 AND name <> 'n57'", selected_fields=["name"]).to_arrow()
    assert sel.column_names == ["name"]
    assert sorted(sel.column("name").to_pylist()) == [f"n{i}" for i in (55, 56, 58, 59, 60)]
    assert t.scan(limit=7).to_arrow().num_rows == 7
    assert t.scan(snapshot_id=first).count() == 10
    assert t.scan(row_filter="id < 3").count() == 3
    reader = t.scan(row_filter="id < 30").to_arrow_batch_reader()
    assert isinstance(reader, pa.RecordBatchReader)
    assert sum(b.num_rows for b in reader) == 30
    assert t.scan(limit=5).to_arrow_batch_reader().read_all().num_rows == 5
    df = t.scan(row_filter="id < 5").to_polars()
    assert isinstance(df, pl.DataFrame) and sorted(df["id"].to_list()) == [0, 1, 2, 3, 4]
    assert isinstance(t.scan().to_pandas(), pd.DataFrame)
    # the schema, snapshots, properties
    assert t.schema().names == ["id", "name", "price"]
    snaps = t.snapshots()
    assert [s.operation for s in snaps] == ["append"] * 7
    assert snaps[0].snapshot_id == first and t.current_snapshot().snapshot_id == snaps[-1].snapshot_id
    assert isinstance(t.properties, dict)
    # the same rows through pyiceberg and DuckDB
    pt = pyiceberg_catalog(warehouse).load_table("db.t").scan().to_arrow()
    assert rows(plain(pt)) == rows(plain(full))
    assert rows(plain(duckdb_rows(t.metadata_location))) == rows(plain(full))


def test_delete_update_merge_against_a_model(catalog, warehouse):
    t = catalog.create_table(
        "db.t",
        schema=SCHEMA,
        partition_by=["bucket(2, id)"],
        properties={"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read",
                    "write.merge.mode": "merge-on-read"},
    )
    t.append(data(range(100)))
    model = {i: {"id": i, "name": f"n{i}", "price": float(i)} for i in range(100)}

    d = t.delete("id % 10 = 3")
    assert isinstance(d, floe.RowLevelResult) and d.mode == "merge-on-read"
    assert d.deleted_records_count == 10 and d.added_delete_files_count >= 1
    model = {k: v for k, v in model.items() if k % 10 != 3}

    u = t.update({"name": "cheap", "price": floe.Expr("price * 2")}, where="id < 20")
    assert u.deleted_records_count == 18 and u.added_records_count == 18
    for k in model:
        if k < 20:
            model[k] = {"id": k, "name": "cheap", "price": 2.0 * k}
    u2 = t.update("name = 'it''s'", where="id = 99")
    assert u2.added_records_count == 1
    model[99]["name"] = "it's"
    assert t.update({"name": None}, where="id = 98").added_records_count == 1
    model[98]["name"] = None

    src = pl.DataFrame({"id": [5, 6, 500], "name": ["m5", "m6", "m500"], "price": [0.5, 0.6, 5.0]})
    m = t.merge(src, on="id")
    assert (m.deleted_records_count, m.added_records_count) == (2, 3)
    for r in src.to_dicts():
        model[r["id"]] = r
    m2 = t.merge(pa.table({"id": [7, 8], "name": ["x", "y"], "price": [0.0, 0.0]}), on=["id"],
                 when_matched="delete", when_not_matched="ignore")
    assert m2.deleted_records_count == 2
    del model[7], model[8]
    m3 = t.merge(data([0, 1, 2]), on="id", when_matched="ignore", when_not_matched="ignore",
                 when_not_matched_by_source="delete")
    assert m3.deleted_records_count == len(model) - 3
    model = {k: v for k, v in model.items() if k in (0, 1, 2)}
    want = sorted(model.values(), key=lambda r: r["id"])
    assert rows(plain(t.scan().to_arrow())) == rows(pa.Table.from_pylist(want))
    assert rows(plain(pyiceberg_catalog(warehouse).load_table("db.t").scan().to_arrow())) == rows(
        pa.Table.from_pylist(want)
    )
    assert rows(plain(duckdb_rows(t.metadata_location))) == rows(pa.Table.from_pylist(want))
    # no match: no snapshot
    assert t.delete("id > 100000").snapshot_id is None
    with pytest.raises(floe.InvalidInputError, match="when_matched|expected"):
        t.merge(data([1]), on="id", when_matched="explode")


def test_merge_streams_its_source(catalog):
    """A MERGE source is read batch by batch (a generator-backed RecordBatchReader): on a
    bucketed table the aligned path runs; a source failing midway commits nothing."""
    t = catalog.create_table("db.m", schema=SCHEMA, partition_by="bucket(8, id)",
                             properties={"write.merge.mode": "merge-on-read"})
    t.append(data(range(0, 200)))
    model = {r["id"]: r for r in data(range(0, 200)).to_pylist()}

    def batches(fail=False):
        for i in range(10):
            if fail and i == 5:
                raise ValueError("the source broke")
            yield from data(range(150 + i * 10, 160 + i * 10), name="s").to_batches()

    m = t.merge(pa.RecordBatchReader.from_batches(SCHEMA, batches()), on="id")
    assert (m.deleted_records_count, m.added_records_count) == (50, 100)
    assert m.aligned is not None and m.aligned["source_partitions_count"] == 8
    for r in data(range(150, 250), name="s").to_pylist():
        model[r["id"]] = r
    want = rows(pa.Table.from_pylist(sorted(model.values(), key=lambda r: r["id"])))
    assert rows(plain(t.scan().to_arrow())) == want
    n = len(t.snapshots())
    with pytest.raises(floe.FloeError, match="the source broke"):
        t.merge(pa.RecordBatchReader.from_batches(SCHEMA, batches(fail=True)), on="id")
    assert len(t.refresh().snapshots()) == n
    assert rows(plain(t.scan().to_arrow())) == want


def test_upsert_keyed_and_merge_keys(catalog):
    t = catalog.create_table(
        "db.users",
        schema="id long not null, plan string, ver long, del long",
        primary_key="id",
        properties={"floe.merge.version-column": "ver", "floe.merge.delete-column": "del"},
    )
    assert t.primary_key == ["id"]
    batch = pa.table({"id": [1, 2, 1], "plan": ["a", "b", "c"], "ver": [1, 1, 2], "del": [0, 0, 0]})
    r = t.upsert(batch, sink_id="s", checkpoint=1)
    assert isinstance(r, floe.UpsertResult)
    assert (r.inserted_records_count, r.keys_count, r.rows_inserted) == (2, 2, 2)
    assert r.committed_checkpoint == 1 and not r.already_committed
    with pytest.raises(floe.InvalidInputError, match="needs checkpoint"):
        t.upsert(batch, sink_id="s")
    again = t.upsert(batch, sink_id="s", checkpoint=1)
    assert again.already_committed and again.snapshot_id is None
    r2 = t.upsert(pl.DataFrame({"id": [2, 3], "plan": ["gone", "new"], "ver": [5, 1], "del": [1, 0]}),
                  sink_id="s", checkpoint=2)
    assert (r2.deleted_records_count, r2.inserted_records_count) == (1, 1)
    stale = t.upsert(pa.table({"id": [2], "plan": ["late"], "ver": [3], "del": [0]}))
    assert stale.stale_records_count == 1
    got = t.scan().to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == [1, 3]
    assert got.column("plan").to_pylist() == ["c", "new"]
    # join_cols equal to the key (in any order, spaced) is the keyed upsert
    r3 = t.upsert(pa.table({"id": [3], "plan": ["newer"], "ver": [2], "del": [0]}), join_cols=[" id"])
    assert isinstance(r3, floe.UpsertResult) and r3.updated_records_count == 1
    # join_cols other than the key would leave two live rows for one key: refused
    n = len(t.snapshots())
    with pytest.raises(floe.InvalidInputError, match="keyed by id.*nothing was committed"):
        t.upsert(pa.table({"id": [1], "plan": ["c"], "ver": [9], "del": [0]}), join_cols=["plan"])
    assert len(t.refresh().snapshots()) == n
    got = t.scan().to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == [1, 3]
    assert got.column("plan").to_pylist() == ["c", "newer"]
    # a table without a primary key: upsert is a MERGE by join_cols
    p = catalog.create_table("db.plain", schema=SCHEMA)
    p.append(data([1, 2]))
    m = p.upsert(data([2, 3], name="u"), join_cols=["id"])
    # one result type whatever the table (pyiceberg's names too)
    assert isinstance(m, floe.UpsertResult) and m.lookup == "merge"
    assert (m.rows_updated, m.rows_inserted, m.keys_count, m.input_records_count) == (1, 1, 2, 2)
    assert sorted(p.scan().to_arrow().column("name").to_pylist()) == ["n1", "u2", "u3"]
    with pytest.raises(floe.InvalidInputError, match="primary key"):
        p.upsert(data([4]))


def test_maintenance_keeps_the_rows(catalog, warehouse):
    t = catalog.create_table(
        "db.t", schema=SCHEMA, partition_by="bucket(2, id)", format_version=2,
        properties={"write.delete.mode": "merge-on-read"},
    )
    for i in range(6):
        t.append(data(range(i * 20, i * 20 + 20)))
    t.delete("id % 5 = 0")
    t.delete("id % 7 = 0")
    want = rows(plain(t.scan().to_arrow()))

    pd_ = t.rewrite_position_delete_files(rewrite_all=True)
    assert isinstance(pd_, floe.RewritePositionDeleteFilesResult)
    assert pd_.rewritten_delete_files_count >= 2 and pd_.snapshot_id is not None
    assert rows(plain(t.scan().to_arrow())) == want

    rw = t.rewrite_data_files(where="id < 1000", min_input_files=2)
    assert isinstance(rw, floe.RewriteDataFilesResult)
    assert rw.rewritten_data_files_count >= 2 and rw.file_groups_count >= 1
    assert rows(plain(t.scan().to_arrow())) == want
    srt = t.rewrite_data_files(strategy="sort", sort_by="price desc", options={"rewrite-all": "true"})
    assert srt.added_data_files_count >= 1
    assert rows(plain(t.scan().to_arrow())) == want
    z = t.rewrite_data_files(strategy="zorder", zorder_by=["id", "price"], rewrite_all=True)
    assert z.snapshot_id is not None

    mf = t.rewrite_manifests()
    assert isinstance(mf, floe.RewriteManifestsResult)

    c = t.clone("db.copy")
    assert isinstance(c, floe.CloneResult) and c.source == "db.t"
    assert rows(plain(catalog.load_table("db.copy").scan().to_arrow())) == want

    n = len(t.snapshots())
    dry = t.expire_snapshots(older_than=dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc),
                             retain_last=1, dry_run=True)
    assert dry.dry_run and len(dry.expired_snapshot_ids) == n - 1
    assert len(t.refresh().snapshots()) == n
    ex = t.expire_snapshots(older_than="2100-01-01T00:00:00Z", retain_last=1)
    assert len(ex.expired_snapshot_ids) == n - 1 and ex.deleted_data_files_count > 0
    assert len(t.snapshots()) == 1
    assert rows(plain(t.scan().to_arrow())) == want
    orphan = os.path.join(t.location.replace("file://", ""), "data", "stray.parquet")
    with open(orphan, "wb") as f:
        f.write(b"x")
    o = t.remove_orphan_files(older_than=int(dt.datetime(2100, 1, 1).timestamp() * 1000), dry_run=True)
    assert isinstance(o, floe.RemoveOrphanFilesResult)
    assert any(p.endswith("stray.parquet") for p in o.orphan_file_locations) and os.path.exists(orphan)
    o2 = t.remove_orphan_files(older_than="2100-01-01T00:00:00Z")
    assert o2.orphan_files_count >= 1 and not os.path.exists(orphan)
    assert rows(plain(pyiceberg_catalog(warehouse).load_table("db.t").scan().to_arrow())) == want


def test_maintain_plans_then_compacts(catalog, warehouse):
    t = catalog.create_table(
        "db.m", schema=SCHEMA, format_version=2,
        properties={"write.delete.mode": "merge-on-read"},
    )
    for i in range(6):
        t.append(data(range(i * 10, i * 10 + 10)))
    t.delete("id % 3 = 0")
    want = rows(plain(t.scan().to_arrow()))
    n = len(t.snapshots())
    plan = t.maintain(dry_run=True)
    assert isinstance(plan, floe.MaintainResult) and plan.dry_run and plan.commits_count == 0
    first = plan.steps[0]
    assert first["step"] == "rewrite-data-files" and first["action"] == "planned"
    assert first["counts"]["rewritten_data_files_count"] == 6, first
    assert len(t.refresh().snapshots()) == n
    done = t.maintain()
    assert done.steps[0]["action"] == "done" and done.commits_count >= 1 and done.failed_steps_count == 0
    assert t.inspect.data_files().num_rows == 1 and t.inspect.delete_files().num_rows == 0
    assert rows(plain(t.scan().to_arrow())) == want
    assert rows(plain(pyiceberg_catalog(warehouse).load_table("db.m").scan().to_arrow())) == want
    again = t.maintain()
    assert all(s["action"] == "skipped" for s in again.steps), again


def test_sink_writes_commits_and_resumes(catalog):
    t = catalog.create_table(
        "db.s",
        schema="id long not null, v string, ver long, is_deleted int",
        primary_key=["id"],
        properties={"floe.merge.version-column": "ver", "floe.merge.delete-column": "is_deleted"},
    )
    batch = lambda ids, ver, dele=0: pa.table({  # noqa: E731
        "id": pa.array(ids, pa.int64()), "v": [f"v{ver}"] * len(ids),
        "ver": pa.array([ver] * len(ids), pa.int64()), "is_deleted": pa.array([dele] * len(ids), pa.int32()),
    })
    s = t.sink("cdc")
    assert s.write(batch([1, 2, 3], 1)) == 3
    assert s.write(batch([3], 2, dele=1)) == 4 and s.pending_rows == 4
    r = s.commit(checkpoint=1)
    assert isinstance(r, floe.UpsertResult) and r.committed_checkpoint == 1 and s.pending_rows == 0
    s.write(batch([1], 3))
    again = s.commit(checkpoint=1)  # a re-sent batch: nothing applied
    assert again.already_committed and again.snapshot_id is None
    with t.sink("cdc") as s2:
        assert s2.committed_checkpoint == 1
        s2.write(batch([4], 4))
    with pytest.raises(RuntimeError):
        with t.sink("cdc") as s3:
            s3.write(batch([5], 5))
            raise RuntimeError("the pipeline failed")
    got = sorted((r["id"], r["v"]) for r in t.refresh().scan().to_arrow().to_pylist())
    assert got == [(1, "v1"), (2, "v1"), (4, "v4")]
    # After a compaction in this process the sink's key index follows the moved rows.
    s4 = t.sink("cdc")
    s4.write(batch([6], 6))
    s4.commit(checkpoint=6)
    assert s4.refresh() == "current"
    t.refresh().rewrite_data_files(options={"rewrite-all": "true"})
    assert s4.refresh() == "caught-up"
    s4.write(batch([2], 7))
    assert s4.commit(checkpoint=7).lookup == "index"
    got = sorted((r["id"], r["v"]) for r in t.refresh().scan().to_arrow().to_pylist())
    assert got == [(1, "v1"), (2, "v7"), (4, "v4"), (6, "v6")]
    with pytest.raises(floe.InvalidInputError):
        t.sink().commit(checkpoint=3)
    with pytest.raises(floe.FloeError):
        catalog.create_table("db.plain", schema="id long").sink("x")


def test_ingest_snapshot_and_publish(catalog):
    st = catalog.create_table("db.staging", schema="id long not null, v string, ver long",
                              primary_key="id")
    snap1 = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"], "ver": [1, 1, 1]})
    r = st.ingest_snapshot(snap1, key="id", version="ver", publish="db.pub")
    assert isinstance(r, floe.IngestSnapshotResult)
    assert r.inserted_records_count == 3 and isinstance(r.published, floe.CloneResult)
    snap2 = pl.DataFrame({"id": [1, 2, 4], "v": ["a", "B", "d"], "ver": [1, 2, 1]})
    r2 = st.ingest_snapshot(snap2, key=["id"], version="ver", publish="db.pub")
    assert (r2.unchanged_records_count, r2.updated_records_count, r2.inserted_records_count) == (1, 1, 1)
    pub = catalog.load_table("db.pub").scan().to_arrow().sort_by("id")
    # keys absent from a later snapshot stay (the merge keeps the latest row per key)
    assert pub.column("id").to_pylist() == [1, 2, 3, 4]
    assert pub.column("v").to_pylist() == ["a", "B", "c", "d"]


def test_inspect_tables_and_catalog_calls(catalog):
    t = catalog.create_table("db.t", schema=SCHEMA, format_version=3,
                             properties={"write.delete.mode": "merge-on-read"})
    t.append(data(range(10)))
    t.delete("id = 3")
    for name in ["snapshots", "history", "refs", "metadata_log_entries", "manifests",
                 "all_manifests", "files", "data_files", "delete_files", "all_files",
                 "all_data_files", "all_delete_files", "entries", "all_entries", "partitions",
                 "position_deletes"]:
        got = getattr(t.inspect, name)()
        assert isinstance(got, pa.Table), name
    assert t.inspect.snapshots().num_rows == 2
    assert t.inspect.delete_files().num_rows == 1
    assert t.inspect.position_deletes().num_rows == 1
    first = t.snapshots()[0].snapshot_id
    assert t.inspect.data_files(snapshot_id=first).num_rows >= 1
    assert catalog.list_namespaces() == ["db"]
    assert catalog.list_tables("db") == ["db.t"]
    assert catalog.table_exists("db.t") and not catalog.table_exists("db.nope")
    catalog.rename_table("db.t", "db.t2")
    assert catalog.load_table("db.t2").scan().count() == 9
    catalog.create_namespace("other")
    assert "other" in catalog.list_namespaces()
    catalog.drop_namespace("other")
    d = catalog.purge_table("db.t2")
    assert isinstance(d, floe.DropTableResult) and d.purged and d.deleted_files_count > 0
    assert not catalog.table_exists("db.t2")


def test_results_carry_the_cli_json_keys():
    # Each dataclass is built with **the JSON document; a key added or renamed in the CLI's
    # report (src/bin/floe/report.rs, shared by the binding) fails the constructor. Here:
    # the field names follow the JSON vocabulary (docs/src/reference/json.md: snake_case,
    # counts end in _count).
    for cls in [floe.AppendResult, floe.RowLevelResult, floe.RewriteDataFilesResult,
                floe.ExpireSnapshotsResult, floe.CloneResult, floe.IngestSnapshotResult]:
        names = [f.name for f in dataclasses.fields(cls)]
        assert names[0] == "table"
        assert all(n == n.lower() for n in names)


def test_exceptions_by_kind(catalog, warehouse):
    assert issubclass(floe.ConflictError, floe.FloeError)
    assert issubclass(floe.CommitStateUnknownError, floe.FloeError)
    with pytest.raises(floe.NotFoundError, match="db.missing"):
        catalog.load_table("db.missing")
    t = catalog.create_table("db.t", schema=SCHEMA)
    with pytest.raises(floe.AlreadyExistsError):
        catalog.create_table("db.t", schema=SCHEMA)
    with pytest.raises(floe.InvalidInputError, match="nocol"):
        t.delete("nocol = 1")
    with pytest.raises(floe.InvalidInputError):
        t.append(pa.table({"id": ["not a number"]}))
    with pytest.raises(floe.InvalidInputError):
        t.append([1, 2, 3])
    with pytest.raises(floe.NotFoundError):
        t.scan(snapshot_id=123).to_arrow()
    with pytest.raises(floe.InvalidInputError):
        floe.load_catalog("default", warehouse=warehouse, bogus=1)
    # A rewrite whose input a delete rewrote meanwhile commits, the delete carried over ...
    for i in range(3):
        t.append(data(range(i * 10, i * 10 + 10)))
    plan = t._inner.plan_rewrite(None, {"rewrite-all": "true"})
    first = t._inner.stage_rewrite(plan, 0)
    again = t._inner.stage_rewrite(plan, 0)
    other = catalog.load_table("db.t")
    other.delete("id = 1")
    t._inner.commit_pending([first])
    assert t.refresh().scan().count() == 29
    # ... and a conflict: the same task committed again finds every input gone.
    with pytest.raises(floe.ConflictError):
        t._inner.commit_pending([again])
    assert t.refresh().scan().count() == 29
    # A corrupt data file.
    path = t.inspect.data_files().column("file_path").to_pylist()[0].replace("file://", "")
    with open(path, "r+b") as f:
        f.truncate(20)
    with pytest.raises(floe.CorruptError):
        t.scan().to_arrow()


def test_pickle_reopens(catalog):
    t = catalog.create_table("db.t", schema=SCHEMA)
    t.append(data(range(3)))
    t2 = pickle.loads(pickle.dumps(t))
    assert t2.name == "db.t" and t2.scan().count() == 3
    c2 = pickle.loads(pickle.dumps(catalog))
    assert c2.load_table("db.t").scan().count() == 3


def test_load_catalog_takes_the_environment_refuses_a_missing_one_and_closes(tmp_path, monkeypatch):
    wh = str(tmp_path / "wh")
    # A mistyped warehouse is an error, not a new empty catalog (and nothing is created).
    with pytest.raises(floe.NotFoundError, match="create=True"):
        floe.load_catalog("default", warehouse=wh)
    assert not os.path.exists(wh)
    with floe.load_catalog("default", warehouse=wh, create=True) as cat:
        cat.create_table("db.t", schema=SCHEMA)
    with pytest.raises(floe.InvalidInputError, match="closed"):
        cat.load_table("db.t")
    cat.close()  # twice is fine
    # FLOE_WAREHOUSE / FLOE_CATALOG, as the CLI reads them.
    monkeypatch.setenv("FLOE_WAREHOUSE", wh)
    assert floe.load_catalog().table_exists("db.t")
    monkeypatch.delenv("FLOE_WAREHOUSE")
    monkeypatch.setenv("FLOE_CATALOG", f"sqlite:///{wh}/catalog.db")
    assert floe.load_catalog(warehouse=wh).list_tables("db") == ["db.t"]


def test_alter_sql_refs_rollback_and_changes(catalog):
    t = catalog.create_table("db.t", schema=SCHEMA)
    t.append(data(range(0, 5)))
    first = t.current_snapshot_id
    t.append(data(range(5, 10)))
    second = t.current_snapshot_id
    # alter: one commit, the handle sees the new schema.
    r = t.alter("ADD COLUMNS (note string, extra int)")
    assert r.changes_count == 2 and "note" in t.schema().names
    t.alter("SET TBLPROPERTIES ('write.delete.mode'='merge-on-read')")
    assert t.properties["write.delete.mode"] == "merge-on-read"
    with pytest.raises(floe.FloeError, match="id"):
        t.alter("ADD COLUMN id long")  # exists: nothing committed
    # Catalog.sql: ALTER TABLE and DML, as `floe sql`.
    doc = catalog.sql("ALTER TABLE db.t RENAME COLUMN note TO remark")
    assert doc["changes_count"] == 1
    doc = catalog.sql("DELETE FROM db.t WHERE id = 7")
    assert doc["deleted_records_count"] == 1
    with pytest.raises(floe.InvalidInputError, match="scan"):
        catalog.sql("SELECT * FROM db.t")
    t.refresh()
    assert "remark" in t.schema().names and t.scan().count() == 9
    # Branches and tags.
    b = t.create_branch("audit", snapshot_id=first)
    assert (b.ref, b.ref_type, b.snapshot_id) == ("audit", "branch", first)
    tag = t.create_tag("v1")
    assert tag.snapshot_id == t.current_snapshot_id
    assert catalog.load_table("db.t.branch_audit").scan().count() == 5
    assert t.fast_forward("audit", "main").snapshot_id == t.current_snapshot_id
    t.remove_branch("audit")
    t.remove_tag("v1")
    assert t.inspect.refs().column("name").to_pylist() == ["main"]
    # Rollback: main moves back; the handle follows it; changes between snapshots.
    r = t.rollback_to_snapshot(second)
    assert r.current_snapshot_id == second and t.current_snapshot_id == second
    assert t.scan().count() == 10
    ch = t.changes(first, second)
    assert sorted(ch.column("id").to_pylist()) == list(range(5, 10))
    assert set(ch.column("_change_type").to_pylist()) == {"INSERT"}
    assert t.set_current_snapshot(first).current_snapshot_id == first
    assert t.scan().count() == 5
    with pytest.raises(floe.FloeError, match="123"):
        t.rollback_to_snapshot(123)


def test_pandas_types_are_refused_in_pandas_words(catalog):
    pd = pytest.importorskip("pandas")
    t = catalog.create_table("db.ts", schema="id long, ts timestamptz")
    naive = pd.DataFrame({"id": [1], "ts": pd.to_datetime(["2024-01-01 10:00"])})
    with pytest.raises(floe.InvalidInputError, match="tz_localize"):
        t.append(naive)
    naive["ts"] = naive["ts"].dt.tz_localize("UTC")
    t.append(naive)
    # An int column with a missing value is float64 in pandas.
    gaps = pd.DataFrame({"id": [1, None], "ts": naive["ts"].tolist() * 2})
    with pytest.raises(floe.InvalidInputError, match="Int64"):
        t.append(gaps)
    gaps["id"] = gaps["id"].astype("Int64")
    t.append(gaps)
    assert t.scan().count() == 3
    assert len(t.snapshots()) == 2
