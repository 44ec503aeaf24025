//! Predicates and SQL expressions: parsing SQL-style `--where` text, inclusive pruning of
//! partitions, manifests and files, DML statements (`DELETE`/`UPDATE`/`MERGE`) and their
//! expressions evaluated over Arrow batches. Pure: no I/O.

mod ast;
mod bind;
mod columns;
mod eval;
mod in_list;
mod literal;
mod narrow;
mod prune;
mod row_groups;
mod sql;
mod strict;
mod to_iceberg;

pub use ast::{BinaryOp, ColumnRef, Expr, Func, Literal};
pub use bind::BoundExpr;
pub(crate) use columns::{column_by_field_id, literal_array};
pub(crate) use eval::cast_to;
pub use iceberg::expr::{Bind, BoundPredicate, Predicate, Reference};
pub(crate) use narrow::narrow_to_partition;
pub(crate) use prune::field_ids;
pub(crate) use prune::{
    file_may_match, file_may_match_rewritten, manifest_may_match, may_match, partition_matches,
    project_to_partition,
};
pub(crate) use row_groups::{bloom_may_match, bloom_proves_absent, page_choice, row_group_metrics};
pub use sql::{
    parse_assignments, parse_expr, parse_statement, Insert, MatchedAction, Merge, MergeClause,
    MergeSource, Statement, MAX_EXPR_DEPTH,
};
pub(crate) use strict::all_rows_match;
pub(crate) use to_iceberg::to_iceberg_predicate;

use crate::error::{Error, Result};
use crate::spec::SchemaRef;

/// The pruning predicate of a `--where` that selects files (rewrite-data-files): `text` in
/// the one SQL grammar, lowered to an Iceberg predicate over `schema`. Refused when nothing of
/// it can prune (a function of columns, say), rather than silently selecting every file.
pub fn file_selection(text: &str, schema: &SchemaRef) -> Result<Predicate> {
    let e = parse_expr(text)?;
    let arrow = iceberg::arrow::schema_to_arrow_schema(schema)?;
    e.bind_predicate(&arrow)?;
    to_iceberg_predicate(&e, schema).ok_or_else(|| {
        Error::invalid(format!(
            "the filter '{text}' cannot select files: use comparisons, IN, BETWEEN and IS NULL \
             of columns with literals"
        ))
    })
}
