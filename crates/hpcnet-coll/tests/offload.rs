//! Offloaded collectives on the Tianhe triggered offload units (spec 04) on the `tianhe-32`
//! scenario: results equal a reference — integers exactly, floating point bit for bit against
//! the untimed executor running the same descriptor sequences pulse by pulse — for 1 … 16
//! members, across placements and timing changes that reorder arrivals, with concurrent
//! collectives, with more data than a hash buffer holds (back-pressure, nothing lost); a pulse
//! that cannot get a counter times out into an error; machines without the unit refuse.

mod common;
use common::{input, op2};
use hpcnet_coll::offload::{double_binary_tree_broadcast, halving_reduce, rabenseifner_allreduce, Member};
use hpcnet_coll::{to_bytes, Algorithm, CollError, Comm, CommConfig, Datatype, ReduceOp};
use hpcnet_msg::verbs::{Machine, RunEnd};
use hpcnet_nic::triggered::{run_ideal, Endpoint, HashBufConfig, Payload};
use hpcnet_nic::{Rank, World};
use hpcnet_workloads::Scenario;
use std::cell::RefCell;
use std::future::Future;
use std::path::Path;
use std::rc::Rc;

fn world_of(file: &str, overrides: &[&str]) -> World {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios").join(file);
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Scenario::load(&path, &o).expect("scenario").world().expect("world")
}

fn world(overrides: &[&str]) -> World {
    world_of("tianhe-32.toml", overrides)
}

fn cfg() -> CommConfig {
    CommConfig {
        offload: true,
        ..CommConfig::default()
    }
}

/// `n` ranks spread over the 32 nodes in a scattered order (`salt` moves them).
fn members(n: usize, salt: usize) -> Vec<Rank> {
    let mut v: Vec<Rank> = Vec::new();
    let mut k = salt;
    while v.len() < n {
        let r = Rank(((k * 13 + 7) % 32) as u32);
        if !v.contains(&r) {
            v.push(r);
        }
        k += 1;
    }
    v
}

fn run<T: 'static, Fut: Future<Output = T> + 'static>(
    m: &mut Machine,
    groups: &[Vec<Rank>],
    prog: impl Fn(usize, Comm) -> Fut,
) -> (Vec<Vec<T>>, RunEnd) {
    let mut outs = Vec::new();
    for (g, ranks) in groups.iter().enumerate() {
        let comms = Comm::create(m, ranks, &cfg()).expect("communicator");
        let out: Rc<RefCell<Vec<Option<T>>>> = Rc::new(RefCell::new((0..ranks.len()).map(|_| None).collect()));
        for (i, c) in comms.into_iter().enumerate() {
            let o = out.clone();
            let fut = prog(g, c);
            m.spawn(async move {
                let v = fut.await;
                o.borrow_mut()[i] = Some(v);
            });
        }
        outs.push(out);
    }
    let end = m.run();
    assert_eq!(end.stuck_tasks, 0, "rank programs left waiting");
    assert!(!end.deadlock);
    let v = outs
        .into_iter()
        .map(|o| {
            std::mem::take(&mut *o.borrow_mut())
                .into_iter()
                .map(|x| x.expect("finished"))
                .collect()
        })
        .collect();
    (v, end)
}

/// Pulse size of the scenario (C / k = 8192 / 64 elements, within a 1 KiB slot).
const PULSE: usize = 128;

#[derive(Copy, Clone)]
enum Kind {
    Allreduce,
    Reduce(usize),
    Broadcast(usize),
}

/// The untimed executor's results of the same sequences, pulse by pulse (abstract members:
/// node i, VP 0; the combine order depends on member indices only). Per member: its result.
fn ideal(kind: Kind, inputs: &[Vec<u8>], dt: Datatype, op: ReduceOp, per: usize, seed: u64) -> Vec<Vec<u8>> {
    let p = inputs.len();
    let elem = dt.size();
    let count = inputs[0].len() / elem;
    let members: Vec<Member> = (0..p as u32).map(|node| Member { node, vp: 0 }).collect();
    let mut out = vec![Vec::new(); p];
    let mut at = 0;
    while at < count {
        let n = per.min(count - at);
        let chunk: Vec<Payload> = inputs
            .iter()
            .map(|x| Payload::Operands(x[at * elem..(at + n) * elem].to_vec()))
            .collect();
        let seqs: Vec<Vec<_>> = match kind {
            Kind::Allreduce => vec![rabenseifner_allreduce(1, &members, dt, op, &chunk, &vec![None; p]).unwrap()],
            Kind::Reduce(root) => vec![halving_reduce(1, &members, root, dt, op, &chunk, None).unwrap()],
            Kind::Broadcast(root) => {
                double_binary_tree_broadcast([1, 2], &members, root, chunk[root].clone(), &vec![None; p])
                    .unwrap()
                    .into()
            }
        };
        let mut parts = vec![Vec::new(); p];
        for seq in seqs {
            let eps = seq
                .into_iter()
                .enumerate()
                .map(|(i, seq)| Endpoint {
                    node: i as u32,
                    vp: 0,
                    seq,
                })
                .collect();
            let buf = HashBufConfig {
                capacity: 64 * 1024,
                slots: 64,
            };
            let r = run_ideal(eps, seed, buf, &mut |_, _, _| Vec::new()).expect("ideal run");
            for (i, c) in r.completions.into_iter().enumerate() {
                parts[i].extend(c.data);
            }
        }
        for (o, part) in out.iter_mut().zip(parts) {
            o.extend(part);
        }
        at += n;
    }
    out
}

async fn call(kind: Kind, c: &mut Comm, dt: Datatype, x: Vec<u8>) -> Result<Vec<u8>, CollError> {
    match (kind, dt) {
        (Kind::Allreduce, _) => c.allreduce_bytes(dt, ReduceOp::Sum, x, Algorithm::Offload).await,
        (Kind::Reduce(root), Datatype::F64) => {
            let v: Vec<f64> = hpcnet_coll::from_bytes(&x);
            let r = c.reduce(&v, ReduceOp::Sum, root, Algorithm::Offload).await?;
            Ok(r.map(|r| to_bytes(&r)).unwrap_or_default())
        }
        (Kind::Reduce(root), _) => {
            let v: Vec<i64> = hpcnet_coll::from_bytes(&x);
            let r = c.reduce(&v, ReduceOp::Sum, root, Algorithm::Offload).await?;
            Ok(r.map(|r| to_bytes(&r)).unwrap_or_default())
        }
        (Kind::Broadcast(_), _) => {
            let mut v: Vec<f64> = hpcnet_coll::from_bytes(&x);
            let root = match kind {
                Kind::Broadcast(r) => r,
                _ => unreachable!(),
            };
            c.broadcast(&mut v, root, Algorithm::Offload).await?;
            Ok(to_bytes(&v))
        }
    }
}

/// Run one collective on `ranks` of a world; per member its result bytes.
fn once(w: World, ranks: &[Rank], kind: Kind, dt: Datatype, inputs: &[Vec<u8>]) -> (Vec<Vec<u8>>, Machine) {
    let mut m = Machine::new(w);
    let ins = Rc::new(inputs.to_vec());
    let (outs, _) = run(&mut m, &[ranks.to_vec()], |_, mut c| {
        let ins = ins.clone();
        async move {
            let me = c.rank();
            call(kind, &mut c, dt, ins[me].clone()).await.expect("offloaded call")
        }
    });
    (outs.into_iter().next().unwrap(), m)
}

#[test]
fn allreduce_reduce_and_broadcast_equal_the_reference_for_1_to_16_members() {
    // 300 elements: three pulses (128, 128, 44).
    let count = 300;
    for p in 1..=16usize {
        let ranks = members(p, p);
        for dt in [Datatype::F64, Datatype::I64] {
            let inputs: Vec<Vec<u8>> = (0..p).map(|m| input(dt, m, count, 5)).collect();
            let want = ideal(Kind::Allreduce, &inputs, dt, ReduceOp::Sum, PULSE, 1);
            let (got, _) = once(world(&[]), &ranks, Kind::Allreduce, dt, &inputs);
            for (i, g) in got.iter().enumerate() {
                assert_eq!(g, &want[i], "allreduce {dt:?} p = {p}, member {i}");
            }
            if dt == Datatype::I64 {
                // Integers: equal to the plain fold as well.
                let fold = inputs[1..]
                    .iter()
                    .fold(inputs[0].clone(), |a, x| op2(dt, ReduceOp::Sum, &a, x));
                assert_eq!(got[0], fold, "p = {p}");
            }
            let root = (p * 5 + 3) % p;
            let want = ideal(Kind::Reduce(root), &inputs, dt, ReduceOp::Sum, PULSE, 2);
            let (got, _) = once(world(&[]), &ranks, Kind::Reduce(root), dt, &inputs);
            assert_eq!(got[root], want[root], "reduce {dt:?} p = {p} root {root}");
        }
        let root = (p * 3 + 1) % p;
        let inputs: Vec<Vec<u8>> = (0..p).map(|m| input(Datatype::F64, m, count, 9)).collect();
        let (got, m) = once(world(&[]), &ranks, Kind::Broadcast(root), Datatype::F64, &inputs);
        for (i, g) in got.iter().enumerate() {
            assert_eq!(g, &inputs[root], "broadcast p = {p} member {i}");
        }
        // Double binary tree: every pulse's two halves cross each of the p − 1 tree edges once,
        // one fabric packet each (halves of at most 512 B).
        let c = m.world().trig_counters();
        assert_eq!(c.packets, 3 * 2 * (p as u64 - 1), "p = {p}");
        assert_eq!((c.completed, c.errors, c.waiting), (p as u64, 0, 0));
    }
}

#[test]
fn float_results_are_bit_identical_across_placements_timing_and_runs() {
    let p = 16;
    let count = 1000;
    let dt = Datatype::F64;
    let inputs: Vec<Vec<u8>> = (0..p).map(|m| input(dt, m, count, 11)).collect();
    let want = ideal(Kind::Allreduce, &inputs, dt, ReduceOp::Sum, PULSE, 3);
    let mut ends = Vec::new();
    for (salt, over) in [
        (0, vec![]),
        (0, vec![]),
        (5, vec!["router.latency=\"370 ns\""]),
        (
            9,
            vec!["nic.rx_overhead=\"133 ns\"", "nic.triggered.step_overhead=\"7 ns\""],
        ),
        (2, vec!["seed=77", "link.latency=\"3 ns\""]),
    ] {
        let ranks = members(p, salt);
        let (got, m) = once(world(&over), &ranks, Kind::Allreduce, dt, &inputs);
        for g in &got {
            assert_eq!(g, &want[0]);
        }
        ends.push((salt, m.world().now()));
    }
    // Same scenario and seed: the same simulated time.
    assert_eq!(ends[0], ends[1]);
    assert_ne!(ends[0].1, ends[2].1);
}

/// `k` concurrent f64 allreduces of `count` elements, communicator g on `members(p, salt(g))`
/// with its own inputs: every member of every communicator gets its reference bits. Returns
/// the machine, for the counters.
fn concurrent_allreduces(
    over: &[&str],
    k: usize,
    p: usize,
    count: usize,
    salt: impl Fn(usize) -> usize,
    seed: u64,
) -> Machine {
    let dt = Datatype::F64;
    let groups: Vec<Vec<Rank>> = (0..k).map(|g| members(p, salt(g))).collect();
    let inputs: Vec<Vec<Vec<u8>>> = (0..k)
        .map(|g| (0..p).map(|m| input(dt, m, count, 100 * seed + g as u64)).collect())
        .collect();
    let wants: Vec<Vec<u8>> = inputs
        .iter()
        .map(|ins| ideal(Kind::Allreduce, ins, dt, ReduceOp::Sum, PULSE, seed).swap_remove(0))
        .collect();
    let mut m = Machine::new(world(over));
    let ins = Rc::new(inputs);
    let (outs, _) = run(&mut m, &groups, |g, mut c| {
        let ins = ins.clone();
        async move {
            let me = c.rank();
            c.allreduce_bytes(dt, ReduceOp::Sum, ins[g][me].clone(), Algorithm::Offload)
                .await
                .expect("offloaded allreduce")
        }
    });
    for (g, out) in outs.iter().enumerate() {
        for r in out {
            assert_eq!(r, &wants[g], "k = {k}, communicator {g}");
        }
    }
    m
}

#[test]
fn concurrent_collectives_overflowing_a_small_buffer_lose_nothing() {
    // Four concurrent 16 KiB f64 allreduces over overlapping members, each NIC with one unit of
    // 4 slots (4 KiB) and a 4 KiB receive buffer, arrivals jittered: the data in flight far
    // exceeds the buffers, the pulses in flight (pulse_capacity = 512 elements over 4 counters)
    // fit them, so refused packets are pushed back and every packet enters a unit once.
    let over = [
        "nic.triggered.units=1",
        "nic.triggered.slots=4",
        "nic.triggered.buffer=\"4 KiB\"",
        "nic.rx_buffer=\"4 KiB\"",
        "nic.triggered.pulse_capacity=512",
        "nic.triggered.pulse_counters=4",
        "nic.triggered.jitter=\"2 us\"",
    ];
    let k = 4;
    let m = concurrent_allreduces(&over, k, 16, 2048, |g| 1 + g * 5, 3);
    let c = m.world().trig_counters();
    assert_eq!((c.completed, c.errors, c.waiting), (16 * k as u64, 0, 0));
    assert!(c.refused > 0, "the buffers refused nothing: {c:?}");
    assert!(c.peak_occupancy <= 4);
    assert_eq!(c.arrived, c.sent);
    assert!(c.payload_bytes > 4 * 4096 * 16, "{c:?}");
}

#[test]
fn concurrent_allreduces_on_32_nodes() {
    for k in [8usize, 32] {
        // k communicators over all 32 nodes, each in its own member order.
        let m = concurrent_allreduces(&[], k, 32, 256, |g| g * 3, 1);
        let c = m.world().trig_counters();
        assert_eq!((c.completed, c.errors, c.waiting), (32 * k as u64, 0, 0), "k = {k}");
        assert!(c.peak_pulses <= 64);
    }
}

#[test]
fn more_data_than_the_buffer_holds_is_pushed_back_and_nothing_is_lost() {
    // One unit of 4 slots of 1 KiB per NIC; 64 KiB per member in 64 pulses, many in flight.
    // Random arrival delays let packets of later steps overtake those a step waits for, so
    // they must be stored (pulses in lockstep would find their reads parked already).
    let over = [
        "nic.triggered.units=1",
        "nic.triggered.slots=4",
        "nic.triggered.buffer=\"4 KiB\"",
        "nic.rx_buffer=\"4 KiB\"",
        "nic.triggered.jitter=\"2 us\"",
    ];
    let p = 16;
    let count = 8192;
    let dt = Datatype::F64;
    let inputs: Vec<Vec<u8>> = (0..p).map(|m| input(dt, m, count, 21)).collect();
    let want = ideal(Kind::Allreduce, &inputs, dt, ReduceOp::Sum, PULSE, 5);
    let (got, m) = once(world(&over), &members(p, 1), Kind::Allreduce, dt, &inputs);
    for g in &got {
        assert_eq!(g, &want[0]);
    }
    let c = m.world().trig_counters();
    assert!(c.refused > 0, "the buffers refused nothing: {c:?}");
    assert!(c.peak_occupancy <= 4);
    assert!(c.payload_bytes > 4 * 1024 * p as u64);
    assert_eq!((c.completed, c.errors, c.waiting), (p as u64, 0, 0));
    assert_eq!(c.pulses, 64 * p as u64);
    // Every collective packet sent entered a unit exactly once (a duplicate key would be a
    // unit error, a lost one a stuck collective).
    assert_eq!(c.arrived, c.sent);
    // Each NIC's units took far more data than their buffer holds, with a mean occupancy
    // between none and all of the slots.
    let w = m.world();
    let mut arrived = 0;
    for node in 0..32u32 {
        let Some(u) = w.trig_buffer_use(w.placement().node_of(Rank(node))) else {
            continue;
        };
        assert_eq!((u.slots, u.capacity), (4, 4096));
        assert!(u.peak_unit_slots <= 4);
        let mean = u.mean_utilisation();
        assert!(mean > 0.0 && mean <= 1.0, "node {node}: {mean}");
        assert!(u.arrived_bytes > 4 * u.capacity, "node {node}: {u:?}");
        arrived += u.arrived;
    }
    assert_eq!(arrived, c.arrived);
}

#[test]
fn firing_costs_the_step_overhead_and_the_reduction_rate() {
    // 16 members, 128 elements: one pulse; a member fires 1 + 2·4 steps in a row (load, four
    // halving and four doubling steps), one after the other.
    let p = 16;
    let dt = Datatype::F64;
    let inputs: Vec<Vec<u8>> = (0..p).map(|m| input(dt, m, PULSE, 17)).collect();
    let ranks = members(p, 3);
    let time = |over: &[&str]| {
        let (_, m) = once(world(over), &ranks, Kind::Allreduce, dt, &inputs);
        let t = m.world().now().as_us_f64();
        t
    };
    let base = time(&[]);
    let slow_steps = time(&["nic.triggered.step_overhead=\"2050 ns\""]);
    assert!(slow_steps - base > 8.0 * 2.0, "{base} -> {slow_steps}");
    // 1 Gb/s: the 512 B of the first halving step alone take 4 µs.
    let slow_reduce = time(&["nic.triggered.rate_f64=\"1 Gb/s\""]);
    assert!(slow_reduce - base > 4.0, "{base} -> {slow_reduce}");
}

#[test]
fn float_results_are_bit_identical_under_arrival_jitter() {
    // Random delays of up to 0.5 or 5 µs before each collective packet enters its unit reorder
    // the arrivals; the descriptors fix the combine order, so the bits do not move.
    let p = 16;
    let count = 1000;
    let dt = Datatype::F64;
    let inputs: Vec<Vec<u8>> = (0..p).map(|m| input(dt, m, count, 13)).collect();
    let all = ideal(Kind::Allreduce, &inputs, dt, ReduceOp::Sum, PULSE, 6);
    let root = 5;
    let red = ideal(Kind::Reduce(root), &inputs, dt, ReduceOp::Sum, PULSE, 7);
    let ranks = members(p, 4);
    let mut runs = Vec::new();
    for over in [
        vec![],
        vec!["nic.triggered.jitter=\"500 ns\""],
        vec!["nic.triggered.jitter=\"500 ns\""],
        vec!["nic.triggered.jitter=\"500 ns\"", "seed=9"],
        vec!["nic.triggered.jitter=\"5 us\""],
    ] {
        let (got, m) = once(world(&over), &ranks, Kind::Allreduce, dt, &inputs);
        for (i, g) in got.iter().enumerate() {
            assert_eq!(g, &all[i], "{over:?} allreduce member {i}");
        }
        let c = m.world().trig_counters();
        assert_eq!((c.arrived, c.errors, c.waiting), (c.sent, 0, 0));
        let (got, _) = once(world(&over), &ranks, Kind::Reduce(root), dt, &inputs);
        assert_eq!(got[root], red[root], "{over:?} reduce");
        runs.push((m.world().now(), c.stored, c.woke));
    }
    // Same jitter and seed: the same run; other jitter or seed: other arrival orders.
    assert_eq!(runs[1], runs[2]);
    assert_ne!(runs[0].0, runs[1].0);
    assert_ne!(runs[1].0, runs[3].0);
    assert!(runs[4].0 > runs[1].0, "{runs:?}");
    assert!(runs.iter().any(|r| (r.1, r.2) != (runs[0].1, runs[0].2)), "{runs:?}");
}

#[test]
fn a_pulse_without_a_counter_times_out_into_an_error() {
    // One counter per NIC, two processes per node: ranks 0 and 1 share node 0. Communicator A
    // (ranks 0, 2) never completes (rank 2 never calls): its pulse holds node 0's counter.
    // Communicator B (ranks 1, 3) then waits for node 0's counter until the time-out.
    let over = [
        "nic.hosts=2",
        "nic.triggered.pulse_counters=1",
        "nic.triggered.collectives=2",
        "nic.triggered.pulse_timeout=\"20 us\"",
    ];
    let (mut m, b) = node0_held(&over, &[1, 3]);
    type Outcome = Option<Result<Vec<f64>, CollError>>;
    let out: Rc<RefCell<Outcome>> = Rc::new(RefCell::new(None));
    let mut b = b.into_iter();
    let mut b1 = b.next().unwrap();
    let o = out.clone();
    m.spawn(async move {
        // Let A take the counter first.
        b1.context().sleep(hpcnet_des::SimTime::from_us(2)).await;
        *o.borrow_mut() = Some(b1.allreduce(&[2.0f64; 4], ReduceOp::Sum, Algorithm::Offload).await);
    });
    let end = m.run();
    assert!(end.stuck_tasks > 0);
    let r = out.borrow_mut().take().expect("B's call returned");
    let e = r.unwrap_err().to_string();
    assert!(e.contains("TrigTimeout"), "{e}");
    let c = m.world().trig_counters();
    assert_eq!(c.timeouts, 1);
    assert!(c.retries >= 10, "{c:?}");
    assert!(m.world().now() >= hpcnet_des::SimTime::from_us(22));
}

#[test]
fn a_time_out_at_one_member_aborts_the_collective_at_every_member() {
    // As above, but communicator B has four members on nodes 0 … 3 (ranks 1, 3, 5, 7) and
    // calls a vector of several pulses. Only node 0 runs out of counters: its member's pulse
    // times out, and the abort must reach the three others, whose sequences wait for node 0's
    // packets — every member of B returns an error, none waits forever.
    let over = [
        "nic.hosts=2",
        "nic.triggered.pulse_counters=1",
        "nic.triggered.collectives=2",
        "nic.triggered.pulse_timeout=\"20 us\"",
    ];
    let (mut m, b) = node0_held(&over, &[1, 3, 5, 7]);
    let out: Rc<RefCell<Vec<(usize, String)>>> = Rc::new(RefCell::new(Vec::new()));
    for (i, mut c) in b.into_iter().enumerate() {
        let o = out.clone();
        m.spawn(async move {
            c.context().sleep(hpcnet_des::SimTime::from_us(2 + 3 * i as u64)).await;
            let r = c.allreduce(&[2.0f64; 1024], ReduceOp::Sum, Algorithm::Offload).await;
            let e = r.expect_err("B cannot complete").to_string();
            o.borrow_mut().push((i, e));
        });
    }
    let end = m.run();
    // Only A's member (whose partner never calls) is left waiting.
    assert_eq!(end.stuck_tasks, 1, "stuck tasks");
    four_errors_one_cause(&out.borrow(), "TrigTimeout");
    let c = m.world().trig_counters();
    assert_eq!(c.timeouts, 1);
    assert!(c.errors >= 4, "{c:?}");
}

#[test]
fn a_failed_collective_returns_its_counters_to_the_next_one() {
    // As above: B (ranks 1, 3, 5, 7 on nodes 0 … 3) times out at node 0 and is aborted at the
    // others, whose first pulses sit in their units holding each NIC's only counter. Then the
    // members on nodes 1 … 3 run an allreduce on communicator C (ranks 3, 5, 7): it needs those
    // counters, so it completes only if the failed collective's sequences left their units.
    let over = [
        "nic.hosts=2",
        "nic.triggered.pulse_counters=1",
        "nic.triggered.collectives=2",
        "nic.triggered.pulse_timeout=\"20 us\"",
    ];
    let (mut m, b) = node0_held(&over, &[1, 3, 5, 7]);
    let c = Comm::create(&m, &[Rank(3), Rank(5), Rank(7)], &cfg()).unwrap();
    type Out = Vec<(usize, String, Option<Vec<f64>>)>;
    let out: Rc<RefCell<Out>> = Rc::new(RefCell::new(Vec::new()));
    let mut c = c.into_iter();
    for (i, mut bc) in b.into_iter().enumerate() {
        let o = out.clone();
        let mut cc = if i > 0 { c.next() } else { None };
        m.spawn(async move {
            bc.context().sleep(hpcnet_des::SimTime::from_us(2 + 3 * i as u64)).await;
            let e = bc
                .allreduce(&[2.0f64; 1024], ReduceOp::Sum, Algorithm::Offload)
                .await
                .expect_err("B cannot complete")
                .to_string();
            let next = match cc.as_mut() {
                Some(cc) => {
                    let x: Vec<f64> = (0..600).map(|j| f64::from(j as u32) + i as f64).collect();
                    Some(
                        cc.allreduce(&x, ReduceOp::Sum, Algorithm::Offload)
                            .await
                            .expect("C completes"),
                    )
                }
                None => None,
            };
            o.borrow_mut().push((i, e, next));
        });
    }
    let end = m.run();
    assert_eq!(end.stuck_tasks, 1, "only A's member waits");
    let mut out = out.borrow().clone();
    out.sort_by_key(|x| x.0);
    assert_eq!(out.len(), 4);
    assert!(out[0].1.contains("TrigTimeout"), "{:?}", out[0]);
    let want: Vec<f64> = (0..600).map(|j| 3.0 * f64::from(j as u32) + 6.0).collect();
    for (i, e, r) in &out[1..] {
        assert!(e.contains("failed at another member"), "{i}: {e}");
        assert_eq!(r.as_deref(), Some(want.as_slice()), "member {i} of C");
    }
    let w = m.world();
    let t = w.trig_counters();
    assert_eq!(t.timeouts, 1, "{t:?}");
    assert_eq!(t.completed, 3, "C's three members");
}

#[test]
fn packets_of_a_failed_collective_arriving_late_are_dropped_and_counted() {
    // Communicator B (ranks 1, 3, 5, 7 on nodes 0 … 3) broadcasts a long vector from its
    // member on node 1. Node 0 takes one collective at a time and A's member there holds it
    // forever, so B's member on node 0, which posts last, fails as soon as it is parsed,
    // while the root and the inner members keep streaming pulses towards it until the abort
    // reaches them: packets of B still on the wire reach node 0 after B failed there. They
    // must be recognised as packets of the failed collective and dropped — counted as
    // dropped, not as errors — and not kept in the early store.
    let over = ["nic.hosts=2", "nic.triggered.collectives=1"];
    let (mut m, b) = node0_held(&over, &[1, 3, 5, 7]);
    let out: Rc<RefCell<Vec<(usize, String)>>> = Rc::new(RefCell::new(Vec::new()));
    for (i, mut c) in b.into_iter().enumerate() {
        let o = out.clone();
        m.spawn(async move {
            let wait = if i == 0 { 10 } else { 2 };
            c.context().sleep(hpcnet_des::SimTime::from_us(wait)).await;
            let mut v = vec![1.5f64; 64 * 1024];
            let r = c.broadcast(&mut v, 1, Algorithm::Offload).await;
            let e = r.expect_err("B cannot complete").to_string();
            o.borrow_mut().push((i, e));
        });
    }
    let end = m.run();
    assert_eq!(end.stuck_tasks, 1, "only A's member waits");
    four_errors_one_cause(&out.borrow(), "nic.triggered.collectives");
    let t = m.world().trig_counters();
    // One error completion per member of B, nothing else counted as an error.
    assert_eq!(t.errors, 4, "{t:?}");
    // The only packet left waiting is A's, for its partner that never calls (in node 1's
    // early store); every other packet sent entered a unit or was dropped as a packet of the
    // failed collective.
    assert_eq!(t.waiting, 1, "{t:?}");
    assert_eq!(t.sent, t.arrived + t.dropped + 1, "{t:?}");
    // Packets that went into an early store (`early`, A's one included) account for part of
    // the drops only: the rest arrived after B had failed at their NIC.
    assert!(t.dropped > t.early - 1, "late packets of B were dropped: {t:?}");
}

#[test]
fn machines_without_the_unit_and_bad_settings_are_refused() {
    let m = Machine::new(world_of("sunway-prototype.toml", &[]));
    let e = Comm::create(&m, &[Rank(0), Rank(1)], &cfg()).err().expect("refused");
    assert!(e.to_string().contains("[nic.triggered]"), "{e}");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/tianhe-32.toml");
    let e = Scenario::load(&path, &["nic.triggered.units=0".to_string()])
        .and_then(|s| s.world().map(drop))
        .expect_err("refused")
        .to_string();
    assert!(e.contains("nic.triggered.units"), "{e}");
    // Without offload VPs the call is refused by the library.
    let mut m = Machine::new(world(&[]));
    let comms = Comm::create(&m, &[Rank(0), Rank(1)], &CommConfig::default()).unwrap();
    let out = Rc::new(RefCell::new(Vec::new()));
    for mut c in comms {
        let o = out.clone();
        m.spawn(async move {
            let r = c.allreduce(&[1i64], ReduceOp::Sum, Algorithm::Offload).await;
            o.borrow_mut().push(r.err().map(|e| e.to_string()));
        });
    }
    m.run();
    assert!(out
        .borrow()
        .iter()
        .all(|e| e.as_deref().is_some_and(|s| s.contains("CommConfig::offload"))));
}

#[test]
fn a_nic_opens_2048_virtual_ports_and_refuses_the_next() {
    // The key's VP field has 11 bits: VPs 0 … 2047 per NIC, shared by the NIC's processes.
    let mut w = world(&["nic.hosts=2"]);
    let (a, b) = (Rank(0), Rank(1));
    let node = w.placement().node_of(a);
    assert_eq!(w.placement().node_of(b), node);
    for i in 0..2048u32 {
        let rank = if i % 2 == 0 { a } else { b };
        assert_eq!(w.trig_open_vp(rank).expect("a free VP"), (node.0, i));
    }
    let e = w.trig_open_vp(b).expect_err("every VP is open");
    assert!(e.to_string().contains("all 2048 virtual ports"), "{e}");
    // Another NIC still has all of its own.
    let other = (0..w.ranks() as u32)
        .map(Rank)
        .find(|&r| w.placement().node_of(r) != node)
        .expect("a rank on another NIC");
    assert_eq!(w.trig_open_vp(other).expect("a free VP").1, 0);
}

#[test]
fn bad_posts_are_refused_with_the_reason() {
    use hpcnet_nic::triggered::{CollDescriptor, TrigPost, TrigPulse, TrigRun};
    use hpcnet_nic::{CollOp, CollType, PostError};
    let mut w = world_of("sunway-prototype.toml", &[]);
    assert_eq!(w.trig_open_vp(Rank(0)), Err(PostError::NoOffloadUnit));
    let mut w = world(&[]);
    let (n0, vp0) = w.trig_open_vp(Rank(0)).unwrap();
    let (n1, vp1) = w.trig_open_vp(Rank(1)).unwrap();
    assert_eq!((n0, vp0, n1, vp1), (0, 0, 1, 0));
    assert_eq!(w.trig_open_vp(Rank(0)).unwrap(), (0, 1));
    assert!(matches!(w.trig_open_vp(Rank(99)), Err(PostError::NoSuchRank(_))));
    let cq = w.create_cq(Rank(0));
    let other_cq = w.create_cq(Rank(1));
    // A one-step sequence: send 8 B of operands to member 1.
    let good = |elements: u64, bytes: usize| {
        let mut d = CollDescriptor::new(0, CollType::F64, CollOp::Sum).send(n1, vp1, 0);
        d.ch = true;
        d.ct = true;
        d.coll_end_flag = true;
        d.swap_local_data = true;
        d.payload = Payload::Operands(vec![0; bytes]);
        TrigPulse {
            serial: 0,
            elements,
            descriptors: vec![d],
        }
    };
    let post = |vp: u32, cq, pulses: Vec<TrigPulse>| TrigPost {
        vp,
        runs: vec![TrigRun::once(pulses)],
        cq,
        wr_id: 1,
    };
    let e = w.post_trig(Rank(0), post(5, cq, vec![good(1, 8)])).unwrap_err();
    assert_eq!(e, PostError::NoSuchVp { vp: 5, rank: Rank(0) });
    let e = w.post_trig(Rank(0), post(vp0, other_cq, vec![good(1, 8)])).unwrap_err();
    assert!(matches!(e, PostError::BadCq(_)));
    let e = w.post_trig(Rank(0), post(vp0, cq, vec![])).unwrap_err().to_string();
    assert!(e.contains("no pulses"), "{e}");
    let e = w
        .post_trig(Rank(0), post(vp0, cq, vec![good(129, 8)]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("129 elements") && e.contains("pulse_capacity"), "{e}");
    let e = w
        .post_trig(Rank(0), post(vp0, cq, vec![good(1, 2048)]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("2048 B") && e.contains("slot holds 1024 B"), "{e}");
    let mut open = good(1, 8);
    open.descriptors[0].ct = false;
    let e = w.post_trig(Rank(0), post(vp0, cq, vec![open])).unwrap_err().to_string();
    assert!(e.contains("pulse 0") && e.contains("without CT"), "{e}");
    let mut far = good(1, 8);
    far.descriptors[0].payload = Payload::Address {
        addr: 0xdead_0000,
        len: 8,
    };
    assert!(matches!(
        w.post_trig(Rank(0), post(vp0, cq, vec![far])),
        Err(PostError::Local(_))
    ));
    // A step that sends must set CP (a collective packet triggering nothing is refused).
    let mut silent = good(1, 8);
    silent.descriptors[0].cp = false;
    let e = w
        .post_trig(Rank(0), post(vp0, cq, vec![silent]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("pulse 0") && e.contains("DestID set with CP = 0"), "{e}");
    let mut nowhere = good(1, 8);
    nowhere.descriptors[0].dest_id = Some(32);
    let e = w
        .post_trig(Rank(0), post(vp0, cq, vec![nowhere]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("DestID 32 is not a node"), "{e}");
    // A good post is accepted; nothing else was.
    w.post_trig(Rank(0), post(vp0, cq, vec![good(1, 8)])).unwrap();
    assert_eq!(w.trig_counters().posts, 1);
}

#[test]
fn a_sequence_over_the_unit_limits_completes_with_an_error() {
    // One stream per collective: Rabenseifner on 4 members waits for two senders.
    let mut m = Machine::new(world(&["nic.triggered.streams=1"]));
    let comms = Comm::create(&m, &members(4, 0), &cfg()).unwrap();
    let out = Rc::new(RefCell::new(Vec::new()));
    for mut c in comms {
        let o = out.clone();
        m.spawn(async move {
            let r = c.allreduce(&[1i64; 8], ReduceOp::Sum, Algorithm::Offload).await;
            o.borrow_mut().push(r.err().map(|e| e.to_string()));
        });
    }
    m.run();
    let out = out.borrow();
    assert_eq!(out.len(), 4);
    assert!(
        out.iter().all(|e| e.as_deref().is_some_and(|s| s.contains("streams"))),
        "{out:?}"
    );
    let c = m.world().trig_counters();
    assert_eq!((c.errors, c.completed), (4, 0));
}

#[test]
fn pulses_beyond_256_job_ids_are_told_apart_by_their_serial() {
    // 40 000 f64 = 313 pulses: the broadcast's two trees use 626 serials, so JobIDs (serial
    // mod 256) repeat; the other members call 50 us after the root, so the root's early pulses
    // wait in their NICs' early stores.
    let p = 16;
    let count = 40_000;
    let root = 2;
    let ranks = members(p, 3);
    let data = Rc::new(input(Datatype::F64, root, count, 31));
    let mut m = Machine::new(world(&[]));
    let d = data.clone();
    let (outs, _) = run(&mut m, std::slice::from_ref(&ranks), move |_, mut c| {
        let d = d.clone();
        async move {
            let me = c.rank();
            if me != root {
                c.context().sleep(hpcnet_des::SimTime::from_us(50)).await;
            }
            let mut v: Vec<f64> = hpcnet_coll::from_bytes(&d);
            if me != root {
                v.iter_mut().for_each(|x| *x = 0.0);
            }
            c.broadcast(&mut v, root, Algorithm::Offload).await.expect("broadcast");
            to_bytes(&v)
        }
    });
    for g in &outs[0] {
        assert_eq!(g, &*data);
    }
    let c = m.world().trig_counters();
    assert_eq!(c.pulses, 2 * 313 * p as u64);
    assert!(c.early > 100, "{c:?}");
    assert_eq!((c.completed, c.errors, c.waiting), (p as u64, 0, 0));
}

/// The errors of a four-member collective that failed at member 0: member 0's names `cause`,
/// the three others say it failed at another member.
fn four_errors_one_cause(out: &[(usize, String)], cause: &str) {
    let mut out = out.to_vec();
    out.sort();
    assert_eq!(out.len(), 4, "{out:?}");
    assert!(out[0].1.contains(cause), "{out:?}");
    for (_, e) in &out[1..] {
        assert!(e.contains("failed at another member"), "{out:?}");
    }
}

/// A machine with `overrides` where communicator A (ranks 0 and 2, one per node 0 and 1) has
/// its member on node 0 in an offloaded allreduce its partner never calls, so that member
/// holds node 0's offload resources for the whole run; returns the machine and the members
/// of communicator B over `ranks`, created after A.
fn node0_held(overrides: &[&str], ranks: &[u32]) -> (Machine, Vec<Comm>) {
    let m = Machine::new(world(overrides));
    let a = Comm::create(&m, &[Rank(0), Rank(2)], &cfg()).unwrap();
    let ranks: Vec<Rank> = ranks.iter().map(|&r| Rank(r)).collect();
    let b = Comm::create(&m, &ranks, &cfg()).unwrap();
    let mut a0 = a.into_iter().next().unwrap();
    m.spawn(async move {
        let _ = a0.allreduce(&[1.0f64; 4], ReduceOp::Sum, Algorithm::Offload).await;
    });
    (m, b)
}

/// A one-step collective sequence of JobID `job` at a member: send 8 B of operands to
/// (`node`, `vp`) and complete (it waits for nothing).
fn one_step(job: u32, serial: u64, node: u32, vp: u32) -> hpcnet_nic::triggered::TrigPulse {
    use hpcnet_nic::triggered::{CollDescriptor, TrigPulse};
    use hpcnet_nic::{CollOp, CollType};
    let mut d = CollDescriptor::new(job, CollType::F64, CollOp::Sum).send(node, vp, 0);
    d.ch = true;
    d.ct = true;
    d.coll_end_flag = true;
    d.swap_local_data = true;
    d.payload = Payload::Operands(vec![0; 8]);
    TrigPulse {
        serial,
        elements: 1,
        descriptors: vec![d],
    }
}

/// Step `w` until nothing is left to do; every completion of `cq`.
fn drain(w: &mut World, cq: hpcnet_nic::CqId) -> Vec<hpcnet_nic::Cqe> {
    while w.step() {}
    std::iter::from_fn(|| w.poll_cq(cq)).collect()
}

#[test]
fn point_to_point_descriptors_write_the_remote_address_and_bad_ones_are_refused() {
    use hpcnet_nic::triggered::TrigP2p;
    use hpcnet_nic::{CqeKind, CqeStatus, PostError};
    let mut w = world_of("sunway-prototype.toml", &[]);
    let cq = w.create_cq(Rank(0));
    let any = TrigP2p {
        vp: 0,
        dest_id: 1,
        dest_vp: 0,
        remote_addr: 0,
        payload: Payload::Operands(vec![1]),
        cq,
        wr_id: 0,
    };
    assert_eq!(w.trig_post_p2p(Rank(0), any), Err(PostError::NoOffloadUnit));

    let mut w = world(&[]);
    let (n0, vp0) = w.trig_open_vp(Rank(0)).unwrap();
    let (n1, vp1) = w.trig_open_vp(Rank(1)).unwrap();
    let cq = w.create_cq(Rank(0));
    let other_cq = w.create_cq(Rank(1));
    let (src, _) = w.memory_mut(Rank(0)).register(8192);
    let (dst, _) = w.memory_mut(Rank(1)).register(8192);
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    w.memory_mut(Rank(0)).write(src, &data).unwrap();
    let rdma = TrigP2p {
        vp: vp0,
        dest_id: n1,
        dest_vp: vp1,
        remote_addr: dst + 100,
        payload: Payload::Address { addr: src, len: 5000 },
        cq,
        wr_id: 7,
    };
    let mp = TrigP2p {
        remote_addr: dst + 6000,
        payload: Payload::Operands(vec![0xab; 16]),
        wr_id: 8,
        ..rdma.clone()
    };
    // Bad posts: each refused with its reason, none queued.
    let bad = |w: &mut World, f: &dyn Fn(&mut TrigP2p)| {
        let mut d = rdma.clone();
        f(&mut d);
        w.trig_post_p2p(Rank(0), d).unwrap_err()
    };
    assert_eq!(bad(&mut w, &|d| d.vp = 9), PostError::NoSuchVp { vp: 9, rank: Rank(0) });
    assert_eq!(bad(&mut w, &|d| d.cq = other_cq), PostError::BadCq(other_cq));
    let e = bad(&mut w, &|d| d.dest_id = 32).to_string();
    assert_eq!(
        e,
        "point-to-point descriptor: DestID 32 is not a node of the machine (32 nodes)"
    );
    let e = bad(&mut w, &|d| d.dest_id = 2).to_string();
    assert_eq!(e, "point-to-point descriptor: DestVP 0 is not open at node 2");
    let e = bad(&mut w, &|d| d.dest_vp = 1).to_string();
    assert_eq!(e, "point-to-point descriptor: DestVP 1 is not open at node 1");
    assert!(matches!(
        bad(&mut w, &|d| d.payload = Payload::Address {
            addr: 0xdead_0000,
            len: 8
        }),
        PostError::Local(_)
    ));
    let e = bad(&mut w, &|d| d.payload = Payload::Operands(vec![0; 1025])).to_string();
    assert_eq!(
        e,
        "point-to-point descriptor: an MP descriptor carries at most 1024 B (one packet, packet.max_payload), got 1025 B"
    );
    let e = bad(&mut w, &|d| d.remote_addr = dst + 8192 - 4999).to_string();
    assert!(
        e.starts_with("point-to-point descriptor: remote range at node 1, VP 0:"),
        "{e}"
    );
    assert_eq!(w.trig_counters().p2p_posts, 0);

    // An RDMA descriptor (5 packets of at most 1 KiB) and an MP one behind it on the same VP.
    w.trig_post_p2p(Rank(0), rdma).unwrap();
    w.trig_post_p2p(Rank(0), mp).unwrap();
    let cqes = drain(&mut w, cq);
    assert_eq!(cqes.len(), 2, "{cqes:?}");
    for (c, (wr_id, bytes)) in cqes.iter().zip([(7, 5000), (8, 16)]) {
        assert_eq!(
            (c.kind, &c.status, c.wr_id, c.bytes, c.peer),
            (CqeKind::TrigP2p, &CqeStatus::Ok, wr_id, bytes, Rank(1))
        );
    }
    // In posting order: the MP descriptor leaves when the sender is done with the RDMA one.
    assert!(cqes[0].at <= cqes[1].at);
    let mem = w.memory(Rank(1));
    assert_eq!(&*mem.read(dst + 100, 5000).unwrap(), &data[..]);
    assert_eq!(&*mem.read(dst + 6000, 16).unwrap(), &[0xab; 16]);
    // Nothing outside the two ranges was written.
    assert_eq!(&*mem.read(dst, 100).unwrap(), &[0; 100]);
    assert_eq!(&*mem.read(dst + 5100, 900).unwrap(), &[0; 900]);
    assert_eq!(&*mem.read(dst + 6016, 8192 - 6016).unwrap(), &vec![0; 8192 - 6016][..]);
    let c = w.trig_counters();
    assert_eq!((c.p2p_posts, c.p2p_sent, c.p2p_delivered, c.p2p_bytes), (2, 2, 2, 5016));
    // They never entered an offload unit: no collective, no buffered or early packet.
    assert_eq!(
        (c.posts, c.arrived, c.stored, c.early, c.waiting, c.errors),
        (0, 0, 0, 0, 0, 0)
    );
    assert_eq!(c.packets, 6);
    let stats = w.statistics();
    let stat = |name: &str| stats.iter().find(|s| s.name == name).map(|s| s.value.clone());
    assert_eq!(
        stat("nic.trig.p2p_delivered"),
        Some(hpcnet_des::stats::StatValue::Counter { value: 2 })
    );
    assert_eq!(n0, 0);
}

#[test]
fn the_parser_prefers_heads_that_can_go_downstream_and_keeps_queue_order() {
    use hpcnet_des::SimTime;
    use hpcnet_nic::triggered::{TrigP2p, TrigPost, TrigRun};
    use hpcnet_nic::{CqeKind, CqeStatus};
    // One active collective at most; parsing a descriptor takes 200 ns (the DMA read of the
    // descriptor) + 1 us.
    let run = || {
        let mut w = world(&["nic.triggered.collectives=1", "nic.triggered.parse_time=\"1 us\""]);
        let vps: Vec<u32> = (0..3).map(|_| w.trig_open_vp(Rank(0)).unwrap().1).collect();
        let (n1, vp1) = w.trig_open_vp(Rank(1)).unwrap();
        let cq = w.create_cq(Rank(0));
        let (dst, _) = w.memory_mut(Rank(1)).register(64);
        let coll = |vp, wr_id, pulses| TrigPost {
            vp,
            runs: vec![TrigRun::once(pulses)],
            cq,
            wr_id,
        };
        let p2p = |vp, wr_id| TrigP2p {
            vp,
            dest_id: n1,
            dest_vp: vp1,
            remote_addr: dst + 8 * wr_id,
            payload: Payload::Operands(vec![wr_id as u8; 8]),
            cq,
            wr_id,
        };
        // A on VP 0 is parsed first and holds the one collective place; then VP 1 holds B
        // (3 pulses) and P1 behind it (4 descriptors), VP 2 holds P2 alone (1 descriptor).
        w.post_trig(Rank(0), coll(vps[0], 1, vec![one_step(0, 0, n1, vp1)]))
            .unwrap();
        let b = (0..3).map(|i| one_step(1 + i, u64::from(i), n1, vp1)).collect();
        w.post_trig(Rank(0), coll(vps[1], 2, b)).unwrap();
        w.trig_post_p2p(Rank(0), p2p(vps[1], 3)).unwrap();
        w.trig_post_p2p(Rank(0), p2p(vps[2], 4)).unwrap();
        let cqes = drain(&mut w, cq);
        let at = |wr_id: u64| {
            let c = cqes.iter().find(|c| c.wr_id == wr_id).expect("completed");
            assert_eq!(c.status, CqeStatus::Ok, "{c:?}");
            (c.kind, c.at)
        };
        (at(1), at(2), at(3), at(4))
    };
    let (a, b, p1, p2) = run();
    let parse = SimTime::from_ns(1200);
    let doorbell = SimTime::from_ns(100);
    // Occupancy alone would take VP 1 (B, 4 descriptors) after A; B's head cannot go
    // downstream while A is active, so P2 goes first. P1 waits behind B in its queue even
    // though the point-to-point sender is idle: A, P2, B, P1.
    assert_eq!(
        (a.0, b.0, p1.0, p2.0),
        (CqeKind::Trig, CqeKind::Trig, CqeKind::TrigP2p, CqeKind::TrigP2p)
    );
    assert!(a.1 < doorbell + parse + parse, "A completes while P2 is parsed: {a:?}");
    assert_eq!(p2.1, doorbell + parse + parse);
    assert!(b.1 > doorbell + parse * 3, "B is parsed third: {b:?}");
    assert_eq!(p1.1, doorbell + parse * 4);
    // Same run, same times.
    assert_eq!(run(), (a, b, p1, p2));
}

/// 8 members' offloaded allreduce of 300 f64 (three pulses), with or without each member's
/// NIC also sending 4 RDMA descriptors of 16 KiB to the next member on a VP of its own
/// (posted first, so they reach the parser first). Per member: result and completion time;
/// the point-to-point completion times; whether every point-to-point byte arrived.
#[allow(clippy::type_complexity)]
fn allreduce_beside_p2p(with_p2p: bool) -> (Vec<Vec<u8>>, Vec<hpcnet_des::SimTime>, Vec<hpcnet_des::SimTime>, bool) {
    use hpcnet_nic::triggered::TrigP2p;
    use hpcnet_nic::CqeStatus;
    const K: u64 = 4;
    const LEN: u64 = 16 * 1024;
    let p = 8;
    let dt = Datatype::F64;
    let ranks = members(p, 5);
    let inputs: Vec<Vec<u8>> = (0..p).map(|i| input(dt, i, 300, 77)).collect();
    let mut m = Machine::new(world(&[]));
    let comms = Comm::create(&m, &ranks, &cfg()).unwrap();
    let p2p_times = Rc::new(RefCell::new(Vec::new()));
    let mut rx = Vec::new();
    let mut sent = Vec::new();
    if with_p2p {
        let vps: Vec<(u32, u32)> = ranks.iter().map(|&r| m.trig_open_vp(r).unwrap()).collect();
        rx = ranks.iter().map(|&r| m.context(r).reg_mr(K * LEN)).collect();
        for (i, &r) in ranks.iter().enumerate() {
            let ctx = m.context(r);
            let tx = ctx.reg_mr(K * LEN);
            let bytes: Vec<u8> = (0..K * LEN).map(|j| (j * 31 + i as u64 * 17) as u8).collect();
            ctx.write_local(&tx, 0, &bytes).unwrap();
            sent.push(bytes);
            let to = (i + 1) % p;
            let (dest_id, dest_vp) = vps[to];
            let remote = rx[to].addr;
            let vp = vps[i].1;
            let times = p2p_times.clone();
            m.spawn(async move {
                let cq = ctx.create_cq();
                for k in 0..K {
                    ctx.post_trig_p2p(TrigP2p {
                        vp,
                        dest_id,
                        dest_vp,
                        remote_addr: remote + k * LEN,
                        payload: Payload::Address {
                            addr: tx.addr + k * LEN,
                            len: LEN,
                        },
                        cq: cq.id(),
                        wr_id: k,
                    })
                    .expect("point-to-point post");
                }
                for k in 0..K {
                    let c = cq.next().await;
                    assert_eq!((c.status, c.wr_id, c.bytes), (CqeStatus::Ok, k, LEN));
                    times.borrow_mut().push(c.at);
                }
            });
        }
    }
    let out: Rc<RefCell<Vec<Option<(Vec<u8>, hpcnet_des::SimTime)>>>> = Rc::new(RefCell::new(vec![None; p]));
    for (i, mut c) in comms.into_iter().enumerate() {
        let (o, x) = (out.clone(), inputs[i].clone());
        m.spawn(async move {
            let r = c
                .allreduce_bytes(dt, ReduceOp::Sum, x, Algorithm::Offload)
                .await
                .expect("offloaded allreduce");
            let t = c.context().now();
            o.borrow_mut()[i] = Some((r, t));
        });
    }
    let end = m.run();
    assert_eq!((end.stuck_tasks, end.deadlock), (0, false));
    let delivered = (0..sent.len()).all(|i| {
        let to = (i + 1) % p;
        let got = m
            .world()
            .memory(ranks[to])
            .read(rx[to].addr, K * LEN)
            .unwrap()
            .into_owned();
        got == sent[i]
    });
    let c = m.world().trig_counters();
    assert_eq!((c.completed, c.errors), (p as u64, 0));
    let want = if with_p2p { p as u64 * K } else { 0 };
    assert_eq!((c.p2p_sent, c.p2p_delivered, c.p2p_bytes), (want, want, want * LEN));
    let (res, times): (Vec<_>, Vec<_>) = std::mem::take(&mut *out.borrow_mut())
        .into_iter()
        .map(|x| x.expect("finished"))
        .unzip();
    let p2p = p2p_times.borrow().clone();
    (res, times, p2p, delivered)
}

#[test]
fn point_to_point_traffic_beside_an_allreduce_changes_its_time_not_its_result() {
    let dt = Datatype::F64;
    let inputs: Vec<Vec<u8>> = (0..8).map(|i| input(dt, i, 300, 77)).collect();
    let want = ideal(Kind::Allreduce, &inputs, dt, ReduceOp::Sum, PULSE, 3).swap_remove(0);
    let (alone, t_alone, _, _) = allreduce_beside_p2p(false);
    let (shared, t_shared, p2p, delivered) = allreduce_beside_p2p(true);
    for r in alone.iter().chain(&shared) {
        assert_eq!(r, &want, "bit-identical to the reference");
    }
    assert!(delivered, "every point-to-point byte at its remote address");
    assert_eq!(p2p.len(), 32);
    let end = |t: &[hpcnet_des::SimTime]| *t.iter().max().unwrap();
    assert!(
        end(&t_shared) > end(&t_alone),
        "the parser and the fabric are shared: {:?} vs {:?}",
        end(&t_shared),
        end(&t_alone)
    );
    // Determinism: the same runs again give the same times.
    assert_eq!(allreduce_beside_p2p(true).1, t_shared);
    assert_eq!(allreduce_beside_p2p(true).2, p2p);
    assert_eq!(allreduce_beside_p2p(false).1, t_alone);
}
