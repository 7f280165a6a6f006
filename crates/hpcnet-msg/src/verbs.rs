//! A verbs-like API for rank programs (SWverbs / ibverbs names where they fit).
//!
//! A [`Machine`] owns a [`World`] (fabric + NICs + memories) and an executor; every rank program
//! is an `async` block holding a [`Context`] — the rank's device context:
//!
//! ```
//! use hpcnet_msg::verbs::{Machine, Rank, WriteWr};
//! # let world = hpcnet_msg::verbs::doc_world();
//! let mut m = Machine::new(world);
//! let (a, b) = (m.context(Rank(0)), m.context(Rank(1)));
//! let src = a.reg_mr(64);
//! let dst = b.reg_mr(64);
//! a.write_local(&src, 0, b"hello, remote memory").unwrap();
//! let cq = a.create_cq();
//! let qp = a.create_qp(&cq, Rank(1));
//! let remote = dst.remote(0);
//! m.spawn(async move {
//!     qp.post_write(WriteWr::new(&src, 0, 20, remote).wr_id(7)).unwrap();
//!     let c = cq.next().await;
//!     assert_eq!(c.wr_id, 7);
//! });
//! m.run();
//! assert_eq!(&m.context(Rank(1)).read_local(&dst, 0, 20).unwrap(), b"hello, remote memory");
//! ```
//!
//! Calls that post work return at once (the doorbell rings at the current simulated time);
//! completions are awaited with [`Cq::next`] or polled with [`Cq::poll`]. New operations beyond
//! ibverbs (spec 01): RDMA write with **notification** (a completion at the target's CQ) and
//! with **reply word** (the target increments a counter in its memory when the data has landed).
//! A **reliable datagram** queue pair serves every peer ([`Context::create_rd_qp`]).
//!
//! How rank programs wake: a task that awaits a completion ([`Cq::next`]) or a timer
//! ([`Context::sleep`]) leaves its waker with the machine, keyed by the queue or timer. The NIC
//! model reports, after each event, which completion queues received entries and which timers
//! expired ([`hpcnet_nic::Notice`]); the machine wakes the tasks waiting on them, and the
//! executor polls them before the next event. Simulated time does not move while tasks run.
//! The NIC is reached only through [`NicBackend`].

use crate::nic::NicBackend;
use hpcnet_des::driver::{Driver, Model, Stop};
use hpcnet_des::{Executor, SimTime};
pub use hpcnet_nic::ids::Rank;
pub use hpcnet_nic::AtomicOp;
use hpcnet_nic::{CqId, Cqe, Notice, Op, PostError, QpNum, Request, RqId, Seg, TimerId, World};
use std::cell::{Ref, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context as TaskCx, Poll, Waker};

/// The NIC model and the tasks waiting on it.
pub(crate) struct Host<B: ?Sized> {
    waiters: Waiters,
    nic: B,
}

/// Wakers of tasks waiting on a completion queue or a timer.
#[derive(Default)]
struct Waiters {
    cq: Vec<Option<Waker>>,
    /// Looked up by timer id, never iterated, so its order cannot reach results.
    timers: hpcnet_des::hash::IdMap<TimerId, Waker>,
    /// Per rank: tasks waiting for the NIC to write into that rank's memory.
    memory: Vec<Vec<Waker>>,
    notices: Vec<Notice>,
}

impl<B: NicBackend + ?Sized> Host<B> {
    /// Handle one NIC event and wake the tasks its notices concern; false when none was left.
    #[inline(always)]
    fn step(&mut self) -> bool {
        if !self.nic.step() {
            return false;
        }
        let w = &mut self.waiters;
        self.nic.take_notices(&mut w.notices);
        if w.notices.is_empty() {
            return true;
        }
        for n in w.notices.drain(..) {
            let waker = match n {
                Notice::Cq(cq) => w.cq.get_mut(cq.index()).and_then(Option::take),
                Notice::Timer(t) => w.timers.remove(&t),
                Notice::Memory(r) => {
                    if let Some(ws) = w.memory.get_mut(r.index()) {
                        ws.drain(..).for_each(Waker::wake);
                    }
                    None
                }
                // Nothing waits on a loss until a transport does (the NIC counts and lists it).
                Notice::PacketLost(_) => None,
            };
            if let Some(waker) = waker {
                waker.wake();
            }
        }
        true
    }

    fn wait_cq(&mut self, cq: CqId, waker: &Waker) {
        let i = cq.index();
        if self.waiters.cq.len() <= i {
            self.waiters.cq.resize(i + 1, None);
        }
        self.waiters.cq[i] = Some(waker.clone());
    }
}

type Shared = Rc<RefCell<Host<dyn NicBackend>>>;

/// A registered memory region of one rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Mr {
    pub rank: Rank,
    pub addr: u64,
    pub len: u64,
    /// Key a peer must present to access the region.
    pub rkey: u32,
}

impl Mr {
    /// The (address, key) a peer uses to reach byte `offset` of this region.
    pub fn remote(&self, offset: u64) -> RemoteBuf {
        RemoteBuf {
            rank: self.rank,
            addr: self.addr + offset,
            rkey: self.rkey,
        }
    }
}

/// A remote buffer: rank, address and key.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RemoteBuf {
    pub rank: Rank,
    pub addr: u64,
    pub rkey: u32,
}

/// Errors of verbs calls (invalid operations in rank programs).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum VerbsError {
    #[error("post: {0}")]
    Post(#[from] PostError),
    #[error("{call}: buffer of rank {owner} used by rank {user}")]
    ForeignBuffer {
        call: &'static str,
        owner: Rank,
        user: Rank,
    },
    #[error("{call}: connected queue pair to rank {peer} cannot reach rank {target}")]
    WrongPeer {
        call: &'static str,
        peer: Rank,
        target: Rank,
    },
    #[error("{call}: {len} bytes at offset {offset} overrun a {size}-byte region")]
    Overrun {
        call: &'static str,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("post_write: reply word on rank {word}, but the write goes to rank {target}")]
    ReplyWordRank { word: Rank, target: Rank },
}

/// The machine: a NIC model (by default the simulated [`World`]) plus the executor running rank
/// programs.
pub struct Machine<B: NicBackend + 'static = World> {
    host: Rc<RefCell<Host<B>>>,
    exec: Executor,
}

/// How a run ended.
#[derive(Clone, Debug)]
pub struct RunEnd {
    pub time: SimTime,
    pub events: u64,
    /// Rank programs still waiting when nothing was left to happen (a hang or deadlock).
    pub stuck_tasks: usize,
    /// Packets still in the network at the end (non-zero: they can never move).
    pub net_in_flight: u64,
    /// The watchdog fired, or the run ended with packets stuck and programs waiting.
    pub deadlock: bool,
    /// Input VCs and source queues whose head packet waits, when packets are stuck.
    pub blocked: Vec<hpcnet_fabric::net::Blocked>,
}

impl<B: NicBackend + 'static> Machine<B> {
    pub fn new(nic: B) -> Machine<B> {
        Machine {
            host: Rc::new(RefCell::new(Host {
                waiters: Waiters::default(),
                nic,
            })),
            exec: Executor::new(),
        }
    }

    /// The device context of `rank`.
    pub fn context(&self, rank: Rank) -> Context {
        let host: Shared = self.host.clone();
        Context { rank, host }
    }

    pub fn spawn(&self, f: impl Future<Output = ()> + 'static) {
        self.exec.spawn(f);
    }

    /// Run until no event is left and no task is ready, or until the deadlock watchdog fires:
    /// packets in the network and none has moved for `faults.watchdog` (then `deadlock` is set
    /// and `blocked` names the stuck channels).
    pub fn run(&mut self) -> RunEnd {
        let watchdog = self.host.borrow().nic.watchdog();
        let mut model = Running {
            host: &self.host,
            exec: &mut self.exec,
            stalled: None,
            watchdog,
        };
        let out = Driver::new().watchdog(watchdog).run(&mut model);
        let deadlock = matches!(out.stop, Stop::Watchdog { .. });
        let h = self.host.borrow();
        let net_in_flight = h.nic.packets_in_network();
        let blocked = if net_in_flight > 0 {
            h.nic.blocked(32)
        } else {
            Vec::new()
        };
        RunEnd {
            time: h.nic.now(),
            events: h.nic.events(),
            stuck_tasks: self.exec.live_tasks(),
            net_in_flight,
            deadlock: deadlock || (net_in_flight > 0 && self.exec.live_tasks() > 0),
            blocked,
        }
    }

    /// Create a hardware collective group of `members` (communicator order): the library
    /// programs the routers' multicast tables here, before the rank programs start.
    pub fn coll_group(&self, members: &[Rank]) -> Result<hpcnet_nic::GroupId, String> {
        self.host.borrow_mut().nic.coll_group(members)
    }

    /// Open a virtual port of the triggered offload unit for `rank` (before the rank programs
    /// start, as a launcher would); returns the NodeID of its NIC and the VP number.
    pub fn trig_open_vp(&self, rank: Rank) -> Result<(u32, u32), String> {
        self.host.borrow_mut().nic.trig_open_vp(rank).map_err(|e| e.to_string())
    }

    /// Read access to the NIC model (counters, configuration, memory) between runs.
    pub fn world(&self) -> Ref<'_, B> {
        Ref::map(self.host.borrow(), |h| &h.nic)
    }
}

/// A machine being run: tasks that were woken run before the next NIC event.
struct Running<'a, B: NicBackend> {
    host: &'a RefCell<Host<B>>,
    exec: &'a mut Executor,
    /// The watchdog's reading after the last NIC event (rank programs move no packets).
    stalled: Option<SimTime>,
    /// The driver's watchdog limit: a batch of NIC events yields to the driver when it is
    /// exceeded.
    watchdog: SimTime,
}

impl<B: NicBackend> Model for Running<'_, B> {
    fn now(&self) -> SimTime {
        self.host.borrow().nic.now()
    }

    #[inline]
    fn step_before(&mut self, _limit: SimTime) -> hpcnet_des::driver::Step {
        use hpcnet_des::driver::Step;
        if self.exec.has_ready() {
            // Rank programs run with no borrow of the NIC model held: they post work.
            self.exec.run_ready();
            return Step::Handled;
        }
        // NIC events back to back (one borrow per batch) until one wakes a task, or the run
        // looks stuck to the watchdog: then the driver decides.
        let mut h = self.host.borrow_mut();
        if !h.step() {
            return Step::Empty;
        }
        loop {
            self.stalled = h.nic.stalled_for();
            if self.exec.has_ready() || self.stalled.is_some_and(|s| s > self.watchdog) {
                return Step::Handled;
            }
            if !h.step() {
                return Step::Handled;
            }
        }
    }

    #[inline]
    fn stalled_for(&self) -> Option<SimTime> {
        self.stalled
    }

    fn confirm_stall(&mut self) -> bool {
        let mut h = self.host.borrow_mut();
        if h.nic.confirm_stall() {
            return true;
        }
        self.stalled = h.nic.stalled_for();
        false
    }
}

/// One rank's device context.
#[derive(Clone)]
pub struct Context {
    rank: Rank,
    host: Shared,
}

impl Context {
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.host.borrow().nic.ranks()
    }

    pub fn now(&self) -> SimTime {
        self.host.borrow().nic.now()
    }

    /// Post this rank's descriptor of its next hardware collective on `desc.group`; the NIC
    /// writes a completion of kind `Coll` to `desc.cq` when the result is in this rank's memory.
    pub fn post_coll(&self, desc: hpcnet_nic::CollDesc) -> Result<(), VerbsError> {
        self.host
            .borrow_mut()
            .nic
            .post_coll(self.rank, desc)
            .map_err(VerbsError::Post)
    }

    /// The context of another rank of the same machine — for libraries whose set-up is
    /// collective and made by one member for all (SHMEM teams and active sets, created when
    /// their members first use them), as a job launcher would wire them.
    pub fn peer(&self, rank: Rank) -> Context {
        Context {
            rank,
            host: self.host.clone(),
        }
    }

    /// Whether messages this rank posts to one peer on one queue pair land in the order they
    /// were posted (deterministic routing, no spreading over VCs or rails): a fence between
    /// them then costs nothing.
    pub fn in_order(&self) -> bool {
        self.host.borrow().nic.in_order()
    }

    /// Ask the NIC to report (and count) its writes into region `mr` of this rank, so that
    /// [`Context::memory_changed`] can wake this rank. Fails on a NIC model that cannot.
    pub fn watch_memory(&self, mr: &Mr) -> Result<(), VerbsError> {
        self.own(mr, "watch_memory", 0, 0)?;
        if self.host.borrow_mut().nic.watch_memory(self.rank, mr.rkey) {
            Ok(())
        } else {
            Err(VerbsError::Post(PostError::Unsupported {
                op: "watch_memory",
                model: "chosen NIC",
            }))
        }
    }

    /// The region `mr` under a further key: the same bytes and addresses, a different
    /// `rkey`, so that a NIC counting arrivals per key ([`Context::memory_writes`]) tells
    /// accesses made with one key from those made with the other. Fails on a NIC model that
    /// cannot.
    pub fn add_key(&self, mr: &Mr) -> Result<Mr, VerbsError> {
        self.own(mr, "add_key", 0, 0)?;
        match self.host.borrow_mut().nic.add_key(self.rank, mr.rkey) {
            Some(rkey) => Ok(Mr { rkey, ..mr.clone() }),
            None => Err(VerbsError::Post(PostError::Unsupported {
                op: "add_key",
                model: "chosen NIC",
            })),
        }
    }

    /// Reads and atomics this rank has posted whose answer has not come back, from the NIC's
    /// counter (spec 03), or `None` when the NIC model keeps none.
    pub fn outstanding_reads(&self) -> Option<u32> {
        self.host.borrow().nic.outstanding_reads(self.rank)
    }

    /// Messages and atomics that have landed in the watched region `mr` of this rank so far
    /// (the NIC's arrival counter).
    pub fn memory_writes(&self, mr: &Mr) -> u64 {
        self.host.borrow().nic.memory_writes(self.rank, mr.rkey)
    }

    /// Wait until the NIC next writes into this rank's memory (a message landed whole, an atomic
    /// applied) — how a program spinning on a memory word is modelled without polling events.
    /// Needs [`Context::watch_memory`]; check the condition before awaiting, since a write
    /// that happened before the call does not count.
    pub fn memory_changed(&self) -> MemoryChanged {
        MemoryChanged {
            host: self.host.clone(),
            rank: self.rank,
            armed: false,
        }
    }

    /// Elements of one pulse of the triggered offload unit, for elements of `dtype`.
    pub fn trig_pulse_elements(&self, dtype: hpcnet_nic::CollType) -> Result<u64, VerbsError> {
        self.host
            .borrow()
            .nic
            .trig_pulse_elements(dtype)
            .map_err(VerbsError::Post)
    }

    /// Post this rank's offloaded collective on its VP; the NIC writes a completion of kind
    /// `Trig` to `post.cq` when every pulse's result is in this rank's memory.
    pub fn post_trig(&self, post: hpcnet_nic::triggered::TrigPost) -> Result<(), VerbsError> {
        self.host
            .borrow_mut()
            .nic
            .post_trig(self.rank, post)
            .map_err(VerbsError::Post)
    }

    /// Post this rank's point-to-point descriptor (MP or RDMA) on its VP `desc.vp`; the NIC
    /// writes a completion of kind `TrigP2p` to `desc.cq` when its packets have left.
    pub fn post_trig_p2p(&self, desc: hpcnet_nic::triggered::TrigP2p) -> Result<(), VerbsError> {
        self.host
            .borrow_mut()
            .nic
            .post_trig_p2p(self.rank, desc)
            .map_err(VerbsError::Post)
    }

    /// Register `len` zeroed bytes of this rank's memory.
    pub fn reg_mr(&self, len: u64) -> Mr {
        let (addr, rkey) = self.host.borrow_mut().nic.register(self.rank, len);
        Mr {
            rank: self.rank,
            addr,
            len,
            rkey,
        }
    }

    /// Register `len` bytes of this rank's memory without a backing store in the simulator
    /// beyond the first `keep` bytes of every `stride`-byte slot: addresses, bounds and keys
    /// are those of [`Context::reg_mr`], the other bytes read as zero and writes to them are
    /// dropped. For programs that do not look at their data (`keep = 0`: a payload-free
    /// buffer; a message library's buffers keep their headers).
    pub fn reg_mr_sparse(&self, len: u64, stride: u64, keep: u64) -> Mr {
        let (addr, rkey) = self.host.borrow_mut().nic.register_sparse(self.rank, len, stride, keep);
        Mr {
            rank: self.rank,
            addr,
            len,
            rkey,
        }
    }

    /// Register memory outside the model as a region of this rank's memory (it keeps its
    /// bytes; see [`hpcnet_nic::ExternalBytes`]).
    pub fn reg_mr_external(&self, bytes: Box<dyn hpcnet_nic::ExternalBytes>) -> Mr {
        let len = bytes.bytes().len() as u64;
        let (addr, rkey) = self.host.borrow_mut().nic.register_external(self.rank, bytes);
        Mr {
            rank: self.rank,
            addr,
            len,
            rkey,
        }
    }

    fn own(&self, mr: &Mr, call: &'static str, offset: u64, len: u64) -> Result<(), VerbsError> {
        if mr.rank != self.rank {
            return Err(VerbsError::ForeignBuffer {
                call,
                owner: mr.rank,
                user: self.rank,
            });
        }
        if offset.checked_add(len).is_none_or(|e| e > mr.len) {
            return Err(VerbsError::Overrun {
                call,
                offset,
                len,
                size: mr.len,
            });
        }
        Ok(())
    }

    /// CPU store into a local region.
    pub fn write_local(&self, mr: &Mr, offset: u64, bytes: &[u8]) -> Result<(), VerbsError> {
        self.own(mr, "write_local", offset, bytes.len() as u64)?;
        self.host
            .borrow_mut()
            .nic
            .store(self.rank, mr.addr + offset, bytes)
            .expect("checked range");
        Ok(())
    }

    /// The bytes of `len` bytes of a local region at `offset` are no longer needed (a received
    /// message copied out of its buffer): a sparse region ([`Context::reg_mr_sparse`]) stops
    /// holding the slots inside the range, which read as zero again; an ordinary region keeps
    /// its bytes.
    pub fn discard_local(&self, mr: &Mr, offset: u64, len: u64) -> Result<(), VerbsError> {
        self.own(mr, "discard_local", offset, len)?;
        self.host
            .borrow_mut()
            .nic
            .discard(self.rank, mr.addr + offset, len)
            .expect("checked range");
        Ok(())
    }

    /// CPU load from a local region.
    pub fn read_local(&self, mr: &Mr, offset: u64, len: u64) -> Result<Vec<u8>, VerbsError> {
        self.own(mr, "read_local", offset, len)?;
        Ok(self
            .host
            .borrow()
            .nic
            .load(self.rank, mr.addr + offset, len)
            .expect("checked range"))
    }

    /// CPU load from a local region into `out` (`out.len()` bytes, no allocation).
    pub fn read_local_into(&self, mr: &Mr, offset: u64, out: &mut [u8]) -> Result<(), VerbsError> {
        self.own(mr, "read_local", offset, out.len() as u64)?;
        self.host
            .borrow()
            .nic
            .load_into(self.rank, mr.addr + offset, out)
            .expect("checked range");
        Ok(())
    }

    /// CPU load of `len` bytes from a local region, appended to `out` (no allocation when `out`
    /// has room).
    pub fn read_local_append(&self, mr: &Mr, offset: u64, len: u64, out: &mut Vec<u8>) -> Result<(), VerbsError> {
        self.own(mr, "read_local", offset, len)?;
        self.host
            .borrow()
            .nic
            .load_append(self.rank, mr.addr + offset, len, out)
            .expect("checked range");
        Ok(())
    }

    /// Read the little-endian u64 at `offset` (e.g. a reply word).
    pub fn read_u64(&self, mr: &Mr, offset: u64) -> Result<u64, VerbsError> {
        let b = self.read_local(mr, offset, 8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    pub fn create_cq(&self) -> Cq {
        let id = self.host.borrow_mut().nic.create_cq(self.rank);
        Cq {
            id,
            host: self.host.clone(),
        }
    }

    /// A connected (reliable connection) queue pair to `peer`.
    pub fn create_qp(&self, cq: &Cq, peer: Rank) -> Qp {
        self.qp(cq, Some(peer))
    }

    /// A reliable-datagram queue pair: one per process, serving every peer (spec 01 SWverbs).
    pub fn create_rd_qp(&self, cq: &Cq) -> Qp {
        self.qp(cq, None)
    }

    /// A handle of a queue pair this context created earlier ([`Context::create_qp`] with
    /// `peer`, or [`Context::create_rd_qp`] with None) on `cq`, from its number
    /// ([`Qp::num`]): a program holding many queue pairs may keep their numbers only (a
    /// queue pair has no state beyond its number, peer and completion queue).
    pub fn qp_handle(&self, cq: &Cq, peer: Option<Rank>, num: QpNum) -> Qp {
        Qp {
            ctx: self.clone(),
            cq: cq.id,
            peer,
            num,
            rail: 0,
            function: 0,
            fast: false,
        }
    }

    fn qp(&self, cq: &Cq, peer: Option<Rank>) -> Qp {
        let num = self.host.borrow_mut().nic.alloc_qp();
        self.qp_handle(cq, peer, num)
    }

    /// A receive queue for asynchronous queue messages, completing on `cq`. Give its
    /// [`Rq::remote`] to senders; several queue pairs may send to it (a shared receive queue).
    pub fn create_rq(&self, cq: &Cq) -> Result<Rq, VerbsError> {
        let id = self.host.borrow_mut().nic.create_rq(self.rank, cq.id)?;
        Ok(Rq { id, ctx: self.clone() })
    }

    /// A shared receive queue (ibverbs `ibv_create_srq`): the same object as [`Self::create_rq`],
    /// named for programs that share one receive queue among all their queue pairs, e.g. the
    /// receive side of a reliable-datagram queue pair serving every peer.
    pub fn create_srq(&self, cq: &Cq) -> Result<Rq, VerbsError> {
        self.create_rq(cq)
    }

    /// Pre-post `count` NAP receive buffers (each `nic.nap_buffer` bytes) from `mr` at `offset`;
    /// received NAPs complete on `cq` with the buffer's address (cHPP).
    pub fn post_nap_buffers(&self, mr: &Mr, offset: u64, count: u64, cq: &Cq) -> Result<(), VerbsError> {
        let size = self.host.borrow().nic.nap_buffer_size();
        self.own(mr, "post_nap_buffers", offset, size * count)?;
        self.host
            .borrow_mut()
            .nic
            .post_nap_buffers(self.rank, mr.addr + offset, count, cq.id)?;
        Ok(())
    }

    /// Return a received NAP's buffer to the pool.
    pub fn repost_nap_buffer(&self, addr: u64) {
        self.host.borrow_mut().nic.repost_nap_buffer(self.rank, addr);
    }

    /// CPU load of `len` bytes at a raw local address (e.g. a received NAP buffer).
    pub fn read_addr(&self, addr: u64, len: u64) -> Result<Vec<u8>, VerbsError> {
        self.host
            .borrow()
            .nic
            .load(self.rank, addr, len)
            .map_err(|e| VerbsError::Post(PostError::Local(e)))
    }

    /// Wait `d` of simulated time (computation).
    pub fn sleep(&self, d: SimTime) -> Sleep {
        Sleep {
            host: self.host.clone(),
            rank: self.rank,
            until: self.now() + d,
            armed: false,
        }
    }
}

/// A receive queue (per queue pair or shared).
#[derive(Clone)]
pub struct Rq {
    id: RqId,
    ctx: Context,
}

/// The address of a receive queue, for senders.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RemoteRq {
    pub rank: Rank,
    pub id: RqId,
}

impl Rq {
    pub fn remote(&self) -> RemoteRq {
        RemoteRq {
            rank: self.ctx.rank,
            id: self.id,
        }
    }

    /// Post a receive buffer: `len` bytes of `mr` at `offset`; its completion carries `wr_id`.
    pub fn post_recv(&self, mr: &Mr, offset: u64, len: u64, wr_id: u64) -> Result<(), VerbsError> {
        self.ctx.own(mr, "post_recv", offset, len)?;
        self.ctx
            .host
            .borrow_mut()
            .nic
            .post_recv(self.id, mr.addr + offset, len, wr_id)?;
        Ok(())
    }

    /// Post `count` receive buffers of `len` bytes back to back in `mr` from `offset`; their
    /// completions carry `first_wr_id`, `first_wr_id + 1`, …: the same as `count` calls of
    /// [`Rq::post_recv`] in address order, which a model may hold as one entry (a shared
    /// receive queue's pre-posted buffers are interchangeable).
    pub fn post_recv_run(
        &self,
        mr: &Mr,
        offset: u64,
        len: u64,
        count: u64,
        first_wr_id: u64,
    ) -> Result<(), VerbsError> {
        self.ctx.own(mr, "post_recv", offset, len.saturating_mul(count))?;
        self.ctx
            .host
            .borrow_mut()
            .nic
            .post_recv_run(self.id, mr.addr + offset, len, count, first_wr_id)?;
        Ok(())
    }
}

/// A completion queue.
#[derive(Clone)]
pub struct Cq {
    id: CqId,
    host: Shared,
}

impl Cq {
    pub fn id(&self) -> CqId {
        self.id
    }

    /// The oldest completion, if any.
    pub fn poll(&self) -> Option<Cqe> {
        self.host.borrow_mut().nic.poll_cq(self.id)
    }

    /// Wait for the next completion.
    pub fn next(&self) -> NextCqe {
        NextCqe { cq: self.clone() }
    }
}

/// Future of [`Cq::next`].
pub struct NextCqe {
    cq: Cq,
}

impl Future for NextCqe {
    type Output = Cqe;
    fn poll(self: Pin<&mut Self>, cx: &mut TaskCx<'_>) -> Poll<Cqe> {
        let mut h = self.cq.host.borrow_mut();
        match h.nic.poll_cq(self.cq.id) {
            Some(c) => Poll::Ready(c),
            None => {
                h.wait_cq(self.cq.id, cx.waker());
                Poll::Pending
            }
        }
    }
}

/// Future of [`Context::memory_changed`].
pub struct MemoryChanged {
    host: Shared,
    rank: Rank,
    armed: bool,
}

impl Future for MemoryChanged {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskCx<'_>) -> Poll<()> {
        if self.armed {
            return Poll::Ready(());
        }
        self.armed = true;
        let i = self.rank.index();
        let mut h = self.host.borrow_mut();
        let m = &mut h.waiters.memory;
        if m.len() <= i {
            m.resize_with(i + 1, Vec::new);
        }
        m[i].push(cx.waker().clone());
        Poll::Pending
    }
}

/// Future of [`Context::sleep`].
pub struct Sleep {
    host: Shared,
    rank: Rank,
    until: SimTime,
    armed: bool,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskCx<'_>) -> Poll<()> {
        let now = self.host.borrow().nic.now();
        if now >= self.until {
            return Poll::Ready(());
        }
        if !self.armed {
            self.armed = true;
            let t = self.until;
            let mut h = self.host.borrow_mut();
            let id = h.nic.set_timer(self.rank, t);
            h.waiters.timers.insert(id, cx.waker().clone());
        }
        Poll::Pending
    }
}

/// A local scatter/gather element: `len` bytes of `mr` at `offset`.
#[derive(Clone, Copy, Debug)]
pub struct Sge<'a> {
    pub mr: &'a Mr,
    pub offset: u64,
    pub len: u64,
}

/// A remote scatter/gather element.
#[derive(Clone, Copy, Debug)]
pub struct RemoteSeg {
    pub buf: RemoteBuf,
    pub len: u64,
}

/// An RDMA write work request.
#[derive(Clone, Debug)]
pub struct WriteWr {
    local: Mr,
    offset: u64,
    len: u64,
    remote: RemoteBuf,
    wr_id: u64,
    signaled: bool,
    notify: Option<CqId>,
    reply_word: Option<RemoteBuf>,
    local_completion: bool,
}

impl WriteWr {
    /// Write `len` bytes from `local` at `offset` to `remote`; signaled, no notification.
    pub fn new(local: &Mr, offset: u64, len: u64, remote: RemoteBuf) -> Self {
        WriteWr {
            local: local.clone(),
            offset,
            len,
            remote,
            wr_id: 0,
            signaled: true,
            notify: None,
            reply_word: None,
            local_completion: false,
        }
    }
    pub fn wr_id(mut self, id: u64) -> Self {
        self.wr_id = id;
        self
    }
    pub fn unsignaled(mut self) -> Self {
        self.signaled = false;
        self
    }
    /// RDMAW-with-notification: a completion also appears on the target's `cq`.
    pub fn notify(mut self, cq: &Cq) -> Self {
        self.notify = Some(cq.id);
        self
    }
    /// Complete by a local event, when the last packet has left the NIC, instead of when the
    /// target acknowledges the landed data.
    pub fn local_completion(mut self) -> Self {
        self.local_completion = true;
        self
    }

    /// RDMAW-with-reply-word: the target increments the u64 at `word` when the data has landed.
    /// The word must be on the write's target rank; its key is checked there with the data's
    /// (a bad key or address refuses the whole write: nothing written, nothing incremented).
    pub fn reply_word(mut self, word: RemoteBuf) -> Self {
        self.reply_word = Some(word);
        self
    }
}

/// A queue pair.
#[derive(Clone)]
pub struct Qp {
    ctx: Context,
    cq: CqId,
    peer: Option<Rank>,
    num: QpNum,
    rail: u8,
    function: u8,
    fast: bool,
}

impl Qp {
    /// The queue-pair number (see [`Context::qp_handle`]).
    pub fn num(&self) -> QpNum {
        self.num
    }

    /// Mark this queue pair's messages "fast" (Sunway): engines serve them before all others.
    pub fn fast(mut self) -> Self {
        self.fast = true;
        self
    }

    /// Post through PCIe function `f` (0 = PF, 1.. = VFs; SR-IOV).
    pub fn on_function(mut self, f: u8) -> Self {
        self.function = f;
        self
    }

    /// Use NIC port `rail` for fixed port selection.
    pub fn on_rail(mut self, rail: u8) -> Self {
        self.rail = rail;
        self
    }

    fn target(&self, call: &'static str, target: Rank) -> Result<(), VerbsError> {
        match self.peer {
            Some(p) if p != target => Err(VerbsError::WrongPeer { call, peer: p, target }),
            _ => Ok(()),
        }
    }

    /// Post an RDMA write.
    pub fn post_write(&self, wr: WriteWr) -> Result<(), VerbsError> {
        self.ctx.own(&wr.local, "post_write", wr.offset, wr.len)?;
        self.target("post_write", wr.remote.rank)?;
        if let Some(w) = wr.reply_word.filter(|w| w.rank != wr.remote.rank) {
            return Err(VerbsError::ReplyWordRank {
                word: w.rank,
                target: wr.remote.rank,
            });
        }
        let op = Op::Write {
            local: wr.local.addr + wr.offset,
            len: wr.len,
            remote: wr.remote.addr,
            rkey: wr.remote.rkey,
            notify_cq: wr.notify,
            reply_word: wr.reply_word.map(|w| (w.addr, w.rkey)),
        };
        self.post_with(wr.remote.rank, op, wr.wr_id, wr.signaled, wr.local_completion)
    }

    fn post(&self, dst: Rank, op: Op, wr_id: u64, signaled: bool) -> Result<(), VerbsError> {
        self.post_with(dst, op, wr_id, signaled, false)
    }

    fn post_with(
        &self,
        dst: Rank,
        op: Op,
        wr_id: u64,
        signaled: bool,
        local_completion: bool,
    ) -> Result<(), VerbsError> {
        let req = Request {
            src: self.ctx.rank,
            dst,
            op,
            cq: self.cq,
            wr_id,
            signaled,
            qp: self.num,
            rail: self.rail,
            function: self.function,
            fast: self.fast,
            local_completion,
        };
        self.ctx.host.borrow_mut().nic.post(req)?;
        Ok(())
    }

    fn local_segs(&self, call: &'static str, local: &[Sge]) -> Result<Vec<(u64, u64)>, VerbsError> {
        local
            .iter()
            .map(|s| {
                self.ctx
                    .own(s.mr, call, s.offset, s.len)
                    .map(|_| (s.mr.addr + s.offset, s.len))
            })
            .collect()
    }

    fn remote_segs(&self, call: &'static str, remote: &[RemoteSeg]) -> Result<(Rank, u32, Vec<Seg>), VerbsError> {
        let first = remote.first().map(|r| r.buf).unwrap_or(RemoteBuf {
            rank: self.peer.unwrap_or(self.ctx.rank),
            addr: 0,
            rkey: 0,
        });
        if let Some(bad) = remote.iter().find(|r| r.buf.rank != first.rank) {
            return Err(VerbsError::WrongPeer {
                call,
                peer: first.rank,
                target: bad.buf.rank,
            });
        }
        self.target(call, first.rank)?;
        Ok((
            first.rank,
            first.rkey,
            remote.iter().map(|r| (r.buf.addr, r.len)).collect(),
        ))
    }

    /// cHPP PUT with Chain-DMA lists: gather `local`, scatter into `remote` (one target, one
    /// key); only the totals must match. `notify`: also complete on the target's CQ.
    pub fn post_put(
        &self,
        local: &[Sge],
        remote: &[RemoteSeg],
        notify: Option<&Cq>,
        wr_id: u64,
    ) -> Result<(), VerbsError> {
        let l = self.local_segs("post_put", local)?;
        let (dst, rkey, r) = self.remote_segs("post_put", remote)?;
        self.post(
            dst,
            Op::Put {
                local: l,
                remote: r,
                rkey,
                notify_cq: notify.map(|c| c.id),
            },
            wr_id,
            true,
        )
    }

    /// cHPP GET with Chain-DMA lists: the target's send engine PUTs `remote` into `local`.
    pub fn post_get(&self, local: &[Sge], remote: &[RemoteSeg], wr_id: u64) -> Result<(), VerbsError> {
        let l = self.local_segs("post_get", local)?;
        let (dst, rkey, r) = self.remote_segs("post_get", remote)?;
        self.post(
            dst,
            Op::Get {
                local: l,
                remote: r,
                rkey,
            },
            wr_id,
            true,
        )
    }

    /// cHPP NAP (≤ `nic.nap_buffer` bytes) to `dst`: lands in a pool buffer there, which
    /// always gets a completion event. `immediate`: the data travels in the descriptor.
    pub fn post_nap(
        &self,
        dst: Rank,
        local: &Mr,
        offset: u64,
        len: u64,
        immediate: bool,
        wr_id: u64,
    ) -> Result<(), VerbsError> {
        self.ctx.own(local, "post_nap", offset, len)?;
        self.target("post_nap", dst)?;
        self.post(
            dst,
            Op::Nap {
                local: local.addr + offset,
                len,
                immediate,
            },
            wr_id,
            true,
        )
    }

    /// Asynchronous queue message: `len` bytes of `local` at `offset` into the next buffer of
    /// the target's receive queue `to`. `reliable`: acknowledged, a missing buffer is an error
    /// completion here; unreliable: completes when sent and is dropped if no buffer is posted.
    pub fn post_send(
        &self,
        local: &Mr,
        offset: u64,
        len: u64,
        to: RemoteRq,
        reliable: bool,
        wr_id: u64,
    ) -> Result<(), VerbsError> {
        self.ctx.own(local, "post_send", offset, len)?;
        self.target("post_send", to.rank)?;
        self.post(
            to.rank,
            Op::Send {
                local: local.addr + offset,
                len,
                rq: to.id,
                reliable,
            },
            wr_id,
            true,
        )
    }

    /// FSM (fast short message, Sunway): gather up to 128 B from `local` into one message written
    /// by PIO (no descriptor fetch, no data read) and write it to `remote`.
    pub fn post_fsm(&self, local: &[Sge], remote: RemoteBuf, wr_id: u64) -> Result<(), VerbsError> {
        let l = self.local_segs("post_fsm", local)?;
        self.target("post_fsm", remote.rank)?;
        self.post(
            remote.rank,
            Op::Fsm {
                gather: l,
                remote: remote.addr,
                rkey: remote.rkey,
            },
            wr_id,
            true,
        )
    }

    /// Remote atomic on the u64 at `remote`; the old value is stored at `result` (8 bytes of a
    /// local region) when given, and is in the completion's `value`.
    pub fn post_atomic(
        &self,
        op: AtomicOp,
        remote: RemoteBuf,
        operand: u64,
        compare: u64,
        result: Option<(&Mr, u64)>,
        wr_id: u64,
    ) -> Result<(), VerbsError> {
        self.atomic(op, 8, remote, (operand, compare), result, wr_id)
    }

    /// [`Qp::post_atomic`] on the u32 at `remote` (4-byte aligned): operands and the old value
    /// are taken modulo 2^32; `result` receives 4 bytes.
    pub fn post_atomic32(
        &self,
        op: AtomicOp,
        remote: RemoteBuf,
        operand: u32,
        compare: u32,
        result: Option<(&Mr, u64)>,
        wr_id: u64,
    ) -> Result<(), VerbsError> {
        self.atomic(op, 4, remote, (operand.into(), compare.into()), result, wr_id)
    }

    fn atomic(
        &self,
        op: AtomicOp,
        width: u8,
        remote: RemoteBuf,
        (operand, compare): (u64, u64),
        result: Option<(&Mr, u64)>,
        wr_id: u64,
    ) -> Result<(), VerbsError> {
        self.target("post_atomic", remote.rank)?;
        let result = match result {
            Some((mr, off)) => {
                self.ctx.own(mr, "post_atomic", off, u64::from(width))?;
                Some(mr.addr + off)
            }
            None => None,
        };
        let op = Op::Atomic {
            op,
            width,
            remote: remote.addr,
            rkey: remote.rkey,
            operand,
            compare,
            result,
        };
        self.post(remote.rank, op, wr_id, true)
    }

    /// Post an RDMA read of `len` bytes from `remote` into `local` at `offset`.
    pub fn post_read(
        &self,
        local: &Mr,
        offset: u64,
        len: u64,
        remote: RemoteBuf,
        wr_id: u64,
    ) -> Result<(), VerbsError> {
        self.ctx.own(local, "post_read", offset, len)?;
        self.target("post_read", remote.rank)?;
        let op = Op::Read {
            local: local.addr + offset,
            len,
            remote: remote.addr,
            rkey: remote.rkey,
        };
        self.post(remote.rank, op, wr_id, true)
    }
}

/// A two-node world for documentation examples.
#[doc(hidden)]
pub fn doc_world() -> World {
    use hpcnet_fabric::config::*;
    use hpcnet_fabric::topology::{build, GridConfig, TopologyConfig};
    let topo = build(&TopologyConfig::Mesh(GridConfig {
        k: vec![2],
        concentration: 1,
        radix: None,
    }))
    .expect("mesh");
    let fabric = FabricConfig {
        link: LinkConfig {
            lanes: 4,
            lane_rate: hpcnet_des::BitsPerSec::gbps(25.0),
            encoding: Encoding::B64B66,
            latency: SimTime::from_ns(10),
            switching: Switching::CutThrough,
            ..LinkConfig::default()
        },
        link_overrides: Vec::new(),
        router: RouterConfig {
            vcs: 2,
            credit_unit: hpcnet_des::Bytes(64),
            private_credits: 32,
            shared_credits: 0,
            latency: SimTime::from_ns(20),
            arbitration: Arbitration::RoundRobin,
            vc_select: VcSelect::RoundRobin,
            node_injection: NodeInjection::PerVc,
            multicast_tables: 32,
            ..RouterConfig::default()
        },
        packet: PacketConfig::default(),
        routing: RoutingConfig::DimensionOrder {
            deadlock: DeadlockAvoidance::Bubble,
            tie: hpcnet_fabric::config::TieRule::Positive,
        },
        faults: FaultConfig::default(),
    };
    let net = hpcnet_fabric::Network::new(topo, fabric).expect("network");
    World::new(net, hpcnet_nic::NicConfig::default())
}
