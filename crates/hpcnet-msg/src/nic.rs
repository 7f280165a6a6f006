//! The narrow interface between the message library and a NIC model.
//!
//! Everything the verbs layer asks of a NIC goes through [`NicBackend`]: register and touch host
//! memory, create queues, post work (and hardware collective groups and descriptors, and
//! triggered offload collectives on virtual ports), poll
//! completions, set timers, and advance the model one
//! event at a time, collecting [`Notice`]s (a completion queue got an entry, a timer expired)
//! that the library turns into task wake-ups. [`World`] is the simulated implementation; a test
//! can drive the library against a stub, and another backend (real shared memory, a real
//! network) could run the same rank programs.

use hpcnet_des::SimTime;
use hpcnet_fabric::net::Blocked;
use hpcnet_nic::triggered::{TrigP2p, TrigPost};
use hpcnet_nic::{
    CollDesc, CollType, CqId, Cqe, ExternalBytes, GroupId, MemoryError, Notice, PostError, QpNum, Rank, Request, RqId,
    TimerId, World,
};

/// What the message library needs of a NIC model.
pub trait NicBackend {
    /// Simulated now.
    fn now(&self) -> SimTime;
    /// Number of ranks.
    fn ranks(&self) -> usize;
    /// Register `len` zeroed bytes of `rank`'s memory: (address, key).
    fn register(&mut self, rank: Rank, len: u64) -> (u64, u32);
    /// Register memory outside the model (it keeps its bytes) as a region of `rank`'s memory:
    /// (address, key).
    fn register_external(&mut self, rank: Rank, bytes: Box<dyn ExternalBytes>) -> (u64, u32);
    /// Register a sparse region of `len` bytes of `rank`'s memory of which only the first
    /// `keep` bytes of every `stride`-byte slot are held (the rest reads as zero):
    /// (address, key). See [`hpcnet_nic::Memory::register_sparse`].
    fn register_sparse(&mut self, rank: Rank, len: u64, stride: u64, keep: u64) -> (u64, u32);
    /// CPU load from `rank`'s memory.
    fn load(&self, rank: Rank, addr: u64, len: u64) -> Result<Vec<u8>, MemoryError>;
    /// CPU load of `out.len()` bytes from `rank`'s memory into `out` (no allocation).
    fn load_into(&self, rank: Rank, addr: u64, out: &mut [u8]) -> Result<(), MemoryError> {
        let v = self.load(rank, addr, out.len() as u64)?;
        out.copy_from_slice(&v);
        Ok(())
    }
    /// CPU load of `len` bytes from `rank`'s memory, appended to `out`.
    fn load_append(&self, rank: Rank, addr: u64, len: u64, out: &mut Vec<u8>) -> Result<(), MemoryError> {
        out.extend_from_slice(&self.load(rank, addr, len)?);
        Ok(())
    }
    /// CPU store into `rank`'s memory.
    fn store(&mut self, rank: Rank, addr: u64, bytes: &[u8]) -> Result<(), MemoryError>;
    /// `rank` no longer needs the bytes of `[addr, addr + len)`: a sparse region gives back
    /// the stores of the slots inside it ([`hpcnet_nic::Memory::discard`]).
    fn discard(&mut self, rank: Rank, addr: u64, len: u64) -> Result<(), MemoryError>;
    /// A new queue-pair number.
    fn alloc_qp(&mut self) -> QpNum;
    /// A new completion queue of `owner`.
    fn create_cq(&mut self, owner: Rank) -> CqId;
    /// A new receive queue of `owner` completing on `cq`.
    fn create_rq(&mut self, owner: Rank, cq: CqId) -> Result<RqId, PostError>;
    /// Post a receive buffer to `rq`.
    fn post_recv(&mut self, rq: RqId, addr: u64, len: u64, wr_id: u64) -> Result<(), PostError>;
    /// Post `count` receive buffers of `len` bytes back to back from `addr` to `rq`, with
    /// receive ids `first_wr_id..first_wr_id + count`: the same as `count` calls of
    /// [`NicBackend::post_recv`] in address order (a model may hold them as one entry).
    fn post_recv_run(&mut self, rq: RqId, addr: u64, len: u64, count: u64, first_wr_id: u64) -> Result<(), PostError> {
        for i in 0..count {
            self.post_recv(rq, addr + i * len, len, first_wr_id + i)?;
        }
        Ok(())
    }
    /// Size of one NAP pool buffer (0: the NIC has no NAP).
    fn nap_buffer_size(&self) -> u64;
    /// Pre-post `count` NAP pool buffers of `rank` from `addr`, completing on `cq`.
    fn post_nap_buffers(&mut self, rank: Rank, addr: u64, count: u64, cq: CqId) -> Result<(), PostError>;
    /// Give a consumed NAP buffer back to the pool.
    fn repost_nap_buffer(&mut self, rank: Rank, addr: u64);
    /// Hand a work request to the NIC (the doorbell rings now).
    fn post(&mut self, req: Request) -> Result<(), PostError>;
    /// Take the oldest entry of `cq`.
    fn poll_cq(&mut self, cq: CqId) -> Option<Cqe>;
    /// A timer of `rank` expiring at `t`.
    fn set_timer(&mut self, rank: Rank, t: SimTime) -> TimerId;
    /// Handle the next event; false when none is left.
    fn step(&mut self) -> bool;
    /// Notices of the steps so far, in order.
    fn take_notices(&mut self, out: &mut Vec<Notice>);
    /// Events handled so far.
    fn events(&self) -> u64;
    /// How long work in flight has not moved (None: nothing in flight).
    fn stalled_for(&self) -> Option<SimTime> {
        None
    }
    /// The watchdog's time ran out: whether work in flight is stuck, not just slow (when it is
    /// only slow the backend restarts its [`NicBackend::stalled_for`] clock). Default: stuck.
    fn confirm_stall(&mut self) -> bool {
        true
    }
    /// Deadlock watchdog limit.
    fn watchdog(&self) -> SimTime {
        SimTime::MAX
    }
    /// Packets in the network or waiting at its sources.
    fn packets_in_network(&self) -> u64 {
        0
    }
    /// Channels whose head packet waits (deadlock reports).
    fn blocked(&self, limit: usize) -> Vec<Blocked> {
        let _ = limit;
        Vec::new()
    }
    /// Report the NIC's writes into the region of `rank`'s memory with key `rkey` as
    /// [`Notice::Memory`], and count them; false when the model cannot (then programs cannot
    /// wait for memory to change).
    fn watch_memory(&mut self, rank: Rank, rkey: u32) -> bool {
        let _ = (rank, rkey);
        false
    }
    /// Messages and atomics landed so far in the watched region `rkey` of `rank`.
    fn memory_writes(&self, rank: Rank, rkey: u32) -> u64 {
        let _ = (rank, rkey);
        0
    }
    /// A further key for `rank`'s region of key `rkey` (same bytes; arrivals are counted per
    /// key), or None when the model has no such region or cannot.
    fn add_key(&mut self, rank: Rank, rkey: u32) -> Option<u32> {
        let _ = (rank, rkey);
        None
    }
    /// Whether messages from one rank to one peer on one queue pair land in posting order.
    /// False unless the model guarantees it.
    fn in_order(&self) -> bool {
        false
    }
    /// Read and atomic requests `rank` has posted whose answer has not come back (the NIC's
    /// outstanding-read counter), or `None` when the model keeps no such counter.
    fn outstanding_reads(&self, rank: Rank) -> Option<u32> {
        let _ = rank;
        None
    }
    /// Create a hardware collective group of `members` (in communicator order), programming
    /// the routers' multicast tables; a model without a collective unit refuses.
    fn coll_group(&mut self, members: &[Rank]) -> Result<GroupId, String> {
        let _ = members;
        Err("this NIC model has no hardware collective unit".into())
    }
    /// Post `rank`'s descriptor of its next hardware collective on `desc.group`.
    fn post_coll(&mut self, rank: Rank, desc: CollDesc) -> Result<(), PostError> {
        let _ = (rank, desc);
        Err(PostError::NoCollectiveUnit)
    }
    /// Open a virtual port of the triggered offload unit for `rank`; returns the NodeID of its
    /// NIC and its VP number. A model without the unit refuses.
    fn trig_open_vp(&mut self, rank: Rank) -> Result<(u32, u32), PostError> {
        let _ = rank;
        Err(PostError::NoOffloadUnit)
    }
    /// Elements of one pulse of the offload unit for elements of `dtype`.
    fn trig_pulse_elements(&self, dtype: CollType) -> Result<u64, PostError> {
        let _ = dtype;
        Err(PostError::NoOffloadUnit)
    }
    /// Post `rank`'s whole offloaded collective (its descriptor sequences) on its VP.
    fn post_trig(&mut self, rank: Rank, post: TrigPost) -> Result<(), PostError> {
        let _ = (rank, post);
        Err(PostError::NoOffloadUnit)
    }
    /// Post `rank`'s point-to-point descriptor (MP or RDMA, C = 0) on its VP.
    fn post_trig_p2p(&mut self, rank: Rank, desc: TrigP2p) -> Result<(), PostError> {
        let _ = (rank, desc);
        Err(PostError::NoOffloadUnit)
    }
}

impl NicBackend for World {
    fn now(&self) -> SimTime {
        World::now(self)
    }
    fn ranks(&self) -> usize {
        World::ranks(self)
    }
    fn register(&mut self, rank: Rank, len: u64) -> (u64, u32) {
        self.memory_mut(rank).register(len)
    }
    fn register_external(&mut self, rank: Rank, bytes: Box<dyn ExternalBytes>) -> (u64, u32) {
        self.memory_mut(rank).register_external(bytes)
    }
    fn register_sparse(&mut self, rank: Rank, len: u64, stride: u64, keep: u64) -> (u64, u32) {
        self.memory_mut(rank).register_sparse(len, stride, keep)
    }
    fn load(&self, rank: Rank, addr: u64, len: u64) -> Result<Vec<u8>, MemoryError> {
        self.memory(rank).read(addr, len).map(std::borrow::Cow::into_owned)
    }
    fn load_into(&self, rank: Rank, addr: u64, out: &mut [u8]) -> Result<(), MemoryError> {
        self.memory(rank).read_into(addr, out)
    }
    fn load_append(&self, rank: Rank, addr: u64, len: u64, out: &mut Vec<u8>) -> Result<(), MemoryError> {
        self.memory(rank).read_append(addr, len, out)
    }
    fn store(&mut self, rank: Rank, addr: u64, bytes: &[u8]) -> Result<(), MemoryError> {
        self.memory_mut(rank).write(addr, bytes)
    }
    fn discard(&mut self, rank: Rank, addr: u64, len: u64) -> Result<(), MemoryError> {
        self.memory_mut(rank).discard(addr, len)
    }
    fn alloc_qp(&mut self) -> QpNum {
        World::alloc_qp(self)
    }
    fn create_cq(&mut self, owner: Rank) -> CqId {
        World::create_cq(self, owner)
    }
    fn create_rq(&mut self, owner: Rank, cq: CqId) -> Result<RqId, PostError> {
        World::create_rq(self, owner, cq)
    }
    fn post_recv(&mut self, rq: RqId, addr: u64, len: u64, wr_id: u64) -> Result<(), PostError> {
        World::post_recv(self, rq, addr, len, wr_id)
    }
    fn nap_buffer_size(&self) -> u64 {
        self.config().nap_buffer.0
    }
    fn post_nap_buffers(&mut self, rank: Rank, addr: u64, count: u64, cq: CqId) -> Result<(), PostError> {
        World::post_nap_buffers(self, rank, addr, count, cq)
    }
    fn repost_nap_buffer(&mut self, rank: Rank, addr: u64) {
        World::repost_nap_buffer(self, rank, addr)
    }
    fn post(&mut self, req: Request) -> Result<(), PostError> {
        World::post(self, req)
    }
    fn watch_memory(&mut self, rank: Rank, rkey: u32) -> bool {
        World::watch_memory(self, rank, rkey);
        true
    }
    fn memory_writes(&self, rank: Rank, rkey: u32) -> u64 {
        World::memory_writes(self, rank, rkey)
    }
    fn add_key(&mut self, rank: Rank, rkey: u32) -> Option<u32> {
        self.memory_mut(rank).add_key(rkey)
    }
    fn in_order(&self) -> bool {
        World::in_order(self)
    }
    fn outstanding_reads(&self, rank: Rank) -> Option<u32> {
        Some(World::outstanding_reads(self, rank))
    }
    fn poll_cq(&mut self, cq: CqId) -> Option<Cqe> {
        World::poll_cq(self, cq)
    }
    fn set_timer(&mut self, rank: Rank, t: SimTime) -> TimerId {
        World::set_timer(self, rank, t)
    }
    #[inline]
    fn step(&mut self) -> bool {
        World::step(self)
    }
    #[inline]
    fn take_notices(&mut self, out: &mut Vec<Notice>) {
        World::take_notices(self, out)
    }
    fn events(&self) -> u64 {
        self.events_processed()
    }
    #[inline]
    fn stalled_for(&self) -> Option<SimTime> {
        World::stalled_for(self)
    }
    fn confirm_stall(&mut self) -> bool {
        World::confirm_stall(self)
    }
    fn watchdog(&self) -> SimTime {
        self.network().config().faults.watchdog
    }
    fn packets_in_network(&self) -> u64 {
        World::packets_in_network(self)
    }
    fn blocked(&self, limit: usize) -> Vec<Blocked> {
        World::blocked(self, limit)
    }
    fn coll_group(&mut self, members: &[Rank]) -> Result<GroupId, String> {
        World::coll_group(self, members).map_err(|e| e.to_string())
    }
    fn post_coll(&mut self, rank: Rank, desc: CollDesc) -> Result<(), PostError> {
        World::post_coll(self, rank, desc)
    }
    fn trig_open_vp(&mut self, rank: Rank) -> Result<(u32, u32), PostError> {
        World::trig_open_vp(self, rank)
    }
    fn trig_pulse_elements(&self, dtype: CollType) -> Result<u64, PostError> {
        World::trig_pulse_elements(self, dtype)
    }
    fn post_trig(&mut self, rank: Rank, post: TrigPost) -> Result<(), PostError> {
        World::post_trig(self, rank, post)
    }
    fn post_trig_p2p(&mut self, rank: Rank, desc: TrigP2p) -> Result<(), PostError> {
        World::trig_post_p2p(self, rank, desc)
    }
}
