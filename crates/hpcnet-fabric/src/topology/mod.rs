//! Topologies: the static graph of routers, endpoint nodes and the links between them.
//!
//! A [`Topology`] is built from a [`TopologyConfig`] and validated (every router uses at most its
//! radix, every link is symmetric, every node reaches every other). It carries, for each router
//! port, a [`PortKind`] that the routing algorithms use (torus dimension and direction, tree up
//! or down, sibling, dragonfly local or global), and a [`Shape`] with the parameters of the
//! family, so routing can be computed arithmetically where that is cheaper than a table.

use std::collections::VecDeque;

use serde::Serialize;

mod build;
mod config;
mod export;
mod ids;
mod metrics;

pub use build::{build, MAX_ELEMENTS};
pub use config::{
    CrossbarConfig, DragonflyConfig, FatTreeConfig, GeneralizedFatTreeConfig, GridConfig, HypercubeConfig,
    LeafSpineConfig, SizeEstimate, TopologyConfig,
};
pub use ids::{NodeId, PortIdx, RouterId};
pub use metrics::{BisectionMethod, TopologyMetrics};

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
    Torus {
        k: Vec<u32>,
        wrap: bool,
        conc: u32,
    },
    Hypercube {
        n: u32,
        conc: u32,
    },
    /// k-ary n-tree: `n` levels of k^(n-1) switches, k^n nodes.
    FatTree {
        k: u32,
        n: u32,
    },
    /// Two-level leaf–spine (possibly several parallel links per leaf–spine pair).
    LeafSpine {
        leaves: u32,
        spines: u32,
        nodes_per_leaf: u32,
        links_per_spine: u32,
    },
    /// Sunway dual-rail generalized fat tree: `planes` copies of a leaf–spine with sibling links.
    GeneralizedFatTree {
        planes: u32,
        leaves: u32,
        spines: u32,
        nodes_per_leaf: u32,
        sibling_links: u32,
    },
    /// Dragonfly: `a` routers per group, `p` nodes per router, `h` global links per router, `g` groups.
    Dragonfly {
        a: u32,
        p: u32,
        h: u32,
        g: u32,
    },
    /// One router with `ports` nodes (node x on port x).
    Crossbar {
        ports: u32,
    },
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

/// A configuration or structural error. `Display` is one line starting with the scenario key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// A parameter is out of range, e.g. `topology.k[1]: must be at least 2, got 1`.
    #[error("{key}: {reason}")]
    Invalid { key: String, reason: String },
    /// A router role needs more ports than the chip has.
    #[error("topology.radix: {role} needs {needed} ports ({detail}) but radix is {radix}")]
    RadixExceeded {
        role: &'static str,
        needed: u64,
        detail: String,
        radix: u16,
    },
    /// The built graph breaks an invariant (asymmetric link, unreachable node, ...).
    #[error("topology: {0}")]
    Inconsistent(String),
}

impl TopologyError {
    /// The scenario key the error is about, e.g. `topology.radix`.
    pub fn key(&self) -> &str {
        match self {
            Self::Invalid { key, .. } => key,
            Self::RadixExceeded { .. } => "topology.radix",
            Self::Inconsistent(_) => "topology",
        }
    }
}

/// An undirected router–router link, named by its two ends (`a < b` in (router, port) order).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Link {
    pub a: (RouterId, PortIdx),
    pub b: (RouterId, PortIdx),
}

impl Topology {
    /// Global index of every router's first port, plus the total number of router ports at the
    /// end: port p of router r is global port `offsets[r] + p`.
    pub fn port_offsets(&self) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.routers.len() + 1);
        let mut total = 0u32;
        for r in &self.routers {
            v.push(total);
            total += r.ports.len() as u32;
        }
        v.push(total);
        v
    }

    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    pub fn num_routers(&self) -> usize {
        self.routers.len()
    }

    /// The router and port that rail `rail` of `node` is cabled to.
    pub fn router_of(&self, node: NodeId, rail: u8) -> (RouterId, PortIdx) {
        self.nodes[node.index()].ports[rail as usize]
    }

    /// Every router–router link once.
    pub fn links(&self) -> impl Iterator<Item = Link> + '_ {
        self.routers.iter().enumerate().flat_map(|(r, info)| {
            let r = RouterId(r as u32);
            info.ports.iter().enumerate().filter_map(move |(p, peer)| match *peer {
                Peer::Router { router, port } if (r, PortIdx(p as u16)) < (router, port) => Some(Link {
                    a: (r, PortIdx(p as u16)),
                    b: (router, port),
                }),
                _ => None,
            })
        })
    }

    pub fn num_router_links(&self) -> usize {
        self.links().count()
    }

    /// Node–router links: one per node rail.
    pub fn num_node_links(&self) -> usize {
        self.nodes.iter().map(|n| n.ports.len()).sum()
    }

    /// Routers adjacent to `r`, once per link (parallel links repeat the neighbour).
    pub fn neighbors(&self, r: RouterId) -> impl Iterator<Item = RouterId> + '_ {
        self.routers[r.index()].ports.iter().filter_map(|peer| match *peer {
            Peer::Router { router, .. } => Some(router),
            _ => None,
        })
    }

    /// Hop counts (router–router links) from `r` to every router; `u32::MAX` if unreachable.
    pub fn router_distances_from(&self, r: RouterId) -> Vec<u32> {
        let mut dist = vec![u32::MAX; self.routers.len()];
        let mut queue = VecDeque::from([r]);
        dist[r.index()] = 0;
        while let Some(u) = queue.pop_front() {
            let d = dist[u.index()] + 1;
            for v in self.neighbors(u) {
                if dist[v.index()] == u32::MAX {
                    dist[v.index()] = d;
                    queue.push_back(v);
                }
            }
        }
        dist
    }

    /// Checks the invariants every built topology satisfies: port counts within the radix,
    /// symmetric links inside one plane, port kinds matching what is cabled, every node rail `p`
    /// cabled to a terminal port of plane `p` that names it back, and every node reaching every
    /// other within each plane.
    pub fn validate(&self) -> Result<(), TopologyError> {
        let bad = |msg: String| Err(TopologyError::Inconsistent(msg));
        for (r, info) in self.routers.iter().enumerate() {
            if info.ports.len() != info.kinds.len() {
                return bad(format!(
                    "router {r} has {} ports but {} port kinds",
                    info.ports.len(),
                    info.kinds.len()
                ));
            }
            if info.ports.len() > usize::from(info.radix) {
                return bad(format!(
                    "router {r} uses {} ports but radix is {}",
                    info.ports.len(),
                    info.radix
                ));
            }
            for (p, (peer, kind)) in info.ports.iter().zip(&info.kinds).enumerate() {
                match *peer {
                    Peer::Router { router, port } => {
                        let back = self.routers.get(router.index()).and_then(|o| o.ports.get(port.index()));
                        if back
                            != Some(&Peer::Router {
                                router: RouterId(r as u32),
                                port: PortIdx(p as u16),
                            })
                        {
                            return bad(format!(
                                "router {r} port {p} points to router {router} port {port}, which does not point back"
                            ));
                        }
                        let far_plane = self.routers[router.index()].plane;
                        if far_plane != info.plane {
                            return bad(format!(
                                "router {r} port {p} links plane {} to plane {far_plane}",
                                info.plane
                            ));
                        }
                        if matches!(kind, PortKind::Terminal | PortKind::Unused) {
                            return bad(format!("router {r} port {p} links a router but is marked {kind:?}"));
                        }
                    }
                    Peer::Node { node, rail } => {
                        let back = self.nodes.get(node.index()).and_then(|n| n.ports.get(rail as usize));
                        if back != Some(&(RouterId(r as u32), PortIdx(p as u16))) || *kind != PortKind::Terminal {
                            return bad(format!(
                                "router {r} port {p} ({kind:?}) names node {node} rail {rail}, which is not cabled to it"
                            ));
                        }
                    }
                    Peer::None if *kind != PortKind::Unused => {
                        return bad(format!("router {r} port {p} is uncabled but marked {kind:?}"));
                    }
                    Peer::None => {}
                }
            }
        }
        for (x, node) in self.nodes.iter().enumerate() {
            if node.ports.len() != usize::from(self.rails) {
                return bad(format!(
                    "node {x} has {} rails, expected {}",
                    node.ports.len(),
                    self.rails
                ));
            }
            for (rail, &(r, p)) in node.ports.iter().enumerate() {
                let router = self.routers.get(r.index());
                let peer = router.and_then(|info| info.ports.get(p.index()));
                if peer
                    != Some(&Peer::Node {
                        node: NodeId(x as u32),
                        rail: rail as u8,
                    })
                {
                    return bad(format!(
                        "node {x} rail {rail} is not cabled to a terminal port that names it"
                    ));
                }
                if router.is_some_and(|info| usize::from(info.plane) != rail) {
                    return bad(format!("node {x} rail {rail} is cabled to router {r} of another plane"));
                }
            }
        }
        for rail in 0..self.rails {
            let Some(first) = self.nodes.first() else {
                break;
            };
            let dist = self.router_distances_from(first.ports[usize::from(rail)].0);
            if let Some(x) = self
                .nodes
                .iter()
                .position(|n| dist[n.ports[usize::from(rail)].0.index()] == u32::MAX)
            {
                return bad(format!("node {x} cannot reach node 0 in plane {rail}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(k: u32) -> Topology {
        build(&TopologyConfig::Torus(GridConfig {
            k: vec![k],
            concentration: 1,
            radix: None,
        }))
        .unwrap()
    }

    #[test]
    fn helpers_on_a_ring() {
        let t = ring(5);
        assert_eq!(
            (t.num_nodes(), t.num_routers(), t.num_router_links(), t.num_node_links()),
            (5, 5, 5, 5)
        );
        assert_eq!(t.router_of(NodeId(3), 0), (RouterId(3), PortIdx(2)));
        assert_eq!(t.router_distances_from(RouterId(0)), vec![0, 1, 2, 2, 1]);
        let links: Vec<_> = t.links().collect();
        let ends: Vec<_> = links.iter().map(|l| (l.a, l.b)).collect();
        let end = |r, p| (RouterId(r), PortIdx(p));
        assert_eq!(ends[0], (end(0, 0), end(1, 1)));
        assert_eq!(ends[1], (end(0, 1), end(4, 0)));
        assert_eq!(ends[4], (end(3, 0), end(4, 1)));
    }

    #[test]
    fn two_ary_dimension_gets_parallel_links() {
        let t = ring(2);
        assert_eq!(
            t.routers[0].ports[..2],
            [
                Peer::Router {
                    router: RouterId(1),
                    port: PortIdx(1)
                },
                Peer::Router {
                    router: RouterId(1),
                    port: PortIdx(0)
                }
            ]
        );
        assert_eq!(t.num_router_links(), 2);
    }

    #[test]
    fn validate_catches_broken_graphs() {
        let mut t = ring(4);
        t.routers[0].ports[0] = Peer::Router {
            router: RouterId(2),
            port: PortIdx(0),
        };
        assert!(t.validate().unwrap_err().to_string().contains("does not point back"));

        let mut t = ring(4);
        t.routers[1].radix = 2;
        assert_eq!(
            t.validate().unwrap_err().to_string(),
            "topology: router 1 uses 3 ports but radix is 2"
        );

        let mut t = ring(4);
        t.nodes[2].ports[0] = (RouterId(1), PortIdx(2));
        assert!(t.validate().unwrap_err().to_string().contains("node 2 rail 0"));

        // Cut the ring in two: 0–1 | 2–3.
        let mut t = ring(4);
        for (r, p) in [(1, 0), (2, 1), (3, 0), (0, 1)] {
            t.routers[r].ports[p] = Peer::None;
            t.routers[r].kinds[p] = PortKind::Unused;
        }
        let err = t.validate().unwrap_err().to_string();
        assert!(err.contains("cannot reach"), "{err}");
        assert_eq!(t.router_distances_from(RouterId(0))[2], u32::MAX);
    }

    #[test]
    fn error_key_matches_display() {
        let err = build(&TopologyConfig::Torus(GridConfig {
            k: vec![4, 1],
            concentration: 1,
            radix: None,
        }))
        .unwrap_err();
        assert_eq!(err.key(), "topology.k[1]");
        assert!(err.to_string().starts_with("topology.k[1]: "));
    }
}
