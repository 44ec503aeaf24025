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
pub(crate) use iceberg::expr::Predicate;
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

/// Which data files a maintenance action takes (`rewrite-data-files --where`): the files
/// that may hold a row matching a filter, by their partitions and column metrics. Made from
/// a filter in the one SQL grammar by [`file_selection`]; serialized (in a distributed
/// rewrite's plan) as the Iceberg expression it lowers to.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct FileSelection(Predicate);

impl FileSelection {
    /// The Iceberg predicate files are selected by.
    pub(crate) fn predicate(&self) -> &Predicate {
        &self.0
    }
}

impl std::fmt::Display for FileSelection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The files a `--where` selects (rewrite-data-files): `text` in the one SQL grammar,
/// lowered to an Iceberg predicate over `schema`. Refused when nothing of it can select
/// files (a function of columns, say), rather than silently selecting every file.
///
/// ```
/// let schema = floe::spec::parse_schema("id long, cat string").unwrap();
/// let s = floe::expr::file_selection("cat = 'a' AND id < 10", &std::sync::Arc::new(schema));
/// assert!(s.is_ok());
/// ```
pub fn file_selection(text: &str, schema: &SchemaRef) -> Result<FileSelection> {
    let e = parse_expr(text)?;
    let arrow = iceberg::arrow::schema_to_arrow_schema(schema)?;
    e.bind_predicate(&arrow)?;
    to_iceberg_predicate(&e, schema)
        .map(FileSelection)
        .ok_or_else(|| {
            Error::invalid(format!(
                "the filter '{text}' cannot select files: use comparisons, IN, BETWEEN and IS \
                 NULL of columns with literals"
            ))
        })
}
