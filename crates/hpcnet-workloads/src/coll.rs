//! Collective benchmark in the manner of IMB: every member of a communicator calls one
//! collective (`hpcnet-coll`) `warmup + iterations` times; each call is preceded by a barrier so
//! that all members start together (dissemination; the hardware barrier when the algorithm is
//! `hardware`, whose communicator is then created with a hardware collective group), and the
//! timed iterations are reported as mean, minimum and maximum.
//!
//! Conventions:
//! - datatype `i64`, reduction operator sum (integer sums are exact, so results are compared
//!   with a reference exactly, whatever the algorithm's order of operations);
//! - `bytes` is the message size per member, as IMB counts it: the vector of broadcast, reduce
//!   and allreduce; the block each member contributes to allgather; the block each member sends
//!   to each other member in alltoall (its buffer is `p · bytes`); the block of the result each
//!   member receives from reduce-scatter (its input is `p · bytes`). Barrier moves no data and
//!   reports 0 bytes. Sizes are whole elements: a positive multiple of 8 bytes;
//! - broadcast and reduce use member 0 as root;
//! - time of an iteration: from the common start (the latest member leaving the preceding
//!   barrier) to the completion of the collective at the last member;
//! - the results of the last iteration are compared with a reference computed here, outside
//!   the simulated data path: a wrong result is an error, never a figure; so is a run that does
//!   not finish.

use crate::p2p::describe_stuck;
use hpcnet_coll::{implements, select, Algorithm, CollError, Collective, Comm, CommConfig, ReduceOp};
use hpcnet_des::SimTime;
use hpcnet_msg::verbs::{Machine, RunEnd};
use hpcnet_nic::{Rank, World};
use serde::Serialize;
use std::cell::RefCell;
use std::rc::Rc;

/// The collectives the benchmark measures.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CollOp {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Allgather,
    ReduceScatter,
    Alltoall,
}

impl CollOp {
    /// Every operation, in the order above.
    pub const ALL: [CollOp; 7] = [
        CollOp::Barrier,
        CollOp::Bcast,
        CollOp::Reduce,
        CollOp::Allreduce,
        CollOp::Allgather,
        CollOp::ReduceScatter,
        CollOp::Alltoall,
    ];

    /// The collective of `hpcnet-coll` this operation calls.
    pub fn collective(self) -> Collective {
        match self {
            CollOp::Barrier => Collective::Barrier,
            CollOp::Bcast => Collective::Broadcast,
            CollOp::Reduce => Collective::Reduce,
            CollOp::Allreduce => Collective::Allreduce,
            CollOp::Allgather => Collective::Allgather,
            CollOp::ReduceScatter => Collective::ReduceScatter,
            CollOp::Alltoall => Collective::Alltoall,
        }
    }

    /// Name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            CollOp::Barrier => "barrier",
            CollOp::Bcast => "bcast",
            CollOp::Reduce => "reduce",
            CollOp::Allreduce => "allreduce",
            CollOp::Allgather => "allgather",
            CollOp::ReduceScatter => "reduce-scatter",
            CollOp::Alltoall => "alltoall",
        }
    }

    /// Bytes of the buffer each member passes for a message size of `bytes` (see the module
    /// documentation), which is also what [`select`] is given.
    pub fn buffer_bytes(self, bytes: u64, p: usize) -> u64 {
        match self {
            CollOp::Barrier => 0,
            CollOp::ReduceScatter | CollOp::Alltoall => bytes.saturating_mul(p as u64),
            _ => bytes,
        }
    }
}

/// Every algorithm with its command-line name.
pub const ALGORITHMS: [(Algorithm, &str); 14] = [
    (Algorithm::Auto, "auto"),
    (Algorithm::Dissemination, "dissemination"),
    (Algorithm::BinomialTree, "binomial-tree"),
    (Algorithm::Binomial, "binomial"),
    (Algorithm::RecursiveDoubling, "recursive-doubling"),
    (Algorithm::ScatterAllgather, "scatter-allgather"),
    (Algorithm::DoubleBinaryTree, "double-binary-tree"),
    (Algorithm::Chain, "chain"),
    (Algorithm::Rabenseifner, "rabenseifner"),
    (Algorithm::TwoLevel, "two-level"),
    (Algorithm::Bruck, "bruck"),
    (Algorithm::Ring, "ring"),
    (Algorithm::Pairwise, "pairwise"),
    (Algorithm::Hardware, "hardware"),
];

/// Command-line name of an algorithm.
pub fn algorithm_name(a: Algorithm) -> &'static str {
    ALGORITHMS.iter().find(|(x, _)| *x == a).map_or("unknown", |(_, n)| n)
}

/// The algorithms implementing `op` (without `auto`), by command-line name.
pub fn algorithms_for(op: CollOp) -> Vec<&'static str> {
    ALGORITHMS
        .iter()
        .filter(|(a, _)| *a != Algorithm::Auto && implements(*a, op.collective()))
        .map(|(_, n)| *n)
        .collect()
}

/// One measured size.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CollPoint {
    /// The collective (command-line name).
    pub op: &'static str,
    /// The algorithm used (`auto` resolved through the default table).
    pub algorithm: &'static str,
    /// Members of the communicator.
    pub ranks: usize,
    /// Message size per member (see the module documentation).
    pub bytes: u64,
    /// Timed iterations.
    pub iterations: u64,
    /// Untimed iterations before them.
    pub warmup: u64,
    /// Mean, minimum and maximum time of one iteration, in µs.
    pub mean_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// Result elements (over all members) of the last iteration compared with the reference and
    /// found equal; 0 for a barrier, which returns no data.
    pub checked_elements: u64,
}

/// Why the benchmark gave no figure.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CollBenchError {
    /// The request does not make sense (zero iterations, a size that is not whole elements, an
    /// algorithm that does not implement the collective, ...).
    #[error("{0}")]
    BadInput(String),
    /// A collective call returned an error.
    #[error("{0}")]
    Call(CollError),
    /// A member's result differs from the reference.
    #[error("wrong result at member {member} (rank {rank}): {what}")]
    WrongResult { member: usize, rank: Rank, what: String },
    /// The run ended with rank programs still waiting or packets stuck.
    #[error("{}", describe_stuck(.0))]
    Stuck(RunEnd),
}

impl CollBenchError {
    /// Whether the error lies in the request (as opposed to the run on the model).
    pub fn is_bad_input(&self) -> bool {
        match self {
            CollBenchError::BadInput(_) => true,
            CollBenchError::Call(e) => matches!(
                e,
                CollError::OpOnType { .. }
                    | CollError::BadBuffer { .. }
                    | CollError::RankOutside { .. }
                    | CollError::Unsupported { .. }
                    | CollError::AlgorithmLimit { .. }
                    | CollError::BadComm(_)
            ),
            _ => false,
        }
    }
}

/// Element `k` of the input of member `m` (small enough that sums over any machine are exact).
fn value(m: usize, k: usize) -> i64 {
    (m as i64 + 1) * 1_048_576 + (k as i64 * 7919) % 1_048_573
}

fn input(m: usize, count: usize) -> Vec<i64> {
    (0..count).map(|k| value(m, k)).collect()
}

/// The element-wise sum of every member's input of `count` elements.
fn sum_of_inputs(p: usize, count: usize) -> Vec<i64> {
    (0..count).map(|k| (0..p).map(|m| value(m, k)).sum()).collect()
}

/// What member `me` of `p` must hold after the last iteration (`None`: no result, as at a
/// non-root member of reduce). `n` elements per member, as [`CollOp::buffer_bytes`] counts.
fn expected(op: CollOp, me: usize, p: usize, n: usize) -> Option<Vec<i64>> {
    match op {
        CollOp::Barrier => Some(Vec::new()),
        CollOp::Bcast => Some(input(0, n)),
        CollOp::Reduce => (me == 0).then(|| sum_of_inputs(p, n)),
        CollOp::Allreduce => Some(sum_of_inputs(p, n)),
        CollOp::Allgather => Some((0..p).flat_map(|m| input(m, n)).collect()),
        CollOp::ReduceScatter => Some(sum_of_inputs(p, p * n)[me * n..(me + 1) * n].to_vec()),
        // Member s sends its block `me` (elements me·n .. (me+1)·n of its input).
        CollOp::Alltoall => Some(
            (0..p)
                .flat_map(|s| input(s, p * n)[me * n..(me + 1) * n].to_vec())
                .collect(),
        ),
    }
}

/// One call of `op` by member `me` of `c`; its result (see [`expected`]).
async fn call(c: &mut Comm, op: CollOp, alg: Algorithm, me: usize, n: usize) -> Result<Option<Vec<i64>>, CollError> {
    let p = c.size();
    Ok(match op {
        CollOp::Barrier => {
            c.barrier(alg).await?;
            Some(Vec::new())
        }
        CollOp::Bcast => {
            let mut buf = if me == 0 { input(0, n) } else { vec![0; n] };
            c.broadcast(&mut buf, 0, alg).await?;
            Some(buf)
        }
        CollOp::Reduce => c.reduce(&input(me, n), ReduceOp::Sum, 0, alg).await?,
        CollOp::Allreduce => Some(c.allreduce(&input(me, n), ReduceOp::Sum, alg).await?),
        CollOp::Allgather => Some(c.allgather(&input(me, n), alg).await?),
        CollOp::ReduceScatter => Some(c.reduce_scatter(&input(me, p * n), ReduceOp::Sum, alg).await?),
        CollOp::Alltoall => Some(c.alltoall(&input(me, p * n), alg).await?),
    })
}

/// Per-iteration start and end times (maximum over members) and each member's last result.
#[derive(Default)]
struct Record {
    starts: Vec<SimTime>,
    ends: Vec<SimTime>,
    results: Vec<Option<Option<Vec<i64>>>>,
    error: Option<CollError>,
}

/// Compare every member's result of the last iteration (`None`: the member did not finish it)
/// with [`expected`]; the number of elements compared, or the first difference.
fn compare(
    op: CollOp,
    ranks: &[Rank],
    n: usize,
    results: Vec<Option<Option<Vec<i64>>>>,
) -> Result<u64, CollBenchError> {
    let p = ranks.len();
    let mut checked = 0u64;
    for (me, got) in results.into_iter().enumerate() {
        let rank = ranks[me];
        let got = got.ok_or_else(|| CollBenchError::WrongResult {
            member: me,
            rank,
            what: "no result".into(),
        })?;
        let want = expected(op, me, p, n);
        if got != want {
            let what = match (&got, &want) {
                (Some(g), Some(w)) if g.len() != w.len() => format!("{} elements, expected {}", g.len(), w.len()),
                (Some(g), Some(w)) => {
                    let k = g.iter().zip(w).position(|(a, b)| a != b).unwrap_or(0);
                    format!("element {k} is {}, expected {}", g[k], w[k])
                }
                (None, _) => "no result, expected one".into(),
                (_, None) => "a result where none was expected".into(),
            };
            return Err(CollBenchError::WrongResult { member: me, rank, what });
        }
        checked += want.map_or(0, |w| w.len() as u64);
    }
    Ok(checked)
}

/// Run `op` with `algorithm` on a communicator of `ranks` of `world` (see the module
/// documentation for the conventions) and report the timed iterations.
///
/// # Errors
/// [`CollBenchError::BadInput`] for zero iterations, a size that is not a positive multiple of
/// 8 bytes, or an algorithm that does not implement `op`; [`CollBenchError::Call`] when a call
/// fails (e.g. recursive-doubling allgather on a communicator whose size is not a power of two);
/// [`CollBenchError::WrongResult`] when a result differs from the reference;
/// [`CollBenchError::Stuck`] when the run does not finish.
#[allow(clippy::too_many_arguments)]
pub fn run_collective(
    world: World,
    ranks: &[Rank],
    op: CollOp,
    algorithm: Algorithm,
    bytes: u64,
    iterations: u64,
    warmup: u64,
    config: &CommConfig,
) -> Result<CollPoint, CollBenchError> {
    if iterations == 0 {
        return Err(CollBenchError::BadInput("iterations: needs at least 1".into()));
    }
    if !implements(algorithm, op.collective()) {
        return Err(CollBenchError::BadInput(format!(
            "algorithm {} does not implement {} (it takes: auto, {})",
            algorithm_name(algorithm),
            op.name(),
            algorithms_for(op).join(", ")
        )));
    }
    let bytes = if op == CollOp::Barrier { 0 } else { bytes };
    if op != CollOp::Barrier && (bytes == 0 || !bytes.is_multiple_of(8)) {
        return Err(CollBenchError::BadInput(format!(
            "size {bytes} B: {} on i64 needs a positive multiple of 8 bytes",
            op.name()
        )));
    }
    let p = ranks.len();
    let n = (bytes / 8) as usize;
    let used = match algorithm {
        Algorithm::Auto => select(op.collective(), op.buffer_bytes(bytes, p) as usize, p),
        a => a,
    };
    let mut m = Machine::new(world);
    let place = m.world().placement();
    // The hardware algorithm needs the communicator's hardware group (multicast tables).
    let config = &CommConfig {
        hardware: config.hardware || algorithm == Algorithm::Hardware,
        ..config.clone()
    };
    let comms = Comm::create_on_nodes(&m, ranks, |r| place.node_of(r).0, config).map_err(CollBenchError::Call)?;
    let total = (warmup + iterations) as usize;
    // Iterations start together after a barrier: the hardware barrier for the hardware
    // algorithm (no software connections are set up then), dissemination otherwise.
    let sync = if algorithm == Algorithm::Hardware {
        Algorithm::Hardware
    } else {
        Algorithm::Dissemination
    };
    let rec = Rc::new(RefCell::new(Record {
        starts: vec![SimTime::ZERO; total],
        ends: vec![SimTime::ZERO; total],
        results: vec![None; p],
        error: None,
    }));
    for (me, mut c) in comms.into_iter().enumerate() {
        let rec = rec.clone();
        m.spawn(async move {
            let mut last = None;
            for it in 0..total {
                let r = match c.barrier(sync).await {
                    Ok(()) => {
                        let t0 = c.context().now();
                        let r = call(&mut c, op, algorithm, me, n).await;
                        let t1 = c.context().now();
                        let mut g = rec.borrow_mut();
                        g.starts[it] = g.starts[it].max(t0);
                        g.ends[it] = g.ends[it].max(t1);
                        r
                    }
                    Err(e) => Err(e),
                };
                match r {
                    Ok(v) => last = Some(v),
                    Err(e) => {
                        let mut g = rec.borrow_mut();
                        // Keep the first error that is not a consequence of another's.
                        if g.error.is_none() || matches!(g.error, Some(CollError::Aborted { .. })) {
                            g.error = Some(e);
                        }
                        return;
                    }
                }
            }
            rec.borrow_mut().results[me] = last;
        });
    }
    let end = m.run();
    let mut rec = std::mem::take(&mut *rec.borrow_mut());
    if let Some(e) = rec.error.take() {
        return Err(CollBenchError::Call(e));
    }
    if end.stuck_tasks > 0 || end.deadlock || end.net_in_flight > 0 {
        return Err(CollBenchError::Stuck(end));
    }
    let checked = compare(op, ranks, n, rec.results)?;
    let times: Vec<f64> = (warmup as usize..total)
        .map(|i| (rec.ends[i] - rec.starts[i]).as_us_f64())
        .collect();
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    let min = times.iter().copied().fold(f64::INFINITY, f64::min);
    let max = times.iter().copied().fold(0.0, f64::max);
    Ok(CollPoint {
        op: op.name(),
        algorithm: algorithm_name(used),
        ranks: p,
        bytes,
        iterations,
        warmup,
        mean_us: mean,
        min_us: min,
        max_us: max,
        checked_elements: checked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;
    use std::path::Path;

    fn world() -> World {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/torus-8x8.toml");
        Scenario::load(&path, &[]).expect("scenario").world().expect("world")
    }

    fn eight() -> Vec<Rank> {
        (0..8).map(Rank).collect()
    }

    /// `run_collective` on a fresh torus-8x8 world with the default library settings.
    fn run(
        ranks: &[Rank],
        op: CollOp,
        alg: Algorithm,
        bytes: u64,
        iterations: u64,
        warmup: u64,
    ) -> Result<CollPoint, CollBenchError> {
        run_collective(
            world(),
            ranks,
            op,
            alg,
            bytes,
            iterations,
            warmup,
            &CommConfig::default(),
        )
    }

    #[test]
    fn allreduce_is_timed_checked_and_deterministic() {
        let a = run(&eight(), CollOp::Allreduce, Algorithm::Auto, 64, 3, 1).unwrap();
        assert!(a.mean_us > 0.0 && a.min_us > 0.0 && a.min_us <= a.mean_us && a.mean_us <= a.max_us);
        assert_eq!(a.algorithm, "recursive-doubling");
        assert_eq!((a.ranks, a.bytes, a.iterations), (8, 64, 3));
        assert_eq!(a.checked_elements, 8 * 8, "every member's 8 elements compared");
        let b = run(&eight(), CollOp::Allreduce, Algorithm::Auto, 64, 3, 1).unwrap();
        assert_eq!(a, b, "runs are deterministic");
        let big = run(&eight(), CollOp::Allreduce, Algorithm::Auto, 16 << 10, 3, 1).unwrap();
        assert!(big.mean_us > a.mean_us, "{} us vs {} us", big.mean_us, a.mean_us);
        assert_eq!(big.algorithm, "rabenseifner");
    }

    #[test]
    fn every_op_matches_its_reference() {
        let ranks: Vec<Rank> = (0..6).map(|i| Rank(i * 5)).collect();
        for op in CollOp::ALL {
            let pt = run(&ranks, op, Algorithm::Auto, 32, 1, 0).unwrap_or_else(|e| panic!("{}: {e}", op.name()));
            let per_member = match op {
                CollOp::Barrier => 0,
                CollOp::Reduce => 0,
                CollOp::Allgather | CollOp::Alltoall => 6 * 4,
                _ => 4,
            };
            let root = if op == CollOp::Reduce { 4 } else { 0 };
            assert_eq!(pt.checked_elements, 6 * per_member + root, "{}", op.name());
        }
        let pt = run(&ranks, CollOp::Bcast, Algorithm::Chain, 256, 2, 0).unwrap();
        assert_eq!(pt.algorithm, "chain");
    }

    #[test]
    fn reference_results_per_member() {
        // The references the results are compared with: one element off is a difference.
        let mut got = expected(CollOp::Allreduce, 1, 4, 3).unwrap();
        got[2] += 1;
        assert_ne!(Some(got), expected(CollOp::Allreduce, 1, 4, 3));
        assert_eq!(expected(CollOp::Reduce, 1, 4, 3), None);
        assert_eq!(
            expected(CollOp::Alltoall, 1, 2, 1),
            Some(vec![value(0, 1), value(1, 1)])
        );
    }

    #[test]
    fn a_wrong_result_is_an_error_not_a_figure() {
        let ranks: Vec<Rank> = (0..4).map(Rank).collect();
        let good: Vec<_> = (0..4).map(|me| Some(expected(CollOp::Allreduce, me, 4, 3))).collect();
        assert_eq!(compare(CollOp::Allreduce, &ranks, 3, good.clone()).unwrap(), 12);
        let mut bad = good.clone();
        if let Some(Some(v)) = &mut bad[2] {
            v[1] += 1;
        }
        let e = compare(CollOp::Allreduce, &ranks, 3, bad).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("wrong result at member 2 (rank 2): element 1 is"),
            "{e}"
        );
        let mut missing = good;
        missing[3] = None;
        assert!(compare(CollOp::Allreduce, &ranks, 3, missing).is_err());
    }

    #[test]
    fn bad_requests_are_errors() {
        let r = |op, alg, bytes, it| run(&eight(), op, alg, bytes, it, 0);
        let e = r(CollOp::Allreduce, Algorithm::Auto, 64, 0).unwrap_err();
        assert!(e.is_bad_input() && e.to_string().contains("iterations"), "{e}");
        let e = r(CollOp::Alltoall, Algorithm::Ring, 64, 1).unwrap_err();
        assert!(
            e.is_bad_input() && e.to_string().contains("auto, bruck, pairwise"),
            "{e}"
        );
        let e = r(CollOp::Allreduce, Algorithm::Auto, 12, 1).unwrap_err();
        assert!(e.is_bad_input(), "{e}");
        let odd: Vec<Rank> = (0..6).map(Rank).collect();
        let e = run(&odd, CollOp::Allgather, Algorithm::RecursiveDoubling, 64, 1, 0).unwrap_err();
        assert!(e.is_bad_input(), "{e}");
    }

    #[test]
    fn the_scenario_coll_section_sets_host_costs_and_refuses_bad_values() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/torus-8x8.toml");
        let load = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            Scenario::load(&path, &sets)
        };
        let time = |sc: Scenario| {
            let cfg = sc.coll.comm_config();
            let w = sc.world().expect("world");
            run_collective(
                w,
                &eight(),
                CollOp::Allreduce,
                Algorithm::RecursiveDoubling,
                64,
                2,
                0,
                &cfg,
            )
            .expect("runs")
            .mean_us
        };
        let base = load(&[]).expect("loads");
        assert_eq!(base.coll.comm_config(), CommConfig::default());
        let slow = load(&["coll.per_call=\"5 us\""]).expect("loads");
        assert_eq!(slow.coll.per_call, SimTime::from_us(5));
        // Every rank pays the per-call cost once per call (partly hidden behind the others'
        // waits): 4.8 us more per call shows as most of that.
        let (t0, t1) = (time(base), time(slow));
        assert!(t1 > t0 + 3.0 && t1 < t0 + 10.0, "{t0} -> {t1}");
        for (set, key) in [
            ("coll.window=0", "coll.window"),
            ("coll.chunk=\"12 B\"", "coll.chunk"),
            ("coll.reduce_rate.f64=\"0 Gb/s\"", "coll.reduce_rate.f64"),
            ("coll.bogus=1", "coll"),
        ] {
            let e = load(&[set]).expect_err(set);
            assert!(e.to_string().contains(key), "{set}: {e}");
        }
    }
}
