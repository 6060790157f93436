//! Starting a pod's process: its command line and environment expanded,
//! the download or engine it runs, where its weights come from, and the
//! engine served on the pod's address.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::super::expand::{command_line, environment};
use super::super::launch::{self, Exit, Launch, Process};
use super::super::world::{ClusterKind, World, Write, deleting, namespace};
use super::weights::{Source, devices_of, model_bytes, parse_gi, peer_source, unhydrated_cache};
use super::{Context, Run, Serving, Stage, event, exited};
use crate::engine::{Engine, EngineConfig};

/// The pod a host name resolves to: `<hostname>.<subdomain>.<namespace>`,
/// with or without `.svc.cluster.local`, as cluster DNS answers for pods
/// behind a headless Service.
pub(super) fn resolve<'w>(world: &'w World<'_>, address: &str) -> Option<&'w Value> {
    let host = address
        .split(':')
        .next()?
        .trim_end_matches(".svc.cluster.local");
    let mut parts = host.splitn(3, '.');
    let (hostname, subdomain, ns) = (parts.next()?, parts.next()?, parts.next()?);
    world.all(ClusterKind::Pod).find(|p| {
        namespace(p) == ns
            && p["spec"]["hostname"] == hostname
            && p["spec"]["subdomain"] == subdomain
            && !deleting(p)
    })
}
/// Whether the Hugging Face token `container` is given (its `HF_TOKEN`,
/// from a Secret) is one the Hub would refuse: Hub tokens begin `hf_`.
/// A container given no token (or whose Secret is not seen yet) downloads
/// what is public.
pub(super) fn refused_token(world: &World<'_>, pod: &Value, container: &Value) -> bool {
    let Some(reference) = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "HF_TOKEN")
        .map(|e| &e["valueFrom"]["secretKeyRef"])
    else {
        return false;
    };
    let token = reference["name"]
        .as_str()
        .and_then(|secret| world.get(ClusterKind::Secret, namespace(pod), secret))
        .and_then(|secret| {
            let key = reference["key"].as_str()?;
            let encoded = secret["data"][key].as_str()?;
            serde_json::from_value::<k8s_openapi::ByteString>(Value::String(encoded.into())).ok()
        })
        .map(|bytes| String::from_utf8_lossy(&bytes.0).trim().to_string());
    // A Secret not seen yet reads as no token (what is public downloads).
    token.is_some_and(|t| !t.starts_with("hf_"))
}
/// Starts the container of `pod`: expands its env and command, and runs
/// what they launch.
pub(super) fn start(
    world: &World<'_>,
    pod: &Value,
    run: &mut Run,
    cx: &Context<'_>,
    writes: &mut Vec<Write>,
) {
    let container = &pod["spec"]["containers"][0];
    let image = container["image"].as_str().unwrap_or_default();
    let (_, env) = environment(pod, container);
    let (command, args) = command_line(container, &env);
    let mut shell_log = String::new();
    let argv = launch::argv(image, &command, &args, &env, &mut shell_log);
    match launch::process(&argv, shell_log) {
        Process::Exits(exit) => exited(pod, run, exit, cx, writes),
        Process::Service => {
            run.launch = None;
            run.stage = Stage::Running;
        }
        Process::Download { repo } if refused_token(world, pod, container) => {
            // The Hub refuses a token it did not issue, as it answers `hf
            // download` with one: the container exits, and its Job fails.
            let log = format!(
                "huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/api/models/{repo}/revision/main\nInvalid credentials in Authorization header\n"
            );
            exited(pod, run, Exit { code: 1, log }, cx, writes);
        }
        Process::Download { repo } => {
            run.log.push_str(&format!("Downloading {repo}\n"));
            let size = pod["spec"]["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|v| {
                    world.get(
                        ClusterKind::Pvc,
                        namespace(pod),
                        v["persistentVolumeClaim"]["claimName"].as_str()?,
                    )
                })
                .and_then(|p| p["spec"]["resources"]["requests"]["storage"].as_str())
                .and_then(parse_gi)
                .unwrap_or(10.0);
            run.download = true;
            run.stage = Stage::Loading {
                remaining: size * 1024.0 * 1024.0 * 1024.0,
                source: Source::Storage,
            };
        }
        Process::Engine(l) => {
            let per_node = l.world_size.div_ceil(l.nnodes.max(1)) as u64;
            let devices = devices_of(world, pod);
            if per_node > devices.max(1) || (per_node > 1 && devices < per_node) {
                let exit = Exit {
                    code: 1,
                    log: format!(
                        "ValueError: The number of required GPUs ({per_node}) exceeds the total number of available GPUs ({devices}) on this node\n"
                    ),
                };
                return exited(pod, run, exit, cx, writes);
            }
            run.log.push_str(&format!("INFO: vLLM-compatible engine (simulated) starting: model={} served_model_name={:?} rank {}/{}\n", l.model, l.served_names, l.node_rank, l.nnodes));
            if l.node_rank > 0 {
                let address = l.master_addr.clone().unwrap_or_default();
                if resolve(world, &address).is_none() {
                    run.launch = Some(l);
                    run.stage = Stage::Connecting {
                        until: cx.now + cx.profile.scale(Duration::from_secs(30)),
                    };
                    return;
                }
            }
            if let Some(claim) = unhydrated_cache(world, pod, &l) {
                let exit = Exit {
                    code: 1,
                    log: format!(
                        "OSError: {} does not appear to have a file named config.json (the volume of claim {claim} holds no model yet)\n",
                        l.model
                    ),
                };
                return exited(pod, run, exit, cx, writes);
            }
            let bytes = model_bytes(world, pod, &l);
            let pool = |node: &str| {
                world.get(ClusterKind::Node, "", node).and_then(|n| {
                    n["metadata"]["labels"][modelplane_api::labels::POOL]
                        .as_str()
                        .map(str::to_string)
                })
            };
            let fabric = pool(&run.node).and_then(|p| cx.fabrics.get(&p).cloned());
            // The ModelExpress loader runs only when the engine asks for it
            // (`--load-format modelexpress`, `mx`) and knows its server.
            let mx_loader = matches!(l.load_format.as_deref(), Some("modelexpress" | "mx"));
            let mx_server = container["env"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e["name"] == "MODEL_EXPRESS_URL" || e["name"] == "MX_SERVER_ADDRESS");
            let wants_mx = mx_loader && mx_server;
            let source = fabric
                .filter(|_| cx.model_express && wants_mx)
                .and_then(|fabric| peer_source(world, pod, &l, &fabric))
                .unwrap_or(Source::Storage);
            let message = match &source {
                Source::Storage => format!(
                    "Loading {:.0} GiB of weights from storage",
                    bytes / 1073741824.0
                ),
                Source::Peer { pod: peer, fabric } => format!(
                    "Loading {:.0} GiB of weights from peer {peer} over {fabric} (ModelExpress)",
                    bytes / 1073741824.0
                ),
            };
            writes.push(event(pod, "Normal", "LoadingWeights", message));
            run.launch = Some(l);
            run.stage = Stage::Loading {
                remaining: bytes,
                source,
            };
        }
    }
}
/// Starts an engine's server on `ip:port`. The port is bound here, so a
/// port another process listens on fails the engine at once, as uvicorn's
/// bind does.
pub(super) fn serve(
    ip: Ipv4Addr,
    port: u16,
    launch: &Launch,
    cx: &Context<'_>,
) -> Result<Serving, Exit> {
    let addr = SocketAddr::from((ip, port));
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| bind_failure(port, &e))?;
    let (stop, mut stopped) = watch::channel(false);
    let config = EngineConfig {
        model: launch
            .served_names
            .first()
            .cloned()
            .unwrap_or_else(|| launch.model.clone()),
        time_to_first_token: Duration::from_millis(20),
        inter_token_latency: Duration::from_millis(5),
        ..EngineConfig::default()
    };
    (cx.spawn)(Box::pin(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(%addr, error = %e, "engine cannot listen");
                return;
            }
        };
        let engine = Engine::new(config);
        // Ends when the pod's run is dropped (stop gone) — connections too.
        let until_stopped = async move {
            let _ = stopped.changed().await;
        };
        tokio::select! {
            _ = crate::engine::serve(listener, engine, std::future::pending()) => {}
            () = until_stopped => {}
        }
    }));
    Ok(Serving { _stop: stop })
}
/// How uvicorn exits when it cannot bind its port.
pub(super) fn bind_failure(port: u16, error: &std::io::Error) -> Exit {
    let reason = error.to_string();
    let reason = reason
        .split(" (os error")
        .next()
        .unwrap_or_default()
        .to_lowercase();
    Exit {
        code: 1,
        log: format!(
            "ERROR:    [Errno {}] error while attempting to bind on address ('0.0.0.0', {port}): {reason}\n",
            error.raw_os_error().unwrap_or(0)
        ),
    }
}
