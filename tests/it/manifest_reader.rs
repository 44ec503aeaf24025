//! The planning decoder of manifests (`floe::codec::manifest`, through
//! `floe::table::parse_manifest`) against the `iceberg` crate's decoder: on every manifest
//! of the reference tables Spark and pyiceberg wrote, and of random floe tables (every
//! partition transform over int, long, date, timestamp, decimal, boolean, float, double,
//! string and binary columns with nulls; v2 and v3; position deletes, deletion vectors,
//! manifest rewrites and compactions for existing and deleted entries), both give equal
//! manifests, entry for entry, and loading through a table inherits what the spec says.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array,
    Int32Array, Int64Array, LargeBinaryArray, LargeStringArray, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::DataType;
use floe::catalog::TableCreation;
use floe::spec::{parse_partition_spec, parse_schema, FormatVersion};
use floe::table::parse_ident;
use floe::Table;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;

/// Compares both decoders on one manifest's bytes; true when the planning decoder took it.
fn same_manifest(bytes: &[u8], what: &str) -> bool {
    let by_iceberg = floe::table::parse_manifest_by_iceberg(bytes, what);
    let planned = floe::table::parse_manifest_planned(bytes, what);
    match (by_iceberg, planned) {
        (Ok(a), Ok(Some(b))) => {
            assert_eq!(a.metadata(), b.metadata(), "{what}: metadata");
            assert_eq!(a.entries().len(), b.entries().len(), "{what}: entries");
            for (i, (x, y)) in a.entries().iter().zip(b.entries()).enumerate() {
                assert_eq!(x, y, "{what}: entry {i}");
            }
            same_probes(bytes, what, &a);
            assert_eq!(
                floe::table::parse_manifest(bytes, what).unwrap(),
                a,
                "{what}"
            );
            true
        }
        (Ok(a), Ok(None)) => {
            assert_eq!(
                a.metadata().format_version,
                FormatVersion::V1,
                "{what}: a v2 / v3 manifest left to the iceberg crate"
            );
            assert_eq!(
                floe::table::parse_manifest(bytes, what).unwrap(),
                a,
                "{what}"
            );
            false
        }
        (Err(e), Ok(Some(_))) => {
            panic!("{what}: the iceberg crate refuses it ({e}), floe reads it")
        }
        (Ok(_), Err(e)) => panic!("{what}: floe refuses it ({e}), the iceberg crate reads it"),
        (Err(_), _) => false,
    }
}

/// A plan's probe of `bytes` (the partition and the metrics of one column, then the path
/// too) sees each entry as decoding it whole does, less what it leaves out, and the entries
/// it keeps (every other one) come out whole.
fn same_probes(bytes: &[u8], what: &str, whole: &iceberg::spec::Manifest) {
    let ids: Vec<i32> = whole
        .metadata()
        .schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.id)
        .collect();
    for (metric_ids, partition, path) in [
        (ids.iter().take(1).copied().collect::<Vec<_>>(), true, false),
        (vec![], false, true),
        (ids.clone(), true, true),
    ] {
        let (probes, kept) =
            floe::table::parse_manifest_probed(bytes, what, &metric_ids, partition, path, |i| {
                i % 2 == 1
            })
            .unwrap()
            .unwrap_or_else(|| panic!("{what}: the probe stepped aside"));
        assert_eq!(
            probes.len(),
            whole.entries().len(),
            "{what}: probed entries"
        );
        let odd: Vec<&iceberg::spec::ManifestEntry> = whole
            .entries()
            .iter()
            .skip(1)
            .step_by(2)
            .map(|e| e.as_ref())
            .collect();
        assert_eq!(kept.iter().collect::<Vec<_>>(), odd, "{what}: kept entries");
        for (i, (p, w)) in probes.iter().zip(whole.entries()).enumerate() {
            let (pf, wf) = (p.data_file(), w.data_file());
            let at = format!("{what}: entry {i} probed {metric_ids:?}");
            assert_eq!(p.status(), w.status(), "{at}");
            assert_eq!(p.sequence_number(), w.sequence_number(), "{at}");
            assert_eq!(p.snapshot_id(), w.snapshot_id(), "{at}");
            assert_eq!(pf.content_type(), wf.content_type(), "{at}");
            assert_eq!(pf.record_count(), wf.record_count(), "{at}");
            assert_eq!(pf.file_size_in_bytes(), wf.file_size_in_bytes(), "{at}");
            assert_eq!(pf.first_row_id(), wf.first_row_id(), "{at}");
            if partition {
                assert_eq!(pf.partition(), wf.partition(), "{at}");
            }
            if path {
                assert_eq!(pf.file_path(), wf.file_path(), "{at}");
            }
            let only =
                |m: &HashMap<i32, iceberg::spec::Datum>| -> HashMap<i32, iceberg::spec::Datum> {
                    m.iter()
                        .filter(|(k, _)| metric_ids.contains(k))
                        .map(|(k, v)| (*k, v.clone()))
                        .collect()
                };
            let counts = |m: &HashMap<i32, u64>| -> HashMap<i32, u64> {
                m.iter()
                    .filter(|(k, _)| metric_ids.contains(k))
                    .map(|(k, v)| (*k, *v))
                    .collect()
            };
            assert_eq!(pf.lower_bounds(), &only(wf.lower_bounds()), "{at}");
            assert_eq!(pf.upper_bounds(), &only(wf.upper_bounds()), "{at}");
            assert_eq!(pf.value_counts(), &counts(wf.value_counts()), "{at}");
            assert_eq!(
                pf.null_value_counts(),
                &counts(wf.null_value_counts()),
                "{at}"
            );
            assert_eq!(
                pf.nan_value_counts(),
                &counts(wf.nan_value_counts()),
                "{at}"
            );
        }
    }
}

/// Every manifest of every snapshot of `t`, compared; loaded through the table, each entry
/// inherits as the `iceberg` crate's `ManifestFile::load_manifest` makes it.
async fn check_table(t: &Table, label: &str) -> (usize, usize) {
    let (mut seen, mut planned) = (0, 0);
    for s in t.metadata().snapshots() {
        for mf in t.manifest_list(s).await.unwrap() {
            let bytes = t.storage().get(&mf.manifest_path).await.unwrap();
            let what = format!("{label}: {}", mf.manifest_path);
            seen += 1;
            planned += usize::from(same_manifest(&bytes, &what));
            let ours = t.decode_manifest_uncached(&mf).await.unwrap();
            let theirs = t.decode_manifest_by_iceberg_crate(&mf).await.unwrap();
            assert_eq!(ours, theirs, "{what}: inherited");
        }
    }
    (seen, planned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_manifests_decode_as_the_iceberg_crate_decodes_them() {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "avro") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo().join("spec-fixtures"), &mut files);
    let (mut manifests, mut planned) = (0, 0);
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let what = f.display().to_string();
        if floe::table::parse_manifest_by_iceberg(&bytes, &what).is_err() {
            continue; // a manifest list, or another Avro file
        }
        manifests += 1;
        planned += usize::from(same_manifest(&bytes, &what));
    }
    assert!(manifests >= 40, "{manifests} manifests among the fixtures");
    // Only the v1 manifests go to the iceberg crate (`same_manifest` checks which).
    assert!(
        planned * 10 >= manifests * 9,
        "{planned} of {manifests} by the planning decoder"
    );
}

const DDL: &str = "id long not null, i int, d date, ts timestamp, dec decimal(9,2), \
                   big decimal(30,4), b boolean, f float, x double, s string, bin binary";

const LAYOUTS: &[&str] = &[
    "",
    "i",
    "d",
    "s",
    "b",
    "dec",
    "big",
    "bin",
    "x",
    "f",
    "bucket(4, id)",
    "truncate(3, s)",
    "truncate(100, dec)",
    "truncate(10, i)",
    "day(ts)",
    "hour(ts)",
    "month(d)",
    "year(ts)",
    "i, day(ts), bucket(3, s)",
    "identity(id), bucket(2, s), truncate(4, s)",
];

fn column(rng: &mut StdRng, t: &DataType, ids: &[i64]) -> ArrayRef {
    let n = ids.len();
    let null = |rng: &mut StdRng| rng.gen_bool(0.15);
    match t {
        DataType::Int64 => Arc::new(Int64Array::from(ids.to_vec())),
        DataType::Int32 => Arc::new(Int32Array::from_iter(
            (0..n).map(|_| (!null(rng)).then(|| rng.gen_range(-50..50))),
        )),
        DataType::Date32 => Arc::new(Date32Array::from_iter(
            (0..n).map(|_| (!null(rng)).then(|| rng.gen_range(-800..20_000))),
        )),
        DataType::Timestamp(_, tz) => Arc::new(
            TimestampMicrosecondArray::from_iter((0..n).map(|_| {
                (!null(rng)).then(|| {
                    rng.gen_range(-10_i64..60) * 86_400_000_000 * 3
                        + rng.gen_range(0..86_400_000_000)
                })
            }))
            .with_timezone_opt(tz.clone()),
        ),
        DataType::Decimal128(p, s) => Arc::new(
            Decimal128Array::from_iter((0..n).map(|_| {
                (!null(rng)).then(|| {
                    rng.gen_range(-99_999_i128..99_999)
                        * if *p > 18 { 1_000_000_000_000 } else { 1 }
                })
            }))
            .with_precision_and_scale(*p, *s)
            .unwrap(),
        ),
        DataType::Boolean => Arc::new(BooleanArray::from_iter(
            (0..n).map(|_| (!null(rng)).then(|| rng.gen_bool(0.5))),
        )),
        DataType::Float32 => Arc::new(Float32Array::from_iter((0..n).map(|_| {
            (!null(rng)).then(|| [1.5f32, -0.0, 2.25, f32::NAN, 1e30][rng.gen_range(0..5)])
        }))),
        DataType::Float64 => Arc::new(Float64Array::from_iter((0..n).map(|_| {
            (!null(rng)).then(|| [0.5f64, -3.0, 1e-3, f64::NAN, 7.0][rng.gen_range(0..5)])
        }))),
        DataType::Utf8 => Arc::new(StringArray::from_iter((0..n).map(|_| {
            (!null(rng)).then(|| {
                ["", "a", "ab", "é", "zzzz", "mixed case"][rng.gen_range(0..6)].to_string()
            })
        }))),
        DataType::Binary => {
            Arc::new(BinaryArray::from_iter((0..n).map(|_| {
                (!null(rng)).then(|| vec![rng.gen::<u8>(); rng.gen_range(0..4)])
            })))
        }
        DataType::LargeBinary => {
            Arc::new(LargeBinaryArray::from_iter((0..n).map(|_| {
                (!null(rng)).then(|| vec![rng.gen::<u8>(); rng.gen_range(0..4)])
            })))
        }
        DataType::LargeUtf8 => Arc::new(LargeStringArray::from_iter((0..n).map(|_| {
            (!null(rng)).then(|| ["", "a", "ab", "é", "zzzz"][rng.gen_range(0..5)].to_string())
        }))),
        other => panic!("no generator for {other}"),
    }
}

fn batch(rng: &mut StdRng, t: &Table, ids: std::ops::Range<i64>) -> RecordBatch {
    let schema = t.arrow_schema().unwrap();
    let ids: Vec<i64> = ids.collect();
    let cols = schema
        .fields()
        .iter()
        .map(|f| column(rng, f.data_type(), &ids))
        .collect();
    RecordBatch::try_new(schema, cols).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_floe_manifests_decode_as_the_iceberg_crate_decodes_them() {
    let mut rng = StdRng::seed_from_u64(4545);
    let (mut seen, mut planned) = (0, 0);
    for (case, layout) in LAYOUTS.iter().enumerate() {
        let (_d, cat) = sqlite_catalog();
        let name = format!("db.m{case}");
        let ident = parse_ident(&name).unwrap();
        let schema = parse_schema(DDL).unwrap();
        let mut c = TableCreation::new(schema.clone());
        c.partition_spec = parse_partition_spec(layout, &schema).unwrap();
        if rng.gen_bool(0.5) {
            c.format_version = FormatVersion::V3;
        }
        c.properties = HashMap::from([
            ("write.delete.mode".to_string(), "merge-on-read".to_string()),
            (
                "commit.manifest-merge.enabled".to_string(),
                rng.gen_bool(0.5).to_string(),
            ),
            (
                "commit.manifest.min-count-to-merge".to_string(),
                "3".to_string(),
            ),
        ]);
        let mut t = cat.create_table(&ident, c).await.unwrap();
        let mut next = 0;
        for step in 0..6 {
            let n = rng.gen_range(1..60);
            floe::txn::append(&cat, &t, [Ok(batch(&mut rng, &t, next..next + n))])
                .await
                .unwrap();
            next += n;
            if step % 2 == 1 {
                let m = rng.gen_range(2..7);
                let sql = format!("DELETE FROM {name} WHERE id % {m} = 1");
                floe::dml::execute(&cat, &sql, None).await.unwrap();
            }
            t = cat.load_table(&ident).await.unwrap();
        }
        floe::maintenance::rewrite_manifests(&cat, &t, None)
            .await
            .unwrap();
        let t = cat.load_table(&ident).await.unwrap();
        let options = HashMap::from([("rewrite-all".to_string(), "true".to_string())]);
        floe::maintenance::rewrite_data_files(&cat, &t, None, &options, None)
            .await
            .unwrap();
        let t = cat.load_table(&ident).await.unwrap();
        let (s, p) = check_table(&t, &format!("layout '{layout}'")).await;
        seen += s;
        planned += p;
    }
    assert_eq!(
        planned, seen,
        "every floe-written manifest by the planning decoder"
    );
    assert!(seen > 200, "{seen} manifests compared");
}
