//! The world: the packet network plus one NIC per node and one host memory per rank, on one
//! event queue. This module owns the tables (messages, packets) and dispatches events to the
//! pipeline stages; each stage lives in its own module:
//!
//! | stage | module | owns |
//! |---|---|---|
//! | operation model | [`crate::op`] | what a posted request becomes (validation, normalisation) |
//! | send engines | [`crate::engine`] | doorbell → descriptor → data stages, engine arbitration |
//! | host interface | [`crate::host`] | PCIe read and write channels |
//! | transmit | [`crate::tx`] | packet kinds and sizes, rail choice, bounded transmit backlog |
//! | receive | [`crate::rx`] | dispatch, protection check, landing, acknowledgements |
//! | completion | [`crate::cq`] | completion and receive queues, NAP pools, completions |
//!
//! New NIC hardware plugs in at two named points: [`World::next_message`] (where an engine takes
//! its next message) and [`World::landed`] (where a packet's data has landed in host memory).
//! The hardware collective unit ([`crate::coll`]) and the triggered offload unit
//! ([`crate::triggered::timed`]) have their own descriptors and packets: their packets are
//! told apart by their tag where the network delivers them, next to those points.
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

use crate::coll::{is_coll_tag, CollEvent, CollUnit};
use crate::config::NicConfig;
use crate::cq::{Cq, CqeStatus, Rq};
use crate::engine::Engine;
use crate::host::{HostLinks, HostTiming};
use crate::ids::{CqId, Placement, QpNum, Rank, Seg, TimerId};
use crate::memory::Memory;
use crate::op::Msg;
use crate::pkt::PktInfo;
use crate::reliability::RelUnit;
use crate::rx_agg::{RxAggCounters, RxBlock};
use crate::triggered::timed::{is_trig_tag, TrigEvent, TrigUnit};
use hpcnet_des::stats::{Registry, StatRecord};
use hpcnet_des::{EventQueue, SimTime};
use hpcnet_fabric::net::{Blocked, Endpoints, NetEvent, NetKind, Network};
use hpcnet_fabric::topology::NodeId;
use hpcnet_fabric::Packet;
use serde::Serialize;
use std::collections::VecDeque;

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
    /// The time-out of a receive aggregation block ([`crate::rx_agg`]).
    RxFlush {
        node: NodeId,
        gen: u32,
    },
    /// The DMA writes a held read or atomic request waits for have landed ([`crate::rx`]).
    RxWake {
        node: NodeId,
    },
    Timer {
        id: TimerId,
    },
    /// A step of the hardware collective unit.
    Coll(CollEvent),
    Trig(TrigEvent),
}

impl From<NetEvent> for WorldEvent {
    fn from(e: NetEvent) -> Self {
        WorldEvent::Net(e)
    }
}

/// What the world tells the software above it after a step: a completion queue received an
/// entry, a timer expired, or the NIC wrote into the memory of a rank that asked to watch it
/// ([`World::watch_memory`]: a message landed there or an atomic changed it). The message
/// library turns these into task wake-ups; the NIC model itself knows nothing of tasks.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    Cq(CqId),
    Timer(TimerId),
    Memory(Rank),
    /// A packet `rank` sent was lost in the network (a failed component, or no route): its
    /// message will not complete unless a transport sends it again ([`World::lost_packets`]).
    PacketLost(Rank),
}

/// A packet of a message that the network lost or dropped, as the NIC that sent it sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LostPacket {
    pub at: SimTime,
    /// Sender and receiver ranks.
    pub from: Rank,
    pub to: Rank,
    /// The NIC's message id (stable while the message is incomplete).
    pub msg: u32,
    /// "data", "read_request", "ack", "atomic_request", "atomic_response", "probe" or
    /// "probe_response".
    pub kind: &'static str,
    /// Message bytes the packet carried (data packets): offset and length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<(u64, u64)>,
    /// Why, as reports name it (`lost_in_cable`, `unreachable`, `random_loss`, ...).
    pub cause: &'static str,
}

/// One NIC: its stages' state.
#[derive(Clone, Debug)]
pub(crate) struct Nic {
    pub(crate) engines: Vec<Engine>,
    pub(crate) host: HostLinks,
    /// NAP buffer pool: free buffer addresses and the CQ their events go to.
    pub(crate) nap_pool: VecDeque<u64>,
    pub(crate) nap_cq: Option<CqId>,
    /// Messages posted and not completed, per function (doorbell FIFO occupancy).
    pub(crate) outstanding: Vec<u32>,
    /// Packets waiting for room in the transmit queue of each (rail, VC class), index
    /// `rail × vcs + class` (bounded `nic.tx_queue`).
    pub(crate) tx_backlog: Vec<VecDeque<u32>>,
    /// Arrived packets waiting for the receive dispatcher, in order, per VC.
    pub(crate) rx_fifo: Vec<VecDeque<u32>>,
    /// The receive aggregation block ([`crate::rx_agg`]).
    pub(crate) agg: RxBlock,
    /// When the last DMA write into host memory issued so far is done.
    pub(crate) writes_done: SimTime,
    /// A read or atomic request at the head of a receive FIFO waits until then.
    pub(crate) rx_hold: Option<SimTime>,
}

/// A counter of the NICs; [`NIC_STATS`] gives each its name, unit and description.
#[derive(Copy, Clone, Debug)]
pub(crate) enum NicStat {
    Messages,
    DataPackets,
    ControlPackets,
    PayloadBytes,
    WireBytes,
    Refused,
    Unroutable,
    OutOfOrder,
    Lost,
    Timeouts,
    Probes,
    Retransmitted,
    Duplicates,
    OutOfWindow,
    MessagesFailed,
    MessagesLost,
}

/// Name, unit and description of each [`NicStat`], in its order.
const NIC_STATS: [(&str, &str, &str); 16] = [
    ("nic.messages", "messages", "work requests accepted by the NICs"),
    ("nic.data_packets", "packets", "packets carrying message data"),
    (
        "nic.control_packets",
        "packets",
        "requests, acknowledgements and atomic responses",
    ),
    ("nic.payload_bytes", "bytes", "message data sent"),
    ("nic.wire_bytes", "bytes", "bytes sent, headers included"),
    (
        "nic.refused",
        "messages",
        "messages refused at their target (key, range, buffer)",
    ),
    ("nic.unroutable", "packets", "packets with no route at injection"),
    (
        "nic.out_of_order",
        "packets",
        "data packets arriving after a later packet of their message",
    ),
    (
        "nic.packets_lost",
        "packets",
        "packets the network lost or dropped (failed components, no route, nic.loss_rate)",
    ),
    ("nic.timeouts", "events", "retransmission timers that expired"),
    ("nic.probes", "packets", "status probes sent after a timeout"),
    (
        "nic.retransmitted",
        "packets",
        "data packets and requests sent again by the transport",
    ),
    (
        "nic.duplicates",
        "packets",
        "packets discarded at their receiver as already received or of a completed message",
    ),
    (
        "nic.out_of_window",
        "packets",
        "queue-message packets discarded ahead of their window (no buffering out of order)",
    ),
    (
        "nic.messages_failed",
        "messages",
        "reliable messages given up after nic.reliability.retries timeouts",
    ),
    (
        "nic.messages_lost",
        "messages",
        "unreliable messages that lost a packet (not recovered)",
    ),
];

/// Index of the first reliability counter in [`NIC_STATS`].
const REL_STATS: usize = NicStat::Timeouts as usize;

/// The NICs' counter values (a fixed array: the hot path indexes it with constants).
#[derive(Default)]
pub(crate) struct NicStats([u64; 16]);

impl NicStats {
    #[inline(always)]
    pub(crate) fn add(&mut self, s: NicStat, n: u64) {
        self.0[s as usize] += n;
    }

    #[inline(always)]
    fn get(&self, s: NicStat) -> u64 {
        self.0[s as usize]
    }
}

/// A snapshot of the NICs' counters ([`World::statistics`] has them with names and units).
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
    /// Packets the network lost or dropped ([`World::lost_packets`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub lost: u64,
    /// Retransmission timers that expired (`[nic.reliability]`).
    #[serde(skip_serializing_if = "is_zero")]
    pub timeouts: u64,
    /// Status probes sent.
    #[serde(skip_serializing_if = "is_zero")]
    pub probes: u64,
    /// Data packets and requests sent again.
    #[serde(skip_serializing_if = "is_zero")]
    pub retransmitted: u64,
    /// Packets discarded at their receiver as duplicates or late copies.
    #[serde(skip_serializing_if = "is_zero")]
    pub duplicates: u64,
    /// Queue-message packets discarded ahead of their window.
    #[serde(skip_serializing_if = "is_zero")]
    pub out_of_window: u64,
    /// Reliable messages given up after the last retry.
    #[serde(skip_serializing_if = "is_zero")]
    pub messages_failed: u64,
    /// Unreliable messages that lost a packet.
    #[serde(skip_serializing_if = "is_zero")]
    pub messages_lost: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the network handed the NICs during one network event (the NIC side of the
/// fabric's [`Endpoints`] seam): processed right after the event, in order.
#[derive(Default)]
pub(crate) struct Arrivals {
    delivered: Vec<Packet>,
    injected: Vec<(NodeId, u8)>,
    /// Report injections (only a bounded transmit queue needs them).
    track_injection: bool,
}

impl Endpoints for Arrivals {
    #[inline]
    fn deliver(&mut self, packet: &mut Packet, _at: SimTime) {
        self.delivered.push(packet.take());
    }
    #[inline]
    fn injected(&mut self, node: NodeId, rail: u8) {
        if self.track_injection {
            self.injected.push((node, rail));
        }
    }
}

/// Network + NICs + memories on one event queue.
pub struct World {
    pub(crate) q: EventQueue<WorldEvent>,
    /// When the watchdog last found packets slow rather than stuck (its clock restarts there).
    checked_at: SimTime,
    pub(crate) net: Network,
    pub(crate) cfg: NicConfig,
    pub(crate) timing: HostTiming,
    pub(crate) header: u32,
    pub(crate) mtu: u32,
    pub(crate) nics: Vec<Nic>,
    pub(crate) mem: Vec<Memory>,
    /// Per rank: read and atomic requests posted whose answer has not come back (spec 03: the
    /// NIC's hardware counter of outstanding reads, +1 per request, −1 per reply).
    pub(crate) reads_outstanding: Vec<u32>,
    pub(crate) place: Placement,
    pub(crate) msgs: Vec<Option<Msg>>,
    pub(crate) free_msgs: Vec<u32>,
    /// Highest data offset seen per message at its receiver (out-of-order accounting).
    pub(crate) next_seen: Vec<u64>,
    pub(crate) pkts: Vec<Option<PktInfo>>,
    pub(crate) free_pkts: Vec<u32>,
    /// Data buffers of finished messages, reused by the next messages the engines start.
    pub(crate) data_pool: Vec<Vec<u8>>,
    /// Emptied segment lists of finished messages, reused by the next posts.
    pub(crate) seg_pool: Vec<Vec<Seg>>,
    pub(crate) cqs: Vec<Cq>,
    pub(crate) rqs: Vec<Rq>,
    pub(crate) next_qp: u32,
    next_timer: u32,
    pub(crate) unreliable_sent: Vec<u32>,
    pub(crate) arrivals: Arrivals,
    pub(crate) notices: Vec<Notice>,
    /// Per rank: the keys of the regions whose writes by the NIC are reported as
    /// [`Notice::Memory`], each with how many have landed there.
    pub(crate) watched: Vec<Vec<(u32, u64)>>,
    pub(crate) stats: NicStats,
    /// The hardware collective unit of every NIC.
    pub(crate) coll: CollUnit,
    pub(crate) trig: TrigUnit,
    /// Drops of the network already looked at, and the NIC packets among them.
    drops_seen: usize,
    lost: Vec<LostPacket>,
    /// The run's seed, for the NIC models' random streams ([`World::set_seed`]).
    pub(crate) seed: u64,
    /// Generation of each message slot (bumped when the slot is released), so that packets of
    /// a message that has completed are recognised ([`crate::reliability`]).
    pub(crate) gens: Vec<u32>,
    /// The transport reliability unit and the random loss.
    pub(crate) rel: RelUnit,
    /// Receive aggregation and receive-side host-write counters.
    pub(crate) agg_stats: RxAggCounters,
}

impl World {
    /// Seed the NIC models' random streams (the offload unit's arrival jitter) from the run's
    /// seed. Without it the seed is 0.
    pub fn set_seed(&mut self, seed: u64) {
        self.seed = seed;
    }

    pub fn new(mut net: Network, cfg: NicConfig) -> World {
        if let Some(b) = cfg.rx_buffer {
            let credits = b.blocks_of(net.config().router.credit_unit).min(u16::MAX as u64) as u16;
            net.set_ejection_credits(credits);
        }
        let n = net.topo.nodes.len();
        let header = net.config().packet.header.0 as u32;
        let mtu = net.config().packet.max_payload.0 as u32;
        let links = cfg.host.links.max(1) as usize;
        let place = Placement::new(cfg.hosts);
        let queues = (cfg.functions.max(1) * cfg.virtual_interfaces.max(1)) as usize;
        let nics = (0..n)
            .map(|_| Nic {
                engines: vec![Engine::new(queues); cfg.engines as usize],
                outstanding: vec![0; cfg.functions.max(1) as usize],
                tx_backlog: vec![VecDeque::new(); net.rails() as usize * net.config().router.vcs as usize],
                rx_fifo: vec![VecDeque::new(); net.config().router.vcs as usize],
                host: HostLinks::new(links),
                nap_pool: VecDeque::new(),
                nap_cq: None,
                agg: RxBlock::default(),
                writes_done: SimTime::ZERO,
                rx_hold: None,
            })
            .collect();
        let mut q = EventQueue::new();
        q.reserve_origins(net.origins());
        net.schedule_faults(&mut q);
        let rel = RelUnit::new(&cfg, net.seed(), n);
        World {
            q,
            arrivals: Arrivals {
                track_injection: cfg.tx_queue > 0,
                ..Arrivals::default()
            },
            net,
            header,
            mtu,
            nics,
            mem: (0..n as u32 * place.hosts()).map(Memory::new).collect(),
            reads_outstanding: vec![0; (n as u32 * place.hosts()) as usize],
            place,
            msgs: Vec::new(),
            free_msgs: Vec::new(),
            next_seen: Vec::new(),
            pkts: Vec::new(),
            free_pkts: Vec::new(),
            data_pool: Vec::new(),
            seg_pool: Vec::new(),
            cqs: Vec::new(),
            rqs: Vec::new(),
            next_qp: 0,
            next_timer: 0,
            unreliable_sent: Vec::new(),
            notices: Vec::new(),
            watched: Vec::new(),
            stats: NicStats::default(),
            coll: CollUnit::default(),
            trig: TrigUnit::default(),
            seed: 0,
            timing: HostTiming::new(&cfg.host),
            cfg,
            checked_at: SimTime::ZERO,
            drops_seen: 0,
            lost: Vec::new(),
            gens: Vec::new(),
            rel,
            agg_stats: RxAggCounters::default(),
        }
    }

    pub fn now(&self) -> SimTime {
        self.q.now()
    }

    /// Number of ranks (nodes × processes per NIC).
    pub fn ranks(&self) -> usize {
        self.nics.len() * self.place.hosts() as usize
    }

    /// Where ranks live (rank → node and host interface).
    pub fn placement(&self) -> Placement {
        self.place
    }

    /// The NIC configuration.
    pub fn config(&self) -> &NicConfig {
        &self.cfg
    }

    /// The packet network (topology, routing, counters).
    pub fn network(&self) -> &Network {
        &self.net
    }

    /// NIC-level counters.
    pub fn counters(&self) -> NicCounters {
        let s = &self.stats;
        NicCounters {
            messages: s.get(NicStat::Messages),
            data_packets: s.get(NicStat::DataPackets),
            control_packets: s.get(NicStat::ControlPackets),
            payload_bytes: s.get(NicStat::PayloadBytes),
            wire_bytes: s.get(NicStat::WireBytes),
            refused: s.get(NicStat::Refused),
            unroutable: s.get(NicStat::Unroutable),
            out_of_order: s.get(NicStat::OutOfOrder),
            lost: s.get(NicStat::Lost),
            timeouts: s.get(NicStat::Timeouts),
            probes: s.get(NicStat::Probes),
            retransmitted: s.get(NicStat::Retransmitted),
            duplicates: s.get(NicStat::Duplicates),
            out_of_window: s.get(NicStat::OutOfWindow),
            messages_failed: s.get(NicStat::MessagesFailed),
            messages_lost: s.get(NicStat::MessagesLost),
        }
    }

    /// The NICs' and the network's statistics (names, units, descriptions, values).
    pub fn statistics(&self) -> Vec<StatRecord> {
        // The loss counter is reported when losses can happen (faults during the run, a random
        // loss rate) or did; the reliability counters when the unit works or they count.
        let lossy = self.net.has_dynamic_faults() || self.rel.lossy() || self.rel.on;
        let lost = NicStat::Lost as usize;
        let rel = self.rel.on || self.stats.0[REL_STATS..].iter().any(|&c| c > 0);
        let n = if rel {
            NIC_STATS.len()
        } else if lossy || self.stats.get(NicStat::Lost) > 0 {
            lost + 1
        } else {
            lost
        };
        let mut v = Registry::of_counters(&NIC_STATS[..n], &self.stats.0[..n]).report();
        v.extend(self.agg_statistics());
        v.extend(self.coll_statistics());
        v.extend(self.trig_statistics());
        v.extend(self.net.statistics());
        v
    }

    /// Events handled so far.
    pub fn events_processed(&self) -> u64 {
        self.q.events_processed()
    }

    /// The host memory of `rank`.
    pub fn memory(&self, rank: Rank) -> &Memory {
        &self.mem[rank.index()]
    }

    /// The host memory of `rank`, for the rank's own loads and stores and registrations.
    pub fn memory_mut(&mut self, rank: Rank) -> &mut Memory {
        &mut self.mem[rank.index()]
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
    pub fn alloc_qp(&mut self) -> QpNum {
        self.next_qp += 1;
        QpNum(self.next_qp - 1)
    }

    /// A timer of `rank` that expires at `t` (no earlier than now): [`Notice::Timer`] is
    /// reported then.
    pub fn set_timer(&mut self, rank: Rank, t: SimTime) -> TimerId {
        let id = TimerId(self.next_timer);
        self.next_timer = self.next_timer.wrapping_add(1);
        let by = self.net.node_origin(self.place.node_of(rank));
        self.q.schedule_by(by, t.max(self.q.now()), WorldEvent::Timer { id });
        id
    }

    /// Whether messages from one rank to another, posted on one engine, land in the order
    /// they were posted: the fabric keeps the order of a pair's packets
    /// ([`Network::preserves_order`]) and the NIC does not spread packets over its rails.
    pub fn in_order(&self) -> bool {
        self.net.preserves_order()
            && (self.cfg.port_select == crate::config::PortSelect::Fixed || self.net.rails() == 1)
    }

    /// Watch the region of `rank`'s memory whose key is `rkey`: every later message that lands
    /// whole in it, and every atomic applied to it, is reported as a [`Notice::Memory`] and
    /// counted ([`World::memory_writes`]) — what a program spinning on a memory word needs to
    /// be woken (SHMEM `wait_until`), and the NIC's counter of arrived messages (NICEVT fast
    /// barrier). Off by default (it costs a notice per write).
    pub fn watch_memory(&mut self, rank: Rank, rkey: u32) {
        let i = rank.index();
        if self.watched.len() <= i {
            self.watched.resize_with(i + 1, Vec::new);
        }
        if !self.watched[i].iter().any(|w| w.0 == rkey) {
            self.watched[i].push((rkey, 0));
        }
    }

    /// Messages and atomics that have landed in the watched region `rkey` of `rank` so far.
    pub fn memory_writes(&self, rank: Rank, rkey: u32) -> u64 {
        self.watched
            .get(rank.index())
            .and_then(|w| w.iter().find(|w| w.0 == rkey))
            .map_or(0, |w| w.1)
    }

    /// Read and atomic requests `rank` has posted whose answer has not come back: the NICEVT
    /// NIC's counter of outstanding reads (spec 03, `shmem_syncreads` waits for it to reach 0).
    pub fn outstanding_reads(&self, rank: Rank) -> u32 {
        self.reads_outstanding.get(rank.index()).copied().unwrap_or(0)
    }

    /// The NIC wrote into `rank`'s memory, in the region of key `rkey`: tell a watcher.
    #[inline]
    pub(crate) fn memory_touched(&mut self, rank: Rank, rkey: u32) {
        if let Some(ws) = self.watched.get_mut(rank.index()) {
            if let Some(w) = ws.iter_mut().find(|w| w.0 == rkey) {
                w.1 += 1;
                self.notices.push(Notice::Memory(rank));
            }
        }
    }

    /// Move the notices of the steps so far into `out` (in the order they happened).
    #[inline]
    pub fn take_notices(&mut self, out: &mut Vec<Notice>) {
        if !self.notices.is_empty() {
            out.append(&mut self.notices);
        }
    }

    /// Packets in the network or waiting at its sources.
    pub fn packets_in_network(&self) -> u64 {
        self.net.in_flight() + self.net.queued_at_sources() as u64
    }

    /// How long the network has gone without moving a packet while packets are in flight
    /// (None when none is in flight): the deadlock watchdog's reading.
    #[inline]
    pub fn stalled_for(&self) -> Option<SimTime> {
        let since = self.net.last_progress().max(self.checked_at);
        (self.net.in_flight() > 0).then(|| self.q.now().saturating_sub(since))
    }

    /// The watchdog's time ran out: whether the packets are stuck — a cycle of input queues
    /// waiting on each other, or nothing moving at all (no packet on a link, no link
    /// serialising, no credits on their way back: packets can then wait only on NIC buffers
    /// that nothing will free). Otherwise they are slow, and the watchdog's clock restarts.
    pub fn confirm_stall(&mut self) -> bool {
        let now = self.q.now();
        if self.net.deadlock_cycle().is_some() || !self.net.moving(now) {
            return true;
        }
        self.checked_at = now;
        false
    }

    /// Input VCs and source queues whose head packet waits (deadlock reports).
    pub fn blocked(&self, limit: usize) -> Vec<Blocked> {
        self.net.blocked(limit)
    }

    /// Pop and handle one event; false when nothing is left.
    #[inline]
    pub fn step(&mut self) -> bool {
        // A retransmission timer due before the next event goes first.
        if self.rel_timers() && self.rel_due() {
            if self.net.drops().len() > self.drops_seen {
                self.note_losses();
            }
            return true;
        }
        let Some(ev) = self.q.pop_event() else { return false };
        self.handle(ev);
        // Packets the network lost or dropped (in this event, or when it was handed one):
        // counted and told to the software above, which may send them again; their message
        // does not complete otherwise.
        if self.net.drops().len() > self.drops_seen {
            self.note_losses();
        }
        true
    }

    fn handle(&mut self, ev: WorldEvent) {
        match ev {
            WorldEvent::Net(e) => {
                self.net.handle(&mut self.q, e, &mut self.arrivals);
                if e.kind() == NetKind::Fault {
                    // The routers may have learnt of a failure or repair.
                    self.coll_rehome();
                }
                // Most network events deliver nothing.
                if !self.arrivals.delivered.is_empty() {
                    let mut ds = std::mem::take(&mut self.arrivals.delivered);
                    let limited = self.cfg.rx_buffer.is_some();
                    for p in ds.drain(..) {
                        if is_coll_tag(p.tag) {
                            self.coll_packet(p);
                            continue;
                        }
                        if is_trig_tag(p.tag) {
                            self.trig_packet(p);
                            continue;
                        }
                        let pid = p.tag as u32;
                        if self.rel.lossy() && self.random_loss(p.dst) {
                            // Failed the end-to-end check: discarded before it takes buffer
                            // space at the NIC.
                            if limited {
                                let c = Network::buffer_credits(&p);
                                self.net.release_ejection(&mut self.q, p.dst, p.rail, c);
                            }
                            let now = self.q.now();
                            self.packet_lost(pid, now, "random_loss");
                            continue;
                        }
                        if limited {
                            let held = (p.dst, p.rail, Network::buffer_credits(&p));
                            self.pkts[pid as usize].as_mut().expect("live packet").held = Some(held);
                        }
                        self.receive(pid, (p.dst, p.vc));
                    }
                    // Hand the (empty) buffer back so its allocation is reused.
                    self.arrivals.delivered = ds;
                }
                if !self.arrivals.injected.is_empty() {
                    // Injections reported while refilling are not refilled again: the refill
                    // reads the queue lengths as it goes.
                    let mut from = std::mem::take(&mut self.arrivals.injected);
                    self.refill_tx(&from);
                    from.clear();
                    self.arrivals.injected = from;
                }
            }
            WorldEvent::Doorbell { msg } => self.doorbell(msg),
            WorldEvent::EngineFree { node, engine } => self.engine_free(node, engine),
            WorldEvent::Inject { pkt } => self.send_packet(pkt),
            WorldEvent::Sent { msg } => self.complete_at_source(msg, CqeStatus::Ok, 0),
            WorldEvent::Local { pkt } => {
                let to = self.pkts[pkt as usize].as_ref().expect("live packet").to;
                self.receive(pkt, (self.place.node_of(to), 0));
            }
            WorldEvent::Landed { pkt } => self.landed(pkt),
            WorldEvent::RxFlush { node, gen } => self.block_timeout(node, gen),
            WorldEvent::RxWake { node } => self.rx_wake(node),
            WorldEvent::Timer { id } => self.notices.push(Notice::Timer(id)),
            WorldEvent::Coll(e) => self.coll_event(e),
            WorldEvent::Trig(e) => self.trig_event(e),
        }
    }

    /// The NIC packets among the network's new drops: counted, listed, and noticed.
    #[cold]
    fn note_losses(&mut self) {
        let (from, to) = (self.drops_seen, self.net.drops().len());
        self.drops_seen = to;
        for i in from..to {
            let d = &self.net.drops()[i];
            let (tag, at, cause) = (d.packet.tag, d.at, d.reason.cause());
            if is_coll_tag(tag) {
                self.coll_lost(tag);
                continue;
            }
            if is_trig_tag(tag) {
                continue;
            }
            self.packet_lost(tag as u32, at, cause);
        }
    }

    /// NIC packet `pid` was lost at `at` (`cause` as reports name it): counted, listed, told
    /// to the software above, and accounted to its message.
    pub(crate) fn packet_lost(&mut self, pid: u32, at: SimTime, cause: &'static str) {
        let Some(info) = self.pkts.get_mut(pid as usize).and_then(Option::take) else {
            return;
        };
        self.free_pkts.push(pid);
        let (kind, bytes) = match info.kind {
            crate::pkt::PktKind::Data { off, len } => ("data", Some((off, len))),
            crate::pkt::PktKind::ReadReq => ("read_request", None),
            crate::pkt::PktKind::Ack { .. } => ("ack", None),
            crate::pkt::PktKind::AtomicReq => ("atomic_request", None),
            crate::pkt::PktKind::AtomicResp { .. } => ("atomic_response", None),
            crate::pkt::PktKind::Probe => ("probe", None),
            crate::pkt::PktKind::ProbeResp { .. } => ("probe_response", None),
        };
        self.lost.push(LostPacket {
            at,
            from: info.from,
            to: info.to,
            msg: info.msg,
            kind,
            bytes,
            cause,
        });
        self.stats.add(NicStat::Lost, 1);
        self.notices.push(Notice::PacketLost(info.from));
        if bytes.is_some() {
            self.consumed(info.msg, info.gen, true);
        }
    }

    /// Packets of messages the network lost or dropped so far, in order.
    pub fn lost_packets(&self) -> &[LostPacket] {
        &self.lost
    }

    pub(crate) fn alloc_msg(&mut self, m: Msg) -> u32 {
        if let Some(i) = self.free_msgs.pop() {
            self.msgs[i as usize] = Some(m);
            i
        } else {
            self.msgs.push(Some(m));
            self.next_seen.push(0);
            self.gens.push(0);
            (self.msgs.len() - 1) as u32
        }
    }

    pub(crate) fn msg(&self, id: u32) -> &Msg {
        self.msgs[id as usize].as_ref().expect("live message")
    }

    pub(crate) fn msg_mut(&mut self, id: u32) -> &mut Msg {
        self.msgs[id as usize].as_mut().expect("live message")
    }

    pub(crate) fn release_msg(&mut self, id: u32) {
        // The record's buffers go back to their pools; the record itself is dropped in place
        // (not moved out first: it is a few hundred bytes).
        let slot = &mut self.msgs[id as usize];
        let m = slot.as_mut().expect("live message");
        for v in [&mut m.src_segs, &mut m.dst_segs, &mut m.remote_segs] {
            if v.capacity() > 0 {
                let mut v = std::mem::take(v);
                v.clear();
                self.seg_pool.push(v);
            }
        }
        if m.data.capacity() > 0 {
            self.data_pool.push(std::mem::take(&mut m.data));
        }
        self.rel.recycle_map(std::mem::take(&mut m.rel.got));
        *slot = None;
        self.next_seen[id as usize] = 0;
        self.gens[id as usize] = self.gens[id as usize].wrapping_add(1);
        self.free_msgs.push(id);
    }

    pub(crate) fn alloc_pkt(&mut self, p: PktInfo) -> u32 {
        if let Some(i) = self.free_pkts.pop() {
            self.pkts[i as usize] = Some(p);
            i
        } else {
            self.pkts.push(Some(p));
            (self.pkts.len() - 1) as u32
        }
    }

    pub(crate) fn free_pkt(&mut self, pid: u32) {
        self.pkts[pid as usize] = None;
        self.free_pkts.push(pid);
    }

    /// The NIC a rank's requests go through.
    #[inline]
    pub(crate) fn nic_of(&mut self, r: Rank) -> &mut Nic {
        &mut self.nics[self.place.node_of(r).index()]
    }
}
