//! Transport reliability (`[nic.reliability]`, hpcnet-nic's reliability unit) seen from rank
//! programs: under a random loss rate, a cable failing mid-run and a router failing mid-run,
//! every message of every kind (writes with notification and reply word, reads, atomics,
//! reliable queue messages) completes exactly once with the right bytes; duplicates are never
//! delivered twice; runs are deterministic; unreliable queue messages lose packets and count
//! them; a retransmission costs its timeout; RDMA bandwidth under random loss.

use hpcnet_des::SimTime;
use hpcnet_fabric::config::*;
use hpcnet_fabric::faults::{FaultAction, FaultEvent, FaultKind};
use hpcnet_fabric::topology::{build, GeneralizedFatTreeConfig, PortIdx, RouterId, TopologyConfig};
use hpcnet_fabric::Network;
use hpcnet_msg::verbs::{AtomicOp, Machine, Rank, WriteWr};
use hpcnet_nic::{CqeKind, CqeStatus, NicConfig, NicCounters, ReliabilityConfig, World};
use std::cell::RefCell;
use std::rc::Rc;

mod common;

const MTU: u64 = 1024;

fn fabric(faults: FaultConfig) -> FabricConfig {
    common::fabric_with(
        RoutingConfig::UpDown {
            selection: Selection::Adaptive,
        },
        MTU,
        faults,
    )
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
}

#[derive(Debug)]
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

/// The mixed exchange on `PAIRS` with reliability on and `faults`: every message exactly once,
/// and the failure did cost packets (so the test shows recovery, not luck).
fn survives(faults: FaultConfig, what: &str) -> Outcome {
    let o = mixed(world(reliable(NicConfig::default()), faults, 1), &PAIRS, 16, 4 * MTU);
    eprintln!("{what}: end {} {:?}", o.end, o.counters);
    assert_exactly_once(&o, what);
    assert!(
        o.counters.lost > 0,
        "{what}: the failure lost no packet ({:?})",
        o.counters
    );
    o
}

#[test]
fn a_cable_failing_mid_run_loses_no_message() {
    // Leaf 0 of plane 0, up port 4 (to spine 4), while every pair's traffic is in flight.
    survives(
        fail_at(SimTime::from_ns(1500), FaultKind::Cable, Some(0), Some(4), None),
        "cable",
    );
}

#[test]
fn a_spine_router_failing_mid_run_loses_no_message() {
    survives(
        fail_at(SimTime::from_ns(1500), FaultKind::Router, Some(4), None, None),
        "spine router",
    );
}

#[test]
fn a_leaf_router_failing_mid_run_loses_no_message() {
    // Leaf 3 of plane 0 carries rail 0 of ranks 12–15: their traffic moves to rail 1 once the
    // failure is detected.
    survives(
        fail_at(SimTime::from_ns(1500), FaultKind::Router, Some(3), None, None),
        "leaf router",
    );
}

#[test]
fn a_plane_failing_mid_run_loses_no_message() {
    survives(
        fail_at(SimTime::from_ns(1500), FaultKind::Plane, None, None, Some(0)),
        "plane",
    );
}

#[test]
fn early_timeouts_make_duplicates_that_are_never_delivered_twice() {
    // A timeout far below the loaded round trip: probes and re-sent packets race the
    // originals, and the receivers discard the second copies.
    let nic = NicConfig {
        reliability: Some(ReliabilityConfig {
            timeout: SimTime::from_ns(100),
            retries: 100,
            ..ReliabilityConfig::default()
        }),
        ..NicConfig::default()
    };
    let o = mixed(world(nic, FaultConfig::default(), 1), &PAIRS, 16, 4 * MTU);
    eprintln!("{:?}", o.counters);
    assert_exactly_once(&o, "early timeouts");
    let c = &o.counters;
    assert_eq!(c.lost, 0);
    assert!(c.retransmitted > 0 && c.duplicates > 0, "{c:?}");
}

#[test]
fn lossy_runs_are_deterministic() {
    let run = |seed| {
        let nic = NicConfig {
            loss_rate: 0.02,
            ..reliable(NicConfig::default())
        };
        let o = mixed(world(nic, FaultConfig::default(), seed), &PAIRS, 8, 4 * MTU);
        format!("{:?} {} {}", o.counters, o.end, o.lost_packets)
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6), "the seed chooses which packets are lost");
}

#[test]
fn unreliable_queue_messages_are_lost_and_counted() {
    let n = 200u64;
    let nic = NicConfig {
        loss_rate: 0.1,
        ..reliable(NicConfig::default())
    };
    let mut m = Machine::new(world(nic, FaultConfig::default(), 2));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(12)));
    let src = a.reg_mr(64 * n);
    let dst = b.reg_mr(64 * n);
    for i in 0..n {
        a.write_local(&src, 64 * i, &i.to_le_bytes()).unwrap();
    }
    let (cq, rcq) = (a.create_cq(), b.create_cq());
    let rq = b.create_rq(&rcq).unwrap();
    for i in 0..n {
        rq.post_recv(&dst, 64 * i, 64, i).unwrap();
    }
    let qp = a.create_qp(&cq, Rank(12));
    let remote = rq.remote();
    let sent = Rc::new(RefCell::new(0u64));
    let s = sent.clone();
    m.spawn(async move {
        for i in 0..n {
            qp.post_send(&src, 64 * i, 64, remote, false, i).unwrap();
        }
        for _ in 0..n {
            assert_eq!(cq.next().await.status, CqeStatus::Ok);
            *s.borrow_mut() += 1;
        }
    });
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0);
    // The sender saw every message complete when sent; the receiver got the others, each in
    // the next buffer, in order.
    assert_eq!(*sent.borrow(), n);
    let mut got = Vec::new();
    while let Some(c) = rcq.poll() {
        assert_eq!((c.status, c.bytes), (CqeStatus::Ok, 64));
        let v = b.read_u64(&dst, 64 * c.wr_id).unwrap();
        got.push(v);
    }
    assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
    let c = m.world().counters();
    assert!(c.messages_lost > 5, "{c:?}");
    assert_eq!(got.len() as u64 + c.messages_lost, n, "{c:?}");
    assert_eq!(c.messages_lost, c.lost);
    assert_eq!((c.retransmitted, c.timeouts, c.messages_failed), (0, 0, 0));
}

/// One write of one packet from rank 0 to rank 12; when it completes at the initiator.
fn one_write(w: World) -> (SimTime, NicCounters) {
    let mut m = Machine::new(w);
    let (a, b) = (m.context(Rank(0)), m.context(Rank(12)));
    let src = a.reg_mr(MTU);
    let dst = b.reg_mr(MTU);
    a.write_local(&src, 0, &pattern(MTU as usize, 9)).unwrap();
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(12));
    let at = Rc::new(RefCell::new(None));
    let (t, r) = (at.clone(), dst.remote(0));
    let ctx = a.clone();
    m.spawn(async move {
        qp.post_write(WriteWr::new(&src, 0, MTU, r)).unwrap();
        let c = cq.next().await;
        assert_eq!(c.status, CqeStatus::Ok);
        *t.borrow_mut() = Some(ctx.now());
    });
    m.run();
    assert_eq!(b.read_local(&dst, 0, MTU).unwrap(), pattern(MTU as usize, 9));
    let done = at.borrow().expect("the write completed");
    let c = m.world().counters();
    (done, c)
}

#[test]
fn a_retransmission_costs_its_timeout() {
    let timeout = ReliabilityConfig::default().timeout;
    let (clean, c0) = one_write(world(reliable(NicConfig::default()), FaultConfig::default(), 1));
    assert_eq!(c0.timeouts, 0);
    // Node 0's cable on rail 0 fails just before the packet leaves: it is sent into the dead
    // cable (lost, not yet detected); the probe after the timeout takes rail 1.
    let cut = fail_at(SimTime::from_ns(1), FaultKind::Cable, Some(0), Some(0), None);
    let (late, c1) = one_write(world(reliable(NicConfig::default()), cut, 1));
    eprintln!("clean {clean}, after a loss {late}: {c1:?}");
    assert_eq!((c1.lost, c1.timeouts, c1.probes, c1.retransmitted), (1, 1, 1, 1));
    assert!(clean < SimTime::from_us(3), "{clean}");
    // Timeout, then a probe round trip and the data again: about two more round trips.
    assert!(late > clean + timeout, "{late}");
    assert!(late < clean + timeout + SimTime::from_us(4), "{late}");
}

/// RDMA-write bandwidth (GB/s) from rank 0 to rank 12: `count` writes of `size` bytes, `window`
/// in flight, from the first post to the last completion; and the counters.
fn stream(w: World, count: u64, size: u64, window: u64) -> (f64, NicCounters) {
    let mut m = Machine::new(w);
    let (a, b) = (m.context(Rank(0)), m.context(Rank(12)));
    let src = a.reg_mr(size);
    let dst = b.reg_mr(size);
    a.write_local(&src, 0, &pattern(size as usize, 4)).unwrap();
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(12));
    let took = Rc::new(RefCell::new(SimTime::ZERO));
    let (t, r, ctx) = (took.clone(), dst.remote(0), a.clone());
    m.spawn(async move {
        let start = ctx.now();
        let (mut posted, mut done) = (0, 0);
        while done < count {
            while posted < count && posted - done < window {
                qp.post_write(WriteWr::new(&src, 0, size, r).wr_id(posted)).unwrap();
                posted += 1;
            }
            assert_eq!(cq.next().await.status, CqeStatus::Ok);
            done += 1;
        }
        *t.borrow_mut() = ctx.now() - start;
    });
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0);
    assert_eq!(b.read_local(&dst, 0, size).unwrap(), pattern(size as usize, 4));
    let gbs = (count * size) as f64 / took.borrow().as_secs_f64() / 1e9;
    let c = m.world().counters();
    (gbs, c)
}

#[test]
fn rdma_bandwidth_under_random_loss_stays_near_the_loss_free_value() {
    // 96 writes of 1 MiB (98 304 packets), 16 in flight: the loss-free bandwidth, then at loss
    // rates 1e-6 … 1e-3 with reliability on.
    let (count, size, window) = (96, 1 << 20, 16);
    let run = |p: f64| {
        let nic = NicConfig {
            loss_rate: p,
            ..reliable(NicConfig::default())
        };
        stream(world(nic, FaultConfig::default(), 7), count, size, window)
    };
    let (base, c0) = run(0.0);
    assert_eq!(c0.lost, 0);
    for p in [1e-6, 1e-5, 1e-4, 1e-3] {
        let (bw, c) = run(p);
        eprintln!(
            "loss {p:e}: {bw:.3} GB/s = {:.2} % of {base:.3} (lost {}, timeouts {}, re-sent {})",
            100.0 * bw / base,
            c.lost,
            c.timeouts,
            c.retransmitted
        );
        assert_eq!(c.messages_failed, 0);
        assert!(c.retransmitted >= c.lost, "every lost packet sent again: {c:?}");
        assert!(bw > 0.97 * base, "loss {p:e}: {bw:.3} GB/s against {base:.3}");
    }
}

#[test]
fn adaptive_rails_with_loss_still_deliver_exactly_once() {
    // Packets of one message take both rails and arrive out of order: the packet maps
    // reassemble them, and queue messages arriving ahead of their window are re-sent.
    let nic = NicConfig {
        loss_rate: 0.01,
        port_select: hpcnet_nic::PortSelect::Adaptive,
        ..reliable(NicConfig::default())
    };
    let o = mixed(world(nic, FaultConfig::default(), 4), &PAIRS, 8, 4 * MTU);
    eprintln!("{:?}", o.counters);
    assert_exactly_once(&o, "adaptive rails, loss 1 %");
    assert!(o.counters.lost > 0 && o.counters.out_of_order > 0, "{:?}", o.counters);
}

#[test]
fn locally_completed_writes_are_recovered_from_the_nic_copy() {
    // A write that completes when sent (the source buffer is free again at once): the NIC
    // re-sends from its own copy, and the target counts every write exactly once.
    let n = 32u64;
    let nic = NicConfig {
        loss_rate: 0.05,
        ..reliable(NicConfig::default())
    };
    let mut m = Machine::new(world(nic, FaultConfig::default(), 8));
    let (a, b) = (m.context(Rank(1)), m.context(Rank(14)));
    let src = a.reg_mr(n * 2 * MTU);
    let dst = b.reg_mr(n * 2 * MTU);
    let word = b.reg_mr(8);
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(14));
    let ctx = a.clone();
    let (s2, d2, w2) = (src.clone(), dst.clone(), word.clone());
    m.spawn(async move {
        for i in 0..n {
            let off = i * 2 * MTU;
            ctx.write_local(&s2, off, &pattern(2 * MTU as usize, i)).unwrap();
            let wr = WriteWr::new(&s2, off, 2 * MTU, d2.remote(off))
                .local_completion()
                .reply_word(w2.remote(0));
            qp.post_write(wr).unwrap();
            assert_eq!(cq.next().await.status, CqeStatus::Ok);
            // The source is reused at once: the NIC must not re-read it.
            ctx.write_local(&s2, off, &vec![0xee; 2 * MTU as usize]).unwrap();
        }
    });
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0);
    assert_eq!(b.read_u64(&word, 0).unwrap(), n, "every write counted once");
    for i in 0..n {
        let off = i * 2 * MTU;
        assert_eq!(
            b.read_local(&dst, off, 2 * MTU).unwrap(),
            pattern(2 * MTU as usize, i),
            "write {i}"
        );
    }
    let c = m.world().counters();
    assert!(c.lost > 0 && c.retransmitted > 0 && c.messages_failed == 0, "{c:?}");
}
