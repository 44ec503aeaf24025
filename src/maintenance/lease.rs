//! The maintainer's lease: at most one `maintain` works on a table at a time.
//!
//! A lease is a small JSON file in the table's metadata directory,
//! `metadata/floe-maintain-lease/<generation>.json`, created with a create-only write (the
//! same guarantee commits of the filesystem catalog rely on, on local disks and S3). The
//! newest generation is the lease. Its holder renews it by rewriting its own file with a later
//! expiry; it releases it by writing an expiry in the past. Anyone may take a lease that has
//! expired (its holder died or was stopped) by creating the next generation: only one of two
//! contenders can create it. A holder that finds a newer generation than its own has lost the
//! lease and stops.

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::{join, Storage};
use crate::table::Table;

/// Who holds a table's lease, and until when.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseHolder {
    /// The holder's name (`host:pid` unless given).
    pub holder: String,
    /// The lease's generation (each take-over adds one).
    pub generation: u64,
    /// When the holder took it (ms since the epoch).
    pub acquired_at_ms: i64,
    /// When it lapses unless renewed (ms since the epoch).
    pub expires_at_ms: i64,
}

/// A lease this process holds on one table's maintenance.
#[derive(Debug)]
pub struct Lease {
    storage: Storage,
    dir: String,
    table: String,
    ttl_ms: i64,
    held: LeaseHolder,
}

/// This process's default holder name: `host:pid`.
pub fn default_holder() -> String {
    crate::txn::process_name()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn file_name(generation: u64) -> String {
    format!("{generation:012}.json")
}

fn lease_dir(table: &Table) -> String {
    join(table.metadata().location(), "metadata/floe-maintain-lease")
}

/// The newest lease generation of a table and its content (`None`: never leased).
async fn newest(storage: &Storage, dir: &str) -> Result<Option<(u64, Option<LeaseHolder>)>> {
    let mut best: Option<u64> = None;
    for o in storage.list(dir).await? {
        let name = o.location.rsplit('/').next().unwrap_or_default();
        if let Some(g) = name
            .strip_suffix(".json")
            .and_then(|g| g.parse::<u64>().ok())
        {
            best = best.max(Some(g));
        }
    }
    let Some(g) = best else {
        return Ok(None);
    };
    // A file being rewritten by its holder can be read half-way on some stores; an unreadable
    // lease counts as held (its holder is alive), never as free.
    let holder = match storage.get(&join(dir, &file_name(g))).await {
        Ok(b) => serde_json::from_slice::<LeaseHolder>(&b).ok(),
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Some((g, None))),
        Err(e) => return Err(e),
    };
    Ok(Some((g, holder)))
}

/// Who holds the maintenance lease of `table` now (`None`: nobody, or it expired).
pub async fn lease_holder(table: &Table) -> Result<Option<LeaseHolder>> {
    let dir = lease_dir(table);
    Ok(match newest(table.storage(), &dir).await? {
        Some((_, Some(h))) if h.expires_at_ms > now_ms() => Some(h),
        _ => None,
    })
}

impl Lease {
    /// Takes the maintenance lease of `table` for `ttl_ms` as `holder`, or fails with a
    /// [`ErrorKind::Conflict`] naming who holds it and until when.
    pub async fn acquire(table: &Table, holder: &str, ttl_ms: i64) -> Result<Lease> {
        let storage = table.storage().clone();
        let dir = lease_dir(table);
        let next = match newest(&storage, &dir).await? {
            None => 0,
            Some((g, Some(h))) if h.expires_at_ms <= now_ms() => g + 1,
            Some((g, None)) => {
                // Unreadable: taken over only once the file is older than a lease can last.
                let path = join(&dir, &file_name(g));
                let age = storage
                    .list(&dir)
                    .await?
                    .into_iter()
                    .find(|o| o.location.ends_with(&file_name(g)))
                    .map(|o| now_ms() - o.last_modified_ms)
                    .unwrap_or(i64::MAX);
                if age <= ttl_ms {
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        format!(
                            "table {}: the maintenance lease {path} is being written by another \
                             maintainer; try again later",
                            table.name()
                        ),
                    ));
                }
                g + 1
            }
            Some((_, Some(h))) => return Err(held_by(&table.name(), &h)),
        };
        let at = now_ms();
        let held = LeaseHolder {
            holder: holder.to_string(),
            generation: next,
            acquired_at_ms: at,
            expires_at_ms: at + ttl_ms,
        };
        let path = join(&dir, &file_name(next));
        match storage.put_if_absent(&path, body(&held)?).await {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                // Another maintainer took the same generation first.
                let who = newest(&storage, &dir).await?.and_then(|(_, h)| h);
                return Err(match who {
                    Some(h) => held_by(&table.name(), &h),
                    None => Error::new(
                        ErrorKind::Conflict,
                        format!("table {}: another maintainer took the lease", table.name()),
                    ),
                });
            }
            Err(e) => {
                return Err(e.context(format!("taking the maintenance lease of {}", table.name())))
            }
        }
        // Earlier generations are history: remove them (best effort).
        for g in next.saturating_sub(8)..next {
            let _ = storage.delete(&join(&dir, &file_name(g))).await;
        }
        Ok(Lease {
            storage,
            dir,
            table: table.name(),
            ttl_ms,
            held,
        })
    }

    /// The lease as held now.
    pub fn holder(&self) -> &LeaseHolder {
        &self.held
    }

    /// Extends the lease by its length from now; a [`ErrorKind::Conflict`] if another
    /// maintainer took it over meanwhile (this one must stop).
    pub async fn renew(&mut self) -> Result<()> {
        self.check().await?;
        self.held.expires_at_ms = now_ms() + self.ttl_ms;
        self.write().await
    }

    /// Fails with [`ErrorKind::Conflict`] if the lease has expired or another maintainer
    /// holds a newer generation.
    pub async fn check(&self) -> Result<()> {
        if let Some((g, h)) = newest(&self.storage, &self.dir).await? {
            if g != self.held.generation {
                let who = h
                    .map(|h| h.holder)
                    .unwrap_or_else(|| "another maintainer".into());
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "table {}: the maintenance lease was taken over by {who} (generation \
                         {g}); this maintainer stops",
                        self.table
                    ),
                ));
            }
        }
        if self.held.expires_at_ms <= now_ms() {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "table {}: this maintainer's lease expired before it was renewed; \
                     raise floe.maintain.lease-ms",
                    self.table
                ),
            ));
        }
        Ok(())
    }

    /// Gives the lease up (another maintainer may take it at once).
    pub async fn release(mut self) -> Result<()> {
        if self.check().await.is_err() {
            return Ok(()); // someone else's now
        }
        self.held.expires_at_ms = 0;
        self.write().await
    }

    async fn write(&self) -> Result<()> {
        let path = join(&self.dir, &file_name(self.held.generation));
        self.storage.put(&path, body(&self.held)?).await
    }
}

fn body(h: &LeaseHolder) -> Result<bytes::Bytes> {
    Ok(serde_json::to_vec(h)
        .map_err(|e| Error::io(format!("encoding a lease: {e}")))?
        .into())
}

fn held_by(table: &str, h: &LeaseHolder) -> Error {
    let left = (h.expires_at_ms - now_ms()).max(0) / 1000;
    Error::new(
        ErrorKind::Conflict,
        format!(
            "table {table} is being maintained by {} (lease generation {}, taken at {}, \
             expires in {left} s unless renewed); wait for it or stop that process",
            h.holder,
            h.generation,
            chrono::DateTime::from_timestamp_millis(h.acquired_at_ms)
                .map(|t| t.to_rfc3339())
                .unwrap_or_default()
        ),
    )
}
