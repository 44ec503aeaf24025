//! Transactions: the snapshot producer, the commit loop with conflict validation, and the
//! operations built on them.

mod alter;
mod cherrypick;
mod clone;
mod commit;
mod intent;
mod manifest_merge;
mod producer;
mod refs;
mod row_delta;
mod staged;
mod summary;
mod validate;

use arrow_array::RecordBatch;
use iceberg::spec::Operation;

pub use alter::{alter_table, AlterResult};
pub use cherrypick::{cherrypick, CherrypickResult, PUBLISHED_WAP_ID, SOURCE_SNAPSHOT_ID};
pub use clone::{
    clone_table, clone_table_all_refs, CloneResult, ClonedRef, CLONE_SOURCE, CLONE_SOURCE_SNAPSHOT,
    REPLACED_TABLE,
};
pub(crate) use commit::{commit, commit_or_discard, commit_properties, commit_since};
pub(crate) use intent::{
    ask_writers_to_hold, process_name, withdraw as withdraw_intent, withdraw_lapsed,
    writer_pause_ms,
};
pub(crate) use producer::{new_snapshot_id, FileKey, PropertyUpdate, SnapshotProducer};
pub use refs::manage_refs;
pub(crate) use row_delta::file_scoped_deletes;
pub(crate) use row_delta::{
    run as run_row_delta, stage, stage_known, CommitExtras, RowChanger, RowLevelKind, Staged,
};
pub use row_delta::{Alignment, MergeCounts, RowLevelResult};
pub(crate) use staged::data_files as staged_data_files;
pub(crate) use staged::{commit_staged, discard_staged, stage_data_files};
pub use staged::{StagedFiles, StagingJob};
pub use summary::SummaryCounts;
pub(crate) use validate::{NoConcurrentCommit, NoValidation, RowLevelValidation, Validation};

use crate::catalog::Catalog;
use crate::error::Result;
use crate::table::Table;
use crate::write::DataWriter;

/// What an append committed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AppendResult {
    /// The table at the new version.
    pub table: Table,
    /// The new snapshot id (`None` if there was nothing to append).
    pub snapshot_id: Option<i64>,
    /// Data files added.
    pub added_files: usize,
    /// Rows added.
    pub added_records: u64,
    /// Bytes added.
    pub added_bytes: u64,
}

/// Appends Arrow batches to a table as one `append` snapshot.
///
/// Batches are written as Parquet data files (partitioned, sorted and rolled as the table's
/// spec, sort order and `write.*` properties say), then committed. Memory stays bounded by
/// the open files' buffers, not by the input size. Rows and bytes written are counted into
/// the enclosing [`crate::progress::Progress::scope`], if any.
///
/// # Example
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # use std::sync::Arc;
/// # use arrow_array::{Int64Array, RecordBatch};
/// # let dir = tempfile::tempdir()?;
/// # let cat = floe::Catalog::open(None, dir.path().join("wh").to_str(), None)?;
/// # let ident = floe::table::parse_ident("db.t")?;
/// # let schema = floe::spec::parse_schema("id long, v long")?;
/// # let table = cat.create_table(&ident, floe::TableCreation::new(schema)).await?;
/// # let rows = |r: std::ops::Range<i64>| -> floe::Result<RecordBatch> { Ok(RecordBatch::try_from_iter([
/// #     ("id", Arc::new(Int64Array::from_iter_values(r.clone())) as _),
/// #     ("v", Arc::new(Int64Array::from_iter_values(r)) as _),
/// # ])?) };
/// let r = floe::txn::append(&cat, &table, [rows(0..100), rows(100..150)]).await?;
/// assert_eq!(r.added_records, 150);
/// assert!(r.snapshot_id.is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn append<I>(catalog: &Catalog, table: &Table, batches: I) -> Result<AppendResult>
where
    I: IntoIterator<Item = Result<RecordBatch>>,
{
    let mut w = DataWriter::new(table)?;
    for b in batches {
        let r = match b {
            Ok(b) => w.write(b).await.map_err(|e| not_committed(e, table)),
            Err(e) => Err(e),
        };
        if let Err(e) = r {
            w.abort(table.storage()).await;
            return Err(e);
        }
    }
    let files = w.close().await.map_err(|e| not_committed(e, table))?;
    let paths: Vec<String> = files.iter().map(|f| f.file_path().to_string()).collect();
    match append_files(catalog, table, files).await {
        Ok(r) => Ok(r),
        Err(e) if e.kind() != crate::ErrorKind::CommitStateUnknown => {
            // Not committed: the written files would only be orphans.
            for p in paths {
                let _ = table.storage().delete(&p).await;
            }
            Err(not_committed(e, table))
        }
        Err(e) => Err(e),
    }
}

/// An I/O failure of an append's writes or commit (storage or catalog unreachable, a server
/// killed mid-write) says that nothing was committed and that a retry is safe; other errors
/// (bad input, conflicts, an unknown commit state) are left as they are.
fn not_committed(e: crate::Error, table: &Table) -> crate::Error {
    if e.kind() != crate::ErrorKind::Io {
        return e;
    }
    e.context(format!(
        "append to table {} was not committed (the table is unchanged); retry once the storage \
         and catalog are reachable",
        table.name()
    ))
}

/// Commits already-written data files as one `append` snapshot.
pub async fn append_files(
    catalog: &Catalog,
    table: &Table,
    files: Vec<iceberg::spec::DataFile>,
) -> Result<AppendResult> {
    let spec = table.metadata().default_partition_spec_id();
    append_files_by_spec(catalog, table, vec![(spec, files)]).await
}

/// [`append_files`] of files written with several partition specs (each list with the id of
/// the spec its files were written with: the table's default may have changed since).
pub(crate) async fn append_files_by_spec(
    catalog: &Catalog,
    table: &Table,
    files: Vec<(i32, Vec<iceberg::spec::DataFile>)>,
) -> Result<AppendResult> {
    let all = || files.iter().flat_map(|(_, f)| f);
    let added_records = all().map(|f| f.record_count()).sum();
    let added_bytes = all().map(|f| f.file_size_in_bytes()).sum();
    let added_files = all().count();
    if added_files == 0 {
        return Ok(AppendResult {
            table: table.clone(),
            snapshot_id: None,
            added_files: 0,
            added_records: 0,
            added_bytes: 0,
        });
    }
    let mut producer = SnapshotProducer::new(Operation::Append, vec![]);
    for (spec, f) in files {
        producer = producer.add_files(spec, f);
    }
    let t = commit(catalog, table, &mut producer, &NoValidation).await?;
    Ok(AppendResult {
        table: t,
        snapshot_id: Some(producer.snapshot_id()),
        added_files,
        added_records,
        added_bytes,
    })
}
