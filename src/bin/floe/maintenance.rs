//! Maintenance commands: compaction, expiry, orphan removal, manifest rewrite.

use std::collections::HashMap;
use std::time::Instant;

use floe::{Error, ErrorKind, Result};
use indicatif::{ProgressBar, ProgressStyle};

use super::output::print_json;
use super::report;
use super::{catalog_and_table, kv, parse_time_ms, progress_bar, spinner, Cli};

/// Arguments of `floe rewrite-data-files`.
#[derive(clap::Args, Debug)]
pub struct RewriteDataFilesArgs {
    /// Table name.
    pub name: String,
    /// Only files that may hold rows matching this predicate.
    #[arg(long = "where", value_name = "EXPR", allow_hyphen_values = true)]
    pub filter: Option<String>,
    /// Only plan: print the file-group tasks as JSON (run them with --execute-task).
    #[arg(long)]
    pub plan_only: bool,
    /// Run one task of a plan file written by --plan-only (with --group); prints its
    /// result as JSON (commit the results with --commit).
    #[arg(long, value_name = "PLAN_FILE")]
    pub execute_task: Option<String>,
    /// The task (group number) of --execute-task's plan.
    #[arg(long)]
    pub group: Option<usize>,
    /// Commit the results (files written by --execute-task runs) as one replace snapshot.
    #[arg(long, value_name = "RESULT_FILE", num_args = 1..)]
    pub commit: Vec<String>,
    /// binpack (default), sort or zorder.
    #[arg(long, default_value = "binpack")]
    pub strategy: String,
    /// Sort order for --strategy sort (default: the table's), e.g. "ts desc, id"; or
    /// "zorder(a, b)".
    #[arg(long)]
    pub sort_by: Option<String>,
    /// Columns for --strategy zorder (comma-separated): rows ordered by their interleaved bits.
    #[arg(long, value_delimiter = ',', value_parser = crate::item)]
    pub zorder_by: Option<Vec<String>>,
    /// Spark procedure options, e.g. --option min-input-files=2 --option rewrite-all=true;
    /// also rewrite-job-order=none|bytes-asc|bytes-desc|files-asc|files-desc,
    /// output-spec-id=N (write with that partition spec), remove-dangling-deletes=true.
    #[arg(long = "option", value_parser = kv)]
    pub options: Vec<(String, String)>,
    /// Compact the files of this branch (main is untouched); in one process only (not with
    /// --plan-only, --execute-task, --commit).
    #[arg(long, conflicts_with_all = ["plan_only", "execute_task", "commit"])]
    pub branch: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `floe rewrite-position-delete-files`.
#[derive(clap::Args, Debug)]
pub struct RewritePositionDeleteFilesArgs {
    /// Table name.
    pub name: String,
    /// Options: rewrite-all=true, min-input-files=N.
    #[arg(long = "option", value_parser = kv)]
    pub options: Vec<(String, String)>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `floe rewrite-manifests`.
#[derive(clap::Args, Debug)]
pub struct RewriteManifestsArgs {
    /// Table name.
    pub name: String,
    /// Target manifest size (default: commit.manifest.target-size-bytes, 8 MB).
    #[arg(long)]
    pub target_size_bytes: Option<u64>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `floe expire-snapshots`.
#[derive(clap::Args, Debug)]
pub struct ExpireSnapshotsArgs {
    /// Table name.
    pub name: String,
    /// Expire snapshots older than this (ms since the epoch, or a date/time such as
    /// 2024-06-01T00:00:00Z; default: history.expire.max-snapshot-age-ms ago).
    #[arg(long)]
    pub older_than: Option<String>,
    /// Keep at least this many newest snapshots of each branch
    /// (default: history.expire.min-snapshots-to-keep).
    #[arg(long)]
    pub retain_last: Option<usize>,
    /// Expire these snapshots too.
    #[arg(long = "snapshot-id")]
    pub snapshot_ids: Vec<i64>,
    /// Show what would be expired and deleted, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `floe remove-orphan-files`.
#[derive(clap::Args, Debug)]
pub struct RemoveOrphanFilesArgs {
    /// Table name.
    pub name: String,
    /// Only files older than this (ms since the epoch or a date/time; default 3 days ago).
    #[arg(long)]
    pub older_than: Option<String>,
    /// List the orphans without deleting them.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `floe rewrite-data-files`.
pub async fn rewrite_data_files(cli: &Cli, a: &RewriteDataFilesArgs) -> Result<()> {
    let RewriteDataFilesArgs {
        name,
        filter,
        plan_only,
        execute_task,
        group,
        commit,
        strategy,
        sort_by,
        zorder_by,
        options,
        branch,
        json,
    } = a;
    let started = Instant::now();
    let (cat, table) = catalog_and_table(cli, name).await?;
    let table = match branch {
        Some(b) => table.on_branch(b)?,
        None => table,
    };
    if table.branch() != "main" && (*plan_only || execute_task.is_some() || !commit.is_empty()) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "rewrite-data-files of branch '{}': a distributed rewrite (--plan-only, \
                 --execute-task, --commit) rewrites main only; run it in one process",
                table.branch()
            ),
        ));
    }
    let pred = match filter {
        Some(f) => Some(floe::expr::file_selection(
            f,
            table.metadata().current_schema(),
        )?),
        None => None,
    };
    let mut options: HashMap<String, String> = options.iter().cloned().collect();
    options.insert("strategy".into(), strategy.clone());
    if let Some(s) = sort_by {
        options.insert("sort-order".into(), s.clone());
    }
    if let Some(cols) = zorder_by {
        options.insert("zorder-by".into(), cols.join(","));
    }
    let read_json = |path: &str| -> Result<serde_json::Value> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::new(ErrorKind::NotFound, format!("cannot read '{path}': {e}")))?;
        Ok(serde_json::from_str(&text)?)
    };
    if let Some(plan_file) = execute_task {
        let plan: floe::maintenance::RewritePlan = serde_json::from_value(read_json(plan_file)?)?;
        let g = group
            .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "--execute-task needs --group N"))?;
        let change = floe::pending::stage_rewrite(&cat, &plan, g)
            .await
            .map_err(|e| e.context(format!("plan '{plan_file}'")))?;
        print_json(&serde_json::to_value(&change)?);
        return Ok(());
    }
    if !commit.is_empty() {
        let changes = commit
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(f).map_err(|e| {
                    Error::new(ErrorKind::NotFound, format!("cannot read '{f}': {e}"))
                })?;
                floe::pending::PendingChange::from_json(&text)
                    .map_err(|e| e.context(format!("'{f}'")))
            })
            .collect::<Result<Vec<_>>>()?;
        if let Some((f, c)) = commit
            .iter()
            .zip(&changes)
            .find(|(_, c)| c.operation.name() != "rewrite")
        {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "'{f}' holds an '{}' change, not a rewrite task's result (--execute-task); nothing was committed",
                    c.operation.name()
                ),
            ));
        }
        let options = floe::pending::CommitPendingOptions::new();
        let r = match floe::pending::commit_pending(&cat, &changes, &options).await? {
            floe::pending::PendingCommit::Rewrite(r) => r,
            _ => return Err(Error::new(ErrorKind::InvalidInput, "not a rewrite")),
        };
        print_json(&report::rewrite_data_files(name, &r, started));
        return Ok(());
    }
    if *plan_only {
        let planned = floe::maintenance::plan_rewrite(&table, pred, &options).await?;
        print_json(&serde_json::to_value(&planned.plan)?);
        return Ok(());
    }
    // A bar over file groups (each group's scan would restart a bar over bytes), with the
    // rows and bytes written so far.
    let pb = if progress_bar::shown(*json) {
        ProgressBar::new(0)
    } else {
        ProgressBar::hidden()
    };
    pb.set_style(
        ProgressStyle::with_template(
            "[{bar:40}] {pos}/{len} file groups ({elapsed}, ETA {eta}) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    let counters = floe::progress::Progress::new();
    let (pb2, c2) = (pb.clone(), counters.clone());
    let on_group = move |done: usize, total: usize| {
        let s = c2.state();
        pb2.set_length(total as u64);
        pb2.set_position(done as u64);
        pb2.set_message(format!(
            "{} rows, {} written",
            s.rows_written,
            indicatif::HumanBytes(s.bytes_written)
        ));
    };
    let r = counters
        .scope(floe::maintenance::rewrite_data_files(
            &cat,
            &table,
            pred,
            &options,
            Some(&on_group),
        ))
        .await;
    pb.finish_and_clear();
    let r = r?;
    if *json {
        print_json(&report::rewrite_data_files(name, &r, started));
    } else if let (0, Some(reason)) = (r.file_groups, &r.reason) {
        outln!("{name}: nothing to rewrite: {reason}");
    } else {
        outln!(
            "{name}: rewrote {} data files ({:.1} MB) in {} groups into {} files, removed {} delete files{} in {:.2}s",
            r.rewritten_data_files_count,
            r.rewritten_bytes_count as f64 / 1e6,
            r.file_groups,
            r.added_data_files_count,
            r.removed_delete_files_count,
            r.snapshot_id.map(|s| format!(" (snapshot {s})")).unwrap_or_default(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// `floe rewrite-position-delete-files`.
pub async fn rewrite_position_delete_files(
    cli: &Cli,
    a: &RewritePositionDeleteFilesArgs,
) -> Result<()> {
    let RewritePositionDeleteFilesArgs {
        name,
        options,
        json,
    } = a;
    let (cat, table) = catalog_and_table(cli, name).await?;
    let options: HashMap<String, String> = options.iter().cloned().collect();
    let started = Instant::now();
    let r = progress_bar::run("rewriting position delete files", *json, |_| {
        floe::maintenance::rewrite_position_delete_files(&cat, &table, &options)
    })
    .await;
    let r = r?;
    if *json {
        print_json(&report::rewrite_position_delete_files(name, &r, started));
    } else {
        outln!(
            "{name}: replaced {} delete files ({:.2} MB) with {} ({:.2} MB){}",
            r.rewritten_delete_files_count,
            r.rewritten_bytes_count as f64 / 1e6,
            r.added_delete_files_count,
            r.added_bytes_count as f64 / 1e6,
            r.snapshot_id
                .map(|s| format!(", snapshot {s}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

/// `floe rewrite-manifests`.
pub async fn rewrite_manifests(cli: &Cli, a: &RewriteManifestsArgs) -> Result<()> {
    let RewriteManifestsArgs {
        name,
        target_size_bytes,
        json,
    } = a;
    let (cat, table) = catalog_and_table(cli, name).await?;
    let started = Instant::now();
    let r = floe::maintenance::rewrite_manifests(&cat, &table, *target_size_bytes).await?;
    if *json {
        print_json(&report::rewrite_manifests(name, &r, started));
    } else {
        outln!(
            "{name}: replaced {} manifests with {}",
            r.rewritten_manifests_count,
            r.added_manifests_count
        );
    }
    Ok(())
}

/// `floe expire-snapshots`.
pub async fn expire_snapshots(cli: &Cli, a: &ExpireSnapshotsArgs) -> Result<()> {
    let ExpireSnapshotsArgs {
        name,
        older_than,
        retain_last,
        snapshot_ids,
        dry_run,
        json,
    } = a;
    let (cat, table) = catalog_and_table(cli, name).await?;
    let mut o = floe::maintenance::ExpireOptions::default();
    o.older_than_ms = older_than.as_deref().map(parse_time_ms).transpose()?;
    o.retain_last = *retain_last;
    o.snapshot_ids = snapshot_ids.clone();
    o.dry_run = *dry_run;
    let started = Instant::now();
    let pb = spinner("expiring snapshots", *json);
    let r = floe::maintenance::expire_snapshots(&cat, &table, &o).await;
    pb.finish_and_clear();
    let r = r?;
    if *json {
        print_json(&report::expire_snapshots(name, &r, *dry_run, started));
    } else {
        outln!(
            "{name}: {} {} snapshots; {} data files, {} delete files, {} manifests, {} manifest lists {}",
            if *dry_run { "would expire" } else { "expired" },
            r.expired_snapshot_ids.len(),
            r.deleted_data_files_count,
            r.deleted_delete_files_count,
            r.deleted_manifest_files_count,
            r.deleted_manifest_lists_count,
            if *dry_run { "to delete" } else { "deleted (none if gc.enabled=false)" }
        );
        if let Some(m) = &r.metadata_location {
            outln!("committed: metadata {m}");
        }
    }
    // The expiry committed; only the cleanup after it failed: a warning, not a failure.
    if let Some(e) = &r.cleanup_error {
        eprintln!("warning: {e}");
    }
    Ok(())
}

/// `floe remove-orphan-files`.
pub async fn remove_orphan_files(cli: &Cli, a: &RemoveOrphanFilesArgs) -> Result<()> {
    let RemoveOrphanFilesArgs {
        name,
        older_than,
        dry_run,
        json,
    } = a;
    let (cat, table) = catalog_and_table(cli, name).await?;
    let cutoff = older_than.as_deref().map(parse_time_ms).transpose()?;
    let started = Instant::now();
    let pb = spinner("listing and matching files", *json);
    let r = floe::maintenance::remove_orphan_files(&cat, &table, cutoff, *dry_run).await;
    pb.finish_and_clear();
    let r = r?;
    if *json {
        print_json(&report::remove_orphan_files(name, &r, started));
    } else {
        for p in &r.orphan_file_locations {
            outln!("{p}");
        }
        outln!(
            "{name}: {} orphan files {}",
            r.orphan_file_locations.len(),
            if r.deleted {
                "deleted"
            } else {
                "found (dry run)"
            }
        );
    }
    Ok(())
}
