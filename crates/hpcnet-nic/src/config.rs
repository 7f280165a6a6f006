//! NIC and host-interface parameters (`[nic]` and `[nic.host]` in a scenario).

use hpcnet_des::{BitsPerSec, Bytes, SimTime};
use serde::{Deserialize, Serialize};

/// Per-packet network port choice (spec 01, "per-packet port selection").
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PortSelect {
    /// The port named in the descriptor (rail 0 unless the request names another).
    #[default]
    Fixed,
    /// Each packet takes the less busy port; packets of one message may use both rails and
    /// arrive out of order.
    Adaptive,
}

fn d_gen() -> u8 {
    3
}
fn d_lanes() -> u32 {
    16
}
fn d_mps() -> Bytes {
    Bytes(256)
}
fn d_rrs() -> Bytes {
    Bytes(512)
}
fn d_tags() -> u32 {
    32
}
fn d_tlp() -> Bytes {
    Bytes(24)
}
fn d_read_latency() -> SimTime {
    SimTime::from_ns(200)
}
fn d_doorbell() -> SimTime {
    SimTime::from_ns(100)
}

/// `[nic.host]`: the PCIe host interface between processor memory and the NIC.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// PCIe generation 1–5 (default 3): 2.5/5 GT/s with 8b/10b, 8/16/32 GT/s with 128b/130b.
    #[serde(default = "d_gen")]
    pub pcie_gen: u8,
    /// Lanes (default 16).
    #[serde(default = "d_lanes")]
    pub lanes: u32,
    /// Max payload of one TLP (default 256 B).
    #[serde(default = "d_mps")]
    pub max_payload: Bytes,
    /// Bytes asked by one DMA read request (default 512 B).
    #[serde(default = "d_rrs")]
    pub read_request: Bytes,
    /// Read tags = DMA reads outstanding at once (default 32; 256 with extended tags).
    #[serde(default = "d_tags")]
    pub read_tags: u32,
    /// TLP header + framing per TLP (default 24 B).
    #[serde(default = "d_tlp")]
    pub tlp_overhead: Bytes,
    /// Round trip of one DMA read from NIC to host memory and back (default "200 ns").
    #[serde(default = "d_read_latency")]
    pub read_latency: SimTime,
    /// A doorbell (MMIO write) from the CPU reaching the NIC (default "100 ns").
    #[serde(default = "d_doorbell")]
    pub doorbell_latency: SimTime,
    /// PCIe links between host and NIC (default 1; Sunway SWHNI: 2 × x16). Engine e reads
    /// through link e mod links; arriving packets are written through the first free link.
    #[serde(default = "d_links")]
    pub links: u32,
    /// How a DMA write into host memory is charged (default "fluid").
    #[serde(default, skip_serializing_if = "WriteCost::is_fluid")]
    pub write_cost: WriteCost,
}

fn d_links() -> u32 {
    1
}

/// How the host interface charges a DMA write of `n` bytes (`nic.host.write_cost`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum WriteCost {
    /// `n` bytes at the write payload rate: full TLPs' header share spread over every byte
    /// (exact for writes that are multiples of `max_payload`, optimistic for short ones).
    #[default]
    Fluid,
    /// TLP by TLP: `n` bytes plus `tlp_overhead` for each of the ⌈n / `max_payload`⌉ TLPs at
    /// the link rate, so a short write pays a whole TLP header — what receive-side
    /// aggregation (`nic.rx_aggregation`) saves.
    PerTlp,
}

impl WriteCost {
    fn is_fluid(&self) -> bool {
        *self == WriteCost::Fluid
    }
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            pcie_gen: d_gen(),
            lanes: d_lanes(),
            max_payload: d_mps(),
            read_request: d_rrs(),
            read_tags: d_tags(),
            tlp_overhead: d_tlp(),
            read_latency: d_read_latency(),
            doorbell_latency: d_doorbell(),
            links: d_links(),
            write_cost: WriteCost::Fluid,
        }
    }
}

impl HostConfig {
    /// Data rate of the link after line coding, per direction.
    pub fn link_rate(&self) -> BitsPerSec {
        let (gt, num, den) = match self.pcie_gen {
            1 => (2_500_000_000u64, 8, 10),
            2 => (5_000_000_000, 8, 10),
            3 => (8_000_000_000, 128, 130),
            4 => (16_000_000_000, 128, 130),
            _ => (32_000_000_000, 128, 130),
        };
        BitsPerSec(gt * self.lanes as u64).scaled(num, den)
    }

    /// Payload rate of DMA writes (NIC → memory): TLPs of `max_payload` plus overhead.
    pub fn write_rate(&self) -> BitsPerSec {
        let m = self.max_payload.0;
        self.link_rate().scaled(m, m + self.tlp_overhead.0)
    }

    /// Size of the completions DMA reads return: a read request's data, split at `max_payload`.
    pub fn completion_size(&self) -> Bytes {
        Bytes(self.read_request.0.min(self.max_payload.0).max(1))
    }

    /// Payload rate of DMA reads (memory → NIC): completions of `completion_size` plus overhead,
    /// and at most `read_tags` requests of `read_request` bytes outstanding per read round trip.
    pub fn read_rate(&self) -> BitsPerSec {
        let c = self.completion_size().0;
        let wire = self.link_rate().scaled(c, c + self.tlp_overhead.0);
        let per_rtt = self.read_tags as u64 * self.read_request.0 * 8;
        let tag_limit = BitsPerSec((per_rtt as u128 * 1_000_000_000_000 / self.read_latency.0.max(1) as u128) as u64);
        wire.min(tag_limit)
    }

    pub fn validate(&self, key: &str) -> Result<(), (String, String)> {
        if !(1..=5).contains(&self.pcie_gen) {
            return Err((
                format!("{key}.pcie_gen"),
                format!("must be 1 to 5, got {}", self.pcie_gen),
            ));
        }
        if self.lanes == 0 || self.lanes > 32 {
            return Err((format!("{key}.lanes"), format!("must be 1 to 32, got {}", self.lanes)));
        }
        for (name, v) in [("max_payload", self.max_payload), ("read_request", self.read_request)] {
            if v.0 == 0 || v.0 > MAX_TLP_BYTES {
                return Err((
                    format!("{key}.{name}"),
                    format!("must be 1 B to {MAX_TLP_BYTES} B, got {v}"),
                ));
            }
        }
        if self.links == 0 {
            return Err((format!("{key}.links"), "at least one PCIe link is needed".into()));
        }
        if self.links > MAX_HOST_LINKS {
            return Err((
                format!("{key}.links"),
                format!("must be 1 to {MAX_HOST_LINKS}, got {}", self.links),
            ));
        }
        if self.read_tags == 0 {
            return Err((format!("{key}.read_tags"), "at least one read tag is needed".into()));
        }
        if self.read_tags > MAX_READ_TAGS {
            return Err((
                format!("{key}.read_tags"),
                format!("must be 1 to {MAX_READ_TAGS}, got {}", self.read_tags),
            ));
        }
        Ok(())
    }
}

/// Most message engines of one NIC.
pub const MAX_ENGINES: u32 = 256;
/// Most send queues (engines × functions × virtual interfaces) of one NIC.
pub const MAX_SEND_QUEUES: u64 = 1 << 16;
/// Most entries of a NIC queue or in-flight window (`max_in_flight`, `doorbell_fifo`,
/// `tx_queue`, `get_queue`).
pub const MAX_QUEUE_DEPTH: u32 = 1 << 20;
/// Most PCIe links between host and NIC.
pub const MAX_HOST_LINKS: u32 = 64;
/// Most PCIe read tags (extended tags: 256; 10-bit tags: 1024).
pub const MAX_READ_TAGS: u32 = 1024;
/// Largest TLP payload or read request (PCIe allows 4 KiB).
pub const MAX_TLP_BYTES: u64 = 4096;

fn d_engines() -> u32 {
    2
}
fn d_in_flight() -> u32 {
    256
}
fn d_msg_overhead() -> SimTime {
    SimTime::from_ns(50)
}
fn d_rx_overhead() -> SimTime {
    SimTime::from_ns(20)
}
fn d_hosts() -> u32 {
    1
}
fn d_loopback() -> SimTime {
    SimTime::from_ns(50)
}

/// `[nic]`: one NIC per node.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NicConfig {
    /// Message engines sharing the ports through the NIC crossbar (Sunway: 2).
    #[serde(default = "d_engines")]
    pub engines: u32,
    /// Messages an engine may have in flight (awaiting completion), Sunway: 256.
    #[serde(default = "d_in_flight")]
    pub max_in_flight: u32,
    /// Engine processing per message after its descriptor arrives (default "50 ns").
    #[serde(default = "d_msg_overhead")]
    pub message_overhead: SimTime,
    /// Descriptor prefetch: how many messages an engine may take through its descriptor stage
    /// (descriptor fetch and processing) ahead of the message whose data it is reading and
    /// sending. 0 (default): one message at a time, the next descriptor is fetched only when the
    /// previous message's last packet has left the engine. 1: a two-stage pipeline (cHPP send
    /// engine, spec 02: doorbell FIFO → descriptor read → extract → data read → ...), the next
    /// descriptor is fetched and processed while the current message's data moves. At most
    /// `max_in_flight`.
    #[serde(default)]
    pub descriptor_prefetch: u32,
    /// Programmed-I/O sends (NICEVT, spec 03: "write-combining for PIO sends"): a message whose
    /// payload is at most this many bytes — and every read or atomic request, whose descriptor
    /// alone crosses — is written by the CPU into the NIC through write-combined stores (a
    /// 64-byte descriptor plus the payload as posted PCIe writes) instead of being fetched by
    /// DMA: no descriptor read round trip, no data read. Default 0 B: every descriptor is fetched
    /// by DMA. At most 4 KiB (the write-combining window of a NIC BAR page).
    #[serde(default)]
    pub pio_limit: Bytes,
    /// Receive processing per packet before its DMA write (default "20 ns").
    #[serde(default = "d_rx_overhead")]
    pub rx_overhead: SimTime,
    /// Processes per NIC, each behind its own host interface (Sunway: 2 processors per NIC).
    /// Rank r lives on node r / hosts.
    #[serde(default = "d_hosts")]
    pub hosts: u32,
    /// Latency of a message looped back inside an engine (same host interface), default "50 ns".
    #[serde(default = "d_loopback")]
    pub loopback_latency: SimTime,
    /// Latency of the NIC's on-chip crossbar between its host interfaces (default "50 ns").
    #[serde(default = "d_loopback")]
    pub crossbar_latency: SimTime,
    /// Per-packet port choice (default "fixed").
    #[serde(default)]
    pub port_select: PortSelect,
    /// Engine processing of a NAP (default: `message_overhead`); cHPP: 35 cycles.
    #[serde(default)]
    pub nap_overhead: Option<SimTime>,
    /// Engine processing of a GET at the requester (default: `message_overhead`).
    #[serde(default)]
    pub get_overhead: Option<SimTime>,
    /// Engine processing of a write-back at the target of a read / GET (default:
    /// `message_overhead`). The request packet carries the descriptor and the receive side hands
    /// it to the send engine, so a write-back needs neither a descriptor fetch nor, on cHPP, the
    /// descriptor extraction that is part of a PUT's processing.
    #[serde(default)]
    pub writeback_overhead: Option<SimTime>,
    /// Rate of the engine's internal data path (header + payload of every packet, and immediate
    /// data extracted from a descriptor); default: not limiting. cHPP: 128 bit × 250 MHz.
    #[serde(default)]
    pub engine_rate: Option<BitsPerSec>,
    /// Rate at which the engine extracts a NAP-immediate's data from its descriptor (default:
    /// `engine_rate`).
    #[serde(default)]
    pub immediate_rate: Option<BitsPerSec>,
    /// Leading bytes of a NAP-immediate's data that arrive with the descriptor's first read
    /// request and cost no extraction time; only the bytes beyond are extracted at
    /// `immediate_rate` (default 0 B: every byte is extracted).
    #[serde(default)]
    pub immediate_inline: Bytes,
    /// Engine time per packet on top of `engine_rate` (cHPP: one processing cycle), default 0.
    #[serde(default)]
    pub packet_overhead: SimTime,
    /// Size of the receive buffers NAPs land in, and the largest NAP (cHPP: 2 KiB).
    #[serde(default = "d_nap_buffer")]
    pub nap_buffer: Bytes,
    /// If set, a NAP's payload is uploaded into its pool buffer one TLP (`host.max_payload`) at a
    /// time, each taking this long (cHPP NAP upload path); otherwise at the host write rate.
    #[serde(default)]
    pub nap_upload_per_tlp: Option<SimTime>,
    /// PCIe functions: the physical function plus `functions - 1` virtual functions (SR-IOV;
    /// cHPP: 1 PF + 7 VFs). Each has its own doorbell FIFO.
    #[serde(default = "d_functions")]
    pub functions: u32,
    /// Doorbell FIFO depth per function: messages a function may have posted and not completed
    /// (cHPP: 32); 0 = unlimited.
    #[serde(default)]
    pub doorbell_fifo: u32,
    /// How an engine chooses between functions with work (default "round_robin").
    #[serde(default)]
    pub function_arbitration: FunctionArbitration,
    /// Send queues (Sunway "virtual interfaces", up to 128) per function and engine: queue pair
    /// `q` (on engine `q mod engines`) posts into queue `(q / engines) mod virtual_interfaces`, and the engine serves the queues with
    /// work in `function_arbitration` order (round robin by default). 1 (the default): one FIFO
    /// per function, messages served in posting order.
    #[serde(default = "d_virtual_interfaces")]
    pub virtual_interfaces: u32,
    /// Receive buffer per VC at the NIC's network port; the NIC returns the space when it has
    /// consumed a packet (written it to memory, or handed a GET to its send engine). Unset:
    /// the NIC always accepts packets (ejection never blocks).
    #[serde(default)]
    pub rx_buffer: Option<Bytes>,
    /// Packets per rail the NIC may queue for its link; a message engine waits while its
    /// packets cannot be queued (0 = unlimited).
    #[serde(default)]
    pub tx_queue: u32,
    /// GET / read requests the receive side may hand to the send engine before it stalls
    /// (cHPP: GET → local send engine); while stalled, the receive side takes no further packet
    /// of that VC, in order. 0 = unlimited.
    #[serde(default)]
    pub get_queue: u32,
    /// VC class of GET / read request packets (cHPP: GETs on their own virtual channel); other
    /// packets use class 0. Needs `router.vc_select = "packet"`. `false` or `"none"` (as
    /// absent): no class of their own, e.g. `--set nic.get_vc=false`.
    #[serde(default, deserialize_with = "vc_class")]
    pub get_vc: Option<u8>,
    /// VC class of response packets — acknowledgements, atomic responses and the data written
    /// back for a read — so that responses never wait behind requests (NICEVT's request and
    /// response virtual subnetworks, spec 03: the protocol-deadlock fix). Needs
    /// `router.vc_select = "packet"`. Absent, `false` or `"none"`: responses use class 0 like
    /// requests (`--set nic.response_vc=false` removes a scenario's class, e.g. to run it with
    /// adaptive routing, which chooses every packet's VC itself).
    #[serde(default, deserialize_with = "vc_class")]
    pub response_vc: Option<u8>,
    #[serde(default)]
    pub host: HostConfig,
    /// The hardware collective unit ([`crate::coll`]).
    #[serde(default)]
    pub coll: CollUnitConfig,
    /// The Tianhe triggered collective offload unit ([`crate::triggered`]); absent: the NICs
    /// have none and refuse offloaded collectives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triggered: Option<TriggeredConfig>,
    /// Transport reliability ([`crate::reliability`]): retransmission timers, probes,
    /// de-duplication and sliding windows. Absent (the default): nothing recovers a packet the
    /// network loses, as before this unit existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reliability: Option<ReliabilityConfig>,
    /// Probability that a packet reaching a NIC fails its end-to-end check and is discarded
    /// (a seeded draw per packet; default 0). Packets of point-to-point messages only: the
    /// collective and offload units' packets are not subject to it.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub loss_rate: f64,
    /// Receive-side aggregation of short messages ([`crate::rx`]; NICEVT M3, spec 03): absent
    /// (the default), every data packet is written to host memory by its own DMA write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_aggregation: Option<RxAggregationConfig>,
}

fn d_agg_short() -> Bytes {
    Bytes(64)
}
fn d_agg_block() -> Bytes {
    Bytes(256)
}
fn d_agg_timeout() -> SimTime {
    SimTime::from_ns(100)
}

/// `[nic.rx_aggregation]`: receive-side aggregation of short messages (spec 03: "receive-side
/// aggregation in NIC memory flushed to the host in large blocks"; M3 aggregates short
/// messages from different nodes). Data packets of at most `short` payload bytes, from any
/// sender, are gathered in NIC memory and written to host memory in one DMA write when the
/// block holds `block` bytes or `timeout` after its first packet. The paper gives none of
/// the three values; the defaults are assumptions, stated with each.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RxAggregationConfig {
    /// Largest payload of a packet that is aggregated (default 64 B — assumption: one cache
    /// line, the size of the stores and atomics of fine-grained PGAS programs).
    #[serde(default = "d_agg_short")]
    pub short: Bytes,
    /// Payload bytes of a full block (default 256 B — assumption: one TLP at PCIe's usual
    /// 256-byte max payload, so a full block costs one TLP header).
    #[serde(default = "d_agg_block")]
    pub block: Bytes,
    /// Longest a packet waits in a block that does not fill (default "100 ns" — assumption:
    /// about seven 8-byte puts' packet times on a 13 Gb/s link, a third of a PCIe read round
    /// trip).
    #[serde(default = "d_agg_timeout")]
    pub timeout: SimTime,
}

impl Default for RxAggregationConfig {
    fn default() -> Self {
        RxAggregationConfig {
            short: d_agg_short(),
            block: d_agg_block(),
            timeout: d_agg_timeout(),
        }
    }
}

/// Largest aggregation block (the NIC memory that holds it).
pub const MAX_AGG_BLOCK: u64 = 64 << 10;

impl RxAggregationConfig {
    pub fn validate(&self, key: &str) -> Result<(), (String, String)> {
        if self.short.0 == 0 {
            return Err((format!("{key}.short"), "must be at least 1 B".into()));
        }
        if self.block.0 > MAX_AGG_BLOCK {
            return Err((
                format!("{key}.block"),
                format!(
                    "must be at most {} (NIC memory), got {}",
                    Bytes(MAX_AGG_BLOCK),
                    self.block
                ),
            ));
        }
        if self.block.0 < self.short.0 {
            return Err((
                format!("{key}.block"),
                format!(
                    "must hold at least one short packet ({key}.short = {}), got {}",
                    self.short, self.block
                ),
            ));
        }
        Ok(())
    }
}

/// A VC class key: an integer class, or `false` / `"none"` for no class of its own (so that
/// `--set` can remove a class a scenario file names).
fn vc_class<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    use serde::de::{self, Visitor};
    struct V;
    impl<'a> Visitor<'a> for V {
        type Value = Option<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a VC class from 0 to 255, or false / \"none\" for no class of its own")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<u8>, E> {
            u8::try_from(v)
                .map(Some)
                .map_err(|_| E::custom(format!("a VC class must be 0 to 255, got {v}")))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<u8>, E> {
            u8::try_from(v)
                .map(Some)
                .map_err(|_| E::custom(format!("a VC class must be 0 to 255, got {v}")))
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Option<u8>, E> {
            if v {
                Err(E::custom(
                    "true names no class: give the class number, or false for none",
                ))
            } else {
                Ok(None)
            }
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<u8>, E> {
            match v.trim() {
                "none" => Ok(None),
                t => t.parse::<u8>().map(Some).map_err(|_| {
                    E::custom(format!(
                        "a VC class must be 0 to 255, or false / \"none\" for no class of its own, got \"{v}\""
                    ))
                }),
            }
        }
        fn visit_none<E: de::Error>(self) -> Result<Option<u8>, E> {
            Ok(None)
        }
        fn visit_some<D2: serde::Deserializer<'a>>(self, d: D2) -> Result<Option<u8>, D2::Error> {
            d.deserialize_any(V)
        }
    }
    d.deserialize_any(V)
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

fn d_true() -> bool {
    true
}
fn d_rel_timeout() -> SimTime {
    SimTime::from_us(20)
}
fn d_rel_retries() -> u32 {
    7
}
fn d_rel_window() -> u32 {
    64
}

/// Most retransmissions of one message.
pub const MAX_RETRIES: u32 = 100;

/// `[nic.reliability]`: the transport's recovery of lost packets (spec 01, "Reliability":
/// sliding windows for asynchronous queue messages, acknowledgement and status probing for
/// RDMA). The paper gives none of these values; the defaults are assumptions, stated with each.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReliabilityConfig {
    /// Whether the unit works (default true once the section is present; `false` turns it off
    /// without removing the section).
    #[serde(default = "d_true")]
    pub enabled: bool,
    /// Time from the moment a transmission's last packet is expected on the wire to the
    /// retransmission (or probe) when no answer came (default "20 us", an assumption: about
    /// ten times the loaded round trip of the 512-node prototype, so that a slow answer is
    /// rarely taken for a lost one).
    #[serde(default = "d_rel_timeout")]
    pub timeout: SimTime,
    /// Timeouts without progress before a message fails with a `RetryExceeded` completion
    /// (default 7, the largest retry count of an InfiniBand queue pair).
    #[serde(default = "d_rel_retries")]
    pub retries: u32,
    /// Reliable queue messages one sender may have unacknowledged towards one receive queue
    /// (one sliding window; default 64, an assumption).
    #[serde(default = "d_rel_window")]
    pub window: u32,
}

impl Default for ReliabilityConfig {
    fn default() -> Self {
        ReliabilityConfig {
            enabled: true,
            timeout: d_rel_timeout(),
            retries: d_rel_retries(),
            window: d_rel_window(),
        }
    }
}

impl ReliabilityConfig {
    pub fn validate(&self, key: &str) -> Result<(), (String, String)> {
        if self.timeout == SimTime::ZERO || self.timeout > SimTime::from_ms(1000) {
            return Err((
                format!("{key}.timeout"),
                format!("must be positive and at most 1 s, got {}", self.timeout),
            ));
        }
        if self.retries > MAX_RETRIES {
            return Err((
                format!("{key}.retries"),
                format!("must be 0 to {MAX_RETRIES}, got {}", self.retries),
            ));
        }
        if self.window == 0 || self.window > MAX_QUEUE_DEPTH {
            return Err((
                format!("{key}.window"),
                format!("must be 1 to {MAX_QUEUE_DEPTH}, got {}", self.window),
            ));
        }
        Ok(())
    }
}

fn d_units() -> u32 {
    8
}
fn d_streams() -> u32 {
    16
}
fn d_collectives() -> u32 {
    32
}
fn d_trig_buffer() -> Bytes {
    Bytes(512 * 1024)
}
fn d_trig_slots() -> u32 {
    512
}
fn d_pulse_capacity() -> u64 {
    8192
}
fn d_pulse_counters() -> u64 {
    64
}
fn d_pulse_timeout() -> SimTime {
    SimTime::from_us(100)
}
fn d_pulse_retry() -> SimTime {
    SimTime::from_us(1)
}
fn d_trig_step() -> SimTime {
    SimTime::from_ns(50)
}
fn d_parse_time() -> SimTime {
    SimTime::from_ns(10)
}

/// `[nic.triggered]`: the Tianhe triggered collective offload unit (spec 04). The unit count,
/// streams, concurrent collectives and buffer size are the paper's FPGA test bed; everything
/// else is not given in the paper and is an assumption.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TriggeredConfig {
    /// Offload units per NIC (spec 04 test bed: 8).
    #[serde(default = "d_units")]
    pub units: u32,
    /// Incoming streams (distinct senders) one collective may have at a unit (spec 04: 16).
    #[serde(default = "d_streams")]
    pub streams: u32,
    /// Collectives in progress at once per NIC (spec 04: 32).
    #[serde(default = "d_collectives")]
    pub collectives: u32,
    /// Hash-buffer RAM per unit (spec 04: 512 KB).
    #[serde(default = "d_trig_buffer")]
    pub buffer: Bytes,
    /// Slots of the hash buffer, one packet each (assumption: 512, i.e. 1 KiB slots); a slot
    /// bounds the data of one step of one pulse.
    #[serde(default = "d_trig_slots")]
    pub slots: u32,
    /// Pulse controller: total reduction capacity C in elements (assumption: 8192).
    #[serde(default = "d_pulse_capacity")]
    pub pulse_capacity: u64,
    /// Pulse controller: counters k, pulses in flight per NIC; a pulse is ⌊C / k⌋ elements
    /// (assumption: 64). At least `collectives`, or a collective may wait for a counter
    /// until `pulse_timeout`.
    #[serde(default = "d_pulse_counters")]
    pub pulse_counters: u64,
    /// How long a pulse may wait for a counter before its collective fails (assumption:
    /// "100 us").
    #[serde(default = "d_pulse_timeout")]
    pub pulse_timeout: SimTime,
    /// Interval between a refused counter request and the next (assumption: "1 us").
    #[serde(default = "d_pulse_retry")]
    pub pulse_retry: SimTime,
    /// Processing of one fired step by a unit (assumption: "50 ns", as `nic.message_overhead`).
    #[serde(default = "d_trig_step")]
    pub step_overhead: SimTime,
    /// Parser time per descriptor of a posted sequence (assumption: "10 ns").
    #[serde(default = "d_parse_time")]
    pub parse_time: SimTime,
    /// Reduction rate of the pipelined reduction unit in operand bytes per second, per type
    /// (assumption: 64 Gb/s, as `nic.coll`).
    #[serde(default = "d_reduce_rate")]
    pub rate_f32: BitsPerSec,
    #[serde(default = "d_reduce_rate")]
    pub rate_f64: BitsPerSec,
    #[serde(default = "d_reduce_rate")]
    pub rate_i32: BitsPerSec,
    #[serde(default = "d_reduce_rate")]
    pub rate_i64: BitsPerSec,
    /// Largest extra delay of a collective packet between its arrival at the NIC and its entry
    /// into the offload unit, drawn uniformly in [0, jitter] per packet from a stream seeded by
    /// the run's seed (default "0 ns": none). A what-if knob: it reorders arrivals, which the
    /// order-preserving triggering must make harmless.
    #[serde(default)]
    pub jitter: SimTime,
}

impl Default for TriggeredConfig {
    fn default() -> Self {
        TriggeredConfig {
            units: d_units(),
            streams: d_streams(),
            collectives: d_collectives(),
            buffer: d_trig_buffer(),
            slots: d_trig_slots(),
            pulse_capacity: d_pulse_capacity(),
            pulse_counters: d_pulse_counters(),
            pulse_timeout: d_pulse_timeout(),
            pulse_retry: d_pulse_retry(),
            step_overhead: d_trig_step(),
            parse_time: d_parse_time(),
            rate_f32: d_reduce_rate(),
            rate_f64: d_reduce_rate(),
            rate_i32: d_reduce_rate(),
            rate_i64: d_reduce_rate(),
            jitter: SimTime::ZERO,
        }
    }
}

impl TriggeredConfig {
    /// Bytes one buffer slot holds.
    pub fn slot_bytes(&self) -> u64 {
        self.buffer.0 / u64::from(self.slots.max(1))
    }

    /// Elements of one pulse of `elem` bytes each: ⌊C / k⌋, and no more than a buffer slot
    /// holds.
    pub fn pulse_elements(&self, elem: u64) -> u64 {
        (self.pulse_capacity / self.pulse_counters.max(1)).min(self.slot_bytes() / elem.max(1))
    }

    pub fn validate(&self, key: &str) -> Result<(), (String, String)> {
        let k = |f: &str| format!("{key}.{f}");
        if self.units == 0 || self.units > 64 {
            return Err((k("units"), format!("must be 1 to 64, got {}", self.units)));
        }
        if self.streams == 0 || self.streams > 1 << 11 {
            return Err((k("streams"), format!("must be 1 to 2048, got {}", self.streams)));
        }
        if self.collectives == 0 || self.collectives > 256 {
            return Err((
                k("collectives"),
                format!("must be 1 to 256 (the 8-bit JobID), got {}", self.collectives),
            ));
        }
        if self.slots < 2 {
            return Err((
                k("slots"),
                format!(
                    "must be at least 2 (one home slot and one collision reserve slot), got {}",
                    self.slots
                ),
            ));
        }
        if self.slot_bytes() < 8 {
            return Err((
                k("buffer"),
                format!(
                    "{} B in {} slots leaves {} B per slot, need at least 8 B (one element)",
                    self.buffer.0,
                    self.slots,
                    self.slot_bytes()
                ),
            ));
        }
        if self.pulse_capacity == 0 {
            return Err((k("pulse_capacity"), "must be at least 1 element".into()));
        }
        if self.pulse_counters == 0 || self.pulse_counters > self.pulse_capacity || self.pulse_counters > 65536 {
            return Err((
                k("pulse_counters"),
                format!(
                    "must be 1 to {} (at most pulse_capacity = {} and 65536), got {}",
                    self.pulse_capacity.min(65536),
                    self.pulse_capacity,
                    self.pulse_counters
                ),
            ));
        }
        if self.pulse_timeout == SimTime::ZERO {
            return Err((k("pulse_timeout"), "must be positive".into()));
        }
        if self.pulse_retry == SimTime::ZERO || self.pulse_retry > self.pulse_timeout {
            return Err((
                k("pulse_retry"),
                format!(
                    "must be positive and at most pulse_timeout = {}, got {}",
                    self.pulse_timeout, self.pulse_retry
                ),
            ));
        }
        for (f, r) in [
            ("rate_f32", self.rate_f32),
            ("rate_f64", self.rate_f64),
            ("rate_i32", self.rate_i32),
            ("rate_i64", self.rate_i64),
        ] {
            if r.0 == 0 {
                return Err((k(f), "must be positive".into()));
            }
        }
        Ok(())
    }
}

fn d_fanout() -> u32 {
    8
}
fn d_reduce_rate() -> BitsPerSec {
    BitsPerSec::gbps(64.0)
}

/// `[nic.coll]`: the hardware collective unit (spec 01, "hardware collectives"). The paper gives
/// neither the tree fan-out nor the NIC's reduction rate: the defaults are assumptions.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CollUnitConfig {
    /// Children per NIC in the logical tree the library writes into the descriptor (default 8,
    /// an assumption).
    #[serde(default = "d_fanout")]
    pub fanout: u32,
    /// Processing of one collective step in the NIC (a descriptor taken, contributions combined
    /// and the result sent on); default `nic.message_overhead`, the engine's processing of one
    /// message.
    #[serde(default)]
    pub step_overhead: Option<SimTime>,
    /// Reduction rate in operand bytes per second, per type (default 64 Gb/s = 8 B/ns for every
    /// type: one 8-byte operand per cycle of a 1 GHz reduction unit, an assumption).
    #[serde(default = "d_reduce_rate")]
    pub rate_f32: BitsPerSec,
    #[serde(default = "d_reduce_rate")]
    pub rate_f64: BitsPerSec,
    #[serde(default = "d_reduce_rate")]
    pub rate_i32: BitsPerSec,
    #[serde(default = "d_reduce_rate")]
    pub rate_i64: BitsPerSec,
    /// `[nic.coll.recovery]`: the library's software time-out for collectives whose packets the
    /// fabric lost (spec 01, "collective fault handling: software time-outs"). Absent (the
    /// default): no recovery; a collective that lost a packet never completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<CollRecoveryConfig>,
    /// Largest extra delay between a gather or broadcast message's last packet reaching a NIC
    /// and the unit taking it, drawn uniformly in [0, jitter] per message from a stream seeded
    /// by the run's seed, one per NIC (default "0 ns": none). A what-if knob: it reorders the
    /// children's contributions at their parent, which the fixed combine order must make
    /// harmless.
    #[serde(default)]
    pub jitter: SimTime,
}

/// `[nic.coll.recovery]`: how a hardware collective recovers from lost packets. The spec names
/// the mechanism (software time-outs; leaf, parent and root probe and answer to agree on the
/// global state) but no time-out value: both fields are assumptions.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CollRecoveryConfig {
    /// Time from a lost gather or broadcast packet to the restart of its collective (the waiting
    /// member's time-out plus the probe exchange; default 50 µs, an assumption: several times a
    /// 1024-participant hardware collective on the prototype).
    #[serde(default = "d_coll_timeout")]
    pub timeout: SimTime,
    /// Restarts of one group before its unfinished members complete with `RetryExceeded`
    /// (default 3).
    #[serde(default = "d_coll_retries")]
    pub retries: u32,
}

fn d_coll_timeout() -> SimTime {
    SimTime::from_us(50)
}
fn d_coll_retries() -> u32 {
    3
}

impl Default for CollUnitConfig {
    fn default() -> Self {
        CollUnitConfig {
            fanout: d_fanout(),
            step_overhead: None,
            rate_f32: d_reduce_rate(),
            rate_f64: d_reduce_rate(),
            rate_i32: d_reduce_rate(),
            rate_i64: d_reduce_rate(),
            recovery: None,
            jitter: SimTime::ZERO,
        }
    }
}

fn d_functions() -> u32 {
    1
}
fn d_virtual_interfaces() -> u32 {
    1
}

/// Arbitration between PCIe functions at a message engine (spec 02, SR-IOV).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FunctionArbitration {
    /// Fair round-robin over functions with queued messages.
    #[default]
    RoundRobin,
    /// Strict priority: the lowest-numbered function with work first (the PF before VFs).
    Priority,
}

fn d_nap_buffer() -> Bytes {
    Bytes(2048)
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            engines: d_engines(),
            max_in_flight: d_in_flight(),
            message_overhead: d_msg_overhead(),
            descriptor_prefetch: 0,
            pio_limit: Bytes(0),
            rx_overhead: d_rx_overhead(),
            hosts: d_hosts(),
            loopback_latency: d_loopback(),
            crossbar_latency: d_loopback(),
            port_select: PortSelect::Fixed,
            nap_overhead: None,
            get_overhead: None,
            writeback_overhead: None,
            engine_rate: None,
            immediate_rate: None,
            immediate_inline: Bytes(0),
            packet_overhead: SimTime::ZERO,
            nap_buffer: d_nap_buffer(),
            nap_upload_per_tlp: None,
            functions: d_functions(),
            doorbell_fifo: 0,
            function_arbitration: FunctionArbitration::RoundRobin,
            virtual_interfaces: d_virtual_interfaces(),
            rx_buffer: None,
            tx_queue: 0,
            get_queue: 0,
            get_vc: None,
            response_vc: None,
            host: HostConfig::default(),
            coll: CollUnitConfig::default(),
            triggered: None,
            reliability: None,
            loss_rate: 0.0,
            rx_aggregation: None,
        }
    }
}

impl NicConfig {
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.engines == 0 {
            return Err(("nic.engines".into(), "a NIC needs at least one message engine".into()));
        }
        if self.engines > MAX_ENGINES {
            return Err((
                "nic.engines".into(),
                format!("must be 1 to {MAX_ENGINES}, got {}", self.engines),
            ));
        }
        if self.engine_rate.is_some_and(|r| r.0 == 0) {
            return Err(("nic.engine_rate".into(), "must be positive".into()));
        }
        if self.immediate_rate.is_some_and(|r| r.0 == 0) {
            return Err(("nic.immediate_rate".into(), "must be positive".into()));
        }
        if self.pio_limit.0 > 4096 {
            return Err((
                "nic.pio_limit".into(),
                format!(
                    "must be at most 4 KiB (one write-combined NIC page), got {} B",
                    self.pio_limit.0
                ),
            ));
        }
        if self.nap_buffer.0 == 0 {
            return Err(("nic.nap_buffer".into(), "must be at least 1 B".into()));
        }
        if self.hosts == 0 || self.hosts > 64 {
            return Err(("nic.hosts".into(), format!("must be 1 to 64, got {}", self.hosts)));
        }
        if self.virtual_interfaces == 0 || self.virtual_interfaces > 1024 {
            return Err((
                "nic.virtual_interfaces".into(),
                format!("must be 1 to 1024, got {}", self.virtual_interfaces),
            ));
        }
        if self.functions == 0 || self.functions > 256 {
            return Err((
                "nic.functions".into(),
                format!("must be 1 to 256, got {}", self.functions),
            ));
        }
        // Every engine keeps one send queue per function and virtual interface.
        let queues = u64::from(self.engines) * u64::from(self.functions) * u64::from(self.virtual_interfaces);
        if queues > MAX_SEND_QUEUES {
            return Err((
                "nic.virtual_interfaces".into(),
                format!(
                    "nic.engines {} × nic.functions {} × nic.virtual_interfaces {} = {queues} send queues per NIC, more than the {MAX_SEND_QUEUES} the model holds",
                    self.engines, self.functions, self.virtual_interfaces
                ),
            ));
        }
        for (key, v) in [
            ("nic.max_in_flight", self.max_in_flight),
            ("nic.doorbell_fifo", self.doorbell_fifo),
            ("nic.tx_queue", self.tx_queue),
            ("nic.get_queue", self.get_queue),
        ] {
            if v > MAX_QUEUE_DEPTH {
                return Err((key.into(), format!("must be at most {MAX_QUEUE_DEPTH}, got {v}")));
            }
        }
        if self.max_in_flight == 0 {
            return Err(("nic.max_in_flight".into(), "must be at least 1".into()));
        }
        if self.descriptor_prefetch > self.max_in_flight {
            return Err((
                "nic.descriptor_prefetch".into(),
                format!(
                    "must be at most nic.max_in_flight = {} (the messages an engine may have in flight), got {}",
                    self.max_in_flight, self.descriptor_prefetch
                ),
            ));
        }
        let c = &self.coll;
        if c.fanout == 0 || c.fanout > 64 {
            return Err(("nic.coll.fanout".into(), format!("must be 1 to 64, got {}", c.fanout)));
        }
        for (k, r) in [
            ("rate_f32", c.rate_f32),
            ("rate_f64", c.rate_f64),
            ("rate_i32", c.rate_i32),
            ("rate_i64", c.rate_i64),
        ] {
            if r.0 == 0 {
                return Err((format!("nic.coll.{k}"), "must be positive".into()));
            }
        }
        if c.jitter > SimTime::from_ms(1000) {
            return Err((
                "nic.coll.jitter".into(),
                format!("must be at most 1 s, got {}", c.jitter),
            ));
        }
        if let Some(r) = &c.recovery {
            if r.timeout == SimTime::ZERO {
                return Err(("nic.coll.recovery.timeout".into(), "must be positive".into()));
            }
        }
        if let Some(t) = &self.triggered {
            t.validate("nic.triggered")?;
        }
        if let Some(r) = &self.reliability {
            r.validate("nic.reliability")?;
        }
        if !(0.0..1.0).contains(&self.loss_rate) {
            return Err((
                "nic.loss_rate".into(),
                format!(
                    "must be a probability from 0 up to (not including) 1, got {}",
                    self.loss_rate
                ),
            ));
        }
        if let Some(a) = &self.rx_aggregation {
            a.validate("nic.rx_aggregation")?;
        }
        self.host.validate("nic.host")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_prefetch_is_off_by_default_and_bounded_by_max_in_flight() {
        let c = NicConfig::default();
        assert_eq!(c.descriptor_prefetch, 0);
        let ok = NicConfig {
            descriptor_prefetch: c.max_in_flight,
            ..c.clone()
        };
        assert!(ok.validate().is_ok());
        let bad = NicConfig {
            max_in_flight: 4,
            descriptor_prefetch: 5,
            ..c
        };
        let (key, why) = bad.validate().unwrap_err();
        assert_eq!(key, "nic.descriptor_prefetch");
        assert!(why.contains("nic.max_in_flight = 4") && why.contains("got 5"), "{why}");
    }

    #[test]
    fn triggered_defaults_are_the_test_bed_and_bad_values_name_their_key() {
        let t = TriggeredConfig::default();
        assert_eq!((t.units, t.streams, t.collectives, t.buffer.0), (8, 16, 32, 512 * 1024));
        assert_eq!(t.slot_bytes(), 1024);
        assert_eq!(t.pulse_elements(8), 128);
        assert_eq!(t.pulse_elements(4), 128);
        assert!(t.validate("nic.triggered").is_ok());
        let cases: [(TriggeredConfig, &str); 6] = [
            (TriggeredConfig { units: 0, ..t.clone() }, "nic.triggered.units"),
            (
                TriggeredConfig {
                    collectives: 300,
                    ..t.clone()
                },
                "nic.triggered.collectives",
            ),
            (TriggeredConfig { slots: 1, ..t.clone() }, "nic.triggered.slots"),
            (
                TriggeredConfig {
                    buffer: Bytes(64),
                    ..t.clone()
                },
                "nic.triggered.buffer",
            ),
            (
                TriggeredConfig {
                    pulse_counters: 0,
                    ..t.clone()
                },
                "nic.triggered.pulse_counters",
            ),
            (
                TriggeredConfig {
                    rate_f64: BitsPerSec(0),
                    ..t.clone()
                },
                "nic.triggered.rate_f64",
            ),
        ];
        for (c, key) in cases {
            let n = NicConfig {
                triggered: Some(c),
                ..NicConfig::default()
            };
            assert_eq!(n.validate().unwrap_err().0, key);
        }
    }

    #[test]
    fn pcie_rates() {
        let h = HostConfig::default();
        // Gen3 x16: 8 GT/s x 16 x 128/130 = 126.03 Gb/s.
        assert_eq!(h.link_rate().0, 126_030_769_230);
        // 256 B TLPs with 24 B overhead: x 256/280.
        assert!((h.write_rate().as_gbps_f64() - 126.03 * 256.0 / 280.0).abs() < 0.01);
        // Gen2 x8 (cHPP): 4 GB/s after 8b/10b.
        let c = HostConfig {
            pcie_gen: 2,
            lanes: 8,
            ..h.clone()
        };
        assert_eq!(c.link_rate().0, 32_000_000_000);
        // Tag-limited reads: 1 tag of 512 B per 200 ns = 20.48 Gb/s.
        let t = HostConfig {
            read_tags: 1,
            ..h.clone()
        };
        assert_eq!(t.read_rate().0, 20_480_000_000);
        // Reads return completions of the read request split at the max payload: 512 B requests
        // come back as 256 B completions, 64 B requests as 64 B completions (x 64/88).
        assert_eq!(h.completion_size().0, 256);
        assert_eq!(h.read_rate(), h.write_rate());
        let small = HostConfig {
            read_request: Bytes(64),
            read_tags: 256,
            ..c
        };
        assert_eq!(small.completion_size().0, 64);
        assert_eq!(small.read_rate().0, 32_000_000_000 * 64 / 88);
    }
}
