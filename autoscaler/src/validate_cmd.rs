//! `gpu-autoscaler validate FILE...`: checks NodePool (and NodeClaim, CapacityQuota and
//! NodeOverlay) files the way the API
//! server and the controller would, and against a catalog, for NodePool repositories' CI.
//! Every problem of every document is printed (`FILE: doc N: field.path: message`, or
//! `FILE:LINE:COLUMN: message` for YAML that does not parse); the exit status is 1 if there
//! was any, 0 with a one-line summary otherwise.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use nodepools::lint::{Linter, Outcome};
use serde::Deserialize;

/// Options of `validate`.
#[derive(clap::Args, Debug)]
pub(crate) struct ValidateArgs {
    /// Files to check: YAML with one or more documents; a directory means every `.yaml` and
    /// `.yml` file under it; `-` reads standard input. Documents of other API groups are
    /// skipped.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// The catalog the requirements' instance types, zones, capacity types, GPU names and
    /// `gpuLimits` models must exist in: a file in the embedded catalog's format
    /// (`providers/catalog/default-catalog.yaml`) or the output of `catalog --json`. Default:
    /// the embedded catalog.
    #[arg(long, value_name = "F")]
    catalog_file: Option<PathBuf>,
    /// Only this provider's part of the catalog (`aws`, `gcp`).
    #[arg(long)]
    provider: Option<String>,
}

fn catalog(args: &ValidateArgs) -> anyhow::Result<Vec<autoscaler_core::InstanceType>> {
    let Some(path) = &args.catalog_file else {
        return Ok(match &args.provider {
            Some(p) => {
                let types = providers::catalog::default_catalog_for(p);
                if types.is_empty() {
                    bail!("--provider {p}: the embedded catalog has aws and gcp");
                }
                types
            }
            None => providers::catalog::default_catalog(),
        });
    };
    let text = providers::catalog::read_bounded(path)?;
    if text.trim_start().starts_with('[') {
        return providers::catalog::parse_json_rows(&text)
            .with_context(|| format!("reading {} as `catalog --json` output", path.display()));
    }
    let c = providers::catalog::Catalog::parse(&text)
        .with_context(|| format!("reading catalog {}", path.display()))?;
    Ok(match &args.provider {
        Some(p) => c.for_provider(p),
        None => c.instance_types(),
    })
}

/// The files `inputs` name, directories expanded (sorted), `-` kept for standard input.
fn expand(inputs: &[PathBuf], out: &mut Vec<PathBuf>, problems: &mut Vec<String>) {
    for p in inputs {
        if p.as_os_str() == "-" || !p.is_dir() {
            out.push(p.clone());
            continue;
        }
        match std::fs::read_dir(p) {
            Ok(entries) => {
                let mut children: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
                children.sort();
                let (dirs, files): (Vec<PathBuf>, Vec<PathBuf>) =
                    children.into_iter().partition(|c| c.is_dir());
                out.extend(
                    files
                        .into_iter()
                        .filter(|f| f.extension().is_some_and(|e| e == "yaml" || e == "yml")),
                );
                expand(&dirs, out, problems);
            }
            Err(e) => problems.push(format!("{}: cannot read the directory: {e}", p.display())),
        }
    }
}

/// The largest input read: a rendered chart with every CRD of a large cluster is a few MiB,
/// and the YAML parser holds a document's events in memory, about 90 bytes per byte of a
/// flat list (a 50 MB file took 4.7 GB and over a minute before this bound).
const MAX_FILE_BYTES: u64 = 16 << 20;

/// The text of `reader`, or why it cannot be checked (unreadable, not UTF-8, too large).
fn read_bounded(reader: impl std::io::Read) -> Result<String, String> {
    let bound = "`validate` reads (split it)";
    providers::bounded::read_bounded(reader, MAX_FILE_BYTES, bound).map_err(|e| match e.kind() {
        std::io::ErrorKind::FileTooLarge => e.to_string(),
        _ => format!("cannot read: {e}"),
    })
}

/// Tallies over every file.
#[derive(Default)]
struct Tally {
    objects: usize,
    skipped: usize,
    problems: Vec<String>,
}

fn check_file(name: &str, text: &str, linter: &Linter, tally: &mut Tally) {
    if let Err(e) = autoscaler_core::nesting::check_flow_nesting(text) {
        tally.problems.push(format!(
            "{name}:{}:{}: brackets nested deeper than {} levels",
            e.line, e.column, e.limit
        ));
        return;
    }
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let n = i + 1;
        let value = match serde_norway::Value::deserialize(doc) {
            Ok(v) => v,
            Err(e) => {
                let at = e
                    .location()
                    .map(|l| format!("{name}:{}:{}", l.line(), l.column()))
                    .unwrap_or_else(|| format!("{name}: doc {n}"));
                tally.problems.push(format!("{at}: {e}"));
                // The parser cannot find the next document after a syntax error.
                return;
            }
        };
        if value.is_null() {
            continue;
        }
        let json = match serde_json::to_value(&value) {
            Ok(j) => j,
            Err(e) => {
                tally.problems.push(format!(
                    "{name}: doc {n}: <root>: not a JSON-shaped object: {e}"
                ));
                continue;
            }
        };
        match linter.check(&json) {
            Outcome::Skipped { .. } => tally.skipped += 1,
            Outcome::Checked { problems, .. } => {
                tally.objects += 1;
                tally.problems.extend(
                    problems
                        .iter()
                        .map(|p| format!("{name}: doc {n}: {}: {}", p.path, p.message)),
                );
            }
        }
    }
}

/// Runs `validate`.
pub(crate) fn run(args: ValidateArgs) -> anyhow::Result<()> {
    let linter = Linter::new(catalog(&args)?);
    let mut tally = Tally::default();
    let mut files = Vec::new();
    expand(&args.files, &mut files, &mut tally.problems);
    for f in &files {
        let (name, text) = if f.as_os_str() == "-" {
            ("<stdin>".to_string(), read_bounded(std::io::stdin()))
        } else {
            let text = std::fs::File::open(f)
                .map_err(|e| format!("cannot read: {e}"))
                .and_then(read_bounded);
            (display(f), text)
        };
        let text = match text {
            Ok(t) => t,
            Err(why) => {
                tally.problems.push(format!("{name}: {why}"));
                continue;
            }
        };
        check_file(&name, &text, &linter, &mut tally);
    }
    let skipped = match tally.skipped {
        0 => String::new(),
        n => format!(", {n} document(s) of other APIs skipped"),
    };
    let summary = format!(
        "{} object(s) in {} file(s){skipped}",
        tally.objects,
        files.len()
    );
    if !tally.problems.is_empty() {
        for p in &tally.problems {
            eprintln!("{p}");
        }
        bail!("{} problem(s) in {summary}", tally.problems.len());
    }
    if tally.objects == 0 {
        bail!(
            "no NodePool, NodeClaim, CapacityQuota or NodeOverlay found in {} file(s){skipped}",
            files.len()
        );
    }
    println!("ok: {summary} valid");
    Ok(())
}

fn display(p: &Path) -> String {
    p.display().to_string()
}
