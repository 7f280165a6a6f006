//! `hpcnet sweep`: the latency–load curve of a scenario.
//!
//! Each load point is an independent run with `traffic.load` overridden; points run on worker
//! threads (each run is single-threaded and deterministic, so results do not depend on the
//! thread count). Writes `<out>/<name>-sweep.csv` and `<out>/<name>-sweep.svg`.

use crate::{run::run_with_progress, Common, Failure};
use hpcnet_studies::plot::{self, Figure, Mark, Series, Style};
use hpcnet_workloads::synthetic::RunReport;
use hpcnet_workloads::Scenario;
use std::path::Path;
use std::sync::Mutex;

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

pub fn sweep(path: &Path, spec: &str, out: &Path, threads: Option<usize>, common: &Common) -> Result<(), Failure> {
    let loads = parse_loads(spec).map_err(|why| Failure::input(format!("{}: --load: {why}", path.display())))?;
    // Validate once with the first load so input errors surface before any work.
    let mut scenarios = Vec::new();
    for l in &loads {
        let mut set = common.set.clone();
        set.push(format!("traffic.load={l}"));
        scenarios.push(Scenario::load(path, &set).map_err(Failure::input)?);
    }
    // The output directory must take files before any point runs.
    crate::check_writable_dir(out, "--out")?;
    let threads = threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let results: Mutex<Vec<Option<Result<RunReport, Failure>>>> = Mutex::new((0..loads.len()).map(|_| None).collect());
    let next = Mutex::new(0usize);
    std::thread::scope(|s| {
        for _ in 0..threads.min(loads.len()) {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().expect("lock");
                    let i = *n;
                    *n += 1;
                    i
                };
                if i >= scenarios.len() {
                    break;
                }
                let r = run_with_progress(&scenarios[i], false, false);
                if !common.json {
                    if let Ok(rep) = &r {
                        eprintln!(
                            "  load {:.3}: accepted {:.4}, mean latency {}{}",
                            loads[i],
                            rep.accepted_load,
                            rep.latency_ns
                                .mean
                                .map_or("none (no packet measured)".to_string(), |m| format!("{m:.1} ns")),
                            verdict(&scenarios[i], rep).map_or(String::new(), |v| format!("  {v}"))
                        );
                    }
                }
                results.lock().expect("lock")[i] = Some(r);
            });
        }
    });
    let mut reports = Vec::new();
    for r in results.into_inner().expect("lock") {
        reports.push(r.expect("every point ran")?);
    }
    let name = &scenarios[0].name;
    let stem = file_stem(name);
    let csv = out.join(format!("{stem}-sweep.csv"));
    let svg = out.join(format!("{stem}-sweep.svg"));
    let mut text = String::from("load,offered_load,accepted_load,latency_mean_ns,latency_p50_ns,latency_p99_ns,latency_max_ns,mean_hops,drained,deadlock,status,events,wall_seconds\n");
    let cell = |v: Option<f64>, digits: usize| v.map_or(String::new(), |x| format!("{x:.digits$}"));
    let verdicts: Vec<Option<&'static str>> = scenarios.iter().zip(&reports).map(|(sc, r)| verdict(sc, r)).collect();
    for ((l, r), v) in loads.iter().zip(&reports).zip(&verdicts) {
        text.push_str(&format!(
            "{l},{:.6},{:.6},{},{},{},{},{},{},{},{},{},{:.3}\n",
            r.offered_load,
            r.accepted_load,
            cell(r.latency_ns.mean, 3),
            cell(r.latency_ns.p50, 3),
            cell(r.latency_ns.p99, 3),
            cell(r.latency_ns.max, 3),
            cell(r.mean_hops, 4),
            r.drained,
            r.deadlock.is_some(),
            v.unwrap_or("ok"),
            r.events,
            r.wall_seconds
        ));
    }
    std::fs::write(&csv, text).map_err(|e| Failure::input(format!("{}: {e}", csv.display())))?;
    let bound = reports[0].channel_load_bound.as_ref().map(|b| b.saturation_bound);
    let svg_text = plot::svg(&figures(name, reports.as_slice(), &verdicts, bound))
        .map_err(|e| Failure::input(format!("{}: cannot draw the plot: {e}", svg.display())))?;
    std::fs::write(&svg, svg_text).map_err(|e| Failure::input(format!("{}: {e}", svg.display())))?;
    if common.json {
        let v = serde_json::json!({
            "scenario": name,
            "version": env!("CARGO_PKG_VERSION"),
            "seed": scenarios[0].file.seed,
            "csv": csv.display().to_string(),
            "svg": svg.display().to_string(),
            "points": reports.iter().zip(&loads).zip(&scenarios).map(|((r, l), sc)| serde_json::json!({
                "load": l, "offered_load": r.offered_load, "accepted_load": r.accepted_load,
                "latency_ns": r.latency_ns, "mean_hops": r.mean_hops, "drained": r.drained,
                "deadlock": r.deadlock.is_some(),
                "status": verdict(sc, r).unwrap_or("ok"),
            })).collect::<Vec<_>>(),
            "resolved_scenario": scenarios[0].resolved_json(),
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        outln!(
            "hpcnet {} — sweep of '{}' (seed {})",
            env!("CARGO_PKG_VERSION"),
            name,
            scenarios[0].file.seed
        );
        outln!(
            "  {:>6} {:>9} {:>9} {:>10} {:>10} {:>8}",
            "load",
            "offered",
            "accepted",
            "mean ns",
            "p99 ns",
            "hops"
        );
        let col = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |x| format!("{x:.digits$}"));
        for ((l, r), v) in loads.iter().zip(&reports).zip(&verdicts) {
            outln!(
                "  {:>6.3} {:>9.4} {:>9.4} {:>10} {:>10} {:>8}{}",
                l,
                r.offered_load,
                r.accepted_load,
                col(r.latency_ns.mean, 1),
                col(r.latency_ns.p99, 1),
                col(r.mean_hops, 3),
                v.map_or(String::new(), |v| format!("  {}", v.to_uppercase()))
            );
        }
        if let Some(b) = bound {
            outln!("  channel-load bound: {b:.4}");
        }
        outln!("  wrote {} and {}", csv.display(), svg.display());
    }
    let failed: Vec<String> = loads
        .iter()
        .zip(&verdicts)
        .filter_map(|(l, v)| v.map(|v| format!("load {l}: {v}")))
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

/// What went wrong at one point, if anything: a deadlock, no packet measured, or packets left
/// in the network at the end (unless the scenario accepts that, `sim.allow_undrained`).
fn verdict(sc: &Scenario, r: &RunReport) -> Option<&'static str> {
    if r.deadlock.is_some() {
        Some("deadlock")
    } else if r.latency_ns.mean.is_none() {
        Some("no packet measured")
    } else if !r.drained && !sc.file.sim.allow_undrained {
        Some("not drained")
    } else {
        None
    }
}

/// Two panels: latency (mean, p99) against offered load, and accepted against offered load with
/// the channel-load bound, drawn by the one plotting module of the studies. A point that did not
/// complete (`verdicts`) is left out of the curves and marked by a vertical line naming why.
fn figures(name: &str, reports: &[RunReport], verdicts: &[Option<&'static str>], bound: Option<f64>) -> Vec<Figure> {
    let series = |label: &str, color: usize, style: Style, y: &dyn Fn(&RunReport) -> Option<f64>| Series {
        label: label.into(),
        points: reports
            .iter()
            .zip(verdicts)
            .filter(|(_, v)| v.is_none())
            .filter_map(|(r, _)| y(r).map(|y| (r.offered_load, y)))
            .collect(),
        style,
        color,
    };
    let failed: Vec<Mark> = reports
        .iter()
        .zip(verdicts)
        .filter_map(|(r, v)| v.map(|v| Mark::X(format!("{v} at load {:.3}", r.offered_load), r.offered_load)))
        .collect();
    let top = reports
        .iter()
        .map(|r| r.offered_load)
        .fold(0.0, f64::max)
        .max(bound.unwrap_or(0.0));
    let mut accepted = vec![
        series("accepted", 0, Style::Line, &|r| Some(r.accepted_load)),
        Series {
            label: "accepted = offered".into(),
            points: vec![(0.0, 0.0), (top, top)],
            style: Style::Dashed,
            color: 7,
        },
    ];
    accepted.retain(|s| !s.points.is_empty());
    vec![
        Figure {
            title: format!("{name}: latency vs offered load"),
            x_label: "offered load (fraction of injection bandwidth)".into(),
            y_label: "latency (ns)".into(),
            y_log: false,
            series: vec![
                series("mean", 0, Style::Line, &|r| r.latency_ns.mean),
                series("p99", 1, Style::Line, &|r| r.latency_ns.p99),
            ],
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
