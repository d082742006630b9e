//! A fast, fixed hash for the planner's lookup maps, whose keys (pod classes, demand and scan
//! keys, selectors, node and pool names) are hashed once per pending pod or per node.
//!
//! The standard library's default (SipHash, randomly keyed) was a quarter of the setup of a
//! 50,000-pod plan: its cost per `write` call dominates keys made of many short fields. This
//! one mixes a machine word per step (multiply and rotate, as Firefox's and rustc's hashers
//! do) and is not keyed: nothing about a plan depends on a random seed. It does not resist
//! chosen collisions, which only the cluster's own pod specs could supply, and those cost
//! lookups, never a wrong answer.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The multiplier: odd, with its bits spread (2^64 over the golden ratio, rounded to odd).
const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// The hasher state; see the module documentation.
#[derive(Default, Clone, Copy)]
pub(super) struct KeyHasher(u64);

impl KeyHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // The map takes its bucket from the low bits and its tag from the top seven: fold the
        // well-mixed high half down so both are spread.
        self.0 ^ (self.0 >> 29)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            // The length keeps "a\0" and "a" apart within one word.
            self.mix(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
}

/// A map hashed with [`KeyHasher`].
pub(super) type KeyMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(t: &T) -> u64 {
        BuildHasherDefault::<KeyHasher>::default().hash_one(t)
    }

    #[test]
    fn equal_keys_hash_alike_and_near_keys_apart() {
        assert_eq!(hash(&("pool-a", 3usize)), hash(&("pool-a", 3usize)));
        let keys = [
            hash(&"a"),
            hash(&"b"),
            hash(&"ab"),
            hash(&"a\0"),
            hash(&("a", "b")),
            hash(&("ab", "")),
            hash(&"abcdefgh"),
            hash(&"abcdefgh\0"),
            hash(&1usize),
            hash(&2usize),
        ];
        let distinct: std::collections::BTreeSet<u64> = keys.iter().copied().collect();
        assert_eq!(distinct.len(), keys.len(), "{keys:x?}");
    }

    #[test]
    fn small_integers_spread_over_buckets_and_tags() {
        // A map of 1,024 buckets reads the low ten bits; its tags the top seven.
        let low: std::collections::BTreeSet<u64> =
            (0..1024usize).map(|i| hash(&i) & 1023).collect();
        let top: std::collections::BTreeSet<u64> = (0..1024usize).map(|i| hash(&i) >> 57).collect();
        assert!(
            low.len() > 600,
            "{} of 1,024 low-bit buckets used",
            low.len()
        );
        assert_eq!(top.len(), 128, "{} of 128 tags used", top.len());
    }
}
