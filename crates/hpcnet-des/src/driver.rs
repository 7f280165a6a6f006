//! The run driver: the one event loop every kind of run goes through.
//!
//! A [`Model`] is whatever owns an event queue and handles its events — the synthetic-traffic
//! network, or the world of NICs with the executor of rank programs. The [`Driver`] owns what
//! every run needs around it:
//! - **phases**: boundaries in simulated time (warm-up end, measurement end, ...) at which the
//!   model is told [`Model::boundary`] once every earlier event has been handled and before any
//!   later one is; a run stops at its end time (events at or after it are not handled);
//! - the **deadlock watchdog**: work in flight that has not moved for `watchdog` stops the run
//!   ([`Stop::Watchdog`]) if the model confirms that nothing can move ([`Model::confirm_stall`]);
//! - **progress** reporting every 65 536 events.
//!
//! Cost: one comparison per event for phases and one [`Model::stalled_for`] reading per event
//! for the watchdog; nothing allocates per event.

use crate::units::SimTime;

/// What the driver runs.
pub trait Model {
    /// Simulated time of the last handled event.
    fn now(&self) -> SimTime;

    /// Handle the earliest pending event if its time is before `limit`.
    fn step_before(&mut self, limit: SimTime) -> Step;

    /// How long work in flight has made no progress; None when nothing is in flight (the
    /// watchdog's reading).
    fn stalled_for(&self) -> Option<SimTime> {
        None
    }

    /// The watchdog's time has run out: whether the model has evidence that nothing can move
    /// (a deadlock). A model that finds none — work in flight is only slow, e.g. a packet on a
    /// long link — returns false and restarts its [`Model::stalled_for`] clock, and the run goes
    /// on. The default trusts elapsed time alone.
    fn confirm_stall(&mut self) -> bool {
        true
    }

    /// Every event before `boundaries[index]` has been handled, none after it.
    fn boundary(&mut self, index: usize) {
        let _ = index;
    }
}

/// What one [`Model::step_before`] did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// An event (or a batch of work at one instant) was handled.
    Handled,
    /// The earliest pending event is at or after the limit.
    Limit,
    /// Nothing is left to do.
    Empty,
}

/// Why a run stopped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// No event was left.
    Empty,
    /// The end time was reached (later events were not handled).
    End,
    /// Work in flight made no progress for longer than the watchdog allows.
    Watchdog { at: SimTime },
}

/// The outcome of [`Driver::run`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub stop: Stop,
    /// Steps handled by this run.
    pub steps: u64,
}

/// Progress callback: simulated now.
pub type Progress<'a> = &'a mut dyn FnMut(SimTime);

/// Phases, end, watchdog and progress of one run.
pub struct Driver<'a> {
    boundaries: Vec<SimTime>,
    end: SimTime,
    watchdog: SimTime,
    progress: Option<Progress<'a>>,
}

impl<'a> Driver<'a> {
    /// A run without phases, end or watchdog.
    pub fn new() -> Driver<'a> {
        Driver {
            boundaries: Vec::new(),
            end: SimTime::MAX,
            watchdog: SimTime::MAX,
            progress: None,
        }
    }

    /// Phase boundaries, in increasing order; [`Model::boundary`] is called with each index.
    pub fn phases(mut self, boundaries: Vec<SimTime>) -> Self {
        debug_assert!(boundaries.windows(2).all(|w| w[0] <= w[1]), "boundaries in order");
        self.boundaries = boundaries;
        self
    }

    /// Handle no event at or after `end`.
    pub fn end(mut self, end: SimTime) -> Self {
        self.end = end;
        self
    }

    /// Stop when work in flight has not moved for longer than `limit`.
    pub fn watchdog(mut self, limit: SimTime) -> Self {
        self.watchdog = limit;
        self
    }

    /// Call `f` with the simulated time every 65 536 steps.
    pub fn progress(mut self, f: Progress<'a>) -> Self {
        self.progress = Some(f);
        self
    }

    /// Tell the progress callback, if any, the simulated time (out of line: the loop tests
    /// only the step count).
    #[cold]
    #[inline(never)]
    fn report_progress(&mut self, now: SimTime) {
        if let Some(cb) = self.progress.as_mut() {
            cb(now);
        }
    }

    /// Run `m` until it is empty, reaches the end, or the watchdog fires.
    pub fn run<M: Model>(&mut self, m: &mut M) -> Outcome {
        let mut next = 0; // index of the next boundary
        let mut steps = 0u64;
        let limit_of = |next: usize, b: &[SimTime], end: SimTime| b.get(next).copied().unwrap_or(end).min(end);
        let mut limit = limit_of(next, &self.boundaries, self.end);
        loop {
            match m.step_before(limit) {
                Step::Handled => {
                    steps += 1;
                    // Time test first: it is almost always false.
                    if let Some(s) = m.stalled_for() {
                        if s > self.watchdog && m.confirm_stall() {
                            return Outcome {
                                stop: Stop::Watchdog { at: m.now() },
                                steps,
                            };
                        }
                    }
                    if steps & 0xffff == 0 {
                        self.report_progress(m.now());
                    }
                }
                Step::Limit => {
                    if next < self.boundaries.len() && self.boundaries[next] <= self.end {
                        m.boundary(next);
                        next += 1;
                        limit = limit_of(next, &self.boundaries, self.end);
                    } else {
                        return Outcome { stop: Stop::End, steps };
                    }
                }
                Step::Empty => {
                    return Outcome {
                        stop: Stop::Empty,
                        steps,
                    }
                }
            }
        }
    }
}

impl Default for Driver<'_> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventQueue;

    /// Events are numbers; each event n > 0 schedules n − 1 one nanosecond later.
    struct Countdown {
        q: EventQueue<u32>,
        handled: Vec<(SimTime, u32)>,
        boundaries: Vec<(usize, SimTime)>,
        stalled: bool,
    }

    impl Model for Countdown {
        fn now(&self) -> SimTime {
            self.q.now()
        }
        fn step_before(&mut self, limit: SimTime) -> Step {
            match self.q.pop_before(limit) {
                Some((t, n)) => {
                    self.handled.push((t, n));
                    if n > 0 {
                        self.q.schedule(t + SimTime::from_ns(1), n - 1);
                    }
                    Step::Handled
                }
                None if self.q.is_empty() => Step::Empty,
                None => Step::Limit,
            }
        }
        fn stalled_for(&self) -> Option<SimTime> {
            self.stalled.then(|| self.q.now())
        }
        fn boundary(&mut self, index: usize) {
            self.boundaries.push((index, self.q.now()));
        }
    }

    fn countdown(n: u32) -> Countdown {
        let mut q = EventQueue::new();
        q.schedule(SimTime::ZERO, n);
        Countdown {
            q,
            handled: Vec::new(),
            boundaries: Vec::new(),
            stalled: false,
        }
    }

    #[test]
    fn runs_to_empty_and_counts_steps() {
        let mut m = countdown(9);
        let out = Driver::new().run(&mut m);
        assert_eq!(
            out,
            Outcome {
                stop: Stop::Empty,
                steps: 10
            }
        );
        assert_eq!(m.handled.last(), Some(&(SimTime::from_ns(9), 0)));
    }

    #[test]
    fn boundaries_fall_between_events_and_the_end_is_exclusive() {
        let mut m = countdown(100);
        let ns = SimTime::from_ns;
        let out = Driver::new().phases(vec![ns(3), ns(7)]).end(ns(10)).run(&mut m);
        assert_eq!(out.stop, Stop::End);
        // Events at 0..=9 ns handled; the one at 10 ns is not.
        assert_eq!(out.steps, 10);
        assert_eq!(m.handled.last().map(|h| h.0), Some(ns(9)));
        // Boundary 0 comes after the event at 2 ns and before the one at 3 ns.
        assert_eq!(m.boundaries, vec![(0, ns(2)), (1, ns(6))]);
    }

    #[test]
    fn a_boundary_beyond_the_end_is_never_reached() {
        let mut m = countdown(100);
        let ns = SimTime::from_ns;
        let out = Driver::new().phases(vec![ns(3), ns(50)]).end(ns(5)).run(&mut m);
        assert_eq!(out.stop, Stop::End);
        assert_eq!(m.boundaries, vec![(0, ns(2))]);
    }

    #[test]
    fn the_watchdog_stops_a_stalled_run() {
        let mut m = countdown(100);
        m.stalled = true;
        let out = Driver::new().watchdog(SimTime::from_ns(4)).run(&mut m);
        assert_eq!(
            out.stop,
            Stop::Watchdog {
                at: SimTime::from_ns(5)
            }
        );
        assert_eq!(out.steps, 6);
    }

    /// A model that is slow, not stuck: it refuses the watchdog's verdict and restarts its
    /// stall clock each time.
    struct Slow {
        inner: Countdown,
        since: SimTime,
        refusals: u32,
    }

    impl Model for Slow {
        fn now(&self) -> SimTime {
            self.inner.now()
        }
        fn step_before(&mut self, limit: SimTime) -> Step {
            self.inner.step_before(limit)
        }
        fn stalled_for(&self) -> Option<SimTime> {
            Some(self.inner.now() - self.since)
        }
        fn confirm_stall(&mut self) -> bool {
            self.refusals += 1;
            self.since = self.inner.now();
            false
        }
    }

    #[test]
    fn the_watchdog_needs_the_models_confirmation() {
        let mut m = Slow {
            inner: countdown(20),
            since: SimTime::ZERO,
            refusals: 0,
        };
        let out = Driver::new().watchdog(SimTime::from_ns(4)).run(&mut m);
        assert_eq!(out.stop, Stop::Empty);
        assert_eq!(out.steps, 21);
        // Asked at 5, 10, 15 and 20 ns (each time 5 ns after the last refusal).
        assert_eq!(m.refusals, 4);
    }

    #[test]
    fn progress_is_reported_every_65536_steps() {
        let mut m = countdown(200_000);
        let mut seen = Vec::new();
        let mut cb = |t: SimTime| seen.push(t);
        Driver::new().progress(&mut cb).run(&mut m);
        assert_eq!(
            seen,
            vec![
                SimTime::from_ns(65_535),
                SimTime::from_ns(131_071),
                SimTime::from_ns(196_607)
            ]
        );
    }
}
