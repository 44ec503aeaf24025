//! Which data files `rewrite_data_files` rewrites, in which groups: Iceberg's bin-pack
//! planner with the Spark procedure's option names and defaults. Pure: no I/O.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::error::{Error, Result};
use crate::scan::PlannedFile;
use crate::spec::{DataContentType, Literal, PartitionSpec, Struct};
use crate::txn::FileKey;

/// Options of `rewrite_data_files` (names as in Iceberg's Spark procedure).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RewriteOptions {
    /// `target-file-size-bytes` (default: the table's `write.target-file-size-bytes`).
    pub target_file_size_bytes: u64,
    /// `min-file-size-bytes`: smaller files are rewritten (default 75% of the target).
    pub min_file_size_bytes: u64,
    /// `max-file-size-bytes`: larger files are rewritten (default 180% of the target).
    pub max_file_size_bytes: u64,
    /// `min-input-files`: a group with at least this many files is rewritten (default 5).
    pub min_input_files: usize,
    /// `rewrite-all`: rewrite every file (default false).
    pub rewrite_all: bool,
    /// `delete-file-threshold`: files with at least this many delete files are rewritten.
    pub delete_file_threshold: usize,
    /// `delete-ratio-threshold`: files with at least this share of rows deleted (0.3).
    pub delete_ratio_threshold: f64,
    /// `max-file-group-size-bytes`: the largest group rewritten at once (100 GB).
    pub max_file_group_size_bytes: u64,
    /// `max-concurrent-file-group-rewrites` (default 5).
    pub max_concurrent_file_group_rewrites: usize,
    /// `use-starting-sequence-number`: new files take the starting snapshot's sequence
    /// number, so equality deletes committed meanwhile still apply to them (default true).
    pub use_starting_sequence_number: bool,
    /// `partial-progress.enabled`: commit groups in several commits (default false).
    pub partial_progress_enabled: bool,
    /// `partial-progress.max-commits` (default 10).
    pub partial_progress_max_commits: usize,
    /// `rewrite-job-order`: the order file groups are rewritten (and committed) in.
    pub rewrite_job_order: RewriteJobOrder,
    /// `max-files-to-rewrite`: at most this many files, the planned groups taken in plan order
    /// (the last one cut short), as Java's bin-pack planner does.
    pub max_files_to_rewrite: Option<usize>,
    /// `output-spec-id`: the partition spec the new files are written with (`None`: the
    /// table's default spec). Checked against the table by the caller, not here.
    pub output_spec_id: Option<i32>,
    /// `remove-dangling-deletes`: after the rewrite, commit the removal of delete files that
    /// no longer apply to any live data file (default false).
    pub remove_dangling_deletes: bool,
}

/// `rewrite-job-order`: which file groups are rewritten first (Iceberg's `RewriteJobOrder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RewriteJobOrder {
    /// `none`: the order the groups were planned in (by partition).
    #[default]
    None,
    /// `bytes-asc`: the smallest groups (by input bytes) first.
    BytesAsc,
    /// `bytes-desc`: the largest groups (by input bytes) first.
    BytesDesc,
    /// `files-asc`: the groups with the fewest input files first.
    FilesAsc,
    /// `files-desc`: the groups with the most input files first.
    FilesDesc,
}

impl RewriteJobOrder {
    /// The option values, as Iceberg names them.
    pub const NAMES: [&'static str; 5] =
        ["none", "bytes-asc", "bytes-desc", "files-asc", "files-desc"];

    /// Parses an option value (case-insensitive; `_` may stand for `-`, as Iceberg accepts).
    pub fn parse(value: &str) -> Result<Self> {
        let v = value.trim().to_ascii_lowercase().replace('_', "-");
        Ok(match v.as_str() {
            "none" => Self::None,
            "bytes-asc" => Self::BytesAsc,
            "bytes-desc" => Self::BytesDesc,
            "files-asc" => Self::FilesAsc,
            "files-desc" => Self::FilesDesc,
            _ => {
                return Err(Error::invalid(format!(
                    "rewrite option rewrite-job-order='{value}' is not a job order; use one of: {}",
                    Self::NAMES.join(", ")
                )))
            }
        })
    }

    /// Sorts groups into this order; ties (and `none`) keep their planned order.
    pub fn sort(self, groups: &mut [FileGroup]) {
        match self {
            Self::None => {}
            Self::BytesAsc => groups.sort_by_key(|g| g.bytes),
            Self::BytesDesc => groups.sort_by_key(|g| std::cmp::Reverse(g.bytes)),
            Self::FilesAsc => groups.sort_by_key(|g| g.files.len()),
            Self::FilesDesc => groups.sort_by_key(|g| std::cmp::Reverse(g.files.len())),
        }
    }
}

impl RewriteOptions {
    /// Defaults for a table whose `write.target-file-size-bytes` is `target`, then the
    /// given `key=value` options (unknown keys are an error naming them).
    pub fn parse(target: u64, options: &HashMap<String, String>) -> Result<Self> {
        let mut o = RewriteOptions {
            target_file_size_bytes: target,
            min_file_size_bytes: 0,
            max_file_size_bytes: 0,
            min_input_files: 5,
            rewrite_all: false,
            delete_file_threshold: usize::MAX,
            delete_ratio_threshold: 0.3,
            max_file_group_size_bytes: 100 * 1024 * 1024 * 1024,
            max_concurrent_file_group_rewrites: 5,
            use_starting_sequence_number: true,
            partial_progress_enabled: false,
            partial_progress_max_commits: 10,
            rewrite_job_order: RewriteJobOrder::None,
            max_files_to_rewrite: None,
            output_spec_id: None,
            remove_dangling_deletes: false,
        };
        let num = |k: &str, v: &str| -> Result<u64> {
            v.trim().parse().map_err(|_| {
                Error::invalid(format!("rewrite option {k}='{v}' is not a whole number"))
            })
        };
        let flag = |k: &str, v: &str| -> Result<bool> {
            v.trim().parse().map_err(|_| {
                Error::invalid(format!("rewrite option {k}='{v}': expected true or false"))
            })
        };
        let (mut min, mut max) = (None, None);
        for (k, v) in options {
            match k.as_str() {
                "target-file-size-bytes" => o.target_file_size_bytes = num(k, v)?,
                "min-file-size-bytes" => min = Some(num(k, v)?),
                "max-file-size-bytes" => max = Some(num(k, v)?),
                "min-input-files" => o.min_input_files = num(k, v)? as usize,
                "rewrite-all" => o.rewrite_all = flag(k, v)?,
                "delete-file-threshold" => o.delete_file_threshold = num(k, v)? as usize,
                "delete-ratio-threshold" => {
                    o.delete_ratio_threshold = v.trim().parse().map_err(|_| {
                        Error::invalid(format!("rewrite option {k}='{v}' is not a number"))
                    })?
                }
                "max-file-group-size-bytes" => o.max_file_group_size_bytes = num(k, v)?,
                "max-concurrent-file-group-rewrites" => {
                    o.max_concurrent_file_group_rewrites = num(k, v)?.max(1) as usize
                }
                "use-starting-sequence-number" => o.use_starting_sequence_number = flag(k, v)?,
                "partial-progress.enabled" => o.partial_progress_enabled = flag(k, v)?,
                "partial-progress.max-commits" => {
                    o.partial_progress_max_commits = num(k, v)?.max(1) as usize
                }
                "rewrite-job-order" => o.rewrite_job_order = RewriteJobOrder::parse(v)?,
                "max-files-to-rewrite" => {
                    let n = num(k, v)?;
                    if n == 0 {
                        return Err(Error::invalid(
                            "rewrite option max-files-to-rewrite must be a positive whole number",
                        ));
                    }
                    o.max_files_to_rewrite = Some(n as usize);
                }
                "output-spec-id" => {
                    o.output_spec_id = Some(v.trim().parse().map_err(|_| {
                        Error::invalid(format!(
                            "rewrite option {k}='{v}' is not a partition spec id (a whole number)"
                        ))
                    })?)
                }
                "remove-dangling-deletes" => o.remove_dangling_deletes = flag(k, v)?,
                _ => {
                    return Err(Error::invalid(format!(
                        "unknown rewrite option '{k}'; known: target-file-size-bytes, min-file-size-bytes, \
                         max-file-size-bytes, min-input-files, rewrite-all, delete-file-threshold, \
                         delete-ratio-threshold, max-file-group-size-bytes, max-concurrent-file-group-rewrites, \
                         use-starting-sequence-number, partial-progress.enabled, partial-progress.max-commits, \
                         rewrite-job-order, max-files-to-rewrite, output-spec-id, remove-dangling-deletes"
                    )))
                }
            }
        }
        o.min_file_size_bytes = min.unwrap_or(o.target_file_size_bytes * 3 / 4);
        o.max_file_size_bytes = max.unwrap_or(o.target_file_size_bytes * 18 / 10);
        if o.min_file_size_bytes > o.target_file_size_bytes
            || o.target_file_size_bytes > o.max_file_size_bytes
        {
            return Err(Error::invalid(format!(
                "rewrite options need min-file-size-bytes ({}) <= target-file-size-bytes ({}) <= max-file-size-bytes ({})",
                o.min_file_size_bytes, o.target_file_size_bytes, o.max_file_size_bytes
            )));
        }
        Ok(o)
    }
}

/// Files of one partition rewritten together (indexes into the planned files).
#[derive(Debug, Clone, PartialEq)]
pub struct FileGroup {
    /// Indexes of the files in the scan plan.
    pub files: Vec<usize>,
    /// Their total size.
    pub bytes: u64,
}

/// Rows deleted from a file by its file-scoped deletes, where known.
fn deleted_rows(f: &PlannedFile) -> u64 {
    f.deletes
        .iter()
        .filter(|d| {
            d.file.content_type() == DataContentType::PositionDeletes
                && crate::scan::is_file_scoped(&d.file)
        })
        .map(|d| d.file.record_count())
        .sum()
}

/// Plans the groups to rewrite from the data files of a scan plan, in the order of
/// `rewrite-job-order`. Files are grouped by partition of the table's current spec
/// (`current_spec`); files of any other spec may hold rows of many of its partitions, so
/// they are grouped as one partition whose values are all null (as Iceberg Java's planner
/// does), and one pass lays them out in the current spec.
pub(super) fn plan_groups(
    files: &[PlannedFile],
    current_spec: &PartitionSpec,
    o: &RewriteOptions,
) -> Vec<FileGroup> {
    let candidate = |f: &PlannedFile| {
        let size = f.file.file_size_in_bytes();
        o.rewrite_all
            || size < o.min_file_size_bytes
            || size > o.max_file_size_bytes
            || f.deletes.len() >= o.delete_file_threshold
            || (f.file.record_count() > 0
                && deleted_rows(f) as f64 / f.file.record_count() as f64
                    >= o.delete_ratio_threshold)
    };
    let other_spec = Struct::from_iter(current_spec.fields().iter().map(|_| None::<Literal>));
    let mut by_partition: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        if candidate(f) {
            let partition = if f.spec.spec_id() == current_spec.spec_id() {
                &f.partition
            } else {
                &other_spec
            };
            by_partition
                .entry(format!("{partition:?}"))
                .or_default()
                .push(i);
        }
    }
    let mut out = Vec::new();
    for (_, mut idx) in by_partition {
        // Largest first, packed into groups of at most max-file-group-size-bytes.
        idx.sort_by_key(|i| std::cmp::Reverse(files[*i].file.file_size_in_bytes()));
        let mut groups: Vec<FileGroup> = Vec::new();
        for i in idx {
            let size = files[i].file.file_size_in_bytes();
            match groups
                .iter_mut()
                .find(|g| g.bytes + size <= o.max_file_group_size_bytes)
            {
                Some(g) => {
                    g.files.push(i);
                    g.bytes += size;
                }
                None => groups.push(FileGroup {
                    files: vec![i],
                    bytes: size,
                }),
            }
        }
        for g in groups {
            let any = |p: &dyn Fn(&PlannedFile) -> bool| g.files.iter().any(|i| p(&files[*i]));
            let rewrite = o.rewrite_all
                || g.files.len() >= o.min_input_files
                || (g.files.len() > 1 && g.bytes > o.target_file_size_bytes)
                || g.bytes > o.max_file_group_size_bytes
                || any(&|f| f.file.file_size_in_bytes() > o.max_file_size_bytes)
                || any(&|f| {
                    f.deletes.len() >= o.delete_file_threshold
                        || (f.file.record_count() > 0
                            && deleted_rows(f) as f64 / f.file.record_count() as f64
                                >= o.delete_ratio_threshold)
                });
            if rewrite {
                out.push(g);
            }
        }
    }
    if let Some(max) = o.max_files_to_rewrite {
        let mut left = max;
        out.retain_mut(|g| {
            g.files.truncate(left);
            left -= g.files.len();
            !g.files.is_empty()
        });
        for g in &mut out {
            g.bytes = g
                .files
                .iter()
                .map(|i| files[*i].file.file_size_in_bytes())
                .sum();
        }
    }
    o.rewrite_job_order.sort(&mut out);
    out
}

/// What a rewrite removes: the data files `rewritten` and the delete files only they use
/// (file-scoped position deletes and deletion vectors), with how many delete files that is.
pub(super) fn removed_with_their_deletes<'a>(
    rewritten: impl IntoIterator<Item = &'a PlannedFile>,
) -> (Vec<FileKey>, usize) {
    let mut removed: Vec<FileKey> = Vec::new();
    let mut seen = HashSet::new();
    for f in rewritten {
        removed.push(FileKey::of(&f.file));
        for d in &f.deletes {
            if d.file.content_type() == DataContentType::PositionDeletes
                && crate::scan::is_file_scoped(&d.file)
                && seen.insert(FileKey::of(&d.file))
            {
                removed.push(FileKey::of(&d.file));
            }
        }
    }
    let deletes = seen.len();
    (removed, deletes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_defaults_and_errors() {
        let o = RewriteOptions::parse(100, &HashMap::new()).unwrap();
        assert_eq!((o.min_file_size_bytes, o.max_file_size_bytes), (75, 180));
        assert_eq!(o.min_input_files, 5);
        let bad: HashMap<String, String> = [("nope".to_string(), "1".to_string())].into();
        assert!(RewriteOptions::parse(100, &bad)
            .unwrap_err()
            .to_string()
            .contains("nope"));
        let bad: HashMap<String, String> =
            [("min-file-size-bytes".to_string(), "500".to_string())].into();
        assert!(RewriteOptions::parse(100, &bad).is_err());
    }

    fn opts(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A planned data file of `size` bytes in identity partition `p` of spec 1.
    fn planned(p: i32, size: u64) -> PlannedFile {
        planned_in(1, p, size)
    }

    /// A planned data file of `size` bytes in identity partition `p` of spec `spec_id`.
    fn planned_in(spec_id: i32, p: i32, size: u64) -> PlannedFile {
        use iceberg::spec::{
            DataFileBuilder, DataFileFormat, Literal, NestedField, PartitionSpec, PrimitiveType,
            Schema, Struct, Transform, Type,
        };
        let schema = Schema::builder()
            .with_fields(vec![NestedField::required(
                1,
                "p",
                Type::Primitive(PrimitiveType::Int),
            )
            .into()])
            .build()
            .unwrap();
        let spec = PartitionSpec::builder(schema)
            .with_spec_id(spec_id)
            .add_partition_field("p", "p", Transform::Identity)
            .unwrap()
            .build()
            .unwrap();
        let partition = Struct::from_iter([Some(Literal::int(p))]);
        let file = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(format!("/t/p{p}-{size}-{}.parquet", uuid::Uuid::new_v4()))
            .file_format(DataFileFormat::Parquet)
            .partition(partition.clone())
            .partition_spec_id(spec_id)
            .record_count(10)
            .file_size_in_bytes(size)
            .build()
            .unwrap();
        PlannedFile {
            file,
            spec: std::sync::Arc::new(spec),
            partition,
            sequence_number: 1,
            deletes: vec![],
            first_row_id: None,
        }
    }

    #[test]
    fn files_of_other_specs_are_one_group() {
        // Spec 0 (old) files in 3 partitions, spec 1 (current) files in 2: the old files
        // form one group (as Iceberg Java's planner), the current ones one per partition.
        let mut files: Vec<PlannedFile> = (0..9).map(|i| planned_in(0, i % 3, 10)).collect();
        files.extend([planned(1, 10), planned(1, 10), planned(2, 10)]);
        let current = files[9].spec.clone();
        let o = RewriteOptions::parse(100, &opts(&[("rewrite-all", "true")])).unwrap();
        let mut groups: Vec<Vec<usize>> = plan_groups(&files, &current, &o)
            .into_iter()
            .map(|g| {
                let mut f = g.files;
                f.sort_unstable();
                f
            })
            .collect();
        groups.sort();
        assert_eq!(
            groups,
            vec![(0..9).collect::<Vec<_>>(), vec![9, 10], vec![11]]
        );
        // An unpartitioned current spec: every file is in its one partition.
        let unpartitioned = std::sync::Arc::new(
            iceberg::spec::PartitionSpec::builder(
                iceberg::spec::Schema::builder().build().unwrap(),
            )
            .with_spec_id(2)
            .build()
            .unwrap(),
        );
        let groups = plan_groups(&files, &unpartitioned, &o);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].files.len(), 12);
    }

    #[test]
    fn rewrite_job_order_sorts_groups_across_partitions() {
        // Partition 1: 3 files, 30 bytes; partition 2: 1 file, 50 bytes; partition 3: 2 files,
        // 10 bytes. Planned (none) in partition order.
        let files = vec![
            planned(1, 10),
            planned(2, 50),
            planned(1, 10),
            planned(3, 5),
            planned(1, 10),
            planned(3, 5),
        ];
        let order = |value: Option<&str>| -> Vec<(usize, u64)> {
            let mut kv = vec![("rewrite-all", "true")];
            if let Some(v) = value {
                kv.push(("rewrite-job-order", v));
            }
            let o = RewriteOptions::parse(100, &opts(&kv)).unwrap();
            plan_groups(&files, &files[0].spec, &o)
                .iter()
                .map(|g| (g.files.len(), g.bytes))
                .collect()
        };
        let planned_order = vec![(3, 30), (1, 50), (2, 10)];
        assert_eq!(order(None), planned_order);
        assert_eq!(order(Some("none")), planned_order);
        assert_eq!(order(Some("bytes-asc")), vec![(2, 10), (3, 30), (1, 50)]);
        assert_eq!(order(Some("bytes-desc")), vec![(1, 50), (3, 30), (2, 10)]);
        assert_eq!(order(Some("files-asc")), vec![(1, 50), (2, 10), (3, 30)]);
        assert_eq!(order(Some("files-desc")), vec![(3, 30), (2, 10), (1, 50)]);
        // Iceberg's spelling variants.
        assert_eq!(order(Some("BYTES_DESC")), vec![(1, 50), (3, 30), (2, 10)]);
        // max-files-to-rewrite: groups in plan order, the last cut short, then the job order.
        let capped = |n: &str, job: &str| -> Vec<(usize, u64)> {
            let kv = [
                ("rewrite-all", "true"),
                ("max-files-to-rewrite", n),
                ("rewrite-job-order", job),
            ];
            let o = RewriteOptions::parse(100, &opts(&kv)).unwrap();
            plan_groups(&files, &files[0].spec, &o)
                .iter()
                .map(|g| (g.files.len(), g.bytes))
                .collect()
        };
        assert_eq!(capped("2", "none"), vec![(2, 20)]);
        assert_eq!(capped("4", "none"), vec![(3, 30), (1, 50)]);
        assert_eq!(capped("5", "bytes-asc"), vec![(1, 5), (3, 30), (1, 50)]);
        assert_eq!(capped("99", "none"), planned_order);
        assert!(RewriteOptions::parse(100, &opts(&[("max-files-to-rewrite", "0")])).is_err());
        // Ties keep the planned order.
        let mut tied = vec![
            FileGroup {
                files: vec![0],
                bytes: 7,
            },
            FileGroup {
                files: vec![1],
                bytes: 7,
            },
        ];
        RewriteJobOrder::BytesDesc.sort(&mut tied);
        assert_eq!(tied[0].files, vec![0]);
        let err = RewriteOptions::parse(100, &opts(&[("rewrite-job-order", "biggest")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("biggest")
                && err.contains("none, bytes-asc, bytes-desc, files-asc, files-desc"),
            "{err}"
        );
    }

    #[test]
    fn output_spec_id_and_remove_dangling_deletes_options() {
        let o = RewriteOptions::parse(100, &HashMap::new()).unwrap();
        assert_eq!(o.output_spec_id, None);
        assert!(!o.remove_dangling_deletes);
        assert_eq!(o.rewrite_job_order, RewriteJobOrder::None);
        let o = RewriteOptions::parse(
            100,
            &opts(&[
                ("output-spec-id", " 3 "),
                ("remove-dangling-deletes", "true"),
            ]),
        )
        .unwrap();
        assert_eq!(o.output_spec_id, Some(3));
        assert!(o.remove_dangling_deletes);
        for bad in [
            ("output-spec-id", "new"),
            ("remove-dangling-deletes", "yes"),
        ] {
            let err = RewriteOptions::parse(100, &opts(&[bad]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(bad.0) && err.contains(bad.1), "{err}");
        }
    }
}
