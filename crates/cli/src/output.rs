//! Writing results to standard output.

use std::io::Write;

/// Writes `text` to stdout; a reader that went away (`| head`) is not an error.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    ignore_broken_pipe(out.write_all(text.as_bytes()).and_then(|()| out.flush()))
}

/// A write result where a reader that went away is not an error.
pub fn ignore_broken_pipe(result: std::io::Result<()>) -> anyhow::Result<()> {
    match result {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// Writes a JSON value as block-style YAML. Strings that YAML could read as
/// something else (numbers, booleans, null, indicators, leading or trailing
/// spaces) are double-quoted with JSON escapes, which YAML reads the same;
/// multi-line strings are literal blocks. Much faster than a general YAML
/// serializer for the large outputs of `render`.
pub fn to_yaml(value: &serde_json::Value) -> String {
    let mut out = String::new();
    match value {
        serde_json::Value::Object(map) if !map.is_empty() => write_map(&mut out, map, 0, false),
        serde_json::Value::Array(items) if !items.is_empty() => write_seq(&mut out, items, 0),
        scalar => {
            out.push_str(&scalar_text(scalar, 0));
            out.push('\n');
        }
    }
    out
}

fn indent(out: &mut String, n: usize) {
    for _ in 0..n {
        out.push(' ');
    }
}

/// `inline_first`: the first key follows a `- ` already written.
fn write_map(
    out: &mut String,
    map: &serde_json::Map<String, serde_json::Value>,
    depth: usize,
    inline_first: bool,
) {
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 || !inline_first {
            indent(out, depth);
        }
        out.push_str(&plain_or_quoted(key));
        out.push(':');
        write_value(out, value, depth);
    }
}

fn write_seq(out: &mut String, items: &[serde_json::Value], depth: usize) {
    for item in items {
        indent(out, depth);
        out.push_str("- ");
        match item {
            serde_json::Value::Object(map) if !map.is_empty() => {
                write_map(out, map, depth + 2, true)
            }
            serde_json::Value::Array(inner) if !inner.is_empty() => {
                out.push('\n');
                write_seq(out, inner, depth + 2);
            }
            scalar => {
                out.push_str(&scalar_text(scalar, depth + 2));
                out.push('\n');
            }
        }
    }
}

fn write_value(out: &mut String, value: &serde_json::Value, depth: usize) {
    match value {
        serde_json::Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            write_map(out, map, depth + 2, false);
        }
        serde_json::Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_seq(out, items, depth);
        }
        scalar => {
            out.push(' ');
            out.push_str(&scalar_text(scalar, depth + 2));
            out.push('\n');
        }
    }
}

fn scalar_text(value: &serde_json::Value, depth: usize) -> String {
    match value {
        serde_json::Value::String(s) if s.contains('\n') && literal_block_safe(s) => {
            let chomp = if s.ends_with("\n\n") {
                "+"
            } else if s.ends_with('\n') {
                ""
            } else {
                "-"
            };
            let mut text = format!("|{chomp}");
            for line in s.strip_suffix('\n').unwrap_or(s).split('\n') {
                text.push('\n');
                if !line.is_empty() {
                    text.push_str(&" ".repeat(depth));
                    text.push_str(line);
                }
            }
            text
        }
        serde_json::Value::String(s) => plain_or_quoted(s),
        serde_json::Value::Object(_) => "{}".into(),
        serde_json::Value::Array(_) => "[]".into(),
        other => other.to_string(),
    }
}

/// A literal block keeps every character except where YAML would not:
/// trailing spaces on a line, a first line starting with a space, tabs.
fn literal_block_safe(s: &str) -> bool {
    !s.starts_with([' ', '\n'])
        && !s.contains('\t')
        && !s.contains('\r')
        && s.split('\n').all(|line| !line.ends_with(' '))
}

/// The string as a plain scalar when YAML reads it back as this string,
/// else double-quoted.
fn plain_or_quoted(s: &str) -> String {
    let safe_chars = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._/-+=@()$,\"'[]{}:<>!&*#?|%`~^;\\ ".contains(c));
    let mut chars = s.chars();
    let first_ok = match (chars.next(), chars.next()) {
        // `-x` is a plain scalar; `- x` and `---` are not.
        (Some('-'), Some(second)) => second != ' ' && !s.starts_with("---"),
        (Some(c), _) => c.is_ascii_alphanumeric() || "._/$(".contains(c),
        (None, _) => false,
    };
    let ambiguous = matches!(
        s.to_ascii_lowercase().as_str(),
        "true"
            | "false"
            | "yes"
            | "no"
            | "on"
            | "off"
            | "y"
            | "n"
            | "null"
            | "~"
            | ".inf"
            | ".nan"
            | "-.inf"
    ) || s.parse::<f64>().is_ok()
        || s.starts_with("0x")
        || s.starts_with("0o")
        || yaml_1_1_implicit(s);
    let indicators = s.contains(": ")
        || s.contains(" #")
        || s.ends_with(':')
        || s.ends_with(' ')
        || s.contains([
            '{', '}', '[', ']', ',', '"', '\'', '`', '|', '>', '&', '*', '!', '%', '@', '\\',
        ]);
    if !s.is_empty() && safe_chars && first_ok && !ambiguous && !indicators {
        s.to_string()
    } else {
        serde_json::Value::String(s.to_string()).to_string()
    }
}

/// Whether YAML 1.1 — what kubectl (go-yaml) and PyYAML read — would take
/// the plain scalar `s` as something other than a string: its ints (`0b1`,
/// `017`, `1_000`, `+12`, sexagesimal `1:30`), floats (`1_0.5`, `+.inf`,
/// `.NaN`), timestamps (`2001-12-14`), the merge key `<<` and the value
/// key `=`. The booleans and nulls are checked by the caller.
fn yaml_1_1_implicit(s: &str) -> bool {
    static PATTERNS: std::sync::LazyLock<regex::RegexSet> = std::sync::LazyLock::new(|| {
        regex::RegexSet::new([
            r"^[-+]?0b[0-1_]+$",
            r"^[-+]?0[0-7_]+$",
            r"^[-+]?(0|[1-9][0-9_]*)$",
            r"^[-+]?0x[0-9a-fA-F_]+$",
            r"^[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+$",
            r"^[-+]?([0-9][0-9_]*)?\.[0-9_]*([eE][-+]?[0-9]+)?$",
            r"^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]*$",
            r"^[-+]?\.(inf|Inf|INF)$",
            r"^\.(nan|NaN|NAN)$",
            r"^[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?([Tt]|[ \t]+|$)",
            r"^(<<|=)$",
        ])
        .expect("valid patterns")
    });
    PATTERNS.is_match(s)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn yaml_reads_back_as_the_same_value() {
        let value = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": { "name": "x", "labels": { "a.b/c": "true", "n": "8000", "e": "" } },
            "data": {
                "config.yaml": "plugins:\n- type: a\n  parameters:\n    n: 1\n",
                "no-newline": "line one\nline two",
                "odd": " leading space\nand more",
                "cel": "device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"40Gi\")) >= 0",
                "colon": "a: b",
                "hash": "a #b",
            },
            "list": [1, 2.5, true, null, "x", [], {}, ["nested"], { "k": "v", "w": ["y"] }],
            "empty": {},
            "env": [{ "name": "A", "value": "$(LWS_LEADER_ADDRESS)" }],
            "args": ["--model=/mnt/models", "--port", "8000", "-c", "exec vllm serve", "-", "---", "- x", "-1", "-.5"],
        });
        let text = to_yaml(&value);
        let back = modelplane_api::validation::yaml::parse_documents(&text).expect("valid YAML");
        assert_eq!(back[0].value, value, "{text}");
    }

    #[test]
    fn yaml_1_1_numbers_booleans_and_dates_are_quoted() {
        for s in [
            "1_000",
            "0b1",
            "017",
            "+12",
            "1:30",
            "1_0.5",
            "+.inf",
            ".NaN",
            "2001-12-14",
            "<<",
            "=",
            "Yes",
            "OFF",
            "y",
            "~",
            "1e3",
            "0o17",
            "-.5",
        ] {
            assert!(
                plain_or_quoted(s).starts_with('"'),
                "{s} must be quoted: {}",
                plain_or_quoted(s)
            );
        }
        for s in [
            "v0.23.0",
            "qwen3-8b",
            "81559Mi",
            "gpu.nvidia.com",
            "a1_0",
            "1x",
        ] {
            assert_eq!(plain_or_quoted(s), s, "{s} stays plain");
        }
    }

    /// What YAML 1.1 (PyYAML, the parser family kubectl's go-yaml follows)
    /// reads `text` as, as JSON; panics with a clear message when PyYAML is
    /// missing (`.ci/run` installs it).
    fn yaml_1_1_reading(text: &str) -> serde_json::Value {
        use std::io::Write as _;
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import sys, json, yaml; print(json.dumps(yaml.safe_load(sys.stdin.read())))",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write");
        let out = child.wait_with_output().expect("python3 finishes");
        assert!(
            out.status.success(),
            "PyYAML (pip install pyyaml) could not read the YAML: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON from python")
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]
        #[test]
        fn strings_read_back_identically_in_yaml_1_1(
            values in proptest::collection::vec(
                proptest::prop_oneof![
                    "[-+.:_0-9eExXbBoO<=~ ]{0,10}",
                    "[a-zA-Z0-9 .:/_#-]{0,12}",
                    proptest::sample::select(vec![
                        "yes", "No", "ON", "off", "y", "N", "null", "NULL", "~", "<<", "=",
                        ".inf", "+.inf", "-.Inf", ".NaN", "1_000", "0b101", "017", "0o17", "0x1F",
                        "1:30", "190:20:30.15", "2001-12-14", "2001-12-14t21:59:43.10-05:00",
                        "1e3", "6.8523015e+5", "-.5", "+12", "- x", "---", "a: b", "a #b", "",
                    ]).prop_map(str::to_string),
                ],
                1..60,
            )
        ) {
            let data: serde_json::Map<String, serde_json::Value> = values
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("k{i}"), json!(v)))
                .collect();
            let value = json!({ "data": data });
            let text = to_yaml(&value);
            proptest::prop_assert_eq!(yaml_1_1_reading(&text), value, "{}", text);
        }
    }
}
