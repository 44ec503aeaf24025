//! Publishing commands: `clone` (metadata-only table copy) and `ingest-snapshot`.

use floe::scan::SnapshotSelector;
use floe::table::parse_ident;
use floe::{Error, ErrorKind, Result};

use super::output::print_json;
use super::{catalog_and_table, parse_time_ms, Cli};

/// Arguments of `floe clone`.
#[derive(clap::Args, Debug)]
pub struct CloneArgs {
    /// Source table.
    pub source: String,
    /// The clone (a new table unless --replace).
    pub target: String,
    /// Clone this snapshot of the source.
    #[arg(long)]
    pub snapshot: Option<i64>,
    /// Clone the snapshot a branch or tag of the source points at.
    #[arg(long = "ref")]
    pub reference: Option<String>,
    /// Clone the source as it was at this time (RFC 3339 or epoch milliseconds).
    #[arg(long)]
    pub as_of: Option<String>,
    /// Make an existing target's next snapshot the source's state (one atomic swap).
    #[arg(long)]
    pub replace: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The snapshot a `--snapshot` / `--ref` / `--as-of` trio selects.
pub fn selector(
    snapshot: Option<i64>,
    reference: Option<&String>,
    as_of: Option<&String>,
) -> Result<SnapshotSelector> {
    Ok(match (snapshot, reference, as_of) {
        (Some(id), None, None) => SnapshotSelector::Id(id),
        (None, Some(r), None) => SnapshotSelector::Ref(r.clone()),
        (None, None, Some(t)) => SnapshotSelector::AsOf(parse_time_ms(t)?),
        (None, None, None) => SnapshotSelector::Current,
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "give at most one of --snapshot, --ref, --as-of",
            ))
        }
    })
}

/// `floe clone`.
pub async fn clone(cli: &Cli, a: &CloneArgs) -> Result<()> {
    let (cat, source) = catalog_and_table(cli, &a.source).await?;
    let sel = selector(a.snapshot, a.reference.as_ref(), a.as_of.as_ref())?;
    let started = std::time::Instant::now();
    let r =
        floe::txn::clone_table(&cat, &source, &sel, &parse_ident(&a.target)?, a.replace).await?;
    if a.json {
        print_json(&serde_json::to_value(&r)?);
    } else {
        println!(
            "{} {} as a clone of {} snapshot {} ({} data files shared, {} manifests copied, {} reused) in {:.0} ms",
            if r.replaced { "replaced" } else { "created" },
            r.target,
            a.source,
            r.source_snapshot_id,
            r.data_files,
            r.copied_manifests,
            r.reused_manifests,
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    Ok(())
}
