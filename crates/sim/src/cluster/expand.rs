//! The kubelet's `$(VAR)` expansion of a container's env, command and args,
//! as Kubernetes does it (`third_party/forked/golang/expansion`):
//!
//! - `$(NAME)` becomes NAME's value when NAME is defined, and stays as
//!   written when it is not;
//! - `$$` is an escaped `$`: `$$(NAME)` becomes the text `$(NAME)`;
//! - any other `$`, and an unclosed `$(`, stay as written;
//! - env values see only the variables defined before them, in order (a
//!   later entry of the same name replaces the earlier one); command and
//!   args see every variable of the container.
//!
//! `valueFrom.fieldRef` values are read from the pod and are not expanded.

use std::collections::HashMap;

use serde_json::Value;

/// Expands `$(…)` references in `input` from `lookup`.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut literal_from = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' || i + 1 >= bytes.len() {
            i += 1;
            continue;
        }
        out.push_str(&input[literal_from..i]);
        match bytes[i + 1] {
            b'$' => {
                out.push('$');
                i += 2;
            }
            b'(' => match input[i + 2..].find(')') {
                Some(len) => {
                    let name = &input[i + 2..i + 2 + len];
                    match lookup(name) {
                        Some(value) => out.push_str(&value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    i += len + 3;
                }
                None => {
                    out.push_str(&input[i..]);
                    i = bytes.len();
                }
            },
            _ => {
                out.push('$');
                i += 1;
            }
        }
        literal_from = i;
    }
    if literal_from < bytes.len() {
        out.push_str(&input[literal_from..]);
    }
    out
}

/// The value `fieldRef.fieldPath` reads from `pod`, as the downward API
/// gives it (`metadata.labels['key']`, `status.podIP`…).
pub fn field_ref(pod: &Value, path: &str) -> Option<String> {
    let keyed = |prefix: &str, map: &str| -> Option<Option<String>> {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(pod["metadata"][map][key].as_str().map(str::to_string))
    };
    if let Some(v) = keyed("metadata.labels['", "labels") {
        return Some(v.unwrap_or_default());
    }
    if let Some(v) = keyed("metadata.annotations['", "annotations") {
        return Some(v.unwrap_or_default());
    }
    let value = match path {
        "metadata.name" => &pod["metadata"]["name"],
        "metadata.namespace" => &pod["metadata"]["namespace"],
        "metadata.uid" => &pod["metadata"]["uid"],
        "spec.nodeName" => &pod["spec"]["nodeName"],
        "spec.serviceAccountName" => &pod["spec"]["serviceAccountName"],
        "status.hostIP" => &pod["status"]["hostIP"],
        "status.podIP" => &pod["status"]["podIP"],
        _ => return None,
    };
    Some(value.as_str().unwrap_or_default().to_string())
}

/// A container's environment after expansion, in order, and the map
/// command and args are expanded from.
pub fn environment(
    pod: &Value,
    container: &Value,
) -> (Vec<(String, String)>, HashMap<String, String>) {
    let mut ordered: Vec<(String, String)> = Vec::new();
    let mut defined: HashMap<String, String> = HashMap::new();
    for entry in container["env"].as_array().into_iter().flatten() {
        let Some(name) = entry["name"].as_str() else {
            continue;
        };
        let value = if let Some(raw) = entry["value"].as_str() {
            expand(raw, &|n| defined.get(n).cloned())
        } else if let Some(path) = entry["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            field_ref(pod, path).unwrap_or_default()
        } else {
            String::new()
        };
        ordered.retain(|(n, _)| n != name);
        ordered.push((name.to_string(), value.clone()));
        defined.insert(name.to_string(), value);
    }
    (ordered, defined)
}

/// `command` and `args` of a container, expanded from its environment.
pub fn command_line(
    container: &Value,
    env: &HashMap<String, String>,
) -> (Vec<String>, Vec<String>) {
    let expand_all = |list: &Value| -> Vec<String> {
        list.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|s| expand(s, &|n| env.get(n).cloned()))
            .collect()
    };
    (
        expand_all(&container["command"]),
        expand_all(&container["args"]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |n| map.get(n).cloned()
    }

    #[test]
    fn a_defined_variable_is_replaced() {
        assert_eq!(
            expand("--rank=$(RANK)", &with(&[("RANK", "1")])),
            "--rank=1"
        );
        assert_eq!(expand("$(A)$(B)", &with(&[("A", "x"), ("B", "y")])), "xy");
    }

    #[test]
    fn an_unknown_variable_is_left_as_written() {
        assert_eq!(expand("--addr=$(LEADER)", &with(&[])), "--addr=$(LEADER)");
    }

    #[test]
    fn a_double_dollar_escapes() {
        assert_eq!(expand("$$(RANK)", &with(&[("RANK", "1")])), "$(RANK)");
        assert_eq!(expand("cost $$5", &with(&[])), "cost $5");
        assert_eq!(expand("$$$(RANK)", &with(&[("RANK", "1")])), "$1");
    }

    #[test]
    fn a_lone_or_unclosed_dollar_stays() {
        assert_eq!(expand("$HOME and $", &with(&[])), "$HOME and $");
        assert_eq!(
            expand("x $(UNCLOSED", &with(&[("UNCLOSED", "no")])),
            "x $(UNCLOSED"
        );
        assert_eq!(expand("$()", &with(&[])), "$()");
    }

    /// Env values see only earlier entries: a reference to a later one is
    /// not expanded (why Grove's appended variables cannot be referenced).
    #[test]
    fn env_order_matters_for_env_values() {
        let pod = json!({ "metadata": { "name": "p", "labels": { "idx": "3" } } });
        let container = json!({ "env": [
            { "name": "EARLY", "value": "$(LATE)-x" },
            { "name": "LATE", "value": "late" },
            { "name": "AFTER", "value": "$(LATE)-y" },
            { "name": "INDEX", "valueFrom": { "fieldRef": { "fieldPath": "metadata.labels['idx']" } } },
            { "name": "FROM_FIELD", "value": "i=$(INDEX)" },
        ] });
        let (ordered, map) = environment(&pod, &container);
        assert_eq!(map["EARLY"], "$(LATE)-x");
        assert_eq!(map["AFTER"], "late-y");
        assert_eq!(map["INDEX"], "3");
        assert_eq!(map["FROM_FIELD"], "i=3");
        assert_eq!(ordered[0].0, "EARLY");
        // Command and args see every variable, whatever its place.
        let c = json!({ "command": ["sh", "-c"], "args": ["echo $(EARLY) $(LATE) $(NOPE)"] });
        let (command, args) = command_line(&c, &map);
        assert_eq!(command, vec!["sh", "-c"]);
        assert_eq!(args, vec!["echo $(LATE)-x late $(NOPE)"]);
    }

    #[test]
    fn a_later_entry_of_the_same_name_replaces_the_earlier() {
        let container = json!({ "env": [
            { "name": "A", "value": "1" }, { "name": "B", "value": "$(A)" }, { "name": "A", "value": "2" },
        ] });
        let (ordered, map) = environment(&json!({}), &container);
        assert_eq!(map["A"], "2");
        assert_eq!(map["B"], "1");
        assert_eq!(
            ordered.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            vec!["B", "A"]
        );
    }
}
