//! A full snapshot split by the staging table's partitions, held in memory up to a budget and
//! spilled to Arrow IPC files beyond it, so ingestion works on one partition at a time.

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
use crate::table::Table;
use crate::write::{Conformer, Partitioner};

struct Part {
    partition: Struct,
    memory: Vec<RecordBatch>,
    memory_bytes: usize,
    spill: Option<(PathBuf, FileWriter<BufWriter<File>>)>,
    rows: u64,
}

/// The snapshot's rows per partition of the table's default spec, in input order within each.
pub(crate) struct SnapshotPartitions {
    schema: SchemaRef,
    parts: Vec<Part>,
    index: HashMap<Struct, usize>,
    dir: PathBuf,
    budget: usize,
    in_memory: usize,
    /// Rows read from the input.
    pub rows: u64,
}

impl SnapshotPartitions {
    /// Reads `input` (conformed to `table`'s schema; every table column must be present) and
    /// splits it by partition. At most `budget` bytes stay in memory.
    pub(crate) fn build<I>(table: &Table, input: I, budget: usize) -> Result<Self>
    where
        I: IntoIterator<Item = Result<RecordBatch>>,
    {
        let md = table.metadata();
        let conformer = Conformer::new(md.current_schema(), &table.name())?;
        let partitioner =
            Partitioner::new(md.default_partition_spec(), md.current_schema().clone())?;
        let dir = std::env::temp_dir().join(format!("floe-ingest-{}", uuid::Uuid::new_v4()));
        let mut out = SnapshotPartitions {
            schema: conformer.schema().clone(),
            parts: Vec::new(),
            index: HashMap::new(),
            dir,
            budget,
            in_memory: 0,
            rows: 0,
        };
        for batch in input {
            let batch = batch?;
            for f in conformer.schema().fields() {
                if batch.schema().field_with_name(f.name()).is_err() {
                    return Err(Error::invalid(format!(
                        "the snapshot has no column '{}' of table {}; a full snapshot must carry every column",
                        f.name(),
                        table.name()
                    )));
                }
            }
            let batch = conformer.conform_from(&batch, "the snapshot", out.rows + 1)?;
            out.rows += batch.num_rows() as u64;
            for (key, rows) in partitioner.split(&batch)? {
                out.push(key.data().clone(), rows)?;
            }
        }
        Ok(out)
    }

    fn push(&mut self, partition: Struct, batch: RecordBatch) -> Result<()> {
        let i = match self.index.get(&partition) {
            Some(i) => *i,
            None => {
                self.parts.push(Part {
                    partition: partition.clone(),
                    memory: Vec::new(),
                    memory_bytes: 0,
                    spill: None,
                    rows: 0,
                });
                self.index.insert(partition, self.parts.len() - 1);
                self.parts.len() - 1
            }
        };
        let bytes = batch.get_array_memory_size();
        let part = &mut self.parts[i];
        part.rows += batch.num_rows() as u64;
        if let Some((_, w)) = &mut part.spill {
            w.write(&batch)?;
            return Ok(());
        }
        part.memory.push(batch);
        part.memory_bytes += bytes;
        self.in_memory += bytes;
        while self.in_memory > self.budget {
            // Spill the partition holding the most memory.
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
            Error::io("spilling snapshot rows to a temporary file").with_source(e)
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
        self.in_memory -= part.memory_bytes;
        part.memory_bytes = 0;
        Ok(())
    }

    /// The partitions, in the order the input first showed them.
    pub(crate) fn partitions(&self) -> impl Iterator<Item = &Struct> {
        self.parts.iter().map(|p| &p.partition)
    }

    /// Index of `partition`, if the snapshot has rows in it.
    pub(crate) fn find(&self, partition: &Struct) -> Option<usize> {
        self.index.get(partition).copied()
    }

    /// Number of partitions.
    pub(crate) fn len(&self) -> usize {
        self.parts.len()
    }

    /// Takes partition `i`'s rows out (one batch, input order).
    pub(crate) fn take(&mut self, i: usize) -> Result<RecordBatch> {
        let part = self
            .parts
            .get_mut(i)
            .ok_or_else(|| Error::io(format!("snapshot partition {i} does not exist")))?;
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

    /// The Arrow schema of the rows (the table's).
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }
}

impl Drop for SnapshotPartitions {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
