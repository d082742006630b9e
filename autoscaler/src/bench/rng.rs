//! A tiny seeded generator (SplitMix64), so every suite is the same on every run and machine.
//!
//! Statistical quality far beyond what picking pod sizes needs; written here rather than taken
//! from a crate so the generated workloads can never change under a dependency upgrade.

/// SplitMix64 (Steele, Lea and Flood, 2014).
#[derive(Clone, Debug)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator started at `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`); the modulo bias is below 2^-40 for the small `n` used here.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        // `n` fits in u64 on every supported target, and the result is below `n`.
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// A uniformly chosen element of a non-empty slice.
    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// True with probability `percent`/100.
    pub(crate) fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// True with probability `p` (below 0: never; 1 or more: always).
    // Only `bench reliability` draws events, and it needs the `controller` feature.
    #[cfg_attr(not(feature = "controller"), allow(dead_code))]
    pub(crate) fn happens(&mut self, p: f64) -> bool {
        // The top 53 bits: uniform in [0, 1) at f64's full precision.
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs of SplitMix64 seeded with 1234567 (from the reference implementation).
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut r = SplitMix64::new(7);
        for _ in 0..1000 {
            let v = r.range(10, 50);
            assert!((10..=50).contains(&v));
        }
    }

    #[test]
    fn happens_at_its_probability() {
        let mut r = SplitMix64::new(11);
        let hits = (0..100_000).filter(|_| r.happens(0.3)).count();
        // 0.3 of 100,000 draws: the standard deviation is about 145.
        assert!((29_000..=31_000).contains(&hits), "{hits}");
        assert!((0..1000).all(|_| !r.happens(0.0)));
        assert!((0..1000).all(|_| r.happens(1.0)));
    }
}
