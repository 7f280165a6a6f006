//! Up*/down* tables recomputed on the live tree (spec 01, "Reliability": route-table
//! reconstruction).
//!
//! Before reconstruction a deterministic table router takes the first *live* port of its entry
//! (spec 01: this "keeps packets flowing around some failed links before tables are
//! rewritten"), but it cannot know what lies beyond the next router: a leaf may still send a
//! packet to a spine whose down link to the destination leaf is dead, where it is dropped (plain
//! fat tree) or detoured through the sibling leaf (generalized fat tree). The recomputed tables
//! know the whole live tree: an entry keeps only the ports toward routers that still reach the
//! destination leaf, preferring direct up*/down* paths to the sibling bypass.
//!
//! The tables are three bit sets per router, one bit per leaf (routers × leaves bits each):
//! - `below`: leaves the router reaches going down only, over live cables;
//! - `reach`: leaves it reaches by up*/down* (up any number of live hops, then down);
//! - `reach_sib`: the same, allowing a last hop across a live sibling cable (generalized fat
//!   tree); and `below_sib`, going down then across such a cable.
//!
//! Cost: one pass over every router's ports per set, O(ports × leaves / 64) words; memory
//! 4 × routers × leaves bits (Sunway prototype: 100 routers × 64 leaves, 3.2 KB).

use crate::topology::{Peer, PortIdx, PortKind, RouterId, Topology};

/// The recomputed tables of one tree ([`compute`]).
#[derive(Clone, Debug)]
pub struct TreeTables {
    words: usize,
    below: Vec<u64>,
    below_sib: Vec<u64>,
    reach: Vec<u64>,
    reach_sib: Vec<u64>,
}

impl TreeTables {
    #[inline]
    fn bit(&self, set: &[u64], r: RouterId, leaf: usize) -> bool {
        set[r.index() * self.words + leaf / 64] >> (leaf % 64) & 1 == 1
    }

    /// Router `r` reaches leaf number `leaf` going down only.
    #[inline]
    pub fn below(&self, r: RouterId, leaf: usize) -> bool {
        self.bit(&self.below, r, leaf)
    }

    /// Router `r` reaches leaf number `leaf` going down, then across a live sibling cable.
    #[inline]
    pub fn below_via_sibling(&self, r: RouterId, leaf: usize) -> bool {
        self.bit(&self.below_sib, r, leaf)
    }

    /// Router `r` reaches leaf number `leaf` by up*/down* over live cables.
    #[inline]
    pub fn reaches(&self, r: RouterId, leaf: usize) -> bool {
        self.bit(&self.reach, r, leaf)
    }

    /// Router `r` reaches leaf number `leaf` by up*/down*, possibly ending across a sibling cable.
    #[inline]
    pub fn reaches_via_sibling(&self, r: RouterId, leaf: usize) -> bool {
        self.bit(&self.reach_sib, r, leaf)
    }
}

/// Leaves (routers with a terminal port) in router order, as the routing numbers them.
fn leaves(topo: &Topology) -> (Vec<u32>, Vec<RouterId>) {
    let mut leaf_of = vec![u32::MAX; topo.routers.len()];
    let mut leaf_router = Vec::new();
    for (i, r) in topo.routers.iter().enumerate() {
        if r.kinds.contains(&PortKind::Terminal) {
            leaf_of[i] = leaf_router.len() as u32;
            leaf_router.push(RouterId(i as u32));
        }
    }
    (leaf_of, leaf_router)
}

/// The tables of `topo` with the ports `dead` reports (as the routers know them) left out.
pub fn compute(topo: &Topology, dead: impl Fn(RouterId, PortIdx) -> bool) -> TreeTables {
    let nr = topo.routers.len();
    let (leaf_of, leaf_router) = leaves(topo);
    let words = leaf_router.len().div_ceil(64).max(1);
    // Live neighbours of each router by port kind.
    let live = |r: usize, kind: PortKind| -> Vec<usize> {
        let info = &topo.routers[r];
        info.kinds
            .iter()
            .enumerate()
            .filter(|(p, k)| **k == kind && !dead(RouterId(r as u32), PortIdx(*p as u16)))
            .filter_map(|(p, _)| match info.ports[p] {
                Peer::Router { router, .. } => Some(router.index()),
                _ => None,
            })
            .collect()
    };
    let downs: Vec<Vec<usize>> = (0..nr).map(|r| live(r, PortKind::Down)).collect();
    let ups: Vec<Vec<usize>> = (0..nr).map(|r| live(r, PortKind::Up)).collect();
    // below: memoised over the (acyclic) down graph.
    let mut below = vec![0u64; nr * words];
    let mut done = vec![false; nr];
    fn down_visit(r: usize, words: usize, leaf_of: &[u32], downs: &[Vec<usize>], below: &mut [u64], done: &mut [bool]) {
        if done[r] {
            return;
        }
        done[r] = true;
        if leaf_of[r] != u32::MAX {
            let l = leaf_of[r] as usize;
            below[r * words + l / 64] |= 1 << (l % 64);
        }
        for &c in &downs[r] {
            down_visit(c, words, leaf_of, downs, below, done);
            for w in 0..words {
                below[r * words + w] |= below[c * words + w];
            }
        }
    }
    for r in 0..nr {
        down_visit(r, words, &leaf_of, &downs, &mut below, &mut done);
    }
    // The leaves reached across a live sibling cable from each leaf's sibling: sib_of[l] is the
    // leaf on the other side of leaf l's live sibling cables.
    let mut across = vec![0u64; nr * words];
    for (l, &lr) in leaf_router.iter().enumerate() {
        for s in live(lr.index(), PortKind::Sibling) {
            // Leaf router s delivers to leaf l across the cable.
            across[s * words + l / 64] |= 1 << (l % 64);
        }
    }
    // below_sib[r]: below[r] plus the leaves one sibling hop from a leaf below r.
    let mut below_sib = below.clone();
    for r in 0..nr {
        for (l, &lr) in leaf_router.iter().enumerate() {
            if below[r * words + l / 64] >> (l % 64) & 1 == 1 {
                for w in 0..words {
                    below_sib[r * words + w] |= across[lr.index() * words + w];
                }
            }
        }
    }
    // reach / reach_sib: memoised over the (acyclic) up graph.
    fn up_visit(r: usize, words: usize, ups: &[Vec<usize>], base: &[u64], out: &mut [u64], done: &mut [bool]) {
        if done[r] {
            return;
        }
        done[r] = true;
        for w in 0..words {
            out[r * words + w] = base[r * words + w];
        }
        for &q in &ups[r] {
            up_visit(q, words, ups, base, out, done);
            for w in 0..words {
                out[r * words + w] |= out[q * words + w];
            }
        }
    }
    let mut reach = vec![0u64; nr * words];
    let mut done = vec![false; nr];
    for r in 0..nr {
        up_visit(r, words, &ups, &below, &mut reach, &mut done);
    }
    let mut reach_sib = vec![0u64; nr * words];
    let mut done = vec![false; nr];
    for r in 0..nr {
        up_visit(r, words, &ups, &below_sib, &mut reach_sib, &mut done);
    }
    TreeTables {
        words,
        below,
        below_sib,
        reach,
        reach_sib,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{build, GeneralizedFatTreeConfig, TopologyConfig};

    /// One plane of 4 leaves × 2 spines, 2 nodes per leaf, 2 sibling cables per pair.
    fn gft() -> Topology {
        build(&TopologyConfig::GeneralizedFatTree(GeneralizedFatTreeConfig {
            planes: 1,
            leaves: 4,
            spines: 2,
            nodes_per_leaf: 2,
            sibling_links: 2,
            nodes: None,
            radix: None,
        }))
        .unwrap()
    }

    #[test]
    fn a_dead_down_cable_removes_the_leaf_from_that_spine_only() {
        let t = gft();
        // Routers 0..4 are leaves, 4 and 5 spines; spine 4's port 1 goes down to leaf 1.
        let spine = RouterId(4);
        let Peer::Router { router: leaf, port } = t.routers[4].ports[1] else {
            panic!("spine port 1 is cabled to a leaf")
        };
        assert_eq!(leaf, RouterId(1));
        let dead = [(spine, PortIdx(1)), (leaf, port)];
        let tb = compute(&t, |r, p| dead.contains(&(r, p)));
        assert!(!tb.below(spine, 1) && tb.below(spine, 0) && tb.below(RouterId(5), 1));
        // Leaf 0 still reaches leaf 1 (through spine 5, or across its sibling cable).
        assert!(tb.reaches(RouterId(0), 1));
        assert!(!tb.reaches(spine, 1));
        // Spine 4 reaches leaf 1 through leaf 0 and the sibling cable 0–1.
        assert!(tb.reaches_via_sibling(spine, 1));
        let healthy = compute(&t, |_, _| false);
        for r in 0..6 {
            for l in 0..4 {
                assert!(healthy.reaches(RouterId(r), l));
            }
        }
    }

    #[test]
    fn a_leaf_cut_off_from_every_spine_is_reached_only_across_its_sibling() {
        let t = gft();
        let leaf = RouterId(3);
        let dead: Vec<(RouterId, PortIdx)> = t.routers[3]
            .kinds
            .iter()
            .enumerate()
            .filter(|(_, k)| **k == PortKind::Up)
            .flat_map(|(p, _)| {
                let Peer::Router { router, port } = t.routers[3].ports[p] else {
                    unreachable!()
                };
                [(leaf, PortIdx(p as u16)), (router, port)]
            })
            .collect();
        let tb = compute(&t, |r, p| dead.contains(&(r, p)));
        for r in [0, 1, 2, 4, 5] {
            assert!(!tb.reaches(RouterId(r), 3), "router {r}");
            assert!(tb.reaches_via_sibling(RouterId(r), 3), "router {r}");
        }
        // Leaf 2 is leaf 3's sibling, one hop across the cable; a spine gets there through leaf 2,
        // leaf 0 does not (it is above nothing).
        assert!(tb.below_via_sibling(RouterId(2), 3) && tb.below_via_sibling(RouterId(4), 3));
        assert!(!tb.below_via_sibling(RouterId(0), 3));
    }
}
