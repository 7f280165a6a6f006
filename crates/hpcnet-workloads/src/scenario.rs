//! The scenario: one TOML file that describes a machine and what runs on it.
//!
//! Loading is two-stage (as ripgrep's LowArgs → HiArgs): the file is parsed into a TOML table,
//! `--set key.path=value` overrides are applied to the table, the table is deserialised into
//! typed structs that deny unknown keys, and a validation pass checks cross-field constraints.
//! Every failure becomes one [`ScenarioError`] naming the file, the key path and the reason.

use crate::traffic::TrafficConfig;
use hpcnet_des::{BitsPerSec, Bytes, SimTime};
use hpcnet_fabric::config::{
    FaultConfig, LinkConfig, LinkOverride, PacketConfig, RouterConfig, RoutingConfig, VcSelect,
};
use hpcnet_fabric::topology::{
    build, DragonflyConfig, FatTreeConfig, GeneralizedFatTreeConfig, GridConfig, HypercubeConfig, LeafSpineConfig,
    SizeEstimate, Topology, TopologyConfig, MAX_ELEMENTS,
};
use hpcnet_fabric::{FabricConfig, Network};
use hpcnet_nic::{NicConfig, World};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_path_to_error::Segment;
use std::path::Path;

fn d_seed() -> u64 {
    1
}

/// A seed as a non-negative TOML integer or a string of decimal digits (the whole `u64` range).
fn seed_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use serde::de::{self, Visitor};
    struct V;
    impl Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a seed from 0 to 18446744073709551615 (an integer, or a string for seeds above 2^63 - 1)")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(format!("a seed must not be negative, got {v}")))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            v.trim()
                .parse()
                .map_err(|_| E::custom(format!("a seed must be an integer from 0 to {}, got \"{v}\"", u64::MAX)))
        }
    }
    d.deserialize_any(V)
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
    /// Accept a run that ends with packets still in flight or at their sources after the drain
    /// (default false: `hpcnet run` then exits with code 1). The report counts them either way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_undrained: bool,
    /// Refuse, before building it, a machine whose estimated simulator memory exceeds the
    /// memory available (`MemAvailable` of /proc/meminfo); false skips the check (default true).
    #[serde(default = "d_true", skip_serializing_if = "is_true")]
    pub memory_check: bool,
}

fn d_true() -> bool {
    true
}
fn is_true(b: &bool) -> bool {
    *b
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
            allow_undrained: false,
            memory_check: true,
        }
    }
}

/// `[coll]`: host software costs and transport settings of the collectives library
/// (`hpcnet-coll`). Defaults and their sources: [`hpcnet_coll::HostCosts`],
/// [`hpcnet_coll::TransportConfig`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CollSettings {
    /// Entering a collective (default 200 ns).
    #[serde(default = "d_per_call")]
    pub per_call: SimTime,
    /// Building and posting one work request (default 100 ns).
    #[serde(default = "d_per_post")]
    pub per_post: SimTime,
    /// Taking one completion (default 50 ns).
    #[serde(default = "d_per_poll")]
    pub per_poll: SimTime,
    /// Copying bytes to and from the registered buffers (default 80 Gb/s).
    #[serde(default = "d_copy_rate")]
    pub copy_rate: BitsPerSec,
    /// Reduction rate per datatype, in bits of one operand per second (default 32 Gb/s each).
    #[serde(default)]
    pub reduce_rate: ReduceRates,
    /// Largest payload of one transport chunk (default 4 KiB).
    #[serde(default = "d_chunk")]
    pub chunk: Bytes,
    /// Chunks in flight per ordered pair of members (default 4).
    #[serde(default = "d_window")]
    pub window: u32,
    /// Messages the receiver keeps as they are (broadcast, gather and allgather steps) of at
    /// least this size go by rendezvous: control message, RDMA read by the receiver, FIN
    /// (default: absent, every message eager).
    #[serde(default)]
    pub rendezvous: Option<Bytes>,
    /// Operating-system noise on the host CPU of every rank: `"none"` (default), `"periodic"`
    /// (a detour of `noise_duration` every `noise_interval`, at a random phase per rank) or
    /// `"poisson"` (detours of `noise_duration` arriving with mean gap `noise_interval`). See
    /// [`hpcnet_coll::noise`].
    #[serde(default, skip_serializing_if = "NoiseKind::is_none")]
    pub noise: NoiseKind,
    /// Period (periodic) or mean gap (poisson) of the detours; required with noise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_interval: Option<SimTime>,
    /// Length of one detour, shorter than `noise_interval`; required with noise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_duration: Option<SimTime>,
}

/// `coll.noise`: the detour pattern of the host CPUs.
#[derive(Copy, Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NoiseKind {
    #[default]
    None,
    Periodic,
    Poisson,
}

impl NoiseKind {
    fn is_none(&self) -> bool {
        *self == NoiseKind::None
    }

    fn name(self) -> &'static str {
        match self {
            NoiseKind::None => "none",
            NoiseKind::Periodic => "periodic",
            NoiseKind::Poisson => "poisson",
        }
    }
}

/// `[shmem]`: host software costs of the OpenSHMEM library (`hpcnet-shmem`). Defaults and
/// their sources: [`hpcnet_shmem::ShmemCosts`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShmemSettings {
    /// Entering a library call (default 50 ns).
    #[serde(default = "d_shmem_per_call")]
    pub per_call: SimTime,
    /// Handing the NIC one operation (default 100 ns).
    #[serde(default = "d_shmem_per_post")]
    pub per_post: SimTime,
    /// Looking again after a wait: a completion waited for, a watched word re-read (default
    /// 50 ns).
    #[serde(default = "d_shmem_per_poll")]
    pub per_poll: SimTime,
    /// Copying private data into the staging buffer (default 64 Gb/s).
    #[serde(default = "d_shmem_copy_rate")]
    pub copy_rate: BitsPerSec,
    /// Radix of the fast barrier's count exchange (default 8, 2 to 65536).
    #[serde(default = "d_shmem_fast_radix")]
    pub fast_radix: usize,
}

fn d_shmem_per_call() -> SimTime {
    hpcnet_shmem::ShmemCosts::default().per_call
}
fn d_shmem_per_post() -> SimTime {
    hpcnet_shmem::ShmemCosts::default().per_post
}
fn d_shmem_per_poll() -> SimTime {
    hpcnet_shmem::ShmemCosts::default().per_poll
}
fn d_shmem_copy_rate() -> BitsPerSec {
    hpcnet_shmem::ShmemCosts::default().copy_rate
}
fn d_shmem_fast_radix() -> usize {
    hpcnet_shmem::ShmemConfig::default().fast_radix
}

impl Default for ShmemSettings {
    fn default() -> Self {
        ShmemSettings {
            per_call: d_shmem_per_call(),
            per_post: d_shmem_per_post(),
            per_poll: d_shmem_per_poll(),
            copy_rate: d_shmem_copy_rate(),
            fast_radix: d_shmem_fast_radix(),
        }
    }
}

impl ShmemSettings {
    fn validate(&self) -> Result<(), (String, String)> {
        if self.copy_rate.0 == 0 {
            return Err(("shmem.copy_rate".into(), "must be faster than 0 b/s".into()));
        }
        if !(2..=65536).contains(&self.fast_radix) {
            return Err((
                "shmem.fast_radix".into(),
                format!("is {}; it must be 2 to 65536", self.fast_radix),
            ));
        }
        Ok(())
    }

    /// The library's host costs.
    pub fn costs(&self) -> hpcnet_shmem::ShmemCosts {
        hpcnet_shmem::ShmemCosts {
            per_call: self.per_call,
            per_post: self.per_post,
            per_poll: self.per_poll,
            copy_rate: self.copy_rate,
        }
    }
}

/// `[coll.reduce_rate]`: reduction rate per datatype.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReduceRates {
    #[serde(default = "d_reduce_rate")]
    pub f32: BitsPerSec,
    #[serde(default = "d_reduce_rate")]
    pub f64: BitsPerSec,
    #[serde(default = "d_reduce_rate")]
    pub i32: BitsPerSec,
    #[serde(default = "d_reduce_rate")]
    pub i64: BitsPerSec,
}

fn d_per_call() -> SimTime {
    hpcnet_coll::HostCosts::default().per_call
}
fn d_per_post() -> SimTime {
    hpcnet_coll::HostCosts::default().per_post
}
fn d_per_poll() -> SimTime {
    hpcnet_coll::HostCosts::default().per_poll
}
fn d_copy_rate() -> BitsPerSec {
    hpcnet_coll::HostCosts::default().copy_rate
}
fn d_reduce_rate() -> BitsPerSec {
    hpcnet_coll::HostCosts::default().reduce_rate[0]
}
fn d_chunk() -> Bytes {
    Bytes(hpcnet_coll::TransportConfig::default().chunk as u64)
}
fn d_window() -> u32 {
    hpcnet_coll::TransportConfig::default().window as u32
}

impl Default for ReduceRates {
    fn default() -> Self {
        let r = d_reduce_rate();
        ReduceRates {
            f32: r,
            f64: r,
            i32: r,
            i64: r,
        }
    }
}

impl Default for CollSettings {
    fn default() -> Self {
        CollSettings {
            per_call: d_per_call(),
            per_post: d_per_post(),
            per_poll: d_per_poll(),
            copy_rate: d_copy_rate(),
            reduce_rate: ReduceRates::default(),
            chunk: d_chunk(),
            window: d_window(),
            rendezvous: None,
            noise: NoiseKind::None,
            noise_interval: None,
            noise_duration: None,
        }
    }
}

impl CollSettings {
    /// Reject settings the library cannot run with: (key, reason).
    fn validate(&self) -> Result<(), (String, String)> {
        let rates = [
            ("coll.copy_rate", self.copy_rate),
            ("coll.reduce_rate.f32", self.reduce_rate.f32),
            ("coll.reduce_rate.f64", self.reduce_rate.f64),
            ("coll.reduce_rate.i32", self.reduce_rate.i32),
            ("coll.reduce_rate.i64", self.reduce_rate.i64),
        ];
        for (k, r) in rates {
            if r.0 == 0 {
                return Err((k.into(), "must be faster than 0 b/s".into()));
            }
        }
        if !(8..=(1 << 20)).contains(&self.chunk.0) || !self.chunk.0.is_multiple_of(8) {
            return Err((
                "coll.chunk".into(),
                format!("must be a multiple of 8 B from 8 B to 1 MiB, got {}", self.chunk),
            ));
        }
        if !(1..=1024).contains(&self.window) {
            return Err(("coll.window".into(), format!("must be 1 to 1024, got {}", self.window)));
        }
        self.noise()?;
        Ok(())
    }

    /// The detour pattern `coll.noise*` describe, or (key, reason) when they do not describe one.
    fn noise(&self) -> Result<hpcnet_coll::HostNoise, (String, String)> {
        let kind = self.noise.name();
        let (interval, duration) = match self.noise {
            NoiseKind::None => {
                for (key, v) in [
                    ("coll.noise_interval", self.noise_interval),
                    ("coll.noise_duration", self.noise_duration),
                ] {
                    if let Some(v) = v {
                        return Err((
                            key.into(),
                            format!("is {v}, but coll.noise is \"none\"; set coll.noise = \"periodic\" or \"poisson\""),
                        ));
                    }
                }
                return Ok(hpcnet_coll::HostNoise::None);
            }
            NoiseKind::Periodic | NoiseKind::Poisson => {
                let need = |key: &str, v: Option<SimTime>| {
                    v.ok_or_else(|| (key.to_string(), format!("is required with coll.noise = \"{kind}\"")))
                };
                (
                    need("coll.noise_interval", self.noise_interval)?,
                    need("coll.noise_duration", self.noise_duration)?,
                )
            }
        };
        if interval == SimTime::ZERO {
            return Err(("coll.noise_interval".into(), "must be positive, got 0".into()));
        }
        if duration == SimTime::ZERO {
            return Err((
                "coll.noise_duration".into(),
                "must be positive, got 0 (for no noise set coll.noise = \"none\")".into(),
            ));
        }
        if duration >= interval {
            return Err((
                "coll.noise_duration".into(),
                format!("is {duration}, but a detour must be shorter than coll.noise_interval = {interval}"),
            ));
        }
        let noise = match self.noise {
            NoiseKind::Periodic => hpcnet_coll::HostNoise::Periodic { interval, duration },
            _ => hpcnet_coll::HostNoise::Poisson { interval, duration },
        };
        Ok(noise)
    }

    /// The communicator configuration these settings describe; `seed` (the scenario's) seeds the
    /// operating-system noise.
    pub fn comm_config(&self, seed: u64) -> hpcnet_coll::CommConfig {
        let r = &self.reduce_rate;
        hpcnet_coll::CommConfig {
            transport: hpcnet_coll::TransportConfig {
                chunk: self.chunk.0 as usize,
                window: self.window as usize,
                rendezvous: self.rendezvous.map(|b| b.0 as usize),
            },
            costs: hpcnet_coll::HostCosts {
                per_call: self.per_call,
                per_post: self.per_post,
                per_poll: self.per_poll,
                copy_rate: self.copy_rate,
                reduce_rate: [r.f32, r.f64, r.i32, r.i64],
                // Settings that passed `validate`; others run without noise.
                noise: self.noise().unwrap_or_default(),
                noise_seed: seed,
            },
            hardware: false,
            offload: false,
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
    /// Seed of every random stream of the run (default 1): any 64-bit unsigned integer. TOML
    /// integers stop at 2^63 − 1, so larger seeds are written as a string, `seed = "18446744073709551615"`.
    #[serde(default = "d_seed", deserialize_with = "seed_u64")]
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
    /// NIC of every node (point-to-point benchmarks, message library); defaults apply if absent.
    #[serde(default)]
    pub nic: Option<NicConfig>,
    /// Collectives library (host software costs, transport); defaults apply if absent.
    #[serde(default)]
    pub coll: Option<CollSettings>,
    /// OpenSHMEM library host costs; defaults apply if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shmem: Option<ShmemSettings>,
    /// MPI-like layer of `hpcnet-mpi` (connection policy, allocation sizes, protocols);
    /// defaults apply if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi: Option<hpcnet_mpi::MpiSettings>,
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
    pub nic: NicConfig,
    pub coll: CollSettings,
    /// `[shmem]` resolved.
    pub shmem: ShmemSettings,
    /// `[mpi]` resolved into the job configuration of `hpcnet-mpi`.
    pub mpi: hpcnet_mpi::JobConfig,
    /// `mpi.network`: the network model MPI-level workloads run on.
    pub mpi_network: hpcnet_mpi::NetworkModel,
    /// `mpi.flow_local_depth`: local max-min sharing in the flow model (0: exact).
    pub mpi_flow_local_depth: u32,
    /// `mpi.flow_small_message`: messages up to this many bytes skip max-min sharing (0: none).
    pub mpi_flow_small_message: u64,
    /// `mpi.flow_port_fifo`: a node's flows to other nodes in engine order (port FIFO).
    pub mpi_flow_port_fifo: bool,
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
/// `[8, 8]`, `true`); a bare word that is not valid TOML is taken as a string (`uniform`,
/// `20 ns`), but a value that starts like an array, inline table or quoted string must parse.
///
/// On failure returns the key to report (`--set` plus the override or its key path) and the
/// reason.
pub fn apply_override(table: &mut toml::Table, spec: &str) -> Result<(), (String, String)> {
    let whole = || format!("--set {spec}");
    let (path, raw) = spec.split_once('=').ok_or_else(|| {
        (
            whole(),
            "an override must look like key.path=value, e.g. traffic.load=0.5".to_string(),
        )
    })?;
    let path = path.trim();
    let raw = raw.trim();
    let parts: Vec<&str> = path.split('.').map(str::trim).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err((
            whole(),
            "empty key in the override path (expected key.path=value, e.g. traffic.load=0.5)".to_string(),
        ));
    }
    let key = || format!("--set {path}");
    if raw.is_empty() {
        return Err((key(), "no value after '='".to_string()));
    }
    let value: toml::Value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").expect("parsed key"),
        Err(e) if raw.starts_with(['[', '{', '"', '\'']) => {
            return Err((
                key(),
                format!("value {raw} is not valid TOML: {}", one_line(e.message())),
            ));
        }
        Err(_) => toml::Value::String(raw.to_string()),
    };
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
            other => {
                return Err((
                    format!("--set {}", parts[..=i].join(".")),
                    format!(
                        "is {} {}, not a table, so it has no key '{}'",
                        article(other.type_str()),
                        other.type_str(),
                        parts[i + 1]
                    ),
                ))
            }
        };
    }
    Ok(())
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

/// Whether an error at `key` concerns a value set by the override of `path`.
fn set_by_override(key: &str, path: &str) -> bool {
    key.strip_prefix(path)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

impl Scenario {
    /// Read and validate a scenario file with overrides.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let text = read_capped(path).map_err(|reason| ScenarioError::new(&file, "", reason))?;
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
        Self::parse(text, file, default_name, overrides).map_err(|mut e| {
            // A bad value given on the command line is not in the file: say where it came from.
            let set = overrides
                .iter()
                .filter_map(|o| o.split_once('=').map(|(p, _)| p.trim()))
                .rfind(|p| set_by_override(&e.key, p));
            if let Some(p) = set {
                e.reason.push_str(&format!(" (set by --set {p})"));
            }
            e
        })
    }

    fn parse(text: &str, file: &str, default_name: &str, overrides: &[String]) -> Result<Scenario, ScenarioError> {
        let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let key = e.span().map(|s| line_column(text, s.start)).unwrap_or_default();
            ScenarioError::new(file, key, format!("TOML syntax: {}", one_line(e.message())))
        })?;
        for o in overrides {
            apply_override(&mut table, o).map_err(|(k, r)| ScenarioError::new(file, k, r))?;
        }
        // An algorithm chosen for the wrong family is reported as such, before the keys of its
        // table (which differ between algorithms) are checked.
        let text_at = |t: &str, k: &str| table.get(t).and_then(|v| v.get(k)).and_then(|v| v.as_str());
        if let (Some(algo), Some(kind)) = (text_at("routing", "algorithm"), text_at("topology", "kind")) {
            hpcnet_fabric::config::check_algorithm_applies(algo, kind)
                .map_err(|e| ScenarioError::new(file, e.key, e.reason))?;
        }
        let parsed: ScenarioFile =
            serde_path_to_error::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
                let (key, reason) = deserialize_error(&table, e);
                ScenarioError::new(file, key, reason)
            })?;
        Self::resolve(parsed, file, default_name)
    }

    fn resolve(parsed: ScenarioFile, file: &str, default_name: &str) -> Result<Scenario, ScenarioError> {
        let kind = parsed.topology.kind();
        let routing = parsed
            .routing
            .clone()
            .unwrap_or_else(|| RoutingConfig::default_for_kind(kind));
        let fabric = FabricConfig {
            link: parsed.link.clone(),
            link_overrides: parsed.link_overrides.clone(),
            router: parsed.router.clone(),
            packet: parsed.packet.clone(),
            routing,
            faults: parsed.faults.clone(),
        };
        // Everything that can be checked without the network is checked before it is built.
        fabric
            .validate_for_kind(kind)
            .map_err(|e| ScenarioError::new(file, e.key, e.reason))?;
        let nic = parsed.nic.clone().unwrap_or_default();
        nic.validate().map_err(|(k, r)| ScenarioError::new(file, k, r))?;
        for (key, class) in [("nic.get_vc", nic.get_vc), ("nic.response_vc", nic.response_vc)] {
            if class.is_some() && fabric.router.vc_select != VcSelect::Packet {
                return Err(ScenarioError::new(
                    file,
                    key,
                    "needs router.vc_select = \"packet\" (otherwise the fabric chooses every packet's VC)",
                ));
            }
        }
        if nic.rx_buffer.is_some() && fabric.link.switching == hpcnet_fabric::config::Switching::Wormhole {
            return Err(ScenarioError::new(
                file,
                "nic.rx_buffer",
                "credited receive buffers are not modelled under link.switching = \"wormhole\" (ejection never blocks there); remove the key or use \"cut_through\"",
            ));
        }
        if let Some(b) = nic.rx_buffer {
            let packet = fabric.packet.header.0 + fabric.packet.max_payload.0;
            let unit = fabric.router.credit_unit.0.max(1);
            if b.0.div_ceil(unit) < packet.div_ceil(unit) {
                return Err(ScenarioError::new(
                    file,
                    "nic.rx_buffer",
                    format!("{b} cannot hold one maximum-size packet ({packet} B: packet.header + packet.max_payload)"),
                ));
            }
        }
        let coll = parsed.coll.clone().unwrap_or_default();
        let shmem = parsed.shmem.clone().unwrap_or_default();
        shmem.validate().map_err(|(k, r)| ScenarioError::new(file, k, r))?;
        coll.validate().map_err(|(k, r)| ScenarioError::new(file, k, r))?;
        let mpi_settings = parsed.mpi.clone().unwrap_or_default();
        let mpi_network = mpi_settings.network;
        let mpi_flow_local_depth = mpi_settings.flow_local_depth;
        let mpi_flow_small_message = mpi_settings.flow_small_message.0;
        let mpi_flow_port_fifo = mpi_settings.flow_port_fifo;
        let mpi = mpi_settings
            .job_config()
            .map_err(|(k, r)| ScenarioError::new(file, k, r))?;
        let sim = &parsed.sim;
        if sim.measure == SimTime::ZERO {
            return Err(ScenarioError::new(file, "sim.measure", "must be longer than 0"));
        }
        let total = sim
            .warmup
            .0
            .checked_add(sim.measure.0)
            .and_then(|t| t.checked_add(sim.drain.0));
        if total.is_none_or(|t| t > MAX_SIM_TIME.0) {
            return Err(ScenarioError::new(
                file,
                "sim",
                format!(
                    "warmup + measure + drain ({} + {} + {}) must be at most {MAX_SIM_TIME} of simulated time",
                    sim.warmup, sim.measure, sim.drain
                ),
            ));
        }
        let size = parsed.topology.size_estimate();
        if fabric.routing.uses_distance_table()
            && size.routers > hpcnet_fabric::routing::MAX_MINIMAL_ROUTERS
            && size.routers <= MAX_ELEMENTS
        {
            let e = hpcnet_fabric::routing::minimal_too_large(size.routers);
            return Err(ScenarioError::new(file, e.key, e.reason));
        }
        if sim.memory_check {
            let need = memory_estimate(&size, &fabric, &nic);
            check_memory(need, &size, available_memory()).map_err(|r| ScenarioError::new(file, "topology", r))?;
        }
        let topology = build(&parsed.topology)
            .map_err(|e| ScenarioError::new(file, e.key().to_string(), strip_key(&e.to_string(), e.key())))?;
        fabric
            .validate(&topology)
            .map_err(|e| ScenarioError::new(file, e.key, e.reason))?;
        let traffic = parsed.traffic.clone().unwrap_or_default();
        traffic
            .validate(&topology, &fabric)
            .map_err(|(k, r)| ScenarioError::new(file, k, r))?;
        let name = parsed.name.clone().unwrap_or_else(|| default_name.to_string());
        Ok(Scenario {
            name,
            source: file.to_string(),
            file: parsed,
            topology,
            fabric,
            traffic,
            nic,
            coll,
            shmem,
            mpi,
            mpi_network,
            mpi_flow_local_depth,
            mpi_flow_small_message,
            mpi_flow_port_fifo,
        })
    }

    /// The communicator configuration of `[coll]`, with the scenario's seed for the host noise.
    pub fn comm_config(&self) -> hpcnet_coll::CommConfig {
        self.coll.comm_config(self.file.seed)
    }

    /// The OpenSHMEM job configuration of this scenario: library defaults with the host costs
    /// of `[shmem]` and the collectives' `[coll]` settings.
    pub fn shmem_config(&self) -> hpcnet_shmem::ShmemConfig {
        hpcnet_shmem::ShmemConfig {
            costs: self.shmem.costs(),
            fast_radix: self.shmem.fast_radix,
            coll: self.comm_config(),
            ..hpcnet_shmem::ShmemConfig::default()
        }
    }

    /// A fresh flow-level model of this scenario's machine (`hpcnet-flow`), for message-level
    /// workloads at scales where packets are too many.
    pub fn flow_world(&self) -> Result<hpcnet_flow::FlowWorld, ScenarioError> {
        if self.fabric.faults.dynamic() {
            let key = if self.fabric.faults.events.is_empty() {
                "faults.random"
            } else {
                "faults.events"
            };
            return Err(ScenarioError::new(
                &self.source,
                key,
                "the flow-level network has no dynamic faults; run this on the packet network (mpi.network = \"packet\")",
            ));
        }
        if self.nic.loss_rate > 0.0 {
            return Err(ScenarioError::new(
                &self.source,
                "nic.loss_rate",
                "the flow-level network loses no packet; run this on the packet network (mpi.network = \"packet\")",
            ));
        }
        if matches!(self.fabric.routing, RoutingConfig::Valiant | RoutingConfig::Ugal { .. }) {
            return Err(ScenarioError::new(
                &self.source,
                "routing.algorithm",
                format!(
                    "the flow-level network follows one route per pair, traced on the idle network; '{}' chooses a path per packet: run it on the packet network (mpi.network = \"packet\")",
                    self.fabric.routing.name()
                ),
            ));
        }
        if self.fabric.link.switching == hpcnet_fabric::config::Switching::Wormhole {
            return Err(ScenarioError::new(
                &self.source,
                "link.switching",
                "the flow-level network has no flits; run wormhole switching on the packet network (mpi.network = \"packet\")",
            ));
        }
        let net = Network::new(self.topology.clone(), self.fabric.clone())
            .map_err(|e| ScenarioError::new(&self.source, e.key, e.reason))?;
        let mut w = hpcnet_flow::FlowWorld::new(net, self.nic.clone());
        w.set_local_sharing((self.mpi_flow_local_depth > 0).then_some(self.mpi_flow_local_depth));
        w.set_short_messages(self.mpi_flow_small_message);
        w.set_port_fifo(self.mpi_flow_port_fifo);
        Ok(w)
    }

    /// A fresh world (network + NICs) of this scenario, for message-level workloads.
    pub fn world(&self) -> Result<World, ScenarioError> {
        let mut net = Network::new(self.topology.clone(), self.fabric.clone())
            .map_err(|e| ScenarioError::new(&self.source, e.key, e.reason))?;
        net.set_seed(self.file.seed);
        for (key, class) in [
            ("nic.get_vc", self.nic.get_vc),
            ("nic.response_vc", self.nic.response_vc),
        ] {
            let classes = net.routing.classes();
            if let Some(c) = class.filter(|&c| c >= classes) {
                return Err(ScenarioError::new(
                    &self.source,
                    key,
                    format!(
                        "is {c}, but the routing leaves VC classes 0 to {} for the NIC to choose",
                        classes - 1
                    ),
                ));
            }
        }
        let mut w = World::new(net, self.nic.clone());
        w.set_seed(self.file.seed);
        Ok(w)
    }

    /// The resolved scenario (defaults filled in) as JSON, for reports.
    pub fn resolved_json(&self) -> serde_json::Value {
        let mut f = self.file.clone();
        f.routing = Some(self.fabric.routing.clone());
        f.traffic = Some(self.traffic.clone());
        f.nic = Some(self.nic.clone());
        f.coll = Some(self.coll.clone());
        serde_json::to_value(&f).expect("scenario serialises")
    }
}

/// Simulator memory a machine needs, estimated from its sizes before it is built: per router
/// or node port the output state, input queues of every VC slot and routing entries; per node
/// its source and NIC state (send queues of every engine); minimal routing's distance table; and
/// a fixed base. The per-element figures are about 1.5 times what runs of tori up to 65 536
/// routers measure (470-600 B per port at 2 VCs), so the estimate errs high.
pub fn memory_estimate(size: &SizeEstimate, fabric: &FabricConfig, nic: &NicConfig) -> u64 {
    const BASE: u64 = 32 << 20;
    const PER_PORT: u64 = 768;
    const PER_VC_SLOT: u64 = 64;
    const PER_NODE: u64 = 1024;
    const PER_SEND_QUEUE: u64 = 40;
    let m = |a: u64, b: u64| a.saturating_mul(b);
    let vc_slots = u64::from(fabric.router.vcs).next_power_of_two();
    let per_port = PER_PORT + vc_slots * PER_VC_SLOT;
    let queues = m(
        m(u64::from(nic.engines), u64::from(nic.functions)),
        u64::from(nic.virtual_interfaces),
    );
    let per_node = PER_NODE + m(queues, PER_SEND_QUEUE);
    let distance = if fabric.routing.uses_distance_table() {
        m(m(size.routers, size.routers), 2)
    } else {
        0
    };
    BASE.saturating_add(m(size.router_ports.saturating_add(size.node_ports), per_port))
        .saturating_add(m(size.nodes, per_node))
        .saturating_add(distance)
}

/// `MemAvailable` of /proc/meminfo in bytes; None where it cannot be read (the check is then
/// skipped).
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// Refuses an estimate above the memory available; the error is the reason.
pub fn check_memory(need: u64, size: &SizeEstimate, available: Option<u64>) -> Result<(), String> {
    let Some(available) = available else { return Ok(()) };
    // Counts beyond the builder's limit are refused by the builder, with its own message.
    if size.routers > MAX_ELEMENTS || size.nodes > MAX_ELEMENTS || need <= available {
        return Ok(());
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    Err(format!(
        "{} routers, {} nodes and {} ports need about {:.1} GiB of simulator memory, more than the {:.1} GiB available (MemAvailable); use a smaller machine, or set sim.memory_check = false to build it anyway",
        size.routers,
        size.nodes,
        size.router_ports.saturating_add(size.node_ports),
        gib(need),
        gib(available)
    ))
}

/// Largest scenario file read (16 MiB): far beyond any machine description, and small enough
/// that naming a device or a huge file by mistake fails at once instead of filling memory.
pub const MAX_SCENARIO_BYTES: u64 = 16 << 20;

/// The text of a scenario file, at most [`MAX_SCENARIO_BYTES`]; the error is the reason.
fn read_capped(path: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let f = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    f.take(MAX_SCENARIO_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_SCENARIO_BYTES {
        return Err(format!(
            "is larger than {} MiB, the largest scenario file read (is it a scenario?)",
            MAX_SCENARIO_BYTES >> 20
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "cannot read: not valid UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// The longest simulated time a run may ask for (100 days): far beyond any study, and far enough
/// below `u64::MAX` picoseconds that adding a link or router latency cannot overflow the clock.
pub const MAX_SIM_TIME: SimTime = SimTime(100 * 86_400 * 1_000_000_000_000);

/// `line L, column C` of byte offset `at` (both from 1).
fn line_column(text: &str, at: usize) -> String {
    let before = &text.as_bytes()[..at.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[start..]).chars().count() + 1;
    format!("line {line}, column {column}")
}

/// Error messages (toml's in particular) may span lines ("invalid table header\nexpected `.`,
/// `]`"); an error is reported on one line, so join them.
fn one_line(m: &str) -> String {
    let mut lines = m.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut out = lines.next().unwrap_or("").to_string();
    for (i, l) in lines.enumerate() {
        out.push_str(if i == 0 { ": " } else { "; " });
        out.push_str(l);
    }
    out
}

/// Key path and one-line reason of a deserialisation error.
///
/// serde buffers an internally tagged enum (`[topology]`, `[routing]`) before it picks the variant,
/// so the path-tracking deserializer stops at the table and cannot see the key inside. For
/// `[topology]` the variant's own struct is read again from the table without its tag, which
/// names the exact key; for other tables the key is recovered from the message (`unknown field
/// `x``, or `unknown variant `v`` together with the key that holds "v", or a wrong type in a table
/// with one key besides its tag).
fn deserialize_error(table: &toml::Table, e: serde_path_to_error::Error<toml::de::Error>) -> (String, String) {
    let segments: Vec<Segment> = e.path().iter().cloned().collect();
    let key = e.path().to_string();
    let mut key = if key == "." { String::new() } else { key };
    let reason = one_line(e.into_inner().message());
    if key == "topology" {
        if let Some((k, r)) = topology_error(table) {
            return (k, r);
        }
    }
    if let Some(toml::Value::Table(t)) = value_at(table, &segments) {
        let last = match segments.last() {
            Some(Segment::Map { key }) => key.as_str(),
            _ => "",
        };
        let inner = if let Some(field) = quoted_after(&reason, "unknown field `") {
            Some(field.to_string()).filter(|f| f != last)
        } else if let Some(variant) = quoted_after(&reason, "unknown variant `") {
            let holders: Vec<&String> = t
                .iter()
                .filter(|(_, v)| v.as_str() == Some(variant))
                .map(|(k, _)| k)
                .collect();
            (holders.len() == 1).then(|| holders[0].clone())
        } else if reason.starts_with("invalid type") || reason.starts_with("invalid value") {
            // A value of the wrong type in a tagged table: the key, when the table has one
            // besides its tag (`[routing]` with `algorithm = "ugal"` and `threshold`).
            let keys: Vec<&String> = t
                .keys()
                .filter(|k| !matches!(k.as_str(), "algorithm" | "kind"))
                .collect();
            (keys.len() == 1).then(|| keys[0].clone())
        } else {
            None
        };
        if let Some(inner) = inner {
            key = if key.is_empty() {
                inner
            } else {
                format!("{key}.{inner}")
            };
        }
    }
    (key, reason)
}

/// The text between `prefix` and the next backquote, if `m` starts with `prefix`.
fn quoted_after<'a>(m: &'a str, prefix: &str) -> Option<&'a str> {
    m.strip_prefix(prefix)?.split('`').next()
}

/// The value a path-to-error path points at.
fn value_at<'a>(table: &'a toml::Table, path: &[Segment]) -> Option<&'a toml::Value> {
    let (first, rest) = path.split_first()?;
    let Segment::Map { key } = first else { return None };
    let mut cur = table.get(key)?;
    for seg in rest {
        cur = match (seg, cur) {
            (Segment::Map { key }, toml::Value::Table(t)) => t.get(key)?,
            (Segment::Seq { index }, toml::Value::Array(a)) => a.get(*index)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Re-reads `[topology]` as the struct of its `kind` to find the exact key of an error.
fn topology_error(table: &toml::Table) -> Option<(String, String)> {
    fn check<T: DeserializeOwned>(t: toml::Table) -> Option<(String, String)> {
        let e = serde_path_to_error::deserialize::<_, T>(toml::Value::Table(t)).err()?;
        let key = e.path().to_string();
        let key = if key == "." {
            "topology".to_string()
        } else {
            format!("topology.{key}")
        };
        Some((key, one_line(e.into_inner().message())))
    }
    let toml::Value::Table(t) = table.get("topology")? else {
        return None;
    };
    let kind = t.get("kind")?.as_str()?;
    let mut rest = t.clone();
    rest.remove("kind");
    // An unlisted kind falls back to the coarser key of the caller.
    match kind {
        "torus" | "mesh" => check::<GridConfig>(rest),
        "hypercube" => check::<HypercubeConfig>(rest),
        "fat_tree" => check::<FatTreeConfig>(rest),
        "leaf_spine" => check::<LeafSpineConfig>(rest),
        "generalized_fat_tree" => check::<GeneralizedFatTreeConfig>(rest),
        "dragonfly" => check::<DragonflyConfig>(rest),
        _ => None,
    }
}

fn strip_key(msg: &str, key: &str) -> String {
    msg.strip_prefix(key)
        .and_then(|s| s.strip_prefix(": "))
        .unwrap_or(msg)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().expect("test TOML")
    }

    fn set(t: &mut toml::Table, spec: &str) -> Result<(), (String, String)> {
        apply_override(t, spec)
    }

    #[test]
    fn override_replaces_and_creates_nested_keys() {
        let mut t = table("[traffic]\nload = 0.3\n");
        set(&mut t, "traffic.load=0.5").unwrap();
        set(&mut t, "a.b.c=4").unwrap();
        set(&mut t, " sim.measure = \"2 us\" ").unwrap();
        assert_eq!(t["traffic"]["load"].as_float(), Some(0.5));
        assert_eq!(t["a"]["b"]["c"].as_integer(), Some(4));
        assert_eq!(t["sim"]["measure"].as_str(), Some("2 us"));
        set(&mut t, "seed=7").unwrap();
        assert_eq!(t["seed"].as_integer(), Some(7));
    }

    #[test]
    fn override_values_are_toml() {
        let mut t = toml::Table::new();
        set(&mut t, "topology.k=[8, 8, 8]").unwrap();
        set(&mut t, "x.flag=true").unwrap();
        set(&mut t, "x.inline={ min = \"64 B\", max = \"256 B\" }").unwrap();
        set(&mut t, "x.tables=[{router = 0, port = 1}]").unwrap();
        let k: Vec<i64> = t["topology"]["k"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_integer().unwrap())
            .collect();
        assert_eq!(k, [8, 8, 8]);
        assert_eq!(t["x"]["flag"].as_bool(), Some(true));
        assert_eq!(t["x"]["inline"]["max"].as_str(), Some("256 B"));
        assert_eq!(t["x"]["tables"][0]["port"].as_integer(), Some(1));
    }

    #[test]
    fn override_bare_words_are_strings() {
        let mut t = toml::Table::new();
        set(&mut t, "traffic.pattern=uniform").unwrap();
        set(&mut t, "link.latency=20 ns").unwrap();
        set(&mut t, "link.encoding=8b/10b").unwrap();
        set(&mut t, "name=a=b").unwrap();
        assert_eq!(t["traffic"]["pattern"].as_str(), Some("uniform"));
        assert_eq!(t["link"]["latency"].as_str(), Some("20 ns"));
        assert_eq!(t["link"]["encoding"].as_str(), Some("8b/10b"));
        assert_eq!(t["name"].as_str(), Some("a=b"), "only the first '=' separates");
    }

    #[test]
    fn override_into_a_non_table_is_refused() {
        let mut t = table("[link]\nlatency = \"20 ns\"\nlanes = [1, 2]\n");
        let (key, reason) = set(&mut t, "link.latency.x=1").unwrap_err();
        assert_eq!(key, "--set link.latency");
        assert!(
            reason.contains("is a string, not a table") && reason.contains("'x'"),
            "{reason}"
        );
        let (key, reason) = set(&mut t, "link.lanes.first=1").unwrap_err();
        assert_eq!(key, "--set link.lanes");
        assert!(reason.contains("is an array"), "{reason}");
        // Nothing was changed.
        assert_eq!(t["link"]["latency"].as_str(), Some("20 ns"));
    }

    #[test]
    fn malformed_overrides_are_refused() {
        let mut t = toml::Table::new();
        for (spec, key, why) in [
            ("traffic.load", "--set traffic.load", "key.path=value"),
            ("=3", "--set =3", "empty key"),
            ("a..b=3", "--set a..b=3", "empty key"),
            ("traffic.load=", "--set traffic.load", "no value"),
            ("topology.k=[8,", "--set topology.k", "not valid TOML"),
            ("x={a=", "--set x", "not valid TOML"),
            ("x=\"open", "--set x", "not valid TOML"),
        ] {
            let (k, r) = set(&mut t, spec).expect_err(spec);
            assert_eq!(k, key, "{spec}");
            assert!(r.contains(why), "{spec}: {r}");
            assert!(!r.contains('\n'), "{spec}: {r}");
        }
        assert!(t.is_empty());
    }

    const MINI: &str = r#"
[topology]
kind = "torus"
k = [4, 4]

[link]
lane_rate = "10 Gb/s"
latency = "10 ns"

[router]
vcs = 2
private_credits = 16
"#;

    fn err(text: &str, set: &[&str]) -> ScenarioError {
        let set: Vec<String> = set.iter().map(|s| s.to_string()).collect();
        let e = Scenario::from_str_named(text, "x.toml", "x", &set).expect_err("should fail");
        assert!(!e.to_string().contains('\n'), "{e}");
        e
    }

    #[test]
    fn the_minimal_scenario_loads() {
        let sc = Scenario::from_str_named(MINI, "x.toml", "x", &[]).unwrap();
        assert_eq!(sc.name, "x");
        assert_eq!(sc.topology.nodes.len(), 16);
    }

    #[test]
    fn errors_name_the_key_inside_tagged_tables() {
        let e = err(MINI, &["topology.concentraton=2"]);
        assert_eq!(e.key, "topology.concentraton");
        let e = err(MINI, &["topology.k=[4, \"x\"]"]);
        assert_eq!(e.key, "topology.k[1]");
        assert!(e.reason.starts_with("invalid type: string \"x\""), "{}", e.reason);
        let e = err(MINI, &["routing.algorithm=dimension_order", "routing.deadlock=bogus"]);
        assert_eq!(e.key, "routing.deadlock");
        let dragonfly = "[topology]\nkind = \"dragonfly\"\na = 2\np = 1\nh = 1\n[link]\nlane_rate = \"10 Gb/s\"\nlatency = \"10 ns\"\n[router]\nvcs = 5\n";
        let e = err(dragonfly, &["routing.algorithm=ugal", "routing.threshold=-1"]);
        assert_eq!(e.key, "routing.threshold");
        assert!(e.reason.contains("expected u32"), "{}", e.reason);
        // An algorithm of another family is named as such, not through the keys it lacks.
        let e = err(MINI, &["routing.algorithm=up_down", "routing.deadlock=bubble"]);
        assert_eq!(e.key, "routing.algorithm");
        assert!(
            e.reason
                .starts_with("'up_down' does not apply to topology kind 'torus'"),
            "{}",
            e.reason
        );
        let e = err(
            &MINI.replace("kind = \"torus\"\nk = [4, 4]", "kind = \"fat_tree\"\nk = 2\nn = 2"),
            &["routing.algorithm=up_down", "routing.deadlock=bubble"],
        );
        assert_eq!(e.key, "routing.deadlock");
        assert!(e.reason.starts_with("unknown field `deadlock`"), "{}", e.reason);
        let e = err(MINI, &["traffic.size={ min = \"64 B\", max = \"2 XB\" }"]);
        assert_eq!(e.key, "traffic.size.max");
        let e = err(MINI, &["traffic.size={ min = \"64 B\" }"]);
        assert_eq!(e.key, "traffic.size");
        assert!(e.reason.contains("`min` and `max`"), "{}", e.reason);
    }

    #[test]
    fn missing_fields_name_table_and_field() {
        let e = err(&MINI.replace("lane_rate = \"10 Gb/s\"", ""), &[]);
        assert_eq!(
            (e.key.as_str(), e.reason.as_str()),
            ("link", "missing field `lane_rate`")
        );
        let e = err(&MINI.replace("k = [4, 4]", ""), &[]);
        assert_eq!((e.key.as_str(), e.reason.as_str()), ("topology", "missing field `k`"));
        let e = err("", &[]);
        assert_eq!(e.to_string(), "x.toml: missing field `topology`");
    }

    #[test]
    fn toml_syntax_errors_are_one_line_with_position() {
        let e = err("seed = 1\n[topology\nkind = \"torus\"\n", &[]);
        assert_eq!(e.key, "line 2, column 10");
        assert!(
            e.reason.starts_with("TOML syntax: invalid table header"),
            "{}",
            e.reason
        );
        let e = err("seed = 1\nseed = 2\n", &[]);
        assert_eq!(e.key, "line 2, column 1");
        assert!(e.reason.contains("duplicate key `seed`"), "{}", e.reason);
    }

    #[test]
    fn values_from_the_command_line_say_so() {
        let e = err(MINI, &["traffic.load=0.5", "traffic.load=2"]);
        assert_eq!(e.key, "traffic.load");
        assert!(e.reason.ends_with("got 2 (set by --set traffic.load)"), "{}", e.reason);
        let e = err(&format!("{MINI}\n[traffic]\nload = 2\n"), &["traffic.loadx=1"]);
        assert_eq!(e.key, "traffic.loadx");
        let e = err(&format!("{MINI}\n[traffic]\nload = 2\n"), &[]);
        assert!(!e.reason.contains("--set"), "{}", e.reason);
    }

    #[test]
    fn simulated_time_is_bounded() {
        let e = err(MINI, &["sim.warmup=\"5000000 s\"", "sim.measure=\"5000000 s\""]);
        assert_eq!(e.key, "sim");
        let e = err(MINI, &["sim.measure=\"0 s\""]);
        assert_eq!(e.key, "sim.measure");
    }

    #[test]
    fn wormhole_refuses_credited_receive_buffers_and_the_flow_network() {
        let wh = [
            "link.switching=\"wormhole\"",
            "routing.algorithm=\"dimension_order\"",
            "routing.deadlock=\"dateline\"",
            "link.ber=0",
        ];
        let mut set = wh.to_vec();
        set.push("nic.rx_buffer=\"1 KiB\"");
        let e = err(MINI, &set);
        assert_eq!(e.key, "nic.rx_buffer");
        assert!(e.reason.contains("wormhole"), "{}", e.reason);
        let set: Vec<String> = wh.iter().map(|s| s.to_string()).collect();
        let sc = Scenario::from_str_named(MINI, "x.toml", "x", &set).unwrap();
        let e = sc.flow_world().map(|_| ()).expect_err("no flits in the flow model");
        assert_eq!(e.key, "link.switching");
        assert!(sc.world().is_ok(), "the NIC world runs on the wormhole network");
    }

    #[test]
    fn nic_settings_are_checked_against_the_fabric() {
        // A GET class needs the NIC to choose VCs, and 2 VCs give at most 2 classes.
        let e = err(MINI, &["nic.get_vc=1"]);
        assert_eq!(e.key, "nic.get_vc");
        assert!(e.reason.contains("vc_select"), "{}", e.reason);
        let sc = Scenario::from_str_named(
            MINI,
            "x.toml",
            "x",
            &["router.vc_select=\"packet\"".into(), "nic.get_vc=9".into()],
        )
        .unwrap();
        let e = sc.world().map(|_| ()).expect_err("class 9 of 2 VCs");
        assert_eq!(e.key, "nic.get_vc");
        assert!(e.reason.contains("is 9"), "{}", e.reason);
        // A receive buffer must hold one maximum-size packet (header + max payload).
        let e = err(MINI, &["nic.rx_buffer=\"64 B\""]);
        assert_eq!(e.key, "nic.rx_buffer");
        assert!(e.reason.contains("one maximum-size packet"), "{}", e.reason);
        let mtu = Scenario::from_str_named(MINI, "x.toml", "x", &[])
            .unwrap()
            .fabric
            .packet;
        let fits = format!("nic.rx_buffer=\"{} B\"", mtu.header.0 + mtu.max_payload.0);
        assert!(Scenario::from_str_named(MINI, "x.toml", "x", &[fits]).is_ok());
    }

    #[test]
    fn memory_is_checked_against_what_is_available() {
        let sc = Scenario::from_str_named(MINI, "x.toml", "x", &[]).unwrap();
        let size = sc.file.topology.size_estimate();
        assert_eq!(
            size,
            SizeEstimate {
                routers: 16,
                nodes: 16,
                router_ports: 80,
                node_ports: 16
            }
        );
        let need = memory_estimate(&size, &sc.fabric, &sc.nic);
        assert!(need > 32 << 20 && need < 64 << 20, "{need}");
        assert!(check_memory(need, &size, Some(need)).is_ok());
        assert!(check_memory(need, &size, None).is_ok(), "unknown: no check");
        let why = check_memory(need, &size, Some(1 << 20)).unwrap_err();
        assert!(
            why.starts_with("16 routers, 16 nodes and 96 ports need about 0.0"),
            "{why}"
        );
        assert!(why.contains("sim.memory_check = false"), "{why}");
        // The override is a scenario key, kept out of reports while at its default.
        let off = Scenario::from_str_named(MINI, "x.toml", "x", &["sim.memory_check=false".into()]).unwrap();
        assert!(!off.file.sim.memory_check);
        assert!(sc.resolved_json()["sim"].get("memory_check").is_none());
        assert_eq!(off.resolved_json()["sim"]["memory_check"], false);
    }

    #[test]
    fn line_column_counts_from_one() {
        assert_eq!(line_column("ab\ncd", 0), "line 1, column 1");
        assert_eq!(line_column("ab\ncd", 3), "line 2, column 1");
        assert_eq!(line_column("ab\ncd", 4), "line 2, column 2");
        assert_eq!(line_column("ab", 99), "line 1, column 3");
        assert_eq!(one_line("a\n  b \n\nc"), "a: b; c");
    }

    #[test]
    fn set_can_remove_a_vc_class_of_the_scenario_file() {
        const M3: &str = include_str!("../../../scenarios/nicevt-m3.toml");
        let load = |set: &[&str]| {
            let set: Vec<String> = set.iter().map(|s| s.to_string()).collect();
            Scenario::from_str_named(M3, "nicevt-m3.toml", "nicevt-m3", &set)
        };
        assert_eq!(load(&[]).unwrap().nic.response_vc, Some(1));
        // Removed by false or "none"; the machine then runs with adaptive routing, which
        // chooses every packet's VC itself.
        for off in ["nic.response_vc=false", "nic.response_vc=\"none\""] {
            let sc = load(&[
                off,
                "routing.algorithm=\"minimal_adaptive\"",
                "router.vc_select=\"round_robin\"",
                "router.vcs=4",
            ])
            .unwrap_or_else(|e| panic!("{off}: {e}"));
            assert_eq!(sc.nic.response_vc, None, "{off}");
            assert!(sc.world().is_ok(), "{off}");
        }
        // Without removing it the class conflicts with the fabric's VC choice.
        let e = load(&["router.vc_select=\"round_robin\""])
            .map(|_| ())
            .expect_err("class kept");
        assert_eq!(e.key, "nic.response_vc");
        // true names no class.
        let e = load(&["nic.response_vc=true"]).map(|_| ()).expect_err("true");
        assert!(e.to_string().contains("nic.response_vc"), "{e}");
        assert!(e.to_string().contains("give the class number"), "{e}");
        let e = load(&["nic.get_vc=\"some\""]).map(|_| ()).expect_err("a word");
        assert!(e.to_string().contains("nic.get_vc"), "{e}");
    }

    #[test]
    fn rx_aggregation_and_write_cost_are_checked_and_named() {
        let e = err(MINI, &["nic.rx_aggregation.block=\"32 B\""]);
        assert_eq!(e.key, "nic.rx_aggregation.block");
        assert!(e.reason.contains("nic.rx_aggregation.short"), "{}", e.reason);
        let e = err(MINI, &["nic.rx_aggregation.short=\"0 B\""]);
        assert_eq!(e.key, "nic.rx_aggregation.short");
        let e = err(MINI, &["nic.rx_aggregation.block=\"1 MiB\""]);
        assert_eq!(e.key, "nic.rx_aggregation.block");
        let e = err(MINI, &["nic.rx_aggregation.size=1"]);
        assert!(e.to_string().contains("size"), "{e}");
        let e = err(MINI, &["nic.host.write_cost=\"exact\""]);
        assert!(e.to_string().contains("nic.host.write_cost"), "{e}");
        let sc =
            Scenario::from_str_named(MINI, "x.toml", "x", &["nic.rx_aggregation.timeout=\"1 us\"".into()]).unwrap();
        let a = sc.nic.rx_aggregation.expect("section made by --set");
        assert_eq!((a.short.0, a.block.0, a.timeout), (64, 256, SimTime::from_ns(1000)));
    }

    #[test]
    fn the_shmem_section_sets_host_costs_and_refuses_bad_values() {
        let sc = Scenario::from_str_named(MINI, "x.toml", "x", &[]).unwrap();
        assert_eq!(sc.shmem_config().costs, hpcnet_shmem::ShmemCosts::default());
        let set = [
            "shmem.per_post=\"1 us\"".to_string(),
            "shmem.per_poll=\"0 ns\"".to_string(),
        ];
        let sc = Scenario::from_str_named(MINI, "x.toml", "x", &set).unwrap();
        let c = sc.shmem_config().costs;
        assert_eq!((c.per_post, c.per_poll), (SimTime::from_ns(1000), SimTime::ZERO));
        assert_eq!(c.per_call, hpcnet_shmem::ShmemCosts::default().per_call);
        let e = err(MINI, &["shmem.copy_rate=\"0 b/s\""]);
        assert_eq!(e.key, "shmem.copy_rate");
        let e = err(MINI, &["shmem.per_put=\"1 ns\""]);
        assert!(e.to_string().contains("per_put"), "{e}");
        assert_eq!(sc.shmem_config().fast_radix, 8);
        let sc = Scenario::from_str_named(MINI, "x.toml", "x", &["shmem.fast_radix=2".to_string()]).unwrap();
        assert_eq!(sc.shmem_config().fast_radix, 2);
        let e = err(MINI, &["shmem.fast_radix=1"]);
        assert_eq!(e.key, "shmem.fast_radix");
        assert!(e.reason.contains("is 1"), "{}", e.reason);
    }
}
