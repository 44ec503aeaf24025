//! `floe append`: Parquet and CSV files into a table in one snapshot.

use std::time::Instant;

use floe::Result;

use super::output::print_json;
use super::{catalog_and_table, input, progress_bar, report, table_conformer, Cli};

/// Append Parquet or CSV files to a table in one snapshot.
#[derive(clap::Args, Debug)]
pub struct AppendArgs {
    /// Table name.
    pub name: String,
    /// Input files (.parquet, .csv, .tsv, .json, .jsonl, .ndjson).
    #[arg(required = true)]
    pub files: Vec<String>,
    /// Append to this branch (main is untouched).
    #[arg(long)]
    pub branch: Option<String>,
    /// Stage the snapshot for write-audit-publish with this WAP id (summary `wap.id`): it is
    /// current on no branch until `floe cherrypick` publishes it; needs write.wap.enabled=true.
    #[arg(long, conflicts_with = "branch")]
    pub wap_id: Option<String>,
    /// How CSV files are read.
    #[command(flatten)]
    pub csv: input::CsvArgs,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

/// `floe append`.
pub async fn append(cli: &Cli, a: &AppendArgs) -> Result<()> {
    let AppendArgs {
        name,
        files,
        branch,
        wap_id,
        csv,
        json,
    } = a;
    let (cat, table) = catalog_and_table(cli, name).await?;
    let table = match branch {
        Some(b) => table.on_branch(b)?,
        None => table,
    };
    let table = match wap_id {
        Some(w) => table.with_wap_id(w)?,
        None => table,
    };
    let conformer = table_conformer(&table)?;
    // Open every input first: a bad file fails before anything is written.
    let mut readers = Vec::new();
    for f in files {
        readers.push(input::read_file(f, &conformer, csv)?);
    }
    let started = Instant::now();
    let r = progress_bar::run(&format!("appending to {name}"), *json, |p| {
        floe::txn::append(&cat, &table, input::counted(files, readers, p))
    })
    .await;
    let r = r?;
    let secs = started.elapsed().as_secs_f64();
    if *json {
        print_json(&report::append(name, &r, started));
        return Ok(());
    }
    outln!(
        "appended {} rows in {} files ({:.1} MB) to {} as {}snapshot {} in {:.2}s",
        r.added_records,
        r.added_files,
        r.added_bytes as f64 / 1e6,
        name,
        match wap_id {
            Some(w) => format!("staged (wap.id={w}) "),
            None => String::new(),
        },
        r.snapshot_id
            .map(|s| s.to_string())
            .unwrap_or_else(|| "-".into()),
        secs
    );
    Ok(())
}
