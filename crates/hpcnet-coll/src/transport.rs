//! Point-to-point messages between the members of a communicator: "send these bytes to member
//! k, receive that many bytes from member j", on RDMA writes with notification.
//!
//! The protocol is an eager one with credits, as MPI libraries use for short messages over
//! RDMA (Liu, Wu and Panda, "High performance RDMA-based MPI implementation over InfiniBand",
//! ICS 2003, section 4: per-connection ring of pre-registered buffers, flow control by credits):
//!
//! - Every ordered pair (sender, receiver) owns `window` landing slots in the receiver's
//!   registered memory and as many staging slots in the sender's. A message is cut into chunks of
//!   at most `chunk` bytes; chunk `i` of a pair goes from staging slot `i mod window` to landing
//!   slot `i mod window` by one RDMA write with notification, preceded by a 32-byte header
//!   (sequence number, call number, call signature, message length, last-chunk flag, and the
//!   root of a broadcast or reduce).
//! - When the notification is taken from the completion queue, the receiver copies the chunk out
//!   of its slot into host memory and gives the slot back with a credit: an 8-byte write with
//!   notification whose `wr_id` names the slot. A sender posts chunk `i` only when slot
//!   `i mod window` is free, so a landing slot is never overwritten before it was read.
//! - Chunks are matched per pair in sequence order (MPI's non-overtaking rule); out-of-order
//!   notifications (adaptive routing, several rails) wait in a per-pair queue until the gap
//!   closes. The header's call number, signature and root make a message of one collective
//!   impossible to take for another's, or for one from another root: a mismatch is reported as
//!   [`CollError::Mismatch`]. The check is made at receipt only: a member that disagrees on
//!   the root may instead wait for a message nobody sends (its parent took another root; no
//!   time-out ends that wait, and the run ends with the rank program waiting), or finish
//!   without receiving, its messages found by a later call that receives from the same peer.
//!
//! **Rendezvous** (`rendezvous`, off by default): a message the receiver keeps as it is (a
//! broadcast or gather step, not one it combines into its own data) of at least `rendezvous`
//! bytes goes as the host-based protocol of spec 04's per-hop broadcast cost: the sender builds
//! a control message (an MP descriptor: one header-only chunk on the eager path naming the
//! registered buffer that holds the data), the receiver takes it from its completion queue,
//! builds an RDMA read descriptor that pulls the whole message into its destination (no copy:
//! the data lands where it is used), polls the read's completion and returns a FIN (an 8-byte
//! write with notification) that releases the sender's buffer. A send completes at its FIN, a
//! receive when the read's data is in. Messages the receiver combines stay eager (spec 04's
//! per-hop reduce cost: one descriptor, the data pushed into the parent's landing slots).
//!
//! When a member finds an error in a call (a mismatch, a failed transfer), it sends every other
//! member an abort notification; a member waiting in a call of this communicator, or entering
//! one later, returns [`CollError::Aborted`] instead of waiting forever for messages that will
//! not come.
//!
//! Simplifications: every chunk is copied out of its landing slot on arrival (even when the
//! receive is already posted, where MPI would copy straight into the user buffer), so a receiver
//! never holds credits back and the transport cannot deadlock whatever the order of calls; large
//! messages use the same eager chunks instead of a rendezvous (zero-copy) protocol; the landing
//! area grows with the number of peers a member exchanges data with (`window × (32 B + chunk)`
//! of landing and as much of staging per peer, registered at the first message), as
//! per-connection eager buffers do; the queue pairs and landing areas are set up on first use
//! at no simulated cost (no connection handshake is modelled).

use crate::{CollError, HostCosts, NoiseClock};
use hpcnet_des::SimTime;
use hpcnet_msg::verbs::{Context, Cq, Mr, Qp, RemoteBuf, WriteWr};
use hpcnet_nic::{Cqe, CqeKind, CqeStatus, Rank};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::rc::Rc;

/// Emptied buffers a transport keeps for arriving chunks, at most.
const POOL_MAX: usize = 64;
/// Bytes of the header in front of every chunk.
pub(crate) const HEADER: usize = 32;
/// `wr_id` bit marking a credit notification (clear: a data chunk); the low bits name the slot.
const CREDIT: u64 = 1 << 63;
/// `wr_id` of an abort notification: the sender found the members in disagreement or its
/// transport failed, and left the call.
const ABORT: u64 = 1 << 62;
/// `wr_id` bit of a FIN notification: the receiver read a rendezvous message; the low bits name
/// the sender's buffer (its token).
const FIN: u64 = 1 << 61;
/// `wr_id` bit of this member's own RDMA reads of rendezvous messages; the low bits name the
/// destination buffer.
const READ: u64 = 1 << 60;
/// Header flag word: last chunk of a message.
const LAST: u32 = 1;
/// Header flag word: a rendezvous control message (the payload names the data's buffer).
const RNDV: u32 = 2;
/// Header flag word: the bits above this shift hold the call's root field ([`Call::root_field`]).
const ROOT_SHIFT: u32 = 8;
/// Payload of a rendezvous control message: address (8 bytes), key (4), token (4).
const RTS_BYTES: usize = 16;

/// Transport parameters of a communicator.
#[derive(Clone, Debug, PartialEq)]
pub struct TransportConfig {
    /// Largest payload of one chunk (one RDMA write). Default 4 KiB — assumption: the eager
    /// buffer size of common MPI libraries over RDMA (MVAPICH2 uses 8–16 KiB eager buffers; a
    /// smaller chunk pipelines large messages through intermediate ranks).
    pub chunk: usize,
    /// Chunks in flight per ordered pair before the sender waits for a credit (and rendezvous
    /// messages in flight per ordered pair before the sender waits for a FIN). Default 4.
    pub window: usize,
    /// Messages the receiver keeps as they are (no reduction) of at least this many bytes go by
    /// rendezvous (control message, RDMA read by the receiver, FIN) instead of eager chunks;
    /// `None` (the default): every message is eager.
    pub rendezvous: Option<usize>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            chunk: 4096,
            window: 4,
            rendezvous: None,
        }
    }
}

/// What a member needs to reach one peer; made on first use (connections on demand, as
/// MVAPICH2 sets them up, without the handshake's cost).
struct Link {
    qp: Qp,
    /// This member's landing slots at the peer (slot 0), registered at the first data chunk.
    land: Option<RemoteBuf>,
    /// This member's staging slots towards the peer.
    stage: Option<Mr>,
    /// This member's credit word at the peer.
    credit: RemoteBuf,
    /// The peer's completion queue, for notifications.
    cq: Cq,
}

/// What the members of a group share from the set-up: how to reach each other's completion
/// queues and credit words, the landing areas registered so far (keyed by (receiver, sender)),
/// and which member each rank is (the exchange of keys a job launcher or a connection handshake
/// does out of band).
struct Directory {
    contexts: Vec<Context>,
    cqs: Vec<Cq>,
    credit_land: Vec<Mr>,
    land: RefCell<BTreeMap<(usize, usize), Mr>>,
    ranks: Rc<[Rank]>,
    /// Communicator index of each member's rank, ordered by rank (binary search).
    rank_index: Vec<(Rank, usize)>,
    /// The first rank, when the members are consecutive ranks in order (member i is rank
    /// first + i: a member is found by a subtraction).
    consecutive: Option<u32>,
}

impl Directory {
    /// The member that is `rank`, if any.
    fn member_of(&self, rank: Rank) -> Option<usize> {
        match self.consecutive {
            Some(first) => {
                let i = rank.0.wrapping_sub(first) as usize;
                (i < self.ranks.len()).then_some(i)
            }
            None => self
                .rank_index
                .binary_search_by_key(&rank, |&(r, _)| r)
                .ok()
                .map(|i| self.rank_index[i].1),
        }
    }
}

/// A chunk copied out of its landing slot, waiting to be matched.
struct Chunk {
    call: u32,
    signature: u32,
    total: u64,
    last: bool,
    /// A rendezvous control message: `data` names the buffer holding the message.
    rndv: bool,
    /// The sender's root field ([`Call::root_field`]).
    root: u32,
    data: Vec<u8>,
}

/// What [`Transport::take`] found for a receive.
enum Taken {
    /// The message is not complete yet.
    Waiting,
    /// The message is complete.
    Done,
    /// A rendezvous control message: read `len` bytes at (`addr`, `rkey`) of the sender, then
    /// send it a FIN naming `token`.
    Rendezvous {
        addr: u64,
        rkey: u32,
        token: u32,
        len: usize,
    },
}

/// The sends and receives of one [`Transport::drive`]: peers (communicator indices), the data
/// of each send and the receive it waits for, the length of each receive and where it goes.
trait Plan {
    fn sends(&self) -> usize;
    fn send_peer(&self, k: usize) -> usize;
    fn send_data(&self, k: usize) -> &[u8];
    /// The receive that must be done before send `k` is posted.
    fn send_after(&self, k: usize) -> Option<usize>;
    fn recvs(&self) -> usize;
    fn recv_peer(&self, k: usize) -> usize;
    fn recv_len(&self, k: usize) -> usize;
    /// Receive `k` is complete with `data` (`recv_len(k)` bytes).
    fn deliver(&mut self, k: usize, data: Vec<u8>);
}

/// [`Transport::exchange`]: separate send buffers, one result per receive.
struct Lists<'a> {
    sends: &'a [(usize, &'a [u8])],
    recvs: &'a [(usize, usize)],
    got: Vec<Vec<u8>>,
}

impl Plan for Lists<'_> {
    fn sends(&self) -> usize {
        self.sends.len()
    }
    fn send_peer(&self, k: usize) -> usize {
        self.sends[k].0
    }
    fn send_data(&self, k: usize) -> &[u8] {
        self.sends[k].1
    }
    fn send_after(&self, _: usize) -> Option<usize> {
        None
    }
    fn recvs(&self) -> usize {
        self.recvs.len()
    }
    fn recv_peer(&self, k: usize) -> usize {
        self.recvs[k].0
    }
    fn recv_len(&self, k: usize) -> usize {
        self.recvs[k].1
    }
    fn deliver(&mut self, k: usize, data: Vec<u8>) {
        self.got[k] = data;
    }
}

/// [`Transport::exchange_one`]: one send and one receive (a ring or butterfly step).
struct One<'a> {
    send: (usize, &'a [u8]),
    recv: (usize, usize),
    got: Vec<u8>,
}

impl Plan for One<'_> {
    fn sends(&self) -> usize {
        1
    }
    fn send_peer(&self, _: usize) -> usize {
        self.send.0
    }
    fn send_data(&self, _: usize) -> &[u8] {
        self.send.1
    }
    fn send_after(&self, _: usize) -> Option<usize> {
        None
    }
    fn recvs(&self) -> usize {
        1
    }
    fn recv_peer(&self, _: usize) -> usize {
        self.recv.0
    }
    fn recv_len(&self, _: usize) -> usize {
        self.recv.1
    }
    fn deliver(&mut self, _: usize, data: Vec<u8>) {
        self.got = data;
    }
}

/// [`Transport::stream`]: ranges of one buffer, sends after receives.
struct Streamed<'a> {
    buf: &'a mut [u8],
    sends: &'a [(usize, Range<usize>, Option<usize>)],
    recvs: &'a [(usize, Range<usize>)],
}

impl Plan for Streamed<'_> {
    fn sends(&self) -> usize {
        self.sends.len()
    }
    fn send_peer(&self, k: usize) -> usize {
        self.sends[k].0
    }
    fn send_data(&self, k: usize) -> &[u8] {
        &self.buf[self.sends[k].1.clone()]
    }
    fn send_after(&self, k: usize) -> Option<usize> {
        self.sends[k].2
    }
    fn recvs(&self) -> usize {
        self.recvs.len()
    }
    fn recv_peer(&self, k: usize) -> usize {
        self.recvs[k].0
    }
    fn recv_len(&self, k: usize) -> usize {
        self.recvs[k].1.len()
    }
    fn deliver(&mut self, k: usize, data: Vec<u8>) {
        self.buf[self.recvs[k].1.clone()].copy_from_slice(&data);
    }
}

/// A list whose first `N` entries are held in place and the others on the heap: the
/// bookkeeping of a call of one send and one receive (a ring or butterfly step) lives in the
/// call's own state, and a member resuming it reads no other memory for it.
struct Few<T, const N: usize> {
    len: usize,
    near: [T; N],
    far: Vec<T>,
}

impl<T: Default, const N: usize> Default for Few<T, N> {
    fn default() -> Self {
        Few {
            len: 0,
            near: std::array::from_fn(|_| T::default()),
            far: Vec::new(),
        }
    }
}

impl<T: Default + PartialEq, const N: usize> Few<T, N> {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, v: T) {
        if self.len < N {
            self.near[self.len] = v;
        } else {
            self.far.push(v);
        }
        self.len += 1;
    }

    /// Keep the first `n` entries (the others are dropped).
    fn truncate(&mut self, n: usize) {
        for x in self.near.iter_mut().take(self.len.min(N)).skip(n) {
            *x = T::default();
        }
        self.far.truncate(n.saturating_sub(N));
        self.len = self.len.min(n);
    }

    fn clear(&mut self) {
        self.truncate(0);
    }

    fn contains(&self, v: &T) -> bool {
        self.near[..self.len.min(N)].contains(v) || self.far.contains(v)
    }
}

impl<T, const N: usize> std::ops::Index<usize> for Few<T, N> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        assert!(i < self.len, "index {i} of a list of {}", self.len);
        if i < N {
            &self.near[i]
        } else {
            &self.far[i - N]
        }
    }
}

impl<T, const N: usize> std::ops::IndexMut<usize> for Few<T, N> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        assert!(i < self.len, "index {i} of a list of {}", self.len);
        if i < N {
            &mut self.near[i]
        } else {
            &mut self.far[i - N]
        }
    }
}

/// Per-call bookkeeping of [`Transport::drive`], one entry per send or receive of the call
/// (each entry's fields side by side, the first send and receive in place); kept in the
/// transport so that the algorithm steps (one call each) allocate nothing for it.
#[derive(Default)]
struct DriveState {
    sends: Few<SendState, 1>,
    recvs: Few<RecvState, 1>,
    /// Peers blocked in the current pass.
    blocked: Few<usize, 2>,
}

/// [`DriveState`] of one send.
#[derive(Clone, Default, PartialEq)]
struct SendState {
    /// Chunks posted.
    posted: usize,
    /// A rendezvous send: the token of the posted control message.
    token: Option<u32>,
    /// Wholly posted (eager) or its FIN came back (rendezvous).
    complete: bool,
}

/// [`DriveState`] of one receive.
#[derive(Default, PartialEq)]
struct RecvState {
    /// Bytes received so far.
    acc: Vec<u8>,
    done: bool,
    /// A rendezvous receive: the read buffer and the sender's token.
    reading: Option<(usize, u32)>,
}

impl DriveState {
    /// Empty entries for `ns` sends and `nr` receives.
    fn reset(&mut self, ns: usize, nr: usize) {
        self.sends.clear();
        for _ in 0..ns {
            self.sends.push(SendState::default());
        }
        self.recvs.truncate(nr);
        for k in 0..self.recvs.len() {
            let r = &mut self.recvs[k];
            r.acc.clear();
            r.done = false;
            r.reading = None;
        }
        for _ in self.recvs.len()..nr {
            self.recvs.push(RecvState::default());
        }
        self.blocked.clear();
    }
}

/// A destination buffer of this member's rendezvous reads.
struct ReadBuf {
    mr: Option<Mr>,
    /// Bytes being read into it (`None`: free).
    len: Option<usize>,
    /// The read's completion has been taken.
    done: bool,
}

/// What the header of every chunk of one collective call carries besides the sequence number.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Call {
    pub name: &'static str,
    /// Call number on this communicator.
    pub number: u32,
    /// Which collective, datatype and operator (each member must pass the same).
    pub signature: u32,
    /// The root member of a broadcast or reduce (each member must pass the same).
    pub root: Option<usize>,
    /// The receivers keep the messages as they are (broadcast, gather and allgather steps), as
    /// opposed to combining them into their own data: such messages may go by rendezvous.
    pub keep: bool,
}

impl Call {
    /// The same call for steps whose receivers keep the data as it is.
    pub fn kept(&self) -> Call {
        Call { keep: true, ..*self }
    }

    /// The root as the header carries it: 0 without a root, else the root's index + 1 modulo
    /// 2^24 (exact for communicators of fewer than 2^24 − 1 members).
    fn root_field(&self) -> u32 {
        self.root
            .map_or(0, |r| (r as u32).wrapping_add(1) & (u32::MAX >> ROOT_SHIFT))
    }
}

/// A set of slot numbers: the first 64 as bits in place, the others on the heap.
#[derive(Default)]
struct SlotSet {
    low: u64,
    high: Vec<bool>,
}

impl SlotSet {
    fn get(&self, s: usize) -> bool {
        match s.checked_sub(64) {
            None => self.low >> s & 1 != 0,
            Some(i) => self.high.get(i).copied().unwrap_or(false),
        }
    }

    fn set(&mut self, s: usize, v: bool) {
        match s.checked_sub(64) {
            None => {
                self.low = self.low & !(1 << s) | u64::from(v) << s;
            }
            Some(i) => {
                if self.high.len() <= i {
                    self.high.resize(i + 1, false);
                }
                self.high[i] = v;
            }
        }
    }
}

/// This member's state towards one peer it has exchanged messages with (made on first use, so
/// a member keeps state for its actual peers only, not for every member).
struct Peer {
    link: Option<Link>,
    /// Next chunk sequence number to the peer.
    send_seq: u64,
    /// Staging/landing slots towards the peer still waiting for their credit.
    busy: SlotSet,
    /// Next chunk sequence number expected from the peer.
    recv_next: u64,
    /// Chunks from the peer not yet matched, at index `seq − recv_next` (a gap: not arrived).
    inbox: VecDeque<Option<Chunk>>,
    /// The peer's landing slots in this member's memory, once its first chunk arrived.
    land_here: Option<Mr>,
    /// Buffers holding this member's rendezvous messages to the peer, and whether each still
    /// waits for its FIN; a message's token is its buffer's index.
    rndv_src: Vec<(Mr, bool)>,
}

/// One member's end of the transport.
pub(crate) struct Transport {
    pub(crate) ctx: Context,
    cq: Cq,
    pos: usize,
    /// The members the algorithms currently see, as communicator indices (all members, or a
    /// subgroup such as the node leaders of a two-level algorithm), and this member's place in
    /// it. Algorithms number peers in this view; `None`: every member, in order.
    view: Option<Vec<usize>>,
    view_me: usize,
    pub(crate) ranks: Rc<[Rank]>,
    /// Index into `peer_state` of each member's state (`u32::MAX`: none yet).
    peer_slot: Vec<u32>,
    /// The last two (member, index into `peer_state`) looked up (`u32::MAX`: none).
    recent: [(u32, u32); 2],
    peer_state: Vec<Peer>,
    dir: Rc<Directory>,
    credit_src: Mr,
    chunk: usize,
    window: usize,
    rendezvous: Option<usize>,
    /// Destination buffers of rendezvous reads, indexed by the low bits of the read's `wr_id`.
    reads: Vec<ReadBuf>,
    /// Emptied chunk buffers, reused for the next arrivals.
    pool: Vec<Vec<u8>>,
    /// Bookkeeping of [`Transport::drive`], kept between calls (one call per algorithm step).
    drive_state: DriveState,
    pub(crate) costs: HostCosts,
    /// Host time charged so far runs until this instant (see [`Transport::owe`]).
    busy_until: Cell<SimTime>,
    /// The detours of this member's CPU (`None`: no operating-system noise).
    noise: Option<RefCell<NoiseClock>>,
    /// The member that aborted the communicator, once one did.
    aborted_by: Option<Rank>,
}

impl Transport {
    /// The transports of all members of a group (`ranks` in communicator order), wired to each
    /// other: registered memory, a completion queue per member, a connected queue pair per pair.
    pub(crate) fn group(contexts: Vec<Context>, cfg: &TransportConfig, costs: &HostCosts) -> Vec<Transport> {
        let n = contexts.len();
        let ranks: Vec<Rank> = contexts.iter().map(Context::rank).collect();
        let ranks = &ranks[..];
        let mut rank_index: Vec<(Rank, usize)> = ranks.iter().enumerate().map(|(i, &r)| (r, i)).collect();
        rank_index.sort_unstable();
        let consecutive = ranks
            .iter()
            .enumerate()
            .all(|(i, r)| u64::from(r.0) == u64::from(ranks[0].0) + i as u64)
            .then(|| ranks.first().map(|r| r.0))
            .flatten();
        let dir = Rc::new(Directory {
            cqs: contexts.iter().map(Context::create_cq).collect(),
            credit_land: contexts.iter().map(|c| c.reg_mr(8 * n as u64)).collect(),
            land: RefCell::new(BTreeMap::new()),
            contexts,
            ranks: ranks.into(),
            rank_index,
            consecutive,
        });
        (0..n)
            .map(|i| Transport {
                ctx: dir.contexts[i].clone(),
                cq: dir.cqs[i].clone(),
                pos: i,
                view: None,
                view_me: i,
                ranks: dir.ranks.clone(),
                peer_slot: vec![u32::MAX; n],
                recent: [(u32::MAX, u32::MAX); 2],
                peer_state: Vec::new(),
                credit_src: dir.contexts[i].reg_mr(8),
                dir: dir.clone(),
                chunk: cfg.chunk,
                window: cfg.window,
                rendezvous: cfg.rendezvous,
                reads: Vec::new(),
                pool: Vec::new(),
                drive_state: DriveState::default(),
                costs: costs.clone(),
                busy_until: Cell::new(SimTime::ZERO),
                noise: costs.noise.clock(costs.noise_seed, dir.ranks[i].0).map(RefCell::new),
                aborted_by: None,
            })
            .collect()
    }

    /// This member's state towards `peer` (a valid member other than this one), made on first
    /// use.
    fn peer(&mut self, peer: usize) -> &mut Peer {
        let slot = self.slot_of(peer);
        &mut self.peer_state[slot]
    }

    /// Index into `peer_state` of this member's state towards `peer`, made on first use; the
    /// last two peers asked for are answered from the transport itself (a ring or butterfly
    /// step has two), the others from `peer_slot`.
    fn slot_of(&mut self, peer: usize) -> usize {
        let key = peer as u32;
        for &(p, slot) in &self.recent {
            if p == key {
                return slot as usize;
            }
        }
        let mut slot = self.peer_slot[peer];
        if slot == u32::MAX {
            slot = self.peer_state.len() as u32;
            self.peer_slot[peer] = slot;
            self.peer_state.push(Peer {
                link: None,
                send_seq: 0,
                busy: SlotSet::default(),
                recv_next: 0,
                inbox: VecDeque::new(),
                land_here: None,
                rndv_src: Vec::new(),
            });
        }
        self.recent = [(key, slot), self.recent[0]];
        slot as usize
    }

    /// This member's index in the communicator.
    pub(crate) fn member(&self) -> usize {
        self.pos
    }

    /// Number of members of the communicator.
    pub(crate) fn members(&self) -> usize {
        self.ranks.len()
    }

    /// This member's index in the current view.
    pub(crate) fn me(&self) -> usize {
        self.view_me
    }

    /// Size of the current view.
    pub(crate) fn size(&self) -> usize {
        self.view.as_ref().map_or(self.ranks.len(), Vec::len)
    }

    /// The communicator index of member `p` of the current view.
    fn in_view(&self, p: usize) -> usize {
        self.view.as_ref().map_or(p, |v| v[p])
    }

    /// Let the algorithms see only `members` (communicator indices, this member among them).
    pub(crate) fn set_view(&mut self, members: Vec<usize>) -> Result<(), CollError> {
        let Some(i) = members.iter().position(|&m| m == self.pos) else {
            return Err(CollError::Transport {
                call: "view",
                reason: format!("member {} is not in the subgroup {members:?}", self.pos),
            });
        };
        self.view = Some(members);
        self.view_me = i;
        Ok(())
    }

    /// See all members again.
    pub(crate) fn clear_view(&mut self) {
        self.view = None;
        self.view_me = self.pos;
    }

    /// Spend `d` of host time now: the member's next action happens `d` after the host time
    /// already owed.
    pub(crate) async fn spend(&self, d: SimTime) {
        self.owe(d);
        self.settle().await;
    }

    /// Charge `d` of host time without waiting for it yet: the member is busy until `d` after
    /// now or after the host time already owed, whichever is later. Work that nothing outside
    /// the member can observe (reading its own landing slots, copying and reducing in its own
    /// memory, bookkeeping) goes on meanwhile; [`Transport::settle`] waits for the owed time
    /// before the member posts work, and before a call returns. A completion taken from the
    /// queue while time is owed is the one the member would have taken at the end of that time
    /// (the queue's oldest entry), and its poll cost is charged from the later of its arrival
    /// and the owed time, so the member's timeline is the one of waiting for each cost in turn
    /// — with one timer for consecutive costs instead of one each.
    ///
    /// Under operating-system noise the interval of `d` is stretched by the detours of this
    /// member's CPU that fall in it ([`NoiseClock::finish`]).
    pub(crate) fn owe(&self, d: SimTime) {
        if d > SimTime::ZERO {
            let start = self.busy_until.get().max(self.ctx.now());
            let end = match &self.noise {
                None => start + d,
                Some(n) => n.borrow_mut().finish(start, d),
            };
            self.busy_until.set(end);
        }
    }

    /// Wait until the host time owed so far has passed.
    pub(crate) async fn settle(&self) {
        let now = self.ctx.now();
        let until = self.busy_until.get();
        if until > now {
            self.ctx.sleep(until - now).await;
        }
    }

    /// Largest payload of one chunk.
    pub(crate) fn chunk(&self) -> usize {
        self.chunk
    }

    /// Bytes of one landing or staging slot: a header and the larger of a chunk and a
    /// rendezvous control payload.
    fn slot_bytes(&self) -> usize {
        HEADER + self.chunk.max(RTS_BYTES)
    }

    /// Give a received message's buffer back for the next arrivals once the algorithm has used
    /// it (a one-chunk message is the chunk's buffer; recycling it saves an allocation per chunk).
    /// The pool keeps at most [`POOL_MAX`] buffers.
    pub(crate) fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.pool.len() < POOL_MAX && buf.capacity() > 0 {
            buf.clear();
            self.pool.push(buf);
        }
    }

    fn chunks(&self, len: usize) -> usize {
        len.div_ceil(self.chunk).max(1)
    }

    /// The link to `peer`, made on first use.
    fn link(&mut self, call: &'static str, peer: usize) -> Result<&mut Link, CollError> {
        if peer >= self.peer_slot.len() || peer == self.pos {
            return Err(CollError::Transport {
                call,
                reason: format!("member {} has no link to member {peer}", self.pos),
            });
        }
        let me = self.pos;
        let dir = self.dir.clone();
        let cq = self.cq.clone();
        let ctx = self.ctx.clone();
        let rank = self.ranks[peer];
        Ok(self.peer(peer).link.get_or_insert_with(|| Link {
            qp: ctx.create_qp(&cq, rank),
            land: None,
            stage: None,
            credit: dir.credit_land[peer].remote(8 * me as u64),
            cq: dir.cqs[peer].clone(),
        }))
    }

    /// Post chunk `part` of `data` to `peer`; its slot is free.
    async fn post_chunk(&mut self, call: &Call, peer: usize, data: &[u8], part: usize) -> Result<(), CollError> {
        let start = part * self.chunk;
        let end = (start + self.chunk).min(data.len());
        let payload = &data[start.min(end)..end];
        let last = part + 1 == self.chunks(data.len());
        self.post_raw(call, peer, payload, data.len() as u64, u32::from(last) * LAST)
            .await
    }

    /// Post one chunk carrying `payload` of a message of `total` bytes to `peer`, with the
    /// header flags `flags`; its slot is free.
    async fn post_raw(
        &mut self,
        call: &Call,
        peer: usize,
        payload: &[u8],
        total: u64,
        flags: u32,
    ) -> Result<(), CollError> {
        let seq = self.peer(peer).send_seq;
        let s = (seq % self.window as u64) as usize;
        self.spend(self.costs.per_post + self.costs.copy(payload.len())).await;
        let area = (self.window * self.slot_bytes()) as u64;
        let off = (s * self.slot_bytes()) as u64;
        let me = self.pos;
        let dir = self.dir.clone();
        let ctx = self.ctx.clone();
        let link = self.link(call.name, peer)?;
        let land = *link.land.get_or_insert_with(|| {
            let mr = dir.contexts[peer].reg_mr(area);
            let remote = mr.remote(0);
            dir.land.borrow_mut().insert((peer, me), mr);
            remote
        });
        let stage = link.stage.get_or_insert_with(|| ctx.reg_mr(area)).clone();
        // Header and payload go into the staging slot as two stores (no intermediate image).
        let mut h = [0u8; HEADER];
        h[0..8].copy_from_slice(&seq.to_le_bytes());
        h[8..12].copy_from_slice(&call.number.to_le_bytes());
        h[12..16].copy_from_slice(&call.signature.to_le_bytes());
        h[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        h[20..24].copy_from_slice(&(flags | call.root_field() << ROOT_SHIFT).to_le_bytes());
        h[24..32].copy_from_slice(&total.to_le_bytes());
        ctx.write_local(&stage, off, &h)
            .and_then(|()| ctx.write_local(&stage, off + HEADER as u64, payload))
            .map_err(|e| CollError::verbs(call.name, e))?;
        let len = (HEADER + payload.len()) as u64;
        let link = self.peer(peer).link.as_mut().expect("link made above");
        let stage = link.stage.as_ref().expect("staging registered above");
        let remote = RemoteBuf {
            addr: land.addr + off,
            ..land
        };
        let wr = WriteWr::new(stage, off, len, remote).notify(&link.cq).wr_id(s as u64);
        link.qp.post_write(wr).map_err(|e| CollError::verbs(call.name, e))?;
        let p = self.peer(peer);
        p.busy.set(s, true);
        p.send_seq += 1;
        Ok(())
    }

    /// Handle one completion: a chunk landed (copy it out, return the slot), a credit came back
    /// (free the slot), or one of this member's writes completed.
    async fn handle(&mut self, name: &'static str, c: Cqe) -> Result<(), CollError> {
        if c.status != CqeStatus::Ok {
            return Err(CollError::Transport {
                call: name,
                reason: format!("{:?} completed with {:?} (peer rank {})", c.kind, c.status, c.peer),
            });
        }
        if c.kind == CqeKind::Read && c.wr_id & READ != 0 {
            // One of this member's rendezvous reads: its data is in.
            if let Some(r) = self.reads.get_mut((c.wr_id & !READ) as usize) {
                r.done = true;
            }
            return Ok(());
        }
        if c.kind != CqeKind::Notify {
            return Ok(());
        }
        let peer = match self.dir.member_of(c.peer) {
            Some(i) => i,
            None => {
                return Err(CollError::Transport {
                    call: name,
                    reason: format!("notification from rank {}, not a member", c.peer),
                })
            }
        };
        if c.wr_id == ABORT {
            self.aborted_by = Some(c.peer);
            return Err(CollError::Aborted {
                call: name,
                peer: c.peer,
            });
        }
        if c.wr_id & FIN != 0 {
            // The peer has read a rendezvous message: its buffer is free again.
            let token = (c.wr_id & !FIN) as usize;
            match self.peer(peer).rndv_src.get_mut(token) {
                Some((_, busy)) => *busy = false,
                None => {
                    return Err(CollError::Transport {
                        call: name,
                        reason: format!("FIN from rank {} names rendezvous buffer {token}, never used", c.peer),
                    })
                }
            }
            return Ok(());
        }
        let s = (c.wr_id & !CREDIT) as usize;
        if s >= self.window {
            return Err(CollError::Transport {
                call: name,
                reason: format!("notification names slot {s} of {}", self.window),
            });
        }
        if peer == self.pos {
            return Err(CollError::Transport {
                call: name,
                reason: format!("notification from rank {}, this member itself", c.peer),
            });
        }
        if c.wr_id & CREDIT != 0 {
            self.peer(peer).busy.set(s, false);
            return Ok(());
        }
        let off = (s * self.slot_bytes()) as u64;
        let me = self.pos;
        let land = match self.peer(peer).land_here.clone() {
            Some(l) => l,
            None => {
                let l = self.dir.land.borrow().get(&(me, peer)).cloned();
                let l = l.ok_or_else(|| CollError::Transport {
                    call: name,
                    reason: format!("data from rank {} before its landing slots were registered", c.peer),
                })?;
                self.peer(peer).land_here = Some(l.clone());
                l
            }
        };
        let mut h = [0u8; HEADER];
        self.ctx
            .read_local_into(&land, off, &mut h)
            .map_err(|e| CollError::verbs(name, e))?;
        let word = |a: usize| u32::from_le_bytes(h[a..a + 4].try_into().expect("4 bytes"));
        let seq = u64::from_le_bytes(h[0..8].try_into().expect("8 bytes"));
        let len = (word(16) as usize).min(self.chunk.max(RTS_BYTES));
        let mut data = self.pool.pop().unwrap_or_default();
        data.clear();
        self.ctx
            .read_local_append(&land, off + HEADER as u64, len as u64, &mut data)
            .map_err(|e| CollError::verbs(name, e))?;
        self.owe(self.costs.copy(len));
        let chunk = Chunk {
            call: word(8),
            signature: word(12),
            total: u64::from_le_bytes(h[24..32].try_into().expect("8 bytes")),
            last: word(20) & LAST != 0,
            rndv: word(20) & RNDV != 0,
            root: word(20) >> ROOT_SHIFT,
            data,
        };
        let p = self.peer(peer);
        // A sequence number already matched (a duplicate) is dropped, as the ordered map did.
        if let Some(i) = seq.checked_sub(p.recv_next) {
            let i = i as usize;
            if p.inbox.len() <= i {
                p.inbox.resize_with(i + 1, || None);
            }
            p.inbox[i] = Some(chunk);
        }
        // The slot has been read: give it back.
        self.spend(self.costs.per_post).await;
        let src = self.credit_src.clone();
        let link = self.link(name, peer)?;
        let wr = WriteWr::new(&src, 0, 8, link.credit)
            .notify(&link.cq)
            .wr_id(CREDIT | s as u64)
            .unsignaled();
        link.qp.post_write(wr).map_err(|e| CollError::verbs(name, e))?;
        Ok(())
    }

    /// Move the chunks that arrived in order from `peer` into `acc`; whether the message of
    /// `expect` bytes is complete, or announced by a rendezvous control message.
    fn take(&mut self, call: &Call, peer: usize, expect: usize, acc: &mut Vec<u8>) -> Result<Taken, CollError> {
        let rank = self.ranks[peer];
        let slot = self.slot_of(peer);
        let p = &mut self.peer_state[slot];
        loop {
            let Some(ch) = p.inbox.front_mut().and_then(Option::take) else {
                return Ok(Taken::Waiting);
            };
            p.inbox.pop_front();
            p.recv_next += 1;
            let mismatch = |reason: String| CollError::Mismatch {
                call: call.name,
                peer: rank,
                reason,
            };
            if ch.call != call.number {
                return Err(mismatch(format!(
                    "its message belongs to collective call #{} on this communicator, this rank is in call #{}",
                    ch.call, call.number
                )));
            }
            if ch.signature != call.signature {
                return Err(mismatch(format!(
                    "it called {} where this rank called {}",
                    crate::signature_name(ch.signature),
                    crate::signature_name(call.signature)
                )));
            }
            if ch.root != call.root_field() {
                let root = |f: u32| f.checked_sub(1).map_or("no root".into(), |r| format!("root {r}"));
                return Err(mismatch(format!(
                    "it called {} with {} where this rank has {}",
                    call.name,
                    root(ch.root),
                    root(call.root_field())
                )));
            }
            if ch.total != expect as u64 {
                return Err(mismatch(format!(
                    "it sent {} bytes where this rank expects {expect} (buffer sizes differ)",
                    ch.total
                )));
            }
            if ch.rndv {
                if !acc.is_empty() || ch.data.len() != RTS_BYTES {
                    return Err(mismatch(format!(
                        "a rendezvous control message of {} bytes inside a message of {} bytes received so far",
                        ch.data.len(),
                        acc.len()
                    )));
                }
                let d = &ch.data;
                let taken = Taken::Rendezvous {
                    addr: u64::from_le_bytes(d[0..8].try_into().expect("8 bytes")),
                    rkey: u32::from_le_bytes(d[8..12].try_into().expect("4 bytes")),
                    token: u32::from_le_bytes(d[12..16].try_into().expect("4 bytes")),
                    len: expect,
                };
                let mut d = ch.data;
                d.clear();
                self.pool.push(d);
                return Ok(taken);
            }
            if acc.is_empty() && ch.last {
                // A message of one chunk: its buffer becomes the message.
                let old = std::mem::replace(acc, ch.data);
                if old.capacity() > 0 {
                    self.pool.push(old);
                }
            } else {
                if acc.is_empty() {
                    acc.reserve(expect);
                }
                acc.extend_from_slice(&ch.data);
                let mut d = ch.data;
                d.clear();
                self.pool.push(d);
            }
            if ch.last || acc.len() > expect {
                if acc.len() != expect {
                    return Err(mismatch(format!("received {} bytes, expected {expect}", acc.len())));
                }
                return Ok(Taken::Done);
            }
        }
    }

    /// Send `sends` and receive `recvs` (peer, bytes) concurrently; return the received messages
    /// in the order of `recvs`. Messages to or from one peer are matched in order.
    pub(crate) async fn exchange(
        &mut self,
        call: &Call,
        sends: &[(usize, &[u8])],
        recvs: &[(usize, usize)],
    ) -> Result<Vec<Vec<u8>>, CollError> {
        self.check_peers(call, sends.iter().map(|s| s.0).chain(recvs.iter().map(|r| r.0)))?;
        let sends: Vec<(usize, &[u8])> = sends.iter().map(|&(p, d)| (self.in_view(p), d)).collect();
        let recvs: Vec<(usize, usize)> = recvs.iter().map(|&(p, l)| (self.in_view(p), l)).collect();
        let mut plan = Lists {
            sends: &sends,
            recvs: &recvs,
            got: recvs.iter().map(|_| Vec::new()).collect(),
        };
        self.drive(call, &mut plan).await?;
        Ok(plan.got)
    }

    /// [`Transport::exchange`] of one send (`data` to `to`) and one receive (`len` bytes from
    /// `from`): the received message, with no list built for the call.
    pub(crate) async fn exchange_one(
        &mut self,
        call: &Call,
        (to, data): (usize, &[u8]),
        (from, len): (usize, usize),
    ) -> Result<Vec<u8>, CollError> {
        self.check_peers(call, [to, from].into_iter())?;
        let mut plan = One {
            send: (self.in_view(to), data),
            recv: (self.in_view(from), len),
            got: Vec::new(),
        };
        self.drive(call, &mut plan).await?;
        Ok(plan.got)
    }

    /// Move parts of `buf` in one go: receive `recvs` (peer, byte range of `buf`) and send
    /// `sends` (peer, byte range, and the receive — an index into `recvs` — that must have landed
    /// first, if any), all concurrently. A send waits only for its own receive, so a member can
    /// forward each segment as soon as it has it (a relay streams). Messages to or from one peer
    /// are matched in order.
    pub(crate) async fn stream(
        &mut self,
        call: &Call,
        buf: &mut [u8],
        sends: &[(usize, Range<usize>, Option<usize>)],
        recvs: &[(usize, Range<usize>)],
    ) -> Result<(), CollError> {
        self.check_peers(call, sends.iter().map(|s| s.0).chain(recvs.iter().map(|r| r.0)))?;
        let bad = |r: &Range<usize>| r.start > r.end || r.end > buf.len();
        if let Some(r) = sends
            .iter()
            .map(|s| &s.1)
            .chain(recvs.iter().map(|r| &r.1))
            .find(|r| bad(r))
        {
            return Err(CollError::Transport {
                call: call.name,
                reason: format!("range {r:?} outside a buffer of {} bytes", buf.len()),
            });
        }
        if let Some(&(_, _, Some(j))) = sends.iter().find(|s| s.2.is_some_and(|j| j >= recvs.len())) {
            return Err(CollError::Transport {
                call: call.name,
                reason: format!("a send waits for receive {j} of {}", recvs.len()),
            });
        }
        let sends: Vec<(usize, Range<usize>, Option<usize>)> = sends
            .iter()
            .map(|(p, r, a)| (self.in_view(*p), r.clone(), *a))
            .collect();
        let recvs: Vec<(usize, Range<usize>)> = recvs.iter().map(|(p, r)| (self.in_view(*p), r.clone())).collect();
        let mut plan = Streamed {
            buf,
            sends: &sends,
            recvs: &recvs,
        };
        self.drive(call, &mut plan).await
    }

    /// Every peer is a member of the current view other than this one.
    fn check_peers(&self, call: &Call, mut peers: impl Iterator<Item = usize>) -> Result<(), CollError> {
        let n = self.size();
        match peers.find(|&p| p >= n || p == self.view_me) {
            Some(p) => Err(CollError::Transport {
                call: call.name,
                reason: format!("member {} cannot exchange with member {p}", self.view_me),
            }),
            None => Ok(()),
        }
    }

    /// Carry out `plan`'s sends and receives (peers as communicator indices): post what may be
    /// posted, take what arrived, wait for the next completion, until everything is done.
    async fn drive<P: Plan>(&mut self, call: &Call, plan: &mut P) -> Result<(), CollError> {
        if let Some(peer) = self.aborted_by {
            return Err(CollError::Aborted { call: call.name, peer });
        }
        let (ns, nr) = (plan.sends(), plan.recvs());
        // The vectors of the last call, emptied (a call that returned an error left none: they
        // are made again).
        let mut st = std::mem::take(&mut self.drive_state);
        st.reset(ns, nr);
        let result = self.drive_with(call, plan, &mut st).await;
        self.drive_state = st;
        self.settle().await;
        result
    }

    /// [`Transport::drive`] with its bookkeeping `st`, sized for `plan`.
    // The index names the plan's entry as well as the bookkeeping's.
    #[allow(clippy::needless_range_loop)]
    async fn drive_with<P: Plan>(&mut self, call: &Call, plan: &mut P, st: &mut DriveState) -> Result<(), CollError> {
        let (ns, nr) = (plan.sends(), plan.recvs());
        let DriveState { sends, recvs, blocked } = st;
        // Sends before `s0` are complete, receives before `r0` done (a long stream skips them).
        let (mut s0, mut r0) = (0, 0);
        loop {
            blocked.clear();
            let mut sent = true;
            for k in s0..ns {
                let p = plan.send_peer(k);
                let data = plan.send_data(k);
                if self.by_rendezvous(call, data.len()) {
                    match sends[k].token {
                        Some(_) if sends[k].complete => {}
                        Some(tok) => {
                            // Tokens are reused once free: the FIN is seen here before a later
                            // send to the peer (a higher index) can take the token again.
                            sends[k].complete = !self.peer(p).rndv_src[tok as usize].1;
                            sent &= sends[k].complete;
                        }
                        None if blocked.contains(&p) || !plan.send_after(k).is_none_or(|j| recvs[j].done) => {
                            blocked.push(p);
                            sent = false;
                        }
                        None => match self.post_rts(call, p, data).await? {
                            Some(tok) => {
                                sends[k].token = Some(tok);
                                sent = false;
                            }
                            None => {
                                blocked.push(p);
                                sent = false;
                            }
                        },
                    }
                    continue;
                }
                let total = self.chunks(data.len());
                if sends[k].posted < total && !plan.send_after(k).is_none_or(|j| recvs[j].done) {
                    blocked.push(p);
                    sent = false;
                    continue;
                }
                while sends[k].posted < total && !blocked.contains(&p) {
                    let window = self.window as u64;
                    let ps = self.peer(p);
                    let s = (ps.send_seq % window) as usize;
                    if ps.busy.get(s) {
                        break;
                    }
                    self.post_chunk(call, p, data, sends[k].posted).await?;
                    sends[k].posted += 1;
                }
                if sends[k].posted < total {
                    blocked.push(p);
                    sent = false;
                } else {
                    sends[k].complete = true;
                }
            }
            while s0 < ns && sends[s0].complete {
                s0 += 1;
            }
            blocked.clear();
            let mut all_done = true;
            // A receive done in this pass may release a send waiting for it.
            let mut landed = false;
            while r0 < nr && recvs[r0].done {
                r0 += 1;
            }
            for k in r0..nr {
                let (p, len) = (plan.recv_peer(k), plan.recv_len(k));
                if recvs[k].done || blocked.contains(&p) {
                    continue;
                }
                if let Some((r, token)) = recvs[k].reading {
                    // A rendezvous message is one unit: later messages from the peer may be
                    // taken while it is read.
                    if self.reads[r].done {
                        let data = self.finish_read(call, p, r, token).await?;
                        plan.deliver(k, data);
                        recvs[k].done = true;
                        landed = true;
                    } else {
                        all_done = false;
                    }
                    continue;
                }
                match self.take(call, p, len, &mut recvs[k].acc)? {
                    Taken::Done => {
                        plan.deliver(k, std::mem::take(&mut recvs[k].acc));
                        recvs[k].done = true;
                        landed = true;
                    }
                    Taken::Waiting => {
                        blocked.push(p);
                        all_done = false;
                    }
                    Taken::Rendezvous { addr, rkey, token, len } => {
                        let r = self.post_read(call, p, addr, rkey, len).await?;
                        recvs[k].reading = Some((r, token));
                        all_done = false;
                    }
                }
            }
            if sent && all_done {
                return Ok(());
            }
            if landed && !sent {
                continue;
            }
            // The owed host time is not waited for first: the completion taken is the queue's
            // oldest either way, and its poll is charged from the later of its arrival and the
            // owed time.
            let c = self.cq.next().await;
            self.owe(self.costs.per_poll);
            self.handle(call.name, c).await?;
        }
    }

    /// Whether a message of `len` bytes of `call` goes by rendezvous.
    fn by_rendezvous(&self, call: &Call, len: usize) -> bool {
        call.keep && len > 0 && self.rendezvous.is_some_and(|t| len >= t)
    }

    /// Announce the rendezvous message `data` to `peer`: put it in a registered buffer (the
    /// user's buffer, registered: no copy is charged) and post the control message naming it.
    /// The message's token, or `None` when the peer's next slot or every buffer allowed towards
    /// it (`window`) is still in use.
    async fn post_rts(&mut self, call: &Call, peer: usize, data: &[u8]) -> Result<Option<u32>, CollError> {
        let window = self.window;
        let ctx = self.ctx.clone();
        let ps = self.peer(peer);
        let s = (ps.send_seq % window as u64) as usize;
        if ps.busy.get(s) || ps.rndv_src.iter().filter(|b| b.1).count() >= window {
            return Ok(None);
        }
        let len = data.len() as u64;
        let tok = match ps.rndv_src.iter().position(|b| !b.1) {
            Some(i) => i,
            None => {
                ps.rndv_src.push((ctx.reg_mr(len.next_power_of_two()), false));
                ps.rndv_src.len() - 1
            }
        };
        if ps.rndv_src[tok].0.len < len {
            ps.rndv_src[tok].0 = ctx.reg_mr(len.next_power_of_two());
        }
        let mr = ps.rndv_src[tok].0.clone();
        ctx.write_local(&mr, 0, data)
            .map_err(|e| CollError::verbs(call.name, e))?;
        let remote = mr.remote(0);
        let mut rts = [0u8; RTS_BYTES];
        rts[0..8].copy_from_slice(&remote.addr.to_le_bytes());
        rts[8..12].copy_from_slice(&remote.rkey.to_le_bytes());
        rts[12..16].copy_from_slice(&(tok as u32).to_le_bytes());
        self.post_raw(call, peer, &rts, len, LAST | RNDV).await?;
        self.peer(peer).rndv_src[tok].1 = true;
        Ok(Some(tok as u32))
    }

    /// Build and post the RDMA read of a rendezvous message of `len` bytes at (`addr`, `rkey`)
    /// of `peer` into a free read buffer; the buffer's index.
    async fn post_read(
        &mut self,
        call: &Call,
        peer: usize,
        addr: u64,
        rkey: u32,
        len: usize,
    ) -> Result<usize, CollError> {
        self.spend(self.costs.per_post).await;
        let r = match self.reads.iter().position(|b| b.len.is_none()) {
            Some(r) => r,
            None => {
                self.reads.push(ReadBuf {
                    mr: None,
                    len: None,
                    done: false,
                });
                self.reads.len() - 1
            }
        };
        let len64 = len as u64;
        if self.reads[r].mr.as_ref().is_none_or(|m| m.len < len64) {
            self.reads[r].mr = Some(self.ctx.reg_mr(len64.next_power_of_two()));
        }
        self.reads[r].len = Some(len);
        self.reads[r].done = false;
        let mr = self.reads[r].mr.clone().expect("registered above");
        let rank = self.ranks[peer];
        let link = self.link(call.name, peer)?;
        link.qp
            .post_read(&mr, 0, len64, RemoteBuf { rank, addr, rkey }, READ | r as u64)
            .map_err(|e| CollError::verbs(call.name, e))?;
        Ok(r)
    }

    /// The read into buffer `r` is done: take its data, free the buffer and tell `peer` (FIN,
    /// naming its `token`).
    async fn finish_read(&mut self, call: &Call, peer: usize, r: usize, token: u32) -> Result<Vec<u8>, CollError> {
        let len = self.reads[r].len.take().unwrap_or(0) as u64;
        self.reads[r].done = false;
        let mr = self.reads[r].mr.clone().expect("a read buffer in use is registered");
        let data = self
            .ctx
            .read_local(&mr, 0, len)
            .map_err(|e| CollError::verbs(call.name, e))?;
        self.spend(self.costs.per_post).await;
        let src = self.credit_src.clone();
        let link = self.link(call.name, peer)?;
        let wr = WriteWr::new(&src, 0, 8, link.credit)
            .notify(&link.cq)
            .wr_id(FIN | u64::from(token))
            .unsignaled();
        link.qp.post_write(wr).map_err(|e| CollError::verbs(call.name, e))?;
        Ok(data)
    }

    /// Tell every other member that this one left the communicator on an error (best effort: a
    /// refused post is ignored, the members it would reach are left as they are).
    pub(crate) fn abort(&mut self) {
        let src = self.credit_src.clone();
        let me = self.pos;
        for peer in (0..self.members()).filter(|&p| p != me) {
            if let Ok(link) = self.link("abort", peer) {
                let wr = WriteWr::new(&src, 0, 8, link.credit)
                    .notify(&link.cq)
                    .wr_id(ABORT)
                    .unsignaled();
                // A refused post leaves that member waiting; the caller already has its error.
                let _ = link.qp.post_write(wr);
            }
        }
    }

    /// `left = left op right`, charging the host's reduction time (owed: see
    /// [`Transport::owe`]).
    pub(crate) async fn reduce(
        &self,
        dtype: crate::Datatype,
        op: crate::ReduceOp,
        left: &mut [u8],
        right: &[u8],
    ) -> Result<(), CollError> {
        self.owe(self.costs.reduce(dtype, left.len()));
        crate::reduce_into(dtype, op, left, right)
    }

    /// `right = left op right`: [`Transport::reduce`] with the result in the second operand.
    pub(crate) async fn reduce_right(
        &self,
        dtype: crate::Datatype,
        op: crate::ReduceOp,
        left: &[u8],
        right: &mut [u8],
    ) -> Result<(), CollError> {
        self.owe(self.costs.reduce(dtype, left.len()));
        crate::reduce_into_right(dtype, op, left, right)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list of two entries in place behaves as a vector past them: pushes, indexing,
    /// truncation (dropping what it cuts), membership.
    #[test]
    fn few_keeps_its_first_entries_in_place_and_the_rest_in_order() {
        let mut f: Few<usize, 2> = Few::default();
        assert_eq!(f.len(), 0);
        assert!(!f.contains(&0), "an empty list holds nothing, not its default entries");
        for v in [10, 11, 12, 13] {
            f.push(v);
        }
        assert_eq!(f.len(), 4);
        assert_eq!((f[0], f[1], f[2], f[3]), (10, 11, 12, 13));
        f[2] = 22;
        assert!(f.contains(&22) && f.contains(&11) && !f.contains(&12));
        f.truncate(1);
        assert_eq!(f.len(), 1);
        assert!(!f.contains(&11) && !f.contains(&22));
        f.push(5);
        f.push(6);
        assert_eq!((f[0], f[1], f[2]), (10, 5, 6));
        f.clear();
        assert_eq!(f.len(), 0);
        assert!(!f.contains(&10));
    }

    #[test]
    #[should_panic(expected = "index 1 of a list of 1")]
    fn few_refuses_an_index_past_its_length() {
        let mut f: Few<u32, 2> = Few::default();
        f.push(1);
        let _ = f[1];
    }

    /// Slots below 64 are bits, above on the heap; setting one leaves the others as they were.
    #[test]
    fn slot_sets_hold_any_slot_number() {
        let mut s = SlotSet::default();
        for i in [0, 5, 63, 64, 200] {
            assert!(!s.get(i));
            s.set(i, true);
        }
        assert!(s.get(0) && s.get(5) && s.get(63) && s.get(64) && s.get(200));
        assert!(!s.get(1) && !s.get(62) && !s.get(65) && !s.get(199) && !s.get(1000));
        s.set(5, false);
        s.set(64, false);
        assert!(!s.get(5) && !s.get(64));
        assert!(s.get(0) && s.get(63) && s.get(200));
    }
}
