//! Inclusive pruning: may a partition, a manifest or a data file hold rows matching a
//! predicate? "No" only when the metadata proves it.

use std::cmp::Ordering;
#[cfg(test)]
use std::sync::Arc;

use iceberg::expr::{BoundPredicate, Predicate, PredicateOperator};
use iceberg::spec::{
    DataFile, Datum, FieldSummary, Literal, PartitionSpec, PrimitiveLiteral, Schema, Struct, Type,
};

use crate::error::Result;

/// Projects a bound row predicate onto a partition spec (inclusive: true for every partition
/// that may hold a matching row). Result refers to partition field names.
pub(crate) fn project_to_partition(
    pred: &BoundPredicate,
    spec: &PartitionSpec,
) -> Result<Predicate> {
    let p = pred.clone().rewrite_not();
    project(&p, spec)
}

fn project(p: &BoundPredicate, spec: &PartitionSpec) -> Result<Predicate> {
    Ok(match p {
        BoundPredicate::AlwaysTrue => Predicate::AlwaysTrue,
        BoundPredicate::AlwaysFalse => Predicate::AlwaysFalse,
        BoundPredicate::And(e) => {
            let [a, b] = e.inputs();
            project(a, spec)?.and(project(b, spec)?)
        }
        BoundPredicate::Or(e) => {
            let [a, b] = e.inputs();
            project(a, spec)?.or(project(b, spec)?)
        }
        BoundPredicate::Not(_) => Predicate::AlwaysTrue,
        leaf => {
            let id = match leaf {
                BoundPredicate::Unary(u) => u.term().field().id,
                BoundPredicate::Binary(b) => b.term().field().id,
                BoundPredicate::Set(s) => s.term().field().id,
                _ => return Ok(Predicate::AlwaysTrue),
            };
            let mut out = Predicate::AlwaysTrue;
            for f in spec.fields().iter().filter(|f| f.source_id == id) {
                if let Some(q) = f.transform.project(&f.name, leaf)? {
                    out = out.and(q);
                }
            }
            out
        }
    })
}

pub(super) fn lit_cmp(a: &PrimitiveLiteral, b: &PrimitiveLiteral) -> Option<Ordering> {
    match (a, b) {
        (PrimitiveLiteral::Int(x), PrimitiveLiteral::Long(y)) => (*x as i64).partial_cmp(y),
        (PrimitiveLiteral::Long(x), PrimitiveLiteral::Int(y)) => x.partial_cmp(&(*y as i64)),
        _ if std::mem::discriminant(a) == std::mem::discriminant(b) => a.partial_cmp(b),
        _ => None,
    }
}

/// Evaluates a partition predicate (from [`project_to_partition`]) on a partition tuple.
pub(crate) fn partition_matches(p: &Predicate, spec: &PartitionSpec, partition: &Struct) -> bool {
    let value = |name: &str| -> Option<Option<&PrimitiveLiteral>> {
        let idx = spec.fields().iter().position(|f| f.name == name)?;
        Some(match partition.fields().get(idx)? {
            Some(Literal::Primitive(l)) => Some(l),
            _ => None,
        })
    };
    eval_unbound(p, &value)
}

fn eval_unbound<'a>(
    p: &Predicate,
    value: &dyn Fn(&str) -> Option<Option<&'a PrimitiveLiteral>>,
) -> bool {
    match p {
        Predicate::AlwaysTrue => true,
        Predicate::AlwaysFalse => false,
        Predicate::And(e) => {
            let [a, b] = e.inputs();
            eval_unbound(a, value) && eval_unbound(b, value)
        }
        Predicate::Or(e) => {
            let [a, b] = e.inputs();
            eval_unbound(a, value) || eval_unbound(b, value)
        }
        Predicate::Not(e) => {
            let [a] = e.inputs();
            !eval_unbound(a, value)
        }
        Predicate::Unary(u) => {
            let Some(v) = value(u.term().name()) else {
                return true;
            };
            match u.op() {
                PredicateOperator::IsNull => v.is_none(),
                PredicateOperator::NotNull => v.is_some(),
                PredicateOperator::IsNan => v.is_some_and(is_nan),
                PredicateOperator::NotNan => !v.is_some_and(is_nan),
                _ => true,
            }
        }
        Predicate::Binary(b) => {
            let Some(v) = value(b.term().name()) else {
                return true;
            };
            let Some(v) = v else { return false };
            let lit = b.literal().literal();
            let ord = lit_cmp(v, lit);
            match (b.op(), ord) {
                (PredicateOperator::StartsWith, _) => starts_with(v, lit).unwrap_or(true),
                (PredicateOperator::NotStartsWith, _) => {
                    starts_with(v, lit).map(|x| !x).unwrap_or(true)
                }
                (_, None) => true,
                (PredicateOperator::LessThan, Some(o)) => o == Ordering::Less,
                (PredicateOperator::LessThanOrEq, Some(o)) => o != Ordering::Greater,
                (PredicateOperator::GreaterThan, Some(o)) => o == Ordering::Greater,
                (PredicateOperator::GreaterThanOrEq, Some(o)) => o != Ordering::Less,
                (PredicateOperator::Eq, Some(o)) => o == Ordering::Equal,
                (PredicateOperator::NotEq, Some(o)) => o != Ordering::Equal,
                _ => true,
            }
        }
        Predicate::Set(s) => {
            let Some(v) = value(s.term().name()) else {
                return true;
            };
            let Some(v) = v else { return false };
            let found = s
                .literals()
                .iter()
                .any(|d| lit_cmp(v, d.literal()) == Some(Ordering::Equal));
            match s.op() {
                PredicateOperator::In => found,
                PredicateOperator::NotIn => !found,
                _ => true,
            }
        }
    }
}

fn is_nan(l: &PrimitiveLiteral) -> bool {
    match l {
        PrimitiveLiteral::Float(f) => f.is_nan(),
        PrimitiveLiteral::Double(f) => f.is_nan(),
        _ => false,
    }
}

fn starts_with(v: &PrimitiveLiteral, prefix: &PrimitiveLiteral) -> Option<bool> {
    match (v, prefix) {
        (PrimitiveLiteral::String(a), PrimitiveLiteral::String(p)) => {
            Some(a.starts_with(p.as_str()))
        }
        _ => None,
    }
}

/// May a manifest whose partition summaries are `summaries` hold partitions matching `p`?
pub(crate) fn manifest_may_match(
    p: &Predicate,
    spec: &PartitionSpec,
    schema: &Schema,
    summaries: Option<&[FieldSummary]>,
) -> bool {
    let Some(summaries) = summaries else {
        return true;
    };
    let Ok(ptype) = spec.partition_type(schema) else {
        return true;
    };
    let bound = |name: &str| -> Option<(&FieldSummary, Option<Datum>, Option<Datum>)> {
        let idx = spec.fields().iter().position(|f| f.name == name)?;
        let s = summaries.get(idx)?;
        let ty = match ptype.fields().get(idx)?.field_type.as_ref() {
            Type::Primitive(p) => p.clone(),
            _ => return None,
        };
        let lo = s
            .lower_bound
            .as_ref()
            .and_then(|b| Datum::try_from_bytes(b, ty.clone()).ok());
        let hi = s
            .upper_bound
            .as_ref()
            .and_then(|b| Datum::try_from_bytes(b, ty).ok());
        Some((s, lo, hi))
    };
    eval_range(p, &|name| {
        bound(name).map(|(s, lo, hi)| Range {
            lo,
            hi,
            all_null: s.lower_bound.is_none() && s.contains_null,
            may_null: s.contains_null,
        })
    })
}

/// A column's known value range.
struct Range {
    lo: Option<Datum>,
    hi: Option<Datum>,
    all_null: bool,
    may_null: bool,
}

fn eval_range(p: &Predicate, r: &dyn Fn(&str) -> Option<Range>) -> bool {
    match p {
        Predicate::AlwaysTrue => true,
        Predicate::AlwaysFalse => false,
        Predicate::And(e) => {
            let [a, b] = e.inputs();
            eval_range(a, r) && eval_range(b, r)
        }
        Predicate::Or(e) => {
            let [a, b] = e.inputs();
            eval_range(a, r) || eval_range(b, r)
        }
        Predicate::Not(_) => true,
        Predicate::Unary(u) => match (u.op(), r(u.term().name())) {
            (PredicateOperator::IsNull, Some(x)) => x.may_null,
            (PredicateOperator::NotNull, Some(x)) => !x.all_null,
            _ => true,
        },
        Predicate::Binary(b) => match r(b.term().name()) {
            Some(x) => range_binary(b.op(), b.literal(), &x),
            None => true,
        },
        Predicate::Set(s) => match (s.op(), r(s.term().name())) {
            (PredicateOperator::In, Some(x)) => s
                .literals()
                .iter()
                .any(|d| range_binary(PredicateOperator::Eq, d, &x)),
            _ => true,
        },
    }
}

fn range_binary(op: PredicateOperator, v: &Datum, x: &Range) -> bool {
    if x.all_null {
        return matches!(
            op,
            PredicateOperator::NotEq | PredicateOperator::NotStartsWith
        );
    }
    // Raw values, not `Datum` order: the iceberg crate projects a decimal literal through
    // `truncate` at scale 0 (its unscaled value, at the column's scale, is right), and
    // `Datum` compares decimals by scaled value.
    let lo =
        x.lo.as_ref()
            .and_then(|l| lit_cmp(l.literal(), v.literal()));
    let hi =
        x.hi.as_ref()
            .and_then(|h| lit_cmp(h.literal(), v.literal()));
    match op {
        PredicateOperator::LessThan => lo != Some(Ordering::Greater) && lo != Some(Ordering::Equal),
        PredicateOperator::LessThanOrEq => lo != Some(Ordering::Greater),
        PredicateOperator::GreaterThan => hi != Some(Ordering::Less) && hi != Some(Ordering::Equal),
        PredicateOperator::GreaterThanOrEq => hi != Some(Ordering::Less),
        PredicateOperator::Eq => lo != Some(Ordering::Greater) && hi != Some(Ordering::Less),
        PredicateOperator::StartsWith => {
            let (PrimitiveLiteral::String(p), lo, hi) = (v.literal(), x.lo.as_ref(), x.hi.as_ref())
            else {
                return true;
            };
            let cut = |d: &Datum| match d.literal() {
                PrimitiveLiteral::String(s) => {
                    Some(s.chars().take(p.chars().count()).collect::<String>())
                }
                _ => None,
            };
            let lo_ok = lo.and_then(cut).is_none_or(|l| l.as_str() <= p.as_str());
            let hi_ok = hi.and_then(cut).is_none_or(|h| h.as_str() >= p.as_str());
            lo_ok && hi_ok
        }
        _ => true,
    }
}

/// Column metrics of a data file or of one row group of it: what inclusive pruning reads.
pub(crate) trait ColumnMetrics {
    /// Rows covered.
    fn record_count(&self) -> u64;
    /// Values (nulls included) of field `id`, when known.
    fn value_count(&self, id: i32) -> Option<u64>;
    /// Nulls of field `id`, when known.
    fn null_count(&self, id: i32) -> Option<u64>;
    /// NaNs of field `id`, when known.
    fn nan_count(&self, id: i32) -> Option<u64>;
    /// A lower bound of field `id`'s non-null values.
    fn lower_bound(&self, id: i32) -> Option<Datum>;
    /// An upper bound of field `id`'s non-null values.
    fn upper_bound(&self, id: i32) -> Option<Datum>;
}

impl ColumnMetrics for DataFile {
    fn record_count(&self) -> u64 {
        DataFile::record_count(self)
    }
    fn value_count(&self, id: i32) -> Option<u64> {
        self.value_counts().get(&id).copied()
    }
    fn null_count(&self, id: i32) -> Option<u64> {
        self.null_value_counts().get(&id).copied()
    }
    fn nan_count(&self, id: i32) -> Option<u64> {
        self.nan_value_counts().get(&id).copied()
    }
    fn lower_bound(&self, id: i32) -> Option<Datum> {
        self.lower_bounds().get(&id).cloned()
    }
    fn upper_bound(&self, id: i32) -> Option<Datum> {
        self.upper_bounds().get(&id).cloned()
    }
}

/// The field ids a bound predicate reads, added to `out`.
pub(crate) fn field_ids(p: &BoundPredicate, out: &mut Vec<i32>) {
    let mut add = |id: i32| {
        if !out.contains(&id) {
            out.push(id);
        }
    };
    match p {
        BoundPredicate::AlwaysTrue | BoundPredicate::AlwaysFalse => {}
        BoundPredicate::And(e) | BoundPredicate::Or(e) => {
            let [a, b] = e.inputs();
            field_ids(a, out);
            field_ids(b, out);
        }
        BoundPredicate::Not(e) => {
            let [a] = e.inputs();
            field_ids(a, out);
        }
        BoundPredicate::Unary(u) => add(u.term().field().id),
        BoundPredicate::Binary(b) => add(b.term().field().id),
        BoundPredicate::Set(s) => add(s.term().field().id),
    }
}

/// May `file` hold rows matching the bound predicate, judging by its column metrics?
pub(crate) fn file_may_match(p: &BoundPredicate, file: &DataFile) -> bool {
    may_match(p, file)
}

/// [`file_may_match`] for a predicate already in the form `rewrite_not` gives (a plan's
/// filter), which it then does not copy for every file.
pub(crate) fn file_may_match_rewritten(p: &BoundPredicate, file: &DataFile) -> bool {
    eval_metrics(p, file)
}

/// May rows with column metrics `m` (a file's, a row group's) match the bound predicate?
pub(crate) fn may_match(p: &BoundPredicate, m: &impl ColumnMetrics) -> bool {
    let p = p.clone().rewrite_not();
    eval_metrics(&p, m)
}

fn eval_metrics(p: &BoundPredicate, f: &impl ColumnMetrics) -> bool {
    let range = |id: i32| -> Range {
        let values = f.value_count(id);
        let nulls = f.null_count(id);
        Range {
            lo: f.lower_bound(id),
            hi: f.upper_bound(id),
            all_null: matches!((values, nulls), (Some(v), Some(n)) if v == n && v > 0)
                || (values.is_some() && f.record_count() == 0),
            may_null: nulls.is_none_or(|n| n > 0),
        }
    };
    match p {
        BoundPredicate::AlwaysTrue => true,
        BoundPredicate::AlwaysFalse => false,
        BoundPredicate::And(e) => {
            let [a, b] = e.inputs();
            eval_metrics(a, f) && eval_metrics(b, f)
        }
        BoundPredicate::Or(e) => {
            let [a, b] = e.inputs();
            eval_metrics(a, f) || eval_metrics(b, f)
        }
        BoundPredicate::Not(_) => true,
        BoundPredicate::Unary(u) => {
            let id = u.term().field().id;
            let x = range(id);
            match u.op() {
                PredicateOperator::IsNull => x.may_null,
                PredicateOperator::NotNull => !x.all_null,
                PredicateOperator::IsNan => f.nan_count(id).is_none_or(|n| n > 0),
                PredicateOperator::NotNan => true,
                _ => true,
            }
        }
        BoundPredicate::Binary(b) => {
            let id = b.term().field().id;
            let x = range(id);
            // NaN never appears in bounds and sorts above every number (Spark's order). Below
            // a number, NaN rows never match: the lower bound decides. Above it they all do:
            // the upper bound decides only where the metrics know there is no NaN.
            let literal = b.literal().literal();
            if matches!(
                literal,
                PrimitiveLiteral::Float(_) | PrimitiveLiteral::Double(_)
            ) {
                if is_nan(literal) && b.op() == PredicateOperator::Eq {
                    // Only NaN rows equal NaN: none where the metrics count none.
                    return f.nan_count(id) != Some(0) && !x.all_null;
                }
                let bounded = !is_nan(literal)
                    && match b.op() {
                        PredicateOperator::Eq
                        | PredicateOperator::LessThan
                        | PredicateOperator::LessThanOrEq => true,
                        PredicateOperator::GreaterThan | PredicateOperator::GreaterThanOrEq => {
                            f.nan_count(id) == Some(0)
                        }
                        _ => false,
                    };
                if !bounded {
                    return !x.all_null;
                }
            }
            range_binary(b.op(), b.literal(), &x)
        }
        BoundPredicate::Set(s) => {
            let x = range(s.term().field().id);
            match s.op() {
                PredicateOperator::In => s
                    .literals()
                    .iter()
                    .any(|d| range_binary(PredicateOperator::Eq, d, &x)),
                _ => true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::expr::{Bind, Reference};
    use iceberg::spec::{NestedField, PrimitiveType, Transform};

    /// `dec >= 1000000.00` on `truncate(10, dec)` of decimal(10,2): a manifest whose
    /// partitions reach 99999500.00 may match (the projected literal comes back at scale 0).
    #[test]
    fn decimal_truncate_projection_keeps_the_scale() {
        let schema = Schema::builder()
            .with_fields(vec![NestedField::optional(
                1,
                "dec",
                Type::Primitive(PrimitiveType::Decimal {
                    precision: 10,
                    scale: 2,
                }),
            )
            .into()])
            .build()
            .unwrap();
        let spec = PartitionSpec::builder(schema.clone())
            .add_partition_field("dec", "dec_trunc", Transform::Truncate(10))
            .unwrap()
            .build()
            .unwrap();
        let lit = Datum::decimal_from_str("1000000.00").unwrap();
        let pred = Reference::new("dec")
            .greater_than_or_equal_to(lit)
            .bind(Arc::new(schema.clone()), true)
            .unwrap();
        let projected = project_to_partition(&pred, &spec).unwrap();
        let bound = |v: i128| {
            let text = format!("{}.{:02}", v / 100, v % 100);
            Datum::decimal_from_str(text).unwrap().to_bytes().unwrap()
        };
        let summary = |lo: i128, hi: i128| FieldSummary {
            contains_null: false,
            contains_nan: None,
            lower_bound: Some(bound(lo)),
            upper_bound: Some(bound(hi)),
        };
        let may = |lo, hi| manifest_may_match(&projected, &spec, &schema, Some(&[summary(lo, hi)]));
        assert!(may(0, 9_999_950_000));
        assert!(may(100_000_000, 100_000_000));
        assert!(!may(0, 99_999_990));
    }

    /// Metrics of one double column `x` (field 1): bounds [-0.0, 10.0] of 100 values, NaN
    /// count as given.
    struct Doubles(Option<u64>);

    impl ColumnMetrics for Doubles {
        fn record_count(&self) -> u64 {
            100
        }
        fn value_count(&self, _: i32) -> Option<u64> {
            Some(100)
        }
        fn null_count(&self, _: i32) -> Option<u64> {
            Some(0)
        }
        fn nan_count(&self, _: i32) -> Option<u64> {
            self.0
        }
        fn lower_bound(&self, _: i32) -> Option<Datum> {
            Some(Datum::double(-0.0))
        }
        fn upper_bound(&self, _: i32) -> Option<Datum> {
            Some(Datum::double(10.0))
        }
    }

    /// Float ranges prune in Spark's order (NaN above every number, -0.0 = 0.0): a range
    /// below a number by the lower bound; one above it by the upper bound only when the
    /// metrics know there is no NaN (a NaN row matches `x > 10`).
    #[test]
    fn float_ranges_prune_only_where_nan_cannot_match() {
        let schema = Arc::new(
            Schema::builder()
                .with_fields(vec![NestedField::optional(
                    1,
                    "x",
                    Type::Primitive(PrimitiveType::Double),
                )
                .into()])
                .build()
                .unwrap(),
        );
        let x = || Reference::new("x");
        let may = |p: Predicate, nans: Option<u64>| {
            may_match(&p.bind(schema.clone(), false).unwrap(), &Doubles(nans))
        };
        for nans in [None, Some(0), Some(3)] {
            assert!(!may(x().less_than(Datum::double(0.0)), nans));
            assert!(!may(x().less_than(Datum::double(-0.0)), nans));
            assert!(may(x().less_than_or_equal_to(Datum::double(0.0)), nans));
            assert!(!may(x().less_than_or_equal_to(Datum::double(-1.0)), nans));
            assert!(may(x().less_than(Datum::double(0.5)), nans));
            assert!(may(x().greater_than_or_equal_to(Datum::double(10.0)), nans));
            assert!(may(x().less_than(Datum::double(f64::NAN)), nans));
            assert_eq!(
                may(x().equal_to(Datum::double(f64::NAN)), nans),
                nans != Some(0),
                "{nans:?}"
            );
            assert!(may(x().greater_than(Datum::double(f64::NAN)), nans));
            // NOT (x < 11) is x >= 11: NaN rows match it.
            let not_below = x().less_than(Datum::double(11.0)).negate();
            assert_eq!(may(not_below, nans), nans != Some(0), "{nans:?}");
            let above = x().greater_than(Datum::double(10.0));
            assert_eq!(may(above, nans), nans != Some(0), "{nans:?}");
        }
    }
}
