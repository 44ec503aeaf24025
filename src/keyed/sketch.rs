//! The HyperLogLog sketch of `approx_count_distinct`: 4,096 registers (standard error
//! ~1.6%), merged by taking each register's maximum, so merging sketches and then
//! estimating never double-counts a value seen by two batches. Pure.
//!
//! Values are hashed with a fixed function (SplitMix64's finalizer over the integer, or over
//! FNV-1a of the UTF-8 bytes), so sketches written by any floe version merge. Serialized as
//! one format byte then either the 4,096 registers (`1`, dense) or `(u16 index, u8 rank)`
//! triples, little-endian, for the registers that are set (`2`, sparse; smaller while fewer
//! than ~1,365 are set).

use crate::error::{Error, Result};

const P: u32 = 12;
const M: usize = 1 << P;
const DENSE: u8 = 1;
const SPARSE: u8 = 2;

/// A HyperLogLog sketch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hll {
    registers: Box<[u8; M]>,
}

impl Default for Hll {
    fn default() -> Self {
        Self {
            registers: Box::new([0; M]),
        }
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash of an integer value.
pub(crate) fn hash_int(v: i64) -> u64 {
    mix(v as u64)
}

/// The hash of a string (or binary) value.
pub(crate) fn hash_bytes(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

impl Hll {
    /// Adds a value by its hash.
    pub(super) fn add(&mut self, hash: u64) {
        let idx = (hash >> (64 - P)) as usize;
        let rest = hash << P;
        let rank = (rest.leading_zeros() + 1).min(64 - P + 1) as u8;
        if self.registers[idx] < rank {
            self.registers[idx] = rank;
        }
    }

    /// Merges another sketch in.
    pub(super) fn merge(&mut self, other: &Hll) {
        for (a, b) in self.registers.iter_mut().zip(other.registers.iter()) {
            *a = (*a).max(*b);
        }
    }

    /// The estimated number of distinct values.
    pub(super) fn estimate(&self) -> i64 {
        let m = M as f64;
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let mut sum = 0.0;
        let mut zeros = 0;
        for &r in self.registers.iter() {
            sum += 2f64.powi(-i32::from(r));
            if r == 0 {
                zeros += 1;
            }
        }
        let raw = alpha * m * m / sum;
        let e = if raw <= 2.5 * m && zeros > 0 {
            // Linear counting for small cardinalities.
            m * (m / f64::from(zeros)).ln()
        } else {
            raw
        };
        e.round() as i64
    }

    /// The serialized sketch.
    pub(super) fn to_bytes(&self) -> Vec<u8> {
        let set: Vec<(usize, u8)> = self
            .registers
            .iter()
            .enumerate()
            .filter(|(_, r)| **r > 0)
            .map(|(i, r)| (i, *r))
            .collect();
        if 1 + set.len() * 3 < 1 + M {
            let mut out = Vec::with_capacity(1 + set.len() * 3);
            out.push(SPARSE);
            for (i, r) in set {
                out.extend_from_slice(&(i as u16).to_le_bytes());
                out.push(r);
            }
            out
        } else {
            let mut out = Vec::with_capacity(1 + M);
            out.push(DENSE);
            out.extend_from_slice(&self.registers[..]);
            out
        }
    }

    /// A serialized sketch read back (`what` names it in errors).
    pub(super) fn from_bytes(b: &[u8], what: &dyn Fn() -> String) -> Result<Self> {
        let bad = |why: &str| {
            Error::corrupt(format!("{}: not a floe HyperLogLog sketch ({why})", what()))
        };
        let mut h = Hll::default();
        match b.split_first() {
            Some((&DENSE, rest)) if rest.len() == M => h.registers.copy_from_slice(rest),
            Some((&SPARSE, rest)) if rest.len() % 3 == 0 => {
                for t in rest.chunks_exact(3) {
                    let i = usize::from(u16::from_le_bytes([t[0], t[1]]));
                    if i >= M || t[2] > 64 {
                        return Err(bad("register out of range"));
                    }
                    h.registers[i] = t[2];
                }
            }
            _ => return Err(bad("unknown format or length")),
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_within_a_few_percent_and_merging_does_not_double_count() {
        for n in [0i64, 1, 10, 1_000, 50_000] {
            let mut h = Hll::default();
            for v in 0..n {
                h.add(hash_int(v));
                h.add(hash_int(v)); // duplicates do not count
            }
            let e = h.estimate();
            let tol = (n as f64 * 0.05).max(1.0);
            assert!((e - n).abs() as f64 <= tol, "n={n} estimate={e}");
            let back = Hll::from_bytes(&h.to_bytes(), &|| "x".into()).unwrap();
            assert_eq!(back, h);
        }
        // Two overlapping halves: the merged estimate is of the union, not the sum.
        let (mut a, mut b) = (Hll::default(), Hll::default());
        for v in 0..20_000 {
            a.add(hash_int(v));
        }
        for v in 10_000..30_000 {
            b.add(hash_int(v));
        }
        a.merge(&b);
        let e = a.estimate();
        assert!((e - 30_000).abs() < 1_500, "{e}");
        assert_ne!(hash_bytes(b"a"), hash_bytes(b"b"));
        assert!(Hll::from_bytes(&[9, 1], &|| "x".into()).is_err());
    }
}
