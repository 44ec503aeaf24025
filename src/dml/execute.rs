//! [`execute`]: one DML statement's text, parsed and run.

use arrow_array::RecordBatch;

use super::merge::{merge, source_rows};
use super::merge_source::SourceRows;
use super::statement::{delete, update};
use crate::catalog::Catalog;
use crate::error::Result;
use crate::expr::{parse_statement, Statement};
use crate::txn::RowLevelResult;

/// Runs one `DELETE`, `UPDATE` or `MERGE INTO` statement; tables are resolved through
/// `catalog`. A MERGE reads its source from `source` when given, else from the statement's
/// source (a quoted Parquet file path, or a table of the catalog).
///
/// # Example
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # use std::sync::Arc;
/// # use arrow_array::{Int64Array, RecordBatch};
/// # let dir = tempfile::tempdir()?;
/// # let cat = floe::Catalog::open(None, dir.path().join("wh").to_str(), None)?;
/// # let ident = floe::table::parse_ident("db.t")?;
/// # let schema = floe::spec::parse_schema("id long, v long")?;
/// # let table = cat.create_table(&ident, floe::TableCreation::new(schema)).await?;
/// # let rows = |r: std::ops::Range<i64>| -> floe::Result<RecordBatch> { Ok(RecordBatch::try_from_iter([
/// #     ("id", Arc::new(Int64Array::from_iter_values(r.clone())) as _),
/// #     ("v", Arc::new(Int64Array::from_iter_values(r)) as _),
/// # ])?) };
/// # let table = floe::txn::append(&cat, &table, [rows(0..100)]).await?.table;
/// let r = floe::dml::execute(&cat, "UPDATE db.t SET v = -v WHERE id < 10", None).await?;
/// assert_eq!(r.removed_rows, 10);
/// let r = floe::dml::execute(&cat, "DELETE FROM db.t WHERE id >= 90", None).await?;
/// assert_eq!(r.removed_rows, 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn execute(
    catalog: &Catalog,
    sql: &str,
    source: Option<Vec<RecordBatch>>,
) -> Result<RowLevelResult> {
    execute_with(catalog, sql, source.map(SourceRows::from), None).await
}

/// [`execute`] with a MERGE source read batch by batch, staged for write-audit-publish when
/// `wap_id` is given: the statement's snapshot is committed with summary `wap.id` but made
/// current on no branch (see [`crate::Table::with_wap_id`]); the table needs
/// `write.wap.enabled=true`.
pub async fn execute_with(
    catalog: &Catalog,
    sql: &str,
    source: Option<SourceRows>,
    wap_id: Option<&str>,
) -> Result<RowLevelResult> {
    let load = |name: String| async move {
        let t = catalog.load_write_target(&name).await?;
        match wap_id {
            Some(w) => t.with_wap_id(w),
            None => Ok(t),
        }
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
