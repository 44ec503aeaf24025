//! Rows split by partition, held in memory up to a budget and spilled to Arrow IPC files
//! beyond it, so that a caller can work on one partition at a time (snapshot ingestion, a
//! MERGE source aligned with the table's partitions).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use arrow_array::RecordBatch;
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::FileWriter;
use arrow_schema::SchemaRef;

use crate::error::{Error, Result};
use crate::spec::Struct;

struct Part {
    partition: Struct,
    memory: Vec<RecordBatch>,
    memory_bytes: usize,
    spill: Option<(PathBuf, FileWriter<BufWriter<File>>)>,
}

/// Rows per partition, in arrival order within each; at most a budget of bytes in memory
/// (the partition holding the most is spilled first). Temporary files go when it is dropped.
pub(crate) struct PartitionSpill {
    schema: SchemaRef,
    parts: Vec<Part>,
    index: HashMap<Struct, usize>,
    dir: PathBuf,
    budget: usize,
    in_memory: usize,
    /// Rows pushed.
    pub rows: u64,
    /// Bytes of rows written to temporary files (Arrow's in-memory size).
    pub spilled_bytes: u64,
}

impl PartitionSpill {
    /// An empty split of rows of `schema` keeping at most `budget` bytes in memory.
    pub(crate) fn new(schema: SchemaRef, budget: usize) -> Self {
        Self {
            schema,
            parts: Vec::new(),
            index: HashMap::new(),
            dir: std::env::temp_dir().join(format!("floe-spill-{}", uuid::Uuid::new_v4())),
            budget,
            in_memory: 0,
            rows: 0,
            spilled_bytes: 0,
        }
    }

    /// Adds rows of `partition` (of the split's schema).
    pub(crate) fn push(&mut self, partition: &Struct, batch: RecordBatch) -> Result<()> {
        let i = match self.index.get(partition) {
            Some(i) => *i,
            None => {
                self.parts.push(Part {
                    partition: partition.clone(),
                    memory: Vec::new(),
                    memory_bytes: 0,
                    spill: None,
                });
                self.index.insert(partition.clone(), self.parts.len() - 1);
                self.parts.len() - 1
            }
        };
        self.rows += batch.num_rows() as u64;
        let bytes = batch.get_array_memory_size();
        let part = &mut self.parts[i];
        if let Some((_, w)) = &mut part.spill {
            w.write(&batch)?;
            self.spilled_bytes += bytes as u64;
            return Ok(());
        }
        part.memory.push(batch);
        part.memory_bytes += bytes;
        self.in_memory += bytes;
        while self.in_memory > self.budget {
            let Some(j) = (0..self.parts.len())
                .filter(|j| self.parts[*j].memory_bytes > 0)
                .max_by_key(|j| self.parts[*j].memory_bytes)
            else {
                break;
            };
            self.spill(j)?;
        }
        Ok(())
    }

    fn spill(&mut self, i: usize) -> Result<()> {
        let io = |e: std::io::Error| {
            Error::io(format!(
                "spilling rows to a temporary file under {}",
                std::env::temp_dir().display()
            ))
            .with_source(e)
        };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let part = &mut self.parts[i];
        if part.spill.is_none() {
            let path = self.dir.join(format!("part-{i}.arrow"));
            let f = File::create(&path).map_err(io)?;
            part.spill = Some((path, FileWriter::try_new(BufWriter::new(f), &self.schema)?));
        }
        if let Some((_, w)) = &mut part.spill {
            for b in part.memory.drain(..) {
                w.write(&b)?;
            }
        }
        self.spilled_bytes += part.memory_bytes as u64;
        self.in_memory -= part.memory_bytes;
        part.memory_bytes = 0;
        Ok(())
    }

    /// The partitions, in the order they first arrived.
    pub(crate) fn partitions(&self) -> impl Iterator<Item = &Struct> {
        self.parts.iter().map(|p| &p.partition)
    }

    /// Index of `partition`, if it has rows.
    pub(crate) fn find(&self, partition: &Struct) -> Option<usize> {
        self.index.get(partition).copied()
    }

    /// Number of partitions.
    pub(crate) fn len(&self) -> usize {
        self.parts.len()
    }

    /// Takes partition `i`'s rows out (one batch, arrival order; empty once taken).
    pub(crate) fn take(&mut self, i: usize) -> Result<RecordBatch> {
        let part = self
            .parts
            .get_mut(i)
            .ok_or_else(|| Error::io(format!("spilled partition {i} does not exist")))?;
        let mut batches = std::mem::take(&mut part.memory);
        self.in_memory -= part.memory_bytes;
        part.memory_bytes = 0;
        if let Some((path, mut w)) = part.spill.take() {
            w.finish()?;
            drop(w);
            let f = File::open(&path).map_err(|e| {
                Error::io(format!("reading spilled rows {}", path.display())).with_source(e)
            })?;
            let mut spilled =
                FileReader::try_new(f, None)?.collect::<std::result::Result<Vec<_>, _>>()?;
            spilled.append(&mut batches);
            batches = spilled;
            let _ = std::fs::remove_file(&path);
        }
        Ok(arrow_select::concat::concat_batches(
            &self.schema,
            &batches,
        )?)
    }

    /// The Arrow schema of the rows.
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }
}

impl Drop for PartitionSpill {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Int64Array};
    use iceberg::spec::Literal;
    use std::sync::Arc;

    fn rows(r: std::ops::Range<i64>) -> RecordBatch {
        RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from_iter_values(r)) as _)]).unwrap()
    }

    #[test]
    fn partitions_keep_arrival_order_whether_spilled_or_not() {
        let part = |i: i32| Struct::from_iter([Some(Literal::int(i))]);
        for budget in [0, 1 << 30] {
            let mut s = PartitionSpill::new(rows(0..1).schema(), budget);
            s.push(&part(1), rows(0..10)).unwrap();
            s.push(&part(2), rows(100..105)).unwrap();
            s.push(&part(1), rows(10..20)).unwrap();
            assert_eq!(s.rows, 25);
            assert_eq!(s.spilled_bytes > 0, budget == 0);
            assert_eq!(s.len(), 2);
            assert_eq!(s.find(&part(3)), None);
            let i = s.find(&part(1)).unwrap();
            let b = s.take(i).unwrap();
            let x = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            assert_eq!(x.values().to_vec(), (0..20).collect::<Vec<_>>());
            assert_eq!(s.take(i).unwrap().num_rows(), 0);
            assert_eq!(s.take(s.find(&part(2)).unwrap()).unwrap().num_rows(), 5);
            assert!(s.take(7).is_err());
        }
    }
}
