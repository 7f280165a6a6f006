//! Verbs on simulated NICs: data lands, completions fire (and in which order), notifications
//! and reply words, reads (R2W), key and range violations, adaptive rails with out-of-order
//! arrival, loopback, and bad calls.

use hpcnet_des::{BitsPerSec, Bytes, SimTime};
use hpcnet_fabric::config::*;
use hpcnet_fabric::topology::{build, GeneralizedFatTreeConfig, GridConfig, TopologyConfig};
use hpcnet_fabric::Network;
use hpcnet_msg::verbs::{Machine, Rank, VerbsError, WriteWr};
use hpcnet_nic::{CqeKind, CqeStatus};
use hpcnet_nic::{MemoryError, NicConfig, PortSelect, World};
use std::cell::RefCell;
use std::rc::Rc;

mod common;

fn fabric(routing: RoutingConfig, max_payload: u64) -> FabricConfig {
    common::fabric_with(routing, max_payload, FaultConfig::default())
}

fn torus_world(nic: NicConfig) -> World {
    let topo = build(&TopologyConfig::Torus(GridConfig {
        k: vec![4, 4],
        concentration: 1,
        radix: None,
    }))
    .unwrap();
    let net = Network::new(
        topo,
        fabric(
            RoutingConfig::DimensionOrder {
                deadlock: DeadlockAvoidance::Bubble,
                tie: hpcnet_fabric::config::TieRule::Positive,
            },
            256,
        ),
    )
    .unwrap();
    World::new(net, nic)
}

fn dual_rail_world(nic: NicConfig) -> World {
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
    let net = Network::new(
        topo,
        fabric(
            RoutingConfig::UpDown {
                selection: Selection::Adaptive,
            },
            1024,
        ),
    )
    .unwrap();
    World::new(net, nic)
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn writes_move_real_bytes_and_complete_in_order() {
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(10)));
    let src = a.reg_mr(10_000);
    let dst = b.reg_mr(10_000);
    let data = pattern(10_000, 3);
    a.write_local(&src, 0, &data).unwrap();
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(10));
    let got = Rc::new(RefCell::new(Vec::new()));
    let g = got.clone();
    let remote = dst.remote(0);
    let src2 = src.clone();
    m.spawn(async move {
        // Three writes on one QP: completions come back in posting order.
        qp.post_write(WriteWr::new(&src2, 0, 4000, remote).wr_id(1)).unwrap();
        qp.post_write(
            WriteWr::new(
                &src2,
                4000,
                4000,
                hpcnet_msg::verbs::RemoteBuf {
                    addr: remote.addr + 4000,
                    ..remote
                },
            )
            .wr_id(2),
        )
        .unwrap();
        qp.post_write(
            WriteWr::new(
                &src2,
                8000,
                2000,
                hpcnet_msg::verbs::RemoteBuf {
                    addr: remote.addr + 8000,
                    ..remote
                },
            )
            .wr_id(3),
        )
        .unwrap();
        for _ in 0..3 {
            let c = cq.next().await;
            assert_eq!(c.status, CqeStatus::Ok);
            assert_eq!(c.kind, CqeKind::Write);
            g.borrow_mut().push((c.wr_id, c.at));
        }
    });
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0);
    assert_eq!(b.read_local(&dst, 0, 10_000).unwrap(), data);
    let got = got.borrow();
    assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert!(got[0].1 < got[1].1 && got[1].1 < got[2].1);
    // 10 000 B in 256 B packets: 40 data packets, 3 acknowledgements.
    let w = m.world();
    assert_eq!(w.counters().data_packets, 16 + 16 + 8);
    assert_eq!(w.counters().control_packets, 3);
    assert_eq!(w.counters().payload_bytes, 10_000);
    // The same counters, with names and units, in the statistics; and the network's.
    let stats = w.statistics();
    let find = |name: &str| {
        let r = stats
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("{name} missing"));
        match &r.value {
            hpcnet_des::stats::StatValue::Counter { value } => (*value, r.unit.clone()),
            v => panic!("{name} is not a counter: {v:?}"),
        }
    };
    assert_eq!(find("nic.data_packets"), (40, "packets".to_string()));
    assert_eq!(find("nic.payload_bytes"), (10_000, "bytes".to_string()));
    assert_eq!(find("net.packets_delivered").0, 43);
    assert_eq!(find("net.packets_injected").0, find("net.packets_delivered").0);
}

#[test]
fn notification_and_reply_word_fire_when_data_has_landed() {
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let (a, b) = (m.context(Rank(1)), m.context(Rank(6)));
    let src = a.reg_mr(3000);
    let dst = b.reg_mr(3000);
    let word = b.reg_mr(8);
    a.write_local(&src, 0, &pattern(3000, 9)).unwrap();
    let cq = a.create_cq();
    let tcq = b.create_cq();
    let qp = a.create_qp(&cq, Rank(6));
    let (remote, rw) = (dst.remote(0), word.remote(0));
    let (b2, dst2, word2) = (b.clone(), dst.clone(), word.clone());
    let tcq2 = tcq.clone();
    m.spawn(async move {
        for i in 0..3u64 {
            qp.post_write(
                WriteWr::new(&src, 0, 3000, remote)
                    .notify(&tcq2)
                    .reply_word(rw)
                    .wr_id(i),
            )
            .unwrap();
        }
    });
    m.spawn(async move {
        for i in 0..3u64 {
            let n = tcq.next().await;
            assert_eq!(n.kind, CqeKind::Notify);
            assert_eq!(n.peer, Rank(1));
            assert_eq!(n.wr_id, i);
            assert_eq!(n.bytes, 3000);
            // Data is complete when the notification arrives.
            assert_eq!(b2.read_local(&dst2, 0, 3000).unwrap(), pattern(3000, 9));
            assert_eq!(b2.read_u64(&word2, 0).unwrap(), i + 1);
        }
    });
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0);
    assert_eq!(b.read_u64(&word, 0).unwrap(), 3);
    // The initiator got three completions too.
    let mut n = 0;
    while let Some(c) = cq.poll() {
        assert_eq!(c.kind, CqeKind::Write);
        n += 1;
    }
    assert_eq!(n, 3);
}

#[test]
fn reads_execute_as_write_back_at_the_target() {
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(5)));
    let local = a.reg_mr(5000);
    let remote = b.reg_mr(5000);
    b.write_local(&remote, 0, &pattern(5000, 77)).unwrap();
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(5));
    let r = remote.remote(0);
    let l2 = local.clone();
    m.spawn(async move {
        qp.post_read(&l2, 0, 5000, r, 42).unwrap();
        let c = cq.next().await;
        assert_eq!((c.wr_id, c.kind, c.status), (42, CqeKind::Read, CqeStatus::Ok));
    });
    assert_eq!(m.run().stuck_tasks, 0);
    assert_eq!(a.read_local(&local, 0, 5000).unwrap(), pattern(5000, 77));
}

#[test]
fn the_nic_counts_outstanding_reads_up_per_request_and_down_per_reply() {
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(5)));
    let local = a.reg_mr(4 * 256);
    let remote = b.reg_mr(256);
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(5));
    let r = remote.remote(0);
    let (l2, a2) = (local.clone(), a.clone());
    m.spawn(async move {
        assert_eq!(a2.outstanding_reads(), Some(0));
        for i in 0..4u64 {
            qp.post_read(&l2, i * 256, 256, r, i).unwrap();
        }
        // A write is not a read: the counter does not move.
        qp.post_write(WriteWr::new(&l2, 0, 8, r).wr_id(9)).unwrap();
        assert_eq!(a2.outstanding_reads(), Some(4));
        let mut reads = 0;
        while reads < 4 {
            let c = cq.next().await;
            if c.kind == CqeKind::Read {
                reads += 1;
                assert_eq!(a2.outstanding_reads(), Some(4 - reads));
            }
        }
    });
    assert_eq!(m.run().stuck_tasks, 0);
    assert_eq!(a.outstanding_reads(), Some(0));
    assert_eq!(b.outstanding_reads(), Some(0));
}

#[test]
fn write_back_processing_is_its_own_overhead_defaulting_to_message_overhead() {
    // Time of a 512 B read from posting to completion at the requester.
    let run = |writeback_overhead: Option<SimTime>| {
        let nic = NicConfig {
            writeback_overhead,
            ..NicConfig::default()
        };
        let mut m = Machine::new(torus_world(nic));
        let (a, b) = (m.context(Rank(0)), m.context(Rank(5)));
        let local = a.reg_mr(512);
        let remote = b.reg_mr(512);
        b.write_local(&remote, 0, &pattern(512, 9)).unwrap();
        let cq = a.create_cq();
        let qp = a.create_qp(&cq, Rank(5));
        let r = remote.remote(0);
        let l2 = local.clone();
        let done = Rc::new(RefCell::new(SimTime::ZERO));
        let d = done.clone();
        m.spawn(async move {
            qp.post_read(&l2, 0, 512, r, 1).unwrap();
            let c = cq.next().await;
            assert_eq!(c.status, CqeStatus::Ok);
            *d.borrow_mut() = c.at;
        });
        assert_eq!(m.run().stuck_tasks, 0);
        assert_eq!(a.read_local(&local, 0, 512).unwrap(), pattern(512, 9));
        let t = *done.borrow();
        t
    };
    let default = NicConfig::default().message_overhead;
    // Unset = message_overhead: models that do not set it are unchanged.
    assert_eq!(run(None), run(Some(default)));
    // The write-back's processing is on the critical path once, at the target.
    assert_eq!(run(None).0 - run(Some(SimTime::ZERO)).0, default.0);
}

#[test]
fn nap_immediate_inline_bytes_skip_extraction_and_land_intact() {
    // Completion time at the receiver of one NAP-immediate of `len` bytes, and its bytes.
    let run = |inline: u64, len: u64| {
        let nic = NicConfig {
            engine_rate: Some(BitsPerSec::gbps(32.0)),
            immediate_rate: Some(BitsPerSec::gbps(8.0)),
            immediate_inline: Bytes(inline),
            ..NicConfig::default()
        };
        let mut m = Machine::new(torus_world(nic));
        let (a, b) = (m.context(Rank(3)), m.context(Rank(12)));
        let src = a.reg_mr(len);
        a.write_local(&src, 0, &pattern(len as usize, 4)).unwrap();
        let pool = b.reg_mr(2048);
        let rcq = b.create_cq();
        b.post_nap_buffers(&pool, 0, 1, &rcq).unwrap();
        let cq = a.create_cq();
        let qp = a.create_qp(&cq, Rank(12));
        let got = Rc::new(RefCell::new((SimTime::ZERO, Vec::new())));
        let g = got.clone();
        m.spawn(async move {
            qp.post_nap(Rank(12), &src, 0, len, true, 1).unwrap();
            let c = rcq.next().await;
            *g.borrow_mut() = (c.at, b.read_addr(c.addr, len).unwrap());
        });
        assert_eq!(m.run().stuck_tasks, 0);
        let r = got.borrow().clone();
        assert_eq!(r.1, pattern(len as usize, 4));
        r.0
    };
    // 8 Gb/s = 1 ns per extracted byte. 64 inline bytes of a 200 B NAP save 64 ns.
    assert_eq!(run(0, 200).0 - run(64, 200).0, SimTime::from_ns(64).0);
    // A NAP within the inline bytes extracts nothing: larger inline changes nothing.
    assert_eq!(run(64, 48), run(2048, 48));
}

#[test]
fn wrong_key_or_range_is_refused_and_nothing_is_written() {
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let (a, b) = (m.context(Rank(2)), m.context(Rank(3)));
    let src = a.reg_mr(512);
    let dst = b.reg_mr(512);
    a.write_local(&src, 0, &[0xAB; 512]).unwrap();
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(3));
    let bad_key = hpcnet_msg::verbs::RemoteBuf {
        rkey: dst.rkey ^ 1,
        ..dst.remote(0)
    };
    let overrun = dst.remote(100);
    let good = dst.remote(0);
    let results = Rc::new(RefCell::new(Vec::new()));
    let r2 = results.clone();
    let s2 = src.clone();
    m.spawn(async move {
        qp.post_write(WriteWr::new(&s2, 0, 512, bad_key).wr_id(1)).unwrap();
        qp.post_write(WriteWr::new(&s2, 0, 512, overrun).wr_id(2)).unwrap();
        qp.post_read(&s2, 0, 64, bad_key, 3).unwrap();
        qp.post_write(WriteWr::new(&s2, 0, 16, good).wr_id(4)).unwrap();
        for _ in 0..4 {
            let c = cq.next().await;
            r2.borrow_mut().push((c.wr_id, c.status));
        }
    });
    assert_eq!(m.run().stuck_tasks, 0);
    let r = results.borrow();
    assert!(matches!(r[0], (1, CqeStatus::RemoteAccess(MemoryError::BadKey { .. }))));
    assert!(matches!(
        r[1],
        (2, CqeStatus::RemoteAccess(MemoryError::OutOfRange { .. }))
    ));
    assert!(matches!(r[2], (3, CqeStatus::RemoteAccess(MemoryError::BadKey { .. }))));
    assert_eq!(r[3], (4, CqeStatus::Ok));
    // Only the good write's 16 bytes landed.
    let got = b.read_local(&dst, 0, 512).unwrap();
    assert!(got[..16].iter().all(|&x| x == 0xAB));
    assert!(got[16..].iter().all(|&x| x == 0));
    assert_eq!(m.world().counters().refused, 3);
}

#[test]
fn reply_words_puts_gets_and_fsms_check_keys_and_forged_addresses_are_refused() {
    use hpcnet_msg::verbs::{RemoteBuf, RemoteSeg, Sge};
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let (a, b) = (m.context(Rank(2)), m.context(Rank(3)));
    let src = a.reg_mr(512);
    let back = a.reg_mr(512);
    let dst = b.reg_mr(512);
    let word = b.reg_mr(8);
    a.write_local(&src, 0, &[0xAB; 512]).unwrap();
    b.write_local(&dst, 0, &[0x11; 512]).unwrap();
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(3));
    let good = dst.remote(0);
    let bad = RemoteBuf {
        rkey: dst.rkey ^ 1,
        ..good
    };
    let bad_word = RemoteBuf {
        rkey: word.rkey ^ 1,
        ..word.remote(0)
    };
    let forged = RemoteBuf {
        addr: u64::MAX - 10,
        ..good
    };
    // A reply word must be on the write's target.
    let elsewhere = RemoteBuf {
        rank: Rank(5),
        ..word.remote(0)
    };
    assert!(matches!(
        qp.post_write(WriteWr::new(&src, 0, 64, good).reply_word(elsewhere)),
        Err(VerbsError::ReplyWordRank {
            word: Rank(5),
            target: Rank(3)
        })
    ));
    let results = Rc::new(RefCell::new(Vec::new()));
    let r2 = results.clone();
    let (s2, k2) = (src.clone(), back.clone());
    let word_forged = RemoteBuf {
        addr: u64::MAX - 3,
        ..word.remote(0)
    };
    m.spawn(async move {
        let one = |mr, len| [Sge { mr, offset: 0, len }];
        qp.post_write(WriteWr::new(&s2, 0, 64, good).reply_word(bad_word).wr_id(1))
            .unwrap();
        qp.post_write(WriteWr::new(&s2, 0, 64, good).reply_word(word_forged).wr_id(2))
            .unwrap();
        qp.post_write(WriteWr::new(&s2, 0, 64, forged).wr_id(3)).unwrap();
        qp.post_put(&one(&s2, 256), &[RemoteSeg { buf: bad, len: 256 }], None, 4)
            .unwrap();
        qp.post_get(&one(&k2, 256), &[RemoteSeg { buf: bad, len: 256 }], 5)
            .unwrap();
        qp.post_fsm(&one(&s2, 32), bad, 6).unwrap();
        qp.post_put(&one(&s2, 16), &[RemoteSeg { buf: forged, len: 16 }], None, 7)
            .unwrap();
        for _ in 0..7 {
            let c = cq.next().await;
            r2.borrow_mut().push((c.wr_id, c.status));
        }
    });
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0);
    let mut r = results.borrow().clone();
    r.sort_by_key(|x| x.0);
    let bad_key = |s: &CqeStatus| matches!(s, CqeStatus::RemoteAccess(MemoryError::BadKey { .. }));
    let out_of_range = |s: &CqeStatus| matches!(s, CqeStatus::RemoteAccess(MemoryError::OutOfRange { .. }));
    assert!(bad_key(&r[0].1), "{r:?}");
    assert!(out_of_range(&r[1].1), "{r:?}");
    assert!(out_of_range(&r[2].1), "{r:?}");
    assert!(bad_key(&r[3].1) && bad_key(&r[4].1) && bad_key(&r[5].1), "{r:?}");
    assert!(out_of_range(&r[6].1), "{r:?}");
    // Nothing was written anywhere: the target's data, its reply word and the GET's buffer.
    assert!(b.read_local(&dst, 0, 512).unwrap().iter().all(|&x| x == 0x11));
    assert_eq!(b.read_u64(&word, 0).unwrap(), 0);
    assert!(a.read_local(&back, 0, 512).unwrap().iter().all(|&x| x == 0));
    assert_eq!(m.world().counters().refused, 7);
}

#[test]
fn adaptive_rails_deliver_out_of_order_and_reassemble() {
    let nic = NicConfig {
        port_select: PortSelect::Adaptive,
        ..NicConfig::default()
    };
    let mut m = Machine::new(dual_rail_world(nic));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(15)));
    let n = 256 * 1024;
    let src = a.reg_mr(n);
    let dst = b.reg_mr(n);
    a.write_local(&src, 0, &pattern(n as usize, 1)).unwrap();
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(15));
    let remote = dst.remote(0);
    let s2 = src.clone();
    // Background traffic on rail 0 from the neighbours makes the rails uneven.
    let c1 = m.context(Rank(1));
    let bsrc = c1.reg_mr(n);
    let bdst = m.context(Rank(14)).reg_mr(n);
    let bcq = c1.create_cq();
    let bqp = c1.create_qp(&bcq, Rank(14));
    let bremote = bdst.remote(0);
    m.spawn(async move {
        bqp.post_write(WriteWr::new(&bsrc, 0, n, bremote)).unwrap();
        bcq.next().await;
    });
    m.spawn(async move {
        qp.post_write(WriteWr::new(&s2, 0, n, remote)).unwrap();
        let c = cq.next().await;
        assert_eq!(c.status, CqeStatus::Ok);
    });
    assert_eq!(m.run().stuck_tasks, 0);
    assert_eq!(b.read_local(&dst, 0, n).unwrap(), pattern(n as usize, 1));
    assert!(
        m.world().counters().out_of_order > 0,
        "adaptive rails should reorder some packets"
    );
}

#[test]
fn under_out_of_order_delivery_each_message_completes_only_when_all_its_packets_landed() {
    let nic = NicConfig {
        port_select: PortSelect::Adaptive,
        ..NicConfig::default()
    };
    let mut m = Machine::new(dual_rail_world(nic));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(15)));
    const MSGS: u64 = 12;
    const LEN: u64 = 24 * 1024;
    let src = a.reg_mr(MSGS * LEN);
    let dst = b.reg_mr(MSGS * LEN);
    a.write_local(&src, 0, &pattern((MSGS * LEN) as usize, 4)).unwrap();
    let cq = a.create_cq();
    let tcq = b.create_cq();
    let qp = a.create_qp(&cq, Rank(15));
    // Background traffic on rail 0 from the neighbours makes the rails uneven.
    let c1 = m.context(Rank(1));
    let bsrc = c1.reg_mr(1 << 20);
    let bdst = m.context(Rank(14)).reg_mr(1 << 20);
    let bcq = c1.create_cq();
    let bqp = c1.create_qp(&bcq, Rank(14));
    let bremote = bdst.remote(0);
    m.spawn(async move {
        bqp.post_write(WriteWr::new(&bsrc, 0, 1 << 20, bremote)).unwrap();
        bcq.next().await;
    });
    let (s2, d2, t2) = (src.clone(), dst.clone(), tcq.clone());
    m.spawn(async move {
        for i in 0..MSGS {
            qp.post_write(WriteWr::new(&s2, i * LEN, LEN, d2.remote(i * LEN)).notify(&t2).wr_id(i))
                .unwrap();
        }
    });
    // At the target: each notification comes when that message's bytes are all in place.
    let landed = Rc::new(RefCell::new(Vec::new()));
    let l2 = landed.clone();
    let (b2, d3) = (b.clone(), dst.clone());
    m.spawn(async move {
        let all = pattern((MSGS * LEN) as usize, 4);
        for _ in 0..MSGS {
            let n = tcq.next().await;
            let off = n.wr_id * LEN;
            assert_eq!(
                b2.read_local(&d3, off, LEN).unwrap(),
                all[off as usize..(off + LEN) as usize].to_vec(),
                "message {} notified before all its packets landed",
                n.wr_id
            );
            l2.borrow_mut().push((n.wr_id, n.at));
        }
    });
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0);
    assert!(
        m.world().counters().out_of_order > 0,
        "adaptive rails should reorder packets"
    );
    // At the initiator: one completion per message, each after its data landed at the target.
    let mut done = Vec::new();
    while let Some(c) = cq.poll() {
        assert_eq!(c.status, CqeStatus::Ok);
        done.push((c.wr_id, c.at));
    }
    let landed = landed.borrow();
    let mut ids: Vec<u64> = done.iter().map(|d| d.0).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..MSGS).collect::<Vec<_>>());
    for (id, at) in &done {
        let (_, l) = landed.iter().find(|x| x.0 == *id).expect("notified");
        assert!(l < at, "message {id} completed at {at:?} before it landed at {l:?}");
    }
    // Completions are reported in the order the acknowledgements arrive, which is the order
    // the messages finished landing as long as the acknowledgements do not overtake each other.
    let order: Vec<u64> = landed.iter().map(|x| x.0).collect();
    assert_eq!(done.iter().map(|d| d.0).collect::<Vec<_>>(), order);
}

#[test]
fn adaptive_rails_double_node_bandwidth() {
    let time_for = |sel: PortSelect| {
        let host = hpcnet_nic::HostConfig {
            links: 2,
            ..Default::default()
        };
        let nic = NicConfig {
            port_select: sel,
            engines: 2,
            host,
            ..NicConfig::default()
        };
        let mut m = Machine::new(dual_rail_world(nic));
        let a = m.context(Rank(0));
        let n = 1 << 20;
        let src = a.reg_mr(n);
        let dst = m.context(Rank(12)).reg_mr(n);
        let cq = a.create_cq();
        let (q0, q1) = (a.create_qp(&cq, Rank(12)), a.create_qp(&cq, Rank(12)));
        let r = dst.remote(0);
        m.spawn(async move {
            q0.post_write(WriteWr::new(&src, 0, n / 2, r)).unwrap();
            q1.post_write(WriteWr::new(
                &src,
                n / 2,
                n / 2,
                hpcnet_msg::verbs::RemoteBuf {
                    addr: r.addr + n / 2,
                    ..r
                },
            ))
            .unwrap();
            cq.next().await;
            cq.next().await;
        });
        m.run().time
    };
    let fixed = time_for(PortSelect::Fixed);
    let adaptive = time_for(PortSelect::Adaptive);
    let ratio = fixed.0 as f64 / adaptive.0 as f64;
    assert!(
        ratio > 1.6,
        "adaptive should use both rails: fixed {fixed} adaptive {adaptive}"
    );
}

#[test]
fn loopback_to_self_never_enters_the_network() {
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let a = m.context(Rank(4));
    let s = a.reg_mr(1000);
    let d = a.reg_mr(1000);
    a.write_local(&s, 0, &pattern(1000, 5)).unwrap();
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(4));
    let r = d.remote(0);
    let s2 = s.clone();
    m.spawn(async move {
        qp.post_write(WriteWr::new(&s2, 0, 1000, r)).unwrap();
        cq.next().await;
    });
    assert_eq!(m.run().stuck_tasks, 0);
    assert_eq!(a.read_local(&d, 0, 1000).unwrap(), pattern(1000, 5));
    assert_eq!(m.world().network().counters().injected, 0);
}

#[test]
fn bad_calls_are_errors_not_panics() {
    let m = Machine::new(torus_world(NicConfig::default()));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(1)));
    let mine = a.reg_mr(100);
    let theirs = b.reg_mr(100);
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(1));
    assert!(matches!(
        qp.post_write(WriteWr::new(&theirs, 0, 10, mine.remote(0))),
        Err(VerbsError::ForeignBuffer { .. })
    ));
    assert!(matches!(
        qp.post_write(WriteWr::new(&mine, 90, 20, theirs.remote(0))),
        Err(VerbsError::Overrun { .. })
    ));
    assert!(matches!(
        qp.post_write(WriteWr::new(&mine, 0, 10, m.context(Rank(2)).reg_mr(10).remote(0))),
        Err(VerbsError::WrongPeer { .. })
    ));
    let rd = a.create_rd_qp(&cq);
    assert!(rd
        .post_write(WriteWr::new(&mine, 0, 10, m.context(Rank(2)).reg_mr(10).remote(0)))
        .is_ok());
    let far = hpcnet_msg::verbs::RemoteBuf {
        rank: Rank(99),
        addr: 0,
        rkey: 0,
    };
    assert!(matches!(
        rd.post_write(WriteWr::new(&mine, 0, 10, far)),
        Err(VerbsError::Post(_))
    ));
    assert!(a.write_local(&mine, 95, &[0; 10]).is_err());
}

#[test]
fn in_flight_limit_holds_messages_back() {
    let run = |limit: u32| {
        let host = hpcnet_nic::HostConfig {
            read_latency: SimTime::from_ns(10),
            doorbell_latency: SimTime::from_ns(10),
            ..Default::default()
        };
        let nic = NicConfig {
            max_in_flight: limit,
            engines: 1,
            message_overhead: SimTime::ZERO,
            host,
            ..NicConfig::default()
        };
        let mut m = Machine::new(torus_world(nic));
        let a = m.context(Rank(0));
        let s = a.reg_mr(64);
        let d = m.context(Rank(2)).reg_mr(64);
        let cq = a.create_cq();
        let qp = a.create_qp(&cq, Rank(2));
        let r = d.remote(0);
        m.spawn(async move {
            for i in 0..20 {
                qp.post_write(WriteWr::new(&s, 0, 64, r).wr_id(i)).unwrap();
            }
            for _ in 0..20 {
                cq.next().await;
            }
        });
        m.run().time
    };
    // One message in flight: each waits for the previous acknowledgement.
    assert!(run(1).0 > 2 * run(256).0);
}

#[test]
fn chain_dma_put_and_get_gather_and_scatter() {
    use hpcnet_msg::verbs::{RemoteSeg, Sge};
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(9)));
    let l1 = a.reg_mr(300);
    let l2 = a.reg_mr(500);
    a.write_local(&l1, 0, &pattern(300, 1)).unwrap();
    a.write_local(&l2, 0, &pattern(500, 2)).unwrap();
    let r = b.reg_mr(2000);
    b.write_local(&r, 1000, &pattern(1000, 3)).unwrap();
    let back = a.reg_mr(1000);
    let cq = a.create_cq();
    let tcq = b.create_cq();
    let qp = a.create_qp(&cq, Rank(9));
    let (l1c, l2c, backc, rr) = (l1.clone(), l2.clone(), back.clone(), r.clone());
    m.spawn(async move {
        // Gather 300 + 500 B into three remote pieces (100 + 650 + 50) of the first 1000 B.
        let local = [
            Sge {
                mr: &l1c,
                offset: 0,
                len: 300,
            },
            Sge {
                mr: &l2c,
                offset: 0,
                len: 500,
            },
        ];
        let remote = [
            RemoteSeg {
                buf: rr.remote(0),
                len: 100,
            },
            RemoteSeg {
                buf: rr.remote(200),
                len: 650,
            },
            RemoteSeg {
                buf: rr.remote(900),
                len: 50,
            },
        ];
        qp.post_put(&local, &remote, Some(&tcq), 1).unwrap();
        let c = cq.next().await;
        assert_eq!((c.kind, c.status), (CqeKind::Put, CqeStatus::Ok));
        let n = tcq.next().await;
        assert_eq!(n.kind, CqeKind::Notify);
        // GET the target's second half back, scattered into two local pieces.
        let local = [
            Sge {
                mr: &backc,
                offset: 0,
                len: 400,
            },
            Sge {
                mr: &backc,
                offset: 600,
                len: 400,
            },
        ];
        let remote = [RemoteSeg {
            buf: rr.remote(1000),
            len: 800,
        }];
        qp.post_get(&local, &remote, 2).unwrap();
        let c = cq.next().await;
        assert_eq!((c.wr_id, c.kind, c.status), (2, CqeKind::Get, CqeStatus::Ok));
        // Totals must match.
        let bad = qp.post_put(
            &[Sge {
                mr: &l1c,
                offset: 0,
                len: 10,
            }],
            &[RemoteSeg {
                buf: rr.remote(0),
                len: 11,
            }],
            None,
            3,
        );
        assert!(matches!(
            bad,
            Err(VerbsError::Post(hpcnet_nic::PostError::LengthMismatch { .. }))
        ));
    });
    assert_eq!(m.run().stuck_tasks, 0);
    let src: Vec<u8> = pattern(300, 1).into_iter().chain(pattern(500, 2)).collect();
    let got = b.read_local(&r, 0, 1000).unwrap();
    assert_eq!(&got[0..100], &src[0..100]);
    assert_eq!(&got[200..850], &src[100..750]);
    assert_eq!(&got[900..950], &src[750..800]);
    assert!(got[100..200].iter().all(|&x| x == 0));
    let back = a.read_local(&back, 0, 1000).unwrap();
    let far = pattern(1000, 3);
    assert_eq!(&back[0..400], &far[0..400]);
    assert_eq!(&back[600..1000], &far[400..800]);
}

#[test]
fn naps_land_in_pool_buffers_and_always_complete() {
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let (a, b) = (m.context(Rank(3)), m.context(Rank(12)));
    let src = a.reg_mr(4096);
    a.write_local(&src, 0, &pattern(4096, 8)).unwrap();
    let pool = b.reg_mr(2 * 2048 + 64);
    let rcq = b.create_cq();
    // Pool buffers are 2 KB aligned (spec 02).
    assert!(matches!(
        b.post_nap_buffers(&pool, 64, 2, &rcq),
        Err(VerbsError::Post(hpcnet_nic::PostError::NapPoolAlignment {
            size: 2048,
            ..
        }))
    ));
    b.post_nap_buffers(&pool, 0, 2, &rcq).unwrap();
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(12));
    let s2 = src.clone();
    let b2 = b.clone();
    m.spawn(async move {
        qp.post_nap(Rank(12), &s2, 0, 100, true, 1).unwrap();
        qp.post_nap(Rank(12), &s2, 100, 2048, false, 2).unwrap();
        // The pool has two buffers: the third NAP finds none and is refused.
        qp.post_nap(Rank(12), &s2, 0, 10, true, 3).unwrap();
        assert!(matches!(
            qp.post_nap(Rank(12), &s2, 0, 2049, false, 4),
            Err(VerbsError::Post(hpcnet_nic::PostError::NapTooLarge { .. }))
        ));
        let mut st = Vec::new();
        for _ in 0..3 {
            let c = cq.next().await;
            st.push((c.wr_id, c.kind, c.status));
        }
        assert_eq!(st[0], (1, CqeKind::Nap, CqeStatus::Ok));
        assert_eq!(st[1], (2, CqeKind::Nap, CqeStatus::Ok));
        assert_eq!(st[2], (3, CqeKind::Nap, CqeStatus::NoBuffer));
    });
    m.spawn(async move {
        let r1 = rcq.next().await;
        let r2 = rcq.next().await;
        assert_eq!((r1.kind, r1.bytes, r1.peer), (CqeKind::NapReceived, 100, Rank(3)));
        assert_eq!(b2.read_addr(r1.addr, 100).unwrap(), pattern(4096, 8)[..100].to_vec());
        assert_eq!(
            b2.read_addr(r2.addr, 2048).unwrap(),
            pattern(4096, 8)[100..2148].to_vec()
        );
        assert_ne!(r1.addr, r2.addr);
        assert_eq!((r1.addr % 2048, r2.addr % 2048), (0, 0));
    });
    assert_eq!(m.run().stuck_tasks, 0);
}

#[test]
fn fsm_gathers_small_buffers_and_skips_two_round_trips() {
    use hpcnet_msg::verbs::Sge;
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(1)));
    let x = a.reg_mr(64);
    let y = a.reg_mr(128);
    a.write_local(&x, 0, &pattern(40, 1)).unwrap();
    a.write_local(&y, 0, &pattern(60, 2)).unwrap();
    let dst = b.reg_mr(256);
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(1));
    let (x2, y2, r) = (x.clone(), y.clone(), dst.remote(0));
    let times = Rc::new(RefCell::new(Vec::new()));
    let t2 = times.clone();
    m.spawn(async move {
        let start = hpcnet_des::SimTime::ZERO;
        qp.post_fsm(
            &[
                Sge {
                    mr: &x2,
                    offset: 0,
                    len: 40,
                },
                Sge {
                    mr: &y2,
                    offset: 0,
                    len: 60,
                },
            ],
            r,
            1,
        )
        .unwrap();
        let c = cq.next().await;
        assert_eq!((c.kind, c.status), (CqeKind::Fsm, CqeStatus::Ok));
        t2.borrow_mut().push(c.at - start);
        // The same 100 bytes as an RDMA write, for comparison.
        let t1 = c.at;
        qp.post_write(WriteWr::new(&x2, 0, 40, r)).unwrap();
        let c = cq.next().await;
        t2.borrow_mut().push(c.at - t1);
        let big = [
            Sge {
                mr: &x2,
                offset: 0,
                len: 64,
            },
            Sge {
                mr: &y2,
                offset: 0,
                len: 65,
            },
        ];
        assert!(matches!(
            qp.post_fsm(&big, r, 3),
            Err(VerbsError::Post(hpcnet_nic::PostError::FsmTooLarge(129)))
        ));
    });
    assert_eq!(m.run().stuck_tasks, 0);
    let got = b.read_local(&dst, 0, 100).unwrap();
    let mut expect = pattern(40, 1);
    expect.extend(pattern(60, 2));
    assert_eq!(got, expect);
    let t = times.borrow();
    // FSM saves the descriptor fetch and the data read: two read round trips (2 x 200 ns).
    assert!(t[1].0 >= t[0].0 + 350_000, "FSM {} vs write {}", t[0], t[1]);
}

#[test]
fn atomics_apply_at_the_target_and_return_old_values() {
    use hpcnet_msg::verbs::AtomicOp;
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(7)));
    let word = b.reg_mr(16);
    b.write_local(&word, 0, &10u64.to_le_bytes()).unwrap();
    let res = a.reg_mr(8);
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(7));
    let w = word.remote(0);
    let res2 = res.clone();
    let a2 = a.clone();
    m.spawn(async move {
        qp.post_atomic(AtomicOp::Add, w, 5, 0, None, 1).unwrap();
        assert_eq!(cq.next().await.value, 10);
        qp.post_atomic(AtomicOp::FetchAdd, w, 1, 0, Some((&res2, 0)), 2)
            .unwrap();
        assert_eq!(cq.next().await.value, 15);
        assert_eq!(a2.read_u64(&res2, 0).unwrap(), 15);
        qp.post_atomic(AtomicOp::Xor, w, 0xFF, 0, None, 3).unwrap();
        assert_eq!(cq.next().await.value, 16);
        // Compare-swap: fails on a wrong compare value, succeeds on the right one.
        qp.post_atomic(AtomicOp::CompareSwap, w, 99, 1, None, 4).unwrap();
        assert_eq!(cq.next().await.value, 16 ^ 0xFF);
        qp.post_atomic(AtomicOp::CompareSwap, w, 99, 16 ^ 0xFF, None, 5)
            .unwrap();
        assert_eq!(cq.next().await.value, 16 ^ 0xFF);
        let bad = hpcnet_msg::verbs::RemoteBuf { rkey: w.rkey + 1, ..w };
        qp.post_atomic(AtomicOp::Add, bad, 1, 0, None, 6).unwrap();
        assert!(matches!(
            cq.next().await.status,
            CqeStatus::RemoteAccess(MemoryError::BadKey { .. })
        ));
    });
    assert_eq!(m.run().stuck_tasks, 0);
    assert_eq!(b.read_u64(&word, 0).unwrap(), 99);
}

#[test]
fn three_paths_loopback_crossbar_network() {
    let nic = NicConfig {
        hosts: 2,
        loopback_latency: SimTime::from_ns(30),
        crossbar_latency: SimTime::from_ns(60),
        ..NicConfig::default()
    };
    let time_to = |dst: u32| {
        let mut m = Machine::new(torus_world(nic.clone()));
        assert_eq!(m.context(Rank(0)).size(), 32);
        let a = m.context(Rank(0));
        let s = a.reg_mr(256);
        a.write_local(&s, 0, &pattern(256, 4)).unwrap();
        let d = m.context(Rank(dst)).reg_mr(256);
        let cq = a.create_cq();
        let qp = a.create_qp(&cq, Rank(dst));
        let r = d.remote(0);
        m.spawn(async move {
            qp.post_write(WriteWr::new(&s, 0, 256, r)).unwrap();
            cq.next().await;
        });
        let t = m.run().time;
        assert_eq!(m.context(Rank(dst)).read_local(&d, 0, 256).unwrap(), pattern(256, 4));
        let injected = m.world().network().counters().injected;
        (t, injected)
    };
    let (loopback, n0) = time_to(0);
    let (crossbar, n1) = time_to(1);
    let (network, n2) = time_to(2);
    assert_eq!((n0, n1), (0, 0), "same NIC: no network packets");
    assert!(n2 > 0);
    assert!(
        loopback < crossbar && crossbar < network,
        "{loopback} {crossbar} {network}"
    );
}

#[test]
fn queue_messages_fill_posted_buffers_reliably_or_not() {
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let (a, c, b) = (m.context(Rank(0)), m.context(Rank(5)), m.context(Rank(10)));
    let sa = a.reg_mr(512);
    let sc = c.reg_mr(512);
    a.write_local(&sa, 0, &pattern(512, 1)).unwrap();
    c.write_local(&sc, 0, &pattern(512, 2)).unwrap();
    // One shared receive queue at b serves both senders (SRQ), with three buffers.
    let rcq = b.create_cq();
    let srq = b.create_srq(&rcq).unwrap();
    let bufs = b.reg_mr(3 * 256);
    for i in 0..3 {
        srq.post_recv(&bufs, i * 256, 256, 100 + i).unwrap();
    }
    let (cqa, cqc) = (a.create_cq(), c.create_cq());
    let (qa, qc) = (a.create_rd_qp(&cqa), c.create_rd_qp(&cqc));
    let to = srq.remote();
    let (sa2, sc2) = (sa.clone(), sc.clone());
    m.spawn(async move {
        qa.post_send(&sa2, 0, 200, to, true, 1).unwrap();
        assert_eq!(cqa.next().await.status, CqeStatus::Ok);
        qa.post_send(&sa2, 0, 300, to, true, 2).unwrap(); // larger than the buffer
        assert_eq!(cqa.next().await.status, CqeStatus::BufferTooSmall);
        qa.post_send(&sa2, 0, 10, to, true, 3).unwrap(); // no buffer left after c's send
        assert_eq!(cqa.next().await.status, CqeStatus::NoBuffer);
    });
    m.spawn(async move {
        qc.post_send(&sc2, 0, 100, to, false, 9).unwrap();
        let c = cqc.next().await;
        assert_eq!((c.kind, c.status), (CqeKind::Send, CqeStatus::Ok));
    });
    let b2 = b.clone();
    let got = Rc::new(RefCell::new(Vec::new()));
    let g2 = got.clone();
    m.spawn(async move {
        for _ in 0..3 {
            let r = rcq.next().await;
            let data = if r.status == CqeStatus::Ok {
                b2.read_addr(r.addr, r.bytes).unwrap()
            } else {
                Vec::new()
            };
            g2.borrow_mut().push((r.wr_id, r.status, r.peer, data));
        }
    });
    assert_eq!(m.run().stuck_tasks, 0);
    let got = got.borrow();
    // Buffers are consumed in posting order by whichever message arrives first.
    let ok: Vec<_> = got.iter().filter(|g| g.1 == CqeStatus::Ok).collect();
    assert_eq!(ok.len(), 2);
    for (_, _, peer, data) in ok {
        let expect = if *peer == Rank(0) {
            pattern(512, 1)[..200].to_vec()
        } else {
            pattern(512, 2)[..100].to_vec()
        };
        assert_eq!(*data, expect);
    }
    assert!(got.iter().any(|g| g.1 == CqeStatus::BufferTooSmall));
    let mut ids: Vec<u64> = got.iter().map(|g| g.0).collect();
    ids.sort();
    assert_eq!(ids, vec![100, 101, 102]);
}

#[test]
fn unreliable_messages_without_buffers_are_dropped_silently() {
    let mut m = Machine::new(torus_world(NicConfig::default()));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(3)));
    let s = a.reg_mr(64);
    let rcq = b.create_cq();
    let rq = b.create_rq(&rcq).unwrap();
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(3));
    let to = rq.remote();
    m.spawn(async move {
        qp.post_send(&s, 0, 64, to, false, 1).unwrap();
        assert_eq!(cq.next().await.status, CqeStatus::Ok); // completes when sent
    });
    assert_eq!(m.run().stuck_tasks, 0);
    assert!(rcq.poll().is_none());
    assert_eq!(m.world().counters().refused, 1);
}

#[test]
fn local_completion_precedes_remote_landing_and_fast_messages_jump_the_queue() {
    let mut m = Machine::new(torus_world(NicConfig {
        engines: 1,
        ..NicConfig::default()
    }));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(10)));
    let s = a.reg_mr(65536);
    let d = b.reg_mr(65536);
    let cq = a.create_cq();
    let tcq = b.create_cq();
    let qp = a.create_qp(&cq, Rank(10));
    let fast = a.create_qp(&cq, Rank(10)).fast();
    let r = d.remote(0);
    let (s2, tcq2) = (s.clone(), tcq.clone());
    let log = Rc::new(RefCell::new(Vec::new()));
    let l2 = log.clone();
    m.spawn(async move {
        qp.post_write(WriteWr::new(&s2, 0, 32768, r).local_completion().notify(&tcq2).wr_id(1))
            .unwrap();
        let local = cq.next().await;
        let remote = tcq2.next().await;
        assert_eq!((local.wr_id, remote.wr_id), (1, 1));
        assert!(local.at < remote.at, "local event before the data has landed remotely");
        // Three normal messages queued, then a fast one: the fast one is served next.
        for i in 10..13 {
            qp.post_write(WriteWr::new(&s2, 0, 4096, r).wr_id(i)).unwrap();
        }
        fast.post_write(WriteWr::new(&s2, 0, 64, r).wr_id(99)).unwrap();
        for _ in 0..4 {
            let id = cq.next().await.wr_id;
            l2.borrow_mut().push(id);
        }
    });
    assert_eq!(m.run().stuck_tasks, 0);
    let log = log.borrow();
    // The first normal message had already started; the fast one overtakes the other two.
    assert_eq!(log[1], 99, "{log:?}");
    assert_eq!(tcq.poll(), None);
}

/// The 4×4 torus with one VC class per destination and dimension-order routing: the network
/// keeps the packets of a source-destination pair in order, so any reordering is the NIC's.
fn in_order_world(nic: NicConfig) -> World {
    let topo = build(&TopologyConfig::Torus(GridConfig {
        k: vec![4, 4],
        concentration: 1,
        radix: None,
    }))
    .unwrap();
    let mut f = fabric(
        RoutingConfig::DimensionOrder {
            deadlock: DeadlockAvoidance::Bubble,
            tie: hpcnet_fabric::config::TieRule::Positive,
        },
        256,
    );
    f.router.vc_select = VcSelect::Destination;
    World::new(Network::new(topo, f).unwrap(), nic)
}

/// Completion order of one engine's writes when queue pair A posts three 4 KB writes and then
/// queue pair B one 64 B write, with `vis` virtual interfaces.
fn vi_order(vis: u32) -> Vec<u64> {
    let nic = NicConfig {
        engines: 1,
        virtual_interfaces: vis,
        ..NicConfig::default()
    };
    let mut m = Machine::new(in_order_world(nic));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(10)));
    let s = a.reg_mr(4096);
    let d = b.reg_mr(4096);
    let cq = a.create_cq();
    let (qa, qb) = (a.create_qp(&cq, Rank(10)), a.create_qp(&cq, Rank(10)));
    let r = d.remote(0);
    let log = Rc::new(RefCell::new(Vec::new()));
    let l2 = log.clone();
    m.spawn(async move {
        for i in 1..=3 {
            qa.post_write(WriteWr::new(&s, 0, 4096, r).wr_id(i)).unwrap();
        }
        qb.post_write(WriteWr::new(&s, 0, 64, r).wr_id(9)).unwrap();
        for _ in 0..4 {
            let id = cq.next().await.wr_id;
            l2.borrow_mut().push(id);
        }
    });
    assert_eq!(m.run().stuck_tasks, 0);
    let v = log.borrow().clone();
    v
}

#[test]
fn virtual_interfaces_are_served_round_robin() {
    // One send queue: posting order. Several virtual interfaces: after A's first write (already
    // started when B posts), the engine alternates, so B's write goes before A's second.
    assert_eq!(vi_order(1), vec![1, 2, 3, 9]);
    assert_eq!(vi_order(4), vec![1, 9, 2, 3]);
    // Bad values are configuration errors.
    let bad = NicConfig {
        virtual_interfaces: 0,
        ..NicConfig::default()
    };
    assert_eq!(bad.validate().unwrap_err().0, "nic.virtual_interfaces");
}

/// One engine streams writes and Chain-DMA PUTs of mixed sizes (one to many packets) to one
/// target with notification, then GETs the region back and sends NAPs; returns the initiator's
/// completions (wr_id, time), the target's notifications, the final time, and the data check.
fn prefetch_stream(depth: u32) -> (Vec<(u64, SimTime)>, Vec<u64>, SimTime) {
    use hpcnet_msg::verbs::{RemoteSeg, Sge};
    let nic = NicConfig {
        engines: 1,
        descriptor_prefetch: depth,
        ..NicConfig::default()
    };
    let mut m = Machine::new(in_order_world(nic));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(10)));
    const SIZES: [u64; 8] = [1, 100, 256, 257, 3000, 20, 4096, 7];
    let total: u64 = SIZES.iter().sum::<u64>() * 4;
    let src = a.reg_mr(total);
    let data = pattern(total as usize, 5);
    a.write_local(&src, 0, &data).unwrap();
    let dst = b.reg_mr(total);
    let back = a.reg_mr(total);
    let pool = b.reg_mr(4 * 2048);
    let (cq, tcq, pcq) = (a.create_cq(), b.create_cq(), b.create_cq());
    b.post_nap_buffers(&pool, 0, 4, &pcq).unwrap();
    let qp = a.create_qp(&cq, Rank(10));
    let log = Rc::new(RefCell::new(Vec::new()));
    let (l2, s2, d2, bk2, t2) = (log.clone(), src.clone(), dst.clone(), back.clone(), tcq.clone());
    m.spawn(async move {
        let mut off = 0;
        let mut id = 0;
        for _ in 0..4 {
            for &len in &SIZES {
                if id % 2 == 0 {
                    qp.post_write(WriteWr::new(&s2, off, len, d2.remote(off)).notify(&t2).wr_id(id))
                        .unwrap();
                } else {
                    // Gather in two pieces, scatter in one.
                    let h = len / 2;
                    let local = [
                        Sge {
                            mr: &s2,
                            offset: off,
                            len: h,
                        },
                        Sge {
                            mr: &s2,
                            offset: off + h,
                            len: len - h,
                        },
                    ];
                    let remote = [RemoteSeg {
                        buf: d2.remote(off),
                        len,
                    }];
                    qp.post_put(&local, &remote, Some(&t2), id).unwrap();
                }
                off += len;
                id += 1;
            }
        }
        for _ in 0..id {
            let c = cq.next().await;
            assert_eq!(c.status, CqeStatus::Ok);
            l2.borrow_mut().push((c.wr_id, c.at));
        }
        // Read everything back in three GETs, then NAPs (immediate and indirect).
        let thirds = [0, total / 3, 2 * total / 3, total];
        for w in thirds.windows(2) {
            let local = [Sge {
                mr: &bk2,
                offset: w[0],
                len: w[1] - w[0],
            }];
            let remote = [RemoteSeg {
                buf: d2.remote(w[0]),
                len: w[1] - w[0],
            }];
            qp.post_get(&local, &remote, id).unwrap();
            id += 1;
        }
        for (k, len) in [(0u64, 60u64), (1, 2048), (2, 700), (3, 1)] {
            qp.post_nap(Rank(10), &s2, k * 100, len, k % 2 == 0, id).unwrap();
            id += 1;
        }
        for _ in 0..7 {
            let c = cq.next().await;
            assert_eq!(c.status, CqeStatus::Ok);
            l2.borrow_mut().push((c.wr_id, c.at));
        }
    });
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0);
    assert_eq!(b.read_local(&dst, 0, total).unwrap(), data, "depth {depth}");
    assert_eq!(a.read_local(&back, 0, total).unwrap(), data, "depth {depth}");
    let mut notified = Vec::new();
    while let Some(n) = tcq.poll() {
        notified.push(n.wr_id);
    }
    let mut naps = Vec::new();
    while let Some(n) = pcq.poll() {
        naps.push(b.read_addr(n.addr, n.bytes).unwrap());
    }
    let nap_lens = [60usize, 2048, 700, 1];
    assert_eq!(naps.len(), 4);
    for (k, got) in naps.iter().enumerate() {
        assert_eq!(got, &data[k * 100..k * 100 + nap_lens[k]], "NAP {k}, depth {depth}");
    }
    let w = m.world();
    // One engine, one in-order path: its packets leave and arrive in message order.
    assert_eq!(w.counters().out_of_order, 0);
    assert_eq!(w.counters().payload_bytes, 2 * total + 60 + 2048 + 700 + 1);
    let log = log.borrow().clone();
    (log, notified, end.time)
}

#[test]
fn descriptor_prefetch_keeps_bytes_and_order_and_is_deterministic() {
    let (serial, serial_notified, serial_end) = prefetch_stream(0);
    assert!(serial[..32].iter().map(|x| x.0).eq(0..32));
    for depth in [1, 2, 8] {
        let (log, notified, end) = prefetch_stream(depth);
        // The write/PUT stream's completions and target notifications come in posting order;
        // so do the GETs among themselves and the NAPs among themselves (a GET completes when
        // its data is back, a NAP when its acknowledgement is: the two kinds may interleave).
        let ids: Vec<u64> = log.iter().map(|x| x.0).collect();
        assert_eq!(ids[..32], (0..32).collect::<Vec<_>>(), "depth {depth}");
        let gets: Vec<u64> = ids.iter().copied().filter(|i| (32..35).contains(i)).collect();
        let naps: Vec<u64> = ids.iter().copied().filter(|&i| i >= 35).collect();
        assert_eq!((gets, naps), ((32..35).collect(), (35..39).collect()), "depth {depth}");
        assert!(log.windows(2).all(|w| w[0].1 <= w[1].1), "depth {depth}: {log:?}");
        assert_eq!(notified, (0..32).collect::<Vec<_>>(), "depth {depth}");
        assert_eq!(notified, serial_notified);
        // The overlap of descriptor and data stages shortens the stream.
        assert!(end < serial_end, "depth {depth}: {end:?} vs {serial_end:?}");
        // Deterministic.
        assert_eq!(prefetch_stream(depth), (log, notified, end), "depth {depth}");
    }
}

#[test]
fn fast_messages_jump_the_queue_of_a_pipelined_engine() {
    let mut m = Machine::new(torus_world(NicConfig {
        engines: 1,
        descriptor_prefetch: 1,
        ..NicConfig::default()
    }));
    let a = m.context(Rank(0));
    let s = a.reg_mr(4096);
    let d = m.context(Rank(10)).reg_mr(4096);
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(10));
    let fast = a.create_qp(&cq, Rank(10)).fast();
    let r = d.remote(0);
    let log = Rc::new(RefCell::new(Vec::new()));
    let l2 = log.clone();
    m.spawn(async move {
        for i in 10..14 {
            qp.post_write(WriteWr::new(&s, 0, 4096, r).wr_id(i)).unwrap();
        }
        fast.post_write(WriteWr::new(&s, 0, 64, r).wr_id(99)).unwrap();
        for _ in 0..5 {
            let id = cq.next().await.wr_id;
            l2.borrow_mut().push(id);
        }
    });
    assert_eq!(m.run().stuck_tasks, 0);
    // All doorbells arrive together: the engine takes message 10, and when its descriptor stage
    // is free the fast message is next; it cannot pass 10, which entered the data stage first.
    assert_eq!(*log.borrow(), vec![10, 99, 11, 12, 13]);
}

#[test]
fn prefetch_depth_bounds_how_many_descriptors_run_ahead() {
    // A 64 KiB write then four 64 B writes on one engine: during the big message's data stage
    // the engine processes at most `depth` of the small messages' descriptors. The engine's
    // data path (10 GB/s) is slower than the link, so the network adds no queueing of its own.
    let engine_rate = BitsPerSec::gbps(80.0);
    let gap = |depth: u32| {
        let mut m = Machine::new(in_order_world(NicConfig {
            engines: 1,
            descriptor_prefetch: depth,
            engine_rate: Some(engine_rate),
            ..NicConfig::default()
        }));
        let a = m.context(Rank(0));
        let s = a.reg_mr(65536);
        let d = m.context(Rank(10)).reg_mr(65536);
        let cq = a.create_cq();
        let qp = a.create_qp(&cq, Rank(10));
        let r = d.remote(0);
        let at = Rc::new(RefCell::new(Vec::new()));
        let at2 = at.clone();
        m.spawn(async move {
            qp.post_write(WriteWr::new(&s, 0, 65536, r).wr_id(0)).unwrap();
            for i in 1..5 {
                qp.post_write(WriteWr::new(&s, 0, 64, r).wr_id(i)).unwrap();
            }
            for i in 0..5 {
                let c = cq.next().await;
                assert_eq!(c.wr_id, i);
                at2.borrow_mut().push(c.at);
            }
        });
        assert_eq!(m.run().stuck_tasks, 0);
        let at = at.borrow();
        (at[4] - at[0]).as_ns_f64()
    };
    let h = hpcnet_nic::HostConfig::default();
    let descriptor = (h.read_latency + NicConfig::default().message_overhead).as_ns_f64();
    // The big message's data takes longer than four descriptor stages.
    assert!(engine_rate.serialization(Bytes(65536)).as_ns_f64() > 4.0 * descriptor);
    // Depth 1: the second to fourth small descriptors wait for the message ahead of them to
    // enter the data stage, one descriptor stage each after the big message.
    let (one, four, serial) = (gap(1), gap(4), gap(0));
    assert!(one >= 3.0 * descriptor, "{one} ns");
    // Depth 4: all four were processed during the big message and follow it at once.
    assert!(four < descriptor, "{four} ns");
    // Without prefetch every small message costs a descriptor stage and a data read round trip
    // (the last one's shorter packet saves a little of its round trip against the big one's).
    let rtt = h.read_latency.as_ns_f64();
    assert!(serial >= 4.0 * descriptor + 3.0 * rtt, "{serial} ns");
    assert!(serial > one && one > four);
}
