//! Projecting a data file's columns onto the table's current schema by field id, at every
//! nesting level (pure): struct members are matched by id, not by name or position (a member
//! renamed, moved, dropped or added since the file was written resolves as Iceberg's column
//! projection says); a member the file lacks reads as its `initial-default` (v3) or null;
//! primitives the schema widened since (int→long, float→double, decimal precision,
//! date→timestamp) are cast.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{new_null_array, Array, ArrayRef, MapArray, StructArray, UInt32Array};
use arrow_schema::{DataType, Field};
use iceberg::spec::{Literal, Schema, Type};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

use crate::arrow_layout::relabel;
use crate::error::{Error, Result};

/// How a file's array becomes an array of the target type.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Adapt {
    /// The same members in the same order with the same types: relabelled, nothing copied.
    Same,
    /// A primitive widened by a schema change.
    Cast,
    /// A struct whose members changed: each target member from a file member or filled.
    Struct(Vec<Member>),
    /// A list whose elements changed.
    List(Box<Adapt>),
    /// A map whose keys or values changed.
    Map(Box<Adapt>, Box<Adapt>),
}

/// Where a target struct member comes from.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Member {
    /// The file member at this index.
    From(usize, Adapt),
    /// The file lacks it: every row is this default (`None`: null).
    Fill(Option<Literal>),
}

/// A field's Iceberg field id.
pub(super) fn field_id(f: &Field) -> Option<i32> {
    f.metadata().get(PARQUET_FIELD_ID_META_KEY)?.parse().ok()
}

/// Primitive changes a schema may make (the spec's type promotions).
fn widened(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    match (from, to) {
        (Int32, Int64) | (Float32, Float64) | (Date32, Timestamp(_, None)) => true,
        (Decimal128(p, s), Decimal128(q, t)) => s == t && q >= p,
        _ => false,
    }
}

/// How an array of the file's type `file` becomes the target type `target`, matching members
/// by field id; `None` when it cannot (missing ids, a change the spec does not allow).
/// `schema` supplies the initial defaults of members the file lacks.
pub(super) fn plan(file: &DataType, target: &DataType, schema: &Schema) -> Option<Adapt> {
    use DataType::*;
    match (file, target) {
        (Struct(ff), Struct(tf)) => {
            let by_id: HashMap<i32, usize> = ff
                .iter()
                .enumerate()
                .filter_map(|(i, f)| Some((field_id(f)?, i)))
                .collect();
            if by_id.len() != ff.len() {
                return None;
            }
            let mut members = Vec::with_capacity(tf.len());
            for t in tf {
                let id = field_id(t)?;
                members.push(match by_id.get(&id) {
                    Some(&i) => Member::From(i, plan(ff[i].data_type(), t.data_type(), schema)?),
                    None => Member::Fill(initial_default(schema, id)),
                });
            }
            let same = members.len() == ff.len()
                && members
                    .iter()
                    .enumerate()
                    .all(|(n, m)| matches!(m, Member::From(i, Adapt::Same) if *i == n));
            Some(if same {
                Adapt::Same
            } else {
                Adapt::Struct(members)
            })
        }
        (List(f), List(t)) | (LargeList(f), LargeList(t)) => {
            if field_id(f)? != field_id(t)? {
                return None;
            }
            match plan(f.data_type(), t.data_type(), schema)? {
                Adapt::Same => Some(Adapt::Same),
                inner => Some(Adapt::List(Box::new(inner))),
            }
        }
        (Map(f, fs), Map(t, ts)) if fs == ts => {
            let (Struct(fe), Struct(te)) = (f.data_type(), t.data_type()) else {
                return None;
            };
            if fe.len() != 2 || te.len() != 2 {
                return None;
            }
            let (k, v) = (
                plan(fe[0].data_type(), te[0].data_type(), schema)?,
                plan(fe[1].data_type(), te[1].data_type(), schema)?,
            );
            let ids = |e: &arrow_schema::Fields| (field_id(&e[0]), field_id(&e[1]));
            if ids(fe) != ids(te) {
                return None;
            }
            Some(if k == Adapt::Same && v == Adapt::Same {
                Adapt::Same
            } else {
                Adapt::Map(Box::new(k), Box::new(v))
            })
        }
        (f, t) if crate::arrow_layout::same_layout(f, t) => Some(Adapt::Same),
        (f, t) if widened(f, t) => Some(Adapt::Cast),
        _ => None,
    }
}

/// The `initial-default` of field `id` (what rows written before it existed hold).
pub(super) fn initial_default(schema: &Schema, id: i32) -> Option<Literal> {
    schema.field_by_id(id)?.initial_default.clone()
}

/// `n` rows of field `to` that the file lacks: its default, or nulls.
pub(super) fn fill(
    default: Option<&Literal>,
    schema: &Schema,
    to: &Field,
    n: usize,
) -> Result<ArrayRef> {
    let (Some(Literal::Primitive(lit)), Some(id)) = (default, field_id(to)) else {
        return Ok(new_null_array(to.data_type(), n));
    };
    let ty = match schema.field_by_id(id).map(|f| f.field_type.as_ref()) {
        Some(Type::Primitive(p)) => p.clone(),
        _ => return Ok(new_null_array(to.data_type(), n)),
    };
    let one = crate::expr::literal_array(lit, &ty, to.data_type())?;
    Ok(arrow_select::take::take(
        &one,
        &UInt32Array::from(vec![0u32; n]),
        None,
    )?)
}

/// Applies `adapt` to `a`, giving an array of type `to`.
pub(super) fn apply(
    a: &ArrayRef,
    adapt: &Adapt,
    to: &DataType,
    schema: &Schema,
) -> Result<ArrayRef> {
    let mismatch = || {
        Error::corrupt(format!(
            "a column of type {} cannot be read as {to}",
            a.data_type()
        ))
    };
    match adapt {
        Adapt::Same => relabel(a, to),
        Adapt::Cast => Ok(arrow_cast::cast(a, to)?),
        Adapt::Struct(members) => {
            let (DataType::Struct(fields), Some(s)) = (to, a.as_struct_opt()) else {
                return Err(mismatch());
            };
            let columns = members
                .iter()
                .zip(fields.iter())
                .map(|(m, f)| match m {
                    Member::From(i, inner) => apply(s.column(*i), inner, f.data_type(), schema),
                    Member::Fill(d) => fill(d.as_ref(), schema, f, s.len()),
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Arc::new(StructArray::try_new(
                fields.clone(),
                columns,
                s.nulls().cloned(),
            )?))
        }
        Adapt::List(inner) => match to {
            DataType::List(f) => {
                let l = a.as_list_opt::<i32>().ok_or_else(mismatch)?;
                let values = apply(l.values(), inner, f.data_type(), schema)?;
                Ok(Arc::new(arrow_array::ListArray::try_new(
                    f.clone(),
                    l.offsets().clone(),
                    values,
                    l.nulls().cloned(),
                )?))
            }
            DataType::LargeList(f) => {
                let l = a.as_list_opt::<i64>().ok_or_else(mismatch)?;
                let values = apply(l.values(), inner, f.data_type(), schema)?;
                Ok(Arc::new(arrow_array::LargeListArray::try_new(
                    f.clone(),
                    l.offsets().clone(),
                    values,
                    l.nulls().cloned(),
                )?))
            }
            _ => Err(mismatch()),
        },
        Adapt::Map(k, v) => {
            let (DataType::Map(entries, sorted), Some(m)) = (to, a.as_map_opt()) else {
                return Err(mismatch());
            };
            let DataType::Struct(ef) = entries.data_type() else {
                return Err(mismatch());
            };
            let keys = apply(m.keys(), k, ef[0].data_type(), schema)?;
            let values = apply(m.values(), v, ef[1].data_type(), schema)?;
            let e = StructArray::try_new(ef.clone(), vec![keys, values], None)?;
            Ok(Arc::new(MapArray::try_new(
                entries.clone(),
                m.offsets().clone(),
                e,
                m.nulls().cloned(),
                *sorted,
            )?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, Int64Array};
    use arrow_buffer::NullBuffer;
    use arrow_schema::Fields;
    use iceberg::spec::{NestedField, PrimitiveType, StructType};

    fn field(name: &str, id: i32, ty: DataType) -> Field {
        Field::new(name, ty, true)
            .with_metadata([(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())].into())
    }

    /// Table schema: s struct<x: long (id 2), b: int (id 5, default 7)>.
    fn schema() -> Schema {
        let members = StructType::new(vec![
            Arc::new(NestedField::optional(
                2,
                "x",
                Type::Primitive(PrimitiveType::Long),
            )),
            Arc::new(
                NestedField::optional(5, "b", Type::Primitive(PrimitiveType::Int))
                    .with_initial_default(Literal::int(7)),
            ),
        ]);
        Schema::builder()
            .with_fields(vec![Arc::new(NestedField::optional(
                1,
                "s",
                Type::Struct(members),
            ))])
            .build()
            .unwrap()
    }

    #[test]
    fn members_resolve_by_id_not_by_name() {
        // The file: s struct<a: int (id 2), b: int (id 3)>; since then a was renamed x and
        // widened to long, b (id 3) dropped and a new b (id 5, default 7) added.
        let file = DataType::Struct(Fields::from(vec![
            field("a", 2, DataType::Int32),
            field("b", 3, DataType::Int32),
        ]));
        let target = DataType::Struct(Fields::from(vec![
            field("x", 2, DataType::Int64),
            field("b", 5, DataType::Int32),
        ]));
        let s = schema();
        let adapt = plan(&file, &target, &s).unwrap();
        assert_eq!(
            adapt,
            Adapt::Struct(vec![
                Member::From(0, Adapt::Cast),
                Member::Fill(Some(Literal::int(7)))
            ])
        );
        let DataType::Struct(ff) = &file else {
            unreachable!()
        };
        let a: ArrayRef = Arc::new(
            StructArray::try_new(
                ff.clone(),
                vec![
                    Arc::new(Int32Array::from(vec![Some(1), None, Some(3)])),
                    Arc::new(Int32Array::from(vec![10, 20, 30])),
                ],
                Some(NullBuffer::from(vec![true, true, false])),
            )
            .unwrap(),
        );
        let out = apply(&a, &adapt, &target, &s).unwrap();
        let out = out.as_struct();
        assert_eq!(out.nulls().map(|n| n.null_count()), Some(1));
        let x = out.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!((x.value(0), x.is_null(1)), (1, true));
        let b = out.column(1).as_any().downcast_ref::<Int32Array>().unwrap();
        assert_eq!(
            (b.value(0), b.value(1)),
            (7, 7),
            "the new b, not the dropped one"
        );
        // Renamed only: relabelled in place.
        let renamed = DataType::Struct(Fields::from(vec![
            field("z", 2, DataType::Int32),
            field("y", 3, DataType::Int32),
        ]));
        assert_eq!(plan(&file, &renamed, &s), Some(Adapt::Same));
        // Narrowing is not a promotion: the general reader decides (and refuses).
        let narrowed = DataType::Struct(Fields::from(vec![field("a", 2, DataType::Int16)]));
        assert_eq!(plan(&file, &narrowed, &s), None);
    }

    #[test]
    fn list_elements_and_map_values_adapt_inside() {
        let s = schema();
        let elem = |ty| {
            DataType::List(Arc::new(field(
                "element",
                9,
                DataType::Struct(Fields::from(vec![field("x", 2, ty)])),
            )))
        };
        let adapt = plan(&elem(DataType::Int32), &elem(DataType::Int64), &s).unwrap();
        assert_eq!(
            adapt,
            Adapt::List(Box::new(Adapt::Struct(vec![Member::From(0, Adapt::Cast)])))
        );
        // A list element with another id is another column.
        let other = DataType::List(Arc::new(field("element", 10, DataType::Int32)));
        let same = DataType::List(Arc::new(field("element", 9, DataType::Int32)));
        assert_eq!(plan(&same, &other, &s), None);
    }
}
