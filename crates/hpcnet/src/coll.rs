//! `hpcnet coll`: an IMB-style collective benchmark on a scenario's ranks (software collectives
//! of `hpcnet-coll` on the verbs API): mean, minimum and maximum time per call over a range of
//! message sizes, for one collective and one algorithm (or the default table's choice).

use crate::nas::NetworkArg;
use crate::p2p::{parse_range, sizes_between};
use crate::{run::load, Common, Failure};
use hpcnet_coll::{Algorithm, Datatype, ReduceOp};
use hpcnet_des::Bytes;
use hpcnet_mpi::NetworkModel;
use hpcnet_msg::NicBackend;
use hpcnet_nic::Placement;
use hpcnet_workloads::coll::{
    algorithm_name, run_concurrent, run_concurrent_on, CollBenchError, CollOp, CollPoint, CollSpec, ALGORITHMS,
};
use hpcnet_workloads::Rank;
use std::path::Path;

/// The collective to measure.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum OpArg {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Allgather,
    ReduceScatter,
    Alltoall,
}

impl OpArg {
    fn op(self) -> CollOp {
        match self {
            OpArg::Barrier => CollOp::Barrier,
            OpArg::Bcast => CollOp::Bcast,
            OpArg::Reduce => CollOp::Reduce,
            OpArg::Allreduce => CollOp::Allreduce,
            OpArg::Allgather => CollOp::Allgather,
            OpArg::ReduceScatter => CollOp::ReduceScatter,
            OpArg::Alltoall => CollOp::Alltoall,
        }
    }
}

/// `--algorithm`: the command-line names of `hpcnet_workloads::coll::ALGORITHMS` (`auto`: the
/// default selection table, per size), listed in `--help`.
pub fn algorithm_parser() -> impl clap::builder::TypedValueParser<Value = Algorithm> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(ALGORITHMS.map(|(_, name)| name)).map(|s| {
        ALGORITHMS
            .iter()
            .find(|(_, name)| *name == s)
            .map(|(a, _)| *a)
            .expect("clap accepts only the listed names")
    })
}

/// Element type of the buffers.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum TypeArg {
    F32,
    F64,
    I32,
    I64,
}

impl TypeArg {
    fn datatype(self) -> Datatype {
        match self {
            TypeArg::F32 => Datatype::F32,
            TypeArg::F64 => Datatype::F64,
            TypeArg::I32 => Datatype::I32,
            TypeArg::I64 => Datatype::I64,
        }
    }
}

/// Reduction operator.
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum ReduceOpArg {
    Sum,
    Max,
    Min,
    Band,
    Bor,
    Bxor,
}

impl ReduceOpArg {
    fn op(self) -> ReduceOp {
        match self {
            ReduceOpArg::Sum => ReduceOp::Sum,
            ReduceOpArg::Max => ReduceOp::Max,
            ReduceOpArg::Min => ReduceOp::Min,
            ReduceOpArg::Band => ReduceOp::Band,
            ReduceOpArg::Bor => ReduceOp::Bor,
            ReduceOpArg::Bxor => ReduceOp::Bxor,
        }
    }
}

/// One communicator of a run: its name in the output and its ranks.
struct Group {
    name: String,
    ranks: Vec<Rank>,
}

/// The communicators of a run: all `ranks` in one; `--concurrent K` disjoint blocks;
/// `--grid R` rows and columns; `--interleave K` every K-th rank.
fn layout(
    ranks: &[Rank],
    concurrent: Option<usize>,
    grid: Option<usize>,
    interleave: Option<usize>,
) -> Result<Vec<Group>, Failure> {
    let p = ranks.len();
    if let Some(k) = interleave {
        if k == 0 || k > p || !p.is_multiple_of(k) {
            return Err(Failure::input(format!(
                "--interleave {k}: needs a divisor of the {p} ranks, so that the communicators have equal sizes (see hpcnet --help)"
            )));
        }
        return Ok((0..k)
            .map(|g| Group {
                name: format!("stride {g}"),
                ranks: ranks.iter().skip(g).step_by(k).copied().collect(),
            })
            .collect());
    }
    if let Some(k) = concurrent {
        if k == 0 || k > p || !p.is_multiple_of(k) {
            return Err(Failure::input(format!(
                "--concurrent {k}: needs a divisor of the {p} ranks, so that the communicators have equal sizes (see hpcnet --help)"
            )));
        }
        let size = p / k;
        return Ok((0..k)
            .map(|i| Group {
                name: format!("block {i}"),
                ranks: ranks[i * size..(i + 1) * size].to_vec(),
            })
            .collect());
    }
    if let Some(r) = grid {
        if r < 2 || r >= p || !p.is_multiple_of(r) {
            return Err(Failure::input(format!(
                "--grid {r}: needs a divisor of the {p} ranks between 2 and {} (rows of at least two ranks) (see hpcnet --help)",
                p / 2
            )));
        }
        let cols = p / r;
        let mut v: Vec<Group> = (0..r)
            .map(|i| Group {
                name: format!("row {i}"),
                ranks: ranks[i * cols..(i + 1) * cols].to_vec(),
            })
            .collect();
        v.extend((0..cols).map(|j| Group {
            name: format!("column {j}"),
            ranks: (0..r).map(|i| ranks[i * cols + j]).collect(),
        }));
        return Ok(v);
    }
    Ok(vec![Group {
        name: "all".into(),
        ranks: ranks.to_vec(),
    }])
}

/// Options of `hpcnet coll`.
pub struct Args<'a> {
    pub scenario: &'a Path,
    pub op: OpArg,
    pub algorithm: Algorithm,
    pub sizes: &'a str,
    /// `--ranks`: `N` (ranks 0 .. N-1) or `A-B` (inclusive); default every rank.
    pub ranks: Option<&'a str>,
    pub iterations: u64,
    pub warmup: u64,
    pub dtype: TypeArg,
    pub reduce_op: ReduceOpArg,
    pub root: usize,
    pub concurrent: Option<usize>,
    pub grid: Option<usize>,
    pub interleave: Option<usize>,
    /// `--network`: overrides the scenario's `mpi.network`.
    pub network: Option<NetworkArg>,
    pub common: &'a Common,
}

/// `--sizes` when the user gives none.
pub const DEFAULT_SIZES: &str = "8:32K";

/// The most iterations per size (each is a full collective on every member).
const MAX_ITERATIONS: u64 = 100_000;

/// Largest sum of the members' buffers a run may need (the model allocates them all).
const MAX_FOOTPRINT: u64 = 1 << 30;

/// `--ranks N` or `--ranks A-B` on a machine of `world` ranks.
fn parse_ranks(spec: Option<&str>, world: u32) -> Result<Vec<Rank>, Failure> {
    let Some(spec) = spec else {
        return Ok((0..world).map(Rank).collect());
    };
    let bad = |why: String| {
        Failure::input(format!(
            "--ranks {spec}: {why} (expected N for ranks 0..N-1, or A-B; see hpcnet --help)"
        ))
    };
    let num = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| bad(format!("'{}' is not a rank number", s.trim())))
    };
    let (a, b) = match spec.split_once('-') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => {
            let n = num(spec)?;
            if n == 0 {
                return Err(bad("needs at least 1 rank".into()));
            }
            (0, n - 1)
        }
    };
    if a > b {
        return Err(bad(format!("{a} is above {b}")));
    }
    if b >= world {
        return Err(bad(format!("the machine has {world} ranks (0-{})", world - 1)));
    }
    Ok((a..=b).map(Rank).collect())
}

pub fn coll(args: &Args) -> Result<(), Failure> {
    let op = args.op.op();
    let alg = args.algorithm;
    if args.iterations == 0 || args.iterations > MAX_ITERATIONS {
        return Err(Failure::input(format!(
            "--iterations {}: needs 1 to {MAX_ITERATIONS} (see hpcnet --help)",
            args.iterations
        )));
    }
    if args.warmup > MAX_ITERATIONS {
        return Err(Failure::input(format!(
            "--warmup {}: at most {MAX_ITERATIONS} (see hpcnet --help)",
            args.warmup
        )));
    }
    if !hpcnet_coll::implements(alg, op.collective()) {
        return Err(Failure::input(format!(
            "--algorithm {}: does not implement --op {} (it takes: auto, {}) (see hpcnet --help)",
            algorithm_name(alg),
            op.name(),
            hpcnet_workloads::coll::algorithms_for(op).join(", ")
        )));
    }
    let dtype = args.dtype.datatype();
    let reduce_op = args.reduce_op.op();
    if op.reduces() && hpcnet_coll::check_op(op.collective().name(), dtype, reduce_op).is_err() {
        return Err(Failure::input(format!(
            "--reduce-op {}: not defined on --type {} (band, bor and bxor take integer types only) (see hpcnet --help)",
            reduce_op.name(),
            dtype.name()
        )));
    }
    let es = dtype.size() as u64;
    let (min, max) = parse_range(args.sizes)?;
    let sizes = if matches!(op, CollOp::Barrier) {
        vec![0]
    } else {
        if min % es != 0 || max % es != 0 {
            return Err(Failure::input(format!(
                "--sizes {}: sizes are whole {} elements, multiples of {es} B (see hpcnet --help)",
                args.sizes,
                dtype.name()
            )));
        }
        sizes_between(min, max)
    };
    let sc = load(args.scenario, args.common)?;
    let network = match args.network {
        Some(NetworkArg::Packet) => NetworkModel::Packet,
        Some(NetworkArg::Flow) => NetworkModel::Flow,
        None => sc.mpi_network,
    };
    if network == NetworkModel::Flow && matches!(alg, Algorithm::Hardware | Algorithm::Offload) {
        return Err(Failure::input(format!(
            "--algorithm {} with --network flow: the flow-level model has no {}; use a software algorithm or --network packet (see hpcnet --help)",
            algorithm_name(alg),
            if alg == Algorithm::Hardware {
                "hardware collective unit or router multicast"
            } else {
                "triggered offload unit"
            }
        )));
    }
    // Only the model that runs is built (the flow model holds no packet network).
    let machine_ranks = match network {
        NetworkModel::Packet => sc.world().map_err(Failure::input)?.ranks(),
        NetworkModel::Flow => sc.flow_world().map_err(Failure::input)?.ranks(),
    };
    let config = sc.comm_config();
    let ranks = parse_ranks(args.ranks, machine_ranks as u32)?;
    let groups = layout(&ranks, args.concurrent, args.grid, args.interleave)?;
    if op.rooted() {
        if let Some(g) = groups.iter().find(|g| args.root >= g.ranks.len()) {
            return Err(Failure::input(format!(
                "--root {}: outside the communicator '{}' of {} ranks (roots are member indices 0-{}) (see hpcnet --help)",
                args.root,
                g.name,
                g.ranks.len(),
                g.ranks.len() - 1
            )));
        }
    }
    // The model moves real bytes: every member holds its input and its result.
    let footprint: u64 = groups
        .iter()
        .map(|g| {
            let p = g.ranks.len() as u64;
            let per_member = match op {
                CollOp::Allgather | CollOp::Alltoall | CollOp::ReduceScatter => max.saturating_mul(p),
                _ => max,
            };
            per_member.saturating_mul(p)
        })
        .fold(0, u64::saturating_add);
    if !matches!(op, CollOp::Barrier) && footprint > MAX_FOOTPRINT {
        return Err(Failure::input(format!(
            "--sizes {}: {} of {} per rank on {} ranks needs about {} of buffers, above {} (the model allocates every buffer) (see hpcnet --help)",
            args.sizes,
            op.name(),
            Bytes(max),
            ranks.len(),
            Bytes(footprint),
            Bytes(MAX_FOOTPRINT)
        )));
    }
    let spec = CollSpec {
        op,
        algorithm: alg,
        dtype,
        reduce_op,
        root: args.root,
    };
    let rank_groups: Vec<Vec<Rank>> = groups.iter().map(|g| g.ranks.clone()).collect();
    // points[g][size]
    let mut points: Vec<Vec<CollPoint>> = groups.iter().map(|_| Vec::new()).collect();
    for &bytes in &sizes {
        let (it, wu) = (args.iterations, args.warmup);
        let run = match network {
            NetworkModel::Packet => {
                let world = sc.world().map_err(Failure::input)?;
                run_concurrent(world, &rank_groups, &spec, bytes, it, wu, &config)
            }
            NetworkModel::Flow => {
                let flow = sc.flow_world().map_err(Failure::input)?;
                let place = Placement::new(sc.nic.hosts);
                run_concurrent_on(flow, place, &rank_groups, &spec, bytes, it, wu, &config)
            }
        };
        let pts = run.map_err(|e: CollBenchError| {
            let what = format!(
                "{}: coll {} --algorithm {}, {} per rank, {} ranks: {e}",
                sc.source,
                op.name(),
                algorithm_name(alg),
                Bytes(bytes),
                ranks.len()
            );
            if e.is_bad_input() {
                Failure::input(what)
            } else {
                Failure::model(what)
            }
        })?;
        for (g, p) in pts.into_iter().enumerate() {
            points[g].push(p);
        }
    }
    let first = ranks.first().map_or(0, |r| r.0);
    let last = ranks.last().map_or(0, |r| r.0);
    let concurrent = groups.len() > 1;
    if args.common.json {
        let mut v = serde_json::json!({
            "scenario": sc.name, "version": env!("CARGO_PKG_VERSION"), "seed": sc.file.seed,
            "op": op.name(),
            "algorithm": algorithm_name(args.algorithm),
            "ranks": ranks.len(), "first_rank": first, "last_rank": last,
            "datatype": dtype.name(), "iterations": args.iterations, "warmup": args.warmup,
            "resolved_scenario": sc.resolved_json(),
        });
        let o = v.as_object_mut().expect("object");
        if network == NetworkModel::Flow {
            o.insert("network".into(), "flow".into());
        }
        if op.reduces() {
            o.insert("reduce_op".into(), reduce_op.name().into());
        }
        if op.rooted() {
            o.insert("root".into(), args.root.into());
        }
        if concurrent {
            let layout = match (args.grid, args.interleave) {
                (Some(_), _) => "grid",
                (_, Some(_)) => "interleaved",
                _ => "disjoint",
            };
            o.insert("layout".into(), layout.into());
            let comms: Vec<serde_json::Value> = groups
                .iter()
                .zip(&points)
                .map(|(g, pts)| {
                    serde_json::json!({
                        "name": g.name,
                        "ranks": g.ranks.iter().map(|r| r.0).collect::<Vec<u32>>(),
                        "points": pts,
                    })
                })
                .collect();
            o.insert("communicators".into(), comms.into());
        } else {
            o.insert("points".into(), serde_json::to_value(&points[0]).expect("json"));
        }
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return Ok(());
    }
    let mut what = dtype.name().to_string();
    if op.reduces() {
        what += &format!(" {}", reduce_op.name());
    }
    if op.rooted() {
        what += &format!(", root {}", args.root);
    }
    let model = match network {
        NetworkModel::Packet => "",
        NetworkModel::Flow => ", flow-level network",
    };
    outln!(
        "hpcnet {} — coll {} on '{}' (seed {}), {} ranks ({first}-{last}), {what}, {} iterations + {} warm-up{model}",
        env!("CARGO_PKG_VERSION"),
        op.name(),
        sc.name,
        sc.file.seed,
        ranks.len(),
        args.iterations,
        args.warmup
    );
    for (g, pts) in groups.iter().zip(&points) {
        if concurrent {
            let shown: Vec<String> = g.ranks.iter().take(8).map(|r| r.0.to_string()).collect();
            let more = if g.ranks.len() > 8 { ", ..." } else { "" };
            outln!(
                "  communicator {} ({} ranks: {}{more}), all {} communicators at once",
                g.name,
                g.ranks.len(),
                shown.join(", "),
                groups.len()
            );
        }
        outln!(
            "  {:>10} {:>20} {:>12} {:>12} {:>12}",
            "bytes",
            "algorithm",
            "mean us",
            "min us",
            "max us"
        );
        for p in pts {
            outln!(
                "  {:>10} {:>20} {:>12.3} {:>12.3} {:>12.3}",
                p.bytes,
                p.algorithm,
                p.mean_us,
                p.min_us,
                p.max_us
            );
        }
    }
    // The offload unit's statistics (one run per size, all communicators together).
    for p in &points[0] {
        if p.statistics.is_empty() {
            continue;
        }
        let v = |name: &str| {
            p.statistics
                .iter()
                .find(|s| s.name == name)
                .map_or(0, |s| match s.value {
                    hpcnet_des::stats::StatValue::Counter { value } => value,
                    _ => 0,
                })
        };
        outln!(
            "  nic.trig @ {:>8} B: packets {}  buffer peak {} slots / {} B  collisions {}  refused {}  early {}  pulses {} (retries {}, time-outs {}, peak in flight {})  errors {}",
            p.bytes,
            v("nic.trig.packets"),
            v("nic.trig.buffer_peak_occupancy"),
            v("nic.trig.buffer_peak_bytes"),
            v("nic.trig.buffer_collisions"),
            v("nic.trig.refused"),
            v("nic.trig.early"),
            v("nic.trig.pulses_granted"),
            v("nic.trig.pulse_retries"),
            v("nic.trig.pulse_timeouts"),
            v("nic.trig.pulse_peak_in_flight"),
            v("nic.trig.errors"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_ranges() {
        assert_eq!(
            parse_ranks(Some("4"), 64).ok().unwrap(),
            (0..4).map(Rank).collect::<Vec<_>>()
        );
        assert_eq!(
            parse_ranks(Some("2-5"), 64).ok().unwrap(),
            (2..6).map(Rank).collect::<Vec<_>>()
        );
        assert_eq!(parse_ranks(None, 3).ok().unwrap().len(), 3);
        for bad in ["0", "65", "5-2", "0-64", "x", "1-"] {
            let e = parse_ranks(Some(bad), 64).err().unwrap();
            assert_eq!(e.code, 2);
            assert!(e.message.starts_with(&format!("--ranks {bad}: ")), "{}", e.message);
        }
    }
}
