//! Regressions (issue 14): input values that do not fit a column exactly are refused instead
//! of silently losing digits, and nested Parquet columns (maps, lists of structs, structs of
//! lists) append, infer (`create --schema-from`) and read back identically in floe, DuckDB and
//! pyiceberg.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Decimal128Array, Int32Builder, Int64Array, Int64Builder, ListBuilder, MapBuilder,
    RecordBatch, StringBuilder, StructBuilder,
};
use arrow::datatypes::{DataType, Field, Fields, Schema};
use floe::catalog::{Catalog, TableCreation};
use floe::scan::SnapshotSelector;
use floe::spec::parse_schema;
use floe::table::parse_ident;
use floe::Table;

use crate::common::*;
use crate::common::{floe, ok};

fn catalog(wh: &Path) -> Catalog {
    Catalog::open(None, Some(wh.to_str().unwrap()), None).unwrap()
}

async fn load(wh: &Path, name: &str) -> Table {
    catalog(wh)
        .load_table(&parse_ident(name).unwrap())
        .await
        .unwrap()
}

/// Runs `floe` expecting a refusal (exit 2); returns stderr.
fn refused(wh: &Path, args: &[&str]) -> String {
    let o = floe(wh, args);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "floe {args:?}: {err}");
    err
}

fn decimals(name: &str, values: Vec<Option<i128>>, p: u8, s: i8) -> RecordBatch {
    let ids: Vec<i64> = (1..=values.len() as i64).collect();
    let d = Decimal128Array::from(values)
        .with_precision_and_scale(p, s)
        .unwrap();
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new(name, DataType::Decimal128(p, s), true),
        ])),
        vec![Arc::new(Int64Array::from(ids)), Arc::new(d)],
    )
    .unwrap()
}

/// The `price` column of the table as text, ordered by id.
async fn prices(t: &Table) -> Vec<String> {
    let rows = scan_rows(t, SnapshotSelector::Current).await;
    let mut out: Vec<(i64, String)> = Vec::new();
    for b in &rows {
        let ids = b.column_by_name("id").unwrap();
        let ids = ids.as_any().downcast_ref::<Int64Array>().unwrap();
        let p = b.column_by_name("price").unwrap();
        for i in 0..b.num_rows() {
            out.push((
                ids.value(i),
                arrow::util::display::array_value_to_string(p, i).unwrap(),
            ));
        }
    }
    out.sort();
    out.into_iter().map(|(_, p)| p).collect()
}

/// Regression (issue 14): CSV `12.349` into `decimal(10,2)` was stored as 12.34 (arrow-csv
/// truncates); it is refused with the column, value, file and row, and nothing is committed.
/// Exact values (`12.340`) still append. The bad value sits past the first 65,536-row batch,
/// so the row number counts across batches.
#[tokio::test]
async fn csv_decimal_digits_beyond_the_scale_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &["create", "db.t", "--schema", "id long, price decimal(10,2)"],
    );
    let mut good = String::from("id,price\n1,12.34\n2,12.340\n3,\n4,-0.5\n5,99999999.99\n");
    for i in 6..=70_000 {
        good.push_str(&format!("{i},1.00\n"));
    }
    let bad_csv = d.path().join("bad.csv");
    std::fs::write(&bad_csv, format!("{good}70001,12.349\n")).unwrap();
    let bad = bad_csv.to_str().unwrap();
    let e = refused(&wh, &["append", "db.t", bad]);
    for want in [
        "'price'",
        "12.349",
        bad,
        "row 70001",
        "2 digits after the decimal point",
    ] {
        assert!(e.contains(want), "{want} not in: {e}");
    }
    assert!(load(&wh, "db.t")
        .await
        .metadata()
        .current_snapshot()
        .is_none());
    // Too many integer digits for decimal(10,2).
    let wide = d.path().join("wide.csv");
    std::fs::write(&wide, "id,price\n1,123456789.5\n").unwrap();
    let e = refused(&wh, &["append", "db.t", wide.to_str().unwrap()]);
    assert!(e.contains("123456789.5") && e.contains("row 1"), "{e}");
    // Not a number at all.
    let junk = d.path().join("junk.csv");
    std::fs::write(&junk, "id,price\n1,12,5\n").unwrap();
    assert!(!floe(&wh, &["append", "db.t", junk.to_str().unwrap()])
        .status
        .success());
    let nan = d.path().join("nan.csv");
    std::fs::write(&nan, "id,price\n1,abc\n").unwrap();
    let e = refused(&wh, &["append", "db.t", nan.to_str().unwrap()]);
    assert!(
        e.contains("'abc'") && e.contains("not a decimal number"),
        "{e}"
    );
    assert!(load(&wh, "db.t")
        .await
        .metadata()
        .current_snapshot()
        .is_none());
    // The exact values append, as written.
    let good_csv = d.path().join("good.csv");
    std::fs::write(&good_csv, &good).unwrap();
    ok(&wh, &["append", "db.t", good_csv.to_str().unwrap()]);
    let p = prices(&load(&wh, "db.t").await).await;
    assert_eq!(p.len(), 70_000);
    assert_eq!(&p[..5], ["12.34", "12.34", "", "-0.50", "99999999.99"]);
}

/// Regression (issue 14): Parquet `decimal(10,3)` 12.349 into `decimal(10,2)` was rounded to
/// 12.35; it is refused (append and library), while exact rescales (12.340 → 12.34,
/// `decimal(10,2)` → `decimal(12,4)`) keep working.
#[tokio::test]
async fn parquet_decimal_rescale_must_be_exact() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &["create", "db.t", "--schema", "id long, price decimal(10,2)"],
    );
    ok(
        &wh,
        &["create", "db.w", "--schema", "id long, price decimal(12,4)"],
    );
    let file = |name: &str, b: RecordBatch| {
        let p = d.path().join(name);
        write_parquet(&p, &[b]);
        p.to_string_lossy().to_string()
    };
    let bad = file(
        "bad.parquet",
        decimals("price", vec![Some(12_340), Some(12_349)], 10, 3),
    );
    let e = refused(&wh, &["append", "db.t", &bad]);
    for want in ["'price'", "12.349", &bad, "row 2", "db.t"] {
        assert!(e.contains(want), "{want} not in: {e}");
    }
    // Precision: decimal(12,2) 123456789.00 does not fit decimal(10,2).
    let big = file(
        "big.parquet",
        decimals("price", vec![Some(1), Some(12_345_678_900)], 12, 2),
    );
    let e = refused(&wh, &["append", "db.t", &big]);
    assert!(e.contains("123456789.00") && e.contains("row 2"), "{e}");
    assert!(load(&wh, "db.t")
        .await
        .metadata()
        .current_snapshot()
        .is_none());
    // Library append: the same refusal, nothing committed.
    let t = load(&wh, "db.t").await;
    let b = decimals("price", vec![Some(1_000), Some(2_000), Some(12_349)], 10, 3);
    let e = floe::txn::append(&catalog(&wh), &t, vec![Ok(b)])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("12.349") && e.contains("row 3 of the input"),
        "{e}"
    );
    assert!(load(&wh, "db.t")
        .await
        .metadata()
        .current_snapshot()
        .is_none());
    // Exact rescales append.
    let exact = file(
        "exact.parquet",
        decimals("price", vec![Some(12_340), None, Some(-1_000)], 10, 3),
    );
    ok(&wh, &["append", "db.t", &exact]);
    assert_eq!(
        prices(&load(&wh, "db.t").await).await,
        ["12.34", "", "-1.00"]
    );
    let narrow = file(
        "narrow.parquet",
        decimals("price", vec![Some(1_234), Some(9_999_999_999)], 10, 2),
    );
    ok(&wh, &["append", "db.w", &narrow]);
    assert_eq!(
        prices(&load(&wh, "db.w").await).await,
        ["12.3400", "99999999.9900"]
    );
}

/// Regression (issue 14): `ingest-snapshot` refuses the same values (CSV and Parquet) and
/// commits nothing.
#[tokio::test]
async fn ingest_snapshot_refuses_lossy_decimals() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.s",
            "--schema",
            "id long not null, ver long, price decimal(10,2)",
            "--partition-by",
            "bucket(2, id)",
        ],
    );
    let ingest = |f: &str| {
        vec![
            "ingest-snapshot".to_string(),
            "db.s".into(),
            f.into(),
            "--key".into(),
            "id".into(),
            "--version".into(),
            "ver".into(),
        ]
    };
    let csv = d.path().join("s.csv");
    std::fs::write(&csv, "id,ver,price\n1,1,1.5\n2,1,12.349\n").unwrap();
    let a = ingest(csv.to_str().unwrap());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let e = refused(&wh, &a);
    assert!(
        e.contains("12.349") && e.contains("row 2") && e.contains("s.csv"),
        "{e}"
    );
    let pq = d.path().join("s.parquet");
    let b = decimals("price", vec![Some(1_500), Some(12_349)], 10, 3);
    let ver: ArrayRef = Arc::new(Int64Array::from(vec![1, 1]));
    let b = RecordBatch::try_from_iter(vec![
        ("id", b.column(0).clone()),
        ("ver", ver),
        ("price", b.column(1).clone()),
    ])
    .unwrap();
    write_parquet(&pq, &[b]);
    let a = ingest(pq.to_str().unwrap());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let e = refused(&wh, &a);
    assert!(e.contains("12.349") && e.contains("s.parquet"), "{e}");
    assert!(load(&wh, "db.s")
        .await
        .metadata()
        .current_snapshot()
        .is_none());
    std::fs::write(&csv, "id,ver,price\n1,1,1.5\n2,1,12.340\n").unwrap();
    let a = ingest(csv.to_str().unwrap());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    ok(&wh, &a);
    assert_eq!(prices(&load(&wh, "db.s").await).await, ["1.50", "12.34"]);
}

/// The nested table of these tests.
const NESTED_DDL: &str = "id long not null, m map<string, struct<a:int, b:string>>, \
     l list<struct<x:long, y:string>>, s struct<name:string, tags:list<string>>, \
     mi map<string, int>";

/// Rows for [`NESTED_DDL`] built with arrow-rs builders (their own field names: `item`,
/// `entries`/`keys`/`values`), with nulls and empties at every level.
fn nested_batch(n: i64) -> RecordBatch {
    let ab = || -> Vec<Box<dyn arrow::array::ArrayBuilder>> {
        vec![
            Box::new(Int32Builder::new()),
            Box::new(StringBuilder::new()),
        ]
    };
    let ab_fields = Fields::from(vec![
        Field::new("a", DataType::Int32, true),
        Field::new("b", DataType::Utf8, true),
    ]);
    let mut m = MapBuilder::new(
        None,
        StringBuilder::new(),
        StructBuilder::new(ab_fields, ab()),
    );
    let xy_fields = Fields::from(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("y", DataType::Utf8, true),
    ]);
    let mut l = ListBuilder::new(StructBuilder::new(
        xy_fields,
        vec![
            Box::new(Int64Builder::new()),
            Box::new(StringBuilder::new()),
        ],
    ));
    let mut s = StructBuilder::new(
        Fields::from(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
                true,
            ),
        ]),
        vec![
            Box::new(StringBuilder::new()),
            Box::new(ListBuilder::new(StringBuilder::new())),
        ],
    );
    let mut mi = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    for i in 0..n {
        // m: null, empty, or 1..=2 entries whose value struct is sometimes null or half null.
        match i % 5 {
            0 => m.append(false).unwrap(),
            1 => m.append(true).unwrap(),
            _ => {
                for j in 0..(1 + i % 2) {
                    m.keys().append_value(format!("k{j}-é"));
                    let v = m.values();
                    let null_value = (i + j) % 7 == 0;
                    let a = v.field_builder::<Int32Builder>(0).unwrap();
                    if null_value || j == 1 {
                        a.append_null()
                    } else {
                        a.append_value(i as i32 * 10 + j as i32)
                    }
                    let b = v.field_builder::<StringBuilder>(1).unwrap();
                    if null_value {
                        b.append_null()
                    } else {
                        b.append_value(format!("b{i}"))
                    }
                    v.append(!null_value);
                }
                m.append(true).unwrap();
            }
        }
        // l: null, empty, or elements with a null struct and null members.
        match i % 4 {
            0 => l.append(false),
            1 => l.append(true),
            _ => {
                for j in 0..(i % 3 + 1) {
                    let e = l.values();
                    let null_elem = j == 2;
                    let x = e.field_builder::<Int64Builder>(0).unwrap();
                    if null_elem {
                        x.append_null()
                    } else {
                        x.append_value(i * 100 + j)
                    }
                    let y = e.field_builder::<StringBuilder>(1).unwrap();
                    if null_elem || j == 1 {
                        y.append_null()
                    } else {
                        y.append_value(format!("y{i}'\"%"))
                    }
                    e.append(!null_elem);
                }
                l.append(true);
            }
        }
        // s: null struct, null tags, empty tags, tags with a null.
        let null_struct = i % 6 == 3;
        let name = s.field_builder::<StringBuilder>(0).unwrap();
        if null_struct {
            name.append_null()
        } else {
            name.append_value(format!("n{i}"))
        }
        let tags = s.field_builder::<ListBuilder<StringBuilder>>(1).unwrap();
        match i % 4 {
            _ if null_struct => tags.append(false),
            0 => tags.append(false),
            1 => tags.append(true),
            _ => {
                tags.values().append_value("t");
                tags.values().append_null();
                tags.values().append_value("");
                tags.append(true);
            }
        }
        s.append(!null_struct);
        // mi: a plain map with a null value.
        if i % 3 != 0 {
            mi.keys().append_value(format!("x{i}"));
            mi.values().append_value(i as i32);
            mi.keys().append_value("z");
            mi.values().append_null();
        }
        mi.append(i % 9 != 4).unwrap();
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from((0..n).collect::<Vec<_>>())),
        Arc::new(m.finish()),
        Arc::new(l.finish()),
        Arc::new(s.finish()),
        Arc::new(mi.finish()),
    ];
    let fields: Vec<Field> = ["id", "m", "l", "s", "mi"]
        .iter()
        .zip(&cols)
        .map(|(n, c)| Field::new(*n, c.data_type().clone(), *n != "id"))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
}

/// The same rows written by pyarrow (Parquet-compliant `element` / `key_value` names).
const PYARROW_NESTED: &str = r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
src, dst = sys.argv[1], sys.argv[2]
t = pq.read_table(src)
ab = pa.struct([("a", pa.int32()), ("b", pa.string())])
xy = pa.struct([("x", pa.int64()), ("y", pa.string())])
schema = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    ("m", pa.map_(pa.string(), ab)),
    ("l", pa.list_(xy)),
    ("s", pa.struct([("name", pa.string()), ("tags", pa.list_(pa.string()))])),
    ("mi", pa.map_(pa.string(), pa.int32())),
])
cols = {c: t.column(c).to_pylist() for c in schema.names}
out = pa.Table.from_pydict(cols, schema=schema)
pq.write_table(out, dst, use_compliant_nested_type=True)
s = pq.read_schema(dst)
print(pq.ParquetFile(dst).schema)
"#;

/// Columns pyiceberg 0.12 misreads: a null `list<struct>` / `map<_, struct>` comes back as an
/// empty one (apache/iceberg-python#3833, #251); DuckDB and floe read the nulls.
const PYICEBERG_NULL_AS_EMPTY: [&str; 2] = ["m", "l"];

/// `input` without `drop`'s columns, written to `out`.
fn without_columns(input: &Path, out: &Path, drop: &[&str]) {
    let f = std::fs::File::open(input).unwrap();
    let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<RecordBatch> = r
        .map(|b| {
            let b = b.unwrap();
            let keep: Vec<usize> = (0..b.num_columns())
                .filter(|i| !drop.contains(&b.schema().field(*i).name().as_str()))
                .collect();
            b.project(&keep).unwrap()
        })
        .collect();
    write_parquet(out, &batches);
}

/// Scans `t` with floe, checks the rows equal `input`'s (canonicalised by the peer harness),
/// then checks DuckDB reads the same rows, and pyiceberg too except for the columns it
/// misreads ([`PYICEBERG_NULL_AS_EMPTY`]).
async fn check_reads(py: &Path, work: &Path, t: &Table, input: &Path, what: &str) {
    let got = work.join(format!("{what}-floe.parquet"));
    let n = floe_expected(t, None, &got).await;
    assert!(n > 0, "{what}: floe read no rows");
    assert_same_rows(py, input, &got, &format!("{what}: floe scan vs input"));
    let partial = work.join(format!("{what}-pyiceberg.parquet"));
    without_columns(input, &partial, &PYICEBERG_NULL_AS_EMPTY);
    let check = |engine: &str, expected: &Path| Check {
        name: format!("{what}-{engine}"),
        metadata: t.metadata_location().to_string(),
        snapshot_id: None,
        expected: expected.to_string_lossy().to_string(),
        engines: Some(vec![engine.into()]),
        refuse: None,
    };
    peer_check(
        py,
        work,
        &[check("duckdb", input), check("pyiceberg", &partial)],
    );
}

/// Regression (issue 14): appending Parquet with `map<…>`, `list<struct<…>>` and
/// `struct<…, list<…>>` failed with "cannot relabel". Files from arrow-rs (`item`, `entries`/
/// `keys`/`values`) and pyarrow (`element`, `key_value`/`key`/`value`) both append through
/// the CLI and the library, and floe, DuckDB and pyiceberg read back the input rows.
#[tokio::test]
async fn nested_parquet_appends_and_reads_back() {
    let Some(py) = peers_python() else { return };
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let rs = d.path().join("nested-rs.parquet");
    write_parquet(&rs, &[nested_batch(40)]);
    let pa = d.path().join("nested-pa.parquet");
    let o = std::process::Command::new(&py)
        .args(["-c", PYARROW_NESTED])
        .arg(&rs)
        .arg(&pa)
        .output()
        .unwrap();
    let layout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        layout.contains("element") && layout.contains("key_value"),
        "pyarrow's layout: {layout}"
    );
    for (name, file) in [("db.rs", &rs), ("db.pa", &pa)] {
        ok(&wh, &["create", name, "--schema", NESTED_DDL]);
        ok(&wh, &["append", name, file.to_str().unwrap()]);
        let t = load(&wh, name).await;
        check_reads(&py, d.path(), &t, file, name).await;
    }
    // The library path: conform arrow-rs batches directly, twice (two data files).
    let cat = catalog(&wh);
    let t = cat
        .create_table(
            &parse_ident("db.lib").unwrap(),
            TableCreation::new(parse_schema(NESTED_DDL).unwrap()),
        )
        .await
        .unwrap();
    let b = nested_batch(40);
    let r = floe::txn::append(&cat, &t, vec![Ok(b.slice(0, 15)), Ok(b.slice(15, 25))])
        .await
        .unwrap();
    check_reads(&py, d.path(), &r.table, &rs, "db.lib").await;
}

/// A type's names, nesting and nullability, without field ids.
fn shape(t: &iceberg::spec::Type) -> String {
    use iceberg::spec::Type;
    let field = |f: &iceberg::spec::NestedField| {
        let req = if f.required { " not null" } else { "" };
        format!("{}:{}{req}", f.name, shape(&f.field_type))
    };
    match t {
        Type::Primitive(p) => p.to_string(),
        Type::Struct(s) => {
            let fs: Vec<String> = s.fields().iter().map(|f| field(f)).collect();
            format!("struct<{}>", fs.join(", "))
        }
        Type::List(l) => format!("list<{}>", field(&l.element_field)),
        Type::Map(m) => format!("map<{}, {}>", field(&m.key_field), field(&m.value_field)),
    }
}

/// Regression (issue 14): `create --schema-from` failed on list/map files ("Field stack
/// underflow"). It infers the schema of both files, and the same file then appends and reads
/// back.
#[tokio::test]
async fn schema_from_nested_parquet() {
    let Some(py) = peers_python() else { return };
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    let rs = d.path().join("nested-rs.parquet");
    write_parquet(&rs, &[nested_batch(30)]);
    let pa = d.path().join("nested-pa.parquet");
    let o = std::process::Command::new(&py)
        .args(["-c", PYARROW_NESTED])
        .arg(&rs)
        .arg(&pa)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = parse_schema(NESTED_DDL).unwrap();
    for (name, file) in [("db.rs", &rs), ("db.pa", &pa)] {
        let f = file.to_str().unwrap();
        ok(&wh, &["create", name, "--schema-from", f]);
        let t = load(&wh, name).await;
        let s = t.metadata().current_schema();
        // Same names, types and ids in Iceberg's order (top-level fields first).
        for (field, id) in [("id", 1), ("m", 2), ("l", 3), ("s", 4), ("mi", 5)] {
            assert_eq!(s.field_id_by_name(field), Some(id), "{name}: {field}");
            assert_eq!(
                shape(&s.field_by_name(field).unwrap().field_type),
                shape(&want.field_by_name(field).unwrap().field_type),
                "{name}: {field}"
            );
        }
        for nested in [
            "m.key",
            "m.value.a",
            "l.element.y",
            "s.tags.element",
            "mi.value",
        ] {
            assert!(
                s.field_by_name(nested).is_some(),
                "{name}: {nested} in {s:?}"
            );
        }
        ok(&wh, &["append", name, f]);
        check_reads(&py, d.path(), &load(&wh, name).await, file, name).await;
    }
}

/// Issue 46 §5: a CSV with uuid and binary columns appends (uuids in their 8-4-4-4-12 form
/// or as 32 hex digits, bytes as hex), `scan` prints uuids in the standard form, and a value
/// that is not a uuid is refused naming its column and line, with nothing committed.
#[test]
fn csv_uuids_and_bytes_append_and_print_in_their_standard_form() {
    let d = tempfile::tempdir().unwrap();
    let wh = d.path().join("wh");
    ok(
        &wh,
        &[
            "create",
            "db.u",
            "--schema",
            "id int, u uuid, b binary, f fixed(2)",
        ],
    );
    let csv = d.path().join("u.csv");
    std::fs::write(
        &csv,
        "id,u,b,f\n\
         1,6ba7b810-9dad-11d1-80b4-00c04fd430c8,00ff,abcd\n\
         2,6BA7B8119DAD11D180B400C04FD430C8,,0001\n\
         3,,,\n",
    )
    .unwrap();
    ok(&wh, &["append", "db.u", csv.to_str().unwrap()]);
    let out = ok(&wh, &["scan", "db.u", "--format", "csv"]);
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "1,6ba7b810-9dad-11d1-80b4-00c04fd430c8,00ff,abcd",
            "2,6ba7b811-9dad-11d1-80b4-00c04fd430c8,,0001",
            "3,,,",
            "id,u,b,f",
        ],
        "{out}"
    );
    let json = ok(&wh, &["scan", "db.u", "--json", "--where", "id = 1"]);
    assert!(
        json.contains("\"u\":\"6ba7b810-9dad-11d1-80b4-00c04fd430c8\""),
        "{json}"
    );
    let table = ok(&wh, &["scan", "db.u", "--where", "id = 2"]);
    assert!(
        table.contains("6ba7b811-9dad-11d1-80b4-00c04fd430c8"),
        "{table}"
    );
    // The printed form appends again: a round trip.
    let back = d.path().join("back.csv");
    std::fs::write(&back, &out).unwrap();
    ok(&wh, &["append", "db.u", back.to_str().unwrap()]);
    assert_eq!(ok(&wh, &["scan", "db.u", "--count"]).trim(), "6");
    let bad = d.path().join("bad.csv");
    std::fs::write(
        &bad,
        "id,u\n7,6ba7b810-9dad-11d1-80b4-00c04fd430c8\n8,not-a-uuid\n",
    )
    .unwrap();
    let e = refused(&wh, &["append", "db.u", bad.to_str().unwrap()]);
    assert!(
        e.contains("bad.csv")
            && e.contains("column 'u'")
            && e.contains("line 3")
            && e.contains("not-a-uuid"),
        "{e}"
    );
    let bad = d.path().join("badf.csv");
    std::fs::write(&bad, "id,f\n9,abc\n").unwrap();
    let e = refused(&wh, &["append", "db.u", bad.to_str().unwrap()]);
    assert!(
        e.contains("column 'f'") && e.contains("4 hex digits"),
        "{e}"
    );
    assert_eq!(ok(&wh, &["scan", "db.u", "--count"]).trim(), "6");
}
