//! `floe`: the command-line front of the floe library (uses only its public API).

mod ingest;
mod input;
mod maintenance;
mod output;
mod quickstart;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};
use floe::catalog::{Catalog, TableCreation};
use floe::expr::parse_predicate;
use floe::scan::{Scan, SnapshotSelector};
use floe::spec::{parse_partition_spec, parse_schema, parse_sort_order, FormatVersion};
use floe::storage::Storage;
use floe::table::{ident_name, parse_ident};
use floe::{Error, ErrorKind, Result, Table};
use futures::TryStreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use output::{print_json, print_table, write_batches, Format};

#[derive(Parser, Debug)]
#[command(
    name = "floe",
    version,
    about = "Write and read Apache Iceberg tables (v2/v3) without a JVM"
)]
struct Cli {
    /// Catalog URI: sqlite:///path/catalog.db, postgresql://user:password@host:port/database,
    /// rest+http://[id:secret@]host:port (Iceberg REST) or file:///warehouse (Hadoop layout).
    /// Default: SQLite at <warehouse>/catalog.db.
    #[arg(long, global = true, env = "FLOE_CATALOG")]
    catalog: Option<String>,
    /// Warehouse directory (default ./warehouse), or s3://bucket/path with a SQLite or
    /// PostgreSQL --catalog (S3 settings from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID,
    /// …); with a REST --catalog, the warehouse the server is asked for.
    #[arg(long, global = true, env = "FLOE_WAREHOUSE")]
    warehouse: Option<String>,
    /// Catalog name (the catalog_name column of the SQL catalog).
    #[arg(long, global = true, default_value = "default")]
    catalog_name: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Build a demo warehouse (a partitioned v2 table and a v3 table) and show how to open it.
    Quickstart {
        /// Where to build it.
        #[arg(long, default_value = "warehouse")]
        dir: String,
        /// Rows per table.
        #[arg(long, default_value_t = 200_000)]
        rows: usize,
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
        /// Format version (2 or 3).
        #[arg(long, default_value_t = 2)]
        format_version: u8,
        /// Explicit table location.
        #[arg(long)]
        location: Option<String>,
    },
    /// Append Parquet or CSV files to a table in one snapshot.
    Append {
        /// Table name.
        name: String,
        /// Input files (.parquet, .csv).
        #[arg(required = true)]
        files: Vec<String>,
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
        #[arg(long = "where")]
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
    Describe {
        /// Table name (or use --metadata).
        name: Option<String>,
        /// Read a metadata.json or table directory without a catalog.
        #[arg(long)]
        metadata: Option<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// List a table's snapshots.
    Snapshots {
        /// Table name (or use --metadata).
        name: Option<String>,
        /// Read a metadata.json or table directory without a catalog.
        #[arg(long)]
        metadata: Option<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// List the data files of a snapshot, each with the delete files that apply to it.
    Files {
        /// Table name (or use --metadata).
        name: Option<String>,
        /// Read a metadata.json or table directory without a catalog.
        #[arg(long)]
        metadata: Option<String>,
        /// Snapshot id (default current).
        #[arg(long)]
        snapshot: Option<i64>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
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
    },
    /// Drop a table (with --purge, delete its files too).
    Drop {
        /// Table name.
        name: String,
        /// Delete data and metadata files.
        #[arg(long)]
        purge: bool,
    },
    /// Register an existing metadata file as a table.
    Register {
        /// Table name.
        name: String,
        /// Metadata file location.
        metadata: String,
    },
    /// Delete rows (copy-on-write or merge-on-read per write.delete.mode).
    Delete {
        /// Table name.
        name: String,
        /// Rows to delete (SQL expression, e.g. "id % 1000 = 7 AND ts < '2024-01-01'").
        #[arg(long = "where", value_name = "EXPR")]
        filter: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Update rows (per write.update.mode); a changed partition column moves the row.
    Update {
        /// Table name.
        name: String,
        /// Assignments, e.g. "price = price * 1.1, note = 'repriced'".
        #[arg(long)]
        set: String,
        /// Rows to update (default: all).
        #[arg(long = "where", value_name = "EXPR")]
        filter: Option<String>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Merge a source file into a table by key (default: upsert; per write.merge.mode).
    Merge {
        /// Table name.
        name: String,
        /// Source rows (.parquet or .csv).
        #[arg(long)]
        source: String,
        /// Key columns, equal in target and source (e.g. "id" or "region,id").
        #[arg(long, value_delimiter = ',', required = true)]
        on: Vec<String>,
        /// What happens to matched target rows: update (from the source row), delete, ignore.
        #[arg(long, default_value = "update")]
        matched: String,
        /// What happens to unmatched source rows: insert, ignore.
        #[arg(long, default_value = "insert")]
        not_matched: String,
        /// What happens to target rows no source row matches: ignore, delete.
        #[arg(long, default_value = "ignore")]
        not_matched_by_source: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
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
    Sql {
        /// The statement, e.g. "MERGE INTO db.t t USING 'updates.csv' s ON t.id = s.id
        /// WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *".
        statement: String,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
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

fn catalog(cli: &Cli) -> Result<Catalog> {
    Catalog::open(
        cli.catalog.as_deref(),
        cli.warehouse.as_deref(),
        Some(&cli.catalog_name),
    )
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

fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

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
        Cmd::Quickstart { dir, rows } => quickstart::run(dir, *rows).await,
        Cmd::Create {
            name,
            schema,
            schema_from,
            partition_by,
            sort_by,
            properties,
            format_version,
            location,
        } => {
            let cat = catalog(&cli)?;
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
            let t = cat.create_table(&ident, c).await?;
            println!(
                "created {} at {}",
                ident_name(&ident),
                t.metadata().location()
            );
            Ok(())
        }
        Cmd::Append { name, files } => {
            let (cat, table) = catalog_and_table(&cli, name).await?;
            let schema = Arc::new(iceberg_arrow_schema(&table)?);
            // Open every input first: a bad file fails before anything is written.
            let mut readers = Vec::new();
            for f in files {
                readers.push(input::read_file(f, &schema)?);
            }
            let started = Instant::now();
            let pb = spinner(&format!("appending to {name}"));
            let progress = floe::write::WriteProgress::new();
            let p2 = progress.clone();
            let pb2 = pb.clone();
            let ticker = tokio::spawn(async move {
                loop {
                    pb2.set_message(format!("appending: {} rows", p2.rows()));
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
            });
            let r = floe::txn::append(&cat, &table, readers.into_iter().flatten(), Some(&progress))
                .await;
            ticker.abort();
            pb.finish_and_clear();
            let r = r?;
            let secs = started.elapsed().as_secs_f64();
            println!(
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
            let schema = scan.schema()?;
            if let Some(f) = filter {
                scan = scan.filter(parse_predicate(f, &schema)?);
            }
            if let Some(c) = columns {
                scan = scan.select(c.clone());
            }
            if *count {
                let n = scan.count().await?;
                if *json {
                    print_json(&json!({"count": n}))
                } else {
                    println!("{n}")
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
            let out_schema = batches.first().map(|b| b.schema()).unwrap_or(arrow_schema);
            write_batches(&batches, out_schema, format, output.as_deref())?;
            if output.is_some() {
                eprintln!("wrote {rows} rows to {}", output.as_deref().unwrap_or("-"));
            }
            Ok(())
        }
        Cmd::Describe {
            name,
            metadata,
            json,
        } => {
            let t = load(&cli, name.as_deref(), metadata.as_deref()).await?;
            let md = t.metadata();
            let v = json!({
                "name": t.name(),
                "location": md.location(),
                "metadata_location": t.metadata_location(),
                "format_version": md.format_version() as u8,
                "uuid": md.uuid().to_string(),
                "schema": md.current_schema().as_ref(),
                "partition_spec": md.default_partition_spec().as_ref(),
                "sort_order": md.default_sort_order().as_ref(),
                "properties": md.properties(),
                "current_snapshot_id": md.current_snapshot_id(),
                "next_row_id": (md.format_version() as u8 >= 3).then(|| md.next_row_id()),
            });
            if *json {
                print_json(&v);
            } else {
                println!("table         {}", t.name());
                println!("location      {}", md.location());
                println!("metadata      {}", t.metadata_location());
                println!("format        v{}", md.format_version() as u8);
                println!("schema        {}", schema_text(md.current_schema()));
                let spec = md.default_partition_spec();
                let spec_text: Vec<String> = spec
                    .fields()
                    .iter()
                    .map(|f| {
                        format!(
                            "{}={}({})",
                            f.name,
                            f.transform,
                            md.current_schema()
                                .name_by_field_id(f.source_id)
                                .unwrap_or("?")
                        )
                    })
                    .collect();
                println!(
                    "partitioned   {}",
                    if spec_text.is_empty() {
                        "no".into()
                    } else {
                        spec_text.join(", ")
                    }
                );
                let so = md.default_sort_order();
                let so_text: Vec<String> = so
                    .fields
                    .iter()
                    .map(|f| {
                        format!(
                            "{}({}) {} {}",
                            f.transform,
                            md.current_schema()
                                .name_by_field_id(f.source_id)
                                .unwrap_or("?"),
                            f.direction,
                            f.null_order
                        )
                    })
                    .collect();
                println!(
                    "sorted        {}",
                    if so_text.is_empty() {
                        "no".into()
                    } else {
                        so_text.join(", ")
                    }
                );
                println!(
                    "snapshot      {}",
                    md.current_snapshot_id()
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "none".into())
                );
                let mut props: Vec<_> = md.properties().iter().collect();
                props.sort();
                for (k, v) in props {
                    println!("property      {k}={v}");
                }
            }
            Ok(())
        }
        Cmd::Snapshots {
            name,
            metadata,
            json,
        } => {
            let t = load(&cli, name.as_deref(), metadata.as_deref()).await?;
            let mut snaps: Vec<_> = t.metadata().snapshots().cloned().collect();
            snaps.sort_by_key(|s| (s.sequence_number(), s.timestamp_ms()));
            if *json {
                let v: Vec<_> = snaps
                    .iter()
                    .map(|s| {
                        json!({
                            "snapshot_id": s.snapshot_id(),
                            "parent_snapshot_id": s.parent_snapshot_id(),
                            "sequence_number": s.sequence_number(),
                            "timestamp_ms": s.timestamp_ms(),
                            "operation": s.summary().operation.as_str(),
                            "summary": s.summary().additional_properties,
                            "manifest_list": s.manifest_list(),
                            "first_row_id": s.first_row_id(),
                            "added_rows": s.added_rows_count(),
                        })
                    })
                    .collect();
                print_json(&json!(v));
            } else {
                let rows: Vec<Vec<String>> = snaps
                    .iter()
                    .map(|s| {
                        let p = &s.summary().additional_properties;
                        vec![
                            s.snapshot_id().to_string(),
                            s.sequence_number().to_string(),
                            chrono::DateTime::from_timestamp_millis(s.timestamp_ms())
                                .map(|d| d.to_rfc3339())
                                .unwrap_or_default(),
                            s.summary().operation.as_str().to_string(),
                            p.get("added-records").cloned().unwrap_or_default(),
                            p.get("total-records").cloned().unwrap_or_default(),
                        ]
                    })
                    .collect();
                print_table(
                    &[
                        "snapshot_id",
                        "seq",
                        "committed_at",
                        "operation",
                        "added_records",
                        "total_records",
                    ],
                    &rows,
                );
            }
            Ok(())
        }
        Cmd::Files {
            name,
            metadata,
            snapshot,
            json,
        } => {
            let t = load(&cli, name.as_deref(), metadata.as_deref()).await?;
            let mut scan = Scan::new(&t);
            if let Some(s) = snapshot {
                scan = scan.snapshot(SnapshotSelector::Id(*s));
            }
            let plan = scan.plan().await?;
            if *json {
                let v: Vec<_> = plan
                    .files
                    .iter()
                    .map(|f| json!({
                        "file_path": f.file.file_path(),
                        "record_count": f.file.record_count(),
                        "file_size_in_bytes": f.file.file_size_in_bytes(),
                        "partition": f.spec.partition_to_path(&f.partition, t.metadata().current_schema().clone()),
                        "spec_id": f.spec.spec_id(),
                        "sequence_number": f.sequence_number,
                        "deletes": f.deletes.iter().map(|d| json!({
                            "file_path": d.file.file_path(),
                            "content": match (d.file.content_type(), d.is_dv()) {
                                (floe::spec::DataContentType::EqualityDeletes, _) => "equality",
                                (_, true) => "deletion-vector",
                                _ => "position",
                            },
                            "record_count": d.file.record_count(),
                            "sequence_number": d.sequence_number,
                        })).collect::<Vec<_>>(),
                    }))
                    .collect();
                print_json(&json!(v));
            } else {
                let rows: Vec<Vec<String>> = plan
                    .files
                    .iter()
                    .map(|f| {
                        vec![
                            f.file.file_path().to_string(),
                            f.spec.partition_to_path(
                                &f.partition,
                                t.metadata().current_schema().clone(),
                            ),
                            f.file.record_count().to_string(),
                            f.file.file_size_in_bytes().to_string(),
                            f.deletes.len().to_string(),
                        ]
                    })
                    .collect();
                print_table(
                    &["file_path", "partition", "records", "bytes", "delete_files"],
                    &rows,
                );
            }
            Ok(())
        }
        Cmd::Namespaces { create, drop, json } => {
            let cat = catalog(&cli)?;
            if let Some(ns) = create {
                cat.create_namespace(ns, &[]).await?;
                println!("created namespace {ns}");
            }
            if let Some(ns) = drop {
                cat.drop_namespace(ns).await?;
                println!("dropped namespace {ns}");
            }
            if create.is_none() && drop.is_none() {
                let ns = cat.list_namespaces().await?;
                if *json {
                    print_json(&json!(ns))
                } else {
                    ns.iter().for_each(|n| println!("{n}"))
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
                names.iter().for_each(|n| println!("{n}"))
            }
            Ok(())
        }
        Cmd::Rename { from, to } => {
            catalog(&cli)?
                .rename_table(&parse_ident(from)?, &parse_ident(to)?)
                .await?;
            println!("renamed {from} to {to}");
            Ok(())
        }
        Cmd::Drop { name, purge } => {
            let r =
                floe::maintenance::drop_table(&catalog(&cli)?, &parse_ident(name)?, *purge).await?;
            if *purge {
                println!(
                    "dropped {name}: {} files deleted, {} kept (another table still references them)",
                    r.deleted_files, r.kept_shared_files
                );
            } else {
                println!("dropped {name} (files kept; --purge deletes them)");
            }
            Ok(())
        }
        Cmd::Delete { name, filter, json } => {
            let sql = format!("DELETE FROM {name} WHERE {filter}");
            run_dml(&cli, &sql, None, *json).await
        }
        Cmd::Update {
            name,
            set,
            filter,
            json,
        } => {
            let mut sql = format!("UPDATE {name} SET {set}");
            if let Some(f) = filter {
                sql.push_str(&format!(" WHERE {f}"));
            }
            run_dml(&cli, &sql, None, *json).await
        }
        Cmd::Merge {
            name,
            source,
            on,
            matched,
            not_matched,
            not_matched_by_source,
            json,
        } => {
            let keys = on
                .iter()
                .map(|k| format!("t.{k} = s.{k}", k = k.trim()))
                .collect::<Vec<_>>()
                .join(" AND ");
            let mut sql = format!("MERGE INTO {name} AS t USING source AS s ON {keys}");
            match matched.as_str() {
                "update" => sql.push_str(" WHEN MATCHED THEN UPDATE SET *"),
                "delete" => sql.push_str(" WHEN MATCHED THEN DELETE"),
                "ignore" => {}
                o => {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        format!("--matched {o}: expected update, delete or ignore"),
                    ))
                }
            }
            match not_matched.as_str() {
                "insert" => sql.push_str(" WHEN NOT MATCHED THEN INSERT *"),
                "ignore" => {}
                o => {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        format!("--not-matched {o}: expected insert or ignore"),
                    ))
                }
            }
            match not_matched_by_source.as_str() {
                "delete" => sql.push_str(" WHEN NOT MATCHED BY SOURCE THEN DELETE"),
                "ignore" => {}
                o => {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        format!("--not-matched-by-source {o}: expected delete or ignore"),
                    ))
                }
            }
            let table = catalog(&cli)?.load_table(&parse_ident(name)?).await?;
            let rows = read_source(&table, source)?;
            run_dml(&cli, &sql, Some(rows), *json).await
        }
        Cmd::Sql { statement, json } => {
            let rows = match floe::expr::parse_statement(statement)? {
                floe::expr::Statement::Merge(m) => match &m.source {
                    floe::expr::MergeSource::Path(p) => {
                        let table = catalog(&cli)?.load_table(&parse_ident(&m.target)?).await?;
                        Some(read_source(&table, p)?)
                    }
                    floe::expr::MergeSource::Table(_) => None,
                },
                _ => None,
            };
            run_dml(&cli, statement, rows, *json).await
        }
        Cmd::RewriteDataFiles(a) => maintenance::rewrite_data_files(&cli, a).await,
        Cmd::RewritePositionDeleteFiles(a) => {
            maintenance::rewrite_position_delete_files(&cli, a).await
        }
        Cmd::RewriteManifests(a) => maintenance::rewrite_manifests(&cli, a).await,
        Cmd::Clone(a) => ingest::clone(&cli, a).await,
        Cmd::IngestSnapshot(a) => ingest::ingest_snapshot(&cli, a).await,
        Cmd::ExpireSnapshots(a) => maintenance::expire_snapshots(&cli, a).await,
        Cmd::RemoveOrphanFiles(a) => maintenance::remove_orphan_files(&cli, a).await,
        Cmd::Register { name, metadata } => {
            let t = catalog(&cli)?
                .register_table(&parse_ident(name)?, metadata)
                .await?;
            println!("registered {} at {}", t.name(), t.metadata_location());
            Ok(())
        }
    }
}

/// Reads a MERGE source file whole (CSV columns typed by the target's columns of that name).
fn read_source(table: &Table, path: &str) -> Result<Vec<arrow::array::RecordBatch>> {
    let schema = Arc::new(iceberg_arrow_schema(table)?);
    input::read_file(path, &schema)?.collect()
}

/// Runs a DML statement with a spinner and prints what it did.
async fn run_dml(
    cli: &Cli,
    sql: &str,
    source: Option<Vec<arrow::array::RecordBatch>>,
    json: bool,
) -> Result<()> {
    let cat = catalog(cli)?;
    let started = Instant::now();
    let pb = spinner("reading and rewriting");
    let r = floe::dml::execute(&cat, sql, source).await;
    pb.finish_and_clear();
    let r = r?;
    let secs = started.elapsed().as_secs_f64();
    let mode = match r.mode {
        floe::spec::WriteMode::CopyOnWrite => "copy-on-write",
        floe::spec::WriteMode::MergeOnRead => "merge-on-read",
    };
    if json {
        print_json(&json!({
            "table": r.table.name(),
            "snapshot_id": r.snapshot_id,
            "mode": mode,
            "removed_rows": r.removed_rows,
            "written_rows": r.written_rows,
            "rewritten_rows": r.rewritten_rows,
            "removed_data_files": r.removed_data_files,
            "added_data_files": r.added_data_files,
            "added_delete_files": r.added_delete_files,
            "written_bytes": r.written_bytes,
            "seconds": secs,
        }));
        return Ok(());
    }
    match r.snapshot_id {
        None => println!("no rows matched; {} unchanged", r.table.name()),
        Some(id) => println!(
            "{}: snapshot {id} ({mode}): {} rows removed, {} rows written; {} data files dropped, \
             {} data files and {} delete files added ({:.1} MB) in {secs:.2}s",
            r.table.name(),
            r.removed_rows,
            r.written_rows,
            r.removed_data_files,
            r.added_data_files,
            r.added_delete_files,
            r.written_bytes as f64 / 1e6
        ),
    }
    Ok(())
}

fn iceberg_arrow_schema(t: &Table) -> Result<arrow::datatypes::Schema> {
    floe_arrow_schema(t.metadata().current_schema(), None)
}

fn floe_arrow_schema(
    schema: &floe::spec::Schema,
    columns: Option<&[String]>,
) -> Result<arrow::datatypes::Schema> {
    let full = floe::write::Conformer::new(schema, "")?
        .schema()
        .as_ref()
        .clone();
    Ok(match columns {
        None => full,
        Some(cols) => {
            let idx: Vec<usize> = cols.iter().filter_map(|c| full.index_of(c).ok()).collect();
            full.project(&idx)
                .map_err(|e| Error::new(ErrorKind::InvalidInput, e.to_string()))?
        }
    })
}

fn schema_text(s: &floe::spec::Schema) -> String {
    s.as_struct()
        .fields()
        .iter()
        .map(|f| {
            format!(
                "{} {}{}",
                f.name,
                f.field_type,
                if f.required { " not null" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}
