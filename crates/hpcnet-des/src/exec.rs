//! Rank-program executor: async tasks woken by simulator events.
//!
//! # Model
//!
//! Every simulated process ("rank") is an `async` block polled by an [`Executor`] that the
//! simulation owns; there are no globals, thread-locals or singletons, so any number of
//! simulations can run side by side (parallel sweeps, tests). A task runs until it awaits
//! something that is not ready yet — a timer, an operation completed by a NIC model, a counter —
//! and is polled again only when that thing wakes it. Simulated time never moves while tasks run:
//! the world alternates between "poll every ready task" ([`Executor::run_ready`]) and "pop the
//! next event and let its handler wake whoever waits for it". A rank that computes for 5 µs
//! therefore writes `h.sleep(SimTime::from_us(5)).await`; it never spins.
//!
//! Polling is deterministic: ready tasks are polled first-woken, first-polled, and a task woken
//! several times before it is polled is polled once. Together with the event queue's
//! (time, sequence) order this makes a run reproducible poll by poll.
//!
//! # Why the waker uses `Arc` and a `Mutex`
//!
//! Everything here is single-threaded (`Rc`, `RefCell`, tasks are not `Send`), but
//! [`std::task::Waker`] must be `Send + Sync`, and the safe way to build one is
//! [`std::task::Wake`] on an `Arc`. So each task has one `Arc<TaskWaker>` (allocated once, at
//! spawn) holding its id, an atomic "already queued" flag that deduplicates wake-ups, and an
//! `Arc` to the executor's ready list behind a `Mutex`. The lock is never contended; it costs a
//! few nanoseconds per wake-up, and the executor drains the list in batches under one lock.
//!
//! # Pieces
//!
//! - [`Executor`] / [`Spawner`]: the task slab, the ready list, spawning from inside tasks;
//! - [`Sim`] / [`SimHandle`]: a minimal world of timers and callbacks on top of
//!   [`EventQueue`], used by tests and examples and as a template for the fabric/NIC worlds;
//! - [`completion`] ([`Completion`] / [`CompletionSender`]): a single-threaded one-shot channel
//!   with which an event handler completes an operation a task awaits;
//! - [`Signal`]: a counter tasks can wait on until it reaches a target (completion counts,
//!   arrivals at a barrier).

use crate::queue::EventQueue;
use crate::units::SimTime;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

// ---------------------------------------------------------------------------------------------
// Executor

/// Identifies a task of one [`Executor`]. Slots are reused after a task finishes; the
/// generation keeps a stale id (or a stale waker) from reaching the slot's next occupant.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    index: u32,
    generation: u32,
}

impl TaskId {
    /// The task's slot index (dense, reused after the task finishes).
    pub fn index(self) -> usize {
        self.index as usize
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task {}.{}", self.index, self.generation)
    }
}

/// Ids of woken tasks, in wake order. Shared with every waker, hence `Arc<Mutex<..>>`.
#[derive(Default)]
struct ReadyList {
    ids: Mutex<VecDeque<TaskId>>,
    /// Whether `ids` is non-empty (written under the lock): lets [`Executor::run_ready`] return
    /// without locking when nothing was woken, the common case between two events.
    pending: AtomicBool,
}

impl ReadyList {
    fn push(&self, id: TaskId) {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        ids.push_back(id);
        self.pending.store(true, Ordering::Release);
    }
    /// Move every queued id into `out` (which must be empty); keeps both buffers' capacity.
    fn swap_into(&self, out: &mut VecDeque<TaskId>) {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::swap(&mut *ids, out);
        self.pending.store(false, Ordering::Release);
    }
    fn is_empty(&self) -> bool {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner).is_empty()
    }
    #[inline]
    fn has_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }
}

/// The waker of one task: allocated once at spawn, shared by every `Waker` clone of the task.
struct TaskWaker {
    id: TaskId,
    /// Set while the id sits in the ready list, so a second wake-up before the poll is a no-op.
    queued: AtomicBool,
    ready: Arc<ReadyList>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.ready.push(self.id);
        }
    }
}

struct Task {
    future: LocalFuture,
    waker: Waker,
    state: Arc<TaskWaker>,
}

struct Slot {
    generation: u32,
    /// `None` when the slot is free, or while its task is being polled (taken out so the slab is
    /// not borrowed during the poll and the task may spawn others).
    task: Option<Task>,
}

#[derive(Default)]
struct Slab {
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    /// Set when the executor is dropped: later spawns drop their future at once.
    closed: bool,
}

impl Slab {
    fn insert(&mut self, future: LocalFuture, ready: &Arc<ReadyList>) -> TaskId {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(self.slots.len()).expect("more than 2^32 task slots");
                self.slots.push(Slot {
                    generation: 0,
                    task: None,
                });
                i
            }
        };
        let slot = &mut self.slots[index as usize];
        let id = TaskId {
            index,
            generation: slot.generation,
        };
        // A new task is ready at once; its waker starts "queued" to match.
        let state = Arc::new(TaskWaker {
            id,
            queued: AtomicBool::new(true),
            ready: ready.clone(),
        });
        let waker = Waker::from(state.clone());
        slot.task = Some(Task { future, waker, state });
        self.live += 1;
        ready.push(id);
        id
    }

    fn take(&mut self, id: TaskId) -> Option<Task> {
        let slot = self.slots.get_mut(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        slot.task.take()
    }

    fn put_back(&mut self, id: TaskId, task: Task) {
        self.slots[id.index as usize].task = Some(task);
    }

    fn release(&mut self, id: TaskId) {
        let slot = &mut self.slots[id.index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.index);
        self.live -= 1;
    }
}

/// A single-threaded executor of `!Send` futures, polled in wake order.
///
/// Per task it costs one boxed future and one small `Arc` (the waker); polling is a slab lookup.
/// The executor never blocks or sleeps: [`run_ready`](Executor::run_ready) polls what is ready and
/// returns, and the surrounding simulation decides what happens next.
pub struct Executor {
    slab: Rc<RefCell<Slab>>,
    ready: Arc<ReadyList>,
    /// Batch being polled; swapped with the ready list so it is locked once per batch.
    batch: VecDeque<TaskId>,
    polls: u64,
}

impl Default for Executor {
    fn default() -> Self {
        Self::new()
    }
}

impl Executor {
    pub fn new() -> Self {
        Executor {
            slab: Rc::default(),
            ready: Arc::default(),
            batch: VecDeque::new(),
            polls: 0,
        }
    }

    /// Add a task; it is polled by the next [`run_ready`](Executor::run_ready).
    pub fn spawn(&self, future: impl Future<Output = ()> + 'static) -> TaskId {
        self.slab.borrow_mut().insert(Box::pin(future), &self.ready)
    }

    /// A cloneable handle that spawns onto this executor, also from inside running tasks.
    pub fn spawner(&self) -> Spawner {
        Spawner {
            slab: self.slab.clone(),
            ready: self.ready.clone(),
        }
    }

    /// Poll ready tasks, first woken first, until none is ready; return the number of polls.
    /// Tasks woken (or spawned) during this call are polled in this call too.
    #[inline]
    pub fn run_ready(&mut self) -> usize {
        if !self.ready.has_pending() {
            return 0;
        }
        self.poll_ready()
    }

    #[inline(never)]
    fn poll_ready(&mut self) -> usize {
        let mut polls = 0;
        loop {
            debug_assert!(self.batch.is_empty());
            self.ready.swap_into(&mut self.batch);
            if self.batch.is_empty() {
                break;
            }
            while let Some(id) = self.batch.pop_front() {
                // A stale id (finished task, reused slot) finds nothing and is skipped.
                let Some(mut task) = self.slab.borrow_mut().take(id) else {
                    continue;
                };
                task.state.queued.store(false, Ordering::Release);
                polls += 1;
                let mut cx = Context::from_waker(&task.waker);
                let done = task.future.as_mut().poll(&mut cx).is_ready();
                if done {
                    // Release the slot before dropping the future: its drop may spawn.
                    self.slab.borrow_mut().release(id);
                    drop(task);
                } else {
                    self.slab.borrow_mut().put_back(id, task);
                }
            }
        }
        self.polls += polls as u64;
        polls
    }

    /// Tasks spawned and not yet finished (ready or waiting).
    pub fn live_tasks(&self) -> usize {
        self.slab.borrow().live
    }

    /// Whether `id` names a task that has not finished.
    pub fn is_live(&self, id: TaskId) -> bool {
        // Finishing a task bumps its slot's generation, so a matching generation means live.
        let slab = self.slab.borrow();
        slab.slots
            .get(id.index as usize)
            .is_some_and(|s| s.generation == id.generation)
    }

    /// True when a task has been woken (or spawned) and awaits [`run_ready`](Executor::run_ready);
    /// cheaper than [`is_idle`](Executor::is_idle) (no lock).
    #[inline]
    pub fn has_ready(&self) -> bool {
        self.ready.has_pending()
    }

    /// True when no task is ready to be polled (tasks may still be waiting for events).
    pub fn is_idle(&self) -> bool {
        self.ready.is_empty()
    }

    /// Total polls since creation.
    pub fn polls(&self) -> u64 {
        self.polls
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        // Tasks usually hold handles that hold a `Spawner`, i.e. the slab: drop them explicitly to
        // break that cycle, outside the borrow since their drop may touch the slab.
        let slots = {
            let mut slab = self.slab.borrow_mut();
            slab.closed = true;
            slab.live = 0;
            slab.free.clear();
            std::mem::take(&mut slab.slots)
        };
        drop(slots);
    }
}

/// Spawns tasks onto an [`Executor`]; cheap to clone, usable from inside tasks.
#[derive(Clone)]
pub struct Spawner {
    slab: Rc<RefCell<Slab>>,
    ready: Arc<ReadyList>,
}

impl Spawner {
    /// Add a task to the executor. After the executor is dropped the future is dropped unpolled
    /// and the returned id never names a live task.
    pub fn spawn(&self, future: impl Future<Output = ()> + 'static) -> TaskId {
        let mut slab = self.slab.borrow_mut();
        if slab.closed {
            return TaskId {
                index: u32::MAX,
                generation: u32::MAX,
            };
        }
        slab.insert(Box::pin(future), &self.ready)
    }
}

// ---------------------------------------------------------------------------------------------
// Sim: a minimal timer world

enum TimerEvent {
    Wake(Waker),
    Call(Box<dyn FnOnce()>),
}

struct Shared {
    queue: RefCell<EventQueue<TimerEvent>>,
    spawner: Spawner,
}

/// What a call to [`Sim::run`] or [`Sim::run_until`] reached. Counts are totals since the
/// simulation was created.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RunSummary {
    /// Simulated time when the run stopped.
    pub end_time: SimTime,
    /// Events processed.
    pub events: u64,
    /// Task polls.
    pub polls: u64,
    /// Tasks not finished. After [`Sim::run`] these are blocked forever (a deadlock, or waiting
    /// for something no event will deliver).
    pub live_tasks: usize,
}

/// A minimal simulated-time world: an [`EventQueue`] of timers and callbacks plus an
/// [`Executor`]. Tasks reach it through a [`SimHandle`].
///
/// ```
/// use hpcnet_des::exec::Sim;
/// use hpcnet_des::SimTime;
///
/// let mut sim = Sim::new();
/// let h = sim.handle();
/// sim.spawn(async move {
///     h.sleep(SimTime::from_ns(5)).await;
///     assert_eq!(h.now(), SimTime::from_ns(5));
/// });
/// let summary = sim.run();
/// assert_eq!(summary.end_time, SimTime::from_ns(5));
/// assert_eq!(summary.live_tasks, 0);
/// ```
pub struct Sim {
    // Field order matters for drop: the executor (and the tasks) go first.
    exec: Executor,
    shared: Rc<Shared>,
}

impl Default for Sim {
    fn default() -> Self {
        Self::new()
    }
}

impl Sim {
    pub fn new() -> Self {
        let exec = Executor::new();
        let shared = Rc::new(Shared {
            queue: RefCell::new(EventQueue::new()),
            spawner: exec.spawner(),
        });
        Sim { exec, shared }
    }

    /// A handle for tasks and callbacks: time, timers, spawning.
    pub fn handle(&self) -> SimHandle {
        SimHandle {
            shared: self.shared.clone(),
        }
    }

    pub fn spawn(&self, future: impl Future<Output = ()> + 'static) -> TaskId {
        self.exec.spawn(future)
    }

    pub fn now(&self) -> SimTime {
        self.shared.queue.borrow().now()
    }

    pub fn executor(&self) -> &Executor {
        &self.exec
    }

    /// Run until no task is ready and no event is pending.
    pub fn run(&mut self) -> RunSummary {
        self.run_until(SimTime::MAX)
    }

    /// Run every event at or before `t`, polling ready tasks after each, then advance the clock
    /// to `t` (unless `t` is [`SimTime::MAX`]: then the clock stays at the last event).
    pub fn run_until(&mut self, t: SimTime) -> RunSummary {
        loop {
            self.exec.run_ready();
            let event = {
                let mut q = self.shared.queue.borrow_mut();
                match q.peek_time() {
                    Some(at) if at <= t => q.pop().map(|(_, e)| e),
                    _ => None,
                }
            };
            match event {
                Some(TimerEvent::Wake(w)) => w.wake(),
                Some(TimerEvent::Call(f)) => f(),
                None => break,
            }
        }
        if t != SimTime::MAX {
            self.shared.queue.borrow_mut().advance_to(t);
        }
        let q = self.shared.queue.borrow();
        RunSummary {
            end_time: q.now(),
            events: q.events_processed(),
            polls: self.exec.polls(),
            live_tasks: self.exec.live_tasks(),
        }
    }

    /// Events waiting in the queue.
    pub fn pending_events(&self) -> usize {
        self.shared.queue.borrow().len()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        // Pending callbacks may hold `SimHandle`s, i.e. `shared`, which holds the queue: drop them
        // to break the cycle (outside the borrow, as their drop may use a handle).
        let queue = std::mem::take(&mut *self.shared.queue.borrow_mut());
        drop(queue);
    }
}

/// The tasks' view of a [`Sim`]: cheap to clone (one `Rc`).
#[derive(Clone)]
pub struct SimHandle {
    shared: Rc<Shared>,
}

impl SimHandle {
    pub fn now(&self) -> SimTime {
        self.shared.queue.borrow().now()
    }

    /// A future that completes `d` after now. Every sleep costs exactly one event, including
    /// `sleep(SimTime::ZERO)`, which therefore yields to the tasks and events already due now.
    pub fn sleep(&self, d: SimTime) -> Sleep<'_> {
        self.sleep_until(self.now() + d)
    }

    /// A future that completes at time `t` (at once, after one event, if `t` has passed).
    pub fn sleep_until(&self, t: SimTime) -> Sleep<'_> {
        Sleep {
            handle: self,
            deadline: t,
            registered: None,
        }
    }

    pub fn spawn(&self, future: impl Future<Output = ()> + 'static) -> TaskId {
        self.shared.spawner.spawn(future)
    }

    /// Run `f` as an event at time `t` (clamped to now), e.g. to complete an operation.
    pub fn call_at(&self, t: SimTime, f: impl FnOnce() + 'static) {
        let mut q = self.shared.queue.borrow_mut();
        let at = t.max(q.now());
        q.schedule(at, TimerEvent::Call(Box::new(f)));
    }

    /// Run `f` as an event `d` after now.
    pub fn call_in(&self, d: SimTime, f: impl FnOnce() + 'static) {
        self.call_at(self.now() + d, f);
    }

    fn schedule_wake(&self, t: SimTime, waker: Waker) {
        let mut q = self.shared.queue.borrow_mut();
        let at = t.max(q.now());
        q.schedule(at, TimerEvent::Wake(waker));
    }
}

/// Future returned by [`SimHandle::sleep`] and [`SimHandle::sleep_until`].
#[must_use = "futures do nothing unless awaited"]
pub struct Sleep<'a> {
    handle: &'a SimHandle,
    deadline: SimTime,
    /// The waker the pending timer event will wake; `None` before the first poll.
    registered: Option<Waker>,
}

impl Future for Sleep<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        match &this.registered {
            None => {
                this.handle.schedule_wake(this.deadline, cx.waker().clone());
                this.registered = Some(cx.waker().clone());
                Poll::Pending
            }
            Some(_) if this.handle.now() >= this.deadline => Poll::Ready(()),
            Some(w) => {
                // Polled early by a different waker (e.g. inside a combinator): make sure the new
                // one is woken too. The old event then causes one harmless spurious wake-up.
                if !w.will_wake(cx.waker()) {
                    this.handle.schedule_wake(this.deadline, cx.waker().clone());
                    this.registered = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Completion: a single-threaded one-shot channel

/// The sender went away without completing the operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("operation dropped without completing")]
pub struct Canceled;

struct CompletionState<T> {
    value: Option<T>,
    waker: Option<Waker>,
    sender_alive: bool,
    receiver_alive: bool,
}

/// Create a one-shot completion: an event handler keeps the [`CompletionSender`] and fills it
/// when the operation finishes; the task awaits the [`Completion`].
pub fn completion<T>() -> (CompletionSender<T>, Completion<T>) {
    let state = Rc::new(RefCell::new(CompletionState {
        value: None,
        waker: None,
        sender_alive: true,
        receiver_alive: true,
    }));
    (CompletionSender { state: state.clone() }, Completion { state })
}

/// The receiving half: a future that resolves to the sent value, or to [`Canceled`] if the
/// sender is dropped without sending.
#[must_use = "futures do nothing unless awaited"]
pub struct Completion<T> {
    state: Rc<RefCell<CompletionState<T>>>,
}

impl<T> Completion<T> {
    /// Whether a value is waiting (the future would resolve without suspending).
    pub fn is_complete(&self) -> bool {
        self.state.borrow().value.is_some()
    }
}

impl<T> Future for Completion<T> {
    type Output = Result<T, Canceled>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.state.borrow_mut();
        if let Some(v) = s.value.take() {
            return Poll::Ready(Ok(v));
        }
        if !s.sender_alive {
            return Poll::Ready(Err(Canceled));
        }
        match &mut s.waker {
            Some(w) => w.clone_from(cx.waker()),
            None => s.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl<T> Drop for Completion<T> {
    fn drop(&mut self) {
        let mut s = self.state.borrow_mut();
        s.receiver_alive = false;
        s.waker = None;
    }
}

/// The sending half of a [`completion`].
pub struct CompletionSender<T> {
    state: Rc<RefCell<CompletionState<T>>>,
}

impl<T> CompletionSender<T> {
    /// Complete the operation and wake the waiting task. If the [`Completion`] was dropped the
    /// value is dropped too (check [`is_canceled`](Self::is_canceled) first to avoid the work).
    pub fn send(self, value: T) {
        let waker = {
            let mut s = self.state.borrow_mut();
            if !s.receiver_alive {
                return;
            }
            s.value = Some(value);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Whether nobody is waiting any more.
    pub fn is_canceled(&self) -> bool {
        !self.state.borrow().receiver_alive
    }
}

impl<T> Drop for CompletionSender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.state.borrow_mut();
            s.sender_alive = false;
            s.waker.take()
        };
        // After `send` this finds no waker; otherwise the receiver learns it was canceled.
        if let Some(w) = waker {
            w.wake();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Signal: wait until a counter reaches a target

struct SignalState {
    value: u64,
    waiters: Vec<(u64, Waker)>,
}

/// A monotonically increasing counter that tasks can wait on: "until 8 completions arrived",
/// "until every rank reached the barrier". Cloning shares the counter.
#[derive(Clone)]
pub struct Signal {
    state: Rc<RefCell<SignalState>>,
}

impl Default for Signal {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signal").field("value", &self.value()).finish()
    }
}

impl Signal {
    pub fn new() -> Self {
        Signal {
            state: Rc::new(RefCell::new(SignalState {
                value: 0,
                waiters: Vec::new(),
            })),
        }
    }

    pub fn value(&self) -> u64 {
        self.state.borrow().value
    }

    /// Add `n` and wake, in the order they started waiting, the tasks whose target is reached.
    pub fn add(&self, n: u64) {
        let woken: Vec<Waker> = {
            let mut s = self.state.borrow_mut();
            s.value += n;
            let value = s.value;
            if s.waiters.iter().all(|(target, _)| *target > value) {
                return;
            }
            let (due, waiting) = std::mem::take(&mut s.waiters)
                .into_iter()
                .partition::<Vec<_>, _>(|(target, _)| *target <= value);
            s.waiters = waiting;
            due.into_iter().map(|(_, w)| w).collect()
        };
        for w in woken {
            w.wake();
        }
    }

    /// A future that completes once the counter is at least `target`.
    pub fn wait_for(&self, target: u64) -> WaitFor<'_> {
        WaitFor { signal: self, target }
    }
}

/// Future returned by [`Signal::wait_for`].
#[must_use = "futures do nothing unless awaited"]
pub struct WaitFor<'a> {
    signal: &'a Signal,
    target: u64,
}

impl Future for WaitFor<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.signal.state.borrow_mut();
        if s.value >= self.target {
            return Poll::Ready(());
        }
        // A spurious re-poll registers again; the duplicate wake-up is deduplicated by the
        // executor.
        s.waiters.push((self.target, cx.waker().clone()));
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn tasks_run_in_spawn_order_and_finish() {
        let mut ex = Executor::new();
        let log = Rc::new(RefCell::new(Vec::new()));
        for i in 0..5 {
            let log = log.clone();
            ex.spawn(async move { log.borrow_mut().push(i) });
        }
        assert_eq!(ex.live_tasks(), 5);
        assert!(!ex.is_idle());
        assert_eq!(ex.run_ready(), 5);
        assert_eq!(*log.borrow(), vec![0, 1, 2, 3, 4]);
        assert_eq!(ex.live_tasks(), 0);
        assert!(ex.is_idle());
        assert_eq!(ex.run_ready(), 0);
    }

    /// Pending until `go` is set; counts its polls.
    struct Gate {
        go: Rc<Cell<bool>>,
        polls: Rc<Cell<u32>>,
        waker: Rc<RefCell<Option<Waker>>>,
    }
    impl Future for Gate {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.set(self.polls.get() + 1);
            if self.go.get() {
                Poll::Ready(())
            } else {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    #[test]
    fn duplicate_wakes_poll_once() {
        let mut ex = Executor::new();
        let go = Rc::new(Cell::new(false));
        let polls = Rc::new(Cell::new(0));
        let waker = Rc::new(RefCell::new(None));
        let id = ex.spawn(Gate {
            go: go.clone(),
            polls: polls.clone(),
            waker: waker.clone(),
        });
        assert_eq!(ex.run_ready(), 1);
        let w = waker.borrow().clone().unwrap();
        // Three wake-ups (by reference and by value, through a clone) before the next poll.
        let clone = w.clone();
        w.wake_by_ref();
        w.wake_by_ref();
        clone.wake();
        assert_eq!(ex.run_ready(), 1);
        assert_eq!(polls.get(), 2);
        assert!(ex.is_live(id));
        go.set(true);
        w.wake_by_ref();
        assert_eq!(ex.run_ready(), 1);
        assert!(!ex.is_live(id));
        // A stale waker of a finished task whose slot was reused does not poll the new task.
        let id2 = ex.spawn(Gate {
            go: go.clone(),
            polls: polls.clone(),
            waker: waker.clone(),
        });
        assert_eq!(id2.index(), id.index());
        assert_ne!(id2, id);
        go.set(false);
        assert_eq!(ex.run_ready(), 1);
        w.wake();
        assert_eq!(ex.run_ready(), 0);
        assert!(ex.is_live(id2));
        assert!(!ex.is_live(id));
    }

    #[test]
    fn wake_order_is_poll_order() {
        let mut ex = Executor::new();
        let log = Rc::new(RefCell::new(Vec::new()));
        let mut senders = Vec::new();
        for i in 0..4 {
            let (tx, rx) = completion::<()>();
            senders.push(Some(tx));
            let log = log.clone();
            ex.spawn(async move {
                rx.await.unwrap();
                log.borrow_mut().push(i);
            });
        }
        ex.run_ready();
        for i in [2, 0, 3, 1] {
            senders[i].take().unwrap().send(());
        }
        ex.run_ready();
        assert_eq!(*log.borrow(), vec![2, 0, 3, 1]);
    }

    #[test]
    fn tasks_spawn_tasks() {
        let mut sim = Sim::new();
        let h = sim.handle();
        let count = Rc::new(Cell::new(0));
        let c = count.clone();
        sim.spawn(async move {
            for _ in 0..3 {
                let c = c.clone();
                let h2 = h.clone();
                h.spawn(async move {
                    h2.sleep(SimTime::from_ns(1)).await;
                    c.set(c.get() + 1);
                });
            }
        });
        let s = sim.run();
        assert_eq!(count.get(), 3);
        assert_eq!(s.live_tasks, 0);
        assert_eq!(s.end_time, SimTime::from_ns(1));
    }

    #[test]
    fn completion_value_and_cancel() {
        let mut sim = Sim::new();
        let h = sim.handle();
        let got = Rc::new(RefCell::new(Vec::new()));
        let (tx, rx) = completion::<u32>();
        let (tx2, rx2) = completion::<u32>();
        let g = got.clone();
        sim.spawn(async move {
            let v = rx.await;
            g.borrow_mut().push((h.now(), v));
            let v = rx2.await;
            g.borrow_mut().push((h.now(), v));
        });
        let h = sim.handle();
        h.call_in(SimTime::from_ns(3), move || tx.send(7));
        h.call_in(SimTime::from_ns(4), move || drop(tx2));
        let s = sim.run();
        assert_eq!(
            *got.borrow(),
            vec![(SimTime::from_ns(3), Ok(7)), (SimTime::from_ns(4), Err(Canceled))]
        );
        assert_eq!(s.polls, 3);
    }

    #[test]
    fn send_to_dropped_receiver_is_noop() {
        let (tx, rx) = completion::<u32>();
        drop(rx);
        assert!(tx.is_canceled());
        tx.send(1);
    }

    #[test]
    fn signal_wakes_at_target() {
        let mut sim = Sim::new();
        let h = sim.handle();
        let sig = Signal::new();
        let done = Rc::new(Cell::new(SimTime::ZERO));
        let (s2, d2) = (sig.clone(), done.clone());
        let h2 = h.clone();
        sim.spawn(async move {
            s2.wait_for(3).await;
            d2.set(h2.now());
        });
        for i in 1..=4 {
            let s = sig.clone();
            h.call_in(SimTime::from_ns(i), move || s.add(1));
        }
        let summary = sim.run();
        assert_eq!(done.get(), SimTime::from_ns(3));
        assert_eq!(sig.value(), 4);
        assert_eq!(summary.polls, 2);
    }

    #[test]
    fn run_until_stops_and_resumes() {
        let mut sim = Sim::new();
        let h = sim.handle();
        sim.spawn(async move {
            for _ in 0..10 {
                h.sleep(SimTime::from_ns(10)).await;
            }
        });
        let s = sim.run_until(SimTime::from_ns(35));
        assert_eq!(s.end_time, SimTime::from_ns(35));
        assert_eq!(s.events, 3);
        assert_eq!(s.live_tasks, 1);
        let s = sim.run();
        assert_eq!(s.end_time, SimTime::from_ns(100));
        assert_eq!(s.events, 10);
        assert_eq!(s.live_tasks, 0);
    }

    #[test]
    fn dropping_sim_with_blocked_tasks_frees_them() {
        let alive = Rc::new(());
        {
            let mut sim = Sim::new();
            let h = sim.handle();
            let a = alive.clone();
            sim.spawn(async move {
                let _a = a;
                let (_tx, rx) = completion::<()>();
                let _keep = h.clone();
                std::future::pending::<()>().await;
                drop(rx);
            });
            // A pending callback holding a handle must not keep the world alive either.
            let (h2, a2) = (sim.handle(), alive.clone());
            sim.handle().call_at(SimTime::from_ns(100), move || drop((h2, a2)));
            let s = sim.run_until(SimTime::from_ns(50));
            assert_eq!(s.live_tasks, 1);
            assert_eq!(Rc::strong_count(&alive), 3);
        }
        assert_eq!(Rc::strong_count(&alive), 1);
    }
}
