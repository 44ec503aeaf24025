//! Every maintenance job on the tables other engines wrote (spec-fixtures/: Spark, pyiceberg,
//! DuckDB; position deletes, equality deletes, deletion vectors, partition evolution, v1):
//! afterwards floe and every peer return exactly the rows of before, and the Spark-written
//! tables keep taking Spark writes.
//!
//! The fixtures record absolute locations under /tmp/floe-spec-fixtures; the test copies them
//! back there (writing needs the real paths), so it holds a lock directory while it runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use floe::catalog::Catalog;
use floe::maintenance::{
    expire_snapshots, remove_orphan_files, rewrite_data_files, rewrite_manifests,
    rewrite_position_delete_files, ExpireOptions,
};
use floe::scan::Scan;
use floe::spec::DataContentType;
use floe::table::parse_ident;
use floe::Table;

use crate::common::*;

const ROOT: &str = "/tmp/floe-spec-fixtures";

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        let dest = to.join(e.file_name());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

/// Holds `/tmp/floe-spec-fixtures.lock` (another run using the same paths waits).
struct Lock(PathBuf);

impl Lock {
    fn take() -> Self {
        let p = PathBuf::from(format!("{ROOT}.lock"));
        for _ in 0..600 {
            if std::fs::create_dir(&p).is_ok() {
                return Lock(p);
            }
            // A lock older than 30 minutes was left by a killed run.
            let stale = std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs() > 1800);
            if stale {
                let _ = std::fs::remove_dir(&p);
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        panic!("{} is held by another run", p.display());
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Runs every job on `t` (compaction with dangling-delete removal, delete-file compaction,
/// manifest rewrite, expiry down to one snapshot, orphan removal); returns the table after.
async fn run_every_job(cat: &Catalog, t: &Table, label: &str) -> Table {
    let opts: HashMap<String, String> = [
        ("rewrite-all".to_string(), "true".to_string()),
        ("remove-dangling-deletes".to_string(), "true".to_string()),
    ]
    .into();
    let reload = || async { cat.load_table(t.ident()).await.unwrap() };
    rewrite_data_files(cat, t, None, &opts, None)
        .await
        .unwrap_or_else(|e| panic!("{label}: rewrite_data_files: {e}"));
    let all: HashMap<String, String> = [("rewrite-all".to_string(), "true".to_string())].into();
    rewrite_position_delete_files(cat, &reload().await, &all)
        .await
        .unwrap_or_else(|e| panic!("{label}: rewrite_position_delete_files: {e}"));
    rewrite_manifests(cat, &reload().await, None)
        .await
        .unwrap_or_else(|e| panic!("{label}: rewrite_manifests: {e}"));
    let future = chrono::Utc::now().timestamp_millis() + 60_000;
    expire_snapshots(
        cat,
        &reload().await,
        &ExpireOptions::default()
            .with_older_than_ms(future)
            .with_retain_last(1),
    )
    .await
    .unwrap_or_else(|e| panic!("{label}: expire_snapshots: {e}"));
    remove_orphan_files(cat, &reload().await, Some(future), false)
        .await
        .unwrap_or_else(|e| panic!("{label}: remove_orphan_files: {e}"));
    reload().await
}

/// Copies the fixtures of `engines` under ROOT, runs every job on each through `cat`
/// (`register` says how a fixture enters it), checks floe's rows, and returns the peer checks.
async fn maintain(
    py: &Path,
    work: &Path,
    fixtures: &[serde_json::Value],
    cat: &Catalog,
    register: bool,
) -> (Vec<Check>, Vec<(String, Table, usize)>) {
    let spark = std::env::var("FLOE_PEERS_NO_SPARK").as_deref() != Ok("1");
    let repo_fixtures = repo().join("spec-fixtures");
    for f in fixtures {
        let (engine, table) = (f["engine"].as_str().unwrap(), f["table"].as_str().unwrap());
        copy_dir(
            &repo_fixtures.join(f["table_dir"].as_str().unwrap()),
            &PathBuf::from(ROOT).join(engine).join(table),
        );
    }
    let mut checks = Vec::new();
    let mut done = Vec::new();
    for f in fixtures {
        let (engine, table) = (f["engine"].as_str().unwrap(), f["table"].as_str().unwrap());
        let label = format!("{engine}/{table}");
        let ident = parse_ident(&format!("{engine}.{table}")).unwrap();
        let t = if register {
            let meta = PathBuf::from(ROOT).join(f["metadata"].as_str().unwrap());
            cat.register_table(&ident, meta.to_str().unwrap())
                .await
                .unwrap_or_else(|e| panic!("{label}: register {}: {e}", meta.display()))
        } else {
            cat.load_table(&ident)
                .await
                .unwrap_or_else(|e| panic!("{label}: load: {e}"))
        };
        let before = work.join(format!("{engine}_{table}_before.parquet"));
        let n = floe_expected(&t, None, &before).await;
        let after_t = run_every_job(cat, &t, &label).await;
        let after = work.join(format!("{engine}_{table}_after.parquet"));
        assert_eq!(
            floe_expected(&after_t, None, &after).await,
            n,
            "{label}: row count"
        );
        assert_same_rows(py, &before, &after, &format!("{label}: rows changed"));
        let refs = floe::spec::refs(after_t.metadata()).len();
        assert!(
            after_t.metadata().snapshots().count() <= refs.max(1),
            "{label}: expired down to the snapshots refs keep"
        );
        // The peers read the result (minus those that cannot read the table at all).
        let plan = Scan::new(&after_t).plan().await.unwrap();
        let eq_deletes = plan.files.iter().any(|p| {
            p.deletes
                .iter()
                .any(|d| d.file.content_type() == DataContentType::EqualityDeletes)
        });
        let mut engines = vec!["duckdb".to_string(), "pyiceberg".to_string()];
        if spark {
            engines.push("spark".into());
        }
        let unreadable: Vec<String> = f
            .get("unreadable_by")
            .and_then(|u| u.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|e| e.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        engines.retain(|e| !(unreadable.contains(e) || eq_deletes && e == "pyiceberg"));
        if n > 0 {
            checks.push(Check {
                name: format!("fixture-maintained-{engine}-{table}"),
                metadata: after_t.metadata_location().to_string(),
                snapshot_id: None,
                expected: before.to_string_lossy().to_string(),
                engines: Some(engines),
                refuse: None,
            });
        }
        done.push((table.to_string(), after_t, n));
    }
    (checks, done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_on_every_peer_fixture() {
    let Some(py) = peers_python() else { return };
    let spark = std::env::var("FLOE_PEERS_NO_SPARK").as_deref() != Ok("1");
    let _lock = Lock::take();
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(repo().join("spec-fixtures/index.json")).unwrap())
            .unwrap();
    let all = index.as_array().unwrap();
    let of = |spark: bool| -> Vec<serde_json::Value> {
        all.iter()
            .filter(|f| (f["engine"] == "spark") == spark)
            .cloned()
            .collect()
    };
    let work = tempfile::tempdir().unwrap();

    // Spark's tables: a filesystem (Hadoop) catalog over ROOT, so Spark keeps writing them.
    let _ = std::fs::remove_dir_all(ROOT);
    let fs_cat = Catalog::open(Some(&format!("file://{ROOT}")), None, None).unwrap();
    let (checks, done) = maintain(&py, work.path(), &of(true), &fs_cat, false).await;
    assert!(done.len() >= 10, "{} Spark fixtures", done.len());
    peer_check(&py, work.path(), &checks);
    if spark {
        for (table, t, n) in done.iter().filter(|(_, _, n)| *n > 0).take(4) {
            spark_write(
                &py,
                Path::new(ROOT),
                &format!("spark.{table}"),
                "",
                &["INSERT INTO {t} SELECT * FROM {t} LIMIT 1"],
            );
            let t = fs_cat.load_table(t.ident()).await.unwrap();
            assert_eq!(
                Scan::new(&t).count().await.unwrap(),
                *n as u64 + 1,
                "spark/{table}: Spark's insert after maintenance"
            );
        }
    }

    // pyiceberg's and DuckDB's tables, registered in a SQLite catalog.
    let _ = std::fs::remove_dir_all(ROOT);
    let sql_cat = Catalog::open(None, Some(work.path().to_str().unwrap()), None).unwrap();
    let others = of(false);
    let (checks, done) = maintain(&py, work.path(), &others, &sql_cat, true).await;
    assert!(
        done.iter().any(|(t, _, _)| t == "v3_deletes"),
        "DuckDB's deletes"
    );
    peer_check(&py, work.path(), &checks);
    if spark {
        // Spark reaches these tables through a Hadoop catalog over ROOT: the maintained
        // metadata becomes the directory's v1.metadata.json (the table stays where it is).
        for ((table, t, n), f) in done.iter().zip(&others) {
            let unreadable = f
                .get("unreadable_by")
                .and_then(|u| u.as_array())
                .is_some_and(|a| a.iter().any(|e| e == "spark"));
            if *n == 0 || unreadable {
                continue;
            }
            let engine = f["engine"].as_str().unwrap();
            let dir = PathBuf::from(ROOT)
                .join(engine)
                .join(table)
                .join("metadata");
            std::fs::copy(
                t.metadata_location().trim_start_matches("file://"),
                dir.join("v1.metadata.json"),
            )
            .unwrap();
            std::fs::write(dir.join("version-hint.text"), "1").unwrap();
            spark_write(
                &py,
                Path::new(ROOT),
                &format!("{engine}.{table}"),
                "",
                &["INSERT INTO {t} SELECT * FROM {t} LIMIT 1"],
            );
            let after = Table::open_static(
                &floe::storage::Storage::new(),
                dir.parent().unwrap().to_str().unwrap(),
            )
            .await
            .unwrap();
            assert_eq!(
                Scan::new(&after).count().await.unwrap(),
                *n as u64 + 1,
                "{engine}/{table}: Spark's insert after maintenance"
            );
        }
    }
    let _ = std::fs::remove_dir_all(ROOT);
}
