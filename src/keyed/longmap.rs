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

/// A slot's `file` when the slot is empty.
const EMPTY: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Slot {
    key: i64,
    loc: Loc,
}

const VACANT: Slot = Slot {
    key: 0,
    loc: Loc {
        file: EMPTY,
        pos: 0,
        version: 0,
    },
};

/// Slots are at most this full (linear probing slows down sharply above ~3/4).
const MAX_LOAD_NUM: usize = 3;
const MAX_LOAD_DEN: usize = 4;

/// Map from `i64` keys to [`Loc`]s (file ids below `u32::MAX`).
#[derive(Default)]
pub(super) struct LongMap {
    slots: Vec<Slot>,
    len: usize,
}

impl std::fmt::Debug for LongMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LongMap")
            .field("len", &self.len)
            .field("slots", &self.slots.len())
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
    pub fn home_in(key: i64, slots: usize) -> usize {
        (mix(key) as usize) & slots.saturating_sub(1)
    }

    /// The number of slots (0 or a power of two).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    fn home(&self, key: i64) -> usize {
        Self::home_in(key, self.slots.len())
    }

    fn slots_for(entries: usize) -> usize {
        (entries.saturating_mul(MAX_LOAD_DEN) / MAX_LOAD_NUM + 1)
            .max(16)
            .next_power_of_two()
    }

    /// Whether `entries` fit in the slots within the load bound.
    fn fits(&self, entries: usize) -> bool {
        entries.saturating_mul(MAX_LOAD_DEN) <= self.slots.len() * MAX_LOAD_NUM
    }

    /// Moves every entry into `slots` (all vacant).
    fn rehash_into(&mut self, slots: Vec<Slot>) {
        let old = std::mem::replace(&mut self.slots, slots);
        self.len = 0;
        for s in old.into_iter().filter(|s| s.loc.file != EMPTY) {
            self.insert(s.key, s.loc);
        }
    }

    /// Makes room for `additional` more entries without growing; an error when the memory
    /// cannot be had (the map is unchanged).
    pub fn try_reserve(
        &mut self,
        additional: usize,
    ) -> Result<(), std::collections::TryReserveError> {
        let want = self.len.saturating_add(additional);
        if !self.fits(want) {
            let n = Self::slots_for(want);
            let mut slots = Vec::new();
            slots.try_reserve_exact(n)?;
            slots.resize(n, VACANT);
            self.rehash_into(slots);
        }
        Ok(())
    }

    /// [`Self::try_reserve`], aborting like a standard collection when out of memory.
    pub fn reserve(&mut self, additional: usize) {
        let want = self.len.saturating_add(additional);
        if !self.fits(want) {
            self.rehash_into(vec![VACANT; Self::slots_for(want)]);
        }
    }

    /// The slot holding `key`, or the empty slot where it would go.
    fn find(&self, key: i64) -> Result<usize, usize> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let s = &self.slots[i];
            if s.loc.file == EMPTY {
                return Err(i);
            }
            if s.key == key {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// `key`'s location.
    pub fn get(&self, key: i64) -> Option<&Loc> {
        if self.len == 0 {
            return None;
        }
        self.find(key).ok().map(|i| &self.slots[i].loc)
    }

    /// Starts loading `key`'s home slot into the cache (a batch of lookups calls it some
    /// keys ahead).
    #[inline]
    pub fn prefetch(&self, key: i64) {
        if self.slots.is_empty() {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let p = &self.slots[self.home(key)] as *const Slot as *const i8;
            // SAFETY: a prefetch is a hint; it reads nothing and cannot fault.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p) };
        }
    }

    /// Sets `key`'s location; returns the one it replaced.
    pub fn insert(&mut self, key: i64, loc: Loc) -> Option<Loc> {
        debug_assert!(loc.file != EMPTY);
        self.reserve(1);
        match self.find(key) {
            Ok(i) => Some(std::mem::replace(&mut self.slots[i].loc, loc)),
            Err(i) => {
                self.slots[i] = Slot { key, loc };
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
        let mask = self.slots.len() - 1;
        let mut hole = self.find(key).ok()?;
        let removed = self.slots[hole].loc;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s.loc.file == EMPTY {
                break;
            }
            let home = self.home(s.key);
            // The entry at j may move to the hole unless its home lies cyclically in
            // (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = VACANT;
        self.len -= 1;
        Some(removed)
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
                _ => assert_eq!(m.get(key), model.get(&key)),
            }
            assert_eq!(m.len(), model.len());
        }
        for (k, v) in &model {
            assert_eq!(m.get(*k), Some(v));
        }
        for k in model.keys() {
            assert!(m.remove(*k).is_some());
        }
        assert_eq!(m.len(), 0);
        assert_eq!(m.get(0), None);
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
            assert_eq!(m.get(k), Some(&loc(k as u64)));
            m.prefetch(k);
        }
        assert_eq!(LongMap::default().remove(3), None);
    }
}
