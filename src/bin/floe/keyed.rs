//! `floe upsert`, `floe tombstones`, `floe expire-tombstones`: keyed tables as a CDC sink.

use std::time::Instant;

use floe::keyed::UpsertOptions;
use floe::table::parse_ident;
use floe::{Error, ErrorKind, Result};

use super::output::{print_json, print_table};
use super::{catalog, catalog_and_table, input, parse_time_ms, progress_bar, Cli};

/// Input formats of `upsert`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeFormat {
    /// Parquet files.
    Parquet,
    /// CSV with a header (columns by name).
    Csv,
    /// One JSON object per line (columns by name).
    Jsonl,
    /// Debezium change events, one per line (with or without the schema envelope).
    DebeziumJson,
}

/// Apply change files (upserts and deletes by primary key) to a keyed table in one commit
/// (a batch past --max-rows-per-commit: in several, see there).
#[derive(clap::Args, Debug)]
pub struct UpsertArgs {
    /// Table name.
    pub name: String,
    /// Change files, in arrival order (a later file's change wins a tie of versions).
    #[arg(required = true)]
    pub files: Vec<String>,
    /// Input format (default: by file extension; .json/.jsonl/.ndjson are JSON lines).
    #[arg(long, value_enum)]
    pub format: Option<ChangeFormat>,
    /// The sink the checkpoint belongs to (with --checkpoint: a sink id alone would record
    /// nothing, so exactly-once would be silently off).
    #[arg(long, requires = "checkpoint")]
    pub sink_id: Option<String>,
    /// The batch's checkpoint: recorded in the snapshot summary (floe.sink.<id>.checkpoint);
    /// one at or below the committed one makes the upsert a no-op.
    #[arg(long, requires = "sink_id")]
    pub checkpoint: Option<i64>,
    /// The input's operation column (`I`/`U`/`D`, `c`/`u`/`d`/`r` as CDC tools write it),
    /// mapped onto the table's delete column; the column itself is not stored.
    #[arg(long)]
    pub op_column: Option<String>,
    /// With --op-column: the values that delete the key (comma-separated).
    #[arg(long, value_delimiter = ',', value_parser = crate::item, default_value = "D,d", requires = "op_column")]
    pub delete_values: Vec<String>,
    /// With --op-column: the values that upsert the row (comma-separated); any other value is
    /// refused.
    #[arg(long, value_delimiter = ',', value_parser = crate::item, default_value = "I,U,C,R,i,u,c,r", requires = "op_column")]
    pub upsert_values: Vec<String>,
    /// How CSV files are read.
    #[command(flatten)]
    pub csv: input::CsvArgs,
    /// Add the files' new columns to the table (optional columns) in the same commit.
    #[arg(long)]
    pub evolve_schema: bool,
    /// Apply the changes to this branch (main is untouched); not with a delete column or a
    /// checkpoint (tombstones and checkpoints are table-wide).
    #[arg(long)]
    pub branch: Option<String>,
    /// Stage the commit for write-audit-publish with this WAP id (see `append --wap-id`).
    #[arg(long, conflicts_with = "branch")]
    pub wap_id: Option<String>,
    /// Memory bound: past this many changes the batch is spilled to --spill-dir by key and
    /// applied in parts of at most this many, one commit each, the checkpoint with the last
    /// (a failed part leaves the earlier ones committed: send the batch again). Held in
    /// memory, a change takes about 200-400 bytes. Default 5000000 for the replace engine;
    /// the engines that fold rows apply a batch in one commit and refuse more than this
    /// when it is given.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_rows_per_commit: Option<u64>,
    /// Where a batch past --max-rows-per-commit is spilled (default: the system's temporary
    /// directory, or FLOE_SPILL_DIR); it needs about the input's size, uncompressed.
    #[arg(long)]
    pub spill_dir: Option<std::path::PathBuf>,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// The changes a replace-engine upsert holds in memory before it spills and splits.
pub const DEFAULT_MAX_ROWS_PER_COMMIT: u64 = 5_000_000;

fn format_of(path: &str, given: Option<ChangeFormat>) -> Result<ChangeFormat> {
    if let Some(f) = given {
        return Ok(f);
    }
    Ok(match input::input_kind(path)? {
        input::InputKind::Csv(_) => ChangeFormat::Csv,
        input::InputKind::JsonLines => ChangeFormat::Jsonl,
        input::InputKind::Parquet => ChangeFormat::Parquet,
    })
}

/// The table's Arrow schema plus the input columns its merge functions read that are not
/// table columns (CSV and JSON lines are read by this schema): `avg` inputs as doubles,
/// `count_distinct` inputs as longs, `approx_count_distinct` inputs as strings.
pub fn with_function_inputs(table: &floe::Table) -> Result<arrow::datatypes::SchemaRef> {
    use floe::spec::keyed::{Function, KeyedSpec};
    let schema = table.arrow_schema()?;
    let Ok(spec) = KeyedSpec::of(table.metadata(), &table.name()) else {
        return Ok(schema);
    };
    let mut fields: Vec<arrow::datatypes::FieldRef> = schema.fields().iter().cloned().collect();
    for agg in &spec.aggregates {
        let Some(input) = agg.function.input() else {
            continue;
        };
        if fields.iter().any(|f| f.name() == input) {
            continue;
        }
        let ty = match agg.function {
            Function::Avg(_) => arrow::datatypes::DataType::Float64,
            Function::CountDistinct(_) => arrow::datatypes::DataType::Int64,
            _ => arrow::datatypes::DataType::Utf8,
        };
        fields.push(std::sync::Arc::new(arrow::datatypes::Field::new(
            input, ty, true,
        )));
    }
    Ok(std::sync::Arc::new(arrow::datatypes::Schema::new(fields)))
}

/// The rows of change file `f` (its format given, or by extension), typed by `schema`
/// (the table's, with the merge functions' inputs).
pub fn read_changes(
    f: &str,
    format: Option<ChangeFormat>,
    table: &floe::Table,
    schema: &arrow::datatypes::SchemaRef,
    csv: &input::CsvArgs,
) -> Result<Vec<arrow::array::RecordBatch>> {
    let source = format!("'{f}'");
    match format_of(f, format)? {
        ChangeFormat::DebeziumJson => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut input::open_input(f)?, &mut text)
                .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("reading '{f}': {e}")))?;
            Ok(vec![floe::keyed::debezium::decode(&text, &source, table)?])
        }
        ChangeFormat::Jsonl => super::json_lines::read_jsonl(f, schema)?.collect(),
        ChangeFormat::Parquet => {
            input::read_raw_as(f, input::InputKind::Parquet, schema, false, csv)?.collect()
        }
        ChangeFormat::Csv => {
            let tab = f.to_ascii_lowercase().ends_with(".tsv");
            let kind = input::InputKind::Csv(if tab { b'\t' } else { b',' });
            input::read_raw_as(f, kind, schema, false, csv)?.collect()
        }
    }
}

/// `floe upsert`.
pub async fn upsert(cli: &Cli, a: &UpsertArgs) -> Result<()> {
    let (cat, table) = catalog_and_table(cli, &a.name).await?;
    let mut schema = with_function_inputs(&table)?;
    let op = match &a.op_column {
        Some(_) if a.format == Some(ChangeFormat::DebeziumJson) => {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "--op-column is for CSV, JSON lines and Parquet change files; Debezium events \
                 carry their own op",
            ))
        }
        Some(name) => {
            let spec = floe::spec::keyed::KeyedSpec::of(table.metadata(), &table.name())?;
            let delete_column = match &spec.delete {
                Some(d) => Some((d.clone(), schema.field_with_name(d)?.data_type().clone())),
                None => None,
            };
            let op = super::op_column::OpColumn {
                name: name.clone(),
                delete_values: a.delete_values.clone(),
                upsert_values: a.upsert_values.clone(),
                delete_column,
                table: a.name.clone(),
            };
            schema = op.reading_schema(&schema)?;
            Some(op)
        }
        None => None,
    };
    let mut options = UpsertOptions::default().with_evolve_schema(a.evolve_schema);
    if let Some(s) = &a.sink_id {
        options.sink_id = Some(s.clone());
    }
    options.checkpoint = a.checkpoint;
    // `--branch B`, or Spark's `ns.table.branch_B` name.
    match (&a.branch, table.branch()) {
        (Some(b), _) => options = options.with_branch(b.clone()),
        (None, "main") => {}
        (None, b) => options = options.with_branch(b.to_string()),
    }
    if let Some(w) = &a.wap_id {
        options = options.with_wap_id(w.clone());
    }
    let replace = floe::spec::keyed::KeyedSpec::of(table.metadata(), &table.name())
        .is_ok_and(|s| s.engine == floe::spec::keyed::MergeEngine::Replace);
    let limit = match a.max_rows_per_commit {
        Some(n) => n,
        None if replace => DEFAULT_MAX_ROWS_PER_COMMIT,
        None => u64::MAX,
    };
    let spill_dir = a
        .spill_dir
        .clone()
        .or_else(|| std::env::var_os("FLOE_SPILL_DIR").map(Into::into))
        .unwrap_or_else(std::env::temp_dir);
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut changes = floe::keyed::SpillingBatch::new(&table, &options, limit, &spill_dir)?;
    for f in &a.files {
        let source = format!("'{f}'");
        let mut first_row = 1u64;
        for b in read_changes(f, a.format, &table, &schema, &a.csv)? {
            let b = match &op {
                Some(op) => op.apply(&b, &source, first_row)?,
                None => b,
            };
            first_row += b.num_rows() as u64;
            changes.push(source.clone(), b)?;
        }
    }
    let ident = table.ident().clone();
    let started = Instant::now();
    let r = progress_bar::run(&format!("upserting into {}", a.name), a.json, |_| {
        floe::keyed::upsert_spilled(&cat, &ident, changes)
    })
    .await
    .map_err(|e| {
        if e.to_string().contains("let the upsert evolve the schema") {
            e.with_hint("pass --evolve-schema to add new columns")
        } else {
            e
        }
    })?;
    let secs = started.elapsed().as_secs_f64();
    if a.json {
        print_json(&super::report::upsert(
            &a.name,
            &a.sink_id,
            a.checkpoint,
            &r,
            started,
        ));
        return Ok(());
    }
    if r.already_committed {
        outln!(
            "checkpoint {} of sink {} is already committed to {} (committed: {}); nothing was done",
            a.checkpoint.unwrap_or_default(),
            a.sink_id.as_deref().unwrap_or("-"),
            a.name,
            r.committed_checkpoint.unwrap_or_default()
        );
        return Ok(());
    }
    // What "ignored" means depends on the table's merge engine.
    let ignored_why =
        match floe::spec::keyed::KeyedSpec::of(table.metadata(), &table.name()).map(|s| s.engine) {
            Ok(floe::spec::keyed::MergeEngine::FirstRow) => "keys already stored",
            Ok(floe::spec::keyed::MergeEngine::Sum) => "new keys whose sums are zero",
            _ => "older than the stored version",
        };
    outln!(
        "upserted {} changes ({} keys) into {}: {} inserted, {} updated, {} deleted ({} of absent keys), \
         {} ignored ({ignored_why}); snapshot {}{} in {:.2}s",
        r.input_rows,
        r.keys,
        a.name,
        r.inserted,
        r.updated,
        r.deleted + r.deleted_absent,
        r.deleted_absent,
        r.ignored,
        r.snapshot_id.map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
        match (&a.sink_id, a.checkpoint) {
            (Some(s), Some(n)) => format!(", checkpoint {s}={n}"),
            _ => String::new(),
        },
        secs
    );
    if r.parts > 1 {
        outln!(
            "applied in {} commits of at most about {} changes (--max-rows-per-commit)",
            r.parts,
            limit
        );
    }
    if !r.added_columns.is_empty() {
        outln!("added columns: {}", r.added_columns.join(", "));
    }
    Ok(())
}

/// Show a keyed table's tombstones: how many, the oldest and newest.
#[derive(clap::Args, Debug)]
pub struct TombstonesArgs {
    /// Table name.
    pub name: String,
    /// List the keys too (with the version that deleted them and when).
    #[arg(long)]
    pub list: bool,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

fn rfc3339(ms: Option<i64>) -> Option<String> {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// `floe tombstones`.
pub async fn tombstones(cli: &Cli, a: &TombstonesArgs) -> Result<()> {
    let (_, table) = catalog_and_table(cli, &a.name).await?;
    let r = floe::keyed::tombstones(&table, a.list).await?;
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header: Vec<String> = Vec::new();
    if let Some(b) = &r.keys {
        let n = b.num_columns();
        header = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        header[n - 2] = "version".into();
        header[n - 1] = "deleted_at".into();
        for i in 0..b.num_rows() {
            let mut row = Vec::with_capacity(n);
            for c in 0..n {
                let col = b.column(c);
                let s = if c == n - 1 {
                    let ms = arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(
                        col.as_ref(),
                    )
                    .value(i);
                    rfc3339(Some(ms)).unwrap_or_default()
                } else {
                    arrow::util::display::array_value_to_string(col, i)
                        .map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?
                };
                row.push(s);
            }
            rows.push(row);
        }
    }
    if a.json {
        let mut v = serde_json::json!({
            "table": a.name,
            "tombstones_count": r.count,
            "tombstone_files_count": r.files,
            "oldest_timestamp_ms": r.oldest_ms,
            "newest_timestamp_ms": r.newest_ms,
        });
        if let Some(b) = &r.keys {
            let n = b.num_columns();
            let as_long = |c: usize, i: usize| {
                arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(
                    b.column(c).as_ref(),
                )
                .value(i)
            };
            let listed: Vec<serde_json::Value> = rows
                .iter()
                .enumerate()
                .map(|(i, row)| {
                    let key: serde_json::Map<String, serde_json::Value> = header[..n - 2]
                        .iter()
                        .cloned()
                        .zip(row.iter().map(|s| s.clone().into()))
                        .collect();
                    serde_json::json!({
                        "key": key,
                        "version": as_long(n - 2, i),
                        "timestamp_ms": as_long(n - 1, i),
                    })
                })
                .collect();
            v["tombstones"] = listed.into();
        }
        print_json(&v);
        return Ok(());
    }
    outln!(
        "{}: {} tombstones in {} files; oldest {}, newest {}",
        a.name,
        r.count,
        r.files,
        rfc3339(r.oldest_ms).unwrap_or_else(|| "-".into()),
        rfc3339(r.newest_ms).unwrap_or_else(|| "-".into())
    );
    if a.list && !rows.is_empty() {
        let h: Vec<&str> = header.iter().map(String::as_str).collect();
        print_table(&h, &rows);
    }
    Ok(())
}

/// Remove tombstones committed before a time (an older replay of those keys then brings
/// them back).
#[derive(clap::Args, Debug)]
pub struct ExpireTombstonesArgs {
    /// Table name.
    pub name: String,
    /// Remove tombstones committed before this time (RFC 3339, or ms since the epoch).
    #[arg(long)]
    pub older_than: String,
    /// Only count what would be removed.
    #[arg(long)]
    pub dry_run: bool,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// `floe expire-tombstones`.
pub async fn expire_tombstones(cli: &Cli, a: &ExpireTombstonesArgs) -> Result<()> {
    let cat = catalog(cli)?;
    let ident = parse_ident(&a.name)?;
    let cutoff = parse_time_ms(&a.older_than)
        .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("--older-than: {e}")))?;
    let r = floe::keyed::expire_tombstones(&cat, &ident, cutoff, a.dry_run).await?;
    if r.removed > 0 && !a.dry_run {
        eprintln!(
            "warning: {} tombstones removed from {}: a replay of an older version of those keys will now bring them back",
            r.removed, a.name
        );
    }
    if a.json {
        print_json(&serde_json::json!({
            "table": a.name,
            "dry_run": a.dry_run,
            "expired_tombstones_count": r.removed,
            "kept_tombstones_count": r.kept,
        }));
        return Ok(());
    }
    let verb = if a.dry_run { "would remove" } else { "removed" };
    outln!(
        "{}: {verb} {} tombstones older than {}, {} kept",
        a.name,
        r.removed,
        a.older_than,
        r.kept
    );
    Ok(())
}
