//! `chpp-crossbar`: saturation of the cHPP crossbar under uniform random traffic
//! (spec 02, "Published results", throughput under load).
//!
//! The paper loads an N-port crossbar whose VC is chosen as destination mod #VCs and reports
//! where latency rises sharply: 4 ports × 2 VCs near 65 % of peak (2.6 GB/s), 4 ports × 4 VCs at
//! 2.8 GB/s, lower with more ports and higher with more VCs. The study runs the packet-level
//! network on `scenarios/chpp-crossbar.toml` (one router, N nodes, 4 GB/s ports, small VC
//! buffers) with uniform traffic, sweeping the offered load for 4/8/16 ports × 2/4 VCs, and takes
//! the accepted load at offered load 1.0 as the saturation throughput.
//!
//! Where head-of-line blocking comes from in the model: each input VC is a FIFO of two
//! packets and only its head competes for an output; each node injects from one FIFO, so a
//! packet whose VC buffer is full also blocks the packets behind it at the source. The crossbar
//! itself is not a resource: different VCs of one input may send to different outputs at once.
//!
//! Declared calibration ([`Study::fitted`]): `packet.header` = 32 B carries the paper's
//! 10-cycle account of its 3.2 GB/s peak (16 B header + 128 B data + 1 processing cycle), shown
//! as the calibration row. Roles: the two published saturation points (4 × 2 and 4 × 4) depend
//! on that header and on `router.node_injection = "fifo"`, both chosen knowing these two points,
//! so they are post-hoc rows; the model under the other choices is shown beside them. The two
//! trend claims (fewer with more ports, more with more VCs) are predictions.

use crate::plot::{Figure, Mark, Series, Style};
use crate::report::fmt_num;
use crate::{Ctx, Fitted, Row, Study, StudyError, StudyReport};
use hpcnet_workloads::synthetic::{run_synthetic, RunOptions, RunReport};
use hpcnet_workloads::Scenario;

/// The study's scenario, embedded so the study runs from any directory.
const SCENARIO_TOML: &str = include_str!("../../../scenarios/chpp-crossbar.toml");
const SCENARIO_PATH: &str = "scenarios/chpp-crossbar.toml";

// Published values: spec/02-chpp.md, "Published results", throughput under load.
/// 4 ports × 2 VCs: latency rises sharply at about 2.6 GB/s ...
const PAPER_4X2_GBS: f64 = 2.6;
/// ... which the paper calls 65 % of peak.
const PAPER_4X2_FRACTION: f64 = 0.65;
/// 4 ports × 4 VCs: 2.8 GB/s.
const PAPER_4X4_GBS: f64 = 2.8;
// spec/02-chpp.md, "Published results", bandwidth vs MTU: peak 3.2 GB/s at MTU 128 B
// (16 B header = 1 cycle, 128 B data = 8 cycles, 1 processing cycle → 80 % of 4 GB/s).
const PAPER_PEAK_GBS: f64 = 3.2;

/// Tolerance of the two published saturation points.
const TOLERANCE: f64 = 0.10;
/// Tolerance of the calibrated peak (matched by construction up to measurement noise).
const PEAK_TOLERANCE: f64 = 0.02;

const PORTS: [u32; 3] = [4, 8, 16];
const VCS: [u8; 2] = [2, 4];
/// Private credits of a VC holding four maximum-size packets (sensitivity runs).
const LARGE_BUFFER_CREDITS: u32 = 40;

/// The declared calibration of `scenarios/chpp-crossbar.toml`.
const FITTED: [Fitted; 1] = [Fitted {
    key: "packet.header",
    point: "3.2 GB/s peak at MTU 128 B: 10 bus cycles per 128 B packet (bandwidth vs MTU)",
    study: "chpp-crossbar",
}];

pub struct ChppCrossbar;

/// One configuration's run at one offered load.
#[derive(Clone, Debug)]
struct Job {
    ports: u32,
    vcs: u8,
    load: f64,
    extra: Vec<String>,
}

/// What a run contributes to the report.
#[derive(Clone, Debug)]
struct Outcome {
    offered: f64,
    accepted: f64,
    latency_ns: f64,
}

/// Conversion of loads (fractions of the port's wire bandwidth) into data throughput.
#[derive(Copy, Clone, Debug)]
struct Units {
    /// Port bandwidth in GB/s (10^9 B/s).
    port_gbs: f64,
    /// Payload bytes / wire bytes of a packet.
    payload_fraction: f64,
    seed: u64,
}

impl Units {
    fn data_gbs(self, load: f64) -> f64 {
        load * self.port_gbs * self.payload_fraction
    }
}

fn overrides(job: &Job, quick: bool) -> Vec<String> {
    // The study's sweep keys come last, so they win over a `--set` of the same key.
    let mut o = vec![
        format!("topology.ports={}", job.ports),
        format!("router.vcs={}", job.vcs),
        format!("traffic.load={}", job.load),
    ];
    if quick {
        o.push("sim.warmup=\"2 us\"".into());
        o.push("sim.measure=\"20 us\"".into());
    }
    o.extend(job.extra.iter().cloned());
    o
}

fn load_scenario(ctx: &Ctx, over: &[String]) -> Result<Scenario, StudyError> {
    ctx.load(SCENARIO_TOML, SCENARIO_PATH, "chpp-crossbar", over)
}

fn run_one(ctx: &Ctx, job: &Job) -> Result<Outcome, StudyError> {
    let sc = load_scenario(ctx, &overrides(job, ctx.quick))?;
    let rep: RunReport = run_synthetic(&sc, RunOptions::default())?;
    let what = format!(
        "{} ports × {} VCs at load {} ({})",
        job.ports,
        job.vcs,
        job.load,
        job.extra.join(" ")
    );
    if let Some(d) = &rep.deadlock {
        return Err(StudyError::Model(format!(
            "{SCENARIO_PATH}: {what}: deadlock at {:.1} ns with {} packets in flight",
            d.at_ns, d.in_flight
        )));
    }
    if !rep.conservation_ok {
        return Err(StudyError::Model(format!("{SCENARIO_PATH}: {what}: packets lost")));
    }
    let Some(latency_ns) = rep.latency_ns.mean else {
        return Err(StudyError::Model(format!(
            "{SCENARIO_PATH}: {what}: no packet measured"
        )));
    };
    Ok(Outcome {
        offered: rep.offered_load,
        accepted: rep.accepted_load,
        latency_ns,
    })
}

impl Study for ChppCrossbar {
    fn name(&self) -> &'static str {
        "chpp-crossbar"
    }

    fn title(&self) -> &'static str {
        "cHPP crossbar saturation under uniform traffic (4/8/16 ports × 2/4 VCs, VC = destination mod VCs)"
    }

    fn scenario(&self) -> Option<(&'static str, &'static str)> {
        Some((SCENARIO_TOML, SCENARIO_PATH))
    }

    fn fitted(&self) -> &'static [Fitted] {
        &FITTED
    }

    fn run(&self, ctx: &Ctx) -> Result<StudyReport, StudyError> {
        let base = load_scenario(ctx, &[])?;
        let units = Units {
            port_gbs: base.fabric.link.data_rate().as_bytes_per_sec_f64() / 1e9,
            payload_fraction: base.traffic.size.mean()
                / (base.traffic.size.mean() + base.fabric.packet.header.0 as f64),
            seed: base.file.seed,
        };
        let loads: Vec<f64> = if ctx.quick {
            vec![0.5, 1.0]
        } else {
            (1..=10).map(|i| f64::from(i) / 10.0).collect()
        };
        let mut jobs = Vec::new();
        for ports in PORTS {
            for vcs in VCS {
                for &load in &loads {
                    jobs.push(Job {
                        ports,
                        vcs,
                        load,
                        extra: Vec::new(),
                    });
                }
            }
        }
        let sweep_len = jobs.len();
        // Calibration: no contention (a fixed permutation) at full load shows the per-packet cost.
        jobs.push(Job {
            ports: 4,
            vcs: 2,
            load: 1.0,
            extra: vec!["traffic.pattern=random_permutation".into()],
        });
        // Sensitivity: twice the VC buffer.
        for vcs in VCS {
            jobs.push(Job {
                ports: 4,
                vcs,
                load: 1.0,
                extra: vec![format!("router.private_credits={LARGE_BUFFER_CREDITS}")],
            });
        }
        // The other choices behind the two published points: no processing cycle in the packet
        // (the 16 B cHPP header alone), and per-VC injection queues (the router's default).
        let alternatives = [
            "packet.header=\"16 B\"".to_string(),
            "router.node_injection=\"per_vc\"".to_string(),
        ];
        for alt in &alternatives {
            for vcs in VCS {
                jobs.push(Job {
                    ports: 4,
                    vcs,
                    load: 1.0,
                    extra: vec![alt.clone()],
                });
            }
        }
        let out: Vec<Outcome> = crate::par_map(&jobs, |j| run_one(ctx, j))
            .into_iter()
            .collect::<Result<_, _>>()?;
        let curve = |ports: u32, vcs: u8| -> Vec<&Outcome> {
            jobs[..sweep_len]
                .iter()
                .zip(&out)
                .filter(|(j, _)| j.ports == ports && j.vcs == vcs)
                .map(|(_, o)| o)
                .collect()
        };
        // Saturation throughput: accepted load at offered load 1.0 (the last point of a curve).
        let sat = |ports: u32, vcs: u8| curve(ports, vcs).last().expect("load 1.0 runs").accepted;
        let peak = &out[sweep_len];
        let big: Vec<&Outcome> = out[sweep_len + 1..sweep_len + 3].iter().collect();
        let alt = &out[sweep_len + 3..];
        // Data throughput of a 16 B-header packet: 128 B of 144 B on the wire.
        let size = base.traffic.size.mean();
        let header16 = |o: &Outcome| o.accepted * units.port_gbs * size / (size + 16.0);

        let mut rows = vec![Row::calibration(
            "peak data throughput per port, no contention (4 ports × 2 VCs, fixed permutation, load 1.0)",
            PAPER_PEAK_GBS,
            units.data_gbs(peak.accepted),
            "GB/s",
            PEAK_TOLERANCE,
        )
        .with_note(
            "the per-packet cost of 10 bus cycles (1 header + 8 data + 1 processing) is the paper's account of \
             its 3.2 GB/s peak; the model carries the processing cycle as 16 B of extra header (packet.header = 32 B)",
        )];
        let chosen = "depends on packet.header = 32 B and router.node_injection = fifo, both chosen knowing this \
                      point; the model under the other choices is in the information rows";
        for (vcs, paper) in [(2, PAPER_4X2_GBS), (4, PAPER_4X4_GBS)] {
            rows.push(
                Row::post_hoc(
                    format!("4 ports × {vcs} VCs: saturation data throughput per port"),
                    paper,
                    units.data_gbs(sat(4, vcs)),
                    "GB/s",
                    TOLERANCE,
                )
                .with_note(chosen),
            );
        }
        let falls = VCS.iter().all(|&v| sat(4, v) > sat(8, v) && sat(8, v) > sat(16, v));
        rows.push(Row::claim(
            "saturation falls as ports grow 4 → 8 → 16 (2 and 4 VCs)",
            true,
            falls,
        ));
        let rises = PORTS.iter().all(|&p| sat(p, 4) > sat(p, 2));
        rows.push(Row::claim(
            "4 VCs saturate higher than 2 VCs at 4, 8 and 16 ports",
            true,
            rises,
        ));
        rows.push(Row::info(
            "4 ports × 2 VCs: saturation data throughput / port bandwidth",
            Some(PAPER_4X2_FRACTION),
            units.data_gbs(sat(4, 2)) / units.port_gbs,
            "fraction",
        ));
        for (vcs, paper_gbs) in [(2, PAPER_4X2_GBS), (4, PAPER_4X4_GBS)] {
            rows.push(
                Row::info(
                    format!("4 ports × {vcs} VCs: bus occupancy at saturation (alternative reading)"),
                    Some(paper_gbs / units.port_gbs),
                    sat(4, vcs),
                    "fraction",
                )
                .with_note(
                    "fraction of bus cycles busy, header and processing cycle included; compared with the paper's \
                     GB/s over 4 GB/s as if it counted every cycle",
                ),
            );
        }
        for ports in [8, 16] {
            for vcs in VCS {
                rows.push(Row::info(
                    format!("{ports} ports × {vcs} VCs: saturation data throughput per port"),
                    None,
                    units.data_gbs(sat(ports, vcs)),
                    "GB/s",
                ));
            }
        }
        for (o, (vcs, paper_gbs)) in big.iter().zip([(2, PAPER_4X2_GBS), (4, PAPER_4X4_GBS)]) {
            rows.push(Row::info(
                format!("4 ports × {vcs} VCs with 4-packet VC buffers (sensitivity)"),
                Some(paper_gbs),
                units.data_gbs(o.accepted),
                "GB/s",
            ));
        }

        for (i, (vcs, paper)) in [(2, PAPER_4X2_GBS), (4, PAPER_4X4_GBS)].into_iter().enumerate() {
            rows.push(Row::info(
                format!("4 ports × {vcs} VCs, 16 B header (no processing cycle in the packet)"),
                Some(paper),
                header16(&alt[i]),
                "GB/s",
            ));
        }
        for (i, (vcs, paper)) in [(2, PAPER_4X2_GBS), (4, PAPER_4X4_GBS)].into_iter().enumerate() {
            rows.push(Row::info(
                format!("4 ports × {vcs} VCs, per-VC injection queues (router.node_injection = per_vc)"),
                Some(paper),
                units.data_gbs(alt[2 + i].accepted),
                "GB/s",
            ));
        }
        let pct = |x: f64, p: f64| format!("{:+.0} %", 100.0 * (x / p - 1.0));
        let discrepancies = vec![
            format!(
                "The paper's \"65 % of peak (2.6 GB/s)\" does not say whether 2.6 GB/s counts packet headers. We \
                 judge the GB/s figures as data (payload) throughput per port, with each 128 B packet occupying 10 \
                 bus cycles as in the paper's own account of its 3.2 GB/s peak; 2.6 GB/s is then 65 % of the 4 GB/s \
                 bus in data and 81 % of its cycles. Under the other reading (65 % of all bus cycles) the model \
                 misses by {} and {} (see the \"alternative reading\" rows).",
                pct(sat(4, 2), PAPER_4X2_GBS / units.port_gbs),
                pct(sat(4, 4), PAPER_4X4_GBS / units.port_gbs),
            ),
            format!(
                "Two model choices behind the 4-port points were made knowing them, so those rows are post-hoc. The \
                 processing cycle, taken from the paper's peak-bandwidth analysis (the calibration row), is carried \
                 as 16 B of header: with the 16 B cHPP header alone (144 B packets) the model gives {} and {} GB/s \
                 ({} and {}). Each node injects from one FIFO (router.node_injection = fifo); with per-VC injection \
                 queues it gives {} and {} GB/s ({} and {}).",
                fmt_num(header16(&alt[0])),
                fmt_num(header16(&alt[1])),
                pct(header16(&alt[0]), PAPER_4X2_GBS),
                pct(header16(&alt[1]), PAPER_4X4_GBS),
                fmt_num(units.data_gbs(alt[2].accepted)),
                fmt_num(units.data_gbs(alt[3].accepted)),
                pct(units.data_gbs(alt[2].accepted), PAPER_4X2_GBS),
                pct(units.data_gbs(alt[3].accepted), PAPER_4X4_GBS),
            ),
            "The paper gives no buffer sizes, latencies or arbiter for the crossbar. The scenario assumes 2 \
             maximum-size packets per VC (20 credits of 16 B), 4 ns links, 12 ns router, round-robin output \
             arbitration. Saturation depends on the buffer depth: see the 4-packet sensitivity rows."
                .into(),
            "Uniform traffic never sends to the sender's own port (the paper does not say); each node injects \
             from one FIFO, so a full VC buffer also blocks the packets behind it at the source."
                .into(),
            "With 4 ports and 4 VCs every destination has its own VC (virtual output queues, as the paper \
             says), yet both paper and model stay below the 3.2 GB/s peak: the VC buffers are shallow and the \
             source FIFO still blocks on a full VC."
                .into(),
            "Saturation throughput = accepted load at offered load 1.0 (the paper reports where latency rises \
             sharply; the plot shows both)."
                .into(),
        ];
        let mut report = StudyReport::new(
            self.name(),
            self.title(),
            "spec/02-chpp.md, \"Published results\" (throughput under load; peak bandwidth vs MTU)",
            rows,
            discrepancies,
            ctx.quick,
        );
        report.seed = Some(units.seed);
        report.figures = figures(units, &curve);
        Ok(report)
    }
}

fn figures<'a>(units: Units, curve: &dyn Fn(u32, u8) -> Vec<&'a Outcome>) -> Vec<Figure> {
    let mut latency = Vec::new();
    let mut accepted = Vec::new();
    let mut color = 0;
    for ports in PORTS {
        for vcs in VCS {
            let c = curve(ports, vcs);
            let label = format!("{ports} ports × {vcs} VCs");
            latency.push(Series {
                label: label.clone(),
                points: c.iter().map(|o| (units.data_gbs(o.offered), o.latency_ns)).collect(),
                style: Style::Line,
                color,
            });
            accepted.push(Series {
                label,
                points: c
                    .iter()
                    .map(|o| (units.data_gbs(o.offered), units.data_gbs(o.accepted)))
                    .collect(),
                style: Style::Line,
                color,
            });
            color += 1;
        }
    }
    let marks = |vertical: bool| {
        [
            ("paper 4×2: 2.6 GB/s", PAPER_4X2_GBS),
            ("paper 4×4: 2.8 GB/s", PAPER_4X4_GBS),
        ]
        .into_iter()
        .map(|(l, v)| {
            if vertical {
                Mark::X(l.into(), v)
            } else {
                Mark::Y(l.into(), v)
            }
        })
        .collect()
    };
    vec![
        Figure {
            title: "mean latency vs offered load".into(),
            x_label: "offered data throughput per port (GB/s)".into(),
            y_label: "mean latency (ns)".into(),
            y_log: true,
            series: latency,
            marks: marks(true),
        },
        Figure {
            title: "accepted vs offered load".into(),
            x_label: "offered data throughput per port (GB/s)".into(),
            y_label: "accepted data throughput per port (GB/s)".into(),
            y_log: false,
            series: accepted,
            marks: marks(false),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_loads_with_the_sweep_overrides() {
        let sc = load_scenario(
            &Ctx::default(),
            &overrides(
                &Job {
                    ports: 16,
                    vcs: 4,
                    load: 0.3,
                    extra: vec![],
                },
                true,
            ),
        )
        .unwrap();
        assert_eq!(sc.topology.num_nodes(), 16);
        assert_eq!(sc.topology.num_routers(), 1);
        assert_eq!(sc.fabric.router.vcs, 4);
        assert_eq!(sc.fabric.link.data_rate().as_bytes_per_sec_f64(), 4e9);
        assert_eq!(sc.fabric.routing.name(), "dimension_order");
    }

    #[test]
    fn quick_run_has_the_published_rows() {
        let r = ChppCrossbar.run(&Ctx::quick(true)).unwrap();
        assert!(r.quick);
        assert_eq!(r.seed, Some(1));
        let row = |l: &str| r.rows.iter().find(|x| x.label.starts_with(l)).unwrap();
        let p42 = row("4 ports × 2 VCs: saturation");
        assert_eq!(
            (p42.role, p42.paper, p42.tolerance),
            (crate::Role::PostHoc, Some(2.6), Some(0.1))
        );
        let p44 = row("4 ports × 4 VCs: saturation");
        assert_eq!(p44.paper, Some(2.8));
        assert_eq!(row("peak data throughput").role, crate::Role::Calibration);
        assert_eq!(row("16 ports × 4 VCs").role, crate::Role::Info);
        // Physical sanity: below the 3.2 GB/s data peak, above half of it.
        for x in [p42, p44] {
            assert!(x.simulated > 1.6 && x.simulated < 3.2, "{}", r.to_text());
        }
        // More VCs never hurt (the claim the paper makes).
        assert!(p44.simulated > p42.simulated, "{}", r.to_text());
        assert_eq!(r.figures.len(), 2);
        crate::plot::svg(&r.figures).unwrap();
    }
}
