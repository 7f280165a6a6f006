//! `hpcnet sweep`: the latency–load curve of a scenario.
//!
//! Each load point is an independent run with `traffic.load` overridden; points run on worker
//! threads (each run is single-threaded and deterministic, so results do not depend on the
//! thread count). Writes `<out>/<name>-sweep.csv` and `<out>/<name>-sweep.svg`.

use crate::{plot, run::run_with_progress, Common, Failure};
use hpcnet_workloads::synthetic::RunReport;
use hpcnet_workloads::Scenario;
use std::path::Path;
use std::sync::Mutex;

/// Parse "A:B:STEP" into the list of loads (inclusive of B within rounding).
pub fn parse_loads(spec: &str) -> Result<Vec<f64>, Failure> {
    let bad = |why: &str| {
        Failure::input(format!(
            "--load {spec}: {why} (expected START:END:STEP, e.g. 0.1:0.9:0.1)"
        ))
    };
    let parts: Vec<&str> = spec.split(':').collect();
    if parts.len() != 3 {
        return Err(bad("needs three numbers"));
    }
    let nums: Vec<f64> = parts
        .iter()
        .map(|p| p.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad("not a number"))?;
    let (a, b, s) = (nums[0], nums[1], nums[2]);
    if !(a > 0.0 && b <= 1.0 && a <= b) {
        return Err(bad("loads must satisfy 0 < START <= END <= 1"));
    }
    if s <= 0.0 {
        return Err(bad("STEP must be positive"));
    }
    let n = ((b - a) / s + 1e-9).floor() as usize + 1;
    if n > 1000 {
        return Err(bad("more than 1000 points"));
    }
    Ok((0..n).map(|i| ((a + i as f64 * s) * 1e9).round() / 1e9).collect())
}

pub fn sweep(path: &Path, spec: &str, out: &Path, threads: Option<usize>, common: &Common) -> Result<(), Failure> {
    let loads = parse_loads(spec)?;
    // Validate once with the first load so input errors surface before any work.
    let mut scenarios = Vec::new();
    for l in &loads {
        let mut set = common.set.clone();
        set.push(format!("traffic.load={l}"));
        scenarios.push(Scenario::load(path, &set).map_err(Failure::input)?);
    }
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
                            "  load {:.3}: accepted {:.4}, mean latency {:.1} ns",
                            loads[i], rep.accepted_load, rep.latency_ns.mean
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
    std::fs::create_dir_all(out).map_err(|e| Failure::input(format!("{}: {e}", out.display())))?;
    let name = &scenarios[0].name;
    let csv = out.join(format!("{name}-sweep.csv"));
    let svg = out.join(format!("{name}-sweep.svg"));
    let mut text = String::from("load,offered_load,accepted_load,latency_mean_ns,latency_p50_ns,latency_p99_ns,latency_max_ns,mean_hops,drained,deadlock,events,wall_seconds\n");
    for (l, r) in loads.iter().zip(&reports) {
        text.push_str(&format!(
            "{l},{:.6},{:.6},{:.3},{:.3},{:.3},{:.3},{:.4},{},{},{},{:.3}\n",
            r.offered_load,
            r.accepted_load,
            r.latency_ns.mean,
            r.latency_ns.p50,
            r.latency_ns.p99,
            r.latency_ns.max,
            r.mean_hops,
            r.drained,
            r.deadlock.is_some(),
            r.events,
            r.wall_seconds
        ));
    }
    std::fs::write(&csv, text).map_err(|e| Failure::input(format!("{}: {e}", csv.display())))?;
    let pts: Vec<plot::Point> = reports
        .iter()
        .map(|r| plot::Point {
            offered: r.offered_load,
            accepted: r.accepted_load,
            mean: r.latency_ns.mean,
            p99: r.latency_ns.p99,
        })
        .collect();
    let bound = reports[0].channel_load_bound.as_ref().map(|b| b.saturation_bound);
    plot::latency_load(&svg, name, &pts, bound).map_err(|e| Failure::input(format!("{}: {e}", svg.display())))?;
    if common.json {
        let v = serde_json::json!({
            "scenario": name,
            "version": env!("CARGO_PKG_VERSION"),
            "seed": scenarios[0].file.seed,
            "csv": csv.display().to_string(),
            "svg": svg.display().to_string(),
            "points": reports.iter().zip(&loads).map(|(r, l)| serde_json::json!({
                "load": l, "offered_load": r.offered_load, "accepted_load": r.accepted_load,
                "latency_ns": r.latency_ns, "mean_hops": r.mean_hops, "drained": r.drained,
                "deadlock": r.deadlock.is_some(),
            })).collect::<Vec<_>>(),
            "resolved_scenario": scenarios[0].resolved_json(),
        });
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        println!(
            "hpcnet {} — sweep of '{}' (seed {})",
            env!("CARGO_PKG_VERSION"),
            name,
            scenarios[0].file.seed
        );
        println!(
            "  {:>6} {:>9} {:>9} {:>10} {:>10} {:>8}",
            "load", "offered", "accepted", "mean ns", "p99 ns", "hops"
        );
        for (l, r) in loads.iter().zip(&reports) {
            println!(
                "  {:>6.3} {:>9.4} {:>9.4} {:>10.1} {:>10.1} {:>8.3}{}",
                l,
                r.offered_load,
                r.accepted_load,
                r.latency_ns.mean,
                r.latency_ns.p99,
                r.mean_hops,
                if r.deadlock.is_some() { "  DEADLOCK" } else { "" }
            );
        }
        if let Some(b) = bound {
            println!("  channel-load bound: {b:.4}");
        }
        println!("  wrote {} and {}", csv.display(), svg.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_ranges() {
        let v = parse_loads("0.1:0.5:0.1").ok().unwrap();
        assert_eq!(v, vec![0.1, 0.2, 0.3, 0.4, 0.5]);
        assert!(parse_loads("0:1:0.1").is_err());
        assert!(parse_loads("0.1:0.5").is_err());
        assert!(parse_loads("0.5:0.1:0.1").is_err());
        assert!(parse_loads("0.1:0.5:0").is_err());
    }
}
