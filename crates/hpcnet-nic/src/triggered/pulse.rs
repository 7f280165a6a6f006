//! Pulsed credit flow control of large reductions (spec 04, "Pulsed credit flow control").
//!
//! This module owns the pulse controller: the bound on reduction data in flight and the
//! counters that DMA engines take from it.
//!
//! **Model.** The network's reduction tables hold `C` elements in all (`capacity`). A
//! reduction of `m > C` elements is cut into pulses of `⌊C / k⌋` elements (`k` = `pulses`,
//! `1 ≤ k ≤ C`; the floor keeps `k` pulses within `C`), the last pulse of a reduction may be
//! shorter. The controller has `k` counters, so at most `k` pulses are in flight. A DMA engine
//! asks for a counter ([`PulseController::acquire`]); it gets one — one pulse credit — if a
//! counter is free, and then issues the pulse's memory and network requests. Each response is
//! counted on the counter ([`PulseController::respond`]); when the count reaches the pulse's
//! size the counter (the credit) returns to the controller. No free counter → the engine gets
//! [`Acquire::Retry`] and asks again later; once `timeout` has passed since its first refused
//! attempt, the request fails with [`PulseError::Timeout`], which the unit turns into an error
//! completion to the host.
//!
//! The paper does not give the counter count, the retry interval or the time-out; they are
//! model parameters (the retry interval belongs to the caller).
//!
//! Cost: O(k) per acquire (first free counter), O(1) per response and per count of the pulses
//! in flight, O(log w) for w requesters waiting.

use hpcnet_des::SimTime;
use std::collections::BTreeMap;

/// Controller parameters.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PulseConfig {
    /// Total reduction capacity `C` in elements.
    pub capacity: u64,
    /// `k`: pulses in flight at most; a pulse is `⌊C / k⌋` elements.
    pub pulses: u64,
    /// How long a request may wait for a counter before it fails.
    pub timeout: SimTime,
}

/// A counter (one pulse credit) held by a DMA engine.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CounterId(pub u32);

/// Answer to a counter request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// A counter for a pulse of `elements` elements.
    Granted { counter: CounterId, elements: u64 },
    /// No counter is free: ask again later.
    Retry,
}

/// Errors of the pulse controller.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PulseError {
    #[error("pulse controller: capacity C = {0} elements, need at least 1")]
    ZeroCapacity(u64),
    #[error("pulse controller: pulses k = {k} outside 1..={capacity} (k ∈ 1..C)")]
    BadPulses { k: u64, capacity: u64 },
    #[error("pulse controller: time-out must be positive")]
    ZeroTimeout,
    #[error("pulse of {elements} elements outside 1..={pulse} (the pulse size C/k)")]
    BadPulse { elements: u64, pulse: u64 },
    #[error("requester {requester}: no pulse counter free for {waited_ps} ps (time-out)")]
    Timeout { requester: u64, waited_ps: u64 },
    #[error("counter {0:?} is not held")]
    NotHeld(CounterId),
    #[error("counter {counter:?}: {counted} responses for a pulse of {elements}")]
    OverCount {
        counter: CounterId,
        counted: u64,
        elements: u64,
    },
}

/// What the controller did.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PulseStats {
    pub granted: u64,
    pub retries: u64,
    pub timeouts: u64,
    pub released: u64,
    /// Pulses and elements in flight at most.
    pub peak_pulses: u32,
    pub peak_elements: u64,
}

#[derive(Copy, Clone, Debug)]
struct Counter {
    elements: u64,
    counted: u64,
}

/// The pulse controller of an offload unit.
#[derive(Clone, Debug)]
pub struct PulseController {
    pulse: u64,
    capacity: u64,
    timeout: SimTime,
    counters: Vec<Option<Counter>>,
    /// Counters held (the `Some` entries of `counters`, kept so the count is O(1)).
    busy: u32,
    /// Requesters refused so far, with the time of their first refused attempt.
    waiting: BTreeMap<u64, SimTime>,
    elements: u64,
    stats: PulseStats,
}

impl PulseController {
    pub fn new(cfg: PulseConfig) -> Result<Self, PulseError> {
        if cfg.capacity == 0 {
            return Err(PulseError::ZeroCapacity(cfg.capacity));
        }
        if cfg.pulses == 0 || cfg.pulses > cfg.capacity || cfg.pulses > u64::from(u32::MAX) {
            return Err(PulseError::BadPulses {
                k: cfg.pulses,
                capacity: cfg.capacity,
            });
        }
        if cfg.timeout == SimTime::ZERO {
            return Err(PulseError::ZeroTimeout);
        }
        Ok(PulseController {
            pulse: cfg.capacity / cfg.pulses,
            capacity: cfg.capacity,
            timeout: cfg.timeout,
            counters: vec![None; cfg.pulses as usize],
            busy: 0,
            waiting: BTreeMap::new(),
            elements: 0,
            stats: PulseStats::default(),
        })
    }

    /// Elements of a full pulse, `⌊C / k⌋`.
    pub fn pulse_size(&self) -> u64 {
        self.pulse
    }
    /// `C`.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    /// Pulses a reduction of `m` elements is cut into.
    pub fn pulses_for(&self, m: u64) -> u64 {
        m.div_ceil(self.pulse)
    }
    /// Size of pulse `i` of a reduction of `m` elements.
    pub fn pulse_elements(&self, m: u64, i: u64) -> u64 {
        m.saturating_sub(i * self.pulse).min(self.pulse)
    }
    /// Pulses in flight.
    pub fn in_flight(&self) -> u32 {
        debug_assert_eq!(self.busy as usize, self.counters.iter().filter(|c| c.is_some()).count());
        self.busy
    }
    /// Elements in flight.
    pub fn elements_in_flight(&self) -> u64 {
        self.elements
    }
    pub fn stats(&self) -> PulseStats {
        self.stats
    }

    /// `requester` (a DMA engine's request, named by the caller) asks at `now` for a counter
    /// for a pulse of `elements` elements.
    pub fn acquire(&mut self, now: SimTime, requester: u64, elements: u64) -> Result<Acquire, PulseError> {
        if elements == 0 || elements > self.pulse {
            return Err(PulseError::BadPulse {
                elements,
                pulse: self.pulse,
            });
        }
        if let Some(i) = self.counters.iter().position(Option::is_none) {
            self.waiting.remove(&requester);
            self.counters[i] = Some(Counter { elements, counted: 0 });
            self.busy += 1;
            self.elements += elements;
            let pulses = self.in_flight();
            let s = &mut self.stats;
            s.granted += 1;
            s.peak_elements = s.peak_elements.max(self.elements);
            s.peak_pulses = s.peak_pulses.max(pulses);
            return Ok(Acquire::Granted {
                counter: CounterId(i as u32),
                elements,
            });
        }
        let first = *self.waiting.entry(requester).or_insert(now);
        let waited = now.ps().saturating_sub(first.ps());
        if waited >= self.timeout.ps() {
            self.waiting.remove(&requester);
            self.stats.timeouts += 1;
            return Err(PulseError::Timeout {
                requester,
                waited_ps: waited,
            });
        }
        self.stats.retries += 1;
        Ok(Acquire::Retry)
    }

    /// `n` responses of the pulse on `counter` came back; `true` when the pulse is complete
    /// and the counter has returned to the controller.
    pub fn respond(&mut self, counter: CounterId, n: u64) -> Result<bool, PulseError> {
        let slot = self
            .counters
            .get_mut(counter.0 as usize)
            .ok_or(PulseError::NotHeld(counter))?;
        let c = slot.as_mut().ok_or(PulseError::NotHeld(counter))?;
        if c.counted + n > c.elements {
            return Err(PulseError::OverCount {
                counter,
                counted: c.counted + n,
                elements: c.elements,
            });
        }
        c.counted += n;
        if c.counted == c.elements {
            self.elements -= c.elements;
            *slot = None;
            self.busy -= 1;
            self.stats.released += 1;
            return Ok(true);
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctl(capacity: u64, pulses: u64, timeout_ns: u64) -> PulseController {
        PulseController::new(PulseConfig {
            capacity,
            pulses,
            timeout: SimTime::from_ns(timeout_ns),
        })
        .unwrap()
    }

    #[test]
    fn pulses_are_c_over_k_and_k_must_be_in_range() {
        let c = ctl(1000, 4, 100);
        assert_eq!(c.pulse_size(), 250);
        assert_eq!(c.pulses_for(1001), 5);
        assert_eq!(c.pulse_elements(1001, 4), 1);
        assert_eq!(c.pulse_elements(1001, 3), 250);
        assert_eq!(ctl(10, 3, 1).pulse_size(), 3);
        assert_eq!(ctl(10, 10, 1).pulse_size(), 1);
        let cfg = |capacity, pulses| PulseConfig {
            capacity,
            pulses,
            timeout: SimTime::from_ns(1),
        };
        assert_eq!(
            PulseController::new(cfg(10, 0)).unwrap_err(),
            PulseError::BadPulses { k: 0, capacity: 10 }
        );
        assert_eq!(
            PulseController::new(cfg(10, 11)).unwrap_err(),
            PulseError::BadPulses { k: 11, capacity: 10 }
        );
        assert_eq!(
            PulseController::new(cfg(0, 1)).unwrap_err(),
            PulseError::ZeroCapacity(0)
        );
        let z = PulseConfig {
            capacity: 4,
            pulses: 1,
            timeout: SimTime::ZERO,
        };
        assert_eq!(PulseController::new(z).unwrap_err(), PulseError::ZeroTimeout);
    }

    #[test]
    fn at_most_k_pulses_in_flight_then_retry() {
        let mut c = ctl(100, 4, 1000);
        let t = SimTime::from_ns(5);
        let mut held = vec![];
        for r in 0..4 {
            match c.acquire(t, r, 25).unwrap() {
                Acquire::Granted { counter, elements } => {
                    assert_eq!(elements, 25);
                    held.push(counter);
                }
                Acquire::Retry => panic!("a counter was free"),
            }
        }
        assert_eq!((c.in_flight(), c.elements_in_flight()), (4, 100));
        assert_eq!(c.acquire(t, 9, 25).unwrap(), Acquire::Retry);
        assert_eq!(c.stats().retries, 1);
        assert_eq!(
            c.acquire(t, 9, 26).unwrap_err(),
            PulseError::BadPulse {
                elements: 26,
                pulse: 25
            }
        );
        assert_eq!(
            c.acquire(t, 9, 0).unwrap_err(),
            PulseError::BadPulse { elements: 0, pulse: 25 }
        );
        // The credit returns only when the count reaches the pulse size.
        assert!(!c.respond(held[2], 24).unwrap());
        assert_eq!(c.acquire(t, 9, 25).unwrap(), Acquire::Retry);
        assert!(c.respond(held[2], 1).unwrap());
        assert_eq!(
            c.acquire(t, 9, 25).unwrap(),
            Acquire::Granted {
                counter: held[2],
                elements: 25
            }
        );
        let s = c.stats();
        assert_eq!(
            (s.granted, s.retries, s.released, s.peak_pulses, s.peak_elements),
            (5, 2, 1, 4, 100)
        );
    }

    #[test]
    fn responses_must_match_a_held_counter() {
        let mut c = ctl(8, 2, 10);
        let Acquire::Granted { counter, .. } = c.acquire(SimTime::ZERO, 1, 3).unwrap() else {
            panic!("free counter")
        };
        assert_eq!(
            c.respond(counter, 4).unwrap_err(),
            PulseError::OverCount {
                counter,
                counted: 4,
                elements: 3
            }
        );
        assert!(c.respond(counter, 3).unwrap());
        assert_eq!(c.respond(counter, 1).unwrap_err(), PulseError::NotHeld(counter));
        assert_eq!(
            c.respond(CounterId(7), 1).unwrap_err(),
            PulseError::NotHeld(CounterId(7))
        );
        assert_eq!(c.elements_in_flight(), 0);
    }

    #[test]
    fn a_request_times_out_after_waiting_the_time_out() {
        let mut c = ctl(4, 1, 100);
        assert!(matches!(
            c.acquire(SimTime::ZERO, 1, 4).unwrap(),
            Acquire::Granted { .. }
        ));
        assert_eq!(c.acquire(SimTime::from_ns(10), 2, 4).unwrap(), Acquire::Retry);
        assert_eq!(c.acquire(SimTime::from_ns(109), 2, 4).unwrap(), Acquire::Retry);
        let e = c.acquire(SimTime::from_ns(110), 2, 4).unwrap_err();
        assert_eq!(
            e,
            PulseError::Timeout {
                requester: 2,
                waited_ps: 100_000
            }
        );
        assert_eq!(
            e.to_string(),
            "requester 2: no pulse counter free for 100000 ps (time-out)"
        );
        assert_eq!(c.stats().timeouts, 1);
        // Another requester's clock starts at its own first refusal.
        assert_eq!(c.acquire(SimTime::from_ns(150), 3, 4).unwrap(), Acquire::Retry);
        assert_eq!(c.acquire(SimTime::from_ns(240), 3, 4).unwrap(), Acquire::Retry);
        // A grant before the time-out clears the wait.
        assert!(c.respond(CounterId(0), 4).unwrap());
        assert!(matches!(
            c.acquire(SimTime::from_ns(245), 3, 4).unwrap(),
            Acquire::Granted { .. }
        ));
        assert!(c.respond(CounterId(0), 4).unwrap());
        assert!(matches!(
            c.acquire(SimTime::from_ns(500), 3, 4).unwrap(),
            Acquire::Granted { .. }
        ));
        assert_eq!(c.acquire(SimTime::from_ns(600), 3, 4).unwrap(), Acquire::Retry);
    }

    #[test]
    fn a_reduction_larger_than_c_flows_through_k_pulses() {
        // m = 10 000 elements through C = 1024, k = 4: responses come back one cycle later in
        // arbitrary-looking order; the data in flight never exceeds C and every element is done.
        let mut c = ctl(1024, 4, 1_000_000);
        let m = 10_000;
        let mut next = 0;
        let mut done = 0;
        let mut held: Vec<(CounterId, u64)> = vec![];
        let mut t = 0;
        while done < m {
            t += 1;
            while next < c.pulses_for(m) {
                let e = c.pulse_elements(m, next);
                match c.acquire(SimTime::from_ns(t), next, e).unwrap() {
                    Acquire::Granted { counter, elements } => {
                        held.push((counter, elements));
                        next += 1;
                    }
                    Acquire::Retry => break,
                }
            }
            assert!(c.elements_in_flight() <= 1024 && c.in_flight() <= 4);
            // Responses: half of the oldest pulse's remainder, or all of it.
            if let Some((id, left)) = held.first_mut() {
                let n = if *left > 1 { *left / 2 } else { *left };
                *left -= n;
                done += n;
                let freed = c.respond(*id, n).unwrap();
                assert_eq!(freed, *left == 0);
                if freed {
                    held.remove(0);
                }
            }
        }
        assert_eq!(done, m);
        assert_eq!(c.stats().released, c.pulses_for(m));
        assert_eq!(c.stats().peak_pulses, 4);
        assert_eq!(c.elements_in_flight(), 0);
    }
}
