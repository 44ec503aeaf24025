//! Predicates: parsing SQL-style text and inclusive pruning of partitions, manifests and
//! files. Pure: no I/O.

mod ast;
mod literal;
mod parse;
mod prune;
mod sql;

pub use ast::{BinaryOp, ColumnRef, Expr, Func, Literal};
pub use iceberg::expr::{Bind, BoundPredicate, Predicate, Reference};
pub use parse::parse_predicate;
pub use prune::{file_may_match, manifest_may_match, partition_matches, project_to_partition};
pub use sql::{
    parse_assignments, parse_expr, parse_statement, Insert, MatchedAction, Merge, MergeClause,
    MergeSource, Statement,
};

use crate::error::{Error, Result};
use crate::spec::SchemaRef;

/// Parses and binds `text` to `schema` in one step.
pub fn bind_predicate(text: &str, schema: &SchemaRef) -> Result<BoundPredicate> {
    let p = parse_predicate(text, schema)?;
    p.bind(schema.clone(), false)
        .map_err(|e| Error::invalid(format!("--where '{text}': {}", e.message())))
}
