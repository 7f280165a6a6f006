//! Sensitivity of a study's judged rows to its fitted parameters: each parameter of the study's
//! declared calibration ([`crate::Study::fitted`]) is scaled by `1 − f` and `1 + f` in turn (the
//! other parameters as configured) and the study is rerun; the table gives, for every
//! prediction and post-hoc row, how much its simulated value moves.
//!
//! A row that no fitted parameter moves is decided by configuration alone; a row that moves
//! about as much as the parameter shows where the fit carries the result.

use crate::report::fmt_num;
use crate::{Ctx, Role, Study, StudyError};
use std::fmt::Write as _;

/// One perturbed parameter: its key, value as configured and the two perturbed values.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub key: String,
    pub value: String,
    pub low: String,
    pub high: String,
}

/// One judged row and how it moves.
#[derive(Clone, Debug, PartialEq)]
pub struct Moved {
    pub label: String,
    pub role: Role,
    pub unit: String,
    /// Simulated value as configured.
    pub base: f64,
    /// Per parameter: relative change of the simulated value at (low, high); `None` where the
    /// row is missing from the perturbed run.
    pub change: Vec<(Option<f64>, Option<f64>)>,
}

/// The sensitivity table of one study.
#[derive(Clone, Debug, PartialEq)]
pub struct Sensitivity {
    pub study: String,
    /// The perturbation, a fraction (0.1 = ±10 %).
    pub fraction: f64,
    pub params: Vec<Param>,
    pub rows: Vec<Moved>,
    pub quick: bool,
}

/// The value of `key` in the study's scenario after the context's overrides, as TOML.
fn current_value(study: &dyn Study, ctx: &Ctx, key: &str) -> Result<toml::Value, StudyError> {
    let (text, path) = study
        .scenario()
        .ok_or_else(|| StudyError::Unsupported(format!("study '{}' simulates no scenario", study.name())))?;
    let mut table: toml::Table = text
        .parse()
        .map_err(|e| StudyError::Unsupported(format!("{path}: {e}")))?;
    for o in &ctx.set {
        hpcnet_workloads::scenario::apply_override(&mut table, o)
            .map_err(|(k, r)| StudyError::Unsupported(format!("{k}: {r}")))?;
    }
    let mut at = &toml::Value::Table(table);
    for part in key.split('.') {
        at = at.get(part).ok_or_else(|| {
            StudyError::Unsupported(format!("{path}: fitted parameter {key} is not set in the scenario"))
        })?;
    }
    Ok(at.clone())
}

/// `v` scaled by `factor`, as the right-hand side of a `--set`: numbers stay numbers (integers
/// rounded), quantities keep their unit ("397 ns" × 1.1 = "436.7 ns"; byte sizes are rounded to
/// whole bytes).
pub fn scaled(v: &toml::Value, factor: f64) -> Option<String> {
    match v {
        toml::Value::Integer(i) => Some(((*i as f64 * factor).round() as i64).to_string()),
        toml::Value::Float(x) => Some(format!("{}", x * factor)),
        toml::Value::String(s) => {
            let s = s.trim();
            let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
            let (num, unit) = (&s[..end], s[end..].trim());
            let x: f64 = num.parse().ok()?;
            let bytes = unit.ends_with('B') && !unit.contains('/');
            let y = x * factor;
            let text = if bytes && !num.contains('.') {
                format!("{}", y.round() as u64)
            } else {
                // Six significant digits, no trailing zeros.
                let mag = y.abs().log10().floor() as i32;
                let decimals = (5 - mag).clamp(0, 9) as usize;
                let t = format!("{y:.decimals$}");
                if t.contains('.') {
                    t.trim_end_matches('0').trim_end_matches('.').to_string()
                } else {
                    t
                }
            };
            Some(if unit.is_empty() {
                format!("\"{text}\"")
            } else {
                format!("\"{text} {unit}\"")
            })
        }
        _ => None,
    }
}

/// Reruns `study` with each fitted parameter scaled by `1 ± fraction`.
pub fn sensitivity(study: &dyn Study, ctx: &Ctx, fraction: f64) -> Result<Sensitivity, StudyError> {
    let base = crate::run(study, ctx)?;
    let judged: Vec<&crate::Row> = base
        .rows
        .iter()
        .filter(|r| matches!(r.role, Role::Prediction | Role::PostHoc))
        .collect();
    let mut params = Vec::new();
    let mut runs = Vec::new();
    for f in study.fitted() {
        let v = current_value(study, ctx, f.key)?;
        let mut perturbed = Vec::new();
        let mut values = Vec::new();
        for factor in [1.0 - fraction, 1.0 + fraction] {
            let rhs = scaled(&v, factor)
                .ok_or_else(|| StudyError::Unsupported(format!("fitted parameter {} = {v} is not a number", f.key)))?;
            let mut c = ctx.clone();
            c.set.push(format!("{}={rhs}", f.key));
            perturbed.push(crate::run(study, &c)?);
            values.push(rhs.trim_matches('"').to_string());
        }
        params.push(Param {
            key: f.key.to_string(),
            value: v.as_str().map_or_else(|| v.to_string(), str::to_string),
            low: values[0].clone(),
            high: values[1].clone(),
        });
        runs.push(perturbed);
    }
    let rel = |label: &str, base: f64, r: &crate::StudyReport| {
        r.rows.iter().find(|x| x.label == label).map(|x| {
            if base == 0.0 {
                x.simulated - base
            } else {
                (x.simulated - base) / base.abs()
            }
        })
    };
    let rows = judged
        .iter()
        .map(|r| Moved {
            label: r.label.clone(),
            role: r.role,
            unit: r.unit.clone(),
            base: r.simulated,
            change: runs
                .iter()
                .map(|p| (rel(&r.label, r.simulated, &p[0]), rel(&r.label, r.simulated, &p[1])))
                .collect(),
        })
        .collect();
    Ok(Sensitivity {
        study: study.name().to_string(),
        fraction,
        params,
        rows,
        quick: ctx.quick,
    })
}

impl Sensitivity {
    /// One page: the parameters, then one line per judged row with its relative change under
    /// each perturbation.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let pct = fmt_num(100.0 * self.fraction);
        let _ = writeln!(
            out,
            "{} — sensitivity of the judged rows to each fitted parameter scaled by ±{pct} %",
            self.study
        );
        if self.quick {
            let _ = writeln!(out, "QUICK RUN: shortened simulations, not a reproduction");
        }
        if self.params.is_empty() {
            let _ = writeln!(out, "\nno fitted parameters: nothing to perturb");
            return out;
        }
        let _ = writeln!(out, "\nparameters");
        for (i, p) in self.params.iter().enumerate() {
            let _ = writeln!(
                out,
                "  [{}] {} = {} (−{pct} %: {}, +{pct} %: {})",
                i + 1,
                p.key,
                p.value,
                p.low,
                p.high
            );
        }
        let _ = writeln!(
            out,
            "\nchange of the simulated value, % (columns: parameter −{pct} % / +{pct} %)"
        );
        let mut header = vec!["label".to_string(), "role".into(), "simulated".into(), "unit".into()];
        for i in 0..self.params.len() {
            header.push(format!("[{}]−", i + 1));
            header.push(format!("[{}]+", i + 1));
        }
        let cell = |c: Option<f64>| match c {
            None => "—".to_string(),
            Some(x) if x.abs() < 5e-5 => "0".to_string(),
            Some(x) => format!("{:+.1}", 100.0 * x),
        };
        let lines: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                let mut l = vec![
                    r.label.clone(),
                    r.role.name().to_string(),
                    fmt_num(r.base),
                    if r.unit == crate::report::YES_NO {
                        String::new()
                    } else {
                        r.unit.clone()
                    },
                ];
                for &(lo, hi) in &r.change {
                    l.push(cell(lo));
                    l.push(cell(hi));
                }
                l
            })
            .collect();
        let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for l in &lines {
            for (w, s) in width.iter_mut().zip(l) {
                *w = (*w).max(s.chars().count());
            }
        }
        let fmt = |l: &[String]| {
            let mut s = String::from(" ");
            for (i, (c, w)) in l.iter().zip(&width).enumerate() {
                let pad = " ".repeat(w - c.chars().count());
                if i == 0 || i == 1 || i == 3 {
                    let _ = write!(s, " {c}{pad}");
                } else {
                    let _ = write!(s, " {pad}{c}");
                }
            }
            s.trim_end().to_string()
        };
        let _ = writeln!(out, "{}", fmt(&header));
        for l in &lines {
            let _ = writeln!(out, "{}", fmt(l));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_scale_with_their_units() {
        let s = |x: &str| toml::Value::String(x.into());
        assert_eq!(scaled(&s("397 ns"), 1.1).unwrap(), "\"436.7 ns\"");
        assert_eq!(scaled(&s("6.28 Gb/s"), 0.9).unwrap(), "\"5.652 Gb/s\"");
        assert_eq!(scaled(&s("32 B"), 1.1).unwrap(), "\"35 B\"");
        assert_eq!(scaled(&s("28.125 Gb/s"), 0.5).unwrap(), "\"14.0625 Gb/s\"");
        assert_eq!(scaled(&toml::Value::Integer(20), 1.5).unwrap(), "30");
        assert_eq!(scaled(&s("fixed"), 1.1), None);
    }
}
