//! Which delete files apply to which data file, by the spec's scan-planning rules. Pure.
//!
//! * A deletion vector applies to the one data file it references.
//! * A position delete file applies to data files of the same partition whose data sequence
//!   number is ≤ its own; one with `referenced_data_file` only to that file, and one whose
//!   `file_path` bounds exclude a data file not to it.
//! * An equality delete file applies to data files whose data sequence number is strictly
//!   smaller than its own: in the same partition, or everywhere when its spec is unpartitioned.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{DataContentType, DataFileFormat, Datum, PartitionSpec, PrimitiveLiteral};

use crate::spec::reserved::FILE_PATH_FIELD_ID;
use crate::spec::{DataFile, Struct};

/// A live delete file of a snapshot.
#[derive(Debug, Clone)]
pub struct DeleteEntry {
    /// The delete file (shared: a plan hands each to every data file it applies to).
    pub file: Arc<DataFile>,
    /// Its partition spec.
    pub spec: Arc<PartitionSpec>,
    /// Its data sequence number.
    pub sequence_number: i64,
}

impl DeleteEntry {
    /// Whether this is a deletion vector (a blob in a Puffin file).
    pub fn is_dv(&self) -> bool {
        self.file.file_format() == DataFileFormat::Puffin
    }
}

/// Canonical form of a local or remote path for comparisons (`file:/x`, `file:///x` → `/x`).
pub(crate) fn canonical_path(p: &str) -> &str {
    if let Some(rest) = p.strip_prefix("file://") {
        rest
    } else if let Some(rest) = p.strip_prefix("file:") {
        rest
    } else {
        p
    }
}

/// Whether a position delete file concerns a single data file: it names it in
/// `referenced_data_file`, or its `file_path` bounds are one and the same path (Spark's v2
/// files), as Iceberg Java's `ContentFileUtil.isFileScoped` judges.
pub(crate) fn is_file_scoped(f: &DataFile) -> bool {
    if f.referenced_data_file().is_some() {
        return true;
    }
    match (
        f.lower_bounds().get(&FILE_PATH_FIELD_ID),
        f.upper_bounds().get(&FILE_PATH_FIELD_ID),
    ) {
        (Some(lo), Some(hi)) => lo == hi,
        _ => false,
    }
}

type PartitionKey = (i32, Struct);

/// Delete files of one snapshot, indexed for matching against its data files.
#[derive(Debug, Default)]
pub(super) struct DeleteIndex {
    entries: Vec<DeleteEntry>,
    by_file: HashMap<String, Vec<usize>>,
    pos_by_partition: HashMap<PartitionKey, Vec<usize>>,
    eq_global: Vec<usize>,
    eq_by_partition: HashMap<PartitionKey, Vec<usize>>,
}

impl DeleteIndex {
    /// Indexes the live delete files of a snapshot.
    pub(super) fn new(entries: Vec<DeleteEntry>) -> Self {
        let mut ix = DeleteIndex::default();
        for (i, e) in entries.iter().enumerate() {
            let part = (e.spec.spec_id(), e.file.partition().clone());
            match e.file.content_type() {
                DataContentType::PositionDeletes => match e.file.referenced_data_file() {
                    Some(r) => ix
                        .by_file
                        .entry(canonical_path(&r).to_string())
                        .or_default()
                        .push(i),
                    None => ix.pos_by_partition.entry(part).or_default().push(i),
                },
                DataContentType::EqualityDeletes => {
                    if e.spec.is_unpartitioned() {
                        ix.eq_global.push(i)
                    } else {
                        ix.eq_by_partition.entry(part).or_default().push(i)
                    }
                }
                DataContentType::Data => {}
            }
        }
        ix.entries = entries;
        ix
    }

    /// The delete files that apply to a data file.
    pub(super) fn for_data_file(
        &self,
        path: &str,
        sequence_number: i64,
        spec_id: i32,
        partition: &Struct,
    ) -> Vec<&DeleteEntry> {
        let path = canonical_path(path);
        let part = (spec_id, partition.clone());
        let mut out = Vec::new();
        let pos_applies = |e: &DeleteEntry| e.sequence_number >= sequence_number;
        for &i in self.by_file.get(path).into_iter().flatten() {
            if pos_applies(&self.entries[i]) {
                out.push(&self.entries[i]);
            }
        }
        for &i in self.pos_by_partition.get(&part).into_iter().flatten() {
            let e = &self.entries[i];
            if pos_applies(e) && path_in_bounds(&e.file, path) {
                out.push(e);
            }
        }
        let eq_applies = |e: &DeleteEntry| e.sequence_number > sequence_number;
        for &i in self
            .eq_global
            .iter()
            .chain(self.eq_by_partition.get(&part).into_iter().flatten())
        {
            if eq_applies(&self.entries[i]) {
                out.push(&self.entries[i]);
            }
        }
        out
    }
}

/// Whether a position delete file's `file_path` bounds admit `path` (true when unknown).
fn path_in_bounds(f: &DataFile, path: &str) -> bool {
    let bound = |m: &HashMap<i32, Datum>| match m.get(&FILE_PATH_FIELD_ID).map(|d| d.literal()) {
        Some(PrimitiveLiteral::String(s)) => Some(canonical_path(s).to_string()),
        _ => None,
    };
    // Bounds may be truncated prefixes: compare only that many bytes.
    let ok_lower = bound(f.lower_bounds()).is_none_or(|lo| {
        let n = lo.len().min(path.len());
        path.as_bytes()[..n] >= lo.as_bytes()[..n]
    });
    let ok_upper = bound(f.upper_bounds()).is_none_or(|hi| {
        let n = hi.len().min(path.len());
        path.as_bytes()[..n] <= hi.as_bytes()[..n]
    });
    ok_lower && ok_upper
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{DataFileBuilder, Literal, NestedField, PrimitiveType, Schema, Type};

    fn file(content: DataContentType, path: &str, referenced: Option<&str>, part: i32) -> DataFile {
        let mut b = DataFileBuilder::default();
        b.content(content)
            .file_path(path.to_string())
            .file_format(if path.ends_with(".puffin") {
                DataFileFormat::Puffin
            } else {
                DataFileFormat::Parquet
            })
            .partition(Struct::from_iter([Some(Literal::int(part))]))
            .record_count(1)
            .file_size_in_bytes(1)
            .partition_spec_id(1);
        if let Some(r) = referenced {
            b.referenced_data_file(Some(r.to_string()));
        }
        if content == DataContentType::EqualityDeletes {
            b.equality_ids(Some(vec![1]));
        }
        b.build().unwrap()
    }

    fn spec(partitioned: bool) -> Arc<PartitionSpec> {
        let schema = Schema::builder()
            .with_fields(vec![NestedField::required(
                1,
                "id",
                Type::Primitive(PrimitiveType::Int),
            )
            .into()])
            .build()
            .unwrap();
        let mut b = PartitionSpec::builder(schema).with_spec_id(if partitioned { 1 } else { 0 });
        if partitioned {
            b = b
                .add_partition_field("id", "id", iceberg::spec::Transform::Identity)
                .unwrap();
        }
        Arc::new(b.build().unwrap())
    }

    #[test]
    fn spec_rules() {
        let p = spec(true);
        let u = spec(false);
        let e = |f, s: &Arc<PartitionSpec>, seq| DeleteEntry {
            file: Arc::new(f),
            spec: s.clone(),
            sequence_number: seq,
        };
        let ix = DeleteIndex::new(vec![
            e(
                file(DataContentType::PositionDeletes, "/d/pos1.parquet", None, 1),
                &p,
                5,
            ),
            e(
                file(
                    DataContentType::PositionDeletes,
                    "/d/dv.puffin",
                    Some("file:/d/a.parquet"),
                    1,
                ),
                &p,
                5,
            ),
            e(
                file(DataContentType::EqualityDeletes, "/d/eq1.parquet", None, 1),
                &p,
                5,
            ),
            e(
                file(DataContentType::EqualityDeletes, "/d/eqg.parquet", None, 0),
                &u,
                5,
            ),
        ]);
        let part1 = Struct::from_iter([Some(Literal::int(1))]);
        let part2 = Struct::from_iter([Some(Literal::int(2))]);
        let names = |v: Vec<&DeleteEntry>| {
            let mut n: Vec<String> = v.iter().map(|e| e.file.file_path().to_string()).collect();
            n.sort();
            n
        };
        // Same sequence number: position deletes apply, equality deletes do not.
        assert_eq!(
            names(ix.for_data_file("/d/a.parquet", 5, 1, &part1)),
            vec!["/d/dv.puffin", "/d/pos1.parquet"]
        );
        // Older data: everything applies.
        assert_eq!(
            names(ix.for_data_file("/d/a.parquet", 4, 1, &part1)),
            vec![
                "/d/dv.puffin",
                "/d/eq1.parquet",
                "/d/eqg.parquet",
                "/d/pos1.parquet"
            ]
        );
        // Other partition: only the global equality delete; other file: no DV.
        assert_eq!(
            names(ix.for_data_file("/d/b.parquet", 4, 1, &part2)),
            vec!["/d/eqg.parquet"]
        );
        // Newer data: nothing.
        assert!(ix.for_data_file("/d/a.parquet", 6, 1, &part1).is_empty());
    }
}
