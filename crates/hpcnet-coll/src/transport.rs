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
//!   (sequence number, call number, call signature, message length, last-chunk flag).
//! - When the notification is taken from the completion queue, the receiver copies the chunk out
//!   of its slot into host memory and gives the slot back with a credit: an 8-byte write with
//!   notification whose `wr_id` names the slot. A sender posts chunk `i` only when slot
//!   `i mod window` is free, so a landing slot is never overwritten before it was read.
//! - Chunks are matched per pair in sequence order (MPI's non-overtaking rule); out-of-order
//!   notifications (adaptive routing, several rails) wait in a per-pair queue until the gap
//!   closes. The header's call number and signature make a message of one collective impossible
//!   to take for another's: a mismatch is reported as [`CollError::Mismatch`].
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

use crate::{CollError, HostCosts};
use hpcnet_des::SimTime;
use hpcnet_msg::verbs::{Context, Cq, Mr, Qp, RemoteBuf, WriteWr};
use hpcnet_nic::{Cqe, CqeKind, CqeStatus, Rank};
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

/// Bytes of the header in front of every chunk.
pub(crate) const HEADER: usize = 32;
/// `wr_id` bit marking a credit notification (clear: a data chunk); the low bits name the slot.
const CREDIT: u64 = 1 << 63;
/// `wr_id` of an abort notification: the sender found the members in disagreement or its
/// transport failed, and left the call.
const ABORT: u64 = 1 << 62;

/// Transport parameters of a communicator.
#[derive(Clone, Debug, PartialEq)]
pub struct TransportConfig {
    /// Largest payload of one chunk (one RDMA write). Default 4 KiB — assumption: the eager
    /// buffer size of common MPI libraries over RDMA (MVAPICH2 uses 8–16 KiB eager buffers; a
    /// smaller chunk pipelines large messages through intermediate ranks).
    pub chunk: usize,
    /// Chunks in flight per ordered pair before the sender waits for a credit. Default 4.
    pub window: usize,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig { chunk: 4096, window: 4 }
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
}

/// A chunk copied out of its landing slot, waiting to be matched.
struct Chunk {
    call: u32,
    signature: u32,
    total: u64,
    last: bool,
    data: Vec<u8>,
}

/// What the header of every chunk of one collective call carries besides the sequence number.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Call {
    pub name: &'static str,
    /// Call number on this communicator.
    pub number: u32,
    /// Which collective, datatype and operator (each member must pass the same).
    pub signature: u32,
}

/// This member's state towards one peer it has exchanged messages with (made on first use, so
/// a member keeps state for its actual peers only, not for every member).
struct Peer {
    link: Option<Link>,
    /// Next chunk sequence number to the peer.
    send_seq: u64,
    /// Staging/landing slots towards the peer still waiting for their credit.
    busy: Vec<bool>,
    /// Next chunk sequence number expected from the peer.
    recv_next: u64,
    /// Chunks from the peer not yet matched, at index `seq − recv_next` (a gap: not arrived).
    inbox: VecDeque<Option<Chunk>>,
    /// The peer's landing slots in this member's memory, once its first chunk arrived.
    land_here: Option<Mr>,
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
    peer_state: Vec<Peer>,
    dir: Rc<Directory>,
    credit_src: Mr,
    chunk: usize,
    window: usize,
    /// Header and payload of the chunk being posted (reused).
    scratch: Vec<u8>,
    /// Emptied chunk buffers, reused for the next arrivals.
    pool: Vec<Vec<u8>>,
    pub(crate) costs: HostCosts,
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
        let dir = Rc::new(Directory {
            cqs: contexts.iter().map(Context::create_cq).collect(),
            credit_land: contexts.iter().map(|c| c.reg_mr(8 * n as u64)).collect(),
            land: RefCell::new(BTreeMap::new()),
            contexts,
            ranks: ranks.into(),
            rank_index,
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
                peer_state: Vec::new(),
                credit_src: dir.contexts[i].reg_mr(8),
                dir: dir.clone(),
                chunk: cfg.chunk,
                window: cfg.window,
                scratch: Vec::new(),
                pool: Vec::new(),
                costs: costs.clone(),
                aborted_by: None,
            })
            .collect()
    }

    /// This member's state towards `peer` (a valid member other than this one), made on first
    /// use.
    fn peer(&mut self, peer: usize) -> &mut Peer {
        let mut slot = self.peer_slot[peer];
        if slot == u32::MAX {
            slot = self.peer_state.len() as u32;
            self.peer_slot[peer] = slot;
            self.peer_state.push(Peer {
                link: None,
                send_seq: 0,
                busy: vec![false; self.window],
                recv_next: 0,
                inbox: VecDeque::new(),
                land_here: None,
            });
        }
        &mut self.peer_state[slot as usize]
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

    /// Spend `d` of host time.
    pub(crate) async fn spend(&self, d: SimTime) {
        if d > SimTime::ZERO {
            self.ctx.sleep(d).await;
        }
    }

    /// Largest payload of one chunk.
    pub(crate) fn chunk(&self) -> usize {
        self.chunk
    }

    fn slot_bytes(&self) -> usize {
        HEADER + self.chunk
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
        let seq = self.peer(peer).send_seq;
        let s = (seq % self.window as u64) as usize;
        let start = part * self.chunk;
        let end = (start + self.chunk).min(data.len());
        let payload = &data[start.min(end)..end];
        let last = part + 1 == self.chunks(data.len());
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
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend_from_slice(&seq.to_le_bytes());
        buf.extend_from_slice(&call.number.to_le_bytes());
        buf.extend_from_slice(&call.signature.to_le_bytes());
        buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        buf.extend_from_slice(&u32::from(last).to_le_bytes());
        buf.extend_from_slice(&(data.len() as u64).to_le_bytes());
        buf.extend_from_slice(payload);
        let written = ctx.write_local(&stage, off, &buf);
        let len = buf.len() as u64;
        self.scratch = buf;
        written.map_err(|e| CollError::verbs(call.name, e))?;
        let link = self.peer(peer).link.as_mut().expect("link made above");
        let stage = link.stage.as_ref().expect("staging registered above");
        let remote = RemoteBuf {
            addr: land.addr + off,
            ..land
        };
        let wr = WriteWr::new(stage, off, len, remote).notify(&link.cq).wr_id(s as u64);
        link.qp.post_write(wr).map_err(|e| CollError::verbs(call.name, e))?;
        let p = self.peer(peer);
        p.busy[s] = true;
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
        if c.kind != CqeKind::Notify {
            return Ok(());
        }
        let peer = match self.dir.rank_index.binary_search_by_key(&c.peer, |&(r, _)| r) {
            Ok(i) => self.dir.rank_index[i].1,
            Err(_) => {
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
            self.peer(peer).busy[s] = false;
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
        let len = (word(16) as usize).min(self.chunk);
        let mut data = self.pool.pop().unwrap_or_default();
        data.clear();
        self.ctx
            .read_local_append(&land, off + HEADER as u64, len as u64, &mut data)
            .map_err(|e| CollError::verbs(name, e))?;
        self.spend(self.costs.copy(len)).await;
        let chunk = Chunk {
            call: word(8),
            signature: word(12),
            total: u64::from_le_bytes(h[24..32].try_into().expect("8 bytes")),
            last: word(20) != 0,
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

    /// Move the chunks that arrived in order from `peer` into `acc`; true when the message of
    /// `expect` bytes is complete.
    fn take(&mut self, call: &Call, peer: usize, expect: usize, acc: &mut Vec<u8>) -> Result<bool, CollError> {
        let rank = self.ranks[peer];
        self.peer(peer);
        let p = &mut self.peer_state[self.peer_slot[peer] as usize];
        loop {
            let Some(ch) = p.inbox.front_mut().and_then(Option::take) else {
                return Ok(false);
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
            if ch.total != expect as u64 {
                return Err(mismatch(format!(
                    "it sent {} bytes where this rank expects {expect} (buffer sizes differ)",
                    ch.total
                )));
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
                return Ok(true);
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
        let n = self.size();
        if let Some(&p) = sends
            .iter()
            .map(|(p, _)| p)
            .chain(recvs.iter().map(|(p, _)| p))
            .find(|&&p| p >= n || p == self.view_me)
        {
            return Err(CollError::Transport {
                call: call.name,
                reason: format!("member {} cannot exchange with member {p}", self.view_me),
            });
        }
        let sends: Vec<(usize, &[u8])> = sends.iter().map(|&(p, d)| (self.in_view(p), d)).collect();
        let recvs: Vec<(usize, usize)> = recvs.iter().map(|&(p, l)| (self.in_view(p), l)).collect();
        let (sends, recvs) = (&sends[..], &recvs[..]);
        if let Some(peer) = self.aborted_by {
            return Err(CollError::Aborted { call: call.name, peer });
        }
        let mut posted = vec![0usize; sends.len()];
        let mut got: Vec<Vec<u8>> = recvs.iter().map(|_| Vec::new()).collect();
        let mut done = vec![false; recvs.len()];
        let mut blocked = Vec::new();
        loop {
            blocked.clear();
            let mut sent = true;
            for (k, &(p, data)) in sends.iter().enumerate() {
                let total = self.chunks(data.len());
                while posted[k] < total && !blocked.contains(&p) {
                    let window = self.window as u64;
                    let ps = self.peer(p);
                    let s = (ps.send_seq % window) as usize;
                    if ps.busy[s] {
                        break;
                    }
                    self.post_chunk(call, p, data, posted[k]).await?;
                    posted[k] += 1;
                }
                if posted[k] < total {
                    blocked.push(p);
                    sent = false;
                }
            }
            blocked.clear();
            let mut all_done = true;
            for (k, &(p, len)) in recvs.iter().enumerate() {
                if done[k] || blocked.contains(&p) {
                    continue;
                }
                done[k] = self.take(call, p, len, &mut got[k])?;
                if !done[k] {
                    blocked.push(p);
                    all_done = false;
                }
            }
            if sent && all_done {
                return Ok(got);
            }
            let c = self.cq.next().await;
            self.spend(self.costs.per_poll).await;
            self.handle(call.name, c).await?;
        }
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

    /// `left = left op right`, charging the host's reduction time.
    pub(crate) async fn reduce(
        &self,
        dtype: crate::Datatype,
        op: crate::ReduceOp,
        left: &mut [u8],
        right: &[u8],
    ) -> Result<(), CollError> {
        self.spend(self.costs.reduce(dtype, left.len())).await;
        crate::reduce_into(dtype, op, left, right)
    }
}
