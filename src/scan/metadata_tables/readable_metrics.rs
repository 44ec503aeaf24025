//! The `readable_metrics` column of the files and entries tables (Java's
//! `MetricsUtil.readableMetricsSchema`): per primitive column of the current schema (by its
//! full name, sorted), its size, value, null and NaN counts and its bounds decoded to the
//! column's type.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::Int64Builder;
use arrow_array::{Array, ArrayRef, StructArray};
use arrow_schema::{DataType, Field, Fields};
use iceberg::spec::{DataFile, Datum, PrimitiveLiteral, PrimitiveType, Schema, Type};

use crate::error::Result;

/// A bound as a literal of the column's type now: bounds are stored in the type they were
/// written with (an int column promoted to long keeps 4-byte bounds); Java decodes them with
/// the field's type (`Conversions.fromByteBuffer(field.type(), …)`).
fn bound(d: &Datum, ty: &PrimitiveType) -> PrimitiveLiteral {
    d.to_bytes()
        .ok()
        .and_then(|b| Datum::try_from_bytes(&b, ty.clone()).ok())
        .map(|d| d.literal().clone())
        .unwrap_or_else(|| d.literal().clone())
}

/// The `readable_metrics` column for `files` against table schema `schema` (None when the
/// schema has no primitive column).
pub(super) fn readable_metrics(
    schema: &Schema,
    files: &[&DataFile],
) -> Result<Option<(Field, ArrayRef)>> {
    let mut cols: Vec<(&str, i32, PrimitiveType)> = schema
        .field_id_to_name_map()
        .iter()
        .filter_map(|(id, name)| {
            let f = schema.field_by_id(*id)?;
            match f.field_type.as_ref() {
                Type::Primitive(p) => Some((name.as_str(), *id, p.clone())),
                _ => None,
            }
        })
        .collect();
    if cols.is_empty() {
        return Ok(None);
    }
    cols.sort_by(|a, b| a.0.cmp(b.0));
    let mut fields = Vec::with_capacity(cols.len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(cols.len());
    type Counts = fn(&DataFile) -> &HashMap<i32, u64>;
    let counts: [(&str, Counts); 4] = [
        ("column_size", DataFile::column_sizes),
        ("value_count", DataFile::value_counts),
        ("null_value_count", DataFile::null_value_counts),
        ("nan_value_count", DataFile::nan_value_counts),
    ];
    for (name, id, ty) in cols {
        let dt = iceberg::arrow::type_to_arrow_type(&Type::Primitive(ty.clone()))?;
        let mut sub_fields = Vec::with_capacity(6);
        let mut sub: Vec<ArrayRef> = Vec::with_capacity(6);
        for (metric, get) in counts {
            let mut b = Int64Builder::with_capacity(files.len());
            for f in files {
                b.append_option(get(f).get(&id).map(|v| *v as i64));
            }
            sub_fields.push(Field::new(metric, DataType::Int64, true));
            sub.push(Arc::new(b.finish()));
        }
        type Bounds = fn(&DataFile) -> &HashMap<i32, Datum>;
        let bounds: [(&str, Bounds); 2] = [
            ("lower_bound", DataFile::lower_bounds),
            ("upper_bound", DataFile::upper_bounds),
        ];
        for (metric, get) in bounds {
            let lits: Vec<Option<PrimitiveLiteral>> = files
                .iter()
                .map(|f| get(f).get(&id).map(|d| bound(d, &ty)))
                .collect();
            let refs: Vec<Option<&PrimitiveLiteral>> = lits.iter().map(Option::as_ref).collect();
            let a = super::literals::literal_column(&refs, &ty, &dt)?;
            sub_fields.push(Field::new(metric, dt.clone(), true));
            sub.push(a);
        }
        let sub_fields = Fields::from(sub_fields);
        let s = StructArray::try_new(sub_fields.clone(), sub, None)?;
        fields.push(Field::new(name, DataType::Struct(sub_fields), true));
        columns.push(Arc::new(s));
    }
    let fields = Fields::from(fields);
    let all = StructArray::try_new(fields.clone(), columns, None)?;
    debug_assert_eq!(all.len(), files.len());
    Ok(Some((
        Field::new("readable_metrics", DataType::Struct(fields), true),
        Arc::new(all),
    )))
}
