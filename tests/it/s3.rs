//! Tables on a real S3 server (SeaweedFS, started by tools/test.sh) with a SQLite, a
//! PostgreSQL or SeaweedFS's Iceberg REST catalog: append/scan and merge-on-read
//! DELETE/UPDATE/MERGE, maintenance, and the CLI;
//! floe's rows are checked against a model and read row for row by DuckDB (httpfs) and
//! pyiceberg. Spark is skipped: reading S3 needs the hadoop-aws jars, which are not
//! available offline.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use bytes::Bytes;
use floe::catalog::{Catalog, TableCreation};
use floe::maintenance::{expire_snapshots, remove_orphan_files, rewrite_data_files, ExpireOptions};
use floe::scan::SnapshotSelector;
use floe::spec::{parse_partition_spec, parse_schema, FormatVersion};
use floe::storage::{S3Options, Storage};
use floe::table::parse_ident;
use floe::txn::append;
use floe::Table;

use crate::common::*;

/// The test server's settings (from tools/servers/seaweedfs.sh via tools/test.sh).
pub(crate) struct S3Env {
    pub options: S3Options,
    pub bucket: String,
    /// The AWS_* variables a `floe` process needs.
    pub vars: Vec<(String, String)>,
}

pub(crate) fn s3_env() -> Option<S3Env> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let Some(endpoint) = get("FLOE_TEST_S3_ENDPOINT") else {
        if get("FLOE_NO_S3").as_deref() == Some("1") {
            eprintln!("FLOE_NO_S3=1: S3 tests skipped");
            return None;
        }
        panic!(
            "no S3 server: run `bash tools/test.sh` (it starts SeaweedFS), or \
             `eval \"$(bash tools/servers/seaweedfs.sh start)\"` first; FLOE_NO_S3=1 skips S3 tests"
        );
    };
    let need =
        |k: &str| get(k).unwrap_or_else(|| panic!("{k} is not set (seaweedfs.sh prints it)"));
    let (key, secret) = (
        need("FLOE_TEST_S3_ACCESS_KEY_ID"),
        need("FLOE_TEST_S3_SECRET_ACCESS_KEY"),
    );
    let region = get("FLOE_TEST_S3_REGION").unwrap_or_else(|| "us-east-1".into());
    let options = S3Options::static_credentials(&endpoint, &region, &key, &secret);
    let vars = vec![
        ("AWS_ENDPOINT_URL".to_string(), endpoint),
        ("AWS_REGION".to_string(), region),
        ("AWS_ACCESS_KEY_ID".to_string(), key),
        ("AWS_SECRET_ACCESS_KEY".to_string(), secret),
    ];
    Some(S3Env {
        options,
        bucket: need("FLOE_TEST_S3_BUCKET"),
        vars,
    })
}

/// Which catalog keeps the pointers of tables on S3.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum CatalogKind {
    /// A SQLite file in a temp dir.
    Sqlite,
    /// A database of its own on the test PostgreSQL.
    Postgres,
    /// SeaweedFS's Iceberg REST catalog (its table bucket is the warehouse).
    Rest,
}

/// A catalog of `kind` whose tables live on S3, with a namespace of their own.
pub(crate) struct S3Catalog {
    /// Holds the SQLite file; the catalog lives as long as this value.
    _dir: tempfile::TempDir,
    pub cat: Catalog,
    /// The warehouse URI (`s3://…`).
    pub wh: String,
    /// A fresh namespace for this test.
    pub ns: String,
}

/// The REST catalog's URI with the S3 key as its OAuth2 client credentials.
pub(crate) fn rest_uri(env: &S3Env) -> Option<(String, String)> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let uri = get("FLOE_TEST_REST_URI").unwrap_or_else(|| {
        panic!("FLOE_TEST_REST_URI is not set (tools/servers/seaweedfs.sh prints it)")
    });
    let wh = get("FLOE_TEST_REST_WAREHOUSE").unwrap_or_else(|| "s3://lake".into());
    let (key, secret) = (
        env.options.access_key_id.clone().unwrap(),
        env.options.secret_access_key.clone().unwrap(),
    );
    let with_auth = uri.replacen("http://", &format!("rest+http://{key}:{secret}@"), 1);
    Some((with_auth, wh))
}

/// A fresh catalog of `kind` on the test S3 server; `None` when its server is skipped.
pub(crate) fn s3_catalog_of(env: &S3Env, kind: CatalogKind) -> Option<S3Catalog> {
    let dir = tempfile::tempdir().unwrap();
    let id = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let (uri, wh) = match kind {
        CatalogKind::Sqlite => (
            format!("sqlite:///{}", dir.path().join("catalog.db").display()),
            format!("s3://{}/it-{id}", env.bucket),
        ),
        CatalogKind::Postgres => (
            crate::postgres::database()?,
            format!("s3://{}/it-{id}", env.bucket),
        ),
        CatalogKind::Rest => rest_uri(env)?,
    };
    let cat = Catalog::open_with_storage(
        Some(&uri),
        Some(&wh),
        None,
        Storage::with_s3(env.options.clone()),
    )
    .unwrap();
    Some(S3Catalog {
        _dir: dir,
        cat,
        wh,
        ns: format!("it_{id}"),
    })
}

fn check(name: &str, t: &Table, snapshot: Option<i64>, expected: &Path) -> Check {
    Check {
        name: name.to_string(),
        metadata: t.metadata_location().to_string(),
        snapshot_id: snapshot,
        expected: expected.to_string_lossy().to_string(),
        // Spark cannot read S3 offline (no hadoop-aws jars).
        engines: Some(vec!["duckdb".into(), "pyiceberg".into()]),
        refuse: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_and_scans_on_s3_read_by_the_peers() {
    append_scan_on_s3(CatalogKind::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_and_scans_on_s3_with_postgres_read_by_the_peers() {
    append_scan_on_s3(CatalogKind::Postgres).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_and_scans_on_s3_with_rest_read_by_the_peers() {
    append_scan_on_s3(CatalogKind::Rest).await
}

async fn append_scan_on_s3(kind: CatalogKind) {
    let Some(env) = s3_env() else { return };
    let Some(s3c) = s3_catalog_of(&env, kind) else {
        return;
    };
    let (cat, wh, ns) = (&s3c.cat, &s3c.wh, &s3c.ns);
    let schema = parse_schema(WIDE_DDL).unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.partition_spec = parse_partition_spec("bucket(4, id), cat", &schema).unwrap();
    let t = cat
        .create_table(&parse_ident(&format!("{ns}.wide")).unwrap(), c)
        .await
        .unwrap();
    assert!(
        t.metadata_location()
            .starts_with(&format!("{wh}/{ns}/wide/metadata/")),
        "{kind:?}: {}",
        t.metadata_location()
    );
    let r1 = append(cat, &t, vec![Ok(wide_batch(0, 700))]).await.unwrap();
    let r2 = append(
        cat,
        &r1.table,
        vec![Ok(wide_batch(700, 400)), Ok(wide_batch(1100, 250))],
    )
    .await
    .unwrap();
    let t = r2.table;
    let all = scan_rows(&t, SnapshotSelector::Current).await;
    assert_eq!(count(&all), 1350);
    assert_eq!(sum_i64(&all, "id"), (0..1350).sum::<i64>());
    let old = scan_rows(&t, SnapshotSelector::Id(r1.snapshot_id.unwrap())).await;
    assert_eq!(count(&old), 700);
    // Data files are on S3, not on local disk.
    let files = cat
        .storage()
        .list(&format!("{wh}/{ns}/wide/data"))
        .await
        .unwrap();
    assert!(!files.is_empty() && files.iter().all(|f| f.location.starts_with("s3://")));
    // A reload through the catalog and a catalog-less open of the metadata file agree.
    let loaded = cat.load_table(t.ident()).await.unwrap();
    assert_eq!(loaded.metadata_location(), t.metadata_location());
    let st = Table::open_static(cat.storage(), t.metadata_location())
        .await
        .unwrap();
    assert_eq!(
        count(&scan_rows(&st, SnapshotSelector::Current).await),
        1350
    );

    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let mut checks = Vec::new();
    for (i, s) in [r1.snapshot_id, r2.snapshot_id].into_iter().enumerate() {
        let p = work.path().join(format!("wide-{i}.parquet"));
        floe_expected(&t, s, &p).await;
        checks.push(check(&format!("s3-{kind:?}-wide@{i}"), &t, s, &p));
    }
    peer_check(&py, work.path(), &checks);
}

/// Runs `sql` on the model (DuckDB over a plain copy of the rows) and returns the new model.
fn model_step(py: &Path, model: &Path, next: &Path, sql: &str, source: Option<&Path>) {
    let mut cmd = Command::new(py);
    cmd.arg(repo().join("tools/peers/duckdb_model.py"))
        .arg(model)
        .arg(next);
    if let Some(s) = source {
        cmd.arg("--source").arg(s);
    }
    let out = cmd.arg(sql).output().unwrap();
    assert!(
        out.status.success(),
        "model failed for {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_level_changes_and_maintenance_on_s3() {
    row_level_on_s3(CatalogKind::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_level_changes_and_maintenance_on_s3_with_postgres() {
    row_level_on_s3(CatalogKind::Postgres).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_level_changes_and_maintenance_on_s3_with_rest() {
    row_level_on_s3(CatalogKind::Rest).await
}

/// Merge-on-read DELETE, UPDATE and MERGE (v2 position deletes: SeaweedFS's table buckets
/// refuse `.puffin` keys, so v3 deletion vectors cannot be stored behind its REST catalog),
/// then compaction, expiry and orphan removal, each state checked against a DuckDB model
/// and read by the peers.
async fn row_level_on_s3(kind: CatalogKind) {
    let Some(env) = s3_env() else { return };
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let Some(s3c) = s3_catalog_of(&env, kind) else {
        return;
    };
    let (cat, wh, ns) = (&s3c.cat, &s3c.wh, &s3c.ns);
    let tname = format!("{ns}.mor");
    let schema = parse_schema(WIDE_DDL).unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.partition_spec = parse_partition_spec("cat", &schema).unwrap();
    c.format_version = FormatVersion::V2;
    c.properties = [
        ("write.delete.mode", "merge-on-read"),
        ("write.update.mode", "merge-on-read"),
        ("write.merge.mode", "merge-on-read"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect::<HashMap<_, _>>();
    let t = cat
        .create_table(&parse_ident(&tname).unwrap(), c)
        .await
        .unwrap();
    let batches = vec![wide_batch(0, 700), wide_batch(700, 650)];
    let r = append(
        cat,
        &t,
        vec![Ok(batches[0].clone()), Ok(batches[1].clone())],
    )
    .await
    .unwrap();
    let mut table = r.table;
    let mut model = w.join("model-0.parquet");
    write_parquet(&model, &batches);
    let source = w.join("source.parquet");
    write_parquet(&source, &[wide_batch(1200, 300)]);
    // MERGE reads its source through the catalog's storage: from the bucket, unless the
    // catalog is the REST one, whose storage holds only the credentials it vends per table.
    let remote_source = match kind {
        CatalogKind::Rest => source.display().to_string(),
        _ => {
            let at = format!("{wh}/{ns}-merge-sources/source.parquet");
            cat.storage()
                .put(&at, std::fs::read(&source).unwrap().into())
                .await
                .unwrap();
            at
        }
    };
    let statements = [
        "DELETE FROM {t} WHERE id % 7 = 3",
        "UPDATE {t} SET a = a * 2 + 1, name = name || '-u' WHERE cat = 'beta' AND id < 400",
        "MERGE INTO {t} AS t USING {s} AS s ON t.id = s.id \
         WHEN MATCHED AND s.k < 100 THEN DELETE \
         WHEN MATCHED THEN UPDATE SET a = s.a + 1000, name = 'merged' \
         WHEN NOT MATCHED THEN INSERT *",
    ];
    let mut checks = Vec::new();
    for (i, st) in statements.iter().enumerate() {
        let floe_sql = st
            .replace("{t}", &tname)
            .replace("{s}", &format!("'{remote_source}'"));
        let r = floe::dml::execute(cat, &floe_sql, None)
            .await
            .unwrap_or_else(|e| panic!("`{floe_sql}`: {e:?}"));
        table = r.table;
        let next = w.join(format!("model-{}.parquet", i + 1));
        model_step(
            &py,
            &model,
            &next,
            &st.replace("{t}", "t").replace("{s}", "s"),
            Some(&source),
        );
        model = next;
        let actual = w.join(format!("floe-{}.parquet", i + 1));
        floe_expected(&table, None, &actual).await;
        assert_same_rows(
            &py,
            &model,
            &actual,
            &format!("after `{st}`: floe differs from the model"),
        );
        let sid = table.current_snapshot().map(|s| s.snapshot_id());
        checks.push(check(
            &format!("s3-{kind:?}-mor@{}", i + 1),
            &table,
            sid,
            &model,
        ));
    }
    let summary = &table
        .current_snapshot()
        .unwrap()
        .summary()
        .additional_properties;
    assert_ne!(
        summary.get("total-position-deletes").map(String::as_str),
        Some("0")
    );

    // Compaction applies the deletes; the rows stay.
    let rw = rewrite_data_files(
        cat,
        &table,
        None,
        &HashMap::from([("rewrite-all".to_string(), "true".to_string())]),
        None,
    )
    .await
    .unwrap();
    table = rw.table.unwrap();
    let actual = w.join("floe-rewritten.parquet");
    floe_expected(&table, None, &actual).await;
    assert_same_rows(&py, &model, &actual, "after rewrite_data_files");
    checks.push(check(
        &format!("s3-{kind:?}-mor@rewritten"),
        &table,
        None,
        &model,
    ));
    // Every snapshot so far, before expire_snapshots deletes the older ones' files.
    peer_check(&py, w, &checks);

    // Expire every older snapshot: their files go, the current rows stay.
    let ex = expire_snapshots(
        cat,
        &table,
        &ExpireOptions::default()
            .with_older_than_ms(chrono::Utc::now().timestamp_millis() + 1000)
            .with_retain_last(1),
    )
    .await
    .unwrap();
    assert!(ex.expired_snapshot_ids.len() >= 4, "{ex:?}");
    assert!(
        ex.deleted_data_files_count + ex.deleted_delete_files_count > 0,
        "{ex:?}"
    );
    table = cat.load_table(table.ident()).await.unwrap();

    // An orphan (listed through the S3 listing) is found and removed; nothing else is.
    let orphan = format!("{wh}/{ns}/mor/data/orphan-{}.parquet", uuid::Uuid::new_v4());
    cat.storage()
        .put(&orphan, Bytes::from_static(b"not referenced"))
        .await
        .unwrap();
    let future = chrono::Utc::now().timestamp_millis() + 60_000;
    let or = remove_orphan_files(cat, &table, Some(future), false)
        .await
        .unwrap();
    assert_eq!(or.orphan_file_locations, vec![orphan.clone()]);
    assert!(!cat.storage().exists(&orphan).await.unwrap());
    let actual = w.join("floe-final.parquet");
    floe_expected(&table, None, &actual).await;
    assert_same_rows(&py, &model, &actual, "after expire + remove_orphan_files");
    peer_check(
        &py,
        w,
        &[check(
            &format!("s3-{kind:?}-mor@maintained"),
            &table,
            None,
            &model,
        )],
    );
}

/// The CLI on an S3 warehouse, configured from the AWS_* environment only.
#[test]
fn cli_on_an_s3_warehouse() {
    let Some(env) = s3_env() else { return };
    let dir = tempfile::tempdir().unwrap();
    let wh = format!("s3://{}/cli-{}", env.bucket, uuid::Uuid::new_v4());
    let catalog = format!("sqlite:///{}", dir.path().join("catalog.db").display());
    let (csv, pq) = crate::common::inputs(dir.path());
    let run = |args: &[&str]| {
        let o = crate::common::floe_cmd()
            .env_remove("AWS_PROFILE")
            .envs(env.vars.iter().cloned())
            .args(["--warehouse", &wh, "--catalog", &catalog])
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "floe {args:?}:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    run(&[
        "create",
        "db.ev",
        "--schema",
        "id long, name string, ts timestamptz",
    ]);
    run(&["append", "db.ev", &csv]);
    assert_eq!(run(&["scan", "db.ev", "--count"]), "50");
    run(&["delete", "db.ev", "--where", "id < 10"]);
    run(&[
        "update",
        "db.ev",
        "--set",
        "name = 'x'",
        "--where",
        "id = 20",
    ]);
    assert_eq!(run(&["scan", "db.ev", "--count"]), "40");
    assert_eq!(
        run(&["scan", "db.ev", "--count", "--where", "name = 'x'"]),
        "1"
    );
    // A MERGE source in the bucket is read through the storage (`merge` and `sql`).
    let source = format!("{wh}/sources/in.parquet");
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(
            floe::storage::Storage::with_s3(env.options.clone())
                .put(&source, std::fs::read(&pq).unwrap().into()),
        )
        .unwrap();
    run(&["merge", "db.ev", "--source", &source, "--on", "id"]);
    assert_eq!(run(&["scan", "db.ev", "--count"]), "70");
    run(&[
        "sql",
        &format!(
            "MERGE INTO db.ev AS t USING '{source}' AS s ON t.id = s.id \
             WHEN MATCHED THEN DELETE"
        ),
    ]);
    assert_eq!(run(&["scan", "db.ev", "--count"]), "40");
    // An S3 warehouse without a catalog URI is refused with a clear message.
    let o = crate::common::floe_cmd()
        .envs(env.vars.iter().cloned())
        .args(["--warehouse", &wh, "tables", "db"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("sqlite:////abs/path/catalog.db") && err.contains("--catalog URI"),
        "{err}"
    );
}

/// One storage used from two tokio runtimes in turn (tests, or a library user's short-lived
/// runtimes). A smoke test: the pooled-connection failure this guards against ("runtime
/// dropped the dispatch task", seen when the whole suite shared one store across test
/// runtimes) does not reproduce reliably in isolation.
#[test]
fn storage_outlives_a_runtime() {
    let Some(env) = s3_env() else { return };
    let st = Storage::with_s3(env.options.clone());
    let loc = format!("s3://{}/rt-{}/x", env.bucket, uuid::Uuid::new_v4());
    for i in 0..2u8 {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            st.put(&loc, Bytes::from(vec![i])).await.unwrap();
            assert_eq!(&st.get(&loc).await.unwrap()[..], &[i]);
        });
        drop(rt);
    }
}

/// Remote files are pruned as local ones: by row-group statistics, by bloom filters (fetched
/// by ranged reads) and by the page index; every lookup finds what it must.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bloom_filters_and_the_page_index_prune_remote_files() {
    use arrow::array::{Int64Array, RecordBatch};
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let Some(env) = s3_env() else { return };
    let Some(s3c) = s3_catalog_of(&env, CatalogKind::Sqlite) else {
        return;
    };
    let (cat, ns) = (&s3c.cat, &s3c.ns);
    let schema = parse_schema("seq long not null, k long").unwrap();
    let mut c = TableCreation::new(schema);
    c.properties.extend([
        (
            "write.parquet.row-group-size-bytes".to_string(),
            "16384".to_string(),
        ),
        (
            "write.parquet.page-row-limit".to_string(),
            "100".to_string(),
        ),
        (
            "write.parquet.bloom-filter-enabled.column.k".to_string(),
            "true".to_string(),
        ),
    ]);
    let t = cat
        .create_table(&parse_ident(&format!("{ns}.pruned")).unwrap(), c)
        .await
        .unwrap();
    // seq ascending (pages and row groups prune it); k = even numbers, shuffled (statistics
    // prune nothing, bloom filters rule out odd k).
    let mut ks: Vec<i64> = (0..20_000).map(|i| i * 2).collect();
    ks.shuffle(&mut rand::rngs::StdRng::seed_from_u64(7));
    let batches: Vec<_> = (0..20)
        .map(|b| {
            let r = b * 1000..(b + 1) * 1000;
            Ok(RecordBatch::try_from_iter([
                (
                    "seq",
                    std::sync::Arc::new(Int64Array::from_iter_values(r.clone())) as _,
                ),
                (
                    "k",
                    std::sync::Arc::new(Int64Array::from(
                        ks[r.start as usize..r.end as usize].to_vec(),
                    )) as _,
                ),
            ])
            .unwrap())
        })
        .collect();
    let t = append(cat, &t, batches).await.unwrap().table;
    let run = |filter: String| {
        let t = t.clone();
        async move { filtered_first_longs(&t, &filter).await }
    };
    let (got, s) = run("seq = 12345".into()).await;
    assert_eq!(got, [12345]);
    assert!(s.row_groups > 1, "{s:?}");
    assert_eq!(s.row_groups_pruned, s.row_groups - 1, "{s:?}");
    assert_eq!(s.pages - s.pages_pruned, 1, "{s:?}");
    // Odd keys are in no row group: statistics rule out some row groups, the bloom filters
    // (fetched by ranged reads) the rest.
    let mut by_bloom = 0;
    for k in [777, 1001, 3, 12_345] {
        let (got, s) = run(format!("k = {k}")).await;
        assert!(got.is_empty());
        assert!(s.row_groups > 1, "{s:?}");
        assert_eq!(s.row_groups_pruned, s.row_groups, "k = {k}: {s:?}");
        by_bloom += s.row_groups_pruned_by_bloom;
    }
    assert!(by_bloom >= 3 * 4, "{by_bloom}");
    for seq in [0usize, 4321, 19_999] {
        let (got, _) = run(format!("k = {}", ks[seq])).await;
        assert_eq!(got, [seq as i64], "k = {}", ks[seq]);
        let (got, _) = run(format!("k IN ({}, 1, 3)", ks[seq])).await;
        assert_eq!(got, [seq as i64]);
    }
}
