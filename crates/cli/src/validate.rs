//! `modelplane validate`: check manifests as the API server with
//! Modelplane's CRDs would admit them, without a cluster.
//!
//! Data flow: paths → files (directories recursively) → YAML documents with
//! line numbers → `Admission::review` per document (with its previous version
//! from `--old`, if any) → one report line per problem, or one JSON report.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use modelplane_api::types::InferenceClass;
use modelplane_api::validation::yaml::{Document, parse_documents};
use modelplane_cel::dra;
use modelplane_cel::{Admission, Review};
use serde::Serialize;
use serde_json::Value;

use crate::inputs::{Input, collect_inputs};

/// Output format of `validate`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One line per problem: `FILE:LINE: Kind/name: field.path: message`.
    #[default]
    Text,
    /// One JSON report with every document and problem.
    Json,
}

/// Arguments of `modelplane validate`.
#[derive(Args, Debug)]
#[command(after_help = "\
Exit status: 0 when every Modelplane document is accepted (warnings allowed), \
1 when any is rejected, 2 when an input cannot be read or parsed.

Examples:
  modelplane validate -f examples/
  kubectl get modeldeployments -A -o yaml | modelplane validate -f -
  modelplane validate -f cluster.yaml --old cluster-before.yaml")]
pub struct ValidateArgs {
    /// Manifest files or directories (searched recursively for .yaml, .yml
    /// and .json); `-` reads standard input. Multi-document YAML and `List`s
    /// (as `kubectl get -o yaml` prints) are fine.
    #[arg(short = 'f', long = "filename", value_name = "PATH", num_args = 1.., required = true)]
    paths: Vec<String>,
    /// Previous versions of the objects (same kind, namespace and name), so
    /// that rules comparing old and new, such as the immutable
    /// `InferenceCluster.spec.stack`, are checked as on an update.
    #[arg(long, value_name = "FILE")]
    old: Vec<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

/// A problem located in a file.
#[derive(Debug, Serialize)]
struct Located {
    line: u32,
    path: String,
    message: String,
}

/// What happened to one document (or one unreadable input).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DocumentReport {
    file: String,
    line: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    /// `accepted`, `rejected`, `skipped` or `unreadable`.
    status: &'static str,
    errors: Vec<Located>,
    warnings: Vec<Located>,
}

impl DocumentReport {
    /// Whether the input could not be read or parsed.
    pub fn unreadable(&self) -> bool {
        self.status == "unreadable"
    }
}

/// Counts over every document.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    documents: usize,
    accepted: usize,
    rejected: usize,
    skipped: usize,
    unreadable: usize,
    errors: usize,
    warnings: usize,
}

impl Summary {
    /// 2 when an input could not be read or held no document at all, 1 when
    /// a document was rejected, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.unreadable > 0 || self.documents == 0 {
            2
        } else if self.rejected > 0 {
            1
        } else {
            0
        }
    }
}

/// Runs `validate`, printing the report; returns the counts.
pub fn run(args: &ValidateArgs) -> anyhow::Result<Summary> {
    let reports = check_paths(&args.paths, &args.old)?;
    let summary = summarize(&reports);
    match args.output {
        Format::Text => crate::output::emit(&text_report(&reports, &summary))?,
        Format::Json => {
            let report = serde_json::json!({ "documents": reports, "summary": summary });
            crate::output::emit(&(serde_json::to_string_pretty(&report)? + "\n"))?;
        }
    }
    Ok(summary)
}

/// Every document of every path admitted and turned into `T` by `convert`
/// (given the admitted object, or a foreign kind as written and `false`),
/// in input order — reading no line numbers, which only a report of
/// problems needs, and sharing the work among the machine's cores. `None`
/// when anything is unreadable or rejected: run [`check_paths`] for the
/// report.
pub fn admitted<T: Send>(
    paths: &[String],
    convert: impl Fn(Value, bool) -> anyhow::Result<T> + Sync,
) -> anyhow::Result<Option<Vec<T>>> {
    let mut texts = Vec::new();
    for input in collect_inputs(paths) {
        let Ok(text) = input.text else {
            return Ok(None);
        };
        texts.push(text);
    }
    let documents: Vec<(u32, &str)> = texts
        .iter()
        .flat_map(|t| modelplane_api::validation::yaml::split_documents(t))
        .collect();
    let admission = Admission::new();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = documents.len().div_ceil(workers).max(1);
    let parts: Vec<anyhow::Result<Option<Vec<T>>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = documents
            .chunks(chunk)
            .map(|part| scope.spawn(|| admit_part(&admission, part, &convert)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Ok(None)))
            .collect()
    });
    let mut out = Vec::new();
    for part in parts {
        match part? {
            Some(items) => out.extend(items),
            None => return Ok(None),
        }
    }
    Ok(Some(out))
}

fn admit_part<T>(
    admission: &Admission,
    documents: &[(u32, &str)],
    convert: &impl Fn(Value, bool) -> anyhow::Result<T>,
) -> anyhow::Result<Option<Vec<T>>> {
    let mut out = Vec::new();
    for (line, document) in documents {
        let Ok(parsed) = modelplane_api::validation::yaml::parse_value(document, *line) else {
            return Ok(None);
        };
        let Some(value) = parsed else { continue };
        let items = match (value["kind"].as_str(), value["items"].as_array()) {
            (Some(kind), Some(items)) if kind.ends_with("List") => items.clone(),
            _ => vec![value],
        };
        for item in items {
            if !item.is_object() {
                return Ok(None);
            }
            let api_version = item["apiVersion"].as_str().unwrap_or_default();
            // Foreign kinds are kept as given (a few: provider configs).
            let foreign =
                (!modelplane_api::crds::is_modelplane_group(api_version)).then(|| item.clone());
            match (admission.review(item, None), foreign) {
                (Review::Skipped { .. }, Some(item)) => out.push(convert(item, false)?),
                (Review::Checked { errors, .. }, _) if !errors.is_empty() => return Ok(None),
                (Review::Checked { object, .. }, _) => out.push(convert(object, true)?),
                (Review::Skipped { .. }, None) => return Ok(None),
            }
        }
    }
    Ok(Some(out))
}

/// Checks every document of every path; `old` files give previous versions.
pub fn check_paths(paths: &[String], old: &[PathBuf]) -> anyhow::Result<Vec<DocumentReport>> {
    let admission = Admission::new();
    let old = load_old(old)?;
    let mut checked = Vec::new();
    for input in collect_inputs(paths) {
        checked.extend(check_input(&admission, &old, input));
    }
    let declared = declared_attributes(&checked);
    Ok(checked
        .into_iter()
        .map(|(mut report, doc)| {
            if let (Some(declared), Some(doc)) = (&declared, &doc) {
                let warnings =
                    undeclared_reads(&doc.value, declared).map(|(path, message)| Located {
                        line: doc.line_of(&path),
                        path,
                        message,
                    });
                report.warnings.extend(warnings);
            }
            report
        })
        .collect())
}

/// The attributes (`domain/name`) the InferenceClasses among `checked`
/// declare; `None` when there are none, so nothing can be said of what a
/// selector reads.
fn declared_attributes(checked: &[(DocumentReport, Option<Document>)]) -> Option<BTreeSet<String>> {
    let classes: Vec<InferenceClass> = checked
        .iter()
        .filter(|(r, _)| r.kind == "InferenceClass" && r.status == "accepted")
        .filter_map(|(_, doc)| serde_json::from_value(doc.as_ref()?.value.clone()).ok())
        .collect();
    (!classes.is_empty()).then(|| {
        classes
            .iter()
            .flat_map(|c| &c.spec.devices)
            .flat_map(dra::attribute_names)
            .collect()
    })
}

/// Each device selector of a ModelDeployment that reads an attribute no
/// declared device has: its path and a warning (it can match nothing).
fn undeclared_reads<'a>(
    object: &'a Value,
    declared: &'a BTreeSet<String>,
) -> impl Iterator<Item = (String, String)> + 'a {
    let deployment = object["kind"] == "ModelDeployment";
    let engines = object["spec"]["template"]["spec"]["engines"].as_array();
    let list = |v: &'a Value| v.as_array().into_iter().flatten().enumerate();
    engines
        .filter(|_| deployment)
        .into_iter()
        .flatten()
        .enumerate()
        .flat_map(move |(e, engine)| {
            list(&engine["members"]).flat_map(move |(m, member)| {
                list(&member["nodeSelector"]["devices"]).flat_map(move |(d, device)| {
                    list(&device["selectors"]).filter_map(move |(s, selector)| {
                        let text = selector["cel"].as_str()?;
                        let read = dra::DeviceSelector::compile(text).ok()?.attributes_read();
                        let missing: Vec<String> =
                            read.into_iter().filter(|a| !declared.contains(a)).collect();
                        (!missing.is_empty()).then(|| {
                            (
                                format!("spec.template.spec.engines[{e}].members[{m}].nodeSelector.devices[{d}].selectors[{s}].cel"),
                                format!(
                                    "reads {}, which no InferenceClass given declares (they declare {}): it matches no device of theirs",
                                    missing.join(", "),
                                    declared.iter().cloned().collect::<Vec<_>>().join(", ")
                                ),
                            )
                        })
                    })
                })
            })
        })
}

/// Identity of an object for matching `--old` versions.
type ObjectKey = (String, String, String, String);

fn object_key(value: &Value) -> ObjectKey {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&value["apiVersion"]),
        s(&value["kind"]),
        s(&value["metadata"]["namespace"]),
        s(&value["metadata"]["name"]),
    )
}

fn load_old(paths: &[PathBuf]) -> anyhow::Result<HashMap<ObjectKey, Value>> {
    let mut old = HashMap::new();
    for path in paths {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading --old {}", path.display()))?;
        let docs = parse_documents(&text).map_err(|e| {
            anyhow::anyhow!(
                "{}:{}: YAML syntax error: {}",
                path.display(),
                e.line,
                e.message
            )
        })?;
        for doc in docs {
            old.insert(object_key(&doc.value), doc.value);
        }
    }
    Ok(old)
}

fn unreadable(file: &str, line: u32, message: String) -> DocumentReport {
    DocumentReport {
        file: file.to_string(),
        line,
        api_version: String::new(),
        kind: String::new(),
        name: String::new(),
        namespace: None,
        status: "unreadable",
        errors: vec![Located {
            line,
            path: String::new(),
            message,
        }],
        warnings: Vec::new(),
    }
}

/// Each document of `input`, reviewed, with the document (none when the
/// input could not be read).
fn check_input(
    admission: &Admission,
    old: &HashMap<ObjectKey, Value>,
    input: Input,
) -> Vec<(DocumentReport, Option<Document>)> {
    let text = match input.text {
        Ok(text) => text,
        Err(e) => {
            let report = unreadable(&input.name, 0, format!("cannot read: {e}"));
            return vec![(report, None)];
        }
    };
    match parse_documents(&text) {
        Ok(docs) => docs
            .into_iter()
            .flat_map(|doc| doc.list_items().unwrap_or_else(|| vec![doc]))
            .map(|doc| (check_document(admission, old, &input.name, &doc), Some(doc)))
            .collect(),
        Err(e) => {
            let message = format!("YAML syntax error: {}", e.message);
            vec![(unreadable(&input.name, e.line, message), None)]
        }
    }
}

fn check_document(
    admission: &Admission,
    old: &HashMap<ObjectKey, Value>,
    file: &str,
    doc: &Document,
) -> DocumentReport {
    let previous = old.get(&object_key(&doc.value));
    let api_version = doc.value["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if !doc.value.is_object() {
        return DocumentReport {
            kind: String::new(),
            ..unreadable(file, doc.line, "a manifest must be a YAML mapping".into())
        };
    }
    let locate = |path: String, message: String| Located {
        line: doc.line_of(&path),
        path,
        message,
    };
    match admission.review(doc.value.clone(), previous) {
        Review::Skipped { api_version, kind } => DocumentReport {
            file: file.to_string(),
            line: doc.line,
            api_version,
            kind,
            name: doc.value["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            namespace: doc.value["metadata"]["namespace"]
                .as_str()
                .map(str::to_string),
            status: "skipped",
            errors: Vec::new(),
            warnings: Vec::new(),
        },
        Review::Checked {
            kind,
            name,
            namespace,
            errors,
            warnings,
            ..
        } => DocumentReport {
            file: file.to_string(),
            line: doc.line,
            api_version,
            kind: if kind.is_empty() {
                doc.value["kind"].as_str().unwrap_or_default().to_string()
            } else {
                kind.to_string()
            },
            name,
            namespace,
            status: if errors.is_empty() {
                "accepted"
            } else {
                "rejected"
            },
            errors: errors
                .into_iter()
                .map(|p| locate(p.path, p.message))
                .collect(),
            warnings: warnings
                .into_iter()
                .map(|w| locate(w.path, w.message))
                .collect(),
        },
    }
}

fn summarize(reports: &[DocumentReport]) -> Summary {
    let mut s = Summary::default();
    for r in reports {
        match r.status {
            "accepted" => s.accepted += 1,
            "rejected" => s.rejected += 1,
            "skipped" => s.skipped += 1,
            _ => s.unreadable += 1,
        }
        s.errors += r.errors.len();
        s.warnings += r.warnings.len();
    }
    s.documents = s.accepted + s.rejected + s.skipped;
    s
}

fn text_report(reports: &[DocumentReport], summary: &Summary) -> String {
    let mut out = problems(reports, true);
    if summary.documents == 0 && summary.unreadable == 0 {
        out.push_str("error: no documents found: nothing was checked (an empty file or directory, or only comments)\n");
    }
    let _ = writeln!(
        out,
        "{} documents: {} accepted, {} rejected, {} skipped{}; {} errors, {} warnings",
        summary.documents,
        summary.accepted,
        summary.rejected,
        summary.skipped,
        if summary.unreadable > 0 {
            format!(", {} unreadable inputs", summary.unreadable)
        } else {
            String::new()
        },
        summary.errors,
        summary.warnings
    );
    out
}

/// Prints one line per problem (and per skipped document when `skipped`).
pub fn print_problems(reports: &[DocumentReport], skipped: bool) -> anyhow::Result<()> {
    crate::output::emit(&problems(reports, skipped))
}

/// One line per problem (and per skipped document when `skipped`).
fn problems(reports: &[DocumentReport], skipped: bool) -> String {
    let mut out = String::new();
    for r in reports {
        let object = format!("{}/{}", r.kind, r.name);
        let field = |p: &Located| {
            if p.path.is_empty() {
                String::new()
            } else {
                format!("{}: ", p.path)
            }
        };
        match r.status {
            "unreadable" => {
                for e in &r.errors {
                    let _ = writeln!(out, "{}:{}: {}", r.file, e.line, e.message);
                }
            }
            "skipped" if !skipped => {}
            "skipped" => {
                let _ = writeln!(
                    out,
                    "{}:{}: {object}: skipped: {} is not a Modelplane kind",
                    r.file, r.line, r.api_version
                );
            }
            _ => {
                for e in &r.errors {
                    let _ = writeln!(
                        out,
                        "{}:{}: {object}: {}{}",
                        r.file,
                        e.line,
                        field(e),
                        e.message
                    );
                }
                for w in &r.warnings {
                    let _ = writeln!(
                        out,
                        "{}:{}: {object}: {}warning: {}",
                        r.file,
                        w.line,
                        field(w),
                        w.message
                    );
                }
            }
        }
    }
    out
}
