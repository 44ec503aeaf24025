//! `floe changes` (the changelog between two snapshots) and `floe scan --from-snapshot` (the
//! rows appended between two snapshots).

use arrow_array::RecordBatch;
use floe::scan::{Changelog, ChangelogRange, Scan};
use floe::Result;

use super::rows::{print_rows, OutputArgs, Rows};
use super::{load, parse_time_ms, Cli};

/// Rows changed between two snapshots (Spark's changelog view).
#[derive(clap::Args, Debug)]
pub struct ChangesArgs {
    /// Table name.
    pub name: String,
    /// Changes after this snapshot (exclusive; default: from the first snapshot).
    #[arg(long = "from")]
    pub from: Option<i64>,
    /// Changes committed after this time (RFC 3339 or ms since epoch), instead of --from.
    #[arg(long)]
    pub from_timestamp: Option<String>,
    /// Up to this snapshot (inclusive; default: the current one).
    #[arg(long = "to")]
    pub to: Option<i64>,
    /// Up to the last snapshot committed at or before this time, instead of --to.
    #[arg(long)]
    pub to_timestamp: Option<String>,
    /// Columns identifying a row: a delete and an insert of one identifier in a snapshot are
    /// shown as UPDATE_BEFORE / UPDATE_AFTER (comma-separated).
    #[arg(long, value_delimiter = ',', value_parser = crate::item)]
    pub identifier_columns: Option<Vec<String>>,
    /// Compute UPDATE_BEFORE / UPDATE_AFTER with the table's identifier fields (or
    /// --identifier-columns); `--compute-updates=false` turns them off.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub compute_updates: Option<bool>,
    /// Only net changes over the range (a row inserted then deleted is not shown).
    #[arg(long)]
    pub net_changes: bool,
    /// Row filter on the change rows (may use _change_type, _change_ordinal,
    /// _commit_snapshot_id).
    #[arg(long = "where", allow_hyphen_values = true)]
    pub filter: Option<String>,
    /// Output flags.
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `floe changes`.
pub async fn changes(cli: &Cli, a: &ChangesArgs) -> Result<()> {
    let table = load(cli, Some(&a.name), None).await?;
    let range = ChangelogRange {
        from_snapshot_exclusive: a.from,
        from_timestamp_ms: a.from_timestamp.as_deref().map(parse_time_ms).transpose()?,
        to_snapshot: a.to,
        to_timestamp_ms: a.to_timestamp.as_deref().map(parse_time_ms).transpose()?,
    };
    let mut log = Changelog::new(&table, range).net_changes(a.net_changes);
    if let Some(c) = &a.identifier_columns {
        log = log.identifier_columns(c.clone());
    }
    if let Some(on) = a.compute_updates {
        log = log.compute_updates(on);
    }
    let batches = log.read().await?;
    let schema = log.schema()?;
    let what = format!("the changes of {}", table.name());
    print_batches(
        schema,
        batches,
        &what,
        &Rows::of(a.filter.as_deref(), &a.out),
    )
}

/// `batches` of `schema` as one batch, printed (see [`print_rows`]).
fn print_batches(
    schema: arrow_schema::SchemaRef,
    batches: Vec<RecordBatch>,
    what: &str,
    o: &Rows,
) -> Result<()> {
    print_rows(
        arrow_select::concat::concat_batches(&schema, &batches)?,
        what,
        o,
    )
}

/// `floe scan NAME --from-snapshot S1 [--to-snapshot S2]`: the rows `append` snapshots added
/// after S1 up to S2, as written.
pub async fn appended(
    scan: Scan,
    schema: arrow_schema::SchemaRef,
    from: Option<i64>,
    to: Option<i64>,
    o: &Rows<'_>,
) -> Result<()> {
    let range = ChangelogRange {
        from_snapshot_exclusive: from,
        to_snapshot: to,
        ..Default::default()
    };
    let batches = floe::scan::appended_between(&scan, &range).await?;
    let schema = batches.first().map(|b| b.schema()).unwrap_or(schema);
    // The scan already filtered and projected.
    let o = Rows {
        filter: None,
        columns: None,
        ..*o
    };
    print_batches(schema, batches, "the appended rows", &o)
}
