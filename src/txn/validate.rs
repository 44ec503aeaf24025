//! Conflict validation against the snapshots committed since an operation's base, as Iceberg
//! Java's `MergingSnapshotProducer` does it. Pure: the commit loop loads the changes.

use std::collections::HashSet;
use std::sync::Arc;

use iceberg::expr::BoundPredicate;
use iceberg::spec::{Operation, PartitionSpec};

use crate::error::{Error, ErrorKind, Result};
use crate::expr::{file_may_match, partition_matches};
use crate::scan::{canonical_path, PartitionFilters};
use crate::spec::{DataContentType, DataFile, IsolationLevel, Struct, TableMetadata};

/// A file a committed snapshot added or removed.
#[derive(Debug, Clone)]
pub(crate) struct ChangedFile {
    /// The file.
    pub file: DataFile,
    /// Its partition spec.
    pub spec: Arc<PartitionSpec>,
}

/// What one snapshot committed since the base changed.
#[derive(Debug, Clone)]
pub(crate) struct CommittedChange {
    /// The snapshot.
    pub snapshot_id: i64,
    /// Its operation.
    pub operation: Operation,
    /// Files it added (data and deletes).
    pub added: Vec<ChangedFile>,
    /// Files it removed.
    pub removed: Vec<ChangedFile>,
    /// It replaced the table's whole contents (a clone onto an existing table), without
    /// listing what it removed.
    pub replaced_table: bool,
}

impl CommittedChange {
    /// A committed snapshot without its files (for validations that do not look at them).
    pub(crate) fn of_snapshot(s: &crate::spec::Snapshot) -> Self {
        Self {
            snapshot_id: s.snapshot_id(),
            operation: s.summary().operation.clone(),
            added: vec![],
            removed: vec![],
            replaced_table: false,
        }
    }
}

/// Checks a staged change's preconditions against the snapshots committed since its base.
///
/// `since` are the changes of the snapshots on `main` after the operation's starting
/// snapshot, oldest first. Returning an error of kind [`ErrorKind::Conflict`] aborts the
/// commit (nothing is committed).
pub(crate) trait Validation: Send + Sync {
    /// Validates `since` (committed after the starting snapshot) in `current`.
    fn validate(&self, current: &TableMetadata, since: &[CommittedChange]) -> Result<()>;

    /// Whether [`Validation::validate`] looks at the changes (loading them costs I/O).
    fn needs_changes(&self) -> bool {
        true
    }
}

/// No preconditions (appends).
pub(crate) struct NoValidation;

impl Validation for NoValidation {
    fn validate(&self, _: &TableMetadata, _: &[CommittedChange]) -> Result<()> {
        Ok(())
    }
    fn needs_changes(&self) -> bool {
        false
    }
}

/// Nothing may be committed since the base: a change planned from the whole state of the
/// table (a keyed upsert: its lookups and tombstones) is planned again instead.
pub(crate) struct NoConcurrentCommit {
    /// The table, for messages.
    pub table: String,
}

impl Validation for NoConcurrentCommit {
    fn validate(&self, _: &TableMetadata, since: &[CommittedChange]) -> Result<()> {
        match since.first() {
            None => Ok(()),
            Some(c) => Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "table {} changed while the change was planned (snapshot {} was committed)",
                    self.table, c.snapshot_id
                ),
            )),
        }
    }
    fn needs_changes(&self) -> bool {
        false
    }
}

/// The preconditions of a row-level change (DELETE, UPDATE, MERGE, compaction):
/// * the data files it read and changed were not removed concurrently;
/// * no delete file added concurrently applies to them;
/// * under serializable isolation, no data file added concurrently may match its filter.
#[derive(Debug)]
pub(crate) struct RowLevelValidation {
    /// Isolation level.
    pub isolation: IsolationLevel,
    /// The rows the operation read (`None`: the whole table).
    pub conflict_filter: Option<BoundPredicate>,
    /// Data files the operation rewrote or added deletes for.
    pub touched: Vec<(DataFile, Arc<PartitionSpec>)>,
    /// Equality deletes added meanwhile are not a conflict (a compaction whose new files keep
    /// the starting sequence number stays under them).
    pub ignore_equality_deletes: bool,
    /// Table name, for messages.
    pub table: String,
}

fn conflict(msg: String) -> Error {
    Error::new(ErrorKind::Conflict, msg)
}

impl Validation for RowLevelValidation {
    fn validate(&self, current: &TableMetadata, since: &[CommittedChange]) -> Result<()> {
        let touched: HashSet<&str> = self
            .touched
            .iter()
            .map(|(f, _)| canonical_path(f.file_path()))
            .collect();
        let partitions: HashSet<(i32, &Struct)> = self
            .touched
            .iter()
            .map(|(f, s)| (s.spec_id(), f.partition()))
            .collect();
        let filters = PartitionFilters::new(
            self.conflict_filter.as_ref(),
            current.partition_specs_iter(),
        )?;
        for c in since {
            let sid = c.snapshot_id;
            if c.replaced_table {
                return Err(conflict(format!(
                    "table {}: snapshot {sid} replaced the table's contents (a clone); redo the operation on the new state",
                    self.table
                )));
            }
            for r in &c.removed {
                if r.file.content_type() == DataContentType::Data
                    && touched.contains(canonical_path(r.file.file_path()))
                {
                    return Err(conflict(format!(
                        "table {}: snapshot {sid}, a concurrent commit, removed data file '{}' that this operation changes; redo the operation",
                        self.table,
                        r.file.file_path()
                    )));
                }
            }
            let adds_deletes = matches!(c.operation, Operation::Overwrite | Operation::Delete);
            let adds_data = matches!(c.operation, Operation::Append | Operation::Overwrite);
            for a in &c.added {
                let f = &a.file;
                match f.content_type() {
                    DataContentType::Data => {
                        if !adds_data || self.isolation != IsolationLevel::Serializable {
                            continue;
                        }
                        let part_ok = filters
                            .get(a.spec.spec_id())
                            .is_none_or(|p| partition_matches(p, &a.spec, f.partition()));
                        let may = match &self.conflict_filter {
                            None => true,
                            Some(flt) => part_ok && file_may_match(flt, f),
                        };
                        if may {
                            return Err(conflict(format!(
                                "table {}: snapshot {sid} added data file '{}' that may hold rows this operation should have seen \
                                 (isolation level serializable); redo the operation",
                                self.table,
                                f.file_path()
                            )));
                        }
                    }
                    _ if !adds_deletes => {}
                    DataContentType::EqualityDeletes if self.ignore_equality_deletes => {}
                    content => {
                        let applies = match f.referenced_data_file() {
                            Some(r) => touched.contains(canonical_path(&r)),
                            None if content == DataContentType::EqualityDeletes
                                && a.spec.is_unpartitioned() =>
                            {
                                !touched.is_empty()
                            }
                            None => partitions.contains(&(a.spec.spec_id(), f.partition())),
                        };
                        if applies {
                            return Err(conflict(format!(
                                "table {}: snapshot {sid} added delete file '{}' for rows this operation changes; redo the operation",
                                self.table,
                                f.file_path()
                            )));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::expr::{Bind, Reference};
    use iceberg::spec::{
        DataFileBuilder, DataFileFormat, Datum, NestedField, PrimitiveType, Schema, Type,
    };

    fn schema() -> Arc<Schema> {
        Arc::new(
            Schema::builder()
                .with_fields(vec![NestedField::required(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )
                .into()])
                .build()
                .unwrap(),
        )
    }

    fn file(
        content: DataContentType,
        path: &str,
        referenced: Option<&str>,
        lo: i64,
        hi: i64,
    ) -> DataFile {
        let mut b = DataFileBuilder::default();
        b.content(content)
            .file_path(path.into())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .record_count(1)
            .file_size_in_bytes(1)
            .lower_bounds([(1, Datum::long(lo))].into())
            .upper_bounds([(1, Datum::long(hi))].into());
        if let Some(r) = referenced {
            b.referenced_data_file(Some(r.into()));
        }
        b.build().unwrap()
    }

    fn md() -> TableMetadata {
        let s = schema();
        iceberg::spec::TableMetadataBuilder::new(
            s.as_ref().clone(),
            iceberg::spec::PartitionSpec::unpartition_spec(),
            iceberg::spec::SortOrder::unsorted_order(),
            "/tmp/t".into(),
            iceberg::spec::FormatVersion::V2,
            Default::default(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }

    fn change(op: Operation, added: Vec<DataFile>, removed: Vec<DataFile>) -> CommittedChange {
        let spec = Arc::new(iceberg::spec::PartitionSpec::unpartition_spec());
        let wrap = |v: Vec<DataFile>| {
            v.into_iter()
                .map(|file| ChangedFile {
                    file,
                    spec: spec.clone(),
                })
                .collect()
        };
        CommittedChange {
            snapshot_id: 9,
            operation: op,
            added: wrap(added),
            removed: wrap(removed),
            replaced_table: false,
        }
    }

    fn validation(isolation: IsolationLevel) -> RowLevelValidation {
        let filter = Reference::new("id")
            .less_than(Datum::long(100))
            .bind(schema(), false)
            .unwrap();
        RowLevelValidation {
            isolation,
            conflict_filter: Some(filter),
            touched: vec![(
                file(DataContentType::Data, "/t/a.parquet", None, 0, 50),
                Arc::new(iceberg::spec::PartitionSpec::unpartition_spec()),
            )],
            ignore_equality_deletes: false,
            table: "db.t".into(),
        }
    }

    #[test]
    fn java_rules() {
        let md = md();
        let ser = validation(IsolationLevel::Serializable);
        let snap = validation(IsolationLevel::Snapshot);
        let is_conflict = |r: Result<()>| r.is_err_and(|e| e.kind() == ErrorKind::Conflict);
        // A concurrent append that may hold rows the filter selects.
        let add_match = [change(
            Operation::Append,
            vec![file(DataContentType::Data, "/t/b.parquet", None, 10, 20)],
            vec![],
        )];
        assert!(is_conflict(ser.validate(&md, &add_match)));
        // A clone replaced the table's contents: whatever this operation read is gone.
        let mut replaced = change(Operation::Overwrite, vec![], vec![]);
        replaced.replaced_table = true;
        assert!(is_conflict(snap.validate(&md, &[replaced])));
        assert!(snap.validate(&md, &add_match).is_ok());
        // One whose metrics rule the filter out.
        let add_other = [change(
            Operation::Append,
            vec![file(DataContentType::Data, "/t/c.parquet", None, 500, 600)],
            vec![],
        )];
        assert!(ser.validate(&md, &add_other).is_ok());
        // Compaction (replace) adding data is not a conflict by itself...
        let replace = [change(
            Operation::Replace,
            vec![file(DataContentType::Data, "/t/d.parquet", None, 0, 50)],
            vec![],
        )];
        assert!(ser.validate(&md, &replace).is_ok());
        // ...but removing a file this operation changed is, at every level.
        let removed = [change(
            Operation::Replace,
            vec![],
            vec![file(DataContentType::Data, "/t/a.parquet", None, 0, 50)],
        )];
        assert!(is_conflict(snap.validate(&md, &removed)));
        // A concurrent delete against the same data file conflicts at every level.
        let dv = [change(
            Operation::Delete,
            vec![file(
                DataContentType::PositionDeletes,
                "/t/x.puffin",
                Some("file:/t/a.parquet"),
                0,
                0,
            )],
            vec![],
        )];
        assert!(is_conflict(snap.validate(&md, &dv)));
        let other_dv = [change(
            Operation::Delete,
            vec![file(
                DataContentType::PositionDeletes,
                "/t/y.puffin",
                Some("/t/z.parquet"),
                0,
                0,
            )],
            vec![],
        )];
        assert!(ser.validate(&md, &other_dv).is_ok());
        // A global equality delete may hit any file.
        let eq = [change(
            Operation::Delete,
            vec![file(
                DataContentType::EqualityDeletes,
                "/t/eq.parquet",
                None,
                0,
                0,
            )],
            vec![],
        )];
        assert!(is_conflict(snap.validate(&md, &eq)));
    }
}
