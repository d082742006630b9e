//! The Compute client stays in this crate: the core, the simulator and the `providers` crate
//! must not build it (DESIGN.md's build-time note; it is tens of megabytes of generated code).
//! The binary's crate builds it only with its `gcp` feature, so the README's first command
//! (`cargo run --release -p autoscaler -- simulate`) does not.

use std::process::Command;

/// Package names in `package`'s normal and dev dependency tree.
fn tree(package: &str) -> Vec<String> {
    tree_with(package, &["-e", "normal,dev"])
}

/// Package names in `package`'s dependency tree, `extra` passed to `cargo tree`.
fn tree_with(package: &str, extra: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "-p", package, "--prefix", "none", "--offline"])
        .args(extra)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn only_this_crate_and_the_binary_build_the_compute_client() {
    assert!(
        tree("provider-gcp")
            .iter()
            .any(|n| n == "google-cloud-compute-v1")
    );
    for package in [
        "autoscaler-core",
        "autoscaler-sim",
        "providers",
        "nodepools",
    ] {
        let names = tree(package);
        assert!(names.iter().any(|n| n == package), "{package}: {names:?}");
        assert!(
            !names.iter().any(|n| n.starts_with("google-cloud-")),
            "{package} depends on the Google Cloud client"
        );
    }
}

/// `cargo run -p autoscaler` (no features: the README's first command) builds no Compute
/// client; the `gcp` feature (the image's build) does.
#[test]
fn the_binary_builds_the_compute_client_only_with_its_gcp_feature() {
    let plain = tree_with("autoscaler", &["-e", "normal"]);
    assert!(plain.iter().any(|n| n == "kube"), "{plain:?}");
    assert!(
        !plain.iter().any(|n| n.starts_with("google-cloud-")),
        "autoscaler without features depends on the Google Cloud client"
    );
    let with = tree_with("autoscaler", &["-e", "normal", "--features", "gcp"]);
    assert!(with.iter().any(|n| n == "google-cloud-compute-v1"));
}
