//! An in-memory key index of a keyed table: key → (data file, position, version) of its live
//! row, and key → version of its tombstone, for one snapshot. A [`super::KeyedWriter`] keeps
//! it between batches, so a batch costs lookups of its own keys instead of a read of every
//! key of the table; it is rebuilt (one read of the key and version columns) whenever the
//! table was changed by anyone else.

use std::collections::HashMap;

use arrow::row::{RowConverter, Rows};
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use futures::StreamExt;
use roaring::RoaringTreemap;

use super::fold::{versions_of, Columns, KeyMap};
use super::longmap::{BulkLoad, Loc, LongMap, MAX_FILES, MAX_POS};
use super::readback::read_back;
use super::tombstones;
use crate::error::{Error, Result};
use crate::scan::{Scan, SnapshotSelector};
use crate::spec::keyed::{KeyedSpec, TombstoneList};
use crate::table::Table;

/// A live row found: its file id, position and version.
pub(crate) type LiveRow = (u32, u64, Option<i64>);

/// Keys: a single integer key by value, others encoded as rows.
#[derive(Debug)]
enum Locations {
    Long(LongMap),
    Rows(KeyMap<Box<[u8]>, Loc>),
}

/// Tombstoned keys and their versions: single integer keys by value (in a [`LongMap`],
/// the version in the location's `version`), others encoded as rows.
#[derive(Debug)]
enum Tombstones {
    Long(LongMap),
    Rows(KeyMap<Box<[u8]>, i64>),
}

/// A tombstone's entry in a [`LongMap`].
fn tomb(version: i64) -> Loc {
    Loc {
        file: 0,
        pos: 0,
        version,
    }
}

/// The keys of one batch, in the index's encoding.
pub(crate) enum Keys<'a> {
    Long(Int64Array),
    Rows(&'a Rows),
}

impl Keys<'_> {
    /// `keys` (the batch's encoded key rows; `key_cols` its key columns) as the index needs.
    pub(super) fn of<'a>(
        index: &KeyIndex,
        key_cols: &[ArrayRef],
        rows: &'a Rows,
    ) -> Result<Keys<'a>> {
        Ok(match index.locs {
            Locations::Long(_) => Keys::Long(long_key(&key_cols[0])?),
            Locations::Rows(_) => Keys::Rows(rows),
        })
    }
}

fn long_key(col: &ArrayRef) -> Result<Int64Array> {
    let c = arrow_cast::cast(col, &arrow_schema::DataType::Int64)?;
    c.as_any()
        .downcast_ref::<Int64Array>()
        .cloned()
        .ok_or_else(|| Error::io("an integer key did not cast to a 64-bit integer"))
}

/// Entries a build read and has not yet inserted: single integer keys all at once (a bulk
/// load), others binned by the map bucket they hash to (see [`Binned`]).
enum Pending {
    Long(BulkLoad),
    Rows(Binned<Box<[u8]>>),
}

/// How many keys ahead a batch of lookups prefetches (enough to keep a core's outstanding
/// cache misses busy).
const PREFETCH_AHEAD: usize = 16;

/// Keys of a batch from which lookups are split over the cores.
const PARALLEL_LOOKUPS: usize = 16_384;

/// Encoded-key entries a build bins before inserting them into the map (integer keys are
/// bulk-loaded once, at the end).
const PENDING_ROWS: usize = 1 << 22;

/// The key columns and the versions (if the table has a version column) of `batch`, by name.
fn key_and_version(
    spec: &KeyedSpec,
    batch: &RecordBatch,
) -> Result<(Vec<ArrayRef>, Option<Int64Array>)> {
    let schema = batch.schema();
    let col = |n: &String| {
        schema
            .index_of(n)
            .map(|i| batch.column(i).clone())
            .map_err(|_| Error::io(format!("the scan did not return column '{n}'")))
    };
    let keys = spec.key.iter().map(col).collect::<Result<Vec<_>>>()?;
    let versions = spec
        .version
        .as_ref()
        .map(|v| col(v).and_then(|c| versions_of(&c)))
        .transpose()?;
    Ok((keys, versions))
}

/// Row `r`'s version (`i64::MIN` when it has none).
fn version_at(versions: &Option<Int64Array>, r: usize) -> i64 {
    match versions {
        Some(v) if v.is_valid(r) => v.value(r),
        _ => i64::MIN,
    }
}

/// A row position the index can hold (positions of one file ascend, so a batch's last
/// is its largest).
fn check_position(pos: u64) -> Result<()> {
    if pos < MAX_POS {
        return Ok(());
    }
    Err(Error::unsupported(format!(
        "row position {pos} is past what the key index can address ({MAX_POS} rows per data file)"
    )))
}

/// The error for a key found in two live rows of `table`.
pub(super) fn duplicate_key(table: &Table) -> Error {
    Error::invalid(format!(
        "table {} holds a key in more than one live row (was it written by an engine that does not \
         keep keys unique?); remove the duplicates first",
        table.name()
    ))
}

/// Entries waiting to go into a large map, binned by where their home buckets are.
/// Inserting them bin by bin, each in bucket order, walks the map's memory from one end to
/// the other instead of at random (on a 10M-key index that is ~4x faster: a random access
/// into a map of hundreds of MB misses the caches and the TLB). hashbrown places a key at
/// the bucket given by its hash's low bits, in a power-of-two table whose capacity is 7/8 of
/// its buckets; if that ever changes, the order is merely no longer helpful.
struct Binned<K> {
    /// A key's home bucket in the map as it is sized now.
    home: Box<dyn Fn(&K) -> u64 + Send + Sync>,
    /// Shifts a bucket index to its 16-bit slot.
    shift: u32,
    /// 256 bins by a slot's high byte, each entry with its slot.
    bins: Vec<Vec<(u16, K, Loc)>>,
    len: usize,
}

impl<K> Binned<K> {
    /// Bins for a map of `buckets` buckets (a power of two) whose home bucket for a key is
    /// `home` (it must not grow before [`Self::insert_into`]).
    fn new(buckets: u64, home: Box<dyn Fn(&K) -> u64 + Send + Sync>) -> Self {
        Self {
            home,
            shift: buckets.trailing_zeros().saturating_sub(16),
            bins: (0..256).map(|_| Vec::new()).collect(),
            len: 0,
        }
    }

    fn push(&mut self, key: K, loc: Loc) {
        let slot = ((self.home)(&key) >> self.shift) as u16;
        self.bins[usize::from(slot >> 8)].push((slot, key, loc));
        self.len += 1;
    }

    /// Hands every entry to `insert` (in bucket order) and forgets them; false when
    /// `insert` said a key was already in the map.
    fn insert_into(&mut self, mut insert: impl FnMut(K, Loc) -> bool) -> bool {
        let mut fresh = true;
        for bin in &mut self.bins {
            bin.sort_unstable_by_key(|e| e.0);
            for (_, k, loc) in bin.drain(..) {
                fresh &= insert(k, loc);
            }
        }
        self.len = 0;
        fresh
    }
}

impl Binned<Box<[u8]>> {
    /// Bins for `map` as it is sized now.
    fn for_map(map: &KeyMap<Box<[u8]>, Loc>) -> Self {
        use std::hash::BuildHasher;
        let buckets = (map.capacity() / 7 * 8).max(1).next_power_of_two() as u64;
        let (hasher, mask) = (*map.hasher(), buckets - 1);
        Self::new(buckets, Box::new(move |k| hasher.hash_one(k) & mask))
    }
}

/// A scan of the key and version columns of `table` at `snapshot_id`.
fn key_scan(table: &Table, spec: &KeyedSpec, snapshot_id: i64) -> Scan {
    let mut columns = spec.key.clone();
    columns.extend(spec.version.clone());
    Scan::new(table)
        .snapshot(SnapshotSelector::Id(snapshot_id))
        .in_current_schema()
        .select(columns)
}

/// The index of one state of a keyed table.
#[derive(Debug)]
pub(crate) struct KeyIndex {
    /// The snapshot it reflects.
    pub snapshot_id: Option<i64>,
    /// The metadata's `floe.tombstones` value it reflects.
    pub tombstone_list: TombstoneList,
    /// The schema it was built for.
    pub schema_id: i32,
    files: Vec<String>,
    file_ids: HashMap<String, u32>,
    locs: Locations,
    /// Versions of tombstoned keys.
    tombstones: Tombstones,
    /// Some key has both a live row and a tombstone (see [`Self::find_shadowed`]).
    shadowed: bool,
}

impl KeyIndex {
    /// Reads the key and version columns of every live row of `table`, and its tombstones.
    pub(super) async fn build(
        table: &Table,
        spec: &KeyedSpec,
        cols: &Columns,
        schema: &arrow_schema::SchemaRef,
        conv: &RowConverter,
    ) -> Result<Self> {
        let long = cols.key.len() == 1
            && matches!(
                schema.field(cols.key[0]).data_type(),
                arrow_schema::DataType::Int64 | arrow_schema::DataType::Int32
            );
        let mut index = KeyIndex {
            snapshot_id: table.current_snapshot().map(|s| s.snapshot_id()),
            tombstone_list: TombstoneList::of(table.metadata(), &table.name())?,
            schema_id: table.metadata().current_schema_id(),
            files: Vec::new(),
            file_ids: HashMap::new(),
            locs: if long {
                Locations::Long(LongMap::default())
            } else {
                Locations::Rows(KeyMap::default())
            },
            tombstones: if long {
                Tombstones::Long(LongMap::default())
            } else {
                Tombstones::Rows(KeyMap::default())
            },
            shadowed: false,
        };
        index.load_tombstones(table, cols, schema, conv).await?;
        let Some(snapshot_id) = index.snapshot_id else {
            return Ok(index);
        };
        let scan = key_scan(table, spec, snapshot_id);
        let plan = scan.plan().await?;
        let ids = index.file_ids(table, &plan)?;
        // Sized once for the rows the plan may return (no rehashing of a large map, no
        // regrowing of the collected entries); the counts come from manifests, so the hint
        // is capped and may fail harmlessly.
        let rows: u64 = plan.files.iter().map(|f| f.file.record_count()).sum();
        let hint = rows.min(1 << 27) as usize;
        if let Locations::Rows(m) = &mut index.locs {
            let _ = m.try_reserve(hint);
        }
        let mut pending = match &index.locs {
            Locations::Rows(m) => Pending::Rows(Binned::for_map(m)),
            Locations::Long(_) => Pending::Long(BulkLoad::with_capacity(hint)),
        };
        let mut stream = scan.read_positioned(plan, true)?;
        while let Some(item) = stream.next().await {
            let (j, (batch, positions)) = item?;
            let positions = positions
                .ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
            let file = *ids
                .get(j)
                .ok_or_else(|| Error::io("the reader returned a file that was not planned"))?;
            index.add_rows(
                spec,
                conv,
                &batch,
                file,
                |r| positions.value(r),
                &mut pending,
            )?;
            if matches!(&pending, Pending::Rows(p) if p.len >= PENDING_ROWS) {
                index.insert_pending(table, &mut pending)?;
            }
        }
        index.insert_pending(table, &mut pending)?;
        index.shadowed = index.find_shadowed();
        Ok(index)
    }

    /// Loads the tombstones of `self.tombstone_list` (replacing any held).
    async fn load_tombstones(
        &mut self,
        table: &Table,
        cols: &Columns,
        schema: &arrow_schema::SchemaRef,
        conv: &RowConverter,
    ) -> Result<()> {
        self.tombstones = match self.tombstones {
            Tombstones::Long(_) => Tombstones::Long(LongMap::default()),
            Tombstones::Rows(_) => Tombstones::Rows(KeyMap::default()),
        };
        let key_fields: Vec<_> = cols
            .key
            .iter()
            .map(|&i| schema.fields()[i].clone())
            .collect();
        let stones = tombstones::load(table, &self.tombstone_list, &key_fields, conv, None).await?;
        match &mut self.tombstones {
            Tombstones::Rows(m) => {
                m.extend(
                    stones
                        .records
                        .into_iter()
                        .filter(|(_, r)| r.deleted)
                        .map(|(k, r)| (k, r.version)),
                );
            }
            Tombstones::Long(m) if !stones.key_rows.is_empty() => {
                let keys = long_key(&stones.keys[0])?;
                for (k, rec) in stones.records.iter().filter(|(_, r)| r.deleted) {
                    let row = stones.key_rows.get(k).ok_or_else(|| {
                        Error::io("a tombstone record has no key row (tombstone load)")
                    })?;
                    m.insert(keys.value(*row as usize), tomb(rec.version));
                }
            }
            Tombstones::Long(_) => {}
        }
        Ok(())
    }

    /// Brings an index of an earlier state of `table` to its current state when everything
    /// committed since only moved rows: `replace` snapshots (compaction, delete and manifest
    /// rewrites, by any engine; a replace never changes the table's rows) and tombstone
    /// merges. Reads the key and version columns of the data files added since, instead of
    /// every live row — or, when those commits moved most of the index, builds it again
    /// (a bulk load beats that many single updates). `None` when that does not hold, or the
    /// rows read do not match the rows the removed files held (the caller builds the index
    /// again).
    pub(super) async fn catch_up(
        mut self,
        table: &Table,
        spec: &KeyedSpec,
        cols: &Columns,
        schema: &arrow_schema::SchemaRef,
        conv: &RowConverter,
    ) -> Result<Option<Self>> {
        let md = table.metadata();
        if self.schema_id != md.current_schema_id() {
            return Ok(None);
        }
        let current = table.current_snapshot().map(|s| s.snapshot_id());
        let mut moved = false;
        let mut at = current;
        while at != self.snapshot_id {
            let Some(s) = at.and_then(|id| md.snapshot_by_id(id)) else {
                return Ok(None);
            };
            if s.summary().operation != iceberg::spec::Operation::Replace {
                return Ok(None);
            }
            moved = true;
            at = s.parent_snapshot_id();
        }
        if moved {
            let Some(snapshot_id) = current else {
                return Ok(None);
            };
            let scan = key_scan(table, spec, snapshot_id);
            let mut plan = scan.plan().await?;
            let live: std::collections::HashSet<&str> =
                plan.files.iter().map(|f| f.file.file_path()).collect();
            // Files the index knows that are gone, and how many entries point into them.
            let gone: Vec<bool> = self
                .files
                .iter()
                .map(|f| !live.contains(f.as_str()))
                .collect();
            let is_gone = |file: u32| gone.get(file as usize).copied().unwrap_or(false);
            let (held, entries) = match &self.locs {
                Locations::Long(m) => (m.locs().filter(|l| is_gone(l.file)).count(), m.len()),
                Locations::Rows(m) => (m.values().filter(|l| is_gone(l.file)).count(), m.len()),
            };
            // When they moved most of the index (a compaction of the whole table), one read
            // and a bulk load are cheaper than following each row: at 1M keys ~120 ms
            // against 350-510 ms of map updates (soak benchmark).
            if held * 2 > entries {
                drop(plan);
                drop(self);
                return Self::build(table, spec, cols, schema, conv).await.map(Some);
            }
            plan.retain(|f| !self.file_ids.contains_key(f.file.file_path()));
            let ids = self.file_ids(table, &plan)?;
            let mut moved_rows = 0usize;
            let mut stream = scan.read_positioned(plan, true)?;
            while let Some(item) = stream.next().await {
                let (j, (batch, positions)) = item?;
                let positions = positions
                    .ok_or_else(|| Error::io("row positions were not returned by the reader"))?;
                let file = *ids
                    .get(j)
                    .ok_or_else(|| Error::io("the reader returned a file that was not planned"))?;
                // Every row read was a row of a removed file: its key's entry moves.
                let moved = self.put_rows(
                    spec,
                    conv,
                    &batch,
                    file,
                    |r| positions.value(r),
                    |old| old.is_some_and(|l| is_gone(l.file)),
                )?;
                if moved != batch.num_rows() {
                    return Ok(None);
                }
                moved_rows += batch.num_rows();
            }
            if moved_rows != held {
                return Ok(None);
            }
        }
        let list = TombstoneList::of(md, &table.name())?;
        if list != self.tombstone_list {
            self.tombstone_list = list;
            self.load_tombstones(table, cols, schema, conv).await?;
            self.shadowed = self.find_shadowed();
        }
        self.snapshot_id = current;
        Ok(Some(self))
    }

    /// The ids of the planned files, in plan order (new ids for files not seen before).
    fn file_ids(&mut self, table: &Table, plan: &crate::scan::ScanPlan) -> Result<Vec<u32>> {
        plan.files
            .iter()
            .map(|f| self.file_id(table, f.file.file_path()))
            .collect()
    }

    /// The id of data file `path`; an error past the ids a [`LongMap`] can hold.
    fn file_id(&mut self, table: &Table, path: &str) -> Result<u32> {
        if let Some(id) = self.file_ids.get(path) {
            return Ok(*id);
        }
        let id = u32::try_from(self.files.len())
            .ok()
            .filter(|&id| id < MAX_FILES)
            .ok_or_else(|| {
                Error::unsupported(format!(
                    "the key index of table {} cannot address more than {MAX_FILES} data files; \
                     compact the table (rewrite-data-files) first",
                    table.name()
                ))
            })?;
        self.files.push(path.to_string());
        self.file_ids.insert(path.to_string(), id);
        Ok(id)
    }

    /// Indexes the rows of `batch` (key columns and the version, by name) of file `file`
    /// into `pending` (a build).
    fn add_rows(
        &mut self,
        spec: &KeyedSpec,
        conv: &RowConverter,
        batch: &RecordBatch,
        file: u32,
        position: impl Fn(usize) -> u64,
        pending: &mut Pending,
    ) -> Result<()> {
        let (keys, versions) = key_and_version(spec, batch)?;
        if let Some(last) = batch.num_rows().checked_sub(1) {
            check_position(position(last))?;
        }
        let loc = |r: usize| Loc {
            file,
            pos: position(r),
            version: version_at(&versions, r),
        };
        match pending {
            Pending::Long(bulk) => {
                let k = long_key(&keys[0])?;
                for r in 0..k.len() {
                    bulk.push(k.value(r), loc(r));
                }
            }
            Pending::Rows(p) => {
                let rows = conv.convert_columns(&keys)?;
                for r in 0..rows.num_rows() {
                    p.push(rows.row(r).as_ref().into(), loc(r));
                }
            }
        }
        Ok(())
    }

    /// Inserts the pending entries (and empties them) in the order of the buckets they land
    /// in, so that inserting into a large map walks its memory once instead of at random.
    fn insert_pending(&mut self, table: &Table, pending: &mut Pending) -> Result<()> {
        let ok = match (&mut self.locs, pending) {
            (Locations::Rows(m), Pending::Rows(p)) => {
                m.reserve(p.len);
                p.insert_into(|k, loc| m.insert(k, loc).is_none())
            }
            (Locations::Long(m), Pending::Long(bulk)) => {
                let (loaded, unique) = LongMap::bulk_load(std::mem::take(bulk)).map_err(|e| {
                    Error::io(format!(
                        "no memory for the key index of table {}: {e}",
                        table.name()
                    ))
                })?;
                *m = loaded;
                unique
            }
            _ => true,
        };
        ok.then_some(()).ok_or_else(|| duplicate_key(table))
    }

    /// The live row (its file path and position, and version) and the tombstone version of
    /// key `r` of `keys` (`rows`: the same keys encoded as rows).
    #[cfg(test)]
    pub(super) fn lookup(
        &self,
        keys: &Keys,
        rows: &Rows,
        r: usize,
    ) -> (Option<LiveRow>, Option<i64>) {
        let live = self.live(keys, r);
        let tomb = if live.is_none() || self.shadowed {
            self.tombstone(keys, rows, r)
        } else {
            None
        };
        (live, tomb)
    }

    /// The live row of key `r` of `keys`.
    fn live(&self, keys: &Keys, r: usize) -> Option<LiveRow> {
        let loc = match (&self.locs, keys) {
            (Locations::Long(m), Keys::Long(k)) => m.get(k.value(r)),
            (Locations::Rows(m), Keys::Rows(k)) => m.get(k.row(r).as_ref()).copied(),
            _ => None,
        };
        loc.map(|l| (l.file, l.pos, (l.version != i64::MIN).then_some(l.version)))
    }

    /// The tombstone version of key `r` of `keys` (`rows`: the same keys encoded as rows).
    fn tombstone(&self, keys: &Keys, rows: &Rows, r: usize) -> Option<i64> {
        match (&self.tombstones, keys) {
            (Tombstones::Long(m), Keys::Long(k)) => m.get(k.value(r)).map(|l| l.version),
            (Tombstones::Rows(m), _) if !m.is_empty() => m.get(rows.row(r).as_ref()).copied(),
            _ => None,
        }
    }

    /// Starts loading the live-row map slot of key `r` of `keys` (single integer keys only).
    fn prefetch_live(&self, keys: &Keys, r: usize) {
        if let (Locations::Long(m), Keys::Long(k)) = (&self.locs, keys) {
            m.prefetch(k.value(r));
        }
    }

    /// Starts loading the tombstone map slot of key `r` of `keys` (single integer keys only).
    fn prefetch_tombstone(&self, keys: &Keys, r: usize) {
        if let (Tombstones::Long(m), Keys::Long(k)) = (&self.tombstones, keys) {
            m.prefetch(k.value(r));
        }
    }

    /// Whether some key has both a live row and a tombstone. floe never leaves one so (a
    /// delete that wins removes the row, a row that wins clears the tombstone), but another
    /// engine may write a row for a tombstoned key; lookups then read tombstones for live
    /// keys too.
    fn find_shadowed(&self) -> bool {
        match (&self.locs, &self.tombstones) {
            (Locations::Long(live), Tombstones::Long(t)) => t.keys().any(|k| live.get(k).is_some()),
            (Locations::Rows(live), Tombstones::Rows(t)) => t.keys().any(|k| live.contains_key(k)),
            _ => true,
        }
    }

    /// [`Self::lookup`] of every key of `keys`, split over the cores for large batches
    /// (each lookup is a cache miss into a large map; two threads keep twice as many in
    /// flight).
    pub(super) fn lookup_all(
        &self,
        keys: &Keys,
        rows: &Rows,
    ) -> Vec<(Option<LiveRow>, Option<i64>)> {
        let n = rows.num_rows();
        let threads = std::thread::available_parallelism().map_or(1, |p| p.get().min(4));
        let run = |from: usize, to: usize| {
            let mut found: Vec<_> = (from..to)
                .map(|r| {
                    if r + PREFETCH_AHEAD < to {
                        self.prefetch_live(keys, r + PREFETCH_AHEAD);
                    }
                    (self.live(keys, r), None)
                })
                .collect();
            // Tombstones of the keys that need them, in a second pass (prefetched among
            // themselves).
            let need: Vec<usize> = (from..to)
                .filter(|&r| self.shadowed || found[r - from].0.is_none())
                .collect();
            for (i, &r) in need.iter().enumerate() {
                if let Some(&ahead) = need.get(i + PREFETCH_AHEAD) {
                    self.prefetch_tombstone(keys, ahead);
                }
                found[r - from].1 = self.tombstone(keys, rows, r);
            }
            found
        };
        if n < PARALLEL_LOOKUPS || threads < 2 {
            return run(0, n);
        }
        let chunk = n.div_ceil(threads);
        std::thread::scope(|s| {
            let parts: Vec<_> = (0..n)
                .step_by(chunk)
                .map(|from| s.spawn(move || run(from, (from + chunk).min(n))))
                .collect();
            let mut found = Vec::with_capacity(n);
            for p in parts {
                match p.join() {
                    Ok(part) => found.extend(part),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            found
        })
    }

    /// Removed positions per file path, from `(file, position)` pairs.
    pub(super) fn removals(&self, at: &[(u32, u64)]) -> HashMap<String, RoaringTreemap> {
        let mut by_file: Vec<Vec<u64>> = vec![Vec::new(); self.files.len()];
        for &(f, p) in at {
            by_file[f as usize].push(p);
        }
        by_file
            .into_iter()
            .enumerate()
            .filter(|(_, ps)| !ps.is_empty())
            .map(|(f, mut ps)| {
                ps.sort_unstable();
                (self.files[f].clone(), ps.into_iter().collect())
            })
            .collect()
    }

    /// The key and version columns of the data files a batch added, by path (read back
    /// from storage: floe wrote them, so their rows' positions are known only this way).
    pub(super) async fn read_added(
        table: &Table,
        spec: &KeyedSpec,
        added: &[String],
    ) -> Result<Vec<(String, Vec<RecordBatch>)>> {
        let mut wanted = spec.key.clone();
        wanted.extend(spec.version.clone());
        let mut out = Vec::with_capacity(added.len());
        for path in added {
            out.push((path.clone(), read_back(table, path, &wanted).await?));
        }
        Ok(out)
    }

    /// Brings the index to the state a batch's commit leaves: `gone` keys (replaced or
    /// deleted rows) removed or overwritten, the rows of the `added` data files (from
    /// [`Self::read_added`]) indexed, tombstones set and cleared. `deleted[r]`: folded row
    /// `r` deletes its key. It may run while the commit is under way; [`Self::settle`]
    /// then marks the committed state (a caller whose commit failed drops the index).
    ///
    /// A replaced key that is written again is overwritten in place, not removed and
    /// inserted: a removal leaves a deleted marker in the map, and markers add up until the
    /// whole map is rehashed (hundreds of ms at 10M keys, every few batches).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn apply_batch(
        &mut self,
        table: &Table,
        spec: &KeyedSpec,
        conv: &RowConverter,
        keys: &Keys<'_>,
        rows: &Rows,
        gone: &[usize],
        deleted: &arrow_array::BooleanArray,
        added: &[(String, Vec<RecordBatch>)],
        tombstones: &[(usize, bool, i64)],
    ) -> Result<()> {
        let mut rewritten = 0usize;
        for &r in gone {
            if !deleted.value(r) {
                rewritten += 1;
                continue;
            }
            match (&mut self.locs, keys) {
                (Locations::Long(m), Keys::Long(k)) => {
                    m.remove(k.value(r));
                }
                (Locations::Rows(m), Keys::Rows(k)) => {
                    m.remove(k.row(r).as_ref());
                }
                _ => {}
            }
        }
        for &(r, deleted, version) in tombstones {
            match (&mut self.tombstones, keys) {
                (Tombstones::Long(m), Keys::Long(k)) if deleted => {
                    m.insert(k.value(r), tomb(version));
                }
                (Tombstones::Long(m), Keys::Long(k)) => {
                    m.remove(k.value(r));
                }
                (Tombstones::Rows(m), _) if deleted => {
                    m.insert(rows.row(r).as_ref().into(), version);
                }
                (Tombstones::Rows(m), _) => {
                    m.remove(rows.row(r).as_ref());
                }
                _ => {}
            }
        }
        let mut overwritten = 0usize;
        for (path, batches) in added {
            let file = self.file_id(table, path)?;
            let mut next = 0u64;
            for b in batches {
                let first = next;
                next += b.num_rows() as u64;
                overwritten += self.put_rows(
                    spec,
                    conv,
                    b,
                    file,
                    |r| first + r as u64,
                    |old| old.is_some(),
                )?;
            }
        }
        // Every replaced key that was not deleted is in the added files once, and no other
        // key was there before: anything else means the index no longer matches the table.
        if overwritten != rewritten {
            return Err(duplicate_key(table));
        }
        Ok(())
    }

    /// Marks the index as reflecting `table`, the state its last [`Self::apply_batch`]
    /// committed.
    pub(super) fn settle(&mut self, table: &Table) -> Result<()> {
        self.snapshot_id = table.current_snapshot().map(|s| s.snapshot_id());
        self.tombstone_list = TombstoneList::of(table.metadata(), &table.name())?;
        self.schema_id = table.metadata().current_schema_id();
        Ok(())
    }

    /// Indexes the rows of `batch` (key columns and the version, by name) of file `file`
    /// at `position(r)`, over any entries of the same keys; returns how many rows `counted`
    /// says yes to, given the entry each one replaced.
    fn put_rows(
        &mut self,
        spec: &KeyedSpec,
        conv: &RowConverter,
        batch: &RecordBatch,
        file: u32,
        position: impl Fn(usize) -> u64,
        counted: impl Fn(Option<Loc>) -> bool,
    ) -> Result<usize> {
        let (keys, versions) = key_and_version(spec, batch)?;
        if let Some(last) = batch.num_rows().checked_sub(1) {
            check_position(position(last))?;
        }
        let loc = |r: usize| Loc {
            file,
            pos: position(r),
            version: version_at(&versions, r),
        };
        let mut n = 0;
        match &mut self.locs {
            Locations::Long(m) => {
                let k = long_key(&keys[0])?;
                m.reserve(k.len());
                for r in 0..k.len() {
                    if r + PREFETCH_AHEAD < k.len() {
                        m.prefetch(k.value(r + PREFETCH_AHEAD));
                    }
                    n += usize::from(counted(m.insert(k.value(r), loc(r))));
                }
            }
            Locations::Rows(m) => {
                let rows = conv.convert_columns(&keys)?;
                m.reserve(rows.num_rows());
                for r in 0..rows.num_rows() {
                    n += usize::from(counted(m.insert(rows.row(r).as_ref().into(), loc(r))));
                }
            }
        }
        Ok(n)
    }

    /// Whether the index reflects `table` as it is now.
    pub(super) fn is_current(&self, table: &Table) -> bool {
        self.snapshot_id == table.current_snapshot().map(|s| s.snapshot_id())
            && self.schema_id == table.metadata().current_schema_id()
            && TombstoneList::of(table.metadata(), &table.name())
                .ok()
                .as_ref()
                == Some(&self.tombstone_list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(pos: u64) -> Loc {
        Loc {
            file: 0,
            pos,
            version: pos as i64,
        }
    }

    #[test]
    fn lookups_split_over_threads_match_one_by_one_lookups() {
        // Live rows: multiples of 3. Tombstones: keys ≡ 1 (mod 5), none live; then also
        // some live keys (≡ 0 mod 15), which another engine may have written.
        for shadow in [false, true] {
            let mut map = LongMap::default();
            for k in 0..50_000i64 {
                map.insert(k * 3, loc(k as u64));
            }
            let tombstoned =
                |k: i64| (k % 5 == 1 && k % 3 != 0) || (shadow && k % 15 == 0 && k < 150_000);
            let mut stones = LongMap::default();
            for k in (0..150_001i64).filter(|&k| tombstoned(k)) {
                stones.insert(k, tomb(-k));
            }
            let mut idx = KeyIndex {
                snapshot_id: None,
                tombstone_list: TombstoneList::default(),
                schema_id: 0,
                files: vec![],
                file_ids: HashMap::new(),
                locs: Locations::Long(map),
                tombstones: Tombstones::Long(stones),
                shadowed: false,
            };
            idx.shadowed = idx.find_shadowed();
            assert_eq!(idx.shadowed, shadow);
            // Present and absent keys, more than one thread's share.
            let n = PARALLEL_LOOKUPS * 3 + 7;
            let keys: Vec<i64> = (0..n as i64).map(|i| (i * 7_919) % 150_001).collect();
            let col: ArrayRef = std::sync::Arc::new(Int64Array::from(keys.clone()));
            let conv = RowConverter::new(vec![arrow::row::SortField::new(
                arrow_schema::DataType::Int64,
            )])
            .unwrap();
            let rows = conv.convert_columns(std::slice::from_ref(&col)).unwrap();
            let k = Keys::Long(long_key(&col).unwrap());
            let all = idx.lookup_all(&k, &rows);
            assert_eq!(all.len(), n);
            let (mut hits, mut stone_hits, mut both) = (0, 0, 0);
            for (r, &key) in keys.iter().enumerate() {
                let live = (key % 3 == 0 && key / 3 < 50_000).then_some((
                    0,
                    (key / 3) as u64,
                    Some(key / 3),
                ));
                let stone = tombstoned(key).then_some(-key);
                assert_eq!(all[r], (live, stone), "key {key}");
                assert_eq!(idx.lookup(&k, &rows, r), (live, stone));
                hits += usize::from(live.is_some());
                stone_hits += usize::from(stone.is_some());
                both += usize::from(live.is_some() && stone.is_some());
            }
            assert!(hits > 0 && hits < n && stone_hits > 0);
            assert_eq!(both > 0, shadow);
        }
    }

    #[test]
    fn binned_entries_all_reach_the_map_and_duplicates_are_found() {
        let key = |k: i64| -> Box<[u8]> { k.to_be_bytes().into() };
        let put = |m: &mut KeyMap<Box<[u8]>, Loc>, b: &mut Binned<Box<[u8]>>| {
            m.reserve(b.len);
            b.insert_into(|k, l| m.insert(k, l).is_none())
        };
        let mut map: KeyMap<Box<[u8]>, Loc> = KeyMap::default();
        map.try_reserve(100_000).unwrap();
        let mut b = Binned::for_map(&map);
        // Spread keys (a multiplicative shuffle of 0..n).
        let keys: Vec<i64> = (0..100_000i64).map(|i| (i * 7_919) % 100_003).collect();
        for (i, &k) in keys.iter().enumerate() {
            b.push(key(k), loc(i as u64));
        }
        assert!(put(&mut map, &mut b));
        assert_eq!(map.len(), keys.len());
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(map[&key(k)].pos, i as u64);
        }
        // A second chunk holding a key already in the map is refused.
        b.push(key(keys[42]), loc(7));
        b.push(key(-1), loc(8));
        assert!(!put(&mut map, &mut b));
        assert_eq!(b.len, 0);
        // A map smaller than assumed still gets every entry.
        let mut small: KeyMap<Box<[u8]>, Loc> = KeyMap::default();
        let mut b = Binned::for_map(&small);
        for k in 0..1_000 {
            b.push(key(k), loc(k as u64));
        }
        assert!(put(&mut small, &mut b));
        assert_eq!(small.len(), 1_000);
    }
}
