//! The hash-table packet buffer of an offload unit (spec 04, "Packet buffer: hash table +
//! bitmap").
//!
//! This module owns where arriving collective packets wait until the unit's sequence walker
//! reads them, and the bookkeeping that goes with it: slots, the validity bitmap, parked reads,
//! occupancy and collision statistics.
//!
//! **Geometry.** A buffer of `capacity` bytes (512 KB per unit in the paper's test bed) is cut
//! into `slots` equal slots of `capacity / slots` bytes; a slot holds one packet. The paper
//! gives only the capacity; the slot count is a model parameter.
//!
//! **Collision reserve.** 10 % of the slots, `reserve = ⌊slots / 10⌋` (at least 1), are the
//! collision reserve: the last `reserve` slots of the table are never a home slot. A key's
//! home slot is `mix(key) mod (slots − reserve)` (`mix` is a fixed 64-bit bit mixer), so homes
//! lie in the first 90 % of the table.
//!
//! **Probe sequence.** Linear: home, home + 1, … modulo `slots`, i.e. a collision probes on
//! through the following home slots, into the reserve and then wraps to slot 0. A packet is
//! stored in the first free slot of its sequence. Taking a packet out closes the gap by
//! backward shifting (the usual deletion for linear probing), so the table holds no tombstones
//! and a lookup stops at the first free slot.
//!
//! **Validity bitmap.** One bit per slot, set while the slot holds a packet; a read tests the
//! bits along the key's probe sequence.
//!
//! **Arrival** ([`HashBuf::insert`]): a key with a parked read is handed to that read at once
//! (the packet never occupies a slot); otherwise it is stored. A full buffer refuses the packet
//! and gives it back ([`Inserted::Refused`]): the caller must hold it and apply back-pressure
//! (credits). Nothing is ever dropped; a key already stored or already awaited twice is an
//! error, so nothing is duplicated.
//!
//! **Read** ([`HashBuf::read`]): present → the packet is taken out (bit cleared); absent → the
//! read is parked under its key and the caller goes on with independent reads; the later
//! arrival of that key wakes exactly that read.
//!
//! Cost: an insert, read or removal is O(probe length); statistics are O(1) per operation.
//! Parked reads are found by key in a hash map with a fixed hash (the same mixer), expected
//! O(1); it is never iterated, so its order plays no part in any result.

use super::key::PacketKey;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The hash of a parked read's key: [`mix`] of the key's 48 bits (fixed, not seeded: the
/// map's order is never observed, and its cost is the same in every run). The offload unit's
/// other maps by key or by (JobID, VP) that are never iterated use it too ([`FixedState`]).
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

/// Hash maps with [`KeyHasher`].
pub(crate) type FixedState = BuildHasherDefault<KeyHasher>;

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = mix(self.0 ^ x);
    }
    fn write_u32(&mut self, x: u32) {
        self.0 = mix(self.0 ^ u64::from(x));
    }
}

type Parked<R> = HashMap<PacketKey, R, FixedState>;

/// Size of the buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HashBufConfig {
    /// Bytes of buffer RAM (the paper: 512 KB per unit).
    pub capacity: u64,
    /// Number of slots (one packet each).
    pub slots: u32,
}

impl Default for HashBufConfig {
    /// 512 KiB in 512 slots of 1 KiB.
    fn default() -> Self {
        HashBufConfig {
            capacity: 512 * 1024,
            slots: 512,
        }
    }
}

/// A buffer configuration that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HashBufConfigError {
    #[error("hash buffer: slots = {0}, need at least 2 (one home slot and one reserve slot)")]
    TooFewSlots(u32),
    #[error("hash buffer: capacity = {capacity} bytes is less than one byte per slot ({slots} slots)")]
    TooSmall { capacity: u64, slots: u32 },
}

/// What became of an arriving packet.
#[derive(Debug, PartialEq)]
pub enum Inserted<P, R> {
    /// Stored after `probes` slot inspections (1 = its home slot).
    Stored { probes: u32 },
    /// A read of this key was parked: the packet goes straight to that reader.
    Woke { reader: R, packet: P },
    /// The buffer is full: the packet is given back; nothing was stored.
    Refused(P),
}

/// What a read got.
#[derive(Debug, PartialEq)]
pub enum Read<P> {
    /// The packet was present and is now taken out.
    Taken(P),
    /// Not present: the read waits for the key's arrival.
    Parked,
}

/// An operation the buffer refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HashBufError {
    #[error("{key:?}: packet of {bytes} bytes does not fit a buffer slot of {slot_bytes} bytes")]
    TooLarge {
        key: PacketKey,
        bytes: u64,
        slot_bytes: u64,
    },
    #[error("{0:?}: a packet with this key is already buffered")]
    DuplicateKey(PacketKey),
    #[error("{0:?}: a read of this key is already parked")]
    DuplicateRead(PacketKey),
}

/// Occupancy and collision statistics.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct HashBufStats {
    /// Packets stored in slots.
    pub stored: u64,
    /// Packets handed straight to a parked read.
    pub woke: u64,
    /// Arrivals refused because the buffer was full.
    pub refused: u64,
    /// Reads that found their packet.
    pub taken: u64,
    /// Reads parked.
    pub parked: u64,
    /// Packets and parked reads dropped by [`HashBuf::cancel`] (their sequence failed).
    pub discarded: u64,
    pub cancelled_reads: u64,
    /// Slots in use now and at most.
    pub occupancy: u32,
    pub peak_occupancy: u32,
    /// Bytes held now and at most.
    pub bytes: u64,
    pub peak_bytes: u64,
    /// Stored packets that did not get their home slot.
    pub collisions: u64,
    /// Slot inspections over all stores (≥ `stored`).
    pub probes: u64,
    /// Longest probe sequence of a store.
    pub max_probe: u32,
    /// Packets in the collision reserve now and at most.
    pub in_reserve: u32,
    pub peak_in_reserve: u32,
}

/// A slot in use: the key stored there and where its packet is held.
#[derive(Copy, Clone, Debug)]
struct Slot {
    key: PacketKey,
    entry: u32,
}

#[derive(Debug)]
struct Entry<P> {
    bytes: u64,
    packet: P,
}

/// The hash-table packet buffer; `P` is the packet, `R` identifies a parked reader.
///
/// The table holds each used slot's key and the place of its packet among `entries`, which
/// reuses the places of taken packets: a probe reads 16 bytes per slot, and the packets of a
/// sparsely used table stay in a few places rather than spread over every slot.
#[derive(Debug)]
pub struct HashBuf<P, R> {
    slots: Vec<Option<Slot>>,
    entries: Vec<Option<Entry<P>>>,
    free: Vec<u32>,
    valid: Vec<u64>,
    home_slots: u32,
    slot_bytes: u64,
    parked: Parked<R>,
    stats: HashBufStats,
}

/// A fixed 64-bit mixer (the finaliser of SplitMix64).
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl<P, R> HashBuf<P, R> {
    pub fn new(cfg: HashBufConfig) -> Result<Self, HashBufConfigError> {
        if cfg.slots < 2 {
            return Err(HashBufConfigError::TooFewSlots(cfg.slots));
        }
        if cfg.capacity < u64::from(cfg.slots) {
            return Err(HashBufConfigError::TooSmall {
                capacity: cfg.capacity,
                slots: cfg.slots,
            });
        }
        let reserve = (cfg.slots / 10).max(1);
        let n = cfg.slots as usize;
        Ok(HashBuf {
            slots: vec![None; n],
            entries: Vec::new(),
            free: Vec::new(),
            valid: vec![0; n.div_ceil(64)],
            home_slots: cfg.slots - reserve,
            slot_bytes: cfg.capacity / u64::from(cfg.slots),
            parked: Parked::default(),
            stats: HashBufStats::default(),
        })
    }

    /// Slots in the table.
    pub fn slots(&self) -> u32 {
        self.slots.len() as u32
    }
    /// Slots that can be a home slot (the first 90 %).
    pub fn home_slots(&self) -> u32 {
        self.home_slots
    }
    /// Bytes one slot holds.
    pub fn slot_bytes(&self) -> u64 {
        self.slot_bytes
    }
    pub fn stats(&self) -> HashBufStats {
        self.stats
    }
    /// Packets buffered.
    pub fn len(&self) -> usize {
        self.stats.occupancy as usize
    }
    pub fn is_empty(&self) -> bool {
        self.stats.occupancy == 0
    }
    pub fn is_full(&self) -> bool {
        self.stats.occupancy as usize == self.slots.len()
    }
    /// Reads waiting for their key.
    pub fn parked_reads(&self) -> usize {
        self.parked.len()
    }
    /// Is a read parked for this key (its packet will go straight to the reader)?
    pub fn awaits(&self, key: PacketKey) -> bool {
        self.parked.contains_key(&key)
    }
    /// Is a packet with this key buffered?
    pub fn contains(&self, key: PacketKey) -> bool {
        self.find(key).is_some()
    }

    /// The home slot of a key.
    pub fn home(&self, key: PacketKey) -> u32 {
        (mix(key.raw()) % u64::from(self.home_slots)) as u32
    }

    fn is_valid(&self, i: usize) -> bool {
        self.valid[i / 64] >> (i % 64) & 1 == 1
    }
    fn set_valid(&mut self, i: usize, on: bool) {
        if on {
            self.valid[i / 64] |= 1 << (i % 64);
        } else {
            self.valid[i / 64] &= !(1 << (i % 64));
        }
    }
    fn in_reserve(&self, i: usize) -> bool {
        i >= self.home_slots as usize
    }

    fn find(&self, key: PacketKey) -> Option<usize> {
        let n = self.slots.len();
        let mut i = self.home(key) as usize;
        for _ in 0..n {
            if !self.is_valid(i) {
                return None;
            }
            if self.slots[i].as_ref().is_some_and(|e| e.key == key) {
                return Some(i);
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        None
    }

    /// A packet of `bytes` bytes with key `key` arrives.
    pub fn insert(&mut self, key: PacketKey, bytes: u64, packet: P) -> Result<Inserted<P, R>, HashBufError> {
        if bytes > self.slot_bytes {
            return Err(HashBufError::TooLarge {
                key,
                bytes,
                slot_bytes: self.slot_bytes,
            });
        }
        if let Some(reader) = self.parked.remove(&key) {
            self.stats.woke += 1;
            return Ok(Inserted::Woke { reader, packet });
        }
        if self.find(key).is_some() {
            return Err(HashBufError::DuplicateKey(key));
        }
        if self.is_full() {
            self.stats.refused += 1;
            return Ok(Inserted::Refused(packet));
        }
        let n = self.slots.len();
        let (mut i, mut d) = (self.home(key) as usize, 0);
        while self.is_valid(i) {
            d += 1;
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        let e = Entry { bytes, packet };
        let entry = match self.free.pop() {
            Some(k) => {
                self.entries[k as usize] = Some(e);
                k
            }
            None => {
                self.entries.push(Some(e));
                (self.entries.len() - 1) as u32
            }
        };
        self.slots[i] = Some(Slot { key, entry });
        self.set_valid(i, true);
        let probes = d as u32 + 1;
        let s = &mut self.stats;
        s.stored += 1;
        s.probes += u64::from(probes);
        s.max_probe = s.max_probe.max(probes);
        if d > 0 {
            s.collisions += 1;
        }
        s.occupancy += 1;
        s.peak_occupancy = s.peak_occupancy.max(s.occupancy);
        s.bytes += bytes;
        s.peak_bytes = s.peak_bytes.max(s.bytes);
        if i >= self.home_slots as usize {
            s.in_reserve += 1;
            s.peak_in_reserve = s.peak_in_reserve.max(s.in_reserve);
        }
        Ok(Inserted::Stored { probes })
    }

    /// Read the packet of `key` for `reader`: take it if present, else park the read.
    pub fn read(&mut self, key: PacketKey, reader: R) -> Result<Read<P>, HashBufError> {
        if self.parked.contains_key(&key) {
            return Err(HashBufError::DuplicateRead(key));
        }
        match self.find(key) {
            Some(i) => {
                self.stats.taken += 1;
                Ok(Read::Taken(self.remove_at(i)))
            }
            None => {
                self.parked.insert(key, reader);
                self.stats.parked += 1;
                Ok(Read::Parked)
            }
        }
    }

    /// Drop what the buffer holds for `key`: its parked read, or its stored packet (its
    /// sequence ended without reading it). Returns the packet if one was stored.
    pub fn cancel(&mut self, key: PacketKey) -> Option<P> {
        if self.parked.remove(&key).is_some() {
            self.stats.cancelled_reads += 1;
            return None;
        }
        let i = self.find(key)?;
        self.stats.discarded += 1;
        Some(self.remove_at(i))
    }

    /// Take the entry at slot `pos` out and close the gap by backward shifting.
    fn remove_at(&mut self, pos: usize) -> P {
        let n = self.slots.len();
        let slot = self.slots[pos].take().expect("valid slot holds an entry");
        let e = self.entries[slot.entry as usize]
            .take()
            .expect("a used slot's packet is held");
        self.free.push(slot.entry);
        self.stats.occupancy -= 1;
        self.stats.bytes -= e.bytes;
        if self.in_reserve(pos) {
            self.stats.in_reserve -= 1;
        }
        let dist = |a: usize, b: usize| (b + n - a) % n;
        let mut hole = pos;
        let mut j = (pos + 1) % n;
        for _ in 1..n {
            if !self.is_valid(j) {
                break;
            }
            let h = self.home(self.slots[j].as_ref().expect("valid slot holds an entry").key) as usize;
            // The entry at j may fill the hole if the hole lies on its probe path before j.
            if dist(h, hole) < dist(h, j) {
                let moved = self.slots[j].take();
                if self.in_reserve(j) {
                    self.stats.in_reserve -= 1;
                }
                if self.in_reserve(hole) {
                    self.stats.in_reserve += 1;
                }
                self.slots[hole] = moved;
                hole = j;
            }
            j = (j + 1) % n;
        }
        self.set_valid(hole, false);
        e.packet
    }

    /// Check the buffer's internal invariants (bitmap = occupied slots, every entry reachable
    /// from its home along the probe sequence without a gap, counters equal a recount).
    pub fn audit(&self) -> Result<(), String> {
        let n = self.slots.len();
        let mut occ = 0;
        let mut bytes = 0;
        let mut res = 0;
        for i in 0..n {
            if self.is_valid(i) != self.slots[i].is_some() {
                return Err(format!("slot {i}: validity bit disagrees with the slot"));
            }
            if let Some(e) = &self.slots[i] {
                occ += 1;
                bytes += self.entries[e.entry as usize]
                    .as_ref()
                    .ok_or_else(|| format!("slot {i}: its packet is not held"))?
                    .bytes;
                if self.in_reserve(i) {
                    res += 1;
                }
                if self.find(e.key) != Some(i) {
                    return Err(format!("slot {i}: {:?} not found from its home", e.key));
                }
            }
        }
        let held = self.entries.iter().flatten().count();
        if held != occ as usize || held + self.free.len() != self.entries.len() {
            return Err(format!(
                "{held} packets held for {occ} used slots, {} free places of {}",
                self.free.len(),
                self.entries.len()
            ));
        }
        let s = &self.stats;
        if (occ, bytes, res) != (s.occupancy, s.bytes, s.in_reserve) {
            return Err(format!(
                "recount (slots {occ}, bytes {bytes}, reserve {res}) differs from statistics \
                 (slots {}, bytes {}, reserve {})",
                s.occupancy, s.bytes, s.in_reserve
            ));
        }
        if s.stored != s.taken + s.discarded + u64::from(s.occupancy) {
            return Err("stored packets are neither taken, discarded nor buffered".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(i: u32) -> PacketKey {
        PacketKey::new(i % 7, i * 13 % 5000, i % 2048, i % 32).unwrap()
    }

    fn small(slots: u32) -> HashBuf<u32, u32> {
        HashBuf::new(HashBufConfig {
            capacity: u64::from(slots) * 64,
            slots,
        })
        .unwrap()
    }

    #[test]
    fn geometry_reserves_ten_percent_for_collisions() {
        let b: HashBuf<u32, u32> = HashBuf::new(HashBufConfig::default()).unwrap();
        assert_eq!((b.slots(), b.home_slots(), b.slot_bytes()), (512, 461, 1024));
        for i in 0..10_000 {
            assert!(b.home(key(i)) < 461);
        }
        let b = small(10);
        assert_eq!(b.home_slots(), 9);
        assert_eq!(
            HashBuf::<u32, u32>::new(HashBufConfig {
                capacity: 100,
                slots: 1
            })
            .unwrap_err(),
            HashBufConfigError::TooFewSlots(1)
        );
        assert!(HashBuf::<u32, u32>::new(HashBufConfig { capacity: 3, slots: 4 }).is_err());
    }

    #[test]
    fn read_takes_a_present_packet_once() {
        let mut b = small(16);
        assert_eq!(b.insert(key(1), 10, 100).unwrap(), Inserted::Stored { probes: 1 });
        assert!(b.contains(key(1)));
        assert_eq!(b.read(key(1), 0).unwrap(), Read::Taken(100));
        assert!(!b.contains(key(1)));
        assert_eq!(b.read(key(1), 0).unwrap(), Read::Parked);
        let s = b.stats();
        assert_eq!(
            (s.stored, s.taken, s.parked, s.occupancy, s.peak_occupancy),
            (1, 1, 1, 0, 1)
        );
        assert_eq!((s.bytes, s.peak_bytes), (0, 10));
        b.audit().unwrap();
    }

    #[test]
    fn cancel_drops_a_stored_packet_or_a_parked_read() {
        let mut b = small(4);
        // Colliding keys: dropping one must keep the others reachable.
        for i in 0..3 {
            assert!(matches!(b.insert(key(i), 8, i).unwrap(), Inserted::Stored { .. }));
        }
        assert_eq!(b.read(key(9), 90).unwrap(), Read::Parked);
        assert_eq!(b.cancel(key(1)), Some(1));
        assert_eq!(b.cancel(key(1)), None);
        assert_eq!(b.cancel(key(9)), None);
        assert!(!b.awaits(key(9)));
        // The cancelled read no longer takes its key: the packet is stored.
        assert!(matches!(b.insert(key(9), 8, 9).unwrap(), Inserted::Stored { .. }));
        assert_eq!(b.read(key(0), 0).unwrap(), Read::Taken(0));
        assert_eq!(b.read(key(2), 0).unwrap(), Read::Taken(2));
        let s = b.stats();
        assert_eq!((s.discarded, s.cancelled_reads, s.occupancy), (1, 1, 1));
        b.audit().unwrap();
    }

    #[test]
    fn a_parked_read_is_woken_by_its_key_only() {
        let mut b = small(16);
        assert_eq!(b.read(key(5), 55).unwrap(), Read::Parked);
        assert_eq!(b.read(key(6), 66).unwrap(), Read::Parked);
        assert_eq!(b.read(key(6), 67), Err(HashBufError::DuplicateRead(key(6))));
        // An independent packet is stored; it does not wake anything.
        assert_eq!(b.insert(key(7), 1, 7).unwrap(), Inserted::Stored { probes: 1 });
        assert_eq!(
            b.insert(key(6), 1, 6).unwrap(),
            Inserted::Woke { reader: 66, packet: 6 }
        );
        assert_eq!(b.parked_reads(), 1);
        assert_eq!(
            b.insert(key(5), 1, 5).unwrap(),
            Inserted::Woke { reader: 55, packet: 5 }
        );
        assert_eq!(b.parked_reads(), 0);
        assert_eq!(b.len(), 1);
        b.audit().unwrap();
    }

    #[test]
    fn duplicates_and_oversized_packets_are_errors() {
        let mut b = small(16);
        b.insert(key(1), 64, 1).unwrap();
        assert_eq!(b.insert(key(1), 1, 2), Err(HashBufError::DuplicateKey(key(1))));
        let e = b.insert(key(2), 65, 2).unwrap_err();
        assert_eq!(
            e,
            HashBufError::TooLarge {
                key: key(2),
                bytes: 65,
                slot_bytes: 64
            }
        );
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn a_full_buffer_refuses_and_accepts_after_a_read() {
        let mut b = small(10);
        for i in 0..10 {
            assert!(matches!(b.insert(key(i), 8, i).unwrap(), Inserted::Stored { .. }));
        }
        assert!(b.is_full());
        // Every slot is used, so the reserve slot holds a packet.
        assert_eq!(b.stats().in_reserve, 1);
        assert_eq!(b.insert(key(10), 8, 10).unwrap(), Inserted::Refused(10));
        assert_eq!(b.stats().refused, 1);
        assert!(!b.contains(key(10)));
        // A parked read's key still passes a full buffer: it goes straight to the reader.
        assert_eq!(b.read(key(11), 1).unwrap(), Read::Parked);
        assert_eq!(
            b.insert(key(11), 8, 11).unwrap(),
            Inserted::Woke { reader: 1, packet: 11 }
        );
        assert_eq!(b.read(key(3), 0).unwrap(), Read::Taken(3));
        assert!(matches!(b.insert(key(10), 8, 10).unwrap(), Inserted::Stored { .. }));
        for i in (0..11).filter(|&i| i != 3) {
            assert_eq!(b.read(key(i), 0).unwrap(), Read::Taken(i));
            b.audit().unwrap();
        }
        let s = b.stats();
        assert_eq!((s.occupancy, s.bytes, s.in_reserve, s.peak_occupancy), (0, 0, 0, 10));
        assert!(s.collisions > 0 && s.max_probe > 1);
        assert!(s.probes >= s.stored + s.collisions);
    }

    #[derive(Debug, Clone)]
    enum Step {
        Arrive,
        Read,
    }

    proptest! {
        /// Random arrival orders, read orders and interleavings of a set of keys through a
        /// buffer smaller than the set: every packet reaches its read exactly once, refused
        /// arrivals are retried (back-pressure), and the statistics add up.
        #[test]
        fn every_packet_is_delivered_exactly_once(
            raw in proptest::collection::btree_set(0u64..(1 << 48), 1..120),
            slots in 2u32..40,
            arrival_seed in any::<u64>(),
            read_seed in any::<u64>(),
            steps in proptest::collection::vec(prop_oneof![Just(Step::Arrive), Just(Step::Read)], 0..400),
        ) {
            let keys: Vec<PacketKey> = raw.iter().map(|&r| PacketKey::from_raw(r).unwrap()).collect();
            let n = keys.len();
            let shuffle = |seed: u64| {
                let mut v: Vec<usize> = (0..n).collect();
                let mut s = seed | 1;
                for i in (1..n).rev() {
                    s = mix(s);
                    v.swap(i, (s % (i as u64 + 1)) as usize);
                }
                v
            };
            let arrivals = shuffle(arrival_seed);
            let reads = shuffle(read_seed);
            let mut b: HashBuf<(PacketKey, usize), usize> =
                HashBuf::new(HashBufConfig { capacity: u64::from(slots) * 32, slots }).unwrap();
            let (mut ai, mut ri) = (0, 0);
            let mut got: Vec<u32> = vec![0; n];
            let deliver = |reader: usize, (k, idx): (PacketKey, usize), got: &mut Vec<u32>| {
                assert_eq!(reader, idx, "packet reached another key's read");
                assert_eq!(k, keys[idx]);
                got[idx] += 1;
            };
            let mut script = steps.into_iter();
            while ai < n || ri < n {
                let want_arrive = match script.next() {
                    Some(Step::Arrive) => true,
                    Some(Step::Read) => false,
                    None => ai < n,
                };
                let mut arrived = false;
                if (want_arrive || ri == n) && ai < n {
                    let idx = arrivals[ai];
                    let size = 1 + idx as u64 % 32;
                    match b.insert(keys[idx], size, (keys[idx], idx)).unwrap() {
                        Inserted::Stored { probes } => { prop_assert!(probes >= 1); ai += 1; arrived = true; }
                        Inserted::Woke { reader, packet } => { deliver(reader, packet, &mut got); ai += 1; arrived = true; }
                        // Back-pressure: the packet stays at the head of the arrivals.
                        Inserted::Refused(p) => { prop_assert!(b.is_full()); prop_assert_eq!(p.1, idx); }
                    }
                }
                if !arrived && ri < n {
                    let idx = reads[ri];
                    if let Read::Taken(p) = b.read(keys[idx], idx).unwrap() {
                        deliver(idx, p, &mut got);
                    }
                    ri += 1;
                }
                b.audit().map_err(TestCaseError::fail)?;
            }
            prop_assert!(got.iter().all(|&g| g == 1), "deliveries {:?}", got);
            let s = b.stats();
            prop_assert_eq!(s.stored + s.woke, n as u64);
            prop_assert_eq!(s.taken + s.woke, n as u64);
            prop_assert_eq!(s.parked, s.woke);
            prop_assert_eq!((s.occupancy, s.bytes, s.in_reserve), (0, 0, 0));
            prop_assert!(s.peak_occupancy <= slots);
            prop_assert!(s.probes >= s.stored + s.collisions);
            prop_assert!(u64::from(s.max_probe) <= u64::from(slots));
            prop_assert_eq!(b.parked_reads(), 0);
        }
    }
}
