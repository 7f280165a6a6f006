//! Host memory of one node: registered regions with real bytes and protection keys.
//!
//! Addresses are per node. [`Memory::register`] allocates a region at the next free address
//! (page aligned: 4 KiB, like a registered buffer) and returns it with its key; the NIC checks, for every remote access, that
//! the whole range lies inside one region and that the packet's key matches (Sunway memory
//! keys, cHPP QP Magic). A failed check writes nothing.
//!
//! A region's bytes are normally owned by the model (zeroed at registration). A region may
//! instead live in memory outside the model ([`Memory::register_external`]): the bytes of a
//! real process mapped into the simulator, so that what the NIC writes *is* that process's
//! memory (the C interface of the SHMEM library runs programs this way).

use serde::Serialize;

/// Bytes outside the model that a region lives in (for example a shared mapping of another
/// process's memory). The length never changes.
pub trait ExternalBytes {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
}

enum Bytes {
    Owned(Vec<u8>),
    External(Box<dyn ExternalBytes>),
}

impl Bytes {
    fn get(&self) -> &[u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::External(e) => e.bytes(),
        }
    }
    fn get_mut(&mut self) -> &mut [u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::External(e) => e.bytes_mut(),
        }
    }
}

/// A registered memory region.
pub struct Region {
    pub addr: u64,
    pub key: u32,
    data: Bytes,
}

impl Region {
    /// The region's bytes.
    pub fn data(&self) -> &[u8] {
        self.data.get()
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("addr", &self.addr)
            .field("key", &self.key)
            .field("len", &self.data().len())
            .field("external", &matches!(self.data, Bytes::External(_)))
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

/// All regions of one node.
#[derive(Debug, Default)]
pub struct Memory {
    regions: Vec<Region>,
    next_addr: u64,
    next_key: u32,
}

const BASE: u64 = 0x1000_0000;
/// Region alignment.
pub const PAGE: u64 = 4096;

impl Memory {
    pub fn new(node: u32) -> Self {
        // Keys differ between nodes so a key from one node is wrong on another.
        Memory {
            regions: Vec::new(),
            next_addr: BASE,
            next_key: 0x100 + node.wrapping_mul(0x1_0000),
        }
    }

    /// Register `len` zeroed bytes; returns (address, key).
    pub fn register(&mut self, len: u64) -> (u64, u32) {
        self.push(Bytes::Owned(vec![0; len as usize]))
    }

    /// Register a region whose bytes live outside the model (they keep their contents);
    /// returns (address, key).
    pub fn register_external(&mut self, bytes: Box<dyn ExternalBytes>) -> (u64, u32) {
        self.push(Bytes::External(bytes))
    }

    fn push(&mut self, data: Bytes) -> (u64, u32) {
        let len = data.get().len() as u64;
        let addr = self.next_addr;
        // One guard page between regions, so an overrun never lands in the next region.
        self.next_addr += len.max(1).div_ceil(PAGE) * PAGE + PAGE;
        self.next_key = self.next_key.wrapping_add(1);
        self.regions.push(Region {
            addr,
            key: self.next_key,
            data,
        });
        (addr, self.next_key)
    }

    fn find(&self, addr: u64, len: u64) -> Result<usize, MemoryError> {
        // Regions are allocated in increasing address order.
        let i = self.regions.partition_point(|r| r.addr <= addr);
        let bad = MemoryError::OutOfRange { addr, len };
        let r = i.checked_sub(1).ok_or(bad.clone())?;
        let reg = &self.regions[r];
        // `addr + len` may wrap for a forged remote address: compare offsets instead.
        let off = addr - reg.addr;
        let size = reg.data().len() as u64;
        if len > size || off > size - len {
            return Err(bad);
        }
        Ok(r)
    }

    /// Check a remote access: range inside one region and key matching.
    pub fn check(&self, addr: u64, len: u64, key: u32) -> Result<(), MemoryError> {
        let r = self.find(addr, len)?;
        if self.regions[r].key != key {
            return Err(MemoryError::BadKey { given: key });
        }
        Ok(())
    }

    /// Local read (CPU or DMA on the owner's behalf; no key needed).
    pub fn read(&self, addr: u64, len: u64) -> Result<&[u8], MemoryError> {
        let r = self.find(addr, len)?;
        let reg = &self.regions[r];
        let off = (addr - reg.addr) as usize;
        Ok(&reg.data()[off..off + len as usize])
    }

    /// Local write.
    pub fn write(&mut self, addr: u64, bytes: &[u8]) -> Result<(), MemoryError> {
        let r = self.find(addr, bytes.len() as u64)?;
        let reg = &mut self.regions[r];
        let off = (addr - reg.addr) as usize;
        reg.data.get_mut()[off..off + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    /// Atomically add to the little-endian u64 at `addr` (reply words); returns the old value.
    pub fn fetch_add_u64(&mut self, addr: u64, v: u64) -> Result<u64, MemoryError> {
        let old = u64::from_le_bytes(self.read(addr, 8)?.try_into().expect("8 bytes"));
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
        assert_eq!(m.read(a + 10, 3).unwrap(), &[1, 2, 3]);
        assert!(m.check(a, 100, ka).is_ok());
        assert_eq!(m.check(a, 101, ka), Err(MemoryError::OutOfRange { addr: a, len: 101 }));
        assert_eq!(m.check(a, 10, kb), Err(MemoryError::BadKey { given: kb }));
        assert!(m.read(5, 1).is_err());
        m.write(b, &7u64.to_le_bytes()[..8].iter().copied().take(8).collect::<Vec<_>>())
            .unwrap();
        assert_eq!(m.fetch_add_u64(b, 5).unwrap(), 7);
        assert_eq!(m.read(b, 8).unwrap(), &12u64.to_le_bytes());
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
        assert_eq!(m.read(b + 99, 1).unwrap(), &[7], "registration keeps the contents");
        m.write(b + 1, &[1, 2]).unwrap();
        assert_eq!(m.read(b, 4).unwrap(), &[7, 1, 2, 7]);
        assert!(m.check(b, 100, kb).is_ok());
        assert!(m.check(b, 101, kb).is_err());
        assert!(m.write(b + 99, &[0, 0]).is_err(), "a write past the end is refused");
        assert_eq!(m.read(b + 99, 1).unwrap(), &[7]);
        assert!(format!("{:?}", m.regions[1]).contains("external: true"));
    }
}
