//! The change-aware strategy: staging is read one partition at a time next to the snapshot's
//! rows of that partition, joined by key; only superseded rows are removed (deletes under
//! merge-on-read, rewritten files under copy-on-write) and only new or changed rows written.
//!
//! The snapshot partition is sorted by key and deduplicated (a stable sort, then one pass over
//! each run of equal keys). The join is a streaming merge when staging files are sorted by the
//! key too (the table's sort order starts with the key columns): each staging file walks the
//! snapshot with a forward cursor. Otherwise — or as soon as a file turns out not to be
//! sorted — it is a hash join (open addressing over the snapshot's key rows, no allocation
//! per key).

use std::collections::HashMap;

use arrow::row::{Row, RowConverter, Rows};
use arrow_array::{BooleanArray, RecordBatch, UInt32Array};

use super::dedup::KeyColumns;
use crate::error::{Error, Result};
use crate::spec::Struct;
use crate::txn::RowChanger;
use crate::write::PartitionSpill;

/// Counts of what the comparison found.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
#[non_exhaustive]
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
    /// Partitions compared by a streaming merge (staging files sorted by the key).
    pub merged_partitions: u64,
    /// Partitions compared by a hash join.
    pub hashed_partitions: u64,
}

/// How staging keys find their snapshot row (the snapshot partition is sorted by key and
/// unique).
enum Lookup {
    /// Staging files are sorted too: a forward cursor per staging file (position, last key).
    Merge(HashMap<usize, (usize, Vec<u8>)>),
    /// An open-addressing hash of the snapshot keys (slot → row + 1; 0 is empty).
    Hash(Vec<u32>),
}

/// A fast, allocation-free hash of a key's row bytes.
fn hash_bytes(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ b.len() as u64;
    for c in b.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h ^ (h >> 29)
}

fn build_hash(keys: &Rows) -> Vec<u32> {
    let slots = (keys.num_rows() * 2).next_power_of_two().max(16);
    let mut table = vec![0u32; slots];
    for r in 0..keys.num_rows() {
        let mut i = hash_bytes(keys.row(r).data()) as usize & (slots - 1);
        while table[i] != 0 {
            i = (i + 1) & (slots - 1);
        }
        table[i] = r as u32 + 1;
    }
    table
}

fn probe(table: &[u32], keys: &Rows, k: Row<'_>) -> Option<u32> {
    let mask = table.len() - 1;
    let mut i = hash_bytes(k.data()) as usize & mask;
    loop {
        match table[i] {
            0 => return None,
            r if keys.row(r as usize - 1) == k => return Some(r - 1),
            _ => i = (i + 1) & mask,
        }
    }
}

/// First position in `keys` (sorted) at or after `from` whose key is `>= k` (galloping).
fn seek(keys: &Rows, from: usize, k: Row<'_>) -> usize {
    let n = keys.num_rows();
    let (mut lo, mut step) = (from, 1usize);
    // Gallop to a bound, then binary search in (lo, hi].
    let mut hi = from;
    while hi < n && keys.row(hi) < k {
        lo = hi + 1;
        hi = hi.saturating_add(step).min(n);
        step = step.saturating_mul(2);
    }
    let mut hi = hi.min(n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if keys.row(mid) < k {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

struct Current {
    rows: RecordBatch,
    keys: Rows,
    lookup: Lookup,
    values: arrow::row::Rows,
    versions: arrow_array::Int64Array,
    seen: Vec<bool>,
}

/// A [`RowChanger`] comparing staging with the snapshot partition by partition.
pub(crate) struct IngestChanger {
    snapshot: PartitionSpill,
    cols: KeyColumns,
    keys: RowConverter,
    value_conv: RowConverter,
    sorted: bool,
    visited: Vec<bool>,
    current: Option<Current>,
    next_new: usize,
    pub(crate) counts: ChangeCounts,
    table: String,
}

impl IngestChanger {
    pub(crate) fn new(
        snapshot: PartitionSpill,
        cols: KeyColumns,
        sorted: bool,
        table: String,
    ) -> Result<Self> {
        let schema = snapshot.schema().clone();
        Ok(Self {
            visited: vec![false; snapshot.len()],
            keys: cols.key_converter(&schema)?,
            value_conv: cols.value_converter(&schema)?,
            snapshot,
            cols,
            sorted,
            current: None,
            next_new: 0,
            counts: ChangeCounts::default(),
            table,
        })
    }

    /// Partition `i` of the snapshot: sorted by key and deduplicated (per key the highest
    /// version, then the latest arrival), with its keys.
    fn load(&mut self, i: usize) -> Result<(RecordBatch, Rows)> {
        self.visited[i] = true;
        let rows = self.snapshot.take(i)?;
        let what = format!("snapshot for {}", self.table);
        let keys = self.cols.keys(&self.keys, &rows, &what)?;
        let n = rows.num_rows();
        let sorted = (1..n).all(|r| keys.row(r - 1) < keys.row(r));
        if sorted {
            return Ok((rows, keys));
        }
        // A stable sort keeps arrival order among equal keys.
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by(|a, b| keys.row(*a as usize).cmp(&keys.row(*b as usize)));
        let versions = self.cols.versions(&rows, &what)?;
        let mut keep: Vec<u32> = Vec::with_capacity(n);
        let mut run = 0;
        while run < n {
            let k = keys.row(order[run] as usize);
            let mut end = run + 1;
            while end < n && keys.row(order[end] as usize) == k {
                end += 1;
            }
            // `>=`: the later arrival wins equal versions.
            let best = order[run..end]
                .iter()
                .copied()
                .reduce(|w, r| {
                    if versions.value(r as usize) >= versions.value(w as usize) {
                        r
                    } else {
                        w
                    }
                })
                .unwrap_or(order[run]);
            keep.push(best);
            run = end;
        }
        self.counts.duplicates += (n - keep.len()) as u64;
        let rows = arrow_select::take::take_record_batch(&rows, &UInt32Array::from(keep))?;
        let keys = self.cols.keys(&self.keys, &rows, &what)?;
        Ok((rows, keys))
    }
}

impl RowChanger for IngestChanger {
    fn columns(&self) -> Option<Vec<String>> {
        None
    }

    fn grouped(&self) -> bool {
        true
    }

    fn ungroup(&mut self) -> Result<()> {
        Err(Error::unsupported(format!(
            "table {} has live files written under another partition spec than the current one; \
             rewrite its data files first (rewrite_data_files with rewrite-all=true on {}) so every key lives in its current partition",
            self.table, self.table
        )))
    }

    fn start_group(&mut self, _spec_id: i32, partition: &Struct) -> Result<bool> {
        let Some(i) = self.snapshot.find(partition) else {
            return Ok(false);
        };
        if self.visited[i] {
            return Err(Error::io("a partition was read twice"));
        }
        let (rows, keys) = self.load(i)?;
        let what = format!("snapshot for {}", self.table);
        let lookup = if self.sorted {
            self.counts.merged_partitions += 1;
            Lookup::Merge(HashMap::new())
        } else {
            self.counts.hashed_partitions += 1;
            Lookup::Hash(build_hash(&keys))
        };
        self.current = Some(Current {
            values: self.cols.values(&self.value_conv, &rows)?,
            versions: self.cols.versions(&rows, &what)?,
            seen: vec![false; rows.num_rows()],
            rows,
            keys,
            lookup,
        });
        Ok(true)
    }

    fn change(&mut self, batch: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)> {
        self.change_in_file(usize::MAX, batch)
    }

    fn change_in_file(
        &mut self,
        file: usize,
        batch: &RecordBatch,
    ) -> Result<(BooleanArray, Option<RecordBatch>)> {
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
            let k = keys.row(r);
            let found = match &mut cur.lookup {
                Lookup::Merge(cursors) => {
                    let (pos, last) = cursors.entry(file).or_insert((0, Vec::new()));
                    if !last.is_empty() && k.data() < last.as_slice() {
                        // Not sorted after all: hash the rest of this partition.
                        self.counts.merged_partitions -= 1;
                        self.counts.hashed_partitions += 1;
                        let table = build_hash(&cur.keys);
                        let found = probe(&table, &cur.keys, k);
                        cur.lookup = Lookup::Hash(table);
                        found
                    } else {
                        last.clear();
                        last.extend_from_slice(k.data());
                        *pos = seek(&cur.keys, *pos, k);
                        (*pos < cur.keys.num_rows() && cur.keys.row(*pos) == k)
                            .then_some(*pos as u32)
                    }
                }
                Lookup::Hash(table) => probe(table, &cur.keys, k),
            };
            let Some(s) = found else {
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
                let (rows, _) = self.load(i)?;
                self.counts.inserted += rows.num_rows() as u64;
                return Ok(Some(vec![rows]));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::row::SortField;
    use arrow_array::Int64Array;
    use std::sync::Arc;

    #[test]
    fn seek_finds_the_first_key_not_below() {
        let conv = RowConverter::new(vec![SortField::new(arrow_schema::DataType::Int64)]).unwrap();
        let keys = conv
            .convert_columns(&[Arc::new(Int64Array::from(vec![1, 3, 3, 5, 8, 13, 21]))])
            .unwrap();
        let probe = conv
            .convert_columns(&[Arc::new(Int64Array::from(vec![0, 3, 4, 13, 22]))])
            .unwrap();
        assert_eq!(seek(&keys, 0, probe.row(0)), 0);
        assert_eq!(seek(&keys, 0, probe.row(1)), 1);
        assert_eq!(seek(&keys, 2, probe.row(1)), 2);
        assert_eq!(seek(&keys, 1, probe.row(2)), 3);
        assert_eq!(seek(&keys, 3, probe.row(3)), 5);
        assert_eq!(seek(&keys, 0, probe.row(4)), 7);
    }
}
