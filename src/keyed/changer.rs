//! The row changer of a keyed batch: each live row whose key the batch changes is compared
//! with the batch's winning change for that key (and the key's tombstone); the change wins
//! when its version is at least the stored one (so a later arrival wins ties), and then the
//! row goes away — replaced by the change, or deleted and remembered by a tombstone.

use std::collections::HashMap;

use arrow::row::RowConverter;
use arrow_array::{Array, BooleanArray, Int64Array, RecordBatch, UInt32Array};

use super::fold::{versions_of, Folded};
use crate::dml::RowChanger;
use crate::error::{Error, Result};

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
    pub inserted: u64,
    pub updated: u64,
    pub deleted: u64,
    /// Deletes of keys with no live row (they leave a tombstone all the same).
    pub deleted_absent: u64,
    pub ignored: u64,
}

pub(crate) struct KeyedChanger {
    /// The columns read: key columns, then the version column.
    columns: Vec<String>,
    n_key: usize,
    conv: RowConverter,
    folded: Folded,
    /// Encoded key → row of `folded`.
    index: HashMap<Box<[u8]>, u32>,
    /// Versions of the batch keys' tombstones.
    tombstones: HashMap<Box<[u8]>, i64>,
    outcome: Vec<Outcome>,
    table: String,
    /// Set once the run has seen every live row.
    pub settled: Option<Settled>,
}

/// What a batch does, once decided.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settled {
    pub counts: Counts,
    /// Folded rows written as the keys' new rows.
    pub upserts: Vec<u32>,
    /// Tombstone records to add: folded row, and whether it deletes (`false`: an upsert
    /// that beat the key's tombstone clears it).
    pub tombstones: Vec<(u32, bool)>,
}

impl KeyedChanger {
    pub fn new(
        key: &[String],
        version: Option<&String>,
        conv: RowConverter,
        folded: Folded,
        index: HashMap<Box<[u8]>, u32>,
        tombstones: HashMap<Box<[u8]>, i64>,
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
            tombstones,
            outcome: vec![Outcome::Unseen; n],
            table,
            settled: None,
        }
    }

    fn version(&self, row: usize) -> Option<i64> {
        self.folded.versions.as_ref().map(|v| v.value(row))
    }

    /// Whether change `row` (of key `key`) beats a stored version.
    fn wins(&self, row: usize, stored: Option<i64>) -> bool {
        match (self.version(row), stored) {
            (Some(v), Some(s)) => v >= s,
            _ => true,
        }
    }

    /// Once every live row was seen: changes whose key had no live row are decided against
    /// the key's tombstone, and everything is counted.
    fn settle(&mut self) -> Settled {
        let mut counts = Counts::default();
        let mut upserts = Vec::new();
        let mut tomb = Vec::new();
        let keys = self.key_rows();
        for r in 0..self.outcome.len() {
            let deleted = self.folded.deleted.value(r);
            let tombstone = keys
                .as_ref()
                .and_then(|k| self.tombstones.get(k.row(r).as_ref()).copied());
            if self.outcome[r] == Outcome::Unseen && !self.wins(r, tombstone) {
                self.outcome[r] = Outcome::Lost;
            }
            let versioned = self.folded.versions.is_some();
            match (self.outcome[r], deleted) {
                (Outcome::Lost, _) => counts.ignored += 1,
                (o, true) => {
                    if o == Outcome::Replaced {
                        counts.deleted += 1;
                    } else {
                        counts.deleted_absent += 1;
                    }
                    if versioned {
                        tomb.push((r as u32, true));
                    }
                }
                (o, false) => {
                    if o == Outcome::Replaced {
                        counts.updated += 1;
                    } else {
                        counts.inserted += 1;
                    }
                    upserts.push(r as u32);
                    if tombstone.is_some() {
                        tomb.push((r as u32, false));
                    }
                }
            }
        }
        Settled {
            counts,
            upserts,
            tombstones: tomb,
        }
    }

    fn key_rows(&self) -> Option<arrow::row::Rows> {
        if self.tombstones.is_empty() {
            return None;
        }
        let cols: Vec<_> = (0..self.n_key)
            .map(|i| self.folded.rows.column(i).clone())
            .collect();
        self.conv.convert_columns(&cols).ok()
    }

    /// The folded batch.
    pub fn folded(&self) -> &Folded {
        &self.folded
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
            let i = i as usize;
            if self.outcome[i] != Outcome::Unseen {
                return Err(Error::invalid(format!(
                    "table {} holds the key of change {} in more than one live row (was it written by an engine \
                     that does not keep keys unique?); nothing was committed: remove the duplicates first",
                    self.table,
                    i + 1
                )));
            }
            let row_version = stored
                .as_ref()
                .and_then(|s| s.is_valid(r).then(|| s.value(r)));
            let tomb = self.tombstones.get(rows.row(r).as_ref()).copied();
            let stored_version = match (row_version, tomb) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            if self.wins(i, stored_version) {
                self.outcome[i] = Outcome::Replaced;
                remove.push(true);
            } else {
                self.outcome[i] = Outcome::Lost;
                remove.push(false);
            }
        }
        Ok((BooleanArray::from(remove), None))
    }

    fn finish(&mut self) -> Result<Vec<RecordBatch>> {
        // Every live row was seen: the remaining changes are decided against tombstones.
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
