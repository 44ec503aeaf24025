//! `rewrite_data_files`' `remove-dangling-deletes`: after a rewrite, delete files that no
//! longer apply to any live data file are removed in one more `replace` commit, by the rules
//! of Iceberg Java's `RemoveDanglingDeletesSparkAction` (data sequence numbers per partition)
//! plus the scan-planning rules for deletes that name their data file:
//!
//! * a deletion vector or a file-scoped position delete file is dangling when the data file
//!   it references is not live;
//! * a position delete file is dangling when its partition (spec and values) has no live data
//!   file with a data sequence number ≤ its own;
//! * an equality delete file is dangling when its partition has no live data file with a data
//!   sequence number < its own; for a global one (unpartitioned spec) the whole table counts.

use std::collections::{HashMap, HashSet};

use iceberg::spec::Operation;

use crate::catalog::Catalog;
use crate::error::{Error, ErrorKind, Result};
use crate::scan::{canonical_path, is_file_scoped, DeleteEntry};
use crate::spec::reserved::FILE_PATH_FIELD_ID;
use crate::spec::{DataContentType, DataFile, Struct};
use crate::table::Table;
use crate::txn::{commit, FileKey, NoConcurrentCommit, SnapshotProducer};

/// A live data file, as far as dangling deletes care.
#[derive(Debug, Clone)]
pub(crate) struct LiveData {
    /// Canonical path.
    pub path: String,
    /// Partition spec id.
    pub spec_id: i32,
    /// Partition tuple.
    pub partition: Struct,
    /// Data sequence number.
    pub sequence_number: i64,
}

/// The path a file-scoped position delete file applies to (`None`: not file-scoped).
fn referenced_path(d: &DataFile) -> Option<String> {
    if !is_file_scoped(d) {
        return None;
    }
    if let Some(p) = d.referenced_data_file() {
        return Some(canonical_path(&p).to_string());
    }
    match d.lower_bounds().get(&FILE_PATH_FIELD_ID)?.literal() {
        iceberg::spec::PrimitiveLiteral::String(s) => Some(canonical_path(s).to_string()),
        _ => None,
    }
}

/// Indexes into `deletes` of the delete files that apply to none of `data`.
pub(crate) fn find_dangling(data: &[LiveData], deletes: &[DeleteEntry]) -> Vec<usize> {
    let mut min_by_partition: HashMap<(i32, &Struct), i64> = HashMap::new();
    let mut seq_by_path: HashMap<&str, i64> = HashMap::new();
    let mut global_min: Option<i64> = None;
    for f in data {
        let m = min_by_partition
            .entry((f.spec_id, &f.partition))
            .or_insert(f.sequence_number);
        *m = (*m).min(f.sequence_number);
        seq_by_path.insert(f.path.as_str(), f.sequence_number);
        global_min = Some(global_min.map_or(f.sequence_number, |g| g.min(f.sequence_number)));
    }
    let mut out = Vec::new();
    for (i, d) in deletes.iter().enumerate() {
        let seq = d.sequence_number;
        let min = min_by_partition
            .get(&(d.spec.spec_id(), d.file.partition()))
            .copied();
        let dangling = match d.file.content_type() {
            DataContentType::Data => false,
            DataContentType::PositionDeletes => match referenced_path(&d.file) {
                // Applies to that one file only, if it is live and not newer.
                Some(p) => seq_by_path.get(p.as_str()).is_none_or(|s| *s > seq),
                None => min.is_none_or(|m| seq < m),
            },
            DataContentType::EqualityDeletes => {
                let min = if d.spec.is_unpartitioned() {
                    global_min
                } else {
                    min
                };
                min.is_none_or(|m| seq <= m)
            }
        };
        if dangling {
            out.push(i);
        }
    }
    out
}

/// Removes the current snapshot's dangling delete files in one `replace` commit. Returns the
/// table after it and how many delete files were removed (0 and the table unchanged when
/// there were none, or when another commit came first: the next run removes them).
pub(crate) async fn remove_dangling_deletes(
    catalog: &Catalog,
    table: &Table,
) -> Result<(Table, usize)> {
    let Some(snap) = table.current_snapshot().cloned() else {
        return Ok((table.clone(), 0));
    };
    let md = table.metadata();
    let mut data = Vec::new();
    let mut deletes = Vec::new();
    for mf in table.manifest_list(&snap).await? {
        let spec = md
            .partition_spec_by_id(mf.partition_spec_id)
            .cloned()
            .ok_or_else(|| {
                Error::corrupt(format!(
                    "manifest '{}' of table {} names unknown partition spec {}",
                    mf.manifest_path,
                    table.name(),
                    mf.partition_spec_id
                ))
            })?;
        for e in table.load_manifest(&mf).await?.entries() {
            if !e.is_alive() {
                continue;
            }
            let f = e.data_file();
            let seq = e.sequence_number().unwrap_or(0);
            match f.content_type() {
                DataContentType::Data => data.push(LiveData {
                    path: canonical_path(f.file_path()).to_string(),
                    spec_id: spec.spec_id(),
                    partition: f.partition().clone(),
                    sequence_number: seq,
                }),
                _ => deletes.push(DeleteEntry {
                    file: std::sync::Arc::new(f.clone()),
                    spec: spec.clone(),
                    sequence_number: seq,
                }),
            }
        }
    }
    let dangling = find_dangling(&data, &deletes);
    if dangling.is_empty() {
        return Ok((table.clone(), 0));
    }
    let mut seen = HashSet::new();
    let removed: Vec<FileKey> = dangling
        .iter()
        .map(|i| FileKey::of(&deletes[*i].file))
        .filter(|k| seen.insert(k.clone()))
        .collect();
    let n = removed.len();
    let mut producer = SnapshotProducer::new(Operation::Replace, vec![]).remove_files(removed);
    // Anything committed after the snapshot the dangling deletes were found in may have
    // added data they apply to: Iceberg Java skips the removal then, and so does this.
    let unchanged = NoConcurrentCommit {
        table: table.name(),
    };
    match commit(catalog, table, &mut producer, &unchanged).await {
        Ok(t) => Ok((t, n)),
        Err(e) if e.kind() == ErrorKind::Conflict => Ok((table.clone(), 0)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use iceberg::spec::{
        DataFileBuilder, DataFileFormat, Literal, NestedField, PartitionSpec, PrimitiveType,
        Schema, Transform, Type,
    };

    use super::*;

    fn spec(partitioned: bool) -> Arc<PartitionSpec> {
        let schema = Schema::builder()
            .with_fields(vec![NestedField::required(
                1,
                "p",
                Type::Primitive(PrimitiveType::Int),
            )
            .into()])
            .build()
            .unwrap();
        let mut b = PartitionSpec::builder(schema).with_spec_id(if partitioned { 1 } else { 0 });
        if partitioned {
            b = b
                .add_partition_field("p", "p", Transform::Identity)
                .unwrap();
        }
        Arc::new(b.build().unwrap())
    }

    fn part(p: Option<i32>) -> Struct {
        match p {
            Some(p) => Struct::from_iter([Some(Literal::int(p))]),
            None => Struct::empty(),
        }
    }

    fn delete(
        content: DataContentType,
        name: &str,
        p: Option<i32>,
        referenced: Option<&str>,
        seq: i64,
    ) -> DeleteEntry {
        let mut b = DataFileBuilder::default();
        b.content(content)
            .file_path(format!("/t/{name}"))
            .file_format(if name.ends_with(".puffin") {
                DataFileFormat::Puffin
            } else {
                DataFileFormat::Parquet
            })
            .partition(part(p))
            .record_count(1)
            .file_size_in_bytes(1)
            .partition_spec_id(if p.is_some() { 1 } else { 0 });
        if let Some(r) = referenced {
            b.referenced_data_file(Some(format!("file:/t/{r}")));
        }
        if content == DataContentType::EqualityDeletes {
            b.equality_ids(Some(vec![1]));
        }
        DeleteEntry {
            file: std::sync::Arc::new(b.build().unwrap()),
            spec: spec(p.is_some()),
            sequence_number: seq,
        }
    }

    fn data(name: &str, p: Option<i32>, seq: i64) -> LiveData {
        LiveData {
            path: format!("/t/{name}"),
            spec_id: if p.is_some() { 1 } else { 0 },
            partition: part(p),
            sequence_number: seq,
        }
    }

    #[test]
    fn dangling_by_sequence_number_partition_and_reference() {
        use DataContentType::{EqualityDeletes as Eq, PositionDeletes as Pos};
        // Partition 1 holds data of sequence numbers 5 and 7, partition 2 of 3; nothing in
        // partition 9.
        let live = vec![
            data("a", Some(1), 5),
            data("b", Some(1), 7),
            data("c", Some(2), 3),
        ];
        let deletes = vec![
            delete(Pos, "pos-older", Some(1), None, 4), // 0: < 5: dangling
            delete(Pos, "pos-same", Some(1), None, 5),  // 1: = 5: applies to a
            delete(Eq, "eq-same", Some(1), None, 5),    // 2: ≤ 5: dangling
            delete(Eq, "eq-newer", Some(1), None, 6),   // 3: applies to a
            delete(Pos, "pos-empty", Some(9), None, 9), // 4: no data: dangling
            delete(Eq, "eq-empty", Some(9), None, 9),   // 5: no data: dangling
            delete(Pos, "dv.puffin", Some(1), Some("b"), 7), // 6: b is live
            delete(Pos, "dv2.puffin", Some(1), Some("x"), 9), // 7: x is gone: dangling
            delete(Pos, "scoped", Some(2), Some("c"), 2), // 8: c is newer: dangling
            delete(Eq, "eq-global", None, None, 4),     // 9: applies to c (3 < 4)
            delete(Eq, "eq-global-old", None, None, 3), // 10: dangling
        ];
        assert_eq!(find_dangling(&live, &deletes), vec![0, 2, 4, 5, 7, 8, 10]);
        // No live data at all: every delete file is dangling.
        assert_eq!(find_dangling(&[], &deletes).len(), deletes.len());
    }
}
