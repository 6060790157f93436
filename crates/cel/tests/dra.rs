//! DRA device selectors behave as the Kubernetes DRA allocator's CEL does.

use modelplane_api::types::Device;
use modelplane_cel::dra::{CompileError, DeviceActivation, DeviceSelector, EvalError, context};

fn device(yaml: &str) -> Device {
    let docs = modelplane_api::validation::yaml::parse_documents(yaml).expect("YAML");
    serde_json::from_value(docs[0].value.clone()).expect("a device")
}

fn h100() -> DeviceActivation {
    DeviceActivation::new(&device(
        r#"
name: gpu
driver: gpu.nvidia.com
deviceClassName: gpu.nvidia.com
count: 8
attributes:
  architecture: { string: Hopper }
  cudaComputeCapability: { version: "9.0.0" }
  memoryGiB: { int: 80 }
  other.example.com/flag: { bool: true }
capacity:
  memory: { value: "81559Mi" }
"#,
    ))
}

fn eval(expr: &str, device: &DeviceActivation) -> Result<bool, EvalError> {
    let selector = DeviceSelector::compile(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let ctx = context();
    let scope = device.bind(&ctx)?;
    selector.matches(&scope)
}

fn compile_error(expr: &str) -> CompileError {
    DeviceSelector::compile(expr).expect_err(expr)
}

#[test]
fn selectors_match_published_attributes_and_capacities() {
    let d = h100();
    for (expr, want) in [
        (r#"device.driver == "gpu.nvidia.com""#, true),
        (
            r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("79Gi")) >= 0"#,
            true,
        ),
        (
            r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0"#,
            false,
        ),
        (
            r#"device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("40Gi"))"#,
            true,
        ),
        (
            r#"device.capacity["gpu.nvidia.com"].memory == quantity("85520809984")"#,
            true,
        ),
        (
            r#"device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))"#,
            true,
        ),
        (
            r#"device.attributes["gpu.nvidia.com"].cudaComputeCapability == semver("9.0.0")"#,
            true,
        ),
        (
            r#"device.attributes["gpu.nvidia.com"].architecture.startsWith("Hop")"#,
            true,
        ),
        (
            r#"device.attributes["gpu.nvidia.com"].memoryGiB >= 80"#,
            true,
        ),
        (r#"device.attributes["other.example.com"].flag"#, true),
        (r#""other.example.com" in device.attributes"#, true),
        (r#""missing.example.com" in device.attributes"#, false),
        (
            r#"size(device.attributes["missing.example.com"]) == 0"#,
            true,
        ),
        (
            r#"has(device.attributes["gpu.nvidia.com"].architecture)"#,
            true,
        ),
        (r#"has(device.attributes["gpu.nvidia.com"].missing)"#, false),
        (
            r#"device.attributes["gpu.nvidia.com"].exists(k, k == "architecture")"#,
            true,
        ),
        (r#"sign(quantity("-1")) == -1"#, true),
        (
            r#"device.attributes["gpu.nvidia.com"]["architecture"] == "Hopper""#,
            true,
        ),
        (
            r#"device.attributes["gpu." + "nvidia.com"].architecture == "Hopper""#,
            true,
        ),
        (
            r#"device.attributes["unknown." + "example.com"] == {}"#,
            true,
        ),
        (
            r#"device.attributes.exists(d, d == "other.example.com")"#,
            true,
        ),
    ] {
        assert_eq!(eval(expr, &d), Ok(want), "{expr}");
    }
}

#[test]
fn quantity_and_semver_libraries_follow_kubernetes() {
    let d = h100();
    for expr in [
        r#"quantity("8Ei") == quantity("10Ei")"#,
        r#"quantity("7Ei").isLessThan(quantity("8Ei"))"#,
        r#"quantity("1Gi").isInteger() && !quantity("1.5").isInteger()"#,
        r#"quantity("1.5").asApproximateFloat() == 1.5"#,
        r#"quantity("1").add(2).compareTo(quantity("3")) == 0"#,
        r#"quantity("1Gi").sub(quantity("1024Mi")).asInteger() == 0"#,
        r#"quantity("0.0000000004") == quantity("1n")"#,
        r#"isQuantity("Mi") && !isQuantity("1e") && !isQuantity(" 1")"#,
        r#"semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))"#,
        r#"semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))"#,
        r#"semver("1.2.3+a") == semver("1.2.3+b")"#,
        r#"semver("v1.2", true).minor() == 2 && semver("v1.2", true).patch() == 0"#,
        r#"!isSemver("1.2.3-") && !isSemver("v1.2.3") && isSemver("v1.2.3", true)"#,
        r#"semver("2.0.0").compareTo(semver("10.0.0")) == -1"#,
    ] {
        assert_eq!(eval(expr, &d), Ok(true), "{expr}");
    }
}

#[test]
fn evaluation_errors_are_errors_not_matches() {
    let d = h100();
    // An attribute the device lacks is named as such.
    for (expr, missing) in [
        (
            r#"device.attributes["gpu.nvidia.com"].missing == "x""#,
            "the device has no attribute gpu.nvidia.com/missing",
        ),
        (
            r#"device.attributes["unknown.example.com"].x == 1"#,
            "the device has no attribute unknown.example.com/x",
        ),
    ] {
        let error = eval(expr, &d).expect_err(expr);
        assert!(
            matches!(error, EvalError::Missing { .. }),
            "{expr}: {error:?}"
        );
        assert_eq!(error.to_string(), missing);
    }
    for expr in [
        r#"quantity("bogus") == quantity("1")"#,
        r#"semver("1.2") == semver("1.2.0")"#,
        r#"quantity("1.5").asInteger() == 1"#,
    ] {
        assert!(
            matches!(eval(expr, &d), Err(EvalError::Expression(_))),
            "{expr}: {:?}",
            eval(expr, &d)
        );
    }
    // Dynamic values are checked at run time: a string is not a match.
    assert!(matches!(
        eval(r#"device.attributes["gpu.nvidia.com"].architecture"#, &d),
        Err(EvalError::NotBool(_))
    ));
}

#[test]
fn a_selector_says_which_attributes_it_reads_and_a_device_which_it_has() {
    let selector = DeviceSelector::compile(
        r#"device.attributes["gpu.nvidia.com"].productName == "H100" && device.attributes["gpu.nvidia.com"]["memoryGiB"] >= 80 && device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("1Gi"))"#,
    )
    .expect("compiles");
    assert_eq!(
        selector.attributes_read(),
        ["gpu.nvidia.com/memoryGiB", "gpu.nvidia.com/productName"]
    );
    let d = device(
        "name: gpu\ndriver: gpu.nvidia.com\nattributes:\n  memoryGiB: { int: 80 }\n  other.example.com/flag: { bool: true }\n",
    );
    assert_eq!(
        modelplane_cel::dra::attribute_names(&d),
        ["gpu.nvidia.com/memoryGiB", "other.example.com/flag"]
    );
}

#[test]
fn malformed_devices_match_nothing() {
    for yaml in [
        "name: gpu\ndriver: d\nattributes:\n  v: { version: \"1.2.3-\" }\n",
        "name: gpu\ndriver: d\ncapacity:\n  memory: { value: \"lots\" }\n",
        "name: gpu\ndriver: d\nattributes:\n  empty: {}\n",
    ] {
        let d = DeviceActivation::new(&device(yaml));
        assert!(!d.is_valid());
        assert!(
            matches!(eval("true", &d), Err(EvalError::Device { .. })),
            "{yaml}"
        );
    }
}

#[test]
fn selectors_must_type_check_to_bool() {
    for expr in [
        "device.driver",
        "1",
        r#"device.capacity["gpu.nvidia.com"].memory"#,
    ] {
        let e = compile_error(expr);
        assert!(
            e.message.starts_with("must evaluate to bool"),
            "{expr}: {e}"
        );
    }
}

#[test]
fn call_styles_and_overloads_are_strict() {
    for (expr, message) in [
        (
            r#"quantity(5) == quantity("1")"#,
            "found no matching overload for 'quantity' applied to '(int)'",
        ),
        (
            r#"quantity("1").sign() == 1"#,
            "found no matching overload for 'sign' applied to 'kubernetes.Quantity.()'",
        ),
        (
            r#"compareTo(quantity("1"), quantity("2")) == 0"#,
            "found no matching overload for 'compareTo' applied to '(kubernetes.Quantity, kubernetes.Quantity)'",
        ),
        (
            r#"quantity("1") == "1""#,
            "found no matching overload for '_==_' applied to '(kubernetes.Quantity, string)'",
        ),
        (
            r#"device.capacity["gpu.nvidia.com"].memory < quantity("1")"#,
            "found no matching overload for '_<_' applied to '(kubernetes.Quantity, kubernetes.Quantity)'",
        ),
        (
            r#"semver("1.0.0").isGreaterThan(quantity("1"))"#,
            "found no matching overload for 'isGreaterThan' applied to 'kubernetes.Semver.(kubernetes.Quantity)'",
        ),
        ("device.count == 8", "undefined field 'count'"),
        (
            "foo == 1",
            "undeclared reference to 'foo' (in container '')",
        ),
        (
            "device.driver.bogus()",
            "undeclared reference to 'bogus' (in container '')",
        ),
        (
            "cel.bind(x, 1, x == 1)",
            "undeclared reference to 'cel' (in container '')",
        ),
    ] {
        assert_eq!(compile_error(expr).message, message, "{expr}");
    }
}

#[test]
fn compile_errors_carry_a_position() {
    let e = compile_error("device.count == 8");
    assert_eq!((e.line, e.column), (1, 8));
    let e = compile_error("device.driver ==\n  ");
    assert!(e.line >= 1 && !e.message.is_empty(), "{e:?}");
    let e = compile_error(r#"has(device.attributes["gpu.nvidia.com"])"#);
    assert_eq!(e.message, "invalid argument to has() macro");
    let long = format!("device.driver == '{}'", "x".repeat(10 * 1024));
    assert!(compile_error(&long).message.contains("limit is 10240"));
}

#[test]
fn selectors_beyond_the_cost_limit_are_rejected() {
    // 65^4 iterations of a body: over 1,000,000 in the worst case.
    let nested = r#"device.attributes.exists(a, device.attributes.exists(b, device.attributes.exists(c, device.attributes.exists(d, a == d))))"#;
    assert!(compile_error(nested).message.starts_with("estimated cost"));
    // Two levels are fine.
    assert!(
        DeviceSelector::compile(
            r#"device.attributes.exists(a, device.attributes.exists(b, a == b))"#
        )
        .is_ok()
    );
}
