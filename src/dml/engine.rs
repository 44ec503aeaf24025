//! The row-level write engine shared by DELETE, UPDATE and MERGE.
//!
//! 1. Plan the files that may hold affected rows (pruned by the operation's filter).
//! 2. Read their live rows with positions; a [`RowChanger`] says which rows go away and which
//!    new rows replace them (written as new data files, partitioned by the current spec).
//! 3. Copy-on-write: rewrite each touched file without its removed rows.
//!    Merge-on-read: position delete files (v2) or deletion vectors (v3, merged with the
//!    file's previous one) for the removed rows.
//!    Either way, a file that loses every row is dropped whole.
//! 4. Commit one snapshot, validated against what was committed meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch};
use futures::StreamExt;
use iceberg::expr::{Bind, Predicate};
use iceberg::spec::Operation;
use roaring::RoaringTreemap;

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::scan::{PlannedFile, Scan, SnapshotSelector};
use crate::spec::{
    DataContentType, DataFile, DeleteGranularity, FormatVersion, PartitionSpec, Struct, WriteMode,
};
use crate::table::Table;
use crate::txn::{commit_or_discard, FileKey, RowLevelValidation, SnapshotProducer};
use crate::write::{DataWriter, DeleteFileWriter};

/// Deleted positions bound for one delete file: the spec and partition it is written for,
/// and each referenced data file's positions.
type PositionGroup = (Arc<PartitionSpec>, Struct, Vec<(String, RoaringTreemap)>);

/// Which statement runs (selects the `write.*.mode` and `write.*.isolation-level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowLevelKind {
    /// DELETE.
    Delete,
    /// UPDATE.
    Update,
    /// MERGE.
    Merge,
}

impl RowLevelKind {
    fn name(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::Update => "update",
            Self::Merge => "merge",
        }
    }
}

/// Decides, batch by batch, what happens to the live rows of the files read.
pub trait RowChanger: Send {
    /// Columns the changer reads (`None`: all of them).
    fn columns(&self) -> Option<Vec<String>>;

    /// For a batch of live rows: which rows go away (`true`), and new rows to write
    /// (deleted rows' replacements; any column order, matched to the table by name).
    fn change(&mut self, batch: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)>;

    /// [`RowChanger::change`] for a batch of planned file `file`; a file's batches arrive in
    /// row order (batches of different files may interleave).
    fn change_in_file(
        &mut self,
        _file: usize,
        batch: &RecordBatch,
    ) -> Result<(BooleanArray, Option<RecordBatch>)> {
        self.change(batch)
    }

    /// v3: whether the batches should end with the rows' `_row_id` and
    /// `_last_updated_sequence_number` (an UPDATE keeps a row's id).
    fn wants_row_lineage(&self) -> bool {
        false
    }

    /// Whether every row of a file goes away, judged from `constants`: the values of
    /// [`RowChanger::columns`], which are the same on every row of the file (its identity
    /// partition values). `None` when that cannot be told without reading the rows.
    fn removes_all(&self, _constants: &RecordBatch) -> Result<Option<bool>> {
        Ok(None)
    }

    /// New rows to write once every row was seen (MERGE's `WHEN NOT MATCHED`).
    fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        Ok(vec![])
    }

    /// Partition at a time: files are read one partition after another, each between
    /// [`RowChanger::start_group`] and [`RowChanger::end_group`], so the changer's state can
    /// be bounded by a partition. Default: every file in one pass.
    fn grouped(&self) -> bool {
        false
    }

    /// The files of partition `partition` (of spec `spec_id`) are read next; `false` skips
    /// them (nothing in this partition changes).
    fn start_group(&mut self, _spec_id: i32, _partition: &Struct) -> Result<bool> {
        Ok(true)
    }

    /// New rows to write once the group's rows were seen.
    fn end_group(&mut self) -> Result<Vec<RecordBatch>> {
        Ok(vec![])
    }

    /// After every group: new rows for partitions the table has no file in, one partition
    /// per call, until `None`.
    fn next_new_group(&mut self) -> Result<Option<Vec<RecordBatch>>> {
        Ok(None)
    }
}

/// What a row-level statement did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RowLevelResult {
    /// The table at the new version (unchanged if nothing was affected).
    pub table: Table,
    /// The new snapshot (`None` when no row was affected).
    pub snapshot_id: Option<i64>,
    /// The mode used.
    pub mode: WriteMode,
    /// Rows removed (deleted, or replaced by their updated version).
    pub removed_rows: u64,
    /// New rows written: updated versions and inserts.
    pub written_rows: u64,
    /// Unchanged rows copied into rewritten files (copy-on-write).
    pub rewritten_rows: u64,
    /// Data files dropped (rewritten or emptied).
    pub removed_data_files: usize,
    /// Data files added.
    pub added_data_files: usize,
    /// Delete files added.
    pub added_delete_files: usize,
    /// Bytes of every added file.
    pub written_bytes: u64,
}

/// What the read-and-write phase staged for the commit.
struct Staged {
    removed: Vec<FileKey>,
    touched: Vec<(DataFile, Arc<PartitionSpec>)>,
    removed_rows: u64,
    removed_data_files: usize,
    added_deletes: Vec<(i32, DataFile)>,
    written_rows: u64,
    rewritten_rows: u64,
}

/// Per planned file: rows seen and positions removed.
#[derive(Default)]
struct FileState {
    live_rows: u64,
    removed: RoaringTreemap,
}

/// Runs a row-level change on `table`. `filter` prunes the files read (it must hold for every
/// row the changer may remove; `None` reads the whole table).
pub async fn run(
    catalog: &Catalog,
    table: &Table,
    kind: RowLevelKind,
    filter: Option<Predicate>,
    changer: &mut dyn RowChanger,
) -> Result<RowLevelResult> {
    let props = table.properties()?;
    let (mode, isolation) = match kind {
        RowLevelKind::Delete => (props.delete_mode, props.delete_isolation),
        RowLevelKind::Update => (props.update_mode, props.update_isolation),
        RowLevelKind::Merge => (props.merge_mode, props.merge_isolation),
    };
    let version = table.metadata().format_version();
    if mode == WriteMode::MergeOnRead && version == FormatVersion::V1 {
        return Err(Error::unsupported(format!(
            "table {} is format v1, which has no delete files, so write.{}.mode=merge-on-read cannot apply; \
             upgrade it (format-version=2) or use copy-on-write",
            table.name(),
            kind.name()
        )));
    }
    let snapshot_id = table.current_snapshot().map(|s| s.snapshot_id());
    let at = |s: Scan| match snapshot_id {
        Some(id) => s.snapshot(SnapshotSelector::Id(id)),
        None => s,
    };
    let mut scan = at(Scan::new(table));
    if let Some(f) = &filter {
        scan = scan.prune(f.clone());
    }
    if let Some(cols) = changer.columns() {
        scan = scan.select(cols);
    }
    if version == FormatVersion::V3 && changer.wants_row_lineage() {
        scan = scan.with_row_lineage();
    }
    let mut plan = scan.plan().await?.without_row_filter();
    // Files the changer removes whole judging by partition values alone are not read.
    let mut dropped: Vec<PlannedFile> = Vec::new();
    if let Some(cols) = changer.columns() {
        let arrow = iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?;
        for f in &plan.files {
            if let Some(row) = identity_row(table, &arrow, f, &cols)? {
                if changer.removes_all(&row)? == Some(true) {
                    dropped.push(f.clone());
                }
            }
        }
        let gone: std::collections::HashSet<String> = dropped
            .iter()
            .map(|f| f.file.file_path().to_string())
            .collect();
        plan.retain(|p| !gone.contains(p.file.file_path()));
    }
    let files: Vec<PlannedFile> = plan.files.clone();
    let previous: Vec<Option<RoaringTreemap>> = (0..files.len())
        .map(|i| plan.deleted_positions(i).cloned())
        .collect();
    let mut states: Vec<FileState> = (0..files.len()).map(|_| FileState::default()).collect();
    // v3: rows copied by copy-on-write keep their row lineage; new and updated rows get new
    // row ids (their lineage columns are NULL, so they inherit the new file's).
    let v3 = version == FormatVersion::V3;
    let mut data = DataWriter::new(table)?;
    if v3 {
        data = data.with_row_lineage(table)?;
    }
    let mut deletes = DeleteFileWriter::new(table)?;

    let outcome = async {
        if changer.grouped() {
            // One partition at a time: the changer holds only that partition's state.
            let mut groups: Vec<((i32, Struct), Vec<usize>)> = Vec::new();
            let mut at_group: HashMap<(i32, Struct), usize> = HashMap::new();
            for (i, f) in files.iter().enumerate() {
                let key = (f.spec.spec_id(), f.partition.clone());
                let g = *at_group.entry(key.clone()).or_insert_with(|| {
                    groups.push((key, Vec::new()));
                    groups.len() - 1
                });
                groups[g].1.push(i);
            }
            for ((spec_id, partition), idx) in groups {
                if !changer.start_group(spec_id, &partition)? {
                    continue;
                }
                let stream = scan.read_positioned(plan.subset(&idx), true)?;
                consume(stream, &idx, &mut states, changer, &mut data).await?;
                write_all(&mut data, changer.end_group()?).await?;
            }
            while let Some(batches) = changer.next_new_group()? {
                write_all(&mut data, batches).await?;
            }
        } else {
            let idx: Vec<usize> = (0..files.len()).collect();
            let stream = scan.read_positioned(plan, true)?;
            consume(stream, &idx, &mut states, changer, &mut data).await?;
        }
        write_all(&mut data, changer.finish()?).await?;
        let mut producer_removed: Vec<FileKey> = Vec::new();
        let mut touched = Vec::new();
        let mut removed_rows = 0u64;
        let mut removed_data_files = 0usize;
        for f in &dropped {
            producer_removed.push(FileKey::of(&f.file));
            producer_removed.extend(file_scoped_deletes(f));
            touched.push((f.file.clone(), f.spec.clone()));
            removed_data_files += 1;
            removed_rows += f.file.record_count();
        }
        let mut rewrite: Vec<usize> = Vec::new();
        let mut new_positions: Vec<(usize, RoaringTreemap)> = Vec::new();
        for (i, st) in states.iter_mut().enumerate() {
            if st.removed.is_empty() {
                continue;
            }
            let f = &files[i];
            removed_rows += st.removed.len();
            touched.push((f.file.clone(), f.spec.clone()));
            let whole = st.removed.len() == st.live_rows;
            if whole || mode == WriteMode::CopyOnWrite {
                producer_removed.push(FileKey::of(&f.file));
                producer_removed.extend(file_scoped_deletes(f));
                removed_data_files += 1;
                if !whole {
                    rewrite.push(i);
                }
            } else {
                new_positions.push((i, std::mem::take(&mut st.removed)));
            }
        }
        // Copy-on-write: the touched files again, whole, without their removed rows.
        let mut rewritten_rows = 0u64;
        if !rewrite.is_empty() {
            let keep: std::collections::HashSet<&str> =
                rewrite.iter().map(|&i| files[i].file.file_path()).collect();
            let mut plan = at(Scan::new(table)).plan().await?;
            plan.retain(|p| keep.contains(p.file.file_path()));
            let order: Vec<usize> = plan
                .files
                .iter()
                .map(|p| {
                    rewrite
                        .iter()
                        .copied()
                        .find(|&i| files[i].file.file_path() == p.file.file_path())
                        .unwrap_or(usize::MAX)
                })
                .collect();
            let mut rescan = at(Scan::new(table));
            if v3 {
                rescan = rescan.with_row_lineage();
            }
            let mut stream = rescan.read_positioned(plan, true)?;
            while let Some(item) = stream.next().await {
                let (j, (batch, positions)) = item?;
                let positions = positions
                    .ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
                let removed = &states
                    .get(order[j])
                    .ok_or_else(|| Error::io("rewritten file lost"))?
                    .removed;
                let keep: BooleanArray = positions
                    .values()
                    .iter()
                    .map(|p| Some(!removed.contains(*p)))
                    .collect();
                let b = arrow_select::filter::filter_record_batch(&batch, &keep)?;
                if b.num_rows() > 0 {
                    rewritten_rows += b.num_rows() as u64;
                    data.write(b).await?;
                }
            }
        }
        // Merge-on-read: delete files for the removed positions.
        let mut added_deletes: Vec<(i32, DataFile)> = Vec::new();
        if !new_positions.is_empty() {
            if version == FormatVersion::V3 {
                let mut vectors = Vec::new();
                for (i, p) in new_positions {
                    let f = &files[i];
                    let mut all = p;
                    if let Some(prev) = &previous[i] {
                        all |= prev;
                    }
                    producer_removed.extend(file_scoped_deletes(f));
                    vectors.push((&f.file, f.spec.spec_id(), all));
                }
                for dv in deletes.write_deletion_vectors(&vectors).await? {
                    let spec_id = vectors
                        .iter()
                        .find(|(f, _, _)| {
                            Some(f.file_path().to_string()) == dv.referenced_data_file()
                        })
                        .map(|(_, s, _)| *s)
                        .unwrap_or(0);
                    added_deletes.push((spec_id, dv));
                }
            } else {
                let mut groups: BTreeMap<(i32, String), PositionGroup> = BTreeMap::new();
                for (i, p) in new_positions {
                    let f = &files[i];
                    let key = match props.delete_granularity {
                        DeleteGranularity::File => {
                            (f.spec.spec_id(), f.file.file_path().to_string())
                        }
                        DeleteGranularity::Partition => {
                            (f.spec.spec_id(), format!("{:?}", f.partition))
                        }
                    };
                    groups
                        .entry(key)
                        .or_insert_with(|| (f.spec.clone(), f.partition.clone(), Vec::new()))
                        .2
                        .push((f.file.file_path().to_string(), p));
                }
                for (_, (spec, partition, entries)) in groups {
                    let df = deletes
                        .write_position_deletes(&spec, &partition, &entries)
                        .await?;
                    added_deletes.push((spec.spec_id(), df));
                }
            }
        }
        let written_rows = data.rows_written() - rewritten_rows;
        Ok::<_, Error>(Staged {
            removed: producer_removed,
            touched,
            removed_rows,
            removed_data_files,
            added_deletes,
            written_rows,
            rewritten_rows,
        })
    }
    .await;
    let Staged {
        removed,
        touched,
        removed_rows,
        removed_data_files,
        added_deletes,
        written_rows,
        rewritten_rows,
    } = match outcome {
        Ok(o) => o,
        Err(e) => {
            data.abort(table.storage()).await;
            deletes.abort().await;
            return Err(e);
        }
    };
    let added_data = match data.close().await {
        Ok(f) => f,
        Err(e) => {
            deletes.abort().await;
            return Err(e);
        }
    };
    let nothing = removed.is_empty() && added_data.is_empty() && added_deletes.is_empty();
    // Deletion vectors share a Puffin file: count each file once.
    let mut seen = std::collections::HashSet::new();
    let written_bytes = added_data
        .iter()
        .chain(added_deletes.iter().map(|(_, f)| f))
        .filter(|f| seen.insert(f.file_path().to_string()))
        .map(|f| f.file_size_in_bytes())
        .sum::<u64>();
    let mut result = RowLevelResult {
        table: table.clone(),
        snapshot_id: None,
        mode,
        removed_rows,
        written_rows,
        rewritten_rows,
        removed_data_files,
        added_data_files: added_data.len(),
        added_delete_files: added_deletes.len(),
        written_bytes,
    };
    if nothing {
        return Ok(result);
    }
    let operation = if added_data.is_empty() {
        Operation::Delete
    } else {
        Operation::Overwrite
    };
    let written: Vec<String> = added_data
        .iter()
        .map(|f| f.file_path().to_string())
        .chain(deletes.written().iter().cloned())
        .collect();
    let mut by_spec: HashMap<i32, Vec<DataFile>> = HashMap::new();
    for (s, f) in added_deletes {
        by_spec.entry(s).or_default().push(f);
    }
    let mut producer = SnapshotProducer::new(operation, added_data).remove_files(removed);
    for (s, fs) in by_spec {
        producer = producer.add_files(s, fs);
    }
    let conflict_filter = match &filter {
        Some(f) => Some(
            f.clone()
                .bind(table.metadata().current_schema().clone(), false)
                .map_err(|e| {
                    Error::invalid(format!("filter on table {}: {}", table.name(), e.message()))
                })?,
        ),
        None => None,
    };
    let validation = RowLevelValidation {
        isolation,
        conflict_filter,
        touched,
        ignore_equality_deletes: false,
        table: table.name(),
    };
    result.table = commit_or_discard(catalog, table, &mut producer, &validation, &written).await?;
    result.snapshot_id = Some(producer.snapshot_id());
    Ok(result)
}

/// Feeds a stream of positioned batches (file `j` of the stream is planned file `idx[j]`) to
/// the changer, recording removed positions and writing new rows.
async fn consume(
    mut stream: futures::stream::BoxStream<'static, Result<(usize, crate::scan::PositionedBatch)>>,
    idx: &[usize],
    states: &mut [FileState],
    changer: &mut dyn RowChanger,
    data: &mut DataWriter,
) -> Result<()> {
    while let Some(item) = stream.next().await {
        let (j, (batch, positions)) = item?;
        let positions =
            positions.ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
        let i = *idx
            .get(j)
            .ok_or_else(|| Error::io("the reader returned a file that was not planned"))?;
        let (remove, new_rows) = changer.change_in_file(i, &batch)?;
        let st = &mut states[i];
        st.live_rows += batch.num_rows() as u64;
        for (r, gone) in remove.iter().enumerate() {
            if gone == Some(true) {
                st.removed.insert(positions.value(r));
            }
        }
        if let Some(b) = new_rows {
            write_all(data, vec![b]).await?;
        }
    }
    Ok(())
}

async fn write_all(data: &mut DataWriter, batches: Vec<RecordBatch>) -> Result<()> {
    for b in batches {
        if b.num_rows() > 0 {
            data.write(b).await?;
        }
    }
    Ok(())
}

/// A one-row batch of `cols` holding the file's identity partition values, or `None` when a
/// column is not an identity partition source of the file's spec.
fn identity_row(
    table: &Table,
    arrow: &arrow_schema::Schema,
    f: &PlannedFile,
    cols: &[String],
) -> Result<Option<RecordBatch>> {
    use iceberg::spec::{Literal, Transform};
    let schema = table.metadata().current_schema();
    let mut fields = Vec::new();
    let mut arrays = Vec::new();
    for c in cols {
        let Some(field) = schema.field_by_name(c) else {
            return Ok(None);
        };
        let Some(k) = f
            .spec
            .fields()
            .iter()
            .position(|pf| pf.source_id == field.id && pf.transform == Transform::Identity)
        else {
            return Ok(None);
        };
        let (Ok(af), Some(prim)) = (
            arrow.field_with_name(c),
            field.field_type.as_primitive_type(),
        ) else {
            return Ok(None);
        };
        let array = match f.partition.iter().nth(k).flatten() {
            None => arrow_array::new_null_array(af.data_type(), 1),
            Some(Literal::Primitive(p)) => crate::expr::literal_array(p, prim, af.data_type())?,
            Some(_) => return Ok(None),
        };
        fields.push(af.clone());
        arrays.push(array);
    }
    Ok(Some(RecordBatch::try_new_with_options(
        Arc::new(arrow_schema::Schema::new(fields)),
        arrays,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(1)),
    )?))
}

/// Keys of the delete files that only concern `f` (its deletion vector, file-scoped position
/// deletes): they go away with it or are replaced by a merged deletion vector.
pub(crate) fn file_scoped_deletes(f: &PlannedFile) -> Vec<FileKey> {
    f.deletes
        .iter()
        .filter(|d| {
            d.file.content_type() == DataContentType::PositionDeletes
                && crate::scan::is_file_scoped(&d.file)
        })
        .map(|d| FileKey::of(&d.file))
        .collect()
}
