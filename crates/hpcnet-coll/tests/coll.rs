//! Collectives on a simulated 8×8 torus: every result equals a reference computed here, outside
//! the simulated data path (integers exactly, floating point bit for bit with the algorithm's
//! order of operations); barriers hold every member until the last one entered; runs are
//! deterministic; bad calls return errors.

mod common;
use common::{input, mix, op2, ALL_CASES};
use hpcnet_coll::{
    from_bytes, select, to_bytes, Algorithm, CollError, Collective, Comm, CommConfig, Datatype, HostCosts, ReduceOp,
    TransportConfig,
};
use hpcnet_des::SimTime;
use hpcnet_msg::verbs::{Machine, RunEnd};
use hpcnet_nic::Rank;
use hpcnet_workloads::Scenario;
use std::cell::RefCell;
use std::future::Future;
use std::path::Path;
use std::rc::Rc;

fn machine() -> Machine {
    machine_with(&[])
}

fn machine_with(overrides: &[String]) -> Machine {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/torus-8x8.toml");
    let s = Scenario::load(&path, overrides).expect("scenario");
    Machine::new(s.world().expect("world"))
}

/// `n` ranks spread over the torus (stride 5 is coprime with 64).
fn spread(n: usize) -> Vec<Rank> {
    (0..n).map(|i| Rank(((i * 5) % 64) as u32)).collect()
}

/// Run `prog` on every member of a communicator of `ranks`; per-member outputs and the run's end.
fn run<T: 'static, Fut: Future<Output = T> + 'static>(
    ranks: &[Rank],
    cfg: &CommConfig,
    prog: impl Fn(Comm) -> Fut,
) -> (Vec<Option<T>>, RunEnd) {
    let mut m = machine();
    let comms = Comm::create(&m, ranks, cfg).expect("communicator");
    let out: Rc<RefCell<Vec<Option<T>>>> = Rc::new(RefCell::new((0..ranks.len()).map(|_| None).collect()));
    for (i, c) in comms.into_iter().enumerate() {
        let o = out.clone();
        let fut = prog(c);
        m.spawn(async move {
            let v = fut.await;
            o.borrow_mut()[i] = Some(v);
        });
    }
    let end = m.run();
    let v = std::mem::take(&mut *out.borrow_mut());
    (v, end)
}

fn run_ok<T: 'static, Fut: Future<Output = T> + 'static>(
    ranks: &[Rank],
    cfg: &CommConfig,
    prog: impl Fn(Comm) -> Fut,
) -> (Vec<T>, RunEnd) {
    let (v, end) = run(ranks, cfg, prog);
    assert_eq!(end.stuck_tasks, 0, "rank programs left waiting");
    assert!(!end.deadlock);
    (v.into_iter().map(|x| x.expect("finished")).collect(), end)
}

/// Reference of recursive doubling: fold pairs (2i, 2i+1) of the first 2r members, then a
/// balanced tree over the remaining power of two, lower half on the left.
fn ref_recursive_doubling(dt: Datatype, op: ReduceOp, xs: &[Vec<u8>]) -> Vec<u8> {
    let n = xs.len();
    let mut pof2 = 1;
    while pof2 * 2 <= n {
        pof2 *= 2;
    }
    let rem = n - pof2;
    let ys: Vec<Vec<u8>> = (0..pof2)
        .map(|j| {
            if j < rem {
                op2(dt, op, &xs[2 * j], &xs[2 * j + 1])
            } else {
                xs[j + rem].clone()
            }
        })
        .collect();
    fn tree(dt: Datatype, op: ReduceOp, ys: &[Vec<u8>]) -> Vec<u8> {
        if ys.len() == 1 {
            return ys[0].clone();
        }
        let h = ys.len() / 2;
        op2(dt, op, &tree(dt, op, &ys[..h]), &tree(dt, op, &ys[h..]))
    }
    tree(dt, op, &ys)
}

/// Reference of the ring: block b (p nearly equal blocks of elements) is x_{b+1} op x_{b+2} op
/// ... op x_b, left to right.
fn ref_ring(dt: Datatype, op: ReduceOp, xs: &[Vec<u8>]) -> Vec<u8> {
    let n = xs.len();
    let es = dt.size();
    let count = xs[0].len() / es;
    let mut out = Vec::new();
    let mut start = 0;
    for b in 0..n {
        let c = count / n + usize::from(b < count % n);
        let r = start * es..(start + c) * es;
        let mut acc = xs[(b + 1) % n][r.clone()].to_vec();
        for k in 2..=n {
            acc = op2(dt, op, &acc, &xs[(b + k) % n][r.clone()]);
        }
        out.extend(acc);
        start += c;
    }
    out
}

/// Reference of the binomial reduce: the subtree of relative rank v folds in the subtrees of
/// v + 1, v + 2, v + 4, ... (below v's lowest set bit), left to right.
fn ref_binomial(dt: Datatype, op: ReduceOp, xs: &[Vec<u8>], root: usize) -> Vec<u8> {
    let n = xs.len();
    fn sub(dt: Datatype, op: ReduceOp, xs: &[Vec<u8>], root: usize, v: usize) -> Vec<u8> {
        let n = xs.len();
        let mut acc = xs[(v + root) % n].clone();
        let mut mask = 1;
        while mask < n && v & mask == 0 {
            if v + mask < n {
                acc = op2(dt, op, &acc, &sub(dt, op, xs, root, v + mask));
            }
            mask <<= 1;
        }
        acc
    }
    let _ = n;
    sub(dt, op, xs, root, 0)
}

/// Every datatype and operator, every allreduce algorithm (Rabenseifner combines operands as
/// recursive doubling does, so it has the same reference), communicators of 1 to 13 members,
/// vectors shorter than the communicator, and longer than one chunk (several chunks per message).
#[test]
fn allreduce_matches_reference_bit_for_bit() {
    for n in [1usize, 2, 5, 7, 8, 13] {
        for alg in [Algorithm::RecursiveDoubling, Algorithm::Rabenseifner, Algorithm::Ring] {
            let counts = [1usize, 3, 37, 1100];
            let (outs, _) = run_ok(&spread(n), &CommConfig::default(), |mut c| async move {
                let me = c.rank();
                let mut res = Vec::new();
                for &count in &counts {
                    for (k, &(dt, op)) in ALL_CASES.iter().enumerate() {
                        let x = input(dt, me, count, k as u64);
                        res.push(c.allreduce_bytes(dt, op, x, alg).await.expect("allreduce"));
                    }
                }
                res
            });
            let mut i = 0;
            for &count in &counts {
                for (k, &(dt, op)) in ALL_CASES.iter().enumerate() {
                    let xs: Vec<Vec<u8>> = (0..n).map(|m| input(dt, m, count, k as u64)).collect();
                    let want = match alg {
                        Algorithm::Ring => ref_ring(dt, op, &xs),
                        _ => ref_recursive_doubling(dt, op, &xs),
                    };
                    for (m, o) in outs.iter().enumerate() {
                        assert!(
                            o[i] == want,
                            "{alg:?} n={n} count={count} {dt:?} {op:?}: member {m} differs from the reference"
                        );
                    }
                    i += 1;
                }
            }
        }
    }
}

/// Integer sums in any order are exact: the default selection over sizes gives the plain sum.
#[test]
fn allreduce_auto_integer_sum_is_exact() {
    let n = 7;
    let (outs, _) = run_ok(&spread(n), &CommConfig::default(), |mut c| async move {
        let me = c.rank() as i64;
        let mut res = Vec::new();
        for count in [2usize, 300, 2000] {
            let x: Vec<i64> = (0..count as i64).map(|j| j * 1000 + me).collect();
            res.push(c.allreduce(&x, ReduceOp::Sum, Algorithm::Auto).await.unwrap());
        }
        res
    });
    for o in outs {
        for (k, count) in [2usize, 300, 2000].into_iter().enumerate() {
            let want: Vec<i64> = (0..count as i64).map(|j| 7 * j * 1000 + 21).collect();
            assert_eq!(o[k], want);
        }
    }
}

const BCAST: [Algorithm; 4] = [
    Algorithm::Binomial,
    Algorithm::ScatterAllgather,
    Algorithm::DoubleBinaryTree,
    Algorithm::Chain,
];

/// Broadcast by every algorithm and reduce (binomial: own reference order; Rabenseifner: the
/// recursive-doubling order) from the first, a middle and the last member as root.
#[test]
fn broadcast_and_reduce_from_every_kind_of_root() {
    for n in [1usize, 2, 3, 5, 8, 13] {
        let roots: Vec<usize> = vec![0, n / 2, n - 1];
        let r2 = roots.clone();
        let (outs, _) = run_ok(&spread(n), &CommConfig::default(), move |mut c| {
            let roots = r2.clone();
            async move {
                let me = c.rank();
                let mut bc = Vec::new();
                let mut rd = Vec::new();
                for &root in &roots {
                    for count in [0usize, 5, 1500] {
                        for alg in BCAST {
                            let mut buf: Vec<i64> = if me == root {
                                (0..count as i64).map(|j| j * 31 + root as i64).collect()
                            } else {
                                vec![-1; count]
                            };
                            c.broadcast(&mut buf, root, alg).await.unwrap();
                            bc.push(buf);
                        }
                    }
                    let x = from_bytes::<f64>(&input(Datatype::F64, me, 600, 99));
                    rd.push(c.reduce(&x, ReduceOp::Sum, root, Algorithm::Binomial).await.unwrap());
                    let y = from_bytes::<i32>(&input(Datatype::I32, me, 9, 98));
                    let r = c.reduce(&y, ReduceOp::Bxor, root, Algorithm::Auto).await.unwrap();
                    rd.push(r.map(|v| v.iter().map(|&z| z as f64).collect()));
                    rd.push(
                        c.reduce(&x, ReduceOp::Sum, root, Algorithm::Rabenseifner)
                            .await
                            .unwrap(),
                    );
                }
                (bc, rd)
            }
        });
        for (m, (bc, rd)) in outs.iter().enumerate() {
            let mut i = 0;
            for (ri, &root) in roots.iter().enumerate() {
                for count in [0usize, 5, 1500] {
                    let want: Vec<i64> = (0..count as i64).map(|j| j * 31 + root as i64).collect();
                    for alg in BCAST {
                        assert_eq!(
                            bc[i], want,
                            "{alg:?} broadcast n={n} root={root} count={count} member {m}"
                        );
                        i += 1;
                    }
                }
                let (f, b, rab) = (&rd[3 * ri], &rd[3 * ri + 1], &rd[3 * ri + 2]);
                if m == root {
                    let xs: Vec<Vec<u8>> = (0..n).map(|k| input(Datatype::F64, k, 600, 99)).collect();
                    let want = ref_binomial(Datatype::F64, ReduceOp::Sum, &xs, root);
                    assert!(to_bytes(f.as_ref().unwrap()) == want, "reduce f64 n={n} root={root}");
                    let ys: Vec<Vec<u8>> = (0..n).map(|k| input(Datatype::I32, k, 9, 98)).collect();
                    let want = ref_binomial(Datatype::I32, ReduceOp::Bxor, &ys, root);
                    let got: Vec<i32> = b.as_ref().unwrap().iter().map(|&z| z as i32).collect();
                    assert_eq!(to_bytes(&got), want, "reduce bxor n={n} root={root}");
                    let want = ref_recursive_doubling(Datatype::F64, ReduceOp::Sum, &xs);
                    assert!(
                        to_bytes(rab.as_ref().unwrap()) == want,
                        "Rabenseifner reduce n={n} root={root}"
                    );
                } else {
                    assert!(
                        f.is_none() && b.is_none() && rab.is_none(),
                        "only the root gets the reduction"
                    );
                }
            }
        }
    }
}

/// Reduce by binomial tree and by Rabenseifner, every type and operator, sizes with and without a
/// power of two, roots first and last: the root's result bit for bit against the algorithm's
/// operand order (binomial tree relative to the root; Rabenseifner as recursive doubling), the
/// others get none.
#[test]
fn reduce_matches_reference_for_every_type_and_operator() {
    for n in [1usize, 3, 6, 8] {
        for root in [0, n - 1] {
            let (outs, _) = run_ok(&spread(n), &CommConfig::default(), move |mut c| async move {
                let me = c.rank();
                let mut res = Vec::new();
                for (k, &(dt, op)) in ALL_CASES.iter().enumerate() {
                    for alg in [Algorithm::Binomial, Algorithm::Rabenseifner] {
                        let x = input(dt, me, 41, 200 + k as u64);
                        macro_rules! red {
                            ($t:ty) => {
                                c.reduce(&from_bytes::<$t>(&x), op, root, alg)
                                    .await
                                    .unwrap()
                                    .map(|v| to_bytes(&v))
                            };
                        }
                        res.push(match dt {
                            Datatype::F32 => red!(f32),
                            Datatype::F64 => red!(f64),
                            Datatype::I32 => red!(i32),
                            Datatype::I64 => red!(i64),
                        });
                    }
                }
                res
            });
            for (k, &(dt, op)) in ALL_CASES.iter().enumerate() {
                let xs: Vec<Vec<u8>> = (0..n).map(|m| input(dt, m, 41, 200 + k as u64)).collect();
                let bin = ref_binomial(dt, op, &xs, root);
                let rab = ref_recursive_doubling(dt, op, &xs);
                for (m, o) in outs.iter().enumerate() {
                    let what = format!("n={n} root={root} {dt:?} {op:?} member {m}");
                    if m == root {
                        assert_eq!(o[2 * k].as_deref(), Some(&bin[..]), "binomial {what}");
                        assert_eq!(o[2 * k + 1].as_deref(), Some(&rab[..]), "Rabenseifner {what}");
                    } else {
                        assert!(o[2 * k].is_none() && o[2 * k + 1].is_none(), "{what}");
                    }
                }
            }
        }
    }
}

#[test]
fn allgather_and_alltoall_place_every_block() {
    for n in [1usize, 2, 3, 5, 6, 7, 8, 12, 13, 16] {
        let (outs, _) = run_ok(&spread(n), &CommConfig::default(), move |mut c| async move {
            let me = c.rank() as i32;
            let mut res = Vec::new();
            for b in [1usize, 3, 700] {
                let x: Vec<i32> = (0..b as i32).map(|j| me * 100_000 + j).collect();
                res.push(c.allgather(&x, Algorithm::Ring).await.unwrap());
                res.push(c.allgather(&x, Algorithm::Bruck).await.unwrap());
                // Any size: non-powers of two fold first.
                res.push(c.allgather(&x, Algorithm::RecursiveDoubling).await.unwrap());
                let y: Vec<i32> = (0..(n * b) as i32).map(|j| me * 100_000 + j).collect();
                res.push(c.alltoall(&y, Algorithm::Pairwise).await.unwrap());
                res.push(c.alltoall(&y, Algorithm::Bruck).await.unwrap());
            }
            res
        });
        for (m, o) in outs.iter().enumerate() {
            for (k, b) in [1usize, 3, 700].into_iter().enumerate() {
                let gather: Vec<i32> = (0..n)
                    .flat_map(|s| (0..b as i32).map(move |j| s as i32 * 100_000 + j))
                    .collect();
                assert_eq!(o[5 * k], gather, "ring allgather n={n} b={b} member {m}");
                assert_eq!(o[5 * k + 1], gather, "Bruck allgather n={n} b={b} member {m}");
                assert_eq!(
                    o[5 * k + 2],
                    gather,
                    "recursive-doubling allgather n={n} b={b} member {m}"
                );
                // Block s of the result is block m of member s's input.
                let a2a: Vec<i32> = (0..n)
                    .flat_map(|s| (0..b as i32).map(move |j| s as i32 * 100_000 + (m * b) as i32 + j))
                    .collect();
                assert_eq!(o[5 * k + 3], a2a, "pairwise alltoall n={n} b={b} member {m}");
                assert_eq!(o[5 * k + 4], a2a, "Bruck alltoall n={n} b={b} member {m}");
            }
        }
    }
}

/// Split 16 ranks by colour (index mod 3), ordered by descending key: each part reduces over its
/// own members only, and a member's index follows the key.
#[test]
fn split_communicators_reduce_over_their_members() {
    let mut m = machine();
    let parent = spread(16);
    let colours: Vec<(Option<u32>, i64)> = (0..16)
        .map(|i| (if i == 15 { None } else { Some((i % 3) as u32) }, -(i as i64)))
        .collect();
    let subs = Comm::split(&m, &parent, &colours, &CommConfig::default()).unwrap();
    assert!(subs[15].is_none());
    let out = Rc::new(RefCell::new(Vec::new()));
    for (i, c) in subs.into_iter().enumerate() {
        let Some(mut c) = c else { continue };
        let o = out.clone();
        m.spawn(async move {
            let idx = c.rank();
            let size = c.size();
            let s = c
                .allreduce(&[i as i64, 1], ReduceOp::Sum, Algorithm::Auto)
                .await
                .unwrap();
            let g = c.allgather(&[i as i64], Algorithm::Ring).await.unwrap();
            o.borrow_mut().push((i, idx, size, s, g));
        });
    }
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0);
    let out = out.borrow();
    assert_eq!(out.len(), 15);
    for (i, idx, size, s, g) in out.iter() {
        let members: Vec<i64> = (0..15).filter(|j| j % 3 == i % 3).rev().map(|j| j as i64).collect();
        assert_eq!(*size, members.len());
        assert_eq!(members[*idx], *i as i64, "index follows the descending key");
        assert_eq!(s, &vec![members.iter().sum::<i64>(), members.len() as i64]);
        assert_eq!(g, &members);
    }
}

/// Members arrive at the barrier at very different times; none leaves before the last arrived.
#[test]
fn barrier_holds_everyone_until_the_last_arrives() {
    for (n, alg) in [2usize, 5, 8, 13]
        .into_iter()
        .flat_map(|n| [(n, Algorithm::Dissemination), (n, Algorithm::BinomialTree)])
    {
        let (outs, _) = run_ok(&spread(n), &CommConfig::default(), move |mut c| async move {
            let mut times = Vec::new();
            for round in 0..3u64 {
                let skew = mix(c.rank() as u64, round) % 20_000;
                c.context().sleep(SimTime::from_ns(skew)).await;
                let enter = c.context().now();
                c.barrier(alg).await.unwrap();
                times.push((enter, c.context().now()));
            }
            times
        });
        for round in 0..3 {
            let last_in = outs.iter().map(|t| t[round].0).max().unwrap();
            let first_out = outs.iter().map(|t| t[round].1).min().unwrap();
            assert!(
                first_out > last_in,
                "{alg:?} n={n} round {round}: a member left at {first_out} before the last entered at {last_in}"
            );
        }
    }
}

/// Two runs of the same program give the same times and results, to the picosecond.
#[test]
fn runs_are_deterministic() {
    let prog = |mut c: Comm| async move {
        let me = c.rank();
        let x = input(Datatype::F64, me, 2000, 5);
        let a = c
            .allreduce_bytes(Datatype::F64, ReduceOp::Sum, x, Algorithm::Auto)
            .await
            .unwrap();
        c.barrier(Algorithm::Auto).await.unwrap();
        let t1 = c.context().now();
        let y: Vec<i64> = (0..(13 * 40)).collect();
        let b = c.alltoall(&y, Algorithm::Auto).await.unwrap();
        (a, b, t1, c.context().now())
    };
    let (r1, e1) = run_ok(&spread(13), &CommConfig::default(), prog);
    let (r2, e2) = run_ok(&spread(13), &CommConfig::default(), prog);
    assert_eq!(r1, r2);
    assert_eq!(e1.time, e2.time);
    assert_eq!(e1.events, e2.events);
}

/// NIC work requests of a run of `prog` on `n` spread ranks with `cfg`, and the outputs.
fn messages_of<T: 'static, Fut: Future<Output = T> + 'static>(
    n: usize,
    cfg: &CommConfig,
    prog: impl Fn(Comm) -> Fut,
) -> (u64, Vec<T>) {
    let mut m = machine();
    let comms = Comm::create(&m, &spread(n), cfg).expect("communicator");
    let out: Rc<RefCell<Vec<Option<T>>>> = Rc::new(RefCell::new((0..n).map(|_| None).collect()));
    for (i, c) in comms.into_iter().enumerate() {
        let o = out.clone();
        let fut = prog(c);
        m.spawn(async move {
            let v = fut.await;
            o.borrow_mut()[i] = Some(v);
        });
    }
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0, "rank programs left waiting");
    let msgs = m
        .world()
        .statistics()
        .into_iter()
        .find(|s| s.name == "nic.messages")
        .map(|s| match s.value {
            hpcnet_des::stats::StatValue::Counter { value } => value,
            _ => panic!("nic.messages is a counter"),
        })
        .expect("nic.messages");
    let v = std::mem::take(&mut *out.borrow_mut());
    (msgs, v.into_iter().map(|x| x.expect("finished")).collect())
}

/// With rendezvous, a message the receiver keeps is one control message (and the credit of its
/// slot), one RDMA read and one FIN, whatever its size; a message it combines stays eager (a
/// write and a credit per chunk). Results are the same either way.
#[test]
fn rendezvous_moves_kept_messages_by_read_and_keeps_reductions_eager() {
    let n = 6;
    let bytes = 64 * 1024;
    let count = bytes / 8;
    let chunks = (bytes / TransportConfig::default().chunk) as u64;
    let eager = CommConfig::default();
    let rndv = CommConfig {
        transport: TransportConfig {
            rendezvous: Some(0),
            ..TransportConfig::default()
        },
        ..CommConfig::default()
    };
    let bcast = |mut c: Comm| async move {
        let mut b: Vec<i64> = if c.rank() == 2 {
            (0..count as i64).map(|j| j * 3 - 7).collect()
        } else {
            vec![0; count]
        };
        c.broadcast(&mut b, 2, Algorithm::Binomial).await.unwrap();
        b
    };
    let want: Vec<i64> = (0..count as i64).map(|j| j * 3 - 7).collect();
    let (m_eager, out) = messages_of(n, &eager, bcast);
    assert!(out.iter().all(|b| *b == want));
    assert_eq!(
        m_eager,
        2 * chunks * (n as u64 - 1),
        "a write and a credit per chunk and hop"
    );
    let (m_rndv, out) = messages_of(n, &rndv, bcast);
    assert!(out.iter().all(|b| *b == want));
    assert_eq!(m_rndv, 4 * (n as u64 - 1), "control, credit, read and FIN per hop");
    let reduce = |c: Comm| async move {
        let mut c = c;
        let x: Vec<i64> = (0..count as i64).map(|j| j + c.rank() as i64).collect();
        c.reduce(&x, ReduceOp::Sum, 0, Algorithm::Binomial).await.unwrap()
    };
    let (r_eager, a) = messages_of(n, &eager, reduce);
    let (r_rndv, b) = messages_of(n, &rndv, reduce);
    assert_eq!(a, b);
    assert_eq!(a[0].as_ref().unwrap()[5], (0..n as i64).map(|r| 5 + r).sum::<i64>());
    assert_eq!(r_eager, r_rndv, "combined messages stay eager");
    // Rabenseifner's allreduce: the halving is eager, the allgather by rendezvous.
    let allreduce = |c: Comm| async move {
        let mut c = c;
        let x: Vec<i64> = (0..count as i64).map(|j| j * (c.rank() as i64 + 1)).collect();
        c.allreduce(&x, ReduceOp::Sum, Algorithm::Rabenseifner).await.unwrap()
    };
    let (a_eager, a) = messages_of(n, &eager, allreduce);
    let (a_rndv, b) = messages_of(n, &rndv, allreduce);
    assert_eq!(a, b);
    assert!(a_rndv < a_eager, "{a_rndv} vs {a_eager}");
}

/// A small window and chunk force many credit round trips; results stay correct.
#[test]
fn tiny_chunks_and_window_still_deliver() {
    let cfg = CommConfig {
        transport: TransportConfig {
            chunk: 64,
            window: 1,
            rendezvous: None,
        },
        costs: HostCosts::default(),
        ..CommConfig::default()
    };
    let (outs, _) = run_ok(&spread(6), &cfg, |mut c| async move {
        let x: Vec<i64> = (0..500).map(|j| j * (c.rank() as i64 + 1)).collect();
        let a = c.allreduce(&x, ReduceOp::Sum, Algorithm::Ring).await.unwrap();
        let b = c
            .allreduce(&x, ReduceOp::Max, Algorithm::RecursiveDoubling)
            .await
            .unwrap();
        (a, b)
    });
    for (a, b) in outs {
        assert_eq!(a, (0..500).map(|j| j * 21).collect::<Vec<i64>>());
        assert_eq!(b, (0..500).map(|j| j * 6).collect::<Vec<i64>>());
    }
}

/// Host costs are charged in simulated time: a per-call cost of 10 us makes two calls take at
/// least 20 us, and the default model is slower than no host cost at all.
#[test]
fn host_costs_take_simulated_time() {
    let timed = |costs: HostCosts| {
        let cfg = CommConfig {
            transport: TransportConfig::default(),
            costs,
            ..CommConfig::default()
        };
        let (outs, _) = run_ok(&spread(8), &cfg, |mut c| async move {
            let t0 = c.context().now();
            c.barrier(Algorithm::Auto).await.unwrap();
            let x = vec![1.0f64; 4096];
            c.allreduce(&x, ReduceOp::Sum, Algorithm::Ring).await.unwrap();
            c.context().now() - t0
        });
        outs.into_iter().max().unwrap()
    };
    let zero = timed(HostCosts::zero());
    let default = timed(HostCosts::default());
    let slow = timed(HostCosts {
        per_call: SimTime::from_us(10),
        ..HostCosts::zero()
    });
    assert!(default > zero, "default {default} vs zero {zero}");
    // Every member spends its own 2 × 10 us; at least one call's cost is on the critical path.
    assert!(slow >= SimTime::from_us(20), "two calls of 10 us: {slow}");
    assert!(
        slow >= zero + SimTime::from_us(10),
        "two calls of 10 us: {slow} vs {zero}"
    );
}

/// The latest completion of one call made by every member of `spread(n)` at time 0, on the
/// torus with the scenario's `[coll]` settings changed by `sets`, and the NIC's statistic
/// `nic.messages` (work requests posted) at the end.
fn timed_call<Fut: Future<Output = ()> + 'static>(
    sets: &[&str],
    n: usize,
    prog: impl Fn(Comm) -> Fut,
) -> (SimTime, u64) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/torus-8x8.toml");
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let sc = Scenario::load(&path, &sets).expect("scenario");
    let mut m = Machine::new(sc.world().expect("world"));
    let ends: Rc<RefCell<Vec<SimTime>>> = Rc::default();
    for c in Comm::create(&m, &spread(n), &sc.comm_config()).expect("communicator") {
        let e = ends.clone();
        let ctx = c.context().clone();
        let fut = prog(c);
        m.spawn(async move {
            fut.await;
            e.borrow_mut().push(ctx.now());
        });
    }
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0, "rank programs left waiting");
    let posts = m
        .world()
        .statistics()
        .iter()
        .find(|s| s.name == "nic.messages")
        .map(|s| match s.value {
            hpcnet_des::stats::StatValue::Counter { value } => value,
            _ => panic!("nic.messages is a counter"),
        })
        .expect("nic.messages");
    let t = ends.borrow().iter().copied().max().expect("members finished");
    (t, posts)
}

/// `coll.reduce_rate` (per datatype) is the host's reduction throughput: a 64 KiB `f64`
/// allreduce on 8 members reduces, per member, 7/8 of the vector by ring (one block after the
/// other, each on the critical path) and the whole vector in each of 3 rounds by recursive
/// doubling; lowering the `f64` rate from 32 to 1 Gb/s slows it by about those bytes at
/// 1/1 − 1/32 ns per bit, and leaves an `i64` allreduce of the same size as it was.
#[test]
fn the_host_reduction_rate_per_type_slows_a_software_allreduce_by_its_bytes() {
    let n = 64 << 10;
    for (alg, reduced) in [(Algorithm::Ring, n * 7 / 8), (Algorithm::RecursiveDoubling, 3 * n)] {
        let time = |sets: &[&str], dt: Datatype| {
            timed_call(sets, 8, move |mut c| async move {
                let x = input(dt, c.rank(), n / dt.size(), 5);
                c.allreduce_bytes(dt, ReduceOp::Sum, x, alg).await.unwrap();
            })
            .0
        };
        let slow = ["coll.reduce_rate.f64=\"1 Gb/s\""];
        let (f0, f1) = (time(&[], Datatype::F64), time(&slow, Datatype::F64));
        let (i0, i1) = (time(&[], Datatype::I64), time(&slow, Datatype::I64));
        assert_eq!(i0, i1, "{alg:?}: the f64 rate changed an i64 allreduce");
        // 1 Gb/s: 8 ns per byte; 32 Gb/s: 0.25 ns.
        let predicted = SimTime::from_ns(reduced as u64 * 8) - SimTime::from_ps(reduced as u64 * 250);
        let delta = f1 - f0;
        assert!(
            delta >= predicted - predicted / 20 && delta <= predicted + predicted / 20,
            "{alg:?}: f64 allreduce {f0} -> {f1}: {delta} slower, the rate predicts {predicted}"
        );
    }
}

/// `coll.per_post` is charged for every work request a member posts (data chunks and the
/// credits it returns). In a recursive-doubling allreduce of 8 members each round's message
/// waits for the previous round's, so once a post costs more than the network's round trip
/// (below it, the credit a member returns overlaps with the wait for its own message's
/// completion) every post of a member is on the critical path: raising the cost from 1 to 6 µs
/// slows the call by at least (posts per member, counted by the NICs) × 5 µs, and by no more
/// than one post more.
#[test]
fn the_host_post_cost_slows_a_call_by_its_posts() {
    let time = |sets: &[&str]| {
        timed_call(sets, 8, |mut c| async move {
            c.allreduce(&[c.rank() as i64; 8], ReduceOp::Sum, Algorithm::RecursiveDoubling)
                .await
                .unwrap();
        })
    };
    let (t0, posts0) = time(&["coll.per_post=\"1 us\""]);
    let (t1, posts1) = time(&["coll.per_post=\"6 us\""]);
    assert_eq!(posts0, posts1, "the post cost changed the posts");
    // Three rounds: a message and a credit per member and round.
    assert_eq!(posts0, 8 * 3 * 2);
    let posts = posts0 / 8;
    let step = SimTime::from_us(5);
    let delta = t1 - t0;
    assert!(
        delta >= step * posts && delta <= step * (posts + 1),
        "{t0} -> {t1}: {delta} slower for {posts} posts per member of {step} more each"
    );
}

#[test]
fn bad_calls_are_errors_not_panics() {
    // Bitwise operator on floats, root outside, ragged alltoall, algorithm that does not fit:
    // refused locally, before any message.
    let (outs, _) = run_ok(&spread(4), &CommConfig::default(), |mut c| async move {
        let a = c
            .allreduce(&[1.0f32], ReduceOp::Bor, Algorithm::Auto)
            .await
            .unwrap_err();
        let b = c.reduce(&[1i32], ReduceOp::Sum, 4, Algorithm::Auto).await.unwrap_err();
        let d = c.alltoall(&[1i64, 2, 3], Algorithm::Auto).await.unwrap_err();
        let e = c.barrier(Algorithm::Ring).await.unwrap_err();
        let f = c
            .allreduce(&[1.5f64], ReduceOp::Bxor, Algorithm::Auto)
            .await
            .unwrap_err();
        // The communicator still works after local refusals.
        let ok = c.allreduce(&[2i32], ReduceOp::Sum, Algorithm::Auto).await.unwrap();
        (a, b, d, e, f, ok)
    });
    for (a, b, d, e, f, ok) in outs {
        assert!(
            matches!(
                a,
                CollError::OpOnType {
                    call: "allreduce",
                    op: "bor",
                    dtype: "f32"
                }
            ),
            "{a}"
        );
        assert!(matches!(b, CollError::RankOutside { index: 4, size: 4, .. }), "{b}");
        assert!(matches!(d, CollError::BadBuffer { call: "alltoall", .. }), "{d}");
        assert!(matches!(e, CollError::Unsupported { call: "barrier", .. }), "{e}");
        assert!(matches!(f, CollError::OpOnType { dtype: "f64", .. }), "{f}");
        assert_eq!(ok, vec![8]);
    }
}

/// Members that disagree on the length or the datatype: the disagreement is found when a message
/// arrives, the member that found it reports it and aborts the communicator, and every other
/// member returns an error too (none is left waiting, nothing panics). Later calls are refused.
#[test]
fn mismatched_calls_across_members_are_errors() {
    for alg in [Algorithm::RecursiveDoubling, Algorithm::Rabenseifner, Algorithm::Ring] {
        let (outs, end) = run(&spread(5), &CommConfig::default(), move |mut c| async move {
            let len = if c.rank() == 2 { 4 } else { 5 };
            let r = c.allreduce(&vec![1i64; len], ReduceOp::Sum, alg).await;
            let again = c.barrier(Algorithm::Auto).await;
            (r, again)
        });
        assert_eq!(end.stuck_tasks, 0, "{alg:?}: members left waiting");
        let outs: Vec<_> = outs.into_iter().map(|o| o.expect("finished")).collect();
        assert!(
            outs.iter()
                .any(|(r, _)| matches!(r, Err(CollError::Mismatch { call: "allreduce", .. }))),
            "{alg:?}: no member saw the mismatch"
        );
        for (r, again) in &outs {
            let e = r.as_ref().expect_err("every member fails");
            assert!(
                matches!(e, CollError::Mismatch { .. } | CollError::Aborted { .. }),
                "{e}"
            );
            assert!(matches!(again, Err(CollError::Poisoned { .. })));
        }
    }
    let (outs, end) = run(&spread(3), &CommConfig::default(), |mut c| async move {
        if c.rank() == 0 {
            c.allreduce(&[1i64, 2], ReduceOp::Sum, Algorithm::RecursiveDoubling)
                .await
                .map(|_| ())
        } else {
            c.allreduce(&[1.0f64, 2.0], ReduceOp::Sum, Algorithm::RecursiveDoubling)
                .await
                .map(|_| ())
        }
    });
    assert_eq!(end.stuck_tasks, 0);
    let errs: Vec<String> = outs
        .iter()
        .flatten()
        .filter_map(|r| r.as_ref().err())
        .map(|e| e.to_string())
        .collect();
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert!(
        errs.iter().any(|e| e.contains("disagrees") && e.contains("i64")),
        "{errs:?}"
    );
}

/// How one member's call differs from the others'.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Disagree {
    /// One element more per block.
    Size,
    /// `f64` elements where the others pass `i64` (the same byte length).
    Type,
    /// `i32` elements where the others pass `i64`.
    Width,
}

/// Element j of block b of member `me`'s input (the broadcast root's buffer: member 0's).
fn value(me: usize, b: usize, j: usize) -> i64 {
    (me * 1_000_000 + b * 1000 + j) as i64
}

/// One call of `coll` by `alg` on blocks of `count` elements (broadcast from member 0: one
/// block; alltoall and reduce-scatter: one block per member), with the buffer `how` differs;
/// the result as `i64`.
async fn call_with(
    c: &mut Comm,
    coll: Collective,
    alg: Algorithm,
    count: usize,
    how: Option<Disagree>,
) -> Result<Vec<i64>, CollError> {
    let (me, n) = (c.rank(), c.size());
    let count = count + usize::from(how == Some(Disagree::Size));
    let blocks = match coll {
        Collective::Broadcast | Collective::Allgather => 1,
        _ => n,
    };
    let x: Vec<i64> = (0..blocks)
        .flat_map(|b| {
            (0..count).map(move |j| {
                if coll == Collective::Broadcast && me != 0 {
                    -1
                } else {
                    value(me, b, j)
                }
            })
        })
        .collect();
    macro_rules! go {
        ($t:ty) => {{
            let mut x: Vec<$t> = x.iter().map(|&v| v as $t).collect();
            let out: Vec<$t> = match coll {
                Collective::Broadcast => c.broadcast(&mut x, 0, alg).await.map(|()| x)?,
                Collective::Allgather => c.allgather(&x, alg).await?,
                Collective::Alltoall => c.alltoall(&x, alg).await?,
                Collective::ReduceScatter => c.reduce_scatter(&x, ReduceOp::Sum, alg).await?,
                _ => unreachable!("not a case of this test"),
            };
            out.into_iter().map(|v| v as i64).collect()
        }};
    }
    Ok(match how {
        Some(Disagree::Type) => go!(f64),
        Some(Disagree::Width) => go!(i32),
        _ => go!(i64),
    })
}

/// What member `me` of `n` gets from `call_with` when every member agrees.
fn agreed_result(coll: Collective, n: usize, me: usize, count: usize) -> Vec<i64> {
    match coll {
        Collective::Broadcast => (0..count).map(|j| value(0, 0, j)).collect(),
        Collective::Allgather => (0..n).flat_map(|s| (0..count).map(move |j| value(s, 0, j))).collect(),
        Collective::Alltoall => (0..n).flat_map(|s| (0..count).map(move |j| value(s, me, j))).collect(),
        Collective::ReduceScatter => (0..count).map(|j| (0..n).map(|s| value(s, me, j)).sum()).collect(),
        _ => unreachable!("not a case of this test"),
    }
}

/// Broadcast, allgather, alltoall and reduce-scatter by every algorithm, with one member (the
/// root, one in the middle, the last) passing a longer buffer or other elements: nobody panics
/// or is left waiting; some member reports the mismatch; every member either fails with the
/// mismatch or another member's abort, or (broadcast: a member whose data did not pass through
/// the odd member) returns the right data; the communicator is unusable afterwards for all.
#[test]
fn mismatched_sizes_and_types_fail_every_collective() {
    let cases: [(Collective, &[Algorithm]); 4] = [
        (Collective::Broadcast, &BCAST),
        (
            Collective::Allgather,
            &[Algorithm::Ring, Algorithm::Bruck, Algorithm::RecursiveDoubling],
        ),
        (Collective::Alltoall, &[Algorithm::Pairwise, Algorithm::Bruck]),
        (
            Collective::ReduceScatter,
            &[Algorithm::Ring, Algorithm::RecursiveHalving, Algorithm::Pairwise],
        ),
    ];
    for n in [5usize, 8] {
        for (coll, algs) in cases {
            for &alg in algs {
                if alg == Algorithm::RecursiveHalving && !n.is_power_of_two() {
                    continue;
                }
                for how in [Disagree::Size, Disagree::Type, Disagree::Width] {
                    // 600 elements: blocks of more than one chunk.
                    for count in [3usize, 600] {
                        for odd in [0, n / 2, n - 1] {
                            let what = format!("{coll:?} {alg:?} n={n} {how:?} count={count} odd member {odd}");
                            let (outs, end) = run(&spread(n), &CommConfig::default(), move |mut c| async move {
                                let d = (c.rank() == odd).then_some(how);
                                let r = call_with(&mut c, coll, alg, count, d).await;
                                let again = c.barrier(Algorithm::Auto).await;
                                (r, again)
                            });
                            assert_eq!(end.stuck_tasks, 0, "{what}: members left waiting");
                            assert!(!end.deadlock, "{what}");
                            let outs: Vec<_> = outs.into_iter().map(|o| o.expect("finished")).collect();
                            let name = coll.name();
                            assert!(
                                outs.iter()
                                    .any(|(r, _)| matches!(r, Err(CollError::Mismatch { call, .. }) if *call == name)),
                                "{what}: no member saw the mismatch"
                            );
                            for (m, (r, again)) in outs.iter().enumerate() {
                                match r {
                                    Err(CollError::Mismatch { call, .. } | CollError::Aborted { call, .. }) => {
                                        assert_eq!(*call, name, "{what}: member {m}");
                                    }
                                    Err(e) => panic!("{what}: member {m}: unexpected error {e}"),
                                    Ok(v) => {
                                        assert_eq!(coll, Collective::Broadcast, "{what}: member {m} finished");
                                        let own = count + usize::from(m == odd && how == Disagree::Size);
                                        assert_eq!(v, &agreed_result(coll, n, m, own), "{what}: member {m}");
                                        assert!(m != odd || odd == 0, "{what}: the odd member finished");
                                    }
                                }
                                assert!(
                                    matches!(again, Err(CollError::Poisoned { .. } | CollError::Aborted { .. })),
                                    "{what}: member {m}: the next call gave {again:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn bad_communicators_are_errors() {
    let m = machine();
    assert!(matches!(
        Comm::create(&m, &[], &CommConfig::default()),
        Err(CollError::BadComm(_))
    ));
    assert!(matches!(
        Comm::create(&m, &[Rank(1), Rank(1)], &CommConfig::default()),
        Err(CollError::BadComm(_))
    ));
    assert!(matches!(
        Comm::create(&m, &[Rank(0), Rank(64)], &CommConfig::default()),
        Err(CollError::BadComm(_))
    ));
    let cfg = CommConfig {
        transport: TransportConfig {
            chunk: 0,
            window: 1,
            rendezvous: None,
        },
        ..CommConfig::default()
    };
    assert!(matches!(Comm::create(&m, &[Rank(0)], &cfg), Err(CollError::BadComm(_))));
}

#[test]
fn default_table() {
    assert_eq!(select(Collective::Barrier, 0, 64), Algorithm::Dissemination);
    assert_eq!(select(Collective::Allreduce, 8, 64), Algorithm::RecursiveDoubling);
    assert_eq!(select(Collective::Allreduce, 64 << 10, 64), Algorithm::Rabenseifner);
    assert_eq!(select(Collective::Allreduce, 1 << 20, 64), Algorithm::Ring);
    assert_eq!(select(Collective::Allgather, 100, 5), Algorithm::Bruck);
    assert_eq!(select(Collective::Allgather, 100, 8), Algorithm::RecursiveDoubling);
    assert_eq!(select(Collective::Broadcast, 64 << 10, 64), Algorithm::ScatterAllgather);
    assert_eq!(select(Collective::Reduce, 64 << 10, 64), Algorithm::Rabenseifner);
    assert_eq!(select(Collective::Allgather, 1 << 20, 5), Algorithm::Ring);
    assert_eq!(select(Collective::Broadcast, 100, 64), Algorithm::Binomial);
    assert_eq!(select(Collective::Broadcast, 1 << 20, 64), Algorithm::Chain);
    assert_eq!(select(Collective::Alltoall, 100, 5), Algorithm::Pairwise);
    assert_eq!(select(Collective::ReduceScatter, 4096, 8), Algorithm::RecursiveHalving);
    assert_eq!(select(Collective::ReduceScatter, 4096, 6), Algorithm::Ring);
    assert_eq!(select(Collective::ReduceScatter, 1 << 20, 8), Algorithm::Ring);
    // Two members per node: short allreduces go through the node leaders.
    let on = hpcnet_coll::select_on_nodes;
    assert_eq!(on(Collective::Allreduce, 256, 64, 2), Algorithm::TwoLevel);
    assert_eq!(on(Collective::Allreduce, 512, 64, 2), Algorithm::RecursiveDoubling);
    assert_eq!(on(Collective::Allreduce, 8, 64, 1), Algorithm::RecursiveDoubling);
    assert_eq!(on(Collective::Broadcast, 8, 64, 2), Algorithm::Binomial);
    for c in [
        Collective::Barrier,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::Allreduce,
        Collective::Allgather,
        Collective::Alltoall,
        Collective::ReduceScatter,
    ] {
        for bytes in [0, 8, 4096, 1 << 22] {
            for size in [1, 2, 7, 64, 1000] {
                assert!(hpcnet_coll::implements(select(c, bytes, size), c));
                for per_node in [1, 2, 3] {
                    assert!(hpcnet_coll::implements(
                        hpcnet_coll::select_on_nodes(c, bytes, size, per_node),
                        c
                    ));
                }
            }
        }
    }
}

/// Reduce-scatter (ring): member i gets block i of the reduction, integers exactly and f64 bit
/// for bit with the ring's order (block b reduced as x_{b+1}, ..., x_b).
#[test]
fn reduce_scatter_matches_reference() {
    for n in [1usize, 5, 8, 13] {
        let (outs, _) = run_ok(&spread(n), &CommConfig::default(), move |mut c| async move {
            let me = c.rank();
            let x = from_bytes::<f64>(&input(Datatype::F64, me, n * 300, 7));
            let a = c.reduce_scatter(&x, ReduceOp::Sum, Algorithm::Ring).await.unwrap();
            let y = from_bytes::<i32>(&input(Datatype::I32, me, n * 3, 8));
            let b = c.reduce_scatter(&y, ReduceOp::Min, Algorithm::Auto).await.unwrap();
            (a, b)
        });
        let xs: Vec<Vec<u8>> = (0..n).map(|k| input(Datatype::F64, k, n * 300, 7)).collect();
        let fx = ref_ring(Datatype::F64, ReduceOp::Sum, &xs);
        let ys: Vec<Vec<u8>> = (0..n).map(|k| input(Datatype::I32, k, n * 3, 8)).collect();
        let fy = ref_ring(Datatype::I32, ReduceOp::Min, &ys);
        for (m, (a, b)) in outs.iter().enumerate() {
            assert!(to_bytes(a) == fx[m * 2400..(m + 1) * 2400], "f64 n={n} member {m}");
            assert_eq!(to_bytes(b), fy[m * 12..(m + 1) * 12], "i32 n={n} member {m}");
        }
    }
}

/// Every reduce-scatter algorithm, every type and operator, communicator sizes with and without
/// a power of two: member i gets block i of the reduction, bit for bit against a reference that
/// combines the operands in the algorithm's order (pairwise: x_i, x_{i−1}, ...; recursive
/// halving: partners at distance p/2, p/4, ..., lower member on the left). Recursive halving on
/// a size that is not a power of two is an error, not a panic.
#[test]
fn every_reduce_scatter_algorithm_type_and_operator() {
    let cases: Vec<(Datatype, ReduceOp)> = [Datatype::F32, Datatype::F64, Datatype::I32, Datatype::I64]
        .into_iter()
        .flat_map(|dt| {
            let ops: &[ReduceOp] = match dt {
                Datatype::F32 | Datatype::F64 => &[ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min],
                _ => &[
                    ReduceOp::Sum,
                    ReduceOp::Max,
                    ReduceOp::Min,
                    ReduceOp::Band,
                    ReduceOp::Bor,
                    ReduceOp::Bxor,
                ],
            };
            ops.iter().map(move |&op| (dt, op))
        })
        .collect();
    const B: usize = 37;
    for n in [1usize, 2, 3, 5, 8, 13, 16] {
        let cs = std::rc::Rc::new(cases.clone());
        let (outs, _) = run_ok(&spread(n), &CommConfig::default(), move |mut c| {
            let cs = cs.clone();
            async move {
                let me = c.rank();
                let mut res = Vec::new();
                for &(dt, op) in cs.iter() {
                    for alg in [
                        Algorithm::Ring,
                        Algorithm::Pairwise,
                        Algorithm::RecursiveHalving,
                        Algorithm::Auto,
                    ] {
                        let x = input(dt, me, n * B, 11);
                        macro_rules! rs {
                            ($t:ty) => {
                                c.reduce_scatter(&from_bytes::<$t>(&x), op, alg)
                                    .await
                                    .map(|v| to_bytes(&v))
                            };
                        }
                        let r = match dt {
                            Datatype::F32 => rs!(f32),
                            Datatype::F64 => rs!(f64),
                            Datatype::I32 => rs!(i32),
                            Datatype::I64 => rs!(i64),
                        };
                        if alg == Algorithm::RecursiveHalving && !n.is_power_of_two() {
                            assert!(matches!(r, Err(CollError::AlgorithmLimit { .. })), "{r:?}");
                            res.push(None);
                        } else {
                            res.push(Some(r.unwrap()));
                        }
                    }
                }
                res
            }
        });
        for (k, &(dt, op)) in cases.iter().enumerate() {
            let es = dt.size();
            let xs: Vec<Vec<u8>> = (0..n).map(|m| input(dt, m, n * B, 11)).collect();
            let ring = ref_ring(dt, op, &xs);
            // Recursive halving: partners at distance p/2, p/4, ..., lower member on the left.
            let mut acc = xs.clone();
            let mut mask = n / 2;
            while n.is_power_of_two() && mask > 0 {
                for i in (0..n).filter(|i| i & mask == 0) {
                    let r = op2(dt, op, &acc[i], &acc[i | mask]);
                    acc[i] = r.clone();
                    acc[i | mask] = r;
                }
                mask >>= 1;
            }
            for (m, o) in outs.iter().enumerate() {
                let blk = |v: &[u8]| v[m * B * es..(m + 1) * B * es].to_vec();
                let mut pw = blk(&xs[m]);
                for j in 1..n {
                    pw = op2(dt, op, &pw, &blk(&xs[(m + n - j) % n]));
                }
                let what = format!("n={n} {dt:?} {op:?} member {m}");
                assert_eq!(o[4 * k].as_deref(), Some(&blk(&ring)[..]), "ring {what}");
                assert_eq!(o[4 * k + 1].as_deref(), Some(&pw[..]), "pairwise {what}");
                if n.is_power_of_two() {
                    assert_eq!(o[4 * k + 2].as_deref(), Some(&blk(&acc[m])[..]), "halving {what}");
                    assert_eq!(o[4 * k + 3], o[4 * k + 2], "auto picks recursive halving {what}");
                } else {
                    assert_eq!(o[4 * k + 3], o[4 * k], "auto picks the ring {what}");
                }
            }
        }
    }
}

/// Two processes per NIC (`nic.hosts = 2`: rank r on node r / 2): the two-level allreduce folds
/// each node's members into its leader (member order, leader on the left), runs the default
/// algorithm among the leaders (recursive doubling for short vectors, Rabenseifner for long,
/// same operand order), and hands the result back; bit for bit against that reference.
#[test]
fn two_level_allreduce_with_two_processes_per_nic() {
    let mut m = machine_with(&["nic.hosts=2".to_string()]);
    assert_eq!(m.world().placement().hosts(), 2);
    // Nodes 0, 0, 5, 5, 10, 15, 20, 20, 31: three nodes with two members, three with one.
    let ranks: Vec<Rank> = [0u32, 1, 10, 11, 20, 31, 40, 41, 63].into_iter().map(Rank).collect();
    let place = m.world().placement();
    let comms = Comm::create_on_nodes(&m, &ranks, |r| place.node_of(r).0, &CommConfig::default()).unwrap();
    assert_eq!(comms[0].per_node(), 1, "uneven placement: no two-level default");
    let even: Vec<Rank> = (0..8).map(Rank).collect();
    let pairs = Comm::create_on_nodes(&m, &even, |r| place.node_of(r).0, &CommConfig::default()).unwrap();
    assert_eq!(pairs[0].per_node(), 2);
    drop(pairs);
    let out = Rc::new(RefCell::new(vec![Vec::new(); ranks.len()]));
    const COUNTS: [usize; 2] = [3, 1100];
    for mut c in comms {
        let o = out.clone();
        m.spawn(async move {
            let me = c.rank();
            for count in COUNTS {
                let x = input(Datatype::F64, me, count, 31);
                let r = c
                    .allreduce_bytes(Datatype::F64, ReduceOp::Sum, x, Algorithm::TwoLevel)
                    .await
                    .unwrap();
                o.borrow_mut()[me].push(r);
                let y = input(Datatype::I64, me, count, 32);
                let r = c
                    .allreduce_bytes(Datatype::I64, ReduceOp::Bxor, y, Algorithm::TwoLevel)
                    .await
                    .unwrap();
                o.borrow_mut()[me].push(r);
            }
        });
    }
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0);
    let groups: [&[usize]; 6] = [&[0, 1], &[2, 3], &[4], &[5], &[6, 7], &[8]];
    let out = out.borrow();
    for (k, count) in COUNTS.into_iter().enumerate() {
        for (j, (dt, op, salt)) in [(Datatype::F64, ReduceOp::Sum, 31), (Datatype::I64, ReduceOp::Bxor, 32)]
            .into_iter()
            .enumerate()
        {
            let ys: Vec<Vec<u8>> = groups
                .iter()
                .map(|g| {
                    g[1..].iter().fold(input(dt, g[0], count, salt), |acc, &o| {
                        op2(dt, op, &acc, &input(dt, o, count, salt))
                    })
                })
                .collect();
            let want = ref_recursive_doubling(dt, op, &ys);
            if dt == Datatype::F64 && count > 3 {
                // The grouping shows in the bits: a flat recursive doubling gives another sum.
                let xs: Vec<Vec<u8>> = (0..ranks.len()).map(|mem| input(dt, mem, count, salt)).collect();
                assert!(ref_recursive_doubling(dt, op, &xs) != want);
            }
            for (mem, o) in out.iter().enumerate() {
                assert!(o[2 * k + j] == want, "two-level {dt:?} count={count} member {mem}");
            }
        }
    }
}

/// The model reproduces the trade-off the default table encodes (Thakur et al. 2005): on 16
/// members of the torus, recursive doubling beats the ring for an 8-byte allreduce (fewer
/// rounds), and the ring and Rabenseifner beat recursive doubling for a 64 KiB one (fewer
/// bytes per member).
#[test]
fn latency_and_bandwidth_algorithms_trade_places() {
    let time = |alg: Algorithm, count: usize| {
        let (outs, _) = run_ok(&spread(16), &CommConfig::default(), move |mut c| async move {
            let x = vec![1.0f64; count];
            let t0 = c.context().now();
            c.allreduce(&x, ReduceOp::Sum, alg).await.unwrap();
            c.context().now() - t0
        });
        outs.into_iter().max().unwrap()
    };
    assert!(time(Algorithm::RecursiveDoubling, 1) < time(Algorithm::Ring, 1));
    let rd = time(Algorithm::RecursiveDoubling, 8192);
    assert!(time(Algorithm::Ring, 8192) < rd);
    assert!(time(Algorithm::Rabenseifner, 8192) < rd);
}

/// A split keeps the node placement: two halves of 16 ranks on a machine with two processes per
/// NIC each run a two-level allreduce over their own members.
#[test]
fn split_on_nodes_keeps_the_placement_for_two_level() {
    let mut m = machine_with(&["nic.hosts=2".to_string()]);
    let place = m.world().placement();
    let parent: Vec<Rank> = (0..16).map(Rank).collect();
    let colours: Vec<(Option<u32>, i64)> = (0..16).map(|i| (Some(u32::from(i >= 8)), i)).collect();
    let subs = Comm::split_on_nodes(&m, &parent, &colours, |r| place.node_of(r).0, &CommConfig::default()).unwrap();
    let out = Rc::new(RefCell::new(Vec::new()));
    for c in subs {
        let mut c = c.expect("every rank has a colour");
        let o = out.clone();
        m.spawn(async move {
            let me = c.ranks()[c.rank()].0 as i64;
            let s = c.allreduce(&[me, 1], ReduceOp::Sum, Algorithm::TwoLevel).await.unwrap();
            o.borrow_mut().push((me, s));
        });
    }
    assert_eq!(m.run().stuck_tasks, 0);
    for (me, s) in out.borrow().iter() {
        let want = if *me < 8 { 28 } else { 92 };
        assert_eq!(s, &vec![want, 8], "rank {me}");
    }
}

/// Members that name different roots for one broadcast or reduce, by every algorithm, 2 to 8
/// members, in four patterns (one member names member 1, the others member 0; member 0 names
/// member 1, the others member 0; every member names the next; every member names itself).
/// The members' messages carry the root, so a member that receives from one that named another
/// root reports it; a member that finishes has the data of the root it named — never another
/// root's or a mix. A member that waits for a message nobody sends (from the member it takes
/// for its parent, which took another root) is left waiting in the call; the run ends with
/// those rank programs waiting and counts them (no time-out ends the wait).
#[test]
fn members_naming_different_roots_never_get_another_roots_data() {
    let algs = [
        (false, Algorithm::Binomial),
        (false, Algorithm::ScatterAllgather),
        (false, Algorithm::DoubleBinaryTree),
        (false, Algorithm::Chain),
        (true, Algorithm::Binomial),
        (true, Algorithm::Rabenseifner),
    ];
    let mut root_errors = vec![0; algs.len()];
    let mut hangs = vec![0; algs.len()];
    for n in [2usize, 3, 5, 8] {
        for (a, &(reduce, alg)) in algs.iter().enumerate() {
            for pattern in 0..4 {
                let root_of = move |me: usize| match pattern {
                    0 => usize::from(me == n - 1),
                    1 => usize::from(me == 0),
                    2 => (me + 1) % n,
                    _ => me,
                };
                let what = format!(
                    "{} {alg:?} n={n} pattern {pattern}",
                    if reduce { "reduce" } else { "broadcast" }
                );
                let (outs, end) = run(&spread(n), &CommConfig::default(), move |mut c| async move {
                    let me = c.rank();
                    let root = root_of(me);
                    if reduce {
                        let x: Vec<i64> = (0..300).map(|j| j + me as i64).collect();
                        c.reduce(&x, ReduceOp::Sum, root, alg)
                            .await
                            .map(|o| o.unwrap_or_default())
                    } else {
                        // 600 elements: several chunks; every member's data differs.
                        let mut b: Vec<i64> = (0..600)
                            .map(|j| if me == root { j * 10 + me as i64 } else { -1 })
                            .collect();
                        c.broadcast(&mut b, root, alg).await.map(|()| b)
                    }
                });
                assert!(!end.deadlock, "{what}");
                let waiting = outs.iter().filter(|o| o.is_none()).count();
                assert_eq!(waiting, end.stuck_tasks, "{what}: the run counts the waiting members");
                hangs[a] += usize::from(waiting > 0);
                if !reduce && alg == Algorithm::Binomial && pattern == 1 {
                    // Nobody names itself the root, so nobody sends: every member waits for
                    // its parent in the tree of the root it named.
                    assert_eq!(waiting, n, "{what}");
                }
                let call = if reduce { "reduce" } else { "broadcast" };
                for (m, o) in outs.iter().enumerate() {
                    let root = root_of(m);
                    let Some(o) = o else { continue };
                    match o {
                        Ok(v) if reduce => {
                            let sum: Vec<i64> = (0..300).map(|j| (0..n as i64).map(|k| j + k).sum()).collect();
                            assert!(
                                v.is_empty() || (m == root && v == &sum),
                                "{what}: member {m} got a wrong reduction"
                            );
                        }
                        Ok(v) => {
                            let want: Vec<i64> = (0..600).map(|j| j * 10 + root as i64).collect();
                            assert!(v == &want, "{what}: member {m} has data not of its root {root}");
                        }
                        Err(CollError::Mismatch { call: c, reason, .. }) => {
                            assert_eq!(*c, call, "{what}");
                            if reason.contains("with root") {
                                let mine = format!("where this rank has root {root}");
                                assert!(reason.ends_with(&mine), "{what}: member {m}: {reason}");
                                root_errors[a] += 1;
                            }
                        }
                        Err(CollError::Aborted { call: c, .. }) => assert_eq!(*c, call, "{what}"),
                        Err(e) => panic!("{what}: member {m}: unexpected error {e}"),
                    }
                }
            }
        }
    }
    // The root check is what reports the disagreement in the scatter, double-tree, chain and
    // Rabenseifner algorithms; binomial trees of different roots exchange nothing (each member
    // waits for the parent of its own tree, or sends to one that does not receive).
    for (a, &(reduce, alg)) in algs.iter().enumerate() {
        let binomial = alg == Algorithm::Binomial;
        assert_eq!(
            root_errors[a] == 0,
            binomial,
            "{alg:?} (reduce: {reduce}): {} root mismatches reported",
            root_errors[a]
        );
        assert!(
            hangs[a] > 0 || alg == Algorithm::Rabenseifner,
            "{alg:?} (reduce: {reduce})"
        );
    }
}
