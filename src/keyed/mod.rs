//! Keyed tables and the CDC sink: batches of upserts and deletes keyed by the table's primary
//! key (its identifier fields), merged by the ReplacingMergeTree rule.
//!
//! * Per key the highest version (`floe.merge.version-column`) wins; on equal versions the
//!   later arrival (later part of the batch, then later row). Without a version column the
//!   later arrival always wins; without a delete column (`floe.merge.delete-column`, 0/1 or
//!   boolean) nothing is deleted.
//! * A batch is folded by that rule first, then each winning change is compared with its
//!   key's live row and tombstone: it applies when its version is at least the stored one.
//!   A replaced or deleted row is removed as `write.merge.mode` says (deletion vectors in v3,
//!   position deletes in v2, or rewritten files), never left for readers to resolve.
//! * A winning delete leaves a tombstone (key, version, when) in the table's tombstone files
//!   ([`tombstones`]), committed in the same metadata swap as the snapshot; older replays of
//!   the key are then ignored until [`expire_tombstones`] removes it.
//! * Exactly-once: with a sink id and a checkpoint, the checkpoint is recorded in the
//!   snapshot summary and in the table property `floe.sink.<id>.checkpoint`; a checkpoint at
//!   or below the committed one is a no-op.
//! * A batch is planned against one state of the table and committed only onto that state:
//!   a concurrent commit makes it plan again (lookups and rules redone) within
//!   `commit.retry.*`, so the result is the batches applied one after the other.
//!
//! Finding the stored rows: the files are pruned by the batch's key range (or key set, for
//! small batches) against manifest bounds, then only the key and version columns of the
//! remaining files are read, with their deletes applied.

mod changer;
/// Debezium JSON change events as keyed changes.
pub mod debezium;
mod fold;
mod index;
mod tombstones;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow_schema::FieldRef;
use iceberg::expr::{Predicate, Reference};

use crate::catalog::Catalog;
use crate::dml::{stage, stage_known, CommitExtras, RowLevelKind};
use crate::error::{Error, ErrorKind, Result};
use crate::spec::keyed::{
    check_sink_id, sink_checkpoint_key, KeyedSpec, TombstoneList, TOMBSTONES,
};
use crate::spec::{Datum, NestedField, Schema, TableIdent, Type};
use crate::table::Table;
use crate::txn::{commit_properties, PropertyUpdate};
use crate::write::Conformer;

use changer::KeyedChanger;
use fold::{key_converter, key_rows, Columns, Part};
use index::{KeyIndex, Keys};

/// Key sets up to this size prune files by membership, larger ones by their range.
const IN_LIST_LIMIT: usize = 200;

/// One batch of changes, its parts in arrival order (each part's rows in arrival order).
#[derive(Debug, Clone, Default)]
pub struct ChangeBatch {
    parts: Vec<(String, RecordBatch)>,
}

impl ChangeBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rows in arrival order, without a source name (messages say `batch N`).
    pub fn from_batches(batches: impl IntoIterator<Item = RecordBatch>) -> Self {
        let mut b = Self::new();
        for (i, r) in batches.into_iter().enumerate() {
            b.push(format!("batch {}", i + 1), r);
        }
        b
    }

    /// Appends rows that came from `source` (a file name, for messages; consecutive parts
    /// of one source number their rows on from each other).
    pub fn push(&mut self, source: impl Into<String>, rows: RecordBatch) -> &mut Self {
        self.parts.push((source.into(), rows));
        self
    }

    /// Rows in the batch.
    pub fn num_rows(&self) -> usize {
        self.parts.iter().map(|(_, b)| b.num_rows()).sum()
    }
}

/// How a batch is applied.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct UpsertOptions {
    /// The sink whose checkpoint the batch carries.
    pub sink_id: Option<String>,
    /// The batch's checkpoint (needs `sink_id`).
    pub checkpoint: Option<i64>,
    /// Columns the table does not have are added as optional columns (else refused).
    pub evolve_schema: bool,
}

impl UpsertOptions {
    /// Records `checkpoint` for sink `sink_id` (a checkpoint at or below the committed one
    /// makes the batch a no-op).
    pub fn with_checkpoint(mut self, sink_id: impl Into<String>, checkpoint: i64) -> Self {
        self.sink_id = Some(sink_id.into());
        self.checkpoint = Some(checkpoint);
        self
    }

    /// Adds the batch's new columns to the table instead of refusing them.
    pub fn with_evolve_schema(mut self, evolve: bool) -> Self {
        self.evolve_schema = evolve;
        self
    }
}

/// What applying a batch did.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct UpsertResult {
    /// The table after the batch.
    #[serde(skip)]
    pub table: Table,
    /// The snapshot committed (`None`: nothing changed).
    pub snapshot_id: Option<i64>,
    /// The checkpoint was already committed: nothing was done.
    pub already_committed: bool,
    /// The sink's committed checkpoint after the batch.
    pub committed_checkpoint: Option<i64>,
    /// Rows in the batch.
    pub input_rows: u64,
    /// Distinct keys in the batch (its winning changes).
    pub keys: u64,
    /// Keys inserted.
    pub inserted: u64,
    /// Keys whose row was replaced.
    pub updated: u64,
    /// Keys whose row was deleted.
    pub deleted: u64,
    /// Deletes of keys without a live row (they leave a tombstone all the same).
    pub deleted_absent: u64,
    /// Changes ignored: the stored version or tombstone is higher.
    pub ignored: u64,
    /// Tombstone records added (deletes, and re-inserts that clear a tombstone).
    pub tombstone_records: u64,
    /// Data files and delete files added, and their bytes.
    pub added_data_files: usize,
    /// Delete files added.
    pub added_delete_files: usize,
    /// Bytes of every added file (tombstone files included).
    pub written_bytes: u64,
    /// Columns added by schema evolution.
    pub added_columns: Vec<String>,
    /// Times the batch was planned (more than 1 after concurrent commits).
    pub attempts: u32,
    /// How the stored rows were found: `scan` (the key and version columns of the files
    /// the batch's key range may hit), `index` (a [`KeyedWriter`]'s key index), or
    /// `index-built` (the index was built or rebuilt first).
    pub lookup: &'static str,
}

/// Applies one batch of changes to the keyed table `ident` (see the module docs for the
/// rules). Bad input (a null key or version, a bad delete flag, an unknown column) is
/// refused naming the source, row and column, and nothing is committed.
///
/// # Example
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # use std::sync::Arc;
/// # use arrow_array::{Int32Array, Int64Array, RecordBatch, StringArray};
/// # let dir = tempfile::tempdir()?;
/// # let cat = floe::Catalog::open(None, dir.path().join("wh").to_str(), None)?;
/// let ident = floe::table::parse_ident("db.users")?;
/// let schema = floe::spec::parse_schema("id long not null, plan string, ver long, del int")?;
/// let creation = floe::TableCreation::new(schema)
///     .with_primary_key(&["id".to_string()])
///     .with_property("floe.merge.version-column", "ver")
///     .with_property("floe.merge.delete-column", "del");
/// cat.create_table(&ident, creation).await?;
/// let rows = |id: Vec<i64>, ver: Vec<i64>, del: Vec<i32>| -> floe::Result<RecordBatch> {
///     let plan = StringArray::from(vec!["pro"; id.len()]);
///     Ok(RecordBatch::try_from_iter([
///         ("id", Arc::new(Int64Array::from(id)) as _),
///         ("plan", Arc::new(plan) as _),
///         ("ver", Arc::new(Int64Array::from(ver)) as _),
///         ("del", Arc::new(Int32Array::from(del)) as _),
///     ])?)
/// };
/// let opts = floe::keyed::UpsertOptions::default();
/// let batch = floe::keyed::ChangeBatch::from_batches([rows(vec![1, 2, 1], vec![1, 1, 2], vec![0, 0, 0])?]);
/// let r = floe::keyed::upsert(&cat, &ident, &batch, &opts).await?;
/// assert_eq!((r.inserted, r.keys), (2, 2));
/// // Key 2 deleted at version 5; a late replay of version 3 is ignored.
/// let batch = floe::keyed::ChangeBatch::from_batches([rows(vec![2], vec![5], vec![1])?]);
/// assert_eq!(floe::keyed::upsert(&cat, &ident, &batch, &opts).await?.deleted, 1);
/// let batch = floe::keyed::ChangeBatch::from_batches([rows(vec![2], vec![3], vec![0])?]);
/// assert_eq!(floe::keyed::upsert(&cat, &ident, &batch, &opts).await?.ignored, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn upsert(
    catalog: &Catalog,
    ident: &TableIdent,
    changes: &ChangeBatch,
    options: &UpsertOptions,
) -> Result<UpsertResult> {
    apply_with_retries(catalog, ident, changes, options, None).await
}

/// The sink and checkpoint of `options`, checked.
fn sink_of(options: &UpsertOptions) -> Result<Option<(&str, i64)>> {
    match (&options.sink_id, options.checkpoint) {
        (Some(s), Some(n)) => {
            check_sink_id(s)?;
            Ok(Some((s.as_str(), n)))
        }
        (None, Some(_)) => Err(Error::invalid(
            "a checkpoint needs the sink id it belongs to (each sink counts its own checkpoints)",
        )),
        (Some(s), None) => {
            check_sink_id(s)?;
            Ok(None)
        }
        (None, None) => Ok(None),
    }
}

/// Plans and commits the batch, planning again after each conflict within `commit.retry.*`.
/// With `index`, stored rows are found through the key index it holds (built or rebuilt when
/// it does not reflect the table); it is left holding the index of the committed state.
async fn apply_with_retries(
    catalog: &Catalog,
    ident: &TableIdent,
    changes: &ChangeBatch,
    options: &UpsertOptions,
    mut index: Option<&mut Option<KeyIndex>>,
) -> Result<UpsertResult> {
    let sink = sink_of(options)?;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let table = catalog.load_table(ident).await?;
        let r = apply_once(
            catalog,
            &table,
            changes,
            options,
            sink,
            index.as_deref_mut(),
        )
        .await;
        match r {
            Ok(mut r) => {
                r.attempts = attempt;
                return Ok(r);
            }
            Err(e) => {
                if let Some(i) = index.as_deref_mut() {
                    *i = None;
                }
                if e.kind() != ErrorKind::Conflict {
                    return Err(e);
                }
                let props = table.properties()?;
                if attempt > props.commit_num_retries {
                    return Err(e.context(format!(
                        "the batch was planned {attempt} times against table {} and each time another \
                         commit came first (commit.retry.num-retries={}); nothing was committed",
                        table.name(),
                        props.commit_num_retries
                    )));
                }
                let wait = props
                    .commit_min_wait_ms
                    .saturating_mul(1 << (attempt - 1).min(10))
                    .min(props.commit_max_wait_ms);
                let jitter = rand::random::<u64>() % (wait / 2 + 1);
                tokio::time::sleep(Duration::from_millis(wait / 2 + jitter)).await;
            }
        }
    }
}

/// A keyed table's writer: applies batches with the same options (a sink's checkpoints).
///
/// It keeps an in-memory index of the table's keys (key → data file, position, version;
/// tombstones) between batches, so a batch costs lookups of its own keys; the index is built
/// by the first batch (one read of the key and version columns) and again whenever someone
/// else changed the table. Memory: about 40 bytes per live key (single integer keys; more for
/// other keys). Clones share the index.
#[derive(Debug, Clone)]
pub struct KeyedWriter {
    catalog: Catalog,
    ident: TableIdent,
    sink_id: Option<String>,
    evolve_schema: bool,
    index: Arc<tokio::sync::Mutex<Option<KeyIndex>>>,
}

/// The CDC sink is a [`KeyedWriter`] with a sink id.
pub type CdcSink = KeyedWriter;

impl KeyedWriter {
    /// A writer of `ident` through `catalog`.
    pub fn new(catalog: &Catalog, ident: TableIdent) -> Self {
        Self {
            catalog: catalog.clone(),
            ident,
            sink_id: None,
            evolve_schema: false,
            index: Arc::new(tokio::sync::Mutex::new(None)),
        }
    }

    /// Batches carry checkpoints of sink `id`.
    pub fn with_sink_id(mut self, id: impl Into<String>) -> Self {
        self.sink_id = Some(id.into());
        self
    }

    /// New columns are added to the table instead of refused.
    pub fn with_evolve_schema(mut self, evolve: bool) -> Self {
        self.evolve_schema = evolve;
        self
    }

    /// Applies `batches` (in arrival order) as one batch, with an optional checkpoint.
    pub async fn apply(
        &self,
        batches: impl IntoIterator<Item = RecordBatch>,
        checkpoint: Option<i64>,
    ) -> Result<UpsertResult> {
        let options = UpsertOptions {
            sink_id: self.sink_id.clone(),
            checkpoint,
            evolve_schema: self.evolve_schema,
        };
        let changes = ChangeBatch::from_batches(batches);
        let mut index = self.index.lock().await;
        apply_with_retries(
            &self.catalog,
            &self.ident,
            &changes,
            &options,
            Some(&mut *index),
        )
        .await
    }

    /// The checkpoint committed for this writer's sink.
    pub async fn committed_checkpoint(&self) -> Result<Option<i64>> {
        let Some(s) = &self.sink_id else {
            return Ok(None);
        };
        let t = self.catalog.load_table(&self.ident).await?;
        committed_checkpoint(&t, s)
    }
}

/// The last checkpoint committed to `table` for sink `sink`: the table property, else the
/// newest snapshot summary on `main` that carries one.
pub fn committed_checkpoint(table: &Table, sink: &str) -> Result<Option<i64>> {
    let key = sink_checkpoint_key(sink);
    let parse = |v: &String| {
        v.parse::<i64>().map_err(|_| {
            Error::corrupt(format!("table {}: {key}={v} is not a number", table.name()))
        })
    };
    if let Some(v) = table.metadata().properties().get(&key) {
        return parse(v).map(Some);
    }
    let md = table.metadata();
    let mut cur = md.current_snapshot();
    while let Some(s) = cur {
        if let Some(v) = s.summary().additional_properties.get(&key) {
            return parse(v).map(Some);
        }
        cur = s.parent_snapshot_id().and_then(|p| md.snapshot_by_id(p));
    }
    Ok(None)
}

/// The Arrow fields of the key columns.
fn key_fields(schema: &arrow_schema::SchemaRef, cols: &Columns) -> Vec<FieldRef> {
    cols.key
        .iter()
        .map(|&i| schema.fields()[i].clone())
        .collect()
}

/// A batch conformed and folded against one state of the table.
struct Prepared {
    spec: KeyedSpec,
    /// The table written with (evolved when the batch adds columns) and its schema change.
    write_table: Table,
    new_schema: Option<(i32, Schema)>,
    added_columns: Vec<String>,
    cols: Columns,
    /// The key columns' fields and their row encoding.
    key_fields: Vec<FieldRef>,
    conv: arrow::row::RowConverter,
    folded: fold::Folded,
    /// The folded keys, encoded; and encoded key → folded row.
    rows: arrow::row::Rows,
    position: HashMap<Box<[u8]>, u32>,
}

/// Conforms the batch to `table` (evolving its schema if allowed) and folds it.
fn prepare(table: &Table, changes: &ChangeBatch, options: &UpsertOptions) -> Result<Prepared> {
    let name = table.name();
    let spec = KeyedSpec::of(table.metadata(), &name)?;
    let (write_table, new_schema, added_columns) = evolve(table, changes, options.evolve_schema)?;
    let strict = write_table.arrow_schema()?;
    // Non-key columns may be null in deletes (a Debezium `before` often holds only the key):
    // required columns are checked on the upserts by the fold.
    let conformer = Conformer::new(
        &relaxed(write_table.metadata().current_schema(), &spec)?,
        &name,
    )?;
    let mut next_row: HashMap<&str, u64> = HashMap::new();
    let mut parts = Vec::with_capacity(changes.parts.len());
    for (source, b) in &changes.parts {
        let first = next_row.entry(source.as_str()).or_insert(1);
        let conformed = conformer
            .conform_from(b, source, *first)
            .map_err(|e| e.context(source))?;
        parts.push(Part {
            source: source.clone(),
            first_row: *first,
            batch: conformed,
        });
        *first += b.num_rows() as u64;
    }
    let schema = conformer.schema().clone();
    if parts.is_empty() {
        parts.push(Part {
            source: "the batch".into(),
            first_row: 1,
            batch: RecordBatch::new_empty(schema.clone()),
        });
    }
    let cols = Columns::of(&spec, &schema)?;
    let required: Vec<usize> = strict
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.is_nullable())
        .map(|(i, _)| i)
        .collect();
    let folded = fold::fold(&spec, &schema, &required, &parts)?;
    let key_fields = key_fields(&schema, &cols);
    let conv = key_converter(&schema, &cols.key)?;
    let rows = key_rows(&conv, &folded.rows, &cols.key)?;
    let mut position: HashMap<Box<[u8]>, u32> = HashMap::with_capacity(rows.num_rows());
    for r in 0..rows.num_rows() {
        position.insert(rows.row(r).as_ref().into(), r as u32);
    }
    Ok(Prepared {
        spec,
        write_table,
        new_schema,
        added_columns,
        cols,
        key_fields,
        conv,
        folded,
        rows,
        position,
    })
}

/// One planning of the batch against `table`, committed only onto `table`. With `index`
/// (a [`KeyedWriter`]'s), stored rows are found by key lookups.
async fn apply_once(
    catalog: &Catalog,
    table: &Table,
    changes: &ChangeBatch,
    options: &UpsertOptions,
    sink: Option<(&str, i64)>,
    mut index: Option<&mut Option<KeyIndex>>,
) -> Result<UpsertResult> {
    let name = table.name();
    let committed = match sink {
        Some((s, _)) => committed_checkpoint(table, s)?,
        None => None,
    };
    let mut result = UpsertResult {
        table: table.clone(),
        snapshot_id: None,
        already_committed: false,
        committed_checkpoint: committed,
        input_rows: changes.num_rows() as u64,
        keys: 0,
        inserted: 0,
        updated: 0,
        deleted: 0,
        deleted_absent: 0,
        ignored: 0,
        tombstone_records: 0,
        added_data_files: 0,
        added_delete_files: 0,
        written_bytes: 0,
        added_columns: vec![],
        attempts: 1,
        lookup: "scan",
    };
    if let (Some((_, n)), Some(c)) = (sink, committed) {
        if n <= c {
            result.already_committed = true;
            return Ok(result);
        }
    }
    let prep = prepare(table, changes, options)?;
    result.added_columns = prep.added_columns.clone();
    result.keys = prep.folded.rows.num_rows() as u64;
    let list = TombstoneList::of(table.metadata(), &name)?;
    let new_changer =
        |tombstone_of: Vec<Option<i64>>, folded: fold::Folded| -> Result<KeyedChanger> {
            Ok(KeyedChanger::new(
                &prep.spec.key,
                prep.spec.version.as_ref(),
                key_converter(&prep.write_table.arrow_schema()?, &prep.cols.key)?,
                folded,
                prep.position.clone(),
                tombstone_of,
                name.clone(),
            ))
        };
    // Step 1: find the stored rows of the batch's keys and decide every change.
    let mut replaced: Vec<usize> = Vec::new();
    let (mut changer, staged) = match index.as_deref_mut() {
        Some(slot) => {
            let idx = match slot.take() {
                Some(i) if i.is_current(table) => {
                    result.lookup = "index";
                    i
                }
                _ => {
                    result.lookup = "index-built";
                    let schema = table.arrow_schema()?;
                    let cols = Columns::of(&prep.spec, &schema)?;
                    KeyIndex::build(table, &prep.spec, &cols, &schema, &prep.conv).await?
                }
            };
            let key_cols: Vec<ArrayRef> = prep
                .cols
                .key
                .iter()
                .map(|&i| prep.folded.rows.column(i).clone())
                .collect();
            let keys = Keys::of(&idx, &key_cols, &prep.rows)?;
            let n = prep.folded.rows.num_rows();
            let found: Vec<_> = (0..n).map(|r| idx.lookup(&keys, &prep.rows, r)).collect();
            let mut changer =
                new_changer(found.iter().map(|f| f.1).collect(), prep.folded.clone())?;
            let mut at = Vec::new();
            for (r, (live, _)) in found.iter().enumerate() {
                if let Some((file, pos, version)) = live {
                    if changer.observe(r, *version)? {
                        at.push((*file, *pos));
                        replaced.push(r);
                    }
                }
            }
            let rows = crate::dml::RowChanger::finish(&mut changer)?;
            let removals = idx.removals(&at);
            *slot = Some(idx);
            let staged =
                stage_known(&prep.write_table, RowLevelKind::Merge, removals, rows).await?;
            (changer, staged)
        }
        None => {
            let stones = tombstones::load(
                table,
                &list,
                &prep.key_fields,
                &prep.conv,
                Some(&prep.position.keys().cloned().collect()),
            )
            .await?;
            let tombstone_of: Vec<Option<i64>> = (0..prep.rows.num_rows())
                .map(|r| {
                    stones
                        .records
                        .get(prep.rows.row(r).as_ref())
                        .filter(|t| t.deleted)
                        .map(|t| t.version)
                })
                .collect();
            let mut changer = new_changer(tombstone_of, prep.folded.clone())?;
            let filter = key_filter(&prep.spec.key[0], prep.folded.rows.column(prep.cols.key[0]));
            let staged =
                stage(&prep.write_table, RowLevelKind::Merge, filter, &mut changer).await?;
            (changer, staged)
        }
    };
    let settled = changer.settled.take().unwrap_or_default();
    let folded = changer.folded();
    let c = settled.counts;
    (result.inserted, result.updated, result.deleted) = (c.inserted, c.updated, c.deleted);
    (result.deleted_absent, result.ignored) = (c.deleted_absent, c.ignored);
    result.tombstone_records = settled.tombstones.len() as u64;
    // Step 2: the tombstone records, as one new file of the list.
    let mut extras = CommitExtras {
        no_concurrent_commit: true,
        ..CommitExtras::default()
    };
    let now = chrono::Utc::now().timestamp_millis();
    let tombstone_versions: Vec<i64> = match &folded.versions {
        Some(v) => settled
            .tombstones
            .iter()
            .map(|t| v.value(t.0 as usize))
            .collect(),
        None => vec![],
    };
    let new_file = if settled.tombstones.is_empty() {
        None
    } else {
        let idx =
            arrow_array::UInt32Array::from_iter_values(settled.tombstones.iter().map(|t| t.0));
        let key_cols = prep
            .cols
            .key
            .iter()
            .map(|&i| arrow_select::take::take(folded.rows.column(i), &idx, None))
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
        let written = tombstones::write(
            table,
            &prep.key_fields,
            key_cols,
            Int64Array::from(tombstone_versions.clone()),
            Int64Array::from(vec![now; idx.len()]),
            BooleanArray::from_iter(settled.tombstones.iter().map(|t| Some(t.1))),
        )
        .await;
        match written {
            Ok(f) => Some(f),
            Err(e) => {
                staged.abort(table).await;
                return Err(e);
            }
        }
    };
    if new_file.is_some() {
        let merged =
            tombstones::with_file(table, &list, new_file, &prep.key_fields, &prep.conv).await;
        let (next, written) = match merged {
            Ok(m) => m,
            Err(e) => {
                staged.abort(table).await;
                return Err(e);
            }
        };
        result.written_bytes += next
            .files
            .iter()
            .filter(|f| written.contains(&f.path))
            .map(|f| f.file_size_in_bytes)
            .sum::<u64>();
        extras.written = written;
        extras.properties.push(PropertyUpdate {
            key: TOMBSTONES.to_string(),
            expected: table.metadata().properties().get(TOMBSTONES).cloned(),
            value: (!next.files.is_empty()).then(|| next.to_property()),
        });
    } else if table.metadata().properties().contains_key(TOMBSTONES) {
        // Unchanged, but a concurrent change to it must still be seen.
        let v = table.metadata().properties().get(TOMBSTONES).cloned();
        extras.properties.push(PropertyUpdate {
            key: TOMBSTONES.to_string(),
            expected: v.clone(),
            value: v,
        });
    }
    if let Some((s, n)) = sink {
        let key = sink_checkpoint_key(s);
        extras.summary.push((key.clone(), n.to_string()));
        extras.properties.push(PropertyUpdate {
            expected: table.metadata().properties().get(&key).cloned(),
            key,
            value: Some(n.to_string()),
        });
        result.committed_checkpoint = Some(n);
    }
    extras.schema = prep.new_schema.clone();
    // Step 3: commit; a key index follows the table to its new state.
    let added: Vec<String> = staged
        .added_data_files()
        .iter()
        .map(|f| f.file_path().to_string())
        .collect();
    let rewrites = staged.rewrites_files();
    let r = staged.commit(catalog, table, extras).await?;
    result.snapshot_id = r.snapshot_id;
    result.table = r.table;
    result.added_data_files = r.added_data_files;
    result.added_delete_files = r.added_delete_files;
    result.written_bytes += r.written_bytes;
    if result.snapshot_id.is_none() {
        result.committed_checkpoint = committed;
    }
    if let Some(slot) = index {
        let committed_change = result.snapshot_id.is_some();
        match slot.as_mut() {
            Some(idx) if committed_change && !rewrites => {
                let key_cols: Vec<ArrayRef> = prep
                    .cols
                    .key
                    .iter()
                    .map(|&i| prep.folded.rows.column(i).clone())
                    .collect();
                let tomb: Vec<(usize, bool, i64)> = settled
                    .tombstones
                    .iter()
                    .zip(&tombstone_versions)
                    .map(|((r, d), v)| (*r as usize, *d, *v))
                    .collect();
                let keys = Keys::of(idx, &key_cols, &prep.rows)?;
                let followed = idx
                    .apply_commit(
                        &result.table,
                        &prep.spec,
                        &prep.conv,
                        &keys,
                        &prep.rows,
                        &replaced,
                        &added,
                        &tomb,
                    )
                    .await;
                if followed.is_err() {
                    *slot = None;
                }
            }
            // Copy-on-write moved rows: the next batch rebuilds the index.
            Some(_) if committed_change => *slot = None,
            _ => {}
        }
    }
    Ok(result)
}

/// `schema` with every column but the key optional.
fn relaxed(schema: &Schema, spec: &KeyedSpec) -> Result<Schema> {
    let fields: Vec<Arc<NestedField>> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| {
            let mut f = (**f).clone();
            if !spec.key.contains(&f.name) {
                f.required = false;
            }
            Arc::new(f)
        })
        .collect();
    Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_identifier_field_ids(schema.identifier_field_ids())
        .with_fields(fields)
        .build()
        .map_err(|e| Error::invalid(format!("schema {}: {e}", schema.schema_id())))
}

/// The table to write with: `table` itself, or, when the batch has columns the table lacks
/// and `evolve` allows it, the table with those columns added as optional columns (the new
/// schema is committed with the batch). Returns the table, the schema change, and the
/// added columns.
#[allow(clippy::type_complexity)]
fn evolve(
    table: &Table,
    changes: &ChangeBatch,
    evolve: bool,
) -> Result<(Table, Option<(i32, Schema)>, Vec<String>)> {
    let current = table.metadata().current_schema();
    let mut new_fields: Vec<(String, arrow_schema::DataType, String)> = Vec::new();
    for (source, b) in &changes.parts {
        for f in b.schema().fields() {
            if current.field_by_name(f.name()).is_some()
                || new_fields.iter().any(|(n, _, _)| n == f.name())
            {
                continue;
            }
            if !evolve {
                return Err(Error::invalid(format!(
                    "{source}: column '{}' is not in the schema of table {}; add it to the table, or let the \
                     upsert evolve the schema (it is then added as an optional column)",
                    f.name(),
                    table.name()
                )));
            }
            new_fields.push((f.name().clone(), f.data_type().clone(), source.clone()));
        }
    }
    if new_fields.is_empty() {
        return Ok((table.clone(), None, vec![]));
    }
    let md = table.metadata();
    let mut next_id = md.last_column_id();
    let mut fields: Vec<Arc<NestedField>> = current.as_struct().fields().to_vec();
    let mut added = Vec::new();
    for (name, dt, source) in &new_fields {
        let one = arrow_schema::Schema::new(vec![arrow_schema::Field::new(name, dt.clone(), true)]);
        let converted = crate::spec::schema_from_arrow(&one)?;
        let ty = converted
            .as_struct()
            .fields()
            .first()
            .map(|f| (*f.field_type).clone())
            .ok_or_else(|| Error::invalid(format!("{source}: column '{name}' has no type")))?;
        if !matches!(ty, Type::Primitive(_)) {
            return Err(Error::unsupported(format!(
                "{source}: new column '{name}' is {dt}; schema evolution by upsert adds primitive columns only \
                 (add nested columns to the table first)"
            )));
        }
        next_id += 1;
        fields.push(Arc::new(NestedField::optional(next_id, name, ty)));
        added.push(name.clone());
    }
    let new_id = md.schemas_iter().map(|s| s.schema_id()).max().unwrap_or(0) + 1;
    let schema = Schema::builder()
        .with_schema_id(new_id)
        .with_identifier_field_ids(current.identifier_field_ids())
        .with_fields(fields)
        .build()
        .map_err(|e| {
            Error::invalid(format!(
                "evolving the schema of table {}: {e}",
                table.name()
            ))
        })?;
    let staged_md = iceberg::spec::TableMetadataBuilder::new_from_metadata(md.clone(), None)
        .add_current_schema(schema.clone())
        .and_then(|b| b.build())
        .map_err(|e| {
            Error::invalid(format!(
                "evolving the schema of table {}: {e}",
                table.name()
            ))
        })?
        .metadata;
    let t = Table::new(
        table.ident().clone(),
        staged_md,
        table.metadata_location().to_string(),
        table.storage().clone(),
    );
    Ok((t, Some((md.current_schema_id(), schema)), added))
}

/// A filter every row of the batch's keys passes: the first key column in the batch's key
/// set (small batches) or between its smallest and largest value (integer and string keys).
fn key_filter(column: &str, values: &ArrayRef) -> Option<Predicate> {
    let r = || Reference::new(column.to_string());
    let datums: Vec<Datum> = if let Some(a) = values.as_any().downcast_ref::<Int64Array>() {
        a.iter().flatten().map(Datum::long).collect()
    } else if let Some(a) = values.as_any().downcast_ref::<Int32Array>() {
        a.iter().flatten().map(Datum::int).collect()
    } else if let Some(a) = values.as_any().downcast_ref::<StringArray>() {
        a.iter().flatten().map(Datum::string).collect()
    } else {
        return None;
    };
    if datums.is_empty() {
        return None;
    }
    if datums.len() <= IN_LIST_LIMIT {
        return Some(r().is_in(datums));
    }
    let lo = datums
        .iter()
        .min_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal))?;
    let hi = datums
        .iter()
        .max_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal))?;
    Some(
        r().greater_than_or_equal_to(lo.clone())
            .and(r().less_than_or_equal_to(hi.clone())),
    )
}

/// A table's tombstones.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct TombstoneReport {
    /// Keys with a tombstone.
    pub count: u64,
    /// When the oldest and newest were committed (ms since the epoch).
    pub oldest_ms: Option<i64>,
    /// See `oldest_ms`.
    pub newest_ms: Option<i64>,
    /// Tombstone files.
    pub files: usize,
    /// With `list`: the keys (key columns, then `__floe_version` and
    /// `__floe_deleted_at_ms`), oldest first.
    #[serde(skip)]
    pub keys: Option<RecordBatch>,
}

/// Counts (and with `list`, lists) the tombstones of keyed table `table`.
pub async fn tombstones(table: &Table, list: bool) -> Result<TombstoneReport> {
    let name = table.name();
    let spec = KeyedSpec::of(table.metadata(), &name)?;
    let schema = table.arrow_schema()?;
    let cols = Columns::of(&spec, &schema)?;
    let keys = key_fields(&schema, &cols);
    let conv = key_converter(&schema, &cols.key)?;
    let l = TombstoneList::of(table.metadata(), &name)?;
    let all = tombstones::load(table, &l, &keys, &conv, None).await?;
    let mut live: Vec<(u32, tombstones::Record)> = all
        .records
        .iter()
        .filter(|(_, r)| r.deleted)
        .filter_map(|(k, r)| Some((*all.key_rows.get(k)?, *r)))
        .collect();
    live.sort_unstable_by_key(|(i, r)| (r.at_ms, *i));
    let batch = if list {
        let idx = arrow_array::UInt32Array::from_iter_values(live.iter().map(|(i, _)| *i));
        let mut fields: Vec<FieldRef> = keys.clone();
        let mut cols = all
            .keys
            .iter()
            .map(|k| arrow_select::take::take(k, &idx, None))
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
        fields.push(Arc::new(arrow_schema::Field::new(
            crate::spec::keyed::TOMBSTONE_VERSION,
            arrow_schema::DataType::Int64,
            false,
        )));
        fields.push(Arc::new(arrow_schema::Field::new(
            crate::spec::keyed::TOMBSTONE_DELETED_AT,
            arrow_schema::DataType::Int64,
            false,
        )));
        cols.push(Arc::new(Int64Array::from_iter_values(
            live.iter().map(|(_, r)| r.version),
        )));
        cols.push(Arc::new(Int64Array::from_iter_values(
            live.iter().map(|(_, r)| r.at_ms),
        )));
        Some(RecordBatch::try_new(
            Arc::new(arrow_schema::Schema::new(fields)),
            cols,
        )?)
    } else {
        None
    };
    Ok(TombstoneReport {
        count: live.len() as u64,
        oldest_ms: live.first().map(|(_, r)| r.at_ms),
        newest_ms: live.last().map(|(_, r)| r.at_ms),
        files: l.files.len(),
        keys: batch,
    })
}

/// What expiring tombstones did.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct ExpireTombstonesResult {
    /// Tombstones removed (or, in a dry run, that would be).
    pub removed: u64,
    /// Tombstones kept.
    pub kept: u64,
    /// Whether anything was committed.
    pub committed: bool,
}

/// Removes the tombstones of `ident` committed before `older_than_ms`. Once removed, a
/// replay of an older version of such a key brings it back: expire only what no pipeline
/// can replay any more. With `dry_run` nothing is written.
pub async fn expire_tombstones(
    catalog: &Catalog,
    ident: &TableIdent,
    older_than_ms: i64,
    dry_run: bool,
) -> Result<ExpireTombstonesResult> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let table = catalog.load_table(ident).await?;
        let report = tombstones(&table, true).await?;
        let at = report
            .keys
            .as_ref()
            .and_then(|b| {
                b.column(b.num_columns() - 1)
                    .as_primitive_opt::<arrow_array::types::Int64Type>()
                    .cloned()
            })
            .unwrap_or_else(|| Int64Array::from(Vec::<i64>::new()));
        let removed = at.iter().flatten().filter(|&t| t < older_than_ms).count() as u64;
        let out = ExpireTombstonesResult {
            removed,
            kept: report.count - removed,
            committed: false,
        };
        if dry_run || removed == 0 {
            return Ok(out);
        }
        let name = table.name();
        let spec = KeyedSpec::of(table.metadata(), &name)?;
        let schema = table.arrow_schema()?;
        let cols = Columns::of(&spec, &schema)?;
        let keys = key_fields(&schema, &cols);
        let conv = key_converter(&schema, &cols.key)?;
        let list = TombstoneList::of(table.metadata(), &name)?;
        let next =
            tombstones::rewrite(&table, &list, &keys, &conv, |r| r.at_ms >= older_than_ms).await?;
        let update = PropertyUpdate {
            key: TOMBSTONES.to_string(),
            expected: table.metadata().properties().get(TOMBSTONES).cloned(),
            value: (!next.files.is_empty()).then(|| next.to_property()),
        };
        match commit_properties(catalog, &table, &[update]).await {
            Ok(_) => {
                return Ok(ExpireTombstonesResult {
                    committed: true,
                    ..out
                })
            }
            Err(e) if e.kind() == ErrorKind::Conflict && attempt < 10 => {
                for f in &next.files {
                    let _ = table.storage().delete(&f.path).await;
                }
            }
            Err(e) => {
                if e.kind() != ErrorKind::CommitStateUnknown {
                    for f in &next.files {
                        let _ = table.storage().delete(&f.path).await;
                    }
                }
                return Err(e);
            }
        }
    }
}
