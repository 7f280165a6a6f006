//! Topology layer: counts, closed-form distances and bisections, errors, export, properties.

mod common;
use common::gft;
use hpcnet_fabric::topology::{
    build, BisectionMethod, DragonflyConfig, FatTreeConfig, GeneralizedFatTreeConfig, GridConfig, HypercubeConfig,
    LeafSpineConfig, NodeId, Peer, PortIdx, PortKind, RouterId, Topology, TopologyConfig,
};
use proptest::prelude::*;

fn torus(k: &[u32], conc: u32) -> TopologyConfig {
    TopologyConfig::Torus(GridConfig {
        k: k.to_vec(),
        concentration: conc,
        radix: None,
    })
}

fn mesh(k: &[u32], conc: u32) -> TopologyConfig {
    TopologyConfig::Mesh(GridConfig {
        k: k.to_vec(),
        concentration: conc,
        radix: None,
    })
}

fn hypercube(n: u32, conc: u32) -> TopologyConfig {
    TopologyConfig::Hypercube(HypercubeConfig {
        n,
        concentration: conc,
        radix: None,
    })
}

fn fat_tree(k: u32, n: u32) -> TopologyConfig {
    TopologyConfig::FatTree(FatTreeConfig { k, n, radix: None })
}

fn leaf_spine(leaves: u32, spines: u32, nodes_per_leaf: u32, links_per_spine: u32) -> TopologyConfig {
    TopologyConfig::LeafSpine(LeafSpineConfig {
        leaves,
        spines,
        nodes_per_leaf,
        links_per_spine,
        nodes: None,
        radix: None,
    })
}

fn sunway() -> TopologyConfig {
    TopologyConfig::GeneralizedFatTree(GeneralizedFatTreeConfig {
        nodes: Some(512),
        ..Default::default()
    })
}

fn dragonfly(a: u32, p: u32, h: u32, g: Option<u32>) -> TopologyConfig {
    TopologyConfig::Dragonfly(DragonflyConfig {
        a,
        p,
        h,
        g,
        radix: None,
    })
}

/// (nodes, routers, router links, node links)
fn counts(t: &Topology) -> (usize, usize, usize, usize) {
    (t.num_nodes(), t.num_routers(), t.num_router_links(), t.num_node_links())
}

fn assert_close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-9, "{a} != {b}");
}

/// Mean over ordered pairs of distinct nodes, from the mean over all pairs including self.
fn distinct(mean_with_self: f64, nodes: usize) -> f64 {
    let n = nodes as f64;
    mean_with_self * n / (n - 1.0)
}

#[test]
fn torus_8x8x8() {
    let t = build(&torus(&[8, 8, 8], 1)).unwrap();
    assert_eq!(counts(&t), (512, 512, 1536, 512));
    assert_eq!(t.routers[0].radix, 7);
    let m = t.metrics();
    assert_eq!(m.diameter, 12);
    // k-ary n-cube, k even: mean over all pairs including self = n·k/4 (Dally & Towles §3.3).
    assert_close(m.mean_distance, distinct(3.0 * 8.0 / 4.0, 512));
    assert_eq!(
        (m.bisection_links, m.bisection_method),
        (2 * 64, BisectionMethod::Formula)
    );
    assert_eq!(m.bisection_cut_by_id, 128);
    assert!(!m.sampled);
}

#[test]
fn torus_port_layout_and_numbering() {
    let t = build(&torus(&[3, 4], 2)).unwrap();
    assert_eq!(counts(&t), (24, 12, 24, 24));
    // Router 5 = (2, 1): +x wraps to (0, 1) = 3, −y goes to (2, 0) = 2.
    let r = &t.routers[5];
    assert_eq!(r.coords, vec![2, 1]);
    assert_eq!(
        r.ports[0],
        Peer::Router {
            router: RouterId(3),
            port: PortIdx(1)
        }
    );
    assert_eq!(r.kinds[0], PortKind::Dim { dim: 0, plus: true });
    assert_eq!(
        r.ports[3],
        Peer::Router {
            router: RouterId(2),
            port: PortIdx(2)
        }
    );
    assert_eq!(r.kinds[3], PortKind::Dim { dim: 1, plus: false });
    assert_eq!(
        r.ports[4..],
        [
            Peer::Node {
                node: NodeId(10),
                rail: 0
            },
            Peer::Node {
                node: NodeId(11),
                rail: 0
            }
        ]
    );
    assert_eq!(t.router_of(NodeId(11), 0), (RouterId(5), PortIdx(5)));
}

#[test]
fn odd_torus_mean_distance() {
    // Ring of odd k: mean over all pairs including self = (k² − 1)/(4k).
    let t = build(&torus(&[5, 7], 1)).unwrap();
    let m = t.metrics();
    assert_eq!(m.diameter, 2 + 3);
    assert_close(m.mean_distance, distinct(24.0 / 20.0 + 48.0 / 28.0, 35));
    assert_eq!(m.bisection_method, BisectionMethod::IdOrderCut);
}

#[test]
fn mesh_counts_and_distance() {
    let t = build(&mesh(&[4, 5], 1)).unwrap();
    assert_eq!(counts(&t), (20, 20, 3 * 5 + 4 * 4, 20));
    // Corner (0, 0): the − ports are present but uncabled.
    assert_eq!(t.routers[0].ports[1], Peer::None);
    assert_eq!(t.routers[0].kinds[3], PortKind::Unused);
    let m = t.metrics();
    assert_eq!(m.diameter, 3 + 4);
    // Line of k: mean over all pairs including self = (k² − 1)/(3k).
    assert_close(m.mean_distance, distinct(15.0 / 12.0 + 24.0 / 15.0, 20));
    // Largest dimension odd: no closed form; the id-order cut is rows 0–1 plus half of row 2.
    assert_eq!(
        (m.bisection_links, m.bisection_method),
        (5, BisectionMethod::IdOrderCut)
    );
}

#[test]
fn hypercube_counts_and_distance() {
    let t = build(&hypercube(5, 2)).unwrap();
    assert_eq!(counts(&t), (64, 32, 80, 64));
    let m = t.metrics();
    assert_eq!(m.diameter, 5);
    // n/2 over router pairs including self; 2 nodes per router.
    assert_close(m.mean_distance, 4.0 * 32.0 * 32.0 * 2.5 / (64.0 * 63.0));
    assert_eq!(m.bisection_links, 16);
}

#[test]
fn fat_tree_4_3() {
    let t = build(&fat_tree(4, 3)).unwrap();
    assert_eq!(counts(&t), (64, 48, 128, 64));
    assert!(t.routers.iter().all(|r| r.ports.len() == 8 && r.radix == 8));
    // Roots use only their 4 down ports.
    assert!(t.routers[32..]
        .iter()
        .all(|r| r.kinds[4..].iter().all(|&k| k == PortKind::Unused)));
    let m = t.metrics();
    assert_eq!(m.diameter, 4);
    // k^(L+1) − k^L nodes at distance 2L from any node.
    let (k, n) = (4f64, 3);
    let sum: f64 = (1..n).map(|l| 2.0 * l as f64 * (k.powi(l + 1) - k.powi(l))).sum();
    assert_close(m.mean_distance, sum / 63.0);
    assert_eq!(m.bisection_links, 32);
    assert_eq!(m.bisection_cut_by_id, 32);
}

#[test]
fn leaf_spine_with_parallel_links() {
    let t = build(&leaf_spine(6, 4, 8, 2)).unwrap();
    assert_eq!(counts(&t), (48, 10, 48, 48));
    assert_eq!(t.routers[0].ports.len(), 8 + 8);
    assert_eq!(t.routers[6].ports.len(), 12);
    assert_eq!(
        t.routers[0].ports[8 + 2 * 3 + 1],
        Peer::Router {
            router: RouterId(6 + 3),
            port: PortIdx(1)
        }
    );
    let m = t.metrics();
    assert_eq!(m.diameter, 2);
    assert_close(m.mean_distance, 2.0 * 40.0 / 47.0);
    assert_eq!(m.bisection_links, 24);
}

/// Plane-0 mean distance of a generalized fat tree from its leaf populations: 0 on one leaf,
/// 1 to the sibling leaf, 2 otherwise.
fn gft_mean(pop: &[u64]) -> f64 {
    let n: u64 = pop.iter().sum();
    let mut total = 0;
    for (i, &a) in pop.iter().enumerate() {
        for (j, &b) in pop.iter().enumerate() {
            total += a
                * b
                * if i == j {
                    0
                } else if i / 2 == j / 2 {
                    1
                } else {
                    2
                };
        }
    }
    total as f64 / (n * (n - 1)) as f64
}

#[test]
fn sunway_generalized_fat_tree() {
    let t = build(&sunway()).unwrap();
    assert_eq!(counts(&t), (512, 100, 2 * (32 * 18 + 16 * 4), 1024));
    assert_eq!(t.rails, 2);
    let leaf = &t.routers[0];
    assert_eq!(
        (leaf.radix, leaf.ports.len(), leaf.coords.clone()),
        (40, 40, vec![0, 0, 0])
    );
    assert_eq!(t.routers[32].ports.len(), 32);
    assert_eq!(
        leaf.ports[36],
        Peer::Router {
            router: RouterId(1),
            port: PortIdx(36)
        }
    );
    assert_eq!(leaf.kinds[36..], [PortKind::Sibling; 4]);
    assert_eq!(
        leaf.ports[18 + 5],
        Peer::Router {
            router: RouterId(32 + 5),
            port: PortIdx(0)
        }
    );
    // Node 511 = leaf 28, slot 7, in both planes.
    assert_eq!(t.router_of(NodeId(511), 0), (RouterId(28), PortIdx(7)));
    assert_eq!(t.router_of(NodeId(511), 1), (RouterId(50 + 28), PortIdx(7)));
    assert_eq!(t.routers[78].plane, 1);
    assert!(t.routers[29..32]
        .iter()
        .all(|r| r.kinds[..18] == [PortKind::Unused; 18]));

    let m = t.metrics();
    assert_eq!(m.diameter, 2);
    let mut pop = vec![18; 28];
    pop.extend([8, 0, 0, 0]);
    assert_close(m.mean_distance, gft_mean(&pop));
    assert_eq!(m.bisection_links, 2 * 32 * 18 / 2);

    let full = build(&TopologyConfig::GeneralizedFatTree(Default::default())).unwrap();
    assert_eq!(full.num_nodes(), 576);
    assert_close(full.metrics().mean_distance, gft_mean(&[18; 32]));
}

#[test]
fn plain_leaf_spine_planes_without_siblings() {
    let t = build(&gft(3, 5, 2, 3, 0)).unwrap();
    assert_eq!(counts(&t), (15, 21, 30, 45));
    assert_eq!(t.routers[0].ports.len(), 5);
    assert_eq!(t.routers[0].radix, 40);
}

#[test]
fn dragonfly_full_size() {
    let t = build(&dragonfly(4, 2, 2, None)).unwrap();
    let g = 9;
    assert_eq!(counts(&t), (72, 36, g * 6 + g * (g - 1) / 2, 72));
    assert_eq!(t.routers[0].radix, 2 + 3 + 2);
    let pairs = group_pair_links(&t, 4, g);
    assert!(pairs.iter().all(|&c| c == 1), "{pairs:?}");
    let m = t.metrics();
    assert_eq!(m.diameter, 3);
    assert!(m.mean_distance > 1.0 && m.mean_distance < 3.0);
}

/// Global links per unordered pair of groups.
fn group_pair_links(t: &Topology, a: u32, g: usize) -> Vec<u32> {
    let mut count = vec![0; g * g];
    for l in t.links() {
        let (x, y) = ((l.a.0 .0 / a) as usize, (l.b.0 .0 / a) as usize);
        if x != y {
            assert_eq!(t.routers[l.a.0.index()].kinds[l.a.1.index()], PortKind::Global);
            count[x.min(y) * g + x.max(y)] += 1;
        }
    }
    (0..g)
        .flat_map(|x| (x + 1..g).map(move |y| (x, y)))
        .map(|(x, y)| count[x * g + y])
        .collect()
}

#[test]
fn smaller_dragonflies_spread_global_links_evenly() {
    // a·h = 8 global ports per group.
    for (g, cabled) in [(2, 8), (3, 8), (4, 8), (5, 8), (6, 7), (7, 8), (8, 7), (9, 8)] {
        let t = build(&dragonfly(4, 1, 2, Some(g))).unwrap();
        let pairs = group_pair_links(&t, 4, g as usize);
        let (lo, hi) = (pairs.iter().min().unwrap(), pairs.iter().max().unwrap());
        assert!(hi - lo <= 1 && *lo >= 1, "g={g}: {pairs:?}");
        let global: u32 = pairs.iter().sum();
        assert_eq!(global, g * cabled / 2, "g={g}");
    }
}

#[test]
fn dragonfly_port_layout() {
    let t = build(&dragonfly(4, 2, 2, None)).unwrap();
    let r = &t.routers[4 + 2]; // group 1, router 2
    assert_eq!(r.coords, vec![1, 2]);
    assert_eq!(
        r.kinds,
        [
            &[PortKind::Terminal; 2][..],
            &[PortKind::Local; 3],
            &[PortKind::Global; 2]
        ]
        .concat()
    );
    assert_eq!(
        r.ports[2],
        Peer::Router {
            router: RouterId(4),
            port: PortIdx(3)
        }
    ); // local to router 0, its port for 2
    assert_eq!(
        r.ports[4],
        Peer::Router {
            router: RouterId(7),
            port: PortIdx(4)
        }
    );
}

/// Exact bisection by enumeration: every router partition splitting the nodes evenly.
fn brute_force_bisection(t: &Topology) -> u64 {
    let r = t.num_routers();
    assert!(r <= 16 && t.rails == 1);
    let mut weight = vec![0; r];
    for x in 0..t.num_nodes() as u32 {
        weight[t.router_of(NodeId(x), 0).0.index()] += 1;
    }
    let links: Vec<_> = t.links().collect();
    let half = t.num_nodes() / 2;
    (0..1u32 << (r - 1))
        .filter(|mask| (0..r).filter(|&i| mask >> i & 1 == 1).map(|i| weight[i]).sum::<usize>() == half)
        .map(|mask| {
            links
                .iter()
                .filter(|l| (mask >> l.a.0 .0 & 1) != (mask >> l.b.0 .0 & 1))
                .count() as u64
        })
        .min()
        .unwrap()
}

#[test]
fn bisection_formulas_match_exhaustive_search() {
    for cfg in [
        torus(&[4, 4], 1),
        torus(&[2, 4], 1),
        torus(&[2, 2, 2], 1),
        mesh(&[4, 4], 1),
        mesh(&[3, 4], 1),
        hypercube(4, 1),
        fat_tree(2, 3),
        fat_tree(4, 2),
        leaf_spine(4, 3, 2, 1),
        leaf_spine(4, 2, 3, 2),
        gft(1, 4, 2, 2, 1),
        gft(1, 6, 2, 2, 2),
        dragonfly(3, 1, 1, None),
        dragonfly(2, 2, 2, Some(4)),
    ] {
        let t = build(&cfg).unwrap();
        let m = t.metrics();
        assert_eq!(m.bisection_method, BisectionMethod::Formula, "{}", t.name);
        assert_eq!(m.bisection_links, brute_force_bisection(&t), "{}", t.name);
        assert!(m.bisection_cut_by_id >= m.bisection_links, "{}", t.name);
    }
}

#[test]
fn large_networks_sample_distances() {
    let t = build(&torus(&[17, 17, 17], 1)).unwrap();
    let m = t.metrics();
    assert!(m.sampled);
    // Vertex-transitive: every source sees the same distances, so the sample is exact.
    assert_eq!(m.diameter, 24);
    assert_close(m.mean_distance, distinct(3.0 * 288.0 / 68.0, 4913));
}

fn err(cfg: TopologyConfig) -> (String, String) {
    let e = build(&cfg).unwrap_err();
    (e.key().to_string(), e.to_string())
}

#[test]
fn bad_parameters_name_their_key() {
    assert_eq!(err(torus(&[], 1)).1, "topology.k: must have at least one dimension");
    assert_eq!(err(torus(&[4, 1], 1)).1, "topology.k[1]: must be at least 2, got 1");
    assert_eq!(err(mesh(&[4], 0)).0, "topology.concentration");
    assert_eq!(err(hypercube(0, 1)).0, "topology.n");
    assert_eq!(err(fat_tree(1, 3)).0, "topology.k");
    assert_eq!(err(leaf_spine(4, 0, 2, 1)).0, "topology.spines");
    assert_eq!(err(leaf_spine(4, 2, 2, 0)).0, "topology.links_per_spine");
    assert_eq!(err(gft(2, 31, 18, 18, 4)).0, "topology.leaves");
    assert_eq!(err(gft(0, 32, 18, 18, 4)).0, "topology.planes");
    assert_eq!(err(dragonfly(4, 2, 2, Some(10))).0, "topology.g");
    assert_eq!(err(dragonfly(0, 2, 2, None)).0, "topology.a");
    let too_many = TopologyConfig::LeafSpine(LeafSpineConfig {
        nodes: Some(9),
        ..match leaf_spine(2, 1, 4, 1) {
            TopologyConfig::LeafSpine(c) => c,
            _ => unreachable!(),
        }
    });
    assert_eq!(
        err(too_many).1,
        "topology.nodes: must be between 1 and leaves × nodes_per_leaf = 8, got 9"
    );
    assert_eq!(err(torus(&[1 << 12, 1 << 12, 2], 1)).0, "topology.k");
}

#[test]
fn radix_exceeded_is_rejected() {
    let cfg = TopologyConfig::GeneralizedFatTree(GeneralizedFatTreeConfig {
        radix: Some(36),
        ..Default::default()
    });
    assert_eq!(
        err(cfg),
        (
            "topology.radix".into(),
            "topology.radix: leaf needs 40 ports (18 nodes + 18 spines + 4 sibling) but radix is 36".into()
        )
    );
    let cfg = gft(2, 64, 18, 18, 4);
    assert_eq!(
        err(cfg).1,
        "topology.radix: spine needs 64 ports (64 leaves) but radix is 40"
    );
    let cfg = TopologyConfig::Torus(GridConfig {
        k: vec![4, 4],
        concentration: 4,
        radix: Some(6),
    });
    assert_eq!(
        err(cfg).1,
        "topology.radix: router needs 8 ports (4 link ports + 4 nodes) but radix is 6"
    );
    let cfg = TopologyConfig::Dragonfly(DragonflyConfig {
        a: 8,
        p: 4,
        h: 4,
        g: None,
        radix: Some(12),
    });
    assert_eq!(
        err(cfg).1,
        "topology.radix: router needs 15 ports (4 nodes + 7 local + 4 global) but radix is 12"
    );
}

#[test]
fn unknown_key_is_rejected() {
    let e = serde_json::from_str::<TopologyConfig>(r#"{"kind": "generalized_fat_tree", "leafs": 32}"#).unwrap_err();
    assert!(e.to_string().contains("unknown field `leafs`"), "{e}");
    let e = serde_json::from_str::<TopologyConfig>(r#"{"kind": "butterfly"}"#).unwrap_err();
    assert!(e.to_string().contains("unknown variant `butterfly`"), "{e}");
}

#[test]
fn dot_export() {
    let t = build(&sunway()).unwrap();
    let dot = t.to_dot();
    assert!(dot.starts_with("graph \"generalized_fat_tree"));
    assert_eq!(dot.matches(" -- ").count(), 1280 + 1024);
    assert!(dot.contains("  r0 -- r1 [taillabel=\"36\", headlabel=\"36\"];"));
    assert!(dot.contains("  n511 -- r78 [taillabel=\"1\", headlabel=\"7\"];"));
    assert!(dot.trim_end().ends_with('}'));
}

#[test]
fn json_export() {
    let t = build(&fat_tree(2, 2)).unwrap();
    let v = t.to_json();
    assert_eq!(v["shape"], serde_json::json!({"kind": "fat_tree", "k": 2, "n": 2}));
    assert_eq!(v["links"].as_array().unwrap().len(), 4);
    assert_eq!(v["links"][0], serde_json::json!({"a": [0, 2], "b": [2, 0]}));
    assert_eq!(v["routers"][0]["kinds"][2], serde_json::json!({"kind": "up"}));
    assert_eq!(
        v["routers"][0]["ports"][0],
        serde_json::json!({"kind": "node", "node": 0, "rail": 0})
    );
    assert_eq!(v["nodes"][3]["ports"], serde_json::json!([[1, 1]]));
    assert_eq!(v["metrics"]["diameter"], 2);
    assert_eq!(v["metrics"]["bisection_method"], "formula");
    assert_eq!(serde_json::to_value(&t).unwrap()["rails"], 1);
}

fn small_config() -> impl Strategy<Value = TopologyConfig> {
    let k = prop::collection::vec(2u32..6, 1..4);
    prop_oneof![
        (k.clone(), 1u32..4).prop_map(|(k, c)| torus(&k, c)),
        (k, 1u32..4).prop_map(|(k, c)| mesh(&k, c)),
        (1u32..7, 1u32..3).prop_map(|(n, c)| hypercube(n, c)),
        (2u32..5, 1u32..4).prop_map(|(k, n)| fat_tree(k, n)),
        (1u32..6, 1u32..5, 1u32..5, 1u32..3).prop_map(|(l, s, p, m)| leaf_spine(l, s, p, m)),
        (1u32..3, 1u32..4, 1u32..4, 1u32..4, 0u32..3).prop_map(|(planes, l, s, p, sib)| gft(planes, 2 * l, s, p, sib)),
        (1u32..5, 1u32..3, 1u32..3)
            .prop_flat_map(|(a, p, h)| (Just((a, p, h)), 1..=a * h + 1))
            .prop_map(|((a, p, h), g)| dragonfly(a, p, h, Some(g))),
    ]
}

proptest! {
    #[test]
    fn small_topologies_build_and_validate(cfg in small_config()) {
        let t = build(&cfg).unwrap();
        t.validate().unwrap();
        for r in &t.routers {
            prop_assert!(r.ports.len() <= usize::from(r.radix));
        }
        let m = t.metrics();
        prop_assert!(m.diameter < u32::MAX);
        prop_assert_eq!(m.node_links, t.num_nodes() * usize::from(t.rails));
        let json = serde_json::to_value(&cfg).unwrap();
        prop_assert_eq!(serde_json::from_value::<TopologyConfig>(json).unwrap(), cfg);
    }
}
