//! `fake-apiserver`: serves the fake Kubernetes API on 127.0.0.1 until interrupted.
//!
//! Prints the URL on the first line of stdout (so a script can read it), optionally writes a
//! kubeconfig, and stops on SIGINT or SIGTERM.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use fake_apiserver::{
    BinderOptions, BinderScore as Score, FakeApiServer, FaultRates, Faults, Options,
};

/// Command-line arguments.
#[derive(Parser, Debug)]
#[command(
    name = "fake-apiserver",
    about = "A stateful in-memory fake Kubernetes API server"
)]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// A CRD YAML file to register at start (repeatable; multi-document files are fine).
    #[arg(long = "crd", value_name = "FILE")]
    crds: Vec<PathBuf>,
    /// Write a kubeconfig pointing at the server to this path.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Run the harness scheduler: bind pending pods to fitting Ready nodes.
    #[arg(long)]
    binder: bool,
    /// With --binder: leave bound pods Pending instead of marking them Running and Ready.
    #[arg(long)]
    no_kubelet: bool,
    /// With --binder: how a pod's node is chosen among those that fit.
    #[arg(long, value_enum, default_value_t = Score::FirstFit)]
    binder_score: Score,
    /// With --binder: milliseconds between scheduling passes when nothing changes.
    #[arg(long, default_value_t = 200)]
    binder_interval_ms: u64,
    /// Changes kept for watches; older resourceVersions get 410 Gone.
    #[arg(long, default_value_t = 10_000)]
    history: usize,
    /// Graceful pod deletion with grace periods multiplied by this (e.g. 0.1); off by default.
    #[arg(long, value_name = "SCALE")]
    graceful_deletion: Option<f64>,
    /// Milliseconds pod GC waits before deleting pods bound to a deleted Node.
    #[arg(long, default_value_t = 0)]
    pod_gc_delay_ms: u64,
    /// Do not run the ReplicaSet/Deployment/StatefulSet/DaemonSet controllers.
    #[arg(long)]
    no_workloads: bool,
    /// Serve resourceVersion=0 lists as of this many milliseconds ago.
    #[arg(long, value_name = "MS")]
    stale_lists_ms: Option<u64>,
    /// Also serve a second listener that faults never touch (and whose calls are not
    /// audited), for the test driving the system under test, and write its kubeconfig here.
    #[arg(long, value_name = "PATH")]
    clean_kubeconfig: Option<PathBuf>,
    /// Seed of the fault injection.
    #[arg(long, default_value_t = 0)]
    fault_seed: u64,
    /// Faults on gets and lists, e.g. `429=0.05,5xx=0.05`.
    #[arg(long, default_value = "")]
    read_faults: FaultRates,
    /// Faults on writes, e.g. `409=0.05,429=0.05,5xx=0.05`.
    #[arg(long, default_value = "")]
    write_faults: FaultRates,
    /// Faults when a watch is opened, e.g. `429=0.05,5xx=0.05`.
    #[arg(long, default_value = "")]
    watch_faults: FaultRates,
    /// Chance per watch line that the stream is cut.
    #[arg(long, default_value_t = 0.0)]
    watch_drop_rate: f64,
    /// Chance that a watch from a resourceVersion gets 410 Gone.
    #[arg(long, default_value_t = 0.0)]
    watch_gone_rate: f64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let options = Options {
        history_limit: args.history,
        binder: args.binder.then(|| BinderOptions {
            interval: Duration::from_millis(args.binder_interval_ms),
            mark_running: !args.no_kubelet,
            score: args.binder_score,
            ..BinderOptions::default()
        }),
        graceful_deletion: args.graceful_deletion,
        pod_gc_delay: Duration::from_millis(args.pod_gc_delay_ms),
        workloads: !args.no_workloads,
        stale_lists: args.stale_lists_ms.map(Duration::from_millis),
        faults: Faults {
            seed: args.fault_seed,
            reads: args.read_faults,
            writes: args.write_faults,
            watches: args.watch_faults,
            watch_drop: args.watch_drop_rate,
            watch_gone: args.watch_gone_rate,
            lost_create_answer: None,
        },
        ..Options::default()
    };
    let server = FakeApiServer::new(options);
    for crd in &args.crds {
        let names = server.register_crd_file(crd)?;
        eprintln!("registered {}", names.join(", "));
    }
    let running = server.serve(([127, 0, 0, 1], args.port).into()).await?;
    if let Some(path) = &args.kubeconfig {
        std::fs::write(path, running.kubeconfig_yaml())?;
    }
    let clean = match &args.clean_kubeconfig {
        Some(path) => {
            let clean = server
                .serve_without_faults(([127, 0, 0, 1], 0).into())
                .await?;
            std::fs::write(path, clean.kubeconfig_yaml())?;
            Some(clean)
        }
        None => None,
    };
    println!("{}", running.url());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    if let Some(clean) = clean {
        clean.shutdown().await;
    }
    running.shutdown().await;
    Ok(())
}
