//! The hardware collective unit (spec 01, "hardware collectives"): barrier, broadcast, reduce
//! and allreduce computed by the NICs and the routers' multicast.
//!
//! **Groups.** [`World::coll_group`] takes the members (ranks, in communicator order) and builds
//! the software-defined logical tree the descriptors carry: the members' distinct nodes in order
//! of first appearance are the tree's slots, slot 0 (the node of member 0) is the root, and
//! slot i has children `f·i + 1 … f·i + f` (`nic.coll.fanout` = f). It programs the routers'
//! multicast tables from the root's node to every other member node on rail `group mod rails`
//! ([`hpcnet_fabric::Network::program_multicast`]); a table overflow refuses the group
//! ([`CollSetupError::Multicast`]) and writes nothing.
//!
//! **A collective** ([`World::post_coll`], one descriptor per member; every member's k-th call
//! on a group is the group's k-th collective):
//! 1. The descriptor reaches the NIC `host.doorbell_latency` after the post and is fetched (one
//!    DMA read round trip); a contribution is then read from host memory (another round trip
//!    plus the bytes at the host read rate). Broadcast: only the root member contributes data;
//!    barrier: nobody does.
//! 2. Gather: when its local members' contributions and all its children's messages are in, a
//!    NIC combines them in a fixed order — its local members in communicator order, then its
//!    children in slot order — whatever order they arrived in, so floating-point results are
//!    bit-identical from run to run. Combining takes `nic.coll.step_overhead` plus the operand
//!    bytes beyond the first at the type's rate (`nic.coll.rate_*`). The two processes of a
//!    Sunway NIC are thus combined first, by the NIC. A non-root NIC sends the partial result
//!    to its parent's NIC (packets of at most `packet.max_payload`; an empty contribution is one
//!    header-only packet).
//! 3. Broadcast: the root NIC sends the result as multicast packets on its rail; the routers
//!    replicate them to every member node; a NIC receiving a multicast of a group it is not a
//!    member of drops it (counted: `nic.coll.multicast_dropped`).
//! 4. Every member NIC writes the result to each local member's buffer (DMA write through the
//!    host interface; reduce: the root member only) and then a [`CqeKind::Coll`] completion.
//!
//! **Arrival jitter** (`nic.coll.jitter`, a what-if, zero by default): the unit takes each
//! gather or broadcast message an extra delay after its last packet, uniform in [0, jitter]
//! from a stream per NIC seeded by the run's seed; children's contributions then reach a parent
//! in other orders, which the fixed combine order makes harmless (tested).
//!
//! Descriptors that disagree across members (kind, root, datatype, operator or size) are found
//! where they meet in the tree; every member then completes with [`CqeStatus::CollMismatch`]
//! and nothing is written. Local errors (not a member, bitwise operator on floats, bad buffer,
//! bad completion queue) are refused at post time.
//!
//! **Failures** (spec 01, "collective fault handling: software time-outs; leaf/parent/root
//! roles probe and answer to agree on global state"; the spec gives no further detail, so the
//! following is a stated choice). A group takes, at creation, the first rail from
//! `group mod rails` on whose cables every member NIC works. When the routers learn of a
//! failure, a group whose rail has a dead member cable is moved to a working rail and its
//! multicast tables are programmed there ([`World::coll_rehome`]); nothing else recomputes them.
//! A gather or multicast packet the fabric loses stalls its collective; with
//! `[nic.coll.recovery]`, `timeout` after the loss the group restarts every unfinished
//! collective (the probe exchange that agrees on the state is folded into the time-out, not
//! simulated as packets): on another working rail if there is one, the broadcast alone where the
//! root had already sent it (members that have the result ignore the copy), the whole gather from
//! the kept contributions otherwise. Messages of an abandoned attempt are ignored. After
//! `retries` restarts, or with no rail reaching every member, the unfinished members complete
//! with [`CqeStatus::RetryExceeded`], and so does a member that posts the collective later (its
//! descriptor reaches a NIC that has given up on it); the library does not fall back to software
//! algorithms.
//! Without `[nic.coll.recovery]` a collective that lost a packet never completes.
//!
//! Simplifications: the gather messages travel unacknowledged (the library's per-message
//! reliability protocol is not modelled; loss is recovered by the time-out above); the unit does not share
//! the message engines, the transmit queue bound or the receive dispatcher with ordinary
//! messages (its packets take `nic.rx_overhead` each at arrival and release their receive
//! buffer at once); a reduce broadcasts its result like an allreduce (members other than the
//! root only complete); data is read from host memory when the descriptor is posted; a NIC
//! combines and forwards a contribution only when it is whole (no segment pipelining through
//! the tree, which matters for long vectors only).
//!
//! Cost: creating a group is O(routers + ports) (the multicast tree); a collective on p members
//! over n nodes sends n − 1 gather messages and one multicast, each of ⌈bytes / max_payload⌉
//! packets, and does O(bytes) work per operand in the model.

use crate::cq::{Cqe, CqeKind, CqeStatus};
use crate::ids::{CqId, Rank};
use crate::op::PostError;
use crate::world::{World, WorldEvent};
use hpcnet_des::stats::{Registry, StatRecord};
use hpcnet_des::{Bytes, SimTime};
use hpcnet_fabric::topology::NodeId;
use hpcnet_fabric::{MulticastError, Network, Packet};
use std::collections::{BTreeMap, BTreeSet};

/// A collective group (communicator) of the hardware collective unit.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupId(pub u32);

/// Element type of a hardware reduction.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CollType {
    F32,
    F64,
    I32,
    I64,
}

impl CollType {
    pub fn size(self) -> u64 {
        match self {
            CollType::F32 | CollType::I32 => 4,
            CollType::F64 | CollType::I64 => 8,
        }
    }
    pub(crate) fn is_float(self) -> bool {
        matches!(self, CollType::F32 | CollType::F64)
    }
}

/// Reduction operator of the NIC (spec 01: sum, max, min, bitwise and/or/xor).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CollOp {
    Sum,
    Max,
    Min,
    Band,
    Bor,
    Bxor,
}

/// Which collective a descriptor asks for; roots are member indices.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CollKind {
    Barrier,
    Broadcast { root: u32 },
    Reduce { root: u32 },
    Allreduce,
}

/// A collective descriptor: what one member asks its NIC to do.
#[derive(Clone, Debug, PartialEq)]
pub struct CollDesc {
    pub group: GroupId,
    pub kind: CollKind,
    pub dtype: CollType,
    pub op: CollOp,
    /// Elements (0 for a barrier).
    pub count: u64,
    /// Contribution address in the member's memory (broadcast root: the data).
    pub src: u64,
    /// Result address (broadcast: every member's buffer; reduce: the root's).
    pub dst: u64,
    /// Completion queue of the member.
    pub cq: CqId,
    pub wr_id: u64,
}

/// Why a group could not be created.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CollSetupError {
    #[error("collective group: {0}")]
    Members(String),
    #[error("{0} (hardware collectives need a multicast table on every router of the group's tree)")]
    Multicast(MulticastError),
}

/// What must match across members' descriptors.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Sig {
    kind: CollKind,
    dtype: CollType,
    op: CollOp,
    bytes: u64,
}

/// One member's part in a collective, at its NIC.
#[derive(Clone, Debug)]
struct Local {
    rank: Rank,
    dst: u64,
    cq: CqId,
    wr_id: u64,
    /// Its contribution (None: it contributes nothing).
    data: Option<Vec<u8>>,
    ready: bool,
}

/// A collective in progress at one NIC.
#[derive(Clone, Debug, Default)]
struct OpState {
    sig: Option<Sig>,
    bad: bool,
    /// Per local member slot (index into the slot's `local` list).
    locals: Vec<Option<Local>>,
    /// Per child: its partial result once in.
    children: Vec<Option<Option<Vec<u8>>>>,
    /// Multicast packets received (non-root).
    down_pkts: u64,
    result: Option<Vec<u8>>,
    /// Some contribution reached this NIC's combination (broadcast: the root's data).
    has_data: bool,
    delivered: usize,
    /// Root only: member NICs whose local members have not all completed.
    slots_left: u32,
    /// Root only: the broadcast has been sent.
    sent_down: bool,
    /// Non-root: the whole broadcast has arrived.
    down_done: bool,
}

/// One node of a group's logical tree.
#[derive(Clone, Debug)]
struct Slot {
    node: NodeId,
    /// Member indices on this node, in communicator order.
    local: Vec<u32>,
    parent: Option<u32>,
    children: Vec<u32>,
    /// Collectives posted so far by each local member.
    posted: Vec<u64>,
    ops: BTreeMap<u64, OpState>,
}

#[derive(Clone, Debug)]
struct Group {
    members: Vec<Rank>,
    slots: Vec<Slot>,
    slot_of: BTreeMap<NodeId, u32>,
    member_of: BTreeMap<Rank, u32>,
    rail: u8,
    /// Restarts so far ([`World::coll_recover`]); messages of an earlier attempt are ignored.
    attempt: u32,
    /// A restart is scheduled.
    recover_pending: bool,
    /// Collectives (sequence numbers) the group gave up on ([`World::coll_fail`]): a member
    /// that posts one of them afterwards completes with [`CqeStatus::RetryExceeded`] too.
    failed: BTreeSet<u64>,
}

/// A gather message or a broadcast on the wire.
#[derive(Clone, Debug)]
struct Wire {
    group: u32,
    attempt: u32,
    seq: u64,
    /// Gather: receiving slot and child index there; broadcast: unused.
    to_slot: u32,
    child: u32,
    sig: Option<Sig>,
    bad: bool,
    data: Option<Vec<u8>>,
    packets: u64,
    seen: u64,
    /// Broadcast: member NICs still to receive it.
    receivers: u32,
}

/// What a broadcast down the multicast tree needs to know: the collective, its root's node and
/// rail, and how many member NICs are to receive it.
struct Down {
    group: u32,
    attempt: u32,
    seq: u64,
    sig: Option<Sig>,
    bad: bool,
    node: NodeId,
    rail: u8,
    receivers: u32,
}

/// The collective unit's state in the world.
#[derive(Default)]
pub(crate) struct CollUnit {
    groups: Vec<Group>,
    wire: Vec<Option<Wire>>,
    free_wire: Vec<u32>,
    stats: [u64; 4],
    /// Recovery: packets lost, restarts, rail changes, members completed with an error.
    recovery: [u64; 4],
    /// Seeded arrival delays (`nic.coll.jitter`), one stream per NIC, made at its first use.
    jitter: Vec<Option<hpcnet_des::rng::SimRng>>,
}

const RECOVERY_STATS: [(&str, &str, &str); 4] = [
    (
        "nic.coll.lost_packets",
        "packets",
        "gather and multicast packets of the unit the fabric lost",
    ),
    (
        "nic.coll.restarts",
        "collectives",
        "restarts of a group's unfinished collectives after a time-out (nic.coll.recovery)",
    ),
    (
        "nic.coll.rail_changes",
        "groups",
        "groups moved to another rail because a member NIC's cable was known dead",
    ),
    (
        "nic.coll.failed_members",
        "completions",
        "member completions with RetryExceeded after nic.coll.recovery.retries restarts",
    ),
];

const STATS: [(&str, &str, &str); 4] = [
    (
        "nic.coll.operations",
        "collectives",
        "hardware collectives completed at member ranks",
    ),
    (
        "nic.coll.gather_packets",
        "packets",
        "gather packets sent up the collective trees",
    ),
    (
        "nic.coll.multicast_packets",
        "packets",
        "multicast packets injected by tree roots",
    ),
    (
        "nic.coll.multicast_dropped",
        "packets",
        "multicast packets dropped at NICs that are not members of the group",
    ),
];

/// Events of the collective unit.
#[derive(Copy, Clone, Debug)]
pub enum CollEvent {
    /// A local member's contribution is in the NIC.
    LocalIn {
        group: u32,
        slot: u32,
        seq: u64,
        local: u32,
    },
    /// A child's gather message has arrived and been processed.
    ChildIn { wire: u32 },
    /// The NIC has combined the contributions of `seq` (in restart `attempt` of the group).
    Combined {
        group: u32,
        slot: u32,
        seq: u64,
        attempt: u32,
    },
    /// The time-out of a lost packet of restart `attempt`: restart the group's collectives.
    Recover { group: u32, attempt: u32 },
    /// The broadcast of `seq` has arrived at a member NIC.
    DownIn { group: u32, slot: u32, seq: u64 },
    /// The result is in a local member's memory.
    Delivered {
        group: u32,
        slot: u32,
        seq: u64,
        local: u32,
    },
}

/// Tag bit of the unit's packets, and of its multicast packets.
const TAG_COLL: u64 = 1 << 63;
const TAG_DOWN: u64 = 1 << 62;

/// Whether a fabric packet belongs to the collective unit.
#[inline(always)]
pub(crate) fn is_coll_tag(tag: u64) -> bool {
    tag & TAG_COLL != 0
}

impl World {
    /// Create a collective group of `members` (communicator order) and program its multicast
    /// tables. Returns its id.
    pub fn coll_group(&mut self, members: &[Rank]) -> Result<GroupId, CollSetupError> {
        if members.is_empty() {
            return Err(CollSetupError::Members("no members given".into()));
        }
        let n = self.ranks();
        let mut member_of = BTreeMap::new();
        for (i, &r) in members.iter().enumerate() {
            if r.index() >= n {
                return Err(CollSetupError::Members(format!(
                    "rank {r} does not exist (the machine has {n} ranks)"
                )));
            }
            if member_of.insert(r, i as u32).is_some() {
                return Err(CollSetupError::Members(format!("rank {r} is listed twice")));
            }
        }
        let mut slots: Vec<Slot> = Vec::new();
        let mut slot_of = BTreeMap::new();
        for (i, &r) in members.iter().enumerate() {
            let node = self.place.node_of(r);
            let s = *slot_of.entry(node).or_insert_with(|| {
                slots.push(Slot {
                    node,
                    local: Vec::new(),
                    parent: None,
                    children: Vec::new(),
                    posted: Vec::new(),
                    ops: BTreeMap::new(),
                });
                (slots.len() - 1) as u32
            });
            slots[s as usize].local.push(i as u32);
            slots[s as usize].posted.push(0);
        }
        let f = self.cfg.coll.fanout.max(1) as usize;
        let ns = slots.len();
        for (i, s) in slots.iter_mut().enumerate() {
            s.parent = (i > 0).then(|| ((i - 1) / f) as u32);
            s.children = (f * i + 1..(f * i + f + 1).min(ns)).map(|c| c as u32).collect();
        }
        let id = self.coll.groups.len() as u32;
        if id >= 1 << 30 {
            return Err(CollSetupError::Members("too many collective groups".into()));
        }
        let nodes: Vec<NodeId> = slots.iter().map(|s| s.node).collect();
        let rail = self.group_rail(&nodes, (id % self.net.rails() as u32) as u8);
        let others: Vec<NodeId> = slots[1..].iter().map(|s| s.node).collect();
        self.net
            .program_multicast(id, rail, slots[0].node, &others)
            .map_err(CollSetupError::Multicast)?;
        self.coll.groups.push(Group {
            members: members.to_vec(),
            slots,
            slot_of,
            member_of,
            rail,
            attempt: 0,
            recover_pending: false,
            failed: BTreeSet::new(),
        });
        Ok(GroupId(id))
    }

    /// Program the fabric's multicast tables of `group` to reach `nodes` from `root` without
    /// changing which NICs are members (a misprogrammed or stale table: NICs that are not
    /// members drop what they receive).
    pub fn program_multicast_nodes(
        &mut self,
        group: GroupId,
        root: NodeId,
        nodes: &[NodeId],
    ) -> Result<(), CollSetupError> {
        let rail = self.coll.groups.get(group.0 as usize).map_or(0, |g| g.rail);
        self.net
            .program_multicast(group.0, rail, root, nodes)
            .map(|_| ())
            .map_err(CollSetupError::Multicast)
    }

    /// The collective unit's counters: (collectives completed at members, gather packets,
    /// multicast packets, multicast packets dropped at non-members).
    pub fn coll_counters(&self) -> [u64; 4] {
        self.coll.stats
    }

    /// The collective unit's statistics (reported once it has been used).
    pub(crate) fn coll_statistics(&self) -> Vec<StatRecord> {
        if self.coll.stats.iter().all(|&n| n == 0) {
            return Vec::new();
        }
        let mut r = Registry::of_counters(&STATS, &self.coll.stats).report();
        if self.coll.recovery.iter().any(|&n| n > 0) {
            r.extend(Registry::of_counters(&RECOVERY_STATS, &self.coll.recovery).report());
        }
        r
    }

    /// Post member `rank`'s descriptor of its next collective on `d.group`.
    pub fn post_coll(&mut self, rank: Rank, d: CollDesc) -> Result<(), PostError> {
        if rank.index() >= self.ranks() {
            return Err(PostError::NoSuchRank(rank));
        }
        if !self.cq_owned_by(d.cq, rank) {
            return Err(PostError::BadCq(d.cq));
        }
        let g = self
            .coll
            .groups
            .get(d.group.0 as usize)
            .ok_or(PostError::NoSuchGroup(d.group.0))?;
        let &member = g
            .member_of
            .get(&rank)
            .ok_or(PostError::NotMember { rank, group: d.group.0 })?;
        let size = g.members.len() as u32;
        let bytes = d
            .count
            .checked_mul(d.dtype.size())
            .ok_or_else(|| PostError::BadCollective(format!("{} elements overflow the byte count", d.count)))?;
        let reduction = matches!(d.kind, CollKind::Reduce { .. } | CollKind::Allreduce);
        if reduction && d.dtype.is_float() && matches!(d.op, CollOp::Band | CollOp::Bor | CollOp::Bxor) {
            return Err(PostError::BadCollective(format!(
                "operator {:?} is not defined on {:?} (bitwise operators take integers only)",
                d.op, d.dtype
            )));
        }
        let root = match d.kind {
            CollKind::Broadcast { root } | CollKind::Reduce { root } => Some(root),
            _ => None,
        };
        if let Some(root) = root.filter(|&r| r >= size) {
            return Err(PostError::BadCollective(format!(
                "root {root} is outside the group of {size} members"
            )));
        }
        let bytes = if matches!(d.kind, CollKind::Barrier) { 0 } else { bytes };
        // What this member contributes, and whether a result lands in its memory.
        let contributes = match d.kind {
            CollKind::Barrier => false,
            CollKind::Broadcast { root } => root == member,
            _ => true,
        };
        let receives = match d.kind {
            CollKind::Barrier => false,
            CollKind::Reduce { root } => root == member,
            _ => true,
        };
        let mem = &self.mem[rank.index()];
        let data = if contributes {
            Some(mem.read(d.src, bytes).map_err(PostError::Local)?.into_owned())
        } else {
            None
        };
        if receives {
            mem.check_local(d.dst, bytes).map_err(PostError::Local)?;
        }
        let sig = Sig {
            kind: d.kind,
            dtype: d.dtype,
            // The operator matters for reductions only.
            op: if reduction { d.op } else { CollOp::Sum },
            bytes,
        };
        let node = self.place.node_of(rank);
        let g = &mut self.coll.groups[d.group.0 as usize];
        let slot = g.slot_of[&node];
        let s = &mut g.slots[slot as usize];
        let li = s.local.iter().position(|&m| m == member).expect("member on its node") as u32;
        let seq = s.posted[li as usize];
        s.posted[li as usize] += 1;
        let (nl, nc) = (s.local.len(), s.children.len());
        let op = s.ops.entry(seq).or_insert_with(|| OpState {
            locals: vec![None; nl],
            children: vec![None; nc],
            ..OpState::default()
        });
        merge_sig(op, Some(sig));
        op.locals[li as usize] = Some(Local {
            rank,
            dst: if receives { d.dst } else { u64::MAX },
            cq: d.cq,
            wr_id: d.wr_id,
            data,
            ready: false,
        });
        // Doorbell, descriptor fetch, then the contribution's read.
        let mut t = self.q.now() + self.cfg.host.doorbell_latency + self.timing.read_latency;
        if contributes && bytes > 0 {
            t += self.timing.read_latency + self.timing.read_rate.serialization(Bytes(bytes));
        }
        let by = self.net.node_origin(node);
        let ev = CollEvent::LocalIn {
            group: d.group.0,
            slot,
            seq,
            local: li,
        };
        self.q.schedule_by(by, t, WorldEvent::Coll(ev));
        Ok(())
    }

    pub(crate) fn coll_event(&mut self, ev: CollEvent) {
        match ev {
            CollEvent::LocalIn {
                group,
                slot,
                seq,
                local,
            } => {
                let g = &self.coll.groups[group as usize];
                let Some(op) = g.slots[slot as usize].ops.get(&seq) else {
                    // Given up on between the post and now: the member has its error completion.
                    return;
                };
                if g.failed.contains(&seq) && op.locals[local as usize].is_some() {
                    self.coll_refuse_late(group, slot, seq, local);
                    return;
                }
                let op = self.op_mut(group, slot, seq);
                op.locals[local as usize].as_mut().expect("posted").ready = true;
                self.try_combine(group, slot, seq);
            }
            CollEvent::ChildIn { wire } => {
                let w = self.coll.wire[wire as usize].take().expect("live gather message");
                self.coll.free_wire.push(wire);
                if w.attempt != self.coll.groups[w.group as usize].attempt {
                    // A message of an abandoned attempt.
                    return;
                }
                let s = &mut self.coll.groups[w.group as usize].slots[w.to_slot as usize];
                let (nl, nc) = (s.local.len(), s.children.len());
                let op = s.ops.entry(w.seq).or_insert_with(|| OpState {
                    locals: vec![None; nl],
                    children: vec![None; nc],
                    ..OpState::default()
                });
                merge_sig(op, w.sig);
                op.bad |= w.bad;
                op.children[w.child as usize] = Some(w.data);
                self.try_combine(w.group, w.to_slot, w.seq);
            }
            CollEvent::Combined {
                group,
                slot,
                seq,
                attempt,
            } => {
                if attempt == self.coll.groups[group as usize].attempt {
                    self.combined(group, slot, seq);
                }
            }
            CollEvent::Recover { group, attempt } => self.coll_recover(group, attempt),
            CollEvent::DownIn { group, slot, seq } => self.deliver_local(group, slot, seq),
            CollEvent::Delivered {
                group,
                slot,
                seq,
                local,
            } => self.delivered(group, slot, seq, local),
        }
    }

    fn op_mut(&mut self, group: u32, slot: u32, seq: u64) -> &mut OpState {
        self.coll.groups[group as usize].slots[slot as usize]
            .ops
            .get_mut(&seq)
            .expect("collective in progress")
    }

    /// Combine once every local contribution and every child's message is in.
    fn try_combine(&mut self, group: u32, slot: u32, seq: u64) {
        let op = self.op_mut(group, slot, seq);
        let all_local = op.locals.iter().all(|l| l.as_ref().is_some_and(|l| l.ready));
        if !all_local || op.children.iter().any(Option::is_none) || op.result.is_some() {
            return;
        }
        // Operands in the fixed order: local members (communicator order), then children.
        let mut operands: Vec<&Vec<u8>> = Vec::new();
        for l in op.locals.iter().flatten() {
            operands.extend(l.data.as_ref());
        }
        for c in op.children.iter().flatten() {
            operands.extend(c.as_ref());
        }
        let sig = op.sig.expect("a local descriptor was posted");
        let mut bad = op.bad;
        let mut result = Vec::new();
        let mut reduced = 0u64;
        if !bad {
            match sig.kind {
                CollKind::Barrier => {}
                CollKind::Broadcast { .. } => {
                    // One contribution at most (the root's) flows up.
                    if operands.len() > 1 || operands.iter().any(|o| o.len() as u64 != sig.bytes) {
                        bad = true;
                    } else if let Some(o) = operands.first() {
                        result = o.to_vec();
                    }
                }
                CollKind::Reduce { .. } | CollKind::Allreduce => {
                    if operands.iter().any(|o| o.len() as u64 != sig.bytes) {
                        bad = true;
                    } else if let Some((first, rest)) = operands.split_first() {
                        result = first.to_vec();
                        for o in rest {
                            reduce_into(sig.dtype, sig.op, &mut result, o);
                            reduced += o.len() as u64;
                        }
                    }
                }
            }
        }
        let has_data = !operands.is_empty();
        // With recovery the contributions stay until the collective is done: a restart
        // combines them again.
        let keep = self.cfg.coll.recovery.is_some();
        let op = self.op_mut(group, slot, seq);
        op.bad = bad;
        op.has_data = has_data;
        op.result = Some(result);
        // Contributions are consumed.
        if !keep {
            for l in op.locals.iter_mut().flatten() {
                l.data = None;
            }
        }
        for c in op.children.iter_mut() {
            *c = Some(None);
        }
        let rate = match sig.dtype {
            CollType::F32 => self.cfg.coll.rate_f32,
            CollType::F64 => self.cfg.coll.rate_f64,
            CollType::I32 => self.cfg.coll.rate_i32,
            CollType::I64 => self.cfg.coll.rate_i64,
        };
        let t = self.q.now()
            + self.cfg.coll.step_overhead.unwrap_or(self.cfg.message_overhead)
            + if reduced > 0 {
                rate.serialization(Bytes(reduced))
            } else {
                SimTime::ZERO
            };
        let g = &self.coll.groups[group as usize];
        let (node, attempt) = (g.slots[slot as usize].node, g.attempt);
        let by = self.net.node_origin(node);
        let ev = CollEvent::Combined {
            group,
            slot,
            seq,
            attempt,
        };
        self.q.schedule_by(by, t, WorldEvent::Coll(ev));
    }

    fn alloc_wire(&mut self, w: Wire) -> u32 {
        if let Some(i) = self.coll.free_wire.pop() {
            self.coll.wire[i as usize] = Some(w);
            i
        } else {
            self.coll.wire.push(Some(w));
            (self.coll.wire.len() - 1) as u32
        }
    }

    /// Packets of a `len`-byte message: (count, payload of each).
    fn split(&self, len: u64) -> Vec<u32> {
        let mtu = self.mtu as u64;
        let n = len.div_ceil(mtu).max(1);
        (0..n).map(|k| (len - k * mtu).min(mtu) as u32).collect()
    }

    /// The partial result of `seq` at `slot` is ready: send it up, or (root) broadcast it.
    fn combined(&mut self, group: u32, slot: u32, seq: u64) {
        let g = &self.coll.groups[group as usize];
        let s = &g.slots[slot as usize];
        let (node, parent, rail, attempt) = (s.node, s.parent, g.rail, g.attempt);
        let nslots = g.slots.len() as u32;
        let op = &s.ops[&seq];
        let (sig, bad, has_data) = (op.sig, op.bad, op.has_data);
        let result = op.result.clone().unwrap_or_default();
        let now = self.q.now();
        match parent {
            Some(p) => {
                let ps = &g.slots[p as usize];
                let child = ps
                    .children
                    .iter()
                    .position(|&c| c == slot)
                    .expect("child of its parent") as u32;
                let to = ps.node;
                // A subtree without data (broadcast away from the root, barrier) sends an empty
                // message.
                let contributed = has_data && !bad;
                let sizes = self.split(result.len() as u64);
                let w = self.alloc_wire(Wire {
                    group,
                    attempt,
                    seq,
                    to_slot: p,
                    child,
                    sig,
                    bad,
                    data: contributed.then_some(result),
                    packets: sizes.len() as u64,
                    seen: 0,
                    receivers: 0,
                });
                for len in sizes {
                    let mut pkt = Packet::new(TAG_COLL | w as u64, node, to, len, self.header, now);
                    pkt.rail = rail;
                    self.coll.stats[1] += 1;
                    self.coll_inject(pkt);
                }
            }
            None => {
                self.op_mut(group, slot, seq).sent_down = true;
                if nslots > 1 {
                    let down = Down {
                        group,
                        attempt,
                        seq,
                        sig,
                        bad,
                        node,
                        rail,
                        receivers: nslots - 1,
                    };
                    self.multicast_down(down, result.len() as u64, now);
                }
                self.deliver_local(group, slot, seq);
            }
        }
    }

    /// Send a collective's result of `len` bytes down the group's multicast tree from the root
    /// `down.node`: one wire counting the packets and the members that must receive them, one
    /// multicast packet per piece.
    fn multicast_down(&mut self, down: Down, len: u64, now: SimTime) {
        let sizes = self.split(len);
        let w = self.alloc_wire(Wire {
            group: down.group,
            attempt: down.attempt,
            seq: down.seq,
            to_slot: 0,
            child: 0,
            sig: down.sig,
            bad: down.bad,
            data: None,
            packets: sizes.len() as u64,
            seen: 0,
            receivers: down.receivers,
        });
        for len in sizes {
            let tag = TAG_COLL | TAG_DOWN | (down.group as u64) << 32 | w as u64;
            let mut pkt = Packet::multicast(tag, down.node, down.group, len, self.header, now);
            pkt.rail = down.rail;
            self.coll.stats[2] += 1;
            self.coll_inject(pkt);
        }
    }

    fn coll_inject(&mut self, pkt: Packet) {
        if self.net.inject(&mut self.q, pkt, &mut self.arrivals).is_err() {
            self.stats.add(crate::world::NicStat::Unroutable, 1);
        }
    }

    /// A packet of the unit reached node `p.dst`.
    pub(crate) fn coll_packet(&mut self, p: Packet) {
        if self.cfg.rx_buffer.is_some() {
            // The unit consumes its packets at once.
            self.net
                .release_ejection(&mut self.q, p.dst, p.rail, Network::buffer_credits(&p));
        }
        let node = p.dst;
        let wire = (p.tag & 0xffff_ffff) as u32;
        let at = self.q.now() + self.cfg.rx_overhead;
        let by = self.net.node_origin(node);
        if p.tag & TAG_DOWN != 0 {
            let group = ((p.tag >> 32) & 0x3fff_ffff) as u32;
            let slot = self
                .coll
                .groups
                .get(group as usize)
                .and_then(|g| g.slot_of.get(&node).copied())
                .filter(|&s| s != 0);
            let live = self.coll.wire.get(wire as usize).and_then(Option::as_ref);
            let (Some(slot), Some(w)) = (slot, live.filter(|w| w.group == group)) else {
                self.coll.stats[3] += 1;
                return;
            };
            let (seq, packets, attempt) = (w.seq, w.packets, w.attempt);
            let g = &mut self.coll.groups[group as usize];
            let current = g.attempt == attempt;
            let Some(op) = g.slots[slot as usize].ops.get_mut(&seq) else {
                if g.recover_pending || g.attempt > 0 {
                    // A member that already has the result (a repeated broadcast).
                    return;
                }
                self.coll.stats[3] += 1;
                return;
            };
            if !current || op.down_done {
                return;
            }
            op.down_pkts += 1;
            if op.down_pkts == packets {
                op.down_done = true;
                let w = self.coll.wire[wire as usize].as_mut().expect("live broadcast");
                w.receivers -= 1;
                if w.receivers == 0 {
                    // Every member NIC has it: the root's record is done (the result is in
                    // each member's operation state).
                    self.coll.wire[wire as usize] = None;
                    self.coll.free_wire.push(wire);
                }
                let at = at + self.coll_jitter(node);
                self.q
                    .schedule_by(by, at, WorldEvent::Coll(CollEvent::DownIn { group, slot, seq }));
            }
        } else {
            let w = self.coll.wire[wire as usize].as_mut().expect("live gather message");
            w.seen += 1;
            if w.seen == w.packets {
                let at = at + self.coll_jitter(node);
                self.q
                    .schedule_by(by, at, WorldEvent::Coll(CollEvent::ChildIn { wire }));
            }
        }
    }

    /// A uniform delay in [0, `nic.coll.jitter`] for a message completed at `node` (zero
    /// without jitter).
    fn coll_jitter(&mut self, node: NodeId) -> SimTime {
        let j = self.cfg.coll.jitter;
        if j == SimTime::ZERO {
            return SimTime::ZERO;
        }
        let i = node.0 as usize;
        if self.coll.jitter.len() <= i {
            self.coll.jitter.resize_with(i + 1, || None);
        }
        let seed = self.seed;
        let rng = self.coll.jitter[i]
            .get_or_insert_with(|| hpcnet_des::RngStreams::new(seed).stream("nic.coll.jitter", u64::from(node.0)));
        SimTime(rand::Rng::gen_range(rng, 0..=j.0))
    }

    /// The result of `seq` is at `slot`'s NIC: write it to each local member. (The result
    /// stays in the root's operation state, which outlives every member's: the broadcast
    /// carried a copy of it.)
    fn deliver_local(&mut self, group: u32, slot: u32, seq: u64) {
        let now = self.q.now();
        let g = &self.coll.groups[group as usize];
        let nslots = g.slots.len() as u32;
        let root = &g.slots[0].ops[&seq];
        let len = if root.bad {
            0
        } else {
            root.result.as_ref().map_or(0, Vec::len) as u64
        };
        let s = &g.slots[slot as usize];
        let node = s.node;
        let by = self.net.node_origin(node);
        for local in 0..s.local.len() as u32 {
            let op = &self.coll.groups[group as usize].slots[slot as usize].ops[&seq];
            let writes = op.locals[local as usize].as_ref().is_some_and(|l| l.dst != u64::MAX);
            let done = if writes && len > 0 {
                let d = self.timing.write_time(len);
                self.nics[node.index()].host.write(now, d)
            } else {
                now
            };
            let ev = CollEvent::Delivered {
                group,
                slot,
                seq,
                local,
            };
            self.q.schedule_by(by, done, WorldEvent::Coll(ev));
        }
        if slot == 0 {
            self.op_mut(group, slot, seq).slots_left = nslots;
        }
    }

    /// The result is in local member `local`'s memory: its completion.
    fn delivered(&mut self, group: u32, slot: u32, seq: u64, local: u32) {
        let now = self.q.now();
        let slots = &mut self.coll.groups[group as usize].slots;
        let op = slots[slot as usize].ops.get_mut(&seq).expect("collective in progress");
        op.delivered += 1;
        let last = op.delivered == op.locals.len();
        let l = op.locals[local as usize].as_ref().expect("posted");
        let (rank, dst, cq, wr_id) = (l.rank, l.dst, l.cq, l.wr_id);
        let root = &slots[0].ops[&seq];
        let bad = root.bad;
        let result: &[u8] = root.result.as_deref().unwrap_or(&[]);
        let bytes = result.len() as u64;
        if !bad && dst != u64::MAX && !result.is_empty() {
            // The range was checked at post time.
            let _ = self.mem[rank.index()].write(dst, result);
        }
        if last {
            // The root keeps its operation state (the result) until every member NIC is done.
            if slot != 0 {
                slots[slot as usize].ops.remove(&seq);
            }
            let root = slots[0].ops.get_mut(&seq).expect("root state outlives the members'");
            root.slots_left -= 1;
            if root.slots_left == 0 {
                slots[0].ops.remove(&seq);
            }
        }
        self.coll.stats[0] += 1;
        self.push_cqe(
            cq,
            Cqe {
                wr_id,
                kind: CqeKind::Coll,
                status: if bad { CqeStatus::CollMismatch } else { CqeStatus::Ok },
                bytes: if bad { 0 } else { bytes },
                peer: rank,
                addr: 0,
                value: 0,
                at: now,
            },
        );
    }

    /// The first rail, from `start` on, whose cables at every one of `nodes` the routers know
    /// to be working; `start` when there is none.
    fn group_rail(&self, nodes: &[NodeId], start: u8) -> u8 {
        let rails = self.net.rails();
        (0..rails)
            .map(|k| (start % rails + k) % rails)
            .find(|&r| nodes.iter().all(|&n| self.net.rail_usable(n, r)))
            .unwrap_or(start)
    }

    /// The fabric lost a packet of the unit (tag `tag`): with `nic.coll.recovery`, the group's
    /// unfinished collectives restart a time-out later ([`World::coll_recover`]).
    pub(crate) fn coll_lost(&mut self, tag: u64) {
        self.coll.recovery[0] += 1;
        let wire = (tag & 0xffff_ffff) as u32;
        let Some(w) = self.coll.wire.get(wire as usize).and_then(Option::as_ref) else {
            return;
        };
        let (group, attempt) = (w.group, w.attempt);
        let Some(timeout) = self.cfg.coll.recovery.as_ref().map(|r| r.timeout) else {
            return;
        };
        let g = &mut self.coll.groups[group as usize];
        if g.attempt != attempt || g.recover_pending {
            return;
        }
        g.recover_pending = true;
        let by = self.net.node_origin(g.slots[0].node);
        let t = self.q.now() + timeout;
        self.q
            .schedule_by(by, t, WorldEvent::Coll(CollEvent::Recover { group, attempt }));
    }

    /// After the routers learn of a failure or repair: move every group whose rail has a member
    /// NIC's cable known dead to a rail that reaches every member, and program its multicast
    /// tables there (the library re-programs the group; collectives in flight keep their
    /// state, and those that lost packets restart at their time-out).
    pub(crate) fn coll_rehome(&mut self) {
        for group in 0..self.coll.groups.len() {
            let g = &self.coll.groups[group];
            let nodes: Vec<NodeId> = g.slots.iter().map(|s| s.node).collect();
            if nodes.iter().all(|&n| self.net.rail_usable(n, g.rail)) {
                continue;
            }
            let rail = self.group_rail(&nodes, g.rail + 1);
            if rail != g.rail
                && self
                    .net
                    .program_multicast(group as u32, rail, nodes[0], &nodes[1..])
                    .is_ok()
            {
                self.coll.groups[group].rail = rail;
                self.coll.recovery[2] += 1;
            }
        }
    }

    /// The time-out of restart `attempt` of `group`: agree on the state (modelled as known at
    /// once), move the group to a working rail, and restart every unfinished collective — the
    /// broadcast again where the root had sent it, the whole gather otherwise. After
    /// `nic.coll.recovery.retries` restarts, or with no rail reaching every member, the
    /// unfinished members complete with [`CqeStatus::RetryExceeded`].
    fn coll_recover(&mut self, group: u32, attempt: u32) {
        let retries = self.cfg.coll.recovery.as_ref().map_or(0, |r| r.retries);
        let g = &mut self.coll.groups[group as usize];
        g.recover_pending = false;
        if g.attempt != attempt {
            return;
        }
        g.attempt += 1;
        let nodes: Vec<NodeId> = g.slots.iter().map(|s| s.node).collect();
        let old = g.rail;
        let rails = self.net.rails();
        let alive = |r: u8| nodes.iter().all(|&n| self.net.rail_usable(n, r));
        // Another rail first: the old one lost the packets.
        let rail = (1..=rails).map(|k| (old + k) % rails).find(|&r| alive(r));
        let programmed =
            rail.filter(|&r| r == old || self.net.program_multicast(group, r, nodes[0], &nodes[1..]).is_ok());
        let g = &mut self.coll.groups[group as usize];
        let Some(rail) = programmed.filter(|_| g.attempt <= retries) else {
            self.coll_fail(group);
            return;
        };
        if rail != old {
            g.rail = rail;
            self.coll.recovery[2] += 1;
        }
        self.coll.recovery[1] += 1;
        let seqs: std::collections::BTreeSet<u64> = g.slots.iter().flat_map(|s| s.ops.keys().copied()).collect();
        for seq in seqs {
            let g = &mut self.coll.groups[group as usize];
            if g.slots[0].ops.get(&seq).is_some_and(|o| o.sent_down) {
                self.coll_rebroadcast(group, seq);
                continue;
            }
            let mut restart = Vec::new();
            for (i, s) in g.slots.iter_mut().enumerate() {
                let nc = s.children.len();
                if let Some(op) = s.ops.get_mut(&seq) {
                    op.children = vec![None; nc];
                    op.result = None;
                    op.has_data = false;
                    op.down_pkts = 0;
                    restart.push(i as u32);
                }
            }
            for slot in restart {
                self.try_combine(group, slot, seq);
            }
        }
    }

    /// Send the root's result of `seq` again to the member NICs that do not have it all.
    fn coll_rebroadcast(&mut self, group: u32, seq: u64) {
        let g = &mut self.coll.groups[group as usize];
        let mut receivers = 0;
        for s in g.slots[1..].iter_mut() {
            if let Some(op) = s.ops.get_mut(&seq).filter(|o| !o.down_done) {
                op.down_pkts = 0;
                receivers += 1;
            }
        }
        if receivers == 0 {
            return;
        }
        let (node, rail, attempt) = (g.slots[0].node, g.rail, g.attempt);
        let op = &g.slots[0].ops[&seq];
        let (sig, bad) = (op.sig, op.bad);
        let len = op.result.as_ref().map_or(0, Vec::len) as u64;
        let down = Down {
            group,
            attempt,
            seq,
            sig,
            bad,
            node,
            rail,
            receivers,
        };
        let now = self.q.now();
        self.multicast_down(down, len, now);
    }

    /// A member posted collective `seq` of `group` after the group gave up on it: it completes
    /// with [`CqeStatus::RetryExceeded`] as the others did, instead of waiting for contributions
    /// that will not come.
    fn coll_refuse_late(&mut self, group: u32, slot: u32, seq: u64, local: u32) {
        let now = self.q.now();
        let s = &mut self.coll.groups[group as usize].slots[slot as usize];
        let Some(op) = s.ops.get_mut(&seq) else { return };
        let Some(l) = op.locals[local as usize].take() else {
            return;
        };
        if op.locals.iter().all(Option::is_none) {
            s.ops.remove(&seq);
        }
        self.coll.recovery[3] += 1;
        self.push_cqe(
            l.cq,
            Cqe {
                wr_id: l.wr_id,
                kind: CqeKind::Coll,
                status: CqeStatus::RetryExceeded,
                bytes: 0,
                peer: l.rank,
                addr: 0,
                value: 0,
                at: now,
            },
        );
    }

    /// Give up on `group`'s unfinished collectives: every posted member that has no result
    /// coming completes with [`CqeStatus::RetryExceeded`], and so does every member that posts
    /// one of them later ([`World::coll_refuse_late`]).
    fn coll_fail(&mut self, group: u32) {
        let now = self.q.now();
        let mut cqes = Vec::new();
        let g = &mut self.coll.groups[group as usize];
        let seqs: std::collections::BTreeSet<u64> = g.slots.iter().flat_map(|s| s.ops.keys().copied()).collect();
        for seq in seqs {
            let sent = g.slots[0].ops.get(&seq).is_some_and(|o| o.sent_down);
            let mut gone = 0;
            for (i, s) in g.slots.iter_mut().enumerate() {
                let waiting = match s.ops.get(&seq) {
                    None => false,
                    Some(op) if sent => i != 0 && !op.down_done,
                    Some(_) => true,
                };
                if !waiting {
                    continue;
                }
                let op = s.ops.remove(&seq).expect("waiting");
                for l in op.locals.into_iter().flatten() {
                    cqes.push((l.cq, l.wr_id, l.rank));
                }
                gone += 1;
            }
            if gone > 0 {
                g.failed.insert(seq);
            }
            if sent && gone > 0 {
                if let Some(root) = g.slots[0].ops.get_mut(&seq) {
                    // Slots that never delivered (the root counts down each slot's delivery).
                    if root.slots_left > 0 {
                        root.slots_left = root.slots_left.saturating_sub(gone);
                        if root.slots_left == 0 {
                            g.slots[0].ops.remove(&seq);
                        }
                    }
                }
            }
        }
        for (cq, wr_id, rank) in cqes {
            self.coll.recovery[3] += 1;
            self.push_cqe(
                cq,
                Cqe {
                    wr_id,
                    kind: CqeKind::Coll,
                    status: CqeStatus::RetryExceeded,
                    bytes: 0,
                    peer: rank,
                    addr: 0,
                    value: 0,
                    at: now,
                },
            );
        }
    }
}

/// Record a descriptor's (or a child's) signature; a difference marks the operation bad.
fn merge_sig(op: &mut OpState, sig: Option<Sig>) {
    match (op.sig, sig) {
        (None, s) => op.sig = s,
        (Some(a), Some(b)) if a != b => op.bad = true,
        _ => {}
    }
}

/// `acc ← acc ∘ x`, element-wise on little-endian bytes (integer sums wrap; float max/min are
/// IEEE maxNum/minNum).
pub(crate) fn reduce_into(t: CollType, op: CollOp, acc: &mut [u8], x: &[u8]) {
    macro_rules! go {
        ($ty:ty, $n:expr, $f:expr) => {
            for (a, b) in acc.chunks_exact_mut($n).zip(x.chunks_exact($n)) {
                let u = <$ty>::from_le_bytes(a.try_into().expect("element"));
                let v = <$ty>::from_le_bytes(b.try_into().expect("element"));
                let f: fn($ty, $ty) -> $ty = $f;
                a.copy_from_slice(&f(u, v).to_le_bytes());
            }
        };
    }
    use CollOp::*;
    match (t, op) {
        (CollType::F32, Sum) => go!(f32, 4, |a, b| a + b),
        (CollType::F32, Max) => go!(f32, 4, f32::max),
        (CollType::F32, Min) => go!(f32, 4, f32::min),
        (CollType::F64, Sum) => go!(f64, 8, |a, b| a + b),
        (CollType::F64, Max) => go!(f64, 8, f64::max),
        (CollType::F64, Min) => go!(f64, 8, f64::min),
        (CollType::I32, Sum) => go!(i32, 4, i32::wrapping_add),
        (CollType::I32, Max) => go!(i32, 4, std::cmp::max),
        (CollType::I32, Min) => go!(i32, 4, std::cmp::min),
        (CollType::I32, Band) => go!(i32, 4, |a, b| a & b),
        (CollType::I32, Bor) => go!(i32, 4, |a, b| a | b),
        (CollType::I32, Bxor) => go!(i32, 4, |a, b| a ^ b),
        (CollType::I64, Sum) => go!(i64, 8, i64::wrapping_add),
        (CollType::I64, Max) => go!(i64, 8, std::cmp::max),
        (CollType::I64, Min) => go!(i64, 8, std::cmp::min),
        (CollType::I64, Band) => go!(i64, 8, |a, b| a & b),
        (CollType::I64, Bor) => go!(i64, 8, |a, b| a | b),
        (CollType::I64, Bxor) => go!(i64, 8, |a, b| a ^ b),
        // Refused at post time.
        (CollType::F32 | CollType::F64, Band | Bor | Bxor) => {}
    }
}
