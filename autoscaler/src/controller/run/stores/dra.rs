//! The caches of Dynamic Resource Allocation (`resource.k8s.io/v1`): ResourceClaims,
//! ResourceClaimTemplates, DeviceClasses and ResourceSlices, watched once the API is served.
//!
//! # Memory
//!
//! Each object is trimmed before it is cached: managed fields, opaque driver configuration
//! (`config`), per-device status data, taints and binding conditions are never read and are
//! dropped; every list the translation reads is capped at the limit the API server itself
//! validates in `resource.k8s.io/v1` ([`LIMITS`]: 32 requests per claim, 128 devices per
//! slice, 10 KiB per CEL expression...). A real API server never sends more, so the caps only
//! bite on an object a non-validating server let through; such an object is not silently cut:
//! it is marked with the annotation [`TRUNCATED`] naming the fields, and the translation
//! refuses it (a pod referencing a truncated claim gets a reason) instead of planning with
//! part of it. So each cached object is bounded by a constant, whatever the server sends.

use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceSelector, ResourceClaim, ResourceClaimSpec, ResourceClaimTemplate,
    ResourceSlice,
};
use kube::runtime::reflector::Store;

// The marker is read by the translation, which also runs without the controller feature.
pub use crate::controller::dra::TRUNCATED;

/// The caps per object, `resource.k8s.io/v1`'s validation limits (Kubernetes 1.34).
pub struct Limits {
    /// `spec.devices.requests` of a claim.
    pub requests: usize,
    /// `firstAvailable` alternatives of one request.
    pub subrequests: usize,
    /// `selectors` of a request or a DeviceClass.
    pub selectors: usize,
    /// `spec.devices.constraints` of a claim.
    pub constraints: usize,
    /// Bytes of one CEL expression.
    pub expression: usize,
    /// `status.reservedFor` of a claim.
    pub reserved_for: usize,
    /// `status.allocation.devices.results` of a claim.
    pub results: usize,
    /// `spec.devices` of a slice.
    pub devices: usize,
    /// Attributes plus capacities of one device.
    pub attributes: usize,
    /// `spec.sharedCounters` of a slice.
    pub counter_sets: usize,
    /// Counters of one counter set.
    pub counters: usize,
    /// `consumesCounters` of one device.
    pub consumes: usize,
}

/// The caps: `resource.k8s.io/v1`'s own validation limits.
pub const LIMITS: Limits = Limits {
    requests: 32,
    subrequests: 8,
    selectors: 32,
    constraints: 32,
    expression: 10 * 1024,
    reserved_for: 256,
    results: 32,
    devices: 128,
    attributes: 32,
    counter_sets: 8,
    counters: 32,
    consumes: 2,
};

/// The DRA caches, set together once `resource.k8s.io/v1` is served and listed.
#[derive(Clone)]
pub struct DraStores {
    /// ResourceClaims, trimmed.
    pub claims: Store<ResourceClaim>,
    /// ResourceClaimTemplates, trimmed.
    pub templates: Store<ResourceClaimTemplate>,
    /// DeviceClasses, trimmed.
    pub classes: Store<DeviceClass>,
    /// ResourceSlices, trimmed.
    pub slices: Store<ResourceSlice>,
}

/// What was cut from one object, to be named in [`TRUNCATED`].
#[derive(Default)]
struct Cuts(Vec<String>);

impl Cuts {
    fn cap<T>(&mut self, v: &mut Option<Vec<T>>, max: usize, field: &str) {
        if let Some(list) = v
            && list.len() > max
        {
            self.0.push(format!("{field} ({} > {max})", list.len()));
            list.truncate(max);
        }
    }

    fn selectors(&mut self, v: &mut Option<Vec<DeviceSelector>>, field: &str) {
        self.cap(v, LIMITS.selectors, field);
        for (i, s) in v.iter_mut().flatten().enumerate() {
            if let Some(cel) = &mut s.cel
                && cel.expression.len() > LIMITS.expression
            {
                self.0.push(format!(
                    "{field}[{i}].cel.expression ({} bytes > {})",
                    cel.expression.len(),
                    LIMITS.expression
                ));
                // An expression cut anywhere means something else: keep none of it.
                cel.expression.clear();
            }
        }
    }

    /// Records the cuts on the object (and drops its managed fields, never read).
    fn mark(self, meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
        meta.managed_fields = None;
        if !self.0.is_empty() {
            meta.annotations
                .get_or_insert_with(Default::default)
                .insert(TRUNCATED.to_string(), self.0.join(", "));
        }
    }
}

fn trim_claim_spec(spec: &mut ResourceClaimSpec, cuts: &mut Cuts, at: &str) {
    let Some(d) = &mut spec.devices else {
        return;
    };
    d.config = None;
    cuts.cap(
        &mut d.requests,
        LIMITS.requests,
        &format!("{at}.devices.requests"),
    );
    cuts.cap(
        &mut d.constraints,
        LIMITS.constraints,
        &format!("{at}.devices.constraints"),
    );
    for (i, r) in d.requests.iter_mut().flatten().enumerate() {
        let at = format!("{at}.devices.requests[{i}]");
        if let Some(e) = &mut r.exactly {
            e.tolerations = None;
            cuts.selectors(&mut e.selectors, &format!("{at}.exactly.selectors"));
        }
        cuts.cap(
            &mut r.first_available,
            LIMITS.subrequests,
            &format!("{at}.firstAvailable"),
        );
        for (j, s) in r.first_available.iter_mut().flatten().enumerate() {
            s.tolerations = None;
            cuts.selectors(
                &mut s.selectors,
                &format!("{at}.firstAvailable[{j}].selectors"),
            );
        }
    }
}

/// Trims a ResourceClaim for the cache (see the module docs).
pub fn trim_claim(c: &mut ResourceClaim) {
    let mut cuts = Cuts::default();
    trim_claim_spec(&mut c.spec, &mut cuts, "spec");
    if let Some(s) = &mut c.status {
        // Per-device status (network data, driver conditions) is never read.
        s.devices = None;
        cuts.cap(
            &mut s.reserved_for,
            LIMITS.reserved_for,
            "status.reservedFor",
        );
        if let Some(d) = s.allocation.as_mut().and_then(|a| a.devices.as_mut()) {
            d.config = None;
            cuts.cap(
                &mut d.results,
                LIMITS.results,
                "status.allocation.devices.results",
            );
        }
    }
    cuts.mark(&mut c.metadata);
}

/// Trims a ResourceClaimTemplate for the cache (see the module docs).
pub fn trim_template(t: &mut ResourceClaimTemplate) {
    let mut cuts = Cuts::default();
    trim_claim_spec(&mut t.spec.spec, &mut cuts, "spec.spec");
    cuts.mark(&mut t.metadata);
}

/// Trims a DeviceClass for the cache (see the module docs).
pub fn trim_class(c: &mut DeviceClass) {
    let mut cuts = Cuts::default();
    c.spec.config = None;
    cuts.selectors(&mut c.spec.selectors, "spec.selectors");
    cuts.mark(&mut c.metadata);
}

/// Trims a ResourceSlice for the cache (see the module docs).
pub fn trim_slice(s: &mut ResourceSlice) {
    let mut cuts = Cuts::default();
    cuts.cap(&mut s.spec.devices, LIMITS.devices, "spec.devices");
    cuts.cap(
        &mut s.spec.shared_counters,
        LIMITS.counter_sets,
        "spec.sharedCounters",
    );
    for (i, set) in s.spec.shared_counters.iter_mut().flatten().enumerate() {
        if set.counters.len() > LIMITS.counters {
            cuts.0.push(format!(
                "spec.sharedCounters[{i}].counters ({} > {})",
                set.counters.len(),
                LIMITS.counters
            ));
            // BTreeMap: keep the first names in order, deterministic.
            let keep: Vec<String> = set.counters.keys().take(LIMITS.counters).cloned().collect();
            set.counters.retain(|k, _| keep.contains(k));
        }
    }
    for (i, d) in s.spec.devices.iter_mut().flatten().enumerate() {
        d.taints = None;
        d.binding_conditions = None;
        d.binding_failure_conditions = None;
        let at = format!("spec.devices[{i}]");
        cuts.cap(
            &mut d.consumes_counters,
            LIMITS.consumes,
            &format!("{at}.consumesCounters"),
        );
        let attrs = d.attributes.as_ref().map_or(0, |a| a.len());
        let caps = d.capacity.as_ref().map_or(0, |c| c.len());
        if attrs + caps > LIMITS.attributes {
            cuts.0.push(format!(
                "{at}.attributes and capacity ({} > {})",
                attrs + caps,
                LIMITS.attributes
            ));
            if let Some(a) = &mut d.attributes {
                let keep: Vec<String> = a.keys().take(LIMITS.attributes).cloned().collect();
                a.retain(|k, _| keep.contains(k));
            }
            let room = LIMITS.attributes - d.attributes.as_ref().map_or(0, |a| a.len());
            if let Some(c) = &mut d.capacity {
                let keep: Vec<String> = c.keys().take(room).cloned().collect();
                c.retain(|k, _| keep.contains(k));
            }
        }
    }
    cuts.mark(&mut s.metadata);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::dra::truncated;
    use serde_json::json;

    #[test]
    fn a_claim_over_the_api_limits_is_capped_and_marked() {
        let requests: Vec<_> = (0..40)
            .map(|i| {
                json!({"name": format!("r{i}"), "exactly": {"deviceClassName": "gpu.nvidia.com",
                "selectors": [{"cel": {"expression": "x".repeat(20_000)}}]}})
            })
            .collect();
        let mut claim: ResourceClaim = serde_json::from_value(json!({
            "metadata": {"name": "huge", "namespace": "ml",
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"devices": {"requests": requests,
                                 "config": [{"opaque": {"driver": "d", "parameters": {"big": "y"}}}]}},
        }))
        .unwrap();
        trim_claim(&mut claim);
        let d = claim.spec.devices.as_ref().unwrap();
        assert_eq!(d.requests.as_ref().unwrap().len(), 32);
        assert!(d.config.is_none());
        assert!(claim.metadata.managed_fields.is_none());
        let expr = &d.requests.as_ref().unwrap()[0]
            .exactly
            .as_ref()
            .unwrap()
            .selectors
            .as_ref()
            .unwrap()[0];
        assert_eq!(expr.cel.as_ref().unwrap().expression, "");
        let why = truncated(&claim.metadata).expect("marked");
        assert!(why.starts_with("spec.devices.requests (40 > 32), spec.devices.requests[0].exactly.selectors[0].cel.expression (20000 bytes > 10240)"), "{why}");
    }

    #[test]
    fn a_slice_within_the_limits_is_kept_whole_and_unmarked() {
        let devices: Vec<_> = (0..8)
            .map(|i| {
                json!({"name": format!("gpu-{i}"),
                "attributes": {"type": {"string": "gpu"}, "index": {"int": i}},
                "capacity": {"memory": {"value": "80Gi"}}})
            })
            .collect();
        let mut slice: ResourceSlice = serde_json::from_value(json!({
            "metadata": {"name": "n1-gpu"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1",
                     "generation": 1, "resourceSliceCount": 1}, "devices": devices},
        }))
        .unwrap();
        let before = slice.spec.clone();
        trim_slice(&mut slice);
        assert_eq!(slice.spec, before);
        assert_eq!(truncated(&slice.metadata), None);

        let many: Vec<_> = (0..200).map(|i| json!({"name": format!("d{i}")})).collect();
        let mut big: ResourceSlice = serde_json::from_value(json!({
            "metadata": {"name": "big"},
            "spec": {"driver": "x", "allNodes": true, "pool": {"name": "p", "generation": 1,
                     "resourceSliceCount": 1}, "devices": many},
        }))
        .unwrap();
        trim_slice(&mut big);
        assert_eq!(big.spec.devices.as_ref().unwrap().len(), 128);
        assert_eq!(truncated(&big.metadata), Some("spec.devices (200 > 128)"));
    }
}
