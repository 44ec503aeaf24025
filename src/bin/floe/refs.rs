//! `floe branch`, `floe tag`, `floe rollback`, `floe set-current-snapshot`, `floe cherrypick`:
//! the table's refs.

use floe::spec::snapshot_refs::{RefChange, Retention};
use floe::table::parse_ident;
use floe::Result;
use serde_json::json;

use super::output::print_json;
use super::{catalog, parse_time_ms, Cli};

const DAY_MS: i64 = 86_400_000;

/// What `floe branch` does.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BranchAction {
    /// A new branch (at --snapshot, else the current snapshot).
    Create,
    /// Move an existing branch to --snapshot.
    Replace,
    /// Remove a branch (not main).
    Drop,
    /// Move the branch to --to's snapshot, which must descend from it.
    FastForward,
}

/// Create, move or drop a branch.
#[derive(clap::Args, Debug)]
pub struct BranchArgs {
    /// create, replace, drop or fast-forward.
    pub action: BranchAction,
    /// Table name (ns.table).
    pub name: String,
    /// The branch.
    pub branch: String,
    /// The snapshot it points at (create: default the current one; replace: required).
    #[arg(long)]
    pub snapshot: Option<i64>,
    /// fast-forward: the branch or tag whose snapshot it moves to.
    #[arg(long)]
    pub to: Option<String>,
    /// The branch expires this many days after its last change (max-ref-age-ms).
    #[arg(long)]
    pub retain_days: Option<i64>,
    /// Snapshots of the branch expiry always keeps (min-snapshots-to-keep).
    #[arg(long)]
    pub min_snapshots_to_keep: Option<i32>,
    /// Snapshots of the branch younger than this are kept (max-snapshot-age-ms).
    #[arg(long)]
    pub max_snapshot_age_days: Option<i64>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `floe tag` does.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagAction {
    /// A new tag (at --snapshot, else the current snapshot).
    Create,
    /// Move an existing tag to --snapshot.
    Replace,
    /// Remove a tag.
    Drop,
}

/// Create, move or drop a tag.
#[derive(clap::Args, Debug)]
pub struct TagArgs {
    /// create, replace or drop.
    pub action: TagAction,
    /// Table name (ns.table).
    pub name: String,
    /// The tag.
    pub tag: String,
    /// The snapshot it points at (create: default the current one; replace: required).
    #[arg(long)]
    pub snapshot: Option<i64>,
    /// The tag expires this many days after it was set (max-ref-age-ms).
    #[arg(long)]
    pub retain_days: Option<i64>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Move main back to an ancestor snapshot.
#[derive(clap::Args, Debug)]
pub struct RollbackArgs {
    /// Table name (ns.table).
    pub name: String,
    /// The ancestor snapshot.
    #[arg(
        long,
        conflicts_with = "to_timestamp",
        required_unless_present = "to_timestamp"
    )]
    pub to_snapshot: Option<i64>,
    /// The latest ancestor committed at or before this time (RFC 3339 or epoch ms).
    #[arg(long)]
    pub to_timestamp: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Set main to any snapshot of the table.
#[derive(clap::Args, Debug)]
pub struct SetCurrentSnapshotArgs {
    /// Table name (ns.table).
    pub name: String,
    /// The snapshot.
    pub snapshot_id: i64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Publish a snapshot (a staged WAP write, or any snapshot off main's history) onto main.
#[derive(clap::Args, Debug)]
pub struct CherrypickArgs {
    /// Table name (ns.table).
    pub name: String,
    /// The snapshot to publish (`floe snapshots NAME` lists staged ones with their wap.id).
    pub snapshot_id: i64,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `floe cherrypick`.
pub async fn cherrypick(cli: &Cli, a: &CherrypickArgs) -> Result<()> {
    let cat = catalog(cli)?;
    let ident = parse_ident(&a.name)?;
    let before = cat
        .load_table(&ident)
        .await?
        .metadata()
        .current_snapshot_id();
    let r = floe::txn::cherrypick(&cat, &ident, a.snapshot_id).await?;
    if a.json {
        print_json(&json!({
            "table": a.name,
            "source_snapshot_id": r.source_snapshot_id,
            "snapshot_id": r.snapshot_id,
            "fast_forward": r.fast_forward,
            "published_wap_id": r.published_wap_id,
            "added_data_files_count": r.added_files,
            "removed_data_files_count": r.removed_files,
            "previous_snapshot_id": before,
        }));
        return Ok(());
    }
    let wap = r
        .published_wap_id
        .as_deref()
        .map(|w| format!(" (wap.id={w})"))
        .unwrap_or_default();
    if r.fast_forward {
        outln!(
            "fast-forwarded main of {} to snapshot {}{wap}",
            a.name,
            r.snapshot_id
        );
    } else {
        outln!(
            "cherry-picked snapshot {}{wap} onto main of {} as snapshot {} ({} data files added, {} removed)",
            r.source_snapshot_id,
            a.name,
            r.snapshot_id,
            r.added_files,
            r.removed_files
        );
    }
    Ok(())
}

fn days(d: Option<i64>) -> Option<i64> {
    d.map(|d| d.saturating_mul(DAY_MS))
}

fn missing(what: &str) -> floe::Error {
    floe::Error::new(floe::ErrorKind::InvalidInput, what.to_string())
}

/// `floe branch`.
pub async fn branch(cli: &Cli, a: &BranchArgs) -> Result<()> {
    let retention = Retention {
        max_ref_age_ms: days(a.retain_days),
        min_snapshots_to_keep: a.min_snapshots_to_keep,
        max_snapshot_age_ms: days(a.max_snapshot_age_days),
    };
    let given = retention != Retention::default();
    let change = match a.action {
        BranchAction::Create => RefChange::CreateBranch {
            name: a.branch.clone(),
            snapshot: a.snapshot,
            retention,
        },
        BranchAction::Replace => RefChange::ReplaceBranch {
            name: a.branch.clone(),
            snapshot: a
                .snapshot
                .ok_or_else(|| missing("floe branch replace: --snapshot ID is required"))?,
            retention: given.then_some(retention),
        },
        BranchAction::Drop => RefChange::DropBranch(a.branch.clone()),
        BranchAction::FastForward => RefChange::FastForward {
            name: a.branch.clone(),
            to: a
                .to
                .clone()
                .ok_or_else(|| missing("floe branch fast-forward: --to REF is required"))?,
        },
    };
    let verb = match a.action {
        BranchAction::Create => "created",
        BranchAction::Replace => "replaced",
        BranchAction::Drop => "dropped",
        BranchAction::FastForward => "fast-forwarded",
    };
    run(cli, &a.name, &a.branch, "branch", verb, &change, a.json).await
}

/// `floe tag`.
pub async fn tag(cli: &Cli, a: &TagArgs) -> Result<()> {
    let retention = Retention {
        max_ref_age_ms: days(a.retain_days),
        ..Default::default()
    };
    let change = match a.action {
        TagAction::Create => RefChange::CreateTag {
            name: a.tag.clone(),
            snapshot: a.snapshot,
            retention,
        },
        TagAction::Replace => RefChange::ReplaceTag {
            name: a.tag.clone(),
            snapshot: a
                .snapshot
                .ok_or_else(|| missing("floe tag replace: --snapshot ID is required"))?,
            retention: a.retain_days.is_some().then_some(retention),
        },
        TagAction::Drop => RefChange::DropTag(a.tag.clone()),
    };
    let verb = match a.action {
        TagAction::Create => "created",
        TagAction::Replace => "replaced",
        TagAction::Drop => "dropped",
    };
    run(cli, &a.name, &a.tag, "tag", verb, &change, a.json).await
}

/// `floe rollback`.
pub async fn rollback(cli: &Cli, a: &RollbackArgs) -> Result<()> {
    let change = match (&a.to_snapshot, &a.to_timestamp) {
        (Some(id), _) => RefChange::RollbackTo(*id),
        (None, Some(ts)) => RefChange::RollbackToTime(parse_time_ms(ts)?),
        (None, None) => return Err(missing("floe rollback: --to-snapshot or --to-timestamp")),
    };
    run(
        cli,
        &a.name,
        "main",
        "branch",
        "rolled back",
        &change,
        a.json,
    )
    .await
}

/// `floe set-current-snapshot`.
pub async fn set_current_snapshot(cli: &Cli, a: &SetCurrentSnapshotArgs) -> Result<()> {
    let change = RefChange::SetCurrentSnapshot(a.snapshot_id);
    run(cli, &a.name, "main", "branch", "set", &change, a.json).await
}

async fn run(
    cli: &Cli,
    name: &str,
    reference: &str,
    ref_type: &str,
    verb: &str,
    change: &RefChange,
    json: bool,
) -> Result<()> {
    let cat = catalog(cli)?;
    let ident = parse_ident(name)?;
    let before = cat
        .load_table(&ident)
        .await?
        .metadata()
        .current_snapshot_id();
    let t = floe::txn::manage_refs(&cat, &ident, change).await?;
    let at = floe::spec::refs(t.metadata())
        .into_iter()
        .find(|(n, _)| n == reference)
        .map(|(_, r)| r.snapshot_id);
    if json {
        print_json(&json!({
            "table": name,
            "ref": reference,
            "ref_type": ref_type,
            "snapshot_id": at,
            "current_snapshot_id": t.metadata().current_snapshot_id(),
            "previous_snapshot_id": before,
        }));
    } else {
        match at {
            Some(id) => outln!("{verb} {ref_type} {reference} of {name} at snapshot {id}"),
            None => outln!("{verb} {ref_type} {reference} of {name}"),
        }
    }
    Ok(())
}
