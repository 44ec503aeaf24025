//! Publishing commands: `clone` (metadata-only table copy) and `ingest-snapshot`.

use floe::scan::SnapshotSelector;
use floe::table::parse_ident;
use floe::{ErrorKind, Result};

use super::output::print_json;
use super::{catalog_and_table, parse_time_ms, Cli};

/// Arguments of `floe clone`.
#[derive(clap::Args, Debug)]
pub struct CloneArgs {
    /// Source table.
    pub source: String,
    /// The clone (a new table unless --replace).
    pub target: String,
    /// Clone this snapshot of the source.
    #[arg(long)]
    pub snapshot: Option<i64>,
    /// Clone the snapshot a branch or tag of the source points at.
    #[arg(long = "ref")]
    pub reference: Option<String>,
    /// Clone the source as it was at this time (RFC 3339 or epoch milliseconds).
    #[arg(long)]
    pub as_of: Option<String>,
    /// Make an existing target's next snapshot the source's state (one atomic swap).
    #[arg(long)]
    pub replace: bool,
    /// Also copy the source's branches and tags (each at a clone of the snapshot it points
    /// at, with its retention); a new target only.
    #[arg(long, conflicts_with = "replace")]
    pub all_refs: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The snapshot a `--snapshot` / `--ref` / `--as-of` trio selects.
pub fn selector(
    snapshot: Option<i64>,
    reference: Option<&String>,
    as_of: Option<&String>,
) -> Result<SnapshotSelector> {
    let as_of = as_of.map(|t| parse_time_ms(t)).transpose()?;
    SnapshotSelector::from_options(
        snapshot,
        reference.cloned(),
        as_of,
        ["--snapshot", "--ref", "--as-of"],
    )
}

/// `floe clone`.
pub async fn clone(cli: &Cli, a: &CloneArgs) -> Result<()> {
    let (cat, source) = catalog_and_table(cli, &a.source).await?;
    let sel = selector(a.snapshot, a.reference.as_ref(), a.as_of.as_ref())?;
    let started = std::time::Instant::now();
    let target = parse_ident(&a.target)?;
    let r = if a.all_refs {
        floe::txn::clone_table_all_refs(&cat, &source, &sel, &target).await
    } else {
        floe::txn::clone_table(&cat, &source, &sel, &target, a.replace).await
    };
    let r = r.map_err(|e| match e.kind() {
        ErrorKind::AlreadyExists => e.with_hint("pass --replace to publish onto it"),
        _ => e,
    })?;
    if a.json {
        print_json(&super::report::clone(
            &a.source,
            &r,
            started.elapsed().as_millis() as u64,
        ));
    } else {
        outln!(
            "{} {} as a clone of {} snapshot {} ({} data files shared, {} manifests copied, {} reused) in {:.0} ms",
            if r.replaced { "replaced" } else { "created" },
            r.target,
            a.source,
            r.source_snapshot_id,
            r.data_files,
            r.copied_manifests,
            r.reused_manifests,
            started.elapsed().as_secs_f64() * 1000.0
        );
        for r in &r.refs {
            outln!(
                "  {} {} at snapshot {} (source snapshot {})",
                r.ref_type,
                r.name,
                r.snapshot_id,
                r.source_snapshot_id
            );
        }
    }
    Ok(())
}

/// Arguments of `floe ingest-snapshot`.
#[derive(clap::Args, Debug)]
pub struct IngestSnapshotArgs {
    /// The staging table.
    pub staging: String,
    /// The full snapshot: Parquet or CSV files, in arrival order.
    #[arg(required = true)]
    pub files: Vec<String>,
    /// Key columns, comma-separated (every partition column must be one).
    #[arg(long, value_delimiter = ',', value_parser = crate::item, required = true)]
    pub key: Vec<String>,
    /// The version column: per key the highest wins (equal: the newer arrival).
    #[arg(long)]
    pub version: String,
    /// change-aware (write only what changed) or rewrite (append, then rewrite the touched
    /// partitions).
    #[arg(long, default_value = "change-aware")]
    pub strategy: String,
    /// Then publish: make this table a clone of the new staging state (one atomic swap).
    #[arg(long)]
    pub publish: Option<String>,
    /// Drop partitions more than this many days old (metadata only).
    #[arg(long)]
    pub retain_days: Option<u32>,
    /// Snapshot bytes held in memory before spilling to temporary files.
    #[arg(long, default_value_t = 1 << 30)]
    pub memory_budget_bytes: usize,
    /// Merge into this branch of the staging table (main is untouched; --publish clones the
    /// branch's new state).
    #[arg(long)]
    pub branch: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `floe ingest-snapshot`.
pub async fn ingest_snapshot(cli: &Cli, a: &IngestSnapshotArgs) -> Result<()> {
    let (cat, staging) = catalog_and_table(cli, &a.staging).await?;
    let staging = match &a.branch {
        Some(b) => staging.on_branch(b)?,
        None => staging,
    };
    let conformer = super::table_conformer(&staging)?;
    // Open every input first: a missing file fails before anything is written.
    let mut readers = Vec::new();
    for f in &a.files {
        readers.push(super::input::read_file(
            f,
            &conformer,
            &super::input::CsvArgs::default(),
        )?);
    }
    let mut o = floe::ingest::IngestOptions::new(a.key.clone(), a.version.clone());
    o.strategy = a.strategy.parse()?;
    o.publish = a.publish.as_deref().map(parse_ident).transpose()?;
    o.retain_days = a.retain_days;
    o.memory_budget_bytes = a.memory_budget_bytes;
    let started = std::time::Instant::now();
    let label = format!("ingesting {} files into {}", a.files.len(), a.staging);
    let r = super::progress_bar::run(&label, a.json, |p| {
        let batches = super::input::counted(&a.files, readers, p);
        floe::ingest::ingest_snapshot(&cat, &staging, batches, &o)
    })
    .await;
    let r = r?;
    if a.json {
        print_json(&super::report::ingest_snapshot(&a.staging, &r, started));
        return Ok(());
    }
    let c = &r.changes;
    outln!(
        "{}: {} snapshot rows in {} partitions ({}, {}): {} unchanged, {} updated, {} inserted, {} stale, {} duplicates",
        a.staging, r.snapshot_rows, r.partitions, r.strategy, r.mode, c.unchanged, c.updated, c.inserted, c.stale, c.duplicates
    );
    outln!(
        "wrote {} rows ({:.2} MB) in {} data and {} delete files, removed {} data files, in {:.2}s",
        r.written_rows,
        r.written_bytes as f64 / 1e6,
        r.added_data_files,
        r.added_delete_files,
        r.removed_data_files,
        r.ingest_seconds
    );
    if r.expired_data_files > 0 {
        outln!("retention dropped {} data files", r.expired_data_files);
    }
    match (&r.published, &a.publish) {
        (Some(p), _) => outln!(
            "published {} (snapshot {}) in {:.0} ms",
            p.target,
            p.snapshot_id,
            r.publish_seconds * 1000.0
        ),
        (None, Some(target)) => {
            outln!("{target} not published again: it is already a clone of this staging state")
        }
        (None, None) => {}
    }
    Ok(())
}
