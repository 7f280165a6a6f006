//! Separable switch allocation: which input ports of one router are matched to which of its
//! free output ports at one instant. It chooses winners and moves nothing; the network serves
//! the matched requests.
//!
//! A request names an input port, an output port and the input queue (VC) that asks; an input
//! port may be matched up to its free crossbar read slots (`router.input_speedup`), an output
//! port once. Arbiters are round robin with a pointer per output (over input ports) and per
//! input (over output ports), kept between decisions. Policies (Dally & Towles, *Principles and
//! Practices of Interconnection Networks*, ch. 19; McKeown, "The iSLIP scheduling
//! algorithm", IEEE/ACM ToN 1999):
//! - **iSLIP**: each unmatched output grants the requesting input nearest its pointer; each
//!   input accepts the grant nearest its pointer; pointers move one past the match only for
//!   grants accepted in the first iteration; `iterations` rounds, each among the ports left
//!   unmatched.
//! - **separable output-first** (round-robin matching, RRM): one round as iSLIP's first, but an
//!   output's pointer moves past every input it grants, accepted or not.
//! - **separable input-first**: each input requests the output nearest its pointer among those
//!   it asks for; each output grants the input nearest its pointer among those; pointers move
//!   past the match.
//!
//! Cost: O(iterations × requests) per decision, with scratch vectors reused across decisions.

use serde::{Deserialize, Serialize};

/// The switch allocator of a router (`router.allocator`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Allocator {
    /// Each output on its own, round robin over its requests (no matching across outputs).
    #[default]
    RoundRobin,
    /// Each output on its own, oldest head packet first.
    Age,
    /// iSLIP with `router.islip_iterations` iterations.
    Islip,
    /// Separable input-first with round-robin arbiters, one pass.
    SeparableInputFirst,
    /// Separable output-first with round-robin arbiters, one pass (pointers advance on every
    /// grant).
    SeparableOutputFirst,
}

impl Allocator {
    /// Whether the policy matches a router's inputs and outputs together ([`Matcher`]).
    pub fn separable(self) -> bool {
        !matches!(self, Allocator::RoundRobin | Allocator::Age)
    }

    pub fn name(self) -> &'static str {
        match self {
            Allocator::RoundRobin => "round_robin",
            Allocator::Age => "age",
            Allocator::Islip => "islip",
            Allocator::SeparableInputFirst => "separable_input_first",
            Allocator::SeparableOutputFirst => "separable_output_first",
        }
    }
}

/// One request: input port `input` (index within the router) asks output `output` for the
/// head packet of queue `queue`. Requests of one (input, output) pair after the first are
/// ignored: the first is the one the output's own round robin would serve.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub input: u16,
    pub output: u16,
    pub queue: u32,
}

/// The matching state of every router of a network: pointers per global port, and scratch.
pub struct Matcher {
    kind: Allocator,
    iterations: u32,
    /// Per global output port: the input (router-local) its arbiter favours next.
    grant_ptr: Vec<u16>,
    /// Per global input port: the output (router-local) its arbiter favours next.
    accept_ptr: Vec<u16>,
    /// Per router-local input: grants it may still accept; per router-local output: matched.
    cap: Vec<u8>,
    out_matched: Vec<bool>,
    /// Per request: granted in the current iteration.
    granted: Vec<bool>,
}

impl Matcher {
    /// A matcher for `ports` global ports (router ports numbered as the network numbers them).
    pub fn new(kind: Allocator, iterations: u32, ports: usize) -> Matcher {
        Matcher {
            kind,
            iterations: iterations.max(1),
            grant_ptr: vec![0; ports],
            accept_ptr: vec![0; ports],
            cap: Vec::new(),
            out_matched: Vec::new(),
            granted: Vec::new(),
        }
    }

    /// Match the `requests` of the router whose ports are global `base .. base + radix`.
    /// `cap(i)` is how many grants input `i` may accept (its free read slots). The matched
    /// requests are appended to `out`, each output at most once, each input at most its
    /// capacity.
    pub fn allocate(
        &mut self,
        base: u32,
        radix: u16,
        requests: &[Request],
        cap: impl Fn(u16) -> u8,
        out: &mut Vec<Request>,
    ) {
        let n = radix as usize;
        self.cap.clear();
        self.cap.extend((0..radix).map(&cap));
        self.out_matched.clear();
        self.out_matched.resize(n, false);
        self.granted.clear();
        self.granted.resize(requests.len(), false);
        let dist = |from: u16, to: u16| (to as usize + n - from as usize) % n;
        match self.kind {
            Allocator::Islip | Allocator::SeparableOutputFirst => {
                let rounds = if self.kind == Allocator::Islip {
                    self.iterations
                } else {
                    1
                };
                for round in 0..rounds {
                    // Grant: each unmatched output picks the eligible input nearest its pointer.
                    self.granted.fill(false);
                    let mut any = false;
                    for o in 0..radix {
                        if self.out_matched[o as usize] {
                            continue;
                        }
                        let gp = self.grant_ptr[(base + o as u32) as usize];
                        let mut best: Option<(usize, usize)> = None;
                        for (k, r) in requests.iter().enumerate() {
                            if r.output != o || self.cap[r.input as usize] == 0 {
                                continue;
                            }
                            let d = dist(gp, r.input);
                            if best.is_none_or(|(bd, _)| d < bd) {
                                best = Some((d, k));
                            }
                        }
                        if let Some((_, k)) = best {
                            self.granted[k] = true;
                            any = true;
                            if self.kind == Allocator::SeparableOutputFirst {
                                self.grant_ptr[(base + o as u32) as usize] = (requests[k].input + 1) % radix;
                            }
                        }
                    }
                    if !any {
                        break;
                    }
                    // Accept: each input takes the grants nearest its pointer, up to its capacity.
                    for i in 0..radix {
                        while self.cap[i as usize] > 0 {
                            let ap = self.accept_ptr[(base + i as u32) as usize];
                            let mut best: Option<(usize, usize)> = None;
                            for (k, r) in requests.iter().enumerate() {
                                if !self.granted[k] || r.input != i {
                                    continue;
                                }
                                let d = dist(ap, r.output);
                                if best.is_none_or(|(bd, _)| d < bd) {
                                    best = Some((d, k));
                                }
                            }
                            let Some((_, k)) = best else { break };
                            let r = requests[k];
                            self.granted[k] = false;
                            self.cap[i as usize] -= 1;
                            self.out_matched[r.output as usize] = true;
                            out.push(r);
                            if round == 0 {
                                self.accept_ptr[(base + i as u32) as usize] = (r.output + 1) % radix;
                                if self.kind == Allocator::Islip {
                                    self.grant_ptr[(base + r.output as u32) as usize] = (i + 1) % radix;
                                }
                            }
                        }
                    }
                }
            }
            Allocator::SeparableInputFirst => {
                // Input stage: each input asks the outputs nearest its pointer, one per free slot.
                for i in 0..radix {
                    let ap = self.accept_ptr[(base + i as u32) as usize];
                    for _ in 0..self.cap[i as usize] {
                        let mut best: Option<(usize, usize)> = None;
                        for (k, r) in requests.iter().enumerate() {
                            if r.input != i || self.granted[k] || self.out_asked(requests, k) {
                                continue;
                            }
                            let d = dist(ap, r.output);
                            if best.is_none_or(|(bd, _)| d < bd) {
                                best = Some((d, k));
                            }
                        }
                        let Some((_, k)) = best else { break };
                        self.granted[k] = true;
                    }
                }
                // Output stage: each output grants the asking input nearest its pointer.
                for o in 0..radix {
                    let gp = self.grant_ptr[(base + o as u32) as usize];
                    let mut best: Option<(usize, usize)> = None;
                    for (k, r) in requests.iter().enumerate() {
                        if !self.granted[k] || r.output != o {
                            continue;
                        }
                        let d = dist(gp, r.input);
                        if best.is_none_or(|(bd, _)| d < bd) {
                            best = Some((d, k));
                        }
                    }
                    if let Some((_, k)) = best {
                        let r = requests[k];
                        out.push(r);
                        self.grant_ptr[(base + o as u32) as usize] = (r.input + 1) % radix;
                        self.accept_ptr[(base + r.input as u32) as usize] = (o + 1) % radix;
                    }
                }
            }
            Allocator::RoundRobin | Allocator::Age => {
                unreachable!("per-output policies are decided by the output's arbiter")
            }
        }
    }

    /// Whether the input of request `k` already asks the same output with another request
    /// (an input asks each output once).
    fn out_asked(&self, requests: &[Request], k: usize) -> bool {
        let r = requests[k];
        requests
            .iter()
            .enumerate()
            .any(|(j, s)| j != k && self.granted[j] && s.input == r.input && s.output == r.output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(input: u16, output: u16) -> Request {
        Request {
            input,
            output,
            queue: input as u32 * 100 + output as u32,
        }
    }

    /// Every pair of requests from a small deterministic generator.
    fn cases() -> Vec<Vec<Request>> {
        let mut v = Vec::new();
        let mut x: u64 = 0x9E37_79B9;
        for _ in 0..200 {
            let mut rs = Vec::new();
            for _ in 0..(x % 20) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                rs.push(req(((x >> 33) % 6) as u16, ((x >> 45) % 6) as u16));
            }
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            v.push(rs);
        }
        v
    }

    fn check_matching(kind: Allocator, iterations: u32, cap: u8) {
        let mut m = Matcher::new(kind, iterations, 12);
        for rs in cases() {
            let mut out = Vec::new();
            m.allocate(6, 6, &rs, |_| cap, &mut out);
            let mut per_in = [0u8; 6];
            let mut per_out = [0u8; 6];
            for r in &out {
                assert!(rs.contains(r), "{kind:?}: granted a request never made");
                per_in[r.input as usize] += 1;
                per_out[r.output as usize] += 1;
            }
            assert!(per_out.iter().all(|&c| c <= 1), "{kind:?}: an output granted twice");
            assert!(per_in.iter().all(|&c| c <= cap), "{kind:?}: an input over its speedup");
        }
    }

    #[test]
    fn grants_form_a_matching() {
        for kind in [
            Allocator::Islip,
            Allocator::SeparableInputFirst,
            Allocator::SeparableOutputFirst,
        ] {
            for it in [1, 2, 4] {
                check_matching(kind, it, 1);
                check_matching(kind, it, 2);
            }
        }
    }

    /// A request set where one iteration leaves a pair unmatched that a second iteration
    /// matches: outputs 0 and 1 both grant input 0 (pointers at 0); input 0 accepts output 0;
    /// input 1, which asked only output 1, was granted nothing. Round two: output 1 grants it.
    #[test]
    fn islip_iterations_add_matches_and_pointers_move_only_on_accepted_grants() {
        let rs = [req(0, 0), req(0, 1), req(1, 1)];
        let mut one = Matcher::new(Allocator::Islip, 1, 2);
        let mut out = Vec::new();
        one.allocate(0, 2, &rs, |_| 1, &mut out);
        assert_eq!(out, vec![req(0, 0)]);
        // Output 1's grant was not accepted: its pointer stays at input 0.
        assert_eq!(one.grant_ptr[1], 0);
        assert_eq!((one.grant_ptr[0], one.accept_ptr[0]), (1, 1));
        let mut two = Matcher::new(Allocator::Islip, 2, 2);
        let mut out = Vec::new();
        two.allocate(0, 2, &rs, |_| 1, &mut out);
        assert_eq!(out, vec![req(0, 0), req(1, 1)]);
        // RRM moves output 1's pointer past the input it granted, though it was refused.
        let mut rrm = Matcher::new(Allocator::SeparableOutputFirst, 1, 2);
        let mut out = Vec::new();
        rrm.allocate(0, 2, &rs, |_| 1, &mut out);
        assert_eq!(out, vec![req(0, 0)]);
        assert_eq!(rrm.grant_ptr[1], 1);
        // Input-first: input 0 asks output 0 (its pointer), input 1 asks output 1: both match.
        let mut inf = Matcher::new(Allocator::SeparableInputFirst, 1, 2);
        let mut out = Vec::new();
        inf.allocate(0, 2, &rs, |_| 1, &mut out);
        assert_eq!(out, vec![req(0, 0), req(1, 1)]);
    }

    #[test]
    fn each_allocator_is_deterministic() {
        for kind in [
            Allocator::Islip,
            Allocator::SeparableInputFirst,
            Allocator::SeparableOutputFirst,
        ] {
            let run = || {
                let mut m = Matcher::new(kind, 2, 12);
                let mut all = Vec::new();
                for rs in cases() {
                    let mut out = Vec::new();
                    m.allocate(6, 6, &rs, |_| 1, &mut out);
                    all.push(out);
                }
                all
            };
            assert_eq!(run(), run(), "{kind:?}");
        }
    }

    /// Round-robin pointers give every input its turn: three inputs asking one output
    /// repeatedly are served in rotation.
    #[test]
    fn pointers_rotate_service() {
        for kind in [
            Allocator::Islip,
            Allocator::SeparableInputFirst,
            Allocator::SeparableOutputFirst,
        ] {
            let mut m = Matcher::new(kind, 1, 4);
            let rs = [req(0, 3), req(1, 3), req(2, 3)];
            let mut served = Vec::new();
            for _ in 0..6 {
                let mut out = Vec::new();
                m.allocate(0, 4, &rs, |_| 1, &mut out);
                assert_eq!(out.len(), 1);
                served.push(out[0].input);
            }
            assert_eq!(served, vec![0, 1, 2, 0, 1, 2], "{kind:?}");
        }
    }
}
