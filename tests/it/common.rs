//! Shared helpers: temporary catalogs, deterministic data, the peer harness.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array, Int64Array,
    ListBuilder, RecordBatch, StringArray, StringBuilder, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema};
use floe::catalog::Catalog;
use floe::scan::{Scan, SnapshotSelector};
use floe::Table;

/// A temporary warehouse with a SQLite catalog.
pub fn sqlite_catalog() -> (tempfile::TempDir, Catalog) {
    let dir = tempfile::tempdir().unwrap();
    let cat = Catalog::open(None, Some(dir.path().to_str().unwrap()), None).unwrap();
    (dir, cat)
}

/// A temporary warehouse with a filesystem (Hadoop) catalog.
pub fn fs_catalog() -> (tempfile::TempDir, Catalog) {
    let dir = tempfile::tempdir().unwrap();
    let uri = format!("file://{}", dir.path().display());
    let cat = Catalog::open(Some(&uri), None, None).unwrap();
    (dir, cat)
}

pub const WIDE_DDL: &str = "id long not null, k long, a double, name string, cat string, ts timestamptz, \
                            d date, price decimal(10,2), flag boolean, small int, tags list<string>";

/// Deterministic rows `[start, start+n)` for [`WIDE_DDL`].
pub fn wide_batch(start: i64, n: usize) -> RecordBatch {
    let ids: Vec<i64> = (start..start + n as i64).collect();
    let k: Vec<Option<i64>> = ids
        .iter()
        .map(|i| {
            if i % 17 == 0 {
                None
            } else {
                Some((i * 7919) % 1000)
            }
        })
        .collect();
    let a: Vec<f64> = ids.iter().map(|i| *i as f64 * 0.5).collect();
    let name: Vec<Option<String>> = ids
        .iter()
        .map(|i| {
            if i % 11 == 0 {
                None
            } else {
                Some(format!("name-{:05}-é", i % 997))
            }
        })
        .collect();
    let cat: Vec<&str> = ids
        .iter()
        .map(|i| ["alpha", "beta", "gamma", "delta"][(*i % 4) as usize])
        .collect();
    let ts: Vec<i64> = ids
        .iter()
        .map(|i| 1_704_067_200_000_000 + i * 3_600_000_000 / 7)
        .collect();
    let d: Vec<i32> = ids.iter().map(|i| 19_723 + (*i as i32 % 40)).collect();
    let price: Vec<i128> = ids.iter().map(|i| (*i as i128 * 137) % 100_000).collect();
    let flag: Vec<bool> = ids.iter().map(|i| i % 3 == 0).collect();
    let small: Vec<i32> = ids.iter().map(|i| (*i % 100) as i32).collect();
    let mut tags = ListBuilder::new(StringBuilder::new());
    for i in &ids {
        for j in 0..(*i % 3) {
            tags.values().append_value(format!("t{j}"));
        }
        tags.append(i % 5 != 0);
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids)),
        Arc::new(Int64Array::from(k)),
        Arc::new(Float64Array::from(a)),
        Arc::new(StringArray::from(name)),
        Arc::new(StringArray::from(cat)),
        Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
        Arc::new(Date32Array::from(d)),
        Arc::new(
            Decimal128Array::from(price)
                .with_precision_and_scale(10, 2)
                .unwrap(),
        ),
        Arc::new(BooleanArray::from(flag)),
        Arc::new(Int32Array::from(small)),
        Arc::new(tags.finish()),
    ];
    let fields: Vec<Field> = cols
        .iter()
        .zip([
            "id", "k", "a", "name", "cat", "ts", "d", "price", "flag", "small", "tags",
        ])
        .map(|(c, n)| Field::new(n, c.data_type().clone(), n != "id"))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
}

/// A tiny `id long, v string` batch.
pub fn id_batch(ids: std::ops::Range<i64>) -> RecordBatch {
    let v: Vec<String> = ids.clone().map(|i| format!("v{i}")).collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int64Array::from(ids.collect::<Vec<_>>())),
            Arc::new(StringArray::from(v)),
        ],
    )
    .unwrap()
}

/// Rows shaped after `schema` (long, string and timestamp columns), ids from `start`.
pub fn rows_like(schema: &floe::spec::Schema, start: i64, n: i64) -> RecordBatch {
    use arrow::array::{ArrayRef, StringArray, TimestampMicrosecondArray};
    let arrow_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(schema).unwrap());
    let cols: Vec<ArrayRef> = arrow_schema
        .fields()
        .iter()
        .map(|f| -> ArrayRef {
            match f.data_type() {
                arrow::datatypes::DataType::Int64 => {
                    Arc::new(Int64Array::from((start..start + n).collect::<Vec<i64>>()))
                }
                arrow::datatypes::DataType::Utf8 => Arc::new(StringArray::from(
                    (start..start + n)
                        .map(|i| format!("floe{i}"))
                        .collect::<Vec<_>>(),
                )),
                arrow::datatypes::DataType::Timestamp(_, tz) => Arc::new(
                    TimestampMicrosecondArray::from(
                        (start..start + n)
                            .map(|i| 1_700_000_000_000_000 + i * 3_600_000_000)
                            .collect::<Vec<i64>>(),
                    )
                    .with_timezone_opt(tz.clone()),
                ),
                other => panic!("unexpected type {other}"),
            }
        })
        .collect();
    RecordBatch::try_new(arrow_schema, cols).unwrap()
}

/// Rows of a scan, collected.
pub async fn scan_rows(t: &Table, sel: SnapshotSelector) -> Vec<RecordBatch> {
    Scan::new(t).snapshot(sel).to_batches().await.unwrap()
}

pub fn count(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.num_rows()).sum()
}

/// Sum of an Int64 column named `col`.
pub fn sum_i64(batches: &[RecordBatch], col: &str) -> i64 {
    batches
        .iter()
        .map(|b| {
            let c = b.column(b.schema().index_of(col).unwrap());
            let a = c.as_any().downcast_ref::<Int64Array>().unwrap();
            a.iter().flatten().sum::<i64>()
        })
        .sum()
}

/// Writes batches to a Parquet file (the expected rows for the peer checker).
pub fn write_parquet(path: &Path, batches: &[RecordBatch]) {
    let schema = batches
        .first()
        .map(|b| b.schema())
        .expect("at least one batch");
    let f = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(f, schema, None).unwrap();
    for b in batches {
        w.write(b).unwrap();
    }
    w.close().unwrap();
}

/// The peers' Python, installed by tools/peers/setup.sh (the test command sets it).
pub fn peers_python() -> Option<PathBuf> {
    if std::env::var("FLOE_SKIP_PEERS").as_deref() == Ok("1") {
        eprintln!("FLOE_SKIP_PEERS=1: peer checks skipped");
        return None;
    }
    let p = std::env::var("FLOE_PEERS_PYTHON")
        .ok()
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var("HOME").ok()?;
            let p = PathBuf::from(home).join(".cache/floe/peers/venv/bin/python");
            p.exists().then_some(p)
        });
    match p {
        Some(p) => Some(p),
        None => panic!("peer engines not installed: run `bash tools/test.sh` (or set FLOE_SKIP_PEERS=1 to skip interop)"),
    }
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One peer check: the table at `metadata` (optionally a snapshot) must hold `expected`.
#[derive(serde::Serialize, Clone, Debug)]
pub struct Check {
    pub name: String,
    pub metadata: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<i64>,
    pub expected: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engines: Option<Vec<String>>,
    /// Engines that must refuse to read the table (pyiceberg and equality deletes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refuse: Option<Vec<String>>,
}

/// Runs the peer checker over `checks`; panics with its report unless every engine agrees.
pub fn peer_check(python: &Path, work: &Path, checks: &[Check]) {
    peer_check_env(python, work, checks, &[]);
}

/// [`peer_check`] with extra environment variables for the checker (another S3 server's
/// `FLOE_TEST_S3_*` settings).
pub fn peer_check_env<C: serde::Serialize>(
    python: &Path,
    work: &Path,
    checks: &[C],
    env: &[(String, String)],
) {
    let file = work.join(format!("checks-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&file, serde_json::to_vec_pretty(checks).unwrap()).unwrap();
    let out = Command::new(python)
        .arg(repo().join("tools/peers/peer_check.py"))
        .arg(&file)
        .envs(env.iter().cloned())
        .output()
        .expect("run peer_check.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let compared = lines.iter().filter(|l| l.get("skipped").is_none()).count();
    assert!(
        out.status.success() && compared > 0,
        "peer check failed (status {:?}):\n{stdout}\n--- stderr (tail) ---\n{}",
        out.status,
        stderr
            .lines()
            .rev()
            .take(40)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    for l in &lines {
        eprintln!("peer: {l}");
    }
}

/// Scans `t` at `snapshot` with floe and writes the rows as the expected Parquet.
pub async fn floe_expected(t: &Table, snapshot: Option<i64>, path: &Path) -> usize {
    let sel = snapshot.map(SnapshotSelector::Id).unwrap_or_default();
    let batches = scan_rows(t, sel).await;
    let n = count(&batches);
    if n == 0 {
        // An empty table: write an empty file with the scan schema.
        let schema = Arc::new(
            iceberg::arrow::schema_to_arrow_schema(t.metadata().current_schema()).unwrap(),
        );
        write_parquet(path, &[RecordBatch::new_empty(schema)]);
    } else {
        write_parquet(path, &batches);
    }
    n
}

/// Runs an INSERT of `values` (if any) and `statements` through Spark's hadoop catalog.
pub fn spark_write(
    py: &std::path::Path,
    warehouse: &std::path::Path,
    table: &str,
    values: &str,
    statements: &[&str],
) {
    let out = std::process::Command::new(py)
        .arg(repo().join("tools/peers/spark_write.py"))
        .arg(warehouse)
        .arg(table)
        .arg(values)
        .args(statements)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "spark failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Asserts that two Parquet files hold the same rows (canonicalised, in any order), as the
/// peer checker compares them; `what` names the comparison in the failure.
pub fn assert_same_rows(python: &Path, expected: &Path, actual: &Path, what: &str) {
    let out = Command::new(python)
        .arg(repo().join("tools/peers/compare_parquet.py"))
        .arg(expected)
        .arg(actual)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{what}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------- the CLI

/// The `floe` binary as a command; no catalog or warehouse leaks in from the environment.
pub fn floe_cmd() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_floe"));
    c.env_remove("FLOE_WAREHOUSE").env_remove("FLOE_CATALOG");
    c
}

/// `floe --warehouse wh args…`.
pub fn floe(wh: &Path, args: &[&str]) -> std::process::Output {
    floe_cmd()
        .arg("--warehouse")
        .arg(wh)
        .args(args)
        .output()
        .expect("run floe")
}

/// `floe` run in `cwd` with `args` (no implied --warehouse or --catalog).
pub fn floe_in(cwd: &Path, args: &[&str]) -> std::process::Output {
    floe_cmd()
        .current_dir(cwd)
        .args(args)
        .output()
        .expect("run floe")
}

/// A run's exit code, stdout and stderr, for failure messages.
pub fn text(o: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `floe --warehouse wh args…`, which must succeed: its stdout.
pub fn ok(wh: &Path, args: &[&str]) -> String {
    let o = floe(wh, args);
    assert!(
        o.status.success(),
        "floe {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// A CSV and a Parquet input file for `id long, name string, ts timestamptz`.
pub fn inputs(dir: &Path) -> (String, String) {
    let csv = dir.join("in.csv");
    let mut s = String::from("id,name,ts\n");
    for i in 0..50 {
        s.push_str(&format!("{i},n{i},2024-01-{:02}T10:00:00Z\n", 1 + i % 20));
    }
    std::fs::write(&csv, s).unwrap();
    let pq = dir.join("in.parquet");
    let b = {
        use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
        use std::sync::Arc;
        RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(Int64Array::from((50..80).collect::<Vec<i64>>())) as _,
            ),
            (
                "name",
                Arc::new(StringArray::from(
                    (50..80).map(|i| format!("n{i}")).collect::<Vec<_>>(),
                )) as _,
            ),
            (
                "ts",
                Arc::new(
                    TimestampMicrosecondArray::from(
                        (50..80)
                            .map(|i| 1_706_000_000_000_000 + i * 1_000_000)
                            .collect::<Vec<i64>>(),
                    )
                    .with_timezone("UTC"),
                ) as _,
            ),
        ])
        .unwrap()
    };
    write_parquet(&pq, &[b]);
    (
        csv.to_string_lossy().to_string(),
        pq.to_string_lossy().to_string(),
    )
}

pub use crate::files::{files_under, paths_under};

/// The rows of `t` the filter `filter` keeps, and what reading them pruned below the file
/// level (row groups, bloom filters, pages).
pub async fn filtered_scan(t: &Table, filter: &str) -> (Vec<RecordBatch>, floe::scan::ReadStats) {
    let scan = Scan::new(t).filter(floe::expr::parse_expr(filter).unwrap());
    let plan = scan.plan().await.unwrap();
    let counters = plan.read_counters();
    let rows: Vec<RecordBatch> = futures::TryStreamExt::try_collect(scan.read(plan).unwrap())
        .await
        .unwrap();
    (rows, counters.stats())
}

/// [`filtered_scan`]'s rows as the sorted values of their first column (a long), with the
/// read counters.
pub async fn filtered_first_longs(t: &Table, filter: &str) -> (Vec<i64>, floe::scan::ReadStats) {
    let (rows, stats) = filtered_scan(t, filter).await;
    let mut got: Vec<i64> = rows
        .iter()
        .flat_map(|b| {
            arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(b.column(0))
                .values()
                .to_vec()
        })
        .collect();
    got.sort_unstable();
    (got, stats)
}

/// The `int` column `name` of `b` (a metadata table's `spec_id`, `sort_order_id`, …).
pub fn i32_column(b: &arrow::array::RecordBatch, name: &str) -> arrow::array::Int32Array {
    b.column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"))
        .as_any()
        .downcast_ref::<arrow::array::Int32Array>()
        .unwrap_or_else(|| panic!("column {name} is not an int"))
        .clone()
}

/// The first row of every page of every column of a local data file's first row group, read
/// from its offset index (which must be there).
pub fn page_first_rows(file_path: &str) -> Vec<Vec<i64>> {
    let file = std::fs::File::open(file_path.trim_start_matches("file://")).unwrap();
    let opts = parquet::arrow::arrow_reader::ArrowReaderOptions::new()
        .with_page_index_policy(parquet::file::metadata::PageIndexPolicy::Required);
    let builder =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new_with_options(
            file, opts,
        )
        .unwrap();
    let index = builder.metadata().offset_index().expect("an offset index");
    index[0]
        .iter()
        .map(|c| {
            c.page_locations()
                .iter()
                .map(|p| p.first_row_index)
                .collect()
        })
        .collect()
}

/// Writes `text` to `dir/name` and returns the path as a string (an input file for the CLI).
pub fn write_input(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}
