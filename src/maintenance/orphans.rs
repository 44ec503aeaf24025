//! `remove_orphan_files`: deletes files under the table location that no metadata of the
//! table (nor of any other table of the catalog) references and that are older than a cutoff;
//! `discard_staging_job`: the same for the files one staging job wrote, at any age.

use super::reachable::{locations_overlap, other_tables, Reachable};
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::scan::canonical_path;
use crate::table::Table;
use crate::txn::StagingJob;

/// What `remove_orphan_files` found (and deleted unless it was a dry run).
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct OrphanResult {
    /// The orphan files (`orphan_file_location` in Spark's result).
    pub orphan_file_locations: Vec<String>,
    /// Whether they were deleted.
    pub deleted: bool,
}

/// Finds (and unless `dry_run` deletes) files under `table`'s location older than
/// `older_than_ms` (default: 3 days ago) that nothing references. Spark's `.crc` sidecars
/// of referenced files count as referenced.
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
/// # let table = floe::txn::append(&cat, &table, [rows(0..100)]).await?.table;
/// // A dry run lists files no snapshot of any table in the catalog references.
/// let r = floe::maintenance::remove_orphan_files(&cat, &table, None, true).await?;
/// assert!(r.orphan_file_locations.is_empty() && !r.deleted);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn remove_orphan_files(
    catalog: &Catalog,
    table: &Table,
    older_than_ms: Option<i64>,
    dry_run: bool,
) -> Result<OrphanResult> {
    let cutoff =
        older_than_ms.unwrap_or_else(|| chrono::Utc::now().timestamp_millis() - 3 * 24 * 3_600_000);
    let location = table
        .metadata()
        .location()
        .trim_end_matches('/')
        .to_string();
    // Another table living inside this one's location (or around it) is not understood.
    let others = other_tables(catalog, table).await?;
    for other in &others {
        if locations_overlap(other, table) {
            let o = other.metadata().location();
            return Err(Error::invalid(format!(
                "table {}'s location {location} overlaps table {}'s ({o}); remove_orphan_files \
                 would see the other table's files as orphans, so it refuses to run",
                table.name(),
                other.name()
            )));
        }
    }
    let mut live = Reachable::of_table(table).await?;
    live.extend(Reachable::of_tables(&others).await?);
    let mut orphans = Vec::new();
    for o in table.storage().list(&location).await? {
        if o.last_modified_ms >= cutoff || live.contains(&o.location) {
            continue;
        }
        // Hadoop writes `.<name>.crc` next to `<name>`.
        let p = canonical_path(&o.location);
        if let Some((dir, file)) = p.rsplit_once('/') {
            if let Some(name) = file.strip_prefix('.').and_then(|f| f.strip_suffix(".crc")) {
                if live.contains(&format!("{dir}/{name}")) {
                    continue;
                }
            }
        }
        orphans.push(o.location);
    }
    // Files a killed writer left half-written are never referenced.
    let partial: Vec<String> = table
        .storage()
        .list_partial_uploads(&location)?
        .into_iter()
        .filter(|o| o.last_modified_ms < cutoff)
        .map(|o| o.location)
        .collect();
    orphans.sort();
    if !dry_run {
        for p in &orphans {
            table.storage().delete(p).await?;
        }
        for p in &partial {
            table.storage().remove_partial_upload(p)?;
        }
    }
    orphans.extend(partial);
    Ok(OrphanResult {
        orphan_file_locations: orphans,
        deleted: !dry_run,
    })
}

/// Deletes the files `job` staged for `table` (data files, listings, key lists: every name
/// tagged with the job) that no snapshot of the table, nor of any other table of the catalog,
/// references: what a distributed write whose tasks' results never reached its driver (a
/// failed job) leaves behind. Files already committed stay, so a job id reused after a
/// commit is safe. Returns the deleted locations. Call it only when no commit of the job can
/// still be in flight (an unknown commit outcome may yet reference the files).
pub async fn discard_staging_job(
    catalog: &Catalog,
    table: &Table,
    job: &StagingJob,
) -> Result<Vec<String>> {
    let table = catalog.load_table(table.ident()).await?;
    let md = table.metadata();
    let location = md.location().trim_end_matches('/').to_string();
    let mut roots = vec![location.clone()];
    if let Some(data) = table.properties()?.data_path {
        let data = data.trim_end_matches('/').to_string();
        if !canonical_path(&data).starts_with(&format!("{}/", canonical_path(&location))) {
            roots.push(data);
        }
    }
    let mut staged = Vec::new();
    for root in &roots {
        for o in table.storage().list(root).await? {
            if job.owns(&o.location) {
                staged.push(o.location);
            }
        }
    }
    if staged.is_empty() {
        return Ok(staged);
    }
    let mut live = Reachable::of_table(&table).await?;
    live.extend(Reachable::of_tables(&other_tables(catalog, &table).await?).await?);
    staged.retain(|p| !live.contains(p));
    staged.sort();
    for p in &staged {
        table.storage().delete(p).await.map_err(|e| {
            e.context(format!(
                "discarding staging job {} of table {}",
                job.id(),
                table.name()
            ))
        })?;
    }
    Ok(staged)
}
