//! Topology export: Graphviz DOT for drawing, JSON for tools.

use std::fmt::Write;

use serde_json::json;

use super::Topology;

impl Topology {
    /// Graphviz (undirected) graph: routers as boxes labelled with id and coords, nodes as small
    /// circles, one edge per link with the port numbers at its ends (`taillabel`/`headlabel`).
    pub fn to_dot(&self) -> String {
        let mut out = String::new();
        let name = self.name.replace('\\', "\\\\").replace('"', "\\\"");
        // Writing to a String cannot fail.
        let _ = writeln!(out, "graph \"{name}\" {{\n  node [shape=box];");
        for (r, info) in self.routers.iter().enumerate() {
            let coords: Vec<String> = info.coords.iter().map(u32::to_string).collect();
            let _ = writeln!(out, "  r{r} [label=\"r{r} ({})\"];", coords.join(","));
        }
        for x in 0..self.nodes.len() {
            let _ = writeln!(
                out,
                "  n{x} [shape=circle, width=0.3, fixedsize=true, fontsize=8, label=\"n{x}\"];"
            );
        }
        for l in self.links() {
            let _ = writeln!(
                out,
                "  r{} -- r{} [taillabel=\"{}\", headlabel=\"{}\"];",
                l.a.0, l.b.0, l.a.1, l.b.1
            );
        }
        for (x, node) in self.nodes.iter().enumerate() {
            for (rail, &(r, p)) in node.ports.iter().enumerate() {
                let _ = writeln!(out, "  n{x} -- r{r} [taillabel=\"{rail}\", headlabel=\"{p}\"];");
            }
        }
        out.push_str("}\n");
        out
    }

    /// JSON document: name, shape, rails, routers (ports, kinds, coords), nodes (rail → router
    /// port), the undirected router links, and [`Topology::metrics`].
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "name": self.name,
            "shape": self.shape,
            "rails": self.rails,
            "routers": self.routers,
            "nodes": self.nodes,
            "links": self.links().collect::<Vec<_>>(),
            "metrics": self.metrics(),
        })
    }
}
