//! Builders shared by the fabric's integration tests.

use hpcnet_fabric::topology::{GeneralizedFatTreeConfig, TopologyConfig};

/// A generalized fat tree configuration (no explicit node count, default radix).
pub fn gft(planes: u32, leaves: u32, spines: u32, nodes_per_leaf: u32, sibling_links: u32) -> TopologyConfig {
    TopologyConfig::GeneralizedFatTree(GeneralizedFatTreeConfig {
        planes,
        leaves,
        spines,
        nodes_per_leaf,
        sibling_links,
        nodes: None,
        radix: None,
    })
}
