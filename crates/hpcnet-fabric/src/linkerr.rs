//! Link-level reliability: bit errors left after FEC, the receiver's CRC check, go-back-N
//! retransmission from a bounded replay buffer, and the per-link fallback from virtual
//! cut-through to store-and-forward on error-prone links. This module owns the model's state
//! and arithmetic per link direction; the network ([`crate::net`]) calls it when it sends a
//! packet.
//!
//! Sources: spec 01 (Sunway, "Reliability": BER < 1e-12 at 28 Gb/s, FEC RS(528,514), "CRC32
//! check with link-level retransmission"; "Router": "virtual cut-through, with dynamic
//! fallback to store-and-forward per link, e.g. on error-prone links, so that corrupted
//! packets are not forwarded") and spec 03 (NICEVT: "output side with a replay buffer ... a
//! packet whose checksum fails is requested again").
//!
//! Model:
//! - **Errors**: every data bit a link direction carries is wrong with probability `ber`
//!   (`link.ber`, per cable `link_overrides[].ber`), independently: a packet of `S` bytes is
//!   corrupted with probability `1 − (1 − ber)^(8S)`. The process is drawn as geometric gaps
//!   (error-free bits before the next error) from the link direction's own seeded stream
//!   ([`hpcnet_des::RngStreams`], kind `"link.bit_errors"`, index = the output port), so a
//!   draw happens once per error, never per packet, and runs stay byte-identical. Bits of
//!   every transmission count, retransmissions and discarded copies included.
//! - **CRC and go-back-N**: the receiver checks the CRC when the tail has arrived and answers
//!   with a NAK, which reaches the sender one `link.ack_delay` plus one cable latency later.
//!   The sender then resends from the corrupted packet on; the packets it had sent after it
//!   are discarded by the receiver. Go-back-N (as PCIe's data link layer) keeps a link's
//!   packets in order and needs no reordering buffer at the receiver — selective repeat
//!   would. *Simplification*: the packets sent between a corrupted packet and its NAK are not
//!   simulated; the port sends nothing in that window, which gives the same delivery times
//!   (they would be discarded and resent in the same order) and the same wasted link time.
//!   So a corrupted transmission costs its serialisation `T` plus the round trip
//!   `R = 2 × latency + ack_delay` before the resend starts.
//! - **Replay buffer** (`link.replay_buffer` bytes, `link.replay_packets` packets): a sent
//!   packet stays in it until acknowledged, `T + R` after its (successful) transmission
//!   starts. A packet that does not fit is not sent: the link stalls until enough
//!   acknowledgements are back. With no errors a link then carries at most
//!   `min(1, ⌊B/S⌋ S / (rate × (T + R)))` of its rate ([`replay_throughput`]); with errors and
//!   a buffer that does not limit, the goodput of go-back-N is `(1 − p) / (1 + p R / T)`
//!   ([`gbn_goodput`]). ACKs and NAKs are control symbols that take no bandwidth of the
//!   reverse direction (*simplification*).
//! - **Cut-through and corrupted packets**: under virtual cut-through the receiving router
//!   routes a packet's head, and may start forwarding it, before its tail (and CRC) arrive.
//!   The model follows what such routers do: a corrupted copy that has started to leave is
//!   finished with a bad end marker ("stomped"), and the next receiver discards it when its
//!   tail arrives (it takes that link's time and buffer credits meanwhile, and is not
//!   retransmitted there); a corrupted copy that has not started to leave by the time its
//!   tail arrives is discarded where it is. *Simplifications*: the corrupted copy shares the
//!   input buffer credits of its good retransmission, and a copy still waiting for its output
//!   when its tail arrives is discarded when it is next offered the output rather than at
//!   that instant. Store-and-forward receivers check the CRC before forwarding, so corrupted
//!   packets never leave them. Multicast packets leave no forwarded copies (their corrupted
//!   copies are discarded by the receiver).
//! - **Fallback**: after `link.fallback_errors` corrupted packets within
//!   `link.fallback_window` on one link direction, its receiving router switches that input to
//!   store-and-forward; after `link.fallback_clean` without an error it returns to cut-through
//!   (checked when the link next sends). A link configured store-and-forward stays so.
//!
//! Cost: with no bounded replay buffer and no error due, a packet-hop costs a flag test, one
//! comparison and one subtraction; a link's first packet (its first gap is drawn then), errors,
//! replay accounting and fallbacks run out of line. Memory: 9 bytes per output port, a list of
//! the ports whose cable overrides `link.ber`, and, once any port needs one, 4 bytes per port
//! plus a record per link direction that has seen an error or has a bounded replay buffer (its
//! unacknowledged packets: at most the round trip's worth).

use crate::config::{ConfigError, FabricConfig, LinkConfig};
use hpcnet_des::rng::{RngStreams, SimRng};
use hpcnet_des::{BitsPerSec, Bytes, SimTime};
use rand::Rng;
use std::collections::VecDeque;

/// Raw bit-error rate of the Sunway 28 Gb/s links: "BER < 1e-12" (spec 01, "Reliability").
pub const SUNWAY_RAW_BER: f64 = 1e-12;

/// Default `link.ber`: the Sunway links' raw bound [`SUNWAY_RAW_BER`] taken as the rate of
/// errors left after FEC. It is an upper bound: RS(528,514) corrects up to 7 ten-bit symbols
/// per codeword, which for independent bit errors would leave far less
/// ([`rs_post_fec_ber`] gives ~1e-75); the CRC and retransmission exist for the errors the FEC
/// misses (bursts beyond its reach), whose rate the paper does not give.
pub const DEFAULT_BER: f64 = SUNWAY_RAW_BER;

/// Largest expected number of transmissions of a maximum-size packet a `ber` may imply;
/// beyond, the link would hardly ever deliver (fail it instead).
pub const MAX_EXPECTED_ATTEMPTS: f64 = 1e4;

/// Largest `link.fallback_errors`.
pub const MAX_FALLBACK_ERRORS: u32 = 1024;

/// Bit-error rate left after a Reed–Solomon code RS(n, k) over `m`-bit symbols decodes a
/// channel with independent bit errors at `raw_ber` (bounded-distance decoding, `t = (n−k)/2`
/// correctable symbols): the codeword fails with more than `t` symbol errors, whose symbols
/// stay wrong; a wrong symbol holds `raw_ber / p_s` wrong bits per bit on average. For the
/// Sunway link, `rs_post_fec_ber(1e-12, 528, 514, 10)`.
pub fn rs_post_fec_ber(raw_ber: f64, n: u32, k: u32, m: u32) -> f64 {
    let t = (n - k) / 2;
    let ps = -(-raw_ber).ln_1p() * m as f64; // 1 − (1 − p)^m, for small p
    let ps = if ps < 1e-6 {
        ps
    } else {
        1.0 - (1.0 - raw_ber).powi(m as i32)
    };
    // Term i = C(n, i) ps^i (1 − ps)^(n − i), from i = t + 1 on, by the ratio of terms.
    let mut log_c = 0.0f64;
    for j in 0..=t {
        log_c += ((n - j) as f64).ln() - ((j + 1) as f64).ln();
    }
    let i0 = t + 1;
    let mut term = (log_c + i0 as f64 * ps.ln() + (n - i0) as f64 * (-ps).ln_1p()).exp();
    let mut ser_out = 0.0;
    for i in i0..=n {
        ser_out += i as f64 * term;
        let ratio = (n - i) as f64 / (i + 1) as f64 * ps / (1.0 - ps);
        term *= ratio;
        if term < ser_out * 1e-18 {
            break;
        }
    }
    ser_out / n as f64 * (raw_ber / ps)
}

/// Probability that a packet of `bytes` is corrupted at bit-error rate `ber`.
pub fn packet_error_probability(ber: f64, bytes: u64) -> f64 {
    -((bytes * 8) as f64 * (-ber).ln_1p()).exp_m1()
}

/// Fraction of its rate a link with no errors carries when every packet has `packet` bytes,
/// serialises in `ser` and stays in a replay buffer of `replay` bytes (and at most
/// `replay_packets` packets) for `ser + rtt`: `min(1, N ser / (ser + rtt))` with
/// `N = min(⌊replay/packet⌋, replay_packets)`, since the sender can have `N` packets
/// unacknowledged and each is acknowledged `ser + rtt` after it starts.
pub fn replay_throughput(replay: u64, replay_packets: Option<u32>, packet: u64, ser: SimTime, rtt: SimTime) -> f64 {
    let mut n = replay / packet.max(1);
    if let Some(k) = replay_packets {
        n = n.min(k as u64);
    }
    (n as f64 * ser.ps() as f64 / (ser + rtt).ps() as f64).min(1.0)
}

/// Goodput (fraction of the link rate carrying packets that arrive intact) of go-back-N on a
/// link that always has packets of `bytes` to send, serialising in `ser`, with round trip
/// `rtt`, at bit-error rate `ber`, when the replay buffer does not limit: each transmission is
/// corrupted with probability `p` and then costs `ser + rtt`, so the mean time per packet is
/// `ser + p/(1−p) (ser + rtt)` and the goodput `(1 − p) / (1 + p rtt/ser)`.
pub fn gbn_goodput(ber: f64, bytes: u64, ser: SimTime, rtt: SimTime) -> f64 {
    let p = packet_error_probability(ber, bytes);
    (1.0 - p) / (1.0 + p * rtt.ps() as f64 / ser.ps() as f64)
}

/// The link-level keys of `[link]` and `[[link_overrides]]`, checked before a network is built.
pub(crate) fn validate(cfg: &FabricConfig) -> Result<(), ConfigError> {
    let max_pkt = (cfg.packet.header + cfg.packet.max_payload).0;
    check_ber("link.ber", cfg.link.ber, max_pkt)?;
    for (i, o) in cfg.link_overrides.iter().enumerate() {
        if let Some(b) = o.ber {
            check_ber(&format!("link_overrides[{i}].ber"), b, max_pkt)?;
        }
    }
    let l = &cfg.link;
    if let Some(b) = l.replay_buffer {
        if b.0 == 0 {
            return Err(ConfigError::new(
                "link.replay_buffer",
                "must be at least one maximum-size packet; omit the key for a buffer that never limits",
            ));
        }
        if b.0 < max_pkt {
            return Err(ConfigError::new(
                "link.replay_buffer",
                format!(
                    "{b} cannot hold a maximum-size packet ({max_pkt} B = packet.header + packet.max_payload): the link could never send it"
                ),
            ));
        }
    }
    if l.replay_packets == Some(0) {
        return Err(ConfigError::new(
            "link.replay_packets",
            "must be at least 1; omit the key for no packet limit",
        ));
    }
    if l.fallback_errors > MAX_FALLBACK_ERRORS {
        return Err(ConfigError::new(
            "link.fallback_errors",
            format!("must be at most {MAX_FALLBACK_ERRORS}, got {}", l.fallback_errors),
        ));
    }
    if l.fallback_errors > 0 && l.fallback_window == SimTime::ZERO {
        return Err(ConfigError::new(
            "link.fallback_window",
            "must be longer than 0 when link.fallback_errors is set",
        ));
    }
    Ok(())
}

fn check_ber(key: &str, ber: f64, max_pkt: u64) -> Result<(), ConfigError> {
    if !(0.0..1.0).contains(&ber) {
        return Err(ConfigError::new(
            key,
            format!("a bit-error rate must be at least 0 and below 1, got {ber}"),
        ));
    }
    let p = packet_error_probability(ber, max_pkt);
    if 1.0 / (1.0 - p) > MAX_EXPECTED_ATTEMPTS {
        return Err(ConfigError::new(
            key,
            format!(
                "{ber} corrupts a maximum-size packet ({max_pkt} B) with probability {p:.6}: it would need more than {MAX_EXPECTED_ATTEMPTS} transmissions on average (a dead link: fail it with faults.failed_links instead)"
            ),
        ));
    }
    Ok(())
}

/// Error-free bits before the next error, for a uniform draw `u` in `[0, 1)`: geometric with
/// success probability `ber` (inverse CDF); `u64::MAX` stands for "never".
pub(crate) fn gap(ln_q: f64, u: f64) -> u64 {
    // P(gap ≥ x) = (1 − ber)^x; with v = 1 − u in (0, 1], gap = ⌊ln v / ln(1 − ber)⌋.
    let v = 1.0 - u;
    let g = v.ln() / ln_q;
    if g >= u64::MAX as f64 {
        u64::MAX
    } else {
        g as u64
    }
}

/// The seeded stream of link direction `port`'s bit errors.
fn stream(seed: u64, port: u32) -> SimRng {
    RngStreams::new(seed).stream("link.bit_errors", port as u64)
}

/// Output-port flag: the link has a bounded replay buffer (admission and acknowledgements are
/// tracked).
pub(crate) const LK_REPLAY: u8 = 1;
/// Output-port flag: the link has fallen back to store-and-forward (watch for the clean period).
pub(crate) const LK_FALLBACK: u8 = 2;
/// Output-port flag: the link has bit errors and has not drawn its first gap yet.
pub(crate) const LK_FRESH: u8 = 4;

/// Counters of one link direction (and, summed, of the network).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkCounters {
    /// Packets corrupted at least once on this link (CRC failure at the receiver).
    pub corrupted_packets: u64,
    /// Resends of corrupted packets (a packet corrupted twice is resent twice).
    pub retransmissions: u64,
    /// Times the link stopped because its replay buffer was full.
    pub replay_stalls: u64,
    /// Time the link stood still for a full replay buffer, in picoseconds.
    pub replay_stall_ps: u64,
    /// Corrupted copies the receiving cut-through router had started to forward.
    pub corrupt_forwarded: u64,
    /// Switches of the receiving router from cut-through to store-and-forward.
    pub saf_fallbacks: u64,
    /// Returns to cut-through after a clean period.
    pub saf_restores: u64,
}

impl LinkCounters {
    fn add(&mut self, o: &LinkCounters) {
        self.corrupted_packets += o.corrupted_packets;
        self.retransmissions += o.retransmissions;
        self.replay_stalls += o.replay_stalls;
        self.replay_stall_ps += o.replay_stall_ps;
        self.corrupt_forwarded += o.corrupt_forwarded;
        self.saf_fallbacks += o.saf_fallbacks;
        self.saf_restores += o.saf_restores;
    }

    /// The values in the order of [`LINK_STATS`].
    pub(crate) fn values(&self) -> [u64; 7] {
        [
            self.corrupted_packets,
            self.retransmissions,
            self.replay_stalls,
            self.replay_stall_ps,
            self.corrupt_forwarded,
            self.saf_fallbacks,
            self.saf_restores,
        ]
    }
}

/// Name, unit and description of the link-level counters, reported when the link layer is on.
pub(crate) const LINK_STATS: [(&str, &str, &str); 7] = [
    (
        "link.corrupted_packets",
        "packets",
        "packets corrupted at least once on a link (CRC failure at the receiver)",
    ),
    (
        "link.retransmissions",
        "packets",
        "go-back-N resends of corrupted packets from link replay buffers",
    ),
    (
        "link.replay_stalls",
        "stalls",
        "times a link stopped sending because its replay buffer was full",
    ),
    (
        "link.replay_stall_time",
        "ps",
        "time links stood still for a full replay buffer, summed over links",
    ),
    (
        "link.corrupt_forwarded",
        "packets",
        "corrupted copies a cut-through router had started to forward (discarded by the next receiver)",
    ),
    (
        "link.saf_fallbacks",
        "switches",
        "switches of a link's receiver from cut-through to store-and-forward after errors",
    ),
    (
        "link.saf_restores",
        "switches",
        "returns of a link's receiver to cut-through after an error-free period",
    ),
];

/// The state of one link direction that has seen an error or has a bounded replay buffer.
#[derive(Debug)]
struct PortState {
    /// The bit-error stream, once the first gap is used up (drawn again from the seed).
    rng: Option<SimRng>,
    /// Unacknowledged packets: (acknowledgement time, bytes), in sending order.
    unacked: VecDeque<(SimTime, u32)>,
    unacked_bytes: u64,
    /// End of the current replay stall (stall time is counted once over overlapping checks).
    stall_end: SimTime,
    /// Times of the last `fallback_errors` corrupted transmissions.
    errors: VecDeque<SimTime>,
    last_error: SimTime,
    counters: LinkCounters,
}

impl PortState {
    fn new() -> Self {
        PortState {
            rng: None,
            unacked: VecDeque::new(),
            unacked_bytes: 0,
            stall_end: SimTime::ZERO,
            errors: VecDeque::new(),
            last_error: SimTime::ZERO,
            counters: LinkCounters::default(),
        }
    }
}

/// What one send on a link direction turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Start of the transmission that arrived intact.
    pub start: SimTime,
    /// Corrupted transmissions before it.
    pub failed: u32,
}

/// The link layer of a network: the ports' bit-error rates and, lazily, per-port state.
#[derive(Debug)]
pub(crate) struct LinkLayer {
    seed: u64,
    /// `ln(1 − ber)` of `link.ber` (0: no errors).
    ln_q: f64,
    /// Output ports whose cable has another rate (`link_overrides[].ber`), sorted by port:
    /// (port, `ln(1 − ber)`).
    exceptions: Vec<(u32, f64)>,
    /// Index into `states` per output port (`u32::MAX`: none yet); allocated with the first
    /// state, so a run without errors or replay accounting keeps no per-port records.
    slot: Vec<u32>,
    ports: u32,
    states: Vec<(u32, PortState)>,
    replay_bytes: u64,
    replay_packets: u32,
    ack_delay: SimTime,
    fallback_errors: u32,
    fallback_window: SimTime,
    fallback_clean: SimTime,
    /// Whether any port has errors or a bounded replay buffer (the counters are reported then).
    active: bool,
}

impl LinkLayer {
    /// The link layer of `ports` output ports; [`LinkLayer::set_ber`] gives a port's rate when
    /// it is not `l.ber`.
    pub(crate) fn new(l: &LinkConfig, ports: u32) -> LinkLayer {
        let bounded = l.replay_buffer.is_some() || l.replay_packets.is_some();
        LinkLayer {
            seed: 0,
            ln_q: (-l.ber).ln_1p(),
            exceptions: Vec::new(),
            slot: Vec::new(),
            ports,
            states: Vec::new(),
            replay_bytes: l.replay_buffer.map_or(u64::MAX, |b| b.0),
            replay_packets: l.replay_packets.unwrap_or(u32::MAX),
            ack_delay: l.ack_delay,
            fallback_errors: l.fallback_errors,
            fallback_window: l.fallback_window,
            fallback_clean: l.fallback_clean,
            active: bounded || l.ber > 0.0,
        }
    }

    /// Output port `port` (given in increasing order) carries bit-error rate `ber`.
    pub(crate) fn set_ber(&mut self, port: u32, ber: f64) {
        let ln_q = (-ber).ln_1p();
        if ln_q != self.ln_q {
            self.exceptions.push((port, ln_q));
            self.active |= ber > 0.0;
        }
    }

    fn ln_q(&self, port: u32) -> f64 {
        match self.exceptions.binary_search_by_key(&port, |e| e.0) {
            Ok(i) => self.exceptions[i].1,
            Err(_) => self.ln_q,
        }
    }

    /// Whether output port `port` has bit errors.
    pub(crate) fn has_errors(&self, port: u32) -> bool {
        self.ln_q(port) != 0.0
    }

    /// Whether the bounded replay buffer can ever stop a link of data rate at most `rate` and
    /// cable latency `latency` whose packets have `min..=max` bytes; only such ports carry
    /// [`LK_REPLAY`]. A packet stays in the buffer for its serialisation plus the round trip
    /// `R` after it starts, and transmissions on one link do not overlap, so when a packet is
    /// offered at `t` the buffer holds packets started within `(t − R − T_max, t)`, serialised
    /// one after another within `(t − R − T_max, t + T_max)`: at most `rate × (R + 2 T_max)`
    /// bytes, and one packet more than `(R + 2 T_max) / T_min` packets. A buffer holding that
    /// plus one maximum-size packet never refuses one; the model then skips its accounting
    /// (the results are the same).
    pub(crate) fn can_fill(&self, rate: BitsPerSec, latency: SimTime, max: Bytes, min: Bytes) -> bool {
        if self.replay_bytes == u64::MAX && self.replay_packets == u32::MAX {
            return false;
        }
        let t_max = rate.serialization(max);
        let t_min = rate.serialization(min).max(SimTime::from_ps(1));
        let window = self.rtt(latency) + t_max + t_max;
        let bytes = (window.ps() as u128 * rate.0 as u128).div_ceil(8 * 1_000_000_000_000) as u64;
        let packets = window.ps() / t_min.ps() + 2;
        bytes.saturating_add(max.0) > self.replay_bytes || packets > self.replay_packets as u64
    }

    pub(crate) fn active(&self) -> bool {
        self.active
    }

    /// Restart every port's error stream from `seed`: each port with errors draws its first gap
    /// when it first sends ([`LK_FRESH`]).
    pub(crate) fn reseed(&mut self, seed: u64) {
        self.seed = seed;
        for (_, s) in &mut self.states {
            s.rng = None;
        }
    }

    fn first_gap(&self, port: u32) -> u64 {
        let ln_q = self.ln_q(port);
        if ln_q == 0.0 {
            return u64::MAX;
        }
        gap(ln_q, stream(self.seed, port).gen())
    }

    /// Round trip of a link direction of cable latency `latency`: data out, ACK/NAK back.
    #[inline]
    pub(crate) fn rtt(&self, latency: SimTime) -> SimTime {
        latency + latency + self.ack_delay
    }

    fn state(&mut self, port: u32) -> &mut PortState {
        if self.slot.is_empty() {
            self.slot = vec![u32::MAX; self.ports as usize];
        }
        let s = self.slot[port as usize];
        let i = if s == u32::MAX {
            self.slot[port as usize] = self.states.len() as u32;
            self.states.push((port, PortState::new()));
            self.states.len() - 1
        } else {
            s as usize
        };
        &mut self.states[i].1
    }

    /// When a packet of `bytes` can enter `port`'s bounded replay buffer, if not `now`
    /// (acknowledgements due by `now` are taken in first). A refusal counts as a stall.
    pub(crate) fn replay_ready(&mut self, port: u32, bytes: u32, now: SimTime) -> Option<SimTime> {
        let (cap, cap_n) = (self.replay_bytes, self.replay_packets as usize);
        let s = self.state(port);
        while let Some(&(t, b)) = s.unacked.front() {
            if t > now {
                break;
            }
            s.unacked.pop_front();
            s.unacked_bytes -= b as u64;
        }
        let fits = |used: u64, n: usize| n == 0 || (used + bytes as u64 <= cap && n < cap_n);
        if fits(s.unacked_bytes, s.unacked.len()) {
            return None;
        }
        // Acknowledgements come back in sending order: walk them until the packet fits.
        let (mut used, mut n) = (s.unacked_bytes, s.unacked.len());
        let mut ready = now;
        for &(t, b) in &s.unacked {
            used -= b as u64;
            n -= 1;
            ready = t;
            if fits(used, n) {
                break;
            }
        }
        if now >= s.stall_end {
            s.counters.replay_stalls += 1;
        }
        let from = now.max(s.stall_end);
        if ready > from {
            s.counters.replay_stall_ps += (ready - from).ps();
            s.stall_end = ready;
        }
        Some(ready)
    }

    /// Whether some bounded replay buffer still waits for an acknowledgement after `now`.
    pub(crate) fn awaiting_ack(&self, now: SimTime) -> bool {
        self.states
            .iter()
            .any(|(_, s)| s.unacked.back().is_some_and(|&(t, _)| t > now))
    }

    /// A packet of `bits` starts on `port` at `start` (serialisation `ser`, round trip `rtt`)
    /// and its next error lies within it (`*err_left < bits`), or the port tracks its replay
    /// buffer or a fallback. Draws the errors of each transmission until one arrives intact,
    /// counts them, records the packet in a bounded replay buffer (`replay`), and switches the
    /// receiver's mode (`*saf`) on the fallback rule; `on_corrupt(start, saf)` is told of each
    /// corrupted transmission with the receiver's mode at that time. `discard`: the packet is
    /// a stomped copy, which the receiver drops whatever its bits (its errors are drawn, not
    /// counted, never resent, never acknowledged). Returns the intact transmission.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send(
        &mut self,
        port: u32,
        err_left: &mut u64,
        lk: &mut u8,
        saf: &mut bool,
        start: SimTime,
        ser: SimTime,
        rtt: SimTime,
        bits: u64,
        discard: bool,
        mut on_corrupt: impl FnMut(SimTime, bool),
    ) -> Sent {
        if *lk & LK_FRESH != 0 {
            *err_left = self.first_gap(port);
            *lk &= !LK_FRESH;
        }
        let ln_q = self.ln_q(port);
        let seed = self.seed;
        let (fb_n, fb_win, fb_clean) = (self.fallback_errors, self.fallback_window, self.fallback_clean);
        let replay = *lk & LK_REPLAY != 0;
        let s = self.state(port);
        if *lk & LK_FALLBACK != 0 && start >= s.last_error + fb_clean {
            *saf = false;
            *lk &= !LK_FALLBACK;
            s.errors.clear();
            s.counters.saf_restores += 1;
        }
        let mut at = start;
        let mut failed = 0u32;
        loop {
            let hit = if *err_left >= bits {
                *err_left -= bits;
                false
            } else if ln_q == 0.0 {
                *err_left = u64::MAX;
                false
            } else {
                // The error at bit `*err_left` of this packet, then those behind it.
                let rng = s.rng.get_or_insert_with(|| {
                    let mut r = stream(seed, port);
                    let _first: f64 = r.gen(); // the first gap, drawn at the first send
                    r
                });
                let mut rest = bits - *err_left - 1;
                loop {
                    let g = gap(ln_q, rng.gen());
                    if g >= rest {
                        *err_left = g - rest;
                        break;
                    }
                    rest -= g + 1;
                }
                true
            };
            if !hit || discard {
                break;
            }
            if failed == 0 {
                s.counters.corrupted_packets += 1;
            }
            failed += 1;
            s.counters.retransmissions += 1;
            on_corrupt(at, *saf);
            s.last_error = at;
            if fb_n > 0 && !*saf {
                if s.errors.len() == fb_n as usize {
                    s.errors.pop_front();
                }
                s.errors.push_back(at);
                if s.errors.len() == fb_n as usize && at - s.errors[0] <= fb_win {
                    *saf = true;
                    *lk |= LK_FALLBACK;
                    s.counters.saf_fallbacks += 1;
                }
            }
            at = at + ser + rtt;
        }
        if replay && !discard {
            s.unacked.push_back((at + ser + rtt, (bits / 8) as u32));
            s.unacked_bytes += bits / 8;
        }
        Sent { start: at, failed }
    }

    /// A corrupted copy on `port`'s receiver had started to leave it.
    pub(crate) fn count_forwarded(&mut self, port: u32) {
        self.state(port).counters.corrupt_forwarded += 1;
    }

    /// Counters summed over every link direction.
    pub(crate) fn totals(&self) -> LinkCounters {
        let mut t = LinkCounters::default();
        for (_, s) in &self.states {
            t.add(&s.counters);
        }
        t
    }

    /// Counters of every link direction with a non-zero one, by output port, in port order.
    pub(crate) fn per_port(&self) -> Vec<(u32, LinkCounters)> {
        let mut v: Vec<(u32, LinkCounters)> = self
            .states
            .iter()
            .filter(|(_, s)| s.counters != LinkCounters::default())
            .map(|(p, s)| (*p, s.counters))
            .collect();
        v.sort_by_key(|e| e.0);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sunway_fec_leaves_a_negligible_rate_for_independent_errors() {
        let b = rs_post_fec_ber(SUNWAY_RAW_BER, 528, 514, 10);
        // C(528, 8) (1e-11)^8 ≈ 1.6e-72 codeword failures, 8/528 of symbols wrong, 1/10 of bits.
        assert!(b > 1e-78 && b < 1e-72, "{b:e}");
        // A weaker channel: more raw errors leave more after decoding, monotonically.
        let worse = rs_post_fec_ber(1e-5, 528, 514, 10);
        assert!(worse > b && worse < 1e-5, "{worse:e}");
    }

    #[test]
    fn gaps_follow_the_geometric_law() {
        // P(gap ≥ x) = (1 − b)^x: the fraction of draws at least 1/b is e^-1.
        let b: f64 = 1e-3;
        let ln_q = (-b).ln_1p();
        let mut r = stream(7, 3);
        let n = 200_000;
        let mut long = 0;
        let mut sum = 0u64;
        for _ in 0..n {
            let g = gap(ln_q, r.gen());
            sum += g;
            if g >= 1000 {
                long += 1;
            }
        }
        let frac = long as f64 / n as f64;
        assert!((frac - (-1.0f64).exp()).abs() < 0.005, "{frac}");
        // Mean (1 − b)/b.
        let mean = sum as f64 / n as f64;
        assert!((mean / 999.0 - 1.0).abs() < 0.01, "{mean}");
        assert_eq!(gap(ln_q, 0.0), 0, "v = 1: an error at once");
        assert_eq!(gap((-1e-300f64).ln_1p(), 0.5), u64::MAX, "rate far below 2^-64: never");
    }

    #[test]
    fn closed_forms() {
        let ser = SimTime::from_ns(272);
        // Two packets in the buffer, a round trip of 620 ns: 2 × 272 / 892.
        let f = replay_throughput(544, None, 272, ser, SimTime::from_ns(620));
        assert!((f - 544.0 / 892.0).abs() < 1e-12);
        assert_eq!(replay_throughput(10_000, None, 272, ser, SimTime::from_ns(620)), 1.0);
        assert!((replay_throughput(10_000, Some(1), 272, ser, SimTime::from_ns(620)) - 272.0 / 892.0).abs() < 1e-12);
        assert_eq!(gbn_goodput(0.0, 272, ser, SimTime::from_ns(20)), 1.0);
        let p = 1.0 - (1.0 - 1e-4f64).powi(272 * 8);
        let g = gbn_goodput(1e-4, 272, ser, SimTime::from_ns(1000));
        assert!((g - (1.0 - p) / (1.0 + p * 1000.0 / 272.0)).abs() < 1e-12);
    }

    #[test]
    fn only_buffers_that_can_fill_are_tracked() {
        let rate = BitsPerSec::gbps(8.0); // 1 B/ns
        let lat = SimTime::from_ns(10);
        let layer = |bytes: Option<u64>, packets: Option<u32>| {
            let cfg = LinkConfig {
                replay_buffer: bytes.map(hpcnet_des::Bytes),
                replay_packets: packets,
                ack_delay: SimTime::from_ns(20),
                ..LinkConfig::default()
            };
            LinkLayer::new(&cfg, 1)
        };
        let (max, min) = (Bytes(272), Bytes(16));
        // Window R + 2 T = 40 + 544 ns: 584 B, plus a maximum-size packet, 856 B.
        assert!(!layer(None, None).can_fill(rate, lat, max, min));
        assert!(!layer(Some(856), None).can_fill(rate, lat, max, min));
        assert!(layer(Some(855), None).can_fill(rate, lat, max, min));
        // 584 ns / 16 ns per smallest packet + 2 = 38 packets.
        assert!(!layer(Some(1 << 20), Some(38)).can_fill(rate, lat, max, min));
        assert!(layer(Some(1 << 20), Some(37)).can_fill(rate, lat, max, min));
        // A longer cable needs more.
        assert!(layer(Some(856), None).can_fill(rate, SimTime::from_ns(11), max, min));
    }

    #[test]
    fn replay_admission_waits_for_acknowledgements_in_order() {
        let cfg = LinkConfig {
            replay_buffer: Some(hpcnet_des::Bytes(600)),
            ber: 0.0,
            ..LinkConfig::default()
        };
        let mut l = LinkLayer::new(&cfg, 1);
        let (mut err, mut lk, mut saf) = (u64::MAX, LK_REPLAY, false);
        let ser = SimTime::from_ns(272);
        let rtt = SimTime::from_ns(400);
        let t0 = SimTime::ZERO;
        assert_eq!(l.replay_ready(0, 272, t0), None);
        let s = l.send(0, &mut err, &mut lk, &mut saf, t0, ser, rtt, 272 * 8, false, |_, _| {});
        assert_eq!(s, Sent { start: t0, failed: 0 });
        assert_eq!(l.replay_ready(0, 272, ser), None);
        l.send(0, &mut err, &mut lk, &mut saf, ser, ser, rtt, 272 * 8, false, |_, _| {});
        // 544 of 600 bytes wait for acknowledgements (at 672 and 944 ns): a third packet of
        // 272 B waits for the first, a 56-byte one fits.
        assert_eq!(l.replay_ready(0, 272, ser * 2), Some(SimTime::from_ns(672)));
        assert_eq!(l.replay_ready(0, 56, ser * 2), None);
        // Asked again during the same stall: one stall, its time counted once.
        assert_eq!(
            l.replay_ready(0, 272, SimTime::from_ns(600)),
            Some(SimTime::from_ns(672))
        );
        assert_eq!(l.replay_ready(0, 272, SimTime::from_ns(672)), None);
        let c = l.totals();
        assert_eq!(c.replay_stalls, 1);
        assert_eq!(c.replay_stall_ps, SimTime::from_ns(672 - 544).ps());
        assert!(l.awaiting_ack(SimTime::from_ns(900)));
        assert!(!l.awaiting_ack(SimTime::from_ns(944)));
    }

    #[test]
    fn errors_resend_after_the_round_trip_and_trigger_the_fallback() {
        let cfg = LinkConfig {
            fallback_errors: 2,
            fallback_window: SimTime::from_us(1),
            fallback_clean: SimTime::from_us(5),
            ..LinkConfig::default()
        };
        // 64-bit packets at 2 % per bit: 73 % of transmissions are corrupted.
        let mut l = LinkLayer::new(&cfg, 1);
        l.set_ber(0, 0.02);
        let (mut lk, mut saf) = (0u8, false);
        let ser = SimTime::from_ns(100);
        let rtt = SimTime::from_ns(50);
        // The next error is at bit 10 of the first transmission; draws decide the rest.
        let mut err = 10u64;
        let mut seen = Vec::new();
        let s = l.send(
            0,
            &mut err,
            &mut lk,
            &mut saf,
            SimTime::ZERO,
            ser,
            rtt,
            64,
            false,
            |t, m| seen.push((t, m)),
        );
        assert!(s.failed >= 1);
        // Each corrupted transmission costs its serialisation and the round trip.
        assert_eq!(s.start, (ser + rtt) * s.failed as u64);
        assert_eq!(seen.len(), s.failed as usize);
        assert_eq!(seen[0], (SimTime::ZERO, false));
        let c = l.totals();
        assert_eq!((c.corrupted_packets, c.retransmissions), (1, s.failed as u64));
        // Back to back until the second error within 1 us switches the receiver.
        let mut t = s.start + ser;
        let mut sends = 1;
        while !saf && sends < 100 {
            t = l
                .send(0, &mut err, &mut lk, &mut saf, t, ser, rtt, 64, false, |t, m| {
                    seen.push((t, m))
                })
                .start
                + ser;
            sends += 1;
        }
        assert!(saf && lk & LK_FALLBACK != 0, "no fallback after {sends} sends");
        assert_eq!(l.totals().saf_fallbacks, 1);
        assert!(
            !seen[0].1 && !seen[1].1,
            "the first two errors hit a cut-through receiver"
        );
        // Errors after the switch find a store-and-forward receiver.
        let before = seen.len();
        for _ in 0..20 {
            t = l
                .send(0, &mut err, &mut lk, &mut saf, t, ser, rtt, 64, false, |t, m| {
                    seen.push((t, m))
                })
                .start
                + ser;
        }
        assert!(seen.len() > before && seen[before..].iter().all(|e| e.1));
        // Clean for 5 us after the last error: back to cut-through at the next send.
        let last = seen.last().unwrap().0;
        let mut none = u64::MAX;
        l.send(
            0,
            &mut none,
            &mut lk,
            &mut saf,
            last + SimTime::from_us(5),
            ser,
            rtt,
            64,
            false,
            |_, _| {},
        );
        assert!(!saf && lk & LK_FALLBACK == 0);
        assert_eq!(l.totals().saf_restores, 1);
    }
}
