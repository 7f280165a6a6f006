//! `loggp`: the cHPP LogGP latency model and the mean-distance formulas H(P) it uses
//! (spec 02, "Latency model (LogGP-based)").
//!
//! The paper estimates the latency of a 2 KB message across a network of P processors as
//! T = O_c + O_ds + (M − 1)·G + H(P)·r + O_dr and tabulates H(P), the mean distance, for five
//! direct networks. This study builds each network with the simulator's own topology builder
//! ([`hpcnet_fabric::topology::build`]), measures its mean router distance by breadth-first search
//! over all ordered pairs *including* a router with itself (the formulas average over all P²
//! pairs), and compares it with the paper's H(P). The "simulated" latency is the paper's formula
//! evaluated with the measured H: this study checks the model's topologies against the paper's
//! analysis; it does not run packets.
//!
//! Roles: no row is a prediction. H of a built network is a property of the topology builder,
//! which the closed forms below fix exactly, and T is the paper's own formula, so neither can
//! test the model against the paper; every row is information and the study gives no verdict.
//! No parameter is fitted and no scenario is simulated, so `--set` does not apply.
//!
//! Closed forms for all-pairs means (self pairs included): a k-ring has mean k/4 (k even) or
//! (k² − 1)/(4k) (k odd); a k-line (mesh dimension) (k² − 1)/(3k); the binary n-cube n/2; a
//! product network the sum over its dimensions. So the torus and hypercube formulas are exact
//! for even k, while the mesh formulas are the large-k limits of (k² − 1)/(3k) per dimension.

use crate::plot::{Figure, Series, Style};
use crate::{Ctx, Row, Study, StudyError, StudyReport};
use hpcnet_fabric::topology::{build, GridConfig, HypercubeConfig, RouterId, Topology, TopologyConfig};

// Reference values: spec/02-chpp.md, "Latency model (LogGP-based)", the paper's example values.
/// CPU send start-up, O_c.
const O_C_NS: f64 = 200.0;
/// DMA start-up (doorbell + descriptor fetch), O_ds.
const O_DS_NS: f64 = 528.0;
/// Message size M = 2 KB.
const M_BYTES: f64 = 2048.0;
/// Gap per byte G = 1/4 ns/B (4 GB/s).
const G_NS_PER_BYTE: f64 = 0.25;
/// Per-hop time r. The paper labels both 240 ns and 160 ns "O_dr"; we read 240 ns as r.
const R_NS_PER_HOP: f64 = 240.0;
/// Receive-side DMA, O_dr (the other of the two values labelled "O_dr").
const O_DR_NS: f64 = 160.0;

/// Processor counts of the comparison (spec 02 tabulates H(P) for general P).
const SIZES: [u32; 3] = [64, 512, 4096];
/// Quick runs skip the largest size (4096² BFS steps per family).
const QUICK_SIZES: [u32; 2] = [64, 512];
/// Tolerance on H for the formulas that are exact for the networks built (tori with even k,
/// hypercubes): only floating-point noise should remain.
const EXACT_TOLERANCE: f64 = 0.02;

pub struct LogGp;

/// The five networks of the paper's H(P) table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Family {
    Hypercube,
    Torus3,
    Mesh3,
    Torus2,
    Mesh2,
}

const FAMILIES: [Family; 5] = [
    Family::Hypercube,
    Family::Torus3,
    Family::Mesh3,
    Family::Torus2,
    Family::Mesh2,
];

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Hypercube => "hypercube",
            Family::Torus3 => "3D torus",
            Family::Mesh3 => "3D mesh",
            Family::Torus2 => "2D torus",
            Family::Mesh2 => "2D mesh",
        }
    }

    /// The paper's H(P) (spec 02, "Latency model", mean-distance table).
    fn paper_h(self, p: f64) -> f64 {
        match self {
            Family::Hypercube => 0.5 * p.log2(),
            Family::Torus3 => 0.75 * p.cbrt(),
            Family::Mesh3 => p.cbrt(),
            Family::Torus2 => 0.5 * p.sqrt(),
            Family::Mesh2 => 2.0 / 3.0 * p.sqrt(),
        }
    }

    fn formula(self) -> &'static str {
        match self {
            Family::Hypercube => "½·log2 P",
            Family::Torus3 => "¾·P^(1/3)",
            Family::Mesh3 => "P^(1/3)",
            Family::Torus2 => "½·P^(1/2)",
            Family::Mesh2 => "⅔·P^(1/2)",
        }
    }

    fn is_mesh(self) -> bool {
        matches!(self, Family::Mesh2 | Family::Mesh3)
    }

    /// The network with `p` routers (one processor each), and whether it has the equal-sided
    /// shape the formula assumes. A 2D network of 512 routers cannot be square: 16 × 32.
    fn network(self, p: u32) -> (TopologyConfig, bool) {
        let grid = |k: Vec<u32>| GridConfig {
            k,
            concentration: 1,
            radix: None,
        };
        let dims = match self {
            Family::Hypercube => {
                return (
                    TopologyConfig::Hypercube(HypercubeConfig {
                        n: p.ilog2(),
                        concentration: 1,
                        radix: None,
                    }),
                    p.is_power_of_two(),
                )
            }
            Family::Torus3 | Family::Mesh3 => 3,
            Family::Torus2 | Family::Mesh2 => 2,
        };
        let k = (f64::from(p).powf(1.0 / f64::from(dims))).round() as u32;
        let (k, regular) = if k.pow(dims) == p {
            (vec![k; dims as usize], true)
        } else {
            // Nearest power-of-two sides whose product is p (p is a power of two here).
            let mut sides = vec![1u32 << (p.ilog2() / dims); dims as usize];
            let mut rest = p / sides.iter().product::<u32>();
            for s in sides.iter_mut().rev() {
                if rest <= 1 {
                    break;
                }
                *s *= 2;
                rest /= 2;
            }
            (sides, false)
        };
        let cfg = match self {
            Family::Torus3 | Family::Torus2 => TopologyConfig::Torus(grid(k)),
            _ => TopologyConfig::Mesh(grid(k)),
        };
        (cfg, regular)
    }
}

/// Closed-form all-pairs mean distance (self pairs included) of a torus or mesh with sides `k`.
fn exact_grid_mean(k: &[u32], wrap: bool) -> f64 {
    k.iter()
        .map(|&k| {
            let k = f64::from(k);
            match (wrap, k as u64 % 2) {
                (true, 0) => k / 4.0,
                (true, _) => (k * k - 1.0) / (4.0 * k),
                (false, _) => (k * k - 1.0) / (3.0 * k),
            }
        })
        .sum()
}

/// Mean router distance over all ordered pairs, a router with itself included (distance 0).
///
/// One breadth-first search per source over the topology's router links, as
/// [`Topology::router_distances_from`] does, on a compact adjacency list with reused buffers and
/// the sources split over threads (P = 4096 means 16.7 M pairs per network).
pub fn mean_distance_all_pairs(t: &Topology) -> f64 {
    let n = t.num_routers();
    let mut start = Vec::with_capacity(n + 1);
    let mut adj = Vec::new();
    for r in 0..n as u32 {
        start.push(adj.len());
        adj.extend(t.neighbors(RouterId(r)).map(|v| v.0));
    }
    start.push(adj.len());
    let bfs_sum = |sources: std::ops::Range<u32>| -> u64 {
        let mut dist = vec![u32::MAX; n];
        let mut queue = vec![0u32; n];
        let mut total = 0u64;
        for s in sources {
            dist.fill(u32::MAX);
            dist[s as usize] = 0;
            queue[0] = s;
            let (mut head, mut tail) = (0, 1);
            while head < tail {
                let u = queue[head] as usize;
                head += 1;
                let d = dist[u] + 1;
                for &v in &adj[start[u]..start[u + 1]] {
                    if dist[v as usize] == u32::MAX {
                        dist[v as usize] = d;
                        total += u64::from(d);
                        queue[tail] = v;
                        tail += 1;
                    }
                }
            }
            assert_eq!(tail, n, "topologies are validated connected");
        }
        total
    };
    let threads = std::thread::available_parallelism().map_or(1, |x| x.get()).clamp(1, n);
    let chunk = n.div_ceil(threads) as u32;
    let total: u64 = std::thread::scope(|sc| {
        let workers: Vec<_> = (0..threads as u32)
            .map(|i| {
                let range = (i * chunk).min(n as u32)..((i + 1) * chunk).min(n as u32);
                sc.spawn(move || bfs_sum(range))
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("BFS worker")).sum()
    });
    total as f64 / (n as f64 * n as f64)
}

/// The LogGP latency of a 2 KB message over H hops.
fn latency_ns(h: f64) -> f64 {
    O_C_NS + O_DS_NS + (M_BYTES - 1.0) * G_NS_PER_BYTE + h * R_NS_PER_HOP + O_DR_NS
}

/// One measured network.
struct Point {
    family: Family,
    p: u32,
    paper_h: f64,
    measured_h: f64,
}

impl Study for LogGp {
    fn name(&self) -> &'static str {
        "loggp"
    }

    fn title(&self) -> &'static str {
        "cHPP LogGP latency model: mean distance H(P) of five networks and 2 KB latency T(P)"
    }

    fn scenario(&self) -> Option<(&'static str, &'static str)> {
        None
    }

    fn fitted(&self) -> &'static [crate::Fitted] {
        &[]
    }

    fn run(&self, ctx: &Ctx) -> Result<StudyReport, StudyError> {
        let sizes: &[u32] = if ctx.quick { &QUICK_SIZES } else { &SIZES };
        let mut rows = Vec::new();
        let mut points = Vec::new();
        for &p in sizes {
            for family in FAMILIES {
                let (cfg, regular) = family.network(p);
                let topo = build(&cfg)?;
                let measured = mean_distance_all_pairs(&topo);
                let paper = family.paper_h(f64::from(p));
                let label = format!("H {} P={p} ({})", family.name(), topo.name);
                let mut row = Row::info(label, Some(paper), measured, "hops");
                if !family.is_mesh() && regular && (measured / paper - 1.0).abs() > EXACT_TOLERANCE {
                    row = row.with_note(format!(
                        "{} is exact for this network; the measured mean differs (topology builder)",
                        family.formula()
                    ));
                }
                if let Some(exact) = match &topo.shape {
                    hpcnet_fabric::topology::Shape::Torus { k, wrap, .. } if family.is_mesh() || !regular => {
                        Some(exact_grid_mean(k, *wrap))
                    }
                    _ => None,
                } {
                    let why = if regular {
                        format!(
                            "{} is the large-k limit; the exact mean of this mesh is Σ(k²−1)/(3k) = {}",
                            family.formula(),
                            crate::report::fmt_num(exact)
                        )
                    } else {
                        format!(
                            "no {} with {p} routers has equal sides; {} assumes them; the exact mean of {} is {}",
                            family.name(),
                            family.formula(),
                            topo.name,
                            crate::report::fmt_num(exact)
                        )
                    };
                    row = row.with_note(why);
                }
                rows.push(row);
                points.push(Point {
                    family,
                    p,
                    paper_h: paper,
                    measured_h: measured,
                });
            }
        }
        for pt in &points {
            rows.push(Row::info(
                format!("T {} P={}", pt.family.name(), pt.p),
                Some(latency_ns(pt.paper_h)),
                latency_ns(pt.measured_h),
                "ns",
            ));
        }
        let t = |f: Family, p: u32| {
            points
                .iter()
                .find(|x| x.family == f && x.p == p)
                .map(|x| latency_ns(x.measured_h))
                .expect("every family at every size")
        };
        let lowest = sizes
            .iter()
            .all(|&p| FAMILIES.iter().all(|&f| t(Family::Hypercube, p) <= t(f, p) + 1e-9));
        let (first, last) = (sizes[0], sizes[sizes.len() - 1]);
        let growth = |f: Family| t(f, last) - t(f, first);
        let slowest = FAMILIES
            .iter()
            .filter(|&&f| f != Family::Hypercube)
            .all(|&f| growth(Family::Hypercube) < growth(f));
        let yes = |x: bool| if x { 1.0 } else { 0.0 };
        rows.push(Row::info(
            format!("hypercube T lowest (or tied) at every P in {sizes:?} (paper: yes)"),
            Some(1.0),
            yes(lowest),
            crate::report::YES_NO,
        ));
        rows.push(Row::info(
            format!("hypercube T grows least from P={first} to P={last} (paper: yes)"),
            Some(1.0),
            yes(slowest),
            crate::report::YES_NO,
        ));

        let discrepancies = vec![
            format!(
                "The paper gives 240 ns and 160 ns and labels both O_dr. We take r = {R_NS_PER_HOP} ns per hop and \
                 O_dr = {O_DR_NS} ns, so T = {} ns + {R_NS_PER_HOP} ns × H.",
                crate::report::fmt_num(latency_ns(0.0))
            ),
            "H is the mean over all P² ordered processor pairs, a processor with itself included (distance 0), \
             as the formulas are; `hpcnet topo` reports the mean over distinct pairs, P/(P−1) times larger."
                .into(),
            "The mesh formulas P^(1/3) and ⅔·P^(1/2) are large-k approximations: a k-node line has mean distance \
             (k²−1)/(3k), not k/3. They overstate H by 1/k² relative (6 % for the 4×4×4 mesh), so mesh rows are \
             information, with the exact value in the notes."
                .into(),
            "No 2D network with 512 processors is square; 16×32 is used and its rows are information (the \
             formulas assume k×k)."
                .into(),
            "At P = 64 the 4×4×4 torus is the 6-cube (a 4-node ring is a 2-cube), so hypercube and 3D torus tie; \
             \"lowest\" is checked as lowest or tied."
                .into(),
            "T is the paper's formula evaluated with the simulator's measured H. No packets are simulated in this \
             study, so its rows are information: they show that the model's topologies have the mean distances the \
             paper's analysis assumes, not that the model reproduces a measurement."
                .into(),
        ];
        let mut report = StudyReport::new(
            self.name(),
            self.title(),
            "spec/02-chpp.md, \"Latency model (LogGP-based)\"",
            rows,
            discrepancies,
            ctx.quick,
        );
        report.figures = figures(&points, sizes);
        Ok(report)
    }
}

/// H and T against log2 P: the paper's formulas dashed, the measured networks solid.
fn figures(points: &[Point], sizes: &[u32]) -> Vec<Figure> {
    let lo = f64::from(sizes[0]).log2();
    let hi = f64::from(sizes[sizes.len() - 1]).log2();
    let grid: Vec<f64> = (0..=24).map(|i| lo + (hi - lo) * f64::from(i) / 24.0).collect();
    let panel = |title: &str, y_label: &str, y: &dyn Fn(f64) -> f64| {
        let mut series = Vec::new();
        for (c, f) in FAMILIES.iter().enumerate() {
            series.push(Series {
                label: format!("{} simulated", f.name()),
                points: points
                    .iter()
                    .filter(|x| x.family == *f)
                    .map(|x| (f64::from(x.p).log2(), y(x.measured_h)))
                    .collect(),
                style: Style::Points,
                color: c,
            });
            series.push(Series {
                label: format!("{} paper {}", f.name(), f.formula()),
                points: grid.iter().map(|&l| (l, y(f.paper_h(l.exp2())))).collect(),
                style: Style::Dashed,
                color: c,
            });
        }
        Figure {
            title: title.into(),
            x_label: "log2 P (processors)".into(),
            y_label: y_label.into(),
            y_log: false,
            series,
            marks: Vec::new(),
        }
    };
    vec![
        panel("mean distance H(P)", "H (router hops)", &|h| h),
        panel("LogGP latency of a 2 KB message", "T (ns)", &latency_ns),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_have_p_routers_and_expected_shapes() {
        for p in SIZES {
            for f in FAMILIES {
                let (cfg, regular) = f.network(p);
                let t = build(&cfg).unwrap();
                assert_eq!(t.num_routers() as u32, p, "{f:?} {p}");
                assert_eq!(t.num_nodes() as u32, p, "{f:?} {p}");
                let square = !(p == 512 && matches!(f, Family::Torus2 | Family::Mesh2));
                assert_eq!(regular, square, "{f:?} {p}: {}", t.name);
            }
        }
        let (cfg, _) = Family::Mesh2.network(512);
        assert_eq!(build(&cfg).unwrap().name, "mesh 16x32");
    }

    #[test]
    fn measured_means_equal_the_closed_forms() {
        for p in QUICK_SIZES {
            for f in FAMILIES {
                let (cfg, _) = f.network(p);
                let t = build(&cfg).unwrap();
                let m = mean_distance_all_pairs(&t);
                let exact = match &t.shape {
                    hpcnet_fabric::topology::Shape::Torus { k, wrap, .. } => exact_grid_mean(k, *wrap),
                    hpcnet_fabric::topology::Shape::Hypercube { n, .. } => f64::from(*n) / 2.0,
                    s => panic!("{s:?}"),
                };
                assert!((m - exact).abs() < 1e-9, "{f:?} P={p}: measured {m}, exact {exact}");
            }
        }
        // Same result as the topology's own BFS, on an irregular graph too.
        let ft = build(&TopologyConfig::FatTree(hpcnet_fabric::topology::FatTreeConfig {
            k: 3,
            n: 3,
            radix: None,
        }))
        .unwrap();
        let n = ft.num_routers() as f64;
        let reference: f64 = (0..ft.num_routers() as u32)
            .flat_map(|r| ft.router_distances_from(RouterId(r)))
            .map(f64::from)
            .sum::<f64>()
            / (n * n);
        assert!((mean_distance_all_pairs(&ft) - reference).abs() < 1e-12);
        // Odd rings too: 5-ring mean (25 − 1)/20 = 1.2.
        let ring = build(&TopologyConfig::Torus(GridConfig {
            k: vec![5],
            concentration: 1,
            radix: None,
        }))
        .unwrap();
        assert!((mean_distance_all_pairs(&ring) - 1.2).abs() < 1e-12);
    }

    #[test]
    fn latency_formula_uses_the_paper_values() {
        // 200 + 528 + 2047/4 + 160 = 1399.75 ns, plus 240 ns per hop.
        assert!((latency_ns(0.0) - 1399.75).abs() < 1e-9);
        assert!((latency_ns(3.0) - (1399.75 + 720.0)).abs() < 1e-9);
    }

    #[test]
    fn quick_run_passes_and_marks_roles() {
        let r = LogGp.run(&Ctx::quick(true)).unwrap();
        assert!(r.pass, "{}", r.to_text());
        assert_eq!(r.verdict_word(), "NO VERDICT");
        assert!(r.quick);
        let role = |label: &str| r.rows.iter().find(|x| x.label.starts_with(label)).unwrap().role;
        assert!(r.rows.iter().all(|x| x.role == crate::Role::Info));
        // The exact formulas hold for the networks built.
        let h = r.rows.iter().find(|x| x.label.starts_with("H hypercube P=64")).unwrap();
        assert!((h.simulated / h.paper.unwrap() - 1.0).abs() < EXACT_TOLERANCE);
        assert_eq!(role("H 3D mesh P=64"), crate::Role::Info);
        assert_eq!(role("H 2D torus P=512"), crate::Role::Info);
        assert_eq!(role("T hypercube P=64"), crate::Role::Info);
        // The 4×4×4 mesh is where the approximation is worst: 3.75 measured vs 4.
        let mesh = r.rows.iter().find(|x| x.label.starts_with("H 3D mesh P=64")).unwrap();
        assert!((mesh.simulated - 3.75).abs() < 1e-9 && (mesh.paper.unwrap() - 4.0).abs() < 1e-9);
        let claims: Vec<_> = r.rows.iter().filter(|x| x.unit == crate::report::YES_NO).collect();
        assert_eq!(claims.len(), 2);
        assert!(claims.iter().all(|c| c.simulated == 1.0));
        assert_eq!(r.figures.len(), 2);
        crate::plot::svg(&r.figures).unwrap();
    }
}
