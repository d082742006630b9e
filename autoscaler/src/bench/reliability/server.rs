//! The fake API server the benchmark runs against: started (or given), its audit read back.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use autoscaler::controller::Result;
use serde_json::Value;

use super::ReliabilityArgs;
use crate::bench::e2e::{Killed, cfg, fake_apiserver_bin, spawn_fake_apiserver};

pub(super) async fn client_from(path: &Path) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| cfg(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| cfg(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| cfg(e.to_string()))
}

/// The fake API server: spawned (and killed when dropped) or given.
pub(super) struct Server {
    _child: Option<Killed>,
    pub(super) kubeconfig: PathBuf,
    pub(super) url: String,
}

pub(super) fn start_server(args: &ReliabilityArgs, dir: &Path) -> Result<(Server, PathBuf)> {
    if let (Some(k), Some(c)) = (&args.kubeconfig, &args.clean_kubeconfig) {
        let server = Server {
            _child: None,
            kubeconfig: k.clone(),
            url: server_url(c)?,
        };
        return Ok((server, c.clone()));
    }
    let bin = fake_apiserver_bin(args.fake_apiserver.as_ref())?;
    let crds = dir.join("crds.yaml");
    let mut text = nodepools::crds::to_yaml().map_err(|e| cfg(e.to_string()))?;
    text.push_str("\n---\n");
    text.push_str(providers::kwok::CRD_YAML);
    match super::provreqs::crd_path(args.provisioning_request_crd.as_deref()) {
        Some(p) => {
            let crd = std::fs::read_to_string(&p)
                .map_err(|e| cfg(format!("reading {}: {e}", p.display())))?;
            text.push_str("\n---\n");
            text.push_str(&crd);
        }
        None => eprintln!(
            "SKIPPED: ProvisioningRequests in the replay (the CRD \
             shared/data/crds/autoscaling.x-k8s.io_provisioningrequests.yaml is absent; see \
             --provisioning-request-crd)"
        ),
    }
    std::fs::write(&crds, text).map_err(|e| cfg(e.to_string()))?;
    let kubeconfig = dir.join("kubeconfig");
    let clean = dir.join("clean-kubeconfig");
    let rate = args.api_fault_rate;
    // The API fault rate is split over the kinds each class can get.
    let rw = format!("429={:.4},5xx={:.4}", rate / 2.0, rate / 2.0);
    let writes = format!(
        "409={:.4},429={:.4},5xx={:.4}",
        rate / 3.0,
        rate / 3.0,
        rate / 3.0
    );
    let mut cmd = Command::new(&bin);
    cmd.args(["--port", "0", "--history", "200000", "--binder"])
        .args(["--binder-interval-ms", "100", "--graceful-deletion", "0.02"])
        .args(["--pod-gc-delay-ms", "2000"])
        .args(["--fault-seed", &args.seed.to_string()])
        .args([
            "--read-faults",
            &rw,
            "--write-faults",
            &writes,
            "--watch-faults",
            &rw,
        ])
        .args(["--watch-drop-rate", &format!("{:.4}", rate / 10.0)])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--clean-kubeconfig")
        .arg(&clean)
        .arg("--crd")
        .arg(&crds);
    // The URL it prints is the faulty listener's; the benchmark reads the audit from the clean
    // one.
    let (child, _url) = spawn_fake_apiserver(cmd)?;
    let url = server_url(&clean)?;
    Ok((
        Server {
            _child: Some(child),
            kubeconfig,
            url,
        },
        clean,
    ))
}

/// The server URL a kubeconfig written by the fake API server names.
///
/// # Errors
/// When the file cannot be read or names no server.
fn server_url(kubeconfig: &Path) -> Result<String> {
    let text = std::fs::read_to_string(kubeconfig)
        .map_err(|e| cfg(format!("{}: {e}", kubeconfig.display())))?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .map(|s| s.trim().trim_matches('"').to_string())
        .ok_or_else(|| cfg(format!("{}: no server URL", kubeconfig.display())))
}

/// The server's audit and fault count (`GET /debug/audit` on the fault-free listener).
pub(super) fn audit(url: &str) -> Result<Value> {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let mut conn = std::net::TcpStream::connect(addr).map_err(|e| cfg(e.to_string()))?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| cfg(e.to_string()))?;
    write!(conn, "GET /debug/audit HTTP/1.0\r\nHost: {addr}\r\n\r\n")
        .map_err(|e| cfg(e.to_string()))?;
    let mut text = String::new();
    conn.read_to_string(&mut text)
        .map_err(|e| cfg(e.to_string()))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    serde_json::from_str(body).map_err(|e| cfg(format!("the server's audit: {e}")))
}
