//! `gpu-autoscaler snapshot -o FILE [--every D --for T]`: records the cluster of the current
//! kubeconfig (or the in-cluster configuration) in the format `simulate --from-snapshot`
//! replays ([`autoscaler::replay`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use autoscaler::controller::settings::parse_duration;
use autoscaler::replay;

/// Options of `snapshot`.
#[derive(clap::Args, Debug)]
pub(crate) struct SnapshotArgs {
    /// The file to write (replaced if it exists).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Take a sample this often (e.g. `1m`) until `--for` has passed: a series, replayed as
    /// pod arrivals and departures. Each sample is appended and flushed as it is taken.
    #[arg(long, value_parser = parse_duration, requires = "for_")]
    every: Option<Duration>,
    /// How long to record a series (e.g. `2h`).
    #[arg(long = "for", value_parser = parse_duration, requires = "every")]
    for_: Option<Duration>,
}

/// Runs `snapshot`.
pub(crate) fn run(args: SnapshotArgs) -> anyhow::Result<()> {
    if args.every.is_some_and(|d| d.is_zero()) {
        bail!("--every must be longer than 0s");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(record(args))
}

async fn record(args: SnapshotArgs) -> anyhow::Result<()> {
    let config = kube::Config::infer()
        .await
        .context("loading the Kubernetes client configuration")?;
    let client = kube::Client::try_from(config).context("building the Kubernetes client")?;
    let mut out = std::fs::File::create(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let started = tokio::time::Instant::now();
    let end = args.for_.map(|f| started + f);
    let mut n = 0usize;
    loop {
        let sample = replay::take(&client, jiff::Timestamp::now()).await?;
        replay::append(&mut out, &args.output, &sample)?;
        n += 1;
        eprintln!(
            "sample {n}: {} NodePools, {} nodes, {} pods, {} DaemonSets, {} PDBs",
            sample.node_pools.len(),
            sample.nodes.len(),
            sample.pods.len(),
            sample.daemon_sets.len(),
            sample.pod_disruption_budgets.len()
        );
        let (Some(every), Some(end)) = (args.every, end) else {
            break;
        };
        let next = started + every * u32::try_from(n).unwrap_or(u32::MAX);
        if next > end {
            break;
        }
        tokio::time::sleep_until(next).await;
    }
    eprintln!(
        "wrote {} ({n} sample{})",
        args.output.display(),
        if n == 1 { "" } else { "s" }
    );
    Ok(())
}
