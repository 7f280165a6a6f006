//! `hpcnet topo`: describe a scenario's topology and export it.

use crate::{run::load, Common, Failure};
use std::path::Path;

pub fn topo(path: &Path, dot: Option<&Path>, common: &Common) -> Result<(), Failure> {
    let sc = load(path, common)?;
    let t = &sc.topology;
    if let Some(file) = dot {
        std::fs::write(file, t.to_dot()).map_err(|e| Failure::input(format!("{}: {e}", file.display())))?;
    }
    let m = t.metrics();
    if common.json {
        let v = serde_json::json!({
            "scenario": sc.name,
            "version": env!("CARGO_PKG_VERSION"),
            "seed": sc.file.seed,
            "metrics": m,
            "topology": t.to_json(),
            "resolved_scenario": sc.resolved_json(),
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return Ok(());
    }
    outln!("hpcnet {} — topology of '{}'", env!("CARGO_PKG_VERSION"), sc.name);
    outln!("  name            {}", t.name);
    outln!(
        "  nodes           {} ({} rail{})",
        m.nodes,
        t.rails,
        if t.rails == 1 { "" } else { "s" }
    );
    outln!("  routers         {}", m.routers);
    outln!(
        "  links           {} router–router, {} node–router",
        m.router_links,
        m.node_links
    );
    outln!(
        "  diameter        {} router-to-router hops{}",
        m.diameter,
        if m.sampled { " (sampled)" } else { "" }
    );
    outln!(
        "  mean distance   {:.4} router-to-router hops (ordered pairs of distinct nodes)",
        m.mean_distance
    );
    outln!(
        "  bisection width {} links ({:?}; id-order cut {})",
        m.bisection_links,
        m.bisection_method,
        m.bisection_cut_by_id
    );
    if let Some(file) = dot {
        outln!("  dot             written to {}", file.display());
    }
    Ok(())
}
