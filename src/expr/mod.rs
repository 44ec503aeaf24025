//! Predicates: parsing SQL-style text and inclusive pruning of partitions, manifests and
//! files. Pure: no I/O.

mod parse;
mod prune;
mod row_filter;

pub use iceberg::expr::{Bind, BoundPredicate, Predicate, Reference};
pub use parse::parse_predicate;
pub use row_filter::{column_by_field_id, filter_mask, referenced_field_ids};
pub use prune::{file_may_match, manifest_may_match, partition_matches, project_to_partition};

use crate::error::{Error, Result};
use crate::spec::SchemaRef;

/// Parses and binds `text` to `schema` in one step.
pub fn bind_predicate(text: &str, schema: &SchemaRef) -> Result<BoundPredicate> {
    let p = parse_predicate(text, schema)?;
    p.bind(schema.clone(), false)
        .map_err(|e| Error::invalid(format!("--where '{text}': {}", e.message())))
}
