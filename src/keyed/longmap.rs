//! The key index's map for single integer keys: open addressing with linear probing, each
//! slot holding the key and its location, so a lookup costs one cache miss (a general map
//! keeps its control bytes apart from its entries: two misses into a map of hundreds of
//! MB), and the slot a key starts from is known before the lookup, so a batch of lookups
//! can prefetch ahead. Removal shifts the following entries back (no deleted markers, so a
//! map that sees many removals never needs rehashing).

/// A live row's location in the index: data file id, position, version (`i64::MIN`: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Loc {
    pub file: u32,
    pub pos: u64,
    pub version: i64,
}

/// Bits of a slot's `at` that hold the position; the file id + 1 is above them.
const POS_BITS: u32 = 40;

/// File ids a map can hold (below this).
pub(super) const MAX_FILES: u32 = (1 << (64 - POS_BITS)) - 1;

/// Positions a map can hold (below this).
pub(super) const MAX_POS: u64 = 1 << POS_BITS;

/// One slot: 24 bytes, all zero when vacant (a fresh anonymous mapping is a vacant map).
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    key: i64,
    version: i64,
    /// `(file + 1) << POS_BITS | pos`; 0 when vacant.
    at: u64,
}

impl Slot {
    fn new(key: i64, loc: Loc) -> Self {
        assert!(
            loc.file < MAX_FILES && loc.pos < MAX_POS,
            "key index location out of range (callers check)"
        );
        Slot {
            key,
            version: loc.version,
            at: ((u64::from(loc.file) + 1) << POS_BITS) | loc.pos,
        }
    }

    fn vacant(&self) -> bool {
        self.at == 0
    }

    fn loc(&self) -> Loc {
        Loc {
            file: ((self.at >> POS_BITS) - 1) as u32,
            pos: self.at & (MAX_POS - 1),
            version: self.version,
        }
    }
}

const VACANT: Slot = Slot {
    key: 0,
    version: 0,
    at: 0,
};

/// The slots, in an anonymous memory mapping: the kernel hands it out zeroed, i.e. every
/// slot vacant, without a pass that writes them. (Huge pages were tried: lookups were ~10%
/// faster, but obtaining them for a 384 MB map took 1.3 s here, 10x the small pages.)
#[derive(Default)]
struct Slots {
    map: Option<memmap2::MmapMut>,
    len: usize,
}

impl Slots {
    fn new(len: usize) -> std::io::Result<Self> {
        if len == 0 {
            return Ok(Self::default());
        }
        let bytes = len
            .checked_mul(std::mem::size_of::<Slot>())
            .ok_or_else(|| std::io::Error::other("key index too large"))?;
        let map = memmap2::MmapOptions::new().len(bytes).map_anon()?;
        #[cfg(target_os = "linux")]
        {
            // Faulting the pages in up front, in one call, costs a third of faulting them one
            // by one as inserts first touch them (measured on a 10M-key build). Only advice:
            // an older kernel refuses it and the pages fault in lazily.
            let _ = map.advise(memmap2::Advice::PopulateWrite);
        }
        Ok(Self {
            map: Some(map),
            len,
        })
    }

    fn get(&self) -> &[Slot] {
        match &self.map {
            // SAFETY: the mapping is page-aligned, `len` slots long, and any bytes are a
            // valid `Slot` (plain integers, `repr(C)`, no padding).
            Some(m) => unsafe { std::slice::from_raw_parts(m.as_ptr().cast::<Slot>(), self.len) },
            None => &[],
        }
    }

    fn get_mut(&mut self) -> &mut [Slot] {
        match &mut self.map {
            // SAFETY: as in `get`; the mapping is borrowed mutably.
            Some(m) => unsafe {
                std::slice::from_raw_parts_mut(m.as_mut_ptr().cast::<Slot>(), self.len)
            },
            None => &mut [],
        }
    }
}

/// Slots are at most this full (linear probing slows down sharply above ~3/4).
const MAX_LOAD_NUM: usize = 3;
const MAX_LOAD_DEN: usize = 4;

/// Map from `i64` keys to [`Loc`]s (file ids below [`MAX_FILES`], positions below
/// [`MAX_POS`]).
#[derive(Default)]
pub(super) struct LongMap {
    slots: Slots,
    len: usize,
}

impl std::fmt::Debug for LongMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LongMap")
            .field("len", &self.len)
            .field("slots", &self.slots.len)
            .finish()
    }
}

/// Mixes a key's bits (the 64-bit finalizer of MurmurHash3), so that sequential or strided
/// keys spread over the slots.
fn mix(k: i64) -> u64 {
    let mut x = k as u64;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl LongMap {
    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The slot `key` starts probing from, for a map of `slots` slots (a power of two).
    fn home_in(key: i64, slots: usize) -> usize {
        (mix(key) as usize) & slots.saturating_sub(1)
    }

    /// The number of slots (0 or a power of two).
    #[cfg(test)]
    pub fn slots(&self) -> usize {
        self.slots.len
    }

    fn home(&self, key: i64) -> usize {
        Self::home_in(key, self.slots.len)
    }

    fn slots_for(entries: usize) -> usize {
        (entries.saturating_mul(MAX_LOAD_DEN) / MAX_LOAD_NUM + 1)
            .max(16)
            .next_power_of_two()
    }

    /// Whether `entries` fit in the slots within the load bound.
    fn fits(&self, entries: usize) -> bool {
        entries.saturating_mul(MAX_LOAD_DEN) <= self.slots.len * MAX_LOAD_NUM
    }

    /// Moves every entry into `slots` (all vacant).
    fn rehash_into(&mut self, slots: Slots) {
        let old = std::mem::replace(&mut self.slots, slots);
        self.len = 0;
        for s in old.get().iter().filter(|s| !s.vacant()) {
            self.insert_slot(*s);
        }
    }

    /// Makes room for `additional` more entries without growing; an error when the memory
    /// cannot be had (the map is unchanged).
    pub fn try_reserve(&mut self, additional: usize) -> std::io::Result<()> {
        let want = self.len.saturating_add(additional);
        if !self.fits(want) {
            self.rehash_into(Slots::new(Self::slots_for(want))?);
        }
        Ok(())
    }

    /// [`Self::try_reserve`], aborting like a standard collection when out of memory.
    pub fn reserve(&mut self, additional: usize) {
        if let Err(e) = self.try_reserve(additional) {
            panic!("the key index could not grow by {additional} entries: {e}");
        }
    }

    /// The slot holding `key`, or the empty slot where it would go.
    fn find(&self, key: i64) -> Result<usize, usize> {
        let slots = self.slots.get();
        let mask = slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let s = &slots[i];
            if s.vacant() {
                return Err(i);
            }
            if s.key == key {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// `key`'s location.
    pub fn get(&self, key: i64) -> Option<Loc> {
        if self.len == 0 {
            return None;
        }
        self.find(key).ok().map(|i| self.slots.get()[i].loc())
    }

    /// Starts loading `key`'s home slot into the cache (a batch of lookups calls it some
    /// keys ahead).
    #[inline]
    pub fn prefetch(&self, key: i64) {
        let slots = self.slots.get();
        if slots.is_empty() {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let p = &slots[self.home(key)] as *const Slot as *const i8;
            // SAFETY: a prefetch is a hint; it reads nothing and cannot fault.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p) };
        }
    }

    /// Sets `key`'s location; returns the one it replaced.
    pub fn insert(&mut self, key: i64, loc: Loc) -> Option<Loc> {
        self.insert_slot(Slot::new(key, loc))
    }

    fn insert_slot(&mut self, slot: Slot) -> Option<Loc> {
        self.reserve(1);
        match self.find(slot.key) {
            Ok(i) => Some(std::mem::replace(&mut self.slots.get_mut()[i], slot).loc()),
            Err(i) => {
                self.slots.get_mut()[i] = slot;
                self.len += 1;
                None
            }
        }
    }

    /// Removes `key`; the entries after it in its run move back so that every entry stays
    /// reachable from its home slot.
    pub fn remove(&mut self, key: i64) -> Option<Loc> {
        if self.len == 0 {
            return None;
        }
        let mask = self.slots.len - 1;
        let mut hole = self.find(key).ok()?;
        let slots = self.slots.get_mut();
        let removed = slots[hole].loc();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let s = slots[j];
            if s.vacant() {
                break;
            }
            let home = Self::home_in(s.key, mask + 1);
            // The entry at j may move to the hole unless its home lies cyclically in
            // (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                slots[hole] = s;
                hole = j;
            }
        }
        slots[hole] = VACANT;
        self.len -= 1;
        Some(removed)
    }
}

/// Entries collected for [`LongMap::bulk_load`].
#[derive(Default)]
pub(super) struct BulkLoad {
    entries: Vec<Slot>,
}

impl BulkLoad {
    /// Room for `n` entries if the memory can be had (more or fewer may be pushed).
    pub fn with_capacity(n: usize) -> Self {
        let mut entries = Vec::new();
        let _ = entries.try_reserve_exact(n);
        Self { entries }
    }

    /// Adds an entry (file id below [`MAX_FILES`], position below [`MAX_POS`]).
    pub fn push(&mut self, key: i64, loc: Loc) {
        self.entries.push(Slot::new(key, loc));
    }
}

/// Radix passes sort by at most this many bits each.
const RADIX_BITS: u32 = 8;

impl LongMap {
    /// A map of `bulk`'s entries, and whether every key was pushed once (when not, the map
    /// holds one entry of each key).
    ///
    /// The entries are radix-sorted by their home slot and laid down in that order, each in
    /// the first free slot from its home: one sequential pass over the map instead of one
    /// cache (and TLB) miss per insert, which is what made building a 10M-key index cost
    /// over a second.
    pub fn bulk_load(bulk: BulkLoad) -> std::io::Result<(LongMap, bool)> {
        let mut entries = bulk.entries;
        let n_slots = Self::slots_for(entries.len());
        let mut map = LongMap {
            slots: Slots::new(n_slots)?,
            len: 0,
        };
        let bits = n_slots.trailing_zeros();
        let home = |s: &Slot| Self::home_in(s.key, n_slots);
        // LSD radix sort by home slot (stable, so a key's copies keep their order), with the
        // map's own memory (more slots than entries) as the second buffer: no more fresh
        // memory to fault in than the map itself.
        let passes = bits.div_ceil(RADIX_BITS).max(1);
        let width = bits.div_ceil(passes);
        let n = entries.len();
        {
            let scratch = &mut map.slots.get_mut()[..n];
            for pass in 0..passes {
                let shift = pass * width;
                let digit = |s: &Slot| (home(s) >> shift) & ((1 << width) - 1);
                let (from, to): (&[Slot], &mut [Slot]) = if pass % 2 == 0 {
                    (&entries, &mut *scratch)
                } else {
                    (&*scratch, &mut entries)
                };
                let mut start = vec![0usize; 1 << width];
                for s in from {
                    start[digit(s)] += 1;
                }
                let mut sum = 0;
                for c in start.iter_mut() {
                    (*c, sum) = (sum, sum + *c);
                }
                for s in from {
                    let d = digit(s);
                    to[start[d]] = *s;
                    start[d] += 1;
                }
            }
            if passes % 2 == 1 {
                entries.copy_from_slice(scratch);
            }
        }
        map.slots.get_mut()[..n].fill(VACANT);
        let mut unique = true;
        let mut overflow = Vec::new();
        {
            let slots = map.slots.get_mut();
            let (mut cursor, mut group, mut group_home) = (0usize, 0usize, usize::MAX);
            for s in entries {
                let h = home(&s);
                if h != group_home {
                    (group, group_home) = (h.max(cursor), h);
                }
                let p = h.max(cursor);
                if p >= n_slots {
                    overflow.push(s);
                    continue;
                }
                // Copies of a key share a home, so they are in the current group.
                if slots[group..p].iter().any(|o| o.key == s.key) {
                    unique = false;
                    continue;
                }
                slots[p] = s;
                cursor = p + 1;
                map.len += 1;
            }
        }
        // Runs that reach the end wrap to the start, as inserts do.
        for s in overflow {
            unique &= map.insert_slot(s).is_none();
        }
        Ok((map, unique))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn loc(i: u64) -> Loc {
        Loc {
            file: (i % 7) as u32,
            pos: i,
            version: i as i64,
        }
    }

    #[test]
    fn random_operations_match_a_standard_map() {
        let mut m = LongMap::default();
        let mut model: HashMap<i64, Loc> = HashMap::new();
        let mut x = 0x1234_5678_u64;
        for step in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys, strided and negative ones, so runs collide and wrap.
            let key = ((x % 3_000) as i64 - 1_500) * 1_024;
            match x % 5 {
                0 | 1 => assert_eq!(m.insert(key, loc(step)), model.insert(key, loc(step))),
                2 => assert_eq!(m.remove(key), model.remove(&key)),
                _ => assert_eq!(m.get(key), model.get(&key).copied()),
            }
            assert_eq!(m.len(), model.len());
        }
        for (k, v) in &model {
            assert_eq!(m.get(*k), Some(*v));
        }
        for k in model.keys() {
            assert!(m.remove(*k).is_some());
        }
        assert_eq!(m.len(), 0);
        assert_eq!(m.get(0), None);
    }

    #[test]
    fn a_bulk_load_matches_inserts() {
        for (n, spread) in [
            (0usize, 1i64),
            (1, 1),
            (1_000, 1),
            (50_000, 7_919),
            (3_000, 1 << 40),
        ] {
            let mut bulk = BulkLoad::with_capacity(n);
            let mut model = HashMap::new();
            for i in 0..n as i64 {
                let key = i.wrapping_mul(spread) - 17;
                bulk.push(key, loc(i as u64));
                model.insert(key, loc(i as u64));
            }
            let (mut m, unique) = LongMap::bulk_load(bulk).unwrap();
            assert!(unique);
            assert_eq!(m.len(), model.len());
            for (k, v) in &model {
                assert_eq!(m.get(*k), Some(*v), "key {k}");
            }
            // The map stays a valid map under later changes.
            for (k, v) in &model {
                if k % 3 == 0 {
                    assert_eq!(m.remove(*k), Some(*v));
                }
            }
            for (k, v) in &model {
                assert_eq!(m.get(*k), (k % 3 != 0).then_some(*v));
            }
        }
        // A key pushed twice is reported, once kept.
        let mut bulk = BulkLoad::default();
        for k in [5, 9, 5, 12] {
            bulk.push(k, loc(k as u64));
        }
        let (m, unique) = LongMap::bulk_load(bulk).unwrap();
        assert!(!unique);
        assert_eq!((m.len(), m.get(5)), (3, Some(loc(5))));
    }

    #[test]
    fn a_bulk_load_wraps_runs_at_the_end() {
        // Keys whose homes are the last slots of a small map: their runs wrap to the start.
        let slots = LongMap::slots_for(12);
        let tail: Vec<i64> = (0..1_000_000i64)
            .filter(|&k| LongMap::home_in(k, slots) >= slots - 2)
            .take(6)
            .collect();
        let mut bulk = BulkLoad::default();
        for (i, &k) in tail.iter().enumerate() {
            bulk.push(k, loc(i as u64));
        }
        for k in 0..6i64 {
            bulk.push(-1 - k, loc(100 + k as u64));
        }
        let (m, unique) = LongMap::bulk_load(bulk).unwrap();
        assert!(unique);
        assert_eq!(m.slots(), slots);
        for (i, &k) in tail.iter().enumerate() {
            assert_eq!(m.get(k), Some(loc(i as u64)));
        }
        for k in 0..6i64 {
            assert_eq!(m.get(-1 - k), Some(loc(100 + k as u64)));
        }
    }

    #[test]
    fn locations_at_the_limits_round_trip() {
        let mut m = LongMap::default();
        let far = Loc {
            file: MAX_FILES - 1,
            pos: MAX_POS - 1,
            version: i64::MIN,
        };
        let near = Loc {
            file: 0,
            pos: 0,
            version: i64::MAX,
        };
        m.insert(i64::MIN, far);
        m.insert(0, near);
        assert_eq!((m.get(i64::MIN), m.get(0)), (Some(far), Some(near)));
        assert_eq!(m.remove(i64::MIN), Some(far));
        assert_eq!(m.get(i64::MIN), None);
    }

    #[test]
    fn reserving_keeps_entries_and_the_load_bound() {
        let mut m = LongMap::default();
        for k in 0..10_000 {
            m.insert(k, loc(k as u64));
        }
        m.try_reserve(100_000).unwrap();
        assert!(m.slots() * 3 >= (100_000 + 10_000) * 4);
        for k in 0..10_000 {
            assert_eq!(m.get(k), Some(loc(k as u64)));
            m.prefetch(k);
        }
        assert_eq!(LongMap::default().remove(3), None);
    }
}
