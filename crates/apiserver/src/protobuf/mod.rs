//! Request bodies in Kubernetes' protobuf encoding, read into the JSON the
//! store keeps.
//!
//! kubectl 1.32 and later send the objects its generators build (`create
//! namespace`, `create secret`, `run`, `expose`, …) as
//! `application/vnd.kubernetes.protobuf`: the magic `k8s\0`, then a
//! `runtime.Unknown` whose `typeMeta` names the kind and whose `raw` is the
//! object's message. The messages are decoded with `prost-reflect` against
//! the schema of the built-in kinds (`schema.rs`), then mapped to JSON
//! (`json.rs`); answers stay JSON, which those clients accept too.

mod check;
mod json;
mod schema;
mod structure;

pub use check::check;
pub use structure::structure;

use prost_reflect::{DynamicMessage, Value as Field};
use serde_json::Value;

use schema::SCHEMA_POOL;

/// The media type of Kubernetes' protobuf encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes every Kubernetes protobuf body starts with.
const MAGIC: &[u8] = b"k8s\0";

/// Why a protobuf body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("the body does not start with Kubernetes' protobuf magic number 'k8s\\0'")]
    Magic,
    #[error("the protobuf envelope cannot be decoded: {0}")]
    Envelope(String),
    #[error("the protobuf body is a {kind} ({api_version}), which this server does not decode")]
    Kind { api_version: String, kind: String },
    #[error("the protobuf {kind} cannot be decoded: {reason}")]
    Message { kind: String, reason: String },
    #[error(
        "the protobuf message {message} has a field numbered {number} that this server does not know; send the object as JSON"
    )]
    UnknownField { message: String, number: u32 },
    #[error("the protobuf {message} does not hold valid JSON: {reason}")]
    Raw { message: String, reason: String },
    #[error("the protobuf schema cannot be loaded: {0}")]
    Schema(String),
}

/// The object a protobuf request body holds, as JSON with its `apiVersion`
/// and `kind` first.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let schema = SCHEMA_POOL
        .as_ref()
        .map_err(|e| ProtobufError::Schema(e.clone()))?;
    let envelope = body.strip_prefix(MAGIC).ok_or(ProtobufError::Magic)?;
    let unknown = schema
        .pool
        .get_message_by_name("k8s.io.apimachinery.pkg.runtime.Unknown")
        .ok_or_else(|| ProtobufError::Schema("runtime.Unknown is missing".into()))?;
    let unknown = DynamicMessage::decode(unknown, envelope)
        .map_err(|e| ProtobufError::Envelope(e.to_string()))?;
    let text = |message: &DynamicMessage, n: u32| match message.get_field_by_number(n).as_deref() {
        Some(Field::String(s)) => s.clone(),
        _ => String::new(),
    };
    let type_meta = match unknown.get_field_by_number(1).as_deref() {
        Some(Field::Message(m)) => m.clone(),
        _ => return Err(ProtobufError::Envelope("it names no kind".into())),
    };
    let (api_version, kind) = (text(&type_meta, 1), text(&type_meta, 2));
    if kind.is_empty() {
        return Err(ProtobufError::Envelope("it names no kind".into()));
    }
    let encoding = text(&unknown, 3);
    if !encoding.is_empty() {
        return Err(ProtobufError::Envelope(format!(
            "content encoding {encoding:?} is not supported"
        )));
    }
    let raw = match unknown.get_field_by_number(2).as_deref() {
        Some(Field::Bytes(b)) => b.clone(),
        _ => Default::default(),
    };
    let descriptor = message_name(&api_version, &kind)
        .and_then(|name| schema.pool.get_message_by_name(&name))
        .ok_or_else(|| ProtobufError::Kind {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })?;
    let message = DynamicMessage::decode(descriptor, raw).map_err(|e| ProtobufError::Message {
        kind: kind.clone(),
        reason: e.to_string(),
    })?;
    let mut object = serde_json::Map::new();
    object.insert("apiVersion".into(), Value::String(api_version));
    object.insert("kind".into(), Value::String(kind));
    if let Value::Object(fields) = json::message(schema, &message)? {
        object.extend(fields);
    }
    Ok(Value::Object(object))
}

/// The message of `kind` in `api_version`: the API group's package in
/// Kubernetes' protobuf schema.
fn message_name(api_version: &str, kind: &str) -> Option<String> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let package = match group {
        "" => "core".to_string(),
        "meta.k8s.io" => {
            return Some(format!(
                "k8s.io.apimachinery.pkg.apis.meta.{version}.{kind}"
            ));
        }
        "rbac.authorization.k8s.io" => "rbac".to_string(),
        group => group.strip_suffix(".k8s.io").unwrap_or(group).to_string(),
    };
    if package.contains('.') {
        return None;
    }
    Some(format!("k8s.io.api.{package}.{version}.{kind}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_name_their_package() {
        assert_eq!(
            message_name("v1", "Namespace").as_deref(),
            Some("k8s.io.api.core.v1.Namespace")
        );
        assert_eq!(
            message_name("rbac.authorization.k8s.io/v1", "Role").as_deref(),
            Some("k8s.io.api.rbac.v1.Role")
        );
        assert_eq!(
            message_name("scheduling.k8s.io/v1", "PriorityClass").as_deref(),
            Some("k8s.io.api.scheduling.v1.PriorityClass")
        );
        assert_eq!(
            message_name("apps/v1", "Deployment").as_deref(),
            Some("k8s.io.api.apps.v1.Deployment")
        );
        assert_eq!(
            message_name("modelplane.ai/v1alpha1", "ModelDeployment"),
            None
        );
    }

    use prost::Message;
    use prost_reflect::{MapKey, MessageDescriptor};
    use serde_json::json;

    fn descriptor(name: &str) -> MessageDescriptor {
        let schema = SCHEMA_POOL.as_ref().expect("schema");
        schema.pool.get_message_by_name(name).expect(name)
    }

    /// A message of `name` with `fields` (by field name) set.
    fn message(name: &str, fields: Vec<(&str, Field)>) -> Field {
        let mut message = DynamicMessage::new(descriptor(name));
        for (field, value) in fields {
            message.set_field_by_name(field, value);
        }
        Field::Message(message)
    }

    /// `object` of `api_version`/`kind` as kubectl sends it.
    fn body(api_version: &str, kind: &str, object: Field) -> Vec<u8> {
        let Field::Message(object) = object else {
            panic!("a message")
        };
        let type_meta = message(
            "k8s.io.apimachinery.pkg.runtime.TypeMeta",
            vec![
                ("apiVersion", Field::String(api_version.into())),
                ("kind", Field::String(kind.into())),
            ],
        );
        let Field::Message(unknown) = message(
            "k8s.io.apimachinery.pkg.runtime.Unknown",
            vec![
                ("typeMeta", type_meta),
                ("raw", Field::Bytes(object.encode_to_vec().into())),
                ("contentEncoding", Field::String(String::new())),
                ("contentType", Field::String(String::new())),
            ],
        ) else {
            unreachable!()
        };
        [MAGIC, &unknown.encode_to_vec()].concat()
    }

    const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

    fn metadata(name: &str) -> Field {
        message(
            &format!("{META}.ObjectMeta"),
            vec![
                ("name", Field::String(name.into())),
                // Go writes every non-pointer field, empty or not.
                ("generateName", Field::String(String::new())),
                ("generation", Field::I64(0)),
                (
                    "creationTimestamp",
                    message(&format!("{META}.Time"), vec![]),
                ),
            ],
        )
    }

    #[test]
    fn times_are_rfc_3339_and_zero_is_null() {
        let event = message(
            "k8s.io.api.core.v1.Event",
            vec![
                ("metadata", metadata("e")),
                (
                    "firstTimestamp",
                    message(
                        &format!("{META}.Time"),
                        vec![
                            ("seconds", Field::I64(1_780_000_000)),
                            ("nanos", Field::I32(5)),
                        ],
                    ),
                ),
                (
                    "eventTime",
                    message(
                        &format!("{META}.MicroTime"),
                        vec![
                            ("seconds", Field::I64(1_780_000_000)),
                            ("nanos", Field::I32(123_456_000)),
                        ],
                    ),
                ),
                ("count", Field::I32(0)),
            ],
        );
        let object = decode(&body("v1", "Event", event)).expect("decodes");
        assert_eq!(
            object,
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": { "name": "e", "creationTimestamp": null },
                "firstTimestamp": "2026-05-28T20:26:40Z",
                "eventTime": "2026-05-28T20:26:40.123456Z",
            })
        );
    }

    #[test]
    fn quantities_int_or_strings_and_required_zeros_read_as_json_does() {
        let quantity = |q: &str| {
            message(
                "k8s.io.apimachinery.pkg.api.resource.Quantity",
                vec![("string", Field::String(q.into()))],
            )
        };
        let int_or_string = |kind: i64, n: i32, s: &str| {
            message(
                "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
                vec![
                    ("type", Field::I64(kind)),
                    ("intVal", Field::I32(n)),
                    ("strVal", Field::String(s.into())),
                ],
            )
        };
        let port = |name: &str, target| {
            message(
                "k8s.io.api.core.v1.ServicePort",
                vec![
                    ("name", Field::String(name.into())),
                    ("port", Field::I32(0)),
                    ("targetPort", target),
                ],
            )
        };
        let service = message(
            "k8s.io.api.core.v1.Service",
            vec![
                ("metadata", metadata("s")),
                (
                    "spec",
                    message(
                        "k8s.io.api.core.v1.ServiceSpec",
                        vec![(
                            "ports",
                            Field::List(vec![
                                port("http", int_or_string(0, 8000, "")),
                                port("named", int_or_string(1, 0, "web")),
                            ]),
                        )],
                    ),
                ),
            ],
        );
        let object = decode(&body("v1", "Service", service)).expect("decodes");
        assert_eq!(
            object["spec"]["ports"],
            json!([{ "name": "http", "port": 0, "targetPort": 8000 }, { "name": "named", "port": 0, "targetPort": "web" }])
        );

        let requests = DynamicMessage::new(descriptor("k8s.io.api.core.v1.ResourceRequirements"));
        let mut requests = requests;
        requests.set_field_by_name(
            "limits",
            Field::Map(
                [
                    (MapKey::String("nvidia.com/gpu".into()), quantity("1")),
                    (MapKey::String("memory".into()), quantity("48Gi")),
                ]
                .into(),
            ),
        );
        let container = message(
            "k8s.io.api.core.v1.Container",
            vec![
                ("name", Field::String("engine".into())),
                ("resources", Field::Message(requests)),
            ],
        );
        let pod = message(
            "k8s.io.api.core.v1.Pod",
            vec![
                ("metadata", metadata("p")),
                (
                    "spec",
                    message(
                        "k8s.io.api.core.v1.PodSpec",
                        vec![("containers", Field::List(vec![container]))],
                    ),
                ),
            ],
        );
        let object = decode(&body("v1", "Pod", pod)).expect("decodes");
        assert_eq!(
            object["spec"]["containers"][0],
            json!({ "name": "engine", "resources": { "limits": { "memory": "48Gi", "nvidia.com/gpu": "1" } } })
        );
    }

    #[test]
    fn a_pointer_field_keeps_the_zero_it_was_sent_and_an_optional_one_does_not() {
        // Go writes both: replicas (*int32) because it was set, minReadySeconds
        // (int32, omitempty) because non-pointer fields are always written.
        let spec = message(
            "k8s.io.api.apps.v1.DeploymentSpec",
            vec![
                ("replicas", Field::I32(0)),
                ("minReadySeconds", Field::I32(0)),
            ],
        );
        let deployment = message(
            "k8s.io.api.apps.v1.Deployment",
            vec![("metadata", metadata("d")), ("spec", spec)],
        );
        let object = decode(&body("apps/v1", "Deployment", deployment)).expect("decodes");
        assert_eq!(object["spec"], json!({ "replicas": 0 }));
    }

    #[test]
    fn bytes_are_base64_and_raw_extensions_are_their_json() {
        let mut secret = DynamicMessage::new(descriptor("k8s.io.api.core.v1.Secret"));
        secret.set_field_by_name("metadata", metadata("s"));
        secret.set_field_by_name(
            "data",
            Field::Map(
                [(
                    MapKey::String("kubeconfig".into()),
                    Field::Bytes(b"apiVersion: v1\n\xff".to_vec().into()),
                )]
                .into(),
            ),
        );
        secret.set_field_by_name("type", Field::String("Opaque".into()));
        let object = decode(&body("v1", "Secret", Field::Message(secret))).expect("decodes");
        assert_eq!(
            object["data"],
            json!({ "kubeconfig": "YXBpVmVyc2lvbjogdjEK/w==" })
        );

        let raw = message(
            "k8s.io.apimachinery.pkg.runtime.RawExtension",
            vec![(
                "raw",
                Field::Bytes(br#"{"sharing":{"strategy":"TimeSlicing"}}"#.to_vec().into()),
            )],
        );
        let opaque = message(
            "k8s.io.api.resource.v1.OpaqueDeviceConfiguration",
            vec![
                ("driver", Field::String("gpu.nvidia.com".into())),
                ("parameters", raw),
            ],
        );
        let config = message(
            "k8s.io.api.resource.v1.DeviceConfiguration",
            vec![("opaque", opaque)],
        );
        let claim_config = message(
            "k8s.io.api.resource.v1.DeviceClaimConfiguration",
            vec![
                ("requests", Field::List(vec![Field::String("gpu".into())])),
                ("inline2", config),
            ],
        );
        let claim = message(
            "k8s.io.api.resource.v1.ResourceClaim",
            vec![
                ("metadata", metadata("c")),
                (
                    "spec",
                    message(
                        "k8s.io.api.resource.v1.ResourceClaimSpec",
                        vec![(
                            "devices",
                            message(
                                "k8s.io.api.resource.v1.DeviceClaim",
                                vec![("config", Field::List(vec![claim_config]))],
                            ),
                        )],
                    ),
                ),
            ],
        );
        let object = decode(&body("resource.k8s.io/v1", "ResourceClaim", claim)).expect("decodes");
        // The embedded DeviceConfiguration's fields are the entry's own.
        assert_eq!(
            object["spec"]["devices"]["config"],
            json!([{ "requests": ["gpu"], "opaque": { "driver": "gpu.nvidia.com", "parameters": { "sharing": { "strategy": "TimeSlicing" } } } }])
        );
    }

    #[test]
    fn a_field_the_schema_does_not_know_is_refused_not_dropped() {
        let mut namespace = DynamicMessage::new(descriptor("k8s.io.api.core.v1.Namespace"));
        namespace.set_field_by_name("metadata", metadata("n"));
        // Field 99 of a Namespace: from a Kubernetes newer than the schema.
        let mut bytes = namespace.encode_to_vec();
        bytes.extend([0x98, 0x06, 0x01]);
        let namespace =
            DynamicMessage::decode(descriptor("k8s.io.api.core.v1.Namespace"), bytes.as_slice())
                .expect("decodes");
        let error =
            decode(&body("v1", "Namespace", Field::Message(namespace))).expect_err("refused");
        assert_eq!(
            error.to_string(),
            "the protobuf message k8s.io.api.core.v1.Namespace has a field numbered 99 that this server does not know; send the object as JSON"
        );
    }

    #[test]
    fn a_kind_outside_the_schema_is_named() {
        let error = decode(&body("v1", "Frobnicator", metadata("x"))).expect_err("refused");
        assert_eq!(
            error.to_string(),
            "the protobuf body is a Frobnicator (v1), which this server does not decode"
        );
    }

    #[test]
    fn a_body_without_the_magic_number_is_refused() {
        assert!(matches!(decode(b"{}"), Err(ProtobufError::Magic)));
        assert!(matches!(
            decode(b"k8s\0\xff\xff"),
            Err(ProtobufError::Envelope(_))
        ));
    }
}
