//! Cloud faults at a rate: a seeded injector the emulated and fake clouds put in front of
//! their calls, so tests and `bench reliability` can show the controller converges when a
//! cloud refuses, throttles, fails and times out.
//!
//! Every cloud API call (one attempt of one provider operation, before the provider's retry
//! layer) draws once: insufficient capacity, throttling, a 5xx or a timeout, at the
//! configured rates, from one seeded generator (the same seed and call order give the same
//! faults). A timeout is the hard case for idempotency: half of them happen *after* the call
//! took effect (the caller cannot tell whether its launch landed), half before.
//!
//! Feature-less: the kwok provider uses it ([`CloudFaultInjector::draw`]), and the AWS and GCP
//! test fakes (the proxy in front of moto, the fake Compute API) answer its
//! [`CloudFaultInjector::pick`] in their own protocols.

use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Action, ProviderError};
use crate::provider::OfferingKey;

/// Rates (each 0.0–1.0, summing to at most 1) of the faults a cloud call can get.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CloudFaultRates {
    /// Launches only: the first candidate offering (the one the cloud tried) refused for
    /// capacity (not retried by the provider: the controller must try other offerings).
    pub insufficient_capacity: f64,
    /// Rate limited (`Throttled`, retried).
    pub throttle: f64,
    /// A 5xx from the cloud API (`Other`, retried).
    pub server_error: f64,
    /// No answer in time (`Other`, retried); half of them after the call took effect.
    pub timeout: f64,
}

impl CloudFaultRates {
    /// The same rate for every kind: `total` split evenly over the four.
    pub fn even(total: f64) -> Self {
        let each = total / 4.0;
        CloudFaultRates {
            insufficient_capacity: each,
            throttle: each,
            server_error: each,
            timeout: each,
        }
    }

    /// The chance that a call gets any fault.
    pub fn total(&self) -> f64 {
        self.insufficient_capacity + self.throttle + self.server_error + self.timeout
    }

    /// Whether any fault can happen.
    pub fn any(&self) -> bool {
        self.total() > 0.0
    }
}

impl FromStr for CloudFaultRates {
    type Err = String;

    /// `ice=0.1,429=0.1,5xx=0.05,timeout=0.05` (any subset), or `all=0.3` split evenly over
    /// the four kinds. Rates are in 0..=1 and sum to at most 1.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut r = CloudFaultRates::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("cloud fault rate {part:?}: expected KIND=RATE"))?;
            let rate: f64 = v
                .parse()
                .ok()
                .filter(|x: &f64| (0.0..=1.0).contains(x))
                .ok_or_else(|| {
                    format!("cloud fault rate {part:?}: {v:?} is not a rate in 0..=1")
                })?;
            match k {
                "ice" => r.insufficient_capacity = rate,
                "429" => r.throttle = rate,
                "5xx" => r.server_error = rate,
                "timeout" => r.timeout = rate,
                "all" => r = CloudFaultRates::even(rate),
                _ => {
                    return Err(format!(
                        "cloud fault kind {k:?} in {part:?}: expected ice, 429, 5xx, timeout or all"
                    ));
                }
            }
        }
        if r.total() > 1.0 + 1e-9 {
            return Err(format!(
                "cloud fault rates {s:?} sum to {:.3}, more than 1",
                r.total()
            ));
        }
        Ok(r)
    }
}

/// Counts of the faults injected so far, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CloudFaultCounts {
    /// Calls drawn (faulted or not).
    pub calls: u64,
    /// Insufficient-capacity refusals.
    pub insufficient_capacity: u64,
    /// Throttles.
    pub throttles: u64,
    /// 5xx answers.
    pub server_errors: u64,
    /// Timeouts before the call took effect.
    pub timeouts_before: u64,
    /// Timeouts after the call took effect.
    pub timeouts_after: u64,
}

impl CloudFaultCounts {
    /// All faults together.
    pub fn total(&self) -> u64 {
        self.insufficient_capacity
            + self.throttles
            + self.server_errors
            + self.timeouts_before
            + self.timeouts_after
    }
}

/// What one call gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Draw {
    /// Make the call normally.
    Pass,
    /// Fail at once with this error; the call has no effect.
    FailBefore(ProviderError),
    /// Make the call, then report this error instead of its result.
    FailAfter(ProviderError),
}

/// The kind of fault one call gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The offering the cloud tried first has no capacity (launches only).
    InsufficientCapacity,
    /// Rate limited.
    Throttle,
    /// A 5xx answer.
    ServerError,
    /// No answer in time; the call had no effect.
    TimeoutBefore,
    /// No answer in time, but the call took effect.
    TimeoutAfter,
}

/// The seeded injector; share one per emulated cloud.
#[derive(Debug)]
pub struct CloudFaultInjector {
    rates: CloudFaultRates,
    state: Mutex<u64>,
    calls: AtomicU64,
    ice: AtomicU64,
    throttles: AtomicU64,
    server_errors: AtomicU64,
    timeouts_before: AtomicU64,
    timeouts_after: AtomicU64,
}

impl CloudFaultInjector {
    /// An injector with `rates`, its decisions seeded by `seed`.
    pub fn new(rates: CloudFaultRates, seed: u64) -> Self {
        CloudFaultInjector {
            rates,
            state: Mutex::new(seed),
            calls: AtomicU64::new(0),
            ice: AtomicU64::new(0),
            throttles: AtomicU64::new(0),
            server_errors: AtomicU64::new(0),
            timeouts_before: AtomicU64::new(0),
            timeouts_after: AtomicU64::new(0),
        }
    }

    /// The configured rates.
    pub fn rates(&self) -> CloudFaultRates {
        self.rates
    }

    /// A uniform draw in `[0, 1)` (SplitMix64 on the shared state).
    fn unit(&self) -> f64 {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The fault one call gets, if any, for fakes that answer in their own protocol (an EC2
    /// error document, a Compute Engine operation error). `can_refuse_capacity`: the call
    /// asks for capacity (a launch naming an offering); other calls draw the capacity rate too
    /// but pass, so the other rates mean the same for every call. Counts the call and its
    /// fault.
    pub fn pick(&self, can_refuse_capacity: bool) -> Option<FaultKind> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if !self.rates.any() {
            return None;
        }
        let r = self.rates;
        let x = self.unit();
        let mut edge = r.insufficient_capacity;
        if x < edge {
            if !can_refuse_capacity {
                return None;
            }
            self.ice.fetch_add(1, Ordering::Relaxed);
            return Some(FaultKind::InsufficientCapacity);
        }
        edge += r.throttle;
        if x < edge {
            self.throttles.fetch_add(1, Ordering::Relaxed);
            return Some(FaultKind::Throttle);
        }
        edge += r.server_error;
        if x < edge {
            self.server_errors.fetch_add(1, Ordering::Relaxed);
            return Some(FaultKind::ServerError);
        }
        edge += r.timeout;
        if x < edge {
            // Which half: the position inside the timeout band, so one draw decides both.
            return Some(if x < edge - r.timeout / 2.0 {
                self.timeouts_before.fetch_add(1, Ordering::Relaxed);
                FaultKind::TimeoutBefore
            } else {
                self.timeouts_after.fetch_add(1, Ordering::Relaxed);
                FaultKind::TimeoutAfter
            });
        }
        None
    }

    /// The fate of one call of `action`, as a provider error. A launch may be refused for
    /// capacity on the first of `offerings` (its candidates, in preference order).
    pub fn draw(&self, action: Action, offerings: &[OfferingKey]) -> Draw {
        let can_refuse = action == Action::Launch && !offerings.is_empty();
        let timeout = || ProviderError::Other {
            action,
            message: "injected fault: the request timed out".into(),
        };
        match self.pick(can_refuse) {
            None => Draw::Pass,
            Some(FaultKind::InsufficientCapacity) => {
                Draw::FailBefore(ProviderError::InsufficientCapacity {
                    action,
                    offerings: offerings[..1].to_vec(),
                })
            }
            Some(FaultKind::Throttle) => Draw::FailBefore(ProviderError::Throttled {
                action,
                retry_after_s: None,
            }),
            Some(FaultKind::ServerError) => Draw::FailBefore(ProviderError::Other {
                action,
                message: "injected fault: 503 Service Unavailable".into(),
            }),
            Some(FaultKind::TimeoutBefore) => Draw::FailBefore(timeout()),
            Some(FaultKind::TimeoutAfter) => Draw::FailAfter(timeout()),
        }
    }

    /// Counts so far.
    pub fn counts(&self) -> CloudFaultCounts {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CloudFaultCounts {
            calls: l(&self.calls),
            insufficient_capacity: l(&self.ice),
            throttles: l(&self.throttles),
            server_errors: l(&self.server_errors),
            timeouts_before: l(&self.timeouts_before),
            timeouts_after: l(&self.timeouts_after),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_by_kind_and_refuse_bad_input_by_name() {
        let r: CloudFaultRates = "ice=0.1,429=0.2,5xx=0.05,timeout=0.05".parse().unwrap();
        assert_eq!(r.insufficient_capacity, 0.1);
        assert_eq!(r.throttle, 0.2);
        assert!((r.total() - 0.4).abs() < 1e-12);
        let all: CloudFaultRates = "all=0.3".parse().unwrap();
        assert!((all.timeout - 0.075).abs() < 1e-12);
        assert!(
            "ice"
                .parse::<CloudFaultRates>()
                .unwrap_err()
                .contains("KIND=RATE")
        );
        assert!(
            "ice=2"
                .parse::<CloudFaultRates>()
                .unwrap_err()
                .contains("\"2\"")
        );
        assert!(
            "oops=0.1"
                .parse::<CloudFaultRates>()
                .unwrap_err()
                .contains("oops")
        );
        assert!(
            "ice=0.6,429=0.6"
                .parse::<CloudFaultRates>()
                .unwrap_err()
                .contains("more than 1")
        );
    }

    #[test]
    fn draws_follow_the_rates_and_the_seed() {
        let offer = [OfferingKey {
            instance_type: "g4dn.xlarge".into(),
            zone: "us-east-1a".into(),
            capacity_type: autoscaler_core::CapacityType::OnDemand,
        }];
        let run = |seed| {
            let f = CloudFaultInjector::new(CloudFaultRates::even(0.3), seed);
            let draws: Vec<Draw> = (0..10_000)
                .map(|_| f.draw(Action::Launch, &offer))
                .collect();
            (draws, f.counts())
        };
        let (a, counts) = run(7);
        assert_eq!(a, run(7).0, "the same seed gives the same faults");
        assert_ne!(a, run(8).0);
        assert_eq!(counts.calls, 10_000);
        let rate = counts.total() as f64 / 10_000.0;
        assert!((0.27..0.33).contains(&rate), "fault rate {rate}");
        for (kind, n) in [
            ("ice", counts.insufficient_capacity),
            ("429", counts.throttles),
            ("5xx", counts.server_errors),
            ("timeout", counts.timeouts_before + counts.timeouts_after),
        ] {
            assert!((600..900).contains(&n), "{kind}: {n} of 10000 at 7.5 %");
        }
        assert!(counts.timeouts_after > 0 && counts.timeouts_before > 0);
        // Capacity refusals are for launches only.
        let f = CloudFaultInjector::new(
            CloudFaultRates {
                insufficient_capacity: 1.0,
                ..Default::default()
            },
            1,
        );
        assert_eq!(f.draw(Action::Delete, &[]), Draw::Pass);
        assert!(matches!(
            f.draw(Action::Launch, &offer),
            Draw::FailBefore(ProviderError::InsufficientCapacity { .. })
        ));
    }
}
