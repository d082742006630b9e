//! Kill points: the controller SIGKILLs itself at the Nth time it reaches a named point of a
//! lifecycle, so crash tests and `bench reliability` can crash it deterministically where a
//! real crash would hurt (between a NodeClaim write and its launch, a launch and its record,
//! a taint and the drain...).
//!
//! Off unless `GPU_AUTOSCALER_KILL_AT=<point>:<n>` is set (a test knob, never in a chart).
//! The points are [`POINTS`]; the process prints `kill point <point> #<n> reached` on stderr,
//! then sends itself SIGKILL (through `kill -9`: no destructor, no flush, no lease release,
//! as a real crash), and never returns.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable naming the kill point.
pub const ENV: &str = "GPU_AUTOSCALER_KILL_AT";

/// Every kill point, in lifecycle order.
pub const POINTS: &[&str] = &[
    "claim-write:before",
    "claim-write:after",
    "launch:before",
    "launch:after",
    "register",
    "initialize",
    "disruption-taint",
    "drain",
    "node-delete",
    "terminate:before",
    "terminate:after",
];

struct Armed {
    point: String,
    at: u64,
    seen: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var(ENV).ok()?;
            let Some((point, n)) = parse(&spec) else {
                eprintln!("{ENV}={spec:?}: expected <point>:<n>, point one of {POINTS:?}; ignored");
                return None;
            };
            Some(Armed {
                point: point.to_string(),
                at: n,
                seen: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// `<point>:<n>` with a known point and `n >= 1`.
fn parse(spec: &str) -> Option<(&str, u64)> {
    let (point, n) = spec.rsplit_once(':')?;
    let n: u64 = n.parse().ok().filter(|n| *n >= 1)?;
    POINTS.contains(&point).then_some((point, n))
}

/// Marks that `point` is reached; the process dies here if this is the armed occurrence.
pub fn reached(point: &'static str) {
    debug_assert!(POINTS.contains(&point), "unknown kill point {point}");
    let Some(a) = armed() else { return };
    if a.point != point || a.seen.fetch_add(1, Ordering::SeqCst) + 1 != a.at {
        return;
    }
    eprintln!("kill point {point} #{} reached", a.at);
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &std::process::id().to_string()])
        .status();
    // `kill` missing: die anyway, without unwinding.
    std::process::abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_name_a_known_point_and_a_positive_count() {
        assert_eq!(parse("launch:before:3"), Some(("launch:before", 3)));
        assert_eq!(parse("register:1"), Some(("register", 1)));
        assert_eq!(parse("register:0"), None);
        assert_eq!(parse("nowhere:2"), None);
        assert_eq!(parse("register"), None);
    }
}
