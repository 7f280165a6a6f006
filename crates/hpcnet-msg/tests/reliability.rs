//! Transport reliability (`[nic.reliability]`, hpcnet-nic's reliability unit) seen from rank
//! programs: under a random loss rate, a cable failing mid-run and a router failing mid-run,
//! every message of every kind (writes with notification and reply word, reads, atomics,
//! reliable queue messages) completes exactly once with the right bytes; duplicates are never
//! delivered twice; runs are deterministic; unreliable queue messages lose packets and count
//! them; a retransmission costs its timeout; RDMA bandwidth under random loss.

use hpcnet_des::{BitsPerSec, Bytes, SimTime};
use hpcnet_fabric::config::*;
use hpcnet_fabric::faults::{FaultAction, FaultEvent, FaultKind};
use hpcnet_fabric::topology::{build, GeneralizedFatTreeConfig, PortIdx, RouterId, TopologyConfig};
use hpcnet_fabric::Network;
use hpcnet_msg::verbs::{AtomicOp, Machine, Rank, WriteWr};
use hpcnet_nic::{CqeKind, CqeStatus, NicConfig, NicCounters, ReliabilityConfig, World};
use std::cell::RefCell;
use std::rc::Rc;

const MTU: u64 = 1024;

fn fabric(faults: FaultConfig) -> FabricConfig {
    FabricConfig {
        link: LinkConfig {
            lanes: 4,
            lane_rate: BitsPerSec::gbps(28.125),
            encoding: Encoding::B64B66,
            latency: SimTime::from_ns(10),
            switching: Switching::CutThrough,
            ..LinkConfig::default()
        },
        link_overrides: Vec::new(),
        router: RouterConfig {
            vcs: 4,
            credit_unit: Bytes(64),
            private_credits: 64,
            shared_credits: 64,
            latency: SimTime::from_ns(50),
            arbitration: Arbitration::RoundRobin,
            vc_select: VcSelect::RoundRobin,
            node_injection: NodeInjection::PerVc,
            multicast_tables: 32,
        },
        packet: PacketConfig {
            header: Bytes(24),
            max_payload: Bytes(MTU),
        },
        routing: RoutingConfig::UpDown {
            selection: Selection::Adaptive,
        },
        faults,
    }
}

/// A dual-rail generalized fat tree: per plane 4 leaves (routers 0–3 in plane 0, 8–11 in
/// plane 1) of 4 nodes each and 4 spines (routers 4–7, 12–15). Leaf ports: 0–3 nodes, 4–7 up
/// (one per spine), 8–9 sibling links.
fn world(nic: NicConfig, faults: FaultConfig, seed: u64) -> World {
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
    let mut net = Network::new(topo, fabric(faults)).unwrap();
    net.set_seed(seed);
    World::new(net, nic)
}

fn reliable(nic: NicConfig) -> NicConfig {
    NicConfig {
        reliability: Some(ReliabilityConfig::default()),
        ..nic
    }
}

fn fail_at(at: SimTime, kind: FaultKind, router: Option<u32>, port: Option<u16>, plane: Option<u8>) -> FaultConfig {
    FaultConfig {
        events: vec![FaultEvent {
            at,
            kind,
            action: FaultAction::Fail,
            router: router.map(RouterId),
            port: port.map(PortIdx),
            plane,
            lanes: None,
        }],
        ..FaultConfig::default()
    }
}

fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u64).wrapping_mul(131).wrapping_add(seed.wrapping_mul(7919)) >> 1) as u8)
        .collect()
}

/// What one pair's programs saw, checked after the run.
#[derive(Default, Debug)]
struct Seen {
    /// Completions at the initiator: (kind, status).
    done: Vec<(CqeKind, CqeStatus)>,
    /// Notifications of writes at the target (wr_id).
    notified: Vec<u64>,
    /// Receive completions at the target (wr_id, bytes).
    received: Vec<(u64, u64)>,
    /// Old values returned by the fetch-adds.
    olds: Vec<u64>,
}

struct Outcome {
    counters: NicCounters,
    end: SimTime,
    stuck: usize,
    lost_packets: usize,
    /// Pairs whose every message completed exactly once with the right bytes.
    correct: usize,
    pairs: usize,
}

/// Each pair (a, b): `n` writes of `size` bytes with notification and reply word, `n` reads of
/// `size` bytes, `n` fetch-adds and `n` reliable queue messages of `size` bytes, all posted at
/// once (per kind its own queue pair); then every byte, count and value is checked.
fn mixed(w: World, pairs: &[(u32, u32)], n: u64, size: u64) -> Outcome {
    let mut m = Machine::new(w);
    let mut checks = Vec::new();
    for (pi, &(a, b)) in pairs.iter().enumerate() {
        let (ca, cb) = (m.context(Rank(a)), m.context(Rank(b)));
        let seed = pi as u64 * 1000;
        // Sources at a (writes, sends), at b (reads); landing zones at b (writes, sends), at a
        // (reads); counters at b.
        let src = ca.reg_mr(n * size);
        let rsrc = cb.reg_mr(n * size);
        let wdst = cb.reg_mr(n * size);
        let sdst = cb.reg_mr(n * size);
        let rdst = ca.reg_mr(n * size);
        let counters = cb.reg_mr(16);
        let olds = ca.reg_mr(8 * n);
        for i in 0..n {
            ca.write_local(&src, i * size, &pattern(size as usize, seed + i))
                .unwrap();
            cb.write_local(&rsrc, i * size, &pattern(size as usize, seed + 500 + i))
                .unwrap();
        }
        let cq = ca.create_cq();
        let ncq = cb.create_cq();
        let rcq = cb.create_cq();
        let rq = cb.create_rq(&rcq).unwrap();
        for i in 0..n {
            rq.post_recv(&sdst, i * size, size, i).unwrap();
        }
        let seen = Rc::new(RefCell::new(Seen::default()));
        let (qw, qr, qa, qs) = (
            ca.create_qp(&cq, Rank(b)),
            ca.create_qp(&cq, Rank(b)),
            ca.create_qp(&cq, Rank(b)),
            ca.create_qp(&cq, Rank(b)),
        );
        let remote_rq = rq.remote();
        let ncq2 = ncq.clone();
        let s = seen.clone();
        let (src2, rdst2, olds2) = (src.clone(), rdst.clone(), olds.clone());
        let (wdst2, rsrc2, counters2) = (wdst.clone(), rsrc.clone(), counters.clone());
        m.spawn(async move {
            for i in 0..n {
                let wr = WriteWr::new(&src2, i * size, size, wdst2.remote(i * size))
                    .wr_id(i)
                    .notify(&ncq2)
                    .reply_word(counters2.remote(0));
                qw.post_write(wr).unwrap();
                qr.post_read(&rdst2, i * size, size, rsrc2.remote(i * size), 100 + i)
                    .unwrap();
                qa.post_atomic(
                    AtomicOp::FetchAdd,
                    counters2.remote(8),
                    1,
                    0,
                    Some((&olds2, 8 * i)),
                    200 + i,
                )
                .unwrap();
                qs.post_send(&src2, i * size, size, remote_rq, true, 300 + i).unwrap();
            }
            for _ in 0..4 * n {
                let c = cq.next().await;
                s.borrow_mut().done.push((c.kind, c.status));
            }
        });
        let s = seen.clone();
        m.spawn(async move {
            for _ in 0..n {
                let c = ncq.next().await;
                s.borrow_mut().notified.push(c.wr_id);
            }
        });
        let s = seen.clone();
        m.spawn(async move {
            for _ in 0..n {
                let c = rcq.next().await;
                s.borrow_mut().received.push((c.wr_id, c.bytes));
            }
        });
        checks.push((a, b, seed, src, rsrc, wdst, sdst, rdst, counters, olds, seen));
    }
    let end = m.run();
    let mut correct = 0;
    for (a, b, seed, _src, _rsrc, wdst, sdst, rdst, counters, olds, seen) in checks {
        let (ca, cb) = (m.context(Rank(a)), m.context(Rank(b)));
        let s = seen.borrow();
        let mut bad = Vec::new();
        if !(s.done.len() as u64 == 4 * n && s.done.iter().all(|d| d.1 == CqeStatus::Ok)) {
            bad.push(format!("completions {:?}", s.done));
        }
        let mut notified = s.notified.clone();
        notified.sort_unstable();
        if notified != (0..n).collect::<Vec<_>>() {
            bad.push(format!("notifications {notified:?}"));
        }
        // Queue messages take the receive buffers in posting order (buffer i holds message i,
        // checked below); a message that waited for a retransmission completes later than the
        // ones after it.
        let mut received = s.received.clone();
        received.sort_unstable();
        if received != (0..n).map(|i| (i, size)).collect::<Vec<_>>() {
            bad.push(format!("receives {:?}", s.received));
        }
        let (rw, fa) = (cb.read_u64(&counters, 0).unwrap(), cb.read_u64(&counters, 8).unwrap());
        if rw != n || fa != n {
            bad.push(format!("reply word {rw}, fetch-add total {fa}"));
        }
        let mut o: Vec<u64> = (0..n).map(|i| ca.read_u64(&olds, 8 * i).unwrap()).collect();
        o.sort_unstable();
        if o != (0..n).collect::<Vec<_>>() {
            bad.push(format!("old values {o:?}"));
        }
        for i in 0..n {
            let want = pattern(size as usize, seed + i);
            if cb.read_local(&wdst, i * size, size).unwrap() != want {
                bad.push(format!("write {i} bytes"));
            }
            if cb.read_local(&sdst, i * size, size).unwrap() != want {
                bad.push(format!("send {i} bytes"));
            }
            if ca.read_local(&rdst, i * size, size).unwrap() != pattern(size as usize, seed + 500 + i) {
                bad.push(format!("read {i} bytes"));
            }
        }
        let ok = bad.is_empty();
        if !ok {
            eprintln!("pair {a} -> {b}: {}", bad.join("; "));
        }
        drop(s);
        correct += usize::from(ok);
    }
    let world = m.world();
    Outcome {
        counters: world.counters(),
        end: end.time,
        stuck: end.stuck_tasks,
        lost_packets: world.lost_packets().len(),
        correct,
        pairs: pairs.len(),
    }
}

/// Ranks on leaf 0 to ranks on leaf 3, both ways.
const PAIRS: [(u32, u32); 8] = [(0, 12), (1, 13), (2, 14), (3, 15), (12, 0), (13, 1), (14, 2), (15, 3)];

fn assert_exactly_once(o: &Outcome, what: &str) {
    assert_eq!(o.stuck, 0, "{what}: programs left waiting ({:?})", o.counters);
    assert_eq!(
        o.correct, o.pairs,
        "{what}: every message of every pair exactly once with its bytes ({:?})",
        o.counters
    );
    assert_eq!(o.counters.messages_failed, 0, "{what}");
}

#[test]
fn random_loss_is_recovered_exactly_once() {
    let nic = NicConfig {
        loss_rate: 0.02,
        ..reliable(NicConfig::default())
    };
    let o = mixed(world(nic, FaultConfig::default(), 3), &PAIRS, 8, 4 * MTU);
    assert_exactly_once(&o, "loss 2 %");
    let c = &o.counters;
    assert!(c.lost > 10, "packets were lost: {c:?}");
    assert_eq!(c.lost as usize, o.lost_packets);
    assert!(c.timeouts > 0 && c.probes > 0 && c.retransmitted > 0, "{c:?}");
}

#[test]
fn without_reliability_the_same_losses_leave_messages_incomplete() {
    // The control of the test above: the same run with the unit off loses messages for good.
    let nic = NicConfig {
        loss_rate: 0.02,
        ..NicConfig::default()
    };
    let o = mixed(world(nic, FaultConfig::default(), 3), &PAIRS, 8, 4 * MTU);
    assert!(o.counters.lost > 10);
    assert!(o.stuck > 0 && o.correct < o.pairs, "{:?}", o.counters);
    assert_eq!(o.counters.retransmitted, 0);
}
