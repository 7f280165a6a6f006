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
//! therefore writes `ctx.sleep(SimTime::from_us(5)).await`; it never spins.
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
//! - [`Executor`] / [`Spawner`]: the task slab, the ready list, spawning from inside tasks.
//!
//! The executor knows nothing of events: the world that owns it wakes tasks. The message
//! library's `Machine` keeps the wakers of tasks waiting on a completion queue or a timer and
//! wakes them when the NIC model reports that queue or timer after an event; the kernel's
//! [`crate::driver::Driver`] runs the loop (tasks woken → run them; otherwise the next event).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Wake, Waker};

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::task::Poll;

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
        let mut gates = Vec::new();
        for i in 0..4 {
            let (go, waker) = (Rc::new(Cell::new(false)), Rc::new(RefCell::new(None)));
            gates.push((go.clone(), waker.clone()));
            let gate = Gate {
                go,
                polls: Rc::new(Cell::new(0)),
                waker,
            };
            let log = log.clone();
            ex.spawn(async move {
                gate.await;
                log.borrow_mut().push(i);
            });
        }
        ex.run_ready();
        for i in [2, 0, 3, 1] {
            let (go, waker) = &gates[i];
            go.set(true);
            waker.borrow_mut().take().expect("waiting").wake();
        }
        ex.run_ready();
        assert_eq!(*log.borrow(), vec![2, 0, 3, 1]);
    }

    #[test]
    fn tasks_spawn_tasks() {
        let mut ex = Executor::new();
        let spawner = ex.spawner();
        let count = Rc::new(Cell::new(0));
        let c = count.clone();
        ex.spawn(async move {
            for _ in 0..3 {
                let c = c.clone();
                spawner.spawn(async move { c.set(c.get() + 1) });
            }
        });
        assert_eq!(ex.run_ready(), 4);
        assert_eq!(count.get(), 3);
        assert_eq!(ex.live_tasks(), 0);
    }
}
