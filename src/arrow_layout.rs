//! Arrow type layout helpers shared by the writer and the reader (pure).

use arrow_array::{make_array, ArrayRef};
use arrow_data::ArrayData;
use arrow_schema::{ArrowError, DataType};

use crate::error::{Error, Result};

/// Whether arrays of type `a` can be relabelled as type `b`: the same physical layout, where
/// nested field metadata (Iceberg field ids), list item names and timezone spellings of the
/// same instant may differ, but struct members must match by name and order (map entries:
/// by order).
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
        // A map's entries are a key and a value by position, whatever their names.
        (Map(x, s1), Map(y, s2)) => {
            s1 == s2
                && match (x.data_type(), y.data_type()) {
                    (Struct(p), Struct(q)) => {
                        p.len() == q.len()
                            && p.iter()
                                .zip(q.iter())
                                .all(|(p, q)| same_layout(p.data_type(), q.data_type()))
                    }
                    _ => false,
                }
        }
        _ => a == b,
    }
}

/// Relabels `a` as type `to` (see [`same_layout`]); no data is copied. The new labels are
/// applied at every nesting level (struct members, list elements, map entries).
pub(crate) fn relabel(a: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    if a.data_type() == to {
        return Ok(a.clone());
    }
    let data = relabel_data(a.to_data(), to)
        .map_err(|e| Error::invalid(format!("cannot relabel {} as {to}: {e}", a.data_type())))?;
    Ok(make_array(data))
}

/// [`relabel`] on the array data, children first.
fn relabel_data(d: ArrayData, to: &DataType) -> std::result::Result<ArrayData, ArrowError> {
    use DataType::*;
    if d.data_type() == to {
        return Ok(d);
    }
    let targets: Vec<&DataType> = match to {
        List(f) | LargeList(f) | Map(f, _) => vec![f.data_type()],
        Struct(fs) => fs.iter().map(|f| f.data_type()).collect(),
        _ => Vec::new(),
    };
    let builder = if targets.is_empty() {
        d.into_builder()
    } else {
        if targets.len() != d.child_data().len() {
            return Err(ArrowError::InvalidArgumentError(format!(
                "{} children where {to} has {}",
                d.child_data().len(),
                targets.len()
            )));
        }
        let children = d
            .child_data()
            .iter()
            .zip(targets)
            .map(|(c, t)| relabel_data(c.clone(), t))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        d.into_builder().child_data(children)
    };
    builder.data_type(to.clone()).build()
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

    /// Regression (issue 14): nested members carry their own labels ("cannot relabel").
    #[test]
    fn relabels_at_every_level() {
        use arrow_array::builder::{Int32Builder, ListBuilder, MapBuilder, StructBuilder};
        use arrow_array::Array;
        use arrow_schema::Fields;
        let id = |f: Field, v: &str| {
            f.with_metadata([("PARQUET:field_id".to_string(), v.to_string())].into())
        };
        let mut l = ListBuilder::new(StructBuilder::from_fields(
            vec![Field::new("a", DataType::Int32, true)],
            0,
        ));
        l.values()
            .field_builder::<Int32Builder>(0)
            .unwrap()
            .append_value(1);
        l.values().append(true);
        l.append(true);
        let l: ArrayRef = Arc::new(l.finish());
        let member = id(Field::new("a", DataType::Int32, true), "3");
        let to = DataType::List(Arc::new(id(
            Field::new(
                "element",
                DataType::Struct(Fields::from(vec![member])),
                true,
            ),
            "2",
        )));
        assert!(same_layout(l.data_type(), &to));
        let out = relabel(&l, &to).unwrap();
        assert_eq!(out.data_type(), &to);
        assert_eq!(out.len(), 1);
        let mut m = MapBuilder::new(None, Int32Builder::new(), Int32Builder::new());
        m.keys().append_value(1);
        m.values().append_null();
        m.append(true).unwrap();
        let m: ArrayRef = Arc::new(m.finish());
        let entries = Field::new(
            "key_value",
            DataType::Struct(Fields::from(vec![
                id(Field::new("key", DataType::Int32, false), "5"),
                id(Field::new("value", DataType::Int32, true), "6"),
            ])),
            false,
        );
        let to = DataType::Map(Arc::new(entries), false);
        assert!(same_layout(m.data_type(), &to));
        assert_eq!(relabel(&m, &to).unwrap().data_type(), &to);
    }
}
