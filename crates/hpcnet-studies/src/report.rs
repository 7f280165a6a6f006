//! Study reports: rows of published vs simulated values, each with a role, a tolerance and a
//! verdict, and their renderings (aligned text, JSON, one self-contained HTML page).
//!
//! The relative error is signed: `(simulated − paper) / |paper|`. A row passes when
//! `|rel_error| ≤ tolerance`. Prediction and post-hoc rows decide a study's verdict (a study
//! fails when either misses its tolerance) but are counted apart: only predictions are evidence
//! that the model foretells the paper. Calibration rows show how well the fitted points are
//! matched; information rows carry no verdict at all.

use crate::plot::Figure;
use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::PathBuf;

/// What a row is for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// A published point a model parameter was fitted to: shown, not judged.
    Calibration,
    /// A published point the model was not fitted to, with every reading, parameter and
    /// mechanism it depends on fixed before the row was compared: the study is judged on these.
    Prediction,
    /// A published point judged like a prediction, but whose reading, parameter or mechanism was
    /// chosen with the published value known to fail otherwise: shown and judged, never counted
    /// as a prediction.
    PostHoc,
    /// Context (configurations without a published value, sensitivity runs, other readings).
    Info,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Calibration => "calibration",
            Role::Prediction => "prediction",
            Role::PostHoc => "post-hoc",
            Role::Info => "info",
        }
    }
}

/// Unit of rows that compare a yes/no claim (1 = yes, 0 = no).
pub const YES_NO: &str = "yes/no";

/// One comparison: a published value (if any) against the simulated one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub label: String,
    /// The published value; `None` where the paper gives none.
    pub paper: Option<f64>,
    /// What the model produced.
    pub simulated: f64,
    pub unit: String,
    /// `(simulated − paper) / |paper|`; `None` without a paper value, or when the paper value is
    /// 0 and the simulated one is not.
    pub rel_error: Option<f64>,
    pub role: Role,
    /// Largest accepted `|rel_error|` (a fraction: 0.1 = 10 %).
    pub tolerance: Option<f64>,
    /// `|rel_error| ≤ tolerance`, when both a paper value and a tolerance exist (never for info rows).
    pub pass: Option<bool>,
    /// Free text shown under the table (not part of the row's JSON keys).
    #[serde(skip)]
    pub note: Option<String>,
}

/// Signed relative error of `simulated` against `paper`.
pub fn rel_error(paper: f64, simulated: f64) -> Option<f64> {
    if paper == 0.0 {
        (simulated == 0.0).then_some(0.0)
    } else {
        Some((simulated - paper) / paper.abs())
    }
}

impl Row {
    /// A row of any role; computes the relative error and the verdict. Info rows never get a
    /// tolerance or a verdict.
    pub fn new(
        label: impl Into<String>,
        paper: Option<f64>,
        simulated: f64,
        unit: impl Into<String>,
        role: Role,
        tolerance: Option<f64>,
    ) -> Row {
        let rel = paper.and_then(|p| rel_error(p, simulated));
        let tolerance = if role == Role::Info { None } else { tolerance };
        let pass = match (paper, tolerance) {
            // A tiny slack so that a value exactly at the tolerance is not lost to rounding.
            (Some(_), Some(t)) => Some(rel.is_some_and(|e| e.abs() <= t + 1e-12)),
            _ => None,
        };
        Row {
            label: label.into(),
            paper,
            simulated,
            unit: unit.into(),
            rel_error: rel,
            role,
            tolerance,
            pass,
            note: None,
        }
    }

    /// A published point the model was not fitted to, judged with `tolerance`.
    pub fn prediction(label: impl Into<String>, paper: f64, simulated: f64, unit: &str, tolerance: f64) -> Row {
        Row::new(label, Some(paper), simulated, unit, Role::Prediction, Some(tolerance))
    }

    /// A published point a parameter was fitted to; `tolerance` says how close the fit must be
    /// to be shown as "fit" rather than "off".
    pub fn calibration(label: impl Into<String>, paper: f64, simulated: f64, unit: &str, tolerance: f64) -> Row {
        Row::new(label, Some(paper), simulated, unit, Role::Calibration, Some(tolerance))
    }

    /// A published point judged with `tolerance` whose reading or parameter was chosen with the
    /// published value known (see [`Role::PostHoc`]).
    pub fn post_hoc(label: impl Into<String>, paper: f64, simulated: f64, unit: &str, tolerance: f64) -> Row {
        Row::new(label, Some(paper), simulated, unit, Role::PostHoc, Some(tolerance))
    }

    /// This row with another role (the tolerance and verdict are recomputed).
    pub fn with_role(self, role: Role) -> Row {
        let note = self.note;
        let mut r = Row::new(self.label, self.paper, self.simulated, self.unit, role, self.tolerance);
        r.note = note;
        r
    }

    /// Context without a verdict.
    pub fn info(label: impl Into<String>, paper: Option<f64>, simulated: f64, unit: &str) -> Row {
        Row::new(label, paper, simulated, unit, Role::Info, None)
    }

    /// A published yes/no claim (e.g. "the hypercube has the lowest latency") against what the
    /// model shows; a prediction that passes only when both agree.
    pub fn claim(label: impl Into<String>, paper: bool, simulated: bool) -> Row {
        let b = |x: bool| if x { 1.0 } else { 0.0 };
        Row::new(label, Some(b(paper)), b(simulated), YES_NO, Role::Prediction, Some(0.0))
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Row {
        self.note = Some(note.into());
        self
    }

    /// The row as its JSON object: exactly the eight documented keys.
    pub fn to_json(&self) -> Value {
        json!({
            "label": self.label,
            "paper": self.paper,
            "simulated": self.simulated,
            "unit": self.unit,
            "rel_error": self.rel_error,
            "role": self.role,
            "tolerance": self.tolerance,
            "pass": self.pass,
        })
    }
}

/// A model parameter fitted to a published point: the scenario key (as `--set` names it) and the
/// point, and the study whose calibration row shows the fit.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fitted {
    /// Scenario key, e.g. `nic.host.doorbell_latency`.
    pub key: &'static str,
    /// The published point, e.g. `PUT 1 B latency = 1.762 µs (spec 02 latency table)`.
    pub point: &'static str,
    /// The study whose calibration row shows this point.
    pub study: &'static str,
}

/// The outcome of one study.
#[derive(Clone, Debug)]
pub struct StudyReport {
    /// Registry name, e.g. `loggp`.
    pub study: String,
    pub title: String,
    /// Where the published numbers come from: spec file and section.
    pub source: String,
    /// Every prediction row with a verdict passes.
    pub pass: bool,
    pub rows: Vec<Row>,
    /// Choices made where the paper is silent, ambiguous or inconsistent, and the
    /// inconsistencies themselves.
    pub discrepancies: Vec<String>,
    /// Curves to draw, if the study has any.
    pub figures: Vec<Figure>,
    /// The study's declared fitted parameters ([`crate::Study::fitted`]).
    pub fitted: Vec<Fitted>,
    /// Scenario overrides the study ran with (`hpcnet reproduce NAME --set`): empty for the
    /// published configuration.
    pub set: Vec<String>,
    /// Where the SVG of `figures` was written (set by whoever writes it).
    pub plot: Option<PathBuf>,
    /// Seed of the scenario runs, for studies that simulate.
    pub seed: Option<u64>,
    /// Produced with shortened runs ([`crate::Ctx::quick`]): not a reproduction.
    pub quick: bool,
}

/// Whether every judged row (prediction or post-hoc) that has a verdict passes.
pub fn verdict(rows: &[Row]) -> bool {
    rows.iter()
        .filter(|r| matches!(r.role, Role::Prediction | Role::PostHoc))
        .all(|r| r.pass != Some(false))
}

/// How many rows of each role a report has, and how many of the judged ones pass.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Prediction rows with a verdict, and how many pass.
    pub predictions: usize,
    pub predictions_passed: usize,
    /// Post-hoc rows with a verdict, and how many pass.
    pub post_hoc: usize,
    pub post_hoc_passed: usize,
    /// Calibration rows.
    pub calibration: usize,
}

impl StudyReport {
    pub fn new(
        study: &str,
        title: &str,
        source: &str,
        rows: Vec<Row>,
        discrepancies: Vec<String>,
        quick: bool,
    ) -> StudyReport {
        StudyReport {
            study: study.to_string(),
            title: title.to_string(),
            source: source.to_string(),
            pass: verdict(&rows),
            rows,
            discrepancies,
            figures: Vec::new(),
            fitted: Vec::new(),
            set: Vec::new(),
            plot: None,
            seed: None,
            quick,
        }
    }

    /// (passed, judged) prediction rows.
    pub fn prediction_count(&self) -> (usize, usize) {
        let c = self.counts();
        (c.predictions_passed, c.predictions)
    }

    /// Rows per role, and the judged ones that pass.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for r in &self.rows {
            match (r.role, r.pass) {
                (Role::Prediction, Some(p)) => {
                    c.predictions += 1;
                    c.predictions_passed += usize::from(p);
                }
                (Role::PostHoc, Some(p)) => {
                    c.post_hoc += 1;
                    c.post_hoc_passed += usize::from(p);
                }
                (Role::Calibration, _) => c.calibration += 1,
                _ => {}
            }
        }
        c
    }

    /// `PASS` (every judged row within tolerance), `FAIL`, or `NO VERDICT` (nothing judged).
    pub fn verdict_word(&self) -> &'static str {
        let c = self.counts();
        if !self.pass {
            "FAIL"
        } else if c.predictions + c.post_hoc == 0 {
            "NO VERDICT"
        } else {
            "PASS"
        }
    }

    /// The counts in words, each role with how many of its rows are within tolerance:
    /// `6 of 6 predictions within tolerance; 3 of 4 post-hoc rows within tolerance; 5
    /// calibration points`.
    pub fn counts_text(&self) -> String {
        let c = self.counts();
        let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        format!(
            "{} of {} within tolerance; {} of {} within tolerance; {}",
            c.predictions_passed,
            plural(c.predictions, "prediction", "predictions"),
            c.post_hoc_passed,
            plural(c.post_hoc, "post-hoc row", "post-hoc rows"),
            plural(c.calibration, "calibration point", "calibration points")
        )
    }

    /// The study's summary line: verdict word, a colon and [`StudyReport::counts_text`].
    pub fn summary(&self) -> String {
        format!("{}: {}", self.verdict_word(), self.counts_text())
    }

    /// The JSON document: `study`, `pass`, `rows` (eight keys each), plus `title`, `source`,
    /// `discrepancies`, `notes` (label → note), `version`, and `seed`, `plot`, `quick` when set.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "study": self.study,
            "pass": self.pass,
            "rows": self.rows.iter().map(Row::to_json).collect::<Vec<_>>(),
            "title": self.title,
            "source": self.source,
            "discrepancies": self.discrepancies,
            "summary": self.summary(),
            "version": crate::VERSION,
        });
        let o = v.as_object_mut().expect("object");
        let notes: serde_json::Map<String, Value> = self
            .rows
            .iter()
            .filter_map(|r| r.note.as_ref().map(|n| (r.label.clone(), Value::from(n.as_str()))))
            .collect();
        if !notes.is_empty() {
            o.insert("notes".into(), Value::Object(notes));
        }
        if let Some(s) = self.seed {
            o.insert("seed".into(), s.into());
        }
        if !self.fitted.is_empty() {
            o.insert("fitted".into(), json!(self.fitted));
        }
        if !self.set.is_empty() {
            o.insert("set".into(), json!(self.set));
        }
        if let Some(p) = &self.plot {
            o.insert("plot".into(), p.display().to_string().into());
        }
        if self.quick {
            o.insert("quick".into(), true.into());
        }
        v
    }

    /// Aligned text: rows grouped as calibration, predictions, information; then notes,
    /// discrepancies and a final `PASS`/`FAIL` line.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{} — {}", self.study, self.title);
        let _ = writeln!(out, "source: {}", self.source);
        if let Some(s) = self.seed {
            let _ = writeln!(out, "seed: {s}");
        }
        if self.quick {
            let _ = writeln!(out, "QUICK RUN: shortened simulations, not a reproduction");
        }
        if !self.set.is_empty() {
            let _ = writeln!(
                out,
                "WHAT-IF: scenario changed with --set {}; not the published configuration",
                self.set.join(" --set ")
            );
        }
        if !self.fitted.is_empty() {
            let _ = writeln!(out, "\nfitted parameters (scenario key <- published point)");
            let w = self.fitted.iter().map(|f| f.key.chars().count()).max().unwrap_or(0);
            for f in &self.fitted {
                let _ = writeln!(out, "  {:<w$}  <- {} ({})", f.key, f.point, f.study);
            }
        }
        let cells: Vec<[String; 8]> = self.rows.iter().map(cells).collect();
        let headers = ["label", "paper", "simulated", "unit", "error", "role", "tol", "verdict"];
        let mut width = headers.map(|h| h.chars().count());
        for c in &cells {
            for (w, s) in width.iter_mut().zip(c) {
                *w = (*w).max(s.chars().count());
            }
        }
        let line = |c: &[String; 8]| -> String {
            let mut l = String::from("  ");
            for (i, (s, w)) in c.iter().zip(width).enumerate() {
                let pad = w - s.chars().count();
                // Text columns left-aligned, numbers right-aligned.
                if matches!(i, 1 | 2 | 4 | 6) {
                    l.push_str(&" ".repeat(pad));
                    l.push_str(s);
                } else {
                    l.push_str(s);
                    l.push_str(&" ".repeat(pad));
                }
                l.push_str("  ");
            }
            l.trim_end().to_string()
        };
        let groups = [
            (
                Role::Calibration,
                "calibration (parameters fitted to these published points; not judged)",
            ),
            (
                Role::Prediction,
                "predictions (not fitted; reading fixed before comparing; judged against the tolerance)",
            ),
            (
                Role::PostHoc,
                "post-hoc (reading or parameter chosen knowing the published value; judged, not counted as predictions)",
            ),
            (Role::Info, "information (no verdict)"),
        ];
        for (role, heading) in groups {
            if !self.rows.iter().any(|r| r.role == role) {
                continue;
            }
            let _ = writeln!(out, "\n{heading}");
            let _ = writeln!(out, "{}", line(&headers.map(String::from)));
            for (r, c) in self.rows.iter().zip(&cells) {
                if r.role == role {
                    let _ = writeln!(out, "{}", line(c));
                }
            }
        }
        let notes: Vec<_> = self
            .rows
            .iter()
            .filter_map(|r| r.note.as_ref().map(|n| (r, n)))
            .collect();
        if !notes.is_empty() {
            let _ = writeln!(out, "\nnotes");
            for (r, n) in notes {
                let _ = writeln!(out, "  {}: {n}", r.label);
            }
        }
        if !self.discrepancies.is_empty() {
            let _ = writeln!(out, "\ndiscrepancies and choices");
            for d in &self.discrepancies {
                let _ = writeln!(out, "  - {d}");
            }
        }
        if let Some(p) = &self.plot {
            let _ = writeln!(out, "\nplot: {}", p.display());
        }
        let _ = writeln!(out, "\n{}", self.summary());
        out
    }
}

/// Formats a value with 5 significant digits, without trailing zeros.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    if x == 0.0 {
        return "0".into();
    }
    let mag = x.abs().log10().floor() as i32;
    let decimals = (4 - mag).clamp(0, 9) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn yes_no(x: f64) -> String {
    if x != 0.0 { "yes" } else { "no" }.into()
}

/// The eight display cells of a row: label, paper, simulated, unit, error, role, tol, verdict.
fn cells(r: &Row) -> [String; 8] {
    let boolean = r.unit == YES_NO;
    let value = |x: f64| if boolean { yes_no(x) } else { fmt_num(x) };
    let paper = r.paper.map_or("—".into(), value);
    let error = match r.rel_error {
        Some(_) if boolean => "—".into(),
        Some(e) => format!("{:+.1}%", 100.0 * e),
        None => "—".into(),
    };
    let tol = match r.tolerance {
        Some(_) if boolean => "exact".into(),
        Some(t) => format!("±{}%", fmt_num(100.0 * t)),
        None => "—".into(),
    };
    let verdict = match (r.role, r.pass) {
        (Role::Prediction | Role::PostHoc, Some(true)) => "pass",
        (Role::Prediction | Role::PostHoc, Some(false)) => "FAIL",
        (Role::Calibration, Some(true)) => "fit",
        (Role::Calibration, Some(false)) => "off",
        _ => "",
    };
    let unit = if boolean { "" } else { r.unit.as_str() };
    [
        r.label.clone(),
        paper,
        value(r.simulated),
        unit.to_string(),
        error,
        r.role.name().to_string(),
        tol,
        verdict.to_string(),
    ]
}

/// A study that could not produce a report (scenario error, deadlock...).
#[derive(Clone, Debug)]
pub struct StudyFailure {
    pub study: String,
    pub error: String,
}

/// The combined report of several studies: `{"version", "pass", "studies": [...], "errors": [...]}`.
/// `pass` is false if any study failed a prediction or could not run.
pub fn combined_json(reports: &[StudyReport], failures: &[StudyFailure]) -> Value {
    json!({
        "version": crate::VERSION,
        "pass": failures.is_empty() && reports.iter().all(|r| r.pass),
        "studies": reports.iter().map(StudyReport::to_json).collect::<Vec<_>>(),
        "errors": failures.iter().map(|f| json!({"study": f.study, "error": f.error})).collect::<Vec<_>>(),
    })
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            _ => o.push(c),
        }
    }
    o
}

/// One self-contained HTML page: a summary of verdicts, then each study's table, notes,
/// discrepancies and plot (`svgs[i]` is the SVG text of `reports[i]`, inlined).
pub fn html_page(reports: &[StudyReport], svgs: &[Option<String>], failures: &[StudyFailure]) -> String {
    let mut h = String::new();
    let all_pass = failures.is_empty() && reports.iter().all(|r| r.pass);
    let _ = write!(
        h,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>hpcnet reproduce</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 80em; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1em; }}
th, td {{ border: 1px solid #ccc; padding: 0.2em 0.6em; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
tr.calibration td {{ background: #eef3fb; }}
tr.post-hoc td {{ background: #fbf3e6; }}
tr.info td {{ color: #555; }}
.pass {{ color: #17702a; font-weight: bold; }}
.fail {{ color: #b00020; font-weight: bold; }}
</style></head><body>
<h1>hpcnet reproduce — {verdict}</h1>
<p>hpcnet {version}. Calibration rows (blue) are published points a parameter was fitted to;
predictions (not fitted, reading fixed before comparing) are judged against their tolerance;
post-hoc rows (amber) are judged the same way but their reading or parameter was chosen knowing
the published value, so they are not counted as predictions; info rows carry no verdict. A study
passes when every prediction and post-hoc row is within its tolerance. Relative error =
(simulated − paper) / |paper|.</p>
<table><tr><th>study</th><th>title</th><th>predictions passed</th><th>post-hoc within tolerance</th><th>calibration points</th><th>verdict</th></tr>
"#,
        verdict = if all_pass {
            "<span class=\"pass\">PASS</span>"
        } else {
            "<span class=\"fail\">FAIL</span>"
        },
        version = crate::VERSION,
    );
    for r in reports {
        let c = r.counts();
        let _ = writeln!(
            h,
            "<tr><td><a href=\"#{id}\">{id}</a></td><td>{}</td><td class=\"num\">{} / {}</td>\
             <td class=\"num\">{} / {}</td><td class=\"num\">{}</td><td><span class=\"{}\">{}</span></td></tr>",
            esc(&r.title),
            c.predictions_passed,
            c.predictions,
            c.post_hoc_passed,
            c.post_hoc,
            c.calibration,
            if r.pass { "pass" } else { "fail" },
            r.verdict_word(),
            id = esc(&r.study),
        );
    }
    for f in failures {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td colspan=\"4\">could not run: {}</td><td><span class=\"fail\">ERROR</span></td></tr>",
            esc(&f.study),
            esc(&f.error)
        );
    }
    h.push_str("</table>\n");
    for (i, r) in reports.iter().enumerate() {
        let _ = writeln!(
            h,
            "<h2 id=\"{id}\">{id} — {}</h2>\n<p>Source: {}{}{}</p>",
            esc(&r.title),
            esc(&r.source),
            r.seed.map(|s| format!("; seed {s}")).unwrap_or_default(),
            if r.quick {
                "; <b>quick run (shortened simulations), not a reproduction</b>"
            } else {
                ""
            },
            id = esc(&r.study),
        );
        let _ = writeln!(h, "<p><b>{}</b></p>", esc(&r.summary()));
        if !r.set.is_empty() {
            let _ = writeln!(
                h,
                "<p><b>What-if: scenario changed with --set {}</b></p>",
                esc(&r.set.join(" --set "))
            );
        }
        if !r.fitted.is_empty() {
            h.push_str("<table><tr><th>fitted parameter</th><th>published point</th><th>shown in</th></tr>\n");
            for f in &r.fitted {
                let _ = writeln!(
                    h,
                    "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                    esc(f.key),
                    esc(f.point),
                    esc(f.study)
                );
            }
            h.push_str("</table>\n");
        }
        h.push_str(
            "<table><tr><th>label</th><th>paper</th><th>simulated</th><th>unit</th><th>error</th>\
             <th>role</th><th>tolerance</th><th>verdict</th></tr>\n",
        );
        for row in &r.rows {
            let c = cells(row);
            let verdict = match c[7].as_str() {
                "pass" | "fit" => format!("<span class=\"pass\">{}</span>", c[7]),
                "FAIL" | "off" => format!("<span class=\"fail\">{}</span>", c[7]),
                _ => String::new(),
            };
            let _ = writeln!(
                h,
                "<tr class=\"{}\"><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td>\
                 <td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{verdict}</td></tr>",
                row.role.name(),
                esc(&c[0]),
                esc(&c[1]),
                esc(&c[2]),
                esc(&c[3]),
                esc(&c[4]),
                esc(&c[5]),
                esc(&c[6]),
            );
        }
        h.push_str("</table>\n");
        let notes: Vec<_> = r.rows.iter().filter(|x| x.note.is_some()).collect();
        if !notes.is_empty() {
            h.push_str("<h3>Notes</h3>\n<ul>\n");
            for x in notes {
                let _ = writeln!(
                    h,
                    "<li><i>{}</i>: {}</li>",
                    esc(&x.label),
                    esc(x.note.as_deref().unwrap_or(""))
                );
            }
            h.push_str("</ul>\n");
        }
        if !r.discrepancies.is_empty() {
            h.push_str("<h3>Discrepancies and choices</h3>\n<ul>\n");
            for d in &r.discrepancies {
                let _ = writeln!(h, "<li>{}</li>", esc(d));
            }
            h.push_str("</ul>\n");
        }
        if let Some(Some(svg)) = svgs.get(i) {
            // Inline the SVG (drop its XML declaration, if any) so the page stands alone.
            let body = svg.find("<svg").map_or(svg.as_str(), |at| &svg[at..]);
            let _ = writeln!(h, "<div>{body}</div>");
        }
    }
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rel_error_and_verdicts() {
        let r = Row::prediction("x", 2.0, 2.1, "GB/s", 0.1);
        assert!((r.rel_error.unwrap() - 0.05).abs() < 1e-12);
        assert_eq!(r.pass, Some(true));
        let r = Row::prediction("x", 2.0, 1.7, "GB/s", 0.1);
        assert!((r.rel_error.unwrap() + 0.15).abs() < 1e-12);
        assert_eq!(r.pass, Some(false));
        // Exactly at the tolerance passes.
        assert_eq!(Row::prediction("x", 4.0, 4.4, "", 0.1).pass, Some(true));
        // Negative paper values: error relative to the magnitude.
        assert!((Row::prediction("x", -2.0, -1.0, "", 1.0).rel_error.unwrap() - 0.5).abs() < 1e-12);
        // Paper value 0: only an exact match has a relative error.
        assert_eq!(rel_error(0.0, 0.0), Some(0.0));
        assert_eq!(rel_error(0.0, 1.0), None);
        assert_eq!(Row::prediction("x", 0.0, 1.0, "", 0.5).pass, Some(false));
        // Info rows never get a tolerance or a verdict, even when asked.
        let i = Row::new("x", Some(1.0), 3.0, "", Role::Info, Some(0.1));
        assert_eq!((i.tolerance, i.pass), (None, None));
        assert!((i.rel_error.unwrap() - 2.0).abs() < 1e-12);
        assert_eq!(Row::info("x", None, 3.0, "").rel_error, None);
        // Claims.
        assert_eq!(Row::claim("c", true, true).pass, Some(true));
        assert_eq!(Row::claim("c", true, false).pass, Some(false));
        assert_eq!(Row::claim("c", false, false).pass, Some(true));
    }

    #[test]
    fn judged_rows_decide_the_study_and_are_counted_apart() {
        let rows = vec![
            Row::calibration("c", 1.0, 2.0, "", 0.01),
            Row::info("i", Some(1.0), 5.0, ""),
            Row::prediction("p", 1.0, 1.01, "", 0.02),
        ];
        let r = StudyReport::new("s", "t", "spec", rows.clone(), vec![], false);
        assert!(r.pass);
        assert_eq!(r.prediction_count(), (1, 1));
        let mut bad = rows;
        bad.push(Row::prediction("q", 1.0, 2.0, "", 0.02));
        let r = StudyReport::new("s", "t", "spec", bad, vec![], false);
        assert!(!r.pass);
        assert_eq!(r.prediction_count(), (1, 2));
        assert!(r.to_text().trim_end().ends_with(
            "FAIL: 1 of 2 predictions within tolerance; 0 of 0 post-hoc rows within tolerance; 1 calibration point"
        ));
        // Post-hoc rows are judged (a miss fails the study) but counted apart.
        let rows = vec![
            Row::prediction("p", 1.0, 1.01, "", 0.02),
            Row::post_hoc("h", 1.0, 1.01, "", 0.02),
            Row::post_hoc("g", 1.0, 1.5, "", 0.02),
            Row::claim("c", true, true).with_role(Role::PostHoc),
        ];
        let r = StudyReport::new("s", "t", "spec", rows, vec![], false);
        assert!(!r.pass);
        assert_eq!(r.prediction_count(), (1, 1));
        assert_eq!(
            r.summary(),
            "FAIL: 1 of 1 prediction within tolerance; 2 of 3 post-hoc rows within tolerance; 0 calibration points"
        );
        let t = r.to_text();
        assert!(t.contains("post-hoc (reading or parameter chosen"), "{t}");
        assert_eq!(t.lines().filter(|l| l.contains("  post-hoc  ")).count(), 3, "{t}");
        // Nothing judged: no verdict.
        let r = StudyReport::new("s", "t", "spec", vec![Row::info("i", None, 1.0, "")], vec![], false);
        assert!(r.pass);
        assert_eq!(r.verdict_word(), "NO VERDICT");
    }

    #[test]
    fn json_has_exactly_the_documented_keys() {
        let rows = vec![
            Row::prediction("p", 2.6, 2.5, "GB/s", 0.1).with_note("why"),
            Row::info("i", None, 1.0, "GB/s"),
        ];
        let mut r = StudyReport::new("s", "t", "spec 02", rows, vec!["choice".into()], false);
        r.seed = Some(7);
        let v = r.to_json();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            [
                "discrepancies",
                "notes",
                "pass",
                "rows",
                "seed",
                "source",
                "study",
                "summary",
                "title",
                "version"
            ]
        );
        for row in v["rows"].as_array().unwrap() {
            let mut k: Vec<&str> = row.as_object().unwrap().keys().map(String::as_str).collect();
            k.sort_unstable();
            assert_eq!(
                k,
                [
                    "label",
                    "paper",
                    "pass",
                    "rel_error",
                    "role",
                    "simulated",
                    "tolerance",
                    "unit"
                ]
            );
        }
        assert_eq!(v["rows"][0]["role"], "prediction");
        assert_eq!(v["rows"][1]["paper"], Value::Null);
        assert_eq!(v["rows"][1]["pass"], Value::Null);
        assert_eq!(v["notes"]["p"], "why");
        assert_eq!(v["pass"], true);
    }

    #[test]
    fn text_table_is_aligned_and_grouped() {
        let rows = vec![
            Row::prediction("long label here", 2.6, 2.5, "GB/s", 0.1),
            Row::calibration("c", 3.2, 3.2, "GB/s", 0.02),
            Row::claim("claim", true, true),
        ];
        let t = StudyReport::new("s", "t", "spec", rows, vec![], false).to_text();
        let cal = t.find("calibration (").unwrap();
        let pred = t.find("predictions (").unwrap();
        assert!(cal < pred, "{t}");
        let lines: Vec<&str> = t.lines().filter(|l| l.contains("GB/s")).collect();
        assert_eq!(lines.len(), 2, "{t}");
        assert!(t.contains("-3.8%"), "{t}");
        assert!(t.contains("±10%"), "{t}");
        assert!(t.contains("exact"), "{t}");
        assert!(
            t.trim_end().ends_with(
                "PASS: 2 of 2 predictions within tolerance; 0 of 0 post-hoc rows within tolerance; 1 calibration point"
            ),
            "{t}"
        );
    }

    #[test]
    fn numbers_keep_five_significant_digits() {
        assert_eq!(fmt_num(3.0), "3");
        assert_eq!(fmt_num(5.25), "5.25");
        assert_eq!(fmt_num(1399.75), "1399.8");
        assert_eq!(fmt_num(0.65), "0.65");
        assert_eq!(fmt_num(2.62624), "2.6262");
        assert_eq!(fmt_num(123456.0), "123456");
        assert_eq!(fmt_num(-0.5), "-0.5");
    }

    #[test]
    fn html_escapes_and_inlines_svg() {
        let r = StudyReport::new(
            "s",
            "a < b",
            "spec",
            vec![Row::info("x&y", None, 1.0, "")],
            vec![],
            false,
        );
        let page = html_page(
            &[r],
            &[Some("<?xml version=\"1.0\"?>\n<svg>curve</svg>".into())],
            &[StudyFailure {
                study: "z".into(),
                error: "boom".into(),
            }],
        );
        assert!(page.contains("a &lt; b"));
        assert!(page.contains("x&amp;y"));
        assert!(page.contains("<div><svg>curve</svg>"));
        assert!(!page.contains("<?xml"));
        assert!(page.contains("could not run: boom"));
        assert!(page.contains("FAIL"));
    }
}
