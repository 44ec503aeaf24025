//! Columns by name and by Iceberg identity: the one rule that finds the column a user named
//! ([`resolve_column`], [`resolve_field`]), the column of a batch that carries a field id, and
//! an Iceberg literal as a one-element Arrow array of a column's type.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Decimal128Array, FixedSizeBinaryArray, Float32Array,
    Float64Array, Int32Array, Int64Array, RecordBatch, StringArray, StructArray,
};
use arrow_schema::{DataType, Fields};
use iceberg::spec::{NestedFieldRef, PrimitiveLiteral, PrimitiveType, Schema};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

use crate::error::{Error, Result};

/// The position of the column a user called `want` among `names`: the one of exactly that name,
/// else the one whose name matches ignoring ASCII case. `Ok(None)` when none matches; an error
/// naming them when several match ignoring case (Iceberg Java's case-insensitive lookup
/// refuses such names too). Every name a user writes (filters, projections, assignments, key
/// columns) is found by this rule.
pub fn resolve_column<'a>(
    names: impl IntoIterator<Item = &'a str>,
    want: &str,
) -> Result<Option<usize>> {
    let names: Vec<&str> = names.into_iter().collect();
    if let Some(i) = names.iter().position(|n| *n == want) {
        return Ok(Some(i));
    }
    let hits: Vec<usize> = (0..names.len())
        .filter(|&i| names[i].eq_ignore_ascii_case(want))
        .collect();
    match hits.as_slice() {
        [] => Ok(None),
        [i] => Ok(Some(*i)),
        many => Err(Error::invalid(format!(
            "column '{want}' is ambiguous: {} differ only in case; write the name exactly",
            many.iter()
                .map(|&i| names[i])
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// [`resolve_column`] over an Iceberg schema's fields by full name (`s.a` is field `a` of
/// struct `s`).
pub fn resolve_field(schema: &Schema, want: &str) -> Result<Option<NestedFieldRef>> {
    if let Some(f) = schema.field_by_name(want) {
        return Ok(Some(f.clone()));
    }
    let mut named: Vec<(i32, &str)> = schema
        .field_id_to_name_map()
        .iter()
        .map(|(id, n)| (*id, n.as_str()))
        .collect();
    named.sort_unstable();
    let found = resolve_column(named.iter().map(|(_, n)| *n), want)?;
    Ok(found.and_then(|i| schema.field_by_id(named[i].0).cloned()))
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

    #[test]
    fn exact_names_win_then_one_case_insensitive_match() {
        let names = ["id", "Name", "NAME2", "x"];
        assert_eq!(resolve_column(names, "Name").unwrap(), Some(1));
        assert_eq!(resolve_column(names, "name").unwrap(), Some(1));
        assert_eq!(resolve_column(names, "name2").unwrap(), Some(2));
        assert_eq!(resolve_column(names, "y").unwrap(), None);
        let twins = ["a", "A"];
        assert_eq!(resolve_column(twins, "A").unwrap(), Some(1));
        let err = resolve_column(twins, "b").unwrap();
        assert_eq!(err, None);
        let err = resolve_column(["Ab", "aB"], "ab").unwrap_err();
        assert!(err.to_string().contains("ambiguous"), "{err}");
    }

    #[test]
    fn fields_resolve_by_full_name() {
        let s = crate::spec::parse_schema("id long, St struct<A: int, b: string>").unwrap();
        assert_eq!(resolve_field(&s, "st.a").unwrap().unwrap().name, "A");
        assert_eq!(resolve_field(&s, "ID").unwrap().unwrap().name, "id");
        assert!(resolve_field(&s, "st.c").unwrap().is_none());
    }
}
