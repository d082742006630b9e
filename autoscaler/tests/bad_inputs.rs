//! The bad-input corpus (`tests/bad-inputs/cases.yaml`) through the real binary: every case
//! runs under a 3 GB address-space limit and a 20 s deadline, and must end in a clean refusal
//! (exit status 1 or 2, never a signal, a panic or the deadline) that names what was wrong;
//! the controls must succeed under the same limits.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// Address space a case may use: what an abort by memory exhaustion would need is far above.
const ADDRESS_SPACE_BYTES: u64 = 3_000_000_000;
/// Wall-clock limit per case (a hang shows up as this).
const DEADLINE: Duration = Duration::from_secs(20);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    args: Vec<String>,
    #[serde(default)]
    expect: Vec<String>,
    #[serde(default)]
    ok: bool,
    /// The cargo feature the case needs (`aws`, `gcp`): a binary built without it refuses the
    /// provider before reading the file, so there its test is ignored, and says why.
    #[serde(default)]
    feature: Option<String>,
}

/// The features cases may name: each has a test of its own below.
const FEATURES: [&str; 2] = ["aws", "gcp"];

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad-inputs")
}

fn cases() -> Vec<Case> {
    let path = corpus().join("cases.yaml");
    let text = std::fs::read_to_string(&path).expect("read cases.yaml");
    serde_norway::from_str(&text).expect("cases.yaml parses")
}

/// What became of one run.
struct Outcome {
    code: Option<i32>,
    stderr: String,
    timed_out: bool,
}

fn run_limited(args: &[String]) -> Outcome {
    let mut child = Command::new("prlimit")
        .arg(format!("--as={ADDRESS_SPACE_BYTES}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_gpu-autoscaler"))
        .args(args)
        .current_dir(corpus())
        // Nothing may reach out: no kubeconfig, no cloud credentials or endpoints.
        .env("KUBECONFIG", "/nonexistent")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("POD_NAMESPACE")
        .env_remove("POD_NAME")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn prlimit (util-linux) with gpu-autoscaler");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).ok();
        s
    });
    let start = Instant::now();
    let (status, timed_out) = loop {
        if let Some(status) = child.try_wait().expect("wait for the binary") {
            break (status, false);
        }
        if start.elapsed() > DEADLINE {
            child.kill().ok();
            break (child.wait().expect("reap the binary"), true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Outcome {
        code: status.code(),
        stderr: reader.join().expect("stderr reader"),
        timed_out,
    }
}

/// What is wrong with the outcome of `case`, if anything.
fn judge(case: &Case, out: &Outcome) -> Option<String> {
    let name = case.args.join(" ");
    let mut why = Vec::new();
    if out.timed_out {
        why.push(format!("still running after {DEADLINE:?}"));
    }
    if out.stderr.contains("panicked") || out.code == Some(101) {
        why.push("panicked".to_string());
    }
    match (case.ok, out.code) {
        (_, None) if !out.timed_out => why.push("killed by a signal".into()),
        (true, Some(c)) if c != 0 => why.push(format!("control failed with status {c}")),
        (false, Some(0)) => why.push("bad input accepted (status 0)".into()),
        (false, Some(c)) if c != 1 && c != 2 => why.push(format!("status {c}")),
        _ => {}
    }
    if !case.ok {
        assert!(
            !case.expect.is_empty(),
            "{name}: a bad case must say what to expect"
        );
    }
    for e in &case.expect {
        if !out.stderr.contains(e.as_str()) {
            why.push(format!("message lacks {e:?}"));
        }
    }
    (!why.is_empty()).then(|| {
        format!(
            "{name}: {}\n  stderr: {}",
            why.join("; "),
            out.stderr.trim()
        )
    })
}

/// Runs the corpus cases that need `feature` (`None`: those that need none) and fails with
/// every case that was not refused cleanly.
fn run_cases(feature: Option<&str>) {
    let cases = cases();
    let runnable: Vec<&Case> = cases
        .iter()
        .filter(|c| c.feature.as_deref() == feature)
        .collect();
    assert!(
        !runnable.is_empty(),
        "cases.yaml has no case for {feature:?}"
    );
    let failures: Vec<String> = runnable
        .iter()
        .filter_map(|case| judge(case, &run_limited(&case.args)))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} corpus cases failed:\n{}",
        failures.len(),
        runnable.len(),
        failures.join("\n")
    );
}

#[test]
fn every_corpus_case_is_refused_cleanly_under_memory_and_time_limits() {
    let cases = cases();
    assert!(cases.len() >= 40, "the corpus shrank to {}", cases.len());
    for case in &cases {
        if let Some(f) = &case.feature {
            assert!(
                FEATURES.contains(&f.as_str()),
                "cases.yaml names feature {f:?}, which has no test here ({FEATURES:?})"
            );
        }
    }
    run_cases(None);
}

// A build without a provider's feature refuses that provider before reading its settings
// file, so its cases cannot run there: the test is listed as ignored, with the reason.
#[test]
#[cfg_attr(not(feature = "aws"), ignore = "built without the aws feature")]
fn aws_corpus_cases_are_refused_cleanly() {
    run_cases(Some("aws"));
}

#[test]
#[cfg_attr(not(feature = "gcp"), ignore = "built without the gcp feature")]
fn gcp_corpus_cases_are_refused_cleanly() {
    run_cases(Some("gcp"));
}

/// Inputs too large to keep in the corpus, written at run time: brackets nested 100,000 deep
/// (the YAML scanner's work per token grows with the depth: minutes before "recursion limit
/// exceeded") and a 20 MB flat list (the parser holds ~90 bytes of events per byte of it).
#[test]
fn generated_huge_yaml_is_refused_before_parsing() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bad-inputs-generated");
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let deep = dir.join("deep-100000.yaml");
    let depth = 100_000;
    std::fs::write(
        &deep,
        format!("name: {}{}\n", "[".repeat(depth), "]".repeat(depth)),
    )
    .expect("write the deep file");
    let flat = dir.join("flat-20mb.yaml");
    std::fs::write(&flat, format!("x: [{}0]\n", "0,".repeat(10_000_000))).expect("write");
    let path = |p: &Path| p.to_str().expect("UTF-8 path").to_string();
    let bad = |args: &[&str], expect: &[&str]| Case {
        args: args.iter().map(|a| (*a).to_string()).collect(),
        expect: expect.iter().map(|e| (*e).to_string()).collect(),
        ok: false,
        feature: None,
    };
    let (deep, flat) = (path(&deep), path(&flat));
    let cases = [
        bad(
            &["validate", &deep],
            &["deep-100000.yaml:1:135: brackets nested deeper than 128 levels"],
        ),
        bad(
            &["simulate", "--quiet", &deep],
            &["deep-100000.yaml:1", "column 135", "nested deeper than 128"],
        ),
        bad(
            &[
                "validate",
                "nodepools/misspelled-field.yaml",
                "--catalog-file",
                &deep,
            ],
            &["deep-100000.yaml", "line 1 column 135", "nested deeper"],
        ),
        bad(
            &["validate", &flat],
            &["flat-20mb.yaml: larger than 16 MiB"],
        ),
        bad(
            &["simulate", "--quiet", &flat],
            &["flat-20mb.yaml", "larger than 4 MiB"],
        ),
    ];
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| judge(case, &run_limited(&case.args)))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_corpus_file_is_used_by_a_case() {
    let cases = cases();
    let mut unused = Vec::new();
    for dir in ["scenarios", "nodepools", "traces", "settings"] {
        for entry in std::fs::read_dir(corpus().join(dir)).expect("corpus directory") {
            let name = entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned();
            let used = cases.iter().any(|c| {
                c.args.iter().any(|a| a.contains(&name))
                    || (dir == "nodepools"
                        && cases.iter().any(|c2| {
                            c2.args
                                .iter()
                                .any(|a| a.contains(&format!("nodepool-{name}")))
                        }))
            });
            if !used {
                unused.push(format!("{dir}/{name}"));
            }
        }
    }
    assert!(unused.is_empty(), "corpus files no case runs: {unused:?}");
}
