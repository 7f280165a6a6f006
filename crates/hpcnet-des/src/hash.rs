//! A fast, deterministic hasher for maps keyed by integers (ids, ranks, sequence numbers).
//!
//! The standard library's `RandomState` hashes with SipHash under a random key: safe against
//! adversarial keys, but slow for the simulator's integer keys and different from run to run.
//! [`IdHasher`] folds each written word into the state with a rotate, xor and multiply by an
//! odd constant (the FxHash scheme of rustc); keys are not adversarial here. Iteration order of
//! an [`IdMap`] is still unspecified — code that needs an order sorts or uses a B-tree.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash-style hasher for integer keys.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl IdHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
    }
}

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

/// A hash map with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
/// A hash set with [`IdHasher`].
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    #[test]
    fn hashes_are_deterministic_and_spread_small_integers() {
        let b = BuildHasherDefault::<IdHasher>::default();
        let h = |x: u64| b.hash_one(x);
        assert_eq!(h(7), h(7));
        let hs: IdSet<u64> = (0..1000u64).map(h).collect();
        assert_eq!(hs.len(), 1000, "no collisions among small keys");
        // Tuples and byte strings hash through `write`.
        let t = |a: u64, c: u64| {
            let mut s = IdHasher::default();
            (a, c).hash(&mut s);
            s.finish()
        };
        assert_ne!(t(1, 2), t(2, 1));
        let mut m: IdMap<u64, u64> = IdMap::default();
        for i in 0..100 {
            m.insert(i, i * i);
        }
        assert_eq!(m[&9], 81);
    }
}
