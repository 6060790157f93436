//! `modelplane`: the one binary. Each subcommand lives in its own module;
//! this file only parses arguments and maps outcomes to exit codes.

mod apiserver;
mod controller;
mod crds;
mod engine_sim;
mod fleet;
mod gateway;
mod inputs;
mod logging;
mod output;
mod providers;
mod rbac;
mod recipes;
mod render;
mod schedule;
mod sim;
mod up;
mod validate;

use std::process::ExitCode;

/// Composition, admission and serving allocate many small objects; mimalloc
/// halves their cost against the system allocator (bench/RESULTS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// Modelplane: the control plane for a fleet of AI inference clusters.
///
/// Platform teams declare clusters (InferenceCluster), node-pool hardware
/// (InferenceClass) and the gateway (InferenceGateway); ML teams declare models
/// (ModelDeployment, ModelCache, ModelService). Modelplane places every
/// replica on hardware that fits and serves them behind one OpenAI-compatible
/// endpoint.
#[derive(Parser, Debug)]
#[command(name = "modelplane", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run Modelplane end to end on this machine: API server, controllers, gateway and a simulated fleet.
    Up(up::UpArgs),
    /// Print the version of this binary and of the API it serves.
    Version,
    /// Print the CustomResourceDefinitions of all 14 kinds.
    Crds(crds::CrdsArgs),
    /// Check manifests as the API server would admit them.
    Validate(validate::ValidateArgs),
    /// Show where the scheduler would place a deployment's replicas, and why not elsewhere.
    Schedule(schedule::ScheduleArgs),
    /// Print every object the controllers would create for a fleet and its models.
    Render(render::RenderArgs),
    /// Show which Crossplane providers run for a fleet, and why.
    Providers(providers::ProvidersArgs),
    /// List the locked serving-stack recipes of this release.
    Recipes(recipes::RecipesArgs),
    /// Serve the embedded Kubernetes-compatible API server.
    Apiserver(apiserver::ApiserverArgs),
    /// Run the controllers: reconcile the fleet on a control plane.
    Controller(controller::ControllerArgs),
    /// Print the RBAC the controllers need, on the control plane or on a workload cluster.
    Rbac(rbac::RbacArgs),
    /// Serve the fleet gateway: one OpenAI-compatible endpoint for every model.
    Gateway(gateway::GatewayArgs),
    /// Serve a fake OpenAI-compatible engine (for tests, benchmarks and demos).
    EngineSim(engine_sim::EngineSimArgs),
    /// Run the simulated fleet: clouds, Crossplane, workload clusters, GPU nodes.
    Sim(sim::SimArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!(
                "modelplane {} (API {}/{}, {}/{})",
                env!("CARGO_PKG_VERSION"),
                modelplane_api::crds::GROUP,
                modelplane_api::crds::VERSION,
                modelplane_api::crds::INFRASTRUCTURE_GROUP,
                modelplane_api::crds::VERSION,
            );
            ExitCode::SUCCESS
        }
        Command::Crds(args) => report(crds::run(&args)),
        Command::Recipes(args) => report(recipes::run(&args)),
        Command::Apiserver(args) => report(apiserver::run(&args)),
        Command::Gateway(args) => report(gateway::run(&args)),
        Command::Controller(args) => report(controller::run(&args)),
        Command::Rbac(args) => report(rbac::run(&args)),
        Command::EngineSim(args) => report(engine_sim::run(&args)),
        Command::Sim(args) => report(sim::run(&args)),
        Command::Up(args) => report(up::run(&args)),
        Command::Providers(args) => match providers::run(&args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        Command::Render(args) => match render::run(&args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        Command::Schedule(args) => match schedule::run(&args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        },
        Command::Validate(args) => match validate::run(&args) {
            Ok(outcome) => ExitCode::from(outcome.exit_code()),
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
