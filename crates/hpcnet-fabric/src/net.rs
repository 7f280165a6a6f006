//! The packet-level network simulator.
//!
//! Model (what is simulated, what is simplified):
//! - **Input-buffered routers** with `vcs` virtual channels per input port. Buffer space is
//!   counted in credits of `credit_unit` bytes: each VC has private credits, each port a shared
//!   pool (spec 01: "input buffers dynamically shared"). The upstream output port tracks the
//!   downstream free credits; a packet is sent only if it fits entirely (virtual cut-through).
//!   All of a packet's credits return when its tail leaves the buffer, one link latency later.
//!   Under bubble flow control every packet takes the credits of one maximum-size packet (a
//!   buffer slot) in router buffers, so that room for the largest packet cannot be split among
//!   the buffers of a ring; a NIC's receive buffer takes its own size.
//! - **Cut-through timing**: a packet's head reaches the next router one link latency after its
//!   transmission starts and is routed `router.latency` later; its tail follows one serialisation
//!   time behind. A packet cannot leave a router before its tail could have arrived
//!   (start ≥ tail arrival − serialisation at the output rate). Store-and-forward links deliver
//!   the head only with the tail.
//! - **Head-of-line blocking**: only the head packet of each input VC competes for an output.
//!   Routing happens once, when a packet becomes head; adaptive choices are made then (minimal
//!   adaptive on tori counts only credits that no request waiting at the output has claimed).
//! - **Switch allocation**: a policy of [`crate::arbiter`] (round robin over requesting input
//!   VCs, or age-based) chooses among the input VCs requesting an output, or a separable
//!   allocator of [`crate::alloc`] (iSLIP, input-first, output-first) matches a router's free
//!   outputs with its inputs at once. At most `router.input_speedup` packets are read out of one
//!   input port at a time (default 1, the input-queued router); an output whose packet's input
//!   port is being read out decides again when the read ends (`router.input_wait = "timed"`) or
//!   waits in that port's queue of outputs (`"registered"`); with `router.output_speedup`
//!   above 1 an output buffers packets for its link. An output decides its next packet when its
//!   link frees, or with `router.decide = "ahead"` as soon as the packet on its link has
//!   started, for a transfer that follows it (one event fewer per packet that waits for a busy
//!   link). With `router.vc_allocation = "per_packet"`
//!   a downstream VC carries one packet at a time until its credits return. The crossbar is not
//!   a separate resource under the default `router.crossbar = "ideal"` (its latency is part of
//!   `router.latency`); with `"tiled"` a packet also holds a column channel of the Sunway tile
//!   array while it crosses ([`crate::crossbar`], a contention model: the row and column
//!   buffers are not modelled as queues).
//! - **One pending event per resource**: an output port schedules at most one arbitration; a
//!   packet has at most one pending event (arrival or delivery).
//! - **Endpoints**: each node rail has an injection queue without limit and an output port with
//!   credits into its router; ejection into the node never blocks (the NIC drains at link rate).
//! - **Multicast** ([`crate::multicast`]): a multicast packet at the head of an input queue is
//!   sent to the ports of its group's table one after another, lowest port first: each copy is
//!   arbitrated and takes credits on its output like a unicast packet, and the packet stays at
//!   the head (holding its input buffer) until its last copy has left. Copies keep the VC they
//!   arrived on; multicast is meant for tree topologies (no bubble or dateline rule applies to
//!   it). Each extra copy counts in `net.multicast_copies`, so the conservation law reads
//!   `injected + copies = delivered + dropped + in_flight`.
//! - **Link-level reliability** ([`crate::linkerr`], hooks in `net_link.rs`): bit errors, CRC
//!   check and go-back-N retransmission from a replay buffer, stomped corrupted copies under
//!   cut-through, and the fallback to store-and-forward. Corrupted copies are not packets of
//!   the conservation law: they are discarded by the router or node that receives them.
//! - **Dynamic faults** (`net_faults.rs`, [`crate::faults`]): cables, routers and planes fail
//!   and are repaired during the run; packets in a failed component are lost, routers learn of
//!   it after `faults.detection` and recomputed tables follow after `faults.table_update`.

use crate::alloc::{Allocator, Matcher, Request as AllocRequest};
use crate::arbiter::{Age, OutputArbiter, Request as ArbRequest, RoundRobin};
use crate::config::{FabricConfig, Switching, MAX_VCS};
use crate::crossbar::Tiled;
use crate::linkerr::{LinkLayer, LK_FRESH, LK_REPLAY};
use crate::multicast::{MulticastError, MulticastRoute, Tables};
use crate::packet::{Packet, PacketId, F_GHOST, F_MCAST};
use crate::routing::{Choice, CreditView, RouteError, Routing};
use crate::topology::{NodeId, Peer, PortIdx, RouterId, Topology};
use hpcnet_des::stats::{Registry, StatRecord};
use hpcnet_des::{BitsPerSec, EventQueue, Origin, SimTime};
use serde::Serialize;

#[path = "net_faults.rs"]
mod faults_rt;
pub use faults_rt::{FaultRecord, FaultStats, FaultStep};

#[path = "wormhole.rs"]
pub(crate) mod wormhole;
pub use wormhole::FlitCounters;

/// Kinds of network event (what a [`NetEvent`] asks the network to do).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum NetKind {
    /// The head of a packet is routable at the router input port it arrived on.
    Arrive,
    /// An output port may be able to send.
    Arb,
    /// The tail of a packet has reached its destination node.
    Deliver,
    /// A step of the fault schedule: a failure or repair, its detection, new tables.
    Fault,
    /// The tail of a corrupted copy sent stomped by an output reached the receiver, which
    /// drops it ([`crate::linkerr`]).
    Corrupt,
    /// Wormhole switching: the head flit of the first packet of an input VC buffer is
    /// routable ([`wormhole`]).
    FlitHead,
    /// Wormhole switching: an output may be able to send flits.
    FlitArb,
    /// `router.input_wait = "registered"`: the read out of a router input port ends; the
    /// outputs waiting for it are served in order.
    InputFree,
}

/// Bits of the narrow field of a [`NetEvent`]: the global router input port of an arrival,
/// the output port of a corrupted copy. [`Network::new`] refuses a network with more ports.
pub const NET_EVENT_PORT_BITS: u32 = 24;
const PORT_MASK: u32 = (1 << NET_EVENT_PORT_BITS) - 1;

/// An event the network schedules on the shared event queue: one 64-bit word, so that a
/// driver's loop keeps the popped event in a register. Bits 0–7 hold the [`NetKind`], bits
/// 8–31 a narrow field ([`NET_EVENT_PORT_BITS`] wide: the global router input port of an
/// arrival, the output port of a corrupted copy, the step kind of a fault), bits 32–63 a wide
/// one (the packet slot, or the output port, queue or input port the kind names, or a fault
/// step's argument). The kind is a byte of its own, so an enum that wraps a `NetEvent` (a
/// driver's event type) takes its tag from the kind's unused values and stays 8 bytes.
///
/// Only the network makes these events: the constructors are private to the crate, and the
/// other models read the [`NetEvent::kind`] alone.
#[derive(Copy, Clone, PartialEq, Eq)]
#[repr(C, align(4))]
pub struct NetEvent {
    kind: NetKind,
    rest: [u8; 7],
}

const _: () = assert!(std::mem::size_of::<NetEvent>() == 8);

impl NetEvent {
    /// The event of `kind` with narrow field `narrow` (below 2^[`NET_EVENT_PORT_BITS`]) and
    /// wide field `wide`.
    #[inline(always)]
    fn pack(kind: NetKind, narrow: u32, wide: u32) -> NetEvent {
        debug_assert!(narrow <= PORT_MASK, "{kind:?} event field {narrow} beyond 24 bits");
        let word = kind as u64 | ((narrow & PORT_MASK) as u64) << 8 | (wide as u64) << 32;
        let bytes = word.to_le_bytes();
        // SAFETY: the struct is 8 bytes without padding (asserted above); its first byte is
        // `kind as u8` (the low byte of a little-endian word, whatever the host's order), a
        // valid `NetKind`, and the other seven are plain bytes.
        unsafe { std::mem::transmute::<[u8; 8], NetEvent>(bytes) }
    }

    /// The event as its word (the kind in the low byte).
    #[inline(always)]
    fn word(self) -> u64 {
        // SAFETY: an 8-byte struct without padding: every byte is initialised.
        u64::from_le_bytes(unsafe { std::mem::transmute::<NetEvent, [u8; 8]>(self) })
    }

    /// The narrow field (bits 8–31).
    #[inline(always)]
    fn narrow(self) -> u32 {
        (self.word() >> 8) as u32 & PORT_MASK
    }

    /// The wide field (bits 32–63).
    #[inline(always)]
    fn wide(self) -> u32 {
        (self.word() >> 32) as u32
    }

    /// What the event asks the network to do.
    #[inline(always)]
    pub fn kind(self) -> NetKind {
        self.kind
    }

    /// The head of packet `pkt` is routable at global router input port `gport`.
    #[inline(always)]
    pub(crate) fn arrive(pkt: PacketId, gport: u32) -> NetEvent {
        Self::pack(NetKind::Arrive, gport, pkt)
    }

    /// Output port `oport` may be able to send.
    #[inline(always)]
    pub(crate) fn arb(oport: u32) -> NetEvent {
        Self::pack(NetKind::Arb, 0, oport)
    }

    /// The tail of packet `pkt` has reached its destination node.
    #[inline(always)]
    pub(crate) fn deliver(pkt: PacketId) -> NetEvent {
        Self::pack(NetKind::Deliver, 0, pkt)
    }

    /// A step of the fault machinery.
    pub(crate) fn fault(step: FaultStep) -> NetEvent {
        let (which, arg) = match step {
            FaultStep::Apply(i) => (0, i),
            FaultStep::Detect(i) => (1, i),
            FaultStep::Tables => (2, 0),
            FaultStep::Random(i) => (3, i),
        };
        Self::pack(NetKind::Fault, which, arg)
    }

    /// The tail of the stomped copy `pkt` sent by output `oport` reached the receiver.
    pub(crate) fn corrupt(pkt: PacketId, oport: u32) -> NetEvent {
        Self::pack(NetKind::Corrupt, oport, pkt)
    }

    /// Wormhole switching: the head flit of input VC buffer `queue` is routable.
    pub(crate) fn flit_head(queue: u32) -> NetEvent {
        Self::pack(NetKind::FlitHead, 0, queue)
    }

    /// Wormhole switching: output `oport` may be able to send flits.
    pub(crate) fn flit_arb(oport: u32) -> NetEvent {
        Self::pack(NetKind::FlitArb, 0, oport)
    }

    /// The read out of router input port `gport` ends.
    pub(crate) fn input_free(gport: u32) -> NetEvent {
        Self::pack(NetKind::InputFree, 0, gport)
    }

    /// The packet slot of an `Arrive`, `Deliver` or `Corrupt` event.
    #[inline(always)]
    pub(crate) fn pkt(self) -> PacketId {
        self.wide()
    }

    /// The global router input port of an `Arrive` event.
    #[inline(always)]
    pub(crate) fn arrive_port(self) -> u32 {
        self.narrow()
    }

    /// The output port of a `Corrupt` event.
    pub(crate) fn corrupt_port(self) -> u32 {
        self.narrow()
    }

    /// The port, queue or input port of an `Arb`, `FlitHead`, `FlitArb` or `InputFree` event.
    #[inline(always)]
    pub(crate) fn index(self) -> u32 {
        self.wide()
    }

    /// The step of a `Fault` event.
    pub(crate) fn fault_step(self) -> FaultStep {
        match self.narrow() {
            0 => FaultStep::Apply(self.wide()),
            1 => FaultStep::Detect(self.wide()),
            2 => FaultStep::Tables,
            _ => FaultStep::Random(self.wide()),
        }
    }
}

impl std::fmt::Debug for NetEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = *self;
        match e.kind() {
            NetKind::Arrive => write!(f, "Arrive {{ pkt: {}, gport: {} }}", e.pkt(), e.arrive_port()),
            NetKind::Deliver => write!(f, "Deliver {{ pkt: {} }}", e.pkt()),
            NetKind::Corrupt => write!(f, "Corrupt {{ pkt: {}, oport: {} }}", e.pkt(), e.corrupt_port()),
            NetKind::Fault => write!(f, "Fault {{ step: {:?} }}", e.fault_step()),
            k => write!(f, "{k:?} {{ {} }}", e.index()),
        }
    }
}

/// A network of `ports` output ports (router ports plus node rails; router input ports are
/// fewer) must name each in the narrow field of a [`NetEvent`].
fn check_event_ports(ports: u64) -> Result<(), crate::config::ConfigError> {
    if ports > 1 << NET_EVENT_PORT_BITS {
        return Err(crate::config::ConfigError::new(
            "topology",
            format!(
                "{ports} ports (router ports plus node rails) exceed the 2^{NET_EVENT_PORT_BITS} \
                 a network event can name"
            ),
        ));
    }
    Ok(())
}

/// What the network tells the endpoints cabled to it (NICs, or a traffic collector): the one
/// seam between fabric and endpoint models, in the spirit of SST Merlin's `LinkControl`. The
/// network calls it from [`Network::handle`] and [`Network::inject`]; an endpoint model answers
/// through the network's methods afterwards (inject, release ejection credits), never from
/// inside a callback.
pub trait Endpoints {
    /// The tail of `packet` reached its destination node at `at`. The packet stays in the
    /// network's slot, which is free once this returns: an endpoint that keeps the packet moves
    /// it out ([`Packet::take`]); one that only reads it costs no copy.
    fn deliver(&mut self, packet: &mut Packet, at: SimTime);
    /// The head of a packet left `node`'s injection queue on `rail`: that queue has room for
    /// one more (a NIC refills a bounded transmit queue here).
    #[inline(always)]
    fn injected(&mut self, node: NodeId, rail: u8) {
        let _ = (node, rail);
    }
}

/// An [`Endpoints`] that keeps what it is told, in order (tests, simple drivers).
#[derive(Clone, Debug, Default)]
pub struct Collect {
    pub delivered: Vec<(Packet, SimTime)>,
    pub injected: Vec<(NodeId, u8)>,
}

impl Endpoints for Collect {
    fn deliver(&mut self, packet: &mut Packet, at: SimTime) {
        self.delivered.push((packet.take(), at));
    }
    fn injected(&mut self, node: NodeId, rail: u8) {
        self.injected.push((node, rail));
    }
}

/// A packet the network had to drop, with the reason.
#[derive(Clone, Debug)]
pub struct Drop {
    pub packet: Packet,
    pub at: SimTime,
    pub reason: RouteError,
}

/// An input VC whose head packet cannot move (for deadlock reports).
#[derive(Clone, Debug, Serialize)]
pub struct Blocked {
    /// Set when the blocked queue is a node's injection queue (then `router`/`in_port` are where
    /// it is cabled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_node: Option<NodeId>,
    pub router: RouterId,
    pub in_port: PortIdx,
    pub vc: u8,
    pub queued: usize,
    pub head_dst: NodeId,
    pub out_port: PortIdx,
    pub out_vc: u8,
    pub credits_needed: u32,
    pub credits_free: u32,
}

/// Per-output-port state: the sending side of one link direction, one record per port.
///
/// The fields are laid out by use (`repr(C)`, aligned to a cache line): the first line holds
/// what an arrival's request and an output's decision read (link free time, pending decision,
/// credits, request list, where the link leads), the second what a send reads and writes (link
/// errors, latency, serialisation memo, credit returns, flags), the third the statistics and
/// the state of the optional modes.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
struct OutPort {
    // First line: the decision.
    busy_until: SimTime,
    /// Time of the scheduled arbitration event (MAX: none). Later duplicates are ignored.
    arb_at: SimTime,
    /// Earliest arrival time in `returning` (MAX when empty): readers skip the list while no
    /// credits are due (adaptive routing asks every candidate port, 18 on the Sunway fabric).
    ret_min: SimTime,
    free_private: [u16; MAX_VCS],
    free_shared: u32,
    /// Router ports: requesting input queues, in arrival order, as a doubly linked list through
    /// their queue records ([`Fifo`]: what the head packet needs here is stored there).
    req_head: u32,
    req_tail: u32,
    /// Router ports: the request round robin tries first (NIL: the list's head).
    rr_q: u32,
    to: Dest,
    // Second line: the send.
    /// Error-free bits this link direction carries before its next bit error
    /// ([`crate::linkerr`]; `u64::MAX`: none).
    err_left: u64,
    latency: SimTime,
    /// Memo of the last serialisation time computed here: packet size `ser_size` takes
    /// `ser_time`. Packet sizes repeat, and the division in `BitsPerSec::serialization` showed
    /// up in profiles.
    ser_time: SimTime,
    /// Credits on their way back: (arrival time, vc, private, shared), absorbed when due.
    returning: Vec<(SimTime, u8, u16, u16)>,
    ser_size: u32,
    /// Event origin of the component owning the port (its router, or its node).
    origin: u32,
    /// Link-layer flags ([`crate::linkerr::LK_REPLAY`], [`crate::linkerr::LK_FALLBACK`]): any set
    /// sends every packet through the link layer.
    lk: u8,
    /// Downstream VCs held by one packet each (`router.vc_allocation = "per_packet"`; bit v:
    /// VC v), released when that packet's credits come back.
    vc_held: u8,
    /// The last arbitration found requests but no credits: wake up when credits arrive.
    starved: bool,
    saf: bool,
    /// Ejection port whose node accepts packets only into credited buffers
    /// ([`Network::set_ejection_credits`]).
    limited: bool,
    /// The link is down now (a dynamic failure): whatever is sent on it is lost.
    down: bool,
    // Third line: statistics and the optional modes.
    busy_ps: u64,
    packets: u64,
    rate: BitsPerSec,
    /// Node ports: the VC whose queue round robin tries first.
    rr: u32,
    /// `router.input_wait = "registered"`: the router input port this output waits for (NIL:
    /// none), and its neighbours in that port's queue of waiting outputs.
    wait_on: u32,
    wait_prev: u32,
    wait_next: u32,
}

const _: () = assert!(std::mem::size_of::<OutPort>() == 192);

/// Whether `to` is a node (ejection, or a node's rail seen from its router).
#[inline(always)]
fn is_node_dest(to: Dest) -> bool {
    matches!(to, Dest::Node)
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Dest {
    /// A router input port, by its global index (`port_base[router] + port`).
    Router {
        gport: u32,
    },
    Node,
    None,
}

/// A snapshot of the network's counters (the conservation law is
/// `injected = delivered + dropped + in_flight`); they live in the network's statistics
/// registry ([`Network::statistics`]).
#[derive(Clone, Debug, Default, Serialize)]
pub struct NetCounters {
    pub injected: u64,
    pub delivered: u64,
    pub dropped: u64,
    /// Router traversals of delivered packets.
    pub hops: u64,
    /// Extra copies made by multicast replication in routers.
    #[serde(skip_serializing_if = "is_zero")]
    pub multicast_copies: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A counter of the network; [`NET_STATS`] gives each its name, unit and description.
#[derive(Copy, Clone, Debug)]
enum NetStat {
    Injected,
    Delivered,
    Dropped,
    Hops,
    Copies,
}

/// Name, unit and description of each [`NetStat`], in its order.
const NET_STATS: [(&str, &str, &str); 4] = [
    (
        "net.packets_injected",
        "packets",
        "packets whose head left their source node",
    ),
    (
        "net.packets_delivered",
        "packets",
        "packets whose tail reached their destination",
    ),
    (
        "net.packets_dropped",
        "packets",
        "packets dropped (no route, cable down)",
    ),
    ("net.router_hops", "routers", "router traversals of delivered packets"),
];

/// The multicast counter, reported only when multicast was used.
const NET_MCAST_STATS: [(&str, &str, &str); 1] = [(
    "net.multicast_copies",
    "packets",
    "extra packet copies made by multicast replication in routers",
)];

/// The network's counter values (a fixed array: the hot path indexes it with constants).
#[derive(Default)]
struct NetStats([u64; 5]);

impl NetStats {
    #[inline(always)]
    fn add(&mut self, s: NetStat, n: u64) {
        self.0[s as usize] += n;
    }

    #[inline(always)]
    fn get(&self, s: NetStat) -> u64 {
        self.0[s as usize]
    }
}

/// Summary of one link direction.
#[derive(Clone, Debug, Serialize)]
pub struct LinkUse {
    /// "r3.p2" or "n7.rail0".
    pub from: String,
    pub busy_ps: u64,
    pub packets: u64,
}

/// [`Network::send_from`]: a packet sent in its own arrival event (see there).
const SEND_SOLE: u8 = 0;
/// [`Network::send_from`]: a router output sends.
const SEND_ROUTER: u8 = 1;
/// [`Network::send_from`]: a node's output (injection) sends.
const SEND_NODE: u8 = 2;
/// [`Network::send_from`]: a node's output sends a packet injected into its empty queues
/// without queueing it ([`Network::inject_slot`]).
const SEND_INJECT: u8 = 3;

/// The network: topology + routing + buffers and links in motion.
pub struct Network {
    pub topo: Topology,
    pub routing: Routing,
    cfg: FabricConfig,
    port_base: Vec<u32>,
    /// Global router ports; node rail ports follow at `router_ports + node * rails + rail`.
    router_ports: u32,
    rails: u8,
    out: Vec<OutPort>,
    /// Upstream output port of every router input port (u32::MAX if none).
    upstream: Vec<u32>,
    /// Input queues: `gport << vc_shift | vc` for router ports, then one per node rail from
    /// `node_q0`.
    inq: Queues,
    /// log2 of the stride of input queue indices per port (VCs rounded up to a power of two,
    /// so the hot path shifts instead of dividing).
    vc_shift: u32,
    /// Virtual channels per port.
    vcs: u32,
    /// First node-rail input queue (`router_ports << vc_shift`).
    node_q0: u32,
    /// Router owning each global router port.
    router_of: Vec<RouterId>,
    /// Number of routers (the first node's event origin).
    routers: u32,
    packets: Vec<Packet>,
    free_ids: Vec<PacketId>,
    bubble_credits: u32,
    /// Round-robin VC class of the next injection (`vc_select = "round_robin"`), in 0..251.
    next_class: u64,
    /// Key of the packets' random bits (from the run's seed, [`Network::set_seed`]) and the
    /// injections of each node so far: a packet's bits are a hash of (key, source, count), a
    /// stream per source, so they do not depend on the order in which sources inject.
    salt_key: u64,
    injections: Vec<u32>,
    stats: NetStats,
    /// Time of the last packet movement (watchdog).
    last_progress: SimTime,
    /// Packets sent on a link whose arrival (or delivery) event is pending.
    on_wire: u64,
    drops: Vec<Drop>,
    /// Multicast tables of the router input ports.
    mcast: Tables,
    /// Per router input queue: output ports its head multicast packet still has to be copied
    /// to (0: none yet looked up).
    mc_left: Vec<u64>,
    /// A multicast packet was injected at some point: only then do the router paths look at
    /// packets' multicast flag (unicast-only runs skip the load).
    mcast_seen: bool,
    /// Link-level reliability state ([`crate::linkerr`]).
    link: LinkLayer,
    /// Corrupted copies alive (in a cut-through receiver, or forwarded stomped): only while
    /// there are any do the router paths look at packets' corruption flags.
    ghosts: u32,
    /// Corrupted transmissions of the current send (reused, so the error path allocates once).
    corrupt_buf: Vec<(SimTime, bool)>,
    /// Dynamic faults and the torus bypass (None when the scenario has neither).
    faults: Option<Box<faults_rt::FaultRuntime>>,
    /// A link has gone down during the run: arrivals then check whether their cable failed
    /// under them (runs without dynamic faults skip the check).
    fault_cut: bool,
    /// The run's seed ([`Network::set_seed`]), for random failures.
    seed: u64,
    /// Crossbar read slots of each router input port (`router.input_speedup` per port, flat):
    /// the time each is free again. Empty when the speedup is at least the VC count (then the
    /// constraint can never bind and the hot path skips it).
    in_free: Vec<SimTime>,
    /// `router.input_speedup` when `in_free` is used.
    in_speedup: u32,
    /// `router.input_wait = "registered"` in force (input speedup 1, a per-output policy, the
    /// ideal crossbar, packet-level switching): per router input port, the outputs waiting for
    /// its read to end. Empty otherwise.
    in_waiters: Vec<InWaiters>,
    /// The separable switch allocator (`router.allocator` islip, separable_*), or None for a
    /// per-output policy.
    matcher: Option<Box<Matcher>>,
    /// `router.vc_allocation = "per_packet"`: a granted packet holds its downstream VC.
    vc_per_packet: bool,
    /// Per-output policy is age (`router.allocator` / `router.arbitration`).
    by_age: bool,
    /// Scratch of the separable allocator (reused: no allocation per decision).
    alloc_reqs: Vec<AllocRequest>,
    alloc_out: Vec<AllocRequest>,
    alloc_served: Vec<bool>,
    /// Outputs to arbitrate after a decision that served several packets.
    kicks: Vec<u32>,
    /// Packets an output holds waiting for its link besides the one on it
    /// (`router.output_speedup − 1`).
    out_backlog: u64,
    /// `router.decide = "ahead"` in force (per-output policy, output speedup 1, packet-level
    /// switching, timed input waits): an output grants its next packet while the previous one
    /// is on its link, for a transfer that starts when the link frees.
    ahead: bool,
    /// The flit-level engine under `link.switching = "wormhole"` ([`wormhole`]); None in the
    /// packet-level modes.
    worm: Option<Box<wormhole::Worm>>,
    /// The tiled crossbar's column channels (`router.crossbar = "tiled"`, [`crate::crossbar`]);
    /// None for the ideal crossbar.
    xbar: Option<Box<Tiled>>,
    /// The network is in its plain configuration ([`Network::refresh_plain`]): events take the
    /// hot path compiled for it ([`Plain`]), without the tests of the modes it does not use.
    plain: bool,
    /// The part of the plain configuration fixed at construction.
    plain_cfg: bool,
}

struct PortCredits<'a> {
    out: &'a mut [OutPort],
    now: SimTime,
    /// The input queues' records, whose requests are linked per output port.
    requests: &'a [Fifo],
}

impl CreditView for PortCredits<'_> {
    #[inline(always)]
    fn free(&mut self, port: PortIdx, vc: u8) -> u32 {
        let o = &mut self.out[port.index()];
        match o.to {
            Dest::Router { .. } => {
                // Credits already back are folded in now rather than at the port's next
                // arbitration (the same counts either way): lightly used ports, such as most of
                // the Sunway up ports an adaptive choice scans, otherwise keep due entries and
                // every scan re-sums them.
                o.absorb(self.now);
                o.free_private[vcx(vc)] as u32 + o.free_shared
            }
            Dest::Node if !o.limited => u32::MAX,
            Dest::Node => o.free_private[vcx(vc)] as u32 + o.free_shared,
            Dest::None => 0,
        }
    }

    /// Free credits less what the port's waiting requests need: each request's `need` (its
    /// bubble included) on its own VC's private credits first, the rest on the shared pool.
    /// Every waiting request and the new one then fit together, so the new one is sure to get
    /// its room whatever the arbitration order. A VC held by a packet (per-packet VC
    /// allocation) has none. Cost: one walk of the port's request list (minimal adaptive only).
    fn unclaimed(&mut self, port: PortIdx, vc: u8) -> u32 {
        let free = self.free(port, vc);
        let o = &self.out[port.index()];
        if !matches!(o.to, Dest::Router { .. }) {
            return free;
        }
        if o.vc_held & (1u8 << vc) != 0 {
            return 0;
        }
        let mut claimed = [0u32; MAX_VCS];
        let mut r = o.req_head;
        while r != NIL {
            let f = &self.requests[r as usize];
            claimed[vcx(f.vc)] += f.need;
            r = f.req_next;
        }
        let overflow: u32 = claimed
            .iter()
            .zip(&o.free_private)
            .map(|(&c, &p)| c.saturating_sub(p as u32))
            .sum();
        (o.free_private[vcx(vc)] as u32).saturating_sub(claimed[vcx(vc)]) + o.free_shared.saturating_sub(overflow)
    }

    /// The trait's scan as two plain loops (no chained iterator), with `out` and `now` in
    /// registers: the Sunway adaptive up-port choice asks 18 ports per hop.
    #[inline(always)]
    fn most_free(&mut self, ports: &[PortIdx], start: usize, vc: u8) -> PortIdx {
        let (before, from) = ports.split_at(start);
        let mut best_p = from[0];
        let mut best_f = self.free(best_p, vc);
        for &p in &from[1..] {
            let f = self.free(p, vc);
            if f > best_f {
                best_f = f;
                best_p = p;
            }
        }
        for &p in before {
            let f = self.free(p, vc);
            if f > best_f {
                best_f = f;
                best_p = p;
            }
        }
        best_p
    }
}

impl OutPort {
    /// Fold the returning credits that have arrived by `now` into the free counts (outside
    /// the plain configuration).
    #[inline(always)]
    fn absorb(&mut self, now: SimTime) {
        self.absorb_in::<Full>(now);
    }

    /// [`OutPort::absorb`]; the plain configuration's path leaves `vc_held` alone (no VC is
    /// held per packet there).
    #[inline(always)]
    fn absorb_in<M: Modes>(&mut self, now: SimTime) {
        if self.ret_min > now {
            return;
        }
        let mut i = 0;
        let mut min = SimTime::MAX;
        while i < self.returning.len() {
            let (t, vc, p, sh) = self.returning[i];
            if t <= now {
                self.free_private[vcx(vc)] += p;
                self.free_shared += sh as u32;
                if M::ANY {
                    self.vc_held &= !(1u8 << vc);
                }
                self.returning.swap_remove(i);
            } else {
                min = min.min(t);
                i += 1;
            }
        }
        self.ret_min = min;
    }
}

impl Network {
    pub fn new(topo: Topology, cfg: FabricConfig) -> Result<Network, crate::config::ConfigError> {
        cfg.validate(&topo)?;
        let rails = topo.rails.max(1);
        let port_base = topo.port_offsets();
        let total = *port_base.last().expect("one entry per router plus the total");
        let nports = total as usize + topo.nodes.len() * rails as usize;
        check_event_ports(nports as u64)?;
        let failed: Vec<(RouterId, PortIdx)> = cfg.faults.failed_links.iter().map(|f| (f.router, f.port)).collect();
        let mut routing = Routing::new(&topo, &cfg.routing, cfg.router.vcs, &failed)?;
        routing.set_buffer_credits(cfg.router.private_credits.saturating_add(cfg.router.shared_credits));
        let vcs = cfg.router.vcs as usize;
        let mut free_private = [0u16; MAX_VCS];
        for f in free_private.iter_mut().take(vcs) {
            *f = cfg.router.private_credits.min(u16::MAX as u32) as u16;
        }
        let base_rate = cfg.link.data_rate();
        let mk = |to: Dest, rate: BitsPerSec, latency: SimTime, saf: bool, origin: u32| OutPort {
            busy_until: SimTime::ZERO,
            err_left: u64::MAX,
            lk: 0,
            free_private,
            free_shared: cfg.router.shared_credits,
            returning: Vec::new(),
            vc_held: 0,
            ret_min: SimTime::MAX,
            arb_at: SimTime::MAX,
            starved: false,
            rr: 0,
            req_head: NIL,
            req_tail: NIL,
            rr_q: NIL,
            ser_time: SimTime::ZERO,
            ser_size: u32::MAX,
            to,
            rate,
            latency,
            saf,
            busy_ps: 0,
            packets: 0,
            limited: false,
            down: false,
            origin,
            wait_on: NIL,
            wait_prev: NIL,
            wait_next: NIL,
        };
        let mut out = Vec::with_capacity(nports);
        let mut link = LinkLayer::new(&cfg.link, nports as u32);
        let mut upstream = vec![u32::MAX; total as usize];
        for (ri, r) in topo.routers.iter().enumerate() {
            for (pi, peer) in r.ports.iter().enumerate() {
                let (lanes, lat, sw, ber) = link_params(&cfg, &topo, RouterId(ri as u32), PortIdx(pi as u16));
                link.set_ber(out.len() as u32, ber);
                let rate = base_rate_for(&cfg, lanes, base_rate);
                let dead = routing.is_dead(RouterId(ri as u32), PortIdx(pi as u16));
                let to = match *peer {
                    _ if dead => Dest::None,
                    Peer::Router { router, port } => {
                        let gport = port_base[router.index()] + port.0 as u32;
                        upstream[gport as usize] = port_base[ri] + pi as u32;
                        Dest::Router { gport }
                    }
                    Peer::Node { .. } => Dest::Node,
                    Peer::None => Dest::None,
                };
                out.push(mk(to, rate, lat, sw == Switching::StoreAndForward, ri as u32));
            }
        }
        for (ni, n) in topo.nodes.iter().enumerate() {
            for rail in 0..rails as usize {
                let (r, p) = n.ports[rail.min(n.ports.len() - 1)];
                let (lanes, lat, sw, ber) = link_params(&cfg, &topo, r, p);
                link.set_ber(out.len() as u32, ber);
                let rate = base_rate_for(&cfg, lanes, base_rate);
                let g = port_base[r.index()] + p.0 as u32;
                upstream[g as usize] = total + (ni * rails as usize + rail) as u32;
                out.push(mk(
                    Dest::Router { gport: g },
                    rate,
                    lat,
                    sw == Switching::StoreAndForward,
                    (topo.routers.len() + ni) as u32,
                ));
            }
        }
        let max_pkt = cfg.packet.header + cfg.packet.max_payload;
        let bubble_credits = max_pkt.blocks_of(cfg.router.credit_unit) as u32;
        let vc_shift = vcs.next_power_of_two().trailing_zeros();
        let node_q0 = total << vc_shift;
        // Node injection queues: one per (node, rail, VC), so a packet waiting for credits on one
        // VC does not block the node's packets on another (NIC per-VC buffers).
        let mut inq = Queues::new(node_q0 as usize + ((topo.nodes.len() * rails as usize) << vc_shift));
        let router_of: Vec<RouterId> = (0..topo.routers.len())
            .flat_map(|r| (port_base[r]..port_base[r + 1]).map(move |_| RouterId(r as u32)))
            .collect();
        for (qi, f) in inq.q[..node_q0 as usize].iter_mut().enumerate() {
            f.router = router_of[qi >> vc_shift];
        }
        let routers = topo.routers.len() as u32;
        if routers as u64 + topo.nodes.len() as u64 > hpcnet_des::queue::MAX_ORIGINS as u64 {
            return Err(crate::config::ConfigError::new(
                "topology",
                format!(
                    "{} routers + {} nodes exceed the {} components the event queue can order",
                    routers,
                    topo.nodes.len(),
                    hpcnet_des::queue::MAX_ORIGINS
                ),
            ));
        }
        let mcast = Tables::new(total as usize, cfg.router.multicast_tables);
        // Replay accounting only where the buffer can fill (see `LinkLayer::can_fill`).
        let max_pkt = cfg.packet.header + cfg.packet.max_payload;
        for o in &mut out {
            if link.can_fill(base_rate, o.latency, max_pkt, cfg.packet.header) {
                o.lk = LK_REPLAY;
            }
        }
        let mut net = Network {
            topo,
            routing,
            cfg,
            port_base,
            router_ports: total,
            rails,
            out,
            upstream,
            inq,
            vc_shift,
            vcs: vcs as u32,
            node_q0,
            router_of,
            routers,
            packets: Vec::new(),
            free_ids: Vec::new(),
            bubble_credits,
            next_class: 0,
            salt_key: salt_key(0),
            injections: Vec::new(),
            stats: NetStats::default(),
            last_progress: SimTime::ZERO,
            on_wire: 0,
            drops: Vec::new(),
            mcast,
            mc_left: vec![0; node_q0 as usize],
            mcast_seen: false,
            link,
            ghosts: 0,
            corrupt_buf: Vec::new(),
            faults: None,
            fault_cut: false,
            seed: 0,
            in_free: Vec::new(),
            in_speedup: 0,
            in_waiters: Vec::new(),
            matcher: None,
            vc_per_packet: false,
            by_age: false,
            alloc_reqs: Vec::new(),
            alloc_out: Vec::new(),
            alloc_served: Vec::new(),
            kicks: Vec::new(),
            out_backlog: 0,
            ahead: false,
            worm: None,
            xbar: None,
            plain: false,
            plain_cfg: false,
        };
        let s_in = net.cfg.router.input_speedup.max(1);
        if let Some(t) = net.cfg.router.tiled() {
            // The column channels are checked where the input read slots are, so the slots
            // are kept even when they could never bind.
            net.xbar = Some(Box::new(Tiled::new(&t, &net.port_base)));
            net.in_speedup = s_in;
            net.in_free = vec![SimTime::ZERO; (total * s_in) as usize];
        } else if s_in < net.vcs {
            net.in_speedup = s_in;
            net.in_free = vec![SimTime::ZERO; (total * s_in) as usize];
        }
        net.out_backlog = u64::from(net.cfg.router.output_speedup.max(1) - 1);
        let allocator = net.cfg.router.switch_allocator();
        net.by_age = allocator == Allocator::Age;
        net.vc_per_packet = net.cfg.router.vc_allocation == crate::config::VcAllocation::PerPacket;
        if allocator.separable() {
            net.matcher = Some(Box::new(Matcher::new(
                allocator,
                net.cfg.router.islip_iterations,
                total as usize,
            )));
        }
        net.set_seed(0);
        net.init_faults()?;
        if net.cfg.link.switching == Switching::Wormhole {
            net.worm = Some(Box::new(wormhole::Worm::new(&net)));
        } else if net.cfg.router.input_wait == crate::config::InputWait::Registered
            && net.in_speedup == 1
            && net.matcher.is_none()
            && net.xbar.is_none()
        {
            net.in_waiters = vec![InWaiters::EMPTY; total as usize];
        }
        net.ahead = net.cfg.router.decide == crate::config::Decide::Ahead
            && net.worm.is_none()
            && net.matcher.is_none()
            && net.in_waiters.is_empty()
            && net.out_backlog == 0;
        net.plain_cfg = net.worm.is_none()
            && net.in_speedup == 1
            && net.xbar.is_none()
            && net.matcher.is_none()
            && net.in_waiters.is_empty()
            && !net.vc_per_packet
            && !net.by_age
            && net.out_backlog == 0
            && !net.ahead
            && net.out.iter().all(|o| o.lk & LK_REPLAY == 0);
        net.refresh_plain();
        Ok(net)
    }

    /// Whether the network is in its plain configuration, the one the hot path is compiled for
    /// ([`Plain`]): packet-level switching, one read slot per router input port with fewer read
    /// slots than VCs and the ideal crossbar, a per-output round-robin policy with timed input
    /// waits, decisions when the link frees, no output buffer, downstream VCs shared by
    /// packets, no replay buffer that can stop a link, no dynamic faults or torus bypass, no
    /// multicast packet injected so far, and no corrupted copy alive. Bit errors themselves
    /// are allowed (the plain path keeps the per-port test of error-free bits). Called
    /// whenever one of these may change: construction, a multicast injection, a fault
    /// scheduled during the run, a corrupted copy made or gone. A corrupted copy made during
    /// an event arrives in a later one, so no event on the plain path meets one.
    fn refresh_plain(&mut self) {
        self.plain = self.plain_cfg && self.faults.is_none() && !self.fault_cut && self.ghosts == 0 && !self.mcast_seen;
    }

    pub fn config(&self) -> &FabricConfig {
        &self.cfg
    }

    /// Whether packets of one source–destination pair that are injected on one VC class
    /// arrive in the order they were injected: deterministic routing, and no spreading of
    /// successive packets over several VC classes (`router.vc_select = "round_robin"` with
    /// more than one class lets a later packet overtake on another VC). Message libraries
    /// use it to make fences free (spec 03: "free under deterministic routing").
    pub fn preserves_order(&self) -> bool {
        self.cfg.routing.deterministic()
            && (self.cfg.router.vc_select != crate::config::VcSelect::RoundRobin || self.routing.classes() == 1)
    }

    /// Seed the packets' random bits ([`Packet::salt`], used by oblivious routing choices) from
    /// the run's seed. Without it the seed is 0.
    pub fn set_seed(&mut self, seed: u64) {
        self.salt_key = salt_key(seed);
        // Each link's first error-free gap is drawn from the new seed when it first sends.
        self.link.reseed(seed);
        for (i, o) in self.out.iter_mut().enumerate() {
            if self.link.has_errors(i as u32) {
                o.lk |= LK_FRESH;
            } else {
                o.lk &= !LK_FRESH;
                o.err_left = u64::MAX;
            }
        }
        self.seed = seed;
    }

    /// The run's seed ([`Network::set_seed`]; 0 without it), for the endpoints' own streams.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The next random bits of a packet from `src`.
    #[cold]
    fn draw_salt(&mut self, src: NodeId) -> u64 {
        if self.injections.len() != self.topo.nodes.len() {
            self.injections.resize(self.topo.nodes.len(), 0);
        }
        let count = &mut self.injections[src.index()];
        *count = count.wrapping_add(1);
        mix64(self.salt_key ^ ((src.0 as u64) << 32 | *count as u64))
    }

    pub fn rails(&self) -> u8 {
        self.rails
    }

    /// Packets injected, delivered, dropped, and router hops of delivered packets.
    #[inline]
    pub fn counters(&self) -> NetCounters {
        let s = &self.stats;
        NetCounters {
            injected: s.get(NetStat::Injected),
            delivered: s.get(NetStat::Delivered),
            dropped: s.get(NetStat::Dropped),
            hops: s.get(NetStat::Hops),
            multicast_copies: s.get(NetStat::Copies),
        }
    }

    /// The network's statistics (names, units, descriptions and values), in registration order.
    pub fn statistics(&self) -> Vec<StatRecord> {
        let mut v = Registry::of_counters(&NET_STATS, &self.stats.0[..4]).report();
        let copies = self.stats.get(NetStat::Copies);
        if copies > 0 {
            v.extend(Registry::of_counters(&NET_MCAST_STATS, &[copies]).report());
        }
        if self.link.active() {
            v.extend(Registry::of_counters(&crate::linkerr::LINK_STATS, &self.link.totals().values()).report());
        }
        v.extend(self.fault_statistics());
        if let Some(w) = &self.worm {
            v.extend(w.statistics());
        }
        v
    }

    /// Program the multicast tables of `group` on `rail`: a tree from `root`'s router to every
    /// node of `members` (see [`crate::multicast`]). Replaces the group's earlier tables;
    /// refused as a whole when a table does not fit (`router.multicast_tables` per input port).
    /// Links the routers know to be dead are not used, so tables programmed after a detected
    /// failure route around it where the topology allows.
    pub fn program_multicast(
        &mut self,
        group: u32,
        rail: u8,
        root: NodeId,
        members: &[NodeId],
    ) -> Result<MulticastRoute, MulticastError> {
        if self.worm.is_some() {
            return Err(MulticastError::Unsupported { group });
        }
        let routing = &self.routing;
        let out = &self.out;
        let base = &self.port_base;
        self.mcast.program(
            &self.topo,
            &self.port_base,
            |n, r| routing.attach(n, r),
            |r, p| out[(base[r.index()] + p.0 as u32) as usize].to != Dest::None && !routing.is_dead(r, p),
            group,
            rail,
            root,
            members,
        )
    }

    /// Remove every multicast table of `group`.
    pub fn clear_multicast(&mut self, group: u32) {
        self.mcast.clear(group);
    }

    /// Multicast tables in use at input port `port` of router `router`.
    pub fn multicast_tables_used(&self, router: RouterId, port: PortIdx) -> usize {
        self.mcast.used(self.port_base[router.index()] + port.0 as u32)
    }

    /// Time of the last packet movement (the deadlock watchdog compares it with now).
    #[inline]
    pub fn last_progress(&self) -> SimTime {
        self.last_progress
    }

    /// Packets dropped so far, with their reasons, in the order they were dropped.
    pub fn drops(&self) -> &[Drop] {
        &self.drops
    }

    /// The rail of `node` whose injection queue drains first at its own link rate (ties: the
    /// first from `start`, cyclically). A rail renegotiated to fewer lanes counts as busier.
    pub fn least_loaded_rail(&self, node: NodeId, start: u8) -> u8 {
        let rails = self.rails;
        if rails == 1 {
            return 0;
        }
        let order = (0..rails).map(|k| (start % rails + k) % rails);
        let rate0 = self.injection_rate(node, 0);
        if (1..rails).all(|r| self.injection_rate(node, r) == rate0) {
            // Equal rates: the drain time orders like the queue length (no division).
            return order.min_by_key(|&r| self.source_queue_len(node, r)).unwrap_or(0);
        }
        order
            .min_by_key(|&r| {
                // Drain time of the queue plus the packet, in picoseconds per bit-rate unit.
                let q = self.source_queue_len(node, r) as u128 + 1;
                q * 1_000_000_000_000 / self.injection_rate(node, r).0.max(1) as u128
            })
            .unwrap_or(0)
    }

    /// Packets injected and neither delivered nor dropped yet.
    #[inline]
    pub fn in_flight(&self) -> u64 {
        let s = &self.stats;
        s.get(NetStat::Injected) + s.get(NetStat::Copies) - s.get(NetStat::Delivered) - s.get(NetStat::Dropped)
    }

    /// Packets waiting in node injection queues.
    pub fn queued_at_sources(&self) -> usize {
        (self.node_q0 as usize..self.inq.count())
            .map(|i| self.inq.len(i as u32) as usize)
            .sum()
    }

    /// Packets waiting in the injection queue of `node`'s `rail`.
    pub fn source_queue_len(&self, node: NodeId, rail: u8) -> usize {
        let base = self.node_q0 + ((node.0 * self.rails as u32 + rail as u32) << self.vc_shift);
        (0..self.vcs).map(|v| self.inq.len(base + v) as usize).sum()
    }

    /// Packets waiting in the injection queue of `node`'s `rail` for VC `vc`.
    pub fn source_queue_len_vc(&self, node: NodeId, rail: u8, vc: u8) -> usize {
        let slot = match self.cfg.router.node_injection {
            crate::config::NodeInjection::PerVc => vc as u32,
            crate::config::NodeInjection::Fifo => 0, // one FIFO shared by every VC
        };
        self.inq
            .len(self.node_queue(node.0 * self.rails as u32 + rail as u32) + slot) as usize
    }

    /// First injection queue of node rail `k` (= node × rails + rail); VC v is at `+ v`.
    #[inline]
    fn node_queue(&self, k: u32) -> u32 {
        self.node_q0 + (k << self.vc_shift)
    }

    /// Event origins of this network's components: routers `0 … R − 1`, then nodes (with their
    /// NICs and traffic sources) `R … R + N − 1` ([`hpcnet_des::Origin`], the event-ordering
    /// rule).
    pub fn origins(&self) -> u32 {
        (self.topo.routers.len() + self.topo.nodes.len()) as u32
    }

    /// The event origin of router `r`.
    #[inline]
    pub fn router_origin(&self, r: RouterId) -> Origin {
        Origin(r.0)
    }

    /// The event origin of node `node` (its NIC and its traffic source).
    #[inline]
    pub fn node_origin(&self, node: NodeId) -> Origin {
        Origin(self.routers + node.0)
    }

    /// The component owning output port `oi` (a router, or a node for its rail ports).
    #[inline(always)]
    fn port_origin(&self, oi: u32) -> Origin {
        Origin(self.out[oi as usize].origin)
    }

    /// Data rate of the link leaving `node`'s `rail`.
    pub fn injection_rate(&self, node: NodeId, rail: u8) -> BitsPerSec {
        self.out[self.node_oport(node, rail) as usize].rate
    }

    fn node_oport(&self, node: NodeId, rail: u8) -> u32 {
        self.router_ports + node.0 * self.rails as u32 + rail as u32
    }

    fn alloc(&mut self, p: Packet) -> PacketId {
        if let Some(id) = self.free_ids.pop() {
            self.packets[id as usize] = p;
            id
        } else {
            self.packets.push(p);
            self.inq.grow(self.packets.len());
            (self.packets.len() - 1) as PacketId
        }
    }

    fn take(&mut self, id: PacketId) -> Packet {
        self.free_ids.push(id);
        self.packets[id as usize].take()
    }

    /// Packets live in a dense slab (not `Option`s: profiling showed the liveness checks on every
    /// access); ids come only from the input queues and pending events, which hold live packets.
    #[inline]
    fn pkt(&self, id: PacketId) -> &Packet {
        ix(&self.packets, id)
    }

    /// Queue `pkt` for injection at `node` on `rail` now. The packet counts as injected when its
    /// head leaves the node; if the node's cable is down it is dropped at once (reason
    /// `SourceCableDown`). Returns an error if the packet is malformed or has no route.
    #[inline]
    pub fn inject<E: From<NetEvent>, S: Endpoints>(
        &mut self,
        q: &mut EventQueue<E>,
        pkt: Packet,
        ep: &mut S,
    ) -> Result<(), RouteError> {
        self.inject_with(q, ep, move |p| *p = pkt)
    }

    /// [`Network::inject`] of the packet `fill` writes into the slot the network keeps it in
    /// (the slot holds a stale or placeholder packet: `fill` must set every field a new packet
    /// sets, e.g. by assigning a [`Packet::new`]). A packet built in place is not moved into
    /// the slab; the checks, drops and errors are those of `inject`.
    #[inline]
    pub fn inject_with<E: From<NetEvent>, S: Endpoints>(
        &mut self,
        q: &mut EventQueue<E>,
        ep: &mut S,
        fill: impl FnOnce(&mut Packet),
    ) -> Result<(), RouteError> {
        let (id, fresh) = self.alloc_slot();
        fill(ix_mut(&mut self.packets, id));
        self.inject_slot(q, id, fresh, ep)
    }

    /// A slab slot for a new packet: a free one, else a new one holding a placeholder (`true`).
    #[inline(always)]
    fn alloc_slot(&mut self) -> (PacketId, bool) {
        match self.free_ids.pop() {
            Some(id) => (id, false),
            None => (self.grow_slab(), true),
        }
    }

    #[cold]
    #[inline(never)]
    fn grow_slab(&mut self) -> PacketId {
        self.packets
            .push(Packet::new(0, NodeId(0), NodeId(0), 0, 0, SimTime::ZERO));
        self.inq.grow(self.packets.len());
        (self.packets.len() - 1) as PacketId
    }

    /// The packet of slot `id`, allocated by [`Network::alloc_slot`] (`fresh` as it returned)
    /// and refused: the slab is left as if it had never been taken.
    #[cold]
    fn unalloc(&mut self, id: PacketId, fresh: bool) -> Packet {
        if fresh {
            debug_assert_eq!(id as usize + 1, self.packets.len());
            self.packets.pop().expect("the slot just pushed")
        } else {
            self.take(id)
        }
    }

    /// The injection of the packet in slot `id` (see [`Network::inject`]).
    fn inject_slot<E: From<NetEvent>, S: Endpoints>(
        &mut self,
        q: &mut EventQueue<E>,
        id: PacketId,
        fresh: bool,
        ep: &mut S,
    ) -> Result<(), RouteError> {
        // A caller's bad endpoint is refused here, before any table is indexed by it (a
        // multicast packet's destination field holds its group).
        let nodes = self.topo.nodes.len() as u32;
        let pkt = ix(&self.packets, id);
        let bad_dst = pkt.flags & F_MCAST == 0 && pkt.dst.0 >= nodes;
        if pkt.src.0 >= nodes || bad_dst || pkt.rail >= self.rails {
            let node = if pkt.src.0 >= nodes { pkt.src } else { pkt.dst };
            let rail = pkt.rail;
            self.unalloc(id, fresh);
            return Err(RouteError::NoSuchEndpoint {
                node,
                rail,
                nodes,
                rails: self.rails,
            });
        }
        let (src, dst, size, own_class, mcast) = (pkt.src, pkt.dst, pkt.size, pkt.class, pkt.flags & F_MCAST != 0);
        let class = match self.cfg.router.vc_select {
            crate::config::VcSelect::RoundRobin => self.next_class as u8,
            crate::config::VcSelect::Destination => (dst.0 % self.routing.classes().max(1) as u32) as u8,
            crate::config::VcSelect::Packet => own_class,
        };
        // Injections modulo 251 (a prime, so classes spread over any VC count), counted without
        // a division per packet.
        self.next_class = if self.next_class == 250 { 0 } else { self.next_class + 1 };
        let salt = if self.routing.needs_salt() {
            Some(self.draw_salt(src))
        } else {
            None
        };
        // Under bubble flow control a buffer holds whole packets in slots of one maximum-size
        // packet (model reference, "Bubble slots"): every packet takes a slot's credits, so free
        // room in a ring can never fragment below what its largest packet needs.
        let credits = if self.routing.uses_bubble() {
            self.bubble_credits as u16
        } else {
            (size as u64).div_ceil(self.cfg.router.credit_unit.0) as u16
        };
        let pkt = ix_mut(&mut self.packets, id);
        pkt.credits = credits;
        if let Some(z) = salt {
            // The top byte; Valiant and UGAL take the next one too (`Packet::last_dim`).
            pkt.salt = (z >> 56) as u8;
            if self.routing.needs_wide_salt() {
                pkt.last_dim = (z >> 48) as u8;
            }
        }
        let prepared = if mcast {
            self.mcast_seen = true;
            self.plain = false;
            let mut p = pkt.clone();
            let r = self.multicast_on_inject(&mut p, class);
            self.packets[id as usize] = p;
            r
        } else {
            self.routing.on_inject(&self.topo, ix_mut(&mut self.packets, id), class)
        };
        if let Err(reason) = prepared {
            // A node whose cable is down loses what it sends, like any dropped packet (counted
            // as injected and dropped, so `injected = delivered + dropped + in flight` holds);
            // so does a packet with no route once faults can strike during the run.
            let dynamic = self.faults.as_ref().is_some_and(|f| f.dynamic());
            let packet = self.unalloc(id, fresh);
            if matches!(reason, RouteError::SourceCableDown { .. }) || dynamic {
                self.stats.add(NetStat::Injected, 1);
                self.stats.add(NetStat::Dropped, 1);
                self.drops.push(Drop {
                    packet,
                    at: q.now(),
                    reason,
                });
                return Ok(());
            }
            return Err(reason);
        }
        if self.worm.is_some() {
            return self.worm_inject(q, id, fresh, ep);
        }
        let pkt = ix(&self.packets, id);
        let (node, rail) = (pkt.src, pkt.rail);
        let slot = match self.cfg.router.node_injection {
            crate::config::NodeInjection::PerVc => pkt.vc as u32,
            crate::config::NodeInjection::Fifo => 0,
        };
        let qi = self.node_queue(node.0 * self.rails as u32 + rail as u32) + slot;
        let oi = self.node_oport(node, rail);
        if self.plain && self.inject_at_once(q, oi, qi, id) {
            // The decision the output would take on its one packet, taken here: the packet
            // leaves without entering its queue.
            let n = self.vcs;
            ix_mut(&mut self.out, oi).rr = if slot + 1 == n { 0 } else { slot + 1 };
            let vc = ix(&self.packets, id).vc;
            self.send_from::<E, S, Plain, SEND_INJECT>(q, oi, qi, vc, id, ep);
            return Ok(());
        }
        if self.inq.push_back(qi, id) == 1 {
            if self.plain {
                self.run_arbitrations::<E, S, Plain>(q, Some(oi), ep);
            } else {
                self.run_arbitrations::<E, S, Full>(q, Some(oi), ep);
            }
        }
        Ok(())
    }

    /// Would node output `oi`, with every injection queue empty, send packet `id` (to join
    /// its queue `qi`) now? The plain configuration's output decision on a sole packet: its
    /// link is free and the packet fits downstream (the credits due by now absorbed).
    #[inline(always)]
    fn inject_at_once<E>(&mut self, q: &EventQueue<E>, oi: u32, qi: u32, id: PacketId) -> bool {
        let now = q.now();
        if ix(&self.out, oi).busy_until > now || !self.node_queues_empty(oi) {
            return false;
        }
        debug_assert!(self.inq.is_empty(qi));
        let o = ix_mut(&mut self.out, oi);
        o.absorb_in::<Plain>(now);
        self.fits(ix(&self.out, oi), ix(&self.packets, id))
    }

    /// Whether every injection queue of node output `oi` is empty.
    #[inline(always)]
    fn node_queues_empty(&self, oi: u32) -> bool {
        let base = self.node_queue(oi - self.router_ports);
        (0..self.vcs).all(|v| self.inq.is_empty(base + v))
    }

    /// Prepare a multicast packet at injection: its source cable must be up; it takes the VC of
    /// its class and keeps it (no source route, no dimension state).
    #[cold]
    fn multicast_on_inject(&self, pkt: &mut Packet, class: u8) -> Result<(), RouteError> {
        let (r, p) = self.routing.attach(pkt.src, pkt.rail);
        if self.routing.is_dead(r, p) {
            return Err(RouteError::SourceCableDown {
                node: pkt.src,
                router: r,
            });
        }
        pkt.class = class % self.routing.classes().max(1);
        pkt.vc = self.routing.injection_vc(pkt.class);
        Ok(())
    }

    /// The next output of the multicast packet at the head of input queue `qi` (entered by
    /// `in_port` of `router`): the lowest port of its table not served yet.
    #[cold]
    #[inline(never)]
    fn multicast_route(
        &mut self,
        qi: u32,
        router: RouterId,
        in_port: PortIdx,
        id: PacketId,
    ) -> Result<Choice, RouteError> {
        let p = &self.packets[id as usize];
        let left = &mut self.mc_left[qi as usize];
        if *left == 0 {
            let g = self.port_base[router.index()] + in_port.0 as u32;
            let group = p.dst.0;
            match self.mcast.lookup(g, group) {
                Some(m) if m != 0 => *left = m,
                _ => {
                    return Err(RouteError::NoMulticastTable {
                        router,
                        port: in_port,
                        group,
                    })
                }
            }
        }
        Ok(Choice {
            port: PortIdx(left.trailing_zeros() as u16),
            vc: p.vc,
            enters_ring: false,
        })
    }

    /// Output `oi` serves the head of router input queue `qi` (once multicast is in use): the
    /// packet to send and whether it leaves the queue (then its input buffer is freed). A
    /// unicast packet is taken off the queue; a multicast packet is copied while other ports of
    /// its table remain, and taken off for its last port. A copy leaving into a node gets that
    /// node as destination.
    #[inline(never)]
    fn multicast_take_or_pop(&mut self, qi: u32, oi: u32) -> (PacketId, bool) {
        let head = self.inq.q[qi as usize].head;
        if self.packets[head as usize].flags & F_MCAST == 0 {
            return (self.inq.pop_front(qi).expect("head"), true);
        }
        let router = self.router_of[oi as usize];
        let port = (oi - self.port_base[router.index()]) as u16;
        let left = self.mc_left[qi as usize] & !(1u64 << port);
        self.mc_left[qi as usize] = left;
        let id = if left == 0 {
            self.inq.pop_front(qi).expect("head")
        } else {
            let copy = self.packets[head as usize].clone();
            self.stats.add(NetStat::Copies, 1);
            self.alloc(copy)
        };
        if let Peer::Node { node, .. } = self.topo.routers[router.index()].ports[port as usize] {
            self.packets[id as usize].dst = node;
        }
        (id, left == 0)
    }

    /// Input queue of `vc` at global router port `gport`.
    #[inline]
    fn qi(&self, gport: u32, vc: u8) -> u32 {
        (gport << self.vc_shift) | vc as u32
    }

    /// Handle one network event at the queue's current time: on the path compiled for the plain
    /// configuration when the network is in it, else on the path that tests every mode.
    #[inline(always)]
    pub fn handle<E: From<NetEvent>, S: Endpoints>(&mut self, q: &mut EventQueue<E>, ev: NetEvent, ep: &mut S) {
        if self.plain {
            self.handle_in::<E, S, Plain>(q, ev, ep);
        } else {
            self.handle_full(q, ev, ep);
        }
    }

    /// [`Network::handle`] outside the plain configuration (out of line: the plain path stays
    /// compact where the driver inlines it).
    #[inline(never)]
    fn handle_full<E: From<NetEvent>, S: Endpoints>(&mut self, q: &mut EventQueue<E>, ev: NetEvent, ep: &mut S) {
        self.handle_in::<E, S, Full>(q, ev, ep);
    }

    #[inline(always)]
    fn handle_in<E: From<NetEvent>, S: Endpoints, M: Modes>(
        &mut self,
        q: &mut EventQueue<E>,
        ev: NetEvent,
        ep: &mut S,
    ) {
        let now = q.now();
        match ev.kind() {
            NetKind::Arrive => {
                let (pkt, gport) = (ev.pkt(), ev.arrive_port());
                self.on_wire -= 1;
                if M::ANY && self.fault_cut && self.lost_on_cable(q, pkt, Some(gport)) {
                    return;
                }
                let p = ix_mut(&mut self.packets, pkt);
                p.hops += 1;
                let vc = p.vc;
                let qi = self.qi(gport, vc);
                if !M::ANY {
                    // The plain configuration: a packet arriving at an empty queue is routed
                    // and, if its output decides for it now, sent without entering the queue
                    // (`route_head` queues it otherwise).
                    if self.inq.is_empty(qi) {
                        let router = ix(&self.inq.q, qi).router;
                        match self.route_head::<E, M, true>(q, qi, router, true, pkt) {
                            Head::Send { oi, vc } => {
                                // What the output's decision would do with its one request.
                                ix_mut(&mut self.out, oi).rr_q = NIL;
                                self.send_from::<E, S, M, SEND_SOLE>(q, oi, qi, vc, pkt, ep);
                            }
                            Head::Request(oi) => self.run_arbitrations::<E, S, M>(q, Some(oi), ep),
                            Head::None => {}
                        }
                    } else {
                        self.inq.push_back(qi, pkt);
                    }
                } else if self.inq.push_back(qi, pkt) == 1 {
                    let router = ix(&self.inq.q, qi).router;
                    let kick = self.new_head::<E, M>(q, qi, router);
                    self.run_arbitrations::<E, S, M>(q, kick, ep);
                }
            }
            NetKind::Arb => {
                let oport = ev.index();
                let o = ix_mut(&mut self.out, oport);
                if o.arb_at == now {
                    o.arb_at = SimTime::MAX;
                    self.run_arbitrations::<E, S, M>(q, Some(oport), ep);
                }
            }
            NetKind::Deliver => {
                let pkt = ev.pkt();
                self.on_wire -= 1;
                if M::ANY && self.fault_cut && self.lost_on_cable(q, pkt, None) {
                    return;
                }
                // The packet is handed out in its slot, which is free from here on.
                self.free_ids.push(pkt);
                let p = ix_mut(&mut self.packets, pkt);
                self.stats.add(NetStat::Delivered, 1);
                self.stats.add(NetStat::Hops, p.hops as u64);
                ep.deliver(p, now);
            }
            NetKind::Fault => self.fault_step(q, ev.fault_step(), ep),
            NetKind::Corrupt => self.corrupt_dropped(q, ev.pkt(), ev.corrupt_port()),
            NetKind::FlitHead => self.worm_head(q, ev.index(), ep),
            NetKind::FlitArb => self.worm_arb_event(q, ev.index(), ep),
            NetKind::InputFree => self.input_freed(q, ev.index(), ep),
        }
    }

    /// A packet became head of input queue `qi` at `router`: route it and request its output.
    /// Returns the output port to arbitrate next.
    #[inline(always)]
    fn new_head<E: From<NetEvent>, M: Modes>(
        &mut self,
        q: &mut EventQueue<E>,
        qi: u32,
        router: RouterId,
    ) -> Option<u32> {
        match self.route_head::<E, M, false>(q, qi, router, false, NIL) {
            Head::Request(oi) => Some(oi),
            Head::None => None,
            Head::Send { .. } => unreachable!("a head is sent at once only when asked"),
        }
    }

    /// [`Network::new_head`]; with `send` (the plain configuration's arrivals), a head whose
    /// output has no other request gets that output's decision here, the one the output would
    /// take next in the same event with its one request: if the link is free, the request's
    /// credits are there and the input port's read slot is free, the request is not linked
    /// and the caller sends the packet at once ([`Head::Send`]); otherwise the request is
    /// linked and the output waits for its link, the read slot or credits ([`Head::None`]).
    /// Both skip the decision's own checks, and the first the link and unlink.
    ///
    /// `FRESH`: packet `fresh` has arrived at the empty queue `qi` and is not in it yet; it
    /// joins the queue unless it is sent at once or dropped.
    #[inline(always)]
    fn route_head<E: From<NetEvent>, M: Modes, const FRESH: bool>(
        &mut self,
        q: &mut EventQueue<E>,
        qi: u32,
        router: RouterId,
        send: bool,
        fresh: PacketId,
    ) -> Head {
        // `port_base` has one entry per router and the total after them.
        let base = *ix(&self.port_base, router.0);
        let end = *ix(&self.port_base, router.0 + 1);
        let in_port = PortIdx(((qi >> self.vc_shift) - base) as u16);
        loop {
            let id = if FRESH {
                debug_assert!(self.inq.is_empty(qi));
                fresh
            } else {
                match self.inq.front(qi) {
                    Some(id) => id,
                    None => return Head::None,
                }
            };
            if M::ANY
                && self.ghosts != 0
                && ix(&self.packets, id).flags & F_GHOST != 0
                && self.ghost_expired(qi, id, q.now())
            {
                continue;
            }
            let routed = if M::ANY && self.mcast_seen && ix(&self.packets, id).flags & F_MCAST != 0 {
                self.multicast_route(qi, router, in_port, id)
            } else if !M::ANY && self.routing.dor_fast() {
                // Plain configuration: no multicast or fault-bypass packet, so no path.
                let p = ix_mut(&mut self.packets, id);
                self.routing.route_dor_fast(&self.topo, router, p)
            } else if !M::ANY && self.routing.tree_fast() {
                let p = ix_mut(&mut self.packets, id);
                self.routing
                    .route_tree_fast(&self.topo, router, in_port, qi >> self.vc_shift, p)
            } else {
                let mut view = PortCredits {
                    out: ix_range_mut(&mut self.out, base, end),
                    now: q.now(),
                    requests: &self.inq.q,
                };
                let p = ix_mut(&mut self.packets, id);
                self.routing.route(&self.topo, router, in_port, p, &mut view)
            };
            match routed {
                Ok(c) => {
                    let credits = ix(&self.packets, id).credits as u32;
                    // Routing answers a port of `router` (the view's ports are its own).
                    let oi = base + c.port.0 as u32;
                    let o = ix_mut(&mut self.out, oi);
                    // The bubble applies to ring channels only (never to an ejection port).
                    let private_only = c.enters_ring && matches!(o.to, Dest::Router { .. });
                    let need = if private_only {
                        credits + self.bubble_credits
                    } else if o.limited && o.to == Dest::Node && self.routing.uses_bubble() {
                        // A NIC's receive buffer is no ring buffer: a packet takes its own size
                        // there, not a bubble slot.
                        self.packets[id as usize]
                            .size
                            .div_ceil(self.cfg.router.credit_unit.0 as u32)
                    } else {
                        credits
                    };
                    let tail = o.req_tail;
                    let now = q.now();
                    // The output's decision on its one request, taken here (see above).
                    let sole = send && tail == NIL;
                    if sole && o.busy_until <= now {
                        o.absorb_in::<M>(now);
                        let o = ix(&self.out, oi);
                        if Self::need_fits::<M>(o, c.vc, need, private_only) && self.input_ready::<M>(qi) <= now {
                            return Head::Send { oi, vc: c.vc };
                        }
                    }
                    // The request (the record of queue `qi`).
                    let f = ix_mut(&mut self.inq.q, qi);
                    f.need = need;
                    f.out_port = c.port;
                    f.vc = c.vc;
                    f.private_only = private_only;
                    if FRESH {
                        self.inq.push_back(qi, id);
                    }
                    // Append it to the output's list.
                    let o = ix_mut(&mut self.out, oi);
                    let f = ix_mut(&mut self.inq.q, qi);
                    f.req_next = NIL;
                    f.req_prev = tail;
                    if tail == NIL {
                        o.req_head = qi;
                    } else {
                        ix_mut(&mut self.inq.q, tail).req_next = qi;
                    }
                    o.req_tail = qi;
                    if sole {
                        // It waits: for the link, the input port's read slot, or credits.
                        let busy = o.busy_until;
                        if busy > now {
                            self.wake_at(q, self.port_origin(oi), oi, busy);
                        } else if Self::request_fits::<M>(ix(&self.out, oi), ix(&self.inq.q, qi)) {
                            let t = self.input_ready::<M>(qi);
                            self.wake_at(q, self.port_origin(oi), oi, t);
                        } else {
                            self.starve(q, oi);
                        }
                        return Head::None;
                    }
                    return Head::Request(oi);
                }
                Err(reason) => {
                    if !FRESH {
                        self.inq.pop_front(qi);
                    }
                    self.release_input(q, qi, id, q.now());
                    let packet = self.take(id);
                    self.stats.add(NetStat::Dropped, 1);
                    self.drops.push(Drop {
                        packet,
                        at: q.now(),
                        reason,
                    });
                    if FRESH {
                        return Head::None;
                    }
                }
            }
        }
    }

    /// Return the credits `id` holds in input queue `qi` to the upstream port, freed at `at`.
    #[inline(always)]
    fn release_input<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>, qi: u32, id: PacketId, at: SimTime) {
        if qi >= self.node_q0 {
            return; // node source queue: no credits
        }
        let up = *ix(&self.upstream, qi >> self.vc_shift);
        if up == u32::MAX {
            return;
        }
        self.return_credits(q, qi, id, at, up);
    }

    /// [`Network::release_input`] for router queue `qi`, whose port has an upstream output
    /// (a packet in it arrived over that link).
    #[inline(always)]
    fn release_router_input<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>, qi: u32, id: PacketId, at: SimTime) {
        debug_assert!(qi < self.node_q0);
        let up = *ix(&self.upstream, qi >> self.vc_shift);
        debug_assert!(up != u32::MAX, "router queue {qi} holds a packet but has no upstream");
        self.return_credits(q, qi, id, at, up);
    }

    /// The credits `id` holds in router queue `qi` go back to its upstream output `up`.
    #[inline(always)]
    fn return_credits<E: From<NetEvent>>(
        &mut self,
        q: &mut EventQueue<E>,
        qi: u32,
        id: PacketId,
        at: SimTime,
        up: u32,
    ) {
        let p = ix(&self.packets, id);
        let (vc, shared) = (p.vc, p.shared_used);
        let private = p.credits - shared;
        let o = ix_mut(&mut self.out, up);
        let t = at + o.latency;
        o.returning.push((t, vc, private, shared));
        o.ret_min = o.ret_min.min(t);
        if o.starved {
            // The credits are a message from this router to the upstream port, one link
            // latency away.
            let by = Origin(ix(&self.router_of, qi >> self.vc_shift).0);
            self.wake_at(q, by, up, t);
        }
    }

    /// Make sure output `oi` arbitrates at `t` (one pending event per port; an earlier request
    /// supersedes a later one, which is then ignored).
    #[inline(always)]
    fn wake_at<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>, by: Origin, oi: u32, t: SimTime) {
        let o = ix_mut(&mut self.out, oi);
        if t < o.arb_at {
            o.arb_at = t;
            q.schedule_by(by, t, NetEvent::arb(oi).into());
        }
    }

    /// Arbitrate `first`, then each output the previous arbitration handed on. An arbitration
    /// makes at most one new head, which requests at most one output, so the work is a chain
    /// (this replaces a stack of pending kicks, with the same order, without its push/pop).
    #[inline(always)]
    fn run_arbitrations<E: From<NetEvent>, S: Endpoints, M: Modes>(
        &mut self,
        q: &mut EventQueue<E>,
        first: Option<u32>,
        ep: &mut S,
    ) {
        let mut next = first;
        while let Some(o) = next {
            next = self.arbitrate::<E, S, M>(q, o, ep);
            // Only the separable allocator and deciding ahead push kicks.
            if M::ANY && next.is_none() {
                next = self.kicks.pop();
            }
        }
    }

    /// Can packet `p`, waiting in a node's injection queue, go through the node's output `o` now
    /// (credits; under bubble flow control injection enters a ring)?
    #[inline]
    fn fits(&self, o: &OutPort, p: &Packet) -> bool {
        match o.to {
            Dest::Node if !o.limited => true,
            Dest::Node => o.free_private[vcx(p.vc)] as u32 + o.free_shared >= p.credits as u32,
            Dest::None => false,
            Dest::Router { .. } => {
                let need = p.credits as u32;
                if o.vc_held & (1u8 << p.vc) != 0 {
                    return false;
                }
                let private = o.free_private[vcx(p.vc)] as u32;
                if self.routing.uses_bubble() {
                    private >= need + self.bubble_credits
                } else {
                    private + o.free_shared >= need
                }
            }
        }
    }

    /// Can the request of queue record `r` go through router output `o` now (credits, bubble)?
    /// Downstream VCs are held per packet only outside the plain configuration, so its path
    /// skips that test.
    #[inline]
    fn request_fits<M: Modes>(o: &OutPort, r: &Fifo) -> bool {
        Self::need_fits::<M>(o, r.vc, r.need, r.private_only)
    }

    /// [`Network::request_fits`] for a request of `need` credits on downstream VC `vc`
    /// (`private_only`: the shared pool does not count).
    #[inline(always)]
    fn need_fits<M: Modes>(o: &OutPort, vc: u8, need: u32, private_only: bool) -> bool {
        match o.to {
            Dest::Router { .. } => {
                if M::ANY && o.vc_held & (1u8 << vc) != 0 {
                    return false;
                }
                let private = o.free_private[vcx(vc)] as u32;
                if private_only {
                    private >= need
                } else {
                    private + o.free_shared >= need
                }
            }
            Dest::Node if !o.limited => true,
            Dest::Node => o.free_private[vcx(vc)] as u32 + o.free_shared >= need,
            Dest::None => false,
        }
    }

    /// Pick the requesting input queue of router output `o` to serve, by the scenario's
    /// arbitration policy ([`crate::arbiter`]), scanning the requests in arrival order from the
    /// round-robin pointer `rr_q`.
    #[inline(always)]
    fn pick_request<M: Modes>(&self, o: &OutPort, now: SimTime) -> Option<u32> {
        // One requester (the common case below saturation; the caller checked the list is not
        // empty): no scan, no policy.
        if o.req_head == o.req_tail {
            let qi = o.req_head;
            return (Self::request_fits::<M>(o, ix(&self.inq.q, qi)) && self.input_ready::<M>(qi) <= now).then_some(qi);
        }
        if M::ANY && self.by_age {
            self.pick_by_age(o, now)
        } else {
            self.scan_requests::<RoundRobin, M>(o, RoundRobin, now)
        }
    }

    /// When a crossbar read slot of the input port of router queue `qi` is next free (zero
    /// when the port has no input constraint, `router.input_speedup` ≥ `vcs`). A multicast
    /// head is replicated in the crossbar from one read of its input and is not held back.
    #[inline(always)]
    fn input_ready<M: Modes>(&self, qi: u32) -> SimTime {
        if !M::ANY {
            return *ix(&self.in_free, qi >> self.vc_shift);
        }
        if self.in_speedup == 0 {
            return SimTime::ZERO;
        }
        let t = if self.in_speedup == 1 && !self.mcast_seen {
            *ix(&self.in_free, qi >> self.vc_shift)
        } else {
            self.input_ready_slow(qi)
        };
        if self.xbar.is_some() {
            return t.max(self.column_ready(qi));
        }
        t
    }

    /// Tiled crossbar: when the column channel the request of router queue `qi` needs is free
    /// (multicast copies take none).
    #[inline(never)]
    fn column_ready(&self, qi: u32) -> SimTime {
        let r = ix(&self.inq.q, qi);
        if self.mcast_seen && self.pkt(r.head).flags & F_MCAST != 0 {
            return SimTime::ZERO;
        }
        let gin = qi >> self.vc_shift;
        let base = self.port_base[ix(&self.router_of, gin).index()];
        let out = r.out_port.0 as u32;
        self.xbar
            .as_ref()
            .map_or(SimTime::ZERO, |x| x.free_at(gin, base + out, out))
    }

    #[inline(never)]
    fn input_ready_slow(&self, qi: u32) -> SimTime {
        if self.mcast_seen && self.pkt(ix(&self.inq.q, qi).head).flags & F_MCAST != 0 {
            return SimTime::ZERO;
        }
        let s = self.in_speedup as usize;
        let g = (qi >> self.vc_shift) as usize * s;
        self.in_free[g..g + s].iter().copied().min().unwrap_or(SimTime::ZERO)
    }

    /// A packet of router queue `qi` crosses the crossbar until `until`: it holds the input
    /// port's earliest free read slot until then.
    #[inline(always)]
    fn occupy_input<M: Modes>(&mut self, qi: u32, id: PacketId, until: SimTime) {
        if !M::ANY || (self.in_speedup == 1 && !self.mcast_seen) {
            *ix_mut(&mut self.in_free, qi >> self.vc_shift) = until;
            return;
        }
        self.occupy_input_slow(qi, id, until);
    }

    #[inline(never)]
    fn occupy_input_slow(&mut self, qi: u32, id: PacketId, until: SimTime) {
        if self.mcast_seen && self.pkt(id).flags & F_MCAST != 0 {
            return;
        }
        let s = self.in_speedup as usize;
        let g = (qi >> self.vc_shift) as usize * s;
        if let Some(slot) = self.in_free[g..g + s].iter_mut().min() {
            *slot = until;
        }
    }

    /// Tiled crossbar: a packet of router queue `qi` crosses to output `oi` until `until`, on
    /// its column channel.
    #[inline(never)]
    fn occupy_column(&mut self, qi: u32, id: PacketId, oi: u32, until: SimTime) {
        if self.mcast_seen && self.pkt(id).flags & F_MCAST != 0 {
            return;
        }
        let gin = qi >> self.vc_shift;
        let base = self.port_base[ix(&self.router_of, gin).index()];
        if let Some(x) = self.xbar.as_mut() {
            x.occupy(gin, oi, oi - base, until);
        }
    }

    /// Output `oi` found no request it can serve now: the earliest time an input port that
    /// holds one of its credit-fitting requests frees a crossbar read slot, if any is busy.
    #[cold]
    #[inline(never)]
    fn input_wait<M: Modes>(&self, oi: u32, now: SimTime) -> (Option<(SimTime, u32)>, bool) {
        let o = ix(&self.out, oi);
        let mut cur = o.req_head;
        let mut best: Option<(SimTime, u32)> = None;
        let mut credit_blocked = false;
        while cur != NIL {
            let r = ix(&self.inq.q, cur);
            if Self::request_fits::<M>(o, r) {
                let t = self.input_ready::<M>(cur);
                if t > now && best.is_none_or(|b| t < b.0) {
                    best = Some((t, cur));
                }
            } else {
                credit_blocked = true;
            }
            cur = r.req_next;
        }
        (best, credit_blocked)
    }

    /// Output `oi` found no request it can serve now: look again when the first busy input
    /// holding a credit-fitting request frees, and when credits return if a request waits for
    /// them (only then: a port woken by every credit return would decide in vain).
    #[cold]
    #[inline(never)]
    fn wait_inputs_or_credits<E: From<NetEvent>, M: Modes>(&mut self, q: &mut EventQueue<E>, oi: u32, at: SimTime) {
        let (t, credit_blocked) = self.input_wait::<M>(oi, at);
        if let Some((t, qi)) = t {
            if self.in_waiters.is_empty() {
                self.wake_at(q, self.port_origin(oi), oi, t);
            } else {
                self.wait_for_input(q, oi, qi >> self.vc_shift);
            }
        }
        if credit_blocked || t.is_none() {
            self.starve(q, oi);
        }
    }

    /// The earliest time router or node output `oi` may grant its next packet: when its link
    /// is free, or, with `router.output_speedup` S > 1 on a router output, when at most
    /// S − 1 packets of the size it last sent are still ahead on the link.
    #[inline(always)]
    fn grant_gate<M: Modes>(&self, oi: u32) -> SimTime {
        let o = ix(&self.out, oi);
        if !M::ANY {
            o.busy_until
        } else if self.ahead {
            // The start of the packet last granted: once it is on the link the next may be
            // granted, to follow it.
            o.busy_until.saturating_sub(o.ser_time)
        } else if self.out_backlog == 0 || oi >= self.router_ports {
            o.busy_until
        } else {
            o.busy_until.saturating_sub(o.ser_time * self.out_backlog)
        }
    }

    /// The age policy's scan, out of line: the hot path inlines only the default policy (the
    /// arbitration is inlined at several call sites, and instruction-cache misses dominated
    /// when every policy's loop was copied into each).
    #[cold]
    #[inline(never)]
    fn pick_by_age(&self, o: &OutPort, now: SimTime) -> Option<u32> {
        self.scan_requests::<Age, Full>(o, Age::default(), now)
    }

    /// Offer the requests of `o`, from the round-robin pointer on, cyclically, to `arb`.
    #[inline(always)]
    fn scan_requests<A: OutputArbiter, M: Modes>(&self, o: &OutPort, mut arb: A, now: SimTime) -> Option<u32> {
        let recs = &self.inq.q;
        let start = if o.rr_q == NIL { o.req_head } else { o.rr_q };
        let mut cur = start;
        loop {
            let r = ix(recs, cur);
            let req = ArbRequest {
                queue: cur,
                fits: Self::request_fits::<M>(o, r) && self.input_ready::<M>(cur) <= now,
                created: if A::NEEDS_AGE {
                    self.pkt(r.head).created
                } else {
                    SimTime::ZERO
                },
            };
            if let Some(q) = arb.visit(req) {
                return Some(q);
            }
            cur = if r.req_next == NIL { o.req_head } else { r.req_next };
            if cur == start {
                break;
            }
        }
        arb.finish()
    }

    /// Serve output `oi` if it can send now. Returns the output the served packet's successor
    /// (the new head of its input queue) requests, to be arbitrated next.
    #[inline(always)]
    fn arbitrate<E: From<NetEvent>, S: Endpoints, M: Modes>(
        &mut self,
        q: &mut EventQueue<E>,
        oi: u32,
        ep: &mut S,
    ) -> Option<u32> {
        let now = q.now();
        let o = ix_mut(&mut self.out, oi);
        if M::ANY && o.down {
            self.sink(q, oi, ep);
            return None;
        }
        if o.busy_until > now {
            let t = self.grant_gate::<M>(oi);
            if t > now {
                self.wake_at(q, self.port_origin(oi), oi, t);
                return None;
            }
        }
        // Absorb credits that have arrived by now.
        let o = ix_mut(&mut self.out, oi);
        o.absorb_in::<M>(now);
        let o = ix(&self.out, oi);
        let is_node = oi >= self.router_ports;
        // When the granted packet's transfer would start: now, or under `router.decide =
        // "ahead"` when the link frees (its input port must be free by then).
        let at = if M::ANY && self.ahead {
            now.max(o.busy_until)
        } else {
            now
        };
        // Pick the input queue to serve.
        let (qi, out_vc) = if is_node {
            // Round robin over the node's per-VC queues whose head fits downstream.
            let base = self.node_queue(oi - self.router_ports);
            let n = self.vcs;
            let mut any = false;
            let mut chosen = None;
            // `rr` < n: the VC after k steps wraps by one subtraction, not a division.
            for k in 0..n {
                let v = if o.rr + k >= n { o.rr + k - n } else { o.rr + k };
                if let Some(id) = self.inq.front(base + v) {
                    any = true;
                    if self.fits(o, self.pkt(id)) {
                        chosen = Some(v);
                        break;
                    }
                }
            }
            let Some(v) = chosen else {
                if any {
                    self.starve(q, oi);
                }
                return None;
            };
            if M::ANY && o.lk & LK_REPLAY != 0 && self.replay_stalls(q, oi, base + v, now) {
                return None;
            }
            ix_mut(&mut self.out, oi).rr = if v + 1 == n { 0 } else { v + 1 };
            let id = self.inq.front(base + v).expect("chosen queue has a head");
            (base + v, self.pkt(id).vc)
        } else {
            if o.req_head == NIL {
                return None;
            }
            if M::ANY && self.matcher.is_some() {
                return self.allocate_router(q, oi, ep);
            }
            let Some(qi) = self.pick_request::<M>(o, at) else {
                let in_speedup = !M::ANY || self.in_speedup != 0;
                if in_speedup && o.req_head == o.req_tail {
                    // One request (the common case): it is short of credits, or its input
                    // port is busy until `input_ready` (what `wait_inputs_or_credits` would
                    // find, without its walk).
                    let qi = o.req_head;
                    if Self::request_fits::<M>(o, ix(&self.inq.q, qi)) {
                        if !M::ANY || self.in_waiters.is_empty() {
                            let t = self.input_ready::<M>(qi);
                            self.wake_at(q, self.port_origin(oi), oi, t);
                        } else {
                            self.wait_for_input(q, oi, qi >> self.vc_shift);
                        }
                    } else {
                        self.starve(q, oi);
                    }
                } else if in_speedup {
                    self.wait_inputs_or_credits::<E, M>(q, oi, at);
                } else {
                    self.starve(q, oi);
                }
                return None;
            };
            if M::ANY && o.lk & LK_REPLAY != 0 && self.replay_stalls(q, oi, qi, now) {
                return None;
            }
            let o = ix_mut(&mut self.out, oi);
            if o.req_head == o.req_tail {
                // Its only request: the list empties (what `unlink_served` does with it).
                o.req_head = NIL;
                o.req_tail = NIL;
                o.rr_q = NIL;
                (qi, ix(&self.inq.q, qi).vc)
            } else {
                (qi, self.unlink_served(oi, qi))
            }
        };
        if is_node {
            self.send_from::<E, S, M, SEND_NODE>(q, oi, qi, out_vc, NIL, ep)
        } else {
            self.send_from::<E, S, M, SEND_ROUTER>(q, oi, qi, out_vc, NIL, ep)
        }
    }

    /// Unlink the request of queue `qi` from router output `oi` (it is being served); round
    /// robin resumes at the one after it. Returns the downstream VC it asked for.
    #[inline(always)]
    fn unlink_served(&mut self, oi: u32, qi: u32) -> u8 {
        let o = ix_mut(&mut self.out, oi);
        let recs = &mut self.inq.q;
        let (next, prev, vc) = {
            let r = ix(recs, qi);
            (r.req_next, r.req_prev, r.vc)
        };
        if prev == NIL {
            o.req_head = next;
        } else {
            ix_mut(recs, prev).req_next = next;
        }
        if next == NIL {
            o.req_tail = prev;
        } else {
            ix_mut(recs, next).req_prev = prev;
        }
        o.rr_q = next;
        vc
    }

    /// A separable allocator's decision at the router of output `oi`: every output of that
    /// router whose link can take a packet now offers its requests (those that fit downstream
    /// and whose input port has a free read slot, from the output's round-robin pointer on);
    /// the [`Matcher`] matches inputs to outputs and each match is served. Outputs left with
    /// requests wait for an input to free, or for credits. Returns an output to arbitrate
    /// next (the others go to `kicks`).
    #[inline(never)]
    fn allocate_router<E: From<NetEvent>, S: Endpoints>(
        &mut self,
        q: &mut EventQueue<E>,
        oi: u32,
        ep: &mut S,
    ) -> Option<u32> {
        let now = q.now();
        let router = self.router_of[oi as usize];
        let base = self.port_base[router.index()];
        let end = self.port_base[router.index() + 1];
        let radix = (end - base) as u16;
        let mut reqs = std::mem::take(&mut self.alloc_reqs);
        let mut matched = std::mem::take(&mut self.alloc_out);
        reqs.clear();
        matched.clear();
        for o in base..end {
            let op = &mut self.out[o as usize];
            if op.down || op.req_head == NIL || op.lk != 0 || self.grant_gate::<Full>(o) > now {
                // Links with a replay buffer or in fallback decide on their own (below).
                continue;
            }
            let op = &mut self.out[o as usize];
            op.absorb(now);
            let op = &self.out[o as usize];
            let start = if op.rr_q == NIL { op.req_head } else { op.rr_q };
            let mut cur = start;
            loop {
                let r = &self.inq.q[cur as usize];
                if Self::request_fits::<Full>(op, r) && self.input_ready::<Full>(cur) <= now {
                    reqs.push(AllocRequest {
                        input: ((cur >> self.vc_shift) - base) as u16,
                        output: (o - base) as u16,
                        queue: cur,
                    });
                }
                cur = if r.req_next == NIL { op.req_head } else { r.req_next };
                if cur == start {
                    break;
                }
            }
        }
        let in_free = &self.in_free;
        let s = self.in_speedup as usize;
        let vcs = self.vcs as u8;
        let cap = |i: u16| -> u8 {
            if s == 0 {
                vcs
            } else {
                let g = (base as usize + i as usize) * s;
                in_free[g..g + s].iter().filter(|&&t| t <= now).count() as u8
            }
        };
        self.matcher
            .as_mut()
            .expect("a separable allocator")
            .allocate(base, radix, &reqs, cap, &mut matched);
        let mut served = std::mem::take(&mut self.alloc_served);
        served.clear();
        served.resize(radix as usize, false);
        for m in &matched {
            let o = base + m.output as u32;
            // Tiled crossbar: two matches may need one column channel; the later waits.
            if self.xbar.is_some() && self.input_ready::<Full>(m.queue) > now {
                continue;
            }
            served[m.output as usize] = true;
            let vc = self.unlink_served(o, m.queue);
            if let Some(k) = self.send_from::<E, S, Full, SEND_ROUTER>(q, o, m.queue, vc, NIL, ep) {
                self.kicks.push(k);
            }
        }
        // Outputs with requests that were not served: wait for an input, or for credits.
        for o in base..end {
            // Credits due by now count (an output may have gained its request after the
            // offers above, from a head that a match exposed).
            self.out[o as usize].absorb(now);
            let op = &self.out[o as usize];
            if op.req_head == NIL || op.down || served[(o - base) as usize] {
                continue;
            }
            let gate = self.grant_gate::<Full>(o);
            if gate > now {
                self.wake_at(q, self.port_origin(o), o, gate);
            } else if op.lk != 0 {
                // A replay-buffer link arbitrates by itself, round robin.
                if let Some(qi) = self.pick_request::<Full>(op, now) {
                    if !self.replay_stalls(q, o, qi, now) {
                        let vc = self.unlink_served(o, qi);
                        if let Some(k) = self.send_from::<E, S, Full, SEND_ROUTER>(q, o, qi, vc, NIL, ep) {
                            self.kicks.push(k);
                        }
                    }
                } else {
                    self.starve(q, o);
                }
            } else {
                self.wait_inputs_or_credits::<E, Full>(q, o, now);
            }
        }
        self.alloc_reqs = reqs;
        self.alloc_out = matched;
        self.alloc_served = served;
        self.kicks.pop()
    }

    /// Send the head packet of queue `qi` (chosen by output `oi`, downstream VC `out_vc`):
    /// timing, link layer, credits, the event at the other end. Returns the output the new
    /// head of `qi` requests, to be arbitrated next.
    ///
    /// `FROM` says what is known of the send at compile time ([`SEND_SOLE`], [`SEND_ROUTER`],
    /// [`SEND_NODE`]); with [`SEND_SOLE`], packet `fresh` arrived at the empty router queue
    /// `qi` and is sent in its own arrival event, without entering the queue, by router output
    /// `oi`, which has no request ([`Head::Send`]): the queue is empty after it and the output
    /// has nothing more to decide, so neither is looked at.
    #[inline(always)]
    fn send_from<E: From<NetEvent>, S: Endpoints, M: Modes, const FROM: u8>(
        &mut self,
        q: &mut EventQueue<E>,
        oi: u32,
        qi: u32,
        out_vc: u8,
        fresh: PacketId,
        ep: &mut S,
    ) -> Option<u32> {
        let now = q.now();
        let sole = FROM == SEND_SOLE || FROM == SEND_INJECT;
        let is_node = FROM == SEND_NODE || FROM == SEND_INJECT;
        debug_assert_eq!(is_node, oi >= self.router_ports);
        let (id, last) = if sole {
            (fresh, true)
        } else if M::ANY && self.mcast_seen && !is_node {
            self.multicast_take_or_pop(qi, oi)
        } else {
            (self.inq.pop_front(qi).expect("head"), true)
        };
        if M::ANY && !self.in_waiters.is_empty() && ix(&self.out, oi).wait_on != NIL {
            // The output sends now; it decides again when its link frees.
            self.stop_waiting(oi);
        }
        let o = ix_mut(&mut self.out, oi);
        o.starved = false;
        // Timing.
        let p = ix(&self.packets, id);
        let (size, tail_at, credits) = (p.size, p.tail_at, p.credits);
        let ser = if o.ser_size == size {
            o.ser_time
        } else {
            let ser = o.rate.serialization(hpcnet_des::Bytes(size as u64));
            o.ser_size = size;
            o.ser_time = ser;
            ser
        };
        // The crossbar transfer (from the input buffer) starts when the tail could have arrived
        // at the latest; the link transmission when the link is free too (later only with an
        // output speedup, whose output buffer decouples the two).
        let mut start = now.max(tail_at.saturating_sub(ser));
        if M::ANY && self.ahead {
            // Granted ahead: the transfer follows the packet on the link.
            start = start.max(o.busy_until);
        }
        if (!M::ANY || self.in_speedup != 0) && !is_node {
            self.occupy_input::<M>(qi, id, start + ser);
            if M::ANY && self.xbar.is_some() {
                self.occupy_column(qi, id, oi, start + ser);
            }
        }
        let link_start = start.max(ix(&self.out, oi).busy_until);
        if M::ANY && self.ghosts != 0 && ix(&self.packets, id).flags & F_GHOST != 0 {
            // A corrupted copy in a cut-through receiver (it holds no input credits).
            return self.ghost_granted(q, oi, qi, id, out_vc, link_start, ser);
        }
        // Free the buffer the packet leaves, when its tail is out.
        if last && !is_node {
            self.release_router_input(q, qi, id, start + ser);
        }
        // The link layer: errors and retransmissions, the replay buffer, the fallback.
        let mut o = ix_mut(&mut self.out, oi);
        let bits = (size as u64) << 3;
        let sent = if o.lk == 0 && o.err_left >= bits {
            o.err_left -= bits;
            link_start
        } else {
            let sent = self.link_send(q, oi, id, out_vc, link_start, ser);
            o = ix_mut(&mut self.out, oi);
            sent
        };
        // Take credits downstream.
        o.busy_until = sent + ser;
        o.busy_ps += ser.0;
        o.packets += 1;
        let mut shared_used = 0u16;
        let mut credits = credits;
        if matches!(o.to, Dest::Router { .. }) || o.limited {
            if o.to == Dest::Node && self.routing.uses_bubble() {
                // Into a NIC's receive buffer by its own size (a bubble slot is a ring buffer's).
                credits = (size as u64).div_ceil(self.cfg.router.credit_unit.0) as u16;
            }
            let v = out_vc as usize;
            let from_private = credits.min(o.free_private[vcx(out_vc)]);
            o.free_private[vcx(out_vc)] -= from_private;
            shared_used = credits - from_private;
            o.free_shared -= shared_used as u32;
            if M::ANY && self.vc_per_packet && !is_node_dest(o.to) {
                o.vc_held |= 1u8 << v;
            }
        }
        let (lat, saf, to) = (o.latency, o.saf, o.to);
        self.last_progress = now;
        let p = ix_mut(&mut self.packets, id);
        p.vc = out_vc;
        p.credits = credits;
        p.shared_used = shared_used;
        p.tail_at = sent + ser + lat;
        if is_node {
            p.injected = start;
            self.stats.add(NetStat::Injected, 1);
            let k = oi - self.router_ports;
            ep.injected(NodeId(k / self.rails as u32), (k % self.rails as u32) as u8);
        }
        self.on_wire += 1;
        match to {
            Dest::Router { gport } => {
                let head = if saf { sent + ser + lat } else { sent + lat };
                q.schedule_by(
                    self.port_origin(oi),
                    head + self.cfg.router.latency,
                    NetEvent::arrive(id, gport).into(),
                );
            }
            Dest::Node => q.schedule_by(self.port_origin(oi), sent + ser + lat, NetEvent::deliver(id).into()),
            Dest::None => unreachable!("a dead port never fits"),
        }
        if sole {
            debug_assert!(self.inq.is_empty(qi) && ix(&self.out, oi).req_head == NIL);
            debug_assert!(!is_node || self.node_queues_empty(oi));
            return None;
        }
        // The input queue has a new head.
        let mut kick = None;
        if !is_node && !self.inq.is_empty(qi) {
            let router = ix(&self.inq.q, qi).router;
            kick = self.new_head::<E, M>(q, qi, router);
            if let Some(k) = kick {
                // The new head shares the input port the packet is still being read out of: with
                // one read slot it cannot cross before that ends, so its output looks again
                // then instead of failing now (an output with other requests that could go now
                // already has its own decision pending).
                let free = self.input_ready::<M>(qi);
                // Under `router.decide = "ahead"` the output may grant it now if it would
                // start no earlier than the read ends anyway (its link is busy until then).
                let by = if M::ANY && self.ahead {
                    now.max(ix(&self.out, k).busy_until)
                } else {
                    now
                };
                let one_slot = !M::ANY || (self.in_speedup == 1 && self.matcher.is_none());
                if one_slot && free > by {
                    if !M::ANY || self.in_waiters.is_empty() {
                        self.wake_at(q, self.port_origin(k), k, free);
                    } else {
                        self.wait_for_input(q, k, qi >> self.vc_shift);
                    }
                    kick = None;
                }
            }
        }
        // More work for this port once the link is free.
        let o = ix(&self.out, oi);
        let more = if is_node {
            !self.node_queues_empty(oi)
        } else {
            o.req_head != NIL
        };
        if more {
            let t = self.grant_gate::<M>(oi).max(now);
            if M::ANY && self.ahead && t == now {
                self.decide_next_now(oi);
            } else {
                self.wake_at(q, self.port_origin(oi), oi, t);
            }
        }
        kick
    }

    /// `router.decide = "ahead"`: the packet output `oi` just sent is on its link now, so its
    /// successor is granted in this event (out of line: the default's hot path stays small).
    #[cold]
    #[inline(never)]
    fn decide_next_now(&mut self, oi: u32) {
        self.kicks.push(oi);
    }

    /// `router.input_wait = "registered"`: output `oi` waits for router input port `g`, which
    /// is being read out until `in_free[g]`, behind the outputs already waiting there (an
    /// output waits for one port at a time: a new wait replaces the old). The port has one
    /// pending event, at the end of its read.
    #[inline(never)]
    fn wait_for_input<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>, oi: u32, g: u32) {
        let on = ix(&self.out, oi).wait_on;
        if on == g {
            return;
        }
        if on != NIL {
            self.stop_waiting(oi);
        }
        let w = &mut self.in_waiters[g as usize];
        let tail = w.tail;
        w.tail = oi;
        if tail == NIL {
            w.head = oi;
        } else {
            ix_mut(&mut self.out, tail).wait_next = oi;
        }
        let o = ix_mut(&mut self.out, oi);
        o.wait_on = g;
        o.wait_prev = tail;
        o.wait_next = NIL;
        self.input_event(q, g);
    }

    /// Make sure router input port `g` has its event at the end of its read.
    #[inline]
    fn input_event<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>, g: u32) {
        let t = *ix(&self.in_free, g);
        let w = &mut self.in_waiters[g as usize];
        if w.at != t {
            w.at = t;
            // The read's end is an event of the router owning the port.
            let by = Origin(ix(&self.router_of, g).0);
            q.schedule_by(by, t, NetEvent::input_free(g).into());
        }
    }

    /// Take output `oi` out of the queue of the input port it waits for.
    fn stop_waiting(&mut self, oi: u32) {
        let (g, prev, next) = {
            let o = ix_mut(&mut self.out, oi);
            let r = (o.wait_on, o.wait_prev, o.wait_next);
            o.wait_on = NIL;
            o.wait_prev = NIL;
            o.wait_next = NIL;
            r
        };
        let w = &mut self.in_waiters[g as usize];
        if prev == NIL {
            w.head = next;
        } else {
            ix_mut(&mut self.out, prev).wait_next = next;
        }
        if next == NIL {
            w.tail = prev;
        } else {
            ix_mut(&mut self.out, next).wait_prev = prev;
        }
    }

    /// The read out of router input port `g` ended: serve the outputs waiting for it in the
    /// order they came, until one takes the port again; the rest keep waiting for the end of
    /// that read.
    #[inline(never)]
    fn input_freed<E: From<NetEvent>, S: Endpoints>(&mut self, q: &mut EventQueue<E>, g: u32, ep: &mut S) {
        let now = q.now();
        let w = &mut self.in_waiters[g as usize];
        if w.at != now {
            return; // superseded
        }
        w.at = SimTime::MAX;
        loop {
            let head = self.in_waiters[g as usize].head;
            if head == NIL {
                return;
            }
            if *ix(&self.in_free, g) > now {
                self.input_event(q, g);
                return;
            }
            self.stop_waiting(head);
            self.run_arbitrations::<E, S, Full>(q, Some(head), ep);
        }
    }

    /// Output `oi` has work but no credits: wait for the earliest returning credits.
    fn starve<E: From<NetEvent>>(&mut self, q: &mut EventQueue<E>, oi: u32) {
        let o = ix_mut(&mut self.out, oi);
        o.starved = true;
        if let Some(t) = (o.ret_min != SimTime::MAX).then_some(o.ret_min) {
            self.wake_at(q, self.port_origin(oi), oi, t);
        }
    }

    fn router_of_gport(&self, g: u32) -> RouterId {
        *ix(&self.router_of, g)
    }

    /// Input VCs whose head packet is waiting, with what it waits for (deadlock reports).
    pub fn blocked(&self, limit: usize) -> Vec<Blocked> {
        if let Some(w) = &self.worm {
            return self.worm_blocked(w, limit);
        }
        let mut v = Vec::new();
        for qi in 0..self.node_q0 as usize {
            let Some(id) = self.inq.front(qi as u32) else { continue };
            let g = (qi >> self.vc_shift) as u32;
            let router = self.router_of_gport(g);
            let p = self.pkt(id);
            // The head's request (every head of a router input queue has one).
            let r = &self.inq.q[qi];
            let out_vc = r.vc;
            let o = &self.out[(self.port_base[router.index()] + r.out_port.0 as u32) as usize];
            v.push(Blocked {
                source_node: None,
                router,
                in_port: PortIdx((g - self.port_base[router.index()]) as u16),
                vc: (qi & ((1 << self.vc_shift) - 1)) as u8,
                queued: self.inq.len(qi as u32) as usize,
                head_dst: p.dst,
                out_port: r.out_port,
                out_vc,
                credits_needed: r.need,
                credits_free: match o.to {
                    // A router link, or an ejection port whose node accepts packets only into
                    // credited buffers.
                    Dest::Router { .. } | Dest::Node if matches!(o.to, Dest::Router { .. }) || o.limited => {
                        o.free_private[out_vc as usize] as u32
                            + o.free_shared
                            // On their way back: the VC's private credits, and shared-pool
                            // credits whatever VC they were used by.
                            + o.returning
                                .iter()
                                .map(|r| if r.1 == out_vc { (r.2 + r.3) as u32 } else { r.3 as u32 })
                                .sum::<u32>()
                    }
                    _ => u32::MAX,
                },
            });
            if v.len() >= limit {
                break;
            }
        }
        let nq = self.node_q0;
        for qi in nq..self.inq.count() as u32 {
            if v.len() >= limit {
                break;
            }
            let k = (qi - nq) >> self.vc_shift;
            let Some(id) = self.inq.front(qi) else { continue };
            let p = self.pkt(id);
            let (node, rail) = (NodeId(k / self.rails as u32), (k % self.rails as u32) as u8);
            let (router, port) = self.routing.attach(node, rail);
            let o = &self.out[(self.router_ports + k) as usize];
            v.push(Blocked {
                source_node: Some(node),
                router,
                in_port: port,
                vc: p.vc,
                queued: self.inq.len(qi) as usize,
                head_dst: p.dst,
                out_port: port,
                out_vc: p.vc,
                credits_needed: p.credits as u32
                    + if self.routing.uses_bubble() {
                        self.bubble_credits
                    } else {
                        0
                    },
                credits_free: o.free_private[vcx(p.vc)] as u32 + o.free_shared,
            });
        }
        v
    }

    /// Whether a packet is moving or about to: one is on a link (sent, not yet arrived), a link
    /// is still serialising after `now`, or credits are on their way back to a sender.
    pub fn moving(&self, now: SimTime) -> bool {
        if let Some(w) = &self.worm {
            return w.moving(now);
        }
        self.on_wire > 0
            || self
                .out
                .iter()
                .any(|o| o.busy_until > now || o.returning.iter().any(|r| r.0 > now))
            || self.link.awaiting_ack(now)
    }

    /// The evidence of a deadlock: input queues whose head packets wait for credits that only
    /// other such queues can free, in a cycle. `None` when there is none — some packet can
    /// still move, or will once a link finishes a transfer or returning credits arrive.
    ///
    /// A head waits on the input port its packet is to enter next: on the one VC it asks for,
    /// or on every VC of that port when the port has a shared credit pool (any VC's departure
    /// may free shared credits). Queues whose credits are on their way back, or whose wait
    /// ends at a node, are not waiting on the network. The set of queues that wait only on
    /// waiting queues (the greatest such set) is deadlocked when it holds a router queue; the
    /// cycle reported is one walked through it, in wait order.
    pub fn deadlock_cycle(&self) -> Option<Vec<Blocked>> {
        if let Some(w) = &self.worm {
            return self.worm_deadlock(w);
        }
        let shared = self.cfg.router.shared_credits > 0;
        let count = self.inq.count();
        // For each waiting queue: its report and the global input port it waits on.
        let mut waits: Vec<Option<(Blocked, u32)>> = vec![None; count];
        let blocked = self.blocked(usize::MAX);
        let mut router_qs = (0..self.node_q0).filter(|&qi| self.inq.front(qi).is_some());
        let mut node_qs = (self.node_q0..count as u32).filter(|&qi| self.inq.front(qi).is_some());
        for b in blocked {
            // `blocked` lists router queues then node queues, each in index order.
            let qi = if b.source_node.is_none() {
                router_qs.next()
            } else {
                node_qs.next()
            };
            let Some(qi) = qi else { break };
            if b.credits_free >= b.credits_needed {
                continue;
            }
            let oi = if b.source_node.is_none() {
                self.port_base[b.router.index()] + b.out_port.0 as u32
            } else {
                self.router_ports + ((qi - self.node_q0) >> self.vc_shift)
            };
            if let Dest::Router { gport } = self.out[oi as usize].to {
                waits[qi as usize] = Some((b, gport));
            }
        }
        // Greatest fixed point: drop every queue that waits on a port with a queue not in the set
        // (that queue can move, and free credits).
        let mut stuck: Vec<bool> = waits.iter().map(Option::is_some).collect();
        let vcs = self.vcs;
        let waited_on = |w: &(Blocked, u32)| -> Vec<u32> {
            let base = w.1 << self.vc_shift;
            if shared {
                (0..vcs).map(|v| base + v).collect()
            } else {
                vec![base + w.0.out_vc as u32]
            }
        };
        loop {
            let mut changed = false;
            for qi in 0..count {
                let Some(w) = waits[qi].as_ref().filter(|_| stuck[qi]) else {
                    continue;
                };
                let held = waited_on(w)
                    .into_iter()
                    .filter(|&d| self.inq.front(d).is_some())
                    .collect::<Vec<_>>();
                // An empty downstream queue holds no credits: the wait is on packets in flight
                // to it, which will arrive and move on.
                if held.is_empty() || held.iter().any(|&d| !stuck[d as usize]) {
                    stuck[qi] = false;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // Walk from a stuck router queue along stuck waits until a queue repeats.
        let start = (0..self.node_q0 as usize).find(|&qi| stuck[qi])?;
        let mut order: Vec<usize> = Vec::new();
        let mut at = start;
        while !order.contains(&at) {
            order.push(at);
            let w = waits[at].as_ref()?;
            at = waited_on(w).into_iter().find(|&d| stuck[d as usize])? as usize;
        }
        let first = order.iter().position(|&q| q == at).unwrap_or(0);
        Some(
            order[first..]
                .iter()
                .filter_map(|&qi| waits[qi].as_ref().map(|w| w.0.clone()))
                .collect(),
        )
    }

    /// Make every node accept packets only into `per_vc` credits per VC of receive buffer, which
    /// the NIC model returns with [`Network::release_ejection`] when it has consumed a packet.
    /// Without this, ejection never blocks.
    pub fn set_ejection_credits(&mut self, per_vc: u16) {
        let vcs = self.cfg.router.vcs as usize;
        for o in self.out.iter_mut().filter(|o| o.to == Dest::Node) {
            o.limited = true;
            o.free_private = [0; MAX_VCS];
            o.free_private[..vcs].fill(per_vc);
            o.free_shared = 0;
        }
    }

    /// The receive-buffer credits a delivered packet holds: (vc, private, shared).
    pub fn buffer_credits(p: &Packet) -> (u8, u16, u16) {
        (p.vc, p.credits - p.shared_used, p.shared_used)
    }

    /// A node consumed a delivered packet: its credits go back to the router port feeding it.
    pub fn release_ejection<E: From<NetEvent>>(
        &mut self,
        q: &mut EventQueue<E>,
        node: NodeId,
        rail: u8,
        credits: (u8, u16, u16),
    ) {
        let (r, p) = self.routing.attach(node, rail);
        let oi = self.port_base[r.index()] + p.0 as u32;
        let o = &mut self.out[oi as usize];
        if !o.limited {
            return;
        }
        let t = q.now() + o.latency;
        o.returning.push((t, credits.0, credits.1, credits.2));
        o.ret_min = o.ret_min.min(t);
        if o.starved {
            // The credits are a message from the node to its router, one link latency away.
            self.wake_at(q, self.node_origin(node), oi, t);
        }
    }

    /// Busy time and packet count of every cabled link direction (router ports, then node rails).
    pub fn link_use(&self) -> Vec<LinkUse> {
        let mut v = Vec::new();
        for (r, info) in self.topo.routers.iter().enumerate() {
            for p in 0..info.ports.len() {
                let o = &self.out[(self.port_base[r] + p as u32) as usize];
                if o.to != Dest::None {
                    v.push(LinkUse {
                        from: format!("r{r}.p{p}"),
                        busy_ps: o.busy_ps,
                        packets: o.packets,
                    });
                }
            }
        }
        for n in 0..self.topo.nodes.len() {
            for rail in 0..self.rails {
                let o = &self.out[self.node_oport(NodeId(n as u32), rail) as usize];
                v.push(LinkUse {
                    from: format!("n{n}.rail{rail}"),
                    busy_ps: o.busy_ps,
                    packets: o.packets,
                });
            }
        }
        v
    }

    /// Busy picoseconds of every output port, in a fixed order (cheap snapshot for windows).
    pub fn busy_snapshot(&self) -> Vec<u64> {
        self.out.iter().map(|o| o.busy_ps).collect()
    }

    /// Busy picoseconds of every output port up to time `t` (order of
    /// [`Network::busy_snapshot`]): a transmission is counted when it starts, so the part of
    /// the last one that lies after `t` is taken off. Differences of two such snapshots are
    /// the busy time inside a window, never more than its length.
    pub fn busy_snapshot_at(&self, t: SimTime) -> Vec<u64> {
        self.out
            .iter()
            .map(|o| {
                // Transmissions of a port do not overlap: only the last can end after `t`, and
                // `ser_time` holds its serialisation time.
                let after = o.busy_until.saturating_sub(t).min(o.ser_time);
                o.busy_ps - after.0
            })
            .collect()
    }

    /// Whether output `i` of a [`Network::busy_snapshot`] is a cabled, live link.
    pub fn snapshot_is_link(&self, i: usize) -> bool {
        self.out[i].to != Dest::None
    }

    /// Name of output `i` of a [`Network::busy_snapshot`].
    pub fn snapshot_name(&self, i: usize) -> String {
        let i = i as u32;
        if i < self.router_ports {
            let r = self.router_of_gport(i);
            format!("r{r}.p{}", i - self.port_base[r.index()])
        } else {
            let k = i - self.router_ports;
            format!("n{}.rail{}", k / self.rails as u32, k % self.rails as u32)
        }
    }
}

/// Lanes, latency, switching and bit-error rate of the cable at port `p` of router `r`.
fn link_params(cfg: &FabricConfig, topo: &Topology, r: RouterId, p: PortIdx) -> (u32, SimTime, Switching, f64) {
    let mut lanes = cfg.link.lanes;
    let mut lat = cfg.link.latency;
    let mut sw = cfg.link.switching;
    let mut ber = cfg.link.ber;
    let peer = match topo.routers[r.index()].ports[p.index()] {
        Peer::Router { router, port } => Some((router, port)),
        _ => None,
    };
    for o in &cfg.link_overrides {
        if (o.router, o.port) == (r, p) || Some((o.router, o.port)) == peer {
            lanes = o.lanes.unwrap_or(lanes);
            lat = o.latency.unwrap_or(lat);
            sw = o.switching.unwrap_or(sw);
            ber = o.ber.unwrap_or(ber);
        }
    }
    (lanes, lat, sw, ber)
}

fn base_rate_for(cfg: &FabricConfig, lanes: u32, base: BitsPerSec) -> BitsPerSec {
    if lanes == cfg.link.lanes {
        base
    } else {
        let (n, d) = cfg.link.encoding.ratio();
        (cfg.link.lane_rate * lanes as u64).scaled(n, d)
    }
}

/// FIFO queues of packets threaded through the packet slab: a queue costs three words however
/// long it is, and pushing or popping never allocates (many small `VecDeque`s were the main
/// source of cache misses).
struct Queues {
    /// One record per queue: the three fields a push or pop touches share a cache line (three
    /// separate arrays cost three misses per operation).
    q: Vec<Fifo>,
    /// `next[packet]`: the packet behind it in its queue.
    next: Vec<u32>,
}

/// An input queue, and its head packet's request for an output port. The request carries what
/// arbitration checks (credits needed, downstream VC, whether only private credits count), so a
/// scan over an output's requests reads these records alone; the records are linked per output
/// port (no per-port heap list: one cache line less per hop). 32 bytes, aligned: an index is
/// one shift, and a record never straddles two cache lines.
#[derive(Copy, Clone)]
#[repr(align(32))]
struct Fifo {
    head: u32,
    tail: u32,
    len: u32,
    /// Next and previous requesting queue of the same output port (NIL: none).
    req_next: u32,
    req_prev: u32,
    /// Credits needed downstream (packet credits, plus the bubble when entering a ring).
    need: u32,
    /// Requested output port (of the queue's router) and downstream VC.
    out_port: PortIdx,
    vc: u8,
    /// Entering a ring under bubble flow control: the shared pool does not count.
    private_only: bool,
    /// Router queues: the router owning the input port (a copy of `Network::router_of`, in
    /// the line a push or pop touches anyway; a new head is routed without a load from that
    /// table, which misses the data cache on most hops). Node queues: `u32::MAX`.
    router: RouterId,
}

const _: () = assert!(std::mem::size_of::<Fifo>() == 32);

const NIL: u32 = u32::MAX;

/// `v[i]` without the bounds check, for the hot path's dense tables, whose indices the network
/// forms itself and whose lengths never shrink. What makes each index valid:
/// - `out`: output port indices are `port_base[r] + p` for a port `p` of router `r`, or
///   `router_ports + node × rails + rail` for a node rail; every `OutPort` is created in
///   [`Network::new`] and none is ever removed. Events and `upstream` hold only such indices.
/// - `packets` (and `Queues::next`, grown with it): packet ids come from [`Network::alloc`],
///   below the slab's length, and the slab never shrinks (freed ids are reused).
/// - `Queues::q`, `upstream`, `in_free`, `port_base`, `router_of`: queue and port indices are
///   formed from router ports (`gport << vc_shift | vc`, `vc < vcs`) or node rails, all sized
///   at construction (`in_free` is read only when the input speedup is in force).
///
/// Debug builds (and so every test) check the bound.
#[inline(always)]
fn ix<T>(v: &[T], i: u32) -> &T {
    debug_assert!((i as usize) < v.len(), "index {i} of {}", v.len());
    // SAFETY: `i < v.len()` by the invariants listed above (checked in debug builds).
    unsafe { v.get_unchecked(i as usize) }
}

/// [`ix`], mutable.
#[inline(always)]
fn ix_mut<T>(v: &mut [T], i: u32) -> &mut T {
    debug_assert!((i as usize) < v.len(), "index {i} of {}", v.len());
    // SAFETY: as in [`ix`].
    unsafe { v.get_unchecked_mut(i as usize) }
}

/// `&mut v[a..b]` without the bounds checks, for the ports `port_base[r]..port_base[r + 1]`
/// of a router (`port_base` is non-decreasing and ends at the number of router ports).
#[inline(always)]
fn ix_range_mut<T>(v: &mut [T], a: u32, b: u32) -> &mut [T] {
    debug_assert!(a <= b && (b as usize) <= v.len(), "range {a}..{b} of {}", v.len());
    // SAFETY: `a <= b <= v.len()` by the invariant above (checked in debug builds).
    unsafe { v.get_unchecked_mut(a as usize..b as usize) }
}

/// Index of VC `vc` in a per-VC credit array (`[_; MAX_VCS]`): VCs are below `router.vcs`,
/// which the configuration bounds by `MAX_VCS`, a power of two, so the mask changes nothing
/// and lets the compiler drop the bounds check.
#[inline(always)]
fn vcx(vc: u8) -> usize {
    const { assert!(MAX_VCS.is_power_of_two()) };
    debug_assert!((vc as usize) < MAX_VCS, "VC {vc} of {MAX_VCS}");
    vc as usize & (MAX_VCS - 1)
}

/// What a new head of a router input queue asks for ([`Network::route_head`]).
enum Head {
    /// Nothing to decide now: the queue is empty (its packets were dropped), or the head's
    /// output waits with it as its one request.
    None,
    /// The head's request is linked at output `.0`, which decides next.
    Request(u32),
    /// Output `oi` serves the head now, on downstream VC `vc`; its request is not linked.
    Send { oi: u32, vc: u8 },
}

/// The router modes the hot path was compiled for. The hot functions (arrival, head routing,
/// arbitration, send) are generic over it: [`Full`] tests at run time each option a scenario
/// may switch on, [`Plain`] is the network's plain configuration ([`Network::refresh_plain`]),
/// in which every such test is false at compile time and drops out of the instruction stream.
/// [`Network::handle`] dispatches once per event; the configuration cannot enter a mode in the
/// middle of an event.
trait Modes {
    /// Optional modes may be in force (false: the plain configuration).
    const ANY: bool;
}

/// The plain configuration: see [`Network::refresh_plain`] for what it excludes.
struct Plain;

/// Any configuration: every mode tested at run time.
struct Full;

impl Modes for Plain {
    const ANY: bool = false;
}

impl Modes for Full {
    const ANY: bool = true;
}

/// The outputs waiting for one router input port's read to end (`router.input_wait =
/// "registered"`): a list threaded through the outputs, and the time of the port's pending
/// event (MAX: none).
#[derive(Copy, Clone)]
struct InWaiters {
    head: u32,
    tail: u32,
    at: SimTime,
}

impl InWaiters {
    const EMPTY: InWaiters = InWaiters {
        head: NIL,
        tail: NIL,
        at: SimTime::MAX,
    };
}

impl Queues {
    fn new(n: usize) -> Self {
        Queues {
            q: vec![
                Fifo {
                    head: NIL,
                    tail: NIL,
                    len: 0,
                    req_next: NIL,
                    req_prev: NIL,
                    need: 0,
                    out_port: PortIdx(0),
                    vc: 0,
                    private_only: false,
                    router: RouterId(u32::MAX),
                };
                n
            ],
            next: Vec::new(),
        }
    }
    fn count(&self) -> usize {
        self.q.len()
    }
    #[inline]
    fn len(&self, q: u32) -> u32 {
        ix(&self.q, q).len
    }
    #[inline]
    fn is_empty(&self, q: u32) -> bool {
        ix(&self.q, q).len == 0
    }
    #[inline]
    fn front(&self, q: u32) -> Option<PacketId> {
        let h = ix(&self.q, q).head;
        (h != NIL).then_some(h)
    }
    /// Make room for packet ids below `n` (called when the packet slab grows, so `push_back`
    /// never has to check).
    fn grow(&mut self, n: usize) {
        if self.next.len() < n {
            self.next.resize(n, NIL);
        }
    }
    /// Append `id`; returns the new length.
    #[inline]
    fn push_back(&mut self, q: u32, id: PacketId) -> u32 {
        *ix_mut(&mut self.next, id) = NIL;
        let f = ix_mut(&mut self.q, q);
        if f.tail == NIL {
            f.head = id;
        } else {
            *ix_mut(&mut self.next, f.tail) = id;
        }
        f.tail = id;
        f.len += 1;
        f.len
    }
    #[inline]
    fn pop_front(&mut self, q: u32) -> Option<PacketId> {
        let f = ix_mut(&mut self.q, q);
        let h = f.head;
        if h == NIL {
            return None;
        }
        let n = *ix(&self.next, h);
        f.head = n;
        if n == NIL {
            f.tail = NIL;
        }
        f.len -= 1;
        Some(h)
    }
}
/// Key of a run's packet random bits: SplitMix64 of the seed and a constant naming the stream.
fn salt_key(seed: u64) -> u64 {
    mix64(seed ^ 0x5A17_0F0B_110A_u64)
}

/// SplitMix64 finaliser.
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[path = "net_link.rs"]
mod link;
pub use link::LinkErrors;

#[cfg(test)]
#[path = "net_tests.rs"]
mod tests;
