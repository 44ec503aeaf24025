//! Columns of Iceberg literals (partition values, decoded bounds) for the metadata tables.

use std::sync::Arc;

use arrow_array::{new_empty_array, new_null_array, Array, ArrayRef};
use arrow_schema::DataType;
use iceberg::spec::{PrimitiveLiteral, PrimitiveType};

use crate::error::Result;

/// A column of Arrow type `dt` holding `values` of Iceberg type `ty` (built in one pass for
/// the common types; value by value otherwise).
pub(super) fn literal_column(
    values: &[Option<&PrimitiveLiteral>],
    ty: &PrimitiveType,
    dt: &DataType,
) -> Result<ArrayRef> {
    use arrow_array::{
        BinaryArray, BooleanArray, Float32Array, Float64Array, Int32Array, Int64Array, StringArray,
    };
    use PrimitiveLiteral as L;
    macro_rules! typed {
        ($array:ty, $pat:pat => $v:expr) => {{
            let mut ok = true;
            let a: $array = values
                .iter()
                .map(|v| match v {
                    None => None,
                    Some($pat) => Some($v),
                    Some(_) => {
                        ok = false;
                        None
                    }
                })
                .collect();
            ok.then(|| Arc::new(a) as ArrayRef)
        }};
    }
    let base = match ty {
        PrimitiveType::Boolean => typed!(BooleanArray, L::Boolean(b) => *b),
        PrimitiveType::Int | PrimitiveType::Date => typed!(Int32Array, L::Int(i) => *i),
        PrimitiveType::Long
        | PrimitiveType::Time
        | PrimitiveType::Timestamp
        | PrimitiveType::Timestamptz
        | PrimitiveType::TimestampNs
        | PrimitiveType::TimestamptzNs => typed!(Int64Array, L::Long(i) => *i),
        PrimitiveType::Float => typed!(Float32Array, L::Float(f) => f.0),
        PrimitiveType::Double => typed!(Float64Array, L::Double(f) => f.0),
        PrimitiveType::String => typed!(StringArray, L::String(s) => s.as_str()),
        PrimitiveType::Binary => typed!(BinaryArray, L::Binary(b) => b.as_slice()),
        _ => None,
    };
    if let Some(a) = base {
        if a.data_type() == dt {
            return Ok(a);
        }
        if let Ok(c) = arrow_cast::cast(&a, dt) {
            return Ok(c);
        }
    }
    // Decimals, fixed, UUIDs and anything unexpected: one value at a time.
    let parts = values
        .iter()
        .map(|v| match v {
            Some(l) => crate::expr::literal_array(l, ty, dt).or_else(|_| Ok(new_null_array(dt, 1))),
            None => Ok(new_null_array(dt, 1)),
        })
        .collect::<Result<Vec<_>>>()?;
    if parts.is_empty() {
        return Ok(new_empty_array(dt));
    }
    Ok(arrow_select::concat::concat(
        &parts.iter().map(|a| a.as_ref()).collect::<Vec<_>>(),
    )?)
}
