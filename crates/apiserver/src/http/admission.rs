//! Admission of a write: Modelplane's kinds through the same rules as
//! `modelplane validate`, other CRDs through their own schema and CEL, and
//! field validation (`Strict`, `Warn`, `Ignore`).

use super::*;

/// Admission of a write: Modelplane's own kinds through their compiled CRDs
/// (with advisories), other custom kinds through the schema of the CRD that
/// defines them; built-in kinds pass as they are. Unknown fields are pruned
/// and then, by the request's `fieldValidation`, warned about, ignored or
/// refused (400, before any other check, as decoding is); any other problem
/// is a 422 listing every cause.
pub(super) fn admit(
    server: &ApiServer,
    target: &Target,
    object: Value,
    old: Option<&Value>,
) -> Result<(Value, Vec<String>), Failure> {
    let metadata = object["metadata"].clone();
    let (mut admitted, problems, mut warnings) = if modelplane_api::crds::is_modelplane_group(
        &target.resource.api_version(),
    ) {
        match server.shared.admission.review(object, old) {
            modelplane_cel::Review::Skipped { api_version, kind } => {
                return Err(Failure::new(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!(
                        "the API version in the data ({api_version}) does not match the expected API version ({}) for kind {kind}",
                        target.resource.api_version()
                    ),
                ));
            }
            modelplane_cel::Review::Checked {
                object,
                errors,
                warnings,
                ..
            } => (
                object,
                errors,
                warnings
                    .iter()
                    .map(|w| format!("{}: {}", w.path, w.message))
                    .collect::<Vec<_>>(),
            ),
        }
    } else if let Some(schema) = server.schema_of(&target.resource) {
        let (object, problems) = schema.review(object, old);
        (object, problems, Vec::new())
    } else {
        return builtin(target, object);
    };
    let errors = field_validation(target, problems, &mut warnings)?;
    if !errors.is_empty() {
        return Err(invalid(target, &metadata, &errors));
    }
    admitted["metadata"] = metadata;
    Ok((admitted, warnings))
}
/// A built-in kind's object read as its Go type reads it: a value of the
/// wrong type is a 400 (as decoding is), unknown fields are dropped and
/// then warned about, ignored or refused by the request's `fieldValidation`.
fn builtin(target: &Target, mut object: Value) -> Result<(Value, Vec<String>), Failure> {
    let resource = &target.resource;
    let read = match crate::protobuf::check(&resource.api_version(), &resource.kind, &mut object) {
        None => return Ok((object, Vec::new())),
        Some(Ok(read)) => read,
        Some(Err(why)) => {
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!(
                    "{kind} in version \"{}\" cannot be handled as a {kind}: {why}",
                    resource.version,
                    kind = resource.kind,
                ),
            ));
        }
    };
    let unknown = read
        .unknown
        .into_iter()
        .map(|message| modelplane_cel::Problem {
            path: String::new(),
            message,
            unknown_field: true,
        })
        .collect();
    let mut warnings = Vec::new();
    field_validation(target, unknown, &mut warnings)?;
    Ok((object, warnings))
}

/// Applies the request's `fieldValidation` to the unknown fields among
/// `problems` (already pruned); returns the other problems.
pub(super) fn field_validation(
    target: &Target,
    problems: Vec<modelplane_cel::Problem>,
    warnings: &mut Vec<String>,
) -> Result<Vec<modelplane_cel::Problem>, Failure> {
    let (unknown, errors): (Vec<_>, Vec<_>) = problems.into_iter().partition(|p| p.unknown_field);
    match target.options.field_validation {
        FieldValidation::Strict if !unknown.is_empty() => {
            let fields: Vec<&str> = unknown.iter().map(|p| p.message.as_str()).collect();
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!(
                    "{kind} in version \"{}\" cannot be handled as a {kind}: strict decoding error: {}",
                    target.resource.version,
                    fields.join(", "),
                    kind = target.resource.kind,
                ),
            ));
        }
        FieldValidation::Warn => warnings.extend(unknown.into_iter().map(|p| p.message)),
        FieldValidation::Strict | FieldValidation::Ignore => {}
    }
    Ok(errors)
}

/// The 422 of an object that failed admission, naming every cause.
pub(super) fn invalid(
    target: &Target,
    metadata: &Value,
    errors: &[modelplane_cel::Problem],
) -> Failure {
    let name = metadata["name"].as_str().unwrap_or_default();
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({ "reason": "FieldValueInvalid", "message": e.message, "field": e.path }))
        .collect();
    let summary: Vec<String> = errors
        .iter()
        .map(|e| {
            if e.path.is_empty() {
                e.message.clone()
            } else {
                format!("{}: {}", e.path, e.message)
            }
        })
        .collect();
    Failure {
        details: Some(
            json!({ "name": name, "group": target.resource.group, "kind": target.resource.kind, "causes": causes }),
        ),
        ..Failure::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!(
                "{} \"{name}\" is invalid: {}",
                target.qualified(),
                summary.join(", ")
            ),
        )
    }
}

/// Adds `Warning` headers, as kubectl prints them.
pub(super) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let escaped = warning.replace('\\', "\\\\").replace('"', "\\\"");
        let text = format!("299 - \"{escaped}\"");
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}
