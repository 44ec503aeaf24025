//! Differential testing of predicates: a seeded table of every primitive type floe writes
//! (plus a struct, a list and a map), with nulls, NaN, ±0.0 and extremes, laid out in several
//! files, row groups, partitions (identity, bucket on int and uuid, day, hour, truncate on a
//! decimal) and sort orders, a table clustered on a key (bucket + sort + bloom filters +
//! small pages) and one z-ordered on two columns by a rewrite; seeded random predicates over
//! it. Each predicate
//! runs through the library's `Scan::filter`, a sample through `floe scan --where`, and
//! through DELETE and UPDATE in copy-on-write and merge-on-read on v2 and v3 copies of the
//! table; every answer is compared row for row with DuckDB over the same rows as plain
//! Parquet, and a sample with Spark reading floe's table.
//!
//! `FLOE_DIFF_CASES` (default 2000), `FLOE_DIFF_SEED` (default 1), `FLOE_DIFF_ROWS` (default
//! 3000), `FLOE_DIFF_DML` (`all`: every predicate through all four DML tables; default: each
//! predicate through DELETE on one and UPDATE on another, in rotation), `FLOE_DIFF_SPARK`
//! (Spark sample size, default 100; 0 skips). Regressions found earlier are kept in
//! `spec-fixtures/differential/regressions.json` and replayed first.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, FixedSizeBinaryArray,
    Float32Array, Float64Array, Int32Array, Int32Builder, Int64Array, ListArray, MapBuilder,
    RecordBatch, StringArray, StringBuilder, StructArray, Time64MicrosecondArray,
    TimestampMicrosecondArray, TimestampNanosecondArray,
};
use arrow::datatypes::{DataType, Field, Fields, Int32Type, Schema};
use floe::catalog::{Catalog, TableCreation};
use floe::scan::Scan;
use floe::spec::{parse_partition_spec, parse_schema, parse_sort_order, FormatVersion};
use floe::table::parse_ident;
use floe::Table;
use futures::TryStreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::*;

// ---------------------------------------------------------------- the columns

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ty {
    Int,
    Long,
    Float,
    Double,
    /// decimal(10,2)
    Dec10,
    /// decimal(38,10)
    Dec38,
    Str,
    Bin,
    Bool,
    Date,
    Time,
    Ts,
    Tstz,
    Tsn,
    Uuid,
    Fixed4,
}

/// A column a predicate can name (struct fields by their dotted path).
struct Col {
    name: &'static str,
    ty: Ty,
}

const COLS: &[Col] = &[
    Col {
        name: "id",
        ty: Ty::Long,
    },
    Col {
        name: "i",
        ty: Ty::Int,
    },
    Col {
        name: "l",
        ty: Ty::Long,
    },
    Col {
        name: "f",
        ty: Ty::Float,
    },
    Col {
        name: "d",
        ty: Ty::Double,
    },
    Col {
        name: "dec",
        ty: Ty::Dec10,
    },
    Col {
        name: "big",
        ty: Ty::Dec38,
    },
    Col {
        name: "s",
        ty: Ty::Str,
    },
    Col {
        name: "b",
        ty: Ty::Bin,
    },
    Col {
        name: "flag",
        ty: Ty::Bool,
    },
    Col {
        name: "dt",
        ty: Ty::Date,
    },
    Col {
        name: "tm",
        ty: Ty::Time,
    },
    Col {
        name: "ts",
        ty: Ty::Ts,
    },
    Col {
        name: "tz",
        ty: Ty::Tstz,
    },
    Col {
        name: "tsn",
        ty: Ty::Tsn,
    },
    Col {
        name: "u",
        ty: Ty::Uuid,
    },
    Col {
        name: "fx",
        ty: Ty::Fixed4,
    },
    Col {
        name: "st.a",
        ty: Ty::Int,
    },
    Col {
        name: "st.b",
        ty: Ty::Str,
    },
];

const DDL: &str = "id long not null, i int, l long, f float, d double, dec decimal(10,2), \
                   big decimal(38,10), s string, b binary, flag boolean, dt date, tm time, \
                   ts timestamp, tz timestamptz, tsn timestamp_ns, u uuid, fx fixed(4), \
                   st struct<a: int, b: string>, ls list<int>, mp map<string, int>, mark int";

/// Columns a v2 table cannot have (timestamp_ns is v3) and Spark 3.5 cannot read (time).
fn v2_safe(col: &str) -> bool {
    col != "tsn"
}
fn spark_safe(col: &str) -> bool {
    col != "tsn" && col != "tm"
}

// ---------------------------------------------------------------- the rows

/// One generated value.
#[derive(Clone, Debug)]
enum V {
    Null,
    I(i64),
    F(f64),
    /// Unscaled decimal.
    D(i128),
    S(String),
    B(Vec<u8>),
    Bool(bool),
}

struct Data {
    rows: usize,
    /// Values per column of [`COLS`], row-major by column.
    values: Vec<Vec<V>>,
    /// Which rows have a NULL struct `st`.
    st_null: Vec<bool>,
    list: Vec<Option<Vec<Option<i32>>>>,
}

const DAY_US: i64 = 86_400_000_000;
/// 2024-01-01T00:00:00Z in microseconds.
const BASE_US: i64 = 1_704_067_200_000_000;

fn pick<T: Clone>(rng: &mut StdRng, xs: &[T]) -> T {
    xs[rng.gen_range(0..xs.len())].clone()
}

fn gen_value(rng: &mut StdRng, ty: Ty) -> V {
    if rng.gen_bool(0.1) {
        return V::Null;
    }
    let special = rng.gen_bool(0.15);
    match ty {
        Ty::Int => V::I(if special {
            pick(rng, &[i32::MIN as i64, i32::MAX as i64, 0, -1, 1])
        } else {
            rng.gen_range(-1000..1000)
        }),
        Ty::Long => V::I(if special {
            pick(rng, &[i64::MIN, i64::MAX, 0, -1, 1, 1 << 53])
        } else {
            rng.gen_range(-100_000..100_000)
        }),
        Ty::Float => V::F(if special {
            pick(
                rng,
                &[
                    f32::NAN as f64,
                    0.0,
                    -0.0,
                    f32::INFINITY as f64,
                    f32::NEG_INFINITY as f64,
                    f32::MAX as f64,
                    f32::MIN as f64,
                    f32::MIN_POSITIVE as f64,
                    0.1f32 as f64,
                ],
            )
        } else {
            (rng.gen_range(-400i32..400) as f32 / 4.0) as f64
        }),
        Ty::Double => V::F(if special {
            pick(
                rng,
                &[
                    f64::NAN,
                    0.0,
                    -0.0,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    f64::MAX,
                    f64::MIN,
                    1e-300,
                    0.1,
                ],
            )
        } else {
            rng.gen_range(-1000i32..1000) as f64 / 8.0
        }),
        Ty::Dec10 => V::D(if special {
            pick(rng, &[9_999_999_999i128, -9_999_999_999, 0, 1, -1])
        } else {
            rng.gen_range(-100_000..100_000)
        }),
        Ty::Dec38 => V::D(if special {
            let max = 10i128.pow(38) - 1;
            pick(rng, &[max, -max, 0, 1, -1, 10i128.pow(30)])
        } else {
            rng.gen_range(-10i128.pow(14)..10i128.pow(14))
        }),
        Ty::Str => V::S(if special {
            pick(
                rng,
                &[
                    "".to_string(),
                    "it's".into(),
                    "%".into(),
                    "_".into(),
                    "a%b".into(),
                    "a_b".into(),
                    "é".into(),
                    "日本".into(),
                    "\u{1F600}".into(),
                    "Z".into(),
                    "zzz".into(),
                ],
            )
        } else {
            let alphabet = ['a', 'b', 'c', 'A', 'é', '_', '%', ' ', '0'];
            let n = rng.gen_range(0..5);
            (0..n).map(|_| pick(rng, &alphabet)).collect()
        }),
        Ty::Bin => V::B(if special {
            pick(rng, &[vec![], vec![0], vec![0xff], vec![0xff, 0xff, 0xff]])
        } else {
            let n = rng.gen_range(0..4);
            (0..n).map(|_| rng.gen_range(0..4u8) * 0x55).collect()
        }),
        Ty::Bool => V::Bool(rng.gen_bool(0.5)),
        Ty::Date => V::I(if special {
            // 1900-01-01, 1970-01-01, 2100-12-31
            pick(rng, &[-25_567i64, 0, 47_846])
        } else {
            19_723 + rng.gen_range(0..12)
        }),
        Ty::Time => V::I(if special {
            pick(rng, &[0i64, 86_399_999_999, 43_200_000_000])
        } else {
            rng.gen_range(0..24) * 3_600_000_000 + rng.gen_range(0..4) * 15 * 60_000_000
        }),
        Ty::Tstz if !special => V::I(BASE_US + rng.gen_range(0..6 * 60) * 60_000_000),
        Ty::Ts | Ty::Tstz => V::I(if special {
            // 1900-01-01, 1970-01-01, 2100-12-31
            pick(rng, &[-2_208_988_800_000_000i64, 0, 4_133_894_400_000_000])
        } else {
            BASE_US + rng.gen_range(0..5) * DAY_US + rng.gen_range(0..24) * 3_600_000_000
        }),
        Ty::Tsn => V::I(if special {
            pick(rng, &[0i64, -1_000, 1_000])
        } else {
            (BASE_US + rng.gen_range(0..5) * DAY_US) * 1000 + rng.gen_range(0..3) * 500
        }),
        Ty::Uuid => V::B(if special {
            pick(
                rng,
                &[vec![0u8; 16], vec![0xffu8; 16], {
                    let mut v = vec![0u8; 16];
                    v[0] = 0x80;
                    v
                }],
            )
        } else {
            (0..16).map(|_| rng.gen_range(0..3u8) * 0x7f).collect()
        }),
        Ty::Fixed4 => V::B(if special {
            pick(rng, &[vec![0u8; 4], vec![0xffu8; 4]])
        } else {
            (0..4).map(|_| rng.gen_range(0..3u8) * 0x7f).collect()
        }),
    }
}

fn gen_data(seed: u64, rows: usize) -> Data {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut values: Vec<Vec<V>> = COLS
        .iter()
        .map(|c| (0..rows).map(|_| gen_value(&mut rng, c.ty)).collect())
        .collect();
    values[0] = (0..rows as i64).map(V::I).collect();
    let st_null = (0..rows).map(|_| rng.gen_bool(0.08)).collect();
    let list = (0..rows)
        .map(|_| {
            (!rng.gen_bool(0.1)).then(|| {
                (0..rng.gen_range(0..3))
                    .map(|_| (!rng.gen_bool(0.2)).then(|| rng.gen_range(-5..5)))
                    .collect()
            })
        })
        .collect();
    Data {
        rows,
        values,
        st_null,
        list,
    }
}

fn col_index(name: &str) -> usize {
    COLS.iter().position(|c| c.name == name).unwrap()
}

impl Data {
    fn ints(&self, c: &str, r: std::ops::Range<usize>) -> Vec<Option<i64>> {
        self.values[col_index(c)][r]
            .iter()
            .map(|v| match v {
                V::I(i) => Some(*i),
                _ => None,
            })
            .collect()
    }
    fn floats(&self, c: &str, r: std::ops::Range<usize>) -> Vec<Option<f64>> {
        self.values[col_index(c)][r]
            .iter()
            .map(|v| match v {
                V::F(f) => Some(*f),
                _ => None,
            })
            .collect()
    }
    fn decs(&self, c: &str, r: std::ops::Range<usize>) -> Vec<Option<i128>> {
        self.values[col_index(c)][r]
            .iter()
            .map(|v| match v {
                V::D(d) => Some(*d),
                _ => None,
            })
            .collect()
    }
    fn strs(&self, c: &str, r: std::ops::Range<usize>) -> Vec<Option<String>> {
        self.values[col_index(c)][r]
            .iter()
            .map(|v| match v {
                V::S(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    }
    fn bins(&self, c: &str, r: std::ops::Range<usize>) -> Vec<Option<Vec<u8>>> {
        self.values[col_index(c)][r]
            .iter()
            .map(|v| match v {
                V::B(b) => Some(b.clone()),
                _ => None,
            })
            .collect()
    }

    /// Rows `r` as a batch of the table's columns but `dropped`.
    fn batch(&self, r: std::ops::Range<usize>, dropped: &[&str]) -> RecordBatch {
        let n = r.len();
        let fixed = |c: &str, w: i32| -> ArrayRef {
            let vals = self.bins(c, r.clone());
            Arc::new(
                FixedSizeBinaryArray::try_from_sparse_iter_with_size(vals.into_iter(), w).unwrap(),
            )
        };
        let i32s = |c: &str| -> Int32Array {
            self.ints(c, r.clone())
                .into_iter()
                .map(|v| v.map(|v| v as i32))
                .collect()
        };
        let ts = |c: &str| TimestampMicrosecondArray::from(self.ints(c, r.clone()));
        let st_fields = Fields::from(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Utf8, true),
        ]);
        let st_nulls: Vec<bool> = self.st_null[r.clone()].iter().map(|n| !n).collect();
        let st = StructArray::new(
            st_fields.clone(),
            vec![
                Arc::new(i32s("st.a")),
                Arc::new(StringArray::from(self.strs("st.b", r.clone()))),
            ],
            Some(st_nulls.into()),
        );
        let ls = ListArray::from_iter_primitive::<Int32Type, _, _>(self.list[r.clone()].to_vec());
        // The map: key `k{j}` for the list's j-th element, its value that element.
        let mut mp = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
        for entry in &self.list[r.clone()] {
            match entry {
                Some(items) => {
                    for (j, v) in items.iter().enumerate() {
                        mp.keys().append_value(format!("k{j}"));
                        mp.values().append_option(*v);
                    }
                    mp.append(true).unwrap();
                }
                None => mp.append(false).unwrap(),
            }
        }
        let mut cols: Vec<(&str, ArrayRef, bool)> = vec![
            (
                "id",
                Arc::new(Int64Array::from_iter_values(r.clone().map(|i| i as i64))),
                false,
            ),
            ("i", Arc::new(i32s("i")), true),
            (
                "l",
                Arc::new(Int64Array::from(self.ints("l", r.clone()))),
                true,
            ),
            (
                "f",
                Arc::new(
                    self.floats("f", r.clone())
                        .into_iter()
                        .map(|v| v.map(|v| v as f32))
                        .collect::<Float32Array>(),
                ),
                true,
            ),
            (
                "d",
                Arc::new(Float64Array::from(self.floats("d", r.clone()))),
                true,
            ),
            (
                "dec",
                Arc::new(
                    Decimal128Array::from(self.decs("dec", r.clone()))
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
                true,
            ),
            (
                "big",
                Arc::new(
                    Decimal128Array::from(self.decs("big", r.clone()))
                        .with_precision_and_scale(38, 10)
                        .unwrap(),
                ),
                true,
            ),
            (
                "s",
                Arc::new(StringArray::from(self.strs("s", r.clone()))),
                true,
            ),
            (
                "b",
                Arc::new(BinaryArray::from_iter(self.bins("b", r.clone()))),
                true,
            ),
            (
                "flag",
                Arc::new(
                    self.values[col_index("flag")][r.clone()]
                        .iter()
                        .map(|v| match v {
                            V::Bool(b) => Some(*b),
                            _ => None,
                        })
                        .collect::<BooleanArray>(),
                ),
                true,
            ),
            (
                "dt",
                Arc::new(
                    self.ints("dt", r.clone())
                        .into_iter()
                        .map(|v| v.map(|v| v as i32))
                        .collect::<Date32Array>(),
                ),
                true,
            ),
            (
                "tm",
                Arc::new(Time64MicrosecondArray::from(self.ints("tm", r.clone()))),
                true,
            ),
            ("ts", Arc::new(ts("ts")), true),
            ("tz", Arc::new(ts("tz").with_timezone("+00:00")), true),
            (
                "tsn",
                Arc::new(TimestampNanosecondArray::from(self.ints("tsn", r.clone()))),
                true,
            ),
            ("u", fixed("u", 16), true),
            ("fx", fixed("fx", 4), true),
            ("st", Arc::new(st), true),
            ("ls", Arc::new(ls), true),
            ("mp", Arc::new(mp.finish()), true),
            ("mark", Arc::new(Int32Array::from(vec![0; n])), true),
        ];
        cols.retain(|(n, _, _)| !dropped.contains(n));
        let fields: Vec<Field> = cols
            .iter()
            .map(|(n, a, nullable)| Field::new(*n, a.data_type().clone(), *nullable))
            .collect();
        RecordBatch::try_new(
            Arc::new(Schema::new(fields)),
            cols.into_iter().map(|(_, a, _)| a).collect(),
        )
        .unwrap()
    }

    /// One row, for failure reports.
    fn describe(&self, row: usize) -> String {
        COLS.iter()
            .enumerate()
            .map(|(c, col)| format!("{}={:?}", col.name, self.values[c][row]))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

// ---------------------------------------------------------------- literals and predicates

/// A literal rendered in each dialect.
#[derive(Clone, Debug)]
struct Lit {
    floe: String,
    duck: String,
    spark: String,
    /// Spark over the Iceberg table, where a uuid is a string (over Parquet it is binary).
    spark_ice: String,
}

impl Lit {
    fn same(s: String) -> Lit {
        Lit {
            floe: s.clone(),
            duck: s.clone(),
            spark: s.clone(),
            spark_ice: s,
        }
    }
    fn three(floe: String, duck: String, spark: String) -> Lit {
        Lit {
            floe,
            duck,
            spark_ice: spark.clone(),
            spark,
        }
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}
fn spark_quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}
fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
fn dec_text(v: i128, scale: u32) -> String {
    let neg = v < 0;
    let a = v.unsigned_abs();
    let p = 10u128.pow(scale);
    let s = if scale == 0 {
        format!("{a}")
    } else {
        format!("{}.{:0w$}", a / p, a % p, w = scale as usize)
    };
    if neg {
        format!("-{s}")
    } else {
        s
    }
}
fn ts_text(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S%.6f")
        .to_string()
}
fn uuid_text(b: &[u8]) -> String {
    uuid::Uuid::from_slice(b).unwrap().hyphenated().to_string()
}

fn float_lit(x: f64) -> Lit {
    if x.is_nan() || x.is_infinite() {
        let word = if x.is_nan() {
            "NaN"
        } else if x > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        };
        return Lit::three(
            format!("CAST('{word}' AS double)"),
            format!("'{word}'::DOUBLE"),
            format!("CAST('{word}' AS DOUBLE)"),
        );
    }
    let t = if x == 0.0 && x.is_sign_negative() {
        "-0.0".to_string()
    } else {
        // Shortest text that reads back as x, without an exponent (a decimal literal) while
        // it has at most 38 digits; beyond, with one (a double: every engine refuses a
        // decimal literal no decimal(38) holds).
        let s = format!("{x:?}");
        let plain = if s.contains('e') { format!("{x}") } else { s };
        let (int, frac) = plain
            .trim_start_matches('-')
            .split_once('.')
            .unwrap_or((&plain, ""));
        if int.trim_start_matches(['-', '0']).len() + frac.len() > 38 {
            format!("{x:e}")
        } else {
            plain
        }
    };
    Lit::same(t)
}

/// A decimal literal. One that no decimal(38) holds (more than 38 digits once leading zeros
/// are dropped, trailing zeros after the point counted, as Spark counts them) is refused by
/// Spark and by floe, and read as a DOUBLE by DuckDB; DuckDB is given an `error(…)` in its
/// place, so both sides refuse (docs/src/testing.md, "Known differences"). Found by the long
/// run at seed 7 (case p1217).
fn dec_lit(t: String) -> Lit {
    let (int, frac) = t
        .trim_start_matches('-')
        .split_once('.')
        .unwrap_or((&t, ""));
    let int = int.trim_start_matches(['-', '0']);
    if int.len() + frac.len() <= 38 {
        return Lit::same(t);
    }
    Lit {
        duck: "error('decimal literal beyond 38 digits')".into(),
        ..Lit::same(t)
    }
}

/// A literal for a column of type `ty`: a value from the data, a special value, or one
/// outside the column's range or scale.
fn gen_lit(rng: &mut StdRng, data: &Data, col: usize, ty: Ty) -> Lit {
    let from_data = rng.gen_bool(0.6);
    let v = if from_data {
        let mut v = V::Null;
        for _ in 0..20 {
            v = data.values[col][rng.gen_range(0..data.rows)].clone();
            if !matches!(v, V::Null) {
                break;
            }
        }
        v
    } else {
        gen_value(rng, ty)
    };
    if matches!(v, V::Null) {
        return gen_lit(rng, data, col, ty);
    }
    match (ty, v) {
        (Ty::Int | Ty::Long, V::I(i)) => {
            let extra = if rng.gen_bool(0.05) {
                pick(
                    rng,
                    &[
                        "3000000000",
                        "-3000000000",
                        "9223372036854775808",
                        "1.5",
                        "-0.5",
                    ],
                )
                .to_string()
            } else {
                i.to_string()
            };
            Lit::same(extra)
        }
        (Ty::Float, V::F(x)) => float_lit((x as f32) as f64),
        (Ty::Double, V::F(x)) => float_lit(x),
        (Ty::Dec10 | Ty::Dec38, V::D(d)) => {
            let scale = if ty == Ty::Dec10 { 2 } else { 10 };
            let t = match rng.gen_range(0..10) {
                // More digits after the point than the column has.
                0 => format!("{}{}", dec_text(d, scale), pick(rng, &["1", "5", "9", "0"])),
                1 => dec_text(d, 0),
                2 => pick(
                    rng,
                    &[
                        "100000000000".to_string(),
                        "-0.005".into(),
                        "0.001".into(),
                        "99999999999999999999999999999".into(),
                        "12345678901234567890123456789.123456789".into(),
                    ],
                ),
                _ => dec_text(d, scale),
            };
            dec_lit(t)
        }
        (Ty::Str, V::S(s)) => Lit::three(quote(&s), quote(&s), spark_quote(&s)),
        (Ty::Bin | Ty::Fixed4, V::B(b)) => Lit::three(
            format!("X'{}'", hex(&b)),
            format!("from_hex('{}')", hex(&b)),
            format!("X'{}'", hex(&b)),
        ),
        (Ty::Uuid, V::B(b)) => Lit {
            floe: quote(&uuid_text(&b)),
            duck: format!("from_hex('{}')", hex(&b)),
            spark: format!("X'{}'", hex(&b)),
            spark_ice: quote(&uuid_text(&b)),
        },
        (Ty::Bool, V::Bool(b)) => Lit::same(if b { "TRUE" } else { "FALSE" }.into()),
        (Ty::Date, V::I(d)) => {
            let t = chrono::DateTime::from_timestamp(d * 86_400, 0)
                .unwrap()
                .format("%Y-%m-%d")
                .to_string();
            Lit::same(format!("DATE '{t}'"))
        }
        (Ty::Time, V::I(us)) => {
            let t = chrono::NaiveTime::from_num_seconds_from_midnight_opt(
                (us / 1_000_000) as u32,
                (us % 1_000_000) as u32 * 1000,
            )
            .unwrap()
            .format("%H:%M:%S%.6f")
            .to_string();
            Lit::three(quote(&t), format!("TIME '{t}'"), quote(&t))
        }
        (Ty::Ts, V::I(us)) => {
            let t = ts_text(us);
            Lit::three(
                format!("TIMESTAMP '{t}'"),
                format!("TIMESTAMP '{t}'"),
                format!("TIMESTAMP_NTZ '{t}'"),
            )
        }
        (Ty::Tstz, V::I(us)) => {
            let t = ts_text(us);
            Lit::three(
                quote(&format!("{t}+00:00")),
                format!("TIMESTAMPTZ '{t}+00'"),
                format!("TIMESTAMP '{t}+00:00'"),
            )
        }
        (Ty::Tsn, V::I(ns)) => {
            let t = ts_text(ns.div_euclid(1000));
            Lit::three(quote(&t), format!("TIMESTAMP_NS '{t}'"), quote(&t))
        }
        (ty, v) => panic!("no literal for {ty:?} from {v:?}"),
    }
}

#[derive(Clone, Debug)]
enum Operand {
    Col(usize),
    Lit(Lit),
}

#[derive(Clone, Debug)]
enum P {
    Cmp(Operand, &'static str, Operand),
    In(usize, Vec<Option<Lit>>, bool),
    Between(usize, Lit, Lit, bool),
    IsNull(usize, bool),
    IsNan(usize, bool),
    Like(usize, String, bool),
    Mod(usize, i64, i64),
    And(Box<P>, Box<P>),
    Or(Box<P>, Box<P>),
    Not(Box<P>),
}

const OPS: &[&str] = &["=", "!=", "<", "<=", ">", ">="];

/// Type families two columns can be compared across.
fn family(t: Ty) -> u8 {
    match t {
        Ty::Int | Ty::Long => 0,
        Ty::Float | Ty::Double => 1,
        Ty::Dec10 | Ty::Dec38 => 2,
        Ty::Date | Ty::Ts => 3,
        other => 10 + other as u8,
    }
}

fn gen_pred(rng: &mut StdRng, data: &Data, depth: u32) -> P {
    if depth < 3 && rng.gen_bool(0.35) {
        let a = Box::new(gen_pred(rng, data, depth + 1));
        return match rng.gen_range(0..5) {
            0 | 1 => P::And(a, Box::new(gen_pred(rng, data, depth + 1))),
            2 | 3 => P::Or(a, Box::new(gen_pred(rng, data, depth + 1))),
            _ => P::Not(a),
        };
    }
    let c = rng.gen_range(0..COLS.len());
    let ty = COLS[c].ty;
    match rng.gen_range(0..20) {
        0..=8 => {
            let op = pick(rng, OPS);
            let lit = Operand::Lit(gen_lit(rng, data, c, ty));
            if rng.gen_bool(0.15) {
                P::Cmp(lit, op, Operand::Col(c))
            } else {
                P::Cmp(Operand::Col(c), op, lit)
            }
        }
        9 => {
            let others: Vec<usize> = (0..COLS.len())
                .filter(|&o| o != c && family(COLS[o].ty) == family(ty))
                .collect();
            match others.is_empty() {
                true => P::IsNull(c, rng.gen_bool(0.5)),
                false => P::Cmp(
                    Operand::Col(c),
                    pick(rng, OPS),
                    Operand::Col(pick(rng, &others)),
                ),
            }
        }
        10..=12 => {
            // Short lists are OR-ed equalities; 8 or more literals are probed in a set.
            let n = match rng.gen_bool(0.3) {
                true => rng.gen_range(8..16),
                false => rng.gen_range(1..5),
            };
            let items = (0..n)
                .map(|_| (!rng.gen_bool(0.1)).then(|| gen_lit(rng, data, c, ty)))
                .collect();
            P::In(c, items, rng.gen_bool(0.4))
        }
        13 | 14 => P::Between(
            c,
            gen_lit(rng, data, c, ty),
            gen_lit(rng, data, c, ty),
            rng.gen_bool(0.3),
        ),
        15 => P::IsNull(c, rng.gen_bool(0.5)),
        16 => {
            let fl = if rng.gen_bool(0.5) { "f" } else { "d" };
            P::IsNan(col_index(fl), rng.gen_bool(0.4))
        }
        17 | 18 => {
            let sc = if rng.gen_bool(0.8) { "s" } else { "st.b" };
            let ci = col_index(sc);
            let l = gen_lit(rng, data, ci, Ty::Str);
            let base = l.floe[1..l.floe.len() - 1].replace("''", "'");
            let cut: String = base.chars().take(rng.gen_range(0..3)).collect();
            let pat = match rng.gen_range(0..4) {
                0 => format!("{cut}%"),
                1 => format!("%{cut}"),
                2 => format!("_{cut}%"),
                _ => format!("%{cut}%"),
            };
            P::Like(ci, pat, rng.gen_bool(0.3))
        }
        _ => {
            let ic = if rng.gen_bool(0.5) { "l" } else { "i" };
            let k = rng.gen_range(2..8);
            P::Mod(col_index(ic), k, rng.gen_range(-(k - 1)..k))
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Dialect {
    Floe,
    Duck,
    Spark,
    SparkIceberg,
}

fn render(p: &P, d: Dialect) -> String {
    let lit = |l: &Lit| match d {
        Dialect::Floe => l.floe.clone(),
        Dialect::Duck => l.duck.clone(),
        Dialect::Spark => l.spark.clone(),
        Dialect::SparkIceberg => l.spark_ice.clone(),
    };
    // floe finds a column whatever its case (one name rule): every other column is written
    // in upper case on floe's side.
    let col = |c: usize| match d {
        Dialect::Floe if c % 2 == 1 => COLS[c].name.to_uppercase(),
        _ => COLS[c].name.to_string(),
    };
    let opnd = |o: &Operand| match o {
        Operand::Col(c) => col(*c),
        Operand::Lit(l) => lit(l),
    };
    let not = |n: bool| if n { "NOT " } else { "" };
    match p {
        P::Cmp(a, op, b) => format!("{} {op} {}", opnd(a), opnd(b)),
        P::In(c, items, neg) => format!(
            "{} {}IN ({})",
            col(*c),
            not(*neg),
            items
                .iter()
                .map(|i| i.as_ref().map(lit).unwrap_or_else(|| "NULL".into()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        P::Between(c, lo, hi, neg) => {
            format!(
                "{} {}BETWEEN {} AND {}",
                col(*c),
                not(*neg),
                lit(lo),
                lit(hi)
            )
        }
        P::IsNull(c, neg) => format!("{} IS {}NULL", col(*c), not(*neg)),
        P::IsNan(c, neg) => match d {
            // Spark: isnan(NULL) is FALSE; DuckDB's is NULL.
            Dialect::Duck => format!("{}coalesce(isnan({}), false)", not(*neg), col(*c)),
            _ => format!("{}isnan({})", not(*neg), col(*c)),
        },
        P::Like(c, pat, neg) => {
            let q = if matches!(d, Dialect::Spark | Dialect::SparkIceberg) {
                spark_quote(pat)
            } else {
                quote(pat)
            };
            format!("{} {}LIKE {q}", col(*c), not(*neg))
        }
        P::Mod(c, k, r) => format!("{} % {k} = {r}", col(*c)),
        P::And(a, b) => format!("({}) AND ({})", render(a, d), render(b, d)),
        P::Or(a, b) => format!("({}) OR ({})", render(a, d), render(b, d)),
        P::Not(a) => format!("NOT ({})", render(a, d)),
    }
}

fn columns_of(p: &P, out: &mut Vec<&'static str>) {
    let mut add = |c: usize| out.push(COLS[c].name);
    match p {
        P::Cmp(a, _, b) => {
            for o in [a, b] {
                if let Operand::Col(c) = o {
                    add(*c);
                }
            }
        }
        P::In(c, ..)
        | P::Between(c, ..)
        | P::IsNull(c, _)
        | P::IsNan(c, _)
        | P::Like(c, ..)
        | P::Mod(c, ..) => add(*c),
        P::And(a, b) | P::Or(a, b) => {
            columns_of(a, out);
            columns_of(b, out);
        }
        P::Not(a) => columns_of(a, out),
    }
}

/// The (precision, scale) Spark 3.5 gives a numeric literal's text, `None` when it is a
/// double (more than 38 digits, or an exponent).
fn spark_literal_decimal(text: &str) -> Option<(u32, u32)> {
    let t = text.trim_start_matches('-');
    if t.contains(['e', 'E']) || !t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if frac.is_empty() {
        // Integers: int, bigint, then decimal(n, 0); as decimals: (10,0), (20,0), (n,0).
        let n = int.trim_start_matches('0').len().max(1) as u32;
        return match t.parse::<i64>() {
            Ok(v) if i32::try_from(v).is_ok() => Some((10, 0)),
            Ok(_) => Some((20, 0)),
            Err(_) if n <= 38 => Some((n, 0)),
            Err(_) => None,
        };
    }
    // Java BigDecimal: precision counts the significant digits, at least the scale.
    let digits = format!("{int}{frac}");
    let p = (digits.trim_start_matches('0').len().max(1) as u32).max(frac.len() as u32);
    (p <= 38).then_some((p, frac.len() as u32))
}

/// Whether Spark 3.5 evaluates `p` through a decimal type wider than 38 digits: it widens a
/// decimal column and a decimal literal to `decimal(max int digits + max scale)`, caps that
/// at 38, and (not ANSI) turns every value that no longer fits into NULL, so
/// `big < 99999999999999999999999999999` is FALSE for every row. floe compares by value, as
/// the rules and DuckDB do (docs/src/testing.md, "Known differences").
fn spark_decimal_overflow(p: &P) -> bool {
    let col_ps = |c: usize| match COLS[c].ty {
        Ty::Dec10 => Some((10u32, 2u32)),
        Ty::Dec38 => Some((38, 10)),
        _ => None,
    };
    let wider = |c: usize, lits: &[&Lit]| {
        let Some((pc, sc)) = col_ps(c) else {
            return false;
        };
        lits.iter().any(|l| {
            spark_literal_decimal(&l.spark)
                .is_some_and(|(pl, sl)| (pc - sc).max(pl - sl) + sc.max(sl) > 38)
        })
    };
    match p {
        P::Cmp(Operand::Col(c), _, Operand::Lit(l))
        | P::Cmp(Operand::Lit(l), _, Operand::Col(c)) => wider(*c, &[l]),
        P::In(c, items, _) => wider(*c, &items.iter().flatten().collect::<Vec<_>>()),
        P::Between(c, lo, hi, _) => wider(*c, &[lo, hi]),
        P::And(a, b) | P::Or(a, b) => spark_decimal_overflow(a) || spark_decimal_overflow(b),
        P::Not(a) => spark_decimal_overflow(a),
        _ => false,
    }
}

// ---------------------------------------------------------------- the engines

/// A case: its name and its text in each dialect.
#[derive(Clone, Debug)]
struct Case {
    name: String,
    floe: String,
    duck: String,
    spark: String,
    spark_ice: String,
    columns: Vec<&'static str>,
    /// Spark 3.5 widens a decimal beyond 38 digits here ([`spark_decimal_overflow`]).
    spark_overflow: bool,
    /// A regression case floe must refuse: the words its error must contain.
    floe_error: Option<String>,
}

/// An engine's answer: the matching ids, or its error.
type Answer = Result<Vec<bool>, String>;

fn decode_answers(path: &Path, rows: usize) -> HashMap<String, Answer> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let name = v["name"].as_str().unwrap().to_string();
            let ans = match v.get("bitmap").and_then(|b| b.as_str()) {
                Some(hexs) => {
                    let bytes: Vec<u8> = (0..hexs.len() / 2)
                        .map(|i| u8::from_str_radix(&hexs[2 * i..2 * i + 2], 16).unwrap())
                        .collect();
                    Ok((0..rows)
                        .map(|i| bytes[i / 8] & (1 << (i % 8)) != 0)
                        .collect())
                }
                None => Err(v["error"].as_str().unwrap_or("?").to_string()),
            };
            (name, ans)
        })
        .collect()
}

fn run_engine(
    py: &Path,
    engine: &str,
    work: &Path,
    source: serde_json::Value,
    rows: usize,
    cases: &[(String, String, String)],
) -> HashMap<String, Answer> {
    let spec_path = work.join(format!("{engine}-cases.json"));
    let out_path = work.join(format!("{engine}-answers.jsonl"));
    let mut spec = source;
    spec["rows"] = rows.into();
    spec["cases"] = cases
        .iter()
        .map(|(n, s, i)| serde_json::json!({"name": n, "sql": s, "iceberg_sql": i}))
        .collect();
    std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
    let o = std::process::Command::new(py)
        .arg(repo().join("tools/peers/diff_engine.py"))
        .arg(engine)
        .arg(&spec_path)
        .arg(&out_path)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{engine} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    decode_answers(&out_path, rows)
}

async fn floe_ids(t: &Table, sql: &str, rows: usize) -> Answer {
    let e = floe::expr::parse_expr(sql).map_err(|e| e.to_string())?;
    // Half the cases read each file in parts (a part per 97 rows, up to 12 at once).
    let split = sql
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()))
        % 2;
    let scan = match split {
        0 => Scan::new(t).concurrency(12).split_rows(97),
        _ => Scan::new(t),
    };
    let batches: Vec<RecordBatch> = scan
        .filter(e)
        .select(["id"])
        .to_stream()
        .await
        .map_err(|e| e.to_string())?
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(bitset(&batches, "id", rows))
}

fn bitset(batches: &[RecordBatch], col: &str, rows: usize) -> Vec<bool> {
    let mut out = vec![false; rows];
    for b in batches {
        let a = b
            .column(b.schema().index_of(col).unwrap())
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .clone();
        for v in a.iter().flatten() {
            out[v as usize] = true;
        }
    }
    out
}

// ---------------------------------------------------------------- the tables

struct Layout {
    name: &'static str,
    version: FormatVersion,
    partition: &'static str,
    sort: &'static str,
    props: &'static [(&'static str, &'static str)],
    /// `rewrite_data_files` options run after the appends (none when empty).
    rewrite: &'static [(&'static str, &'static str)],
}

const SCAN_LAYOUTS: &[Layout] = &[
    Layout {
        name: "plain_sorted",
        version: FormatVersion::V3,
        partition: "",
        sort: "l",
        // Small row groups of small pages, some with bloom filters: predicates go through
        // row group statistics, bloom filters (`=` / `IN`) and the page index.
        props: &[
            ("write.parquet.row-group-size-bytes", "16384"),
            ("write.parquet.page-row-limit", "64"),
            ("write.parquet.bloom-filter-enabled.column.i", "true"),
            ("write.parquet.bloom-filter-enabled.column.l", "true"),
            ("write.parquet.bloom-filter-enabled.column.s", "true"),
            ("write.parquet.bloom-filter-enabled.column.dt", "true"),
            ("write.parquet.bloom-filter-enabled.column.tz", "true"),
        ],
        rewrite: &[],
    },
    Layout {
        name: "bucket_day_dec",
        version: FormatVersion::V3,
        partition: "bucket(3, i), day(ts)",
        sort: "d",
        props: &[],
        rewrite: &[],
    },
    // Written with no distribution: a partition's rows may land in several lanes' files.
    Layout {
        name: "flag_trunc_hour",
        version: FormatVersion::V3,
        partition: "flag, hour(tz)",
        sort: "",
        props: &[("write.distribution-mode", "none")],
        rewrite: &[],
    },
    Layout {
        name: "truncate_dec_bucket_uuid",
        version: FormatVersion::V3,
        partition: "truncate(1000000000, dec), bucket(2, u)",
        sort: "s",
        props: &[],
        rewrite: &[],
    },
    // Clustered on a key: hashed into buckets, sorted within them (a sort rewrite makes each
    // file one sorted run), bloom filters on the key, small row groups of small pages, so
    // point and range predicates go through partition, file, row group, bloom and page
    // pruning.
    Layout {
        name: "clustered_bucket_sorted",
        version: FormatVersion::V3,
        partition: "bucket(4, l)",
        sort: "l",
        props: &[
            ("write.parquet.row-group-size-bytes", "16384"),
            ("write.parquet.page-row-limit", "32"),
            ("write.parquet.bloom-filter-enabled.column.l", "true"),
            ("write.parquet.bloom-filter-enabled.column.i", "true"),
        ],
        rewrite: &[("strategy", "sort"), ("rewrite-all", "true")],
    },
    // Z-ordered on two columns by a rewrite (files and pages cover boxes of (i, d)).
    Layout {
        name: "zorder_i_d",
        version: FormatVersion::V3,
        partition: "",
        sort: "",
        props: &[
            ("write.parquet.row-group-size-bytes", "16384"),
            ("write.parquet.page-row-limit", "32"),
        ],
        rewrite: &[
            ("strategy", "zorder"),
            ("zorder-by", "i,d"),
            ("rewrite-all", "true"),
            ("target-file-size-bytes", "65536"),
        ],
    },
];

/// The DML tables: (name, version, mode, partitioning).
const DML_TABLES: &[(&str, FormatVersion, &str, &str)] = &[
    ("cow_v2", FormatVersion::V2, "copy-on-write", "bucket(2, l)"),
    (
        "mor_v2",
        FormatVersion::V2,
        "merge-on-read",
        "truncate(1, s)",
    ),
    (
        "cow_v3",
        FormatVersion::V3,
        "copy-on-write",
        "truncate(50000, dec)",
    ),
    ("mor_v3", FormatVersion::V3, "merge-on-read", "day(ts)"),
];

async fn make_table(
    cat: &Catalog,
    name: &str,
    version: FormatVersion,
    partition: &str,
    sort: &str,
    props: &[(&str, &str)],
    data: &Data,
) -> Table {
    // v2 has no timestamp_ns; Spark 3.5 reads no time.
    let dropped: &[&str] = match (version, name.starts_with("spark")) {
        (_, true) => &["tsn", "tm"],
        (FormatVersion::V2, _) => &["tsn"],
        _ => &[],
    };
    let ddl = DDL
        .split(", ")
        .filter(|c| !dropped.iter().any(|d| c.starts_with(&format!("{d} "))))
        .collect::<Vec<_>>()
        .join(", ");
    let schema = parse_schema(&ddl).unwrap();
    let mut c = TableCreation::new(schema.clone());
    c.format_version = version;
    if !partition.is_empty() {
        c.partition_spec = parse_partition_spec(partition, &schema).unwrap();
    }
    if !sort.is_empty() {
        c.sort_order = Some(parse_sort_order(sort, &schema).unwrap());
    }
    c.properties = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut t = cat
        .create_table(&parse_ident(&format!("diff.{name}")).unwrap(), c)
        .await
        .unwrap();
    // Three appends: several files (and snapshots) per partition.
    let cuts = [0, data.rows / 3, 2 * data.rows / 3, data.rows];
    for w in cuts.windows(2) {
        t = floe::txn::append(&cat.clone(), &t, vec![Ok(data.batch(w[0]..w[1], dropped))])
            .await
            .unwrap()
            .table;
    }
    t
}

// ---------------------------------------------------------------- the run

fn env_usize(k: &str, default: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Regression predicates kept as data: (seed that found it, floe text, DuckDB text).
fn regressions() -> Vec<Case> {
    let path = repo().join("spec-fixtures/differential/regressions.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, c)| Case {
            name: format!("regression-{i}"),
            floe: c["floe"].as_str().unwrap().to_string(),
            duck: c["duckdb"].as_str().unwrap().to_string(),
            spark: c
                .get("spark")
                .and_then(|s| s.as_str())
                .unwrap_or_else(|| c["floe"].as_str().unwrap())
                .to_string(),
            spark_ice: c
                .get("spark_iceberg")
                .or_else(|| c.get("spark"))
                .and_then(|s| s.as_str())
                .unwrap_or_else(|| c["floe"].as_str().unwrap())
                .to_string(),
            columns: COLS
                .iter()
                .filter(|col| c["floe"].as_str().unwrap().contains(col.name))
                .map(|col| col.name)
                .collect(),
            spark_overflow: false,
            floe_error: c
                .get("floe_error")
                .and_then(|s| s.as_str())
                .map(str::to_string),
        })
        .collect()
}

struct Mismatches {
    lines: Vec<String>,
    count: usize,
    /// Comparisons where the reference engine refused and floe answered.
    unreferenced: usize,
}

impl Mismatches {
    fn check(&mut self, what: &str, case: &Case, want: &Answer, got: &Answer, data: &Data) {
        if let Some(words) = &case.floe_error {
            if !matches!(got, Err(e) if e.contains(words.as_str())) {
                self.count += 1;
                self.lines.push(format!(
                    "[{what}] {}\n  floe:   {}\n  floe must refuse it with '{words}', got {got:?}",
                    case.name, case.floe
                ));
                return;
            }
        }
        let agree = match (want, got) {
            (Ok(a), Ok(b)) => a == b,
            (Err(_), Err(_)) => true,
            // The reference refused (DuckDB's decimal widening overflows where Spark's does
            // not): no answer to compare; the Spark sample takes these cases first.
            (Err(_), Ok(_)) => {
                self.unreferenced += 1;
                true
            }
            _ => false,
        };
        if agree {
            return;
        }
        self.count += 1;
        if self.lines.len() >= 25 {
            return;
        }
        let detail = match (want, got) {
            (Ok(a), Ok(b)) => {
                let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
                let shown: Vec<String> = diff
                    .iter()
                    .take(3)
                    .map(|&i| {
                        format!(
                            "    row {i} (duckdb {}, floe {}): {}",
                            a[i],
                            b[i],
                            data.describe(i)
                        )
                    })
                    .collect();
                format!(
                    "duckdb {} rows, floe {} rows, {} differ\n{}",
                    a.iter().filter(|x| **x).count(),
                    b.iter().filter(|x| **x).count(),
                    diff.len(),
                    shown.join("\n")
                )
            }
            (Err(e), Ok(_)) => format!("duckdb error: {e}; floe answered"),
            (Ok(_), Err(e)) => format!("floe error: {e}; duckdb answered"),
            _ => unreachable!(),
        };
        self.lines.push(format!(
            "[{what}] {}\n  floe:   {}\n  duckdb: {}\n  {detail}",
            case.name, case.floe, case.duck
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predicates_agree_with_duckdb_and_spark() {
    let Some(py) = peers_python() else { return };
    let cases_n = env_usize("FLOE_DIFF_CASES", 2000);
    let seed = env_usize("FLOE_DIFF_SEED", 1) as u64;
    let rows = env_usize("FLOE_DIFF_ROWS", 3000);
    let spark_n = if std::env::var("FLOE_PEERS_NO_SPARK").as_deref() == Ok("1") {
        0
    } else {
        env_usize("FLOE_DIFF_SPARK", 100)
    };
    let all_dml = std::env::var("FLOE_DIFF_DML").as_deref() == Ok("all");
    let started = std::time::Instant::now();

    let (dir, cat) = sqlite_catalog();
    let work = tempfile::tempdir().unwrap();
    let data = gen_data(seed, rows);
    let source = work.path().join("rows.parquet");
    write_parquet(&source, &[data.batch(0..rows, &[])]);

    // The cases: regressions first, then generated ones.
    let mut cases = regressions();
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for k in 0..cases_n {
        let p = gen_pred(&mut rng, &data, 0);
        let mut columns = Vec::new();
        columns_of(&p, &mut columns);
        cases.push(Case {
            name: format!("seed{seed}-p{k}"),
            floe: render(&p, Dialect::Floe),
            duck: render(&p, Dialect::Duck),
            spark: render(&p, Dialect::Spark),
            spark_ice: render(&p, Dialect::SparkIceberg),
            columns,
            spark_overflow: spark_decimal_overflow(&p),
            floe_error: None,
        });
    }
    let duck = run_engine(
        &py,
        "duckdb",
        work.path(),
        serde_json::json!({"source": source.to_str().unwrap()}),
        rows,
        &cases
            .iter()
            .map(|c| (c.name.clone(), c.duck.clone(), c.duck.clone()))
            .collect::<Vec<_>>(),
    );
    let duck_errors = duck.values().filter(|a| a.is_err()).count();
    eprintln!(
        "differential: {} cases, DuckDB answered {} ({} errors) in {:.1?}",
        cases.len(),
        duck.len(),
        duck_errors,
        started.elapsed()
    );
    assert!(
        duck_errors * 20 < cases.len(),
        "DuckDB refused {duck_errors} of {} predicates: the generator writes bad SQL",
        cases.len()
    );
    let mut bad = Mismatches {
        lines: vec![],
        count: 0,
        unreferenced: 0,
    };

    // 1. Scans of every layout.
    for layout in SCAN_LAYOUTS {
        let t = make_table(
            &cat,
            layout.name,
            layout.version,
            layout.partition,
            layout.sort,
            layout.props,
            &data,
        )
        .await;
        let t = if layout.rewrite.is_empty() {
            t
        } else {
            let options = layout
                .rewrite
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let r = floe::maintenance::rewrite_data_files(&cat, &t, None, &options, None)
                .await
                .unwrap();
            assert!(
                r.added_data_files_count > 0,
                "{}: the rewrite ran",
                layout.name
            );
            r.table.expect("a rewrite returns its table")
        };
        for case in &cases {
            let got = floe_ids(&t, &case.floe, rows).await;
            bad.check(
                &format!("scan {}", layout.name),
                case,
                &duck[&case.name],
                &got,
                &data,
            );
        }
        eprintln!(
            "differential: scans of {} done at {:.1?}",
            layout.name,
            started.elapsed()
        );
    }

    // 2. The CLI, on a sample (every regression, then every 40th case):
    // `floe scan --where … --count --json`.
    let cli_table = "diff.plain_sorted";
    let replayed = cases.iter().filter(|c| c.name.starts_with("regression-"));
    let generated = cases.iter().filter(|c| !c.name.starts_with("regression-"));
    for case in replayed.chain(generated.step_by(40)) {
        let o = crate::common::floe_cmd()
            .arg("--warehouse")
            .arg(dir.path())
            .args([
                "scan", cli_table, "--where", &case.floe, "--count", "--json",
            ])
            .output()
            .unwrap();
        let got: Answer = if o.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            let n = v["record_count"].as_u64().unwrap() as usize;
            // The CLI gives a count: compare it with the library's rows.
            let lib = floe_ids(
                &cat.load_table(&parse_ident(cli_table).unwrap())
                    .await
                    .unwrap(),
                &case.floe,
                rows,
            )
            .await;
            match lib {
                Ok(ids) if ids.iter().filter(|x| **x).count() == n => Ok(ids),
                _ => Err(format!("CLI counted {n}")),
            }
        } else {
            Err(String::from_utf8_lossy(&o.stderr).to_string())
        };
        bad.check("cli scan", case, &duck[&case.name], &got, &data);
    }
    eprintln!("differential: CLI sample done at {:.1?}", started.elapsed());

    // 3. DELETE and UPDATE on copies of v2 / v3 tables in both modes.
    let mut bases = Vec::new();
    for (name, version, mode, partition) in DML_TABLES {
        let props = [
            ("write.delete.mode", *mode),
            ("write.update.mode", *mode),
            ("write.parquet.row-group-size-bytes", "32768"),
            ("write.parquet.page-row-limit", "100"),
        ];
        let t = make_table(&cat, name, *version, partition, "", &props, &data).await;
        bases.push((name, *version, t));
    }
    let mut peer_checks = Vec::new();
    let mut copies = 0usize;
    for (k, case) in cases.iter().enumerate() {
        let Ok(want) = &duck[&case.name] else {
            continue;
        };
        for (b, (name, version, base)) in bases.iter().enumerate() {
            if *version == FormatVersion::V2 && !case.columns.iter().all(|c| v2_safe(c)) {
                continue;
            }
            let delete = all_dml || b == k % bases.len();
            let update = all_dml || b == (k + 1) % bases.len();
            for (kind, run) in [("delete", delete), ("update", update)] {
                if !run {
                    continue;
                }
                copies += 1;
                let copy = format!("diff.{name}_{kind}_{k}");
                cat.register_table(&parse_ident(&copy).unwrap(), base.metadata_location())
                    .await
                    .unwrap();
                let sql = if kind == "delete" {
                    format!("DELETE FROM {copy} WHERE {}", case.floe)
                } else {
                    format!("UPDATE {copy} SET mark = 1 WHERE {}", case.floe)
                };
                let got: Answer = match floe::dml::execute(&cat, &sql, None).await {
                    Err(e) => Err(e.to_string()),
                    Ok(r) => {
                        let batches = Scan::new(&r.table)
                            .select(["id", "mark"])
                            .to_batches()
                            .await
                            .unwrap();
                        let present = bitset(&batches, "id", rows);
                        let n: usize = batches.iter().map(|b| b.num_rows()).sum();
                        if kind == "delete" {
                            // The rows deleted are the rows the predicate selects.
                            Ok(present.iter().map(|p| !p).collect())
                        } else if n != rows || present.iter().any(|p| !p) {
                            Err(format!("UPDATE changed the row count to {n}"))
                        } else {
                            let mut marked = vec![false; rows];
                            for b in &batches {
                                let ids =
                                    b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                                let m = b.column(1).as_any().downcast_ref::<Int32Array>().unwrap();
                                for i in 0..b.num_rows() {
                                    marked[ids.value(i) as usize] = m.value(i) == 1;
                                }
                            }
                            Ok(marked)
                        }
                        .inspect(|_| {
                            if peer_checks.len() < 12
                                && r.snapshot_id.is_some()
                                && *version == FormatVersion::V2
                                && k % 5 == b
                            {
                                peer_checks.push(r.table.clone());
                            }
                        })
                    }
                };
                bad.check(
                    &format!("{kind} {name}"),
                    case,
                    &Ok(want.clone()),
                    &got,
                    &data,
                );
            }
        }
    }
    eprintln!(
        "differential: {copies} DELETE/UPDATE copies done at {:.1?}",
        started.elapsed()
    );

    assert!(
        bad.count == 0,
        "{} mismatches (seed {seed}, {} cases, {rows} rows); first ones:\n{}",
        bad.count,
        cases.len(),
        bad.lines.join("\n")
    );

    // 4. DuckDB and pyiceberg read a sample of the changed tables as floe does.
    let mut checks = Vec::new();
    for (i, t) in peer_checks.iter().enumerate() {
        let expected = work.path().join(format!("dml-{i}.parquet"));
        floe_expected(t, None, &expected).await;
        checks.push(Check {
            name: t.name(),
            metadata: t.metadata_location().to_string(),
            snapshot_id: None,
            expected: expected.to_str().unwrap().to_string(),
            engines: Some(vec!["duckdb".into(), "pyiceberg".into()]),
            refuse: None,
        });
    }
    if !checks.is_empty() {
        peer_check(&py, work.path(), &checks);
    }

    // 5. Spark on a sample, reading a floe table (v2: Spark 3.5 reads no time / timestamp_ns).
    if spark_n > 0 {
        let t = make_table(
            &cat,
            "spark_v2",
            FormatVersion::V2,
            "bucket(3, i), truncate(2, s)",
            "",
            &[],
            &data,
        )
        .await;
        // Spark 3.5 reads no Parquet TIME either: its rows without tm / tsn.
        let spark_source = work.path().join("rows-spark.parquet");
        write_parquet(&spark_source, &[data.batch(0..rows, &["tm", "tsn"])]);
        let safe = |c: &&Case| c.columns.iter().all(|c| spark_safe(c));
        let refused = |c: &&Case| duck[&c.name].is_err();
        let mut sample: Vec<&Case> = cases.iter().filter(safe).filter(refused).collect();
        sample.extend(
            cases
                .iter()
                .filter(safe)
                .filter(|c| !refused(c))
                .take(spark_n.saturating_sub(sample.len())),
        );
        let spark = run_engine(
            &py,
            "spark",
            work.path(),
            serde_json::json!({"table": t.metadata_location(), "source": spark_source.to_str().unwrap()}),
            rows,
            &sample
                .iter()
                .map(|c| (c.name.clone(), c.spark.clone(), c.spark_ice.clone()))
                .collect::<Vec<_>>(),
        );
        let mut java_pruning = 0;
        let mut decimal_overflow = 0;
        for case in &sample {
            let got = floe_ids(&t, &case.floe, rows).await;
            if case.spark_overflow {
                decimal_overflow += usize::from(spark[&case.name] != got);
                continue;
            }
            let spark_case = Case {
                duck: format!("(spark) {}", case.spark),
                ..(*case).clone()
            };
            bad.check("spark", &spark_case, &spark[&case.name], &got, &data);
            // Spark through the Iceberg runtime reads floe's table. Iceberg Java's pruning
            // drops NaN rows of `>`, tells -0.0 from 0.0 and orders UUIDs as signed longs
            // (apache/iceberg#14216) where Parquet statistics are unsigned; those predicates
            // are compared with Spark's own semantics only (docs/src/testing.md, "Known
            // differences").
            let ice = &spark[&format!("{}@iceberg", case.name)];
            if case.columns.iter().any(|c| ["f", "d", "u"].contains(c)) {
                java_pruning += usize::from(ice != &got);
                continue;
            }
            let ice_case = Case {
                duck: format!("(spark, iceberg) {}", case.spark_ice),
                ..(*case).clone()
            };
            bad.check("spark iceberg", &ice_case, ice, &got, &data);
        }
        eprintln!(
            "differential: {java_pruning} float / uuid predicates where Spark through Iceberg \
             differs from Spark's own semantics; {decimal_overflow} where Spark's decimal \
             widening passes 38 digits and it answers differently"
        );
        eprintln!(
            "differential: Spark sample of {} done at {:.1?}",
            sample.len(),
            started.elapsed()
        );
    }

    assert!(
        bad.count == 0,
        "{} mismatches (seed {seed}, {} cases, {rows} rows); first ones:\n{}",
        bad.count,
        cases.len(),
        bad.lines.join("\n")
    );
    eprintln!(
        "differential: {} cases, 0 mismatches ({} comparisons without a reference answer), {:.1?}",
        cases.len(),
        bad.unreferenced,
        started.elapsed()
    );
}
