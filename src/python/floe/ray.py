"""floe on Ray: distributed compaction, a Ray Data sink and a Ray Data source.

* :func:`rewrite_data_files` plans in the driver, runs each file group as a Ray task (the
  library's serializable rewrite plan, as ``floe rewrite-data-files --plan-only`` /
  ``--execute-task`` / ``--commit``), and commits once in the driver. Ray retries a task whose
  worker dies (and one failing on storage I/O); with ``partial_progress_enabled=True`` the
  groups that succeeded are committed (in up to ``partial_progress_max_commits`` commits)
  and the failed ones counted in ``failed_data_files_count``.
* :class:`FloeDatasink`: ``ds.write_datasink(FloeDatasink(uri, "db.t"))``. Each write task
  writes its blocks as data files (conformed, partitioned, sorted and rolled as ``append``
  writes them; not committed); the driver commits them all in one snapshot in
  ``on_write_complete``, through the same commit loop (retries, conflict validation) as
  ``floe append``. ``mode="upsert"`` (a keyed table): each write task folds its rows by
  key and writes the winning upserts as data files, with a list of its keys, versions,
  deletes and the rows' positions; the driver folds those key lists, looks up the stored
  rows, removes the rows replaced or deleted (deletion vectors / position deletes, or
  rewritten files, as ``write.merge.mode`` says), leaves out of the tasks' files the rows
  that lost (to another task's change of the key, or to a higher stored version or
  tombstone) and commits once with the tombstones and ``sink_id``/``checkpoint``: the
  result is that of one :meth:`floe.Table.upsert` of all the rows, and no row passes
  through the driver. The engines that fold rows (``sum``, ``aggregate``, ``partial-update``,
  ``first-row``) need the stored rows of the keys, so their upsert shuffles by key: each
  write task folds its rows into one row per key with the functions' states (``pre_fold``;
  merging is associative; a ``partial-update`` ordered by a version column keeps the rows as
  they are) and writes them split by a hash of the key into ``shards`` files; the driver
  then runs one Ray task per shard, which merges that shard of every task (in task order)
  with the stored rows of its keys and writes the keys' new rows as data files; the driver
  commits all shards at once, onto the state of the table they merged with (after a
  concurrent commit the shards are merged again, up to ``commit.retry.num-retries`` times).
  ``evolve_schema=True`` hands the rows as they are to the driver instead. A key's changes
  in different tasks are folded in the order Ray returns the tasks' results: give the table
  a version column (or set ``DataContext.execution_options.preserve_order``) when arrival
  order decides.
  Every file the tasks stage carries the sink's staging job id in its name: when the job
  fails before the commit (a task raises, the driver's ``on_write_complete`` fails before
  committing), ``on_write_failed`` deletes what the finished tasks staged, though Ray hands
  it none of their results. A failed commit cleans up after itself, and an unknown commit
  outcome leaves everything in place.
* :class:`FloeDatasource` / :func:`read_floe`: the driver plans the scan (row filter pushed
  down to partition, metrics and row-group pruning), each read task reads one group of data
  files with their deletes applied.

Requires ``ray[data]`` (``pip install 'floe[ray]'``).
"""

from __future__ import annotations

import json
import math
import uuid
import warnings
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import pyarrow as pa
import ray
from ray.data import Datasink, Datasource, ReadTask
from ray.data.block import BlockAccessor, BlockMetadata

import floe
from floe import (
    AppendResult,
    Catalog,
    RewriteDataFilesResult,
    StorageError,
    Table,
    UpsertResult,
    _result,
    _rewrite_options,
)

__all__ = ["rewrite_data_files", "FloeDatasink", "FloeDatasource", "read_floe"]


def _rewrite_task(table: Table, plan: str, group: int) -> str:
    return table._inner.stage_rewrite(plan, group)


def _merge_shard(catalog: Catalog, identifier: str, tasks: List[str], shard: int,
                 job: str) -> str:
    return catalog.load_table(identifier)._inner.stage_merged_upsert(tasks, shard, job)


def rewrite_data_files(
    table: Table,
    where: Optional[str] = None,
    *,
    num_workers: Optional[int] = None,
    strategy: str = "binpack",
    sort_by: Optional[str] = None,
    zorder_by: Union[None, str, Sequence[str]] = None,
    options: Optional[Mapping[str, Any]] = None,
    max_retries: int = 3,
    **kwargs: Any,
) -> RewriteDataFilesResult:
    """:meth:`floe.Table.rewrite_data_files` with each file group a Ray task (at most
    ``num_workers`` at a time; default: as many as Ray schedules). Same options. A task
    whose worker process dies, or that raises :class:`floe.StorageError`, is retried up to
    ``max_retries`` times; a group that still fails fails the job (nothing committed, the
    other tasks' files deleted) unless ``partial_progress_enabled=True``."""
    o = _rewrite_options(strategy, sort_by, zorder_by, options, kwargs)
    plan_text = table._inner.plan_rewrite(where, o)
    plan = json.loads(plan_text)
    if plan is None or not plan["tasks"]:
        return RewriteDataFilesResult(
            table=table.name, snapshot_id=None, rewritten_data_files_count=0,
            added_data_files_count=0, rewritten_bytes_count=0, failed_data_files_count=0,
            removed_delete_files_count=0, file_groups_count=0, elapsed_ms=0,
        )
    tasks = plan["tasks"]
    files_of = {t["group"]: len(t["files"]) for t in tasks}
    remote = ray.remote(
        max_retries=max_retries, retry_exceptions=[StorageError]
    )(_rewrite_task)
    plan_ref = ray.put(plan_text)
    limit = num_workers or len(tasks)
    pending: Dict[Any, int] = {}
    results: Dict[int, str] = {}
    errors: Dict[int, BaseException] = {}
    queue = [t["group"] for t in tasks]
    try:
        while queue or pending:
            while queue and len(pending) < limit:
                g = queue.pop(0)
                pending[remote.remote(table, plan_ref, g)] = g
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                g = pending.pop(ref)
                try:
                    results[g] = ray.get(ref)
                except Exception as e:  # the task failed after its retries
                    errors[g] = e
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        if results:
            table._inner.discard_pending(list(results.values()))
        raise
    partial = o.get("partial-progress.enabled", "false").lower() == "true"
    if errors and not partial:
        if results:
            table._inner.discard_pending(list(results.values()))
        raise next(iter(errors.values()))
    if not partial:
        ordered = [results[t["group"]] for t in tasks]
        return _result(RewriteDataFilesResult, table._inner.commit_pending(ordered, partial=False))
    # Partial progress: the groups that succeeded, in up to max-commits commits.
    max_commits = max(1, int(o.get("partial-progress.max-commits", "10")))
    per_commit = math.ceil(len(tasks) / max_commits)
    failed_files = sum(files_of[g] for g in errors)
    combined: Optional[Dict[str, Any]] = None
    last_error: Optional[BaseException] = next(iter(errors.values()), None)
    for i in range(0, len(tasks), per_commit):
        batch = [results[t["group"]] for t in tasks[i : i + per_commit] if t["group"] in results]
        if not batch:
            continue
        try:
            r = table._inner.commit_pending(batch, partial=True)
        except floe.FloeError as e:
            table._inner.discard_pending(batch)
            failed_files += sum(len(json.loads(b)["staged"]["task"]["files"]) for b in batch)
            last_error = e
            continue
        if combined is None:
            combined = dict(r)
        else:
            for k in ("rewritten_data_files_count", "added_data_files_count",
                      "rewritten_bytes_count", "removed_delete_files_count",
                      "file_groups_count", "elapsed_ms"):
                combined[k] += r[k]
            combined["snapshot_id"] = r["snapshot_id"]
    if combined is None:
        assert last_error is not None
        raise last_error
    combined["failed_data_files_count"] = failed_files
    return _result(RewriteDataFilesResult, combined)


def _catalog(catalog: Union[None, str, Catalog], warehouse: Optional[str], name: str) -> Catalog:
    if isinstance(catalog, Catalog):
        return catalog
    return floe.load_catalog(name, uri=catalog, warehouse=warehouse, create=False)


def _as_arrow(blocks: Iterable[Any]) -> pa.Table:
    tables = [BlockAccessor.for_block(b).to_arrow() for b in blocks]
    tables = [t for t in tables if t.num_rows > 0]
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="permissive")


class FloeDatasink(Datasink):
    """A Ray Data sink writing a floe table in one commit.

    ``catalog``: a catalog URI (``sqlite:////abs/catalog.db``, ``postgresql://...``, ...),
    a :class:`floe.Catalog`, or None with ``warehouse``. ``mode``: ``"append"`` (one append
    snapshot) or ``"upsert"`` (a keyed table; one upsert with ``sink_id``/``checkpoint``).
    After ``ds.write_datasink(sink)``, ``sink.result`` holds the
    :class:`floe.AppendResult` / :class:`floe.UpsertResult`."""

    def __init__(
        self,
        catalog: Union[None, str, Catalog],
        identifier: str,
        mode: str = "append",
        *,
        warehouse: Optional[str] = None,
        catalog_name: str = "default",
        sink_id: Optional[str] = None,
        checkpoint: Optional[int] = None,
        evolve_schema: bool = False,
        shards: Optional[int] = None,
    ) -> None:
        if mode not in ("append", "upsert"):
            raise floe.InvalidInputError(f"mode={mode!r}: expected 'append' or 'upsert'")
        self.catalog = _catalog(catalog, warehouse, catalog_name)
        self.identifier = identifier
        self.mode = mode
        self.sink_id = sink_id
        self.checkpoint = checkpoint
        self.evolve_schema = evolve_schema
        self.result: Union[None, AppendResult, UpsertResult] = None
        #: Tags every file the tasks stage (see ``on_write_failed``).
        self.job = uuid.uuid4().hex
        # Set once on_write_complete starts a commit: the commit cleans up after itself.
        self._committing = False
        # Fail in the driver, before any task runs, when the table is missing.
        table = self.catalog.load_table(identifier)
        engine = table.properties.get("floe.merge-engine", "replace")
        #: Whether upsert tasks write their rows (else the driver applies them).
        self.staged_upsert = mode == "upsert" and engine == "replace" and not evolve_schema
        #: Whether upsert tasks split their rows by key into shards, merged with the stored
        #: rows by one Ray task per shard (merge engines that fold rows).
        self.shuffled = mode == "upsert" and engine != "replace" and not evolve_schema
        if shards is not None and not 1 <= shards <= 4096:
            raise floe.InvalidInputError(f"shards={shards}: expected 1 to 4096")
        if shards is None:
            cpus = ray.cluster_resources().get("CPU", 0) if ray.is_initialized() else 0
            shards = max(1, int(cpus)) if cpus else 4
        #: Shards of a shuffled upsert (default: the cluster's CPUs).
        self.shards = shards

    def get_name(self) -> str:
        return f"Floe({self.identifier})"

    def write(self, blocks: Iterable[Any], ctx: Any) -> Union[None, str, pa.Table]:
        data = _as_arrow(blocks)
        if data.num_rows == 0:
            return None
        table = self.catalog.load_table(self.identifier)
        if self.shuffled:
            return table._inner.stage_shuffle(data, self.shards, self.job)
        if self.mode == "upsert" and not self.staged_upsert:
            # The rows as given: the upsert conforms them itself (evolving the schema).
            return data
        if self.staged_upsert:
            return table._inner.stage_upsert(data, self.job)
        return table._inner.stage(data, self.job)

    def on_write_complete(self, write_result: Any) -> None:
        returned = [r for r in write_result.write_returns if r is not None]
        table = self.catalog.load_table(self.identifier)
        self._committing = True
        self.result = self._commit(table, returned)
        self._committing = False

    def _commit(self, table: Table, returned: List[Any]) -> Union[AppendResult, UpsertResult]:
        if self.mode == "append":
            return _result(AppendResult, table._inner.commit_pending(returned))
        if self.staged_upsert:
            return _result(
                UpsertResult,
                table._inner.commit_pending(returned, self.sink_id, self.checkpoint),
            )
        if self.shuffled:
            return self._commit_shuffled(table, returned)
        rows = (pa.concat_tables(returned, promote_options="permissive") if returned
                else table.schema().empty_table())
        return _result(
            UpsertResult,
            table._inner.upsert(rows, self.sink_id, self.checkpoint, self.evolve_schema),
        )

    def _commit_shuffled(self, table: Table, tasks: List[str]) -> UpsertResult:
        """Merges each shard in a Ray task and commits them all; merges again after a
        concurrent commit. The shard files go in any case (no snapshot references them)."""
        if not tasks:  # no rows: the checkpoint alone
            return _result(
                UpsertResult, table._inner.upsert_pre_folded([], self.sink_id, self.checkpoint)
            )
        split = [json.loads(t)["staged"]["shards"] for t in tasks]
        shards = [s for s in range(self.shards) if any(t[s] for t in split)]
        retries = int(table.properties.get("commit.retry.num-retries", "4"))
        merge = ray.remote(_merge_shard)
        try:
            for attempt in range(retries + 1):
                refs = [merge.remote(self.catalog, self.identifier, tasks, s, self.job)
                        for s in shards]
                try:
                    staged = ray.get(refs)
                except BaseException:
                    # Nothing is being committed: once every shard task stopped (the others
                    # are cancelled), what they staged goes.
                    for r in refs:
                        ray.cancel(r)
                    ray.wait(refs, num_returns=len(refs))
                    table._inner.discard_staging_job(self.job)
                    raise
                try:
                    return _result(UpsertResult, table._inner.commit_pending(
                        staged, self.sink_id, self.checkpoint))
                except floe.ConflictError:  # the commit deleted what it staged
                    if attempt == retries:
                        raise
            raise AssertionError("unreachable")
        finally:
            table._inner.discard_pending(tasks)

    def on_write_failed(self, error: Exception) -> None:
        # Before a commit began, nothing of this job is committed: delete what the tasks
        # that finished staged (Ray passes none of their results here). After, the commit
        # deleted what surely was not committed, and an unknown outcome must keep it all.
        committing, self._committing = self._committing, False
        if committing:
            return
        try:
            table = self.catalog.load_table(self.identifier)
            table._inner.discard_staging_job(self.job)
        except Exception as e:  # the job's own error is what Ray raises next
            warnings.warn(
                f"floe: could not delete the files staging job {self.job} left in "
                f"{self.identifier} ({e}); remove_orphan_files will find them",
                RuntimeWarning,
            )


class FloeDatasource(Datasource):
    """A Ray Data source reading a floe table: planned in the driver (``row_filter`` pruning
    partitions, files and row groups), one read task per group of about
    ``target_bytes`` of data files."""

    def __init__(
        self,
        table: Table,
        row_filter: Optional[str] = None,
        selected_fields: Sequence[str] = ("*",),
        snapshot_id: Optional[int] = None,
        *,
        target_bytes: int = 128 << 20,
    ) -> None:
        self.table = table
        self.row_filter = row_filter
        f = list(selected_fields)
        self.selected_fields = None if f in ([], ["*"]) else f
        snap, schema, groups = table._inner.plan_file_groups(
            row_filter, self.selected_fields, snapshot_id, target_bytes
        )
        self.snapshot_id = snap
        self.schema: pa.Schema = schema
        self.groups: List[Dict[str, Any]] = groups

    def get_name(self) -> str:
        return f"Floe({self.table.name})"

    def estimate_inmemory_data_size(self) -> Optional[int]:
        return sum(g["size_in_bytes"] for g in self.groups)

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: Optional[int] = None, data_context: Any = None
    ) -> List[ReadTask]:
        table, row_filter, fields, snap = (
            self.table, self.row_filter, self.selected_fields, self.snapshot_id
        )

        def reader(files: List[str]):
            def read() -> Iterable[pa.Table]:
                return [table._inner.read_files(files, row_filter, fields, snap)]
            return read

        return [
            ReadTask(
                reader(g["files"]),
                BlockMetadata(
                    num_rows=None,
                    size_bytes=g["size_in_bytes"],
                    input_files=g["files"],
                    exec_stats=None,
                ),
                schema=self.schema,
            )
            for g in self.groups
        ]


def read_floe(
    table: Table,
    row_filter: Optional[str] = None,
    selected_fields: Sequence[str] = ("*",),
    snapshot_id: Optional[int] = None,
    **kwargs: Any,
) -> "ray.data.Dataset":
    """``ray.data.read_datasource(FloeDatasource(table, ...))``."""
    return ray.data.read_datasource(
        FloeDatasource(table, row_filter, selected_fields, snapshot_id), **kwargs
    )
