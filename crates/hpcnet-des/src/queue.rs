//! The event queue: a binary heap ordered by (time, insertion sequence).
//!
//! Equal-time events pop in the order they were pushed (first in, first out), which makes every
//! run reproducible regardless of the heap's internal layout (as in nexosim's priority queue).

use crate::units::SimTime;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// `key` = time in the upper 64 bits, insertion sequence in the lower: one comparison orders
/// by (time, sequence).
struct Entry<E> {
    key: u128,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest (time, seq) first.
        o.key.cmp(&self.key)
    }
}

/// A deterministic future-event list.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
    now: SimTime,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            seq: 0,
            now: SimTime::ZERO,
            popped: 0,
        }
    }

    /// Current simulated time: the time of the last popped event.
    #[inline]
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Schedule `event` at absolute time `at`. Scheduling into the past is a model bug; the event
    /// is clamped to `now` so time never runs backwards (debug builds assert).
    #[inline]
    pub fn schedule(&mut self, at: SimTime, event: E) {
        debug_assert!(at >= self.now, "event scheduled in the past: {at:?} < {:?}", self.now);
        let time = at.max(self.now);
        self.heap.push(Entry {
            key: ((time.0 as u128) << 64) | self.seq as u128,
            event,
        });
        self.seq += 1;
    }

    /// Schedule `event` `delay` after now.
    #[inline]
    pub fn schedule_in(&mut self, delay: SimTime, event: E) {
        let at = self.now + delay;
        self.schedule(at, event);
    }

    /// Remove and return the earliest event, advancing `now` to its time.
    #[inline]
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        let e = self.heap.pop()?;
        let time = SimTime((e.key >> 64) as u64);
        self.now = time;
        self.popped += 1;
        Some((time, e.event))
    }

    /// Time of the earliest pending event.
    #[inline]
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|e| SimTime((e.key >> 64) as u64))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
    /// Number of events popped so far.
    pub fn events_processed(&self) -> u64 {
        self.popped
    }
    /// Advance `now` without an event (e.g. to the end of a phase). Never moves backwards.
    pub fn advance_to(&mut self, t: SimTime) {
        if t > self.now {
            self.now = t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn equal_times_are_fifo() {
        let mut q = EventQueue::new();
        for i in 0..100 {
            q.schedule(SimTime(5), i);
        }
        q.schedule(SimTime(1), 1000);
        assert_eq!(q.pop(), Some((SimTime(1), 1000)));
        for i in 0..100 {
            assert_eq!(q.pop(), Some((SimTime(5), i)));
        }
        assert!(q.pop().is_none());
    }

    proptest! {
        #[test]
        fn pops_in_time_then_seq_order(times in proptest::collection::vec(0u64..50, 1..200)) {
            let mut q = EventQueue::new();
            for (i, t) in times.iter().enumerate() {
                q.schedule(SimTime(*t), i);
            }
            let mut last = (SimTime(0), 0usize);
            let mut first = true;
            while let Some((t, i)) = q.pop() {
                if !first {
                    prop_assert!((t, i) > last);
                }
                first = false;
                last = (t, i);
            }
        }
    }
}
