//! Host memory of one node: registered regions with real bytes and protection keys.
//!
//! Addresses are per node. [`Memory::register`] allocates a region at the next free address
//! (page aligned: 4 KiB, like a registered buffer) and returns it with its key; the NIC checks, for every remote access, that
//! the whole range lies inside one region and that the packet's key matches (Sunway memory
//! keys, cHPP QP Magic). A failed check writes nothing.
//!
//! A region's bytes are normally owned by the model (zeroed at registration). A region of
//! [`MAPPED_MIN`] bytes or more lives in anonymous memory mapped for it, which the operating
//! system zeroes a page at a time when the page is first touched: a machine of thousands of
//! ranks registers gigabytes of receive and staging buffers of which a run writes few, and the
//! simulator holds only the pages written (reads of the others see zeros, as the registration
//! promises; the registered sizes, and so the allocators and the memory accounting, are
//! unchanged), and gives them back when the region goes. A region may
//! instead live in memory outside the model ([`Memory::register_external`]): the bytes of a
//! real process mapped into the simulator, so that what the NIC writes *is* that process's
//! memory (the C interface of the SHMEM library runs programs this way).
//!
//! A region may also be **sparse** ([`Memory::register_sparse`]): its addresses, length and
//! key are those of an ordinary region, but only the first `keep` bytes of every `stride`-byte
//! slot have a backing store; the other bytes read as zero and writes to them are dropped.
//! Programs that do not look at their data (communication skeletons) use it so that the
//! simulator holds no payload: with `keep = 0` a region is payload-free, and a message
//! library's buffers keep only their headers. What a program registers is unchanged (an
//! allocator counts the same bytes); only the simulator's copy of them is elided. A sparse
//! region's slots are stored only once written, and [`Memory::discard`] gives a slot's store
//! back (it reads as zero again), so a region of many interchangeable buffers (a shared
//! receive queue's) holds stores only for the buffers that hold a message.

use hpcnet_des::hash::IdMap;
use serde::Serialize;
use std::borrow::Cow;
use std::cell::Cell;

/// Bytes outside the model that a region lives in (for example a shared mapping of another
/// process's memory). The length never changes.
pub trait ExternalBytes {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
}

enum Bytes {
    Owned(Vec<u8>),
    /// A region of at least [`MAPPED_MIN`] bytes in anonymous memory mapped for it.
    Mapped(memmap2::MmapMut),
    External(Box<dyn ExternalBytes>),
    /// `len` bytes of which the first `keep` of every `stride`-byte slot are stored in `kept`
    /// once written; the rest, and unwritten or discarded slots, read as zero.
    Sparse {
        len: u64,
        stride: u64,
        keep: u64,
        /// Boxed, so that a region of any kind stays within one cache line or two.
        kept: Box<Kept>,
    },
}

/// The stores of a sparse region's written slots: `keep` bytes each in a pool, reused after
/// [`Memory::discard`]. Memory: O(slots written and not discarded), not O(slots).
#[derive(Default)]
struct Kept {
    /// Slot number → index of its store in `pool` (units of `keep` bytes).
    at: IdMap<u64, u32>,
    pool: Vec<u8>,
    free: Vec<u32>,
}

impl Kept {
    /// The stored bytes of slot `s`, if it was written.
    fn get(&self, s: u64, keep: u64) -> Option<&[u8]> {
        let i = *self.at.get(&s)? as usize * keep as usize;
        Some(&self.pool[i..i + keep as usize])
    }

    /// The store of slot `s`, zeroed when the slot is new.
    fn get_mut(&mut self, s: u64, keep: u64) -> &mut [u8] {
        let k = keep as usize;
        let idx = match self.at.get(&s) {
            Some(&i) => i,
            None => {
                let i = match self.free.pop() {
                    Some(i) => {
                        self.pool[i as usize * k..(i as usize + 1) * k].fill(0);
                        i
                    }
                    None => {
                        self.pool.resize(self.pool.len() + k, 0);
                        (self.pool.len() / k - 1) as u32
                    }
                };
                self.at.insert(s, i);
                i
            }
        } as usize;
        &mut self.pool[idx * k..(idx + 1) * k]
    }

    /// Forget slot `s`'s store (it reads as zero again).
    fn discard(&mut self, s: u64) {
        if let Some(i) = self.at.remove(&s) {
            self.free.push(i);
        }
    }
}

/// Regions from this size on are mapped for themselves ([`Bytes::Mapped`]); smaller ones
/// share the allocator's heap. 64 KiB keeps the number of mappings far below the operating
/// system's limit (65 530 by default on Linux) for the largest jobs simulated here, while the
/// buffers whose bytes are mostly never written (receive and staging rings) are larger.
pub const MAPPED_MIN: u64 = 64 << 10;

impl Bytes {
    /// `len` zeroed bytes owned by the model: mapped from [`MAPPED_MIN`] bytes on (on the
    /// heap if the mapping is refused), else on the heap.
    fn zeroed(len: u64) -> Bytes {
        if len >= MAPPED_MIN {
            if let Ok(m) = memmap2::MmapMut::map_anon(len as usize) {
                return Bytes::Mapped(m);
            }
        }
        Bytes::Owned(vec![0; len as usize])
    }

    fn len(&self) -> u64 {
        match self {
            Bytes::Owned(v) => v.len() as u64,
            Bytes::Mapped(m) => m.len() as u64,
            Bytes::External(e) => e.bytes().len() as u64,
            Bytes::Sparse { len, .. } => *len,
        }
    }
    /// The bytes when every byte is stored.
    fn dense(&self) -> Option<&[u8]> {
        match self {
            Bytes::Owned(v) => Some(v),
            Bytes::Mapped(m) => Some(m),
            Bytes::External(e) => Some(e.bytes()),
            Bytes::Sparse { .. } => None,
        }
    }
    /// Copy `out.len()` bytes at offset `off` (in range) into `out`; unstored bytes as zero.
    fn read_into(&self, off: u64, out: &mut [u8]) {
        match self {
            Bytes::Sparse { stride, keep, kept, .. } => {
                out.fill(0);
                sparse_into(*stride, *keep, kept, off, out);
            }
            d => {
                let b = d.dense().expect("dense");
                out.copy_from_slice(&b[off as usize..off as usize + out.len()]);
            }
        }
    }
    fn dense_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            Bytes::Owned(v) => Some(v),
            Bytes::Mapped(m) => Some(m),
            Bytes::External(e) => Some(e.bytes_mut()),
            Bytes::Sparse { .. } => None,
        }
    }
}

/// The stored parts of `[off, off + n)` of a sparse region: (offset in the range, slot, offset
/// in the slot, length), in address order. Cost: O(slots the range crosses).
fn stored_parts(stride: u64, keep: u64, off: u64, n: u64) -> impl Iterator<Item = (u64, u64, u64, u64)> {
    let end = off + n;
    let first = off / stride;
    let last = if keep == 0 || n == 0 {
        first
    } else {
        end.div_ceil(stride)
    };
    (first..last).filter_map(move |s| {
        let lo = (s * stride).max(off);
        let hi = (s * stride + keep).min(end);
        (lo < hi).then(|| (lo - off, s, lo - s * stride, hi - lo))
    })
}

/// Copy the stored parts of `[off, off + out.len())` of a sparse region into `out`, which holds
/// zeros: the unstored bytes stay zero.
fn sparse_into(stride: u64, keep: u64, kept: &Kept, off: u64, out: &mut [u8]) {
    for (o, s, k, n) in stored_parts(stride, keep, off, out.len() as u64) {
        if let Some(b) = kept.get(s, keep) {
            out[o as usize..(o + n) as usize].copy_from_slice(&b[k as usize..(k + n) as usize]);
        }
    }
}

/// A registered memory region. Its further keys ([`Memory::add_key`], usually none) are held
/// by the memory, so that a region is address, key and bytes (a few words: mostly one cache
/// line, which the look-ups and copies of a message read).
pub struct Region {
    pub addr: u64,
    pub key: u32,
    data: Bytes,
}

impl Region {
    /// The region's length in bytes.
    pub fn len(&self) -> u64 {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether every byte has a backing store (false for a sparse region).
    pub fn is_dense(&self) -> bool {
        self.data.dense().is_some()
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("addr", &self.addr)
            .field("key", &self.key)
            .field("len", &self.len())
            .field("external", &matches!(self.data, Bytes::External(_)))
            .field("sparse", &!self.is_dense())
            .finish()
    }
}

/// Why an access was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
pub enum MemoryError {
    #[error("address range {addr:#x}+{len} is not inside a registered region")]
    OutOfRange { addr: u64, len: u64 },
    #[error("key {given:#x} does not match the region's key")]
    BadKey { given: u32 },
}

/// Regions a memory remembers from its last look-ups ([`Memory::find`]).
const WAYS: usize = 4;

/// A region found by a look-up: its address, length, index and key (index `u32::MAX`: an
/// empty entry).
#[derive(Clone, Copy, Debug)]
struct Way {
    addr: u64,
    len: u64,
    index: u32,
    key: u32,
}

const NO_WAY: Way = Way {
    addr: 0,
    len: 0,
    index: u32::MAX,
    key: 0,
};

/// All regions of one node.
#[derive(Debug)]
#[repr(C)]
pub struct Memory {
    /// The regions the last look-ups found, replaced in turn (`victim`: the next to go), held
    /// first in the memory itself so that a hit reads nothing of the regions or of their
    /// start addresses: the accesses of one message fall into a few regions of each memory
    /// (a sender's staging slots and credit word, a receiver's landing slots and credits),
    /// and a memory touched by a message is mostly one nothing else touched since.
    ways: [Cell<Way>; WAYS],
    victim: Cell<u8>,
    regions: Vec<Region>,
    /// Start address of every region, in order (the binary search's keys: eight to a cache
    /// line, where the regions themselves are wide).
    starts: Vec<u64>,
    /// Further keys of regions: (region index, key), in the order they were made.
    more_keys: Vec<(u32, u32)>,
    next_addr: u64,
    next_key: u32,
}

impl Default for Memory {
    fn default() -> Self {
        Memory {
            ways: [const { Cell::new(NO_WAY) }; WAYS],
            victim: Cell::new(0),
            regions: Vec::new(),
            starts: Vec::new(),
            more_keys: Vec::new(),
            next_addr: 0,
            next_key: 0,
        }
    }
}

const BASE: u64 = 0x1000_0000;
/// Region alignment.
pub const PAGE: u64 = 4096;

impl Memory {
    pub fn new(node: u32) -> Self {
        // Keys differ between nodes so a key from one node is wrong on another.
        Memory {
            next_addr: BASE,
            next_key: 0x100 + node.wrapping_mul(0x1_0000),
            ..Memory::default()
        }
    }

    /// Register `len` zeroed bytes; returns (address, key). From [`MAPPED_MIN`] bytes on the
    /// simulator holds only the pages written (see the module documentation).
    pub fn register(&mut self, len: u64) -> (u64, u32) {
        self.push(Bytes::zeroed(len))
    }

    /// Register a region whose bytes live outside the model (they keep their contents);
    /// returns (address, key).
    pub fn register_external(&mut self, bytes: Box<dyn ExternalBytes>) -> (u64, u32) {
        self.push(Bytes::External(bytes))
    }

    /// Register a sparse region of `len` bytes: only the first `keep` bytes of every
    /// `stride`-byte slot are stored (the rest reads as zero; writes to it are dropped). The
    /// simulator holds `keep` bytes (and a map entry) per slot written and not discarded
    /// ([`Memory::discard`]); `keep = 0` holds none.
    pub fn register_sparse(&mut self, len: u64, stride: u64, keep: u64) -> (u64, u32) {
        let stride = stride.max(1);
        let keep = keep.min(stride);
        self.push(Bytes::Sparse {
            len,
            stride,
            keep,
            kept: Box::default(),
        })
    }

    /// The bytes of `[addr, addr + len)` are no longer needed (e.g. a receive buffer handed
    /// back to the NIC): a sparse region gives back the stores of the slots wholly inside the
    /// range, which read as zero again; a dense region keeps its bytes. Out of range: an error.
    /// Cost: O(slots in the range).
    pub fn discard(&mut self, addr: u64, len: u64) -> Result<(), MemoryError> {
        let (r, _) = self.find(addr, len)?;
        let reg = &mut self.regions[r];
        let off = addr - reg.addr;
        if let Bytes::Sparse { stride, keep, kept, .. } = &mut reg.data {
            if *keep > 0 {
                for s in off.div_ceil(*stride)..(off + len) / *stride {
                    kept.discard(s);
                }
            }
        }
        Ok(())
    }

    fn push(&mut self, data: Bytes) -> (u64, u32) {
        let len = data.len();
        let addr = self.next_addr;
        // One guard page between regions, so an overrun never lands in the next region.
        self.next_addr += len.max(1).div_ceil(PAGE) * PAGE + PAGE;
        self.next_key = self.next_key.wrapping_add(1);
        self.starts.push(addr);
        self.regions.push(Region {
            addr,
            key: self.next_key,
            data,
        });
        (addr, self.next_key)
    }

    /// The region holding `[addr, addr + len)` and its key: one of the last ones found if it
    /// does, else by binary search over the start addresses. O(1) for accesses to the few
    /// regions in use, O(log regions) otherwise.
    fn find(&self, addr: u64, len: u64) -> Result<(usize, u32), MemoryError> {
        // `addr + len` may wrap for a forged remote address: compare offsets instead.
        for w in &self.ways {
            let w = w.get();
            if w.index != u32::MAX && addr >= w.addr && len <= w.len && addr - w.addr <= w.len - len {
                return Ok((w.index as usize, w.key));
            }
        }
        // Regions are allocated in increasing address order.
        let i = self.starts.partition_point(|&a| a <= addr);
        let bad = MemoryError::OutOfRange { addr, len };
        let r = i.checked_sub(1).ok_or(bad.clone())?;
        let reg = &self.regions[r];
        let off = addr - reg.addr;
        let size = reg.len();
        if len > size || off > size - len {
            return Err(bad);
        }
        let v = self.victim.get();
        self.ways[usize::from(v)].set(Way {
            addr: reg.addr,
            len: size,
            index: r as u32,
            key: reg.key,
        });
        self.victim.set((v + 1) % WAYS as u8);
        Ok((r, reg.key))
    }

    /// A further key for the region whose key is `key` (the same bytes, addresses and
    /// bounds; like a second memory window on one registration), or None if no region has
    /// that key. A NIC that counts arrivals per key ([`crate::World::watch_memory`]) counts
    /// the accesses made with each key apart.
    pub fn add_key(&mut self, key: u32) -> Option<u32> {
        let r = self.regions.iter().position(|r| r.key == key)?;
        self.next_key = self.next_key.wrapping_add(1);
        self.more_keys.push((r as u32, self.next_key));
        Some(self.next_key)
    }

    /// Check a remote access: range inside one region and key matching.
    pub fn check(&self, addr: u64, len: u64, key: u32) -> Result<(), MemoryError> {
        let (r, own) = self.find(addr, len)?;
        if own != key && !self.more_keys.iter().any(|&(i, k)| i as usize == r && k == key) {
            return Err(MemoryError::BadKey { given: key });
        }
        Ok(())
    }

    /// Check a local access: the range lies inside one region (no key needed, nothing read).
    pub fn check_local(&self, addr: u64, len: u64) -> Result<(), MemoryError> {
        self.find(addr, len).map(|_| ())
    }

    /// Local read (CPU or DMA on the owner's behalf; no key needed). Borrowed from a dense
    /// region; from a sparse one the bytes are assembled (unstored bytes are zero).
    pub fn read(&self, addr: u64, len: u64) -> Result<Cow<'_, [u8]>, MemoryError> {
        let (r, _) = self.find(addr, len)?;
        let reg = &self.regions[r];
        let off = addr - reg.addr;
        match &reg.data {
            Bytes::Sparse { stride, keep, kept, .. } => {
                let mut out = vec![0; len as usize];
                sparse_into(*stride, *keep, kept, off, &mut out);
                Ok(Cow::Owned(out))
            }
            d => {
                let b = d.dense().expect("dense");
                Ok(Cow::Borrowed(&b[off as usize..(off + len) as usize]))
            }
        }
    }

    /// Local read of `out.len()` bytes at `addr` into `out`: the bytes [`Memory::read`] gives,
    /// copied straight from the region (no intermediate buffer, also from a sparse region).
    /// Out of range: an error, `out` unchanged.
    pub fn read_into(&self, addr: u64, out: &mut [u8]) -> Result<(), MemoryError> {
        let (r, _) = self.find(addr, out.len() as u64)?;
        let reg = &self.regions[r];
        reg.data.read_into(addr - reg.addr, out);
        Ok(())
    }

    /// Local read of `len` bytes at `addr` appended to `out` (no intermediate buffer).
    /// Out of range: an error, `out` unchanged.
    pub fn read_append(&self, addr: u64, len: u64, out: &mut Vec<u8>) -> Result<(), MemoryError> {
        let (r, _) = self.find(addr, len)?;
        let reg = &self.regions[r];
        let off = addr - reg.addr;
        match &reg.data {
            Bytes::Sparse { stride, keep, kept, .. } => {
                let start = out.len();
                out.resize(start + len as usize, 0);
                sparse_into(*stride, *keep, kept, off, &mut out[start..]);
            }
            d => {
                let b = d.dense().expect("dense");
                out.extend_from_slice(&b[off as usize..(off + len) as usize]);
            }
        }
        Ok(())
    }

    /// The bytes of `[addr, addr + len)` up to its last stored byte: all of them from a dense
    /// region; from a sparse one the unstored tail is left out (it reads as zero), so a
    /// payload-free buffer yields nothing and a header-only slot its header. Pair with
    /// [`Memory::write_padded`] to move data without holding the unstored part.
    pub fn read_trimmed(&self, addr: u64, len: u64) -> Result<Vec<u8>, MemoryError> {
        let (r, _) = self.find(addr, len)?;
        let reg = &self.regions[r];
        let off = addr - reg.addr;
        match &reg.data {
            Bytes::Sparse { stride, keep, kept, .. } => {
                let mut out = Vec::new();
                for (o, s, k, n) in stored_parts(*stride, *keep, off, len) {
                    out.resize(o as usize, 0);
                    match kept.get(s, *keep) {
                        Some(b) => out.extend_from_slice(&b[k as usize..(k + n) as usize]),
                        None => out.resize((o + n) as usize, 0),
                    }
                }
                Ok(out)
            }
            d => {
                let b = d.dense().expect("dense");
                Ok(b[off as usize..(off + len) as usize].to_vec())
            }
        }
    }

    /// Local write.
    pub fn write(&mut self, addr: u64, bytes: &[u8]) -> Result<(), MemoryError> {
        let (r, _) = self.find(addr, bytes.len() as u64)?;
        let reg = &mut self.regions[r];
        let off = addr - reg.addr;
        match &mut reg.data {
            Bytes::Sparse { stride, keep, kept, .. } => {
                for (o, s, k, n) in stored_parts(*stride, *keep, off, bytes.len() as u64) {
                    kept.get_mut(s, *keep)[k as usize..(k + n) as usize]
                        .copy_from_slice(&bytes[o as usize..(o + n) as usize]);
                }
            }
            d => {
                let b = d.dense_mut().expect("dense");
                b[off as usize..off as usize + bytes.len()].copy_from_slice(bytes);
            }
        }
        Ok(())
    }

    /// Write `bytes` at `addr` followed by zeros up to `len` bytes (the counterpart of
    /// [`Memory::read_trimmed`]); `bytes` longer than `len` is an out-of-range access.
    pub fn write_padded(&mut self, addr: u64, len: u64, bytes: &[u8]) -> Result<(), MemoryError> {
        let (r, _) = self.find(addr, len.max(bytes.len() as u64))?;
        if bytes.len() as u64 > len {
            return Err(MemoryError::OutOfRange {
                addr,
                len: bytes.len() as u64,
            });
        }
        let reg = &mut self.regions[r];
        let off = addr - reg.addr;
        match &mut reg.data {
            Bytes::Sparse { stride, keep, kept, .. } => {
                for (o, s, k, n) in stored_parts(*stride, *keep, off, len) {
                    let dst = &mut kept.get_mut(s, *keep)[k as usize..(k + n) as usize];
                    let (lo, hi) = (o as usize, (o + n) as usize);
                    let have = bytes.len().clamp(lo, hi);
                    dst[..have - lo].copy_from_slice(&bytes[lo..have]);
                    dst[have - lo..].fill(0);
                }
            }
            d => {
                let b = &mut d.dense_mut().expect("dense")[off as usize..(off + len) as usize];
                b[..bytes.len()].copy_from_slice(bytes);
                b[bytes.len()..].fill(0);
            }
        }
        Ok(())
    }

    /// Write the `len` bytes of `src` at `from` into `[addr, addr + len)` of this memory, as
    /// `src.read_trimmed(from, len)` followed by [`Memory::write_padded`] would (a sparse
    /// region's unstored bytes arrive as zeros; a sparse destination stores every slot the
    /// range covers), copied straight from region to region without an intermediate buffer.
    /// Either range outside a region: an error, nothing written.
    pub fn write_from(&mut self, addr: u64, len: u64, src: &Memory, from: u64) -> Result<(), MemoryError> {
        let (s, _) = src.find(from, len)?;
        let (d, _) = self.find(addr, len)?;
        let (sreg, dreg) = (&src.regions[s], &mut self.regions[d]);
        let (so, dof) = (from - sreg.addr, addr - dreg.addr);
        match &mut dreg.data {
            Bytes::Sparse { stride, keep, kept, .. } => {
                for (o, s, k, n) in stored_parts(*stride, *keep, dof, len) {
                    let dst = &mut kept.get_mut(s, *keep)[k as usize..(k + n) as usize];
                    sreg.data.read_into(so + o, dst);
                }
            }
            d => {
                let b = d.dense_mut().expect("dense");
                sreg.data.read_into(so, &mut b[dof as usize..(dof + len) as usize]);
            }
        }
        Ok(())
    }

    /// Atomically add to the little-endian u64 at `addr` (reply words); returns the old value.
    pub fn fetch_add_u64(&mut self, addr: u64, v: u64) -> Result<u64, MemoryError> {
        let old = u64::from_le_bytes(self.read(addr, 8)?.as_ref().try_into().expect("8 bytes"));
        self.write(addr, &old.wrapping_add(v).to_le_bytes())?;
        Ok(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_keys_and_bounds() {
        let mut m = Memory::new(3);
        let (a, ka) = m.register(100);
        let (b, kb) = m.register(10);
        assert!(b > a + 100);
        assert_eq!((a % PAGE, b % PAGE), (0, 0));
        assert_ne!(ka, kb);
        m.write(a + 10, &[1, 2, 3]).unwrap();
        assert_eq!(m.read(a + 10, 3).unwrap().as_ref(), &[1, 2, 3]);
        assert!(m.check(a, 100, ka).is_ok());
        assert_eq!(m.check(a, 101, ka), Err(MemoryError::OutOfRange { addr: a, len: 101 }));
        assert_eq!(m.check(a, 10, kb), Err(MemoryError::BadKey { given: kb }));
        assert!(m.read(5, 1).is_err());
        m.write(b, &7u64.to_le_bytes()[..8].iter().copied().take(8).collect::<Vec<_>>())
            .unwrap();
        assert_eq!(m.fetch_add_u64(b, 5).unwrap(), 7);
        assert_eq!(m.read(b, 8).unwrap().as_ref(), &12u64.to_le_bytes());
        // Forged addresses and lengths near u64::MAX are out of range, not an overflow.
        assert!(m.check(u64::MAX - 10, 8, kb).is_err());
        assert!(m.check(b, u64::MAX, kb).is_err());
        assert!(m.check(b + 4, u64::MAX - 2, kb).is_err());
        assert!(m.write(u64::MAX - 3, &[1, 2, 3, 4]).is_err());
    }

    struct Ext(Vec<u8>);
    impl ExternalBytes for Ext {
        fn bytes(&self) -> &[u8] {
            &self.0
        }
        fn bytes_mut(&mut self) -> &mut [u8] {
            &mut self.0
        }
    }

    #[test]
    fn external_regions_keep_their_bytes_and_bounds() {
        let mut m = Memory::new(0);
        let (a, _) = m.register(16);
        let (b, kb) = m.register_external(Box::new(Ext(vec![7; 100])));
        assert!(b >= a + 16 + PAGE, "a guard page after the owned region");
        assert_eq!(
            m.read(b + 99, 1).unwrap().as_ref(),
            &[7],
            "registration keeps the contents"
        );
        m.write(b + 1, &[1, 2]).unwrap();
        assert_eq!(m.read(b, 4).unwrap().as_ref(), &[7, 1, 2, 7]);
        assert!(m.check(b, 100, kb).is_ok());
        assert!(m.check(b, 101, kb).is_err());
        assert!(m.write(b + 99, &[0, 0]).is_err(), "a write past the end is refused");
        assert_eq!(m.read(b + 99, 1).unwrap().as_ref(), &[7]);
        assert!(format!("{:?}", m.regions[1]).contains("external: true"));
    }

    #[test]
    fn sparse_regions_store_only_the_kept_prefix_of_each_slot() {
        let mut m = Memory::new(0);
        // Four 100-byte slots keeping 8 bytes each; a payload-free region of 1 MB.
        let (a, ka) = m.register_sparse(400, 100, 8);
        let (b, kb) = m.register_sparse(1 << 20, 1 << 20, 0);
        assert!(b >= a + 400 + PAGE, "addresses as for a dense region");
        assert!(!m.regions[0].is_dense() && m.regions[1].len() == 1 << 20);
        assert!(m.check(a, 400, ka).is_ok() && m.check(a, 401, ka).is_err());
        assert!(m.check(b, 1 << 20, kb).is_ok());
        // A write across slot 1's kept part keeps only that part.
        let bytes: Vec<u8> = (1..=20).collect();
        m.write(a + 100, &bytes).unwrap();
        assert_eq!(m.read(a + 100, 10).unwrap().as_ref(), &[1, 2, 3, 4, 5, 6, 7, 8, 0, 0]);
        assert_eq!(m.read_trimmed(a + 100, 100).unwrap(), (1..=8).collect::<Vec<u8>>());
        assert_eq!(m.read_trimmed(a + 104, 2).unwrap(), vec![5, 6]);
        assert_eq!(m.read_trimmed(a + 110, 50).unwrap(), Vec::<u8>::new());
        // Across slots: the gap before slot 2's kept part reads as zero.
        m.write(a + 200, &[9; 8]).unwrap();
        let t = m.read_trimmed(a + 104, 100).unwrap();
        assert_eq!(t.len(), 100);
        assert_eq!(
            (&t[..4], &t[4..96], &t[96..]),
            (&[5, 6, 7, 8][..], &[0u8; 92][..], &[9u8; 4][..])
        );
        // Padded writes clear the stored bytes they cover; the payload-free region takes any
        // write in range and holds nothing.
        m.write_padded(a + 102, 50, &[7]).unwrap();
        assert_eq!(m.read(a + 100, 8).unwrap().as_ref(), &[1, 2, 7, 0, 0, 0, 0, 0]);
        m.write(b + 1000, &[5; 64]).unwrap();
        assert_eq!(m.read_trimmed(b, 1 << 20).unwrap(), Vec::<u8>::new());
        assert_eq!(m.read(b + 1000, 2).unwrap().as_ref(), &[0, 0]);
        assert!(m.write(b + (1 << 20) - 1, &[1, 2]).is_err());
        assert!(m.write_padded(a, 4, &[1; 5]).is_err());
        // A dense region round-trips through read_trimmed / write_padded unchanged.
        let (c, _) = m.register(16);
        m.write(c, &[3; 16]).unwrap();
        let v = m.read_trimmed(c, 16).unwrap();
        assert_eq!(v, vec![3; 16]);
        m.write_padded(c, 16, &v[..10]).unwrap();
        assert_eq!(
            m.read(c, 16).unwrap().as_ref(),
            &[3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 0, 0, 0, 0, 0, 0]
        );
    }

    /// `read_into` and `read_append` give the bytes `read` gives, from dense and sparse regions
    /// (stale bytes of the caller's buffer overwritten, unstored and discarded slots as zero),
    /// and refuse a range outside a region leaving the caller's buffer unchanged.
    #[test]
    fn reads_into_a_buffer_give_the_bytes_of_read() {
        let mut m = Memory::new(0);
        let (a, _) = m.register_sparse(400, 100, 8);
        let (c, _) = m.register(64);
        m.write(a + 100, &(1..=20).collect::<Vec<u8>>()).unwrap();
        m.write(a + 200, &[9; 8]).unwrap();
        m.write(a + 300, &[4; 8]).unwrap();
        m.discard(a + 300, 100).unwrap();
        m.write(c, &(0..64).collect::<Vec<u8>>()).unwrap();
        for (addr, len) in [
            (a, 400),
            (a + 100, 8),
            (a + 104, 100),
            (a + 150, 10),
            (a + 296, 104),
            (c, 64),
            (c + 5, 9),
            (c + 64, 0),
        ] {
            let want = m.read(addr, len).unwrap().into_owned();
            let mut out = vec![0xee; len as usize];
            m.read_into(addr, &mut out).unwrap();
            assert_eq!(out, want, "read_into at {addr:#x}, {len} bytes");
            let mut app = vec![1, 2, 3];
            m.read_append(addr, len, &mut app).unwrap();
            assert_eq!((&app[..3], &app[3..]), (&[1u8, 2, 3][..], &want[..]));
        }
        assert_eq!(m.read(a + 296, 8).unwrap().as_ref(), &[0, 0, 0, 0, 0, 0, 0, 0]);
        let mut out = [0xee; 8];
        assert!(m.read_into(a + 396, &mut out).is_err());
        assert!(m.read_into(c + 60, &mut out).is_err());
        assert_eq!(out, [0xee; 8]);
        let mut app = vec![7];
        assert!(m.read_append(a + 1, 400, &mut app).is_err());
        assert!(m.read_append(c, 65, &mut app).is_err());
        assert_eq!(app, vec![7]);
    }

    /// `write_from` lands what `read_trimmed` + `write_padded` would, between dense regions
    /// and from a sparse one, refuses a range outside a region on either side without writing,
    /// and the last-region cache never lets an access through that the search refuses.
    #[test]
    fn write_from_moves_bytes_as_a_trimmed_read_and_padded_write() {
        let mut src = Memory::new(0);
        let (a, _) = src.register(64);
        let (sp, _) = src.register_sparse(256, 128, 8);
        src.write(a, &(1..=64).collect::<Vec<u8>>()).unwrap();
        src.write(sp, &[9; 16]).unwrap();
        let mut dst = Memory::new(1);
        let (d, _) = dst.register(300);
        dst.write(d, &[5; 300]).unwrap();
        dst.write_from(d + 10, 20, &src, a + 4).unwrap();
        assert_eq!(
            dst.read(d + 10, 20).unwrap().as_ref(),
            &(5..25).collect::<Vec<u8>>()[..]
        );
        assert_eq!(dst.read(d + 9, 1).unwrap().as_ref(), &[5]);
        assert_eq!(dst.read(d + 30, 1).unwrap().as_ref(), &[5]);
        // From a sparse region: its stored prefix, then zeros up to the length.
        dst.write_from(d, 200, &src, sp).unwrap();
        let got = dst.read(d, 201).unwrap().into_owned();
        assert_eq!((&got[..8], &got[8..200], got[200]), (&[9u8; 8][..], &[0u8; 192][..], 5));
        // Out of range on either side: an error, nothing written.
        dst.write(d, &[7; 300]).unwrap();
        assert!(dst.write_from(d, 65, &src, a).is_err());
        assert!(dst.write_from(d + 250, 64, &src, a).is_err());
        assert_eq!(dst.read(d, 300).unwrap().as_ref(), &[7u8; 300][..]);
        // After a hit on one region, an access past its end or below it is still refused.
        assert!(src.check_local(a, 64).is_ok());
        assert!(src.check_local(a + 1, 64).is_err());
        assert!(src.check_local(a - 1, 2).is_err());
        assert!(src.check_local(sp, 256).is_ok());
        assert!(src.check_local(a + 63, 1).is_ok());
        // Keys after a hit: the region's own key, a further key, never another region's.
        let mut m = Memory::new(2);
        let (x, kx) = m.register(32);
        let (_, ky) = m.register(32);
        let kz = m.add_key(kx).unwrap();
        assert!(m.check(x, 32, kx).is_ok());
        assert_eq!(m.check(x, 32, ky), Err(MemoryError::BadKey { given: ky }));
        assert!(m.check(x + 8, 8, kz).is_ok());
        assert!(m.check(x, 32, kx).is_ok());
        assert!(
            Memory::default().check_local(0, 0).is_err(),
            "an empty memory holds nothing"
        );
    }

    /// More regions in use than the memory remembers: every access still finds its own
    /// region and key, and a range across two regions is refused whichever was found last.
    #[test]
    fn regions_beyond_the_remembered_ones_are_found_by_search() {
        let mut m = Memory::new(1);
        let regs: Vec<(u64, u32)> = (0..(WAYS as u64 + 3)).map(|i| m.register(64 + i)).collect();
        for round in 0..3u8 {
            for (i, &(a, k)) in regs.iter().enumerate() {
                m.write(a + 1, &[round, i as u8]).unwrap();
                assert!(m.check(a, 64 + i as u64, k).is_ok());
                assert!(m.check(a, 65 + i as u64, k).is_err());
                let other = regs[(i + 1) % regs.len()].1;
                assert_eq!(m.check(a, 8, other), Err(MemoryError::BadKey { given: other }));
            }
            for (i, &(a, _)) in regs.iter().enumerate().rev() {
                assert_eq!(m.read(a + 1, 2).unwrap().as_ref(), &[round, i as u8]);
            }
        }
        let (a0, _) = regs[0];
        assert!(m.check_local(a0 + 60, 64).is_err(), "a range across a guard page");
    }

    fn stored_slots(m: &Memory, r: usize) -> usize {
        match &m.regions[r].data {
            Bytes::Sparse { kept, .. } => kept.at.len(),
            _ => panic!("sparse region expected"),
        }
    }

    /// Into a sparse region, `write_from` leaves the bytes and the stored slots that
    /// `read_trimmed` + `write_padded` leave, from a dense or a sparse source, within a slot's
    /// kept part and across slots.
    #[test]
    fn write_from_into_a_sparse_region_matches_a_trimmed_read_and_padded_write() {
        let mut src = Memory::new(0);
        let (a, _) = src.register(400);
        let (sp, _) = src.register_sparse(400, 100, 16);
        src.write(a, &(0..=255).chain(0..144).collect::<Vec<u8>>()).unwrap();
        src.write(sp + 100, &[3; 16]).unwrap();
        src.write(sp + 304, &[8; 12]).unwrap();
        let fresh = || {
            let mut m = Memory::new(1);
            let (d, _) = m.register_sparse(500, 100, 8);
            m.write(d + 400, &[6; 8]).unwrap();
            (m, d)
        };
        for (from, to, len) in [
            (a, 0, 400),
            (a + 7, 3, 5),
            (a + 50, 96, 300),
            (sp, 0, 400),
            (sp + 98, 102, 230),
            (sp + 300, 400, 100),
            (sp + 20, 0, 60),
            (a, 0, 0),
        ] {
            let (mut got, d) = fresh();
            got.write_from(d + to, len, &src, from).unwrap();
            let (mut want, _) = fresh();
            let bytes = src.read_trimmed(from, len).unwrap();
            want.write_padded(d + to, len, &bytes).unwrap();
            let case = format!("{len} bytes from {from:#x} to +{to}");
            assert_eq!(got.read(d, 500).unwrap(), want.read(d, 500).unwrap(), "{case}");
            assert_eq!(stored_slots(&got, 0), stored_slots(&want, 0), "{case}");
        }
        let (mut m, d) = fresh();
        assert!(m.write_from(d + 450, 60, &src, a).is_err());
        assert!(m.write_from(d, 60, &src, sp + 350).is_err());
        assert_eq!(
            (stored_slots(&m, 0), m.read(d + 400, 8).unwrap().as_ref()),
            (1, &[6u8; 8][..])
        );
    }

    #[test]
    fn sparse_slots_are_stored_when_written_and_given_back_by_discard() {
        let mut m = Memory::new(0);
        // 10 000 buffers of 8 KiB keeping a 64-byte header each: nothing stored yet.
        let (a, _) = m.register_sparse(10_000 * 8192, 8192, 64);
        assert_eq!(stored_slots(&m, 0), 0);
        assert_eq!(m.read(a + 5 * 8192, 64).unwrap().as_ref(), &[0u8; 64][..]);
        m.write_padded(a + 5 * 8192, 100, &[4; 70]).unwrap();
        m.write(a + 9_999 * 8192 + 3, &[9; 2]).unwrap();
        assert_eq!(stored_slots(&m, 0), 2);
        assert_eq!(m.read_trimmed(a + 5 * 8192, 100).unwrap(), vec![4; 64]);
        assert_eq!(m.read(a + 9_999 * 8192, 6).unwrap().as_ref(), &[0, 0, 0, 9, 9, 0]);
        // Discarding a range gives back only the slots wholly inside it.
        m.discard(a + 5 * 8192 + 1, 2 * 8192).unwrap();
        assert_eq!(stored_slots(&m, 0), 2, "slot 5 is not wholly inside");
        m.discard(a + 5 * 8192, 8192).unwrap();
        assert_eq!(stored_slots(&m, 0), 1);
        assert_eq!(m.read(a + 5 * 8192, 8).unwrap().as_ref(), &[0u8; 8][..]);
        assert_eq!(m.read_trimmed(a + 5 * 8192, 8192).unwrap(), vec![0; 64]);
        // A new write reuses the store, zeroed first.
        m.write(a + 7 * 8192 + 60, &[1; 4]).unwrap();
        assert_eq!(stored_slots(&m, 0), 2);
        assert_eq!(
            m.read(a + 7 * 8192, 64).unwrap()[..61],
            [&[0u8; 60][..], &[1][..]].concat()[..]
        );
        assert!(m.discard(a + 10_000 * 8192, 1).is_err());
        // A dense region keeps its bytes.
        let (c, _) = m.register(16);
        m.write(c, &[3; 16]).unwrap();
        m.discard(c, 16).unwrap();
        assert_eq!(m.read(c, 16).unwrap().as_ref(), &[3; 16]);
    }

    /// A region of `MAPPED_MIN` bytes or more is mapped for itself and reads as zeros until
    /// written; accesses anywhere in it land and read back whole, and its bounds hold.
    #[test]
    fn large_regions_are_mapped_and_read_as_zeroed_memory() {
        let mut m = Memory::new(0);
        let len = MAPPED_MIN + 100;
        let (a, ka) = m.register(len);
        let (b, _) = m.register(MAPPED_MIN - 1);
        assert!(matches!(m.regions[0].data, Bytes::Mapped(_)) && matches!(m.regions[1].data, Bytes::Owned(_)));
        assert!(b >= a + len + PAGE, "a guard page after the mapped region");
        assert!(m.regions[0].is_dense() && m.check(a, len, ka).is_ok() && m.check(a, len + 1, ka).is_err());
        assert_eq!(m.read(a + 3 * PAGE, 16).unwrap().as_ref(), &[0; 16]);
        let bytes: Vec<u8> = (0..200).map(|i| i as u8 + 1).collect();
        m.write(a + 2 * PAGE - 100, &bytes).unwrap();
        m.write(a + len - 50, &[9; 50]).unwrap();
        assert!(m.write(a + len - 49, &[9; 50]).is_err());
        assert_eq!(m.read(a + 2 * PAGE - 100, 200).unwrap().as_ref(), &bytes[..]);
        let whole = m.read_trimmed(a, len).unwrap();
        assert_eq!(whole.len() as u64, len);
        let sum = |v: &[u8]| v.iter().map(|&b| b as u64).sum::<u64>();
        assert_eq!(sum(&whole), sum(&bytes) + 450);
        m.write_padded(a + 2 * PAGE - 10, 3 * PAGE, &[7; 5]).unwrap();
        assert_eq!(
            m.read(a + 2 * PAGE - 12, 8).unwrap().as_ref(),
            &[89, 90, 7, 7, 7, 7, 7, 0]
        );
        assert_eq!(m.fetch_add_u64(a + 9 * PAGE - 4, 3).unwrap(), 0);
        assert_eq!(m.read(a + 9 * PAGE - 4, 8).unwrap().as_ref(), &3u64.to_le_bytes());
    }

    proptest::proptest! {
        /// Any sequence of writes, padded writes and copies leaves a mapped region reading
        /// exactly as a plain vector of the same bytes, through every read.
        #[test]
        fn a_mapped_region_reads_as_a_plain_vector(
            ops in proptest::collection::vec((0u8..3, 0u64..MAPPED_MIN + 5 * PAGE, 0u64..2 * PAGE, 0u8..255), 1..40),
        ) {
            let len = MAPPED_MIN + 5 * PAGE - 7;
            let mut m = Memory::new(0);
            let (a, _) = m.register(len);
            proptest::prop_assert!(matches!(m.regions[0].data, Bytes::Mapped(_)));
            let mut src = Memory::new(1);
            let (s, _) = src.register(len);
            let pattern: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            src.write(s, &pattern).unwrap();
            let mut model = vec![0u8; len as usize];
            for (kind, off, n, v) in ops {
                let n = n.min(len - off.min(len));
                let off = off.min(len - n);
                let (lo, hi) = (off as usize, (off + n) as usize);
                match kind {
                    0 => {
                        m.write(a + off, &vec![v; n as usize]).unwrap();
                        model[lo..hi].fill(v);
                    }
                    1 => {
                        let k = (v as u64).min(n);
                        m.write_padded(a + off, n, &vec![v; k as usize]).unwrap();
                        model[lo..lo + k as usize].fill(v);
                        model[lo + k as usize..hi].fill(0);
                    }
                    _ => {
                        m.write_from(a + off, n, &src, s + off).unwrap();
                        model[lo..hi].copy_from_slice(&pattern[lo..hi]);
                    }
                }
            }
            let whole = m.read(a, len).unwrap().into_owned();
            proptest::prop_assert_eq!(&whole[..], &model[..]);
            for (off, n) in [(0, 1), (PAGE - 3, 9), (2 * PAGE, PAGE), (len - 5, 5), (100, 3 * PAGE)] {
                let want = &model[off as usize..(off + n) as usize];
                let mut out = vec![0xee; n as usize];
                m.read_into(a + off, &mut out).unwrap();
                proptest::prop_assert_eq!(&out[..], want);
                let mut app = vec![1];
                m.read_append(a + off, n, &mut app).unwrap();
                proptest::prop_assert_eq!(&app[1..], want);
            }
        }
    }
}
