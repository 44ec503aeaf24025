"""floe on a local Ray cluster (ray.init(num_cpus=2)): distributed compaction and a
distributed upsert / append through the Ray Data sink give the same rows as the
single-process calls, read by floe, pyiceberg, DuckDB and Spark (at session end); a
compaction task whose worker process dies (or fails on storage) is retried by Ray and the
job still commits once; without retries, or with a group failing for good, the job fails
with nothing committed and nothing left behind, unless partial progress is enabled (the
other groups committed, the failed group's files counted and kept); the Ray Data source
reads with the row filter pushed down."""

from __future__ import annotations

import json
import logging
import os
import random

import pyarrow as pa
import pytest

import floe
from conftest import duckdb_rows, plain, pyiceberg_catalog, rows, spark_check

ray = pytest.importorskip("ray")
import floe.ray as fr  # noqa: E402

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("g", pa.int32()),
                    ("v", pa.string()), ("ver", pa.int64())])


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


def batch(rng, ids, ver=1):
    ids = list(ids)
    return pa.table({"id": ids, "g": [i % 5 for i in ids], "v": [f"v{rng.randrange(100)}" for _ in ids],
                     "ver": [ver] * len(ids)}, schema=SCHEMA)


def fragmented(catalog, name, rng):
    t = catalog.create_table(name, schema=SCHEMA, partition_by="g", primary_key="id",
                             properties={"write.delete.mode": "merge-on-read",
                                         "floe.merge.version-column": "ver"})
    for i in range(6):
        t.append(batch(rng, range(i * 50, i * 50 + 50)))
    t.delete("id % 9 = 4")
    return t


def check_peers(warehouse, t, want, key=("id",)):
    assert rows(plain(t.scan().to_arrow()), key) == want
    assert rows(plain(pyiceberg_catalog(warehouse).load_table(t.name).scan().to_arrow()),
                key) == want
    assert rows(plain(duckdb_rows(t.metadata_location)), key) == want
    spark_check(t, f"ray {t.name}")


def test_distributed_compaction_equals_single_process(catalog, warehouse):
    rng = random.Random(1)
    a = fragmented(catalog, "db.a", rng)
    a.clone("db.b")
    b = catalog.load_table("db.b")
    want = rows(plain(a.scan().to_arrow()))
    n_b = len(b.snapshots())
    local = a.rewrite_data_files(rewrite_all=True)
    dist = fr.rewrite_data_files(b, num_workers=2, rewrite_all=True)
    assert isinstance(dist, floe.RewriteDataFilesResult)
    assert dist.file_groups_count == local.file_groups_count == 5
    assert dist.rewritten_data_files_count == local.rewritten_data_files_count
    assert dist.added_data_files_count == local.added_data_files_count
    assert len(b.refresh().snapshots()) == n_b + 1  # one commit
    assert b.snapshots()[-1].operation == "replace"
    check_peers(warehouse, b, want)
    check_peers(warehouse, a, want)
    # partial progress: several commits, same rows
    for i in range(3):
        b.append(batch(rng, range(1000 + i * 50, 1000 + i * 50 + 50)))
    want = rows(plain(b.scan().to_arrow()))
    n = len(b.snapshots())
    p = fr.rewrite_data_files(b, rewrite_all=True, partial_progress_enabled=True,
                              partial_progress_max_commits=3)
    assert p.failed_data_files_count == 0 and p.file_groups_count == 5
    assert len(b.refresh().snapshots()) == n + 3
    check_peers(warehouse, b, want)


def faulty_rewrite_task(log_dir, fault, always=False):
    """floe.ray's rewrite task wrapped to inject a fault (test-only; installed with
    monkeypatch as ``floe.ray._rewrite_task``, which ``rewrite_data_files`` hands to Ray at
    each call, so the wrapper runs in the Ray workers). Each attempt appends a line to
    ``log_dir/g<group>``. The first attempt to start claims the ``bad`` marker (its group
    and file count); attempts of that group then fail — the first only, or every one with
    ``always`` — by ``fault``: ``"die"`` (the worker process exits: a system failure Ray
    retries) or an exception class raised in the task."""
    orig = fr._rewrite_task

    def task(table, plan, group):
        with open(os.path.join(log_dir, f"g{group}"), "a") as f:
            f.write("attempt\n")
        attempts = len(open(os.path.join(log_dir, f"g{group}")).readlines())
        bad = os.path.join(log_dir, "bad")
        files = next(len(t["files"]) for t in json.loads(plan)["tasks"] if t["group"] == group)
        tmp = os.path.join(log_dir, f"claim{group}-{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump({"group": group, "files": files}, f)
        try:
            os.link(tmp, bad)  # atomic: the first attempt to get here claims it
        except FileExistsError:
            pass
        os.unlink(tmp)
        with open(bad) as f:
            bad_group = json.load(f)["group"]
        if group == bad_group and (always or attempts == 1):
            if fault == "die":
                os._exit(17)
            raise fault(f"injected failure of group {group}")
        return orig(table, plan, group)

    return task


def attempts(log_dir):
    """{group: attempts}, and the bad group's {group, files}."""
    counts = {int(n[1:]): len(open(os.path.join(log_dir, n)).readlines())
              for n in os.listdir(log_dir) if n.startswith("g")}
    return counts, json.load(open(os.path.join(log_dir, "bad")))


def no_files_left(t):
    return t.remove_orphan_files(older_than="2100-01-01T00:00:00Z",
                                 dry_run=True).orphan_files_count == 0


@pytest.mark.parametrize("fault", ["die", floe.StorageError])
def test_compaction_task_that_dies_is_retried(catalog, warehouse, tmp_path, monkeypatch, fault):
    rng = random.Random(4)
    a = fragmented(catalog, "db.a", rng)
    a.clone("db.b")
    b = catalog.load_table("db.b")
    want = rows(plain(a.scan().to_arrow()))
    local = a.rewrite_data_files(rewrite_all=True)
    log = tmp_path / "log"
    log.mkdir()
    monkeypatch.setattr(fr, "_rewrite_task", faulty_rewrite_task(str(log), fault))
    n = len(b.snapshots())
    dist = fr.rewrite_data_files(b, num_workers=2, rewrite_all=True)
    counts, bad = attempts(str(log))
    # every group ran; the bad one twice (its first worker died / failed), the rest once
    assert len(counts) == local.file_groups_count == 5
    assert counts.pop(bad["group"]) == 2 and set(counts.values()) == {1}
    assert (dist.file_groups_count, dist.rewritten_data_files_count, dist.added_data_files_count,
            dist.failed_data_files_count) == (
        local.file_groups_count, local.rewritten_data_files_count, local.added_data_files_count, 0)
    assert len(b.refresh().snapshots()) == n + 1  # one commit
    assert b.snapshots()[-1].operation == "replace"
    assert rows(plain(b.scan().to_arrow())) == rows(plain(a.scan().to_arrow())) == want
    check_peers(warehouse, b, want)


def test_compaction_without_retries_fails_with_nothing_committed(catalog, tmp_path, monkeypatch):
    rng = random.Random(5)
    t = fragmented(catalog, "db.a", rng)
    want = rows(plain(t.scan().to_arrow()))
    log = tmp_path / "log"
    log.mkdir()
    monkeypatch.setattr(fr, "_rewrite_task", faulty_rewrite_task(str(log), "die"))
    snaps = t.snapshots()
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        fr.rewrite_data_files(t, num_workers=2, rewrite_all=True, max_retries=0)
    counts, bad = attempts(str(log))
    assert counts[bad["group"]] == 1  # not retried
    assert t.refresh().snapshots() == snaps
    assert rows(plain(t.scan().to_arrow())) == want
    assert no_files_left(t)  # the groups that succeeded: their files deleted


@pytest.mark.parametrize("partial", [True, False])
def test_compaction_group_failing_for_good(catalog, warehouse, tmp_path, monkeypatch, partial):
    rng = random.Random(6)
    t = fragmented(catalog, "db.a", rng)
    want = rows(plain(t.scan().to_arrow()))
    live = set(t.inspect.data_files().column("file_path").to_pylist())
    log = tmp_path / "log"
    log.mkdir()
    monkeypatch.setattr(fr, "_rewrite_task", faulty_rewrite_task(str(log), "die", always=True))
    n = len(t.snapshots())
    if not partial:
        with pytest.raises(ray.exceptions.WorkerCrashedError):
            fr.rewrite_data_files(t, num_workers=2, rewrite_all=True, max_retries=1)
        assert len(t.refresh().snapshots()) == n
        assert set(t.inspect.data_files().column("file_path").to_pylist()) == live
        assert no_files_left(t)
        return
    r = fr.rewrite_data_files(t, num_workers=2, rewrite_all=True, max_retries=1,
                              partial_progress_enabled=True, partial_progress_max_commits=10)
    counts, bad = attempts(str(log))
    assert counts.pop(bad["group"]) == 2  # retried once, died again
    assert len(counts) == 4 and set(counts.values()) == {1}
    # the four other groups committed (one commit each), the bad group's files counted
    assert r.failed_data_files_count == bad["files"] > 0
    assert r.file_groups_count == 4
    assert r.rewritten_data_files_count == len(live) - bad["files"]
    assert len(t.refresh().snapshots()) == n + 4
    assert all(s.operation == "replace" for s in t.snapshots()[n:])
    after = set(t.inspect.data_files().column("file_path").to_pylist())
    assert len(live & after) == bad["files"]  # the failed group's files are still live
    assert rows(plain(t.scan().to_arrow())) == want
    check_peers(warehouse, t, want)


def test_datasink_upsert_and_append_equal_single_process(catalog, warehouse):
    rng = random.Random(2)
    a = fragmented(catalog, "db.a", rng)
    a.clone("db.b")
    changes = batch(rng, range(200, 400), ver=2)
    single = a.upsert(changes)
    ds = ray.data.from_arrow(changes).repartition(4)
    sink = fr.FloeDatasink(None, "db.b", mode="upsert", warehouse=warehouse,
                           sink_id="ray", checkpoint=7)
    ds.write_datasink(sink)
    r = sink.result
    assert isinstance(r, floe.UpsertResult)
    assert (r.inserted_records_count, r.updated_records_count) == (
        single.inserted_records_count, single.updated_records_count)
    assert r.committed_checkpoint == 7
    b = catalog.load_table("db.b")
    assert b.snapshots()[-1].snapshot_id == r.snapshot_id
    want = rows(plain(a.scan().to_arrow()))
    check_peers(warehouse, b, want)
    # no staged file is left behind
    assert b.remove_orphan_files(older_than="2100-01-01T00:00:00Z", dry_run=True).orphan_files_count == 0
    # append mode, one snapshot for every task
    c = catalog.create_table("db.c", schema=SCHEMA)
    n = len(c.snapshots())
    sink2 = fr.FloeDatasink(catalog, "db.c")
    ray.data.from_arrow(batch(rng, range(300))).repartition(5).write_datasink(sink2)
    assert sink2.result.added_records_count == 300
    c.refresh()
    assert len(c.snapshots()) == n + 1
    assert c.scan().count() == 300
    check_peers(warehouse, c, rows(plain(c.scan().to_arrow())))


SINK_CASES = {
    # a new column, added by the upsert (evolve_schema)
    "evolve": (dict(schema="id long not null, plan string, ver long",
                    properties={"floe.merge.version-column": "ver"}),
               lambda ids: {"id": ids, "plan": [f"p{i}" for i in ids], "ver": [1] * len(ids)},
               lambda ids: {"id": ids, "plan": [f"q{i}" for i in ids], "ver": [2] * len(ids),
                            "extra": [f"e{i}" for i in ids]},
               True),
    # deletes whose required non-key column is null (a CDC `before` with only the key)
    "deletes": (dict(schema="id long not null, plan string not null, ver long, del int",
                     properties={"floe.merge.version-column": "ver",
                                 "floe.merge.delete-column": "del"}),
                lambda ids: {"id": ids, "plan": [f"p{i}" for i in ids], "ver": [1] * len(ids),
                             "del": pa.array([0] * len(ids), pa.int32())},
                lambda ids: {"id": ids,
                             "plan": [None if i % 3 == 0 else f"q{i}" for i in ids],
                             "ver": [2] * len(ids),
                             "del": pa.array([int(i % 3 == 0) for i in ids], pa.int32())},
                False),
    # an aggregate engine reading an input column that is not a table column (avg:ms)
    "aggregate": (dict(schema="id long not null, hits long, avg_ms double",
                       properties={"floe.merge-engine": "aggregate",
                                   "floe.aggregate.hits": "sum",
                                   "floe.aggregate.avg_ms": "avg:ms"}),
                  lambda ids: {"id": [i % 40 for i in ids], "hits": [1] * len(ids),
                               "ms": [float(i) for i in ids]},
                  lambda ids: {"id": [i % 40 for i in ids], "hits": [1] * len(ids),
                               "ms": [float(i * 3) for i in ids]},
                  False),
}


@pytest.mark.parametrize("case", sorted(SINK_CASES))
def test_datasink_upsert_is_the_single_process_upsert(catalog, warehouse, case):
    """The sink's upsert applies the rows as given, so whatever `Table.upsert` accepts (new
    columns, null columns in deletes, aggregate input columns) it applies alike."""
    create, initial, changes, evolve = SINK_CASES[case]
    for name in ("db.single", "db.ray"):
        t = catalog.create_table(name, primary_key="id", **create)
        t.upsert(pa.table(initial(list(range(0, 60)))))
    rows_in = pa.table(changes(list(range(30, 130))))
    single = catalog.load_table("db.single").upsert(rows_in, evolve_schema=evolve)
    sink = fr.FloeDatasink(catalog, "db.ray", mode="upsert", evolve_schema=evolve,
                           sink_id="ray", checkpoint=3)
    ray.data.from_arrow(rows_in).repartition(4).write_datasink(sink)
    # the replace engine without evolution: the tasks wrote the rows
    assert sink.staged_upsert == (case == "deletes")
    r = sink.result
    for k in ("inserted_records_count", "updated_records_count", "deleted_records_count",
              "keys_count", "input_records_count", "added_columns"):
        assert getattr(r, k) == getattr(single, k), k
    assert r.committed_checkpoint == 3
    t = catalog.load_table("db.ray")
    want = rows(plain(catalog.load_table("db.single").scan().to_arrow()))
    got = rows(plain(t.scan().to_arrow()))
    if case == "aggregate":  # sums of doubles in another order: equal up to rounding
        for g, w in zip(got, want):
            assert g.keys() == w.keys() and g["id"] == w["id"] and g["hits"] == w["hits"]
            assert g["avg_ms"] == pytest.approx(w["avg_ms"])
        assert len(got) == len(want)
    else:
        assert got == want
    assert len(t.snapshots()) == 2  # the first upsert, then one commit
    if case == "evolve":
        assert "extra" in t.schema().names
    check_peers(warehouse, t, got)


@pytest.mark.parametrize("fv,mode", [(3, "merge-on-read"), (2, "copy-on-write")])
def test_distributed_upsert_rounds_equal_single_process(catalog, warehouse, fv, mode):
    """Rounds of random changes (a key changed in several tasks, versions out of order,
    deletes, stale replays) written by Ray tasks and committed once by the driver leave the
    rows, counts and tombstones of one single-process upsert of the same rows, and no staged
    file behind."""
    rng = random.Random(fv)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string()),
                        ("ver", pa.int64()), ("del", pa.int32())])
    props = {"floe.merge.version-column": "ver", "floe.merge.delete-column": "del",
             "write.merge.mode": mode, "write.delete.mode": mode, "write.update.mode": mode}
    for name in ("db.single", "db.ray"):
        catalog.create_table(name, schema=schema, primary_key="id", partition_by="bucket(3, id)",
                             format_version=fv, properties=props)
    for rnd in range(4):
        n = 400
        ids = [rng.randrange(150) for _ in range(n)]
        # versions unique per round (Ray hands the driver the tasks' results in no set
        # order: equal versions in two tasks would make arrival order decide); a tenth are
        # replays older than the previous round's
        fresh = rng.sample(range(10_000), n)
        vers = [(rnd + 1) * 10_000 + v if rng.random() > 0.1 else rnd * 10_000 - v - 1
                for v in fresh]
        dels = [int(rng.random() < 0.15) for _ in range(n)]
        data = pa.table({"id": ids, "v": [f"r{rnd}-{i}" for i in range(n)], "ver": vers,
                         "del": pa.array(dels, pa.int32())}, schema=schema)
        single = catalog.load_table("db.single").upsert(data)
        sink = fr.FloeDatasink(catalog, "db.ray", mode="upsert")
        assert sink.staged_upsert
        ray.data.from_arrow(data).repartition(3).write_datasink(sink)
        r = sink.result
        for k in ("inserted_records_count", "updated_records_count", "deleted_records_count",
                  "keys_count", "input_records_count", "stale_records_count"):
            assert getattr(r, k) == getattr(single, k), (rnd, k)
        want = rows(plain(catalog.load_table("db.single").scan().to_arrow()))
        t = catalog.load_table("db.ray")
        assert rows(plain(t.scan().to_arrow())) == want, rnd
    left = t.remove_orphan_files(older_than="2100-01-01T00:00:00Z", dry_run=True)
    assert [p for p in left.orphan_file_locations
            if "/metadata/staged-" in p or "/metadata/" not in p] == []
    check_peers(warehouse, t, want)


@pytest.mark.parametrize("engine", ["aggregate", "sum", "partial-update", "partial-update-ver",
                                    "first-row"])
def test_merge_engine_upsert_shuffled_equals_single_process(catalog, warehouse, engine):
    """A merge engine's Ray upsert: each task folds its rows by key with the functions'
    states (duplicates of a key within and across tasks, nulls, input columns that are not
    table columns; a partial-update ordered by a version column keeps its rows) and splits
    them by key into shards; one Ray task per shard merges it with the stored rows and
    writes the new rows; the driver commits once. After every round the rows (states
    included) and counts are those of one single-process upsert, no row or shard file is
    left behind, and in the last round a commit landing while the shards merge makes the
    driver merge them again."""
    rng = random.Random(len(engine))
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("hits", pa.int64()),
                        ("top", pa.float64()), ("avg_ms", pa.float64()), ("users", pa.int64()),
                        ("last", pa.string()), ("ver", pa.int64())])
    props = {"floe.merge-engine": engine.removesuffix("-ver"),
             "write.merge.mode": "merge-on-read"}
    if engine == "aggregate":
        props.update({"floe.aggregate.hits": "sum", "floe.aggregate.top": "max",
                      "floe.aggregate.avg_ms": "avg:ms", "floe.aggregate.users": "count_distinct:user",
                      "floe.aggregate.last": "last_non_null"})
    if engine == "sum":
        props.update({"floe.aggregate.hits": "sum", "floe.merge.drop-zero-rows": "true"})
    if engine == "partial-update-ver":
        props["floe.merge.version-column"] = "ver"
    for name in ("db.single", "db.ray"):
        catalog.create_table(name, schema=schema, primary_key="k", format_version=3,
                             properties=props)
    rounds = 4
    for rnd in range(rounds):
        n = 300
        maybe = lambda v: None if rng.random() < 0.15 else v  # noqa: E731
        cols = {"k": [rng.randrange(60) for _ in range(n)],
                "hits": [maybe(rng.randrange(-3, 4)) for _ in range(n)],
                "top": [maybe(rng.uniform(-5, 5)) for _ in range(n)],
                "last": [maybe(f"r{rnd}-{i}") for i in range(n)],
                # distinct versions, out of order across rounds and tasks
                "ver": rng.sample(range(100_000), n)}
        if engine == "aggregate":
            cols["ms"] = [maybe(float(rng.randrange(100))) for _ in range(n)]
            cols["user"] = [maybe(rng.randrange(40)) for _ in range(n)]
        data = pa.table(cols)
        single = catalog.load_table("db.single").upsert(data)
        sink = fr.FloeDatasink(catalog, "db.ray", mode="upsert", shards=3)
        assert sink.shuffled and not sink.staged_upsert
        if rnd == rounds - 1:
            # Another writer commits a key no batch has while the shards merge (the single-
            # process table gets it too).
            extra = data.slice(0, 1).set_column(0, "k", pa.array([1000], pa.int64()))
            catalog.load_table("db.single").upsert(extra)
            sink = RacedSink(catalog, "db.ray", mode="upsert", shards=3,
                             race=lambda: catalog.load_table("db.ray").upsert(extra))
        # Blocks in order (one task each): arrival order decides first/last.
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        try:
            ray.data.from_arrow([data.slice(i, 100) for i in range(0, n, 100)]).write_datasink(sink)
        finally:
            ctx.execution_options.preserve_order = False
        r = sink.result
        for key in ("inserted_records_count", "updated_records_count", "deleted_records_count",
                    "keys_count", "input_records_count", "stale_records_count"):
            assert getattr(r, key) == getattr(single, key), (rnd, key, r, single)
        assert r.attempts_count == 1
        want = rows(plain(catalog.load_table("db.single").scan().to_arrow()), key=("k",))
        got = rows(plain(catalog.load_table("db.ray").scan().to_arrow()), key=("k",))
        assert got == want, rnd
    assert sink.raced == 1
    t = catalog.load_table("db.ray")
    left = t.remove_orphan_files(older_than="2100-01-01T00:00:00Z", dry_run=True)
    assert [p for p in left.orphan_file_locations
            if "/metadata/staged-" in p or "/metadata/" not in p] == []
    if engine == "sum":
        check_peers(warehouse, t, got, key=("k",))


class RacedSink(fr.FloeDatasink):
    """A sink whose first shard merge is overtaken by another writer's commit."""

    def __init__(self, *args, race, **kwargs):
        super().__init__(*args, **kwargs)
        self.race, self.raced = race, 0

    def _commit_shuffled(self, table, tasks):
        inner = table._inner
        sink = self

        class Racing:
            def __getattr__(self, name):
                return getattr(inner, name)

            def commit_pending(self, *args):
                if not sink.raced:
                    sink.raced += 1
                    sink.race()
                return inner.commit_pending(*args)

        class Proxy:
            _inner = Racing()
            properties = table.properties

        return super()._commit_shuffled(Proxy(), tasks)


class FailingSink(fr.FloeDatasink):
    """A sink whose job fails after tasks staged: in the task holding ids >= 1000 (after the
    other tasks finished) or in the driver before it commits. ``cleanup=False`` skips the
    cleanup (the control: files are then left)."""

    def __init__(self, *args, fail_in, cleanup=True, **kwargs):
        super().__init__(*args, **kwargs)
        self.fail_in, self.cleanup = fail_in, cleanup

    def write(self, blocks, ctx):
        blocks = list(blocks)
        data = fr._as_arrow(blocks)
        if self.fail_in == "task" and data.num_rows and max(data["id"].to_pylist()) >= 1000:
            import time

            time.sleep(3)
            raise RuntimeError("a write task failed")
        return super().write(blocks, ctx)

    def on_write_complete(self, write_result):
        if self.fail_in == "driver":
            raise RuntimeError("the driver failed before its commit")
        super().on_write_complete(write_result)

    def on_write_failed(self, error):
        if self.cleanup:
            super().on_write_failed(error)


def files_of(warehouse):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(warehouse) for f in fs)


@pytest.mark.parametrize("mode,fail_in,cleanup", [
    ("append", "task", True), ("append", "driver", True), ("upsert", "task", True),
    ("upsert", "driver", True), ("append", "driver", False), ("upsert", "task", False)])
def test_a_failed_job_leaves_no_staged_file(catalog, warehouse, mode, fail_in, cleanup):
    """A Ray job that fails before its commit (a task raising after the others staged, or
    the driver failing in on_write_complete) deletes what its finished tasks staged, though
    Ray hands on_write_failed none of their results: the table's files and rows are those of
    before. Without the cleanup (the control) the finished tasks' files are left."""
    rng = random.Random(11)
    t = catalog.create_table("db.t", schema=SCHEMA, partition_by="g", primary_key="id")
    t.append(batch(rng, range(300)))
    before, want = files_of(warehouse), rows(plain(t.scan().to_arrow()))
    data = [batch(rng, range(i, i + 100), ver=2) for i in (0, 500)]
    if fail_in == "task":
        data.append(batch(rng, range(1000, 1100), ver=2))
    sink = FailingSink(catalog, "db.t", mode=mode, fail_in=fail_in, cleanup=cleanup)
    with pytest.raises(Exception, match="failed"):
        ray.data.from_arrow(data).write_datasink(sink)
    after = files_of(warehouse)
    tagged = [f for f in after if sink.job in os.path.basename(f)]
    if cleanup:
        assert tagged == [] and after == before
    else:
        assert tagged and sorted(set(after) - set(before)) == tagged
    t = catalog.load_table("db.t")
    assert rows(plain(t.scan().to_arrow())) == want
    assert len(t.snapshots()) == 1


def test_datasource_reads_with_pushdown(catalog):
    rng = random.Random(3)
    t = fragmented(catalog, "db.a", rng)
    src = fr.FloeDatasource(t, row_filter="g = 2 AND id < 200", selected_fields=["id", "v"],
                            target_bytes=1)
    assert len(src.groups) == 4  # only partition g=2's files, one per group
    got = ray.data.read_datasource(src).to_arrow_refs()
    got = pa.concat_tables(ray.get(got))
    want = t.scan(row_filter="g = 2 AND id < 200", selected_fields=["id", "v"]).to_arrow()
    assert got.column_names == ["id", "v"]
    assert rows(plain(got)) == rows(plain(want))
    assert fr.read_floe(t).count() == t.scan().count()


@pytest.mark.parametrize("fail_in", ["task", "shard", "driver"])
def test_a_failed_shuffled_upsert_leaves_nothing(catalog, warehouse, fail_in):
    """A merge engine's shuffled upsert failing in a write task (after others split their
    rows), in a shard's merge (a new key whose merged row lacks a required column: the
    tasks' shard files and the other shards' staged rows exist by then), or in the driver
    before its commit: the job raises, and the table's files and rows are those of before."""
    rng = random.Random(12)
    t = catalog.create_table("db.s", schema="id long not null, g int, hits long, v string not null",
                             primary_key="id", properties={"floe.merge-engine": "sum",
                                                           "floe.aggregate.hits": "sum"})
    t.upsert(pa.table({"id": list(range(300)), "g": pa.array([1] * 300, pa.int32()),
                       "hits": [1] * 300,
                       "v": [f"v{i}" for i in range(300)]}))
    before, want = files_of(warehouse), rows(plain(t.scan().to_arrow()))

    def block(ids, v=lambda i: f"w{rng.randrange(9)}"):
        return pa.table({"id": ids, "g": pa.array([1] * len(ids), pa.int32()),
                         "hits": [2] * len(ids),
                         "v": [v(i) for i in ids]})

    data = [block(list(range(i, i + 100))) for i in (0, 150)]
    if fail_in == "task":
        data.append(block(list(range(1000, 1100))))
    if fail_in == "shard":  # key 2000 is new and comes without v
        data.append(block([2000, 5], v=lambda i: None))
    sink = FailingSink(catalog, "db.s", mode="upsert", shards=3, fail_in=fail_in)
    assert sink.shuffled
    with pytest.raises(Exception, match="failed|required column 'v'"):
        ray.data.from_arrow(data).write_datasink(sink)
    assert files_of(warehouse) == before
    assert rows(plain(catalog.load_table("db.s").scan().to_arrow())) == want
