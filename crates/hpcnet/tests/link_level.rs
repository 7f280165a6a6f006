//! Link-level reliability through the command line: bit errors at 1e-6 on the NICEVT M3 torus
//! and the Sunway prototype lose nothing and cost latency, repeat byte for byte, show in the
//! report; SHMEM programs on the torus still deliver correct data; bad link-level values exit 2
//! naming the key.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

const EXE: &str = env!("CARGO_BIN_EXE_hpcnet");

fn scenario(name: &str) -> String {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios"))
        .join(format!("{name}.toml"))
        .to_string_lossy()
        .into_owned()
}

fn hpcnet(args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run hpcnet")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("UTF-8")
}

/// `run --json` of `name` at bit-error rate `ber` (and `extra` settings): the report and its
/// text without wall-clock fields.
fn run(name: &str, ber: &str, extra: &[&str]) -> (Value, String) {
    let file = scenario(name);
    let set = format!("link.ber={ber}");
    let mut args = vec!["run", file.as_str(), "--json", "--set", set.as_str()];
    for e in extra {
        args.extend(["--set", e]);
    }
    let text = ok(&hpcnet(&args));
    let v: Value = serde_json::from_str(&text).expect("one JSON document");
    let stable = text
        .lines()
        .filter(|l| !l.contains("\"wall_seconds\"") && !l.contains("\"loop_seconds\""))
        .collect::<Vec<_>>()
        .join("\n");
    (v, stable)
}

fn stat(v: &Value, name: &str) -> u64 {
    v["stats"]
        .as_array()
        .expect("stats")
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no statistic {name}"))["value"]
        .as_u64()
        .expect("a counter")
}

/// Every packet delivered exactly once (the run checks duplicates), nothing dropped, all
/// drained.
fn conserved(v: &Value) {
    assert_eq!(v["conservation_ok"], true);
    assert_eq!(v["drained"], true);
    assert_eq!(v["packets_dropped"], 0);
    assert_eq!(v["packets_delivered"], v["packets_injected"]);
    assert_eq!(v["packets_injected"], v["packets_generated"]);
}

fn ber_costs_latency_and_loses_nothing(name: &str, extra: &[&str]) {
    let (clean, _) = run(name, "0", extra);
    let (noisy, text) = run(name, "1e-6", extra);
    conserved(&clean);
    conserved(&noisy);
    assert_eq!(stat(&clean, "link.retransmissions"), 0);
    let resent = stat(&noisy, "link.retransmissions");
    let corrupted = stat(&noisy, "link.corrupted_packets");
    assert!(
        corrupted > 20 && resent >= corrupted,
        "{name}: {corrupted} corrupted, {resent} resent"
    );
    // The per-link list accounts for every retransmission.
    let per_link: u64 = noisy["link_errors"]
        .as_array()
        .expect("link_errors")
        .iter()
        .map(|l| l["retransmissions"].as_u64().unwrap())
        .sum();
    assert_eq!(per_link, resent);
    assert!(clean.get("link_errors").is_none(), "no errors, no per-link list");
    let (a, b) = (
        clean["latency_ns"]["mean"].as_f64().unwrap(),
        noisy["latency_ns"]["mean"].as_f64().unwrap(),
    );
    assert!(b > a * 1.005, "{name}: mean latency {a} ns at BER 0, {b} ns at 1e-6");
    // Same scenario and seed: the same errors, byte for byte.
    let (_, again) = run(name, "1e-6", extra);
    assert_eq!(text, again);
}

#[test]
fn nicevt_m3_at_ber_1e6_loses_nothing_and_pays_in_latency() {
    ber_costs_latency_and_loses_nothing("nicevt-m3", &[]);
}

#[test]
fn sunway_at_ber_1e6_loses_nothing_and_pays_in_latency() {
    ber_costs_latency_and_loses_nothing("sunway-prototype", &["sim.measure=\"10 us\""]);
    // Its fallback rule (3 errors within 10 us) switches some links to store-and-forward, each
    // listed with its counters; links without errors are not listed.
    let (v, _) = run("sunway-prototype", "1e-6", &["sim.measure=\"10 us\""]);
    let links = v["link_errors"].as_array().unwrap();
    assert!(links
        .iter()
        .all(|l| l["retransmissions"].as_u64().unwrap() + l["replay_stalls"].as_u64().unwrap() > 0));
    for l in links {
        let fell = l["saf_fallbacks"].as_u64().unwrap();
        assert!(fell == 0 || l["retransmissions"].as_u64().unwrap() >= 3, "{l}");
        assert_eq!(
            l["store_and_forward"],
            fell > l["saf_restores"].as_u64().unwrap(),
            "{l}"
        );
    }
    assert!(stat(&v, "link.saf_fallbacks") > 0);
}

#[test]
fn text_report_has_a_link_level_line_only_with_errors() {
    let file = scenario("nicevt-m3");
    let clean = ok(&hpcnet(&["run", &file, "--set", "link.ber=0"]));
    assert!(!clean.contains("link level"), "{clean}");
    let noisy = ok(&hpcnet(&["run", &file, "--set", "link.ber=1e-6"]));
    let line = noisy
        .lines()
        .find(|l| l.contains("link level"))
        .expect("a link-level line");
    assert!(
        line.contains("packets corrupted") && line.contains("retransmissions"),
        "{line}"
    );
}

#[test]
fn shmem_on_the_torus_keeps_data_correct_and_slows_down_with_errors() {
    let file = scenario("nicevt-m3");
    let ra = |ber: &str| -> Value {
        let set = format!("link.ber={ber}");
        let args = [
            "shmem",
            &file,
            "--test",
            "randomaccess",
            "--pes",
            "64",
            "--updates",
            "512",
            "--log-table",
            "10",
            "--json",
            "--set",
            &set,
        ];
        serde_json::from_str(&ok(&hpcnet(&args))).unwrap()
    };
    let (clean, noisy) = (ra("0"), ra("1e-5"));
    assert_eq!(
        noisy["points"][0]["errors"], 0,
        "RandomAccess verification after retransmissions"
    );
    assert_eq!(noisy["points"][0]["count"], clean["points"][0]["count"]);
    let (a, b) = (
        clean["points"][0]["time_ns"].as_f64().unwrap(),
        noisy["points"][0]["time_ns"].as_f64().unwrap(),
    );
    assert!(b > a, "RandomAccess took {a} ns at BER 0 and {b} ns at 1e-5");
    let lat = |ber: &str| -> f64 {
        let set = format!("link.ber={ber}");
        let args = [
            "shmem",
            &file,
            "--test",
            "put-latency",
            "--sizes",
            "65536:65536",
            "--json",
            "--set",
            &set,
        ];
        let v: Value = serde_json::from_str(&ok(&hpcnet(&args))).unwrap();
        v["points"][0]["latency_us"].as_f64().unwrap()
    };
    assert!(lat("1e-6") > lat("0"));
}

#[test]
fn bad_link_level_values_exit_2_naming_the_key() {
    let file = scenario("torus-8x8");
    for (set, key, words) in [
        ("link.ber=-1e-9", "link.ber", "at least 0 and below 1"),
        ("link.ber=1", "link.ber", "at least 0 and below 1"),
        ("link.ber=0.5", "link.ber", "transmissions on average"),
        (
            "link.replay_buffer=\"0 B\"",
            "link.replay_buffer",
            "at least one maximum-size packet",
        ),
        (
            "link.replay_buffer=\"100 B\"",
            "link.replay_buffer",
            "cannot hold a maximum-size packet",
        ),
        ("link.replay_packets=0", "link.replay_packets", "at least 1"),
        ("link.fallback_errors=100000", "link.fallback_errors", "at most"),
        (
            "link_overrides=[{ router = 0, port = 0, ber = 1.5 }]",
            "link_overrides[0].ber",
            "below 1",
        ),
        (
            "link_overrides=[{ router = 0, port = 0, lanes = 3 }]",
            "link_overrides[0].lanes",
            "got 3",
        ),
    ] {
        let out = hpcnet(&["run", &file, "--set", set]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{set}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        let prefix = format!("error: {file}: {key}: ");
        assert!(err.starts_with(&prefix) && err.contains(words), "{set}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}
