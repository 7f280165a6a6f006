//! The SHMEM library on simulated torus NICs: every call with real data, ordering under
//! deterministic and adaptive routing, barriers under skewed arrival, the fast barrier's
//! guarantee, locks, collectives on teams and active sets, and bad calls.

use hpcnet_des::{BitsPerSec, Bytes, SimTime};
use hpcnet_fabric::config::*;
use hpcnet_fabric::topology::{build, GridConfig, TopologyConfig};
use hpcnet_fabric::Network;
use hpcnet_msg::verbs::{Machine, Rank};
use hpcnet_nic::{NicConfig, World};
use hpcnet_shmem::{init, BarrierKind, Cmp, Pe, ShmemConfig, ShmemError, ShmemOp, Team};
use std::cell::RefCell;
use std::rc::Rc;

/// A 4×4 torus (16 nodes, one PE each) with request and response VC classes; adaptive routing
/// (which reorders a pair's packets) or dimension order with bubble flow control.
fn torus(adaptive: bool) -> World {
    let nic = NicConfig {
        response_vc: (!adaptive).then_some(1),
        ..NicConfig::default()
    };
    torus_with(adaptive, nic)
}

/// [`torus`] with the given NIC.
fn torus_with(adaptive: bool, nic: NicConfig) -> World {
    let topo = build(&TopologyConfig::Torus(GridConfig {
        k: vec![4, 4],
        concentration: 1,
        radix: None,
    }))
    .unwrap();
    let routing = if adaptive {
        RoutingConfig::MinimalAdaptive {
            deadlock: DeadlockAvoidance::Bubble,
            tie: TieRule::Balanced,
        }
    } else {
        RoutingConfig::DimensionOrder {
            deadlock: DeadlockAvoidance::Bubble,
            tie: TieRule::Balanced,
        }
    };
    let fabric = FabricConfig {
        link: LinkConfig {
            lanes: 4,
            lane_rate: BitsPerSec::gbps(3.25),
            encoding: Encoding::B8B10,
            latency: SimTime::from_ns(20),
            switching: Switching::CutThrough,
            ..LinkConfig::default()
        },
        link_overrides: Vec::new(),
        router: RouterConfig {
            vcs: if adaptive { 4 } else { 2 },
            credit_unit: Bytes(16),
            private_credits: 64,
            shared_credits: 0,
            latency: SimTime::from_ns(100),
            arbitration: Arbitration::RoundRobin,
            vc_select: if adaptive {
                VcSelect::RoundRobin
            } else {
                VcSelect::Packet
            },
            node_injection: NodeInjection::PerVc,
            multicast_tables: 32,
            ..RouterConfig::default()
        },
        packet: PacketConfig {
            header: Bytes(16),
            max_payload: Bytes(256),
        },
        routing,
        faults: FaultConfig::default(),
    };
    let net = Network::new(topo, fabric).unwrap();
    World::new(net, nic)
}

fn job(adaptive: bool, cfg: &ShmemConfig) -> (Machine, Vec<Pe>) {
    let m = Machine::new(torus(adaptive));
    let pes = init(&m, 16, cfg).unwrap();
    (m, pes)
}

/// Run one program per PE; panics if any is left waiting.
fn run<F, Fut>(adaptive: bool, cfg: &ShmemConfig, f: F) -> SimTime
where
    F: Fn(Pe) -> Fut,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let (mut m, pes) = job(adaptive, cfg);
    for pe in pes {
        m.spawn(f(pe));
    }
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0, "a PE program did not finish");
    assert_eq!(end.net_in_flight, 0);
    end.time
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn the_machines_order_property_is_what_the_library_sees() {
    let (_, pes) = job(false, &ShmemConfig::default());
    assert!(pes[0].ordered_delivery());
    let (_, pes) = job(true, &ShmemConfig::default());
    assert!(!pes[0].ordered_delivery());
}

#[test]
fn put_get_p_g_iput_iget_move_real_bytes() {
    for adaptive in [false, true] {
        run(adaptive, &ShmemConfig::default(), |mut pe| async move {
            let n = pe.n_pes();
            let me = pe.my_pe();
            let buf = pe.malloc(3000).await.unwrap();
            let word = pe.malloc(8).await.unwrap();
            let arr = pe.malloc(16 * 8).await.unwrap();
            // Ring: every PE puts its pattern into the next one's buffer.
            let next = (me + 1) % n;
            pe.put_bytes(buf, &pattern(3000, me as u8), next).await.unwrap();
            pe.p::<i64>(word, -(me as i64) - 7, next).await.unwrap();
            pe.iput::<u64>(arr, &[1, 2, 3, 4, 5, 6], 2, 2, 3, next).await.unwrap();
            pe.barrier_all().await.unwrap();
            let prev = (me + n - 1) % n;
            assert_eq!(pe.read_bytes(buf).unwrap(), pattern(3000, prev as u8));
            assert_eq!(pe.read::<i64>(word, 0).unwrap(), -(prev as i64) - 7);
            let got: Vec<u64> = (0..6).map(|i| pe.read::<u64>(arr, i).unwrap()).collect();
            assert_eq!(got, vec![1, 0, 3, 0, 5, 0]);
            // Gets from the previous PE see what it received from its own predecessor.
            let far = pe.get_bytes(buf.at(100), 2000, prev).await.unwrap();
            let prev2 = (me + n - 2) % n;
            assert_eq!(far, pattern(3000, prev2 as u8)[100..2100].to_vec());
            assert_eq!(pe.g::<i64>(word, prev).await.unwrap(), -(prev2 as i64) - 7);
            assert_eq!(pe.iget::<u64>(arr, 2, 3, prev).await.unwrap(), vec![1, 3, 5]);
            // Symmetric-to-symmetric, non-blocking both ways.
            let copy = pe.malloc(3000).await.unwrap();
            pe.put_from_nbi(copy, buf, 3000, next).await.unwrap();
            pe.quiet().await.unwrap();
            pe.barrier_all().await.unwrap();
            assert_eq!(pe.read_bytes(copy).unwrap(), pattern(3000, prev2 as u8));
            let back = pe.malloc(64).await.unwrap();
            pe.get_into_nbi(back, copy, 64, next).await.unwrap();
            pe.syncreads().await.unwrap();
            assert_eq!(pe.read_bytes(back).unwrap(), pattern(3000, prev as u8)[..64].to_vec());
        });
    }
}

#[test]
fn quiet_means_the_bytes_are_in_the_targets_memory() {
    for adaptive in [false, true] {
        let (mut m, mut pes) = job(adaptive, &ShmemConfig::default());
        let target = m.context(Rank(5));
        let heap5 = pes[5].heap_region().clone();
        let checked = Rc::new(RefCell::new(0));
        let pe0 = pes.remove(0);
        let c = checked.clone();
        m.spawn(async move {
            let mut pe = pe0;
            let s = pe.malloc(64 * 1024).await.unwrap();
            for round in 0..4u8 {
                // Many puts of several packets each, then quiet: all must have landed.
                for k in 0..16u64 {
                    let off = k * 4096;
                    pe.put_bytes(s.at(off), &pattern(4096, round.wrapping_add(k as u8)), 5)
                        .await
                        .unwrap();
                }
                pe.quiet().await.unwrap();
                for k in 0..16u64 {
                    let got = target.read_local(&heap5, s.offset() + k * 4096, 4096).unwrap();
                    assert_eq!(got, pattern(4096, round.wrapping_add(k as u8)), "round {round} put {k}");
                }
                *c.borrow_mut() += 1;
            }
        });
        for mut pe in pes {
            m.spawn(async move {
                pe.malloc(64 * 1024).await.unwrap();
            });
        }
        let end = m.run();
        assert_eq!(end.stuck_tasks, 0);
        assert_eq!(*checked.borrow(), 4, "adaptive = {adaptive}");
    }
}

#[test]
fn fence_orders_data_before_flag_under_both_routings() {
    for adaptive in [false, true] {
        run(adaptive, &ShmemConfig::default(), |mut pe| async move {
            let data = pe.malloc(8192).await.unwrap();
            let flag = pe.malloc(8).await.unwrap();
            let n = pe.n_pes();
            let me = pe.my_pe();
            // Everyone sends to the PE across the torus: data, fence, flag.
            let to = (me + n / 2) % n;
            pe.put_bytes(data, &pattern(8192, me as u8), to).await.unwrap();
            pe.fence().await.unwrap();
            pe.p::<u64>(flag, 1, to).await.unwrap();
            pe.wait_until::<u64>(flag, Cmp::Eq, 1).await.unwrap();
            let from = (me + n - n / 2) % n;
            assert_eq!(pe.read_bytes(data).unwrap(), pattern(8192, from as u8));
            pe.barrier_all().await.unwrap();
        });
    }
}

/// Flags that overtook their data: each PE of the lower half puts `rounds` blocks of 2 KiB to
/// its partner in the upper half, each followed (with `fence` or without) by the round's own
/// flag; the partner checks block r as soon as it sees flag r set.
fn flags_before_data(adaptive: bool, fence: bool, rounds: u64) -> u64 {
    flags_before_data_from(adaptive, fence, rounds, false)
}

/// [`flags_before_data`] with every PE sending (and receiving from the PE across) when `all`.
fn flags_before_data_from(adaptive: bool, fence: bool, rounds: u64, all: bool) -> u64 {
    let late = Rc::new(RefCell::new(0u64));
    let (mut m, pes) = job(adaptive, &ShmemConfig::default());
    for mut pe in pes {
        let late = late.clone();
        m.spawn(async move {
            let block = 2048u64;
            let data = pe.malloc(block * rounds).await.unwrap();
            let flags = pe.malloc(8 * rounds).await.unwrap();
            let (me, n) = (pe.my_pe(), pe.n_pes());
            let to = (me + n / 2) % n;
            let from = (me + n - n / 2) % n;
            // The lower half sends, the upper half receives (or everyone does both).
            let sends = all || me < n / 2;
            let receives = all || !sends;
            for r in (0..rounds).filter(|_| sends) {
                let bytes = pattern(block as usize, (me as u64 * 7 + r) as u8);
                pe.put_bytes(data.at(r * block).with_len(block), &bytes, to)
                    .await
                    .unwrap();
                if fence {
                    pe.fence().await.unwrap();
                }
                pe.p::<u64>(flags.elem::<u64>(r), 1, to).await.unwrap();
            }
            for r in (0..rounds).filter(|_| receives) {
                pe.wait_until::<u64>(flags.elem::<u64>(r), Cmp::Eq, 1).await.unwrap();
                let want = pattern(block as usize, (from as u64 * 7 + r) as u8);
                if pe.read_bytes(data.at(r * block).with_len(block)).unwrap() != want {
                    *late.borrow_mut() += 1;
                }
            }
            pe.quiet().await.unwrap();
            pe.barrier_all().await.unwrap();
        });
    }
    let end = m.run();
    assert_eq!((end.stuck_tasks, end.net_in_flight), (0, 0), "{end:?}");
    let n = *late.borrow();
    n
}

/// Under adaptive routing a pair's order is not kept: without a fence flags overtake their
/// data, so the fence has real work to do; with it no flag ever does. Under dimension-order
/// routing order is free and nothing overtakes either way.
#[test]
fn fence_has_work_under_adaptive_routing_and_none_under_dimension_order() {
    let rounds = 24;
    let unfenced = flags_before_data(true, false, rounds);
    assert!(
        unfenced > 0,
        "adaptive routing without fence: no flag overtook its data"
    );
    assert_eq!(flags_before_data(true, true, rounds), 0, "a flag overtook fenced data");
    assert_eq!(
        flags_before_data(false, false, rounds),
        0,
        "dimension order kept a pair's order"
    );
}

/// Every PE puts 2 KiB blocks and flags to the PE across at once: adaptive routing with a
/// bubble escape VC keeps saturated rings moving (an adaptive VC is taken only on credits no
/// waiting request has claimed), so the job ends with nothing stuck and, with fences, every
/// flag after its data.
#[test]
fn all_pes_putting_to_the_pe_across_under_adaptive_routing_finish() {
    assert_eq!(
        flags_before_data_from(true, true, 24, true),
        0,
        "a flag overtook fenced data"
    );
    flags_before_data_from(true, false, 24, true);
}

#[test]
fn atomics_are_atomic_and_wrap_at_their_width() {
    run(true, &ShmemConfig::default(), |mut pe| async move {
        let c64 = pe.malloc(8).await.unwrap();
        let c32 = pe.malloc(8).await.unwrap();
        let bits = pe.malloc(8).await.unwrap();
        let me = pe.my_pe() as u64;
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push(pe.atomic_fetch_inc::<i64>(c64, 0).await.unwrap());
        }
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "fetched values of one PE increase: {seen:?}"
        );
        pe.atomic_add::<u32>(c32, u32::MAX, 0).await.unwrap(); // −1 modulo 2^32
        pe.atomic_or::<u64>(bits, 1 << me, 0).await.unwrap();
        pe.barrier_all().await.unwrap();
        if me == 0 {
            assert_eq!(pe.read::<i64>(c64, 0).unwrap(), 16 * 5, "no increment lost");
            assert_eq!(pe.read::<u32>(c32, 0).unwrap(), 0u32.wrapping_sub(16));
            assert_eq!(
                pe.read::<u32>(c32, 1).unwrap(),
                0,
                "a 32-bit add leaves the next word alone"
            );
            assert_eq!(pe.read::<u64>(bits, 0).unwrap(), 0xFFFF);
        }
        pe.barrier_all().await.unwrap();
        // Fetching forms and compare-swap, one PE at a time.
        if me == 3 {
            assert_eq!(pe.atomic_fetch::<u64>(bits, 0).await.unwrap(), 0xFFFF);
            assert_eq!(pe.atomic_fetch_and::<u64>(bits, 0xF0F0, 0).await.unwrap(), 0xFFFF);
            assert_eq!(pe.atomic_fetch_xor::<u64>(bits, 0xFF, 0).await.unwrap(), 0xF0F0);
            assert_eq!(pe.atomic_fetch_or::<u64>(bits, 1, 0).await.unwrap(), 0xF00F);
            assert_eq!(pe.atomic_swap::<u64>(bits, 7, 0).await.unwrap(), 0xF00F);
            assert_eq!(
                pe.atomic_compare_swap::<u64>(bits, 8, 9, 0).await.unwrap(),
                7,
                "no swap"
            );
            assert_eq!(pe.atomic_compare_swap::<u64>(bits, 7, 9, 0).await.unwrap(), 7);
            pe.atomic_set::<i32>(c32, -5, 0).await.unwrap();
            pe.atomic_xor::<u64>(bits, 1, 0).await.unwrap();
            pe.atomic_and::<u64>(bits, 0xE, 0).await.unwrap();
            pe.atomic_inc::<i32>(c32, 0).await.unwrap();
            pe.quiet().await.unwrap();
            assert_eq!(pe.atomic_fetch::<i32>(c32, 0).await.unwrap(), -4);
            assert_eq!(pe.atomic_fetch_add::<u64>(bits, 100, 0).await.unwrap(), 8);
            assert_eq!(pe.g::<u64>(bits, 0).await.unwrap(), 108);
        }
        pe.barrier_all().await.unwrap();
    });
}

#[test]
fn barriers_release_no_pe_before_the_last_one_entered() {
    for kind in [BarrierKind::Classic, BarrierKind::Fast] {
        let cfg = ShmemConfig {
            barrier: kind,
            ..ShmemConfig::default()
        };
        let log = Rc::new(RefCell::new(Vec::new()));
        let l = log.clone();
        run(false, &cfg, move |mut pe| {
            let l = l.clone();
            async move {
                for round in 0..3u64 {
                    // Skewed arrival: PE i enters i µs (and more each round) after PE 0.
                    pe.compute(SimTime::from_ns(1000 * (pe.my_pe() as u64) * (round + 1)))
                        .await;
                    let t_in = pe.now();
                    pe.barrier_all().await.unwrap();
                    l.borrow_mut().push((round, t_in, pe.now()));
                }
            }
        });
        let log = log.borrow();
        for round in 0..3 {
            let last_in = log.iter().filter(|e| e.0 == round).map(|e| e.1).max().unwrap();
            let first_out = log.iter().filter(|e| e.0 == round).map(|e| e.2).min().unwrap();
            assert!(
                first_out > last_in,
                "{kind:?} round {round}: left at {first_out:?} before {last_in:?}"
            );
        }
    }
}

#[test]
fn the_fast_barrier_waits_for_everything_sent_to_this_pe_and_nothing_else() {
    let cfg = ShmemConfig {
        barrier: BarrierKind::Fast,
        ..ShmemConfig::default()
    };
    for adaptive in [false, true] {
        run(adaptive, &cfg, |mut pe| async move {
            let n = pe.n_pes();
            let me = pe.my_pe();
            let slots = pe.malloc(8 * n as u64 * 4).await.unwrap();
            for round in 1..=4u64 {
                // Each PE writes to a round-dependent set of PEs, unacknowledged.
                for k in 0..n {
                    if (k * 7 + me * 3 + round as usize).is_multiple_of(4) {
                        let v = round * 1000 + me as u64;
                        pe.p::<u64>(slots.elem::<u64>(((round - 1) * n as u64) + me as u64), v, k)
                            .await
                            .unwrap();
                    }
                }
                pe.barrier_all_fast().await.unwrap();
                for src in 0..n {
                    let want = if (me * 7 + src * 3 + round as usize).is_multiple_of(4) {
                        round * 1000 + src as u64
                    } else {
                        0
                    };
                    assert_eq!(
                        pe.read::<u64>(slots, (round - 1) * n as u64 + src as u64).unwrap(),
                        want,
                        "PE {me} round {round} from {src}"
                    );
                }
            }
        });
    }
}

#[test]
fn the_fast_barrier_holds_with_many_large_puts_in_flight_skew_and_any_radix() {
    // Several 1 KiB puts (4 packets each) per target in flight when the barrier starts, PEs
    // entering up to 7.5 µs apart, a dense round (everyone to everyone), sparse rounds and
    // back-to-back barriers with nothing sent; radix 2 (4 rounds on 16 PEs), 3 (3 rounds,
    // uneven) and 16 (one round); dimension order and adaptive routing (which reorders a
    // pair's packets and lets a later round's message overtake an earlier one).
    const LEN: usize = 1024;
    const PUTS: u64 = 3;
    for radix in [2, 3, 16] {
        for adaptive in [false, true] {
            let cfg = ShmemConfig {
                barrier: BarrierKind::Fast,
                fast_radix: radix,
                ..ShmemConfig::default()
            };
            run(adaptive, &cfg, move |mut pe| async move {
                let n = pe.n_pes();
                let me = pe.my_pe();
                // One slot per (round, sender, put): a PE that has left a fast barrier may
                // already be writing the next round's data.
                const ROUNDS: usize = 6;
                let slot = |round: usize, src: usize, j: u64| ((round * n + src) as u64 * PUTS + j) * LEN as u64;
                let slots = pe.malloc(slot(ROUNDS, 0, 0)).await.unwrap();
                let sends =
                    |round: usize, from: usize, to: usize| round == 2 || (from * 5 + to * 3 + round).is_multiple_of(7);
                for round in 0..ROUNDS {
                    pe.compute(SimTime::from_ns(500 * ((me * 7 + round * 3) % n) as u64))
                        .await;
                    if round % 3 != 1 {
                        for k in 0..n {
                            if sends(round, me, k) {
                                for j in 0..PUTS {
                                    let at = slots.at(slot(round, me, j));
                                    let data = pattern(LEN, (round * 16 + me) as u8 ^ j as u8);
                                    pe.put_bytes(at, &data, k).await.unwrap();
                                }
                            }
                        }
                    }
                    pe.barrier_all().await.unwrap();
                    if round % 3 == 1 {
                        continue;
                    }
                    for src in 0..n {
                        if !sends(round, src, me) {
                            continue;
                        }
                        for j in 0..PUTS {
                            let at = slots.at(slot(round, src, j)).with_len(LEN as u64);
                            assert_eq!(
                                pe.read_bytes(at).unwrap(),
                                pattern(LEN, (round * 16 + src) as u8 ^ j as u8),
                                "radix {radix} adaptive {adaptive}: PE {me} left round {round} before PE {src}'s put {j} landed"
                            );
                        }
                    }
                }
            });
        }
    }
}

#[test]
fn the_fast_barrier_does_not_count_what_is_sent_after_it() {
    // PE 1 puts 64 KiB into PE 0 just before the barrier; the others expect nothing, leave
    // early and at once put into PE 0, whose arrival counter then counts messages sent after
    // the barrier while it waits: they must not stand in for the big put (they go under the
    // heap's other key). An engine per queue pair (at most 16 × 16 queue pairs, numbered
    // across the machine). In this model the big put's last packet still lands before the
    // later puts (a NIC injects in order, and PE 1's barrier messages follow its put), so the
    // separation by key is checked directly by `the_second_heap_key_is_counted_apart`.
    const BIG: usize = 64 << 10;
    let cfg = ShmemConfig {
        barrier: BarrierKind::Fast,
        ..ShmemConfig::default()
    };
    for adaptive in [false, true] {
        let nic = NicConfig {
            engines: 256,
            response_vc: (!adaptive).then_some(1),
            ..NicConfig::default()
        };
        let mut m = Machine::new(torus_with(adaptive, nic));
        for mut pe in init(&m, 16, &cfg).unwrap() {
            m.spawn(async move {
                let n = pe.n_pes() as u64;
                let me = pe.my_pe();
                let big = pe.malloc(BIG as u64).await.unwrap();
                let small = pe.malloc(8 * n).await.unwrap();
                for round in 0..3u8 {
                    if me == 1 {
                        pe.put_bytes(big, &pattern(BIG, round), 0).await.unwrap();
                    }
                    pe.barrier_all().await.unwrap();
                    if me == 0 {
                        assert_eq!(
                            pe.read_bytes(big).unwrap(),
                            pattern(BIG, round),
                            "adaptive {adaptive}: PE 0 left barrier {round} before PE 1's put landed"
                        );
                    } else if me > 1 {
                        pe.p::<u64>(small.elem::<u64>(me as u64), u64::from(round) + 1, 0)
                            .await
                            .unwrap();
                    }
                    pe.barrier_all().await.unwrap();
                }
            });
        }
        let end = m.run();
        assert_eq!((end.stuck_tasks, end.net_in_flight), (0, 0));
    }
}

#[test]
fn the_second_heap_key_is_counted_apart() {
    // What the fast barrier relies on: a region reached under its second key is the same
    // memory, and the NIC counts arrivals under each key apart.
    let mut m = Machine::new(torus(false));
    let (a, b) = (m.context(Rank(0)), m.context(Rank(5)));
    let mr = b.reg_mr(64);
    let alt = b.add_key(&mr).unwrap();
    assert_ne!(alt.rkey, mr.rkey);
    b.watch_memory(&mr).unwrap();
    b.watch_memory(&alt).unwrap();
    let cq = a.create_cq();
    let qp = a.create_qp(&cq, Rank(5));
    let src = a.reg_mr(64);
    a.write_local(&src, 0, &[7; 16]).unwrap();
    use hpcnet_msg::verbs::WriteWr;
    qp.post_write(WriteWr::new(&src, 0, 8, mr.remote(0)).wr_id(1)).unwrap();
    qp.post_write(WriteWr::new(&src, 0, 8, alt.remote(8)).wr_id(2)).unwrap();
    qp.post_write(WriteWr::new(&src, 0, 8, alt.remote(16)).wr_id(3))
        .unwrap();
    let end = m.run();
    assert_eq!(end.net_in_flight, 0);
    assert_eq!((b.memory_writes(&mr), b.memory_writes(&alt)), (1, 2));
    assert_eq!(b.read_local(&mr, 0, 24).unwrap(), vec![7; 24]);
    assert!(a.add_key(&mr).is_err(), "another rank's region");
}

#[test]
fn point_synchronisation_signals_and_split_phase_barrier() {
    run(false, &ShmemConfig::default(), |mut pe| async move {
        let n = pe.n_pes();
        let me = pe.my_pe();
        let flags = pe.malloc(8 * 4).await.unwrap();
        let data = pe.malloc(256).await.unwrap();
        let sig = pe.malloc(8).await.unwrap();
        let ivars: Vec<_> = (0..4).map(|i| flags.elem::<u64>(i)).collect();
        if me == 1 {
            pe.compute(SimTime::from_ns(2000)).await;
            pe.p::<u64>(ivars[2], 5, 0).await.unwrap();
            pe.compute(SimTime::from_ns(2000)).await;
            pe.p::<u64>(ivars[0], 9, 0).await.unwrap();
            pe.p::<u64>(ivars[1], 9, 0).await.unwrap();
            pe.p::<u64>(ivars[3], 9, 0).await.unwrap();
            pe.p::<u64>(ivars[2], 9, 0).await.unwrap();
            pe.put_signal(data, &pattern(256, 3), sig, 2, true, 0).await.unwrap();
            pe.put_signal(data, &pattern(256, 4), sig, 40, true, 0).await.unwrap();
        }
        if me == 0 {
            assert!(!pe.test::<u64>(ivars[2], Cmp::Ge, 5).unwrap());
            let any = pe.wait_until_any::<u64>(&ivars, None, Cmp::Gt, 0).await.unwrap();
            assert_eq!(any, Some(2));
            let excl = [false, false, true, false];
            let some = pe
                .wait_until_some::<u64>(&ivars, Some(&excl), Cmp::Eq, 9)
                .await
                .unwrap();
            assert!(!some.is_empty() && !some.contains(&2));
            pe.wait_until_all::<u64>(&ivars, None, Cmp::Eq, 9).await.unwrap();
            assert!(pe.test_all::<u64>(&ivars, None, Cmp::Eq, 9).unwrap());
            assert_eq!(pe.test_some::<u64>(&ivars, None, Cmp::Eq, 9).unwrap(), vec![0, 1, 2, 3]);
            let v = pe.signal_wait_until(sig, Cmp::Eq, 42).await.unwrap();
            assert_eq!(v, 42);
            assert_eq!(pe.read_bytes(data).unwrap(), pattern(256, 4), "data before its signal");
        }
        // Two-phase barrier with work in between.
        pe.barrier_notify().await.unwrap();
        pe.compute(SimTime::from_ns(100 * me as u64)).await;
        pe.barrier_wait().await.unwrap();
        assert!(pe.barrier_wait().await.is_err(), "wait without notify");
        let _ = n;
    });
}

#[test]
fn locks_serialise_read_modify_write_sections() {
    for adaptive in [false, true] {
        run(adaptive, &ShmemConfig::default(), |mut pe| async move {
            let lock = pe.malloc(8).await.unwrap();
            let counter = pe.malloc(8).await.unwrap();
            for _ in 0..3 {
                pe.set_lock(lock).await.unwrap();
                // Unprotected read-modify-write of a word on PE 5: correct only under the lock.
                let v = pe.g::<u64>(counter, 5).await.unwrap();
                pe.compute(SimTime::from_ns(300)).await;
                pe.p::<u64>(counter, v + 1, 5).await.unwrap();
                pe.clear_lock(lock).await.unwrap();
            }
            pe.barrier_all().await.unwrap();
            if pe.my_pe() == 5 {
                assert_eq!(pe.read::<u64>(counter, 0).unwrap(), 16 * 3);
            }
            assert!(pe.clear_lock(lock).await.is_err(), "releasing a lock not held");
            if pe.my_pe() == 2 {
                assert!(!pe.test_lock(lock).await.unwrap(), "a free lock is taken");
                pe.clear_lock(lock).await.unwrap();
            }
            pe.barrier_all().await.unwrap();
        });
    }
}

#[test]
fn collectives_on_the_world_a_strided_team_and_an_active_set() {
    run(false, &ShmemConfig::default(), |mut pe| async move {
        let n = pe.n_pes() as i64;
        let me = pe.my_pe();
        let world = Team::world(&pe);
        let src = pe.malloc(8 * 64).await.unwrap();
        let dst = pe.malloc(8 * 64).await.unwrap();
        let mine: Vec<i64> = (0..4).map(|k| me as i64 * 10 + k).collect();
        let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
        pe.write_bytes(src, &bytes).unwrap();
        let read = |pe: &Pe, k: u64| -> Vec<i64> { (0..k).map(|i| pe.read::<i64>(dst, i).unwrap()).collect() };

        pe.reduce::<i64>(&world, dst, src, 4, ShmemOp::Sum).await.unwrap();
        let s: i64 = (0..n).map(|p| p * 10).sum();
        assert_eq!(read(&pe, 4), (0..4).map(|k| s + n * k).collect::<Vec<_>>());
        pe.reduce::<i64>(&world, dst, src, 4, ShmemOp::Max).await.unwrap();
        assert_eq!(read(&pe, 4), vec![150, 151, 152, 153]);
        pe.reduce::<i64>(&world, dst, src.at(8), 1, ShmemOp::Prod)
            .await
            .unwrap();
        assert_eq!(
            read(&pe, 1)[0],
            (0..n).map(|p| p * 10 + 1).fold(1i64, i64::wrapping_mul)
        );
        pe.reduce::<i64>(&world, dst, src, 1, ShmemOp::Xor).await.unwrap();
        assert_eq!(read(&pe, 1)[0], (0..n).map(|p| p * 10).fold(0, |a, b| a ^ b));

        pe.broadcast::<i64>(&world, dst, src, 4, 3).await.unwrap();
        assert_eq!(read(&pe, 4), vec![30, 31, 32, 33]);
        pe.fcollect::<i64>(&world, dst, src, 2).await.unwrap();
        assert_eq!(
            read(&pe, 32),
            (0..n).flat_map(|p| [p * 10, p * 10 + 1]).collect::<Vec<_>>()
        );
        let total = pe.collect::<i64>(&world, dst, src, (me % 3) as u64).await.unwrap();
        let want: Vec<i64> = (0..n).flat_map(|p| (0..p % 3).map(move |k| p * 10 + k)).collect();
        assert_eq!(total, want.len() as u64);
        assert_eq!(read(&pe, total), want);

        // Odd PEs form a team; alltoall of one element per member.
        let odd = world.split_strided(1, 2, 8).unwrap();
        if me % 2 == 1 {
            let idx = odd.my_pe(&pe).unwrap() as i64;
            let out: Vec<u8> = (0..8i64).flat_map(|j| (idx * 100 + j).to_le_bytes()).collect();
            pe.write_bytes(src, &out).unwrap();
            pe.alltoall::<i64>(&odd, dst, src, 1).await.unwrap();
            assert_eq!(read(&pe, 8), (0..8).map(|j| j * 100 + idx).collect::<Vec<_>>());
            pe.team_barrier(&odd).await.unwrap();
        }
        // Active set: PEs 0, 4, 8, 12.
        if me % 4 == 0 {
            pe.barrier(0, 2, 4).await.unwrap();
        }
        pe.barrier_all().await.unwrap();
    });
}

#[test]
fn bad_calls_name_the_call_and_never_panic() {
    run(false, &ShmemConfig::default(), |mut pe| async move {
        let s = pe.malloc(16).await.unwrap();
        let heap = 1 << 20;
        let e = pe.put_bytes(s.at(8).with_len(8).at(0), &[0; 8], 99).await.unwrap_err();
        assert_eq!(e.to_string(), "shmem_putmem: PE 99 does not exist (the job has 16 PEs)");
        let far = s.with_len(heap).at(heap - 8);
        let e = pe.put_bytes(far, &[0; 64], 1).await.unwrap_err();
        assert!(
            matches!(
                e,
                ShmemError::OutsideHeap {
                    call: "shmem_putmem",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("outside the symmetric heap"), "{e}");
        let e = pe.get_bytes(s, heap + 1, 1).await.unwrap_err();
        assert!(matches!(
            e,
            ShmemError::OutsideHeap {
                call: "shmem_getmem",
                ..
            }
        ));
        let e = pe.atomic_fetch_add::<u64>(s.at(4), 1, 1).await.unwrap_err();
        assert!(e.to_string().starts_with("shmem_atomic_fetch_add: address"), "{e}");
        assert!(e.to_string().contains("not aligned"), "{e}");
        let e = pe.barrier(0, 40, 2).await.unwrap_err();
        assert!(e.to_string().starts_with("shmem_barrier:"), "{e}");
        let e = pe.align(3, 8).await.unwrap_err();
        assert!(e.to_string().contains("not a power of two"), "{e}");
        let e = Team::world(&pe).split_strided(0, 2, 9).unwrap_err();
        assert!(e.to_string().contains("outside the parent team"), "{e}");
        pe.barrier_all().await.unwrap();
    });
    // Mismatched collective allocations.
    let (mut m, pes) = job(false, &ShmemConfig::default());
    let errs = Rc::new(RefCell::new(Vec::new()));
    for mut pe in pes {
        let errs = errs.clone();
        m.spawn(async move {
            let len = if pe.my_pe() == 7 { 32 } else { 64 };
            if let Err(e) = pe.malloc(len).await {
                errs.borrow_mut().push(e.to_string());
            }
        });
    }
    m.run();
    let errs = errs.borrow();
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].starts_with("shmem_malloc: PE 7 made collective allocation 0 as malloc(32)"),
        "{}",
        errs[0]
    );
}

#[test]
fn heap_calls_reuse_space_and_calloc_zeroes() {
    run(false, &ShmemConfig::default(), |mut pe| async move {
        let a = pe.malloc(1000).await.unwrap();
        pe.write_bytes(a, &[0xAB; 1000]).unwrap();
        let b = pe.align(4096, 10).await.unwrap();
        assert_eq!(b.offset() % 4096, 0);
        pe.free(a).await.unwrap();
        let c = pe.calloc(100, 8).await.unwrap();
        assert_eq!(c.offset(), a.offset(), "first fit reuses the freed space");
        assert!(pe.read_bytes(c).unwrap().iter().all(|&x| x == 0));
        let e = pe.malloc(1 << 21).await.unwrap_err();
        assert!(matches!(e, ShmemError::HeapFull { .. }), "{e}");
    });
}

#[test]
fn runs_are_deterministic() {
    let prog = |mut pe: Pe| async move {
        let s = pe.malloc(4096).await.unwrap();
        let n = pe.n_pes();
        for k in 0..n {
            pe.put_bytes(s, &pattern(512, k as u8), (pe.my_pe() + k) % n)
                .await
                .unwrap();
            pe.atomic_add::<u64>(s.at(1024), 1, k).await.unwrap();
        }
        pe.barrier_all().await.unwrap();
    };
    let a = run(true, &ShmemConfig::default(), prog);
    let b = run(true, &ShmemConfig::default(), prog);
    assert_eq!(a, b);
    assert!(a > SimTime::ZERO);
}

#[test]
fn request_and_response_classes_prevent_the_protocol_deadlock_of_one_class() {
    // Every PE reads 64 blocks of 256 B from the others at once, into NICs with a small
    // receive buffer that stall while their send engine has a read to answer (spec 03's
    // protocol deadlock): on one VC class the answers wait behind requests that wait for
    // answers; with responses on their own class (NICEVT's two virtual subnetworks) every read
    // completes.
    let storm = |response_vc: Option<u8>| {
        let nic = NicConfig {
            response_vc,
            rx_buffer: Some(Bytes(512)),
            get_queue: 1,
            tx_queue: 2,
            ..NicConfig::default()
        };
        let mut m = Machine::new(torus_with(false, nic));
        let pes = init(&m, 16, &ShmemConfig::default()).unwrap();
        let done = Rc::new(RefCell::new(0usize));
        for mut pe in pes {
            let done = done.clone();
            m.spawn(async move {
                let s = pe.malloc(2 * 64 * 256).await.unwrap();
                let (me, n) = (pe.my_pe(), pe.n_pes());
                pe.write_bytes(s.with_len(64 * 256), &pattern(64 * 256, me as u8))
                    .unwrap();
                pe.barrier_all().await.unwrap();
                for k in 0..64u64 {
                    let from = (me + 1 + (k as usize % (n - 1))) % n;
                    let dst = s.at(64 * 256 + k * 256).with_len(256);
                    pe.get_into_nbi(dst, s.at(k * 256).with_len(256), 256, from)
                        .await
                        .unwrap();
                }
                pe.syncreads().await.unwrap();
                for k in 0..64u64 {
                    let from = (me + 1 + (k as usize % (n - 1))) % n;
                    let got = pe.read_bytes(s.at(64 * 256 + k * 256).with_len(256)).unwrap();
                    assert_eq!(got, pattern(64 * 256, from as u8)[(k * 256) as usize..][..256]);
                }
                *done.borrow_mut() += 1;
            });
        }
        let end = m.run();
        let finished = *done.borrow();
        (end, finished)
    };
    let (end, finished) = storm(Some(1));
    assert_eq!((end.stuck_tasks, finished, end.net_in_flight), (0, 16, 0));
    let (end, finished) = storm(None);
    assert!(end.deadlock, "one VC class: the read storm must deadlock");
    assert!(end.stuck_tasks > 0 && finished < 16 && end.net_in_flight > 0);
}

/// The deterministic torus with NICEVT M3's receive-side aggregation (`block` bytes, flushed
/// after `timeout`) or without it; host writes charged TLP by TLP either way.
fn aggregating_torus(agg: Option<(u64, u64)>) -> World {
    let nic = NicConfig {
        response_vc: Some(1),
        host: hpcnet_nic::HostConfig {
            write_cost: hpcnet_nic::WriteCost::PerTlp,
            ..Default::default()
        },
        rx_aggregation: agg.map(|(block, timeout_ns)| hpcnet_nic::RxAggregationConfig {
            short: Bytes(64),
            block: Bytes(block),
            timeout: SimTime::from_ns(timeout_ns),
        }),
        ..NicConfig::default()
    };
    torus_with(false, nic)
}

/// Run one program per PE on `world`; the end time and the aggregation counters.
fn run_on<F, Fut>(world: World, f: F) -> (SimTime, hpcnet_nic::RxAggCounters)
where
    F: Fn(Pe) -> Fut,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let mut m = Machine::new(world);
    for pe in init(&m, 16, &ShmemConfig::default()).unwrap() {
        m.spawn(f(pe));
    }
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0, "a PE program did not finish");
    assert_eq!(end.net_in_flight, 0);
    let c = m.world().rx_aggregation_counters();
    (end.time, c)
}

/// Every PE stores short values into every other PE (many senders into one NIC at once), then
/// one long put; the data, visibility and ordering checks of each step.
async fn all_to_all_short_puts(mut pe: Pe) {
    let n = pe.n_pes();
    let me = pe.my_pe();
    let words = pe.malloc(8 * n as u64).await.unwrap();
    let long = pe.malloc(1024).await.unwrap();
    let flag = pe.malloc(8).await.unwrap();
    let sig = pe.malloc(8).await.unwrap();
    let round = pe.malloc(8).await.unwrap();
    for k in 1..n {
        let to = (me + k) % n;
        pe.p::<u64>(words.elem::<u64>(me as u64), (me * 1000 + to) as u64, to)
            .await
            .unwrap();
    }
    // quiet: every store is in its target's memory (a get reads it there).
    pe.quiet().await.unwrap();
    let next = (me + 1) % n;
    assert_eq!(
        pe.g::<u64>(words.elem::<u64>(me as u64), next).await.unwrap(),
        (me * 1000 + next) as u64
    );
    pe.barrier_all().await.unwrap();
    for from in (0..n).filter(|&f| f != me) {
        assert_eq!(pe.read::<u64>(words, from as u64).unwrap(), (from * 1000 + me) as u64);
    }
    // fence: short data, a long put, then a short flag; the flag is seen only after both.
    let to = (me + n / 2) % n;
    pe.p::<u64>(round, 7 + me as u64, to).await.unwrap();
    pe.put_bytes(long, &pattern(1024, me as u8), to).await.unwrap();
    pe.fence().await.unwrap();
    pe.p::<u64>(flag, 1, to).await.unwrap();
    pe.wait_until::<u64>(flag, Cmp::Eq, 1).await.unwrap();
    let from = (me + n - n / 2) % n;
    assert_eq!(pe.read::<u64>(round, 0).unwrap(), 7 + from as u64);
    assert_eq!(pe.read_bytes(long).unwrap(), pattern(1024, from as u8));
    // Everyone has checked before `round` is written again.
    pe.barrier_all().await.unwrap();
    // put_signal with an atomic signal: short data is in memory when the signal is seen.
    pe.put_signal(round, &(100 + me as u64).to_le_bytes(), sig, 1, true, to)
        .await
        .unwrap();
    pe.signal_wait_until(sig, Cmp::Eq, 1).await.unwrap();
    assert_eq!(
        pe.read::<u64>(round, 0).unwrap(),
        100 + from as u64,
        "data before its signal"
    );
    pe.barrier_all().await.unwrap();
}

#[test]
fn receive_aggregation_keeps_data_order_and_visibility_and_saves_host_writes() {
    let (t_off, off) = run_on(aggregating_torus(None), all_to_all_short_puts);
    let (t_on, on) = run_on(aggregating_torus(Some((256, 100))), all_to_all_short_puts);
    assert_eq!((off.aggregated, off.blocks), (0, 0));
    assert!(on.aggregated > 0 && on.blocks > 0, "{on:?}");
    // Several short packets share a block, so fewer write TLPs cross the host interface.
    assert!(on.blocks < on.aggregated, "{on:?}");
    assert!(on.host_writes < off.host_writes, "{on:?} against {off:?}");
    assert_eq!(off.host_writes - on.host_writes, on.aggregated - on.blocks);
    // A long time-out still delivers (the time-out flushes a block that does not fill); the
    // lone packets wait for it.
    let (t_slow, slow) = run_on(aggregating_torus(Some((4096, 5000))), all_to_all_short_puts);
    assert!(slow.timeouts > 0, "{slow:?}");
    assert!(t_slow > t_on && t_slow > t_off, "{t_slow} {t_on} {t_off}");
    // Deterministic.
    let (t_again, again) = run_on(aggregating_torus(Some((256, 100))), all_to_all_short_puts);
    assert_eq!((t_again, again), (t_on, on));
}

#[test]
fn wait_until_is_woken_by_a_block_flushed_at_its_time_out() {
    let sent = Rc::new(std::cell::Cell::new(SimTime::ZERO));
    let (_, c) = run_on(aggregating_torus(Some((4096, 2000))), |mut pe| {
        let sent = sent.clone();
        async move {
            let x = pe.malloc(8).await.unwrap();
            if pe.my_pe() == 3 {
                sent.set(pe.now());
                pe.p::<i64>(x, 42, 9).await.unwrap();
            }
            if pe.my_pe() == 9 {
                pe.wait_until::<i64>(x, Cmp::Eq, 42).await.unwrap();
                // The lone packet waited for the time-out in NIC memory.
                assert!(
                    pe.now() >= sent.get() + SimTime::from_ns(2000),
                    "{} {}",
                    pe.now(),
                    sent.get()
                );
            }
            pe.barrier_all().await.unwrap();
        }
    });
    assert!(c.timeouts >= 1, "{c:?}");
}

#[test]
fn host_costs_space_posts_and_charge_each_call() {
    // One PE puts 20 short messages to its neighbour, then quiets: the time grows with the
    // per-post cost by at least the posts' sum.
    let time = |costs: hpcnet_shmem::ShmemCosts| {
        let cfg = ShmemConfig {
            costs,
            ..ShmemConfig::default()
        };
        run(false, &cfg, |mut pe| async move {
            let x = pe.malloc(8 * 20).await.unwrap();
            if pe.my_pe() == 0 {
                let t0 = pe.now();
                for i in 0..20u64 {
                    pe.p::<u64>(x.elem::<u64>(i), i, 1).await.unwrap();
                }
                pe.quiet().await.unwrap();
                let took = pe.now() - t0;
                let c = pe.costs().clone();
                // 20 calls and 20 posts, plus the quiet's call and flush post.
                assert!(took >= (c.per_call + c.per_post) * 21, "{took}");
            }
            pe.barrier_all().await.unwrap();
        })
    };
    let zero = time(hpcnet_shmem::ShmemCosts::zero());
    let slow = time(hpcnet_shmem::ShmemCosts {
        per_post: SimTime::from_ns(1000),
        ..hpcnet_shmem::ShmemCosts::zero()
    });
    assert!(slow >= zero + SimTime::from_ns(20_000), "{slow} against {zero}");
}

#[test]
fn a_calls_entry_and_its_post_take_their_sum_exactly() {
    // The entry cost and the post of an atomic or a non-blocking put are waited for as one
    // interval; the call still returns exactly per_call + per_post after it was made, also
    // the first time (when the queue pair is created between the two).
    let costs = hpcnet_shmem::ShmemCosts {
        per_call: SimTime::from_ns(70),
        per_post: SimTime::from_ns(30),
        per_poll: SimTime::from_ns(10),
        ..hpcnet_shmem::ShmemCosts::default()
    };
    let cfg = ShmemConfig {
        costs,
        ..ShmemConfig::default()
    };
    let steps = Rc::new(RefCell::new(Vec::new()));
    let s2 = steps.clone();
    run(false, &cfg, move |mut pe| {
        let steps = s2.clone();
        async move {
            let x = pe.malloc(64).await.unwrap();
            if pe.my_pe() == 0 {
                for to in [1usize, 1, 2] {
                    let t0 = pe.now();
                    pe.atomic_add::<u64>(x.elem::<u64>(0), 5, to).await.unwrap();
                    steps.borrow_mut().push(pe.now() - t0);
                    let t0 = pe.now();
                    pe.put_from_nbi(x.elem::<u64>(2), x.elem::<u64>(1), 8, to)
                        .await
                        .unwrap();
                    steps.borrow_mut().push(pe.now() - t0);
                }
                pe.quiet().await.unwrap();
            }
            pe.barrier_all().await.unwrap();
            if pe.my_pe() == 1 {
                assert_eq!(pe.read::<u64>(x, 0).unwrap(), 10);
            }
            if pe.my_pe() == 2 {
                assert_eq!(pe.read::<u64>(x, 0).unwrap(), 5);
            }
        }
    });
    assert_eq!(*steps.borrow(), vec![SimTime::from_ns(100); 6]);
}
