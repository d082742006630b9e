//! Proves the core stays pure: its dependency tree has no Kubernetes client, async runtime or
//! cloud SDK, and its source reads no clock, file, socket or unseeded randomness.

use std::path::Path;
use std::process::Command;

const FORBIDDEN_CRATES: &[&str] = &[
    "kube",
    "kube-client",
    "kube-runtime",
    "k8s-openapi",
    "tokio",
    "hyper",
    "reqwest",
    "aws-sdk-ec2",
    "aws-config",
    "google-cloud-compute-v1",
    "rand",
    "getrandom",
];

#[test]
fn dependency_tree_has_no_io_crates() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "-p",
            "autoscaler-core",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).expect("utf-8");
    let names: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        names.contains(&"autoscaler-core"),
        "unexpected cargo tree output:\n{tree}"
    );
    for bad in FORBIDDEN_CRATES {
        assert!(
            !names.contains(bad),
            "autoscaler-core depends on {bad}:\n{tree}"
        );
    }
}

#[test]
fn source_does_no_io() {
    const FORBIDDEN: &[&str] = &[
        "SystemTime",
        "Instant::now",
        "std::fs",
        "std::net",
        "std::thread",
        "std::process",
        "std::env",
        "async fn",
        ".await",
        "thread_rng",
    ];
    let mut checked = 0;
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_some_and(|n| n != "tests.rs")
            {
                let text = std::fs::read_to_string(&path).expect("read source");
                // Unit tests (`#[cfg(test)]` modules and `tests.rs` files) may read fixtures.
                let code = text.split("#[cfg(test)]").next().unwrap_or("");
                // Scoped threads compute in parallel and are joined before the call returns
                // (the planner's independent parts, merged in a fixed order): no I/O, no clock,
                // the same answer. Sleeping, detached threads and the rest stay out.
                let code = code.replace("std::thread::scope(", "");
                for bad in FORBIDDEN {
                    assert!(!code.contains(bad), "{} uses {bad}", path.display());
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "only {checked} source files found");
}
