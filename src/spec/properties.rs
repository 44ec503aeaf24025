//! Typed table properties, under Iceberg Java's names and defaults.

use std::collections::HashMap;

use crate::error::{Error, Result};

/// Column metrics mode (`write.metadata.metrics.default` / `.column.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsMode {
    /// No metrics.
    None,
    /// Value, null and NaN counts only.
    Counts,
    /// Counts plus lower/upper bounds truncated to N characters/bytes.
    Truncate(usize),
    /// Counts plus full bounds.
    Full,
}

impl MetricsMode {
    /// Parses `none`, `counts`, `full`, `truncate(N)`.
    pub fn parse(s: &str) -> Result<Self> {
        let l = s.trim().to_ascii_lowercase();
        Ok(match l.as_str() {
            "none" => Self::None,
            "counts" => Self::Counts,
            "full" => Self::Full,
            _ => {
                let n = l
                    .strip_prefix("truncate(")
                    .and_then(|r| r.strip_suffix(')'))
                    .and_then(|n| n.trim().parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "metrics mode '{s}': expected none, counts, full or truncate(N)"
                        ))
                    })?;
                Self::Truncate(n)
            }
        })
    }
}

/// Table property: `false` turns the partition-aligned MERGE off (default `true`; see
/// [`crate::dml::merge`]).
pub const MERGE_PARTITION_ALIGNED: &str = "floe.merge.partition-aligned";
/// Table property: bytes of a partition-aligned MERGE's source held in memory before the rest
/// is spilled to temporary files (default 16 MiB).
pub const MERGE_SOURCE_MEMORY_BYTES: &str = "floe.merge.source-memory-bytes";

/// Row-level write mode (`write.delete.mode`, `write.update.mode`, `write.merge.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteMode {
    /// Rewrite the data files that hold affected rows (default).
    CopyOnWrite,
    /// Write delete files / deletion vectors next to the data.
    MergeOnRead,
}

impl std::fmt::Display for WriteMode {
    /// The property value: `copy-on-write` or `merge-on-read`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::CopyOnWrite => "copy-on-write",
            Self::MergeOnRead => "merge-on-read",
        })
    }
}

/// `write.{delete,update,merge}.isolation-level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    /// No data file matching the operation's filter may be added concurrently (default).
    Serializable,
    /// Only concurrent removals of, or deletes against, the same data files conflict.
    Snapshot,
}

/// `write.delete.granularity`: how position delete files are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteGranularity {
    /// One position delete file per data file (default, as Iceberg Java since 1.8).
    File,
    /// One position delete file per partition.
    Partition,
}

/// How a write spreads rows over its writers (`write.distribution-mode`,
/// `write.{delete,update,merge}.distribution-mode`; Spark's names). floe's writers are lanes,
/// one per core: `none` sends each incoming batch to the least loaded lane (a partition may
/// be written by every lane), `hash` gives each partition to one lane, `range` also gives
/// each partition to one lane and, for an unpartitioned ordered table, the whole table to
/// one lane — so that a partition's files hold consecutive ranges of the sort order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DistributionMode {
    /// No clustering before writing.
    None,
    /// Clustered by partition.
    Hash,
    /// Ordered by partition and sort order.
    Range,
}

/// The properties floe honours, parsed once.
#[derive(Debug, Clone)]
pub struct TableProperties {
    /// `write.target-file-size-bytes` (512 MiB).
    pub target_file_size_bytes: u64,
    /// `write.parquet.compression-codec` (zstd).
    pub parquet_compression: String,
    /// `write.parquet.compression-level` (unset: codec default; floe uses 1 for zstd).
    pub parquet_compression_level: Option<i32>,
    /// `write.parquet.row-group-size-bytes` (128 MiB).
    pub parquet_row_group_size_bytes: u64,
    /// `write.parquet.page-size-bytes` (1 MiB).
    pub parquet_page_size_bytes: usize,
    /// `write.parquet.page-row-limit` (20,000 rows, Java's default).
    pub parquet_page_row_limit: usize,
    /// `write.parquet.dict-size-bytes` (2 MiB).
    pub parquet_dict_size_bytes: usize,
    /// `write.metadata.metrics.default` (truncate(16)).
    pub metrics_default: MetricsMode,
    /// `write.metadata.metrics.column.<name>` overrides.
    pub metrics_columns: HashMap<String, MetricsMode>,
    /// `write.metadata.metrics.max-inferred-column-defaults` (100).
    pub metrics_max_inferred_columns: usize,
    /// `commit.retry.num-retries` (4).
    pub commit_num_retries: u32,
    /// `commit.retry.min-wait-ms` (100).
    pub commit_min_wait_ms: u64,
    /// `commit.retry.max-wait-ms` (60000).
    pub commit_max_wait_ms: u64,
    /// `commit.retry.total-timeout-ms` (1800000).
    pub commit_total_timeout_ms: u64,
    /// `write.delete.mode`.
    pub delete_mode: WriteMode,
    /// `write.update.mode`.
    pub update_mode: WriteMode,
    /// `write.merge.mode`.
    pub merge_mode: WriteMode,
    /// `write.delete.isolation-level`.
    pub delete_isolation: IsolationLevel,
    /// `write.update.isolation-level`.
    pub update_isolation: IsolationLevel,
    /// `write.merge.isolation-level`.
    pub merge_isolation: IsolationLevel,
    /// `write.delete.granularity`.
    pub delete_granularity: DeleteGranularity,
    /// `write.distribution-mode` (unset: Java's default by table layout, see
    /// [`Self::write_distribution`]).
    pub write_distribution: Option<DistributionMode>,
    /// `write.delete.distribution-mode` (hash).
    pub delete_distribution: DistributionMode,
    /// `write.update.distribution-mode` (hash).
    pub update_distribution: DistributionMode,
    /// `write.merge.distribution-mode` (unset: see [`Self::merge_distribution`]).
    pub merge_distribution: Option<DistributionMode>,
    /// `history.expire.max-snapshot-age-ms` (5 days).
    pub expire_max_snapshot_age_ms: i64,
    /// `history.expire.min-snapshots-to-keep` (1).
    pub expire_min_snapshots_to_keep: usize,
    /// `commit.manifest.target-size-bytes` (8 MB).
    pub manifest_target_size_bytes: u64,
    /// `commit.manifest-merge.enabled` (true): commits merge small manifests.
    pub manifest_merge_enabled: bool,
    /// `commit.manifest.min-count-to-merge` (100): the newest manifests merge once there are
    /// this many.
    pub manifest_min_count_to_merge: usize,
    /// `gc.enabled` (true).
    pub gc_enabled: bool,
    /// `write.data.path` (`<location>/data`).
    pub data_path: Option<String>,
    /// `write.metadata.previous-versions-max` (100).
    pub metadata_previous_versions_max: usize,
    /// `write.metadata.delete-after-commit.enabled` (false): delete metadata files that fall
    /// out of the metadata log.
    pub metadata_delete_after_commit: bool,
    /// Columns written with a Parquet bloom filter
    /// (`write.parquet.bloom-filter-enabled.column.<col>=true`), each with its false positive
    /// probability (`write.parquet.bloom-filter-fpp.column.<col>`, 0.01).
    pub bloom_filter_columns: HashMap<String, f64>,
    /// `write.parquet.bloom-filter-max-bytes` (1 MiB): a bloom filter's largest size.
    pub bloom_filter_max_bytes: usize,
    /// [`MERGE_PARTITION_ALIGNED`] (true): a MERGE whose ON keys cover the partition spec
    /// runs one partition at a time.
    pub merge_partition_aligned: bool,
    /// [`MERGE_SOURCE_MEMORY_BYTES`] (16 MiB).
    pub merge_source_memory_bytes: usize,
}

fn num<T: std::str::FromStr>(p: &HashMap<String, String>, k: &str, d: T) -> Result<T> {
    match p.get(k) {
        None => Ok(d),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| Error::invalid(format!("table property {k}='{v}' is not a valid number"))),
    }
}

fn mode(p: &HashMap<String, String>, k: &str) -> Result<WriteMode> {
    match p.get(k).map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None | Some("copy-on-write") => Ok(WriteMode::CopyOnWrite),
        Some("merge-on-read") => Ok(WriteMode::MergeOnRead),
        Some(v) => Err(Error::invalid(format!(
            "table property {k}='{v}': expected copy-on-write or merge-on-read"
        ))),
    }
}

fn isolation(p: &HashMap<String, String>, k: &str) -> Result<IsolationLevel> {
    match p.get(k).map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None | Some("serializable") => Ok(IsolationLevel::Serializable),
        Some("snapshot") => Ok(IsolationLevel::Snapshot),
        Some(v) => Err(Error::invalid(format!(
            "table property {k}='{v}': expected serializable or snapshot"
        ))),
    }
}

fn distribution(p: &HashMap<String, String>, k: &str) -> Result<Option<DistributionMode>> {
    match p.get(k).map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None => Ok(None),
        Some("none") => Ok(Some(DistributionMode::None)),
        Some("hash") => Ok(Some(DistributionMode::Hash)),
        Some("range") => Ok(Some(DistributionMode::Range)),
        Some(v) => Err(Error::invalid(format!(
            "table property {k}='{v}': expected none, hash or range"
        ))),
    }
}

fn granularity(p: &HashMap<String, String>) -> Result<DeleteGranularity> {
    let k = "write.delete.granularity";
    match p.get(k).map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None | Some("file") => Ok(DeleteGranularity::File),
        Some("partition") => Ok(DeleteGranularity::Partition),
        Some(v) => Err(Error::invalid(format!(
            "table property {k}='{v}': expected file or partition"
        ))),
    }
}

impl TableProperties {
    /// Parses the properties map; an invalid value is an error naming the property.
    pub fn parse(p: &HashMap<String, String>) -> Result<Self> {
        let mut metrics_columns = HashMap::new();
        for (k, v) in p {
            if let Some(col) = k.strip_prefix("write.metadata.metrics.column.") {
                metrics_columns.insert(col.to_string(), MetricsMode::parse(v)?);
            }
        }
        let mut bloom_filter_columns = HashMap::new();
        for (k, v) in p {
            if let Some(col) = k.strip_prefix("write.parquet.bloom-filter-enabled.column.") {
                if v.trim().eq_ignore_ascii_case("true") {
                    let fpp: f64 = num(
                        p,
                        &format!("write.parquet.bloom-filter-fpp.column.{col}"),
                        0.01,
                    )?;
                    if !(fpp > 0.0 && fpp < 1.0) {
                        return Err(Error::invalid(format!(
                            "table property write.parquet.bloom-filter-fpp.column.{col}='{fpp}': \
                             expected a probability between 0 and 1 (exclusive)"
                        )));
                    }
                    bloom_filter_columns.insert(col.to_string(), fpp);
                }
            }
        }
        let codec = p
            .get("write.parquet.compression-codec")
            .map(|s| s.to_ascii_lowercase())
            .unwrap_or_else(|| "zstd".into());
        if !matches!(
            codec.as_str(),
            "zstd" | "snappy" | "gzip" | "lz4" | "brotli" | "uncompressed" | "none"
        ) {
            return Err(Error::invalid(format!("write.parquet.compression-codec='{codec}' is not supported (zstd, snappy, gzip, lz4, brotli, uncompressed)")));
        }
        Ok(Self {
            target_file_size_bytes: num(p, "write.target-file-size-bytes", 512 * 1024 * 1024)?,
            parquet_compression: codec,
            parquet_compression_level: p
                .get("write.parquet.compression-level")
                .map(|v| v.parse())
                .transpose()
                .map_err(|_| Error::invalid("write.parquet.compression-level is not a number"))?,
            parquet_row_group_size_bytes: num(
                p,
                "write.parquet.row-group-size-bytes",
                128 * 1024 * 1024,
            )?,
            parquet_page_size_bytes: num(p, "write.parquet.page-size-bytes", 1024 * 1024)?,
            parquet_page_row_limit: num(p, "write.parquet.page-row-limit", 20_000)?.max(1),
            parquet_dict_size_bytes: num(p, "write.parquet.dict-size-bytes", 2 * 1024 * 1024)?,
            metrics_default: p
                .get("write.metadata.metrics.default")
                .map(|v| MetricsMode::parse(v))
                .transpose()?
                .unwrap_or(MetricsMode::Truncate(16)),
            metrics_columns,
            metrics_max_inferred_columns: num(
                p,
                "write.metadata.metrics.max-inferred-column-defaults",
                100,
            )?,
            commit_num_retries: num(p, "commit.retry.num-retries", 4)?,
            commit_min_wait_ms: num(p, "commit.retry.min-wait-ms", 100)?,
            commit_max_wait_ms: num(p, "commit.retry.max-wait-ms", 60_000)?,
            commit_total_timeout_ms: num(p, "commit.retry.total-timeout-ms", 1_800_000)?,
            delete_mode: mode(p, "write.delete.mode")?,
            update_mode: mode(p, "write.update.mode")?,
            merge_mode: mode(p, "write.merge.mode")?,
            delete_isolation: isolation(p, "write.delete.isolation-level")?,
            update_isolation: isolation(p, "write.update.isolation-level")?,
            merge_isolation: isolation(p, "write.merge.isolation-level")?,
            delete_granularity: granularity(p)?,
            write_distribution: distribution(p, "write.distribution-mode")?,
            delete_distribution: distribution(p, "write.delete.distribution-mode")?
                .unwrap_or(DistributionMode::Hash),
            update_distribution: distribution(p, "write.update.distribution-mode")?
                .unwrap_or(DistributionMode::Hash),
            merge_distribution: distribution(p, "write.merge.distribution-mode")?,
            expire_max_snapshot_age_ms: num(p, "history.expire.max-snapshot-age-ms", 432_000_000)?,
            expire_min_snapshots_to_keep: num(p, "history.expire.min-snapshots-to-keep", 1)?,
            manifest_target_size_bytes: num(p, "commit.manifest.target-size-bytes", 8 << 20)?,
            manifest_merge_enabled: p
                .get("commit.manifest-merge.enabled")
                .map(|v| !v.trim().eq_ignore_ascii_case("false"))
                .unwrap_or(true),
            manifest_min_count_to_merge: num(p, "commit.manifest.min-count-to-merge", 100)?,
            gc_enabled: p
                .get("gc.enabled")
                .map(|v| v.trim() != "false")
                .unwrap_or(true),
            data_path: p.get("write.data.path").cloned(),
            metadata_previous_versions_max: num(p, "write.metadata.previous-versions-max", 100)?,
            metadata_delete_after_commit: p
                .get("write.metadata.delete-after-commit.enabled")
                .map(|v| v.trim() == "true")
                .unwrap_or(false),
            bloom_filter_columns,
            bloom_filter_max_bytes: num(p, "write.parquet.bloom-filter-max-bytes", 1 << 20)?,
            merge_partition_aligned: match p.get(MERGE_PARTITION_ALIGNED) {
                None => true,
                Some(v) if v.trim().eq_ignore_ascii_case("true") => true,
                Some(v) if v.trim().eq_ignore_ascii_case("false") => false,
                Some(v) => {
                    return Err(Error::invalid(format!(
                        "table property {MERGE_PARTITION_ALIGNED}='{v}': expected true or false"
                    )))
                }
            },
            merge_source_memory_bytes: num(p, MERGE_SOURCE_MEMORY_BYTES, 16 << 20)?,
        })
    }

    /// The distribution of an append or rewrite into a table `partitioned` and/or `sorted`
    /// (Iceberg Spark's rules): `write.distribution-mode` if set — `range` without a sort
    /// order or partitions, and `hash` without partitions, mean `none` — else `range` for a
    /// sorted table, `hash` for a partitioned one, `none` otherwise.
    pub fn write_distribution(&self, partitioned: bool, sorted: bool) -> DistributionMode {
        match self.write_distribution {
            Some(m) => adjusted(m, partitioned, sorted),
            None if sorted => DistributionMode::Range,
            None if partitioned => DistributionMode::Hash,
            None => DistributionMode::None,
        }
    }

    /// The distribution of the rows a MERGE writes: `write.merge.distribution-mode` (adjusted
    /// as for appends under copy-on-write); unset, `hash` under merge-on-read or for a
    /// partitioned table, else the append's.
    pub fn merge_distribution(
        &self,
        mode: WriteMode,
        partitioned: bool,
        sorted: bool,
    ) -> DistributionMode {
        match (self.merge_distribution, mode) {
            (Some(m), WriteMode::CopyOnWrite) => adjusted(m, partitioned, sorted),
            (Some(m), WriteMode::MergeOnRead) => m,
            (None, WriteMode::MergeOnRead) => DistributionMode::Hash,
            (None, WriteMode::CopyOnWrite) if partitioned => DistributionMode::Hash,
            (None, WriteMode::CopyOnWrite) => self.write_distribution(partitioned, sorted),
        }
    }

    /// The metrics mode of a top-level or nested column (by full name).
    pub(crate) fn metrics_mode(&self, column: &str, column_index: usize) -> MetricsMode {
        if let Some(m) = self.metrics_columns.get(column) {
            return *m;
        }
        if column_index >= self.metrics_max_inferred_columns
            && self.metrics_default == MetricsMode::Truncate(16)
        {
            return MetricsMode::None;
        }
        self.metrics_default
    }
}

/// An explicit append distribution where the layout cannot use it: `none`.
fn adjusted(m: DistributionMode, partitioned: bool, sorted: bool) -> DistributionMode {
    match m {
        DistributionMode::Range if !partitioned && !sorted => DistributionMode::None,
        DistributionMode::Hash if !partitioned => DistributionMode::None,
        m => m,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> Result<TableProperties> {
        TableProperties::parse(
            &kv.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        )
    }

    #[test]
    fn distribution_modes_follow_iceberg_sparks_rules() {
        use DistributionMode::{Hash, None as No, Range};
        use WriteMode::{CopyOnWrite as Cow, MergeOnRead as Mor};
        let d = props(&[]).unwrap();
        // (partitioned, sorted) -> default append distribution
        assert_eq!(d.write_distribution(false, false), No);
        assert_eq!(d.write_distribution(true, false), Hash);
        assert_eq!(d.write_distribution(false, true), Range);
        assert_eq!(d.write_distribution(true, true), Range);
        assert_eq!((d.delete_distribution, d.update_distribution), (Hash, Hash));
        assert_eq!(d.merge_distribution(Mor, false, true), Hash);
        assert_eq!(d.merge_distribution(Cow, true, true), Hash);
        assert_eq!(d.merge_distribution(Cow, false, true), Range);
        assert_eq!(d.merge_distribution(Cow, false, false), No);
        // Explicit values, adjusted to the layout for appends and copy-on-write merges.
        let r = props(&[
            ("write.distribution-mode", "RANGE"),
            ("write.merge.distribution-mode", "hash"),
        ])
        .unwrap();
        assert_eq!(r.write_distribution(false, false), No);
        assert_eq!(r.write_distribution(true, false), Range);
        assert_eq!(r.merge_distribution(Cow, false, true), No);
        assert_eq!(r.merge_distribution(Mor, false, true), Hash);
        let h = props(&[("write.distribution-mode", "hash")]).unwrap();
        assert_eq!(h.write_distribution(false, true), No);
        assert_eq!(h.write_distribution(true, true), Hash);
        let n = props(&[("write.update.distribution-mode", "none")]).unwrap();
        assert_eq!(n.update_distribution, No);
        for k in [
            "write.distribution-mode",
            "write.delete.distribution-mode",
            "write.update.distribution-mode",
            "write.merge.distribution-mode",
        ] {
            let e = props(&[(k, "round-robin")]).unwrap_err();
            assert!(
                e.to_string().contains(k) && e.to_string().contains("none, hash or range"),
                "{e}"
            );
        }
    }

    #[test]
    fn defaults_and_overrides() {
        let p = TableProperties::parse(&HashMap::new()).unwrap();
        assert_eq!(p.target_file_size_bytes, 536_870_912);
        assert_eq!(p.metrics_default, MetricsMode::Truncate(16));
        assert_eq!(p.delete_mode, WriteMode::CopyOnWrite);
        let m: HashMap<_, _> = [
            ("write.metadata.metrics.column.s", "none"),
            ("write.delete.mode", "merge-on-read"),
            ("write.target-file-size-bytes", "1000"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let p = TableProperties::parse(&m).unwrap();
        assert_eq!(p.metrics_mode("s", 0), MetricsMode::None);
        assert_eq!(p.delete_mode, WriteMode::MergeOnRead);
        assert_eq!(p.target_file_size_bytes, 1000);
    }

    #[test]
    fn bad_values_name_the_property() {
        let m: HashMap<_, _> = [(
            "write.target-file-size-bytes".to_string(),
            "big".to_string(),
        )]
        .into();
        assert!(TableProperties::parse(&m)
            .unwrap_err()
            .to_string()
            .contains("write.target-file-size-bytes"));
        assert!(MetricsMode::parse("truncate(0)").is_err());
    }
}
