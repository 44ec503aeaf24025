//! Arrow batches → Parquet data files: partitioned by the spec, sorted by the sort order,
//! rolled at `write.target-file-size-bytes`, encoded on parallel lanes.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_ord::sort::{lexsort_to_indices, SortColumn, SortOptions};
use iceberg::spec::{DataFile, DataFileFormat, NullOrder, PartitionKey, SortDirection, SortOrder};
use iceberg::writer::file_writer::{
    FileWriter, FileWriterBuilder, ParquetWriter, ParquetWriterBuilder,
};
use iceberg::writer::CurrentFileStatus;
use parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::conform::Conformer;
use super::gather::{BufferPool, Gather};
use super::metrics::finish_data_file;
use super::partition::Partitioner;
use crate::error::{Error, Result};
use crate::spec::{SchemaRef, TableProperties};
use crate::storage::{join, Storage};
use crate::table::Table;

/// Rows buffered per partition before a sort when the table has a sort order.
const SORT_BUFFER_ROWS: usize = 1_000_000;
/// Rows buffered per partition before writing when the table is unsorted.
const WRITE_BUFFER_ROWS: usize = 32_768;
/// Default memory budget of one lane (see [`DataWriter::with_memory_budget`]).
const LANE_MEMORY_BYTES: usize = 256 * 1024 * 1024;
/// The smallest row group size a shared budget gives a file.
const MIN_ROW_GROUP_BYTES: usize = 4 * 1024 * 1024;
/// Rows written to one lane before more lanes are used (keeps small appends in one file).
const SINGLE_LANE_ROWS: u64 = 200_000;

/// Top-level columns whose sampled values are mostly distinct: a dictionary would only cost
/// time (the Parquet writer would fall back to plain encoding after filling it), and with
/// many small files (one per partition) that cost is paid on nearly every value.
fn high_cardinality_columns(sample: &RecordBatch) -> Vec<String> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{
        Date32Type, Float32Type, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType,
    };
    use arrow_schema::{DataType, TimeUnit};
    use std::collections::HashSet;
    let n = sample.num_rows().min(8192);
    if n < 1024 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (f, c) in sample.schema().fields().iter().zip(sample.columns()) {
        let c = c.slice(0, n);
        let distinct = match f.data_type() {
            DataType::Utf8 => c.as_string::<i32>().iter().collect::<HashSet<_>>().len(),
            DataType::LargeUtf8 => c.as_string::<i64>().iter().collect::<HashSet<_>>().len(),
            DataType::Binary => c.as_binary::<i32>().iter().collect::<HashSet<_>>().len(),
            DataType::Int32 => c
                .as_primitive::<Int32Type>()
                .iter()
                .collect::<HashSet<_>>()
                .len(),
            DataType::Date32 => c
                .as_primitive::<Date32Type>()
                .iter()
                .collect::<HashSet<_>>()
                .len(),
            DataType::Int64 => c
                .as_primitive::<Int64Type>()
                .iter()
                .collect::<HashSet<_>>()
                .len(),
            DataType::Timestamp(TimeUnit::Microsecond, _) => c
                .as_primitive::<TimestampMicrosecondType>()
                .iter()
                .collect::<HashSet<_>>()
                .len(),
            DataType::Float64 => c
                .as_primitive::<Float64Type>()
                .iter()
                .map(|v| v.map(f64::to_bits))
                .collect::<HashSet<_>>()
                .len(),
            DataType::Float32 => c
                .as_primitive::<Float32Type>()
                .iter()
                .map(|v| v.map(f32::to_bits))
                .collect::<HashSet<_>>()
                .len(),
            _ => continue,
        };
        if distinct * 2 > n {
            out.push(f.name().clone());
        }
    }
    out
}

pub(crate) fn writer_properties(
    p: &TableProperties,
    plain_columns: &[String],
) -> Result<WriterProperties> {
    writer_properties_sized(p, plain_columns, p.parquet_row_group_size_bytes as usize)
}

/// [`writer_properties`] with row groups of at most `row_group_bytes`.
fn writer_properties_sized(
    p: &TableProperties,
    plain_columns: &[String],
    row_group_bytes: usize,
) -> Result<WriterProperties> {
    let level = p.parquet_compression_level;
    let codec = match p.parquet_compression.as_str() {
        "zstd" => Compression::ZSTD(
            ZstdLevel::try_new(level.unwrap_or(1))
                .map_err(|e| Error::invalid(format!("write.parquet.compression-level: {e}")))?,
        ),
        "snappy" => Compression::SNAPPY,
        "gzip" => Compression::GZIP(
            GzipLevel::try_new(level.unwrap_or(6) as u32)
                .map_err(|e| Error::invalid(format!("write.parquet.compression-level: {e}")))?,
        ),
        "lz4" => Compression::LZ4_RAW,
        "brotli" => Compression::BROTLI(
            BrotliLevel::try_new(level.unwrap_or(1) as u32)
                .map_err(|e| Error::invalid(format!("write.parquet.compression-level: {e}")))?,
        ),
        _ => Compression::UNCOMPRESSED,
    };
    let mut b = WriterProperties::builder()
        .set_compression(codec)
        .set_max_row_group_bytes(Some(row_group_bytes))
        .set_max_row_group_row_count(None)
        .set_data_page_size_limit(p.parquet_page_size_bytes)
        .set_dictionary_page_size_limit(p.parquet_dict_size_bytes);
    for c in plain_columns {
        b = b.set_column_dictionary_enabled(
            parquet::schema::types::ColumnPath::from(c.as_str()),
            false,
        );
    }
    Ok(b.build())
}

/// One batch's rows for one lane: the rows at `rows` (all of them when `None`), in order,
/// cut into consecutive runs of `parts` rows per partition (`None`: unpartitioned). The lane
/// copies its partitions' rows out itself, so that the copying runs in parallel.
struct Slab {
    batch: RecordBatch,
    rows: Option<Vec<u32>>,
    parts: Vec<(Option<PartitionKey>, usize)>,
}

/// A lane's inbox and task (each `None` once the lane was told to finish / was awaited).
type Lane = (
    Option<mpsc::Sender<Slab>>,
    Option<JoinHandle<Result<Vec<DataFile>>>>,
);

/// Shared, immutable settings of one write.
struct Settings {
    schema: SchemaRef,
    spec: Arc<iceberg::spec::PartitionSpec>,
    sort: Option<Arc<SortOrder>>,
    /// The table sort order id files record (`None`: unsorted or an ad-hoc order).
    sort_order_id: Option<i32>,
    props: TableProperties,
    builder: ParquetWriterBuilder,
    /// Columns written without a dictionary (see `high_cardinality_columns`).
    plain: Vec<String>,
    /// Bytes of rows a lane buffers before writing every partition out (bytes the rows
    /// fill; growing buffers may have reserved up to twice that).
    row_budget: usize,
    /// Bytes of Parquet row groups a lane keeps in progress (encoded pages stay in memory
    /// until a row group is complete). With many partitions open, each new file's row groups
    /// are capped at its partition's share (parquet-mr's memory manager scales row groups
    /// the same way), and the files holding the most are closed early if that is not enough.
    row_group_budget: usize,
    data_path: String,
    storage: Storage,
    commit_uuid: uuid::Uuid,
}

impl Settings {
    /// The writer for a new file of a lane that writes `partitions` partitions (each may
    /// have a file open), and the row group size it caps at: one partition's share of the
    /// lane's row group budget, or the table's when that is smaller.
    fn builder_for(&self, partitions: usize) -> Result<(ParquetWriterBuilder, usize)> {
        let table = self.props.parquet_row_group_size_bytes as usize;
        let share = row_group_share(table, partitions, self.row_group_budget);
        if share >= table {
            return Ok((self.builder.clone(), table));
        }
        let props = writer_properties_sized(&self.props, &self.plain, share)?;
        Ok((ParquetWriterBuilder::new(props, self.schema.clone()), share))
    }
}

/// The row group size of a new file in a lane writing `partitions` partitions: the table's,
/// or the partition's share of the lane's row group `budget` when that is smaller.
fn row_group_share(table: usize, partitions: usize, budget: usize) -> usize {
    (budget / partitions.max(1))
        .max(MIN_ROW_GROUP_BYTES)
        .min(table)
}

/// One lane's running state: its number, files started, partitions seen and reusable
/// buffers.
struct LaneState {
    index: usize,
    file_seq: usize,
    partitions: usize,
    pool: BufferPool,
}

/// Writes data files for one table; commits nothing (see [`crate::txn::append_files`]).
pub struct DataWriter {
    conformer: Conformer,
    /// Settings until the first batch starts the lanes (which then share them).
    pending: Option<Settings>,
    lane_count: usize,
    lanes: Vec<Lane>,
    partitioner: Option<Partitioner>,
    /// Which lane owns each partition (assigned round-robin on first sight), so that every
    /// partition is written by one lane into as few files as possible.
    partition_lanes: HashMap<String, usize>,
    /// Rows sent to each lane (unpartitioned writes go to the least loaded one).
    lane_rows: Vec<u64>,
    rows: u64,
    orphans: Vec<DataFile>,
    /// Batches held back until there are enough rows to choose encodings from.
    early: Vec<RecordBatch>,
}

/// Rows the encoding choice samples (see `high_cardinality_columns`).
const SAMPLE_ROWS: usize = 1024;

impl DataWriter {
    /// A writer for the table's current schema, default spec and sort order.
    pub fn new(table: &Table) -> Result<Self> {
        let lanes = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(1, 8);
        Self::with_lanes(table, lanes)
    }

    /// A writer encoding on `lanes` parallel tasks (each writes its own files).
    pub fn with_lanes(table: &Table, lanes: usize) -> Result<Self> {
        let md = table.metadata();
        let props = table.properties()?;
        let schema = md.current_schema().clone();
        let sort = md.default_sort_order();
        let sort = (!sort.fields.is_empty()).then(|| sort.clone());
        let data_path = props
            .data_path
            .clone()
            .unwrap_or_else(|| join(md.location(), "data"));
        // Built now so that a bad property fails before any data is read; the first batch
        // may still switch dictionaries off for some columns (see `start`).
        let settings = Settings {
            builder: ParquetWriterBuilder::new(writer_properties(&props, &[])?, schema.clone()),
            plain: Vec::new(),
            row_budget: LANE_MEMORY_BYTES / 2,
            row_group_budget: LANE_MEMORY_BYTES / 2,
            schema: schema.clone(),
            spec: md.default_partition_spec().clone(),
            sort_order_id: sort.as_ref().map(|o| o.order_id as i32),
            sort,
            props,
            data_path,
            storage: table.storage().clone(),
            commit_uuid: uuid::Uuid::new_v4(),
        };
        Ok(Self {
            conformer: Conformer::new(&schema, &table.name())?,
            pending: Some(settings),
            early: Vec::new(),
            lane_count: lanes.max(1),
            lanes: Vec::new(),
            partitioner: None,
            partition_lanes: HashMap::new(),
            lane_rows: vec![0; lanes.max(1)],
            rows: 0,
            orphans: Vec::new(),
        })
    }

    /// Sorts rows by `order` instead of the table's sort order (`None`: not at all). Files
    /// record the order's id only when it is one of the table's sort orders.
    pub fn with_sort_order(mut self, order: Option<SortOrder>, table: &Table) -> Self {
        if let Some(s) = self.pending.as_mut() {
            s.sort_order_id = order.as_ref().and_then(|o| {
                table
                    .metadata()
                    .sort_orders_iter()
                    .find(|t| t.fields == o.fields)
                    .map(|t| t.order_id as i32)
            });
            s.sort = order.filter(|o| !o.fields.is_empty()).map(Arc::new);
        }
        self
    }

    /// v3: also writes the row lineage columns `_row_id` and `_last_updated_sequence_number`
    /// (the input's columns of those names), so rewritten rows keep their identity
    /// (before the first write).
    pub fn with_row_lineage(mut self, table: &Table) -> Result<Self> {
        if let Some(s) = self.pending.as_mut() {
            let mut fields: Vec<iceberg::spec::NestedFieldRef> =
                s.schema.as_struct().fields().to_vec();
            for (id, name) in [
                (crate::scan::ROW_ID_FIELD_ID, "_row_id"),
                (
                    crate::scan::LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID,
                    "_last_updated_sequence_number",
                ),
            ] {
                fields.push(Arc::new(iceberg::spec::NestedField::optional(
                    id,
                    name,
                    iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Long),
                )));
            }
            let schema = Arc::new(
                iceberg::spec::Schema::builder()
                    .with_schema_id(s.schema.schema_id())
                    .with_fields(fields)
                    .build()?,
            );
            s.builder =
                ParquetWriterBuilder::new(writer_properties(&s.props, &[])?, schema.clone());
            s.schema = schema.clone();
            self.conformer = Conformer::new(&schema, &table.name())?;
        }
        Ok(self)
    }

    /// Partitions rows by `spec` instead of the table's default spec, and records its id in
    /// the files written (before the first write). The spec must be one of the table's.
    pub fn with_partition_spec(mut self, spec: Arc<iceberg::spec::PartitionSpec>) -> Self {
        if let Some(s) = self.pending.as_mut() {
            s.spec = spec;
        }
        self
    }

    /// Rolls files at `bytes` instead of the table's `write.target-file-size-bytes`
    /// (before the first write).
    pub fn with_target_file_size(mut self, bytes: u64) -> Self {
        if let Some(s) = self.pending.as_mut() {
            s.props.target_file_size_bytes = bytes.max(1);
        }
        self
    }

    /// Caps what each writer lane (one per core) holds in memory at about `bytes` (default
    /// 256 MB): half for rows waiting to be written, half for Parquet row groups in progress
    /// (before the first write). A smaller budget writes smaller row groups, and with many
    /// partitions more, smaller files.
    pub fn with_memory_budget(mut self, bytes: usize) -> Self {
        if let Some(s) = self.pending.as_mut() {
            s.row_budget = (bytes / 2).max(1);
            s.row_group_budget = (bytes / 2).max(1);
        }
        self
    }

    /// Starts the lanes, with encodings chosen from the first batch.
    fn start(&mut self, first: &RecordBatch) -> Result<()> {
        let Some(mut settings) = self.pending.take() else {
            return Ok(());
        };
        let plain = high_cardinality_columns(first);
        if !plain.is_empty() {
            settings.builder = ParquetWriterBuilder::new(
                writer_properties(&settings.props, &plain)?,
                settings.schema.clone(),
            );
            settings.plain = plain;
        }
        if !settings.spec.is_unpartitioned() {
            self.partitioner = Some(Partitioner::new(&settings.spec, settings.schema.clone())?);
        }
        let settings = Arc::new(settings);
        self.lanes = (0..self.lane_count)
            .map(|i| {
                let (tx, rx) = mpsc::channel(2);
                (
                    Some(tx),
                    Some(tokio::spawn(run_lane(settings.clone(), i, rx))),
                )
            })
            .collect();
        Ok(())
    }

    /// Rows accepted so far.
    pub fn rows_written(&self) -> u64 {
        self.rows
    }

    /// Writes one batch (columns matched to the table schema by name).
    pub async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let batch = self.conformer.conform(&batch)?;
        self.rows += batch.num_rows() as u64;
        if self.pending.is_none() {
            return self.dispatch(batch).await;
        }
        // Encodings are chosen from a sample of at least SAMPLE_ROWS rows (a copy-on-write
        // rewrite may start with a handful of changed rows).
        self.early.push(batch);
        if self.early.iter().map(|b| b.num_rows()).sum::<usize>() < SAMPLE_ROWS {
            return Ok(());
        }
        self.start_early().await
    }

    /// Starts the lanes from the held-back batches and sends them.
    async fn start_early(&mut self) -> Result<()> {
        let early = std::mem::take(&mut self.early);
        let Some(first) = early.first() else {
            return Ok(());
        };
        let sample = arrow_select::concat::concat_batches(&first.schema(), &early)?;
        self.start(&sample)?;
        self.dispatch(sample).await
    }

    async fn dispatch(&mut self, batch: RecordBatch) -> Result<()> {
        let mut per_lane: Vec<Option<Slab>> = (0..self.lanes.len()).map(|_| None).collect();
        match &self.partitioner {
            None => {
                let n = batch.num_rows();
                // The lane with the fewest rows so far (lane 0 alone for small appends).
                let lane = if self.rows <= SINGLE_LANE_ROWS {
                    0
                } else {
                    (0..self.lane_rows.len())
                        .min_by_key(|l| self.lane_rows[*l])
                        .unwrap_or(0)
                };
                self.lane_rows[lane] += n as u64;
                per_lane[lane] = Some(Slab {
                    batch,
                    rows: None,
                    parts: vec![(None, n)],
                });
            }
            Some(p) => {
                let groups = p.groups(&batch)?;
                let mut rows: Vec<Vec<u32>> = vec![Vec::new(); per_lane.len()];
                let mut parts: Vec<Vec<(Option<PartitionKey>, usize)>> =
                    vec![Vec::new(); per_lane.len()];
                for (key, r) in groups.parts {
                    let n = self.partition_lanes.len();
                    let lane = *self
                        .partition_lanes
                        .entry(key.to_path())
                        .or_insert(n % per_lane.len());
                    match &groups.order {
                        Some(order) => rows[lane].extend_from_slice(&order[r.clone()]),
                        None => rows[lane].extend(r.start as u32..r.end as u32),
                    }
                    parts[lane].push((Some(key), r.len()));
                }
                for (lane, (rows, parts)) in rows.into_iter().zip(parts).enumerate() {
                    if parts.is_empty() {
                        continue;
                    }
                    // All of the batch, in order: no copy needed.
                    let all = rows.len() == batch.num_rows()
                        && rows.iter().enumerate().all(|(i, r)| *r as usize == i);
                    per_lane[lane] = Some(Slab {
                        batch: batch.clone(),
                        rows: (!all).then_some(rows),
                        parts,
                    });
                }
            }
        }
        for (lane, slab) in per_lane.into_iter().enumerate() {
            let Some(slab) = slab else {
                continue;
            };
            let sent = match &self.lanes[lane].0 {
                Some(tx) => tx.send(slab).await.is_ok(),
                None => false,
            };
            if !sent {
                // The lane stopped: surface its error.
                let (tx, handle) = &mut self.lanes[lane];
                tx.take();
                if let Some(h) = handle.take() {
                    let files = h
                        .await
                        .map_err(|e| Error::io("writer lane panicked").with_source(e))??;
                    // Keep what it wrote so abort() can delete it.
                    self.orphans.extend(files);
                }
                return Err(Error::io("writer lane stopped unexpectedly"));
            }
        }
        Ok(())
    }

    /// Stops writing and deletes every file written so far (nothing was committed).
    pub async fn abort(self, storage: &Storage) {
        if let Ok(files) = self.close().await {
            for f in files {
                let _ = storage.delete(f.file_path()).await;
            }
        }
    }

    /// Flushes and closes every file; returns the data files written.
    pub async fn close(mut self) -> Result<Vec<DataFile>> {
        self.start_early().await?;
        let mut files = Vec::new();
        let mut first_err = None;
        files.append(&mut self.orphans);
        // Every lane is told first, so that their final flushes run at the same time.
        for (tx, _) in self.lanes.iter_mut() {
            tx.take();
        }
        for (_, handle) in self.lanes.iter_mut() {
            let Some(handle) = handle.take() else {
                continue;
            };
            match handle.await {
                Ok(Ok(f)) => files.extend(f),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(e) => {
                    first_err.get_or_insert(Error::io("writer lane panicked").with_source(e));
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        Ok(files)
    }
}

/// One open partition: the rolling Parquet writer and the rows waiting to be written.
struct PartitionWriter {
    key: Option<PartitionKey>,
    current: Option<ParquetWriter>,
    /// The row group size the open file caps at.
    row_group_cap: usize,
    /// Pending batches in arrival order (slices of batches the lane has whole, and gathered
    /// rows already sealed into a batch); the rows in `gather` come after them.
    pending: Vec<RecordBatch>,
    gather: Gather,
    buffered_rows: usize,
    buffered_bytes: usize,
    files: Vec<DataFile>,
}

impl PartitionWriter {
    fn new(key: Option<PartitionKey>, schema: arrow_schema::SchemaRef) -> Self {
        Self {
            key,
            current: None,
            row_group_cap: 0,
            pending: Vec::new(),
            gather: Gather::new(schema),
            buffered_rows: 0,
            buffered_bytes: 0,
            files: Vec::new(),
        }
    }

    /// An upper bound of the open file's bytes held in memory: its row group in progress is
    /// at most its cap and at most all it has written.
    fn in_memory(&self) -> usize {
        self.current
            .as_ref()
            .map_or(0, |w| w.current_written_size().min(self.row_group_cap))
    }

    /// Queues a slice of a batch the lane has whole, charged `bytes`.
    fn push(&mut self, slice: RecordBatch, bytes: usize) -> Result<()> {
        self.seal()?;
        self.buffered_rows += slice.num_rows();
        self.buffered_bytes += bytes;
        self.pending.push(slice);
        Ok(())
    }

    /// Moves the gathered rows into `pending`, keeping arrival order.
    fn seal(&mut self) -> Result<()> {
        if let Some(b) = self.gather.finish()? {
            self.pending.push(b);
        }
        Ok(())
    }

    /// Every pending batch, in arrival order; the buffers start empty.
    fn take_pending(&mut self) -> Result<Vec<RecordBatch>> {
        self.seal()?;
        self.buffered_rows = 0;
        self.buffered_bytes = 0;
        Ok(std::mem::take(&mut self.pending))
    }
}

async fn run_lane(
    s: Arc<Settings>,
    lane: usize,
    mut rx: mpsc::Receiver<Slab>,
) -> Result<Vec<DataFile>> {
    let mut writers: Vec<PartitionWriter> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut ls = LaneState {
        index: lane,
        file_seq: 0,
        partitions: 0,
        pool: BufferPool::default(),
    };
    let mut lane_bytes = 0usize;
    // Small pieces are buffered per partition and written in larger runs (sorted first when
    // the table has a sort order).
    let limit = if s.sort.is_some() {
        SORT_BUFFER_ROWS
    } else {
        WRITE_BUFFER_ROWS
    };
    let result: Result<()> = async {
        while let Some(slab) = rx.recv().await {
            // The slab's partitions, as writer indices with their row counts.
            let mut touched = Vec::with_capacity(slab.parts.len());
            for (key, len) in slab.parts {
                let id = key.as_ref().map(|k| k.to_path()).unwrap_or_default();
                let w = *index.entry(id).or_insert_with(|| {
                    writers.push(PartitionWriter::new(key, slab.batch.schema()));
                    ls.partitions = writers.len();
                    writers.len() - 1
                });
                touched.push((w, len));
            }
            match &slab.rows {
                Some(rows) => {
                    lane_bytes +=
                        gather_slab(&mut writers, &touched, &slab.batch, rows, &mut ls.pool)?
                }
                // Slices of a batch this lane has whole: each is charged its share.
                None => {
                    let mut offset = 0;
                    for &(w, len) in &touched {
                        let bytes =
                            slab.batch.get_array_memory_size() * len / slab.batch.num_rows().max(1);
                        writers[w].push(slab.batch.slice(offset, len), bytes)?;
                        lane_bytes += bytes;
                        offset += len;
                    }
                }
            }
            for &(w, _) in &touched {
                let pw = &mut writers[w];
                if pw.buffered_rows >= limit {
                    lane_bytes -= pw.buffered_bytes;
                    flush_buffer(&s, &mut ls, pw).await?;
                }
            }
            if lane_bytes > s.row_budget {
                for pw in writers.iter_mut() {
                    flush_buffer(&s, &mut ls, pw).await?;
                }
                lane_bytes = 0;
            }
            keep_row_groups_in_budget(&s, &mut writers).await?;
        }
        Ok(())
    }
    .await;
    result?;
    for i in 0..writers.len() {
        flush_buffer(&s, &mut ls, &mut writers[i]).await?;
        keep_row_groups_in_budget(&s, &mut writers).await?;
    }
    // Close every open file at once: their final writes overlap instead of queueing.
    futures::future::try_join_all(writers.iter_mut().map(|pw| close_current(&s, pw))).await?;
    Ok(writers.into_iter().flat_map(|pw| pw.files).collect())
}

/// Closes the open files holding the most in memory until the lane's row groups in progress
/// fit its budget again (files whose partitions were capped when few were known, or too
/// many partitions for the floor). Their partitions continue in new files.
async fn keep_row_groups_in_budget(s: &Settings, writers: &mut [PartitionWriter]) -> Result<()> {
    let mut total: usize = writers.iter().map(PartitionWriter::in_memory).sum();
    while total > s.row_group_budget {
        let Some(pw) = writers.iter_mut().max_by_key(|w| w.in_memory()) else {
            break;
        };
        let held = pw.in_memory();
        if held == 0 {
            break;
        }
        close_current(s, pw).await?;
        total -= held;
    }
    Ok(())
}

/// Copies each touched partition's rows (consecutive runs of `rows`, `touched` giving the
/// writer and row count of each) into that partition's buffers; returns the bytes added.
/// The copies are what the partitions are charged: they keep none of `batch` alive.
fn gather_slab(
    writers: &mut [PartitionWriter],
    touched: &[(usize, usize)],
    batch: &RecordBatch,
    rows: &[u32],
    pool: &mut BufferPool,
) -> Result<usize> {
    let mut runs: Vec<Option<std::ops::Range<usize>>> = vec![None; writers.len()];
    let mut offset = 0;
    for &(w, len) in touched {
        let r = offset..offset + len;
        offset += len;
        // A partition whose 32-bit offsets are full is sealed first (it keeps its charge).
        if !writers[w].gather.fits(batch, &rows[r.clone()])? {
            writers[w].seal()?;
        }
        if runs[w].replace(r).is_some() {
            return Err(Error::io("a partition was listed twice for one batch"));
        }
    }
    let before: Vec<usize> = touched
        .iter()
        .map(|&(w, _)| writers[w].gather.bytes())
        .collect();
    let mut targets: Vec<(&mut Gather, &[u32])> = writers
        .iter_mut()
        .zip(&runs)
        .filter_map(|(pw, r)| Some((&mut pw.gather, &rows[r.clone()?])))
        .collect();
    super::gather::append_all(batch, &mut targets, pool)?;
    let mut added = 0;
    for (&(w, len), before) in touched.iter().zip(before) {
        let pw = &mut writers[w];
        let bytes = pw.gather.bytes().saturating_sub(before);
        pw.buffered_rows += len;
        pw.buffered_bytes += bytes;
        added += bytes;
    }
    Ok(added)
}

async fn flush_buffer(s: &Settings, ls: &mut LaneState, pw: &mut PartitionWriter) -> Result<()> {
    let pieces = pw.take_pending()?;
    if pieces.is_empty() {
        return Ok(());
    }
    match s.sort.as_deref() {
        Some(order) => {
            let batch = arrow_select::concat::concat_batches(&pieces[0].schema(), &pieces)?;
            pieces.into_iter().for_each(|p| ls.pool.recycle(p));
            let sorted = sort_batch(&batch, order, &s.schema)?;
            ls.pool.recycle(batch);
            write_rolling(s, ls, pw, &sorted).await?;
            ls.pool.recycle(sorted);
        }
        // Unsorted: the pieces go to the writer as they are (no extra copy).
        None => {
            for b in pieces {
                write_rolling(s, ls, pw, &b).await?;
                ls.pool.recycle(b);
            }
        }
    }
    Ok(())
}

/// Sorts a batch by a sort order (transforms applied to top-level source columns).
pub(crate) fn sort_batch(
    batch: &RecordBatch,
    order: &SortOrder,
    schema: &iceberg::spec::Schema,
) -> Result<RecordBatch> {
    let mut cols = Vec::new();
    for f in &order.fields {
        let name = schema.name_by_field_id(f.source_id).ok_or_else(|| {
            Error::invalid(format!("sort field {} is not in the schema", f.source_id))
        })?;
        let idx = batch.schema().index_of(name).map_err(|_| {
            Error::unsupported(format!(
                "sorting by nested column '{name}' is not supported"
            ))
        })?;
        let func = iceberg::transform::create_transform_function(&f.transform)?;
        let values: ArrayRef = func.transform(batch.column(idx).clone())?;
        cols.push(SortColumn {
            values,
            options: Some(SortOptions {
                descending: f.direction == SortDirection::Descending,
                nulls_first: f.null_order == NullOrder::First,
            }),
        });
    }
    if cols.is_empty() {
        return Ok(batch.clone());
    }
    let idx = lexsort_to_indices(&cols, None)?;
    let columns = batch
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c.as_ref(), &idx, None))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// Fewest rows handed to the Parquet writer at a time; the roll check runs between chunks.
const ROLL_CHECK_ROWS: usize = 1024;

async fn write_rolling(
    s: &Settings,
    ls: &mut LaneState,
    pw: &mut PartitionWriter,
    b: &RecordBatch,
) -> Result<()> {
    // Check for rolling often enough that a file overshoots its target by at most ~1/8.
    let bytes_per_row = (b.get_array_memory_size() / b.num_rows().max(1)).max(1) as u64;
    let chunk =
        ((s.props.target_file_size_bytes / 8) / bytes_per_row).max(ROLL_CHECK_ROWS as u64) as usize;
    let mut offset = 0;
    while offset < b.num_rows() {
        let len = chunk.min(b.num_rows() - offset);
        write_chunk(s, ls, pw, &b.slice(offset, len)).await?;
        offset += len;
    }
    Ok(())
}

async fn write_chunk(
    s: &Settings,
    ls: &mut LaneState,
    pw: &mut PartitionWriter,
    b: &RecordBatch,
) -> Result<()> {
    if pw.current.is_none() {
        let dir = match &pw.key {
            Some(k) => join(&s.data_path, &k.to_path()),
            None => s.data_path.clone(),
        };
        let path = join(
            &dir,
            &format!(
                "{:05}-{}-{}-{:05}.parquet",
                ls.index, ls.file_seq, s.commit_uuid, ls.index
            ),
        );
        ls.file_seq += 1;
        let out = s.storage.file_io().new_output(&path)?;
        let (builder, cap) = s.builder_for(ls.partitions)?;
        pw.current = Some(builder.build(out).await?);
        pw.row_group_cap = cap;
    }
    let Some(w) = pw.current.as_mut() else {
        return Err(Error::io("data file writer was not opened"));
    };
    w.write(b).await?;
    if w.current_written_size() as u64 >= s.props.target_file_size_bytes {
        close_current(s, pw).await?;
    }
    Ok(())
}

async fn close_current(s: &Settings, pw: &mut PartitionWriter) -> Result<()> {
    let Some(w) = pw.current.take() else {
        return Ok(());
    };
    for mut fb in w.close().await? {
        fb.content(iceberg::spec::DataContentType::Data)
            .file_format(DataFileFormat::Parquet);
        match &pw.key {
            Some(k) => fb.partition(k.data().clone()),
            None => fb.partition(iceberg::spec::Struct::empty()),
        };
        if let Some(id) = s.sort_order_id {
            fb.sort_order_id(id);
        }
        let f = fb
            .build()
            .map_err(|e| Error::io(format!("building data file entry: {e}")))?;
        pw.files
            .push(finish_data_file(f, &s.schema, &s.props, s.spec.spec_id())?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_groups_share_the_lane_budget() {
        let mb = 1024 * 1024;
        // Few partitions: the table's size.
        let budget = 256 * mb;
        assert_eq!(row_group_share(128 * mb, 0, budget), 128 * mb);
        assert_eq!(row_group_share(128 * mb, 2, budget), 128 * mb);
        // Many: their share, never below the floor, never above the table's.
        assert_eq!(row_group_share(128 * mb, 16, budget), 16 * mb);
        assert_eq!(
            row_group_share(128 * mb, 10_000, budget),
            MIN_ROW_GROUP_BYTES
        );
        assert_eq!(row_group_share(8 * mb, 16, budget), 8 * mb);
        // Every open file's row group together stays within the budget down to the floor.
        for n in [3usize, 15, 30, 64] {
            assert!(n * row_group_share(128 * mb, n, budget) <= budget);
        }
    }
}
