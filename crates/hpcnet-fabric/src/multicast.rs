//! Router multicast: the multicast routing tables of every router input port, and how a
//! group's tables are computed from the topology (spec 01 SWHRC: "per port 32 multicast routing
//! tables, each replicating to any subset of the 40 ports"; hardware collectives: "routers
//! replicate [the broadcast] along pre-configured multicast chains").
//!
//! A table is a (group, port bitmask) pair held by one input port; each input port holds at most
//! `router.multicast_tables` of them. A multicast packet ([`crate::Packet::multicast`]) arriving
//! on an input port is copied to every port of its group's table there (see [`crate::net`]: the
//! copies leave one after another through the usual arbitration, each taking credits on its own
//! output like any packet; the input buffer is freed when the last copy has left).
//!
//! [`crate::Network::program_multicast`] is the only way tables are written: it computes a
//! spanning tree of one rail's plane by breadth-first search from the router the root node is
//! cabled to (shortest paths over live router links; neighbours are visited in port order
//! rotated by the group number, so different groups spread over different spines), prunes it to
//! the routers leading to member nodes, and writes one table per router of the tree (at the
//! input port the tree enters it by; at the root router, the root node's port). A group whose
//! tables do not fit is refused as a whole with [`MulticastError::TableFull`]; nothing is
//! written then.
//!
//! Cost: programming is O(routers + router ports) per group (the search), lookups scan the at
//! most `multicast_tables` entries of one port, once per multicast packet per router.

use crate::topology::{NodeId, Peer, PortIdx, RouterId, Topology};
use serde::Serialize;

/// Why a group's multicast tables could not be programmed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MulticastError {
    #[error(
        "multicast group {group}: input port {port} of router {router} already holds its {capacity} multicast tables (router.multicast_tables)"
    )]
    TableFull {
        group: u32,
        router: RouterId,
        port: PortIdx,
        capacity: u32,
    },
    #[error("multicast group {group}: router {router} has {ports} ports; a table holds at most 64")]
    TooManyPorts { group: u32, router: RouterId, ports: usize },
    #[error("multicast group {group}: node {node} is not reachable on rail {rail}")]
    Unreachable { group: u32, node: NodeId, rail: u8 },
    #[error("multicast group {group}: node {node} does not exist (the fabric has {nodes} nodes)")]
    NoSuchNode { group: u32, node: NodeId, nodes: usize },
    #[error("multicast group {group}: rail {rail} does not exist (the fabric has {rails} rails)")]
    NoSuchRail { group: u32, rail: u8, rails: u8 },
    #[error(
        "multicast group {group}: multicast is not modelled under link.switching = \"wormhole\" (use \"cut_through\")"
    )]
    Unsupported { group: u32 },
}

/// The tables written for one group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MulticastRoute {
    pub group: u32,
    pub rail: u8,
    pub root: NodeId,
    /// (router, input port, output port mask), one per router of the tree, in router order.
    pub tables: Vec<(RouterId, PortIdx, u64)>,
    /// Member nodes the tree reaches (the root excluded), in node order.
    pub reached: Vec<NodeId>,
}

/// The multicast tables of every router input port.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tables {
    /// Per global router port: (group, output mask).
    per_port: Vec<Vec<(u32, u64)>>,
    capacity: u32,
}

impl Tables {
    pub(crate) fn new(ports: usize, capacity: u32) -> Tables {
        Tables {
            per_port: vec![Vec::new(); ports],
            capacity,
        }
    }

    /// The output mask of `group` at global input port `gport`.
    #[inline]
    pub(crate) fn lookup(&self, gport: u32, group: u32) -> Option<u64> {
        self.per_port[gport as usize].iter().find(|e| e.0 == group).map(|e| e.1)
    }

    /// Tables in use at global input port `gport`.
    pub(crate) fn used(&self, gport: u32) -> usize {
        self.per_port[gport as usize].len()
    }

    /// Remove every table of `group`.
    pub(crate) fn clear(&mut self, group: u32) {
        for v in &mut self.per_port {
            v.retain(|e| e.0 != group);
        }
    }

    /// Compute and write the tables of `group` (see the module documentation). `port_base`
    /// gives each router's first global port; `live(r, p)` whether a router port is usable.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn program(
        &mut self,
        topo: &Topology,
        port_base: &[u32],
        attach: impl Fn(NodeId, u8) -> (RouterId, PortIdx),
        live: impl Fn(RouterId, PortIdx) -> bool,
        group: u32,
        rail: u8,
        root: NodeId,
        members: &[NodeId],
    ) -> Result<MulticastRoute, MulticastError> {
        let nodes = topo.nodes.len();
        let rails = topo.rails.max(1);
        if rail >= rails {
            return Err(MulticastError::NoSuchRail { group, rail, rails });
        }
        for &n in members.iter().chain([&root]) {
            if n.index() >= nodes {
                return Err(MulticastError::NoSuchNode { group, node: n, nodes });
            }
        }
        let (rr, rport) = attach(root, rail);
        if !live(rr, rport) {
            return Err(MulticastError::Unreachable {
                group,
                node: root,
                rail,
            });
        }
        // Breadth-first search from the root's router: parent edge of every router reached.
        let nr = topo.routers.len();
        let mut parent: Vec<Option<(RouterId, PortIdx, PortIdx)>> = vec![None; nr];
        let mut seen = vec![false; nr];
        seen[rr.index()] = true;
        let mut queue = std::collections::VecDeque::from([rr]);
        while let Some(u) = queue.pop_front() {
            let ports = &topo.routers[u.index()].ports;
            let k = ports.len();
            for i in 0..k {
                let p = (i + group as usize) % k;
                if let Peer::Router { router: v, port: pv } = ports[p] {
                    let pu = PortIdx(p as u16);
                    if !seen[v.index()] && live(u, pu) {
                        seen[v.index()] = true;
                        parent[v.index()] = Some((u, pu, pv));
                        queue.push_back(v);
                    }
                }
            }
        }
        // Prune to the routers leading to members; collect each router's output mask.
        let mut mask = vec![0u64; nr];
        let mut needed = vec![false; nr];
        needed[rr.index()] = true;
        let mut reached: Vec<NodeId> = members.iter().copied().filter(|&n| n != root).collect();
        reached.sort_unstable();
        reached.dedup();
        let bit = |r: RouterId, p: PortIdx| -> Result<u64, MulticastError> {
            let ports = topo.routers[r.index()].ports.len();
            if ports > 64 {
                return Err(MulticastError::TooManyPorts {
                    group,
                    router: r,
                    ports,
                });
            }
            Ok(1u64 << p.0)
        };
        for &n in &reached {
            let (r, p) = attach(n, rail);
            if !seen[r.index()] || !live(r, p) {
                return Err(MulticastError::Unreachable { group, node: n, rail });
            }
            mask[r.index()] |= bit(r, p)?;
            let mut v = r;
            while !needed[v.index()] {
                needed[v.index()] = true;
                let (u, pu, _) = parent[v.index()].expect("a reached router other than the root has a parent");
                mask[u.index()] |= bit(u, pu)?;
                v = u;
            }
        }
        let mut tables = Vec::new();
        for r in 0..nr {
            if !needed[r] || mask[r] == 0 {
                continue;
            }
            let in_port = match parent[r] {
                Some((_, _, pv)) => pv,
                None => rport, // the root's router: entered from the root node
            };
            tables.push((RouterId(r as u32), in_port, mask[r]));
        }
        // All or nothing: check capacity first.
        for &(r, p, _) in &tables {
            let g = port_base[r.index()] + p.0 as u32;
            if self.lookup(g, group).is_none() && self.used(g) >= self.capacity as usize {
                return Err(MulticastError::TableFull {
                    group,
                    router: r,
                    port: p,
                    capacity: self.capacity,
                });
            }
        }
        self.clear(group);
        for &(r, p, m) in &tables {
            self.per_port[(port_base[r.index()] + p.0 as u32) as usize].push((group, m));
        }
        Ok(MulticastRoute {
            group,
            rail,
            root,
            tables,
            reached,
        })
    }
}
