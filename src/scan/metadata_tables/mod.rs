//! Metadata tables: a table's snapshots, history, refs, metadata log, manifests, files,
//! manifest entries, partitions and deleted positions as rows, with Iceberg Java's table and
//! column names and types (`db.t.snapshots` in Spark, `table.inspect.snapshots()` in
//! pyiceberg). `files.rs` has the files, entries and partitions tables, `manifests.rs` the
//! manifests tables, `position_deletes.rs` the deleted positions, `readable_metrics.rs` the
//! files tables' decoded metrics, `literals.rs` columns of partition values and bounds.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Int32Builder, Int64Builder, MapBuilder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, TimeUnit};

use crate::error::{Error, Result};
use crate::table::Table;

mod files;
mod literals;
mod manifests;
mod position_deletes;
mod readable_metrics;

/// A metadata table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataTable {
    /// One row per snapshot.
    Snapshots,
    /// One row per entry of the snapshot log (when each snapshot became current).
    History,
    /// One row per branch and tag.
    Refs,
    /// One row per metadata file in the log, the current one last.
    MetadataLogEntries,
    /// The manifests of the snapshot read.
    Manifests,
    /// The manifests of every snapshot (each once).
    AllManifests,
    /// The live data and delete files of the snapshot read.
    Files,
    /// Its live data files.
    DataFiles,
    /// Its live delete files.
    DeleteFiles,
    /// The live files of every snapshot's manifests (each manifest read once, so a file
    /// listed by several manifests appears once per manifest, as in Java).
    AllFiles,
    /// The live data files of every snapshot's manifests.
    AllDataFiles,
    /// The live delete files of every snapshot's manifests.
    AllDeleteFiles,
    /// The manifest entries (added, existing and deleted) of the snapshot read.
    Entries,
    /// The manifest entries of every snapshot's manifests.
    AllEntries,
    /// One row per partition of the snapshot read: its file and record counts.
    Partitions,
    /// One row per deleted position (position delete files and deletion vectors) of the
    /// snapshot read.
    PositionDeletes,
}

impl MetadataTable {
    /// Every metadata table with its name.
    pub const ALL: [(&'static str, MetadataTable); 16] = [
        ("snapshots", MetadataTable::Snapshots),
        ("history", MetadataTable::History),
        ("refs", MetadataTable::Refs),
        ("metadata_log_entries", MetadataTable::MetadataLogEntries),
        ("manifests", MetadataTable::Manifests),
        ("all_manifests", MetadataTable::AllManifests),
        ("files", MetadataTable::Files),
        ("data_files", MetadataTable::DataFiles),
        ("delete_files", MetadataTable::DeleteFiles),
        ("all_files", MetadataTable::AllFiles),
        ("all_data_files", MetadataTable::AllDataFiles),
        ("all_delete_files", MetadataTable::AllDeleteFiles),
        ("entries", MetadataTable::Entries),
        ("all_entries", MetadataTable::AllEntries),
        ("partitions", MetadataTable::Partitions),
        ("position_deletes", MetadataTable::PositionDeletes),
    ];

    /// The metadata table called `name` (Java's name, any case).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, t)| *t)
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, t)| *t == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    /// Every metadata table's name, comma-separated (for error messages).
    pub fn names() -> String {
        Self::ALL.map(|(n, _)| n).join(", ")
    }

    /// Whether its rows depend on the snapshot read (`--snapshot`/`--ref`/`--as-of`, Java's
    /// `VERSION AS OF`); the others describe the whole table.
    pub fn is_snapshot_scoped(self) -> bool {
        use MetadataTable as M;
        matches!(
            self,
            M::Manifests
                | M::Files
                | M::DataFiles
                | M::DeleteFiles
                | M::Entries
                | M::Partitions
                | M::PositionDeletes
        )
    }

    /// Whether it covers every snapshot (`all_*`): Java refuses to read those at a snapshot.
    pub fn is_all_snapshots(self) -> bool {
        use MetadataTable as M;
        matches!(
            self,
            M::AllManifests | M::AllFiles | M::AllDataFiles | M::AllDeleteFiles | M::AllEntries
        )
    }
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
}

fn batch(fields: Vec<Field>, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// The rows of metadata table `which` of `table`, at `snapshot` (default: the current one).
/// Tables about the whole table (`snapshots`, `history`, …) ignore `snapshot`; the `all_*`
/// tables refuse one, as Java does.
pub async fn read_metadata_table(
    table: &Table,
    which: MetadataTable,
    snapshot: Option<i64>,
) -> Result<RecordBatch> {
    use files::Scope;
    use MetadataTable as M;
    if snapshot.is_some() && which.is_all_snapshots() {
        return Err(Error::invalid(format!(
            "{}.{} covers every snapshot and cannot be read at a snapshot or ref (as in \
             Java); read {} at one instead",
            table.name(),
            which.name(),
            which.name().trim_start_matches("all_")
        )));
    }
    match which {
        M::Snapshots => snapshots(table),
        M::History => history(table),
        M::Refs => refs(table),
        M::MetadataLogEntries => metadata_log(table),
        M::Manifests => manifests::manifests(table, snapshot, false).await,
        M::AllManifests => manifests::manifests(table, snapshot, true).await,
        M::Files => files::files(table, Scope::Snapshot(snapshot), true, true).await,
        M::DataFiles => files::files(table, Scope::Snapshot(snapshot), true, false).await,
        M::DeleteFiles => files::files(table, Scope::Snapshot(snapshot), false, true).await,
        M::AllFiles => files::files(table, Scope::All, true, true).await,
        M::AllDataFiles => files::files(table, Scope::All, true, false).await,
        M::AllDeleteFiles => files::files(table, Scope::All, false, true).await,
        M::Entries => files::entries(table, Scope::Snapshot(snapshot)).await,
        M::AllEntries => files::entries(table, Scope::All).await,
        M::Partitions => files::partitions(table, snapshot).await,
        M::PositionDeletes => position_deletes::position_deletes(table, snapshot).await,
    }
}

fn snapshots(table: &Table) -> Result<RecordBatch> {
    let md = table.metadata();
    let mut list: Vec<_> = md.snapshots().collect();
    list.sort_by_key(|s| (s.timestamp_ms(), s.sequence_number()));
    let mut committed = TimestampMicrosecondBuilder::new().with_timezone("+00:00");
    let (mut id, mut parent) = (Int64Builder::new(), Int64Builder::new());
    let (mut op, mut ml) = (StringBuilder::new(), StringBuilder::new());
    let mut summary = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
    for s in list {
        committed.append_value(s.timestamp_ms() * 1000);
        id.append_value(s.snapshot_id());
        parent.append_option(s.parent_snapshot_id());
        op.append_value(s.summary().operation.as_str());
        ml.append_value(s.manifest_list());
        let mut kv: Vec<_> = s.summary().additional_properties.iter().collect();
        kv.sort();
        for (k, v) in kv {
            summary.keys().append_value(k);
            summary.values().append_value(v);
        }
        summary.append(true)?;
    }
    let summary = summary.finish();
    let summary_type = summary.data_type().clone();
    batch(
        vec![
            Field::new("committed_at", ts(), false),
            Field::new("snapshot_id", DataType::Int64, false),
            Field::new("parent_id", DataType::Int64, true),
            Field::new("operation", DataType::Utf8, true),
            Field::new("manifest_list", DataType::Utf8, true),
            Field::new("summary", summary_type, true),
        ],
        vec![
            Arc::new(committed.finish()),
            Arc::new(id.finish()),
            Arc::new(parent.finish()),
            Arc::new(op.finish()),
            Arc::new(ml.finish()),
            Arc::new(summary),
        ],
    )
}

fn history(table: &Table) -> Result<RecordBatch> {
    let md = table.metadata();
    // The current snapshot and its ancestors.
    let ancestry: HashSet<i64> =
        crate::spec::snapshot_refs::ancestors(md, md.current_snapshot_id())
            .map(|s| s.snapshot_id())
            .collect();
    let mut at = TimestampMicrosecondBuilder::new().with_timezone("+00:00");
    let (mut id, mut parent) = (Int64Builder::new(), Int64Builder::new());
    let mut current = BooleanBuilder::new();
    for l in md.history() {
        at.append_value(l.timestamp_ms * 1000);
        id.append_value(l.snapshot_id);
        parent.append_option(
            md.snapshot_by_id(l.snapshot_id)
                .and_then(|s| s.parent_snapshot_id()),
        );
        current.append_value(ancestry.contains(&l.snapshot_id));
    }
    batch(
        vec![
            Field::new("made_current_at", ts(), false),
            Field::new("snapshot_id", DataType::Int64, false),
            Field::new("parent_id", DataType::Int64, true),
            Field::new("is_current_ancestor", DataType::Boolean, false),
        ],
        vec![
            Arc::new(at.finish()),
            Arc::new(id.finish()),
            Arc::new(parent.finish()),
            Arc::new(current.finish()),
        ],
    )
}

fn refs(table: &Table) -> Result<RecordBatch> {
    use iceberg::spec::SnapshotRetention as R;
    let mut list = crate::spec::refs(table.metadata());
    list.sort_by(|a, b| a.0.cmp(&b.0));
    let (mut name, mut kind) = (StringBuilder::new(), StringBuilder::new());
    let (mut id, mut ref_age, mut snap_age) = (
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
    );
    let mut keep = Int32Builder::new();
    for (n, r) in list {
        name.append_value(&n);
        id.append_value(r.snapshot_id);
        match r.retention {
            R::Branch {
                min_snapshots_to_keep,
                max_snapshot_age_ms,
                max_ref_age_ms,
            } => {
                kind.append_value("BRANCH");
                ref_age.append_option(max_ref_age_ms);
                keep.append_option(min_snapshots_to_keep);
                snap_age.append_option(max_snapshot_age_ms);
            }
            R::Tag { max_ref_age_ms } => {
                kind.append_value("TAG");
                ref_age.append_option(max_ref_age_ms);
                keep.append_null();
                snap_age.append_null();
            }
        }
    }
    batch(
        vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("type", DataType::Utf8, false),
            Field::new("snapshot_id", DataType::Int64, false),
            Field::new("max_reference_age_in_ms", DataType::Int64, true),
            Field::new("min_snapshots_to_keep", DataType::Int32, true),
            Field::new("max_snapshot_age_in_ms", DataType::Int64, true),
        ],
        vec![
            Arc::new(name.finish()),
            Arc::new(kind.finish()),
            Arc::new(id.finish()),
            Arc::new(ref_age.finish()),
            Arc::new(keep.finish()),
            Arc::new(snap_age.finish()),
        ],
    )
}

fn metadata_log(table: &Table) -> Result<RecordBatch> {
    let md = table.metadata();
    let mut entries: Vec<(i64, String)> = md
        .metadata_log()
        .iter()
        .map(|l| (l.timestamp_ms, l.metadata_file.clone()))
        .collect();
    entries.push((md.last_updated_ms(), table.metadata_location().to_string()));
    let mut at = TimestampMicrosecondBuilder::new().with_timezone("+00:00");
    let mut file = StringBuilder::new();
    let (mut snap, mut seq) = (Int64Builder::new(), Int64Builder::new());
    let mut schema = Int32Builder::new();
    for (ms, f) in entries {
        at.append_value(ms * 1000);
        file.append_value(&f);
        // The snapshot current at that time (Java: SnapshotUtil.snapshotIdAsOfTime).
        let id = md
            .history()
            .iter()
            .rfind(|l| l.timestamp_ms <= ms)
            .map(|l| l.snapshot_id);
        let s = id.and_then(|i| md.snapshot_by_id(i));
        snap.append_option(id);
        schema.append_option(s.and_then(|s| s.schema_id()));
        seq.append_option(s.map(|s| s.sequence_number()));
    }
    batch(
        vec![
            Field::new("timestamp", ts(), false),
            Field::new("file", DataType::Utf8, false),
            Field::new("latest_snapshot_id", DataType::Int64, true),
            Field::new("latest_schema_id", DataType::Int32, true),
            Field::new("latest_sequence_number", DataType::Int64, true),
        ],
        vec![
            Arc::new(at.finish()),
            Arc::new(file.finish()),
            Arc::new(snap.finish()),
            Arc::new(schema.finish()),
            Arc::new(seq.finish()),
        ],
    )
}

fn snapshot_of(
    table: &Table,
    snapshot: Option<i64>,
) -> Result<Option<Arc<iceberg::spec::Snapshot>>> {
    let md = table.metadata();
    match snapshot {
        None => Ok(md.current_snapshot().cloned()),
        Some(id) => md.snapshot_by_id(id).cloned().map(Some).ok_or_else(|| {
            Error::invalid(format!(
                "table {} has no snapshot {id} (`floe snapshots` lists them)",
                table.name()
            ))
        }),
    }
}
