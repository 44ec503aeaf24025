//! `expire_snapshots` and `remove_orphan_files`: never a file another table still references.

use super::*;

/// expire_snapshots drops old snapshots and exactly the files only they reached — never a
/// file another table (here a registered copy sharing the files) still references;
/// remove_orphan_files deletes unreferenced files only, and refuses overlapping tables.
#[test]
fn expire_snapshots_and_remove_orphan_files() {
    use crate::common::{floe, ok};
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let (csv, pq) = crate::common::inputs(d.path());
    let create = |name: &str, extra: &[&str]| {
        let mut a = vec![
            "create",
            name,
            "--schema",
            "id long, name string, ts timestamptz",
        ];
        a.extend(extra);
        ok(&wh, &a);
    };
    create("db.e", &[]);
    ok(&wh, &["append", "db.e", &csv]);
    ok(&wh, &["append", "db.e", &pq]);
    let first_files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.e", "--json"])).unwrap();
    // Copy-on-write update: the CSV's data file is rewritten; only old snapshots reach it.
    ok(
        &wh,
        &[
            "update",
            "db.e",
            "--set",
            "name = 'x'",
            "--where",
            "id < 10",
        ],
    );
    ok(&wh, &["delete", "db.e", "--where", "id = 60"]);
    let old_file = first_files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            f["file_path"]
                .as_str()
                .unwrap()
                .trim_start_matches("file://")
                .to_string()
        })
        .find(|p| {
            let now: serde_json::Value =
                serde_json::from_str(&ok(&wh, &["files", "db.e", "--json"])).unwrap();
            !now.as_array().unwrap().iter().any(|f| {
                f["file_path"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches("file://")
                    == p
            })
        })
        .expect("a data file the update replaced");
    assert!(std::path::Path::new(&old_file).exists());
    let count = |name: &str| -> String { ok(&wh, &["scan", name, "--count"]).trim().to_string() };
    assert_eq!(count("db.e"), "79");
    let future = (now_ms() + 60_000).to_string();
    // Dry run: nothing changes.
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "expire-snapshots",
            "db.e",
            "--older-than",
            &future,
            "--retain-last",
            "1",
            "--dry-run",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(v["expired_snapshot_ids"].as_array().unwrap().len(), 3);
    assert!(std::path::Path::new(&old_file).exists());
    // A second table registered on the same metadata shares every file.
    let desc: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["describe", "db.e", "--json"])).unwrap();
    let snaps: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["snapshots", "db.e", "--json"])).unwrap();
    let first_snapshot = snaps[0]["snapshot_id"].as_i64().unwrap();
    ok(
        &wh,
        &[
            "register",
            "db.shared",
            desc["metadata_location"].as_str().unwrap(),
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "expire-snapshots",
            "db.e",
            "--older-than",
            &future,
            "--retain-last",
            "1",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(v["expired_snapshot_ids"].as_array().unwrap().len(), 3);
    assert_eq!(
        v["deleted_data_files_count"], 0,
        "db.shared still references them: {v}"
    );
    assert!(std::path::Path::new(&old_file).exists());
    assert_eq!(count("db.e"), "79");
    assert_eq!(count("db.shared"), "79");
    let o = floe(
        &wh,
        &[
            "scan",
            "db.e",
            "--count",
            "--snapshot",
            &first_snapshot.to_string(),
        ],
    );
    assert!(!o.status.success(), "an expired snapshot cannot be read");
    // Overlapping locations: remove_orphan_files refuses rather than guess.
    let o = floe(
        &wh,
        &["remove-orphan-files", "db.e", "--older-than", &future],
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("overlaps"));
    // Without the shared table the replaced file goes when its last snapshot does.
    ok(&wh, &["drop", "db.shared"]);
    create("db.f", &[]);
    ok(&wh, &["append", "db.f", &csv]);
    let f_files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.f", "--json"])).unwrap();
    let f_old = f_files[0]["file_path"]
        .as_str()
        .unwrap()
        .trim_start_matches("file://")
        .to_string();
    ok(&wh, &["update", "db.f", "--set", "name = 'y'"]);
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "expire-snapshots",
            "db.f",
            "--older-than",
            &future,
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(v["deleted_data_files_count"], 1, "{v}");
    assert_eq!(v["deleted_manifest_lists_count"], 1, "{v}");
    assert!(!std::path::Path::new(&f_old).exists());
    assert_eq!(count("db.f"), "50");
    // gc.enabled=false: snapshots go, files stay.
    create("db.g", &["--property", "gc.enabled=false"]);
    ok(&wh, &["append", "db.g", &csv]);
    let g_files: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.g", "--json"])).unwrap();
    let g_old = g_files[0]["file_path"]
        .as_str()
        .unwrap()
        .trim_start_matches("file://")
        .to_string();
    ok(&wh, &["update", "db.g", "--set", "name = 'z'"]);
    ok(&wh, &["expire-snapshots", "db.g", "--older-than", &future]);
    assert!(std::path::Path::new(&g_old).exists());
    let snaps: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["snapshots", "db.g", "--json"])).unwrap();
    assert_eq!(snaps.as_array().unwrap().len(), 1);
    // Orphans: a stray file and a failed write's leftover are found; referenced files and
    // Spark-style .crc sidecars of them are not.
    let table_dir = wh.join("db/f");
    let stray = table_dir.join("data/stray.parquet");
    std::fs::write(&stray, b"junk").unwrap();
    let live: serde_json::Value =
        serde_json::from_str(&ok(&wh, &["files", "db.f", "--json"])).unwrap();
    let live_path = std::path::PathBuf::from(
        live[0]["file_path"]
            .as_str()
            .unwrap()
            .trim_start_matches("file://"),
    );
    let crc = live_path.with_file_name(format!(
        ".{}.crc",
        live_path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&crc, b"crc").unwrap();
    let before = files_under(&table_dir).len();
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "remove-orphan-files",
            "db.f",
            "--older-than",
            &future,
            "--dry-run",
            "--json",
        ],
    ))
    .unwrap();
    let found: Vec<String> = v["orphan_file_locations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    assert!(
        found.iter().any(|p| p.ends_with("stray.parquet")),
        "{found:?}"
    );
    assert!(!found.iter().any(|p| p.ends_with(".crc")), "{found:?}");
    assert_eq!(
        files_under(&table_dir).len(),
        before,
        "dry run deletes nothing"
    );
    ok(
        &wh,
        &["remove-orphan-files", "db.f", "--older-than", &future],
    );
    assert!(!stray.exists());
    assert!(crc.exists() && live_path.exists());
    assert_eq!(count("db.f"), "50");
    // The default cutoff (3 days) protects files being written right now.
    std::fs::write(&stray, b"junk").unwrap();
    ok(&wh, &["remove-orphan-files", "db.f"]);
    assert!(stray.exists());
}

/// A writer killed mid-upload leaves object_store's `<name>#<n>` staging file, which listings
/// skip; remove_orphan_files still finds and deletes it (once older than the cutoff).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_orphan_files_deletes_half_written_uploads() {
    let (_dir, cat) = sqlite_catalog();
    let c = TableCreation::new(parse_schema("id long, v string").unwrap());
    let t = cat
        .create_table(&parse_ident("o.t").unwrap(), c)
        .await
        .unwrap();
    let t = append(&cat, &t, vec![Ok(id_batch(0..10))])
        .await
        .unwrap()
        .table;
    let dir = std::path::PathBuf::from(t.metadata().location().trim_start_matches("file://"));
    let partial = dir.join("data/00000-killed.parquet#1");
    std::fs::create_dir_all(partial.parent().unwrap()).unwrap();
    std::fs::write(&partial, b"PAR1 half").unwrap();
    let future = chrono::Utc::now().timestamp_millis() + 60_000;
    let dry = floe::maintenance::remove_orphan_files(&cat, &t, Some(future), true)
        .await
        .unwrap();
    assert!(
        dry.orphan_file_locations
            .iter()
            .any(|p| p.ends_with("00000-killed.parquet#1")),
        "{dry:?}"
    );
    assert!(partial.exists(), "a dry run deletes nothing");
    floe::maintenance::remove_orphan_files(&cat, &t, Some(future), false)
        .await
        .unwrap();
    assert!(!partial.exists());
    assert_eq!(count(&scan_rows(&t, SnapshotSelector::Current).await), 10);
}
