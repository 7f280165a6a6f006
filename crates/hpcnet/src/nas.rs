//! `hpcnet nas`: the NAS FT / LU communication skeletons on a scenario's ranks under one
//! connection policy of `hpcnet-mpi` (run time, messages, connections opened on demand,
//! communication memory per process).

use crate::{run::load, Common, Failure};
use hpcnet_mpi::{Allocator, Layout, NetworkModel};
use hpcnet_workloads::nas::{policy, run_nas, run_nas_on, Bench, Class, NasConfig};
use std::path::Path;

/// The benchmark.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum BenchArg {
    Ft,
    Lu,
}

/// The network model.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum NetworkArg {
    Packet,
    Flow,
}

/// Options of `hpcnet nas`.
pub struct Args<'a> {
    pub scenario: &'a Path,
    pub bench: BenchArg,
    pub class: &'a str,
    /// `--policy`: overrides the scenario's `mpi.policy`.
    pub policy: Option<&'a str>,
    pub flops: f64,
    pub iterations: Option<u32>,
    /// `--network`: overrides the scenario's `mpi.network`.
    pub network: Option<NetworkArg>,
    /// `--real-bytes`: carry payload bytes (default: payload-free).
    pub real_bytes: bool,
    pub common: &'a Common,
}

/// Most receive-buffer bytes the simulator may hold over all ranks (every registered byte with
/// `--real-bytes`; without, [`PER_BUFFER`] per buffer), unless the machine has less memory
/// ([`buffer_limit`]).
const MAX_BUFFERS: u64 = 64 << 30;
/// What the simulator holds per payload-free receive buffer. A shared receive queue's
/// buffers are held as a count (header slots only while a message is in them), so what grows
/// with the buffers is their connection's 16-byte record (RC_SRQ pre-posts one buffer per
/// connection) and the set-up's transient lists: measured 36 B per connection between FT
/// class S under RC_SRQ at 2 048 and 4 096 processes (peak RSS 0.30 and 0.75 GB, 1.26·10⁷
/// more connections).
const PER_BUFFER: u64 = 36;

/// The receive-buffer bytes a run may hold: [`MAX_BUFFERS`], or the machine's physical memory
/// if that is less (Linux `/proc/meminfo`; elsewhere the constant alone), so a run that cannot
/// fit is refused up front instead of running out of memory hours later.
fn buffer_limit() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib << 10)
    });
    total.map_or(MAX_BUFFERS, |t| t.min(MAX_BUFFERS))
}

pub fn nas(args: &Args) -> Result<(), Failure> {
    let class = Class::parse(args.class).ok_or_else(|| {
        Failure::input(format!(
            "--class {}: expected S, W, A, B, C, D or E (see hpcnet --help)",
            args.class
        ))
    })?;
    if !(args.flops.is_finite() && args.flops > 0.0) {
        return Err(Failure::input(format!(
            "--flops {}: needs a positive rate (see hpcnet --help)",
            args.flops
        )));
    }
    if args.iterations == Some(0) {
        return Err(Failure::input("--iterations 0: needs at least 1 (see hpcnet --help)"));
    }
    let sc = load(args.scenario, args.common)?;
    let mut job = sc.mpi;
    if let Some(p) = args.policy {
        job.policy = policy(p).map_err(|e| Failure::input(format!("--policy: {e}")))?;
    }
    let policy = job.policy;
    let network = match args.network {
        Some(NetworkArg::Packet) => NetworkModel::Packet,
        Some(NetworkArg::Flow) => NetworkModel::Flow,
        None => sc.mpi_network,
    };
    // The flow-level run builds no packet network.
    let (world, flow) = match network {
        NetworkModel::Packet => (Some(sc.world().map_err(Failure::input)?), None),
        NetworkModel::Flow => (None, Some(sc.flow_world().map_err(Failure::input)?)),
    };
    let ranks = match (&world, &flow) {
        (Some(w), _) => w.ranks() as u64,
        (_, Some(f)) => hpcnet_msg::NicBackend::ranks(f) as u64,
        _ => unreachable!("one model is built"),
    };
    let per_node = u64::from(sc.nic.hosts);
    let layout = Layout::new(ranks, per_node).map_err(Failure::input)?;
    let one = Allocator::new(policy, job.conn, layout, 0, false).map_err(Failure::input)?;
    let registered = one.account().recv_buffers;
    let held = if args.real_bytes {
        registered
    } else {
        registered / job.conn.buffer.max(1) * PER_BUFFER
    };
    let limit = buffer_limit();
    if held.saturating_mul(ranks) > limit {
        return Err(Failure::input(format!(
            "--policy {policy} on {ranks} ranks registers about {} MB of receive buffers, of which the simulator holds {} MB, above {} MB (the smaller of 64 GiB and this machine's memory); use fewer ranks or a policy with fewer connections{}",
            registered.saturating_mul(ranks) >> 20,
            held.saturating_mul(ranks) >> 20,
            limit >> 20,
            if args.real_bytes { " (or leave out --real-bytes)" } else { "" }
        )));
    }
    let bench = match args.bench {
        BenchArg::Ft => Bench::Ft,
        BenchArg::Lu => Bench::Lu,
    };
    let cfg = NasConfig {
        bench,
        class,
        job,
        flops: args.flops,
        iterations: args.iterations,
        payload_free: !args.real_bytes,
    };
    let started = std::time::Instant::now();
    let result = match (world, flow) {
        (Some(w), _) => run_nas(w, &cfg),
        (_, Some(f)) => run_nas_on(f, per_node, &cfg),
        _ => unreachable!("one model is built"),
    };
    let r = result.map_err(|e| {
        let what = format!("{}: {e}", sc.source);
        if matches!(e, hpcnet_workloads::nas::NasError::Config(_)) {
            Failure::input(what)
        } else {
            Failure::model(what)
        }
    })?;
    let wall = started.elapsed().as_secs_f64();
    let class_iterations = match bench {
        Bench::Ft => class.ft().1,
        Bench::Lu => class.lu().1,
    };
    let name = match bench {
        Bench::Ft => "FT",
        Bench::Lu => "LU",
    };
    if args.common.json {
        let v = serde_json::json!({
            "scenario": sc.name, "version": env!("CARGO_PKG_VERSION"), "seed": sc.file.seed,
            "network": format!("{network:?}").to_lowercase(), "bench": name, "class": format!("{class:?}"), "policy": policy.to_string(),
            "ranks": r.ranks, "processes_per_node": per_node, "iterations": r.iterations,
            "flops_per_process": args.flops, "payload_free": !args.real_bytes,
            "eager_threshold_bytes": job.p2p.eager_threshold, "qp_create_s": job.conn.qp_create.as_secs_f64(),
            "kernel_transition_s": job.conn.kernel_transition.as_secs_f64(),
            "time_s": r.time.as_secs_f64(), "compute_s": r.compute.as_secs_f64(),
            "messages": r.messages, "bytes": r.bytes, "on_demand_connections": r.on_demand,
            "memory_static_max_bytes": r.memory_static_max, "memory_max_bytes": r.memory_max,
            "rnr_retries": r.rnr_retries,
            "first_phase_s": r.first_phase.as_secs_f64(),
            "per_iteration_s": r.per_iteration().map(|t| t.as_secs_f64()),
            "class_iterations": class_iterations,
            "extrapolated_class_time_s": r.extrapolated(class_iterations).map(|t| t.as_secs_f64()),
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return Ok(());
    }
    outln!(
        "hpcnet {} — nas {name} class {class:?} on '{}' (seed {}), {} ranks ({} per node), policy {policy}, {} level",
        env!("CARGO_PKG_VERSION"),
        sc.name,
        sc.file.seed,
        r.ranks,
        per_node,
        format!("{network:?}").to_lowercase()
    );
    outln!("  iterations      {}", r.iterations);
    outln!(
        "  time            {:.6} s simulated (computation {:.6} s per rank at {:.3e} flop/s)",
        r.time.as_secs_f64(),
        r.compute.as_secs_f64(),
        args.flops
    );
    let first = if r.first_phase_iterations == 0 {
        "forward FFT"
    } else {
        "first iteration"
    };
    outln!(
        "  first phase     {:.6} s ({first}; on-demand connections open in it)",
        r.first_phase.as_secs_f64()
    );
    if let (Some(per), Some(all)) = (r.per_iteration(), r.extrapolated(class_iterations)) {
        outln!(
            "  per iteration   {:.6} s after it; the class's {class_iterations} iterations at that rate: {:.6} s",
            per.as_secs_f64(),
            all.as_secs_f64()
        );
    }
    outln!("  messages        {} ({} bytes)", r.messages, r.bytes);
    outln!(
        "  on demand       {} connections opened (summed over processes)",
        r.on_demand
    );
    outln!(
        "  memory          {:.4} MB per process at start, {:.4} MB at the end (largest process)",
        r.memory_static_max as f64 / 1e6,
        r.memory_max as f64 / 1e6
    );
    outln!("  rnr retries     {}", r.rnr_retries);
    outln!(
        "  payload         {}",
        if args.real_bytes {
            "real bytes"
        } else {
            "none (payload-free buffers: headers only; times as with real bytes)"
        }
    );
    outln!("  wall            {wall:.2} s");
    Ok(())
}
