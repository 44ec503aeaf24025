//! The change-aware strategy: staging is read one partition at a time next to the snapshot's
//! rows of that partition, joined by key; only superseded rows are removed (deletes under
//! merge-on-read, rewritten files under copy-on-write) and only new or changed rows written.

use std::collections::HashMap;

use arrow::row::RowConverter;
use arrow_array::{BooleanArray, RecordBatch, UInt32Array};

use super::dedup::{latest_per_key, KeyColumns};
use super::spill::SnapshotPartitions;
use crate::dml::RowChanger;
use crate::error::{Error, Result};
use crate::spec::Struct;

/// Counts of what the comparison found.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct ChangeCounts {
    /// Snapshot rows identical to the stored row (nothing written).
    pub unchanged: u64,
    /// Stored rows superseded by a newer version.
    pub updated: u64,
    /// Keys new to staging.
    pub inserted: u64,
    /// Snapshot rows older than the stored version (late replays, ignored).
    pub stale: u64,
    /// Duplicate keys inside the snapshot (the latest version, then the last arrival, won).
    pub duplicates: u64,
}

struct Current {
    rows: RecordBatch,
    index: HashMap<Box<[u8]>, u32>,
    values: arrow::row::Rows,
    versions: arrow_array::Int64Array,
    seen: Vec<bool>,
}

/// A [`RowChanger`] comparing staging with the snapshot partition by partition.
pub(crate) struct IngestChanger {
    snapshot: SnapshotPartitions,
    cols: KeyColumns,
    keys: RowConverter,
    value_conv: RowConverter,
    default_spec: i32,
    visited: Vec<bool>,
    current: Option<Current>,
    next_new: usize,
    pub(crate) counts: ChangeCounts,
    table: String,
}

impl IngestChanger {
    pub(crate) fn new(
        snapshot: SnapshotPartitions,
        cols: KeyColumns,
        default_spec: i32,
        table: String,
    ) -> Result<Self> {
        let schema = snapshot.schema().clone();
        Ok(Self {
            visited: vec![false; snapshot.len()],
            keys: cols.key_converter(&schema)?,
            value_conv: cols.value_converter(&schema)?,
            snapshot,
            cols,
            default_spec,
            current: None,
            next_new: 0,
            counts: ChangeCounts::default(),
            table,
        })
    }

    /// Partition `i` of the snapshot, deduplicated.
    fn load(&mut self, i: usize) -> Result<RecordBatch> {
        self.visited[i] = true;
        let rows = self.snapshot.take(i)?;
        let what = format!("snapshot for {}", self.table);
        let keep = latest_per_key(&self.cols, &rows, &what)?;
        self.counts.duplicates += (rows.num_rows() - keep.len()) as u64;
        Ok(arrow_select::take::take_record_batch(&rows, &keep)?)
    }
}

impl RowChanger for IngestChanger {
    fn columns(&self) -> Option<Vec<String>> {
        None
    }

    fn grouped(&self) -> bool {
        true
    }

    fn start_group(&mut self, spec_id: i32, partition: &Struct) -> Result<bool> {
        if spec_id != self.default_spec {
            return Err(Error::unsupported(format!(
                "table {} has live files written under partition spec {spec_id}, not the current one; \
                 run `floe rewrite-data-files {} --option rewrite-all=true` first so every key lives in its current partition",
                self.table, self.table
            )));
        }
        let Some(i) = self.snapshot.find(partition) else {
            return Ok(false);
        };
        if self.visited[i] {
            return Err(Error::io("a partition was read twice"));
        }
        let rows = self.load(i)?;
        let what = format!("snapshot for {}", self.table);
        let keys = self.cols.keys(&self.keys, &rows, &what)?;
        let mut index = HashMap::with_capacity(rows.num_rows());
        for r in 0..rows.num_rows() {
            index.insert(Box::<[u8]>::from(keys.row(r).data()), r as u32);
        }
        self.current = Some(Current {
            values: self.cols.values(&self.value_conv, &rows)?,
            versions: self.cols.versions(&rows, &what)?,
            seen: vec![false; rows.num_rows()],
            rows,
            index,
        });
        Ok(true)
    }

    fn change(&mut self, batch: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)> {
        let cur = self
            .current
            .as_mut()
            .ok_or_else(|| Error::io("staging rows arrived outside a partition group"))?;
        let what = format!("staging table {}", self.table);
        let keys = self.cols.keys(&self.keys, batch, &what)?;
        let values = self.cols.values(&self.value_conv, batch)?;
        let versions = self.cols.versions(batch, &what)?;
        let mut remove = Vec::with_capacity(batch.num_rows());
        let mut replacements: Vec<u32> = Vec::new();
        for r in 0..batch.num_rows() {
            let Some(&s) = cur.index.get(keys.row(r).data()) else {
                remove.push(false);
                continue;
            };
            if cur.seen[s as usize] {
                // A second stored row of the key (staging was not unique): it goes; the
                // snapshot's decision was made on the first one.
                remove.push(true);
                continue;
            }
            cur.seen[s as usize] = true;
            let (new_v, old_v) = (cur.versions.value(s as usize), versions.value(r));
            if new_v < old_v {
                self.counts.stale += 1;
                remove.push(false);
            } else if cur.values.row(s as usize) == values.row(r) {
                self.counts.unchanged += 1;
                remove.push(false);
            } else {
                self.counts.updated += 1;
                remove.push(true);
                replacements.push(s);
            }
        }
        let new_rows = (!replacements.is_empty())
            .then(|| {
                arrow_select::take::take_record_batch(&cur.rows, &UInt32Array::from(replacements))
            })
            .transpose()?;
        Ok((BooleanArray::from(remove), new_rows))
    }

    fn end_group(&mut self) -> Result<Vec<RecordBatch>> {
        let Some(cur) = self.current.take() else {
            return Ok(vec![]);
        };
        let unseen: Vec<u32> = (0..cur.rows.num_rows() as u32)
            .filter(|i| !cur.seen[*i as usize])
            .collect();
        self.counts.inserted += unseen.len() as u64;
        if unseen.is_empty() {
            return Ok(vec![]);
        }
        Ok(vec![arrow_select::take::take_record_batch(
            &cur.rows,
            &UInt32Array::from(unseen),
        )?])
    }

    fn next_new_group(&mut self) -> Result<Option<Vec<RecordBatch>>> {
        while self.next_new < self.visited.len() {
            let i = self.next_new;
            self.next_new += 1;
            if !self.visited[i] {
                let rows = self.load(i)?;
                self.counts.inserted += rows.num_rows() as u64;
                return Ok(Some(vec![rows]));
            }
        }
        Ok(None)
    }
}
