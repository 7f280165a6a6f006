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
//! time << 64 | origin << 40 | sequence (a `u128` in the heaps; in the ring, the bucket's index
//! and one word with the rest, see `Node`; the low word kept ready per origin), and the queue
//! pops keys in strictly increasing order, whatever structure they wait in (as in nexosim's
//! priority queue). [`EventQueue::schedule`] uses origin 0, for models with one component.
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
//!   128 ps buckets cost least on the torus once its load is high, see docs/PERFORMANCE.md,
//!   "The event queue" and the twelfth pass on the cost per hop.)
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

/// Bucket width: 2^7 ps = 128 ps. The torus benchmark runs ~16 events per ns at 45 % load and
/// more near saturation, so a bucket holds a few events and ordered insertion stays cheap
/// (256 ps buckets cost 26 instructions more per hop at 0.9, 5 fewer at 0.2).
const BUCKET_SHIFT: u32 = 7;
/// Buckets in the ring (a power of two): 16 384 × 128 ps ≈ 2.1 µs covers link, router and
/// serialisation delays and most traffic-generator gaps; later events go to the `far` heap.
const RING: u64 = 1 << 14;
const MASK: u64 = RING - 1;
const WORDS: usize = (RING / 64) as usize;
/// Longest walk along a bucket for an ordered insertion before the event goes to `spill`.
const MAX_WALK: u32 = 16;
const NIL: u32 = u32::MAX;

/// Whether slab index `i` is NIL: slab indices stay below 2^31, so NIL is the only index with
/// the top bit set and a sign test (one instruction less than a comparison with u32::MAX, which
/// is often widened to 64 bits) tells it apart.
#[inline(always)]
fn is_nil(i: u32) -> bool {
    (i as i32) < 0
}

/// Bits of the per-origin sequence in a key (2^40 ≈ 10^12 events per origin).
const SEQ_BITS: u32 = 40;
/// Origins a queue can tell apart (2^24 ≈ 16.7 million components).
pub const MAX_ORIGINS: u32 = 1 << (64 - SEQ_BITS);
/// Bits of a narrow node key below the event's time within its bucket (see [`Node`]).
const NARROW_SEQ_BITS: u32 = 64 - BUCKET_SHIFT;
/// Origins below this have a key's low word below 2^`NARROW_SEQ_BITS`, which leaves a node's
/// one-word key room for the event's time within its bucket (2^17 origins).
const NARROW_ORIGINS: u32 = 1 << (NARROW_SEQ_BITS - SEQ_BITS);
/// The origin-sequence bits of a narrow node key.
const NARROW_SEQ: u64 = (1 << NARROW_SEQ_BITS) - 1;

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
/// (or, while the slot is free, to the next free slot). Every event of a ring bucket has the same
/// time >> `BUCKET_SHIFT` (a slot holds one bucket of the window), so of the time only the low
/// `BUCKET_SHIFT` bits order a bucket's events and, with the bucket's index, give the time back.
/// They are the top bits of `key`, which holds the event's order within its bucket:
/// - narrow keys (every origin below [`NARROW_ORIGINS`], the usual case):
///   `key` = (time mod 2^7) << 57 | origin << 40 | sequence, and `low` is unused: one
///   comparison of `key` orders two events of a bucket exactly as (time, origin, sequence) (for
///   sequences below 2^40, the key layout's limit);
/// - wide keys (once an origin ≥ [`NARROW_ORIGINS`] has been reserved):
///   `key` = (time mod 2^7) << 57 | (origin << 40 | sequence) >> 7 and `low` = the low 7 bits
///   of origin << 40 | sequence; (`key`, `low`) compared in that order.
///
/// The node is 24 bytes for an 8-byte event (the network's).
///
/// The event is initialised exactly while the slot is linked into a bucket: written when the
/// slot leaves the free list, read out (moved) when it returns to it. No flag says which, so a
/// pop tests no discriminant and a schedule drops nothing it overwrites.
struct Node<E> {
    /// The event's order within its bucket, its time within the bucket on top (see above).
    key: u64,
    event: MaybeUninit<E>,
    /// With wide keys, the low bits of the origin-sequence word.
    low: u32,
    next: u32,
}

/// An event's order within its ring bucket: a [`Node`]'s `key` and `low`.
#[derive(Copy, Clone)]
struct NodeKey {
    key: u64,
    low: u32,
}

impl NodeKey {
    /// The node key of an event at `time` with origin-sequence word `seq` (see [`Node`]).
    #[inline(always)]
    fn new<const WIDE: bool>(time: u64, seq: u64) -> Self {
        if WIDE {
            NodeKey {
                key: (time << NARROW_SEQ_BITS) | (seq >> BUCKET_SHIFT),
                low: seq as u32 & ((1 << BUCKET_SHIFT) - 1),
            }
        } else {
            NodeKey {
                key: (time << NARROW_SEQ_BITS) | seq,
                low: 0,
            }
        }
    }
}

impl<E> Node<E> {
    /// The event's time, the node being in ring bucket `b` (absolute index).
    #[inline(always)]
    fn time_in(&self, b: u64) -> u64 {
        (b << BUCKET_SHIFT) | (self.key >> NARROW_SEQ_BITS)
    }

    /// The event's origin-sequence word.
    #[inline(always)]
    fn seq<const WIDE: bool>(&self) -> u64 {
        if WIDE {
            ((self.key & NARROW_SEQ) << BUCKET_SHIFT) | u64::from(self.low)
        } else {
            self.key & NARROW_SEQ
        }
    }

    /// Whether this event comes after the event of the same bucket with node key `k` (keys are
    /// unique).
    #[inline(always)]
    fn after<const WIDE: bool>(&self, k: NodeKey) -> bool {
        if WIDE {
            self.key > k.key || (self.key == k.key && self.low > k.low)
        } else {
            self.key > k.key
        }
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
    /// bounds checks; held in the queue itself (128 KiB), so an access loads no pointer first.
    buckets: [Bucket; RING as usize],
    /// Bit `b % RING` set iff ring bucket b is non-empty.
    occupied: [u64; WORDS],
    /// Ring events. Invariant: every index linked from `buckets` or from a linked node's `next`,
    /// and every index on the free list, is below `slab.len()` (the slab never shrinks); linked
    /// nodes hold an initialised event, free ones do not.
    slab: Vec<Node<E>>,
    /// Head of the free-slot list threaded through `Node::next` (NIL: none).
    free: u32,
    /// Events at or beyond bucket `cur + RING`.
    far: Heap<E>,
    /// Events the ring could not take cheaply (see the module documentation).
    spill: Heap<E>,
    /// Low key word of each origin's next event: origin << 40 | its next sequence number.
    seqs: Vec<u64>,
    /// `RING` while node keys are narrow, 0 once they are wide: the one comparison that sends
    /// an event to the ring then sends every event out of line, to the wide insertion.
    narrow_span: u64,
    now: SimTime,
    /// Events scheduled so far.
    scheduled: u64,
    popped: u64,
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
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue {
            cur: 0,
            buckets: [EMPTY; RING as usize],
            occupied: [0; WORDS],
            slab: Vec::new(),
            free: NIL,
            far: Heap::default(),
            spill: Heap::default(),
            seqs: Vec::new(),
            narrow_span: RING,
            now: SimTime::ZERO,
            scheduled: 0,
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
        if n > NARROW_ORIGINS && !self.wide() {
            self.widen();
        }
    }

    /// Whether node keys are wide (see [`Node`]).
    #[inline(always)]
    fn wide(&self) -> bool {
        self.narrow_span == 0
    }

    /// Switch the ring's node keys from narrow to wide (the order within each bucket stays as
    /// it is).
    #[cold]
    #[inline(never)]
    fn widen(&mut self) {
        for b in self.buckets.iter() {
            let mut i = b.head;
            while i != NIL {
                let node = &mut self.slab[i as usize];
                let k = NodeKey::new::<true>(node.key >> NARROW_SEQ_BITS, node.seq::<false>());
                node.key = k.key;
                node.low = k.low;
                i = node.next;
            }
        }
        self.narrow_span = 0;
    }

    /// The origin-sequence word of a ring node.
    #[inline(always)]
    fn seq_of(&self, node: &Node<E>) -> u64 {
        if self.wide() {
            node.seq::<true>()
        } else {
            node.seq::<false>()
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
        self.scheduled += 1;
        let time = at.0.max(self.now.0);
        let b = time >> BUCKET_SHIFT;
        // One comparison for the common case: a bucket before `cur` wraps to a large distance.
        // With wide keys `narrow_span` is 0 and every event goes out of line.
        if b.wrapping_sub(self.cur) < self.narrow_span {
            self.push_ring::<false>(b, time, seq, event);
        } else {
            self.push_heap(b, time, seq, event);
        }
    }

    /// An event outside the ring's window: before `cur` (spill) or beyond its horizon (far); or,
    /// with wide node keys, any event.
    #[inline(never)]
    fn push_heap(&mut self, b: u64, time: u64, seq: u64, event: E) {
        if b.wrapping_sub(self.cur) < RING {
            self.push_ring::<true>(b, time, seq, event);
            return;
        }
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
        let e = self.pop_below::<false>(0)?;
        Some((self.now, e))
    }

    /// [`EventQueue::pop`] without the time, which [`EventQueue::now`] then holds.
    #[inline]
    pub fn pop_event(&mut self) -> Option<E> {
        self.pop_below::<false>(0)
    }

    /// Remove and return the earliest event if its time is before `limit` (None when the queue
    /// is empty or its earliest event is at or after `limit`; `now` then stays where it is).
    #[inline]
    pub fn pop_before(&mut self, limit: SimTime) -> Option<(SimTime, E)> {
        let e = self.pop_below::<true>(limit.0)?;
        Some((self.now, e))
    }

    /// [`EventQueue::pop_before`] without the time, which [`EventQueue::now`] then holds: a
    /// driver's loop that reads the time from the queue keeps the event alone in registers.
    #[inline]
    pub fn pop_event_before(&mut self, limit: SimTime) -> Option<E> {
        self.pop_below::<true>(limit.0)
    }

    #[inline(always)]
    fn pop_below<const LIMITED: bool>(&mut self, limit: u64) -> Option<E> {
        let mut slot = (self.cur & MASK) as usize;
        let mut i = self.buckets[slot].head;
        if is_nil(i) {
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
        // The node is in bucket `cur`.
        let time = node.time_in(self.cur);
        // The spill heap's earliest time is u64::MAX when it is empty: one comparison unless a
        // spilled event is as early as the ring's.
        if self.spill.min_time <= time && self.spill.peek_key() < Some(key_of(time, self.seq_of(node))) {
            return self.pop_spill::<LIMITED>(limit);
        }
        if LIMITED && time >= limit {
            return None;
        }
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
        if is_nil(next) {
            bucket.tail = NIL;
            self.occupied[slot / 64] &= !(1 << (slot % 64));
        }
        Some(self.popped(SimTime(time), event))
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
    fn popped(&mut self, time: SimTime, event: E) -> E {
        self.now = time;
        self.popped += 1;
        event
    }

    #[inline(never)]
    fn pop_spill<const LIMITED: bool>(&mut self, limit: u64) -> Option<E> {
        if LIMITED && self.spill.min_time >= limit {
            return None;
        }
        let e = self.spill.pop()?;
        Some(self.popped(time_of(e.key), e.event))
    }

    /// Time of the earliest pending event.
    pub fn peek_time(&self) -> Option<SimTime> {
        let main = match self.next_occupied() {
            Some(slot) => {
                let b = self.cur + ((slot as u64).wrapping_sub(self.cur) & MASK);
                let node = self.node(self.buckets[slot].head);
                Some(key_of(node.time_in(b), self.seq_of(node)))
            }
            None => self.far.peek_key(),
        };
        let k = match (main, self.spill.peek_key()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(time_of(k))
    }

    /// Link a new event (`time`, origin-sequence `seq`) into ring bucket `b`, in key order; the
    /// event goes to `spill` if its place is too far from the bucket's ends. `WIDE`: the node
    /// keys are wide (see [`Node`]).
    ///
    /// Usually the new event goes last (later time, or an equal time and a larger key); else
    /// a short walk from the head finds its place.
    #[inline(always)]
    fn push_ring<const WIDE: bool>(&mut self, b: u64, time: u64, seq: u64, event: E) {
        let slot = (b & MASK) as usize;
        let k = NodeKey::new::<WIDE>(time, seq);
        let Bucket { head, tail } = self.buckets[slot];
        let i = self.alloc::<WIDE>(k, NIL, event);
        if is_nil(tail) {
            self.buckets[slot] = Bucket { head: i, tail: i };
            self.occupied[slot / 64] |= 1 << (slot % 64);
        } else if !self.node(tail).after::<WIDE>(k) {
            self.node_mut(tail).next = i;
            self.buckets[slot].tail = i;
        } else {
            self.insert_ordered::<WIDE>(b, head, i, k);
        }
    }

    /// Node `i` (key `k`) is earlier than the last of ring bucket `b`, which starts at `head`:
    /// link it after the last node that is not later, or move its event to `spill` if that is
    /// more than `MAX_WALK` nodes from the head. Out of line: inlined into every schedule of
    /// the network's event loop, it grew that loop's code enough to cost more in the rest of
    /// the loop than the call saves (docs/PERFORMANCE.md, eleventh pass).
    #[inline(never)]
    fn insert_ordered<const WIDE: bool>(&mut self, b: u64, head: u32, i: u32, k: NodeKey) {
        let mut after = NIL; // node to link after (NIL: at the head)
        let mut j = head;
        let mut steps = 0;
        // The tail is later, so the walk ends before it.
        while !self.node(j).after::<WIDE>(k) {
            steps += 1;
            if steps > MAX_WALK {
                self.spill_node::<WIDE>(b, i);
                return;
            }
            after = j;
            j = self.node(j).next;
        }
        self.node_mut(i).next = j;
        if is_nil(after) {
            self.buckets[(b & MASK) as usize].head = i;
        } else {
            self.node_mut(after).next = i;
        }
    }

    /// Move the event of unlinked node `i`, meant for ring bucket `b`, to `spill`, and free the
    /// node.
    #[cold]
    #[inline(never)]
    fn spill_node<const WIDE: bool>(&mut self, b: u64, i: u32) {
        let free = self.free;
        let node = self.node_mut(i);
        let key = key_of(node.time_in(b), node.seq::<WIDE>());
        // SAFETY: the node was just allocated with an initialised event; it goes back to the free
        // list below and its event is not read again until rewritten.
        let event = unsafe { node.event.assume_init_read() };
        node.next = free;
        self.free = i;
        self.spill.push(Entry { key, event });
    }

    /// A slab slot holding a new node (from the free list, else a new slot).
    #[inline(always)]
    fn alloc<const WIDE: bool>(&mut self, k: NodeKey, next: u32, event: E) -> u32 {
        let i = self.free;
        if !is_nil(i) {
            self.free = self.node(i).next;
            let node = self.node_mut(i);
            // Plain field writes: the slot's event is uninitialised, nothing is dropped.
            node.key = k.key;
            if WIDE {
                node.low = k.low;
            }
            node.next = next;
            node.event.write(event);
            i
        } else {
            self.grow(k, next, event)
        }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, k: NodeKey, next: u32, event: E) -> u32 {
        let i = u32::try_from(self.slab.len()).expect("fewer than 2^32 events in the ring");
        assert!(i < 1 << 31, "fewer than 2^31 events in the ring");
        self.slab.push(Node {
            key: k.key,
            low: k.low,
            next,
            event: MaybeUninit::new(event),
        });
        i
    }

    /// First non-empty ring slot at or after `cur` (circularly), if any.
    #[inline]
    fn next_occupied(&self) -> Option<usize> {
        if self.len() == self.far.h.len() + self.spill.h.len() {
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
            if self.wide() {
                self.push_ring::<true>(time >> BUCKET_SHIFT, time, e.key as u64, e.event);
            } else {
                self.push_ring::<false>(time >> BUCKET_SHIFT, time, e.key as u64, e.event);
            }
        }
        Some((self.cur & MASK) as usize)
    }

    pub fn len(&self) -> usize {
        (self.scheduled - self.popped) as usize
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
    fn node_keys_order_exactly_on_both_sides_of_the_wide_switch() {
        use std::collections::BTreeMap;
        // Events of a few buckets, times with equal and different low bits; origin-sequence words
        // that differ only in their low 7 bits, or only above them, near 2^17 origins and near a
        // counter's 2^40 limit.
        let mut q = EventQueue::new();
        let mut reference = BTreeMap::new();
        let mut id = 0usize;
        let mut schedule = |q: &mut EventQueue<usize>, o: u32, t: u64| {
            let seq = q.seqs.get(o as usize).map_or(0, |s| s & ((1 << SEQ_BITS) - 1));
            q.schedule_by(Origin(o), SimTime(t), id);
            reference.insert((t, o, seq), id);
            id += 1;
        };
        let times = [1_000, 1_024, 1_279, 1_000, 1_280, 1_535, 1_024, 1_000];
        q.reserve_origins(NARROW_ORIGINS);
        assert!(!q.wide());
        q.seqs[7] = 7 << SEQ_BITS | 0xfd;
        q.seqs[9] = 9 << SEQ_BITS | ((1 << SEQ_BITS) - 10);
        for (n, &t) in times.iter().enumerate() {
            for o in [NARROW_ORIGINS - 1, 9, 7, 0, 1] {
                schedule(&mut q, o, t + (n as u64 % 3));
            }
        }
        // The first origin of 2^17 turns the keys wide, with these events in the ring.
        schedule(&mut q, NARROW_ORIGINS, 1_000);
        assert!(q.wide());
        q.reserve_origins(NARROW_ORIGINS + 4);
        q.seqs[NARROW_ORIGINS as usize + 3] = u64::from(NARROW_ORIGINS + 3) << SEQ_BITS | 0xfe;
        for (n, &t) in times.iter().enumerate().rev() {
            for o in [200_000, 7, NARROW_ORIGINS + 3, NARROW_ORIGINS - 1, NARROW_ORIGINS, 0] {
                schedule(&mut q, o, t + (n as u64 % 2));
            }
        }
        assert_eq!(q.len(), reference.len());
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        let want: Vec<_> = reference.into_iter().map(|((t, _, _), i)| (SimTime(t), i)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_ring_node_is_24_bytes_for_an_8_byte_event() {
        assert_eq!(std::mem::size_of::<Node<u64>>(), 24);
        assert_eq!(std::mem::size_of::<Node<[u32; 2]>>(), 24);
    }

    #[test]
    fn times_beyond_32_bits_keep_their_order_and_value() {
        // Events around multiples of 2^32 ps: a node keeps the low 32 bits of its time, the
        // bucket the rest.
        for base in [1u64 << 32, 5 << 32, (1 << 40) + (1 << 32)] {
            let mut q = EventQueue::new();
            q.advance_to(SimTime(base - 3000));
            let times = [
                base + 5,
                base - 1,
                base,
                base + 256,
                base - 256,
                base + 5,
                base + 1000,
                base - 1,
            ];
            for (i, &t) in times.iter().enumerate() {
                q.schedule_by(Origin((i % 3) as u32), SimTime(t), i);
            }
            let mut want: Vec<(u64, u32, usize)> =
                times.iter().enumerate().map(|(i, &t)| (t, (i % 3) as u32, i)).collect();
            want.sort();
            assert_eq!(q.peek_time(), Some(SimTime(want[0].0)));
            for (t, _, i) in want {
                assert_eq!(q.pop(), Some((SimTime(t), i)));
            }
            assert!(q.is_empty());
        }
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
    fn popping_without_the_time_agrees_with_pop() {
        // Ring, far (beyond the ring's horizon) and spill (before the ring's start) events, on
        // two queues fed alike: one popped with the time, one without it.
        let horizon = RING << BUCKET_SHIFT;
        let feed = |q: &mut EventQueue<u32>| {
            q.schedule_by(Origin(3), SimTime(5_000), 1);
            q.schedule_by(Origin(1), SimTime(5_000), 2);
            q.schedule_by(Origin(2), SimTime(3 * horizon + 7), 3);
            q.schedule_by(Origin(0), SimTime(900), 4);
        };
        let (mut a, mut b) = (EventQueue::new(), EventQueue::new());
        feed(&mut a);
        feed(&mut b);
        assert_eq!(a.pop_before(SimTime(800)), None);
        assert_eq!(b.pop_event_before(SimTime(800)), None);
        assert_eq!(b.now(), SimTime::ZERO);
        // The ring has moved on to the bucket of 900 ps: an event at 10 ps is spilled.
        a.schedule_by(Origin(5), SimTime(10), 6);
        b.schedule_by(Origin(5), SimTime(10), 6);
        assert_eq!(a.pop_before(SimTime(2_000)), Some((SimTime(10), 6)));
        assert_eq!(b.pop_event_before(SimTime(2_000)), Some(6));
        assert_eq!(b.now(), SimTime(10));
        assert_eq!(a.pop_before(SimTime(2_000)), Some((SimTime(900), 4)));
        assert_eq!(b.pop_event_before(SimTime(2_000)), Some(4));
        assert_eq!(b.now(), SimTime(900));
        assert_eq!(a.pop_before(SimTime(6_000)), Some((SimTime(5_000), 2)));
        assert_eq!(b.pop_event_before(SimTime(6_000)), Some(2));
        a.schedule_by(Origin(9), SimTime(5_000), 5);
        b.schedule_by(Origin(9), SimTime(5_000), 5);
        let mut with_time = Vec::new();
        while let Some(e) = a.pop() {
            with_time.push(e);
        }
        let mut without = Vec::new();
        while let Some(e) = b.pop_event() {
            without.push((b.now(), e));
        }
        assert_eq!(
            with_time,
            [(SimTime(5_000), 1), (SimTime(5_000), 5), (SimTime(3 * horizon + 7), 3)]
        );
        assert_eq!(without, with_time);
        assert!(b.is_empty());
        assert_eq!(b.events_processed(), 6);
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
    /// Every pop, `pop_before`, `peek_time`, `len` and `now` must agree with it. An op's origin
    /// o schedules as origin o × `spread`.
    fn check_origins_against_btree(ops: &[Op], spread: u32) -> Result<(), TestCaseError> {
        use std::collections::BTreeMap;
        let mut q = EventQueue::new();
        let mut reference: BTreeMap<(u64, u32, u64), usize> = BTreeMap::new();
        let mut seqs = [0u64; 64];
        let mut id = 0usize;
        let mut schedule = |q: &mut EventQueue<usize>, r: &mut BTreeMap<_, _>, o: u32, at: u64| {
            q.schedule_by(Origin(o * spread), SimTime(at), id);
            r.insert((at, o * spread, seqs[o as usize]), id);
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
            check_origins_against_btree(&ops, 1)?;
        }

        /// As above with origins up to 156 000 (multiples of 4 000): node keys turn wide when
        /// the first origin of 2^17 or more schedules, amid events already in the ring.
        #[test]
        fn pops_in_time_origin_sequence_order_across_wide_keys(
            ops in proptest::collection::vec(op(), 1..300)) {
            check_origins_against_btree(&ops, 4_000)?;
        }
    }
}
