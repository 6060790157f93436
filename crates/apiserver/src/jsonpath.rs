//! The JSONPath of `additionalPrinterColumns`, as client-go's `jsonpath`
//! evaluates it for a CRD's Table: fields (`.a.b`, with `\.` for a dot in a
//! key such as `crossplane\.io/external-name`), indexes (`[0]`, `[-1]`),
//! wildcards (`[*]`, `.*`) and filters (`[?(@.type=='Ready')]`, `!=`, or
//! `[?(@.x)]` for presence). Every match, in document order.

use serde_json::Value;

#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    Filter {
        path: Vec<String>,
        test: Option<(bool, Value)>,
    },
}

fn field(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> String {
    let mut name = String::new();
    while let Some(&c) = chars.peek() {
        match c {
            '\\' => {
                chars.next();
                if let Some(escaped) = chars.next() {
                    name.push(escaped);
                }
            }
            '.' | '[' => break,
            _ => {
                name.push(c);
                chars.next();
            }
        }
    }
    name
}

fn literal(text: &str) -> Value {
    let text = text.trim();
    let quoted = (text.starts_with('\'') && text.ends_with('\''))
        || (text.starts_with('"') && text.ends_with('"'));
    if quoted && text.len() >= 2 {
        return Value::String(text[1..text.len() - 1].to_string());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

fn filter(inner: &str) -> Option<Step> {
    let body = inner.strip_prefix("?(")?.strip_suffix(')')?.trim();
    let (lhs, test) = match body.split_once("==") {
        Some((l, r)) => (l, Some((true, literal(r)))),
        None => match body.split_once("!=") {
            Some((l, r)) => (l, Some((false, literal(r)))),
            None => (body, None),
        },
    };
    let path = lhs
        .trim()
        .strip_prefix('@')?
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    Some(Step::Filter { path, test })
}

fn parse(path: &str) -> Option<Vec<Step>> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut steps = Vec::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' => match chars.peek() {
                Some('*') => {
                    chars.next();
                    steps.push(Step::All);
                }
                Some('[') | None => {}
                Some(_) => steps.push(Step::Field(field(&mut chars))),
            },
            '[' => {
                let mut inner = String::new();
                let mut depth = 1;
                for c in chars.by_ref() {
                    depth += i32::from(c == '[') - i32::from(c == ']');
                    if depth == 0 {
                        break;
                    }
                    inner.push(c);
                }
                let inner = inner.trim();
                steps.push(match inner {
                    "*" => Step::All,
                    _ if inner.starts_with('?') => filter(inner)?,
                    _ if inner.starts_with('\'') || inner.starts_with('"') => {
                        Step::Field(inner[1..inner.len().saturating_sub(1).max(1)].to_string())
                    }
                    _ => Step::Index(inner.parse().ok()?),
                });
            }
            _ => {
                // A path that does not start with a dot: a field.
                let mut name = c.to_string();
                name.push_str(&field(&mut chars));
                steps.push(Step::Field(name));
            }
        }
    }
    Some(steps)
}

fn matches(item: &Value, path: &[String], test: &Option<(bool, Value)>) -> bool {
    let found = path.iter().try_fold(item, |v, k| v.get(k.as_str()));
    match (found, test) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(v), Some((equal, expected))) => (v == expected) == *equal,
    }
}

/// Every value `path` selects in `object`; none if the path does not parse.
pub fn find<'a>(object: &'a Value, path: &str) -> Vec<&'a Value> {
    let Some(steps) = parse(path) else {
        return Vec::new();
    };
    let mut current = vec![object];
    for step in &steps {
        let mut next = Vec::new();
        for value in current {
            match step {
                Step::Field(name) => next.extend(value.get(name.as_str())),
                Step::Index(i) => {
                    if let Some(items) = value.as_array() {
                        let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
                        let at = if *i < 0 { len + i } else { *i };
                        next.extend(usize::try_from(at).ok().and_then(|at| items.get(at)));
                    }
                }
                Step::All => match value {
                    Value::Array(items) => next.extend(items),
                    Value::Object(map) => next.extend(map.values()),
                    _ => {}
                },
                Step::Filter { path, test } => {
                    next.extend(
                        value
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter(|item| matches(item, path, test)),
                    );
                }
            }
        }
        current = next;
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn managed() -> Value {
        json!({
            "metadata": { "name": "vpc", "annotations": { "crossplane.io/external-name": "vpc-0abc" } },
            "spec": { "containers": [{ "name": "a" }, { "name": "b" }] },
            "status": { "conditions": [
                { "type": "Synced", "status": "True" },
                { "type": "Ready", "status": "False" },
            ] },
        })
    }

    #[test]
    fn printer_column_paths_select_as_client_go_does() {
        let m = managed();
        assert_eq!(
            find(&m, ".status.conditions[?(@.type=='Ready')].status"),
            vec![&json!("False")]
        );
        assert_eq!(
            find(&m, r#".status.conditions[?(@.type=="Synced")].status"#),
            vec![&json!("True")]
        );
        assert_eq!(
            find(&m, ".status.conditions[?(@.type!='Ready')].type"),
            vec![&json!("Synced")]
        );
        assert_eq!(
            find(&m, r".metadata.annotations.crossplane\.io/external-name"),
            vec![&json!("vpc-0abc")]
        );
        assert_eq!(
            find(&m, ".spec.containers[*].name"),
            vec![&json!("a"), &json!("b")]
        );
        assert_eq!(find(&m, ".spec.containers[-1].name"), vec![&json!("b")]);
        assert_eq!(find(&m, ".metadata.name"), vec![&json!("vpc")]);
        assert_eq!(find(&m, "{.metadata.name}"), vec![&json!("vpc")]);
        assert!(find(&m, ".status.conditions[?(@.type=='Gone')].status").is_empty());
        assert!(find(&m, ".status.missing").is_empty());
        assert!(
            find(&m, ".spec.containers[x]").is_empty(),
            "an invalid index selects nothing"
        );
    }
}
