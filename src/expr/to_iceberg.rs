//! A SQL [`Expr`] to an `iceberg` [`Predicate`] that every row the expression keeps also
//! satisfies, so inclusive file pruning with it is safe. What does not convert is dropped
//! from an AND (which only weakens it) or makes the whole result `None` (no pruning).

use iceberg::expr::{Predicate, Reference};
use iceberg::spec::{Datum, PrimitiveType, Schema, Type};

use super::ast::{BinaryOp, ColumnRef, Expr, Literal};
use super::literal::{datum_for, RawLit};
use crate::spec::resolve_field;

/// A predicate implied by `expr` over `schema` (unqualified columns only), or `None`.
pub(crate) fn to_iceberg_predicate(expr: &Expr, schema: &Schema) -> Option<Predicate> {
    convert(expr, schema).map(|(p, _)| p)
}

/// `(predicate, exact)`: `exact` when the predicate is TRUE on exactly the rows where the
/// expression is TRUE (needed under NOT).
fn convert(e: &Expr, s: &Schema) -> Option<(Predicate, bool)> {
    match e {
        Expr::Literal(Literal::Bool(true)) => Some((Predicate::AlwaysTrue, true)),
        Expr::Literal(Literal::Bool(false) | Literal::Null) => Some((Predicate::AlwaysFalse, true)),
        Expr::Binary {
            left,
            op: BinaryOp::And,
            right,
        } => match (convert(left, s), convert(right, s)) {
            (Some((l, le)), Some((r, re))) => Some((l.and(r), le && re)),
            (Some((p, _)), None) | (None, Some((p, _))) => Some((p, false)),
            (None, None) => None,
        },
        Expr::Binary {
            left,
            op: BinaryOp::Or,
            right,
        } => {
            let (l, le) = convert(left, s)?;
            let (r, re) = convert(right, s)?;
            Some((l.or(r), le && re))
        }
        // NOT e is TRUE where e is FALSE, which is outside e's TRUE rows only if exact.
        Expr::Not(x) => match convert(x, s)? {
            (p, true) => Some((!p, false)),
            _ => None,
        },
        Expr::Binary { left, op, right } if op.is_comparison() => {
            let (col, op, lit) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), Expr::Literal(l)) => (c, *op, l),
                (Expr::Literal(l), Expr::Column(c)) => (c, op.flipped(), l),
                _ => return None,
            };
            let (r, ty) = column(col, s)?;
            if *lit == Literal::Null {
                return Some((Predicate::AlwaysFalse, true));
            }
            let d = datum(lit, &ty)?;
            if matches!(ty, PrimitiveType::Float | PrimitiveType::Double) {
                return float_comparison(r, op, &d, &ty).map(|p| (p, false));
            }
            let p = match op {
                BinaryOp::Eq => r.equal_to(d),
                BinaryOp::NotEq => r.not_equal_to(d),
                BinaryOp::Lt => r.less_than(d),
                BinaryOp::LtEq => r.less_than_or_equal_to(d),
                BinaryOp::Gt => r.greater_than(d),
                _ => r.greater_than_or_equal_to(d),
            };
            Some((p, true))
        }
        Expr::IsNull { expr, negated } => {
            let Expr::Column(c) = expr.as_ref() else {
                return None;
            };
            let (r, _) = column(c, s)?;
            Some((
                if *negated {
                    r.is_not_null()
                } else {
                    r.is_null()
                },
                true,
            ))
        }
        Expr::InList {
            expr,
            list,
            negated,
        } => {
            let Expr::Column(c) = expr.as_ref() else {
                return None;
            };
            let (r, ty) = column(c, s)?;
            if matches!(ty, PrimitiveType::Float | PrimitiveType::Double) {
                return None;
            }
            // NULL items never make IN TRUE: the TRUE rows are those of the other items.
            let vals = list
                .iter()
                .filter(|x| !matches!(x, Expr::Literal(Literal::Null)))
                .map(|x| match x {
                    Expr::Literal(l) => datum(l, &ty),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            let p = if vals.is_empty() {
                Predicate::AlwaysFalse
            } else {
                r.is_in(vals)
            };
            if *negated {
                // NOT IN with a NULL item is never TRUE.
                if list.len() != vals_len(list) {
                    return Some((Predicate::AlwaysFalse, true));
                }
                Some((!p, false))
            } else {
                Some((p, true))
            }
        }
        Expr::Between {
            expr,
            low,
            high,
            negated,
        } => {
            let lo = Expr::Binary {
                left: expr.clone(),
                op: BinaryOp::GtEq,
                right: low.clone(),
            };
            let hi = Expr::Binary {
                left: expr.clone(),
                op: BinaryOp::LtEq,
                right: high.clone(),
            };
            let both = lo.binary(BinaryOp::And, hi);
            if *negated {
                convert(&Expr::Not(Box::new(both)), s)
            } else {
                convert(&both, s)
            }
        }
        Expr::Function {
            func: super::ast::Func::IsNan,
            args,
        } => match args.as_slice() {
            [Expr::Column(c)] => Some((column(c, s)?.0.is_nan(), false)),
            _ => None,
        },
        _ => None,
    }
}

/// A float comparison loosened so Iceberg's metrics pruning (IEEE order, NaN outside the
/// bounds, -0.0 and 0.0 possibly ordered) keeps every row Spark's order selects: NaN is
/// above every number and -0.0 = 0.0.
fn float_comparison(
    r: Reference,
    op: BinaryOp,
    d: &Datum,
    ty: &PrimitiveType,
) -> Option<Predicate> {
    use iceberg::spec::PrimitiveLiteral as L;
    let v = match d.literal() {
        L::Float(f) => f.0 as f64,
        L::Double(f) => f.0,
        _ => return None,
    };
    if v.is_nan() {
        return None;
    }
    let of = |x: f64| match ty {
        PrimitiveType::Float => Datum::float(x as f32),
        _ => Datum::double(x),
    };
    let zero = v == 0.0;
    Some(match op {
        BinaryOp::Eq if zero => r
            .clone()
            .greater_than_or_equal_to(of(-0.0))
            .and(r.less_than_or_equal_to(of(0.0))),
        BinaryOp::Eq => r.equal_to(d.clone()),
        BinaryOp::Lt => r.less_than(if zero { of(0.0) } else { d.clone() }),
        BinaryOp::LtEq => r.less_than_or_equal_to(if zero { of(0.0) } else { d.clone() }),
        BinaryOp::Gt => r
            .clone()
            .greater_than(if zero { of(-0.0) } else { d.clone() })
            .or(r.is_nan()),
        BinaryOp::GtEq => r
            .clone()
            .greater_than_or_equal_to(if zero { of(-0.0) } else { d.clone() })
            .or(r.is_nan()),
        _ => return None,
    })
}

fn vals_len(list: &[Expr]) -> usize {
    list.iter()
        .filter(|x| !matches!(x, Expr::Literal(Literal::Null)))
        .count()
}

pub(super) fn column(c: &ColumnRef, s: &Schema) -> Option<(Reference, PrimitiveType)> {
    if c.qualifier.is_some() {
        return None;
    }
    // An ambiguous name prunes nothing (binding refuses it).
    let f = resolve_field(s, &c.name).ok()??;
    let name = s.name_by_field_id(f.id).unwrap_or(&c.name).to_string();
    match f.field_type.as_ref() {
        Type::Primitive(p) => Some((Reference::new(name), p.clone())),
        _ => None,
    }
}

/// The literal as a value of the column type, only when that conversion is exact.
pub(super) fn datum(l: &Literal, ty: &PrimitiveType) -> Option<Datum> {
    use PrimitiveType as P;
    match (l, ty) {
        (Literal::Int(i), _) => datum_for(RawLit::Num(&i.to_string()), ty).ok(),
        (Literal::Decimal(d), P::Int | P::Long | P::Decimal { .. } | P::Double | P::Float) => {
            datum_for(RawLit::Num(d), ty).ok()
        }
        (Literal::Float(f), P::Double) => Some(Datum::double(*f)),
        (Literal::Float(f), P::Float) => Some(Datum::float(*f as f32)),
        (Literal::Float(f), P::Int | P::Long) if f.fract() == 0.0 => {
            datum_for(RawLit::Num(&format!("{f:.0}")), ty).ok()
        }
        (Literal::Bool(b), P::Boolean) => Some(Datum::bool(*b)),
        (Literal::String(s), _) => datum_for(RawLit::Str(s), ty).ok(),
        (Literal::Date(d), P::Date) => Some(Datum::date(*d)),
        (Literal::Date(d), P::Timestamp) => {
            Some(Datum::timestamp_micros(*d as i64 * 86_400_000_000))
        }
        (Literal::Date(d), P::Timestamptz) => {
            Some(Datum::timestamptz_micros(*d as i64 * 86_400_000_000))
        }
        (Literal::Timestamp(us), P::Timestamp) => Some(Datum::timestamp_micros(*us)),
        (Literal::Timestamp(us), P::Timestamptz) => Some(Datum::timestamptz_micros(*us)),
        _ => None,
    }
    .filter(|d| exact_for(l, d, ty))
}

/// A float column compares in single precision: only convert literals it holds exactly.
fn exact_for(l: &Literal, _d: &Datum, ty: &PrimitiveType) -> bool {
    if *ty != PrimitiveType::Float {
        return true;
    }
    let v = match l {
        Literal::Int(i) => *i as f64,
        Literal::Float(f) => *f,
        Literal::Decimal(d) => match d.parse::<f64>() {
            Ok(v) => v,
            Err(_) => return false,
        },
        _ => return true,
    };
    (v as f32) as f64 == v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::parse_expr;
    use crate::spec::parse_schema;

    fn conv(s: &str) -> Option<String> {
        let schema = parse_schema(
            "id long, n int, name string, ts timestamptz, t2 timestamp, d date, price decimal(10,2), f float",
        )
        .unwrap();
        to_iceberg_predicate(&parse_expr(s).unwrap(), &schema).map(|p| p.to_string())
    }

    #[test]
    fn converts_what_is_implied() {
        assert_eq!(conv("id % 1000 = 7"), None);
        assert_eq!(conv("id >= 10 AND id % 2 = 0").unwrap(), "id >= 10");
        assert_eq!(conv("5 < id").unwrap(), "id > 5");
        assert_eq!(conv("id >= 10 OR id % 2 = 0"), None);
        assert_eq!(
            conv("id = 1 OR name IS NULL").unwrap(),
            "(id = 1) OR (name IS NULL)"
        );
        assert_eq!(conv("id IN (1, 2, NULL)").unwrap(), "id IN (1, 2)");
        assert_eq!(
            conv("id BETWEEN 1 AND 3").unwrap(),
            "(id >= 1) AND (id <= 3)"
        );
        assert_eq!(conv("NOT (id = 3)").unwrap(), "NOT (id = 3)");
        // NOT over a weakened AND would be wrong: no pruning.
        assert_eq!(conv("NOT (id = 3 AND id % 2 = 0)"), None);
        assert_eq!(conv("NOT (NOT (id = 3))"), None);
        assert_eq!(conv("id = n"), None);
        assert_eq!(conv("t.id = 1"), None);
        assert_eq!(conv("price > 1.5").unwrap(), "price > 1.50");
        assert_eq!(conv("price > 1.555"), None);
        assert_eq!(conv("n > 1.5"), None);
        assert_eq!(conv("f > 0.1"), None);
        // NaN is above every number: a float `>` keeps the files holding NaN.
        let gt = conv("f > 0.5").unwrap();
        assert!(
            gt.contains("f > 0.5") && gt.to_lowercase().contains("nan"),
            "{gt}"
        );
        assert_eq!(conv("f < 0.5").unwrap(), "f < 0.5");
        assert!(conv("d = '2024-01-01'").unwrap().starts_with("d = "));
    }

    #[test]
    fn timestamps_become_timestamp_datums() {
        let schema = parse_schema("ts timestamptz, t2 timestamp").unwrap();
        let p = to_iceberg_predicate(&parse_expr("ts >= '2024-01-01'").unwrap(), &schema).unwrap();
        let want = Reference::new("ts")
            .greater_than_or_equal_to(Datum::timestamptz_micros(19723 * 86_400_000_000));
        assert_eq!(p, want);
        let p = to_iceberg_predicate(
            &parse_expr("t2 < TIMESTAMP '2024-01-01 00:00:01'").unwrap(),
            &schema,
        )
        .unwrap();
        let want = Reference::new("t2")
            .less_than(Datum::timestamp_micros(19723 * 86_400_000_000 + 1_000_000));
        assert_eq!(p, want);
    }
}
