//! One writer lane: the partitions it owns, their pending rows and rolling Parquet files,
//! kept within the lane's memory budget. A [`DataWriter`](super::DataWriter) runs one lane
//! per core and sends each the rows of the partitions it owns.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_ord::sort::{lexsort_to_indices, SortColumn, SortOptions};
use iceberg::spec::{DataFile, DataFileFormat, NullOrder, PartitionKey, SortDirection, SortOrder};
use iceberg::writer::file_writer::{
    FileWriter, FileWriterBuilder, ParquetWriter, ParquetWriterBuilder,
};
use iceberg::writer::CurrentFileStatus;
use tokio::sync::mpsc;

use super::failed::write_failed;
use super::gather::{BufferPool, Gather};
use super::metrics::finish_data_file;
use super::parquet_props::writer_properties_sized;
use super::runs::{SortKeys, SpilledRuns};
use crate::error::{Error, Result};
use crate::spec::{SchemaRef, TableProperties};
use crate::storage::{join, Storage};

/// Rows buffered per partition before a sort when the table has a sort order.
const SORT_BUFFER_ROWS: usize = 1_000_000;
/// Rows buffered per partition before writing when the table is unsorted.
const WRITE_BUFFER_ROWS: usize = 32_768;
/// The smallest row group size a shared budget gives a file.
const MIN_ROW_GROUP_BYTES: usize = 4 * 1024 * 1024;

/// One batch's rows for one lane: the rows at `rows` (all of them when `None`), in order,
/// cut into consecutive runs, one per partition. The lane copies its partitions' rows out
/// itself, so that the copying runs in parallel.
pub(super) struct Slab {
    pub batch: RecordBatch,
    pub rows: Option<Vec<u32>>,
    pub parts: Vec<SlabPart>,
}

/// What a lane receives.
pub(super) enum LaneMsg {
    /// Rows to write.
    Rows(Slab),
    /// Write every buffered row and close every open file (rows that come later start new
    /// files): the writer was told no more rows of the partitions seen so far will come.
    FinishFiles,
}

/// One partition's run of a [`Slab`]'s rows.
pub(super) struct SlabPart {
    /// `None`: unpartitioned.
    pub key: Option<PartitionKey>,
    /// The partition's path (the lane's name for it; empty when unpartitioned).
    pub id: String,
    pub rows: usize,
}

/// Shared, immutable settings of one write.
pub(super) struct Settings {
    /// The table schema files are written with.
    pub schema: SchemaRef,
    pub spec: Arc<iceberg::spec::PartitionSpec>,
    pub sort: Option<Arc<SortOrder>>,
    /// The table sort order id files record (`None`: unsorted or an ad-hoc order).
    pub sort_order_id: Option<i32>,
    /// Order rows by the z-value of these columns (indexes in the written schema) instead.
    pub zorder: Option<Arc<Vec<usize>>>,
    pub props: TableProperties,
    pub builder: ParquetWriterBuilder,
    /// Columns written without a dictionary (see `high_cardinality_columns`).
    pub plain: Vec<String>,
    /// Bytes of rows a lane buffers before writing every partition out (bytes the rows
    /// fill; growing buffers may have reserved up to twice that).
    pub row_budget: usize,
    /// Bytes of Parquet row groups a lane keeps in progress (encoded pages stay in memory
    /// until a row group is complete). With many partitions open, each new file's row groups
    /// are capped at its partition's share (parquet-mr's memory manager scales row groups
    /// the same way), and the files holding the most are closed early if that is not enough.
    pub row_group_budget: usize,
    pub data_path: String,
    pub storage: Storage,
    pub commit_uuid: uuid::Uuid,
    /// Appended to every file name (a staging job's tag, e.g. `-job-<id>`), or empty.
    pub name_suffix: String,
    /// Where written bytes are counted (the writer's creator's [`crate::progress::Progress`]).
    pub progress: Option<crate::progress::Progress>,
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

/// One open partition: the rolling Parquet writer and the rows waiting to be written.
struct PartitionWriter {
    key: Option<PartitionKey>,
    current: Option<ParquetWriter>,
    /// Where the open file is written (for errors).
    current_path: String,
    /// The row group size the open file caps at.
    row_group_cap: usize,
    /// Pending batches in arrival order (slices of batches the lane has whole, and gathered
    /// rows already sealed into a batch); the rows in `gather` come after them.
    pending: Vec<RecordBatch>,
    gather: Gather,
    buffered_rows: usize,
    buffered_bytes: usize,
    files: Vec<DataFile>,
    /// Sorted runs spilled before the partition's last rows came (a sorted table whose
    /// partition outgrew the buffer or the lane's budget); merged when the lane finishes.
    runs: Option<SpilledRuns>,
}

impl PartitionWriter {
    fn new(key: Option<PartitionKey>, schema: arrow_schema::SchemaRef) -> Self {
        Self {
            key,
            current: None,
            current_path: String::new(),
            row_group_cap: 0,
            pending: Vec::new(),
            gather: Gather::new(schema),
            buffered_rows: 0,
            buffered_bytes: 0,
            files: Vec::new(),
            runs: None,
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

pub(super) async fn run_lane(
    s: Arc<Settings>,
    lane: usize,
    mut rx: mpsc::Receiver<LaneMsg>,
) -> Result<Vec<DataFile>> {
    let mut writers: Vec<PartitionWriter> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    // Files of partitions finished on request.
    let mut done: Vec<DataFile> = Vec::new();
    let mut ls = LaneState {
        index: lane,
        file_seq: 0,
        partitions: 0,
        pool: BufferPool::default(),
    };
    let mut lane_bytes = 0usize;
    // Small pieces are buffered per partition and written in larger runs (sorted first when
    // the table has a sort order).
    let limit = if s.sort.is_some() || s.zorder.is_some() {
        SORT_BUFFER_ROWS
    } else {
        WRITE_BUFFER_ROWS
    };
    let result: Result<()> = async {
        while let Some(msg) = rx.recv().await {
            let slab = match msg {
                LaneMsg::Rows(slab) => slab,
                LaneMsg::FinishFiles => {
                    // Finished partitions are forgotten: they hold no memory, and a new
                    // file's row group share counts only the partitions still open.
                    finish_files(&s, &mut ls, &mut writers).await?;
                    done.extend(writers.drain(..).flat_map(|pw| pw.files));
                    index.clear();
                    ls.partitions = 0;
                    lane_bytes = 0;
                    continue;
                }
            };
            // The slab's partitions, as writer indices with their row counts.
            let mut touched = Vec::with_capacity(slab.parts.len());
            for SlabPart { key, id, rows } in slab.parts {
                let w = *index.entry(id).or_insert_with(|| {
                    writers.push(PartitionWriter::new(key, slab.batch.schema()));
                    ls.partitions = writers.len();
                    writers.len() - 1
                });
                touched.push((w, rows));
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
                    flush_buffer(&s, &mut ls, pw, false).await?;
                }
            }
            if lane_bytes > s.row_budget {
                for pw in writers.iter_mut() {
                    flush_buffer(&s, &mut ls, pw, false).await?;
                }
                lane_bytes = 0;
            }
            keep_row_groups_in_budget(&s, &mut writers).await?;
        }
        Ok(())
    }
    .await;
    result?;
    finish_files(&s, &mut ls, &mut writers).await?;
    done.extend(writers.into_iter().flat_map(|pw| pw.files));
    Ok(done)
}

/// Writes every partition's buffered rows (merging its spilled sorted runs) and closes every
/// open file.
async fn finish_files(
    s: &Settings,
    ls: &mut LaneState,
    writers: &mut [PartitionWriter],
) -> Result<()> {
    for i in 0..writers.len() {
        flush_buffer(s, ls, &mut writers[i], true).await?;
        keep_row_groups_in_budget(s, writers).await?;
    }
    // Close every open file at once: their final writes overlap instead of queueing.
    futures::future::try_join_all(writers.iter_mut().map(|pw| close_current(s, pw))).await?;
    Ok(())
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

/// Writes the partition's pending rows. When rows are ordered (a sort order, or z-order),
/// rows that are not the partition's `last` are sorted and spilled as a run; the last are
/// merged with the spilled runs (if any) into the partition's files, which are then in
/// order end to end.
async fn flush_buffer(
    s: &Settings,
    ls: &mut LaneState,
    pw: &mut PartitionWriter,
    last: bool,
) -> Result<()> {
    let pieces = pw.take_pending()?;
    if pieces.is_empty() && !(last && pw.runs.is_some()) {
        return Ok(());
    }
    let keys: Box<SortKeys<'_>> = match (s.sort.as_deref(), s.zorder.as_deref()) {
        (Some(order), _) => Box::new(move |b: &RecordBatch| sort_columns(b, order, &s.schema)),
        (None, Some(columns)) => Box::new(move |b: &RecordBatch| {
            Ok(vec![SortColumn {
                values: Arc::new(super::zorder::zorder_values(b, columns)?),
                options: None,
            }])
        }),
        // Unordered: the pieces go to the writer as they are (no extra copy).
        (None, None) => {
            for b in pieces {
                write_rolling(s, ls, pw, &b).await?;
                ls.pool.recycle(b);
            }
            return Ok(());
        }
    };
    let schema = match pieces.first() {
        Some(p) => p.schema(),
        None => pw.gather.schema().clone(),
    };
    let batch = arrow_select::concat::concat_batches(&schema, &pieces)?;
    pieces.into_iter().for_each(|p| ls.pool.recycle(p));
    let sorted = sort_by_keys(&batch, &keys)?;
    ls.pool.recycle(batch);
    if !last {
        pw.runs
            .get_or_insert_with(|| SpilledRuns::new(schema))
            .spill(&sorted)?;
        ls.pool.recycle(sorted);
        return Ok(());
    }
    match pw.runs.take() {
        Some(runs) => {
            let mut merge = runs.merge(sorted, &keys)?;
            while let Some(b) = merge.next_chunk(&keys)? {
                write_rolling(s, ls, pw, &b).await?;
            }
        }
        None => {
            write_rolling(s, ls, pw, &sorted).await?;
            ls.pool.recycle(sorted);
        }
    }
    Ok(())
}

/// `batch` sorted by its key columns under `keys`.
fn sort_by_keys(batch: &RecordBatch, keys: &SortKeys<'_>) -> Result<RecordBatch> {
    let cols = keys(batch)?;
    if cols.is_empty() {
        return Ok(batch.clone());
    }
    let idx = lexsort_to_indices(&cols, None)?;
    Ok(arrow_select::take::take_record_batch(batch, &idx)?)
}

/// A batch's sort key columns under a sort order: each field's transform applied to its
/// top-level source column, with the field's direction and null order.
fn sort_columns(
    batch: &RecordBatch,
    order: &SortOrder,
    schema: &iceberg::spec::Schema,
) -> Result<Vec<SortColumn>> {
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
        crate::spec::check_transform(&f.transform)
            .map_err(|e| e.context(format!("sort order field '{name}'")))?;
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
    Ok(cols)
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
                "{:05}-{}-{}-{:05}{}.parquet",
                ls.index, ls.file_seq, s.commit_uuid, ls.index, s.name_suffix
            ),
        );
        ls.file_seq += 1;
        let out = s
            .storage
            .file_io()
            .new_output(&path)
            .map_err(|e| write_failed("data file", &path, e))?;
        let (builder, cap) = s.builder_for(ls.partitions)?;
        let w = builder
            .build(out)
            .await
            .map_err(|e| write_failed("data file", &path, e))?;
        pw.current = Some(w);
        pw.current_path = path;
        pw.row_group_cap = cap;
    }
    let Some(w) = pw.current.as_mut() else {
        return Err(Error::io("data file writer was not opened"));
    };
    w.write(b)
        .await
        .map_err(|e| write_failed("data file", &pw.current_path, e))?;
    if w.current_written_size() as u64 >= s.props.target_file_size_bytes {
        close_current(s, pw).await?;
    }
    Ok(())
}

async fn close_current(s: &Settings, pw: &mut PartitionWriter) -> Result<()> {
    let Some(w) = pw.current.take() else {
        return Ok(());
    };
    let path = &pw.current_path;
    let built = w
        .close()
        .await
        .map_err(|e| write_failed("data file", path, e))?;
    for mut fb in built {
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
        if let Some(p) = &s.progress {
            p.add_bytes_written(f.file_size_in_bytes());
        }
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
