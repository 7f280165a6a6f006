//! `hpcnet sweep`: the latency–load curve of a scenario.
//!
//! Each load point is an independent run with `traffic.load` overridden, or with
//! `--replications N` N runs with seeds seed .. seed + N − 1 ([`crate::replicas`]) whose figures
//! are averaged, with confidence intervals; runs go to worker threads (each run is
//! single-threaded and deterministic, so results do not depend on the thread count). Writes
//! `<out>/<name>-sweep.csv` and `<out>/<name>-sweep.svg`. Cost: loads × replications runs.

use crate::replicas;
use crate::run::{run_with_progress, verdict};
use crate::{Common, Failure};
use hpcnet_des::Estimate;
use hpcnet_studies::plot::{self, Figure, Mark, Series, Style};
use hpcnet_workloads::synthetic::RunReport;
use hpcnet_workloads::Scenario;
use std::path::Path;

/// Parse "A:B:STEP" into the list of loads (inclusive of B within rounding); the error is the
/// reason, for the caller to put after the file and `--load`.
pub fn parse_loads(spec: &str) -> Result<Vec<f64>, String> {
    let bad = |why: &str| format!("'{spec}' {why} (expected START:END:STEP, e.g. 0.1:0.9:0.1)");
    let parts: Vec<&str> = spec.split(':').collect();
    if parts.len() != 3 {
        return Err(bad("is not three numbers separated by ':'"));
    }
    let mut nums = [0.0; 3];
    for (n, p) in nums.iter_mut().zip(&parts) {
        *n = p
            .trim()
            .parse::<f64>()
            .map_err(|_| bad(&format!("has '{}', which is not a number", p.trim())))?;
    }
    let [a, b, s] = nums;
    // Written so that NaN fails every test.
    if !(a > 0.0 && b <= 1.0 && a <= b) {
        return Err(bad("needs 0 < START <= END <= 1"));
    }
    if !(s > 0.0 && s.is_finite()) {
        return Err(bad("needs a positive STEP"));
    }
    let n = ((b - a) / s + 1e-9).floor() + 1.0;
    if n > 1000.0 {
        return Err(bad("gives more than 1000 points"));
    }
    Ok((0..n as usize)
        .map(|i| ((a + i as f64 * s) * 1e9).round() / 1e9)
        .collect())
}

/// A scenario name made safe to use as a file name (names come from the scenario file).
fn file_stem(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.chars().all(|c| c == '.') {
        "scenario".to_string()
    } else {
        s
    }
}

/// One load point: its replications' reports in seed order, and what went wrong in the first
/// that did not complete (the point is then left out of the curves).
struct Point {
    load: f64,
    runs: Vec<RunReport>,
    verdict: Option<&'static str>,
}

impl Point {
    /// The mean of a figure over the replications (the figure itself with one replication);
    /// None if a replication lacks it.
    fn mean(&self, get: impl Fn(&RunReport) -> Option<f64>) -> Option<f64> {
        let v: Option<Vec<f64>> = self.runs.iter().map(get).collect();
        v.map(|v| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// The estimate of figure `name` of [`replicas::FIGURES`] over two or more replications.
    fn estimate(&self, name: &str) -> Option<Estimate> {
        if self.runs.len() < 2 {
            return None;
        }
        let refs: Vec<&RunReport> = self.runs.iter().collect();
        replicas::estimate(&refs, name)
    }

    fn latency_max(&self) -> Option<f64> {
        let v: Option<Vec<f64>> = self.runs.iter().map(|r| r.latency_ns.max).collect();
        v.map(|v| v.into_iter().fold(f64::NEG_INFINITY, f64::max))
    }
}

pub fn sweep(
    path: &Path,
    spec: &str,
    out: &Path,
    threads: Option<usize>,
    replications: u32,
    common: &Common,
) -> Result<(), Failure> {
    let loads = parse_loads(spec).map_err(|why| Failure::input(format!("{}: --load: {why}", path.display())))?;
    let base = Scenario::load(path, &common.set).map_err(Failure::input)?;
    let seeds = replicas::seeds(base.file.seed, replications);
    // Every load's scenario is read before any runs, so input errors surface before any work;
    // a replication reads its own (the seed its only difference) when it starts, so the
    // scenarios held are one per load plus one per thread.
    let mut sets = Vec::new();
    let mut scenarios = Vec::new();
    for l in &loads {
        let mut set = common.set.clone();
        set.push(format!("traffic.load={l}"));
        scenarios.push(Scenario::load(path, &set).map_err(Failure::input)?);
        sets.push(set);
    }
    // The output directory must take files before any point runs.
    crate::check_writable_dir(out, "--out")?;
    let threads = threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let reps = replications as usize;
    // Job i: load i / reps, replication i % reps.
    let results = replicas::par_indexed(loads.len() * reps, threads, |i| {
        let (k, j) = (i / reps, i % reps);
        let r = if reps == 1 {
            run_with_progress(&scenarios[k], false, false)
        } else {
            replicas::load_seeded(path, &sets[k], seeds[j]).and_then(|sc| run_with_progress(&sc, false, false))
        };
        if let (false, Ok(rep)) = (common.json, &r) {
            let seed = if reps > 1 {
                format!(" seed {}", rep.seed)
            } else {
                String::new()
            };
            eprintln!(
                "  load {:.3}{seed}: accepted {:.4}, mean latency {}{}",
                loads[k],
                rep.accepted_load,
                rep.latency_ns
                    .mean
                    .map_or("none (no packet measured)".to_string(), |m| format!("{m:.1} ns")),
                verdict(&scenarios[k], rep).map_or(String::new(), |v| format!("  {v}"))
            );
        }
        r
    });
    let mut reports = Vec::new();
    for r in results {
        reports.push(r?);
    }
    let mut points = Vec::new();
    let mut runs = reports.into_iter();
    for (k, &load) in loads.iter().enumerate() {
        let point_runs: Vec<RunReport> = runs.by_ref().take(reps).collect();
        let verdict = point_runs.iter().find_map(|r| verdict(&scenarios[k], r));
        points.push(Point {
            load,
            runs: point_runs,
            verdict,
        });
    }
    let name = &base.name;
    let stem = file_stem(name);
    let csv = out.join(format!("{stem}-sweep.csv"));
    let svg = out.join(format!("{stem}-sweep.svg"));
    let mut text = String::from("load,offered_load,accepted_load,latency_mean_ns,latency_p50_ns,latency_p99_ns,latency_max_ns,mean_hops,drained,deadlock,status,events,wall_seconds");
    if reps > 1 {
        text.push_str(",replications,accepted_load_ci95,latency_mean_ns_ci95,latency_p99_ns_ci95");
    }
    text.push('\n');
    let cell = |v: Option<f64>, digits: usize| v.map_or(String::new(), |x| format!("{x:.digits$}"));
    for p in &points {
        text.push_str(&format!(
            "{},{:.6},{:.6},{},{},{},{},{},{},{},{},{},{:.3}",
            p.load,
            p.mean(|r| Some(r.offered_load)).unwrap_or(0.0),
            p.mean(|r| Some(r.accepted_load)).unwrap_or(0.0),
            cell(p.mean(|r| r.latency_ns.mean), 3),
            cell(p.mean(|r| r.latency_ns.p50), 3),
            cell(p.mean(|r| r.latency_ns.p99), 3),
            cell(p.latency_max(), 3),
            cell(p.mean(|r| r.mean_hops), 4),
            p.runs.iter().all(|r| r.drained),
            p.runs.iter().any(|r| r.deadlock.is_some()),
            p.verdict.unwrap_or("ok"),
            p.runs.iter().map(|r| r.events).sum::<u64>(),
            p.runs.iter().map(|r| r.wall_seconds).sum::<f64>()
        ));
        if reps > 1 {
            let ci = |name: &str, digits: usize| cell(p.estimate(name).map(|e| e.half_width), digits);
            text.push_str(&format!(
                ",{reps},{},{},{}",
                ci("accepted_load", 6),
                ci("latency_mean_ns", 3),
                ci("latency_p99_ns", 3)
            ));
        }
        text.push('\n');
    }
    std::fs::write(&csv, text).map_err(|e| Failure::input(format!("{}: {e}", csv.display())))?;
    let bound = points[0].runs[0]
        .channel_load_bound
        .as_ref()
        .map(|b| b.saturation_bound);
    let svg_text = plot::svg(&figures(name, &points, bound))
        .map_err(|e| Failure::input(format!("{}: cannot draw the plot: {e}", svg.display())))?;
    std::fs::write(&svg, svg_text).map_err(|e| Failure::input(format!("{}: {e}", svg.display())))?;
    if common.json {
        let v = serde_json::json!({
            "scenario": name,
            "version": env!("CARGO_PKG_VERSION"),
            "seed": base.file.seed,
            "replications": reps,
            "csv": csv.display().to_string(),
            "svg": svg.display().to_string(),
            "points": points.iter().map(|p| {
                let mut j = serde_json::json!({
                    "load": p.load,
                    "offered_load": p.mean(|r| Some(r.offered_load)),
                    "accepted_load": p.mean(|r| Some(r.accepted_load)),
                    "latency_ns": {
                        "mean": p.mean(|r| r.latency_ns.mean),
                        "p50": p.mean(|r| r.latency_ns.p50),
                        "p99": p.mean(|r| r.latency_ns.p99),
                        "max": p.latency_max(),
                    },
                    "mean_hops": p.mean(|r| r.mean_hops),
                    "drained": p.runs.iter().all(|r| r.drained),
                    "deadlock": p.runs.iter().any(|r| r.deadlock.is_some()),
                    "status": p.verdict.unwrap_or("ok"),
                });
                if reps > 1 {
                    let refs: Vec<&RunReport> = p.runs.iter().collect();
                    j["seeds"] = serde_json::json!(p.runs.iter().map(|r| r.seed).collect::<Vec<_>>());
                    j["estimates"] = replicas::estimates(&refs)
                        .into_iter()
                        .map(|(k, e)| (k.to_string(), serde_json::json!(e)))
                        .collect::<serde_json::Map<_, _>>()
                        .into();
                }
                j
            }).collect::<Vec<_>>(),
            "resolved_scenario": scenarios[0].resolved_json(),
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        let reps_note = if reps > 1 {
            format!(
                ", {reps} replications per load (seeds {} to {}): means ± half-widths of their {:.0} % confidence intervals",
                seeds[0],
                seeds[reps - 1],
                replicas::LEVEL * 100.0
            )
        } else {
            String::new()
        };
        outln!(
            "hpcnet {} — sweep of '{}' (seed {}){reps_note}",
            env!("CARGO_PKG_VERSION"),
            name,
            base.file.seed
        );
        let wide = if reps > 1 { 20 } else { 10 };
        outln!(
            "  {:>6} {:>9} {:>w2$} {:>wide$} {:>wide$} {:>8}",
            "load",
            "offered",
            "accepted",
            "mean ns",
            "p99 ns",
            "hops",
            w2 = if reps > 1 { 18 } else { 9 }
        );
        let col = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |x| format!("{x:.digits$}"));
        for p in &points {
            let (accepted, mean, p99) = if reps > 1 {
                (
                    replicas::pm(p.estimate("accepted_load").as_ref(), 4),
                    replicas::pm(p.estimate("latency_mean_ns").as_ref(), 1),
                    replicas::pm(p.estimate("latency_p99_ns").as_ref(), 1),
                )
            } else {
                (
                    col(p.mean(|r| Some(r.accepted_load)), 4),
                    col(p.mean(|r| r.latency_ns.mean), 1),
                    col(p.mean(|r| r.latency_ns.p99), 1),
                )
            };
            outln!(
                "  {:>6.3} {:>9.4} {:>w2$} {:>wide$} {:>wide$} {:>8}{}",
                p.load,
                p.mean(|r| Some(r.offered_load)).unwrap_or(0.0),
                accepted,
                mean,
                p99,
                col(p.mean(|r| r.mean_hops), 3),
                p.verdict.map_or(String::new(), |v| format!("  {}", v.to_uppercase())),
                w2 = if reps > 1 { 18 } else { 9 }
            );
        }
        if let Some(b) = bound {
            outln!("  channel-load bound: {b:.4}");
        }
        outln!("  wrote {} and {}", csv.display(), svg.display());
    }
    let failed: Vec<String> = points
        .iter()
        .filter_map(|p| p.verdict.map(|v| format!("load {}: {v}", p.load)))
        .collect();
    if !failed.is_empty() {
        return Err(Failure::model(format!(
            "{} of {} sweep points did not complete ({}); they are marked in {} and {}",
            failed.len(),
            loads.len(),
            failed.join(", "),
            csv.display(),
            svg.display()
        )));
    }
    Ok(())
}

/// Two panels: latency (mean, p99) against offered load, and accepted against offered load with
/// the channel-load bound, drawn by the one plotting module of the studies. A point that did not
/// complete is left out of the curves and marked by a vertical line naming why. With
/// replications the curves are their means, and a dashed outline around the mean latency
/// bounds its 95 % confidence intervals.
fn figures(name: &str, points: &[Point], bound: Option<f64>) -> Vec<Figure> {
    let ok: Vec<&Point> = points.iter().filter(|p| p.verdict.is_none()).collect();
    let offered = |p: &Point| p.mean(|r| Some(r.offered_load)).unwrap_or(0.0);
    let series = |label: &str, color: usize, style: Style, y: &dyn Fn(&Point) -> Option<f64>| Series {
        label: label.into(),
        points: ok.iter().filter_map(|p| y(p).map(|y| (offered(p), y))).collect(),
        style,
        color,
    };
    let failed: Vec<Mark> = points
        .iter()
        .filter_map(|p| {
            p.verdict
                .map(|v| Mark::X(format!("{v} at load {:.3}", offered(p)), offered(p)))
        })
        .collect();
    let top = points.iter().map(offered).fold(0.0, f64::max).max(bound.unwrap_or(0.0));
    let mut accepted = vec![
        series("accepted", 0, Style::Line, &|p| p.mean(|r| Some(r.accepted_load))),
        Series {
            label: "accepted = offered".into(),
            points: vec![(0.0, 0.0), (top, top)],
            style: Style::Dashed,
            color: 7,
        },
    ];
    accepted.retain(|s| !s.points.is_empty());
    let mut latency = vec![
        series("mean", 0, Style::Line, &|p| p.mean(|r| r.latency_ns.mean)),
        series("p99", 1, Style::Line, &|p| p.mean(|r| r.latency_ns.p99)),
    ];
    // The interval's outline: upper bounds left to right, lower bounds back.
    let ci: Vec<(f64, Estimate)> = ok
        .iter()
        .filter_map(|p| p.estimate("latency_mean_ns").map(|e| (offered(p), e)))
        .collect();
    if !ci.is_empty() {
        let mut outline: Vec<(f64, f64)> = ci.iter().map(|(x, e)| (*x, e.mean + e.half_width)).collect();
        outline.extend(ci.iter().rev().map(|(x, e)| (*x, e.mean - e.half_width)));
        outline.push(outline[0]);
        latency.push(Series {
            label: format!("mean, {:.0} % CI", replicas::LEVEL * 100.0),
            points: outline,
            style: Style::Dashed,
            color: 0,
        });
    }
    vec![
        Figure {
            title: format!("{name}: latency vs offered load"),
            x_label: "offered load (fraction of injection bandwidth)".into(),
            y_label: "latency (ns)".into(),
            y_log: false,
            series: latency,
            marks: failed.clone(),
        },
        Figure {
            title: "accepted vs offered load".into(),
            x_label: "offered load".into(),
            y_label: "accepted load".into(),
            y_log: false,
            series: accepted,
            marks: bound
                .map(|b| Mark::Y("channel-load bound".into(), b))
                .into_iter()
                .chain(failed)
                .collect(),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_ranges() {
        let v = parse_loads("0.1:0.5:0.1").unwrap();
        assert_eq!(v, vec![0.1, 0.2, 0.3, 0.4, 0.5]);
        assert_eq!(parse_loads("1:1:0.1").unwrap(), vec![1.0]);
        assert_eq!(parse_loads(" 0.2 : 0.3 : 0.05 ").unwrap(), vec![0.2, 0.25, 0.3]);
        for bad in [
            "0:1:0.1",
            "0.1:0.5",
            "0.1:0.5:0.1:0.1",
            "0.5:0.1:0.1",
            "0.1:0.5:0",
            "0.1:0.5:-0.1",
            "0.1:0.5:nan",
            "nan:0.5:0.1",
            "0.1:inf:0.1",
            "0.1:0.5:inf",
            "0.1:1.5:0.1",
            "0.1:x:0.1",
            "0.1:0.9:1e-6",
            "",
        ] {
            let e = parse_loads(bad).expect_err(bad);
            assert!(e.starts_with(&format!("'{bad}'")), "{e}");
        }
    }

    #[test]
    fn file_stems_stay_in_the_output_directory() {
        assert_eq!(file_stem("torus-8x8"), "torus-8x8");
        assert_eq!(file_stem("../../etc/x y"), ".._.._etc_x_y");
        assert_eq!(file_stem(".."), "scenario");
        assert_eq!(file_stem(""), "scenario");
    }
}
