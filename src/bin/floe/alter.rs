//! `floe alter` and `floe sql "ALTER TABLE …"`: schema, partitioning, sort order and property
//! changes, one metadata-only commit.

use floe::spec::evolution::TableChange;
use floe::table::parse_ident;
use floe::{Error, ErrorKind, Result};
use serde_json::json;

use super::output::print_json;
use super::{catalog, kv, Cli};

/// Change a table's schema, partitioning, sort order or properties (one commit).
#[derive(clap::Args, Debug)]
pub struct AlterArgs {
    /// Table name (ns.table).
    pub name: String,
    /// A Spark `ALTER TABLE` clause, the words after `ALTER TABLE NAME`: `ADD COLUMN c long
    /// AFTER id`, `DROP COLUMN c`, `RENAME COLUMN a TO b`, `ALTER COLUMN c TYPE long`, `ADD
    /// PARTITION FIELD bucket(16, id)`, `WRITE ORDERED BY id`, `SET IDENTIFIER FIELDS id`…
    pub clause: Vec<String>,
    /// Set a table property k=v (repeatable); `format-version=3` upgrades the table.
    #[arg(long = "set", value_parser = kv)]
    pub set: Vec<(String, String)>,
    /// Remove a table property (repeatable; one the table lacks is an error).
    #[arg(long = "unset")]
    pub unset: Vec<String>,
    /// Replace the partition spec, e.g. 'bucket(64, key)' ('' for unpartitioned); old files
    /// keep theirs.
    #[arg(long)]
    pub partition_by: Option<String>,
    /// Replace the sort order, e.g. 'key, ts desc' ('' for unsorted).
    #[arg(long)]
    pub sort_by: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `floe alter`.
pub async fn alter(cli: &Cli, a: &AlterArgs) -> Result<()> {
    let mut changes = Vec::new();
    if !a.clause.is_empty() {
        changes.extend(floe::spec::parse_alter_clause(&a.clause.join(" "))?);
    }
    if !a.set.is_empty() {
        changes.push(TableChange::SetProperties(a.set.clone()));
    }
    if !a.unset.is_empty() {
        changes.push(TableChange::UnsetProperties {
            keys: a.unset.clone(),
            if_exists: false,
        });
    }
    if let Some(p) = &a.partition_by {
        changes.push(TableChange::ReplacePartitionSpec(p.clone()));
    }
    if let Some(s) = &a.sort_by {
        changes.push(TableChange::SetSortOrder(s.clone()));
    }
    if changes.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "floe alter: nothing to change; give a clause (e.g. ADD COLUMN c long) or --set, \
             --unset, --partition-by, --sort-by",
        ));
    }
    run(cli, &a.name, &changes, a.json).await
}

/// `floe sql "ALTER TABLE …"`.
pub async fn sql(cli: &Cli, statement: &str, json: bool) -> Result<()> {
    let (name, changes) = floe::spec::parse_alter_table(statement)?;
    run(cli, &name, &changes, json).await
}

async fn run(cli: &Cli, name: &str, changes: &[TableChange], json: bool) -> Result<()> {
    let r = floe::txn::alter_table(&catalog(cli)?, &parse_ident(name)?, changes).await?;
    let md = r.table.metadata();
    let schema = md.current_schema();
    let spec = md
        .default_partition_spec()
        .fields()
        .iter()
        .map(|p| format!("{}={}", p.name, p.transform))
        .collect::<Vec<_>>();
    if json {
        let mut v = super::report::alter(name, &r);
        v["schema"] = json!(schema.as_ref());
        v["partition_spec"] = json!(md.default_partition_spec().as_ref());
        v["sort_order"] = json!(md.default_sort_order().as_ref());
        v["properties"] = json!(md.properties());
        print_json(&v);
    } else {
        outln!(
            "altered {name}: {} change(s) in one commit; format v{}, schema {} (columns {}), partition spec {}{}, sort order {}",
            r.changes,
            md.format_version() as u8,
            md.current_schema_id(),
            schema
                .as_struct()
                .fields()
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            md.default_partition_spec_id(),
            if spec.is_empty() {
                String::new()
            } else {
                format!(" ({})", spec.join(", "))
            },
            md.default_sort_order_id()
        );
    }
    Ok(())
}
