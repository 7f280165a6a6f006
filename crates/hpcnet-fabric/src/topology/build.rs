//! Construction of each topology family from its configuration.
//!
//! Numbering conventions shared by all families: the nodes attached to one router are
//! consecutive (node = router × nodes-per-router + slot for direct networks), and a router's
//! ports are laid out in a fixed order so routing can compute port numbers arithmetically.

use super::config::{
    CrossbarConfig, DragonflyConfig, FatTreeConfig, GeneralizedFatTreeConfig, GridConfig, HypercubeConfig,
    LeafSpineConfig, TopologyConfig,
};
use super::{NodeId, NodeInfo, Peer, PortIdx, PortKind, RouterId, RouterInfo, Shape, Topology, TopologyError};

/// Largest number of routers or nodes a topology may have: far above the 200k-endpoint target,
/// far below what would exhaust memory before we could report a clear error.
pub const MAX_ELEMENTS: u64 = 1 << 24;

/// Builds the topology described by `cfg` and validates it.
pub fn build(cfg: &TopologyConfig) -> Result<Topology, TopologyError> {
    let topo = match cfg {
        TopologyConfig::Torus(c) => grid(c, true)?,
        TopologyConfig::Mesh(c) => grid(c, false)?,
        TopologyConfig::Hypercube(c) => hypercube(c)?,
        TopologyConfig::FatTree(c) => fat_tree(c)?,
        TopologyConfig::LeafSpine(c) => leaf_spine(c)?,
        TopologyConfig::GeneralizedFatTree(c) => generalized_fat_tree(c)?,
        TopologyConfig::Dragonfly(c) => dragonfly(c)?,
        TopologyConfig::Crossbar(c) => crossbar(c)?,
    };
    topo.validate()?;
    Ok(topo)
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> TopologyError {
    TopologyError::Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}

fn at_least(key: &str, value: u32, min: u32) -> Result<(), TopologyError> {
    if value < min {
        return Err(invalid(
            format!("topology.{key}"),
            format!("must be at least {min}, got {value}"),
        ));
    }
    Ok(())
}

/// Checks a router or node count against [`MAX_ELEMENTS`].
fn count(key: &str, what: &str, value: u64) -> Result<u32, TopologyError> {
    if value > MAX_ELEMENTS {
        return Err(invalid(
            format!("topology.{key}"),
            format!("gives {value} {what}, more than the limit of {MAX_ELEMENTS}"),
        ));
    }
    Ok(value as u32)
}

/// Port demand of one router role, for the radix check.
struct Need {
    role: &'static str,
    ports: u64,
    detail: String,
}

/// Resolves the chip radix (`configured`, else `default`, else the largest need) and checks that
/// every role fits.
fn radix(configured: Option<u16>, default: Option<u16>, needs: &[Need]) -> Result<u16, TopologyError> {
    let largest = needs.iter().map(|n| n.ports).max().unwrap_or(0);
    let radix = match configured.or(default) {
        Some(r) => r,
        None => u16::try_from(largest).map_err(|_| {
            invalid(
                "topology.radix",
                format!("routers need {largest} ports, more than {}", u16::MAX),
            )
        })?,
    };
    if let Some(n) = needs.iter().find(|n| n.ports > u64::from(radix)) {
        return Err(TopologyError::RadixExceeded {
            role: n.role,
            needed: n.ports,
            detail: n.detail.clone(),
            radix,
        });
    }
    Ok(radix)
}

/// Accumulates routers and nodes; ports start uncabled.
struct Builder {
    routers: Vec<RouterInfo>,
    nodes: Vec<NodeInfo>,
    rails: u8,
}

impl Builder {
    fn new(nodes: u32, rails: u8) -> Self {
        let unattached = NodeInfo {
            ports: vec![(RouterId(u32::MAX), PortIdx(0)); rails as usize],
        };
        Self {
            routers: Vec::new(),
            nodes: vec![unattached; nodes as usize],
            rails,
        }
    }

    fn router(&mut self, ports: u64, radix: u16, coords: Vec<u32>, plane: u8) -> RouterId {
        let ports = ports as usize; // fits: checked against the u16 radix
        self.routers.push(RouterInfo {
            radix,
            ports: vec![Peer::None; ports],
            kinds: vec![PortKind::Unused; ports],
            coords,
            plane,
        });
        RouterId((self.routers.len() - 1) as u32)
    }

    fn set(&mut self, r: RouterId, p: u64, peer: Peer, kind: PortKind) {
        let router = &mut self.routers[r.index()];
        router.ports[p as usize] = peer;
        router.kinds[p as usize] = kind;
    }

    /// Cables port `pa` of router `a` to port `pb` of router `b`. The family builders number
    /// routers, nodes and ports arithmetically; the numbers become ids here.
    fn link(&mut self, (a, pa, ka): (u32, u64, PortKind), (b, pb, kb): (u32, u64, PortKind)) {
        let (a, b) = (RouterId(a), RouterId(b));
        self.set(
            a,
            pa,
            Peer::Router {
                router: b,
                port: PortIdx(pb as u16),
            },
            ka,
        );
        self.set(
            b,
            pb,
            Peer::Router {
                router: a,
                port: PortIdx(pa as u16),
            },
            kb,
        );
    }

    /// Cables rail `rail` of `node` to port `p` of router `r`.
    fn attach(&mut self, node: u32, rail: u8, r: u32, p: u64) {
        let (node, r) = (NodeId(node), RouterId(r));
        self.set(r, p, Peer::Node { node, rail }, PortKind::Terminal);
        self.nodes[node.index()].ports[rail as usize] = (r, PortIdx(p as u16));
    }

    fn finish(self, name: String, shape: Shape) -> Topology {
        Topology {
            name,
            shape,
            routers: self.routers,
            nodes: self.nodes,
            rails: self.rails,
        }
    }
}

/// Torus (`wrap`) or mesh. Router id = Σ coord[d]·Π k[0..d]; port 2d goes to +d, 2d+1 to −d,
/// then `concentration` terminal ports. Mesh edge ports stay uncabled so numbering is regular;
/// a 2-ary torus dimension gets two parallel links between the same pair of routers.
fn grid(c: &GridConfig, wrap: bool) -> Result<Topology, TopologyError> {
    if c.k.is_empty() {
        return Err(invalid("topology.k", "must have at least one dimension"));
    }
    if c.k.len() > 127 {
        return Err(invalid(
            "topology.k",
            format!("has {} dimensions, at most 127 supported", c.k.len()),
        ));
    }
    for (d, &k) in c.k.iter().enumerate() {
        at_least(&format!("k[{d}]"), k, 2)?;
    }
    at_least("concentration", c.concentration, 1)?;
    let mut routers = 1u64;
    for &k in &c.k {
        routers = routers.saturating_mul(u64::from(k));
    }
    let routers = count("k", "routers", routers)?;
    let conc = c.concentration;
    let nodes = count("concentration", "nodes", u64::from(routers) * u64::from(conc))?;
    let n = c.k.len() as u64;
    let ports = 2 * n + u64::from(conc);
    let radix = radix(
        c.radix,
        None,
        &[Need {
            role: "router",
            ports,
            detail: format!("{} link ports + {conc} nodes", 2 * n),
        }],
    )?;

    let mut b = Builder::new(nodes, 1);
    let mut strides = Vec::with_capacity(c.k.len());
    let mut stride = 1u32;
    for &k in &c.k {
        strides.push(stride);
        stride *= k;
    }
    for r in 0..routers {
        let coords = c.k.iter().zip(&strides).map(|(&k, &s)| r / s % k).collect();
        b.router(ports, radix, coords, 0);
    }
    for r in 0..routers {
        for (d, (&k, &s)) in c.k.iter().zip(&strides).enumerate() {
            let x = r / s % k;
            let next = if x + 1 < k {
                r + s
            } else if wrap {
                r - x * s
            } else {
                continue;
            };
            let d8 = d as u8;
            let d2 = 2 * d as u64;
            b.link(
                (r, d2, PortKind::Dim { dim: d8, plus: true }),
                (next, d2 + 1, PortKind::Dim { dim: d8, plus: false }),
            );
        }
        for i in 0..conc {
            b.attach(r * conc + i, 0, r, 2 * n + u64::from(i));
        }
    }
    let dims: Vec<String> = c.k.iter().map(u32::to_string).collect();
    let name = format!("{} {}", if wrap { "torus" } else { "mesh" }, dims.join("x"));
    Ok(b.finish(
        name,
        Shape::Torus {
            k: c.k.clone(),
            wrap,
            conc,
        },
    ))
}

/// Binary n-cube: port d flips bit d of the router id, then `concentration` terminal ports.
fn hypercube(c: &HypercubeConfig) -> Result<Topology, TopologyError> {
    at_least("n", c.n, 1)?;
    if c.n > 24 {
        return Err(invalid("topology.n", format!("must be at most 24, got {}", c.n)));
    }
    at_least("concentration", c.concentration, 1)?;
    let routers = 1u32 << c.n;
    let conc = c.concentration;
    let nodes = count("concentration", "nodes", u64::from(routers) * u64::from(conc))?;
    let n = u64::from(c.n);
    let ports = n + u64::from(conc);
    let radix = radix(
        c.radix,
        None,
        &[Need {
            role: "router",
            ports,
            detail: format!("{n} link ports + {conc} nodes"),
        }],
    )?;

    let mut b = Builder::new(nodes, 1);
    for r in 0..routers {
        b.router(ports, radix, (0..c.n).map(|d| r >> d & 1).collect(), 0);
    }
    for r in 0..routers {
        for d in 0..c.n {
            if r >> d & 1 == 0 {
                let dim = d as u8;
                b.link(
                    (r, u64::from(d), PortKind::Dim { dim, plus: true }),
                    (r | 1 << d, u64::from(d), PortKind::Dim { dim, plus: false }),
                );
            }
        }
        for i in 0..conc {
            b.attach(r * conc + i, 0, r, n + u64::from(i));
        }
    }
    Ok(b.finish(format!("hypercube n={}", c.n), Shape::Hypercube { n: c.n, conc }))
}

/// k-ary n-tree (Petrini & Vanneschi, 1997). Level 0 holds the leaves, level n−1 the roots;
/// router id = level·k^(n−1) + w, coords (level, w). Ports 0..k go down, k..2k up. Writing w in
/// base k (digit 0 least significant), up port j of switch w at level l reaches the level-(l+1)
/// switch equal to w with digit l set to j, arriving on its down port (digit l of w). Node x sits
/// on leaf x/k, port x mod k. Roots keep their up ports uncabled.
fn fat_tree(c: &FatTreeConfig) -> Result<Topology, TopologyError> {
    at_least("k", c.k, 2)?;
    at_least("n", c.n, 1)?;
    let (k, n) = (c.k, c.n);
    let per_level = count("n", "switches per level", u64::from(k).saturating_pow(n - 1))?;
    let nodes = count("n", "nodes", u64::from(per_level) * u64::from(k))?;
    count("n", "switches", u64::from(per_level) * u64::from(n))?;
    let ports = 2 * u64::from(k);
    let radix = radix(
        c.radix,
        None,
        &[Need {
            role: "switch",
            ports,
            detail: format!("{k} down + {k} up"),
        }],
    )?;

    let mut b = Builder::new(nodes, 1);
    for level in 0..n {
        for w in 0..per_level {
            b.router(ports, radix, vec![level, w], 0);
        }
    }
    let mut weight = 1; // k^level
    for level in 0..n - 1 {
        for w in 0..per_level {
            let digit = w / weight % k;
            let lower = level * per_level + w;
            for j in 0..k {
                let upper = (level + 1) * per_level + w - digit * weight + j * weight;
                b.link(
                    (lower, u64::from(k + j), PortKind::Up),
                    (upper, u64::from(digit), PortKind::Down),
                );
            }
        }
        weight *= k;
    }
    for x in 0..nodes {
        b.attach(x, 0, x / k, u64::from(x % k));
    }
    Ok(b.finish(format!("fat_tree k={k} n={n}"), Shape::FatTree { k, n }))
}

/// Parameters shared by the leaf–spine and the generalized fat tree.
struct TwoLevel {
    planes: u32,
    leaves: u32,
    spines: u32,
    nodes_per_leaf: u32,
    links_per_spine: u32,
    sibling_links: u32,
    nodes: Option<u32>,
}

/// Per plane, routers `leaves` then `spines` (plane offset = plane·(leaves+spines)); coords
/// (plane, level, index) with level 0 = leaf. Leaf ports: `nodes_per_leaf` terminals, then
/// `links_per_spine` up ports per spine (spine-major), then `sibling_links` ports cabled
/// pairwise to the sibling leaf (2m ↔ 2m+1). Spine port l·links_per_spine + j goes down to leaf l.
/// Node x uses terminal x mod nodes_per_leaf of leaf x / nodes_per_leaf in every plane.
fn two_level(
    t: &TwoLevel,
    configured_radix: Option<u16>,
    default_radix: Option<u16>,
) -> Result<Builder, TopologyError> {
    at_least("planes", t.planes, 1)?;
    if t.planes > u32::from(u8::MAX) {
        return Err(invalid(
            "topology.planes",
            format!("must be at most 255, got {}", t.planes),
        ));
    }
    at_least("leaves", t.leaves, 1)?;
    at_least("spines", t.spines, 1)?;
    at_least("nodes_per_leaf", t.nodes_per_leaf, 1)?;
    at_least("links_per_spine", t.links_per_spine, 1)?;
    if t.sibling_links > 0 && t.leaves % 2 == 1 {
        return Err(invalid(
            "topology.leaves",
            format!(
                "must be even when sibling_links > 0 (leaves pair up as siblings), got {}",
                t.leaves
            ),
        ));
    }
    let slots = u64::from(t.leaves) * u64::from(t.nodes_per_leaf);
    let nodes = match t.nodes {
        Some(n) if n == 0 || u64::from(n) > slots => {
            return Err(invalid(
                "topology.nodes",
                format!("must be between 1 and leaves × nodes_per_leaf = {slots}, got {n}"),
            ))
        }
        Some(n) => u64::from(n),
        None => slots,
    };
    let nodes = count("nodes", "nodes", nodes)?;
    let per_plane = u64::from(t.leaves) + u64::from(t.spines);
    count("leaves", "routers", per_plane * u64::from(t.planes))?;

    let (p, s, m, sib) = (
        u64::from(t.nodes_per_leaf),
        u64::from(t.spines),
        u64::from(t.links_per_spine),
        u64::from(t.sibling_links),
    );
    let up = if m == 1 {
        format!("{s} spines")
    } else {
        format!("{s} spines × {m} links")
    };
    let leaf_detail = if sib == 0 {
        format!("{p} nodes + {up}")
    } else {
        format!("{p} nodes + {up} + {sib} sibling")
    };
    let spine_ports = u64::from(t.leaves) * m;
    let spine_detail = if m == 1 {
        format!("{} leaves", t.leaves)
    } else {
        format!("{} leaves × {m} links", t.leaves)
    };
    let leaf_ports = p + s * m + sib;
    let radix = radix(
        configured_radix,
        default_radix,
        &[
            Need {
                role: "leaf",
                ports: leaf_ports,
                detail: leaf_detail,
            },
            Need {
                role: "spine",
                ports: spine_ports,
                detail: spine_detail,
            },
        ],
    )?;

    let mut b = Builder::new(nodes, t.planes as u8);
    for plane in 0..t.planes {
        let base = plane * per_plane as u32;
        for l in 0..t.leaves {
            b.router(leaf_ports, radix, vec![plane, 0, l], plane as u8);
        }
        for sp in 0..t.spines {
            b.router(spine_ports, radix, vec![plane, 1, sp], plane as u8);
        }
        for l in 0..t.leaves {
            let leaf = base + l;
            for sp in 0..t.spines {
                for j in 0..m {
                    b.link(
                        (leaf, p + u64::from(sp) * m + j, PortKind::Up),
                        (base + t.leaves + sp, u64::from(l) * m + j, PortKind::Down),
                    );
                }
            }
            if l % 2 == 0 {
                for i in 0..sib {
                    let port = p + s * m + i;
                    b.link((leaf, port, PortKind::Sibling), (leaf + 1, port, PortKind::Sibling));
                }
            }
        }
        for x in 0..nodes {
            b.attach(
                x,
                plane as u8,
                base + x / t.nodes_per_leaf,
                u64::from(x % t.nodes_per_leaf),
            );
        }
    }
    Ok(b)
}

fn leaf_spine(c: &LeafSpineConfig) -> Result<Topology, TopologyError> {
    let t = TwoLevel {
        planes: 1,
        leaves: c.leaves,
        spines: c.spines,
        nodes_per_leaf: c.nodes_per_leaf,
        links_per_spine: c.links_per_spine,
        sibling_links: 0,
        nodes: c.nodes,
    };
    let b = two_level(&t, c.radix, None)?;
    let name = format!("leaf_spine {} leaves × {} spines", c.leaves, c.spines);
    let shape = Shape::LeafSpine {
        leaves: c.leaves,
        spines: c.spines,
        nodes_per_leaf: c.nodes_per_leaf,
        links_per_spine: c.links_per_spine,
    };
    Ok(b.finish(name, shape))
}

/// Chip radix of the Sunway SWHRC router, the generalized fat tree's default.
const SUNWAY_RADIX: u16 = 40;

fn generalized_fat_tree(c: &GeneralizedFatTreeConfig) -> Result<Topology, TopologyError> {
    let t = TwoLevel {
        planes: c.planes,
        leaves: c.leaves,
        spines: c.spines,
        nodes_per_leaf: c.nodes_per_leaf,
        links_per_spine: 1,
        sibling_links: c.sibling_links,
        nodes: c.nodes,
    };
    let b = two_level(&t, c.radix, Some(SUNWAY_RADIX))?;
    let name = format!(
        "generalized_fat_tree {} planes × ({} leaves + {} spines)",
        c.planes, c.leaves, c.spines
    );
    let shape = Shape::GeneralizedFatTree {
        planes: c.planes,
        leaves: c.leaves,
        spines: c.spines,
        nodes_per_leaf: c.nodes_per_leaf,
        sibling_links: c.sibling_links,
    };
    Ok(b.finish(name, shape))
}

/// Group offsets taken by the global ports of one round: +1, −1, +2, −2, … (mod g), and g/2
/// once when g is even. Every nonzero offset appears once, and each offset sits next to its
/// inverse, so the port at index e pairs with index `partner(e)` on the far group.
fn dragonfly_offsets(g: u32) -> Vec<u32> {
    let mut offsets: Vec<u32> = (1..=(g - 1) / 2).flat_map(|m| [m, g - m]).collect();
    // For even g one offset is missing from the round: g/2, its own inverse.
    if offsets.len() + 1 < g as usize {
        offsets.push(g / 2);
    }
    offsets
}

/// Dragonfly (Kim, Dally, Scott, Abts, ISCA 2008). Router id = group·a + index, coords
/// (group, index). Ports: `p` terminals, then `a−1` local ports (port p + j′ − [j′ > j] goes to
/// router j′ of the group), then `h` global ports.
///
/// Global arrangement (ours, circulant): number a group's global ports j = router·h + port,
/// 0 ≤ j < a·h, and split them into rounds of g−1. Within a round, port e goes to the group at
/// offset `dragonfly_offsets(g)[e]` (+1, −1, +2, −2, …), landing on the same round and the index
/// of the inverse offset. Each full round links every pair of groups once, so with g = a·h+1 every
/// pair gets exactly one global link (diameter 3), and with fewer groups every pair gets
/// ⌊a·h/(g−1)⌋ or one more; the last partial round uses the shortest offsets. A port whose
/// partner would fall beyond a·h (only when a·h mod (g−1) is odd and g is odd) stays uncabled.
fn dragonfly(c: &DragonflyConfig) -> Result<Topology, TopologyError> {
    at_least("a", c.a, 1)?;
    at_least("p", c.p, 1)?;
    at_least("h", c.h, 1)?;
    let (a, p, h) = (c.a, c.p, c.h);
    let per_group = u64::from(a) * u64::from(h);
    let max_g = per_group + 1;
    let g = match c.g {
        Some(g) if g == 0 || u64::from(g) > max_g => {
            return Err(invalid(
                "topology.g",
                format!("must be between 1 and a × h + 1 = {max_g} (all groups directly linked), got {g}"),
            ))
        }
        Some(g) => g,
        None => count("h", "groups", max_g)?,
    };
    let routers = count("g", "routers", u64::from(g) * u64::from(a))?;
    let nodes = count("p", "nodes", u64::from(routers) * u64::from(p))?;
    let local0 = u64::from(p);
    let global0 = local0 + u64::from(a) - 1;
    let ports = global0 + u64::from(h);
    let radix = radix(
        c.radix,
        None,
        &[Need {
            role: "router",
            ports,
            detail: format!("{p} nodes + {} local + {h} global", a - 1),
        }],
    )?;

    let mut b = Builder::new(nodes, 1);
    for grp in 0..g {
        for i in 0..a {
            b.router(ports, radix, vec![grp, i], 0);
        }
    }
    for grp in 0..g {
        let base = grp * a;
        for i in 0..a {
            for j in i + 1..a {
                b.link(
                    (base + i, local0 + u64::from(j - 1), PortKind::Local),
                    (base + j, local0 + u64::from(i), PortKind::Local),
                );
            }
            for x in 0..p {
                b.attach((base + i) * p + x, 0, base + i, u64::from(x));
            }
        }
    }
    if g > 1 {
        let offsets = dragonfly_offsets(g);
        let round = u64::from(g - 1);
        let partner = |e: usize| if offsets[e] * 2 == g { e } else { e ^ 1 };
        let global_port = |grp: u32, j: u64| (grp * a + (j / u64::from(h)) as u32, global0 + j % u64::from(h));
        for grp in 0..g {
            for j in 0..per_group {
                let e = (j % round) as usize;
                let far_j = j - e as u64 + partner(e) as u64;
                let far = (grp + offsets[e]) % g;
                // Cable each link once, from its lexicographically smaller end.
                if far_j >= per_group || (far, far_j) < (grp, j) {
                    continue;
                }
                let (r, port) = global_port(grp, j);
                let (fr, fport) = global_port(far, far_j);
                b.link((r, port, PortKind::Global), (fr, fport, PortKind::Global));
            }
        }
    }
    let name = format!("dragonfly a={a} p={p} h={h} g={g}");
    Ok(b.finish(name, Shape::Dragonfly { a, p, h, g }))
}

/// A single router: port x is cabled to node x. Every packet is at its destination router on
/// arrival, so routing reduces to ejection.
fn crossbar(c: &CrossbarConfig) -> Result<Topology, TopologyError> {
    at_least("ports", c.ports, 2)?;
    let ports = u64::from(c.ports);
    let radix = radix(
        c.radix,
        None,
        &[Need {
            role: "crossbar",
            ports,
            detail: format!("{ports} nodes"),
        }],
    )?;
    let mut b = Builder::new(c.ports, 1);
    let r = b.router(ports, radix, Vec::new(), 0);
    for x in 0..c.ports {
        b.attach(x, 0, r.0, u64::from(x));
    }
    Ok(b.finish(
        format!("crossbar {} ports", c.ports),
        Shape::Crossbar { ports: c.ports },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dragonfly_offsets_pair_with_inverses() {
        for g in 2..12 {
            let off = dragonfly_offsets(g);
            assert_eq!(off.len() as u32, g - 1);
            for (e, &o) in off.iter().enumerate() {
                let partner = if o * 2 == g { e } else { e ^ 1 };
                assert_eq!((o + off[partner]) % g, 0, "g={g} e={e}");
            }
        }
    }

    #[test]
    fn fat_tree_up_ports_reach_distinct_parents() {
        let t = fat_tree(&FatTreeConfig {
            k: 3,
            n: 3,
            radix: None,
        })
        .unwrap();
        // Leaf 4 = digits (1, 1): parents at level 1 are w = 3 + {0, 1, 2}.
        let parents: Vec<_> = t.routers[4].ports[3..6].to_vec();
        let expect: Vec<_> = (0..3)
            .map(|j| Peer::Router {
                router: RouterId(9 + 3 + j),
                port: PortIdx(1),
            })
            .collect();
        assert_eq!(parents, expect);
    }

    #[test]
    fn crossbar_is_one_router_and_routes_by_ejection() {
        use crate::config::RoutingConfig;
        use crate::routing::Routing;
        let t = build(&TopologyConfig::Crossbar(CrossbarConfig { ports: 4, radix: None })).unwrap();
        assert_eq!((t.num_routers(), t.num_nodes(), t.num_router_links()), (1, 4, 0));
        assert_eq!(
            t.routers[0].ports[2],
            Peer::Node {
                node: NodeId(2),
                rail: 0
            }
        );
        assert_eq!(t.metrics().bisection_links, 0);
        let vcs = 4;
        for cfg in [RoutingConfig::default_for(&t.shape), RoutingConfig::Source] {
            let routing = Routing::new(&t, &cfg, vcs, &[]).unwrap();
            // Every VC stays a class, so "destination mod VCs" reaches all of them.
            assert_eq!(routing.classes(), vcs, "{cfg:?}");
            for src in 0..4 {
                for dst in (0..4).filter(|&d| d != src) {
                    let hops = routing.trace(&t, NodeId(src), NodeId(dst), 0, (dst % 4) as u8).unwrap();
                    assert_eq!(
                        hops,
                        vec![(RouterId(0), PortIdx(dst as u16), (dst % 4) as u8)],
                        "{cfg:?} {src}->{dst}"
                    );
                }
            }
        }
        let err = build(&TopologyConfig::Crossbar(CrossbarConfig { ports: 1, radix: None })).unwrap_err();
        assert_eq!(err.to_string(), "topology.ports: must be at least 2, got 1");
        let err = build(&TopologyConfig::Crossbar(CrossbarConfig {
            ports: 8,
            radix: Some(4),
        }))
        .unwrap_err();
        assert!(err.to_string().contains("crossbar needs 8 ports"), "{err}");
    }

    #[test]
    fn hypercube_port_flips_bit() {
        let t = hypercube(&HypercubeConfig {
            n: 3,
            concentration: 2,
            radix: None,
        })
        .unwrap();
        assert_eq!(
            t.routers[5].ports[1],
            Peer::Router {
                router: RouterId(7),
                port: PortIdx(1)
            }
        );
        assert_eq!(t.routers[5].kinds[1], PortKind::Dim { dim: 1, plus: true });
        assert_eq!(t.routers[5].kinds[0], PortKind::Dim { dim: 0, plus: false });
        assert_eq!(
            t.routers[5].ports[4],
            Peer::Node {
                node: NodeId(11),
                rail: 0
            }
        );
    }
}
