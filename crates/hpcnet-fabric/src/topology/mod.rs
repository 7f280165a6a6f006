//! Topologies: the static graph of routers, endpoint nodes and the links between them.
//!
//! A [`Topology`] is built from a [`TopologyConfig`] and validated (every router uses at most its
//! radix, every link is symmetric, every node reaches every other). It carries, for each router
//! port, a [`PortKind`] that the routing algorithms use (torus dimension and direction, tree up
//! or down, sibling, dragonfly local or global), and a [`Shape`] with the parameters of the
//! family, so routing can be computed arithmetically where that is cheaper than a table.

use serde::{Deserialize, Serialize};

pub type RouterId = u32;
pub type NodeId = u32;
pub type PortIdx = u16;

/// What sits at the far end of a router port.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Peer {
    /// Another router's port.
    Router { router: RouterId, port: PortIdx },
    /// An endpoint: node `node`, its NIC port `rail` (0 for single-rail machines).
    Node { node: NodeId, rail: u8 },
    /// Port not cabled (mesh edges, spare ports).
    None,
}

/// The role of a router port, used by routing.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PortKind {
    /// Connects to an endpoint node.
    Terminal,
    /// Torus/mesh/hypercube link along dimension `dim`, towards increasing (`plus`) coordinates.
    /// For a hypercube, `plus` is true when the link sets the bit.
    Dim { dim: u8, plus: bool },
    /// Tree link towards the roots.
    Up,
    /// Tree link towards the leaves.
    Down,
    /// Generalized fat tree: link to the sibling leaf.
    Sibling,
    /// Dragonfly link inside a group.
    Local,
    /// Dragonfly link between groups.
    Global,
    /// Not cabled.
    Unused,
}

/// One router.
#[derive(Clone, Debug, Serialize)]
pub struct RouterInfo {
    /// Number of ports the chip has (validation: `ports.len() <= radix`).
    pub radix: u16,
    /// Peer of every port, in port order.
    pub ports: Vec<Peer>,
    /// Role of every port, same order as `ports`.
    pub kinds: Vec<PortKind>,
    /// Family-specific coordinates: torus/mesh coordinates (dimension 0 first); tree
    /// (level, index in level); dragonfly (group, index in group); generalized fat tree
    /// (plane, level, index).
    pub coords: Vec<u32>,
    /// Which rail/plane this router belongs to (0 for single-plane machines).
    pub plane: u8,
}

/// One endpoint (a NIC); `ports[r]` is the router port its rail `r` is cabled to.
#[derive(Clone, Debug, Serialize)]
pub struct NodeInfo {
    pub ports: Vec<(RouterId, PortIdx)>,
}

/// Family parameters, for arithmetic routing and reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Shape {
    /// k-ary n-cube (`wrap = true`) or mesh; `k[d]` routers along dimension d; `conc` nodes per router.
    Torus { k: Vec<u32>, wrap: bool, conc: u32 },
    Hypercube { n: u32, conc: u32 },
    /// k-ary n-tree: `n` levels of k^(n-1) switches, k^n nodes.
    FatTree { k: u32, n: u32 },
    /// Two-level leaf–spine (possibly several parallel links per leaf–spine pair).
    LeafSpine { leaves: u32, spines: u32, nodes_per_leaf: u32, links_per_spine: u32 },
    /// Sunway dual-rail generalized fat tree: `planes` copies of a leaf–spine with sibling links.
    GeneralizedFatTree { planes: u32, leaves: u32, spines: u32, nodes_per_leaf: u32, sibling_links: u32 },
    /// Dragonfly: `a` routers per group, `p` nodes per router, `h` global links per router, `g` groups.
    Dragonfly { a: u32, p: u32, h: u32, g: u32 },
}

/// The built, validated network graph.
#[derive(Clone, Debug, Serialize)]
pub struct Topology {
    pub name: String,
    pub shape: Shape,
    pub routers: Vec<RouterInfo>,
    pub nodes: Vec<NodeInfo>,
    /// Number of rails (NIC ports per node) = number of planes.
    pub rails: u8,
}
