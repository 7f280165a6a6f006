//! Communication skeletons of NAS FT and LU on the `hpcnet-mpi` point-to-point layer (spec 05,
//! Table 2): the messages of the benchmarks (sizes, counts, partners, order) with the computation
//! between them as simulated time from a flop-rate model.
//!
//! - **FT** (3-D FFT, NPB 3.x): grid nx × ny × nz of 16-byte complex values; one forward FFT,
//!   then `niter` iterations of evolve + inverse FFT. Every FFT has one global transpose: with
//!   P ≤ nz a slab decomposition and one all-to-all among all P ranks of N·16/P² bytes per pair;
//!   above, a pencil decomposition P = p1 × p2 with one all-to-all inside each row (p1 ranks) and
//!   one inside each column (p2 ranks). Computation: 5·N·log2 N flops per FFT plus 8·N per
//!   evolve, split evenly around the transposes.
//! - **LU** (SSOR, NPB 3.x): grid n³ on a px × py process grid (px ≥ py, powers of two); every
//!   iteration a lower and an upper triangular sweep as a pipelined wavefront over the nz planes
//!   — per plane, receive from the north and west neighbours (5 doubles per boundary point),
//!   compute, send to the south and east (the upper sweep the other way) — plus the exchange of
//!   two ghost layers with the four neighbours for the right-hand side. Computation: `LU_FLOPS`
//!   per grid point per iteration (from NPB's operation count), half in the sweeps.
//!
//! Each all-to-all runs as MPICH's `MPI_Alltoall` (which NAS FT calls) does for its message
//! size: up to 32 KiB per pair, rounds of 32 shifted partners (post the round's receives, then
//! its sends, wait for all); above, pairwise exchange, one partner per round (`rank XOR i`). The
//! residual norms and checksums (a few small reductions) are left out. The skeletons never look at the data:
//! by default ([`NasConfig::payload_free`]) their buffers and the message library's are sparse
//! regions without payload bytes (the simulated times are those of real bytes, which a run
//! with real bytes checks; the library's memory account is the same). Cost: one simulated message per transfer;
//! FT sends P·(P − 1) messages per transpose, LU about 4·nz per rank per iteration.

use hpcnet_des::SimTime;
use hpcnet_mpi::{Job, JobConfig, Layout, MpiError, Policy};
use hpcnet_msg::{Machine, NicBackend, Rank};
use hpcnet_nic::World;
use std::cell::RefCell;
use std::rc::Rc;

/// Flops per grid point per LU iteration (NPB 3 operation count: ≈ 1.19·10¹¹ flops for class A,
/// 64³ points × 250 iterations).
pub const LU_FLOPS: f64 = 1820.0;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Bench {
    Ft,
    Lu,
}

/// NAS problem class.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    S,
    W,
    A,
    B,
    C,
    D,
    E,
}

impl Class {
    pub fn parse(s: &str) -> Option<Class> {
        Some(match s.to_ascii_uppercase().as_str() {
            "S" => Class::S,
            "W" => Class::W,
            "A" => Class::A,
            "B" => Class::B,
            "C" => Class::C,
            "D" => Class::D,
            "E" => Class::E,
            _ => return None,
        })
    }

    /// FT grid (nx, ny, nz) and iterations (NPB 3.x).
    pub fn ft(self) -> ([u64; 3], u32) {
        match self {
            Class::S => ([64, 64, 64], 6),
            Class::W => ([128, 128, 32], 6),
            Class::A => ([256, 256, 128], 6),
            Class::B => ([512, 256, 256], 20),
            Class::C => ([512, 512, 512], 20),
            Class::D => ([2048, 1024, 1024], 25),
            Class::E => ([4096, 2048, 2048], 25),
        }
    }

    /// LU grid edge n and iterations (NPB 3.x).
    pub fn lu(self) -> (u64, u32) {
        match self {
            Class::S => (12, 50),
            Class::W => (33, 300),
            Class::A => (64, 250),
            Class::B => (102, 250),
            Class::C => (162, 250),
            Class::D => (408, 300),
            Class::E => (1020, 300),
        }
    }
}

/// A skeleton run.
#[derive(Copy, Clone, Debug)]
pub struct NasConfig {
    pub bench: Bench,
    pub class: Class,
    pub job: JobConfig,
    /// Sustained flop rate of one process (the computation model).
    pub flops: f64,
    /// Run only this many iterations (all of the class when `None`).
    pub iterations: Option<u32>,
    /// Carry no payload bytes (sets the job's `p2p.payload_free` and registers the skeleton's
    /// buffers payload-free); false moves real bytes through the model.
    pub payload_free: bool,
}

/// What a skeleton run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct NasReport {
    pub ranks: u64,
    pub iterations: u32,
    /// Simulated run time (slowest rank).
    pub time: SimTime,
    /// Of which computation per rank (the model's).
    pub compute: SimTime,
    pub messages: u64,
    pub bytes: u64,
    /// Connections opened on demand, summed over the processes (both ends of a connection
    /// count, one per process that created a queue pair for it).
    pub on_demand: u64,
    /// Largest communication memory of a process at the end, and at start (bytes).
    pub memory_max: u64,
    pub memory_static_max: u64,
    pub rnr_retries: u64,
    /// End of the first phase (the slowest rank's): FT's forward FFT, LU's first iteration.
    /// Connections opened on demand are opened in it.
    pub first_phase: SimTime,
    /// Iterations in the first phase (0 for FT, 1 for LU).
    pub first_phase_iterations: u32,
    /// Simulated time of one iteration after the first phase: between the slowest rank's
    /// starts of the last two iterations (one that another follows), or of the last iteration
    /// when only one follows the first phase.
    pub iteration_time: Option<SimTime>,
}

impl NasReport {
    /// Simulated time of one iteration after the first phase.
    pub fn per_iteration(&self) -> Option<SimTime> {
        self.iteration_time
    }

    /// The run time of `iterations` iterations (at least the run's): the run as simulated plus
    /// the missing iterations at [`NasReport::per_iteration`]. Every iteration after the first
    /// phase sends the same messages and computes the same time; the LU wavefront of one
    /// iteration overlaps the start of the next, so the last iteration (which nothing follows)
    /// is shorter and a run needs two iterations after the first phase for a steady figure.
    pub fn extrapolated(&self, iterations: u32) -> Option<SimTime> {
        let per = self.per_iteration()?;
        let rest = u64::from(iterations.saturating_sub(self.iterations));
        Some(self.time + SimTime::from_ps(per.ps() * rest))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NasError {
    #[error("nas: {0}")]
    Config(String),
    #[error("nas: rank {0}: {1}")]
    Mpi(u32, MpiError),
    #[error("nas: {0}")]
    Setup(#[from] MpiError),
    #[error("nas: the run ended with {0} rank programs waiting (a hang)")]
    Hang(usize),
}

/// The process grid of LU: px ≥ py, both powers of two.
fn grid2(p: u64) -> (u64, u64) {
    let lg = p.trailing_zeros();
    let px = 1u64 << lg.div_ceil(2);
    (px, p / px)
}

/// Runs the skeleton on every rank of `world` (packet level).
pub fn run_nas(world: World, cfg: &NasConfig) -> Result<NasReport, NasError> {
    let per_node = u64::from(world.placement().hosts());
    run_nas_on(world, per_node, cfg)
}

/// Runs the skeleton on every rank of any NIC model (e.g. the flow-level
/// `hpcnet_flow::FlowWorld`), `per_node` processes per node.
pub fn run_nas_on<B: NicBackend + 'static>(world: B, per_node: u64, cfg: &NasConfig) -> Result<NasReport, NasError> {
    let ranks = world.ranks() as u64;
    if !ranks.is_power_of_two() {
        return Err(NasError::Config(format!(
            "{ranks} ranks: the FT and LU skeletons need a power of two"
        )));
    }
    let mut m = Machine::new(world);
    let layout = Layout::new(ranks, per_node).map_err(|e| NasError::Config(e.to_string()))?;
    let mut jc = cfg.job;
    jc.p2p.payload_free = cfg.payload_free;
    let job = Job::new(&m, layout, jc)?;
    let statics: u64 = (0..ranks as u32)
        .map(|r| job.endpoint(Rank(r)).memory().total())
        .max()
        .unwrap_or(0);
    let plan = Rc::new(plan(cfg, ranks)?);
    let counts = Rc::new(RefCell::new((0u64, 0u64)));
    let marks = Rc::new(RefCell::new(vec![SimTime::ZERO; plan.starts.len()]));
    for r in 0..ranks as u32 {
        let marks = marks.clone();
        let plan = plan.clone();
        let counts = counts.clone();
        job.spawn(&m, Rank(r), move |ep| async move {
            run_rank(ep, &plan, counts, marks).await
        });
    }
    let end = m.run();
    if let Some((r, e)) = job.errors().into_iter().next() {
        return Err(NasError::Mpi(r, e));
    }
    if end.stuck_tasks > 0 || !job.finished() {
        return Err(NasError::Hang(end.stuck_tasks));
    }
    let eps: Vec<_> = (0..ranks as u32).map(|r| job.endpoint(Rank(r))).collect();
    let (messages, bytes) = *counts.borrow();
    let marks = marks.borrow().clone();
    Ok(NasReport {
        ranks,
        iterations: plan.iterations,
        time: end.time,
        compute: plan.compute_total,
        messages,
        bytes,
        on_demand: eps.iter().map(|e| e.stats().on_demand).sum::<u64>(),
        memory_max: eps.iter().map(|e| e.memory().total()).max().unwrap_or(0),
        memory_static_max: statics,
        rnr_retries: eps.iter().map(|e| e.stats().rnr_retries).sum(),
        first_phase: marks.first().copied().unwrap_or(end.time),
        first_phase_iterations: plan.first_iterations,
        iteration_time: match marks.as_slice() {
            [] => None,
            [m] => Some(end.time - *m),
            [.., a, b] => Some(*b - *a),
        },
    })
}

/// One step of a rank program.
#[derive(Clone, Debug)]
enum Step {
    Compute(SimTime),
    /// All-to-all among the ranks of group `g` (of the plan's groups) with `bytes` per pair.
    Alltoall {
        groups: usize,
        bytes: u64,
    },
    /// Receive from the listed neighbours, then send to the listed ones (a wavefront stage).
    Wave {
        recv: [Dir; 2],
        send: [Dir; 2],
        bytes: [u64; 2],
    },
    /// Exchange `bytes[d]` with each neighbour d that exists.
    Halo {
        bytes: [u64; 2],
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Dir {
    North,
    South,
    West,
    East,
}

struct Plan {
    steps: Vec<Step>,
    iterations: u32,
    compute_total: SimTime,
    /// Steps at which the iterations after the first phase start, and the first phase's
    /// iterations.
    starts: Vec<usize>,
    first_iterations: u32,
    /// Partition kinds for all-to-alls: 0 = all ranks, 1 = rows of p1, 2 = columns.
    p1: u64,
    /// LU process grid.
    px: u64,
    py: u64,
    payload_free: bool,
}

fn secs(flops: f64, rate: f64) -> SimTime {
    SimTime::from_ps((flops / rate * 1e12).round() as u64)
}

fn plan(cfg: &NasConfig, p: u64) -> Result<Plan, NasError> {
    if cfg.flops <= 0.0 || cfg.flops.is_nan() {
        return Err(NasError::Config("flops must be positive".into()));
    }
    let mut steps = Vec::new();
    let mut compute = SimTime::ZERO;
    let (px, py) = grid2(p);
    match cfg.bench {
        Bench::Ft => {
            let ([nx, ny, nz], niter) = cfg.class.ft();
            let iters = cfg.iterations.unwrap_or(niter).min(niter);
            let n = (nx * ny * nz) as f64;
            if p > ny * nz {
                return Err(NasError::Config(format!(
                    "FT class {:?} has no decomposition for {p} ranks",
                    cfg.class
                )));
            }
            let local = nx * ny * nz * 16 / p;
            let fft = secs(5.0 * n * n.log2() / p as f64, cfg.flops);
            let evolve = secs(8.0 * n / p as f64, cfg.flops);
            let half = SimTime::from_ps(fft.ps() / 2);
            let transpose = |steps: &mut Vec<Step>| {
                if p <= nz {
                    steps.push(Step::Alltoall {
                        groups: 0,
                        bytes: local / p,
                    });
                } else {
                    steps.push(Step::Alltoall {
                        groups: 1,
                        bytes: local / px,
                    });
                    steps.push(Step::Alltoall {
                        groups: 2,
                        bytes: local / py,
                    });
                }
            };
            let mut starts = Vec::new();
            for it in 0..=iters {
                if it >= 1 {
                    starts.push(steps.len());
                }
                if it > 0 {
                    steps.push(Step::Compute(evolve));
                    compute += evolve;
                }
                steps.push(Step::Compute(half));
                transpose(&mut steps);
                steps.push(Step::Compute(half));
                compute += half + half;
            }
            Ok(Plan {
                steps,
                iterations: iters,
                compute_total: compute,
                starts,
                first_iterations: 0,
                p1: px,
                px,
                py,
                payload_free: cfg.payload_free,
            })
        }
        Bench::Lu => {
            let (n, itmax) = cfg.class.lu();
            let iters = cfg.iterations.unwrap_or(itmax).min(itmax);
            if px > n || py > n {
                return Err(NasError::Config(format!(
                    "LU class {:?} has no {px} x {py} process grid: its grid is {n} x {n} points, \
                     at least one per process in each direction; choose a larger class or fewer \
                     processes (topology.nodes × nic.hosts)",
                    cfg.class
                )));
            }
            let (lx, ly) = (n.div_ceil(px), n.div_ceil(py));
            let planes = n.saturating_sub(2).max(1);
            let points = (lx * ly * n) as f64;
            let plane_t = secs(LU_FLOPS / 4.0 * (lx * ly) as f64, cfg.flops);
            let rhs_t = secs(LU_FLOPS / 2.0 * points, cfg.flops);
            // Boundary messages: 5 doubles per point of the plane's edge.
            let edge = [5 * 8 * ly, 5 * 8 * lx];
            let ghost = [2 * 5 * 8 * ly * n, 2 * 5 * 8 * lx * n];
            let mut starts = Vec::new();
            for it in 0..iters {
                if it >= 1 {
                    starts.push(steps.len());
                }
                steps.push(Step::Halo { bytes: ghost });
                steps.push(Step::Compute(rhs_t));
                compute += rhs_t;
                for _ in 0..planes {
                    steps.push(Step::Wave {
                        recv: [Dir::North, Dir::West],
                        send: [Dir::South, Dir::East],
                        bytes: edge,
                    });
                    steps.push(Step::Compute(plane_t));
                    compute += plane_t;
                }
                for _ in 0..planes {
                    steps.push(Step::Wave {
                        recv: [Dir::South, Dir::East],
                        send: [Dir::North, Dir::West],
                        bytes: edge,
                    });
                    steps.push(Step::Compute(plane_t));
                    compute += plane_t;
                }
            }
            Ok(Plan {
                steps,
                iterations: iters,
                compute_total: compute,
                starts,
                first_iterations: iters.min(1),
                p1: px,
                px,
                py,
                payload_free: cfg.payload_free,
            })
        }
    }
}

/// Members of rank `r`'s all-to-all group of kind `g`.
fn members(plan: &Plan, p: u64, r: u64, g: usize) -> Vec<u64> {
    match g {
        0 => (0..p).collect(),
        1 => {
            let row = r / plan.p1;
            (0..plan.p1).map(|i| row * plan.p1 + i).collect()
        }
        _ => {
            let col = r % plan.p1;
            (0..p / plan.p1).map(|j| j * plan.p1 + col).collect()
        }
    }
}

/// The neighbour of `r` in direction `d` of the px × py grid (x fastest), and the index of the
/// message size that travels that way (0: across x, 1: across y).
fn neighbour(plan: &Plan, r: u64, d: Dir) -> Option<(u64, usize)> {
    let (x, y) = (r % plan.px, r / plan.px);
    match d {
        Dir::West => (x > 0).then(|| (r - 1, 0)),
        Dir::East => (x + 1 < plan.px).then(|| (r + 1, 0)),
        Dir::North => (y > 0).then(|| (r - plan.px, 1)),
        Dir::South => (y + 1 < plan.py).then(|| (r + plan.px, 1)),
    }
}

async fn run_rank(
    ep: hpcnet_mpi::Endpoint,
    plan: &Plan,
    counts: Rc<RefCell<(u64, u64)>>,
    marks: Rc<RefCell<Vec<SimTime>>>,
) -> Result<(), MpiError> {
    let p = ep.size();
    let r = u64::from(ep.rank().0);
    let largest = plan
        .steps
        .iter()
        .map(|s| match s {
            Step::Alltoall { bytes, groups } => bytes * members(plan, p, r, *groups).len() as u64,
            Step::Wave { bytes, .. } | Step::Halo { bytes } => 4 * bytes[0].max(bytes[1]),
            Step::Compute(_) => 0,
        })
        .max()
        .unwrap_or(0)
        .max(1);
    let (sbuf, rbuf) = if plan.payload_free {
        (
            ep.ctx().reg_mr_sparse(largest, largest, 0),
            ep.ctx().reg_mr_sparse(largest, largest, 0),
        )
    } else {
        (ep.ctx().reg_mr(largest), ep.ctx().reg_mr(largest))
    };
    let count = |n: u64, b: u64| {
        let mut c = counts.borrow_mut();
        c.0 += n;
        c.1 += n * b;
    };
    // The requests of one step, completed in order (`waitall` without its statuses); one
    // vector for the whole run.
    let mut qs = Vec::new();
    let mut next_start = 0;
    for (tag, s) in plan.steps.iter().enumerate() {
        if plan.starts.get(next_start) == Some(&tag) {
            let mut m = marks.borrow_mut();
            m[next_start] = m[next_start].max(ep.ctx().now());
            next_start += 1;
        }
        let tag = tag as u64;
        match s {
            Step::Compute(t) => ep.ctx().sleep(*t).await,
            Step::Alltoall { groups, bytes } => {
                let mem = members(plan, p, r, *groups);
                let me = mem.iter().position(|&x| x == r).expect("member");
                count(mem.len() as u64 - 1, *bytes);
                for round in alltoall_rounds(mem.len(), me, *bytes) {
                    for &(from, _) in &round {
                        let at = from as u64 * bytes;
                        qs.push(ep.irecv(&rbuf, at, *bytes, Some(Rank(mem[from] as u32)), Some(tag))?);
                    }
                    for &(_, to) in &round {
                        let at = to as u64 * bytes;
                        qs.push(ep.isend(&sbuf, at, *bytes, Rank(mem[to] as u32), tag)?);
                    }
                    wait_all(&ep, &mut qs).await?;
                }
            }
            Step::Wave { recv, send, bytes } => {
                for d in recv {
                    if let Some((nb, i)) = neighbour(plan, r, *d) {
                        ep.recv(&rbuf, 0, bytes[i], Some(Rank(nb as u32)), Some(tag)).await?;
                    }
                }
                for d in send {
                    if let Some((nb, i)) = neighbour(plan, r, *d) {
                        // The receiver posts with the tag of its own matching wave step: the
                        // steps of both sweeps are numbered alike on every rank.
                        qs.push(ep.isend(&sbuf, 0, bytes[i], Rank(nb as u32), tag)?);
                        count(1, bytes[i]);
                    }
                }
                wait_all(&ep, &mut qs).await?;
            }
            Step::Halo { bytes } => {
                for (j, d) in [Dir::North, Dir::South, Dir::West, Dir::East].into_iter().enumerate() {
                    if let Some((nb, i)) = neighbour(plan, r, d) {
                        qs.push(ep.irecv(&rbuf, j as u64 * bytes[i], bytes[i], Some(Rank(nb as u32)), Some(tag))?);
                    }
                }
                for d in [Dir::North, Dir::South, Dir::West, Dir::East] {
                    if let Some((nb, i)) = neighbour(plan, r, d) {
                        qs.push(ep.isend(&sbuf, 0, bytes[i], Rank(nb as u32), tag)?);
                        count(1, bytes[i]);
                    }
                }
                wait_all(&ep, &mut qs).await?;
            }
        }
    }
    Ok(())
}

/// Completes the requests of `qs` in order, as [`hpcnet_mpi::Endpoint::waitall`] does
/// (without collecting their statuses), and empties `qs`.
async fn wait_all(ep: &hpcnet_mpi::Endpoint, qs: &mut Vec<hpcnet_mpi::Request>) -> Result<(), MpiError> {
    for q in qs.drain(..) {
        ep.wait(q).await?;
    }
    Ok(())
}

/// Largest message per pair (bytes) of the all-to-all's medium algorithm; above it, pairwise
/// exchange (MPICH's `MPIR_CVAR_ALLTOALL_MEDIUM_MSG_SIZE` default).
pub const ALLTOALL_MEDIUM: u64 = 32768;
/// Receives and sends the medium algorithm posts at a time (MPICH's
/// `MPIR_CVAR_ALLTOALL_THROTTLE` default).
pub const ALLTOALL_THROTTLE: usize = 32;

/// The rounds of an all-to-all among `k` members as MPICH's `MPI_Alltoall` runs them, seen from
/// member `me`, with `bytes` per pair: each round is a list of (receive from, send to) member
/// indices that are posted together and completed before the next round. Up to
/// [`ALLTOALL_MEDIUM`] bytes, rounds of [`ALLTOALL_THROTTLE`] shifted partners (receive from
/// me + i, send to me − i); above, one partner per round, `me XOR i` for i = 1 … k − 1 (k a
/// power of two, as FT's groups are; otherwise receive from me − i and send to me + i). The
/// member itself is left out (no message to self). Short messages (MPICH's Bruck algorithm up to
/// 256 B) take the medium rounds.
fn alltoall_rounds(k: usize, me: usize, bytes: u64) -> Vec<Vec<(usize, usize)>> {
    if bytes > ALLTOALL_MEDIUM {
        (1..k)
            .map(|i| {
                if k.is_power_of_two() {
                    vec![(me ^ i, me ^ i)]
                } else {
                    vec![((me + k - i) % k, (me + i) % k)]
                }
            })
            .collect()
    } else {
        (0..k)
            .step_by(ALLTOALL_THROTTLE)
            .map(|start| {
                (start..(start + ALLTOALL_THROTTLE).min(k))
                    .filter(|&i| i != 0)
                    .map(|i| ((me + i) % k, (me + k - i) % k))
                    .collect::<Vec<_>>()
            })
            .filter(|r| !r.is_empty())
            .collect()
    }
}

/// Parses a policy for the skeletons (see [`Policy::parse`]).
pub fn policy(s: &str) -> Result<Policy, NasError> {
    Policy::parse(s).map_err(|e| NasError::Config(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;
    use hpcnet_mpi::Transport;
    use std::path::Path;

    fn world(nodes: u32) -> World {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/ib-qdr-fattree.toml");
        Scenario::load(&path, &[format!("topology.nodes={nodes}")])
            .expect("scenario")
            .world()
            .expect("world")
    }

    pub(super) fn cfg(bench: Bench, policy: Policy, iterations: u32) -> NasConfig {
        NasConfig {
            bench,
            class: Class::S,
            job: JobConfig::new(policy),
            flops: 1e9,
            iterations: Some(iterations),
            payload_free: true,
        }
    }

    #[test]
    fn ft_runs_under_full_and_group_connection_with_the_expected_messages() {
        // 8 nodes x 4 = 32 ranks; FT class S (64^3): slab transposes among all 32 ranks.
        let full = run_nas(world(8), &cfg(Bench::Ft, Policy::full(Transport::RcSrq), 1)).unwrap();
        let group = run_nas(world(8), &cfg(Bench::Ft, Policy::grouped(Transport::XrcS, 8), 1)).unwrap();
        // Two transposes (forward FFT + one iteration), 32 x 31 messages of 64^3*16/32^2 B each.
        for r in [&full, &group] {
            assert_eq!(r.messages, 2 * 32 * 31);
            assert_eq!(r.bytes, 2 * 32 * 31 * (64 * 64 * 64 * 16 / 1024));
            assert!(r.time > r.compute, "communication takes time");
        }
        assert_eq!(full.on_demand, 0);
        // Groups of 8 ranks (2 nodes): every rank's all-to-all partners outside its group and
        // index need a connection; under XRC one per remote node.
        assert!(group.on_demand > 0);
        assert!(group.memory_static_max < full.memory_static_max);
        assert!(group.memory_max >= group.memory_static_max);
        // Deterministic.
        let again = run_nas(world(8), &cfg(Bench::Ft, Policy::grouped(Transport::XrcS, 8), 1)).unwrap();
        assert_eq!(group, again);
    }

    #[test]
    fn per_iteration_time_reproduces_the_run_it_was_taken_from() {
        // FT: the forward FFT, then 3 identical iterations; LU: a first iteration, then 2.
        // FT under RC_SRQ: under XRC_S_G4 a process has 4 SRQ buffers for 15 senders of
        // requests-to-send, and the RNR retries of requests that reach a computing process
        // make iteration times differ by up to a third from one iteration to the next.
        for (bench, policy, it) in [
            (Bench::Ft, Policy::full(Transport::RcSrq), 3),
            (Bench::Lu, Policy::grouped(Transport::XrcS, 4), 3),
        ] {
            let r = run_nas(world(4), &cfg(bench, policy, it)).unwrap();
            assert!(r.first_phase > SimTime::ZERO && r.first_phase < r.time, "{r:?}");
            let per = r.per_iteration().expect("steady iterations");
            assert_eq!(r.extrapolated(it), Some(r.time));
            // One iteration more costs one per-iteration time more (within 1 % of it: the LU
            // wavefront of one iteration overlaps the next, so iteration times settle slowly).
            let longer = run_nas(world(4), &cfg(bench, policy, it + 1)).unwrap();
            let err = (longer.time.as_secs_f64() - r.extrapolated(it + 1).unwrap().as_secs_f64()).abs();
            assert!(err <= 0.01 * per.as_secs_f64(), "{bench:?}: {longer:?} vs {r:?}");
        }
        // A single LU iteration has no steady part.
        let one = run_nas(world(4), &cfg(Bench::Lu, Policy::full(Transport::RcSrq), 1)).unwrap();
        assert_eq!((one.first_phase, one.per_iteration()), (one.time, None));
    }

    #[test]
    fn lu_wavefront_runs_with_neighbour_messages_only() {
        // 16 ranks: 4 x 4 grid, class S n = 12: 3 x 3 points per rank.
        let r = run_nas(world(4), &cfg(Bench::Lu, Policy::full(Transport::RcSrq), 2)).unwrap();
        let g4 = run_nas(world(4), &cfg(Bench::Lu, Policy::grouped(Transport::XrcS, 4), 2)).unwrap();
        let g2 = run_nas(world(4), &cfg(Bench::Lu, Policy::grouped(Transport::RcSrq, 2), 2)).unwrap();
        // Per iteration: halo 2 x 2 x (4 x 3) = 48 messages, each sweep 10 planes x 24 edges.
        assert_eq!(r.messages, 2 * (48 + 2 * 10 * 24));
        assert_eq!(r.messages, g4.messages);
        assert!(r.time > r.compute);
        // Groups of 4 are the grid's rows and the same index its columns: every neighbour is
        // a static partner. Groups of 2 split the rows: east-west pairs 1-2 connect on demand.
        assert_eq!(g4.on_demand, 0);
        assert!(g2.on_demand > 0);
        assert!(g2.time >= r.time);
    }

    #[test]
    fn payload_free_runs_time_like_real_bytes() {
        // The same FT and LU runs with real bytes and without payload: identical reports
        // (times, messages, connections, memory account), at packet level.
        for (bench, policy, it) in [
            (Bench::Ft, Policy::full(Transport::RcSrq), 1),
            (Bench::Ft, Policy::grouped(Transport::XrcS, 8), 1),
            (Bench::Lu, Policy::grouped(Transport::RcSrq, 2), 2),
            (Bench::Ft, Policy::full(Transport::Ud), 1),
        ] {
            let free = cfg(bench, policy, it);
            let real = NasConfig {
                payload_free: false,
                ..free
            };
            let nodes = if bench == Bench::Ft { 8 } else { 4 };
            let a = run_nas(world(nodes), &free).unwrap();
            let b = run_nas(world(nodes), &real).unwrap();
            assert_eq!(a, b, "{bench:?} {policy}");
        }
    }

    #[test]
    fn alltoall_rounds_pair_every_member_once_and_match_across_members() {
        // Medium (throttled rounds, also a short last round) and pairwise (power of two and
        // not), as MPICH's MPI_Alltoall.
        for (k, bytes) in [
            (8, 1024),
            (70, 1024),
            (64, ALLTOALL_MEDIUM),
            (64, ALLTOALL_MEDIUM + 1),
            (6, 65536),
        ] {
            let all: Vec<_> = (0..k).map(|me| alltoall_rounds(k, me, bytes)).collect();
            let medium = bytes <= ALLTOALL_MEDIUM;
            for (me, rounds) in all.iter().enumerate() {
                let expect_rounds = if medium { k.div_ceil(ALLTOALL_THROTTLE) } else { k - 1 };
                assert_eq!(rounds.len(), expect_rounds, "k {k} bytes {bytes}");
                let mut from: Vec<usize> = rounds.iter().flatten().map(|p| p.0).collect();
                let mut to: Vec<usize> = rounds.iter().flatten().map(|p| p.1).collect();
                from.sort_unstable();
                to.sort_unstable();
                let others: Vec<usize> = (0..k).filter(|&j| j != me).collect();
                assert_eq!((&from, &to), (&others, &others), "k {k} me {me}");
                for (t, round) in rounds.iter().enumerate() {
                    assert!(round.len() <= if medium { ALLTOALL_THROTTLE } else { 1 });
                    // Whoever `me` sends to in round t receives from `me` in the same round:
                    // no round waits for a partner's later round.
                    for &(_, dst) in round {
                        assert!(all[dst][t].iter().any(|p| p.0 == me), "k {k} round {t}: {me} -> {dst}");
                    }
                }
            }
        }
        assert_eq!(
            alltoall_rounds(8, 5, 65536)[0..3],
            [vec![(4, 4)], vec![(7, 7)], vec![(6, 6)]]
        );
    }

    #[test]
    fn bad_configurations_are_errors() {
        let e = run_nas(world(3), &cfg(Bench::Ft, Policy::full(Transport::Rc), 1)).unwrap_err();
        assert!(e.to_string().contains("power of two"), "{e}");
        let mut c = cfg(Bench::Lu, Policy::full(Transport::Rc), 1);
        c.flops = 0.0;
        assert!(run_nas(world(4), &c).is_err());
        assert_eq!(Class::parse("e"), Some(Class::E));
        assert_eq!(Class::parse("x"), None);
    }
}

#[cfg(test)]
mod flow_tests {
    use super::*;
    use crate::Scenario;
    use hpcnet_mpi::Transport;
    use std::path::Path;

    fn scenario(nodes: u32) -> Scenario {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/ib-qdr-fattree.toml");
        Scenario::load(&path, &[format!("topology.nodes={nodes}")]).unwrap()
    }

    /// The same skeleton at packet level and at flow level.
    fn both(nodes: u32, bench: Bench, policy: Policy, iterations: u32) -> (NasReport, NasReport) {
        let sc = scenario(nodes);
        let cfg = super::tests::cfg(bench, policy, iterations);
        let packet = run_nas(sc.world().unwrap(), &cfg).unwrap();
        let flow = run_nas_on(sc.flow_world().unwrap(), u64::from(sc.nic.hosts), &cfg).unwrap();
        (packet, flow)
    }

    /// Local max-min sharing (`mpi.flow_local_depth`) delivers the same messages, stays within
    /// 10 % of exact sharing on these runs, and is deterministic.
    #[test]
    fn local_sharing_is_close_to_exact_and_deterministic() {
        for (nodes, bench, policy, it) in [
            (16, Bench::Ft, Policy::grouped(Transport::XrcS, 16), 2),
            (16, Bench::Lu, Policy::full(Transport::RcSrq), 3),
        ] {
            let sc = scenario(nodes);
            let cfg = super::tests::cfg(bench, policy, it);
            let exact = run_nas_on(sc.flow_world().unwrap(), 4, &cfg).unwrap();
            for depth in [1, 2] {
                let run = || {
                    let mut w = sc.flow_world().unwrap();
                    w.set_local_sharing(Some(depth));
                    run_nas_on(w, 4, &cfg).unwrap()
                };
                let local = run();
                assert_eq!(local, run(), "{bench:?} depth {depth}: deterministic");
                assert_eq!((local.messages, local.bytes), (exact.messages, exact.bytes));
                let (e, l) = (exact.time.as_secs_f64(), local.time.as_secs_f64());
                assert!((l / e - 1.0).abs() <= 0.10, "{bench:?} depth {depth}: {l} vs exact {e}");
            }
        }
    }

    /// The flow-level run of the shipped fat tree at `nodes` nodes with one more scenario key
    /// set, run twice (asserted identical); returns the scenario too, to check the key landed.
    fn flow_with_key(nodes: u32, key: String, bench: Bench, policy: Policy, it: u32) -> (Scenario, NasReport) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/ib-qdr-fattree.toml");
        let sc = Scenario::load(&path, &[format!("topology.nodes={nodes}"), key]).unwrap();
        let cfg = super::tests::cfg(bench, policy, it);
        let run = || run_nas_on(sc.flow_world().unwrap(), 4, &cfg).unwrap();
        let r = run();
        assert_eq!(r, run(), "{bench:?}: deterministic");
        (sc, r)
    }

    /// `got`'s run time is within 10 % of `reference`'s.
    fn assert_within_ten_percent(bench: Bench, got: &NasReport, name: &str, reference: &NasReport) {
        let err = got.time.as_secs_f64() / reference.time.as_secs_f64() - 1.0;
        assert!(
            err.abs() <= 0.10,
            "{bench:?}: {:?} against {name} {:?} ({:+.2} %)",
            got.time,
            reference.time,
            err * 100.0
        );
    }

    /// Small messages outside max-min sharing (`mpi.flow_small_message`): same messages and
    /// connections, run time within 10 % of exact flow sharing and of packet level, and
    /// deterministic; the key set through the scenario reaches the model.
    #[test]
    fn small_messages_outside_sharing_stay_within_ten_percent() {
        for (nodes, bench, policy, it, limit) in [
            // LU class S at 64 ranks: every wavefront message is small, the ghost exchange not.
            (16, Bench::Lu, Policy::grouped(Transport::XrcS, 16), 3, 1024),
            // FT class S at 64 ranks: eager messages of 4 KiB + header, all short; the shifted
            // all-to-all gives each receiver one message at a time, so the run matches exact
            // sharing to the picosecond (the bound is what is checked).
            (16, Bench::Ft, Policy::full(Transport::RcSrq), 2, 8192),
        ] {
            let (packet, exact) = both(nodes, bench, policy, it);
            let (sc, small) = flow_with_key(nodes, format!("mpi.flow_small_message={limit}"), bench, policy, it);
            assert_eq!(sc.mpi_flow_small_message, limit);
            assert_eq!(
                (small.messages, small.bytes, small.on_demand),
                (exact.messages, exact.bytes, exact.on_demand)
            );
            if bench == Bench::Lu {
                assert_ne!(small.time, exact.time, "LU: the short path was taken");
            }
            for (name, r) in [("exact flow", &exact), ("packet", &packet)] {
                assert_within_ten_percent(bench, &small, name, r);
            }
        }
    }

    /// The port FIFO (`mpi.flow_port_fifo`): same messages and connections, deterministic, a
    /// different run time than the engine held to the end (the key reaches the model), and
    /// within 10 % of packet level.
    #[test]
    fn port_fifo_stays_within_ten_percent_of_packet_level() {
        for (nodes, bench, policy, it) in [
            (16, Bench::Ft, Policy::grouped(Transport::XrcS, 16), 2),
            (16, Bench::Lu, Policy::grouped(Transport::XrcS, 16), 3),
        ] {
            let (packet, exact) = both(nodes, bench, policy, it);
            let (sc, fifo) = flow_with_key(nodes, "mpi.flow_port_fifo=true".to_string(), bench, policy, it);
            assert!(sc.mpi_flow_port_fifo);
            assert_eq!(
                (fifo.messages, fifo.bytes, fifo.on_demand),
                (exact.messages, exact.bytes, exact.on_demand)
            );
            assert_ne!(fifo.time, exact.time, "{bench:?}: the port FIFO was used");
            assert_within_ten_percent(bench, &fifo, "packet", &packet);
        }
    }

    /// The flow-level mode's validation on small runs: completion time within 10 % of packet
    /// level, same messages and connections.
    #[test]
    fn flow_level_agrees_with_packet_level_within_ten_percent() {
        for (nodes, bench, policy, it) in [
            (8, Bench::Ft, Policy::full(Transport::RcSrq), 1),
            (8, Bench::Ft, Policy::grouped(Transport::XrcS, 8), 1),
            (4, Bench::Lu, Policy::full(Transport::RcSrq), 2),
            // The largest runs of `ib-nas --quick`: 64 ranks, groups of 16.
            (16, Bench::Ft, Policy::grouped(Transport::XrcS, 16), 2),
            (16, Bench::Lu, Policy::grouped(Transport::XrcS, 16), 3),
        ] {
            let (p, f) = both(nodes, bench, policy, it);
            assert_eq!((p.messages, p.bytes, p.on_demand), (f.messages, f.bytes, f.on_demand));
            let err = (f.time.as_secs_f64() - p.time.as_secs_f64()) / p.time.as_secs_f64();
            assert!(
                err.abs() <= 0.10,
                "{bench:?} {policy}: packet {:?} flow {:?} ({:+.1} %)",
                p.time,
                f.time,
                err * 100.0
            );
        }
    }

    #[test]
    fn ft_iteration_transpose_takes_as_long_as_the_forward_one() {
        // FT class C at 64 ranks: 512 KiB rendezvous per pair (pairwise exchange). The
        // iteration's transpose moves the same messages as the forward FFT's; the ranks enter
        // it a little apart (they left the first one at different times). With every send
        // posted at once that skew let the nodes' message engines serve read requests in an
        // order that held them on flows slowed at their receivers: 37.0 ms against 98.6 ms.
        let sc = scenario(16);
        let cfg = NasConfig {
            class: Class::C,
            ..super::tests::cfg(Bench::Ft, Policy::full(Transport::RcSrq), 1)
        };
        let r = run_nas_on(sc.flow_world().unwrap(), u64::from(sc.nic.hosts), &cfg).unwrap();
        let n = (512u64 * 512 * 512) as f64;
        let fft = 5.0 * n * n.log2() / 64.0 / 1e9;
        let evolve = 8.0 * n / 64.0 / 1e9;
        let first = r.first_phase.as_secs_f64() - fft;
        let second = r.per_iteration().unwrap().as_secs_f64() - fft - evolve;
        assert!(first > 0.02 && second > 0.02, "{r:?}");
        assert!(
            (second / first - 1.0).abs() <= 0.10,
            "transposes {first} s and {second} s"
        );
    }

    #[test]
    fn payload_free_flow_runs_time_like_real_bytes() {
        // Rendezvous (FT class S at 64 ranks: 4 KiB + header per pair), eager (LU) and
        // XRC_M, on the flow-level model: identical reports with and without payload.
        for (nodes, bench, policy, it) in [
            (16, Bench::Ft, Policy::grouped(Transport::XrcS, 16), 2),
            (16, Bench::Lu, Policy::full(Transport::RcSrq), 3),
            (4, Bench::Ft, Policy::full(Transport::XrcM), 1),
        ] {
            let sc = scenario(nodes);
            let free = super::tests::cfg(bench, policy, it);
            let real = NasConfig {
                payload_free: false,
                ..free
            };
            let a = run_nas_on(sc.flow_world().unwrap(), 4, &free).unwrap();
            let b = run_nas_on(sc.flow_world().unwrap(), 4, &real).unwrap();
            assert_eq!(a, b, "{bench:?} {policy}");
        }
    }

    #[test]
    fn single_message_latency_and_bandwidth_agree() {
        use hpcnet_mpi::{Job, Layout};
        use hpcnet_msg::{Machine, Rank};
        // Half a round trip of an eager 80 B message and of a 200 KB rendezvous message
        // between two nodes (ranks 0 and 4).
        fn pingpong<B: NicBackend + 'static>(w: B, len: u64) -> f64 {
            let mut m = Machine::new(w);
            let n = m.context(Rank(0)).size() as u64;
            let job = Job::new(
                &m,
                Layout::new(n, 4).unwrap(),
                JobConfig::new(Policy::full(Transport::RcSrq)),
            )
            .unwrap();
            for r in 0..n as u32 {
                job.spawn(&m, Rank(r), move |ep| async move {
                    let mr = ep.ctx().reg_mr(len);
                    for _ in 0..5 {
                        if r == 0 {
                            ep.send(&mr, 0, len, Rank(4), 0).await?;
                            ep.recv(&mr, 0, len, Some(Rank(4)), Some(0)).await?;
                        } else if r == 4 {
                            ep.recv(&mr, 0, len, Some(Rank(0)), Some(0)).await?;
                            ep.send(&mr, 0, len, Rank(0), 0).await?;
                        }
                    }
                    Ok(())
                });
            }
            m.run().time.as_us_f64() / 10.0
        }
        let sc = scenario(2);
        for len in [80u64, 200_000] {
            let p = pingpong(sc.world().unwrap(), len);
            let f = pingpong(sc.flow_world().unwrap(), len);
            assert!(((f - p) / p).abs() <= 0.10, "{len} B: packet {p:.3} us, flow {f:.3} us");
        }
    }

    #[test]
    fn flow_level_delivers_every_byte_under_every_kind_of_policy() {
        use hpcnet_mpi::{Job, Layout};
        use hpcnet_msg::{Machine, Rank};
        let pattern =
            |s: u32, d: u32, len: u64| -> Vec<u8> { (0..len).map(|i| (i as u32 ^ (s * 31 + d * 7)) as u8).collect() };
        // XRC_M on 4 nodes: 4 connections leave the two largest of six classes without buffers;
        // 5000 B messages then go by rendezvous.
        for p in ["rc", "rc-srq", "xrc-m", "xrc-s-g4", "ud"] {
            let mut m = Machine::new(scenario(4).flow_world().unwrap());
            let job = Job::new(
                &m,
                Layout::new(16, 4).unwrap(),
                JobConfig::new(Policy::parse(p).unwrap()),
            )
            .unwrap();
            for r in 0..16u32 {
                job.spawn(&m, Rank(r), move |ep| async move {
                    let len = |s: u32, d: u32| [0u64, 100, 5000, 40_000][((s + d) % 4) as usize];
                    let mut recvs = Vec::new();
                    for s in (0..16).filter(|&s| s != r) {
                        let mr = ep.ctx().reg_mr(len(s, r).max(1));
                        recvs.push((s, ep.irecv(&mr, 0, len(s, r), Some(Rank(s)), Some(1))?, mr));
                    }
                    let mut sends = Vec::new();
                    for d in (0..16).filter(|&d| d != r) {
                        let mr = ep.ctx().reg_mr(len(r, d).max(1));
                        ep.ctx().write_local(&mr, 0, &pattern(r, d, len(r, d)))?;
                        sends.push((ep.isend(&mr, 0, len(r, d), Rank(d), 1)?, mr));
                    }
                    for (s, q, mr) in recvs {
                        ep.wait(q).await?;
                        assert_eq!(ep.ctx().read_local(&mr, 0, len(s, r))?, pattern(s, r, len(s, r)));
                    }
                    for (q, _) in sends {
                        ep.wait(q).await?;
                    }
                    Ok(())
                });
            }
            let end = m.run();
            assert_eq!(job.errors(), vec![], "{p}");
            assert!(job.finished() && end.stuck_tasks == 0, "{p}");
        }
    }

    /// RC_SRQ's buffers are posted as one run and their header slots held only while a message
    /// is in them: every message of three rounds of all-pairs exchange (each SRQ buffer used
    /// three times, eager and rendezvous) arrives from the right source with the right tag,
    /// length and (with real bytes) bytes, and the memory account is spec 05's RC + SRQ formula.
    #[test]
    fn count_held_srq_delivers_every_message_and_accounts_the_formula() {
        use hpcnet_mpi::{Job, Layout, Transport};
        use hpcnet_msg::{Machine, Rank};
        const N: u32 = 16;
        const ROUNDS: u64 = 3;
        let pattern = |s: u32, d: u32, k: u64, len: u64| -> Vec<u8> {
            (0..len)
                .map(|i| (i as u32 ^ (s * 31 + d * 7 + k as u32 * 3)) as u8)
                .collect()
        };
        let len = |s: u32, d: u32, k: u64| [0u64, 100, 8000, 20_000][((u64::from(s + d) + k) % 4) as usize];
        for payload_free in [false, true] {
            let mut m = Machine::new(scenario(4).flow_world().unwrap());
            let mut cfg = JobConfig::new(Policy::full(Transport::RcSrq));
            cfg.p2p.payload_free = payload_free;
            let job = Job::new(&m, Layout::new(u64::from(N), 4).unwrap(), cfg).unwrap();
            let checked = Rc::new(RefCell::new(0u64));
            for r in 0..N {
                let checked = checked.clone();
                job.spawn(&m, Rank(r), move |ep| async move {
                    let ctx = ep.ctx().clone();
                    let mr = |n: u64| {
                        if payload_free {
                            ctx.reg_mr_sparse(n.max(1), n.max(1), 0)
                        } else {
                            ctx.reg_mr(n.max(1))
                        }
                    };
                    let mut recvs = Vec::new();
                    let mut sends = Vec::new();
                    for k in 0..ROUNDS {
                        for s in (0..N).filter(|&s| s != r) {
                            let b = mr(len(s, r, k));
                            recvs.push((s, k, ep.irecv(&b, 0, len(s, r, k), Some(Rank(s)), Some(k))?, b));
                        }
                        for d in (0..N).filter(|&d| d != r) {
                            let b = mr(len(r, d, k));
                            if !payload_free {
                                ctx.write_local(&b, 0, &pattern(r, d, k, len(r, d, k)))?;
                            }
                            sends.push((ep.isend(&b, 0, len(r, d, k), Rank(d), k)?, b));
                        }
                    }
                    for (s, k, q, b) in recvs {
                        let st = ep.wait(q).await?;
                        assert_eq!((st.source, st.tag, st.len), (Rank(s), k, len(s, r, k)));
                        if !payload_free {
                            assert_eq!(ctx.read_local(&b, 0, len(s, r, k))?, pattern(s, r, k, len(s, r, k)));
                        }
                        *checked.borrow_mut() += 1;
                    }
                    for (q, _) in sends {
                        ep.wait(q).await?;
                    }
                    Ok(())
                });
            }
            let end = m.run();
            assert_eq!(job.errors(), vec![], "payload-free {payload_free}");
            assert!(job.finished() && end.stuck_tasks == 0);
            let n = u64::from(N);
            assert_eq!(*checked.borrow(), ROUNDS * n * (n - 1), "exactly every message");
            // Spec 05, RC + SRQ: s1·(N−1) + sd·s2·(N−1) + s2·(N−1), s1 = 8192, sd = 16, s2 = 64.
            for r in 0..N {
                let a = job.endpoint(Rank(r)).memory();
                assert_eq!(a.total(), 8192 * (n - 1) + 16 * 64 * (n - 1) + 64 * (n - 1), "rank {r}");
                assert_eq!((a.srqs, a.buffers), (1, n - 1));
            }
        }
    }
}
