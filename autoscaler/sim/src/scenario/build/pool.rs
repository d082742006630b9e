//! The compact NodePool form of a scenario built into the core's pool: instance types by
//! family or name, zones, capacity types, taints, GPU sharing (time-slicing, MPS, MIG,
//! fractions), limits and disruption, each checked with an error naming the file, line and
//! field.

use std::sync::Arc;

use super::*;

pub(in crate::scenario) fn build_pool(
    cx: &Ctx,
    i: usize,
    f: &PoolFile,
    catalog: &Arc<Vec<InstanceType>>,
) -> Result<Pool, SimError> {
    let field = |s: &str| format!("pools[{i}].{s}");
    let at = |s: &str| cx.err(&["pools:", &format!("name: {}", f.name)], field(s), "");
    let err = |s: &str, key: &str, why: String| {
        cx.err(
            &["pools:", &format!("name: {}", f.name), key],
            field(s),
            why,
        )
    };
    let _ = at;
    // The NodePool's range; 0 (the default) ranks below every weight, as an absent one.
    if !(0..=100).contains(&f.weight) {
        return Err(err(
            "weight",
            "weight:",
            format!("{} is outside 0..=100", f.weight),
        ));
    }
    let mut reqs = Requirements::new();
    let mut add = |key: &str, values: &[String], fname: &str| -> Result<(), SimError> {
        if values.is_empty() {
            return Ok(());
        }
        reqs.add(key, Operator::In, values)
            .map_err(|e| err(fname, fname, e.to_string()))
    };
    for name in &f.instance_types {
        if !catalog.iter().any(|t| &t.name == name) {
            return Err(err(
                "instanceTypes",
                name,
                format!("unknown instance type {name:?} (not in the catalog)"),
            ));
        }
    }
    add(labels::INSTANCE_TYPE, &f.instance_types, "instanceTypes")?;
    add(labels::INSTANCE_FAMILY, &f.families, "families")?;
    let gpus: Vec<String> = f.gpus.iter().map(|g| g.to_lowercase()).collect();
    add(labels::GPU_NAME, &gpus, "gpus")?;
    let cts: Vec<String> = f
        .capacity_types
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    add(
        labels::CAPACITY_TYPE,
        &if cts.is_empty() {
            vec!["on-demand".to_string()]
        } else {
            cts
        },
        "capacityTypes",
    )?;
    add(labels::ZONE, &f.zones, "zones")?;
    add(labels::ARCH, &f.arch, "arch")?;
    let mut taints = Vec::new();
    for t in &f.taints {
        taints.push(parse_taint(t).map_err(|e| err("taints", &t.key, e))?);
    }
    let mut startup_taints = Vec::new();
    for t in &f.startup_taints {
        startup_taints.push(parse_taint(t).map_err(|e| err("startupTaints", &t.key, e))?);
    }
    let mig = match &f.mig {
        None => None,
        Some(config) => Some(MigSharing {
            config: config.clone(),
            strategy: match f.mig_strategy.as_deref() {
                None | Some("mixed") => MigStrategy::Mixed,
                Some("single") => MigStrategy::Single,
                Some(other) => {
                    return Err(err(
                        "migStrategy",
                        "migStrategy",
                        format!("{other:?} is not single or mixed"),
                    ));
                }
            },
        }),
    };
    let time_slicing = match f.time_slicing {
        None => None,
        Some(r) if r >= 2 => Some(TimeSlicing {
            replicas: r,
            rename: false,
            ..TimeSlicing::default()
        }),
        Some(r) => {
            return Err(err(
                "timeSlicing",
                "timeSlicing",
                format!("{r} replicas: must be at least 2"),
            ));
        }
    };
    if mig.is_some() && time_slicing.is_some() {
        return Err(err(
            "mig",
            "mig",
            "timeSlicing and mig cannot both be set".into(),
        ));
    }
    let mps = match f.mps {
        None => None,
        Some(_) if mig.is_some() || time_slicing.is_some() => {
            return Err(err(
                "mps",
                "mps:",
                "mps cannot be set with timeSlicing or mig".into(),
            ));
        }
        Some(r) if (2..=48).contains(&r) => Some(TimeSlicing {
            replicas: r,
            rename: false,
            fail_requests_greater_than_one: true,
            mps: true,
        }),
        Some(r) => {
            return Err(err(
                "mps",
                "mps:",
                format!("{r} replicas: must be between 2 and 48"),
            ));
        }
    };
    let time_slicing = time_slicing.or(mps);
    if let Some(a) = &f.atomic_scale_up
        && !(1..=1000).contains(&a.nodes)
    {
        return Err(err(
            "atomicScaleUp",
            "atomicScaleUp.nodes",
            format!("{} is outside [1, 1000]", a.nodes),
        ));
    }
    let mut limits = Limits::default();
    for (k, q) in &f.limits {
        if k == "nodes" {
            limits.nodes = Some((q.0.millis() / 1000) as i64);
            continue;
        }
        let mut r = Resources::new();
        r.add_quantity(k, q.0)
            .map_err(|e| err(&format!("limits[{k:?}]"), k, e.to_string()))?;
        limits.resources.insert(k.clone(), r.get(k));
    }
    for (k, v) in &f.gpu_limits {
        if *v < 0 {
            return Err(err(
                &format!("gpuLimits[{k:?}]"),
                k,
                "must not be negative".into(),
            ));
        }
        limits.gpus_by_model.insert(k.clone(), *v);
    }
    // As NodePool validation refuses them: a minimum the pool's own limit forbids, and one an
    // all-or-nothing pool could only reach part-way.
    if let Some(max) = limits.nodes
        && i64::from(f.min_nodes) > max
    {
        return Err(err(
            "minNodes",
            "minNodes",
            format!("{} exceeds limits[\"nodes\"] = {max}", f.min_nodes),
        ));
    }
    if let Some(a) = &f.atomic_scale_up
        && f.min_nodes != 0
        && f.min_nodes != a.nodes
    {
        return Err(err(
            "minNodes",
            "minNodes",
            format!(
                "{} must be 0 or atomicScaleUp.nodes ({})",
                f.min_nodes, a.nodes
            ),
        ));
    }
    let d = &f.disruption;
    let mut disruption = DisruptionPolicy::default();
    if let Some(p) = &d.consolidation_policy {
        disruption.consolidation_policy = match p.as_str() {
            "WhenEmpty" => ConsolidationPolicy::WhenEmpty,
            "WhenEmptyOrUnderutilized" => ConsolidationPolicy::WhenEmptyOrUnderutilized,
            other => {
                return Err(err(
                    "disruption.consolidationPolicy",
                    "consolidationPolicy",
                    format!("{other:?} is not WhenEmpty or WhenEmptyOrUnderutilized"),
                ));
            }
        };
    }
    if let Some(v) = d.consolidate_after {
        disruption.consolidate_after_s = v.0;
    }
    for (v, name, slot) in [
        (
            d.gpu_utilization_threshold,
            "gpuUtilizationThreshold",
            &mut disruption.gpu_utilization_threshold,
        ),
        (
            d.utilization_threshold,
            "utilizationThreshold",
            &mut disruption.utilization_threshold,
        ),
        (
            d.right_size_savings,
            "rightSizeSavings",
            &mut disruption.right_size_savings,
        ),
    ] {
        if let Some(v) = v {
            if !(0.0..=1.0).contains(&v) {
                return Err(err(
                    &format!("disruption.{name}"),
                    name,
                    format!("{v} is outside [0, 1]"),
                ));
            }
            *slot = v;
        }
    }
    if let Some(v) = d.unneeded_time {
        disruption.unneeded_s = v.0;
    }
    if !d.budgets.is_empty() {
        disruption.budgets.clear();
        for b in &d.budgets {
            let value = if let Some(p) = b.strip_suffix('%') {
                p.trim().parse().ok().map(BudgetValue::Percent)
            } else {
                b.trim().parse().ok().map(BudgetValue::Count)
            };
            let Some(nodes) = value else {
                return Err(err(
                    "disruption.budgets",
                    "budgets",
                    format!("{b:?} is neither a count nor a percentage"),
                ));
            };
            disruption.budgets.push(Budget {
                nodes,
                reasons: vec![],
                schedule: None,
            });
        }
    }
    let mut pool_labels: Labels = f.labels.clone().into_iter().collect();
    pool_labels.insert(labels::NODEPOOL.into(), f.name.clone());
    Ok(Pool {
        name: f.name.clone(),
        weight: f.weight,
        labels: pool_labels,
        taints,
        startup_taints,
        requirements: reqs,
        sharing: GpuSharing {
            time_slicing,
            mig,
            fractional: f.fractional,
        },
        limits,
        min_nodes: f.min_nodes,
        min_values: Default::default(),
        disruption,
        instance_types: catalog.clone(),
        atomic_nodes: f.atomic_scale_up.as_ref().map(|a| a.nodes),
        dra_attributes: Default::default(),
        // A scenario's pools never change during a run, so no node drifts from its template.
        template_hash: None,
    })
}
