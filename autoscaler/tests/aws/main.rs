//! The `gpu-autoscaler` binary with the AWS provider against moto's EC2 server: the `catalog`
//! subcommand (table and `--json`, credentials from environment variables as a user would set
//! them, a clear and quick failure without credentials), and `run --provider aws` end to end
//! against the fake API server, the test playing the kubelet; and a gang's placement group
//! from NodeClaims to EC2 and back through garbage collection, with the test proxy answering
//! the placement group calls moto lacks; and the controller SIGKILLed just before and just
//! after its CreateFleet call, then restarted: still one instance for the claim.
//!
//! Without `moto_server` on PATH the moto tests print `SKIPPED: moto_server not found` and
//! pass; `.ci/run` installs moto, so CI runs them.

#[path = "../e2e/harness.rs"]
#[allow(dead_code)]
mod e2e;
#[path = "../../../providers/aws/tests/moto/harness.rs"]
mod moto;
#[path = "../../../providers/aws/tests/moto/proxy.rs"]
mod proxy;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::Filter;
use k8s_openapi::api::core::v1::{Node, Pod};
use nodepools::NodePool;
use serde_json::{Value, json};

use e2e::{Cluster, Controller, bound_to, eventually, gpu_pod, kubelet_node};
use moto::Moto;

/// Runs `gpu-autoscaler catalog ...` with only the given AWS variables in its environment (no
/// host credentials, profile or instance metadata leak in).
fn catalog(args: &[&str], env: &[(&str, &str)], home: &std::path::Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpu-autoscaler"));
    cmd.arg("catalog").args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", home)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("RUST_BACKTRACE", "0")
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    cmd.output().expect("gpu-autoscaler runs")
}

const FAKE_CREDS: &[(&str, &str)] = &[
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
];

#[test]
fn catalog_json_and_table_against_moto() {
    let Some(moto) = Moto::start("catalog_json_and_table_against_moto") else {
        return;
    };
    let out = catalog(
        &[
            "--provider=aws",
            "--region=us-east-1",
            &format!("--endpoint-url={}", moto.url),
            "--instance-type=g5.*",
            "--instance-type=p4d.24xlarge",
            "--instance-type=m5.large",
            "--json",
        ],
        FAKE_CREDS,
        moto.dir(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON array");
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"g5.xlarge") && names.contains(&"p4d.24xlarge"),
        "{names:?}"
    );
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("g5.") || *n == "p4d.24xlarge" || *n == "m5.large")
    );
    let g5 = rows.iter().find(|r| r["name"] == "g5.xlarge").unwrap();
    assert_eq!(g5["gpu"]["model"], "A10G");
    assert_eq!(g5["gpu"]["count"], 1);
    assert_eq!(g5["gpu"]["memory_mib"], 22888);
    assert_eq!(g5["gpu"]["resource"], "nvidia.com/gpu");
    assert_eq!(g5["capacity"]["extended"]["nvidia.com/gpu"], 1);
    assert_eq!(
        g5["allocatable"]["cpu"], 3920,
        "4 vCPUs less the kubelet reserve"
    );
    assert_eq!(g5["allocatable"]["pods"], 58);
    assert!(
        g5["allocatable"]["memory"].as_i64().unwrap() < g5["capacity"]["memory"].as_i64().unwrap()
    );
    assert_eq!(g5["on_demand_price"], 1.006);
    assert_eq!(g5["spot_price"], 0.00001);
    assert!(g5["zones"].as_array().unwrap().len() >= 3);
    assert_eq!(g5["labels"]["nvidia.com/gpu.product"], "NVIDIA-A10G");
    let m5 = rows.iter().find(|r| r["name"] == "m5.large").unwrap();
    assert!(m5["gpu"].is_null());

    // The table, GPU types only.
    let out = catalog(
        &[
            "--region=us-east-1",
            &format!("--endpoint-url={}", moto.url),
            "--instance-type=g5.*",
            "--instance-type=m5.large",
            "--gpus-only",
        ],
        FAKE_CREDS,
        moto.dir(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let first = table.lines().next().unwrap();
    for col in [
        "NAME",
        "GPU",
        "GPU-MEM",
        "ALLOC-CPU",
        "ALLOC-MEM",
        "ZONES",
        "ON-DEMAND",
        "SPOT",
    ] {
        assert!(first.contains(col), "{first}");
    }
    assert!(table.contains("g5.48xlarge"), "{table}");
    assert!(!table.contains("m5.large"), "{table}");
    assert!(table.trim_end().ends_with("8 instance types"), "{table}");
}

#[test]
fn catalog_without_credentials_fails_fast_and_clearly() {
    let home = tempfile::tempdir().unwrap();
    let started = Instant::now();
    // No endpoint, no credentials, no profile, metadata disabled: nothing can be signed.
    let out = catalog(&["--provider=aws", "--region=us-east-1"], &[], home.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("no AWS credentials"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    // No region anywhere: a configuration error naming the fix.
    let out = catalog(&["--provider=aws"], FAKE_CREDS, home.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("no AWS region"), "{stderr}");
}

fn gpu_pool() -> Value {
    json!({
        "apiVersion": "gpu-autoscaler.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "ml"}},
                "nodeClassRef": {"group": "aws.gpu-autoscaler.dev", "kind": "EC2NodeClass", "name": "default"},
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g5.xlarge", "g5.2xlarge"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ]
            },
            "disruption": {"consolidateAfter": "0s", "unneededTime": "2s", "budgets": [{"nodes": "100%"}]}
        }
    })
}

async fn moto_instances(moto: &Moto, cluster: &str) -> Vec<(String, String)> {
    let out = moto
        .client()
        .describe_instances()
        .filters(
            Filter::builder()
                .name(format!("tag:{}", providers::tags::CLUSTER))
                .values(cluster)
                .build(),
        )
        .send()
        .await
        .unwrap();
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| {
            (
                i.instance_id().unwrap_or_default().to_string(),
                i.state()
                    .and_then(|s| s.name())
                    .map_or("", |n| n.as_str())
                    .to_string(),
            )
        })
        .collect()
}

/// The controller with `--provider=aws` for cluster `cluster`, its settings file (a node class
/// over two moto zones, EC2 at `endpoint`) written next to moto's state, `env` added to its
/// environment.
async fn aws_controller(
    c: &Cluster,
    moto: &Moto,
    endpoint: &str,
    cluster: &str,
    name: &str,
    env: &[(&str, &str)],
) -> Controller {
    let class = moto
        .node_class(cluster, &["us-east-1a", "us-east-1b"])
        .await;
    let mut settings = moto.settings(endpoint, cluster);
    settings.node_classes.insert("default".into(), class);
    let settings_file = moto.dir().join("aws.yaml");
    std::fs::write(&settings_file, serde_norway::to_string(&settings).unwrap()).unwrap();
    c.controller_with_env(
        name,
        &[
            "--provider=aws",
            &format!("--aws-config={}", settings_file.display()),
            &format!("--cluster-name={cluster}"),
            "--leader-elect=false",
        ],
        env,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_aws_launches_a_gpu_instance_for_a_pending_pod() {
    let Some(moto) = Moto::start("run_with_aws_launches_a_gpu_instance_for_a_pending_pod") else {
        return;
    };
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool()).await;
    let ctl = aws_controller(&c, &moto, &moto.url, "e2e", "aws", &[]).await;
    let _: Pod = c.create(gpu_pod("train")).await;

    // A NodeClaim is written, then launched on EC2 (moto) with its provider id.
    let claim = e2e::launched_claim(&c, "a launched NodeClaim", "aws:///").await;
    let status = claim.status.clone().unwrap();
    let pid = status.provider_id.clone().unwrap();
    assert!(
        matches!(
            status.instance_type.as_deref(),
            Some("g5.xlarge" | "g5.2xlarge")
        ),
        "{status:?}"
    );
    let instance_id = provider_aws::instance_id(&pid).unwrap().to_string();
    let live = moto_instances(&moto, "e2e").await;
    assert_eq!(live.len(), 1, "{live:?}\n{}", ctl.log());
    assert_eq!(live[0].0, instance_id);

    // Play the kubelet: the instance's Node registers, Ready, GPU plugin up.
    let node_name = format!("ip-10-0-0-1-{instance_id}");
    let _: Node = c.create(kubelet_node(&node_name, &pid, &claim)).await;
    let bound = eventually(
        "the pod bound to the new node",
        Duration::from_secs(60),
        || async { c.pod("default", "train").await.as_ref().and_then(bound_to) },
    )
    .await;
    assert_eq!(bound, node_name);
    let claims = c.claims().await;
    assert_eq!(claims.len(), 1, "never a second claim: {claims:#?}");
    assert_eq!(
        moto_instances(&moto, "e2e").await.len(),
        1,
        "never a second instance"
    );

    // The pod goes; the empty node is disrupted and its instance terminated on EC2.
    let pods: kube::Api<Pod> = kube::Api::namespaced(c.client.clone(), "default");
    pods.delete("train", &Default::default()).await.unwrap();
    eventually(
        "the instance terminated",
        Duration::from_secs(60),
        || async {
            let i = moto_instances(&moto, "e2e").await;
            i.iter()
                .all(|(_, state)| state == "terminated" || state == "shutting-down")
                .then_some(())
        },
    )
    .await;
    drop(ctl);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_aws_puts_a_gang_in_one_placement_group_and_collects_it() {
    let Some(moto) = Moto::start("run_with_aws_puts_a_gang_in_one_placement_group_and_collects_it")
    else {
        return;
    };
    let proxy = proxy::Proxy::start(&moto.url).await;
    let c = Cluster::start().await;
    let _: NodePool = c.create(gpu_pool()).await;
    let ctl = aws_controller(&c, &moto, &proxy.url, "pg", "aws-gang", &[]).await;
    for i in 0..2 {
        let mut p = gpu_pod(&format!("train-{i}"));
        p["metadata"]["annotations"] = json!({
            "gpu-autoscaler.dev/pod-group": "train",
            "gpu-autoscaler.dev/pod-group-min-count": "2",
        });
        let _: Pod = c.create(p).await;
    }
    let group = providers::placement_group_name("pg", "train");

    // Both claims name the group and launch into it.
    let claims = eventually(
        "two launched NodeClaims",
        Duration::from_secs(60),
        || async {
            let claims = c.claims().await;
            let launched = claims
                .iter()
                .filter(|cl| e2e::launched_on(cl, "aws:///"))
                .count();
            (launched == 2).then_some(claims)
        },
    )
    .await;
    for cl in &claims {
        let named = cl
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(providers::tags::PLACEMENT_GROUP));
        assert_eq!(named, Some(&group), "{cl:#?}");
    }
    let groups = proxy.placement_groups();
    assert_eq!(groups.len(), 1, "{groups:?}\n{}", ctl.log());
    assert_eq!(groups[&group].0, "cluster");
    assert_eq!(groups[&group].1[providers::tags::CLUSTER], "pg");
    let fleets = proxy.fleet_groups();
    assert_eq!(fleets.len(), 2, "{fleets:?}");
    assert!(
        fleets
            .iter()
            .flatten()
            .all(|g| g.as_deref() == Some(group.as_str())),
        "{fleets:?}"
    );
    let tagged = moto
        .client()
        .describe_instances()
        .filters(
            Filter::builder()
                .name(format!("tag:{}", providers::tags::PLACEMENT_GROUP))
                .values(&group)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let n: usize = tagged
        .reservations()
        .iter()
        .map(|r| r.instances().len())
        .sum();
    assert_eq!(n, 2);

    // The claims go (the job was cancelled): the instances are terminated, and once the group
    // is unused and older than the grace period, garbage collection deletes it.
    let api: kube::Api<nodepools::NodeClaim> = kube::Api::all(c.client.clone());
    for cl in &claims {
        let name = cl.metadata.name.clone().unwrap();
        api.delete(&name, &Default::default()).await.unwrap();
    }
    eventually(
        "the instances terminated",
        Duration::from_secs(60),
        || async {
            let i = moto_instances(&moto, "pg").await;
            i.iter()
                .all(|(_, state)| state == "terminated" || state == "shutting-down")
                .then_some(())
        },
    )
    .await;
    eventually(
        "the placement group deleted",
        Duration::from_secs(60),
        || async { proxy.placement_groups().is_empty().then_some(()) },
    )
    .await;
    // The proxy sees the group go when EC2 answers; the controller logs it just after.
    eventually(
        "the controller logged the placement group's deletion",
        Duration::from_secs(30),
        || async {
            ctl.log()
                .contains("gc: deleted unused placement group")
                .then_some(())
        },
    )
    .await;
    drop(ctl);
}

/// The controller killed at `GPU_AUTOSCALER_KILL_AT=<point>:1` around its CreateFleet call, then
/// restarted: the claim written before the crash is launched once. Before the call nothing was
/// bought and the successor buys one instance; after it the instance exists untracked and the
/// successor adopts it (found by its claim tag; a CreateFleet sent again would carry the same
/// ClientToken, which the proxy answers with the first call's instance as EC2 does). Either way
/// exactly one live instance, one claim, and the pod bound to the one Node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_aws_killed_around_create_fleet_launches_one_instance() {
    let Some(moto) = Moto::start("run_with_aws_killed_around_create_fleet_launches_one_instance")
    else {
        return;
    };
    let proxy = proxy::Proxy::start(&moto.url).await;
    for (i, point) in ["launch:before", "launch:after"].into_iter().enumerate() {
        let cluster = format!("kill{i}");
        let c = Cluster::start().await;
        let _: NodePool = c.create(gpu_pool()).await;
        let fleets = proxy.fleet_tokens().len();
        let kill = format!("{point}:1");
        let mut first = aws_controller(
            &c,
            &moto,
            &proxy.url,
            &cluster,
            &format!("first-{i}"),
            &[("GPU_AUTOSCALER_KILL_AT", kill.as_str())],
        )
        .await;
        let _: Pod = c.create(gpu_pod("train")).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while first.child.try_wait().expect("wait").is_none() {
            assert!(
                Instant::now() < deadline,
                "not killed at {point}:\n{}",
                first.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            first
                .log()
                .contains(&format!("kill point {point} #1 reached")),
            "{}",
            first.log()
        );
        let claims = c.claims().await;
        assert_eq!(claims.len(), 1, "{claims:#?}");
        let claim_name = claims[0].metadata.name.clone().unwrap();
        assert!(
            claims[0]
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_ref())
                .is_none(),
            "killed before the launch was recorded"
        );
        let live = |v: Vec<(String, String)>| -> Vec<String> {
            v.into_iter()
                .filter(|(_, s)| s == "pending" || s == "running")
                .map(|(id, _)| id)
                .collect()
        };
        let bought = live(moto_instances(&moto, &cluster).await);
        match point {
            "launch:before" => {
                assert!(bought.is_empty(), "{bought:?}");
                assert_eq!(proxy.fleet_tokens().len(), fleets, "no CreateFleet sent");
            }
            _ => assert_eq!(bought.len(), 1, "the fleet bought before the kill"),
        }

        let second =
            aws_controller(&c, &moto, &proxy.url, &cluster, &format!("second-{i}"), &[]).await;
        let claim =
            e2e::launched_claim(&c, "the claim launched after the restart", "aws:///").await;
        assert_eq!(claim.metadata.name.as_deref(), Some(claim_name.as_str()));
        let pid = claim.status.clone().unwrap().provider_id.unwrap();
        let instance_id = provider_aws::instance_id(&pid).unwrap().to_string();
        if point == "launch:after" {
            assert_eq!(bought, vec![instance_id.clone()], "the instance adopted");
        }
        let node_name = format!("ip-10-0-0-{i}-{instance_id}");
        let _: Node = c.create(kubelet_node(&node_name, &pid, &claim)).await;
        let bound = eventually(
            "the pod bound after the restart",
            Duration::from_secs(60),
            || async { c.pod("default", "train").await.as_ref().and_then(bound_to) },
        )
        .await;
        assert_eq!(bound, node_name);
        let now = live(moto_instances(&moto, &cluster).await);
        assert_eq!(
            now,
            vec![instance_id],
            "one live instance\n{}",
            second.log()
        );
        assert_eq!(c.claims().await.len(), 1, "one claim");
        // Every CreateFleet of this claim carried one ClientToken.
        let tokens: std::collections::BTreeSet<String> =
            proxy.fleet_tokens().split_off(fleets).into_iter().collect();
        assert!(tokens.len() <= 1, "{tokens:?}");
        drop(second);
    }
}

/// The DRA guide's example on AWS: a pod whose only GPU request is a ResourceClaim from a
/// template scales the GPU NodePool up from zero through EC2 (moto); the test plays the kubelet
/// and the NVIDIA DRA driver (which publishes the new Node's GPUs from the provider's own
/// catalog, read from moto), the harness scheduler allocates the claim there and binds the pod,
/// and the NodeClaim is initialized once the slices match its instance type's template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_aws_a_dra_claim_scales_a_gpu_pool_from_zero() {
    let Some(moto) = Moto::start("run_with_aws_a_dra_claim_scales_a_gpu_pool_from_zero") else {
        return;
    };
    let c = Cluster::start().await;
    c.apply_file("deploy/examples/dra/nvidia-deviceclasses.yaml")
        .await;
    let _: NodePool = c.create(gpu_pool()).await;
    let ctl = aws_controller(&c, &moto, &moto.url, "dra", "aws-dra", &[]).await;
    let mut settings = moto.settings(&moto.url, "dra");
    settings.node_classes.insert(
        "default".into(),
        moto.node_class("dra", &["us-east-1a", "us-east-1b"]).await,
    );
    let catalog = provider_aws::AwsProvider::connect(settings)
        .await
        .unwrap()
        .catalog(Some("default"))
        .await
        .unwrap();
    let _driver = c.fake_dra_driver_for(catalog);
    c.apply_file("deploy/examples/dra/one-gpu-claim-template.yaml")
        .await;

    e2e::dra_claim_scales_from_zero(&c, &ctl, "aws:///", |pid| {
        let instance_id = provider_aws::instance_id(pid).unwrap();
        format!("ip-10-0-0-9-{instance_id}")
    })
    .await;
    let live: Vec<_> = moto_instances(&moto, "dra")
        .await
        .into_iter()
        .filter(|(_, s)| s == "pending" || s == "running")
        .collect();
    assert_eq!(live.len(), 1, "{live:?}");
    drop(ctl);
}
