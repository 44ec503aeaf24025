//! `floe scan`: rows of a table (or of a metadata file), filtered, projected, at a snapshot.

use std::sync::Arc;

use floe::scan::Scan;
use floe::{Error, Result};
use futures::TryStreamExt;
use serde_json::json;

use super::output::{print_json, BatchWriter, Format};
use super::{floe_arrow_schema, ingest, load, progress_bar, Cli};

/// Read rows.
#[derive(clap::Args, Debug)]
pub struct ScanArgs {
    /// Table name (or use --metadata).
    pub name: Option<String>,
    /// Read a metadata.json or table directory without a catalog.
    #[arg(long)]
    pub metadata: Option<String>,
    /// Columns to return (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub columns: Option<Vec<String>>,
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
    /// Print only the row count.
    #[arg(long)]
    pub count: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Output file.
    #[arg(short = 'o', long)]
    pub output: Option<String>,
    /// At most this many rows (table format defaults to 100).
    #[arg(long)]
    pub limit: Option<usize>,
    /// JSON output (same as --format json).
    #[arg(long)]
    pub json: bool,
}

/// `floe scan`.
pub async fn scan(cli: &Cli, a: &ScanArgs) -> Result<()> {
    let ScanArgs {
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
    } = a;
    let table = load(cli, name.as_deref(), metadata.as_deref()).await?;
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
    let mut out = BatchWriter::new(format, output.as_deref(), arrow_schema)?;
    let read = progress_bar::run(&label, *json || output.is_none(), |_| async {
        let mut stream = scan.read(plan)?;
        let mut rows = 0usize;
        while let Some(b) = stream.try_next().await? {
            let b = match limit {
                Some(l) if rows + b.num_rows() > l => b.slice(0, l - rows),
                _ => b,
            };
            rows += b.num_rows();
            out.write(&b)?;
            if limit.is_some_and(|l| rows >= l) {
                break;
            }
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
    Ok(())
}
