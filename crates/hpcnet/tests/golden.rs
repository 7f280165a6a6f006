//! Golden snapshots of `hpcnet run --json` for every shipped scenario (`scenarios/*.toml`).
//!
//! Each scenario's report, minus the fields that are not a result of the model (`version`,
//! `wall_seconds`, `loop_seconds`), must equal `tests/golden/<scenario>.json`. A mismatch names
//! the scenario and the first differing JSON path with both values. Every shipped scenario runs
//! at its own settings (the slowest takes well under a second in the test profile); a scenario
//! that grows slower than ~10 s should be snapshotted with `--set sim.measure=...` and a file
//! name saying so.
//!
//! When a change to the model moves results on purpose, rewrite the files with
//!
//! ```text
//! HPCNET_UPDATE_GOLDEN=1 cargo test -p hpcnet --test golden
//! ```
//!
//! and review the diff of `crates/hpcnet/tests/golden/` like any other change.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const EXE: &str = env!("CARGO_BIN_EXE_hpcnet");

/// Top-level report fields that depend on the machine or the build, not on the model.
const UNSTABLE: [&str; 3] = ["version", "wall_seconds", "loop_seconds"];

fn scenarios_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios"))
}

fn golden_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden"))
}

/// The shipped scenarios, by name, in name order.
fn scenarios() -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = std::fs::read_dir(scenarios_dir())
        .expect("scenarios directory")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| {
            let name = p.file_stem().expect("file name").to_string_lossy().into_owned();
            (name, p)
        })
        .collect();
    v.sort();
    v
}

/// Stdout of `hpcnet run --json <scenario>`; the run must succeed.
fn run_json(scenario: &Path) -> String {
    let out = Command::new(EXE)
        .args(["run", "--json"])
        .arg(scenario)
        .output()
        .expect("run hpcnet");
    let stdout = String::from_utf8(out.stdout).expect("stdout is UTF-8");
    assert!(
        out.status.success(),
        "{}: exit {:?}\nstderr: {}",
        scenario.display(),
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The report without its unstable fields, pretty-printed with a final newline.
fn normalise(stdout: &str) -> String {
    let mut v: Value = serde_json::from_str(stdout).expect("stdout is one JSON document");
    let o = v.as_object_mut().expect("the report is a JSON object");
    for k in UNSTABLE {
        o.remove(k);
    }
    serde_json::to_string_pretty(&v).expect("serialises") + "\n"
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!("{}…", &s[..s.char_indices().nth(80).map_or(s.len(), |(i, _)| i)])
    } else {
        s
    }
}

/// The first place where `got` differs from `want`, as `path: expected X, got Y`.
fn first_difference(path: &str, want: &Value, got: &Value) -> Option<String> {
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    None => return Some(format!("{p}: expected {}, missing", short(va))),
                    Some(vb) => {
                        if let Some(d) = first_difference(&p, va, vb) {
                            return Some(d);
                        }
                    }
                }
            }
            b.iter()
                .find(|(k, _)| !a.contains_key(*k))
                .map(|(k, vb)| format!("{path}.{k}: not expected, got {}", short(vb)))
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (va, vb)) in a.iter().zip(b).enumerate() {
                if let Some(d) = first_difference(&format!("{path}[{i}]"), va, vb) {
                    return Some(d);
                }
            }
            (a.len() != b.len()).then(|| format!("{path}: expected {} elements, got {}", a.len(), b.len()))
        }
        _ => (want != got).then(|| format!("{path}: expected {}, got {}", short(want), short(got))),
    }
}

#[test]
fn run_json_matches_golden_files() {
    let update = std::env::var_os("HPCNET_UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let scenarios = scenarios();
    assert!(scenarios.len() >= 7, "found only {} scenarios", scenarios.len());
    let mut failures = Vec::new();
    for (name, path) in &scenarios {
        let text = normalise(&run_json(path));
        let file = golden_dir().join(format!("{name}.json"));
        if update {
            std::fs::create_dir_all(golden_dir()).expect("create golden directory");
            if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
                std::fs::write(&file, &text).expect("write golden file");
                eprintln!("updated {}", file.display());
            }
            continue;
        }
        let Ok(stored) = std::fs::read_to_string(&file) else {
            failures.push(format!("{name}: no golden file {}", file.display()));
            continue;
        };
        if stored != text {
            // Compare values re-read from both texts, so both went through the same parser.
            let want: Value = serde_json::from_str(&stored).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let got: Value = serde_json::from_str(&text).expect("normalised report");
            let d = first_difference("$", &want, &got).unwrap_or_else(|| "same values, different formatting".into());
            failures.push(format!("{name}: {d}"));
        }
    }
    assert!(
        failures.is_empty(),
        "run --json differs from tests/golden/ (if intended, rerun with HPCNET_UPDATE_GOLDEN=1 and review the diff):\n  {}",
        failures.join("\n  ")
    );
}

/// Every golden file belongs to a shipped scenario (a renamed or removed scenario leaves none
/// behind).
#[test]
fn no_stale_golden_files() {
    let names: Vec<String> = scenarios().into_iter().map(|(n, _)| n).collect();
    for entry in std::fs::read_dir(golden_dir()).expect("golden directory") {
        let p = entry.expect("directory entry").path();
        let stem = p.file_stem().expect("file name").to_string_lossy().into_owned();
        assert!(
            p.extension().is_some_and(|e| e == "json") && names.contains(&stem),
            "{} has no scenario in scenarios/",
            p.display()
        );
    }
}

/// Two runs of the same scenario print the same bytes, apart from the two wall-clock lines.
#[test]
fn runs_are_byte_identical_apart_from_wall_clock() {
    let strip = |s: &str| -> String {
        s.lines()
            .filter(|l| {
                !l.trim_start().starts_with("\"wall_seconds\"") && !l.trim_start().starts_with("\"loop_seconds\"")
            })
            .map(|l| format!("{l}\n"))
            .collect()
    };
    for name in ["sunway-prototype", "dragonfly-small"] {
        let path = scenarios_dir().join(format!("{name}.toml"));
        let (a, b) = (run_json(&path), run_json(&path));
        assert_eq!(
            a.lines().count(),
            strip(&a).lines().count() + 2,
            "{name}: wall-clock lines"
        );
        assert!(strip(&a) == strip(&b), "{name}: two runs differ");
    }
}

#[test]
fn first_difference_names_the_path_and_both_values() {
    let want: Value = serde_json::json!({"a": {"b": [1, 2, {"c": "x"}]}, "d": 1.5});
    assert_eq!(first_difference("$", &want, &want), None);
    let mut got = want.clone();
    got["a"]["b"][2]["c"] = "y".into();
    got["d"] = 2.into();
    assert_eq!(
        first_difference("$", &want, &got).as_deref(),
        Some("$.a.b[2].c: expected \"x\", got \"y\"")
    );
    let mut got = want.clone();
    got["a"]["b"].as_array_mut().unwrap().push(3.into());
    assert_eq!(
        first_difference("$", &want, &got).as_deref(),
        Some("$.a.b: expected 3 elements, got 4")
    );
    let mut got = want.clone();
    got.as_object_mut().unwrap().remove("d");
    got["e"] = true.into();
    assert_eq!(
        first_difference("$", &want, &got).as_deref(),
        Some("$.d: expected 1.5, missing")
    );
    got["d"] = 1.5.into();
    assert_eq!(
        first_difference("$", &want, &got).as_deref(),
        Some("$.e: not expected, got true")
    );
}
