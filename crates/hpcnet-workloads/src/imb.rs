//! IMB-like MPI benchmarks on the MPI-like point-to-point layer (`hpcnet-mpi`): PingPong
//! between two ranks, as the Intel MPI Benchmarks time it.
//!
//! PingPong: rank `a` sends `size` bytes to rank `b` (tag 0), `b` receives them and sends them
//! back; after `warmup` untimed round trips, `iterations` are timed on rank `a` and the figure
//! is half the mean round trip (IMB's `t[usec]`), and `size / t` its bandwidth. Every other rank
//! runs an empty program (it serves its endpoint). Cost: two messages per iteration, so the run
//! grows linearly with iterations and, above the eager threshold, with `size / packet payload`.
//! The bytes are checked at the end: the last message `a` receives must be the pattern `b` got.
//!
//! IMB Bcast is the collectives layer's broadcast timed the IMB way (`crate::coll`).

use hpcnet_des::SimTime;
use hpcnet_mpi::{Job, JobConfig, Layout, MpiError};
use hpcnet_msg::verbs::Machine;
use hpcnet_nic::{Rank, World};
use serde::Serialize;
use std::cell::Cell;
use std::rc::Rc;

/// Why a benchmark gave no figure.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ImbError {
    /// Bad arguments for this machine (ranks, sizes, iterations).
    #[error("{0}")]
    BadInput(String),
    /// A call of the MPI-like layer failed.
    #[error("rank {0}: {1}")]
    Mpi(u32, MpiError),
    /// The run ended with rank programs still waiting.
    #[error("the run ended with {0} rank programs still waiting")]
    Stuck(usize),
    /// The bytes that came back are not the bytes sent.
    #[error("PingPong {0} B: the returned message differs from the one sent")]
    Corrupt(u64),
}

/// One PingPong point.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ImbPoint {
    pub size: u64,
    /// Timed round trips.
    pub iterations: u64,
    /// Half the mean round trip, µs.
    pub latency_us: f64,
    /// `size / latency`, MB/s (10⁶ bytes per second, as IMB prints).
    pub mbytes_per_s: f64,
}

/// IMB PingPong between ranks `a` and `b` of `world` with the MPI-like layer configured by
/// `job` (the scenario's `[mpi]`).
pub fn pingpong(
    world: World,
    a: Rank,
    b: Rank,
    size: u64,
    iterations: u64,
    warmup: u64,
    job: JobConfig,
) -> Result<ImbPoint, ImbError> {
    let ranks = world.ranks();
    if a.index() >= ranks || b.index() >= ranks || a == b {
        return Err(ImbError::BadInput(format!(
            "PingPong between ranks {} and {}: needs two different ranks of the machine's {ranks}",
            a.0, b.0
        )));
    }
    if iterations == 0 {
        return Err(ImbError::BadInput(
            "PingPong: needs at least one timed iteration".into(),
        ));
    }
    let per_node = u64::from(world.placement().hosts());
    let mut m = Machine::new(world);
    let layout = Layout::new(ranks as u64, per_node).map_err(|e| ImbError::BadInput(e.to_string()))?;
    let job = Job::new(&m, layout, job).map_err(|e| ImbError::Mpi(a.0, e))?;
    let span = Rc::new(Cell::new((SimTime::ZERO, SimTime::ZERO)));
    let intact = Rc::new(Cell::new(false));
    let pattern = move |i: u64| (i.wrapping_mul(131) ^ 0x5a) as u8;
    for r in 0..ranks as u32 {
        let (span, intact) = (span.clone(), intact.clone());
        let me = Rank(r);
        job.spawn(&m, me, move |ep| async move {
            if me != a && me != b {
                return Ok(());
            }
            // Rank `a` sends the pattern from the first half of its buffer and receives the
            // echo in the second half; `b` echoes from one buffer.
            let len = size.max(1);
            let mr = ep.ctx().reg_mr(2 * len);
            if me == a {
                ep.ctx()
                    .write_local(&mr, 0, &(0..len).map(pattern).collect::<Vec<u8>>())?;
            }
            let other = if me == a { b } else { a };
            let mut t0 = SimTime::ZERO;
            for i in 0..warmup + iterations {
                if me == a && i == warmup {
                    t0 = ep.ctx().now();
                }
                if me == a {
                    ep.send(&mr, 0, size, other, 0).await?;
                    ep.recv(&mr, len, size, Some(other), Some(0)).await?;
                } else {
                    ep.recv(&mr, 0, size, Some(other), Some(0)).await?;
                    ep.send(&mr, 0, size, other, 0).await?;
                }
            }
            if me == a {
                span.set((t0, ep.ctx().now()));
                intact.set(ep.ctx().read_local(&mr, len, size)? == (0..size).map(pattern).collect::<Vec<u8>>());
            }
            Ok(())
        });
    }
    let end = m.run();
    if let Some((r, e)) = job.errors().into_iter().next() {
        return Err(ImbError::Mpi(r, e));
    }
    if end.stuck_tasks > 0 || !job.finished() {
        return Err(ImbError::Stuck(end.stuck_tasks));
    }
    if !intact.get() {
        return Err(ImbError::Corrupt(size));
    }
    let (t0, t1) = span.get();
    let half = (t1 - t0).as_ns_f64() / 2.0 / iterations as f64;
    Ok(ImbPoint {
        size,
        iterations,
        latency_us: half / 1e3,
        mbytes_per_s: if half > 0.0 { size as f64 / half * 1e3 } else { 0.0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    fn scenario(set: &[&str]) -> Scenario {
        let over: Vec<String> = set.iter().map(|s| s.to_string()).collect();
        Scenario::from_str_named(
            include_str!("../../../scenarios/nicevt-m2.toml"),
            "scenarios/nicevt-m2.toml",
            "nicevt-m2",
            &over,
        )
        .unwrap()
    }

    #[test]
    fn pingpong_grows_with_size_and_crosses_the_eager_threshold() {
        let sc = scenario(&[]);
        let run = |size| pingpong(sc.world().unwrap(), Rank(0), Rank(1), size, 5, 1, sc.mpi).unwrap();
        let (small, eager, rdv) = (run(8), run(4096), run(65536));
        assert!(small.latency_us > 0.3 && small.latency_us < 20.0, "{small:?}");
        assert!(eager.latency_us > small.latency_us, "{eager:?} vs {small:?}");
        assert!(rdv.latency_us > eager.latency_us, "{rdv:?}");
        // Large messages approach the link's data rate (6.25 Gb/s = 781 MB/s) but never exceed it.
        assert!(rdv.mbytes_per_s < 781.25 && rdv.mbytes_per_s > 300.0, "{rdv:?}");
        // Deterministic.
        assert_eq!(run(4096), eager);
    }

    #[test]
    fn pingpong_refuses_bad_ranks() {
        let sc = scenario(&[]);
        let e = pingpong(sc.world().unwrap(), Rank(0), Rank(0), 8, 5, 1, sc.mpi).unwrap_err();
        assert!(e.to_string().contains("two different ranks"), "{e}");
        let e = pingpong(sc.world().unwrap(), Rank(0), Rank(9999), 8, 5, 1, sc.mpi).unwrap_err();
        assert!(matches!(e, ImbError::BadInput(_)), "{e}");
    }
}
