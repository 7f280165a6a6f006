//! Output arbitration: which of the input queues requesting a router output port is served.
//!
//! An arbiter sees the requests of one output in the order they were made, starting at the
//! request after the one served last (the round-robin pointer), and for each whether its head
//! packet fits downstream now (credits, bubble) and when that packet was created. It moves
//! nothing: the network unlinks the winner and sends its packet. Each policy is one type
//! implementing [`OutputArbiter`]; [`crate::config::Arbitration`] names the one a scenario
//! uses (`router.arbitration`), and the network calls it through a statically dispatched
//! scan, once per decision with two or more requests (one request needs no policy).
//!
//! Policies: round robin (the first fitting request from the pointer) and age (the fitting
//! request whose head packet is oldest; ties keep scan order). Separable allocators that match
//! inputs and outputs over several iterations (iSLIP and others) need the requests of every
//! output of a router at once: they are [`crate::alloc`].

use hpcnet_des::SimTime;

/// One request as an arbiter sees it.
#[derive(Copy, Clone, Debug)]
pub struct Request {
    /// The requesting input queue.
    pub queue: u32,
    /// Its head packet fits downstream now.
    pub fits: bool,
    /// Creation time of its head packet.
    pub created: SimTime,
}

/// A policy choosing among the requests of one output port.
pub trait OutputArbiter {
    /// Whether the policy reads [`Request::created`] (the scan skips that load otherwise).
    const NEEDS_AGE: bool;

    /// The request to serve among `requests` (in scan order), or None when none fits. A policy
    /// may stop at any request: returning `Some` from [`OutputArbiter::visit`] ends the scan.
    fn visit(&mut self, r: Request) -> Option<u32>;

    /// The choice after the whole scan.
    fn finish(self) -> Option<u32>;
}

/// Round robin: the first request from the pointer that fits.
#[derive(Default)]
pub struct RoundRobin;

impl OutputArbiter for RoundRobin {
    const NEEDS_AGE: bool = false;

    #[inline(always)]
    fn visit(&mut self, r: Request) -> Option<u32> {
        r.fits.then_some(r.queue)
    }

    #[inline(always)]
    fn finish(self) -> Option<u32> {
        None
    }
}

/// Age: the fitting request whose head packet was created first.
#[derive(Default)]
pub struct Age {
    best: Option<(u32, SimTime)>,
}

impl OutputArbiter for Age {
    const NEEDS_AGE: bool = true;

    #[inline(always)]
    fn visit(&mut self, r: Request) -> Option<u32> {
        if r.fits && self.best.is_none_or(|(_, t)| r.created < t) {
            self.best = Some((r.queue, r.created));
        }
        None
    }

    #[inline(always)]
    fn finish(self) -> Option<u32> {
        self.best.map(|(q, _)| q)
    }
}

/// Run `arb` over `requests` (for tests and for callers holding requests in a slice).
pub fn choose<A: OutputArbiter>(mut arb: A, requests: &[Request]) -> Option<u32> {
    for &r in requests {
        if let Some(q) = arb.visit(r) {
            return Some(q);
        }
    }
    arb.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(queue: u32, fits: bool, created_ns: u64) -> Request {
        Request {
            queue,
            fits,
            created: SimTime::from_ns(created_ns),
        }
    }

    #[test]
    fn round_robin_takes_the_first_fitting_request_in_scan_order() {
        let rs = [req(7, false, 1), req(3, true, 9), req(5, true, 2)];
        assert_eq!(choose(RoundRobin, &rs), Some(3));
        assert_eq!(choose(RoundRobin, &[req(7, false, 1)]), None);
    }

    #[test]
    fn age_takes_the_oldest_fitting_head_and_keeps_scan_order_on_ties() {
        let rs = [req(7, false, 1), req(3, true, 9), req(5, true, 2), req(6, true, 2)];
        assert_eq!(choose(Age::default(), &rs), Some(5));
        assert_eq!(choose(Age::default(), &[req(1, false, 0)]), None);
    }
}
