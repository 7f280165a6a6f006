//! `chpp-latency`: the cHPP latency table, doorbell to data written at the receiver, for NAP
//! immediate / indirect, PUT and GET (spec 02, "Published results", latency table).
//!
//! Every point is one message on a fresh world of `scenarios/chpp-pair.toml` (two controllers
//! linked over PCIe Gen2 x8), measured with `p2p::op_latency(world, 0, 1, op, size)`: from the
//! post (the doorbell) to the completion event at the receiver (NAP, PUT) or at the requester,
//! where a GET's data lands.
//!
//! Declared calibration ([`Study::fitted`], the scenario's comments say the same): four table
//! entries (PUT 1 B, GET 1 B, NAP-indirect 1024 B, NAP-immediate 1024 B) each fix one
//! parameter, and `nic.packet_overhead` comes from the paper's account of its 3.2 GB/s peak
//! (calibration row of `chpp-bandwidth`). Post-hoc rows: NAP-immediate 64 B and 256 B, which
//! depend on `nic.immediate_inline` (immediate data arriving with the descriptor), a mechanism
//! chosen knowing these two entries. Every other entry is a prediction.
//!
//! The PUT/GET sizes printed as 10284, 51036 and 262116 B are read as 16 KiB, 64 KiB and
//! 256 KiB, a reading taken from the paper's own numbers (the discrepancies give the evidence);
//! the judged rows name both sizes and the model at the sizes as printed is shown beside them.

use crate::chpp::{Prim, PAIR_FITTED, PAIR_PATH as SCENARIO_PATH, PAIR_TOML as SCENARIO_TOML};
use crate::plot::{Figure, Series, Style};
use crate::report::fmt_num;
use crate::{Ctx, Fitted, Row, Study, StudyError, StudyReport};
use hpcnet_workloads::p2p::try_op_latency;
use hpcnet_workloads::Rank;
use hpcnet_workloads::Scenario;

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
const CALIBRATION: [(Prim, u64); 4] = [
    (Prim::Put, 1),
    (Prim::NapInd, 1024),
    (Prim::NapImm, 1024),
    (Prim::Get, 1),
];

/// Entries whose model value depends on `nic.immediate_inline`, a mechanism chosen knowing them:
/// judged as post-hoc rows.
const POST_HOC: [(Prim, u64); 2] = [(Prim::NapImm, 64), (Prim::NapImm, 256)];

/// Sizes judged as 16 KiB, 64 KiB and 256 KiB: (as printed, as judged). Read this way every
/// large-size increment of the table is on one slope (see the discrepancies); the printed sizes
/// are information rows.
const CORRECTED: [(u64, u64); 3] = [(10284, 16384), (51036, 65536), (262116, 262144)];

/// The size a published entry is simulated and judged at.
fn judged_size(printed: u64) -> u64 {
    CORRECTED
        .iter()
        .find(|&&(p, _)| p == printed)
        .map_or(printed, |&(_, j)| j)
}

pub struct ChppLatency;

const PRIMS: [Prim; 4] = [Prim::NapImm, Prim::NapInd, Prim::Put, Prim::Get];

/// The published column of `p`, µs at each of `SIZES`.
fn paper(p: Prim) -> &'static [f64] {
    match p {
        Prim::NapImm => &PAPER_NAP_IMM,
        Prim::NapInd => &PAPER_NAP_IND,
        Prim::Put => &PAPER_PUT,
        Prim::Get => &PAPER_GET,
    }
}

/// (size, published µs) of `p`'s column.
fn points(p: Prim) -> impl Iterator<Item = (u64, f64)> {
    SIZES.iter().copied().zip(paper(p).iter().copied())
}

fn load(ctx: &Ctx) -> Result<Scenario, StudyError> {
    ctx.load(SCENARIO_TOML, SCENARIO_PATH, "chpp-pair", &[])
}

/// One model latency in µs.
fn latency_us(sc: &Scenario, p: Prim, size: u64) -> Result<f64, StudyError> {
    try_op_latency(sc.world()?, Rank(0), Rank(1), p.op(), size)
        .map(|t| t.as_us_f64())
        .map_err(|e| crate::p2p_error(&format!("{SCENARIO_PATH}: {} latency of {size} B", p.name()), e))
}

/// Slope in ns per byte between two (size, µs) points.
fn slope_ns_per_byte(a: (u64, f64), b: (u64, f64)) -> f64 {
    (b.1 - a.1) * 1e3 / (b.0 - a.0) as f64
}

/// Label of a judged row: the printed size, and the size it is read as where they differ.
fn label(p: Prim, printed: u64) -> String {
    let size = judged_size(printed);
    if size == printed {
        format!("{} {size} B", p.name())
    } else {
        format!("{} {printed} B as printed, read as {size} B", p.name())
    }
}

impl Study for ChppLatency {
    fn name(&self) -> &'static str {
        "chpp-latency"
    }

    fn title(&self) -> &'static str {
        "cHPP latency, doorbell to data at the receiver: NAP immediate/indirect, PUT, GET, 1 B to 1 MB"
    }

    fn scenario(&self) -> Option<(&'static str, &'static str)> {
        Some((SCENARIO_TOML, SCENARIO_PATH))
    }

    fn fitted(&self) -> &'static [Fitted] {
        &PAIR_FITTED
    }

    fn run(&self, ctx: &Ctx) -> Result<StudyReport, StudyError> {
        let sc = load(ctx)?;
        // Quick runs leave out the 256 KiB and 1 MiB entries (the only slow ones).
        let max = if ctx.quick { 65536 } else { u64::MAX };
        // Every published entry at the size it is judged at, then the corrected entries at their
        // sizes as printed (information).
        let mut jobs: Vec<(Prim, u64)> = Vec::new();
        for p in PRIMS {
            for (printed, _) in points(p) {
                let size = judged_size(printed);
                if size <= max {
                    jobs.push((p, size));
                }
            }
        }
        for p in [Prim::Put, Prim::Get] {
            for (printed, _) in CORRECTED {
                if printed <= max {
                    jobs.push((p, printed));
                }
            }
        }
        let out: Vec<f64> = crate::par_map(&jobs, |&(p, size)| latency_us(&sc, p, size))
            .into_iter()
            .collect::<Result<_, _>>()?;
        let model = |p: Prim, size: u64| {
            jobs.iter()
                .zip(&out)
                .find(|((q, s), _)| *q == p && *s == size)
                .map(|(_, &t)| t)
        };
        let paper = |p: Prim, printed: u64| points(p).find(|&(s, _)| s == printed).map(|x| x.1);

        let mut rows = Vec::new();
        for p in PRIMS {
            for (printed, published) in points(p) {
                let Some(t) = model(p, judged_size(printed)) else {
                    continue;
                };
                rows.push(if CALIBRATION.contains(&(p, printed)) {
                    Row::calibration(label(p, printed), published, t, "µs", CALIBRATION_TOLERANCE)
                } else if POST_HOC.contains(&(p, printed)) {
                    Row::post_hoc(label(p, printed), published, t, "µs", TOLERANCE).with_note(
                        "depends on nic.immediate_inline (immediate data arriving with the descriptor's first read \
                         request, not extracted), a mechanism chosen knowing this entry",
                    )
                } else if judged_size(printed) != printed {
                    Row::prediction(label(p, printed), published, t, "µs", TOLERANCE).with_note(
                        "simulated at the size as read; the model at the size as printed is the information row \
                         below (see the discrepancies for the evidence)",
                    )
                } else {
                    Row::prediction(label(p, printed), published, t, "µs", TOLERANCE)
                });
            }
        }
        // Notes on the calibration rows: which parameter was fitted to each.
        for r in rows.iter_mut() {
            let fitted = match r.label.as_str() {
                "PUT 1 B" => Some("nic.host.doorbell_latency"),
                "NAP-ind 1024 B" => Some("nic.nap_upload_per_tlp"),
                "NAP-imm 1024 B" => Some("nic.immediate_rate"),
                "GET 1 B" => Some("nic.writeback_overhead"),
                _ => None,
            };
            if let Some(f) = fitted {
                *r = r
                    .clone()
                    .with_note(format!("{f} was fitted to this entry (scenario comment)"));
            }
        }
        // The corrected entries at the sizes as printed: shown, not judged.
        let mut as_printed = Vec::new();
        for p in [Prim::Put, Prim::Get] {
            for (printed, _) in CORRECTED {
                let (Some(t), Some(published)) = (model(p, printed), paper(p, printed)) else {
                    continue;
                };
                as_printed.push(format!(
                    "{} {printed} B {:+.1} %",
                    p.name(),
                    100.0 * (t - published) / published
                ));
                rows.push(Row::info(
                    format!(
                        "{} {printed} B simulated at the size as printed (not the reading judged)",
                        p.name()
                    ),
                    Some(published),
                    t,
                    "µs",
                ));
            }
        }

        // The printed large sizes against the corrected ones, in the paper's own PUT numbers.
        let put = |s: u64| (s, paper(Prim::Put, s).expect("table size"));
        let gbs = |ns_per_b: f64| 1.0 / ns_per_b;
        let early = slope_ns_per_byte(put(4096), put(10284));
        let middle = slope_ns_per_byte(put(10284), put(51036));
        let late = slope_ns_per_byte(put(262116), put(1048576));
        const LARGE: [u64; 5] = [4096, 10284, 51036, 262116, 1048576];
        let increments: Vec<String> = LARGE.windows(2).map(|w| fmt_num(put(w[1]).1 - put(w[0]).1)).collect();
        let corrected: Vec<String> = LARGE
            .windows(2)
            .map(|w| {
                let (a, b) = (put(w[0]), put(w[1]));
                let k = slope_ns_per_byte((judged_size(a.0), a.1), (judged_size(b.0), b.1));
                format!("{} ns/B ({} GB/s)", fmt_num(k), fmt_num(gbs(k)))
            })
            .collect();
        let model_large: Vec<String> = LARGE
            .windows(2)
            .filter_map(|w| {
                let (a, b) = (judged_size(w[0]), judged_size(w[1]));
                let k = slope_ns_per_byte((a, model(Prim::Put, a)?), (b, model(Prim::Put, b)?));
                Some(format!("{a}–{b} B: {} ns/B", fmt_num(k)))
            })
            .collect();
        let as_printed_text = if as_printed.is_empty() {
            String::new()
        } else {
            format!(
                " At the sizes as printed the model is off by {} (the information rows).",
                as_printed.join(", ")
            )
        };

        // GET − PUT at the sizes where both are published and simulated.
        let gaps = |f: &dyn Fn(u64) -> Option<(f64, f64)>| -> Vec<f64> {
            SIZES.iter().filter_map(|&s| f(s)).map(|(g, p)| 1e3 * (g - p)).collect()
        };
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let spread = |v: &[f64]| {
            v.iter().cloned().fold(f64::NEG_INFINITY, f64::max) - v.iter().cloned().fold(f64::INFINITY, f64::min)
        };
        let paper_gaps = gaps(&|s| Some((paper(Prim::Get, s)?, paper(Prim::Put, s)?)));
        let model_gaps = gaps(&|s| {
            let j = judged_size(s);
            Some((model(Prim::Get, j)?, model(Prim::Put, j)?))
        });
        let (paper_gap, model_gap) = (mean(&paper_gaps), mean(&model_gaps));
        let every = |v: &[f64]| {
            if spread(v) < 1.0 {
                "at every size".to_string()
            } else {
                format!("on average (spread {} ns)", fmt_num(spread(v)))
            }
        };
        let residual_ns = |p: Prim, s: u64| match (model(p, s), paper(p, s)) {
            (Some(m), Some(x)) => 1e3 * (m - x),
            _ => f64::NAN,
        };
        let (get_res, put_res) = (residual_ns(Prim::Get, 1), residual_ns(Prim::Put, 1));
        let rel = |p: Prim, s: u64| match (model(p, s), paper(p, s)) {
            (Some(m), Some(x)) => format!("{:+.1} %", 100.0 * (m - x) / x),
            _ => "—".to_string(),
        };
        let nic = &sc.nic;

        // NAP-immediate: the paper's slopes against the model's.
        let imm_sizes = [1u64, 64, 256, 1024, 2048];
        let slopes_of = |f: &dyn Fn(u64) -> Option<f64>| -> Vec<String> {
            imm_sizes
                .windows(2)
                .filter_map(|w| {
                    let k = slope_ns_per_byte((w[0], f(w[0])?), (w[1], f(w[1])?));
                    Some(format!("{}–{} B: {} ns/B", w[0], w[1], fmt_num(k)))
                })
                .collect()
        };
        let imm_paper = slopes_of(&|s| paper(Prim::NapImm, s));
        let imm_model = slopes_of(&|s| model(Prim::NapImm, s));
        let imm_rate = nic.immediate_rate.or(nic.engine_rate);
        let imm_ns_per_b = imm_rate.map_or(0.0, |r| 8e9 / r.0 as f64);

        let discrepancies = vec![
            format!(
                "Reading of the large sizes: the PUT and GET entries printed at 10284, 51036 and 262116 B are read \
                 as 16384, 65536 and 262144 B and judged there (rows \"… as printed, read as …\"); the model at the \
                 sizes as printed is shown in information rows. Evidence, in the paper's own PUT numbers: with the printed sizes the \
                 slope is {} ns/B ({} GB/s) from 4096 to 10284 B, {} ns/B ({} GB/s) from 10284 to 51036 B and {} \
                 ns/B ({} GB/s) from 262116 to 1048576 B, which no pipeline with a constant per-byte cost (the \
                 paper's LogGP model, this model) can meet. The increments between consecutive large sizes are {} \
                 µs, each 4 × the previous; with 4096, 16384, 65536, 262144 and 1048576 B (each 4 × the previous) \
                 the slopes are {}, i.e. the published 3.2 GB/s peak throughout. So 10284, 51036 and 262116 are \
                 read as mis-transcribed 16 KiB, 64 KiB and 256 KiB. The model's PUT slopes at the judged sizes: \
                 {}.{as_printed_text}",
                fmt_num(early),
                fmt_num(gbs(early)),
                fmt_num(middle),
                fmt_num(gbs(middle)),
                fmt_num(late),
                fmt_num(gbs(late)),
                increments.join(", "),
                corrected.join(", "),
                if model_large.is_empty() {
                    "—".to_string()
                } else {
                    model_large.join(", ")
                },
            ),
            format!(
                "GET − PUT: the paper's GET is {} ns slower than PUT {}, the model's {} ns {}. A GET spends \
                 nic.get_overhead ({}, an assumption) at the requester where a PUT spends nic.message_overhead \
                 ({}); its request packet crosses link and router; the target's receive engine hands the \
                 descriptor the packet carries to its send engine, which starts the write-back with no descriptor \
                 fetch and no descriptor extraction, after nic.writeback_overhead ({}, fitted to GET 1 B), and \
                 then reads and sends the data as a PUT does. nic.writeback_overhead was fitted to the GET 1 B \
                 entry, not to the gap: at 1 B the gap difference is the GET 1 B fit residual ({} ns) minus the \
                 PUT 1 B one ({} ns).",
                fmt_num(paper_gap),
                every(&paper_gaps),
                fmt_num(model_gap),
                every(&model_gaps),
                nic.get_overhead.unwrap_or(nic.message_overhead),
                nic.message_overhead,
                nic.writeback_overhead.unwrap_or(nic.message_overhead),
                fmt_num(get_res),
                fmt_num(put_res),
            ),
            format!(
                "NAP-immediate is not linear in the paper: {} — nearly flat up to 64 B, then steeper. In the \
                 model the first nic.immediate_inline = {} of immediate data come with the descriptor's first \
                 read request at no extraction cost (its value is not fitted: one {} read request \
                 (nic.host.read_request) less a 16 B descriptor header; the mechanism was chosen knowing the 64 B \
                 and 256 B entries, which are therefore post-hoc rows); only the bytes beyond are extracted at \
                 nic.immediate_rate ({} = {} ns/B, fitted at 1024 B). Model slopes: {}. Within the inline bytes \
                 only the payload's serialisation (engine data path, link) adds to the latency; the model's flat \
                 part is {} ns off the paper's (NAP-imm 1 B), an offset nothing was fitted to. Beyond, one \
                 extraction rate fitted at 1024 B leaves the model {} off at 256 B and {} at 2048 B.",
                imm_paper.join(", "),
                nic.immediate_inline,
                nic.host.read_request,
                imm_rate.map_or("—".to_string(), |r| r.to_string()),
                fmt_num(imm_ns_per_b),
                imm_model.join(", "),
                fmt_num(residual_ns(Prim::NapImm, 1)),
                rel(Prim::NapImm, 256),
                rel(Prim::NapImm, 2048),
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
                // Published entries at the sizes they are judged at.
                points(p)
                    .map(|(s, paper)| (judged_size(s), paper))
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
        assert_eq!(points(Prim::NapImm).count(), 5);
        assert_eq!(points(Prim::NapImm).last().unwrap().0, 2048);
        // The published large-size increments are 3.84 µs × 4^k (the basis of the corrected sizes).
        let put: Vec<f64> = PAPER_PUT[5..].to_vec();
        for (k, w) in put.windows(2).enumerate() {
            assert!((w[1] - w[0] - 3.84 * 4f64.powi(k as i32)).abs() < 1e-9);
        }
    }

    #[test]
    fn quick_run_roles_and_invariants() {
        let r = ChppLatency.run(&Ctx::quick(true)).unwrap();
        assert_eq!(
            crate::calibration_labels(&r),
            ["NAP-imm 1024 B", "NAP-ind 1024 B", "PUT 1 B", "GET 1 B"],
            "{}",
            r.to_text()
        );
        let preds: Vec<_> = r.rows.iter().filter(|x| x.role == Role::Prediction).collect();
        // Quick: 5 + 5 NAP entries and 8 of 10 PUT and GET entries (up to 64 KiB as judged), less
        // the 4 calibration points and the 2 post-hoc NAP-immediate entries.
        assert_eq!(preds.len(), 5 + 5 + 8 + 8 - 4 - 2);
        let post: Vec<_> = r
            .rows
            .iter()
            .filter(|x| x.role == Role::PostHoc)
            .map(|x| x.label.as_str())
            .collect();
        assert_eq!(post, ["NAP-imm 64 B", "NAP-imm 256 B"]);
        assert!(preds.iter().all(|x| x.tolerance == Some(TOLERANCE)));
        // The mis-transcribed sizes are judged as corrected; the printed ones are information.
        let row = |l: &str| r.rows.iter().find(|x| x.label == l).unwrap_or_else(|| panic!("{l}"));
        assert_eq!(row("PUT 10284 B as printed, read as 16384 B").role, Role::Prediction);
        assert_eq!(row("GET 51036 B as printed, read as 65536 B").role, Role::Prediction);
        let printed = row("PUT 10284 B simulated at the size as printed (not the reading judged)");
        assert_eq!((printed.role, printed.pass), (Role::Info, None));
        assert_eq!(printed.paper, row("PUT 10284 B as printed, read as 16384 B").paper);
        assert!(printed.simulated < row("PUT 10284 B as printed, read as 16384 B").simulated);
        assert_eq!(r.rows.iter().filter(|x| x.role == Role::Info).count(), 4);
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
