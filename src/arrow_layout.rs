//! Arrow type layout helpers shared by the writer and the reader (pure).

use arrow_array::{make_array, ArrayRef};
use arrow_schema::DataType;

use crate::error::{Error, Result};

/// Whether arrays of type `a` can be relabelled as type `b`: the same physical layout, where
/// nested field metadata (Iceberg field ids), list item names and timezone spellings of the
/// same instant may differ, but struct members must match by name and order.
pub(crate) fn same_layout(a: &DataType, b: &DataType) -> bool {
    use DataType::*;
    match (a, b) {
        (List(x), List(y)) | (LargeList(x), LargeList(y)) => {
            same_layout(x.data_type(), y.data_type())
        }
        (Struct(x), Struct(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|(p, q)| p.name() == q.name() && same_layout(p.data_type(), q.data_type()))
        }
        (Map(x, s1), Map(y, s2)) => s1 == s2 && same_layout(x.data_type(), y.data_type()),
        _ => a == b,
    }
}

/// Relabels `a` as type `to` (see [`same_layout`]); no data is copied.
pub(crate) fn relabel(a: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    if a.data_type() == to {
        return Ok(a.clone());
    }
    let data = a
        .to_data()
        .into_builder()
        .data_type(to.clone())
        .build()
        .map_err(|e| Error::invalid(format!("cannot relabel {} as {to}: {e}", a.data_type())))?;
    Ok(make_array(data))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_schema::Field;

    use super::*;

    #[test]
    fn layouts() {
        let l1 = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
        let l2 = DataType::List(Arc::new(Field::new("element", DataType::Utf8, true)));
        assert!(same_layout(&l1, &l2));
        let s1 = DataType::Struct(vec![Field::new("a", DataType::Int32, true)].into());
        let s2 = DataType::Struct(vec![Field::new("b", DataType::Int32, true)].into());
        assert!(!same_layout(&s1, &s2));
        assert!(!same_layout(&DataType::Int32, &DataType::Int64));
    }
}
