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
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The slot `key` starts probing from, for a map of `slots` slots (a power of two).
    fn home_in(key: i64, slots: usize) -> usize {
        (mix(key) as usize) & slots.saturating_sub(1)
    }

    /// The number of slots (0 or a power of two).
    #[cfg(test)]
    pub(super) fn slots(&self) -> usize {
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
    pub(super) fn try_reserve(&mut self, additional: usize) -> std::io::Result<()> {
        let want = self.len.saturating_add(additional);
        if !self.fits(want) {
            self.rehash_into(Slots::new(Self::slots_for(want))?);
        }
        Ok(())
    }

    /// [`Self::try_reserve`], aborting like a standard collection when out of memory.
    #[allow(clippy::panic, reason = "out of memory, as std's collections abort")]
    pub(super) fn reserve(&mut self, additional: usize) {
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

    /// Every key held, in slot order.
    pub(super) fn keys(&self) -> impl Iterator<Item = i64> + '_ {
        self.slots
            .get()
            .iter()
            .filter(|s| !s.vacant())
            .map(|s| s.key)
    }

    /// Every location held, in slot order.
    pub(super) fn locs(&self) -> impl Iterator<Item = Loc> + '_ {
        self.slots
            .get()
            .iter()
            .filter(|s| !s.vacant())
            .map(|s| s.loc())
    }

    /// `key`'s location.
    pub(super) fn get(&self, key: i64) -> Option<Loc> {
        if self.len == 0 {
            return None;
        }
        self.find(key).ok().map(|i| self.slots.get()[i].loc())
    }

    /// Starts loading `key`'s home slot into the cache (a batch of lookups calls it some
    /// keys ahead).
    #[inline]
    pub(super) fn prefetch(&self, key: i64) {
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
    pub(super) fn insert(&mut self, key: i64, loc: Loc) -> Option<Loc> {
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
    pub(super) fn remove(&mut self, key: i64) -> Option<Loc> {
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
    pub(super) fn with_capacity(n: usize) -> Self {
        let mut entries = Vec::new();
        let _ = entries.try_reserve_exact(n);
        Self { entries }
    }

    /// Adds an entry (file id below [`MAX_FILES`], position below [`MAX_POS`]).
    pub(super) fn push(&mut self, key: i64, loc: Loc) {
        self.entries.push(Slot::new(key, loc));
    }
}

/// Radix passes sort by at most this many bits each.
const RADIX_BITS: u32 = 8;

/// A bulk load's sort first scatters entries into buckets by this many top bits of their
/// home (1,024 buckets: a 10M-entry sort's bucket and its second buffer fit in L2).
const BUCKET_BITS: u32 = 10;

/// Entries below which a bulk load stays on one thread.
const PARALLEL_ENTRIES: usize = 1 << 16;

impl LongMap {
    /// A map of `bulk`'s entries, and whether every key was pushed once (when not, the map
    /// holds the first entry pushed of each key).
    ///
    /// The entries are radix-sorted by their home slot and laid down in that order, each in
    /// the first free slot from its home: sequential passes over the map instead of one
    /// cache (and TLB) miss per insert, which is what made building a 10M-key index cost
    /// over a second. Sorting and laying down are split between two threads.
    pub(super) fn bulk_load(bulk: BulkLoad) -> std::io::Result<(LongMap, bool)> {
        let mut entries = bulk.entries;
        let n_slots = Self::slots_for(entries.len());
        let mut map = LongMap {
            slots: Slots::new(n_slots)?,
            len: 0,
        };
        let home = |s: &Slot| Self::home_in(s.key, n_slots);
        let n = entries.len();
        let parallel = n >= PARALLEL_ENTRIES;
        // The map's own memory (more slots than entries) is the sort's second buffer: no
        // more fresh memory to fault in than the map itself.
        let bits = n_slots.trailing_zeros();
        sort_by_home(
            &mut entries,
            &mut map.slots.get_mut()[..n],
            bits,
            &home,
            parallel,
        );
        // Each half of the slots laid down from the entries whose home is in it; a run that
        // would cross the half's end is inserted afterwards, as inserts do.
        let split = if parallel { n_slots / 2 } else { n_slots };
        let first_hi = entries.partition_point(|s| home(s) < split);
        let (e_lo, e_hi) = entries.split_at(first_hi);
        let (s_lo, s_hi) = map.slots.get_mut().split_at_mut(split);
        let (lo, hi) = both(
            parallel,
            || lay_down(s_lo, 0, e_lo, n, &home),
            || lay_down(s_hi, split, e_hi, n, &home),
        );
        map.len = lo.placed + hi.placed;
        let mut unique = lo.unique && hi.unique;
        for s in lo.overflow.into_iter().chain(hi.overflow) {
            if map.find(s.key).is_ok() {
                unique = false;
            } else {
                map.insert_slot(s);
            }
        }
        Ok((map, unique))
    }
}

/// Runs `a` and `b`, on two threads when `parallel`.
fn both<A: Send, B: Send>(
    parallel: bool,
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    if !parallel {
        return (a(), b());
    }
    std::thread::scope(|scope| {
        let b = scope.spawn(b);
        let a = a();
        (a, b.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    })
}

/// What [`lay_down`] did.
struct LaidDown {
    placed: usize,
    unique: bool,
    /// Entries whose run would cross the end of the slots given.
    overflow: Vec<Slot>,
}

/// Lays `entries` (sorted by home, every home in `base..base + slots.len()`) into `slots`
/// (the map's slots from `base`; those below `scratch` held sort scratch and are cleared
/// first), each in the first free slot from its home. A later copy of a key is dropped.
fn lay_down(
    slots: &mut [Slot],
    base: usize,
    entries: &[Slot],
    scratch: usize,
    home: &impl Fn(&Slot) -> usize,
) -> LaidDown {
    let used = scratch.saturating_sub(base).min(slots.len());
    slots[..used].fill(VACANT);
    let mut out = LaidDown {
        placed: 0,
        unique: true,
        overflow: Vec::new(),
    };
    // Positions relative to `base`; `group` is where the current home's run starts.
    let (mut cursor, mut group, mut group_home) = (0usize, 0usize, usize::MAX);
    for s in entries {
        let h = home(s) - base;
        if h != group_home {
            (group, group_home) = (h.max(cursor), h);
        }
        let p = h.max(cursor);
        if p >= slots.len() {
            out.overflow.push(*s);
            continue;
        }
        // Copies of a key share a home, so they are in the current group.
        if slots[group..p].iter().any(|o| o.key == s.key) {
            out.unique = false;
            continue;
        }
        slots[p] = *s;
        cursor = p + 1;
        out.placed += 1;
    }
    out
}

/// Sorts `entries` by `home` (a value of `bits` bits), stably, with `scratch` (as long as
/// `entries`) as the second buffer: each half of the entries scattered into buckets by the
/// top [`BUCKET_BITS`] (one thread each), then each bucket — its pieces from both halves, in
/// order — radix-sorted by the remaining bits in the caches (the buckets split between two
/// threads).
fn sort_by_home(
    entries: &mut [Slot],
    scratch: &mut [Slot],
    bits: u32,
    home: &(impl Fn(&Slot) -> usize + Sync),
    parallel: bool,
) {
    let n = entries.len();
    let top = bits.min(BUCKET_BITS);
    let low = bits - top;
    let buckets = 1usize << top;
    let bucket = |s: &Slot| home(s) >> low;
    let half = if parallel { n / 2 } else { n };
    let (in_a, in_b) = entries.split_at(half);
    let (sc_a, sc_b) = scratch.split_at_mut(half);
    // Bucket bounds within each half's scattered entries.
    let scatter = |from: &[Slot], to: &mut [Slot]| {
        let mut end = vec![0usize; buckets];
        radix_pass(from.iter(), to, bucket, &mut end);
        let mut bounds = vec![0usize];
        bounds.extend(end);
        bounds
    };
    let (ba, bb) = both(parallel, || scatter(in_a, sc_a), || scatter(in_b, sc_b));
    let (sc_a, sc_b) = (&*sc_a, &*sc_b);
    // Bucket d: sc_a[ba[d]..ba[d + 1]] then sc_b[bb[d]..bb[d + 1]], into
    // entries[start(d)..start(d + 1)].
    let start = |d: usize| ba[d] + bb[d];
    let largest = (0..buckets)
        .map(|d| start(d + 1) - start(d))
        .max()
        .unwrap_or(0);
    let mid = (0..=buckets)
        .min_by_key(|&d| start(d).abs_diff(n / 2))
        .unwrap_or(0);
    let sort_buckets = |out: &mut [Slot], range: std::ops::Range<usize>| {
        let offset = start(range.start);
        let mut tmp = vec![VACANT; largest];
        let mut count = vec![0usize; 1 << RADIX_BITS];
        for d in range {
            let into = &mut out[start(d) - offset..start(d + 1) - offset];
            let pieces = sc_a[ba[d]..ba[d + 1]].iter().chain(&sc_b[bb[d]..bb[d + 1]]);
            sort_bucket(pieces, into, &mut tmp, low, home, &mut count);
        }
    };
    let (out_lo, out_hi) = entries.split_at_mut(start(mid));
    both(
        parallel,
        || sort_buckets(out_lo, 0..mid),
        || sort_buckets(out_hi, mid..buckets),
    );
}

/// Sorts the entries of `from` by the low `low` bits of `home` (stably) into `into`, with
/// `tmp` (at least as long) as the second buffer.
fn sort_bucket<'a>(
    from: impl Iterator<Item = &'a Slot> + Clone,
    into: &mut [Slot],
    tmp: &mut [Slot],
    low: u32,
    home: &impl Fn(&Slot) -> usize,
    count: &mut [usize],
) {
    let m = into.len();
    if low == 0 {
        for (to, s) in into.iter_mut().zip(from) {
            *to = *s;
        }
        return;
    }
    let tmp = &mut tmp[..m];
    let passes = low.div_ceil(RADIX_BITS);
    let width = low.div_ceil(passes);
    let mask = (1usize << width) - 1;
    let digit = |pass: u32| move |s: &Slot| (home(s) >> (pass * width)) & mask;
    let count = &mut count[..1 << width];
    // The destinations alternate so that the last pass writes `into`.
    let into_first = passes % 2 == 1;
    if into_first {
        radix_pass(from, into, digit(0), count);
    } else {
        radix_pass(from, tmp, digit(0), count);
    }
    for pass in 1..passes {
        if (pass % 2 == 0) == into_first {
            radix_pass(tmp.iter(), into, digit(pass), count);
        } else {
            radix_pass(into.iter(), tmp, digit(pass), count);
        }
    }
}

/// One stable counting-sort pass of `from` into `to` by `digit` (below `count.len()`);
/// leaves in `count` each digit's end in `to`.
fn radix_pass<'a>(
    from: impl Iterator<Item = &'a Slot> + Clone,
    to: &mut [Slot],
    digit: impl Fn(&Slot) -> usize,
    count: &mut [usize],
) {
    count.fill(0);
    for s in from.clone() {
        count[digit(s)] += 1;
    }
    let mut sum = 0;
    for c in count.iter_mut() {
        (*c, sum) = (sum, sum + *c);
    }
    for s in from {
        let d = digit(s);
        to[count[d]] = *s;
        count[d] += 1;
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
            (300_000, 104_729),
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
    fn sorting_by_home_is_a_stable_sort() {
        // Few bits (no second stage), the two-thread threshold either side, skewed homes,
        // buckets sorted in three passes.
        for (n, bits, skew) in [
            (100, 6, 1),
            (5_000, 13, 1),
            (200_000, 19, 1),
            (200_000, 18, 9),
            (70_000, 27, 1),
        ] {
            let mut x = 0x9e37_79b9_u64;
            let mut entries: Vec<Slot> = (0..n as u64)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // The key carries the home; the position, the order pushed.
                    let home = (x % (1 << bits)) / skew * skew;
                    Slot::new(home as i64, loc(i))
                })
                .collect();
            let mut want = entries.clone();
            want.sort_by_key(|s| s.key);
            let mut scratch = vec![VACANT; n];
            sort_by_home(
                &mut entries,
                &mut scratch,
                bits,
                &|s: &Slot| s.key as usize,
                n >= PARALLEL_ENTRIES,
            );
            let got: Vec<_> = entries.iter().map(|s| (s.key, s.at)).collect();
            let want: Vec<_> = want.iter().map(|s| (s.key, s.at)).collect();
            assert!(got == want, "n {n}, {bits} bits");
        }
    }

    #[test]
    fn a_bulk_load_keeps_the_first_copy_of_each_key() {
        let n = 150_000i64;
        let mut bulk = BulkLoad::default();
        for copy in 0..2u64 {
            for k in 0..n {
                bulk.push(k * 31, loc(k as u64 * 2 + copy));
            }
        }
        let (m, unique) = LongMap::bulk_load(bulk).unwrap();
        assert!(!unique);
        assert_eq!(m.len(), n as usize);
        for k in 0..n {
            assert_eq!(m.get(k * 31), Some(loc(k as u64 * 2)), "key {k}");
        }
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
