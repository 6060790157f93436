//! Labels and annotations checked as Kubernetes' apimachinery checks them
//! (`ValidateLabels`, `ValidateAnnotations`): keys are qualified names (an
//! optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
//! alphanumerics, `-`, `_`, `.`), label values at most 63 of the same or
//! empty, annotations at most 256 KiB together. Every problem is reported,
//! each worded as kube-apiserver words it, so clients that match on the
//! message (and users reading it) see what they would on a real cluster.

use serde_json::{Map, Value};

/// One invalid field, as a `Status` cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Its path (`metadata.labels`).
    pub field: String,
    /// `FieldValueInvalid` or `FieldValueTooLong`.
    pub reason: &'static str,
    /// `Invalid value: "-bad-": …`, as Kubernetes words it.
    pub message: String,
}

/// The annotations' total size limit (`TotalAnnotationSizeLimitB`).
pub const ANNOTATIONS_LIMIT: usize = 256 * 1024;

const QUALIFIED_NAME_MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FORMAT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const SUBDOMAIN_FORMAT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";

/// apimachinery's `RegexError`: the message, its examples, the regex.
fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{message} (e.g. {}regex used for validation is '{format}')",
        examples.join(" or ")
    )
}

fn max_len(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn is_qualified_name_part(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !name.is_empty()
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
}

fn is_subdomain(text: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !text.is_empty()
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.starts_with(alnum)
                && label.ends_with(alnum)
                && label.chars().all(|c| alnum(c) || c == '-')
        })
}

/// apimachinery's `IsQualifiedName`: what is wrong with `key`, if anything.
fn qualified_name(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_string());
            } else if prefix.len() > 253 {
                problems.push(format!("prefix part {}", max_len(253)));
            } else if !is_subdomain(prefix) {
                problems.push(format!(
                    "prefix part {}",
                    regex_error(SUBDOMAIN_MESSAGE, SUBDOMAIN_FORMAT, &["example.com"])
                ));
            }
            name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MESSAGE,
                    QUALIFIED_NAME_FORMAT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        problems.push(format!("name part {}", max_len(63)));
    }
    if !is_qualified_name_part(name) {
        problems.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MESSAGE,
                QUALIFIED_NAME_FORMAT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    problems
}

/// apimachinery's `IsValidLabelValue`.
fn label_value(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 63 {
        problems.push(max_len(63));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        problems.push(regex_error(
            LABEL_VALUE_MESSAGE,
            &format!("({QUALIFIED_NAME_FORMAT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    problems
}

fn invalid(field: &str, value: &str, why: String) -> FieldError {
    FieldError {
        field: field.to_string(),
        reason: "FieldValueInvalid",
        // Go's %q of the value.
        message: format!(
            "Invalid value: {}: {why}",
            serde_json::to_string(value).unwrap_or_default()
        ),
    }
}

/// What is wrong with `metadata`'s labels and annotations.
pub fn check(metadata: &Map<String, Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    if let Some(labels) = metadata.get("labels").and_then(Value::as_object) {
        for (key, value) in labels {
            for why in qualified_name(key) {
                errors.push(invalid("metadata.labels", key, why));
            }
            let value = text(value);
            for why in label_value(&value) {
                errors.push(invalid("metadata.labels", &value, why));
            }
        }
    }
    if let Some(annotations) = metadata.get("annotations").and_then(Value::as_object) {
        let mut total = 0;
        for (key, value) in annotations {
            for why in qualified_name(&key.to_lowercase()) {
                errors.push(invalid("metadata.annotations", key, why));
            }
            total += key.len() + value.as_str().map_or(0, str::len);
        }
        if total > ANNOTATIONS_LIMIT {
            errors.push(FieldError {
                field: "metadata.annotations".into(),
                reason: "FieldValueTooLong",
                message: format!("Too long: must have at most {ANNOTATIONS_LIMIT} bytes"),
            });
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(metadata: Value) -> Vec<String> {
        check(metadata.as_object().expect("object"))
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn keys_and_values_kubernetes_accepts_pass() {
        let ok = json!({
            "labels": { "app": "x", "modelplane.ai/owner-uid": "", "a.b_c-d": "My_Value.1" },
            "annotations": { "kubectl.kubernetes.io/last-applied-configuration": "{}", "Note": "any text at all" },
        });
        assert_eq!(errors(ok), Vec::<String>::new());
    }

    #[test]
    fn a_bad_label_key_is_worded_as_kubernetes_words_it() {
        assert_eq!(
            errors(json!({ "labels": { "-bad key-": "x" } })),
            [
                "metadata.labels: Invalid value: \"-bad key-\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ]
        );
    }

    #[test]
    fn long_keys_bad_prefixes_and_bad_values_are_each_reported() {
        let long = "k".repeat(300);
        let found = errors(
            json!({ "labels": { long.clone(): "x", "Bad_Prefix/x": "v", "ok": "not ok!" } }),
        );
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found
                .iter()
                .any(|e| e.contains("name part must be no more than 63 characters"))
        );
        assert!(found.iter().any(|e| e.starts_with("metadata.labels: Invalid value: \"Bad_Prefix/x\": prefix part a lowercase RFC 1123 subdomain")));
        assert!(found.iter().any(|e| e.starts_with(
            "metadata.labels: Invalid value: \"not ok!\": a valid label must be an empty string"
        )));
        assert_eq!(
            errors(json!({ "labels": { "a/b/c": "x" } })).len(),
            1,
            "a key with two slashes is one error"
        );
    }

    #[test]
    fn annotations_over_256_kib_are_too_long() {
        let big = "x".repeat(ANNOTATIONS_LIMIT);
        assert_eq!(
            errors(json!({ "annotations": { "a": big } })),
            ["metadata.annotations: Too long: must have at most 262144 bytes"]
        );
        let fits = "x".repeat(ANNOTATIONS_LIMIT - 1);
        assert!(errors(json!({ "annotations": { "a": fits } })).is_empty());
    }
}
