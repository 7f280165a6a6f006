//! Router micro-architecture against the textbook shape of saturation throughput: on the
//! shipped 8 × 8 and 8 × 8 × 8 tori and the 4-ary 3-tree under uniform traffic, a router with
//! input speedup 1 and a one-iteration iSLIP allocator saturates well below the channel-load
//! bound, and its saturation throughput grows with more VCs and with input speedup (Dally &
//! Towles, *Principles and Practices of Interconnection Networks*, ch. 13 and 17: throughput
//! rising with VCs and with speedup; Karol, Hluchyj & Morgan 1987: one FIFO per input
//! saturates at 2 − √2 ≈ 0.586 of capacity under uniform traffic; McKeown 1999 for iSLIP).
//!
//! Saturation throughput is measured as the accepted load at offered load 1.0 (every source
//! always has packets), as a fraction of the channel-load bound the run reports.

use hpcnet_workloads::synthetic::{run_synthetic, RunOptions};
use hpcnet_workloads::Scenario;
use std::path::PathBuf;

fn scenario(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios")).join(name)
}

/// Accepted load over the channel-load bound at offered load 1.0, with `set` on top.
fn saturation(name: &str, set: &[&str]) -> f64 {
    let mut o: Vec<String> = vec![
        "traffic.load=1.0".into(),
        "traffic.pattern=uniform".into(),
        "router.allocator=islip".into(),
        "router.islip_iterations=1".into(),
        "sim.warmup=2us".into(),
        "sim.measure=6us".into(),
    ];
    o.extend(set.iter().map(|s| s.to_string()));
    let sc = Scenario::load(&scenario(name), &o).unwrap_or_else(|e| panic!("{name}: {e}"));
    let r = run_synthetic(&sc, RunOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(r.conservation_ok, "{name} {set:?}: conservation");
    r.accepted_over_bound.expect("the run reports its channel-load bound")
}

/// One network: speedup 1 well below the bound; more VCs and input speedup 2 both higher.
fn check(name: &str, vcs_few: &str, vcs_more: &str, credits: &str) {
    let base = saturation(name, &[vcs_few, credits, "router.input_speedup=1"]);
    let more_vcs = saturation(name, &[vcs_more, credits, "router.input_speedup=1"]);
    let speedup = saturation(name, &[vcs_few, credits, "router.input_speedup=2"]);
    eprintln!("{name}: speedup 1 {base:.3}, more VCs {more_vcs:.3}, speedup 2 {speedup:.3}");
    assert!(
        base < 0.85,
        "{name}: input speedup 1 saturates at {base:.3} of the bound"
    );
    assert!(more_vcs > base + 0.02, "{name}: more VCs {more_vcs:.3} vs {base:.3}");
    assert!(speedup > base + 0.02, "{name}: speedup 2 {speedup:.3} vs {base:.3}");
}

#[test]
fn torus_8x8_saturates_below_the_bound_and_gains_with_vcs_and_speedup() {
    check(
        "torus-8x8.toml",
        "router.vcs=2",
        "router.vcs=4",
        "router.private_credits=16",
    );
}

#[test]
fn torus_8x8x8_saturates_below_the_bound_and_gains_with_vcs_and_speedup() {
    check(
        "torus-8x8x8.toml",
        "router.vcs=2",
        "router.vcs=4",
        "router.private_credits=16",
    );
}

#[test]
fn fat_tree_4ary_3tree_saturates_below_the_bound_and_gains_with_vcs_and_speedup() {
    check(
        "fattree-4ary-3tree.toml",
        "router.vcs=2",
        "router.vcs=4",
        "router.private_credits=16",
    );
}
