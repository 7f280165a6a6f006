//! Shared set-up of the message-library tests: the Sunway-like link and router parameters
//! (4 lanes of 28.125 Gb/s with 64b/66b coding, 10 ns cables, 4 VCs of 64 + 64 credits of 64 B,
//! 50 ns routers) that every test fabric here starts from.

use hpcnet_des::{BitsPerSec, Bytes, SimTime};
use hpcnet_fabric::config::*;

/// The test fabric with `routing`, packets of at most `max_payload` bytes and `faults`.
pub fn fabric_with(routing: RoutingConfig, max_payload: u64, faults: FaultConfig) -> FabricConfig {
    FabricConfig {
        link: LinkConfig {
            lanes: 4,
            lane_rate: BitsPerSec::gbps(28.125),
            encoding: Encoding::B64B66,
            latency: SimTime::from_ns(10),
            switching: Switching::CutThrough,
            ..LinkConfig::default()
        },
        link_overrides: Vec::new(),
        router: RouterConfig {
            vcs: 4,
            credit_unit: Bytes(64),
            private_credits: 64,
            shared_credits: 64,
            latency: SimTime::from_ns(50),
            arbitration: Arbitration::RoundRobin,
            vc_select: VcSelect::RoundRobin,
            node_injection: NodeInjection::PerVc,
            multicast_tables: 32,
            ..RouterConfig::default()
        },
        packet: PacketConfig {
            header: Bytes(24),
            max_payload: Bytes(max_payload),
        },
        routing,
        faults,
    }
}
