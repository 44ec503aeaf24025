//! The current rows of a keyed table with a folding merge engine, held in memory by a
//! [`super::KeyedWriter`] between batches: key → the row's values and where it is stored
//! (data file, position). A batch then merges with the stored rows of its keys without
//! reading the table; the state is built by one read of the table and follows the writer's
//! own commits, and is rebuilt whenever anyone else changed the table.

use std::collections::HashMap;

use arrow::row::RowConverter;
use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use futures::StreamExt;
use roaring::RoaringTreemap;

use super::fold::KeyMap;
use super::index::duplicate_key;
use super::readback::read_back;
use crate::error::{Error, Result};
use crate::scan::{Scan, SnapshotSelector};
use crate::table::Table;

/// Where a key's row is: in the table (file id, position) and in memory (chunk, row).
#[derive(Debug, Clone, Copy)]
struct Slot {
    file: u32,
    pos: u64,
    chunk: u32,
    row: u32,
}

/// A key as the state holds it: a single integer key by value, others encoded as rows.
pub(crate) trait StateKey: std::hash::Hash + Eq + Clone + std::fmt::Debug {
    /// The keys of `cols` (the key columns, in key order).
    fn of(cols: &[ArrayRef], conv: &RowConverter) -> Result<Vec<Self>>;
}

impl StateKey for i64 {
    fn of(cols: &[ArrayRef], _: &RowConverter) -> Result<Vec<Self>> {
        let c = arrow_cast::cast(&cols[0], &arrow_schema::DataType::Int64)?;
        let c = c.as_primitive::<arrow_array::types::Int64Type>();
        Ok(c.values().to_vec())
    }
}

impl StateKey for Box<[u8]> {
    fn of(cols: &[ArrayRef], conv: &RowConverter) -> Result<Vec<Self>> {
        let rows = conv.convert_columns(cols)?;
        Ok(rows.iter().map(|r| r.as_ref().into()).collect())
    }
}

/// The state of a table: by integer key, or by encoded key.
#[derive(Debug)]
pub(crate) enum MergeState {
    Long(State<i64>),
    Rows(State<Box<[u8]>>),
}

macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            MergeState::Long($s) => $e,
            MergeState::Rows($s) => $e,
        }
    };
}

impl MergeState {
    /// Reads every live row of `table` (see [`State::build`]); a single integer key is held by
    /// value.
    pub(super) async fn build(
        table: &Table,
        schema: &SchemaRef,
        key: &[usize],
        conv: &RowConverter,
    ) -> Result<Self> {
        Ok(
            if key.len() == 1 && schema.field(key[0]).data_type().is_integer() {
                MergeState::Long(State::build(table, schema, key, conv).await?)
            } else {
                MergeState::Rows(State::build(table, schema, key, conv).await?)
            },
        )
    }

    /// See [`State::is_current`].
    pub(super) fn is_current(&self, table: &Table, schema: &SchemaRef) -> bool {
        each!(self, s => s.is_current(table, schema))
    }

    /// See [`State::stored`].
    pub(super) fn stored(
        &mut self,
        key_cols: &[ArrayRef],
        conv: &RowConverter,
    ) -> Result<(Vec<usize>, RecordBatch, HashMap<String, RoaringTreemap>)> {
        each!(self, s => s.stored(key_cols, conv))
    }

    /// The stored rows [`Self::stored`] found stay (the first-row engine keeps them).
    pub(super) fn keep_found(&mut self) {
        each!(self, s => s.gone.clear())
    }

    /// See [`State::follow`].
    pub(super) async fn follow(
        &mut self,
        table: &Table,
        conv: &RowConverter,
        written: &[RecordBatch],
        added: &[String],
    ) -> Result<()> {
        each!(self, s => s.follow(table, conv, written, added).await)
    }
}

/// The live rows of one state of a table, by key.
#[derive(Debug)]
pub(crate) struct State<K> {
    snapshot_id: Option<i64>,
    schema_id: i32,
    /// The rows' schema (the table's, relaxed).
    schema: SchemaRef,
    /// The key columns' positions in `schema`.
    key: Vec<usize>,
    files: Vec<String>,
    file_ids: HashMap<String, u32>,
    slots: KeyMap<K, Slot>,
    chunks: Vec<RecordBatch>,
    /// Rows held in `chunks` (live or not).
    held: usize,
    /// The keys whose stored rows the batch being applied removes.
    gone: Vec<K>,
}

impl<K: StateKey> State<K> {
    /// Reads every live row of `table` (conformed to `schema`; keys at `key`, encoded by
    /// `conv`).
    pub(super) async fn build(
        table: &Table,
        schema: &SchemaRef,
        key: &[usize],
        conv: &RowConverter,
    ) -> Result<Self> {
        let mut state = Self {
            snapshot_id: table.current_snapshot().map(|s| s.snapshot_id()),
            schema_id: table.metadata().current_schema_id(),
            schema: schema.clone(),
            key: key.to_vec(),
            files: Vec::new(),
            file_ids: HashMap::new(),
            slots: KeyMap::default(),
            chunks: Vec::new(),
            held: 0,
            gone: Vec::new(),
        };
        let Some(snapshot_id) = state.snapshot_id else {
            return Ok(state);
        };
        let scan = Scan::new(table)
            .snapshot(SnapshotSelector::Id(snapshot_id))
            .in_current_schema();
        let plan = scan.plan().await?;
        let ids: Vec<u32> = plan
            .files
            .iter()
            .map(|f| state.file_id(f.file.file_path()))
            .collect();
        let mut stream = scan.read_positioned(plan, true)?;
        while let Some(item) = stream.next().await {
            let (j, (batch, positions)) = item?;
            let positions = positions
                .ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
            let file = *ids
                .get(j)
                .ok_or_else(|| Error::io("the reader returned a file that was not planned"))?;
            let batch = state.conform(&batch)?;
            state.add_chunk(table, batch, conv, |r, _| Ok((file, positions.value(r))))?;
        }
        Ok(state)
    }

    /// Holds `batch` (the state's schema) as a new chunk, each row's key pointing at it and
    /// at where `stored_at(row, key)` says the row is stored.
    fn add_chunk(
        &mut self,
        table: &Table,
        batch: RecordBatch,
        conv: &RowConverter,
        stored_at: impl Fn(usize, &K) -> Result<(u32, u64)>,
    ) -> Result<()> {
        let keys = K::of(&self.key_columns(&batch), conv)?;
        let chunk = self.chunks.len() as u32;
        for (r, key) in keys.into_iter().enumerate() {
            let (file, pos) = stored_at(r, &key)?;
            let slot = Slot {
                file,
                pos,
                chunk,
                row: r as u32,
            };
            if self.slots.insert(key, slot).is_some() {
                return Err(duplicate_key(table));
            }
        }
        self.held += batch.num_rows();
        self.chunks.push(batch);
        Ok(())
    }

    fn key_columns(&self, batch: &RecordBatch) -> Vec<ArrayRef> {
        self.key.iter().map(|&k| batch.column(k).clone()).collect()
    }

    /// `batch`'s columns in the state's schema (by name; a missing column is null).
    fn conform(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let cols = self
            .schema
            .fields()
            .iter()
            .map(|f| match batch.column_by_name(f.name()) {
                Some(c) if c.data_type() == f.data_type() => Ok(c.clone()),
                Some(c) => Ok(arrow_cast::cast(c, f.data_type())?),
                None => Ok(arrow_array::new_null_array(f.data_type(), batch.num_rows())),
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }

    fn file_id(&mut self, path: &str) -> u32 {
        if let Some(id) = self.file_ids.get(path) {
            return *id;
        }
        let id = self.files.len() as u32;
        self.files.push(path.to_string());
        self.file_ids.insert(path.to_string(), id);
        id
    }

    /// Whether the state reflects `table` as it is now (and rows of `schema`).
    pub(super) fn is_current(&self, table: &Table, schema: &SchemaRef) -> bool {
        self.snapshot_id == table.current_snapshot().map(|s| s.snapshot_id())
            && self.schema_id == table.metadata().current_schema_id()
            && self.schema.fields() == schema.fields()
    }

    /// The stored rows of the keys in `key_cols` (distinct) that have one: their indices,
    /// the rows (in that order) and the positions they are stored at, per data file path.
    /// The keys found are remembered as removed by the batch.
    pub(super) fn stored(
        &mut self,
        key_cols: &[ArrayRef],
        conv: &RowConverter,
    ) -> Result<(Vec<usize>, RecordBatch, HashMap<String, RoaringTreemap>)> {
        let keys = K::of(key_cols, conv)?;
        self.gone.clear();
        let mut found = Vec::new();
        let mut at: Vec<(usize, usize)> = Vec::new();
        let mut removed: Vec<Vec<u64>> = vec![Vec::new(); self.files.len()];
        for (i, k) in keys.iter().enumerate() {
            if let Some(s) = self.slots.get(k) {
                self.gone.push(k.clone());
                found.push(i);
                at.push((s.chunk as usize, s.row as usize));
                removed[s.file as usize].push(s.pos);
            }
        }
        let chunks: Vec<&RecordBatch> = self.chunks.iter().collect();
        let rows = if at.is_empty() {
            RecordBatch::new_empty(self.schema.clone())
        } else {
            arrow_select::interleave::interleave_record_batch(&chunks, &at)?
        };
        let removed = removed
            .into_iter()
            .enumerate()
            .filter(|(_, p)| !p.is_empty())
            .map(|(f, mut p)| {
                p.sort_unstable();
                (self.files[f].clone(), p.into_iter().collect())
            })
            .collect();
        Ok((found, rows, removed))
    }

    /// Follows the commit of a batch that removed the stored rows [`Self::stored`] found
    /// and wrote `written` (rows of the state's schema, unique keys) into data files
    /// `added`, leaving `table`.
    pub(super) async fn follow(
        &mut self,
        table: &Table,
        conv: &RowConverter,
        written: &[RecordBatch],
        added: &[String],
    ) -> Result<()> {
        for k in std::mem::take(&mut self.gone) {
            self.slots.remove(&k);
        }
        // Where each written key landed: the key columns of the added files, read back.
        let names: Vec<String> = self
            .key
            .iter()
            .map(|&k| self.schema.field(k).name().clone())
            .collect();
        let mut landed: KeyMap<K, (u32, u64)> = KeyMap::default();
        for path in added {
            let file = self.file_id(path);
            let mut next = 0u64;
            for b in read_back(table, path, &names).await? {
                let keys = K::of(&self.conform_keys(&b, &names)?, conv)?;
                let n = keys.len() as u64;
                for (r, k) in keys.into_iter().enumerate() {
                    landed.insert(k, (file, next + r as u64));
                }
                next += n;
            }
        }
        for batch in written {
            let batch = self.conform(batch)?;
            self.add_chunk(table, batch, conv, |_, key| {
                landed.get(key).copied().ok_or_else(|| {
                    Error::io("a written row was not found in the files the batch added")
                })
            })?;
        }
        self.snapshot_id = table.current_snapshot().map(|s| s.snapshot_id());
        self.schema_id = table.metadata().current_schema_id();
        if self.held > 2 * self.slots.len() + 100_000 {
            self.compact()?;
        }
        Ok(())
    }

    /// The key columns of a read-back batch (by name), in key order, as the state types them.
    fn conform_keys(&self, b: &RecordBatch, names: &[String]) -> Result<Vec<ArrayRef>> {
        self.key
            .iter()
            .zip(names)
            .map(|(&k, n)| {
                let c = b
                    .column_by_name(n)
                    .ok_or_else(|| Error::io(format!("reading back: no key column '{n}'")))?;
                let t = self.schema.field(k).data_type();
                Ok(if c.data_type() == t {
                    c.clone()
                } else {
                    arrow_cast::cast(c, t)?
                })
            })
            .collect()
    }

    /// Drops the rows no key points at any more (one chunk of the live rows).
    fn compact(&mut self) -> Result<()> {
        let mut live: Vec<(K, Slot)> = self.slots.drain().collect();
        live.sort_unstable_by_key(|(_, s)| (s.chunk, s.row));
        let at: Vec<(usize, usize)> = live
            .iter()
            .map(|(_, s)| (s.chunk as usize, s.row as usize))
            .collect();
        let chunks: Vec<&RecordBatch> = self.chunks.iter().collect();
        let one = if at.is_empty() {
            RecordBatch::new_empty(self.schema.clone())
        } else {
            arrow_select::interleave::interleave_record_batch(&chunks, &at)?
        };
        for (r, (k, mut s)) in live.into_iter().enumerate() {
            s.chunk = 0;
            s.row = r as u32;
            self.slots.insert(k, s);
        }
        self.held = one.num_rows();
        self.chunks = vec![one];
        Ok(())
    }
}
