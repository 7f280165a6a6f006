//! The event queue: a bucketed calendar for the near future plus heaps for the rest, ordered by
//! (time, origin, per-origin sequence).
//!
//! **Ordering rule.** Every event is scheduled by an *origin* — the model component whose
//! action scheduled it (a router, a node and its NIC, a traffic source; [`Origin`]) — and gets
//! the next number of that origin's own sequence. Events pop in increasing (time, origin,
//! sequence): equal-time events of one origin in the order that origin scheduled them, and of
//! different origins by origin number. No global counter enters the key, so a partitioned
//! engine in which each partition owns some components (and each component handles its events
//! in this order) schedules every event with the same key as the serial engine, and runs give
//! identical results whatever the partitioning. Each event carries one key =
//! time << 64 | origin << 40 | sequence (a `u128` in the heaps, two words in the ring, the low
//! one kept ready per origin), and the queue pops keys in strictly increasing order, whatever
//! structure they wait in (as in nexosim's priority queue). [`EventQueue::schedule`]
//! uses origin 0, for models with one component.
//!
//! Why not one heap: profiling the torus benchmark showed a 4-ary heap's sift-down at ~20 % of
//! the run (~380 instructions per packet-hop: unpredictable comparisons over a few thousand
//! pending events). Almost every event of a network simulation is scheduled a few nanoseconds to
//! a few microseconds ahead, so a calendar queue (Brown 1988) fits:
//! - a ring of `RING` buckets, each `2^BUCKET_SHIFT` ps wide, holds the events of the next
//!   `RING << BUCKET_SHIFT` ps (~2 µs). A bucket is a linked list threaded through a slab, in
//!   key order: a new event usually goes last (it has the largest sequence number), O(1)
//!   through the bucket's tail, otherwise after a short walk. Events are not moved until popped
//!   and scheduling does not allocate once warm. (Sorting whole buckets when they come due,
//!   or keeping the current bucket in a small heap, measured 5–10 % slower overall.)
//! - a bitmap of non-empty buckets finds the next event in a sparse ring with a few word scans;
//! - events beyond the ring's horizon wait in the `far` heap and move into the ring as it
//!   advances;
//! - the `spill` heap takes what the ring cannot take cheaply: an event whose ordered place in
//!   its bucket is more than `MAX_WALK` nodes from the head (pathological buckets, such as
//!   100 000 tasks sleeping 0–6 ps in the executor tests, stay O(log n)), or that falls before
//!   `cur` (after the ring moved ahead to find its next event but a spilled event came first).
//!   A pop takes the smaller head of ring and spill.
//!
//! Invariants: ring buckets hold the events of buckets [cur, cur + RING) in key order; `far`
//! holds only events at or beyond cur + RING; `spill` holds anything.

use crate::units::SimTime;

/// Bucket width: 2^8 ps = 256 ps. The torus benchmark runs ~16 events per ns, so a bucket holds
/// a few events and ordered insertion stays cheap.
const BUCKET_SHIFT: u32 = 8;
/// Buckets in the ring (a power of two): 8192 × 256 ps ≈ 2.1 µs covers link, router and
/// serialisation delays and most traffic-generator gaps; later events go to the `far` heap.
const RING: u64 = 1 << 13;
const MASK: u64 = RING - 1;
const WORDS: usize = (RING / 64) as usize;
/// Longest walk along a bucket for an ordered insertion before the event goes to `spill`.
const MAX_WALK: u32 = 16;
const NIL: u32 = u32::MAX;

/// Bits of the per-origin sequence in a key (2^40 ≈ 10^12 events per origin).
const SEQ_BITS: u32 = 40;
/// Origins a queue can tell apart (2^24 ≈ 16.7 million components).
pub const MAX_ORIGINS: u32 = 1 << (64 - SEQ_BITS);

/// The model component that schedules an event (see the module documentation).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Origin(pub u32);

#[inline]
fn key_of(time: SimTime, origin_seq: u64) -> u128 {
    ((time.0 as u128) << 64) | origin_seq as u128
}

#[inline]
fn time_of(key: u128) -> SimTime {
    SimTime((key >> 64) as u64)
}

#[inline]
fn bucket_of(key: u128) -> u64 {
    (key >> (64 + BUCKET_SHIFT)) as u64
}

/// A slab slot: an event waiting in a ring bucket, linked to the next one of the same bucket
/// (or, while the slot is free, to the next free slot). Time and (origin, sequence) are kept
/// apart rather than as one `u128` key: the node is then 8-byte aligned (32 bytes for the
/// network's events instead of 48).
struct Node<E> {
    time: u64,
    /// origin << 40 | per-origin sequence.
    seq: u64,
    next: u32,
    /// `None` while the slot is free.
    event: Option<E>,
}

impl<E> Node<E> {
    #[inline]
    fn key(&self) -> u128 {
        ((self.time as u128) << 64) | self.seq as u128
    }

    /// Whether this event's key is greater than (`time`, `seq`) (keys are unique).
    #[inline(always)]
    fn after(&self, time: u64, seq: u64) -> bool {
        self.time > time || (self.time == time && self.seq > seq)
    }
}

/// A deterministic future-event list.
pub struct EventQueue<E> {
    /// Absolute bucket index (time >> BUCKET_SHIFT) of the earliest bucket the ring holds.
    cur: u64,
    /// First and last slab node of every ring bucket (`bucket % RING`), NIL if empty. Fixed-size
    /// arrays indexed by masked slots need no bounds checks (those were ~20 % of `schedule`).
    heads: Box<[u32; RING as usize]>,
    tails: Box<[u32; RING as usize]>,
    /// Bit `b % RING` set iff ring bucket b is non-empty.
    occupied: Box<[u64; WORDS]>,
    slab: Vec<Node<E>>,
    /// Head of the free-slot list threaded through `Node::next` (NIL: none).
    free: u32,
    /// Events in the ring.
    in_ring: usize,
    /// Events at or beyond bucket `cur + RING`.
    far: Heap<E>,
    /// Events the ring could not take cheaply (see the module documentation).
    spill: Heap<E>,
    /// Low key word of each origin's next event: origin << 40 | its next sequence number.
    seqs: Vec<u64>,
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
            cur: 0,
            heads: Box::new([NIL; RING as usize]),
            tails: Box::new([NIL; RING as usize]),
            occupied: Box::new([0; WORDS]),
            slab: Vec::new(),
            free: NIL,
            in_ring: 0,
            far: Heap { h: Vec::new() },
            spill: Heap { h: Vec::new() },
            seqs: Vec::new(),
            now: SimTime::ZERO,
            popped: 0,
        }
    }

    /// Current simulated time: the time of the last popped event.
    #[inline]
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Schedule `event` at absolute time `at` on behalf of origin 0.
    #[inline(always)]
    pub fn schedule(&mut self, at: SimTime, event: E) {
        self.schedule_by(Origin(0), at, event);
    }

    /// Make room for origins below `n` (so that scheduling never grows the table).
    pub fn reserve_origins(&mut self, n: u32) {
        assert!(n <= MAX_ORIGINS, "at most {MAX_ORIGINS} origins, asked for {n}");
        let have = self.seqs.len() as u64;
        if have < n as u64 {
            self.seqs.extend((have..n as u64).map(|o| o << SEQ_BITS));
        }
    }

    /// Schedule `event` at absolute time `at`, scheduled by `origin`. Scheduling into the past
    /// is a model bug; the event is clamped to `now` so time never runs backwards (debug builds
    /// assert).
    ///
    /// The key's low word comes ready-made from the origin's counter (it holds
    /// origin << 40 | next sequence), so an insertion reads and bumps one word.
    #[inline(always)]
    pub fn schedule_by(&mut self, origin: Origin, at: SimTime, event: E) {
        debug_assert!(at >= self.now, "event scheduled in the past: {at:?} < {:?}", self.now);
        let seq = match self.seqs.get_mut(origin.0 as usize) {
            Some(s) => {
                *s += 1;
                *s - 1
            }
            None => self.first_of_origin(origin),
        };
        debug_assert!(
            seq >> SEQ_BITS == origin.0 as u64,
            "origin {origin:?} scheduled 2^40 events"
        );
        let time = at.0.max(self.now.0);
        let b = time >> BUCKET_SHIFT;
        if b < self.cur {
            self.spill.push(Entry {
                key: key_of(SimTime(time), seq),
                event,
            });
        } else if b - self.cur < RING {
            if let Err(event) = self.push_ring(b, time, seq, event) {
                self.spill.push(Entry {
                    key: key_of(SimTime(time), seq),
                    event,
                });
            }
        } else {
            self.far.push(Entry {
                key: key_of(SimTime(time), seq),
                event,
            });
        }
    }

    /// The first event of an origin beyond the reserved ones: grow the table, return its key.
    #[cold]
    #[inline(never)]
    fn first_of_origin(&mut self, origin: Origin) -> u64 {
        self.reserve_origins(origin.0 + 1);
        let s = &mut self.seqs[origin.0 as usize];
        *s += 1;
        *s - 1
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
        self.pop_below::<false>(0)
    }

    /// Remove and return the earliest event if its time is before `limit` (None when the queue
    /// is empty or its earliest event is at or after `limit`; `now` then stays where it is).
    #[inline]
    pub fn pop_before(&mut self, limit: SimTime) -> Option<(SimTime, E)> {
        self.pop_below::<true>((limit.0 as u128) << 64)
    }

    #[inline(always)]
    fn pop_below<const LIMITED: bool>(&mut self, limit: u128) -> Option<(SimTime, E)> {
        let mut slot = (self.cur & MASK) as usize;
        if self.heads[slot] == NIL {
            match self.advance() {
                Some(s) => slot = s & MASK as usize,
                None => return self.pop_spill::<LIMITED>(limit),
            }
        }
        let i = self.heads[slot];
        let key = self.slab[i as usize].key();
        if let Some(k) = self.spill.peek_key() {
            if k < key {
                return self.pop_spill::<LIMITED>(limit);
            }
        }
        if LIMITED && key >= limit {
            return None;
        }
        let free = self.free;
        let node = &mut self.slab[i as usize];
        let next = node.next;
        let time = node.time;
        let event = node.event.take().expect("linked slab slot is live");
        node.next = free;
        self.free = i;
        self.heads[slot] = next;
        if next == NIL {
            self.tails[slot] = NIL;
            self.occupied[slot / 64] &= !(1 << (slot % 64));
        }
        self.in_ring -= 1;
        Some(self.popped(SimTime(time), event))
    }

    #[inline]
    fn popped(&mut self, time: SimTime, event: E) -> (SimTime, E) {
        self.now = time;
        self.popped += 1;
        (time, event)
    }

    fn pop_spill<const LIMITED: bool>(&mut self, limit: u128) -> Option<(SimTime, E)> {
        if LIMITED && self.spill.peek_key()? >= limit {
            return None;
        }
        let e = self.spill.pop()?;
        Some(self.popped(time_of(e.key), e.event))
    }

    /// Time of the earliest pending event.
    pub fn peek_time(&self) -> Option<SimTime> {
        let main = match self.next_occupied() {
            Some(slot) => Some(self.slab[self.heads[slot] as usize].key()),
            None => self.far.peek_key(),
        };
        let k = match (main, self.spill.peek_key()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(time_of(k))
    }

    /// Link a new event (`time`, origin-sequence `seq`) into ring bucket `b`, in key order;
    /// gives the event back if its place is too far from the bucket's ends.
    ///
    /// Usually the new event goes last (later time, or an equal time and a larger key); else
    /// a short walk from the head finds its place. Keys are compared as (time, seq) pairs of
    /// words, never composed into 128 bits.
    #[inline(always)]
    fn push_ring(&mut self, b: u64, time: u64, seq: u64, event: E) -> Result<(), E> {
        let slot = (b & MASK) as usize;
        let tail = self.tails[slot];
        let mut after = tail; // node to link after (NIL: at the head)
        if tail != NIL && self.slab[tail as usize].after(time, seq) {
            // An earlier key than the bucket's last event: find the last node not later.
            after = NIL;
            let mut j = self.heads[slot];
            let mut steps = 0;
            while !self.slab[j as usize].after(time, seq) {
                steps += 1;
                if steps > MAX_WALK {
                    return Err(event);
                }
                after = j;
                j = self.slab[j as usize].next;
            }
        }
        let next = if after == NIL {
            self.heads[slot]
        } else {
            self.slab[after as usize].next
        };
        let node = Node {
            time,
            seq,
            next,
            event: Some(event),
        };
        let i = if self.free != NIL {
            let i = self.free;
            self.free = self.slab[i as usize].next;
            self.slab[i as usize] = node;
            i
        } else {
            self.slab.push(node);
            (self.slab.len() - 1) as u32
        };
        if after == NIL {
            self.heads[slot] = i;
        } else {
            self.slab[after as usize].next = i;
        }
        if next == NIL {
            self.tails[slot] = i;
        }
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.in_ring += 1;
        Ok(())
    }

    /// First non-empty ring slot at or after `cur` (circularly), if any.
    #[inline]
    fn next_occupied(&self) -> Option<usize> {
        if self.in_ring == 0 {
            return None;
        }
        let start = (self.cur & MASK) as usize;
        let words = WORDS;
        let w0 = start / 64;
        let first = self.occupied[w0] & (!0u64 << (start % 64));
        if first != 0 {
            return Some(w0 * 64 + first.trailing_zeros() as usize);
        }
        // The ring is non-empty, so some word has a bit set; the start word's low bits (the far
        // end of the ring) come last.
        (1..=words)
            .map(|k| (w0 + k) % words)
            .find(|&w| self.occupied[w] != 0)
            .map(|w| w * 64 + self.occupied[w].trailing_zeros() as usize)
    }

    /// The bucket at `cur` is empty: move `cur` to the next non-empty bucket, pulling far events
    /// the ring now covers into it. Returns that bucket's slot, or None if ring and `far` are
    /// empty.
    fn advance(&mut self) -> Option<usize> {
        match self.next_occupied() {
            Some(slot) => self.cur += (slot as u64).wrapping_sub(self.cur) & MASK,
            None => self.cur = bucket_of(self.far.peek_key()?),
        }
        while let Some(k) = self.far.peek_key() {
            let b = bucket_of(k);
            if b - self.cur >= RING {
                break;
            }
            let e = self.far.pop().expect("peeked");
            if let Err(event) = self.push_ring(b, (e.key >> 64) as u64, e.key as u64, e.event) {
                self.spill.push(Entry { key: e.key, event });
            }
        }
        Some((self.cur & MASK) as usize)
    }

    pub fn len(&self) -> usize {
        self.in_ring + self.far.h.len() + self.spill.h.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

struct Entry<E> {
    key: u128,
    event: E,
}

/// 4-ary min-heap on the key (the four children share a cache line or two).
struct Heap<E> {
    h: Vec<Entry<E>>,
}

impl<E> Heap<E> {
    #[inline]
    fn peek_key(&self) -> Option<u128> {
        self.h.first().map(|e| e.key)
    }

    fn push(&mut self, e: Entry<E>) {
        let h = &mut self.h;
        let key = e.key;
        h.push(e);
        let mut i = h.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 4;
            if h[parent].key <= key {
                break;
            }
            h.swap(i, parent);
            i = parent;
        }
    }

    fn pop(&mut self) -> Option<Entry<E>> {
        if self.h.is_empty() {
            return None;
        }
        let e = self.h.swap_remove(0);
        let h = &mut self.h;
        let n = h.len();
        if n < 2 {
            return Some(e);
        }
        let key = h[0].key;
        let mut i = 0;
        loop {
            let first = 4 * i + 1;
            if first >= n {
                break;
            }
            let last = (first + 4).min(n);
            let mut best = first;
            let mut best_key = h[first].key;
            for (off, e) in h[first + 1..last].iter().enumerate() {
                if e.key < best_key {
                    best = first + 1 + off;
                    best_key = e.key;
                }
            }
            if best_key >= key {
                break;
            }
            h.swap(i, best);
            i = best;
        }
        Some(e)
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

    #[test]
    fn equal_times_pop_by_origin_then_by_each_origins_order() {
        let mut q = EventQueue::new();
        // Scheduled interleaved: origin 2 first, then 1, then 2 again, then 0.
        q.schedule_by(Origin(2), SimTime(5), "2a");
        q.schedule_by(Origin(1), SimTime(5), "1a");
        q.schedule_by(Origin(2), SimTime(5), "2b");
        q.schedule_by(Origin(1), SimTime(4), "1-early");
        q.schedule_by(Origin(0), SimTime(5), "0a");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|e| e.1)).collect();
        assert_eq!(order, ["1-early", "0a", "1a", "2a", "2b"]);
    }

    #[test]
    fn the_order_does_not_depend_on_how_origins_interleave() {
        // Two schedules of the same per-origin sequences, interleaved differently, pop alike.
        let events = |interleave: &[u32]| {
            let mut q = EventQueue::new();
            let mut next = [0u32; 3];
            for &o in interleave {
                let k = next[o as usize];
                next[o as usize] += 1;
                q.schedule_by(Origin(o), SimTime(u64::from(k % 2) * 300), (o, k));
            }
            std::iter::from_fn(|| q.pop()).collect::<Vec<_>>()
        };
        let a = events(&[0, 0, 1, 2, 1, 2, 0, 1]);
        let b = events(&[2, 1, 0, 2, 1, 0, 1, 0]);
        assert_eq!(a, b);
    }

    #[test]
    fn far_events_cross_the_horizon_in_order() {
        let mut q = EventQueue::new();
        let far = RING << BUCKET_SHIFT;
        q.schedule(SimTime(3 * far + 7), 3);
        q.schedule(SimTime(far + 1), 1);
        q.schedule(SimTime(2), 0);
        q.schedule(SimTime(far + 1), 2);
        assert_eq!(q.pop(), Some((SimTime(2), 0)));
        // Scheduled while the far events are still in the overflow heap.
        q.schedule(SimTime(far), 10);
        assert_eq!(q.peek_time(), Some(SimTime(far)));
        assert_eq!(q.pop(), Some((SimTime(far), 10)));
        assert_eq!(q.pop(), Some((SimTime(far + 1), 1)));
        assert_eq!(q.pop(), Some((SimTime(far + 1), 2)));
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(), Some((SimTime(3 * far + 7), 3)));
        assert!(q.is_empty());
        assert_eq!(q.pop(), None);
        assert_eq!(q.events_processed(), 5);
    }

    #[test]
    fn an_event_before_the_rings_start_pops_first() {
        let mut q = EventQueue::new();
        q.schedule_by(Origin(3), SimTime(5_000), 'b');
        // Nothing before 1 000 ps: the ring moves ahead to the bucket of 5 000 ps.
        assert_eq!(q.pop_before(SimTime(1_000)), None);
        assert_eq!(q.now(), SimTime::ZERO);
        // Now an event at 10 ps (a bucket the ring has left behind), and one at 5 000 ps by a
        // lower origin.
        q.schedule_by(Origin(7), SimTime(10), 'a');
        q.schedule_by(Origin(1), SimTime(5_000), 'c');
        assert_eq!(q.peek_time(), Some(SimTime(10)));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            [(SimTime(10), 'a'), (SimTime(5_000), 'c'), (SimTime(5_000), 'b')]
        );
    }

    /// One step of [`check_origins_against_btree`].
    #[derive(Clone, Debug)]
    enum Op {
        /// Schedule by an origin, `delay` after now (0: at now).
        Schedule {
            origin: u32,
            delay: u64,
        },
        /// Several origins schedule at one time, highest origin first (ordered insertion from
        /// the bucket's head; long walks go to the spill heap).
        Burst {
            origins: u32,
            delay: u64,
        },
        Pop,
        /// Pop only before now + `within` (may move the ring ahead of now without popping).
        PopBefore {
            within: u64,
        },
        /// Move now forward without an event (only up to the earliest pending event).
        AdvanceTo {
            by: u64,
        },
    }

    fn delay() -> impl Strategy<Value = u64> {
        let ring_ps = RING << BUCKET_SHIFT;
        prop_oneof![
            Just(0u64),
            0u64..(1 << BUCKET_SHIFT),
            0u64..4_000,
            0u64..ring_ps,
            (ring_ps - 600)..(ring_ps + 600),
            0u64..(5 * ring_ps),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u32..40, delay()).prop_map(|(origin, delay)| Op::Schedule { origin, delay }),
            1 => (1u32..40, delay()).prop_map(|(origins, delay)| Op::Burst { origins, delay }),
            3 => Just(Op::Pop),
            2 => (0u64..3_000).prop_map(|within| Op::PopBefore { within }),
            1 => (0u64..3_000).prop_map(|by| Op::AdvanceTo { by }),
        ]
    }

    /// Reference model: a `BTreeMap` keyed by (time, origin, the origin's sequence number).
    /// Every pop, `pop_before`, `peek_time`, `len` and `now` must agree with it.
    fn check_origins_against_btree(ops: &[Op]) -> Result<(), TestCaseError> {
        use std::collections::BTreeMap;
        let mut q = EventQueue::new();
        let mut reference: BTreeMap<(u64, u32, u64), usize> = BTreeMap::new();
        let mut seqs = [0u64; 64];
        let mut id = 0usize;
        let mut schedule = |q: &mut EventQueue<usize>, r: &mut BTreeMap<_, _>, o: u32, at: u64| {
            q.schedule_by(Origin(o), SimTime(at), id);
            r.insert((at, o, seqs[o as usize]), id);
            seqs[o as usize] += 1;
            id += 1;
        };
        for op in ops {
            let now = q.now().0;
            match *op {
                Op::Schedule { origin, delay } => schedule(&mut q, &mut reference, origin, now + delay),
                Op::Burst { origins, delay } => {
                    for o in (0..origins).rev() {
                        schedule(&mut q, &mut reference, o, now + delay);
                    }
                }
                Op::Pop => {
                    let want = reference.pop_first().map(|((t, _, _), e)| (t, e));
                    prop_assert_eq!(q.pop().map(|(t, e)| (t.0, e)), want);
                }
                Op::PopBefore { within } => {
                    let limit = now + within;
                    let want = match reference.first_key_value() {
                        Some((&(t, _, _), _)) if t < limit => reference.pop_first().map(|((t, _, _), e)| (t, e)),
                        _ => None,
                    };
                    prop_assert_eq!(q.pop_before(SimTime(limit)).map(|(t, e)| (t.0, e)), want);
                    if want.is_none() {
                        prop_assert_eq!(q.now().0, now);
                    }
                }
                Op::AdvanceTo { by } => {
                    let first = reference.first_key_value().map_or(u64::MAX, |(k, _)| k.0);
                    q.advance_to(SimTime((now + by).min(first)));
                }
            }
            prop_assert_eq!(
                q.peek_time().map(|t| t.0),
                reference.first_key_value().map(|(k, _)| k.0)
            );
            prop_assert_eq!(q.len(), reference.len());
        }
        let rest: Vec<_> = std::iter::from_fn(|| q.pop().map(|(t, e)| (t.0, e))).collect();
        let want: Vec<_> = reference.into_iter().map(|((t, _, _), e)| (t, e)).collect();
        prop_assert_eq!(rest, want);
        prop_assert!(q.is_empty());
        Ok(())
    }

    /// Reference model: a sorted list of (time, seq).
    fn check_against_reference(ops: &[(bool, u64)]) -> Result<(), TestCaseError> {
        let mut q = EventQueue::new();
        let mut reference: Vec<(u64, usize)> = Vec::new();
        for (i, &(is_pop, delay)) in ops.iter().enumerate() {
            if is_pop {
                reference.sort_unstable();
                let want = (!reference.is_empty()).then(|| reference.remove(0));
                prop_assert_eq!(q.pop().map(|(t, e)| (t.0, e)), want);
            } else {
                let at = q.now().0 + delay;
                q.schedule(SimTime(at), i);
                reference.push((at, i));
            }
            reference.sort_unstable();
            prop_assert_eq!(q.peek_time().map(|t| t.0), reference.first().map(|r| r.0));
            prop_assert_eq!(q.len(), reference.len());
        }
        while let Some((t, e)) = q.pop() {
            prop_assert_eq!((t.0, e), reference.remove(0));
        }
        prop_assert!(reference.is_empty());
        Ok(())
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

        /// Interleaved schedules and pops with delays from sub-bucket to beyond the horizon.
        #[test]
        fn matches_a_sorted_list(ops in proptest::collection::vec(
            (any::<bool>(), prop_oneof![0u64..2_000, 0u64..200_000, 0u64..40_000_000]), 1..400)) {
            check_against_reference(&ops)?;
        }

        /// Many origins, equal times, bursts that overflow a bucket's walk, events at now after
        /// the ring moved ahead, near and beyond the ring's horizon: pops in (time, origin,
        /// sequence) order, as a `BTreeMap` on that key.
        #[test]
        fn pops_in_time_origin_sequence_order(ops in proptest::collection::vec(op(), 1..500)) {
            check_origins_against_btree(&ops)?;
        }
    }
}
