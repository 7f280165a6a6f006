//! `sunway-rdma-bandwidth`: RDMA-write bandwidth of the Sunway NIC against message size on one
//! port, the derived peaks, and node bandwidth over both ports (spec 01, "Published results").
//!
//! Runs `p2p::stream` (RDMA writes, window 64, one queue pair on rail 0) from rank 0 to the last
//! rank, which sits on another leaf, on `scenarios/sunway-prototype.toml`, for message sizes
//! 8 B … 4 MB.
//!
//! Declared calibration ([`Study::fitted`]): `nic.message_overhead` is fitted to the 4 KB
//! point, `link.lane_rate` (28.125 Gb/s) is read off the published port peak and
//! `packet.header` (24 B per 1 KiB) off the published payload efficiency; the port peak and the
//! efficiency are computed from the model's configuration (link data rate,
//! `World::payload_efficiency`) and shown as calibration rows. The one prediction is the 1 MB
//! bandwidth. The published fractions of the peaks (1 MB over link peak and over software
//! peak) are the 1 MB figure divided by the two calibrated peaks, so they cannot fail on their
//! own and are information rows.
//!
//! Node bandwidth: two queue pairs (one per message engine) with `nic.port_select = "adaptive"`,
//! so every packet takes the port whose queue drains first at that port's rate. Then rail 1 of the source node is degraded to one
//! lane (link width renegotiation, a `[[link_overrides]]` entry) and fixed rail 0, fixed rail 1
//! and adaptive port selection are compared.

use crate::plot::{Figure, Mark, Series, Style};
use crate::report::YES_NO;
use crate::{Ctx, Fitted, Row, Study, StudyError, StudyReport};
use hpcnet_workloads::p2p::{try_stream, Options, Point};
use hpcnet_workloads::Rank;
use hpcnet_workloads::Scenario;

const SCENARIO_TOML: &str = include_str!("../../../scenarios/sunway-prototype.toml");
const SCENARIO_PATH: &str = "scenarios/sunway-prototype.toml";

// Published values: spec/01-sunway.md, "Published results".
/// RDMAW bandwidth of 4 KB messages on one port (the calibration point of `nic.message_overhead`).
const PAPER_4K_GBS: f64 = 7.08;
/// RDMAW bandwidth of 1 MB messages on one port.
const PAPER_1M_GBS: f64 = 13.269;
/// Port peak: 4 lanes, 64b/66b coding.
const PAPER_PORT_PEAK_GBS: f64 = 13.63;
/// Maximum packet payload efficiency, in %.
const PAPER_EFFICIENCY_PCT: f64 = 97.7;
/// Software-usable peak = port peak × payload efficiency.
const PAPER_SOFT_PEAK_GBS: f64 = 13.324;
/// 1 MB bandwidth as a fraction of the link peak, in %.
const PAPER_1M_OF_LINK_PCT: f64 = 97.3;
/// 1 MB bandwidth as a fraction of the software peak, in %.
const PAPER_1M_OF_SOFT_PCT: f64 = 99.6;
/// Node injection bandwidth (2 ports).
const PAPER_NODE_GBS: f64 = 28.0;
/// MPI bandwidth.
const PAPER_MPI_GBS: f64 = 26.0;

/// Tolerance of the predictions that come out of simulation runs.
const TOLERANCE: f64 = 0.05;
/// Tolerance within which the calibration point counts as fitted.
const CALIBRATION_TOLERANCE: f64 = 0.02;

/// Messages in flight (spec 01 does not give the benchmark's window; 64 keeps the port busy).
const WINDOW: u32 = 64;
const KB4: u64 = 4 << 10;
const MB1: u64 = 1 << 20;

pub struct SunwayRdmaBandwidth;

/// The declared calibration of `scenarios/sunway-prototype.toml` (spec/01-sunway.md,
/// "Published results").
const FITTED: [Fitted; 3] = [
    Fitted {
        key: "nic.message_overhead",
        point: "RDMAW bandwidth of 4 KB messages on one port = 7.08 GB/s",
        study: "sunway-rdma-bandwidth",
    },
    Fitted {
        key: "link.lane_rate",
        point: "port peak = 13.63 GB/s (4 lanes, 64b/66b)",
        study: "sunway-rdma-bandwidth",
    },
    Fitted {
        key: "packet.header",
        point: "maximum packet payload efficiency = 97.7 %",
        study: "sunway-rdma-bandwidth",
    },
];

fn load(ctx: &Ctx, over: &[String]) -> Result<Scenario, StudyError> {
    ctx.load(SCENARIO_TOML, SCENARIO_PATH, "sunway-prototype", over)
}

/// Message sizes of the curve: 8 B … 4 MB (quick: four sizes).
fn sizes(quick: bool) -> Vec<u64> {
    if quick {
        vec![8, KB4, 64 << 10, MB1]
    } else {
        (3..=22).map(|k| 1u64 << k).collect()
    }
}

/// Messages streamed at `size`: about 32 MiB (quick: 4 MiB), at least 32 (8) and at most 4096
/// (256), so every point is long against the pipeline's fill and drain.
fn messages(size: u64, quick: bool) -> u64 {
    let (total, min, max) = if quick { (4 << 20, 8, 256) } else { (32 << 20, 32, 4096) };
    (total / size).clamp(min, max)
}

/// One streaming run: scenario overrides and benchmark options.
#[derive(Clone, Debug)]
struct Job {
    set: Vec<String>,
    size: u64,
    opts: Options,
}

fn run_job(ctx: &Ctx, job: &Job) -> Result<Point, StudyError> {
    let sc = load(ctx, &job.set)?;
    let world = sc.world()?;
    let last = Rank(world.ranks() as u32 - 1);
    try_stream(world, Rank(0), last, job.size, false, &job.opts).map_err(|e| {
        crate::p2p_error(
            &format!("{SCENARIO_PATH}: RDMA-write stream of {} B messages", job.size),
            e,
        )
    })
}

fn opts(qps: u32, rail: u8, messages: u64) -> Options {
    Options {
        window: WINDOW,
        messages,
        qps,
        rail,
    }
}

/// The `--set` override that cuts the link of rank 0's node on rail 1 to one lane.
fn degrade_rail1(sc: &Scenario) -> Result<String, StudyError> {
    let world = sc.world()?;
    let node = world.placement().node_of(Rank(0)).index();
    let (router, port) = *sc.topology.nodes[node]
        .ports
        .get(1)
        .ok_or_else(|| StudyError::Unsupported(format!("{SCENARIO_PATH}: node {node} has no rail-1 port")))?;
    Ok(format!(
        "link_overrides=[{{router = {router}, port = {port}, lanes = 1}}]"
    ))
}

impl Study for SunwayRdmaBandwidth {
    fn name(&self) -> &'static str {
        "sunway-rdma-bandwidth"
    }

    fn title(&self) -> &'static str {
        "Sunway RDMA-write bandwidth vs message size on one port, port and software peaks, node bandwidth on two ports"
    }

    fn scenario(&self) -> Option<(&'static str, &'static str)> {
        Some((SCENARIO_TOML, SCENARIO_PATH))
    }

    fn fitted(&self) -> &'static [Fitted] {
        &FITTED
    }

    fn run(&self, ctx: &Ctx) -> Result<StudyReport, StudyError> {
        let q = ctx.quick;
        let base = load(ctx, &[])?;
        let world = base.world()?;
        let last = Rank(world.ranks() as u32 - 1);
        let place = world.placement();
        let (src_node, dst_node) = (place.node_of(Rank(0)).index(), place.node_of(last).index());
        let leaf = |n: usize| base.topology.nodes[n].ports[0].0;
        if leaf(src_node) == leaf(dst_node) {
            return Err(StudyError::Unsupported(format!(
                "{SCENARIO_PATH}: ranks 0 and {last} share a leaf; the study wants a path over the spines"
            )));
        }
        let link_gbs = base.fabric.link.data_rate().as_bytes_per_sec_f64() / 1e9;
        let efficiency = world.payload_efficiency();
        let soft_gbs = link_gbs * efficiency;
        drop(world);

        let sizes = sizes(q);
        let mut jobs: Vec<Job> = sizes
            .iter()
            .map(|&size| Job {
                set: Vec::new(),
                size,
                opts: opts(1, 0, messages(size, q)),
            })
            .collect();
        // Node runs: 1 MB messages (quick: 64 KB), two queue pairs. The runs with a degraded rail
        // stream 4 windows of messages, so that the window, not the initial batch, sets the pace.
        let (node_size, batch, steady) = if q {
            (64 << 10, 64, 256)
        } else {
            (MB1, 64, 4 * WINDOW as u64)
        };
        let adaptive = "nic.port_select=adaptive".to_string();
        let degraded = degrade_rail1(&base)?;
        let node_jobs = [
            (vec![adaptive.clone()], 0u8, batch),
            (Vec::new(), 0, batch),
            (vec![degraded.clone()], 0, steady),
            (vec![degraded.clone()], 1, steady),
            (vec![degraded.clone(), adaptive.clone()], 0, steady),
            (vec![degraded.clone(), adaptive.clone()], 0, WINDOW as u64 / 2),
        ];
        for (set, rail, n) in node_jobs {
            jobs.push(Job {
                set,
                size: node_size,
                opts: opts(2, rail, n),
            });
        }
        let out: Vec<Point> = crate::par_map(&jobs, |j| run_job(ctx, j))
            .into_iter()
            .collect::<Result<_, _>>()?;
        let curve: Vec<(u64, f64)> = out[..sizes.len()].iter().map(|p| (p.size, p.gbytes_per_s)).collect();
        let at = |s: u64| curve.iter().find(|p| p.0 == s).map(|p| p.1).expect("size in the sweep");
        let node = &out[sizes.len()..];
        let (node_adaptive, node_fixed0) = (node[0].gbytes_per_s, node[1].gbytes_per_s);
        let (deg_fixed0, deg_fixed1, deg_adaptive) = (node[2].gbytes_per_s, node[3].gbytes_per_s, node[4].gbytes_per_s);
        let deg_batch = node[5].gbytes_per_s;
        let nsz = size_label(node_size);
        let bw_1m = at(MB1);

        let mut rows = vec![Row::calibration(
            "RDMAW bandwidth, 4 KB messages, one port",
            PAPER_4K_GBS,
            at(KB4),
            "GB/s",
            CALIBRATION_TOLERANCE,
        )
        .with_note("nic.message_overhead (55 ns) was fitted to this point (scenario comment)")];
        rows.push(Row::prediction(
            "RDMAW bandwidth, 1 MB messages, one port",
            PAPER_1M_GBS,
            bw_1m,
            "GB/s",
            TOLERANCE,
        ));
        let lanes = base.fabric.link.lanes;
        rows.push(
            Row::calibration(
                format!("port peak = link data rate ({lanes} lanes × link.lane_rate × line coding)"),
                PAPER_PORT_PEAK_GBS,
                link_gbs,
                "GB/s",
                CALIBRATION_TOLERANCE,
            )
            .with_note(
                "link.lane_rate (28.125 Gb/s) is read off this published peak; computed from the model's link \
                 configuration",
            ),
        );
        rows.push(
            Row::calibration(
                format!(
                    "maximum packet payload efficiency (max payload / (max payload + {} header))",
                    base.fabric.packet.header
                ),
                PAPER_EFFICIENCY_PCT,
                100.0 * efficiency,
                "%",
                CALIBRATION_TOLERANCE,
            )
            .with_note(
                "packet.header (24 B per 1 KiB of payload) is read off this published efficiency; computed by \
                 World::payload_efficiency",
            ),
        );
        rows.push(
            Row::info(
                "software peak = link data rate × payload efficiency",
                Some(PAPER_SOFT_PEAK_GBS),
                soft_gbs,
                "GB/s",
            )
            .with_note("product of the two calibration rows"),
        );
        let ratio = "the 1 MB row divided by a calibrated peak: it moves only with the 1 MB row, which is judged";
        rows.push(
            Row::info(
                "1 MB bandwidth / link peak",
                Some(PAPER_1M_OF_LINK_PCT),
                100.0 * bw_1m / link_gbs,
                "%",
            )
            .with_note(ratio),
        );
        rows.push(
            Row::info(
                "1 MB bandwidth / software peak",
                Some(PAPER_1M_OF_SOFT_PCT),
                100.0 * bw_1m / soft_gbs,
                "%",
            )
            .with_note(ratio),
        );
        rows.push(
            Row::info(
                format!("node bandwidth, 2 ports adaptive, 2 QPs, {nsz} (vs published node injection bandwidth)"),
                Some(PAPER_NODE_GBS),
                node_adaptive,
                "GB/s",
            )
            .with_note(format!(
                "payload bandwidth; the model's bound is 2 × software peak = {} GB/s (see discrepancies)",
                crate::report::fmt_num(2.0 * soft_gbs)
            )),
        );
        rows.push(Row::info(
            format!("node bandwidth, 2 ports adaptive, 2 QPs, {nsz} (vs published MPI bandwidth)"),
            Some(PAPER_MPI_GBS),
            node_adaptive,
            "GB/s",
        ));
        rows.push(Row::info(
            format!("2 QPs fixed on rail 0, {nsz} (one port, both engines)"),
            None,
            node_fixed0,
            "GB/s",
        ));
        rows.push(Row::info(
            format!("rail 1 of the source at 1 lane: 2 QPs fixed on rail 0, {nsz}, {steady} messages"),
            None,
            deg_fixed0,
            "GB/s",
        ));
        rows.push(Row::info(
            format!("rail 1 of the source at 1 lane: 2 QPs fixed on rail 1, {nsz}, {steady} messages"),
            None,
            deg_fixed1,
            "GB/s",
        ));
        rows.push(Row::info(
            format!("rail 1 of the source at 1 lane: 2 QPs adaptive, {nsz}, {steady} messages"),
            None,
            deg_adaptive,
            "GB/s",
        ));
        rows.push(
            Row::info(
                format!(
                    "rail 1 of the source at 1 lane: 2 QPs adaptive, {nsz}, {} messages posted at once (transient)",
                    WINDOW / 2
                ),
                None,
                deg_batch,
                "GB/s",
            )
            .with_note(
                "adaptive selection sends each packet to the rail whose queue drains first at that rail's rate, \
                 so the 1-lane rail takes about a fifth of a batch posted at once (see discrepancies)",
            ),
        );
        rows.push(Row::info(
            format!("rail 1 degraded: adaptive ≥ better fixed rail ({steady} messages)"),
            None,
            if deg_adaptive >= deg_fixed0.max(deg_fixed1) {
                1.0
            } else {
                0.0
            },
            YES_NO,
        ));
        for &(size, gbs) in &curve {
            if size != KB4 && size != MB1 {
                rows.push(Row::info(
                    format!("RDMAW bandwidth, {} messages, one port", size_label(size)),
                    None,
                    gbs,
                    "GB/s",
                ));
            }
        }

        let discrepancies = vec![
            format!(
                "The published node injection bandwidth 28 GB/s is 2 ports × 4 lanes × 28 Gb/s = 224 Gb/s, the raw \
                 SerDes rate before 64b/66b coding and packet headers. The model reports payload bandwidth, which \
                 cannot exceed 2 × the software peak = {} GB/s; the node rows are therefore information, not \
                 predictions. The published MPI bandwidth (26 GB/s) is the closer comparison for a payload figure.",
                crate::report::fmt_num(2.0 * soft_gbs)
            ),
            "The paper quotes the port peak 13.63 GB/s (implying 28.125 Gb/s per lane, although the router is \
             described with 28 Gb/s SerDes) and the 97.7 % payload efficiency without the packet format. The \
             scenario takes 28.125 Gb/s and a 24 B header per 1 KiB payload from these two numbers (calibration \
             rows); the software peak is their product, and the published fractions 97.3 % and 99.6 % are the \
             1 MB figure over these peaks, so only the 1 MB bandwidth is judged."
                .into(),
            format!(
                "Benchmark: p2p::stream, RDMA writes from rank 0 (node {src_node}) to rank {last} (node {dst_node}, \
                 another leaf), window {WINDOW}, one queue pair on rail 0, fixed port selection; bandwidth = bytes / \
                 (last completion − first post), so each point includes one pipeline fill. Messages per size: \
                 32 MiB worth, at least 32 and at most 4096; from 1 MB up the window exceeds the count and all \
                 messages are posted at once, which still keeps the port saturated (one port is the only \
                 bottleneck). The paper does not give its window or message count."
            ),
            format!(
                "Degraded rail: the link between rank 0's node and its plane-1 leaf renegotiated to 1 lane \
                 (`--set {degraded}`), i.e. a quarter of the port rate; the destination keeps both rails at full \
                 width. The paper claims adaptive port choice avoids the less healthy port but gives no number."
            ),
            format!(
                "The model's adaptive port choice sends each packet to the rail whose injection queue drains first \
                 at that rail's own rate (queued packets over the port's rate), so a port renegotiated to fewer \
                 lanes counts as busier. In a steady stream ({steady} messages, window {WINDOW}) it gives {} GB/s \
                 against {} GB/s for the better fixed rail and {} GB/s for the sum of the two rails; with a batch \
                 of {} messages posted at once it gives {} GB/s. Node rows with a healthy fabric post {batch} \
                 messages (both ports saturate either way).",
                crate::report::fmt_num(deg_adaptive),
                crate::report::fmt_num(deg_fixed0.max(deg_fixed1)),
                crate::report::fmt_num(deg_fixed0 + deg_fixed1),
                WINDOW / 2,
                crate::report::fmt_num(deg_batch)
            ),
        ];
        let mut report = StudyReport::new(
            self.name(),
            self.title(),
            "spec/01-sunway.md, \"Published results\" (RDMAW bandwidth, node and MPI bandwidth)",
            rows,
            discrepancies,
            q,
        );
        report.seed = Some(base.file.seed);
        report.figures = figures(&curve, link_gbs, soft_gbs);
        Ok(report)
    }
}

/// "8 B", "4 KB", "1 MB" (binary multiples, as the paper writes them).
fn size_label(size: u64) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KB", s >> 10),
        s => format!("{s} B"),
    }
}

fn figures(curve: &[(u64, f64)], link_gbs: f64, soft_gbs: f64) -> Vec<Figure> {
    let x = |s: u64| (s as f64).log2();
    let panel = |y_log: bool| Figure {
        title: if y_log {
            "RDMAW bandwidth vs message size (log scale)".into()
        } else {
            "RDMAW bandwidth vs message size, one port".into()
        },
        x_label: "log2 message size (B)".into(),
        y_label: "bandwidth (GB/s)".into(),
        y_log,
        series: vec![
            Series {
                label: "model (p2p::stream, window 64)".into(),
                points: curve.iter().map(|&(s, g)| (x(s), g)).collect(),
                style: Style::Line,
                color: 0,
            },
            Series {
                label: "paper (4 KB calibration, 1 MB)".into(),
                points: vec![(x(KB4), PAPER_4K_GBS), (x(MB1), PAPER_1M_GBS)],
                style: Style::Points,
                color: 1,
            },
            Series {
                label: format!("model software peak {}", crate::report::fmt_num(soft_gbs)),
                points: vec![(x(curve[0].0), soft_gbs), (x(curve[curve.len() - 1].0), soft_gbs)],
                style: Style::Dashed,
                color: 2,
            },
        ],
        marks: vec![
            Mark::Y(format!("paper port peak {PAPER_PORT_PEAK_GBS}"), PAPER_PORT_PEAK_GBS),
            Mark::Y(
                format!("model link peak {}", crate::report::fmt_num(link_gbs)),
                link_gbs,
            ),
        ],
    };
    vec![panel(false), panel(true)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    #[test]
    fn degraded_rail_override_loads_and_slows_the_link() {
        let base = load(&Ctx::default(), &[]).unwrap();
        let set = degrade_rail1(&base).unwrap();
        let sc = load(&Ctx::default(), &[set]).unwrap();
        assert_eq!(sc.fabric.link_overrides.len(), 1);
        assert_eq!(sc.fabric.link_overrides[0].lanes, Some(1));
        let (r, p) = base.topology.nodes[0].ports[1];
        assert_eq!(
            (sc.fabric.link_overrides[0].router, sc.fabric.link_overrides[0].port),
            (r, p)
        );
    }

    #[test]
    fn quick_run_roles_and_invariants() {
        let r = SunwayRdmaBandwidth.run(&Ctx::quick(true)).unwrap();
        assert!(r.quick);
        assert_eq!(
            crate::calibration_labels(&r),
            [
                "RDMAW bandwidth, 4 KB messages, one port",
                "port peak = link data rate (4 lanes × link.lane_rate × line coding)",
                "maximum packet payload efficiency (max payload / (max payload + 24 B header))"
            ],
            "{}",
            r.to_text()
        );
        let row = |l: &str| r.rows.iter().find(|x| x.label.starts_with(l)).unwrap();
        assert_eq!(row("RDMAW bandwidth, 1 MB").role, Role::Prediction);
        assert_eq!(row("RDMAW bandwidth, 1 MB").tolerance, Some(TOLERANCE));
        // The ratios of the 1 MB figure to the calibrated peaks cannot fail on their own.
        assert_eq!(row("1 MB bandwidth / link peak").role, Role::Info);
        assert_eq!(row("1 MB bandwidth / software peak").role, Role::Info);
        assert_eq!(r.counts().predictions, 1);
        assert_eq!(row("node bandwidth").role, Role::Info);
        // Bandwidth grows with size up to the peak and stays below the software peak.
        let curve = &r.figures[0].series[0].points;
        assert!(curve.windows(2).all(|w| w[1].1 > w[0].1), "{curve:?}");
        let soft = row("software peak").simulated;
        assert!(curve.iter().all(|p| p.1 < soft), "{curve:?}");
        // Two ports beat one, and cannot beat two software peaks.
        let node = row("node bandwidth").simulated;
        assert!(node > 1.5 * soft && node < 2.0 * soft, "{node}");
        // Degraded rail 1: fixed rail 1 is the slow one; adaptive is at least the better fixed rail.
        let f0 = row("rail 1 of the source at 1 lane: 2 QPs fixed on rail 0").simulated;
        let f1 = row("rail 1 of the source at 1 lane: 2 QPs fixed on rail 1").simulated;
        assert!(f1 < 0.3 * f0, "{f0} {f1}");
        assert_eq!(row("rail 1 degraded: adaptive").simulated, 1.0, "{}", r.to_text());
        assert_eq!(r.figures.len(), 2);
        crate::plot::svg(&r.figures).unwrap();
    }

    #[test]
    fn size_labels() {
        assert_eq!(size_label(8), "8 B");
        assert_eq!(size_label(4096), "4 KB");
        assert_eq!(size_label(4 << 20), "4 MB");
    }
}
