//! `ALTER TABLE`: one metadata-only commit of schema, partitioning, sort order and property
//! changes. After a concurrent commit the changes are applied again to the new metadata, if
//! what they were planned on (the schema, the spec, the sort order) is unchanged; otherwise
//! the ALTER fails as Iceberg Java's does.

use std::time::Duration;

use crate::catalog::{Catalog, CommitOutcome};
use crate::error::{Error, ErrorKind, Result};
use crate::spec::evolution::{apply, Basis, TableChange};
use crate::spec::{TableIdent, TableMetadata};
use crate::table::Table;

/// What an ALTER committed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AlterResult {
    /// The table at the new version.
    pub table: Table,
    /// The changes applied.
    pub changes: usize,
    /// Commit attempts (more than one after concurrent commits).
    pub attempts: u32,
}

/// Applies `changes` to table `ident` in one commit (nothing is committed when any is
/// refused).
///
/// # Example
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # let dir = tempfile::tempdir()?;
/// # let cat = floe::Catalog::open(None, dir.path().join("wh").to_str(), None)?;
/// # let ident = floe::table::parse_ident("db.t")?;
/// # let schema = floe::spec::parse_schema("id long, v int")?;
/// # cat.create_table(&ident, floe::TableCreation::new(schema)).await?;
/// let changes = floe::spec::parse_alter_clause("ALTER COLUMN v TYPE long")?;
/// let r = floe::txn::alter_table(&cat, &ident, &changes).await?;
/// assert_eq!(r.table.metadata().current_schema().field_by_name("v").unwrap().field_type.to_string(), "long");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn alter_table(
    catalog: &Catalog,
    ident: &TableIdent,
    changes: &[TableChange],
) -> Result<AlterResult> {
    let first = catalog.load_table(ident).await?;
    let basis = Basis::of(first.metadata(), changes);
    let (table, attempts) = commit_metadata(catalog, first, "ALTER", |t| {
        if let Some(what) = basis.changed_in(t.metadata()) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "table {}: {what} was changed by a concurrent commit after this ALTER \
                     was planned; nothing was committed; run it again against the new state",
                    t.name()
                ),
            ));
        }
        apply(
            t.metadata(),
            changes,
            &t.name(),
            Some(t.metadata_location()),
        )
    })
    .await?;
    Ok(AlterResult {
        table,
        changes: changes.len(),
        attempts,
    })
}

/// Commits the metadata `change` makes of the table (metadata only, no snapshot), making it
/// again from the new state after each concurrent commit, within `commit.retry.*`; `what`
/// names the operation in errors. Returns the table and the attempts made.
pub(crate) async fn commit_metadata(
    catalog: &Catalog,
    mut table: Table,
    what: &str,
    change: impl Fn(&Table) -> Result<TableMetadata>,
) -> Result<(Table, u32)> {
    let name = table.name();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let next = change(&table)?;
        match catalog.commit(&table, next).await {
            CommitOutcome::Committed(t) => return Ok((t, attempts)),
            CommitOutcome::Conflict(msg) => {
                let props = table.properties()?;
                if attempts > props.commit_num_retries {
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        format!(
                            "{msg}; gave up after {attempts} attempts (commit.retry.num-retries={})",
                            props.commit_num_retries
                        ),
                    ));
                }
                let wait = props
                    .commit_min_wait_ms
                    .saturating_mul(1 << (attempts - 1).min(10))
                    .min(props.commit_max_wait_ms);
                tokio::time::sleep(Duration::from_millis(wait)).await;
                table = catalog.load_table(table.ident()).await?;
            }
            CommitOutcome::Failed(e) => {
                return Err(e.context(format!(
                    "{what} of table {name} failed and nothing was committed"
                )))
            }
            CommitOutcome::Unknown(e) => {
                return Err(Error::new(
                    ErrorKind::CommitStateUnknown,
                    format!(
                        "{what} of table {name} may or may not have been committed; reload the \
                         table and check it"
                    ),
                )
                .with_source(e))
            }
        }
    }
}
