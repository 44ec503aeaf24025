//! Applying one batch: conform and fold it, find its keys' stored rows (a scan, or a key
//! index), decide every change, stage the files, commit them with the tombstones and the
//! checkpoint; plan again after a concurrent commit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, BooleanArray, Int64Array, RecordBatch};
use arrow_schema::FieldRef;

use super::batch::{ChangeBatch, UpsertOptions, UpsertResult};
use super::changer::{KeyedChanger, Settled};
use super::checkpoint::{committed_checkpoint, sink_of};
use super::evolve::{evolve, relaxed};
use super::fold::{self, key_converter, key_fields, key_filter, key_rows, Columns, KeyMap, Part};
use super::index::{KeyIndex, Keys};
use super::state::MergeState;
use super::tombstones;
use crate::catalog::Catalog;
use crate::error::{ErrorKind, Result};
use crate::spec::keyed::{sink_checkpoint_key, KeyedSpec, MergeEngine, TombstoneList, TOMBSTONES};
use crate::spec::{Schema, TableIdent};
use crate::table::Table;
use crate::txn::PropertyUpdate;
use crate::txn::{stage, stage_known, CommitExtras, RowLevelKind, Staged};
use crate::write::Conformer;

/// What a [`super::KeyedWriter`] keeps between batches: the key index (the replace engine)
/// or the current rows (engines that fold rows), each of one state of the table.
#[derive(Debug, Default)]
pub(super) struct Held {
    index: IndexSlot,
    state: Option<MergeState>,
}

impl Held {
    /// Forgets what is held, once an index still following a batch is done with (so that
    /// a rebuild does not hold two indexes at once).
    async fn clear(&mut self) {
        self.index.take().await;
        self.state = None;
    }

    /// Brings a held key index to `table`'s current state when only rows moved since it was
    /// taken (a compaction, a delete or manifest rewrite, a tombstone merge), so the next
    /// batch finds it current; forgets it when it cannot follow. What the index did.
    pub(super) async fn refresh(&mut self, table: &Table) -> Result<Refreshed> {
        let Some(idx) = self.index.take().await else {
            return Ok(Refreshed::NothingHeld);
        };
        if idx.is_current(table) {
            self.index = IndexSlot::Ready(Box::new(idx));
            return Ok(Refreshed::Current);
        }
        let spec = KeyedSpec::of(table.metadata(), &table.name())?;
        let schema = table.arrow_schema()?;
        let cols = Columns::of(&spec, &schema)?;
        let conv = key_converter(&schema, &cols.key)?;
        match idx.catch_up(table, &spec, &cols, &schema, &conv).await? {
            Some(idx) => {
                self.index = IndexSlot::Ready(Box::new(idx));
                Ok(Refreshed::CaughtUp)
            }
            None => Ok(Refreshed::Dropped),
        }
    }
}

/// What [`super::KeyedWriter::refresh`] did with the key index it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refreshed {
    /// No index is held (not yet built, or the table's engine folds rows instead).
    NothingHeld,
    /// The index already reflected the table's current state.
    Current,
    /// Only rows had moved since: the index followed them (the key and version columns of
    /// the files added since were read).
    CaughtUp,
    /// More than rows changed since: the index was dropped and the next batch builds it.
    Dropped,
}

impl Refreshed {
    /// The word for it in reports: `none`, `current`, `caught-up`, `dropped`.
    pub fn as_str(self) -> &'static str {
        match self {
            Refreshed::NothingHeld => "none",
            Refreshed::Current => "current",
            Refreshed::CaughtUp => "caught-up",
            Refreshed::Dropped => "dropped",
        }
    }
}

/// The key index between batches, following the last batch on its own task: the batch's
/// added files are read back while it commits and the next batch prepares; the index is
/// updated once the commit's outcome is known (the next batch waits for it before its
/// lookups).
#[derive(Debug, Default)]
enum IndexSlot {
    #[default]
    Empty,
    Following(tokio::task::JoinHandle<(KeyIndex, Option<Update>)>, Settle),
    /// An index of a committed state, not following a batch.
    Ready(Box<KeyIndex>),
}

/// The change a committed batch makes to the index.
struct Update(Box<dyn UpdateFn>);

/// The function an [`Update`] runs on the index.
trait UpdateFn: FnOnce(&mut KeyIndex) -> Result<()> + Send {}
impl<F: FnOnce(&mut KeyIndex) -> Result<()> + Send> UpdateFn for F {}

impl std::fmt::Debug for Update {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Update")
    }
}

/// What a followed index reflects once its task is done.
#[derive(Debug)]
enum Settle {
    /// The batch committed this table state.
    On(Box<Table>),
    /// Nothing was committed: the index is as it was, of the batch's base (the next attempt
    /// catches it up when only rows moved since, else builds it again).
    Unchanged,
    /// The index cannot follow: the next batch builds it again.
    Drop,
}

impl IndexSlot {
    /// The index, once it reflects a committed state; the slot is left empty.
    async fn take(&mut self) -> Option<KeyIndex> {
        match std::mem::take(self) {
            IndexSlot::Empty => None,
            IndexSlot::Ready(idx) => Some(*idx),
            IndexSlot::Following(task, settle) => {
                let (mut idx, update) = task.await.ok()?;
                match settle {
                    Settle::On(table) => {
                        let update = update?;
                        let apply = move || {
                            (update.0)(&mut idx)?;
                            idx.settle(&table)?;
                            Ok::<_, crate::Error>(idx)
                        };
                        tokio::task::spawn_blocking(apply).await.ok()?.ok()
                    }
                    Settle::Unchanged => Some(idx),
                    Settle::Drop => None,
                }
            }
        }
    }
}

/// A batch [`apply_with_retries`] plans against one state of the table at a time.
pub(super) trait Planned {
    /// One planning against `table`, committed only onto `table`.
    async fn apply_once(
        &self,
        catalog: &Catalog,
        table: &Table,
        options: &UpsertOptions,
        sink: Option<(&str, i64)>,
        held: Option<&mut Held>,
    ) -> Result<UpsertResult>;

    /// Whether a conflict is resolved by planning the batch again (else it is returned).
    fn replans(&self) -> bool {
        true
    }
}

impl Planned for ChangeBatch {
    async fn apply_once(
        &self,
        catalog: &Catalog,
        table: &Table,
        options: &UpsertOptions,
        sink: Option<(&str, i64)>,
        held: Option<&mut Held>,
    ) -> Result<UpsertResult> {
        apply_once(catalog, table, self, options, sink, held).await
    }
}

/// Plans and commits the batch, planning again after each conflict within `commit.retry.*`.
/// With `held`, stored rows are found through the key index or rows it holds (built or
/// rebuilt when they do not reflect the table); it is left holding those of the committed
/// state.
pub(super) async fn apply_with_retries(
    catalog: &Catalog,
    ident: &TableIdent,
    batch: &impl Planned,
    options: &UpsertOptions,
    mut held: Option<&mut Held>,
) -> Result<UpsertResult> {
    let sink = sink_of(options)?;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let table = write_target(catalog.load_table(ident).await?, options, held.is_some())?;
        let r = batch
            .apply_once(catalog, &table, options, sink, held.as_deref_mut())
            .await;
        match r {
            Ok(mut r) => {
                r.attempts = attempt;
                return Ok(r);
            }
            Err(e) => {
                if let Some(h) = held.as_deref_mut() {
                    if e.kind() == ErrorKind::Conflict {
                        // The index stays, of the lost attempt's base: the next attempt
                        // catches it up when the commit that won only moved rows.
                        h.state = None;
                    } else {
                        h.clear().await;
                    }
                }
                if e.kind() != ErrorKind::Conflict || !batch.replans() {
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

/// The table the batch writes: main, a branch, or staged with a WAP id. Tombstones and sink
/// checkpoints are table-wide state (and a writer's held index follows main), so a branch or
/// staged upsert is refused where it would read or write them.
pub(super) fn write_target(table: Table, options: &UpsertOptions, held: bool) -> Result<Table> {
    if options.branch.is_none() && options.wap_id.is_none() {
        return Ok(table);
    }
    let what = match (&options.branch, &options.wap_id) {
        (Some(b), _) => format!("to branch '{b}'"),
        (None, Some(w)) => format!("staged with WAP id '{w}'"),
        (None, None) => String::new(),
    };
    let refuse = |why: &str| {
        crate::Error::unsupported(format!(
            "an upsert {what} into table {} is not supported {why}; nothing was committed",
            table.name()
        ))
    };
    if options.sink_id.is_some() || options.checkpoint.is_some() {
        return Err(refuse(
            "with a sink checkpoint: checkpoints are recorded table-wide (write main)",
        ));
    }
    if held {
        return Err(refuse(
            "through a KeyedWriter, whose key index follows main",
        ));
    }
    let spec = KeyedSpec::of(table.metadata(), &table.name())?;
    if let Some(d) = &spec.delete {
        return Err(refuse(&format!(
            "on a table with a delete column ('{d}'): deletes leave tombstones, which are \
             table-wide"
        )));
    }
    let table = match &options.branch {
        Some(b) => table.on_branch(b)?,
        None => table,
    };
    match &options.wap_id {
        Some(w) => table.with_wap_id(w),
        None => Ok(table),
    }
}

/// A batch conformed and folded against one state of the table.
pub(super) struct Prepared {
    pub spec: KeyedSpec,
    /// The table written with (evolved when the batch adds columns) and its schema change.
    pub write_table: Table,
    pub new_schema: Option<(i32, Schema)>,
    pub added_columns: Vec<String>,
    /// The key, version and delete columns of the folded rows.
    pub cols: Columns,
    /// The key columns' fields and their row encoding.
    pub key_fields: Vec<FieldRef>,
    pub conv: arrow::row::RowConverter,
    pub folded: fold::Folded,
    /// The folded keys, encoded.
    pub rows: arrow::row::Rows,
}

impl Prepared {
    /// The folded rows' key columns.
    fn key_columns(&self) -> Vec<ArrayRef> {
        self.cols
            .key
            .iter()
            .map(|&i| self.folded.rows.column(i).clone())
            .collect()
    }
}

/// Conforms the batch to `table` (evolving its schema if allowed) and folds it.
pub(super) fn prepare(
    table: &Table,
    changes: &ChangeBatch,
    options: &UpsertOptions,
) -> Result<Prepared> {
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
        let first = next_row
            .entry(source.as_str())
            .or_insert_with(|| changes.first_row(source));
        let conformed = conformer
            .conform_from(b, source, *first)
            .map_err(|e| e.context(source))?;
        missing_rule_columns(&spec, b, &conformed, source)?;
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
    })
}

/// Refuses a batch whose source lacks a key, version or delete column (and no write-default
/// filled it): said as missing, not as a null in its first row.
fn missing_rule_columns(
    spec: &KeyedSpec,
    input: &RecordBatch,
    conformed: &RecordBatch,
    source: &str,
) -> Result<()> {
    let roles = spec
        .key
        .iter()
        .map(|k| (k, "a key column"))
        .chain(spec.version.iter().map(|v| (v, "the version column")))
        .chain(
            spec.delete
                .iter()
                .map(|d| (d, "the delete column (1 deletes the key, 0 upserts)")),
        );
    for (name, role) in roles {
        let filled = conformed
            .column_by_name(name)
            .is_some_and(|c| c.null_count() < c.len());
        if input.num_rows() > 0 && input.schema().index_of(name).is_err() && !filled {
            let have: Vec<String> = input
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            return Err(crate::Error::invalid(format!(
                "{source} has no column '{name}', {role} of the table; every change needs it \
                 (the input's columns: {})",
                have.join(", ")
            )));
        }
    }
    Ok(())
}

/// One planning of the batch against `table`, committed only onto `table`. With `index`
/// (a [`KeyedWriter`]'s), stored rows are found by key lookups.
async fn apply_once(
    catalog: &Catalog,
    table: &Table,
    changes: &ChangeBatch,
    options: &UpsertOptions,
    sink: Option<(&str, i64)>,
    held: Option<&mut Held>,
) -> Result<UpsertResult> {
    let committed = match sink {
        Some((s, _)) => committed_checkpoint(table, s)?,
        None => None,
    };
    let mut result = UpsertResult::nothing(table, changes.num_rows() as u64, committed);
    if let (Some((_, n)), Some(c)) = (sink, committed) {
        if n <= c {
            result.already_committed = true;
            return Ok(result);
        }
    }
    if KeyedSpec::of(table.metadata(), &table.name())?.engine != MergeEngine::Replace {
        let state = match held {
            Some(h) => {
                h.index.take().await;
                Some(&mut h.state)
            }
            None => None,
        };
        return apply_merge_once(catalog, table, changes, options, sink, result, state).await;
    }
    if options.pre_folded {
        return Err(crate::Error::unsupported(format!(
            "table {} uses the replace engine: pre-folded rows are for the engines that fold \
             (a distributed replace upsert stages its tasks' upserts: stage_upsert)",
            table.name()
        )));
    }
    let mut slot = held.map(|h| {
        h.state = None;
        &mut h.index
    });
    let prep = Arc::new(prepare(table, changes, options)?);
    result.added_columns = prep.added_columns.clone();
    result.keys = prep.folded.rows.num_rows() as u64;
    let list = TombstoneList::of(table.metadata(), &table.name())?;
    // The held index, once it has followed the previous batch (which it did while this
    // one was prepared).
    let mut index = match slot.as_deref_mut() {
        Some(s) => Some(s.take().await),
        None => None,
    };
    // Steps 1 and 2: find the stored rows of the batch's keys, decide every change, stage
    // its files; the tombstones, checkpoint and schema change that go with the commit.
    let (mut decided, extras) = match index.as_mut() {
        Some(slot) => decide_by_index(table, &prep, &list, sink, slot, &mut result.lookup).await?,
        None => {
            let decided = decide_by_scan(table, &prep, &list, true).await?;
            match commit_extras(table, &prep, &list, &decided.tombstones, sink).await {
                Ok(extras) => (decided, extras),
                Err(e) => {
                    decided.staged.abort(table).await;
                    return Err(e);
                }
            }
        }
    };
    let (extras, bytes) = extras;
    result.written_bytes += bytes;
    result.count(decided.settled.counts);
    result.tombstone_records = decided.settled.tombstones.len() as u64;
    // Step 3: commit. A key index follows the batch on its own task from here (the added
    // files are read back for their rows' positions, then the index is updated), through
    // the commit and the next batch's preparation; it is kept only if the commit lands.
    // Copy-on-write moved rows, so an index cannot follow it: the next batch rebuilds it.
    let added: Vec<String> = decided
        .staged
        .added_data_files()
        .map(|f| f.file_path().to_string())
        .collect();
    let followed = match index.as_mut() {
        Some(idx) if !decided.staged.rewrites_files() => idx.take(),
        _ => None,
    };
    let changes =
        !(added.is_empty() && decided.replaced.is_empty() && decided.tombstones.is_empty());
    let follow = followed.map(|idx| {
        tokio::spawn(follow(
            idx,
            table.clone(),
            prep.clone(),
            std::mem::take(&mut decided.replaced),
            added,
            std::mem::take(&mut decided.tombstones),
        ))
    });
    let r = decided.staged.commit(catalog, table, extras).await;
    if let (Some(slot), Some(task)) = (slot, follow) {
        let settle = match &r {
            Ok(r) if r.snapshot_id.is_some() => Settle::On(Box::new(r.table.clone())),
            // Rows changed without a snapshot: the index cannot tell how.
            Ok(_) if changes => Settle::Drop,
            // Nothing committed (a conflict, a failure, or an unknown outcome the next
            // attempt's catch-up sees as a foreign snapshot).
            _ => Settle::Unchanged,
        };
        *slot = IndexSlot::Following(task, settle);
    }
    result.committed(r?, sink);
    Ok(result)
}

/// A batch decided against the table and its files staged.
pub(super) struct Decided {
    pub settled: Settled,
    pub staged: Staged,
    /// Folded rows whose key's live row the change removes.
    pub replaced: Vec<usize>,
    /// The tombstone records: folded row, deletes, version.
    pub tombstones: Vec<(usize, bool, i64)>,
}

impl Decided {
    fn new(settled: Settled, staged: Staged, replaced: Vec<usize>, prep: &Prepared) -> Self {
        Self {
            tombstones: tombstone_records(&settled, prep),
            settled,
            staged,
            replaced,
        }
    }
}

/// The tombstone records of a decided batch: folded row, deletes, version (none without a
/// version column).
fn tombstone_records(settled: &Settled, prep: &Prepared) -> Vec<(usize, bool, i64)> {
    match &prep.folded.versions {
        Some(v) => settled
            .tombstones
            .iter()
            .map(|&(r, d)| (r as usize, d, v.value(r as usize)))
            .collect(),
        None => vec![],
    }
}

/// The changer deciding `prep`'s changes; `position` (encoded key → folded row) is what it
/// matches scanned rows with (empty when stored rows are found by other means).
fn changer(
    prep: &Prepared,
    position: KeyMap<Box<[u8]>, u32>,
    tombstone_of: Vec<Option<i64>>,
    table: &Table,
) -> Result<KeyedChanger> {
    let conv = arrow::row::RowConverter::new(
        prep.key_fields
            .iter()
            .map(|f| arrow::row::SortField::new(f.data_type().clone()))
            .collect(),
    )?;
    Ok(KeyedChanger::new(
        &prep.spec.key,
        prep.spec.version.as_ref(),
        conv,
        prep.folded.clone(),
        position,
        tombstone_of,
        table.name(),
    ))
}

/// Stored rows found by reading the key and version columns of the files the batch's keys
/// may be in (the row-level engine), tombstones from the tombstone files. `writes_rows`:
/// the upserts are written as new data files (else they were written already, and
/// `settled.upserts` says which are kept).
pub(super) async fn decide_by_scan(
    table: &Table,
    prep: &Prepared,
    list: &TombstoneList,
    writes_rows: bool,
) -> Result<Decided> {
    let mut position: KeyMap<Box<[u8]>, u32> =
        KeyMap::with_capacity_and_hasher(prep.rows.num_rows(), Default::default());
    for r in 0..prep.rows.num_rows() {
        position.insert(prep.rows.row(r).as_ref().into(), r as u32);
    }
    let wanted = position.keys().cloned().collect();
    let stones = tombstones::load(table, list, &prep.key_fields, &prep.conv, Some(&wanted)).await?;
    let tombstone_of: Vec<Option<i64>> = (0..prep.rows.num_rows())
        .map(|r| {
            stones
                .records
                .get(prep.rows.row(r).as_ref())
                .filter(|t| t.deleted)
                .map(|t| t.version)
        })
        .collect();
    let mut changer = changer(prep, position, tombstone_of, table)?;
    let filter = key_filter(&prep.spec.key[0], prep.folded.rows.column(prep.cols.key[0]));
    let staged = if writes_rows {
        stage(&prep.write_table, RowLevelKind::Merge, filter, &mut changer).await?
    } else {
        let mut keeps = super::changer::WritesNoRows(&mut changer);
        stage(&prep.write_table, RowLevelKind::Merge, filter, &mut keeps).await?
    };
    let settled = changer.settled.take().unwrap_or_default();
    Ok(Decided::new(settled, staged, vec![], prep))
}

/// Stored rows and tombstones found in the key index held by `slot` (built first when it
/// does not reflect `table`). The batch's files are staged while the tombstone file (and the
/// rest of the commit's extras, [`commit_extras`]) is written.
async fn decide_by_index(
    table: &Table,
    prep: &Prepared,
    list: &TombstoneList,
    sink: Option<(&str, i64)>,
    slot: &mut Option<KeyIndex>,
    lookup: &mut &'static str,
) -> Result<(Decided, (CommitExtras, u64))> {
    let idx = match slot.take() {
        Some(i) if i.is_current(table) => {
            *lookup = "index";
            i
        }
        held => {
            let schema = table.arrow_schema()?;
            let cols = Columns::of(&prep.spec, &schema)?;
            // Only rows moved since (compaction, tombstone merges): the index follows them.
            let caught_up = match held {
                Some(i) => {
                    i.catch_up(table, &prep.spec, &cols, &schema, &prep.conv)
                        .await?
                }
                None => None,
            };
            match caught_up {
                Some(i) => {
                    *lookup = "index-caught-up";
                    i
                }
                None => {
                    *lookup = "index-built";
                    KeyIndex::build(table, &prep.spec, &cols, &schema, &prep.conv).await?
                }
            }
        }
    };
    let key_cols = prep.key_columns();
    let keys = Keys::of(&idx, &key_cols, &prep.rows)?;
    let found = idx.lookup_all(&keys, &prep.rows);
    let mut changer = changer(
        prep,
        KeyMap::default(),
        found.iter().map(|f| f.1).collect(),
        table,
    )?;
    let (mut at, mut replaced) = (Vec::new(), Vec::new());
    for (r, (live, _)) in found.iter().enumerate() {
        if let Some((file, pos, version)) = live {
            if changer.observe(r, *version)? {
                at.push((*file, *pos));
                replaced.push(r);
            }
        }
    }
    let rows = crate::txn::RowChanger::finish(&mut changer)?;
    let removals = idx.removals(&at);
    *slot = Some(idx);
    let settled = changer.settled.take().unwrap_or_default();
    let tombstones = tombstone_records(&settled, prep);
    let (staged, extras) = tokio::join!(
        stage_known(&prep.write_table, RowLevelKind::Merge, removals, rows),
        commit_extras(table, prep, list, &tombstones, sink)
    );
    match (staged, extras) {
        (Ok(staged), Ok(extras)) => {
            let decided = Decided {
                settled,
                staged,
                replaced,
                tombstones,
            };
            Ok((decided, extras))
        }
        (Ok(staged), Err(e)) => {
            staged.abort(table).await;
            Err(e)
        }
        (Err(e), Ok((extras, _))) => {
            for path in &extras.written {
                let _ = table.storage().delete(path).await;
            }
            Err(e)
        }
        (Err(e), Err(_)) => Err(e),
    }
}

/// What commits with the batch's files: its tombstone records as one new tombstone file
/// (the list guarded against concurrent change either way), the sink's checkpoint, the
/// schema change. Returns them and the bytes of the tombstone files written.
pub(super) async fn commit_extras(
    table: &Table,
    prep: &Prepared,
    list: &TombstoneList,
    tombstones: &[(usize, bool, i64)],
    sink: Option<(&str, i64)>,
) -> Result<(CommitExtras, u64)> {
    let mut extras = base_extras(table, prep.new_schema.clone(), sink);
    let current = table.metadata().properties().get(TOMBSTONES).cloned();
    let mut bytes = 0;
    if tombstones.is_empty() {
        guard_tombstones(table, &mut extras);
    } else {
        let idx = arrow_array::UInt32Array::from_iter_values(tombstones.iter().map(|t| t.0 as u32));
        let key_cols = prep
            .key_columns()
            .iter()
            .map(|c| arrow_select::take::take(c, &idx, None))
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
        let now = chrono::Utc::now().timestamp_millis();
        let file = tombstones::write(
            table,
            &prep.key_fields,
            key_cols,
            Int64Array::from_iter_values(tombstones.iter().map(|t| t.2)),
            Int64Array::from(vec![now; idx.len()]),
            BooleanArray::from_iter(tombstones.iter().map(|t| Some(t.1))),
        )
        .await?;
        let written_path = file.path.clone();
        let (next, written) = match tombstones::with_file(
            table,
            list,
            Some(file),
            &prep.key_fields,
            &prep.conv,
        )
        .await
        {
            Ok(m) => m,
            Err(e) => {
                let _ = table.storage().delete(&written_path).await;
                return Err(e);
            }
        };
        bytes = next
            .files
            .iter()
            .filter(|f| written.contains(&f.path))
            .map(|f| f.file_size_in_bytes)
            .sum::<u64>();
        extras.written = written;
        extras
            .summary
            .extend(crate::spec::keyed_state::tombstone_changes(list, &next));
        extras.properties.push(PropertyUpdate {
            key: TOMBSTONES.to_string(),
            expected: current,
            value: (!next.files.is_empty()).then(|| next.to_property()),
        });
    }
    Ok((extras, bytes))
}

/// What every keyed commit carries: the schema change, the sink's checkpoint; refusing any
/// concurrent commit (the batch is then planned again).
fn base_extras(
    table: &Table,
    schema: Option<(i32, Schema)>,
    sink: Option<(&str, i64)>,
) -> CommitExtras {
    let mut extras = CommitExtras {
        no_concurrent_commit: true,
        schema,
        ..CommitExtras::default()
    };
    if let Some((s, n)) = sink {
        let key = sink_checkpoint_key(s);
        extras.summary.push((key.clone(), n.to_string()));
        extras.properties.push(PropertyUpdate {
            expected: table.metadata().properties().get(&key).cloned(),
            key,
            value: Some(n.to_string()),
        });
    }
    extras
}

/// The tombstone list, unchanged, still guards the commit: a concurrent change to it must be
/// seen.
fn guard_tombstones(table: &Table, extras: &mut CommitExtras) {
    if let Some(current) = table.metadata().properties().get(TOMBSTONES) {
        extras.properties.push(PropertyUpdate {
            key: TOMBSTONES.to_string(),
            expected: Some(current.clone()),
            value: Some(current.clone()),
        });
    }
}

/// [`apply_once`] for the merge engines that fold rows (see [`super::merge`]).
async fn apply_merge_once(
    catalog: &Catalog,
    table: &Table,
    changes: &ChangeBatch,
    options: &UpsertOptions,
    sink: Option<(&str, i64)>,
    mut result: UpsertResult,
    mut state: Option<&mut Option<MergeState>>,
) -> Result<UpsertResult> {
    let d = super::merge::decide(
        table,
        changes,
        options,
        state.as_deref_mut(),
        &mut result.lookup,
    )
    .await?;
    result.added_columns = d.added_columns;
    result.keys = d.keys;
    result.count(d.counts);
    let mut extras = base_extras(table, d.new_schema, sink);
    guard_tombstones(table, &mut extras);
    let added: Vec<String> = d
        .staged
        .added_data_files()
        .map(|f| f.file_path().to_string())
        .collect();
    let rewrites = d.staged.rewrites_files();
    result.committed(d.staged.commit(catalog, table, extras).await?, sink);
    if let Some(slot) = state {
        // The state follows the commit; copy-on-write moved rows, and a state that cannot
        // follow is dropped: either way the next batch builds it again.
        let followed = match (slot.as_mut(), &d.follow) {
            (Some(st), Some(f)) if !rewrites => {
                result.snapshot_id.is_none() || f.apply(st, &result.table, &added).await.is_ok()
            }
            _ => false,
        };
        if !followed {
            *slot = None;
        }
    }
    Ok(result)
}

/// Reads back the files a batch added (while it commits) and returns `idx` untouched with
/// the update that brings it to the state the batch's commit leaves (see
/// [`KeyIndex::apply_batch`]); no update when the files cannot be read.
async fn follow(
    idx: KeyIndex,
    table: Table,
    prep: Arc<Prepared>,
    replaced: Vec<usize>,
    added: Vec<String>,
    tombstones: Vec<(usize, bool, i64)>,
) -> (KeyIndex, Option<Update>) {
    let Ok(added) = KeyIndex::read_added(&table, &prep.spec, &added).await else {
        return (idx, None);
    };
    let update = move |idx: &mut KeyIndex| {
        let key_cols = prep.key_columns();
        let keys = Keys::of(idx, &key_cols, &prep.rows)?;
        idx.apply_batch(
            &table,
            &prep.spec,
            &prep.conv,
            &keys,
            &prep.rows,
            &replaced,
            &prep.folded.deleted,
            &added,
            &tombstones,
        )
    };
    (idx, Some(Update(Box::new(update))))
}
