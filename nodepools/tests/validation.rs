//! Bad input, table-driven: each YAML snippet with the problems Rust validation reports and the
//! problems the API server would report from the generated CRD (OpenAPI checks, then CEL).
//!
//! Every case must be rejected by Rust with a message naming the field; the server column
//! documents which of them the cluster itself refuses. Refresh the expectations with
//! `UPDATE_EXPECT=1 cargo test -p nodepools --test validation` and review the diff.

mod common;

use expect_test::{Expect, expect};
use nodepools::{NodeClaim, NodePool};

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

fn report(kind: &str, text: &str, rust: Result<Vec<String>, String>) -> String {
    let mut out = String::new();
    match rust {
        Err(e) => out.push_str(&format!("parse error: {e}\n")),
        Ok(lines) if lines.is_empty() => out.push_str("rust: ok\n"),
        Ok(lines) => {
            out.push_str("rust:\n");
            for l in lines {
                out.push_str(&format!("  {l}\n"));
            }
        }
    }
    let raw: serde_json::Value = serde_norway::from_str(text).expect("test YAML is valid YAML");
    let server = common::server_side(kind, &raw);
    if server.is_empty() {
        out.push_str("server: ok\n");
    } else {
        out.push_str("server:\n");
        for l in server {
            out.push_str(&format!("  {l}\n"));
        }
    }
    out
}

/// A NodePool named `p` whose spec is `spec` (with `template: {}` added when absent).
fn nodepool(spec: &str) -> String {
    let mut spec = spec.to_string();
    if !spec.contains("template:") {
        spec.push_str("\ntemplate: {}\n");
    }
    let text = format!(
        "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\nmetadata:\n  name: p\nspec:\n{}",
        indent(&spec)
    );
    let rust = nodepools::from_yaml::<NodePool>("NodePool", &text)
        .map_err(|e| e.to_string())
        .map(|pools| match pools[0].validate() {
            Ok(()) => Vec::new(),
            Err(e) => e.lines(),
        });
    report("NodePool", &text, rust)
}

fn nodeclaim(spec: &str) -> String {
    let text = format!(
        "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodeClaim\nmetadata:\n  name: c\nspec:\n{}",
        indent(spec)
    );
    let rust = nodepools::from_yaml::<NodeClaim>("NodeClaim", &text)
        .map_err(|e| e.to_string())
        .map(|claims| match claims[0].validate() {
            Ok(()) => Vec::new(),
            Err(e) => e.lines(),
        });
    report("NodeClaim", &text, rust)
}

fn run(cases: &[(&str, Expect)], f: fn(&str) -> String) {
    for (yaml, expected) in cases {
        expected.assert_eq(&f(yaml));
    }
}

#[test]
fn nodepool_cases() {
    let cases = [
        (
            "template: {}",
            expect![[r#"
                rust: ok
                server: ok
            "#]],
        ),
        (
            r#"dra:
  attributes:
    driverVersion: {version: "570.86.15"}
    gpu.nvidia.com/cudaDriverVersion: {version: "12.8.0"}
    example.com/rack: {string: r1}
    fabric: {bool: true}"#,
            expect![[r#"
                rust: ok
                server: ok
            "#]],
        ),
        (
            r#"dra:
  attributes:
    driverVersion: {version: "570.86"}
    two: {int: 1, string: x}
    none: {}
    9lives: {int: 9}
    Bad_Domain/x: {bool: true}"#,
            expect![[r#"
                rust:
                  spec.dra.attributes["9lives"]: name "9lives" must be a C identifier (letters, digits, _; not starting with a digit) of at most 32 characters
                  spec.dra.attributes["Bad_Domain/x"]: domain "Bad_Domain" must be a DNS subdomain (lower-case labels) of at most 63 characters
                  spec.dra.attributes["driverVersion"]: version "570.86" is not semantic versioning 2.0.0: unexpected end of input while parsing minor version number
                  spec.dra.attributes["none"]: needs exactly one of bool, int, string and version
                  spec.dra.attributes["two"]: needs exactly one of bool, int, string and version
                server:
                  spec.dra.attributes.none: exactly one of bool, int, string and version
                  spec.dra.attributes.two: exactly one of bool, int, string and version
            "#]],
        ),
        (
            "disruption:\n  gpuUtilizationThreshold: 1.5\n  utilizationThreshold: -0.1",
            expect![[r#"
                rust:
                  spec.disruption.gpuUtilizationThreshold: 1.5 is outside [0, 1]
                  spec.disruption.utilizationThreshold: -0.1 is outside [0, 1]
                server:
                  spec.disruption.gpuUtilizationThreshold: 1.5 is greater than 1
                  spec.disruption.utilizationThreshold: -0.1 is less than 0
            "#]],
        ),
        (
            r#"template:
  requirements:
    - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}
    - {key: kubernetes.io/arch, operator: Exists}
    - {key: node.kubernetes.io/instance-type, operator: Equals, values: [p5.48xlarge]}"#,
            expect![[r#"
                rust:
                  spec.template.requirements[2].operator: unknown operator "Equals" (expected In, NotIn, Exists, DoesNotExist, Gt or Lt)
                server:
                  spec.template.requirements[2].operator: "Equals" is not one of "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"
            "#]],
        ),
        (
            r#"template:
  requirements:
    - {key: zone, operator: In}
    - {key: zone, operator: NotIn, values: []}
    - {key: arch, operator: Exists, values: [amd64]}
    - {key: gpus, operator: Gt, values: ["many"]}
    - {key: gpus, operator: Lt, values: ["1", "2"]}
    - {key: family, operator: In, values: [p5], minValues: 2}"#,
            expect![[r#"
                rust:
                  spec.template.requirements[0].values: In needs at least one value
                  spec.template.requirements[1].values: NotIn needs at least one value
                  spec.template.requirements[2].values: Exists takes no values
                  spec.template.requirements[3].values: Gt value must be an integer
                  spec.template.requirements[4].values: Lt needs exactly one value
                  spec.template.requirements[5].minValues: 2 exceeds the 1 values given
                server:
                  spec.template.requirements[0]: In and NotIn need at least one value
                  spec.template.requirements[1]: In and NotIn need at least one value
                  spec.template.requirements[2]: Exists and DoesNotExist take no values
                  spec.template.requirements[3]: Gt and Lt need exactly one integer value
                  spec.template.requirements[4]: Gt and Lt need exactly one integer value
                  spec.template.requirements[5]: minValues must not exceed the number of values
            "#]],
        ),
        (
            r#"template:
  requirements:
    - {key: "bad key", operator: DoesNotExist}
    - {key: example.com/x, operator: In, values: ["a b"]}
    - {key: example.com/y, operator: In, values: [y], minValues: 0}"#,
            expect![[r#"
                rust:
                  spec.template.requirements[0].key: invalid key "bad key": the name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric
                  spec.template.requirements[1].values[0]: invalid value "a b": must be at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric
                  spec.template.requirements[2].minValues: 0 is outside [1, 50]
                server:
                  spec.template.requirements[0].key: "bad key" does not match ^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$
                  spec.template.requirements[2].minValues: 0 is less than 1
            "#]],
        ),
        (
            r#"template:
  requirements:
    - {key: topology.kubernetes.io/zone, operator: In, values: [a]}
    - {key: topology.kubernetes.io/zone, operator: NotIn, values: [a]}"#,
            expect![[r#"
                rust:
                  spec.template.requirements: the requirements on "topology.kubernetes.io/zone" contradict each other: no node can satisfy them
                server: ok
            "#]],
        ),
        (
            r#"template:
  requirements:
    - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, "has space"]}"#,
            expect![[r#"
                rust:
                  spec.template.requirements[0].values[0]: capacity type "reserved" is not spot or on-demand
                  spec.template.requirements[0].values[1]: invalid value "has space": must be at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric
                server: ok
            "#]],
        ),
        (
            r#"limits:
  memory: 12Qi
  cpu: "-1"
  nvidia.com/gpu: "0.5"
  nodes: -3
  "bad key": 1"#,
            expect![[r#"
                rust:
                  spec.limits["bad key"]: invalid key "bad key": the name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric
                  spec.limits["cpu"]: must not be negative
                  spec.limits["memory"]: invalid quantity "12Qi": unknown suffix
                  spec.limits["nodes"]: must not be negative
                  spec.limits["nvidia.com/gpu"]: must be a whole number
                server:
                  spec.limits["cpu"]: "-1" does not match ^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$
                  spec.limits["memory"]: "12Qi" does not match ^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$
            "#]],
        ),
        (
            "gpuLimits:\n  H100: -1\n  A100-80GB: 8",
            expect![[r#"
                rust:
                  spec.gpuLimits["H100"]: must not be negative
                server:
                  spec.gpuLimits["H100"]: -1 is less than 0
            "#]],
        ),
        (
            "gpuSharing:\n  mig:\n    config: all-9g.99gb\n    strategy: both",
            expect![[r#"
                rust:
                  spec.gpuSharing.mig.strategy: unknown MIG strategy "both" (expected single or mixed)
                  spec.gpuSharing.mig.config: unknown MIG configuration "all-9g.99gb" (expected all-disabled, all-balanced or all-<profile> such as all-1g.10gb)
                server:
                  spec.gpuSharing.mig.config: "all-9g.99gb" does not match ^all-([a-z]+|[1-7]g\.[0-9]+gb(\.me)?)$
                  spec.gpuSharing.mig.strategy: "both" is not one of "single", "mixed"
            "#]],
        ),
        (
            "gpuSharing:\n  mig:\n    config: all-typo\n",
            expect![[r#"
                rust:
                  spec.gpuSharing.mig.config: unknown MIG configuration "all-typo" (expected all-disabled, all-balanced or all-<profile> such as all-1g.10gb)
                server: ok
            "#]],
        ),
        (
            "template:\n  metadata:\n    labels:\n      nvidia.com/mig.config: all-2g.20gb\ngpuSharing:\n  mig:\n    config: all-1g.10gb\n    strategy: mixed",
            expect![[r#"
                rust:
                  spec.template.metadata.labels["nvidia.com/mig.config"]: "all-2g.20gb" differs from gpuSharing.mig.config "all-1g.10gb": the MIG manager would apply "all-2g.20gb" to nodes sized for "all-1g.10gb" (leave the label out: the pool's nodes get gpuSharing.mig.config)
                server: ok
            "#]],
        ),
        (
            "gpuSharing:\n  timeSlicing:\n    replicas: 1\n  mig:\n    config: all-1g.10gb",
            expect![[r#"
                rust:
                  spec.gpuSharing: timeSlicing and mig cannot both be set
                  spec.gpuSharing.timeSlicing.replicas: 1 is outside [2, 1024]
                server:
                  spec.gpuSharing.timeSlicing.replicas: 1 is less than 2
                  spec.gpuSharing: timeSlicing and mig cannot both be set
            "#]],
        ),
        (
            "gpuSharing:\n  mps:\n    replicas: 49\n  timeSlicing:\n    replicas: 4",
            expect![[r#"
                rust:
                  spec.gpuSharing: mps cannot be set with timeSlicing or mig
                  spec.gpuSharing.mps.replicas: 49 is outside [2, 48]
                server:
                  spec.gpuSharing.mps.replicas: 49 is greater than 48
                  spec.gpuSharing: mps cannot be set with timeSlicing or mig
            "#]],
        ),
        (
            "gpuSharing:\n  mps:\n    replicas: 4\n  mig:\n    config: all-1g.10gb",
            expect![[r#"
                rust:
                  spec.gpuSharing: mps cannot be set with timeSlicing or mig
                server:
                  spec.gpuSharing: mps cannot be set with timeSlicing or mig
            "#]],
        ),
        (
            r#"template:
  taints:
    - {key: nvidia.com/gpu, value: present, effect: NoSchedule}
    - {key: nvidia.com/gpu, value: other, effect: NoSchedule}
    - {key: nvidia.com/gpu, effect: NoExecute}
    - {key: dedicated, effect: Sometimes}
  startupTaints:
    - {key: nvidia.com/gpu, effect: NoExecute}
    - {key: "-bad", value: "a b", effect: NoSchedule}"#,
            expect![[r#"
                rust:
                  spec.template.taints[1]: duplicate taint key "nvidia.com/gpu" effect NoSchedule (already at spec.template.taints[0])
                  spec.template.taints[3].effect: unknown effect "Sometimes" (expected NoSchedule, PreferNoSchedule or NoExecute)
                  spec.template.startupTaints[0]: duplicate taint key "nvidia.com/gpu" effect NoExecute (already at spec.template.taints[2])
                  spec.template.startupTaints[1].key: invalid key "-bad": the name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric
                  spec.template.startupTaints[1].value: invalid value "a b": must be at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric
                server:
                  spec.template.startupTaints[1].key: "-bad" does not match ^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$
                  spec.template.taints[3].effect: "Sometimes" is not one of "NoSchedule", "PreferNoSchedule", "NoExecute"
                  spec.template: taints must not repeat a key and effect
                  spec.template: startupTaints must not repeat a key and effect, nor one of taints
            "#]],
        ),
        (
            r#"disruption:
  budgets:
    - nodes: "110%"
    - nodes: abc
    - nodes: "-1"
    - nodes: "99999999999"
    - nodes: "5"
      reasons: [Bored, Empty, Empty]"#,
            expect![[r#"
                rust:
                  spec.disruption.budgets[0].nodes: "110%" is neither a node count ("5") nor a percentage in [0%, 100%] ("10%")
                  spec.disruption.budgets[1].nodes: "abc" is neither a node count ("5") nor a percentage in [0%, 100%] ("10%")
                  spec.disruption.budgets[2].nodes: "-1" is neither a node count ("5") nor a percentage in [0%, 100%] ("10%")
                  spec.disruption.budgets[3].nodes: "99999999999" is too large
                  spec.disruption.budgets[4].reasons[0]: unknown disruption reason "Bored" (expected Empty, Underutilized or Drifted)
                  spec.disruption.budgets[4].reasons[2]: duplicate reason "Empty"
                server:
                  spec.disruption.budgets[0].nodes: "110%" does not match ^((100|[0-9]{1,2})%|[0-9]+)$
                  spec.disruption.budgets[1].nodes: "abc" does not match ^((100|[0-9]{1,2})%|[0-9]+)$
                  spec.disruption.budgets[2].nodes: "-1" does not match ^((100|[0-9]{1,2})%|[0-9]+)$
                  spec.disruption.budgets[4].reasons[0]: "Bored" is not one of "Empty", "Underutilized", "Drifted"
            "#]],
        ),
        (
            r#"disruption:
  budgets:
    - nodes: "0"
      schedule: "0 9 * *"
      duration: 8h
    - nodes: "0"
      schedule: "0 25 * * *"
      duration: 1h
    - nodes: "0"
      schedule: "*/0 * * * *"
      duration: 1h
    - nodes: "0"
      schedule: "@daily"
    - nodes: "0"
      duration: 1h
    - nodes: "0"
      schedule: "0 9 * * mon-fri"
      duration: 90s
    - nodes: "0"
      schedule: "0 9 * * mon-fri"
      duration: 1h30m"#,
            expect![[r#"
                rust:
                  spec.disruption.budgets[0].schedule: invalid schedule "0 9 * *": expected 5 fields (minute hour day-of-month month day-of-week), found 4
                  spec.disruption.budgets[1].schedule: invalid schedule "0 25 * * *": hour field "25": 25 is outside 0..=23
                  spec.disruption.budgets[2].schedule: invalid schedule "*/0 * * * *": minute field "*/0": step "0" is not a positive number
                  spec.disruption.budgets[3].schedule: set without duration: a scheduled budget needs both
                  spec.disruption.budgets[4].duration: set without schedule: a scheduled budget needs both
                  spec.disruption.budgets[5].duration: "90s" is not hours and minutes (e.g. 8h, 30m, 1h30m)
                server:
                  spec.disruption.budgets[0].schedule: "0 9 * *" does not match ^\s*(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|\S+(\s+\S+){4})\s*$
                  spec.disruption.budgets[5].duration: "90s" does not match ^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$
                  spec.disruption.budgets[3]: 'schedule' must be set with 'duration'
                  spec.disruption.budgets[4]: 'schedule' must be set with 'duration'
            "#]],
        ),
        (
            r#"disruption:
  consolidationPolicy: Always
  consolidateAfter: 10 minutes
  unneededTime: Never"#,
            expect![[r#"
                rust:
                  spec.disruption.consolidationPolicy: unknown consolidation policy "Always" (expected WhenEmpty or WhenEmptyOrUnderutilized)
                  spec.disruption.consolidateAfter: invalid duration "10 minutes": expected a number with a unit, e.g. 90s, 1h30m or 1.5h (units ms, s, m, h, d)
                  spec.disruption.unneededTime: invalid duration "Never": expected a number with a unit, e.g. 90s, 1h30m or 1.5h (units ms, s, m, h, d)
                server:
                  spec.disruption.consolidateAfter: "10 minutes" does not match ^(([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+|Never)$
                  spec.disruption.consolidationPolicy: "Always" is not one of "WhenEmpty", "WhenEmptyOrUnderutilized"
                  spec.disruption.unneededTime: "Never" does not match ^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$
            "#]],
        ),
        (
            "template:\n  expireAfter: 30 days",
            expect![[r#"
            rust:
              spec.template.expireAfter: invalid duration "30 days": expected a number with a unit, e.g. 90s, 1h30m or 1.5h (units ms, s, m, h, d)
            server:
              spec.template.expireAfter: "30 days" does not match ^(([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+|Never)$
        "#]],
        ),
        (
            "template:\n  terminationGracePeriod: Never",
            expect![[r#"
                rust:
                  spec.template.terminationGracePeriod: invalid duration "Never": expected a number with a unit, e.g. 90s, 1h30m or 1.5h (units ms, s, m, h, d)
                server:
                  spec.template.terminationGracePeriod: "Never" does not match ^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$
            "#]],
        ),
        (
            "template:\n  terminationGracePeriod: 1 hour",
            expect![[r#"
                rust:
                  spec.template.terminationGracePeriod: invalid duration "1 hour": expected a number with a unit, e.g. 90s, 1h30m or 1.5h (units ms, s, m, h, d)
                server:
                  spec.template.terminationGracePeriod: "1 hour" does not match ^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$
            "#]],
        ),
        (
            "disruption:\n  consolidateAfter: 1w\n  unneededTime: 99999999999999999999h",
            expect![[r#"
                rust:
                  spec.disruption.consolidateAfter: invalid duration "1w": expected a number with a unit, e.g. 90s, 1h30m or 1.5h (units ms, s, m, h, d)
                  spec.disruption.unneededTime: invalid duration "99999999999999999999h": longer than 10 years
                server:
                  spec.disruption.consolidateAfter: "1w" does not match ^(([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+|Never)$
            "#]],
        ),
        (
            "disruption:\n  scaleDownDelayAfterAdd: Never\n  scaleDownDelayAfterDelete: 5 min\n  scaleDownDelayAfterFailure: 99999999999h",
            expect![[r#"
                rust:
                  spec.disruption.scaleDownDelayAfterAdd: invalid duration "Never": expected a number with a unit, e.g. 90s, 1h30m or 1.5h (units ms, s, m, h, d)
                  spec.disruption.scaleDownDelayAfterDelete: invalid duration "5 min": expected a number with a unit, e.g. 90s, 1h30m or 1.5h (units ms, s, m, h, d)
                  spec.disruption.scaleDownDelayAfterFailure: invalid duration "99999999999h": longer than 10 years
                server:
                  spec.disruption.scaleDownDelayAfterAdd: "Never" does not match ^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$
                  spec.disruption.scaleDownDelayAfterDelete: "5 min" does not match ^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$
            "#]],
        ),
        (
            "weight: 0\nminNodes: -1",
            expect![[r#"
                rust:
                  spec.weight: 0 is outside [1, 100]
                  spec.minNodes: must not be negative
                server:
                  spec.minNodes: -1 is less than 0
                  spec.weight: 0 is less than 1
            "#]],
        ),
        (
            "weight: 150\nminNodes: 5\nlimits:\n  nodes: 2",
            expect![[r#"
                rust:
                  spec.weight: 150 is outside [1, 100]
                  spec.minNodes: 5 exceeds limits["nodes"] = 2
                server:
                  spec.weight: 150 is greater than 100
            "#]],
        ),
        (
            r#"template:
  metadata:
    labels:
      gpu-autoscaler.dev/nodepool: other
      "Bad_Prefix.io/x": v
      team: "not a value"
      zone: b
  requirements:
    - {key: zone, operator: In, values: [a]}"#,
            expect![[r#"
                rust:
                  spec.template.metadata.labels["Bad_Prefix.io/x"]: invalid key "Bad_Prefix.io/x": the prefix must be a DNS subdomain (lower-case alphanumerics, '-' and '.', at most 253 characters)
                  spec.template.metadata.labels["gpu-autoscaler.dev/nodepool"]: is set by the autoscaler and must not be given
                  spec.template.metadata.labels["team"]: invalid value "not a value": must be at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric
                  spec.template.metadata.labels["zone"]: value "b" is excluded by the requirements on "zone"
                server:
                  spec.template.metadata.labels["team"]: "not a value" does not match ^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$
                  spec.template.metadata: label keys must be qualified names
                  spec.template.metadata: the label gpu-autoscaler.dev/nodepool is set by the autoscaler
            "#]],
        ),
        (
            "template:\n  nodeClassRef: {group: fake.gpu-autoscaler.dev, kind: FakeNodeClass, name: \"\"}",
            expect![[r#"
                rust:
                  spec.template.nodeClassRef.name: must be set
                server:
                  spec.template.nodeClassRef.name: shorter than 1 characters
            "#]],
        ),
        (
            "weight: heavy",
            expect![[r#"
            parse error: reading NodePool from YAML document 0: invalid type: string "heavy", expected i32
            server:
              spec.weight: must be of type integer, not string
        "#]],
        ),
    ];
    run(&cases, nodepool);
}

#[test]
fn nodeclaim_cases() {
    let cases = [
        (
            r#"nodePool: gpu-train
requirements:
  - {key: node.kubernetes.io/instance-type, operator: In, values: [p5.48xlarge, p4d.24xlarge]}
resources:
  requests: {cpu: "3500m", memory: 100Gi, nvidia.com/gpu: 8}
taints:
  - {key: nvidia.com/gpu, value: present, effect: NoSchedule}"#,
            expect![[r#"
                rust: ok
                server: ok
            "#]],
        ),
        (
            r#"nodePool: ""
requirements:
  - {key: zone, operator: Lt}
resources:
  requests: {cpu: "-2", memory: lots}
taints:
  - {key: a, effect: NoSchedule}
startupTaints:
  - {key: a, effect: NoSchedule}"#,
            expect![[r#"
                rust:
                  spec.nodePool: must be set
                  spec.requirements[0].values: Lt needs exactly one value
                  spec.resources.requests["cpu"]: must not be negative
                  spec.resources.requests["memory"]: invalid quantity "lots": no digits
                  spec.startupTaints[0]: duplicate taint key "a" effect NoSchedule (already at spec.taints[0])
                server:
                  spec.nodePool: shorter than 1 characters
                  spec.resources.requests["cpu"]: "-2" does not match ^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$
                  spec.resources.requests["memory"]: "lots" does not match ^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$
                  spec: startupTaints must not repeat a key and effect, nor one of taints
                  spec.requirements[0]: Gt and Lt need exactly one integer value
            "#]],
        ),
        (
            "nodePool: gpu\nterminationGracePeriod: 90s",
            expect![[r#"
                rust: ok
                server: ok
            "#]],
        ),
        (
            "nodePool: gpu\nterminationGracePeriod: -5m",
            expect![[r#"
                rust:
                  spec.terminationGracePeriod: invalid duration "-5m": negative duration
                server:
                  spec.terminationGracePeriod: "-5m" does not match ^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$
            "#]],
        ),
    ];
    run(&cases, nodeclaim);
}

fn capacityquota(spec: &str) -> String {
    let text = format!(
        "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: CapacityQuota\nmetadata:\n  name: q\nspec:\n{}",
        indent(spec)
    );
    let rust = nodepools::from_yaml::<nodepools::CapacityQuota>("CapacityQuota", &text)
        .map_err(|e| e.to_string())
        .map(|quotas| match quotas[0].to_core() {
            Ok(_) => Vec::new(),
            Err(e) => e.lines(),
        });
    report("CapacityQuota", &text, rust)
}

#[test]
fn atomic_nodepool_cases() {
    let cases = [
        (
            "atomicScaleUp: {nodes: 4}\nminNodes: 4",
            expect![[r#"
                rust: ok
                server: ok
            "#]],
        ),
        (
            "atomicScaleUp: {nodes: 4}\nminNodes: 2\nlimits: {nodes: 3}",
            expect![[r#"
                rust:
                  spec.minNodes: 2 must be 0 or atomicScaleUp.nodes (4)
                  spec.atomicScaleUp.nodes: 4 exceeds limits["nodes"] = 3: the pool could never scale up
                server:
                  spec: minNodes must be 0 or atomicScaleUp.nodes
            "#]],
        ),
        (
            "atomicScaleUp: {nodes: 0}",
            expect![[r#"
                rust:
                  spec.atomicScaleUp.nodes: 0 is outside [1, 1000]
                server:
                  spec.atomicScaleUp.nodes: 0 is less than 1
            "#]],
        ),
    ];
    run(&cases, nodepool);
}

#[test]
fn capacityquota_cases() {
    let cases = [
        (
            "selector:\n  matchLabels: {team: ml}\n  matchExpressions:\n    - {key: nvidia.com/gpu.product, operator: Exists}\nlimits:\n  resources: {cpu: 64, memory: 256Gi, nvidia.com/gpu: 16, nodes: 8}",
            expect![[r#"
                rust: ok
                server: ok
            "#]],
        ),
        (
            "selector:\n  matchLabels: {\"bad key!\": x}\n  matchExpressions:\n    - {key: zone, operator: Gt, values: [\"1\"]}\n    - {key: zone, operator: In}\nlimits:\n  resources: {cpu: -1}",
            expect![[r#"
                rust:
                  spec.selector.matchLabels["bad key!"]: invalid key "bad key!": the name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric
                  spec.selector.matchExpressions[0].operator: Gt is not a label selector operator (expected In, NotIn, Exists or DoesNotExist)
                  spec.selector.matchExpressions[1].values: In needs at least one value
                  spec.limits.resources["cpu"]: must not be negative
                server:
                  spec.selector.matchExpressions[0].operator: "Gt" is not one of "In", "NotIn", "Exists", "DoesNotExist"
            "#]],
        ),
        (
            "limits: {}",
            expect![[r#"
                rust:
                  spec.limits.resources: no limit set (name a resource such as cpu, memory, nvidia.com/gpu or nodes)
                server: ok
            "#]],
        ),
    ];
    run(&cases, capacityquota);
}

/// A budget's `schedule` and `duration` reach the core's pool, parsed once: the window is
/// open on a Monday at 10:00 UTC and closed on the Saturday.
#[test]
fn a_budget_window_reaches_the_core_pool() {
    let text = "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodePool\nmetadata: {name: p}\nspec:\n  template: {}\n  disruption:\n    budgets:\n      - {nodes: \"0\", schedule: \"0 9 * * mon-fri\", duration: 8h}\n      - {nodes: \"10%\"}\n";
    let pools = nodepools::from_yaml::<NodePool>("NodePool", text).expect("a pool");
    let core = pools[0]
        .to_core(std::sync::Arc::new(Vec::new()))
        .expect("valid");
    let budgets = &core.disruption.budgets;
    let window = budgets[0].schedule.as_ref().expect("a window");
    assert_eq!(window.cron.as_str(), "0 9 * * mon-fri");
    assert_eq!(window.duration_s, 8 * 3600);
    assert!(budgets[1].schedule.is_none());
    // 2024-03-04 10:00 UTC, a Monday; 2024-03-09 10:00, a Saturday.
    assert!(budgets[0].active_at(1_709_546_400));
    assert!(!budgets[0].active_at(1_709_978_400));
    // Both fields round-trip through the API type, and an unscheduled budget writes neither.
    let json = serde_json::to_value(&pools[0].spec.disruption.budgets).unwrap();
    assert_eq!(
        json,
        serde_json::json!([
            {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"},
            {"nodes": "10%"},
        ])
    );
}

#[test]
fn a_capacityquota_becomes_a_cluster_limit() {
    let q: Vec<nodepools::CapacityQuota> = nodepools::from_yaml(
        "CapacityQuota",
        "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: CapacityQuota\nmetadata: {name: ml}\nspec:\n  selector: {matchLabels: {team: ml}}\n  limits: {resources: {cpu: 64, nvidia.com/gpu: 16, nodes: 8}}\n",
    )
    .expect("a quota");
    let l = q[0].to_core().expect("valid");
    assert_eq!(l.name, "CapacityQuota ml");
    assert_eq!(l.max.nodes, Some(8));
    assert_eq!(l.max.resources.get("cpu"), Some(&64_000));
    assert_eq!(l.max.resources.get("nvidia.com/gpu"), Some(&16));
    let mut labels = autoscaler_core::requirements::Labels::new();
    labels.insert("team".into(), "ml".into());
    assert!(autoscaler_core::quota::selects(&l, &labels));
    labels.insert("team".into(), "web".into());
    assert!(!autoscaler_core::quota::selects(&l, &labels));
}

fn nodeoverlay(spec: &str) -> String {
    let text = format!(
        "apiVersion: gpu-autoscaler.dev/v1alpha1\nkind: NodeOverlay\nmetadata:\n  name: o\nspec:\n{}",
        indent(spec)
    );
    let rust = nodepools::from_yaml::<nodepools::NodeOverlay>("NodeOverlay", &text)
        .map_err(|e| e.to_string())
        .map(|overlays| match overlays[0].to_core() {
            Ok(_) => Vec::new(),
            Err(e) => e.lines(),
        });
    report("NodeOverlay", &text, rust)
}

#[test]
fn nodeoverlay_cases() {
    let cases = [
        (
            "requirements:\n  - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}\npriceAdjustment: \"-10%\"\ncapacity: {nvidia.com/mig-1g.10gb: 7}\nweight: 10",
            expect![[r#"
                rust: ok
                server: ok
            "#]],
        ),
        (
            "price: \"1.5\"\npriceAdjustment: \"+1\"",
            expect![[r#"
                rust:
                  spec: price and priceAdjustment are mutually exclusive
                server:
                  spec: price and priceAdjustment are mutually exclusive
            "#]],
        ),
        (
            "priceAdjustment: \"-150%\"\ncapacity: {memory: 1Gi, gpu: 1, example.com/dev: \"-1\"}\nweight: 0\nrequirements:\n  - {key: node.kubernetes.io/instance-type, operator: In, values: [a], minValues: 1}",
            expect![[r#"
                rust:
                  spec.requirements[0].minValues: has no meaning in a NodeOverlay
                  spec.priceAdjustment: "-150%" lowers the price by more than 100 %
                  spec.capacity["gpu"]: an extended resource name has a domain prefix (example.com/device)
                  spec.capacity["memory"]: memory is not an extended resource; an overlay cannot change it
                  spec.capacity["example.com/dev"]: must not be negative
                  spec.weight: 0 is outside [1, 10000]
                server:
                  spec.capacity["example.com/dev"]: "-1" does not match ^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$
                  spec.weight: 0 is less than 1
            "#]],
        ),
        (
            "price: \"cheap\"",
            expect![[r#"
                rust:
                  spec.price: "cheap" is not a price (a non-negative number such as "1.25")
                server:
                  spec.price: "cheap" does not match ^[0-9]+(\.[0-9]+)?$
            "#]],
        ),
        (
            "requirements: []",
            expect![[r#"
                rust:
                  spec: changes nothing (set price, priceAdjustment or capacity)
                server: ok
            "#]],
        ),
    ];
    run(&cases, nodeoverlay);
}
