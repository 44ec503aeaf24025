//! `floe`: the command-line front of the floe library (uses only its public API).

/// `println!` that ends the process quietly when stdout is closed (`floe files … | head`)
/// instead of panicking.
macro_rules! outln {
    ($($t:tt)*) => {
        $crate::output::line(format_args!($($t)*))
    };
}

mod csv_nested;
mod dml;
mod ingest;
mod input;
mod inspect;
mod maintenance;
mod output;
mod progress_bar;
mod quickstart;
mod report;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};
use floe::catalog::{Catalog, TableCreation};
use floe::scan::Scan;
use floe::spec::{parse_partition_spec, parse_schema, parse_sort_order, FormatVersion};
use floe::storage::Storage;
use floe::table::{ident_name, parse_ident};
use floe::{Error, ErrorKind, Result, Table};
use futures::TryStreamExt;

use serde_json::json;

use output::{print_json, write_batches, Format};

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
    Create {
        /// Table name (ns.table).
        name: String,
        /// Schema DDL, e.g. 'id long, name string, ts timestamptz'.
        #[arg(long, required_unless_present = "schema_from")]
        schema: Option<String>,
        /// Take the schema from a Parquet file instead.
        #[arg(long, conflicts_with = "schema")]
        schema_from: Option<String>,
        /// Partition spec, e.g. 'day(ts), bucket(16,id)'.
        #[arg(long)]
        partition_by: Option<String>,
        /// Sort order, e.g. 'id desc nulls last'.
        #[arg(long)]
        sort_by: Option<String>,
        /// Table property k=v (repeatable).
        #[arg(long = "property", value_parser = kv)]
        properties: Vec<(String, String)>,
        /// Format version (1, 2 or 3).
        #[arg(long, default_value_t = 2)]
        format_version: u8,
        /// Explicit table location.
        #[arg(long)]
        location: Option<String>,
        /// Store --property keys under write., commit., history. or floe. that neither
        /// Iceberg nor floe defines (by default a typo there is refused).
        #[arg(long)]
        allow_unknown_properties: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Append Parquet or CSV files to a table in one snapshot.
    Append {
        /// Table name.
        name: String,
        /// Input files (.parquet, .csv).
        #[arg(required = true)]
        files: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Read rows.
    Scan {
        /// Table name (or use --metadata).
        name: Option<String>,
        /// Read a metadata.json or table directory without a catalog.
        #[arg(long)]
        metadata: Option<String>,
        /// Columns to return (comma-separated).
        #[arg(long, value_delimiter = ',')]
        columns: Option<Vec<String>>,
        /// Row filter, e.g. "ts >= '2024-01-01' AND id IN (1,2)".
        #[arg(long = "where", allow_hyphen_values = true)]
        filter: Option<String>,
        /// Snapshot id (time travel).
        #[arg(long)]
        snapshot: Option<i64>,
        /// Branch or tag.
        #[arg(long = "ref")]
        reference: Option<String>,
        /// Timestamp (RFC 3339 or ms since epoch): the snapshot current then.
        #[arg(long)]
        as_of: Option<String>,
        /// Print only the row count.
        #[arg(long)]
        count: bool,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Output file.
        #[arg(short = 'o', long)]
        output: Option<String>,
        /// At most this many rows (table format defaults to 100).
        #[arg(long)]
        limit: Option<usize>,
        /// JSON output (same as --format json).
        #[arg(long)]
        json: bool,
    },
    /// Show a table's schema, partitioning, sort order, properties and current snapshot.
    Describe(inspect::TableRef),
    /// List a table's snapshots.
    Snapshots(inspect::SnapshotsArgs),
    /// List the data files of a snapshot, each with the delete files that apply to it.
    Files(inspect::FilesArgs),
    /// List, create or drop namespaces.
    Namespaces {
        /// Create this namespace.
        #[arg(long)]
        create: Option<String>,
        /// Drop this (empty) namespace.
        #[arg(long)]
        drop: Option<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// List tables (of one namespace or all).
    Tables {
        /// Namespace.
        namespace: Option<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Rename a table.
    Rename {
        /// Current name.
        from: String,
        /// New name.
        to: String,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Drop a table (with --purge, delete its files too).
    Drop {
        /// Table name.
        name: String,
        /// Delete data and metadata files.
        #[arg(long)]
        purge: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Register an existing metadata file as a table.
    Register {
        /// Table name.
        name: String,
        /// Metadata file location.
        metadata: String,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
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
    /// Make a table that references another's data and delete files without copying them
    /// (metadata only); with --replace, publish onto an existing table in one swap.
    Clone(ingest::CloneArgs),
    /// Merge a full snapshot into a staging table keeping the latest row per key (writes only
    /// what changed), then optionally publish a target as its clone.
    IngestSnapshot(ingest::IngestSnapshotArgs),
    /// Run a DELETE, UPDATE or MERGE INTO statement.
    Sql(dml::SqlArgs),
}

fn kv(s: &str) -> std::result::Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("expected key=value, got '{s}'"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
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
    let table = cat.load_table(&parse_ident(name)?).await?;
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
        Cmd::Create {
            name,
            schema,
            schema_from,
            partition_by,
            sort_by,
            properties,
            format_version,
            location,
            allow_unknown_properties,
            json,
        } => {
            let ident = parse_ident(name)?;
            let schema = match (schema, schema_from) {
                (Some(ddl), _) => parse_schema(ddl)?,
                (None, Some(file)) => {
                    floe::spec::schema_from_arrow(input::parquet_schema(file)?.as_ref())?
                }
                (None, None) => {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        "give --schema DDL or --schema-from FILE.parquet",
                    ))
                }
            };
            let mut c = TableCreation::new(schema.clone());
            if let Some(p) = partition_by {
                c.partition_spec = parse_partition_spec(p, &schema)?;
            }
            if let Some(s) = sort_by {
                c.sort_order = Some(parse_sort_order(s, &schema)?);
            }
            c.properties = properties.iter().cloned().collect::<HashMap<_, _>>();
            c.format_version = match format_version {
                1 => FormatVersion::V1,
                2 => FormatVersion::V2,
                3 => FormatVersion::V3,
                v => {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        format!("--format-version {v}: expected 1, 2 or 3"),
                    ))
                }
            };
            c.location = location.clone();
            c.allow_unknown_properties = *allow_unknown_properties;
            // Refused before the catalog is opened, so bad input creates nothing.
            if !c.allow_unknown_properties {
                floe::spec::check_property_keys(&c.properties)?;
            }
            let cat = catalog_creating(&cli)?;
            let t = cat.create_table(&ident, c).await?;
            let relocated =
                location.is_none() && t.metadata().location() != cat.default_location(&ident);
            if *json {
                print_json(&json!({
                    "table": ident_name(&ident),
                    "location": t.metadata().location(),
                    "metadata_location": t.metadata_location(),
                    "format_version": t.metadata().format_version() as u8,
                    "relocated": relocated,
                }));
                return Ok(());
            }
            outln!(
                "created {} at {}",
                ident_name(&ident),
                t.metadata().location()
            );
            if relocated {
                outln!(
                    "  (its default location {} holds another table's files)",
                    cat.default_location(&ident)
                );
            }
            Ok(())
        }
        Cmd::Append { name, files, json } => {
            let (cat, table) = catalog_and_table(&cli, name).await?;
            let conformer = table_conformer(&table)?;
            // Open every input first: a bad file fails before anything is written.
            let mut readers = Vec::new();
            for f in files {
                readers.push(input::read_file(f, &conformer)?);
            }
            let started = Instant::now();
            let r = progress_bar::run(&format!("appending to {name}"), *json, |p| {
                floe::txn::append(&cat, &table, input::counted(files, readers, p))
            })
            .await;
            let r = r?;
            let secs = started.elapsed().as_secs_f64();
            if *json {
                print_json(&report::append(name, &r, started));
                return Ok(());
            }
            outln!(
                "appended {} rows in {} files ({:.1} MB) to {} as snapshot {} in {:.2}s",
                r.added_records,
                r.added_files,
                r.added_bytes as f64 / 1e6,
                name,
                r.snapshot_id
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "-".into()),
                secs
            );
            Ok(())
        }
        Cmd::Scan {
            name,
            metadata,
            columns,
            filter,
            snapshot,
            reference,
            as_of,
            count,
            format,
            output,
            limit,
            json,
        } => {
            let table = load(&cli, name.as_deref(), metadata.as_deref()).await?;
            let mut scan = Scan::new(&table);
            let sel = ingest::selector(*snapshot, reference.as_ref(), as_of.as_ref())?;
            scan = scan.snapshot(sel);
            if let Some(f) = filter {
                scan = scan.filter(floe::expr::parse_expr(f)?);
            }
            if let Some(c) = columns {
                scan = scan.select(c.clone());
            }
            if *count {
                let n = scan.count().await?;
                if *json {
                    print_json(&json!({"record_count": n}))
                } else {
                    outln!("{n}")
                }
                return Ok(());
            }
            let format = if *json { Format::Json } else { *format };
            let limit = limit.or(if format == Format::Table && output.is_none() {
                Some(100)
            } else {
                None
            });
            let plan = scan.plan().await?;
            let arrow_schema = Arc::new(floe_arrow_schema(&plan.schema, columns.as_deref())?);
            // A bar only when rows go to a file (on stdout it would mix with them).
            let label = format!("scanning {}", table.name());
            let read = progress_bar::run(&label, *json || output.is_none(), |_| async {
                let mut stream = scan.read(plan)?;
                let mut batches = Vec::new();
                let mut rows = 0usize;
                while let Some(b) = stream.try_next().await? {
                    let b = match limit {
                        Some(l) if rows + b.num_rows() > l => b.slice(0, l - rows),
                        _ => b,
                    };
                    rows += b.num_rows();
                    batches.push(b);
                    if limit.is_some_and(|l| rows >= l) {
                        break;
                    }
                }
                Ok::<_, Error>((batches, rows))
            });
            let (batches, rows) = read.await?;
            let out_schema = batches.first().map(|b| b.schema()).unwrap_or(arrow_schema);
            write_batches(&batches, out_schema, format, output.as_deref())?;
            if output.is_some() {
                eprintln!("wrote {rows} rows to {}", output.as_deref().unwrap_or("-"));
            }
            Ok(())
        }
        Cmd::Describe(a) => inspect::describe(&cli, a).await,
        Cmd::Snapshots(a) => inspect::snapshots(&cli, a).await,
        Cmd::Files(a) => inspect::files(&cli, a).await,
        Cmd::Namespaces { create, drop, json } => {
            let cat = match create {
                Some(_) => catalog_creating(&cli)?,
                None => catalog(&cli)?,
            };
            if let Some(ns) = create {
                let exists = cat.list_namespaces().await?.iter().any(|n| n == ns);
                if !exists {
                    cat.create_namespace(ns, &[]).await?;
                }
                if *json {
                    print_json(&json!({"namespace": ns, "created": !exists}));
                } else if exists {
                    outln!("namespace {ns} already exists (nothing changed)");
                } else {
                    outln!("created namespace {ns}");
                }
            }
            if let Some(ns) = drop {
                cat.drop_namespace(ns).await?;
                if *json {
                    print_json(&json!({"namespace": ns, "dropped": true}));
                } else {
                    outln!("dropped namespace {ns}");
                }
            }
            if create.is_none() && drop.is_none() {
                let ns = cat.list_namespaces().await?;
                if *json {
                    print_json(&json!(ns))
                } else {
                    ns.iter().for_each(|n| outln!("{n}"))
                }
            }
            Ok(())
        }
        Cmd::Tables { namespace, json } => {
            let cat = catalog(&cli)?;
            let nss = match namespace {
                Some(n) => vec![n.clone()],
                None => cat.list_namespaces().await?,
            };
            let mut names = Vec::new();
            for ns in nss {
                for t in cat.list_tables(&ns).await? {
                    names.push(ident_name(&t));
                }
            }
            if *json {
                print_json(&json!(names))
            } else {
                names.iter().for_each(|n| outln!("{n}"))
            }
            Ok(())
        }
        Cmd::Rename { from, to, json } => {
            catalog(&cli)?
                .rename_table(&parse_ident(from)?, &parse_ident(to)?)
                .await?;
            if *json {
                print_json(&json!({"from": from, "to": to}));
            } else {
                outln!("renamed {from} to {to}");
            }
            Ok(())
        }
        Cmd::Drop { name, purge, json } => {
            let r =
                floe::maintenance::drop_table(&catalog(&cli)?, &parse_ident(name)?, *purge).await?;
            if *json {
                print_json(&report::drop(name, *purge, &r));
            } else if *purge {
                let kept = match r.kept_shared_files {
                    0 => String::new(),
                    n => format!(", {n} kept (another table still references them)"),
                };
                outln!("dropped {name}: {} files deleted{kept}", r.deleted_files);
            } else {
                outln!("dropped {name} (files kept; --purge deletes them)");
            }
            Ok(())
        }
        Cmd::Delete(a) => dml::delete(&cli, a).await,
        Cmd::Update(a) => dml::update(&cli, a).await,
        Cmd::Merge(a) => dml::merge(&cli, a).await,
        Cmd::Sql(a) => dml::sql(&cli, a).await,
        Cmd::RewriteDataFiles(a) => maintenance::rewrite_data_files(&cli, a).await,
        Cmd::RewritePositionDeleteFiles(a) => {
            maintenance::rewrite_position_delete_files(&cli, a).await
        }
        Cmd::RewriteManifests(a) => maintenance::rewrite_manifests(&cli, a).await,
        Cmd::Clone(a) => ingest::clone(&cli, a).await,
        Cmd::IngestSnapshot(a) => ingest::ingest_snapshot(&cli, a).await,
        Cmd::ExpireSnapshots(a) => maintenance::expire_snapshots(&cli, a).await,
        Cmd::RemoveOrphanFiles(a) => maintenance::remove_orphan_files(&cli, a).await,
        Cmd::Register {
            name,
            metadata,
            json,
        } => {
            let t = catalog_creating(&cli)?
                .register_table(&parse_ident(name)?, metadata)
                .await?;
            if *json {
                print_json(&json!({"table": t.name(), "metadata_location": t.metadata_location()}));
                return Ok(());
            }
            outln!("registered {} at {}", t.name(), t.metadata_location());
            Ok(())
        }
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
