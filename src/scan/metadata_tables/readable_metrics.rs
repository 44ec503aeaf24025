//! The `readable_metrics` column of the files and entries tables (Java's
//! `MetricsUtil.readableMetricsSchema`): per primitive column of the current schema (by its
//! full name, sorted), its size, value, null and NaN counts and its bounds decoded to the
//! column's type.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::Int64Builder;
use arrow_array::{new_empty_array, new_null_array, Array, ArrayRef, StructArray};
use arrow_schema::{DataType, Field, Fields};
use iceberg::spec::{DataFile, Datum, PrimitiveType, Schema, Type};

use crate::error::Result;

/// A bound decoded as a column of Arrow type `dt` (null when absent or not convertible).
fn bound(d: Option<&Datum>, ty: &PrimitiveType, dt: &DataType) -> Result<ArrayRef> {
    let Some(d) = d else {
        return Ok(new_null_array(dt, 1));
    };
    // Bounds are stored in the type they were written with: decode them as the column's
    // type now (Java: Conversions.fromByteBuffer(field.type(), …)).
    let lit = match Datum::try_from_bytes(&d.to_bytes()?, ty.clone()) {
        Ok(d) => d.literal().clone(),
        Err(_) => d.literal().clone(),
    };
    match crate::expr::literal_array(&lit, ty, dt) {
        Ok(a) => Ok(a),
        Err(_) => Ok(new_null_array(dt, 1)),
    }
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
            let parts = files
                .iter()
                .map(|f| bound(get(f).get(&id), &ty, &dt))
                .collect::<Result<Vec<_>>>()?;
            let a = if parts.is_empty() {
                new_empty_array(&dt)
            } else {
                arrow_select::concat::concat(&parts.iter().map(|a| a.as_ref()).collect::<Vec<_>>())?
            };
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
