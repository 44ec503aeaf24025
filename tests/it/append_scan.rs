//! Create, append and scan through the library: partitioning, sorting, rolling, metrics,
//! pruning, time travel, summaries.

use std::collections::HashMap;

use floe::catalog::TableCreation;
use floe::expr::parse_expr;
use floe::scan::{Scan, SnapshotSelector};
use floe::spec::{parse_partition_spec, parse_schema, parse_sort_order, FormatVersion};
use floe::table::parse_ident;
use floe::txn::append;

use crate::common::*;

#[tokio::test]
async fn partitioned_append_scan_prune_and_time_travel() {
    let (_d, cat) = sqlite_catalog();
    let schema = parse_schema(WIDE_DDL).unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.partition_spec =
        parse_partition_spec("day(ts), bucket(4, id), truncate(2, cat)", &schema).unwrap();
    let t = cat
        .create_table(&parse_ident("db.wide").unwrap(), c)
        .await
        .unwrap();

    let r1 = append(&cat, &t, vec![Ok(wide_batch(0, 500))])
        .await
        .unwrap();
    let r2 = append(
        &cat,
        &r1.table,
        vec![Ok(wide_batch(500, 300)), Ok(wide_batch(800, 200))],
    )
    .await
    .unwrap();
    let t = r2.table;
    assert_eq!(t.metadata().snapshots().len(), 2);

    // Summary as Java writes it.
    let s = t.current_snapshot().unwrap().summary();
    assert_eq!(s.operation.as_str(), "append");
    let p = &s.additional_properties;
    assert_eq!(p["added-records"], "500");
    assert_eq!(p["total-records"], "1000");
    assert_eq!(
        p["total-data-files"].parse::<usize>().unwrap(),
        r1.added_files + r2.added_files
    );
    assert_eq!(p["total-delete-files"], "0");
    assert!(p["changed-partition-count"].parse::<usize>().unwrap() > 1);

    let all = scan_rows(&t, SnapshotSelector::Current).await;
    assert_eq!(count(&all), 1000);
    assert_eq!(sum_i64(&all, "id"), (0..1000).sum::<i64>());

    // Time travel to the first snapshot.
    let first = r1.snapshot_id.unwrap();
    let old = scan_rows(&t, SnapshotSelector::Id(first)).await;
    assert_eq!(count(&old), 500);

    // Filters: partition pruning + residual filtering give exact results.
    type Expect = Box<dyn Fn(i64) -> bool>;
    let cases: Vec<(&str, Expect)> = vec![
        ("id < 100", Box::new(|i| i < 100)),
        ("id = 7 OR id = 993", Box::new(|i| i == 7 || i == 993)),
        (
            "cat = 'beta' AND id >= 900",
            Box::new(|i| i % 4 == 1 && i >= 900),
        ),
        (
            "ts < '2024-01-02T00:00:00+00:00'",
            Box::new(|i| 1_704_067_200_000_000 + i * 3_600_000_000 / 7 < 1_704_153_600_000_000),
        ),
        (
            "id IN (1, 2, 3, 999) AND NOT small = 2",
            Box::new(|i| [1, 3, 999].contains(&i)),
        ),
        ("k IS NULL", Box::new(|i| i % 17 == 0)),
    ];
    for (expr, want) in cases {
        let pred = parse_expr(expr).unwrap();
        let scan = Scan::new(&t).filter(pred);
        let plan = scan.plan().await.unwrap();
        let rows = scan.to_batches().await.unwrap();
        let expected: Vec<i64> = (0..1000).filter(|i| want(*i)).collect();
        assert_eq!(count(&rows), expected.len(), "{expr}");
        assert_eq!(sum_i64(&rows, "id"), expected.iter().sum::<i64>(), "{expr}");
        if expr.starts_with("id = 7") || expr.starts_with("ts <") {
            assert!(
                plan.stats.pruned_by_partition + plan.stats.pruned_by_metrics > 0,
                "{expr}: nothing pruned: {:?}",
                plan.stats
            );
        }
    }

    // Projection.
    let rows = Scan::new(&t)
        .select(["name", "id"])
        .to_batches()
        .await
        .unwrap();
    assert_eq!(rows[0].num_columns(), 2);
    assert_eq!(rows[0].schema().field(0).name(), "name");
}

#[tokio::test]
async fn sorted_rolled_files_with_truncated_metrics() {
    let (_d, cat) = sqlite_catalog();
    let schema = parse_schema("id long, v string").unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.sort_order = Some(parse_sort_order("id desc", &schema).unwrap());
    c.properties = HashMap::from([
        (
            "write.target-file-size-bytes".to_string(),
            "20000".to_string(),
        ),
        (
            "write.parquet.row-group-size-bytes".to_string(),
            "8000".to_string(),
        ),
        (
            "write.metadata.metrics.column.v".to_string(),
            "truncate(4)".to_string(),
        ),
    ]);
    let t = cat
        .create_table(&parse_ident("db.sorted").unwrap(), c)
        .await
        .unwrap();
    let batches: Vec<_> = (0..10)
        .map(|i| Ok(id_batch(i * 3000..(i + 1) * 3000)))
        .collect();
    let r = append(&cat, &t, batches).await.unwrap();
    assert!(
        r.added_files > 1,
        "expected rolling at 20 kB, got {} files",
        r.added_files
    );
    let plan = Scan::new(&r.table).plan().await.unwrap();
    for f in &plan.files {
        assert_eq!(f.file.sort_order_id(), Some(1));
        let lo = f.file.lower_bounds().get(&2).expect("v lower bound");
        let lo = format!("{lo}");
        assert!(
            lo.trim_matches('"').chars().count() <= 4,
            "bound not truncated: {lo}"
        );
    }
    // Each file is sorted descending by id.
    let rows = Scan::new(&r.table)
        .concurrency(1)
        .to_batches()
        .await
        .unwrap();
    assert_eq!(count(&rows), 30_000);
}

#[tokio::test]
async fn v3_row_lineage_and_fs_catalog() {
    let (dir, cat) = fs_catalog();
    let schema = parse_schema("id long, v string").unwrap();
    let mut c = TableCreation::new(schema);
    c.format_version = FormatVersion::V3;
    let t = cat
        .create_table(&parse_ident("ns.t3").unwrap(), c)
        .await
        .unwrap();
    let r1 = append(&cat, &t, vec![Ok(id_batch(0..10))]).await.unwrap();
    let r2 = append(&cat, &r1.table, vec![Ok(id_batch(10..25))])
        .await
        .unwrap();
    let md = r2.table.metadata();
    assert_eq!(md.next_row_id(), 25);
    let s1 = md.snapshot_by_id(r1.snapshot_id.unwrap()).unwrap();
    let s2 = md.current_snapshot().unwrap();
    assert_eq!(s1.row_range(), Some((0, 10)));
    assert_eq!(s2.row_range(), Some((10, 15)));
    // Hadoop layout on disk.
    let mdir = dir.path().join("ns/t3/metadata");
    assert_eq!(
        std::fs::read_to_string(mdir.join("version-hint.text"))
            .unwrap()
            .trim(),
        "3"
    );
    assert!(mdir.join("v3.metadata.json").exists());
    let again = cat
        .load_table(&parse_ident("ns.t3").unwrap())
        .await
        .unwrap();
    assert_eq!(
        count(&scan_rows(&again, SnapshotSelector::Current).await),
        25
    );
    // Catalog-less read of the directory and of a metadata file.
    let st =
        floe::table::Table::open_static(cat.storage(), dir.path().join("ns/t3").to_str().unwrap())
            .await
            .unwrap();
    assert_eq!(count(&scan_rows(&st, SnapshotSelector::Current).await), 25);
    let st = floe::table::Table::open_static(
        cat.storage(),
        mdir.join("v2.metadata.json").to_str().unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(count(&scan_rows(&st, SnapshotSelector::Current).await), 10);
}

#[tokio::test]
async fn relocated_table_reads_from_where_it_lies() {
    let (dir, cat) = sqlite_catalog();
    let t = cat
        .create_table(
            &parse_ident("db.moved").unwrap(),
            TableCreation::new(parse_schema("id long, v string").unwrap()),
        )
        .await
        .unwrap();
    let r = append(&cat, &t, vec![Ok(id_batch(0..42))]).await.unwrap();
    let src = dir.path().join("db/moved");
    let dst = tempfile::tempdir().unwrap();
    let moved = dst.path().join("elsewhere");
    std::fs::rename(&src, &moved).unwrap();
    let meta = r
        .table
        .metadata_location()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    let st = floe::table::Table::open_static(
        cat.storage(),
        moved.join("metadata").join(meta).to_str().unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(
        sum_i64(&scan_rows(&st, SnapshotSelector::Current).await, "id"),
        (0..42).sum::<i64>()
    );
}

#[tokio::test]
async fn failed_append_commits_nothing_and_leaves_no_files() {
    let (dir, cat) = sqlite_catalog();
    let t = cat
        .create_table(
            &parse_ident("db.fail").unwrap(),
            TableCreation::new(parse_schema("id long, v string").unwrap()),
        )
        .await
        .unwrap();
    let bad = floe::Error::new(floe::ErrorKind::InvalidInput, "input broke half-way");
    let r = append(
        &cat,
        &t,
        vec![Ok(id_batch(0..100)), Ok(id_batch(100..200)), Err(bad)],
    )
    .await;
    assert_eq!(r.unwrap_err().kind(), floe::ErrorKind::InvalidInput);
    let t = cat
        .load_table(&parse_ident("db.fail").unwrap())
        .await
        .unwrap();
    assert!(t.current_snapshot().is_none(), "nothing committed");
    let data = dir.path().join("db/fail/data");
    let left: Vec<_> = files_under(&data);
    assert!(left.is_empty(), "orphan files left: {left:?}");
}

#[tokio::test]
async fn old_metadata_files_are_trimmed_when_asked() {
    let (dir, cat) = sqlite_catalog();
    let mut c = TableCreation::new(parse_schema("id long, v string").unwrap());
    c.properties = HashMap::from([
        (
            "write.metadata.previous-versions-max".to_string(),
            "2".to_string(),
        ),
        (
            "write.metadata.delete-after-commit.enabled".to_string(),
            "true".to_string(),
        ),
    ]);
    let mut t = cat
        .create_table(&parse_ident("db.trim").unwrap(), c)
        .await
        .unwrap();
    for i in 0..5 {
        t = append(&cat, &t, vec![Ok(id_batch(i * 10..(i + 1) * 10))])
            .await
            .unwrap()
            .table;
    }
    assert_eq!(t.metadata().metadata_log().len(), 2);
    let jsons = files_under(&dir.path().join("db/trim/metadata"))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".metadata.json"))
        .count();
    assert_eq!(jsons, 3, "current + 2 previous metadata files are kept");
    assert_eq!(count(&scan_rows(&t, SnapshotSelector::Current).await), 50);
}

#[tokio::test]
async fn a_small_memory_budget_closes_partition_files_early_and_keeps_every_row() {
    let (_d, cat) = sqlite_catalog();
    let schema = parse_schema("id long, v string").unwrap();
    let rows = 0..300_000i64;
    let mut files_per_budget = Vec::new();
    for (name, budget) in [("db.ample", None), ("db.tight", Some(256 * 1024))] {
        let mut c = TableCreation::new(schema.clone());
        c.partition_spec = parse_partition_spec("bucket(8, id)", &schema).unwrap();
        let t = cat
            .create_table(&parse_ident(name).unwrap(), c)
            .await
            .unwrap();
        let mut w = floe::write::DataWriter::new(&t).unwrap();
        if let Some(b) = budget {
            w = w.with_memory_budget(b);
        }
        for start in rows.clone().step_by(30_000) {
            w.write(id_batch(start..start + 30_000)).await.unwrap();
        }
        let files = w.close().await.unwrap();
        files_per_budget.push(files.len());
        let t = floe::txn::append_files(&cat, &t, files)
            .await
            .unwrap()
            .table;
        let all = scan_rows(&t, SnapshotSelector::Current).await;
        assert_eq!(count(&all), rows.clone().count(), "{name}");
        assert_eq!(sum_i64(&all, "id"), rows.clone().sum::<i64>(), "{name}");
        // Every file holds its partition's rows only.
        let plan = Scan::new(&t).plan().await.unwrap();
        assert_eq!(plan.files.len(), *files_per_budget.last().unwrap());
        let bucket =
            iceberg::transform::create_transform_function(&iceberg::spec::Transform::Bucket(8))
                .unwrap();
        for f in &plan.files {
            let want = match f.file.partition().fields()[0].clone() {
                Some(iceberg::spec::Literal::Primitive(iceberg::spec::PrimitiveLiteral::Int(
                    b,
                ))) => b,
                other => panic!("bucket partition value: {other:?}"),
            };
            let path = f.file.file_path().trim_start_matches("file://");
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                std::fs::File::open(path).unwrap(),
            )
            .unwrap()
            .build()
            .unwrap();
            for b in reader {
                let b = b.unwrap();
                let got = bucket.transform(b.column(0).clone()).unwrap();
                let got = got
                    .as_any()
                    .downcast_ref::<arrow::array::Int32Array>()
                    .unwrap();
                assert!(got.values().iter().all(|v| *v == want), "{path}");
            }
        }
    }
    // One file per partition with the default budget; with 128 KB for row groups in
    // progress per lane, partition files are closed early and continue in new ones.
    assert_eq!(files_per_budget[0], 8);
    assert!(
        files_per_budget[1] > 8,
        "expected early closes, got {files_per_budget:?}"
    );
}

/// Row groups whose column statistics rule the row filter out are not read, counted in the
/// plan's read counters (and `scan --explain`): a point lookup on a file sorted by key reads
/// one row group; deletes (skipped or masked) and positions stay right around the skipped
/// row groups; every answer equals a filter over all rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_groups_pruned_by_statistics_are_not_read() {
    use arrow::array::{AsArray, Int64Array, RecordBatch, StringArray};
    let (_d, cat) = fs_catalog();
    let schema = floe::spec::parse_schema("id long not null, v string").unwrap();
    let mut c = floe::TableCreation::new(schema);
    c.properties.extend([
        (
            "write.parquet.row-group-size-bytes".to_string(),
            "8192".to_string(),
        ),
        ("write.delete.mode".to_string(), "merge-on-read".to_string()),
    ]);
    let t = cat
        .create_table(&parse_ident("db.rg").unwrap(), c)
        .await
        .unwrap();
    let batch = |r: std::ops::Range<i64>| {
        RecordBatch::try_from_iter([
            (
                "id",
                std::sync::Arc::new(Int64Array::from_iter_values(r.clone())) as _,
            ),
            (
                "v",
                std::sync::Arc::new(StringArray::from_iter_values(
                    r.map(|i| format!("v{:05}", i % 997)),
                )) as _,
            ),
        ])
        .unwrap()
    };
    let batches: Vec<_> = (0..40).map(|i| Ok(batch(i * 500..(i + 1) * 500))).collect();
    let t = floe::txn::append(&cat, &t, batches).await.unwrap().table;
    let ids = |bs: &[RecordBatch]| -> Vec<i64> {
        let mut v: Vec<i64> = bs
            .iter()
            .flat_map(|b| {
                b.column_by_name("id")
                    .unwrap()
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        v.sort_unstable();
        v
    };
    let run = |t: floe::Table, filter: &'static str| async move {
        let (rows, stats) = filtered_scan(&t, filter).await;
        (ids(&rows), stats)
    };
    let (got, stats) = run(t.clone(), "id = 12345").await;
    assert_eq!(got, [12345]);
    assert!(stats.row_groups >= 8, "{stats:?}");
    assert_eq!(stats.row_groups_pruned, stats.row_groups - 1, "{stats:?}");
    let (got, stats) = run(t.clone(), "id BETWEEN 3000 AND 3999 OR id > 19990").await;
    assert_eq!(got, (3000..4000).chain(19991..20000).collect::<Vec<_>>());
    assert!(stats.row_groups_pruned > 0, "{stats:?}");
    // A string column's bounds prune nothing here (every row group spans v00000..v00996),
    // and a predicate no row group can hold reads none.
    let (got, _) = run(t.clone(), "v = 'v00005'").await;
    assert_eq!(got, (0..20000).filter(|i| i % 997 == 5).collect::<Vec<_>>());
    let (got, stats) = run(t.clone(), "id < 0").await;
    assert!(got.is_empty());
    assert_eq!(stats.row_groups_pruned, stats.row_groups);
    // Deletes around pruned row groups: scattered (masked) and a long run (skipped).
    floe::dml::execute(&cat, "DELETE FROM db.rg WHERE id % 7 = 0", None)
        .await
        .unwrap();
    floe::dml::execute(
        &cat,
        "DELETE FROM db.rg WHERE id BETWEEN 10000 AND 14999",
        None,
    )
    .await
    .unwrap();
    let t = cat
        .load_table(&parse_ident("db.rg").unwrap())
        .await
        .unwrap();
    for (filter, want) in [
        (
            "id BETWEEN 9000 AND 16000",
            (9000..=16000).collect::<Vec<i64>>(),
        ),
        ("id = 12345 OR id = 16001 OR id = 7", vec![12345, 16001, 7]),
        ("id > 19000", (19001..20000).collect()),
    ] {
        let want: Vec<i64> = {
            let mut w: Vec<i64> = want
                .into_iter()
                .filter(|i| i % 7 != 0 && !(10000..15000).contains(i))
                .collect();
            w.sort_unstable();
            w
        };
        let (got, stats) = run(t.clone(), filter).await;
        assert_eq!(got, want, "{filter}");
        assert!(stats.row_groups_pruned > 0, "{filter}: {stats:?}");
    }
    // UPDATE and DELETE read every row of the files they rewrite: nothing pruned away.
    floe::dml::execute(&cat, "UPDATE db.rg SET v = 'x' WHERE id = 19999", None)
        .await
        .unwrap();
    let t = cat
        .load_table(&parse_ident("db.rg").unwrap())
        .await
        .unwrap();
    let all = ids(&Scan::new(&t).to_batches().await.unwrap());
    assert_eq!(
        all,
        (0..20000)
            .filter(|i| i % 7 != 0 && !(10000..15000).contains(i))
            .collect::<Vec<_>>()
    );
}

/// Sorted files get pages of 4,096 rows (a lookup decompresses one page of each column it
/// returns) unless the table sets `write.parquet.page-row-limit`; unsorted files keep the
/// 20,000-row default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sorted_files_have_finer_pages_unless_the_table_sets_the_limit() {
    use arrow::array::{Int64Array, RecordBatch};
    let (_d, cat) = fs_catalog();
    let schema = parse_schema("key long not null, v long").unwrap();
    let batch = RecordBatch::try_from_iter([
        (
            "key",
            std::sync::Arc::new(Int64Array::from_iter_values((0..10_000).rev())) as _,
        ),
        (
            "v",
            std::sync::Arc::new(Int64Array::from_iter_values(0..10_000)) as _,
        ),
    ])
    .unwrap();
    for (name, sorted, limit, firsts) in [
        ("sorted", true, None, vec![0, 4096, 8192]),
        ("sorted_set", true, Some("20000"), vec![0]),
        (
            "sorted_small",
            true,
            Some("3000"),
            vec![0, 3000, 6000, 9000],
        ),
        ("unsorted", false, None, vec![0]),
    ] {
        let mut c = TableCreation::new(schema.clone());
        if sorted {
            c.sort_order = Some(parse_sort_order("key", &schema).unwrap());
        }
        if let Some(l) = limit {
            c = c.with_property("write.parquet.page-row-limit", l);
        }
        let t = cat
            .create_table(&parse_ident(&format!("db.{name}")).unwrap(), c)
            .await
            .unwrap();
        let t = append(&cat, &t, [Ok(batch.clone())]).await.unwrap().table;
        let plan = Scan::new(&t).plan().await.unwrap();
        assert_eq!(plan.files.len(), 1, "{name}");
        for got in page_first_rows(plan.files[0].file.file_path()) {
            assert_eq!(got, firsts, "{name}");
        }
    }
}

/// An IN list on a bucketed, sorted table: each file is pruned by only the values of its own
/// bucket (the others cannot be in it), so pages whose key range merely spans another
/// bucket's value are not read; the rows are exactly the listed keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_lists_prune_each_bucket_by_its_own_values() {
    use arrow::array::{AsArray, Int64Array, RecordBatch};
    use rand::{Rng, SeedableRng};
    let (_d, cat) = fs_catalog();
    let schema = parse_schema("key long not null, v long").unwrap();
    let mut c =
        TableCreation::new(schema.clone()).with_property("write.parquet.page-row-limit", "100");
    c.partition_spec = parse_partition_spec("bucket(4, key)", &schema).unwrap();
    c.sort_order = Some(parse_sort_order("key", &schema).unwrap());
    let t = cat
        .create_table(&parse_ident("db.inlist").unwrap(), c)
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(23);
    let keys: Vec<i64> = (0..40_000).map(|_| rng.gen()).collect();
    let batch = RecordBatch::try_from_iter([
        (
            "key",
            std::sync::Arc::new(Int64Array::from(keys.clone())) as _,
        ),
        (
            "v",
            std::sync::Arc::new(Int64Array::from(keys.clone())) as _,
        ),
    ])
    .unwrap();
    let t = append(&cat, &t, [Ok(batch)]).await.unwrap().table;
    let mut wanted: Vec<i64> = (0..40).map(|i| keys[i * 997]).collect();
    let list: Vec<String> = wanted.iter().map(|k| k.to_string()).collect();
    let (rows, stats) = filtered_scan(&t, &format!("key IN ({})", list.join(", "))).await;
    let mut got: Vec<i64> = rows
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .values()
                .to_vec()
        })
        .collect();
    got.sort_unstable();
    wanted.sort_unstable();
    assert_eq!(got, wanted);
    // 40 keys: at most one page each (a page holds a key's row); with every file checked
    // against all 40 values, nearly every page of every bucket would be read.
    let read = stats.pages - stats.pages_pruned;
    assert!(stats.pages >= 400, "{stats:?}");
    assert!(read <= 40, "{read} pages read: {stats:?}");
}

/// The page index (column index + offset index, written by default) narrows a filtered read
/// to the pages that may match: on a file of sorted ids in pages of 100 rows a point lookup
/// reads one page of the id column and a fraction of the bytes; positions stay right around
/// skipped pages when deletes (scattered and in runs) are applied, and an UPDATE through a
/// filtered read rewrites only what it must.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_ruled_out_by_the_page_index_are_not_read() {
    use arrow::array::{AsArray, Int64Array, RecordBatch, StringArray};
    let (_d, cat) = fs_catalog();
    let schema = floe::spec::parse_schema("id long not null, v string").unwrap();
    let mut c = floe::TableCreation::new(schema);
    c.properties.extend([
        (
            "write.parquet.page-row-limit".to_string(),
            "100".to_string(),
        ),
        ("write.delete.mode".to_string(), "merge-on-read".to_string()),
        ("write.update.mode".to_string(), "merge-on-read".to_string()),
    ]);
    let ident = parse_ident("db.pages").unwrap();
    let t = cat.create_table(&ident, c).await.unwrap();
    let ids: Vec<i64> = (0..20_000).collect();
    let batch = RecordBatch::try_from_iter([
        (
            "id",
            std::sync::Arc::new(Int64Array::from(ids.clone())) as _,
        ),
        (
            "v",
            std::sync::Arc::new(StringArray::from_iter_values(
                ids.iter().map(|i| format!("v{:05}", i / 10)),
            )) as _,
        ),
    ])
    .unwrap();
    let t = floe::txn::append(&cat, &t, [Ok(batch)])
        .await
        .unwrap()
        .table;
    let run = |t: floe::Table, filter: String| async move {
        let (rows, stats) = filtered_scan(&t, &filter).await;
        let mut got: Vec<(i64, String)> = rows
            .iter()
            .flat_map(|b| {
                let id = b
                    .column(0)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .clone();
                let v = b.column(1).as_string::<i32>().clone();
                (0..b.num_rows())
                    .map(|r| (id.value(r), v.value(r).to_string()))
                    .collect::<Vec<_>>()
            })
            .collect();
        got.sort();
        (got, stats)
    };
    let row = |i: i64| (i, format!("v{:05}", i / 10));
    let (got, point) = run(t.clone(), "id = 12345".into()).await;
    assert_eq!(got, [row(12345)]);
    assert_eq!(
        (point.row_groups, point.row_groups_pruned),
        (1, 0),
        "{point:?}"
    );
    assert_eq!(point.pages, 200, "{point:?}");
    assert_eq!(point.pages - point.pages_pruned, 1, "{point:?}");
    let (got, all) = run(t.clone(), "id >= 0".into()).await;
    assert_eq!(got.len(), 20_000);
    assert_eq!(all.pages_pruned, 0, "{all:?}");
    assert!(
        point.row_group_bytes_read * 20 < all.row_group_bytes_read,
        "{point:?} vs {all:?}"
    );
    // Two columns, ranges across page boundaries, OR and NOT.
    for (filter, want) in [
        (
            "id BETWEEN 3050 AND 3149",
            (3050..3150).collect::<Vec<i64>>(),
        ),
        (
            "v = 'v01234' OR id > 19990",
            (12340..12350).chain(19991..20000).collect(),
        ),
        ("NOT (id >= 100)", (0..100).collect()),
    ] {
        let (got, stats) = run(t.clone(), filter.into()).await;
        assert_eq!(
            got,
            want.iter().map(|i| row(*i)).collect::<Vec<_>>(),
            "{filter}"
        );
        assert!(stats.pages_pruned > 0, "{filter}: {stats:?}");
    }
    // Deletes: scattered (masked after decoding) and a long run (skipped undecoded), around
    // skipped pages.
    floe::dml::execute(&cat, "DELETE FROM db.pages WHERE id % 7 = 0", None)
        .await
        .unwrap();
    floe::dml::execute(
        &cat,
        "DELETE FROM db.pages WHERE id BETWEEN 5000 AND 9999",
        None,
    )
    .await
    .unwrap();
    let live = |i: &i64| i % 7 != 0 && !(5000..10000).contains(i);
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(18);
    for _ in 0..25 {
        let (a, n) = (
            rand::Rng::gen_range(&mut rng, 0..20_000i64),
            rand::Rng::gen_range(&mut rng, 0..700i64),
        );
        let t = cat.load_table(&ident).await.unwrap();
        let (got, _) = run(t, format!("id BETWEEN {a} AND {}", a + n)).await;
        let want: Vec<_> = (a..=(a + n).min(19_999)).filter(live).map(row).collect();
        assert_eq!(got, want, "id BETWEEN {a} AND {}", a + n);
    }
    // An UPDATE whose rows are found through the page index writes its deletes at the right
    // positions.
    floe::dml::execute(&cat, "UPDATE db.pages SET v = 'x' WHERE id = 15001", None)
        .await
        .unwrap();
    let t = cat.load_table(&ident).await.unwrap();
    let (got, _) = run(t.clone(), "id BETWEEN 14990 AND 15010".into()).await;
    let want: Vec<_> = (14990..=15010)
        .filter(live)
        .map(|i| {
            if i == 15001 {
                (i, "x".to_string())
            } else {
                row(i)
            }
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        Scan::new(&t).count().await.unwrap() as usize,
        ids.iter().filter(|i| live(i)).count()
    );
}

/// Bloom filters (`write.parquet.bloom-filter-enabled.column.<col>`, Java's properties) are
/// written and checked for `=` and `IN` before a row group is read: on shuffled keys (the
/// statistics prune nothing) a lookup of an absent key skips the row groups, a present one is
/// always found (no false negatives, on a long and a string column), and a malformed fpp is
/// refused at create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bloom_filters_skip_row_groups_without_the_value() {
    use arrow::array::{Int64Array, RecordBatch, StringArray};
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    let (_d, cat) = fs_catalog();
    let schema = floe::spec::parse_schema("id long not null, v string").unwrap();
    let mut c = floe::TableCreation::new(schema.clone());
    c.properties.extend(
        [
            ("write.parquet.row-group-size-bytes", "16384"),
            ("write.parquet.bloom-filter-enabled.column.id", "true"),
            ("write.parquet.bloom-filter-enabled.column.v", "true"),
            ("write.parquet.bloom-filter-fpp.column.v", "0.001"),
            ("write.parquet.bloom-filter-max-bytes", "4096"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let t = cat
        .create_table(&parse_ident("db.bloom").unwrap(), c)
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    // Even ids only, shuffled: every row group spans (almost) the whole key range.
    let mut ids: Vec<i64> = (0..20_000).map(|i| i * 2).collect();
    ids.shuffle(&mut rng);
    let batches: Vec<_> = ids
        .chunks(500)
        .map(|c| {
            Ok(RecordBatch::try_from_iter([
                ("id", std::sync::Arc::new(Int64Array::from(c.to_vec())) as _),
                (
                    "v",
                    std::sync::Arc::new(StringArray::from_iter_values(
                        c.iter().map(|i| format!("k{i}")),
                    )) as _,
                ),
            ])
            .unwrap())
        })
        .collect();
    let t = floe::txn::append(&cat, &t, batches).await.unwrap().table;
    let run = |filter: String| {
        let t = t.clone();
        async move { filtered_first_longs(&t, &filter).await }
    };
    let (_, s) = run("id = 20001".into()).await;
    assert!(s.row_groups >= 8, "{s:?}");
    assert!(
        s.row_groups_pruned_by_bloom * 10 >= s.row_groups * 8,
        "an absent key skips most row groups: {s:?}"
    );
    for _ in 0..40 {
        let present = rng.gen_range(0..20_000i64) * 2;
        let (got, _) = run(format!("id = {present}")).await;
        assert_eq!(got, [present]);
        let (got, _) = run(format!("v = 'k{present}'")).await;
        assert_eq!(got, [present]);
        let odd = rng.gen_range(0..20_000i64) * 2 + 1;
        let (got, s) = run(format!("id IN ({odd}, {present}, {})", odd + 2)).await;
        assert_eq!(got, [present], "{s:?}");
        let (got, _) = run(format!("v IN ('k{odd}', 'k{present}') OR id = {odd}")).await;
        assert_eq!(got, [present]);
    }
    let (got, s) = run("v = 'nope' AND id > 5".into()).await;
    assert!(got.is_empty());
    assert!(
        s.row_groups_pruned_by_bloom * 10 >= s.row_groups * 9,
        "{s:?}"
    );
    // A bad fpp is refused before anything is created.
    let mut c = floe::TableCreation::new(schema);
    c.properties.insert(
        "write.parquet.bloom-filter-enabled.column.id".into(),
        "true".into(),
    );
    c.properties.insert(
        "write.parquet.bloom-filter-fpp.column.id".into(),
        "1.5".into(),
    );
    let e = cat
        .create_table(&parse_ident("db.bloom_bad").unwrap(), c)
        .await;
    assert!(
        e.is_err() || {
            // Properties may be checked at the first write instead: then that write fails.
            let t = e.unwrap();
            floe::txn::append(&cat, &t, [Ok(id_batch(0..3))])
                .await
                .is_err()
        }
    );
}

/// `floe scan --explain --json` counts each pruning stage: manifests by their partition
/// summaries, files, row groups; the rows returned are the scan's.
#[test]
fn explain_counts_each_pruning_stage() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.e",
            "--schema",
            "k int, id long",
            "--partition-by",
            "k",
        ],
    );
    for k in 0..3 {
        let csv = d.path().join(format!("{k}.csv"));
        let rows: String = (0..50).map(|i| format!("{k},{}\n", k * 100 + i)).collect();
        std::fs::write(&csv, format!("k,id\n{rows}")).unwrap();
        ok(&wh, &["append", "db.e", csv.to_str().unwrap()]);
    }
    let v: serde_json::Value = serde_json::from_str(&ok(
        &wh,
        &[
            "scan",
            "db.e",
            "--where",
            "k = 1 AND id >= 140",
            "--explain",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(v["data_manifests_count"], 3, "{v}");
    assert_eq!(v["pruned_data_manifests_count"], 2, "{v}");
    assert_eq!(v["read_data_files_count"], 1, "{v}");
    assert_eq!(v["record_count"], 10, "{v}");
    assert_eq!(v["row_groups_count"], 1, "{v}");
    let text = ok(&wh, &["scan", "db.e", "--where", "k = 7", "--explain"]);
    assert!(text.contains("data manifests: 3, 3 pruned"), "{text}");
    assert!(text.contains("rows returned: 0"), "{text}");
}

/// A file that records the table's sort order is sorted end to end: when a partition's rows
/// outgrow the writer's memory (a small budget, or more rows than one sorted run holds),
/// the writer spills sorted runs to local files and merges them, so every file is stamped
/// and sorted, the partition's files hold consecutive ranges, and no row is lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_files_sorted_end_to_end_record_the_sort_order() {
    use rand::SeedableRng;
    let (_d, cat) = fs_catalog();
    let schema = parse_schema("id long, v long").unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.sort_order = Some(parse_sort_order("id", &schema).unwrap());
    let t = cat
        .create_table(&parse_ident("db.runs").unwrap(), c)
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    // A small budget (a run spilled per batch) and a partition of more rows than one run
    // holds (1M rows).
    for (budget, batches, batch_rows) in [(64usize << 10, 20, 5000), (256 << 20, 22, 100_000)] {
        let mut w = floe::write::DataWriter::with_lanes(&t, 1)
            .unwrap()
            .with_memory_budget(budget);
        let mut written = write_random_ids(&mut w, &mut rng, batches, batch_rows).await;
        let files = w.close().await.unwrap();
        // The files in the order the lane wrote them: each sorted, each starting where the
        // one before ended.
        let mut all = Vec::new();
        for (f, (_, _, ids)) in files.iter().zip(files_by_lane(&files)) {
            assert_eq!(
                f.sort_order_id(),
                Some(1),
                "{} records no sort order",
                f.file_path()
            );
            assert_eq!(f.record_count(), ids.len() as u64, "{}", f.file_path());
            all.extend(ids);
        }
        assert!(
            all.windows(2).all(|w| w[0] <= w[1]),
            "budget {budget}: {} files are not sorted end to end, one after the other",
            files.len()
        );
        written.sort_unstable();
        assert_eq!(all, written, "budget {budget}: rows lost or doubled");
    }
    // Files written by a sort rewrite of this table's small files are stamped and sorted.
    let t = cat
        .load_table(&parse_ident("db.runs").unwrap())
        .await
        .unwrap();
    assert!(
        t.current_snapshot().is_none(),
        "nothing committed by the writer alone"
    );
}

/// Writes `batches` batches of `rows` random ids (below 1M) as both `id` and `v`; returns the
/// ids written.
async fn write_random_ids(
    w: &mut floe::write::DataWriter,
    rng: &mut impl rand::Rng,
    batches: usize,
    rows: usize,
) -> Vec<i64> {
    use arrow::array::{Int64Array, RecordBatch};
    let mut written = Vec::new();
    for _ in 0..batches {
        let ids: Vec<i64> = (0..rows).map(|_| rng.gen_range(0..1_000_000)).collect();
        written.extend_from_slice(&ids);
        let b = RecordBatch::try_from_iter([
            (
                "id",
                std::sync::Arc::new(Int64Array::from(ids.clone())) as _,
            ),
            ("v", std::sync::Arc::new(Int64Array::from(ids)) as _),
        ])
        .unwrap();
        w.write(b).await.unwrap();
    }
    written
}

/// The batches of a local data file, read with arrow-rs's reader (not floe's).
fn file_batches(path: &str) -> Vec<arrow::array::RecordBatch> {
    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(path).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap()
    .map(|b| b.unwrap())
    .collect()
}

/// Each data file `files` lists, read back: (lane that wrote it, partition directory, its
/// `id` values); every row's `v` equals its `id` (rows were written whole).
fn files_by_lane(files: &[floe::spec::DataFile]) -> Vec<(String, String, Vec<i64>)> {
    use arrow::array::AsArray;
    files
        .iter()
        .map(|f| {
            let path = f.file_path().trim_start_matches("file://");
            let (dir, name) = path.rsplit_once('/').unwrap();
            let mut ids = Vec::new();
            for b in file_batches(path) {
                let c = b.column(b.schema().index_of("id").unwrap());
                let v = b.column(b.schema().index_of("v").unwrap());
                assert_eq!(c.as_ref(), v.as_ref(), "{path}: rows kept whole (v = id)");
                ids.extend_from_slice(c.as_primitive::<arrow::datatypes::Int64Type>().values());
            }
            (name[..5].to_string(), dir.to_string(), ids)
        })
        .collect()
}

/// `write.distribution-mode` as Iceberg Spark applies it, with two writer lanes: an ordered
/// unpartitioned table is written as one range by default (its files hold disjoint,
/// consecutive ranges) and as overlapping per-lane files under `none`; a partitioned table
/// keeps each partition in one lane's files under `hash` (its default) and spreads them over
/// the lanes under `none`. No row is lost or doubled either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_spread_rows_by_the_distribution_mode() {
    use rand::SeedableRng;
    let (_d, cat) = fs_catalog();
    let schema = parse_schema("id long, v long").unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    // (table, partitioned, distribution property, expect range / partitions kept in a lane)
    let cases = [
        ("sorted_default", false, None, true),
        ("sorted_none", false, Some("none"), false),
        ("bucketed_default", true, None, true),
        ("bucketed_none", true, Some("none"), false),
    ];
    for (name, partitioned, mode, clustered) in cases {
        let mut c = TableCreation::new(schema.clone());
        if partitioned {
            c.partition_spec = parse_partition_spec("bucket(4, id)", &schema).unwrap();
        } else {
            c.sort_order = Some(parse_sort_order("id", &schema).unwrap());
        }
        if let Some(m) = mode {
            c = c.with_property("write.distribution-mode", m);
        }
        let t = cat
            .create_table(&parse_ident(&format!("db.{name}")).unwrap(), c)
            .await
            .unwrap();
        // Beyond one lane's share of a small append, files of ~256 KB.
        let mut w = floe::write::DataWriter::with_lanes(&t, 2)
            .unwrap()
            .with_target_file_size(256 << 10);
        let mut written = write_random_ids(&mut w, &mut rng, 30, 10_000).await;
        let files = files_by_lane(&w.close().await.unwrap());
        let mut all: Vec<i64> = files.iter().flat_map(|f| f.2.clone()).collect();
        all.sort_unstable();
        written.sort_unstable();
        assert_eq!(all, written, "{name}: rows lost or doubled");
        if partitioned {
            let mut lanes_of: HashMap<&str, std::collections::HashSet<&str>> = HashMap::new();
            for (lane, dir, _) in &files {
                lanes_of.entry(dir).or_default().insert(lane);
            }
            let spread = lanes_of.values().filter(|l| l.len() > 1).count();
            assert_eq!(
                spread == 0,
                clustered,
                "{name}: lanes per partition {lanes_of:?}"
            );
        } else {
            let lanes: std::collections::HashSet<&str> =
                files.iter().map(|f| f.0.as_str()).collect();
            let mut ranges: Vec<(i64, i64)> = files
                .iter()
                .map(|f| (*f.2.iter().min().unwrap(), *f.2.iter().max().unwrap()))
                .collect();
            ranges.sort_unstable();
            let disjoint = ranges.windows(2).all(|r| r[0].1 <= r[1].0);
            assert!(files.len() > 2, "{name}: {} files", files.len());
            assert_eq!(disjoint, clustered, "{name}: {ranges:?}");
            assert_eq!(lanes.len() == 1, clustered, "{name}: lanes {lanes:?}");
        }
    }
}

/// Late materialization: a point lookup on an unsorted column decodes that column whole, but
/// the other columns only in the pages holding the rows it keeps, and says so in the bytes
/// it counts; a filter on every projected column reads them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_decodes_other_columns_only_for_kept_rows() {
    use arrow::array::{Int64Array, RecordBatch, StringArray};
    use rand::{Rng, SeedableRng};
    let (_d, cat) = fs_catalog();
    let schema = floe::spec::parse_schema("k long not null, pad string").unwrap();
    let mut c = floe::TableCreation::new(schema);
    c.properties.insert(
        "write.parquet.page-row-limit".to_string(),
        "500".to_string(),
    );
    let t = cat
        .create_table(&parse_ident("db.late").unwrap(), c)
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let keys: Vec<i64> = (0..50_000).map(|_| rng.gen()).collect();
    let batch = RecordBatch::try_from_iter([
        (
            "k",
            std::sync::Arc::new(Int64Array::from(keys.clone())) as _,
        ),
        (
            "pad",
            std::sync::Arc::new(StringArray::from_iter_values((0..keys.len()).map(|_| {
                (0..12)
                    .map(|_| format!("{:016x}", rng.gen::<u64>()))
                    .collect::<String>()
            }))) as _,
        ),
    ])
    .unwrap();
    let t = floe::txn::append(&cat, &t, [Ok(batch)])
        .await
        .unwrap()
        .table;
    let size: u64 = floe::scan::Scan::new(&t)
        .plan()
        .await
        .unwrap()
        .files
        .iter()
        .map(|f| f.file.file_size_in_bytes())
        .sum();
    let wanted = keys[31_337];
    let (rows, point) = filtered_scan(&t, &format!("k = {wanted}")).await;
    assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    // The key column is ~400 KB of the ~5 MB file; one page of `pad` is ~50 KB.
    assert!(
        point.row_group_bytes_read * 10 < size,
        "{point:?} of {size} bytes"
    );
    let (rows, all) = filtered_scan(&t, &format!("k = {wanted} OR pad IS NULL")).await;
    assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    assert!(
        all.row_group_bytes_read * 10 > size * 9,
        "{all:?} of {size} bytes"
    );
}

/// `DataWriter::finish_files` closes every open file and the writer goes on: rows of a
/// partition sent again start a new file, each file is sorted end to end and records the
/// sort order, and every row is committed once.
#[tokio::test]
async fn finishing_files_midway_keeps_every_row_in_sorted_files() {
    let (_d, cat) = sqlite_catalog();
    let schema = parse_schema("id long, v string").unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.partition_spec = parse_partition_spec("bucket(2, id)", &schema).unwrap();
    c.sort_order = Some(parse_sort_order("id desc", &schema).unwrap());
    let t = cat
        .create_table(&parse_ident("db.f").unwrap(), c)
        .await
        .unwrap();
    let mut w = floe::write::DataWriter::new(&t).unwrap();
    w.write(id_batch(0..5_000)).await.unwrap();
    w.finish_files().await.unwrap();
    w.write(id_batch(5_000..8_000)).await.unwrap();
    w.finish_files().await.unwrap();
    w.finish_files().await.unwrap(); // nothing buffered: no file
    w.write(id_batch(8_000..9_000)).await.unwrap();
    let files = w.close().await.unwrap();
    assert_eq!(files.len(), 6, "3 rounds x 2 buckets");
    let t = floe::txn::append_files(&cat, &t, files)
        .await
        .unwrap()
        .table;
    let all = scan_rows(&t, SnapshotSelector::Current).await;
    assert_eq!(count(&all), 9_000);
    assert_eq!(sum_i64(&all, "id"), (0..9_000i64).sum::<i64>());
    let plan = Scan::new(&t).plan().await.unwrap();
    for f in &plan.files {
        let path = f.file.file_path().trim_start_matches("file://");
        let mut ids = Vec::new();
        for b in file_batches(path) {
            let col = b
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>();
            ids.extend_from_slice(col.unwrap().values());
        }
        assert!(
            ids.windows(2).all(|w| w[0] > w[1]),
            "{path} is not sorted by id desc"
        );
    }
    assert!(plan.files.iter().all(|f| f.file.sort_order_id() == Some(1)));
}

/// `Scan::limit(n)` on random tables (appends of random sizes, merge-on-read or
/// copy-on-write deletes, v2 and v3, random row filters) gives min(n, matching) rows, each
/// a distinct row of the whole scan (the model: the unlimited scan), and `count` agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_scan_returns_that_many_of_the_matching_rows() {
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;
    fn ids(batches: &[arrow::array::RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                let c = b.column_by_name("id").unwrap();
                let c = c
                    .as_any()
                    .downcast_ref::<arrow::array::Int64Array>()
                    .unwrap();
                c.values().to_vec()
            })
            .collect()
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(45);
    for case in 0..12 {
        let (_d, cat) = sqlite_catalog();
        let name = format!("db.l{case}");
        let ident = parse_ident(&name).unwrap();
        let mut c = TableCreation::new(parse_schema("id long, v string").unwrap());
        let mode = ["merge-on-read", "copy-on-write"][rng.gen_range(0..2)];
        c.properties.insert("write.delete.mode".into(), mode.into());
        if rng.gen_bool(0.5) {
            c.format_version = FormatVersion::V3;
        }
        let mut t = cat.create_table(&ident, c).await.unwrap();
        let mut next = 0i64;
        for _ in 0..rng.gen_range(1..6) {
            let n = rng.gen_range(1..40);
            t = append(&cat, &t, [Ok(id_batch(next..next + n))])
                .await
                .unwrap()
                .table;
            next += n;
        }
        if rng.gen_bool(0.6) {
            let m = rng.gen_range(2..6);
            let sql = format!("DELETE FROM {name} WHERE id % {m} = 0");
            floe::dml::execute(&cat, &sql, None).await.unwrap();
            t = cat.load_table(&ident).await.unwrap();
        }
        let filter = rng
            .gen_bool(0.5)
            .then(|| format!("id > {}", rng.gen_range(0..next)));
        let base = || {
            let s = Scan::new(&t);
            match &filter {
                Some(f) => s.filter(parse_expr(f).unwrap()),
                None => s,
            }
        };
        let all: BTreeSet<i64> = ids(&base().to_batches().await.unwrap())
            .into_iter()
            .collect();
        let what = format!(
            "case {case} ({mode}, filter {filter:?}, {} rows)",
            all.len()
        );
        for n in [
            0,
            1,
            rng.gen_range(0..next as usize + 5),
            all.len(),
            all.len() + 3,
        ] {
            let got = ids(&base().limit(n).to_batches().await.unwrap());
            assert_eq!(got.len(), n.min(all.len()), "{what}: limit {n}");
            let distinct: BTreeSet<i64> = got.iter().copied().collect();
            assert_eq!(distinct.len(), got.len(), "{what}: limit {n} repeats rows");
            assert!(distinct.is_subset(&all), "{what}: limit {n} invents rows");
            let counted = base().limit(n).count().await.unwrap();
            assert_eq!(
                counted,
                n.min(all.len()) as u64,
                "{what}: count with limit {n}"
            );
        }
    }
}
