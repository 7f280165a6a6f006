//! Message-level load: every rank writes messages to uniformly random other ranks through the
//! whole NIC model (doorbells, engines, DMA, packets, acknowledgements), on one reliable-datagram
//! queue pair per rank with a window of outstanding writes. Used by `hpcnet bench` to measure
//! simulator speed at message level, and usable as an all-ranks stress workload.

use hpcnet_des::rng::RngStreams;
use hpcnet_des::SimTime;
use hpcnet_msg::verbs::{Machine, RemoteBuf, WriteWr};
use hpcnet_nic::{CqeStatus, Rank, World};
use rand::Rng;
use serde::Serialize;
use std::cell::Cell;
use std::rc::Rc;

/// Parameters of [`random_writes`].
#[derive(Clone, Debug)]
pub struct MsgLoad {
    /// Bytes per write.
    pub size: u64,
    /// Writes each rank posts.
    pub per_rank: u64,
    /// Writes a rank keeps outstanding.
    pub window: u64,
    /// Seed of the destination choices.
    pub seed: u64,
}

/// What a [`random_writes`] run did.
#[derive(Clone, Debug, Serialize)]
pub struct MsgLoadReport {
    pub ranks: usize,
    pub messages: u64,
    pub payload_bytes: u64,
    /// Simulated time at the end of the run.
    pub sim_time: SimTime,
    pub events: u64,
    pub packets_delivered: u64,
    /// Router traversals of delivered packets.
    pub packet_hops: u64,
    /// Wall-clock seconds of the simulation loop (not of the set-up).
    pub loop_seconds: f64,
}

/// Why a [`random_writes`] run failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MsgLoadError {
    #[error("random writes: {0}")]
    Invalid(String),
    #[error("random writes: {0}")]
    Model(String),
}

/// Every rank posts `per_rank` writes of `size` bytes, each to a uniformly random other rank,
/// keeping `window` outstanding; returns when all have completed.
pub fn random_writes(world: World, load: &MsgLoad) -> Result<MsgLoadReport, MsgLoadError> {
    let ranks = world.ranks();
    if ranks < 2 {
        return Err(MsgLoadError::Invalid(format!(
            "needs at least 2 ranks, the scenario has {ranks}"
        )));
    }
    if load.size == 0 || load.per_rank == 0 || load.window == 0 {
        return Err(MsgLoadError::Invalid(
            "size, messages per rank and window must be positive".into(),
        ));
    }
    let mut m = Machine::new(world);
    let ctxs: Vec<_> = (0..ranks).map(|r| m.context(Rank(r as u32))).collect();
    let targets: Rc<Vec<RemoteBuf>> = Rc::new(ctxs.iter().map(|c| c.reg_mr(load.size).remote(0)).collect());
    let failed: Rc<Cell<Option<String>>> = Rc::new(Cell::new(None));
    let streams = RngStreams::new(load.seed);
    for (r, c) in ctxs.iter().enumerate() {
        let src = c.reg_mr(load.size);
        let cq = c.create_cq();
        let qp = c.create_rd_qp(&cq);
        let targets = targets.clone();
        let failed = failed.clone();
        let mut rng = streams.stream("msgload", r as u64);
        let (size, count, window) = (load.size, load.per_rank, load.window);
        m.spawn(async move {
            let (mut posted, mut done) = (0u64, 0u64);
            while done < count {
                while posted < count && posted - done < window {
                    // A uniformly random rank other than this one.
                    let mut to = rng.gen_range(0..targets.len() - 1);
                    if to >= r {
                        to += 1;
                    }
                    if let Err(e) = qp.post_write(WriteWr::new(&src, 0, size, targets[to]).wr_id(posted)) {
                        failed.set(Some(format!("rank {r}: {e}")));
                        return;
                    }
                    posted += 1;
                }
                let c = cq.next().await;
                if c.status != CqeStatus::Ok {
                    failed.set(Some(format!(
                        "rank {r}: write {} completed with {:?}",
                        c.wr_id, c.status
                    )));
                    return;
                }
                done += 1;
            }
        });
    }
    let t0 = std::time::Instant::now();
    let end = m.run();
    let loop_seconds = t0.elapsed().as_secs_f64();
    if let Some(e) = failed.take() {
        return Err(MsgLoadError::Model(e));
    }
    if end.deadlock || end.stuck_tasks > 0 {
        return Err(MsgLoadError::Model(format!(
            "the run stopped at {} with {} rank programs waiting and {} packets stuck (deadlock: {})",
            end.time, end.stuck_tasks, end.net_in_flight, end.deadlock
        )));
    }
    let w = m.world();
    let messages = ranks as u64 * load.per_rank;
    Ok(MsgLoadReport {
        ranks,
        messages,
        payload_bytes: messages * load.size,
        sim_time: end.time,
        events: end.events,
        packets_delivered: w.network().counters().delivered,
        packet_hops: w.network().counters().hops,
        loop_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    fn world() -> World {
        let text = include_str!("../../../scenarios/sunway-prototype.toml");
        Scenario::from_str_named(text, "sunway-prototype.toml", "sunway", &[])
            .unwrap()
            .world()
            .unwrap()
    }

    #[test]
    fn every_write_completes_and_packets_are_conserved() {
        let load = MsgLoad {
            size: 3000,
            per_rank: 3,
            window: 2,
            seed: 7,
        };
        let r = random_writes(world(), &load).unwrap();
        assert_eq!(r.ranks, 1024);
        assert_eq!(r.messages, 3072);
        assert_eq!(r.payload_bytes, 3072 * 3000);
        // 3000 B in 1 KiB packets: 3 data packets per write, plus one acknowledgement each
        // (writes between the two processes of one NIC never enter the network).
        assert!(r.packets_delivered <= 3072 * 4, "{r:?}");
        assert!(r.packets_delivered >= 3072 * 3, "{r:?}");
        assert!(r.packet_hops >= r.packets_delivered, "{r:?}");
        // Deterministic: the same seed gives the same run.
        let again = random_writes(world(), &load).unwrap();
        assert_eq!(
            (again.sim_time, again.events, again.packet_hops),
            (r.sim_time, r.events, r.packet_hops)
        );
        let other = random_writes(world(), &MsgLoad { seed: 8, ..load }).unwrap();
        assert_ne!(other.packet_hops, r.packet_hops);
    }

    #[test]
    fn bad_parameters_are_errors() {
        let load = MsgLoad {
            size: 0,
            per_rank: 1,
            window: 1,
            seed: 1,
        };
        assert!(matches!(random_writes(world(), &load), Err(MsgLoadError::Invalid(_))));
    }
}
