//! `fake-apiserver`: serves the fake Kubernetes API on 127.0.0.1 until interrupted.
//!
//! Prints the URL on the first line of stdout (so a script can read it), optionally writes a
//! kubeconfig, and stops on SIGINT or SIGTERM.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use fake_apiserver::{BinderOptions, FakeApiServer, Options};

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
    /// With --binder: milliseconds between scheduling passes when nothing changes.
    #[arg(long, default_value_t = 200)]
    binder_interval_ms: u64,
    /// Changes kept for watches; older resourceVersions get 410 Gone.
    #[arg(long, default_value_t = 10_000)]
    history: usize,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let options = Options {
        history_limit: args.history,
        binder: args.binder.then(|| BinderOptions {
            interval: Duration::from_millis(args.binder_interval_ms),
            mark_running: !args.no_kubelet,
            ..BinderOptions::default()
        }),
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
    println!("{}", running.url());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    running.shutdown().await;
    Ok(())
}
