//! `torus-shmem`: the NICEVT 3D-torus SHMEM figures (spec 03, "Prototype figures" and
//! "Published results") — neighbour put latency, message rate and its M3/M2 ratio, fast against
//! classic barrier, owner-update against reader-get RandomAccess — and the comparisons with an
//! InfiniBand fat tree on one set of host and library models: barrier, RandomAccess, IMB
//! PingPong and IMB Bcast.
//!
//! Machines: `scenarios/nicevt-m3.toml` (8×8×8) and `scenarios/nicevt-m2.toml` (8×8), one PE per
//! node; `scenarios/ib-qdr-fattree.toml` with one process per node (`nic.hosts = 1`; the
//! comparisons are per node) for InfiniBand QDR, and the same with 5 Gb/s lanes
//! (`link.lane_rate`: DDR 4x, 16 Gb/s of data) for InfiniBand DDR.
//!
//! **Readings** (the paper's figures give no exact set-up; each choice is written here and in
//! the report's discrepancies):
//! - *Neighbour latency*: half the round trip of the SHMEM put ping-pong (8 B, fence, flag)
//!   between PEs 0 and 1, x-neighbours on the torus.
//! - *Message rate*: one PE putting 8-byte messages to its x-neighbour (`shmem_putmem`, quiet at
//!   the end): packets per second of one NIC.
//! - *Fast against classic barrier*: the mean over 2, 4, …, 64 PEs (16 in quick runs) of the
//!   classic/fast latency ratio on M3.
//! - *RandomAccess*: HPCC RandomAccess on the 64 PEs of M2 (16 in quick runs), 2^10 table words
//!   per PE; "owner puts" is the remote-xor variant (one packet per update), "reader gets" the
//!   get + xor + put variant.
//! - *InfiniBand barrier*: the MPI barrier of the collectives layer (dissemination, the MPICH and
//!   MVAPICH choice) over verbs; the torus side is the SHMEM fast barrier on M3.
//! - *InfiniBand RandomAccess "with verbs"*: the same SHMEM program on the InfiniBand machine,
//!   with the NIC's atomics (InfiniBand verbs have fetch-add and compare-swap, not xor; the
//!   reading favours InfiniBand).
//! - *IMB PingPong and Bcast*: the MPI-like layer (`hpcnet-mpi`, scenario `[mpi]` defaults) and
//!   the collectives layer's binomial broadcast on 6 nodes (the M2 prototype's size), on both
//!   machines with the same host software model.
//!
//! **Roles.** Nothing is fitted (no calibration rows). The neighbour latency, the message rate,
//! the M3/M2 rate ratio and the fast/classic barrier ratio are **post-hoc**: the write-combined
//! PIO send path of the NICEVT scenarios (`nic.pio_limit`) they depend on was chosen knowing
//! that the DMA-descriptor path gives 1.63 µs and 1.5 M messages/s, and the barrier reading
//! knowing the model's ratio. The barrier comparisons with InfiniBand and both RandomAccess
//! claims are **post-hoc** too: the SHMEM host cost model (`[shmem]`) they depend on was chosen
//! after they had been compared (the barrier comparison at 2 and 4 nodes failing without it). The
//! IMB PingPong and Bcast comparisons are **predictions**, fixed before they were first
//! compared.

use crate::{Ctx, Row, Study, StudyError, StudyReport};
use hpcnet_coll::Algorithm;
use hpcnet_shmem::BarrierKind;
use hpcnet_workloads::coll::{run_collective, CollOp};
use hpcnet_workloads::imb;
use hpcnet_workloads::shmem::{barrier, put_pingpong, put_rate, random_access, RaVariant, ShmemBenchError};
use hpcnet_workloads::{Rank, Scenario};

const M3_TOML: &str = include_str!("../../../scenarios/nicevt-m3.toml");
const M3_PATH: &str = "scenarios/nicevt-m3.toml";
const M2_TOML: &str = include_str!("../../../scenarios/nicevt-m2.toml");
const M2_PATH: &str = "scenarios/nicevt-m2.toml";
const IB_TOML: &str = include_str!("../../../scenarios/ib-qdr-fattree.toml");
const IB_PATH: &str = "scenarios/ib-qdr-fattree.toml";

// Published figures (spec/03-torus-shmem.md, "Prototype figures" and "Published results").
/// M3 neighbour latency bound, µs.
const PAPER_NEIGHBOUR_US: f64 = 1.2;
/// M3 message rate, packets per second.
const PAPER_RATE: f64 = 14.9e6;
/// M3 message rate over M2's.
const PAPER_RATE_RATIO: f64 = 1.8;
/// Fast barrier at least this many times faster than the classic one, on average.
const PAPER_FAST_GAIN: f64 = 2.0;
/// IMB Bcast: M2 latency this fraction lower than InfiniBand DDR up to 1 KB.
const PAPER_BCAST_REDUCTION: f64 = 0.70;
/// RandomAccess: M2 more than this many times InfiniBand QDR with verbs.
const PAPER_RA_GAIN: f64 = 2.0;

/// Tolerance of valued predictions.
const TOLERANCE: f64 = 0.20;
/// "Equal" barrier latency: within this factor either way.
const EQUAL_FACTOR: f64 = 1.3;
/// "Several times slower": at least this factor.
const SEVERAL: f64 = 2.0;
/// "Slightly behind" on large PingPong messages: the torus reaches at least this fraction of
/// InfiniBand's bandwidth.
const SLIGHTLY: f64 = 0.7;

/// Which machine a point runs on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Machine {
    M3,
    M2,
    IbQdr,
    IbDdr,
}

/// One simulated point.
#[derive(Clone, Debug, PartialEq)]
enum Job {
    PutLatency(Machine),
    Rate(Machine),
    ShmemBarrier(Machine, BarrierKind, usize),
    MpiBarrier(Machine, usize),
    RandomAccess(Machine, RaVariant),
    PingPong(Machine, u64),
    Bcast(Machine, u64),
}

struct Machines {
    m3: Scenario,
    m2: Scenario,
    qdr: Scenario,
    ddr: Scenario,
}

impl Machines {
    fn get(&self, m: Machine) -> (&Scenario, &'static str) {
        match m {
            Machine::M3 => (&self.m3, M3_PATH),
            Machine::M2 => (&self.m2, M2_PATH),
            Machine::IbQdr => (&self.qdr, IB_PATH),
            Machine::IbDdr => (&self.ddr, IB_PATH),
        }
    }
}

/// Sizes of the scaled-down quick run and the full run.
struct Sizes {
    barrier_pes: Vec<usize>,
    ib_pes: Vec<usize>,
    ra_pes: usize,
    ra_updates: u64,
    iterations: u64,
    pingpong: Vec<u64>,
    bcast: Vec<u64>,
}

fn sizes(quick: bool) -> Sizes {
    if quick {
        Sizes {
            barrier_pes: vec![2, 4, 8, 16],
            ib_pes: vec![2, 4, 16],
            ra_pes: 16,
            ra_updates: 256,
            iterations: 10,
            pingpong: vec![8, 1 << 20],
            bcast: vec![8],
        }
    } else {
        Sizes {
            barrier_pes: vec![2, 4, 8, 16, 32, 64],
            ib_pes: vec![2, 4, 16, 64],
            ra_pes: 64,
            ra_updates: 2048,
            iterations: 50,
            pingpong: vec![8, 64, 512, 2048, 1 << 20],
            bcast: vec![8, 128, 1024],
        }
    }
}

/// Table words per PE (log2) of the RandomAccess runs.
const RA_LOG_LOCAL: u32 = 10;
/// Bcast participants: the M2 prototype's six nodes.
const BCAST_NODES: u32 = 6;

fn shmem_err(path: &str, what: &str, e: ShmemBenchError) -> StudyError {
    match e {
        ShmemBenchError::Call(_) => StudyError::Unsupported(format!("{path}: {what}: {e}")),
        ShmemBenchError::Stuck(_) => StudyError::Model(format!("{path}: {what}: {e}")),
    }
}

/// The job's figure: µs for latencies, packets/s for rates, GUPS for RandomAccess, MB/s for
/// PingPong bandwidth at 1 MiB (latency otherwise).
fn simulate(ms: &Machines, job: &Job, s: &Sizes) -> Result<f64, StudyError> {
    let machine = match job {
        Job::PutLatency(m)
        | Job::Rate(m)
        | Job::ShmemBarrier(m, ..)
        | Job::MpiBarrier(m, _)
        | Job::RandomAccess(m, _)
        | Job::PingPong(m, _)
        | Job::Bcast(m, _) => *m,
    };
    let (sc, path) = ms.get(machine);
    let cfg = sc.shmem_config();
    let world = sc.world()?;
    let it = s.iterations;
    Ok(match job {
        Job::PutLatency(_) => {
            put_pingpong(world, 2, 0, 1, 8, it, &cfg)
                .map_err(|e| shmem_err(path, "put ping-pong", e))?
                .latency_us
        }
        Job::Rate(_) => {
            put_rate(world, 2, &[(0, 1)], 8, 10 * it, &cfg)
                .map_err(|e| shmem_err(path, "message rate", e))?
                .messages_per_s
        }
        Job::ShmemBarrier(_, kind, n) => {
            barrier(world, *n, *kind, it, 2, &cfg)
                .map_err(|e| shmem_err(path, "barrier", e))?
                .latency_us
        }
        Job::MpiBarrier(_, n) => {
            let ranks: Vec<Rank> = (0..*n as u32).map(Rank).collect();
            coll_us(
                sc,
                path,
                world,
                &ranks,
                CollOp::Barrier,
                Algorithm::Dissemination,
                8,
                it,
            )?
        }
        Job::RandomAccess(_, v) => {
            let p = random_access(world, s.ra_pes, RA_LOG_LOCAL, s.ra_updates, *v, 1024, &cfg)
                .map_err(|e| shmem_err(path, "RandomAccess", e))?;
            let table = (1u64 << RA_LOG_LOCAL) * s.ra_pes as u64;
            let errors = p.errors.unwrap_or(0);
            if errors as f64 > 0.01 * table as f64 {
                return Err(StudyError::Model(format!(
                    "{path}: RandomAccess ({v:?}) failed HPCC's verification: {errors} of {table} entries differ"
                )));
            }
            p.gups.unwrap_or(0.0)
        }
        Job::PingPong(_, size) => {
            let p = imb::pingpong(world, Rank(0), Rank(1), *size, it.min(20), 2, sc.mpi)
                .map_err(|e| StudyError::Model(format!("{path}: IMB PingPong {size} B: {e}")))?;
            if *size >= 1 << 20 {
                p.mbytes_per_s
            } else {
                p.latency_us
            }
        }
        Job::Bcast(_, size) => {
            let ranks: Vec<Rank> = (0..BCAST_NODES).map(Rank).collect();
            coll_us(sc, path, world, &ranks, CollOp::Bcast, Algorithm::Binomial, *size, it)?
        }
    })
}

#[allow(clippy::too_many_arguments)]
fn coll_us(
    sc: &Scenario,
    path: &str,
    world: hpcnet_nic::World,
    ranks: &[Rank],
    op: CollOp,
    alg: Algorithm,
    bytes: u64,
    iterations: u64,
) -> Result<f64, StudyError> {
    let p = run_collective(world, ranks, op, alg, bytes.max(8), iterations, 2, &sc.comm_config()).map_err(|e| {
        let what = format!("{path}: {op:?} on {} ranks", ranks.len());
        if e.is_bad_input() {
            StudyError::Unsupported(format!("{what}: {e}"))
        } else {
            StudyError::Model(format!("{what}: {e}"))
        }
    })?;
    Ok(p.mean_us)
}

/// The `torus-shmem` study.
pub struct TorusShmem;

impl Study for TorusShmem {
    fn name(&self) -> &'static str {
        "torus-shmem"
    }

    fn title(&self) -> &'static str {
        "NICEVT torus SHMEM: latency, message rate, barriers, RandomAccess, and against InfiniBand"
    }

    fn scenario(&self) -> Option<(&'static str, &'static str)> {
        Some((M3_TOML, M3_PATH))
    }

    fn fitted(&self) -> &'static [crate::Fitted] {
        &[]
    }

    fn run(&self, ctx: &Ctx) -> Result<StudyReport, StudyError> {
        let s = sizes(ctx.quick);
        // `--set` applies to the M3 scenario (the study's scenario) only.
        let plain = Ctx {
            quick: ctx.quick,
            set: Vec::new(),
            paper_scale: false,
        };
        let ib_one = ["nic.hosts=1".to_string()];
        let ms = Machines {
            m3: ctx.load(M3_TOML, M3_PATH, "nicevt-m3", &[])?,
            m2: plain.load(M2_TOML, M2_PATH, "nicevt-m2", &[])?,
            qdr: plain.load(IB_TOML, IB_PATH, "ib-qdr-fattree", &ib_one)?,
            ddr: plain.load(
                IB_TOML,
                IB_PATH,
                "ib-qdr-fattree",
                &[ib_one[0].clone(), "link.lane_rate=\"5 Gb/s\"".to_string()],
            )?,
        };
        let mut jobs = vec![
            Job::PutLatency(Machine::M3),
            Job::Rate(Machine::M3),
            Job::Rate(Machine::M2),
            Job::RandomAccess(Machine::M2, RaVariant::Atomic),
            Job::RandomAccess(Machine::M2, RaVariant::GetPut),
            Job::RandomAccess(Machine::IbQdr, RaVariant::Atomic),
        ];
        for &n in &s.barrier_pes {
            jobs.push(Job::ShmemBarrier(Machine::M3, BarrierKind::Classic, n));
            jobs.push(Job::ShmemBarrier(Machine::M3, BarrierKind::Fast, n));
        }
        for &n in &s.ib_pes {
            jobs.push(Job::MpiBarrier(Machine::IbQdr, n));
            if !s.barrier_pes.contains(&n) {
                jobs.push(Job::ShmemBarrier(Machine::M3, BarrierKind::Fast, n));
            }
        }
        for &b in &s.pingpong {
            for m in [Machine::M3, Machine::IbQdr, Machine::M2, Machine::IbDdr] {
                if b >= 1 << 20 && matches!(m, Machine::M2 | Machine::IbDdr) {
                    continue;
                }
                jobs.push(Job::PingPong(m, b));
            }
        }
        for &b in &s.bcast {
            jobs.push(Job::Bcast(Machine::M2, b));
            jobs.push(Job::Bcast(Machine::IbDdr, b));
        }
        let out: Vec<f64> = crate::par_map(&jobs, |j| simulate(&ms, j, &s))
            .into_iter()
            .collect::<Result<_, _>>()?;
        let at = |j: Job| -> f64 {
            jobs.iter()
                .zip(&out)
                .find(|(x, _)| **x == j)
                .map(|(_, &v)| v)
                .expect("simulated")
        };

        let mut rows = Vec::new();
        let post_hoc = "post-hoc: the write-combined PIO send path (nic.pio_limit) and its host post cost (shmem.per_post) this row depends on were chosen knowing the published value";
        // Neighbour latency and message rate.
        let lat = at(Job::PutLatency(Machine::M3));
        rows.push(Row::info(
            "M3 neighbour put latency (8 B, PEs 0–1)",
            Some(PAPER_NEIGHBOUR_US),
            lat,
            "µs",
        ));
        rows.push(
            Row::claim(
                format!("M3 neighbour latency ≤ {PAPER_NEIGHBOUR_US} µs"),
                true,
                lat <= PAPER_NEIGHBOUR_US,
            )
            .with_role(crate::Role::PostHoc)
            .with_note(post_hoc),
        );
        let (r3, r2) = (at(Job::Rate(Machine::M3)), at(Job::Rate(Machine::M2)));
        rows.push(
            Row::post_hoc(
                "M3 message rate, one NIC, 8 B puts",
                PAPER_RATE / 1e6,
                r3 / 1e6,
                "M packets/s",
                TOLERANCE,
            )
            .with_note(post_hoc),
        );
        rows.push(Row::info(
            "M2 message rate, one NIC, 8 B puts",
            None,
            r2 / 1e6,
            "M packets/s",
        ));
        rows.push(Row::post_hoc("M3 / M2 message rate", PAPER_RATE_RATIO, r3 / r2, "×", TOLERANCE).with_note(post_hoc));
        // Fast against classic barrier.
        let mut gains = Vec::new();
        for &n in &s.barrier_pes {
            let c = at(Job::ShmemBarrier(Machine::M3, BarrierKind::Classic, n));
            let f = at(Job::ShmemBarrier(Machine::M3, BarrierKind::Fast, n));
            rows.push(Row::info(
                format!("M3 classic / fast barrier, {n} PEs ({c:.2} / {f:.2} µs)"),
                None,
                c / f,
                "×",
            ));
            gains.push(c / f);
        }
        let mean_gain = gains.iter().sum::<f64>() / gains.len() as f64;
        rows.push(
            Row::claim(
                format!("fast barrier ≥ {PAPER_FAST_GAIN}× faster than classic on average (mean {mean_gain:.2}×)"),
                true,
                mean_gain >= PAPER_FAST_GAIN,
            )
            .with_role(crate::Role::PostHoc)
            .with_note("post-hoc: the reading (PE counts, mean of the ratios) was chosen knowing the model's ratios"),
        );
        let host_post_hoc = "post-hoc: the SHMEM host cost model ([shmem] per call, post and poll) this row depends on was chosen after the row had been compared (it failed, or passed, without SHMEM host time); its values are assumptions, not fitted";
        // RandomAccess.
        let ra_put = at(Job::RandomAccess(Machine::M2, RaVariant::Atomic));
        let ra_get = at(Job::RandomAccess(Machine::M2, RaVariant::GetPut));
        let ra_ib = at(Job::RandomAccess(Machine::IbQdr, RaVariant::Atomic));
        rows.push(Row::info(
            format!("M2 RandomAccess, owner puts, {} PEs", s.ra_pes),
            None,
            ra_put,
            "GUPS",
        ));
        rows.push(Row::info(
            format!("M2 RandomAccess, reader gets, {} PEs", s.ra_pes),
            None,
            ra_get,
            "GUPS",
        ));
        rows.push(Row::info(
            format!("InfiniBand QDR RandomAccess, {} nodes", s.ra_pes),
            None,
            ra_ib,
            "GUPS",
        ));
        rows.push(
            Row::claim("RandomAccess: owner puts beat reader gets", true, ra_put > ra_get)
                .with_role(crate::Role::PostHoc)
                .with_note(host_post_hoc),
        );
        rows.push(
            Row::claim(
                format!(
                    "RandomAccess: M2 > {PAPER_RA_GAIN}× InfiniBand QDR with verbs ({:.2}×)",
                    ra_put / ra_ib
                ),
                true,
                ra_put > PAPER_RA_GAIN * ra_ib,
            )
            .with_role(crate::Role::PostHoc)
            .with_note(host_post_hoc),
        );
        // Barrier against InfiniBand.
        let mut equal_small = true;
        let mut several_large = true;
        for &n in &s.ib_pes {
            let t = at(Job::ShmemBarrier(Machine::M3, BarrierKind::Fast, n));
            let ib = at(Job::MpiBarrier(Machine::IbQdr, n));
            rows.push(Row::info(
                format!("InfiniBand QDR MPI barrier / M3 fast barrier, {n} nodes ({ib:.2} / {t:.2} µs)"),
                None,
                ib / t,
                "×",
            ));
            if n <= 4 {
                equal_small &= ib / t <= EQUAL_FACTOR && t / ib <= EQUAL_FACTOR;
            } else {
                several_large &= ib / t >= SEVERAL;
            }
        }
        rows.push(
            Row::claim(
                format!("barrier: equal to InfiniBand QDR up to 4 nodes (within {EQUAL_FACTOR}× either way)"),
                true,
                equal_small,
            )
            .with_role(crate::Role::PostHoc)
            .with_note(host_post_hoc),
        );
        rows.push(
            Row::claim(
                format!("barrier: InfiniBand QDR ≥ {SEVERAL}× slower beyond 4 nodes"),
                true,
                several_large,
            )
            .with_role(crate::Role::PostHoc)
            .with_note(host_post_hoc),
        );
        // IMB PingPong.
        let mut m3_short = true;
        let mut m2_equal = true;
        for &b in &s.pingpong {
            let (t3, tq) = (at(Job::PingPong(Machine::M3, b)), at(Job::PingPong(Machine::IbQdr, b)));
            if b >= 1 << 20 {
                rows.push(Row::info(
                    format!("IMB PingPong {b} B: M3 / InfiniBand QDR bandwidth ({t3:.0} / {tq:.0} MB/s)"),
                    None,
                    t3 / tq,
                    "×",
                ));
                rows.push(Row::claim(
                    format!("IMB PingPong {b} B: M3 slightly behind InfiniBand QDR (≥ {SLIGHTLY} of its bandwidth, below it)"),
                    true,
                    t3 < tq && t3 >= SLIGHTLY * tq,
                ));
                continue;
            }
            let (t2, td) = (at(Job::PingPong(Machine::M2, b)), at(Job::PingPong(Machine::IbDdr, b)));
            rows.push(Row::info(
                format!("IMB PingPong {b} B: M3 / InfiniBand QDR ({t3:.2} / {tq:.2} µs)"),
                None,
                t3 / tq,
                "×",
            ));
            rows.push(Row::info(
                format!("IMB PingPong {b} B: M2 / InfiniBand DDR ({t2:.2} / {td:.2} µs)"),
                None,
                t2 / td,
                "×",
            ));
            m3_short &= t3 < tq;
            m2_equal &= (t2 / td - 1.0).abs() <= TOLERANCE;
        }
        rows.push(Row::claim(
            "IMB PingPong: M3 faster than InfiniBand QDR on short messages",
            true,
            m3_short,
        ));
        rows.push(Row::claim(
            format!(
                "IMB PingPong: M2 ≈ InfiniBand DDR 4x up to 2 KB (within {:.0} %)",
                TOLERANCE * 100.0
            ),
            true,
            m2_equal,
        ));
        // IMB Bcast.
        for &b in &s.bcast {
            let (t2, td) = (at(Job::Bcast(Machine::M2, b)), at(Job::Bcast(Machine::IbDdr, b)));
            rows.push(
                Row::prediction(
                    format!("IMB Bcast {b} B, {BCAST_NODES} nodes: M2 latency reduction against InfiniBand DDR ({t2:.2} / {td:.2} µs)"),
                    PAPER_BCAST_REDUCTION,
                    1.0 - t2 / td,
                    "fraction",
                    TOLERANCE,
                ),
            );
        }
        let discrepancies = vec![
            "The paper gives its figures mostly as plots without set-ups; every reading above (module \
             documentation) is a choice: neighbour latency = SHMEM put ping-pong between x-neighbours, \
             message rate = one NIC putting 8 B messages, RandomAccess on 2^10 words per PE."
                .to_string(),
            "The M2 prototype had 6 nodes; the M2 scenario is an 8×8 torus (the RandomAccess and message-rate \
             rows use 64 and 2 of its PEs, the Bcast rows 6)."
                .to_string(),
            "The InfiniBand side runs the same host software models (collectives layer, MPI-like layer, SHMEM \
             over verbs) as the torus: differences come from the networks and NICs only. RandomAccess \"with \
             MPI\" (> 10× slower than the torus) is not modelled: no MPI RandomAccess exists in the workloads."
                .to_string(),
            "SHMEM host time: the library charges [shmem] per_call (50 ns), per_post and per_poll (50 ns) as \
             the collectives and MPI-like layers charge theirs; the InfiniBand side keeps the defaults' 100 ns \
             per post (descriptor + doorbell), the NICEVT scenarios 20 ns (write-combined PIO stores, an \
             assumption). With only 50 ns per call and no post or poll cost, the barrier comparison \
             with InfiniBand fails at 2 and 4 nodes; with it the torus barrier is still 4–7× faster there \
             (the MPI dissemination barrier pays 200 ns per call and a post and a poll per round on top of \
             the verbs path), so that row still fails. The barrier and RandomAccess rows that depend on \
             the model are post-hoc: it was chosen after they had been compared."
                .to_string(),
            "The spec's 13 Gb/s per M3 link caps a large PingPong at 1625 MB/s against QDR 4x's 4000 MB/s of \
             data, so the model cannot show M3 \"slightly behind\" InfiniBand on large messages; the published \
             curve suggests a wider link (several lanes of 13 Gb/s) than the spec states. The scenario keeps the \
             spec's figure."
                .to_string(),
        ];
        let mut report = StudyReport::new(
            self.name(),
            self.title(),
            "spec/03-torus-shmem.md, \"Prototype figures\" and \"Published results\"",
            rows,
            discrepancies,
            ctx.quick,
        );
        report.seed = Some(ms.m3.file.seed);
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    #[test]
    fn quick_run_is_deterministic_and_declares_no_calibration() {
        let a = crate::run(&TorusShmem, &Ctx::quick(true)).unwrap();
        let b = crate::run(&TorusShmem, &Ctx::quick(true)).unwrap();
        assert_eq!(a.rows.len(), b.rows.len());
        for (x, y) in a.rows.iter().zip(&b.rows) {
            assert_eq!((x.label.as_str(), x.simulated), (y.label.as_str(), y.simulated));
        }
        assert!(a.rows.iter().all(|r| r.role != Role::Calibration));
        let rate = a.rows.iter().find(|r| r.label.starts_with("M3 message rate")).unwrap();
        assert_eq!(rate.role, Role::PostHoc);
        // A message rate is a positive figure of millions of packets per second.
        assert!(rate.simulated > 1.0 && rate.simulated < 100.0, "{}", rate.simulated);
    }

    #[test]
    fn pio_sends_cut_the_put_latency_and_raise_the_rate() {
        let ms = |set: &[&str]| {
            let over: Vec<String> = set.iter().map(|s| s.to_string()).collect();
            Scenario::from_str_named(M3_TOML, M3_PATH, "nicevt-m3", &over).unwrap()
        };
        // The scenario's host costs on both sides: the NIC's send path is what differs.
        let lat = |sc: &Scenario| {
            put_pingpong(sc.world().unwrap(), 2, 0, 1, 8, 10, &sc.shmem_config())
                .unwrap()
                .latency_us
        };
        let rate = |sc: &Scenario| {
            put_rate(sc.world().unwrap(), 2, &[(0, 1)], 8, 100, &sc.shmem_config())
                .unwrap()
                .messages_per_s
        };
        let (pio, dma) = (ms(&[]), ms(&["nic.pio_limit=\"0 B\""]));
        // PIO saves the descriptor read round trip and the data read (300 ns each in M3).
        assert!(lat(&dma) - lat(&pio) > 0.5, "{} vs {}", lat(&dma), lat(&pio));
        assert!(rate(&pio) > 5.0 * rate(&dma), "{} vs {}", rate(&pio), rate(&dma));
        let e = Scenario::from_str_named(M3_TOML, M3_PATH, "nicevt-m3", &["nic.pio_limit=\"8 KiB\"".to_string()])
            .and_then(|s| s.world().map(|_| ()));
        assert!(format!("{e:?}").contains("nic.pio_limit"), "{e:?}");
    }
}
