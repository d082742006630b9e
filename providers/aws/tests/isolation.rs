//! The AWS SDK is built for this crate and the binary only: the pure core, the simulator, the
//! `providers` crate and the API types must never pull it in (aws-sdk-ec2 alone is minutes of
//! build, and their tests are run far more often than ours). The binary's crate builds it only
//! with its `aws` feature, so the README's first command (`cargo run --release -p autoscaler --
//! simulate`) does not; nor, without its `controller` feature, a Kubernetes client, TLS stack or
//! async runtime.

use std::process::Command;

/// Package names in `package`'s normal and dev dependency tree.
fn dependencies(package: &str) -> Vec<String> {
    tree(package, &["-e", "normal,dev"])
}

/// Package names in `package`'s dependency tree, `extra` passed to `cargo tree`.
fn tree(package: &str, extra: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "--offline", "--prefix", "none", "-p", package])
        .args(extra)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

fn is_aws_sdk(name: &str) -> bool {
    name.starts_with("aws-sdk-") || name.starts_with("aws-smithy-") || name == "aws-config"
}

#[test]
fn the_sdk_stays_out_of_core_simulator_providers_and_api_types() {
    let ours = dependencies("provider-aws");
    assert!(ours.iter().any(|n| n == "aws-sdk-ec2"), "{ours:?}");
    for package in [
        "autoscaler-core",
        "autoscaler-sim",
        "providers",
        "nodepools",
    ] {
        let deps = dependencies(package);
        assert!(deps.iter().any(|n| n == package), "{package}: {deps:?}");
        let sdk: Vec<&String> = deps.iter().filter(|n| is_aws_sdk(n)).collect();
        assert!(sdk.is_empty(), "{package} depends on the AWS SDK: {sdk:?}");
    }
}

/// `cargo run -p autoscaler` (no features: the README's first command) builds no AWS SDK; the
/// `aws` feature (the image's build) does.
#[test]
fn the_binary_builds_the_sdk_only_with_its_aws_feature() {
    let plain = tree("autoscaler", &["-e", "normal"]);
    assert!(plain.iter().any(|n| n == "kube"), "{plain:?}");
    let sdk: Vec<&String> = plain.iter().filter(|n| is_aws_sdk(n)).collect();
    assert!(sdk.is_empty(), "autoscaler without features: {sdk:?}");
    let with = tree("autoscaler", &["-e", "normal", "--features", "aws"]);
    assert!(with.iter().any(|n| n == "aws-sdk-ec2"), "{with:?}");
}

/// The README's first command builds no Kubernetes client, TLS, HTTP stack or async runtime:
/// they are the binary's `controller` feature (which `aws` and `gcp` imply).
#[test]
fn the_first_command_builds_no_client_tls_or_runtime() {
    let heavy = |name: &String| {
        [
            "tokio",
            "hyper",
            "rustls",
            "aws-lc-rs",
            "aws-lc-sys",
            "axum",
            "kube-client",
            "kube-runtime",
        ]
        .contains(&name.as_str())
    };
    let plain = tree("autoscaler", &["-e", "normal"]);
    let found: Vec<&String> = plain.iter().filter(|n| heavy(n)).collect();
    assert!(found.is_empty(), "autoscaler without features: {found:?}");
    for feature in ["controller", "aws", "gcp"] {
        let with = tree("autoscaler", &["-e", "normal", "--features", feature]);
        for needed in ["tokio", "kube-client", "kube-runtime", "rustls"] {
            assert!(
                with.iter().any(|n| n == needed),
                "--features {feature} lacks {needed}"
            );
        }
    }
}
