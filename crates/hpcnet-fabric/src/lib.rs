//! hpcnet-fabric — the interconnect: topologies, links, routers (virtual channels, credits,
//! cut-through and store-and-forward switching, arbitration), routing algorithms and tables,
//! faults, and the packet-level network simulator that moves packets through them.

pub mod topology;
