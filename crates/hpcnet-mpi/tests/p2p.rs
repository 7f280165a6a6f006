//! The point-to-point layer under every connection policy: delivery with correct bytes, MPI
//! ordering, on-demand connections opened once, memory as allocated, errors.

use hpcnet_des::SimTime;
use hpcnet_mpi::p2p::line_world;
use hpcnet_mpi::{Allocator, Job, JobConfig, Layout, MpiError, Policy, Transport};
use hpcnet_msg::verbs::VerbsError;
use hpcnet_msg::{Machine, Rank};
use rand::{Rng, SeedableRng};
use std::cell::RefCell;
use std::rc::Rc;

const NODES: u32 = 8;
const PER_NODE: u32 = 2;

fn pattern(src: u32, dst: u32, k: u32, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(src * 7 + dst * 13 + k * 101) as u8)
        .collect()
}

fn policies() -> Vec<Policy> {
    let mut v: Vec<Policy> = Transport::ALL.iter().map(|&t| Policy::full(t)).collect();
    v.push(Policy::grouped(Transport::Rc, 4));
    v.push(Policy::grouped(Transport::RcSrq, 4));
    v.push(Policy::grouped(Transport::XrcS, 4));
    v.push(Policy::grouped(Transport::XrcM, 4));
    v
}

/// Every rank sends `per_pair` messages of random sizes (eager and rendezvous) to every rank,
/// itself included, in a random order, and receives them all; returns the end time and the
/// number of messages checked.
fn all_pairs(policy: Policy, seed: u64, per_pair: u32) -> (SimTime, u64, Job) {
    let n = NODES * PER_NODE;
    let mut m = Machine::new(line_world(NODES, PER_NODE));
    let layout = Layout::new(u64::from(n), u64::from(PER_NODE)).unwrap();
    let job = Job::new(&m, layout, JobConfig::new(policy)).unwrap();
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    // sizes[src][dst][k]
    let sizes: Vec<Vec<Vec<u64>>> = (0..n)
        .map(|_| {
            (0..n)
                .map(|_| {
                    (0..per_pair)
                        .map(|_| match rng.gen_range(0..4) {
                            0 => 0,
                            1 => rng.gen_range(1..200),
                            2 => rng.gen_range(200..8000),
                            _ => rng.gen_range(8200..30_000),
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    let sizes = Rc::new(sizes);
    let checked = Rc::new(RefCell::new(0u64));
    for r in 0..n {
        let sizes = sizes.clone();
        let checked = checked.clone();
        let order_seed = seed * 1000 + u64::from(r);
        job.spawn(&m, Rank(r), move |ep| async move {
            let ctx = ep.ctx().clone();
            let mut order: Vec<(u32, u32)> = (0..n).flat_map(|d| (0..per_pair).map(move |k| (d, k))).collect();
            let mut rng = rand_pcg::Pcg64::seed_from_u64(order_seed);
            for i in (1..order.len()).rev() {
                order.swap(i, rng.gen_range(0..=i));
            }
            // Receives first (some messages arrive unexpected anyway).
            let mut recvs = Vec::new();
            for s in 0..n {
                for k in 0..per_pair {
                    let len = sizes[s as usize][r as usize][k as usize];
                    let mr = ctx.reg_mr(len.max(1));
                    let q = ep.irecv(&mr, 0, len, Some(Rank(s)), Some(u64::from(k)))?;
                    recvs.push((s, k, len, mr, q));
                }
            }
            let mut sends = Vec::new();
            for (d, k) in order {
                let len = sizes[r as usize][d as usize][k as usize];
                let mr = ctx.reg_mr(len.max(1));
                ctx.write_local(&mr, 0, &pattern(r, d, k, len))?;
                sends.push((ep.isend(&mr, 0, len, Rank(d), u64::from(k))?, mr));
            }
            for (s, k, len, mr, q) in recvs {
                let st = ep.wait(q).await?;
                assert_eq!((st.source, st.tag, st.len), (Rank(s), u64::from(k), len));
                assert_eq!(ctx.read_local(&mr, 0, len)?, pattern(s, r, k, len), "{s}->{r} #{k}");
                *checked.borrow_mut() += 1;
            }
            for (q, _) in sends {
                ep.wait(q).await?;
            }
            Ok(())
        });
    }
    let end = m.run();
    assert_eq!(job.errors(), vec![], "{policy}");
    assert!(job.finished(), "{policy}: job did not finish");
    assert_eq!(end.stuck_tasks, 0, "{policy}");
    let c = *checked.borrow();
    (end.time, c, job)
}

#[test]
fn every_policy_delivers_every_message_of_a_random_all_pairs_exchange() {
    for p in policies() {
        let (t, checked, job) = all_pairs(p, 7, 2);
        assert_eq!(checked, u64::from(NODES * PER_NODE).pow(2) * 2, "{p}");
        assert!(t > SimTime::ZERO);
        let on_demand: u64 = (0..NODES * PER_NODE)
            .map(|r| job.endpoint(Rank(r)).stats().on_demand)
            .sum();
        let sum = |f: fn(hpcnet_mpi::p2p::P2pStats) -> u64| -> u64 {
            (0..NODES * PER_NODE).map(|r| f(job.endpoint(Rank(r)).stats())).sum()
        };
        eprintln!(
            "{p}: {:.1} us, eager {} rendezvous {} datagrams {} rnr {} on-demand {on_demand}",
            t.as_us_f64(),
            sum(|s| s.eager),
            sum(|s| s.rendezvous),
            sum(|s| s.datagrams),
            sum(|s| s.rnr_retries)
        );
        if p.transport == Transport::Ud {
            assert!(
                sum(|s| s.datagrams) > checked,
                "{p}: large messages are cut into datagrams"
            );
        } else {
            assert!(
                sum(|s| s.eager) > 0 && sum(|s| s.rendezvous) > 0,
                "{p}: both protocols used"
            );
        }
        if p.group.is_some() {
            assert!(on_demand > 0, "{p}: all pairs need connections outside the groups");
        } else {
            assert_eq!(on_demand, 0, "{p}");
        }
    }
}

#[test]
fn runs_are_deterministic() {
    let p = Policy::grouped(Transport::XrcS, 4);
    let a = all_pairs(p, 3, 1).0;
    let b = all_pairs(p, 3, 1).0;
    assert_eq!(a, b);
}

#[test]
fn endpoint_memory_is_the_allocators_account() {
    let n = NODES * PER_NODE;
    for p in policies() {
        let m = Machine::new(line_world(NODES, PER_NODE));
        let layout = Layout::new(u64::from(n), u64::from(PER_NODE)).unwrap();
        let cfg = JobConfig::new(p);
        let job = Job::new(&m, layout, cfg).unwrap();
        for r in [0u32, 5, 15] {
            let a = Allocator::new(p, cfg.conn, layout, u64::from(r), false).unwrap();
            assert_eq!(job.endpoint(Rank(r)).memory(), *a.account(), "{p} rank {r}");
        }
    }
    // After an all-pairs exchange under group connection every pair is connected once:
    // connections = N - 1 (RC) and memory grew by one connection's worth per on-demand one.
    let p = Policy::grouped(Transport::RcSrq, 4);
    let (_, _, job) = all_pairs(p, 11, 1);
    let cfg = JobConfig::new(p);
    let per_conn = cfg.conn.buffer + cfg.conn.send_depth * cfg.conn.wqe + cfg.conn.wqe;
    for r in 0..n {
        let ep = job.endpoint(Rank(r));
        assert_eq!(ep.connections(), u64::from(n) - 1, "rank {r}");
        let st = Allocator::new(p, cfg.conn, job.layout(), u64::from(r), false).unwrap();
        assert_eq!(
            ep.memory().total(),
            st.account().total() + ep.stats().on_demand * per_conn
        );
    }
}

/// Rank 0 sends `count` messages to rank `peer` (outside its group and index) and rank `peer`
/// receives them; returns the job and the end time.
fn repeated(policy: Policy, peer: u32, count: u32) -> (Job, SimTime) {
    let n = NODES * PER_NODE;
    let mut m = Machine::new(line_world(NODES, PER_NODE));
    let layout = Layout::new(u64::from(n), u64::from(PER_NODE)).unwrap();
    let job = Job::new(&m, layout, JobConfig::new(policy)).unwrap();
    job.spawn(&m, Rank(0), move |ep| async move {
        let mr = ep.ctx().reg_mr(100);
        for k in 0..count {
            ep.ctx().write_local(&mr, 0, &pattern(0, peer, k, 100))?;
            ep.send(&mr, 0, 100, Rank(peer), 9).await?;
        }
        Ok(())
    });
    job.spawn(&m, Rank(peer), move |ep| async move {
        let mr = ep.ctx().reg_mr(100);
        for k in 0..count {
            ep.recv(&mr, 0, 100, Some(Rank(0)), Some(9)).await?;
            assert_eq!(ep.ctx().read_local(&mr, 0, 100)?, pattern(0, peer, k, 100));
        }
        Ok(())
    });
    // The other ranks only serve (relaying the connection messages).
    for r in (1..n).filter(|&r| r != peer) {
        job.spawn(&m, Rank(r), |_| async { Ok(()) });
    }
    let end = m.run();
    assert_eq!(job.errors(), vec![]);
    assert!(job.finished());
    (job, end.time)
}

#[test]
fn on_demand_connections_are_created_once_per_pair_and_reused() {
    // Group of 4: rank 0's static partners are 1, 2, 3 and 4, 8, 12; rank 5 is neither.
    let p = Policy::grouped(Transport::RcSrq, 4);
    let (job, t10) = repeated(p, 5, 10);
    let (a, b) = (job.endpoint(Rank(0)), job.endpoint(Rank(5)));
    assert_eq!(a.stats().on_demand, 1);
    assert_eq!(b.stats().on_demand, 1);
    assert_eq!(a.connections(), 7);
    // The request went 0 -> 4 -> 5 (rank 0's index in rank 5's group), the answer 5 -> 1 -> 0.
    assert_eq!(job.endpoint(Rank(4)).stats().forwarded, 1);
    assert_eq!(job.endpoint(Rank(1)).stats().forwarded, 1);
    // Opening costs qp_create + kernel_transition at both ends (35 µs each by default).
    let (_, t1) = repeated(p, 5, 1);
    assert!(t1 > SimTime::from_us(70), "{t1:?}");
    assert!(t10 < t1 + t1, "later messages reuse the connection: {t10:?} vs {t1:?}");
    // Full connection needs no handshake.
    let (job, tf) = repeated(Policy::full(Transport::RcSrq), 5, 1);
    assert_eq!(job.endpoint(Rank(0)).stats().on_demand, 0);
    assert!(tf < SimTime::from_us(70));
}

#[test]
fn tag_matching_follows_mpi_ordering() {
    let mut m = Machine::new(line_world(2, 1));
    let layout = Layout::new(2, 1).unwrap();
    let job = Job::new(&m, layout, JobConfig::new(Policy::full(Transport::RcSrq))).unwrap();
    let log = Rc::new(RefCell::new(Vec::new()));
    job.spawn(&m, Rank(0), |ep| async move {
        // Same source and tag: small, rendezvous, small — must match in sending order.
        let sizes = [10u64, 20_000, 30, 40, 50];
        let tags = [1u64, 1, 1, 2, 3];
        let mut qs = Vec::new();
        for (k, (&len, &tag)) in sizes.iter().zip(&tags).enumerate() {
            let mr = ep.ctx().reg_mr(len);
            ep.ctx().write_local(&mr, 0, &vec![k as u8 + 1; len as usize])?;
            qs.push((ep.isend(&mr, 0, len, Rank(1), tag)?, mr));
        }
        for (q, _) in qs {
            ep.wait(q).await?;
        }
        Ok(())
    });
    let log2 = log.clone();
    job.spawn(&m, Rank(1), move |ep| async move {
        // Let everything arrive unexpected first, except that tag 3 is posted early.
        let mr3 = ep.ctx().reg_mr(64);
        let early = ep.irecv(&mr3, 0, 64, Some(Rank(0)), Some(3))?;
        ep.ctx().sleep(SimTime::from_us(200)).await;
        let s = ep.wait(early).await?;
        log2.borrow_mut()
            .push((s.tag, s.len, ep.ctx().read_local(&mr3, 0, 1)?[0]));
        // Tag 2 posted before the tag-1 ones: skips the earlier tag-1 messages.
        let mr = ep.ctx().reg_mr(32_000);
        let s = ep.recv(&mr, 0, 32_000, Some(Rank(0)), Some(2)).await?;
        log2.borrow_mut()
            .push((s.tag, s.len, ep.ctx().read_local(&mr, 0, 1)?[0]));
        // Any tag, any source: the remaining tag-1 messages in sending order.
        for _ in 0..3 {
            let s = ep.recv(&mr, 0, 32_000, None, None).await?;
            log2.borrow_mut()
                .push((s.tag, s.len, ep.ctx().read_local(&mr, 0, 1)?[0]));
        }
        Ok(())
    });
    m.run();
    assert_eq!(job.errors(), vec![]);
    assert_eq!(
        *log.borrow(),
        vec![(3, 50, 5), (2, 40, 4), (1, 10, 1), (1, 20_000, 2), (1, 30, 3)]
    );
}

#[test]
fn receives_posted_first_match_in_posting_order_with_wildcards() {
    let mut m = Machine::new(line_world(2, 2));
    let job = Job::new(
        &m,
        Layout::new(4, 2).unwrap(),
        JobConfig::new(Policy::full(Transport::XrcM)),
    )
    .unwrap();
    let got = Rc::new(RefCell::new(Vec::new()));
    let g = got.clone();
    job.spawn(&m, Rank(0), move |ep| async move {
        let bufs: Vec<_> = (0..3).map(|_| ep.ctx().reg_mr(16)).collect();
        // Posted in this order: any source tag 7, then source 2 any tag, then any/any.
        let q0 = ep.irecv(&bufs[0], 0, 16, None, Some(7))?;
        let q1 = ep.irecv(&bufs[1], 0, 16, Some(Rank(2)), None)?;
        let q2 = ep.irecv(&bufs[2], 0, 16, None, None)?;
        for q in [q0, q1, q2] {
            let s = ep.wait(q).await?;
            g.borrow_mut().push((s.source.0, s.tag));
        }
        Ok(())
    });
    for (r, tag, delay) in [(2u32, 5u64, 0u64), (3, 7, 50), (1, 8, 100)] {
        job.spawn(&m, Rank(r), move |ep| async move {
            ep.ctx().sleep(SimTime::from_us(delay)).await;
            let mr = ep.ctx().reg_mr(16);
            ep.send(&mr, 0, 16, Rank(0), tag).await?;
            Ok(())
        });
    }
    m.run();
    assert_eq!(job.errors(), vec![]);
    // Rank 2's tag-5 message skips the tag-7 receive and takes the second; rank 3's tag 7 the
    // first; rank 1's the third.
    assert_eq!(*got.borrow(), vec![(3, 7), (2, 5), (1, 8)]);
}

#[test]
fn bad_calls_are_errors_not_panics() {
    let mut m = Machine::new(line_world(2, 1));
    let job = Job::new(
        &m,
        Layout::new(2, 1).unwrap(),
        JobConfig::new(Policy::full(Transport::Rc)),
    )
    .unwrap();
    job.spawn(&m, Rank(0), |ep| async move {
        let mr = ep.ctx().reg_mr(8);
        let e = ep.isend(&mr, 0, 8, Rank(5), 0).unwrap_err();
        assert!(
            matches!(
                e,
                MpiError::Rank {
                    call: "isend",
                    rank: 5,
                    ..
                }
            ),
            "{e}"
        );
        assert!(ep.isend(&mr, 4, 8, Rank(1), 0).is_err(), "overrun");
        let big = ep.ctx().reg_mr(20_000);
        ep.send(&big, 0, 20_000, Rank(1), 0).await?;
        ep.send(&mr, 0, 8, Rank(1), 1).await?;
        // A buffer of another rank, or an offset past a buffer's end, named as the verbs
        // layer names them, for the rendezvous and receive paths too.
        let foreign = ep.ctx().peer(Rank(1)).reg_mr(20_000);
        for e in [
            ep.isend(&foreign, 0, 20_000, Rank(1), 9).unwrap_err(),
            ep.irecv(&foreign, 0, 8, None, None).unwrap_err(),
        ] {
            assert!(
                matches!(
                    e,
                    MpiError::Verbs(VerbsError::ForeignBuffer {
                        call: "read_local",
                        owner: Rank(1),
                        user: Rank(0)
                    })
                ),
                "{e}"
            );
        }
        let e = ep.irecv(&mr, 9, 0, None, None).unwrap_err();
        assert!(
            matches!(
                e,
                MpiError::Verbs(VerbsError::Overrun {
                    call: "read_local",
                    offset: 9,
                    len: 0,
                    size: 8
                })
            ),
            "{e}"
        );
        // A consumed request is unknown, also once its slot holds the next request.
        let first = ep.isend(&mr, 0, 8, Rank(1), 2)?;
        ep.wait(first).await?;
        let second = ep.isend(&mr, 0, 8, Rank(1), 3)?;
        assert_ne!(first, second);
        for e in [ep.wait(first).await.unwrap_err(), ep.test(first).await.unwrap_err()] {
            assert!(matches!(e, MpiError::UnknownRequest { .. }), "{e}");
        }
        assert_eq!(ep.wait(second).await?.len, 0);
        Ok(())
    });
    job.spawn(&m, Rank(1), |ep| async move {
        let mr = ep.ctx().reg_mr(100);
        let e = ep.recv(&mr, 0, 100, Some(Rank(0)), Some(0)).await.unwrap_err();
        assert!(e.to_string().contains("20000-byte message"), "{e}");
        ep.recv(&mr, 0, 100, Some(Rank(0)), Some(1)).await?;
        for tag in [2, 3] {
            let s = ep.recv(&mr, 0, 100, Some(Rank(0)), Some(tag)).await?;
            assert_eq!((s.source, s.tag, s.len), (Rank(0), tag, 8));
        }
        Ok(())
    });
    let end = m.run();
    assert_eq!(job.errors(), vec![]);
    assert_eq!(end.stuck_tasks, 0);
    // A layout that does not match the machine.
    let m = Machine::new(line_world(2, 1));
    assert!(matches!(
        Job::new(
            &m,
            Layout::new(3, 1).unwrap(),
            JobConfig::new(Policy::full(Transport::Rc))
        ),
        Err(MpiError::Size { .. })
    ));
}

/// Random tags, sizes (eager and rendezvous) and receive patterns (specific tag or any tag),
/// receives posted before or after the messages arrive: the matches are those of MPI's rules,
/// computed here by a reference matcher over the sending order.
#[test]
fn random_matching_agrees_with_a_reference_matcher() {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(42);
    let mut cases = 0;
    while cases < 12 {
        let n = rng.gen_range(3..10);
        let tags: Vec<u64> = (0..n).map(|_| rng.gen_range(0..3)).collect();
        let sizes: Vec<u64> = (0..n)
            .map(|_| {
                if rng.gen_bool(0.3) {
                    rng.gen_range(9000..20_000)
                } else {
                    rng.gen_range(1..3000)
                }
            })
            .collect();
        let recv_tags: Vec<Option<u64>> = tags
            .iter()
            .map(|&t| if rng.gen_bool(0.4) { None } else { Some(t) })
            .collect();
        // Receives in a random order.
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, rng.gen_range(0..=i));
        }
        let posted: Vec<Option<u64>> = order.iter().map(|&i| recv_tags[i]).collect();
        let late = rng.gen_bool(0.5);
        // Reference: posted first → each message (in sending order) takes the first matching
        // receive still open; posted late → each receive (in posting order) takes the first
        // matching message not yet taken.
        let mut taken = vec![None; n];
        let mut used = vec![false; n];
        if late {
            for (ri, rt) in posted.iter().enumerate() {
                if let Some(mi) = (0..n).find(|&mi| !used[mi] && rt.is_none_or(|t| t == tags[mi])) {
                    used[mi] = true;
                    taken[ri] = Some(mi);
                }
            }
        } else {
            for (mi, &tag) in tags.iter().enumerate() {
                if let Some(ri) = (0..n).find(|&ri| taken[ri].is_none() && posted[ri].is_none_or(|t| t == tag)) {
                    taken[ri] = Some(mi);
                }
            }
        }
        if taken.iter().any(Option::is_none) {
            continue; // not every receive would be matched: not a valid MPI program
        }
        cases += 1;
        let mut m = Machine::new(line_world(2, 1));
        let job = Job::new(
            &m,
            Layout::new(2, 1).unwrap(),
            JobConfig::new(Policy::full(Transport::XrcS)),
        )
        .unwrap();
        let (t2, s2) = (tags.clone(), sizes.clone());
        job.spawn(&m, Rank(0), move |ep| async move {
            let mut qs = Vec::new();
            for k in 0..t2.len() {
                let mr = ep.ctx().reg_mr(s2[k].max(1));
                ep.ctx().write_local(&mr, 0, &pattern(0, 1, k as u32, s2[k]))?;
                qs.push((ep.isend(&mr, 0, s2[k], Rank(1), t2[k])?, mr));
            }
            for (q, _) in qs {
                ep.wait(q).await?;
            }
            Ok(())
        });
        let got = Rc::new(RefCell::new(vec![None; n]));
        let g = got.clone();
        let (t3, s3) = (tags.clone(), sizes.clone());
        job.spawn(&m, Rank(1), move |ep| async move {
            if late {
                ep.ctx().sleep(SimTime::from_us(500)).await;
            }
            let mut qs = Vec::new();
            for rt in &posted {
                let mr = ep.ctx().reg_mr(20_000);
                qs.push((ep.irecv(&mr, 0, 20_000, Some(Rank(0)), *rt)?, mr));
            }
            for (ri, (q, mr)) in qs.into_iter().enumerate() {
                let s = ep.wait(q).await?;
                // Identify the message by its bytes.
                let mi = (0..t3.len())
                    .find(|&k| {
                        s3[k] == s.len
                            && t3[k] == s.tag
                            && ep.ctx().read_local(&mr, 0, s.len).unwrap() == pattern(0, 1, k as u32, s.len)
                    })
                    .expect("a message that was sent");
                g.borrow_mut()[ri] = Some(mi);
            }
            Ok(())
        });
        m.run();
        assert_eq!(job.errors(), vec![]);
        assert_eq!(
            *got.borrow(),
            taken,
            "tags {tags:?} sizes {sizes:?} posted {:?} late {late}",
            order
        );
    }
}
