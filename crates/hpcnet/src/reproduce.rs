//! `hpcnet reproduce`: rerun the published experiments of the seed papers (the studies of
//! `hpcnet-studies`) and print paper vs simulated with verdicts.
//!
//! `--set key=value` reruns one study on a modified scenario (what-if), `--sensitivity` scales
//! each fitted parameter by ±10 % and prints how the judged rows move.
//!
//! Exit codes: 0 every judged row (prediction or post-hoc) within tolerance, 1 a judged row
//! failed or a study could not run because the model failed (deadlock, conservation), 2 unknown
//! study name or bad input (including a `--set` the study's scenario refuses).

use crate::Failure;
use hpcnet_studies::{all, find, Ctx, StudyError, StudyFailure, StudyReport};
use hpcnet_workloads::synthetic::RunError;
use std::path::{Path, PathBuf};

/// What `hpcnet reproduce` was asked to do.
pub struct Args {
    pub name: Option<String>,
    pub all: bool,
    pub list: bool,
    pub json: bool,
    pub out: Option<PathBuf>,
    pub quick: bool,
    pub paper_scale: bool,
    pub set: Vec<String>,
    pub sensitivity: bool,
}

/// The perturbation of `--sensitivity`: ±10 %.
const SENSITIVITY: f64 = 0.10;

/// Name of the combined report files written by `--all` (`.json`, `.html`).
const COMBINED: &str = "reproduce";

pub fn reproduce(a: &Args) -> Result<(), Failure> {
    if a.list {
        for s in all() {
            outln!("{:<24} {}", s.name(), s.title());
        }
        return Ok(());
    }
    let ctx = Ctx {
        quick: a.quick,
        set: a.set.clone(),
        paper_scale: a.paper_scale,
    };
    match &a.name {
        Some(name) if a.sensitivity => sensitivity(name, &ctx),
        Some(name) if !a.all => one(name, &ctx, a),
        _ => every(&ctx, a),
    }
}

fn failure(e: StudyError) -> Failure {
    match e {
        StudyError::Unknown { .. }
        | StudyError::Scenario(_)
        | StudyError::Topology(_)
        | StudyError::Unsupported(_)
        | StudyError::Run(RunError::Config(_)) => Failure::input(e),
        StudyError::Run(RunError::Conservation(_)) | StudyError::Model(_) => Failure::model(e),
    }
}

fn write(path: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text).map_err(|e| Failure::input(format!("{}: {e}", path.display())))
}

/// Writes `DIR/<study>.svg` when the study has curves and records it in the report; returns the
/// SVG text.
fn write_plot(report: &mut StudyReport, dir: &Path) -> Result<Option<String>, Failure> {
    if report.figures.is_empty() {
        return Ok(None);
    }
    let file = dir.join(format!("{}.svg", report.study));
    let svg = hpcnet_studies::plot::svg(&report.figures)
        .map_err(|e| Failure::input(format!("{}: cannot draw the plot: {e}", file.display())))?;
    write(&file, &svg)?;
    report.plot = Some(file);
    Ok(Some(svg))
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).expect("report serialises")
}

fn verdict(r: &StudyReport) -> Result<(), Failure> {
    if r.pass {
        return Ok(());
    }
    let c = r.counts();
    Err(Failure::model(format!(
        "study '{}' failed: {} of {} predictions and {} of {} post-hoc rows outside tolerance",
        r.study,
        c.predictions - c.predictions_passed,
        c.predictions,
        c.post_hoc - c.post_hoc_passed,
        c.post_hoc
    )))
}

fn sensitivity(name: &str, ctx: &Ctx) -> Result<(), Failure> {
    let study = find(name).map_err(failure)?;
    let s = hpcnet_studies::sensitivity::sensitivity(study, ctx, SENSITIVITY).map_err(failure)?;
    outln!("{}", s.to_text().trim_end());
    Ok(())
}

fn one(name: &str, ctx: &Ctx, a: &Args) -> Result<(), Failure> {
    let study = find(name).map_err(failure)?;
    if let Some(dir) = &a.out {
        crate::check_writable_dir(dir, "--out")?;
    }
    let mut report = hpcnet_studies::run(study, ctx).map_err(failure)?;
    if let Some(dir) = &a.out {
        write_plot(&mut report, dir)?;
        write(&dir.join(format!("{}.json", report.study)), &pretty(&report.to_json()))?;
    }
    if a.json {
        outln!("{}", pretty(&report.to_json()));
    } else {
        outln!("{}", report.to_text().trim_end());
    }
    verdict(&report)
}

fn every(ctx: &Ctx, a: &Args) -> Result<(), Failure> {
    let dir = a.out.clone().unwrap_or_else(|| PathBuf::from("out"));
    crate::check_writable_dir(&dir, "--out")?;
    let mut reports = Vec::new();
    let mut svgs = Vec::new();
    let mut failures = Vec::new();
    for study in all() {
        match hpcnet_studies::run(study, ctx) {
            Ok(mut r) => {
                svgs.push(write_plot(&mut r, &dir)?);
                reports.push(r);
            }
            Err(e) => failures.push(StudyFailure {
                study: study.name().to_string(),
                error: e.to_string(),
            }),
        }
    }
    let json_file = dir.join(format!("{COMBINED}.json"));
    let html_file = dir.join(format!("{COMBINED}.html"));
    let combined = hpcnet_studies::report::combined_json(&reports, &failures);
    write(&json_file, &pretty(&combined))?;
    write(
        &html_file,
        &hpcnet_studies::report::html_page(&reports, &svgs, &failures),
    )?;
    if a.json {
        outln!("{}", pretty(&combined));
    } else {
        for r in &reports {
            outln!("{}\n", r.to_text().trim_end());
        }
        outln!("summary");
        for r in &reports {
            outln!("  {:<24} {}", r.study, r.summary());
        }
        for f in &failures {
            outln!("  {:<24} ERROR {}", f.study, f.error);
        }
        outln!("report: {} and {}", json_file.display(), html_file.display());
    }
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| !r.pass)
        .map(|r| r.study.as_str())
        .chain(failures.iter().map(|f| f.study.as_str()))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure::model(format!("studies not reproduced: {}", failed.join(", "))))
    }
}
