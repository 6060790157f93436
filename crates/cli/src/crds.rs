//! `modelplane crds`: the CustomResourceDefinitions, ready for `kubectl apply -f -`.

use std::io::Write;

use anyhow::Context;
use clap::{Args, ValueEnum};

/// Output format of `crds`.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum Format {
    /// Multi-document YAML.
    #[default]
    Yaml,
    /// A JSON `List`.
    Json,
}

/// Arguments of `modelplane crds`.
#[derive(Args, Debug)]
pub struct CrdsArgs {
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Yaml)]
    output: Format,
}

/// Prints the CRDs.
pub fn run(args: &CrdsArgs) -> anyhow::Result<()> {
    let text = match args.output {
        Format::Yaml => {
            modelplane_api::crds::render_yaml().context("serializing the CRDs to YAML")?
        }
        Format::Json => {
            let list = serde_json::json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": modelplane_api::crds::all_crds(),
            });
            serde_json::to_string_pretty(&list)? + "\n"
        }
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .context("writing to stdout")
}
