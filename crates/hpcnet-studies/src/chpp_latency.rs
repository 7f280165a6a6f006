//! `chpp-latency`: the cHPP latency table, doorbell to data written at the receiver, for NAP
//! immediate / indirect, PUT and GET (spec 02, "Published results", latency table).
//!
//! Every point is one message on a fresh world of `scenarios/chpp-pair.toml` (two controllers
//! linked over PCIe Gen2 x8), measured with `p2p::op_latency(world, 0, 1, op, size)`: from the
//! post (the doorbell) to the completion event at the receiver (NAP, PUT) or at the requester,
//! where a GET's data lands. Three scenario parameters were fitted to three table entries (the
//! scenario says which); every other entry is a prediction.

use crate::plot::{Figure, Series, Style};
use crate::report::fmt_num;
use crate::{Ctx, Row, Study, StudyError, StudyReport};
use hpcnet_workloads::p2p::{op_latency, LatencyOp};
use hpcnet_workloads::Scenario;

const SCENARIO_TOML: &str = include_str!("../../../scenarios/chpp-pair.toml");
const SCENARIO_PATH: &str = "scenarios/chpp-pair.toml";

// Published values: spec/02-chpp.md, "Published results", latency table (µs).
/// Payload sizes of the table, in bytes.
const SIZES: [u64; 10] = [1, 64, 256, 1024, 2048, 4096, 10284, 51036, 262116, 1048576];
/// NAP immediate (sizes up to 2048 B).
const PAPER_NAP_IMM: [f64; 5] = [1.242, 1.254, 1.458, 2.514, 3.922];
/// NAP indirect (sizes up to 2048 B).
const PAPER_NAP_IND: [f64; 5] = [1.846, 1.862, 2.018, 2.858, 3.978];
const PAPER_PUT: [f64; 10] = [1.762, 1.778, 1.838, 2.078, 2.398, 3.054, 6.894, 22.254, 83.694, 329.454];
const PAPER_GET: [f64; 10] = [1.838, 1.854, 1.914, 2.154, 2.474, 3.13, 6.97, 22.33, 83.77, 329.53];

/// Tolerance of the predictions.
const TOLERANCE: f64 = 0.10;
/// Tolerance within which a calibration point counts as fitted.
const CALIBRATION_TOLERANCE: f64 = 0.02;

/// The entries the scenario's CALIBRATED parameters were fitted to (scenarios/chpp-pair.toml).
const CALIBRATION: [(Prim, u64); 3] = [(Prim::Put, 1), (Prim::NapInd, 1024), (Prim::NapImm, 1024)];

/// Sizes that, read as 16 KiB, 64 KiB and 256 KiB, put every large-size increment of the table
/// on one slope (see the discrepancies); information rows only.
const READING: [(u64, u64); 3] = [(10284, 16384), (51036, 65536), (262116, 262144)];

pub struct ChppLatency;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Prim {
    NapImm,
    NapInd,
    Put,
    Get,
}

const PRIMS: [Prim; 4] = [Prim::NapImm, Prim::NapInd, Prim::Put, Prim::Get];

impl Prim {
    fn name(self) -> &'static str {
        match self {
            Prim::NapImm => "NAP-imm",
            Prim::NapInd => "NAP-ind",
            Prim::Put => "PUT",
            Prim::Get => "GET",
        }
    }

    fn op(self) -> LatencyOp {
        match self {
            Prim::NapImm => LatencyOp::NapImmediate,
            Prim::NapInd => LatencyOp::NapIndirect,
            Prim::Put => LatencyOp::Put,
            Prim::Get => LatencyOp::Get,
        }
    }

    fn paper(self) -> &'static [f64] {
        match self {
            Prim::NapImm => &PAPER_NAP_IMM,
            Prim::NapInd => &PAPER_NAP_IND,
            Prim::Put => &PAPER_PUT,
            Prim::Get => &PAPER_GET,
        }
    }

    /// (size, published µs) of the table's column.
    fn points(self) -> impl Iterator<Item = (u64, f64)> {
        SIZES.iter().copied().zip(self.paper().iter().copied())
    }
}

fn load() -> Result<Scenario, StudyError> {
    Ok(Scenario::from_str_named(
        SCENARIO_TOML,
        SCENARIO_PATH,
        "chpp-pair",
        &[],
    )?)
}

/// One model latency in µs.
fn latency_us(sc: &Scenario, p: Prim, size: u64) -> Result<f64, StudyError> {
    Ok(op_latency(sc.world()?, 0, 1, p.op(), size).as_us_f64())
}

/// Slope in ns per byte between two (size, µs) points.
fn slope_ns_per_byte(a: (u64, f64), b: (u64, f64)) -> f64 {
    (b.1 - a.1) * 1e3 / (b.0 - a.0) as f64
}

fn label(p: Prim, size: u64) -> String {
    format!("{} {size} B", p.name())
}

impl Study for ChppLatency {
    fn name(&self) -> &'static str {
        "chpp-latency"
    }

    fn title(&self) -> &'static str {
        "cHPP latency, doorbell to data at the receiver: NAP immediate/indirect, PUT, GET, 1 B to 1 MB"
    }

    fn run(&self, ctx: &Ctx) -> Result<StudyReport, StudyError> {
        let sc = load()?;
        // Quick runs leave out the two largest sizes (the only slow ones).
        let max = if ctx.quick { 51036 } else { u64::MAX };
        let mut jobs: Vec<(Prim, u64, Option<f64>)> = Vec::new();
        for p in PRIMS {
            for (size, paper) in p.points() {
                if size <= max {
                    jobs.push((p, size, Some(paper)));
                }
            }
        }
        for p in [Prim::Put, Prim::Get] {
            for (_, size) in READING {
                if size <= max {
                    jobs.push((p, size, None));
                }
            }
        }
        let out: Vec<f64> = crate::par_map(&jobs, |&(p, size, _)| latency_us(&sc, p, size))
            .into_iter()
            .collect::<Result<_, _>>()?;
        let model = |p: Prim, size: u64| {
            jobs.iter()
                .zip(&out)
                .find(|((q, s, _), _)| *q == p && *s == size)
                .map(|(_, &t)| t)
        };

        let mut rows = Vec::new();
        for ((p, size, paper), &t) in jobs.iter().zip(&out) {
            let Some(paper) = *paper else { continue };
            let row = if CALIBRATION.contains(&(*p, *size)) {
                Row::calibration(label(*p, *size), paper, t, "µs", CALIBRATION_TOLERANCE)
            } else {
                Row::prediction(label(*p, *size), paper, t, "µs", TOLERANCE)
            };
            rows.push(row);
        }
        // Notes on the calibration rows: which parameter was fitted to each.
        for r in rows.iter_mut() {
            let fitted = match r.label.as_str() {
                "PUT 1 B" => Some("nic.host.doorbell_latency"),
                "NAP-ind 1024 B" => Some("nic.nap_upload_per_tlp"),
                "NAP-imm 1024 B" => Some("nic.immediate_rate"),
                _ => None,
            };
            if let Some(f) = fitted {
                *r = r
                    .clone()
                    .with_note(format!("{f} was fitted to this entry (scenario comment)"));
            }
        }
        for p in [Prim::Put, Prim::Get] {
            for (printed, read) in READING {
                let (Some(t), Some(paper)) = (model(p, read), p.points().find(|&(s, _)| s == printed).map(|x| x.1))
                else {
                    continue;
                };
                rows.push(Row::info(
                    format!("{} {read} B (the {printed} B entry read as {read} B)", p.name()),
                    Some(paper),
                    t,
                    "µs",
                ));
            }
        }

        // The inconsistency of the large-size PUT/GET entries, in the paper's own numbers.
        let put = |s: u64| Prim::Put.points().find(|&(x, _)| x == s).expect("table size");
        let early = slope_ns_per_byte(put(4096), put(10284));
        let late = slope_ns_per_byte(put(262116), put(1048576));
        let middle = slope_ns_per_byte(put(10284), put(51036));
        let gbs = |ns_per_b: f64| 1.0 / ns_per_b;
        let model_slopes = match (model(Prim::Put, 4096), model(Prim::Put, 10284)) {
            (Some(a), Some(b)) => {
                let m_early = slope_ns_per_byte((4096, a), (10284, b));
                let m_late = match (model(Prim::Put, 262116), model(Prim::Put, 1048576)) {
                    (Some(c), Some(d)) => format!(
                        ", and {} ns/B from 262116 to 1048576 B",
                        fmt_num(slope_ns_per_byte((262116, c), (1048576, d)))
                    ),
                    _ => String::new(),
                };
                format!(
                    " The model's PUT slope is {} ns/B from 4096 to 10284 B{m_late}.",
                    fmt_num(m_early)
                )
            }
            _ => String::new(),
        };
        let increments: Vec<String> = [4096u64, 10284, 51036, 262116, 1048576]
            .windows(2)
            .map(|w| fmt_num(put(w[1]).1 - put(w[0]).1))
            .collect();
        // GET − PUT at the sizes where both are published and simulated.
        let gap = |f: &dyn Fn(u64) -> Option<(f64, f64)>| -> f64 {
            let g: Vec<f64> = SIZES.iter().filter_map(|&s| f(s)).map(|(g, p)| g - p).collect();
            1e3 * g.iter().sum::<f64>() / g.len().max(1) as f64
        };
        let paper_gap = gap(&|s| {
            let i = SIZES.iter().position(|&x| x == s)?;
            Some((PAPER_GET[i], PAPER_PUT[i]))
        });
        let model_gap = gap(&|s| Some((model(Prim::Get, s)?, model(Prim::Put, s)?)));
        let imm = |s: u64| Prim::NapImm.points().find(|&(x, _)| x == s).expect("table size");
        let imm_slopes: Vec<String> = [1u64, 64, 256, 1024, 2048]
            .windows(2)
            .map(|w| {
                format!(
                    "{}–{} B: {} ns/B",
                    w[0],
                    w[1],
                    fmt_num(slope_ns_per_byte(imm(w[0]), imm(w[1])))
                )
            })
            .collect();
        let model_imm = match (model(Prim::NapImm, 1), model(Prim::NapImm, 2048)) {
            (Some(a), Some(b)) => fmt_num(slope_ns_per_byte((1, a), (2048, b))),
            _ => "—".into(),
        };
        let discrepancies = vec![
            format!(
                "The PUT/GET entries at 10284 B and 51036 B do not follow the linear growth of the others. PUT \
                 slope from 4096 to 10284 B: {} ns/B ({} GB/s); from 10284 to 51036 B: {} ns/B ({} GB/s); from \
                 262116 to 1048576 B: {} ns/B ({} GB/s). A pipeline whose per-byte cost is constant (the model's, \
                 the paper's LogGP model) cannot meet all three, so the model misses the 10284 B and 51036 B \
                 entries of both PUT and GET (it follows the 3.2 GB/s large-size slope).{model_slopes} These rows \
                 stay predictions and are not tuned.",
                fmt_num(early),
                fmt_num(gbs(early)),
                fmt_num(middle),
                fmt_num(gbs(middle)),
                fmt_num(late),
                fmt_num(gbs(late)),
            ),
            format!(
                "A likely reading: the PUT increments between consecutive large sizes are {} µs, each exactly 4 × \
                 the previous. With sizes 4096, 16384, 65536, 262144 and 1048576 B (each 4 × the previous) every \
                 increment is 0.3125 ns/B = 3.2 GB/s, the published peak. So 10284, 51036 and 262116 look like \
                 mis-transcribed 16 KiB, 64 KiB and 256 KiB. The information rows give the model at those sizes \
                 against the published latencies; the judged rows keep the sizes as printed.",
                increments.join(", ")
            ),
            format!(
                "GET − PUT: the paper's GET is {} ns slower than PUT at every size, the model's {} ns: in the model \
                 a GET spends nic.get_overhead (an assumption: {}) at the requester and its request \
                 packet crosses the link and router before the target's engine starts the write-back (which then \
                 costs what a PUT costs). {} ns is less than that crossing plus any processing, so the paper's GET \
                 path must overlap work the model serialises; GET rows whose margin is smaller than the gap \
                 difference fail. Not tuned.",
                fmt_num(paper_gap),
                fmt_num(model_gap),
                sc.nic.get_overhead.unwrap_or(sc.nic.message_overhead),
                fmt_num(paper_gap)
            ),
            format!(
                "NAP-immediate is not linear in the paper: {} — nearly flat up to 64 B, then steeper. The model \
                 extracts immediate data at one rate (nic.immediate_rate, fitted at 1024 B) plus the per-TLP upload, \
                 {model_imm} ns/B on average from 1 to 2048 B, so it overestimates the small sizes and \
                 underestimates 2048 B. Not tuned.",
                imm_slopes.join(", ")
            ),
            "Latency is measured from the post (the doorbell write) to the completion event at the receiver for \
             NAP and PUT, and at the requester for GET (where a GET's data is written), one message on an idle \
             pair of controllers."
                .into(),
        ];
        let mut report = StudyReport::new(
            self.name(),
            self.title(),
            "spec/02-chpp.md, \"Published results\" (latency table)",
            rows,
            discrepancies,
            ctx.quick,
        );
        report.seed = Some(sc.file.seed);
        report.figures = figures(&model);
        Ok(report)
    }
}

fn figures(model: &dyn Fn(Prim, u64) -> Option<f64>) -> Vec<Figure> {
    let panel = |small: bool| {
        let mut series = Vec::new();
        for (c, p) in PRIMS.into_iter().enumerate() {
            let pts = |f: &dyn Fn(u64, f64) -> Option<f64>| -> Vec<(f64, f64)> {
                p.points()
                    .filter(|&(s, _)| !small || s <= 4096)
                    .filter_map(|(s, paper)| {
                        let x = if small { s as f64 } else { (s as f64).log2() };
                        f(s, paper).map(|y| (x, y))
                    })
                    .collect()
            };
            series.push(Series {
                label: format!("{} model", p.name()),
                points: pts(&|s, _| model(p, s)),
                style: Style::Line,
                color: c,
            });
            series.push(Series {
                label: format!("{} paper", p.name()),
                points: pts(&|_, paper| Some(paper)),
                style: Style::Points,
                color: c,
            });
        }
        Figure {
            title: if small {
                "latency vs payload, up to 4 KB".into()
            } else {
                "latency vs payload, 1 B to 1 MB".into()
            },
            x_label: if small {
                "payload (B)".into()
            } else {
                "log2 payload (B)".into()
            },
            y_label: "latency (µs)".into(),
            y_log: !small,
            series,
            marks: Vec::new(),
        }
    };
    vec![panel(true), panel(false)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    #[test]
    fn table_is_complete() {
        assert_eq!(PAPER_PUT.len(), SIZES.len());
        assert_eq!(PAPER_GET.len(), SIZES.len());
        assert_eq!(Prim::NapImm.points().count(), 5);
        assert_eq!(Prim::NapImm.points().last().unwrap().0, 2048);
        // The published large-size increments are 3.84 µs × 4^k (the basis of the reading rows).
        let put: Vec<f64> = PAPER_PUT[5..].to_vec();
        for (k, w) in put.windows(2).enumerate() {
            assert!((w[1] - w[0] - 3.84 * 4f64.powi(k as i32)).abs() < 1e-9);
        }
    }

    #[test]
    fn quick_run_roles_and_invariants() {
        let r = ChppLatency.run(&Ctx { quick: true }).unwrap();
        assert_eq!(
            crate::calibration_labels(&r),
            ["NAP-imm 1024 B", "NAP-ind 1024 B", "PUT 1 B"],
            "{}",
            r.to_text()
        );
        let preds: Vec<_> = r.rows.iter().filter(|x| x.role == Role::Prediction).collect();
        // Quick: 5 + 5 NAP entries and 8 of 10 PUT and GET entries, less the 3 calibration points.
        assert_eq!(preds.len(), 5 + 5 + 8 + 8 - 3);
        assert!(preds.iter().all(|x| x.tolerance == Some(TOLERANCE)));
        // Latency grows with size for every primitive; GET costs more than PUT.
        for p in PRIMS {
            let ts: Vec<f64> = r
                .rows
                .iter()
                .filter(|x| x.label.starts_with(&format!("{} ", p.name())) && x.role != Role::Info)
                .map(|x| x.simulated)
                .collect();
            assert!(ts.windows(2).all(|w| w[1] > w[0]), "{p:?} {ts:?}");
        }
        let t = |l: &str| r.rows.iter().find(|x| x.label == l).unwrap().simulated;
        assert!(t("GET 1 B") > t("PUT 1 B"));
        assert!(t("NAP-imm 1 B") < t("NAP-ind 1 B"));
        assert_eq!(r.figures.len(), 2);
        crate::plot::svg(&r.figures).unwrap();
    }
}
