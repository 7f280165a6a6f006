//! The triggered offload unit in the timed [`World`]: virtual ports, descriptor queues, the
//! parser, pulse counters, offload packets on the fabric, the hash buffers with back-pressure,
//! firing on a busy-until reduction pipeline and completions to the host (spec 04).
//!
//! **Posting.** A rank opens a virtual port ([`World::trig_open_vp`]; the VP number, 0 … 2047
//! per NIC, is the key's 11-bit VP field) and posts a collective as one [`TrigPost`]: its
//! pulses, each a descriptor sequence (CH … CT) with the serial number that tells pulses
//! apart. The post is checked at once ([`Shape::new`] on every sequence, CollEndFlag on the
//! last descriptor, DestIDs inside the machine, pulse sizes, slot sizes, host buffers): a bad
//! post is a [`PostError`]. A sequence the units refuse (more senders than `streams`, …)
//! completes with [`CqeStatus::TrigFailed`]. The pulses of a post come as runs
//! ([`TrigRun`]): a group of sequences repeated over successive elements, each repetition
//! with the next serials and JobIDs and its addresses moved by the run's stride. Each
//! sequence of a run's group is checked once, into a [`Shape`]; a pulse is a walk of its
//! group's shape with its own JobID, serial and address shift ([`Walker::start`]: no
//! re-validation, no copy of the descriptors), generated from its run when its counter is
//! granted, and the local data of descriptors that give it by address (RDMA descriptors) are
//! read from host memory then (the DMA engine issues its memory requests while it holds the pulse credit; the read's time is
//! charged before the pulse starts), so a post holds the memory of its pulses in flight, not
//! of its whole vector. At post time every such address range is checked to be readable.
//!
//! **Point-to-point descriptors.** A VP also takes point-to-point descriptors (C = 0,
//! [`World::trig_post_p2p`]): an MP descriptor carries its data (at most one packet,
//! `packet.max_payload`), an RDMA descriptor names them by local address and length; both
//! name the destination (DestID, DestVP) and a remote address. They are checked at post time
//! (the VP open, the destination a node with that VP open, the local and the remote range
//! inside registered memory, the MP size; a bad post is a [`PostError`]) and enter the same
//! descriptor queue as collective posts, in posting order. Once parsed, a descriptor goes to
//! the NIC's point-to-point sender, which takes one descriptor at a time: it reads an RDMA
//! descriptor's data by DMA (on the read channel the pulses' local data use; MP data came with
//! the descriptor) and hands its packets to the fabric as CP = 0 offload packets; the sender
//! is then free and a completion of kind [`CqeKind::TrigP2p`] goes to the post's completion
//! queue (the completion says the source data may be reused, as a local send completion
//! does; the sender does not wait for the remote write). At the destination the CP bit is
//! read: a CP = 0 packet never enters an offload unit, the hash buffer or the early store and
//! needs no live sequence there; once whole it is written to the memory of the rank owning
//! its DestVP at the address it carries, a DMA write through the host interface like a
//! completion's (`nic.trig.p2p_delivered` and `p2p_bytes` count them). CP = 1 packets are the
//! collectives' (a collective step that sends sets CP, [`Shape::new`] refuses one that does
//! not), handed to the units as below.
//!
//! **Doorbell, parser, scheduler.** A post reaches the NIC's descriptor queue of its VP
//! `host.doorbell_latency` later. One parser per NIC classifies the head of each queue as
//! collective or point-to-point and takes one head at a time by this rule: first the queues
//! whose head can go downstream now — a collective head while the NIC has fewer than
//! `collectives` active collectives, a point-to-point head while the point-to-point sender is
//! idle — then the queue holding the most descriptors (a collective post counts the
//! descriptors of all its pulses, a point-to-point descriptor one), then the lower VP. When no
//! head can go downstream it takes one by occupancy all the same (the parser never idles with
//! work queued). Whether a head can go downstream is one comparison per head, and every
//! collective head answers alike, so a NIC with collective posts only chooses by occupancy
//! alone. The parser fetches the head's descriptors (one DMA read round trip) and spends
//! `parse_time` per descriptor of a collective's first pulse — later pulses walk the same
//! sequence shape over other elements — or once for a point-to-point descriptor. A parsed
//! collective post becomes one of the NIC's active collectives (at most `collectives`; one
//! more completes with an error).
//!
//! **Pulses.** Each pulse takes a counter of the NIC's [`PulseController`] before it starts;
//! its counter returns when its sequence has completed at this NIC (the responses of the
//! pulse are counted in one step, at its completion). A collective holding no counter may
//! always ask for one; one holding some may take another only while the free counters exceed
//! one per collective that could still arrive (`collectives` − active) plus one per active
//! collective holding none. With `pulse_counters ≥ collectives` every active collective thus
//! holds a counter whenever it has a pulse to start, the lowest unfinished pulse of every
//! collective runs at all its members, and the counters cannot deadlock; a single collective
//! keeps up to `pulse_counters − collectives + 1` pulses in flight. With fewer counters a
//! request may be refused ([`Acquire::Retry`]): it is repeated every `pulse_retry`, and after
//! `pulse_timeout` the collective completes with [`CqeStatus::TrigTimeout`].
//!
//! **Telling pulses apart.** The 48-bit key has no room for a pulse number (SeqID has 5
//! bits). Each pulse is a sequence of its own with its own JobID, and every offload packet
//! carries a *serial number beside the key* (a header field of the offload packet, outside the
//! 48-bit key): the sequence's serial, which the library numbers per communicator. A packet
//! enters the unit only while the sequence of its (JobID, destination VP) with that serial is
//! live there; any other packet for an open VP is an early arrival and waits in the NIC's
//! early store until its pulse starts. JobIDs may thus repeat every 256 pulses without a
//! packet of a later pulse ever being taken for one of an earlier pulse.
//!
//! **Packets.** A `Send` becomes ⌈bytes / `packet.max_payload`⌉ fabric packets (a header-only
//! packet for no data) tagged as offload packets; the side table holds the collective packet
//! until its last fragment is in, `nic.rx_overhead` later (plus a seeded random delay of up to
//! `jitter`, zero by default) it enters the unit. A send between two VPs of one NIC crosses it
//! in `nic.loopback_latency` without the fabric.
//!
//! **Buffer and back-pressure.** A packet goes to the unit holding its sequence. While that
//! unit is busy firing (or other packets wait before it) the packet waits in the unit's buffer
//! in arrival order, taking one slot — unless a parked read awaits its key, when it waits in
//! the reader's operand register instead, so a buffer full of later steps' packets never
//! blocks the packet a step waits for — and the unit takes the waiting packets when it is
//! free. A free unit takes a packet at once ([`OffloadUnits::arrive`]): an awaited packet goes
//! straight to its walker, others take a hash-buffer slot. A full buffer refuses the packet:
//! with `nic.rx_buffer` set its fragments keep their receive-buffer credits, so the fabric
//! stops delivering to that NIC port (the credit push-back); the packet is retried, in arrival
//! order, after every change in the NIC's units, and nothing is lost. Per NIC the model keeps
//! the time integral of the occupied slots and the time during which a collective was in
//! progress ([`World::trig_buffer_use`]: mean utilisation, peak, data taken).
//!
//! **Firing.** Everything a unit fires in response to one post or arrival costs
//! `step_overhead` per step plus the reduced operand bytes at the type's `rate_*`, on the
//! unit's busy-until pipeline; the resulting sends and completions happen when it is done.
//! (The walker itself moves on at once: the reads of its next step are parked immediately,
//! while the unit's time is charged to what it fired.)
//! A completion writes the result to host memory (DMA write through the host interface) at
//! the address of the CollEndFlag descriptor's payload; when every pulse of the post is
//! written, a [`CqeKind::Trig`] completion goes to the post's completion queue.
//!
//! Simplifications: offload packets are injected into the fabric directly, as the hardware
//! collective unit's are (they share neither the message engines nor the transmit backlog
//! bound `nic.tx_queue`), on rail `serial mod rails`, and a collective packet pays
//! `nic.rx_overhead` once, when its last fragment is in; the offload unit's DMA reads use a
//! read channel of their own (they do not queue behind message engines' reads); the slots of
//! packets waiting for a busy unit are counted, not placed in the hash table (they take their
//! home slot when the unit takes them); early arrivals wait in an unbounded store (the paper
//! does not say where packets of a collective not yet started wait); without `nic.rx_buffer` a refused packet waits in the NIC instead
//! of the network; point-to-point descriptors are sent on rail `VP mod rails`, check their
//! remote range against the receiving rank's registered memory without a memory key, and
//! get a completion at the sender only (none at the receiver).
//!
//! **Abort.** A collective that fails at one member (pulse-counter time-out, unit limit,
//! walk error) sends a header-only abort packet to every member its sequences send to or wait
//! for; each member it reaches completes with an error and passes it on, so every member of
//! the collective returns (the sequences of a collective connect its members). An abort for
//! a post not parsed yet fails it when the parser is done with it; one for a post not made
//! yet waits at the NIC, keyed by VP and pulse serial. Where a collective fails, its pulses'
//! sequences leave their units at once ([`OffloadUnits::cancel`]): their parked reads and
//! buffered packets go, as do their packets waiting for a busy unit, refused (their
//! receive-buffer credits return to the fabric) or stored early, and their pulse counters
//! return to the controller, so later collectives on the NIC get the counters and slots.
//! The NIC keeps the failed post's pulse serials (per VP, a range; serials are never reused on
//! a VP): a packet of the failed collective still on the wire at the failure is recognised by
//! its VP and serial when it arrives and dropped (`nic.trig.dropped`, with the early-store
//! packets dropped at the failure; packets taken out of a unit count as
//! `nic.trig.discarded`), never as an error and never kept in the early store.
//!
//! Cost: a collective of p members and m elements runs ⌈m / pulse⌉ pulses, each a walk of its
//! sequence (O(log p) steps for the library's algorithms), so O((m / pulse) · log p) events per
//! member plus one per fabric packet; the parser costs O(descriptors) per post. In simulated
//! time a pulse takes about its O(log p) steps' network hops plus `step_overhead` and its
//! reduced bytes at `rate_*` per step, and up to `pulse_counters − collectives + 1` pulses of
//! one collective overlap, so a long vector's time grows linearly with its bytes.

use super::desc::{CollDescriptor, Payload, Shape, TrigAction, TrigPacket, Walker};
use super::hashbuf::{FixedState, HashBufConfig};
use super::pulse::{Acquire, CounterId, PulseConfig, PulseController, PulseError};
use super::unit::{OffloadUnits, UnitAction, UnitError, UnitsConfig};
use crate::coll::CollType;
use crate::cq::{Cqe, CqeKind, CqeStatus};
use crate::ids::{CqId, Rank};
use crate::op::PostError;
use crate::world::{World, WorldEvent};
use hpcnet_des::stats::{Registry, StatRecord};
use hpcnet_des::{Bytes, SimTime};
use hpcnet_fabric::topology::NodeId;
use hpcnet_fabric::{Network, Packet};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

/// VPs per NIC (the key's 11-bit VP field).
pub const MAX_VPS: u32 = 1 << 11;

/// One pulse of a posted collective: a descriptor sequence and the serial number its packets
/// carry beside the key.
#[derive(Clone, Debug, PartialEq)]
pub struct TrigPulse {
    /// Serial of the sequence (the pulse field beside the key); distinct for the live
    /// sequences of one VP, numbered alike at every member.
    pub serial: u64,
    /// Elements of the pulse (what its counter counts), 1 … ⌊C / k⌋.
    pub elements: u64,
    pub descriptors: Vec<CollDescriptor>,
}

/// Pulses that repeat one group of sequences over successive elements of the buffers: the
/// `r`-th repetition (0 … `times` − 1) of the group's pulse `j` has serial `group[j].serial +
/// r · group.len()`, JobID `(job + r · group.len()) mod 256` and every address payload moved
/// by `r · stride` bytes. The NIC generates a pulse's descriptors when its counter is granted,
/// so a long vector costs the memory of the pulses in flight, not of all its pulses.
#[derive(Clone, Debug, PartialEq)]
pub struct TrigRun {
    pub group: Vec<TrigPulse>,
    pub times: u64,
    pub stride: u64,
}

impl TrigRun {
    /// The pulses of `group`, once each.
    pub fn once(group: Vec<TrigPulse>) -> TrigRun {
        TrigRun {
            group,
            times: 1,
            stride: 0,
        }
    }

    /// Pulses in the run.
    pub fn pulses(&self) -> u64 {
        self.times * self.group.len() as u64
    }
}

/// A collective posted on a VP: its pulses, in order, as runs of repeated groups.
#[derive(Clone, Debug, PartialEq)]
pub struct TrigPost {
    pub vp: u32,
    pub runs: Vec<TrigRun>,
    pub cq: CqId,
    pub wr_id: u64,
}

/// A point-to-point descriptor (C = 0) posted on a VP: it writes its data to `remote_addr` in
/// the host memory of the rank owning VP `dest_vp` of node `dest_id`. An MP descriptor carries
/// the data (`Payload::Operands`, at most `packet.max_payload` bytes: one packet); an RDMA
/// descriptor names them in the poster's memory (`Payload::Address`), and the NIC reads them
/// by DMA once the parser has handed the descriptor on. A completion of kind
/// [`CqeKind::TrigP2p`] goes to `cq` when its packets have left the NIC.
#[derive(Clone, Debug, PartialEq)]
pub struct TrigP2p {
    pub vp: u32,
    /// DestID (24 bits) and DestVP (11 bits) of the receiving VP.
    pub dest_id: u32,
    pub dest_vp: u32,
    /// Where the data go in the receiving rank's memory.
    pub remote_addr: u64,
    pub payload: Payload,
    pub cq: CqId,
    pub wr_id: u64,
}

/// A post waiting in a descriptor queue: a collective (its [`PostState`]) or a point-to-point
/// descriptor (its [`P2pState`]), the two kinds the parser tells apart by the head's C bit.
#[derive(Copy, Clone, Debug)]
enum Queued {
    Coll(u32),
    P2p(u32),
}

/// A point-to-point descriptor from its post to its send.
struct P2pState {
    /// The key its packets carry (JobID and SeqID 0: no step awaits them).
    key: super::key::PacketKey,
    node: NodeId,
    rank: Rank,
    vp: u32,
    cq: CqId,
    wr_id: u64,
    dest: NodeId,
    dest_vp: u32,
    /// The rank owning the destination VP (the completion's peer).
    peer: Rank,
    remote_addr: u64,
    payload: Payload,
    /// The data to send, once read (RDMA) or taken from the descriptor (MP).
    data: Vec<u8>,
}

/// A run of a post as checked at post time: each pulse of its group is a checked sequence
/// ([`Shape`]) with its serial and elements.
struct CheckedRun {
    group: Vec<(u64, u64, Arc<Shape>)>,
    times: u64,
    stride: u64,
}

/// A pulse generated from its run: the checked sequence it walks, its serial, elements,
/// JobID and the shift of its address payloads; once its counter is granted, the local data
/// read for it (descriptor index, bytes).
struct PulseStart {
    serial: u64,
    elements: u64,
    shape: Arc<Shape>,
    job: u32,
    shift: u64,
    locals: Vec<(usize, Vec<u8>)>,
}

/// The pulses of a post not started yet: its runs and the position in the first.
struct Pending {
    runs: VecDeque<CheckedRun>,
    rep: u64,
    at: usize,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Elements of the next pulse.
    fn next_elements(&self) -> Option<u64> {
        self.runs.front().map(|r| r.group[self.at].1)
    }

    /// The next pulse, generated from its run: the `r`-th repetition of the group's pulse
    /// `j` has serial `serial_j + r · group.len()`, JobID `(job_j + r · group.len()) mod 256`
    /// and its address payloads moved by `r · stride` bytes. O(1): it shares the checked
    /// sequence.
    fn pop(&mut self) -> Option<PulseStart> {
        let run = self.runs.front()?;
        let (serial, elements, shape) = &run.group[self.at];
        let step = self.rep * run.group.len() as u64;
        let p = PulseStart {
            serial: serial + step,
            elements: *elements,
            shape: Arc::clone(shape),
            job: ((u64::from(shape.job()) + step) % 256) as u32,
            shift: self.rep * run.stride,
            locals: Vec::new(),
        };
        self.at += 1;
        if self.at == run.group.len() {
            self.at = 0;
            self.rep += 1;
            if self.rep == run.times {
                self.rep = 0;
                self.runs.pop_front();
            }
        }
        Some(p)
    }

    fn clear(&mut self) {
        self.runs.clear();
        self.rep = 0;
        self.at = 0;
    }
}

/// Events of the offload unit.
#[derive(Copy, Clone, Debug)]
pub enum TrigEvent {
    /// A post's doorbell reached its NIC.
    Doorbell { post: u32 },
    /// The parser is done with a post.
    Parsed { post: u32 },
    /// A point-to-point descriptor's doorbell reached its NIC.
    P2pDoorbell { p2p: u32 },
    /// The parser is done with a point-to-point descriptor.
    P2pParsed { p2p: u32 },
    /// A point-to-point descriptor's data are in the NIC's sender: its packets leave.
    P2pSend { p2p: u32 },
    /// Point-to-point data are in the destination's host memory.
    P2pWritten { batch: u32 },
    /// Ask again for a pulse counter.
    Retry { post: u32 },
    /// A pulse's local data is in the NIC: it starts.
    Start { post: u32 },
    /// A unit finished firing: carry out a batch of actions.
    Fire { batch: u32 },
    /// A collective packet is whole at its destination NIC.
    Arrive { wire: u32 },
    /// A completion's data is in host memory.
    Written { batch: u32 },
    /// A busy unit is free again: it takes the packets waiting in its buffer.
    Process { node: u32, unit: u32 },
}

const TAG_TRIG: u64 = 1 << 61;

/// Whether a fabric packet belongs to the offload unit.
#[inline(always)]
pub(crate) fn is_trig_tag(tag: u64) -> bool {
    tag & TAG_TRIG != 0 && tag >> 62 == 0
}

struct Live {
    serial: u64,
    post: u32,
    counter: CounterId,
    elements: u64,
}

struct Held {
    pkt: TrigPacket,
    serial: u64,
    credits: Vec<Credit>,
}

struct TrigNic {
    units: OffloadUnits,
    pulse: PulseController,
    /// Owner of each VP.
    vps: Vec<Rank>,
    /// Descriptor queues: posts per VP waiting for the parser, in posting order.
    dq: BTreeMap<u32, VecDeque<Queued>>,
    parser_busy: bool,
    /// The point-to-point sender is busy (reading a descriptor's data, then handing its
    /// packets to the fabric) until then.
    p2p_busy: SimTime,
    /// Parsed collectives not yet finished, in order.
    active: Vec<u32>,
    /// Position of the next collective to become active (the order of `active`, never reused).
    next_order: u64,
    /// The active collectives that want a pulse counter now (not failed, not waiting for a
    /// retry, a pulse pending), by position in `active`: those holding none and those holding
    /// some — the two passes of [`World::t_gate`](crate::World) — and how many hold none and
    /// have a pulse pending (retrying or not: what a collective holding some must leave free).
    /// Kept by `t_regate` after every change of a post's counters, pulses, retry or failure.
    want_none: BTreeSet<(u64, u32)>,
    want_some: BTreeSet<(u64, u32)>,
    starving: u64,
    /// The live pulses by (JobID, VP); iterated only in sorted order (`t_cancel_sequences`).
    live: HashMap<(u32, u32), Live, FixedState>,
    early: BTreeMap<(u32, u64), Vec<TrigPacket>>,
    early_now: u64,
    refused: VecDeque<Held>,
    unit_busy: Vec<SimTime>,
    read_busy: SimTime,
    /// Per unit: packets that arrived while the unit was busy, waiting in its buffer (one slot
    /// each) in arrival order, and whether a `Process` event is pending for it.
    inbox: Vec<VecDeque<Waiting>>,
    inbox_armed: Vec<bool>,
    /// Per unit: how many of its waiting packets take a slot (kept, not counted per event).
    inbox_slots: Vec<u32>,
    /// Per unit: its buffer's occupancy, inbox included, as `t_occupancy` last took it; the
    /// units whose inbox slots changed since (a bit per unit, all bits: every unit).
    here: Vec<u64>,
    inbox_dirty: u64,
    /// Largest occupancy of one unit's buffer, inbox included.
    peak_unit: u64,
    /// Seeded delays of arrivals (`jitter`), one stream per NIC.
    jitter: Option<hpcnet_des::rng::SimRng>,
    /// Time integral of the slots held in all units' hash buffers (slot · ps), the occupancy
    /// it integrates and since when.
    slot_time: u128,
    occupied: u64,
    occupied_since: SimTime,
    /// Time some collective was in progress on the NIC, and since when it is (if it is).
    active_time: SimTime,
    active_since: Option<SimTime>,
    /// Collective packets (whole) and their payload bytes that reached the NIC's units.
    arrived: u64,
    arrived_bytes: u64,
    /// Aborts that found no post of theirs yet: (VP, serial).
    aborted: BTreeSet<(u32, u64)>,
    /// Pulse serials of the collectives that failed here, (VP, first serial) → one past the
    /// last: their packets still on the wire are dropped when they arrive.
    cancelled: BTreeMap<(u32, u64), u64>,
}

impl TrigNic {
    /// Take unit `u`'s occupancy (buffer and inbox) into the NIC's sum and peak.
    fn t_recount(&mut self, u: usize) {
        let here = u64::from(self.units.occupancy(u)) + u64::from(self.inbox_slots[u]);
        self.occupied = self.occupied - self.here[u] + here;
        self.here[u] = here;
        self.peak_unit = self.peak_unit.max(here);
    }

    /// Mark unit `u`'s inbox slots as changed.
    fn inbox_changed(&mut self, u: usize) {
        self.inbox_dirty |= if u < 64 { 1 << u } else { u64::MAX };
    }

    /// Whether pulse `serial` on VP `vp` belongs to a collective that failed here.
    fn is_cancelled(&self, vp: u32, serial: u64) -> bool {
        self.cancelled
            .range(..=(vp, serial))
            .next_back()
            .is_some_and(|(&(v, _), &end)| v == vp && serial < end)
    }
}

struct PostState {
    node: NodeId,
    rank: Rank,
    vp: u32,
    cq: CqId,
    wr_id: u64,
    /// Descriptors of the first pulse (what the parser reads) and of all pulses (the queue's
    /// occupancy the scheduler compares).
    descriptors: u64,
    queued: u64,
    pending: Pending,
    fetched: VecDeque<(PulseStart, CounterId)>,
    /// Counters held.
    held: u32,
    /// Pulses not yet written.
    left: u32,
    bytes: u64,
    retrying: bool,
    failed: bool,
    /// Serials of the post's pulses (first, one past the last) and the other members its
    /// sequences send to or wait for (node, VP): where an abort goes.
    serials: (u64, u64),
    peers: Vec<(u32, u32)>,
    /// Another member's abort reached the post before it was parsed: it fails then.
    aborted: bool,
    /// Whether it is among the NIC's active collectives (parsed, not finished or failed), its
    /// position there, and where `t_regate` last filed it.
    active: bool,
    order: u64,
    gate: Gate,
}

/// Where a post is filed for the counter gate: in `want_none`, in `want_some`, counted among
/// the starving (see [`TrigNic`]).
#[derive(Copy, Clone, Default, PartialEq, Eq)]
struct Gate {
    none: bool,
    some: bool,
    starving: bool,
}

/// A packet waiting for its busy unit.
struct Waiting {
    held: Held,
    /// It takes a buffer slot (a packet a parked read awaits goes to the reader's operand
    /// register instead, so a full buffer never blocks the packet a step waits for).
    slot: bool,
}

struct Wire {
    pkt: TrigPacket,
    serial: u64,
    node: NodeId,
    frags: u32,
    seen: u32,
    credits: Vec<Credit>,
    /// An abort of the collective whose pulse `serial` the destination VP runs.
    abort: bool,
}

enum Batch {
    Fire {
        node: NodeId,
        acts: Vec<(UnitAction, u64)>,
    },
    Write {
        node: NodeId,
        vp: u32,
        job: u32,
        serial: u64,
        data: Vec<u8>,
        addr: Option<u64>,
    },
    /// Point-to-point data on their way into `rank`'s memory at `addr`.
    P2pWrite {
        rank: Rank,
        addr: u64,
        data: Vec<u8>,
    },
}

/// The offload unit's state in the world.
#[derive(Default)]
pub(crate) struct TrigUnit {
    /// Each NIC's unit state, by node (`None`: no VP of that node was opened).
    nics: Vec<Option<TrigNic>>,
    posts: Vec<Option<PostState>>,
    free_posts: Vec<u32>,
    p2ps: Vec<Option<P2pState>>,
    free_p2ps: Vec<u32>,
    wires: Vec<Option<Wire>>,
    free_wires: Vec<u32>,
    batches: Vec<Option<Batch>>,
    free_batches: Vec<u32>,
    stats: [u64; STATS.len()],
    /// Emptied vectors of receive-buffer credits and of fired actions, reused (a packet's
    /// credits and a batch's actions would otherwise cost an allocation each).
    credit_pool: Vec<Vec<Credit>>,
    act_pool: Vec<Vec<(UnitAction, u64)>>,
    /// What one unit call fired, before `t_fired` files it into batches (reused).
    acts: Vec<UnitAction>,
}

impl TrigUnit {
    fn nic(&self, node: u32) -> Option<&TrigNic> {
        self.nics.get(node as usize)?.as_ref()
    }
    fn nic_mut(&mut self, node: u32) -> Option<&mut TrigNic> {
        self.nics.get_mut(node as usize)?.as_mut()
    }
}

/// A fragment's receive-buffer credits: its node, rail and buffer credits.
type Credit = (NodeId, u8, (u8, u16, u16));

/// Most emptied vectors each pool of [`TrigUnit`] keeps.
const VEC_POOL: usize = 1024;

#[derive(Copy, Clone)]
enum S {
    Posts,
    Completed,
    Errors,
    Pulses,
    Packets,
    Bytes,
    Early,
    Refused,
    Stored,
    Woke,
    Collisions,
    PeakOccupancy,
    PeakBytes,
    PeakEarly,
    Granted,
    Retries,
    Timeouts,
    PeakPulses,
    Sent,
    Arrived,
    Dropped,
    Discarded,
    P2pPosts,
    P2pSent,
    P2pDelivered,
    P2pBytes,
}

/// The statistics of collectives only (those reported when no point-to-point descriptor was
/// posted).
const COLL_STATS: usize = 22;

const STATS: [(&str, &str, &str); 26] = [
    (
        "nic.trig.posts",
        "collectives",
        "collectives posted to the offload units",
    ),
    (
        "nic.trig.completed",
        "collectives",
        "offloaded collectives completed at members",
    ),
    (
        "nic.trig.errors",
        "collectives",
        "offloaded collectives completed with an error",
    ),
    (
        "nic.trig.pulses",
        "sequences",
        "pulse sequences started in offload units",
    ),
    ("nic.trig.packets", "packets", "offload packets sent on the fabric"),
    (
        "nic.trig.payload_bytes",
        "bytes",
        "collective data sent by offload units",
    ),
    (
        "nic.trig.early",
        "packets",
        "collective packets arriving before their pulse started",
    ),
    (
        "nic.trig.refused",
        "packets",
        "arrivals refused by a full hash buffer (back-pressure)",
    ),
    (
        "nic.trig.buffer_stored",
        "packets",
        "packets stored in hash-buffer slots",
    ),
    (
        "nic.trig.buffer_woke",
        "packets",
        "packets handed straight to a parked read",
    ),
    (
        "nic.trig.buffer_collisions",
        "packets",
        "stored packets that did not get their home slot",
    ),
    (
        "nic.trig.buffer_peak_occupancy",
        "slots",
        "largest slot occupancy of one unit's hash buffer",
    ),
    (
        "nic.trig.buffer_peak_bytes",
        "bytes",
        "largest data held by one unit's hash buffer",
    ),
    ("nic.trig.early_peak", "packets", "largest early store of one NIC"),
    ("nic.trig.pulses_granted", "pulses", "pulse counters granted"),
    ("nic.trig.pulse_retries", "requests", "pulse counter requests refused"),
    (
        "nic.trig.pulse_timeouts",
        "requests",
        "pulse counter requests that timed out",
    ),
    (
        "nic.trig.pulse_peak_in_flight",
        "pulses",
        "most pulses in flight at one NIC",
    ),
    (
        "nic.trig.sent",
        "packets",
        "collective packets sent by offload units (before fragmentation)",
    ),
    (
        "nic.trig.arrived",
        "packets",
        "collective packets that entered an offload unit",
    ),
    (
        "nic.trig.dropped",
        "packets",
        "packets of failed collectives dropped before entering a unit (early or late arrivals)",
    ),
    (
        "nic.trig.discarded",
        "packets",
        "packets of failed collectives discarded from offload units",
    ),
    (
        "nic.trig.p2p_posts",
        "descriptors",
        "point-to-point descriptors posted on virtual ports",
    ),
    (
        "nic.trig.p2p_sent",
        "descriptors",
        "point-to-point descriptors whose packets left the NIC",
    ),
    (
        "nic.trig.p2p_delivered",
        "descriptors",
        "point-to-point descriptors written to the destination's memory",
    ),
    (
        "nic.trig.p2p_bytes",
        "bytes",
        "point-to-point data written to destinations' memory",
    ),
];

/// How one NIC's hash buffers were used: the time-weighted occupancy of all its units'
/// buffers while a collective was in progress there, and what arrived.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TrigBufferUse {
    /// Offload units of the NIC.
    pub units: u64,
    /// Slots of all units (units × slots) and their bytes (units × buffer).
    pub slots: u64,
    pub capacity: u64,
    /// Integral of the occupied slots over time, in slot · ps.
    pub slot_time: u128,
    /// Time during which at least one collective was in progress on the NIC.
    pub active_time: SimTime,
    /// Largest occupancy of one unit's buffer (slots).
    pub peak_unit_slots: u64,
    /// Collective packets that reached the units, and their payload bytes.
    pub arrived: u64,
    pub arrived_bytes: u64,
}

impl TrigBufferUse {
    /// Mean fraction of all slots occupied while a collective was in progress (0 … 1).
    pub fn mean_utilisation(&self) -> f64 {
        if self.active_time == SimTime::ZERO || self.slots == 0 {
            0.0
        } else {
            self.slot_time as f64 / (self.active_time.0 as f64 * self.slots as f64)
        }
    }
}

/// The offload unit's counters, summed (peaks: the largest) over every NIC.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TrigCounters {
    pub posts: u64,
    pub completed: u64,
    pub errors: u64,
    pub pulses: u64,
    pub packets: u64,
    pub payload_bytes: u64,
    pub early: u64,
    pub refused: u64,
    pub stored: u64,
    pub woke: u64,
    pub collisions: u64,
    pub peak_occupancy: u64,
    pub peak_bytes: u64,
    pub peak_early: u64,
    pub granted: u64,
    pub retries: u64,
    pub timeouts: u64,
    pub peak_pulses: u64,
    /// Collective packets sent by units, and those that entered a unit at their destination
    /// (equal once everything is delivered: each packet exactly once).
    pub sent: u64,
    pub arrived: u64,
    /// Packets of failed collectives dropped at their destination before entering a unit:
    /// those waiting in the early store when the collective failed there and those arriving
    /// after (so `sent = arrived + dropped` once nothing waits).
    pub dropped: u64,
    /// Packets of failed collectives discarded from the units (buffered, waiting for a busy
    /// unit or refused when the collective failed there); they had entered a unit.
    pub discarded: u64,
    /// Packets still waiting in hash buffers, early stores or refused queues.
    pub waiting: u64,
    /// Point-to-point descriptors posted, sent (packets left the NIC), delivered (written to
    /// the destination's memory) and the bytes delivered.
    pub p2p_posts: u64,
    pub p2p_sent: u64,
    pub p2p_delivered: u64,
    pub p2p_bytes: u64,
}

fn type_rates(t: &crate::config::TriggeredConfig) -> [hpcnet_des::BitsPerSec; 4] {
    [t.rate_f32, t.rate_f64, t.rate_i32, t.rate_i64]
}

impl World {
    fn trig_cfg(&self) -> Result<&crate::config::TriggeredConfig, PostError> {
        self.cfg.triggered.as_ref().ok_or(PostError::NoOffloadUnit)
    }

    /// Open a virtual port of the triggered offload unit for `rank` on its NIC; returns the
    /// NodeID of its NIC and the VP number (the key's fields).
    pub fn trig_open_vp(&mut self, rank: Rank) -> Result<(u32, u32), PostError> {
        if rank.index() >= self.ranks() {
            return Err(PostError::NoSuchRank(rank));
        }
        let t = self.trig_cfg()?.clone();
        let node = self.place.node_of(rank);
        if self.trig.nic(node.0).is_none() {
            let cfg = UnitsConfig {
                units: t.units,
                streams: t.streams,
                max_collectives: t.pulse_counters.min(u64::from(u32::MAX)) as u32,
                buffer: HashBufConfig {
                    capacity: t.buffer.0,
                    slots: t.slots,
                },
            };
            let units = OffloadUnits::new(node.0, cfg).map_err(|e| PostError::BadCollective(e.to_string()))?;
            let pulse = PulseController::new(PulseConfig {
                capacity: t.pulse_capacity,
                pulses: t.pulse_counters,
                timeout: t.pulse_timeout,
            })
            .map_err(|e| PostError::BadCollective(e.to_string()))?;
            let at = node.index();
            if self.trig.nics.len() <= at {
                self.trig.nics.resize_with(at + 1, || None);
            }
            self.trig.nics[at] = Some(TrigNic {
                units,
                pulse,
                vps: Vec::new(),
                dq: BTreeMap::new(),
                parser_busy: false,
                p2p_busy: SimTime::ZERO,
                active: Vec::new(),
                next_order: 0,
                want_none: BTreeSet::new(),
                want_some: BTreeSet::new(),
                starving: 0,
                live: HashMap::default(),
                early: BTreeMap::new(),
                early_now: 0,
                refused: VecDeque::new(),
                unit_busy: vec![SimTime::ZERO; t.units as usize],
                read_busy: SimTime::ZERO,
                inbox: (0..t.units).map(|_| VecDeque::new()).collect(),
                inbox_armed: vec![false; t.units as usize],
                inbox_slots: vec![0; t.units as usize],
                here: vec![0; t.units as usize],
                inbox_dirty: 0,
                peak_unit: 0,
                jitter: (t.jitter > SimTime::ZERO)
                    .then(|| hpcnet_des::RngStreams::new(self.seed).stream("nic.trig.jitter", u64::from(node.0))),
                slot_time: 0,
                occupied: 0,
                occupied_since: SimTime::ZERO,
                active_time: SimTime::ZERO,
                active_since: None,
                arrived: 0,
                arrived_bytes: 0,
                aborted: BTreeSet::new(),
                cancelled: BTreeMap::new(),
            });
        }
        let n = self.trig.nic_mut(node.0).expect("created above");
        if n.vps.len() as u32 >= MAX_VPS {
            return Err(PostError::BadCollective(format!(
                "trig_open_vp: all {MAX_VPS} virtual ports of node {} are open",
                node.0
            )));
        }
        n.vps.push(rank);
        Ok((node.0, n.vps.len() as u32 - 1))
    }

    /// How the hash buffers of `node`'s offload units were used so far (`None`: the NIC's
    /// unit was never opened).
    pub fn trig_buffer_use(&self, node: NodeId) -> Option<TrigBufferUse> {
        let t = self.cfg.triggered.as_ref()?;
        let n = self.trig.nic(node.0)?;
        let now = self.q.now();
        let stats = n.units.buffer_stats();
        let open = n.active_since.map_or(SimTime::ZERO, |s| now - s);
        Some(TrigBufferUse {
            units: u64::from(t.units),
            slots: u64::from(t.units) * u64::from(t.slots),
            capacity: u64::from(t.units) * t.buffer.0,
            slot_time: n.slot_time + u128::from(n.occupied) * u128::from((now - n.occupied_since).0),
            active_time: n.active_time + open,
            peak_unit_slots: stats
                .iter()
                .map(|b| u64::from(b.peak_occupancy))
                .max()
                .unwrap_or(0)
                .max(n.peak_unit),
            arrived: n.arrived,
            arrived_bytes: n.arrived_bytes,
        })
    }

    /// Bring `node`'s occupancy integral up to now and take the units' current occupancy
    /// (after every change in the units).
    ///
    /// Only the units whose buffer or inbox changed since the last call are recounted (the
    /// units report the ones they touched, [`OffloadUnits::take_touched`]; the inbox changes
    /// set `inbox_dirty`); the others' occupancy is the one taken then, and the largest of
    /// them is in `peak_unit` already. So the sum and the peak are those of a recount of
    /// every unit, at O(units changed) per call.
    fn t_occupancy(&mut self, node: NodeId) {
        let now = self.q.now();
        let n = self.tnic(node);
        n.slot_time += u128::from(n.occupied) * u128::from((now - n.occupied_since).0);
        n.occupied_since = now;
        let mut dirty = n.units.take_touched() | std::mem::take(&mut n.inbox_dirty);
        if dirty == u64::MAX {
            dirty = 0;
            for u in 0..n.here.len() {
                n.t_recount(u);
            }
        }
        while dirty != 0 {
            let u = dirty.trailing_zeros() as usize;
            dirty &= dirty - 1;
            n.t_recount(u);
        }
        #[cfg(debug_assertions)]
        {
            let all: u64 = (0..n.here.len())
                .map(|u| u64::from(n.units.occupancy(u)) + u64::from(n.inbox_slots[u]))
                .sum();
            debug_assert_eq!(all, n.occupied, "kept occupancy differs from a recount");
        }
    }

    /// A uniform delay in [0, `jitter`] for an arrival at `node` (zero without jitter).
    fn t_jitter(&mut self, node: NodeId) -> SimTime {
        let Some(j) = self.cfg.triggered.as_ref().map(|t| t.jitter) else {
            return SimTime::ZERO;
        };
        match self.trig.nic_mut(node.0).and_then(|n| n.jitter.as_mut()) {
            Some(rng) => SimTime(rand::Rng::gen_range(rng, 0..=j.0)),
            None => SimTime::ZERO,
        }
    }

    /// Elements of one pulse of `dtype` elements: how the library cuts a collective.
    pub fn trig_pulse_elements(&self, dtype: CollType) -> Result<u64, PostError> {
        Ok(self.trig_cfg()?.pulse_elements(dtype.size()))
    }

    /// The offload unit's counters.
    pub fn trig_counters(&self) -> TrigCounters {
        let v = self.trig_values();
        let waiting = self
            .trig
            .nics
            .iter()
            .flatten()
            .map(|n| {
                n.units
                    .buffer_stats()
                    .iter()
                    .map(|b| u64::from(b.occupancy))
                    .sum::<u64>()
                    + n.early_now
                    + n.refused.len() as u64
                    + n.inbox.iter().map(|q| q.len() as u64).sum::<u64>()
            })
            .sum();
        TrigCounters {
            posts: v[S::Posts as usize],
            completed: v[S::Completed as usize],
            errors: v[S::Errors as usize],
            pulses: v[S::Pulses as usize],
            packets: v[S::Packets as usize],
            payload_bytes: v[S::Bytes as usize],
            early: v[S::Early as usize],
            refused: v[S::Refused as usize],
            stored: v[S::Stored as usize],
            woke: v[S::Woke as usize],
            collisions: v[S::Collisions as usize],
            peak_occupancy: v[S::PeakOccupancy as usize],
            peak_bytes: v[S::PeakBytes as usize],
            peak_early: v[S::PeakEarly as usize],
            granted: v[S::Granted as usize],
            retries: v[S::Retries as usize],
            timeouts: v[S::Timeouts as usize],
            peak_pulses: v[S::PeakPulses as usize],
            sent: v[S::Sent as usize],
            arrived: v[S::Arrived as usize],
            dropped: v[S::Dropped as usize],
            discarded: v[S::Discarded as usize],
            waiting,
            p2p_posts: v[S::P2pPosts as usize],
            p2p_sent: v[S::P2pSent as usize],
            p2p_delivered: v[S::P2pDelivered as usize],
            p2p_bytes: v[S::P2pBytes as usize],
        }
    }

    fn trig_values(&self) -> [u64; STATS.len()] {
        let mut v = self.trig.stats;
        for n in self.trig.nics.iter().flatten() {
            for b in n.units.buffer_stats() {
                v[S::Stored as usize] += b.stored;
                v[S::Woke as usize] += b.woke;
                v[S::Collisions as usize] += b.collisions;
                let o = &mut v[S::PeakOccupancy as usize];
                *o = (*o).max(u64::from(b.peak_occupancy)).max(n.peak_unit);
                let o = &mut v[S::PeakBytes as usize];
                *o = (*o).max(b.peak_bytes);
            }
            let p = n.pulse.stats();
            v[S::Granted as usize] += p.granted;
            v[S::Retries as usize] += p.retries;
            v[S::Timeouts as usize] += p.timeouts;
            let o = &mut v[S::PeakPulses as usize];
            *o = (*o).max(u64::from(p.peak_pulses));
        }
        v
    }

    /// The offload unit's statistics (reported once it has been used).
    pub(crate) fn trig_statistics(&self) -> Vec<StatRecord> {
        let s = &self.trig.stats;
        if s[S::Posts as usize] == 0 && s[S::P2pPosts as usize] == 0 {
            return Vec::new();
        }
        let n = if s[S::P2pPosts as usize] == 0 {
            COLL_STATS
        } else {
            STATS.len()
        };
        Registry::of_counters(&STATS[..n], &self.trig_values()[..n]).report()
    }

    /// The checks every post to a VP makes: `rank` exists, the machine has the offload unit,
    /// `cq` is the rank's and VP `vp` of its NIC is open for it. Returns the rank's node.
    fn trig_poster(&self, rank: Rank, cq: CqId, vp: u32) -> Result<NodeId, PostError> {
        if rank.index() >= self.ranks() {
            return Err(PostError::NoSuchRank(rank));
        }
        self.trig_cfg()?;
        if !self.cq_owned_by(cq, rank) {
            return Err(PostError::BadCq(cq));
        }
        let node = self.place.node_of(rank);
        let owns = self
            .trig
            .nic(node.0)
            .and_then(|n| n.vps.get(vp as usize))
            .is_some_and(|&r| r == rank);
        if !owns {
            return Err(PostError::NoSuchVp { vp, rank });
        }
        Ok(node)
    }

    /// Post `rank`'s collective on its VP `post.vp`.
    pub fn post_trig(&mut self, rank: Rank, post: TrigPost) -> Result<(), PostError> {
        let node = self.trig_poster(rank, post.cq, post.vp)?;
        let t = self.trig_cfg()?.clone();
        if post.runs.iter().all(|r| r.pulses() == 0) {
            return Err(PostError::BadCollective("post_trig: no pulses".into()));
        }
        let slot = t.slot_bytes();
        let nodes = self.nics.len();
        let runs: VecDeque<TrigRun> = post.runs.into_iter().filter(|r| r.pulses() > 0).collect();
        // Pulse `i` of the post (counted over every run): the first repetition of each group
        // pulse is checked whole; the others differ only in JobID (any value fits its 8 bits)
        // and in their addresses, whose local data must be readable.
        let mut i = 0u64;
        let mut queued = 0u64;
        let mut checked: VecDeque<CheckedRun> = VecDeque::with_capacity(runs.len());
        for run in &runs {
            let mut group = Vec::with_capacity(run.group.len());
            for (j, p) in run.group.iter().enumerate() {
                let first = i + j as u64;
                let bad = |reason: String| PostError::BadCollective(format!("post_trig: pulse {first}: {reason}"));
                let shape = Shape::new(node.0, p.descriptors.clone()).map_err(|e| bad(e.to_string()))?;
                let last = p.descriptors.len() - 1;
                if let Some(j) = p
                    .descriptors
                    .iter()
                    .position(|d| d.coll_end_flag)
                    .filter(|&j| j != last)
                {
                    return Err(bad(format!(
                        "descriptor {j} has CollEndFlag but is not the last (CT): the unit writes the completion when the sequence ends"
                    )));
                }
                if let Some((j, d)) = p
                    .descriptors
                    .iter()
                    .enumerate()
                    .find(|(_, d)| d.dest_id.is_some_and(|n| n as usize >= nodes))
                {
                    return Err(bad(format!(
                        "descriptor {j}: DestID {} is not a node of the machine ({nodes} nodes)",
                        d.dest_id.unwrap_or(0)
                    )));
                }
                let elem = p.descriptors[0].dtype.size();
                let most = t.pulse_elements(elem);
                if p.elements == 0 || p.elements > most {
                    return Err(bad(format!(
                        "{} elements, a pulse holds 1 to {most} (⌊nic.triggered.pulse_capacity / pulse_counters⌋, at most one hash-buffer slot)",
                        p.elements
                    )));
                }
                for (j, d) in p.descriptors.iter().enumerate() {
                    let len = match &d.payload {
                        Payload::Operands(v) => v.len() as u64,
                        Payload::Address { len, .. } => *len,
                    };
                    if len > slot {
                        return Err(bad(format!(
                            "descriptor {j} carries {len} B, a hash-buffer slot holds {slot} B (nic.triggered.buffer / slots)"
                        )));
                    }
                    if let (true, Payload::Address { addr, len }) = (d.swap_local_data, &d.payload) {
                        for r in 0..run.times {
                            self.mem[rank.index()]
                                .read(addr + r * run.stride, *len)
                                .map_err(PostError::Local)?;
                        }
                    }
                }
                queued += run.times * p.descriptors.len() as u64;
                group.push((p.serial, p.elements, Arc::new(shape)));
            }
            checked.push_back(CheckedRun {
                group,
                times: run.times,
                stride: run.stride,
            });
            i += run.pulses();
        }
        let first = runs
            .iter()
            .flat_map(|r| r.group.iter().map(|p| p.serial))
            .min()
            .unwrap_or(0);
        let end = runs
            .iter()
            .flat_map(|r| {
                r.group
                    .iter()
                    .map(move |p| p.serial + (r.times - 1) * r.group.len() as u64 + 1)
            })
            .max()
            .unwrap_or(0);
        let mut peers: Vec<(u32, u32)> = runs
            .iter()
            .flat_map(|r| r.group.iter().flat_map(|p| p.descriptors.iter()))
            .flat_map(|d| {
                d.dest_id
                    .map(|n| (n, d.dest_vp))
                    .into_iter()
                    .chain(d.wait_from.iter().map(|s| (s.node, s.vp)))
            })
            .filter(|&peer| peer != (node.0, post.vp))
            .collect();
        peers.sort_unstable();
        peers.dedup();
        let descriptors = runs.front().map_or(0, |r| r.group[0].descriptors.len() as u64);
        let left = u32::try_from(i).map_err(|_| PostError::BadCollective(format!("post_trig: {i} pulses")))?;
        let st = PostState {
            node,
            rank,
            vp: post.vp,
            cq: post.cq,
            wr_id: post.wr_id,
            descriptors,
            queued,
            pending: Pending {
                runs: checked,
                rep: 0,
                at: 0,
            },
            fetched: VecDeque::new(),
            held: 0,
            left,
            bytes: 0,
            retrying: false,
            failed: false,
            serials: (first, end),
            peers,
            aborted: false,
            active: false,
            order: 0,
            gate: Gate::default(),
        };
        let id = if let Some(i) = self.trig.free_posts.pop() {
            self.trig.posts[i as usize] = Some(st);
            i
        } else {
            self.trig.posts.push(Some(st));
            (self.trig.posts.len() - 1) as u32
        };
        self.trig.stats[S::Posts as usize] += 1;
        let n = self.tnic(node);
        if let Some(k) = n.aborted.range((post.vp, first)..(post.vp, end)).next().copied() {
            n.aborted.remove(&k);
            self.tpost(id).aborted = true;
        }
        let at = self.q.now() + self.cfg.host.doorbell_latency;
        let by = self.net.node_origin(node);
        self.q
            .schedule_by(by, at, WorldEvent::Trig(TrigEvent::Doorbell { post: id }));
        Ok(())
    }

    /// Post `rank`'s point-to-point descriptor (C = 0) on its VP `d.vp`. It enters the VP's
    /// descriptor queue behind the posts made before it, collective or not.
    ///
    /// Refused ([`PostError`]): a VP not open for `rank` (`NoSuchVp`), a completion queue
    /// not the rank's (`BadCq`), local data (RDMA) outside the rank's registered memory
    /// (`Local`); `BadP2p` names the reason for a DestID outside the machine, a DestVP not
    /// open at that node, a remote range outside the receiving rank's registered memory and
    /// an MP payload larger than one packet (`packet.max_payload`).
    pub fn trig_post_p2p(&mut self, rank: Rank, d: TrigP2p) -> Result<(), PostError> {
        let node = self.trig_poster(rank, d.cq, d.vp)?;
        let nodes = self.nics.len();
        if d.dest_id as usize >= nodes {
            return Err(PostError::BadP2p(format!(
                "DestID {} is not a node of the machine ({nodes} nodes)",
                d.dest_id
            )));
        }
        let Some(&peer) = self.trig.nic(d.dest_id).and_then(|n| n.vps.get(d.dest_vp as usize)) else {
            return Err(PostError::BadP2p(format!(
                "DestVP {} is not open at node {}",
                d.dest_vp, d.dest_id
            )));
        };
        let len = match &d.payload {
            Payload::Operands(v) => {
                let max = u64::from(self.mtu);
                if v.len() as u64 > max {
                    return Err(PostError::BadP2p(format!(
                        "an MP descriptor carries at most {max} B (one packet, packet.max_payload), got {} B",
                        v.len()
                    )));
                }
                v.len() as u64
            }
            Payload::Address { addr, len } => {
                self.mem[rank.index()]
                    .check_local(*addr, *len)
                    .map_err(PostError::Local)?;
                *len
            }
        };
        self.mem[peer.index()]
            .check_local(d.remote_addr, len)
            .map_err(|e| PostError::BadP2p(format!("remote range at node {}, VP {}: {e}", d.dest_id, d.dest_vp)))?;
        let key = super::key::PacketKey::new(0, node.0, d.vp, 0).map_err(|e| PostError::BadP2p(e.to_string()))?;
        let st = P2pState {
            key,
            node,
            rank,
            vp: d.vp,
            cq: d.cq,
            wr_id: d.wr_id,
            dest: NodeId(d.dest_id),
            dest_vp: d.dest_vp,
            peer,
            remote_addr: d.remote_addr,
            payload: d.payload,
            data: Vec::new(),
        };
        let id = if let Some(i) = self.trig.free_p2ps.pop() {
            self.trig.p2ps[i as usize] = Some(st);
            i
        } else {
            self.trig.p2ps.push(Some(st));
            (self.trig.p2ps.len() - 1) as u32
        };
        self.trig.stats[S::P2pPosts as usize] += 1;
        let at = self.q.now() + self.cfg.host.doorbell_latency;
        let by = self.net.node_origin(node);
        self.q
            .schedule_by(by, at, WorldEvent::Trig(TrigEvent::P2pDoorbell { p2p: id }));
        Ok(())
    }

    fn tp2p(&mut self, id: u32) -> &mut P2pState {
        self.trig.p2ps[id as usize]
            .as_mut()
            .expect("live point-to-point descriptor")
    }

    fn tpost(&mut self, id: u32) -> &mut PostState {
        self.trig.posts[id as usize].as_mut().expect("live offload post")
    }

    fn tnic(&mut self, node: NodeId) -> &mut TrigNic {
        self.trig.nic_mut(node.0).expect("offload unit of the node")
    }

    pub(crate) fn trig_event(&mut self, ev: TrigEvent) {
        match ev {
            TrigEvent::Doorbell { post } => {
                let (node, vp) = {
                    let p = self.tpost(post);
                    (p.node, p.vp)
                };
                if self.tpost(post).aborted {
                    self.t_fail_post(post, CqeStatus::TrigFailed(Self::ABORTED.into()));
                    return;
                }
                self.tnic(node).dq.entry(vp).or_default().push_back(Queued::Coll(post));
                self.t_parse_next(node);
            }
            TrigEvent::Parsed { post } => {
                let node = self.tpost(post).node;
                self.tnic(node).parser_busy = false;
                let limit = self.cfg.triggered.as_ref().map_or(0, |t| t.collectives);
                if self.tpost(post).aborted {
                    self.t_fail_post(post, CqeStatus::TrigFailed(Self::ABORTED.into()));
                } else if self.tnic(node).active.len() as u32 >= limit {
                    self.t_fail_post(
                        post,
                        CqeStatus::TrigFailed(format!(
                            "{limit} collectives already in progress on this NIC (nic.triggered.collectives)"
                        )),
                    );
                } else {
                    let now = self.q.now();
                    let n = self.tnic(node);
                    if n.active.is_empty() {
                        n.active_since = Some(now);
                    }
                    n.active.push(post);
                    let order = n.next_order;
                    n.next_order += 1;
                    let s = self.tpost(post);
                    (s.active, s.order) = (true, order);
                    self.t_regate(post);
                    self.t_gate(node);
                }
                self.t_parse_next(node);
            }
            TrigEvent::P2pDoorbell { p2p } => {
                let (node, vp) = {
                    let p = self.tp2p(p2p);
                    (p.node, p.vp)
                };
                self.tnic(node).dq.entry(vp).or_default().push_back(Queued::P2p(p2p));
                self.t_parse_next(node);
            }
            TrigEvent::P2pParsed { p2p } => {
                let node = self.tp2p(p2p).node;
                self.tnic(node).parser_busy = false;
                self.t_p2p_fetch(p2p);
                self.t_parse_next(node);
            }
            TrigEvent::P2pSend { p2p } => self.t_p2p_send(p2p),
            TrigEvent::P2pWritten { batch } => self.t_p2p_written(batch),
            TrigEvent::Retry { post } => {
                if self.trig.posts[post as usize].is_none() {
                    return;
                }
                let node = self.tpost(post).node;
                self.tpost(post).retrying = false;
                self.t_regate(post);
                self.t_gate(node);
            }
            TrigEvent::Start { post } => self.t_start_pulse(post),
            TrigEvent::Fire { batch } => self.t_fire(batch),
            TrigEvent::Arrive { wire } => {
                let w = self.trig.wires[wire as usize].take().expect("live offload packet");
                self.trig.free_wires.push(wire);
                if w.abort {
                    self.t_release_credits(w.credits);
                    self.t_abort(w.node, w.pkt.dest_vp, w.serial);
                } else if !w.pkt.cp {
                    // CP = 0: no step waits for it; the data go to host memory.
                    self.t_release_credits(w.credits);
                    self.t_p2p_arrive(w.node, w.pkt);
                } else {
                    self.t_arrive(w.node, w.pkt, w.serial, w.credits);
                }
            }
            TrigEvent::Written { batch } => self.t_written(batch),
            TrigEvent::Process { node, unit } => self.t_process(NodeId(node), unit as usize),
        }
    }

    /// Let the parser take the next post. Among the VPs with a non-empty descriptor queue it
    /// prefers those whose head can go downstream now — a collective while the NIC has fewer
    /// than `collectives` active, a point-to-point descriptor while the point-to-point sender
    /// is idle — then the queue holding the most descriptors, then the lower VP. When no head
    /// can go downstream it still takes one by the same order (the parser never idles with
    /// work queued; a collective over the limit then fails as it is parsed). With only
    /// collective posts every head is alike, so the choice is by occupancy alone.
    /// Cost O(queued posts).
    fn t_parse_next(&mut self, node: NodeId) {
        let n = self.trig.nic(node.0).expect("offload unit of the node");
        if n.parser_busy {
            return;
        }
        let limit = self.cfg.triggered.as_ref().map_or(0, |t| t.collectives) as usize;
        let coll_ready = n.active.len() < limit;
        let p2p_ready = n.p2p_busy <= self.q.now();
        let mut best: Option<(bool, u64, u32)> = None;
        for (&vp, q) in &n.dq {
            let Some(head) = q.front() else { continue };
            let ready = match head {
                Queued::Coll(_) => coll_ready,
                Queued::P2p(_) => p2p_ready,
            };
            let d: u64 = q
                .iter()
                .map(|e| match *e {
                    Queued::Coll(p) => self.trig.posts[p as usize].as_ref().map_or(0, |s| s.queued),
                    Queued::P2p(_) => 1,
                })
                .sum();
            if best.is_none_or(|(br, bd, _)| (ready, d) > (br, bd)) {
                best = Some((ready, d, vp));
            }
        }
        let Some((_, _, vp)) = best else { return };
        let n = self.tnic(node);
        let head =
            n.dq.get_mut(&vp)
                .and_then(VecDeque::pop_front)
                .expect("non-empty queue");
        if n.dq.get(&vp).is_some_and(VecDeque::is_empty) {
            n.dq.remove(&vp);
        }
        n.parser_busy = true;
        let parse = self.cfg.triggered.as_ref().map_or(SimTime::ZERO, |t| t.parse_time);
        let (d, ev) = match head {
            Queued::Coll(post) => (self.tpost(post).descriptors, TrigEvent::Parsed { post }),
            Queued::P2p(p2p) => (1, TrigEvent::P2pParsed { p2p }),
        };
        let at = self.q.now() + self.timing.read_latency + SimTime(parse.0 * d);
        let by = self.net.node_origin(node);
        self.q.schedule_by(by, at, WorldEvent::Trig(ev));
    }

    /// A parsed point-to-point descriptor goes to the NIC's point-to-point sender: once the
    /// sender is free, an RDMA descriptor's data are read by DMA (on the unit's read channel,
    /// shared with the pulses' local data), an MP descriptor's are in the descriptor.
    fn t_p2p_fetch(&mut self, p2p: u32) {
        let now = self.q.now();
        let (lat, rate) = (self.timing.read_latency, self.timing.read_rate);
        let (node, rank, payload) = {
            let p = self.tp2p(p2p);
            (
                p.node,
                p.rank,
                std::mem::replace(&mut p.payload, Payload::Operands(Vec::new())),
            )
        };
        let start = now.max(self.tnic(node).p2p_busy);
        let (data, at) = match payload {
            Payload::Operands(v) => (v, start),
            Payload::Address { addr, len } => match self.mem[rank.index()].read(addr, len) {
                Ok(v) => {
                    let v = v.into_owned();
                    let n = self.tnic(node);
                    let s = start.max(n.read_busy);
                    n.read_busy = s + rate.serialization(Bytes(len));
                    (v, n.read_busy + lat)
                }
                Err(e) => {
                    let (cq, wr_id, peer) = {
                        let p = self.tp2p(p2p);
                        (p.cq, p.wr_id, p.peer)
                    };
                    self.push_cqe(
                        cq,
                        Cqe {
                            wr_id,
                            kind: CqeKind::TrigP2p,
                            status: CqeStatus::TrigFailed(format!("local data at {addr:#x}: {e}")),
                            bytes: 0,
                            peer,
                            addr: 0,
                            value: 0,
                            at: now,
                        },
                    );
                    self.t_free_p2p(p2p);
                    return;
                }
            },
        };
        self.tp2p(p2p).data = data;
        self.tnic(node).p2p_busy = at;
        let by = self.net.node_origin(node);
        self.q.schedule_by(by, at, WorldEvent::Trig(TrigEvent::P2pSend { p2p }));
    }

    fn t_free_p2p(&mut self, p2p: u32) {
        self.trig.p2ps[p2p as usize] = None;
        self.trig.free_p2ps.push(p2p);
    }

    /// A point-to-point descriptor's packets leave: CP = 0 packets to (DestID, DestVP)
    /// carrying the remote address; its completion is written at the sender now.
    fn t_p2p_send(&mut self, p2p: u32) {
        let st = self.trig.p2ps[p2p as usize]
            .take()
            .expect("live point-to-point descriptor");
        self.trig.free_p2ps.push(p2p);
        let bytes = st.data.len() as u64;
        let pkt = TrigPacket {
            key: st.key,
            dest: st.dest.0,
            dest_vp: st.dest_vp,
            cp: false,
            end: false,
            addr: Some(st.remote_addr),
            data: st.data,
        };
        let rail = (u64::from(st.vp) % u64::from(self.net.rails())) as u8;
        self.t_inject(st.node, pkt, 0, rail);
        self.trig.stats[S::P2pSent as usize] += 1;
        let now = self.q.now();
        self.push_cqe(
            st.cq,
            Cqe {
                wr_id: st.wr_id,
                kind: CqeKind::TrigP2p,
                status: CqeStatus::Ok,
                bytes,
                peer: st.peer,
                addr: 0,
                value: 0,
                at: now,
            },
        );
    }

    /// A whole CP = 0 packet at `node`: written to the memory of the rank owning its
    /// destination VP, at the address it carries, through the host interface.
    fn t_p2p_arrive(&mut self, node: NodeId, p: TrigPacket) {
        let rank = self
            .trig
            .nic(node.0)
            .and_then(|n| n.vps.get(p.dest_vp as usize))
            .copied();
        let (Some(rank), Some(addr)) = (rank, p.addr) else {
            // Not made by a post (a post checks its destination VP and carries its address).
            self.trig.stats[S::Errors as usize] += 1;
            return;
        };
        let now = self.q.now();
        let len = p.data.len() as u64;
        let done = if len > 0 {
            let d = self.timing.write_time(len);
            self.nics[node.index()].host.write(now, d)
        } else {
            now
        };
        let b = self.t_alloc_batch(Batch::P2pWrite {
            rank,
            addr,
            data: p.data,
        });
        let by = self.net.node_origin(node);
        self.q
            .schedule_by(by, done, WorldEvent::Trig(TrigEvent::P2pWritten { batch: b }));
    }

    fn t_p2p_written(&mut self, batch: u32) {
        let Batch::P2pWrite { rank, addr, data } = self.t_take_batch(batch) else {
            unreachable!("a point-to-point write event names a write batch")
        };
        // The range was checked at post time; regions are never unregistered.
        if self.mem[rank.index()].write(addr, &data).is_ok() {
            self.trig.stats[S::P2pDelivered as usize] += 1;
            self.trig.stats[S::P2pBytes as usize] += data.len() as u64;
        }
    }

    /// File post `post` for the counter gate after a change of its counters, pending pulses,
    /// retry or failure, or of its being active: O(log active).
    fn t_regate(&mut self, post: u32) {
        let Some(s) = self.trig.posts[post as usize].as_mut() else {
            return;
        };
        let open = s.active && !s.failed && !s.pending.is_empty();
        let now = Gate {
            none: open && s.held == 0 && !s.retrying,
            some: open && s.held > 0 && !s.retrying,
            starving: open && s.held == 0,
        };
        let was = std::mem::replace(&mut s.gate, now);
        if was == now {
            return;
        }
        let key = (s.order, post);
        let n = self.trig.nics[s.node.index()]
            .as_mut()
            .expect("offload unit of the node");
        let file = |set: &mut BTreeSet<(u64, u32)>, was: bool, now: bool| {
            if was != now {
                let changed = if now { set.insert(key) } else { set.remove(&key) };
                debug_assert!(changed, "post {} filed twice or never", key.1);
            }
        };
        file(&mut n.want_none, was.none, now.none);
        file(&mut n.want_some, was.some, now.some);
        if was.starving != now.starving {
            if now.starving {
                n.starving += 1;
            } else {
                n.starving -= 1;
            }
        }
    }

    /// Hand out pulse counters to the active collectives of `node`: first one to each
    /// collective that holds none, in the order they became active; then, in the same order,
    /// as many as are free to those holding some, while a counter stays free for each
    /// collective holding none (`starving`) and each one the NIC may still accept
    /// (`nic.triggered.collectives` less the active ones).
    ///
    /// Cost O((grants + refusals + 1) · log active): the collectives that want a counter are
    /// kept filed by their position ([`TrigNic`]'s `want_none` and `want_some`), and the
    /// second pass stops at its first refusal — nothing changes between one collective's
    /// refusal and the next one's check, so every later check fails too.
    fn t_gate(&mut self, node: NodeId) {
        let Some(t) = self.cfg.triggered.as_ref() else { return };
        let (counters, collectives, retry) = (t.pulse_counters, u64::from(t.collectives), t.pulse_retry);
        let now = self.q.now();
        #[cfg(debug_assertions)]
        self.t_check_gate(node);
        // Collectives holding no counter: one request each. The sets are searched from the
        // last position visited, since a request may file posts in and out (a grant moves
        // its post to `want_some`, a failure ends posts).
        let mut from = 0;
        while let Some(&(order, p)) = self.tnic(node).want_none.range((from, 0)..).next() {
            from = order + 1;
            self.t_request(node, p, now, retry);
        }
        // The others, each as long as counters are left over.
        let mut from = 0;
        'posts: while let Some(&(order, p)) = self.tnic(node).want_some.range((from, 0)..).next() {
            from = order + 1;
            while self.tnic(node).want_some.contains(&(order, p)) {
                let n = self.trig.nic(node.0).expect("offload unit of the node");
                let free = counters - u64::from(n.pulse.in_flight());
                let r = collectives.saturating_sub(n.active.len() as u64);
                if free < 1 + r + n.starving {
                    break 'posts;
                }
                self.t_request(node, p, now, retry);
            }
        }
    }

    /// The gate's filing agrees with the active collectives' state (debug builds, O(active)).
    #[cfg(debug_assertions)]
    fn t_check_gate(&self, node: NodeId) {
        let n = self.trig.nic(node.0).expect("offload unit of the node");
        let (mut none, mut some, mut starving) = (BTreeSet::new(), BTreeSet::new(), 0);
        for &p in &n.active {
            let s = self.trig.posts[p as usize].as_ref().expect("active post");
            assert!(s.active, "post {p} is listed active but not marked so");
            let open = !s.failed && !s.pending.is_empty();
            if open && !s.retrying {
                if s.held == 0 { &mut none } else { &mut some }.insert((s.order, p));
            }
            starving += u64::from(open && s.held == 0);
        }
        assert!(
            none == n.want_none && some == n.want_some && starving == n.starving,
            "counter gate filing out of date"
        );
    }

    /// Post `p` of `node` asks the pulse controller for a counter: the pulse starts (its
    /// local data is read), waits for a retry, or the post fails.
    fn t_request(&mut self, node: NodeId, p: u32, now: SimTime, retry: SimTime) {
        let elements = self.tpost(p).pending.next_elements().expect("a pending pulse");
        match self.tnic(node).pulse.acquire(now, u64::from(p), elements) {
            Ok(Acquire::Granted { counter, .. }) => {
                let pulse = self.tpost(p).pending.pop().expect("a pending pulse");
                self.tpost(p).held += 1;
                self.t_regate(p);
                self.t_fetch_pulse(node, p, pulse, counter);
            }
            Ok(Acquire::Retry) => {
                self.tpost(p).retrying = true;
                self.t_regate(p);
                let by = self.net.node_origin(node);
                self.q
                    .schedule_by(by, now + retry, WorldEvent::Trig(TrigEvent::Retry { post: p }));
            }
            Err(PulseError::Timeout { .. }) => self.t_fail_post(p, CqeStatus::TrigTimeout),
            Err(e) => self.t_fail_post(p, CqeStatus::TrigFailed(e.to_string())),
        }
    }

    /// A granted pulse reads its local data, then starts.
    fn t_fetch_pulse(&mut self, node: NodeId, post: u32, mut pulse: PulseStart, counter: CounterId) {
        // The DMA read of the pulse's local data (RDMA descriptors), now that it holds credit.
        let rank = self.tpost(post).rank;
        let mut bytes = 0u64;
        for (i, d) in pulse.shape.descriptors().iter().enumerate() {
            if !d.swap_local_data {
                continue;
            }
            match &d.payload {
                Payload::Operands(v) => bytes += v.len() as u64,
                Payload::Address { addr, len } => {
                    let a = addr + pulse.shift;
                    match self.mem[rank.index()].read(a, *len) {
                        Ok(v) => {
                            bytes += v.len() as u64;
                            pulse.locals.push((i, v.to_vec()));
                        }
                        Err(e) => {
                            self.t_release(node, post, counter, pulse.elements);
                            self.t_fail_post(post, CqeStatus::TrigFailed(format!("local data at {a:#x}: {e}")));
                            return;
                        }
                    }
                }
            }
        }
        let now = self.q.now();
        let (lat, rate) = (self.timing.read_latency, self.timing.read_rate);
        let n = self.tnic(node);
        let at = if bytes > 0 {
            let start = now.max(n.read_busy);
            n.read_busy = start + rate.serialization(Bytes(bytes));
            n.read_busy + lat
        } else {
            now
        };
        self.tpost(post).fetched.push_back((pulse, counter));
        let by = self.net.node_origin(node);
        self.q.schedule_by(by, at, WorldEvent::Trig(TrigEvent::Start { post }));
    }

    fn t_start_pulse(&mut self, post: u32) {
        let (node, vp, failed) = {
            let p = self.tpost(post);
            (p.node, p.vp, p.failed)
        };
        let (pulse, counter) = self.tpost(post).fetched.pop_front().expect("a fetched pulse");
        if failed {
            self.t_release(node, post, counter, pulse.elements);
            return;
        }
        let job = pulse.job;
        if self.tnic(node).live.contains_key(&(job, vp)) {
            self.t_release(node, post, counter, pulse.elements);
            self.t_fail_post(
                post,
                CqeStatus::TrigFailed(format!(
                    "JobID {job} is still in use on VP {vp} (serial {})",
                    pulse.serial
                )),
            );
            return;
        }
        self.trig.stats[S::Pulses as usize] += 1;
        self.tnic(node).live.insert(
            (job, vp),
            Live {
                serial: pulse.serial,
                post,
                counter,
                elements: pulse.elements,
            },
        );
        let walker = Walker::start(pulse.shape, job, pulse.shift, pulse.locals);
        let mut acts = std::mem::take(&mut self.trig.acts);
        let r = self
            .tnic(node)
            .units
            .post_walker_into(vp, walker, &mut |_, _| Vec::new(), &mut acts);
        self.t_occupancy(node);
        if r.is_ok() {
            self.t_fired(node, &mut acts);
        }
        acts.clear();
        self.trig.acts = acts;
        match r {
            Ok(_) => {}
            Err(e) => {
                // Work fired before the refusal is not charged.
                self.tnic(node).units.take_fired(|_, _| {});
                // The sequence never entered a unit: its counter returns at once.
                if let Some(l) = self.tnic(node).live.remove(&(job, vp)) {
                    self.t_release(node, post, l.counter, l.elements);
                }
                if self.trig.posts[post as usize].is_some() {
                    self.t_fail_post(post, CqeStatus::TrigFailed(e.to_string()));
                }
                return;
            }
        }
        let early = self.tnic(node).early.remove(&(vp, pulse.serial)).unwrap_or_default();
        self.tnic(node).early_now -= early.len() as u64;
        for p in early {
            self.t_arrive(node, p, pulse.serial, Vec::new());
        }
        self.t_retry_refused(node);
    }

    /// Charge the work a unit call fired and schedule its actions.
    ///
    /// Cost O(units + actions) without allocation beyond the batches' own vectors: the units
    /// keep what they fired since the last charge ([`OffloadUnits::take_fired`]), and the
    /// actions of one call, nearly always of one unit, form one batch.
    fn t_fired(&mut self, node: NodeId, acts: &mut Vec<UnitAction>) {
        let Some(t) = self.cfg.triggered.as_ref() else { return };
        let (overhead, rates) = (t.step_overhead, type_rates(t));
        let now = self.q.now();
        let n = self.trig.nics[node.index()].as_mut().expect("offload unit of the node");
        let busy = &mut n.unit_busy;
        // Units that fired now finish at `unit_busy` (it moved); the others' actions go now.
        let mut fired: u64 = 0;
        n.units.take_fired(|u, w| {
            let mut cost = SimTime(overhead.0 * w.steps);
            for (bytes, rate) in w.reduced.iter().zip(rates) {
                if *bytes > 0 {
                    cost += rate.serialization(Bytes(*bytes));
                }
            }
            busy[u] = busy[u].max(now) + cost;
            if u < 64 {
                fired |= 1 << u;
            }
        });
        if acts.is_empty() {
            return;
        }
        let done = |u: usize| {
            if u < 64 && fired >> u & 1 == 1 {
                n.unit_busy[u]
            } else {
                now
            }
        };
        let serial = |a: &UnitAction| {
            let job = match &a.action {
                TrigAction::Send(p) => p.key.job(),
                TrigAction::Complete { job, .. } => *job,
            };
            n.live.get(&(job, a.vp)).map_or(0, |l| l.serial)
        };
        let by = self.net.node_origin(node);
        let first = acts[0].unit;
        if acts.iter().all(|a| a.unit == first) {
            let at = done(first);
            let mut batch = self.trig.act_pool.pop().unwrap_or_default();
            batch.extend(acts.drain(..).map(|a| {
                let s = serial(&a);
                (a, s)
            }));
            let acts = batch;
            let batch = self.t_alloc_batch(Batch::Fire { node, acts });
            self.q.schedule_by(by, at, WorldEvent::Trig(TrigEvent::Fire { batch }));
            return;
        }
        let mut by_unit: BTreeMap<usize, Vec<(UnitAction, u64)>> = BTreeMap::new();
        for a in acts.drain(..) {
            let s = serial(&a);
            by_unit.entry(a.unit).or_default().push((a, s));
        }
        let at: Vec<(usize, SimTime)> = by_unit.keys().map(|&u| (u, done(u))).collect();
        for ((_, acts), (_, at)) in by_unit.into_iter().zip(at) {
            let batch = self.t_alloc_batch(Batch::Fire { node, acts });
            self.q.schedule_by(by, at, WorldEvent::Trig(TrigEvent::Fire { batch }));
        }
    }

    fn t_alloc_batch(&mut self, b: Batch) -> u32 {
        if let Some(i) = self.trig.free_batches.pop() {
            self.trig.batches[i as usize] = Some(b);
            i
        } else {
            self.trig.batches.push(Some(b));
            (self.trig.batches.len() - 1) as u32
        }
    }

    fn t_take_batch(&mut self, i: u32) -> Batch {
        let b = self.trig.batches[i as usize].take().expect("live batch");
        self.trig.free_batches.push(i);
        b
    }

    fn t_fire(&mut self, batch: u32) {
        let Batch::Fire { node, mut acts } = self.t_take_batch(batch) else {
            unreachable!("a fire event names a fire batch")
        };
        let now = self.q.now();
        for (a, serial) in acts.drain(..) {
            match a.action {
                TrigAction::Send(p) => self.send_trig(node, p, serial),
                TrigAction::Complete { job, data, addr } => {
                    let len = data.len() as u64;
                    let done = if addr.is_some() && len > 0 {
                        let d = self.timing.write_time(len);
                        self.nics[node.index()].host.write(now, d)
                    } else {
                        now
                    };
                    let b = self.t_alloc_batch(Batch::Write {
                        node,
                        vp: a.vp,
                        job,
                        serial,
                        data,
                        addr,
                    });
                    let by = self.net.node_origin(node);
                    self.q
                        .schedule_by(by, done, WorldEvent::Trig(TrigEvent::Written { batch: b }));
                }
            }
        }
        if self.trig.act_pool.len() < VEC_POOL {
            self.trig.act_pool.push(acts);
        }
    }

    fn send_trig(&mut self, node: NodeId, p: TrigPacket, serial: u64) {
        self.trig.stats[S::Bytes as usize] += p.data.len() as u64;
        self.trig.stats[S::Sent as usize] += 1;
        let rail = (serial % u64::from(self.net.rails())) as u8;
        self.t_inject(node, p, serial, rail);
    }

    /// Put an offload packet on the fabric on `rail`: ⌈bytes / `packet.max_payload`⌉
    /// fragments (one header-only for no data), reassembled at the destination.
    fn t_inject(&mut self, node: NodeId, p: TrigPacket, serial: u64, rail: u8) {
        let dest = NodeId(p.dest);
        let len = p.data.len() as u64;
        let mtu = u64::from(self.mtu);
        let frags = len.div_ceil(mtu).max(1);
        let w = Wire {
            pkt: p,
            serial,
            node: dest,
            frags: frags as u32,
            seen: 0,
            credits: self.trig.credit_pool.pop().unwrap_or_default(),
            abort: false,
        };
        let id = if let Some(i) = self.trig.free_wires.pop() {
            self.trig.wires[i as usize] = Some(w);
            i
        } else {
            self.trig.wires.push(Some(w));
            (self.trig.wires.len() - 1) as u32
        };
        if dest == node || dest.index() >= self.nics.len() {
            // Between two VPs of one NIC (or to a node that does not exist: the walker
            // validated DestID's width only; such a packet is dropped at arrival).
            let at = self.q.now() + self.cfg.loopback_latency + self.t_jitter(dest);
            let by = self.net.node_origin(node);
            self.q
                .schedule_by(by, at, WorldEvent::Trig(TrigEvent::Arrive { wire: id }));
            return;
        }
        let now = self.q.now();
        for k in 0..frags {
            let size = (len - (k * mtu).min(len)).min(mtu) as u32;
            let header = self.header;
            self.trig.stats[S::Packets as usize] += 1;
            let built = self.net.inject_with(&mut self.q, &mut self.arrivals, |p| {
                *p = Packet::new(TAG_TRIG | u64::from(id), node, dest, size, header, now);
                p.rail = rail;
            });
            if built.is_err() {
                self.stats.add(crate::world::NicStat::Unroutable, 1);
            }
        }
    }

    /// A fragment of an offload packet reached its node.
    pub(crate) fn trig_packet(&mut self, p: Packet) {
        let id = (p.tag & 0xffff_ffff) as u32;
        let held = self
            .cfg
            .rx_buffer
            .is_some()
            .then(|| (p.dst, p.rail, Network::buffer_credits(&p)));
        let w = self.trig.wires[id as usize].as_mut().expect("live offload packet");
        w.seen += 1;
        w.credits.extend(held);
        if w.seen == w.frags {
            let at = self.q.now() + self.cfg.rx_overhead + self.t_jitter(p.dst);
            let by = self.net.node_origin(p.dst);
            self.q
                .schedule_by(by, at, WorldEvent::Trig(TrigEvent::Arrive { wire: id }));
        }
    }

    fn t_release_credits(&mut self, mut credits: Vec<Credit>) {
        for (node, rail, c) in credits.drain(..) {
            self.net.release_ejection(&mut self.q, node, rail, c);
        }
        if credits.capacity() > 0 && self.trig.credit_pool.len() < VEC_POOL {
            self.trig.credit_pool.push(credits);
        }
    }

    /// A whole collective packet enters the NIC `node`.
    fn t_arrive(&mut self, node: NodeId, p: TrigPacket, serial: u64, credits: Vec<Credit>) {
        let Some(n) = self.trig.nic_mut(node.0) else {
            self.trig.stats[S::Errors as usize] += 1;
            self.t_release_credits(credits);
            return;
        };
        let at = (p.key.job(), p.dest_vp);
        let live = n.live.get(&at).filter(|l| l.serial == serial).map(|l| l.post);
        let Some(post) = live else {
            if n.is_cancelled(p.dest_vp, serial) {
                // A packet of a collective that failed here, still on the wire at the failure.
                self.trig.stats[S::Dropped as usize] += 1;
            } else if (p.dest_vp as usize) < n.vps.len() {
                n.early.entry((p.dest_vp, serial)).or_default().push(p);
                n.early_now += 1;
                let peak = n.early_now;
                let s = &mut self.trig.stats;
                s[S::Early as usize] += 1;
                s[S::PeakEarly as usize] = s[S::PeakEarly as usize].max(peak);
            } else {
                self.trig.stats[S::Errors as usize] += 1;
            }
            self.t_release_credits(credits);
            return;
        };
        if self.t_arrive_live(node, post, p, serial, credits) {
            self.t_retry_refused(node);
        }
    }

    /// Offer a packet of a live sequence to the units; `true` when it was taken.
    fn t_arrive_live(&mut self, node: NodeId, post: u32, p: TrigPacket, serial: u64, credits: Vec<Credit>) -> bool {
        let n = self.tnic(node);
        n.arrived += 1;
        n.arrived_bytes += p.data.len() as u64;
        self.trig.stats[S::Arrived as usize] += 1;
        match self.t_offer(
            node,
            post,
            Held {
                pkt: p,
                serial,
                credits,
            },
        ) {
            Ok(()) => true,
            Err(h) => {
                self.trig.stats[S::Refused as usize] += 1;
                self.tnic(node).refused.push_back(h);
                false
            }
        }
    }

    /// Hand a packet of a live sequence (of `post`) to its unit: while the unit is busy (or
    /// others wait before it) it waits in the unit's buffer, taking a slot, until the unit is
    /// free; a free unit takes it at once (to a parked read, or into a slot). The packet back
    /// when the buffer is full: it keeps its receive-buffer credits (the push-back) and is
    /// offered again later.
    fn t_offer(&mut self, node: NodeId, post: u32, h: Held) -> Result<(), Held> {
        let now = self.q.now();
        let n = self.tnic(node);
        let Some(u) = n.units.unit_of(h.pkt.key.job(), h.pkt.dest_vp) else {
            // The live map names the sequence, so a unit holds it.
            return Err(h);
        };
        if n.unit_busy[u] > now || !n.inbox[u].is_empty() {
            let slot = !n.units.awaits(u, h.pkt.key);
            let used = n.units.occupancy(u) as usize + n.inbox_slots[u] as usize;
            if slot && used >= n.units.slots() as usize {
                return Err(h);
            }
            let Held { pkt, serial, credits } = h;
            n.inbox_slots[u] += u32::from(slot);
            n.inbox_changed(u);
            n.inbox[u].push_back(Waiting {
                held: Held {
                    pkt,
                    serial,
                    credits: Vec::new(),
                },
                slot,
            });
            let at = n.unit_busy[u].max(now);
            if !std::mem::replace(&mut n.inbox_armed[u], true) {
                let by = self.net.node_origin(node);
                self.q.schedule_by(
                    by,
                    at,
                    WorldEvent::Trig(TrigEvent::Process {
                        node: node.0,
                        unit: u as u32,
                    }),
                );
            }
            self.t_release_credits(credits);
            self.t_occupancy(node);
            return Ok(());
        }
        let trig = &mut self.trig;
        let n = trig.nics[node.index()].as_mut().expect("offload unit of the node");
        let r = n.units.arrive_into(h.pkt, &mut |_, _| Vec::new(), &mut trig.acts);
        self.t_occupancy(node);
        let mut acts = std::mem::take(&mut self.trig.acts);
        let r = match r {
            Ok(None) => {
                self.t_release_credits(h.credits);
                self.t_fired(node, &mut acts);
                Ok(())
            }
            Ok(Some(pkt)) => {
                self.t_fired(node, &mut acts);
                Err(Held { pkt, ..h })
            }
            Err(e) => {
                acts.clear();
                self.tnic(node).units.take_fired(|_, _| {});
                self.t_release_credits(h.credits);
                self.t_unit_error(post, e);
                Ok(())
            }
        };
        self.trig.acts = acts;
        r
    }

    /// Unit `u` of `node` is free (or was, when armed): it takes its waiting packets in
    /// arrival order until one keeps it busy.
    fn t_process(&mut self, node: NodeId, u: usize) {
        self.tnic(node).inbox_armed[u] = false;
        loop {
            let now = self.q.now();
            let n = self.tnic(node);
            if n.inbox[u].is_empty() {
                break;
            }
            if n.unit_busy[u] > now {
                n.inbox_armed[u] = true;
                let at = n.unit_busy[u];
                let by = self.net.node_origin(node);
                self.q.schedule_by(
                    by,
                    at,
                    WorldEvent::Trig(TrigEvent::Process {
                        node: node.0,
                        unit: u as u32,
                    }),
                );
                break;
            }
            let w = n.inbox[u].pop_front().expect("not empty");
            n.inbox_slots[u] -= u32::from(w.slot);
            n.inbox_changed(u);
            let h = w.held;
            let at = (h.pkt.key.job(), h.pkt.dest_vp);
            let live = n.live.get(&at).filter(|l| l.serial == h.serial).map(|l| l.post);
            let Some(post) = live else {
                // Its collective failed here meanwhile: the packet had entered the unit.
                self.trig.stats[S::Discarded as usize] += 1;
                self.t_occupancy(node);
                continue;
            };
            let trig = &mut self.trig;
            let n = trig.nics[node.index()].as_mut().expect("offload unit of the node");
            let r = n.units.arrive_into(h.pkt, &mut |_, _| Vec::new(), &mut trig.acts);
            self.t_occupancy(node);
            let mut acts = std::mem::take(&mut self.trig.acts);
            match r {
                Ok(None) => self.t_fired(node, &mut acts),
                Ok(Some(pkt)) => {
                    self.tnic(node).refused.push_back(Held { pkt, ..h });
                    self.t_fired(node, &mut acts);
                }
                Err(e) => {
                    acts.clear();
                    self.tnic(node).units.take_fired(|_, _| {});
                    self.t_unit_error(post, e);
                }
            }
            self.trig.acts = acts;
        }
        self.t_retry_refused(node);
    }

    fn t_unit_error(&mut self, post: u32, e: UnitError) {
        self.t_fail_post(post, CqeStatus::TrigFailed(e.to_string()));
    }

    /// Offer the refused packets again, in arrival order, until none is taken.
    fn t_retry_refused(&mut self, node: NodeId) {
        if self.tnic(node).refused.is_empty() {
            return;
        }
        loop {
            let held: Vec<Held> = self.tnic(node).refused.drain(..).collect();
            if held.is_empty() {
                return;
            }
            let mut taken = false;
            for h in held {
                let at = (h.pkt.key.job(), h.pkt.dest_vp);
                let live = self
                    .tnic(node)
                    .live
                    .get(&at)
                    .filter(|l| l.serial == h.serial)
                    .map(|l| l.post);
                let Some(post) = live else {
                    self.tnic(node).refused.push_back(h);
                    continue;
                };
                match self.t_offer(node, post, h) {
                    Ok(()) => taken = true,
                    Err(h) => self.tnic(node).refused.push_back(h),
                }
            }
            if !taken {
                return;
            }
        }
    }

    /// A completion's data is in host memory: the pulse is done.
    fn t_written(&mut self, batch: u32) {
        let Batch::Write {
            node,
            vp,
            job,
            serial,
            data,
            addr,
        } = self.t_take_batch(batch)
        else {
            unreachable!("a written event names a write batch")
        };
        // A pulse taken out of its unit when its collective failed has no live entry (or the
        // entry is a later pulse's, with the same JobID and VP and another serial).
        let n = self.tnic(node);
        if n.live.get(&(job, vp)).is_none_or(|l| l.serial != serial) {
            return;
        }
        let l = n.live.remove(&(job, vp)).expect("checked above");
        if self.tpost(l.post).failed {
            self.t_release(node, l.post, l.counter, l.elements);
            self.t_gate(node);
            self.t_retry_refused(node);
            return;
        }
        let rank = self.tpost(l.post).rank;
        let mut status = None;
        if let Some(a) = addr.filter(|_| !data.is_empty()) {
            if let Err(e) = self.mem[rank.index()].write(a, &data) {
                status = Some(CqeStatus::TrigFailed(format!("result at {a:#x}: {e}")));
            }
        }
        self.t_release(node, l.post, l.counter, l.elements);
        let p = self.tpost(l.post);
        p.left -= 1;
        if addr.is_some() {
            p.bytes += data.len() as u64;
        }
        if let Some(s) = status {
            self.t_fail_post(l.post, s);
        } else if p.left == 0 && !p.failed {
            let (cq, wr_id, bytes) = (p.cq, p.wr_id, p.bytes);
            self.trig.stats[S::Completed as usize] += 1;
            let now = self.q.now();
            self.push_cqe(
                cq,
                Cqe {
                    wr_id,
                    kind: CqeKind::Trig,
                    status: CqeStatus::Ok,
                    bytes,
                    peer: rank,
                    addr: 0,
                    value: 0,
                    at: now,
                },
            );
            self.t_finish_post(l.post);
        }
        self.t_gate(node);
        self.t_retry_refused(node);
    }

    /// Return a pulse's counter.
    fn t_release(&mut self, node: NodeId, post: u32, counter: CounterId, elements: u64) {
        let _ = self.tnic(node).pulse.respond(counter, elements);
        let p = self.tpost(post);
        p.held -= 1;
        let finish = p.failed && p.held == 0 && p.fetched.is_empty();
        self.t_regate(post);
        if finish {
            self.t_finish_post(post);
        }
    }

    /// The post leaves the active collectives; its state goes once no pulse of it is in flight.
    fn t_finish_post(&mut self, post: u32) {
        let node = self.tpost(post).node;
        let now = self.q.now();
        let n = self.tnic(node);
        let before = n.active.len();
        n.active.retain(|&p| p != post);
        self.tpost(post).active = false;
        self.t_regate(post);
        let n = self.tnic(node);
        if before > 0 && n.active.is_empty() {
            if let Some(since) = n.active_since.take() {
                n.active_time += now - since;
            }
        }
        let p = self.tpost(post);
        if p.held == 0 && p.fetched.is_empty() {
            self.trig.posts[post as usize] = None;
            self.trig.free_posts.push(post);
        }
    }

    /// The collective fails here: an error completion, and no further pulse starts.
    fn t_fail_post(&mut self, post: u32, status: CqeStatus) {
        let now = self.q.now();
        let p = self.tpost(post);
        if p.failed {
            return;
        }
        p.failed = true;
        p.pending.clear();
        self.t_regate(post);
        let p = self.tpost(post);
        let (cq, wr_id, rank, node) = (p.cq, p.wr_id, p.rank, p.node);
        let (serial, vp, peers) = (p.serials.0, p.vp, std::mem::take(&mut p.peers));
        self.trig.stats[S::Errors as usize] += 1;
        self.push_cqe(
            cq,
            Cqe {
                wr_id,
                kind: CqeKind::Trig,
                status,
                bytes: 0,
                peer: rank,
                addr: 0,
                value: 0,
                at: now,
            },
        );
        for (peer, peer_vp) in peers {
            self.send_trig_abort(node, vp, (NodeId(peer), peer_vp), serial);
        }
        self.t_cancel_sequences(node, post);
        self.t_finish_post(post);
        self.t_gate(node);
        self.t_retry_refused(node);
    }

    /// Take a failed post's live sequences out of `node`'s units: their buffered packets and
    /// parked reads go, so do their packets waiting for a busy unit, refused or stored early,
    /// and their pulse counters return to the controller. Cost O(live sequences of the NIC +
    /// waiting packets).
    fn t_cancel_sequences(&mut self, node: NodeId, post: u32) {
        let (vp, serials) = {
            let p = self.tpost(post);
            (p.vp, p.serials)
        };
        let n = self.trig.nic_mut(node.0).expect("offload unit of the node");
        let mut mine: Vec<(u32, u32)> = n.live.iter().filter(|(_, l)| l.post == post).map(|(&k, _)| k).collect();
        mine.sort_unstable();
        let mut returned = 0;
        let mut discarded = 0u64;
        let mut gone: Vec<(u32, u32, u64)> = Vec::with_capacity(mine.len());
        for (job, v) in mine {
            let l = n.live.remove(&(job, v)).expect("listed above");
            discarded += n.units.cancel(job, v).map_or(0, |d| d as u64);
            let _ = n.pulse.respond(l.counter, l.elements);
            returned += 1;
            gone.push((job, v, l.serial));
        }
        let of_gone = |pkt: &TrigPacket, serial: u64| gone.contains(&(pkt.key.job(), pkt.dest_vp, serial));
        n.inbox_dirty = u64::MAX;
        for (q, slots) in n.inbox.iter_mut().zip(n.inbox_slots.iter_mut()) {
            q.retain(|w| {
                let keep = !of_gone(&w.held.pkt, w.held.serial);
                *slots -= u32::from(!keep && w.slot);
                discarded += u64::from(!keep);
                keep
            });
        }
        let mut credits = Vec::new();
        n.refused.retain_mut(|h| {
            let keep = !of_gone(&h.pkt, h.serial);
            if !keep {
                credits.append(&mut h.credits);
                discarded += 1;
            }
            keep
        });
        let early: Vec<(u32, u64)> = n
            .early
            .range((vp, serials.0)..(vp, serials.1))
            .map(|(&k, _)| k)
            .collect();
        let mut dropped = 0;
        for k in early {
            let d = n.early.remove(&k).map_or(0, |v| v.len() as u64);
            n.early_now -= d;
            dropped += d;
        }
        // Packets of the collective still on the wire are dropped when they arrive.
        if serials.1 > serials.0 {
            n.cancelled.insert((vp, serials.0), serials.1);
        }
        self.trig.stats[S::Dropped as usize] += dropped;
        self.trig.stats[S::Discarded as usize] += discarded;
        self.tpost(post).held -= returned;
        self.t_regate(post);
        self.t_release_credits(credits);
        self.t_occupancy(node);
    }

    const ABORTED: &'static str = "aborted: the collective failed at another member";

    /// Tell a member (node, VP) that the collective of pulse `serial` failed here: a
    /// header-only offload packet on the fabric (through the NIC to a VP of its own).
    fn send_trig_abort(&mut self, node: NodeId, vp: u32, (dest, dest_vp): (NodeId, u32), serial: u64) {
        let Ok(key) = super::key::PacketKey::new(0, node.0, vp, 0) else {
            return;
        };
        let w = Wire {
            pkt: TrigPacket {
                key,
                dest: dest.0,
                dest_vp,
                cp: false,
                end: false,
                addr: None,
                data: Vec::new(),
            },
            serial,
            node: dest,
            frags: 1,
            seen: 0,
            credits: Vec::new(),
            abort: true,
        };
        let id = if let Some(i) = self.trig.free_wires.pop() {
            self.trig.wires[i as usize] = Some(w);
            i
        } else {
            self.trig.wires.push(Some(w));
            (self.trig.wires.len() - 1) as u32
        };
        let by = self.net.node_origin(node);
        if dest == node || dest.index() >= self.nics.len() {
            let at = self.q.now() + self.cfg.loopback_latency;
            self.q
                .schedule_by(by, at, WorldEvent::Trig(TrigEvent::Arrive { wire: id }));
            return;
        }
        let now = self.q.now();
        let rail = (serial % u64::from(self.net.rails())) as u8;
        let header = self.header;
        self.trig.stats[S::Packets as usize] += 1;
        let built = self.net.inject_with(&mut self.q, &mut self.arrivals, |p| {
            *p = Packet::new(TAG_TRIG | u64::from(id), node, dest, 0, header, now);
            p.rail = rail;
        });
        if built.is_err() {
            self.stats.add(crate::world::NicStat::Unroutable, 1);
        }
    }

    /// An abort for the collective of pulse `serial` on VP `vp` of `node`: the post running
    /// it fails (and passes the abort on); one not posted yet fails when its doorbell rings.
    fn t_abort(&mut self, node: NodeId, vp: u32, serial: u64) {
        let Some(n) = self.trig.nic(node.0) else { return };
        if (vp as usize) >= n.vps.len() {
            return;
        }
        let found = self.trig.posts.iter().position(|p| {
            p.as_ref()
                .is_some_and(|p| p.node == node && p.vp == vp && (p.serials.0..p.serials.1).contains(&serial))
        });
        match found.map(|i| i as u32) {
            // Active (parsed): it fails now; before that, when the parser is done with it.
            Some(i) if self.trig.nic(node.0).is_some_and(|n| n.active.contains(&i)) => {
                if !self.tpost(i).failed {
                    self.t_fail_post(i, CqeStatus::TrigFailed(Self::ABORTED.into()));
                }
            }
            Some(i) => self.tpost(i).aborted = true,
            None => {
                self.tnic(node).aborted.insert((vp, serial));
            }
        }
    }
}
