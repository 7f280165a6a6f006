//! Fast, deterministic hash maps for keys that are integers (ids, ranks, sequence numbers).
//!
//! The standard library's `RandomState` hashes with SipHash under a random key: safe against
//! adversarial keys, but slow for the simulator's integer keys and different from run to run.
//! These aliases use rustc's Fx hasher (`rustc-hash`): unkeyed, so the same keys hash the same in
//! every run, and a multiply and a rotate per word. Keys here are not adversarial. Iteration
//! order of an [`IdMap`] is still unspecified — code that needs an order sorts or uses a B-tree.

pub use rustc_hash::FxBuildHasher as IdBuildHasher;

/// A hash map with the Fx hasher.
pub type IdMap<K, V> = rustc_hash::FxHashMap<K, V>;
/// A hash set with the Fx hasher.
pub type IdSet<K> = rustc_hash::FxHashSet<K>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_find_what_was_inserted_and_hash_the_same_in_every_run() {
        let mut m: IdMap<u64, u64> = IdMap::default();
        for k in 0..10_000u64 {
            m.insert(k * 7919, k);
        }
        assert_eq!(m.len(), 10_000);
        assert!((0..10_000u64).all(|k| m[&(k * 7919)] == k));
        use std::hash::BuildHasher;
        let a = IdBuildHasher.hash_one(12345u64);
        let b = IdBuildHasher.hash_one(12345u64);
        assert_eq!(a, b, "unkeyed: the same in every hasher and run");
    }
}
