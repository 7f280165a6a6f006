//! The `[topology]` section of a scenario: one tagged variant per topology family.
//!
//! Every variant rejects unknown keys (`deny_unknown_fields` sits on each variant's struct, since
//! serde ignores it on an internally tagged enum). `radix` is the router chip's port count; when it
//! is omitted it defaults to the ports the family actually needs (40 for the generalized fat tree,
//! the Sunway SWHRC chip).

use serde::{Deserialize, Serialize};

/// Topology family and its parameters, e.g. `kind = "torus"`, `k = [8, 8, 8]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TopologyConfig {
    /// k-ary n-cube with wrap-around links.
    Torus(GridConfig),
    /// Like `torus` without wrap-around links.
    Mesh(GridConfig),
    Hypercube(HypercubeConfig),
    /// k-ary n-tree (Petrini & Vanneschi).
    FatTree(FatTreeConfig),
    LeafSpine(LeafSpineConfig),
    /// Sunway dual-rail generalized fat tree (spec 01); defaults are the Sunway machine.
    GeneralizedFatTree(GeneralizedFatTreeConfig),
    Dragonfly(DragonflyConfig),
    /// One router: `ports` nodes on a single crossbar (the cHPP intra-node crossbar, spec 02).
    Crossbar(CrossbarConfig),
}

fn one() -> u32 {
    1
}

/// Torus or mesh: `k[d]` routers along dimension `d` (any number of dimensions).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GridConfig {
    pub k: Vec<u32>,
    /// Nodes per router (default 1).
    #[serde(default = "one")]
    pub concentration: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub radix: Option<u16>,
}

/// Binary `n`-cube: 2^n routers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HypercubeConfig {
    pub n: u32,
    /// Nodes per router (default 1).
    #[serde(default = "one")]
    pub concentration: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub radix: Option<u16>,
}

/// k-ary n-tree: `n` levels of k^(n-1) switches with `2k` ports, k^n nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FatTreeConfig {
    pub k: u32,
    pub n: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub radix: Option<u16>,
}

/// Two-level leaf–spine; any oversubscription (`nodes_per_leaf` vs `spines * links_per_spine`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeafSpineConfig {
    pub leaves: u32,
    pub spines: u32,
    pub nodes_per_leaf: u32,
    /// Parallel links between each leaf and each spine (default 1).
    #[serde(default = "one")]
    pub links_per_spine: u32,
    /// Populate only the first `nodes` node slots (default: all `leaves * nodes_per_leaf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub radix: Option<u16>,
}

/// Per plane: `leaves` leaf and `spines` spine routers; leaf ports are `0..nodes_per_leaf` to
/// nodes, then one up port per spine, then `sibling_links` ports to the sibling leaf (leaves 2m
/// and 2m+1). Node rail p is cabled to plane p. `sibling_links = 0` is a plain leaf–spine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GeneralizedFatTreeConfig {
    pub planes: u32,
    pub leaves: u32,
    pub spines: u32,
    pub nodes_per_leaf: u32,
    pub sibling_links: u32,
    /// Populate only the first `nodes` node slots (default: all; the Sunway machine uses 512).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// Chip radix (default 40, the SWHRC router).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub radix: Option<u16>,
}

impl Default for GeneralizedFatTreeConfig {
    /// One Sunway plane is a 576-port switch: 32 leaves × 18 nodes, 18 spines, 4 sibling links.
    fn default() -> Self {
        Self {
            planes: 2,
            leaves: 32,
            spines: 18,
            nodes_per_leaf: 18,
            sibling_links: 4,
            nodes: None,
            radix: None,
        }
    }
}

/// Dragonfly (Kim et al., ISCA 2008): groups of `a` fully connected routers, `p` nodes and `h`
/// global links per router, `g` groups (default `a*h + 1`, the largest all-to-all size).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DragonflyConfig {
    pub a: u32,
    pub p: u32,
    pub h: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub g: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub radix: Option<u16>,
}

/// A single router with `ports` terminal ports, one node on each: the cHPP controller's
/// crossbar (spec 02, "Throughput under load"). Node x sits on port x.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrossbarConfig {
    pub ports: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub radix: Option<u16>,
}

/// Routers, nodes and ports a topology configuration asks for, computed from its parameters
/// without building it. Arithmetic saturates: absurd parameters give huge counts, which the
/// builder then refuses.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SizeEstimate {
    pub routers: u64,
    pub nodes: u64,
    /// Router ports (cabled or not), the unit of most per-port state.
    pub router_ports: u64,
    /// Network ports of every node together (one per rail).
    pub node_ports: u64,
}

impl TopologyConfig {
    /// The sizes this configuration asks for (see [`SizeEstimate`]).
    pub fn size_estimate(&self) -> SizeEstimate {
        let m = |a: u64, b: u64| a.saturating_mul(b);
        let (routers, nodes, ports_per_router, rails) = match self {
            TopologyConfig::Torus(c) | TopologyConfig::Mesh(c) => {
                let routers = c.k.iter().fold(1u64, |acc, &k| m(acc, u64::from(k)));
                let conc = u64::from(c.concentration);
                (routers, m(routers, conc), 2 * c.k.len() as u64 + conc, 1)
            }
            TopologyConfig::Hypercube(c) => {
                let routers = 1u64.checked_shl(c.n).unwrap_or(u64::MAX);
                let conc = u64::from(c.concentration);
                (routers, m(routers, conc), u64::from(c.n) + conc, 1)
            }
            TopologyConfig::FatTree(c) => {
                let k = u64::from(c.k);
                let pow = |e: u32| (0..e).fold(1u64, |acc, _| m(acc, k));
                (m(u64::from(c.n), pow(c.n.saturating_sub(1))), pow(c.n), 2 * k, 1)
            }
            TopologyConfig::LeafSpine(c) => {
                let (l, s, p) = (u64::from(c.leaves), u64::from(c.spines), u64::from(c.nodes_per_leaf));
                let links = m(m(l, s), u64::from(c.links_per_spine));
                let nodes = c.nodes.map_or(m(l, p), u64::from);
                let ports = m(l, p).saturating_add(m(links, 2));
                let routers = l + s;
                return SizeEstimate {
                    routers,
                    nodes,
                    router_ports: ports,
                    node_ports: nodes,
                };
            }
            TopologyConfig::GeneralizedFatTree(c) => {
                let (l, s, p) = (u64::from(c.leaves), u64::from(c.spines), u64::from(c.nodes_per_leaf));
                let planes = u64::from(c.planes);
                let per_plane = m(l, p)
                    .saturating_add(m(m(l, s), 2))
                    .saturating_add(m(l, u64::from(c.sibling_links)));
                let nodes = c.nodes.map_or(m(l, p), u64::from);
                return SizeEstimate {
                    routers: m(l + s, planes),
                    nodes,
                    router_ports: m(per_plane, planes),
                    node_ports: m(nodes, planes),
                };
            }
            TopologyConfig::Dragonfly(c) => {
                let (a, p, h) = (u64::from(c.a), u64::from(c.p), u64::from(c.h));
                let g = c.g.map_or(m(a, h).saturating_add(1), u64::from);
                let routers = m(a, g);
                (routers, m(routers, p), a.saturating_sub(1) + p + h, 1)
            }
            TopologyConfig::Crossbar(c) => (1, u64::from(c.ports), u64::from(c.ports), 1),
        };
        SizeEstimate {
            routers,
            nodes,
            router_ports: m(routers, ports_per_router),
            node_ports: m(nodes, rails),
        }
    }

    /// The `kind` string of the family, as written in a scenario.
    pub fn kind(&self) -> &'static str {
        match self {
            TopologyConfig::Torus(_) => "torus",
            TopologyConfig::Mesh(_) => "mesh",
            TopologyConfig::Hypercube(_) => "hypercube",
            TopologyConfig::FatTree(_) => "fat_tree",
            TopologyConfig::LeafSpine(_) => "leaf_spine",
            TopologyConfig::GeneralizedFatTree(_) => "generalized_fat_tree",
            TopologyConfig::Dragonfly(_) => "dragonfly",
            TopologyConfig::Crossbar(_) => "crossbar",
        }
    }

    /// Builds and validates the topology; see [`super::build`].
    pub fn build(&self) -> Result<super::Topology, super::TopologyError> {
        super::build(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<TopologyConfig, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn every_variant_rejects_unknown_keys() {
        let valid = [
            json!({"kind": "torus", "k": [4, 4]}),
            json!({"kind": "mesh", "k": [4]}),
            json!({"kind": "hypercube", "n": 3}),
            json!({"kind": "fat_tree", "k": 4, "n": 3}),
            json!({"kind": "leaf_spine", "leaves": 4, "spines": 2, "nodes_per_leaf": 4}),
            json!({"kind": "generalized_fat_tree"}),
            json!({"kind": "dragonfly", "a": 4, "p": 2, "h": 2}),
            json!({"kind": "crossbar", "ports": 4}),
        ];
        for v in valid {
            parse(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"));
            let mut bad = v.clone();
            bad["concentraton"] = json!(2);
            let err = parse(bad).expect_err(&format!("{v} accepted an unknown key"));
            assert!(err.to_string().contains("unknown field `concentraton`"), "{err}");
        }
    }

    #[test]
    fn defaults() {
        let TopologyConfig::Torus(t) = parse(json!({"kind": "torus", "k": [8]})).unwrap() else {
            panic!()
        };
        assert_eq!((t.concentration, t.radix), (1, None));
        let TopologyConfig::GeneralizedFatTree(g) =
            parse(json!({"kind": "generalized_fat_tree", "nodes": 512})).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            g,
            GeneralizedFatTreeConfig {
                nodes: Some(512),
                ..Default::default()
            }
        );
    }

    #[test]
    fn round_trips_through_json() {
        let cfg = TopologyConfig::Dragonfly(DragonflyConfig {
            a: 4,
            p: 2,
            h: 2,
            g: Some(5),
            radix: None,
        });
        let v = serde_json::to_value(&cfg).unwrap();
        assert_eq!(v, json!({"kind": "dragonfly", "a": 4, "p": 2, "h": 2, "g": 5}));
        assert_eq!(parse(v).unwrap(), cfg);
    }

    #[test]
    fn missing_required_key_is_named() {
        let err = parse(json!({"kind": "fat_tree", "k": 4})).unwrap_err();
        assert!(err.to_string().contains("missing field `n`"), "{err}");
    }
}
