//! The world: the packet network plus one NIC and one host memory per node, on one event queue.
//!
//! Message path (spec 01 SWHNI, spec 02 cHPP send/receive engines):
//! 1. **Doorbell**: the CPU posts a descriptor and rings the doorbell; it reaches the NIC
//!    `host.doorbell_latency` later and queues on a message engine (chosen by the queue pair).
//! 2. **Engine** (one message at a time, in order): fetches the descriptor by DMA (one read round
//!    trip), spends the operation's processing time, then reads the data by DMA: the first bytes
//!    arrive one read round trip later and the rest stream at the host read rate (PCIe rate, TLP
//!    overhead, read tags). A NAP-immediate carries its data in the descriptor: no data read; its
//!    first `immediate_inline` bytes come with the descriptor's first read, the engine extracts
//!    the rest at `immediate_rate` (default `engine_rate`). Packets of `packet.max_payload` bytes
//!    leave as soon as their data is in the NIC, no faster than the engine's data path allows:
//!    header and payload at `engine_rate` plus `packet_overhead`, paid once per host read
//!    completion (`min(host.read_request, host.max_payload)` bytes) the packet is assembled from
//!    and at least once per packet. An engine keeps at most `max_in_flight` messages awaiting
//!    completion.
//!    With `nic.descriptor_prefetch = N > 0` the engine is a two-stage pipeline (cHPP send engine,
//!    spec 02: doorbell FIFO → descriptor read → descriptor extract → data read → data extract →
//!    packetise): the descriptor stage (fetch + processing) of later messages runs while an
//!    earlier message's data is read and sent, at most N processed descriptors ahead of the data
//!    stage. The data stage stays serial per engine (its data path is free again only when the
//!    previous message's last packet is out, so an engine's packets leave in message order) and
//!    per PCIe link (`read_busy`). An idle engine behaves exactly as without prefetch.
//! 3. **Ports**: each packet goes to the rail named in the request (fixed) or to the rail with
//!    the shorter queue (adaptive), so packets of one message may arrive out of order.
//! 4. **Receive**: each packet is processed (`rx_overhead`) and written to host memory by DMA on
//!    the first free PCIe link, in arrival order; the target checks range and key on the first
//!    packet (a refused message writes nothing). When every byte has landed the message completes
//!    at the target: reply word incremented, notification queued, acknowledgement sent back.
//! 5. **Completion** at the initiator when the acknowledgement arrives (writes, PUTs, NAPs) or
//!    when the last byte of the returned data has landed (reads, GETs).
//!
//! Operations: RDMA write and cHPP PUT (Chain-DMA gather/scatter lists whose totals match), RDMA
//! read and cHPP GET (a request packet carrying the descriptor; the target's engine executes it
//! as a write back, "R2W", after `writeback_overhead` and without a descriptor fetch),
//! and cHPP NAP (no target address: the data lands in a buffer taken from the target's
//! pre-posted pool and a completion event is always written). Messages between the two host
//! interfaces of one NIC never enter the network: they cross the NIC after `loopback_latency`.
//!
//! Simplifications: the source data is copied when the engine starts the message (not TLP by
//! TLP); without `nic.descriptor_prefetch` a descriptor fetch is not overlapped with the previous
//! message's data; with it, a message's descriptor fetch competes with no data read for the
//! PCIe link or read tags, its data reads are issued as soon as its descriptor is processed
//! and queue behind the link's earlier reads, and a message's data-stage timing is fixed when
//! its descriptor stage starts (a later full transmit queue delays the packets, not the
//! schedule); acknowledgements are header-only packets on the request's rail.

use crate::config::{FunctionArbitration, NicConfig, PortSelect};
use crate::memory::{Memory, MemoryError};
use hpcnet_des::{Bytes, EventQueue, SimTime};
use hpcnet_fabric::net::{NetEvent, Network};
use hpcnet_fabric::topology::NodeId;
use hpcnet_fabric::Packet;
use serde::Serialize;
use std::collections::VecDeque;
use std::task::Waker;

/// A process: one per node in this model.
pub type Rank = NodeId;

/// Identifies a completion queue.
pub type CqId = u32;

/// Identifies a receive queue (per queue pair, or shared: SRQ).
pub type RqId = u32;

/// A contiguous piece of memory: (address, length).
pub type Seg = (u64, u64);

/// An operation a NIC performs for its host.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// RDMA write of `len` bytes from local `local` to `remote` at the target, key `rkey`.
    Write {
        local: u64,
        len: u64,
        remote: u64,
        rkey: u32,
        /// Queue a notification on the target's `notify_cq` when the data has landed.
        notify_cq: Option<CqId>,
        /// Increment the u64 at this target address, protected by this key, when the data has
        /// landed (reply word). A bad address or key refuses the whole write.
        reply_word: Option<(u64, u32)>,
    },
    /// RDMA read of `len` bytes from `remote` at the target into local `local`.
    Read {
        local: u64,
        len: u64,
        remote: u64,
        rkey: u32,
    },
    /// cHPP PUT with Chain-DMA lists: gather `local`, scatter into `remote` (totals must match).
    Put {
        local: Vec<Seg>,
        remote: Vec<Seg>,
        rkey: u32,
        notify_cq: Option<CqId>,
    },
    /// cHPP GET with Chain-DMA lists: gather `remote` at the target, scatter into `local`.
    Get {
        local: Vec<Seg>,
        remote: Vec<Seg>,
        rkey: u32,
    },
    /// cHPP NAP: `len` bytes from `local` to a buffer of the target's pool; the completion event
    /// goes to the pool's CQ. Immediate: the data travels inside the descriptor.
    Nap { local: u64, len: u64, immediate: bool },
    /// Asynchronous queue message (send/receive): `len` bytes from `local` land in the next
    /// buffer posted to receive queue `rq` of the target (a QP's own queue or a shared receive
    /// queue). Reliable: acknowledged, and a missing buffer is an error at the sender;
    /// unreliable: completes when sent, and a message finding no buffer is dropped (spec 01).
    Send {
        local: u64,
        len: u64,
        rq: RqId,
        reliable: bool,
    },
    /// Sunway FSM (fast short message): descriptor and data (gathered from `gather`, at most
    /// [`FSM_MAX`] bytes) are written by PIO into NIC memory, saving the descriptor fetch and the
    /// data read; then an RDMA write to `remote`.
    Fsm { gather: Vec<Seg>, remote: u64, rkey: u32 },
    /// Remote atomic on the little-endian u64 at `remote`; the old value is written to local
    /// `result` (if given) and reported in the completion.
    Atomic {
        op: AtomicOp,
        remote: u64,
        rkey: u32,
        operand: u64,
        compare: u64,
        result: Option<u64>,
    },
}

/// Payload of a read / GET request packet: it carries the descriptor the target's engine
/// executes (cHPP: "the GET packet carries the descriptor").
pub const READ_REQUEST_BYTES: u64 = 32;

/// Largest FSM payload (spec 01).
pub const FSM_MAX: u64 = 128;

/// Remote atomic operations (Sunway / NICEVT add and xor; fetch-add and compare-swap).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum AtomicOp {
    Add,
    Xor,
    FetchAdd,
    /// Write `operand` if the value equals `compare`.
    CompareSwap,
}

impl AtomicOp {
    /// New value from old (returns None when compare-swap does not match).
    pub fn apply(self, old: u64, operand: u64, compare: u64) -> Option<u64> {
        match self {
            AtomicOp::Add | AtomicOp::FetchAdd => Some(old.wrapping_add(operand)),
            AtomicOp::Xor => Some(old ^ operand),
            AtomicOp::CompareSwap => (old == compare).then_some(operand),
        }
    }
}

/// A work request handed to the NIC.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub src: Rank,
    pub dst: Rank,
    pub op: Op,
    /// Local completion queue.
    pub cq: CqId,
    pub wr_id: u64,
    /// Post a completion on success (errors are always reported).
    pub signaled: bool,
    /// Queue pair number; selects the engine (`qp % engines`).
    pub qp: u32,
    /// Rail for fixed port selection.
    pub rail: u8,
    /// PCIe function (0 = physical function, 1.. = virtual functions).
    pub function: u8,
    /// Sunway "fast" flag: the engine serves flagged messages before all others.
    pub fast: bool,
    /// Complete at the initiator as soon as the last packet has left (a local event), instead
    /// of when the target acknowledges that the data landed.
    pub local_completion: bool,
}

/// Completion status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CqeStatus {
    Ok,
    /// The target refused the access (range or key); nothing was written.
    RemoteAccess(MemoryError),
    /// A NAP or reliable queue message found no free buffer; nothing was written.
    NoBuffer,
    /// The posted receive buffer is smaller than the message.
    BufferTooSmall,
}

/// What completed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CqeKind {
    Write,
    Read,
    Put,
    Get,
    Nap,
    Fsm,
    Atomic,
    /// A write or PUT with notification landed here (target side).
    Notify,
    /// A NAP landed here (target side); `addr` is the pool buffer holding it.
    NapReceived,
    Send,
    /// A queue message landed in a posted receive buffer (`wr_id` is the receive's).
    Recv,
}

/// A completion queue entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cqe {
    pub wr_id: u64,
    pub kind: CqeKind,
    pub status: CqeStatus,
    pub bytes: u64,
    /// The peer (target for operations, source for notifications and received NAPs).
    pub peer: Rank,
    /// Buffer address of a received NAP (0 otherwise).
    pub addr: u64,
    /// Old value of an atomic (0 otherwise).
    pub value: u64,
    pub at: SimTime,
}

/// Events of the world.
#[derive(Copy, Clone, Debug)]
pub enum WorldEvent {
    Net(NetEvent),
    /// An unreliable message has left its engine: it completes at the sender.
    Sent {
        msg: u32,
    },
    Doorbell {
        msg: u32,
    },
    EngineFree {
        node: NodeId,
        engine: u32,
    },
    Inject {
        pkt: u32,
    },
    /// A packet reached its destination NIC without the network (loopback).
    Local {
        pkt: u32,
    },
    Landed {
        pkt: u32,
    },
    Timer {
        slot: u32,
    },
}

impl From<NetEvent> for WorldEvent {
    fn from(e: NetEvent) -> Self {
        WorldEvent::Net(e)
    }
}

#[derive(Clone, Debug)]
enum PktKind {
    Data { off: u64, len: u64 },
    ReadReq,
    Ack { status: CqeStatus },
    AtomicReq,
    AtomicResp { status: CqeStatus, old: u64 },
}

#[derive(Clone, Debug)]
struct PktInfo {
    msg: u32,
    kind: PktKind,
    from: NodeId,
    to: NodeId,
    rail: u8,
    /// Receive-buffer space the packet holds at its destination NIC until consumed:
    /// (node, rail, (vc, private, shared)).
    held: Option<(NodeId, u8, (u8, u16, u16))>,
}

/// How a message moves data, normalised from its [`Op`] at post time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Class {
    /// Data from the initiator to the target (write, PUT, NAP).
    Push,
    /// A request to the target, data back (read, GET).
    Pull,
    /// A request carrying operands, the old value back.
    Atomic,
}

#[derive(Clone, Debug)]
struct Msg {
    req: Request,
    class: Class,
    /// Bytes to move.
    len: u64,
    /// Where the data is read, on the node that sends it.
    src_segs: Vec<Seg>,
    /// Where it lands, on the node that receives it (for a NAP: set on arrival).
    dst_segs: Vec<Seg>,
    /// Segments to check against `rkey` at the target (its memory).
    remote_segs: Vec<Seg>,
    rkey: u32,
    /// Bytes being moved (copied from the source when the engine starts).
    data: Vec<u8>,
    landed: u64,
    status: CqeStatus,
    checked: bool,
    /// This message is the write-back of pull message `of`.
    r2w_of: Option<u32>,
    /// Receive-buffer space its request packet holds until the engine takes it (R2W).
    held: Option<(NodeId, u8, (u8, u16, u16))>,
    /// Target-side record of a message the sender completed when it was sent (unreliable queue
    /// message, or local completion).
    unreliable_copy: bool,
    /// Receive buffer's wr_id (queue messages), set when a buffer is taken.
    recv_wr: u64,
    engine: u32,
}

#[derive(Clone, Debug, Default)]
struct Engine {
    /// Send queues: per function, `nic.virtual_interfaces` FIFOs (queue pair mod that count),
    /// arbitrated by `nic.function_arbitration`.
    queues: Vec<VecDeque<u32>>,
    /// Bit q set when send queue q is not empty: arbitration skips empty queues a word at a time.
    ready: Vec<u64>,
    /// Write-backs of reads/GETs (driven by request packets).
    internal: VecDeque<u32>,
    /// Messages posted with the "fast" flag: served before everything else.
    fast: VecDeque<u32>,
    rr: usize,
    /// It takes no new message: without prefetch until the current message's last packet is
    /// out; with `nic.descriptor_prefetch` while its descriptor stage is occupied.
    busy: bool,
    /// The engine is ready for its next message but its packets wait for room in the transmit
    /// queue: it takes no new message until they are queued.
    blocked_on_tx: bool,
    /// Its packets waiting in the NIC's transmit backlog.
    pending_tx: u32,
    in_flight: u32,
    /// When the engine's data path (data extraction and packet emission) has sent the last
    /// packet of the messages it has taken so far; the next message's data stage starts no
    /// earlier, which keeps an engine's packets in message order.
    data_free: SimTime,
    /// With `nic.descriptor_prefetch = N > 0`: when each of the last N messages entered the data
    /// stage, oldest first. A message may start its descriptor stage once the message N places
    /// before it has entered the data stage.
    entered: VecDeque<SimTime>,
}

impl Engine {
    /// The first non-empty send queue in `lo..hi`.
    fn first_ready(&self, lo: usize, hi: usize) -> Option<usize> {
        if lo >= hi {
            return None;
        }
        let mut w = lo / 64;
        let mut bits = self.ready[w] & (!0u64 << (lo % 64));
        loop {
            if bits != 0 {
                let q = w * 64 + bits.trailing_zeros() as usize;
                return (q < hi).then_some(q);
            }
            w += 1;
            if w * 64 >= hi {
                return None;
            }
            bits = self.ready[w];
        }
    }
}

#[derive(Clone, Debug)]
struct Nic {
    engines: Vec<Engine>,
    /// DMA read and write channels, one of each per PCIe link: busy until.
    read_busy: Vec<SimTime>,
    write_busy: Vec<SimTime>,
    /// NAP buffer pool: free buffer addresses and the CQ their events go to.
    nap_pool: VecDeque<u64>,
    nap_cq: Option<CqId>,
    /// Messages posted and not completed, per function (doorbell FIFO occupancy).
    outstanding: Vec<u32>,
    /// Packets waiting for room in the transmit queue of each (rail, VC class), index
    /// `rail × vcs + class` (bounded `nic.tx_queue`).
    tx_backlog: Vec<VecDeque<u32>>,
    /// Arrived packets waiting for the receive dispatcher, in order, per VC.
    rx_fifo: Vec<VecDeque<u32>>,
}

/// A receive queue: posted buffers (address, length, receive wr_id) and its completion queue.
struct Rq {
    owner: Rank,
    cq: CqId,
    bufs: VecDeque<(u64, u64, u64)>,
}

#[derive(Default)]
struct Cq {
    entries: VecDeque<Cqe>,
    waiter: Option<Waker>,
}

/// NIC-level counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct NicCounters {
    pub messages: u64,
    pub data_packets: u64,
    pub control_packets: u64,
    pub payload_bytes: u64,
    pub wire_bytes: u64,
    /// Messages refused at their target (key, range, no NAP buffer).
    pub refused: u64,
    /// Packets that could not be routed at injection.
    pub unroutable: u64,
    /// Data packets that arrived after a packet sent later in the same message.
    pub out_of_order: u64,
}

/// Network + NICs + memories on one event queue.
pub struct World {
    pub q: EventQueue<WorldEvent>,
    pub net: Network,
    pub cfg: NicConfig,
    header: u32,
    mtu: u32,
    nics: Vec<Nic>,
    pub mem: Vec<Memory>,
    msgs: Vec<Option<Msg>>,
    free_msgs: Vec<u32>,
    /// Highest data offset seen per message at its receiver (out-of-order accounting).
    next_seen: Vec<u64>,
    pkts: Vec<Option<PktInfo>>,
    free_pkts: Vec<u32>,
    /// Data buffers of finished messages, reused by the next messages the engines start.
    data_pool: Vec<Vec<u8>>,
    /// Emptied segment lists of finished messages, reused by the next posts.
    seg_pool: Vec<Vec<Seg>>,
    cqs: Vec<Cq>,
    cq_owner: Vec<NodeId>,
    timers: Vec<Option<Waker>>,
    free_timers: Vec<u32>,
    next_qp: u32,
    rqs: Vec<Rq>,
    unreliable_sent: Vec<u32>,
    /// Processes (host interfaces) per NIC: rank r lives on node r / hosts.
    hosts: u32,
    pub counters: NicCounters,
}

/// A request the NIC cannot accept.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PostError {
    #[error("rank {0} does not exist")]
    NoSuchRank(Rank),
    #[error("completion queue {0} does not exist or belongs to another rank")]
    BadCq(CqId),
    #[error("local buffer: {0}")]
    Local(MemoryError),
    #[error("rail {rail} does not exist (the NIC has {rails})")]
    BadRail { rail: u8, rails: u8 },
    #[error("Chain-DMA lists move {local} bytes locally but {remote} bytes remotely; the totals must match")]
    LengthMismatch { local: u64, remote: u64 },
    #[error("NAP pool buffers must be aligned to their {size} bytes (spec 02), got address {addr:#x}")]
    NapPoolAlignment { addr: u64, size: u64 },
    #[error("a NAP carries at most {max} bytes, asked for {len}")]
    NapTooLarge { len: u64, max: u64 },
    #[error("receive queue {0} does not exist at the target")]
    BadRq(RqId),
    #[error("an FSM carries at most {FSM_MAX} bytes, asked for {0}")]
    FsmTooLarge(u64),
    #[error("function {function} does not exist (the NIC has {functions})")]
    NoSuchFunction { function: u8, functions: u32 },
    #[error("the doorbell FIFO of function {function} is full ({depth} messages outstanding)")]
    DoorbellFifoFull { function: u8, depth: u32 },
}

impl World {
    pub fn new(mut net: Network, cfg: NicConfig) -> World {
        if let Some(b) = cfg.rx_buffer {
            let credits = b.blocks_of(net.config().router.credit_unit).min(u16::MAX as u64) as u16;
            net.set_ejection_credits(credits);
        }
        net.track_injection = cfg.tx_queue > 0;
        let n = net.topo.nodes.len();
        let header = net.config().packet.header.0 as u32;
        let mtu = net.config().packet.max_payload.0 as u32;
        let links = cfg.host.links.max(1) as usize;
        let hosts = cfg.hosts.max(1);
        let queues = (cfg.functions.max(1) * cfg.virtual_interfaces.max(1)) as usize;
        let nics = (0..n)
            .map(|_| Nic {
                engines: vec![
                    Engine {
                        queues: vec![VecDeque::new(); queues],
                        ready: vec![0; queues.div_ceil(64)],
                        ..Engine::default()
                    };
                    cfg.engines as usize
                ],
                outstanding: vec![0; cfg.functions.max(1) as usize],
                tx_backlog: vec![VecDeque::new(); net.rails() as usize * net.config().router.vcs as usize],
                rx_fifo: vec![VecDeque::new(); net.config().router.vcs as usize],
                read_busy: vec![SimTime::ZERO; links],
                write_busy: vec![SimTime::ZERO; links],
                nap_pool: VecDeque::new(),
                nap_cq: None,
            })
            .collect();
        World {
            q: EventQueue::new(),
            net,
            header,
            mtu,
            nics,
            mem: (0..n as u32 * hosts).map(Memory::new).collect(),
            hosts,
            msgs: Vec::new(),
            free_msgs: Vec::new(),
            next_seen: Vec::new(),
            pkts: Vec::new(),
            free_pkts: Vec::new(),
            data_pool: Vec::new(),
            seg_pool: Vec::new(),
            cqs: Vec::new(),
            cq_owner: Vec::new(),
            timers: Vec::new(),
            free_timers: Vec::new(),
            next_qp: 0,
            rqs: Vec::new(),
            unreliable_sent: Vec::new(),
            counters: NicCounters::default(),
            cfg,
        }
    }

    pub fn now(&self) -> SimTime {
        self.q.now()
    }

    /// Number of ranks (nodes × processes per NIC).
    pub fn ranks(&self) -> usize {
        self.nics.len() * self.hosts as usize
    }

    /// The node (NIC) a rank lives on.
    #[inline]
    pub fn node_of(&self, rank: Rank) -> usize {
        (rank / self.hosts) as usize
    }

    /// Payload bytes per packet.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Fraction of wire bytes that are payload for full packets.
    pub fn payload_efficiency(&self) -> f64 {
        self.mtu as f64 / (self.mtu + self.header) as f64
    }

    /// A new queue-pair number; it selects the message engine (`qp % engines`).
    pub fn alloc_qp(&mut self) -> u32 {
        self.next_qp += 1;
        self.next_qp - 1
    }

    pub fn create_cq(&mut self, owner: Rank) -> CqId {
        self.cqs.push(Cq::default());
        self.cq_owner.push(owner);
        (self.cqs.len() - 1) as CqId
    }

    /// Take the oldest entry of `cq`, or register `waker` to be woken when one arrives.
    pub fn poll_cq(&mut self, cq: CqId, waker: Option<&Waker>) -> Option<Cqe> {
        let c = &mut self.cqs[cq as usize];
        let e = c.entries.pop_front();
        if e.is_none() {
            if let Some(w) = waker {
                c.waiter = Some(w.clone());
            }
        }
        e
    }

    fn push_cqe(&mut self, cq: CqId, e: Cqe) {
        let c = &mut self.cqs[cq as usize];
        c.entries.push_back(e);
        if let Some(w) = c.waiter.take() {
            w.wake();
        }
    }

    /// A receive queue of `owner` whose completions go to `cq`; several queue pairs may share
    /// it (SRQ).
    pub fn create_rq(&mut self, owner: Rank, cq: CqId) -> Result<RqId, PostError> {
        if self.cq_owner.get(cq as usize) != Some(&owner) {
            return Err(PostError::BadCq(cq));
        }
        self.rqs.push(Rq {
            owner,
            cq,
            bufs: VecDeque::new(),
        });
        Ok((self.rqs.len() - 1) as RqId)
    }

    /// Post a receive buffer of `len` bytes at `addr` to `rq`.
    pub fn post_recv(&mut self, rq: RqId, addr: u64, len: u64, wr_id: u64) -> Result<(), PostError> {
        let owner = self.rqs.get(rq as usize).ok_or(PostError::BadRq(rq))?.owner;
        self.mem[owner as usize].read(addr, len).map_err(PostError::Local)?;
        self.rqs[rq as usize].bufs.push_back((addr, len, wr_id));
        Ok(())
    }

    /// Pre-post NAP receive buffers: `count` buffers of `nic.nap_buffer` bytes starting at
    /// `addr` (inside a registered region of `rank`), their events going to `cq`.
    pub fn post_nap_buffers(&mut self, rank: Rank, addr: u64, count: u64, cq: CqId) -> Result<(), PostError> {
        if rank as usize >= self.ranks() {
            return Err(PostError::NoSuchRank(rank));
        }
        if self.cq_owner.get(cq as usize) != Some(&rank) {
            return Err(PostError::BadCq(cq));
        }
        let size = self.cfg.nap_buffer.0;
        if !addr.is_multiple_of(size) {
            return Err(PostError::NapPoolAlignment { addr, size });
        }
        self.mem[rank as usize]
            .read(addr, size * count)
            .map_err(PostError::Local)?;
        let nic = &mut self.nics[(rank / self.hosts) as usize];
        nic.nap_cq = Some(cq);
        nic.nap_pool.extend((0..count).map(|i| addr + i * size));
        Ok(())
    }

    /// Give a consumed NAP buffer back to the pool.
    pub fn repost_nap_buffer(&mut self, rank: Rank, addr: u64) {
        if let Some(nic) = self.nics.get_mut((rank / self.hosts) as usize) {
            nic.nap_pool.push_back(addr);
        }
    }

    /// Wake `waker` at time `t`.
    pub fn wake_at(&mut self, t: SimTime, waker: Waker) {
        let slot = if let Some(s) = self.free_timers.pop() {
            self.timers[s as usize] = Some(waker);
            s
        } else {
            self.timers.push(Some(waker));
            (self.timers.len() - 1) as u32
        };
        self.q.schedule(t.max(self.q.now()), WorldEvent::Timer { slot });
    }

    /// Hand a request to the NIC of `req.src` (the doorbell rings now).
    pub fn post(&mut self, req: Request) -> Result<(), PostError> {
        let n = self.ranks() as u32;
        for r in [req.src, req.dst] {
            if r >= n {
                return Err(PostError::NoSuchRank(r));
            }
        }
        if self.cq_owner.get(req.cq as usize) != Some(&req.src) {
            return Err(PostError::BadCq(req.cq));
        }
        let rails = self.net.rails();
        if req.rail >= rails {
            return Err(PostError::BadRail { rail: req.rail, rails });
        }
        if req.function as u32 >= self.cfg.functions {
            return Err(PostError::NoSuchFunction {
                function: req.function,
                functions: self.cfg.functions,
            });
        }
        let depth = self.cfg.doorbell_fifo;
        if depth > 0 && self.nics[(req.src / self.hosts) as usize].outstanding[req.function as usize] >= depth {
            return Err(PostError::DoorbellFifoFull {
                function: req.function,
                depth,
            });
        }
        let total = |segs: &[Seg]| segs.iter().map(|s| s.1).sum::<u64>();
        // Normalise: class, length, source / landing / checked segments.
        let (class, len, src_segs, dst_segs, remote_segs, rkey) = match &req.op {
            Op::Write {
                local,
                len,
                remote,
                rkey,
                notify_cq,
                ..
            } => {
                self.check_cq_of(*notify_cq, req.dst)?;
                (
                    Class::Push,
                    *len,
                    self.segs(&[(*local, *len)]),
                    self.segs(&[(*remote, *len)]),
                    self.segs(&[(*remote, *len)]),
                    *rkey,
                )
            }
            Op::Put {
                local,
                remote,
                rkey,
                notify_cq,
            } => {
                self.check_cq_of(*notify_cq, req.dst)?;
                let (l, r) = (total(local), total(remote));
                if l != r {
                    return Err(PostError::LengthMismatch { local: l, remote: r });
                }
                (
                    Class::Push,
                    l,
                    self.segs(local),
                    self.segs(remote),
                    self.segs(remote),
                    *rkey,
                )
            }
            Op::Read {
                local,
                len,
                remote,
                rkey,
            } => (
                Class::Pull,
                *len,
                self.segs(&[(*remote, *len)]),
                self.segs(&[(*local, *len)]),
                self.segs(&[(*remote, *len)]),
                *rkey,
            ),
            Op::Get { local, remote, rkey } => {
                let (l, r) = (total(local), total(remote));
                if l != r {
                    return Err(PostError::LengthMismatch { local: l, remote: r });
                }
                (
                    Class::Pull,
                    l,
                    self.segs(remote),
                    self.segs(local),
                    self.segs(remote),
                    *rkey,
                )
            }
            Op::Nap { local, len, .. } => {
                let max = self.cfg.nap_buffer.0;
                if *len > max {
                    return Err(PostError::NapTooLarge { len: *len, max });
                }
                (
                    Class::Push,
                    *len,
                    self.segs(&[(*local, *len)]),
                    Vec::new(),
                    Vec::new(),
                    0,
                )
            }
            Op::Send { local, len, rq, .. } => {
                if self.rqs.get(*rq as usize).map(|r| r.owner) != Some(req.dst) {
                    return Err(PostError::BadRq(*rq));
                }
                (
                    Class::Push,
                    *len,
                    self.segs(&[(*local, *len)]),
                    Vec::new(),
                    Vec::new(),
                    0,
                )
            }
            Op::Fsm { gather, remote, rkey } => {
                let l = total(gather);
                if l > FSM_MAX {
                    return Err(PostError::FsmTooLarge(l));
                }
                (
                    Class::Push,
                    l,
                    self.segs(gather),
                    self.segs(&[(*remote, l)]),
                    self.segs(&[(*remote, l)]),
                    *rkey,
                )
            }
            Op::Atomic {
                remote, rkey, result, ..
            } => {
                let local = result.map(|a| self.segs(&[(a, 8)])).unwrap_or_default();
                (Class::Atomic, 8, Vec::new(), local, self.segs(&[(*remote, 8)]), *rkey)
            }
        };
        // The initiator's own buffers must be registered.
        let local_segs = if class == Class::Push { &src_segs } else { &dst_segs };
        // (an atomic's local segment is its optional result buffer)
        for &(a, l) in local_segs {
            self.mem[req.src as usize].read(a, l).map_err(PostError::Local)?;
        }
        let engine = req.qp % self.cfg.engines;
        self.nics[(req.src / self.hosts) as usize].outstanding[req.function as usize] += 1;
        let id = self.alloc_msg(Msg {
            req,
            class,
            len,
            src_segs,
            dst_segs,
            remote_segs,
            rkey,
            data: Vec::new(),
            landed: 0,
            status: CqeStatus::Ok,
            checked: false,
            r2w_of: None,
            held: None,
            unreliable_copy: false,
            recv_wr: 0,
            engine,
        });
        self.counters.messages += 1;
        let t = self.q.now() + self.cfg.host.doorbell_latency;
        self.q.schedule(t, WorldEvent::Doorbell { msg: id });
        Ok(())
    }

    fn check_cq_of(&self, cq: Option<CqId>, owner: Rank) -> Result<(), PostError> {
        match cq {
            Some(c) if self.cq_owner.get(c as usize) != Some(&owner) => Err(PostError::BadCq(c)),
            _ => Ok(()),
        }
    }

    fn alloc_msg(&mut self, m: Msg) -> u32 {
        if let Some(i) = self.free_msgs.pop() {
            self.msgs[i as usize] = Some(m);
            i
        } else {
            self.msgs.push(Some(m));
            self.next_seen.push(0);
            (self.msgs.len() - 1) as u32
        }
    }

    fn msg(&self, id: u32) -> &Msg {
        self.msgs[id as usize].as_ref().expect("live message")
    }

    fn msg_mut(&mut self, id: u32) -> &mut Msg {
        self.msgs[id as usize].as_mut().expect("live message")
    }

    fn alloc_pkt(&mut self, p: PktInfo) -> u32 {
        if let Some(i) = self.free_pkts.pop() {
            self.pkts[i as usize] = Some(p);
            i
        } else {
            self.pkts.push(Some(p));
            (self.pkts.len() - 1) as u32
        }
    }

    fn free_pkt(&mut self, pid: u32) {
        self.pkts[pid as usize] = None;
        self.free_pkts.push(pid);
    }

    /// Pop and handle one event; false when nothing is left.
    pub fn step(&mut self) -> bool {
        let Some((_, ev)) = self.q.pop() else { return false };
        self.handle(ev);
        true
    }

    fn handle(&mut self, ev: WorldEvent) {
        match ev {
            WorldEvent::Net(e) => {
                self.net.handle(&mut self.q, e);
                // Most network events deliver nothing.
                if !self.net.deliveries.is_empty() {
                    let mut ds = std::mem::take(&mut self.net.deliveries);
                    let limited = self.cfg.rx_buffer.is_some();
                    for d in ds.drain(..) {
                        let pid = d.packet.tag as u32;
                        if limited {
                            let held = (d.packet.dst, d.packet.rail, Network::buffer_credits(&d.packet));
                            self.pkts[pid as usize].as_mut().expect("live packet").held = Some(held);
                        }
                        self.receive(pid, (d.packet.dst, d.packet.vc));
                    }
                    // Hand the (empty) buffer back so its allocation is reused.
                    self.net.deliveries = ds;
                }
                // Packets dropped for want of a route are lost; the network counts them and
                // their message never completes.
                if !self.net.injected_from.is_empty() {
                    self.refill_tx();
                }
            }
            WorldEvent::Doorbell { msg } => {
                let (node, engine) = {
                    let m = self.msg(msg);
                    (m.req.src, m.engine)
                };
                let (f, fast) = {
                    let r = &self.msg(msg).req;
                    let vis = self.cfg.virtual_interfaces.max(1);
                    // Queue pairs alternate over engines first (`qp % engines`), then over an
                    // engine's virtual interfaces.
                    let vi = (r.qp / self.cfg.engines.max(1)) % vis;
                    ((r.function as u32 * vis + vi) as usize, r.fast)
                };
                let e = &mut self.nics[(node / self.hosts) as usize].engines[engine as usize];
                if fast {
                    e.fast.push_back(msg);
                } else {
                    e.queues[f].push_back(msg);
                    e.ready[f / 64] |= 1 << (f % 64);
                }
                self.start_next(node, engine);
            }
            WorldEvent::EngineFree { node, engine } => {
                let nic = &mut self.nics[(node / self.hosts) as usize];
                if nic.engines[engine as usize].pending_tx > 0 {
                    // Its packets are not all queued yet: wait for the link (see refill_tx).
                    nic.engines[engine as usize].blocked_on_tx = true;
                    return;
                }
                nic.engines[engine as usize].busy = false;
                self.start_next(node, engine);
            }
            WorldEvent::Inject { pkt } => self.send_packet(pkt),
            WorldEvent::Sent { msg } => self.complete_at_source(msg, CqeStatus::Ok, 0),
            WorldEvent::Local { pkt } => {
                let to = self.pkts[pkt as usize].as_ref().expect("live packet").to;
                self.receive(pkt, (to / self.hosts, 0));
            }
            WorldEvent::Landed { pkt } => self.landed(pkt),
            WorldEvent::Timer { slot } => {
                if let Some(w) = self.timers[slot as usize].take() {
                    self.free_timers.push(slot);
                    w.wake();
                }
            }
        }
    }

    /// Engine processing time of a message's operation.
    fn overhead(&self, op: &Op) -> SimTime {
        let c = &self.cfg;
        match op {
            Op::Nap { .. } => c.nap_overhead.unwrap_or(c.message_overhead),
            Op::Read { .. } | Op::Get { .. } => c.get_overhead.unwrap_or(c.message_overhead),
            _ => c.message_overhead,
        }
    }

    /// The engine's next message: fast messages first, then the send queues and write-backs.
    fn next_message(e: &mut Engine, arb: FunctionArbitration) -> Option<u32> {
        if let Some(id) = e.fast.pop_front() {
            return Some(id);
        }
        // Sources: the send queues 0..n (function-major, then virtual interface) and, as source
        // n, the write-backs handed over by the receive side. Round robin treats them alike (host work and GET service
        // alternate); priority serves write-backs first, then functions in order.
        let n = e.queues.len();
        let internal = !e.internal.is_empty();
        let s = match arb {
            // The first non-empty source from `rr` on, cyclically: queues rr..n, the write-backs
            // (n), queues 0..rr.
            FunctionArbitration::RoundRobin => {
                let r = e.rr;
                e.first_ready(r, n)
                    .or_else(|| internal.then_some(n))
                    .or_else(|| e.first_ready(0, r))?
            }
            FunctionArbitration::Priority => {
                if internal {
                    n
                } else {
                    e.first_ready(0, n)?
                }
            }
        };
        e.rr = (s + 1) % (n + 1);
        if s == n {
            e.internal.pop_front()
        } else {
            let id = e.queues[s].pop_front();
            if e.queues[s].is_empty() {
                e.ready[s / 64] &= !(1 << (s % 64));
            }
            id
        }
    }

    /// Start the next queued message of an idle engine.
    fn start_next(&mut self, node: NodeId, engine: u32) {
        let max = self.cfg.max_in_flight;
        let e = &mut self.nics[(node / self.hosts) as usize].engines[engine as usize];
        if e.busy || e.in_flight >= max {
            return;
        }
        let Some(id) = Self::next_message(e, self.cfg.function_arbitration) else {
            return;
        };
        e.busy = true;
        e.in_flight += 1;
        let now = self.q.now();
        let host = self.cfg.host.clone();
        // What the engine needs of the message (no copy of its segment lists).
        let m = self.msg(id);
        let (len, class, src, dst, rail, held) = (m.len, m.class, m.req.src, m.req.dst, m.req.rail, m.held);
        let internal = m.r2w_of.is_some();
        let fsm = matches!(m.req.op, Op::Fsm { .. });
        let immediate = matches!(m.req.op, Op::Nap { immediate: true, .. });
        let op_overhead = self.overhead(&m.req.op);
        // An unreliable queue message completes at the sender once sent; its packets belong to a
        // target-side copy of the message.
        let sent_completes = matches!(m.req.op, Op::Send { reliable: false, .. }) || m.req.local_completion;
        let unreliable_copy = m.unreliable_copy;
        if internal {
            // A write-back is driven by a request packet, not a doorbell: its descriptor is in
            // the packet, and it holds no in-flight slot beyond its transmission. Taking it
            // frees the request's receive buffer.
            self.nics[(node / self.hosts) as usize].engines[engine as usize].in_flight -= 1;
            self.release(held);
            // Room in the hand-over queue: a stalled receive side may go on.
            if self.cfg.get_queue > 0 {
                self.redispatch(node / self.hosts);
            }
        }
        // Descriptor fetch (a DMA read), then the operation's processing; a write-back is a PUT
        // of the target's send engine whose descriptor came in the request packet (cHPP: GET →
        // local send engine): no fetch, and `writeback_overhead` of processing.
        let mut t = now;
        if fsm {
            // PIO: the descriptor (64 B) and the data were written into NIC memory by the CPU.
            t += host.write_rate().serialization(Bytes(64 + len));
        } else if !internal {
            t += host.read_latency;
        }
        t += if internal {
            self.cfg.writeback_overhead.unwrap_or(self.cfg.message_overhead)
        } else {
            op_overhead
        };
        // Atomics and reads/GETs send one request packet; the engine is free once it has left.
        let request = match class {
            Class::Atomic => Some(PktKind::AtomicReq),
            Class::Pull if !internal => Some(PktKind::ReadReq),
            _ => None,
        };
        // The message's data stage starts when its descriptor is processed and the engine's
        // data path has sent the previous message's packets (always `t` without prefetch: the
        // engine took this message only after that).
        let entry = t.max(self.nics[(node / self.hosts) as usize].engines[engine as usize].data_free);
        if let Some(kind) = request {
            let info = PktInfo {
                msg: id,
                kind,
                from: src,
                to: dst,
                rail,
                held: None,
            };
            let p = self.alloc_pkt(info);
            // The request leaves through the data path, after the previous message's packets.
            self.q.schedule(entry, WorldEvent::Inject { pkt: p });
            let free = self.leave_data_stage(node, engine, t, entry, entry);
            self.q.schedule(free, WorldEvent::EngineFree { node, engine });
            return;
        }
        let id = if sent_completes && !unreliable_copy && class == Class::Push && !internal {
            let copy = self.alloc_msg(Msg {
                unreliable_copy: true,
                ..self.msg(id).clone()
            });
            self.unreliable_sent.push(id);
            copy
        } else {
            id
        };
        // Data movement: gather the source bytes.
        let (from, to) = if internal { (dst, src) } else { (src, dst) };
        let mut data = self.data_pool.pop().unwrap_or_default();
        data.clear();
        data.reserve(len as usize);
        let m = self.msgs[id as usize].as_mut().expect("live message");
        let mem = &self.mem[from as usize];
        for &(a, l) in &m.src_segs {
            data.extend_from_slice(mem.read(a, l).unwrap_or(&[]));
        }
        data.resize(len as usize, 0);
        m.data = data;
        let mtu = self.mtu as u64;
        let npk = len.div_ceil(mtu).max(1);
        // When the data is in the NIC: immediate data comes with the descriptor (its first
        // `immediate_inline` bytes with the descriptor's first read, the rest extracted at the
        // immediate rate); otherwise DMA reads through the engine's PCIe link.
        let link = (engine % host.links.max(1)) as usize;
        // DMA reads are issued when the descriptor is processed and queue behind the link's
        // earlier reads (`read_busy`). Immediate data is part of the descriptor: its extraction
        // belongs to the descriptor stage (spec 02: descriptor read → descriptor extract), which
        // it holds until the last byte is out (`desc_done`); the packets stream out as it goes.
        let (first, rate) = if fsm {
            (t, None)
        } else if immediate {
            (t, self.cfg.immediate_rate.or(self.cfg.engine_rate))
        } else {
            let start = (t + host.read_latency).max(self.nics[(node / self.hosts) as usize].read_busy[link]);
            (start, Some(host.read_rate()))
        };
        let inline = if immediate { self.cfg.immediate_inline.0 } else { 0 };
        let desc_done = if immediate {
            first + rate.map_or(SimTime::ZERO, |r| r.serialization(Bytes(len.saturating_sub(inline))))
        } else {
            t
        };
        let eng_rate = self.cfg.engine_rate;
        // Data read from host memory enters the engine as read completions of at most
        // `min(read_request, max_payload)` bytes, each costing a header and a processing cycle
        // (spec 02's account of the 80 % peak is per returned completion); a packet assembled
        // from several completions pays for each, and every packet for at least one.
        let compl = if immediate || fsm {
            mtu
        } else {
            host.completion_size().0
        };
        let mut emit_free = entry;
        let mut last = first;
        for k in 0..npk {
            let off = k * mtu;
            let plen = (len - off).min(mtu);
            let data_ready = first
                + rate.map_or(SimTime::ZERO, |r| {
                    r.serialization(Bytes((off + plen).saturating_sub(inline)))
                });
            // The engine's data path handles one packet at a time.
            let units = ((off + plen).div_ceil(compl) - off.div_ceil(compl)).max(1);
            let emit = eng_rate.map_or(SimTime::ZERO, |r| {
                r.serialization(Bytes(plen + units * self.header as u64))
            }) + self.cfg.packet_overhead * units;
            let ready = data_ready.max(emit_free + emit);
            emit_free = ready;
            last = ready;
            let p = self.alloc_pkt(PktInfo {
                msg: id,
                kind: PktKind::Data { off, len: plen },
                from,
                to,
                rail,
                held: None,
            });
            self.q.schedule(ready, WorldEvent::Inject { pkt: p });
        }
        if !immediate && !fsm {
            self.nics[(node / self.hosts) as usize].read_busy[link] = last;
        }
        let free = self.leave_data_stage(node, engine, desc_done, entry, last);
        self.q.schedule(free, WorldEvent::EngineFree { node, engine });
        for orig in std::mem::take(&mut self.unreliable_sent) {
            self.q.schedule(last, WorldEvent::Sent { msg: orig });
        }
    }

    /// Record a message's data stage (entered at `entry`, its last packet out at `last`; its
    /// descriptor stage done at `t`) and return when the engine may take its next message:
    /// without prefetch when the last packet is out; with `nic.descriptor_prefetch = N` when
    /// the descriptor stage is done and the message N − 1 places earlier has entered the data
    /// stage (for N = 1: this message), so that at most N processed descriptors wait ahead of
    /// the data stage.
    fn leave_data_stage(&mut self, node: NodeId, engine: u32, t: SimTime, entry: SimTime, last: SimTime) -> SimTime {
        let depth = self.cfg.descriptor_prefetch as usize;
        let e = &mut self.nics[(node / self.hosts) as usize].engines[engine as usize];
        e.data_free = e.data_free.max(last);
        if depth == 0 {
            return last;
        }
        e.entered.push_back(entry);
        while e.entered.len() > depth {
            e.entered.pop_front();
        }
        let oldest = e.entered.front().copied().unwrap_or(entry);
        t.max(oldest)
    }

    /// A packet's data is in the NIC: give it to a port (or the internal path).
    fn send_packet(&mut self, pid: u32) {
        let info = self.pkts[pid as usize].clone().expect("live packet");
        let payload = match info.kind {
            PktKind::Data { len, .. } => {
                self.counters.data_packets += 1;
                self.counters.payload_bytes += len;
                len as u32
            }
            PktKind::AtomicReq => {
                self.counters.control_packets += 1;
                16 // operand and compare value
            }
            PktKind::AtomicResp { .. } => {
                self.counters.control_packets += 1;
                8 // old value
            }
            PktKind::ReadReq => {
                self.counters.control_packets += 1;
                READ_REQUEST_BYTES as u32
            }
            _ => {
                self.counters.control_packets += 1;
                0
            }
        };
        self.counters.wire_bytes += (payload + self.header) as u64;
        // Three paths (spec 01): loopback inside the engine (same host interface), the NIC's
        // on-chip crossbar (the other host interface of the same NIC), or the network.
        let (from_node, to_node) = (self.node_of(info.from) as NodeId, self.node_of(info.to) as NodeId);
        if from_node == to_node {
            let lat = if info.from == info.to {
                self.cfg.loopback_latency
            } else {
                self.cfg.crossbar_latency
            };
            let t = self.q.now() + lat;
            self.q.schedule(t, WorldEvent::Local { pkt: pid });
            return;
        }
        let rails = self.net.rails();
        let rail = match self.cfg.port_select {
            PortSelect::Fixed => info.rail,
            PortSelect::Adaptive => {
                let start = (pid % rails as u32) as u8;
                (0..rails)
                    .map(|k| (start + k) % rails)
                    // The less busy port: the one whose queue drains first at its own rate (a
                    // port renegotiated to fewer lanes counts as busier).
                    .min_by_key(|&r| {
                        let q = self.net.source_queue_len(from_node, r) as u128 + 1;
                        q * 1_000_000_000_000 / self.net.injection_rate(from_node, r).0.max(1) as u128
                    })
                    .unwrap_or(0)
            }
        };
        // A bounded transmit queue per (rail, VC class): packets wait in the NIC, in order, while
        // the link's queue for their VC is full.
        let limit = self.cfg.tx_queue as usize;
        if limit > 0 {
            let class = self.class_of(pid);
            let vc = self.net.routing.injection_vc(class);
            let slot = rail as usize * self.vcs() + class as usize;
            let waiting = !self.nics[from_node as usize].tx_backlog[slot].is_empty();
            if waiting || self.net.source_queue_len_vc(from_node, rail, vc) >= limit {
                if let Some(e) = self.engine_of(pid) {
                    self.nics[from_node as usize].engines[e as usize].pending_tx += 1;
                }
                self.nics[from_node as usize].tx_backlog[slot].push_back(pid);
                return;
            }
        }
        self.inject(pid, from_node, to_node, rail, payload);
    }

    /// The engine that emitted a packet (data, requests); None for the receive side's answers.
    fn engine_of(&self, pid: u32) -> Option<u32> {
        let info = self.pkts[pid as usize].as_ref().expect("live packet");
        match info.kind {
            PktKind::Data { .. } | PktKind::ReadReq | PktKind::AtomicReq => Some(self.msg(info.msg).engine),
            PktKind::Ack { .. } | PktKind::AtomicResp { .. } => None,
        }
    }

    fn vcs(&self) -> usize {
        self.net.config().router.vcs as usize
    }

    /// VC class of a packet: GET requests may have their own (`nic.get_vc`).
    fn class_of(&self, pid: u32) -> u8 {
        let is_get = matches!(
            self.pkts[pid as usize].as_ref().map(|i| &i.kind),
            Some(PktKind::ReadReq)
        );
        if is_get {
            self.cfg.get_vc.unwrap_or(0)
        } else {
            0
        }
    }

    fn inject(&mut self, pid: u32, from: NodeId, to: NodeId, rail: u8, payload: u32) {
        let mut p = Packet::new(pid as u64, from, to, payload, self.header, self.q.now());
        p.rail = rail;
        // GET requests may travel on their own VC class (cHPP's fix for the GET deadlock).
        p.class = self.class_of(pid);
        if self.net.inject(&mut self.q, p).is_err() {
            // No route at all: the packet is lost and its message never completes.
            self.counters.unroutable += 1;
        }
    }

    /// Packets left nodes: move waiting packets into the freed transmit queues, and let
    /// engines blocked on a full queue go on when their NIC's backlog is empty.
    fn refill_tx(&mut self) {
        let limit = self.cfg.tx_queue as usize;
        let reports = std::mem::take(&mut self.net.injected_from);
        let vcs = self.vcs();
        for &(node, rail) in &reports {
            for class in 0..vcs {
                let slot = rail as usize * vcs + class;
                let vc = self.net.routing.injection_vc(class as u8);
                while self.net.source_queue_len_vc(node, rail, vc) < limit {
                    let Some(pid) = self.nics[node as usize].tx_backlog[slot].pop_front() else {
                        break;
                    };
                    if let Some(e) = self.engine_of(pid) {
                        self.nics[node as usize].engines[e as usize].pending_tx -= 1;
                    }
                    let info = self.pkts[pid as usize].as_ref().expect("live packet");
                    let to = (info.to / self.hosts) as NodeId;
                    let payload = match info.kind {
                        PktKind::Data { len, .. } => len as u32,
                        PktKind::AtomicReq => 16,
                        PktKind::AtomicResp { .. } => 8,
                        PktKind::ReadReq => READ_REQUEST_BYTES as u32,
                        PktKind::Ack { .. } => 0,
                    };
                    self.inject(pid, node, to, rail, payload);
                }
            }
            let nic = &mut self.nics[node as usize];
            {
                let waiting: Vec<u32> = (0..nic.engines.len() as u32)
                    .filter(|&e| nic.engines[e as usize].blocked_on_tx && nic.engines[e as usize].pending_tx == 0)
                    .collect();
                for e in waiting {
                    let eng = &mut self.nics[node as usize].engines[e as usize];
                    eng.blocked_on_tx = false;
                    eng.busy = false;
                    self.start_next(node * self.hosts, e);
                }
            }
        }
        self.net.injected_from = reports;
        self.net.injected_from.clear();
    }

    /// Give receive-buffer space back to the network.
    fn release(&mut self, held: Option<(NodeId, u8, (u8, u16, u16))>) {
        if let Some((node, rail, c)) = held {
            self.net.release_ejection(&mut self.q, node, rail, c);
        }
    }

    /// A packet reached the NIC of `node` on VC `vc`: the receive dispatcher takes packets of a
    /// VC in arrival order.
    fn receive(&mut self, pid: u32, (node, vc): (NodeId, u8)) {
        self.nics[node as usize].rx_fifo[vc as usize].push_back(pid);
        if self.nics[node as usize].rx_fifo[vc as usize].len() == 1 {
            self.dispatch(node, vc);
        }
    }

    /// Dispatch the packets at the head of a receive FIFO until it is empty or its head is a GET
    /// the send engine cannot take yet (`nic.get_queue`).
    fn dispatch(&mut self, node: NodeId, vc: u8) {
        let limit = self.cfg.get_queue as usize;
        while let Some(&pid) = self.nics[node as usize].rx_fifo[vc as usize].front() {
            let is_get = matches!(
                self.pkts[pid as usize].as_ref().expect("live packet").kind,
                PktKind::ReadReq
            );
            if is_get && limit > 0 {
                let waiting: usize = self.nics[node as usize].engines.iter().map(|e| e.internal.len()).sum();
                if waiting >= limit {
                    return; // stalled: retried when an engine takes a write-back
                }
            }
            self.nics[node as usize].rx_fifo[vc as usize].pop_front();
            self.arrive(pid);
        }
    }

    /// Retry every stalled receive FIFO of `node`.
    fn redispatch(&mut self, node: NodeId) {
        for vc in 0..self.nics[node as usize].rx_fifo.len() {
            if !self.nics[node as usize].rx_fifo[vc].is_empty() {
                self.dispatch(node, vc as u8);
            }
        }
    }

    /// The dispatcher processes a packet.
    fn arrive(&mut self, pid: u32) {
        let info = self.pkts[pid as usize].clone().expect("live packet");
        let now = self.q.now();
        match info.kind {
            PktKind::Data { off, len } => {
                let seen = &mut self.next_seen[info.msg as usize];
                if off + len <= *seen && off != 0 {
                    self.counters.out_of_order += 1;
                } else {
                    *seen = (*seen).max(off + len);
                }
                // Protection check (or NAP buffer allocation) on the first packet to arrive.
                if !self.msg(info.msg).checked {
                    let status = self.accept(info.msg, info.to);
                    let m = self.msg_mut(info.msg);
                    m.checked = true;
                    m.status = status;
                }
                // DMA write into host memory on the first free PCIe link.
                let nap_tlp = match self.msg(info.msg).req.op {
                    Op::Nap { .. } => self.cfg.nap_upload_per_tlp,
                    _ => None,
                };
                let write = match nap_tlp {
                    Some(per) => per * len.div_ceil(self.cfg.host.max_payload.0).max(1),
                    None => self.cfg.host.write_rate().serialization(Bytes(len)),
                };
                let nic = &mut self.nics[(info.to / self.hosts) as usize];
                let (link, free) = nic
                    .write_busy
                    .iter()
                    .copied()
                    .enumerate()
                    .min_by_key(|&(_, t)| t)
                    .expect("at least one link");
                let start = (now + self.cfg.rx_overhead).max(free);
                let done = start + write;
                nic.write_busy[link] = done;
                self.q.schedule(done, WorldEvent::Landed { pkt: pid });
            }
            PktKind::ReadReq => {
                self.free_pkt(pid);
                let status = self.accept(info.msg, info.to);
                if status != CqeStatus::Ok {
                    self.release(info.held);
                    self.counters.refused += 1;
                    self.msg_mut(info.msg).status = status.clone();
                    self.send_ack(info.msg, info.to, info.from, info.rail, status);
                    return;
                }
                // R2W: the target's engine writes the data back to the requester.
                let m = self.msg(info.msg).clone();
                let engine = m.req.qp % self.cfg.engines;
                // The request keeps its receive-buffer space until the engine takes it.
                let w = self.alloc_msg(Msg {
                    r2w_of: Some(info.msg),
                    checked: true,
                    data: Vec::new(),
                    landed: 0,
                    held: info.held,
                    ..m
                });
                self.nics[(info.to / self.hosts) as usize].engines[engine as usize]
                    .internal
                    .push_back(w);
                self.start_next(info.to, engine);
            }
            PktKind::Ack { status } => {
                self.free_pkt(pid);
                self.release(info.held);
                self.complete_at_source(info.msg, status, 0);
            }
            PktKind::AtomicReq => {
                self.free_pkt(pid);
                self.release(info.held);
                // Read-modify-write in the target's memory, atomically at arrival; the response
                // leaves after the receive processing and one memory round trip.
                let status = self.accept(info.msg, info.to);
                let mut old = 0;
                if status == CqeStatus::Ok {
                    let m = self.msg(info.msg);
                    if let Op::Atomic {
                        op,
                        remote,
                        operand,
                        compare,
                        ..
                    } = m.req.op
                    {
                        let mem = &mut self.mem[info.to as usize];
                        old = u64::from_le_bytes(mem.read(remote, 8).expect("checked").try_into().expect("8 bytes"));
                        if let Some(new) = op.apply(old, operand, compare) {
                            mem.write(remote, &new.to_le_bytes()).expect("checked");
                        }
                    }
                } else {
                    self.counters.refused += 1;
                }
                let p = self.alloc_pkt(PktInfo {
                    msg: info.msg,
                    kind: PktKind::AtomicResp { status, old },
                    from: info.to,
                    to: info.from,
                    rail: info.rail,
                    held: None,
                });
                let t = now + self.cfg.rx_overhead + self.cfg.host.read_latency;
                self.q.schedule(t, WorldEvent::Inject { pkt: p });
            }
            PktKind::AtomicResp { status, old } => {
                self.free_pkt(pid);
                self.release(info.held);
                if status == CqeStatus::Ok {
                    if let Op::Atomic { result: Some(a), .. } = self.msg(info.msg).req.op {
                        self.mem[info.to as usize]
                            .write(a, &old.to_le_bytes())
                            .expect("checked at post");
                    }
                }
                self.complete_at_source(info.msg, status, old);
            }
        }
    }

    /// May message `id` write into `node`? Range and key for addressed operations; a pool
    /// buffer for a NAP (taken here).
    fn accept(&mut self, id: u32, node: NodeId) -> CqeStatus {
        let m = self.msg(id);
        if m.r2w_of.is_some() {
            return CqeStatus::Ok;
        }
        if let Op::Send { len, rq, .. } = m.req.op {
            return match self.rqs[rq as usize].bufs.pop_front() {
                Some((addr, blen, wr)) if blen >= len => {
                    let m = self.msg_mut(id);
                    m.dst_segs = vec![(addr, len)];
                    m.recv_wr = wr;
                    CqeStatus::Ok
                }
                Some((addr, blen, wr)) => {
                    // The buffer is consumed with an error completion at the receiver.
                    let cq = self.rqs[rq as usize].cq;
                    let now = self.q.now();
                    let src = self.msg(id).req.src;
                    let e = Cqe {
                        wr_id: wr,
                        kind: CqeKind::Recv,
                        status: CqeStatus::BufferTooSmall,
                        bytes: blen,
                        peer: src,
                        addr,
                        value: 0,
                        at: now,
                    };
                    self.push_cqe(cq, e);
                    CqeStatus::BufferTooSmall
                }
                None => CqeStatus::NoBuffer,
            };
        }
        if let Op::Nap { len, .. } = m.req.op {
            let nic = &mut self.nics[(node / self.hosts) as usize];
            return match (nic.nap_pool.pop_front(), nic.nap_cq) {
                (Some(buf), Some(_)) => {
                    self.msg_mut(id).dst_segs = vec![(buf, len)];
                    CqeStatus::Ok
                }
                _ => CqeStatus::NoBuffer,
            };
        }
        for &(a, l) in &m.remote_segs {
            if let Err(e) = self.mem[node as usize].check(a, l, m.rkey) {
                return CqeStatus::RemoteAccess(e);
            }
        }
        if let Op::Write {
            reply_word: Some((a, key)),
            ..
        } = m.req.op
        {
            if let Err(e) = self.mem[node as usize].check(a, 8, key) {
                return CqeStatus::RemoteAccess(e);
            }
        }
        CqeStatus::Ok
    }

    /// A data packet's DMA write has finished.
    fn landed(&mut self, pid: u32) {
        let info = self.pkts[pid as usize].take().expect("live packet");
        self.free_pkts.push(pid);
        // Written to memory: the receive buffer is free again.
        self.release(info.held);
        let PktKind::Data { off, len } = info.kind else { return };
        let id = info.msg;
        let m = self.msgs[id as usize].as_mut().expect("live message");
        if m.status == CqeStatus::Ok {
            // Scatter [off, off + len) of the message over the landing segments.
            let mem = &mut self.mem[info.to as usize];
            let mut base = 0u64;
            for &(a, l) in &m.dst_segs {
                let (lo, hi) = (off.max(base), (off + len).min(base + l));
                if lo < hi {
                    mem.write(a + (lo - base), &m.data[lo as usize..hi as usize])
                        .expect("checked on arrival");
                }
                base += l;
            }
        }
        m.landed += len;
        if m.landed < m.len {
            return;
        }
        // Every byte is in place: the data buffer can serve another message.
        let data = std::mem::take(&mut m.data);
        self.data_pool.push(data);
        let m = self.msg(id);
        if let Some(pull) = m.r2w_of {
            // The read / GET is complete at the requester; the write-back is done.
            self.release_msg(id);
            self.complete_at_source(pull, CqeStatus::Ok, 0);
            return;
        }
        let (bytes, src, dst, rail, status, unreliable_copy) = (
            m.len,
            m.req.src,
            m.req.dst,
            m.req.rail,
            m.status.clone(),
            m.unreliable_copy,
        );
        if status == CqeStatus::Ok {
            // The reply word to increment and the notification to queue (cq, wr_id, kind, addr).
            let mut reply = None;
            let mut notify = None;
            match &m.req.op {
                Op::Write {
                    reply_word, notify_cq, ..
                } => {
                    reply = reply_word.map(|(a, _)| a);
                    notify = notify_cq.map(|cq| (cq, m.req.wr_id, CqeKind::Notify, 0));
                }
                Op::Put {
                    notify_cq: Some(cq), ..
                } => notify = Some((*cq, m.req.wr_id, CqeKind::Notify, 0)),
                Op::Send { rq, .. } => {
                    let cq = self.rqs[*rq as usize].cq;
                    let buf = m.dst_segs.first().map_or(0, |s| s.0);
                    notify = Some((cq, m.recv_wr, CqeKind::Recv, buf));
                }
                Op::Nap { .. } => {
                    let cq = self.nics[(dst / self.hosts) as usize]
                        .nap_cq
                        .expect("NAP accepted only with a pool");
                    let buf = m.dst_segs.first().map_or(0, |s| s.0);
                    notify = Some((cq, m.req.wr_id, CqeKind::NapReceived, buf));
                }
                _ => {}
            }
            if let Some(a) = reply {
                self.mem[dst as usize]
                    .fetch_add_u64(a, 1)
                    .expect("reply word checked when the write was accepted");
            }
            if let Some((cq, wr_id, kind, addr)) = notify {
                let now = self.q.now();
                let e = Cqe {
                    wr_id,
                    kind,
                    status: CqeStatus::Ok,
                    bytes,
                    peer: src,
                    addr,
                    value: 0,
                    at: now,
                };
                self.push_cqe(cq, e);
            }
        } else {
            self.counters.refused += 1;
        }
        if unreliable_copy {
            // Nobody waits for an acknowledgement.
            self.release_msg(id);
            return;
        }
        self.send_ack(id, dst, src, rail, status);
    }

    fn send_ack(&mut self, msg: u32, from: NodeId, to: NodeId, rail: u8, status: CqeStatus) {
        let p = self.alloc_pkt(PktInfo {
            msg,
            kind: PktKind::Ack { status },
            from,
            to,
            rail,
            held: None,
        });
        self.send_packet(p);
    }

    /// A segment list holding `segs` (from the pool when it can).
    fn segs(&mut self, segs: &[Seg]) -> Vec<Seg> {
        let mut v = self.seg_pool.pop().unwrap_or_default();
        v.extend_from_slice(segs);
        v
    }

    fn release_msg(&mut self, id: u32) {
        let m = self.msgs[id as usize].take().expect("live message");
        for mut v in [m.src_segs, m.dst_segs, m.remote_segs] {
            if v.capacity() > 0 {
                v.clear();
                self.seg_pool.push(v);
            }
        }
        self.next_seen[id as usize] = 0;
        self.free_msgs.push(id);
    }

    /// The initiator learns that its message is complete.
    fn complete_at_source(&mut self, id: u32, status: CqeStatus, value: u64) {
        let m = self.msg(id);
        let kind = match m.req.op {
            Op::Write { .. } => CqeKind::Write,
            Op::Read { .. } => CqeKind::Read,
            Op::Put { .. } => CqeKind::Put,
            Op::Get { .. } => CqeKind::Get,
            Op::Nap { .. } => CqeKind::Nap,
            Op::Fsm { .. } => CqeKind::Fsm,
            Op::Atomic { .. } => CqeKind::Atomic,
            Op::Send { .. } => CqeKind::Send,
        };
        let (node, function, engine) = (m.req.src, m.req.function, m.engine);
        if m.req.signaled || status != CqeStatus::Ok {
            let now = self.q.now();
            let (cq, e) = (
                m.req.cq,
                Cqe {
                    wr_id: m.req.wr_id,
                    kind,
                    status,
                    bytes: m.len,
                    peer: m.req.dst,
                    addr: 0,
                    value,
                    at: now,
                },
            );
            self.push_cqe(cq, e);
        }
        self.nics[(node / self.hosts) as usize].outstanding[function as usize] -= 1;
        self.nics[(node / self.hosts) as usize].engines[engine as usize].in_flight -= 1;
        self.release_msg(id);
        self.start_next(node, engine);
    }
}
