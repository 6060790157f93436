//! Multi-document YAML with the line of every field, so a problem can point
//! at where it is written.
//!
//! Data flow: serde-saphyr (the YAML crate kube-rs uses) deserializes each
//! document into a tree of [`Spanned`] nodes; [`Document`] flattens that into
//! the JSON value the validators work on plus a map from field path
//! (`spec.engines[0].name`) to its line.

use std::collections::HashMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use serde_saphyr::Spanned;

use super::structural::join;

/// One YAML document: its JSON value and where each field starts.
#[derive(Clone, Debug)]
pub struct Document {
    /// 1-based line of the document's first node.
    pub line: u32,
    /// The document as JSON.
    pub value: Value,
    lines: HashMap<String, u32>,
}

impl Document {
    /// The line where the field at `path` starts; falls back to the nearest
    /// enclosing field that was written, then to the document's first line.
    pub fn line_of(&self, path: &str) -> u32 {
        let mut path = path;
        loop {
            if let Some(line) = self.lines.get(path) {
                return *line;
            }
            match parent(path) {
                Some(p) => path = p,
                None => return self.line,
            }
        }
    }
}

impl Document {
    /// The objects of a `List` (as `kubectl get -o yaml` prints), each with
    /// its own lines; `None` for any other document.
    pub fn list_items(&self) -> Option<Vec<Document>> {
        let kind = self.value.get("kind")?.as_str()?;
        let items = self.value.get("items")?.as_array()?;
        if !kind.ends_with("List") {
            return None;
        }
        Some(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let prefix = format!("items[{i}]");
                    let lines = self
                        .lines
                        .iter()
                        .filter_map(|(path, line)| {
                            let rest = path.strip_prefix(&prefix)?;
                            let rest = rest.strip_prefix('.').unwrap_or(rest);
                            (rest.is_empty() || !rest.starts_with('['))
                                .then(|| (rest.to_string(), *line))
                        })
                        .filter(|(rest, _)| !rest.is_empty())
                        .collect();
                    Document {
                        line: self.line_of(&prefix),
                        value: item.clone(),
                        lines,
                    }
                })
                .collect(),
        )
    }
}

fn parent(path: &str) -> Option<&str> {
    let cut = path.rfind(['.', '['])?;
    Some(&path[..cut])
}

/// A YAML syntax error, with its position.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    /// 1-based line of the error, 0 when unknown.
    pub line: u32,
    /// What the parser said.
    pub message: String,
}

/// Nodes one document may hold: far more than the largest real manifests
/// (a CustomResourceDefinition with a full pod template is about 100,000),
/// few enough that a hostile document cannot exhaust memory. Counted per
/// document, so a fleet of any number of documents loads.
pub const MAX_NODES_PER_DOCUMENT: usize = 2_000_000;

/// Parses every document of a YAML stream; empty documents are skipped.
/// Limits apply to each document, not to the stream.
pub fn parse_documents(text: &str) -> Result<Vec<Document>, YamlError> {
    let mut reader = text.as_bytes();
    let mut documents = Vec::new();
    for node in serde_saphyr::read_with_options::<_, Option<Spanned<Node>>>(&mut reader, options())
    {
        let node = node.map_err(|e| YamlError {
            line: e.location().map(|l| l.line() as u32).unwrap_or(0),
            message: plain_words(&first_line_of(&e.to_string())),
        })?;
        let Some(node) = node.filter(|n| !matches!(n.value, Node::Null)) else {
            continue;
        };
        let mut lines = HashMap::new();
        let line = node.referenced.line() as u32;
        let value = flatten(node, String::new(), &mut lines);
        documents.push(Document { line, value, lines });
    }
    Ok(documents)
}

/// Parses every document of a YAML stream into values only, without the
/// line of each field: several times faster than [`parse_documents`], for
/// readers that need lines only when something is wrong (and then parse
/// again with them). Same limits, same skipping of empty documents.
pub fn parse_values(text: &str) -> Result<Vec<Value>, YamlError> {
    let mut values = Vec::new();
    for (first_line, document) in split_documents(text) {
        values.extend(parse_value(document, first_line)?);
    }
    Ok(values)
}

/// One document of [`split_documents`] as a value (`None` when empty),
/// without lines; errors name the line in the whole stream.
pub fn parse_value(document: &str, first_line: u32) -> Result<Option<Value>, YamlError> {
    let value: Option<Value> =
        serde_saphyr::from_str_with_options(document, options()).map_err(|e| YamlError {
            line: e
                .location()
                .map(|l| l.line() as u32 + first_line - 1)
                .unwrap_or(0),
            message: plain_words(&first_line_of(&e.to_string())),
        })?;
    Ok(value.filter(|v| !v.is_null()))
}

/// The documents of a stream and the 1-based line each starts on, split at
/// the `---` markers. A line starting with `---` and then a space or its
/// end is always a marker (YAML forbids it inside any scalar), so no
/// document is cut in two.
pub fn split_documents(text: &str) -> Vec<(u32, &str)> {
    let mut documents = Vec::new();
    let (mut start, mut start_line, mut line) = (0usize, 1u32, 1u32);
    let mut offset = 0usize;
    for raw in text.split_inclusive('\n') {
        let content = raw.trim_end_matches(['\n', '\r']);
        let marker =
            content == "---" || content.starts_with("--- ") || content.starts_with("---\t");
        if marker && offset > start {
            documents.push((start_line, &text[start..offset]));
        }
        if marker {
            start = offset;
            start_line = line;
        }
        offset += raw.len();
        line += 1;
    }
    if offset > start {
        documents.push((start_line, &text[start..]));
    }
    documents
}

/// The parser's limits, per document (see [`MAX_NODES_PER_DOCUMENT`]).
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: MAX_NODES_PER_DOCUMENT,
            max_events: 4 * MAX_NODES_PER_DOCUMENT,
            // The text is in memory already; its size was the caller's choice.
            max_reader_input_bytes: None,
            max_total_scalar_bytes: 1 << 30,
        },
    }
}

/// The parser's report, without its internals: what a user can act on.
fn plain_words(message: &str) -> String {
    if let Some(key) = message
        .strip_prefix("duplicate mapping key: ")
        .and_then(|m| m.strip_suffix(", set DuplicateKeyPolicy in Options if acceptable"))
    {
        return format!("the key {key} appears twice in one mapping");
    }
    if message.starts_with("duplicate mapping key") {
        return "a key appears twice in one mapping".into();
    }
    if let Some(breach) = message.strip_prefix("budget breached: ") {
        let what = match breach.split_whitespace().next().unwrap_or_default() {
            "Nodes" => format!("more than {MAX_NODES_PER_DOCUMENT} YAML nodes"),
            "Depth" => "nesting deeper than YAML allows here".to_string(),
            "Aliases" | "Anchors" => "too many anchors or aliases".to_string(),
            _ => "more than a manifest may hold".to_string(),
        };
        return format!("the document is too large to read: it has {what}");
    }
    message.to_string()
}

fn first_line_of(report: &str) -> String {
    let line = report.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

fn flatten(node: Spanned<Node>, path: String, lines: &mut HashMap<String, u32>) -> Value {
    if !path.is_empty() {
        lines.insert(path.clone(), node.referenced.line() as u32);
    }
    match node.value {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(b),
        Node::Number(n) => Value::Number(n),
        Node::String(s) => Value::String(s),
        Node::Seq(items) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| flatten(item, format!("{path}[{i}]"), lines))
                .collect(),
        ),
        Node::Map(entries) => {
            let mut map = Map::new();
            for (key, value) in entries {
                let child = join(&path, &key.value);
                let v = flatten(value, child.clone(), lines);
                // The key's line is where the field starts.
                lines.insert(child, key.referenced.line() as u32);
                map.insert(key.value, v);
            }
            Value::Object(map)
        }
    }
}

/// A YAML node whose children keep their positions.
#[derive(Debug)]
enum Node {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Seq(Vec<Spanned<Node>>),
    Map(Vec<(Spanned<String>, Spanned<Node>)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Number::from_f64(v)
            .map(Node::Number)
            .ok_or_else(|| E::custom(format!("{v} cannot be represented in JSON")))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        // Keys are read as text, so `n:` or `on:` stay names, not YAML 1.1 booleans.
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            let value = map.next_value::<Spanned<Node>>()?;
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_keep_the_line_of_every_field() {
        let text = "# comment\napiVersion: v1\nkind: A\nspec:\n  items:\n  - name: x\n    n: 1\n---\n---\nkind: B\n";
        let docs = parse_documents(text).expect("valid YAML");
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].line, 2);
        assert_eq!(docs[0].line_of("spec"), 4);
        assert_eq!(docs[0].line_of("spec.items[0].n"), 7);
        assert_eq!(docs[0].line_of("spec.items[0]"), 6);
        assert_eq!(docs[0].line_of("spec.items[0].missing"), 6);
        assert_eq!(docs[1].line, 10);
        assert_eq!(docs[0].value["spec"]["items"][0]["n"], 1);
    }

    #[test]
    fn list_items_become_documents_with_their_own_lines() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- kind: A\n  spec:\n    n: 1\n- kind: B\n";
        let docs = parse_documents(text).expect("valid YAML");
        let items = docs[0].list_items().expect("a List");
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].line, 4);
        assert_eq!(items[0].line_of("spec.n"), 6);
        assert_eq!(items[1].line, 7);
        assert_eq!(items[1].value["kind"], "B");
        assert!(items[0].list_items().is_none());
    }

    #[test]
    fn syntax_errors_carry_a_line() {
        let err = parse_documents("a: 1\nb: [\n").expect_err("unterminated flow sequence");
        assert!(err.line >= 2, "line {}", err.line);
    }

    #[test]
    fn a_stream_of_many_documents_loads_and_limits_apply_per_document() {
        let text: String = (0..3000)
            .map(|i| format!("kind: A\nmetadata:\n  name: a{i}\n---\n"))
            .collect();
        let docs = parse_documents(&text).expect("3,000 documents");
        assert_eq!(docs.len(), 3000);
        assert_eq!(docs[2999].line, 3 * 4 * 1000 - 3);
    }

    #[test]
    fn parser_internals_stay_out_of_messages() {
        let err = parse_documents("a: 1\na: 2\n").expect_err("duplicate key");
        assert!(
            !err.message.contains("DuplicateKeyPolicy"),
            "{}",
            err.message
        );
        assert!(err.message.contains("appears twice"), "{}", err.message);
    }
}
