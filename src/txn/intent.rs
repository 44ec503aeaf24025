//! Commit intents: a compaction that keeps losing its race against writers asks floe writers
//! to hold their commits for a moment, so that its own commit lands.
//!
//! A writer deleting rows in most of a table's files on every commit (a CDC sink) adds
//! deletes to the files a compaction rewrites; the compaction carries them onto its new files
//! and tries again, but a writer committing back to back wins every round. The maintainer then
//! sets table property [`COMMIT_INTENT`] (its holder and an expiry, at most
//! `floe.maintain.max-writer-pause-ms` ahead) in a commit of its own. Every floe commit that
//! finds the intent on its base waits — reloading the table — until the intent is gone or has
//! expired, then goes on as usual. The writer's commit in flight when the intent lands loses
//! its swap (the metadata changed), reloads, and waits too: from then on the maintainer's
//! carry round and commit race no floe writer. The compaction's commit removes the intent in
//! the same metadata update; a maintainer that fails removes it, and one that dies leaves it
//! to expire. Other engines' writers do not know the property and go on racing.

use std::time::{Duration, Instant};

use crate::catalog::Catalog;
use crate::error::{ErrorKind, Result};
use crate::spec::maintain_policy::{CommitIntent, COMMIT_INTENT};
use crate::table::Table;

use super::{commit_properties, PropertyUpdate};

/// Longest a writer holds for one intent, whatever expiry it states.
const MAX_HOLD: Duration = Duration::from_secs(60);
/// How often a holding writer looks at the table again.
const POLL: Duration = Duration::from_millis(25);

/// This process as a holder of leases and intents: `host:pid`.
pub(crate) fn process_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_string());
    format!("{host}:{}", std::process::id())
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// How long a commit on `table` may ask writers to hold: `floe.maintain.max-writer-pause-ms`
/// for a patient (maintenance) handle, 0 (never) for any other or an unreadable policy.
pub(crate) fn writer_pause_ms(table: &Table) -> i64 {
    if !table.is_patient() {
        return 0;
    }
    crate::spec::maintain_policy::MaintainPolicy::of(table.metadata().properties())
        .map_or(0, |p| p.max_writer_pause_ms)
}

/// The live intent on `table` other than `own` (the one the committing change sets itself).
fn live_intent(table: &Table, own: Option<&str>) -> Option<CommitIntent> {
    let raw = table.metadata().properties().get(COMMIT_INTENT)?;
    if Some(raw.as_str()) == own {
        return None;
    }
    CommitIntent::parse(raw).filter(|i| i.until_ms > now_ms())
}

/// Waits while `base` carries a live intent other than `own`, reloading it; returns how long
/// it held (zero when there was none).
pub(crate) async fn hold_for_maintainer(
    catalog: &Catalog,
    table: &Table,
    base: &mut Table,
    own: Option<&str>,
) -> Result<Duration> {
    let started = Instant::now();
    while let Some(intent) = live_intent(base, own) {
        if started.elapsed() >= MAX_HOLD {
            break;
        }
        let left = Duration::from_millis((intent.until_ms - now_ms()).max(1) as u64);
        tokio::time::sleep(left.min(POLL)).await;
        *base = table.same_branch(catalog.load_table(table.ident()).await?)?;
    }
    Ok(started.elapsed())
}

/// Sets an intent of `holder` on `table` lasting `pause_ms` (retrying a few concurrent
/// commits); returns
/// its value, which the caller's commit removes ([`super::SnapshotProducer::clearing_intent`])
/// or [`withdraw`] does.
pub(crate) async fn ask_writers_to_hold(
    catalog: &Catalog,
    table: &Table,
    holder: &str,
    pause_ms: i64,
) -> Result<String> {
    let value = CommitIntent {
        holder: holder.to_string(),
        until_ms: now_ms().saturating_add(pause_ms),
    }
    .value();
    let mut base = table.same_branch(catalog.load_table(table.ident()).await?)?;
    let mut attempt = 0;
    loop {
        let update = PropertyUpdate {
            key: COMMIT_INTENT.to_string(),
            expected: base.metadata().properties().get(COMMIT_INTENT).cloned(),
            value: Some(value.clone()),
        };
        match commit_properties(catalog, &base, &[update]).await {
            Ok(_) => return Ok(value),
            Err(e) if e.kind() == ErrorKind::Conflict && attempt < 20 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(5 * attempt)).await;
                base = table.same_branch(catalog.load_table(table.ident()).await?)?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Removes the intent `value` from `table` if it is still there (writers then go on at
/// once rather than at its expiry).
pub(crate) async fn withdraw(catalog: &Catalog, table: &Table, value: &str) -> Result<()> {
    for attempt in 0..20u64 {
        let base = table.same_branch(catalog.load_table(table.ident()).await?)?;
        if base
            .metadata()
            .properties()
            .get(COMMIT_INTENT)
            .map(String::as_str)
            != Some(value)
        {
            return Ok(());
        }
        let update = PropertyUpdate {
            key: COMMIT_INTENT.to_string(),
            expected: Some(value.to_string()),
            value: None,
        };
        match commit_properties(catalog, &base, &[update]).await {
            Err(e) if e.kind() == ErrorKind::Conflict => {
                tokio::time::sleep(Duration::from_millis(5 * (attempt + 1))).await;
            }
            r => return r.map(|_| ()),
        }
    }
    Ok(())
}

/// Removes an intent from `table` that has lapsed (its maintainer died or was killed) or does
/// not parse; a live one stays.
pub(crate) async fn withdraw_lapsed(catalog: &Catalog, table: &Table) -> Result<()> {
    let Some(raw) = table.metadata().properties().get(COMMIT_INTENT) else {
        return Ok(());
    };
    match CommitIntent::parse(raw) {
        Some(i) if i.until_ms > now_ms() => Ok(()),
        _ => withdraw(catalog, table, raw).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn rows() -> Result<arrow_array::RecordBatch> {
        let ids = arrow_array::Int64Array::from(vec![1i64, 2]);
        Ok(arrow_array::RecordBatch::try_from_iter([(
            "id",
            Arc::new(ids) as arrow_array::ArrayRef,
        )])?)
    }

    /// A writer whose base predates an intent loses its swap, reloads and holds until the
    /// intent is withdrawn or lapses; an expired intent holds nobody.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writers_hold_for_a_live_intent_only() {
        let dir = tempfile::tempdir().unwrap();
        let cat = Arc::new(Catalog::open(None, dir.path().join("wh").to_str(), None).unwrap());
        let ident = crate::table::parse_ident("db.t").unwrap();
        let schema = crate::spec::parse_schema("id long").unwrap();
        let t = cat
            .create_table(&ident, crate::catalog::TableCreation::new(schema))
            .await
            .unwrap();
        let t = crate::txn::append(&cat, &t, [rows()]).await.unwrap().table;
        let holding = |t: &Table| t.metadata().properties().contains_key(COMMIT_INTENT);

        // Lapses after 400 ms: the stale writer commits after it.
        let started = Instant::now();
        ask_writers_to_hold(&cat, &t, "m", 400).await.unwrap();
        let r = crate::txn::append(&cat, &t, [rows()]).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(350));
        assert!(holding(&r.table), "a lapsed intent stays until withdrawn");
        withdraw_lapsed(&cat, &r.table).await.unwrap();
        let r = crate::txn::AppendResult {
            table: cat.load_table(&ident).await.unwrap(),
            ..r
        };
        assert!(!holding(&r.table));

        // Withdrawn after 300 ms of a 60 s intent: the writer goes on then.
        let started = Instant::now();
        let v = ask_writers_to_hold(&cat, &r.table, "m", 60_000)
            .await
            .unwrap();
        let writer = {
            let (cat, t) = (cat.clone(), r.table.clone());
            tokio::spawn(async move { crate::txn::append(&cat, &t, [rows()]).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!writer.is_finished(), "the writer holds");
        withdraw(&cat, &r.table, &v).await.unwrap();
        let r = writer.await.unwrap().unwrap();
        let held = started.elapsed();
        assert!(held >= Duration::from_millis(300) && held < Duration::from_secs(20));
        assert!(!holding(&r.table));

        // Expired already: nobody holds.
        ask_writers_to_hold(&cat, &r.table, "m", 1).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let started = Instant::now();
        crate::txn::append(&cat, &r.table, [rows()]).await.unwrap();
        assert!(started.elapsed() < Duration::from_millis(350));
        let rows = crate::scan::Scan::new(&cat.load_table(&ident).await.unwrap())
            .count()
            .await
            .unwrap();
        assert_eq!(rows, 8);
        // A live intent is not withdrawn as lapsed.
        let t = cat.load_table(&ident).await.unwrap();
        ask_writers_to_hold(&cat, &t, "m", 60_000).await.unwrap();
        let t = cat.load_table(&ident).await.unwrap();
        withdraw_lapsed(&cat, &t).await.unwrap();
        assert!(holding(&cat.load_table(&ident).await.unwrap()));
    }

    #[test]
    fn an_intent_round_trips_and_odd_values_are_none() {
        let i = CommitIntent {
            holder: "host:1;x".into(),
            until_ms: 17,
        };
        assert_eq!(CommitIntent::parse(&i.value()), Some(i));
        assert_eq!(CommitIntent::parse("no expiry"), None);
        assert_eq!(CommitIntent::parse("h;soon"), None);
    }
}
