//! GPU shares for the harness scheduler: which pods take a share of a device, and on which
//! devices of a node the shares go (the part a HAMi-style scheduler extender plays in a real
//! cluster). The rules are listed in the parent module's doc; this file only implements them.
//!
//! Written from the encodings' definitions, not from the planner, so that a planner that packs
//! shares wrongly disagrees with the harness instead of grading itself.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use super::Resources;

/// Pod annotation of this project: a share of one device in thousandths (`"1".."1000"`).
pub(crate) const GPU_SHARE_ANNOTATION: &str = "gpu-autoscaler.dev/gpu-share";
/// The device resource shares are taken from.
pub(crate) const DEVICE: &str = "nvidia.com/gpu";
/// HAMi's per-device core percentage (a pseudo-resource its extender reads; no node has it).
const HAMI_CORES: &str = "nvidia.com/gpucores";
/// HAMi's per-device memory (MiB) and memory percentage: read by HAMi's device plugin, not
/// modelled here (the harness's nodes register no device memory).
const HAMI_MEMORY: [&str; 2] = ["nvidia.com/gpumem", "nvidia.com/gpumem-percentage"];

/// A pod's ask of shared devices: `devices` distinct devices of `resource`, `milli`
/// thousandths of each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Share {
    /// The device resource (`nvidia.com/gpu`).
    pub resource: String,
    /// Thousandths of each device, 1..=1000.
    pub milli: u32,
    /// How many distinct devices each hold one such share.
    pub devices: u32,
}

/// What the harness scheduler checks for one pod, worked out once per pod (specs are immutable).
#[derive(Debug)]
pub(crate) struct Ask {
    /// Requests checked against the node's free allocatable: for a share pod without the
    /// device resource and HAMi's pseudo-resources, which the share accounting covers.
    pub requests: Resources,
    /// The pod's share, `Ok(None)` for none, `Err(why)` for a share annotation that does not
    /// parse (such a pod fits no node, and says why).
    pub share: Result<Option<Share>, String>,
}

impl Ask {
    /// Splits `pod`'s effective requests `req` (milli-units) into what the allocatable check
    /// sees and the share, per the parent module's rules.
    pub(crate) fn new(pod: &Value, mut req: Resources) -> Ask {
        let whole = req.get(DEVICE).copied().unwrap_or(0);
        let cores = req.get(HAMI_CORES).copied().unwrap_or(0);
        let annotation = pod
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(GPU_SHARE_ANNOTATION))
            .and_then(Value::as_str);
        let share = match annotation {
            Some(v) => match v.trim().parse::<u32>() {
                Ok(milli @ 1..=1000) => Ok(Some(Share {
                    resource: DEVICE.into(),
                    milli,
                    devices: 1,
                })),
                _ => Err(format!(
                    "pod's annotation {GPU_SHARE_ANNOTATION}={v:?} is not a whole number of \
                     thousandths in 1..=1000"
                )),
            },
            // HAMi: `gpucores` percent of each of the `nvidia.com/gpu` devices asked (one when
            // absent); 100 % is a device of its own, which the whole-device count covers.
            None if cores > 0 && cores < 100_000 => {
                if cores % 1000 != 0 {
                    Err(format!(
                        "pod's {HAMI_CORES} request is not a whole percentage ({} %)",
                        cores as f64 / 1000.0
                    ))
                } else {
                    Ok(Some(Share {
                        resource: DEVICE.into(),
                        milli: u32::try_from(cores / 100).unwrap_or(1000),
                        devices: u32::try_from((whole / 1000).max(1)).unwrap_or(u32::MAX),
                    }))
                }
            }
            None => Ok(None),
        };
        req.remove(HAMI_CORES);
        for r in HAMI_MEMORY {
            req.remove(r);
        }
        if matches!(share, Ok(Some(_))) {
            req.remove(DEVICE);
        }
        Ask {
            requests: req,
            share,
        }
    }
}

/// The shares held on one node's devices, per device resource: thousandths used on each device
/// index. A device with any share is no longer free as a whole device.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeDevices {
    used: BTreeMap<String, Vec<u32>>,
}

impl NodeDevices {
    /// The devices of `resource` on a node whose allocatable is `allocatable` (milli-units):
    /// one per whole unit advertised.
    fn fresh(resource: &str, allocatable: &Resources) -> Vec<u32> {
        let n = allocatable.get(resource).copied().unwrap_or(0).max(0) / 1000;
        vec![0; usize::try_from(n).unwrap_or(0)]
    }

    /// Where `share` would go: one device index per device asked, best fit (the partly used
    /// device with the least room that still holds the share, lowest index on a tie), else the
    /// lowest untouched device while `free_whole` (the node's free amount of the resource, in
    /// milli-units) leaves a whole device. `None` when it does not fit.
    pub(crate) fn place(
        &self,
        share: &Share,
        allocatable: &Resources,
        free_whole: i128,
    ) -> Option<Vec<usize>> {
        let fresh;
        let used = match self.used.get(&share.resource) {
            Some(u) => u,
            None => {
                fresh = Self::fresh(&share.resource, allocatable);
                &fresh
            }
        };
        let mut whole_left = free_whole / 1000;
        let mut chosen: Vec<usize> = Vec::new();
        for _ in 0..share.devices {
            let best = used
                .iter()
                .enumerate()
                .filter(|&(i, &u)| u > 0 && u + share.milli <= 1000 && !chosen.contains(&i))
                .min_by_key(|&(i, &u)| (1000 - u - share.milli, i))
                .map(|(i, _)| i);
            let i = match best {
                Some(i) => i,
                None if whole_left >= 1 => {
                    whole_left -= 1;
                    (0..used.len()).find(|&i| used[i] == 0 && !chosen.contains(&i))?
                }
                None => return None,
            };
            chosen.push(i);
        }
        Some(chosen)
    }

    /// Of `resource`'s devices: how many hold shares, and the thousandths they hold in all.
    pub(crate) fn shared(&self, resource: &str) -> (i128, i128) {
        self.used.get(resource).map_or((0, 0), |u| {
            let held = u.iter().filter(|x| **x > 0);
            (
                held.clone().count() as i128,
                held.map(|x| i128::from(*x)).sum(),
            )
        })
    }

    /// Takes `share` on the devices `at`; returns how many untouched devices it opened (each
    /// leaves the node's free whole-device count). Indices past the node's devices are ignored.
    pub(crate) fn take(&mut self, share: &Share, at: &[usize], allocatable: &Resources) -> i128 {
        let used = self
            .used
            .entry(share.resource.clone())
            .or_insert_with(|| Self::fresh(&share.resource, allocatable));
        let mut opened = 0;
        for &i in at {
            if let Some(u) = used.get_mut(i) {
                if *u == 0 {
                    opened += 1;
                }
                *u = (*u + share.milli).min(1000);
            }
        }
        opened
    }
}

/// What the harness scheduler remembers between passes: parsed asks by pod uid, and the devices
/// each bound share pod holds (node and device indices), the way HAMi records its choice on the
/// pod, so a device keeps its shares however the pods around it come and go.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    /// Parsed asks by pod uid.
    pub asks: HashMap<String, Arc<Ask>>,
    /// Device indices of bound share pods by pod uid.
    pub placements: HashMap<String, (String, Vec<usize>)>,
}

impl Memory {
    /// The ask of the pod with `uid`, worked out from `pod` the first time.
    pub(crate) fn ask(&mut self, uid: &str, pod: &Value) -> Arc<Ask> {
        if let Some(a) = self.asks.get(uid) {
            return a.clone();
        }
        let a = Arc::new(Ask::new(pod, super::pod_requests(pod)));
        self.asks.insert(uid.to_string(), a.clone());
        a
    }

    /// Forgets pods that no longer exist (`live` holds the uids of every pod listed).
    pub(crate) fn forget_all_but(&mut self, live: &HashSet<&str>) {
        self.asks.retain(|uid, _| live.contains(uid.as_str()));
        self.placements.retain(|uid, _| live.contains(uid.as_str()));
    }
}

/// Why no device of a node takes `share`, in the words of the extender's filter.
pub(crate) fn no_room(share: &Share) -> String {
    if share.devices > 1 {
        format!(
            "node(s) had fewer than {} {} devices with {}/1000 free",
            share.devices, share.resource, share.milli
        )
    } else {
        format!(
            "node(s) had no {} device with {}/1000 free",
            share.resource, share.milli
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::binder::pod_requests;

    fn ask(pod: Value) -> Ask {
        let req = pod_requests(&pod);
        Ask::new(&pod, req)
    }

    fn annotated(share: &str) -> Value {
        json!({"metadata": {"annotations": {GPU_SHARE_ANNOTATION: share}},
               "spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}})
    }

    fn hami(gpus: &str, cores: &str) -> Value {
        json!({"spec": {"containers": [{"resources": {"limits": {
            "nvidia.com/gpu": gpus, "nvidia.com/gpucores": cores, "nvidia.com/gpumem": "4000"}}}]}})
    }

    fn share(milli: u32, devices: u32) -> Share {
        Share {
            resource: DEVICE.into(),
            milli,
            devices,
        }
    }

    #[test]
    fn the_annotation_is_a_share_of_one_device() {
        let a = ask(annotated("470"));
        assert_eq!(a.share, Ok(Some(share(470, 1))));
        assert_eq!(a.requests.get("cpu"), Some(&1000));
        assert!(!a.requests.contains_key(DEVICE));
        let bad = ask(annotated("half")).share.unwrap_err();
        assert!(
            bad.contains(GPU_SHARE_ANNOTATION) && bad.contains("\"half\""),
            "{bad}"
        );
        assert!(ask(annotated("0")).share.is_err());
        assert!(ask(annotated("1001")).share.is_err());
    }

    #[test]
    fn hami_cores_are_a_share_of_each_device_asked_and_pseudo_resources_are_not_checked() {
        let one = ask(hami("1", "30"));
        assert_eq!(one.share, Ok(Some(share(300, 1))));
        assert!(one.requests.keys().all(|k| !k.starts_with("nvidia.com/")));
        assert_eq!(ask(hami("2", "50")).share, Ok(Some(share(500, 2))));
        // 100 % of the cores is a whole device, counted as one.
        let whole = ask(hami("1", "100"));
        assert_eq!(whole.share, Ok(None));
        assert_eq!(whole.requests.get(DEVICE), Some(&1000));
        assert!(!whole.requests.contains_key("nvidia.com/gpumem"));
        // The annotation wins over gpucores.
        let mut both = hami("1", "30");
        both["metadata"] = json!({"annotations": {GPU_SHARE_ANNOTATION: "250"}});
        assert_eq!(ask(both).share, Ok(Some(share(250, 1))));
    }

    fn node(gpus: i128) -> Resources {
        Resources::from([(DEVICE.to_string(), gpus * 1000)])
    }

    #[test]
    fn shares_pack_per_device_best_fit_and_never_across_devices() {
        let alloc = node(2);
        let mut d = NodeDevices::default();
        let mut free = 2000;
        let put = |d: &mut NodeDevices, free: &mut i128, s: &Share| {
            let at = d.place(s, &alloc, *free)?;
            *free -= 1000 * d.take(s, &at, &alloc);
            Some(at)
        };
        assert_eq!(put(&mut d, &mut free, &share(600, 1)), Some(vec![0]));
        // 0.5 does not fit next to 0.6: a second device opens.
        assert_eq!(put(&mut d, &mut free, &share(500, 1)), Some(vec![1]));
        assert_eq!(free, 0);
        // 0.4 fits both; best fit takes the fuller device (0.6 used), leaving 0.5 whole.
        assert_eq!(put(&mut d, &mut free, &share(400, 1)), Some(vec![0]));
        assert_eq!(put(&mut d, &mut free, &share(500, 1)), Some(vec![1]));
        // Both devices full; the 1.0 left free in total was never pooled.
        assert_eq!(put(&mut d, &mut free, &share(100, 1)), None);
    }

    #[test]
    fn a_share_does_not_fit_devices_taken_whole_and_multi_device_shares_use_distinct_devices() {
        let alloc = node(2);
        let mut d = NodeDevices::default();
        // One of the two devices is taken by a whole-GPU pod: 1000 milli left whole.
        let at = d.place(&share(300, 1), &alloc, 1000).unwrap();
        d.take(&share(300, 1), &at, &alloc);
        // Now no device is free as a whole: 0.8 fits nowhere, 0.7 fits on the used device.
        assert_eq!(d.place(&share(800, 1), &alloc, 0), None);
        assert_eq!(d.place(&share(700, 1), &alloc, 0), Some(vec![0]));
        // Two devices of 0.5 each need a second device, which a whole pod holds.
        assert_eq!(d.place(&share(500, 2), &alloc, 0), None);
        assert_eq!(d.place(&share(500, 2), &alloc, 1000), Some(vec![0, 1]));
        // A node without the device takes no share.
        assert_eq!(
            NodeDevices::default().place(&share(100, 1), &Resources::new(), 0),
            None
        );
    }
}
