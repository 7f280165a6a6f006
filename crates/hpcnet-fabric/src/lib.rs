//! hpcnet-fabric — the interconnect: topologies, links, routers (virtual channels, credits,
//! cut-through and store-and-forward switching, arbitration), routing algorithms and tables,
//! faults, and the packet-level network simulator that moves packets through them.

pub mod config;
pub mod net;
pub mod packet;
pub mod routing;
pub mod topology;

pub use config::{ConfigError, FabricConfig};
pub use net::{Collect, Endpoints, NetEvent, Network};
pub use packet::{Packet, PacketId};
pub use routing::{RouteError, Routing};
