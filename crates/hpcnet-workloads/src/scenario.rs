//! The scenario: one TOML file that describes a machine and what runs on it.
//!
//! Loading is two-stage (as ripgrep's LowArgs → HiArgs): the file is parsed into a TOML table,
//! `--set key.path=value` overrides are applied to the table, the table is deserialised into
//! typed structs that deny unknown keys, and a validation pass checks cross-field constraints.
//! Every failure becomes one [`ScenarioError`] naming the file, the key path and the reason.

use crate::traffic::TrafficConfig;
use hpcnet_des::SimTime;
use hpcnet_fabric::config::{FaultConfig, LinkConfig, LinkOverride, PacketConfig, RouterConfig, RoutingConfig};
use hpcnet_fabric::topology::{build, Topology, TopologyConfig};
use hpcnet_fabric::FabricConfig;
use serde::{Deserialize, Serialize};
use std::path::Path;

fn d_seed() -> u64 {
    1
}

/// `[sim]`: phases of a synthetic run.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Traffic runs this long before measurement starts (default "2 us").
    #[serde(default = "d_warmup")]
    pub warmup: SimTime,
    /// Packets created in this window are measured (default "10 us").
    #[serde(default = "d_measure")]
    pub measure: SimTime,
    /// After measurement, injection stops and the network drains for at most this long
    /// (default "1 ms").
    #[serde(default = "d_drain")]
    pub drain: SimTime,
}

fn d_warmup() -> SimTime {
    SimTime::from_us(2)
}
fn d_measure() -> SimTime {
    SimTime::from_us(10)
}
fn d_drain() -> SimTime {
    SimTime::from_ms(1)
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            warmup: d_warmup(),
            measure: d_measure(),
            drain: d_drain(),
        }
    }
}

/// The scenario file as written.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Short name used in reports (default: file stem).
    #[serde(default)]
    pub name: Option<String>,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// Seed of every random stream of the run (default 1).
    #[serde(default = "d_seed")]
    pub seed: u64,
    pub topology: TopologyConfig,
    pub link: LinkConfig,
    #[serde(default)]
    pub link_overrides: Vec<LinkOverride>,
    pub router: RouterConfig,
    #[serde(default)]
    pub packet: PacketConfig,
    /// Default: the topology family's natural algorithm.
    #[serde(default)]
    pub routing: Option<RoutingConfig>,
    #[serde(default)]
    pub faults: FaultConfig,
    #[serde(default)]
    pub traffic: Option<TrafficConfig>,
    #[serde(default)]
    pub sim: SimConfig,
}

/// A loaded, validated scenario: the resolved configuration and the built topology.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub source: String,
    pub file: ScenarioFile,
    pub topology: Topology,
    pub fabric: FabricConfig,
    pub traffic: TrafficConfig,
}

/// A scenario problem: where (file and key) and why. Displays as one line.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("{file}: {key}{sep}{reason}", sep = if key.is_empty() { "" } else { ": " })]
pub struct ScenarioError {
    pub file: String,
    pub key: String,
    pub reason: String,
}

impl ScenarioError {
    fn new(file: &str, key: impl Into<String>, reason: impl Into<String>) -> Self {
        ScenarioError {
            file: file.to_string(),
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// Apply `key.path=value` to a TOML table. The value is parsed as TOML (`4`, `"20 ns"`,
/// `[8, 8]`, `true`); a bare word that is not valid TOML is taken as a string (`uniform`).
pub fn apply_override(table: &mut toml::Table, spec: &str) -> Result<(), (String, String)> {
    let (path, raw) = spec.split_once('=').ok_or_else(|| {
        (
            spec.to_string(),
            "an override must look like key.path=value".to_string(),
        )
    })?;
    let path = path.trim();
    let raw = raw.trim();
    let value: toml::Value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").expect("parsed key"),
        Err(_) => toml::Value::String(raw.to_string()),
    };
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err((path.to_string(), "empty key in override path".to_string()));
    }
    let mut cur = table;
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            cur.insert(part.to_string(), value);
            return Ok(());
        }
        let entry = cur
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = match entry {
            toml::Value::Table(t) => t,
            _ => {
                return Err((
                    parts[..=i].join("."),
                    "is not a table, cannot set a key inside it".to_string(),
                ))
            }
        };
    }
    Ok(())
}

impl Scenario {
    /// Read and validate a scenario file with overrides.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|e| ScenarioError::new(&file, "", format!("cannot read: {e}")))?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_else(|| "scenario".into());
        Self::from_str_named(&text, &file, &stem, overrides)
    }

    /// Parse scenario text; `file` names it in errors.
    pub fn from_str_named(
        text: &str,
        file: &str,
        default_name: &str,
        overrides: &[String],
    ) -> Result<Scenario, ScenarioError> {
        let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let line = e.span().map(|s| text[..s.start].lines().count().max(1));
            let msg = e.message().trim().to_string();
            ScenarioError::new(
                file,
                line.map(|l| format!("line {l}")).unwrap_or_default(),
                format!("TOML syntax: {msg}"),
            )
        })?;
        for o in overrides {
            apply_override(&mut table, o).map_err(|(k, r)| ScenarioError::new(file, format!("--set {k}"), r))?;
        }
        let de = toml::Value::Table(table);
        let parsed: ScenarioFile = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let key = if key == "." { String::new() } else { key };
            ScenarioError::new(file, key, clean_serde_message(&e.into_inner().to_string()))
        })?;
        Self::resolve(parsed, file, default_name)
    }

    fn resolve(parsed: ScenarioFile, file: &str, default_name: &str) -> Result<Scenario, ScenarioError> {
        let topology = build(&parsed.topology)
            .map_err(|e| ScenarioError::new(file, e.key().to_string(), strip_key(&e.to_string(), e.key())))?;
        let routing = parsed
            .routing
            .clone()
            .unwrap_or_else(|| RoutingConfig::default_for(&topology.shape));
        let fabric = FabricConfig {
            link: parsed.link.clone(),
            link_overrides: parsed.link_overrides.clone(),
            router: parsed.router.clone(),
            packet: parsed.packet.clone(),
            routing,
            faults: parsed.faults.clone(),
        };
        fabric
            .validate(&topology)
            .map_err(|e| ScenarioError::new(file, e.key, e.reason))?;
        let traffic = parsed.traffic.clone().unwrap_or_default();
        traffic
            .validate(&topology, &fabric)
            .map_err(|(k, r)| ScenarioError::new(file, k, r))?;
        if parsed.sim.measure == SimTime::ZERO {
            return Err(ScenarioError::new(file, "sim.measure", "must be longer than 0"));
        }
        let name = parsed.name.clone().unwrap_or_else(|| default_name.to_string());
        Ok(Scenario {
            name,
            source: file.to_string(),
            file: parsed,
            topology,
            fabric,
            traffic,
        })
    }

    /// The resolved scenario (defaults filled in) as JSON, for reports.
    pub fn resolved_json(&self) -> serde_json::Value {
        let mut f = self.file.clone();
        f.routing = Some(self.fabric.routing.clone());
        f.traffic = Some(self.traffic.clone());
        serde_json::to_value(&f).expect("scenario serialises")
    }
}

/// serde messages sometimes repeat the key or add TOML snippets; keep one line.
fn clean_serde_message(m: &str) -> String {
    m.lines().next().unwrap_or(m).trim().to_string()
}

fn strip_key(msg: &str, key: &str) -> String {
    msg.strip_prefix(key)
        .and_then(|s| s.strip_prefix(": "))
        .unwrap_or(msg)
        .to_string()
}
