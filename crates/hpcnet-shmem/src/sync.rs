//! Synchronisation: barriers (classic dissemination and the NICEVT fast barrier, split-phase,
//! on active sets and teams), point synchronisation (`wait_until`, `test` and their
//! `_all`/`_any`/`_some` forms), signals, and MCS locks.

use crate::coll::Team;
use crate::pe::{Pe, ShmemInt, BARRIER_FLAGS, BARRIER_SLOTS, LOCK_NODES, LOCK_SLOTS, NOTIFY_COUNT, NOTIFY_RELEASE};
use crate::{BarrierKind, ShmemError, Sym};
use hpcnet_msg::verbs::{AtomicOp, RemoteBuf};
use std::rc::Rc;

/// Comparison of point-synchronisation calls (`SHMEM_CMP_*`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl Cmp {
    pub fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
        }
    }
}

impl Pe {
    // ---- barriers -------------------------------------------------------------------------

    /// `shmem_barrier_all`: the configured barrier ([`crate::ShmemConfig::barrier`], classic by
    /// default).
    pub async fn barrier_all(&mut self) -> Result<(), ShmemError> {
        match self.shared.cfg.barrier {
            BarrierKind::Classic => self.barrier_all_classic().await,
            BarrierKind::Fast => self.barrier_all_fast().await,
        }
    }

    /// The classic barrier: quiet (every write of this PE acknowledged), then a dissemination
    /// barrier over all PEs.
    pub async fn barrier_all_classic(&mut self) -> Result<(), ShmemError> {
        self.quiet().await?;
        let world = self.world_members();
        self.dissemination(world).await
    }

    /// `shmem_sync_all`: a barrier that does not complete outstanding writes.
    pub async fn sync_all(&mut self) -> Result<(), ShmemError> {
        self.enter(0).await;
        let world = self.world_members();
        self.dissemination(world).await
    }

    /// `shmem_barrier(PE_start, logPE_stride, PE_size, pSync)`: quiet, then a barrier among the
    /// active set's PEs (the library keeps its own synchronisation words; `pSync` is not
    /// needed).
    pub async fn barrier(&mut self, start: usize, log_stride: u32, size: usize) -> Result<(), ShmemError> {
        let team = Team::active_set(self, "shmem_barrier", start, log_stride, size)?;
        self.team_barrier(&team).await
    }

    /// `shmem_team_sync` after a quiet: a barrier among the team's PEs.
    pub async fn team_barrier(&mut self, team: &Team) -> Result<(), ShmemError> {
        self.quiet().await?;
        self.dissemination(team.members().clone()).await
    }

    pub(crate) fn world_members(&self) -> Rc<[usize]> {
        self.shared.barrier_slots.borrow()[0].clone()
    }

    /// The barrier flag slot of a member list (assigned in order of first use, shared by all).
    fn slot(&self, members: &Rc<[usize]>) -> Result<usize, ShmemError> {
        let mut slots = self.shared.barrier_slots.borrow_mut();
        if let Some(i) = slots.iter().position(|s| s == members) {
            return Ok(i);
        }
        if slots.len() as u64 >= BARRIER_SLOTS {
            return Err(ShmemError::BadArgument {
                call: "shmem_barrier",
                reason: format!(
                    "more than {BARRIER_SLOTS} different PE sets used barriers (the library's synchronisation region has room for {BARRIER_SLOTS})"
                ),
            });
        }
        slots.push(members.clone());
        Ok(slots.len() - 1)
    }

    /// Dissemination barrier among `members` (this PE among them): in round k, write the
    /// barrier's epoch into the flag of the member 2^k ahead and wait for the one 2^k behind.
    async fn dissemination(&mut self, members: Rc<[usize]>) -> Result<(), ShmemError> {
        let n = members.len();
        let Some(i) = members.iter().position(|&p| p == self.me) else {
            return Err(ShmemError::BadArgument {
                call: "shmem_barrier",
                reason: format!("PE {} is not in the set it synchronises", self.me),
            });
        };
        let slot = self.slot(&members)?;
        self.epochs[slot] += 1;
        let epoch = self.epochs[slot];
        let mut k = 0u64;
        let mut dist = 1usize;
        while dist < n {
            let flag = BARRIER_FLAGS + (slot as u64 * 32 + k) * 8;
            let to = members[(i + dist) % n];
            self.sync_put(to, flag, epoch).await?;
            while self.sync_word(flag) < epoch {
                self.woken().await;
            }
            k += 1;
            dist *= 2;
        }
        Ok(())
    }

    /// `shmem_barrier_notify` (spec 03, two-phase barrier): quiet, then count this PE in at
    /// PE 0. Work may follow before [`Pe::barrier_wait`].
    pub async fn barrier_notify(&mut self) -> Result<(), ShmemError> {
        let call = "shmem_barrier_notify";
        if self.notified {
            return Err(ShmemError::BadArgument {
                call,
                reason: "notified twice without a barrier_wait".into(),
            });
        }
        self.quiet().await?;
        self.notified = true;
        self.notify_epoch += 1;
        let t = self.sync_remote(0, NOTIFY_COUNT);
        self.amo::<u64>(call, AtomicOp::Add, t, (1, 0), 0, false).await?;
        Ok(())
    }

    /// `shmem_barrier_wait`: return once every PE has notified. PE 0 waits for the count and
    /// releases the others with one write each.
    pub async fn barrier_wait(&mut self) -> Result<(), ShmemError> {
        let call = "shmem_barrier_wait";
        if !self.notified {
            return Err(ShmemError::BadArgument {
                call,
                reason: "no barrier_notify before it".into(),
            });
        }
        self.notified = false;
        let epoch = self.notify_epoch;
        let n = self.shared.npes as u64;
        if self.me == 0 {
            while self.sync_word(NOTIFY_COUNT) < n * epoch {
                self.woken().await;
            }
            for pe in 1..self.shared.npes {
                self.sync_put(pe, NOTIFY_RELEASE, epoch).await?;
            }
        } else {
            while self.sync_word(NOTIFY_RELEASE) < epoch {
                self.woken().await;
            }
        }
        Ok(())
    }

    // ---- point synchronisation -------------------------------------------------------------

    /// `shmem_wait_until`: sleep until this PE's `ivar` compares true with `value`.
    pub async fn wait_until<T: ShmemInt>(&mut self, ivar: Sym, cmp: Cmp, value: T) -> Result<(), ShmemError> {
        self.check_sym("shmem_wait_until", ivar.offset(), u64::from(T::WIDTH))?;
        while !cmp.holds(self.read::<T>(ivar, 0)?, value) {
            self.woken().await;
        }
        Ok(())
    }

    /// `shmem_test`: whether `ivar` compares true now.
    pub fn test<T: ShmemInt>(&self, ivar: Sym, cmp: Cmp, value: T) -> Result<bool, ShmemError> {
        self.check_sym("shmem_test", ivar.offset(), u64::from(T::WIDTH))?;
        Ok(cmp.holds(self.read::<T>(ivar, 0)?, value))
    }

    /// Indices of `ivars` (not excluded by `status`, where `status[i]` true excludes) that
    /// compare true now.
    fn satisfied<T: ShmemInt>(
        &self,
        call: &'static str,
        ivars: &[Sym],
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Vec<usize>, ShmemError> {
        if let Some(s) = status.filter(|s| s.len() != ivars.len()) {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!("{} status entries for {} variables", s.len(), ivars.len()),
            });
        }
        let mut out = Vec::new();
        for (i, v) in ivars.iter().enumerate() {
            if status.is_some_and(|s| s[i]) {
                continue;
            }
            self.check_sym(call, v.offset(), u64::from(T::WIDTH))?;
            if cmp.holds(self.read::<T>(*v, 0)?, value) {
                out.push(i);
            }
        }
        Ok(out)
    }

    fn active(ivars: &[Sym], status: Option<&[bool]>) -> usize {
        status.map_or(ivars.len(), |s| s.iter().filter(|&&x| !x).count())
    }

    /// `shmem_wait_until_all`.
    pub async fn wait_until_all<T: ShmemInt>(
        &mut self,
        ivars: &[Sym],
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<(), ShmemError> {
        let want = Self::active(ivars, status);
        while self.satisfied("shmem_wait_until_all", ivars, status, cmp, value)?.len() < want {
            self.woken().await;
        }
        Ok(())
    }

    /// `shmem_wait_until_any`: the index of one satisfied variable (the lowest), or None when
    /// every variable is excluded.
    pub async fn wait_until_any<T: ShmemInt>(
        &mut self,
        ivars: &[Sym],
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Option<usize>, ShmemError> {
        if Self::active(ivars, status) == 0 {
            return Ok(None);
        }
        loop {
            if let Some(&i) = self
                .satisfied("shmem_wait_until_any", ivars, status, cmp, value)?
                .first()
            {
                return Ok(Some(i));
            }
            self.woken().await;
        }
    }

    /// `shmem_wait_until_some`: the indices of all satisfied variables (at least one).
    pub async fn wait_until_some<T: ShmemInt>(
        &mut self,
        ivars: &[Sym],
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Vec<usize>, ShmemError> {
        if Self::active(ivars, status) == 0 {
            return Ok(Vec::new());
        }
        loop {
            let s = self.satisfied("shmem_wait_until_some", ivars, status, cmp, value)?;
            if !s.is_empty() {
                return Ok(s);
            }
            self.woken().await;
        }
    }

    /// `shmem_test_all`.
    pub fn test_all<T: ShmemInt>(
        &self,
        ivars: &[Sym],
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<bool, ShmemError> {
        Ok(self.satisfied("shmem_test_all", ivars, status, cmp, value)?.len() == Self::active(ivars, status))
    }

    /// `shmem_test_any`.
    pub fn test_any<T: ShmemInt>(
        &self,
        ivars: &[Sym],
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Option<usize>, ShmemError> {
        Ok(self
            .satisfied("shmem_test_any", ivars, status, cmp, value)?
            .first()
            .copied())
    }

    /// `shmem_test_some`.
    pub fn test_some<T: ShmemInt>(
        &self,
        ivars: &[Sym],
        status: Option<&[bool]>,
        cmp: Cmp,
        value: T,
    ) -> Result<Vec<usize>, ShmemError> {
        self.satisfied("shmem_test_some", ivars, status, cmp, value)
    }

    // ---- signals --------------------------------------------------------------------------

    /// `shmem_putmem_signal`: put `src` into `pe`'s `dest`, then update `pe`'s 64-bit `sig`
    /// (set to `signal`, or add it) — the signal is seen only after the data. With ordered
    /// delivery the signal simply follows the data; otherwise this PE waits for the data's
    /// acknowledgement first.
    pub async fn put_signal(
        &mut self,
        dest: Sym,
        src: &[u8],
        sig: Sym,
        signal: u64,
        add: bool,
        pe: usize,
    ) -> Result<(), ShmemError> {
        let call = "shmem_put_signal";
        self.check_sym(call, sig.offset(), 8)?;
        self.put_bytes(dest, src, pe).await?;
        if !self.shared.in_order {
            self.drain_writes().await?;
        }
        if add {
            self.atomic_add::<u64>(sig, signal, pe).await
        } else {
            self.atomic_set::<u64>(sig, signal, pe).await
        }
    }

    /// `shmem_signal_wait_until`: wait until this PE's `sig` compares true with `value`; its
    /// value then.
    pub async fn signal_wait_until(&mut self, sig: Sym, cmp: Cmp, value: u64) -> Result<u64, ShmemError> {
        self.wait_until::<u64>(sig, cmp, value).await?;
        self.read::<u64>(sig, 0)
    }

    /// `shmem_signal_fetch`: this PE's `sig` now.
    pub fn signal_fetch(&self, sig: Sym) -> Result<u64, ShmemError> {
        self.read::<u64>(sig, 0)
    }

    // ---- locks ----------------------------------------------------------------------------

    fn lock_word(&self, call: &'static str, lock: Sym) -> Result<RemoteBuf, ShmemError> {
        self.check_sym(call, lock.offset(), 8)?;
        if !lock.offset().is_multiple_of(8) {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!("lock at offset {:#x} is not 8-byte aligned", lock.offset()),
            });
        }
        Ok(self.heap_remote(0, lock.offset()))
    }

    fn lock_code(&self, slot: u64) -> u64 {
        ((self.me as u64 + 1) << 8) | slot
    }

    fn node(slot: u64) -> (u64, u64) {
        let base = LOCK_NODES + slot * 16;
        (base, base + 8)
    }

    fn free_slot(&self, call: &'static str) -> Result<u64, ShmemError> {
        (0..LOCK_SLOTS)
            .find(|s| !self.locks.values().any(|v| v == s))
            .ok_or(ShmemError::BadArgument {
                call,
                reason: format!("more than {LOCK_SLOTS} locks held at once by PE {}", self.me),
            })
    }

    /// The lock word of `lock` on PE 0 and a fresh MCS node of this PE for it (its `locked`
    /// word set to `locked`, no successor): (word, node slot, this PE's code for the node).
    fn lock_node(&mut self, call: &'static str, lock: Sym, locked: u64) -> Result<(RemoteBuf, u64, u64), ShmemError> {
        let word = self.lock_word(call, lock)?;
        if self.locks.contains_key(&lock.offset()) {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!("PE {} already holds the lock at offset {:#x}", self.me, lock.offset()),
            });
        }
        let slot = self.free_slot(call)?;
        let (l, next) = Self::node(slot);
        self.set_sync_word(l, locked);
        self.set_sync_word(next, 0);
        Ok((word, slot, self.lock_code(slot)))
    }

    /// `shmem_set_lock`: acquire the lock `lock` (a symmetric 64-bit word, zero when free; its
    /// copy on PE 0 is used) — an MCS queue lock: swap this PE's code into the lock word, and
    /// if it was taken, link behind the previous holder and wait to be handed the lock.
    pub async fn set_lock(&mut self, lock: Sym) -> Result<(), ShmemError> {
        let call = "shmem_set_lock";
        let (word, slot, code) = self.lock_node(call, lock, 1)?;
        let locked = Self::node(slot).0;
        self.locks.insert(lock.offset(), slot);
        let old = self
            .amo::<u64>(call, AtomicOp::Swap, word, (code, 0), 0, true)
            .await?
            .expect("fetching");
        if old != 0 {
            let (pred, pslot) = ((old >> 8) as usize - 1, old & 0xff);
            self.sync_put(pred, Self::node(pslot).1, code).await?;
            while self.sync_word(locked) != 0 {
                self.woken().await;
            }
        }
        Ok(())
    }

    /// `shmem_test_lock`: take the lock if it is free; false when taken here (OpenSHMEM's 0),
    /// true when another PE holds it.
    pub async fn test_lock(&mut self, lock: Sym) -> Result<bool, ShmemError> {
        let call = "shmem_test_lock";
        let (word, slot, code) = self.lock_node(call, lock, 0)?;
        let old = self
            .amo::<u64>(call, AtomicOp::CompareSwap, word, (code, 0), 0, true)
            .await?
            .expect("fetching");
        if old == 0 {
            self.locks.insert(lock.offset(), slot);
            Ok(false)
        } else {
            Ok(true)
        }
    }

    /// `shmem_clear_lock`: complete this PE's writes (quiet), then release: hand the lock to
    /// the PE queued behind, or mark it free.
    pub async fn clear_lock(&mut self, lock: Sym) -> Result<(), ShmemError> {
        let call = "shmem_clear_lock";
        let word = self.lock_word(call, lock)?;
        let Some(slot) = self.locks.remove(&lock.offset()) else {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!("PE {} does not hold the lock at offset {:#x}", self.me, lock.offset()),
            });
        };
        self.quiet().await?;
        let (_, next) = Self::node(slot);
        let code = self.lock_code(slot);
        if self.sync_word(next) == 0 {
            let old = self
                .amo::<u64>(call, AtomicOp::CompareSwap, word, (0, code), 0, true)
                .await?
                .expect("fetching");
            if old == code {
                return Ok(());
            }
            // A PE swapped itself in behind: wait until it links.
            while self.sync_word(next) == 0 {
                self.woken().await;
            }
        }
        let succ = self.sync_word(next);
        let (pe, sslot) = ((succ >> 8) as usize - 1, succ & 0xff);
        self.sync_put(pe, Self::node(sslot).0, 0).await
    }
}
