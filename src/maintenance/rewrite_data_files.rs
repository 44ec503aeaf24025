//! `rewrite_data_files`: compacts data files (bin-pack) with their deletes applied, committed
//! as a `replace` snapshot that removes the old files and the delete files only they used.

use std::collections::{HashMap, HashSet};

use futures::StreamExt;
use iceberg::expr::{Bind, Predicate};
use iceberg::spec::Operation;

use super::rewrite_plan::{plan_groups, RewriteOptions};
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::scan::{is_file_scoped, Scan, SnapshotSelector};
use crate::spec::{DataContentType, IsolationLevel};
use crate::table::Table;
use crate::txn::{commit, FileKey, RowLevelValidation, SnapshotProducer};
use crate::write::DataWriter;

/// What `rewrite_data_files` did (the result columns of Iceberg's Spark procedure).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RewriteResult {
    /// The table at the new version.
    #[serde(skip)]
    pub table: Option<Table>,
    /// The `replace` snapshot (`None` when nothing needed rewriting).
    pub snapshot_id: Option<i64>,
    /// Data files rewritten.
    pub rewritten_data_files_count: usize,
    /// Data files written.
    pub added_data_files_count: usize,
    /// Bytes of the rewritten data files.
    pub rewritten_bytes_count: u64,
    /// Data files of groups that failed (0: groups fail the whole job).
    pub failed_data_files_count: usize,
    /// Delete files removed because no live data file needs them any more.
    pub removed_delete_files_count: usize,
    /// File groups rewritten.
    pub file_groups: usize,
}

/// Progress callback: (groups done, groups in all).
pub type Progress<'a> = &'a (dyn Fn(usize, usize) + Send + Sync);

/// Rewrites the data files the planner selects (`filter` limits them to files that may hold
/// matching rows), applying their deletes, as one `replace` commit. Besides the Spark options,
/// `options` takes the procedure's `strategy` (`binpack`, default, or `sort`) and
/// `sort-order` (default: the table's). The sort strategy sorts each partition's rows in runs of
/// up to a million rows (not one total order per file group).
pub async fn rewrite_data_files(
    catalog: &Catalog,
    table: &Table,
    filter: Option<Predicate>,
    options: &HashMap<String, String>,
    progress: Option<Progress<'_>>,
) -> Result<RewriteResult> {
    let props = table.properties()?;
    let ctx = |e: Error| e.context(format!("rewrite_data_files on {}", table.name()));
    // `strategy` and `sort-order` are the procedure's arguments; the rest are its options.
    let mut options = options.clone();
    let strategy = options
        .remove("strategy")
        .unwrap_or_else(|| "binpack".into());
    let sort_text = options.remove("sort-order");
    let md = table.metadata();
    let sort = match (strategy.to_ascii_lowercase().as_str(), sort_text) {
        ("binpack", None) => None,
        ("sort", Some(text)) => {
            Some(crate::spec::parse_sort_order(&text, md.current_schema()).map_err(ctx)?)
        }
        ("sort", None) => {
            let o = md.default_sort_order().as_ref().clone();
            if o.fields.is_empty() {
                return Err(ctx(Error::invalid(
                    "strategy sort needs a sort order: the table has none, so give one (e.g. sort-order='id DESC NULLS LAST')",
                )));
            }
            Some(o)
        }
        ("binpack", Some(_)) => {
            return Err(ctx(Error::invalid("a sort order needs strategy=sort")))
        }
        (s, _) => {
            return Err(ctx(Error::invalid(format!(
                "unknown strategy '{s}': expected binpack or sort"
            ))))
        }
    };
    let o = RewriteOptions::parse(props.target_file_size_bytes, &options).map_err(ctx)?;
    let mut result = RewriteResult {
        table: Some(table.clone()),
        snapshot_id: None,
        rewritten_data_files_count: 0,
        added_data_files_count: 0,
        rewritten_bytes_count: 0,
        failed_data_files_count: 0,
        removed_delete_files_count: 0,
        file_groups: 0,
    };
    let Some(start) = table.current_snapshot().cloned() else {
        return Ok(result);
    };
    let scan = Scan::new(table).snapshot(SnapshotSelector::Id(start.snapshot_id()));
    let mut planning = scan.clone();
    if let Some(f) = &filter {
        planning = planning.filter(f.clone());
    }
    let plan = planning.plan().await?.without_row_filter();
    let groups = plan_groups(&plan.files, &o);
    if groups.is_empty() {
        return Ok(result);
    }
    // Delete files used only by rewritten files go with them; others stay.
    let rewritten: HashSet<usize> = groups
        .iter()
        .flat_map(|g| g.files.iter().copied())
        .collect();
    let mut removed: Vec<FileKey> = Vec::new();
    let mut touched = Vec::new();
    let mut seen_deletes = HashSet::new();
    for &i in &rewritten {
        let f = &plan.files[i];
        removed.push(FileKey::of(&f.file));
        touched.push((f.file.clone(), f.spec.clone()));
        result.rewritten_bytes_count += f.file.file_size_in_bytes();
        for d in &f.deletes {
            if d.file.content_type() == DataContentType::PositionDeletes
                && is_file_scoped(&d.file)
                && seen_deletes.insert(FileKey::of(&d.file))
            {
                removed.push(FileKey::of(&d.file));
                result.removed_delete_files_count += 1;
            }
        }
    }
    let total = groups.len();
    let mut written = Vec::new();
    let mut done = 0;
    let mut stream = futures::stream::iter(groups.iter().map(|g| {
        let sub = plan.subset(&g.files);
        let scan = scan.clone();
        let sort = sort.clone();
        async move {
            let mut w = DataWriter::new(table)?
                .with_target_file_size(o.target_file_size_bytes)
                .with_sort_order(sort, table);
            let run = async {
                let mut rows = scan.read(sub)?;
                while let Some(b) = rows.next().await {
                    w.write(b?).await?;
                }
                Ok::<_, Error>(())
            }
            .await;
            match run {
                Ok(()) => w.close().await,
                Err(e) => {
                    w.abort(table.storage()).await;
                    Err(e)
                }
            }
        }
    }))
    .buffer_unordered(o.max_concurrent_file_group_rewrites);
    let mut failure = None;
    while let Some(r) = stream.next().await {
        match r {
            Ok(files) => written.extend(files),
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
        done += 1;
        if let Some(p) = progress {
            p(done, total);
        }
    }
    drop(stream);
    let cleanup = |files: Vec<crate::spec::DataFile>| async move {
        for f in files {
            let _ = table.storage().delete(f.file_path()).await;
        }
    };
    if let Some(e) = failure {
        cleanup(written).await;
        return Err(e.context(format!("rewrite_data_files on {}", table.name())));
    }
    result.rewritten_data_files_count = rewritten.len();
    result.added_data_files_count = written.len();
    result.file_groups = total;
    let mut producer =
        SnapshotProducer::new(Operation::Replace, written.clone()).remove_files(removed);
    if o.use_starting_sequence_number {
        producer = producer.with_data_sequence_number(start.sequence_number());
    }
    let conflict_filter = match &filter {
        Some(f) => Some(
            f.clone()
                .bind(table.metadata().current_schema().clone(), false)
                .map_err(|e| Error::invalid(format!("rewrite filter: {}", e.message())))?,
        ),
        None => None,
    };
    let validation = RowLevelValidation {
        isolation: IsolationLevel::Snapshot,
        conflict_filter,
        touched,
        ignore_equality_deletes: o.use_starting_sequence_number,
        table: table.name(),
    };
    match commit(catalog, table, &mut producer, &validation).await {
        Ok(t) => {
            result.table = Some(t);
            result.snapshot_id = Some(producer.snapshot_id());
            Ok(result)
        }
        Err(e) => {
            if e.kind() != crate::ErrorKind::CommitStateUnknown {
                cleanup(written).await;
            }
            Err(e)
        }
    }
}
