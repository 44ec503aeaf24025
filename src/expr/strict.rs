//! Strict metrics evaluation: does *every* row covered by column metrics (a data file's)
//! satisfy a row filter? "Yes" only when the metrics prove it, as Iceberg Java's
//! `StrictMetricsEvaluator` answers, so that a count can take a file's record count without
//! reading it. Conservative where floe's row semantics and the metrics could part: a
//! compared column must be known to hold no null; floating-point columns (NaN) and equality
//! on strings and bytes (bounds may be truncated) never prove anything.

use std::cmp::Ordering;

use iceberg::spec::{Datum, PrimitiveType, Schema};

use super::ast::{BinaryOp, Expr, Literal};
use super::prune::{lit_cmp, ColumnMetrics};
use super::to_iceberg::{column, datum};

/// Whether every row with metrics `m` is TRUE under `e`, a row filter over `schema`.
pub(crate) fn all_rows_match(e: &Expr, schema: &Schema, m: &impl ColumnMetrics) -> bool {
    match e {
        Expr::Literal(Literal::Bool(true)) => true,
        Expr::Binary {
            left,
            op: BinaryOp::And,
            right,
        } => all_rows_match(left, schema, m) && all_rows_match(right, schema, m),
        Expr::Binary {
            left,
            op: BinaryOp::Or,
            right,
        } => all_rows_match(left, schema, m) || all_rows_match(right, schema, m),
        Expr::Binary { left, op, right } if op.is_comparison() => {
            let (c, op, lit) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), Expr::Literal(l)) => (c, *op, l),
                (Expr::Literal(l), Expr::Column(c)) => (c, op.flipped(), l),
                _ => return false,
            };
            let Some(col) = Compared::of(c, lit, schema, m) else {
                return false;
            };
            col.all(op)
        }
        Expr::Between {
            expr,
            low,
            high,
            negated: false,
        } => {
            let (Expr::Column(c), Expr::Literal(lo), Expr::Literal(hi)) =
                (expr.as_ref(), low.as_ref(), high.as_ref())
            else {
                return false;
            };
            Compared::of(c, lo, schema, m).is_some_and(|x| x.all(BinaryOp::GtEq))
                && Compared::of(c, hi, schema, m).is_some_and(|x| x.all(BinaryOp::LtEq))
        }
        Expr::InList {
            expr,
            list,
            negated,
        } => {
            let Expr::Column(c) = expr.as_ref() else {
                return false;
            };
            let items: Option<Vec<Compared>> = list
                .iter()
                .map(|x| match x {
                    Expr::Literal(l) => Compared::of(c, l, schema, m),
                    _ => None,
                })
                .collect();
            match (items, negated) {
                // Every value is one of the items: the column holds a single value.
                (Some(items), false) => items.iter().any(|x| x.all(BinaryOp::Eq)),
                // Every value differs from every item.
                (Some(items), true) => items.iter().all(|x| x.all(BinaryOp::NotEq)),
                (None, _) => false,
            }
        }
        Expr::IsNull { expr, negated } => {
            let Expr::Column(c) = expr.as_ref() else {
                return false;
            };
            let Some((_, id)) = field(c, schema) else {
                return false;
            };
            let nulls = m.null_count(id);
            if *negated {
                nulls == Some(0)
            } else {
                nulls.is_some_and(|n| n == m.record_count())
            }
        }
        _ => false,
    }
}

/// The type and field id of a top-level primitive column (a nested field's metrics do not
/// count the rows where a parent is null, as Java's evaluator also refuses them).
fn field(c: &super::ast::ColumnRef, schema: &Schema) -> Option<(PrimitiveType, i32)> {
    let (r, ty) = column(c, schema)?;
    let f = schema.field_by_name(r.name())?;
    let top = schema.as_struct().fields().iter().any(|t| t.id == f.id);
    top.then_some((ty, f.id))
}

/// A column compared with a literal of its type, the column known to hold no null.
struct Compared {
    value: Datum,
    lower: Option<Datum>,
    upper: Option<Datum>,
    /// Equality on the column's bounds proves equality of its values.
    exact_bounds: bool,
}

impl Compared {
    fn of(
        c: &super::ast::ColumnRef,
        lit: &Literal,
        schema: &Schema,
        m: &impl ColumnMetrics,
    ) -> Option<Self> {
        let (ty, id) = field(c, schema)?;
        use PrimitiveType as P;
        let exact_bounds = match ty {
            P::Boolean
            | P::Int
            | P::Long
            | P::Date
            | P::Time
            | P::Timestamp
            | P::Timestamptz
            | P::TimestampNs
            | P::TimestamptzNs
            | P::Decimal { .. } => true,
            P::String => false,
            _ => return None,
        };
        if m.null_count(id) != Some(0) || m.record_count() == 0 {
            return None;
        }
        Some(Self {
            value: datum(lit, &ty)?,
            lower: m.lower_bound(id),
            upper: m.upper_bound(id),
            exact_bounds,
        })
    }

    /// Whether every value of the column is TRUE under `column op value`.
    fn all(&self, op: BinaryOp) -> bool {
        let cmp = |b: &Option<Datum>| {
            b.as_ref()
                .and_then(|b| lit_cmp(b.literal(), self.value.literal()))
        };
        let (lo, hi) = (cmp(&self.lower), cmp(&self.upper));
        use Ordering::*;
        match op {
            BinaryOp::Lt => hi == Some(Less),
            BinaryOp::LtEq => matches!(hi, Some(Less | Equal)),
            BinaryOp::Gt => lo == Some(Greater),
            BinaryOp::GtEq => matches!(lo, Some(Greater | Equal)),
            BinaryOp::Eq => self.exact_bounds && lo == Some(Equal) && hi == Some(Equal),
            BinaryOp::NotEq => hi == Some(Less) || lo == Some(Greater),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    use iceberg::spec::{NestedField, Type};

    /// A column's (null count, lower bound, upper bound).
    type Col = (Option<u64>, Option<Datum>, Option<Datum>);

    /// Metrics of one file: per field id, `rows` rows.
    struct M {
        rows: u64,
        cols: HashMap<i32, Col>,
    }

    impl ColumnMetrics for M {
        fn record_count(&self) -> u64 {
            self.rows
        }
        fn value_count(&self, id: i32) -> Option<u64> {
            self.cols.get(&id).map(|_| self.rows)
        }
        fn null_count(&self, id: i32) -> Option<u64> {
            self.cols.get(&id).and_then(|c| c.0)
        }
        fn nan_count(&self, _: i32) -> Option<u64> {
            None
        }
        fn lower_bound(&self, id: i32) -> Option<Datum> {
            self.cols.get(&id).and_then(|c| c.1.clone())
        }
        fn upper_bound(&self, id: i32) -> Option<Datum> {
            self.cols.get(&id).and_then(|c| c.2.clone())
        }
    }

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "s",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::optional(
                    3,
                    "x",
                    Type::Primitive(PrimitiveType::Double),
                )),
            ])
            .build()
            .unwrap()
    }

    /// A file of ids `lo..=hi` (no nulls), strings `slo..=shi` with `snulls` nulls, and
    /// doubles 0..1 without nulls.
    fn file(lo: i64, hi: i64, slo: &str, shi: &str, snulls: u64) -> M {
        M {
            rows: 10,
            cols: HashMap::from([
                (1, (Some(0), Some(Datum::long(lo)), Some(Datum::long(hi)))),
                (
                    2,
                    (
                        Some(snulls),
                        Some(Datum::string(slo)),
                        Some(Datum::string(shi)),
                    ),
                ),
                (
                    3,
                    (Some(0), Some(Datum::double(0.0)), Some(Datum::double(1.0))),
                ),
            ]),
        }
    }

    fn all(filter: &str, m: &M) -> bool {
        all_rows_match(&super::super::parse_expr(filter).unwrap(), &schema(), m)
    }

    #[test]
    fn metrics_prove_every_row_or_nothing() {
        let f = file(10, 20, "b", "d", 0);
        for (filter, want) in [
            ("id >= 10", true),
            ("id > 10", false),
            ("id < 21", true),
            ("id <= 20", true),
            ("id < 20", false),
            ("10 <= id", true),
            ("id BETWEEN 5 AND 20", true),
            ("id BETWEEN 11 AND 30", false),
            ("id <> 9", true),
            ("id <> 15", false),
            ("id NOT IN (1, 2, 30)", true),
            ("id NOT IN (1, 15)", false),
            ("id IN (10, 11)", false),
            ("id = 15", false),
            ("id >= 10 AND s > 'a'", true),
            ("id >= 11 OR s < 'e'", true),
            ("id >= 11 AND s < 'e'", false),
            ("s IS NOT NULL", true),
            ("s IS NULL", false),
            ("s = 'b'", false),
            ("x >= 0", false),
            ("NOT id < 10", false),
            ("id + 1 > 5", false),
            ("true", true),
        ] {
            assert_eq!(all(filter, &f), want, "{filter}");
        }
        // One value: equality is proven for integers, never for strings (truncated bounds).
        let one = file(7, 7, "k", "k", 0);
        assert!(all("id = 7", &one) && all("id IN (3, 7)", &one));
        assert!(!all("s = 'k'", &one) && !all("s IN ('k')", &one));
        // A column that may hold nulls proves no comparison on it.
        let nulls = file(10, 20, "b", "d", 2);
        assert!(!all("s > 'a'", &nulls) && !all("s IS NOT NULL", &nulls));
        assert!(all("id > 1", &nulls));
        // Unknown null counts or bounds prove nothing.
        let unknown = M {
            rows: 10,
            cols: HashMap::from([(1, (None, Some(Datum::long(1)), Some(Datum::long(2))))]),
        };
        assert!(!all("id > 0", &unknown));
        let no_bounds = M {
            rows: 10,
            cols: HashMap::from([(1, (Some(0), None, None))]),
        };
        assert!(!all("id > 0", &no_bounds) && all("id IS NOT NULL", &no_bounds));
        // All null: IS NULL holds for every row.
        let all_null = M {
            rows: 10,
            cols: HashMap::from([(2, (Some(10), None, None))]),
        };
        assert!(all("s IS NULL", &all_null));
    }
}
