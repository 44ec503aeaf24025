//! CLONE: a metadata-only copy that shares data and delete files; both tables evolve
//! independently, and garbage collection on either never deletes what the other reads.

use std::collections::HashMap;

use floe::catalog::{Catalog, TableCreation};
use floe::maintenance::{expire_snapshots, remove_orphan_files, rewrite_data_files, ExpireOptions};
use floe::scan::{Scan, SnapshotSelector};
use floe::spec::{parse_partition_spec, parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::txn::{append, clone_table};
use floe::{ErrorKind, Table};

use crate::common::*;

/// A merge-on-read table with four appends and deletes (position deletes in v2, DVs in v3).
async fn mor_table(cat: &Catalog, name: &str, fv: FormatVersion) -> Table {
    let schema = parse_schema("id long, v string").unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.format_version = fv;
    c.partition_spec = parse_partition_spec("bucket(2, id)", &schema).unwrap();
    c.properties = [("write.delete.mode".to_string(), "merge-on-read".to_string())].into();
    let mut t = cat
        .create_table(&parse_ident(name).unwrap(), c)
        .await
        .unwrap();
    for i in 0..4 {
        t = append(cat, &t, vec![Ok(id_batch(i * 100..i * 100 + 100))])
            .await
            .unwrap()
            .table;
    }
    floe::dml::execute(cat, &format!("DELETE FROM {name} WHERE id % 7 = 3"), None)
        .await
        .unwrap()
        .table
}

async fn reload(cat: &Catalog, name: &str) -> Table {
    cat.load_table(&parse_ident(name).unwrap()).await.unwrap()
}

async fn rows(t: &Table) -> usize {
    count(&scan_rows(t, SnapshotSelector::Current).await)
}

/// Compacts everything, expires every older snapshot and removes orphans (cutoff in the
/// future, so every unreferenced file counts) — the harshest GC a table can get.
async fn collect_garbage(cat: &Catalog, name: &str) {
    let t = reload(cat, name).await;
    let opts: HashMap<String, String> = [("rewrite-all".to_string(), "true".to_string())].into();
    rewrite_data_files(cat, &t, None, &opts, None)
        .await
        .unwrap();
    let future = chrono::Utc::now().timestamp_millis() + 60_000;
    let t = reload(cat, name).await;
    let o = ExpireOptions::default()
        .with_older_than_ms(future)
        .with_retain_last(1);
    let r = expire_snapshots(cat, &t, &o).await.unwrap();
    assert!(!r.expired_snapshot_ids.is_empty(), "{name}: {r:?}");
    let t = reload(cat, name).await;
    remove_orphan_files(cat, &t, Some(future), false)
        .await
        .unwrap();
}

fn local(p: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(p.trim_start_matches("file://").trim_start_matches("file:"))
}

/// Clone shares files and copies only metadata; afterwards each table evolves alone; GC on
/// the source (compact, expire, orphans, drop --purge) leaves the clone intact and the reverse;
/// the peers read both as any table; files nobody references any more end up deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_shares_files_and_survives_gc_of_either_side() {
    let py = peers_python();
    let work = tempfile::tempdir().unwrap();
    let (_dir, cat) = sqlite_catalog();
    let mut checks = Vec::new();
    let mut leftovers = Vec::new();
    for (v, fv) in [("v2", FormatVersion::V2), ("v3", FormatVersion::V3)] {
        // Source GC'd under the clone.
        let (src_name, dst_name) = (format!("cl.src_{v}"), format!("cl.dst_{v}"));
        let src = mor_table(&cat, &src_name, fv).await;
        let before = rows(&src).await;
        let r = clone_table(
            &cat,
            &src,
            &SnapshotSelector::Current,
            &parse_ident(&dst_name).unwrap(),
            false,
        )
        .await
        .unwrap();
        assert!(!r.replaced && r.copied_manifests > 0, "{r:?}");
        let dst = reload(&cat, &dst_name).await;
        assert_eq!(rows(&dst).await, before);
        // Nothing copied but metadata: every data and delete file is the source's.
        let src_loc = src.metadata().location().to_string();
        let plan = Scan::new(&dst).plan().await.unwrap();
        assert!(
            plan.files.iter().any(|f| !f.deletes.is_empty()),
            "{v}: deletes shared"
        );
        for f in &plan.files {
            assert!(
                f.file.file_path().starts_with(&src_loc),
                "{}",
                f.file.file_path()
            );
            for d in &f.deletes {
                assert!(
                    d.file.file_path().starts_with(&src_loc),
                    "{}",
                    d.file.file_path()
                );
            }
        }
        let dst_list = dst.current_snapshot().unwrap().manifest_list().to_string();
        assert!(
            dst_list.starts_with(dst.metadata().location()),
            "{dst_list}"
        );
        for mf in dst
            .manifest_list(dst.current_snapshot().unwrap())
            .await
            .unwrap()
        {
            assert!(mf.manifest_path.starts_with(dst.metadata().location()));
        }
        if fv == FormatVersion::V3 {
            assert_eq!(dst.metadata().next_row_id(), src.metadata().next_row_id());
        }
        // Independent from here on.
        floe::dml::execute(&cat, &format!("DELETE FROM {dst_name} WHERE id < 50"), None)
            .await
            .unwrap();
        floe::dml::execute(
            &cat,
            &format!("DELETE FROM {src_name} WHERE id >= 350"),
            None,
        )
        .await
        .unwrap();
        let dst_rows = rows(&reload(&cat, &dst_name).await).await;
        assert!(dst_rows < before);
        assert!(rows(&reload(&cat, &src_name).await).await < before);
        assert_eq!(
            rows(&reload(&cat, &dst_name).await).await,
            dst_rows,
            "the source's delete does not reach the clone"
        );
        let expected = work.path().join(format!("dst_{v}.parquet"));
        floe_expected(&reload(&cat, &dst_name).await, None, &expected).await;
        collect_garbage(&cat, &src_name).await;
        let dropped = floe::maintenance::drop_table(&cat, &parse_ident(&src_name).unwrap(), true)
            .await
            .unwrap();
        assert!(
            dropped.kept_shared_files > 0 && dropped.deleted_files > 0,
            "{dropped:?}"
        );
        let dst = reload(&cat, &dst_name).await;
        assert_eq!(
            rows(&dst).await,
            dst_rows,
            "{v}: the clone lost rows to the source's GC"
        );
        let got = work.path().join(format!("dst_{v}_after.parquet"));
        floe_expected(&dst, None, &got).await;
        if let Some(py) = &py {
            assert_same_rows(py, &expected, &got, "clone after the source's GC");
        }
        checks.push(Check {
            name: format!("clone-after-source-gc-{v}"),
            metadata: dst.metadata_location().to_string(),
            snapshot_id: None,
            expected: expected.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        });
        leftovers.push((dst_name.clone(), src_loc.clone()));

        // The reverse: the clone is GC'd and dropped under the source.
        let (src_name, dst_name) = (format!("cl.src2_{v}"), format!("cl.dst2_{v}"));
        let src = mor_table(&cat, &src_name, fv).await;
        clone_table(
            &cat,
            &src,
            &SnapshotSelector::Current,
            &parse_ident(&dst_name).unwrap(),
            false,
        )
        .await
        .unwrap();
        let expected = work.path().join(format!("src2_{v}.parquet"));
        let n = floe_expected(&src, None, &expected).await;
        floe::dml::execute(
            &cat,
            &format!("DELETE FROM {dst_name} WHERE id % 2 = 0"),
            None,
        )
        .await
        .unwrap();
        collect_garbage(&cat, &dst_name).await;
        floe::maintenance::drop_table(&cat, &parse_ident(&dst_name).unwrap(), true)
            .await
            .unwrap();
        let src = reload(&cat, &src_name).await;
        assert_eq!(
            rows(&src).await,
            n,
            "{v}: the source lost rows to the clone's GC"
        );
        checks.push(Check {
            name: format!("source-after-clone-gc-{v}"),
            metadata: src.metadata_location().to_string(),
            snapshot_id: None,
            expected: expected.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        });
    }
    if let Some(py) = &py {
        peer_check(py, work.path(), &checks);
    }
    // Now each clone is the only reader of its dropped source's files: its own GC and drop
    // delete them, so nothing leaks.
    for (dst_name, src_loc) in leftovers {
        collect_garbage(&cat, &dst_name).await;
        floe::maintenance::drop_table(&cat, &parse_ident(&dst_name).unwrap(), true)
            .await
            .unwrap();
        assert_eq!(
            files_under(&local(&src_loc))
                .iter()
                .filter(|p| p
                    .extension()
                    .is_some_and(|x| x == "parquet" || x == "puffin"))
                .count(),
            0,
            "{dst_name}: files neither table references are deleted"
        );
    }
}

/// `--replace` publishes a new source state onto an existing clone in one swap (history kept,
/// manifests copied before are reused); cloning onto an existing table without it, or a
/// diverged target, is refused with nothing committed; an operation that started before a
/// replace does not commit on top of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_replace_publishes_atomically() {
    let (_dir, cat) = sqlite_catalog();
    let src = mor_table(&cat, "pub.staging", FormatVersion::V3).await;
    let target = parse_ident("pub.target").unwrap();
    clone_table(&cat, &src, &SnapshotSelector::Current, &target, false)
        .await
        .unwrap();
    let first = reload(&cat, "pub.target").await;
    // Without --replace: refused, nothing changes.
    let e = clone_table(&cat, &src, &SnapshotSelector::Current, &target, false)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert!(e.to_string().contains("clone with replace"), "{e}");
    assert_eq!(
        reload(&cat, "pub.target").await.metadata_location(),
        first.metadata_location()
    );
    // A new staging state is published.
    let src = floe::dml::execute(&cat, "DELETE FROM pub.staging WHERE id < 10", None)
        .await
        .unwrap()
        .table;
    let r = clone_table(&cat, &src, &SnapshotSelector::Current, &target, true)
        .await
        .unwrap();
    assert!(r.replaced && r.reused_manifests > 0, "{r:?}");
    let t = reload(&cat, "pub.target").await;
    assert_eq!(rows(&t).await, rows(&src).await);
    assert_eq!(
        t.metadata().snapshots().count(),
        2,
        "the target keeps its history"
    );
    assert_eq!(
        count(
            &scan_rows(
                &t,
                SnapshotSelector::Id(first.current_snapshot().unwrap().snapshot_id())
            )
            .await
        ),
        rows(&first).await,
        "time travel to the earlier publish still works"
    );
    // A DELETE planned on the old target state must not commit over the replacement.
    let stale = first.clone();
    let e = floe::dml::delete(
        &cat,
        &stale,
        Some(&floe::expr::parse_expr("id = 11").unwrap()),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    // Cloning an older snapshot by id works too.
    let old_id = src
        .metadata()
        .snapshots()
        .map(|s| s.snapshot_id())
        .min()
        .unwrap();
    clone_table(
        &cat,
        &src,
        &SnapshotSelector::Id(old_id),
        &parse_ident("pub.old").unwrap(),
        false,
    )
    .await
    .unwrap();
    // A target that diverged (different schema under the same id) is refused.
    let other = cat
        .create_table(
            &parse_ident("pub.other").unwrap(),
            TableCreation::new(parse_schema("x string").unwrap())
                .with_format_version(FormatVersion::V3),
        )
        .await
        .unwrap();
    let other = append(
        &cat,
        &other,
        vec![Ok(arrow_array::RecordBatch::try_from_iter([(
            "x",
            std::sync::Arc::new(arrow_array::StringArray::from(vec!["a"])) as arrow_array::ArrayRef,
        )])
        .unwrap())],
    )
    .await
    .unwrap()
    .table;
    let e = clone_table(&cat, &src, &SnapshotSelector::Current, other.ident(), true)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("diverged"), "{e}");
    assert_eq!(
        reload(&cat, "pub.other").await.metadata_location(),
        other.metadata_location()
    );
}
