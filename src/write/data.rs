//! Arrow batches → Parquet data files: each batch conformed to the table schema, its rows
//! grouped by partition and sent to the lane owning each partition ([`super::lane`], one
//! per core), which sorts, encodes and rolls the files.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use iceberg::spec::{DataFile, SortOrder};
use iceberg::writer::file_writer::ParquetWriterBuilder;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::conform::Conformer;
use super::lane::{run_lane, LaneMsg, Settings, Slab, SlabPart};
use super::parquet_props::{high_cardinality_columns, writer_properties};
use super::partition::Partitioner;
use crate::error::{Error, Result};
use crate::spec::DistributionMode;
use crate::storage::{join, Storage};
use crate::table::Table;

/// Default memory budget of one lane (see [`DataWriter::with_memory_budget`]).
const LANE_MEMORY_BYTES: usize = 256 * 1024 * 1024;
/// Rows written to one lane before more lanes are used (keeps small appends in one file).
const SINGLE_LANE_ROWS: u64 = 200_000;

/// A lane's inbox and task (each `None` once the lane was told to finish / was awaited).
type Lane = (
    Option<mpsc::Sender<LaneMsg>>,
    Option<JoinHandle<Result<Vec<DataFile>>>>,
);

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
    /// How rows are spread over the lanes.
    distribution: DistributionMode,
    /// Files are sorted (by a sort order or z-order); known once the lanes start.
    ordered: bool,
    /// The table sets `write.parquet.page-row-limit` (ordered files otherwise get
    /// [`ORDERED_PAGE_ROW_LIMIT`]).
    page_row_limit_set: bool,
}

/// Rows the encoding choice samples (see `high_cardinality_columns`).
const SAMPLE_ROWS: usize = 1024;

/// `write.parquet.page-row-limit` of sorted and z-ordered files when the table does not set
/// it (see `start`).
pub(crate) const ORDERED_PAGE_ROW_LIMIT: usize = 4_096;

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
        let distribution = props.write_distribution(
            !md.default_partition_spec().is_unpartitioned(),
            sort.is_some(),
        );
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
            zorder: None,
            props,
            data_path,
            storage: table.storage().clone(),
            commit_uuid: uuid::Uuid::new_v4(),
            name_suffix: String::new(),
            progress: crate::progress::Progress::current(),
        };
        Ok(Self {
            conformer: Conformer::new(&schema, &table.name())?,
            pending: Some(settings),
            early: Vec::new(),
            distribution,
            ordered: false,
            page_row_limit_set: md.properties().contains_key("write.parquet.page-row-limit"),
            lane_count: lanes.max(1),
            lanes: Vec::new(),
            partitioner: None,
            partition_lanes: HashMap::new(),
            lane_rows: vec![0; lanes.max(1)],
            rows: 0,
            orphans: Vec::new(),
        })
    }

    /// Ends every file name with `suffix` (a staging job's tag: see
    /// [`crate::txn::StagingJob`]).
    pub fn with_name_suffix(mut self, suffix: &str) -> Self {
        if let Some(s) = self.pending.as_mut() {
            s.name_suffix = suffix.to_string();
        }
        self
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

    /// Orders each file's rows by the z-value of `columns` (top-level columns of the table;
    /// numbers, dates, timestamps, strings, binary or booleans) instead of a sort order;
    /// files record no sort order and, like sorted files, have pages of 4,096 rows unless the
    /// table sets `write.parquet.page-row-limit` (before the first write).
    pub fn with_zorder(mut self, columns: &[String], table: &Table) -> Result<Self> {
        if let Some(s) = self.pending.as_mut() {
            let arrow = crate::spec::arrow_schema(&s.schema)?;
            let idx = super::zorder::zorder_columns(&arrow, columns, &table.name())?;
            s.sort = None;
            s.sort_order_id = None;
            s.zorder = Some(Arc::new(idx));
        }
        Ok(self)
    }

    /// v3: also writes the row lineage columns `_row_id` and `_last_updated_sequence_number`
    /// (the input's columns of those names), so rewritten rows keep their identity
    /// (before the first write).
    pub fn with_row_lineage(mut self, table: &Table) -> Result<Self> {
        if let Some(s) = self.pending.as_mut() {
            let mut fields: Vec<iceberg::spec::NestedFieldRef> =
                s.schema.as_struct().fields().to_vec();
            for (id, name) in [
                (crate::spec::reserved::ROW_ID_FIELD_ID, "_row_id"),
                (
                    crate::spec::reserved::LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID,
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

    /// Spreads rows over the lanes by `mode` instead of the table's append distribution
    /// (see [`DistributionMode`]; row-level operations and rewrites have their own rules).
    pub fn with_distribution(mut self, mode: DistributionMode) -> Self {
        self.distribution = mode;
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
        self.ordered = settings.sort.is_some() || settings.zorder.is_some();
        // A sorted or z-ordered file prunes by its pages' bounds, and a lookup decompresses a
        // whole page of every column it returns: pages finer than the 20,000-row default
        // keep both close to the rows asked for (docs/src/benchmarks.md, "Clustering": a
        // point lookup on a bucketed, sorted table reads 0.26 MB instead of 1.12 MB, in 1.1 ms instead of
        // 2.2-3.4; a z-order box 2x fewer bytes; sizes and full scans unchanged). A table
        // that sets the limit keeps it.
        let finer_pages = self.ordered && !self.page_row_limit_set;
        if finer_pages {
            settings.props.parquet_page_row_limit = ORDERED_PAGE_ROW_LIMIT;
        }
        let plain = high_cardinality_columns(first);
        if !plain.is_empty() || finer_pages {
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
        let batch = self
            .conformer
            .conform_from(&batch, "the input", self.rows + 1)?;
        self.rows += batch.num_rows() as u64;
        crate::progress::with_current(|p| p.add_rows_written(batch.num_rows() as u64));
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
        // The lane with the fewest rows so far (lane 0 alone for small appends).
        let least = if self.rows <= SINGLE_LANE_ROWS {
            0
        } else {
            (0..self.lane_rows.len())
                .min_by_key(|l| self.lane_rows[*l])
                .unwrap_or(0)
        };
        if self.partitioner.is_none() || self.distribution == DistributionMode::None {
            self.lane_rows[least] += batch.num_rows() as u64;
        }
        match &self.partitioner {
            None => {
                let n = batch.num_rows();
                // Range over an ordered table: one lane, whose files are then consecutive
                // ranges (a partition's rows are merge-sorted by its lane).
                let lane = match self.distribution {
                    DistributionMode::Range if self.ordered => 0,
                    _ => least,
                };
                per_lane[lane] = Some(Slab {
                    batch,
                    rows: None,
                    parts: vec![SlabPart {
                        key: None,
                        id: String::new(),
                        rows: n,
                    }],
                });
            }
            Some(p) => {
                let groups = p.groups(&batch)?;
                let mut rows: Vec<Vec<u32>> = vec![Vec::new(); per_lane.len()];
                let mut parts: Vec<Vec<SlabPart>> =
                    (0..per_lane.len()).map(|_| Vec::new()).collect();
                for (key, r) in groups.parts {
                    let id = key.to_path();
                    let n = self.partition_lanes.len();
                    // `none`: the whole batch to one lane, whatever its partitions; else each
                    // partition owned by one lane.
                    let lane = match self.distribution {
                        DistributionMode::None => least,
                        _ => *self
                            .partition_lanes
                            .entry(id.clone())
                            .or_insert(n % per_lane.len()),
                    };
                    match &groups.order {
                        Some(order) => rows[lane].extend_from_slice(&order[r.clone()]),
                        None => rows[lane].extend(r.start as u32..r.end as u32),
                    }
                    parts[lane].push(SlabPart {
                        key: Some(key),
                        id,
                        rows: r.len(),
                    });
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
            if let Some(slab) = slab {
                self.send(lane, LaneMsg::Rows(slab)).await?;
            }
        }
        Ok(())
    }

    /// Writes out every row accepted so far and closes the open files, keeping the writer
    /// open: a caller that writes partition after partition calls it when a partition's rows
    /// are complete, so that the writer holds no more than one partition's rows. Rows of a
    /// finished partition that still come go to new files.
    pub async fn finish_files(&mut self) -> Result<()> {
        self.start_early().await?;
        for lane in 0..self.lanes.len() {
            self.send(lane, LaneMsg::FinishFiles).await?;
        }
        Ok(())
    }

    /// Sends `msg` to `lane`; a lane that stopped is awaited for its error.
    async fn send(&mut self, lane: usize, msg: LaneMsg) -> Result<()> {
        let sent = match &self.lanes[lane].0 {
            Some(tx) => tx.send(msg).await.is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
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
        Err(Error::io("writer lane stopped unexpectedly"))
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
