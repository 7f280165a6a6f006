//! Routing algorithms: given a router, the port a packet arrived on and the packet, choose the
//! output port and virtual channel.
//!
//! - Torus/mesh/hypercube **dimension order** with deadlock avoided by *bubble* flow control
//!   (NICEVT, spec 03) or by *dateline* VCs; **minimal adaptive** with a dimension-order escape VC
//!   (Duato): an adaptive VC is taken only if the packet is sure to fit there (credits no waiting
//!   request at that output has claimed), otherwise the packet waits on the escape VC, which is
//!   deadlock-free on its own.
//! - Trees (k-ary n-tree, leaf–spine, Sunway generalized fat tree): **up*/down***. Each router
//!   holds, per destination leaf, its ordered list of down ports (a routing table); packets not
//!   below a router go up on a port chosen from the destination-rotated list (D-mod-k):
//!   *deterministic* = first live port of the list (Sunway: keeps traffic flowing around failed
//!   links before tables are rewritten), *adaptive* = the live candidate with most downstream
//!   credits. On the generalized fat tree a spine whose down link to leaf L is dead sends the packet
//!   to L's sibling, which crosses the sibling link (spec 01, "generalized fat tree").
//! - **Table** (Sunway two-level tables, GUID = (supernode, index)): same decisions as up*/down*,
//!   looked up through a per-router intra-supernode and inter-supernode table whose memory is
//!   reported against a flat table (see [`TableMemory`]).
//! - **Minimal** (dragonfly and any graph): shortest path by BFS distances, VC = router hops taken
//!   so far, which is deadlock-free when VCs ≥ diameter.
//! - **Valiant** and **UGAL-L** (dragonfly, Kim, Dally, Scott & Abts 2008): minimally to a random
//!   intermediate group, then minimally to the destination (Valiant always, UGAL when the
//!   source router's queue × hops comparison favours it); VC = router hops taken, deadlock-free
//!   when VCs ≥ the longest such path (5 on a dragonfly).
//! - **Source**: the deterministic path is computed at injection and carried in the packet.

use crate::config::{ConfigError, DeadlockAvoidance, RoutingConfig, Selection, TieRule};
use crate::faults::bypass::{BypassEntry, BypassTable};
use crate::faults::tables::TreeTables;
use crate::packet::{Packet, F_BYPASS, F_CHOSEN, F_CROSSED, F_DETOUR, F_ESCAPE, NO_DIM};
use crate::topology::{NodeId, Peer, PortIdx, PortKind, RouterId, Shape, Topology};
use serde::Serialize;

/// One routing choice.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub port: PortIdx,
    pub vc: u8,
    /// The packet enters a ring (new dimension or injection): bubble flow control applies.
    pub enters_ring: bool,
}

/// Free downstream credits of (output port, VC) at the deciding router. `&mut self`: a view may
/// fold credits that have arrived by now into its counts while answering.
pub trait CreditView {
    fn free(&mut self, port: PortIdx, vc: u8) -> u32;

    /// Free credits of (port, VC) that no request already waiting at the port has a claim on:
    /// room a packet routed now is sure to get however the port's arbitration orders the
    /// requests before it (minimal adaptive routing takes an adaptive VC only then; model
    /// reference, "Adaptive VCs are claimed at routing"). A view without waiting requests
    /// answers [`CreditView::free`].
    #[inline(always)]
    fn unclaimed(&mut self, port: PortIdx, vc: u8) -> u32 {
        self.free(port, vc)
    }

    /// The port of non-empty `ports` with the most free credits on `vc`, scanning `ports[start..]`
    /// then `ports[..start]` and keeping the earliest on ties (adaptive tree routing without
    /// failed links). A view can override it with a tighter loop; the answer must not change.
    #[inline(always)]
    fn most_free(&mut self, ports: &[PortIdx], start: usize, vc: u8) -> PortIdx {
        let (before, from) = ports.split_at(start);
        let mut best_p = from[0];
        let mut best_f = self.free(best_p, vc);
        for &p in from[1..].iter().chain(before) {
            let f = self.free(p, vc);
            if f > best_f {
                best_f = f;
                best_p = p;
            }
        }
        best_p
    }
}

/// A view in which every channel is empty (zero load), for path tracing.
pub struct Idle;
impl CreditView for Idle {
    fn free(&mut self, _: PortIdx, _: u8) -> u32 {
        u32::MAX
    }
}

#[derive(Clone, Debug)]
enum Algo {
    Dor { deadlock: DeadlockAvoidance, tie: TieRule },
    Adaptive { deadlock: DeadlockAvoidance, tie: TieRule },
    Tree { selection: Selection },
    Minimal,
    Valiant,
    Ugal { threshold: u32 },
}

/// Dragonfly groups for Valiant and UGAL: router `r` is in group `r / a`.
#[derive(Clone, Debug)]
struct Groups {
    g: u32,
    /// The group of each router (`r / a`, read instead of divided at every port a step scans).
    of: Vec<u32>,
    /// Router hops from router `r` to the nearest router of group `G`, `gdist[r * g + G]`.
    gdist: Vec<u16>,
}

/// Geometry of a torus or mesh.
#[derive(Clone, Debug)]
struct Grid {
    k: Vec<u32>,
    wrap: bool,
    /// Router coordinates, `coords[r * k.len() + d]` (flat: one cache line per lookup).
    coords: Vec<u32>,
    /// The same coordinates packed into one word per router, dimension d in bits
    /// `[d·width, (d+1)·width)`, when they fit in 64 bits (empty otherwise). Dimension-order
    /// routing then finds the first differing dimension with one XOR and `trailing_zeros`
    /// instead of a loop over the dimensions (~40 instructions per hop in callgrind).
    packed: Vec<u64>,
    width: u32,
    /// Dimension of each bit position of a packed word.
    dim_of_bit: [u8; 64],
    /// Size of that dimension (`k[dim_of_bit[b]]`: one lookup per hop, no bounds check).
    k_of_bit: [u32; 64],
}

impl Grid {
    fn new(k: &[u32], wrap: bool, routers: &[crate::topology::RouterInfo]) -> Grid {
        let coords: Vec<u32> = routers.iter().flat_map(|r| r.coords.iter().copied()).collect();
        // Bits for coordinates 0..k-1 (at least one).
        let width = k
            .iter()
            .map(|&k| (32 - k.saturating_sub(1).leading_zeros()).max(1))
            .max()
            .unwrap_or(1);
        let mut dim_of_bit = [0u8; 64];
        let mut k_of_bit = [0u32; 64];
        let packed = if width as usize * k.len() <= 64 {
            for (b, d) in dim_of_bit.iter_mut().enumerate() {
                *d = (b as u32 / width).min(k.len().saturating_sub(1) as u32) as u8;
                k_of_bit[b] = k.get(*d as usize).copied().unwrap_or(1);
            }
            coords
                .chunks(k.len().max(1))
                .map(|c| {
                    c.iter()
                        .enumerate()
                        .fold(0u64, |w, (d, &x)| w | (x as u64) << (d as u32 * width))
                })
                .collect()
        } else {
            Vec::new()
        };
        Grid {
            k: k.to_vec(),
            wrap,
            coords,
            packed,
            width,
            dim_of_bit,
            k_of_bit,
        }
    }

    /// Dimension-order step from coordinate `c` toward `t` (c ≠ t) in a dimension of size `k`:
    /// (direction plus, crosses the wrap-around link). `minus_on_tie` decides a distance of
    /// exactly k/2 (k even); it runs only then.
    #[inline(always)]
    fn step(&self, c: u32, t: u32, k: u32, minus_on_tie: impl FnOnce() -> bool) -> (bool, bool) {
        if !self.wrap {
            return (t > c, false);
        }
        // Forward distance (t - c) mod k, without a division: 1 ≤ t + k - c < 2k.
        let mut fwd = t + k - c;
        if fwd >= k {
            fwd -= k;
        }
        let plus = match (2 * fwd).cmp(&k) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => !minus_on_tie(),
        };
        let crosses = if plus { c == k - 1 } else { c == 0 };
        (plus, crosses)
    }
}

/// Whether a dimension-order step at a distance of exactly k/2 goes the minus way, in
/// dimension `d` from coordinate `c`, for a packet with random bits `salt` (see [`TieRule`]).
#[inline]
fn minus_on_tie(tie: TieRule, salt: u8, d: usize, c: u32) -> bool {
    match tie {
        TieRule::Positive => false,
        TieRule::Random => (salt >> (d % 8)) & 1 == 1,
        TieRule::Balanced => c & 1 == 1,
    }
}

/// Start of the scan of an oblivious random port choice at hop `hops` of a packet with random
/// bits `salt`: a SplitMix-style mix, so the draws of successive hops are unrelated.
#[inline]
fn random_start(salt: u8, hops: u16) -> usize {
    let mut z = (salt as u64) << 16 | hops as u64;
    z = (z ^ (z >> 7)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (z >> 32) as usize
}

/// What a hop of up*/down* tree routing starts from, with the static tables and with the
/// tables rewritten after a failure alike: the destination's leaf, the packet's VC, the error
/// when no port serves, and the rotations choosing among down or sibling ports and among up
/// ports.
struct TreeHop {
    /// Leaves of the tree (the stride of the down-port tables).
    leaves: usize,
    /// Leaf index of the destination's router.
    dl: usize,
    vc: u8,
    unreachable: RouteError,
    /// Start among down and sibling ports: the destination (D-mod-k), or under oblivious
    /// random selection a draw from the packet's random bits and its hop count (a different
    /// draw at each level).
    rot: usize,
    /// Start among up ports: digit of the destination for this router's level (D-mod-k), or
    /// the random draw.
    up_rot: usize,
}

impl TreeHop {
    #[inline(always)]
    fn new(t: &Trees, r: RouterId, dr: RouterId, pkt: &Packet, sel: Selection) -> TreeHop {
        let random = sel == Selection::Random;
        let rot = if random {
            random_start(pkt.salt, pkt.hops)
        } else {
            pkt.dst.index()
        };
        TreeHop {
            leaves: t.leaf_router.len(),
            dl: t.leaf_of_router[dr.index()] as usize,
            vc: pkt.class,
            unreachable: RouteError::Unreachable {
                router: r,
                dst: pkt.dst,
            },
            rot,
            up_rot: if random { rot } else { rot / t.up_div[r.index()] },
        }
    }

    /// The choice of port `p` on the packet's VC (trees have no rings).
    #[inline(always)]
    fn choice(port: PortIdx, vc: u8) -> Choice {
        Choice {
            port,
            vc,
            enters_ring: false,
        }
    }
}

/// Per-leaf down-port tables of a tree.
#[derive(Clone, Debug)]
struct Trees {
    /// Number of leaves; leaf index of each router (u32::MAX = not a leaf).
    leaf_of_router: Vec<u32>,
    leaf_router: Vec<RouterId>,
    /// `down[r * leaves + l]`: ports of router r leading down to leaf l (empty: not below r).
    down: Vec<Box<[PortIdx]>>,
    /// Sibling leaf of each leaf (generalized fat tree), u32::MAX if none.
    sibling: Vec<u32>,
    /// Up ports and sibling ports of every router, in port order.
    ups: Vec<Box<[PortIdx]>>,
    sibs: Vec<Box<[PortIdx]>>,
    /// `ups[r].len() ^ level(r)` (leaves at level 0; 1 without up ports): the D-mod-k digit
    /// divisor, precomputed (a `pow` per hop showed in profiles).
    up_div: Vec<usize>,
}

/// Table-memory accounting of the Sunway two-level routing tables.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TableMemory {
    /// Endpoints per supernode (GUID = (supernode, index)).
    pub supernode_size: u32,
    pub supernodes: u32,
    /// Entries per router with a flat table (one per endpoint).
    pub flat_entries: u64,
    /// Entries per router with two-level tables (intra + inter).
    pub two_level_entries: u64,
    /// Bits per entry: one bit per port (an entry is a port set, ordered by position).
    pub entry_bits: u32,
    pub flat_bytes_per_router: u64,
    pub two_level_bytes_per_router: u64,
    pub saving_percent: f64,
}

impl TableMemory {
    /// Memory of flat vs two-level tables for `endpoints` endpoints in supernodes of `supernode_size`.
    pub fn compute(endpoints: u64, supernode_size: u32, radix: u32) -> TableMemory {
        let s = supernode_size.max(1) as u64;
        let supernodes = endpoints.div_ceil(s);
        let two = s + supernodes;
        let bits = radix.max(1);
        let bytes = |e: u64| (e * bits as u64).div_ceil(8);
        TableMemory {
            supernode_size: s as u32,
            supernodes: supernodes as u32,
            flat_entries: endpoints,
            two_level_entries: two,
            entry_bits: bits,
            flat_bytes_per_router: bytes(endpoints),
            two_level_bytes_per_router: bytes(two),
            saving_percent: 100.0 * (1.0 - two as f64 / endpoints.max(1) as f64),
        }
    }
}

/// The routing function of one fabric.
#[derive(Clone, Debug)]
pub struct Routing {
    algo: Algo,
    source: bool,
    vcs: u8,
    grid: Option<Grid>,
    trees: Option<Trees>,
    /// BFS distance between routers, `dist[a * n + b]` (minimal, Valiant, UGAL). The links are
    /// undirected (a failed link is dead at both ends), so the table is symmetric, and a hop
    /// reads it as `dist[destination * n + neighbour]`: the neighbours' distances to one
    /// destination lie in one row, the local ones of a dragonfly group side by side, instead of
    /// one cache line per neighbour.
    dist: Vec<u16>,
    nrouters: usize,
    /// First global port index of each router, for `dead`.
    port_base: Vec<u32>,
    /// Failed links (both ends marked), as the routers know them: static failures, and dynamic
    /// ones once detected.
    dead: Vec<bool>,
    /// Number of ports marked in `dead`.
    dead_count: usize,
    /// Whether any link failed: lets the hot path skip the `dead` lookup.
    any_dead: bool,
    /// `faults.torus_bypass`: VC class c also owns VC `classes + c`, for last steps.
    last_step_vcs: bool,
    /// Per-pair first/last-step routes installed after a failure (torus fault bypass).
    bypass: Option<Box<BypassTable>>,
    /// Up*/down* tables recomputed on the live tree after a failure.
    tables: Option<Box<TreeTables>>,
    /// Cached [`Routing::uses_bubble`] (asked once per hop).
    bubble: bool,
    /// Cached `classes().max(1)` (asked once per injected packet).
    class_count: u8,
    /// Router and port of every node's rail: `attach[node * rails + rail]`.
    attach: Vec<(RouterId, PortIdx)>,
    rails: u8,
    /// Sunway two-level table memory (table routing only).
    pub table_memory: Option<TableMemory>,
    /// Dimension-order next step per (router, destination router), `dor_next[r * routers + d]`
    /// (one byte: [`DOR_ARRIVED`], [`DOR_COMPUTE`], or the output port `2·dim + minus` with
    /// [`DOR_CROSSES`] when the step takes the wrap-around link), built at construction for
    /// dimension order on a torus or mesh of at most [`DOR_TABLE_MAX_ROUTERS`] routers; empty
    /// otherwise (the step is then computed from the coordinates).
    dor_next: Vec<u8>,
    /// Cached: dimension order read from `dor_next`, with no source or bypass routes and no
    /// dead port, so a hop needs only the attachment and the table ([`Routing::route_dor_fast`]).
    dor_fast: bool,
    /// Cached: the dimension-order deadlock rule is the dateline (VC 2·class + crossed).
    dateline: bool,
    /// Cached [`Routing::needs_salt`] (asked once per injected packet).
    salted: bool,
    /// Cached: up/down routing with deterministic or random port selection on the trees built
    /// at construction, with no recomputed tables, source or bypass routes or dead port, so a
    /// hop picks from the down or up ports without the full route ([`Routing::route_tree_fast`]).
    tree_fast: bool,
    /// Cached: the tree's port selection is `random`.
    tree_random: bool,
    /// Per global router port: whether a packet arriving there came from above or from a
    /// sibling leaf (an up or sibling port), the cases the fast tree hop leaves to the full route.
    from_above: Vec<bool>,
    /// Valiant and UGAL: the dragonfly's groups.
    groups: Option<Groups>,
    /// UGAL: credits of one VC buffer (private and shared), from which a queue's occupancy is
    /// read as credits in use ([`Routing::set_buffer_credits`]).
    buffer_credits: u32,
}

/// Most routers for which dimension-order routing keeps a next-step table (one byte per pair of
/// routers: 4 MiB at this size); larger tori and meshes compute each step from the coordinates.
pub const DOR_TABLE_MAX_ROUTERS: usize = 2048;
/// A `dor_next` entry: the packet is at its destination's router.
const DOR_ARRIVED: u8 = 0xFF;
/// A `dor_next` entry: a tie decided per packet (`random`), computed at each hop.
const DOR_COMPUTE: u8 = 0xFE;
/// A `dor_next` flag: the step crosses the dimension's wrap-around link.
const DOR_CROSSES: u8 = 0x40;

/// Most routers minimal (distance-table) routing supports: it keeps a routers × routers table.
pub const MAX_MINIMAL_ROUTERS: u64 = 8192;

/// The error of minimal routing on `routers` routers, beyond [`MAX_MINIMAL_ROUTERS`].
pub fn minimal_too_large(routers: u64) -> ConfigError {
    ConfigError::new(
        "routing.algorithm",
        format!(
            "minimal table routing keeps a {routers}×{routers} distance table; at most {MAX_MINIMAL_ROUTERS} routers are supported"
        ),
    )
}

impl Routing {
    /// Build the routing function; `failed` lists dead links by one of their ends.
    pub fn new(
        topo: &Topology,
        cfg: &RoutingConfig,
        vcs: u8,
        failed: &[(RouterId, PortIdx)],
    ) -> Result<Routing, ConfigError> {
        let port_base = topo.port_offsets();
        let total = *port_base.last().expect("one entry per router plus the total");
        let mut dead = vec![false; total as usize];
        for &(r, p) in failed {
            dead[(port_base[r.index()] + p.0 as u32) as usize] = true;
            if let Peer::Router { router, port } = topo.routers[r.index()].ports[p.index()] {
                dead[(port_base[router.index()] + port.0 as u32) as usize] = true;
            }
        }
        let rails = topo.rails.max(1);
        let mut attach = Vec::with_capacity(topo.nodes.len() * rails as usize);
        for n in &topo.nodes {
            for r in 0..rails as usize {
                attach.push(n.ports[r.min(n.ports.len() - 1)]);
            }
        }
        let (source, base) = match cfg {
            RoutingConfig::Source => (true, RoutingConfig::default_for(&topo.shape)),
            c => (false, c.clone()),
        };
        let algo = match base {
            RoutingConfig::DimensionOrder { deadlock, tie } => Algo::Dor { deadlock, tie },
            RoutingConfig::MinimalAdaptive { deadlock, tie } => Algo::Adaptive { deadlock, tie },
            RoutingConfig::UpDown { selection } | RoutingConfig::Table { selection } => Algo::Tree { selection },
            RoutingConfig::Minimal => Algo::Minimal,
            RoutingConfig::Valiant => Algo::Valiant,
            RoutingConfig::Ugal { threshold } => Algo::Ugal { threshold },
            RoutingConfig::Source => unreachable!("default_for never returns Source"),
        };
        let grid = match &topo.shape {
            Shape::Torus { k, wrap, .. } => Some(Grid::new(k, *wrap, &topo.routers)),
            _ => None,
        };
        let trees = matches!(algo, Algo::Tree { .. }).then(|| build_trees(topo));
        let mut dist = Vec::new();
        let mut groups = None;
        if matches!(algo, Algo::Minimal | Algo::Valiant | Algo::Ugal { .. }) {
            let n = topo.routers.len();
            if n as u64 > MAX_MINIMAL_ROUTERS {
                return Err(minimal_too_large(n as u64));
            }
            dist = vec![u16::MAX; n * n];
            let mut diameter = 0u16;
            for s in 0..n {
                bfs(topo, s, &dead, &port_base, &mut dist[s * n..(s + 1) * n]);
                for &d in &dist[s * n..(s + 1) * n] {
                    if d != u16::MAX {
                        diameter = diameter.max(d);
                    }
                }
            }
            if let (Algo::Valiant | Algo::Ugal { .. }, Shape::Dragonfly { a, g, .. }) = (&algo, &topo.shape) {
                let gr = group_distances(&dist, n, *a, *g);
                // The longest path: to the farthest group, then the diameter from where it lands.
                let to_group = gr.gdist.iter().filter(|&&d| d != u16::MAX).max().copied().unwrap_or(0);
                let longest = to_group as u32 + diameter as u32;
                if longest > vcs as u32 {
                    let key = if failed.is_empty() {
                        "router.vcs"
                    } else {
                        "faults.failed_links"
                    };
                    return Err(ConfigError::new(
                        key,
                        format!("{} routing uses one VC per router hop; its longest path (to the farthest group, {to_group} hops, then the diameter, {diameter}) takes {longest} hops but router.vcs = {vcs}", cfg.name()),
                    ));
                }
                groups = Some(gr);
            } else if matches!(algo, Algo::Valiant | Algo::Ugal { .. }) {
                return Err(ConfigError::new(
                    "routing.algorithm",
                    format!(
                        "'{}' picks intermediate dragonfly groups; the topology is not a dragonfly",
                        cfg.name()
                    ),
                ));
            }
            if diameter as u32 > vcs as u32 {
                if failed.is_empty() {
                    return Err(ConfigError::new(
                        "router.vcs",
                        format!("minimal routing uses one VC per router hop; the diameter is {diameter} hops but router.vcs = {vcs}"),
                    ));
                }
                return Err(ConfigError::new(
                    "faults.failed_links",
                    format!(
                        "with {} failed link{} the longest shortest route takes {diameter} router hops, but minimal routing uses one VC per hop and router.vcs = {vcs}; raise router.vcs to {diameter} or choose another routing.algorithm",
                        failed.len(),
                        if failed.len() == 1 { "" } else { "s" }
                    ),
                ));
            }
        }
        let table_memory = match (cfg, &topo.shape) {
            (
                RoutingConfig::Table { .. },
                Shape::GeneralizedFatTree { nodes_per_leaf, .. } | Shape::LeafSpine { nodes_per_leaf, .. },
            ) => {
                let radix = topo.routers.iter().map(|r| r.radix as u32).max().unwrap_or(1);
                Some(TableMemory::compute(topo.nodes.len() as u64, *nodes_per_leaf, radix))
            }
            _ => None,
        };
        let dead_count = dead.iter().filter(|&&d| d).count();
        let any_dead = dead_count > 0;
        let mut routing = Routing {
            algo,
            source,
            vcs,
            grid,
            trees,
            dist,
            nrouters: topo.routers.len(),
            port_base,
            dead,
            dead_count,
            any_dead,
            last_step_vcs: false,
            bypass: None,
            tables: None,
            bubble: false,
            class_count: 1,
            attach,
            rails,
            table_memory,
            dor_next: Vec::new(),
            dor_fast: false,
            dateline: false,
            salted: false,
            tree_fast: false,
            tree_random: false,
            from_above: Vec::new(),
            groups,
            buffer_credits: 0,
        };
        routing.bubble = routing.compute_uses_bubble();
        routing.dor_next = routing.build_dor_next();
        routing.class_count = routing.classes().max(1);
        routing.dateline = matches!(
            routing.algo,
            Algo::Dor {
                deadlock: DeadlockAvoidance::Dateline,
                ..
            }
        );
        routing.salted = routing.compute_needs_salt();
        routing.tree_random = matches!(
            routing.algo,
            Algo::Tree {
                selection: Selection::Random
            }
        );
        if routing.trees.is_some() {
            routing.from_above = topo
                .routers
                .iter()
                .flat_map(|r| {
                    // Indexed as `port_offsets` numbers the ports; read as the full route reads
                    // the kind of an input port.
                    (0..r.ports.len()).map(|p| matches!(r.kinds.get(p), Some(PortKind::Up | PortKind::Sibling)))
                })
                .collect();
        }
        routing.refresh_fast();
        Ok(routing)
    }

    /// Recompute [`Routing::dor_fast`] after what it depends on changed.
    fn refresh_fast(&mut self) {
        let plain = !self.source && self.bypass.is_none() && !self.any_dead;
        self.dor_fast = plain && matches!(self.algo, Algo::Dor { .. }) && !self.dor_next.is_empty();
        self.tree_fast = plain
            && matches!(
                self.algo,
                Algo::Tree {
                    selection: Selection::Deterministic | Selection::Random
                }
            )
            && self.trees.is_some()
            && self.tables.is_none();
    }

    /// Whether [`Routing::route_tree_fast`] routes every packet as [`Routing::route`] does.
    #[inline(always)]
    pub(crate) fn tree_fast(&self) -> bool {
        self.tree_fast
    }

    /// [`Routing::route`] when [`Routing::tree_fast`] holds, for a packet at router `r` that
    /// arrived on its port `in_port`, global router port `gport`: down toward the destination's
    /// leaf when it is below `r`, else up in D-mod-k order (or at random), each a pick among
    /// live ports as [`Routing::tree`] makes it with no dead port; a packet that came from
    /// above or from a sibling with nothing below, or a router without up ports, takes the
    /// full route. Out of line: inlined beside the dimension-order hop, it made the torus's
    /// hot path slower (register allocation), and a call costs the tree little.
    #[inline(never)]
    pub(crate) fn route_tree_fast(
        &self,
        topo: &Topology,
        r: RouterId,
        in_port: PortIdx,
        gport: u32,
        pkt: &mut Packet,
    ) -> Result<Choice, RouteError> {
        debug_assert!(self.tree_fast && pkt.path.is_none());
        let dr = match self.toward(r, pkt) {
            Ok(dr) => dr,
            Err(eject) => return Ok(eject),
        };
        let Some(t) = self.trees.as_ref() else {
            return self.route_tree_cold(topo, r, in_port, pkt);
        };
        let rot = if self.tree_random {
            random_start(pkt.salt, pkt.hops)
        } else {
            pkt.dst.index()
        };
        let down = &t.down[r.index() * t.leaf_router.len() + t.leaf_of_router[dr.index()] as usize];
        let (ports, rot) = if !down.is_empty() {
            (&down[..], rot)
        } else {
            let ups = &t.ups[r.index()];
            if self.from_above[gport as usize] || ups.is_empty() {
                return self.route_tree_cold(topo, r, in_port, pkt);
            }
            let up_rot = if self.tree_random {
                rot
            } else {
                rot / t.up_div[r.index()]
            };
            (&ups[..], up_rot)
        };
        let port = if ports.len() == 1 {
            ports[0]
        } else {
            ports[rot % ports.len()]
        };
        Ok(TreeHop::choice(port, pkt.class))
    }

    /// The full route of a tree hop the fast path does not take.
    #[cold]
    #[inline(never)]
    fn route_tree_cold(
        &self,
        topo: &Topology,
        r: RouterId,
        in_port: PortIdx,
        pkt: &mut Packet,
    ) -> Result<Choice, RouteError> {
        // Deterministic and random selection read no credits.
        self.route_table(topo, r, in_port, pkt, &mut Idle)
    }

    /// The fast hops' first step: the router of the packet's destination, or, when that is `r`,
    /// the ejection toward it (on the packet's VC; no port is dead where a fast hop is taken).
    #[inline(always)]
    fn toward(&self, r: RouterId, pkt: &Packet) -> Result<RouterId, Choice> {
        let i = self.attach_index(pkt.dst, pkt.rail);
        debug_assert!(i < self.attach.len(), "node {:?} rail {}", pkt.dst, pkt.rail);
        // SAFETY: the network admits a packet only with a destination below the node count and
        // a rail below the rail count (`Network::inject`), and `attach` has an entry for each
        // such pair.
        let (dr, dport) = unsafe { *self.attach.get_unchecked(i) };
        if dr == r {
            return Err(Choice {
                port: dport,
                vc: pkt.vc,
                enters_ring: false,
            });
        }
        Ok(dr)
    }

    /// Whether [`Routing::route_dor_fast`] routes every packet as [`Routing::route`] does.
    #[inline(always)]
    pub(crate) fn dor_fast(&self) -> bool {
        self.dor_fast
    }

    /// [`Routing::route`] when [`Routing::dor_fast`] holds: no packet carries a path, no port
    /// is dead and the algorithm is table dimension order, so a hop reads the destination's
    /// attachment and the table entry; a pair whose tie is decided per packet takes the full
    /// route.
    #[inline(always)]
    pub(crate) fn route_dor_fast(&self, topo: &Topology, r: RouterId, pkt: &mut Packet) -> Result<Choice, RouteError> {
        debug_assert!(self.dor_fast && pkt.path.is_none());
        let dr = match self.toward(r, pkt) {
            Ok(dr) => dr,
            Err(eject) => return Ok(eject),
        };
        let i = r.index() * self.nrouters + dr.index();
        debug_assert!(i < self.dor_next.len());
        // SAFETY: the table is `nrouters`² long (`dor_fast` implies it is built), and `r`, `dr`
        // are routers of the topology.
        let e = unsafe { *self.dor_next.get_unchecked(i) };
        if e >= DOR_COMPUTE {
            return self.route_cold(topo, r, pkt);
        }
        let p = e & !DOR_CROSSES;
        let d = p >> 1;
        // As `dor`: entering a new dimension clears the crossed flag, the wrap link sets it.
        let enters = pkt.last_dim != d;
        if enters {
            pkt.flags &= !F_CROSSED;
        }
        if e & DOR_CROSSES != 0 {
            pkt.flags |= F_CROSSED;
        }
        pkt.last_dim = d;
        let vc = if self.dateline {
            2 * pkt.class + u8::from(pkt.flags & F_CROSSED != 0)
        } else {
            pkt.class
        };
        Ok(Choice {
            port: PortIdx(p as u16),
            vc,
            enters_ring: enters && self.bubble,
        })
    }

    /// The full route of a packet whose step the fast path does not read from the table.
    #[cold]
    #[inline(never)]
    fn route_cold(&self, topo: &Topology, r: RouterId, pkt: &mut Packet) -> Result<Choice, RouteError> {
        // Dimension order asks neither the input port nor credits.
        self.route_table(topo, r, PortIdx(0), pkt, &mut Idle)
    }

    /// The next-step table of dimension-order routing (see `dor_next`): every (router,
    /// destination router) pair's step as [`Routing::dor_step`] computes it under the
    /// algorithm's tie rule, or [`DOR_COMPUTE`] where a `random` tie decides per packet.
    /// Routers are numbered in mixed radix, dimension 0 fastest (checked; otherwise no table),
    /// so a row is its dimension-0 pattern copied along the row and the positions that agree in
    /// dimension 0 rewritten from dimension 1, and so on: routers² bytes written, about
    /// routers²/k₀ entries computed.
    fn build_dor_next(&self) -> Vec<u8> {
        let (Algo::Dor { tie, .. }, Some(g)) = (&self.algo, &self.grid) else {
            return Vec::new();
        };
        let (n, nd) = (self.nrouters, g.k.len());
        // Ports 2·dim + minus must fit below the flag bit.
        if n > DOR_TABLE_MAX_ROUTERS || nd == 0 || 2 * nd > DOR_CROSSES as usize {
            return Vec::new();
        }
        let mixed_radix = g.k.iter().map(|&k| k as usize).product::<usize>() == n
            && (0..n).all(|r| {
                let mut x = r;
                g.coords[r * nd..(r + 1) * nd].iter().zip(&g.k).all(|(&c, &k)| {
                    let ok = c as usize == x % k as usize;
                    x /= k as usize;
                    ok
                })
            });
        if !mixed_radix {
            return Vec::new();
        }
        // The entry of a step in dimension `d` from coordinate `c` to `t` (c ≠ t).
        let entry = |d: usize, c: u32, t: u32| -> u8 {
            let k = g.k[d];
            let step = g.step(c, t, k, || minus_on_tie(*tie, 0, d, c));
            // A random tie goes either way with the packet's bits: both draws agree only when
            // the step is not a tie.
            if *tie == TieRule::Random && step != g.step(c, t, k, || minus_on_tie(*tie, 0xFF, d, c)) {
                return DOR_COMPUTE;
            }
            self.dim_port(d, step.0).0 as u8 | if step.1 { DOR_CROSSES } else { 0 }
        };
        let mut t = vec![0u8; n * n];
        let mut pattern = Vec::new();
        for (r, row) in t.chunks_mut(n).enumerate() {
            let rc = &g.coords[r * nd..(r + 1) * nd];
            // Dimension 0: the destinations differing there, a pattern of k₀ entries per run.
            let k0 = g.k[0];
            pattern.clear();
            pattern.extend((0..k0).map(|x| if x == rc[0] { DOR_ARRIVED } else { entry(0, rc[0], x) }));
            for chunk in row.chunks_mut(k0 as usize) {
                chunk.copy_from_slice(&pattern);
            }
            // Dimension d ≥ 1: the destinations agreeing with `r` in every lower dimension sit
            // `stride` apart from `offset`; their coordinate d runs 0..k_d, then repeats.
            let (mut stride, mut offset) = (k0 as usize, rc[0] as usize);
            for (d, (&c, &k)) in rc.iter().zip(&g.k).enumerate().skip(1) {
                let mut x = 0;
                let mut i = offset;
                while i < n {
                    if x != c {
                        row[i] = entry(d, c, x);
                    }
                    x = if x + 1 == k { 0 } else { x + 1 };
                    i += stride;
                }
                offset += c as usize * stride;
                stride *= k as usize;
            }
        }
        t
    }

    /// The next-step table's entry for (`r`, `dr`), or [`DOR_COMPUTE`] without a table.
    #[inline(always)]
    fn dor_entry(&self, r: RouterId, dr: RouterId) -> u8 {
        if self.dor_next.is_empty() {
            return DOR_COMPUTE;
        }
        let i = r.index() * self.nrouters + dr.index();
        // The table is `nrouters`² long when not empty, and `r`, `dr` are routers of the
        // topology (the packet's router, its destination's attachment).
        debug_assert!(i < self.dor_next.len());
        // SAFETY: `i` is below the table's length (checked in debug builds).
        unsafe { *self.dor_next.get_unchecked(i) }
    }

    /// The dimension-order step from `r` toward `dr` from the next-step table: `Some(None)` at
    /// the destination's router, `Some(Some((dim, plus, crosses)))` otherwise, or None when
    /// there is no table or the pair's step is decided per packet.
    #[cfg(test)]
    pub(crate) fn dor_table_step(&self, r: RouterId, dr: RouterId) -> Option<Option<(usize, bool, bool)>> {
        match self.dor_entry(r, dr) {
            DOR_ARRIVED => Some(None),
            DOR_COMPUTE => None,
            e => Some(Some((((e & 0x3F) >> 1) as usize, e & 1 == 0, e & DOR_CROSSES != 0))),
        }
    }

    /// The same routing without the dimension-order next-step table (tests compare the two).
    #[cfg(test)]
    pub(crate) fn without_dor_table(mut self) -> Routing {
        self.dor_next = Vec::new();
        self.refresh_fast();
        self
    }

    /// Whether dimension-order steps are read from the next-step table.
    #[cfg(test)]
    pub(crate) fn has_dor_table(&self) -> bool {
        !self.dor_next.is_empty()
    }

    /// VC classes available to deterministic traffic (used to spread packets at injection).
    pub fn classes(&self) -> u8 {
        match &self.algo {
            Algo::Dor {
                deadlock: DeadlockAvoidance::Dateline,
                ..
            } => (self.vcs / 2).max(1),
            Algo::Dor { .. } if self.last_step_vcs => (self.vcs / 2).max(1),
            Algo::Adaptive { .. } | Algo::Minimal | Algo::Valiant | Algo::Ugal { .. } => 1,
            _ => self.vcs,
        }
    }

    /// Reserve the upper half of the VCs for the last steps of fault-bypass routes
    /// (`faults.torus_bypass`): class c rides VC c on rings and VC `classes + c` on a last step.
    pub(crate) fn reserve_last_step_vcs(&mut self) {
        self.last_step_vcs = true;
        self.class_count = self.classes().max(1);
    }

    /// The VC of class `class` on a hop of a bypass route: the class's ring VC, or (`last`) its
    /// last-step VC.
    #[inline]
    fn bypass_vc(&self, class: u8, last: bool) -> u8 {
        if last {
            class + self.classes()
        } else {
            class
        }
    }

    /// Mark the port `p` of router `r` dead or alive as the routers know it (a detected failure
    /// or repair). The far end of a cable is marked by its own call.
    pub(crate) fn set_dead(&mut self, r: RouterId, p: PortIdx, dead: bool) {
        let g = (self.port_base[r.index()] + p.0 as u32) as usize;
        if self.dead[g] != dead {
            self.dead[g] = dead;
            if dead {
                self.dead_count += 1;
            } else {
                self.dead_count -= 1;
            }
            self.any_dead = self.dead_count > 0;
            self.refresh_fast();
        }
    }

    /// Number of ports the routers know to be dead.
    #[inline]
    pub fn dead_ports(&self) -> usize {
        self.dead_count
    }

    /// Install (or, with `None`, remove) the recomputed up*/down* tables.
    pub(crate) fn install_tables(&mut self, t: Option<Box<TreeTables>>) {
        self.tables = t;
        self.refresh_fast();
    }

    /// Install (or, with `None`, remove) the per-pair fault-bypass routes.
    pub(crate) fn install_bypass(&mut self, b: Option<Box<BypassTable>>) {
        self.bypass = b;
        self.refresh_fast();
    }

    /// The installed per-pair bypass routes, if any.
    pub fn bypass_table(&self) -> Option<&BypassTable> {
        self.bypass.as_deref()
    }

    /// Whether this routing is tree routing (up*/down* or tables).
    pub(crate) fn is_tree(&self) -> bool {
        matches!(self.algo, Algo::Tree { .. })
    }

    /// The tie rule of dimension-order routing (None for other algorithms).
    pub(crate) fn dor_tie(&self) -> Option<TieRule> {
        match self.algo {
            Algo::Dor { tie, .. } => Some(tie),
            _ => None,
        }
    }

    /// Whether routing reads the packets' random bits ([`Packet::salt`]): a `random` tie rule
    /// or oblivious random port selection. The network draws them at injection only then.
    #[inline]
    pub fn needs_salt(&self) -> bool {
        self.salted
    }

    fn compute_needs_salt(&self) -> bool {
        matches!(
            self.algo,
            Algo::Dor {
                tie: TieRule::Random,
                ..
            } | Algo::Adaptive {
                tie: TieRule::Random,
                ..
            } | Algo::Tree {
                selection: Selection::Random
            } | Algo::Valiant
                | Algo::Ugal { .. }
        )
    }

    /// Random bits to average a traced flow over, each with an equal share, so that a traced
    /// load is the expected load: under the `random` tie rule a tie goes either way with
    /// probability ½ in each dimension independently, and the link a packet uses in a
    /// dimension depends on that dimension's draw only, so all-plus (0) and all-minus (0xFF)
    /// give the expectation. Oblivious random up ports on trees are traced with salt 0, one
    /// draw per hop like any other.
    pub fn expectation_salts(&self) -> &'static [u8] {
        // (Valiant's random intermediate is not traced: see `bound_untraced`.)
        match self.algo {
            Algo::Dor {
                tie: TieRule::Random, ..
            } => &[0, 0xFF],
            _ => &[0],
        }
    }

    /// Why the channel-load bound cannot be traced on the idle network, if it cannot: Valiant
    /// routes every packet through a random intermediate group, which one traced path per flow
    /// does not represent. (UGAL on the idle network takes the minimal path, which is traced.)
    pub fn bound_untraced(&self) -> Option<&'static str> {
        matches!(self.algo, Algo::Valiant)
            .then_some("Valiant routing sends each packet through a random intermediate group; the bound of one traced path per flow would not be its bound")
    }

    /// Whether packets want 16 random bits (`salt` and `last_dim`): Valiant and UGAL pick the
    /// intermediate group from them.
    #[inline]
    pub fn needs_wide_salt(&self) -> bool {
        self.groups.is_some()
    }

    /// Tell UGAL how many credits a VC buffer holds (private and shared): a queue's occupancy is
    /// the credits of it in use.
    pub(crate) fn set_buffer_credits(&mut self, credits: u32) {
        self.buffer_credits = credits;
    }

    /// Whether packets entering a ring must leave a bubble (bubble flow control on a torus).
    #[inline]
    pub fn uses_bubble(&self) -> bool {
        self.bubble
    }

    fn compute_uses_bubble(&self) -> bool {
        matches!(
            self.algo,
            Algo::Dor {
                deadlock: DeadlockAvoidance::Bubble,
                ..
            } | Algo::Adaptive {
                deadlock: DeadlockAvoidance::Bubble,
                ..
            }
        ) && self.grid.as_ref().is_some_and(|g| g.wrap)
    }

    /// Whether idle-network paths look the same from every router: on a torus (translation of
    /// the coordinates modulo k) or a hypercube (XOR of the address), with dimension-order
    /// routing, one rail and no failed link, the path from router s + t to router d + t takes the
    /// same ports as the path from s to d, translated by t. Every router then has the same
    /// concentration and port layout, so the load a pattern that is itself translation invariant
    /// (uniform) puts on port p is the same at every router, and follows from the paths of one
    /// router's nodes alone. Meshes are not: their edges break the symmetry.
    pub fn translation_invariant(&self, topo: &Topology) -> bool {
        let shape = match &topo.shape {
            Shape::Torus { wrap, .. } => *wrap,
            Shape::Hypercube { .. } => true,
            _ => false,
        };
        // A tie rule other than `positive` breaks the symmetry on even rings (`balanced` turns
        // with the coordinate's parity, `random` per packet).
        let ties = match (&self.algo, &self.grid) {
            (Algo::Dor { tie, .. }, Some(g)) => *tie == TieRule::Positive || g.k.iter().all(|k| k % 2 == 1),
            _ => true,
        };
        shape && ties && matches!(self.algo, Algo::Dor { .. }) && !self.any_dead && topo.rails == 1
    }

    /// Where node `n`'s rail `rail` is attached.
    #[inline]
    pub fn attach(&self, n: NodeId, rail: u8) -> (RouterId, PortIdx) {
        self.attach[self.attach_index(n, rail)]
    }

    /// Index of node `n`'s rail `rail` in `attach`.
    #[inline(always)]
    fn attach_index(&self, n: NodeId, rail: u8) -> usize {
        n.index() * self.rails as usize + rail as usize
    }

    #[inline]
    pub fn is_dead(&self, r: RouterId, p: PortIdx) -> bool {
        self.any_dead && self.dead[(self.port_base[r.index()] + p.0 as u32) as usize]
    }

    /// Prepare a packet at injection: VC class, and the whole path under source routing.
    #[inline]
    pub fn on_inject(&self, topo: &Topology, pkt: &mut Packet, class: u8) -> Result<(), RouteError> {
        // A failed node cable is down in both directions: nothing leaves the node.
        if self.any_dead {
            let (r, p) = self.attach(pkt.src, pkt.rail);
            if self.is_dead(r, p) {
                return Err(RouteError::SourceCableDown {
                    node: pkt.src,
                    router: r,
                });
            }
        }
        // A class below the count is kept as it is (no division per packet).
        let n = self.class_count;
        pkt.class = if class < n { class } else { class % n };
        pkt.vc = self.vc_of_class(pkt.class);
        if self.groups.is_none() {
            pkt.last_dim = NO_DIM;
        }
        pkt.flags &= !(F_CROSSED | F_ESCAPE | F_BYPASS | F_DETOUR);
        if self.bypass.is_none() && !self.source {
            return Ok(());
        }
        self.inject_path(topo, pkt)
    }

    /// The path of a packet at injection: a fault-bypass route, or the whole route under
    /// source routing (out of line: most routing keeps no path).
    #[inline(never)]
    fn inject_path(&self, topo: &Topology, pkt: &mut Packet) -> Result<(), RouteError> {
        if let Some(b) = &self.bypass {
            let (sr, _) = self.attach(pkt.src, pkt.rail);
            let (dr, _) = self.attach(pkt.dst, pkt.rail);
            match b.get(sr, dr) {
                None => {}
                Some(BypassEntry::Unreachable) => {
                    return Err(RouteError::Unreachable {
                        router: sr,
                        dst: pkt.dst,
                    })
                }
                Some(BypassEntry::Route(path)) => {
                    pkt.path = Some(path.clone());
                    pkt.flags |= F_BYPASS;
                    return Ok(());
                }
            }
        }
        if self.source {
            let mut scratch = pkt.clone();
            let mut path = Vec::new();
            let (mut r, mut in_port) = self.attach(pkt.src, pkt.rail);
            scratch.hops = 1;
            loop {
                let c = self.route_table(topo, r, in_port, &mut scratch, &mut Idle)?;
                scratch.vc = c.vc;
                path.push((c.port, c.vc | if c.enters_ring { 0x80 } else { 0 }));
                match topo.routers[r.index()].ports[c.port.index()] {
                    Peer::Router { router, port } => {
                        r = router;
                        in_port = port;
                        scratch.hops += 1;
                        if path.len() > 4 * self.nrouters.max(4) {
                            return Err(RouteError::Loop {
                                router: r,
                                dst: pkt.dst,
                            });
                        }
                    }
                    Peer::Node { .. } => break,
                    Peer::None => {
                        return Err(RouteError::Unreachable {
                            router: r,
                            dst: pkt.dst,
                        })
                    }
                }
            }
            pkt.path = Some(std::sync::Arc::new(path));
        }
        Ok(())
    }

    /// The path of a packet from `src` to `dst` on `rail` in an idle network: the (router, output
    /// port, VC) of every hop, ending with the ejection port. Fails on a dead end or a loop.
    pub fn trace(
        &self,
        topo: &Topology,
        src: NodeId,
        dst: NodeId,
        rail: u8,
        class: u8,
    ) -> Result<Vec<(RouterId, PortIdx, u8)>, RouteError> {
        let mut hops = Vec::new();
        self.walk(topo, src, dst, rail, class, |r, p, vc| hops.push((r, p, vc)))?;
        Ok(hops)
    }

    /// Like [`Routing::trace`] but calls `visit(router, port, vc)` for each hop, allocating
    /// nothing (used to compute channel loads over all pairs).
    pub fn walk(
        &self,
        topo: &Topology,
        src: NodeId,
        dst: NodeId,
        rail: u8,
        class: u8,
        visit: impl FnMut(RouterId, PortIdx, u8),
    ) -> Result<(), RouteError> {
        self.walk_salted(topo, src, dst, rail, class, 0, visit)
    }

    /// [`Routing::walk`] for a packet whose random bits ([`Packet::salt`]) are `salt`.
    #[allow(clippy::too_many_arguments)]
    pub fn walk_salted(
        &self,
        topo: &Topology,
        src: NodeId,
        dst: NodeId,
        rail: u8,
        class: u8,
        salt: u8,
        mut visit: impl FnMut(RouterId, PortIdx, u8),
    ) -> Result<(), RouteError> {
        let mut pkt = Packet::new(0, src, dst, 0, 0, hpcnet_des::SimTime::ZERO);
        pkt.rail = rail;
        pkt.salt = salt;
        self.on_inject(topo, &mut pkt, class)?;
        let (mut r, mut in_port) = self.attach(src, rail);
        let limit = 2 * self.nrouters + 4;
        let mut n = 0;
        loop {
            pkt.hops += 1;
            let c = self.route(topo, r, in_port, &mut pkt, &mut Idle)?;
            visit(r, c.port, c.vc);
            n += 1;
            pkt.vc = c.vc;
            match topo.routers[r.index()].ports[c.port.index()] {
                Peer::Router { router, port } => {
                    r = router;
                    in_port = port;
                    if n > limit {
                        return Err(RouteError::Loop { router: r, dst });
                    }
                }
                Peer::Node { node, .. } if node == dst => return Ok(()),
                _ => return Err(RouteError::Unreachable { router: r, dst }),
            }
        }
    }

    /// The VC a packet of VC class `class` is injected on.
    pub fn injection_vc(&self, class: u8) -> u8 {
        self.vc_of_class(class % self.class_count)
    }

    /// The injection VC of a class below [`Routing::classes`].
    #[inline]
    fn vc_of_class(&self, class: u8) -> u8 {
        match &self.algo {
            Algo::Dor {
                deadlock: DeadlockAvoidance::Dateline,
                ..
            } => 2 * class,
            Algo::Minimal | Algo::Valiant | Algo::Ugal { .. } | Algo::Adaptive { .. } => 0,
            _ => class,
        }
    }

    /// Choose the output of `pkt` at router `r`, having arrived on `in_port`.
    #[inline(always)]
    pub fn route(
        &self,
        topo: &Topology,
        r: RouterId,
        in_port: PortIdx,
        pkt: &mut Packet,
        credits: &mut impl CreditView,
    ) -> Result<Choice, RouteError> {
        if let Some(path) = &pkt.path {
            let hop = pkt.hops as usize - 1;
            let bypass = pkt.flags & F_BYPASS != 0;
            let Some(&(port, vcf)) = path.get(hop) else {
                if bypass {
                    // A bypass route ends at the destination's router, which ejects.
                    return self.route_table(topo, r, in_port, pkt, credits);
                }
                return Err(RouteError::Loop {
                    router: r,
                    dst: pkt.dst,
                });
            };
            if self.is_dead(r, port) {
                return Err(RouteError::Unreachable {
                    router: r,
                    dst: pkt.dst,
                });
            }
            let vc = if bypass {
                self.bypass_vc(pkt.class, vcf & 0x7f != 0)
            } else {
                vcf & 0x7f
            };
            return Ok(Choice {
                port,
                vc,
                enters_ring: vcf & 0x80 != 0,
            });
        }
        self.route_table(topo, r, in_port, pkt, credits)
    }

    #[inline(always)]
    fn route_table(
        &self,
        topo: &Topology,
        r: RouterId,
        in_port: PortIdx,
        pkt: &mut Packet,
        credits: &mut impl CreditView,
    ) -> Result<Choice, RouteError> {
        let (dr, dport) = self.attach(pkt.dst, pkt.rail);
        if dr == r {
            // The destination's own cable is down: nowhere to go.
            if self.is_dead(r, dport) {
                return Err(RouteError::Unreachable {
                    router: r,
                    dst: pkt.dst,
                });
            }
            return Ok(Choice {
                port: dport,
                vc: pkt.vc,
                enters_ring: false,
            });
        }
        match &self.algo {
            Algo::Dor { deadlock, tie } => self.dor(r, dr, pkt, *deadlock, *tie, pkt.class),
            Algo::Adaptive { deadlock, tie } => self.adaptive(r, dr, pkt, *deadlock, *tie, credits),
            Algo::Tree { selection } => self.tree(topo, r, in_port, dr, pkt, *selection, credits),
            Algo::Minimal => self.minimal(topo, r, dr, pkt),
            Algo::Valiant => self.valiant(topo, r, dr, pkt, None, credits),
            Algo::Ugal { threshold } => self.valiant(topo, r, dr, pkt, Some(*threshold), credits),
        }
    }

    // ---------------------------------------------------------------------------------------
    // Torus, mesh, hypercube

    /// Next dimension and direction toward `dr` in dimension order, and whether that step crosses
    /// the dimension's wrap-around link; None if arrived.
    #[inline(always)]
    pub(crate) fn dor_step(&self, r: RouterId, dr: RouterId, tie: TieRule, salt: u8) -> Option<(usize, bool, bool)> {
        match &self.grid {
            Some(g) => {
                if !g.packed.is_empty() {
                    // `packed` has one word per router, and `r`, `dr` are routers of the
                    // topology (the packet's router, its destination's attachment).
                    debug_assert!(r.index() < g.packed.len() && dr.index() < g.packed.len());
                    // SAFETY: both indices are below `packed.len()` (checked in debug builds).
                    let (a, b) = unsafe { (*g.packed.get_unchecked(r.index()), *g.packed.get_unchecked(dr.index())) };
                    let diff = a ^ b;
                    if diff == 0 {
                        return None;
                    }
                    // A non-zero word has fewer than 64 trailing zeros: the mask changes nothing.
                    let bit = diff.trailing_zeros() as usize & 63;
                    let d = g.dim_of_bit[bit] as usize;
                    let (shift, mask) = (d as u32 * g.width, (1u64 << g.width) - 1);
                    let (c, t) = (((a >> shift) & mask) as u32, ((b >> shift) & mask) as u32);
                    let (plus, crosses) = g.step(c, t, g.k_of_bit[bit], || minus_on_tie(tie, salt, d, c));
                    return Some((d, plus, crosses));
                }
                let n = g.k.len();
                let cur = &g.coords[r.index() * n..(r.index() + 1) * n];
                let dst = &g.coords[dr.index() * n..(dr.index() + 1) * n];
                for (d, ((&c, &t), &k)) in cur.iter().zip(dst).zip(&g.k).enumerate() {
                    if c != t {
                        let (plus, crosses) = g.step(c, t, k, || minus_on_tie(tie, salt, d, c));
                        return Some((d, plus, crosses));
                    }
                }
                None
            }
            None => {
                // Hypercube: e-cube, lowest differing address bit; port d flips bit d.
                let diff = r.0 ^ dr.0;
                (diff != 0).then(|| {
                    (
                        diff.trailing_zeros() as usize,
                        (dr.0 >> diff.trailing_zeros()) & 1 == 1,
                        false,
                    )
                })
            }
        }
    }

    #[inline]
    pub(crate) fn dim_port(&self, d: usize, plus: bool) -> PortIdx {
        if self.grid.is_some() {
            PortIdx((2 * d + usize::from(!plus)) as u16)
        } else {
            PortIdx(d as u16)
        }
    }

    #[inline(always)]
    fn dor(
        &self,
        r: RouterId,
        dr: RouterId,
        pkt: &mut Packet,
        deadlock: DeadlockAvoidance,
        tie: TieRule,
        class: u8,
    ) -> Result<Choice, RouteError> {
        // The table's entry is the output port itself (2·dim + minus) and the wrap flag.
        let e = self.dor_entry(r, dr);
        let (port, d, crosses) = if e < DOR_COMPUTE {
            let p = e & !DOR_CROSSES;
            (PortIdx(p as u16), (p >> 1) as usize, e & DOR_CROSSES != 0)
        } else {
            let step = if e == DOR_ARRIVED {
                None
            } else {
                self.dor_step(r, dr, tie, pkt.salt)
            };
            let Some((d, plus, crosses)) = step else {
                return Err(RouteError::Unreachable {
                    router: r,
                    dst: pkt.dst,
                });
            };
            (self.dim_port(d, plus), d, crosses)
        };
        if self.is_dead(r, port) {
            return Err(RouteError::Unreachable {
                router: r,
                dst: pkt.dst,
            });
        }
        // Under minimal adaptive, `last_dim` was reset when the packet left the adaptive VCs, so
        // moving onto the escape VC counts as entering the ring.
        let enters = pkt.last_dim != d as u8;
        if pkt.last_dim != d as u8 {
            pkt.flags &= !F_CROSSED;
        }
        if crosses {
            pkt.flags |= F_CROSSED;
        }
        pkt.last_dim = d as u8;
        let vc = match deadlock {
            DeadlockAvoidance::Dateline => 2 * class + u8::from(pkt.flags & F_CROSSED != 0),
            _ => class,
        };
        Ok(Choice {
            port,
            vc,
            enters_ring: enters && self.uses_bubble(),
        })
    }

    fn adaptive(
        &self,
        r: RouterId,
        dr: RouterId,
        pkt: &mut Packet,
        deadlock: DeadlockAvoidance,
        tie: TieRule,
        credits: &mut impl CreditView,
    ) -> Result<Choice, RouteError> {
        let g = self
            .grid
            .as_ref()
            .expect("validated: minimal adaptive needs a torus or mesh");
        let first_adaptive: u8 = if deadlock == DeadlockAvoidance::Dateline { 2 } else { 1 };
        let nd = g.k.len();
        let cur = &g.coords[r.index() * nd..(r.index() + 1) * nd];
        let dst = &g.coords[dr.index() * nd..(dr.index() + 1) * nd];
        let need = pkt.credits as u32;
        let mut best: Option<(u32, Choice, usize)> = None;
        for d in 0..g.k.len() {
            if cur[d] == dst[d] {
                continue;
            }
            let k = g.k[d];
            let dirs: &[bool] = if g.wrap {
                let fwd = (dst[d] + k - cur[d]) % k;
                match (2 * fwd).cmp(&k) {
                    std::cmp::Ordering::Equal => &[true, false],
                    std::cmp::Ordering::Less => &[true],
                    std::cmp::Ordering::Greater => &[false],
                }
            } else if dst[d] > cur[d] {
                &[true]
            } else {
                &[false]
            };
            for &plus in dirs {
                let port = self.dim_port(d, plus);
                if self.is_dead(r, port) {
                    continue;
                }
                for vc in first_adaptive..self.vcs {
                    // Only room no waiting request has claimed: a packet that took an adaptive
                    // VC on credits another request then used would wait there, off the escape
                    // sub-network, and such waits close rings (Duato's condition broken).
                    let free = credits.unclaimed(port, vc);
                    if free >= need && best.as_ref().is_none_or(|(f, _, _)| free > *f) {
                        best = Some((
                            free,
                            Choice {
                                port,
                                vc,
                                enters_ring: false,
                            },
                            d,
                        ));
                    }
                }
            }
        }
        if let Some((_, c, d)) = best {
            pkt.flags &= !(F_ESCAPE | F_CROSSED);
            pkt.last_dim = d as u8;
            return Ok(c);
        }
        // Escape: dimension order on the escape VC(s), class 0.
        let was_escape = pkt.flags & F_ESCAPE != 0;
        if !was_escape {
            pkt.last_dim = NO_DIM;
        }
        pkt.flags |= F_ESCAPE;
        self.dor(r, dr, pkt, deadlock, tie, 0)
    }

    // ---------------------------------------------------------------------------------------
    // Trees

    /// The live port of `ports`, scanned from index `rot mod n` circularly: the first
    /// (deterministic) or the one with the most free credits downstream, earliest on ties
    /// (adaptive). A slice and a start index, not an iterator: the Sunway fabric scans 18 up
    /// ports per hop, and a boxed iterator with a `%` per element cost ~200 instructions per hop.
    /// Inlined into `tree`: without failed links this is a few instructions plus the scan.
    #[inline(always)]
    fn pick(
        &self,
        r: RouterId,
        ports: &[PortIdx],
        rot: usize,
        sel: Selection,
        vc: u8,
        credits: &mut impl CreditView,
    ) -> Option<PortIdx> {
        let n = ports.len();
        if n == 0 {
            return None;
        }
        if !self.any_dead {
            // One candidate (a spine's down port to a leaf): no choice, no credits to read
            // (credits due at that port are folded in at its arbitration instead).
            if n == 1 {
                return Some(ports[0]);
            }
            let start = rot % n;
            return Some(match sel {
                Selection::Deterministic | Selection::Random => ports[start],
                Selection::Adaptive => credits.most_free(ports, start, vc),
            });
        }
        self.pick_live(r, ports, rot, sel, vc, credits)
    }

    /// [`Routing::pick`] with failed links: dead ports are skipped.
    #[inline(never)]
    fn pick_live(
        &self,
        r: RouterId,
        ports: &[PortIdx],
        rot: usize,
        sel: Selection,
        vc: u8,
        credits: &mut impl CreditView,
    ) -> Option<PortIdx> {
        self.pick_where(r, ports, rot, sel, vc, credits, |_| true)
    }

    #[allow(clippy::too_many_arguments)]
    fn tree(
        &self,
        topo: &Topology,
        r: RouterId,
        in_port: PortIdx,
        dr: RouterId,
        pkt: &mut Packet,
        sel: Selection,
        credits: &mut impl CreditView,
    ) -> Result<Choice, RouteError> {
        if let Some(tb) = &self.tables {
            return self.tree_rewritten(tb, topo, r, in_port, dr, pkt, sel, credits);
        }
        let t = self.trees.as_ref().expect("tree tables built for tree routing");
        let TreeHop {
            leaves,
            dl,
            vc,
            unreachable,
            rot,
            up_rot,
        } = TreeHop::new(t, r, dr, pkt, sel);
        let info = &topo.routers[r.index()];
        let ups = &t.ups[r.index()];
        let mut pick = |ports: &[PortIdx], rot: usize| self.pick(r, ports, rot, sel, vc, credits);
        let choose = |p: PortIdx| Ok(TreeHop::choice(p, vc));
        // 1. Below me: go down.
        let down = &t.down[r.index() * leaves + dl];
        if !down.is_empty() {
            if let Some(p) = pick(down, rot) {
                return choose(p);
            }
            // Generalized fat tree bypass: down to the destination leaf's sibling instead.
            let sib = t.sibling[dl];
            if sib != u32::MAX {
                let sdown = &t.down[r.index() * leaves + sib as usize];
                if let Some(p) = pick(sdown, rot) {
                    return choose(p);
                }
            }
            return Err(unreachable);
        }
        let came_from_sibling = matches!(info.kinds.get(in_port.index()), Some(PortKind::Sibling));
        let came_from_above = matches!(info.kinds.get(in_port.index()), Some(PortKind::Up));
        let my_leaf = t.leaf_of_router[r.index()];
        let sibs = &t.sibs[r.index()];
        // 2. I am a leaf and the destination is my sibling, reached from above (bypass) or
        //    because all my up links are dead.
        if my_leaf != u32::MAX && t.sibling[my_leaf as usize] == dl as u32 && !came_from_sibling && came_from_above {
            return pick(sibs, rot).map_or(Err(unreachable), choose);
        }
        if came_from_above {
            return Err(unreachable);
        }
        // 3. Up, D-mod-k ordered: at tree level l the first port is digit l of the destination
        //    in base (up ports).
        if let Some(p) = pick(ups, up_rot) {
            return choose(p);
        }
        // 4. All up links dead: leave through the sibling leaf (not back where we came from).
        if my_leaf != u32::MAX && !came_from_sibling {
            return pick(sibs, rot).map_or(Err(unreachable), choose);
        }
        Err(unreachable)
    }

    /// [`Routing::pick_live`] among the ports `keep` accepts (the recomputed tables' entry).
    #[allow(clippy::too_many_arguments)]
    fn pick_where(
        &self,
        r: RouterId,
        ports: &[PortIdx],
        rot: usize,
        sel: Selection,
        vc: u8,
        credits: &mut impl CreditView,
        keep: impl Fn(PortIdx) -> bool,
    ) -> Option<PortIdx> {
        let n = ports.len();
        if n == 0 {
            return None;
        }
        let start = rot % n;
        let mut best: Option<(u32, PortIdx)> = None;
        for i in 0..n {
            let p = ports[(start + i) % n];
            if self.is_dead(r, p) || !keep(p) {
                continue;
            }
            match sel {
                Selection::Deterministic | Selection::Random => return Some(p),
                Selection::Adaptive => {
                    let f = credits.free(p, vc);
                    if best.is_none_or(|(bf, _)| f > bf) {
                        best = Some((f, p));
                    }
                }
            }
        }
        best.map(|(_, p)| p)
    }

    /// Up*/down* with the tables recomputed on the live tree ([`TreeTables`]): a port is taken
    /// only toward a router that still reaches the destination leaf — directly below, or by
    /// up*/down* — and the sibling bypass only when no direct way is left. Where the tables
    /// offer nothing, the rule before reconstruction applies (skip dead ports).
    #[allow(clippy::too_many_arguments)]
    fn tree_rewritten(
        &self,
        tb: &TreeTables,
        topo: &Topology,
        r: RouterId,
        in_port: PortIdx,
        dr: RouterId,
        pkt: &mut Packet,
        sel: Selection,
        credits: &mut impl CreditView,
    ) -> Result<Choice, RouteError> {
        let t = self.trees.as_ref().expect("tree tables built for tree routing");
        let TreeHop {
            leaves,
            dl,
            vc,
            unreachable,
            rot,
            up_rot,
        } = TreeHop::new(t, r, dr, pkt, sel);
        let info = &topo.routers[r.index()];
        let far = |p: PortIdx| match info.ports[p.index()] {
            Peer::Router { router, .. } => Some(router),
            _ => None,
        };
        let choose = |p: PortIdx| Ok(TreeHop::choice(p, vc));
        let sib = t.sibling[dl];
        // 1. Below me: down toward a child that reaches the leaf, else toward the sibling leaf.
        let down = &t.down[r.index() * leaves + dl];
        if !down.is_empty() {
            let direct = |p: PortIdx| far(p).is_some_and(|c| tb.below(c, dl));
            if let Some(p) = self.pick_where(r, down, rot, sel, vc, credits, direct) {
                return choose(p);
            }
            if sib != u32::MAX {
                let sdown = &t.down[r.index() * leaves + sib as usize];
                let via = |p: PortIdx| far(p).is_some_and(|c| tb.below_via_sibling(c, dl));
                if let Some(p) = self.pick_where(r, sdown, rot, sel, vc, credits, via) {
                    return choose(p);
                }
            }
            return Err(unreachable);
        }
        let came_from_sibling = matches!(info.kinds.get(in_port.index()), Some(PortKind::Sibling));
        let came_from_above = matches!(info.kinds.get(in_port.index()), Some(PortKind::Up));
        let my_leaf = t.leaf_of_router[r.index()];
        let sibs = &t.sibs[r.index()];
        // 2. The destination is my sibling leaf, reached from above (the bypass).
        if my_leaf != u32::MAX && sib == my_leaf && !came_from_sibling && came_from_above {
            return self
                .pick_where(r, sibs, rot, sel, vc, credits, |_| true)
                .map_or(Err(unreachable), choose);
        }
        if came_from_above {
            return Err(unreachable);
        }
        // 3. Up, D-mod-k ordered, toward a router that reaches the leaf by up*/down*; else one
        //    that reaches it through the sibling bypass.
        let ups = &t.ups[r.index()];
        let reach = |p: PortIdx| far(p).is_some_and(|q| tb.reaches(q, dl));
        if let Some(p) = self.pick_where(r, ups, up_rot, sel, vc, credits, reach) {
            return choose(p);
        }
        // 4. My sibling leaf reaches it while I do not: cross (not back where we came from).
        if my_leaf != u32::MAX && !came_from_sibling {
            let across = |p: PortIdx| far(p).is_some_and(|s| tb.reaches(s, dl));
            if let Some(p) = self.pick_where(r, sibs, rot, sel, vc, credits, across) {
                return choose(p);
            }
        }
        let via_sib = |p: PortIdx| far(p).is_some_and(|q| tb.reaches_via_sibling(q, dl));
        if let Some(p) = self.pick_where(r, ups, up_rot, sel, vc, credits, via_sib) {
            return choose(p);
        }
        // Nothing in the tables: the rule of deterministic tables (first live port).
        if let Some(p) = self.pick_where(r, ups, up_rot, sel, vc, credits, |_| true) {
            return choose(p);
        }
        if my_leaf != u32::MAX && !came_from_sibling {
            return self
                .pick_where(r, sibs, rot, sel, vc, credits, |_| true)
                .map_or(Err(unreachable), choose);
        }
        Err(unreachable)
    }

    // ---------------------------------------------------------------------------------------
    // Minimal (BFS distance table)

    fn minimal(&self, topo: &Topology, r: RouterId, dr: RouterId, pkt: &mut Packet) -> Result<Choice, RouteError> {
        let n = self.nrouters;
        let d = |x: RouterId| self.dist[dr.index() * n + x.index()];
        self.step(topo, r, pkt, d)
    }

    /// The first port of `r` (from the packet's destination on, round the ports) to a router
    /// one hop nearer by `dist` (router hops to the target, `u16::MAX`: unreachable), on VC =
    /// router hops taken so far.
    #[inline]
    fn step(
        &self,
        topo: &Topology,
        r: RouterId,
        pkt: &Packet,
        dist: impl Fn(RouterId) -> u16,
    ) -> Result<Choice, RouteError> {
        let here = dist(r);
        if here == u16::MAX {
            return Err(RouteError::Unreachable {
                router: r,
                dst: pkt.dst,
            });
        }
        let info = &topo.routers[r.index()];
        let np = info.ports.len();
        let rot = pkt.dst.index();
        for i in 0..np {
            let p = (i + rot) % np;
            if let Peer::Router { router, .. } = info.ports[p] {
                if !self.is_dead(r, PortIdx(p as u16)) && dist(router).wrapping_add(1) == here {
                    let vc = (pkt.hops.saturating_sub(1)).min(self.vcs as u16 - 1) as u8;
                    return Ok(Choice {
                        port: PortIdx(p as u16),
                        vc,
                        enters_ring: false,
                    });
                }
            }
        }
        Err(RouteError::Unreachable {
            router: r,
            dst: pkt.dst,
        })
    }

    // ---------------------------------------------------------------------------------------
    // Valiant and UGAL-L (dragonfly)

    /// The packet's intermediate group: its 16 random bits scaled to the group count.
    fn intermediate(g: &Groups, pkt: &Packet) -> u32 {
        let bits = (pkt.salt as u64) << 8 | pkt.last_dim as u64;
        ((bits * g.g as u64) >> 16) as u32
    }

    /// Valiant (`ugal` None) or UGAL-L (`ugal` = its threshold). At the source router the path
    /// is chosen once: through the intermediate group (the detour), unless source and
    /// destination share a group, the intermediate group is one of theirs, no path leads
    /// through it, or UGAL finds the minimal
    /// path's queue × hops no worse than the detour's plus the threshold. On the detour the
    /// packet goes minimally to the nearest router of the intermediate group, then minimally to
    /// its destination.
    fn valiant(
        &self,
        topo: &Topology,
        r: RouterId,
        dr: RouterId,
        pkt: &mut Packet,
        ugal: Option<u32>,
        credits: &mut impl CreditView,
    ) -> Result<Choice, RouteError> {
        let g = self.groups.as_ref().expect("groups built for Valiant and UGAL");
        let n = self.nrouters;
        let m = Self::intermediate(g, pkt);
        let to_m = |x: RouterId| g.gdist[x.index() * g.g as usize + m as usize];
        let to_d = |x: RouterId| self.dist[dr.index() * n + x.index()];
        if pkt.flags & F_CHOSEN == 0 {
            pkt.flags |= F_CHOSEN;
            let group = |x: RouterId| g.of[x.index()];
            let through = to_m(r) != u16::MAX && g.gdist[dr.index() * g.g as usize + m as usize] != u16::MAX;
            // Within a group every router is one local hop from every other: no detour.
            let detour = group(r) != group(dr)
                && m != group(r)
                && m != group(dr)
                && through
                && match ugal {
                    None => true,
                    Some(threshold) => self.ugal_detours(topo, r, dr, m, pkt, threshold, credits),
                };
            if detour {
                pkt.flags |= F_DETOUR;
            }
        }
        if pkt.flags & F_DETOUR != 0 {
            if to_m(r) != 0 {
                return self.step_to_group(topo, g, r, m, pkt);
            }
            pkt.flags &= !F_DETOUR;
        }
        self.step(topo, r, pkt, to_d)
    }

    /// A step toward group `m` as a dragonfly takes it: its global link into `m` if router `r`
    /// has one, else a local link to a router of its own group that has one (local, then
    /// global), else any step that brings the group nearer. Among equally short ways this keeps
    /// the detour to one global hop before the intermediate group.
    fn step_to_group(
        &self,
        topo: &Topology,
        g: &Groups,
        r: RouterId,
        m: u32,
        pkt: &Packet,
    ) -> Result<Choice, RouteError> {
        let to_m = |x: RouterId| g.gdist[x.index() * g.g as usize + m as usize];
        let info = &topo.routers[r.index()];
        let np = info.ports.len();
        let rot = pkt.dst.index();
        let mut local = None;
        for i in 0..np {
            let p = (i + rot) % np;
            if let Peer::Router { router, .. } = info.ports[p] {
                if self.is_dead(r, PortIdx(p as u16)) {
                    continue;
                }
                if g.of[router.index()] == m {
                    local = Some(p);
                    break;
                }
                if local.is_none() && g.of[router.index()] == g.of[r.index()] && to_m(router) == 1 && to_m(r) == 2 {
                    local = Some(p);
                }
            }
        }
        match local {
            Some(p) => Ok(Choice {
                port: PortIdx(p as u16),
                vc: (pkt.hops.saturating_sub(1)).min(self.vcs as u16 - 1) as u8,
                enters_ring: false,
            }),
            None => self.step(topo, r, pkt, to_m),
        }
    }

    /// UGAL-L's choice at source router `r`: the detour through group `m` when the minimal
    /// path's first queue × its hops exceeds the detour's first queue × its hops plus
    /// `threshold`. A queue is the credits in use at the first output's VC 0 (the first hop's)
    /// counting the room waiting requests there have claimed; hops are router hops (the
    /// detour's: to the nearest router of `m`, plus the least from `m` to the destination).
    #[allow(clippy::too_many_arguments)]
    fn ugal_detours(
        &self,
        topo: &Topology,
        r: RouterId,
        dr: RouterId,
        m: u32,
        pkt: &Packet,
        threshold: u32,
        credits: &mut impl CreditView,
    ) -> bool {
        let g = self.groups.as_ref().expect("groups built for UGAL");
        let n = self.nrouters;
        let at = |x: RouterId, grp: u32| g.gdist[x.index() * g.g as usize + grp as usize] as u64;
        let to_d = |x: RouterId| self.dist[dr.index() * n + x.index()];
        let (Ok(min), Ok(det)) = (self.step(topo, r, pkt, to_d), self.step_to_group(topo, g, r, m, pkt)) else {
            return false;
        };
        let queue = |c: &mut dyn FnMut(PortIdx) -> u32, p: PortIdx| self.buffer_credits.saturating_sub(c(p)) as u64;
        let mut unclaimed = |p: PortIdx| credits.unclaimed(p, 0);
        let q_min = queue(&mut unclaimed, min.port);
        let q_det = queue(&mut unclaimed, det.port);
        let h_min = to_d(r) as u64;
        let h_det = at(r, m) + at(dr, m);
        q_min * h_min > q_det * h_det + threshold as u64
    }
}

/// Router hops from each router to the nearest router of each dragonfly group (router `r` in
/// group `r / a`), from the routers × routers distances `dist`.
fn group_distances(dist: &[u16], n: usize, a: u32, g: u32) -> Groups {
    let mut gdist = vec![u16::MAX; n * g as usize];
    for r in 0..n {
        for (x, &d) in dist[r * n..(r + 1) * n].iter().enumerate() {
            let slot = &mut gdist[r * g as usize + x / a as usize];
            *slot = (*slot).min(d);
        }
    }
    Groups {
        g,
        of: (0..n as u32).map(|r| r / a).collect(),
        gdist,
    }
}

/// Why a packet could not be routed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("no live path from router {router} to node {dst}")]
    Unreachable { router: RouterId, dst: NodeId },
    #[error("routing loop at router {router} toward node {dst}")]
    Loop { router: RouterId, dst: NodeId },
    #[error("node {node}'s cable to router {router} is down")]
    SourceCableDown { node: NodeId, router: RouterId },
    #[error("no multicast table for group {group} at input port {port} of router {router}")]
    NoMulticastTable {
        router: RouterId,
        port: PortIdx,
        group: u32,
    },
    /// On the cable leaving `router` by `port` (or the node cable at that port) when it, or a
    /// router at either end, failed.
    #[error("lost on the cable at router {router} port {port} when it failed")]
    LostInCable { router: RouterId, port: PortIdx },
    /// In a buffer of `router` when it failed.
    #[error("lost in router {router} when it failed")]
    LostInRouter { router: RouterId },
    /// Sent into a failed cable whose failure its sender had not yet detected (the cable leaves
    /// `router` by `port`; for a node's own cable, the router it is cabled to).
    #[error("sent into the failed cable at router {router} port {port} before the failure was detected")]
    SentIntoFailure { router: RouterId, port: PortIdx },
    /// Handed to [`crate::net::Network::inject`] with a source or destination node, or a rail,
    /// that the network does not have: a caller's error, refused before anything is counted.
    #[error("node {node} rail {rail} is not in the network ({nodes} nodes, {rails} rails)")]
    NoSuchEndpoint {
        node: NodeId,
        rail: u8,
        nodes: u32,
        rails: u8,
    },
}

impl RouteError {
    /// The cause as reports name it (`drops_by_reason` keys).
    pub fn cause(&self) -> &'static str {
        match self {
            RouteError::Unreachable { .. } => "unreachable",
            RouteError::Loop { .. } => "routing_loop",
            RouteError::SourceCableDown { .. } => "source_cable_down",
            RouteError::NoMulticastTable { .. } => "no_multicast_table",
            RouteError::LostInCable { .. } => "lost_in_cable",
            RouteError::LostInRouter { .. } => "lost_in_router",
            RouteError::SentIntoFailure { .. } => "sent_before_detection",
            RouteError::NoSuchEndpoint { .. } => "no_such_endpoint",
        }
    }

    /// Whether the packet was lost to a failure (in a failed component, or sent into one before
    /// it was detected), rather than refused for want of a route.
    pub fn is_loss(&self) -> bool {
        matches!(
            self,
            RouteError::LostInCable { .. } | RouteError::LostInRouter { .. } | RouteError::SentIntoFailure { .. }
        )
    }
}

fn bfs(topo: &Topology, s: usize, dead: &[bool], base: &[u32], out: &mut [u16]) {
    let mut q = std::collections::VecDeque::new();
    out[s] = 0;
    q.push_back(s);
    while let Some(u) = q.pop_front() {
        for (p, peer) in topo.routers[u].ports.iter().enumerate() {
            if let Peer::Router { router, .. } = *peer {
                let v = router.index();
                if !dead[base[u] as usize + p] && out[v] == u16::MAX {
                    out[v] = out[u] + 1;
                    q.push_back(v);
                }
            }
        }
    }
}

fn build_trees(topo: &Topology) -> Trees {
    let nr = topo.routers.len();
    let mut leaf_of_router = vec![u32::MAX; nr];
    let mut leaf_router = Vec::new();
    for (i, r) in topo.routers.iter().enumerate() {
        if r.kinds.contains(&PortKind::Terminal) {
            leaf_of_router[i] = leaf_router.len() as u32;
            leaf_router.push(RouterId(i as u32));
        }
    }
    let leaves = leaf_router.len();
    let words = leaves.div_ceil(64);
    // reach[r]: bitset of leaves at or below r, computed by memoised DFS on down ports.
    let mut reach: Vec<Option<Vec<u64>>> = vec![None; nr];
    fn visit(topo: &Topology, r: usize, words: usize, leaf_of: &[u32], reach: &mut Vec<Option<Vec<u64>>>) {
        if reach[r].is_some() {
            return;
        }
        let mut set = vec![0u64; words];
        if leaf_of[r] != u32::MAX {
            let l = leaf_of[r] as usize;
            set[l / 64] |= 1 << (l % 64);
        }
        for (p, k) in topo.routers[r].kinds.iter().enumerate() {
            if *k == PortKind::Down {
                if let Peer::Router { router, .. } = topo.routers[r].ports[p] {
                    visit(topo, router.index(), words, leaf_of, reach);
                    let child = reach[router.index()].as_ref().expect("visited");
                    for (a, b) in set.iter_mut().zip(child) {
                        *a |= *b;
                    }
                }
            }
        }
        reach[r] = Some(set);
    }
    for r in 0..nr {
        visit(topo, r, words, &leaf_of_router, &mut reach);
    }
    let mut down: Vec<Box<[PortIdx]>> = Vec::with_capacity(nr * leaves);
    for r in 0..nr {
        let info = &topo.routers[r];
        for l in 0..leaves {
            let ports: Vec<PortIdx> = info
                .kinds
                .iter()
                .enumerate()
                .filter(|(p, k)| {
                    **k == PortKind::Down
                        && matches!(info.ports[*p], Peer::Router { router, .. }
                            if reach[router.index()].as_ref().is_some_and(|s| s[l / 64] >> (l % 64) & 1 == 1))
                })
                .map(|(p, _)| PortIdx(p as u16))
                .collect();
            down.push(ports.into_boxed_slice());
        }
    }
    let mut sibling = vec![u32::MAX; leaves];
    for (l, &r) in leaf_router.iter().enumerate() {
        let info = &topo.routers[r.index()];
        for (p, k) in info.kinds.iter().enumerate() {
            if *k == PortKind::Sibling {
                if let Peer::Router { router, .. } = info.ports[p] {
                    sibling[l] = leaf_of_router[router.index()];
                }
            }
        }
    }
    let ports_of = |kind: PortKind| -> Vec<Box<[PortIdx]>> {
        topo.routers
            .iter()
            .map(|r| {
                r.kinds
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| **k == kind)
                    .map(|(p, _)| PortIdx(p as u16))
                    .collect()
            })
            .collect()
    };
    let ups = ports_of(PortKind::Up);
    let sibs = ports_of(PortKind::Sibling);
    // Levels by breadth-first search upward from the leaves.
    let mut level = vec![u32::MAX; nr];
    let mut frontier: Vec<usize> = leaf_router.iter().map(|&r| r.index()).collect();
    for &r in &frontier {
        level[r] = 0;
    }
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for &r in &frontier {
            for &p in ups[r].iter() {
                if let Peer::Router { router, .. } = topo.routers[r].ports[p.index()] {
                    if level[router.index()] == u32::MAX {
                        level[router.index()] = level[r] + 1;
                        next.push(router.index());
                    }
                }
            }
        }
        frontier = next;
    }
    for l in level.iter_mut() {
        if *l == u32::MAX {
            *l = 0;
        }
    }
    let up_div = (0..nr)
        .map(|r| {
            if ups[r].is_empty() {
                1
            } else {
                ups[r].len().pow(level[r]).max(1)
            }
        })
        .collect();
    Trees {
        up_div,
        leaf_of_router,
        leaf_router,
        down,
        sibling,
        ups,
        sibs,
    }
}
#[cfg(test)]
#[path = "routing_tests.rs"]
mod tests;
