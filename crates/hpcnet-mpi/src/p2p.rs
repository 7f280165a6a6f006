//! An MPI-like point-to-point layer over the verbs API, under any connection [`Policy`].
//!
//! A [`Job`] gives every rank an [`Endpoint`]: its connection [`Allocator`] (whose recorded
//! allocations the endpoint executes as verbs calls: queue pairs, receive queues, SRQs and
//! pre-posted buffers) and its matching state. Rank programs call [`Endpoint::isend`] /
//! [`Endpoint::irecv`] and complete requests with [`Endpoint::wait`] / [`Endpoint::test`]
//! (blocking [`Endpoint::send`] / [`Endpoint::recv`] are isend/irecv + wait).
//!
//! # Protocols
//!
//! Every message starts with a 64-byte header (kind, source, tag, length, sequence number and
//! protocol words). **Eager**: header + data ≤ `eager_threshold` (8 KB default) and ≤ the
//! receive buffer: the data is copied into a registered send buffer (a pool of
//! `send_buffers`) and sent as a reliable queue message into a pre-posted receive buffer of the
//! target (its per-connection receive queue under RC, its SRQ under RC+SRQ/XRC; under XRC_M the
//! smallest class that fits). The receiver copies it out and re-posts the buffer at once.
//! **Rendezvous** above: a request-to-send carries the source buffer's address and key; the
//! receiver, once the message is matched, RDMA-reads the data into the posted receive buffer and
//! answers with a FIN that completes the send. **UD** has no RDMA: messages are cut into
//! datagrams of at most one MTU and reassembled.
//!
//! Receive buffers are finite: a message that finds none gets the NIC's "no buffer" completion
//! and is sent again `rnr_retry` later (the RNR retry of InfiniBand RC). UD datagrams use the
//! same reliable queue message: the NIC's acknowledgement stands in for the acknowledgement and
//! retransmission a UD library would implement.
//!
//! # Matching
//!
//! Messages from one source are handed to matching in the order they were sent (per-pair
//! sequence numbers; arrivals out of order — retries, several QPs — wait), then matched against
//! the posted receives in posting order (source and tag, or any); unmatched ones join the
//! unexpected queue, which a new receive searches in arrival order. This is MPI's
//! non-overtaking rule.
//!
//! # On-demand connections (group connection)
//!
//! A message to a peer that is neither in the sender's group nor at its index in another group
//! waits while the sender creates its queue pair (`qp_create` + `kernel_transition` of simulated
//! time) and sends a connection request over the static links: to the process with the
//! sender's index in the target's group (or, if that group is short, to the process with the
//! target's index in the sender's group), which forwards it to the target. The target creates
//! its side (paying the same cost) and answers the same way; then the queued messages leave.
//! A connection is created once per pair (per node pair under XRC) and reused. Queue and
//! buffer addresses are exchanged through the job's directory, standing for the connection
//! messages' payload.
//!
//! Progress happens inside library calls (wait/test), as in MPI without a progress thread;
//! after its program returns, a rank keeps serving (re-posting buffers, forwarding connection
//! requests) until every rank has returned and no send is in flight.
//!
//! Cost: per message O(log k) map work (connections, per-pair sequence numbers, sends in
//! flight) plus one copy of eager data at each end; requests live in a slab (O(1), no
//! hashing); the posted and unexpected queues are searched linearly (as in MVAPICH-era
//! libraries). A progress call runs synchronously and builds a future only for a connection
//! step that waits in simulated time; waiting for the next completion is one named future.

use crate::alloc::{Action, Allocator, MemoryAccount, Route, Target};
use crate::policy::{ConnError, ConnParams, Layout, Policy, Transport};
use hpcnet_des::hash::IdMap;
use hpcnet_des::SimTime;
use hpcnet_msg::verbs::{Cq, Mr, NextCqe, Qp, RemoteBuf, RemoteRq, Rq, Sleep, VerbsError};
use hpcnet_msg::{Context, Machine, NicBackend, Rank};
use hpcnet_nic::{Cqe, CqeKind, CqeStatus, QpNum};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context as TaskCx, Poll, Waker};

/// Bytes of the header in front of every message.
pub const HEADER: u64 = 64;

const EAGER: u64 = 1;
const RTS: u64 = 2;
const FIN: u64 = 3;
const CONN_REQ: u64 = 4;
const CONN_ACK: u64 = 5;
const FRAG: u64 = 6;

/// Settings of the point-to-point protocols.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct P2pParams {
    /// Largest eager message, header included (default 8 KB = 8192 B).
    pub eager_threshold: u64,
    /// Registered send buffers for eager data and control messages (default 64).
    pub send_buffers: u64,
    /// Wait before sending again a message that found no receive buffer (default 10 µs).
    pub rnr_retry: SimTime,
    /// Whether messages carry their data (default) or are payload-free: the library's send
    /// and receive buffers are registered as sparse regions that hold only the headers, and
    /// no payload byte is read, copied or moved — lengths, addresses and timing are those of
    /// the real messages. For programs that do not look at the data they receive (their own
    /// buffers then payload-free too, [`hpcnet_msg::Context::reg_mr_sparse`]); a receive
    /// buffer's contents are unspecified.
    pub payload_free: bool,
}

impl Default for P2pParams {
    fn default() -> Self {
        P2pParams {
            eager_threshold: 8192,
            send_buffers: 64,
            rnr_retry: SimTime::from_us(10),
            payload_free: false,
        }
    }
}

/// Policy, allocation sizes and protocol settings of a job.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct JobConfig {
    pub policy: Policy,
    pub conn: ConnParams,
    pub p2p: P2pParams,
}

impl JobConfig {
    pub fn new(policy: Policy) -> JobConfig {
        JobConfig {
            policy,
            conn: ConnParams::default(),
            p2p: P2pParams::default(),
        }
    }
}

/// Errors of point-to-point calls.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MpiError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error(transparent)]
    Conn(#[from] ConnError),
    #[error("{call}: rank {rank} is outside a job of {size} ranks")]
    Rank { call: &'static str, rank: u32, size: u64 },
    #[error("recv: a {len}-byte message from rank {from} (tag {tag}) does not fit the {capacity}-byte receive buffer")]
    Truncate {
        len: u64,
        capacity: u64,
        from: u32,
        tag: u64,
    },
    #[error("{call}: unknown or already completed request {id}")]
    UnknownRequest { call: &'static str, id: u64 },
    #[error("job: the machine has {machine} ranks, the layout {layout}")]
    Size { machine: usize, layout: u64 },
    #[error("protocol: {0}")]
    Protocol(String),
}

/// A pending non-blocking operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Request(u64);

/// What a completed receive (or send) delivered.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub source: Rank,
    pub tag: u64,
    pub len: u64,
}

/// Counters of one endpoint.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct P2pStats {
    pub eager: u64,
    pub rendezvous: u64,
    pub datagrams: u64,
    /// Messages sent again after finding no receive buffer.
    pub rnr_retries: u64,
    /// Connections this rank opened on demand (as initiator or target).
    pub on_demand: u64,
    /// Connection requests and answers forwarded for other ranks.
    pub forwarded: u64,
    /// Largest length the unexpected queue reached.
    pub max_unexpected: u64,
}

/// The shared part of a job: the directory of receive queues, and the termination state.
struct Shared {
    cfg: JobConfig,
    layout: Layout,
    dir: RefCell<Vec<Dir>>,
    /// Rank programs not yet returned.
    running: Cell<usize>,
    /// Sends, reads and connection requests in flight, over all ranks.
    outstanding: Cell<u64>,
    done_wakers: RefCell<Vec<Waker>>,
    errors: RefCell<Vec<(u32, MpiError)>>,
}

impl Shared {
    fn all_done(&self) -> bool {
        self.running.get() == 0 && self.outstanding.get() == 0
    }
    fn check_done(&self) {
        if self.all_done() {
            for w in self.done_wakers.borrow_mut().drain(..) {
                w.wake();
            }
        }
    }
    fn inc(&self) {
        self.outstanding.set(self.outstanding.get() + 1);
    }
    fn dec(&self) {
        self.outstanding.set(self.outstanding.get() - 1);
    }
}

/// Receive queues of one rank, as senders address them.
#[derive(Default)]
struct Dir {
    srq: Vec<Option<RemoteRq>>,
    /// Buffers posted to each SRQ class.
    srq_bufs: Vec<u64>,
    own: IdMap<u64, RemoteRq>,
    ud: Option<RemoteRq>,
}

/// A job: one endpoint per rank of a machine.
pub struct Job {
    shared: Rc<Shared>,
    eps: Vec<Endpoint>,
}

impl Job {
    /// Endpoints for every rank of `m`, placed by `layout` (which must cover the machine's
    /// ranks), with their static connections allocated and buffers posted.
    pub fn new<B: NicBackend + 'static>(m: &Machine<B>, layout: Layout, cfg: JobConfig) -> Result<Job, MpiError> {
        cfg.policy.check()?;
        cfg.conn.check()?;
        let ranks = m.context(Rank(0)).size();
        if ranks as u64 != layout.ranks {
            return Err(MpiError::Size {
                machine: ranks,
                layout: layout.ranks,
            });
        }
        let shared = Rc::new(Shared {
            cfg,
            layout,
            dir: RefCell::new((0..ranks).map(|_| Dir::default()).collect()),
            running: Cell::new(0),
            outstanding: Cell::new(0),
            done_wakers: RefCell::new(Vec::new()),
            errors: RefCell::new(Vec::new()),
        });
        let eps = (0..ranks as u32)
            .map(|r| Endpoint::new(m.context(Rank(r)), shared.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Job { shared, eps })
    }

    pub fn endpoint(&self, rank: Rank) -> Endpoint {
        self.eps[rank.0 as usize].clone()
    }

    /// Runs `program` as rank `rank`'s process; after it returns the endpoint keeps serving
    /// until the whole job is done. An error it returns is kept in [`Job::errors`]. Spawn a
    /// program (possibly empty) for every rank: a rank without one never makes progress, so
    /// it neither re-posts buffers nor relays connection requests.
    pub fn spawn<B, F, Fut>(&self, m: &Machine<B>, rank: Rank, program: F)
    where
        B: NicBackend + 'static,
        F: FnOnce(Endpoint) -> Fut,
        Fut: Future<Output = Result<(), MpiError>> + 'static,
    {
        let ep = self.endpoint(rank);
        self.shared.running.set(self.shared.running.get() + 1);
        let fut = program(ep.clone());
        m.spawn(async move {
            let r = fut.await;
            if let Err(e) = r {
                ep.0.shared.errors.borrow_mut().push((ep.rank().0, e));
            }
            if let Err(e) = ep.finalize().await {
                ep.0.shared.errors.borrow_mut().push((ep.rank().0, e));
            }
        });
    }

    /// Errors returned by rank programs or met while serving, in the order they happened.
    pub fn errors(&self) -> Vec<(u32, MpiError)> {
        self.shared.errors.borrow().clone()
    }

    /// Whether every rank returned and nothing is in flight.
    pub fn finished(&self) -> bool {
        self.shared.all_done()
    }

    pub fn layout(&self) -> Layout {
        self.shared.layout
    }
}

/// A message handed to matching (or waiting in the unexpected queue).
struct Msg {
    src: u64,
    tag: u64,
    len: u64,
    body: Body,
}

enum Body {
    Eager(Vec<u8>),
    Rts { addr: u64, rkey: u32, sreq: u64 },
}

struct Posted {
    req: u64,
    src: Option<u64>,
    tag: Option<u64>,
    mr: Mr,
    off: u64,
    len: u64,
}

/// A message waiting to leave.
struct Out {
    dest: u64,
    hdr: [u64; 8],
    /// Payload bytes after the header (`data` holds them unless the job is payload-free).
    len: u64,
    data: Vec<u8>,
    /// Send request an acknowledgement of this message counts towards.
    req: Option<u64>,
}

struct InFlight {
    qp: Qp,
    rq: RemoteRq,
    slot: u64,
    bytes: u64,
    target: Option<Target>,
    req: Option<u64>,
}

struct ReadOp {
    req: u64,
    src: u64,
    tag: u64,
    len: u64,
    remote: RemoteBuf,
    mr: Mr,
    off: u64,
    sreq: u64,
    target: Option<Target>,
}

#[derive(Default)]
struct ReqState {
    /// Acknowledgements, FINs or data still awaited.
    waiting: u32,
    status: Option<Status>,
    /// Boxed: rare, and large inline (the slab's slots stay small).
    error: Option<Box<MpiError>>,
}

/// The requests not yet consumed, in a slab: a request's handle is its slot (low 32 bits)
/// and the slot's generation (high 32 bits), which goes up when the slot is freed, so that
/// the handle of a consumed request — kept by the program, or in a late acknowledgement — is
/// told from the slot's next request (until the generation wraps, after 2³² reuses of one
/// slot). Slots are reused last freed first, so the slab stays as large as the most requests
/// pending at once. O(1) per operation, no hashing.
struct Requests {
    slots: Vec<ReqSlot>,
    /// First free slot; the free slots are chained through [`ReqSlot::next_free`]
    /// ([`Requests::NONE`] ends the chain), so taking one touches only the slot itself.
    free: u32,
}

struct ReqSlot {
    generation: u32,
    next_free: u32,
    state: Option<ReqState>,
}

impl Default for Requests {
    fn default() -> Self {
        Requests {
            slots: Vec::new(),
            free: Self::NONE,
        }
    }
}

impl Requests {
    const SLOT: u64 = 0xffff_ffff;
    const NONE: u32 = u32::MAX;

    /// Stores `s` and returns its handle.
    fn insert(&mut self, s: ReqState) -> u64 {
        let i = if self.free == Self::NONE {
            self.slots.push(ReqSlot {
                generation: 0,
                next_free: Self::NONE,
                state: None,
            });
            self.slots.len() - 1
        } else {
            self.free as usize
        };
        let e = &mut self.slots[i];
        self.free = std::mem::replace(&mut e.next_free, Self::NONE);
        e.state = Some(s);
        (u64::from(e.generation) << 32) | i as u64
    }

    fn get_mut(&mut self, h: u64) -> Option<&mut ReqState> {
        let e = self.slots.get_mut((h & Self::SLOT) as usize)?;
        if u64::from(e.generation) != h >> 32 {
            return None;
        }
        e.state.as_mut()
    }

    fn remove(&mut self, h: u64) -> Option<ReqState> {
        let i = (h & Self::SLOT) as usize;
        let e = self.slots.get_mut(i)?;
        if u64::from(e.generation) != h >> 32 {
            return None;
        }
        let s = e.state.take()?;
        e.generation = e.generation.wrapping_add(1);
        e.next_free = self.free;
        self.free = i as u32;
        Some(s)
    }
}

enum RqRef {
    Srq(u32),
    Own(u64),
    Ud,
}

/// Receive buffers posted together: `count` buffers of `len` bytes back to back in `mr`, to
/// one receive queue; their work-request ids are `b << 32 | k` for the `b`-th batch and
/// `k < count`. One record per allocation, not per buffer (a static connection adds one SRQ
/// buffer).
struct Slots {
    count: u64,
    mr: Mr,
    len: u64,
    rq: RqRef,
}

/// Posted receive buffers by work-request id, which names the batch and the buffer in it.
#[derive(Default)]
struct SlotTable {
    batches: Vec<Slots>,
}

impl SlotTable {
    /// Buffers per batch at most (the buffer's index has the low 32 bits of an id).
    const BATCH: u64 = 1 << 32;

    /// Receive buffer `id`: its region, offset, length and queue. O(1).
    fn get(&self, id: u64) -> Option<(&Mr, u64, u64, &RqRef)> {
        let b = self.batches.get(usize::try_from(id / Self::BATCH).ok()?)?;
        let k = id % Self::BATCH;
        (k < b.count).then(|| (&b.mr, k * b.len, b.len, &b.rq))
    }
}

/// An open connection: its queue pair's number (the handle is rebuilt from it,
/// [`Context::qp_handle`]), whether its on-demand handshake is still under way, and the sends
/// and reads in flight on it (at most `send_depth`). 12 bytes.
struct Link {
    num: QpNum,
    pending: bool,
    outstanding: u32,
}

/// The open connections of a rank: the static ones, created at start in target order, in
/// sorted parallel vectors of keys ([`key`]) and links (no hash-table slack: 16 bytes per
/// static connection, the bulk of a large job's records — 2.7·10⁸ of them under RC_SRQ at
/// 16 384 processes), and those opened on demand in a map.
#[derive(Default)]
struct Links {
    /// Static connections by key, ascending; a key beside its link, so that a look-up inside
    /// the run touches one cache line.
    statics: Vec<(u32, Link)>,
    extra: IdMap<Target, Link>,
    /// The longest run of consecutive keys in `statics`: (its index, its first key, its length).
    run: (usize, u32, u32),
}

// A static connection's record stays at 16 bytes with its key.
const _: () = assert!(std::mem::size_of::<(u32, Link)>() == 16);

/// Bit of a [`key`] that marks a node (XRC) target.
const NODE_KEY: u32 = 1 << 31;

/// A static target as a 4-byte key ordered as [`Target`]: a process's rank, or a node's number
/// with [`NODE_KEY`] set (ranks and nodes stay below 2³¹: the job's size is a `u32` rank count
/// checked in [`Links::insert`]).
fn key(t: &Target) -> Option<u32> {
    match *t {
        Target::Peer(p) => u32::try_from(p).ok().filter(|&k| k < NODE_KEY),
        Target::Node(n) => u32::try_from(n).ok().filter(|&k| k < NODE_KEY).map(|k| k | NODE_KEY),
    }
}

impl Links {
    /// Ends the set-up: trims the static vectors and finds their longest run of consecutive
    /// keys of one kind.
    fn seal(&mut self) {
        self.statics.shrink_to_fit();
        let keys = &self.statics;
        let mut best = (0, 0, 0);
        let mut i = 0;
        while i < keys.len() {
            let mut j = i + 1;
            while j < keys.len() && keys[j - 1].0 & NODE_KEY == keys[j].0 & NODE_KEY && keys[j - 1].0 + 1 == keys[j].0 {
                j += 1;
            }
            if (j - i) as u32 > best.2 {
                best = (i, keys[i].0, (j - i) as u32);
            }
            i = j;
        }
        self.run = best;
    }

    fn insert(&mut self, t: Target, l: Link) {
        match key(&t) {
            Some(k) if self.extra.is_empty() && self.statics.last().is_none_or(|&(last, _)| last < k) => {
                self.statics.push((k, l));
            }
            _ => {
                self.extra.insert(t, l);
            }
        }
    }

    /// O(1) inside the longest run of consecutive static targets (the own group's nodes or
    /// peers), else O(log k) for k static connections.
    fn get_mut(&mut self, t: &Target) -> Option<&mut Link> {
        let Some(k) = key(t) else {
            return self.extra.get_mut(t);
        };
        let (start, first, len) = self.run;
        let i = k
            .checked_sub(first)
            .filter(|&d| d < len)
            .map(|d| start + d as usize)
            .filter(|&i| self.statics[i].0 == k);
        if let Some(i) = i {
            return Some(&mut self.statics[i].1);
        }
        match self.statics.binary_search_by_key(&k, |e| e.0) {
            Ok(i) => Some(&mut self.statics[i].1),
            Err(_) => self.extra.get_mut(t),
        }
    }
}

struct State {
    alloc: Allocator,
    /// Open connections (one map: a message costs one lookup to check and one to count).
    links: Links,
    ud_qp: Option<Qp>,
    srq: Vec<Rq>,
    own: IdMap<u64, Rq>,
    ud_rq: Option<Rq>,
    slots: SlotTable,
    staging: Mr,
    staging_size: u64,
    free_staging: Vec<u64>,
    /// Work-request id of the next send or RDMA read.
    next_id: u64,
    reqs: Requests,
    posted: VecDeque<Posted>,
    unexpected: VecDeque<Msg>,
    send_seq: IdMap<u64, u64>,
    recv_seq: IdMap<u64, u64>,
    held: BTreeMap<(u64, u64), Msg>,
    frags: IdMap<(u64, u64), (Vec<u8>, u64, u64)>,
    pending: VecDeque<Out>,
    pending_reads: VecDeque<ReadOp>,
    to_connect: BTreeSet<u64>,
    in_flight: IdMap<u64, InFlight>,
    reads: IdMap<u64, ReadOp>,
    retries: VecDeque<(SimTime, u64)>,
    stats: P2pStats,
}

struct Inner {
    ctx: Context,
    cq: Cq,
    shared: Rc<Shared>,
    st: RefCell<State>,
}

/// One rank's point-to-point endpoint.
#[derive(Clone)]
pub struct Endpoint(Rc<Inner>);

enum Event {
    Cqe(Cqe),
    Timer,
    Done,
}

/// A connection step that waits in simulated time (creating a queue pair), met while making
/// progress: the rest of the progress call runs after it.
enum Stall {
    /// Open the connection to this peer on demand.
    Connect(u64),
    /// Answer a connection request from this peer.
    Accept(u64),
}

/// Future of [`Endpoint::next_event`]: the completion queue first, then the retry timer, then
/// (when waiting for the end of the job) the job's state.
struct NextEvent<'a> {
    cq: NextCqe,
    sleep: Option<Sleep>,
    done: Option<&'a Shared>,
}

impl Future for NextEvent<'_> {
    type Output = Event;
    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskCx<'_>) -> Poll<Event> {
        let this = &mut *self;
        if let Poll::Ready(c) = Pin::new(&mut this.cq).poll(cx) {
            return Poll::Ready(Event::Cqe(c));
        }
        if let Some(s) = &mut this.sleep {
            if Pin::new(s).poll(cx).is_ready() {
                return Poll::Ready(Event::Timer);
            }
        }
        if let Some(sh) = this.done {
            if sh.all_done() {
                return Poll::Ready(Event::Done);
            }
            sh.done_wakers.borrow_mut().push(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Endpoint {
    fn new(ctx: Context, shared: Rc<Shared>) -> Result<Endpoint, MpiError> {
        let cfg = shared.cfg;
        let alloc = Allocator::new(cfg.policy, cfg.conn, shared.layout, u64::from(ctx.rank().0), true)?;
        let cq = ctx.create_cq();
        let staging_size = cfg.conn.buffer.max(cfg.conn.ud_mtu).max(HEADER);
        let n = cfg.p2p.send_buffers.max(1);
        let staging = if cfg.p2p.payload_free {
            ctx.reg_mr_sparse(staging_size * n, staging_size, HEADER)
        } else {
            ctx.reg_mr(staging_size * n)
        };
        let st = State {
            alloc,
            links: Links::default(),
            ud_qp: None,
            srq: Vec::new(),
            own: IdMap::default(),
            ud_rq: None,
            slots: SlotTable::default(),
            staging,
            staging_size,
            free_staging: (0..n).rev().collect(),
            next_id: 1,
            reqs: Requests::default(),
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            send_seq: IdMap::default(),
            recv_seq: IdMap::default(),
            held: BTreeMap::new(),
            frags: IdMap::default(),
            pending: VecDeque::new(),
            pending_reads: VecDeque::new(),
            to_connect: BTreeSet::new(),
            in_flight: IdMap::default(),
            reads: IdMap::default(),
            retries: VecDeque::new(),
            stats: P2pStats::default(),
        };
        let ep = Endpoint(Rc::new(Inner {
            ctx,
            cq,
            shared,
            st: RefCell::new(st),
        }));
        ep.apply()?;
        ep.0.st.borrow_mut().links.seal();
        Ok(ep)
    }

    pub fn rank(&self) -> Rank {
        self.0.ctx.rank()
    }

    pub fn size(&self) -> u64 {
        self.0.shared.layout.ranks
    }

    /// The rank's verbs context (registering buffers, local loads and stores, computing time).
    pub fn ctx(&self) -> &Context {
        &self.0.ctx
    }

    /// What the library has allocated for communication so far (the allocator's account).
    pub fn memory(&self) -> MemoryAccount {
        *self.0.st.borrow().alloc.account()
    }

    /// Bytes of the registered send-buffer pool (not part of [`Self::memory`], like the paper's
    /// formulas: constant per process).
    pub fn send_pool_bytes(&self) -> u64 {
        self.0.st.borrow().staging.len
    }

    pub fn stats(&self) -> P2pStats {
        let st = self.0.st.borrow();
        let mut s = st.stats;
        s.on_demand = st.alloc.on_demand();
        s
    }

    /// Connections open now (static and on demand).
    pub fn connections(&self) -> u64 {
        self.0.st.borrow().alloc.connections()
    }

    /// Executes the allocations the allocator recorded.
    fn apply(&self) -> Result<(), MpiError> {
        let me = self.rank().0;
        let ctx = &self.0.ctx;
        let mut st = self.0.st.borrow_mut();
        let actions = st.alloc.take_actions();
        let pf = self.0.shared.cfg.p2p.payload_free;
        for a in actions {
            match a {
                Action::Srq { class, .. } => {
                    let rq = ctx.create_srq(&self.0.cq)?;
                    let mut dir = self.0.shared.dir.borrow_mut();
                    let d = &mut dir[me as usize].srq;
                    if d.len() <= class as usize {
                        d.resize(class as usize + 1, None);
                    }
                    d[class as usize] = Some(rq.remote());
                    st.srq.push(rq);
                }
                Action::SrqBuffers { class, buffer, count } => {
                    let rq = st.srq[class as usize].clone();
                    {
                        let mut dir = self.0.shared.dir.borrow_mut();
                        let b = &mut dir[me as usize].srq_bufs;
                        if b.len() <= class as usize {
                            b.resize(class as usize + 1, 0);
                        }
                        b[class as usize] += count;
                    }
                    post_buffers(ctx, &mut st.slots, &rq, RqRef::Srq(class), buffer, count, pf)?;
                }
                Action::Qp { target, own_rq } => {
                    let qp = match target {
                        Target::Peer(p) => ctx.create_qp(&self.0.cq, Rank(p as u32)),
                        Target::Node(_) => ctx.create_rd_qp(&self.0.cq),
                    };
                    st.links.insert(
                        target,
                        Link {
                            num: qp.num(),
                            pending: false,
                            outstanding: 0,
                        },
                    );
                    if let (Some((buffer, count)), Target::Peer(p)) = (own_rq, target) {
                        let rq = ctx.create_rq(&self.0.cq)?;
                        post_buffers(ctx, &mut st.slots, &rq, RqRef::Own(p), buffer, count, pf)?;
                        self.0.shared.dir.borrow_mut()[me as usize].own.insert(p, rq.remote());
                        st.own.insert(p, rq);
                    }
                }
                Action::UdQp { buffer, count } => {
                    st.ud_qp = Some(ctx.create_rd_qp(&self.0.cq));
                    let rq = ctx.create_rq(&self.0.cq)?;
                    post_buffers(ctx, &mut st.slots, &rq, RqRef::Ud, buffer, count, pf)?;
                    self.0.shared.dir.borrow_mut()[me as usize].ud = Some(rq.remote());
                    st.ud_rq = Some(rq);
                }
            }
        }
        Ok(())
    }

    fn check_rank(&self, call: &'static str, r: Rank) -> Result<u64, MpiError> {
        if u64::from(r.0) >= self.size() {
            return Err(MpiError::Rank {
                call,
                rank: r.0,
                size: self.size(),
            });
        }
        Ok(u64::from(r.0))
    }

    /// The check a zero-length CPU load of `mr` at `offset` makes
    /// ([`Context::read_local`] with `len = 0`, with its errors), without calling the NIC
    /// model: the region belongs to this rank and `offset` is inside it or at its end.
    fn owns(&self, mr: &Mr, offset: u64) -> Result<(), VerbsError> {
        let user = self.rank();
        if mr.rank != user {
            return Err(VerbsError::ForeignBuffer {
                call: "read_local",
                owner: mr.rank,
                user,
            });
        }
        if offset > mr.len {
            return Err(VerbsError::Overrun {
                call: "read_local",
                offset,
                len: 0,
                size: mr.len,
            });
        }
        Ok(())
    }

    /// Largest eager message (header included) towards the receive buffers of this policy.
    fn eager_limit(&self) -> u64 {
        let c = &self.0.shared.cfg;
        c.p2p.eager_threshold.min(c.conn.buffer)
    }

    /// XRC_M: the smallest SRQ class of `dest` whose buffers hold `bytes` and that has buffers
    /// at all (with fewer connections than classes some classes stay empty).
    fn xrc_class(&self, dest: u64, bytes: u64) -> Option<u32> {
        let c = &self.0.shared.cfg.conn;
        let dir = self.0.shared.dir.borrow();
        let bufs = &dir[dest as usize].srq_bufs;
        (0..c.xrc_classes)
            .rev()
            .find(|&k| c.class_buffer(k) >= bytes && bufs.get(k as usize).copied().unwrap_or(0) > 0)
    }

    /// Starts sending `len` bytes of `mr` at `offset` to `dest` with `tag`.
    pub fn isend(&self, mr: &Mr, offset: u64, len: u64, dest: Rank, tag: u64) -> Result<Request, MpiError> {
        let d = self.check_rank("isend", dest)?;
        let me = u64::from(self.rank().0);
        let cfg = self.0.shared.cfg;
        let ud = cfg.policy.transport == Transport::Ud;
        let eager = d == me
            || ud
            || (HEADER + len <= self.eager_limit()
                && (cfg.policy.transport != Transport::XrcM || self.xrc_class(d, HEADER + len).is_some()));
        // Reads check the buffer's owner and range for every protocol.
        let data = if eager && !cfg.p2p.payload_free {
            self.0.ctx.read_local(mr, offset, len)?
        } else {
            self.owns(mr, offset)?;
            if offset.checked_add(len).is_none_or(|e| e > mr.len) {
                return Err(VerbsError::Overrun {
                    call: "isend",
                    offset,
                    len,
                    size: mr.len,
                }
                .into());
            }
            Vec::new()
        };
        let mut st = self.0.st.borrow_mut();
        let seq = {
            let s = st.send_seq.entry(d).or_insert(0);
            *s += 1;
            *s - 1
        };
        if d == me {
            let id = st.reqs.insert(ReqState {
                waiting: 0,
                status: Some(Status { source: dest, tag, len }),
                error: None,
            });
            let msg = Msg {
                src: me,
                tag,
                len,
                body: Body::Eager(data),
            };
            self.arrive(&mut st, msg, seq)?;
            return Ok(Request(id));
        }
        let hdr = |kind: u64, a: u64, b: u64, c: u64| [kind, me, tag, len, seq, a, b, c];
        if ud {
            let chunk = cfg.conn.ud_mtu.saturating_sub(HEADER).max(1);
            let frags = len.div_ceil(chunk).max(1);
            let id = st.reqs.insert(ReqState {
                waiting: frags as u32,
                ..Default::default()
            });
            for f in 0..frags {
                let a = (f * chunk) as usize;
                let b = ((f + 1) * chunk).min(len) as usize;
                st.pending.push_back(Out {
                    dest: d,
                    hdr: hdr(FRAG, a as u64, 0, 0),
                    len: (b - a) as u64,
                    data: data.get(a..b).map(<[u8]>::to_vec).unwrap_or_default(),
                    req: Some(id),
                });
            }
            st.stats.datagrams += frags;
            Ok(Request(id))
        } else if eager {
            let id = st.reqs.insert(ReqState {
                waiting: 1,
                ..Default::default()
            });
            st.pending.push_back(Out {
                dest: d,
                hdr: hdr(EAGER, 0, 0, 0),
                len,
                data,
                req: Some(id),
            });
            st.stats.eager += 1;
            Ok(Request(id))
        } else {
            let id = st.reqs.insert(ReqState {
                waiting: 1,
                ..Default::default()
            });
            st.pending.push_back(Out {
                dest: d,
                hdr: hdr(RTS, mr.addr + offset, u64::from(mr.rkey), id),
                len: 0,
                data: Vec::new(),
                req: None,
            });
            st.stats.rendezvous += 1;
            Ok(Request(id))
        }
    }

    /// Starts receiving at most `len` bytes into `mr` at `offset`, from `source` (any when
    /// `None`) with `tag` (any when `None`).
    pub fn irecv(
        &self,
        mr: &Mr,
        offset: u64,
        len: u64,
        source: Option<Rank>,
        tag: Option<u64>,
    ) -> Result<Request, MpiError> {
        let src = source.map(|s| self.check_rank("irecv", s)).transpose()?;
        // Checks the buffer's owner and range.
        self.owns(mr, offset)?;
        if offset.checked_add(len).is_none_or(|e| e > mr.len) {
            return Err(VerbsError::Overrun {
                call: "irecv",
                offset,
                len,
                size: mr.len,
            }
            .into());
        }
        let mut st = self.0.st.borrow_mut();
        let id = st.reqs.insert(ReqState {
            waiting: 1,
            ..Default::default()
        });
        let p = Posted {
            req: id,
            src,
            tag,
            mr: mr.clone(),
            off: offset,
            len,
        };
        let hit = st
            .unexpected
            .iter()
            .position(|m| p.src.is_none_or(|s| s == m.src) && p.tag.is_none_or(|t| t == m.tag));
        match hit {
            Some(i) => {
                let m = st.unexpected.remove(i).expect("index found");
                self.complete_into(&mut st, p, m)?;
            }
            None => st.posted.push_back(p),
        }
        Ok(Request(id))
    }

    /// Blocking send: isend + wait.
    pub async fn send(&self, mr: &Mr, offset: u64, len: u64, dest: Rank, tag: u64) -> Result<Status, MpiError> {
        let r = self.isend(mr, offset, len, dest, tag)?;
        self.wait(r).await
    }

    /// Blocking receive: irecv + wait.
    pub async fn recv(
        &self,
        mr: &Mr,
        offset: u64,
        len: u64,
        source: Option<Rank>,
        tag: Option<u64>,
    ) -> Result<Status, MpiError> {
        let r = self.irecv(mr, offset, len, source, tag)?;
        self.wait(r).await
    }

    fn take_done(&self, r: Request, call: &'static str) -> Result<Option<Status>, MpiError> {
        let mut st = self.0.st.borrow_mut();
        let Some(s) = st.reqs.get_mut(r.0) else {
            return Err(MpiError::UnknownRequest { call, id: r.0 });
        };
        if s.waiting > 0 {
            return Ok(None);
        }
        let s = st.reqs.remove(r.0).expect("present");
        if let Some(e) = s.error {
            return Err(*e);
        }
        Ok(Some(s.status.unwrap_or(Status {
            source: self.rank(),
            tag: 0,
            len: 0,
        })))
    }

    /// Waits until `r` completes.
    pub async fn wait(&self, r: Request) -> Result<Status, MpiError> {
        loop {
            // `progress`, with no future built unless a connection step waits.
            while let Some(s) = self.progress_now()? {
                self.stall(s).await?;
            }
            if let Some(s) = self.take_done(r, "wait")? {
                return Ok(s);
            }
            if let Event::Cqe(c) = self.next_event(false).await {
                if let Some(s) = self.handle_now(c)? {
                    self.stall(s).await?;
                }
            }
        }
    }

    /// Waits for every request, in order.
    pub async fn waitall(&self, rs: &[Request]) -> Result<Vec<Status>, MpiError> {
        let mut out = Vec::with_capacity(rs.len());
        for &r in rs {
            out.push(self.wait(r).await?);
        }
        Ok(out)
    }

    /// Makes progress and reports whether `r` completed (consuming it if so).
    pub async fn test(&self, r: Request) -> Result<Option<Status>, MpiError> {
        self.progress().await?;
        self.take_done(r, "test")
    }

    /// Serves other ranks until the job is done.
    async fn finalize(&self) -> Result<(), MpiError> {
        let sh = &self.0.shared;
        sh.running.set(sh.running.get() - 1);
        sh.check_done();
        loop {
            self.progress().await?;
            if sh.all_done() {
                sh.check_done();
                return Ok(());
            }
            match self.next_event(true).await {
                Event::Cqe(c) => {
                    if let Some(s) = self.handle_now(c)? {
                        self.stall(s).await?;
                    }
                }
                Event::Timer => {}
                Event::Done => return Ok(()),
            }
        }
    }

    /// The next completion, or the next retry time, or (`until_done`) the end of the job.
    fn next_event(&self, until_done: bool) -> NextEvent<'_> {
        let retry = self.0.st.borrow().retries.front().map(|&(t, _)| t);
        let sleep = retry.map(|t| self.0.ctx.sleep(t.saturating_sub(self.0.ctx.now())));
        NextEvent {
            cq: self.0.cq.next(),
            sleep,
            done: until_done.then_some(&*self.0.shared),
        }
    }

    /// Handles every completion waiting, sends again what is due, opens connections and sends
    /// what can leave.
    async fn progress(&self) -> Result<(), MpiError> {
        while let Some(s) = self.progress_now()? {
            self.stall(s).await?;
        }
        Ok(())
    }

    /// The work of [`Self::progress`] up to the next connection step that waits in simulated
    /// time, which it returns; `None` when progress is complete. Calling it again after the
    /// step goes on where it stopped.
    fn progress_now(&self) -> Result<Option<Stall>, MpiError> {
        while let Some(c) = self.0.cq.poll() {
            if let Some(s) = self.handle_now(c)? {
                return Ok(Some(s));
            }
        }
        self.retry_due()?;
        self.flush()?;
        if let Some(peer) = self.0.st.borrow_mut().to_connect.pop_first() {
            return Ok(Some(Stall::Connect(peer)));
        }
        self.0.shared.check_done();
        Ok(None)
    }

    /// Carries out a connection step.
    async fn stall(&self, s: Stall) -> Result<(), MpiError> {
        match s {
            Stall::Connect(peer) => self.connect(peer).await,
            Stall::Accept(origin) => self.accept(origin).await,
        }
    }

    fn retry_due(&self) -> Result<(), MpiError> {
        let mut st = self.0.st.borrow_mut();
        if st.retries.is_empty() {
            return Ok(());
        }
        let now = self.0.ctx.now();
        while st.retries.front().is_some_and(|&(t, _)| t <= now) {
            let (_, op) = st.retries.pop_front().expect("front");
            let f = &st.in_flight[&op];
            f.qp.post_send(&st.staging, f.slot * st.staging_size, f.bytes, f.rq, true, op)?;
        }
        Ok(())
    }

    /// Whether a message to `dest` may leave now; asks for a connection when it needs one.
    /// On success the connection (if any) counts one more operation in flight, and its queue
    /// pair is returned.
    fn ready(&self, st: &mut State, dest: u64, sd: u64) -> Result<Option<(Target, Qp)>, ()> {
        match st.alloc.route(dest) {
            Route::Conn(t) => {
                // A connection is open exactly when its queue pair exists (the allocator's
                // decisions are executed at once).
                let Some(l) = st.links.get_mut(&t) else {
                    st.to_connect.insert(dest);
                    return Err(());
                };
                if l.pending || u64::from(l.outstanding) >= sd {
                    return Err(());
                }
                l.outstanding += 1;
                let peer = match t {
                    Target::Peer(p) => Some(Rank(p as u32)),
                    Target::Node(_) => None,
                };
                Ok(Some((t, self.0.ctx.qp_handle(&self.0.cq, peer, l.num))))
            }
            _ => Ok(None),
        }
    }

    /// Sends what can leave: queued messages (in order per destination) and RDMA reads.
    fn flush(&self) -> Result<(), MpiError> {
        let sh = &self.0.shared;
        let sd = sh.cfg.conn.send_depth;
        let mut st = self.0.st.borrow_mut();
        let st = &mut *st;
        if !st.pending_reads.is_empty() {
            // Reads of matched rendezvous messages.
            let mut keep = VecDeque::new();
            while let Some(r) = st.pending_reads.pop_front() {
                match self.ready(st, r.src, sd) {
                    Ok(Some((t, qp))) => {
                        let id = st.next_id;
                        st.next_id += 1;
                        qp.post_read(&r.mr, r.off, r.len, r.remote, id)?;
                        sh.inc();
                        st.reads.insert(id, ReadOp { target: Some(t), ..r });
                    }
                    _ => keep.push_back(r),
                }
            }
            // Back into the emptied queue, which keeps its allocation (no free and new
            // allocation per call).
            st.pending_reads.append(&mut keep);
        }
        if st.pending.is_empty() {
            return Ok(());
        }
        // The queue is taken out while messages are posted from it by reference (posting
        // never queues a message), and put back whatever happens.
        let mut pending = std::mem::take(&mut st.pending);
        let r = self.flush_queue(st, &mut pending, sd);
        st.pending = pending;
        r
    }

    /// Posts the messages of `pending` that can leave, in order per destination; the others
    /// stay in order. The leading run of messages that leave is posted in place and dropped
    /// at once (the common case: no message moves); from the first that waits on, the queue
    /// is taken apart and rebuilt.
    fn flush_queue(&self, st: &mut State, pending: &mut VecDeque<Out>, sd: u64) -> Result<(), MpiError> {
        let mut blocked: BTreeSet<u64> = BTreeSet::new();
        let mut sent = 0;
        while let Some(o) = pending.get(sent) {
            if st.free_staging.is_empty() {
                pending.drain(..sent);
                return Ok(());
            }
            if !self.post_out(st, o, sd)? {
                blocked.insert(o.dest);
                break;
            }
            sent += 1;
        }
        pending.drain(..sent);
        if pending.is_empty() {
            return Ok(());
        }
        let mut keep = VecDeque::new();
        while let Some(o) = pending.pop_front() {
            if st.free_staging.is_empty() {
                // No send buffer: nothing behind can leave either. The messages kept so far go
                // back in front of the rest, in order — O(kept), not a copy of the whole queue
                // at each progress call.
                pending.push_front(o);
                while let Some(k) = keep.pop_back() {
                    pending.push_front(k);
                }
                return Ok(());
            }
            if blocked.contains(&o.dest) || !self.post_out(st, &o, sd)? {
                blocked.insert(o.dest);
                keep.push_back(o);
            }
        }
        pending.append(&mut keep);
        Ok(())
    }

    /// Posts message `o` if its destination's connection lets it leave (a send buffer is
    /// free); returns whether it left.
    fn post_out(&self, st: &mut State, o: &Out, sd: u64) -> Result<bool, MpiError> {
        let sh = &self.0.shared;
        let target = match self.ready(st, o.dest, sd) {
            Ok(t) => t,
            Err(()) => return Ok(false),
        };
        let (target, conn_qp) = match target {
            Some((t, q)) => (Some(t), Some(q)),
            None => (None, None),
        };
        let bytes = HEADER + o.len;
        let (qp, rq) = {
            let dir = sh.dir.borrow();
            let d = &dir[o.dest as usize];
            let me = u64::from(self.rank().0);
            match (sh.cfg.policy.transport, target) {
                (Transport::Ud, _) => (st.ud_qp.clone(), d.ud),
                (Transport::Rc, Some(_)) => (conn_qp, d.own.get(&me).copied()),
                (Transport::XrcM, Some(_)) => {
                    // Control messages (header only) fit every class; eager data was
                    // checked against the classes with buffers when it was posted.
                    let k = {
                        let bufs = &d.srq_bufs;
                        (0..sh.cfg.conn.xrc_classes)
                            .rev()
                            .find(|&k| {
                                sh.cfg.conn.class_buffer(k) >= bytes && bufs.get(k as usize).copied().unwrap_or(0) > 0
                            })
                            .unwrap_or(0)
                    };
                    (conn_qp, d.srq.get(k as usize).copied().flatten())
                }
                (_, Some(_)) => (conn_qp, d.srq.first().copied().flatten()),
                (_, None) => (None, None),
            }
        };
        let (Some(qp), Some(rq)) = (qp, rq) else {
            return Err(MpiError::Protocol(format!(
                "rank {} has no queue pair or receive queue towards rank {}",
                self.rank().0,
                o.dest
            )));
        };
        let slot = st.free_staging.pop().expect("checked non-empty");
        let mut head = [0u8; HEADER as usize];
        for (i, w) in o.hdr.iter().enumerate() {
            head[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let at = slot * st.staging_size;
        self.0.ctx.write_local(&st.staging, at, &head)?;
        if !o.data.is_empty() {
            self.0.ctx.write_local(&st.staging, at + HEADER, &o.data)?;
        }
        let id = st.next_id;
        st.next_id += 1;
        qp.post_send(&st.staging, slot * st.staging_size, bytes, rq, true, id)?;
        sh.inc();
        st.in_flight.insert(
            id,
            InFlight {
                qp,
                rq,
                slot,
                bytes,
                target,
                req: o.req,
            },
        );
        Ok(true)
    }

    /// The static partner relaying connection messages from `from` to `to`: the process with
    /// `from`'s index in `to`'s group, or else the one with `to`'s index in `from`'s group.
    fn relay(&self, from: u64, to: u64) -> u64 {
        let g = self.0.shared.cfg.policy.group.unwrap_or(u64::MAX);
        let n = self.size();
        let c = to / g * g + from % g;
        if c < n {
            c
        } else {
            from / g * g + to % g
        }
    }

    /// Opens the connection to `peer` on demand and sends the request.
    async fn connect(&self, peer: u64) -> Result<(), MpiError> {
        if self.0.st.borrow().alloc.connected(peer) {
            return Ok(());
        }
        let c = self.0.shared.cfg.conn;
        self.0.ctx.sleep(c.qp_create + c.kernel_transition).await;
        let me = u64::from(self.rank().0);
        {
            let mut st = self.0.st.borrow_mut();
            st.alloc.connect(peer);
            let relay = self.relay(me, peer);
            st.pending.push_back(Out {
                dest: relay,
                hdr: [CONN_REQ, me, 0, 0, 0, me, peer, 0],
                len: 0,
                data: Vec::new(),
                req: None,
            });
        }
        // The request counts as in flight until its answer arrives.
        self.0.shared.inc();
        self.apply()?;
        // The new queue pair waits for the answer.
        let mut st = self.0.st.borrow_mut();
        if let Route::Conn(t) = st.alloc.route(peer) {
            st.links.get_mut(&t).expect("queue pair created").pending = true;
        }
        Ok(())
    }

    /// Handles one completion; returns the connection step it leads to, if any.
    fn handle_now(&self, c: Cqe) -> Result<Option<Stall>, MpiError> {
        let sh = self.0.shared.clone();
        match c.kind {
            CqeKind::Send => {
                let mut st = self.0.st.borrow_mut();
                if c.status == CqeStatus::NoBuffer {
                    st.stats.rnr_retries += 1;
                    let t = self.0.ctx.now() + sh.cfg.p2p.rnr_retry;
                    st.retries.push_back((t, c.wr_id));
                    return Ok(None);
                }
                if c.status != CqeStatus::Ok {
                    return Err(MpiError::Protocol(format!("send completed with {:?}", c.status)));
                }
                let f = st
                    .in_flight
                    .remove(&c.wr_id)
                    .ok_or_else(|| MpiError::Protocol(format!("unknown send {}", c.wr_id)))?;
                st.free_staging.push(f.slot);
                if let Some(t) = f.target {
                    st.links.get_mut(&t).expect("counted").outstanding -= 1;
                }
                if let Some(r) = f.req {
                    Self::ack(&mut st, r);
                }
                sh.dec();
                Ok(None)
            }
            CqeKind::Read => {
                let mut st = self.0.st.borrow_mut();
                let r = st
                    .reads
                    .remove(&c.wr_id)
                    .ok_or_else(|| MpiError::Protocol(format!("unknown read {}", c.wr_id)))?;
                if c.status != CqeStatus::Ok {
                    return Err(MpiError::Protocol(format!("RDMA read completed with {:?}", c.status)));
                }
                if let Some(t) = r.target {
                    st.links.get_mut(&t).expect("counted").outstanding -= 1;
                }
                sh.dec();
                if let Some(q) = st.reqs.get_mut(r.req) {
                    q.status = Some(Status {
                        source: Rank(r.src as u32),
                        tag: r.tag,
                        len: r.len,
                    });
                    q.waiting = 0;
                }
                let me = u64::from(self.rank().0);
                st.pending.push_back(Out {
                    dest: r.src,
                    hdr: [FIN, me, 0, 0, 0, 0, 0, r.sreq],
                    len: 0,
                    data: Vec::new(),
                    req: None,
                });
                Ok(None)
            }
            CqeKind::Recv => self.received(c),
            k => Err(MpiError::Protocol(format!("unexpected completion {k:?}"))),
        }
    }

    /// Answers a connection request from `origin`: creates this side's queue pair first if
    /// the connection does not exist yet (paying its creation time).
    async fn accept(&self, origin: u64) -> Result<(), MpiError> {
        let me = u64::from(self.rank().0);
        let need = !self.0.st.borrow().alloc.connected(origin);
        if need {
            let cc = self.0.shared.cfg.conn;
            self.0.ctx.sleep(cc.qp_create + cc.kernel_transition).await;
            self.0.st.borrow_mut().alloc.connect(origin);
            self.apply()?;
        }
        let relay = self.relay(me, origin);
        let mut st = self.0.st.borrow_mut();
        if let Route::Conn(t) = st.alloc.route(origin) {
            st.links.get_mut(&t).expect("queue pair created").pending = false;
        }
        st.pending.push_back(Out {
            dest: relay,
            hdr: [CONN_ACK, me, 0, 0, 0, me, origin, 0],
            len: 0,
            data: Vec::new(),
            req: None,
        });
        Ok(())
    }

    fn ack(st: &mut State, req: u64) {
        if let Some(q) = st.reqs.get_mut(req) {
            q.waiting = q.waiting.saturating_sub(1);
        }
    }

    /// Handles the arrival of a message; returns the connection step a request for a
    /// connection to this rank leads to.
    fn received(&self, c: Cqe) -> Result<Option<Stall>, MpiError> {
        if c.status != CqeStatus::Ok {
            return Err(MpiError::Protocol(format!("receive completed with {:?}", c.status)));
        }
        let me = u64::from(self.rank().0);
        if c.bytes < HEADER {
            return Err(MpiError::Protocol(format!("{}-byte message without header", c.bytes)));
        }
        let payload_free = self.0.shared.cfg.p2p.payload_free;
        let payload = c.bytes - HEADER;
        let (hdr, data) = {
            let st = self.0.st.borrow();
            let (mr, off, blen, rq) = st
                .slots
                .get(c.wr_id)
                .ok_or_else(|| MpiError::Protocol(format!("completion of unknown receive buffer {}", c.wr_id)))?;
            let mut head = [0u8; HEADER as usize];
            self.0.ctx.read_local_into(mr, off, &mut head)?;
            let data = if payload_free || payload == 0 {
                Vec::new()
            } else {
                self.0.ctx.read_local(mr, off + HEADER, payload)?
            };
            let rq = match rq {
                RqRef::Srq(k) => &st.srq[*k as usize],
                RqRef::Own(p) => &st.own[p],
                RqRef::Ud => st.ud_rq.as_ref().expect("UD queue"),
            };
            if payload_free {
                // The header is copied out: the simulator stops holding the buffer's header
                // slot until a message lands in it again.
                self.0.ctx.discard_local(mr, off, blen)?;
            }
            rq.post_recv(mr, off, blen, c.wr_id)?;
            let mut h = [0u64; 8];
            for (i, w) in h.iter_mut().enumerate() {
                *w = u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
            }
            (h, data)
        };
        let [kind, src, tag, len, seq, a, b, cw] = hdr;
        match kind {
            EAGER | RTS => {
                let body = if kind == EAGER {
                    Body::Eager(data)
                } else {
                    Body::Rts {
                        addr: a,
                        rkey: b as u32,
                        sreq: cw,
                    }
                };
                let mut st = self.0.st.borrow_mut();
                self.arrive(&mut st, Msg { src, tag, len, body }, seq)?;
                Ok(None)
            }
            FRAG => {
                let mut st = self.0.st.borrow_mut();
                let e = st
                    .frags
                    .entry((src, seq))
                    .or_insert_with(|| (vec![0; if payload_free { 0 } else { len as usize }], 0, len));
                if !payload_free {
                    let end = (a as usize + data.len()).min(e.0.len());
                    e.0[a as usize..end].copy_from_slice(&data[..end - a as usize]);
                }
                e.1 += payload;
                if e.1 >= e.2 {
                    let (buf, _, _) = st.frags.remove(&(src, seq)).expect("present");
                    self.arrive(
                        &mut st,
                        Msg {
                            src,
                            tag,
                            len,
                            body: Body::Eager(buf),
                        },
                        seq,
                    )?;
                }
                Ok(None)
            }
            FIN => {
                let mut st = self.0.st.borrow_mut();
                Self::ack(&mut st, cw);
                Ok(None)
            }
            CONN_REQ | CONN_ACK if b != me => {
                // Forward over the static link to the final destination.
                let mut st = self.0.st.borrow_mut();
                st.stats.forwarded += 1;
                st.pending.push_back(Out {
                    dest: b,
                    hdr,
                    len: 0,
                    data: Vec::new(),
                    req: None,
                });
                Ok(None)
            }
            CONN_REQ => Ok(Some(Stall::Accept(a))),
            CONN_ACK => {
                let mut st = self.0.st.borrow_mut();
                if let Route::Conn(t) = st.alloc.route(a) {
                    if let Some(l) = st.links.get_mut(&t) {
                        l.pending = false;
                    }
                }
                self.0.shared.dec();
                Ok(None)
            }
            k => Err(MpiError::Protocol(format!("unknown message kind {k}"))),
        }
    }

    /// Hands `m` (the `seq`-th message from its source) to matching in sending order.
    fn arrive(&self, st: &mut State, m: Msg, seq: u64) -> Result<(), MpiError> {
        let src = m.src;
        let expect = st.recv_seq.entry(src).or_insert(0);
        if seq != *expect {
            st.held.insert((src, seq), m);
            return Ok(());
        }
        *expect += 1;
        self.deliver(st, m)?;
        if st.held.is_empty() {
            // Nothing arrived ahead of its turn (the common case): no look-up of the next.
            return Ok(());
        }
        loop {
            let next = st.recv_seq[&src];
            let Some(m) = st.held.remove(&(src, next)) else {
                break;
            };
            *st.recv_seq.get_mut(&src).expect("present") += 1;
            self.deliver(st, m)?;
        }
        Ok(())
    }

    fn deliver(&self, st: &mut State, m: Msg) -> Result<(), MpiError> {
        let hit = st
            .posted
            .iter()
            .position(|p| p.src.is_none_or(|s| s == m.src) && p.tag.is_none_or(|t| t == m.tag));
        match hit {
            Some(i) => {
                let p = st.posted.remove(i).expect("index found");
                self.complete_into(st, p, m)
            }
            None => {
                st.unexpected.push_back(m);
                st.stats.max_unexpected = st.stats.max_unexpected.max(st.unexpected.len() as u64);
                Ok(())
            }
        }
    }

    /// Completes receive `p` with message `m`: copies eager data, or starts the RDMA read.
    fn complete_into(&self, st: &mut State, p: Posted, m: Msg) -> Result<(), MpiError> {
        let status = Status {
            source: Rank(m.src as u32),
            tag: m.tag,
            len: m.len,
        };
        let truncated = m.len > p.len;
        match m.body {
            Body::Eager(data) => {
                let q = st.reqs.get_mut(p.req).expect("posted request");
                q.waiting = 0;
                q.status = Some(status);
                if truncated {
                    q.error = Some(Box::new(MpiError::Truncate {
                        len: m.len,
                        capacity: p.len,
                        from: m.src as u32,
                        tag: m.tag,
                    }));
                } else if !data.is_empty() {
                    // (An empty store is a no-op: `irecv` checked the buffer's owner and range.)
                    self.0.ctx.write_local(&p.mr, p.off, &data)?;
                }
            }
            Body::Rts { addr, rkey, sreq } => {
                if truncated {
                    let q = st.reqs.get_mut(p.req).expect("posted request");
                    q.waiting = 0;
                    q.error = Some(Box::new(MpiError::Truncate {
                        len: m.len,
                        capacity: p.len,
                        from: m.src as u32,
                        tag: m.tag,
                    }));
                    // Release the sender without moving data.
                    let me = u64::from(self.rank().0);
                    st.pending.push_back(Out {
                        dest: m.src,
                        hdr: [FIN, me, 0, 0, 0, 0, 0, sreq],
                        len: 0,
                        data: Vec::new(),
                        req: None,
                    });
                    return Ok(());
                }
                st.pending_reads.push_back(ReadOp {
                    req: p.req,
                    src: m.src,
                    tag: m.tag,
                    len: m.len,
                    remote: RemoteBuf {
                        rank: Rank(m.src as u32),
                        addr,
                        rkey,
                    },
                    mr: p.mr,
                    off: p.off,
                    sreq,
                    target: None,
                });
            }
        }
        Ok(())
    }
}

/// Registers `count` buffers of `size` bytes and posts them to `rq`; their receive ids index
/// `slots`.
fn post_buffers(
    ctx: &Context,
    slots: &mut SlotTable,
    rq: &Rq,
    which: RqRef,
    size: u64,
    count: u64,
    payload_free: bool,
) -> Result<(), MpiError> {
    if count > SlotTable::BATCH {
        return Err(MpiError::Protocol(format!(
            "{count} receive buffers posted at once: at most {} per allocation",
            SlotTable::BATCH
        )));
    }
    let mr = if payload_free {
        ctx.reg_mr_sparse(size * count, size, HEADER)
    } else {
        ctx.reg_mr(size * count)
    };
    let first = slots.batches.len() as u64 * SlotTable::BATCH;
    rq.post_recv_run(&mr, 0, size, count, first)?;
    slots.batches.push(Slots {
        count,
        mr,
        len: size,
        rq: which,
    });
    Ok(())
}

/// A machine of `nodes` nodes with `per_node` processes each on a line of routers, for tests and
/// examples.
#[doc(hidden)]
pub fn line_world(nodes: u32, per_node: u32) -> hpcnet_nic::World {
    use hpcnet_fabric::config::*;
    use hpcnet_fabric::topology::{build, GridConfig, TopologyConfig};
    let topo = build(&TopologyConfig::Mesh(GridConfig {
        k: vec![nodes],
        concentration: 1,
        radix: None,
    }))
    .expect("mesh");
    let fabric = FabricConfig {
        link: LinkConfig {
            lanes: 4,
            lane_rate: hpcnet_des::BitsPerSec::gbps(10.0),
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
            latency: SimTime::from_ns(100),
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
    let nic = hpcnet_nic::NicConfig {
        hosts: per_node,
        ..hpcnet_nic::NicConfig::default()
    };
    hpcnet_nic::World::new(net, nic)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(n: u32) -> ReqState {
        ReqState {
            waiting: n,
            ..Default::default()
        }
    }

    #[test]
    fn request_slots_are_reused_and_old_handles_are_refused() {
        let mut r = Requests::default();
        let a = r.insert(waiting(1));
        let b = r.insert(waiting(2));
        assert_ne!(a, b);
        assert_eq!(r.get_mut(b).map(|s| s.waiting), Some(2));
        assert_eq!(r.remove(a).map(|s| s.waiting), Some(1));
        // Gone, and refused again.
        assert!(r.get_mut(a).is_none());
        assert!(r.remove(a).is_none());
        // The freed slot holds the next request under a new handle; the old one stays refused.
        let c = r.insert(waiting(3));
        assert_eq!(c & Requests::SLOT, a & Requests::SLOT);
        assert_ne!(c, a);
        assert!(r.get_mut(a).is_none());
        assert_eq!(r.get_mut(c).map(|s| s.waiting), Some(3));
        // The slab grows only with the requests pending at once.
        assert_eq!(r.slots.len(), 2);
        assert!(r.get_mut(7).is_none(), "a slot never used");
        assert_eq!(r.remove(b).map(|s| s.waiting), Some(2));
        assert_eq!(r.remove(c).map(|s| s.waiting), Some(3));
        // Both slots free, the last freed first.
        let d = r.insert(waiting(4));
        let e = r.insert(waiting(5));
        assert_eq!(
            (d & Requests::SLOT, e & Requests::SLOT),
            (a & Requests::SLOT, b & Requests::SLOT)
        );
        let f = r.insert(waiting(6));
        assert_eq!(f & Requests::SLOT, 2);
        assert_eq!(r.slots.len(), 3);
    }
}
