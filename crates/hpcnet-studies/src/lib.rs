//! hpcnet-studies — one module per seed study: scenario + reference numbers + runner +
//! comparison report.
//!
//! A study runs the models (topologies, the packet network, the NIC…) on the configuration a
//! paper describes and compares what comes out with the numbers the paper publishes. Every
//! simulated value comes out of a model run; a published value is never printed as a result.
//! Each row of a [`StudyReport`] has a [`Role`]: *calibration* (a parameter was fitted to this
//! published point; shown, not judged), *prediction* (not fitted, and every reading, parameter
//! and mechanism it depends on fixed before the row was compared), *post-hoc* (judged like a
//! prediction, but a reading, parameter or mechanism it depends on was chosen knowing the
//! published value; never counted as a prediction) or *info* (context, no verdict). A study
//! passes when every prediction and post-hoc row is within its tolerance, and its summary line
//! counts the two apart. Each study declares its calibration in one place, [`Study::fitted`]:
//! the scenario keys fitted to published points, which `hpcnet reproduce NAME --sensitivity`
//! perturbs. Where a paper is ambiguous or inconsistent, the study makes a choice and says so in
//! [`StudyReport::discrepancies`], giving every reading's figures.
//!
//! # Adding a study
//!
//! 1. Create `src/<name>.rs` with a unit struct implementing [`Study`]: `name()` (the
//!    `hpcnet reproduce` argument, kebab-case), `title()`, `scenario()`, `fitted()` (a `const`
//!    table of [`Fitted`] entries: scenario key, published point) and `run(&Ctx)`.
//! 2. Put the published numbers in `const`s at the top of the module, each with a comment citing
//!    the spec file and section (`spec/01-sunway.md, "Published results"`).
//! 3. If the study simulates a machine, write its scenario as `scenarios/<name>.toml` with
//!    comments naming sources and choices, embed it with `include_str!` and load it with
//!    `Ctx::load`, which applies the user's `--set` overrides ([`Ctx::set`]) before the study's
//!    own. Honour [`Ctx::quick`] (shorter runs) so the unit tests stay fast. Turn benchmark
//!    errors into [`StudyError`]s, never panics: any `--set` may reach the study.
//! 4. Build [`Row`]s with [`Row::prediction`], [`Row::post_hoc`], [`Row::calibration`],
//!    [`Row::info`] or [`Row::claim`], and return [`StudyReport::new`]; add [`plot::Figure`]s to
//!    `report.figures` if there is a curve.
//! 5. Add the module below and one line to [`all`]. `hpcnet reproduce <name>`,
//!    `hpcnet reproduce --all`, the JSON, the HTML page and the SVG then work unchanged.
//!
//! ```
//! use hpcnet_studies::{all, find, Ctx};
//! let study = find("loggp").unwrap();
//! let report = hpcnet_studies::run(study, &Ctx::quick(true)).unwrap();
//! assert!(report.pass);
//! assert!(all().iter().any(|s| s.name() == "chpp-crossbar"));
//! ```

mod chpp;
pub mod chpp_bandwidth;
pub mod chpp_crossbar;
pub mod chpp_latency;
pub mod chpp_vf_fairness;
pub mod ib_memory;
pub mod ib_nas;
pub mod loggp;
pub mod plot;
pub mod report;
pub mod sensitivity;
pub mod sunway_allreduce_crossover;
pub mod sunway_coll;
pub mod sunway_failed_plane;
pub mod sunway_faults;
pub mod sunway_rdma_bandwidth;
pub mod tianhe_offload;
pub mod torus_shmem;

pub use report::{Fitted, Role, Row, StudyFailure, StudyReport};

use hpcnet_fabric::topology::TopologyError;
use hpcnet_workloads::synthetic::RunError;
use hpcnet_workloads::ScenarioError;

/// Version recorded in every report.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What a study run may depend on besides the study itself.
#[derive(Clone, Debug, Default)]
pub struct Ctx {
    /// Shortened simulations and smaller sizes, for tests and smoke runs: the report is marked
    /// `quick` and its numbers are less precise.
    pub quick: bool,
    /// Scenario overrides (`key.path=value`, as `hpcnet run --set`) applied to the study's
    /// scenario before the study's own sweep overrides: what-if runs. Empty for the published
    /// configuration.
    pub set: Vec<String>,
    /// Run at the paper's own scale where a study has such a mode
    /// ([`Study::has_paper_scale`]; `hpcnet reproduce NAME --paper-scale`): hours of CPU.
    pub paper_scale: bool,
}

impl Ctx {
    /// A context for a quick (or full) run of the published configuration.
    pub fn quick(quick: bool) -> Ctx {
        Ctx {
            quick,
            set: Vec::new(),
            paper_scale: false,
        }
    }

    /// Loads `toml` (the study's embedded scenario) with the context's overrides, then `extra`
    /// (the study's own, which win where both set a key).
    pub(crate) fn load(
        &self,
        toml: &str,
        path: &str,
        name: &str,
        extra: &[String],
    ) -> Result<hpcnet_workloads::Scenario, StudyError> {
        let over: Vec<String> = self.set.iter().chain(extra).cloned().collect();
        Ok(hpcnet_workloads::Scenario::from_str_named(toml, path, name, &over)?)
    }
}

/// A study: a published experiment, rerun on the models and compared.
pub trait Study: Sync {
    /// Registry name, the argument of `hpcnet reproduce`.
    fn name(&self) -> &'static str;
    /// One line saying what is reproduced.
    fn title(&self) -> &'static str;
    /// The scenario the study simulates, as (TOML text, path), if any: `--set` applies to it.
    fn scenario(&self) -> Option<(&'static str, &'static str)>;
    /// The declared calibration: every scenario parameter fitted to a published point that the
    /// study's judged rows depend on (the calibration table of the study's module).
    fn fitted(&self) -> &'static [Fitted];
    /// The report on the models as configured by `ctx`. Use [`run`], which also checks the
    /// overrides and records the declared calibration in the report.
    fn run(&self, ctx: &Ctx) -> Result<StudyReport, StudyError>;
    /// Whether the study has a mode at the paper's own scale ([`Ctx::paper_scale`]).
    fn has_paper_scale(&self) -> bool {
        false
    }
}

/// Runs `study` under `ctx`: checks `ctx.set` against the study's scenario first (one clear
/// error naming the key), runs, and records the fitted-parameter table and the overrides in the
/// report.
pub fn run(study: &dyn Study, ctx: &Ctx) -> Result<StudyReport, StudyError> {
    if ctx.paper_scale && !study.has_paper_scale() {
        return Err(StudyError::Unsupported(format!(
            "study '{}' has no paper-scale mode (--paper-scale: {})",
            study.name(),
            all()
                .iter()
                .filter(|s| s.has_paper_scale())
                .map(|s| s.name())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if !ctx.set.is_empty() {
        let Some((toml, path)) = study.scenario() else {
            return Err(StudyError::Unsupported(format!(
                "study '{}' simulates no scenario, so --set does not apply to it",
                study.name()
            )));
        };
        ctx.load(toml, path, study.name(), &[])?.world()?;
    }
    let mut r = study.run(ctx)?;
    r.fitted = study.fitted().to_vec();
    r.set = ctx.set.clone();
    Ok(r)
}

/// Every study, in the order `hpcnet reproduce --all` runs them.
pub fn all() -> Vec<&'static dyn Study> {
    vec![
        &loggp::LogGp,
        &chpp_crossbar::ChppCrossbar,
        &sunway_rdma_bandwidth::SunwayRdmaBandwidth,
        &chpp_latency::ChppLatency,
        &chpp_bandwidth::ChppBandwidth,
        &chpp_vf_fairness::ChppVfFairness,
        &sunway_coll::BARRIER,
        &sunway_coll::ALLREDUCE,
        &sunway_coll::BCAST,
        &sunway_allreduce_crossover::SunwayAllreduceCrossover,
        &tianhe_offload::TianheOffload,
        &sunway_failed_plane::SunwayFailedPlane,
        &ib_memory::IbMemory,
        &ib_nas::IbNas,
        &torus_shmem::TorusShmem,
        &sunway_faults::SunwayFaults,
    ]
}

/// `f` applied to every item on as many threads as the machine offers (at most one per item);
/// results come back in item order, so a report does not depend on the thread count.
pub(crate) fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    par_map_n(items, threads, f)
}

/// [`par_map`] on at most `threads` threads (at least one); also the command line's pool for
/// sweep points and replications.
pub fn par_map_n<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let threads = threads.max(1).min(items.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                results.lock().expect("no worker panicked")[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .expect("no worker panicked")
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}

/// Labels of a report's calibration rows, in order (test helper shared by the studies).
#[cfg(test)]
pub(crate) fn calibration_labels(r: &StudyReport) -> Vec<&str> {
    r.rows
        .iter()
        .filter(|x| x.role == Role::Calibration)
        .map(|x| x.label.as_str())
        .collect()
}

/// The study called `name`.
pub fn find(name: &str) -> Result<&'static dyn Study, StudyError> {
    let studies = all();
    studies
        .iter()
        .find(|s| s.name() == name)
        .copied()
        .ok_or_else(|| StudyError::Unknown {
            name: name.to_string(),
            known: studies.iter().map(|s| s.name()).collect(),
        })
}

/// Why a study produced no report.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    #[error("unknown study '{name}'; known studies: {}", known.join(", "))]
    Unknown { name: String, known: Vec<&'static str> },
    /// The study's scenario does not load (a bug in the scenario file or an override).
    #[error("{0}")]
    Scenario(#[from] ScenarioError),
    #[error("{0}")]
    Topology(#[from] TopologyError),
    #[error("{0}")]
    Run(#[from] RunError),
    /// The model failed while running the study: deadlock, undrained network.
    #[error("{0}")]
    Model(String),
    /// The study cannot run as asked: an override the study cannot use, an operation the
    /// modified scenario refuses (bad input, not a model failure).
    #[error("{0}")]
    Unsupported(String),
}

/// A benchmark error of a study run: a refused post is an unsupported configuration (bad input),
/// a run that does not finish is a model failure. `what` names the run.
pub(crate) fn p2p_error(what: &str, e: hpcnet_workloads::p2p::P2pError) -> StudyError {
    use hpcnet_workloads::p2p::P2pError;
    match e {
        P2pError::Refused(_) => StudyError::Unsupported(format!("{what}: {e}")),
        P2pError::Stuck(_) => StudyError::Model(format!("{what}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        let names: Vec<_> = all().iter().map(|s| s.name()).collect();
        let mut dedup = names.clone();
        dedup.sort_unstable();
        dedup.dedup();
        assert_eq!(dedup.len(), names.len());
        for n in names {
            assert_eq!(find(n).unwrap().name(), n);
        }
    }

    /// The judged rows (predictions and post-hoc) of a quick run, by label.
    fn judged(study: &dyn Study, set: &[String]) -> Vec<(String, f64)> {
        let ctx = Ctx {
            quick: true,
            paper_scale: false,
            set: set.to_vec(),
        };
        run(study, &ctx)
            .unwrap_or_else(|e| panic!("{} {set:?}: {e}", study.name()))
            .rows
            .into_iter()
            .filter(|r| matches!(r.role, Role::Prediction | Role::PostHoc))
            .map(|r| (r.label, r.simulated))
            .collect()
    }

    /// The simulated value of the row whose label starts with `label`.
    fn value(study: &dyn Study, set: &[&str], label: &str) -> f64 {
        let ctx = Ctx {
            quick: true,
            paper_scale: false,
            set: set.iter().map(|s| s.to_string()).collect(),
        };
        let r = run(study, &ctx).unwrap_or_else(|e| panic!("{} {set:?}: {e}", study.name()));
        r.rows
            .iter()
            .find(|x| x.label.starts_with(label))
            .unwrap_or_else(|| panic!("{}: no row {label}", study.name()))
            .simulated
    }

    #[test]
    fn every_judged_row_has_a_published_value_and_a_tolerance() {
        for s in all() {
            let r = run(s, &Ctx::quick(true)).unwrap();
            assert_eq!(r.fitted, s.fitted(), "{}", s.name());
            for row in &r.rows {
                assert!(
                    ["calibration", "prediction", "post-hoc", "info"].contains(&row.role.name()),
                    "{}: {}",
                    s.name(),
                    row.label
                );
                if row.role != Role::Info {
                    assert!(
                        row.paper.is_some() && row.tolerance.is_some(),
                        "{}: {}",
                        s.name(),
                        row.label
                    );
                }
            }
            // Every declared fitted parameter is a key of the study's scenario.
            for f in s.fitted() {
                let (text, _) = s.scenario().expect("a study with fitted parameters has a scenario");
                let table: toml::Table = text.parse().unwrap();
                let mut at = &toml::Value::Table(table);
                for part in f.key.split('.') {
                    at = at
                        .get(part)
                        .unwrap_or_else(|| panic!("{}: {} not in the scenario", s.name(), f.key));
                }
            }
        }
    }

    #[test]
    fn every_fitted_parameter_moves_a_judged_row() {
        for s in all() {
            let base = judged(s, &[]);
            for f in s.fitted() {
                let (text, _) = s.scenario().unwrap();
                let table: toml::Table = text.parse().unwrap();
                let mut at = &toml::Value::Table(table);
                for part in f.key.split('.') {
                    at = &at[part];
                }
                // Up by half, and if the quick rows happen to sit on a plateau there
                // (a chunk count that does not change), down by half.
                let moves = |factor: f64| {
                    let rhs = sensitivity::scaled(at, factor).unwrap();
                    let moved = judged(s, &[format!("{}={rhs}", f.key)]);
                    base.iter().zip(&moved).any(|(a, b)| a.0 == b.0 && a.1 != b.1)
                };
                assert!(
                    moves(1.5) || moves(0.5),
                    "{}: neither {} × 1.5 nor × 0.5 moves a judged row",
                    s.name(),
                    f.key
                );
            }
        }
    }

    #[test]
    fn set_moves_results_the_expected_way() {
        // Sunway: half the lane rate roughly halves the 1 MB bandwidth.
        let s = find("sunway-rdma-bandwidth").unwrap();
        let l = "RDMAW bandwidth, 1 MB messages";
        let ratio = value(s, &["link.lane_rate=\"14.0625 Gb/s\""], l) / value(s, &[], l);
        assert!((0.45..0.55).contains(&ratio), "{ratio}");
        // cHPP latency: 397 ns more doorbell latency, 397 ns more PUT 1 B latency.
        let s = find("chpp-latency").unwrap();
        let d = value(s, &["nic.host.doorbell_latency=\"794 ns\""], "PUT 1 B") - value(s, &[], "PUT 1 B");
        assert!((d - 0.397).abs() < 1e-6, "{d}");
        // cHPP bandwidth: a host returning 256 B completions lifts the MTU 256 B point above
        // MTU 128 B (no panic for a host setting other than 128 B).
        let s = find("chpp-bandwidth").unwrap();
        let set = ["nic.host.max_payload=\"256 B\""];
        let at128 = value(s, &set, "2 MB PUT at MTU 128 B");
        let at256 = value(s, &set, "2 MB PUT at MTU 256 B, 32 tags (no gain");
        assert!(at256 > 1.05 * at128, "{at128} {at256}");
        // cHPP crossbar: deeper VC buffers raise the 4 × 2 saturation.
        let s = find("chpp-crossbar").unwrap();
        let l = "4 ports × 2 VCs: saturation";
        assert!(value(s, &["router.private_credits=40"], l) > 1.05 * value(s, &[], l));
        // VF fairness: a slower engine completes fewer messages per cycle, so the shares take
        // longer to converge.
        let s = find("chpp-vf-fairness").unwrap();
        let l = "time until every share stays within ±10%";
        assert!(value(s, &["nic.packet_overhead=\"8 ns\""], l) > value(s, &[], l));
        // loggp simulates no scenario: --set is refused, not ignored.
        let e = run(
            find("loggp").unwrap(),
            &Ctx {
                quick: true,
                paper_scale: false,
                set: vec!["link.lanes=2".into()],
            },
        );
        assert!(matches!(e, Err(StudyError::Unsupported(_))), "{:?}", e.err());
    }

    #[test]
    fn bad_overrides_are_errors_not_panics() {
        let ctx = |set: &str| Ctx {
            quick: true,
            paper_scale: false,
            set: vec![set.to_string()],
        };
        // An unknown key names the key.
        let e = run(find("chpp-latency").unwrap(), &ctx("nic.no_such_key=1"))
            .err()
            .unwrap();
        assert!(
            matches!(e, StudyError::Scenario(_)) && e.to_string().contains("no_such_key"),
            "{e}"
        );
        // A NAP buffer smaller than the study's NAPs: the post is refused.
        let e = run(find("chpp-latency").unwrap(), &ctx("nic.nap_buffer=\"1 KiB\""))
            .err()
            .unwrap();
        assert!(matches!(e, StudyError::Unsupported(_)), "{e}");
        let e = run(find("chpp-bandwidth").unwrap(), &ctx("nic.nap_buffer=\"1 KiB\""))
            .err()
            .unwrap();
        assert!(matches!(e, StudyError::Unsupported(_)), "{e}");
    }

    #[test]
    fn unknown_study_lists_the_known_ones() {
        let err = find("nope").err().expect("unknown");
        assert!(matches!(err, StudyError::Unknown { .. }));
        let names: Vec<_> = all().iter().map(|s| s.name()).collect();
        assert!(names.len() >= 9 && names.contains(&"sunway-bcast"), "{names:?}");
        assert_eq!(
            err.to_string(),
            format!("unknown study 'nope'; known studies: {}", names.join(", "))
        );
    }
}
