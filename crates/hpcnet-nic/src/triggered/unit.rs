//! The offload units of one NIC (spec 04, "Order-preserving triggering": several offload
//! units per NIC, sequences load-balanced across them, a unit time-sharing several
//! collectives, all descriptors of a sequence in one unit).
//!
//! This module owns the assignment of posted sequences to units, the routing of arriving
//! packets to the unit whose sequence awaits them, each unit's shared hash buffer, and the
//! limits of the paper's test bed: 8 units per NIC, 16 incoming streams per collective on a
//! unit, 32 concurrent collectives per NIC, 512 KB of buffer per unit ([`UnitsConfig`]). It is
//! untimed: the caller ([`super::timed`] in the World) decides when things happen and charges
//! the work each call fired ([`OffloadUnits::work`]).
//!
//! **Assignment.** A posted sequence (CH … CT, checked by [`Walker::new`]) of job J on VP v
//! goes to the unit with the fewest sequences (ties: lowest index) and stays there until it
//! completes. Refused with a [`UnitError`]: more than `max_collectives` sequences on the NIC,
//! a sequence with more distinct senders than `streams`, a second sequence of one job on one
//! VP.
//!
//! **Arrival.** A packet for (J, v) goes into the buffer of the unit holding that sequence; a
//! packet whose sequence is not posted yet waits at the NIC until it is (counted as early),
//! then enters the unit's buffer when the sequence is posted.
//! A full buffer refuses the packet, which the caller keeps (back-pressure) and offers again.
//!
//! **Time-sharing.** After every post or arrival the unit reads, for each of its sequences in
//! order of job and VP, the keys the sequence's current step awaits (absent keys are parked),
//! and fires what is complete; a sequence's parked read never blocks another sequence's.
//!
//! Cost: O(1) to route a packet to its sequence (a table per VP, indexed by JobID, names the
//! sequence's place among the NIC's live sequences; a parked read names that place too),
//! O(probe length) in the buffer, O(keys of the step) per pump of the one sequence that
//! moves.

use super::desc::{BufPool, CollDescriptor, DescError, TrigAction, TrigPacket, WalkError, Walker, Work};
use super::hashbuf::{HashBuf, HashBufConfig, HashBufConfigError, HashBufError, HashBufStats, Inserted, Read};
use super::key::{PacketKey, JOB_BITS, VP_BITS};
use std::collections::BTreeMap;

/// Limits of a NIC's offload units.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UnitsConfig {
    /// Offload units per NIC (the paper: 8).
    pub units: u32,
    /// Distinct senders one collective's sequence may have on a unit (the paper: 16).
    pub streams: u32,
    /// Sequences in progress per NIC (the paper: 32 concurrent collectives).
    pub max_collectives: u32,
    /// Each unit's buffer (the paper: 512 KB).
    pub buffer: HashBufConfig,
}

impl Default for UnitsConfig {
    fn default() -> Self {
        UnitsConfig {
            units: 8,
            streams: 16,
            max_collectives: 32,
            buffer: HashBufConfig::default(),
        }
    }
}

/// Refusals of the offload units.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("offload units: units = 0")]
    NoUnits,
    #[error("{0}")]
    Buffer(HashBufConfigError),
    #[error("VP {vp}: {source}")]
    Sequence { vp: u32, source: DescError },
    #[error("VP {vp}, JobID {job}: outside the key's fields (VP below 2048, JobID below 256)")]
    OutOfRange { job: u32, vp: u32 },
    #[error("VP {vp}: job {job} already has a sequence on this VP")]
    JobBusy { job: u32, vp: u32 },
    #[error("VP {vp}: {max} collectives already in progress on this NIC (the offload units are exhausted)")]
    TooManyCollectives { vp: u32, max: u32 },
    #[error("VP {vp}: job {job} receives from {senders} senders, a unit takes {streams} streams per collective")]
    TooManyStreams {
        job: u32,
        vp: u32,
        senders: usize,
        streams: u32,
    },
    #[error("unit {unit}: {source}")]
    Buf { unit: usize, source: HashBufError },
    #[error("unit {unit}, job {job}, VP {vp}: {source}")]
    Walk {
        unit: usize,
        job: u32,
        vp: u32,
        source: WalkError,
    },
}

/// An action of a sequence, with where it ran.
#[derive(Clone, Debug, PartialEq)]
pub struct UnitAction {
    pub unit: usize,
    pub vp: u32,
    pub action: TrigAction,
}

struct SeqState {
    /// Where the sequence runs: its unit, JobID and VP.
    unit: usize,
    at: (u32, u32),
    walker: Walker,
    /// Keys of the current step (`issued_step`) read from the buffer already, by position
    /// (a step waits for at most 31 packets: CPCount has 5 bits).
    issued: u32,
    issued_step: usize,
}

struct Unit {
    /// The buffer; a parked read names its sequence's place in [`OffloadUnits`]' `seqs`.
    buf: HashBuf<TrigPacket, u32>,
    /// Sequences in progress here.
    seqs: usize,
    /// Work of the sequences fired here (finished ones included).
    work: Work,
}

/// The offload units of one NIC.
pub struct OffloadUnits {
    node: u32,
    cfg: UnitsConfig,
    units: Vec<Unit>,
    /// The live sequences of every unit, by place (reused once a sequence ends), the free
    /// places, and per VP the place + 1 of each JobID's live sequence (0: none).
    seqs: Vec<Option<SeqState>>,
    free: Vec<u32>,
    route: Vec<[u32; 256]>,
    active: usize,
    /// Packets whose sequence is not posted yet, by (job, VP), in arrival order.
    early: BTreeMap<(u32, u32), Vec<TrigPacket>>,
    early_count: u64,
    posted: u64,
    /// Per unit: the work already charged by [`OffloadUnits::take_fired`].
    charged: Vec<Work>,
    /// Actions of one walker call (kept to avoid an allocation per call).
    scratch: Vec<TrigAction>,
    /// Data buffers of the packets the units' walks consumed, reused for those they send.
    pool: BufPool,
    /// Units whose buffer may have changed since [`OffloadUnits::take_touched`], and those
    /// that may have fired since [`OffloadUnits::take_fired`]: a bit per unit (all bits: any
    /// unit).
    touched: u64,
    fired: u64,
}

impl OffloadUnits {
    pub fn new(node: u32, cfg: UnitsConfig) -> Result<Self, UnitError> {
        if cfg.units == 0 {
            return Err(UnitError::NoUnits);
        }
        let units = (0..cfg.units)
            .map(|_| {
                Ok(Unit {
                    buf: HashBuf::new(cfg.buffer).map_err(UnitError::Buffer)?,
                    seqs: 0,
                    work: Work::default(),
                })
            })
            .collect::<Result<_, UnitError>>()?;
        Ok(OffloadUnits {
            node,
            cfg,
            units,
            seqs: Vec::new(),
            free: Vec::new(),
            route: Vec::new(),
            active: 0,
            early: BTreeMap::new(),
            early_count: 0,
            posted: 0,
            charged: vec![Work::default(); cfg.units as usize],
            scratch: Vec::new(),
            pool: BufPool::default(),
            touched: 0,
            fired: 0,
        })
    }

    /// Sequences in progress per unit.
    pub fn load(&self) -> Vec<usize> {
        self.units.iter().map(|u| u.seqs).collect()
    }
    /// Sequences in progress on the NIC.
    pub fn active(&self) -> usize {
        self.active
    }
    /// Each unit's buffer statistics.
    pub fn buffer_stats(&self) -> Vec<HashBufStats> {
        self.units.iter().map(|u| u.buf.stats()).collect()
    }
    /// Packets that arrived before their sequence was posted.
    pub fn early_arrivals(&self) -> u64 {
        self.early_count
    }
    /// Packets waiting for their sequence to be posted.
    pub fn waiting_early(&self) -> usize {
        self.early.values().map(Vec::len).sum()
    }
    /// Sequences posted so far.
    pub fn posted(&self) -> u64 {
        self.posted
    }

    /// Work fired per unit so far (steps, bytes reduced per type).
    pub fn work(&self) -> Vec<Work> {
        self.units.iter().map(|u| u.work).collect()
    }

    /// Hand `f` the work each unit fired since the last call (units that fired nothing are
    /// skipped), in unit order; from then on it counts as charged. O(units that ran a walk
    /// since the last call), no allocation.
    pub fn take_fired(&mut self, mut f: impl FnMut(usize, Work)) {
        let mut ran = std::mem::take(&mut self.fired);
        if ran == u64::MAX {
            ran = 0;
            for u in 0..self.units.len() {
                self.charge(u, &mut f);
            }
        }
        while ran != 0 {
            let u = ran.trailing_zeros() as usize;
            ran &= ran - 1;
            self.charge(u, &mut f);
        }
        debug_assert!(
            self.units.iter().zip(&self.charged).all(|(u, c)| u.work == *c),
            "a unit fired without being marked"
        );
    }

    /// The units whose buffer occupancy may have changed since the last call, a bit per unit
    /// (`u64::MAX`: any unit, as when units above the 64th changed); from then on none has.
    pub fn take_touched(&mut self) -> u64 {
        std::mem::take(&mut self.touched)
    }

    fn touch(&mut self, unit: usize) {
        self.touched |= if unit < 64 { 1 << unit } else { u64::MAX };
    }

    /// The place in `seqs` of the live sequence of job `job` on VP `vp`.
    fn place(&self, job: u32, vp: u32) -> Option<u32> {
        let p = *self.route.get(vp as usize)?.get(job as usize)?;
        p.checked_sub(1)
    }

    fn seq(&mut self, place: u32) -> &mut SeqState {
        self.seqs[place as usize]
            .as_mut()
            .expect("a routed place holds a live sequence")
    }

    /// Hand `f` the work unit `u` fired since it was last charged, if any.
    fn charge(&mut self, u: usize, f: &mut impl FnMut(usize, Work)) {
        let (unit, c) = (&self.units[u], &mut self.charged[u]);
        if unit.work.steps != c.steps {
            let w = unit.work.since(c);
            *c = unit.work;
            f(u, w);
        }
    }

    /// Whether a live sequence of job `job` on VP `vp` is in a unit.
    pub fn routes(&self, job: u32, vp: u32) -> bool {
        self.place(job, vp).is_some()
    }

    /// The unit holding the live sequence of job `job` on VP `vp`.
    pub fn unit_of(&self, job: u32, vp: u32) -> Option<usize> {
        let p = self.place(job, vp)?;
        self.seqs[p as usize].as_ref().map(|s| s.unit)
    }

    /// Slots of each unit's buffer.
    pub fn slots(&self) -> u32 {
        self.cfg.buffer.slots
    }

    /// Whether a read of unit `unit` is parked for `key`.
    pub fn awaits(&self, unit: usize, key: PacketKey) -> bool {
        self.units[unit].buf.awaits(key)
    }

    /// Slots in use in unit `unit`'s buffer.
    pub fn occupancy(&self, unit: usize) -> u32 {
        self.units[unit].buf.len() as u32
    }

    /// Post a sequence on VP `vp`; returns what fired at once, and the packets that had
    /// arrived early and that the unit's buffer refuses now (the caller offers them again
    /// through [`OffloadUnits::arrive`]). `fetch(addr, len)` reads local data of address
    /// payloads.
    pub fn post(
        &mut self,
        vp: u32,
        seq: Vec<CollDescriptor>,
        fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>,
    ) -> Result<(Vec<UnitAction>, Vec<TrigPacket>), UnitError> {
        let walker = Walker::new(self.node, seq).map_err(|source| UnitError::Sequence { vp, source })?;
        self.post_walker(vp, walker, fetch)
    }

    /// [`OffloadUnits::post`] of a walk of a sequence checked already (a pulse started from
    /// a checked [`Shape`](super::desc::Shape)).
    pub fn post_walker(
        &mut self,
        vp: u32,
        walker: Walker,
        fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>,
    ) -> Result<(Vec<UnitAction>, Vec<TrigPacket>), UnitError> {
        let mut out = Vec::new();
        let kept = self.post_walker_into(vp, walker, fetch, &mut out)?;
        Ok((out, kept))
    }

    /// [`OffloadUnits::post_walker`] appending what fired to `out` (a caller's reused vector).
    pub fn post_walker_into(
        &mut self,
        vp: u32,
        walker: Walker,
        fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>,
        out: &mut Vec<UnitAction>,
    ) -> Result<Vec<TrigPacket>, UnitError> {
        let job = walker.job();
        let senders = walker.shape().senders();
        if job >= 1 << JOB_BITS || vp >= 1 << VP_BITS {
            return Err(UnitError::OutOfRange { job, vp });
        }
        if self.routes(job, vp) {
            return Err(UnitError::JobBusy { job, vp });
        }
        if self.active >= self.cfg.max_collectives as usize {
            return Err(UnitError::TooManyCollectives {
                vp,
                max: self.cfg.max_collectives,
            });
        }
        if senders > self.cfg.streams as usize {
            return Err(UnitError::TooManyStreams {
                job,
                vp,
                senders,
                streams: self.cfg.streams,
            });
        }
        let unit = (0..self.units.len())
            .min_by_key(|&i| (self.units[i].seqs, i))
            .expect("at least one unit");
        let state = SeqState {
            unit,
            at: (job, vp),
            walker,
            issued: 0,
            issued_step: 0,
        };
        let place = match self.free.pop() {
            Some(p) => {
                self.seqs[p as usize] = Some(state);
                p
            }
            None => {
                self.seqs.push(Some(state));
                (self.seqs.len() - 1) as u32
            }
        };
        if self.route.len() <= vp as usize {
            self.route.resize(vp as usize + 1, [0; 256]);
        }
        self.route[vp as usize][job as usize] = place + 1;
        self.units[unit].seqs += 1;
        self.active += 1;
        self.posted += 1;
        let mut pending = self.early.remove(&(job, vp)).unwrap_or_default();
        // Early arrivals enter the buffer in arrival order; those it refuses go back to the caller.
        let mut kept = Vec::new();
        for p in pending.drain(..) {
            match self.insert(unit, p, fetch, out)? {
                None => {}
                Some(p) => kept.push(p),
            }
        }
        self.pump(place, fetch, out)?;
        Ok(kept)
    }

    /// A sequence ended or was cancelled: free its place.
    fn end(&mut self, place: u32) -> SeqState {
        let s = self.seqs[place as usize].take().expect("a live sequence");
        self.route[s.at.1 as usize][s.at.0 as usize] = 0;
        self.units[s.unit].seqs -= 1;
        self.active -= 1;
        self.free.push(place);
        s
    }

    /// Take the live sequence of job `job` on VP `vp` out of its unit (its collective failed):
    /// its parked reads are cancelled and the packets it would still read are dropped from
    /// the unit's buffer, as are packets waiting for it to be posted. Returns the packets
    /// dropped, or `None` when no such sequence is live. Cost O(keys of the sequence).
    pub fn cancel(&mut self, job: u32, vp: u32) -> Option<usize> {
        let early = self.early.remove(&(job, vp)).map_or(0, |v| v.len());
        let place = self.place(job, vp)?;
        let s = self.end(place);
        self.touch(s.unit);
        let u = &mut self.units[s.unit];
        let dropped = s.walker.remaining_keys().filter(|&k| u.buf.cancel(k).is_some()).count();
        Some(dropped + early)
    }

    /// A packet for this NIC arrived. Returns what fired, and the packet back if the buffer
    /// refused it (the caller keeps it and offers it again later).
    pub fn arrive(
        &mut self,
        p: TrigPacket,
        fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>,
    ) -> Result<(Vec<UnitAction>, Option<TrigPacket>), UnitError> {
        let mut out = Vec::new();
        let refused = self.arrive_into(p, fetch, &mut out)?;
        Ok((out, refused))
    }

    /// [`OffloadUnits::arrive`] appending what fired to `out` (a caller's reused vector).
    pub fn arrive_into(
        &mut self,
        p: TrigPacket,
        fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>,
        out: &mut Vec<UnitAction>,
    ) -> Result<Option<TrigPacket>, UnitError> {
        let at = (p.key.job(), p.dest_vp);
        let Some(unit) = self.unit_of(at.0, at.1) else {
            self.early_count += 1;
            self.early.entry(at).or_default().push(p);
            return Ok(None);
        };
        self.insert(unit, p, fetch, out)
    }

    fn insert(
        &mut self,
        unit: usize,
        p: TrigPacket,
        fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>,
        out: &mut Vec<UnitAction>,
    ) -> Result<Option<TrigPacket>, UnitError> {
        let (key, bytes) = (p.key, p.data.len() as u64);
        self.touch(unit);
        let u = &mut self.units[unit];
        match u
            .buf
            .insert(key, bytes, p)
            .map_err(|source| UnitError::Buf { unit, source })?
        {
            Inserted::Stored { .. } => Ok(None),
            Inserted::Refused(p) => Ok(Some(p)),
            Inserted::Woke { reader, packet } => {
                let s = self.seq(reader);
                let (job, vp) = s.at;
                s.walker
                    .deliver(packet)
                    .map_err(|source| UnitError::Walk { unit, job, vp, source })?;
                self.pump(reader, fetch, out)?;
                Ok(None)
            }
        }
    }

    /// Read and fire for the sequence at `place` until it stops moving. Only the sequence
    /// that was posted or given a packet can move: sequences of one unit share only the
    /// buffer, whose keys carry their JobID and VP, and every other sequence stopped at a read
    /// of a packet that has not arrived. So the unit time-shares its sequences at the cost of
    /// the one that moves, not of all it holds.
    fn pump(
        &mut self,
        place: u32,
        fetch: &mut dyn FnMut(u64, u64) -> Vec<u8>,
        out: &mut Vec<UnitAction>,
    ) -> Result<(), UnitError> {
        let Some(s) = self.seqs[place as usize].as_mut() else {
            return Ok(());
        };
        let (unit, (job, vp)) = (s.unit, s.at);
        let bit = if unit < 64 { 1 << unit } else { u64::MAX };
        self.touched |= bit;
        self.fired |= bit;
        let u = &mut self.units[unit];
        let acts = &mut self.scratch;
        let walk = |source| UnitError::Walk { unit, job, vp, source };
        loop {
            if s.issued_step != s.walker.step() {
                (s.issued, s.issued_step) = (0, s.walker.step());
            }
            for i in 0..s.walker.expected_len() {
                let Some(k) = s.walker.missing_key(i) else { continue };
                let bit = 1u32 << i;
                if s.issued & bit == 0 {
                    s.issued |= bit;
                    let r = u.buf.read(k, place).map_err(|source| UnitError::Buf { unit, source })?;
                    if let Read::Taken(p) = r {
                        s.walker.deliver(p).map_err(walk)?;
                    }
                }
            }
            if !s.walker.ready() {
                // Its step awaits a packet not read yet: nothing fires.
                return Ok(());
            }
            let before = s.walker.step();
            let done_before = s.walker.work();
            acts.clear();
            s.walker.advance_pooled(fetch, acts, &mut self.pool).map_err(walk)?;
            let w = s.walker.work().since(&done_before);
            u.work.steps += w.steps;
            for (a, b) in u.work.reduced.iter_mut().zip(w.reduced) {
                *a += b;
            }
            out.extend(acts.drain(..).map(|action| UnitAction { unit, vp, action }));
            if s.walker.is_done() {
                self.end(place);
                return Ok(());
            }
            // A step may fire without an action; the next step's keys must still be read.
            if s.walker.step() == before {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::desc::{Payload, Source};
    use super::*;
    use crate::coll::{CollOp, CollType};

    const VP: u32 = 1;

    fn no_fetch(_: u64, _: u64) -> Vec<u8> {
        Vec::new()
    }
    fn f64_bytes(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }
    fn contribution(job: u32, node: u32) -> Vec<f64> {
        (0..8u32)
            .map(|j| match (node + j + job) % 3 {
                0 => 1e16 + f64::from(j * job),
                1 => -1e16 + 0.5 * f64::from(node),
                _ => 0.1 * f64::from(node * 3 + job + 1),
            })
            .collect()
    }
    /// Recursive-doubling allreduce of job `job` over nodes 0 … p − 1, all on VP `VP`.
    fn doubling(job: u32, r: u32, p: u32) -> Vec<CollDescriptor> {
        let stages = p.trailing_zeros();
        let new = || CollDescriptor::new(job, CollType::F64, CollOp::Sum);
        let mut d0 = new().send(r ^ 1, VP, 0);
        d0.ch = true;
        d0.swap_local_data = true;
        d0.source_vp = VP;
        d0.payload = Payload::Operands(f64_bytes(&contribution(job, r)));
        let mut seq = vec![d0];
        for s in 1..=stages {
            let mut d = new().wait(
                s - 1,
                &[Source {
                    node: r ^ (1 << (s - 1)),
                    vp: VP,
                }],
            );
            d.reduce_flag = true;
            d.source_vp = VP;
            if s < stages {
                d = d.send(r ^ (1 << s), VP, s);
            } else {
                d.ct = true;
                d.coll_end_flag = true;
            }
            seq.push(d);
        }
        seq
    }
    fn reference(job: u32, p: u32) -> Vec<u8> {
        let mut w: Vec<Vec<f64>> = (0..p).map(|r| contribution(job, r)).collect();
        let mut s = 1;
        while s < p {
            w = (0..p)
                .map(|r| {
                    w[r as usize]
                        .iter()
                        .zip(&w[(r ^ s) as usize])
                        .map(|(a, b)| a + b)
                        .collect()
                })
                .collect();
            s <<= 1;
        }
        f64_bytes(&w[0])
    }
    /// A sequence that waits for one packet that never comes (keeps its slot busy).
    fn waiting(job: u32) -> Vec<CollDescriptor> {
        let mut d = CollDescriptor::new(job, CollType::I64, CollOp::Sum).wait(0, &[Source { node: 99, vp: 0 }]);
        d.ch = true;
        d.ct = true;
        d.coll_end_flag = true;
        vec![d]
    }

    #[test]
    fn sequences_spread_over_units_and_the_limit_is_an_error() {
        let mut n = OffloadUnits::new(0, UnitsConfig::default()).unwrap();
        for job in 0..32 {
            assert_eq!(n.post(VP, waiting(job), &mut no_fetch).unwrap(), (vec![], vec![]));
        }
        assert_eq!(n.load(), vec![4; 8]);
        let e = n.post(VP, waiting(40), &mut no_fetch).unwrap_err();
        assert_eq!(
            e.to_string(),
            "VP 1: 32 collectives already in progress on this NIC (the offload units are exhausted)"
        );
        // Job 5's packet completes it; its unit (5 mod 8) has room again and takes the next one.
        let key = PacketKey::new(5, 99, 0, 0).unwrap();
        let p = TrigPacket {
            key,
            dest: 0,
            dest_vp: VP,
            cp: true,
            end: false,
            addr: None,
            data: vec![],
        };
        let (acts, refused) = n.arrive(p, &mut no_fetch).unwrap();
        assert!(refused.is_none());
        assert_eq!(acts.len(), 1);
        assert_eq!(acts[0].unit, 5);
        assert!(matches!(acts[0].action, TrigAction::Complete { job: 5, .. }));
        assert_eq!(n.active(), 31);
        n.post(VP, waiting(40), &mut no_fetch).unwrap();
        assert_eq!(n.load()[5], 4);
    }

    #[test]
    fn touched_and_fired_units_are_reported_once_and_places_are_reused() {
        let mut n = OffloadUnits::new(0, UnitsConfig::default()).unwrap();
        // Two waiting sequences go to units 0 and 1; posting touches those units and fires
        // nothing (their first step waits).
        n.post(VP, waiting(3), &mut no_fetch).unwrap();
        n.post(VP, waiting(4), &mut no_fetch).unwrap();
        assert_eq!(n.take_touched(), 0b11);
        assert_eq!(n.take_touched(), 0);
        let mut charged = Vec::new();
        n.take_fired(|u, w| charged.push((u, w.steps)));
        assert!(charged.is_empty());
        // Job 4's packet completes it on unit 1: that unit alone is touched and charged one
        // step, once.
        let p = TrigPacket {
            key: PacketKey::new(4, 99, 0, 0).unwrap(),
            dest: 0,
            dest_vp: VP,
            cp: true,
            end: false,
            addr: None,
            data: vec![],
        };
        let mut out = Vec::new();
        assert_eq!(n.arrive_into(p, &mut no_fetch, &mut out).unwrap(), None);
        assert_eq!(out.len(), 1);
        assert_eq!(n.take_touched(), 0b10);
        n.take_fired(|u, w| charged.push((u, w.steps)));
        n.take_fired(|u, w| charged.push((u, w.steps)));
        assert_eq!(charged, vec![(1, 1)]);
        assert_eq!(n.work()[1].steps, 1);
        // Job 4 ended: its place and unit take the next sequence, and it routes there.
        assert!(!n.routes(4, VP));
        n.post(VP, waiting(9), &mut no_fetch).unwrap();
        assert_eq!((n.unit_of(9, VP), n.unit_of(3, VP), n.active()), (Some(1), Some(0), 2));
        assert_eq!(n.seqs.len(), 2, "the ended sequence's place is reused");
        // A VP outside its 11-bit field is refused with the field named, not a panic.
        let e = n.post(1 << 11, waiting(10), &mut no_fetch).unwrap_err();
        assert_eq!(
            e.to_string(),
            "VP 2048, JobID 10: outside the key's fields (VP below 2048, JobID below 256)"
        );
    }

    #[test]
    fn a_cancelled_sequence_leaves_nothing_behind() {
        let mut n = OffloadUnits::new(0, UnitsConfig::default()).unwrap();
        // Node 0 of a 4-node doubling allreduce: its first step sends at once, then it waits
        // for node 1's packet (a parked read); node 2's packet of the next step comes first
        // and takes a slot.
        let (acts, _) = n.post(VP, doubling(5, 0, 4), &mut no_fetch).unwrap();
        assert_eq!(acts.len(), 1);
        let unit = n.unit_of(5, VP).unwrap();
        let later = TrigPacket {
            key: PacketKey::new(5, 2, VP, 1).unwrap(),
            dest: 0,
            dest_vp: VP,
            cp: false,
            end: false,
            addr: None,
            data: vec![0; 64],
        };
        assert_eq!(n.arrive(later, &mut no_fetch).unwrap(), (vec![], None));
        assert_eq!(n.occupancy(unit), 1);
        assert!(n.awaits(unit, PacketKey::new(5, 1, VP, 0).unwrap()));
        assert_eq!(n.cancel(5, VP), Some(1));
        assert_eq!(n.cancel(5, VP), None);
        assert_eq!((n.occupancy(unit), n.active(), n.load()[unit]), (0, 0, 0));
        assert!(!n.awaits(unit, PacketKey::new(5, 1, VP, 0).unwrap()));
        let s = n.buffer_stats()[unit];
        assert_eq!((s.discarded, s.cancelled_reads), (1, 1));
        // The job and VP are free again.
        n.post(VP, doubling(5, 0, 4), &mut no_fetch).unwrap();
    }

    #[test]
    fn streams_and_busy_jobs_are_refused() {
        let mut n = OffloadUnits::new(0, UnitsConfig::default()).unwrap();
        let from: Vec<Source> = (0..17).map(|i| Source { node: i + 1, vp: 0 }).collect();
        let mut d = CollDescriptor::new(7, CollType::I64, CollOp::Sum).wait(0, &from);
        d.ch = true;
        d.ct = true;
        d.coll_end_flag = true;
        d.reduce_flag = true;
        let e = n.post(VP, vec![d], &mut no_fetch).unwrap_err();
        assert_eq!(
            e.to_string(),
            "VP 1: job 7 receives from 17 senders, a unit takes 16 streams per collective"
        );
        n.post(VP, waiting(7), &mut no_fetch).unwrap();
        assert_eq!(
            n.post(VP, waiting(7), &mut no_fetch).unwrap_err(),
            UnitError::JobBusy { job: 7, vp: VP }
        );
        n.post(VP + 1, waiting(7), &mut no_fetch).unwrap();
        let mut bad = waiting(8);
        bad[0].ch = false;
        assert!(n
            .post(VP, bad, &mut no_fetch)
            .unwrap_err()
            .to_string()
            .starts_with("VP 1: descriptor 0"));
        let cfg = UnitsConfig {
            units: 0,
            ..UnitsConfig::default()
        };
        assert_eq!(OffloadUnits::new(0, cfg).err(), Some(UnitError::NoUnits));
    }

    /// 8 NICs run 32 concurrent recursive-doubling allreduces with two small units each;
    /// sequences are posted at random moments (packets may arrive before their sequence), packets
    /// are delivered in random order and refused ones are offered again. Every job's result is
    /// bit-identical on every node, equal to the reference, whatever the seed.
    #[test]
    fn concurrent_allreduces_through_shared_units_are_bit_identical() {
        let p = 8u32;
        let jobs = 32u32;
        let cfg = UnitsConfig {
            units: 2,
            streams: 16,
            max_collectives: 32,
            buffer: HashBufConfig {
                capacity: 6 * 128,
                slots: 6,
            },
        };
        let mut refused_total = 0;
        let mut early_total = 0;
        for seed in 0..6u64 {
            let mut nics: Vec<OffloadUnits> = (0..p).map(|r| OffloadUnits::new(r, cfg).unwrap()).collect();
            let mut to_post: Vec<(u32, u32)> = (0..jobs).flat_map(|j| (0..p).map(move |r| (j, r))).collect();
            let mut flight: Vec<TrigPacket> = vec![];
            let mut results: BTreeMap<(u32, u32), Vec<u8>> = BTreeMap::new();
            let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = |m: usize| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % m as u64) as usize
            };
            let mut handle = |node: u32, acts: Vec<UnitAction>, flight: &mut Vec<TrigPacket>| {
                for a in acts {
                    match a.action {
                        TrigAction::Send(pkt) => flight.push(pkt),
                        TrigAction::Complete { job, data, .. } => {
                            assert!(results.insert((job, node), data).is_none());
                        }
                    }
                }
            };
            let mut stalls = 0;
            while !to_post.is_empty() || !flight.is_empty() {
                let post = !to_post.is_empty() && (flight.is_empty() || next(4) == 0);
                if post {
                    let (job, r) = to_post.swap_remove(next(to_post.len()));
                    let (acts, back) = nics[r as usize].post(VP, doubling(job, r, p), &mut no_fetch).unwrap();
                    handle(r, acts, &mut flight);
                    refused_total += back.len();
                    flight.extend(back);
                    continue;
                }
                let pkt = flight.swap_remove(next(flight.len()));
                let d = pkt.dest;
                let (acts, back) = nics[d as usize].arrive(pkt, &mut no_fetch).unwrap();
                handle(d, acts, &mut flight);
                if let Some(b) = back {
                    refused_total += 1;
                    stalls += 1;
                    assert!(stalls < 100_000, "no progress");
                    flight.push(b);
                } else {
                    stalls = 0;
                }
            }
            for job in 0..jobs {
                let want = reference(job, p);
                for r in 0..p {
                    assert_eq!(results[&(job, r)], want, "seed {seed} job {job} node {r}");
                }
            }
            for n in &nics {
                assert_eq!((n.active(), n.waiting_early()), (0, 0));
                assert_eq!(n.posted(), u64::from(jobs));
                early_total += n.early_arrivals();
                for s in n.buffer_stats() {
                    assert_eq!((s.occupancy, s.stored), (0, s.taken));
                    assert!(s.peak_occupancy <= 6);
                }
            }
        }
        // The scenario does exercise back-pressure and early arrivals.
        assert!(
            refused_total > 0 && early_total > 0,
            "refused {refused_total}, early {early_total}"
        );
    }
}
