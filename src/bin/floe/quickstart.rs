//! `floe quickstart`: the main job on the embedded default (local warehouse + SQLite).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use floe::catalog::{Catalog, TableCreation};
use floe::scan::SnapshotSelector;
use floe::spec::{parse_partition_spec, parse_schema, parse_sort_order, FormatVersion};
use floe::table::parse_ident;
use floe::{Error, ErrorKind, Result};
use indicatif::{ProgressBar, ProgressStyle};

const CITIES: [&str; 8] = [
    "Amsterdam",
    "Berlin",
    "Lisbon",
    "Madrid",
    "Oslo",
    "Paris",
    "Rome",
    "Vienna",
];
const EVENTS: [&str; 4] = ["view", "click", "cart", "purchase"];

/// Deterministic event rows `[start, start+n)`.
fn events(start: i64, n: usize) -> Result<RecordBatch> {
    let base_us = 1_767_225_600_000_000i64; // 2026-01-01T00:00:00Z
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ start as u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let ids: Vec<i64> = (start..start + n as i64).collect();
    let users: Vec<i64> = (0..n).map(|_| (rnd() % 50_000) as i64).collect();
    let kinds: Vec<&str> = (0..n).map(|_| EVENTS[(rnd() % 4) as usize]).collect();
    let cities: Vec<&str> = (0..n).map(|_| CITIES[(rnd() % 8) as usize]).collect();
    let amounts: Vec<Option<f64>> = kinds
        .iter()
        .map(|k| (*k == "purchase").then(|| ((rnd() % 50_000) as f64) / 100.0))
        .collect();
    // Spread over 30 days whatever the id: every append touches every day partition.
    let ts: Vec<i64> = (0..n)
        .map(|_| base_us + (rnd() % 2_592_000) as i64 * 1_000_000)
        .collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("event_id", DataType::Int64, false),
        Field::new("user_id", DataType::Int64, true),
        Field::new("kind", DataType::Utf8, true),
        Field::new("city", DataType::Utf8, true),
        Field::new("amount", DataType::Float64, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            true,
        ),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ids)),
            Arc::new(Int64Array::from(users)),
            Arc::new(StringArray::from(kinds)),
            Arc::new(StringArray::from(cities)),
            Arc::new(Float64Array::from(amounts)),
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("+00:00")),
        ],
    )
    .map_err(|e| Error::new(ErrorKind::InvalidInput, e.to_string()))
}

/// Builds the demo warehouse in `dir` and prints how to open it.
/// Builds the demo tables in `dir`; prints the queries that read them, or (`json`) a document
/// of the tables built.
pub async fn run(dir: &str, rows: usize, json: bool) -> Result<()> {
    let started = Instant::now();
    let cat = Catalog::open(None, Some(dir), None)?;
    let ddl = "event_id long not null, user_id long, kind string, city string, amount double, ts timestamptz";
    let schema = parse_schema(ddl)?;
    let pb = if json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new((rows * 2) as u64)
    };
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} rows {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // A rerun starts over; the clone goes first, so no file it shares is kept for it.
    let clone_ident = parse_ident("demo.events_clone")?;
    if cat.table_exists(&clone_ident).await? {
        floe::maintenance::drop_table(&cat, &clone_ident, true).await?;
    }
    let mut made = Vec::new();
    for (name, fv, partition, sort) in [
        (
            "demo.events",
            FormatVersion::V2,
            Some("day(ts), bucket(8, user_id)"),
            None,
        ),
        (
            "demo.events_v3",
            FormatVersion::V3,
            Some("city"),
            Some("event_id"),
        ),
    ] {
        let ident = parse_ident(name)?;
        if cat.table_exists(&ident).await? {
            floe::maintenance::drop_table(&cat, &ident, true).await?;
        }
        let mut c = TableCreation::new(schema.clone());
        c.format_version = fv;
        if let Some(p) = partition {
            c.partition_spec = parse_partition_spec(p, &schema)?;
        }
        if let Some(s) = sort {
            c.sort_order = Some(parse_sort_order(s, &schema)?);
        }
        if fv == FormatVersion::V3 {
            // Row-level deletes as deletion vectors, not rewritten files.
            c.properties
                .insert("write.delete.mode".into(), "merge-on-read".into());
        }
        let mut table = cat.create_table(&ident, c).await?;
        pb.set_message(name.to_string());
        // Two appends: two snapshots to time-travel between.
        let half = rows / 2;
        for (start, n) in [(0usize, half), (half, rows - half)] {
            let batches: Vec<Result<RecordBatch>> = (start..start + n)
                .step_by(50_000)
                .map(|s| events(s as i64, 50_000.min(start + n - s)))
                .collect();
            table = floe::txn::append(&cat, &table, batches).await?.table;
            pb.inc(n as u64);
        }
        made.push((name, table));
    }
    pb.finish_and_clear();
    // What floe does beyond appends: a merge-on-read DELETE (deletion vectors), a compaction,
    // and a zero-copy clone.
    let deleted =
        floe::dml::execute(&cat, "DELETE FROM demo.events_v3 WHERE kind = 'cart'", None).await?;
    made[1].1 = deleted.table.clone();
    let compacted = floe::maintenance::rewrite_data_files(
        &cat,
        &made[0].1,
        None,
        &HashMap::from([("rewrite-all".to_string(), "true".to_string())]),
        None,
    )
    .await?;
    if let Some(t) = &compacted.table {
        made[0].1 = t.clone();
    }
    let cloned = floe::txn::clone_table(
        &cat,
        &made[0].1,
        &SnapshotSelector::Current,
        &clone_ident,
        false,
    )
    .await?;
    let clone_table = cat.load_table(&clone_ident).await?;
    if json {
        let tables: Vec<_> = made
            .iter()
            .map(|(_, t)| t)
            .chain([&clone_table])
            .map(|t| {
                serde_json::json!({
                    "table": t.name(),
                    "format_version": t.metadata().format_version() as u8,
                    "snapshot_id": t.metadata().current_snapshot_id(),
                    "metadata_location": t.metadata_location(),
                })
            })
            .collect();
        crate::output::print_json(&serde_json::json!({
            "warehouse": cat.warehouse(),
            "tables": tables,
            "deleted_records_count": deleted.removed_rows,
            "rewritten_data_files_count": compacted.rewritten_data_files_count,
            "added_data_files_count": compacted.added_data_files_count,
            "elapsed_ms": started.elapsed().as_millis() as u64,
        }));
        return Ok(());
    }
    outln!(
        "floe quickstart: built {} tables with {} rows each in {:.1}s\n",
        made.len(),
        rows,
        started.elapsed().as_secs_f64()
    );
    outln!("warehouse: {}", cat.warehouse());
    outln!(
        "catalog:   {}/catalog.db (SQLite, pyiceberg SqlCatalog schema, catalog name 'default')\n",
        cat.warehouse().trim_start_matches("file://")
    );
    for (name, t) in &made {
        outln!(
            "{name}: v{} table, {} snapshots, metadata {}",
            t.metadata().format_version() as u8,
            t.metadata().snapshots().len(),
            t.metadata_location()
        );
    }
    let (_, v2) = &made[0];
    let wh = cat.warehouse().trim_start_matches("file://");
    outln!("\nRead it with floe:");
    outln!("  floe --warehouse {wh} scan demo.events --where \"city = 'Paris' AND amount > 100\" --limit 5");
    outln!("  floe --warehouse {wh} snapshots demo.events");
    outln!("\nRead it with DuckDB (iceberg extension):");
    outln!(
        "  SELECT city, count(*) FROM iceberg_scan('{}') GROUP BY city;",
        v2.metadata_location()
    );
    outln!("\nRead it with pyiceberg:");
    outln!("  from pyiceberg.catalog.sql import SqlCatalog");
    outln!(
        "  cat = SqlCatalog('default', uri='sqlite:///{wh}/catalog.db', warehouse='{}')",
        cat.warehouse()
    );
    outln!("  cat.load_table('demo.events').scan().to_arrow()");
    let (_, v3) = &made[1];
    outln!(
        "\nDELETE on demo.events_v3 (merge-on-read): {} rows removed as deletion vectors, no data \
         file rewritten; DuckDB applies them:",
        deleted.removed_rows
    );
    outln!(
        "  SELECT count(*) FROM iceberg_scan('{}') WHERE kind = 'cart';   -- 0",
        v3.metadata_location()
    );
    outln!(
        "\nrewrite-data-files on demo.events: {} files compacted into {}; the same rows:",
        compacted.rewritten_data_files_count,
        compacted.added_data_files_count
    );
    outln!(
        "  SELECT count(*) FROM iceberg_scan('{}');   -- {rows}",
        v2.metadata_location()
    );
    let clone_md = clone_table.metadata_location();
    outln!(
        "\nclone demo.events -> {}: {} data files shared, none copied; pyiceberg reads it:",
        cloned.target,
        cloned.data_files
    );
    outln!("  cat.load_table('demo.events_clone').scan().to_arrow().num_rows   # {rows}");
    outln!("  (DuckDB: SELECT count(*) FROM iceberg_scan('{clone_md}');)");
    Ok(())
}
