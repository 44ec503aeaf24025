"""floe: write and read Apache Iceberg tables (v2/v3) from Python, without a JVM.

A pyiceberg-like API over the floe Rust library (the same engine as the ``floe`` CLI)::

    import pyarrow as pa
    import floe

    catalog = floe.load_catalog("default", warehouse="/tmp/warehouse", create=True)
    table = catalog.create_table("db.events", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))
    table.delete("id = 2")
    print(table.scan(row_filter="id > 0").to_arrow())

Arrow data crosses without copies (the Arrow C stream interface): inputs are anything with
``__arrow_c_stream__`` / ``__arrow_c_array__`` (pyarrow, polars, DuckDB, ...), outputs are
pyarrow objects. Work runs with the GIL released; Ctrl-C cancels it with nothing committed.
Results are dataclasses whose fields are the CLI's ``--json`` keys. Row filters, ``where``
conditions and ``update`` expressions are SQL (the CLI's ``--where`` syntax).
"""

from __future__ import annotations

import datetime as _dt
import os as _os
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Type,
    TypeVar,
    Union,
)

import pyarrow as pa

from . import _floe
from ._floe import (
    AlreadyExistsError,
    CommitStateUnknownError,
    ConflictError,
    CorruptError,
    FloeError,
    InvalidInputError,
    NotFoundError,
    StorageError,
    UnsupportedError,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas
    import polars

__version__: str = _floe.__version__

__all__ = [
    "load_catalog",
    "Catalog",
    "Table",
    "DataScan",
    "InspectTable",
    "Expr",
    "AppendResult",
    "RowLevelResult",
    "UpsertResult",
    "RewriteDataFilesResult",
    "RewritePositionDeleteFilesResult",
    "RewriteManifestsResult",
    "ExpireSnapshotsResult",
    "RemoveOrphanFilesResult",
    "MaintainResult",
    "Sink",
    "CloneResult",
    "IngestSnapshotResult",
    "DropTableResult",
    "Snapshot",
    "FloeError",
    "ConflictError",
    "NotFoundError",
    "AlreadyExistsError",
    "InvalidInputError",
    "CommitStateUnknownError",
    "CorruptError",
    "UnsupportedError",
    "StorageError",
]

# ---------------------------------------------------------------------------------------
# Results: the CLI's --json documents as dataclasses (field names are the JSON keys).
# ---------------------------------------------------------------------------------------

R = TypeVar("R")


def _result(cls: Type[R], doc: Mapping[str, Any]) -> R:
    return cls(**doc)  # a key missing or extra is a TypeError: the classes track the CLI


@dataclass(frozen=True)
class AppendResult:
    """What ``append`` committed (``floe append --json``)."""

    table: str
    snapshot_id: Optional[int]
    added_records_count: int
    added_data_files_count: int
    added_bytes_count: int
    elapsed_ms: int


@dataclass(frozen=True)
class RowLevelResult:
    """What ``delete`` / ``update`` / ``merge`` committed (``floe delete --json``)."""

    table: str
    snapshot_id: Optional[int]
    mode: str
    deleted_records_count: int
    added_records_count: int
    rewritten_records_count: int
    removed_data_files_count: int
    added_data_files_count: int
    added_delete_files_count: int
    added_bytes_count: int
    #: A MERGE merged partition by partition (``source_partitions_count``,
    #: ``read_partitions_count``, ``spilled_bytes_count``); ``None`` when read in one pass.
    aligned: Optional[Dict[str, int]]
    #: A MERGE's clauses: ``updated_records_count``, ``deleted_records_count``,
    #: ``inserted_records_count``; ``None`` for a DELETE or UPDATE.
    merged: Optional[Dict[str, int]]
    elapsed_ms: int


@dataclass(frozen=True)
class AlterResult:
    """What ``alter`` committed (``floe alter --json``, without the schema documents)."""

    table: str
    metadata_location: str
    format_version: int
    changes_count: int
    attempts_count: int


@dataclass(frozen=True)
class RefResult:
    """What a branch, tag or rollback call changed (``floe branch/tag/rollback --json``)."""

    table: str
    ref: str
    ref_type: str
    snapshot_id: Optional[int]
    current_snapshot_id: Optional[int]
    previous_snapshot_id: Optional[int]


@dataclass(frozen=True)
class UpsertResult:
    """What a keyed ``upsert`` did (``floe upsert --json``)."""

    table: str
    snapshot_id: Optional[int]
    sink_id: Optional[str]
    checkpoint: Optional[int]
    committed_checkpoint: Optional[int]
    already_committed: bool
    input_records_count: int
    keys_count: int
    inserted_records_count: int
    updated_records_count: int
    deleted_records_count: int
    deleted_absent_keys_count: int
    stale_records_count: int
    tombstone_records_count: int
    added_data_files_count: int
    added_delete_files_count: int
    added_bytes_count: int
    added_columns: List[str]
    attempts_count: int
    lookup: str
    parts_count: int
    elapsed_ms: int

    @property
    def rows_updated(self) -> int:
        """pyiceberg's name for ``updated_records_count``."""
        return self.updated_records_count

    @property
    def rows_inserted(self) -> int:
        """pyiceberg's name for ``inserted_records_count``."""
        return self.inserted_records_count


@dataclass(frozen=True)
class RewriteDataFilesResult:
    """What ``rewrite_data_files`` did (``floe rewrite-data-files --json``)."""

    table: str
    snapshot_id: Optional[int]
    rewritten_data_files_count: int
    added_data_files_count: int
    rewritten_bytes_count: int
    failed_data_files_count: int
    removed_delete_files_count: int
    file_groups_count: int
    elapsed_ms: int


@dataclass(frozen=True)
class RewritePositionDeleteFilesResult:
    """``floe rewrite-position-delete-files --json``."""

    table: str
    snapshot_id: Optional[int]
    rewritten_delete_files_count: int
    added_delete_files_count: int
    rewritten_bytes_count: int
    added_bytes_count: int
    elapsed_ms: int


@dataclass(frozen=True)
class RewriteManifestsResult:
    """``floe rewrite-manifests --json``."""

    table: str
    snapshot_id: Optional[int]
    rewritten_manifests_count: int
    added_manifests_count: int
    elapsed_ms: int


@dataclass(frozen=True)
class ExpireSnapshotsResult:
    """``floe expire-snapshots --json``."""

    table: str
    dry_run: bool
    expired_snapshot_ids: List[int]
    deleted_data_files_count: int
    deleted_delete_files_count: int
    deleted_manifest_files_count: int
    deleted_manifest_lists_count: int
    deleted_tombstone_files_count: int
    metadata_location: Optional[str]
    cleanup_error: Optional[str]
    elapsed_ms: int


@dataclass(frozen=True)
class RemoveOrphanFilesResult:
    """``floe remove-orphan-files --json``."""

    table: str
    dry_run: bool
    orphan_file_locations: List[str]
    orphan_files_count: int
    elapsed_ms: int


@dataclass(frozen=True)
class MaintainResult:
    """``floe maintain --json``: each step's ``step``, ``action`` (done, planned, skipped,
    failed), ``reason`` (the numbers behind the decision), ``counts``, ``commits_count``,
    ``snapshot_ids`` and ``error``."""

    table: str
    dry_run: bool
    lease_holder: Optional[str]
    steps: List[Dict[str, Any]]
    commits_count: int
    failed_steps_count: int
    elapsed_ms: int


class Sink:
    """A keyed table's sink (``Table.sink()``): ``write`` buffers rows, ``commit`` applies
    them as one batch (exactly once per ``checkpoint`` of its ``sink_id``) through one key
    index kept in memory between commits, ``close`` commits what is left. As a context
    manager, leaving the block by an exception discards the buffered rows instead."""

    def __init__(self, inner: Any, name: str) -> None:
        self._inner = inner
        self.name = name

    def write(self, df: "ArrowData") -> int:
        """Buffers rows (anything ``Table.append`` takes); returns the rows buffered."""
        return self._inner.write(_arrow(df))

    def commit(self, checkpoint: Optional[int] = None) -> UpsertResult:
        """Applies the buffered rows as one batch, with an optional checkpoint."""
        return _result(UpsertResult, self._inner.commit(checkpoint))

    @property
    def pending_rows(self) -> int:
        """Rows written and not committed."""
        return self._inner.pending_rows()

    @property
    def committed_checkpoint(self) -> Optional[int]:
        """The checkpoint the table holds for this sink."""
        return self._inner.committed_checkpoint()

    def discard(self) -> int:
        """Drops the buffered rows (nothing of them is committed); returns how many."""
        return self._inner.discard()

    def refresh(self) -> str:
        """Brings the sink's key index up to the table after ``Table.maintain()`` in this
        process, so the next commit does not pay for the compaction: ``"caught-up"``,
        ``"current"``, ``"dropped"`` (the next commit rebuilds it) or ``"none"``."""
        return self._inner.refresh()

    def close(self, checkpoint: Optional[int] = None) -> Optional[UpsertResult]:
        """Commits the rows still buffered (if any)."""
        if self._inner.pending_rows() == 0:
            return None
        return self.commit(checkpoint)

    def __enter__(self) -> "Sink":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()


@dataclass(frozen=True)
class CloneResult:
    """``floe clone --json``."""

    table: str
    source: str
    snapshot_id: int
    source_snapshot_id: int
    replaced: bool
    data_files_count: int
    copied_manifests_count: int
    reused_manifests_count: int
    refs: List[Dict[str, Any]]
    elapsed_ms: int


@dataclass(frozen=True)
class IngestSnapshotResult:
    """``floe ingest-snapshot --json`` (``published``: the clone that published it)."""

    table: str
    snapshot_id: Optional[int]
    staging_snapshot_ids: List[int]
    strategy: str
    mode: str
    snapshot_records_count: int
    partitions_count: int
    unchanged_records_count: int
    updated_records_count: int
    inserted_records_count: int
    stale_records_count: int
    duplicate_records_count: int
    merged_partitions_count: int
    hashed_partitions_count: int
    added_records_count: int
    added_bytes_count: int
    added_data_files_count: int
    added_delete_files_count: int
    removed_data_files_count: int
    expired_data_files_count: int
    published: Optional[CloneResult]
    ingest_elapsed_ms: int
    elapsed_ms: int


@dataclass(frozen=True)
class DropTableResult:
    """``floe drop --json``."""

    table: str
    purged: bool
    deleted_files_count: int
    kept_shared_files_count: int


@dataclass(frozen=True)
class Snapshot:
    """One snapshot (``floe snapshots --json``)."""

    snapshot_id: int
    parent_snapshot_id: Optional[int]
    sequence_number: int
    timestamp_ms: int
    operation: str
    summary: Dict[str, str]
    manifest_list: str
    first_row_id: Optional[int]
    added_rows: Optional[int]


# ---------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------

ArrowData = Any
"""Anything with ``__arrow_c_stream__`` or ``__arrow_c_array__`` (pyarrow Table,
RecordBatch, RecordBatchReader, polars DataFrame, DuckDB relation), or a pandas DataFrame."""


def _frame_arrow_schema(data: Any) -> Optional[pa.Schema]:
    """The Arrow schema of a pandas or polars DataFrame, without converting its rows."""
    mod = type(data).__module__
    try:
        if mod.startswith("polars"):
            return data.head(0).to_arrow().schema
        if mod.startswith("pandas"):
            return pa.Schema.from_pandas(data.head(0), preserve_index=False)
    except Exception:
        return None
    return None


def _arrow(data: ArrowData) -> Any:
    if hasattr(data, "__arrow_c_stream__") or hasattr(data, "__arrow_c_array__"):
        return data
    mod = type(data).__module__
    if mod.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if isinstance(data, (list, tuple)) and all(isinstance(b, pa.RecordBatch) for b in data):
        return pa.Table.from_batches(list(data))
    raise InvalidInputError(
        f"expected Arrow data (pyarrow Table / RecordBatch / RecordBatchReader, polars or "
        f"pandas DataFrame, or an object with __arrow_c_stream__), got {type(data).__name__}"
    )


class Expr(str):
    """A SQL expression (not a string literal) as an ``update`` value:
    ``table.update({"price": floe.Expr("price * 1.1")})``."""


def _sql_literal(v: Any) -> str:
    if isinstance(v, Expr):
        return str(v)
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, _dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, _dt.date):
        return f"DATE '{v.isoformat()}'"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    raise InvalidInputError(f"update value {v!r}: give a number, string, bool, date, None or floe.Expr")


def _time_ms(t: Union[None, int, str, _dt.datetime]) -> Optional[int]:
    if t is None:
        return None
    if isinstance(t, _dt.datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=_dt.timezone.utc)
        return int(t.timestamp() * 1000)
    if isinstance(t, int):
        return t
    if isinstance(t, str):
        s = t.strip()
        if s.lstrip("-").isdigit():
            return int(s)
        d = _dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
        return _time_ms(d)
    raise InvalidInputError(f"expected a datetime, milliseconds or an ISO time, got {t!r}")


def _options(options: Optional[Mapping[str, Any]], kwargs: Mapping[str, Any]) -> Dict[str, str]:
    """Spark procedure options: a dict with their own names, or keyword arguments with
    ``_`` for ``-`` (``min_input_files=2``; ``partial_progress_enabled`` for
    ``partial-progress.enabled``)."""
    out: Dict[str, str] = {}
    dotted = {"partial_progress_enabled": "partial-progress.enabled",
              "partial_progress_max_commits": "partial-progress.max-commits"}
    items = list((options or {}).items()) + [
        (dotted.get(k, k.replace("_", "-")), v) for k, v in kwargs.items()
    ]
    for k, v in items:
        if v is None:
            continue
        out[k] = ("true" if v else "false") if isinstance(v, bool) else str(v)
    return out


def _rewrite_options(strategy: str, sort_by: Optional[str],
                     zorder_by: Union[None, str, Sequence[str]],
                     options: Optional[Mapping[str, Any]],
                     kwargs: Mapping[str, Any]) -> Dict[str, str]:
    """``rewrite_data_files`` options: the strategy, a sort order or z-order columns, and
    Spark's options (see :func:`_options`)."""
    o = _options(options, kwargs)
    o["strategy"] = strategy
    if sort_by:
        o["sort-order"] = sort_by
    if zorder_by:
        o["zorder-by"] = zorder_by if isinstance(zorder_by, str) else ",".join(zorder_by)
    return o


def _csv(v: Union[None, str, Sequence[str]]) -> Optional[str]:
    if v is None or isinstance(v, str):
        return v
    return ", ".join(v)


# ---------------------------------------------------------------------------------------
# Catalog
# ---------------------------------------------------------------------------------------


def load_catalog(
    name: str = "default",
    *,
    uri: Optional[str] = None,
    warehouse: Optional[str] = None,
    create: bool = False,
    **properties: Any,
) -> "Catalog":
    """Opens a catalog, as the CLI's ``--catalog`` / ``--warehouse`` do.

    ``uri``: ``sqlite:////abs/catalog.db``, ``postgresql://user:pw@host:port/db``,
    ``rest+http://host:port`` (Iceberg REST) or ``file:///warehouse`` (Hadoop layout);
    default: SQLite at ``<warehouse>/catalog.db``. Without ``uri`` / ``warehouse`` the
    environment's ``FLOE_CATALOG`` / ``FLOE_WAREHOUSE`` are used, as the CLI uses them.
    ``name`` is the catalog name (the SQL catalog's ``catalog_name`` column, as in
    pyiceberg). A catalog that does not exist is an error (a mistyped path would otherwise
    give an empty catalog) unless ``create=True``, which creates a missing SQLite catalog or
    warehouse directory. Close it with ``close()`` or use it in a ``with`` block.
    """
    if properties:
        raise InvalidInputError(
            f"unknown catalog properties {sorted(properties)}; floe takes uri= and warehouse= "
            "(S3 settings come from AWS_* environment variables)"
        )
    if uri is None:
        uri = _os.environ.get("FLOE_CATALOG") or None
    if warehouse is None:
        warehouse = _os.environ.get("FLOE_WAREHOUSE") or None
    if warehouse and "://" not in warehouse:
        warehouse = _os.path.abspath(warehouse)  # tasks on other workers open the same one
    try:
        return Catalog(_floe.Catalog(uri, warehouse, name, create))
    except NotFoundError as e:
        if create:
            raise
        raise NotFoundError(f"{e}; pass create=True to create a new catalog there") from None


def _load_catalog_again(uri: Optional[str], warehouse: Optional[str], name: str) -> "Catalog":
    return Catalog(_floe.Catalog(uri, warehouse, name, False))


class Catalog:
    """A catalog (see :func:`load_catalog`). Picklable: it reopens from its URI/warehouse."""

    def __init__(self, inner: "_floe.Catalog") -> None:
        self.__inner: Optional["_floe.Catalog"] = inner

    @property
    def _inner(self) -> "_floe.Catalog":
        if self.__inner is None:
            raise InvalidInputError("this catalog is closed; open it again with floe.load_catalog")
        return self.__inner

    def close(self) -> None:
        """Closes the catalog: later calls on it are refused (tables loaded from it keep
        working until they are dropped). Closing twice is fine."""
        self.__inner = None

    def __enter__(self) -> "Catalog":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def __reduce__(self) -> Any:
        i = self._inner
        return (_load_catalog_again, (i.uri, i.warehouse, i.name))

    def __repr__(self) -> str:
        i = self._inner
        return f"floe.Catalog(name={i.name!r}, uri={i.uri!r}, warehouse={i.warehouse!r})"

    @property
    def name(self) -> str:
        """The catalog name."""
        return self._inner.name

    @property
    def uri(self) -> Optional[str]:
        """The URI it was opened with."""
        return self._inner.uri

    @property
    def warehouse(self) -> Optional[str]:
        """The warehouse it was opened with."""
        return self._inner.warehouse

    def create_table(
        self,
        identifier: str,
        schema: Union[pa.Schema, str],
        *,
        partition_by: Union[None, str, Sequence[str]] = None,
        sort_by: Union[None, str, Sequence[str]] = None,
        properties: Optional[Mapping[str, str]] = None,
        primary_key: Union[None, str, Sequence[str]] = None,
        format_version: int = 2,
        location: Optional[str] = None,
        allow_unknown_properties: bool = False,
    ) -> "Table":
        """Creates a table. ``schema``: a pyarrow schema (non-nullable fields are required)
        or DDL (``"id long not null, ts timestamptz"``); ``partition_by``:
        ``"day(ts), bucket(16, id)"`` or a list of those terms; ``sort_by``:
        ``"id desc nulls last"``; ``primary_key``: identifier columns (a keyed table for
        ``upsert``)."""
        ddl = schema if isinstance(schema, str) else None
        arrow = None if isinstance(schema, str) else schema
        if isinstance(primary_key, str):
            primary_key = [c.strip() for c in primary_key.split(",")]
        t = self._inner.create_table(
            identifier,
            ddl,
            arrow,
            _csv(partition_by),
            _csv(sort_by),
            {k: str(v) for k, v in (properties or {}).items()},
            list(primary_key or []),
            format_version,
            location,
            allow_unknown_properties,
        )
        return Table(t)

    def load_table(self, identifier: str) -> "Table":
        """Loads ``ns.table`` (or ``ns.table.branch_<b>`` for a branch)."""
        return Table(self._inner.load_table(identifier))

    def table_exists(self, identifier: str) -> bool:
        """Whether the table exists."""
        return self._inner.table_exists(identifier)

    def list_namespaces(self) -> List[str]:
        """The namespaces."""
        return self._inner.list_namespaces()

    def create_namespace(self, namespace: str) -> None:
        """Creates a namespace."""
        self._inner.create_namespace(namespace)

    def drop_namespace(self, namespace: str) -> None:
        """Drops an empty namespace."""
        self._inner.drop_namespace(namespace)

    def list_tables(self, namespace: str) -> List[str]:
        """The tables of a namespace (``ns.table`` names)."""
        return self._inner.list_tables(namespace)

    def rename_table(self, from_identifier: str, to_identifier: str) -> None:
        """Renames a table."""
        self._inner.rename_table(from_identifier, to_identifier)

    def drop_table(self, identifier: str) -> DropTableResult:
        """Drops a table, keeping its files."""
        return _result(DropTableResult, self._inner.drop_table(identifier, False))

    def purge_table(self, identifier: str) -> DropTableResult:
        """Drops a table and deletes its files (unless ``gc.enabled=false``)."""
        return _result(DropTableResult, self._inner.drop_table(identifier, True))

    def sql(self, statement: str) -> Dict[str, Any]:
        """Runs one statement as ``floe sql`` does: ``ALTER TABLE`` (rename; columns,
        partitioning, sort order, properties) or ``DELETE`` / ``UPDATE`` / ``MERGE INTO``
        (a MERGE source must be a table here; ``Table.merge`` takes a DataFrame). Returns the
        CLI's ``--json`` document. Queries are ``Table.scan``'s (or DuckDB's
        ``iceberg_scan``)."""
        return dict(self._inner.sql(statement))


# ---------------------------------------------------------------------------------------
# Table
# ---------------------------------------------------------------------------------------


def _load_table_again(catalog: Catalog, name: str) -> "Table":
    return catalog.load_table(name)


class Table:
    """A table: the state last loaded or written through this object (``refresh()`` reloads).
    Picklable (reloads from the catalog), so it can be handed to Ray tasks."""

    def __init__(self, inner: "_floe.Table") -> None:
        self._inner = inner

    def __reduce__(self) -> Any:
        return (_load_table_again, (Catalog(self._inner.catalog), self._inner.dml_target()))

    def __repr__(self) -> str:
        return f"floe.Table({self.name!r}, snapshot={self.current_snapshot_id})"

    # -- state -----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``ns.table``."""
        return self._inner.name

    @property
    def catalog(self) -> Catalog:
        """The catalog of the table."""
        return Catalog(self._inner.catalog)

    @property
    def metadata_location(self) -> str:
        """The current metadata file."""
        return self._inner.metadata_location

    @property
    def location(self) -> str:
        """The table location."""
        return self._inner.location

    @property
    def format_version(self) -> int:
        """1, 2 or 3."""
        return self._inner.format_version

    @property
    def current_snapshot_id(self) -> Optional[int]:
        """The current snapshot id (None before the first commit)."""
        return self._inner.current_snapshot_id

    @property
    def properties(self) -> Dict[str, str]:
        """The table properties."""
        return self._inner.properties()

    @property
    def primary_key(self) -> List[str]:
        """The identifier (primary key) columns."""
        return self._inner.primary_key()

    def schema(self) -> pa.Schema:
        """The current schema (pyarrow, Iceberg field ids as field metadata)."""
        return self._inner.schema()

    def refresh(self) -> "Table":
        """Reloads the table from the catalog."""
        self._inner.refresh()
        return self

    def snapshots(self) -> List[Snapshot]:
        """The snapshots, oldest first."""
        return [_result(Snapshot, s) for s in self._inner.snapshots()]

    def current_snapshot(self) -> Optional[Snapshot]:
        """The current snapshot."""
        cur = self.current_snapshot_id
        return next((s for s in self.snapshots() if s.snapshot_id == cur), None)

    @property
    def inspect(self) -> "InspectTable":
        """Metadata tables: ``table.inspect.snapshots()``, ``.files()``, ..."""
        return InspectTable(self)

    def changes(
        self,
        from_snapshot_id: Optional[int] = None,
        to_snapshot_id: Optional[int] = None,
        *,
        start_timestamp: Union[None, int, str, _dt.datetime] = None,
        end_timestamp: Union[None, int, str, _dt.datetime] = None,
        identifier_columns: Union[None, str, Sequence[str]] = None,
        compute_updates: Optional[bool] = None,
        net_changes: bool = False,
    ) -> pa.Table:
        """The changelog after ``from_snapshot_id`` (exclusive) up to ``to_snapshot_id``
        (default: the first and the current snapshot), as ``floe changes`` and Spark's
        ``create_changelog_view`` give it: the rows with ``_change_type`` (``INSERT``,
        ``DELETE``, ``UPDATE_BEFORE``, ``UPDATE_AFTER``), ``_change_ordinal`` and
        ``_commit_snapshot_id``."""
        if isinstance(identifier_columns, str):
            identifier_columns = [c.strip() for c in identifier_columns.split(",")]
        return self._inner.changes(
            from_snapshot_id,
            to_snapshot_id,
            _time_ms(start_timestamp),
            _time_ms(end_timestamp),
            None if identifier_columns is None else list(identifier_columns),
            compute_updates,
            net_changes,
        )

    # -- schema, refs ----------------------------------------------------------------------

    def alter(self, clauses: str) -> AlterResult:
        """Applies an ALTER TABLE clause in one commit, as ``floe alter`` does:
        ``"ADD COLUMNS (c long, d string)"``, ``"SET TBLPROPERTIES ('k'='v')"``,
        ``"ADD PARTITION FIELD day(ts)"``, ``"WRITE ORDERED BY id"``."""
        return _result(AlterResult, self._inner.alter(clauses))

    def _ref(self, action: str, **kw: Any) -> RefResult:
        return _result(RefResult, self._inner.manage_ref(action, **kw))

    def create_branch(self, name: str, snapshot_id: Optional[int] = None) -> RefResult:
        """Creates branch ``name`` at a snapshot (default: the current one)."""
        return self._ref("create-branch", name=name, snapshot_id=snapshot_id)

    def replace_branch(self, name: str, snapshot_id: int) -> RefResult:
        """Points branch ``name`` at another snapshot."""
        return self._ref("replace-branch", name=name, snapshot_id=snapshot_id)

    def remove_branch(self, name: str) -> RefResult:
        """Removes branch ``name`` (not ``main``)."""
        return self._ref("drop-branch", name=name)

    def fast_forward(self, branch: str, to: str) -> RefResult:
        """Moves ``branch`` to the snapshot of ref ``to``, which must descend from it."""
        return self._ref("fast-forward", name=branch, to=to)

    def create_tag(self, name: str, snapshot_id: Optional[int] = None) -> RefResult:
        """Creates tag ``name`` at a snapshot (default: the current one)."""
        return self._ref("create-tag", name=name, snapshot_id=snapshot_id)

    def replace_tag(self, name: str, snapshot_id: int) -> RefResult:
        """Points tag ``name`` at another snapshot."""
        return self._ref("replace-tag", name=name, snapshot_id=snapshot_id)

    def remove_tag(self, name: str) -> RefResult:
        """Removes tag ``name``."""
        return self._ref("drop-tag", name=name)

    def rollback_to_snapshot(self, snapshot_id: int) -> RefResult:
        """Moves ``main`` back to an ancestor of its current snapshot."""
        return self._ref("rollback-to-snapshot", snapshot_id=snapshot_id)

    def rollback_to_timestamp(self, timestamp: Union[int, str, _dt.datetime]) -> RefResult:
        """Moves ``main`` back to its latest ancestor committed at or before ``timestamp``
        (a datetime, an ISO string or milliseconds; a naive datetime is UTC)."""
        return self._ref("rollback-to-timestamp", timestamp_ms=_time_ms(timestamp))

    def set_current_snapshot(self, snapshot_id: int) -> RefResult:
        """Makes any snapshot of the table the current one of ``main``."""
        return self._ref("set-current-snapshot", snapshot_id=snapshot_id)

    # -- writes ----------------------------------------------------------------------------

    def append(
        self, df: ArrowData, *, branch: Optional[str] = None, wap_id: Optional[str] = None
    ) -> AppendResult:
        """Appends rows in one snapshot (columns matched by name, cast to the table's types)."""
        data = _arrow(df)
        self._check_types(df, data)
        return _result(AppendResult, self._inner.append(data, branch, wap_id))

    def _check_types(self, original: Any, data: Any) -> None:
        """Refuses what a cast would change silently, in the words of the data's library:
        naive datetimes into a ``timestamptz`` column (as pyiceberg refuses them), floats
        into an integer column (pandas' int columns with missing values are floats)."""
        schema = getattr(data, "schema", None)
        if not isinstance(schema, pa.Schema):
            schema = _frame_arrow_schema(original)
        if schema is None:
            return
        table = self.schema()
        lib = type(original).__module__.split(".")[0]
        for f in schema:
            if f.name not in table.names:
                continue
            want = table.field(f.name).type
            if pa.types.is_timestamp(want) and want.tz is not None and pa.types.is_timestamp(f.type) and f.type.tz is None:
                fix = {
                    "pandas": f"df['{f.name}'] = df['{f.name}'].dt.tz_localize('UTC')",
                    "polars": f"df.with_columns(pl.col('{f.name}').dt.replace_time_zone('UTC'))",
                }.get(lib, f"give timestamps with a time zone (pa.timestamp('us', tz='UTC'))")
                raise InvalidInputError(
                    f"column '{f.name}' holds naive datetimes (no time zone) but is timestamptz in "
                    f"table {self.name}: say which zone they are in, e.g. {fix}"
                )
            if pa.types.is_integer(want) and pa.types.is_floating(f.type):
                fix = {
                    "pandas": f"df['{f.name}'] = df['{f.name}'].astype('Int64') (pandas' nullable "
                    "integer dtype: an int column with missing values becomes float64)",
                    "polars": f"df.with_columns(pl.col('{f.name}').cast(pl.Int64))",
                }.get(lib, f"cast it to an integer type first")
                raise InvalidInputError(
                    f"column '{f.name}' is {f.type} in the data but {want} in table {self.name}: "
                    f"floe does not round floats into integers; {fix}"
                )

    def _dml(self, sql: str, source: Any = None, wap_id: Optional[str] = None) -> RowLevelResult:
        return _result(RowLevelResult, self._inner.execute(sql, source, wap_id))

    def delete(
        self,
        delete_filter: str,
        *,
        branch: Optional[str] = None,
        wap_id: Optional[str] = None,
    ) -> RowLevelResult:
        """Deletes the rows matching a SQL condition (copy-on-write or merge-on-read as
        ``write.delete.mode`` says)."""
        return self._dml(
            f"DELETE FROM {self._inner.dml_target(branch)} WHERE {delete_filter}", None, wap_id
        )

    def update(
        self,
        set: Union[str, Mapping[str, Any]],
        where: Optional[str] = None,
        *,
        branch: Optional[str] = None,
        wap_id: Optional[str] = None,
    ) -> RowLevelResult:
        """Updates rows: ``set`` maps columns to values (Python values are literals;
        ``floe.Expr("price * 1.1")`` is an expression) or is SQL assignments text."""
        if isinstance(set, str):
            assignments = set
        else:
            if not set:
                raise InvalidInputError("update needs at least one column in set=")
            assignments = ", ".join(f"{k} = {_sql_literal(v)}" for k, v in set.items())
        sql = f"UPDATE {self._inner.dml_target(branch)} SET {assignments}"
        if where is not None:
            sql += f" WHERE {where}"
        return self._dml(sql, None, wap_id)

    def merge(
        self,
        source: ArrowData,
        on: Union[str, Sequence[str]],
        *,
        when_matched: str = "update",
        when_not_matched: str = "insert",
        when_not_matched_by_source: str = "ignore",
        branch: Optional[str] = None,
        wap_id: Optional[str] = None,
    ) -> RowLevelResult:
        """MERGE ``source`` into the table by the key columns ``on``: matched rows
        ``update`` (default) / ``delete`` / ``ignore``; unmatched source rows ``insert`` /
        ``ignore``; target rows no source row matches ``ignore`` / ``delete``."""
        keys = [on] if isinstance(on, str) else list(on)
        cond = " AND ".join(f"t.{k.strip()} = s.{k.strip()}" for k in keys)
        sql = f"MERGE INTO {self._inner.dml_target(branch)} AS t USING source AS s ON {cond}"
        clauses = {
            ("m", "update"): " WHEN MATCHED THEN UPDATE SET *",
            ("m", "delete"): " WHEN MATCHED THEN DELETE",
            ("m", "ignore"): "",
            ("n", "insert"): " WHEN NOT MATCHED THEN INSERT *",
            ("n", "ignore"): "",
            ("s", "delete"): " WHEN NOT MATCHED BY SOURCE THEN DELETE",
            ("s", "ignore"): "",
        }
        for what, v, allowed in (
            ("m", when_matched, "update, delete or ignore"),
            ("n", when_not_matched, "insert or ignore"),
            ("s", when_not_matched_by_source, "delete or ignore"),
        ):
            if (what, v) not in clauses:
                raise InvalidInputError(f"merge: {v!r}: expected {allowed}")
            sql += clauses[(what, v)]
        return self._dml(sql, _arrow(source), wap_id)

    def upsert(
        self,
        df: ArrowData,
        join_cols: Optional[Sequence[str]] = None,
        *,
        sink_id: Optional[str] = None,
        checkpoint: Optional[int] = None,
        evolve_schema: bool = False,
        branch: Optional[str] = None,
        wap_id: Optional[str] = None,
    ) -> UpsertResult:
        """Upserts rows. On a keyed table (a primary key; ``join_cols`` omitted or equal to
        it; other ``join_cols`` are refused, since they would break the key) the changes are
        applied by the table's merge engine in one commit (versions, delete column,
        ``sink_id``/``checkpoint`` exactly-once), as ``floe upsert``; on a table without a
        primary key, ``join_cols`` are the keys of a MERGE (update matched, insert the rest),
        as pyiceberg's ``upsert``. Either way the result is an :class:`UpsertResult`
        (``rows_updated`` / ``rows_inserted`` as pyiceberg names them; ``lookup`` is
        ``"merge"`` for the MERGE)."""
        key = self.primary_key
        if key and join_cols is not None and sorted(c.strip() for c in join_cols) != sorted(key):
            raise InvalidInputError(
                f"table {self.name} is keyed by {', '.join(key)}: upsert applies changes by that "
                f"key, so join_cols={list(join_cols)!r} would leave two live rows for one key; "
                f"omit join_cols (or pass {list(key)!r}); to MERGE on other columns use "
                "Table.merge(), which does not keep the key unique; nothing was committed"
            )
        if key and sink_id is not None and checkpoint is None:
            raise InvalidInputError(
                f"upsert into {self.name}: sink_id={sink_id!r} needs checkpoint=N (the batch's "
                "number in that sink); without it nothing would be recorded and a re-sent batch "
                "would apply twice; nothing was committed"
            )
        data = _arrow(df)
        self._check_types(df, data)
        if key:
            return _result(
                UpsertResult,
                self._inner.upsert(data, sink_id, checkpoint, evolve_schema, branch, wap_id),
            )
        if not join_cols:
            raise InvalidInputError(
                f"table {self.name} has no primary key: give join_cols=[...] (the MERGE keys), "
                "or create it with primary_key=[...]"
            )
        if sink_id is not None or checkpoint is not None:
            raise InvalidInputError("sink_id/checkpoint need a keyed table (primary_key=...)")
        cols = [c.strip() for c in join_cols]
        keys = data.select(cols).group_by(cols).aggregate([]).num_rows
        r = self.merge(data, cols, branch=branch, wap_id=wap_id)
        clauses = r.merged or {}
        return UpsertResult(
            table=r.table,
            snapshot_id=r.snapshot_id,
            sink_id=None,
            checkpoint=None,
            committed_checkpoint=None,
            already_committed=False,
            input_records_count=data.num_rows,
            keys_count=keys,
            inserted_records_count=clauses.get("inserted_records_count", 0),
            updated_records_count=clauses.get("updated_records_count", 0),
            deleted_records_count=0,
            deleted_absent_keys_count=0,
            stale_records_count=0,
            tombstone_records_count=0,
            added_data_files_count=r.added_data_files_count,
            added_delete_files_count=r.added_delete_files_count,
            added_bytes_count=r.added_bytes_count,
            added_columns=[],
            attempts_count=1,
            lookup="merge",
            parts_count=1,
            elapsed_ms=r.elapsed_ms,
        )

    # -- reads -----------------------------------------------------------------------------

    def scan(
        self,
        row_filter: Optional[str] = None,
        selected_fields: Sequence[str] = ("*",),
        snapshot_id: Optional[int] = None,
        *,
        ref: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> "DataScan":
        """A scan: ``row_filter`` is SQL (``"ts >= '2024-01-01' AND id IN (1, 2)"``),
        ``selected_fields`` column names (``("*",)``: all), ``snapshot_id`` / ``ref`` time
        travel."""
        return DataScan(self, row_filter, selected_fields, snapshot_id, ref, limit)

    # -- maintenance -----------------------------------------------------------------------

    def rewrite_data_files(
        self,
        where: Optional[str] = None,
        *,
        strategy: str = "binpack",
        sort_by: Optional[str] = None,
        zorder_by: Union[None, str, Sequence[str]] = None,
        options: Optional[Mapping[str, Any]] = None,
        **kwargs: Any,
    ) -> RewriteDataFilesResult:
        """Compacts data files applying their deletes (one ``replace`` snapshot, or several
        with ``partial_progress_enabled=True``). Spark's options as keywords
        (``min_input_files=2``, ``target_file_size_bytes=...``, ``rewrite_all=True``) or in
        ``options`` with their own names."""
        o = _rewrite_options(strategy, sort_by, zorder_by, options, kwargs)
        return _result(RewriteDataFilesResult, self._inner.rewrite_data_files(where, o))

    def rewrite_position_delete_files(
        self, *, options: Optional[Mapping[str, Any]] = None, **kwargs: Any
    ) -> RewritePositionDeleteFilesResult:
        """Merges position delete files (v3: one deletion vector per data file)."""
        return _result(
            RewritePositionDeleteFilesResult,
            self._inner.rewrite_position_delete_files(_options(options, kwargs)),
        )

    def rewrite_manifests(self, target_size_bytes: Optional[int] = None) -> RewriteManifestsResult:
        """Rewrites the manifests clustered by partition."""
        return _result(RewriteManifestsResult, self._inner.rewrite_manifests(target_size_bytes))

    def expire_snapshots(
        self,
        older_than: Union[None, int, str, _dt.datetime] = None,
        *,
        retain_last: Optional[int] = None,
        snapshot_ids: Sequence[int] = (),
        dry_run: bool = False,
    ) -> ExpireSnapshotsResult:
        """Expires snapshots older than a time (ms, ISO text or datetime; default
        ``history.expire.max-snapshot-age-ms`` ago) and deletes the files only they use."""
        return _result(
            ExpireSnapshotsResult,
            self._inner.expire_snapshots(
                _time_ms(older_than), retain_last, list(snapshot_ids), dry_run
            ),
        )

    def remove_orphan_files(
        self, older_than: Union[None, int, str, _dt.datetime] = None, *, dry_run: bool = False
    ) -> RemoveOrphanFilesResult:
        """Deletes files under the table location no metadata references (default: older
        than 3 days)."""
        return _result(
            RemoveOrphanFilesResult, self._inner.remove_orphan_files(_time_ms(older_than), dry_run)
        )

    def sink(self, sink_id: Optional[str] = None, *, evolve_schema: bool = False) -> Sink:
        """A sink writing this keyed table as a long-lived process would (``floe sink``):
        ``write(rows)``, ``commit(checkpoint)``, ``close()``."""
        return Sink(self._inner.sink(sink_id, evolve_schema), self.name)

    def maintain(
        self, *, dry_run: bool = False, max_rewrite_bytes: Optional[int] = None
    ) -> MaintainResult:
        """Does the maintenance the table's state and its ``floe.maintain.*`` /
        ``history.expire.*`` properties call for (compaction, delete and manifest rewrites,
        tombstone merges, snapshot expiry, orphan removal), each step its own commit, under
        the table's maintenance lease; ``dry_run`` only reports the plan."""
        return _result(MaintainResult, self._inner.maintain(dry_run, max_rewrite_bytes))

    def clone(
        self,
        target: str,
        *,
        snapshot_id: Optional[int] = None,
        ref: Optional[str] = None,
        as_of: Union[None, int, str, _dt.datetime] = None,
        replace: bool = False,
        all_refs: bool = False,
    ) -> CloneResult:
        """A metadata-only copy of this table as ``target`` (``replace``: publish onto an
        existing table in one swap)."""
        return _result(
            CloneResult,
            self._inner.clone_to(target, snapshot_id, ref, _time_ms(as_of), replace, all_refs),
        )

    def ingest_snapshot(
        self,
        df: ArrowData,
        key: Union[str, Sequence[str]],
        version: str,
        *,
        strategy: str = "change-aware",
        publish: Optional[str] = None,
        retain_days: Optional[int] = None,
        memory_budget_bytes: int = 1 << 30,
    ) -> IngestSnapshotResult:
        """Merges a full snapshot into this staging table keeping the latest row per key
        (writes only what changed); ``publish`` makes that table a clone of the result."""
        keys = [c.strip() for c in key.split(",")] if isinstance(key, str) else list(key)
        d = dict(
            self._inner.ingest_snapshot(
                _arrow(df), keys, version, strategy, publish, retain_days, memory_budget_bytes
            )
        )
        if d.get("published") is not None:
            d["published"] = _result(CloneResult, d["published"])
        return _result(IngestSnapshotResult, d)


class DataScan:
    """A configured scan (see :meth:`Table.scan`)."""

    def __init__(
        self,
        table: Table,
        row_filter: Optional[str],
        selected_fields: Sequence[str],
        snapshot_id: Optional[int],
        ref: Optional[str],
        limit: Optional[int],
    ) -> None:
        self.table = table
        self.row_filter = row_filter
        fields_ = list(selected_fields)
        self.selected_fields: Optional[List[str]] = None if fields_ in ([], ["*"]) else fields_
        self.snapshot_id = snapshot_id
        self.ref = ref
        self.limit = limit

    def to_arrow(self) -> pa.Table:
        """All matching rows as a pyarrow Table (no copy)."""
        return self.table._inner.scan_to_arrow(
            self.row_filter, self.selected_fields, self.snapshot_id, self.ref, self.limit
        )

    def to_arrow_batch_reader(self) -> pa.RecordBatchReader:
        """The rows as a pyarrow RecordBatchReader (decoded as they are read; Ctrl-C
        interrupts the wait for a batch)."""
        batches = self.table._inner.scan_to_reader(
            self.row_filter, self.selected_fields, self.snapshot_id, self.ref
        )
        reader = pa.RecordBatchReader.from_batches(batches.schema, batches)
        if self.limit is not None:
            return _limited(reader, self.limit)
        return reader

    def to_polars(self) -> "polars.DataFrame":
        """The rows as a polars DataFrame."""
        import polars as pl

        return pl.from_arrow(self.to_arrow())  # type: ignore[return-value]

    def to_pandas(self, **kwargs: Any) -> "pandas.DataFrame":
        """The rows as a pandas DataFrame."""
        return self.to_arrow().to_pandas(**kwargs)

    def count(self) -> int:
        """The number of matching rows (from metadata alone when possible)."""
        n = self.table._inner.scan_count(self.row_filter, self.snapshot_id, self.ref)
        return n if self.limit is None else min(n, self.limit)


def _limited(reader: pa.RecordBatchReader, limit: int) -> pa.RecordBatchReader:
    def gen() -> Iterable[pa.RecordBatch]:
        left = limit
        for b in reader:
            if left <= 0:
                break
            b = b.slice(0, left)
            left -= b.num_rows
            yield b

    return pa.RecordBatchReader.from_batches(reader.schema, gen())


class InspectTable:
    """Metadata tables as pyarrow Tables (Iceberg Java's columns), e.g.
    ``table.inspect.snapshots()``, ``table.inspect.files(snapshot_id=...)``."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def _read(self, name: str, snapshot_id: Optional[int] = None) -> pa.Table:
        return self._table._inner.inspect(name, snapshot_id)

    def snapshots(self) -> pa.Table:
        """One row per snapshot."""
        return self._read("snapshots")

    def history(self) -> pa.Table:
        """When each snapshot became current."""
        return self._read("history")

    def refs(self) -> pa.Table:
        """Branches and tags."""
        return self._read("refs")

    def metadata_log_entries(self) -> pa.Table:
        """The metadata files of the table's history."""
        return self._read("metadata_log_entries")

    def manifests(self, snapshot_id: Optional[int] = None) -> pa.Table:
        """The manifests of a snapshot."""
        return self._read("manifests", snapshot_id)

    def all_manifests(self) -> pa.Table:
        """The manifests of every snapshot."""
        return self._read("all_manifests")

    def files(self, snapshot_id: Optional[int] = None) -> pa.Table:
        """Data and delete files of a snapshot."""
        return self._read("files", snapshot_id)

    def data_files(self, snapshot_id: Optional[int] = None) -> pa.Table:
        """Data files of a snapshot."""
        return self._read("data_files", snapshot_id)

    def delete_files(self, snapshot_id: Optional[int] = None) -> pa.Table:
        """Delete files of a snapshot."""
        return self._read("delete_files", snapshot_id)

    def all_files(self) -> pa.Table:
        """Files of every snapshot."""
        return self._read("all_files")

    def all_data_files(self) -> pa.Table:
        """Data files of every snapshot."""
        return self._read("all_data_files")

    def all_delete_files(self) -> pa.Table:
        """Delete files of every snapshot."""
        return self._read("all_delete_files")

    def entries(self, snapshot_id: Optional[int] = None) -> pa.Table:
        """Manifest entries of a snapshot."""
        return self._read("entries", snapshot_id)

    def all_entries(self) -> pa.Table:
        """Manifest entries of every snapshot."""
        return self._read("all_entries")

    def partitions(self, snapshot_id: Optional[int] = None) -> pa.Table:
        """Per-partition counts of a snapshot."""
        return self._read("partitions", snapshot_id)

    def position_deletes(self, snapshot_id: Optional[int] = None) -> pa.Table:
        """Every deleted position of a snapshot."""
        return self._read("position_deletes", snapshot_id)

