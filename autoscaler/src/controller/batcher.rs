//! The batcher: gathers unschedulable pods into one planning round.
//!
//! A pure state machine fed `now` (milliseconds on any monotonic clock). A window opens when a
//! pod shows up that the previous round did not see (or when something [`Batcher::flag`]s that
//! the world changed, e.g. a claim failed); it closes after `idle` without another new pod, or
//! after `max` in all, whichever comes first. Closing hands back every pod pending *then*, so
//! a round always plans the whole backlog, not just the newcomers. Pods a round could not help
//! are planned again every `replan` while they stay pending, so that a change no event
//! announces (a NodePool's limit raised, a PodGroup's minimum lowered, room freed elsewhere)
//! reaches them, as Cluster Autoscaler's scan interval does.
//!
//! Before a pod reaches the batcher, [`ScaleUpDelays::acted_on`] holds back young pods:
//! `--new-pod-scale-up-delay` per pod, and `--gpu-pod-scale-up-delay` for the GPU pods as a
//! group (the Cluster Autoscaler's extra wait for GPU pods).

use std::collections::BTreeSet;

use autoscaler_core::model::PodKey;

/// Batching windows, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchConfig {
    /// Close after this long without a new pod (default 1 s).
    pub idle_ms: u64,
    /// Close after this long in all (default 10 s).
    pub max_ms: u64,
    /// Plan pods still pending again this long after the last round (default 10 s).
    pub replan_ms: u64,
}

impl Default for BatchConfig {
    /// The flags' defaults (the core's [`autoscaler_core::cadence`] texts).
    fn default() -> Self {
        let c = autoscaler_core::cadence::Cadence::default();
        let ms = |s: i64| u64::try_from(s).unwrap_or(0) * 1000;
        BatchConfig {
            idle_ms: ms(c.batch_idle_s),
            max_ms: ms(c.batch_max_s),
            replan_ms: ms(c.replan_s),
        }
    }
}

/// The window state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Window {
    /// Nothing new since the last round.
    Closed,
    /// Gathering since `opened`; the last new pod came at `last`.
    Open {
        /// When the first new pod (or flag) arrived.
        opened: u64,
        /// When the latest one arrived.
        last: u64,
    },
}

/// The batcher.
#[derive(Clone, Debug)]
pub struct Batcher {
    config: BatchConfig,
    window: Window,
    /// Pods the last closed round handed out; only pods outside it open a window.
    seen: BTreeSet<PodKey>,
    /// Pods that arrived while the window is open.
    arrived: BTreeSet<PodKey>,
    /// When the last round closed.
    closed_at: u64,
    /// The last round wrote only part of its plan: the next step hands the pods back at once.
    resume: bool,
    /// [`Batcher::step`] has run.
    stepped: bool,
}

impl Batcher {
    /// A closed batcher.
    pub fn new(config: BatchConfig) -> Self {
        Batcher {
            config,
            window: Window::Closed,
            seen: BTreeSet::new(),
            arrived: BTreeSet::new(),
            closed_at: 0,
            resume: false,
            stepped: false,
        }
    }

    /// The current window.
    pub fn window(&self) -> &Window {
        &self.window
    }

    fn touch(&mut self, now: u64) {
        self.window = match self.window {
            Window::Closed => Window::Open {
                opened: now,
                last: now,
            },
            Window::Open { opened, .. } => Window::Open { opened, last: now },
        };
    }

    /// Something other than a new pod calls for a round (a claim failed or was deleted, a
    /// NodePool changed): opens or extends the window as a new pod would.
    pub fn flag(&mut self, now: u64) {
        self.touch(now);
    }

    /// The round just closed left part of its plan for later (`--max-claims-per-round`): the
    /// next [`Batcher::step`] with pods pending closes at once, without a window, so that a
    /// backlog is written slice after slice at the loop's pace.
    pub fn resume(&mut self) {
        self.resume = true;
    }

    /// Whether [`Batcher::step`] has run: [`Batcher::start_with`] is for the step before.
    pub fn stepped(&self) -> bool {
        self.stepped
    }

    /// A new leader's first look at the pods already pending: when the youngest of them became
    /// unschedulable at least `idle` ago by its own timestamp (`youngest_age_ms`), they stopped
    /// arriving before this process started, a window would gather nothing more, and the next
    /// [`Batcher::step`] hands them back at once. `None` (a pod without a timestamp, or none
    /// pending) keeps the usual window.
    pub fn start_with(&mut self, youngest_age_ms: Option<u64>) {
        if youngest_age_ms.is_some_and(|age| age >= self.config.idle_ms) {
            self.resume = true;
        }
    }

    /// Feeds the pods pending at `now`; returns them all when the window closes.
    pub fn step(&mut self, now: u64, pending: &BTreeSet<PodKey>) -> Option<BTreeSet<PodKey>> {
        self.stepped = true;
        // Pods that left (bound, deleted) are forgotten, so that a pod coming back is new.
        self.seen.retain(|k| pending.contains(k));
        self.arrived.retain(|k| pending.contains(k));
        let mut new = false;
        for k in pending {
            if !self.seen.contains(k) && self.arrived.insert(k.clone()) {
                new = true;
            }
        }
        if std::mem::take(&mut self.resume) && !pending.is_empty() {
            return Some(self.close(now, pending));
        }
        let backlog_due = self.window == Window::Closed
            && !pending.is_empty()
            && now.saturating_sub(self.closed_at) >= self.config.replan_ms;
        if new || backlog_due {
            self.touch(now);
        }
        let Window::Open { opened, last } = self.window else {
            return None;
        };
        let idle = now.saturating_sub(last) >= self.config.idle_ms;
        let full = now.saturating_sub(opened) >= self.config.max_ms;
        if !(idle || full) {
            return None;
        }
        Some(self.close(now, pending))
    }

    /// Closes the window: `pending` are handed out, and seen.
    fn close(&mut self, now: u64, pending: &BTreeSet<PodKey>) -> BTreeSet<PodKey> {
        self.window = Window::Closed;
        self.closed_at = now;
        self.seen = pending.clone();
        self.arrived.clear();
        pending.clone()
    }
}

/// The scale-up delays for young pods, in milliseconds (0: off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScaleUpDelays {
    /// `--new-pod-scale-up-delay`: a pod younger than this is not acted on.
    pub new_pod_ms: i64,
    /// `--gpu-pod-scale-up-delay`: while the oldest GPU pod (of those past the first delay) is
    /// younger than this, no GPU pod is acted on; then all of them are, together. This is the
    /// Cluster Autoscaler's 30-second wait for GPU pods ("nodes with GPU are expensive": wait
    /// for more pods to make a better-informed scale-up), which the Cluster Autoscaler applies
    /// to the whole scale-up; here pods without GPUs are never held by it.
    pub gpu_pod_ms: i64,
}

/// One unschedulable pod as the delays see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Young<'a> {
    /// The pod.
    pub key: &'a PodKey,
    /// Its creation, ms since the epoch (`None`: unknown, taken as old).
    pub created_ms: Option<i64>,
    /// Whether it requests a GPU-class resource (or a GPU share).
    pub gpu: bool,
}

impl ScaleUpDelays {
    /// Per pod of `pods`, in order: whether it is acted on at `now_ms`. Pure.
    pub fn acted_on(&self, pods: &[Young<'_>], now_ms: i64) -> Vec<bool> {
        let old_enough = |p: &Young<'_>, delay: i64| {
            delay <= 0
                || p.created_ms
                    .is_none_or(|c| c <= now_ms.saturating_sub(delay))
        };
        let past_first: Vec<bool> = pods
            .iter()
            .map(|p| old_enough(p, self.new_pod_ms))
            .collect();
        let gpu_wait = pods
            .iter()
            .zip(&past_first)
            .filter(|(p, past)| **past && p.gpu)
            .map(|(p, _)| p)
            .min_by_key(|p| p.created_ms.unwrap_or(i64::MIN))
            .is_some_and(|oldest| !old_enough(oldest, self.gpu_pod_ms));
        pods.iter()
            .zip(past_first)
            .map(|(p, past)| past && !(p.gpu && gpu_wait))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{ScaleUpDelays, Young};

    /// `--new-pod-scale-up-delay` per pod; `--gpu-pod-scale-up-delay` on the GPU pods as a
    /// group, from the oldest of them.
    #[test]
    fn young_pods_wait_and_gpu_pods_wait_for_the_oldest_of_them() {
        let keys: Vec<PodKey> = ["cpu-old", "cpu-new", "gpu-a", "gpu-b", "gpu-c"]
            .iter()
            .map(|n| PodKey {
                namespace: "default".into(),
                name: (*n).into(),
            })
            .collect();
        let pods = |created: [Option<i64>; 5]| -> Vec<Young<'_>> {
            keys.iter()
                .zip(created)
                .map(|(key, created_ms)| Young {
                    key,
                    created_ms,
                    gpu: key.name.starts_with("gpu"),
                })
                .collect()
        };
        let names = |acted: Vec<bool>| {
            let mut n: Vec<&str> = keys
                .iter()
                .zip(acted)
                .filter(|(_, a)| *a)
                .map(|(k, _)| k.name.as_str())
                .collect();
            n.sort_unstable();
            n.join(",")
        };
        let d = |new_pod_ms, gpu_pod_ms| ScaleUpDelays {
            new_pod_ms,
            gpu_pod_ms,
        };
        let t = [Some(0), Some(9_000), Some(1_000), Some(25_000), None];
        let t_known = [
            Some(0),
            Some(9_000),
            Some(1_000),
            Some(25_000),
            Some(29_500),
        ];
        for (delays, created, now, expected) in [
            (d(0, 0), t, 10_000, "cpu-new,cpu-old,gpu-a,gpu-b,gpu-c"),
            // An unknown creation counts as old: it never holds the others back.
            (d(0, 30_000), t, 10_000, "cpu-new,cpu-old,gpu-a,gpu-b,gpu-c"),
            (d(0, 30_000), t_known, 10_000, "cpu-new,cpu-old"),
            (d(0, 30_000), t_known, 30_999, "cpu-new,cpu-old"),
            // The oldest GPU pod is 30 s old: every GPU pod goes, the 1 s old one too.
            (
                d(0, 30_000),
                t_known,
                31_000,
                "cpu-new,cpu-old,gpu-a,gpu-b,gpu-c",
            ),
            (d(2_000, 0), t_known, 10_000, "cpu-old,gpu-a"),
            // Past the new-pod delay first: gpu-a (1 s) is the oldest GPU pod considered.
            (d(2_000, 30_000), t_known, 30_000, "cpu-new,cpu-old"),
            // gpu-c is still younger than the new-pod delay: it waits for its own turn.
            (
                d(2_000, 30_000),
                t_known,
                31_000,
                "cpu-new,cpu-old,gpu-a,gpu-b",
            ),
            (
                d(2_000, 30_000),
                t_known,
                31_500,
                "cpu-new,cpu-old,gpu-a,gpu-b,gpu-c",
            ),
        ] {
            assert_eq!(
                names(delays.acted_on(&pods(created), now)),
                expected,
                "{delays:?} {created:?} at {now}"
            );
        }
    }

    use super::*;

    fn key(n: &str) -> PodKey {
        PodKey {
            namespace: "default".into(),
            name: n.into(),
        }
    }

    fn set(names: &[&str]) -> BTreeSet<PodKey> {
        names.iter().map(|n| key(n)).collect()
    }

    #[test]
    fn closes_after_idle() {
        let mut b = Batcher::new(BatchConfig::default());
        assert_eq!(b.step(0, &set(&[])), None);
        assert_eq!(b.step(100, &set(&["a"])), None);
        assert_eq!(b.step(600, &set(&["a", "b"])), None);
        // 1 s after b arrived, not after a.
        assert_eq!(b.step(1_500, &set(&["a", "b"])), None);
        assert_eq!(b.step(1_600, &set(&["a", "b"])), Some(set(&["a", "b"])));
        // Still pending but already handed out: no new window...
        assert_eq!(b.step(5_000, &set(&["a", "b"])), None);
        assert_eq!(b.window(), &Window::Closed);
        // ...until the backlog is due again, 10 s after the round; then it closes as usual.
        assert_eq!(b.step(11_599, &set(&["a", "b"])), None);
        assert_eq!(b.window(), &Window::Closed);
        assert_eq!(b.step(11_600, &set(&["a", "b"])), None);
        assert!(matches!(b.window(), Window::Open { .. }));
        assert_eq!(b.step(12_600, &set(&["a", "b"])), Some(set(&["a", "b"])));
        // Nothing pending: nothing to plan again.
        assert_eq!(b.step(30_000, &set(&[])), None);
        assert_eq!(b.window(), &Window::Closed);
    }

    #[test]
    fn a_resumed_backlog_is_handed_back_at_the_next_step() {
        let mut b = Batcher::new(BatchConfig::default());
        b.step(0, &set(&["a", "b"]));
        assert_eq!(b.step(1_000, &set(&["a", "b"])), Some(set(&["a", "b"])));
        // The round wrote a's claim only: b is planned again at once, not after a window.
        b.resume();
        assert_eq!(b.step(1_100, &set(&["b"])), Some(set(&["b"])));
        // Once: then the usual rules again.
        assert_eq!(b.step(1_200, &set(&["b"])), None);
        // Nothing pending: a resume waits for nothing and is spent.
        b.resume();
        assert_eq!(b.step(1_300, &set(&[])), None);
        assert_eq!(b.step(1_400, &set(&["b"])), None);
    }

    #[test]
    fn a_backlog_older_than_the_window_is_planned_at_a_new_leaders_first_step() {
        let mut b = Batcher::new(BatchConfig::default());
        // The youngest pending pod arrived 999 ms ago: it may be part of a burst still coming.
        b.start_with(Some(999));
        assert_eq!(b.step(0, &set(&["a", "b"])), None);
        let mut b = Batcher::new(BatchConfig::default());
        b.start_with(None);
        assert_eq!(b.step(0, &set(&["a", "b"])), None);
        // A second since the youngest arrived: nothing is gathering, plan at once.
        let mut b = Batcher::new(BatchConfig::default());
        assert!(
            !b.stepped(),
            "a new batcher has not stepped: the controller primes it"
        );
        b.start_with(Some(1_000));
        assert_eq!(b.step(0, &set(&["a", "b"])), Some(set(&["a", "b"])));
        assert!(b.stepped());
        // Then the usual rules: a newcomer opens a window.
        assert_eq!(b.step(100, &set(&["a", "b", "c"])), None);
        assert_eq!(
            b.step(1_100, &set(&["a", "b", "c"])),
            Some(set(&["a", "b", "c"]))
        );
    }

    #[test]
    fn closes_at_max_under_a_steady_stream() {
        let mut b = Batcher::new(BatchConfig::default());
        let mut pending = BTreeSet::new();
        let mut closed_at = None;
        for i in 0..30u64 {
            pending.insert(key(&format!("p{i}")));
            if b.step(i * 500, &pending).is_some() {
                closed_at = Some(i * 500);
                break;
            }
        }
        assert_eq!(closed_at, Some(10_000));
    }

    #[test]
    fn flag_and_returning_pods_open_a_window() {
        let mut b = Batcher::new(BatchConfig {
            idle_ms: 10,
            max_ms: 100,
            replan_ms: 1_000,
        });
        b.step(0, &set(&["a"]));
        assert!(b.step(10, &set(&["a"])).is_some());
        b.flag(20);
        assert_eq!(b.step(30, &set(&["a"])), Some(set(&["a"])));
        // a is bound (leaves), then comes back (e.g. evicted): it is new again.
        assert_eq!(b.step(40, &set(&[])), None);
        assert_eq!(b.step(50, &set(&["a"])), None);
        assert_eq!(b.step(60, &set(&["a"])), Some(set(&["a"])));
    }
}
