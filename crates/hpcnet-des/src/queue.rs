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
//!   key order: a new event goes last in O(1) through the bucket's tail when its key is the
//!   largest, otherwise after a short walk from the head (on the torus benchmark about half of
//!   all insertions walk, about two nodes: times spread within a bucket, and an equal time from
//!   a lower origin goes first). Events are not moved until popped and scheduling does not
//!   allocate once warm. A slab node's event is initialised exactly while the node is linked,
//!   so neither a pop nor a schedule tests or drops a flag. (Sorting whole buckets when they
//!   come due, or keeping the current bucket in a small heap, measured 5–10 % slower overall;
//!   256 ps buckets cost least on the torus, see docs/PERFORMANCE.md, "The event queue".)
//! - a bitmap of non-empty buckets finds the next event in a sparse ring with a few word scans;
//!   the pop itself finds the next bucket within the same 64-bucket word;
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

use std::mem::MaybeUninit;

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
/// While lanes carry events, the ring's start follows `now` once it is this many buckets behind
/// (32 ns at 256 ps).
const CATCH_UP: u64 = 128;

/// Bits of the per-origin sequence in a key (2^40 ≈ 10^12 events per origin).
const SEQ_BITS: u32 = 40;
/// Origins a queue can tell apart (2^24 ≈ 16.7 million components).
pub const MAX_ORIGINS: u32 = 1 << (64 - SEQ_BITS);

/// The model component that schedules an event (see the module documentation).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Origin(pub u32);

#[inline]
fn key_of(time: u64, origin_seq: u64) -> u128 {
    ((time as u128) << 64) | origin_seq as u128
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
///
/// The event is initialised exactly while the slot is linked into a bucket: written when the
/// slot leaves the free list, read out (moved) when it returns to it. No flag says which, so a
/// pop tests no discriminant and a schedule drops nothing it overwrites.
struct Node<E> {
    time: u64,
    /// origin << 40 | per-origin sequence.
    seq: u64,
    next: u32,
    event: MaybeUninit<E>,
}

impl<E> Node<E> {
    #[inline]
    fn key(&self) -> u128 {
        key_of(self.time, self.seq)
    }

    /// Whether this event's key is greater than (`time`, `seq`) (keys are unique).
    #[inline(always)]
    fn after(&self, time: u64, seq: u64) -> bool {
        self.time > time || (self.time == time && self.seq > seq)
    }
}

/// First and last slab node of a ring bucket (NIL, NIL when empty), side by side so that one
/// cache line serves both.
#[derive(Copy, Clone)]
struct Bucket {
    head: u32,
    tail: u32,
}

const EMPTY: Bucket = Bucket { head: NIL, tail: NIL };

/// A deterministic future-event list.
pub struct EventQueue<E> {
    /// Absolute bucket index (time >> BUCKET_SHIFT) of the earliest bucket the ring holds.
    cur: u64,
    /// Every ring bucket (`bucket % RING`). A fixed-size array indexed by masked slots needs no
    /// bounds checks.
    buckets: Box<[Bucket; RING as usize]>,
    /// Bit `b % RING` set iff ring bucket b is non-empty.
    occupied: Box<[u64; WORDS]>,
    /// Ring events. Invariant: every index linked from `buckets` or from a linked node's `next`,
    /// and every index on the free list, is below `slab.len()` (the slab never shrinks); linked
    /// nodes hold an initialised event, free ones do not.
    slab: Vec<Node<E>>,
    /// Head of the free-slot list threaded through `Node::next` (NIL: none).
    free: u32,
    /// Events in the ring.
    in_ring: usize,
    /// No ring event lies in a bucket before this one (a lower bound, lowered when an empty
    /// bucket takes an event; read while lanes hold events).
    ring_next: u64,
    /// Events at or beyond bucket `cur + RING`.
    far: Heap<E>,
    /// Events the ring could not take cheaply (see the module documentation).
    spill: Heap<E>,
    /// Low key word of each origin's next event: origin << 40 | its next sequence number.
    seqs: Vec<u64>,
    /// Monotone lanes ([`EventQueue::schedule_in_lane`]).
    lanes: [LaneBuf<E>; LANES],
    /// Key of the earliest lane head: its time (u64::MAX when every lane is empty), its low
    /// word, and its lane.
    lane_time: u64,
    lane_seq: u64,
    lane_at: usize,
    /// Events in the lanes.
    in_lanes: usize,
    /// Lanes below this number have been used (the others are empty).
    lanes_used: usize,
    now: SimTime,
    popped: u64,
    /// Tests: lanes append whatever they are given (the order check must then fail).
    #[cfg(test)]
    broken: bool,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> Drop for EventQueue<E> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<E>() {
            return;
        }
        for b in self.buckets.iter() {
            let mut i = b.head;
            while i != NIL {
                let node = &mut self.slab[i as usize];
                // SAFETY: a linked node holds an initialised event (the slab's invariant), and
                // each is visited once.
                unsafe { node.event.assume_init_drop() };
                i = node.next;
            }
        }
        for lane in self.lanes.iter_mut() {
            while lane.head != lane.tail {
                drop(lane.pop_front());
            }
        }
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue {
            cur: 0,
            buckets: Box::new([EMPTY; RING as usize]),
            occupied: Box::new([0; WORDS]),
            slab: Vec::new(),
            free: NIL,
            in_ring: 0,
            ring_next: u64::MAX,
            far: Heap::default(),
            spill: Heap::default(),
            seqs: Vec::new(),
            lanes: std::array::from_fn(|_| LaneBuf::default()),
            lane_time: u64::MAX,
            lane_seq: 0,
            lane_at: 0,
            in_lanes: 0,
            lanes_used: 0,
            now: SimTime::ZERO,
            popped: 0,
            #[cfg(test)]
            broken: false,
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
        let seq = self.next_seq(origin);
        let time = at.0.max(self.now.0);
        self.insert(time, seq, event);
    }

    /// Schedule `event` at absolute time `at`, scheduled by `origin`, through monotone lane
    /// `lane` (see the module documentation): appended to the lane when its key (time, origin,
    /// sequence) is above the key of the lane's newest event or the lane is empty, else
    /// inserted into the calendar as by [`EventQueue::schedule_by`]. The pop order is the same
    /// either way; a lane only makes events that a component schedules a fixed delay ahead
    /// cheaper. Lanes are numbered below [`LANES`] (higher numbers wrap); components sharing a
    /// queue may share lanes.
    #[inline(always)]
    pub fn schedule_in_lane(&mut self, lane: Lane, origin: Origin, at: SimTime, event: E) {
        debug_assert!(at >= self.now, "event scheduled in the past: {at:?} < {:?}", self.now);
        let seq = self.next_seq(origin);
        let time = at.0.max(self.now.0);
        let k = lane.0 as usize % LANES;
        if k >= self.lanes_used {
            self.lanes_used = k + 1;
        }
        let broken = self.broken_lanes();
        let l = &mut self.lanes[k];
        if time > l.last_time || (time == l.last_time && seq > l.last_seq) || broken {
            let was_empty = l.head_time == u64::MAX;
            l.push_back(time, seq, event);
            self.in_lanes += 1;
            if was_empty && (time < self.lane_time || (time == self.lane_time && seq < self.lane_seq)) {
                self.lane_time = time;
                self.lane_seq = seq;
                self.lane_at = k;
            }
        } else {
            self.insert(time, seq, event);
        }
    }

    /// Whether lanes append out of order (a deliberately broken queue, tests only).
    #[inline(always)]
    fn broken_lanes(&self) -> bool {
        #[cfg(test)]
        return self.broken;
        #[cfg(not(test))]
        false
    }

    /// The key's low word for `origin`'s next event (origin << 40 | sequence), counted.
    #[inline(always)]
    fn next_seq(&mut self, origin: Origin) -> u64 {
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
        seq
    }

    /// Insert an event into the calendar (ring, or a heap outside the ring's window).
    #[inline(always)]
    fn insert(&mut self, time: u64, seq: u64, event: E) {
        let b = time >> BUCKET_SHIFT;
        // One comparison for the common case: a bucket before `cur` wraps to a large distance.
        if b.wrapping_sub(self.cur) < RING {
            self.push_ring(b, time, seq, event);
        } else {
            self.push_heap(b, time, seq, event);
        }
    }

    /// An event outside the ring's window: before `cur` (spill) or beyond its horizon (far).
    #[inline(never)]
    fn push_heap(&mut self, b: u64, time: u64, seq: u64, event: E) {
        let e = Entry {
            key: key_of(time, seq),
            event,
        };
        if b < self.cur {
            self.spill.push(e);
        } else {
            self.far.push(e);
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
        self.pop_below::<true>(limit.0)
    }

    #[inline(always)]
    fn pop_below<const LIMITED: bool>(&mut self, limit: u64) -> Option<(SimTime, E)> {
        if self.lane_time != u64::MAX {
            return self.pop_with_lanes::<LIMITED>(limit);
        }
        let mut slot = (self.cur & MASK) as usize;
        let mut i = self.buckets[slot].head;
        if i == NIL {
            // The next non-empty bucket within the same bitmap word, with no far event for the
            // ring to take in (the common case on a busy network) is found here; the rest out
            // of line.
            let bits = self.occupied[slot / 64] & (!0u64 << (slot % 64));
            let cur = self.cur + u64::from(bits.trailing_zeros()) - (slot % 64) as u64;
            if bits != 0 && (self.far.min_time >> BUCKET_SHIFT).wrapping_sub(cur) >= RING {
                self.cur = cur;
                slot = (cur & MASK) as usize;
            } else {
                match self.advance() {
                    Some(s) => slot = s,
                    None => return self.pop_spill::<LIMITED>(limit),
                }
            }
            i = self.buckets[slot].head;
        }
        let node = self.node(i);
        let time = node.time;
        // The spill heap's earliest time is u64::MAX when it is empty: one comparison unless a
        // spilled event is as early as the ring's.
        if self.spill.min_time <= time && self.spill.peek_key() < Some(node.key()) {
            return self.pop_spill::<LIMITED>(limit);
        }
        if LIMITED && time >= limit {
            return None;
        }
        Some(self.take_ring(slot, i, time))
    }

    /// Unlink and return the head `i` of ring bucket `slot` (at `time`), advancing `now`.
    #[inline(always)]
    fn take_ring(&mut self, slot: usize, i: u32, time: u64) -> (SimTime, E) {
        let free = self.free;
        let node = self.node_mut(i);
        let next = node.next;
        // SAFETY: `i` is linked (the head of a bucket), so its event is initialised; the slot
        // goes to the free list below and its event is not read again until rewritten.
        let event = unsafe { node.event.assume_init_read() };
        node.next = free;
        self.free = i;
        let bucket = &mut self.buckets[slot];
        bucket.head = next;
        if next == NIL {
            bucket.tail = NIL;
            self.occupied[slot / 64] &= !(1 << (slot % 64));
        }
        self.in_ring -= 1;
        self.popped(SimTime(time), event)
    }

    /// [`EventQueue::pop_below`] while some lane holds an event: the least key among the
    /// ring's first event, the earliest lane head and the spill heap's head.
    ///
    /// The ring's first event is found from `ring_next` (no ring event lies in buckets before
    /// it) and not looked for again while the lanes' events come first; `cur` follows `now`
    /// only when it has fallen `CATCH_UP` buckets behind, so that an event scheduled into the
    /// calendar shortly after `now` still lands in the ring's window.
    #[inline(always)]
    fn pop_with_lanes<const LIMITED: bool>(&mut self, limit: u64) -> Option<(SimTime, E)> {
        let (lt, ls) = (self.lane_time, self.lane_seq);
        let lb = lt >> BUCKET_SHIFT;
        let rn = self.ring_next.max(self.cur);
        let (mut slot, mut i) = (0, NIL);
        // The far heap's events are at or beyond the ring's window; one before the lane's
        // head (or at its time) is looked at with the ring's.
        let ring_first = if lb < rn && lt < self.far.min_time {
            false
        } else {
            slot = (rn & MASK) as usize;
            i = self.buckets[slot].head;
            if i == NIL {
                (slot, i) = self.ring_first_event();
            }
            // Keys are unique: the ring's head goes first iff it is not after the lane's head.
            i != NIL && !self.node(i).after(lt, ls)
        };
        let (time, seq) = if ring_first {
            let node = self.node(i);
            (node.time, node.seq)
        } else {
            (lt, ls)
        };
        if self.spill.min_time <= time && self.spill.peek_key() < Some(key_of(time, seq)) {
            return self.pop_spill::<LIMITED>(limit);
        }
        if LIMITED && time >= limit {
            return None;
        }
        if (time >> BUCKET_SHIFT).wrapping_sub(self.cur) >= CATCH_UP {
            self.catch_up(time >> BUCKET_SHIFT);
        }
        if ring_first {
            return Some(self.take_ring(slot, i, time));
        }
        let lane = &mut self.lanes[self.lane_at];
        let event = lane.pop_front();
        self.in_lanes -= 1;
        // The earliest lane head again (the lanes are few; each keeps its head's key).
        if self.lanes_used == 1 {
            let l = &self.lanes[0];
            self.lane_time = l.head_time;
            self.lane_seq = l.head_seq;
        } else {
            self.next_lane();
        }
        Some(self.popped(SimTime(lt), event))
    }

    /// Find the earliest lane head among the lanes used.
    #[inline(always)]
    fn next_lane(&mut self) {
        let (mut t, mut q, mut at) = (u64::MAX, 0, 0);
        for (k, l) in self.lanes.iter().enumerate().take(self.lanes_used) {
            if l.head_time < t || (l.head_time == t && l.head_seq < q) {
                (t, q, at) = (l.head_time, l.head_seq, k);
            }
        }
        self.lane_time = t;
        self.lane_seq = q;
        self.lane_at = at;
    }

    /// The calendar's first event when the bucket at `ring_next` is empty: the first ring event
    /// at or after it, or the far heap's first event brought into the ring if that comes
    /// earlier. Sets `ring_next` to its bucket; returns its slot and node (NIL: the calendar is
    /// empty).
    #[inline(never)]
    fn ring_first_event(&mut self) -> (usize, u32) {
        let from = self.ring_next.max(self.cur);
        let next = self.next_occupied_from(from);
        let far = self.far.min_time >> BUCKET_SHIFT;
        let first = if self.far.min_time != u64::MAX && far < next {
            // Move the window just far enough to take the far heap's first bucket (every ring
            // event is later, so `cur` stays at or before the ring's buckets).
            self.cur = self.cur.max(far + 1 - RING);
            self.pull_far();
            far
        } else {
            next
        };
        self.ring_next = first;
        if first == u64::MAX {
            return (0, NIL);
        }
        let slot = (first & MASK) as usize;
        (slot, self.buckets[slot].head)
    }

    /// Absolute bucket of the first non-empty ring bucket at or after `from` (which is within
    /// the ring's window), u64::MAX if none.
    fn next_occupied_from(&self, from: u64) -> u64 {
        if self.in_ring == 0 {
            return u64::MAX;
        }
        let end = self.cur + RING;
        let mut b = from;
        while b < end {
            let slot = (b & MASK) as usize;
            let bits = self.occupied[slot / 64] & (!0u64 << (slot % 64));
            if bits != 0 {
                return b + u64::from(bits.trailing_zeros()) - (slot % 64) as u64;
            }
            b += 64 - (slot % 64) as u64;
        }
        u64::MAX
    }

    /// `now` moves to bucket `b`, `CATCH_UP` or more buckets past `cur` (or before it, after a
    /// `pop_before` moved the ring ahead): move the window's start there (every ring event is
    /// at or after `b`), pulling in the far events it then covers.
    #[inline(never)]
    fn catch_up(&mut self, b: u64) {
        if b > self.cur {
            self.cur = b;
            self.pull_far();
        }
    }

    /// Move the far events the ring's window now covers into the ring.
    fn pull_far(&mut self) {
        while (self.far.min_time >> BUCKET_SHIFT).wrapping_sub(self.cur) < RING {
            let e = self.far.pop().expect("a far event within the ring");
            let time = (e.key >> 64) as u64;
            self.push_ring(time >> BUCKET_SHIFT, time, e.key as u64, e.event);
        }
    }

    /// Slab node `i`, which the caller knows to be linked or free (the slab's invariant).
    #[inline(always)]
    fn node(&self, i: u32) -> &Node<E> {
        debug_assert!((i as usize) < self.slab.len(), "slab index {i} of {}", self.slab.len());
        // SAFETY: linked and free indices are below `slab.len()` (invariant at `slab`).
        unsafe { self.slab.get_unchecked(i as usize) }
    }

    /// [`EventQueue::node`], mutable.
    #[inline(always)]
    fn node_mut(&mut self, i: u32) -> &mut Node<E> {
        debug_assert!((i as usize) < self.slab.len(), "slab index {i} of {}", self.slab.len());
        // SAFETY: as in `node`.
        unsafe { self.slab.get_unchecked_mut(i as usize) }
    }

    #[inline]
    fn popped(&mut self, time: SimTime, event: E) -> (SimTime, E) {
        self.now = time;
        self.popped += 1;
        (time, event)
    }

    #[inline(never)]
    fn pop_spill<const LIMITED: bool>(&mut self, limit: u64) -> Option<(SimTime, E)> {
        if LIMITED && self.spill.min_time >= limit {
            return None;
        }
        let e = self.spill.pop()?;
        Some(self.popped(time_of(e.key), e.event))
    }

    /// Time of the earliest pending event.
    pub fn peek_time(&self) -> Option<SimTime> {
        let main = match self.next_occupied() {
            Some(slot) => Some(self.node(self.buckets[slot].head).key()),
            None => self.far.peek_key(),
        };
        let lane = (self.lane_time != u64::MAX).then(|| key_of(self.lane_time, self.lane_seq));
        [main, self.spill.peek_key(), lane]
            .into_iter()
            .flatten()
            .min()
            .map(time_of)
    }

    /// Link a new event (`time`, origin-sequence `seq`) into ring bucket `b`, in key order; the
    /// event goes to `spill` if its place is too far from the bucket's ends.
    ///
    /// Usually the new event goes last (later time, or an equal time and a larger key); else
    /// a short walk from the head finds its place. Keys are compared as (time, seq) pairs of
    /// words, never composed into 128 bits.
    #[inline(always)]
    fn push_ring(&mut self, b: u64, time: u64, seq: u64, event: E) {
        let slot = (b & MASK) as usize;
        let Bucket { head, tail } = self.buckets[slot];
        if tail == NIL {
            let i = self.alloc(time, seq, NIL, event);
            self.buckets[slot] = Bucket { head: i, tail: i };
            self.occupied[slot / 64] |= 1 << (slot % 64);
            self.ring_next = self.ring_next.min(b);
        } else if !self.node(tail).after(time, seq) {
            let i = self.alloc(time, seq, NIL, event);
            self.node_mut(tail).next = i;
            self.buckets[slot].tail = i;
        } else {
            self.insert_ordered(slot, head, time, seq, event);
        }
        self.in_ring += 1;
    }

    /// An event with an earlier key than its bucket's last: link it after the last node that is
    /// not later, or give it to `spill` if that is more than `MAX_WALK` nodes from the head.
    #[inline(never)]
    fn insert_ordered(&mut self, slot: usize, head: u32, time: u64, seq: u64, event: E) {
        let mut after = NIL; // node to link after (NIL: at the head)
        let mut j = head;
        let mut steps = 0;
        // The tail is later, so the walk ends before it.
        while !self.node(j).after(time, seq) {
            steps += 1;
            if steps > MAX_WALK {
                self.in_ring -= 1; // counted by the caller
                self.spill.push(Entry {
                    key: key_of(time, seq),
                    event,
                });
                return;
            }
            after = j;
            j = self.node(j).next;
        }
        let i = self.alloc(time, seq, j, event);
        if after == NIL {
            self.buckets[slot].head = i;
        } else {
            self.node_mut(after).next = i;
        }
    }

    /// A slab slot holding a new node (from the free list, else a new slot).
    #[inline(always)]
    fn alloc(&mut self, time: u64, seq: u64, next: u32, event: E) -> u32 {
        let i = self.free;
        if i != NIL {
            self.free = self.node(i).next;
            let node = self.node_mut(i);
            // Plain field writes: the slot's event is uninitialised, nothing is dropped.
            node.time = time;
            node.seq = seq;
            node.next = next;
            node.event.write(event);
            i
        } else {
            self.grow(time, seq, next, event)
        }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, time: u64, seq: u64, next: u32, event: E) -> u32 {
        let i = u32::try_from(self.slab.len()).expect("fewer than 2^32 events in the ring");
        assert!(i != NIL, "fewer than 2^32 - 1 events in the ring");
        self.slab.push(Node {
            time,
            seq,
            next,
            event: MaybeUninit::new(event),
        });
        i
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
    #[inline(never)]
    fn advance(&mut self) -> Option<usize> {
        match self.next_occupied() {
            Some(slot) => self.cur += (slot as u64).wrapping_sub(self.cur) & MASK,
            None => self.cur = bucket_of(self.far.peek_key()?),
        }
        // The far heap's earliest time is u64::MAX when it is empty.
        while (self.far.min_time >> BUCKET_SHIFT).wrapping_sub(self.cur) < RING {
            let e = self.far.pop().expect("a far event within the ring");
            let time = (e.key >> 64) as u64;
            self.push_ring(time >> BUCKET_SHIFT, time, e.key as u64, e.event);
        }
        Some((self.cur & MASK) as usize)
    }

    pub fn len(&self) -> usize {
        self.in_ring + self.in_lanes + self.far.h.len() + self.spill.h.len()
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

/// A monotone lane's handle (see [`EventQueue::schedule_in_lane`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Lane(pub u8);

/// Monotone lanes a queue has.
pub const LANES: usize = 4;

/// An event waiting in a lane.
struct LaneSlot<E> {
    time: u64,
    seq: u64,
    event: MaybeUninit<E>,
}

/// A monotone lane: a ring buffer of events in increasing key order (each appended above the
/// one before), so that its first event is its earliest.
struct LaneBuf<E> {
    /// Slots; the length is zero or a power of two. Positions `head..tail` (wrapping, masked)
    /// hold initialised events, the others none.
    buf: Vec<LaneSlot<E>>,
    mask: u32,
    head: u32,
    tail: u32,
    /// Key of the first event (time u64::MAX: the lane is empty).
    head_time: u64,
    head_seq: u64,
    /// Key of the newest event ((0, 0) when the lane is empty: anything may be appended).
    last_time: u64,
    last_seq: u64,
}

impl<E> Default for LaneBuf<E> {
    fn default() -> Self {
        LaneBuf {
            buf: Vec::new(),
            mask: 0,
            head: 0,
            tail: 0,
            head_time: u64::MAX,
            head_seq: 0,
            last_time: 0,
            last_seq: 0,
        }
    }
}

impl<E> LaneBuf<E> {
    /// Append an event whose key is above the newest one's (the caller checked).
    #[inline(always)]
    fn push_back(&mut self, time: u64, seq: u64, event: E) {
        if self.tail.wrapping_sub(self.head) == self.buf.len() as u32 {
            self.grow();
        }
        let s = (self.tail & self.mask) as usize;
        debug_assert!(s < self.buf.len());
        // SAFETY: the mask keeps `s` below the length (a power of two); the slot is outside
        // `head..tail`, so it holds no event and nothing is dropped.
        let slot = unsafe { self.buf.get_unchecked_mut(s) };
        slot.time = time;
        slot.seq = seq;
        slot.event.write(event);
        if self.head == self.tail {
            self.head_time = time;
            self.head_seq = seq;
        }
        self.tail = self.tail.wrapping_add(1);
        self.last_time = time;
        self.last_seq = seq;
    }

    /// Remove the first event (the lane is not empty).
    #[inline(always)]
    fn pop_front(&mut self) -> E {
        debug_assert!(self.head != self.tail, "pop from an empty lane");
        let s = (self.head & self.mask) as usize;
        // SAFETY: `head` is in `head..tail`, so its slot holds an initialised event, read once.
        let event = unsafe { self.buf.get_unchecked(s).event.assume_init_read() };
        self.head = self.head.wrapping_add(1);
        if self.head == self.tail {
            self.head_time = u64::MAX;
            self.last_time = 0;
            self.last_seq = 0;
        } else {
            // SAFETY: as above.
            let next = unsafe { self.buf.get_unchecked((self.head & self.mask) as usize) };
            self.head_time = next.time;
            self.head_seq = next.seq;
        }
        event
    }

    /// Double the slots (at least 64), the events kept in order from position 0.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let n = self.tail.wrapping_sub(self.head) as usize;
        let cap = (2 * self.buf.len()).max(64);
        assert!(cap <= 1 << 31, "fewer than 2^31 events in a lane");
        let mut buf: Vec<LaneSlot<E>> = (0..cap)
            .map(|_| LaneSlot {
                time: 0,
                seq: 0,
                event: MaybeUninit::uninit(),
            })
            .collect();
        for (k, new) in buf.iter_mut().enumerate().take(n) {
            let old = &self.buf[(self.head.wrapping_add(k as u32) & self.mask) as usize];
            new.time = old.time;
            new.seq = old.seq;
            // SAFETY: positions `head..tail` hold initialised events; each is moved once and
            // the old slots are dropped without dropping events (`MaybeUninit`).
            new.event.write(unsafe { old.event.assume_init_read() });
        }
        self.buf = buf;
        self.mask = cap as u32 - 1;
        self.head = 0;
        self.tail = n as u32;
    }
}

struct Entry<E> {
    key: u128,
    event: E,
}

/// 4-ary min-heap on the key (the four children share a cache line or two).
struct Heap<E> {
    h: Vec<Entry<E>>,
    /// Time of the earliest entry, u64::MAX when empty (read on every pop of the ring).
    min_time: u64,
}

impl<E> Default for Heap<E> {
    fn default() -> Self {
        Heap {
            h: Vec::new(),
            min_time: u64::MAX,
        }
    }
}

impl<E> Heap<E> {
    #[inline]
    fn peek_key(&self) -> Option<u128> {
        self.h.first().map(|e| e.key)
    }

    #[inline]
    fn set_min(&mut self) {
        self.min_time = self.h.first().map_or(u64::MAX, |e| (e.key >> 64) as u64);
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
        self.set_min();
    }

    fn pop(&mut self) -> Option<Entry<E>> {
        if self.h.is_empty() {
            return None;
        }
        let e = self.h.swap_remove(0);
        let h = &mut self.h;
        let n = h.len();
        if n >= 2 {
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
        }
        self.set_min();
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

    #[test]
    fn every_event_is_dropped_once() {
        use std::rc::Rc;
        let token = Rc::new(());
        {
            let mut q = EventQueue::new();
            let far = RING << BUCKET_SHIFT;
            // Ring (appended and walked), spill (a burst beyond the walk) and far events.
            for o in (0..40).rev() {
                q.schedule_by(Origin(o), SimTime(1_000), Rc::clone(&token));
            }
            for t in [5, 3, 4, far * 3, far + 9] {
                q.schedule(SimTime(t), Rc::clone(&token));
            }
            assert_eq!(Rc::strong_count(&token), 46);
            // Popped events are the caller's: dropped at once here.
            for _ in 0..10 {
                drop(q.pop());
            }
            assert_eq!(Rc::strong_count(&token), 36);
            // Freed slots are reused without dropping anything in them.
            q.schedule(SimTime(2_000), Rc::clone(&token));
            assert_eq!(Rc::strong_count(&token), 37);
        }
        assert_eq!(Rc::strong_count(&token), 1);
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
        /// Schedule by an origin through a lane, `delay` after now: appended when above the
        /// lane's newest key, else into the calendar.
        Lane {
            lane: u8,
            origin: u32,
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

    /// A lane's delay: mostly one fixed delay per lane (as a model's link or pipeline stage),
    /// sometimes any delay (out of order, falling back to the calendar).
    fn lane_delay(lane: u8) -> impl Strategy<Value = u64> {
        let fixed = [0u64, 10_000, 167_000, (RING << BUCKET_SHIFT) + 300][lane as usize % 4];
        prop_oneof![3 => Just(fixed), 1 => fixed..fixed + 300, 1 => delay()]
    }

    fn op() -> impl Strategy<Value = Op> {
        let lane_op = (0u8..5, 0u32..40)
            .prop_flat_map(|(lane, origin)| lane_delay(lane).prop_map(move |delay| Op::Lane { lane, origin, delay }));
        prop_oneof![
            4 => lane_op,
            4 => (0u32..40, delay()).prop_map(|(origin, delay)| Op::Schedule { origin, delay }),
            1 => (1u32..40, delay()).prop_map(|(origins, delay)| Op::Burst { origins, delay }),
            3 => Just(Op::Pop),
            2 => (0u64..3_000).prop_map(|within| Op::PopBefore { within }),
            1 => (0u64..3_000).prop_map(|by| Op::AdvanceTo { by }),
        ]
    }

    /// Reference model: a `BTreeMap` keyed by (time, origin, the origin's sequence number).
    /// Every pop, `pop_before`, `peek_time`, `len` and `now` must agree with it. `broken`:
    /// lanes append out of order (the check must then fail).
    fn check_origins_against_btree(ops: &[Op], broken: bool) -> Result<(), TestCaseError> {
        use std::collections::BTreeMap;
        let mut q = EventQueue::new();
        q.broken = broken;
        let mut reference: BTreeMap<(u64, u32, u64), usize> = BTreeMap::new();
        let mut seqs = [0u64; 64];
        let mut id = 0usize;
        let mut schedule_on = |q: &mut EventQueue<usize>, r: &mut BTreeMap<_, _>, lane: Option<u8>, o: u32, at: u64| {
            match lane {
                Some(l) => q.schedule_in_lane(Lane(l), Origin(o), SimTime(at), id),
                None => q.schedule_by(Origin(o), SimTime(at), id),
            }
            r.insert((at, o, seqs[o as usize]), id);
            seqs[o as usize] += 1;
            id += 1;
        };
        for op in ops {
            let now = q.now().0;
            match *op {
                Op::Schedule { origin, delay } => schedule_on(&mut q, &mut reference, None, origin, now + delay),
                Op::Lane { lane, origin, delay } => {
                    schedule_on(&mut q, &mut reference, Some(lane), origin, now + delay)
                }
                Op::Burst { origins, delay } => {
                    for o in (0..origins).rev() {
                        schedule_on(&mut q, &mut reference, None, o, now + delay);
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

    #[test]
    fn the_order_check_fails_on_a_lane_that_appends_out_of_order() {
        // Origin 5 then origin 1 at the same time through one lane: a lane that appends both
        // pops origin 5's event first.
        let ops = [
            Op::Lane {
                lane: 0,
                origin: 5,
                delay: 100,
            },
            Op::Lane {
                lane: 0,
                origin: 1,
                delay: 100,
            },
            Op::Pop,
            Op::Pop,
        ];
        assert!(check_origins_against_btree(&ops, false).is_ok());
        assert!(check_origins_against_btree(&ops, true).is_err());
        // And random runs find it too.
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let found = runner.run(&proptest::collection::vec(op(), 1..500), |ops| {
            check_origins_against_btree(&ops, true)
        });
        assert!(found.is_err(), "random schedules never caught the broken lane");
    }

    #[test]
    fn lanes_and_calendar_interleave_in_key_order() {
        let mut q = EventQueue::new();
        // Lane events at a fixed delay, calendar events between them, one far beyond the ring.
        let far = RING << BUCKET_SHIFT;
        q.schedule_in_lane(Lane(1), Origin(2), SimTime(1_000), "l1");
        q.schedule_in_lane(Lane(1), Origin(3), SimTime(1_000), "l2");
        // Below the lane's newest key: the calendar takes it.
        q.schedule_in_lane(Lane(1), Origin(1), SimTime(1_000), "c0");
        q.schedule_by(Origin(0), SimTime(1_500), "c1");
        q.schedule_in_lane(Lane(2), Origin(0), SimTime(3 * far), "l3");
        q.schedule_by(Origin(0), SimTime(2 * far), "c2");
        assert_eq!(q.len(), 6);
        assert_eq!(q.peek_time(), Some(SimTime(1_000)));
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|e| e.1)).collect();
        assert_eq!(order, ["c0", "l1", "l2", "c1", "c2", "l3"]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_lane_grows_and_drops_its_events_once() {
        use std::rc::Rc;
        let token = Rc::new(());
        {
            let mut q = EventQueue::new();
            for t in 0..300u64 {
                q.schedule_in_lane(Lane(0), Origin(1), SimTime(10 * t), Rc::clone(&token));
                if t % 3 == 0 {
                    drop(q.pop());
                }
            }
            assert_eq!(q.len(), 200);
            assert_eq!(Rc::strong_count(&token), 201);
            let mut last = SimTime::ZERO;
            for _ in 0..50 {
                let (t, _) = q.pop().unwrap();
                assert!(t >= last);
                last = t;
            }
        }
        assert_eq!(Rc::strong_count(&token), 1);
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
        /// Half of the schedules go through monotone lanes (mostly at a fixed delay per lane,
        /// sometimes out of order).
        #[test]
        fn pops_in_time_origin_sequence_order(ops in proptest::collection::vec(op(), 1..500)) {
            check_origins_against_btree(&ops, false)?;
        }
    }
}
