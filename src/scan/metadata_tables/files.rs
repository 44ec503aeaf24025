//! The files, entries and partitions metadata tables: content files as rows with Java's
//! `DataFile` columns (the `partition` struct over every spec's fields, the metric maps, the
//! v3 fields), manifest entries around them, and per-partition counts.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, Int32Builder, Int64Builder, ListBuilder, MapBuilder, MapFieldNames,
    StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{Array, ArrayRef, RecordBatch, StructArray};
use arrow_schema::{DataType, Field, Fields};
use iceberg::spec::{
    DataContentType, DataFile, Datum, Literal, ManifestContentType, ManifestEntryRef, ManifestFile,
    ManifestStatus, PrimitiveLiteral, PrimitiveType, TableMetadata, Transform, Type,
};

use super::{batch, snapshot_of, ts};
use crate::error::{Error, Result};
use crate::table::Table;

/// Which manifests a files or entries table reads.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scope {
    /// The manifests of one snapshot (default: the current one).
    Snapshot(Option<i64>),
    /// The manifests of every snapshot, each (by path) once: Java's `reachableManifests`.
    All,
}

/// The manifests `scope` reads, in manifest-list order.
pub(super) async fn manifests_of(table: &Table, scope: Scope) -> Result<Vec<ManifestFile>> {
    match scope {
        Scope::Snapshot(id) => match snapshot_of(table, id)? {
            Some(s) => table.manifest_list(&s).await,
            None => Ok(Vec::new()),
        },
        Scope::All => {
            let mut snaps: Vec<_> = table.metadata().snapshots().cloned().collect();
            snaps.sort_by_key(|s| s.sequence_number());
            let (mut seen, mut out) = (HashSet::new(), Vec::new());
            for s in snaps {
                for mf in table.manifest_list(&s).await? {
                    if seen.insert(mf.manifest_path.clone()) {
                        out.push(mf);
                    }
                }
            }
            Ok(out)
        }
    }
}

/// One manifest entry read, with its manifest's spec id and its file's first row id as Java
/// reads it (inherited from the manifest's `first_row_id` for files without one).
pub(super) struct EntryRow {
    /// The entry.
    pub(super) entry: ManifestEntryRef,
    /// Its manifest's partition spec id.
    pub(super) spec_id: i32,
    /// Its file's first row id (Java's `ManifestReader` id assignment).
    pub(super) first_row_id: Option<i64>,
}

impl EntryRow {
    fn file(&self) -> FileRow<'_> {
        FileRow {
            file: self.entry.data_file(),
            spec_id: self.spec_id,
            first_row_id: self.first_row_id,
        }
    }
}

/// A content file as a files table shows it.
#[derive(Clone, Copy)]
pub(super) struct FileRow<'a> {
    file: &'a DataFile,
    spec_id: i32,
    first_row_id: Option<i64>,
}

/// The entries of `manifests` (`live`: only added and existing ones), data manifests and/or
/// delete manifests.
pub(super) async fn entries_of(
    table: &Table,
    manifests: &[ManifestFile],
    data: bool,
    deletes: bool,
    live: bool,
) -> Result<Vec<EntryRow>> {
    let mut out = Vec::new();
    for mf in manifests {
        let is_data = mf.content == ManifestContentType::Data;
        if (is_data && !data) || (!is_data && !deletes) {
            continue;
        }
        let m = table.load_manifest(mf).await?;
        // Java: data files without a first row id get the manifest's next one (added and
        // existing entries, in order); in a manifest without one, no file has one.
        let mut next = mf.first_row_id.map(|r| r as i64);
        for e in m.entries() {
            let f = e.data_file();
            let first_row_id = match (is_data, next) {
                (false, _) => f.first_row_id(),
                (true, None) => None,
                (true, Some(n)) => match f.first_row_id() {
                    Some(id) => Some(id),
                    None if e.status() != ManifestStatus::Deleted => {
                        next = Some(n + f.record_count() as i64);
                        Some(n)
                    }
                    None => None,
                },
            };
            if live && e.status() == ManifestStatus::Deleted {
                continue;
            }
            out.push(EntryRow {
                entry: e.clone(),
                spec_id: mf.partition_spec_id,
                first_row_id,
            });
        }
    }
    Ok(out)
}

/// One field of the table's partition type.
#[derive(Debug, Clone)]
pub(super) struct PartitionField {
    id: i32,
    name: String,
    ty: PrimitiveType,
    void: bool,
}

/// The partition type of the metadata tables (Java's `Partitioning.partitionType`): the fields
/// of every spec whose source column still exists, by field id, named as in the newest spec.
#[derive(Debug, Clone)]
pub(super) struct PartitionType {
    fields: Vec<PartitionField>,
}

impl PartitionType {
    /// The partition type of table metadata `md`.
    pub(super) fn of(md: &TableMetadata) -> Result<Self> {
        let schema = md.current_schema();
        let mut specs: Vec<_> = md.partition_specs_iter().collect();
        specs.sort_by_key(|s| std::cmp::Reverse(s.spec_id()));
        let mut by_id: BTreeMap<i32, PartitionField> = BTreeMap::new();
        for spec in specs {
            for f in spec.fields() {
                let Some(src) = schema.field_by_id(f.source_id) else {
                    continue;
                };
                let Type::Primitive(ty) = f.transform.result_type(&src.field_type)? else {
                    continue;
                };
                let void = f.transform == Transform::Void;
                match by_id.get_mut(&f.field_id) {
                    None => {
                        by_id.insert(
                            f.field_id,
                            PartitionField {
                                id: f.field_id,
                                name: f.name.clone(),
                                ty,
                                void,
                            },
                        );
                    }
                    // A field dropped in a v1 table (void) keeps its type from the spec that
                    // still had it.
                    Some(e) if e.void && !void => {
                        e.ty = ty;
                        e.void = false;
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(Self {
            fields: by_id.into_values().collect(),
        })
    }

    /// Whether it has no fields (the table was never partitioned): Java then leaves the
    /// `partition` column out.
    pub(super) fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// A file's partition tuple (of spec `spec_id`) coerced to this type: null for the
    /// fields its spec does not have (Java: `PartitionUtil.coercePartition`).
    pub(super) fn coerce(
        &self,
        md: &TableMetadata,
        spec_id: i32,
        f: &DataFile,
    ) -> Vec<Option<PrimitiveLiteral>> {
        let mut by_id: HashMap<i32, PrimitiveLiteral> = HashMap::new();
        if let Some(spec) = md.partition_spec_by_id(spec_id) {
            for (pf, v) in spec.fields().iter().zip(f.partition().iter()) {
                if let Some(Literal::Primitive(p)) = v {
                    by_id.insert(pf.field_id, p.clone());
                }
            }
        }
        self.fields.iter().map(|f| by_id.remove(&f.id)).collect()
    }

    /// The `partition` column of `rows` (each a coerced tuple).
    pub(super) fn column(
        &self,
        rows: &[Vec<Option<PrimitiveLiteral>>],
    ) -> Result<(Field, ArrayRef)> {
        let mut fields = Vec::new();
        let mut columns = Vec::new();
        for (j, f) in self.fields.iter().enumerate() {
            let dt = iceberg::arrow::type_to_arrow_type(&Type::Primitive(f.ty.clone()))?;
            let values: Vec<Option<&PrimitiveLiteral>> = rows
                .iter()
                .map(|r| r.get(j).and_then(|v| v.as_ref()))
                .collect();
            let col = super::literals::literal_column(&values, &f.ty, &dt)?;
            fields.push(Field::new(&f.name, dt, true));
            columns.push(col);
        }
        let fields = Fields::from(fields);
        let array = StructArray::try_new(fields.clone(), columns, None)?;
        Ok((
            Field::new("partition", DataType::Struct(fields), false),
            Arc::new(array),
        ))
    }
}

fn map_names() -> MapFieldNames {
    MapFieldNames {
        entry: "key_value".into(),
        key: "key".into(),
        value: "value".into(),
    }
}

/// A `map<int, long>` metric column.
fn long_map(
    files: &[&DataFile],
    get: impl Fn(&DataFile) -> &HashMap<i32, u64>,
) -> Result<ArrayRef> {
    let mut b = MapBuilder::new(Some(map_names()), Int32Builder::new(), Int64Builder::new());
    for f in files {
        let mut kv: Vec<_> = get(f).iter().collect();
        kv.sort();
        for (k, v) in kv {
            b.keys().append_value(*k);
            b.values().append_value(*v as i64);
        }
        b.append(true)?;
    }
    Ok(Arc::new(b.finish()))
}

/// A `map<int, binary>` bounds column (each bound in its single-value serialization).
fn bound_map(
    files: &[&DataFile],
    get: impl Fn(&DataFile) -> &HashMap<i32, Datum>,
) -> Result<ArrayRef> {
    let mut b = MapBuilder::new(Some(map_names()), Int32Builder::new(), BinaryBuilder::new());
    for f in files {
        let mut kv: Vec<_> = get(f).iter().collect();
        kv.sort_by_key(|(k, _)| **k);
        for (k, v) in kv {
            b.keys().append_value(*k);
            b.values().append_value(v.to_bytes()?);
        }
        b.append(true)?;
    }
    Ok(Arc::new(b.finish()))
}

/// Java's `DataFile` columns of `files` (each with its spec id): content, file_path,
/// file_format, spec_id, partition (when the table is partitioned), record_count,
/// file_size_in_bytes, the metric maps, key_metadata, split_offsets, equality_ids,
/// sort_order_id, first_row_id, referenced_data_file, content_offset, content_size_in_bytes.
pub(super) fn file_columns(
    md: &TableMetadata,
    pt: &PartitionType,
    files: &[FileRow<'_>],
) -> Result<Vec<(Field, ArrayRef)>> {
    let mut content = Int32Builder::new();
    let (mut path, mut format) = (StringBuilder::new(), StringBuilder::new());
    let mut spec = Int32Builder::new();
    let (mut records, mut size) = (Int64Builder::new(), Int64Builder::new());
    let mut key_metadata = BinaryBuilder::new();
    let mut sort = Int32Builder::new();
    let mut eq_ids = ListBuilder::new(Int32Builder::new());
    let mut split = ListBuilder::new(Int64Builder::new());
    let mut first_row = Int64Builder::new();
    let mut referenced = StringBuilder::new();
    let (mut offset, mut csize) = (Int64Builder::new(), Int64Builder::new());
    let mut partitions = Vec::with_capacity(files.len());
    for r in files {
        let (f, spec_id) = (r.file, &r.spec_id);
        content.append_value(f.content_type() as i32);
        path.append_value(f.file_path());
        format.append_value(f.file_format().to_string().to_uppercase());
        spec.append_value(*spec_id);
        partitions.push(pt.coerce(md, *spec_id, f));
        records.append_value(f.record_count() as i64);
        size.append_value(f.file_size_in_bytes() as i64);
        key_metadata.append_option(f.key_metadata());
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
        first_row.append_option(r.first_row_id);
        referenced.append_option(f.referenced_data_file());
        offset.append_option(f.content_offset());
        csize.append_option(f.content_size_in_bytes());
    }
    let only: Vec<&DataFile> = files.iter().map(|r| r.file).collect();
    let mut out: Vec<(Field, ArrayRef)> = vec![
        (
            Field::new("content", DataType::Int32, false),
            Arc::new(content.finish()),
        ),
        (
            Field::new("file_path", DataType::Utf8, false),
            Arc::new(path.finish()),
        ),
        (
            Field::new("file_format", DataType::Utf8, false),
            Arc::new(format.finish()),
        ),
        (
            Field::new("spec_id", DataType::Int32, false),
            Arc::new(spec.finish()),
        ),
    ];
    if !pt.is_empty() {
        out.push(pt.column(&partitions)?);
    }
    out.push((
        Field::new("record_count", DataType::Int64, false),
        Arc::new(records.finish()),
    ));
    out.push((
        Field::new("file_size_in_bytes", DataType::Int64, false),
        Arc::new(size.finish()),
    ));
    type Get = fn(&DataFile) -> &HashMap<i32, u64>;
    let counts: [(&str, Get); 4] = [
        ("column_sizes", DataFile::column_sizes),
        ("value_counts", DataFile::value_counts),
        ("null_value_counts", DataFile::null_value_counts),
        ("nan_value_counts", DataFile::nan_value_counts),
    ];
    for (name, get) in counts {
        let a = long_map(&only, get)?;
        out.push((Field::new(name, a.data_type().clone(), true), a));
    }
    type GetBound = fn(&DataFile) -> &HashMap<i32, Datum>;
    let bounds: [(&str, GetBound); 2] = [
        ("lower_bounds", DataFile::lower_bounds),
        ("upper_bounds", DataFile::upper_bounds),
    ];
    for (name, get) in bounds {
        let a = bound_map(&only, get)?;
        out.push((Field::new(name, a.data_type().clone(), true), a));
    }
    let sp: ArrayRef = Arc::new(split.finish());
    let eq: ArrayRef = Arc::new(eq_ids.finish());
    out.extend([
        (
            Field::new("key_metadata", DataType::Binary, true),
            Arc::new(key_metadata.finish()) as ArrayRef,
        ),
        (
            Field::new("split_offsets", sp.data_type().clone(), true),
            sp,
        ),
        (Field::new("equality_ids", eq.data_type().clone(), true), eq),
        (
            Field::new("sort_order_id", DataType::Int32, true),
            Arc::new(sort.finish()),
        ),
        (
            Field::new("first_row_id", DataType::Int64, true),
            Arc::new(first_row.finish()),
        ),
        (
            Field::new("referenced_data_file", DataType::Utf8, true),
            Arc::new(referenced.finish()),
        ),
        (
            Field::new("content_offset", DataType::Int64, true),
            Arc::new(offset.finish()),
        ),
        (
            Field::new("content_size_in_bytes", DataType::Int64, true),
            Arc::new(csize.finish()),
        ),
    ]);
    Ok(out)
}

/// `files`, `data_files`, `delete_files` and their `all_*` forms: the live files of the
/// manifests `scope` reads.
pub(super) async fn files(
    table: &Table,
    scope: Scope,
    data: bool,
    deletes: bool,
) -> Result<RecordBatch> {
    let md = table.metadata();
    let pt = PartitionType::of(md)?;
    let manifests = manifests_of(table, scope).await?;
    let entries = entries_of(table, &manifests, data, deletes, true).await?;
    let rows: Vec<FileRow<'_>> = entries.iter().map(EntryRow::file).collect();
    let mut out = file_columns(md, &pt, &rows)?;
    let only: Vec<&DataFile> = rows.iter().map(|r| r.file).collect();
    out.extend(super::readable_metrics::readable_metrics(
        md.current_schema(),
        &only,
    )?);
    let (fields, columns) = out.into_iter().unzip();
    batch(fields, columns)
}

/// `entries` and `all_entries`: every manifest entry (added, existing, deleted) of the
/// manifests `scope` reads, with its `data_file` struct.
pub(super) async fn entries(table: &Table, scope: Scope) -> Result<RecordBatch> {
    let md = table.metadata();
    let pt = PartitionType::of(md)?;
    let manifests = manifests_of(table, scope).await?;
    let entries = entries_of(table, &manifests, true, true, false).await?;
    let mut status = Int32Builder::new();
    let mut snap = Int64Builder::new();
    let (mut seq, mut file_seq) = (Int64Builder::new(), Int64Builder::new());
    for EntryRow { entry: e, .. } in &entries {
        status.append_value(e.status() as i32);
        snap.append_option(e.snapshot_id());
        seq.append_option(e.sequence_number());
        file_seq.append_option(e.file_sequence_number);
    }
    let rows: Vec<FileRow<'_>> = entries.iter().map(EntryRow::file).collect();
    let (fields, columns): (Vec<Field>, Vec<ArrayRef>) =
        file_columns(md, &pt, &rows)?.into_iter().unzip();
    let fields = Fields::from(fields);
    let data_file = StructArray::try_new(fields.clone(), columns, None)?;
    let mut fields = vec![
        Field::new("status", DataType::Int32, false),
        Field::new("snapshot_id", DataType::Int64, true),
        Field::new("sequence_number", DataType::Int64, true),
        Field::new("file_sequence_number", DataType::Int64, true),
        Field::new("data_file", DataType::Struct(fields), false),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(status.finish()),
        Arc::new(snap.finish()),
        Arc::new(seq.finish()),
        Arc::new(file_seq.finish()),
        Arc::new(data_file),
    ];
    let only: Vec<&DataFile> = rows.iter().map(|r| r.file).collect();
    if let Some((f, c)) = super::readable_metrics::readable_metrics(md.current_schema(), &only)? {
        fields.push(f);
        columns.push(c);
    }
    batch(fields, columns)
}

/// One partition's counts (Java: `PartitionsTable.Partition`).
#[derive(Default)]
struct Counts {
    spec_id: i32,
    data_records: i64,
    data_files: i32,
    data_bytes: i64,
    pos_records: i64,
    pos_files: i32,
    eq_records: i64,
    eq_files: i32,
    last_updated_us: Option<i64>,
    last_updated_snapshot: Option<i64>,
}

/// `partitions`: the live files of the snapshot read, grouped by partition (coerced to the
/// table's partition type). An unpartitioned table has one row, without the `partition` and
/// `spec_id` columns (as in Java).
pub(super) async fn partitions(table: &Table, snapshot: Option<i64>) -> Result<RecordBatch> {
    let md = table.metadata();
    let pt = PartitionType::of(md)?;
    let manifests = manifests_of(table, Scope::Snapshot(snapshot)).await?;
    let entries = entries_of(table, &manifests, true, true, true).await?;
    let mut order: Vec<Vec<Option<PrimitiveLiteral>>> = Vec::new();
    let mut by_key: HashMap<Vec<Option<PrimitiveLiteral>>, Counts> = HashMap::new();
    for EntryRow {
        entry: e, spec_id, ..
    } in &entries
    {
        let f = e.data_file();
        let key = pt.coerce(md, *spec_id, f);
        let c = by_key.entry(key.clone()).or_insert_with(|| {
            order.push(key);
            Counts::default()
        });
        if let Some(s) = e.snapshot_id().and_then(|id| md.snapshot_by_id(id)) {
            let at = s.timestamp_ms() * 1000;
            if c.last_updated_us.is_none_or(|l| at > l) {
                c.spec_id = *spec_id;
                c.last_updated_us = Some(at);
                c.last_updated_snapshot = Some(s.snapshot_id());
            }
        }
        let n = f.record_count() as i64;
        match f.content_type() {
            DataContentType::Data => {
                c.data_records += n;
                c.data_files += 1;
                c.data_bytes += f.file_size_in_bytes() as i64;
            }
            DataContentType::PositionDeletes => {
                c.pos_records += n;
                c.pos_files += 1;
            }
            DataContentType::EqualityDeletes => {
                c.eq_records += n;
                c.eq_files += 1;
            }
        }
    }
    let mut spec = Int32Builder::new();
    let mut longs: [Int64Builder; 5] = std::array::from_fn(|_| Int64Builder::new());
    let mut ints: [Int32Builder; 3] = std::array::from_fn(|_| Int32Builder::new());
    let mut at = TimestampMicrosecondBuilder::new().with_timezone("+00:00");
    for key in &order {
        let c = by_key
            .get(key)
            .ok_or_else(|| Error::io("partition counts lost a key"))?;
        spec.append_value(c.spec_id);
        longs[0].append_value(c.data_records);
        ints[0].append_value(c.data_files);
        longs[1].append_value(c.data_bytes);
        longs[2].append_value(c.pos_records);
        ints[1].append_value(c.pos_files);
        longs[3].append_value(c.eq_records);
        ints[2].append_value(c.eq_files);
        at.append_option(c.last_updated_us);
        longs[4].append_option(c.last_updated_snapshot);
    }
    let [mut data_records, mut data_bytes, mut pos_records, mut eq_records, mut last_snap] = longs;
    let [mut data_files, mut pos_files, mut eq_files] = ints;
    let mut out: Vec<(Field, ArrayRef)> = Vec::new();
    if !pt.is_empty() {
        out.push(pt.column(&order)?);
        out.push((
            Field::new("spec_id", DataType::Int32, false),
            Arc::new(spec.finish()),
        ));
    }
    let long = |n: &str| Field::new(n, DataType::Int64, false);
    let int = |n: &str| Field::new(n, DataType::Int32, false);
    out.extend([
        (
            long("record_count"),
            Arc::new(data_records.finish()) as ArrayRef,
        ),
        (int("file_count"), Arc::new(data_files.finish())),
        (
            long("total_data_file_size_in_bytes"),
            Arc::new(data_bytes.finish()),
        ),
        (
            long("position_delete_record_count"),
            Arc::new(pos_records.finish()),
        ),
        (
            int("position_delete_file_count"),
            Arc::new(pos_files.finish()),
        ),
        (
            long("equality_delete_record_count"),
            Arc::new(eq_records.finish()),
        ),
        (
            int("equality_delete_file_count"),
            Arc::new(eq_files.finish()),
        ),
        (
            Field::new("last_updated_at", ts(), true),
            Arc::new(at.finish()),
        ),
        (
            Field::new("last_updated_snapshot_id", DataType::Int64, true),
            Arc::new(last_snap.finish()),
        ),
    ]);
    let (fields, columns) = out.into_iter().unzip();
    batch(fields, columns)
}
