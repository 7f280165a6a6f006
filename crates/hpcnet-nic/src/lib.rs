//! hpcnet-nic — network interface controllers on the simulated fabric.
//!
//! A [`World`] joins the packet network of `hpcnet-fabric` with one NIC per node. A NIC has a
//! host interface ([`HostConfig`]: PCIe rate, TLP overhead, read tags, memory read latency,
//! doorbells), message engines that fetch descriptors, read data by DMA and cut it into packets,
//! network ports (rails) chosen per packet (fixed or adaptive), and a receive side that writes
//! arriving packets into host memory in any order and completes a message when its last byte has
//! landed. Memory is real: a put's bytes are readable at the target afterwards, and protection
//! keys are checked at the target.
//!
//! The message library (`hpcnet-msg`) drives a world through [`World::post`] and completion
//! queues; nothing here knows about verbs or ranks.

pub mod config;
pub mod memory;
pub mod world;

pub use config::{HostConfig, NicConfig, PortSelect};
pub use memory::{Memory, MemoryError, Region};
pub use world::{Cqe, CqeStatus, Op, Rank, Request, World, WorldEvent};
