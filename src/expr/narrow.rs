//! A predicate narrowed to one data file's partition: in a file of `bucket[N](c)` value `b`
//! every row has `bucket[N](c) = b`, so the values of `c IN (…)` / `c NOT IN (…)` in other
//! buckets cannot equal any of its rows and are dropped. Exact for that file's rows in any
//! context (under `NOT` too), so row groups and pages are pruned by only the values that can
//! be there — an IN list of keys spread over the buckets otherwise keeps most pages of every
//! bucket, whose key ranges all overlap.

use iceberg::expr::{Predicate, PredicateOperator, SetExpression};
use iceberg::spec::{
    Datum, Literal, PartitionSpec, PrimitiveLiteral, Schema, Struct, Transform, Type,
};
use iceberg::transform::create_transform_function;

/// `p` (over `schema`'s columns) with the IN / NOT IN values that the file's bucket
/// partition values rule out removed; `p` itself when nothing narrows.
pub(crate) fn narrow_to_partition(
    p: &Predicate,
    schema: &Schema,
    spec: &PartitionSpec,
    partition: &Struct,
) -> Predicate {
    // (source field id, buckets, the file's bucket) of each bucket field with a value.
    let buckets: Vec<(i32, u32, i32)> = spec
        .fields()
        .iter()
        .zip(partition.iter())
        .filter_map(|(f, v)| match (f.transform, v) {
            (Transform::Bucket(n), Some(Literal::Primitive(PrimitiveLiteral::Int(b)))) => {
                Some((f.source_id, n, *b))
            }
            _ => None,
        })
        .collect();
    if buckets.is_empty() {
        return p.clone();
    }
    narrow(p, schema, &buckets)
}

fn narrow(p: &Predicate, schema: &Schema, buckets: &[(i32, u32, i32)]) -> Predicate {
    match p {
        Predicate::And(e) => {
            let [a, b] = e.inputs();
            narrow(a, schema, buckets).and(narrow(b, schema, buckets))
        }
        Predicate::Or(e) => {
            let [a, b] = e.inputs();
            narrow(a, schema, buckets).or(narrow(b, schema, buckets))
        }
        Predicate::Not(e) => {
            let [a] = e.inputs();
            !narrow(a, schema, buckets)
        }
        Predicate::Set(s) => {
            let name = s.term().name();
            let Some(field) = schema
                .field_by_name(name)
                .or_else(|| schema.field_by_name_case_insensitive(name))
            else {
                return p.clone();
            };
            let Type::Primitive(ty) = field.field_type.as_ref() else {
                return p.clone();
            };
            let mut kept = s.literals().clone();
            for &(_, n, b) in buckets.iter().filter(|(id, ..)| *id == field.id) {
                let Ok(bucket) = create_transform_function(&Transform::Bucket(n)) else {
                    return p.clone();
                };
                let mut other = Vec::new();
                for d in &kept {
                    // Only values of the column's own type: their hash is the column's.
                    if d.data_type() != ty {
                        return p.clone();
                    }
                    match bucket.transform_literal(d) {
                        Ok(Some(v)) if v == Datum::int(b) => {}
                        Ok(Some(_)) => other.push(d.clone()),
                        _ => return p.clone(),
                    }
                }
                for d in other {
                    kept.remove(&d);
                }
            }
            if kept.len() == s.literals().len() {
                return p.clone();
            }
            match (s.op(), kept.is_empty()) {
                (PredicateOperator::In, true) => Predicate::AlwaysFalse,
                (PredicateOperator::NotIn, true) => Predicate::AlwaysTrue,
                (op @ (PredicateOperator::In | PredicateOperator::NotIn), false) => {
                    Predicate::Set(SetExpression::new(op, s.term().clone(), kept))
                }
                _ => p.clone(),
            }
        }
        _ => p.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::expr::{Bind, BoundPredicate, Reference};
    use iceberg::spec::{NestedField, PrimitiveType, UnboundPartitionSpec};
    use std::sync::Arc;

    fn schema() -> Arc<Schema> {
        Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::required(1, "key", Type::Primitive(PrimitiveType::Long)).into(),
                    NestedField::optional(2, "s", Type::Primitive(PrimitiveType::String)).into(),
                ])
                .build()
                .unwrap(),
        )
    }

    fn bucket_of(n: u32, v: i64) -> i32 {
        let f = create_transform_function(&Transform::Bucket(n)).unwrap();
        match f
            .transform_literal(&Datum::long(v))
            .unwrap()
            .unwrap()
            .literal()
        {
            PrimitiveLiteral::Int(b) => *b,
            l => panic!("{l:?}"),
        }
    }

    /// Evaluates a bound predicate on one row (key, s), three-valued.
    fn holds(p: &BoundPredicate, key: i64, s: Option<&str>) -> Option<bool> {
        let datum = |id: i32| match id {
            1 => Some(Datum::long(key)),
            _ => s.map(Datum::string),
        };
        Some(match p {
            BoundPredicate::AlwaysTrue => true,
            BoundPredicate::AlwaysFalse => false,
            // Three-valued, as SQL (None: unknown).
            BoundPredicate::And(e) => {
                let [a, b] = e.inputs();
                match (holds(a, key, s), holds(b, key, s)) {
                    (Some(false), _) | (_, Some(false)) => false,
                    (Some(true), Some(true)) => true,
                    _ => return None,
                }
            }
            BoundPredicate::Or(e) => {
                let [a, b] = e.inputs();
                match (holds(a, key, s), holds(b, key, s)) {
                    (Some(true), _) | (_, Some(true)) => true,
                    (Some(false), Some(false)) => false,
                    _ => return None,
                }
            }
            BoundPredicate::Not(e) => {
                let [a] = e.inputs();
                !holds(a, key, s)?
            }
            BoundPredicate::Set(x) => {
                let v = datum(x.term().field().id)?;
                let found = x.literals().contains(&v);
                match x.op() {
                    PredicateOperator::In => found,
                    _ => !found,
                }
            }
            BoundPredicate::Binary(b) => {
                let v = datum(b.term().field().id)?;
                let l = b.literal();
                match b.op() {
                    PredicateOperator::Eq => v == *l,
                    PredicateOperator::NotEq => v != *l,
                    PredicateOperator::GreaterThanOrEq => v >= *l,
                    PredicateOperator::GreaterThan => v > *l,
                    PredicateOperator::LessThan => v < *l,
                    PredicateOperator::LessThanOrEq => v <= *l,
                    op => panic!("{op:?}"),
                }
            }
            _ => return None,
        })
    }

    /// The values of every IN / NOT IN of `p`.
    fn set_values(p: &Predicate, out: &mut Vec<Datum>) {
        match p {
            Predicate::And(e) | Predicate::Or(e) => {
                e.inputs().iter().for_each(|a| set_values(a, out))
            }
            Predicate::Not(e) => set_values(e.inputs()[0], out),
            Predicate::Set(s) => out.extend(s.literals().iter().cloned()),
            _ => {}
        }
    }

    /// For random IN / NOT IN lists (under AND, OR and NOT) and every row of each bucket,
    /// the narrowed predicate holds exactly where the original does; values of other
    /// buckets are gone; other partitionings and columns are left alone.
    #[test]
    fn narrowed_predicates_agree_on_the_files_rows() {
        use rand::{Rng, SeedableRng};
        let schema = schema();
        let spec = UnboundPartitionSpec::builder()
            .add_partition_field(1, "key_bucket", Transform::Bucket(8))
            .unwrap()
            .build()
            .bind(schema.clone())
            .unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let key = || Reference::new("key");
        let mut narrowed_some = false;
        for round in 0..200 {
            let values: Vec<i64> = (0..rng.gen_range(0..12))
                .map(|_| rng.gen_range(-50..50))
                .collect();
            let set = if rng.gen_bool(0.7) {
                key().is_in(values.iter().map(|v| Datum::long(*v)))
            } else {
                key().is_not_in(values.iter().map(|v| Datum::long(*v)))
            };
            let other = Reference::new("s").equal_to(Datum::string("x"));
            let p = match round % 4 {
                0 => set,
                1 => set.and(other),
                2 => set.or(other),
                _ => !set.or(key().greater_than_or_equal_to(Datum::long(40))),
            };
            let bound = p.clone().bind(schema.clone(), false).unwrap();
            for b in 0..8 {
                let part = Struct::from_iter([Some(Literal::int(b))]);
                let n = narrow_to_partition(&p, &schema, &spec, &part);
                let nb = n.clone().bind(schema.clone(), false).unwrap();
                narrowed_some |= n != p;
                for k in (-60..60).filter(|k| bucket_of(8, *k) == b) {
                    for s in [None, Some("x"), Some("y")] {
                        assert_eq!(
                            holds(&nb, k, s),
                            holds(&bound, k, s),
                            "{p} narrowed to bucket {b}: {n}, row ({k}, {s:?})"
                        );
                    }
                }
                // No value of another bucket is left.
                let mut left = Vec::new();
                set_values(&n, &mut left);
                for v in left {
                    let PrimitiveLiteral::Long(v) = v.literal() else {
                        panic!("{v:?}")
                    };
                    assert_eq!(bucket_of(8, *v), b, "{n} keeps {v}");
                }
            }
        }
        assert!(narrowed_some);
        // An identity partition narrows nothing.
        let ident = UnboundPartitionSpec::builder()
            .add_partition_field(1, "key", Transform::Identity)
            .unwrap()
            .build()
            .bind(schema.clone())
            .unwrap();
        let p = key().is_in([Datum::long(1), Datum::long(2)]);
        let part = Struct::from_iter([Some(Literal::long(1))]);
        assert_eq!(narrow_to_partition(&p, &schema, &ident, &part), p);
    }
}
