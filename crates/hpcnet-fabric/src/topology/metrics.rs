//! Graph metrics of a topology: size, hop distances, bisection width.
//!
//! Distance between two nodes = number of router-to-router links on a shortest path between the
//! routers their rails attach to (0 when they share a router; node–router links are not counted).
//! Multi-rail machines are measured within plane 0: the planes are identical copies.
//!
//! Bisection width is counted in bidirectional router–router links cut by a minimal partition of
//! the routers that splits the nodes into equal halves. Closed forms follow Dally & Towles,
//! "Principles and Practices of Interconnection Networks" (2004), §3.3 (k-ary n-cubes) and §9
//! (fat trees / Clos), which count unidirectional channels: we halve them.

use serde::Serialize;

use super::{Peer, RouterId, Shape, Topology};

/// Above this many plane-0 routers, distances are estimated from [`SAMPLE_SOURCES`] BFS sources.
pub const EXACT_LIMIT: usize = 4096;
/// Number of source routers, spread evenly over id order, when distances are sampled.
pub const SAMPLE_SOURCES: usize = 256;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BisectionMethod {
    /// Closed form for the family ([`Topology::bisection_formula`]).
    Formula,
    /// No closed form applies: the id-order cut ([`Topology::bisection_cut_by_id`]).
    IdOrderCut,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TopologyMetrics {
    pub nodes: usize,
    pub routers: usize,
    pub router_links: usize,
    /// One per node rail.
    pub node_links: usize,
    /// Largest node-to-node distance (plane 0); `u32::MAX` if some pair is disconnected.
    pub diameter: u32,
    /// Mean distance over ordered pairs of distinct nodes (plane 0).
    pub mean_distance: f64,
    /// Distances come from a sample of source routers (lower bound on the diameter, estimate of
    /// the mean) rather than all of them.
    pub sampled: bool,
    /// Bisection width in links, summed over planes.
    pub bisection_links: u64,
    pub bisection_method: BisectionMethod,
    /// Links cut by the id-order partition, summed over planes: an upper bound on the bisection
    /// width up to the granularity of whole routers (the halves' node counts can differ by one
    /// router's nodes).
    pub bisection_cut_by_id: u64,
}

impl Topology {
    pub fn metrics(&self) -> TopologyMetrics {
        let (diameter, mean_distance, sampled) = self.distance_stats();
        let cut = self.bisection_cut_by_id();
        let (bisection_links, bisection_method) = match self.bisection_formula() {
            Some(b) => (b, BisectionMethod::Formula),
            None => (cut, BisectionMethod::IdOrderCut),
        };
        TopologyMetrics {
            nodes: self.num_nodes(),
            routers: self.num_routers(),
            router_links: self.num_router_links(),
            node_links: self.num_node_links(),
            diameter,
            mean_distance,
            sampled,
            bisection_links,
            bisection_method,
            bisection_cut_by_id: cut,
        }
    }

    /// (diameter, mean distance, sampled) over plane 0, weighting each router by its node count.
    fn distance_stats(&self) -> (u32, f64, bool) {
        let mut weight = vec![0u64; self.routers.len()];
        for node in &self.nodes {
            weight[node.ports[0].0.index()] += 1;
        }
        let terminals: Vec<RouterId> = (0..self.routers.len() as u32)
            .map(RouterId)
            .filter(|&r| weight[r.index()] > 0)
            .collect();
        let plane0 = self.routers.iter().filter(|r| r.plane == 0).count();
        let sampled = plane0 > EXACT_LIMIT && terminals.len() > SAMPLE_SOURCES;
        let sources: Vec<RouterId> = if sampled {
            (0..SAMPLE_SOURCES)
                .map(|i| terminals[i * terminals.len() / SAMPLE_SOURCES])
                .collect()
        } else {
            terminals.clone()
        };
        let others = self.nodes.len().saturating_sub(1) as u128;
        let (mut diameter, mut total, mut pairs) = (0u32, 0u128, 0u128);
        for s in sources {
            let dist = self.router_distances_from(s);
            let ws = u128::from(weight[s.index()]);
            pairs += ws * others;
            for &t in &terminals {
                let d = dist[t.index()];
                diameter = diameter.max(d);
                if d != u32::MAX {
                    total += ws * u128::from(weight[t.index()]) * u128::from(d);
                }
            }
        }
        let mean = if pairs == 0 { 0.0 } else { total as f64 / pairs as f64 };
        (diameter, mean, sampled)
    }

    /// Bisection width from the family's closed form, summed over planes; `None` when no closed
    /// form gives a balanced cut (then [`Self::bisection_cut_by_id`] is used).
    ///
    /// - k-ary n-cube with the largest radix k_max even: cut every ring of that dimension in two
    ///   places, 2·R/k_max links (R routers); 2·k^(n−1) for equal k (D&T §3.3: B_C = 4k^(n−1)
    ///   channels). Mesh: one place per line, R/k_max.
    /// - Binary n-cube: 2^(n−1) links, one per router pair across the top-bit cut (D&T §3.3).
    /// - k-ary n-tree, k even: full bisection, k^n/2 links (N/2; D&T §9.2, Petrini & Vanneschi).
    ///   A single switch (n = 1) has no router links: 0.
    /// - Leaf–spine with an even number of leaves: half the leaves on each side, each spine on
    ///   either side cuts its links to the other half: leaves·spines·links_per_spine/2.
    /// - Generalized fat tree: the same per plane, plus `sibling_links` when leaves/2 is odd
    ///   (one sibling pair must be split); times `planes`.
    /// - Crossbar (one router): 0, no router–router links.
    /// - Dragonfly with even g: global links between groups 0..g/2 and g/2..g, counted on the
    ///   graph; (g/2)² when g = a·h+1 (one link per group pair). This is the group-level cut used
    ///   by Kim et al. (2008); it is not proven minimal for every (a, h, g).
    ///
    /// The two-level formulas describe the fully populated switch, even when `nodes` leaves some
    /// slots empty.
    pub fn bisection_formula(&self) -> Option<u64> {
        let u = u64::from;
        match &self.shape {
            Shape::Torus { k, wrap, .. } => {
                let kmax = u(*k.iter().max()?);
                let routers = self.routers.len() as u64;
                (kmax % 2 == 0).then(|| if *wrap { 2 * routers / kmax } else { routers / kmax })
            }
            Shape::Hypercube { n, .. } => Some(1 << (n - 1)),
            Shape::FatTree { k, n } => match (k % 2, n) {
                (_, 1) => Some(0),
                (0, _) => Some(u(*k).pow(*n) / 2),
                _ => None,
            },
            Shape::LeafSpine {
                leaves,
                spines,
                links_per_spine,
                ..
            } => (leaves % 2 == 0).then(|| u(*leaves) * u(*spines) * u(*links_per_spine) / 2),
            Shape::GeneralizedFatTree {
                planes,
                leaves,
                spines,
                sibling_links,
                ..
            } => {
                let split_pair = if leaves % 4 == 2 { u(*sibling_links) } else { 0 };
                (leaves % 2 == 0).then(|| u(*planes) * (u(*leaves) * u(*spines) / 2 + split_pair))
            }
            Shape::Dragonfly { a, g, .. } => (g % 2 == 0).then(|| {
                let half = g / 2 * a; // routers of the first g/2 groups
                self.links().filter(|l| (l.a.0 .0 < half) != (l.b.0 .0 < half)).count() as u64
            }),
            // One router: no router–router link to cut (as the single-switch fat tree).
            Shape::Crossbar { .. } => Some(0),
        }
    }

    /// Links cut by a partition built in router-id order, summed over planes. Routers with nodes
    /// go to side A, in id order, while the router's midpoint node stays in the first half; the
    /// rest go to B. Routers without nodes (spines, upper tree levels) are then placed in id order
    /// on the side holding more of their already placed neighbours (ties alternate), which keeps
    /// the bound tight for trees. Any such partition bounds the bisection from above.
    pub fn bisection_cut_by_id(&self) -> u64 {
        let mut side_a = vec![false; self.routers.len()];
        let mut placed = vec![false; self.routers.len()];
        let mut cut = 0;
        for plane in 0..self.rails {
            let mut weight = vec![0u64; self.routers.len()];
            for node in &self.nodes {
                weight[node.ports[usize::from(plane)].0.index()] += 1;
            }
            let total = self.nodes.len() as u64;
            let in_plane: Vec<usize> = (0..self.routers.len())
                .filter(|&r| self.routers[r].plane == plane)
                .collect();
            let (mut acc, mut prefix_open) = (0, true);
            for &r in in_plane.iter().filter(|&&r| weight[r] > 0) {
                prefix_open &= 2 * acc + weight[r] <= total;
                side_a[r] = prefix_open;
                acc += if prefix_open { weight[r] } else { 0 };
                placed[r] = true;
            }
            let mut balance = 0i64; // node-less routers in A minus in B
            for &r in in_plane.iter().filter(|&&r| weight[r] == 0) {
                let mut votes = 0i64;
                for peer in &self.routers[r].ports {
                    if let Peer::Router { router, .. } = *peer {
                        if placed[router.index()] {
                            votes += if side_a[router.index()] { 1 } else { -1 };
                        }
                    }
                }
                side_a[r] = votes > 0 || (votes == 0 && balance <= 0);
                balance += if side_a[r] { 1 } else { -1 };
                placed[r] = true;
            }
            cut += self
                .links()
                .filter(|l| self.routers[l.a.0.index()].plane == plane)
                .filter(|l| side_a[l.a.0.index()] != side_a[l.b.0.index()])
                .count() as u64;
        }
        cut
    }
}
