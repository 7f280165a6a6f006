//! `hpcnet bench`: simulator speed on fixed scenarios.
//!
//! Each case runs in a child process (`hpcnet bench-one NAME`) so its peak resident memory
//! (VmHWM) is its own. Figures: packet-hops per wall second (a hop = one router traversal of a
//! delivered packet), events per second, peak memory. Not a test: numbers depend on the machine.

use crate::{Common, Failure};
use hpcnet_workloads::msgload::{random_writes, MsgLoad};
use hpcnet_workloads::synthetic::{run_synthetic, RunOptions};
use hpcnet_workloads::Scenario;
use serde::{Deserialize, Serialize};

/// A bench case: an embedded scenario plus overrides, and what runs on it.
struct Case {
    name: &'static str,
    text: &'static str,
    set: &'static [&'static str],
    load: Load,
}

/// What a bench case runs.
enum Load {
    /// The scenario's synthetic traffic (packets injected at the routers' nodes).
    Synthetic,
    /// Message level through the NIC model: every rank writes `size`-byte messages to random
    /// other ranks, `window` outstanding, `per_rank` each (`msgload::random_writes`).
    RandomWrites { size: u64, per_rank: u64, window: u64 },
}

/// The torus at three loads (two below its saturation, about 0.6 of the injection rate, and
/// one beyond) shows how the cost of a packet-hop grows with load.
const CASES: &[Case] = &[
    Case {
        name: "torus-8x8x8-uniform-0.20",
        text: include_str!("../../../scenarios/torus-8x8x8.toml"),
        set: &["traffic.load=0.2", "sim.measure=\"100 us\""],
        load: Load::Synthetic,
    },
    Case {
        name: "torus-8x8x8-uniform-0.45",
        text: include_str!("../../../scenarios/torus-8x8x8.toml"),
        set: &["traffic.load=0.45", "sim.measure=\"50 us\""],
        load: Load::Synthetic,
    },
    Case {
        name: "torus-8x8x8-uniform-0.90",
        text: include_str!("../../../scenarios/torus-8x8x8.toml"),
        set: &["traffic.load=0.9", "sim.measure=\"20 us\""],
        load: Load::Synthetic,
    },
    Case {
        name: "sunway-prototype-uniform-0.40",
        text: include_str!("../../../scenarios/sunway-prototype.toml"),
        set: &["traffic.load=0.4", "sim.measure=\"20 us\""],
        load: Load::Synthetic,
    },
    Case {
        name: "fattree-4ary-3tree-uniform-0.50",
        text: include_str!("../../../scenarios/fattree-4ary-3tree.toml"),
        set: &["traffic.load=0.5", "sim.measure=\"100 us\""],
        load: Load::Synthetic,
    },
    Case {
        name: "dragonfly-small-uniform-0.40",
        text: include_str!("../../../scenarios/dragonfly-small.toml"),
        set: &["traffic.load=0.4", "sim.measure=\"100 us\""],
        load: Load::Synthetic,
    },
    Case {
        name: "sunway-verbs-random-writes-4k",
        text: include_str!("../../../scenarios/sunway-prototype.toml"),
        set: &[],
        load: Load::RandomWrites {
            size: 4096,
            per_rank: 64,
            window: 8,
        },
    },
];

#[derive(Serialize, Deserialize, Debug)]
struct CaseResult {
    name: String,
    nodes: usize,
    packets_delivered: u64,
    packet_hops: u64,
    events: u64,
    wall_seconds: f64,
    loop_seconds: f64,
    packet_hops_per_sec: f64,
    events_per_sec: f64,
    peak_rss_mb: f64,
    /// Runs of this case (`--repeat`); the figures above are those of the run of median speed.
    #[serde(default = "one")]
    repeats: u32,
    /// Slowest and fastest of the runs, packet-hops per second.
    #[serde(default)]
    packet_hops_per_sec_min: f64,
    #[serde(default)]
    packet_hops_per_sec_max: f64,
    accepted_load: f64,
    /// Simulated messages per wall second (message-level cases only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    messages_per_sec: Option<f64>,
    seed: u64,
    resolved_scenario: serde_json::Value,
}

fn one() -> u32 {
    1
}

/// What one run of a case counted.
struct Counts {
    nodes: usize,
    packets_delivered: u64,
    packet_hops: u64,
    events: u64,
    wall_seconds: f64,
    loop_seconds: f64,
}

impl CaseResult {
    /// One run's result: speeds from the counts over the loop time, this process's peak memory.
    fn new(
        name: &str,
        c: Counts,
        accepted_load: f64,
        messages_per_sec: Option<f64>,
        seed: u64,
        resolved_scenario: serde_json::Value,
    ) -> CaseResult {
        let hops_per_sec = c.packet_hops as f64 / c.loop_seconds;
        CaseResult {
            name: name.to_string(),
            nodes: c.nodes,
            packets_delivered: c.packets_delivered,
            packet_hops: c.packet_hops,
            events: c.events,
            wall_seconds: c.wall_seconds,
            loop_seconds: c.loop_seconds,
            packet_hops_per_sec: hops_per_sec,
            events_per_sec: c.events as f64 / c.loop_seconds,
            peak_rss_mb: peak_rss_mb(),
            repeats: 1,
            packet_hops_per_sec_min: hops_per_sec,
            packet_hops_per_sec_max: hops_per_sec,
            accepted_load,
            messages_per_sec,
            seed,
            resolved_scenario,
        }
    }
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Runs one case; `extra` overrides come after the case's own.
pub fn bench_one(name: &str, extra: &[String]) -> Result<(), Failure> {
    let case = CASES
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| Failure::input(format!("no bench case '{name}'")))?;
    let set: Vec<String> = case
        .set
        .iter()
        .map(|s| s.to_string())
        .chain(extra.iter().cloned())
        .collect();
    let sc = Scenario::from_str_named(case.text, case.name, case.name, &set).map_err(Failure::input)?;
    if let Load::RandomWrites { size, per_rank, window } = case.load {
        let t0 = std::time::Instant::now();
        let load = MsgLoad {
            size,
            per_rank,
            window,
            seed: sc.file.seed,
        };
        let world = sc.world().map_err(Failure::input)?;
        let rep = random_writes(world, &load).map_err(|e| Failure::model(e.to_string()))?;
        let r = CaseResult::new(
            case.name,
            Counts {
                nodes: sc.topology.nodes.len(),
                packets_delivered: rep.packets_delivered,
                packet_hops: rep.packet_hops,
                events: rep.events,
                wall_seconds: t0.elapsed().as_secs_f64(),
                loop_seconds: rep.loop_seconds,
            },
            0.0,
            Some(rep.messages as f64 / rep.loop_seconds),
            load.seed,
            sc.resolved_json(),
        );
        outln!("{}", serde_json::to_string(&r).expect("json"));
        return Ok(());
    }
    let rep = run_synthetic(&sc, RunOptions::default()).map_err(|e| Failure::model(e.to_string()))?;
    let r = CaseResult::new(
        case.name,
        Counts {
            nodes: rep.nodes,
            packets_delivered: rep.packets_delivered,
            packet_hops: rep.total_hops,
            events: rep.events,
            wall_seconds: rep.wall_seconds,
            loop_seconds: rep.loop_seconds,
        },
        rep.accepted_load,
        None,
        rep.seed,
        rep.resolved_scenario,
    );
    outln!("{}", serde_json::to_string(&r).expect("json"));
    Ok(())
}

pub fn bench(only: &[String], repeat: u32, common: &Common) -> Result<(), Failure> {
    let json = common.json;
    let cases: Vec<&Case> = CASES
        .iter()
        .filter(|c| only.is_empty() || only.iter().any(|o| c.name.contains(o.as_str())))
        .collect();
    if cases.is_empty() {
        let names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
        return Err(Failure::input(format!(
            "--only {}: matches no bench case (cases: {})",
            only.join(" --only "),
            names.join(", ")
        )));
    }
    // Check the overrides here, so a bad one is an input error and not a failed case.
    for c in &cases {
        let set: Vec<String> = c
            .set
            .iter()
            .map(|s| s.to_string())
            .chain(common.set.iter().cloned())
            .collect();
        Scenario::from_str_named(c.text, c.name, c.name, &set).map_err(Failure::input)?;
    }
    let exe = std::env::current_exe().map_err(|e| Failure::input(format!("cannot find own executable: {e}")))?;
    let mut results = Vec::new();
    for c in cases {
        if !json {
            eprintln!("  running {} ...", c.name);
        }
        let mut args = vec!["bench-one".to_string(), c.name.to_string()];
        for s in &common.set {
            args.push(format!("--set={s}"));
        }
        let mut runs = Vec::with_capacity(repeat as usize);
        for _ in 0..repeat.max(1) {
            let out = std::process::Command::new(&exe)
                .args(&args)
                .output()
                .map_err(|e| Failure::input(format!("cannot run bench case: {e}")))?;
            if !out.status.success() {
                return Err(Failure::model(format!(
                    "bench case {} failed: {}",
                    c.name,
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            let r: CaseResult = serde_json::from_slice(&out.stdout)
                .map_err(|e| Failure::model(format!("bench case {} printed bad JSON: {e}", c.name)))?;
            runs.push(r);
        }
        results.push(median_run(runs));
    }
    if json {
        let v = serde_json::json!({ "version": env!("CARGO_PKG_VERSION"), "cases": results });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        outln!("hpcnet {} bench (one thread per case)", env!("CARGO_PKG_VERSION"));
        if repeat > 1 {
            outln!("  each case run {repeat} times: the run of median speed, with the slowest and fastest hops/s");
        }
        outln!(
            "  {:<34} {:>6} {:>12} {:>14} {:>12} {:>9} {:>8} {:>8}",
            "case",
            "nodes",
            "packet-hops",
            "hops/s",
            "events/s",
            "peak MB",
            "loop s",
            "wall s"
        );
        for r in &results {
            outln!(
                "  {:<34} {:>6} {:>12} {:>14.0} {:>12.0} {:>9.1} {:>8.3} {:>8.3}",
                r.name,
                r.nodes,
                r.packet_hops,
                r.packet_hops_per_sec,
                r.events_per_sec,
                r.peak_rss_mb,
                r.loop_seconds,
                r.wall_seconds
            );
            if let Some(mps) = r.messages_per_sec {
                outln!("  {:<34} {:>6} {:>12} {:>14.0} messages/s", "", "", "", mps);
            }
            if r.repeats > 1 {
                outln!(
                    "  {:<34} {:>6} {:>12} {:>14} hops/s over {} runs: {:.0} .. {:.0}",
                    "",
                    "",
                    "",
                    "",
                    r.repeats,
                    r.packet_hops_per_sec_min,
                    r.packet_hops_per_sec_max
                );
            }
        }
    }
    Ok(())
}

/// The run of median speed (the lower middle one for an even count), carrying the spread of all
/// runs.
fn median_run(mut runs: Vec<CaseResult>) -> CaseResult {
    let speeds: Vec<f64> = runs.iter().map(|r| r.packet_hops_per_sec).collect();
    let min = speeds.iter().copied().fold(f64::INFINITY, f64::min);
    let max = speeds.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let n = runs.len() as u32;
    runs.sort_by(|a, b| a.packet_hops_per_sec.total_cmp(&b.packet_hops_per_sec));
    let mut m = runs.swap_remove((runs.len() - 1) / 2);
    m.repeats = n;
    m.packet_hops_per_sec_min = min;
    m.packet_hops_per_sec_max = max;
    m
}
