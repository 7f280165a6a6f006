//! `hpcnet coll`: an IMB-style collective benchmark on a scenario's ranks (software collectives
//! of `hpcnet-coll` on the verbs API): mean, minimum and maximum time per call over a range of
//! message sizes, for one collective and one algorithm (or the default table's choice).

use crate::p2p::{parse_range, sizes_between};
use crate::{run::load, Common, Failure};
use hpcnet_coll::Algorithm;
use hpcnet_des::Bytes;
use hpcnet_workloads::coll::{algorithm_name, run_collective, CollOp, CollPoint};
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

/// The algorithm (`auto`: the default selection table, per size).
#[derive(Copy, Clone, Debug, clap::ValueEnum)]
pub enum AlgArg {
    Auto,
    Dissemination,
    BinomialTree,
    Binomial,
    RecursiveDoubling,
    ScatterAllgather,
    DoubleBinaryTree,
    Chain,
    Rabenseifner,
    TwoLevel,
    Bruck,
    Ring,
    Pairwise,
    // The NICs' hardware collective unit with router multicast (barrier, bcast, reduce,
    // allreduce).
    Hardware,
}

impl AlgArg {
    fn algorithm(self) -> Algorithm {
        match self {
            AlgArg::Auto => Algorithm::Auto,
            AlgArg::Dissemination => Algorithm::Dissemination,
            AlgArg::BinomialTree => Algorithm::BinomialTree,
            AlgArg::Binomial => Algorithm::Binomial,
            AlgArg::RecursiveDoubling => Algorithm::RecursiveDoubling,
            AlgArg::ScatterAllgather => Algorithm::ScatterAllgather,
            AlgArg::DoubleBinaryTree => Algorithm::DoubleBinaryTree,
            AlgArg::Chain => Algorithm::Chain,
            AlgArg::Rabenseifner => Algorithm::Rabenseifner,
            AlgArg::TwoLevel => Algorithm::TwoLevel,
            AlgArg::Bruck => Algorithm::Bruck,
            AlgArg::Ring => Algorithm::Ring,
            AlgArg::Pairwise => Algorithm::Pairwise,
            AlgArg::Hardware => Algorithm::Hardware,
        }
    }
}

/// Options of `hpcnet coll`.
pub struct Args<'a> {
    pub scenario: &'a Path,
    pub op: OpArg,
    pub algorithm: AlgArg,
    pub sizes: &'a str,
    /// `--ranks`: `N` (ranks 0 .. N-1) or `A-B` (inclusive); default every rank.
    pub ranks: Option<&'a str>,
    pub iterations: u64,
    pub warmup: u64,
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
    use clap::ValueEnum;
    let op = args.op.op();
    let alg = args.algorithm.algorithm();
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
    let (min, max) = parse_range(args.sizes)?;
    let sizes = if matches!(op, CollOp::Barrier) {
        vec![0]
    } else {
        if min % 8 != 0 || max % 8 != 0 {
            return Err(Failure::input(format!(
                "--sizes {}: sizes are whole i64 elements, multiples of 8 B (see hpcnet --help)",
                args.sizes
            )));
        }
        sizes_between(min, max)
    };
    let sc = load(args.scenario, args.common)?;
    let probe = sc.world().map_err(Failure::input)?;
    let config = sc.coll.comm_config();
    let ranks = parse_ranks(args.ranks, probe.ranks() as u32)?;
    // The model moves real bytes: every member holds its input and its result.
    let p = ranks.len() as u64;
    let per_member = match op {
        CollOp::Allgather | CollOp::Alltoall | CollOp::ReduceScatter => max.saturating_mul(p),
        _ => max,
    };
    if !matches!(op, CollOp::Barrier) && per_member.saturating_mul(p) > MAX_FOOTPRINT {
        return Err(Failure::input(format!(
            "--sizes {}: {} of {} per rank on {p} ranks needs about {} of buffers, above {} (the model allocates every buffer) (see hpcnet --help)",
            args.sizes,
            op.name(),
            Bytes(max),
            Bytes(per_member.saturating_mul(p)),
            Bytes(MAX_FOOTPRINT)
        )));
    }
    let mut points: Vec<CollPoint> = Vec::new();
    for &bytes in &sizes {
        let world = sc.world().map_err(Failure::input)?;
        let p = run_collective(world, &ranks, op, alg, bytes, args.iterations, args.warmup, &config).map_err(|e| {
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
        points.push(p);
    }
    let first = ranks.first().map_or(0, |r| r.0);
    let last = ranks.last().map_or(0, |r| r.0);
    if args.common.json {
        let v = serde_json::json!({
            "scenario": sc.name, "version": env!("CARGO_PKG_VERSION"), "seed": sc.file.seed,
            "op": op.name(),
            "algorithm": args.algorithm.to_possible_value().map_or_else(|| format!("{:?}", args.algorithm), |v| v.get_name().to_string()),
            "ranks": ranks.len(), "first_rank": first, "last_rank": last,
            "datatype": "i64", "iterations": args.iterations, "warmup": args.warmup,
            "points": points, "resolved_scenario": sc.resolved_json(),
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return Ok(());
    }
    outln!(
        "hpcnet {} — coll {} on '{}' (seed {}), {} ranks ({first}-{last}), i64, {} iterations + {} warm-up",
        env!("CARGO_PKG_VERSION"),
        op.name(),
        sc.name,
        sc.file.seed,
        ranks.len(),
        args.iterations,
        args.warmup
    );
    outln!(
        "  {:>10} {:>20} {:>12} {:>12} {:>12}",
        "bytes",
        "algorithm",
        "mean us",
        "min us",
        "max us"
    );
    for p in &points {
        outln!(
            "  {:>10} {:>20} {:>12.3} {:>12.3} {:>12.3}",
            p.bytes,
            p.algorithm,
            p.mean_us,
            p.min_us,
            p.max_us
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
