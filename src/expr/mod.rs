//! Predicates and SQL expressions: parsing SQL-style `--where` text, inclusive pruning of
//! partitions, manifests and files, DML statements (`DELETE`/`UPDATE`/`MERGE`) and their
//! expressions evaluated over Arrow batches. Pure: no I/O.

mod ast;
mod bind;
mod eval;
mod literal;
mod parse;
mod prune;
mod row_filter;
mod sql;
mod to_iceberg;

pub use ast::{BinaryOp, ColumnRef, Expr, Func, Literal};
pub use bind::BoundExpr;
pub use eval::cast_to;
pub use iceberg::expr::{Bind, BoundPredicate, Predicate, Reference};
pub use parse::parse_predicate;
pub use prune::{file_may_match, manifest_may_match, partition_matches, project_to_partition};
pub use row_filter::{column_by_field_id, filter_mask, literal_array, referenced_field_ids};
pub use sql::{
    parse_assignments, parse_expr, parse_statement, Insert, MatchedAction, Merge, MergeClause,
    MergeSource, Statement,
};
pub use to_iceberg::to_iceberg_predicate;

use crate::error::{Error, Result};
use crate::spec::SchemaRef;

/// Parses and binds `text` to `schema` in one step.
pub fn bind_predicate(text: &str, schema: &SchemaRef) -> Result<BoundPredicate> {
    let p = parse_predicate(text, schema)?;
    p.bind(schema.clone(), false)
        .map_err(|e| Error::invalid(format!("--where '{text}': {}", e.message())))
}
