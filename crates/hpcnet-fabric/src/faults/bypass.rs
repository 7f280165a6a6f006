//! The NICEVT torus fault bypass: "non-standard first and last step" routes (spec 03; the
//! Angara router family of the same group calls them First Step / Last Step).
//!
//! A torus router with dimension-order routing has one port per destination, so it cannot skip
//! a dead one. Instead the network interface, whose routing table is per destination (spec 03:
//! "routes between node pairs can be set individually"), gives a pair whose path crosses a
//! failed cable or router another route: an optional **first step** (one hop in any direction,
//! possibly away from the destination), the dimension-order part (each dimension possibly the
//! long way round its ring), and an optional **last step** (one hop into the destination). The
//! management system writes these entries when it rewrites the tables after a failure
//! (`faults.table_update` after detection); packets carry them in their header.
//!
//! **Choice.** For every pair of live routers whose dimension-order path is not live, every
//! combination of first step, last step and one dimension taken the long way is traced over the
//! live cables (those the routers know about); the shortest wins, ties going to a last step
//! alone, then a first and a last step, then the long way round, in dimension and direction
//! order. A pair with none (its destination router failed, or cut off) is unreachable: its
//! packets are dropped at the source and counted.
//!
//! **Deadlock freedom with the bubble rule.** A route is accepted only if its ring hops — the
//! first step and the dimension-order part — visit dimensions in increasing order and keep one
//! direction per dimension (the first step may only be in a dimension below the one the
//! dimension-order part starts with, or continue it). Then every dependency between rings goes
//! from a lower to a higher dimension, exactly as in plain dimension-order routing, and each
//! ring is kept free by the bubble: a packet entering a ring (injection, the first step, a new
//! dimension) needs room for itself plus one maximum-size packet. The last step, which would
//! break the order (it corrects a coordinate the packet left behind), travels on a VC of its
//! own (`faults.torus_bypass` gives each VC class a second VC, `classes + class`), into the
//! destination router where the packet is ejected: a packet in a last-step buffer waits only
//! for its node, which always drains, so last-step buffers lie on no cycle. This is what the
//! reserved VCs buy: a single failed router at a corner of a path (where it changes dimension)
//! cannot be avoided by any route that keeps dimension order, so without a step out of order —
//! and somewhere safe to take it — one failure would cut pairs off.
//!
//! With one failed cable or router (not the source's or destination's) every pair has such a
//! route on a torus whose rings have at least three routers: a failure inside a segment is
//! avoided by the long way round that ring, or by a last step in an earlier dimension that
//! shifts the rest of the path one line over; a failed router at a corner by a last step in the
//! dimension that leads into it.
//!
//! Cost: the broken pairs are found one destination at a time, one step per router (the
//! dimension-order paths to a destination form a tree): O(routers²) per rewrite. Each broken
//! pair traces at most (2n + 1)² (n + 1) candidate routes (n dimensions), each cut off as soon as
//! it is no shorter than the best so far, and none after a route as short as dimension order.
//! Pairs that keep their path have no entry; the table is a hash map from (source router,
//! destination router) to a route shared by all their packets.

use crate::config::TieRule;
use crate::routing::Routing;
use crate::topology::{Peer, PortIdx, RouterId, Topology};
use std::collections::HashMap;
use std::sync::Arc;

/// A route hop's VC is the class's ring VC (0) or its last-step VC (1); bit 7: enters a ring.
const RING: u8 = 0;
const LAST: u8 = 1;
const ENTERS: u8 = 0x80;

/// The table entry of one pair of routers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BypassEntry {
    /// Output port and VC marker of every hop up to the destination router (which ejects).
    Route(Arc<Vec<(PortIdx, u8)>>),
    /// No live route: packets are dropped at the source.
    Unreachable,
}

/// Per-pair bypass routes ([`compute`]).
#[derive(Clone, Debug, Default)]
pub struct BypassTable {
    map: HashMap<(u32, u32), BypassEntry>,
    /// Pairs given a route with a first step, with a last step, taking a ring the long way.
    pub first_steps: u64,
    pub last_steps: u64,
    pub long_way: u64,
    /// Router hops added over the dimension-order paths, summed over rerouted pairs.
    pub extra_hops: u64,
}

impl BypassTable {
    /// The entry of the pair (source router, destination router), if it has one.
    #[inline]
    pub fn get(&self, src: RouterId, dst: RouterId) -> Option<&BypassEntry> {
        self.map.get(&(src.0, dst.0))
    }

    /// Pairs with a route of their own.
    pub fn rerouted(&self) -> usize {
        self.map.values().filter(|e| matches!(e, BypassEntry::Route(_))).count()
    }

    /// Pairs with no live route.
    pub fn unreachable(&self) -> usize {
        self.map
            .values()
            .filter(|e| matches!(e, BypassEntry::Unreachable))
            .count()
    }

    /// Whether any pair has an entry.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// One candidate: first step, dimension taken the long way, last step.
#[derive(Copy, Clone, Debug)]
struct Candidate {
    first: Option<(usize, bool)>,
    flip: Option<usize>,
    last: Option<(usize, bool)>,
}

struct Tracer<'a> {
    routing: &'a Routing,
    topo: &'a Topology,
    tie: TieRule,
    limit: usize,
}

impl Tracer<'_> {
    /// The router one live hop from `r` in dimension `d`, direction `plus`.
    fn step(&self, r: RouterId, d: usize, plus: bool) -> Option<(PortIdx, RouterId)> {
        let port = self.routing.dim_port(d, plus);
        if self.routing.is_dead(r, port) {
            return None;
        }
        match self.topo.routers[r.index()].ports.get(port.index())? {
            Peer::Router { router, .. } => Some((port, *router)),
            _ => None,
        }
    }

    /// Whether the plain dimension-order path to `d` is broken, from every router (`out[s]`).
    /// Dimension-order paths to one destination form a tree (the path from a router on the way
    /// is the rest of the path: it corrects the same dimensions in the same directions), so each
    /// router needs one step: its path is broken if its first hop is dead or the path from the
    /// next router is. O(routers) per destination.
    fn broken_to(&self, d: RouterId, out: &mut [u8], chain: &mut Vec<RouterId>) {
        const UNKNOWN: u8 = 0;
        const LIVE: u8 = 1;
        const BROKEN: u8 = 2;
        out.fill(UNKNOWN);
        out[d.index()] = LIVE;
        for s in 0..out.len() {
            if out[s] != UNKNOWN {
                continue;
            }
            chain.clear();
            let mut cur = RouterId(s as u32);
            // Follow the path until a router whose state is known (or a dead hop).
            let verdict = loop {
                chain.push(cur);
                let Some((dim, plus, _)) = self.routing.dor_step(cur, d, self.tie, 0) else {
                    break LIVE;
                };
                match self.step(cur, dim, plus) {
                    None => break BROKEN,
                    Some((_, next)) => {
                        if out[next.index()] != UNKNOWN {
                            break out[next.index()];
                        }
                        if chain.len() > self.limit {
                            break BROKEN;
                        }
                        cur = next;
                    }
                }
            };
            for r in chain.iter() {
                out[r.index()] = verdict;
            }
        }
    }

    /// Length of the plain dimension-order path (ignoring failures).
    fn dor_len(&self, s: RouterId, d: RouterId) -> usize {
        let mut cur = s;
        let mut n = 0;
        while let Some((dim, plus, _)) = self.routing.dor_step(cur, d, self.tie, 0) {
            let port = self.routing.dim_port(dim, plus);
            let Peer::Router { router, .. } = self.topo.routers[cur.index()].ports[port.index()] else {
                break;
            };
            cur = router;
            n += 1;
            if n > self.limit {
                break;
            }
        }
        n
    }

    /// The hops of candidate `c` from `s` to `d` over live cables, keeping the ring order; None
    /// when a hop is dead, the order is broken, or it would take more than `max` hops.
    fn trace(&self, s: RouterId, d: RouterId, c: Candidate, max: usize) -> Option<Vec<(PortIdx, u8)>> {
        let mut hops = Vec::new();
        let mut cur = s;
        // Ring of the last ring hop: (dimension, direction).
        let mut ring: Option<(usize, bool)> = None;
        if let Some((a, plus)) = c.first {
            let (port, next) = self.step(cur, a, plus)?;
            hops.push((port, RING | ENTERS));
            ring = Some((a, plus));
            cur = next;
        }
        // The router the dimension-order part aims at: the last step's start.
        let target = match c.last {
            Some((b, plus)) => {
                let back = self.routing.dim_port(b, !plus);
                match self.topo.routers[d.index()].ports.get(back.index())? {
                    Peer::Router { router, .. } => *router,
                    _ => return None,
                }
            }
            None => d,
        };
        let mut seg: Option<(usize, bool)> = None;
        while cur != target {
            let (dim, minimal_plus, _) = self.routing.dor_step(cur, target, self.tie, 0)?;
            let plus = match seg {
                Some((sd, sp)) if sd == dim => sp,
                _ if c.flip == Some(dim) => !minimal_plus,
                _ => minimal_plus,
            };
            if let Some((rd, rp)) = ring {
                if dim < rd || (dim == rd && plus != rp) {
                    return None;
                }
            }
            let enters = ring.map(|(rd, _)| rd) != Some(dim);
            let (port, next) = self.step(cur, dim, plus)?;
            hops.push((port, RING | if enters { ENTERS } else { 0 }));
            ring = Some((dim, plus));
            seg = Some((dim, plus));
            cur = next;
            if hops.len() > max.min(self.limit) {
                return None;
            }
        }
        if let Some((b, plus)) = c.last {
            let (port, next) = self.step(cur, b, plus)?;
            if next != d {
                return None;
            }
            hops.push((port, LAST));
        }
        (hops.len() <= max).then_some(hops)
    }
}

/// The candidates in preference order (among routes of equal length the first wins).
fn candidates(n: usize) -> Vec<Candidate> {
    let steps: Vec<(usize, bool)> = (0..n).flat_map(|d| [(d, true), (d, false)]).collect();
    let mut v = Vec::new();
    for &l in &steps {
        v.push(Candidate {
            first: None,
            flip: None,
            last: Some(l),
        });
    }
    for &f in &steps {
        for &l in &steps {
            v.push(Candidate {
                first: Some(f),
                flip: None,
                last: Some(l),
            });
        }
    }
    for d in 0..n {
        v.push(Candidate {
            first: None,
            flip: Some(d),
            last: None,
        });
    }
    for d in 0..n {
        for &l in &steps {
            v.push(Candidate {
                first: None,
                flip: Some(d),
                last: Some(l),
            });
        }
    }
    for d in 0..n {
        for &f in &steps {
            for &l in &steps {
                v.push(Candidate {
                    first: Some(f),
                    flip: Some(d),
                    last: Some(l),
                });
            }
        }
    }
    v
}

/// Whether every dimension port of router `r` is dead (a failed router, as its neighbours know).
fn cut_off(routing: &Routing, topo: &Topology, r: RouterId, n: usize) -> bool {
    (0..n)
        .flat_map(|d| [true, false].map(|p| routing.dim_port(d, p)))
        .filter(|p| matches!(topo.routers[r.index()].ports.get(p.index()), Some(Peer::Router { .. })))
        .all(|p| routing.is_dead(r, p))
}

/// The bypass table of a torus with the ports `routing` knows to be dead. Pairs whose
/// dimension-order path is live get no entry.
pub fn compute(routing: &Routing, topo: &Topology) -> BypassTable {
    let mut table = BypassTable::default();
    let (n, ring_sum) = match &topo.shape {
        crate::topology::Shape::Torus { k, .. } => (k.len(), k.iter().map(|&k| k as usize).sum::<usize>()),
        _ => return table,
    };
    let Some(tie) = routing.dor_tie() else { return table };
    let tracer = Tracer {
        routing,
        topo,
        tie,
        limit: 2 * ring_sum + 4,
    };
    if routing.dead_ports() == 0 {
        return table;
    }
    let cands = candidates(n);
    let nr = topo.routers.len() as u32;
    let isolated: Vec<bool> = (0..nr).map(|r| cut_off(routing, topo, RouterId(r), n)).collect();
    let mut broken = vec![0u8; nr as usize];
    let mut chain = Vec::new();
    for d in (0..nr).map(RouterId) {
        tracer.broken_to(d, &mut broken, &mut chain);
        for s in (0..nr).map(RouterId) {
            if d == s || broken[s.index()] != 2 || isolated[s.index()] {
                continue; // live path, or a source that cannot send at all
            }
            if isolated[d.index()] {
                table.map.insert((s.0, d.0), BypassEntry::Unreachable);
                continue;
            }
            // No route is shorter than dimension order: once one as short is found, the
            // candidates after it cannot win.
            let shortest = tracer.dor_len(s, d);
            let mut best: Option<(Vec<(PortIdx, u8)>, Candidate)> = None;
            for &c in &cands {
                let max = best.as_ref().map_or(usize::MAX, |(b, _)| b.len() - 1);
                if let Some(h) = tracer.trace(s, d, c, max) {
                    best = Some((h, c));
                    if best.as_ref().is_some_and(|(b, _)| b.len() == shortest) {
                        break;
                    }
                }
            }
            let entry = match best {
                Some((hops, c)) => {
                    table.first_steps += u64::from(c.first.is_some());
                    table.last_steps += u64::from(c.last.is_some());
                    table.long_way += u64::from(c.flip.is_some());
                    table.extra_hops += hops.len().saturating_sub(tracer.dor_len(s, d)) as u64;
                    BypassEntry::Route(Arc::new(hops))
                }
                None => BypassEntry::Unreachable,
            };
            table.map.insert((s.0, d.0), entry);
        }
    }
    table
}
