//! Hardware collectives (NIC logical tree + router multicast) on the Sunway prototype scenario
//! (dual-rail generalized fat tree, two processes per NIC): results equal a reference computed
//! here, outside the simulated data path, in the tree's fixed combine order (integers exactly,
//! floating point bit for bit, whatever the arrival order); barriers release nobody before the
//! last member entered; the multicast reaches each member NIC once and non-members drop it;
//! bad calls return errors.

mod common;
use common::{input, mix, op2, ALL_CASES};
use hpcnet_coll::{from_bytes, to_bytes, Algorithm, CollError, Comm, CommConfig, Datatype, ReduceOp};
use hpcnet_des::SimTime;
use hpcnet_msg::verbs::{Machine, RunEnd};
use hpcnet_nic::{CollDesc, CollKind, CollOp, CollType, CqeKind, CqeStatus, Rank, World};
use hpcnet_workloads::Scenario;
use std::cell::RefCell;
use std::future::Future;
use std::path::Path;
use std::rc::Rc;

fn world(overrides: &[&str]) -> World {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/sunway-prototype.toml");
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Scenario::load(&path, &o).expect("scenario").world().expect("world")
}

fn hw_cfg() -> CommConfig {
    CommConfig {
        hardware: true,
        ..CommConfig::default()
    }
}

/// `n` ranks over the machine: some NICs with both processes, some with one, in a scattered
/// communicator order.
fn members(n: usize) -> Vec<Rank> {
    (0..n).map(|i| Rank(((i * 37 + 5) % 1024) as u32)).collect()
}

fn run<T: 'static, Fut: Future<Output = T> + 'static>(
    m: &mut Machine,
    ranks: &[Rank],
    cfg: &CommConfig,
    prog: impl Fn(Comm) -> Fut,
) -> (Vec<T>, RunEnd) {
    let comms = Comm::create(m, ranks, cfg).expect("communicator");
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
    assert_eq!(end.stuck_tasks, 0, "rank programs left waiting");
    assert!(!end.deadlock);
    let v = std::mem::take(&mut *out.borrow_mut());
    (v.into_iter().map(|x| x.expect("finished")).collect(), end)
}

/// The reduction in the hardware tree's order: nodes in order of first appearance among the
/// members, node i's children f·i + 1 … f·i + f; at each node its members in communicator order,
/// then its children in order (spec 01: "fixed combine order"). Node of rank r: r / 2.
fn tree_reference(ranks: &[Rank], inputs: &[Vec<u8>], dt: Datatype, op: ReduceOp, fanout: usize) -> Vec<u8> {
    let mut nodes: Vec<u32> = Vec::new();
    let mut local: Vec<Vec<usize>> = Vec::new();
    for (i, r) in ranks.iter().enumerate() {
        let n = r.0 / 2;
        let s = match nodes.iter().position(|&x| x == n) {
            Some(s) => s,
            None => {
                nodes.push(n);
                local.push(Vec::new());
                nodes.len() - 1
            }
        };
        local[s].push(i);
    }
    fn value(s: usize, local: &[Vec<usize>], inputs: &[Vec<u8>], dt: Datatype, op: ReduceOp, f: usize) -> Vec<u8> {
        let mut acc: Option<Vec<u8>> = None;
        let children = (f * s + 1..(f * s + f + 1).min(local.len())).map(|c| value(c, local, inputs, dt, op, f));
        for x in local[s].iter().map(|&m| inputs[m].clone()).chain(children) {
            acc = Some(match acc {
                None => x,
                Some(a) => op2(dt, op, &a, &x),
            });
        }
        acc.expect("a node has members")
    }
    value(0, &local, inputs, dt, op, fanout)
}

#[test]
fn allreduce_equals_the_tree_order_reference_for_every_type() {
    let ranks = members(100);
    for (dt, op) in [
        (Datatype::F64, ReduceOp::Sum),
        (Datatype::F32, ReduceOp::Sum),
        (Datatype::F32, ReduceOp::Max),
        (Datatype::F64, ReduceOp::Min),
        (Datatype::I64, ReduceOp::Sum),
        (Datatype::I64, ReduceOp::Band),
        (Datatype::I32, ReduceOp::Bxor),
    ] {
        // 300 elements: several packets per message for the 8-byte types.
        let count = 300;
        let inputs: Vec<Vec<u8>> = (0..ranks.len()).map(|m| input(dt, m, count, 3)).collect();
        let want = tree_reference(&ranks, &inputs, dt, op, 8);
        let mut m = Machine::new(world(&[]));
        let ins = inputs.clone();
        let (outs, _) = run(&mut m, &ranks, &hw_cfg(), move |mut c| {
            let x = ins[c.rank()].clone();
            async move { c.allreduce_bytes(dt, op, x, Algorithm::Hardware).await.unwrap() }
        });
        for (i, o) in outs.iter().enumerate() {
            assert_eq!(o, &want, "{dt:?} {op:?}: member {i}");
        }
        let w = m.world();
        let [ops, _, _, dropped] = w.coll_counters();
        assert_eq!(ops, ranks.len() as u64);
        assert_eq!(dropped, 0);
    }
}

/// Allreduce and reduce of every (datatype, operator) pair on one communicator, one after the
/// other: every allreduce result and the reduce root's result equal the tree-order reference
/// (floats bit for bit); the other members of a reduce get nothing. The reduce root moves
/// through the communicator, away from the tree's root.
#[test]
fn allreduce_and_reduce_equal_the_reference_for_every_type_and_operator() {
    let ranks = members(90);
    // 300 elements: several packets per message for every type.
    let count = 300;
    let root_of = |k: usize| (k * 17 + 1) % 90;
    let inputs = |k: usize, dt: Datatype| -> Vec<Vec<u8>> {
        (0..ranks.len()).map(|m| input(dt, m, count, 100 + k as u64)).collect()
    };
    let all: Vec<Vec<Vec<u8>>> = ALL_CASES
        .iter()
        .enumerate()
        .map(|(k, &(dt, _))| inputs(k, dt))
        .collect();
    let mut m = Machine::new(world(&[]));
    let ins = all.clone();
    let (outs, _) = run(&mut m, &ranks, &hw_cfg(), move |mut c| {
        let ins = ins.clone();
        async move {
            let me = c.rank();
            let mut v = Vec::new();
            for (k, &(dt, op)) in ALL_CASES.iter().enumerate() {
                let x = ins[k][me].clone();
                let a = c.allreduce_bytes(dt, op, x.clone(), Algorithm::Hardware).await.unwrap();
                let r = hw_reduce(&mut c, dt, op, &x, root_of(k)).await;
                v.push((a, r));
            }
            v
        }
    });
    for (k, &(dt, op)) in ALL_CASES.iter().enumerate() {
        let want = tree_reference(&ranks, &all[k], dt, op, 8);
        // The reference is not one member's input: the reduction happened.
        assert!(all[k].iter().all(|x| x != &want), "{dt:?} {op:?}: degenerate inputs");
        for (i, o) in outs.iter().enumerate() {
            let (a, r) = &o[k];
            assert!(
                a == &want,
                "{dt:?} {op:?}: allreduce at member {i} differs from the reference"
            );
            if i == root_of(k) {
                assert!(
                    r.as_ref() == Some(&want),
                    "{dt:?} {op:?}: reduce at its root {i} differs from the reference"
                );
            } else {
                assert!(r.is_none(), "{dt:?} {op:?}: reduce gave member {i} a result");
            }
        }
    }
    let [ops, _, mcast, dropped] = m.world().coll_counters();
    assert_eq!(ops, (2 * ALL_CASES.len() * ranks.len()) as u64);
    // 300 elements of 4 or 8 bytes: 2 or 3 multicast packets of 1 KiB payload per collective.
    let packets: u64 = ALL_CASES
        .iter()
        .map(|&(dt, _)| (count * dt.size()).div_ceil(1024) as u64)
        .sum();
    assert_eq!(mcast, 2 * packets);
    assert_eq!(dropped, 0);
}

/// A hardware reduce on bytes of `dt` through the typed call.
async fn hw_reduce(c: &mut Comm, dt: Datatype, op: ReduceOp, x: &[u8], root: usize) -> Option<Vec<u8>> {
    let alg = Algorithm::Hardware;
    match dt {
        Datatype::F32 => c
            .reduce(&from_bytes::<f32>(x), op, root, alg)
            .await
            .unwrap()
            .map(|v| to_bytes(&v)),
        Datatype::F64 => c
            .reduce(&from_bytes::<f64>(x), op, root, alg)
            .await
            .unwrap()
            .map(|v| to_bytes(&v)),
        Datatype::I32 => c
            .reduce(&from_bytes::<i32>(x), op, root, alg)
            .await
            .unwrap()
            .map(|v| to_bytes(&v)),
        Datatype::I64 => c
            .reduce(&from_bytes::<i64>(x), op, root, alg)
            .await
            .unwrap()
            .map(|v| to_bytes(&v)),
    }
}

#[test]
fn float_sums_are_bit_identical_under_skewed_arrival_and_fanouts_differ_only_by_tree() {
    let ranks = members(64);
    let dt = Datatype::F64;
    let inputs: Vec<Vec<u8>> = (0..ranks.len()).map(|m| input(dt, m, 16, 3)).collect();
    let mut results = Vec::new();
    for skew in 0..4u64 {
        let mut m = Machine::new(world(&[]));
        let ins = inputs.clone();
        let (outs, _) = run(&mut m, &ranks, &hw_cfg(), move |mut c| {
            let x = ins[c.rank()].clone();
            async move {
                // Skewed arrival: each member enters after a different delay in each run (up to
                // 20 µs, a different permutation per skew).
                let d = mix(skew, c.rank() as u64) % 20_000;
                c.context().sleep(SimTime::from_ns(d)).await;
                c.allreduce_bytes(dt, ReduceOp::Sum, x, Algorithm::Hardware)
                    .await
                    .unwrap()
            }
        });
        assert!(outs.iter().all(|o| o == &outs[0]));
        results.push(outs[0].clone());
    }
    assert!(
        results.iter().all(|r| r == &results[0]),
        "arrival order changed the bits"
    );
    assert_eq!(results[0], tree_reference(&ranks, &inputs, dt, ReduceOp::Sum, 8));
    // Another fan-out is another (fixed) tree, with its own reference.
    let mut m = Machine::new(world(&["nic.coll.fanout=2"]));
    let ins = inputs.clone();
    let (outs, _) = run(&mut m, &ranks, &hw_cfg(), move |mut c| {
        let x = ins[c.rank()].clone();
        async move {
            c.allreduce_bytes(dt, ReduceOp::Sum, x, Algorithm::Hardware)
                .await
                .unwrap()
        }
    });
    assert_eq!(outs[5], tree_reference(&ranks, &inputs, dt, ReduceOp::Sum, 2));
}

#[test]
fn float_sums_are_bit_identical_under_injected_arrival_jitter() {
    // The same inputs under no jitter and under `nic.coll.jitter` with several seeds: the
    // contributions reach their parents in other orders and at other times, the bits stay the
    // tree's. The inputs are order-sensitive: the fan-out-2 tree combines them into other bits.
    let ranks = members(96);
    let dt = Datatype::F64;
    let inputs: Vec<Vec<u8>> = (0..ranks.len()).map(|m| input(dt, m, 16, 3)).collect();
    let reference = tree_reference(&ranks, &inputs, dt, ReduceOp::Sum, 8);
    assert_ne!(reference, tree_reference(&ranks, &inputs, dt, ReduceOp::Sum, 2));
    let mut ends = Vec::new();
    for (jitter, seed) in [("0 ns", 1), ("4 us", 1), ("4 us", 2), ("4 us", 3), ("20 us", 4)] {
        let j = format!("nic.coll.jitter=\"{jitter}\"");
        let s = format!("seed={seed}");
        let mut m = Machine::new(world(&[&j, &s]));
        let ins = inputs.clone();
        let (outs, _) = run(&mut m, &ranks, &hw_cfg(), move |mut c| {
            let x = ins[c.rank()].clone();
            async move {
                let r = c
                    .allreduce_bytes(dt, ReduceOp::Sum, x, Algorithm::Hardware)
                    .await
                    .unwrap();
                (r, c.context().now())
            }
        });
        for (r, _) in &outs {
            assert_eq!(r, &reference, "jitter {jitter}, seed {seed}: a member's bits differ");
        }
        ends.push(outs.iter().map(|o| o.1).max().unwrap());
    }
    // The jitter acted: every jittered run ends later than the run without it, and the seeds
    // give different timelines.
    assert!(ends[1..].iter().all(|&e| e > ends[0]), "{ends:?}");
    assert!(ends[1] != ends[2] || ends[2] != ends[3], "{ends:?}");
}

#[test]
fn barrier_releases_nobody_before_the_last_member_entered() {
    let ranks = members(200);
    let mut m = Machine::new(world(&[]));
    let (times, _) = run(&mut m, &ranks, &hw_cfg(), |mut c| async move {
        let mut v = Vec::new();
        for round in 0..3u64 {
            let d = mix(round, c.rank() as u64) % 15_000;
            c.context().sleep(SimTime::from_ns(d)).await;
            let entered = c.context().now();
            c.barrier(Algorithm::Hardware).await.unwrap();
            v.push((entered, c.context().now()));
        }
        v
    });
    for round in 0..3 {
        let last_in = times.iter().map(|t| t[round].0).max().unwrap();
        let first_out = times.iter().map(|t| t[round].1).min().unwrap();
        assert!(
            first_out > last_in,
            "round {round}: released at {first_out} before {last_in}"
        );
    }
}

/// The calls of `concurrent_hardware_collectives_...`: (datatype, operator, reduce root or
/// `None` for an allreduce).
const MIXED_CALLS: [(Datatype, ReduceOp, Option<usize>); 4] = [
    (Datatype::F64, ReduceOp::Sum, None),
    (Datatype::I64, ReduceOp::Bxor, None),
    (Datatype::F32, ReduceOp::Sum, Some(3)),
    (Datatype::F32, ReduceOp::Max, None),
];

/// Input of member `m` of communicator `g` for call `k` (40 elements: each message is one
/// packet for the 4-byte types and one for the 8-byte ones).
fn mixed_input(g: usize, k: usize, m: usize) -> Vec<u8> {
    input(MIXED_CALLS[k].0, m, 40, (g * 10 + k) as u64)
}

/// Run the calls of `MIXED_CALLS` on every communicator of `groups` at the same time (a rank
/// in several communicators runs one program per communicator), communicator j with the
/// inputs of `mixed_input(inputs[j], ..)`: per communicator, per member, per call, the result
/// (`None`: a reduce's non-root) and the call's (start, end).
#[allow(clippy::type_complexity)]
fn run_groups(
    m: &mut Machine,
    groups: &[Vec<Rank>],
    inputs: &[usize],
) -> Vec<Vec<Vec<(Option<Vec<u8>>, SimTime, SimTime)>>> {
    let out: Rc<RefCell<Vec<Vec<Vec<_>>>>> =
        Rc::new(RefCell::new(groups.iter().map(|g| vec![Vec::new(); g.len()]).collect()));
    for (g, ranks) in groups.iter().enumerate() {
        for (i, mut c) in Comm::create(m, ranks, &hw_cfg())
            .expect("communicator")
            .into_iter()
            .enumerate()
        {
            let o = out.clone();
            let inputs = inputs.to_vec();
            m.spawn(async move {
                for (k, &(dt, op, root)) in MIXED_CALLS.iter().enumerate() {
                    let x = mixed_input(inputs[g], k, c.rank());
                    let t0 = c.context().now();
                    let r = match root {
                        None => Some(c.allreduce_bytes(dt, op, x, Algorithm::Hardware).await.unwrap()),
                        Some(root) => {
                            let v = from_bytes::<f32>(&x);
                            let r = c.reduce(&v, op, root, Algorithm::Hardware).await.unwrap();
                            r.map(|v| to_bytes(&v))
                        }
                    };
                    let t1 = c.context().now();
                    o.borrow_mut()[g][i].push((r, t0, t1));
                }
            });
        }
    }
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0, "rank programs left waiting");
    assert!(!end.deadlock);
    let v = std::mem::take(&mut *out.borrow_mut());
    v
}

/// Hardware collectives on three communicators at the same time: A and B overlap (B holds half
/// of A's ranks, in another order, and the other process of NICs that A uses), C is disjoint
/// from both. Every member of each gets its own communicator's tree-order result (floats bit
/// for bit), the same as with its communicator alone on the machine; the calls of A and B do
/// run at the same time.
#[test]
fn concurrent_hardware_collectives_on_overlapping_and_disjoint_communicators() {
    let a = members(64);
    let mut b: Vec<Rank> = a.iter().skip(1).step_by(2).rev().copied().collect();
    b.extend(a.iter().step_by(2).map(|r| Rank(r.0 ^ 1)).filter(|r| !a.contains(r)));
    let used: Vec<u32> = a.iter().chain(&b).map(|r| r.0 / 2).collect();
    let c: Vec<Rank> = (0..1024u32)
        .rev()
        .filter(|r| !used.contains(&(r / 2)))
        .take(40)
        .map(Rank)
        .collect();
    assert!(b.len() > 40 && b.iter().filter(|r| a.contains(r)).count() == 32);
    let groups = vec![a, b, c];
    let mut m = Machine::new(world(&[]));
    let together = run_groups(&mut m, &groups, &[0, 1, 2]);
    let [ops, _, _, dropped] = m.world().coll_counters();
    let members: usize = groups.iter().map(Vec::len).sum();
    assert_eq!((ops, dropped), ((members * MIXED_CALLS.len()) as u64, 0));
    for (g, ranks) in groups.iter().enumerate() {
        for (k, &(dt, op, root)) in MIXED_CALLS.iter().enumerate() {
            let inputs: Vec<Vec<u8>> = (0..ranks.len()).map(|i| mixed_input(g, k, i)).collect();
            let want = tree_reference(ranks, &inputs, dt, op, 8);
            for (i, calls) in together[g].iter().enumerate() {
                let got = &calls[k].0;
                match root {
                    Some(r) if r != i => assert!(got.is_none(), "group {g} call {k}: member {i} got a result"),
                    _ => assert!(
                        got.as_ref() == Some(&want),
                        "group {g} call {k} {dt:?} {op:?}: member {i} differs from the reference"
                    ),
                }
            }
        }
        // Alone on the machine: the same results.
        let mut alone = Machine::new(world(&[]));
        let solo = run_groups(&mut alone, std::slice::from_ref(ranks), &[g]);
        for (i, calls) in solo[0].iter().enumerate() {
            for (k, call) in calls.iter().enumerate() {
                assert!(call.0 == together[g][i][k].0, "group {g} call {k} member {i}");
            }
        }
    }
    // A's and B's calls overlap in time: each call k of A is in progress at some member while
    // call k of B is.
    for k in 0..MIXED_CALLS.len() {
        let span = |g: usize| {
            let s = together[g].iter().map(|c| c[k].1).min().unwrap();
            let e = together[g].iter().map(|c| c[k].2).max().unwrap();
            (s, e)
        };
        let ((s0, e0), (s1, e1)) = (span(0), span(1));
        assert!(
            s0 < e1 && s1 < e0,
            "call {k}: A {s0}..{e0}, B {s1}..{e1} do not overlap"
        );
    }
}

#[test]
fn broadcast_and_reduce_with_roots_away_from_the_tree_root() {
    let ranks = members(50);
    let mut m = Machine::new(world(&[]));
    let (outs, _) = run(&mut m, &ranks, &hw_cfg(), |mut c| async move {
        let me = c.rank();
        // Broadcast of 3000 bytes (three packets) from member 17.
        let mut buf: Vec<i64> = if me == 17 {
            (0..375).map(|j| j * 3 + 1).collect()
        } else {
            vec![0; 375]
        };
        c.broadcast(&mut buf, 17, Algorithm::Hardware).await.unwrap();
        let r = c
            .reduce(&[me as i64, 1], ReduceOp::Sum, 33, Algorithm::Hardware)
            .await
            .unwrap();
        let mut small = [if me == 49 { 2.5f32 } else { 0.0 }];
        c.broadcast(&mut small, 49, Algorithm::Hardware).await.unwrap();
        (buf, r, small[0])
    });
    let n = ranks.len() as i64;
    for (i, (buf, r, s)) in outs.iter().enumerate() {
        assert_eq!(buf, &(0..375).map(|j| j * 3 + 1).collect::<Vec<i64>>());
        assert_eq!(*s, 2.5);
        if i == 33 {
            assert_eq!(r.as_deref(), Some(&[n * (n - 1) / 2, n][..]));
        } else {
            assert_eq!(r, &None);
        }
    }
}

/// Packets the fabric delivered to each node, over all its rails: the packet counts of the
/// router output ports cabled to it.
fn received_per_node(w: &World) -> Vec<u64> {
    let net = w.network();
    let sent: std::collections::HashMap<String, u64> =
        net.link_use().into_iter().map(|l| (l.from, l.packets)).collect();
    net.topo
        .nodes
        .iter()
        .map(|n| n.ports.iter().map(|(r, p)| sent[&format!("r{}.p{}", r.0, p.0)]).sum())
        .collect()
}

/// Descriptors posted directly (no communicator): each member NIC gets every multicast packet
/// once; a node the tables wrongly include drops what it receives and counts it. Per node, the
/// fabric delivers the gather messages to the root's NIC, the multicast once to each other
/// member NIC and to each wrongly included node, and nothing anywhere else.
#[test]
fn multicast_reaches_each_member_once_and_non_members_drop_it() {
    let mut w = world(&[]);
    // Members on 6 nodes (both processes of nodes 3 and 40, one of 100, 200, 300, 511).
    let ranks: Vec<Rank> = [6u32, 7, 80, 81, 200, 400, 600, 1023]
        .iter()
        .map(|&r| Rank(r))
        .collect();
    let g = w.coll_group(&ranks).unwrap();
    let mut m = Machine::new(w);
    let run_once = |m: &mut Machine, count: u64| {
        for (i, &r) in ranks.iter().enumerate() {
            let ctx = m.context(r);
            m.spawn(async move {
                let mr = ctx.reg_mr(16 * count.max(1));
                let cq = ctx.create_cq();
                ctx.write_local(&mr, 0, &to_bytes(&vec![i as i64 + 1; count as usize]))
                    .unwrap();
                ctx.post_coll(CollDesc {
                    group: g,
                    kind: CollKind::Allreduce,
                    dtype: CollType::I64,
                    op: CollOp::Sum,
                    count,
                    src: mr.addr,
                    dst: mr.addr + 8 * count,
                    cq: cq.id(),
                    wr_id: 9,
                })
                .unwrap();
                let e = cq.next().await;
                assert_eq!((e.kind, e.status, e.wr_id), (CqeKind::Coll, CqeStatus::Ok, 9));
                let got: Vec<i64> = from_bytes(&ctx.read_local(&mr, 8 * count, 8 * count).unwrap());
                assert_eq!(got, vec![36; count as usize]);
            });
        }
        let end = m.run();
        assert_eq!(end.stuck_tasks, 0);
    };
    // Packets each node received: the root's NIC (node 3) the gather messages of its 5 children
    // (two packets each), the other member NICs the two multicast packets, once.
    let expected = |extra: &[usize]| {
        let mut v = vec![0u64; 512];
        v[3] = 5 * 2;
        for n in [40, 100, 200, 300, 511].iter().chain(extra) {
            v[*n] = 2;
        }
        v
    };
    // 200 elements = 1600 B = two multicast packets of 1 KiB payload at most.
    run_once(&mut m, 200);
    {
        let w = m.world();
        let [ops, gather, mcast, dropped] = w.coll_counters();
        assert_eq!((ops, gather, mcast, dropped), (8, 5 * 2, 2, 0));
        // Each multicast packet reached the 5 other member nodes, once each.
        let c = w.network().counters();
        assert_eq!(c.injected + c.multicast_copies, c.delivered);
        assert_eq!(c.multicast_copies, 2 * 5 - 2);
        let per_node = received_per_node(&w);
        assert_eq!(per_node, expected(&[]));
        assert_eq!(per_node.iter().sum::<u64>(), c.delivered);
    }
    drop(m);
    // Tables that also reach nodes 5 and 6 (not members): they drop the packets.
    let mut w = world(&[]);
    let g2 = w.coll_group(&ranks).unwrap();
    assert_eq!(g2, g);
    let nodes: Vec<_> = [40u32, 100, 200, 300, 511, 5, 6]
        .iter()
        .map(|&n| hpcnet_fabric::topology::NodeId(n))
        .collect();
    w.program_multicast_nodes(g, hpcnet_fabric::topology::NodeId(3), &nodes)
        .unwrap();
    let mut m = Machine::new(w);
    run_once(&mut m, 200);
    let w = m.world();
    let [ops, _, mcast, dropped] = w.coll_counters();
    assert_eq!((ops, mcast, dropped), (8, 2, 2 * 2));
    // Nodes 5 and 6 received the two packets each (the 4 dropped), the members as before.
    let per_node = received_per_node(&w);
    assert_eq!(per_node, expected(&[5, 6]));
    assert_eq!(per_node.iter().sum::<u64>(), w.network().counters().delivered);
}

#[test]
fn bad_calls_are_errors() {
    // Mismatched sizes, datatypes or collectives: every member's call fails.
    let ranks = members(20);
    let mut m = Machine::new(world(&[]));
    let (outs, _) = run(&mut m, &ranks, &hw_cfg(), |mut c| async move {
        let me = c.rank();
        let n = if me == 7 { 2 } else { 1 };
        let a = c.allreduce(&vec![1i64; n], ReduceOp::Sum, Algorithm::Hardware).await;
        a.err()
    });
    assert!(outs
        .iter()
        .all(|e| matches!(e, Some(CollError::HardwareMismatch { call: "allreduce" }))));
    let mut m = Machine::new(world(&[]));
    let (outs, _) = run(&mut m, &ranks, &hw_cfg(), |mut c| async move {
        let r = if c.rank() == 3 {
            c.allreduce(&[1f64], ReduceOp::Sum, Algorithm::Hardware).await.err()
        } else {
            c.allreduce(&[1i64], ReduceOp::Sum, Algorithm::Hardware).await.err()
        };
        r.map(|e| e.to_string())
    });
    assert!(outs
        .iter()
        .all(|e| e.as_deref().is_some_and(|s| s.contains("disagree"))));
    // Local errors: root outside, bitwise on floats, no hardware group.
    let mut m = Machine::new(world(&[]));
    let (outs, _) = run(&mut m, &ranks, &hw_cfg(), |mut c| async move {
        let a = c.broadcast(&mut [0i32; 4], 20, Algorithm::Hardware).await;
        let b = c.allreduce(&[1.0f32], ReduceOp::Bxor, Algorithm::Hardware).await;
        (a, b)
    });
    for (a, b) in outs {
        assert!(matches!(
            a,
            Err(CollError::RankOutside {
                index: 20,
                size: 20,
                ..
            })
        ));
        assert!(matches!(b, Err(CollError::OpOnType { .. })));
    }
    let mut m = Machine::new(world(&[]));
    let (outs, _) = run(&mut m, &ranks[..4], &CommConfig::default(), |mut c| async move {
        c.barrier(Algorithm::Hardware).await
    });
    assert!(outs.iter().all(|e| matches!(e, Err(CollError::AlgorithmLimit { .. }))));
    // Hardware on a collective it does not implement.
    let mut m = Machine::new(world(&[]));
    let (outs, _) = run(&mut m, &ranks[..2], &hw_cfg(), |mut c| async move {
        c.allgather(&[1i32], Algorithm::Hardware).await
    });
    assert!(outs.iter().all(|e| matches!(e, Err(CollError::Unsupported { .. }))));
}

/// How one member's hardware broadcast or reduce differs from the others'.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Disagree {
    /// One element more.
    Size,
    /// `f64` elements where the others pass `i64` (the same byte length).
    Type,
    /// `i32` elements where the others pass `i64`.
    Width,
    /// Another root (the member after the agreed one).
    Root,
}

/// Hardware broadcast and reduce (root: member 4) of 200 `i64` where one member (the tree's
/// root, the broadcast root, one in the middle, the last) passes another size, datatype or root:
/// every member's call fails with the hardware mismatch, nobody is left waiting, and the
/// communicator refuses later calls.
#[test]
fn hardware_broadcast_and_reduce_with_mismatched_calls_fail_every_member() {
    let ranks = members(20);
    let root = 4;
    for reduce in [false, true] {
        for how in [Disagree::Size, Disagree::Type, Disagree::Width, Disagree::Root] {
            for odd in [0, root, 11, 19] {
                let what = format!(
                    "{} {how:?} odd member {odd}",
                    if reduce { "reduce" } else { "broadcast" }
                );
                let mut m = Machine::new(world(&[]));
                let (outs, _) = run(&mut m, &ranks, &hw_cfg(), move |mut c| async move {
                    let me = c.rank();
                    let d = (me == odd).then_some(how);
                    let count = 200 + usize::from(d == Some(Disagree::Size));
                    let root = if d == Some(Disagree::Root) { root + 1 } else { root };
                    let x: Vec<i64> = (0..count as i64).map(|j| j * 3 + me as i64).collect();
                    let alg = Algorithm::Hardware;
                    macro_rules! go {
                        ($t:ty) => {{
                            let mut x: Vec<$t> = x.iter().map(|&v| v as $t).collect();
                            if reduce {
                                c.reduce(&x, ReduceOp::Sum, root, alg).await.map(drop)
                            } else {
                                c.broadcast(&mut x, root, alg).await
                            }
                        }};
                    }
                    let r = match d {
                        Some(Disagree::Type) => go!(f64),
                        Some(Disagree::Width) => go!(i32),
                        _ => go!(i64),
                    };
                    let again = c.barrier(Algorithm::Hardware).await;
                    (r, again)
                });
                let call = if reduce { "reduce" } else { "broadcast" };
                for (i, (r, again)) in outs.iter().enumerate() {
                    assert!(
                        matches!(r, Err(CollError::HardwareMismatch { call: c }) if *c == call),
                        "{what}: member {i}: {r:?}"
                    );
                    assert!(
                        matches!(again, Err(CollError::Poisoned { .. })),
                        "{what}: member {i}: the next call gave {again:?}"
                    );
                }
                let [ops, _, _, dropped] = m.world().coll_counters();
                assert_eq!((ops, dropped), (ranks.len() as u64, 0), "{what}");
            }
        }
    }
}

/// The NIC's reduction rate per type (`nic.coll.rate_*`) sets the time of a hardware reduction:
/// on 9 NICs with both processes each (fan-out 8: the root's NIC and its 8 children), a leaf
/// NIC combines its 2 operands (one operand's bytes reduced) and the root's NIC 2 + 8 operands
/// (9 operands' bytes), one after the other; an allreduce of `n` bytes thus spends 10·n bytes at
/// the rate on its critical path. Lowering the `f64` rate from 64 to 1 Gb/s slows a 16 KiB
/// `f64` allreduce by about 10·n·(1/1 − 1/64) Gb/s and leaves an `i64` allreduce as it was.
#[test]
fn the_nic_reduction_rate_per_type_sets_the_time_of_a_hardware_allreduce() {
    let ranks: Vec<Rank> = (0..18).map(Rank).collect();
    let n = 16 << 10;
    let time = |overrides: &[&str], dt: Datatype| {
        let mut m = Machine::new(world(overrides));
        let (outs, _) = run(&mut m, &ranks, &hw_cfg(), move |mut c| async move {
            let x = input(dt, c.rank(), n / dt.size(), 7);
            c.allreduce_bytes(dt, ReduceOp::Sum, x, Algorithm::Hardware)
                .await
                .unwrap();
            c.context().now()
        });
        outs.into_iter().max().unwrap()
    };
    let slow = ["nic.coll.rate_f64=\"1 Gb/s\""];
    let (f0, f1) = (time(&[], Datatype::F64), time(&slow, Datatype::F64));
    let (i0, i1) = (time(&[], Datatype::I64), time(&slow, Datatype::I64));
    assert_eq!(i0, i1, "the f64 rate changed an i64 allreduce");
    // 8 bits per byte: 1 Gb/s is 8 ns per byte, 64 Gb/s 0.125 ns.
    let predicted = SimTime::from_ns(10 * n as u64 * 8) - SimTime::from_ps(10 * n as u64 * 125);
    let delta = f1 - f0;
    assert!(
        delta >= predicted && delta <= predicted + predicted / 20,
        "f64 allreduce {f0} -> {f1}: {delta} slower, the rate predicts {predicted}"
    );
}

#[test]
fn multicast_table_overflow_refuses_the_communicator() {
    let m = Machine::new(world(&["router.multicast_tables=2"]));
    let ranks = members(8);
    // Groups alternate rails; on each rail the port from the root's NIC into its leaf holds a
    // table of every group rooted there (the other tables spread over different spines).
    for _ in 0..4 {
        assert!(Comm::create(&m, &ranks, &hw_cfg()).is_ok()); // groups 0 … 3
    }
    match Comm::create(&m, &ranks, &hw_cfg()) {
        Err(CollError::BadComm(e)) => assert!(e.contains("router.multicast_tables"), "{e}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a third group on rail 0 cannot fit two tables per port"),
    }
    // Software communicators take no tables.
    assert!(Comm::create(&m, &ranks, &CommConfig::default()).is_ok());
}

#[test]
fn full_prototype_allreduce_of_1024_participants_is_exact_and_deterministic() {
    let ranks: Vec<Rank> = (0..1024).map(Rank).collect();
    let mut ends = Vec::new();
    for _ in 0..2 {
        let mut m = Machine::new(world(&[]));
        let (outs, end) = run(&mut m, &ranks, &hw_cfg(), |mut c| async move {
            let me = c.rank() as i64;
            let t0 = c.context().now();
            let s = c.allreduce(&[me, 1], ReduceOp::Sum, Algorithm::Hardware).await.unwrap();
            (s, c.context().now() - t0)
        });
        assert!(outs.iter().all(|(s, _)| s == &vec![1023 * 1024 / 2, 1024]));
        let [_, gather, mcast, dropped] = m.world().coll_counters();
        assert_eq!((gather, mcast, dropped), (511, 1, 0));
        assert_eq!(m.world().network().counters().multicast_copies, 511 - 1);
        ends.push((end.time, end.events, outs.iter().map(|o| o.1).max()));
    }
    assert_eq!(ends[0], ends[1]);
}

fn counter(w: &World, name: &str) -> u64 {
    w.statistics()
        .iter()
        .find(|s| s.name == name)
        .map_or(0, |s| match s.value {
            hpcnet_des::stats::StatValue::Counter { value } => value,
            _ => 0,
        })
}

const RECOVERY: &str = "nic.coll.recovery={timeout=\"50 us\", retries=3}";

fn plane_failure_at(t_ns: u64) -> String {
    format!("faults.events=[{{at=\"{t_ns} ns\", kind=\"plane\", plane=0}}]")
}

#[test]
fn a_plane_failing_under_hardware_collectives_moves_the_group_and_restarts_what_it_caught() {
    let ranks = members(64);
    let (dt, op) = (Datatype::F64, ReduceOp::Sum);
    let inputs: Vec<Vec<u8>> = (0..ranks.len()).map(|m| input(dt, m, 40, 3)).collect();
    let want = tree_reference(&ranks, &inputs, dt, op, 8);
    let calls = 10;
    let mut caught = 0;
    for k in 0..12u64 {
        let fault = plane_failure_at(2_000 + 700 * k);
        let mut m = Machine::new(world(&[&fault, RECOVERY]));
        let ins = inputs.clone();
        let (outs, _) = run(&mut m, &ranks, &hw_cfg(), move |mut c| {
            let x = ins[c.rank()].clone();
            async move {
                let mut v = Vec::new();
                for _ in 0..calls {
                    v.push(c.allreduce_bytes(dt, op, x.clone(), Algorithm::Hardware).await.unwrap());
                }
                v
            }
        });
        for (i, o) in outs.iter().enumerate() {
            assert_eq!(o.len(), calls, "member {i}");
            for r in o {
                assert_eq!(
                    r, &want,
                    "failure {k}: member {i}: result bits differ from the tree reference"
                );
            }
        }
        let w = m.world();
        // Every member completed every call exactly once.
        assert_eq!(w.coll_counters()[0], (calls * ranks.len()) as u64, "failure {k}");
        // The group left the failed plane once.
        assert_eq!(counter(&w, "nic.coll.rail_changes"), 1, "failure {k}");
        assert_eq!(counter(&w, "nic.coll.failed_members"), 0, "failure {k}");
        if counter(&w, "nic.coll.lost_packets") > 0 {
            caught += 1;
            assert!(
                counter(&w, "nic.coll.restarts") >= 1,
                "failure {k}: packets lost, no restart"
            );
        }
    }
    assert!(caught >= 1, "no failure time caught a collective in flight");
}

#[test]
fn without_restarts_left_a_caught_collective_returns_an_error_and_nobody_waits_forever() {
    let ranks = members(64);
    let (dt, op) = (Datatype::I64, ReduceOp::Sum);
    let inputs: Vec<Vec<u8>> = (0..ranks.len()).map(|m| input(dt, m, 40, 3)).collect();
    let want = tree_reference(&ranks, &inputs, dt, op, 8);
    let mut failed_runs = 0;
    for k in 0..10u64 {
        let fault = plane_failure_at(200 + 250 * k);
        let mut m = Machine::new(world(&[&fault, "nic.coll.recovery={timeout=\"20 us\", retries=0}"]));
        let ins = inputs.clone();
        let (outs, _) = run(&mut m, &ranks, &hw_cfg(), move |mut c| {
            let x = ins[c.rank()].clone();
            async move { c.allreduce_bytes(dt, op, x, Algorithm::Hardware).await }
        });
        let errors = outs.iter().filter(|o| o.is_err()).count() as u64;
        for o in &outs {
            match o {
                Ok(r) => assert_eq!(r, &want),
                Err(e) => assert!(e.to_string().contains("RetryExceeded"), "{e}"),
            }
        }
        let w = m.world();
        assert_eq!(counter(&w, "nic.coll.failed_members"), errors);
        assert_eq!(counter(&w, "nic.coll.restarts"), 0);
        if errors > 0 {
            failed_runs += 1;
            assert!(counter(&w, "nic.coll.lost_packets") > 0);
        }
    }
    assert!(failed_runs >= 1, "no failure time caught the collective");
}

#[test]
fn a_member_posting_after_its_group_gave_up_gets_the_same_error() {
    let ranks = members(64);
    let (dt, op) = (Datatype::I64, ReduceOp::Sum);
    let inputs: Vec<Vec<u8>> = (0..ranks.len()).map(|m| input(dt, m, 40, 3)).collect();
    let want = tree_reference(&ranks, &inputs, dt, op, 8);
    // Member 5 posts 200 µs late, long after the 20 µs time-out has given up on the collective
    // (when the plane failure caught one of its packets).
    let late = 5;
    let mut failed_runs = 0;
    for k in 0..10u64 {
        let fault = plane_failure_at(200 + 250 * k);
        let mut m = Machine::new(world(&[&fault, "nic.coll.recovery={timeout=\"20 us\", retries=0}"]));
        let ins = inputs.clone();
        // `run` asserts that no rank program is left waiting.
        let (outs, _) = run(&mut m, &ranks, &hw_cfg(), move |mut c| {
            let x = ins[c.rank()].clone();
            async move {
                if c.rank() == late {
                    c.context().sleep(SimTime::from_us(200)).await;
                }
                c.allreduce_bytes(dt, op, x, Algorithm::Hardware).await
            }
        });
        let errors = outs.iter().filter(|o| o.is_err()).count() as u64;
        for o in &outs {
            match o {
                Ok(r) => assert_eq!(r, &want),
                Err(e) => assert!(e.to_string().contains("RetryExceeded"), "{e}"),
            }
        }
        let w = m.world();
        assert_eq!(counter(&w, "nic.coll.failed_members"), errors, "failure {k}");
        if errors > 0 {
            failed_runs += 1;
            // Nobody can have the result without the late member's contribution.
            assert_eq!(errors, ranks.len() as u64, "failure {k}: every member gets the error");
            assert!(outs[late].is_err(), "failure {k}: the late member gets the error too");
        } else {
            assert!(outs.iter().all(Result::is_ok), "failure {k}");
        }
    }
    assert!(failed_runs >= 1, "no failure time caught the collective");
}
