//! The row changer of a keyed batch: each live row whose key the batch changes is compared
//! with the batch's winning change for that key (and the key's tombstone); the change wins
//! when its version is at least the stored one (so a later arrival wins ties), and then the
//! row goes away — replaced by the change, or deleted and remembered by a tombstone.

use arrow::row::RowConverter;
use arrow_array::{Array, BooleanArray, Int64Array, RecordBatch, UInt32Array};

use super::fold::{versions_of, Folded, KeyMap};
use crate::error::{Error, Result};
use crate::txn::RowChanger;

/// What became of one winning change of the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Its key has no live row (yet seen).
    Unseen,
    /// It replaced (or deleted) its key's live row.
    Replaced,
    /// The stored version (or tombstone) is higher: ignored.
    Lost,
}

/// Counts of one batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// New keys.
    pub inserted: u64,
    /// Keys whose row was replaced.
    pub updated: u64,
    /// Keys whose row was deleted.
    pub deleted: u64,
    /// Deletes of keys with no live row (they leave a tombstone all the same).
    pub deleted_absent: u64,
    /// Changes older than the stored version or tombstone.
    pub ignored: u64,
}

/// What a batch does, once decided.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settled {
    /// The counts.
    pub counts: Counts,
    /// Folded rows written as the keys' new rows.
    pub upserts: Vec<u32>,
    /// Tombstone records to add: folded row, and whether it deletes (`false`: an upsert
    /// that beat the key's tombstone clears it).
    pub tombstones: Vec<(u32, bool)>,
}

/// Decides a keyed batch: fed the live rows of its keys (by the row-level engine scanning
/// the table, or by a key index), then settled.
pub(crate) struct KeyedChanger {
    /// The columns read: key columns, then the version column.
    columns: Vec<String>,
    n_key: usize,
    conv: RowConverter,
    folded: Folded,
    /// Encoded key → row of `folded`.
    index: KeyMap<Box<[u8]>, u32>,
    /// The tombstone version of each folded row's key.
    tombstone_of: Vec<Option<i64>>,
    outcome: Vec<Outcome>,
    table: String,
    /// Set once every live row was seen.
    pub settled: Option<Settled>,
}

impl KeyedChanger {
    /// A changer for `folded` (its keys encoded by `conv` into `index`).
    pub(super) fn new(
        key: &[String],
        version: Option<&String>,
        conv: RowConverter,
        folded: Folded,
        index: KeyMap<Box<[u8]>, u32>,
        tombstone_of: Vec<Option<i64>>,
        table: String,
    ) -> Self {
        let mut columns = key.to_vec();
        columns.extend(version.cloned());
        let n = folded.rows.num_rows();
        Self {
            columns,
            n_key: key.len(),
            conv,
            folded,
            index,
            tombstone_of,
            outcome: vec![Outcome::Unseen; n],
            table,
            settled: None,
        }
    }

    /// Whether change `row` beats a stored version (a row's or a tombstone's).
    fn wins(&self, row: usize, stored: Option<i64>) -> bool {
        match (self.folded.versions.as_ref().map(|v| v.value(row)), stored) {
            (Some(v), Some(s)) => v >= s,
            _ => true,
        }
    }

    /// The live row of change `i`'s key was found, with version `row_version`: whether the
    /// row goes away. A second live row of one key is an error.
    pub(super) fn observe(&mut self, i: usize, row_version: Option<i64>) -> Result<bool> {
        if self.outcome[i] != Outcome::Unseen {
            return Err(Error::invalid(format!(
                "table {} holds the key of change {} in more than one live row (was it written by an engine \
                 that does not keep keys unique?); nothing was committed: remove the duplicates first",
                self.table,
                i + 1
            )));
        }
        let stored = match (row_version, self.tombstone_of[i]) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let wins = self.wins(i, stored);
        self.outcome[i] = if wins {
            Outcome::Replaced
        } else {
            Outcome::Lost
        };
        Ok(wins)
    }

    /// Once every live row was seen: changes whose key had no live row are decided against
    /// the key's tombstone, and everything is counted.
    fn settle(&mut self) -> Settled {
        let mut s = Settled::default();
        let versioned = self.folded.versions.is_some();
        for r in 0..self.outcome.len() {
            let tombstone = self.tombstone_of[r];
            if self.outcome[r] == Outcome::Unseen && !self.wins(r, tombstone) {
                self.outcome[r] = Outcome::Lost;
            }
            let replaced = self.outcome[r] == Outcome::Replaced;
            match (self.outcome[r], self.folded.deleted.value(r)) {
                (Outcome::Lost, _) => s.counts.ignored += 1,
                (_, true) => {
                    if replaced {
                        s.counts.deleted += 1;
                    } else {
                        s.counts.deleted_absent += 1;
                    }
                    if versioned {
                        s.tombstones.push((r as u32, true));
                    }
                }
                (_, false) => {
                    if replaced {
                        s.counts.updated += 1;
                    } else {
                        s.counts.inserted += 1;
                    }
                    s.upserts.push(r as u32);
                    if tombstone.is_some() {
                        s.tombstones.push((r as u32, false));
                    }
                }
            }
        }
        s
    }
}

impl RowChanger for KeyedChanger {
    fn columns(&self) -> Option<Vec<String>> {
        Some(self.columns.clone())
    }

    fn change(&mut self, batch: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)> {
        let schema = batch.schema();
        let col = |name: &String| {
            schema
                .index_of(name)
                .map(|i| batch.column(i).clone())
                .map_err(|_| Error::io(format!("the scan did not return column '{name}'")))
        };
        let keys = self.columns[..self.n_key]
            .iter()
            .map(col)
            .collect::<Result<Vec<_>>>()?;
        let stored: Option<Int64Array> = match self.columns.get(self.n_key) {
            Some(v) => Some(versions_of(&col(v)?)?),
            None => None,
        };
        let rows = self.conv.convert_columns(&keys)?;
        let mut remove = Vec::with_capacity(batch.num_rows());
        for r in 0..batch.num_rows() {
            let Some(&i) = self.index.get(rows.row(r).as_ref()) else {
                remove.push(false);
                continue;
            };
            let row_version = stored
                .as_ref()
                .and_then(|s| s.is_valid(r).then(|| s.value(r)));
            remove.push(self.observe(i as usize, row_version)?);
        }
        Ok((BooleanArray::from(remove), None))
    }

    fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        let settled = self.settle();
        let idx = UInt32Array::from(settled.upserts.clone());
        self.settled = Some(settled);
        if idx.is_empty() {
            return Ok(vec![]);
        }
        Ok(vec![arrow_select::take::take_record_batch(
            &self.folded.rows,
            &idx,
        )?])
    }
}

/// A changer that decides as the keyed changer does but writes no rows: the upserts are in
/// the tasks' files already.
pub(super) struct WritesNoRows<'a>(pub &'a mut KeyedChanger);

impl RowChanger for WritesNoRows<'_> {
    fn columns(&self) -> Option<Vec<String>> {
        self.0.columns()
    }

    fn change(&mut self, batch: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)> {
        self.0.change(batch)
    }

    fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        self.0.finish()?;
        Ok(vec![])
    }
}
