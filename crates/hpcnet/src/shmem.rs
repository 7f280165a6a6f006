//! `hpcnet shmem`: OpenSHMEM benchmarks on a scenario's NICs (PE programs on `hpcnet-shmem`):
//! put ping-pong, get and atomic latency, put bandwidth and message rate, barrier latency
//! against PEs (classic or fast), HPCC RandomAccess (GUPS, verified).

use crate::nas::NetworkArg;
use crate::p2p::{parse_range, sizes_between};
use crate::{run::load, Common, Failure};
use hpcnet_mpi::NetworkModel;
use hpcnet_msg::NicBackend;
use hpcnet_shmem::BarrierKind;
use hpcnet_workloads::shmem::{
    barrier, call_latency, cg, put_pingpong, put_rate, put_stream, random_access, CgExchange, CgPartition, LatencyCall,
    RaVariant, ShmemBenchError, ShmemPoint,
};
use std::path::Path;

/// What to measure.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum Test {
    /// Put ping-pong (data, fence, flag; the peer waits and answers): half the round trip.
    PutLatency,
    /// Blocking get, one after another.
    GetLatency,
    /// 64-bit fetch-and-add, one after another.
    Atomic,
    /// Streaming non-blocking puts from the symmetric heap, quiet every --window.
    PutBw,
    /// Short puts (8 B by default) from every PE of the lower half to its partner in the upper
    /// half, then quiet: messages per second over all pairs.
    Rate,
    /// Barrier latency for 2, 4, … up to --pes PEs.
    Barrier,
    /// HPCC RandomAccess on --pes PEs (GUPS and the standard verification).
    Randomaccess,
    /// NPB-CG-like vector exchange on --pes PEs (--class, --block, --exchange, --flops): time per
    /// CG iteration, its communication part, and the class's whole run at that pace.
    Cg,
    /// IMB PingPong between --from and --to on the MPI-like layer (`[mpi]`): half the round trip.
    ImbPingpong,
    /// IMB Bcast on --pes ranks: the collectives layer's binomial broadcast, mean over the
    /// iterations of the time to the last member's completion.
    ImbBcast,
}

/// Barrier flavour.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum BarrierArg {
    Classic,
    Fast,
}

/// CG vector exchange.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum ExchangeArg {
    /// Owner puts into every peer's copy, then a barrier (SHMEM style).
    Puts,
    /// The collectives layer's allgather (MPI style; row-block only).
    Allgather,
}

/// RandomAccess update method.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum VariantArg {
    /// Remote atomic xor at the owner (one packet per update).
    Atomic,
    /// Get the entry, xor, put it back.
    GetPut,
}

/// Options of `hpcnet shmem`.
pub struct Args<'a> {
    pub scenario: &'a Path,
    pub test: Test,
    pub sizes: &'a str,
    pub pes: Option<usize>,
    pub from: usize,
    pub to: usize,
    pub iterations: u64,
    pub window: u64,
    pub barrier: BarrierArg,
    pub variant: VariantArg,
    pub log_table: u32,
    pub updates: u64,
    pub class: char,
    pub block: u64,
    pub exchange: ExchangeArg,
    pub flops: f64,
    /// `--network`: overrides the scenario's `mpi.network`.
    pub network: Option<NetworkArg>,
    pub common: &'a Common,
}

/// Largest measured count per point (iterations, messages, updates): every one is simulated.
const MAX_COUNT: u64 = 100_000_000;

pub fn shmem(args: &Args) -> Result<(), Failure> {
    for (flag, v) in [
        ("--iterations", args.iterations),
        ("--window", args.window),
        ("--updates", args.updates),
    ] {
        if v == 0 || v > MAX_COUNT {
            return Err(Failure::input(format!(
                "{flag} {v}: needs 1 to {MAX_COUNT} (see hpcnet --help)"
            )));
        }
    }
    let sc = load(args.scenario, args.common)?;
    let network = match args.network {
        Some(NetworkArg::Packet) => NetworkModel::Packet,
        Some(NetworkArg::Flow) => NetworkModel::Flow,
        None => sc.mpi_network,
    };
    if network == NetworkModel::Flow && matches!(args.test, Test::ImbPingpong | Test::ImbBcast) {
        return Err(Failure::input(format!(
            "--test {} with --network flow: the IMB tests run on the packet network only; use --network packet (see hpcnet --help)",
            test_name(args.test)
        )));
    }
    // Only the model that runs is built; its rank count and whether it keeps a pair's order.
    let (ranks, ordered) = match network {
        NetworkModel::Packet => {
            let w = sc.world().map_err(Failure::input)?;
            (w.ranks(), w.in_order())
        }
        NetworkModel::Flow => {
            let f = sc.flow_world().map_err(Failure::input)?;
            (NicBackend::ranks(&f), NicBackend::in_order(&f))
        }
    };
    let pes = args.pes.unwrap_or(ranks);
    if pes < 2 || pes > ranks {
        return Err(Failure::input(format!(
            "{}: --pes {pes}: needs 2 to {ranks} (the machine's ranks)",
            sc.source
        )));
    }
    for (flag, r) in [("--from", args.from), ("--to", args.to)] {
        if r >= pes {
            return Err(Failure::input(format!(
                "{}: {flag} {r}: the job has {pes} PEs",
                sc.source
            )));
        }
    }
    if args.from == args.to {
        return Err(Failure::input(format!(
            "{}: --from and --to are the same PE {}",
            sc.source, args.to
        )));
    }
    let (min, max) = parse_range(args.sizes)?;
    let cfg = sc.shmem_config();
    let kind = match args.barrier {
        BarrierArg::Classic => BarrierKind::Classic,
        BarrierArg::Fast => BarrierKind::Fast,
    };
    let world = || sc.world().map_err(Failure::input);
    let flow = || sc.flow_world().map_err(Failure::input);
    // One benchmark call on a fresh model of the chosen kind.
    macro_rules! on_net {
        ($f:ident($($a:expr),* $(,)?)) => {
            match network {
                NetworkModel::Packet => $f(world()?, $($a),*),
                NetworkModel::Flow => $f(flow()?, $($a),*),
            }
        };
    }
    let fail = |what: String, e: ShmemBenchError| match e {
        ShmemBenchError::Call(_) => Failure::input(format!("{}: shmem {what}: {e}", sc.source)),
        ShmemBenchError::Stuck(_) => Failure::model(format!("{}: shmem {what}: {e}", sc.source)),
    };
    let (a, b) = (args.from, args.to);
    let mut points: Vec<ShmemPoint> = Vec::new();
    let name = test_name(args.test);
    match args.test {
        Test::PutLatency | Test::GetLatency | Test::Atomic | Test::PutBw | Test::Rate => {
            let sizes = if matches!(args.test, Test::Atomic) {
                vec![8]
            } else {
                sizes_between(min, max)
            };
            for size in sizes {
                let p = match args.test {
                    Test::PutLatency => on_net!(put_pingpong(pes, a, b, size, args.iterations, &cfg)),
                    Test::GetLatency => {
                        on_net!(call_latency(pes, a, b, LatencyCall::Get, size, args.iterations, &cfg))
                    }
                    Test::Atomic => on_net!(call_latency(pes, a, b, LatencyCall::FetchAdd, 8, args.iterations, &cfg)),
                    Test::PutBw => on_net!(put_stream(pes, a, b, size, args.iterations, args.window, &cfg)),
                    _ => {
                        let pairs: Vec<(usize, usize)> = (0..pes / 2).map(|i| (i, i + pes / 2)).collect();
                        on_net!(put_rate(pes, &pairs, size, args.iterations, &cfg))
                    }
                };
                points.push(p.map_err(|e| fail(format!("{name}, {size} B"), e))?);
            }
        }
        Test::Barrier => {
            let mut n = 2;
            loop {
                let p = on_net!(barrier(n, kind, args.iterations, 2, &cfg))
                    .map_err(|e| fail(format!("barrier, {n} PEs"), e))?;
                points.push(p);
                if n == pes {
                    break;
                }
                n = (n * 2).min(pes);
            }
        }
        Test::ImbPingpong | Test::ImbBcast => {
            for size in sizes_between(min, max) {
                let p = if matches!(args.test, Test::ImbPingpong) {
                    let p = hpcnet_workloads::imb::pingpong(
                        world()?,
                        hpcnet_workloads::Rank(a as u32),
                        hpcnet_workloads::Rank(b as u32),
                        size,
                        args.iterations,
                        2,
                        sc.mpi,
                    )
                    .map_err(|e| match e {
                        hpcnet_workloads::imb::ImbError::BadInput(_) => {
                            Failure::input(format!("{}: {name}, {size} B: {e}", sc.source))
                        }
                        _ => Failure::model(format!("{}: {name}, {size} B: {e}", sc.source)),
                    })?;
                    ShmemPoint {
                        size,
                        pes: 2,
                        count: p.iterations,
                        time_ns: p.latency_us * 2e3 * p.iterations as f64,
                        latency_us: p.latency_us,
                        gbytes_per_s: p.mbytes_per_s / 1e3,
                        messages_per_s: if p.latency_us > 0.0 { 1e6 / p.latency_us } else { 0.0 },
                        gups: None,
                        errors: None,
                    }
                } else {
                    let ranks: Vec<hpcnet_workloads::Rank> = (0..pes as u32).map(hpcnet_workloads::Rank).collect();
                    let p = hpcnet_workloads::coll::run_collective(
                        world()?,
                        &ranks,
                        hpcnet_workloads::coll::CollOp::Bcast,
                        hpcnet_coll::Algorithm::Binomial,
                        size.max(8),
                        args.iterations,
                        2,
                        &sc.comm_config(),
                    )
                    .map_err(|e| {
                        let m = format!("{}: {name}, {size} B: {e}", sc.source);
                        if e.is_bad_input() {
                            Failure::input(m)
                        } else {
                            Failure::model(m)
                        }
                    })?;
                    ShmemPoint {
                        size,
                        pes,
                        count: args.iterations,
                        time_ns: p.mean_us * 1e3 * args.iterations as f64,
                        latency_us: p.mean_us,
                        gbytes_per_s: if p.mean_us > 0.0 {
                            size as f64 / p.mean_us / 1e3
                        } else {
                            0.0
                        },
                        messages_per_s: if p.mean_us > 0.0 { 1e6 / p.mean_us } else { 0.0 },
                        gups: None,
                        errors: None,
                    }
                };
                points.push(p);
            }
        }
        Test::Cg => {
            let partition = if args.block == 0 {
                CgPartition::RowBlock
            } else {
                CgPartition::BlockCyclic { block: args.block }
            };
            let exchange = match args.exchange {
                ExchangeArg::Puts => CgExchange::OwnerPuts,
                ExchangeArg::Allgather => CgExchange::Allgather,
            };
            let p = on_net!(cg(
                pes,
                args.class,
                partition,
                exchange,
                args.iterations,
                args.flops,
                &cfg
            ))
            .map_err(|e| fail("cg".into(), e))?;
            if args.common.json {
                let v = serde_json::json!({
                    "scenario": sc.name, "version": env!("CARGO_PKG_VERSION"), "seed": sc.file.seed,
                    "test": name, "pes": pes, "ordered_delivery": ordered,
                    "cg": p, "resolved_scenario": sc.resolved_json(),
                });
                let mut v = v;
                if network == NetworkModel::Flow {
                    v.as_object_mut()
                        .expect("object")
                        .insert("network".into(), "flow".into());
                }
                outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
            } else {
                outln!(
                    "hpcnet {} — shmem cg on '{}' (seed {}), {} PEs, class {}, {}, {}",
                    env!("CARGO_PKG_VERSION"),
                    sc.name,
                    sc.file.seed,
                    pes,
                    p.class,
                    match partition {
                        CgPartition::RowBlock => "row-block partition".to_string(),
                        CgPartition::BlockCyclic { block } => format!("block-cyclic partition ({block} rows)"),
                    },
                    match exchange {
                        CgExchange::OwnerPuts => "owner puts + barrier",
                        CgExchange::Allgather => "allgather",
                    }
                );
                outln!(
                    "  iteration {:.3} us  communication {:.3} us  messages/PE/iteration {}  class run {:.4} s ({} iterations simulated)",
                    p.iteration_us,
                    p.communication_us,
                    p.messages_per_pe,
                    p.class_time_s,
                    p.iterations
                );
            }
            return Ok(());
        }
        Test::Randomaccess => {
            let variant = match args.variant {
                VariantArg::Atomic => RaVariant::Atomic,
                VariantArg::GetPut => RaVariant::GetPut,
            };
            let p = on_net!(random_access(pes, args.log_table, args.updates, variant, 1024, &cfg))
                .map_err(|e| fail("randomaccess".into(), e))?;
            points.push(p);
        }
    }
    if args.common.json {
        let v = serde_json::json!({
            "scenario": sc.name, "version": env!("CARGO_PKG_VERSION"), "seed": sc.file.seed,
            "test": name, "pes": pes, "from": a, "to": b,
            "barrier": format!("{:?}", args.barrier).to_lowercase(),
            "ordered_delivery": ordered,
            "points": points, "resolved_scenario": sc.resolved_json(),
        });
        let mut v = v;
        if network == NetworkModel::Flow {
            v.as_object_mut()
                .expect("object")
                .insert("network".into(), "flow".into());
        }
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return Ok(());
    }
    outln!(
        "hpcnet {} — shmem {} on '{}' (seed {}), {} PEs{}",
        env!("CARGO_PKG_VERSION"),
        name,
        sc.name,
        sc.file.seed,
        pes,
        match (ordered, network) {
            (true, _) => ", ordered delivery (fence free)",
            (false, NetworkModel::Packet) => ", unordered delivery (fence = quiet)",
            (false, NetworkModel::Flow) => ", flow-level network, unordered delivery (fence = quiet)",
        }
    );
    match args.test {
        Test::Barrier => {
            outln!("  {:>6} {:>14}   ({:?} barrier)", "PEs", "latency us", args.barrier);
            for p in &points {
                outln!("  {:>6} {:>14.3}", p.pes, p.latency_us);
            }
        }
        Test::Randomaccess => {
            for p in &points {
                let errors = p.errors.unwrap_or(0);
                outln!(
                    "  updates {}  time {:.3} us  GUPS {:.6}  errors {} ({:.4} %, HPCC accepts <= 1 %)  {}",
                    p.count,
                    p.time_ns / 1000.0,
                    p.gups.unwrap_or(0.0),
                    errors,
                    100.0 * errors as f64 / ((1u64 << args.log_table) * pes as u64) as f64,
                    if errors as f64 <= 0.01 * ((1u64 << args.log_table) * pes as u64) as f64 {
                        "PASSED"
                    } else {
                        "FAILED"
                    }
                );
            }
        }
        _ => {
            outln!(
                "  {:>10} {:>12} {:>12} {:>14}",
                "size B",
                "latency us",
                "GB/s",
                "messages/s"
            );
            for p in &points {
                outln!(
                    "  {:>10} {:>12.3} {:>12.3} {:>14.0}",
                    p.size,
                    p.latency_us,
                    p.gbytes_per_s,
                    p.messages_per_s
                );
            }
        }
    }
    Ok(())
}

fn test_name(t: Test) -> String {
    use clap::ValueEnum;
    t.to_possible_value()
        .map_or_else(|| format!("{t:?}"), |v| v.get_name().to_string())
}
