//! Integration tests of the rank-program executor under the kernel's run driver: many tasks,
//! exact simulated times, bounded polling, operations completed by event handlers, determinism.
//!
//! The world here is the smallest one that wakes tasks from events: an event queue of timers
//! and "operation done" events, run by [`Driver`] exactly as the NIC world is (woken tasks run
//! before the next event).

use hpcnet_des::driver::{Driver, Model, Step};
use hpcnet_des::{EventQueue, Executor, RngStreams, SimTime};
use rand::Rng;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

const NS: SimTime = SimTime::from_ns(1);

/// An operation's result slot: filled by an event, awaited by a task.
type Slot = Rc<(Cell<Option<u32>>, RefCell<Option<Waker>>)>;

enum Ev {
    Wake(Waker),
    Done(Slot, u32),
}

/// Timers and operations on one queue.
#[derive(Clone)]
struct World(Rc<RefCell<EventQueue<Ev>>>);

impl World {
    fn now(&self) -> SimTime {
        self.0.borrow().now()
    }
    fn sleep(&self, d: SimTime) -> Sleep {
        Sleep {
            world: self.clone(),
            until: self.now() + d,
            armed: false,
        }
    }
    /// An operation completed by an event `latency` after it is issued, with `value`.
    fn op(&self, latency: SimTime, value: u32) -> Op {
        let slot: Slot = Rc::new((Cell::new(None), RefCell::new(None)));
        let mut q = self.0.borrow_mut();
        let t = q.now() + latency;
        q.schedule(t, Ev::Done(slot.clone(), value));
        Op(slot)
    }
}

struct Sleep {
    world: World,
    until: SimTime,
    armed: bool,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.world.now() >= self.until {
            return Poll::Ready(());
        }
        if !self.armed {
            self.armed = true;
            let t = self.until;
            self.world.0.borrow_mut().schedule(t, Ev::Wake(cx.waker().clone()));
        }
        Poll::Pending
    }
}

struct Op(Slot);

impl Future for Op {
    type Output = u32;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
        match self.0 .0.get() {
            Some(v) => Poll::Ready(v),
            None => {
                *self.0 .1.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// The world and its executor as the driver runs them.
struct Running<'a> {
    world: &'a World,
    exec: &'a mut Executor,
}

impl Model for Running<'_> {
    fn now(&self) -> SimTime {
        self.world.now()
    }
    fn step_before(&mut self, limit: SimTime) -> Step {
        if self.exec.has_ready() {
            self.exec.run_ready();
            return Step::Handled;
        }
        let ev = self.world.0.borrow_mut().pop_before(limit);
        match ev {
            Some((_, Ev::Wake(w))) => w.wake(),
            Some((_, Ev::Done(slot, v))) => {
                slot.0.set(Some(v));
                if let Some(w) = slot.1.borrow_mut().take() {
                    w.wake();
                }
            }
            None if self.world.0.borrow().is_empty() => return Step::Empty,
            None => return Step::Limit,
        }
        Step::Handled
    }
}

/// (end time, events, polls, live tasks) of a run.
type Summary = (SimTime, u64, u64, usize);

fn run(world: &World, exec: &mut Executor, end: SimTime) -> Summary {
    Driver::new().end(end).run(&mut Running { world, exec });
    (
        world.now(),
        world.0.borrow().events_processed(),
        exec.polls(),
        exec.live_tasks(),
    )
}

fn new_world() -> (World, Executor) {
    (World(Rc::new(RefCell::new(EventQueue::new()))), Executor::new())
}

/// Task i sleeps i ns, then 2 ns ten times (ending at i + 20 ns), then completes an operation
/// of i ns.
#[test]
fn ten_thousand_sleeping_tasks() {
    const N: u64 = 10_000;
    let (w, mut ex) = new_world();
    let finish = Rc::new(RefCell::new(vec![None; N as usize]));
    for i in 0..N {
        let (w2, finish) = (w.clone(), finish.clone());
        ex.spawn(async move {
            w2.sleep(NS * i).await;
            for _ in 0..10 {
                w2.sleep(NS * 2).await;
            }
            let end = w2.now();
            let v = w2.op(NS * i, i as u32).await;
            finish.borrow_mut()[i as usize] = Some((end, v, w2.now()));
        });
    }
    let s = run(&w, &mut ex, SimTime::MAX);
    for (i, f) in finish.borrow().iter().enumerate() {
        let (end, v, done) = f.expect("every task finishes");
        let i = i as u64;
        assert_eq!((end, v as u64, done), (NS * (i + 20), i, NS * (2 * i + 20)), "task {i}");
    }
    // 12 events per task (11 sleeps, 1 operation; task 0's first sleep of 0 ns needs none);
    // 13 polls per task (first poll + one per event), minus task 0's zero sleep. No busy polling.
    assert_eq!(s, (NS * (2 * (N - 1) + 20), 12 * N - 1, 13 * N - 1, 0));
}

#[test]
fn hundred_thousand_trivial_tasks() {
    const N: u64 = 100_000;
    let (w, mut ex) = new_world();
    let count = Rc::new(Cell::new(0u64));
    for _ in 0..N {
        let c = count.clone();
        ex.spawn(async move { c.set(c.get() + 1) });
    }
    assert_eq!(ex.live_tasks(), N as usize);
    assert_eq!(run(&w, &mut ex, SimTime::MAX), (SimTime::ZERO, 0, N, 0));
    assert_eq!(count.get(), N);

    // And 100k tasks that each sleep 1–6 ps once: slots are reused, every task polled twice.
    for i in 0..N {
        let w2 = w.clone();
        ex.spawn(async move { w2.sleep(SimTime::from_ps(1 + i % 6)).await });
    }
    assert_eq!(run(&w, &mut ex, SimTime::MAX), (SimTime::from_ps(6), N, 3 * N, 0));
}

/// A trace of (time, rank, step) from ranks sleeping random amounts and completing operations
/// of random latency.
fn random_workload(seed: u64, ranks: u64) -> (Vec<(SimTime, u64, u32)>, Summary) {
    let (w, mut ex) = new_world();
    let streams = RngStreams::new(seed);
    let trace = Rc::new(RefCell::new(Vec::new()));
    for r in 0..ranks {
        let (w2, trace) = (w.clone(), trace.clone());
        let mut rng = streams.stream("rank", r);
        ex.spawn(async move {
            for step in 0..20u32 {
                if rng.gen_bool(0.5) {
                    w2.sleep(SimTime::from_ps(rng.gen_range(1..5_000))).await;
                } else {
                    let latency = SimTime::from_ps(rng.gen_range(0..5_000));
                    let issued = w2.now();
                    let got = w2.op(latency, step).await;
                    assert_eq!((got, w2.now()), (step, issued + latency));
                }
                trace.borrow_mut().push((w2.now(), r, step));
            }
        });
    }
    let s = run(&w, &mut ex, SimTime::MAX);
    let t = trace.take();
    (t, s)
}

#[test]
fn runs_are_deterministic() {
    let (a, sa) = random_workload(7, 500);
    let (b, sb) = random_workload(7, 500);
    assert_eq!(a.len(), 500 * 20);
    assert_eq!(a, b);
    assert_eq!(sa, sb);
    assert!(a.windows(2).all(|w| w[0].0 <= w[1].0), "trace is in time order");
    // One event and one wake-up per step: no busy polling.
    assert_eq!((sa.1, sa.2), (500 * 20, 500 * 21));
    let (c, _) = random_workload(8, 500);
    assert_ne!(a, c, "a different seed gives a different run");
}

#[test]
fn equal_time_wakeups_are_fifo() {
    let (w, mut ex) = new_world();
    let order = Rc::new(RefCell::new(Vec::new()));
    // Spawned in reverse; all wake at 5 ns in the order their sleeps were registered.
    for i in (0..100u32).rev() {
        let (w2, order) = (w.clone(), order.clone());
        ex.spawn(async move {
            w2.sleep(NS * 5).await;
            order.borrow_mut().push(i);
        });
    }
    run(&w, &mut ex, SimTime::MAX);
    assert_eq!(*order.borrow(), (0..100).rev().collect::<Vec<_>>());
}

#[test]
fn a_run_stops_at_its_end_and_resumes() {
    let (w, mut ex) = new_world();
    let w2 = w.clone();
    ex.spawn(async move {
        for _ in 0..10 {
            w2.sleep(NS * 10).await;
        }
    });
    // Events at 10, 20, 30 ns are before the end; the one at 40 ns is not handled.
    let s = run(&w, &mut ex, NS * 35);
    assert_eq!((s.0, s.1, s.3), (NS * 30, 3, 1));
    let s = run(&w, &mut ex, SimTime::MAX);
    assert_eq!((s.0, s.1, s.3), (NS * 100, 10, 0));
}

#[test]
fn a_task_waiting_for_nothing_is_reported_live() {
    let (w, mut ex) = new_world();
    let w2 = w.clone();
    ex.spawn(async move {
        w2.sleep(NS).await;
        std::future::pending::<()>().await;
    });
    let s = run(&w, &mut ex, SimTime::MAX);
    assert_eq!((s.0, s.3), (NS, 1));
}
