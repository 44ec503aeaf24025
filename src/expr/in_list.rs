//! `x IN (v1, …, vn)` with many literal values: one hash-set probe per row instead of n
//! comparisons OR-ed together. Exact for the types it takes (integers, dates, times,
//! timestamps, decimals, strings, binary): equal values of one Arrow type are equal bytes or
//! integers. Floats keep the comparisons (Spark's -0.0 and NaN rules).

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int64Type};
use arrow_array::{Array, ArrayRef, BooleanArray};
use arrow_schema::DataType;
use foldhash::fast::FixedState;

use crate::error::Result;

/// Lists shorter than this stay comparisons (vectorized and as fast).
pub(crate) const MIN_SET_VALUES: usize = 8;

/// The values of an IN list, as a set keyed by the probed column's representation.
#[derive(Debug)]
pub(crate) enum InSet {
    /// Integer-like types, as their 64-bit integer values.
    Int(HashSet<i64, FixedState>),
    /// Decimals of one precision and scale, as their unscaled values.
    Decimal(HashSet<i128, FixedState>),
    /// Strings, binary and fixed-size binary, as their bytes.
    Bytes(HashSet<Box<[u8]>, FixedState>),
}

/// Whether values of `t` are compared by their integer representation.
fn integer_like(t: &DataType) -> bool {
    use DataType::*;
    matches!(
        t,
        Int8 | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | Date32
            | Date64
            | Time32(_)
            | Time64(_)
            | Timestamp(_, _)
    )
}

/// Each value of an array of `t` as bytes (`None` for a null), for the byte-keyed types.
fn bytes_of(a: &ArrayRef) -> Option<Vec<Option<&[u8]>>> {
    Some(match a.data_type() {
        DataType::Utf8 => a
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::as_bytes))
            .collect(),
        DataType::LargeUtf8 => a
            .as_string::<i64>()
            .iter()
            .map(|v| v.map(str::as_bytes))
            .collect(),
        DataType::Utf8View => a
            .as_string_view()
            .iter()
            .map(|v| v.map(str::as_bytes))
            .collect(),
        DataType::Binary => a.as_binary::<i32>().iter().collect(),
        DataType::LargeBinary => a.as_binary::<i64>().iter().collect(),
        DataType::BinaryView => a.as_binary_view().iter().collect(),
        DataType::FixedSizeBinary(_) => a.as_fixed_size_binary().iter().collect(),
        _ => return None,
    })
}

/// An integer-like array as 64-bit integers.
fn as_i64(a: &ArrayRef) -> Result<ArrayRef> {
    Ok(arrow_cast::cast(a, &DataType::Int64)?)
}

impl InSet {
    /// The set of `values` (non-null one-element arrays of type `t`), or `None` when the
    /// type is not one a set compares exactly.
    pub(crate) fn new(t: &DataType, values: &[ArrayRef]) -> Result<Option<InSet>> {
        if values
            .iter()
            .any(|v| v.data_type() != t || v.len() != 1 || v.is_null(0))
        {
            return Ok(None);
        }
        if integer_like(t) {
            let mut set = HashSet::with_hasher(FixedState::default());
            for v in values {
                set.insert(as_i64(v)?.as_primitive::<Int64Type>().value(0));
            }
            return Ok(Some(InSet::Int(set)));
        }
        if let DataType::Decimal128(..) = t {
            let set = values
                .iter()
                .map(|v| v.as_primitive::<Decimal128Type>().value(0))
                .collect::<HashSet<_, _>>();
            return Ok(Some(InSet::Decimal(set)));
        }
        let mut set = HashSet::with_hasher(FixedState::default());
        for v in values {
            match bytes_of(v).as_deref() {
                Some([Some(b)]) => set.insert(Box::<[u8]>::from(*b)),
                _ => return Ok(None),
            };
        }
        Ok(Some(InSet::Bytes(set)))
    }

    /// For each value of `a` (of the set's type): whether it is in the set; null where `a`
    /// is null.
    pub(crate) fn contains(&self, a: &ArrayRef) -> Result<BooleanArray> {
        let hits: Vec<bool> = match self {
            InSet::Int(set) => {
                let ints = as_i64(a)?;
                let ints = ints.as_primitive::<Int64Type>();
                ints.values().iter().map(|v| set.contains(v)).collect()
            }
            InSet::Decimal(set) => a
                .as_primitive::<Decimal128Type>()
                .values()
                .iter()
                .map(|v| set.contains(v))
                .collect(),
            InSet::Bytes(set) => bytes_of(a)
                .ok_or_else(|| {
                    crate::error::Error::invalid(format!(
                        "an IN list of bytes cannot probe a {} column",
                        a.data_type()
                    ))
                })?
                .into_iter()
                .map(|v| v.is_some_and(|b| set.contains(b)))
                .collect(),
        };
        Ok(BooleanArray::new(hits.into(), a.logical_nulls()))
    }
}

/// Shared so bound expressions stay cheap to clone.
pub(crate) type InSetRef = Arc<InSet>;

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, StringArray};

    #[test]
    fn sets_answer_like_the_comparisons_they_replace() {
        let col: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None, Some(7), Some(-3)]));
        let values: Vec<ArrayRef> = [7, 1, 100]
            .iter()
            .map(|v| Arc::new(Int32Array::from(vec![*v])) as ArrayRef)
            .collect();
        let set = InSet::new(&DataType::Int32, &values).unwrap().unwrap();
        let got = set.contains(&col).unwrap();
        assert_eq!(
            got.iter().collect::<Vec<_>>(),
            [Some(true), None, Some(true), Some(false)]
        );
        let col: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), Some("bc"), None]));
        let values: Vec<ArrayRef> = ["bc", "x"]
            .iter()
            .map(|v| Arc::new(StringArray::from(vec![*v])) as ArrayRef)
            .collect();
        let set = InSet::new(&DataType::Utf8, &values).unwrap().unwrap();
        assert_eq!(
            set.contains(&col).unwrap().iter().collect::<Vec<_>>(),
            [Some(false), Some(true), None]
        );
        // A null value or a float type keeps the comparisons.
        let nulls: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(vec![None::<i32>]))];
        assert!(InSet::new(&DataType::Int32, &nulls).unwrap().is_none());
        let floats: Vec<ArrayRef> = vec![Arc::new(arrow_array::Float64Array::from(vec![1.0]))];
        assert!(InSet::new(&DataType::Float64, &floats).unwrap().is_none());
    }
}
