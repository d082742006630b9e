//! Fault injection: API calls that fail at a configured rate, as a loaded or failing
//! kube-apiserver's do, so tests can show a controller converges anyway.
//!
//! Calls are classed by verb (reads: get and list; writes: create, update, patch, delete and
//! the eviction and binding subresources; watches), each class with its own rates. Decisions
//! come from one seeded generator, so a seed and a request order reproduce the same faults.
//! Discovery and health endpoints never fail.
//!
//! # In detail
//!
//! `faults.rs`: `Options::faults`, per verb class (reads, writes, watches) rates of 409 (updates,
//! patches, deletes), 429 and 500/503 (half of the write 5xx after the write landed), watch streams
//! cut, and 410 Gone on re-watch; one seeded generator; counts in `faults_injected()`.
//! `client_without_faults()` gives tests a client the faults never touch. The binary takes the same
//! as flags (`--read-faults 429=0.05,5xx=0.05`, `--watch-drop-rate`, `--graceful-deletion`…).

use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Rates (0.0–1.0) of the faults one class of calls can get.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultRates {
    /// 409 Conflict before the write happens (updates, patches and deletes only: a create's
    /// 409 means AlreadyExists, which the server answers truthfully).
    pub conflict: f64,
    /// 429 TooManyRequests with `Retry-After: 1` (API priority and fairness throttling).
    pub throttle: f64,
    /// 500 or 503 (half each). For writes, half of these happen *after* the write committed:
    /// the client cannot tell whether its write landed, as with a real timeout.
    pub server_error: f64,
}

impl FaultRates {
    fn any(&self) -> bool {
        self.conflict > 0.0 || self.throttle > 0.0 || self.server_error > 0.0
    }
}

impl FromStr for FaultRates {
    type Err = String;

    /// `409=0.05,429=0.05,5xx=0.05` (any subset; each a rate between 0 and 1).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut r = FaultRates::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("fault rate {part:?}: expected KIND=RATE"))?;
            let rate: f64 = v
                .parse()
                .ok()
                .filter(|x: &f64| (0.0..=1.0).contains(x))
                .ok_or_else(|| format!("fault rate {part:?}: {v:?} is not a rate in 0..=1"))?;
            match k {
                "409" => r.conflict = rate,
                "429" => r.throttle = rate,
                "5xx" => r.server_error = rate,
                _ => {
                    return Err(format!(
                        "fault kind {k:?} in {part:?}: expected 409, 429 or 5xx"
                    ));
                }
            }
        }
        Ok(r)
    }
}

/// Where and how often the server fails calls. The default injects nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    /// Seed of the decisions.
    pub seed: u64,
    /// Gets and lists.
    pub reads: FaultRates,
    /// Creates, updates, patches, deletes, evictions and bindings.
    pub writes: FaultRates,
    /// Watch requests (429 and 5xx when the watch is opened).
    pub watches: FaultRates,
    /// Chance, per line a watch sends (events and bookmarks), that the stream is cut there
    /// without an ERROR event, as a restarted apiserver or a broken connection does.
    pub watch_drop: f64,
    /// Chance that a watch from a resourceVersion is answered with 410 Gone (an ERROR event,
    /// as after an etcd compaction): the client must relist.
    pub watch_gone: f64,
    /// The first create of this resource (its plural, `nodeclaims`) is stored and answered
    /// 503, as an API server whose storage write finished after it gave up on it: a client
    /// that retries the create makes a second object unless the name is its own.
    pub lost_create_answer: Option<String>,
}

impl Faults {
    /// Whether any fault can happen.
    pub fn enabled(&self) -> bool {
        self.reads.any()
            || self.writes.any()
            || self.watches.any()
            || self.watch_drop > 0.0
            || self.watch_gone > 0.0
            || self.lost_create_answer.is_some()
    }
}

/// Counts of the faults injected so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// 409s.
    pub conflicts: u64,
    /// 429s.
    pub throttles: u64,
    /// 500s and 503s answered before the call took effect.
    pub server_errors: u64,
    /// 500s and 503s answered after a write committed.
    pub server_errors_after_write: u64,
    /// Watch streams cut.
    pub watch_drops: u64,
    /// Watches answered with 410 Gone.
    pub watch_gones: u64,
}

impl FaultCounts {
    /// All faults together.
    pub fn total(&self) -> u64 {
        self.conflicts
            + self.throttles
            + self.server_errors
            + self.server_errors_after_write
            + self.watch_drops
            + self.watch_gones
    }
}

/// The class of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Read,
    /// A write; `update` is true for updates, patches and deletes (which may get 409).
    Write {
        update: bool,
    },
    Watch,
}

/// What to do with a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Pass,
    /// Answer with this status code without doing anything.
    Fail(u16),
    /// Do the write, then answer with this status code.
    FailAfter(u16),
}

/// The injector: the configuration, a seeded generator and counters.
pub(crate) struct Injector {
    pub faults: Faults,
    rng: Mutex<u64>,
    conflicts: AtomicU64,
    throttles: AtomicU64,
    server_errors: AtomicU64,
    server_errors_after_write: AtomicU64,
    watch_drops: AtomicU64,
    watch_gones: AtomicU64,
    /// Whether [`Faults::lost_create_answer`] was used.
    lost_create_used: std::sync::atomic::AtomicBool,
}

impl Injector {
    pub fn new(faults: Faults) -> Self {
        Injector {
            rng: Mutex::new(faults.seed ^ 0x9e37_79b9_7f4a_7c15),
            faults,
            conflicts: AtomicU64::new(0),
            throttles: AtomicU64::new(0),
            server_errors: AtomicU64::new(0),
            server_errors_after_write: AtomicU64::new(0),
            watch_drops: AtomicU64::new(0),
            watch_gones: AtomicU64::new(0),
            lost_create_used: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether this create (a POST to `path`) is the one [`Faults::lost_create_answer`] names:
    /// the first of its resource. Counted as a server error after the write.
    pub fn loses_create_answer(&self, post: bool, path: &str) -> bool {
        let Some(resource) = &self.faults.lost_create_answer else {
            return false;
        };
        let hit = post
            && path.rsplit('/').next() == Some(resource.as_str())
            && !self.lost_create_used.swap(true, Ordering::Relaxed);
        if hit {
            self.server_errors_after_write
                .fetch_add(1, Ordering::Relaxed);
        }
        hit
    }

    /// A uniform draw in [0, 1) (splitmix64).
    fn draw(&self) -> f64 {
        let mut s = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    fn hit(&self, rate: f64) -> bool {
        rate > 0.0 && self.draw() < rate
    }

    /// Decides the fate of one call.
    pub fn decide(&self, class: Class) -> Verdict {
        let rates = match class {
            Class::Read => self.faults.reads,
            Class::Write { .. } => self.faults.writes,
            Class::Watch => self.faults.watches,
        };
        if matches!(class, Class::Write { update: true }) && self.hit(rates.conflict) {
            self.conflicts.fetch_add(1, Ordering::Relaxed);
            return Verdict::Fail(409);
        }
        if self.hit(rates.throttle) {
            self.throttles.fetch_add(1, Ordering::Relaxed);
            return Verdict::Fail(429);
        }
        if self.hit(rates.server_error) {
            let code = if self.draw() < 0.5 { 500 } else { 503 };
            if matches!(class, Class::Write { .. }) && self.draw() < 0.5 {
                self.server_errors_after_write
                    .fetch_add(1, Ordering::Relaxed);
                return Verdict::FailAfter(code);
            }
            self.server_errors.fetch_add(1, Ordering::Relaxed);
            return Verdict::Fail(code);
        }
        Verdict::Pass
    }

    /// Whether a watch from a resourceVersion gets 410 Gone.
    pub fn watch_gone(&self) -> bool {
        let hit = self.hit(self.faults.watch_gone);
        if hit {
            self.watch_gones.fetch_add(1, Ordering::Relaxed);
        }
        hit
    }

    /// Whether a watch stream is cut before its next line.
    pub fn watch_drop(&self) -> bool {
        let hit = self.hit(self.faults.watch_drop);
        if hit {
            self.watch_drops.fetch_add(1, Ordering::Relaxed);
        }
        hit
    }

    pub fn counts(&self) -> FaultCounts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FaultCounts {
            conflicts: g(&self.conflicts),
            throttles: g(&self.throttles),
            server_errors: g(&self.server_errors),
            server_errors_after_write: g(&self.server_errors_after_write),
            watch_drops: g(&self.watch_drops),
            watch_gones: g(&self.watch_gones),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_bad_input_names_the_part() {
        let r: FaultRates = "409=0.1, 429=0.2,5xx=0.3".parse().unwrap();
        assert_eq!(
            r,
            FaultRates {
                conflict: 0.1,
                throttle: 0.2,
                server_error: 0.3
            }
        );
        assert!("".parse::<FaultRates>().unwrap() == FaultRates::default());
        let e = "429=2".parse::<FaultRates>().unwrap_err();
        assert!(e.contains("429=2") && e.contains("0..=1"), "{e}");
        let e = "404=0.1".parse::<FaultRates>().unwrap_err();
        assert!(e.contains("404"), "{e}");
        assert!(
            "429"
                .parse::<FaultRates>()
                .unwrap_err()
                .contains("KIND=RATE")
        );
    }

    #[test]
    fn a_seed_reproduces_the_decisions_and_rates_are_honoured() {
        let faults = Faults {
            seed: 7,
            writes: FaultRates {
                conflict: 0.1,
                throttle: 0.1,
                server_error: 0.1,
            },
            ..Faults::default()
        };
        let run = || {
            let inj = Injector::new(faults.clone());
            let v: Vec<Verdict> = (0..10_000)
                .map(|_| inj.decide(Class::Write { update: true }))
                .collect();
            (v, inj.counts())
        };
        let (a, counts) = run();
        assert_eq!(a, run().0, "same seed, same faults");
        // 10 % each, applied in turn: about 1000, 900 and 810 of 10 000.
        assert!((850..1150).contains(&counts.conflicts), "{counts:?}");
        assert!((750..1050).contains(&counts.throttles), "{counts:?}");
        let errors = counts.server_errors + counts.server_errors_after_write;
        assert!((650..970).contains(&errors), "{counts:?}");
        assert!(counts.server_errors_after_write > 0 && counts.server_errors > 0);
        // Reads are untouched, and creates never get 409.
        let inj = Injector::new(faults);
        assert!((0..1000).all(|_| inj.decide(Class::Read) == Verdict::Pass));
        assert!(
            (0..1000).all(|_| inj.decide(Class::Write { update: false }) != Verdict::Fail(409))
        );
    }
}
