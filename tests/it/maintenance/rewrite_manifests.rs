//! `rewrite_manifests`: rows, files and row ids unchanged.

use super::*;

/// rewrite_manifests replaces many small manifests by one per spec and content; the rows, the
/// data files and v3 row ids are unchanged, the peers read it, and writes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_manifests_keeps_rows_and_files() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let mut checks = Vec::new();
    for (label, fv) in [("man_v2", FormatVersion::V2), ("man_v3", FormatVersion::V3)] {
        let mut c = TableCreation::new(parse_schema("id long, v string").unwrap());
        c.format_version = fv;
        c.properties = [("write.delete.mode".to_string(), "merge-on-read".to_string())].into();
        let ident = parse_ident(&format!("mt.{label}")).unwrap();
        let mut t = cat.create_table(&ident, c).await.unwrap();
        for i in 0..6 {
            t = append(&cat, &t, vec![Ok(id_batch(i * 50..i * 50 + 50))])
                .await
                .unwrap()
                .table;
        }
        t = floe::dml::execute(
            &cat,
            &format!("DELETE FROM mt.{label} WHERE id % 4 = 0"),
            None,
        )
        .await
        .unwrap()
        .table;
        let before = work.path().join(format!("{label}.parquet"));
        let n = floe_expected(&t, None, &before).await;
        let files_before: Vec<(String, Option<i64>)> = {
            let mut v: Vec<_> = Scan::new(&t)
                .plan()
                .await
                .unwrap()
                .files
                .iter()
                .map(|f| (f.file.file_path().to_string(), f.sequence_number.into()))
                .collect();
            v.sort();
            v
        };
        let r = floe::maintenance::rewrite_manifests(&cat, &t, None)
            .await
            .unwrap();
        assert_eq!(r.rewritten_manifests_count, 7, "{label}: {r:?}");
        assert_eq!(
            r.added_manifests_count, 2,
            "{label}: one data and one delete manifest"
        );
        let t2 = r.table.unwrap();
        let list = t2
            .manifest_list(t2.current_snapshot().unwrap())
            .await
            .unwrap();
        assert_eq!(list.len(), 2);
        let mut files_after: Vec<(String, Option<i64>)> = Scan::new(&t2)
            .plan()
            .await
            .unwrap()
            .files
            .iter()
            .map(|f| (f.file.file_path().to_string(), f.sequence_number.into()))
            .collect();
        files_after.sort();
        assert_eq!(
            files_after, files_before,
            "{label}: same files, same sequence numbers"
        );
        let after = work.path().join(format!("{label}-after.parquet"));
        assert_eq!(floe_expected(&t2, None, &after).await, n);
        let t3 = floe::dml::execute(
            &cat,
            &format!("DELETE FROM mt.{label} WHERE id % 4 = 1"),
            None,
        )
        .await
        .unwrap()
        .table;
        let want = (0..300).filter(|i| i % 4 > 1).count();
        assert_eq!(Scan::new(&t3).count().await.unwrap() as usize, want);
        checks.push(Check {
            name: format!("rewrite-manifests-{label}"),
            metadata: t2.metadata_location().to_string(),
            snapshot_id: None,
            expected: before.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        });
    }
    peer_check(&py, work.path(), &checks);
}
