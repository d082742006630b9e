//! Time for the provider's caches, as a small trait so that tests can move it by hand.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch; the caches' only notion of time.
pub trait Clock: Send + Sync {
    /// The current time in seconds.
    fn now_s(&self) -> i64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_s(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
    }
}

/// A clock that moves only when told; clones share the time.
#[derive(Clone, Debug, Default)]
pub struct FakeClock(Arc<AtomicI64>);

impl FakeClock {
    /// A clock at `now_s`.
    pub fn new(now_s: i64) -> Self {
        FakeClock(Arc::new(AtomicI64::new(now_s)))
    }

    /// Moves the clock forward by `s` seconds.
    pub fn advance(&self, s: i64) {
        self.0.fetch_add(s, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now_s(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_when_told() {
        let c = FakeClock::new(100);
        let d = c.clone();
        d.advance(5);
        assert_eq!(c.now_s(), 105);
        assert!(SystemClock.now_s() > 1_700_000_000);
    }
}
