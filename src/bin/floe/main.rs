//! `floe`: the command-line front of the floe library (uses only its public API).

/// `println!` that ends the process quietly when stdout is closed (`floe files … | head`)
/// instead of panicking.
macro_rules! outln {
    ($($t:tt)*) => {
        $crate::output::line(format_args!($($t)*))
    };
}

mod alter;
mod append;
mod changes;
mod csv_bytes;
mod csv_nested;
mod csv_options;
mod csv_out;
mod dml;
mod ingest;
mod input;
mod input_position;
mod inspect;
mod json_lines;
mod keyed;
mod maintain;
mod maintenance;
mod op_column;
mod output;
mod progress_bar;
mod quickstart;
mod refs;
use floe::report;
mod rows;
mod scan;
mod sink;
mod tables;
mod text_columns;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use floe::catalog::Catalog;
use floe::storage::Storage;
use floe::table::parse_ident;
use floe::{Error, ErrorKind, Result, Table};

#[derive(Parser, Debug)]
#[command(
    name = "floe",
    version,
    about = "Write and read Apache Iceberg tables (v2/v3) without a JVM"
)]
struct Cli {
    /// Catalog URI: sqlite:////abs/path/catalog.db (four slashes: absolute; sqlite:rel.db is
    /// relative), postgresql://user:password@host:port/database, rest+http://[id:secret@]host:port
    /// (Iceberg REST) or file:///warehouse (Hadoop layout).
    /// Default: SQLite at <warehouse>/catalog.db.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "FLOE_CATALOG"
    )]
    catalog: Option<String>,
    /// Warehouse directory (default ./warehouse), or s3://bucket/path with a SQLite or
    /// PostgreSQL --catalog (S3 settings from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID,
    /// …); with a REST --catalog, the warehouse the server is asked for.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "FLOE_WAREHOUSE"
    )]
    warehouse: Option<String>,
    /// Catalog name (the catalog_name column of the SQL catalog).
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        default_value = "default"
    )]
    catalog_name: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Build a demo warehouse (a partitioned v2 table and a v3 table) and show how to open it.
    Quickstart {
        /// Where to build it (default: the global --warehouse, else ./warehouse).
        #[arg(long)]
        dir: Option<String>,
        /// Rows per table.
        #[arg(long, default_value_t = 200_000)]
        rows: usize,
        /// Print the tables built as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a table.
    Create(tables::CreateArgs),
    /// Append Parquet or CSV files to a table in one snapshot.
    Append(append::AppendArgs),
    /// Read rows.
    Scan(scan::ScanArgs),
    /// Rows changed between two snapshots: INSERT / DELETE / UPDATE_BEFORE / UPDATE_AFTER
    /// (Spark's changelog view).
    Changes(changes::ChangesArgs),
    /// Show a table's schema, partitioning, sort order, properties and current snapshot.
    Describe(inspect::TableRef),
    /// List a table's snapshots.
    Snapshots(inspect::SnapshotsArgs),
    /// List the data files of a snapshot, each with the delete files that apply to it.
    Files(inspect::FilesArgs),
    /// List, create or drop namespaces.
    Namespaces(tables::NamespacesArgs),
    /// List tables (of one namespace or all).
    Tables(tables::TablesArgs),
    /// Rename a table.
    Rename(tables::RenameArgs),
    /// Drop a table (with --purge, delete its files too).
    Drop(tables::DropArgs),
    /// Register an existing metadata file as a table.
    Register(tables::RegisterArgs),
    /// Delete rows (copy-on-write or merge-on-read per write.delete.mode).
    Delete(dml::DeleteArgs),
    /// Update rows (per write.update.mode); a changed partition column moves the row.
    Update(dml::UpdateArgs),
    /// Merge a source file into a table by key (default: upsert; per write.merge.mode).
    Merge(dml::MergeArgs),
    /// Compact data files (bin-pack), applying their deletes; commits a `replace` snapshot.
    RewriteDataFiles(maintenance::RewriteDataFilesArgs),
    /// Merge position delete files per partition and drop those of removed data files (v3:
    /// one deletion vector per data file).
    RewritePositionDeleteFiles(maintenance::RewritePositionDeleteFilesArgs),
    /// Rewrite the manifests clustered by partition (metadata only).
    RewriteManifests(maintenance::RewriteManifestsArgs),
    /// Expire old snapshots and delete the files only they reference (unless gc.enabled=false).
    ExpireSnapshots(maintenance::ExpireSnapshotsArgs),
    /// Delete files under the table location that no metadata references.
    RemoveOrphanFiles(maintenance::RemoveOrphanFilesArgs),
    /// Do the maintenance a table's state and policy call for (compaction, delete and
    /// manifest rewrites, tombstone merges, snapshot expiry, orphan removal), once or as a
    /// service (--watch), under a lease so two maintainers never work on one table.
    Maintain(maintain::MaintainArgs),
    /// Make a table that references another's data and delete files without copying them
    /// (metadata only); with --replace, publish onto an existing table in one swap.
    Clone(ingest::CloneArgs),
    /// Merge a full snapshot into a staging table keeping the latest row per key (writes only
    /// what changed), then optionally publish a target as its clone.
    IngestSnapshot(ingest::IngestSnapshotArgs),
    /// Run a DELETE, UPDATE, MERGE INTO or ALTER TABLE statement.
    Sql(dml::SqlArgs),
    /// Change a table's schema, partitioning, sort order or properties (Spark's ALTER TABLE
    /// clauses; one metadata-only commit).
    Alter(alter::AlterArgs),
    /// Create, replace, drop or fast-forward a branch (metadata only).
    Branch(refs::BranchArgs),
    /// Create, replace or drop a tag (metadata only).
    Tag(refs::TagArgs),
    /// Move main back to an ancestor snapshot (by id or time).
    Rollback(refs::RollbackArgs),
    /// Set main to any snapshot of the table.
    SetCurrentSnapshot(refs::SetCurrentSnapshotArgs),
    /// Publish a snapshot onto main: a staged write-audit-publish snapshot (--wap-id), or any
    /// snapshot off main's history (fast-forward, or re-applied as Iceberg Java does).
    Cherrypick(refs::CherrypickArgs),
    /// Apply change files (upserts and deletes by primary key, with versions) to a keyed table
    /// in one commit (past --max-rows-per-commit changes: in parts, one commit each).
    Upsert(keyed::UpsertArgs),
    /// Run a keyed table's CDC sink as a service: records from standard input or files
    /// arriving in a directory, committed in batches, exactly once across restarts.
    Sink(sink::SinkArgs),
    /// Show a keyed table's tombstones (deleted keys remembered against late replays).
    Tombstones(keyed::TombstonesArgs),
    /// Remove tombstones older than a time (replays of older versions can then resurrect keys).
    ExpireTombstones(keyed::ExpireTombstonesArgs),
}

/// One item of a comma-separated flag (`--columns "a, b"`), trimmed as every such flag
/// trims its items; an empty item is refused.
fn item(s: &str) -> std::result::Result<String, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("an empty item in a comma-separated list".into());
    }
    Ok(t.to_string())
}

fn kv(s: &str) -> std::result::Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("expected key=value, got '{s}'"))
}

/// "unknown column 'purchase'" from `--where 'kind = "purchase"'`: in SQL double quotes name
/// a column, so say that a string takes single quotes.
fn double_quoted_string_hint(e: floe::Error) -> floe::Error {
    let Some(name) = e
        .message()
        .split_once("unknown column '")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(name, _)| name.to_string())
    else {
        return e;
    };
    let quoted = format!("\"{name}\"");
    if std::env::args().any(|a| a.contains(&quoted)) {
        e.with_hint(format!(
            "{quoted} names a column in SQL; a string takes single quotes: '{name}'"
        ))
    } else {
        e
    }
}

/// A panic inside the async runtime itself (tokio or mio: an I/O driver that failed to wake,
/// say) can leave the command waiting forever for a task that never runs again: the process
/// ends instead, saying so (exit 1). Other panics keep Rust's handling (floe turns a panicking
/// file decoder into an error naming the file).
fn exit_on_runtime_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        let in_runtime = info.location().is_some_and(|l| {
            let f = l.file();
            ["tokio-", "mio-"]
                .iter()
                .any(|c| f.contains(&format!("/{c}")) || f.starts_with(c))
        });
        if in_runtime {
            output::remove_partial_files();
            eprintln!(
                "error: floe's async runtime failed (above) and the command cannot go on; if it \
                 was committing, `floe snapshots` shows whether the commit landed before a retry"
            );
            std::process::exit(1);
        }
    }));
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    exit_on_runtime_panics();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // `sink` and `maintain` stop on signals themselves (at a batch or step boundary).
    let own_signals = matches!(cli.cmd, Cmd::Sink(_) | Cmd::Maintain(_));
    if !own_signals {
        use tokio::signal::unix::{signal, SignalKind};
        // Installed before the command starts, so no signal comes before them.
        let _entered = rt.enter();
        if let (Ok(term), Ok(int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            rt.spawn(exit_on_signals(term, int));
        }
    }
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let e = double_quoted_string_hint(e);
            eprintln!("error: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                eprintln!("  caused by: {s}");
                src = s.source();
            }
            ExitCode::from(match e.kind() {
                ErrorKind::InvalidInput | ErrorKind::AlreadyExists => 2,
                ErrorKind::NotFound => 3,
                ErrorKind::Conflict | ErrorKind::CommitStateUnknown => 4,
                _ => 1,
            })
        }
    }
}

/// Ends the process on Ctrl-C / SIGTERM, saying so on stderr (exit 130). It runs on a
/// worker thread of the runtime, so a signal is seen while the command is busy. A catalog
/// commit under way when the signal comes is let finish (up to 30 s): cut off, it might or
/// might not land. The command's partial output file is removed; data files it wrote and
/// did not commit are orphans (`remove-orphan-files`).
async fn exit_on_signals(
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
) {
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "Ctrl-C",
    };
    if floe::catalog::commits_in_flight() > 0 {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        while floe::catalog::commits_in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        eprintln!(
            "interrupted ({name}) after a commit that was under way had ended: it may have \
             landed; `floe snapshots TABLE` shows the table's history"
        );
    } else {
        eprintln!(
            "interrupted ({name}): stopped before the command finished; nothing was committed"
        );
    }
    output::remove_partial_files();
    std::process::exit(130);
}

/// The catalog of `--catalog` / `--warehouse`, which must exist: reading (and changing
/// existing tables) never creates a catalog, a directory or a file.
fn catalog(cli: &Cli) -> Result<Catalog> {
    Catalog::open_existing(
        cli.catalog.as_deref(),
        cli.warehouse.as_deref(),
        Some(&cli.catalog_name),
    )
    .map_err(catalog_hint)
}

/// Names the flags that choose the catalog in an error opening it.
fn catalog_hint(e: floe::Error) -> floe::Error {
    match e.kind() {
        ErrorKind::InvalidInput | ErrorKind::NotFound | ErrorKind::Unsupported => {
            e.with_hint("choose the catalog with --catalog URI or --warehouse DIR")
        }
        _ => e,
    }
}

/// The catalog, created when missing (`create`, `register`, `namespaces --create`).
fn catalog_creating(cli: &Cli) -> Result<Catalog> {
    Catalog::open(
        cli.catalog.as_deref(),
        cli.warehouse.as_deref(),
        Some(&cli.catalog_name),
    )
    .map_err(catalog_hint)
}

/// The catalog and the table `name` in it.
async fn catalog_and_table(cli: &Cli, name: &str) -> Result<(Catalog, Table)> {
    let cat = catalog(cli)?;
    let table = cat.load_write_target(name).await?;
    Ok((cat, table))
}

async fn load(cli: &Cli, name: Option<&str>, metadata: Option<&str>) -> Result<Table> {
    match (name, metadata) {
        (_, Some(m)) => {
            let path = if m.starts_with('/') || m.contains(':') {
                m.to_string()
            } else {
                std::path::absolute(m)
                    .map(|p| p.to_string_lossy().replace("/./", "/"))
                    .unwrap_or_else(|_| m.to_string())
            };
            Table::open_static(&Storage::new(), &path).await
        }
        (Some(n), None) => catalog(cli)?.load_table(&parse_ident(n)?).await,
        (None, None) => Err(Error::new(
            ErrorKind::InvalidInput,
            "give a table NAME or --metadata PATH",
        )),
    }
}

use progress_bar::spinner;

fn parse_time_ms(s: &str) -> Result<i64> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|d| d.timestamp_millis())
        .map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("--as-of '{s}': expected RFC 3339 or milliseconds ({e})"),
            )
        })
}

async fn run(cli: Cli) -> Result<()> {
    match &cli.cmd {
        Cmd::Quickstart { dir, rows, json } => {
            let dir = dir.as_deref().or(cli.warehouse.as_deref());
            quickstart::run(dir.unwrap_or("warehouse"), *rows, *json).await
        }
        Cmd::Create(a) => tables::create(&cli, a).await,
        Cmd::Append(a) => append::append(&cli, a).await,
        Cmd::Scan(a) => scan::scan(&cli, a).await,
        Cmd::Changes(a) => changes::changes(&cli, a).await,
        Cmd::Describe(a) => inspect::describe(&cli, a).await,
        Cmd::Snapshots(a) => inspect::snapshots(&cli, a).await,
        Cmd::Files(a) => inspect::files(&cli, a).await,
        Cmd::Namespaces(a) => tables::namespaces(&cli, a).await,
        Cmd::Tables(a) => tables::tables(&cli, a).await,
        Cmd::Rename(a) => tables::rename(&cli, a).await,
        Cmd::Drop(a) => tables::drop(&cli, a).await,
        Cmd::Delete(a) => dml::delete(&cli, a).await,
        Cmd::Update(a) => dml::update(&cli, a).await,
        Cmd::Merge(a) => dml::merge(&cli, a).await,
        Cmd::Sql(a) if floe::spec::is_alter_table(&a.statement) => {
            match floe::spec::parse_rename_table(&a.statement) {
                Some((from, to)) => {
                    let r = tables::RenameArgs {
                        from,
                        to,
                        json: a.json,
                    };
                    tables::rename(&cli, &r).await
                }
                None => alter::sql(&cli, &a.statement, a.json).await,
            }
        }
        Cmd::Sql(a) => dml::sql(&cli, a).await,
        Cmd::Alter(a) => alter::alter(&cli, a).await,
        Cmd::Branch(a) => refs::branch(&cli, a).await,
        Cmd::Tag(a) => refs::tag(&cli, a).await,
        Cmd::Rollback(a) => refs::rollback(&cli, a).await,
        Cmd::SetCurrentSnapshot(a) => refs::set_current_snapshot(&cli, a).await,
        Cmd::Cherrypick(a) => refs::cherrypick(&cli, a).await,
        Cmd::Upsert(a) => keyed::upsert(&cli, a).await,
        Cmd::Tombstones(a) => keyed::tombstones(&cli, a).await,
        Cmd::Sink(a) => sink::sink(&cli, a).await,
        Cmd::ExpireTombstones(a) => keyed::expire_tombstones(&cli, a).await,
        Cmd::RewriteDataFiles(a) => maintenance::rewrite_data_files(&cli, a).await,
        Cmd::RewritePositionDeleteFiles(a) => {
            maintenance::rewrite_position_delete_files(&cli, a).await
        }
        Cmd::RewriteManifests(a) => maintenance::rewrite_manifests(&cli, a).await,
        Cmd::Clone(a) => ingest::clone(&cli, a).await,
        Cmd::IngestSnapshot(a) => ingest::ingest_snapshot(&cli, a).await,
        Cmd::ExpireSnapshots(a) => maintenance::expire_snapshots(&cli, a).await,
        Cmd::RemoveOrphanFiles(a) => maintenance::remove_orphan_files(&cli, a).await,
        Cmd::Maintain(a) => maintain::maintain(&cli, a).await,
        Cmd::Register(a) => tables::register(&cli, a).await,
    }
}

/// Conforms input rows to the table's current schema.
fn table_conformer(t: &Table) -> Result<floe::write::Conformer> {
    floe::write::Conformer::new(t.metadata().current_schema(), &t.name())
}

/// The Arrow schema of `schema`'s `columns` (all when `None`), as a scan returns them.
fn floe_arrow_schema(
    schema: &floe::spec::Schema,
    columns: Option<&[String]>,
) -> Result<arrow::datatypes::Schema> {
    let full = floe::spec::arrow_schema(schema)?;
    Ok(match columns {
        None => full,
        Some(cols) => {
            let idx: Vec<usize> = cols.iter().filter_map(|c| full.index_of(c).ok()).collect();
            full.project(&idx)
                .map_err(|e| Error::new(ErrorKind::InvalidInput, e.to_string()))?
        }
    })
}
