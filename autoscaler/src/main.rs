//! The `gpu-autoscaler` command line.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

mod bench;
mod catalog_cmd;
mod simulate;
#[cfg(feature = "controller")]
mod snapshot_cmd;
mod validate_cmd;

/// The process allocator. glibc's malloc spent about a quarter of the controller's CPU (its
/// free-list consolidation above all) while decoding and translating a 100,000-pod list, which
/// is what a new leader waits for before it can plan; mimalloc's per-thread pages do not
/// consolidate. Figures: `docs/src/reference/benchmarks.md`, the backlog.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// GPU-aware Kubernetes node autoscaler.
#[derive(Parser, Debug)]
#[command(name = "gpu-autoscaler", version, about)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Commands,
}

/// The subcommands.
// `run` carries every controller option; the enum is built once per process.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Commands {
    /// Run the controller against the cluster of the current kubeconfig (or in-cluster config).
    /// Needs the `controller` feature.
    Run(autoscaler::controller::settings::RunArgs),
    /// Print the CustomResourceDefinitions (NodePool, NodeClaim) as multi-document YAML.
    Crds {
        /// Write one file per CRD into this directory (e.g. `deploy/crds`) instead of printing.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Replay a workload against this project's policy and baseline models on a virtual
    /// clock; with no arguments, the bundled default scenario (a day of a mixed GPU cluster).
    Simulate(simulate::SimulateArgs),
    /// Print the instance types as the planner sees them (GPU model, count and memory,
    /// capacity after reserve, zones, prices), from a cloud's API (`--provider aws|gcp`) or the
    /// embedded catalog.
    Catalog(catalog_cmd::CatalogArgs),
    /// Check NodePool (and NodeClaim) files as the API server and the controller would, and
    /// against the catalog; every problem is printed with its file, document and field path,
    /// and the exit status is 1 if there is any (for NodePool repositories' CI).
    Validate(validate_cmd::ValidateArgs),
    /// Explain a decision of a live cluster (kubeconfig or in-cluster): `explain pod NS/NAME`
    /// (why it is pending: every NodePool and instance type and what refused each, or the
    /// NodeClaim it waits for), `explain node NAME` (why it stays or was chosen), `explain
    /// nodepool NAME` (usage against limits, budgets, instance types left out). Takes `run`'s
    /// options, so pass the controller's `--provider`, catalog and disruption flags.
    #[cfg(feature = "controller")]
    Explain(autoscaler::explain::ExplainArgs),
    /// Explain a decision of a live cluster: needs the `controller` feature, which this binary
    /// was built without.
    #[cfg(not(feature = "controller"))]
    Explain(NotBuilt),
    /// Record the cluster of the current kubeconfig (or in-cluster configuration): NodePools,
    /// nodes, pods, DaemonSets and PodDisruptionBudgets, once or as a series, for
    /// `simulate --from-snapshot`.
    #[cfg(feature = "controller")]
    Snapshot(snapshot_cmd::SnapshotArgs),
    /// Record the cluster of the current kubeconfig: needs the `controller` feature, which this
    /// binary was built without.
    #[cfg(not(feature = "controller"))]
    Snapshot(NotBuilt),
    /// Benchmarks; build with `--release` first (see `bench planner --help`).
    Bench {
        /// Which benchmark.
        #[command(subcommand)]
        what: bench::BenchCommand,
    },
}

/// The arguments of a subcommand this binary was built without, taken as they come so that the
/// refusal names the missing feature rather than an argument.
#[derive(clap::Args, Debug)]
pub(crate) struct NotBuilt {
    /// The subcommand's arguments (not read).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    args: Vec<String>,
}

/// Refuses a subcommand that needs the `controller` feature.
#[cfg(not(feature = "controller"))]
pub(crate) fn no_controller(command: &'static str) -> anyhow::Result<()> {
    Err(autoscaler::controller::Error::NoController(command).into())
}

/// Refuses an output file (`flag`'s value) that cannot be written, before a run that may take
/// hours and whose results would otherwise be lost at the end. A file that did not exist is
/// created and removed again; one that did is opened without truncating it.
pub(crate) fn check_writable(flag: &str, path: Option<&std::path::Path>) -> anyhow::Result<()> {
    let Some(p) = path else {
        return Ok(());
    };
    let existed = p.exists();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(p)
        .with_context(|| format!("{flag} {}: cannot be written", p.display()))?;
    if !existed {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    match dispatch(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", report(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error as `main` prints it: the message, then its causes, as anyhow's own report lays
/// them out, but never a stack backtrace, which anyhow would add whenever `RUST_BACKTRACE` is
/// set: a refused input is the user's to fix, not a bug to trace (panics still honour it).
fn report(e: &anyhow::Error) -> String {
    let mut out = format!("Error: {e}");
    let causes: Vec<String> = e.chain().skip(1).map(ToString::to_string).collect();
    if !causes.is_empty() {
        out.push_str("\n\nCaused by:");
    }
    for (i, cause) in causes.iter().enumerate() {
        if causes.len() == 1 {
            out.push_str(&format!("\n    {cause}"));
        } else {
            out.push_str(&format!("\n    {i}: {cause}"));
        }
    }
    out
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        #[cfg(feature = "controller")]
        Commands::Run(args) => Ok(autoscaler::controller::run::run_blocking(args)?),
        #[cfg(not(feature = "controller"))]
        Commands::Run(_) => no_controller("run"),
        Commands::Crds { dir } => crds(dir),
        Commands::Bench { what } => bench::run(what),
        Commands::Simulate(args) => simulate::run(args),
        Commands::Catalog(args) => catalog_cmd::run(args),
        Commands::Validate(args) => validate_cmd::run(args),
        #[cfg(not(feature = "controller"))]
        Commands::Explain(_) => no_controller("explain"),
        #[cfg(feature = "controller")]
        Commands::Explain(args) => match autoscaler::explain::run_blocking(&args) {
            Ok(text) => {
                print!("{text}");
                Ok(())
            }
            // One line naming the object or the setting, and exit status 1.
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        },
        #[cfg(feature = "controller")]
        Commands::Snapshot(args) => snapshot_cmd::run(args),
        #[cfg(not(feature = "controller"))]
        Commands::Snapshot(_) => no_controller("snapshot"),
    }
}

/// `gpu-autoscaler crds`.
fn crds(dir: Option<PathBuf>) -> anyhow::Result<()> {
    let Some(dir) = dir else {
        print!("{}", nodepools::crds::to_yaml()?);
        return Ok(());
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for f in nodepools::crds::files()? {
        let path = dir.join(&f.file_name);
        std::fs::write(&path, &f.content).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
