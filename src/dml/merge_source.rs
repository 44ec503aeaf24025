//! A MERGE source: its rows read batch by batch, keyed by the ON columns, and — when every
//! partition source column of the table is an ON key — split by the table's partitions, so
//! that each partition of the target meets only the source rows that can match it.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::row::{RowConverter, SortField};
use arrow_array::{Array, ArrayRef, Int32Array, Int64Array, RecordBatch, UInt32Array};
use arrow_schema::{DataType, SchemaRef as ArrowSchemaRef};
use iceberg::expr::{Predicate, Reference};
use iceberg::spec::Datum;

use crate::error::{Error, Result};
use crate::expr::cast_to;
use crate::spec::Struct;
use crate::table::Table;
use crate::write::{PartitionSpill, Partitioner};

/// The rows of a MERGE source, read one batch at a time (a `Vec` of batches converts).
pub struct SourceRows(Box<dyn Iterator<Item = Result<RecordBatch>> + Send>);

impl SourceRows {
    /// Source rows from any iterator of batches (read as the MERGE needs them).
    pub fn new(batches: impl Iterator<Item = Result<RecordBatch>> + Send + 'static) -> Self {
        Self(Box::new(batches))
    }
}

impl From<Vec<RecordBatch>> for SourceRows {
    fn from(batches: Vec<RecordBatch>) -> Self {
        Self::new(batches.into_iter().map(Ok))
    }
}

impl Iterator for SourceRows {
    type Item = Result<RecordBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }
}

/// The ON key columns of the source, cast to the target's key types and encoded for lookup.
pub(super) struct SourceKeys {
    /// Source column of each ON pair.
    pub columns: Vec<usize>,
    /// The target key column's type of each ON pair.
    pub types: Vec<DataType>,
    pub converter: RowConverter,
}

impl SourceKeys {
    pub(super) fn new(columns: Vec<usize>, types: Vec<DataType>) -> Result<Self> {
        let converter =
            RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect())?;
        Ok(Self {
            columns,
            types,
            converter,
        })
    }

    /// A source batch's key columns cast to the target's key types.
    pub(super) fn cast(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.cast_columns(batch, &self.columns)
    }

    /// `batch`'s columns `columns` (one per ON pair) cast to the target's key types.
    pub(super) fn cast_columns(
        &self,
        batch: &RecordBatch,
        columns: &[usize],
    ) -> Result<Vec<ArrayRef>> {
        columns
            .iter()
            .zip(&self.types)
            .map(|(i, t)| cast_to(batch.column(*i), t))
            .collect()
    }
}

/// Source rows with an index from encoded key to row (`NULL` keys are not indexed: they
/// match nothing) and which rows some target row matched.
pub(super) struct SourceSet {
    pub rows: RecordBatch,
    /// Encoded key → first source row holding it.
    pub index: HashMap<Box<[u8]>, u32>,
    /// The other source rows of a key held by several.
    pub dups: HashMap<u32, Vec<u32>>,
    pub matched: Vec<bool>,
}

impl SourceSet {
    pub(super) fn new(rows: RecordBatch, keys: &SourceKeys) -> Result<Self> {
        let cols = keys.cast(&rows)?;
        let encoded = keys.converter.convert_columns(&cols)?;
        let mut index: HashMap<Box<[u8]>, u32> = HashMap::with_capacity(rows.num_rows());
        let mut dups: HashMap<u32, Vec<u32>> = HashMap::new();
        for (r, row) in encoded.iter().enumerate() {
            if !cols.iter().all(|c| c.is_valid(r)) {
                continue;
            }
            match index.entry(row.as_ref().into()) {
                std::collections::hash_map::Entry::Occupied(e) => {
                    dups.entry(*e.get()).or_default().push(r as u32)
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(r as u32);
                }
            }
        }
        Ok(Self {
            matched: vec![false; rows.num_rows()],
            rows,
            index,
            dups,
        })
    }

    /// Rows without an index (none can be matched any more).
    pub(super) fn unindexed(rows: RecordBatch) -> Self {
        Self {
            matched: vec![false; rows.num_rows()],
            rows,
            index: HashMap::new(),
            dups: HashMap::new(),
        }
    }

    /// The rows no target row matched.
    pub(super) fn unmatched(&self) -> UInt32Array {
        (0..self.rows.num_rows() as u32)
            .filter(|i| !self.matched[*i as usize])
            .collect()
    }
}

/// The smallest and largest value of the first key, when it is an integer: target files
/// outside that range cannot hold a matching row.
pub(super) struct KeyRange {
    bounds: Option<(i64, i64)>,
    int: bool,
    usable: bool,
}

impl KeyRange {
    fn new() -> Self {
        Self {
            bounds: None,
            int: false,
            usable: true,
        }
    }

    fn add(&mut self, first_key: &ArrayRef) {
        let (lo, hi, int) = if let Some(a) = first_key.as_any().downcast_ref::<Int64Array>() {
            match (arrow::compute::min(a), arrow::compute::max(a)) {
                (Some(lo), Some(hi)) => (lo, hi, false),
                _ => return,
            }
        } else if let Some(a) = first_key.as_any().downcast_ref::<Int32Array>() {
            match (arrow::compute::min(a), arrow::compute::max(a)) {
                (Some(lo), Some(hi)) => (lo as i64, hi as i64, true),
                _ => return,
            }
        } else {
            self.usable = false;
            return;
        };
        self.int = int;
        self.bounds = Some(match self.bounds {
            Some((l, h)) => (l.min(lo), h.max(hi)),
            None => (lo, hi),
        });
    }

    /// `key BETWEEN min AND max` on the target's first key column `name`.
    pub(super) fn predicate(&self, name: &str) -> Option<Predicate> {
        let (lo, hi) = self.bounds.filter(|_| self.usable)?;
        let datum = |v: i64| match self.int {
            true => Datum::int(v as i32),
            false => Datum::long(v),
        };
        Some(
            Reference::new(name)
                .greater_than_or_equal_to(datum(lo))
                .and(Reference::new(name).less_than_or_equal_to(datum(hi))),
        )
    }
}

/// The source read: whole, or split by the table's partitions.
pub(super) enum ReadSource {
    Whole(RecordBatch),
    Aligned(Box<Aligned>),
}

/// A source split by the table's default partition spec, taken out partition by partition.
pub(super) struct Aligned {
    spill: PartitionSpill,
    splitter: KeyPartitioner,
    /// Partitions already taken out.
    taken: Vec<bool>,
    next_new: usize,
    pub alignment: crate::txn::Alignment,
}

impl Aligned {
    /// The source rows of `partition`, if it has any (each partition is taken once).
    pub(super) fn take(&mut self, partition: &Struct) -> Result<Option<RecordBatch>> {
        let Some(i) = self.spill.find(partition) else {
            return Ok(None);
        };
        if std::mem::replace(&mut self.taken[i], true) {
            return Err(Error::io("a MERGE source partition was read twice"));
        }
        Ok(Some(self.spill.take(i)?))
    }

    /// The next partition not taken yet (rows no target file of its partition can match).
    pub(super) fn next_untaken(&mut self) -> Result<Option<RecordBatch>> {
        while self.next_new < self.taken.len() {
            let i = self.next_new;
            self.next_new += 1;
            if !std::mem::replace(&mut self.taken[i], true) {
                return Ok(Some(self.spill.take(i)?));
            }
        }
        Ok(None)
    }

    /// Checks that target rows of partition `partition` (their ON key columns `target_keys`,
    /// cast to the key types, the first row checked) fall in that partition as the source's
    /// rows are split: a file whose partition values differ from what its keys give (written
    /// wrongly, or spelled differently) would otherwise meet none of its keys' source rows.
    pub(super) fn check_partition(
        &self,
        partition: &Struct,
        target_keys: &[ArrayRef],
    ) -> Result<()> {
        if target_keys.first().is_none_or(|k| k.is_empty()) {
            return Ok(());
        }
        let first: Vec<ArrayRef> = target_keys.iter().map(|k| k.slice(0, 1)).collect();
        let got = self.splitter.partition_of(&first)?;
        if &got != partition {
            return Err(Error::corrupt(format!(
                "a target row of partition {partition:?} has ON key values of partition {got:?}; \
                 the MERGE cannot align source and target (set {}=false to merge in one pass)",
                crate::spec::MERGE_PARTITION_ALIGNED
            )));
        }
        Ok(())
    }

    /// Every partition not taken yet, as one batch.
    pub(super) fn take_rest(&mut self) -> Result<RecordBatch> {
        let mut rest = Vec::new();
        while let Some(b) = self.next_untaken()? {
            rest.push(b);
        }
        Ok(arrow_select::concat::concat_batches(
            self.spill.schema(),
            &rest,
        )?)
    }
}

/// Computes the table's partition of source rows from their ON key columns.
struct KeyPartitioner {
    partitioner: Partitioner,
    /// Arrow schema of the key batch the partitioner reads.
    schema: ArrowSchemaRef,
    /// Per key batch column: the ON pair it comes from.
    pairs: Vec<usize>,
}

impl KeyPartitioner {
    /// `Some` when the table's default spec is partitioned and each of its fields' source
    /// columns is the target side of an ON pair (`target_keys`: top-level target columns).
    fn new(table: &Table, target_keys: &[usize]) -> Result<Option<Self>> {
        let md = table.metadata();
        let spec = md.default_partition_spec();
        if spec.is_unpartitioned() {
            return Ok(None);
        }
        let top = md.current_schema().as_struct().fields();
        let mut fields = Vec::new();
        let mut pairs = Vec::new();
        for f in spec.fields() {
            let Some(pair) = target_keys
                .iter()
                .position(|k| top.get(*k).is_some_and(|t| t.id == f.source_id))
            else {
                return Ok(None);
            };
            if !pairs.contains(&pair) {
                pairs.push(pair);
                let mut field = top[target_keys[pair]].as_ref().clone();
                field.required = false;
                fields.push(Arc::new(field));
            }
        }
        let narrow = iceberg::spec::Schema::builder()
            .with_fields(fields)
            .build()?;
        let schema = Arc::new(crate::spec::arrow_schema(&narrow)?);
        Ok(Some(Self {
            partitioner: Partitioner::new(spec, Arc::new(narrow))?,
            schema,
            pairs,
        }))
    }

    /// The partition of the one row of `keys` (ON key columns, cast).
    fn partition_of(&self, keys: &[ArrayRef]) -> Result<Struct> {
        let cols = self.pairs.iter().map(|p| keys[*p].clone()).collect();
        let key_batch = RecordBatch::try_new(self.schema.clone(), cols)?;
        let groups = self.partitioner.groups(&key_batch)?;
        match groups.parts.first() {
            Some((key, _)) => Ok(key.data().clone()),
            None => Err(Error::io("no partition for a row")),
        }
    }

    /// `batch`'s rows per partition (`keys`: its ON key columns, cast).
    fn split(&self, batch: &RecordBatch, keys: &[ArrayRef]) -> Result<Vec<(Struct, RecordBatch)>> {
        let cols = self.pairs.iter().map(|p| keys[*p].clone()).collect();
        let key_batch = RecordBatch::try_new(self.schema.clone(), cols)?;
        let groups = self.partitioner.groups(&key_batch)?;
        let batch = match groups.order {
            None => batch.clone(),
            Some(order) => arrow_select::take::take_record_batch(batch, &UInt32Array::from(order))?,
        };
        Ok(groups
            .parts
            .into_iter()
            .map(|(key, r)| (key.data().clone(), batch.slice(r.start, r.len())))
            .collect())
    }
}

/// Reads the source: split by the table's partitions when the ON keys cover the partition
/// spec (and [`crate::spec::MERGE_PARTITION_ALIGNED`] is not `false`), else whole. Also returns the first key's
/// range.
pub(super) fn read_source(
    table: &Table,
    first: RecordBatch,
    rows: SourceRows,
    keys: &SourceKeys,
    target_keys: &[usize],
) -> Result<(ReadSource, KeyRange)> {
    let schema = first.schema();
    let props = table.properties()?;
    let (enabled, budget) = (
        props.merge_partition_aligned,
        props.merge_source_memory_bytes,
    );
    let splitter = match enabled {
        true => KeyPartitioner::new(table, target_keys)?,
        false => None,
    };
    let mut range = KeyRange::new();
    let mut whole = Vec::new();
    let mut spill = splitter
        .as_ref()
        .map(|_| PartitionSpill::new(schema.clone(), budget));
    for batch in std::iter::once(Ok(first)).chain(rows) {
        let batch = batch?;
        if batch.schema() != schema {
            return Err(Error::invalid(format!(
                "the source's batches differ in schema ({:?} after {:?}); give every batch the same columns",
                batch.schema(),
                schema
            )));
        }
        let cast = keys.cast(&batch)?;
        if let Some(k) = cast.first() {
            range.add(k);
        }
        match (&splitter, &mut spill) {
            (Some(s), Some(spill)) => {
                for (partition, rows) in s.split(&batch, &cast)? {
                    spill.push(&partition, rows)?;
                }
            }
            _ => whole.push(batch),
        }
    }
    let source = match (spill, splitter) {
        (Some(spill), Some(splitter)) => ReadSource::Aligned(Box::new(Aligned {
            splitter,
            taken: vec![false; spill.len()],
            next_new: 0,
            alignment: crate::txn::Alignment {
                source_partitions: spill.len() as u64,
                target_partitions_read: 0,
                spilled_bytes: spill.spilled_bytes,
            },
            spill,
        })),
        _ => ReadSource::Whole(arrow_select::concat::concat_batches(&schema, &whole)?),
    };
    Ok((source, range))
}
