//! Property: whatever scenario document and `--set` lines a user gives — valid, nearly valid or
//! garbage — loading never panics, a refusal names a key that is in the input or in the
//! scenario format, and every run that is accepted conserves its packets.
//!
//! The machines are small (at most 16 routers) and runs short (a few microseconds of simulated
//! time), so 64 cases take a few seconds.

use hpcnet_workloads::synthetic::{run_synthetic, RunOptions};
use hpcnet_workloads::Scenario;
use proptest::prelude::*;

/// Small machines of several families that load as they are.
const BASES: [&str; 4] = [
    r#"
[topology]
kind = "torus"
k = [4, 4]
[link]
lane_rate = "10 Gb/s"
latency = "10 ns"
[router]
vcs = 2
private_credits = 16
"#,
    r#"
[topology]
kind = "crossbar"
ports = 4
[link]
lane_rate = "25 Gb/s"
latency = "5 ns"
[router]
vcs = 2
"#,
    r#"
[topology]
kind = "fat_tree"
k = 2
n = 2
[link]
lane_rate = "10 Gb/s"
latency = "10 ns"
[router]
private_credits = 16
[traffic]
pattern = "uniform"
load = 0.5
"#,
    r#"
name = "df"
seed = 7
[topology]
kind = "dragonfly"
a = 2
p = 1
h = 1
[link]
lane_rate = "10 Gb/s"
latency = "10 ns"
[router]
vcs = 3
private_credits = 16
"#,
];

/// Keys users override, across every table.
const KEYS: [&str; 34] = [
    "seed",
    "topology.k",
    "topology.concentration",
    "topology.kind",
    "topology.ports",
    "link.lanes",
    "link.lane_rate",
    "link.latency",
    "link.encoding",
    "link.switching",
    "router.vcs",
    "router.private_credits",
    "router.shared_credits",
    "router.credit_unit",
    "router.latency",
    "packet.header",
    "packet.max_payload",
    "routing.algorithm",
    "routing.deadlock",
    "faults.watchdog",
    "faults.failed_links",
    "faults.events",
    "faults.detection",
    "faults.table_update",
    "faults.torus_bypass",
    "traffic.load",
    "traffic.pattern",
    "traffic.size",
    "traffic.hotspot_nodes",
    "nic.engines",
    "nic.functions",
    "nic.host.read_request",
    "coll.window",
    "link_overrides",
];

/// Values of every kind: fitting, out of range, of the wrong type, malformed.
const VALUES: [&str; 40] = [
    "0",
    "1",
    "2",
    "3",
    "4",
    "16",
    "-1",
    "4294967295",
    "18446744073709551615",
    "1e-300",
    "0.5",
    "1.0",
    "nan",
    "true",
    "[]",
    "[4]",
    "[2, 2]",
    "[3, 5]",
    "[70000, 70000]",
    "[{ router = 0, port = 0 }]",
    "[{ router = 0, port = 0, lanes = 3 }]",
    "[{ router = 99, port = 0 }]",
    "\"10 ns\"",
    "\"0 ns\"",
    "\"1e-9 ps\"",
    "\"11 us\"",
    "\"64 B\"",
    "\"1e12 B\"",
    "\"0 B\"",
    "\"10 Gb/s\"",
    "\"0.1 Gb/s\"",
    "\"1 b/s\"",
    "{ min = \"8 B\", max = \"64 B\" }",
    "{ sizes = [\"8 B\", \"64 B\"], weights = [1.0, 0.0] }",
    "uniform",
    "hotspot",
    "up_down",
    "minimal",
    "none",
    "[8,",
];

/// A scenario document: a base as it is, with one line dropped, with one line's value
/// replaced, or garbage.
fn document() -> impl Strategy<Value = String> {
    let base = (0..BASES.len()).prop_map(|i| BASES[i].to_string());
    let dropped = (0..BASES.len(), 0usize..20).prop_map(|(i, line)| {
        let lines: Vec<&str> = BASES[i].lines().collect();
        let skip = line % lines.len();
        lines
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != skip)
            .map(|(_, l)| *l)
            .collect::<Vec<_>>()
            .join("\n")
    });
    let replaced = (0..BASES.len(), 0usize..20, 0..VALUES.len()).prop_map(|(i, line, v)| {
        let lines: Vec<String> = BASES[i].lines().map(str::to_string).collect();
        let at = line % lines.len();
        lines
            .iter()
            .enumerate()
            .map(|(j, l)| match l.split_once(" = ") {
                Some((k, _)) if j == at => format!("{k} = {}", VALUES[v]),
                _ => l.clone(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    let garbage = "[ -~\n]{0,80}".prop_map(|s| s);
    prop_oneof![3 => base, 2 => dropped, 2 => replaced, 1 => garbage]
}

/// `--set` lines: key=value from the lists, or malformed.
fn overrides() -> impl Strategy<Value = Vec<String>> {
    let line = prop_oneof![
        6 => (0..KEYS.len(), 0..VALUES.len()).prop_map(|(k, v)| format!("{}={}", KEYS[k], VALUES[v])),
        1 => "[a-z.=\\[\\]\" 0-9]{0,16}".prop_map(|s| s),
    ];
    prop_oneof![2 => Just(Vec::new()), 3 => proptest::collection::vec(line, 1..3)]
}

/// The top-level keys of the scenario format.
const TOP: [&str; 15] = [
    "name",
    "description",
    "seed",
    "topology",
    "link",
    "link_overrides",
    "router",
    "packet",
    "routing",
    "faults",
    "traffic",
    "nic",
    "coll",
    "mpi",
    "sim",
];

/// Forced last: the run is short whatever the overrides said.
const SHORT: [&str; 3] = ["sim.warmup=\"1 us\"", "sim.measure=\"2 us\"", "sim.drain=\"200 us\""];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn scenarios_load_or_are_refused_by_key_and_runs_conserve_packets(doc in document(), set in overrides()) {
        let mut all = set.clone();
        all.extend(SHORT.iter().map(|s| s.to_string()));
        match Scenario::from_str_named(&doc, "p.toml", "p", &all) {
            Err(e) => {
                let line = e.to_string();
                prop_assert!(!line.contains('\n'), "one line: {line}");
                prop_assert!(line.starts_with("p.toml: "), "{line}");
                prop_assert!(!e.reason.is_empty(), "{line}");
                let key = e.key.strip_prefix("--set ").unwrap_or(&e.key);
                let first = key.split(['.', '[', '=']).next().unwrap_or("");
                let named = e.key.is_empty()
                    || key.starts_with("line ")
                    || e.key.starts_with("--set ") && all.iter().any(|s| s.starts_with(first))
                    || TOP.contains(&first)
                    || doc.contains(first)
                    || set.iter().any(|s| s.contains(first));
                prop_assert!(named, "key '{}' is neither in the input nor the format: {line}", e.key);
            }
            Ok(sc) => {
                match run_synthetic(&sc, RunOptions::default()) {
                    Ok(r) => {
                        prop_assert!(r.conservation_ok, "{doc}\n{set:?}");
                        prop_assert_eq!(
                            r.packets_injected,
                            r.packets_delivered + r.packets_dropped + r.packets_in_flight
                        );
                        if r.drained {
                            prop_assert_eq!(r.packets_generated, r.packets_injected);
                        }
                        prop_assert_eq!(r.latency_ns.mean.is_none(), r.measured_delivered == 0);
                    }
                    // A run refused for its input names the file, like a load error.
                    Err(e) => prop_assert!(e.to_string().starts_with("p.toml: "), "{e}"),
                }
            }
        }
    }
}
