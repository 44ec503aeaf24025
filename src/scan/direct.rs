//! The direct read path: a data file whose columns carry field ids is decoded by arrow-rs's
//! Parquet reader (a local file mapped and decoded on a blocking thread, a remote one read by
//! byte ranges; in parts of about equal rows on several cores when the scan has cores to
//! spare), its columns projected onto the table's schema by field id at every nesting
//! level (`adapt`), row groups and pages the filter rules out skipped, deleted positions
//! skipped through a `RowSelection`, and the row filter evaluated inside the decoder when it
//! reads fewer columns than the scan returns (late materialization; row positions then come
//! from the decoder's row numbers). The bytes the decoder fetches are counted. A panic while
//! decoding is an error item. Files without field ids go to the general reader (name mapping).

mod chunks;
mod prune;
mod row_filter;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef as ArrowSchemaRef;
use futures::StreamExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use roaring::RoaringTreemap;

use super::adapt::{self, Adapt};
use crate::error::{Error, Result};
use crate::expr::BoundExpr;
use crate::storage::Storage;
use chunks::{fetch_blooms, Blooms, CountedBytes, Fetched, RangeReader};
use prune::{prune_row_groups, RowGroupChoice};
use row_filter::{row_filter, FilterError};

/// Field ids at or above this are Iceberg's reserved metadata columns (row lineage): a file
/// without them reads as NULLs (inherited values), not as a schema mismatch.
const RESERVED_FIELD_IDS: i32 = 2_147_483_000;

/// Where a target column comes from in a file.
#[derive(Debug)]
enum Source {
    /// The file's root column at this index, adapted.
    Column(usize, Adapt),
    /// The file lacks it: every row is this default (`None`: null, also for reserved metadata
    /// columns, whose values are inherited).
    Fill(Option<iceberg::spec::Literal>),
}

/// The file's root columns the sources read.
fn file_roots(sources: &[Source]) -> Vec<usize> {
    sources
        .iter()
        .filter_map(|s| match s {
            Source::Column(i, _) => Some(*i),
            Source::Fill(_) => None,
        })
        .collect()
}

/// Plans the direct read of a file: where each target column comes from, matched by field id
/// at every nesting level, or `None` when the file needs the general reader (a file without
/// field ids, read through a name mapping; a type change the spec does not allow).
fn sources_for(
    file_schema: &arrow_schema::Schema,
    target: &ArrowSchemaRef,
    schema: &iceberg::spec::Schema,
) -> Option<Vec<Source>> {
    let file_ids: Vec<Option<i32>> = file_schema
        .fields()
        .iter()
        .map(|f| adapt::field_id(f))
        .collect();
    if file_ids.iter().all(Option::is_none) && !file_schema.fields().is_empty() {
        return None;
    }
    let mut sources = Vec::with_capacity(target.fields().len());
    for tf in target.fields() {
        let id = adapt::field_id(tf)?;
        let found = file_ids.iter().position(|f| *f == Some(id));
        sources.push(match found {
            Some(i) => Source::Column(
                i,
                adapt::plan(file_schema.field(i).data_type(), tf.data_type(), schema)?,
            ),
            None if id >= RESERVED_FIELD_IDS => Source::Fill(None),
            None => Source::Fill(adapt::initial_default(schema, id)),
        });
    }
    let mut roots = file_roots(&sources);
    let n = roots.len();
    roots.sort_unstable();
    roots.dedup();
    (roots.len() == n).then_some(sources)
}

/// Reorders and adapts a decoded batch (the projected file columns, in file order) into the
/// target schema.
fn shape(
    b: &RecordBatch,
    sources: &[Source],
    order: &[usize],
    target: &ArrowSchemaRef,
    schema: &iceberg::spec::Schema,
    path: &str,
) -> Result<RecordBatch> {
    let cols = sources
        .iter()
        .zip(target.fields())
        .map(|(s, f)| match s {
            Source::Column(i, a) => {
                let at = order.iter().position(|o| o == i).unwrap_or(0);
                adapt::apply(b.column(at), a, f.data_type(), schema)
            }
            Source::Fill(d) => adapt::fill(d.as_ref(), schema, f, b.num_rows()),
        })
        .collect::<Result<Vec<_>>>()
        .map_err(|e| e.context(format!("data file '{path}'")))?;
    let opts = arrow_array::RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
    RecordBatch::try_new_with_options(target.clone(), cols, &opts)
        .map_err(|e| Error::corrupt(format!("data file '{path}': {e}")))
}

/// The file mapped into memory (`None` when it cannot be mapped, e.g. when empty): pages are
/// then decompressed straight from the page cache instead of being copied out by `read`
/// first (measured: a full scan 5-6% faster).
fn map_file(file: &std::fs::File) -> Option<bytes::Bytes> {
    // SAFETY: the mapping is only read. Iceberg data files are immutable once written: no
    // writer changes or truncates a file after its commit (deletes unlink it, which leaves
    // an open mapping intact).
    let map = unsafe { memmap2::Mmap::map(file) }.ok()?;
    Some(bytes::Bytes::from_owner(map))
}

/// A direct read's batches, each through the read's [`BatchStep`] (with their rows' positions
/// when the filter ran in the decoder and positions were asked for).
pub(super) type Batches = futures::stream::BoxStream<'static, Result<Positioned>>;

/// A batch in the target shape, and its rows' positions in the file when the reader returns
/// them.
pub(super) type Positioned = (RecordBatch, Option<arrow_array::UInt64Array>);

/// What each decoded batch goes through on the thread that decoded it, while its buffers are
/// still in that core's cache (removing deleted rows moves most of a batch's bytes); `None`
/// drops the batch.
pub(super) type BatchStep = Box<dyn FnMut(Positioned) -> Result<Option<Positioned>> + Send>;

/// Makes the [`BatchStep`] of a read once its footer is known, one per part of a file read
/// in parts: from the position ranges the reader leaves out (row groups, pages, the other
/// parts) and whether the row filter runs in the decoder (late materialization: the batches
/// then hold only the rows it keeps).
pub(super) type ThenStep = Box<dyn Fn(&[(u64, u64)], bool) -> BatchStep + Send + Sync>;

/// A batch through the read's step, if it has one.
fn then(step: &mut Option<BatchStep>, b: Positioned) -> Result<Option<Positioned>> {
    match step {
        Some(step) => step(b),
        None => Ok(Some(b)),
    }
}

/// How a file is read, decided from its footer: the configured reader builder, where each
/// target column comes from, the projected file columns in file order, and the position
/// ranges left out (row groups, pages, the rows outside the part read).
struct Configured<T> {
    builder: parquet::arrow::arrow_reader::ArrowReaderBuilder<T>,
    shaping: Shaping,
    pruned: Vec<(u64, u64)>,
}

/// What a read of a file covers, decided once per file (the scan's counters count it),
/// whatever the parts it is read in: the row groups `filter` (if any) leaves, by
/// statistics, bloom filters and the page index; without one, every row group.
fn choose_row_groups(
    meta: &parquet::file::metadata::ParquetMetaData,
    filter: Option<&crate::scan::RowGroupFilter>,
    blooms: &Blooms,
) -> RowGroupChoice {
    if let Some(f) = filter {
        return prune_row_groups(meta, blooms, f);
    }
    let mut start = 0u64;
    let read = meta
        .row_groups()
        .iter()
        .map(|g| {
            let r = (start, start + g.num_rows().max(0) as u64);
            start = r.1;
            r
        })
        .collect();
    RowGroupChoice {
        kept: (0..meta.num_row_groups()).collect(),
        read,
        pruned: Vec::new(),
        pages_pruned: Vec::new(),
    }
}

impl RowGroupChoice {
    /// The position windows `[start, end)` of up to `parts` parts of about equal rows to
    /// read: cut at row group boundaries, or inside a row group when the file has an offset
    /// index (the pages outside a part are then skipped unread, not decoded).
    fn windows(
        &self,
        meta: &parquet::file::metadata::ParquetMetaData,
        parts: usize,
    ) -> Vec<(u64, u64)> {
        let (Some(first), Some(last)) = (self.read.first(), self.read.last()) else {
            return Vec::new();
        };
        let (lo, hi) = (first.0, last.1);
        let rows: u64 = self.read.iter().map(|(s, e)| e - s).sum();
        if parts <= 1 || rows == 0 {
            return vec![(lo, hi)];
        }
        let inside = meta.offset_index().is_some();
        let mut cuts = vec![lo];
        // Rows read before each boundary: cut where a part's share of the rows is reached.
        let mut seen = 0u64;
        let mut next_share = 1u64;
        for &(s, e) in &self.read {
            while next_share < parts as u64 && seen + (e - s) > rows * next_share / parts as u64 {
                let at = rows * next_share / parts as u64 - seen;
                let cut = match inside {
                    true => s + at,
                    // At the row group's nearer boundary.
                    false if at * 2 < e - s => s,
                    false => e,
                };
                if cut > *cuts.last().unwrap_or(&lo) && cut < hi {
                    cuts.push(cut);
                }
                next_share += 1;
            }
            seen += e - s;
        }
        cuts.push(hi);
        cuts.windows(2).map(|w| (w[0], w[1])).collect()
    }
}

/// Configures a reader of the file's rows in `window` (default: all) as `reading` chose
/// them (projection, row groups, pages, deleted rows, the row filter), or `None` when it
/// needs the general reader.
fn configure<T>(
    builder: parquet::arrow::arrow_reader::ArrowReaderBuilder<T>,
    o: &DirectOptions,
    reading: &RowGroupChoice,
    deleted_runs: &[(u64, u64)],
    window: Option<(u64, u64)>,
) -> Option<Configured<T>> {
    let (target, schema) = (&o.target, &*o.schema);
    let sources = sources_for(builder.schema(), target, schema)?;
    let mut roots = file_roots(&sources);
    roots.sort_unstable();
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots.iter().copied());
    let mut builder = builder;
    let row_groups = builder.metadata().num_row_groups();
    let (mut kept, mut read, mut pruned) = (Vec::new(), Vec::new(), reading.pruned.clone());
    // Inside the row groups read, what is not: pages ruled out and the rows outside `window`.
    let mut absent = reading.pages_pruned.clone();
    let (lo, hi) = window.unwrap_or((0, u64::MAX));
    for (&g, &(s, e)) in reading.kept.iter().zip(&reading.read) {
        if e <= lo || s >= hi {
            pruned.push((s, e));
            continue;
        }
        kept.push(g);
        read.push((s, e));
        if s < lo {
            absent.push((s, lo));
        }
        if e > hi {
            absent.push((hi, e));
        }
    }
    absent.sort_unstable();
    if kept.len() < row_groups {
        builder = builder.with_row_groups(kept);
    }
    let skipped = super::ranges::merge_ranges(deleted_runs.to_vec(), absent.clone());
    if !skipped.is_empty() {
        builder = builder.with_row_selection(super::ranges::selection_in(&read, &skipped));
    }
    let pruned = super::ranges::merge_ranges(pruned, absent);
    let filter_error = FilterError::default();
    let filter = o.filter.as_ref().and_then(|f| {
        row_filter(
            f,
            &sources,
            &roots,
            o,
            builder.parquet_schema(),
            filter_error.clone(),
        )
    });
    let filtered = filter.is_some();
    if let Some(f) = filter {
        builder = builder.with_row_filter(f);
    }
    Some(Configured {
        builder: builder.with_projection(mask).with_batch_size(o.batch_size),
        shaping: Shaping {
            sources,
            roots,
            numbered: filtered && numbered(o),
            filter_error: filtered.then_some(filter_error),
        },
        pruned,
    })
}

/// The row-number virtual column: each row's position in the file.
fn row_number_field() -> arrow_schema::FieldRef {
    std::sync::Arc::new(
        arrow_schema::Field::new("_pos", arrow_schema::DataType::Int64, false)
            .with_extension_type(parquet::arrow::RowNumber),
    )
}

/// The positions of a decoded batch's rows: its trailing row-number column.
fn positions(b: &RecordBatch) -> Option<arrow_array::UInt64Array> {
    use arrow_array::Array;
    let rows = b
        .columns()
        .last()?
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()?;
    Some(rows.unary(|p| p as u64))
}

/// A decoded batch in the target shape, with its rows' positions when the reader returns
/// them (the filter ran in the decoder and positions were asked for).
fn output(b: &RecordBatch, c: &Shaping, o: &DirectOptions, path: &str) -> Result<Positioned> {
    #[cfg(test)]
    tests::probe(path, b);
    let batch = shape(b, &c.sources, &c.roots, &o.target, &o.schema, path)?;
    let pos =
        match c.numbered {
            true => Some(positions(b).ok_or_else(|| {
                Error::corrupt(format!("data file '{path}': row numbers missing"))
            })?),
            false => None,
        };
    Ok((batch, pos))
}

/// How decoded batches become target batches.
struct Shaping {
    sources: Vec<Source>,
    roots: Vec<usize>,
    /// The decoded batches end with the row-number column.
    numbered: bool,
    filter_error: Option<FilterError>,
}

impl Shaping {
    /// A decoding error: the row filter's own (say, a failed cast in it), else the file's.
    fn decode_error(&self, path: &str, e: impl std::fmt::Display) -> Error {
        let own = self
            .filter_error
            .as_ref()
            .and_then(|slot| slot.lock().ok()?.take());
        own.unwrap_or_else(|| Error::corrupt(format!("data file '{path}': {e}")))
    }
}

/// Reader options: the page index is loaded when a filter can use it; row numbers are
/// decoded when a filter may run in the decoder and positions are wanted.
fn reader_options(o: &DirectOptions) -> Result<parquet::arrow::arrow_reader::ArrowReaderOptions> {
    use parquet::file::metadata::PageIndexPolicy;
    let policy = match o.row_groups.is_some() || o.parts > 1 {
        true => PageIndexPolicy::Optional,
        false => PageIndexPolicy::Skip,
    };
    let options =
        parquet::arrow::arrow_reader::ArrowReaderOptions::new().with_page_index_policy(policy);
    if numbered(o) {
        return options
            .with_virtual_columns(vec![row_number_field()])
            .map_err(|e| Error::io(format!("row numbers: {e}")));
    }
    Ok(options)
}

/// Whether decoded batches carry row numbers: positions are wanted and the filter may run
/// in the decoder (it can only when it reads fewer columns than the scan returns).
fn numbered(o: &DirectOptions) -> bool {
    o.positions
        && o.filter
            .as_ref()
            .is_some_and(|f| f.columns().len() < o.target.fields().len())
}

/// What a file read needs to know besides the file.
pub(super) struct DirectOptions {
    /// The file's size (from its manifest entry), for reading the footer of a remote file.
    pub file_size: u64,
    pub target: ArrowSchemaRef,
    /// The schema read with (the initial defaults of fields a file lacks).
    pub schema: iceberg::spec::SchemaRef,
    pub batch_size: usize,
    /// Positions to skip undecoded.
    pub deleted: Option<RoaringTreemap>,
    /// Row groups that cannot hold a row the filter keeps are not read.
    pub row_groups: Option<std::sync::Arc<super::RowGroupFilter>>,
    /// The row filter, bound to `target`: evaluated while decoding when that can help.
    pub filter: Option<BoundExpr>,
    /// Return each row's position when the filter runs while decoding.
    pub positions: bool,
    /// What each batch goes through before it is returned.
    pub then: Option<ThenStep>,
    /// The file is decoded in up to this many parts of about equal rows, each on a thread
    /// (a local file) or task (a remote one, fetching its own ranges) of its own; their
    /// batches interleave. 1: in order, on one thread.
    pub parts: usize,
}

/// A stream of `target`-shaped batches of the file without the `deleted` positions (and
/// without the row groups `row_groups` rules out), or `None` when the file needs the general
/// reader (a file without field ids, a type change the spec does not allow). A local file is
/// mapped and decoded on a blocking thread; a remote one is read by ranges.
pub(super) async fn open(
    storage: &Storage,
    path: &str,
    o: DirectOptions,
) -> Result<Option<Batches>> {
    let Some(local) = storage.local_file(path) else {
        return open_remote(storage, path, o).await;
    };
    let p = path.to_string();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Positioned>>(2);
    let opened = tokio::task::spawn_blocking(move || -> Result<bool> {
        // A panic while decoding becomes an error item: the stream must not end early
        // without one.
        let guard = tx.clone();
        let path = p.clone();
        let decode = std::panic::AssertUnwindSafe(move || decode_local(&local, &p, o, &tx));
        std::panic::catch_unwind(decode).unwrap_or_else(|panic| {
            let _ = guard.blocking_send(Err(Error::read_panicked(&path, &*panic)));
            Ok(true)
        })
    });
    // Wait for the first batch (or the end): only then is it known whether the direct path
    // applies; nothing has been sent when the file needs the general reader.
    let mut rx = rx;
    match rx.recv().await {
        Some(first) => {
            let rest =
                futures::stream::unfold(
                    rx,
                    |mut rx| async move { rx.recv().await.map(|i| (i, rx)) },
                );
            Ok(Some(
                futures::stream::once(async move { first })
                    .chain(rest)
                    .boxed(),
            ))
        }
        None => match opened
            .await
            .map_err(|e| Error::io("direct reader task failed").with_source(e))?
        {
            Ok(true) => Ok(Some(futures::stream::empty().boxed())),
            Ok(false) => Ok(None),
            Err(e) => Err(e),
        },
    }
}

/// Decodes a local data file (on a blocking thread; in [`DirectOptions::parts`] parts, each
/// on a thread of its own), sending its batches to `tx`; `false` when the file needs the
/// general reader (then nothing was sent).
fn decode_local(
    local: &std::path::Path,
    p: &str,
    o: DirectOptions,
    tx: &tokio::sync::mpsc::Sender<Result<Positioned>>,
) -> Result<bool> {
    let corrupt =
        |e: parquet::errors::ParquetError| Error::corrupt(format!("data file '{p}': {e}"));
    let file = std::fs::File::open(local)
        .map_err(|e| Error::not_found(format!("data file '{p}' cannot be opened: {e}")))?;
    let data = match map_file(&file) {
        Some(mapped) => mapped,
        None => bytes::Bytes::from(
            std::fs::read(local)
                .map_err(|e| Error::io(format!("data file '{p}' cannot be read: {e}")))?,
        ),
    };
    let fetched = Fetched::new(&o);
    let counted = CountedBytes {
        data: data.clone(),
        fetched: fetched.clone(),
    };
    let meta =
        parquet::arrow::arrow_reader::ArrowReaderMetadata::load(&counted, reader_options(&o)?)
            .map_err(corrupt)?;
    if sources_for(meta.schema(), &o.target, &o.schema).is_none() {
        return Ok(false);
    }
    fetched.start();
    let reading = choose_row_groups(
        meta.metadata(),
        o.row_groups.as_deref(),
        &Blooms::File(data),
    );
    let deleted_runs = o
        .deleted
        .as_ref()
        .map(super::ranges::runs)
        .unwrap_or_default();
    let windows = reading.windows(meta.metadata(), o.parts);
    let part = |window: Option<(u64, u64)>| {
        let builder =
            ParquetRecordBatchReaderBuilder::new_with_metadata(counted.clone(), meta.clone());
        if let Some(c) = configure(builder, &o, &reading, &deleted_runs, window) {
            decode_part(c, &o, p, tx);
        }
    };
    if windows.len() <= 1 {
        part(None);
        return Ok(true);
    }
    std::thread::scope(|scope| {
        let others: Vec<_> = windows[1..]
            .iter()
            .map(|w| scope.spawn(|| part(Some(*w))))
            .collect();
        part(Some(windows[0]));
        for h in others {
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    Ok(true)
}

/// Sends the batches of a configured reader of a local file to `tx` (an error ends them).
fn decode_part(
    c: Configured<parquet::arrow::arrow_reader::SyncReader<CountedBytes>>,
    o: &DirectOptions,
    p: &str,
    tx: &tokio::sync::mpsc::Sender<Result<Positioned>>,
) {
    let shaping = c.shaping;
    let filtered = shaping.filter_error.is_some();
    let mut step = o.then.as_ref().map(|then| then(&c.pruned, filtered));
    let reader = match c.builder.build() {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.blocking_send(Err(shaping.decode_error(p, e)));
            return;
        }
    };
    for b in reader {
        let item = b
            .map_err(|e| shaping.decode_error(p, e))
            .and_then(|b| output(&b, &shaping, o, p))
            .and_then(|b| then(&mut step, b));
        let stop = item.is_err();
        let item = match item.transpose() {
            Some(item) => item,
            None => continue,
        };
        if tx.blocking_send(item).is_err() || stop {
            break;
        }
    }
}

/// [`open`] for a file in an object store: the footer first, then the projected column
/// chunks of the row groups kept, by ranges.
async fn open_remote(storage: &Storage, path: &str, o: DirectOptions) -> Result<Option<Batches>> {
    let corrupt =
        |e: parquet::errors::ParquetError| Error::corrupt(format!("data file '{path}': {e}"));
    let size = match o.file_size {
        0 => storage.size(path).await?,
        n => n,
    };
    let fetched = Fetched::new(&o);
    let reader = RangeReader {
        storage: storage.clone(),
        path: path.to_string(),
        size,
        fetched: fetched.clone(),
    };
    let builder = parquet::arrow::ParquetRecordBatchStreamBuilder::new_with_options(
        reader.clone(),
        reader_options(&o)?,
    )
    .await
    .map_err(corrupt)?;
    fetched.start();
    let blooms = match &o.row_groups {
        Some(f) => fetch_blooms(storage, path, builder.metadata(), f).await?,
        None => Blooms::Fetched(Default::default()),
    };
    let deleted_runs = o
        .deleted
        .as_ref()
        .map(super::ranges::runs)
        .unwrap_or_default();
    let reading = choose_row_groups(builder.metadata(), o.row_groups.as_deref(), &blooms);
    let windows = reading.windows(builder.metadata(), o.parts);
    let o = std::sync::Arc::new(o);
    if windows.len() <= 1 {
        let Some(c) = configure(builder, &o, &reading, &deleted_runs, None) else {
            return Ok(None);
        };
        return Ok(Some(remote_batches(c, o, path)?));
    }
    let meta = parquet::arrow::arrow_reader::ArrowReaderMetadata::try_new(
        builder.metadata().clone(),
        reader_options(&o)?,
    )
    .map_err(corrupt)?;
    let mut parts = Vec::with_capacity(windows.len());
    for w in windows {
        let b = parquet::arrow::ParquetRecordBatchStreamBuilder::new_with_metadata(
            reader.clone(),
            meta.clone(),
        );
        let Some(c) = configure(b, &o, &reading, &deleted_runs, Some(w)) else {
            return Ok(None);
        };
        parts.push(remote_batches(c, o.clone(), path)?);
    }
    // Each part fetches and decodes on a task of its own; a panic there is an error item.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Positioned>>(2 * parts.len());
    for mut part in parts {
        let (tx, p) = (tx.clone(), path.to_string());
        tokio::spawn(async move {
            let run = std::panic::AssertUnwindSafe(async {
                while let Some(item) = part.next().await {
                    let stop = item.is_err();
                    if tx.send(item).await.is_err() || stop {
                        break;
                    }
                }
            });
            if let Err(panic) = futures::FutureExt::catch_unwind(run).await {
                let _ = tx.send(Err(Error::read_panicked(&p, &*panic))).await;
            }
        });
    }
    Ok(Some(
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|i| (i, rx)) })
            .boxed(),
    ))
}

/// The batches of a configured reader of a remote file, each through the read's step.
fn remote_batches(
    c: Configured<parquet::arrow::async_reader::AsyncReader<RangeReader>>,
    o: std::sync::Arc<DirectOptions>,
    path: &str,
) -> Result<Batches> {
    let shaping = c.shaping;
    let filtered = shaping.filter_error.is_some();
    let mut step = o.then.as_ref().map(|then| then(&c.pruned, filtered));
    let stream = c
        .builder
        .build()
        .map_err(|e| shaping.decode_error(path, e))?;
    let p = path.to_string();
    Ok(stream
        .filter_map(move |b| {
            let item = b
                .map_err(|e| shaping.decode_error(&p, e))
                .and_then(|b| output(&b, &shaping, &o, &p))
                .and_then(|b| then(&mut step, b))
                .transpose();
            async move { item }
        })
        .boxed())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Array, ArrayRef, Int32Array, Int64Array, StringArray};
    use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
    use rand::{Rng, SeedableRng};

    use super::*;

    const ROWS: usize = 2000;

    /// A file of `ROWS` rows (`a` = position, `b` a nullable string, `c` a nullable int the
    /// table reads as a long) in row groups of 500 rows and pages of 50, and the table schema.
    fn file() -> (bytes::Bytes, Arc<Schema>, RecordBatch) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let with_id = |f: arrow_schema::Field, id: i32| {
            f.with_metadata(
                [(
                    parquet::arrow::PARQUET_FIELD_ID_META_KEY.to_string(),
                    id.to_string(),
                )]
                .into(),
            )
        };
        let arrow = Arc::new(arrow_schema::Schema::new(vec![
            with_id(
                arrow_schema::Field::new("a", arrow_schema::DataType::Int64, false),
                1,
            ),
            with_id(
                arrow_schema::Field::new("b", arrow_schema::DataType::Utf8, true),
                2,
            ),
            with_id(
                arrow_schema::Field::new("c", arrow_schema::DataType::Int32, true),
                3,
            ),
        ]));
        let a: ArrayRef = Arc::new(Int64Array::from_iter_values(0..ROWS as i64));
        let b: ArrayRef = Arc::new(
            (0..ROWS)
                .map(|_| match rng.gen_range(0..10) {
                    0 => None,
                    1 => Some("oops".to_string()),
                    _ => Some(format!("{}", rng.gen_range(0..300))),
                })
                .collect::<StringArray>(),
        );
        let c: ArrayRef = Arc::new(
            (0..ROWS)
                .map(|_| rng.gen_bool(0.9).then(|| rng.gen_range(-500..500)))
                .collect::<Int32Array>(),
        );
        let batch = RecordBatch::try_new(arrow.clone(), vec![a, b, c]).unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(500))
            .set_data_page_row_count_limit(50)
            .set_write_batch_size(50)
            .build();
        let mut out = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, arrow, Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "a", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "b", Type::Primitive(PrimitiveType::String)).into(),
                NestedField::optional(3, "c", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .unwrap();
        (bytes::Bytes::from(out), Arc::new(schema), batch)
    }

    /// Reads the file at `path` with `filter` evaluated while decoding, positions returned,
    /// `deleted` skipped, row groups and pages pruned by `row_groups`: the rows' `a` values and
    /// positions, and whether the filter ran in the decoder.
    async fn read(
        storage: &Storage,
        path: &str,
        schema: &Arc<Schema>,
        filter: &BoundExpr,
        deleted: &RoaringTreemap,
        row_groups: Option<Arc<crate::scan::RowGroupFilter>>,
        parts: usize,
    ) -> Result<(Vec<i64>, Vec<u64>, bool)> {
        let target = Arc::new(iceberg::arrow::schema_to_arrow_schema(schema).unwrap());
        let pushed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = pushed.clone();
        let then: ThenStep = Box::new(move |_: &[(u64, u64)], filtered: bool| {
            seen.store(filtered, std::sync::atomic::Ordering::Relaxed);
            Box::new(|b| Ok(Some(b)))
        });
        let d = open(
            storage,
            path,
            DirectOptions {
                file_size: 0,
                target,
                schema: schema.clone(),
                batch_size: 128,
                deleted: Some(deleted.clone()),
                row_groups,
                filter: Some(filter.clone()),
                positions: true,
                then: Some(then),
                parts,
            },
        )
        .await?
        .expect("the direct path reads a file with field ids");
        let (mut values, mut positions) = (Vec::new(), Vec::new());
        let batches: Vec<Positioned> = d.try_collect().await?;
        let filtered = pushed.load(std::sync::atomic::Ordering::Relaxed);
        for (b, p) in batches {
            let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            values.extend(a.values().iter());
            match p {
                Some(p) => positions.extend(p.values().iter()),
                None => assert!(!filtered, "a filtered read returns positions"),
            }
        }
        Ok((values, positions, filtered))
    }

    use futures::TryStreamExt;

    /// Files named with this panic while decoding any batch but the first (the test-only
    /// probe in `output`).
    const PANIC_PROBE: &str = "floe-panic-probe";

    pub(super) fn probe(path: &str, b: &RecordBatch) {
        let first = b
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .is_some_and(|a| a.value(0) == 0);
        if path.contains(PANIC_PROBE) && !first {
            panic!("a probe panic while decoding");
        }
    }

    /// A panic while decoding a file, after a first batch went out, is an error item, not a
    /// stream that just ends (also in a part decoded on a thread or task of its own).
    #[tokio::test]
    async fn a_decoder_panic_is_an_error() {
        let (bytes, schema, _) = file();
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join(format!("{PANIC_PROBE}.parquet"));
        std::fs::write(&local, &bytes).unwrap();
        let target = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap());
        let remote =
            Storage::new().with_bucket("b", Arc::new(object_store::memory::InMemory::new()), true);
        let remote_path = format!("s3://b/{PANIC_PROBE}.parquet");
        remote.put(&remote_path, bytes.clone()).await.unwrap();
        // A remote file's parts are read on tasks of their own (one part: on the scan's).
        for (storage, path, parts) in [
            (&Storage::new(), local.to_str().unwrap(), 1),
            (&Storage::new(), local.to_str().unwrap(), 2),
            (&remote, remote_path.as_str(), 2),
        ] {
            let d = open(
                storage,
                path,
                DirectOptions {
                    file_size: 0,
                    target: target.clone(),
                    schema: schema.clone(),
                    batch_size: 128,
                    deleted: None,
                    row_groups: None,
                    filter: None,
                    positions: false,
                    then: None,
                    parts,
                },
            )
            .await
            .unwrap()
            .unwrap();
            let mut batches = d;
            let mut items = Vec::new();
            while let Some(item) = batches.next().await {
                items.push(item);
            }
            assert!(items.iter().any(|i| i.is_ok()), "{parts} parts");
            let e = items
                .into_iter()
                .find_map(|i| i.err())
                .expect("an error item");
            assert_eq!(e.kind(), crate::error::ErrorKind::Corrupt, "{e}");
            assert!(e.to_string().contains("panicked"), "{e}");
        }
    }

    /// A file is cut into parts of about equal rows: inside row groups when it has an offset
    /// index, else at the nearer row group boundary.
    #[test]
    fn parts_are_cut_by_rows() {
        use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader};
        let (bytes, _, _) = file();
        for (policy, cut) in [
            (
                PageIndexPolicy::Required,
                vec![(0, 666), (666, 1333), (1333, 2000)],
            ),
            (
                PageIndexPolicy::Skip,
                vec![(0, 500), (500, 1500), (1500, 2000)],
            ),
        ] {
            let meta = ParquetMetaDataReader::new()
                .with_page_index_policy(policy)
                .parse_and_finish(&bytes)
                .unwrap();
            let reading = choose_row_groups(&meta, None, &Blooms::File(bytes.clone()));
            assert_eq!(reading.read.len(), 4);
            let (s0, s1, s3) = (
                reading.windows(&meta, 1),
                reading.windows(&meta, 3),
                reading.windows(&meta, 4),
            );
            assert_eq!(s0, vec![(0, 2000)]);
            assert_eq!(s1, cut, "{policy:?}");
            assert_eq!(s3, vec![(0, 500), (500, 1000), (1000, 1500), (1500, 2000)]);
        }
    }

    #[tokio::test]
    async fn the_row_filter_runs_while_decoding_and_keeps_positions() {
        let (bytes, schema, batch) = file();
        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("f.parquet");
        std::fs::write(&local, &bytes).unwrap();
        let local = local.to_str().unwrap().to_string();
        let remote =
            Storage::new().with_bucket("b", Arc::new(object_store::memory::InMemory::new()), true);
        remote.put("s3://b/f.parquet", bytes.clone()).await.unwrap();
        // The whole file in the target shape (c read as a long), to evaluate filters on.
        let target = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap());
        let c = arrow_cast::cast(batch.column(2), &arrow_schema::DataType::Int64).unwrap();
        let whole = RecordBatch::try_new(
            target.clone(),
            vec![batch.column(0).clone(), batch.column(1).clone(), c],
        )
        .unwrap();
        // Row groups and pages pruned by statistics too (the last case): positions stay
        // those of the file.
        let unbound = iceberg::expr::Reference::new("a")
            .greater_than_or_equal_to(iceberg::spec::Datum::long(1234));
        let pruning = Arc::new(crate::scan::RowGroupFilter {
            predicate: iceberg::expr::Bind::bind(&unbound, schema.clone(), false).unwrap(),
            unbound,
            schema: schema.clone(),
            counters: Default::default(),
            nan_free: Arc::from([]),
        });
        let cases = [
            ("c > 300", true, None),
            ("c % 7 = 0 AND a < 1500", true, None),
            ("b LIKE '1%' OR c IS NULL", true, None),
            ("a IN (3, 77, 499, 500, 1999, 5000)", true, None),
            ("a + c > 2000", true, None),
            ("NOT (c BETWEEN -400 AND 400)", true, None),
            ("a >= 0 AND b IS NOT NULL AND c > 0", false, None),
            ("a >= 1234 AND c > 0", true, Some(pruning.clone())),
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for (text, pushed, row_groups) in cases {
            let f = crate::expr::parse_expr(text)
                .unwrap()
                .bind_predicate(&target)
                .unwrap();
            let keep = f.evaluate_predicate(&whole).unwrap();
            let mut deleted = RoaringTreemap::new();
            for _ in 0..rng.gen_range(0..6) {
                let s = rng.gen_range(0..ROWS as u64);
                deleted.insert_range(s..(s + rng.gen_range(1..300)).min(ROWS as u64));
            }
            let want: Vec<i64> = (0..ROWS)
                .filter(|&p| keep.value(p) && !deleted.contains(p as u64))
                .map(|p| p as i64)
                .collect();
            // Also in parts (their batches interleave: sorted here).
            for (storage, path, parts) in [
                (&Storage::new(), local.as_str(), 1),
                (&Storage::new(), local.as_str(), 3),
                (&remote, "s3://b/f.parquet", 1),
                (&remote, "s3://b/f.parquet", 3),
            ] {
                let (got, positions, filtered) = read(
                    storage,
                    path,
                    &schema,
                    &f,
                    &deleted,
                    row_groups.clone(),
                    parts,
                )
                .await
                .unwrap();
                assert_eq!(filtered, pushed, "{text} on {path}");
                if filtered {
                    let mut pairs: Vec<(i64, u64)> = got.into_iter().zip(positions).collect();
                    pairs.sort_unstable();
                    let (got, positions): (Vec<i64>, Vec<u64>) = pairs.into_iter().unzip();
                    assert_eq!(got, want, "{text} on {path}, {parts} parts");
                    // `a` is each row's position.
                    let a: Vec<u64> = got.iter().map(|&v| v as u64).collect();
                    assert_eq!(positions, a, "{text} on {path}, {parts} parts");
                }
            }
        }
        let stats = pruning.counters.stats();
        assert!(stats.row_groups_pruned >= 4, "{stats:?}");
        assert!(stats.pages_pruned > 0, "{stats:?}");
        // The filter's own error keeps its kind (a failed cast is bad input, not corruption).
        let f = crate::expr::parse_expr("CAST(b AS INT) = 1")
            .unwrap()
            .bind_predicate(&target)
            .unwrap();
        let direct = f.evaluate_predicate(&whole).unwrap_err();
        for (storage, path) in [
            (&Storage::new(), local.as_str()),
            (&remote, "s3://b/f.parquet"),
        ] {
            let e = read(storage, path, &schema, &f, &RoaringTreemap::new(), None, 1)
                .await
                .unwrap_err();
            assert_eq!(e.kind(), direct.kind(), "{e}");
        }
    }
}
