//! Arrow values by Iceberg identity: the column of a batch that carries a field id, and an
//! Iceberg literal as a one-element Arrow array of a column's type.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Decimal128Array, FixedSizeBinaryArray, Float32Array,
    Float64Array, Int32Array, Int64Array, RecordBatch, StringArray, StructArray,
};
use arrow_schema::{DataType, Fields};
use iceberg::spec::{PrimitiveLiteral, PrimitiveType};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

use crate::error::{Error, Result};

/// The column of `batch` carrying field id `id` (top level or inside structs).
pub(crate) fn column_by_field_id(batch: &RecordBatch, id: i32) -> Result<ArrayRef> {
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

/// A one-element array holding a literal of Iceberg type `ty`, of Arrow type `target`.
pub(crate) fn literal_array(
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
