//! `hpcnet run`: one synthetic-traffic simulation.

use crate::replicas::{self, LEVEL};
use crate::{Common, Failure};
use hpcnet_des::SimTime;
use hpcnet_workloads::synthetic::{run_synthetic, RunError, RunOptions, RunReport};
use hpcnet_workloads::Scenario;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

pub fn load(path: &Path, common: &Common) -> Result<Scenario, Failure> {
    Scenario::load(path, &common.set).map_err(Failure::input)
}

/// Run with a progress bar on a terminal once the run has taken more than a second.
pub fn run_with_progress(sc: &Scenario, show: bool, link_detail: bool) -> Result<RunReport, Failure> {
    let started = Instant::now();
    let mut bar: Option<ProgressBar> = None;
    let mut cb = |now: SimTime, end: SimTime| {
        if !show || started.elapsed() < Duration::from_secs(1) {
            return;
        }
        let b = bar.get_or_insert_with(|| {
            let b = ProgressBar::new(1000);
            b.set_style(
                ProgressStyle::with_template("{msg} [{bar:40}] {percent}% ({elapsed})").expect("valid template"),
            );
            b.set_message(sc.name.clone());
            b
        });
        let f = (now.0 as f64 / end.0.max(1) as f64).min(1.0);
        b.set_position((f * 1000.0) as u64);
    };
    let r = run_synthetic(
        sc,
        RunOptions {
            progress: Some(&mut cb),
            link_detail,
        },
    );
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    r.map_err(|e| match e {
        RunError::Config(m) => Failure::input(m),
        RunError::Conservation(m) => Failure::model(format!("conservation violated: {m}")),
    })
}

pub fn run(path: &Path, common: &Common, links: Option<&Path>) -> Result<(), Failure> {
    let sc = load(path, common)?;
    let mut rep = run_with_progress(
        &sc,
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        links.is_some(),
    )?;
    if let Some(file) = links {
        write_links(&rep, file)?;
        rep.links = None;
    }
    if let (true, Some(why)) = (common.json, &rep.channel_load_bound_skipped) {
        eprintln!("warning: channel-load bound not computed: {why}");
    }
    if common.json {
        outln!("{}", serde_json::to_string_pretty(&rep).expect("report serialises"));
    } else {
        print_text(&rep);
    }
    if let Some(d) = &rep.deadlock {
        let evidence = if d.cycle.is_empty() {
            "no event was left to move them".to_string()
        } else if d.occupied_vcs {
            format!(
                "{} occupied VCs, none able to move: {}",
                d.cycle.len(),
                cycle_text(&d.cycle)
            )
        } else {
            format!("cycle of {} waiting queues: {}", d.cycle.len(), cycle_text(&d.cycle))
        };
        return Err(Failure::model(format!(
            "deadlock: {} packets in flight and {} at sources stopped moving at {:.1} ns; {evidence} ({} blocked queues listed{})",
            d.in_flight,
            d.queued_at_sources,
            d.at_ns,
            d.blocked.len(),
            if common.json { " in the JSON" } else { " above" }
        )));
    }
    if rep.latency_ns.mean.is_none() {
        return Err(Failure::model(format!(
            "no packet measured: {} packets created in the measurement window, {} delivered ({} dropped in the run), so the latency figures are empty",
            rep.measured_packets, rep.measured_delivered, rep.packets_dropped
        )));
    }
    if let Some(f) = undrained_failure(&sc, &rep) {
        return Err(f);
    }
    Ok(())
}

/// `hpcnet run --replications N`: the scenario with N seeds on worker threads, a line per
/// replication and the estimate of each figure over those that completed.
pub fn run_replicated(
    path: &Path,
    common: &Common,
    n: u32,
    threads: Option<usize>,
    precision: Option<f64>,
) -> Result<(), Failure> {
    let base = load(path, common)?;
    let mut seeds = replicas::seeds(base.file.seed, n);
    let threads = threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let started = Instant::now();
    // A bar of replications done, on a terminal (each run's own bar would interleave).
    let bar = (std::io::IsTerminal::is_terminal(&std::io::stderr()) && !common.json).then(|| {
        let b = ProgressBar::new(u64::from(n));
        b.set_style(
            ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} replications ({elapsed})")
                .expect("valid template"),
        );
        b.set_message(base.name.clone());
        b
    });
    // Each replication reads its scenario when it starts (the seed is its only difference from
    // `base`, which was validated above), so N replications hold as many scenarios as threads.
    let run_one = |i: usize| {
        let r = replicas::load_seeded(path, &common.set, seeds[i]).and_then(|sc| run_with_progress(&sc, false, false));
        if let Some(b) = &bar {
            b.inc(1);
        }
        r
    };
    let mut reports = Vec::new();
    let mut reached = None;
    match precision {
        None => {
            for r in replicas::par_indexed(seeds.len(), threads, run_one) {
                reports.push(r?);
            }
        }
        Some(p) => {
            // Waves of one replication per thread, until a prefix reaches the target, a
            // replication does not complete, or all N ran; then the replications beyond the
            // prefix that reached it are dropped.
            while reports.len() < seeds.len() {
                let from = reports.len();
                let to = (from + threads).min(seeds.len());
                for r in replicas::par_indexed(to - from, threads, |j| run_one(from + j)) {
                    reports.push(r?);
                }
                if reports[from..to].iter().any(|r| verdict(&base, r).is_some()) {
                    break;
                }
                let refs: Vec<&RunReport> = reports.iter().collect();
                reached = replicas::precise_prefix(&refs, p);
                if let Some(k) = reached {
                    reports.truncate(k);
                    break;
                }
            }
            seeds.truncate(reports.len());
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let wall = started.elapsed().as_secs_f64();
    let verdicts: Vec<Option<&'static str>> = reports.iter().map(|r| verdict(&base, r)).collect();
    let complete: Vec<&RunReport> = reports
        .iter()
        .zip(&verdicts)
        .filter(|(_, v)| v.is_none())
        .map(|(r, _)| r)
        .collect();
    let estimates = replicas::estimates(&complete);
    let precision_json = precision.map(|p| {
        serde_json::json!({
            "target": p,
            "figures": replicas::PRECISION_FIGURES,
            "reached": reached.is_some(),
            "relative_half_widths": replicas::relative_half_widths(&complete)
                .into_iter()
                .map(|(k, r)| (k.to_string(), serde_json::json!(r)))
                .collect::<serde_json::Map<_, _>>(),
        })
    });
    if common.json {
        let v = serde_json::json!({
            "scenario": base.name,
            "version": env!("CARGO_PKG_VERSION"),
            "replications": reports.len(),
            "max_replications": n,
            "seeds": seeds,
            "precision": precision_json,
            "confidence_level": LEVEL,
            "complete": complete.len(),
            "estimates": estimates.iter().map(|(k, e)| (k.to_string(), serde_json::json!(e))).collect::<serde_json::Map<_, _>>(),
            "runs": reports.iter().zip(&verdicts).map(|(r, v)| {
                let mut j = serde_json::to_value(r).expect("report serialises");
                j["status"] = serde_json::json!(v.unwrap_or("ok"));
                j
            }).collect::<Vec<_>>(),
            "resolved_scenario": base.resolved_json(),
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        print_replications(&base, &reports, &verdicts, &estimates, threads, wall);
        if let Some(p) = precision {
            let widths: Vec<String> = replicas::relative_half_widths(&complete)
                .into_iter()
                .map(|(k, r)| format!("{k} ±{}", r.map_or("-".to_string(), |r| format!("{:.2} %", r * 100.0))))
                .collect();
            let how = match reached {
                Some(k) => format!("reached with {k} replications"),
                None => format!("not reached within {} of at most {n} replications", reports.len()),
            };
            outln!(
                "  precision       ±{:.2} % of the mean (95 % interval): {how}; {}",
                p * 100.0,
                widths.join(", ")
            );
        }
    }
    let failed: Vec<String> = seeds
        .iter()
        .zip(&verdicts)
        .filter_map(|(s, v)| v.map(|v| format!("seed {s}: {v}")))
        .collect();
    if !failed.is_empty() {
        let over = match complete.len() {
            0 | 1 => "no estimate is made from fewer than two".to_string(),
            k => format!("the estimates are over the other {k}"),
        };
        return Err(Failure::model(format!(
            "{} of {} replications did not complete ({}); {over}",
            failed.len(),
            reports.len(),
            failed.join(", ")
        )));
    }
    Ok(())
}

fn print_replications(
    base: &Scenario,
    reports: &[RunReport],
    verdicts: &[Option<&'static str>],
    estimates: &[(&'static str, Option<hpcnet_des::Estimate>)],
    threads: usize,
    wall: f64,
) {
    outln!(
        "hpcnet {} — scenario '{}', {} replications (seeds {} to {})",
        env!("CARGO_PKG_VERSION"),
        base.name,
        reports.len(),
        reports.first().map_or(0, |r| r.seed),
        reports.last().map_or(0, |r| r.seed)
    );
    let col = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |x| format!("{x:.digits$}"));
    outln!(
        "  {:>20} {:>9} {:>10} {:>10} {:>10} {:>8}",
        "seed",
        "accepted",
        "mean ns",
        "p50 ns",
        "p99 ns",
        "hops"
    );
    for (r, v) in reports.iter().zip(verdicts) {
        outln!(
            "  {:>20} {:>9.4} {:>10} {:>10} {:>10} {:>8}{}",
            r.seed,
            r.accepted_load,
            col(r.latency_ns.mean, 1),
            col(r.latency_ns.p50, 1),
            col(r.latency_ns.p99, 1),
            col(r.mean_hops, 3),
            v.map_or(String::new(), |v| format!("  {} (left out)", v.to_uppercase()))
        );
    }
    let complete = verdicts.iter().filter(|v| v.is_none()).count();
    if complete < 2 {
        outln!(
            "  no estimates: {complete} of {} replications completed, an estimate needs two",
            reports.len()
        );
    } else {
        print_estimates(estimates, complete);
    }
    let (events, sim): (u64, f64) = reports
        .iter()
        .fold((0, 0.0), |(e, s), r| (e + r.events, s + r.sim_time_ns));
    outln!(
        "  run             {events} events, {:.1} us simulated in all, {wall:.3} s wall on {threads} threads",
        sim / 1e3
    );
}

fn print_estimates(estimates: &[(&'static str, Option<hpcnet_des::Estimate>)], complete: usize) {
    outln!(
        "  estimates over {complete} replications: mean ± half-width of the {:.0} % confidence interval (Student t, {} degrees of freedom); standard deviation; range",
        LEVEL * 100.0,
        complete.saturating_sub(1)
    );
    for (name, e) in estimates {
        let digits = match *name {
            "accepted_load" => 4,
            "mean_hops" => 3,
            _ => 1,
        };
        match e {
            Some(e) => outln!(
                "    {:<20} {:>22}  sd {:.digits$}  range {:.digits$} to {:.digits$}",
                name,
                replicas::pm(Some(e), digits),
                e.std_dev,
                e.min,
                e.max
            ),
            None => outln!("    {name:<20} {:>22}", "-"),
        }
    }
}

/// What went wrong in a run that ended without an error, if anything: a deadlock, no packet
/// measured, or packets left in the network at the end (unless the scenario accepts that,
/// `sim.allow_undrained`). Such a run's figures are not estimates of the scenario's.
pub fn verdict(sc: &Scenario, r: &RunReport) -> Option<&'static str> {
    if r.deadlock.is_some() {
        Some("deadlock")
    } else if r.latency_ns.mean.is_none() {
        Some("no packet measured")
    } else if !r.drained && !sc.file.sim.allow_undrained {
        Some("not drained")
    } else {
        None
    }
}

fn write_links(rep: &RunReport, file: &Path) -> Result<(), Failure> {
    let io = |e: std::io::Error| Failure::input(format!("{}: {e}", file.display()));
    let mut f = std::io::BufWriter::new(std::fs::File::create(file).map_err(io)?);
    writeln!(f, "link,busy_ps,utilisation").map_err(io)?;
    for l in rep.links.iter().flatten() {
        writeln!(f, "{},{},{:.6}", l.link, l.busy_ps, l.utilisation).map_err(io)?;
    }
    f.flush().map_err(io)
}

/// A wait cycle as `r3.p1.vc0 -> r4.p2.vc0 -> ... -> r3.p1.vc0` (router, input port, VC),
/// at most 8 queues then the count of the rest.
pub fn cycle_text(cycle: &[hpcnet_fabric::net::Blocked]) -> String {
    let name = |b: &hpcnet_fabric::net::Blocked| format!("r{}.p{}.vc{}", b.router.0, b.in_port.0, b.vc);
    let mut parts: Vec<String> = cycle.iter().take(8).map(name).collect();
    if cycle.len() > 8 {
        parts.push(format!("... {} more", cycle.len() - 8));
    }
    if let Some(first) = cycle.first() {
        parts.push(name(first));
    }
    parts.join(" -> ")
}

/// "conservation ok", with what was left undelivered when the run ended before draining.
pub fn conservation_line(r: &RunReport) -> String {
    let verdict = if r.conservation_ok { "ok" } else { "VIOLATED" };
    if r.drained {
        return format!("conservation {verdict}");
    }
    format!(
        "conservation {verdict}, {} packets still in flight and {} at sources at the end (not drained)",
        r.packets_in_flight, r.packets_queued_at_sources
    )
}

/// Why a finished run without deadlock is not a success: it ended before every packet was
/// delivered or dropped, and the scenario did not accept that (`sim.allow_undrained`).
pub fn undrained_failure(sc: &Scenario, r: &RunReport) -> Option<Failure> {
    if r.drained || r.deadlock.is_some() || sc.file.sim.allow_undrained {
        return None;
    }
    Some(Failure::model(format!(
        "not drained: {} packets still in flight and {} at sources when the run ended after sim.drain = {} (lengthen sim.drain, or set sim.allow_undrained = true to accept)",
        r.packets_in_flight, r.packets_queued_at_sources, sc.file.sim.drain
    )))
}

pub fn print_text(r: &RunReport) {
    outln!("hpcnet {} — scenario '{}' (seed {})", r.version, r.scenario, r.seed);
    outln!(
        "  machine         {} nodes, {}, routing {}",
        r.nodes,
        r.topology,
        r.routing
    );
    outln!(
        "  packets         generated {}  injected {}  delivered {}  dropped {}",
        r.packets_generated,
        r.packets_injected,
        r.packets_delivered,
        r.packets_dropped
    );
    for (k, v) in &r.drops_by_reason {
        outln!("    dropped       {v} ({k})");
    }
    if let Some(f) = &r.faults {
        let s = &f.stats;
        outln!(
            "  faults          {} failures, {} repairs; lost {} on cables, {} in routers, {} sent before detection; tables rewritten {} times",
            s.failures,
            s.repairs,
            s.lost_in_cable,
            s.lost_in_router,
            s.sent_before_detection,
            s.table_updates
        );
        if s.bypass_pairs + s.bypass_unreachable > 0 {
            outln!(
                "    bypass        {} router pairs rerouted ({} with a first step, {} with a last step, {} the long way round), {} unreachable",
                s.bypass_pairs,
                s.bypass_first_steps,
                s.bypass_last_steps,
                s.bypass_long_way,
                s.bypass_unreachable
            );
        }
        for e in &f.events {
            let detected = e
                .detected_ns
                .map(|d| format!(", detected at {:.1} ns", d))
                .unwrap_or_default();
            outln!(
                "    {:>12.1} ns {} {}{}{}",
                e.at_ns,
                e.action,
                e.component,
                if e.random { " (random)" } else { "" },
                detected
            );
        }
        outln!("  timeline        window (us)        delivered  accepted  latency (ns)  dropped");
        for b in &f.timeline {
            let lat = b
                .mean_latency_ns
                .map(|l| format!("{l:12.1}"))
                .unwrap_or_else(|| format!("{:>12}", "-"));
            outln!(
                "                  {:>8.2} – {:>8.2} {:>10} {:>9.4} {} {:>8}",
                b.from_ns / 1e3,
                b.to_ns / 1e3,
                b.delivered,
                b.accepted_load,
                lat,
                b.dropped
            );
        }
    }
    outln!(
        "  load            offered {:.4}  accepted {:.4}  ({:.3} GB/s per node of {:.3})",
        r.offered_load,
        r.accepted_load,
        r.accepted_gbytes_per_node,
        r.node_bandwidth_gbytes
    );
    if let Some(b) = &r.channel_load_bound {
        outln!(
            "  bound           channel-load bound {:.4} (busiest channel {} at load {:.3}); accepted/bound {:.3}",
            b.saturation_bound,
            b.channel,
            b.max_channel_load,
            r.accepted_over_bound.unwrap_or(0.0)
        );
        if !b.by_symmetry && b.sources_traced < r.nodes {
            outln!(
                "                  (estimate from {} of {} sources: a sample's busiest channel is biased high, so the bound is biased low)",
                b.sources_traced,
                r.nodes
            );
        }
    }
    if let Some(why) = &r.channel_load_bound_skipped {
        outln!("  bound           not computed: {why}");
    }
    let l = &r.latency_ns;
    match (l.mean, l.p50, l.p99, l.max) {
        (Some(mean), Some(p50), Some(p99), Some(max)) => {
            outln!("  latency (ns)    mean {mean:.1}  p50 {p50:.1}  p99 {p99:.1}  max {max:.1}");
        }
        _ => outln!(
            "  latency (ns)    no packet measured ({} created in the measurement window, {} of them delivered)",
            r.measured_packets,
            r.measured_delivered
        ),
    }
    if let (Some(net), Some(zero), Some(hops)) = (r.network_latency_ns, r.zero_load_latency_ns, r.mean_hops) {
        outln!("  network latency {net:.1} ns; zero-load analytical {zero:.1} ns; mean hops {hops:.3}");
    }
    let u = &r.link_utilisation;
    outln!(
        "  links           utilisation mean {:.3} (router links {:.3}), max {:.3} at {}",
        u.mean,
        u.mean_router_links,
        u.max,
        u.max_link
    );
    if let Some(line) = link_level_line(r) {
        outln!("  link level      {line}");
    }
    if let Some(t) = &r.table_memory {
        outln!(
            "  route tables    two-level {} entries vs flat {} ({:.1} % less; supernode {} endpoints)",
            t.two_level_entries,
            t.flat_entries,
            t.saving_percent,
            t.supernode_size
        );
    }
    outln!(
        "  run             {} events, {:.1} us simulated, {:.3} s wall, drained {}, {}",
        r.events,
        r.sim_time_ns / 1e3,
        r.wall_seconds,
        r.drained,
        conservation_line(r)
    );
    if let Some(d) = &r.deadlock {
        if !d.cycle.is_empty() {
            let what = if d.occupied_vcs { "occupied VCs" } else { "cycle" };
            outln!("  DEADLOCK {what}  {}", cycle_text(&d.cycle));
        }
        outln!(
            "  DEADLOCK at {:.1} ns: {} packets in flight; blocked input channels:",
            d.at_ns,
            d.in_flight
        );
        for b in &d.blocked {
            outln!(
                "    router {} in port {} vc {} ({} queued): head to node {} wants port {} vc {}, needs {} credits, {} free",
                b.router, b.in_port, b.vc, b.queued, b.head_dst, b.out_port, b.out_vc, b.credits_needed, b.credits_free
            );
        }
    }
}

/// The link-level reliability counters of a run in one line, when any is not zero.
fn link_level_line(r: &RunReport) -> Option<String> {
    if r.link_errors.is_empty() {
        return None;
    }
    let sum = |f: &dyn Fn(&hpcnet_fabric::linkerr::LinkCounters) -> u64| -> u64 {
        r.link_errors.iter().map(|l| f(&l.counters)).sum()
    };
    let mut line = format!(
        "{} packets corrupted, {} retransmissions, {} corrupted copies forwarded; {} replay-buffer stalls ({:.1} ns)",
        sum(&|c| c.corrupted_packets),
        sum(&|c| c.retransmissions),
        sum(&|c| c.corrupt_forwarded),
        sum(&|c| c.replay_stalls),
        sum(&|c| c.replay_stall_ps) as f64 / 1e3
    );
    let fell: Vec<&str> = r
        .link_errors
        .iter()
        .filter(|l| l.counters.saf_fallbacks > 0)
        .map(|l| l.from.as_str())
        .collect();
    if !fell.is_empty() {
        // The first few links by name; the JSON `link_errors` lists them all.
        const SHOWN: usize = 6;
        let more = fell.len().saturating_sub(SHOWN);
        line += &format!(
            "; store-and-forward fallbacks {} (restored {}) on {}{}",
            sum(&|c| c.saf_fallbacks),
            sum(&|c| c.saf_restores),
            fell[..fell.len().min(SHOWN)].join(", "),
            if more > 0 {
                format!(" and {more} more links")
            } else {
                String::new()
            }
        );
    }
    Some(line)
}
