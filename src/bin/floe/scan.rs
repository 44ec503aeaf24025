//! `floe scan`: rows of a table (or of a metadata file), filtered, projected, at a snapshot.

use std::sync::Arc;

use floe::scan::Scan;
use floe::{Error, Result};
use futures::TryStreamExt;
use serde_json::json;

use super::output::{print_json, BatchWriter, Format};
use super::rows::OutputArgs;
use super::{changes, floe_arrow_schema, ingest, load, progress_bar, rows, Cli};

/// Read rows.
#[derive(clap::Args, Debug)]
pub struct ScanArgs {
    /// Table name (or use --metadata).
    pub name: Option<String>,
    /// Read a metadata.json or table directory without a catalog.
    #[arg(long)]
    pub metadata: Option<String>,
    /// Row filter, e.g. "ts >= '2024-01-01' AND id IN (1,2)".
    #[arg(long = "where", allow_hyphen_values = true)]
    pub filter: Option<String>,
    /// Snapshot id (time travel).
    #[arg(long)]
    pub snapshot: Option<i64>,
    /// Branch or tag.
    #[arg(long = "ref")]
    pub reference: Option<String>,
    /// Timestamp (RFC 3339 or ms since epoch): the snapshot current then.
    #[arg(long)]
    pub as_of: Option<String>,
    /// Only the rows appended after this snapshot (exclusive), as written: an incremental
    /// read of `append` snapshots (pyiceberg's incremental_append_scan).
    #[arg(long)]
    pub from_snapshot: Option<i64>,
    /// With --from-snapshot: up to this snapshot (inclusive; default: the current one).
    #[arg(long, requires = "from_snapshot")]
    pub to_snapshot: Option<i64>,
    /// Read the rows without printing them, then show what was pruned and read: data files
    /// (by partition, by column metrics), delete files, row groups and bytes.
    #[arg(long)]
    pub explain: bool,
    /// Output flags.
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `floe scan`.
pub async fn scan(cli: &Cli, a: &ScanArgs) -> Result<()> {
    let ScanArgs {
        name,
        metadata,
        filter,
        snapshot,
        reference,
        as_of,
        from_snapshot,
        to_snapshot,
        explain,
        out:
            OutputArgs {
                columns,
                count,
                format,
                output,
                limit,
                json,
            },
    } = a;
    let table = match load(cli, name.as_deref(), metadata.as_deref()).await {
        Ok(t) => t,
        Err(e) if e.kind() == floe::ErrorKind::NotFound => match metadata_table_of(name) {
            // `db.t.snapshots`: a metadata table of db.t (as Spark and Java resolve it).
            Some((parent, Some(which))) => {
                let t = load(cli, Some(&parent), None).await.map_err(|_| e)?;
                return scan_metadata_table(&t, which, a).await;
            }
            // `db.t.bogus` where db.t exists: name the metadata tables there are.
            Some((parent, None)) => {
                if load(cli, Some(&parent), None).await.is_err() {
                    return Err(e);
                }
                let last = name
                    .as_deref()
                    .and_then(|n| n.rsplit_once('.'))
                    .map(|x| x.1);
                return Err(Error::new(
                    floe::ErrorKind::InvalidInput,
                    format!(
                        "{parent} has no metadata table '{}'; metadata tables: {}",
                        last.unwrap_or_default(),
                        floe::scan::MetadataTable::names()
                    ),
                ));
            }
            None => return Err(e),
        },
        Err(e) => return Err(e),
    };
    if let Some(which) = metadata
        .as_ref()
        .and(name.as_deref())
        .and_then(floe::scan::MetadataTable::parse)
    {
        // `--metadata PATH snapshots`: a metadata table of a table read without a catalog.
        return scan_metadata_table(&table, which, a).await;
    }
    if let (Some(_), Some(n)) = (metadata, name) {
        return Err(Error::new(
            floe::ErrorKind::InvalidInput,
            format!(
                "'{n}' is not a metadata table; metadata tables: {}",
                floe::scan::MetadataTable::names()
            ),
        ));
    }
    let mut scan = Scan::new(&table);
    let sel = ingest::selector(*snapshot, reference.as_ref(), as_of.as_ref())?;
    scan = scan.snapshot(sel);
    if let Some(f) = filter {
        scan = scan.filter(floe::expr::parse_expr(f)?);
    }
    if let Some(c) = columns {
        scan = scan.select(c.clone());
    }
    if from_snapshot.is_some() {
        if snapshot.is_some() || reference.is_some() || as_of.is_some() {
            return Err(Error::new(
                floe::ErrorKind::InvalidInput,
                "--from-snapshot reads the rows appended since a snapshot; it does not combine with \
                 --snapshot, --ref or --as-of (use --to-snapshot for the end)",
            ));
        }
        let schema = Arc::new(floe_arrow_schema(
            scan.schema()?.as_ref(),
            columns.as_deref(),
        )?);
        let rows = rows::Rows {
            filter: None,
            columns: None,
            ..rows::Rows::of(None, &a.out)
        };
        return changes::appended(scan, schema, *from_snapshot, *to_snapshot, &rows).await;
    }
    if *explain {
        return explain_scan(&table, &scan, *json).await;
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
    // The table view on a terminal shows 100 rows unless told otherwise (and says so).
    let shown_by_default =
        (limit.is_none() && format == Format::Table && output.is_none()).then(|| scan.clone());
    let limit = limit.or(shown_by_default.as_ref().map(|_| 100));
    let scan = match limit {
        Some(n) => scan.limit(n),
        None => scan,
    };
    let plan = scan.plan().await?;
    let arrow_schema = scan.output_schema(&plan)?;
    // A bar only when rows go to a file (on stdout it would mix with them).
    let label = format!("scanning {}", table.name());
    let uuids = table
        .metadata()
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .filter(|f| {
            matches!(
                *f.field_type,
                floe::spec::Type::Primitive(floe::spec::PrimitiveType::Uuid)
            )
        })
        .map(|f| f.name.clone())
        .collect();
    let mut out =
        BatchWriter::new(format, output.as_deref(), arrow_schema)?.with_uuid_columns(uuids);
    let read = progress_bar::run(&label, *json || output.is_none(), |_| async {
        let mut stream = scan.read(plan)?;
        let mut rows = 0usize;
        while let Some(b) = stream.try_next().await? {
            rows += b.num_rows();
            out.write(&b)?;
        }
        Ok::<_, Error>(rows)
    });
    let rows = match read.await {
        Ok(rows) => rows,
        Err(e) => {
            out.abandon();
            return Err(e);
        }
    };
    out.finish()?;
    if output.is_some() {
        eprintln!("wrote {rows} rows to {}", output.as_deref().unwrap_or("-"));
    }
    if let Some(all) = shown_by_default.filter(|_| rows == 100) {
        match all.count().await {
            Ok(n) if n > 100 => eprintln!(
                "100 of {n} rows shown (--limit N shows more; --format csv or -o FILE all of them)"
            ),
            _ => {}
        }
    }
    Ok(())
}

/// `floe scan --explain`: runs the scan, discarding the rows, and prints what each stage
/// pruned and what was read.
async fn explain_scan(table: &floe::Table, scan: &Scan, json: bool) -> Result<()> {
    let plan = scan.plan().await?;
    let snapshot_id = plan.snapshot.as_ref().map(|s| s.snapshot_id());
    let stats = plan.stats;
    let read_files = plan.files.len();
    let counters = plan.read_counters();
    let mut stream = scan.read(plan)?;
    let mut rows = 0u64;
    while let Some(b) = stream.try_next().await? {
        rows += b.num_rows() as u64;
    }
    let r = counters.stats();
    if json {
        print_json(&json!({
            "table": table.name(),
            "snapshot_id": snapshot_id,
            "data_manifests_count": stats.data_manifests,
            "pruned_data_manifests_count": stats.pruned_data_manifests,
            "data_files_count": stats.data_files,
            "pruned_by_partition_data_files_count": stats.pruned_by_partition,
            "pruned_by_metrics_data_files_count": stats.pruned_by_metrics,
            "read_data_files_count": read_files,
            "delete_files_count": stats.delete_files,
            "row_groups_count": r.row_groups,
            "pruned_row_groups_count": r.row_groups_pruned,
            "pruned_by_bloom_row_groups_count": r.row_groups_pruned_by_bloom,
            "pages_count": r.pages,
            "pruned_pages_count": r.pages_pruned,
            "read_bytes_count": r.row_group_bytes_read,
            "record_count": rows,
        }));
    } else {
        outln!(
            "scan of {} at snapshot {}\n  data manifests: {}, {} pruned by partition summaries\n  data files: {} live, {} pruned by partition, {} by column metrics, {} read\n  delete files: {} live\n  row groups (filtered reads): {}, {} pruned ({} of them by bloom filters), {} read ({} bytes of the columns read)\n  pages of the filter's columns: {}, {} pruned by the page index\n  rows returned: {rows}",
            table.name(),
            snapshot_id.map_or("(none)".to_string(), |s| s.to_string()),
            stats.data_manifests,
            stats.pruned_data_manifests,
            stats.data_files,
            stats.pruned_by_partition,
            stats.pruned_by_metrics,
            read_files,
            stats.delete_files,
            r.row_groups,
            r.row_groups_pruned,
            r.row_groups_pruned_by_bloom,
            r.row_groups - r.row_groups_pruned,
            r.row_group_bytes_read,
            r.pages,
            r.pages_pruned
        );
    }
    Ok(())
}

/// `db.t.snapshots` → (`db.t`, Some(snapshots)); `db.t.bogus` → (`db.t`, None).
fn metadata_table_of(name: &Option<String>) -> Option<(String, Option<floe::scan::MetadataTable>)> {
    let (parent, last) = name.as_deref()?.rsplit_once('.')?;
    if !parent.contains('.') {
        return None;
    }
    Some((parent.to_string(), floe::scan::MetadataTable::parse(last)))
}

/// Prints a metadata table's rows (filtered, projected, limited as a table scan's are).
async fn scan_metadata_table(
    table: &floe::Table,
    which: floe::scan::MetadataTable,
    a: &ScanArgs,
) -> Result<()> {
    let snapshot = match (&a.reference, &a.as_of) {
        (None, None) => a.snapshot,
        _ => {
            let sel = ingest::selector(a.snapshot, a.reference.as_ref(), a.as_of.as_ref())?;
            Scan::new(table)
                .snapshot(sel)
                .resolve_snapshot()?
                .map(|s| s.snapshot_id())
        }
    };
    let b = floe::scan::read_metadata_table(table, which, snapshot).await?;
    let what = format!("{}.{}", table.name(), which.name());
    rows::print_rows(b, &what, &rows::Rows::of(a.filter.as_deref(), &a.out))
}
