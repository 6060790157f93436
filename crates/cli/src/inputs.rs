//! Reading manifests: files, directories (recursively) and standard input.

use std::io::Read;
use std::path::{Path, PathBuf};

/// One input: a display name and its text, or why it could not be read.
pub struct Input {
    /// Display name: the path as given, or `<stdin>`.
    pub name: String,
    /// The text, or why it could not be read.
    pub text: Result<String, String>,
}

/// Reads every path; directories are searched for .yaml, .yml and .json.
pub fn collect_inputs(paths: &[String]) -> Vec<Input> {
    let mut inputs = Vec::new();
    for path in paths {
        if path == "-" {
            let mut text = String::new();
            let read = std::io::stdin()
                .read_to_string(&mut text)
                .map(|_| text)
                .map_err(|e| e.to_string());
            inputs.push(Input {
                name: "<stdin>".into(),
                text: read,
            });
            continue;
        }
        let p = Path::new(path);
        if p.is_dir() {
            let mut files = Vec::new();
            walk_dir(p, &mut files);
            files.sort();
            inputs.extend(files.into_iter().map(|f| Input {
                name: f.display().to_string(),
                text: std::fs::read_to_string(&f).map_err(|e| e.to_string()),
            }));
        } else {
            inputs.push(Input {
                name: path.clone(),
                text: std::fs::read_to_string(p).map_err(|e| e.to_string()),
            });
        }
    }
    inputs
}

fn walk_dir(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        files.push(dir.to_path_buf());
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk_dir(&path, files);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            files.push(path);
        }
    }
}
