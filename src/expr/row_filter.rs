//! Evaluates a bound Iceberg predicate over Arrow batches with SQL semantics (a comparison
//! with NULL is unknown, and unknown rows are filtered out). Columns are found by field id.

use std::sync::Arc;

use arrow_arith::boolean::{and_kleene, not, or_kleene};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Decimal128Array, FixedSizeBinaryArray,
    Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch, Scalar, StringArray,
    StructArray,
};
use arrow_ord::cmp;
use arrow_schema::{DataType, Fields};
use iceberg::expr::{BoundPredicate, PredicateOperator};
use iceberg::spec::{Datum, PrimitiveLiteral, PrimitiveType};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

use crate::error::{Error, Result};

/// Rows of `batch` for which `pred` is true (unknown counts as false).
pub fn filter_mask(pred: &BoundPredicate, batch: &RecordBatch) -> Result<BooleanArray> {
    let m = eval(pred, batch)?;
    Ok(match m.nulls() {
        Some(n) if n.null_count() > 0 => {
            let values = m.values() & n.inner();
            BooleanArray::new(values, None)
        }
        _ => m,
    })
}

fn eval(pred: &BoundPredicate, batch: &RecordBatch) -> Result<BooleanArray> {
    let n = batch.num_rows();
    Ok(match pred {
        BoundPredicate::AlwaysTrue => BooleanArray::from(vec![true; n]),
        BoundPredicate::AlwaysFalse => BooleanArray::from(vec![false; n]),
        BoundPredicate::And(e) => {
            let [a, b] = e.inputs();
            and_kleene(&eval(a, batch)?, &eval(b, batch)?)?
        }
        BoundPredicate::Or(e) => {
            let [a, b] = e.inputs();
            or_kleene(&eval(a, batch)?, &eval(b, batch)?)?
        }
        BoundPredicate::Not(e) => {
            let [a] = e.inputs();
            not(&eval(a, batch)?)?
        }
        BoundPredicate::Unary(u) => {
            let col = column(batch, u.term().field().id)?;
            match u.op() {
                PredicateOperator::IsNull => arrow::compute::is_null(&col)?,
                PredicateOperator::NotNull => arrow::compute::is_not_null(&col)?,
                PredicateOperator::IsNan | PredicateOperator::NotNan => {
                    let nan = is_nan(&col)?;
                    if u.op() == PredicateOperator::IsNan {
                        nan
                    } else {
                        not(&nan)?
                    }
                }
                op => return Err(Error::unsupported(format!("predicate operator {op}"))),
            }
        }
        BoundPredicate::Binary(b) => {
            let col = column(batch, b.term().field().id)?;
            let lit = scalar(b.literal(), col.data_type())?;
            let l = Scalar::new(lit);
            match b.op() {
                PredicateOperator::LessThan => cmp::lt(&col, &l)?,
                PredicateOperator::LessThanOrEq => cmp::lt_eq(&col, &l)?,
                PredicateOperator::GreaterThan => cmp::gt(&col, &l)?,
                PredicateOperator::GreaterThanOrEq => cmp::gt_eq(&col, &l)?,
                PredicateOperator::Eq => cmp::eq(&col, &l)?,
                PredicateOperator::NotEq => cmp::neq(&col, &l)?,
                PredicateOperator::StartsWith | PredicateOperator::NotStartsWith => {
                    let m = arrow_string::like::starts_with(&col, &l)?;
                    if b.op() == PredicateOperator::StartsWith {
                        m
                    } else {
                        not(&m)?
                    }
                }
                op => return Err(Error::unsupported(format!("predicate operator {op}"))),
            }
        }
        BoundPredicate::Set(s) => {
            let col = column(batch, s.term().field().id)?;
            let mut acc = BooleanArray::from(vec![false; n]);
            for d in s.literals() {
                let l = Scalar::new(scalar(d, col.data_type())?);
                acc = or_kleene(&acc, &cmp::eq(&col, &l)?)?;
            }
            match s.op() {
                PredicateOperator::In => acc,
                PredicateOperator::NotIn => not(&acc)?,
                op => return Err(Error::unsupported(format!("predicate operator {op}"))),
            }
        }
    })
}

/// Field ids a predicate refers to.
pub fn referenced_field_ids(pred: &BoundPredicate, out: &mut Vec<i32>) {
    match pred {
        BoundPredicate::AlwaysTrue | BoundPredicate::AlwaysFalse => {}
        BoundPredicate::And(e) | BoundPredicate::Or(e) => {
            for p in e.inputs() {
                referenced_field_ids(p, out);
            }
        }
        BoundPredicate::Not(e) => {
            for p in e.inputs() {
                referenced_field_ids(p, out);
            }
        }
        BoundPredicate::Unary(u) => out.push(u.term().field().id),
        BoundPredicate::Binary(b) => out.push(b.term().field().id),
        BoundPredicate::Set(s) => out.push(s.term().field().id),
    }
}

/// The column of `batch` carrying field id `id` (top level or inside structs).
pub fn column_by_field_id(batch: &RecordBatch, id: i32) -> Result<ArrayRef> {
    column(batch, id)
}

fn column(batch: &RecordBatch, id: i32) -> Result<ArrayRef> {
    find(batch.schema().fields(), batch.columns(), id).ok_or_else(|| {
        Error::invalid(format!(
            "the filter refers to field id {id}, which the batch being filtered does not carry"
        ))
    })
}

fn find(fields: &Fields, columns: &[ArrayRef], id: i32) -> Option<ArrayRef> {
    let want = id.to_string();
    for (f, c) in fields.iter().zip(columns) {
        if f.metadata().get(PARQUET_FIELD_ID_META_KEY) == Some(&want) {
            return Some(c.clone());
        }
        if let (DataType::Struct(children), Some(s)) =
            (f.data_type(), c.as_any().downcast_ref::<StructArray>())
        {
            if let Some(found) = find(children, s.columns(), id) {
                return Some(found);
            }
        }
    }
    None
}

fn is_nan(col: &ArrayRef) -> Result<BooleanArray> {
    if let Some(a) = col.as_any().downcast_ref::<Float64Array>() {
        return Ok(a.iter().map(|v| v.map(f64::is_nan)).collect());
    }
    if let Some(a) = col.as_any().downcast_ref::<Float32Array>() {
        return Ok(a.iter().map(|v| v.map(f32::is_nan)).collect());
    }
    Err(Error::invalid(format!(
        "is_nan applies to float and double columns, not {}",
        col.data_type()
    )))
}

/// A one-element array holding `d`, of the column's Arrow type.
pub(crate) fn scalar(d: &Datum, target: &DataType) -> Result<ArrayRef> {
    literal_array(d.literal(), d.data_type(), target)
}

/// A one-element array holding a literal of Iceberg type `ty`, of Arrow type `target`.
pub fn literal_array(
    lit: &PrimitiveLiteral,
    ty: &PrimitiveType,
    target: &DataType,
) -> Result<ArrayRef> {
    let base: ArrayRef = match (lit, ty) {
        (PrimitiveLiteral::Boolean(v), _) => Arc::new(BooleanArray::from(vec![*v])),
        (PrimitiveLiteral::Int(v), _) => Arc::new(Int32Array::from(vec![*v])),
        (PrimitiveLiteral::Long(v), _) => Arc::new(Int64Array::from(vec![*v])),
        (PrimitiveLiteral::Float(v), _) => Arc::new(Float32Array::from(vec![v.0])),
        (PrimitiveLiteral::Double(v), _) => Arc::new(Float64Array::from(vec![v.0])),
        (PrimitiveLiteral::String(v), _) => Arc::new(StringArray::from(vec![v.as_str()])),
        (PrimitiveLiteral::Binary(v), PrimitiveType::Fixed(_)) => Arc::new(
            FixedSizeBinaryArray::try_from_iter(std::iter::once(v.as_slice()))?,
        ),
        (PrimitiveLiteral::Binary(v), _) => Arc::new(BinaryArray::from(vec![v.as_slice()])),
        (PrimitiveLiteral::Int128(v), PrimitiveType::Decimal { precision, scale }) => Arc::new(
            Decimal128Array::from(vec![*v])
                .with_precision_and_scale(*precision as u8, *scale as i8)?,
        ),
        (PrimitiveLiteral::UInt128(v), _) => Arc::new(FixedSizeBinaryArray::try_from_iter(
            std::iter::once(v.to_be_bytes()),
        )?),
        (l, t) => {
            return Err(Error::unsupported(format!(
                "filter literal {l:?} of type {t} cannot be compared"
            )))
        }
    };
    if base.data_type() == target {
        return Ok(base);
    }
    let target = match target {
        DataType::Dictionary(_, v) => v.as_ref(),
        t => t,
    };
    Ok(arrow_cast::cast(&base, target)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::expr::{Bind, Reference};
    use iceberg::spec::{NestedField, Schema, Type};

    #[test]
    fn sql_semantics_with_nulls() {
        let schema = Arc::new(
            Schema::builder()
                .with_fields(vec![
                    NestedField::optional(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                    NestedField::optional(2, "s", Type::Primitive(PrimitiveType::String)).into(),
                ])
                .build()
                .unwrap(),
        );
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap());
        let batch = RecordBatch::try_new(
            arrow,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3), Some(4)])),
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    Some("b"),
                    None,
                    Some("ab"),
                ])),
            ],
        )
        .unwrap();
        let run = |p: iceberg::expr::Predicate| {
            let b = p.bind(schema.clone(), true).unwrap();
            filter_mask(&b, &batch)
                .unwrap()
                .iter()
                .map(|v| v.unwrap())
                .collect::<Vec<_>>()
        };
        let id = || Reference::new("id");
        assert_eq!(
            run(id().not_equal_to(Datum::long(3))),
            vec![true, false, false, true]
        );
        assert_eq!(
            run(id()
                .greater_than(Datum::long(1))
                .or(Reference::new("s").is_null())),
            vec![false, false, true, true]
        );
        assert_eq!(
            run(Reference::new("s").starts_with(Datum::string("a"))),
            vec![true, false, false, true]
        );
        assert_eq!(
            run(id().is_in([Datum::long(1), Datum::long(4)])),
            vec![true, false, false, true]
        );
        assert_eq!(
            run(id().is_not_in([Datum::long(1)])),
            vec![false, false, true, true]
        );
    }
}
