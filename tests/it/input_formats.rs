//! Input as it comes, on generated cases: random rows (awkward strings, nulls, every scalar
//! kind) written as CSV under random DuckDB-named options (`--delim`, `--header`,
//! `--nullstr`, `--quote`, `--escape`, `--timestampformat`, `--dateformat`) and as JSON lines, appended by
//! `floe append`; then random keyed change batches written as CSV with a CDC operation
//! column, applied by `floe upsert --op-column`. floe's scan must equal the generated rows
//! (the model) and DuckDB's own reading of the same file with the same options
//! (`read_csv` / `read_json`; for the keyed table, `iceberg_scan` of floe's table).

use std::collections::BTreeMap;
use std::path::Path;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::common::{ok, peers_python, repo, write_parquet};

/// The table's columns in order, with their DDL and DuckDB types.
const COLUMNS: [(&str, &str, &str); 7] = [
    ("id", "long not null", "BIGINT"),
    ("s", "string", "VARCHAR"),
    ("n", "int", "INTEGER"),
    ("x", "double", "DOUBLE"),
    ("ts", "timestamp", "TIMESTAMP"),
    ("d", "date", "DATE"),
    ("b", "boolean", "BOOLEAN"),
];

/// Strings that stress a CSV writer and reader (delimiters, quotes, escapes, line breaks,
/// spaces at the ends, non-ASCII).
const STRINGS: [&str; 14] = [
    "plain",
    "with,comma",
    "semi;colon",
    "pipe|bar",
    "tab\there",
    "quote\"d",
    "apo's",
    "back\\slash",
    "line\nbreak",
    "ünïcødé ✓",
    " lead",
    "trail ",
    "NULL",
    "a\"b'c,d;e|f\\g",
];

/// One generated value per column (`None`: null), in its canonical text.
type Row = Vec<Option<String>>;

fn gen_rows(rng: &mut StdRng, n: usize, nullstr: &str) -> Vec<Row> {
    (0..n)
        .map(|i| {
            let null = |rng: &mut StdRng| rng.gen_bool(0.15);
            let mut row: Row = vec![Some(i.to_string())];
            row.push((!null(rng)).then(|| loop {
                let s = *STRINGS.choose(rng).unwrap();
                // A string spelled like the null string reads as null, as in DuckDB.
                if s != nullstr {
                    break s.to_string();
                }
            }));
            row.push((!null(rng)).then(|| rng.gen_range(-100_000i32..100_000).to_string()));
            row.push((!null(rng)).then(|| fmt_f64(rng.gen_range(-8000i32..8000) as f64 / 8.0)));
            row.push((!null(rng)).then(|| {
                let secs = rng.gen_range(946_684_800i64..1_893_456_000);
                let t = chrono::DateTime::from_timestamp(secs, 0)
                    .unwrap()
                    .naive_utc();
                t.format("%Y-%m-%dT%H:%M:%S").to_string()
            }));
            row.push((!null(rng)).then(|| {
                let days = rng.gen_range(0i64..20_000);
                (chrono::NaiveDate::from_ymd_opt(1990, 1, 1).unwrap()
                    + chrono::Duration::days(days))
                .to_string()
            }));
            row.push((!null(rng)).then(|| rng.gen_bool(0.5).to_string()));
            row
        })
        .collect()
}

fn fmt_f64(v: f64) -> String {
    format!("{v:?}")
}

/// CSV options as `floe append` takes them (DuckDB's names) and as `read_csv` takes them.
#[derive(Debug, Clone)]
struct CsvOptions {
    delim: char,
    header: bool,
    nullstr: String,
    quote: char,
    escape: char,
    /// strftime format of the timestamps (`None`: ISO `YYYY-MM-DD HH:MM:SS`).
    timestampformat: Option<String>,
    /// strftime format of the dates (`None`: ISO `YYYY-MM-DD`).
    dateformat: Option<String>,
}

impl CsvOptions {
    fn random(rng: &mut StdRng) -> Self {
        let quote = *['"', '\''].choose(rng).unwrap();
        let escape = if rng.gen_bool(0.5) { quote } else { '\\' };
        // DuckDB refuses a null string holding the escape character.
        let nulls: &[&str] = if escape == '\\' {
            &["", "NA"]
        } else {
            &["", "NA", "\\N"]
        };
        Self {
            delim: *[',', ';', '|', '\t'].choose(rng).unwrap(),
            header: rng.gen_bool(0.6),
            nullstr: nulls.choose(rng).unwrap().to_string(),
            quote,
            escape,
            timestampformat: rng.gen_bool(0.4).then(|| "%d/%m/%Y %H:%M:%S".to_string()),
            dateformat: rng
                .gen_bool(0.4)
                .then(|| ["%d.%m.%Y", "%m/%d/%Y"].choose(rng).unwrap().to_string()),
        }
    }

    fn floe_args(&self) -> Vec<String> {
        let mut a = vec![
            "--delim".into(),
            self.delim.to_string(),
            "--header".into(),
            self.header.to_string(),
            "--nullstr".into(),
            self.nullstr.clone(),
            "--quote".into(),
            self.quote.to_string(),
            "--escape".into(),
            self.escape.to_string(),
        ];
        if let Some(f) = &self.timestampformat {
            a.extend(["--timestampformat".into(), f.clone()]);
        }
        if let Some(f) = &self.dateformat {
            a.extend(["--dateformat".into(), f.clone()]);
        }
        a
    }

    /// One field: quoted when it holds what a reader would split, strip or read as null.
    fn field(&self, v: &str, is_string: bool) -> String {
        let risky = is_string
            && (v.is_empty()
                || v.contains(self.delim)
                || v.contains(self.quote)
                || v.contains(self.escape)
                || v.contains('\n')
                || v.contains('\r')
                || v.starts_with(' ')
                || v.ends_with(' '));
        if !risky {
            return v.to_string();
        }
        let mut out = String::new();
        out.push(self.quote);
        for c in v.chars() {
            if c == self.quote || (c == self.escape && self.escape != self.quote) {
                out.push(self.escape);
            }
            out.push(c);
        }
        out.push(self.quote);
        out
    }

    /// The rows as this CSV dialect writes them; with a header, the columns in `order`.
    fn write(&self, rows: &[Row], order: &[usize]) -> String {
        let mut out = String::new();
        let delim = self.delim.to_string();
        if self.header {
            let names: Vec<&str> = order.iter().map(|&c| COLUMNS[c].0).collect();
            out.push_str(&names.join(&delim));
            out.push('\n');
        }
        for r in rows {
            let fields: Vec<String> = order
                .iter()
                .map(|&c| match &r[c] {
                    None => self.nullstr.clone(),
                    Some(v) if c == 4 => {
                        let t =
                            chrono::NaiveDateTime::parse_from_str(v, "%Y-%m-%dT%H:%M:%S").unwrap();
                        match &self.timestampformat {
                            Some(f) => t.format(f).to_string(),
                            None => t.format("%Y-%m-%d %H:%M:%S").to_string(),
                        }
                    }
                    Some(v) if c == 5 && self.dateformat.is_some() => {
                        let d = chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d").unwrap();
                        d.format(self.dateformat.as_deref().unwrap_or_default())
                            .to_string()
                    }
                    Some(v) => self.field(v, c == 1),
                })
                .collect();
            out.push_str(&fields.join(&delim));
            out.push('\n');
        }
        out
    }

    /// DuckDB's `read_csv` call for this dialect (types by name with a header, the column
    /// list in file order without).
    fn duckdb_sql(&self, path: &str, order: &[usize]) -> String {
        let lit = |s: &str| format!("'{}'", s.replace('\'', "''"));
        let types: Vec<String> = order
            .iter()
            .map(|&c| format!("{}: {}", lit(COLUMNS[c].0), lit(COLUMNS[c].2)))
            .collect();
        let mut opts = vec![
            format!("delim = {}", lit(&self.delim.to_string())),
            format!("header = {}", self.header),
            format!("nullstr = {}", lit(&self.nullstr)),
            format!("quote = {}", lit(&self.quote.to_string())),
            format!("escape = {}", lit(&self.escape.to_string())),
            "auto_detect = false".to_string(),
            format!("columns = {{{}}}", types.join(", ")),
        ];
        if let Some(f) = &self.timestampformat {
            opts.push(format!("timestampformat = {}", lit(f)));
        }
        if let Some(f) = &self.dateformat {
            opts.push(format!("dateformat = {}", lit(f)));
        }
        format!("SELECT * FROM read_csv({}, {})", lit(path), opts.join(", "))
    }
}

/// A JSON value of column `c` (floe's scan, DuckDB's rows) in the model's canonical text.
fn canonical(c: usize, v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) if c == 3 => Some(fmt_f64(n.as_f64().unwrap())),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) if c == 4 => Some(s.replacen(' ', "T", 1)),
        Value::String(s) => Some(s.clone()),
        other => panic!("unexpected JSON value {other}"),
    }
}

/// JSON-lines rows (objects by column name) as model rows, sorted by id.
fn rows_of(json_lines: &str, columns: &[usize]) -> Vec<Row> {
    let mut rows: Vec<Row> = json_lines
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let o: Value = serde_json::from_str(l).unwrap();
            columns
                .iter()
                .map(|&c| canonical(c, &o[COLUMNS[c].0]))
                .collect()
        })
        .collect();
    rows.sort_by_key(|r| r[0].as_ref().map(|id| id.parse::<i64>().unwrap()));
    rows
}

/// Runs DuckDB queries (`sql` → the rows as JSON lines, `out`) in the peers' Python.
pub(crate) fn duckdb_rows(py: &Path, work: &Path, queries: &[(String, String)]) {
    let spec = work.join("duckdb-queries.json");
    let q: Vec<Value> = queries
        .iter()
        .map(|(sql, out)| serde_json::json!({"sql": sql, "out": out}))
        .collect();
    std::fs::write(&spec, serde_json::to_vec(&q).unwrap()).unwrap();
    let script = r#"
import json, sys, datetime
sys.path.insert(0, sys.argv[2])
from floe_peers import duckdb_connect
con = duckdb_connect()
con.execute("SET TimeZone = 'UTC'")
def plain(v):
    if isinstance(v, (datetime.datetime, datetime.date)):
        return v.isoformat()
    return v
for q in json.load(open(sys.argv[1])):
    cur = con.execute(q["sql"])
    names = [d[0] for d in cur.description]
    with open(q["out"], "w") as f:
        for row in cur.fetchall():
            f.write(json.dumps({n: plain(v) for n, v in zip(names, row)}) + "\n")
"#;
    let o = std::process::Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(&spec)
        .arg(repo().join("tools/peers"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "duckdb failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn schema_ddl() -> String {
    COLUMNS
        .iter()
        .map(|(n, t, _)| format!("{n} {t}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Random rows as CSV (random dialect and column order) and as JSON lines: floe's scan
/// equals the model and DuckDB's reading of the same files, case after case.
#[test]
fn generated_csv_dialects_and_json_lines_agree_with_duckdb_and_the_model() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let all: Vec<usize> = (0..COLUMNS.len()).collect();
    let mut duck = Vec::new();
    let mut expected = Vec::new();
    for case in 0..16u64 {
        let mut rng = StdRng::seed_from_u64(0x51_0000 + case);
        let json = case % 4 == 3;
        let opts = CsvOptions::random(&mut rng);
        let n = rng.gen_range(1..60);
        let rows = gen_rows(&mut rng, n, if json { "" } else { &opts.nullstr });
        let table = format!("db.c{case}");
        ok(&wh, &["create", &table, "--schema", &schema_ddl()]);
        let (path, label) = if json {
            let path = d.path().join(format!("c{case}.jsonl"));
            let mut text = String::new();
            for r in &rows {
                let mut o = serde_json::Map::new();
                for (c, v) in r.iter().enumerate() {
                    let value = match (c, v) {
                        (_, None) if rng.gen_bool(0.5) => continue, // absent: null too
                        (_, None) => Value::Null,
                        (0 | 2, Some(v)) => Value::from(v.parse::<i64>().unwrap()),
                        (3, Some(v)) => Value::from(v.parse::<f64>().unwrap()),
                        (6, Some(v)) => Value::from(v == "true"),
                        (_, Some(v)) => Value::from(v.clone()),
                    };
                    o.insert(COLUMNS[c].0.to_string(), value);
                }
                text.push_str(&Value::Object(o).to_string());
                text.push('\n');
            }
            std::fs::write(&path, text).unwrap();
            ok(&wh, &["append", &table, path.to_str().unwrap()]);
            let cols: Vec<String> = COLUMNS
                .iter()
                .map(|(n, _, t)| format!("'{n}': '{t}'"))
                .collect();
            duck.push((
                format!(
                    "SELECT * FROM read_json('{}', format = 'newline_delimited', columns = {{{}}})",
                    path.display(),
                    cols.join(", ")
                ),
                d.path()
                    .join(format!("c{case}.duck.jsonl"))
                    .display()
                    .to_string(),
            ));
            (path, "JSON lines".to_string())
        } else {
            let mut order = all.clone();
            if opts.header {
                order.shuffle(&mut rng);
            }
            let path = d.path().join(format!("c{case}.csv"));
            std::fs::write(&path, opts.write(&rows, &order)).unwrap();
            let p = path.to_str().unwrap().to_string();
            let mut args = vec!["append".to_string(), table.clone(), p.clone()];
            args.extend(opts.floe_args());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ok(&wh, &args);
            duck.push((
                opts.duckdb_sql(&p, &order),
                d.path()
                    .join(format!("c{case}.duck.jsonl"))
                    .display()
                    .to_string(),
            ));
            (path, format!("{opts:?}"))
        };
        let scanned = rows_of(&ok(&wh, &["scan", &table, "--format", "json"]), &all);
        assert_eq!(
            scanned,
            rows,
            "case {case} ({label}): floe's scan differs from the generated rows; file {}:\n{}",
            path.display(),
            std::fs::read_to_string(&path).unwrap()
        );
        expected.push((case, rows, label, path));
    }
    let Some(py) = peers_python() else { return };
    duckdb_rows(&py, d.path(), &duck);
    for ((case, rows, label, path), (_, out)) in expected.iter().zip(&duck) {
        let theirs = rows_of(&std::fs::read_to_string(out).unwrap(), &all);
        assert_eq!(
            &theirs,
            rows,
            "case {case} ({label}): DuckDB reads the file otherwise; file {}:\n{}",
            path.display(),
            std::fs::read_to_string(path).unwrap()
        );
    }
}

/// Random keyed change batches as CSV with a CDC operation column (`I`/`U`/`D` and
/// `c`/`u`/`d`, versions that go back, deletes of absent keys), applied one `floe upsert
/// --op-column op` each: the table equals the model of the latest-version rule after every
/// batch, and DuckDB's `iceberg_scan` of the last snapshot equals it too.
#[test]
fn generated_cdc_batches_with_an_operation_column_match_the_model() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.k",
            "--schema",
            "id long not null, v string, ver long, del int",
            "--primary-key",
            "id",
            "--property",
            "floe.merge.version-column=ver",
            "--property",
            "floe.merge.delete-column=del",
            "--property",
            "write.delete.mode=merge-on-read",
        ],
    );
    // The model: per key, the latest version seen (a row or a tombstone) and its row. Older
    // versions are replayed only to keys that held a row (a tombstone of a key floe never
    // held a row for is not the rule under test), and versions never tie.
    let mut model: BTreeMap<i64, (i64, Option<String>)> = BTreeMap::new();
    let mut held = std::collections::HashSet::new();
    let mut rng = StdRng::seed_from_u64(0x0CDC);
    for batch in 0..8 {
        let mut text = String::from("op,id,v,ver\n");
        let mut seen = std::collections::HashSet::new();
        for _ in 0..rng.gen_range(1..40) {
            let id = rng.gen_range(0i64..30);
            if !seen.insert(id) {
                continue; // one change per key and batch
            }
            let known = model.get(&id).map_or(0, |(v, _)| *v);
            // Mostly newer versions; some replays of older ones, which the rule ignores.
            let ver = if held.contains(&id) && known > 1 && rng.gen_bool(0.2) {
                known - rng.gen_range(1..known)
            } else {
                known + rng.gen_range(1..3)
            };
            let delete = rng.gen_bool(0.25);
            let op = if delete {
                *["D", "d"].choose(&mut rng).unwrap()
            } else {
                *["I", "U", "c", "u", "R"].choose(&mut rng).unwrap()
            };
            let v = format!("v{batch}_{id}");
            text.push_str(&format!(
                "{op},{id},{},{ver}\n",
                if delete { "" } else { v.as_str() }
            ));
            // The latest version wins.
            if ver > known {
                if !delete {
                    held.insert(id);
                }
                model.insert(id, (ver, (!delete).then_some(v)));
            }
        }
        let path = d.path().join(format!("b{batch}.csv"));
        std::fs::write(&path, &text).unwrap();
        ok(
            &wh,
            &[
                "upsert",
                "db.k",
                path.to_str().unwrap(),
                "--op-column",
                "op",
            ],
        );
        let want: Vec<String> = model
            .iter()
            .filter_map(|(id, (ver, v))| v.as_ref().map(|v| format!("{id},{v},{ver}")))
            .collect();
        let out = ok(
            &wh,
            &["scan", "db.k", "--format", "csv", "--columns", "id,v,ver"],
        );
        let mut got: Vec<String> = out.lines().skip(1).map(str::to_string).collect();
        got.sort_by_key(|l| l.split(',').next().unwrap().parse::<i64>().unwrap());
        assert_eq!(got, want, "after batch {batch}:\n{text}");
    }
    let Some(py) = peers_python() else { return };
    let md = ok(&wh, &["describe", "db.k", "--json"]);
    let md: Value = serde_json::from_str(&md).unwrap();
    let location = md["metadata_location"].as_str().unwrap().to_string();
    let out = d.path().join("k.duck.jsonl").display().to_string();
    duckdb_rows(
        &py,
        d.path(),
        &[(
            format!("SELECT id, v, ver FROM iceberg_scan('{location}')"),
            out.clone(),
        )],
    );
    let theirs: Vec<String> = {
        let mut r: Vec<(i64, String)> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| {
                let o: Value = serde_json::from_str(l).unwrap();
                let id = o["id"].as_i64().unwrap();
                (
                    id,
                    format!("{id},{},{}", o["v"].as_str().unwrap(), o["ver"]),
                )
            })
            .collect();
        r.sort();
        r.into_iter().map(|(_, l)| l).collect()
    };
    let want: Vec<String> = model
        .iter()
        .filter_map(|(id, (ver, v))| v.as_ref().map(|v| format!("{id},{v},{ver}")))
        .collect();
    assert_eq!(theirs, want, "DuckDB's iceberg_scan of {location}");
}

/// `scan --format csv` prints NULL as nothing and an empty string or empty bytes as `""`
/// (as DuckDB's COPY writes them): DuckDB's `read_csv` of floe's output (with
/// `allow_quoted_nulls = false`, which reads `""` as '') gives back NULL and '' where the
/// table holds them, on random rows of both.
#[test]
fn csv_output_tells_null_from_empty_as_duckdb_reads_it() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &["create", "db.e", "--schema", "id long, s string, b binary"],
    );
    let mut rng = StdRng::seed_from_u64(0xe_3b7);
    let mut rows = Vec::new();
    for id in 0..60 {
        let pick = |rng: &mut StdRng| match rng.gen_range(0..4) {
            0 => None,
            1 => Some(String::new()),
            2 => Some("x,\"y\"".to_string()),
            _ => Some(format!("v{}", rng.gen_range(0..9))),
        };
        let (s, b) = (pick(&mut rng), pick(&mut rng).map(|v| hex(v.as_bytes())));
        rows.push((id, s, b));
    }
    // Loaded through a Parquet file (floe's CSV reader, like arrow's, reads "" as NULL).
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    let strings: Vec<Option<&str>> = rows.iter().map(|r| r.1.as_deref()).collect();
    let bytes: Vec<Option<Vec<u8>>> = rows
        .iter()
        .map(|r| r.2.as_ref().map(|h| unhex(h)))
        .collect();
    let batch = arrow::array::RecordBatch::try_from_iter([
        (
            "id",
            std::sync::Arc::new(arrow::array::Int64Array::from(ids)) as arrow::array::ArrayRef,
        ),
        (
            "s",
            std::sync::Arc::new(arrow::array::StringArray::from(strings)) as _,
        ),
        (
            "b",
            std::sync::Arc::new(arrow::array::BinaryArray::from_iter(
                bytes.iter().map(|b| b.as_deref()),
            )) as _,
        ),
    ])
    .unwrap();
    let parquet = d.path().join("rows.parquet");
    write_parquet(&parquet, &[batch]);
    ok(&wh, &["append", "db.e", parquet.to_str().unwrap()]);
    let out = d.path().join("out.csv");
    ok(
        &wh,
        &[
            "scan",
            "db.e",
            "--format",
            "csv",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.starts_with("id,s,b\n"), "{text}");
    let Some(py) = peers_python() else { return };
    let got = d.path().join("duck.jsonl");
    duckdb_rows(
        &py,
        d.path(),
        &[(
            format!(
                "SELECT id, s, b FROM read_csv('{}', header = true, allow_quoted_nulls = false, \
                 columns = {{'id': 'BIGINT', 's': 'VARCHAR', 'b': 'VARCHAR'}}) ORDER BY id",
                out.display()
            ),
            got.to_string_lossy().into_owned(),
        )],
    );
    let theirs: Vec<(i64, Option<String>, Option<String>)> = std::fs::read_to_string(&got)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["id"].as_i64().unwrap(),
                v["s"].as_str().map(str::to_string),
                v["b"].as_str().map(str::to_string),
            )
        })
        .collect();
    assert_eq!(theirs, rows, "DuckDB's read of floe's CSV");
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect()
}
