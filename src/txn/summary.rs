//! Snapshot summaries as Iceberg Java writes them (`added-*`, `removed-*`, `total-*`). Pure.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::spec::{DataContentType, DataFile};

/// Counts for one snapshot's changes.
#[derive(Debug, Default, Clone)]
#[non_exhaustive]
pub struct SummaryCounts {
    added_data_files: u64,
    added_delete_files: u64,
    added_records: u64,
    added_size: u64,
    added_pos_deletes: u64,
    added_eq_deletes: u64,
    added_pos_delete_files: u64,
    added_eq_delete_files: u64,
    added_dvs: u64,
    removed_data_files: u64,
    removed_delete_files: u64,
    removed_records: u64,
    removed_size: u64,
    removed_pos_deletes: u64,
    removed_eq_deletes: u64,
    removed_dvs: u64,
    partitions: HashSet<String>,
}

fn is_dv(f: &DataFile) -> bool {
    f.content_offset().is_some()
}

impl SummaryCounts {
    /// Records an added file.
    pub fn add(&mut self, f: &DataFile) {
        self.partitions.insert(format!("{:?}", f.partition()));
        self.added_size += f.file_size_in_bytes();
        match f.content_type() {
            DataContentType::Data => {
                self.added_data_files += 1;
                self.added_records += f.record_count();
            }
            DataContentType::PositionDeletes => {
                self.added_delete_files += 1;
                self.added_pos_deletes += f.record_count();
                if is_dv(f) {
                    self.added_dvs += 1
                } else {
                    self.added_pos_delete_files += 1
                }
            }
            DataContentType::EqualityDeletes => {
                self.added_delete_files += 1;
                self.added_eq_delete_files += 1;
                self.added_eq_deletes += f.record_count();
            }
        }
    }

    /// Records a removed file.
    pub fn remove(&mut self, f: &DataFile) {
        self.partitions.insert(format!("{:?}", f.partition()));
        self.removed_size += f.file_size_in_bytes();
        match f.content_type() {
            DataContentType::Data => {
                self.removed_data_files += 1;
                self.removed_records += f.record_count();
            }
            DataContentType::PositionDeletes => {
                self.removed_delete_files += 1;
                self.removed_pos_deletes += f.record_count();
                if is_dv(f) {
                    self.removed_dvs += 1;
                }
            }
            DataContentType::EqualityDeletes => {
                self.removed_delete_files += 1;
                self.removed_eq_deletes += f.record_count();
            }
        }
    }

    /// The summary map, with `total-*` carried from the parent's summary.
    pub fn build(&self, parent: Option<&HashMap<String, String>>) -> HashMap<String, String> {
        let mut m = BTreeMap::new();
        let mut put = |k: &str, v: u64, always: bool| {
            if v > 0 || always {
                m.insert(k.to_string(), v.to_string());
            }
        };
        put("added-data-files", self.added_data_files, false);
        put("added-delete-files", self.added_delete_files, false);
        put(
            "added-position-delete-files",
            self.added_pos_delete_files,
            false,
        );
        put(
            "added-equality-delete-files",
            self.added_eq_delete_files,
            false,
        );
        put("added-dvs", self.added_dvs, false);
        put("added-records", self.added_records, false);
        put("added-files-size", self.added_size, false);
        put("added-position-deletes", self.added_pos_deletes, false);
        put("added-equality-deletes", self.added_eq_deletes, false);
        put("deleted-data-files", self.removed_data_files, false);
        put("removed-delete-files", self.removed_delete_files, false);
        put("removed-dvs", self.removed_dvs, false);
        put("deleted-records", self.removed_records, false);
        put("removed-files-size", self.removed_size, false);
        put("removed-position-deletes", self.removed_pos_deletes, false);
        put("removed-equality-deletes", self.removed_eq_deletes, false);
        put(
            "changed-partition-count",
            self.partitions.len() as u64,
            true,
        );
        let total = |k: &str, plus: u64, minus: u64| -> Option<u64> {
            let prev = match parent {
                None => 0,
                Some(p) => p.get(k)?.parse::<u64>().ok()?,
            };
            Some((prev + plus).saturating_sub(minus))
        };
        let totals = [
            (
                "total-records",
                total("total-records", self.added_records, self.removed_records),
            ),
            (
                "total-files-size",
                total("total-files-size", self.added_size, self.removed_size),
            ),
            (
                "total-data-files",
                total(
                    "total-data-files",
                    self.added_data_files,
                    self.removed_data_files,
                ),
            ),
            (
                "total-delete-files",
                total(
                    "total-delete-files",
                    self.added_delete_files,
                    self.removed_delete_files,
                ),
            ),
            (
                "total-position-deletes",
                total(
                    "total-position-deletes",
                    self.added_pos_deletes,
                    self.removed_pos_deletes,
                ),
            ),
            (
                "total-equality-deletes",
                total(
                    "total-equality-deletes",
                    self.added_eq_deletes,
                    self.removed_eq_deletes,
                ),
            ),
        ];
        for (k, v) in totals {
            if let Some(v) = v {
                m.insert(k.to_string(), v.to_string());
            }
        }
        m.into_iter().collect()
    }
}
