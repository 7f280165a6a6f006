//! hpcnet-nic — network interface controllers on the simulated fabric.
//!
//! A [`World`] joins the packet network of `hpcnet-fabric` with one NIC per node and one host
//! memory per rank. A NIC is a pipeline of stages, one module each:
//!
//! - [`op`]: the operation model — what a posted request becomes;
//! - [`engine`]: send engines — doorbell, descriptor and data stages, and which message an
//!   engine takes next;
//! - [`host`]: the host interface — PCIe DMA read and write channels ([`HostConfig`]: rate, TLP
//!   overhead, read tags, memory latency, doorbells);
//! - [`tx`]: transmit — packet paths, rail choice (fixed or adaptive), bounded transmit queues;
//! - [`rx`]: receive — dispatch, protection check, landing in host memory in any order,
//!   acknowledgements, write-backs and atomics at the target;
//! - [`rx_agg`]: receive-side aggregation of short messages into blocks written to host memory
//!   by one DMA write (`nic.rx_aggregation`, NICEVT M3);
//! - [`cq`]: completion and receive queues, NAP pools, completion at the initiator;
//! - [`coll`]: the hardware collective unit (logical-tree gather with in-NIC reduction,
//!   broadcast by router multicast);
//! - [`triggered`]: the Tianhe triggered collective offload unit (packet keys, hash-table
//!   buffer, pulsed credits, descriptors and sequence walker, offload units as untimed
//!   building blocks, and their timed model in the [`World`]: virtual ports, parser, offload
//!   packets with back-pressure, completions);
//! - [`reliability`]: the transport's recovery of lost packets (sliding windows for queue
//!   messages, acknowledgement and status probing for RDMA, retransmission timers) and the
//!   seeded random loss of `nic.loss_rate`;
//! - [`pkt`]: packet kinds and their sizes on the wire; [`ids`]: typed identities and where
//!   ranks live; [`memory`]: host memories with registered, key-protected regions.
//!
//! Memory is real: a put's bytes are readable at the target afterwards. The software above
//! (`hpcnet-msg`) drives a world through a narrow set of calls — [`World::post`],
//! [`World::poll_cq`], memory registration, [`World::set_timer`], [`World::step`] and
//! [`World::take_notices`]; nothing here knows about tasks or wakers.

pub mod coll;
pub mod config;
pub mod cq;
pub mod engine;
pub mod host;
pub mod ids;
pub mod memory;
pub mod op;
pub mod pkt;
pub mod reliability;
pub mod rx;
pub mod rx_agg;
pub mod triggered;
pub mod tx;
pub mod world;

pub use coll::{CollDesc, CollKind, CollOp, CollSetupError, CollType, GroupId};
pub use config::{
    CollRecoveryConfig, CollUnitConfig, HostConfig, NicConfig, PortSelect, ReliabilityConfig, RxAggregationConfig,
    TriggeredConfig, WriteCost,
};
pub use cq::{Cqe, CqeKind, CqeStatus};
pub use ids::{CqId, Placement, QpNum, Rank, RqId, Seg, TimerId};
pub use memory::{ExternalBytes, Memory, MemoryError, Region};
pub use op::{AtomicOp, Op, PostError, Request, FSM_MAX};
pub use pkt::READ_REQUEST_BYTES;
pub use rx_agg::RxAggCounters;
pub use world::{LostPacket, NicCounters, Notice, World, WorldEvent};
