//! Row-level changes: DELETE, UPDATE and MERGE, in copy-on-write or merge-on-read as the
//! table's `write.{delete,update,merge}.mode` says.

mod engine;

use arrow_array::{BooleanArray, RecordBatch};
use iceberg::expr::{Bind, BoundPredicate, Predicate};

pub use engine::{run, RowChanger, RowLevelKind, RowLevelResult};

use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::expr::{filter_mask, referenced_field_ids};
use crate::table::Table;

/// Deletes the rows matching an Iceberg predicate.
pub async fn delete_where(
    catalog: &Catalog,
    table: &Table,
    predicate: Predicate,
) -> Result<RowLevelResult> {
    let schema = table.metadata().current_schema().clone();
    let bound = predicate
        .clone()
        .bind(schema.clone(), false)
        .map_err(|e| Error::invalid(format!("DELETE on table {}: {}", table.name(), e.message())))?;
    let mut ids = Vec::new();
    referenced_field_ids(&bound, &mut ids);
    let columns = schema
        .as_struct()
        .fields()
        .iter()
        .filter(|f| {
            ids.iter()
                .any(|id| *id == f.id || schema.field_by_id(*id).is_some_and(|_| is_within(f, *id)))
        })
        .map(|f| f.name.clone())
        .collect();
    let mut changer = PredicateDelete { bound, columns };
    run(catalog, table, RowLevelKind::Delete, Some(predicate), &mut changer).await
}

fn is_within(f: &iceberg::spec::NestedField, id: i32) -> bool {
    use iceberg::spec::Type;
    match f.field_type.as_ref() {
        Type::Struct(s) => s.fields().iter().any(|c| c.id == id || is_within(c, id)),
        Type::List(l) => l.element_field.id == id || is_within(&l.element_field, id),
        Type::Map(m) => {
            m.key_field.id == id
                || m.value_field.id == id
                || is_within(&m.key_field, id)
                || is_within(&m.value_field, id)
        }
        Type::Primitive(_) => false,
    }
}

struct PredicateDelete {
    bound: BoundPredicate,
    columns: Vec<String>,
}

impl RowChanger for PredicateDelete {
    fn columns(&self) -> Option<Vec<String>> {
        Some(self.columns.clone())
    }
    fn change(&mut self, batch: &RecordBatch) -> Result<(BooleanArray, Option<RecordBatch>)> {
        Ok((filter_mask(&self.bound, batch)?, None))
    }
}
