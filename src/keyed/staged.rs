//! A distributed upsert (the replace engine): each task folds its share of the changes and
//! writes the winning upserts as data files of the table, listed with the task's keys
//! (nothing committed: [`stage_upsert`]); the driver folds the tasks' keys (task order is
//! arrival order), decides every change against the table as one upsert does, drops from
//! the tasks' files the rows that lost (a later task's change, or a higher stored version or
//! tombstone) and commits once ([`commit_staged_upserts`]). The rows cross no process
//! boundary: the driver reads keys and versions only, and rewrites only task files that
//! hold rows that lost. The engines that fold rows stage the same way after a shuffle by key
//! ([`crate::pending::stage_merged_upsert`]): their staged rows are the keys' new rows, which replace
//! the stored ones, onto the snapshot they were merged with only.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arrow_array::{
    new_null_array, Array, ArrayRef, BooleanArray, Int64Array, RecordBatch, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use parquet::arrow::ArrowWriter;
use roaring::RoaringTreemap;
use serde::{Deserialize, Serialize};

use super::apply::{
    apply_with_retries, commit_extras, decide_by_scan, prepare, Held, Planned, Prepared,
};
use super::batch::{ChangeBatch, UpsertOptions, UpsertResult};
use super::checkpoint::committed_checkpoint;
use super::fold::{self, key_converter, key_fields, key_rows, Columns, Part};
use super::readback::read_back;
use crate::catalog::Catalog;
use crate::error::{Error, ErrorKind, Result};
use crate::scan::{PlannedFile, Scan};
use crate::spec::keyed::{KeyedSpec, MergeEngine, TombstoneList};
use crate::spec::{DataFile, TableIdent};
use crate::storage::join;
use crate::table::Table;
use crate::txn::{discard_staged, stage_data_files, StagedFiles, StagingJob};
use crate::write::DataWriter;

/// The column of a task's key list holding the ordinal of the data file an upsert's row is
/// in (null for a delete).
const FILE: &str = "_file";
/// The column holding the row's position in that file.
const POS: &str = "_pos";

/// One task's share of a distributed upsert, staged by [`crate::pending::stage_upsert`] (JSON-serializable,
/// to hand from a worker to the driver).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StagedUpsert {
    /// The table's name (`ns.table`).
    pub table: String,
    /// The task's winning upserts, written as data files.
    pub files: StagedFiles,
    /// A Parquet file listing the task's winning changes: the key columns, the version and
    /// delete flag columns (the table's names; the flag as a boolean), `_file` (the ordinal
    /// of the upsert's data file in `files`, null for a delete) and `_pos` (its position).
    pub keys_location: String,
    /// Rows the task was given.
    pub input_rows: u64,
    /// Its winning changes (distinct keys).
    pub keys: u64,
    /// For an engine that folds rows: the state of the table whose stored rows the task's
    /// share was merged with (its rows are the keys' new rows, [`crate::pending::stage_merged_upsert`]);
    /// `None` for the replace engine.
    #[serde(default)]
    pub merged_onto: Option<MergedOnto>,
    /// Changes the engine ignored (`first-row`: keys already stored; rows folding to zero
    /// for keys not stored).
    #[serde(default)]
    pub ignored: u64,
}

/// The table state a shard of a distributed upsert was merged with: its current snapshot
/// (`None`: the table had none). The shards commit only onto that state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergedOnto {
    /// The snapshot.
    pub snapshot_id: Option<i64>,
}

/// Folds `changes` (a task's share, in arrival order) and writes the winning upserts as data
/// files of the keyed table `table` with the list of the task's keys, every name tagged with
/// `job`; commits nothing. Bad
/// input is refused as [`super::upsert`] refuses it (columns the table lacks too: a
/// distributed upsert does not evolve the schema). Only the replace engine: the engines that
/// fold rows need the stored rows, which the driver alone may read consistently.
pub(crate) async fn stage_upsert(
    table: &Table,
    changes: &ChangeBatch,
    job: &StagingJob,
) -> Result<StagedUpsert> {
    let spec = KeyedSpec::of(table.metadata(), &table.name())?;
    if spec.engine != MergeEngine::Replace {
        return Err(Error::unsupported(format!(
            "a staged (distributed) upsert folds rows by the replace engine only; table {} uses \
             merge engine '{}': apply the batch in one process (upsert)",
            table.name(),
            spec.engine.name()
        )));
    }
    let prep = prepare(table, changes, &UpsertOptions::default())?;
    let keys = prep.folded.rows.num_rows() as u64;
    let counts = Tally {
        input_rows: changes.num_rows() as u64,
        keys,
        ignored: 0,
    };
    stage_prepared(table, &prep, job, counts, None).await
}

/// What a task's share counted.
pub(super) struct Tally {
    pub input_rows: u64,
    pub keys: u64,
    pub ignored: u64,
}

/// Writes the upserts of `prep` (its folded rows not deleting their key) as data files of
/// `table` tagged with `job`, and the key list, committing nothing.
pub(super) async fn stage_prepared(
    table: &Table,
    prep: &Prepared,
    job: &StagingJob,
    counts: Tally,
    merged_onto: Option<MergedOnto>,
) -> Result<StagedUpsert> {
    let upserts = arrow_select::filter::filter_record_batch(
        &prep.folded.rows,
        &arrow::compute::not(&prep.folded.deleted)?,
    )?;
    let batches = (upserts.num_rows() > 0).then_some(Ok(upserts));
    let files = stage_data_files(table, batches, job).await?;
    let listed = async {
        let keys = task_keys(table, prep, &files).await?;
        put_staged_parquet(table, "keys", job, &keys).await
    }
    .await;
    match listed {
        Ok(keys_location) => Ok(StagedUpsert {
            table: table.name(),
            files,
            keys_location,
            input_rows: counts.input_rows,
            keys: counts.keys,
            merged_onto,
            ignored: counts.ignored,
        }),
        Err(e) => {
            let _ = discard_staged(table, std::slice::from_ref(&files)).await;
            Err(e.context(format!("staging an upsert of table {}", table.name())))
        }
    }
}

/// Writes `batch` as one Parquet file under `table`'s metadata directory, named
/// `staged-<kind>-<uuid>` and tagged with `job`; returns its location.
pub(super) async fn put_staged_parquet(
    table: &Table,
    kind: &str,
    job: &StagingJob,
    batch: &RecordBatch,
) -> Result<String> {
    let location = join(
        table.metadata().location(),
        &format!(
            "metadata/staged-{kind}-{}{}.parquet",
            uuid::Uuid::new_v4(),
            job.suffix()
        ),
    );
    let mut bytes = Vec::new();
    let encode = |e: parquet::errors::ParquetError| Error::io(format!("writing '{location}': {e}"));
    let mut w = ArrowWriter::try_new(&mut bytes, batch.schema(), None).map_err(encode)?;
    w.write(batch).map_err(encode)?;
    w.close().map_err(encode)?;
    table.storage().put(&location, bytes.into()).await?;
    Ok(location)
}

/// The batches of the Parquet file at `location` of `table`'s storage (`what` names it in
/// errors).
pub(super) async fn get_parquet(
    table: &Table,
    location: &str,
    what: &str,
) -> Result<Vec<RecordBatch>> {
    table.storage().read_parquet(location, what).await
}

/// The key list of a task: its written upserts (read back for their positions) and its
/// deletes.
async fn task_keys(table: &Table, prep: &Prepared, files: &StagedFiles) -> Result<RecordBatch> {
    let out = key_list_schema(&prep.folded.rows.schema(), &prep.cols, &prep.spec, table)?;
    let read = prep.cols.key.len() + usize::from(prep.cols.version.is_some());
    let names: Vec<String> = out.fields()[..read]
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let flag = |v: bool, n: usize| -> Option<ArrayRef> {
        prep.spec
            .delete
            .as_ref()
            .map(|_| Arc::new(BooleanArray::from(vec![v; n])) as ArrayRef)
    };
    let mut parts = Vec::new();
    for (i, f) in crate::txn::staged_data_files(table, files)
        .await?
        .iter()
        .enumerate()
    {
        let mut pos = 0i64;
        for b in read_back(table, f.file_path(), &names).await? {
            let n = b.num_rows();
            let mut cols = Vec::with_capacity(out.fields().len());
            for field in &out.fields()[..names.len()] {
                let c = b.column_by_name(field.name()).ok_or_else(|| {
                    Error::corrupt(format!(
                        "staged data file '{}' has no column '{}'",
                        f.file_path(),
                        field.name()
                    ))
                })?;
                cols.push(arrow_cast::cast(c, field.data_type())?);
            }
            cols.extend(flag(false, n));
            cols.push(Arc::new(UInt32Array::from(vec![i as u32; n])));
            cols.push(Arc::new(Int64Array::from_iter_values(pos..pos + n as i64)));
            pos += n as i64;
            parts.push(RecordBatch::try_new(out.clone(), cols)?);
        }
        if pos as u64 != f.record_count() {
            return Err(Error::corrupt(format!(
                "staged data file '{}' read back {pos} rows, {} written",
                f.file_path(),
                f.record_count()
            )));
        }
    }
    let deletes =
        arrow_select::filter::filter_record_batch(&prep.folded.rows, &prep.folded.deleted)?;
    let n = deletes.num_rows();
    let mut cols: Vec<ArrayRef> = prep
        .cols
        .key
        .iter()
        .chain(&prep.cols.version)
        .map(|&i| deletes.column(i).clone())
        .collect();
    cols.extend(flag(true, n));
    cols.push(new_null_array(&DataType::UInt32, n));
    cols.push(new_null_array(&DataType::Int64, n));
    parts.push(RecordBatch::try_new(out.clone(), cols)?);
    Ok(arrow_select::concat::concat_batches(&out, &parts)?)
}

/// The columns of a key list for rows of `schema` (whose key, version and delete columns
/// are `cols`).
fn key_list_schema(
    schema: &SchemaRef,
    cols: &Columns,
    spec: &KeyedSpec,
    table: &Table,
) -> Result<SchemaRef> {
    let mut fields: Vec<Field> = cols
        .key
        .iter()
        .chain(&cols.version)
        .map(|&i| schema.field(i).clone())
        .collect();
    if let Some(d) = &spec.delete {
        fields.push(Field::new(d, DataType::Boolean, false));
    }
    for n in [FILE, POS] {
        if fields.iter().any(|f| f.name() == n) {
            return Err(Error::unsupported(format!(
                "table {}: a key, version or delete column named '{n}' cannot be staged",
                table.name()
            )));
        }
    }
    fields.push(Field::new(FILE, DataType::UInt32, true));
    fields.push(Field::new(POS, DataType::Int64, true));
    Ok(Arc::new(ArrowSchema::new(fields)))
}

/// Applies the tasks' `staged` upserts (in task order: a later task's change of a key wins
/// ties) to the keyed table `ident` as one upsert with `options` (a sink checkpoint too),
/// planning again after a concurrent commit. Afterwards nothing staged is left behind: the
/// committed files are the table's, the rest is deleted (all of it when the batch fails or
/// its checkpoint was committed already; none when the commit's outcome is unknown).
pub(crate) async fn commit_staged_upserts(
    catalog: &Catalog,
    ident: &TableIdent,
    staged: &[StagedUpsert],
    options: &UpsertOptions,
) -> Result<UpsertResult> {
    let table = catalog.load_table(ident).await?;
    // Another table's staging is left alone (its driver may still commit it).
    if let Some(s) = staged.iter().find(|s| s.table != table.name()) {
        return Err(Error::invalid(format!(
            "staged upsert '{}' belongs to table {}, not {}; nothing was committed",
            s.keys_location,
            s.table,
            table.name()
        )));
    }
    let keys = match StagedKeys::load(&table, staged).await {
        Ok(k) => k,
        Err(e) => {
            let _ = discard_staged_upserts(&table, staged).await;
            return Err(e);
        }
    };
    let r = apply_with_retries(catalog, ident, &keys, options, None).await;
    if matches!(&r, Err(e) if e.kind() == ErrorKind::CommitStateUnknown) {
        return r;
    }
    let committed = match (&r, keys.committed.lock()) {
        (Ok(r), Ok(k)) if r.snapshot_id.is_some() => k.clone(),
        // Which task files were committed is not known: delete none of them.
        (Ok(_), Err(_)) => return r,
        _ => HashSet::new(),
    };
    for (f, _) in &keys.files {
        if !committed.contains(f.file_path()) {
            let _ = table.storage().delete(f.file_path()).await;
        }
    }
    for s in staged {
        let _ = table.storage().delete(&s.files.data_files_location).await;
        let _ = table.storage().delete(&s.keys_location).await;
    }
    r
}

/// Deletes what every `staged` upsert wrote (best effort).
pub(crate) async fn discard_staged_upserts(table: &Table, staged: &[StagedUpsert]) -> Result<()> {
    for s in staged {
        discard_staged(table, std::slice::from_ref(&s.files)).await?;
        let _ = table.storage().delete(&s.keys_location).await;
    }
    Ok(())
}

/// The tasks' key lists and data files, gathered by the driver.
pub(super) struct StagedKeys {
    /// Each task's key list, `_file` numbering `files` (one empty part when no task had
    /// rows).
    parts: Vec<Part>,
    /// Every task's data files, in task order, with their partition spec ids.
    files: Vec<(DataFile, i32)>,
    input_rows: u64,
    /// The tasks' distinct keys and ignored changes (counted by shards of an engine that
    /// folds rows, whose key lists hold only the changed keys).
    keys: u64,
    ignored: u64,
    /// The table state shards of an engine that folds rows were merged with: their rows
    /// are final and commit onto that state only.
    merged_onto: Option<MergedOnto>,
    /// The task files the last planning committed (as they are).
    committed: Mutex<HashSet<String>>,
}

impl StagedKeys {
    async fn load(table: &Table, staged: &[StagedUpsert]) -> Result<Self> {
        let merged_onto = staged.first().and_then(|s| s.merged_onto);
        if let Some(s) = staged.iter().find(|s| s.merged_onto != merged_onto) {
            // A commit landed while the shards were merged: merge them again.
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                "staged upsert '{}' of table {} was merged onto another state of the table than \
                 the first ({:?} vs {:?}); nothing was committed: merge the shards again",
                s.keys_location,
                table.name(),
                s.merged_onto,
                merged_onto
            ),
            ));
        }
        let mut parts = Vec::with_capacity(staged.len());
        let mut files = Vec::new();
        let mut schema: Option<SchemaRef> = None;
        for (t, s) in staged.iter().enumerate() {
            let offset = files.len() as u32;
            let task_files = crate::txn::staged_data_files(table, &s.files).await?;
            files.extend(task_files.into_iter().map(|f| (f, s.files.spec_id)));
            let batches = get_parquet(table, &s.keys_location, "staged key list").await?;
            let bad = |e: &dyn std::fmt::Display| {
                Error::corrupt(format!("staged key list '{}': {e}", s.keys_location))
            };
            let this = match (&schema, batches.first()) {
                (Some(s), _) => s.clone(),
                (None, Some(b)) => b.schema(),
                (None, None) => continue,
            };
            let batch = arrow_select::concat::concat_batches(&this, &batches).map_err(|_| {
                bad(&"its columns differ from the other tasks' (was the table changed between tasks?)")
            })?;
            let batch = offset_files(batch, offset, files.len()).map_err(|e| bad(&e))?;
            schema = Some(this);
            parts.push(Part {
                source: format!("task {} ('{}')", t + 1, s.keys_location),
                first_row: 1,
                batch,
            });
        }
        if parts.is_empty() {
            // No task had rows: an empty batch (which still records a checkpoint).
            let spec = KeyedSpec::of(table.metadata(), &table.name())?;
            let schema = table.arrow_schema()?;
            let cols = Columns::of(&spec, &schema)?;
            parts.push(Part {
                source: "the batch".into(),
                first_row: 1,
                batch: RecordBatch::new_empty(key_list_schema(&schema, &cols, &spec, table)?),
            });
        }
        Ok(Self {
            parts,
            files,
            input_rows: staged.iter().map(|s| s.input_rows).sum(),
            keys: staged.iter().map(|s| s.keys).sum(),
            ignored: staged.iter().map(|s| s.ignored).sum(),
            merged_onto,
            committed: Mutex::new(HashSet::new()),
        })
    }

    /// The tasks' keys folded against `table`'s keyed spec.
    fn prepare(&self, table: &Table, spec: KeyedSpec) -> Result<Prepared> {
        let parts = &self.parts;
        let schema = parts[0].batch.schema();
        let cols = Columns::of(&spec, &schema).map_err(|e| {
            e.context("the staged key lists do not name the table's key columns (was the table changed after the tasks ran?)")
        })?;
        let conv = key_converter(&schema, &cols.key)?;
        let folded = match self.merged_onto {
            None => fold::fold(&spec, &schema, &[], parts)?,
            Some(_) => merged_keys(table, &schema, &cols, &conv, parts)?,
        };
        let rows = key_rows(&conv, &folded.rows, &cols.key)?;
        Ok(Prepared {
            spec,
            write_table: table.clone(),
            new_schema: None,
            added_columns: vec![],
            key_fields: key_fields(&schema, &cols),
            cols,
            conv,
            folded,
            rows,
        })
    }

    /// The task files to commit for the kept folded rows `upserts`: those whose every row is
    /// kept (as they are, with their partition spec ids), and the others' kept rows rewritten (new files, and their paths
    /// to delete if the commit fails). A file with no row kept is left out.
    async fn kept_files(
        &self,
        table: &Table,
        prep: &Prepared,
        upserts: &[u32],
    ) -> Result<(Vec<(i32, DataFile)>, Vec<DataFile>, Vec<String>)> {
        let rows = &prep.folded.rows;
        let (file, pos) = (position_columns(rows)?, rows.schema().index_of(POS)?);
        let pos = rows
            .column(pos)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| Error::corrupt("the staged key lists' _pos column is not a long"))?;
        let mut kept: HashMap<u32, RoaringTreemap> = HashMap::new();
        for &r in upserts {
            let r = r as usize;
            if file.is_null(r) || pos.is_null(r) {
                return Err(Error::corrupt(format!(
                    "a staged upsert of table {} has no data file row",
                    table.name()
                )));
            }
            kept.entry(file.value(r))
                .or_default()
                .insert(pos.value(r) as u64);
        }
        let (mut as_is, mut partial) = (Vec::new(), Vec::new());
        for (i, (f, spec_id)) in self.files.iter().enumerate() {
            match kept.remove(&(i as u32)) {
                Some(k) if k.len() == f.record_count() => as_is.push((*spec_id, f.clone())),
                Some(k) => partial.push((planned(table, f, *spec_id)?, k)),
                None => {}
            }
        }
        if partial.is_empty() {
            return Ok((as_is, vec![], vec![]));
        }
        let mut w = DataWriter::new(table)?;
        for (f, keep) in partial {
            let r = keep_rows(table, f, &keep, &mut w).await;
            if let Err(e) = r {
                w.abort(table.storage()).await;
                return Err(e);
            }
        }
        let rewritten = w.close().await?;
        let written = rewritten
            .iter()
            .map(|f| f.file_path().to_string())
            .collect();
        Ok((as_is, rewritten, written))
    }
}

impl Planned for StagedKeys {
    fn replans(&self) -> bool {
        // Rows merged onto one state of the table are not planned again onto another.
        self.merged_onto.is_none()
    }

    async fn apply_once(
        &self,
        catalog: &Catalog,
        table: &Table,
        _options: &UpsertOptions,
        sink: Option<(&str, i64)>,
        _held: Option<&mut Held>,
    ) -> Result<UpsertResult> {
        let committed = match sink {
            Some((s, _)) => committed_checkpoint(table, s)?,
            None => None,
        };
        let mut result = UpsertResult::nothing(table, self.input_rows, committed);
        if let (Some((_, n)), Some(c)) = (sink, committed) {
            if n <= c {
                result.already_committed = true;
                return Ok(result);
            }
        }
        let spec = KeyedSpec::of(table.metadata(), &table.name())?;
        if (spec.engine == MergeEngine::Replace) == self.merged_onto.is_some() {
            return Err(Error::unsupported(format!(
                "table {} now uses merge engine '{}'; the staged upsert folded by {} and was \
                 not committed",
                table.name(),
                spec.engine.name(),
                match self.merged_onto {
                    Some(_) => "an engine that folds rows",
                    None => "the replace engine",
                }
            )));
        }
        if let Some(onto) = self.merged_onto {
            let now = table.metadata().current_snapshot_id();
            if now != onto.snapshot_id {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "table {} changed (snapshot {now:?}) since the staged shards were merged with \
                         its stored rows (snapshot {:?}); nothing was committed: merge the shards again",
                        table.name(),
                        onto.snapshot_id
                    ),
                ));
            }
        }
        let prep = self.prepare(table, spec)?;
        result.keys = match self.merged_onto {
            Some(_) => self.keys,
            None => prep.folded.rows.num_rows() as u64,
        };
        let list = TombstoneList::of(table.metadata(), &table.name())?;
        let mut decided = decide_by_scan(table, &prep, &list, false).await?;
        let kept = match self
            .kept_files(table, &prep, &decided.settled.upserts)
            .await
        {
            Ok(k) => k,
            Err(e) => {
                decided.staged.abort(table).await;
                return Err(e);
            }
        };
        let (as_is, rewritten, written) = kept;
        let as_is_paths: HashSet<String> = as_is
            .iter()
            .map(|(_, f)| f.file_path().to_string())
            .collect();
        let spec = table.metadata().default_partition_spec_id();
        decided.staged.add_data_files(
            as_is
                .into_iter()
                .chain(rewritten.into_iter().map(|f| (spec, f))),
            written,
        );
        let (extras, bytes) =
            match commit_extras(table, &prep, &list, &decided.tombstones, sink).await {
                Ok(x) => x,
                Err(e) => {
                    decided.staged.abort(table).await;
                    return Err(e);
                }
            };
        result.count(decided.settled.counts);
        result.ignored += self.ignored;
        result.tombstone_records = decided.settled.tombstones.len() as u64;
        result.written_bytes += bytes;
        if let Ok(mut k) = self.committed.lock() {
            *k = as_is_paths;
        }
        result.committed(decided.staged.commit(catalog, table, extras).await?, sink);
        Ok(result)
    }
}

/// The key lists of shards merged with the stored rows: every key once (shards hold
/// disjoint keys), a row without a data file (`_file` null) deleting its key; versions are
/// not compared again (the shards' merge took them into account).
fn merged_keys(
    table: &Table,
    schema: &SchemaRef,
    cols: &Columns,
    conv: &arrow::row::RowConverter,
    parts: &[Part],
) -> Result<fold::Folded> {
    let rows = arrow_select::concat::concat_batches(schema, parts.iter().map(|p| &p.batch))?;
    let keys = key_rows(conv, &rows, &cols.key)?;
    if fold::latest_rows(&keys, None).len() != rows.num_rows() {
        return Err(Error::corrupt(format!(
            "the staged shards of an upsert of table {} hold a key more than once (a key must \
             be merged by one shard); nothing was committed",
            table.name()
        )));
    }
    let file = position_columns(&rows)?;
    let deleted: BooleanArray = (0..rows.num_rows())
        .map(|r| Some(file.is_null(r)))
        .collect();
    Ok(fold::Folded {
        rows,
        versions: None,
        deleted,
    })
}

/// The `_file` column of the folded key lists.
fn position_columns(rows: &RecordBatch) -> Result<&UInt32Array> {
    let i = rows.schema().index_of(FILE)?;
    rows.column(i)
        .as_any()
        .downcast_ref::<UInt32Array>()
        .ok_or_else(|| Error::corrupt("the staged key lists' _file column is not an unsigned int"))
}

/// `batch` (one task's key list) with `_file` numbering every task's files (`offset` added),
/// checked to be below `files`.
fn offset_files(batch: RecordBatch, offset: u32, files: usize) -> Result<RecordBatch> {
    let i = batch.schema().index_of(FILE)?;
    let col = position_columns(&batch)?;
    let moved: UInt32Array = col.iter().map(|v| v.map(|v| v + offset)).collect();
    if moved.iter().flatten().any(|v| v as usize >= files) {
        return Err(Error::corrupt(
            "a row names a data file the task did not stage",
        ));
    }
    let mut cols = batch.columns().to_vec();
    cols[i] = Arc::new(moved);
    Ok(RecordBatch::try_new(batch.schema(), cols)?)
}

/// Writes the rows of staged file `f` at positions `keep` through `w`.
async fn keep_rows(
    table: &Table,
    f: PlannedFile,
    keep: &RoaringTreemap,
    w: &mut DataWriter,
) -> Result<()> {
    let path = f.file.file_path().to_string();
    let plan = Scan::plan_of_files(table, vec![f])?;
    let mut rows = Scan::new(table).read_positioned(plan, true)?;
    while let Some(r) = futures::StreamExt::next(&mut rows).await {
        let (b, positions) = r?.1;
        let positions = positions.ok_or_else(|| {
            Error::corrupt(format!(
                "staged file '{path}' was read without row positions"
            ))
        })?;
        let mask: BooleanArray = positions
            .values()
            .iter()
            .map(|&p| Some(keep.contains(p)))
            .collect();
        let b = arrow_select::filter::filter_record_batch(&b, &mask)?;
        if b.num_rows() > 0 {
            w.write(b).await?;
        }
    }
    Ok(())
}

/// Staged data file `f` (written with partition spec `spec_id`) as a file to read.
fn planned(table: &Table, f: &DataFile, spec_id: i32) -> Result<PlannedFile> {
    let spec = table
        .metadata()
        .partition_spec_by_id(spec_id)
        .cloned()
        .ok_or_else(|| {
            Error::corrupt(format!(
                "staged file '{}' names partition spec {spec_id}, which table {} does not have",
                f.file_path(),
                table.name()
            ))
        })?;
    Ok(PlannedFile {
        file: f.clone(),
        spec,
        partition: f.partition().clone(),
        sequence_number: 0,
        deletes: vec![],
        first_row_id: None,
    })
}
