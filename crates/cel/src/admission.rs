//! Admission of Modelplane objects, as the API server with Modelplane's CRDs
//! would do it: identity, metadata, pruning, defaulting, OpenAPI constraints,
//! then every `x-kubernetes-validations` rule, plus the advisory warnings.
//!
//! Data flow: [`Admission::new`] compiles the CEL rules of every kind once;
//! [`Admission::review`] takes one object (and the previous version, for
//! transition rules such as the immutable `stack`) and returns a [`Review`]
//! that lists every problem by field path. `modelplane validate` and the
//! embedded API server both call it, so every message is written once.

use modelplane_api::crds::{self, KindInfo, Scope};
use modelplane_api::validation::structural::{self, ErrorType, FieldError, render_value};
use modelplane_api::validation::{self, Warning};
use serde_json::Value;

use crate::rules::RuleSet;

/// One problem with an object, at a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Field path (`spec.replicas`); empty for the object as a whole.
    pub path: String,
    /// The API server's wording of the cause.
    pub message: String,
    /// A field the schema does not declare (pruned): whether that rejects
    /// the object is the request's `fieldValidation`.
    pub unknown_field: bool,
}

impl From<FieldError> for Problem {
    fn from(e: FieldError) -> Self {
        Problem {
            path: e.path.clone(),
            message: e.to_string(),
            unknown_field: matches!(e.error, ErrorType::Unknown),
        }
    }
}

/// The outcome of reviewing one object.
#[derive(Clone, Debug)]
pub enum Review {
    /// Not a Modelplane kind (a Secret, a ProviderConfig…): nothing to check.
    Skipped {
        /// `apiVersion` of the object.
        api_version: String,
        /// `kind` of the object.
        kind: String,
    },
    /// A Modelplane object, checked.
    Checked {
        /// The kind.
        kind: &'static str,
        /// `metadata.name`, or empty when missing.
        name: String,
        /// `metadata.namespace` when set.
        namespace: Option<String>,
        /// The object as stored: pruned and defaulted.
        object: Value,
        /// Reasons the API server would reject it; empty when accepted.
        errors: Vec<Problem>,
        /// Advisories that do not reject it.
        warnings: Vec<Warning>,
    },
}

struct CompiledKind {
    info: &'static KindInfo,
    schema: Value,
    rules: RuleSet,
}

/// Compiled admission for every Modelplane kind; build once, review many.
pub struct Admission {
    kinds: Vec<CompiledKind>,
    /// Device selectors compiled before, with their verdicts: a fleet
    /// repeats the same few selectors on thousands of replicas.
    selectors: SelectorVerdicts,
}

/// Compile verdicts of device selectors by text (`Err` holds the message).
#[derive(Default)]
struct SelectorVerdicts(std::sync::Mutex<std::collections::HashMap<String, Result<(), String>>>);

impl SelectorVerdicts {
    /// Most verdicts kept; beyond, the cache starts over.
    const MAX: usize = 4096;

    fn verdict(&self, text: &str) -> Result<(), String> {
        if let Ok(known) = self.0.lock()
            && let Some(verdict) = known.get(text)
        {
            return verdict.clone();
        }
        let verdict = crate::dra::DeviceSelector::compile(text)
            .map(drop)
            .map_err(|e| e.to_string());
        if let Ok(mut known) = self.0.lock() {
            if known.len() >= Self::MAX {
                known.clear();
            }
            known.insert(text.to_string(), verdict.clone());
        }
        verdict
    }
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("kinds", &self.kinds.len())
            .finish()
    }
}

impl Default for Admission {
    fn default() -> Self {
        Self::new()
    }
}

impl Admission {
    /// Compiles the schemas and CEL rules of every kind in [`crds::KINDS`].
    pub fn new() -> Self {
        let kinds = crds::KINDS
            .iter()
            .map(|info| {
                let schema = info.schema();
                let rules = RuleSet::compile(&schema);
                CompiledKind {
                    info,
                    schema,
                    rules,
                }
            })
            .collect();
        Admission {
            kinds,
            selectors: SelectorVerdicts::default(),
        }
    }

    /// Reviews one object. `old` is the object it replaces, if any; only then
    /// do transition rules (`oldSelf`) run.
    pub fn review(&self, object: Value, old: Option<&Value>) -> Review {
        let api_version = object["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let kind_name = object["kind"].as_str().unwrap_or_default().to_string();
        if !crds::is_modelplane_group(&api_version) {
            if api_version.is_empty() || kind_name.is_empty() || looks_like_modelplane(&api_version)
            {
                return identity_problem(object, &api_version, &kind_name);
            }
            return Review::Skipped {
                api_version,
                kind: kind_name,
            };
        }
        let Some(compiled) = self
            .kinds
            .iter()
            .find(|k| k.info.kind == kind_name && k.info.api_version() == api_version)
        else {
            return identity_problem(object, &api_version, &kind_name);
        };
        self.check(compiled, object, old)
    }

    fn check(&self, compiled: &CompiledKind, object: Value, old: Option<&Value>) -> Review {
        let info = compiled.info;
        let mut errors: Vec<Problem> = metadata_problems(info, &object);
        let (object, problems) = admit_to_schema(&compiled.schema, &compiled.rules, object, old);
        errors.extend(problems);
        errors.extend(selector_problems(&object, &self.selectors));
        let warnings = validation::warnings(info.kind, &object);
        Review::Checked {
            kind: info.kind,
            name: object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            namespace: object["metadata"]["namespace"].as_str().map(str::to_string),
            object,
            errors,
            warnings,
        }
    }
}

/// Admission of the kind one version of some other CRD defines: its
/// structural schema (pruning, defaulting, OpenAPI constraints) and its
/// `x-kubernetes-validations`, transition rules included.
pub struct SchemaAdmission {
    schema: Value,
    rules: RuleSet,
}

impl std::fmt::Debug for SchemaAdmission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaAdmission").finish_non_exhaustive()
    }
}

impl SchemaAdmission {
    /// Compiles an `openAPIV3Schema` once. `apiVersion` and `kind` are
    /// always kept, as the API server keeps them whatever the schema says.
    pub fn compile(mut schema: Value) -> Self {
        if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            for field in ["apiVersion", "kind"] {
                properties
                    .entry(field)
                    .or_insert_with(|| serde_json::json!({ "type": "string" }));
            }
        }
        let rules = RuleSet::compile(&schema);
        SchemaAdmission { schema, rules }
    }

    /// The object pruned and defaulted, and every problem with it.
    pub fn review(&self, object: Value, old: Option<&Value>) -> (Value, Vec<Problem>) {
        admit_to_schema(&self.schema, &self.rules, object, old)
    }
}

/// Everything below `metadata` against one schema: pruning, defaulting and
/// OpenAPI constraints, then the CEL rules on the result.
fn admit_to_schema(
    schema: &Value,
    rules: &RuleSet,
    mut object: Value,
    old: Option<&Value>,
) -> (Value, Vec<Problem>) {
    let metadata = take_metadata(&mut object);
    let schema_errors = structural::admit(schema, &mut object, "");
    let blocking = schema_errors
        .iter()
        .find(|e| matches!(e.error, ErrorType::WrongType { .. }))
        .map(|e| e.path.clone());
    let mut errors: Vec<Problem> = schema_errors.into_iter().map(Problem::from).collect();
    let old = old.map(|o| {
        let mut o = o.clone();
        take_metadata(&mut o);
        structural::admit(schema, &mut o, "");
        o
    });
    // CEL rules see the object as the API server would: pruned and defaulted.
    // Like the API server, they do not run past a value of the wrong type.
    if let Some(path) = blocking {
        errors.push(Problem {
            path,
            message: "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into(),
            unknown_field: false,
        });
    } else {
        errors.extend(
            rules
                .evaluate(&object, old.as_ref())
                .into_iter()
                .map(|f| Problem {
                    path: f.path,
                    message: format!("Invalid value: \"{}\": {}", f.value_type, f.message),
                    unknown_field: false,
                }),
        );
    }
    if let (Some(metadata), Value::Object(map)) = (metadata, &mut object) {
        map.insert("metadata".into(), metadata);
    }
    (object, errors)
}

fn identity_problem(object: Value, api_version: &str, kind: &str) -> Review {
    let message = if api_version.is_empty() {
        "Required value: apiVersion must be set".to_string()
    } else if kind.is_empty() {
        "Required value: kind must be set".to_string()
    } else {
        let mut message = format!("no matches for kind \"{kind}\" in version \"{api_version}\"");
        if let Some(nearest) = nearest_kind(api_version, kind) {
            message.push_str(&format!("; did you mean {nearest}?"));
        }
        message
    };
    let path = if api_version.is_empty() {
        "apiVersion"
    } else {
        "kind"
    };
    Review::Checked {
        kind: "",
        name: object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        namespace: None,
        object,
        errors: vec![Problem {
            path: path.into(),
            message,
            unknown_field: false,
        }],
        warnings: Vec::new(),
    }
}

/// An apiVersion whose group is not Modelplane's but was surely meant to
/// be (`modelplane.io/v1alpha1`, `modelplan.ai/v1alpha1`): an error, not a
/// foreign kind to skip, so a typo does not pass CI.
fn looks_like_modelplane(api_version: &str) -> bool {
    let group = api_version.split('/').next().unwrap_or_default();
    group.contains("modelplane")
        || [crds::GROUP, crds::INFRASTRUCTURE_GROUP]
            .iter()
            .any(|g| edit_distance(group, g) <= 3)
}

/// The served `apiVersion kind` nearest to what was written, when one is
/// close: same kind in another group or version, or a kind a few edits away.
fn nearest_kind(api_version: &str, kind: &str) -> Option<String> {
    let lower = kind.to_ascii_lowercase();
    crds::KINDS
        .iter()
        .map(|k| {
            let mut distance = edit_distance(&lower, &k.kind.to_ascii_lowercase());
            if k.api_version() != api_version {
                distance += 1;
            }
            (distance, k)
        })
        .filter(|(distance, k)| {
            *distance <= 3 && !(k.kind == kind && k.api_version() == api_version)
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| format!("{} {}", k.api_version(), k.kind))
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

fn take_metadata(object: &mut Value) -> Option<Value> {
    object.as_object_mut().and_then(|m| m.remove("metadata"))
}

/// Device selectors that do not compile, as the cluster's DRA allocator
/// would refuse them once they reach a ResourceClaim: every
/// `…nodeSelector.devices[].selectors[].cel` of a deployment's engines, or a
/// replica's `deviceRequests[].selectors[].cel`.
fn selector_problems(object: &Value, verdicts: &SelectorVerdicts) -> Vec<Problem> {
    let (engines, base) = match object["kind"].as_str() {
        Some("ModelDeployment") => (
            &object["spec"]["template"]["spec"]["engines"],
            "spec.template.spec.engines",
        ),
        Some("ModelReplica") => (&object["spec"]["engines"], "spec.engines"),
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    for (e, engine) in list(engines).iter().enumerate() {
        for (m, member) in list(&engine["members"]).iter().enumerate() {
            let (requests, field) = if member.get("deviceRequests").is_some() {
                (list(&member["deviceRequests"]), "deviceRequests")
            } else {
                (
                    list(&member["nodeSelector"]["devices"]),
                    "nodeSelector.devices",
                )
            };
            for (r, request) in requests.iter().enumerate() {
                for (x, selector) in list(&request["selectors"]).iter().enumerate() {
                    // An empty one is the schema's to refuse (minLength).
                    let Some(text) = selector["cel"].as_str().filter(|t| !t.is_empty()) else {
                        continue;
                    };
                    if let Err(error) = verdicts.verdict(text) {
                        out.push(Problem {
                            path: format!(
                                "{base}[{e}].members[{m}].{field}[{r}].selectors[{x}].cel"
                            ),
                            message: format!(
                                "Invalid value: {}: compilation failed: {}",
                                render_value(&Value::String(text.into())),
                                error
                            ),
                            unknown_field: false,
                        });
                    }
                }
            }
        }
    }
    out
}

/// Whether `name` is a DNS-1035 label: what a Service name (and a pod
/// hostname) must be.
fn is_dns_1035_label(name: &str) -> bool {
    name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// `metadata` checks of the API server: a valid name, string labels.
fn metadata_problems(info: &KindInfo, object: &Value) -> Vec<Problem> {
    let metadata = &object["metadata"];
    let mut out = Vec::new();
    // A deployment's name starts the names of its replicas' Services (the
    // endpoint picker's `<replica>-epp-…`) and pods, which must be DNS-1035
    // labels: refuse a name Kubernetes would refuse there, here and now.
    if info.kind == "ModelDeployment"
        && let Some(name) = metadata["name"].as_str()
        && is_dns_subdomain(name)
        && !is_dns_1035_label(name)
    {
        out.push(Problem {
            path: "metadata.name".into(),
            message: format!(
                "Invalid value: {}: a ModelDeployment name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter, at most 63 characters), because it starts the names of the Services and pods composed for each replica (such as {name}-…-epp-…), which Kubernetes refuses otherwise",
                render_value(&Value::String(name.into()))
            ),
            unknown_field: false,
        });
    }
    match metadata["name"].as_str() {
        None if metadata.get("generateName").is_none() => out.push(Problem {
            path: "metadata.name".into(),
            message: "Required value: name or generateName is required".into(),
            unknown_field: false,
        }),
        Some(name) if !is_dns_subdomain(name) => out.push(Problem {
            path: "metadata.name".into(),
            message: format!(
                "Invalid value: {}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                render_value(&Value::String(name.into()))
            ),
            unknown_field: false,
        }),
        _ => {}
    }
    if info.scope == Scope::Namespaced
        && let Some(ns) = metadata["namespace"].as_str()
        && !is_dns_label(ns)
    {
        out.push(Problem {
            path: "metadata.namespace".into(),
            message: format!(
                "Invalid value: {}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                render_value(&Value::String(ns.into()))
            ),
            unknown_field: false,
        });
    }
    for field in ["labels", "annotations"] {
        if let Some(map) = metadata[field].as_object() {
            for (key, value) in map {
                if !value.is_string() {
                    out.push(Problem {
                        path: format!("metadata.{field}.{key}"),
                        message: format!(
                            "Invalid value: {}: metadata.{field}.{key} in body must be of type string",
                            render_value(value)
                        ),
                        unknown_field: false,
                    });
                }
            }
        }
    }
    out
}

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}
