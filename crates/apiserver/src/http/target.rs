//! The request target: which cluster, resource, namespace, name and
//! subresource a path names, and the write options its query gives.

use super::*;

/// What a path addresses.
#[derive(Clone, Debug)]
pub(super) struct Target {
    pub(super) resource: Resource,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) status: bool,
    /// The scale subresource.
    pub(super) scale: bool,
    /// A pod's log.
    pub(super) log: bool,
    /// `fieldValidation` and `dryRun` of the request.
    pub(super) options: WriteOptions,
    /// Who writes: the `fieldManager`, else the client's User-Agent up to
    /// its first `/`, as Kubernetes names managers of updates.
    pub(super) manager: String,
    /// The request is a PATCH (an apply may create).
    pub(super) patch: bool,
    /// What a Table's rows carry (`includeObject`).
    pub(super) include: crate::table::Include,
}

impl Target {
    /// The kind's structural schema, for server-side apply to merge lists
    /// by: a CRD's own, a built-in kind's from the protobuf schema, else
    /// null (lists atomic).
    pub(super) fn structure(&self) -> Arc<Value> {
        let resource = &self.resource;
        resource
            .schema
            .clone()
            .or_else(|| crate::protobuf::structure(&resource.api_version(), &resource.kind))
            .unwrap_or_else(|| Arc::new(Value::Null))
    }

    /// The subresource addressed, or empty.
    pub(super) fn subresource(&self) -> &'static str {
        if self.status {
            "status"
        } else if self.scale {
            "scale"
        } else if self.log {
            "log"
        } else {
            ""
        }
    }

    /// The fields this request addresses, for ownership.
    pub(super) fn scope(&self) -> crate::apply::Scope {
        if self.status {
            crate::apply::Scope::Status
        } else {
            crate::apply::Scope::Main {
                status_subresource: self.resource.status,
            }
        }
    }
}

/// How the request asks its write to be handled (`apiserver.md` §3.13, §3.14).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct WriteOptions {
    pub(super) field_validation: FieldValidation,
    /// `dryRun=All`: admit and check everything, persist nothing.
    pub(super) dry_run: bool,
}

/// What an unknown field does to a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum FieldValidation {
    /// Pruned silently.
    Ignore,
    /// Pruned, with a `Warning` header (the default).
    #[default]
    Warn,
    /// Rejected with 400.
    Strict,
}

impl WriteOptions {
    pub(super) fn from_query(query: &BTreeMap<String, String>) -> Result<WriteOptions, Failure> {
        let field_validation = match query.get("fieldValidation").map(String::as_str) {
            None | Some("" | "Warn") => FieldValidation::Warn,
            Some("Ignore") => FieldValidation::Ignore,
            Some("Strict") => FieldValidation::Strict,
            Some(other) => {
                return Err(Failure::new(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!(
                        "fieldValidation parameter unsupported: \"{other}\": valid values are \"Ignore\", \"Warn\", \"Strict\""
                    ),
                ));
            }
        };
        let dry_run = match query.get("dryRun").map(String::as_str) {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => {
                return Err(Failure::new(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!(
                        "unsupported dryRun value \"{other}\": the only supported value is \"All\""
                    ),
                ));
            }
        };
        Ok(WriteOptions {
            field_validation,
            dry_run,
        })
    }
}

impl Target {
    pub(super) fn qualified(&self) -> String {
        if self.resource.group.is_empty() {
            self.resource.plural.clone()
        } else {
            format!("{}.{}", self.resource.plural, self.resource.group)
        }
    }

    pub(super) fn details(&self, name: &str) -> Value {
        json!({ "name": name, "group": self.resource.group, "kind": self.resource.plural })
    }

    pub(super) fn not_found(&self, name: &str) -> Failure {
        Failure {
            details: Some(self.details(name)),
            ..Failure::new(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("{} \"{name}\" not found", self.qualified()),
            )
        }
    }

    pub(super) fn list_prefix(&self) -> String {
        match (&self.namespace, self.resource.namespaced) {
            (Some(ns), true) => self.resource.namespace_prefix(ns),
            _ => self.resource.prefix(),
        }
    }
}

pub(super) fn parse_target(server: &ApiServer, path: &str) -> Result<Target, Failure> {
    let not_found = || {
        Failure::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        )
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(not_found()),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, rest @ ..] => (
            Some(ns.to_string()),
            std::iter::once(*plural)
                .chain(rest.iter().copied())
                .collect::<Vec<_>>(),
        ),
        _ => (None, rest.to_vec()),
    };
    // `/api/v1/namespaces/NAME` addresses the namespace itself.
    let (plural, name, sub) = match (namespace.as_deref(), rest.as_slice()) {
        (Some(ns), []) if group.is_empty() => ("namespaces", Some(ns.to_string()), None),
        (Some(ns), ["status"]) if group.is_empty() => {
            ("namespaces", Some(ns.to_string()), Some("status"))
        }
        (_, [plural]) => (*plural, None, None),
        (_, [plural, name]) => (*plural, Some(name.to_string()), None),
        (_, [plural, name, sub]) => (*plural, Some(name.to_string()), Some(*sub)),
        _ => return Err(not_found()),
    };
    let namespace = if plural == "namespaces" && group.is_empty() {
        None
    } else {
        namespace
    };
    let resource = server
        .resource(group, version, plural)
        .ok_or_else(not_found)?;
    let (status, scale, log) = match sub {
        None => (false, false, false),
        Some("status") if resource.status => (true, false, false),
        Some("scale") if resource.scale.is_some() => (false, true, false),
        Some("log") if group.is_empty() && plural == "pods" => (false, false, true),
        Some(_) => return Err(not_found()),
    };
    Ok(Target {
        resource,
        namespace,
        name,
        status,
        scale,
        log,
        options: WriteOptions::default(),
        manager: String::new(),
        patch: false,
        include: crate::table::Include::default(),
    })
}

pub(super) fn query(uri: &Uri) -> BTreeMap<String, String> {
    uri.query()
        .map(|q| {
            form_urlencoded::parse(q.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
        .unwrap_or_default()
}
