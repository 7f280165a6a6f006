//! Deadlock freedom and loop freedom of every routing function, on its channel dependency graph.
//!
//! A channel is (router, output port, VC) of a router–router link; ejection into a node never
//! blocks and injection channels have no predecessor, so neither can lie on a cycle. There is a
//! dependency c1 → c2 when a packet whose head sits in the buffer c1 feeds may request c2 next.
//! The graph is built by driving [`Routing::route`] from every source to every destination, on
//! every rail and VC class, and — for adaptive routing — with credit views that make each
//! candidate the best one in turn, so every choice the routing can return is followed.
//!
//! What is checked, per scheme:
//! - **Acyclic** (Dally & Seitz 1987): dateline tori, meshes, hypercubes, up*/down* and table
//!   routing on trees, minimal routing on dragonflies with VC = hop, source routing.
//! - **Bubble** (Puente et al., bubble flow control on DOR tori, virtual cut-through): every
//!   cycle lies inside one ring (one dimension, direction, VC and line of routers), and every
//!   dependency into such a ring from outside it — injection or a change of dimension — is a
//!   request marked `enters_ring`, for which the router asks the packet's credits plus one
//!   maximum-size packet of private credits (the bubble; see `net_tests.rs`).
//! - **Minimal adaptive** (Duato's condition for cut-through networks): the escape channels
//!   (VC 0, or VCs 0–1 with dateline) with their direct dependencies are acyclic, or satisfy the
//!   bubble condition; and from every state a packet can take an escape channel (a credit view
//!   with no free adaptive credits yields one).
//!
//! Dimension-order routing, source routes built from it and the escape channels of minimal
//! adaptive routing also correct dimensions in increasing order. In all cases every path ends at
//! its destination node (or, with failed links, is dropped for want of a live route) and no path
//! revisits a routing state; minimal algorithms take shortest paths, the others at most twice the
//! diameter plus one (plus one more around failed links). The configurations checked are all
//! those [`FabricConfig::validate`] accepts with 1 to 4 VCs. A torus with dimension-order routing
//! and no deadlock scheme must fail the checks (the detector finds its ring cycles).

mod common;
use common::gft;
use hpcnet_des::{BitsPerSec, Bytes, EventQueue, SimTime};
use hpcnet_fabric::config::*;
use hpcnet_fabric::routing::{Choice, CreditView, Idle, RouteError, Routing};
use hpcnet_fabric::topology::{
    build, CrossbarConfig, DragonflyConfig, FatTreeConfig, GridConfig, HypercubeConfig, LeafSpineConfig, NodeId, Peer,
    PortIdx, PortKind, RouterId, Shape, Topology, TopologyConfig,
};
use hpcnet_fabric::{NetEvent, Network, Packet};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// (router, output port, VC).
type Channel = (RouterId, PortIdx, u8);

/// The channel leaving router `r` by port `p` on virtual channel `vc`.
fn ch(r: u32, p: u16, vc: u8) -> Channel {
    (RouterId(r), PortIdx(p), vc)
}

/// A channel dependency graph. The flag of an edge is true when *every* request observed along
/// it was marked `enters_ring`.
#[derive(Default, Debug)]
struct Cdg {
    edges: BTreeMap<Channel, BTreeMap<Channel, bool>>,
    /// First router–router channel of paths (requested from the router a packet was injected
    /// into), with the same flag.
    first: BTreeMap<Channel, bool>,
}

impl Cdg {
    fn add(&mut self, from: Option<Channel>, to: Channel, enters: bool) {
        self.edges.entry(to).or_default();
        let slot = match from {
            Some(f) => self.edges.entry(f).or_default(),
            None => &mut self.first,
        };
        slot.entry(to).and_modify(|e| *e &= enters).or_insert(enters);
    }

    /// The subgraph on the channels `keep` accepts.
    fn restrict(&self, keep: impl Fn(Channel) -> bool) -> Cdg {
        let sub = |m: &BTreeMap<Channel, bool>| m.iter().filter(|(c, _)| keep(**c)).map(|(c, e)| (*c, *e)).collect();
        Cdg {
            edges: self
                .edges
                .iter()
                .filter(|(c, _)| keep(**c))
                .map(|(c, m)| (*c, sub(m)))
                .collect(),
            first: sub(&self.first),
        }
    }

    /// Strongly connected components with more than one channel or a self-loop (Tarjan).
    fn cycles(&self) -> Vec<Vec<Channel>> {
        struct Tarjan<'a> {
            g: &'a BTreeMap<Channel, BTreeMap<Channel, bool>>,
            index: BTreeMap<Channel, usize>,
            low: BTreeMap<Channel, usize>,
            stack: Vec<Channel>,
            on_stack: BTreeSet<Channel>,
            out: Vec<Vec<Channel>>,
        }
        impl Tarjan<'_> {
            fn visit(&mut self, v: Channel) {
                let i = self.index.len();
                self.index.insert(v, i);
                self.low.insert(v, i);
                self.stack.push(v);
                self.on_stack.insert(v);
                for &w in self.g[&v].keys() {
                    if !self.index.contains_key(&w) {
                        self.visit(w);
                        let lw = self.low[&w];
                        let lv = self.low.get_mut(&v).expect("visited");
                        *lv = (*lv).min(lw);
                    } else if self.on_stack.contains(&w) {
                        let iw = self.index[&w];
                        let lv = self.low.get_mut(&v).expect("visited");
                        *lv = (*lv).min(iw);
                    }
                }
                if self.low[&v] == self.index[&v] {
                    let mut scc = Vec::new();
                    loop {
                        let w = self.stack.pop().expect("v is on the stack");
                        self.on_stack.remove(&w);
                        scc.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if scc.len() > 1 || self.g[&v].contains_key(&v) {
                        scc.sort();
                        self.out.push(scc);
                    }
                }
            }
        }
        let mut t = Tarjan {
            g: &self.edges,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            out: Vec::new(),
        };
        for &v in self.edges.keys() {
            if !t.index.contains_key(&v) {
                t.visit(v);
            }
        }
        t.out
    }

    /// Dally & Seitz: no cycle at all.
    fn check_acyclic(&self) -> Result<(), String> {
        match self.cycles().first() {
            None => Ok(()),
            Some(c) => Err(format!(
                "dependency cycle through {} channels, e.g. {:?}",
                c.len(),
                &c[..c.len().min(6)]
            )),
        }
    }

    /// Bubble flow control on the channels `keep` accepts: every cycle among them stays inside
    /// one ring, and every dependency entering that ring from outside it (from any channel, or
    /// the first request after injection) enters with a bubble.
    fn check_bubble(&self, topo: &Topology, keep: impl Fn(Channel) -> bool) -> Result<(), String> {
        for scc in self.restrict(keep).cycles() {
            let ring = ring_of(topo, scc[0]);
            if ring.is_none() || scc.iter().any(|&c| ring_of(topo, c) != ring) {
                return Err(format!("dependency cycle spans more than one ring: {scc:?}"));
            }
            let inside: BTreeSet<Channel> = scc.iter().copied().collect();
            for (from, tos) in &self.edges {
                if inside.contains(from) {
                    continue;
                }
                for (to, enters) in tos {
                    if inside.contains(to) && !enters {
                        return Err(format!(
                            "{from:?} → {to:?} enters the ring of {to:?} without a bubble (enters_ring = false)"
                        ));
                    }
                }
            }
            for (to, enters) in &self.first {
                if inside.contains(to) && !enters {
                    return Err(format!("injection enters the ring of {to:?} without a bubble"));
                }
            }
        }
        Ok(())
    }
}

impl Cdg {
    /// Dimension order among the channels `keep` accepts: a dependency between two dimension
    /// channels goes to a higher dimension, or stays in the same dimension and direction.
    fn check_dimension_order(&self, topo: &Topology, keep: impl Fn(Channel) -> bool) -> Result<(), String> {
        let dim = |(r, p, _): Channel| match topo.routers[r.index()].kinds[p.index()] {
            PortKind::Dim { dim, plus } => Some((dim, plus)),
            _ => None,
        };
        for (&from, tos) in self.edges.iter().filter(|(c, _)| keep(**c)) {
            for &to in tos.keys().filter(|c| keep(**c)) {
                if let (Some((d1, p1)), Some((d2, p2))) = (dim(from), dim(to)) {
                    if d2 < d1 || (d2 == d1 && p2 != p1) {
                        return Err(format!(
                            "{from:?} (dimension {d1}, plus {p1}) → {to:?} (dimension {d2}, plus {p2}) breaks dimension order"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The ring a torus channel belongs to: (dimension, direction, VC, router coordinates in the
/// other dimensions). None for any other port.
fn ring_of(topo: &Topology, (r, p, vc): Channel) -> Option<(u8, bool, u8, Vec<u32>)> {
    let info = &topo.routers[r.index()];
    match info.kinds[p.index()] {
        PortKind::Dim { dim, plus } if matches!(topo.shape, Shape::Torus { wrap: true, .. }) => {
            let mut others = info.coords.clone();
            others.remove(dim as usize);
            Some((dim, plus, vc, others))
        }
        _ => None,
    }
}

/// A credit view in which only (port, VC) has room.
struct Only(PortIdx, u8);
impl CreditView for Only {
    fn free(&mut self, port: PortIdx, vc: u8) -> u32 {
        if (port, vc) == (self.0, self.1) {
            1 << 20
        } else {
            0
        }
    }
}

/// A credit view with no room anywhere.
struct Full;
impl CreditView for Full {
    fn free(&mut self, _: PortIdx, _: u8) -> u32 {
        0
    }
}

/// What a routing function promises about its dependency graph.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Claim {
    Acyclic,
    Bubble,
    /// Minimal adaptive with escape VCs below `first_adaptive`; the escape part is acyclic
    /// (`bubble = false`) or a bubble network.
    Escape {
        first_adaptive: u8,
        bubble: bool,
    },
    /// No deadlock scheme on a ring: nothing is promised.
    Nothing,
}

fn claim(topo: &Topology, routing: &RoutingConfig) -> Claim {
    let wrap = matches!(topo.shape, Shape::Torus { wrap: true, .. });
    match routing {
        RoutingConfig::DimensionOrder { deadlock, .. } if wrap => match deadlock {
            DeadlockAvoidance::Bubble => Claim::Bubble,
            DeadlockAvoidance::Dateline => Claim::Acyclic,
            DeadlockAvoidance::None => Claim::Nothing,
        },
        RoutingConfig::MinimalAdaptive {
            deadlock: DeadlockAvoidance::None,
            ..
        } if wrap => Claim::Nothing,
        RoutingConfig::MinimalAdaptive { deadlock, .. } => Claim::Escape {
            first_adaptive: if *deadlock == DeadlockAvoidance::Dateline { 2 } else { 1 },
            bubble: wrap && *deadlock == DeadlockAvoidance::Bubble,
        },
        // Source routing follows the family's default algorithm (bubble on a torus).
        RoutingConfig::Source if wrap => Claim::Bubble,
        _ => Claim::Acyclic,
    }
}

/// Whether the algorithm takes shortest router paths on this topology.
fn minimal(topo: &Topology) -> bool {
    !matches!(topo.shape, Shape::GeneralizedFatTree { sibling_links, .. } if sibling_links > 0)
}

fn fabric(routing: RoutingConfig, vcs: u8) -> FabricConfig {
    FabricConfig {
        link: LinkConfig {
            lanes: 1,
            lane_rate: BitsPerSec::gbps(10.0),
            encoding: Encoding::None,
            latency: SimTime::from_ns(10),
            switching: Switching::CutThrough,
            ..LinkConfig::default()
        },
        link_overrides: Vec::new(),
        router: RouterConfig {
            vcs,
            credit_unit: Bytes(64),
            private_credits: 16,
            shared_credits: 0,
            latency: SimTime::from_ns(20),
            arbitration: Arbitration::RoundRobin,
            vc_select: VcSelect::RoundRobin,
            node_injection: NodeInjection::PerVc,
            multicast_tables: 32,
        },
        packet: PacketConfig {
            header: Bytes(16),
            max_payload: Bytes(256),
        },
        routing,
        faults: FaultConfig::default(),
    }
}

/// Every routing configuration the crate knows, to be filtered by validation.
fn all_routings() -> Vec<RoutingConfig> {
    use DeadlockAvoidance::*;
    use Selection::*;
    let mut v = Vec::new();
    let tie = TieRule::default();
    for deadlock in [Bubble, Dateline, None] {
        v.push(RoutingConfig::DimensionOrder { deadlock, tie });
        v.push(RoutingConfig::MinimalAdaptive { deadlock, tie });
    }
    for selection in [Deterministic, Adaptive] {
        v.push(RoutingConfig::UpDown { selection });
        v.push(RoutingConfig::Table { selection });
    }
    v.push(RoutingConfig::Minimal);
    v.push(RoutingConfig::Source);
    v
}

/// The routing choices besides the defaults of [`all_routings`]: the other tie rules of
/// dimension-order and minimal adaptive routing, and oblivious random up ports on trees.
fn oblivious_routings() -> Vec<RoutingConfig> {
    use DeadlockAvoidance::*;
    let mut v = Vec::new();
    for deadlock in [Bubble, Dateline, None] {
        for tie in [TieRule::Positive, TieRule::Random] {
            v.push(RoutingConfig::DimensionOrder { deadlock, tie });
            v.push(RoutingConfig::MinimalAdaptive { deadlock, tie });
        }
    }
    v.push(RoutingConfig::UpDown {
        selection: Selection::Random,
    });
    v.push(RoutingConfig::Table {
        selection: Selection::Random,
    });
    v
}

/// A maximum-size packet as the network sizes it (its credit count is set by the network at
/// injection and is what adaptive routing compares free credits with): one is sent across
/// an idle copy of the fabric and its delivered copy serves as the template.
fn sized_packet(topo: &Topology, cfg: &FabricConfig) -> Packet {
    let mut net = Network::new(topo.clone(), cfg.clone()).expect("validated configuration");
    let mut q = EventQueue::<NetEvent>::new();
    let dst = NodeId((topo.nodes.len() - 1) as u32);
    let pkt = Packet::new(
        0,
        NodeId(0),
        dst,
        cfg.packet.max_payload.0 as u32,
        cfg.packet.header.0 as u32,
        SimTime::ZERO,
    );
    let mut sink = hpcnet_fabric::Collect::default();
    net.inject(&mut q, pkt, &mut sink).expect("idle network routes");
    while let Some((_, ev)) = q.pop() {
        net.handle(&mut q, ev, &mut sink);
    }
    assert_eq!(sink.delivered.len(), 1, "one packet delivered on an idle network");
    sink.delivered.pop().expect("delivered").0
}

/// The result of exploring one routing function.
struct Explored {
    cdg: Cdg,
    /// Routing states visited (head of a packet routable at a router).
    states: usize,
}

/// Router hop counts between all routers over live links (`u32::MAX`: unreachable).
fn live_distances(topo: &Topology, dead: &[(RouterId, PortIdx)]) -> Vec<Vec<u32>> {
    let n = topo.routers.len();
    let is_dead = |r: RouterId, p: PortIdx| {
        dead.iter().any(|&(dr, dp)| {
            (dr, dp) == (r, p) || topo.routers[dr.index()].ports[dp.index()] == Peer::Router { router: r, port: p }
        })
    };
    (0..n)
        .map(|s| {
            let mut dist = vec![u32::MAX; n];
            dist[s] = 0;
            let mut queue = std::collections::VecDeque::from([s]);
            while let Some(u) = queue.pop_front() {
                for (p, peer) in topo.routers[u].ports.iter().enumerate() {
                    if let Peer::Router { router, .. } = *peer {
                        if !is_dead(RouterId(u as u32), PortIdx(p as u16)) && dist[router.index()] == u32::MAX {
                            dist[router.index()] = dist[u] + 1;
                            queue.push_back(router.index());
                        }
                    }
                }
            }
            dist
        })
        .collect()
}

/// Builds the dependency graph of `routing` on `topo` from every (source, destination, rail,
/// class), checking on the way that every path ends at its destination within the bound, that
/// deterministic routing ignores credits, and (with `escape`) that an escape channel is always
/// offered. With links in `dead`, a packet may also be dropped (no live route), but never loop.
fn explore(
    topo: &Topology,
    routing: &Routing,
    template: &Packet,
    vcs: u8,
    adaptive: bool,
    escape: Option<u8>,
    dead: &[(RouterId, PortIdx)],
) -> Result<Explored, String> {
    let nodes = topo.nodes.len() as u32;
    let rails = topo.rails.max(1);
    let dist = live_distances(topo, dead);
    // A detour through a sibling leaf may add a hop beyond twice the diameter.
    let slack = usize::from(!dead.is_empty());
    let diameter = dist
        .iter()
        .flatten()
        .copied()
        .filter(|&d| d != u32::MAX)
        .max()
        .unwrap_or(0) as usize;
    let bound = 2 * diameter + 1 + slack;
    // Random bits: every combination of tie directions over up to three dimensions (random
    // tie rule), or 16 draws, which reach every up port of the small trees checked (random
    // selection).
    let salts: Vec<u8> = match (routing.needs_salt(), routing.expectation_salts().len()) {
        (false, _) => vec![0],
        (true, 2) => (0..8).collect(),
        (true, _) => (0..16).collect(),
    };
    let mut cdg = Cdg::default();
    let mut states = 0;
    for src in 0..nodes {
        for dst in (0..nodes).filter(|&d| d != src) {
            for rail in 0..rails {
                for (class, salt) in (0..routing.classes().max(1)).flat_map(|c| salts.iter().map(move |&s| (c, s))) {
                    let mut pkt = template.clone();
                    pkt.src = NodeId(src);
                    pkt.dst = NodeId(dst);
                    pkt.rail = rail;
                    pkt.hops = 0;
                    pkt.salt = salt;
                    match routing.on_inject(topo, &mut pkt, class) {
                        Ok(()) => {}
                        Err(RouteError::Unreachable { .. } | RouteError::SourceCableDown { .. })
                            if !dead.is_empty() =>
                        {
                            continue;
                        }
                        Err(e) => return Err(format!("{src}->{dst} rail {rail}: injection: {e}")),
                    }
                    let (r0, p0) = routing.attach(NodeId(src), rail);
                    let (dr, _) = routing.attach(NodeId(dst), rail);
                    let shortest = dist[r0.index()][dr.index()] as usize + 1;
                    let what = format!("{src}->{dst} rail {rail} class {class}");
                    // Depth-first over routing states: (router, input port, previous channel, packet).
                    let mut seen: HashSet<(RouterId, PortIdx, String)> = HashSet::new();
                    let mut stack = vec![(r0, p0, None::<Channel>, pkt, 1usize)];
                    while let Some((r, in_port, prev, mut pkt, routers)) = stack.pop() {
                        pkt.hops += 1;
                        if !seen.insert((r, in_port, format!("{pkt:?}"))) {
                            continue;
                        }
                        states += 1;
                        let mut options: Vec<(Choice, Packet)> = Vec::new();
                        // A choice, or None when the packet is dropped for want of a live route.
                        let mut try_view = |view: &mut dyn FnMut(&mut Packet) -> Result<Choice, RouteError>| {
                            let mut next = pkt.clone();
                            let c = match view(&mut next) {
                                Ok(c) => c,
                                Err(RouteError::Unreachable { .. }) if !dead.is_empty() => return Ok(None),
                                Err(e) => return Err(format!("{what}: {e}")),
                            };
                            if !options
                                .iter()
                                .any(|(oc, op)| *oc == c && format!("{op:?}") == format!("{next:?}"))
                            {
                                options.push((c, next));
                            }
                            Ok::<_, String>(Some(c))
                        };
                        let idle = try_view(&mut |p| routing.route(topo, r, in_port, p, &mut Idle))?;
                        let full = try_view(&mut |p| routing.route(topo, r, in_port, p, &mut Full))?;
                        if !adaptive && idle != full {
                            return Err(format!(
                                "{what}: deterministic routing at router {r} depends on credits: {idle:?} vs {full:?}"
                            ));
                        }
                        if let (Some(first_adaptive), Some(full)) = (escape, full) {
                            let ejects = matches!(topo.routers[r.index()].ports[full.port.index()], Peer::Node { .. });
                            if !ejects && full.vc >= first_adaptive {
                                return Err(format!(
                                    "{what}: at router {r} no escape channel is offered without credits: {full:?}"
                                ));
                            }
                        }
                        if adaptive {
                            for (p, peer) in topo.routers[r.index()].ports.iter().enumerate() {
                                if matches!(peer, Peer::Router { .. }) {
                                    for vc in 0..vcs {
                                        try_view(&mut |pk| {
                                            routing.route(topo, r, in_port, pk, &mut Only(PortIdx(p as u16), vc))
                                        })?;
                                    }
                                }
                            }
                        }
                        for (c, mut next) in options {
                            if c.vc >= vcs {
                                return Err(format!("{what}: router {r} chose VC {} of {vcs}", c.vc));
                            }
                            let here = (r, c.port, c.vc);
                            match topo.routers[r.index()].ports[c.port.index()] {
                                Peer::Router { router, port } => {
                                    cdg.add(prev, here, c.enters_ring);
                                    if routers >= bound {
                                        return Err(format!(
                                            "{what}: path longer than {bound} routers (twice the diameter {diameter} plus one): a routing loop"
                                        ));
                                    }
                                    next.vc = c.vc;
                                    stack.push((router, port, Some(here), next, routers + 1));
                                }
                                Peer::Node { node, rail: nr } if node == NodeId(dst) && nr == rail => {
                                    if dead.is_empty() && minimal(topo) && routers != shortest {
                                        return Err(format!(
                                            "{what}: path through {routers} routers, shortest is {shortest}"
                                        ));
                                    }
                                }
                                other => {
                                    return Err(format!("{what}: router {r} port {} leads to {other:?}", c.port));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(Explored { cdg, states })
}

/// Outcome of checking one (topology, routing, VCs).
#[derive(Debug)]
enum Outcome {
    /// The configuration is rejected by validation (not a routing the fabric offers).
    Rejected,
    /// Checked against its claim; states explored.
    Checked(Claim, usize),
}

/// Validates the configuration with the links `dead` failed and, if it is accepted, checks its
/// claim.
fn check(topo: &Topology, routing: &RoutingConfig, vcs: u8, dead: &[(RouterId, PortIdx)]) -> Result<Outcome, String> {
    let healthy = fabric(routing.clone(), vcs);
    let mut cfg = healthy.clone();
    cfg.faults.failed_links = dead.iter().map(|&(router, port)| FailedLink { router, port }).collect();
    if cfg.validate(topo).is_err() {
        return Ok(Outcome::Rejected);
    }
    let Ok(r) = Routing::new(topo, routing, vcs, dead) else {
        return Ok(Outcome::Rejected);
    };
    let template = sized_packet(topo, &healthy);
    let claim = claim(topo, routing);
    let adaptive = matches!(
        routing,
        RoutingConfig::MinimalAdaptive { .. }
            | RoutingConfig::UpDown {
                selection: Selection::Adaptive
            }
            | RoutingConfig::Table {
                selection: Selection::Adaptive
            }
    );
    let escape = match claim {
        Claim::Escape { first_adaptive, .. } => Some(first_adaptive),
        _ => None,
    };
    let ctx = |e: String| format!("{} with {routing:?}, {vcs} VCs, failed links {dead:?}: {e}", topo.name);
    let ex = explore(topo, &r, &template, vcs, adaptive, escape, dead).map_err(ctx)?;
    match claim {
        Claim::Acyclic => ex.cdg.check_acyclic(),
        Claim::Bubble => ex.cdg.check_bubble(topo, |_| true),
        Claim::Escape { first_adaptive, bubble } => {
            let escape = |(_, _, vc): Channel| vc < first_adaptive;
            if bubble {
                ex.cdg.check_bubble(topo, escape)
            } else {
                ex.cdg.restrict(escape).check_acyclic()
            }
        }
        Claim::Nothing => Ok(()),
    }
    .map_err(ctx)?;
    // Dimension-order routing, source routes built from it, and the escape channels of minimal
    // adaptive routing correct dimensions in increasing order.
    let dor_based = matches!(topo.shape, Shape::Torus { .. } | Shape::Hypercube { .. })
        && matches!(
            routing,
            RoutingConfig::DimensionOrder { .. } | RoutingConfig::Source | RoutingConfig::MinimalAdaptive { .. }
        );
    if dor_based {
        let first_adaptive = match routing {
            RoutingConfig::MinimalAdaptive {
                deadlock: DeadlockAvoidance::Dateline,
                ..
            } => 2,
            RoutingConfig::MinimalAdaptive { .. } => 1,
            _ => u8::MAX,
        };
        ex.cdg
            .check_dimension_order(topo, |(_, _, vc)| vc < first_adaptive)
            .map_err(ctx)?;
    }
    Ok(Outcome::Checked(claim, ex.states))
}

/// Checks every routing configuration valid on `tc` with 1 to 4 VCs and the router links
/// `failed` (indices into the topology's link list, modulo its length) down; returns the claims
/// checked.
fn check_all(tc: &TopologyConfig, failed: &[usize]) -> Result<Vec<Claim>, String> {
    let topo = build(tc).map_err(|e| format!("{tc:?}: {e}"))?;
    let links: Vec<_> = topo.links().collect();
    let mut dead: Vec<(RouterId, PortIdx)> = Vec::new();
    if !links.is_empty() {
        for &i in failed {
            let a = links[i % links.len()].a;
            if !dead.contains(&a) {
                dead.push(a);
            }
        }
    }
    let mut claims = Vec::new();
    for routing in all_routings() {
        for vcs in 1..=4 {
            if let Outcome::Checked(c, _) = check(&topo, &routing, vcs, &dead)? {
                claims.push(c);
            }
        }
    }
    Ok(claims)
}

fn grid(k: &[u32], conc: u32, wrap: bool) -> TopologyConfig {
    let g = GridConfig {
        k: k.to_vec(),
        concentration: conc,
        radix: None,
    };
    if wrap {
        TopologyConfig::Torus(g)
    } else {
        TopologyConfig::Mesh(g)
    }
}

/// One small instance of every family.
fn fixed_instances() -> Vec<TopologyConfig> {
    vec![
        grid(&[5], 1, true),
        grid(&[4, 3], 1, true),
        grid(&[2, 3, 4], 1, true),
        grid(&[4, 4], 2, false),
        grid(&[3, 2, 2], 1, false),
        TopologyConfig::Hypercube(HypercubeConfig {
            n: 3,
            concentration: 2,
            radix: None,
        }),
        TopologyConfig::FatTree(FatTreeConfig {
            k: 2,
            n: 3,
            radix: None,
        }),
        TopologyConfig::FatTree(FatTreeConfig {
            k: 3,
            n: 2,
            radix: None,
        }),
        TopologyConfig::LeafSpine(LeafSpineConfig {
            leaves: 3,
            spines: 2,
            nodes_per_leaf: 2,
            links_per_spine: 2,
            nodes: None,
            radix: None,
        }),
        gft(2, 4, 2, 2, 2),
        gft(1, 2, 3, 2, 1),
        TopologyConfig::Dragonfly(DragonflyConfig {
            a: 2,
            p: 1,
            h: 1,
            g: None,
            radix: None,
        }),
        TopologyConfig::Dragonfly(DragonflyConfig {
            a: 3,
            p: 1,
            h: 1,
            g: Some(3),
            radix: None,
        }),
        TopologyConfig::Crossbar(CrossbarConfig { ports: 3, radix: None }),
    ]
}

/// Every family with every routing configuration it accepts; between them the fixed instances
/// exercise every scheme (so a new variant, or a validation change that rejects one, shows here).
#[test]
fn every_family_and_valid_routing_is_deadlock_free_on_a_fixed_instance() {
    let mut claims = BTreeSet::new();
    for tc in fixed_instances() {
        let checked = check_all(&tc, &[]).unwrap_or_else(|e| panic!("{e}"));
        assert!(!checked.is_empty(), "no routing configuration accepted on {tc:?}");
        claims.extend(checked.iter().map(|c| format!("{c:?}")));
    }
    let expect = [
        "Acyclic",
        "Bubble",
        "Escape { first_adaptive: 1, bubble: false }",
        "Escape { first_adaptive: 1, bubble: true }",
        "Escape { first_adaptive: 2, bubble: false }",
        "Nothing",
    ];
    assert_eq!(claims.into_iter().collect::<Vec<_>>(), expect);
}

/// A dependency from dimension 1 back to dimension 0 is reported (on a mesh, where it would
/// not make a cycle by itself).
#[test]
fn dimension_order_checker_catches_a_step_back() {
    let topo = build(&grid(&[3, 3], 1, false)).unwrap();
    let mut g = Cdg::default();
    // Router 0: port 0 = +x, port 2 = +y; router 3 = (0, 1): port 0 = +x.
    g.add(Some((RouterId(0), PortIdx(0), 0)), (RouterId(1), PortIdx(2), 0), false);
    assert!(g.check_dimension_order(&topo, |_| true).is_ok());
    g.add(Some((RouterId(0), PortIdx(2), 0)), (RouterId(3), PortIdx(0), 0), false);
    let err = g.check_dimension_order(&topo, |_| true).unwrap_err();
    assert!(err.contains("breaks dimension order"), "{err}");
    assert!(g.check_acyclic().is_ok());
}

#[test]
fn cycle_detector_finds_a_hand_made_cycle_and_accepts_a_dag() {
    let mut g = Cdg::default();
    g.add(None, (RouterId(0), PortIdx(0), 0), true);
    g.add(Some((RouterId(0), PortIdx(0), 0)), (RouterId(1), PortIdx(0), 0), false);
    g.add(Some((RouterId(1), PortIdx(0), 0)), (RouterId(2), PortIdx(0), 0), false);
    assert!(g.check_acyclic().is_ok());
    g.add(Some((RouterId(2), PortIdx(0), 0)), (RouterId(0), PortIdx(0), 0), false);
    assert_eq!(g.cycles(), vec![vec![ch(0, 0, 0), ch(1, 0, 0), ch(2, 0, 0)]]);
    assert!(g.check_acyclic().is_err());
    let mut s = Cdg::default();
    s.add(Some((RouterId(3), PortIdx(1), 0)), (RouterId(3), PortIdx(1), 0), false);
    assert_eq!(s.cycles(), vec![vec![ch(3, 1, 0)]], "a self-loop is a cycle");
}

/// Without a deadlock scheme, dimension order on rings of 4 or more routers has cyclic
/// dependencies and no bubble: the detector must report both (rings of 2 and 3 routers have
/// only one-hop paths in each dimension, hence no dependency inside a ring).
#[test]
fn torus_without_deadlock_scheme_is_caught() {
    let none = RoutingConfig::DimensionOrder {
        deadlock: DeadlockAvoidance::None,
        tie: TieRule::Positive,
    };
    for k in [vec![4], vec![5], vec![4, 4], vec![3, 5]] {
        let topo = build(&grid(&k, 1, true)).unwrap();
        let cfg = fabric(none.clone(), 1);
        cfg.validate(&topo)
            .expect("the scheme 'none' is accepted (to demonstrate deadlock)");
        let r = Routing::new(&topo, &none, 1, &[]).unwrap();
        let ex = explore(&topo, &r, &sized_packet(&topo, &cfg), 1, false, None, &[]).unwrap();
        let cycles = ex.cdg.cycles();
        assert!(!cycles.is_empty(), "k = {k:?}: no cycle found");
        for c in &cycles {
            let ring = ring_of(&topo, c[0]);
            assert!(c.iter().all(|&ch| ring_of(&topo, ch) == ring), "{c:?}");
        }
        assert!(ex.cdg.check_acyclic().is_err());
        let err = ex.cdg.check_bubble(&topo, |_| true).unwrap_err();
        assert!(err.contains("without a bubble"), "{err}");
    }
    // Rings of 3: every destination is one hop away in each dimension.
    let topo = build(&grid(&[3, 3], 1, true)).unwrap();
    let r = Routing::new(&topo, &none, 1, &[]).unwrap();
    let ex = explore(&topo, &r, &sized_packet(&topo, &fabric(none, 1)), 1, false, None, &[]).unwrap();
    assert!(ex.cdg.check_acyclic().is_ok());
}

/// A 4×4 torus with dateline passes under dimension order and minimal adaptive routing, and the
/// adaptive exploration really follows more than one path (states beyond the deterministic count).
#[test]
fn schemes_on_a_4x4_torus() {
    let topo = build(&grid(&[4, 4], 1, true)).unwrap();
    let det = check(
        &topo,
        &RoutingConfig::DimensionOrder {
            deadlock: DeadlockAvoidance::Dateline,
            tie: TieRule::default(),
        },
        2,
        &[],
    )
    .unwrap();
    let ada = check(
        &topo,
        &RoutingConfig::MinimalAdaptive {
            deadlock: DeadlockAvoidance::Dateline,
            tie: TieRule::default(),
        },
        3,
        &[],
    )
    .unwrap();
    let (Outcome::Checked(Claim::Acyclic, d), Outcome::Checked(Claim::Escape { .. }, a)) = (det, ada) else {
        panic!("both are valid configurations");
    };
    assert!(a > 2 * d, "adaptive explored {a} states, dimension order {d}");
    // Dateline dimension order uses both VCs of its class.
    let r = Routing::new(
        &topo,
        &RoutingConfig::DimensionOrder {
            deadlock: DeadlockAvoidance::Dateline,
            tie: TieRule::default(),
        },
        2,
        &[],
    )
    .unwrap();
    let cfg = fabric(
        RoutingConfig::DimensionOrder {
            deadlock: DeadlockAvoidance::Dateline,
            tie: TieRule::default(),
        },
        2,
    );
    let ex = explore(&topo, &r, &sized_packet(&topo, &cfg), 2, false, None, &[]).unwrap();
    let vcs: BTreeSet<u8> = ex.cdg.edges.keys().map(|c| c.2).collect();
    assert_eq!(vcs, BTreeSet::from([0, 1]));
}

/// The generalized fat tree's detours around failed links: with the links spine 2–leaf 1 and
/// spine 3–leaf 0 down, each spine reaches the leaf it lost through that leaf's sibling, so
/// packets cross the sibling link in both directions, without a dependency cycle.
/// The torus fault bypass keeps the bubble property: with one failed cable or router on a
/// 5×5×5 torus (detected, tables rewritten; odd rings, so every ring has dependency cycles of
/// its own), the dependency graph of every route — dimension
/// order for the pairs the failure leaves alone, first/last-step routes for the others — has
/// its cycles inside rings, entered with a bubble; the ring hops keep dimension order; and the
/// last steps, on the reserved VC, lead only to ejection.
#[test]
fn torus_fault_bypass_keeps_the_bubble_property() {
    use hpcnet_fabric::faults::{FaultAction, FaultEvent, FaultKind};
    let topo = build(&grid(&[5, 5, 5], 1, true)).unwrap();
    let routing = RoutingConfig::DimensionOrder {
        deadlock: DeadlockAvoidance::Bubble,
        tie: TieRule::Balanced,
    };
    let healthy = fabric(routing.clone(), 2);
    let template = sized_packet(&topo, &healthy);
    let fault = |kind, router: u32, port: Option<u16>| FaultEvent {
        at: SimTime::ZERO,
        kind,
        action: FaultAction::Fail,
        router: Some(RouterId(router)),
        port: port.map(PortIdx),
        plane: None,
        lanes: None,
    };
    for ev in [
        // Router 31 = (1, 1, 1), 32 = (2, 1, 1).
        fault(FaultKind::Router, 31, None),
        fault(FaultKind::Router, 32, None),
        fault(FaultKind::Cable, 31, Some(0)),
        fault(FaultKind::Cable, 0, Some(5)),
    ] {
        let mut cfg = healthy.clone();
        cfg.faults.torus_bypass = true;
        cfg.faults.events = vec![ev.clone()];
        cfg.faults.detection = SimTime::ZERO;
        cfg.faults.table_update = SimTime::ZERO;
        let mut net = Network::new(topo.clone(), cfg).unwrap();
        let mut q = EventQueue::<NetEvent>::new();
        net.schedule_faults(&mut q);
        let mut sink = hpcnet_fabric::Collect::default();
        while let Some((_, e)) = q.pop() {
            net.handle(&mut q, e, &mut sink);
        }
        let b = net.routing.bypass_table().expect("tables rewritten");
        assert!(b.rerouted() > 0 && b.last_steps > 0, "{ev:?}");
        let dead: Vec<(RouterId, PortIdx)> = (0..topo.routers.len())
            .flat_map(|r| (0..topo.routers[r].ports.len()).map(move |p| (RouterId(r as u32), PortIdx(p as u16))))
            .filter(|&(r, p)| net.routing.is_dead(r, p))
            .collect();
        let ctx = |e: String| format!("{ev:?}: {e}");
        let ex = explore(&topo, &net.routing, &template, 2, false, None, &dead)
            .map_err(ctx)
            .unwrap();
        ex.cdg.check_bubble(&topo, |_| true).map_err(ctx).unwrap();
        ex.cdg
            .check_dimension_order(&topo, |(_, _, vc)| vc == 0)
            .map_err(ctx)
            .unwrap();
        let last: Vec<_> = ex.cdg.edges.iter().filter(|(c, _)| c.2 == 1).collect();
        assert!(!last.is_empty(), "{ev:?}: no last step in the graph");
        assert!(
            last.iter().all(|(_, next)| next.is_empty()),
            "{ev:?}: a last step leads on"
        );
    }
}

#[test]
fn sibling_bypass_around_failed_links_is_acyclic() {
    // Leaves 0 and 1 (siblings), spines 2 and 3; leaf ports: nodes 0–1, up 2–3, sibling 4.
    let topo = build(&gft(1, 2, 2, 2, 1)).unwrap();
    let dead = [(RouterId(2), PortIdx(1)), (RouterId(0), PortIdx(3))];
    for routing in all_routings() {
        let cfg = fabric(routing.clone(), 1);
        let Ok(Outcome::Checked(Claim::Acyclic, _)) = check(&topo, &routing, 1, &dead) else {
            assert!(cfg.validate(&topo).is_err(), "{routing:?} accepted but not checked");
            continue;
        };
        let r = Routing::new(&topo, &routing, 1, &dead).unwrap();
        let ex = explore(&topo, &r, &sized_packet(&topo, &cfg), 1, true, None, &dead).unwrap();
        let sibling: BTreeSet<Channel> = ex
            .cdg
            .edges
            .keys()
            .filter(|&&(r, p, _)| topo.routers[r.index()].kinds[p.index()] == PortKind::Sibling)
            .copied()
            .collect();
        assert_eq!(sibling, BTreeSet::from([ch(0, 4, 0), ch(1, 4, 0)]), "{routing:?}");
    }
}

fn topology_strategy() -> impl Strategy<Value = TopologyConfig> {
    let grid_s = (prop::collection::vec(2u32..=5, 1..=3), 1u32..=2, any::<bool>())
        .prop_filter("at most 32 nodes", |(k, conc, _)| {
            k.iter().product::<u32>() * conc <= 32
        })
        .prop_map(|(k, conc, wrap)| grid(&k, conc, wrap));
    let hyper = (1u32..=4, 1u32..=2).prop_map(|(n, concentration)| {
        TopologyConfig::Hypercube(HypercubeConfig {
            n,
            concentration,
            radix: None,
        })
    });
    let fat = (2u32..=3, 1u32..=3).prop_map(|(k, n)| TopologyConfig::FatTree(FatTreeConfig { k, n, radix: None }));
    let ls = (1u32..=4, 1u32..=3, 1u32..=3, 1u32..=2).prop_map(|(leaves, spines, nodes_per_leaf, links_per_spine)| {
        TopologyConfig::LeafSpine(LeafSpineConfig {
            leaves,
            spines,
            nodes_per_leaf,
            links_per_spine,
            nodes: None,
            radix: None,
        })
    });
    let g = (1u32..=2, 1u32..=2, 1u32..=3, 1u32..=2, 0u32..=2)
        .prop_map(|(planes, pairs, spines, npl, sib)| gft(planes, 2 * pairs, spines, npl, sib));
    let df = (1u32..=3, 1u32..=2, 1u32..=2, any::<prop::sample::Index>()).prop_map(|(a, p, h, gi)| {
        let max_g = a * h + 1;
        TopologyConfig::Dragonfly(DragonflyConfig {
            a,
            p,
            h,
            g: Some(1 + gi.index(max_g as usize) as u32),
            radix: None,
        })
    });
    let xbar = (2u32..=4).prop_map(|ports| TopologyConfig::Crossbar(CrossbarConfig { ports, radix: None }));
    prop_oneof![3 => grid_s, 1 => hyper, 1 => fat, 1 => ls, 1 => g, 1 => df, 1 => xbar]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// On random small instances of every family, every routing configuration that validation
    /// accepts keeps its deadlock-freedom claim, reaches every destination and never loops.
    #[test]
    fn routing_is_deadlock_free_and_loop_free(tc in topology_strategy()) {
        let checked = check_all(&tc, &[]).map_err(TestCaseError::fail)?;
        prop_assert!(!checked.is_empty(), "no routing configuration accepted on {:?}", tc);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// With one or two router links down, routing that goes around them (up*/down* choosing
    /// live ports, the generalized fat tree's sibling bypass, dragonfly shortest live paths,
    /// adaptive torus routing) keeps its claim and never loops; packets with no live route are
    /// dropped, which is allowed.
    #[test]
    fn routing_around_failed_links_is_deadlock_free_and_loop_free(
        tc in topology_strategy(),
        failed in prop::collection::vec(any::<usize>(), 1..=2),
    ) {
        check_all(&tc, &failed).map_err(TestCaseError::fail)?;
    }
}

/// The tie rules other than the default on even rings (both directions at k/2, every
/// combination over the dimensions) and oblivious random up ports on trees keep the claims of
/// their schemes, with and without a failed link.
#[test]
fn tie_rules_and_random_up_ports_are_deadlock_free() {
    let instances = [
        grid(&[4], 1, true),
        grid(&[4, 2], 1, true),
        TopologyConfig::FatTree(FatTreeConfig {
            k: 2,
            n: 2,
            radix: None,
        }),
        gft(1, 2, 2, 2, 1),
    ];
    let mut checked = 0;
    for tc in &instances {
        let topo = build(tc).unwrap();
        let links: Vec<_> = topo.links().collect();
        for dead in [Vec::new(), vec![links[links.len() / 2].a]] {
            for routing in oblivious_routings() {
                for vcs in 1..=2 {
                    if let Outcome::Checked(..) =
                        check(&topo, &routing, vcs, &dead).unwrap_or_else(|e| panic!("{tc:?} {routing:?}: {e}"))
                    {
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked >= 20, "{checked} configurations checked");
}
