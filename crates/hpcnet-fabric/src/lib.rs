//! hpcnet-fabric — the interconnect: topologies, links, routers (virtual channels, credits,
//! cut-through and store-and-forward switching, arbitration), routing algorithms and tables,
//! faults, and the packet-level network simulator that moves packets through them.
//!
//! - [`topology`]: topology families, their builder, metrics and export;
//! - [`config`]: the fabric's scenario keys (links, routers, routing, faults) and validation;
//! - [`faults`]: fault schedules and random failures, and the tables recomputed around failures
//!   (up*/down* reconstruction, the NICEVT torus first/last-step bypass);
//! - [`routing`]: routing functions and tables, VC classes and deadlock schemes;
//! - [`arbiter`]: output arbitration policies;
//! - [`crossbar`]: the router's internal crossbar model (ideal, or the tiled crossbar's
//!   column-channel contention);
//! - [`alloc`]: separable switch allocators (iSLIP, input-first, output-first) matching a
//!   router's inputs and outputs;
//! - [`net`]: the packet-level simulator (input-buffered routers, credits, links) and the
//!   [`Endpoints`] seam through which it hands packets to NICs or traffic collectors;
//! - [`linkerr`]: link-level reliability (bit errors, CRC, go-back-N retransmission from a
//!   replay buffer, cut-through to store-and-forward fallback) and its closed forms;
//! - [`packet`]: the packet record;
//! - [`multicast`]: the routers' multicast tables and how a group's tables are computed.

pub mod alloc;
pub mod arbiter;
pub mod config;
pub mod crossbar;
pub mod faults;
pub mod linkerr;
pub mod multicast;
pub mod net;
pub mod packet;
pub mod routing;
pub mod topology;

pub use config::{ConfigError, FabricConfig};
pub use multicast::{MulticastError, MulticastRoute};
pub use net::{Collect, Endpoints, NetEvent, NetKind, Network};
pub use packet::{Packet, PacketId};
pub use routing::{RouteError, Routing};
