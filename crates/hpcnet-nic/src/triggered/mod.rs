//! The Tianhe triggered collective offload unit (spec 04: "Tianhe NIC collective offload:
//! order-preserving triggering and data buffering"): its core mechanisms as building blocks,
//! and their timed model in the [`World`](crate::World).
//!
//! - [`key`]: the 48-bit packet key JobID(8) + NodeID(24) + VP(11) + SeqID(5), with field
//!   widths enforced;
//! - [`hashbuf`]: the hash-table packet buffer (open addressing, 10 % collision reserve,
//!   validity bitmap, parked reads, occupancy and collision statistics);
//! - [`pulse`]: the pulsed credit controller that bounds the reduction data in flight;
//! - [`desc`]: the collective descriptor with every field of the spec, sequence validation
//!   into a checked shape shared by the pulses that repeat it, and the sequence walker — a pure state machine that names the packets a step waits for,
//!   fires the step (replace data / VP / address, or reduce in a fixed order) and says what to
//!   send and when the collective completes;
//! - [`unit`](mod@unit): the offload units of one NIC — sequences assigned to the least-loaded unit and
//!   kept there, arrivals routed to the unit awaiting them, units time-shared among their
//!   sequences, the test bed's limits (8 units, 16 streams, 32 collectives) as errors;
//! - [`ideal`]: an untimed executor that runs the sequences of many endpoints, each with its
//!   own hash buffer, over a network delivering packets in a seeded random order — the
//!   reference for checking descriptor sequences;
//! - [`timed`]: the unit in the timed [`World`](crate::World) — virtual ports, descriptor
//!   queues, the parser, pulse counters, offload packets on the fabric with back-pressure,
//!   firing on a busy-until pipeline, completions to the host.
//!
//! # How the unit plugs into the World
//!
//! The wiring follows the hardware collective unit ([`crate::coll`]), which has the same shape:
//! its own descriptors, its own packets told apart by tag, its own events. [`timed`] states the
//! model in full; in short:
//!
//! 1. **Configuration**: `[nic.triggered]` ([`crate::config::TriggeredConfig`], checked in
//!    `NicConfig::validate` with the key named): units per NIC (8), incoming streams per unit
//!    (16), concurrent collectives per NIC (32), buffer capacity and slots ([`HashBufConfig`]),
//!    pulse capacity C, counters k, retry interval and time-out ([`PulseConfig`]), the step
//!    overhead and reduction rate per type of the pipelined reduction unit, the parser's
//!    per-descriptor time. Without the section a NIC has no unit.
//! 2. **Virtual ports and descriptor queues**: per NIC an [`OffloadUnits`], a
//!    [`PulseController`] and up to 2048 VPs, each with a descriptor queue; a rank opens a VP
//!    (`World::trig_open_vp`, the VP number is its 11-bit key field) and posts a whole
//!    collective through one defaulted `NicBackend` call (`post_trig`; a backend without the
//!    unit refuses it). Every sequence is checked once at post time ([`Shape::new`]; the pulses repeating it walk the checked shape, [`Walker::start`]); errors
//!    are `PostError`s.
//! 3. **Parser and scheduler**: `WorldEvent::Trig` carries the unit's events. After the
//!    doorbell, the parser takes the head of a queue — first those whose head can go
//!    downstream now (a collective while fewer than `collectives` are active, a
//!    point-to-point descriptor while the point-to-point sender is idle), then the queue with
//!    the most descriptors, then the lower VP — fetches its descriptors (one DMA round trip)
//!    and spends the per-descriptor parse time; each pulse is handed to
//!    [`OffloadUnits::post`], which assigns it to the least-loaded unit; [`UnitError`]s become
//!    error completions. Point-to-point descriptors (C = 0, MP or RDMA,
//!    `World::trig_post_p2p`) share the queues and the parser, then go to the NIC's
//!    point-to-point sender; their CP = 0 packets are written to the destination's memory
//!    and never enter a unit.
//! 4. **Packets**: a tag bit marks offload packets; the World's network dispatch hands them to
//!    the unit next to the collective unit's check. Their [`TrigPacket`] travels in a side table,
//!    split into packets of at most `packet.max_payload` and reassembled before it enters
//!    [`OffloadUnits::arrive`].
//! 5. **Buffer and back-pressure**: [`HashBuf::insert`] at arrival; a refused packet keeps its
//!    receive buffer in the network (the ejection credits of `nic.rx_buffer`), so the fabric
//!    stops delivering to that NIC until a read frees a slot, and is retried after each change
//!    in the units.
//! 6. **Firing**: the walker's steps cost the step overhead plus the reduced bytes at the
//!    reduction rate on the unit's busy-until pipeline ([`Work`] counts them); a `Send` enters
//!    the fabric; `Complete` writes the result to host memory through the host interface and
//!    then a completion of kind `Trig`.
//! 7. **Pulses**: each pulse of a collective is a sequence of its own; it takes a counter from
//!    the NIC's [`PulseController`] before it starts and returns it when it completes;
//!    `Retry` re-arms a timer event; [`PulseError::Timeout`] becomes an error completion.
//!    Pulses are told apart by a **serial number carried beside the 48-bit key** (the key
//!    has no room for a pulse number); each pulse also has its own JobID (serial mod 256).
//! 8. **Statistics**: each unit's [`HashBufStats`] and the controller's [`PulseStats`] under
//!    `nic.trig.*` names in the World's statistics, as the collective unit reports
//!    `nic.coll.*`.
//!
//! Descriptor sequences for a communicator come from `hpcnet_coll::offload`; the library's
//! `Algorithm::Offload` posts them.

pub mod desc;
pub mod hashbuf;
pub mod ideal;
pub mod key;
pub mod pulse;
pub mod timed;
pub mod unit;

pub use desc::{
    BufPool, CollDescriptor, DescError, Payload, Shape, Source, TrigAction, TrigPacket, WalkError, Walker, Work,
};
pub use hashbuf::{HashBuf, HashBufConfig, HashBufConfigError, HashBufError, HashBufStats, Inserted, Read};
pub use ideal::{run_ideal, Completion, Endpoint, IdealError, IdealRun};
pub use key::{KeyError, PacketKey};
pub use pulse::{Acquire, PulseConfig, PulseController, PulseError, PulseStats};
pub use timed::{TrigBufferUse, TrigCounters, TrigEvent, TrigP2p, TrigPost, TrigPulse, TrigRun, MAX_VPS};
pub use unit::{OffloadUnits, UnitAction, UnitError, UnitsConfig};
