//! What a container's command line starts: the image's entrypoint, a
//! `sh -c` script as a POSIX shell runs it, then the engine's own argument
//! parsing — `vllm serve MODEL --flag=…` (argparse) and SGLang's
//! `python3 -m sglang.launch_server …`. A command the engine would reject
//! crashes with the engine's error, as the engine would print it. Pure.

use std::collections::HashMap;

/// Which engine a container runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// vLLM.
    Vllm,
    /// SGLang.
    Sglang,
}

/// What an engine process was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The engine.
    pub engine: Engine,
    /// The model path or Hugging Face repository.
    pub model: String,
    /// Names it answers to (`--served-model-name`, else the model).
    pub served_names: Vec<String>,
    /// The HTTP port (rank 0 only; `None` for a headless rank).
    pub port: Option<u16>,
    /// Nodes the engine spans.
    pub nnodes: u32,
    /// This node's rank.
    pub node_rank: u32,
    /// Where ranks above 0 reach rank 0 (`host` or `host:port`).
    pub master_addr: Option<String>,
    /// GPUs the engine uses across every node (tensor × pipeline × data parallel).
    pub world_size: u32,
    /// `--load-format` (vLLM): `modelexpress` or `mx` loads through ModelExpress.
    pub load_format: Option<String>,
}

/// A process that exited: its exit code and what it printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// Exit code.
    pub code: i32,
    /// Its log.
    pub log: String,
}

/// What a container does when started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Process {
    /// An engine.
    Engine(Launch),
    /// Hydration of a model cache: copies the model, then exits 0.
    Download {
        /// The Hugging Face repository.
        repo: String,
    },
    /// Anything else: runs until stopped (an endpoint picker, a sidecar).
    Service,
    /// Exits at once.
    Exits(Exit),
}

/// The entrypoint an image runs when the container sets no command.
fn entrypoint(image: &str) -> Option<Vec<String>> {
    let repo = image.split(['@', ':']).next().unwrap_or(image);
    let name = repo.rsplit('/').next().unwrap_or(repo);
    match name {
        "vllm-openai" => Some(vec!["vllm".into(), "serve".into()]),
        "vllm-runtime" | "sglang-runtime" => None,
        _ => None,
    }
}

/// Words of a shell command, as `sh` splits them: quotes group, `\` escapes.
fn words(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = script.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    word.push(n);
                    in_word = true;
                }
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

/// A shell's expansion of `script`: `$VAR` and `${VAR}` from `env` (empty
/// when unset), and `$(…)` as a command substitution — the command runs
/// and, not being found, prints `sh: 1: NAME: not found` and gives nothing.
fn shell_expand(script: &str, env: &HashMap<String, String>, log: &mut String) -> String {
    let mut out = String::new();
    let mut rest = script;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(inner) = after.strip_prefix('(') {
            let end = inner.find(')').unwrap_or(inner.len());
            let command = inner[..end].trim();
            let name = command.split_whitespace().next().unwrap_or_default();
            log.push_str(&format!("sh: 1: {name}: not found\n"));
            rest = inner.get(end + 1..).unwrap_or_default();
        } else if let Some(inner) = after.strip_prefix('{') {
            let end = inner.find('}').unwrap_or(inner.len());
            out.push_str(env.get(&inner[..end]).map_or("", String::as_str));
            rest = inner.get(end + 1..).unwrap_or_default();
        } else {
            let len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            if len == 0 {
                out.push('$');
            } else {
                out.push_str(env.get(&after[..len]).map_or("", String::as_str));
            }
            rest = &after[len..];
        }
    }
    out.push_str(rest);
    out
}

/// The argv a container execs, from its image, command and args (already
/// `$(VAR)`-expanded by the kubelet), running `sh -c` scripts as a shell would.
pub fn argv(
    image: &str,
    command: &[String],
    args: &[String],
    env: &HashMap<String, String>,
    log: &mut String,
) -> Vec<String> {
    let mut argv: Vec<String> = if command.is_empty() {
        entrypoint(image).unwrap_or_default()
    } else {
        command.to_vec()
    };
    argv.extend(args.iter().cloned());
    let is_shell = argv
        .first()
        .is_some_and(|a| matches!(a.as_str(), "sh" | "/bin/sh" | "bash" | "/bin/bash"));
    if is_shell && argv.get(1).map(String::as_str) == Some("-c") {
        let script = argv.get(2).cloned().unwrap_or_default();
        let expanded = shell_expand(&script, env, log);
        // The command that does the work (an engine, a download) is what
        // the container is about; other lines (`set -e`, `pip install`,
        // `touch`) are the script's plumbing. Else its last command.
        let commands: Vec<Vec<String>> = expanded
            .split(['\n', ';'])
            .flat_map(|part| part.split("&&"))
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                let mut w = words(p);
                if w.first().map(String::as_str) == Some("exec") {
                    w.remove(0);
                }
                w
            })
            .collect();
        let working = commands
            .iter()
            .find(|c| !matches!(process(c, String::new()), Process::Service))
            .or(commands.last())
            .cloned()
            .unwrap_or_default();
        let words = working;
        return words;
    }
    argv
}

/// Options of an argparse command line: `--flag=value`, `--flag value`,
/// and the positionals; `booleans` take no value.
fn options(rest: &[String], booleans: &[&str]) -> (HashMap<String, String>, Vec<String>) {
    let mut flags = HashMap::new();
    let mut positional = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let arg = &rest[i];
        if let Some(flag) = arg.strip_prefix("--") {
            match flag.split_once('=') {
                Some((name, value)) => {
                    flags.insert(name.to_string(), value.to_string());
                }
                None if booleans.contains(&flag) => {
                    flags.insert(flag.to_string(), "true".into());
                }
                None => {
                    let value = rest.get(i + 1).cloned().unwrap_or_default();
                    flags.insert(flag.to_string(), value);
                    i += 1;
                }
            }
        } else {
            positional.push(arg.clone());
        }
        i += 1;
    }
    (flags, positional)
}

const VLLM_BOOLEANS: &[&str] = &[
    "headless",
    "trust-remote-code",
    "enforce-eager",
    "enable-prefix-caching",
    "no-enable-prefix-caching",
    "enable-chunked-prefill",
    "enable-expert-parallel",
    "disable-log-requests",
    "enable-auto-tool-choice",
    "disable-custom-all-reduce",
];

const VLLM_INTEGERS: &[&str] = &[
    "port",
    "tensor-parallel-size",
    "pipeline-parallel-size",
    "data-parallel-size",
    "data-parallel-size-local",
    "nnodes",
    "node-rank",
    "master-port",
    "max-model-len",
    "max-num-seqs",
];

fn usage_error(program: &str, usage: &str, message: &str) -> Process {
    Process::Exits(Exit {
        code: 2,
        log: format!("usage: {usage}\n{program}: error: {message}\n"),
    })
}

fn integer(flags: &HashMap<String, String>, name: &str, default: u32) -> Result<u32, String> {
    match flags.get(name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| format!("argument --{name}: invalid int value: '{v}'")),
    }
}

fn vllm(rest: &[String]) -> Process {
    let usage = "vllm serve [model_tag] [options]";
    let (flags, positional) = options(rest, VLLM_BOOLEANS);
    for name in VLLM_INTEGERS {
        if let Err(e) = integer(&flags, name, 0) {
            return usage_error("vllm serve", usage, &e);
        }
    }
    if positional.len() > 1 {
        return usage_error(
            "vllm serve",
            usage,
            &format!("unrecognized arguments: {}", positional[1..].join(" ")),
        );
    }
    let model = positional
        .first()
        .cloned()
        .or_else(|| flags.get("model").cloned())
        .unwrap_or_else(|| "Qwen/Qwen3-0.6B".into());
    let get = |name, default| integer(&flags, name, default).unwrap_or(default);
    let (nnodes, node_rank) = (get("nnodes", 1), get("node-rank", 0));
    let world_size = get("tensor-parallel-size", 1)
        * get("pipeline-parallel-size", 1)
        * get("data-parallel-size", 1);
    if node_rank >= nnodes {
        return crash(&format!(
            "ValueError: node_rank ({node_rank}) must be less than nnodes ({nnodes})"
        ));
    }
    let master_addr = flags.get("master-addr").cloned();
    if nnodes > 1 && master_addr.as_deref().is_some_and(str::is_empty) {
        return crash(
            "ValueError: Invalid master address '' (--master-addr): it must be a host name or an IP address",
        );
    }
    let headless = flags.contains_key("headless");
    if node_rank > 0 && !headless {
        return crash(
            "ValueError: node_rank > 0 requires --headless: only node 0 runs the API server",
        );
    }
    let served_names = flags
        .get("served-model-name")
        .map(|n| n.split_whitespace().map(str::to_string).collect())
        .unwrap_or_else(|| vec![model.clone()]);
    Process::Engine(Launch {
        engine: Engine::Vllm,
        model,
        served_names,
        port: (!headless).then(|| u16::try_from(get("port", 8000)).unwrap_or(8000)),
        nnodes,
        node_rank,
        master_addr: master_addr.or_else(|| (nnodes > 1).then(|| "127.0.0.1".to_string())),
        world_size,
        load_format: flags.get("load-format").cloned(),
    })
}

fn sglang(rest: &[String]) -> Process {
    let usage = "launch_server.py [-h] --model-path MODEL_PATH [options]";
    let (flags, _) = options(
        rest,
        &[
            "trust-remote-code",
            "enable-dp-attention",
            "disable-radix-cache",
        ],
    );
    for name in [
        "port",
        "tp",
        "tp-size",
        "nnodes",
        "node-rank",
        "dp",
        "dp-size",
    ] {
        if let Err(e) = integer(&flags, name, 0) {
            return usage_error("launch_server.py", usage, &e);
        }
    }
    let Some(model) = flags.get("model-path").or(flags.get("model")).cloned() else {
        return usage_error(
            "launch_server.py",
            usage,
            "the following arguments are required: --model-path",
        );
    };
    let get = |name, default| integer(&flags, name, default).unwrap_or(default);
    let (nnodes, node_rank) = (get("nnodes", 1), get("node-rank", 0));
    if node_rank >= nnodes {
        return crash(&format!(
            "AssertionError: node_rank ({node_rank}) must be less than nnodes ({nnodes})"
        ));
    }
    let master_addr = flags.get("dist-init-addr").cloned();
    if nnodes > 1 && master_addr.as_deref().is_none_or(str::is_empty) {
        return crash("ValueError: --dist-init-addr is required when --nnodes > 1");
    }
    let served_names = flags
        .get("served-model-name")
        .map(|n| vec![n.clone()])
        .unwrap_or_else(|| vec![model.clone()]);
    Process::Engine(Launch {
        engine: Engine::Sglang,
        model,
        served_names,
        port: (node_rank == 0).then(|| u16::try_from(get("port", 30000)).unwrap_or(30000)),
        nnodes,
        node_rank,
        master_addr,
        world_size: get("tp", get("tp-size", 1)) * get("dp", get("dp-size", 1)),
        load_format: flags.get("load-format").cloned(),
    })
}

fn crash(message: &str) -> Process {
    Process::Exits(Exit {
        code: 1,
        log: format!("Traceback (most recent call last):\n  ...\n{message}\n"),
    })
}

/// What `argv` starts, its log so far prefixed (what the shell printed).
pub fn process(argv: &[String], shell_log: String) -> Process {
    let prefix = |p: Process| match p {
        Process::Exits(Exit { code, log }) => Process::Exits(Exit {
            code,
            log: format!("{shell_log}{log}"),
        }),
        other => other,
    };
    let words: Vec<&str> = argv.iter().map(String::as_str).collect();
    let program = words.first().map(|p| p.rsplit('/').next().unwrap_or(p));
    match (program, words.get(1..).unwrap_or_default()) {
        (Some("vllm"), ["serve", rest @ ..]) => prefix(vllm(&to_owned(rest))),
        (Some("python" | "python3"), ["-m", "vllm.entrypoints.openai.api_server", rest @ ..]) => prefix(vllm(&to_owned(rest))),
        (Some("python" | "python3"), ["-m", "sglang.launch_server", rest @ ..]) => prefix(sglang(&to_owned(rest))),
        (Some("hf" | "huggingface-cli"), ["download", repo, ..]) => Process::Download { repo: (*repo).to_string() },
        (None, _) => Process::Exits(Exit {
            code: 128,
            log: "failed to create containerd task: OCI runtime create failed: no command specified\n".into(),
        }),
        _ => Process::Service,
    }
}

fn to_owned(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_string()).collect()
}

/// What the hydration script of a cache Job downloads: the repository of
/// its `hf download` line.
pub fn download_of(script: &str) -> Option<String> {
    script.lines().find_map(|line| {
        let words = words(line);
        let at = words.iter().position(|w| w == "download")?;
        matches!(
            words.get(at.checked_sub(1)?)?.as_str(),
            "hf" | "huggingface-cli"
        )
        .then(|| words.get(at + 1).cloned())
        .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(image: &str, command: &[&str], args: &[&str], env: &[(&str, &str)]) -> Process {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut log = String::new();
        let command: Vec<String> = command.iter().map(|s| s.to_string()).collect();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let argv = argv(image, &command, &args, &env, &mut log);
        process(&argv, log)
    }

    #[test]
    fn the_vllm_image_entrypoint_serves_the_args() {
        let p = launch(
            "vllm/vllm-openai:v0.23.0",
            &[],
            &[
                "--model=Qwen/Qwen3-8B",
                "--served-model-name=qwen3-8b",
                "--max-model-len=16384",
            ],
            &[],
        );
        let Process::Engine(l) = p else {
            panic!("{p:?}")
        };
        assert_eq!(
            (l.engine, l.model.as_str(), l.port),
            (Engine::Vllm, "Qwen/Qwen3-8B", Some(8000))
        );
        assert_eq!(l.served_names, vec!["qwen3-8b"]);
    }

    #[test]
    fn a_shell_script_with_a_leader_and_rank_starts_rank_0() {
        let script = "exec vllm serve /mnt/models --served-model-name=qwen3-coder --tensor-parallel-size=8 --pipeline-parallel-size=2 --nnodes=2 --node-rank=0 --master-addr=coder-0.coder.ml-team --port=8000";
        let Process::Engine(l) = launch(
            "vllm/vllm-openai:v0.23.0",
            &["/bin/sh", "-c"],
            &[script],
            &[],
        ) else {
            panic!()
        };
        assert_eq!((l.nnodes, l.node_rank, l.world_size), (2, 0, 16));
        assert_eq!(l.master_addr.as_deref(), Some("coder-0.coder.ml-team"));
    }

    /// The kubelet left `$(MODELPLANE_RANK)` unexpanded: the shell runs it as
    /// a command substitution, which prints and gives nothing, and vLLM's
    /// argparse rejects the empty rank.
    #[test]
    fn an_unexpanded_variable_crashes_the_engine_with_its_error() {
        let script = "exec vllm serve /mnt/models --nnodes=2 --node-rank=$(MODELPLANE_RANK) --master-addr=$(MODELPLANE_LEADER_ADDRESS) --port=8000";
        let Process::Exits(exit) = launch(
            "vllm/vllm-openai:v0.23.0",
            &["/bin/sh", "-c"],
            &[script],
            &[],
        ) else {
            panic!()
        };
        assert_eq!(exit.code, 2);
        assert!(
            exit.log.starts_with(
                "sh: 1: MODELPLANE_RANK: not found\nsh: 1: MODELPLANE_LEADER_ADDRESS: not found\n"
            ),
            "{}",
            exit.log
        );
        assert!(
            exit.log
                .ends_with("vllm serve: error: argument --node-rank: invalid int value: ''\n"),
            "{}",
            exit.log
        );
    }

    #[test]
    fn an_empty_master_address_is_refused() {
        let p = launch(
            "vllm/vllm-openai",
            &["vllm", "serve"],
            &[
                "m",
                "--nnodes=2",
                "--node-rank=1",
                "--master-addr=",
                "--headless",
            ],
            &[],
        );
        assert!(
            matches!(p, Process::Exits(Exit { code: 1, ref log }) if log.contains("Invalid master address")),
            "{p:?}"
        );
    }

    #[test]
    fn a_headless_rank_serves_no_http() {
        let Process::Engine(l) = launch(
            "vllm/vllm-openai",
            &["vllm", "serve"],
            &[
                "m",
                "--nnodes=2",
                "--node-rank=1",
                "--master-addr=leader",
                "--headless",
            ],
            &[],
        ) else {
            panic!()
        };
        assert_eq!(l.port, None);
    }

    #[test]
    fn sglang_needs_its_model_path_and_listens_on_30000() {
        let p = launch(
            "lmsysorg/sglang:v0.5",
            &["python3", "-m", "sglang.launch_server"],
            &["--port", "x"],
            &[],
        );
        assert!(
            matches!(p, Process::Exits(Exit { code: 2, ref log }) if log.contains("invalid int value: 'x'")),
            "{p:?}"
        );
        let Process::Engine(l) = launch(
            "lmsysorg/sglang:v0.5",
            &["python3", "-m", "sglang.launch_server"],
            &["--model-path", "Qwen/Qwen3-8B"],
            &[],
        ) else {
            panic!()
        };
        assert_eq!((l.engine, l.port), (Engine::Sglang, Some(30000)));
    }

    #[test]
    fn shell_variables_expand_from_the_environment() {
        let Process::Engine(l) = launch(
            "x",
            &["sh", "-c", "exec vllm serve $MODEL --port=${PORT}"],
            &[],
            &[("MODEL", "m"), ("PORT", "9000")],
        ) else {
            panic!()
        };
        assert_eq!((l.model.as_str(), l.port), ("m", Some(9000)));
    }

    #[test]
    fn no_command_at_all_fails_to_start() {
        assert!(matches!(
            launch("busybox", &[], &[], &[]),
            Process::Exits(Exit { code: 128, .. })
        ));
    }

    #[test]
    fn a_hydration_job_runs_its_download_whatever_the_script_does_around_it() {
        let script = "set -e\nif [ -f /mnt/artifact/.modelplane-hydrated ]; then exit 0; fi\npip install --quiet huggingface_hub\nhf download Qwen/Qwen3-8B --local-dir /mnt/artifact\ntouch /mnt/artifact/.modelplane-hydrated\n";
        let p = launch("python:3.11-slim", &["/bin/sh", "-c", script], &[], &[]);
        assert_eq!(
            p,
            Process::Download {
                repo: "Qwen/Qwen3-8B".into()
            }
        );
    }

    #[test]
    fn a_hydration_script_downloads_its_repository() {
        let script = "set -e\nif [ -f /mnt/artifact/.modelplane-hydrated ]; then exit 0; fi\npip install --quiet huggingface_hub\nhf download Qwen/Qwen3-Coder-480B-A35B-Instruct --local-dir /mnt/artifact\ntouch /mnt/artifact/.modelplane-hydrated\n";
        assert_eq!(
            download_of(script).as_deref(),
            Some("Qwen/Qwen3-Coder-480B-A35B-Instruct")
        );
    }
}
