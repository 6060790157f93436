//! Label and field selectors as list and watch requests carry them
//! (`apiserver.md` §3.8): `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`,
//! `a notin (x,y)`; fields `metadata.name`, `metadata.namespace` and, for
//! events, `involvedObject.*`, with `=`, `==` and `!=`.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas outside parentheses.
fn split_requirements(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

fn set_values(text: &str) -> Result<Vec<String>, String> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised set of values, found {text:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses a `labelSelector` query value.
    pub fn parse(text: &str) -> Result<LabelSelector, String> {
        let mut out = Vec::new();
        for part in split_requirements(text) {
            let requirement = if let Some(key) = part.strip_prefix('!') {
                Requirement::DoesNotExist(key.trim().to_string())
            } else if let Some((key, value)) = part.split_once("!=") {
                Requirement::NotEquals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) =
                part.split_once("==").or_else(|| part.split_once('='))
            {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, values)) = part.split_once(" notin ") {
                Requirement::NotIn(key.trim().into(), set_values(values)?)
            } else if let Some((key, values)) = part.split_once(" in ") {
                Requirement::In(key.trim().into(), set_values(values)?)
            } else if part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Requirement::Exists(part.to_string())
            } else {
                return Err(format!("unable to parse requirement: {part:?}"));
            };
            out.push(requirement);
        }
        Ok(LabelSelector(out))
    }

    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`);
    /// null matches nothing, as Kubernetes reads a missing selector.
    pub fn from_object(selector: &Value) -> Option<LabelSelector> {
        let selector = selector.as_object()?;
        let mut out = Vec::new();
        for (key, value) in selector
            .get("matchLabels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            out.push(Requirement::Equals(
                key.clone(),
                value.as_str()?.to_string(),
            ));
        }
        let expressions = selector.get("matchExpressions").and_then(Value::as_array);
        for expression in expressions.into_iter().flatten() {
            let key = expression.get("key")?.as_str()?.to_string();
            let values = || -> Vec<String> {
                let values = expression.get("values").and_then(Value::as_array);
                values
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            out.push(match expression.get("operator")?.as_str()? {
                "In" => Requirement::In(key, values()),
                "NotIn" => Requirement::NotIn(key, values()),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                _ => return None,
            });
        }
        Some(LabelSelector(out))
    }

    /// Whether `labels` (an object of strings, or null) satisfies every requirement.
    pub fn matches(&self, labels: &Value) -> bool {
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(Vec<String>, bool, String)>);

const FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];

/// An Event's own field labels besides `involvedObject.*` (`source` is
/// read as `source.component`).
const EVENT_FIELDS: [&str; 4] = ["reason", "type", "reportingComponent", "source.component"];

impl FieldSelector {
    /// Parses a `fieldSelector` query value.
    pub fn parse(text: &str) -> Result<FieldSelector, String> {
        let mut out = Vec::new();
        for part in split_requirements(text) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, true, v)
            } else {
                return Err(format!("invalid field selector: {part:?}"));
            };
            let field = field.trim();
            // An Event's field labels, as kube-apiserver offers them:
            // `source` is `source.component`.
            let field = match field {
                "source" => "source.component",
                other => other,
            };
            if !FIELDS.contains(&field)
                && !EVENT_FIELDS.contains(&field)
                && !field.starts_with("involvedObject.")
                && !field.starts_with("regarding.")
            {
                return Err(format!("field label not supported: {field}"));
            }
            out.push((
                field.split('.').map(str::to_string).collect(),
                equal,
                value.trim().to_string(),
            ));
        }
        Ok(FieldSelector(out))
    }

    /// Whether `object` satisfies every requirement (a missing field is "").
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(path, equal, value)| {
            let found = path
                .iter()
                .try_fold(object, |v, k| v.get(k))
                .and_then(Value::as_str)
                .unwrap_or("");
            (found == value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_cover_every_operator() {
        let labels = json!({ "app": "web", "tier": "front" });
        let yes = [
            "",
            "app=web",
            "app==web",
            "app!=db",
            "app",
            "!missing",
            "tier in (front, back)",
            "tier notin (db)",
            "app=web,tier",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).expect(s).matches(&labels), "{s}");
        }
        let no = [
            "app=db",
            "app!=web",
            "missing",
            "!app",
            "tier in (back)",
            "tier notin (front)",
            "app=web,missing",
        ];
        for s in no {
            assert!(!LabelSelector::parse(s).expect(s).matches(&labels), "{s}");
        }
        assert!(
            LabelSelector::parse("missing notin (x)")
                .expect("parse")
                .matches(&labels)
        );
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b c").is_err());
    }

    #[test]
    fn field_selectors_read_names_namespaces_and_involved_objects() {
        let event = json!({ "metadata": { "name": "e", "namespace": "ns" }, "involvedObject": { "kind": "Pod", "name": "p" }, "reason": "Started" });
        for (s, want) in [
            ("metadata.name=e", true),
            ("metadata.namespace!=ns", false),
            ("involvedObject.kind=Pod,involvedObject.name=p", true),
            ("involvedObject.name=p,reason=Started", true),
            ("reason!=Started", false),
            ("involvedObject.uid=", true),
        ] {
            assert_eq!(
                FieldSelector::parse(s).expect(s).matches(&event),
                want,
                "{s}"
            );
        }
        assert!(FieldSelector::parse("spec.replicas=1").is_err());
    }
}
