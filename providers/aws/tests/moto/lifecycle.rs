//! Launch (tags, provider id, launch template, idempotent retry, spot), get, list by tag,
//! garbage-collection input and termination, against moto.

use std::collections::BTreeMap;

use autoscaler_core::CapacityType::{OnDemand, Spot};
use autoscaler_core::taints::Effect;
use autoscaler_core::{Taint, labels};
use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use provider_aws::AwsProvider;
use providers::{
    CloudProvider, InstanceState, LaunchRequest, NodeClassRef, OfferingKey, ProviderError, tags,
};

use crate::harness::Moto;

pub fn request(claim: &str, candidates: Vec<OfferingKey>) -> LaunchRequest {
    LaunchRequest {
        claim: claim.into(),
        pool: "gpu".into(),
        class: NodeClassRef {
            group: "aws.gpu-autoscaler.dev".into(),
            kind: "EC2NodeClass".into(),
            name: "default".into(),
        },
        candidates,
        labels: [
            (labels::NODEPOOL.to_string(), "gpu".to_string()),
            ("team".to_string(), "ml".to_string()),
            (tags::CLAIM.to_string(), claim.to_string()),
            (labels::INSTANCE_TYPE.to_string(), "g5.xlarge".to_string()),
        ]
        .into(),
        taints: vec![Taint::new("nvidia.com/gpu", "true", Effect::NoSchedule)],
        startup_taints: vec![Taint::new(
            "gpu-autoscaler.dev/gpu-not-ready",
            "",
            Effect::NoSchedule,
        )],
        placement_group: None,
        gpu_sharing: Default::default(),
    }
}

/// A provider for `cluster` with a `default` class over zones a and b of moto.
pub async fn provider(moto: &Moto, endpoint: &str, cluster: &str) -> AwsProvider {
    let class = moto
        .node_class(cluster, &["us-east-1a", "us-east-1b"])
        .await;
    let mut s = moto.settings(endpoint, cluster);
    s.node_classes.insert("default".into(), class);
    AwsProvider::connect(s).await.unwrap()
}

async fn instances_tagged(
    moto: &Moto,
    key: &str,
    value: &str,
) -> Vec<aws_sdk_ec2::types::Instance> {
    let out = moto
        .client()
        .describe_instances()
        .filters(
            Filter::builder()
                .name(format!("tag:{key}"))
                .values(value)
                .build(),
        )
        .filters(
            Filter::builder()
                .name("instance-state-name")
                .values("pending")
                .values("running")
                .build(),
        )
        .send()
        .await
        .unwrap();
    out.reservations()
        .iter()
        .flat_map(|r| r.instances().to_vec())
        .collect()
}

#[tokio::test]
async fn launch_tags_provider_id_template_and_idempotent_retry() {
    let Some(moto) = Moto::start("launch_tags_provider_id_template_and_idempotent_retry") else {
        return;
    };
    let p = provider(&moto, &moto.url, "c3").await;
    let req = request(
        "gpu-abc12",
        vec![
            OfferingKey::new("g5.xlarge", "us-east-1b", OnDemand),
            OfferingKey::new("g5.2xlarge", "us-east-1a", OnDemand),
        ],
    );
    let launched = p.launch(&req).await.unwrap();
    let i = &launched.instance;
    assert!(launched.unavailable.is_empty());
    assert_eq!(i.instance_type, "g5.xlarge");
    assert_eq!(i.zone, "us-east-1b", "the subnet of the chosen zone");
    assert_eq!(i.capacity_type, OnDemand);
    assert_eq!(i.claim.as_deref(), Some("gpu-abc12"));
    assert_eq!(i.pool.as_deref(), Some("gpu"));
    assert_eq!(i.price, Some(1.006));
    assert!(
        i.provider_id.starts_with("aws:///us-east-1b/i-"),
        "{}",
        i.provider_id
    );
    assert!(matches!(
        i.state,
        InstanceState::Running | InstanceState::Pending
    ));

    // Tags as EC2 stores them.
    let ec2 = instances_tagged(&moto, tags::CLAIM, "gpu-abc12").await;
    assert_eq!(ec2.len(), 1);
    let t: BTreeMap<&str, &str> = ec2[0]
        .tags()
        .iter()
        .map(|t| (t.key().unwrap(), t.value().unwrap()))
        .collect();
    assert_eq!(t[tags::CLUSTER], "c3");
    assert_eq!(t[tags::POOL], "gpu");
    assert_eq!(t[tags::CLAIM], "gpu-abc12");

    // The launch template: created once, with the boot configuration in its user data.
    let lts = moto
        .client()
        .describe_launch_templates()
        .send()
        .await
        .unwrap();
    assert_eq!(lts.launch_templates().len(), 1);
    let name = lts.launch_templates()[0].launch_template_name().unwrap();
    assert!(name.starts_with("gpu-autoscaler/c3/default/"), "{name}");
    let v = moto
        .client()
        .describe_launch_template_versions()
        .launch_template_name(name)
        .send()
        .await
        .unwrap();
    let data = v.launch_template_versions()[0]
        .launch_template_data()
        .unwrap();
    let ud =
        String::from_utf8(aws_smithy_types::base64::decode(data.user_data().unwrap()).unwrap())
            .unwrap();
    assert!(
        ud.contains("--node-labels=gpu-autoscaler.dev/nodepool=gpu,team=ml"),
        "{ud}"
    );
    assert!(
        ud.contains("--register-with-taints=nvidia.com/gpu=true:NoSchedule,gpu-autoscaler.dev/gpu-not-ready:NoSchedule"),
        "{ud}"
    );
    assert!(
        !ud.contains("gpu-abc12"),
        "per-claim labels stay out of the template: {ud}"
    );

    // get and list see it.
    assert_eq!(
        p.get(&i.provider_id).await.unwrap().provider_id,
        i.provider_id
    );
    let listed = p.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].claim.as_deref(), Some("gpu-abc12"));

    // A retried launch (lost answer, restart) returns the same instance.
    let again = p.launch(&req).await.unwrap();
    assert_eq!(again.instance.provider_id, i.provider_id);
    // Also from a fresh provider (a restarted controller), with other candidates.
    let fresh = provider(&moto, &moto.url, "c3").await;
    let mut other = req.clone();
    other.candidates = vec![OfferingKey::new("g6.xlarge", "us-east-1a", Spot)];
    assert_eq!(
        fresh.launch(&other).await.unwrap().instance.provider_id,
        i.provider_id
    );
    assert_eq!(
        instances_tagged(&moto, tags::CLAIM, "gpu-abc12")
            .await
            .len(),
        1
    );

    // A second claim of the same NodePool reuses the launch template.
    let second = p
        .launch(&request(
            "gpu-def34",
            vec![OfferingKey::new("g5.xlarge", "us-east-1a", OnDemand)],
        ))
        .await
        .unwrap();
    assert_ne!(second.instance.provider_id, i.provider_id);
    assert_eq!(
        moto.client()
            .describe_launch_templates()
            .send()
            .await
            .unwrap()
            .launch_templates()
            .len(),
        1
    );
    assert_eq!(p.list().await.unwrap().len(), 2);
}

#[tokio::test]
async fn spot_launch() {
    let Some(moto) = Moto::start("spot_launch") else {
        return;
    };
    let p = provider(&moto, &moto.url, "c4").await;
    let launched = p
        .launch(&request(
            "spot-1",
            vec![
                OfferingKey::new("g6.xlarge", "us-east-1a", Spot),
                OfferingKey::new("g6.xlarge", "us-east-1a", OnDemand),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(launched.instance.instance_type, "g6.xlarge");
    assert_eq!(launched.instance.zone, "us-east-1a");
    assert_eq!(launched.instance.capacity_type, Spot);
    assert_eq!(launched.instance.claim.as_deref(), Some("spot-1"));
}

#[tokio::test]
async fn delete_is_idempotent_and_list_feeds_gc() {
    let Some(moto) = Moto::start("delete_is_idempotent_and_list_feeds_gc") else {
        return;
    };
    let p = provider(&moto, &moto.url, "c5").await;
    let launched = p
        .launch(&request(
            "gpu-1",
            vec![OfferingKey::new("g5.xlarge", "us-east-1a", OnDemand)],
        ))
        .await
        .unwrap();
    let pid = launched.instance.provider_id.clone();

    // Instances launched outside the autoscaler: one of this cluster without a claim (a leak
    // that GC must see), one of another cluster (which GC must never see).
    let ami = moto.amd64_ami().await;
    for (cluster, name) in [("c5", "leaked"), ("other", "foreign")] {
        moto.client()
            .run_instances()
            .image_id(&ami)
            .instance_type("m5.large".into())
            .min_count(1)
            .max_count(1)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Instance)
                    .tags(Tag::builder().key(tags::CLUSTER).value(cluster).build())
                    .tags(Tag::builder().key("Name").value(name).build())
                    .build(),
            )
            .send()
            .await
            .unwrap();
    }
    let listed = p.list().await.unwrap();
    assert_eq!(listed.len(), 2, "{listed:#?}");
    let claims: Vec<Option<&str>> = listed.iter().map(|i| i.claim.as_deref()).collect();
    assert!(
        claims.contains(&Some("gpu-1")) && claims.contains(&None),
        "{claims:?}"
    );
    let leaked = listed.iter().find(|i| i.claim.is_none()).unwrap();
    assert_eq!(leaked.tags["Name"], "leaked");
    let sorted = listed
        .windows(2)
        .all(|w| w[0].provider_id <= w[1].provider_id);
    assert!(sorted);

    // GC terminates the leak; deleting twice is fine; so is an id EC2 never knew.
    p.delete(&leaked.provider_id).await.unwrap();
    p.delete(&pid).await.unwrap();
    p.delete(&pid).await.unwrap();
    p.delete("aws:///us-east-1a/i-0123456789abcdef0")
        .await
        .unwrap();
    assert!(matches!(
        p.delete("fake:///zone/fake-1").await,
        Err(ProviderError::InvalidRequest { .. })
    ));
    assert!(p.list().await.unwrap().is_empty());
    match p.get(&pid).await {
        Ok(i) => assert!(matches!(
            i.state,
            InstanceState::Terminated | InstanceState::ShuttingDown
        )),
        Err(e) => assert!(matches!(e, ProviderError::NotFound { .. }), "{e}"),
    }
    assert!(matches!(
        p.get("aws:///us-east-1a/i-0123456789abcdef0").await,
        Err(ProviderError::NotFound { .. })
    ));
    // After termination a new launch for the same claim buys a new instance.
    let relaunched = p
        .launch(&request(
            "gpu-1",
            vec![OfferingKey::new("g5.xlarge", "us-east-1a", OnDemand)],
        ))
        .await
        .unwrap();
    assert_ne!(relaunched.instance.provider_id, pid);
}

#[tokio::test]
async fn requests_that_cannot_work_are_invalid() {
    let Some(moto) = Moto::start("requests_that_cannot_work_are_invalid") else {
        return;
    };
    let p = provider(&moto, &moto.url, "c6").await;
    let invalid = |r: Result<providers::Launched, ProviderError>| {
        matches!(r, Err(ProviderError::InvalidRequest { .. }))
    };
    assert!(invalid(p.launch(&request("x", vec![])).await));
    // Unknown type, a zone without a subnet of the class, an architecture without an AMI.
    let r = p
        .launch(&request(
            "x",
            vec![
                OfferingKey::new("g99.huge", "us-east-1a", OnDemand),
                OfferingKey::new("g5.xlarge", "us-east-1c", OnDemand),
                OfferingKey::new("g5g.xlarge", "us-east-1a", OnDemand),
            ],
        ))
        .await;
    let msg = format!("{r:?}");
    assert!(invalid(r), "{msg}");
    assert!(
        msg.contains("unknown instance type")
            && msg.contains("no subnet")
            && msg.contains("no AMI"),
        "{msg}"
    );

    // No node class configured at all.
    let mut s = moto.settings(&moto.url, "c6");
    s.node_classes.clear();
    let bare = AwsProvider::connect(s).await.unwrap();
    let r = bare
        .launch(&request(
            "y",
            vec![OfferingKey::new("g5.xlarge", "us-east-1a", OnDemand)],
        ))
        .await;
    assert!(
        matches!(&r, Err(ProviderError::InvalidRequest { why, .. }) if why.contains("no AWS node class")),
        "{r:?}"
    );
}
