//! The Compute client stays in this crate: the core, the simulator and the `providers` crate
//! must not build it (DESIGN.md's build-time note; it is tens of megabytes of generated code).

use std::process::Command;

fn tree(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "-p",
            package,
            "-e",
            "normal,dev",
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
