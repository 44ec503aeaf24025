//! Issue #21, a CLI a newcomer can trust: read-only commands create nothing and a missing
//! catalog says where floe looked; SQLite URIs in the help that work; ingest on unpartitioned
//! tables; no two tables in one location; property typos refused; nested columns in CSV;
//! messages in the options' own words.

use std::path::Path;

use crate::common::{floe_in, text};

/// Every path under `dir`, sorted (what a command left behind).
fn tree(dir: &Path) -> Vec<String> {
    crate::common::paths_under(dir)
        .iter()
        .map(|p| p.strip_prefix(dir).unwrap().display().to_string())
        .collect()
}

#[test]
fn read_only_commands_create_nothing_and_say_where_they_looked() {
    let cwd = tempfile::tempdir().unwrap();
    let fs_missing = cwd.path().join("nonexist/wh");
    let fs_uri = format!("file://{}", fs_missing.display());
    let runs: Vec<Vec<&str>> = vec![
        vec!["tables"],
        vec!["namespaces"],
        vec!["scan", "db.events"],
        vec!["describe", "db.events"],
        vec!["snapshots", "db.events"],
        vec!["files", "db.events"],
        vec!["delete", "db.events", "--where", "id = 1"],
        vec!["--warehouse", "elsewhere", "tables"],
        vec!["--catalog", "sqlite:///rel/catalog.db", "tables"],
        vec!["--catalog", &fs_uri, "tables"],
        vec!["--catalog", "file:hwh", "tables"],
    ];
    for args in &runs {
        let o = floe_in(cwd.path(), args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {}", text(&o));
        assert!(
            err.contains("no catalog at") || err.contains("no filesystem catalog at"),
            "{args:?}: the error names where floe looked: {}",
            text(&o)
        );
        assert!(
            tree(cwd.path()).is_empty(),
            "{args:?} left {:?}",
            tree(cwd.path())
        );
    }
    // The path floe looked at is the resolved, absolute one.
    let o = floe_in(cwd.path(), &["tables"]);
    let looked = cwd
        .path()
        .canonicalize()
        .unwrap()
        .join("warehouse/catalog.db");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&looked.display().to_string()),
        "{}",
        text(&o)
    );
}

#[test]
fn a_missing_table_names_the_catalog_and_warehouse() {
    let cwd = tempfile::tempdir().unwrap();
    let o = floe_in(cwd.path(), &["create", "db.t", "--schema", "id long"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = floe_in(cwd.path(), &["scan", "db.events"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        err.contains("sqlite catalog") && err.contains("catalog.db") && err.contains("warehouse"),
        "{}",
        text(&o)
    );
}

#[test]
fn sqlite_uris_in_help_and_hints_are_the_absolute_form() {
    let cwd = tempfile::tempdir().unwrap();
    let help = floe_in(cwd.path(), &["--help"]);
    let help_text = String::from_utf8_lossy(&help.stdout);
    assert!(
        help_text.contains("sqlite:////abs/path/catalog.db"),
        "{help_text}"
    );
    assert!(!help_text.contains("sqlite:///path"), "{help_text}");

    // A catalog made with the absolute form, then named with three slashes: the error says
    // the path was relative and what the absolute form is.
    let wh = cwd.path().join("wh");
    let wh_s = wh.to_str().unwrap();
    let abs_uri = format!("sqlite:///{wh_s}/catalog.db");
    let o = floe_in(
        cwd.path(),
        &[
            "--catalog",
            &abs_uri,
            "--warehouse",
            wh_s,
            "create",
            "db.t",
            "--schema",
            "id long",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let relative = format!("sqlite://{wh_s}/catalog.db");
    let o = floe_in(cwd.path(), &["--catalog", &relative, "tables"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(err.contains("four slashes"), "{}", text(&o));
    assert!(!cwd.path().join(wh_s.trim_start_matches('/')).exists());
}

/// The CLI tour's second ingest example (docs/src/cli-tour.md) on an unpartitioned staging
/// table, both strategies: the latest version per key stays, twice in a row (the second run
/// changes nothing).
#[test]
fn ingest_snapshot_works_on_unpartitioned_tables() {
    for strategy in ["change-aware", "rewrite"] {
        let cwd = tempfile::tempdir().unwrap();
        let dir = cwd.path();
        std::fs::write(
            dir.join("snap.csv"),
            "id,ver,v\n1,1,a\n2,1,b\n1,3,c\n3,2,d\n2,0,e\n",
        )
        .unwrap();
        let run = |args: &[&str]| {
            let o = floe_in(dir, args);
            assert!(o.status.success(), "{strategy} {args:?}: {}", text(&o));
            String::from_utf8_lossy(&o.stdout).to_string()
        };
        run(&[
            "create",
            "db.staging",
            "--schema",
            "id long, ver long, v string",
        ]);
        for _ in 0..2 {
            run(&[
                "ingest-snapshot",
                "db.staging",
                "snap.csv",
                "--key",
                "id",
                "--version",
                "ver",
                "--strategy",
                strategy,
                "--json",
            ]);
            let out = run(&["scan", "db.staging", "--format", "csv"]);
            let mut rows: Vec<&str> = out.lines().skip(1).collect();
            rows.sort();
            assert_eq!(rows, ["1,3,c", "2,1,b", "3,2,d"], "{strategy}: {out}");
        }
    }
}

/// A typo in a property name under Iceberg's namespaces is refused with the nearest name,
/// nothing is created; `--allow-unknown-properties` stores it.
#[test]
fn property_typos_are_refused() {
    let cwd = tempfile::tempdir().unwrap();
    let o = floe_in(
        cwd.path(),
        &[
            "create",
            "db.t",
            "--schema",
            "id long",
            "--property",
            "write.delete.mod=merge-on-read",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        err.contains("did you mean 'write.delete.mode'"),
        "{}",
        text(&o)
    );
    assert!(tree(cwd.path()).is_empty(), "left {:?}", tree(cwd.path()));
    let o = floe_in(
        cwd.path(),
        &[
            "create",
            "db.t",
            "--schema",
            "id long",
            "--property",
            "write.delete.mod=merge-on-read",
            "--allow-unknown-properties",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = floe_in(cwd.path(), &["describe", "db.t", "--json"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("write.delete.mod"),
        "{}",
        text(&o)
    );
}

/// Issue #21 item 10: messages a newcomer reads.
#[test]
fn messages_speak_the_users_language() {
    let cwd = tempfile::tempdir().unwrap();
    let dir = cwd.path();
    let run = |args: &[&str]| -> (bool, String, String) {
        let o = floe_in(dir, args);
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    assert!(run(&["create", "db.t", "--schema", "id long, name string"]).0);
    // An empty table shows its columns.
    let (ok, out, _) = run(&["scan", "db.t"]);
    assert!(ok && out.contains("| id | name |"), "{out}");
    let (ok, out, _) = run(&["scan", "db.t", "--format", "csv"]);
    assert!(ok && out.trim() == "id,name", "{out}");
    // An unknown column lists the table's columns (--where and --columns).
    for args in [
        &["scan", "db.t", "--where", "nope = 1"][..],
        &["scan", "db.t", "--columns", "nope"][..],
    ] {
        let (ok, _, err) = run(args);
        assert!(!ok && err.contains("id, name"), "{args:?}: {err}");
    }
    // --as-of before the first snapshot: a date, not milliseconds.
    std::fs::write(dir.join("rows.csv"), "id,name\n1,a\n").unwrap();
    assert!(run(&["append", "db.t", "rows.csv"]).0);
    let (ok, _, err) = run(&["scan", "db.t", "--as-of", "2001-01-01T00:00:00Z"]);
    assert!(!ok && err.contains("2001-01-01T00:00:00.000Z"), "{err}");
    assert!(err.contains("oldest snapshot is from"), "{err}");
    // Creating an existing namespace says so.
    assert!(run(&["namespaces", "--create", "db2"])
        .1
        .contains("created namespace db2"));
    let (_, out, _) = run(&["namespaces", "--create", "db2"]);
    assert!(out.contains("already exists"), "{out}");
    // Ingest names its strategy and mode as the options spell them.
    assert!(run(&["create", "db.s", "--schema", "id long, ver long"]).0);
    std::fs::write(dir.join("snap.csv"), "id,ver\n1,1\n").unwrap();
    let (ok, out, err) = run(&[
        "ingest-snapshot",
        "db.s",
        "snap.csv",
        "--key",
        "id",
        "--version",
        "ver",
    ]);
    assert!(
        ok && out.contains("(change-aware, copy-on-write)"),
        "{out}{err}"
    );
    // drop --purge mentions kept files only when there are some.
    let (ok, out, _) = run(&["drop", "db.s", "--purge"]);
    assert!(ok && !out.contains("still references"), "{out}");
}

/// Issue #21 item 4: a table created where another table's files still live gets a fresh
/// location (and says so); an explicit --location that holds files is refused.
#[test]
fn create_never_shares_another_tables_location() {
    let cwd = tempfile::tempdir().unwrap();
    let dir = cwd.path();
    let run = |args: &[&str]| {
        let o = floe_in(dir, args);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            text(&o),
        )
    };
    std::fs::write(dir.join("rows.csv"), "id\n1\n2\n").unwrap();
    assert_eq!(run(&["create", "db.a", "--schema", "id long"]).0, Some(0));
    assert_eq!(run(&["append", "db.a", "rows.csv"]).0, Some(0));
    // db.b now owns the files under <warehouse>/db/a.
    assert_eq!(run(&["rename", "db.a", "db.b"]).0, Some(0));
    let (code, out, all) = run(&["create", "db.a", "--schema", "id long"]);
    assert_eq!(code, Some(0), "{all}");
    assert!(out.contains("holds another table's files"), "{all}");
    let (_, described, _) = run(&["describe", "db.a", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&described).unwrap();
    let loc = v["location"].as_str().unwrap_or_default().to_string();
    assert!(loc.contains("/db/a-"), "{described}");
    // Orphan removal on either table keeps the other's rows.
    assert_eq!(
        run(&[
            "remove-orphan-files",
            "db.a",
            "--older-than",
            "2999-01-01T00:00:00Z"
        ])
        .0,
        Some(0)
    );
    let (_, count, all) = run(&["scan", "db.b", "--count"]);
    assert_eq!(count.trim(), "2", "{all}");
    // An explicit location with files in it is refused.
    let wh = dir.canonicalize().unwrap().join("warehouse/db/a");
    let (code, _, all) = run(&[
        "create",
        "db.c",
        "--schema",
        "id long",
        "--location",
        wh.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{all}");
    assert!(all.contains("already holds files"), "{all}");
}

/// Issue #21 item 6: nested columns in CSV are JSON text both ways: `scan --format csv`
/// writes them, `append` and `merge --source` read them; bad text names the row and column.
#[test]
fn nested_columns_travel_through_csv_as_json() {
    let cwd = tempfile::tempdir().unwrap();
    let dir = cwd.path();
    let run = |args: &[&str]| {
        let o = floe_in(dir, args);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            text(&o),
        )
    };
    let schema = "id long, tags list<string>, s struct<a: int, b: string>, m map<string, int>";
    assert_eq!(run(&["create", "db.t", "--schema", schema]).0, Some(0));
    std::fs::write(
        dir.join("in.csv"),
        "id,tags,s,m\n\
         1,\"[\"\"a\"\",\"\"b,c\"\"]\",\"{\"\"a\"\":1,\"\"b\"\":\"\"x\"\"}\",\"{\"\"k\"\":2}\"\n\
         2,[],,\n\
         3,\"[null]\",\"{\"\"a\"\":null,\"\"b\"\":null}\",{}\n",
    )
    .unwrap();
    let (code, _, all) = run(&["append", "db.t", "in.csv"]);
    assert_eq!(code, Some(0), "{all}");
    let (code, _, all) = run(&["scan", "db.t", "--format", "csv", "-o", "out.csv"]);
    assert_eq!(code, Some(0), "{all}");
    let out = std::fs::read_to_string(dir.join("out.csv")).unwrap();
    let mut lines: Vec<&str> = out.lines().collect();
    lines[1..].sort();
    assert_eq!(lines[0], "id,tags,s,m");
    assert_eq!(
        lines[1], r#"1,"[""a"",""b,c""]","{""a"":1,""b"":""x""}","{""k"":2}""#,
        "{out}"
    );
    assert_eq!(lines[2], "2,[],,", "{out}");
    assert_eq!(
        lines[3], r#"3,[null],"{""a"":null,""b"":null}",{}"#,
        "{out}"
    );
    // What floe wrote reads back the same (append), and as a merge source.
    assert_eq!(run(&["create", "db.u", "--schema", schema]).0, Some(0));
    assert_eq!(run(&["append", "db.u", "out.csv"]).0, Some(0));
    let (code, _, all) = run(&["merge", "db.u", "--source", "out.csv", "--on", "id"]);
    assert_eq!(code, Some(0), "{all}");
    let (_, again, _) = run(&["scan", "db.u", "--format", "csv"]);
    let mut a: Vec<&str> = again.lines().collect();
    a[1..].sort();
    assert_eq!(a, lines, "{again}");
    // Text that is not JSON of the column's type: an error naming the row and the column.
    std::fs::write(dir.join("bad.csv"), "id,tags\n1,[]\n2,[1\n").unwrap();
    let (code, _, all) = run(&["append", "db.t", "bad.csv"]);
    assert_eq!(code, Some(2), "{all}");
    assert!(
        all.contains("row 2") && all.contains("column 'tags'"),
        "{all}"
    );
}

/// Issue #21 item 7 (part): create, append, rename, drop and register take `--json` (one
/// document, snake_case keys), and `scan --json` keeps NULL columns.
#[test]
fn every_changing_command_has_json() {
    let cwd = tempfile::tempdir().unwrap();
    let dir = cwd.path();
    let json = |args: &[&str]| -> serde_json::Value {
        let o = floe_in(dir, args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&o)))
    };
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let v = json(&[
        "create",
        "db.t",
        "--schema",
        "id long, name string",
        "--json",
    ]);
    assert_eq!(
        keys(&v),
        [
            "format_version",
            "location",
            "metadata_location",
            "relocated",
            "table"
        ]
    );
    std::fs::write(dir.join("rows.csv"), "id,name\n1,\n2,b\n").unwrap();
    let v = json(&["append", "db.t", "rows.csv", "--json"]);
    assert_eq!(
        keys(&v),
        [
            "added_bytes_count",
            "added_data_files_count",
            "added_records_count",
            "elapsed_ms",
            "snapshot_id",
            "table"
        ]
    );
    assert_eq!(v["added_records_count"], 2);
    // NDJSON rows keep their NULLs.
    let o = floe_in(dir, &["scan", "db.t", "--json", "--where", "id = 1"]);
    let row: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        row,
        serde_json::json!({"id": 1, "name": null}),
        "{}",
        text(&o)
    );
    let md = json(&["describe", "db.t", "--json"])["metadata_location"].clone();
    let v = json(&["rename", "db.t", "db.u", "--json"]);
    assert_eq!(v, serde_json::json!({"from": "db.t", "to": "db.u"}));
    let v = json(&["register", "db.r", md.as_str().unwrap(), "--json"]);
    assert_eq!(keys(&v), ["metadata_location", "table"]);
    let v = json(&["drop", "db.r", "--json"]);
    assert_eq!(
        keys(&v),
        [
            "deleted_files_count",
            "kept_shared_files_count",
            "purged",
            "table"
        ]
    );
}

#[tokio::test]
async fn progress_counts_what_scans_and_writes_do() {
    use floe::progress::Progress;
    let (_d, cat) = crate::common::sqlite_catalog();
    let schema = floe::spec::parse_schema("id long, v string").unwrap();
    let mut c = floe::TableCreation::new(schema);
    c.properties
        .insert("write.delete.mode".into(), "merge-on-read".into());
    let mut t = cat
        .create_table(&floe::table::parse_ident("db.p").unwrap(), c)
        .await
        .unwrap();
    for i in 0..3 {
        let b = crate::common::id_batch(i * 100..i * 100 + 100);
        t = floe::txn::append(&cat, &t, vec![Ok(b)])
            .await
            .unwrap()
            .table;
    }
    // A scan counts every planned file, its bytes and its rows.
    let p = Progress::new();
    let rows = p
        .scope(floe::scan::Scan::new(&t).to_batches())
        .await
        .unwrap();
    let plan = floe::scan::Scan::new(&t).plan().await.unwrap();
    let bytes: u64 = plan.files.iter().map(|f| f.file.file_size_in_bytes()).sum();
    let s = p.state();
    assert_eq!((s.files_total, s.files_done), (3, 3), "{s:?}");
    assert_eq!((s.bytes_total, s.bytes_done), (bytes, bytes), "{s:?}");
    assert_eq!(s.rows_read, crate::common::count(&rows) as u64);
    assert_eq!((s.rows_written, s.bytes_written), (0, 0));
    // A merge-on-read DELETE reads the matching file and writes a delete file.
    let p = Progress::new();
    p.scope(floe::dml::execute(
        &cat,
        "DELETE FROM db.p WHERE id < 50",
        None,
    ))
    .await
    .unwrap();
    let s = p.state();
    assert!(s.files_done >= 1 && s.files_done == s.files_total, "{s:?}");
    assert!(s.bytes_written > 0, "{s:?}");
    // An append counts the rows it writes and the bytes of its files.
    let p = Progress::new();
    let r = p
        .scope(floe::txn::append(
            &cat,
            &cat.load_table(&floe::table::parse_ident("db.p").unwrap())
                .await
                .unwrap(),
            vec![Ok(crate::common::id_batch(0..1000))],
        ))
        .await
        .unwrap();
    let s = p.state();
    assert_eq!(s.rows_written, 1000);
    assert_eq!(s.bytes_written, r.added_bytes, "{s:?}");
}

/// `floe args` in a pseudo-terminal (`script`): what the terminal showed.
fn on_a_terminal(dir: &Path, args: &str) -> String {
    let cmd = format!(
        "{} --warehouse {} {args}",
        env!("CARGO_BIN_EXE_floe"),
        dir.join("wh").display()
    );
    let o = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("TERM", "xterm")
        .output()
        .expect("script (util-linux) runs a command in a pseudo-terminal");
    assert!(o.status.success(), "{cmd}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[test]
fn long_work_shows_a_bar_on_a_terminal_only() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let wh = dir.join("wh");
    let run = |args: &[&str]| {
        let o = crate::common::floe(&wh, args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        o
    };
    run(&["create", "db.t", "--schema", "id long, v string"]);
    let mut csv = String::from("id,v\n");
    for i in 0..1_000_000 {
        csv.push_str(&format!("{i},value-{i}\n"));
    }
    std::fs::write(dir.join("a.csv"), &csv).unwrap();
    let a = dir.join("a.csv").display().to_string();
    // Not a terminal: no bar, only the summary.
    let o = run(&["append", "db.t", &a]);
    assert!(o.stderr.is_empty(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("appended 1000000 rows"));
    // A terminal: the bar (files, rows, bytes, ETA), cleared, then the summary.
    let shown = on_a_terminal(dir, &format!("append db.t {a}"));
    assert!(shown.contains("appending to db.t"), "{shown}");
    assert!(shown.contains("ETA"), "{shown}");
    assert!(shown.contains("/1 files"), "{shown}");
    assert!(shown.contains("appended 1000000 rows"), "{shown}");
    let shown = on_a_terminal(dir, "delete db.t --where 'id % 3 = 0'");
    assert!(shown.contains("reading and rewriting"), "{shown}");
    assert!(shown.contains("ETA"), "{shown}");
    // --json on a terminal: the document only.
    let shown = on_a_terminal(dir, "delete db.t --where 'id % 3 = 1' --json");
    assert!(
        !shown.contains("ETA") && !shown.contains("reading"),
        "{shown}"
    );
    let v: serde_json::Value = serde_json::from_str(shown.trim()).unwrap();
    assert!(v["deleted_records_count"].as_u64().unwrap() > 0);
}

/// Issue 46, "getting data in as it comes": a schema inferred from CSV and JSON lines (shown
/// with `--dry-run`, which creates nothing), JSON lines appended, a name floe cannot place
/// refused saying what it takes.
#[test]
fn csv_and_json_lines_come_in_as_they_are() {
    use crate::common::{floe, ok};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let file = |name: &str, text: &str| crate::common::write_input(d.path(), name, text);
    let csv = file(
        "t.csv",
        "\u{feff}id,name,score,day,ok\n1,ann,1.5,2024-01-02,true\n2,bob,,2024-01-03,false\n",
    );
    let ddl = ok(&wh, &["create", "db.c", "--schema-from", &csv, "--dry-run"]);
    assert!(
        ddl.starts_with("id long, name string, score double, day date, ok boolean\n"),
        "{ddl}"
    );
    assert!(ddl.contains("dry run: nothing created"), "{ddl}");
    assert!(
        !floe(&wh, &["describe", "db.c"]).status.success(),
        "the dry run created nothing"
    );
    ok(
        &wh,
        &[
            "create",
            "db.c",
            "--schema-from",
            &csv,
            "--primary-key",
            "id",
        ],
    );
    ok(&wh, &["append", "db.c", &csv]);
    let jsonl = file(
        "more.jsonl",
        "{\"id\": 3, \"name\": \"cy\", \"score\": 2.5, \"day\": \"2024-01-04\"}\n\n{\"id\": 4, \"ok\": true}\n",
    );
    ok(&wh, &["append", "db.c", &jsonl]);
    let rows = ok(
        &wh,
        &["scan", "db.c", "--format", "csv", "--where", "id >= 3"],
    );
    let mut rows: Vec<&str> = rows.lines().skip(1).collect();
    rows.sort();
    assert_eq!(rows, vec!["3,cy,2.5,2024-01-04,", "4,,,,true"]);
    let json_ddl = ok(
        &wh,
        &[
            "create",
            "db.j",
            "--schema-from",
            &jsonl,
            "--dry-run",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&json_ddl).unwrap();
    let schema = v["schema"].as_str().unwrap();
    for col in ["id long", "name string", "score double", "ok boolean"] {
        assert!(schema.contains(col), "{schema}");
    }
    let txt = file("x.txt", "id\n1\n");
    let o = floe(&wh, &["append", "db.c", &txt]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("x.txt") && err.contains(".jsonl") && err.contains("rename"),
        "{err}"
    );
    assert_eq!(ok(&wh, &["scan", "db.c", "--count"]).trim(), "4");
}

/// Issue 46: a CDC file with an operation column (`I`/`U`/`D`) upserts and deletes through
/// `--op-column`; an unknown operation, or a delete on a table with no delete column, is
/// refused naming the row, and nothing is committed.
#[test]
fn cdc_files_with_an_operation_column_upsert() {
    use crate::common::{floe, ok};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let file = |name: &str, text: &str| crate::common::write_input(d.path(), name, text);
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
        ],
    );
    let first = file("c1.csv", "op,id,v,ver\nI,1,a,1\nI,2,b,1\nI,3,c,1\n");
    ok(&wh, &["upsert", "db.k", &first, "--op-column", "op"]);
    let second = file("c2.csv", "op,id,v,ver\nU,1,a2,2\nD,2,,2\nd,3,,0\n");
    let out = ok(
        &wh,
        &["upsert", "db.k", &second, "--op-column", "op", "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let counts = (
        v["updated_records_count"].as_u64(),
        v["deleted_records_count"].as_u64(),
        v["stale_records_count"].as_u64(),
    );
    assert_eq!(counts, (Some(1), Some(1), Some(1)), "{out}");
    let rows = ok(
        &wh,
        &["scan", "db.k", "--format", "csv", "--columns", "id,v,ver"],
    );
    let mut rows: Vec<&str> = rows.lines().skip(1).collect();
    rows.sort();
    // Key 3's delete (version 0) is older than its row (version 1): ignored, as the rule says.
    assert_eq!(rows, vec!["1,a2,2", "3,c,1"]);
    let snapshots = || ok(&wh, &["snapshots", "db.k", "--json"]);
    let before = snapshots();
    let unknown = file("c3.csv", "op,id,v,ver\nU,1,x,3\nX,5,y,3\n");
    let o = floe(&wh, &["upsert", "db.k", &unknown, "--op-column", "op"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("row 2") && err.contains("'X'"),
        "{err}"
    );
    let stored = file("c4.csv", "id,v,ver\n1,x,3\n");
    let o = floe(&wh, &["upsert", "db.k", &stored, "--op-column", "v"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("is a column of table"));
    ok(
        &wh,
        &[
            "create",
            "db.nodel",
            "--schema",
            "id long not null, v string",
            "--primary-key",
            "id",
        ],
    );
    let del = file("c5.csv", "op,id,v\nI,1,a\nD,1,\n");
    let o = floe(&wh, &["upsert", "db.nodel", &del, "--op-column", "op"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("row 2") && err.contains("floe.merge.delete-column"),
        "{err}"
    );
    assert_eq!(snapshots(), before, "nothing was committed");
}

/// Issue 46: CSV options under DuckDB's `read_csv` names — a `;`-separated file without a
/// header, `NA` for NULL, `'` quotes and day-first timestamps — append as DuckDB would read them;
/// a timestamp that does not match the format names its column and line.
#[test]
fn csv_options_take_duckdbs_names() {
    use crate::common::{floe, ok};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.o",
            "--schema",
            "id long, name string, n int, ts timestamp",
        ],
    );
    let p = d.path().join("o.txt.csv");
    std::fs::write(
        &p,
        "1;'a;b';NA;05/01/2024 10:30:00\n2;NA;7;31/12/2023 23:59:59\n3;'it''s';2;NA\n",
    )
    .unwrap();
    let f = p.to_str().unwrap();
    let opts = [
        "--delim",
        ";",
        "--header",
        "false",
        "--nullstr",
        "NA",
        "--quote",
        "'",
        "--timestampformat",
        "%d/%m/%Y %H:%M:%S",
    ];
    let mut args = vec!["append", "db.o", f];
    args.extend(opts);
    ok(&wh, &args);
    let out = ok(&wh, &["scan", "db.o", "--format", "csv"]);
    let mut rows: Vec<&str> = out.lines().skip(1).collect();
    rows.sort();
    assert_eq!(
        rows,
        vec![
            "1,a;b,,2024-01-05T10:30:00",
            "2,,7,2023-12-31T23:59:59",
            "3,it's,2,"
        ],
        "{out}"
    );
    std::fs::write(&p, "4;x;1;2024-01-05\n").unwrap();
    let o = floe(&wh, &args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("column 'ts'") && err.contains("line 1") && err.contains("--timestampformat"),
        "{err}"
    );
    assert_eq!(ok(&wh, &["scan", "db.o", "--count"]).trim(), "3");
}
