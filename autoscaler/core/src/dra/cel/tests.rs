//! Tests of CEL selectors: one table of expressions against one device, each with the answer
//! or the error it must give.

use super::*;
use crate::dra::builders::device;

fn h100() -> DeviceValue {
    let d = device("gpu-0")
        .string("type", "gpu")
        .string("productName", "NVIDIA H100 80GB HBM3")
        .string("architecture", "Hopper")
        .version("cudaComputeCapability", "9.0.0")
        .version("driverVersion", "560.35.3")
        .int("index", 0)
        .bool("gpu.nvidia.com/mig-capable", true)
        .string("resource.kubernetes.io/pcieRoot", "pci0000:00")
        .capacity("memory", "80Gi")
        .build();
    DeviceValue::new("gpu.nvidia.com", &d)
}

fn run(expr: &str) -> String {
    match Selectors::new().matches(expr, &h100()) {
        Ok(b) => b.to_string(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn selectors_table() {
    let cases = [
        r#"device.driver == "gpu.nvidia.com""#,
        r#"device.driver == "neuron.amazonaws.com""#,
        r#"device.attributes["gpu.nvidia.com"].type == "gpu""#,
        r#"device.attributes["gpu.nvidia.com"].productName.lowerAscii().matches("^nvidia h100.*")"#,
        r#"device.attributes["gpu.nvidia.com"].productName.upperAscii().contains("HBM3")"#,
        r#"device.attributes["gpu.nvidia.com"]["mig-capable"]"#,
        r#"device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00""#,
        r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0"#,
        r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("81Gi")) >= 0"#,
        r#"device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("79Gi"))"#,
        r#"device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("1Ti"))"#,
        r#"device.capacity["gpu.nvidia.com"].memory == quantity("80Gi")"#,
        r#"device.capacity["gpu.nvidia.com"].memory.asInteger() == 85899345920"#,
        r#"device.capacity["gpu.nvidia.com"].memory.sub(quantity("80Gi")).sign() == 0"#,
        r#"device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))"#,
        r#"device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("570.0.0")) < 0"#,
        r#"device.attributes["gpu.nvidia.com"].driverVersion.major() == 560"#,
        r#"isQuantity("1Gi") && !isSemver("x")"#,
        r#"has(device.attributes["dra.example.com"].model)"#,
        r#"device.driver == "other" && device.attributes["other"].model == "x""#,
        r#"["gpu", "mig"].exists(t, t == device.attributes["gpu.nvidia.com"].type)"#,
        // Errors: a missing attribute, a type mismatch, not a bool, a parse error, a bad
        // quantity, too costly.
        r#"device.attributes["gpu.nvidia.com"].memoryBandwidth > 1"#,
        r#"device.capacity["gpu.nvidia.com"].memory.compareTo(semver("1.0.0")) > 0"#,
        r#"device.attributes["gpu.nvidia.com"].index"#,
        r#"device.driver == "#,
        r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("lots")) > 0"#,
        r#"[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, device.attributes["gpu.nvidia.com"].productName.matches("x" + string(a) + string(b) + string(c)))))"#,
        r#"device.attributes["gpu.nvidia.com"].all(a, device.attributes["gpu.nvidia.com"].all(b, device.attributes["gpu.nvidia.com"].all(c, a.matches(b) || c.matches(a))))"#,
    ];
    let out: String = cases
        .iter()
        .map(|c| format!("{c}\n  => {}\n", run(c)))
        .collect();
    expect_test::expect_file!["selectors.txt"].assert_eq(&out);
}

/// A cached expression is compiled once and answers again for another device.
#[test]
fn compiled_once_per_expression() {
    let mut s = Selectors::new();
    let expr = r#"device.attributes["gpu.nvidia.com"].index == 3"#;
    let three = DeviceValue::new("gpu.nvidia.com", &device("gpu-3").int("index", 3).build());
    assert_eq!(s.matches(expr, &h100()), Ok(false));
    assert_eq!(s.matches(expr, &three), Ok(true));
    assert_eq!(s.programs.len(), 1);
}
