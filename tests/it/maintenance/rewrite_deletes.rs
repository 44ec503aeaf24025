//! `rewrite_position_delete_files` and dangling delete files.

use super::*;

/// rewrite_position_delete_files merges a partition's position delete files and drops the
/// ones left dangling by a compaction; rows stay the same for floe and the peers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_position_delete_files_merges_and_drops_dangling() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let schema = parse_schema("id long, v string, cat string").unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.partition_spec = floe::spec::parse_partition_spec("cat", &schema).unwrap();
    c.properties = [
        ("write.delete.mode", "merge-on-read"),
        ("write.delete.granularity", "partition"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let t = cat
        .create_table(&parse_ident("mt.pd").unwrap(), c)
        .await
        .unwrap();
    let batch = |a: i64, b: i64| {
        use arrow::array::{Int64Array, RecordBatch, StringArray};
        use std::sync::Arc;
        RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(Int64Array::from((a..b).collect::<Vec<_>>())) as _,
            ),
            (
                "v",
                Arc::new(StringArray::from(
                    (a..b).map(|i| format!("v{i}")).collect::<Vec<_>>(),
                )) as _,
            ),
            (
                "cat",
                Arc::new(StringArray::from(
                    (a..b)
                        .map(|i| if i % 2 == 0 { "a" } else { "b" })
                        .collect::<Vec<_>>(),
                )) as _,
            ),
        ])
        .unwrap()
    };
    let mut t = t;
    for i in 0..3 {
        t = append(&cat, &t, vec![Ok(batch(i * 100, i * 100 + 100))])
            .await
            .unwrap()
            .table;
    }
    for w in ["id % 7 = 0", "id % 11 = 0"] {
        t = floe::dml::execute(&cat, &format!("DELETE FROM mt.pd WHERE {w}"), None)
            .await
            .unwrap()
            .table;
    }
    let live_deletes = |plan: &floe::scan::ScanPlan| -> std::collections::HashSet<String> {
        plan.files
            .iter()
            .flat_map(|f| f.deletes.iter().map(|d| d.file.file_path().to_string()))
            .collect()
    };
    assert_eq!(
        live_deletes(&Scan::new(&t).plan().await.unwrap()).len(),
        4,
        "2 per partition"
    );
    // Compacting partition a leaves its partition-scoped delete files dangling.
    let opts: HashMap<String, String> = [("rewrite-all".to_string(), "true".to_string())].into();
    let pred = floe::expr::file_selection("cat = 'a'", t.metadata().current_schema()).unwrap();
    t = floe::maintenance::rewrite_data_files(&cat, &t, Some(pred), &opts, None)
        .await
        .unwrap()
        .table
        .unwrap();
    let expected = work.path().join("pd.parquet");
    let n = floe_expected(&t, None, &expected).await;
    let want = (0..300).filter(|i| i % 7 != 0 && i % 11 != 0).count();
    assert_eq!(n, want);
    let r = floe::maintenance::rewrite_position_delete_files(&cat, &t, &HashMap::new())
        .await
        .unwrap();
    assert_eq!(r.rewritten_delete_files_count, 4, "{r:?}");
    assert_eq!(r.added_delete_files_count, 1, "{r:?}");
    let t = r.table.unwrap();
    assert_eq!(
        t.current_snapshot().unwrap().summary().operation,
        floe::spec::Operation::Replace
    );
    assert_eq!(live_deletes(&Scan::new(&t).plan().await.unwrap()).len(), 1);
    let after = work.path().join("pd-after.parquet");
    assert_eq!(floe_expected(&t, None, &after).await, want);
    peer_check(
        &py,
        work.path(),
        &[Check {
            name: "rewrite-position-deletes".into(),
            metadata: t.metadata_location().to_string(),
            snapshot_id: None,
            expected: expected.to_string_lossy().to_string(),
            engines: None,
            refuse: None,
        }],
    );
}

/// `remove-dangling-deletes`: off (the default), partition-scoped position deletes and
/// equality deletes stay in the table after every data file they applied to was rewritten;
/// on, one more commit removes exactly those whose partition has no older data left, and
/// counts them. Rows are unchanged throughout, for floe and the peers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_removes_dangling_deletes_when_asked() {
    let Some(py) = peers_python() else { return };
    let work = tempfile::tempdir().unwrap();
    let (_d, cat) = fs_catalog();
    let opts = |dangling: bool| -> HashMap<String, String> {
        [
            ("rewrite-all".to_string(), "true".to_string()),
            ("remove-dangling-deletes".to_string(), dangling.to_string()),
        ]
        .into()
    };
    let mut checks = Vec::new();
    let mut expect_same = |t: &floe::Table, before: &std::path::Path, what: &str| {
        checks.push(Check {
            name: what.to_string(),
            metadata: t.metadata_location().to_string(),
            snapshot_id: None,
            expected: before.to_string_lossy().to_string(),
            engines: Some(spark_engines(total_delete_files(t) == 0)),
            refuse: None,
        });
    };
    // Off: nothing but the rewrite commit; the 5 delete files stay.
    let t = dangling_table(&cat, "mt.dangling_off").await;
    assert_eq!(total_delete_files(&t), 5);
    let before_off = work.path().join("off-before.parquet");
    let n = floe_expected(&t, None, &before_off).await;
    let want = (0..800)
        .filter(|i| i % 7 != 3 && !(500..520).contains(i))
        .count()
        + 50;
    assert_eq!(n, want);
    let snaps = t.metadata().snapshots().count();
    let r = floe::maintenance::rewrite_data_files(&cat, &t, None, &opts(false), None)
        .await
        .unwrap();
    assert_eq!(r.removed_delete_files_count, 0, "{r:?}");
    let t = r.table.unwrap();
    assert_eq!(t.metadata().snapshots().count(), snaps + 1);
    assert_eq!(total_delete_files(&t), 5);
    let after = work.path().join("off-after.parquet");
    assert_eq!(floe_expected(&t, None, &after).await, n);
    assert_same_rows(&py, &before_off, &after, "off: rows changed");
    expect_same(&t, &before_off, "dangling-off");

    // On, for partitions 0 and 200 only: their two position delete files go, in a second
    // commit; partitions 400 and 600 keep theirs (and the equality delete file).
    let t = dangling_table(&cat, "mt.dangling_on").await;
    let before = work.path().join("on-before.parquet");
    assert_eq!(floe_expected(&t, None, &before).await, n);
    let snaps = t.metadata().snapshots().count();
    let lt_400 = floe::expr::file_selection("id < 400", t.metadata().current_schema()).unwrap();
    let r = floe::maintenance::rewrite_data_files(&cat, &t, Some(lt_400), &opts(true), None)
        .await
        .unwrap();
    assert_eq!(r.rewritten_data_files_count, 4, "{r:?}");
    assert_eq!(r.removed_delete_files_count, 2, "{r:?}");
    let t = r.table.unwrap();
    assert_eq!(t.metadata().snapshots().count(), snaps + 2);
    assert_eq!(total_delete_files(&t), 3);
    let after = work.path().join("on-after-1.parquet");
    assert_eq!(floe_expected(&t, None, &after).await, n);
    assert_same_rows(&py, &before, &after, "on, partial: rows changed");
    expect_same(&t, &before, "dangling-on-partial");
    // On, everywhere: the other three go too.
    let r = floe::maintenance::rewrite_data_files(&cat, &t, None, &opts(true), None)
        .await
        .unwrap();
    assert_eq!(r.removed_delete_files_count, 3, "{r:?}");
    let t = r.table.unwrap();
    assert_eq!(total_delete_files(&t), 0);
    let after = work.path().join("on-after-2.parquet");
    assert_eq!(floe_expected(&t, None, &after).await, n);
    assert_same_rows(&py, &before, &after, "on: rows changed");
    expect_same(&t, &before, "dangling-on");
    // Nothing left to rewrite or remove.
    let r = floe::maintenance::rewrite_data_files(
        &cat,
        &t,
        None,
        &[("remove-dangling-deletes".to_string(), "true".to_string())].into(),
        None,
    )
    .await
    .unwrap();
    assert_eq!((r.file_groups, r.removed_delete_files_count), (0, 0));
    peer_check(&py, work.path(), &checks);
}
