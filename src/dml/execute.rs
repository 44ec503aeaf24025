//! [`execute`]: one DML statement's text, parsed and run.

use arrow_array::RecordBatch;

use super::engine::RowLevelResult;
use super::merge::{merge, source_rows};
use super::statement::{delete, update};
use crate::catalog::Catalog;
use crate::error::Result;
use crate::expr::{parse_statement, Statement};
use crate::table::parse_ident;

/// Runs one `DELETE`, `UPDATE` or `MERGE INTO` statement; tables are resolved through
/// `catalog`. A MERGE reads its source from `source` when given, else from the statement's
/// source (a quoted Parquet file path, or a table of the catalog).
pub async fn execute(
    catalog: &Catalog,
    sql: &str,
    source: Option<Vec<RecordBatch>>,
) -> Result<RowLevelResult> {
    let load = |name: String| async move {
        let ident = parse_ident(&name)?;
        catalog.load_table(&ident).await
    };
    match parse_statement(sql)? {
        Statement::Delete { table, predicate } => {
            let t = load(table).await?;
            delete(catalog, &t, predicate.as_ref()).await
        }
        Statement::Update {
            table,
            assignments,
            predicate,
        } => {
            let t = load(table).await?;
            update(catalog, &t, &assignments, predicate.as_ref()).await
        }
        Statement::Merge(m) => {
            let t = load(m.target.clone()).await?;
            let rows = match source {
                Some(b) => b,
                None => source_rows(catalog, &m.source).await?,
            };
            merge(catalog, &t, &m, rows).await
        }
    }
}
