//! Integration tests of the rank-program executor: many tasks, exact simulated times, bounded
//! polling, completions exchanged between tasks and from event handlers, determinism.

use hpcnet_des::exec::{completion, CompletionSender, RunSummary, Signal, Sim, SimHandle};
use hpcnet_des::{RngStreams, SimTime};
use rand::Rng;
use std::cell::RefCell;
use std::rc::Rc;

const NS: SimTime = SimTime::from_ns(1);

/// Task i sleeps i ns, then 2 ns ten times (ending at i + 20 ns), then sends its end time to its
/// right neighbour through a `Completion` and awaits its left neighbour's.
#[test]
fn ten_thousand_sleeping_tasks_exchange_completions() {
    const N: usize = 10_000;
    let mut sim = Sim::new();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..N).map(|_| completion::<SimTime>()).unzip();
    // Task i sends on channel i+1 (to its right) and receives on channel i (from its left).
    let mut senders: Vec<Option<CompletionSender<SimTime>>> = senders.into_iter().map(Some).collect();
    senders.rotate_left(1);
    let finish = Rc::new(RefCell::new(vec![None; N]));
    for (i, rx) in receivers.into_iter().enumerate() {
        let h = sim.handle();
        let tx = senders[i].take().unwrap();
        let finish = finish.clone();
        sim.spawn(async move {
            h.sleep(NS * i as u64).await;
            for _ in 0..10 {
                h.sleep(NS * 2).await;
            }
            let end = h.now();
            tx.send(end);
            let left_end = rx.await.expect("left neighbour sends");
            finish.borrow_mut()[i] = Some((end, left_end, h.now()));
        });
    }
    let s = sim.run();
    let finish = finish.borrow();
    for (i, f) in finish.iter().enumerate() {
        let (end, left_end, done) = f.expect("every task finishes");
        assert_eq!(end, NS * (i as u64 + 20), "task {i}");
        let left = (i + N - 1) % N;
        assert_eq!(left_end, NS * (left as u64 + 20), "task {i}");
        assert_eq!(done, end.max(left_end), "task {i}");
    }
    let n = N as u64;
    // 11 sleeps per task, one event each; 12 polls per task (first poll + one per sleep), plus
    // one for task 0, the only one whose left neighbour had not finished yet. No busy polling.
    assert_eq!(
        s,
        RunSummary {
            end_time: NS * (n - 1 + 20),
            events: 11 * n,
            polls: 12 * n + 1,
            live_tasks: 0
        }
    );
}

#[test]
fn hundred_thousand_trivial_tasks() {
    const N: u64 = 100_000;
    let mut sim = Sim::new();
    let count = Rc::new(RefCell::new(0u64));
    for _ in 0..N {
        let c = count.clone();
        sim.spawn(async move { *c.borrow_mut() += 1 });
    }
    assert_eq!(sim.executor().live_tasks(), N as usize);
    let s = sim.run();
    assert_eq!(*count.borrow(), N);
    assert_eq!(
        s,
        RunSummary {
            end_time: SimTime::ZERO,
            events: 0,
            polls: N,
            live_tasks: 0
        }
    );

    // And 100k tasks that each sleep once: slots are reused, every task polled twice.
    for i in 0..N {
        let h = sim.handle();
        sim.spawn(async move { h.sleep(SimTime::from_ps(i % 7)).await });
    }
    let s = sim.run();
    assert_eq!(
        (s.end_time, s.events, s.polls, s.live_tasks),
        (SimTime::from_ps(6), N, 3 * N, 0)
    );
}

/// A trace of (time, rank, step) from ranks sleeping random amounts and completing operations
/// through a fake NIC (an event handler that fills a `Completion` after a random latency).
fn random_workload(seed: u64, ranks: u64) -> (Vec<(SimTime, u64, u32)>, RunSummary) {
    let mut sim = Sim::new();
    let streams = RngStreams::new(seed);
    let trace = Rc::new(RefCell::new(Vec::new()));
    for r in 0..ranks {
        let h = sim.handle();
        let trace = trace.clone();
        let mut rng = streams.stream("rank", r);
        sim.spawn(async move {
            for step in 0..20u32 {
                if rng.gen_bool(0.5) {
                    h.sleep(SimTime::from_ps(rng.gen_range(0..5_000))).await;
                } else {
                    let latency = SimTime::from_ps(rng.gen_range(0..5_000));
                    let issued = h.now();
                    let got = nic_op(&h, latency, step).await;
                    assert_eq!((got, h.now()), (step, issued + latency));
                }
                trace.borrow_mut().push((h.now(), r, step));
            }
        });
    }
    let s = sim.run();
    let trace = trace.take();
    (trace, s)
}

/// An "operation" completed by an event handler `latency` after it is issued.
async fn nic_op(h: &SimHandle, latency: SimTime, value: u32) -> u32 {
    let (tx, rx) = completion();
    h.call_in(latency, move || tx.send(value));
    rx.await.expect("the handler always completes")
}

#[test]
fn runs_are_deterministic() {
    let (a, sa) = random_workload(7, 500);
    let (b, sb) = random_workload(7, 500);
    assert_eq!(a.len(), 500 * 20);
    assert_eq!(a, b);
    assert_eq!(sa, sb);
    assert!(a.windows(2).all(|w| w[0].0 <= w[1].0), "trace is in time order");
    // One event and at most one wake-up per step: no busy polling.
    assert_eq!(sa.events, 500 * 20);
    assert_eq!(sa.polls, 500 * 21);
    let (c, _) = random_workload(8, 500);
    assert_ne!(a, c, "a different seed gives a different run");
}

#[test]
fn equal_time_wakeups_are_fifo() {
    let mut sim = Sim::new();
    let order = Rc::new(RefCell::new(Vec::new()));
    // Spawned in reverse; all wake at 5 ns in the order their sleeps were registered.
    for i in (0..100u32).rev() {
        let (h, order) = (sim.handle(), order.clone());
        sim.spawn(async move {
            h.sleep_until(NS * 5).await;
            order.borrow_mut().push(i);
        });
    }
    sim.run();
    assert_eq!(*order.borrow(), (0..100).rev().collect::<Vec<_>>());
}

#[test]
fn signal_barrier() {
    const N: u64 = 1_000;
    let mut sim = Sim::new();
    let barrier = Signal::new();
    let left = Rc::new(RefCell::new(Vec::new()));
    for i in 0..N {
        let (h, barrier, left) = (sim.handle(), barrier.clone(), left.clone());
        sim.spawn(async move {
            h.sleep(NS * i).await;
            barrier.add(1);
            barrier.wait_for(N).await;
            left.borrow_mut().push(h.now());
        });
    }
    let s = sim.run();
    assert!(left.borrow().iter().all(|t| *t == NS * (N - 1)));
    assert_eq!(left.borrow().len(), N as usize);
    // First poll, wake after the sleep, wake at the barrier (except the last arrival).
    assert_eq!(s.polls, 3 * N - 1);
}

#[test]
fn deadlock_is_reported_as_live_tasks() {
    let mut sim = Sim::new();
    let (tx, rx) = completion::<()>();
    let h = sim.handle();
    sim.spawn(async move {
        h.sleep(NS).await;
        let _ = rx.await;
    });
    let s = sim.run();
    assert_eq!((s.end_time, s.live_tasks), (NS, 1));
    drop(tx);
    // Dropping the sender cancels the wait; the task finishes without any event.
    let s = sim.run();
    assert_eq!((s.end_time, s.live_tasks), (NS, 0));
}
