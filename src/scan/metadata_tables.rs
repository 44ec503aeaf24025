//! Metadata tables: a table's snapshots, history, refs, metadata log, manifests and files as
//! rows, with Iceberg Java's table and column names and types (`db.t.snapshots` in Spark,
//! `table.inspect.snapshots()` in pyiceberg).

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Int32Builder, Int64Builder, ListBuilder, MapBuilder, StringBuilder,
    StructBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use iceberg::spec::{ManifestContentType, ManifestStatus};

use crate::error::{Error, Result};
use crate::table::Table;

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
}

impl MetadataTable {
    /// Every metadata table with its name.
    pub const ALL: [(&'static str, MetadataTable); 9] = [
        ("snapshots", MetadataTable::Snapshots),
        ("history", MetadataTable::History),
        ("refs", MetadataTable::Refs),
        ("metadata_log_entries", MetadataTable::MetadataLogEntries),
        ("manifests", MetadataTable::Manifests),
        ("all_manifests", MetadataTable::AllManifests),
        ("files", MetadataTable::Files),
        ("data_files", MetadataTable::DataFiles),
        ("delete_files", MetadataTable::DeleteFiles),
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

/// The rows of metadata table `which` of `table`, at `snapshot` (default: the current one;
/// tables about the whole table ignore it).
pub async fn read_metadata_table(
    table: &Table,
    which: MetadataTable,
    snapshot: Option<i64>,
) -> Result<RecordBatch> {
    match which {
        MetadataTable::Snapshots => snapshots(table),
        MetadataTable::History => history(table),
        MetadataTable::Refs => refs(table),
        MetadataTable::MetadataLogEntries => metadata_log(table),
        MetadataTable::Manifests => manifests(table, snapshot, false).await,
        MetadataTable::AllManifests => manifests(table, snapshot, true).await,
        MetadataTable::Files => files(table, snapshot, true, true).await,
        MetadataTable::DataFiles => files(table, snapshot, true, false).await,
        MetadataTable::DeleteFiles => files(table, snapshot, false, true).await,
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

async fn manifests(table: &Table, snapshot: Option<i64>, all: bool) -> Result<RecordBatch> {
    let md = table.metadata();
    let snaps: Vec<Arc<iceberg::spec::Snapshot>> = if all {
        md.snapshots().cloned().collect()
    } else {
        snapshot_of(table, snapshot)?.into_iter().collect()
    };
    let mut content = Int32Builder::new();
    let mut path = StringBuilder::new();
    let mut length = Int64Builder::new();
    let mut spec = Int32Builder::new();
    let mut added_snap = Int64Builder::new();
    let mut counts: [Int32Builder; 6] = std::array::from_fn(|_| Int32Builder::new());
    let mut refs = Int64Builder::new();
    let summary_fields = Fields::from(vec![
        Field::new("contains_null", DataType::Boolean, false),
        Field::new("contains_nan", DataType::Boolean, true),
        Field::new("lower_bound", DataType::Utf8, true),
        Field::new("upper_bound", DataType::Utf8, true),
    ]);
    let mut partition_summaries =
        ListBuilder::new(StructBuilder::from_fields(summary_fields.clone(), 0));
    let mut seen = HashSet::new();
    for s in snaps {
        for mf in table.manifest_list(&s).await? {
            if all && !seen.insert(mf.manifest_path.clone()) {
                continue;
            }
            let data = mf.content == ManifestContentType::Data;
            content.append_value(if data { 0 } else { 1 });
            path.append_value(&mf.manifest_path);
            length.append_value(mf.manifest_length);
            spec.append_value(mf.partition_spec_id);
            added_snap.append_value(mf.added_snapshot_id);
            let c = [
                mf.added_files_count,
                mf.existing_files_count,
                mf.deleted_files_count,
            ];
            for (i, n) in c.iter().enumerate() {
                let n = n.map(|n| n as i32).unwrap_or(0);
                counts[i].append_value(if data { n } else { 0 });
                counts[i + 3].append_value(if data { 0 } else { n });
            }
            refs.append_value(s.snapshot_id());
            let pspec = md.partition_spec_by_id(mf.partition_spec_id);
            let pt = pspec.and_then(|p| p.partition_type(md.current_schema()).ok());
            let st = partition_summaries.values();
            for (i, fs) in mf.partitions.iter().flatten().enumerate() {
                let ty = pt
                    .as_ref()
                    .and_then(|t| t.fields().get(i))
                    .and_then(|f| f.field_type.as_primitive_type().cloned());
                // Java's human form of a bound (a string without quotes).
                let human = |b: Option<&[u8]>| -> Option<String> {
                    let (b, ty) = (b?, ty.as_ref()?);
                    let d = iceberg::spec::Datum::try_from_bytes(b, ty.clone()).ok()?;
                    Some(match d.literal() {
                        iceberg::spec::PrimitiveLiteral::String(s) => s.clone(),
                        _ => d.to_string(),
                    })
                };
                st.field_builder::<BooleanBuilder>(0)
                    .ok_or_else(|| Error::io("partition summary builder"))?
                    .append_value(fs.contains_null);
                st.field_builder::<BooleanBuilder>(1)
                    .ok_or_else(|| Error::io("partition summary builder"))?
                    .append_option(fs.contains_nan);
                st.field_builder::<StringBuilder>(2)
                    .ok_or_else(|| Error::io("partition summary builder"))?
                    .append_option(human(fs.lower_bound.as_deref().map(|v| v.as_slice())));
                st.field_builder::<StringBuilder>(3)
                    .ok_or_else(|| Error::io("partition summary builder"))?
                    .append_option(human(fs.upper_bound.as_deref().map(|v| v.as_slice())));
                st.append(true);
            }
            partition_summaries.append(true);
        }
    }
    let mut fields = vec![
        Field::new("content", DataType::Int32, false),
        Field::new("path", DataType::Utf8, false),
        Field::new("length", DataType::Int64, false),
        Field::new("partition_spec_id", DataType::Int32, false),
        Field::new("added_snapshot_id", DataType::Int64, false),
    ];
    for n in [
        "added_data_files_count",
        "existing_data_files_count",
        "deleted_data_files_count",
        "added_delete_files_count",
        "existing_delete_files_count",
        "deleted_delete_files_count",
    ] {
        fields.push(Field::new(n, DataType::Int32, false));
    }
    let summaries = partition_summaries.finish();
    fields.push(Field::new(
        "partition_summaries",
        summaries.data_type().clone(),
        true,
    ));
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(content.finish()),
        Arc::new(path.finish()),
        Arc::new(length.finish()),
        Arc::new(spec.finish()),
        Arc::new(added_snap.finish()),
    ];
    for mut c in counts {
        columns.push(Arc::new(c.finish()));
    }
    columns.push(Arc::new(summaries));
    if all {
        fields.push(Field::new("reference_snapshot_id", DataType::Int64, false));
        columns.push(Arc::new(refs.finish()));
    }
    batch(fields, columns)
}

/// The live data and/or delete files of the snapshot read.
async fn files(
    table: &Table,
    snapshot: Option<i64>,
    data: bool,
    deletes: bool,
) -> Result<RecordBatch> {
    let md = table.metadata();
    let mut content = Int32Builder::new();
    let (mut path, mut format) = (StringBuilder::new(), StringBuilder::new());
    let mut spec = Int32Builder::new();
    let (mut records, mut size) = (Int64Builder::new(), Int64Builder::new());
    let mut sort = Int32Builder::new();
    let mut eq_ids = ListBuilder::new(Int32Builder::new());
    let mut split = ListBuilder::new(Int64Builder::new());
    let mut first_row = Int64Builder::new();
    let mut referenced = StringBuilder::new();
    let (mut offset, mut csize) = (Int64Builder::new(), Int64Builder::new());
    if let Some(s) = snapshot_of(table, snapshot)? {
        for mf in table.manifest_list(&s).await? {
            let is_data = mf.content == ManifestContentType::Data;
            if (is_data && !data) || (!is_data && !deletes) {
                continue;
            }
            let m = table.load_manifest(&mf).await?;
            for e in m.entries() {
                if e.status() == ManifestStatus::Deleted {
                    continue;
                }
                let f = e.data_file();
                content.append_value(f.content_type() as i32);
                path.append_value(f.file_path());
                format.append_value(f.file_format().to_string().to_uppercase());
                spec.append_value(mf.partition_spec_id);
                records.append_value(f.record_count() as i64);
                size.append_value(f.file_size_in_bytes() as i64);
                sort.append_option(f.sort_order_id());
                match f.equality_ids() {
                    Some(ids) if !ids.is_empty() => {
                        ids.iter().for_each(|i| eq_ids.values().append_value(*i));
                        eq_ids.append(true);
                    }
                    _ => eq_ids.append(false),
                }
                match f.split_offsets() {
                    Some(o) => {
                        o.iter().for_each(|i| split.values().append_value(*i));
                        split.append(true);
                    }
                    None => split.append(false),
                }
                first_row.append_option(f.first_row_id());
                referenced.append_option(f.referenced_data_file());
                offset.append_option(f.content_offset());
                csize.append_option(f.content_size_in_bytes());
            }
        }
    }
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    let eq = eq_ids.finish();
    let sp = split.finish();
    fields.extend([
        Field::new("content", DataType::Int32, false),
        Field::new("file_path", DataType::Utf8, false),
        Field::new("file_format", DataType::Utf8, false),
        Field::new("spec_id", DataType::Int32, false),
        Field::new("record_count", DataType::Int64, false),
        Field::new("file_size_in_bytes", DataType::Int64, false),
        Field::new("split_offsets", sp.data_type().clone(), true),
        Field::new("equality_ids", eq.data_type().clone(), true),
        Field::new("sort_order_id", DataType::Int32, true),
    ]);
    columns.extend([
        Arc::new(content.finish()) as ArrayRef,
        Arc::new(path.finish()),
        Arc::new(format.finish()),
        Arc::new(spec.finish()),
        Arc::new(records.finish()),
        Arc::new(size.finish()),
        Arc::new(sp),
        Arc::new(eq),
        Arc::new(sort.finish()),
    ]);
    if md.format_version() >= iceberg::spec::FormatVersion::V3 {
        fields.extend([
            Field::new("first_row_id", DataType::Int64, true),
            Field::new("referenced_data_file", DataType::Utf8, true),
            Field::new("content_offset", DataType::Int64, true),
            Field::new("content_size_in_bytes", DataType::Int64, true),
        ]);
        columns.extend([
            Arc::new(first_row.finish()) as ArrayRef,
            Arc::new(referenced.finish()),
            Arc::new(offset.finish()),
            Arc::new(csize.finish()),
        ]);
    }
    batch(fields, columns)
}
