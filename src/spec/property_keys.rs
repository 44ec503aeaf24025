//! The table property names Iceberg Java (1.10) and floe define, to catch typos: a key in a
//! namespace they own (`write.`, `commit.`, `history.`, `floe.`) that neither defines is
//! refused with the nearest known name. Pure.

use std::collections::HashMap;

use crate::error::{Error, Result};

/// Namespaces whose every key must be known.
const OWNED: &[&str] = &["write.", "commit.", "history.", "floe."];

/// Keys of Iceberg Java's `TableProperties` (and Spark's write options stored as table
/// properties) in the owned namespaces, and floe's own.
const KNOWN: &[&str] = &[
    "commit.retry.num-retries",
    "commit.retry.min-wait-ms",
    "commit.retry.max-wait-ms",
    "commit.retry.total-timeout-ms",
    "commit.status-check.num-retries",
    "commit.status-check.min-wait-ms",
    "commit.status-check.max-wait-ms",
    "commit.status-check.total-timeout-ms",
    "commit.manifest.target-size-bytes",
    "commit.manifest.min-count-to-merge",
    "commit.manifest-merge.enabled",
    "write.format.default",
    "write.delete.format.default",
    "write.parquet.row-group-size-bytes",
    "write.delete.parquet.row-group-size-bytes",
    "write.parquet.page-size-bytes",
    "write.delete.parquet.page-size-bytes",
    "write.parquet.page-row-limit",
    "write.delete.parquet.page-row-limit",
    "write.parquet.dict-size-bytes",
    "write.delete.parquet.dict-size-bytes",
    "write.parquet.compression-codec",
    "write.delete.parquet.compression-codec",
    "write.parquet.compression-level",
    "write.delete.parquet.compression-level",
    "write.parquet.row-group-check-min-record-count",
    "write.delete.parquet.row-group-check-min-record-count",
    "write.parquet.row-group-check-max-record-count",
    "write.delete.parquet.row-group-check-max-record-count",
    "write.parquet.bloom-filter-max-bytes",
    "write.avro.compression-codec",
    "write.delete.avro.compression-codec",
    "write.avro.compression-level",
    "write.delete.avro.compression-level",
    "write.orc.stripe-size-bytes",
    "write.delete.orc.stripe-size-bytes",
    "write.orc.block-size-bytes",
    "write.delete.orc.block-size-bytes",
    "write.orc.vectorized.batch-size",
    "write.delete.orc.vectorized.batch-size",
    "write.orc.compression-codec",
    "write.delete.orc.compression-codec",
    "write.orc.compression-strategy",
    "write.delete.orc.compression-strategy",
    "write.orc.bloom.filter.columns",
    "write.orc.bloom.filter.fpp",
    "write.location-provider.impl",
    "write.object-storage.enabled",
    "write.object-storage.partitioned-paths",
    "write.object-storage.path",
    "write.folder-storage.path",
    "write.data.path",
    "write.metadata.path",
    "write.manifest-lists.enabled",
    "write.summary.partition-limit",
    "write.metadata.compression-codec",
    "write.metadata.previous-versions-max",
    "write.metadata.delete-after-commit.enabled",
    "write.metadata.metrics.max-inferred-column-defaults",
    "write.metadata.metrics.default",
    "write.wap.enabled",
    "write.target-file-size-bytes",
    "write.delete.target-file-size-bytes",
    "write.distribution-mode",
    "write.delete.distribution-mode",
    "write.update.distribution-mode",
    "write.merge.distribution-mode",
    "write.spark.fanout.enabled",
    "write.spark.accept-any-schema",
    "write.spark.advisory-partition-size-bytes",
    "write.delete.granularity",
    "write.delete.isolation-level",
    "write.delete.mode",
    "write.update.isolation-level",
    "write.update.mode",
    "write.merge.isolation-level",
    "write.merge.mode",
    "write.merge.cardinality-check.enabled",
    "write.upsert.enabled",
    "history.expire.max-snapshot-age-ms",
    "history.expire.min-snapshots-to-keep",
    "history.expire.max-ref-age-ms",
    "floe.clone.source",
    "floe.clone.source-snapshot-id",
    "floe.replaced-table",
    "floe.merge-engine",
    "floe.merge.version-column",
    "floe.merge.delete-column",
    "floe.merge.drop-zero-rows",
    "floe.merge.partition-aligned",
    "floe.merge.source-memory-bytes",
    "floe.tombstones",
];

/// Per-column families: any key that starts with one of these is known.
const PREFIXES: &[&str] = &[
    "write.metadata.metrics.column.",
    "write.parquet.bloom-filter-enabled.column.",
    "write.parquet.bloom-filter-fpp.column.",
    "write.parquet.stats-enabled.column.",
    "floe.sink.",
    "floe.aggregate.",
    super::maintain_policy::REWRITE_DATA_FILES_PREFIX,
];

/// Refuses keys in an owned namespace that no one defines, naming the nearest known key.
pub fn check_property_keys(props: &HashMap<String, String>) -> Result<()> {
    let mut keys: Vec<&String> = props.keys().collect();
    keys.sort();
    for k in keys {
        let owned = OWNED.iter().any(|ns| k.starts_with(ns));
        let known = KNOWN.contains(&k.as_str())
            || super::maintain_policy::KEYS.contains(&k.as_str())
            || PREFIXES.iter().any(|p| k.starts_with(p));
        if owned && !known {
            let nearest = KNOWN
                .iter()
                .chain(super::maintain_policy::KEYS)
                .chain(PREFIXES)
                .min_by_key(|c| edit_distance(k, c))
                .copied()
                .unwrap_or_default();
            return Err(Error::invalid(format!(
                "unknown table property '{k}' (did you mean '{nearest}'?); keys under {} are \
                 Iceberg's and floe's own. To store it anyway, allow unknown properties",
                OWNED.join(", ")
            )));
        }
    }
    Ok(())
}

/// Levenshtein distance by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(k: &str) -> Result<()> {
        check_property_keys(&HashMap::from([(k.to_string(), "x".to_string())]))
    }

    #[test]
    fn typos_are_refused_with_the_nearest_name() {
        let e = check("write.delete.mod").unwrap_err().to_string();
        assert!(e.contains("did you mean 'write.delete.mode'"), "{e}");
        let e = check("history.expire.min-snapshot-to-keep")
            .unwrap_err()
            .to_string();
        assert!(e.contains("'history.expire.min-snapshots-to-keep'"), "{e}");
        assert!(check("floe.nonsense").is_err());
    }

    #[test]
    fn known_keys_families_and_other_namespaces_pass() {
        for k in [
            "write.delete.mode",
            "write.metadata.metrics.column.payload",
            "write.parquet.bloom-filter-enabled.column.id",
            "commit.retry.num-retries",
            "read.split.target-size",
            "owner",
            "my.app.setting",
        ] {
            check(k).unwrap_or_else(|e| panic!("{k}: {e}"));
        }
    }

    #[test]
    fn distance() {
        assert_eq!(edit_distance("mod", "mode"), 1);
        assert_eq!(edit_distance("", "ab"), 2);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
