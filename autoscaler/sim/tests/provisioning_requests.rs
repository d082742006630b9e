//! ProvisioningRequests end to end: each case is a small scenario and what every policy that
//! serves requests must show for it (check-capacity never launches, best-effort-atomic launches
//! all or nothing, pods exist only after Provisioned + admissionDelay, unconsumed bookings
//! expire and release their nodes, booked capacity is not taken by other pods).

use std::path::Path;

use autoscaler_sim::engine::{PolicyResult, ProvReqStats};
use autoscaler_sim::{RunOptions, Scenario, report, run};

/// A cluster of 4-GPU L4 nodes only, quick to launch, disrupted soon after they empty.
const BASE: &str = "\
name: provreq
seed: 3
duration: 2h
catalog: aws
cluster:
  launch: {cpu: 30s, gpu: 60s, jitter: 0}
  registration: 10s
  devicePluginDelay: 30s
  scaleDownDelayAfterAdd: 0s
pools:
  - name: gpu
    instanceTypes: [g6.12xlarge]
    capacityTypes: [on-demand]
    disruption: {consolidateAfter: 1m, unneededTime: 1m}
workloads:
";

/// A long-running 1-GPU pod from t=0: one node with 3 GPUs free.
const ONE_BUSY_NODE: &str = "  - deployment:
      name: base
      replicas: [{at: 0s, count: 1}]
      pod: {nodePool: gpu, cpu: 2, memory: 8Gi, gpus: 1}
";

fn scenario(workloads: &str) -> Scenario {
    let text = format!("{BASE}{workloads}");
    Scenario::parse(Path::new("provreq.yaml"), &text).unwrap()
}

fn request(name: &str, extra: &str, size: u32, gpus: u32) -> String {
    format!(
        "  - provisioningRequests:
      name: {name}
      size: {size}
      arrivals: {{at: [20m]}}
      duration: {{fixed: 15m}}
      pod: {{nodePool: gpu, cpu: 2, memory: 8Gi, gpus: {gpus}}}
{extra}"
    )
}

fn results(s: &Scenario) -> (Vec<PolicyResult>, String) {
    let r = run(s, &RunOptions::default(), &|_, _| {}).unwrap();
    let summary = report::summary(&r);
    for p in &r.policies {
        assert_eq!(p.safety_violations, 0, "{summary}");
    }
    (r.policies, summary)
}

fn stats(p: &PolicyResult) -> &ProvReqStats {
    p.provisioning_requests
        .as_ref()
        .expect("the scenario has requests")
}

/// The policies that serve requests (the Karpenter models create the pods at once).
fn serving(ps: &[PolicyResult]) -> impl Iterator<Item = &PolicyResult> {
    ps.iter().filter(|p| stats(p).supported)
}

#[test]
fn karpenter_like_creates_the_pods_at_once_and_the_others_serve_requests() {
    let s = scenario(&request("job", "      class: best-effort-atomic\n", 2, 1));
    let (ps, summary) = results(&s);
    let names: Vec<&str> = serving(&ps).map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["gpu-autoscaler", "ca-like", "ca-ideal"],
        "{summary}"
    );
    for name in ["karpenter-like", "karpenter-ideal"] {
        let k = ps.iter().find(|p| p.name == name).unwrap();
        assert_eq!(stats(k).requests, 0, "{summary}");
        assert_eq!(k.pods_created, 2, "{summary}");
    }
    assert!(summary.contains("not served"), "{summary}");
}

#[test]
fn check_capacity_that_fits_existing_nodes_is_provisioned_at_once_without_a_launch() {
    let s = scenario(&format!(
        "{ONE_BUSY_NODE}{}",
        request("check", "      class: check-capacity\n", 3, 1)
    ));
    let (ps, summary) = results(&s);
    for p in serving(&ps) {
        let st = stats(p);
        assert_eq!(
            (st.requests, st.provisioned, st.consumed),
            (1, 1, 1),
            "{}: {summary}",
            p.name
        );
        let rec = &st.records[0];
        assert_eq!(rec.provisioned_at, Some(20 * 60), "{}: {rec:?}", p.name);
        assert_eq!(st.to_provisioned_p50_s, 0.0, "{}", p.name);
        assert!(rec.nodes.is_empty(), "{}: {rec:?}", p.name);
        // Only the deployment's node was ever launched.
        assert_eq!(p.nodes_launched, 1, "{}: {summary}", p.name);
    }
}

#[test]
fn check_capacity_that_does_not_fit_never_launches_and_never_creates_pods() {
    let s = scenario(&format!(
        "{ONE_BUSY_NODE}{}",
        request("check", "      class: check-capacity\n", 4, 1)
    ));
    let (ps, summary) = results(&s);
    for p in serving(&ps) {
        let st = stats(p);
        assert_eq!(
            (st.provisioned, st.never_provisioned),
            (0, 1),
            "{}: {summary}",
            p.name
        );
        assert_eq!(p.nodes_launched, 1, "{}: {summary}", p.name);
        assert_eq!(
            p.pods_created, 1,
            "{}: the request's pods were created",
            p.name
        );
        assert!(st.records[0].admitted_at.is_none(), "{}", p.name);
    }
}

#[test]
fn best_effort_atomic_launches_all_of_its_nodes_or_none() {
    // Two 4-GPU pods need two nodes: allowed with 3 nodes, refused with a limit of 2 (one
    // node is the deployment's), where nothing is launched for the request.
    let workloads = format!(
        "{ONE_BUSY_NODE}{}",
        request("atomic", "      class: best-effort-atomic\n", 2, 4)
    );
    let (ps, summary) = results(&scenario(&workloads));
    for p in serving(&ps) {
        let st = stats(p);
        assert_eq!(
            (st.provisioned, st.consumed),
            (1, 1),
            "{}: {summary}",
            p.name
        );
        assert_eq!(st.records[0].nodes.len(), 2, "{}: {summary}", p.name);
        assert_eq!(p.nodes_launched, 3, "{}: {summary}", p.name);
    }
    let limited = scenario(&workloads).clone();
    let text = format!("{BASE}{workloads}").replace(
        "    instanceTypes: [g6.12xlarge]\n",
        "    instanceTypes: [g6.12xlarge]\n    limits: {nodes: 2}\n",
    );
    assert_ne!(text, format!("{BASE}{workloads}"));
    let _ = limited;
    let (ps, summary) = results(&Scenario::parse(Path::new("limited.yaml"), &text).unwrap());
    for p in serving(&ps) {
        let st = stats(p);
        assert_eq!(
            (st.provisioned, st.never_provisioned),
            (0, 1),
            "{}: {summary}",
            p.name
        );
        assert_eq!(
            p.nodes_launched, 1,
            "{}: a partial launch: {summary}",
            p.name
        );
        assert_eq!(p.pods_created, 1, "{}: {summary}", p.name);
    }
}

#[test]
fn pods_are_created_only_after_provisioned_and_the_admission_delay() {
    let s = scenario(&request(
        "late",
        "      admissionDelay: 90s\n      bookingDuration: 10m\n",
        2,
        2,
    ));
    let (ps, summary) = results(&s);
    for p in serving(&ps) {
        let rec = &stats(p).records[0];
        let prov = rec.provisioned_at.expect("provisioned");
        // Provisioned once the nodes launched (the capacity was requested), as the controller
        // and the Cluster Autoscaler mark it, before they could be up (100 s: launch,
        // registration, device plugin).
        assert!(prov < rec.created + 100, "{}: {rec:?}", p.name);
        assert_eq!(rec.admitted_at, Some(prov + 90), "{}: {rec:?}", p.name);
        // The pods wait for the booked nodes to come up, then bind.
        let bound = rec.bound_at.expect("bound");
        assert!(bound >= prov + 100, "{}: {rec:?} {summary}", p.name);
        assert_eq!(rec.end, Some("consumed"), "{}", p.name);
    }
}

#[test]
fn a_booking_whose_pods_never_come_expires_and_its_nodes_are_then_removed() {
    // The pods would come after the end of the run.
    let s = scenario(&request(
        "ghost",
        "      admissionDelay: 3h\n      bookingDuration: 10m\n",
        2,
        4,
    ));
    let (ps, summary) = results(&s);
    for p in serving(&ps) {
        let st = stats(p);
        assert_eq!(
            (st.provisioned, st.expired),
            (1, 1),
            "{}: {summary}",
            p.name
        );
        let rec = &st.records[0];
        let expiry = rec.provisioned_at.unwrap() + 600;
        assert_eq!(rec.nodes.len(), 2, "{}: {rec:?}", p.name);
        for (_, gone) in &rec.nodes {
            let gone = gone.unwrap_or_else(|| panic!("{}: booked node kept: {rec:?}", p.name));
            // Empty from the start, yet kept for the whole booking.
            assert!(gone >= expiry, "{}: removed while booked: {rec:?}", p.name);
            assert!(
                gone <= expiry + 15 * 60,
                "{}: not released: {rec:?}",
                p.name
            );
        }
        assert_eq!(p.pods_created, 0, "{}", p.name);
    }
}

#[test]
fn other_pods_may_take_booked_capacity() {
    // kube-scheduler knows nothing of bookings (neither does the harness `bench fidelity`
    // runs the controller against): while the request's 4 GPUs are booked (its pods come 8
    // minutes after Provisioned), 1-GPU jobs that arrive bind on the booked node, and the
    // request's pods, once created, wait for capacity launched for them.
    let workloads = format!(
        "{}  - jobs:
      name: others
      arrivals: {{every: 1m, start: 21m, end: 40m}}
      duration: {{fixed: 30m}}
      pod: {{nodePool: gpu, cpu: 2, memory: 8Gi, gpus: 1}}
",
        request(
            "booked",
            "      admissionDelay: 8m\n      bookingDuration: 10m\n",
            1,
            4
        )
    );
    let (ps, summary) = results(&scenario(&workloads));
    for p in serving(&ps) {
        let rec = &stats(p).records[0];
        let admitted = rec.admitted_at.expect("admitted");
        let bound = rec
            .bound_at
            .unwrap_or_else(|| panic!("{}: {rec:?}", p.name));
        assert!(
            bound > admitted + 60,
            "{}: the request's pods found their room free: {rec:?} {summary}",
            p.name
        );
        assert_eq!(p.pending_at_end, 0, "{}: {summary}", p.name);
    }
}

#[test]
fn a_requests_pods_bind_one_by_one_as_their_room_comes() {
    // Four 1-GPU pods: three fit in the busy node's 3 free GPUs, the fourth needs a new node.
    // kube-scheduler binds the job's pods Kueue admitted one by one (no gang): three at
    // admission, the last once the booked node is up.
    let s = scenario(&format!(
        "{ONE_BUSY_NODE}{}",
        request("split", "      class: best-effort-atomic\n", 4, 1)
    ));
    let (ps, summary) = results(&s);
    for p in serving(&ps) {
        let rec = &stats(p).records[0];
        let admitted = rec.admitted_at.expect("admitted");
        let mut binds: Vec<i64> = p
            .first_bound
            .iter()
            .filter(|(_, t)| *t >= rec.created)
            .map(|(_, t)| *t)
            .collect();
        binds.sort();
        assert_eq!(binds.len(), 4, "{}: {binds:?} {summary}", p.name);
        assert_eq!(binds[..3], [admitted; 3], "{}: {rec:?} {binds:?}", p.name);
        // The new node: launch, registration and device plugin (100 s) after Provisioned.
        assert!(
            binds[3] >= rec.provisioned_at.unwrap() + 100,
            "{}: {rec:?} {binds:?}",
            p.name
        );
        assert_eq!(rec.bound_at, Some(binds[3]), "{}: {rec:?}", p.name);
    }
}

#[test]
fn same_seed_same_result_with_requests() {
    let workloads = format!(
        "{ONE_BUSY_NODE}{}{}",
        request("a", "      class: check-capacity\n", 2, 1),
        request("b", "      bookingDuration: 5m\n", 3, 2)
            .replace("name: b\n", "name: b\n      limit: 3\n")
    )
    .replace("arrivals: {at: [20m]}", "arrivals: {perHour: 3}");
    let s = scenario(&workloads);
    let a = run(&s, &RunOptions::default(), &|_, _| {}).unwrap();
    let b = run(&s, &RunOptions::default(), &|_, _| {}).unwrap();
    assert_eq!(a.policies.len(), 5);
    for (x, y) in a.policies.iter().zip(&b.policies) {
        assert_eq!(x.provisioning_requests, y.provisioning_requests);
        assert_eq!(x.cost, y.cost);
        assert_eq!(x.samples, y.samples);
    }
    let json: serde_json::Value = serde_json::from_str(&report::to_json(&a)).unwrap();
    let q = &json["policies"][0]["provisioning_requests"];
    assert!(q["requests"].as_u64().unwrap() > 0, "{json}");
    assert!(q.get("to_provisioned_p95_s").is_some(), "{json}");
}

#[test]
fn the_html_report_has_the_provisioning_request_table_only_when_there_are_requests() {
    let with = scenario(&format!(
        "{ONE_BUSY_NODE}{}",
        request("atomic", "      class: best-effort-atomic\n", 2, 1)
    ));
    let r = run(&with, &RunOptions::default(), &|_, _| {}).unwrap();
    let html = report::to_html(&r);
    let table = html
        .split("<h2>ProvisioningRequests</h2>")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no ProvisioningRequest table: {html}"));
    // One row per policy: the two that serve requests with their counts, karpenter-like
    // saying it does not.
    for p in &r.policies {
        let q = stats(p);
        let row = if q.supported {
            format!("<tr><td>{}</td><td>{}</td>", p.name, q.requests)
        } else {
            format!("<tr><td>{}</td><td colspan=\"8\"", p.name)
        };
        assert!(table.contains(&row), "{row} in {table}");
    }
    assert!(table.contains("not served"), "{table}");
    // A cluster of one to three nodes: the node axis still counts in whole nodes (its labels
    // are the end-anchored texts of the chart).
    let nodes = html
        .split("<h3>gpu-autoscaler: nodes by instance type")
        .nth(1)
        .and_then(|c| c.split("</svg>").next())
        .expect("a node chart");
    let labels: Vec<&str> = nodes
        .split("text-anchor=\"end\"")
        .skip(1)
        .filter_map(|t| t.split_once('>')?.1.split_once("</text>"))
        .map(|(l, _)| l.trim())
        .collect();
    assert!(labels.len() >= 2, "{nodes}");
    assert!(
        labels.iter().all(|l| l.parse::<u32>().is_ok()),
        "{labels:?}"
    );

    let without = scenario(ONE_BUSY_NODE);
    let r = run(&without, &RunOptions::default(), &|_, _| {}).unwrap();
    assert!(!report::to_html(&r).contains("ProvisioningRequests</h2>"));
}
