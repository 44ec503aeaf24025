//! Schema drift from the source: a batch's new columns are refused, or added as optional
//! columns with new field ids in the batch's commit.

use std::sync::Arc;

use super::batch::ChangeBatch;
use crate::error::{Error, Result};
use crate::spec::keyed::KeyedSpec;
use crate::spec::{NestedField, Schema, Type};
use crate::table::Table;

/// `schema` with every column but the key optional.
pub(super) fn relaxed(schema: &Schema, spec: &KeyedSpec) -> Result<Schema> {
    let fields: Vec<Arc<NestedField>> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| {
            let mut f = (**f).clone();
            if !spec.key.contains(&f.name) {
                f.required = false;
            }
            Arc::new(f)
        })
        .collect();
    Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_identifier_field_ids(schema.identifier_field_ids())
        .with_fields(fields)
        .build()
        .map_err(|e| Error::invalid(format!("schema {}: {e}", schema.schema_id())))
}

/// The table to write with: `table` itself, or, when the batch has columns the table lacks
/// and `evolve` allows it, the table with those columns added as optional columns (the new
/// schema is committed with the batch). Returns the table, the schema change, and the
/// added columns.
#[allow(clippy::type_complexity)]
pub(super) fn evolve(
    table: &Table,
    changes: &ChangeBatch,
    evolve: bool,
) -> Result<(Table, Option<(i32, Schema)>, Vec<String>)> {
    let current = table.metadata().current_schema();
    let mut new_fields: Vec<(String, arrow_schema::DataType, String)> = Vec::new();
    for (source, b) in &changes.parts {
        for f in b.schema().fields() {
            if current.field_by_name(f.name()).is_some()
                || new_fields.iter().any(|(n, _, _)| n == f.name())
            {
                continue;
            }
            if !evolve {
                return Err(Error::invalid(format!(
                    "{source}: column '{}' is not in the schema of table {}; add it to the table, or let the \
                     upsert evolve the schema (it is then added as an optional column)",
                    f.name(),
                    table.name()
                )));
            }
            new_fields.push((f.name().clone(), f.data_type().clone(), source.clone()));
        }
    }
    if new_fields.is_empty() {
        return Ok((table.clone(), None, vec![]));
    }
    let md = table.metadata();
    let mut next_id = md.last_column_id();
    let mut fields: Vec<Arc<NestedField>> = current.as_struct().fields().to_vec();
    let mut added = Vec::new();
    for (name, dt, source) in &new_fields {
        let one = arrow_schema::Schema::new(vec![arrow_schema::Field::new(name, dt.clone(), true)]);
        let converted = crate::spec::schema_from_arrow(&one)?;
        let ty = converted
            .as_struct()
            .fields()
            .first()
            .map(|f| (*f.field_type).clone())
            .ok_or_else(|| Error::invalid(format!("{source}: column '{name}' has no type")))?;
        if !matches!(ty, Type::Primitive(_)) {
            return Err(Error::unsupported(format!(
                "{source}: new column '{name}' is {dt}; schema evolution by upsert adds primitive columns only \
                 (add nested columns to the table first)"
            )));
        }
        next_id += 1;
        fields.push(Arc::new(NestedField::optional(next_id, name, ty)));
        added.push(name.clone());
    }
    let new_id = md.schemas_iter().map(|s| s.schema_id()).max().unwrap_or(0) + 1;
    let schema = Schema::builder()
        .with_schema_id(new_id)
        .with_identifier_field_ids(current.identifier_field_ids())
        .with_fields(fields)
        .build()
        .map_err(|e| {
            Error::invalid(format!(
                "evolving the schema of table {}: {e}",
                table.name()
            ))
        })?;
    let staged_md = iceberg::spec::TableMetadataBuilder::new_from_metadata(md.clone(), None)
        .add_current_schema(schema.clone())
        .and_then(|b| b.build())
        .map_err(|e| {
            Error::invalid(format!(
                "evolving the schema of table {}: {e}",
                table.name()
            ))
        })?
        .metadata;
    let t = table.same_branch(Table::new(
        table.ident().clone(),
        staged_md,
        table.metadata_location().to_string(),
        table.storage().clone(),
    ))?;
    Ok((t, Some((md.current_schema_id(), schema)), added))
}
