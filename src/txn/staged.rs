//! Staged appends: data files written in one process (a distributed engine's worker) and
//! committed in another (its driver) as one `append` snapshot, through
//! [`crate::pending`] (`stage_append`, `commit_pending`, `discard_pending`).
//!
//! A worker's batches become Parquet data files under the table's data directory, listed in
//! an Avro file (iceberg's `data_file` struct) under the metadata directory; nothing is
//! committed. Every file a job's workers stage carries the job's [`StagingJob`] tag in its
//! name, so when a job fails without the workers' results reaching the driver,
//! [`crate::maintenance::discard_staging_job`] still finds them. The driver commits the
//! [`StagedFiles`] of every worker once (the commit loop retries and validates as
//! [`crate::txn::append`] does).

use arrow_array::RecordBatch;
use serde::{Deserialize, Serialize};

use super::{append_files_by_spec, AppendResult};
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::spec::DataFile;
use crate::storage::join;
use crate::table::Table;
use crate::write::DataWriter;

/// The identity of one distributed write: the files its workers stage end their names with
/// `-job-<id>` (a UUID's 32 hex digits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagingJob(String);

impl Default for StagingJob {
    fn default() -> Self {
        Self::new()
    }
}

impl StagingJob {
    /// A new job (a random id).
    pub fn new() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string())
    }

    /// The job whose id is `id` (a UUID, hyphenated or as 32 hex digits).
    pub fn parse(id: &str) -> Result<Self> {
        uuid::Uuid::try_parse(id)
            .map(|u| Self(u.simple().to_string()))
            .map_err(|e| {
                Error::invalid(format!(
                    "staging job id '{id}' is not a UUID ({e}); make one with StagingJob::new"
                ))
            })
    }

    /// The id (32 lowercase hex digits).
    pub fn id(&self) -> &str {
        &self.0
    }

    /// What the job's file names end with (before the extension).
    pub(crate) fn suffix(&self) -> String {
        format!("-job-{}", self.0)
    }

    /// Whether `location` names a file the job staged.
    pub fn owns(&self, location: &str) -> bool {
        let name = location.rsplit('/').next().unwrap_or(location);
        let stem = name.split_once('.').map_or(name, |(stem, _)| stem);
        stem.ends_with(&self.suffix())
    }
}

/// Data files written by [`crate::pending::stage_append`] and not committed yet (JSON-serializable, to
/// hand from a worker to the driver).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StagedFiles {
    /// The table's name (`ns.table`).
    pub table: String,
    /// The partition spec the files were written with.
    pub spec_id: i32,
    /// An Avro file listing the data files (iceberg's `data_file` struct).
    pub data_files_location: String,
    /// How many data files.
    pub added_data_files_count: usize,
    /// Rows written.
    pub added_records_count: u64,
    /// Bytes written.
    pub added_bytes_count: u64,
    /// The data files' locations, known in the process that staged them (not serialized:
    /// [`crate::pending::PendingChange`] carries every file written).
    #[serde(skip)]
    pub(crate) written: Vec<String>,
}

/// Writes `batches` as data files of `table` (partitioned, sorted and rolled as an append
/// writes them; conformed to the table schema by column name) and lists them in an Avro
/// file under the table's metadata directory, every name tagged with `job`. Commits
/// nothing; on an error the files written so far are deleted.
pub(crate) async fn stage_data_files<I>(
    table: &Table,
    batches: I,
    job: &StagingJob,
) -> Result<StagedFiles>
where
    I: IntoIterator<Item = Result<RecordBatch>>,
{
    let mut w = DataWriter::new(table)?.with_name_suffix(&job.suffix());
    for b in batches {
        let r = match b {
            Ok(b) => w.write(b).await,
            Err(e) => Err(e),
        };
        if let Err(e) = r {
            w.abort(table.storage()).await;
            return Err(e);
        }
    }
    let files = w.close().await?;
    let md = table.metadata();
    let spec = md.default_partition_spec();
    let mut bytes = Vec::new();
    let listed = spec
        .partition_type(md.current_schema())
        .map_err(Error::from)
        .and_then(|partition_type| {
            iceberg::spec::write_data_files_to_avro(
                &mut bytes,
                files.clone(),
                &partition_type,
                md.format_version(),
            )
            .map_err(Error::from)
        });
    let location = join(
        md.location(),
        &format!(
            "metadata/staged-{}{}.avro",
            uuid::Uuid::new_v4(),
            job.suffix()
        ),
    );
    let listed = match listed {
        Ok(_) => table.storage().put(&location, bytes.into()).await,
        Err(e) => Err(e),
    };
    if let Err(e) = listed {
        for f in &files {
            let _ = table.storage().delete(f.file_path()).await;
        }
        return Err(e.context(format!("staging data files of table {}", table.name())));
    }
    Ok(StagedFiles {
        table: table.name(),
        spec_id: spec.spec_id(),
        data_files_location: location,
        added_data_files_count: files.len(),
        added_records_count: files.iter().map(|f| f.record_count()).sum(),
        added_bytes_count: files.iter().map(|f| f.file_size_in_bytes()).sum(),
        written: files.iter().map(|f| f.file_path().to_string()).collect(),
    })
}

/// The data files `staged` lists.
pub(crate) async fn data_files(table: &Table, staged: &StagedFiles) -> Result<Vec<DataFile>> {
    if staged.table != table.name() {
        return Err(Error::invalid(format!(
            "staged files '{}' belong to table {}, not {}",
            staged.data_files_location,
            staged.table,
            table.name()
        )));
    }
    let md = table.metadata();
    let spec = md.partition_spec_by_id(staged.spec_id).ok_or_else(|| {
        Error::corrupt(format!(
            "staged files '{}' name partition spec {}, which table {} does not have",
            staged.data_files_location,
            staged.spec_id,
            table.name()
        ))
    })?;
    let bytes = table.storage().get(&staged.data_files_location).await?;
    iceberg::spec::read_data_files_from_avro(
        &mut bytes.as_ref(),
        md.current_schema(),
        staged.spec_id,
        &spec.partition_type(md.current_schema())?,
        md.format_version(),
    )
    .map_err(|e| {
        Error::corrupt(format!(
            "staged files '{}': {e}",
            staged.data_files_location
        ))
    })
}

/// Commits the files of every `staged` (from any number of workers) as one `append`
/// snapshot of `table` (each file with the partition spec it was written with), then deletes
/// the Avro listings. A failed commit that surely did
/// not happen deletes the staged data files too (they would only be orphans).
pub(crate) async fn commit_staged(
    catalog: &Catalog,
    table: &Table,
    staged: &[StagedFiles],
) -> Result<AppendResult> {
    let mut files = Vec::new();
    for s in staged {
        files.push((s.spec_id, data_files(table, s).await?));
    }
    let paths: Vec<String> = files
        .iter()
        .flat_map(|(_, f)| f)
        .map(|f| f.file_path().to_string())
        .collect();
    let r = append_files_by_spec(catalog, table, files).await;
    match &r {
        Err(e) if e.kind() != crate::ErrorKind::CommitStateUnknown => {
            for p in &paths {
                let _ = table.storage().delete(p).await;
            }
        }
        _ => {}
    }
    if !matches!(&r, Err(e) if e.kind() == crate::ErrorKind::CommitStateUnknown) {
        for s in staged {
            let _ = table.storage().delete(&s.data_files_location).await;
        }
    }
    r
}

/// Deletes the data files and listings of every `staged` (best effort: a file already gone
/// is not an error).
pub(crate) async fn discard_staged(table: &Table, staged: &[StagedFiles]) -> Result<()> {
    for s in staged {
        if let Ok(files) = data_files(table, s).await {
            for f in files {
                let _ = table.storage().delete(f.file_path()).await;
            }
        }
        let _ = table.storage().delete(&s.data_files_location).await;
    }
    Ok(())
}
