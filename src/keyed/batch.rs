//! What the keyed API takes and returns: a batch of changes in arrival order, the options
//! it is applied with, and what applying it did.

use arrow_array::RecordBatch;

use crate::table::Table;

/// One batch of changes, its parts in arrival order (each part's rows in arrival order).
#[derive(Debug, Clone, Default)]
pub struct ChangeBatch {
    pub(super) parts: Vec<(String, RecordBatch)>,
    /// The number of a source's first row when it is not 1 (a batch continuing a source).
    pub(super) first_rows: std::collections::HashMap<String, u64>,
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

    /// Appends rows of `source` whose first is its row `first` (when the batch does not
    /// begin at the source's first row).
    pub(super) fn push_from(&mut self, source: String, first: u64, rows: RecordBatch) {
        self.first_rows.entry(source.clone()).or_insert(first);
        self.parts.push((source, rows));
    }

    /// The number of `source`'s first row in the batch.
    pub(super) fn first_row(&self, source: &str) -> u64 {
        self.first_rows.get(source).copied().unwrap_or(1)
    }

    /// The parts with the number of each one's first row in its source.
    pub(super) fn into_numbered(self) -> Vec<(String, u64, RecordBatch)> {
        let mut next: std::collections::HashMap<String, u64> = self.first_rows;
        self.parts
            .into_iter()
            .map(|(source, rows)| {
                let first = next.entry(source.clone()).or_insert(1);
                let at = *first;
                *first += rows.num_rows() as u64;
                (source, at, rows)
            })
            .collect()
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
    /// Write to this branch (`None`: main); see [`UpsertOptions::with_branch`].
    pub branch: Option<String>,
    /// Stage the commit for write-audit-publish with this WAP id; see
    /// [`UpsertOptions::with_wap_id`].
    pub wap_id: Option<String>,
    /// The batch holds rows [`super::pre_fold`] made (the table's columns, the functions'
    /// states included), not changes; see [`UpsertOptions::with_pre_folded`].
    pub pre_folded: bool,
}

impl UpsertOptions {
    /// Records `checkpoint` for sink `sink_id` (a checkpoint at or below the committed one
    /// makes the batch a no-op).
    pub fn with_checkpoint(mut self, sink_id: impl Into<String>, checkpoint: i64) -> Self {
        self.sink_id = Some(sink_id.into());
        self.checkpoint = Some(checkpoint);
        self
    }

    /// Takes the batch as the rows distributed tasks folded with [`super::pre_fold`] (in
    /// task order), merged with the stored rows as the changes they folded would be: a merge
    /// engine other than `replace` only, and the schema does not evolve.
    pub fn with_pre_folded(mut self, pre_folded: bool) -> Self {
        self.pre_folded = pre_folded;
        self
    }

    /// Adds the batch's new columns to the table instead of refusing them.
    pub fn with_evolve_schema(mut self, evolve: bool) -> Self {
        self.evolve_schema = evolve;
        self
    }

    /// Applies the batch to branch `branch` (its rows are looked up and replaced there; main
    /// is untouched). Tombstones and sink checkpoints are table-wide, so a branch upsert is
    /// refused on a table with a delete column and with a checkpoint.
    pub fn with_branch(mut self, branch: impl Into<String>) -> Self {
        self.branch = Some(branch.into());
        self
    }

    /// Stages the batch's commit for write-audit-publish ([`crate::Table::with_wap_id`]),
    /// with the same limits as [`UpsertOptions::with_branch`].
    pub fn with_wap_id(mut self, wap_id: impl Into<String>) -> Self {
        self.wap_id = Some(wap_id.into());
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
    /// the batch's key range may hit), `index` (a [`super::KeyedWriter`]'s key index),
    /// `index-caught-up` (the index first followed rows moved by compactions since its last
    /// batch), or `index-built` (the index was built or rebuilt first).
    pub lookup: &'static str,
    /// Commits the batch was applied in: 1, or more for a batch spilled past its limit
    /// ([`super::upsert_spilled`]).
    pub parts: u32,
}

impl UpsertResult {
    /// Takes the decided batch's counts.
    pub(super) fn count(&mut self, c: super::changer::Counts) {
        (self.inserted, self.updated, self.deleted) = (c.inserted, c.updated, c.deleted);
        (self.deleted_absent, self.ignored) = (c.deleted_absent, c.ignored);
    }

    /// Takes what the commit `r` did; a sink's checkpoint is committed with a snapshot.
    pub(super) fn committed(&mut self, r: crate::txn::RowLevelResult, sink: Option<(&str, i64)>) {
        self.snapshot_id = r.snapshot_id;
        self.table = r.table;
        self.added_data_files = r.added_data_files;
        self.added_delete_files = r.added_delete_files;
        self.written_bytes += r.written_bytes;
        if let (Some((_, n)), Some(_)) = (sink, self.snapshot_id) {
            self.committed_checkpoint = Some(n);
        }
    }

    /// The result of a batch that changed nothing (yet).
    pub(super) fn nothing(
        table: &Table,
        input_rows: u64,
        committed_checkpoint: Option<i64>,
    ) -> Self {
        Self {
            table: table.clone(),
            snapshot_id: None,
            already_committed: false,
            committed_checkpoint,
            input_rows,
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
            parts: 1,
        }
    }

    /// Adds what the next part `r` of a spilled batch did (its keys are none of the earlier
    /// parts').
    pub(super) fn add_part(&mut self, r: UpsertResult) {
        self.table = r.table;
        self.snapshot_id = r.snapshot_id.or(self.snapshot_id);
        self.committed_checkpoint = r.committed_checkpoint;
        self.input_rows += r.input_rows;
        self.keys += r.keys;
        self.inserted += r.inserted;
        self.updated += r.updated;
        self.deleted += r.deleted;
        self.deleted_absent += r.deleted_absent;
        self.ignored += r.ignored;
        self.tombstone_records += r.tombstone_records;
        self.added_data_files += r.added_data_files;
        self.added_delete_files += r.added_delete_files;
        self.written_bytes += r.written_bytes;
        for c in r.added_columns {
            if !self.added_columns.contains(&c) {
                self.added_columns.push(c);
            }
        }
        self.attempts = self.attempts.max(r.attempts);
        self.lookup = r.lookup;
        self.parts += 1;
    }
}
