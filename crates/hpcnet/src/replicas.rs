//! Independent replications of a synthetic run (`hpcnet run --replications N`, `hpcnet sweep
//! --replications N`): the scenario run with N seeds, and the estimates of its figures over them
//! (mean and 95 % Student-t confidence interval, [`hpcnet_des::Estimate`]).
//!
//! Replication i runs with seed `seed + i` (wrapping at 2^64), the scenario's seed first, so
//! each replication is reproduced alone by `hpcnet run --set seed=<its seed>`; the random
//! streams are hashes of the seed, so neighbouring seeds give unrelated streams. Every
//! replication is a whole run, warm-up included. Replications run on worker threads; each is
//! single-threaded and deterministic and the results are gathered in seed order, so nothing
//! printed depends on the thread count. Cost: N runs of the scenario.

use crate::Failure;
use hpcnet_des::Estimate;
use hpcnet_workloads::synthetic::RunReport;
use hpcnet_workloads::Scenario;
use std::path::Path;

/// Confidence level of the reported intervals.
pub const LEVEL: f64 = 0.95;

/// The seeds of `n` replications of a scenario whose seed is `base`.
pub fn seeds(base: u64, n: u32) -> Vec<u64> {
    (0..n as u64).map(|i| base.wrapping_add(i)).collect()
}

/// The scenario at `path` with the overrides `set` and seed `seed` (the last override).
pub fn load_seeded(path: &Path, set: &[String], seed: u64) -> Result<Scenario, Failure> {
    let mut set = set.to_vec();
    set.push(format!("seed={seed}"));
    Scenario::load(path, &set).map_err(Failure::input)
}

/// `f(0) .. f(n − 1)` on at most `threads` worker threads, in index order.
pub fn par_indexed<T: Send>(n: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let indices: Vec<usize> = (0..n).collect();
    hpcnet_studies::par_map_n(&indices, threads, |&i| f(i))
}

/// How a figure is read from a run's report.
type Figure = fn(&RunReport) -> Option<f64>;

/// The figures estimated over replications: name (as in the JSON) and how to read it.
pub const FIGURES: [(&str, Figure); 6] = [
    ("accepted_load", |r| Some(r.accepted_load)),
    ("latency_mean_ns", |r| r.latency_ns.mean),
    ("latency_p50_ns", |r| r.latency_ns.p50),
    ("latency_p99_ns", |r| r.latency_ns.p99),
    ("network_latency_ns", |r| r.network_latency_ns),
    ("mean_hops", |r| r.mean_hops),
];

/// The estimate of each of [`FIGURES`] over `reports`, in that order (None where a report
/// lacks the figure or fewer than two reports are given).
pub fn estimates(reports: &[&RunReport]) -> Vec<(&'static str, Option<Estimate>)> {
    FIGURES
        .iter()
        .map(|(name, get)| (*name, estimate_of(reports, *get)))
        .collect()
}

/// The estimate of figure `name` of [`FIGURES`] over `reports` (None for an unknown name, as
/// in [`estimates`] otherwise).
pub fn estimate(reports: &[&RunReport], name: &str) -> Option<Estimate> {
    let (_, get) = FIGURES.iter().find(|(k, _)| *k == name)?;
    estimate_of(reports, *get)
}

fn estimate_of(reports: &[&RunReport], get: Figure) -> Option<Estimate> {
    let values: Option<Vec<f64>> = reports.iter().map(|r| get(r)).collect();
    values.and_then(|v| Estimate::of(&v, LEVEL))
}

/// The figures a precision target (`run --precision P`) applies to.
pub const PRECISION_FIGURES: [&str; 2] = ["latency_mean_ns", "accepted_load"];

/// Fewest replications a precision target may stop at: with two, a chance agreement of two
/// runs would end the sequence on a meaningless interval.
pub const PRECISION_MIN: usize = 3;

/// Relative half-width of each of [`PRECISION_FIGURES`] over `reports` (half-width ÷ |mean|;
/// None for a figure without an estimate or with a zero mean).
pub fn relative_half_widths(reports: &[&RunReport]) -> Vec<(&'static str, Option<f64>)> {
    PRECISION_FIGURES
        .iter()
        .map(|name| {
            let e = estimate(reports, name).filter(|e| e.mean != 0.0);
            (*name, e.map(|e| e.half_width / e.mean.abs()))
        })
        .collect()
}

/// The sequential rule of `run --precision P`: the first replication count k (in seed order,
/// k ≥ [`PRECISION_MIN`]) at which the intervals of [`PRECISION_FIGURES`] over the first k
/// reports are each at most P of their mean; None if no prefix of `reports` reaches it. The
/// rule reads prefixes only, so where it stops does not depend on how many replications ran
/// beyond (on worker threads, in waves).
pub fn precise_prefix(reports: &[&RunReport], precision: f64) -> Option<usize> {
    (PRECISION_MIN..=reports.len()).find(|&k| {
        relative_half_widths(&reports[..k])
            .iter()
            .all(|(_, r)| r.is_some_and(|r| r <= precision))
    })
}

/// "0.4551 ± 0.0012" with `digits` decimals, or "-".
pub fn pm(e: Option<&Estimate>, digits: usize) -> String {
    e.map_or("-".to_string(), |e| {
        format!("{:.digits$} ± {:.digits$}", e.mean, e.half_width)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_count_up_from_the_scenarios_and_wrap() {
        assert_eq!(seeds(1, 3), vec![1, 2, 3]);
        assert_eq!(seeds(u64::MAX, 2), vec![u64::MAX, 0]);
    }

    #[test]
    fn par_indexed_keeps_index_order_on_any_thread_count() {
        for threads in [1, 2, 5, 64] {
            assert_eq!(par_indexed(7, threads, |i| i * i), vec![0, 1, 4, 9, 16, 25, 36]);
        }
        assert!(par_indexed(0, 4, |i| i).is_empty());
    }
}
