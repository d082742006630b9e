//! Settling and the final accounting: every count of the result, from the final API and
//! cloud state and the server's audit.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use autoscaler::controller::Result;
use autoscaler::controller::keys;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use nodepools::NodeClaim;
use serde_json::Value;

use super::server::audit;
use super::workload::INITIAL_BUDGET;
use super::{Bench, ReliabilityResult, SPOT_POOL};

impl Bench<'_> {
    /// Waits until no pod is pending and no empty Node is left beyond `minNodes`, then for
    /// two more garbage-collection passes; gives up at the settle timeout.
    pub(super) async fn settle(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.args.settle_timeout;
        // The replay left budgets of 1 to 3 nodes: the empty nodes it leaves would go one
        // pool-budget at a time. Settling is about the end state, so the initial budget is
        // back (a raised budget binds nothing started before it, see `observe`).
        let pools: Vec<String> = self.budgets.keys().cloned().collect();
        for name in pools {
            self.set_budget(name, INITIAL_BUDGET).await?;
        }
        let mut quiet_since: Option<Instant> = None;
        loop {
            self.observe().await?;
            let pods = self.pods().await?;
            let pending = pods.iter().filter(|p| unplaced(p)).count();
            let empty = self.empty_nodes(&pods).await?.len();
            let orphans = self.orphan_instances().await?.len();
            // A claim whose launch was recorded on the instance but not on the claim (its
            // status write failed) is launched again after a pause, which records it: the
            // accounting below counts such a Node as a duplicate, so settling waits for it.
            let unclaimed = unclaimed_nodes(&self.nodes().await?, &self.claims().await?).len();
            let wanted: i32 = self.replicas.values().sum();
            let live = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| p.owner_references().iter().any(|o| o.kind == "ReplicaSet"))
                .count();
            // An instance whose claim is gone is the controller's to collect within its GC
            // grace: settling waits for that too, and one still there at the timeout counts.
            if pending == 0
                && empty == 0
                && orphans == 0
                && unclaimed == 0
                && live == wanted as usize
            {
                let since = *quiet_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(8) {
                    return Ok(());
                }
            } else {
                quiet_since = None;
            }
            if Instant::now() > deadline {
                eprintln!(
                    "not settled after {:?}: {pending} pods pending, {empty} empty nodes, {orphans} instances without a claim, {unclaimed} Nodes no claim has recorded, {live} of {wanted} replicas",
                    self.args.settle_timeout
                );
                self.describe_empty_nodes(&pods).await?;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Instances whose NodeClaim does not exist (by name: the claim name is the instance's).
    async fn orphan_instances(&self) -> Result<Vec<String>> {
        let claims: HashSet<String> = self.claims().await?.iter().map(|c| c.name_any()).collect();
        Ok(self
            .instances()
            .await?
            .iter()
            .map(|i| i.name_any())
            .filter(|n| !claims.contains(n))
            .collect())
    }

    /// Prints the controllers' last log lines about each of `names` (a count that is not zero,
    /// in CI say, is diagnosed from the output alone).
    fn describe_from_log(&self, names: &[String]) {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        for name in names {
            let about: Vec<&str> = log.lines().filter(|l| l.contains(name.as_str())).collect();
            eprintln!(
                "{name}: the controllers' last {} lines about it",
                about.len().min(16)
            );
            for line in &about[about.len().saturating_sub(16)..] {
                eprintln!("  {line}");
            }
        }
    }

    /// Prints why each empty Node may have stayed: its taints, whether it is cordoned, and the
    /// controllers' last log lines about it (a run that does not settle, in CI say, is
    /// diagnosed from its output alone).
    async fn describe_empty_nodes(&self, pods: &[Pod]) -> Result<()> {
        let empty = self.empty_nodes(pods).await?;
        for n in self.nodes().await? {
            if !empty.contains(&n.name_any()) {
                continue;
            }
            let spec = n.spec.as_ref();
            let taints: Vec<String> = spec
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect();
            eprintln!(
                "empty node {}: taints {taints:?}, unschedulable {}, created {:?}",
                n.name_any(),
                spec.and_then(|s| s.unschedulable).unwrap_or(false),
                n.metadata.creation_timestamp.as_ref().map(|t| t.0),
            );
            self.describe_from_log(&[n.name_any()]);
        }
        eprintln!("the controllers' log: {}", self.log.display());
        Ok(())
    }

    /// Managed Nodes (not being deleted) with no running pod, beyond their pool's `minNodes`.
    pub(super) async fn empty_nodes(&self, pods: &[Pod]) -> Result<Vec<String>> {
        let busy: HashSet<String> = pods
            .iter()
            .filter(|p| !terminal(p))
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        let mut per_pool: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for n in self.nodes().await? {
            if n.metadata.deletion_timestamp.is_some() || busy.contains(&n.name_any()) {
                continue;
            }
            if let Some(pool) = n.labels().get(keys::POOL_LABEL) {
                per_pool.entry(pool.clone()).or_default().push(n.name_any());
            }
        }
        let all_nodes = self.nodes().await?;
        let mut out = Vec::new();
        for (pool, mut empty) in per_pool {
            // minNodes keeps nodes of the spot pool; the empty ones count against it last.
            if pool == SPOT_POOL {
                let total = all_nodes
                    .iter()
                    .filter(|n| n.labels().get(keys::POOL_LABEL) == Some(&pool))
                    .filter(|n| n.metadata.deletion_timestamp.is_none())
                    .count();
                let keep = 1usize.saturating_sub(total - empty.len());
                empty.truncate(empty.len().saturating_sub(keep));
            }
            out.extend(empty);
        }
        Ok(out)
    }

    pub(super) async fn count(
        &mut self,
        result: &mut ReliabilityResult,
        server_url: &str,
    ) -> Result<()> {
        let instances = self.instances().await?;
        let claims = self.claims().await?;
        let nodes = self.nodes().await?;
        let pods = self.pods().await?;
        let claim_names: HashSet<String> = claims.iter().map(|c| c.name_any()).collect();
        let leaked: Vec<String> = instances
            .iter()
            .map(|i| i.name_any())
            .filter(|n| !claim_names.contains(n))
            .collect();
        if !leaked.is_empty() {
            eprintln!("leaked instances: {leaked:?}");
            self.describe_from_log(&leaked);
        }
        result.leaked_instances = leaked.len();

        let mut by_provider: HashMap<String, usize> = HashMap::new();
        for n in &nodes {
            if let Some(pid) = n.spec.as_ref().and_then(|s| s.provider_id.clone()) {
                *by_provider.entry(pid).or_default() += 1;
            }
        }
        let shared_nodes: usize = by_provider.values().map(|n| n - 1).sum();
        let unclaimed = unclaimed_nodes(&nodes, &claims);
        let empty = self.empty_nodes(&pods).await?;
        if shared_nodes + unclaimed.len() + empty.len() > 0 {
            eprintln!(
                "duplicate nodes: {shared_nodes} sharing an instance, unclaimed {unclaimed:?}, empty {empty:?}"
            );
        }
        result.duplicate_nodes = shared_nodes + unclaimed.len() + empty.len();

        let instance_names: HashSet<String> = instances.iter().map(|i| i.name_any()).collect();
        let mut claims_by_pid: HashMap<String, usize> = HashMap::new();
        let mut claims_by_node: HashMap<String, usize> = HashMap::new();
        let mut instanceless = Vec::new();
        for c in &claims {
            let Some(s) = c.status.as_ref() else { continue };
            if let Some(pid) = &s.provider_id {
                *claims_by_pid.entry(pid.clone()).or_default() += 1;
                let name = providers::kwok::instance_name(pid).unwrap_or_default();
                if !instance_names.contains(name) && c.metadata.deletion_timestamp.is_none() {
                    instanceless.push(c.name_any());
                }
            }
            if let Some(n) = &s.node_name {
                *claims_by_node.entry(n.clone()).or_default() += 1;
            }
        }
        let shared_claims: usize = claims_by_pid
            .values()
            .chain(claims_by_node.values())
            .map(|n| n - 1)
            .sum();
        if shared_claims + instanceless.len() > 0 {
            eprintln!("duplicate claims: {shared_claims} sharing, instanceless {instanceless:?}");
        }
        result.duplicate_claims = shared_claims + instanceless.len();

        let mut lost = 0usize;
        for (name, want) in &self.replicas {
            let have = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none() && !terminal(p))
                .filter(|p| p.labels().get("app") == Some(name))
                .count();
            lost += (*want as usize).saturating_sub(have);
        }
        let present: HashSet<String> = pods.iter().map(|p| p.name_any()).collect();
        let gone: Vec<&String> = self.bare.keys().filter(|b| !present.contains(*b)).collect();
        let a = audit(server_url)?;
        if !gone.is_empty() {
            eprintln!("bare pods lost: {gone:?}");
            // What the controller did to them, for a diagnosis from the output alone.
            for r in a["records"].as_array().into_iter().flatten() {
                let about = |p: &Value| {
                    p["pod"]
                        .as_str()
                        .and_then(|k| k.split_once('/'))
                        .is_some_and(|(_, n)| gone.iter().any(|g| g.as_str() == n))
                };
                if about(r) || r["pods"].as_array().into_iter().flatten().any(about) {
                    eprintln!("  audit: {r}");
                }
            }
        }
        result.lost_pods = lost + gone.len();
        let unplaced: Vec<String> = pods
            .iter()
            .filter(|p| unplaced(p))
            .map(|p| p.name_any())
            .collect();
        if !unplaced.is_empty() {
            eprintln!("unplaced pods: {unplaced:?}");
        }
        result.unplaced_satisfiable_pods = unplaced.len();

        result.api_faults_injected = a["faultsInjected"].as_u64().unwrap_or(0);
        let mut violations = self.budget_violations + self.booking_violations.len();
        for r in a["records"].as_array().into_iter().flatten() {
            let node = r["node"].as_str().unwrap_or_default();
            // Excused only from the failure on: the record's rv is the server's before the
            // call, the failure's the cordon's own (so a call at the cordon's rv came after).
            let after_failure = self.failed.get(node).is_some_and(|(at, uid)| {
                r["rv"].as_u64().is_some_and(|rv| rv >= *at)
                    && r["uid"].as_str().is_none_or(|u| u == uid)
            });
            if after_failure {
                continue;
            }
            match r["call"].as_str() {
                Some("evict") if r["accepted"] == true && !r["protected"].is_null() => {
                    eprintln!("safety: protected pod evicted: {r}");
                    violations += 1;
                }
                Some("deleteNode") => {
                    for p in r["pods"].as_array().into_iter().flatten() {
                        if !p["protected"].is_null() || p["pdbAllowed"] == 0 {
                            eprintln!("safety: Node {node} deleted under pod {p}");
                            violations += 1;
                        }
                    }
                }
                _ => {}
            }
        }
        result.safety_violations = violations;
        result.cloud_faults_injected = std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("injected cloud fault"))
            .count() as u64;
        Ok(())
    }
}

pub(super) fn terminal(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// A live pod no Node holds.
pub(super) fn unplaced(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && !terminal(p)
        && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()
}

/// Live kwok Nodes whose instance no NodeClaim has recorded (`status.providerID`).
fn unclaimed_nodes(nodes: &[Node], claims: &[NodeClaim]) -> Vec<String> {
    let claimed: HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.provider_id.as_deref())
        .collect();
    nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| {
                    p.starts_with(providers::kwok::PROVIDER_ID_PREFIX) && !claimed.contains(p)
                })
        })
        .map(|n| n.name_any())
        .collect()
}
