//! Keyed tables and the CDC sink: batches of upserts and deletes keyed by the table's primary
//! key (its identifier fields), merged by the ReplacingMergeTree rule.
//!
//! * Per key the highest version (`floe.merge.version-column`) wins; on equal versions the
//!   later arrival (later part of the batch, then later row). Without a version column the
//!   later arrival always wins; without a delete column (`floe.merge.delete-column`, 0/1 or
//!   boolean) nothing is deleted.
//! * A batch is folded by that rule first, then each winning change is compared with its
//!   key's live row and tombstone: it applies when its version is at least the stored one.
//!   A replaced or deleted row is removed as `write.merge.mode` says (deletion vectors in v3,
//!   position deletes in v2, or rewritten files), never left for readers to resolve.
//! * A winning delete leaves a tombstone (key, version, when) in the table's tombstone files
//!   ([`tombstones`]), committed in the same metadata swap as the snapshot; older replays of
//!   the key are then ignored until [`expire_tombstones`] removes it.
//! * Exactly-once: with a sink id and a checkpoint, the checkpoint is recorded in the
//!   snapshot summary and in the table property `floe.sink.<id>.checkpoint`; a checkpoint at
//!   or below the committed one is a no-op.
//! * A batch is planned against one state of the table and committed only onto that state:
//!   a concurrent commit makes it plan again (lookups and rules redone) within
//!   `commit.retry.*`, so the result is the batches applied one after the other.
//!
//! Finding the stored rows: the files are pruned by the batch's key range (or key set, for
//! small batches) against manifest bounds, then only the key and version columns of the
//! remaining files are read, with their deletes applied.

mod aggregate;
mod apply;
mod batch;
mod changer;
mod checkpoint;
/// Debezium JSON change events as keyed changes.
pub mod debezium;
mod evolve;
mod fold;
mod index;
mod longmap;
mod merge;
mod readback;
mod shards;
mod sketch;
mod spill;
mod staged;
mod state;
mod tombstones;

pub use batch::{ChangeBatch, UpsertOptions, UpsertResult};
pub use checkpoint::committed_checkpoint;
pub(crate) use fold::latest_rows;
pub use merge::pre_fold;
pub(crate) use shards::{stage_merged_upsert, stage_shards};
pub use shards::{StagedShards, MAX_SHARDS};
pub(crate) use staged::{commit_staged_upserts, stage_upsert};
pub use staged::{MergedOnto, StagedUpsert};
pub(crate) use tombstones::merge_tombstones_holding;
pub use tombstones::{
    expire_tombstones, merge_tombstones, tombstones, ExpireTombstonesResult, TombstoneReport,
};

use std::sync::Arc;

use arrow_array::RecordBatch;

use crate::catalog::Catalog;
use crate::error::Result;
use crate::spec::TableIdent;

pub use apply::Refreshed;
use apply::{apply_with_retries, Held};
pub use spill::{upsert_spilled, SpillingBatch};

/// Applies one batch of changes to the keyed table `ident` (see the module docs for the
/// rules). Bad input (a null key or version, a bad delete flag, an unknown column) is
/// refused naming the source, row and column, and nothing is committed.
///
/// # Example
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # use std::sync::Arc;
/// # use arrow_array::{Int32Array, Int64Array, RecordBatch, StringArray};
/// # let dir = tempfile::tempdir()?;
/// # let cat = floe::Catalog::open(None, dir.path().join("wh").to_str(), None)?;
/// let ident = floe::table::parse_ident("db.users")?;
/// let schema = floe::spec::parse_schema("id long not null, plan string, ver long, del int")?;
/// let creation = floe::TableCreation::new(schema)
///     .with_primary_key(&["id".to_string()])
///     .with_property("floe.merge.version-column", "ver")
///     .with_property("floe.merge.delete-column", "del");
/// cat.create_table(&ident, creation).await?;
/// let rows = |id: Vec<i64>, ver: Vec<i64>, del: Vec<i32>| -> floe::Result<RecordBatch> {
///     let plan = StringArray::from(vec!["pro"; id.len()]);
///     Ok(RecordBatch::try_from_iter([
///         ("id", Arc::new(Int64Array::from(id)) as _),
///         ("plan", Arc::new(plan) as _),
///         ("ver", Arc::new(Int64Array::from(ver)) as _),
///         ("del", Arc::new(Int32Array::from(del)) as _),
///     ])?)
/// };
/// let opts = floe::keyed::UpsertOptions::default();
/// let batch = floe::keyed::ChangeBatch::from_batches([rows(vec![1, 2, 1], vec![1, 1, 2], vec![0, 0, 0])?]);
/// let r = floe::keyed::upsert(&cat, &ident, &batch, &opts).await?;
/// assert_eq!((r.inserted, r.keys), (2, 2));
/// // Key 2 deleted at version 5; a late replay of version 3 is ignored.
/// let batch = floe::keyed::ChangeBatch::from_batches([rows(vec![2], vec![5], vec![1])?]);
/// assert_eq!(floe::keyed::upsert(&cat, &ident, &batch, &opts).await?.deleted, 1);
/// let batch = floe::keyed::ChangeBatch::from_batches([rows(vec![2], vec![3], vec![0])?]);
/// assert_eq!(floe::keyed::upsert(&cat, &ident, &batch, &opts).await?.ignored, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn upsert(
    catalog: &Catalog,
    ident: &TableIdent,
    changes: &ChangeBatch,
    options: &UpsertOptions,
) -> Result<UpsertResult> {
    apply_with_retries(catalog, ident, changes, options, None).await
}

/// A keyed table's writer: applies batches with the same options (a sink's checkpoints).
///
/// It keeps an in-memory index of the table's keys (key → data file, position, version;
/// tombstones) between batches, so a batch costs lookups of its own keys; the index is built
/// by the first batch (one read of the key and version columns) and again whenever someone
/// else changed the table. Memory: 32–64 bytes per live key for a single integer key (more
/// for other keys). With a merge engine that folds rows (`sum`, `aggregate`, `partial-update`,
/// `first-row`) it keeps the table's current rows instead (their values, states included, and
/// where they are stored), so a batch merges without reading the table. Clones share them.
#[derive(Debug, Clone)]
pub struct KeyedWriter {
    catalog: Catalog,
    ident: TableIdent,
    sink_id: Option<String>,
    evolve_schema: bool,
    held: Arc<tokio::sync::Mutex<Held>>,
}

/// The CDC sink is a [`KeyedWriter`] with a sink id.
pub type CdcSink = KeyedWriter;

impl KeyedWriter {
    /// A writer of `ident` through `catalog`.
    pub fn new(catalog: &Catalog, ident: TableIdent) -> Self {
        Self {
            catalog: catalog.clone(),
            ident,
            sink_id: None,
            evolve_schema: false,
            held: Arc::new(tokio::sync::Mutex::new(Held::default())),
        }
    }

    /// Batches carry checkpoints of sink `id`.
    pub fn with_sink_id(mut self, id: impl Into<String>) -> Self {
        self.sink_id = Some(id.into());
        self
    }

    /// New columns are added to the table instead of refused.
    pub fn with_evolve_schema(mut self, evolve: bool) -> Self {
        self.evolve_schema = evolve;
        self
    }

    /// Applies `batches` (in arrival order) as one batch, with an optional checkpoint.
    pub async fn apply(
        &self,
        batches: impl IntoIterator<Item = RecordBatch>,
        checkpoint: Option<i64>,
    ) -> Result<UpsertResult> {
        let options = UpsertOptions {
            sink_id: self.sink_id.clone(),
            checkpoint,
            evolve_schema: self.evolve_schema,
            ..Default::default()
        };
        let changes = ChangeBatch::from_batches(batches);
        let mut held = self.held.lock().await;
        apply_with_retries(
            &self.catalog,
            &self.ident,
            &changes,
            &options,
            Some(&mut *held),
        )
        .await
    }

    /// Brings the key index this writer holds to the table's current state, when only rows
    /// moved since its last batch (a compaction, a delete or manifest rewrite, a tombstone
    /// merge: [`crate::maintenance::maintain`] in the same process), so that the next batch's
    /// commit does not pay for it. Anything else committed since drops the index (the next
    /// batch builds it again).
    ///
    /// ```no_run
    /// # async fn f(catalog: floe::Catalog, table: floe::Table) -> floe::Result<()> {
    /// let writer = floe::keyed::KeyedWriter::new(&catalog, table.ident().clone());
    /// floe::maintenance::maintain(&catalog, &table, &Default::default()).await?;
    /// writer.refresh().await?;
    /// # Ok(()) }
    /// ```
    pub async fn refresh(&self) -> Result<Refreshed> {
        let mut held = self.held.lock().await;
        let table = self.catalog.load_table(&self.ident).await?;
        held.refresh(&table).await
    }

    /// The checkpoint committed for this writer's sink.
    pub async fn committed_checkpoint(&self) -> Result<Option<i64>> {
        let Some(s) = &self.sink_id else {
            return Ok(None);
        };
        let t = self.catalog.load_table(&self.ident).await?;
        committed_checkpoint(&t, s)
    }
}
