//! The symmetric heap allocator of one PE: first fit over a sorted free list, deterministic, so
//! that every PE making the same calls in the same order gets the same offsets; and the job's
//! log of collective allocations that checks they do.

use crate::ShmemError;
use std::cell::RefCell;

/// Free space of one PE's heap: sorted, disjoint (offset, length) holes.
#[derive(Clone, Debug)]
pub(crate) struct Allocator {
    free: Vec<(u64, u64)>,
    used: Vec<(u64, u64)>,
    size: u64,
}

impl Allocator {
    #[cfg(test)]
    pub(crate) fn new(size: u64) -> Self {
        Self::with_reserved(size, 0)
    }

    /// A heap of `size` bytes whose first `reserved` bytes are never handed out.
    pub(crate) fn with_reserved(size: u64, reserved: u64) -> Self {
        Allocator {
            free: if reserved < size {
                vec![(reserved, size - reserved)]
            } else {
                Vec::new()
            },
            used: Vec::new(),
            size,
        }
    }

    /// `len` bytes (at least 1) aligned to `align` (a power of two), first fit.
    pub(crate) fn alloc(&mut self, call: &'static str, len: u64, align: u64) -> Result<u64, ShmemError> {
        let need = len.max(1);
        for i in 0..self.free.len() {
            let (off, l) = self.free[i];
            let start = off.div_ceil(align) * align;
            let end = start.checked_add(need);
            if let Some(end) = end.filter(|&e| e <= off + l) {
                self.free.remove(i);
                if end < off + l {
                    self.free.insert(i, (end, off + l - end));
                }
                if start > off {
                    self.free.insert(i, (off, start - off));
                }
                let j = self.used.partition_point(|u| u.0 < start);
                self.used.insert(j, (start, need));
                return Ok(start);
            }
        }
        Err(ShmemError::HeapFull {
            call,
            len,
            free: self.free.iter().map(|f| f.1).sum(),
            heap: self.size,
        })
    }

    /// Give back the allocation starting at `off`; its length.
    pub(crate) fn free(&mut self, call: &'static str, off: u64) -> Result<u64, ShmemError> {
        let j = self
            .used
            .binary_search_by_key(&off, |u| u.0)
            .map_err(|_| ShmemError::BadArgument {
                call,
                reason: format!("symmetric offset {off:#x} is not the start of a live allocation"),
            })?;
        let (start, len) = self.used.remove(j);
        let i = self.free.partition_point(|f| f.0 < start);
        self.free.insert(i, (start, len));
        // Merge with the neighbours.
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
        Ok(len)
    }

    /// Length of the live allocation starting at `off`.
    pub(crate) fn len_of(&self, off: u64) -> Option<u64> {
        self.used
            .binary_search_by_key(&off, |u| u.0)
            .ok()
            .map(|j| self.used[j].1)
    }
}

/// One collective allocation call as the first PE to make it described it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AllocCall {
    pub(crate) what: String,
    pub(crate) first: usize,
}

/// The job's record of collective allocation calls, in order.
#[derive(Default)]
pub(crate) struct AllocLog {
    calls: RefCell<Vec<AllocCall>>,
}

impl AllocLog {
    /// PE `pe` makes its `index`-th collective allocation call, described as `what`: the first
    /// PE to make call `index` sets it; every other must agree.
    pub(crate) fn check(&self, call: &'static str, index: usize, pe: usize, what: String) -> Result<(), ShmemError> {
        let mut calls = self.calls.borrow_mut();
        match calls.get(index) {
            None => {
                debug_assert_eq!(calls.len(), index, "calls are numbered in order per PE");
                calls.push(AllocCall { what, first: pe });
                Ok(())
            }
            Some(c) if c.what == what => Ok(()),
            Some(c) => Err(ShmemError::AllocMismatch {
                call,
                index,
                pe,
                got: what,
                first: c.first,
                want: c.what.clone(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_aligns_reuses_and_merges() {
        let mut a = Allocator::new(1024);
        let x = a.alloc("t", 10, 8).unwrap();
        let y = a.alloc("t", 100, 64).unwrap();
        assert_eq!((x, y), (0, 64));
        let z = a.alloc("t", 8, 8).unwrap();
        assert_eq!(z, 16, "the hole before y is reused");
        assert_eq!(a.free("t", y).unwrap(), 100);
        assert_eq!(a.free("t", x).unwrap(), 10);
        assert_eq!(a.free("t", z).unwrap(), 8);
        assert_eq!(a.free, vec![(0, 1024)], "holes merge back into one");
        assert!(a.free("t", 3).is_err());
        let e = a.alloc("t", 2000, 8).unwrap_err();
        assert!(matches!(e, ShmemError::HeapFull { free: 1024, .. }), "{e}");
    }

    #[test]
    fn reserved_bytes_are_never_handed_out() {
        let mut a = Allocator::with_reserved(1024, 256);
        assert_eq!(a.alloc("t", 8, 8).unwrap(), 256);
        assert_eq!(a.alloc("t", 4, 512).unwrap(), 512);
        assert!(a.alloc("t", 1024 - 256, 8).is_err());
        assert!(Allocator::with_reserved(64, 64).alloc("t", 1, 8).is_err());
    }

    #[test]
    fn the_log_names_the_disagreeing_pe() {
        let log = AllocLog::default();
        log.check("shmem_malloc", 0, 0, "malloc(64)".into()).unwrap();
        log.check("shmem_malloc", 0, 1, "malloc(64)".into()).unwrap();
        let e = log.check("shmem_malloc", 0, 2, "malloc(32)".into()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "shmem_malloc: PE 2 made collective allocation 0 as malloc(32), but PE 0 made it as malloc(64) \
             (symmetric allocations must be made in the same order with the same sizes on every PE)"
        );
    }
}
