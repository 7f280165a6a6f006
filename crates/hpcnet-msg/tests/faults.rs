//! Messages through dynamic faults on a dual-rail generalized fat tree (the Sunway layout at
//! small scale): a plane that fails while nothing is inside it costs no message, because the
//! NICs' adaptive port choice moves every packet to the other rail once the failure is
//! detected; a plane that fails under traffic loses the packets inside it, and the NIC counts
//! and lists them (their messages do not complete: recovering them is a transport's work).

use hpcnet_des::SimTime;
use hpcnet_fabric::config::*;
use hpcnet_fabric::faults::{FaultAction, FaultEvent, FaultKind};
use hpcnet_fabric::topology::{build, GeneralizedFatTreeConfig, TopologyConfig};
use hpcnet_fabric::Network;
use hpcnet_msg::verbs::{Machine, Mr, Rank, WriteWr};
use hpcnet_nic::{CqeStatus, NicConfig, PortSelect, World};
use std::cell::RefCell;
use std::rc::Rc;

mod common;

fn plane_failure(at: SimTime, detection: SimTime) -> FaultConfig {
    FaultConfig {
        events: vec![FaultEvent {
            at,
            kind: FaultKind::Plane,
            action: FaultAction::Fail,
            router: None,
            port: None,
            plane: Some(0),
            lanes: None,
        }],
        detection,
        ..FaultConfig::default()
    }
}

fn world(faults: FaultConfig) -> World {
    let topo = build(&TopologyConfig::GeneralizedFatTree(GeneralizedFatTreeConfig {
        planes: 2,
        leaves: 4,
        spines: 4,
        nodes_per_leaf: 4,
        sibling_links: 2,
        nodes: None,
        radix: Some(10),
    }))
    .unwrap();
    let cfg = common::fabric_with(
        RoutingConfig::UpDown {
            selection: Selection::Adaptive,
        },
        1024,
        faults,
    );
    let nic = NicConfig {
        port_select: PortSelect::Adaptive,
        ..NicConfig::default()
    };
    World::new(Network::new(topo, cfg).unwrap(), nic)
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// What a stream of writes did: when each message completed and how, and the target region.
struct Stream {
    done: Rc<RefCell<Vec<(SimTime, CqeStatus)>>>,
    dst: Mr,
}

/// Rank 0 writes `msgs` messages of `len` bytes to rank 15; with a `gap`, each is completed and
/// followed by a pause before the next is posted; without, all are posted at once.
fn stream(m: &mut Machine<World>, msgs: u64, len: u64, gap: Option<SimTime>) -> Stream {
    let (a, b) = (m.context(Rank(0)), m.context(Rank(15)));
    let src = a.reg_mr(msgs * len);
    let dst = b.reg_mr(msgs * len);
    a.write_local(&src, 0, &pattern((msgs * len) as usize, 5)).unwrap();
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(15));
    let done = Rc::new(RefCell::new(Vec::new()));
    let (d, a2, dst2) = (done.clone(), a.clone(), dst.clone());
    m.spawn(async move {
        for i in 0..msgs {
            qp.post_write(WriteWr::new(&src, i * len, len, dst2.remote(i * len)).wr_id(i))
                .unwrap();
            if let Some(gap) = gap {
                let c = cq.next().await;
                d.borrow_mut().push((a2.now(), c.status));
                a2.sleep(gap).await;
            }
        }
        if gap.is_none() {
            for _ in 0..msgs {
                let c = cq.next().await;
                d.borrow_mut().push((a2.now(), c.status));
            }
        }
    });
    Stream { done, dst }
}

#[test]
fn a_plane_failing_while_nothing_is_inside_costs_no_message() {
    // 10 messages of 8 KiB, each completed and followed by a 10 us pause; the plane fails at
    // 30 us, in a pause (checked below), detected at once.
    let (msgs, len, gap) = (10u64, 8 * 1024u64, SimTime::from_us(10));
    let fail_at = SimTime::from_us(30);
    let mut m = Machine::new(world(plane_failure(fail_at, SimTime::ZERO)));
    let s = stream(&mut m, msgs, len, Some(gap));
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0);
    let done = s.done.borrow();
    assert_eq!(done.len(), msgs as usize);
    assert!(done.iter().all(|(_, st)| *st == CqeStatus::Ok));
    assert!(
        done.iter().any(|(t, _)| *t < fail_at && fail_at < *t + gap),
        "the failure falls in a pause: {done:?}"
    );
    // The failure came in the middle of the stream.
    assert!(done[0].0 < fail_at && done[msgs as usize - 1].0 > fail_at);
    let w = m.world();
    assert_eq!(w.network().fault_log().len(), 1);
    assert_eq!(w.counters().lost, 0);
    assert!(w.lost_packets().is_empty());
    assert_eq!(w.network().counters().dropped, 0);
    // Both rails carried data before the failure; afterwards only rail 1 (node 0's rail-0 cable
    // carried nothing after its plane failed: its busy time is what the first messages used).
    let busy = |from: &str| {
        w.network()
            .link_use()
            .into_iter()
            .find(|l| l.from == from)
            .map(|l| l.packets)
            .unwrap()
    };
    let (rail0, rail1) = (busy("n0.rail0"), busy("n0.rail1"));
    assert!(rail0 > 0 && rail1 > rail0, "rail 0 {rail0}, rail 1 {rail1} packets");
    drop(w);
    let b = m.context(Rank(15));
    assert_eq!(
        b.read_local(&s.dst, 0, msgs * len).unwrap(),
        pattern((msgs * len) as usize, 5)
    );
}

#[test]
fn a_plane_failing_under_traffic_loses_packets_and_the_nic_says_so() {
    // 16 messages of 64 KiB posted at once (about 40 us of data on two rails); the plane fails
    // at 5 us, detected 1 us later.
    let (msgs, len) = (16u64, 64 * 1024u64);
    let mut m = Machine::new(world(plane_failure(SimTime::from_us(5), SimTime::from_us(1))));
    let s = stream(&mut m, msgs, len, None);
    let end = m.run();
    let w = m.world();
    let lost = w.lost_packets();
    assert!(!lost.is_empty());
    assert_eq!(w.counters().lost, lost.len() as u64);
    assert_eq!(w.network().counters().dropped, lost.len() as u64);
    // Every loss is of a packet rank 0 sent to rank 15 (data) or rank 15 sent back (acks), on
    // the failed plane, at or after the failure, and before detection plus a packet's flight.
    for l in lost {
        assert!(l.at >= SimTime::from_us(5) && l.at <= SimTime::from_us(7), "{l:?}");
        assert!(
            ["lost_in_cable", "lost_in_router", "sent_before_detection"].contains(&l.cause),
            "{l:?}"
        );
        assert!(
            (l.from, l.to) == (Rank(0), Rank(15)) || (l.from, l.to) == (Rank(15), Rank(0)),
            "{l:?}"
        );
    }
    // The messages that lost a packet do not complete (no transport sends it again); the others
    // do, with their bytes in place.
    let incomplete: std::collections::BTreeSet<u32> = lost.iter().map(|l| l.msg).collect();
    let done = s.done.borrow();
    assert!(
        done.len() < msgs as usize && !done.is_empty(),
        "{} of {msgs} completed",
        done.len()
    );
    assert_eq!(end.stuck_tasks, 1);
    assert!(!end.deadlock);
    assert!(incomplete.len() >= msgs as usize - done.len());
}
