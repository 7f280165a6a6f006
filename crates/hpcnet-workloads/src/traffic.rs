//! Synthetic traffic: destination patterns, packet sizes, injection processes and rail choice,
//! as configured by a scenario's `[traffic]` table.
//!
//! Patterns follow Dally & Towles, "Principles and Practices of Interconnection Networks",
//! ch. 3 (and BookSim's traffic.cpp for the exact bit definitions): node ids are read as
//! b-bit addresses (N = 2^b nodes) for the bit permutations; tornado and nearest neighbour use
//! torus/mesh coordinates when the topology has them and the 1-D ring of node ids otherwise.

use hpcnet_des::rng::SimRng;
use hpcnet_des::Bytes;
use hpcnet_fabric::topology::{NodeId, Shape, Topology};
use hpcnet_fabric::FabricConfig;
use rand::seq::SliceRandom;
use rand::Rng;
use serde::de::{self, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// Destination pattern.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Every other node equally likely.
    #[default]
    Uniform,
    /// Swap the upper and lower halves of the address bits (needs an even number of bits).
    Transpose,
    /// Invert every address bit.
    BitComplement,
    /// Reverse the address bits.
    BitReverse,
    /// Rotate the address bits left by one.
    Shuffle,
    /// Half way minus one around every ring (worst case for tori).
    Tornado,
    /// Next node along dimension 0 (wrapping).
    NearestNeighbor,
    /// With probability `hotspot_fraction` to one of `hotspot_nodes`, otherwise uniform.
    Hotspot,
    /// A fixed random permutation (from the seed) with no node sending to itself.
    RandomPermutation,
    /// Node i sends to i+1, i+2, ... in turn (personalised all-to-all).
    AllToAll,
    /// Dragonfly only: every node of group G sends to a random node of group G + 1 (mod g), the
    /// adversarial ("worst-case") pattern of Kim et al. 2008: a group's traffic all crosses the
    /// one global link to the next group under minimal routing.
    GroupShift,
}

/// Time between packet creations at a node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Process {
    /// In every slot of one mean packet time, a packet with probability = load (geometric gaps).
    #[default]
    Bernoulli,
    /// Exactly one packet every (mean packet time / load).
    Periodic,
}

/// Packet payload sizes.
///
/// Deserialised by hand rather than as an untagged enum, whose only error is "data did not match
/// any variant": a bad size names the key (`traffic.size.min`) and what was expected.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SizeDist {
    /// One size, e.g. `size = "256 B"`.
    Fixed(Bytes),
    /// `size = { min = "64 B", max = "256 B" }`: uniform over [min, max].
    Uniform { min: Bytes, max: Bytes },
    /// `size = { sizes = ["64 B", "2 KiB"], weights = [0.9, 0.1] }`.
    Choice { sizes: Vec<Bytes>, weights: Vec<f64> },
}

/// The table forms of `size`, before deciding which one was meant.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SizeTable {
    min: Option<Bytes>,
    max: Option<Bytes>,
    sizes: Option<Vec<Bytes>>,
    weights: Option<Vec<f64>>,
}

impl<'de> Deserialize<'de> for SizeDist {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SizeDist;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    r#"a size such as "256 B", { min = "64 B", max = "256 B" } or { sizes = ["64 B", "2 KiB"], weights = [0.9, 0.1] }"#,
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SizeDist, E> {
                Bytes::deserialize(v.into_deserializer()).map(SizeDist::Fixed)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<SizeDist, E> {
                Bytes::deserialize(v.into_deserializer()).map(SizeDist::Fixed)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SizeDist, E> {
                Bytes::deserialize(v.into_deserializer()).map(SizeDist::Fixed)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<SizeDist, E> {
                Bytes::deserialize(v.into_deserializer()).map(SizeDist::Fixed)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SizeDist, A::Error> {
                let t = SizeTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                match t {
                    SizeTable {
                        min: Some(min),
                        max: Some(max),
                        sizes: None,
                        weights: None,
                    } => Ok(SizeDist::Uniform { min, max }),
                    SizeTable {
                        min: None,
                        max: None,
                        sizes: Some(sizes),
                        weights: Some(weights),
                    } => Ok(SizeDist::Choice { sizes, weights }),
                    _ => Err(de::Error::custom(
                        "a size table needs either `min` and `max`, or `sizes` and `weights`",
                    )),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl Default for SizeDist {
    fn default() -> Self {
        SizeDist::Fixed(Bytes(256))
    }
}

impl SizeDist {
    pub fn mean(&self) -> f64 {
        match self {
            SizeDist::Fixed(b) => b.0 as f64,
            SizeDist::Uniform { min, max } => (min.0 + max.0) as f64 / 2.0,
            SizeDist::Choice { sizes, weights } => {
                let tot: f64 = weights.iter().sum();
                sizes.iter().zip(weights).map(|(s, w)| s.0 as f64 * w / tot).sum()
            }
        }
    }
    pub fn max(&self) -> u64 {
        match self {
            SizeDist::Fixed(b) => b.0,
            SizeDist::Uniform { max, .. } => max.0,
            SizeDist::Choice { sizes, .. } => sizes.iter().map(|b| b.0).max().unwrap_or(0),
        }
    }
    /// One draw (builds the cumulative table of a choice each time: for repeated draws use
    /// [`SizeDist::sampler`]).
    pub fn sample(&self, rng: &mut SimRng) -> u64 {
        self.sampler().sample(rng)
    }

    /// A sampler for repeated draws: a choice among n sizes costs O(log n) per draw.
    pub fn sampler(&self) -> SizeSampler<'_> {
        let cumulative = match self {
            SizeDist::Choice { weights, .. } => weights
                .iter()
                .scan(0.0, |acc, w| {
                    *acc += w;
                    Some(*acc)
                })
                .collect(),
            _ => Vec::new(),
        };
        SizeSampler { dist: self, cumulative }
    }
}

/// Draws payload sizes from a [`SizeDist`]; a choice keeps its cumulative weights and draws by
/// binary search.
pub struct SizeSampler<'a> {
    dist: &'a SizeDist,
    cumulative: Vec<f64>,
}

impl SizeSampler<'_> {
    pub fn sample(&self, rng: &mut SimRng) -> u64 {
        match self.dist {
            SizeDist::Fixed(b) => b.0,
            SizeDist::Uniform { min, max } => rng.gen_range(min.0..=max.0),
            SizeDist::Choice { sizes, .. } => {
                let total = self.cumulative.last().copied().unwrap_or(0.0);
                let x = rng.gen::<f64>() * total;
                // The first size whose cumulative weight exceeds x (zero weights are never drawn).
                let i = self.cumulative.partition_point(|&c| c <= x);
                sizes.get(i).or(sizes.last()).map_or(0, |b| b.0)
            }
        }
    }
}

/// Which NIC port (rail) a packet leaves by, on multi-rail machines.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RailChoice {
    /// The rail with the shorter injection queue (Sunway "adaptive": the less busy port).
    #[default]
    Adaptive,
    /// Alternate rails packet by packet.
    RoundRobin,
    /// Always rail 0 (Sunway "fixed": the port named in the descriptor).
    Fixed,
}

fn d_load() -> f64 {
    0.3
}
fn d_hot() -> Vec<NodeId> {
    vec![NodeId(0)]
}
fn d_fraction() -> f64 {
    0.1
}

/// `[traffic]`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficConfig {
    #[serde(default)]
    pub pattern: Pattern,
    /// Offered load per node as a fraction of its injection bandwidth, in (0, 1] (default 0.3).
    #[serde(default = "d_load")]
    pub load: f64,
    #[serde(default)]
    pub process: Process,
    /// Payload size(s) (default "256 B"); the packet header is added on the wire.
    #[serde(default)]
    pub size: SizeDist,
    #[serde(default)]
    pub rails: RailChoice,
    /// Hotspot pattern: the hot nodes (default [0]; an empty list is refused).
    #[serde(default = "d_hot")]
    pub hotspot_nodes: Vec<NodeId>,
    /// Hotspot pattern: fraction of packets sent to hot nodes (default 0.1).
    #[serde(default = "d_fraction")]
    pub hotspot_fraction: f64,
    /// Whether a node may send to itself (default false). When true, uniform traffic draws the
    /// destination from all nodes, the source included (as BookSim's uniform pattern does),
    /// and a packet of any pattern whose destination is its source crosses the source's router
    /// and comes back; when false, uniform traffic draws among the other nodes and a pattern's
    /// fixed points (e.g. transpose's diagonal) send nothing.
    #[serde(default)]
    pub allow_self: bool,
}

impl Default for TrafficConfig {
    fn default() -> Self {
        TrafficConfig {
            pattern: Pattern::Uniform,
            load: d_load(),
            process: Process::Bernoulli,
            size: SizeDist::default(),
            rails: RailChoice::Adaptive,
            hotspot_nodes: d_hot(),
            hotspot_fraction: d_fraction(),
            allow_self: false,
        }
    }
}

impl TrafficConfig {
    /// Check against the machine; errors name the key.
    pub fn validate(&self, topo: &Topology, fabric: &FabricConfig) -> Result<(), (String, String)> {
        if !(self.load > 0.0 && self.load <= 1.0) {
            return Err((
                "traffic.load".into(),
                format!(
                    "must be in (0, 1] (a fraction of node injection bandwidth), got {}",
                    self.load
                ),
            ));
        }
        let n = topo.nodes.len() as u64;
        if n < 2 {
            return Err(("topology".into(), "synthetic traffic needs at least 2 nodes".into()));
        }
        let bits_needed = matches!(
            self.pattern,
            Pattern::Transpose | Pattern::BitComplement | Pattern::BitReverse | Pattern::Shuffle
        );
        if bits_needed && !n.is_power_of_two() {
            return Err((
                "traffic.pattern".into(),
                format!(
                    "{:?} permutes address bits and needs a power-of-two node count, the topology has {n} nodes",
                    self.pattern
                )
                .to_lowercase(),
            ));
        }
        if self.pattern == Pattern::Transpose && n.trailing_zeros() % 2 == 1 {
            return Err((
                "traffic.pattern".into(),
                format!(
                    "transpose needs an even number of address bits, {n} nodes have {}",
                    n.trailing_zeros()
                ),
            ));
        }
        if self.pattern == Pattern::GroupShift && !matches!(topo.shape, Shape::Dragonfly { .. }) {
            return Err((
                "traffic.pattern".into(),
                "group_shift sends each dragonfly group's traffic to the next group; the topology is not a dragonfly"
                    .into(),
            ));
        }
        if self.pattern == Pattern::Hotspot {
            if !(0.0..=1.0).contains(&self.hotspot_fraction) {
                return Err((
                    "traffic.hotspot_fraction".into(),
                    format!("must be in [0, 1], got {}", self.hotspot_fraction),
                ));
            }
            if self.hotspot_nodes.is_empty() {
                return Err((
                    "traffic.hotspot_nodes".into(),
                    "names no node: list at least one hot node (or leave the key out for [0])".into(),
                ));
            }
            if let Some(bad) = self.hotspot_nodes.iter().find(|&&h| h.0 as u64 >= n) {
                return Err((
                    "traffic.hotspot_nodes".into(),
                    format!("node {bad} does not exist (the topology has {n} nodes)"),
                ));
            }
        }
        let max = fabric.packet.max_payload.0;
        let check = |b: u64, key: &str| -> Result<(), (String, String)> {
            if b == 0 {
                return Err((key.into(), "a packet needs at least 1 B of payload".into()));
            }
            if b > max {
                return Err((
                    key.into(),
                    format!("{} exceeds packet.max_payload = {}", Bytes(b), Bytes(max)),
                ));
            }
            Ok(())
        };
        match &self.size {
            SizeDist::Fixed(b) => check(b.0, "traffic.size")?,
            SizeDist::Uniform { min, max: mx } => {
                check(min.0, "traffic.size.min")?;
                check(mx.0, "traffic.size.max")?;
                if min > mx {
                    return Err(("traffic.size".into(), format!("min {min} is larger than max {mx}")));
                }
            }
            SizeDist::Choice { sizes, weights } => {
                if sizes.is_empty() || sizes.len() != weights.len() {
                    return Err((
                        "traffic.size".into(),
                        format!(
                            "needs as many weights as sizes and at least one ({} sizes, {} weights)",
                            sizes.len(),
                            weights.len()
                        ),
                    ));
                }
                if weights.iter().any(|w| !w.is_finite() || *w < 0.0) || weights.iter().sum::<f64>() <= 0.0 {
                    return Err((
                        "traffic.size.weights".into(),
                        format!("weights must be finite, non-negative and not all zero, got {weights:?}"),
                    ));
                }
                for (i, s) in sizes.iter().enumerate() {
                    check(s.0, &format!("traffic.size.sizes[{i}]"))?;
                }
            }
        }
        Ok(())
    }
}

/// Destination generator for one run (shared by all nodes; per-node state is its argument).
pub struct Destinations {
    pattern: Pattern,
    n: u32,
    bits: u32,
    /// Torus/mesh geometry for tornado and neighbour: radices and nodes per router.
    grid: Option<(Vec<u32>, u32)>,
    /// Dragonfly groups for group shift: nodes per group and groups (nodes numbered group by
    /// group).
    groups: Option<(u32, u32)>,
    perm: Vec<NodeId>,
    hot: Vec<NodeId>,
    hot_fraction: f64,
    allow_self: bool,
}

impl Destinations {
    pub fn new(cfg: &TrafficConfig, topo: &Topology, rng: &mut SimRng) -> Self {
        let n = topo.nodes.len() as u32;
        let grid = match &topo.shape {
            Shape::Torus { k, conc, .. } => Some((k.clone(), *conc)),
            _ => None,
        };
        let groups = match &topo.shape {
            Shape::Dragonfly { a, p, g, .. } => Some((a * p, *g)),
            _ => None,
        };
        let perm = if cfg.pattern == Pattern::RandomPermutation {
            derangement(n, rng)
        } else {
            Vec::new()
        };
        let hot = cfg.hotspot_nodes.clone();
        Destinations {
            pattern: cfg.pattern,
            n,
            bits: n.max(1).next_power_of_two().trailing_zeros(),
            grid,
            groups,
            perm,
            hot,
            hot_fraction: cfg.hotspot_fraction,
            allow_self: cfg.allow_self,
        }
    }

    /// Whether the destination of a source does not depend on chance.
    pub fn is_deterministic(&self) -> bool {
        !matches!(
            self.pattern,
            Pattern::Uniform | Pattern::Hotspot | Pattern::AllToAll | Pattern::GroupShift
        )
    }

    /// Group shift: the nodes of the group after `src`'s, all equally likely destinations
    /// (None for other patterns).
    pub fn next_group(&self, src: NodeId) -> Option<std::ops::Range<u32>> {
        match (self.pattern, self.groups) {
            (Pattern::GroupShift, Some((per, g))) => {
                let next = (src.0 / per + 1) % g;
                Some(next * per..(next + 1) * per)
            }
            _ => None,
        }
    }

    /// The next destination of `src`; `seq` counts the packets `src` has created.
    pub fn next(&self, src: NodeId, seq: u64, rng: &mut SimRng) -> NodeId {
        let n = self.n;
        let b = self.bits;
        let mask = n.wrapping_sub(1);
        // Patterns are arithmetic on node numbers.
        let src = src.0;
        NodeId(match self.pattern {
            Pattern::Uniform if self.allow_self => rng.gen_range(0..n),
            Pattern::Uniform => uniform_other(src, n, rng),
            Pattern::Transpose => {
                let h = b / 2;
                ((src >> h) | ((src & ((1 << h) - 1)) << h)) & mask
            }
            Pattern::BitComplement => !src & mask,
            Pattern::BitReverse => src.reverse_bits().checked_shr(32 - b).unwrap_or(0),
            Pattern::Shuffle => ((src << 1) | (src >> (b - 1))) & mask,
            Pattern::Tornado => self.along_grid(src, |k| k.div_ceil(2) - 1),
            Pattern::NearestNeighbor => self.along_grid(src, |_| 1),
            Pattern::Hotspot => {
                if rng.gen::<f64>() < self.hot_fraction {
                    self.hot[rng.gen_range(0..self.hot.len())].0
                } else {
                    uniform_other(src, n, rng)
                }
            }
            Pattern::RandomPermutation => self.perm[src as usize].0,
            Pattern::AllToAll => (src + 1 + (seq % (n as u64 - 1)) as u32) % n,
            Pattern::GroupShift => {
                // Validated: a dragonfly, whose shape gives the groups.
                let (per, g) = self.groups.unwrap_or((n, 1));
                let next = (src / per + 1) % g;
                next * per + rng.gen_range(0..per)
            }
        })
    }

    /// Move `offset(k)` along every torus dimension (tornado) or along dimension 0 only
    /// (neighbour); on other topologies, along the ring of node ids.
    fn along_grid(&self, src: u32, offset: impl Fn(u32) -> u32) -> u32 {
        let all_dims = self.pattern == Pattern::Tornado;
        match &self.grid {
            Some((k, conc)) => {
                let (mut r, c) = (src / conc, src % conc);
                let mut out = 0;
                let mut stride = 1;
                for (d, &kd) in k.iter().enumerate() {
                    let x = r % kd;
                    r /= kd;
                    let nx = if d == 0 || all_dims { (x + offset(kd)) % kd } else { x };
                    out += nx * stride;
                    stride *= kd;
                }
                out * conc + c
            }
            None => (src + offset(self.n)) % self.n,
        }
    }
}

fn uniform_other(src: u32, n: u32, rng: &mut SimRng) -> u32 {
    let d = rng.gen_range(0..n - 1);
    if d >= src {
        d + 1
    } else {
        d
    }
}

/// A random permutation without fixed points (shuffle, then rotate away any fixed points).
fn derangement(n: u32, rng: &mut SimRng) -> Vec<NodeId> {
    let mut p: Vec<NodeId> = (0..n).map(NodeId).collect();
    p.shuffle(rng);
    let fixed: Vec<usize> = (0..n as usize).filter(|&i| p[i] == NodeId(i as u32)).collect();
    if fixed.len() == 1 {
        let i = fixed[0];
        let j = (i + 1) % n as usize;
        p.swap(i, j);
    } else if fixed.len() > 1 {
        // Rotate the fixed points' targets among themselves.
        let vals: Vec<NodeId> = fixed.iter().map(|&i| p[i]).collect();
        for (k, &i) in fixed.iter().enumerate() {
            p[i] = vals[(k + 1) % vals.len()];
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpcnet_des::RngStreams;

    #[test]
    fn a_size_choice_draws_by_weight_and_never_a_zero_weight() {
        let d = SizeDist::Choice {
            sizes: vec![Bytes(8), Bytes(16), Bytes(32), Bytes(64)],
            weights: vec![1.0, 0.0, 3.0, 0.0],
        };
        let sampler = d.sampler();
        let mut rng = RngStreams::new(3).stream("size", 0);
        let mut counts = [0u32; 4];
        for _ in 0..40_000 {
            let s = sampler.sample(&mut rng);
            counts[(s.trailing_zeros() - 3) as usize] += 1;
        }
        assert_eq!((counts[1], counts[3]), (0, 0));
        let share = counts[2] as f64 / 40_000.0;
        assert!((share - 0.75).abs() < 0.01, "{share}");
    }

    #[test]
    fn a_large_size_choice_draws_in_logarithmic_time() {
        // 200 000 sizes and 200 000 draws: linear search would take 2·10^10 steps.
        let n = 200_000;
        let d = SizeDist::Choice {
            sizes: (0..n).map(|i| Bytes(1 + i % 256)).collect(),
            weights: vec![1.0; n as usize],
        };
        let sampler = d.sampler();
        let mut rng = RngStreams::new(1).stream("size", 0);
        let started = std::time::Instant::now();
        let sum: u64 = (0..200_000).map(|_| sampler.sample(&mut rng)).sum();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let mean = sum as f64 / 200_000.0;
        assert!((mean - 128.5).abs() < 2.0, "{mean}");
    }

    fn dests(pattern: Pattern, n: u32) -> Destinations {
        Destinations {
            pattern,
            n,
            bits: n.next_power_of_two().trailing_zeros(),
            grid: None,
            groups: None,
            perm: Vec::new(),
            hot: vec![NodeId(0)],
            hot_fraction: 0.5,
            allow_self: false,
        }
    }

    #[test]
    fn bit_patterns_match_their_definitions() {
        let mut rng = RngStreams::new(1).stream("t", 0);
        let d = dests(Pattern::BitComplement, 16);
        assert_eq!(d.next(NodeId(0b0011), 0, &mut rng), NodeId(0b1100));
        let d = dests(Pattern::BitReverse, 16);
        assert_eq!(d.next(NodeId(0b0001), 0, &mut rng), NodeId(0b1000));
        let d = dests(Pattern::Shuffle, 16);
        assert_eq!(d.next(NodeId(0b1001), 0, &mut rng), NodeId(0b0011));
        let d = dests(Pattern::Transpose, 16);
        assert_eq!(d.next(NodeId(0b0111), 0, &mut rng), NodeId(0b1101));
    }

    #[test]
    fn permutations_are_permutations() {
        let mut rng = RngStreams::new(1).stream("t", 0);
        for p in [
            Pattern::BitComplement,
            Pattern::BitReverse,
            Pattern::Shuffle,
            Pattern::Transpose,
        ] {
            let d = dests(p, 64);
            let mut seen = [false; 64];
            for s in 0..64 {
                seen[(d.next(NodeId(s), 0, &mut rng)).index()] = true;
            }
            assert!(seen.iter().all(|x| *x), "{p:?}");
        }
        for n in [2u32, 3, 7, 100] {
            let p = derangement(n, &mut rng);
            let mut sorted = p.clone();
            sorted.sort();
            assert_eq!(sorted, (0..n).map(NodeId).collect::<Vec<_>>());
            assert!(p.iter().enumerate().all(|(i, &x)| NodeId(i as u32) != x));
        }
    }

    #[test]
    fn uniform_never_picks_self_and_covers_all() {
        let mut rng = RngStreams::new(3).stream("t", 0);
        let d = dests(Pattern::Uniform, 8);
        let mut seen = [0u32; 8];
        for _ in 0..8000 {
            let x = d.next(NodeId(5), 0, &mut rng);
            assert_ne!(x, NodeId(5));
            seen[x.index()] += 1;
        }
        assert_eq!(seen[5], 0);
        assert!(seen.iter().enumerate().all(|(i, &c)| i == 5 || c > 900));
    }

    #[test]
    fn group_shift_sends_to_every_node_of_the_next_group() {
        let mut rng = RngStreams::new(1).stream("t", 0);
        let mut d = dests(Pattern::GroupShift, 72);
        d.groups = Some((8, 9));
        let mut seen = [0u32; 72];
        for _ in 0..4000 {
            seen[d.next(NodeId(13), 0, &mut rng).index()] += 1;
            seen[d.next(NodeId(70), 0, &mut rng).index()] += 1;
        }
        // Node 13 is in group 1: group 2 (nodes 16-23); node 70 in group 8: group 0 (0-7).
        for (i, &c) in seen.iter().enumerate() {
            let expected = (16..24).contains(&i) || (0..8).contains(&i);
            assert_eq!(c > 350, expected, "node {i}: {c}");
            assert_eq!(c == 0, !expected, "node {i}: {c}");
        }
        assert_eq!(d.next_group(NodeId(70)), Some(0..8));
        assert!(!d.is_deterministic());
    }

    #[test]
    fn tornado_on_a_torus_moves_half_way_minus_one() {
        let mut rng = RngStreams::new(1).stream("t", 0);
        let mut d = dests(Pattern::Tornado, 64);
        d.grid = Some((vec![8, 8], 1));
        // (1, 2) -> (1+3, 2+3)
        assert_eq!(d.next(NodeId(1 + 2 * 8), 0, &mut rng), NodeId(4 + 5 * 8));
        d.pattern = Pattern::NearestNeighbor;
        assert_eq!(d.next(NodeId(7 + 2 * 8), 0, &mut rng), NodeId(2 * 8));
    }
}
