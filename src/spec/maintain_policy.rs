//! What `maintain` may do to a table, read from its properties. Pure: no I/O.
//!
//! Thresholds that Iceberg already names keep Iceberg's keys (`history.expire.*`,
//! `write.target-file-size-bytes`, `commit.manifest.*`); the rest live under
//! `floe.maintain.`, one family per step, with the Spark procedure's option names after it:
//! `floe.maintain.rewrite-data-files.min-input-files=5` is the procedure's `min-input-files`.

use std::collections::HashMap;

use crate::error::{Error, Result};

/// Prefix of every maintenance property.
pub const MAINTAIN_PREFIX: &str = "floe.maintain.";
/// `floe.maintain.enabled` (true): `maintain` does nothing on a table that sets it to false.
pub const MAINTAIN_ENABLED: &str = "floe.maintain.enabled";
/// Prefix of the compaction step's options (Spark's `rewrite_data_files` option names).
pub const REWRITE_DATA_FILES_PREFIX: &str = "floe.maintain.rewrite-data-files.";
/// `floe.maintain.rewrite-position-delete-files.min-input-files` (2).
pub const DELETES_MIN_INPUT_FILES: &str =
    "floe.maintain.rewrite-position-delete-files.min-input-files";
/// `floe.maintain.remove-orphan-files.older-than-ms` (3 days, as Java's action).
pub const ORPHANS_OLDER_THAN_MS: &str = "floe.maintain.remove-orphan-files.older-than-ms";
/// `floe.maintain.tombstones.min-files` (8): tombstone files are merged into one at this many.
pub const TOMBSTONES_MIN_FILES: &str = "floe.maintain.tombstones.min-files";
/// `floe.maintain.tombstones.max-age-ms` (unset: tombstones are kept): older ones expire.
pub const TOMBSTONES_MAX_AGE_MS: &str = "floe.maintain.tombstones.max-age-ms";
/// `floe.maintain.lease-ms` (10 minutes): how long a maintainer's lease lasts unrenewed.
pub const LEASE_MS: &str = "floe.maintain.lease-ms";

/// `floe.maintain.max-writer-pause-ms` (10 s; 0: never): how long a maintainer whose
/// compaction keeps losing to writers may ask floe writers to hold their commits.
pub const MAX_WRITER_PAUSE_MS: &str = "floe.maintain.max-writer-pause-ms";
/// `floe.maintain.commit-intent`: set by a maintainer, never by hand — floe writers hold
/// their commits until it is gone or its expiry passes ([`CommitIntent`]).
pub const COMMIT_INTENT: &str = "floe.maintain.commit-intent";

/// A maintainer's request that floe writers hold their commits while it commits: the value
/// of [`COMMIT_INTENT`], `<holder>;<expiry ms since the epoch>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitIntent {
    /// Who asks (`host:pid`).
    pub holder: String,
    /// When the request lapses, whatever became of its holder (ms since the epoch).
    pub until_ms: i64,
}

impl CommitIntent {
    /// The intent a property value states; `None` for a value in another form.
    pub fn parse(value: &str) -> Option<Self> {
        let (holder, until) = value.rsplit_once(';')?;
        Some(Self {
            holder: holder.to_string(),
            until_ms: until.trim().parse().ok()?,
        })
    }

    /// The property value.
    pub fn value(&self) -> String {
        format!("{};{}", self.holder, self.until_ms)
    }
}

/// The steps of `maintain`, in the order they run.
pub const STEPS: [&str; 6] = [
    "rewrite-data-files",
    "rewrite-position-delete-files",
    "rewrite-manifests",
    "tombstones",
    "expire-snapshots",
    "remove-orphan-files",
];

/// The keys `floe.maintain.` defines (the compaction family aside).
pub(crate) const KEYS: &[&str] = &[
    MAINTAIN_ENABLED,
    "floe.maintain.rewrite-data-files.enabled",
    "floe.maintain.rewrite-position-delete-files.enabled",
    DELETES_MIN_INPUT_FILES,
    "floe.maintain.rewrite-manifests.enabled",
    "floe.maintain.tombstones.enabled",
    TOMBSTONES_MIN_FILES,
    TOMBSTONES_MAX_AGE_MS,
    "floe.maintain.expire-snapshots.enabled",
    "floe.maintain.remove-orphan-files.enabled",
    ORPHANS_OLDER_THAN_MS,
    LEASE_MS,
    MAX_WRITER_PAUSE_MS,
    COMMIT_INTENT,
];

/// A table's maintenance policy.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct MaintainPolicy {
    /// `floe.maintain.enabled`.
    pub enabled: bool,
    /// Steps switched off by `floe.maintain.<step>.enabled=false`.
    pub disabled_steps: Vec<&'static str>,
    /// Options of the compaction step (`floe.maintain.rewrite-data-files.<option>`), checked
    /// by the compaction planner.
    pub rewrite_data_files: HashMap<String, String>,
    /// Partitions with at least this many position delete files get them merged.
    pub deletes_min_input_files: usize,
    /// Files under the table's location unreferenced for this long are removed.
    pub orphans_older_than_ms: i64,
    /// Tombstone files are merged once there are this many.
    pub tombstones_min_files: usize,
    /// Tombstones older than this expire (`None`: never).
    pub tombstones_max_age_ms: Option<i64>,
    /// A lease not renewed for this long may be taken over.
    pub lease_ms: i64,
    /// How long a starved compaction may ask floe writers to hold their commits (0: never).
    pub max_writer_pause_ms: i64,
}

impl MaintainPolicy {
    /// The policy the properties `p` set (defaults for the rest); a value that does not parse
    /// is an error naming the key.
    pub fn of(p: &HashMap<String, String>) -> Result<Self> {
        let flag = |k: &str| -> Result<bool> {
            match p.get(k).map(|v| v.trim().to_ascii_lowercase()).as_deref() {
                None | Some("true") => Ok(true),
                Some("false") => Ok(false),
                Some(v) => Err(Error::invalid(format!(
                    "table property {k}='{v}': expected true or false"
                ))),
            }
        };
        let num = |k: &str, d: i64| -> Result<i64> {
            match p.get(k) {
                None => Ok(d),
                Some(v) => v
                    .trim()
                    .parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "table property {k}='{v}' is not a whole number of 0 or more"
                        ))
                    }),
            }
        };
        let mut disabled_steps = Vec::new();
        for step in STEPS {
            if !flag(&format!("{MAINTAIN_PREFIX}{step}.enabled"))? {
                disabled_steps.push(step);
            }
        }
        let rewrite_data_files = p
            .iter()
            .filter_map(|(k, v)| {
                let option = k.strip_prefix(REWRITE_DATA_FILES_PREFIX)?;
                (option != "enabled").then(|| (option.to_string(), v.clone()))
            })
            .collect();
        Ok(Self {
            enabled: flag(MAINTAIN_ENABLED)?,
            disabled_steps,
            rewrite_data_files,
            deletes_min_input_files: num(DELETES_MIN_INPUT_FILES, 2)?.max(1) as usize,
            orphans_older_than_ms: num(ORPHANS_OLDER_THAN_MS, 3 * 24 * 3_600_000)?,
            tombstones_min_files: num(TOMBSTONES_MIN_FILES, 8)?.max(2) as usize,
            tombstones_max_age_ms: match p.get(TOMBSTONES_MAX_AGE_MS) {
                None => None,
                Some(_) => Some(num(TOMBSTONES_MAX_AGE_MS, 0)?),
            },
            lease_ms: num(LEASE_MS, 600_000)?.max(1_000),
            max_writer_pause_ms: num(MAX_WRITER_PAUSE_MS, 10_000)?,
        })
    }

    /// Whether `step` (one of [`STEPS`]) runs.
    pub fn runs(&self, step: &str) -> bool {
        self.enabled && !self.disabled_steps.contains(&step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_and_overrides() {
        let d = MaintainPolicy::of(&HashMap::new()).unwrap();
        assert!(d.enabled && d.disabled_steps.is_empty());
        assert_eq!(d.orphans_older_than_ms, 259_200_000);
        assert_eq!((d.deletes_min_input_files, d.tombstones_min_files), (2, 8));
        assert_eq!(d.tombstones_max_age_ms, None);
        let p = MaintainPolicy::of(&props(&[
            ("floe.maintain.rewrite-data-files.min-input-files", "2"),
            ("floe.maintain.rewrite-data-files.enabled", "true"),
            ("floe.maintain.remove-orphan-files.enabled", "false"),
            ("floe.maintain.tombstones.max-age-ms", "1000"),
        ]))
        .unwrap();
        assert_eq!(p.rewrite_data_files, props(&[("min-input-files", "2")]));
        assert!(p.runs("rewrite-data-files") && !p.runs("remove-orphan-files"));
        assert_eq!(p.tombstones_max_age_ms, Some(1000));
        let off = MaintainPolicy::of(&props(&[("floe.maintain.enabled", "false")])).unwrap();
        assert!(STEPS.iter().all(|s| !off.runs(s)));
    }

    #[test]
    fn bad_values_name_the_key() {
        for (k, v) in [
            ("floe.maintain.enabled", "yes"),
            ("floe.maintain.lease-ms", "-5"),
            ("floe.maintain.tombstones.min-files", "many"),
        ] {
            let e = MaintainPolicy::of(&props(&[(k, v)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(k), "{e}");
        }
    }
}
