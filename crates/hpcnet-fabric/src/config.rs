//! Fabric configuration: links, routers, packets, routing and faults, as read from a scenario's
//! `[link]`, `[router]`, `[packet]`, `[routing]` and `[faults]` tables.
//!
//! Every struct denies unknown keys and documents its defaults; [`FabricConfig::validate`] checks
//! cross-field constraints against the built topology and names the offending key and both values.

pub use crate::alloc::Allocator;
use crate::faults::{FaultEvent, RandomFaults};
use crate::topology::{PortIdx, RouterId, Shape, Topology};
use hpcnet_des::{BitsPerSec, Bytes, SimTime};
use serde::{Deserialize, Serialize};

/// Maximum number of virtual channels per port the model supports.
pub const MAX_VCS: usize = 8;

/// Most private or shared credits of a router input port's VC or pool.
pub const MAX_CREDITS: u32 = u16::MAX as u32;

/// Most credits one packet may occupy (a packet counts its credits in 16 bits).
pub const MAX_PACKET_CREDITS: u16 = u16::MAX;

/// Line coding of a link; the usable rate is `lanes × lane_rate × efficiency`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Encoding {
    #[serde(rename = "64b/66b")]
    #[default]
    B64B66,
    #[serde(rename = "8b/10b")]
    B8B10,
    #[serde(rename = "128b/130b")]
    B128B130,
    #[serde(rename = "none")]
    None,
}

impl Encoding {
    /// The name used in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::B64B66 => "64b/66b",
            Encoding::B8B10 => "8b/10b",
            Encoding::B128B130 => "128b/130b",
            Encoding::None => "none",
        }
    }

    /// Efficiency as a fraction (numerator, denominator).
    pub fn ratio(self) -> (u64, u64) {
        match self {
            Encoding::B64B66 => (64, 66),
            Encoding::B8B10 => (8, 10),
            Encoding::B128B130 => (128, 130),
            Encoding::None => (1, 1),
        }
    }
}

/// How a router forwards a packet arriving on a link.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Switching {
    /// Virtual cut-through: the head is forwarded as soon as it is routed and the whole packet
    /// fits downstream.
    #[default]
    CutThrough,
    /// Store-and-forward: the packet is forwarded only after its tail has arrived (the Sunway
    /// router falls back to this on error-prone links so corrupted packets are not forwarded).
    StoreAndForward,
    /// Flit-level wormhole switching for the whole fabric (`crate::net` wormhole engine):
    /// buffers and credits count flits of `link.flit_bytes`, a packet holds its output VC from
    /// head to tail and may span several routers.
    Wormhole,
}

fn d_lanes() -> u32 {
    4
}

/// `[link]`: every cable of the fabric (router–router and node–router).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Lanes per direction (default 4).
    #[serde(default = "d_lanes")]
    pub lanes: u32,
    /// Signalling rate of one lane, e.g. "28.125 Gb/s".
    pub lane_rate: BitsPerSec,
    /// Line coding (default "64b/66b").
    #[serde(default)]
    pub encoding: Encoding,
    /// Wire + SerDes latency of one traversal, e.g. "20 ns".
    pub latency: SimTime,
    /// Switching mode of the receiving router (default "cut_through").
    #[serde(default)]
    pub switching: Switching,
    /// Flit size under `switching = "wormhole"` (default 16 B, the Sunway buffer slice and the
    /// default packet header: the head flit carries the header). Only valid with wormhole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flit_bytes: Option<Bytes>,
    /// Bit-error rate after FEC, per data bit, of every link direction (default 1e-12, the
    /// Sunway links' bound, spec 01 "Reliability"; see [`crate::linkerr`]). `0`: no errors.
    #[serde(default = "d_ber")]
    pub ber: f64,
    /// Replay buffer of each link direction: bytes a sender may have sent and not yet seen
    /// acknowledged (default none: the buffer never stops a link).
    #[serde(default)]
    pub replay_buffer: Option<Bytes>,
    /// Packets the replay buffer holds at most (default: no limit besides `replay_buffer`).
    #[serde(default)]
    pub replay_packets: Option<u32>,
    /// Acknowledgement turnaround beyond the two cable traversals: the receiver's CRC check and
    /// the ACK/NAK symbol (default 0). Link round trip = 2 × `latency` + `ack_delay`.
    #[serde(default)]
    pub ack_delay: SimTime,
    /// Corrupted packets within `fallback_window` after which the receiving router of a
    /// cut-through link direction falls back to store-and-forward (default 0: never).
    #[serde(default)]
    pub fallback_errors: u32,
    /// Window in which `fallback_errors` corrupted packets trigger the fallback (default 10 us).
    #[serde(default = "d_fallback_window")]
    pub fallback_window: SimTime,
    /// Error-free time after which a fallen-back link returns to cut-through (default 100 us).
    #[serde(default = "d_fallback_clean")]
    pub fallback_clean: SimTime,
}

fn d_ber() -> f64 {
    crate::linkerr::DEFAULT_BER
}
fn d_fallback_window() -> SimTime {
    SimTime::from_us(10)
}
fn d_fallback_clean() -> SimTime {
    SimTime::from_us(100)
}

impl Default for LinkConfig {
    /// A 4-lane link of 28.125 Gb/s lanes with 64b/66b coding and 10 ns latency (the Sunway
    /// port); every other key at its documented default. Scenario files must still give
    /// `lane_rate` and `latency`: this exists for code that builds configurations.
    fn default() -> Self {
        LinkConfig {
            lanes: d_lanes(),
            lane_rate: BitsPerSec::new(28_125_000_000),
            encoding: Encoding::default(),
            latency: SimTime::from_ns(10),
            switching: Switching::default(),
            flit_bytes: None,
            ber: d_ber(),
            replay_buffer: None,
            replay_packets: None,
            ack_delay: SimTime::ZERO,
            fallback_errors: 0,
            fallback_window: d_fallback_window(),
            fallback_clean: d_fallback_clean(),
        }
    }
}

impl LinkConfig {
    /// Checks that `lanes` lanes of this link have a data rate the model can represent and that
    /// is not zero after line coding; `key` names the lane count in errors.
    pub(crate) fn check_rate(&self, lanes: u32, key: &str) -> Result<(), ConfigError> {
        let Some(raw) = self.lane_rate.0.checked_mul(u64::from(lanes)) else {
            return Err(ConfigError::new(
                key,
                format!(
                    "{lanes} lanes of link.lane_rate {} exceed the largest rate the model represents",
                    self.lane_rate
                ),
            ));
        };
        let (n, d) = self.encoding.ratio();
        if BitsPerSec(raw).scaled(n, d).0 == 0 {
            return Err(ConfigError::new(
                "link.lane_rate",
                format!(
                    "{lanes} lane{} of {} leave no data rate after {} coding",
                    if lanes == 1 { "" } else { "s" },
                    self.lane_rate,
                    self.encoding.name()
                ),
            ));
        }
        Ok(())
    }

    /// Usable data rate of the link after line coding.
    pub fn data_rate(&self) -> BitsPerSec {
        let (n, d) = self.encoding.ratio();
        (self.lane_rate * self.lanes as u64).scaled(n, d)
    }
}

/// A per-link exception: the link leaving `router` by `port` (both directions).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkOverride {
    pub router: RouterId,
    pub port: PortIdx,
    /// Lanes still working (width renegotiation 4 → 2 → 1).
    pub lanes: Option<u32>,
    pub latency: Option<SimTime>,
    pub switching: Option<Switching>,
    /// Post-FEC bit-error rate of this cable (both directions), instead of `link.ber`.
    pub ber: Option<f64>,
}

/// Output arbitration policy.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Arbitration {
    #[default]
    RoundRobin,
    /// Oldest packet (by creation time) first.
    Age,
}

fn d_vcs() -> u8 {
    4
}
fn d_credit_unit() -> Bytes {
    Bytes(64)
}
fn d_private() -> u32 {
    8
}
fn d_latency() -> SimTime {
    SimTime::from_ns(20)
}

/// `[router]`: every router chip.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterConfig {
    /// Virtual channels per port (default 4).
    #[serde(default = "d_vcs")]
    pub vcs: u8,
    /// Bytes per credit (default 64 B = 4 slices × 16 B, the Sunway block).
    #[serde(default = "d_credit_unit")]
    pub credit_unit: Bytes,
    /// Private credits of each VC of each input port (default 8).
    #[serde(default = "d_private")]
    pub private_credits: u32,
    /// Shared credits of each input port, usable by any VC (default 0).
    #[serde(default)]
    pub shared_credits: u32,
    /// Pipeline latency from head arrival to the output (routing + crossbar), default "20 ns".
    #[serde(default = "d_latency")]
    pub latency: SimTime,
    /// Output arbitration (default "round_robin").
    #[serde(default)]
    pub arbitration: Arbitration,
    /// How a packet's VC class is chosen at injection (default "round_robin").
    #[serde(default)]
    pub vc_select: VcSelect,
    /// Injection queues of a node's port (default "per_vc"): one per VC, so a packet waiting
    /// for credits on one VC does not hold back another VC's; or one FIFO for all VCs.
    #[serde(default)]
    pub node_injection: NodeInjection,
    /// Multicast routing tables per input port (default 32, spec 01 SWHRC: "per port 32
    /// multicast routing tables, each replicating to any subset of the 40 ports").
    #[serde(default = "d_multicast_tables")]
    pub multicast_tables: u32,
    /// Packets that may leave one input port at the same time, whatever their VCs (default 1:
    /// the conventional input-queued router, one crossbar input per port). A value of at least
    /// `vcs` removes the constraint.
    #[serde(default = "d_speedup")]
    pub input_speedup: u32,
    /// Packets that may cross the crossbar into one output port per packet time (default 1:
    /// the crossbar feeds the link directly). With `S > 1` the output holds up to `S − 1`
    /// packets waiting for its link, so an input is freed while the link is still busy.
    #[serde(default = "d_speedup")]
    pub output_speedup: u32,
    /// Switch allocator ([`crate::alloc`]): `round_robin` or `age` decide each output on its
    /// own (the policy `arbitration` names); `islip`, `separable_input_first` and
    /// `separable_output_first` match a router's inputs and outputs together. Default: the
    /// `arbitration` policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocator: Option<Allocator>,
    /// Iterations of the iSLIP allocator (default 1).
    #[serde(default = "d_speedup")]
    pub islip_iterations: u32,
    /// Output-VC allocation (default `shared`: no allocation stage, packets share a
    /// downstream VC buffer as its credits allow, the virtual cut-through rule). `per_packet`:
    /// a packet must win a free output VC at each hop; the VC is held by that one packet until
    /// its tail has left the downstream buffer and the credits are back (the flit-level
    /// routers' rule, Dally & Towles ch. 13).
    #[serde(default)]
    pub vc_allocation: VcAllocation,
    /// The pipeline stages that make up `latency`, if given: route computation, VC allocation,
    /// switch allocation and switch traversal. Those given must sum to `latency` (missing
    /// stages count 0); the model applies the sum once, from head arrival to the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_latency: Option<SimTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vc_alloc_latency: Option<SimTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_alloc_latency: Option<SimTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traversal_latency: Option<SimTime>,
    /// Internal crossbar model ([`crate::crossbar`]): `ideal` (default, non-blocking) or
    /// `tiled` (the Sunway / YARC tiled crossbar as a column-channel contention model).
    #[serde(default, skip_serializing_if = "CrossbarKind::is_ideal")]
    pub crossbar: CrossbarKind,
    /// Tiled crossbar: rows of the tile array (default 5; each tile has this many column
    /// buffers, spec 01: 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tile_rows: Option<u16>,
    /// Tiled crossbar: tiles per row (default 8; each tile has this many row buffers, spec
    /// 01: 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tile_cols: Option<u16>,
    /// Tiled crossbar: column channels of a tile (default `per_tile`: one shared by the
    /// outputs of its column; `per_output`: one per output, the YARC subswitch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column_channel: Option<ColumnChannel>,
    /// How an output whose chosen packet's input port is being read out by another output
    /// waits for it (input speedup 1, per-output policies, ideal crossbar): `timed` (default)
    /// looks again at the time the read ends, when another output may have taken the port
    /// first; `registered` queues the output at that input port, which serves its waiting
    /// outputs in the order they came when the read ends.
    #[serde(default, skip_serializing_if = "InputWait::is_timed")]
    pub input_wait: InputWait,
    /// When an output decides its next packet (per-output policies, output speedup 1,
    /// packet-level switching): `at_free` (default) when its link frees, `ahead` as soon as
    /// the packet on its link has started, for a transfer that starts when the link frees.
    #[serde(default, skip_serializing_if = "Decide::is_at_free")]
    pub decide: Decide,
}

/// `router.decide`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Decide {
    /// The output decides when its link frees (and when a request reaches a free output).
    #[default]
    AtFree,
    /// The output decides its next packet while the previous one is on the link: at most one
    /// packet is granted ahead, and its crossbar transfer and transmission start when the link
    /// frees.
    Ahead,
}

impl Decide {
    fn is_at_free(&self) -> bool {
        *self == Decide::AtFree
    }
}

/// `router.input_wait`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum InputWait {
    /// A timed decision of the output when the read ends.
    #[default]
    Timed,
    /// The output waits in the input port's queue of outputs, served when the read ends.
    Registered,
}

impl InputWait {
    fn is_timed(&self) -> bool {
        *self == InputWait::Timed
    }
}

/// `router.crossbar`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CrossbarKind {
    /// Non-blocking: only the input read slots and the output links are resources.
    #[default]
    Ideal,
    /// Tiled: a packet also holds a column channel of the tile array.
    Tiled,
}

impl CrossbarKind {
    fn is_ideal(&self) -> bool {
        *self == CrossbarKind::Ideal
    }
}

/// `router.column_channel`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ColumnChannel {
    /// One channel per tile, shared by the outputs of its column.
    #[default]
    PerTile,
    /// One channel per (tile, output of its column).
    PerOutput,
}

/// The resolved tiled-crossbar parameters.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TiledCrossbar {
    pub tile_rows: u16,
    pub tile_cols: u16,
    pub column_channel: ColumnChannel,
}

/// How a packet obtains its downstream VC (`router.vc_allocation`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum VcAllocation {
    /// No allocation: packets share a VC buffer as its credits allow.
    #[default]
    Shared,
    /// One packet per VC buffer at a time, held until its credits return.
    PerPacket,
}

fn d_speedup() -> u32 {
    1
}

impl RouterConfig {
    /// The tiled crossbar's parameters with their defaults (the Sunway 5 × 8 array), or None
    /// for the ideal crossbar.
    pub fn tiled(&self) -> Option<TiledCrossbar> {
        (self.crossbar == CrossbarKind::Tiled).then(|| TiledCrossbar {
            tile_rows: self.tile_rows.unwrap_or(5),
            tile_cols: self.tile_cols.unwrap_or(8),
            column_channel: self.column_channel.unwrap_or_default(),
        })
    }

    /// The switch allocator in force: `allocator` if given, else the `arbitration` policy.
    pub fn switch_allocator(&self) -> Allocator {
        self.allocator.unwrap_or(match self.arbitration {
            Arbitration::RoundRobin => Allocator::RoundRobin,
            Arbitration::Age => Allocator::Age,
        })
    }
}

impl Default for RouterConfig {
    /// Every key at its documented default (code that builds configurations; scenario files
    /// get the same defaults from serde).
    fn default() -> Self {
        RouterConfig {
            vcs: d_vcs(),
            credit_unit: d_credit_unit(),
            private_credits: d_private(),
            shared_credits: 0,
            latency: d_latency(),
            arbitration: Arbitration::default(),
            vc_select: VcSelect::default(),
            node_injection: NodeInjection::default(),
            multicast_tables: d_multicast_tables(),
            input_speedup: d_speedup(),
            output_speedup: d_speedup(),
            allocator: None,
            islip_iterations: d_speedup(),
            vc_allocation: VcAllocation::default(),
            route_latency: None,
            vc_alloc_latency: None,
            switch_alloc_latency: None,
            traversal_latency: None,
            crossbar: CrossbarKind::Ideal,
            tile_rows: None,
            tile_cols: None,
            column_channel: None,
            input_wait: InputWait::Timed,
            decide: Decide::AtFree,
        }
    }
}

fn d_multicast_tables() -> u32 {
    32
}

/// How a node's packets queue for its link.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NodeInjection {
    /// One queue per VC, served round-robin among heads that fit downstream.
    #[default]
    PerVc,
    /// A single FIFO for all VCs (head-of-line blocking at the source).
    Fifo,
}

/// VC class assignment at injection, among the classes the routing algorithm leaves free.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum VcSelect {
    /// Successive packets of the network take successive classes.
    #[default]
    RoundRobin,
    /// Class = destination node mod number of classes (cHPP crossbar, spec 02).
    Destination,
    /// The class the sender put in the packet (NIC models: e.g. GET requests on their own VC).
    Packet,
}

fn d_header() -> Bytes {
    Bytes(16)
}
fn d_max_payload() -> Bytes {
    Bytes(256)
}

/// `[packet]`: packet format.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PacketConfig {
    /// Header bytes carried by every packet (default 16 B).
    #[serde(default = "d_header")]
    pub header: Bytes,
    /// Largest payload of one packet (default 256 B).
    #[serde(default = "d_max_payload")]
    pub max_payload: Bytes,
}

impl Default for PacketConfig {
    fn default() -> Self {
        PacketConfig {
            header: d_header(),
            max_payload: d_max_payload(),
        }
    }
}

/// How torus and mesh routing avoids deadlock in the rings.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum DeadlockAvoidance {
    /// Bubble flow control (NICEVT): a packet may enter a ring only if the buffer it enters keeps
    /// room for one more maximum-size packet afterwards. Needs one VC per class.
    #[default]
    Bubble,
    /// Dateline: VC 0 before crossing the wrap-around link of the dimension, VC 1 after it.
    Dateline,
    /// Nothing (to demonstrate deadlock).
    None,
}

/// Port choice when a routing entry offers several ports.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// First live port of the ordered entry (ordered per destination, D-mod-k).
    #[default]
    Deterministic,
    /// The candidate with most downstream credits.
    Adaptive,
    /// Oblivious: a port drawn per packet and hop from the packet's random bits (drawn at
    /// injection from the run's seeded stream), whatever the destination or the load.
    Random,
}

/// Direction of a dimension-order step in a ring of even size `k` when the destination is
/// exactly `k/2` away (both ways are minimal).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TieRule {
    /// Always the plus way. Uniform traffic then loads the plus links (k+2)/8 per unit of
    /// injected load and the minus links (k−2)/8, instead of k/8 each: the throughput bound
    /// falls by k/(k+2), to 0.8 on an 8-ary ring.
    Positive,
    /// Per packet and dimension, from the packet's random bits (seeded stream): balanced on
    /// average, but packets of one source–destination pair may take different ways (and
    /// arrive out of order).
    Random,
    /// By a fixed rule: the plus way from an even coordinate, the minus way from an odd one.
    /// For every ring, half the sources at each distance `k/2` go each way, so uniform traffic
    /// loads both directions equally, and all packets of one pair take one path (in order).
    #[default]
    Balanced,
}

/// `[routing]`: the routing algorithm; which ones apply depends on the topology.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "algorithm", rename_all = "snake_case", deny_unknown_fields)]
pub enum RoutingConfig {
    /// Torus/mesh/hypercube: dimension order (on a crossbar, plain ejection).
    DimensionOrder {
        #[serde(default)]
        deadlock: DeadlockAvoidance,
        /// Direction at a distance of exactly k/2 (default `balanced`).
        #[serde(default)]
        tie: TieRule,
    },
    /// Torus/mesh: minimal adaptive on VCs ≥ 1 (≥ 2 with dateline) with a dimension-order escape.
    MinimalAdaptive {
        #[serde(default)]
        deadlock: DeadlockAvoidance,
        /// Direction of the dimension-order escape at a distance of exactly k/2.
        #[serde(default)]
        tie: TieRule,
    },
    /// Trees (fat tree, leaf–spine, generalized fat tree): up*/down* with deterministic or
    /// adaptive choice of the up port.
    UpDown {
        #[serde(default)]
        selection: Selection,
    },
    /// Sunway two-level routing tables (GUID = supernode, index) with deterministic or adaptive
    /// selection among the ports of an entry.
    Table {
        #[serde(default)]
        selection: Selection,
    },
    /// Dragonfly: minimal local–global–local with VC = hop class.
    Minimal,
    /// Dragonfly: Valiant's randomised routing (Kim, Dally, Scott & Abts, ISCA 2008): minimally
    /// to a random intermediate group, then minimally to the destination; VC = hop class.
    Valiant,
    /// Dragonfly: UGAL-L (Kim et al. 2008, after Singh 2005): the source router takes the
    /// minimal path unless its first output's queue × the minimal hop count exceeds the Valiant
    /// path's first queue × its hop count by more than `threshold` (credits × hops).
    Ugal {
        #[serde(default)]
        threshold: u32,
    },
    /// Source routing: the whole path is computed at injection (deterministic variant of the
    /// topology's default algorithm) and carried in the header.
    Source,
}

impl RoutingConfig {
    /// Whether every packet of one source–destination pair takes the same path: no adaptive
    /// choice, no per-packet random tie or port. (Packets may still overtake one another on
    /// different VCs; [`crate::Network::preserves_order`] accounts for that.)
    pub fn deterministic(&self) -> bool {
        match self {
            RoutingConfig::DimensionOrder { tie, .. } => *tie != TieRule::Random,
            RoutingConfig::MinimalAdaptive { .. } => false,
            RoutingConfig::UpDown { selection } | RoutingConfig::Table { selection } => {
                *selection == Selection::Deterministic
            }
            RoutingConfig::Minimal | RoutingConfig::Source => true,
            RoutingConfig::Valiant | RoutingConfig::Ugal { .. } => false,
        }
    }

    /// The natural algorithm for a topology family.
    pub fn default_for(shape: &Shape) -> RoutingConfig {
        Self::default_for_kind(shape_kind(shape))
    }

    /// The natural algorithm for a topology kind (`"torus"`, `"fat_tree"`, ...).
    pub fn default_for_kind(kind: &str) -> RoutingConfig {
        match kind {
            "fat_tree" | "leaf_spine" | "generalized_fat_tree" => RoutingConfig::UpDown {
                selection: Selection::Deterministic,
            },
            "dragonfly" => RoutingConfig::Minimal,
            // A single router: every packet is at its destination router on arrival and is
            // ejected before any algorithm runs. Dimension order over zero dimensions keeps every
            // VC available as a class (so `router.vc_select` spreads packets over all VCs) and
            // needs no tables; with one router there is no cycle, hence no deadlock scheme.
            "crossbar" => RoutingConfig::DimensionOrder {
                deadlock: DeadlockAvoidance::None,
                tie: TieRule::default(),
            },
            // Torus, mesh, hypercube.
            _ => RoutingConfig::DimensionOrder {
                deadlock: DeadlockAvoidance::Bubble,
                tie: TieRule::default(),
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            RoutingConfig::DimensionOrder { .. } => "dimension_order",
            RoutingConfig::MinimalAdaptive { .. } => "minimal_adaptive",
            RoutingConfig::UpDown { .. } => "up_down",
            RoutingConfig::Table { .. } => "table",
            RoutingConfig::Minimal => "minimal",
            RoutingConfig::Valiant => "valiant",
            RoutingConfig::Ugal { .. } => "ugal",
            RoutingConfig::Source => "source",
        }
    }

    /// Whether the algorithm keeps a routers × routers distance table (minimal, Valiant, UGAL).
    pub fn uses_distance_table(&self) -> bool {
        matches!(
            self,
            RoutingConfig::Minimal | RoutingConfig::Valiant | RoutingConfig::Ugal { .. }
        )
    }
}

/// A failed cable, named by one of its ends.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FailedLink {
    pub router: RouterId,
    pub port: PortIdx,
}

fn d_watchdog() -> SimTime {
    SimTime::from_us(10)
}
fn d_detection() -> SimTime {
    SimTime::from_us(1)
}
fn d_table_update() -> SimTime {
    SimTime::from_us(100)
}

/// `[faults]`: failures present before the run, failures and repairs during it, how long the
/// machine takes to notice and to rewrite its tables, and the deadlock watchdog.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    /// Links down for the whole run (both directions). Routing tables are *not* recomputed:
    /// routers skip dead ports of an entry, as the Sunway deterministic mode does.
    #[serde(default)]
    pub failed_links: Vec<FailedLink>,
    /// When packets are in flight but none has moved for this long, look for a deadlock (a cycle
    /// of queues waiting on each other) and stop the run if there is one (default 10 us).
    #[serde(default = "d_watchdog")]
    pub watchdog: SimTime,
    /// Failures and repairs at given times ([`crate::faults::schedule`]).
    #[serde(default)]
    pub events: Vec<FaultEvent>,
    /// Random failures from a seeded MTBF model, per component class.
    #[serde(default)]
    pub random: Vec<RandomFaults>,
    /// From a failure or repair to the moment the routers next to it and the NICs act on it
    /// (default 1 us, an assumption: the papers give no figure).
    #[serde(default = "d_detection")]
    pub detection: SimTime,
    /// Management delay from detection to installing recomputed routing tables (default
    /// 100 us, an assumption).
    #[serde(default = "d_table_update")]
    pub table_update: SimTime,
    /// NICEVT torus fault bypass: recomputed tables give the pairs whose path crosses a failure a
    /// "non-standard first and last step" route (spec 03). Reserves half the VCs for last steps.
    #[serde(default)]
    pub torus_bypass: bool,
}

impl FaultConfig {
    /// Whether faults can change during a run (a schedule or random failures).
    pub fn dynamic(&self) -> bool {
        !self.events.is_empty() || !self.random.is_empty()
    }
}

/// The dynamic-fault keys are written out (in resolved scenarios) only when the scenario uses
/// them, so scenarios without them read as before.
impl Serialize for FaultConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let used = self.dynamic() || self.torus_bypass;
        let mut st = s.serialize_struct("FaultConfig", if used { 7 } else { 2 })?;
        st.serialize_field("failed_links", &self.failed_links)?;
        st.serialize_field("watchdog", &self.watchdog)?;
        if used {
            st.serialize_field("events", &self.events)?;
            st.serialize_field("random", &self.random)?;
            st.serialize_field("detection", &self.detection)?;
            st.serialize_field("table_update", &self.table_update)?;
            st.serialize_field("torus_bypass", &self.torus_bypass)?;
        }
        st.end()
    }
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            failed_links: Vec::new(),
            watchdog: d_watchdog(),
            events: Vec::new(),
            random: Vec::new(),
            detection: d_detection(),
            table_update: d_table_update(),
            torus_bypass: false,
        }
    }
}

/// A configuration error: the key path and the reason.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[error("{key}: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// Everything the fabric needs besides the topology.
#[derive(Clone, Debug, Serialize)]
pub struct FabricConfig {
    pub link: LinkConfig,
    pub link_overrides: Vec<LinkOverride>,
    pub router: RouterConfig,
    pub packet: PacketConfig,
    pub routing: RoutingConfig,
    pub faults: FaultConfig,
}

impl FabricConfig {
    /// Cross-field checks against the built topology: [`FabricConfig::validate_for_kind`], then
    /// the links named by faults and overrides.
    pub fn validate(&self, topo: &Topology) -> Result<(), ConfigError> {
        self.validate_for_kind(shape_kind(&topo.shape))?;
        self.validate_links(topo)?;
        if let Some(t) = self.router.tiled() {
            crate::crossbar::validate(&t, topo)?;
        }
        self.fault_schedule(topo).map(|_| ())
    }

    /// The resolved schedule of `faults.events` on `topo` (checked: components exist and their
    /// events alternate failure and repair), in time order.
    pub fn fault_schedule(&self, topo: &Topology) -> Result<Vec<crate::faults::schedule::Action>, ConfigError> {
        let static_failed: Vec<(RouterId, PortIdx)> =
            self.faults.failed_links.iter().map(|f| (f.router, f.port)).collect();
        crate::faults::schedule::resolve(&self.faults.events, topo, &static_failed, self.link.lanes)
    }

    /// Every check that needs only the topology's kind (`"torus"`, `"dragonfly"`, ...), not the
    /// built topology: it runs before a large network is built.
    pub fn validate_for_kind(&self, kind: &str) -> Result<(), ConfigError> {
        let r = &self.router;
        if r.vcs == 0 {
            return Err(ConfigError::new("router.vcs", "must be at least 1"));
        }
        if r.vcs as usize > MAX_VCS {
            return Err(ConfigError::new(
                "router.vcs",
                format!("at most {MAX_VCS} virtual channels are supported, got {}", r.vcs),
            ));
        }
        if r.credit_unit.0 == 0 {
            return Err(ConfigError::new("router.credit_unit", "must be at least 1 B"));
        }
        if self.link.lanes == 0 {
            return Err(ConfigError::new("link.lanes", "must be at least 1"));
        }
        if self.link.lane_rate.0 == 0 {
            return Err(ConfigError::new("link.lane_rate", "must be positive"));
        }
        self.link.check_rate(self.link.lanes, "link.lanes")?;
        if self.faults.watchdog == SimTime::ZERO {
            return Err(ConfigError::new(
                "faults.watchdog",
                "must be longer than 0 (it is how long packets may stand still before the run is declared deadlocked)",
            ));
        }
        if self.packet.max_payload.0 == 0 {
            return Err(ConfigError::new("packet.max_payload", "must be at least 1 B"));
        }
        let max_pkt = self.packet.header + self.packet.max_payload;
        if max_pkt.0 > u64::from(u32::MAX) {
            // Blame the larger of the two: that is the one out of range.
            let key = if self.packet.header > self.packet.max_payload {
                "packet.header"
            } else {
                "packet.max_payload"
            };
            return Err(ConfigError::new(
                key,
                format!(
                    "a maximum-size packet (packet.header {} + packet.max_payload {}) must be smaller than 4 GiB",
                    self.packet.header, self.packet.max_payload
                ),
            ));
        }
        let need = max_pkt.blocks_of(r.credit_unit);
        if need > u64::from(MAX_PACKET_CREDITS) {
            return Err(ConfigError::new(
                "router.credit_unit",
                format!(
                    "a maximum-size packet ({max_pkt}) needs {need} credits of {}, more than the {MAX_PACKET_CREDITS} one packet may hold; use a larger credit unit or a smaller packet.max_payload",
                    r.credit_unit
                ),
            ));
        }
        // A VC counts its private credits in 16 bits; the shared pool and the multicast tables
        // are bounded alike so that no count can ask for more state than a machine holds.
        for (key, v) in [
            ("router.private_credits", r.private_credits),
            ("router.shared_credits", r.shared_credits),
            ("router.multicast_tables", r.multicast_tables),
        ] {
            if v > MAX_CREDITS {
                return Err(ConfigError::new(key, format!("must be at most {MAX_CREDITS}, got {v}")));
            }
        }
        for (key, v) in [
            ("router.input_speedup", r.input_speedup),
            ("router.output_speedup", r.output_speedup),
        ] {
            if v == 0 {
                return Err(ConfigError::new(
                    key,
                    "must be at least 1 (packets a port moves through the crossbar at once)",
                ));
            }
            if v > 64 {
                return Err(ConfigError::new(key, format!("must be at most 64, got {v}")));
            }
        }
        if r.islip_iterations == 0 || r.islip_iterations > 64 {
            return Err(ConfigError::new(
                "router.islip_iterations",
                format!("must be between 1 and 64, got {}", r.islip_iterations),
            ));
        }
        let stages = [
            ("route_latency", r.route_latency),
            ("vc_alloc_latency", r.vc_alloc_latency),
            ("switch_alloc_latency", r.switch_alloc_latency),
            ("traversal_latency", r.traversal_latency),
        ];
        if stages.iter().any(|(_, v)| v.is_some()) {
            let sum = stages
                .iter()
                .fold(SimTime::ZERO, |a, (_, v)| a + v.unwrap_or(SimTime::ZERO));
            if sum != r.latency {
                let parts: Vec<String> = stages
                    .iter()
                    .filter_map(|(k, v)| v.map(|t| format!("{k} {t}")))
                    .collect();
                return Err(ConfigError::new(
                    "router.latency",
                    format!(
                        "is {} but the pipeline stages sum to {} ({}); they must agree",
                        r.latency,
                        sum,
                        parts.join(" + ")
                    ),
                ));
            }
        }
        if r.allocator == Some(Allocator::RoundRobin) && r.arbitration == Arbitration::Age {
            return Err(ConfigError::new(
                "router.allocator",
                "'round_robin' conflicts with router.arbitration = 'age'; set one of the two",
            ));
        }
        if r.crossbar == CrossbarKind::Ideal {
            for (key, given) in [
                ("router.tile_rows", r.tile_rows.is_some()),
                ("router.tile_cols", r.tile_cols.is_some()),
                ("router.column_channel", r.column_channel.is_some()),
            ] {
                if given {
                    return Err(ConfigError::new(
                        key,
                        "applies only to router.crossbar = 'tiled' (the crossbar is 'ideal')",
                    ));
                }
            }
        } else if self.link.switching == Switching::Wormhole {
            return Err(ConfigError::new(
                "router.crossbar",
                "'tiled' is a packet-level model; it cannot be combined with link.switching = 'wormhole'",
            ));
        }
        crate::net::wormhole::validate(self, kind)?;
        let wormhole = self.link.switching == Switching::Wormhole;
        let per_vc = u64::from(r.private_credits) + u64::from(r.shared_credits);
        if per_vc < need && !wormhole {
            return Err(ConfigError::new(
                "router.private_credits",
                format!(
                    "a VC can hold {per_vc} credits ({} private + {} shared) but a maximum-size packet ({max_pkt}) needs {need} credits of {}; virtual cut-through needs room for a whole packet",
                    r.private_credits, r.shared_credits, r.credit_unit
                ),
            ));
        }
        crate::linkerr::validate(self)?;
        let algo = self.routing.name();
        check_algorithm_applies(algo, kind)?;
        // VC requirements of each deadlock-avoidance scheme.
        let wrap = kind == "torus";
        let dragonfly = kind == "dragonfly";
        let need_vcs = match &self.routing {
            RoutingConfig::DimensionOrder {
                deadlock: DeadlockAvoidance::Dateline,
                ..
            } if wrap => 2,
            RoutingConfig::MinimalAdaptive {
                deadlock: DeadlockAvoidance::Dateline,
                ..
            } => 3,
            RoutingConfig::MinimalAdaptive { .. } => 2,
            RoutingConfig::Minimal => 3,
            // Local and global hop to the intermediate group, then the minimal three.
            RoutingConfig::Valiant | RoutingConfig::Ugal { .. } => 5,
            RoutingConfig::Source if dragonfly => 3,
            RoutingConfig::Source if wrap => 2,
            _ => 1,
        };
        if (r.vcs as u32) < need_vcs {
            return Err(ConfigError::new(
                "router.vcs",
                format!(
                    "routing '{algo}' on '{kind}' needs at least {need_vcs} virtual channels, router.vcs = {}",
                    r.vcs
                ),
            ));
        }
        if let RoutingConfig::DimensionOrder {
            deadlock: DeadlockAvoidance::Bubble,
            ..
        }
        | RoutingConfig::MinimalAdaptive {
            deadlock: DeadlockAvoidance::Bubble,
            ..
        } = &self.routing
        {
            if wrap && r.vc_allocation == VcAllocation::PerPacket {
                // Bubble flow control keeps room for a packet in a ring's buffers; with a VC held
                // by one packet until its credits return, room in a buffer is not a free VC, and
                // a ring whose every VC holds a blocked packet deadlocks with credits to spare.
                return Err(ConfigError::new(
                    "router.vc_allocation",
                    "\"per_packet\" cannot be combined with bubble flow control on a torus (routing.deadlock = \
                     \"bubble\"): bubble flow control counts free buffer room, which a VC held per packet does not \
                     free; use routing.deadlock = \"dateline\""
                        .to_string(),
                ));
            }
            if wrap && u64::from(r.private_credits) < 2 * need {
                return Err(ConfigError::new(
                    "router.private_credits",
                    format!(
                        "bubble flow control needs private room for two maximum-size packets ({} credits), got {}",
                        2 * need,
                        r.private_credits
                    ),
                ));
            }
        }
        for (i, o) in self.link_overrides.iter().enumerate() {
            if let Some(lanes) = o.lanes {
                if !LANE_WIDTHS.contains(&lanes) {
                    return Err(ConfigError::new(
                        format!("link_overrides[{i}].lanes"),
                        format!(
                            "must be a width a link renegotiates to ({}), got {lanes} (fail the link with faults.failed_links instead of 0)",
                            LANE_WIDTHS.map(|w| w.to_string()).join(", ")
                        ),
                    ));
                }
                if lanes > self.link.lanes {
                    return Err(ConfigError::new(
                        format!("link_overrides[{i}].lanes"),
                        format!(
                            "a link keeps at most its link.lanes = {} working lanes, got {lanes}",
                            self.link.lanes
                        ),
                    ));
                }
                self.link.check_rate(lanes, &format!("link_overrides[{i}].lanes"))?;
            }
        }
        let f = &self.faults;
        crate::faults::schedule::validate_for_kind(
            &f.events,
            &f.random,
            f.torus_bypass,
            kind,
            &self.routing,
            r.vcs,
            self.link.lanes,
        )
    }

    /// The routers and ports named by `faults.failed_links` and `link_overrides` exist.
    fn validate_links(&self, topo: &Topology) -> Result<(), ConfigError> {
        for (i, f) in self
            .faults
            .failed_links
            .iter()
            .chain(
                self.link_overrides
                    .iter()
                    .map(|o| FailedLink {
                        router: o.router,
                        port: o.port,
                    })
                    .collect::<Vec<_>>()
                    .iter(),
            )
            .enumerate()
        {
            let key = if i < self.faults.failed_links.len() {
                format!("faults.failed_links[{i}]")
            } else {
                format!("link_overrides[{}]", i - self.faults.failed_links.len())
            };
            let Some(router) = topo.routers.get(f.router.index()) else {
                return Err(ConfigError::new(
                    format!("{key}.router"),
                    format!(
                        "router {} does not exist (the topology has {})",
                        f.router,
                        topo.routers.len()
                    ),
                ));
            };
            if f.port.index() >= router.ports.len()
                || matches!(router.ports[f.port.index()], crate::topology::Peer::None)
            {
                return Err(ConfigError::new(
                    format!("{key}.port"),
                    format!("router {} has no cabled port {}", f.router, f.port),
                ));
            }
        }
        Ok(())
    }
}

/// Lane widths a link may renegotiate to (x16 → x8 → x4 → x2 → x1).
pub const LANE_WIDTHS: [u32; 5] = [1, 2, 4, 8, 16];

/// The topology kinds each routing algorithm applies to (`source` applies to every kind).
pub const ALGORITHM_KINDS: [(&str, &[&str]); 7] = [
    ("dimension_order", &["torus", "mesh", "hypercube", "crossbar"]),
    ("minimal_adaptive", &["torus", "mesh"]),
    ("up_down", &["fat_tree", "leaf_spine", "generalized_fat_tree"]),
    ("table", &["leaf_spine", "generalized_fat_tree"]),
    ("minimal", &["dragonfly"]),
    ("valiant", &["dragonfly"]),
    ("ugal", &["dragonfly"]),
];

/// Refuses a routing algorithm on a topology kind it does not apply to, naming the kinds it
/// applies to. Unknown algorithms and kinds pass (they are reported where they are parsed).
pub fn check_algorithm_applies(algo: &str, kind: &str) -> Result<(), ConfigError> {
    let Some((_, kinds)) = ALGORITHM_KINDS.iter().find(|(a, _)| *a == algo) else {
        return Ok(());
    };
    let known = ALGORITHM_KINDS.iter().any(|(_, k)| k.contains(&kind));
    if !known || kinds.contains(&kind) {
        return Ok(());
    }
    let fitting: Vec<&str> = ALGORITHM_KINDS
        .iter()
        .filter(|(_, k)| k.contains(&kind))
        .map(|(a, _)| *a)
        .chain(["source"])
        .collect();
    Err(ConfigError::new(
        "routing.algorithm",
        format!(
            "'{algo}' does not apply to topology kind '{kind}' (it applies to {}; on '{kind}' use {})",
            kinds.join(", "),
            fitting.join(" or ")
        ),
    ))
}

/// The `kind` string of a topology family, for messages.
pub fn shape_kind(shape: &Shape) -> &'static str {
    match shape {
        Shape::Torus { wrap: true, .. } => "torus",
        Shape::Torus { wrap: false, .. } => "mesh",
        Shape::Hypercube { .. } => "hypercube",
        Shape::FatTree { .. } => "fat_tree",
        Shape::LeafSpine { .. } => "leaf_spine",
        Shape::GeneralizedFatTree { .. } => "generalized_fat_tree",
        Shape::Dragonfly { .. } => "dragonfly",
        Shape::Crossbar { .. } => "crossbar",
    }
}
