//! Row-level change commands: delete, update, merge, sql.

use std::time::Instant;

use floe::{Error, ErrorKind, Result, Table};

use super::output::print_json;
use super::{catalog, input, progress_bar, Cli};

/// Arguments of `floe delete`.
#[derive(clap::Args, Debug)]
pub struct DeleteArgs {
    /// Table name.
    pub name: String,
    /// Rows to delete (SQL expression, e.g. "id % 1000 = 7 AND ts < '2024-01-01'").
    #[arg(long = "where", value_name = "EXPR", allow_hyphen_values = true)]
    pub filter: String,
    /// Write to this branch (its history is validated; main is untouched).
    #[arg(long)]
    pub branch: Option<String>,
    /// Stage the snapshot for write-audit-publish with this WAP id (current on no branch
    /// until `floe cherrypick`); needs write.wap.enabled=true.
    #[arg(long, conflicts_with = "branch")]
    pub wap_id: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `floe update`.
#[derive(clap::Args, Debug)]
pub struct UpdateArgs {
    /// Table name.
    pub name: String,
    /// Assignments, e.g. "price = price * 1.1, note = 'repriced'".
    #[arg(long)]
    pub set: String,
    /// Rows to update (default: all).
    #[arg(long = "where", value_name = "EXPR", allow_hyphen_values = true)]
    pub filter: Option<String>,
    /// Write to this branch (its history is validated; main is untouched).
    #[arg(long)]
    pub branch: Option<String>,
    /// Stage the snapshot for write-audit-publish with this WAP id (current on no branch
    /// until `floe cherrypick`); needs write.wap.enabled=true.
    #[arg(long, conflicts_with = "branch")]
    pub wap_id: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `floe merge`.
#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Table name.
    pub name: String,
    /// Source rows: a local .parquet, .csv or .jsonl file, or a Parquet file in the
    /// warehouse's object store (s3://…, read through the catalog's storage).
    #[arg(long)]
    pub source: String,
    /// Key columns, equal in target and source (e.g. "id" or "region,id").
    #[arg(long, value_delimiter = ',', value_parser = crate::item, required = true)]
    pub on: Vec<String>,
    /// What happens to matched target rows: update (from the source row), delete, ignore.
    #[arg(long, default_value = "update")]
    pub matched: String,
    /// What happens to unmatched source rows: insert, ignore.
    #[arg(long, default_value = "insert")]
    pub not_matched: String,
    /// What happens to target rows no source row matches: ignore, delete.
    #[arg(long, default_value = "ignore")]
    pub not_matched_by_source: String,
    /// Write to this branch (its history is validated; main is untouched).
    #[arg(long)]
    pub branch: Option<String>,
    /// Stage the snapshot for write-audit-publish with this WAP id (current on no branch
    /// until `floe cherrypick`); needs write.wap.enabled=true.
    #[arg(long, conflicts_with = "branch")]
    pub wap_id: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `floe sql`.
#[derive(clap::Args, Debug)]
pub struct SqlArgs {
    /// The statement, e.g. "MERGE INTO db.t t USING 'updates.csv' s ON t.id = s.id
    /// WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *".
    pub statement: String,
    /// Stage the DELETE/UPDATE/MERGE snapshot for write-audit-publish with this WAP id
    /// (Spark's `spark.wap.id`); needs write.wap.enabled=true.
    #[arg(long)]
    pub wap_id: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The table a DML statement writes: `name`, or Spark's `name.branch_<b>` for a branch.
fn target(name: &str, branch: &Option<String>) -> String {
    match branch {
        Some(b) => format!("{name}.branch_{b}"),
        None => name.to_string(),
    }
}

/// `floe delete`.
pub async fn delete(cli: &Cli, a: &DeleteArgs) -> Result<()> {
    let sql = format!(
        "DELETE FROM {} WHERE {}",
        target(&a.name, &a.branch),
        a.filter
    );
    run_dml(cli, &sql, None, a.wap_id.as_deref(), a.json).await
}

/// `floe update`.
pub async fn update(cli: &Cli, a: &UpdateArgs) -> Result<()> {
    let mut sql = format!("UPDATE {} SET {}", target(&a.name, &a.branch), a.set);
    if let Some(f) = &a.filter {
        sql.push_str(&format!(" WHERE {f}"));
    }
    run_dml(cli, &sql, None, a.wap_id.as_deref(), a.json).await
}

/// `floe merge`: the options become a MERGE INTO statement.
pub async fn merge(cli: &Cli, a: &MergeArgs) -> Result<()> {
    let keys =
        a.on.iter()
            .map(|k| format!("t.{k} = s.{k}", k = k.trim()))
            .collect::<Vec<_>>()
            .join(" AND ");
    // A remote source (s3://…) is read by the library through the catalog's storage.
    let using = match remote(&a.source) {
        true => format!("'{}'", a.source.replace('\'', "''")),
        false => "source".to_string(),
    };
    let mut sql = format!(
        "MERGE INTO {} AS t USING {using} AS s ON {keys}",
        target(&a.name, &a.branch)
    );
    match a.matched.as_str() {
        "update" => sql.push_str(" WHEN MATCHED THEN UPDATE SET *"),
        "delete" => sql.push_str(" WHEN MATCHED THEN DELETE"),
        "ignore" => {}
        o => {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("--matched {o}: expected update, delete or ignore"),
            ))
        }
    }
    match a.not_matched.as_str() {
        "insert" => sql.push_str(" WHEN NOT MATCHED THEN INSERT *"),
        "ignore" => {}
        o => {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("--not-matched {o}: expected insert or ignore"),
            ))
        }
    }
    match a.not_matched_by_source.as_str() {
        "delete" => sql.push_str(" WHEN NOT MATCHED BY SOURCE THEN DELETE"),
        "ignore" => {}
        o => {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("--not-matched-by-source {o}: expected delete or ignore"),
            ))
        }
    }
    let rows = match remote(&a.source) {
        true => None,
        false => {
            let table = catalog(cli)?
                .load_write_target(&target(&a.name, &a.branch))
                .await?;
            Some(read_source(&table, &a.source)?)
        }
    };
    run_dml(cli, &sql, rows, a.wap_id.as_deref(), a.json).await
}

/// `floe sql`.
pub async fn sql(cli: &Cli, a: &SqlArgs) -> Result<()> {
    let rows = match floe::expr::parse_statement(&a.statement)? {
        floe::expr::Statement::Merge(m) => match &m.source {
            floe::expr::MergeSource::Path(p) if !remote(p) => {
                let table = catalog(cli)?.load_write_target(&m.target).await?;
                Some(read_source(&table, p)?)
            }
            // The library reads it through the catalog's storage (Parquet).
            floe::expr::MergeSource::Path(_) => None,
            floe::expr::MergeSource::Table(_) => None,
        },
        _ => None,
    };
    run_dml(cli, &a.statement, rows, a.wap_id.as_deref(), a.json).await
}

/// Whether a MERGE source is an object-store location (`s3://…`), not a local file.
fn remote(path: &str) -> bool {
    floe::storage::scheme(path).is_some_and(|s| s != "file")
}

/// A local MERGE source file, read batch by batch as the MERGE needs it (CSV columns typed
/// by the target's columns of that name).
fn read_source(table: &Table, path: &str) -> Result<floe::dml::SourceRows> {
    let schema = table.arrow_schema()?;
    Ok(floe::dml::SourceRows::new(input::read_raw(
        path,
        &schema,
        false,
        &input::CsvArgs::default(),
    )?))
}

/// Runs a DML statement with a progress bar and prints what it did.
async fn run_dml(
    cli: &Cli,
    sql: &str,
    source: Option<floe::dml::SourceRows>,
    wap_id: Option<&str>,
    json: bool,
) -> Result<()> {
    let cat = catalog(cli)?;
    let started = Instant::now();
    let r = progress_bar::run("reading and rewriting", json, |_| {
        floe::dml::execute_with(&cat, sql, source, wap_id)
    })
    .await;
    let r = r?;
    let secs = started.elapsed().as_secs_f64();
    let mode = match r.mode {
        floe::spec::WriteMode::CopyOnWrite => "copy-on-write",
        floe::spec::WriteMode::MergeOnRead => "merge-on-read",
    };
    if json {
        print_json(&super::report::dml(&r, mode, started));
        return Ok(());
    }
    // What the rows counts mean for this statement.
    let verb = sql
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_uppercase();
    let rows = match (verb.as_str(), &r.merged) {
        ("DELETE", _) => format!("{} rows deleted", r.removed_rows),
        ("UPDATE", _) => format!("{} rows updated", r.written_rows),
        (_, Some(m)) => format!(
            "{} rows updated, {} deleted, {} inserted",
            m.updated, m.deleted, m.inserted
        ),
        _ => format!(
            "{} rows removed (updated or deleted), {} rows written (updated or inserted)",
            r.removed_rows, r.written_rows
        ),
    };
    match r.snapshot_id {
        None => outln!("no rows matched; {} unchanged", r.table.name()),
        Some(id) => outln!(
            "{}: {}snapshot {id} ({mode}): {rows}; {} data files dropped, \
             {} data files and {} delete files added ({:.1} MB) in {secs:.2}s",
            r.table.name(),
            match wap_id {
                Some(w) => format!("staged (wap.id={w}) "),
                None => String::new(),
            },
            r.removed_data_files,
            r.added_data_files,
            r.added_delete_files,
            r.written_bytes as f64 / 1e6
        ),
    }
    if let Some(a) = &r.aligned {
        outln!(
            "  aligned with the table's partitions: source rows in {} partitions, target files \
             read in {} ({:.1} MB of source spilled to temporary files)",
            a.source_partitions,
            a.target_partitions_read,
            a.spilled_bytes as f64 / 1e6
        );
    }
    Ok(())
}
