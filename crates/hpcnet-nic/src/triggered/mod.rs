//! The Tianhe triggered collective offload unit (spec 04: "Tianhe NIC collective offload:
//! order-preserving triggering and data buffering") — its core mechanisms as building blocks.
//!
//! - [`key`]: the 48-bit packet key JobID(8) + NodeID(24) + VP(11) + SeqID(5), with field
//!   widths enforced;
//! - [`hashbuf`]: the hash-table packet buffer (open addressing, 10 % collision reserve,
//!   validity bitmap, parked reads, occupancy and collision statistics);
//! - [`pulse`]: the pulsed credit controller that bounds the reduction data in flight;
//! - [`desc`]: the collective descriptor with every field of the spec, sequence validation,
//!   and the sequence walker — a pure state machine that names the packets a step waits for,
//!   fires the step (replace data / VP / address, or reduce in a fixed order) and says what to
//!   send and when the collective completes;
//! - [`unit`](mod@unit): the offload units of one NIC — sequences assigned to the least-loaded unit and
//!   kept there, arrivals routed to the unit awaiting them, units time-shared among their
//!   sequences, the test bed's limits (8 units, 16 streams, 32 collectives) as errors;
//! - [`ideal`]: an untimed executor that runs the sequences of many endpoints, each with its
//!   own hash buffer, over a network delivering packets in a seeded random order — the
//!   reference for checking descriptor sequences.
//!
//! These pieces are not yet wired into the [`World`](crate::World): no virtual ports,
//! descriptor queues, scheduler or timing exist for them, and nothing posted through the verbs
//! layer reaches them. They are tested as pure state machines. Descriptor sequences for a
//! communicator come from `hpcnet_coll::offload`.
//!
//! # How the unit is to plug into the World (not yet modelled)
//!
//! The wiring follows the hardware collective unit ([`crate::coll`]), which has the same shape:
//! its own descriptors, its own packets told apart by tag, its own events.
//!
//! 1. **Configuration**: a `[nic.triggered]` section (a `TriggeredConfig` beside
//!    `CollUnitConfig`, checked in `NicConfig::validate` with the key named): units per NIC (8),
//!    incoming streams per unit (16), concurrent collectives per NIC (32), buffer capacity and
//!    slots ([`HashBufConfig`]), pulse capacity C, counters k and time-out ([`PulseConfig`]),
//!    the step overhead and reduction rate per type of the pipelined reduction unit, the
//!    parser's per-descriptor time.
//! 2. **Virtual ports and descriptor queues**: a field of the World (like `coll: CollUnit`)
//!    holds per NIC an [`OffloadUnits`] and up to 2048 VPs, each with a descriptor queue; a rank opens
//!    a VP (the VP number is its 11-bit key field) and posts a whole sequence through one new,
//!    defaulted `NicBackend` call (as `post_coll` is: a backend without the unit refuses it).
//!    The sequence is checked with [`Walker::new`] at post time; errors are `PostError`s.
//!    MP and RDMA point-to-point descriptors posted on a VP become ordinary [`crate::Op`]s and
//!    take the existing engine path ([`World::next_message`](crate::World) is the plug-in point
//!    where the scheduler's choice enters the engines).
//! 3. **Parser and scheduler**: one `WorldEvent::Trig` variant carries the unit's events. The
//!    parser looks at the head descriptor of each non-empty queue after the doorbell and one
//!    descriptor fetch (DMA round trip, as in [`crate::engine`]); the scheduler takes the
//!    queue with the most descriptors among those whose downstream (engine or offload unit) is
//!    idle, ties by VP number. A whole sequence (CH … CT) is handed to
//!    [`OffloadUnits::post`], which assigns it to the least-loaded unit and refuses it past the
//!    limits ([`UnitError`], to become an error completion).
//! 4. **Packets**: a tag bit (like the collective unit's) marks offload packets; the World's
//!    network dispatch hands them to the unit next to the collective unit's check. Their
//!    [`TrigPacket`] travels in a side table (slab with a free list), split into packets of at
//!    most `packet.max_payload` and reassembled before it enters
//!    [`OffloadUnits::arrive`], which routes it by (JobID, DestVP) and holds early arrivals
//!    (unbounded in the untimed model; the timed one must bound them).
//! 5. **Buffer and back-pressure**: [`HashBuf::insert`] at arrival; a refused packet keeps its
//!    receive buffer in the network (the ejection credits of `nic.rx_buffer`), so the fabric
//!    stops delivering to that NIC until a read frees a slot — the credit push-back the paper
//!    describes — and is retried after each read.
//! 6. **Firing**: the walker's actions cost the step overhead plus the operand bytes at the
//!    reduction rate on the unit's reduction pipeline (busy-until time, intermediate results
//!    in the unit); a `Send` enters the transmit path ([`crate::tx`]); `Complete` writes the
//!    result to host memory through the host interface ([`crate::host`]) and then a completion
//!    of a new completion kind.
//! 7. **Pulses**: a reduction longer than the pulse size C/k is walked once per pulse; each
//!    pulse takes a counter from the unit's [`PulseController`], its DMA reads and sends count
//!    responses, and the counter returns at the pulse's size; `Retry` re-arms a timer event;
//!    [`PulseError::Timeout`] becomes an error completion. The key leaves no room for a pulse
//!    number (SeqID has 5 bits), so the model must say how pulses of one job are told apart —
//!    a JobID per pulse, or a pulse field beside the key; the paper does not say.
//! 8. **Statistics**: each unit's [`HashBufStats`] and [`PulseStats`] under `nic.trig.*` names
//!    in the World's statistics, as the collective unit reports `nic.coll.*`.

pub mod desc;
pub mod hashbuf;
pub mod ideal;
pub mod key;
pub mod pulse;
pub mod timed;
pub mod unit;

pub use desc::{CollDescriptor, DescError, Payload, Source, TrigAction, TrigPacket, WalkError, Walker, Work};
pub use hashbuf::{HashBuf, HashBufConfig, HashBufConfigError, HashBufError, HashBufStats, Inserted, Read};
pub use ideal::{run_ideal, Completion, Endpoint, IdealError, IdealRun};
pub use key::{KeyError, PacketKey};
pub use pulse::{Acquire, PulseConfig, PulseController, PulseError, PulseStats};
pub use timed::{TrigCounters, TrigEvent, TrigPost, TrigPulse, MAX_VPS};
pub use unit::{OffloadUnits, UnitAction, UnitError, UnitsConfig};
