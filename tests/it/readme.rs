//! The examples of the README and of every page of the user guide (`docs/src/**.md`) name
//! commands and options that exist: each example (from every `sh` block, continuation lines
//! joined, comments, redirections and pipes cut) is run with `--help` appended, which the CLI
//! parser accepts only if every command and option before it is real. Values are not checked
//! there; `readme_examples_run_as_written` then runs each section's blocks for real.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use crate::common::{repo, write_parquet};

/// The documents whose examples run: the README, then the user guide's pages (sorted by
/// path), each as its path (relative to the repository) and text.
fn documents() -> Vec<(String, String)> {
    let root = repo();
    let mut files = vec![root.join("README.md")];
    files.extend(crate::docs::guide_pages());
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            let rel = f.strip_prefix(&root).unwrap().display().to_string();
            (rel, text)
        })
        .collect()
}

/// The `floe` command lines of the documents' `sh` blocks, as argument lists.
fn examples() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (_, text) in documents() {
        out.extend(examples_in(&text));
    }
    out
}

/// The `floe` command lines of one document's `sh` blocks.
fn examples_in(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            pending.clear();
            continue;
        }
        if !in_sh {
            continue;
        }
        if pending.is_empty() && !line.trim_start().starts_with("floe ") {
            continue;
        }
        pending.push_str(line.trim_end_matches('\\'));
        pending.push(' ');
        // A continuation: a trailing backslash, or a quote still open.
        if line.ends_with('\\') || !balanced(&pending) {
            continue;
        }
        out.push(words(&pending));
        pending.clear();
    }
    out
}

fn balanced(s: &str) -> bool {
    let (mut single, mut double) = (false, false);
    for c in s.chars() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            _ => {}
        }
    }
    !single && !double
}

/// Shell words up to a comment, redirection or pipe (quotes removed).
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut has_word = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                has_word = true;
            }
            (None, '#' | '>' | '|') if !has_word => break,
            (None, c) if c.is_whitespace() => {
                if has_word {
                    words.push(std::mem::take(&mut cur));
                    has_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                has_word = true;
            }
        }
    }
    if has_word {
        words.push(cur);
    }
    words
}

#[test]
fn readme_examples_name_real_commands_and_options() {
    let examples = examples();
    assert!(examples.len() >= 60, "found {} examples", examples.len());
    let mut bad = Vec::new();
    for ex in &examples {
        assert_eq!(ex[0], "floe");
        // Shell variables: a value after an option (`--group "$g"`) becomes 1; elsewhere
        // (`floe $C create`) they stand for options shown next to the example.
        let mut args: Vec<String> = Vec::new();
        for (i, w) in ex.iter().enumerate().skip(1) {
            match w.strip_prefix('$') {
                Some(_) if ex[i - 1].starts_with("--") => args.push("1".into()),
                Some(_) => {}
                None => args.push(w.clone()),
            }
        }
        let o = crate::common::floe_cmd()
            .args(&args)
            .arg("--help")
            .env_remove("FLOE_CATALOG")
            .env_remove("FLOE_WAREHOUSE")
            .output()
            .unwrap();
        if !o.status.success() {
            bad.push(format!(
                "{}\n  {}",
                ex.join(" "),
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "examples in the README or docs/src that the CLI refuses:\n{}",
        bad.join("\n")
    );
}

#[test]
fn words_split_like_a_shell() {
    assert_eq!(
        words(r#"floe scan db.t --where "a = 'x y'" -o out.csv   # comment"#),
        [
            "floe",
            "scan",
            "db.t",
            "--where",
            "a = 'x y'",
            "-o",
            "out.csv"
        ]
    );
    assert_eq!(words("floe files db.t > f.json"), ["floe", "files", "db.t"]);
    assert_eq!(words("floe x ''"), ["floe", "x", ""]);
}

/// The documents' `sh` blocks, each with the document's path and the heading it stands
/// under (the section's label).
fn sh_blocks() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (path, text) in documents() {
        for (heading, block) in sh_blocks_in(&text) {
            out.push((path.clone(), heading, block));
        }
    }
    out
}

/// One document's `sh` blocks, each with the heading it stands under (lines of other code
/// blocks, such as a Python comment, are not headings).
fn sh_blocks_in(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut block: Option<String> = None;
    let mut other_fence = false;
    for line in text.lines() {
        match &mut block {
            Some(b) if line.starts_with("```") => {
                out.push((heading.clone(), std::mem::take(b)));
                block = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None if line.starts_with("```") && other_fence => other_fence = false,
            None if other_fence => {}
            None if line == "```sh" => block = Some(String::new()),
            None if line.starts_with("```") => other_fence = true,
            None if line.starts_with('#') => heading = line.trim_start_matches('#').trim().into(),
            None => {}
        }
    }
    out
}

#[test]
fn blocks_stand_under_their_headings() {
    let text =
        "# A\n```python\n# not a heading\n```\n```sh\nfloe x\n```\n## B\n```sh\nfloe y\n```\n";
    assert_eq!(
        sh_blocks_in(text),
        [
            ("A".to_string(), "floe x\n".to_string()),
            ("B".to_string(), "floe y\n".to_string())
        ]
    );
    assert_eq!(examples_in(text), [vec!["floe", "x"], vec!["floe", "y"]]);
}

/// How a section that needs a server runs against the ones the test command started: the
/// docs' placeholder lines (credentials, `createdb`) dropped, its host names and paths
/// replaced, variables set, and (Scale-out, which starts from a table) a prelude.
#[derive(Default)]
struct ServerRun {
    drop: Vec<&'static str>,
    replace: Vec<(&'static str, String)>,
    env: Vec<(String, String)>,
    prelude: String,
}

/// `None`: not a server section. `Some(None)`: its server is skipped (`FLOE_NO_S3`, …).
fn server_run(heading: &str, dir: &Path) -> Option<Option<ServerRun>> {
    let s3 = || crate::s3::s3_env();
    let prefix = format!("readme-{}", uuid::Uuid::new_v4().simple());
    let sqlite = format!("sqlite:///{}", dir.join("catalog.db").display());
    let run = match heading {
        "PostgreSQL catalog" => crate::postgres::database().map(|db| ServerRun {
            drop: vec!["createdb "],
            replace: vec![
                ("postgresql://floe:secret@db.example:5432/lake", db),
                ("/mnt/shared/lake", dir.join("lake").display().to_string()),
            ],
            ..Default::default()
        }),
        "S3" => s3().map(|e| ServerRun {
            drop: vec!["export AWS_"],
            replace: vec![
                ("s3://warehouse/wh", format!("s3://{}/{prefix}", e.bucket)),
                ("sqlite:////var/lib/floe/catalog.db", sqlite.clone()),
            ],
            env: e.vars,
            ..Default::default()
        }),
        "REST catalog" => s3().and_then(|e| {
            let uri = std::env::var("FLOE_TEST_REST_URI").ok()?;
            let wh =
                std::env::var("FLOE_TEST_REST_WAREHOUSE").unwrap_or_else(|_| "s3://lake".into());
            // A namespace of its own on the shared server.
            let ns = prefix.replace('-', "_");
            Some(ServerRun {
                drop: vec!["export AWS_"],
                replace: vec![
                    (
                        "rest+http://127.0.0.1:8181",
                        uri.replacen("http://", "rest+http://", 1),
                    ),
                    ("s3://lake", wh),
                    ("db.events", format!("{ns}.events")),
                    ("tables db", format!("tables {ns}")),
                ],
                env: e.vars,
                ..Default::default()
            })
        }),
        "Scale-out" => s3().and_then(|e| {
            let db = crate::postgres::database()?;
            let mut env = e.vars;
            env.push(("I".into(), "0".into()));
            env.push(("N".into(), "1".into()));
            Some(ServerRun {
                drop: vec!["export AWS_", "export FLOE_CATALOG"],
                env: [
                    env,
                    vec![
                        ("FLOE_CATALOG".into(), db),
                        (
                            "FLOE_WAREHOUSE".into(),
                            format!("s3://{}/{prefix}", e.bucket),
                        ),
                    ],
                ]
                .concat(),
                prelude: "floe create db.events --schema 'id long, name string, ts timestamptz' \
                          --partition-by 'day(ts)'\n\
                          for i in 1 2 3 4 5; do floe append db.events in.parquet; done\n"
                    .into(),
                ..Default::default()
            })
        }),
        _ => return None,
    };
    Some(run)
}

/// `block` as `run` says: dropped statements (with their continuation lines) removed, text
/// replaced, the prelude first.
fn adapt(block: &str, run: &ServerRun) -> String {
    let mut out = run.prelude.clone();
    let mut dropping = false;
    for line in block.lines() {
        if !dropping && run.drop.iter().any(|p| line.starts_with(p)) {
            dropping = true;
        }
        if dropping {
            dropping = line.trim_end().ends_with('\\');
            continue;
        }
        let mut l = line.to_string();
        for (from, to) in &run.replace {
            l = l.replace(from, to);
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// The inputs the examples name (see the note under the CLI tour's block,
/// `docs/src/cli-tour.md`).
fn write_inputs(dir: &Path) {
    use arrow::array::*;
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let events = |ids: std::ops::Range<i64>, extra_op: bool| -> RecordBatch {
        let n = ids.clone().count();
        let names = ["alpha", "beta", "gamma"];
        let mut tags = ListBuilder::new(StringBuilder::new());
        for i in ids.clone() {
            match i % 4 {
                0 => tags.append_null(),
                1 => tags.append(true),
                _ => {
                    tags.values().append_value("a");
                    tags.values().append_value(format!("t{}", i % 7));
                    tags.append(true);
                }
            }
        }
        let mut fields = vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new("price", DataType::Decimal128(10, 2), true),
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
                true,
            ),
        ];
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(ids.clone())),
            Arc::new(StringArray::from_iter(
                ids.clone()
                    .map(|i| (i % 5 != 4).then(|| names[i as usize % 3])),
            )),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    ids.clone().map(|i| 1_719_792_000_000_000 + i * 60_000_000),
                )
                .with_timezone("UTC"),
            ),
            Arc::new(
                Decimal128Array::from_iter_values(ids.clone().map(|i| (i * 37) as i128 % 100_000))
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
            ),
            Arc::new(tags.finish()),
        ];
        if extra_op {
            fields.push(Field::new("op", DataType::Utf8, true));
            cols.push(Arc::new(StringArray::from_iter_values(
                ids.clone().map(|i| if i % 2 == 0 { "D" } else { "U" }),
            )));
        }
        assert_eq!(cols[0].len(), n);
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
    };
    write_parquet(&dir.join("part-1.parquet"), &[events(0..3000, false)]);
    write_parquet(&dir.join("snapshot.parquet"), &[events(0..2500, false)]);
    write_parquet(
        &dir.join("changes.parquet"),
        &[events(0..10, true), events(5000..5004, true)],
    );
    let csv = |ids: std::ops::Range<i64>, name: &str| {
        let mut s = String::from("id,name,ts,price,tags\n");
        for i in ids {
            s.push_str(&format!(
                "{i},{name},2024-07-{:02}T10:00:00Z,{}.{:02},\"[\"\"x\"\",\"\"{name}\"\"]\"\n",
                1 + i % 2,
                i % 100,
                i % 100
            ));
        }
        s
    };
    std::fs::write(dir.join("part-2.csv"), csv(3000..3100, "csv")).unwrap();
    std::fs::write(dir.join("updates.csv"), csv(2990..3010, "updated")).unwrap();
    let snap = |seed: i64| -> RecordBatch {
        let n = 200i64;
        RecordBatch::try_from_iter(vec![
            (
                "date",
                Arc::new(Date32Array::from_iter_values(
                    (0..n).map(|i| 20_785 + (i % 3) as i32),
                )) as ArrayRef,
            ),
            (
                "product_id",
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 50))) as _,
            ),
            (
                "store_id",
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 7))) as _,
            ),
            (
                "attribute_id",
                Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % 2))) as _,
            ),
            (
                "attr_value",
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("v{}", i + seed)),
                )) as _,
            ),
            (
                "update_id",
                Arc::new(Int64Array::from_iter_values(
                    (0..n).map(|i| seed * 1000 + i),
                )) as _,
            ),
        ])
        .unwrap()
    };
    for sub in ["snap", "landing/2026-11-30T06"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        write_parquet(&dir.join(sub).join("part-a.parquet"), &[snap(1)]);
        write_parquet(&dir.join(sub).join("part-b.parquet"), &[snap(2)]);
    }
    write_parquet(
        &dir.join("in.parquet"),
        &[RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(Int64Array::from_iter_values(0..500)) as ArrayRef,
            ),
            (
                "name",
                Arc::new(StringArray::from_iter_values(
                    (0..500).map(|i| format!("n{i}")),
                )) as _,
            ),
            (
                "ts",
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(
                        (0..500).map(|i| 1_719_792_000_000_000 + i * 600_000_000),
                    )
                    .with_timezone("UTC"),
                ) as _,
            ),
        ])
        .unwrap()],
    );
    std::fs::write(
        dir.join("snap.csv"),
        "id,ver,v\n1,1,a\n1,2,b\n2,1,c\n3,5,d\n3,4,e\n",
    )
    .unwrap();
}

#[test]
fn readme_examples_run_as_written() {
    let bin_dir = std::path::PathBuf::from(env!("CARGO_BIN_EXE_floe"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let jq = Command::new("jq").arg("--version").output();
    assert!(
        jq.is_ok_and(|o| o.status.success()),
        "the docs' examples use jq: install it (tools/test.sh does)"
    );
    let mut ran = 0;
    for (doc, heading, block) in sh_blocks() {
        if !block.lines().any(|l| l.trim_start().starts_with("floe ")) {
            continue;
        }
        let d = tempfile::tempdir().unwrap();
        write_inputs(d.path());
        let (script, env) = match server_run(&heading, d.path()) {
            None => (block.clone(), vec![]),
            Some(None) => {
                eprintln!("{doc}, section '{heading}': its server is skipped");
                continue;
            }
            Some(Some(run)) => (adapt(&block, &run), run.env),
        };
        let o = Command::new("bash")
            .arg("-euo")
            .arg("pipefail")
            .arg("-xc")
            .arg(&script)
            .current_dir(d.path())
            .env("PATH", &path)
            .env_remove("FLOE_CATALOG")
            .env_remove("FLOE_WAREHOUSE")
            .envs(env)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{doc}, section '{heading}': its examples failed\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        ran += 1;
    }
    // The README's quick start, the CLI tour and the staging → target walkthrough at least
    // (the server sections too when the test command started their servers).
    assert!(ran >= 3, "ran {ran} blocks of the README and docs/src");
}
