//! Descriptor sequences for the Tianhe triggered offload unit (spec 04: "Algorithms are just
//! descriptor sequences … switching algorithm = software writes another sequence").
//!
//! This module owns the translation of a collective on a communicator into one descriptor
//! sequence (CH … CT) per member, for the NIC's sequence walker
//! ([`hpcnet_nic::triggered::Walker`]): binomial-tree reduce ([`binomial_reduce`], one trigger
//! per member: it waits for all its children at once and combines its own data, then its
//! children in order of increasing distance) and binomial-tree broadcast
//! ([`binomial_broadcast`]: a member takes its parent's packet and forwards it to each child,
//! one descriptor per child), double-binary-tree broadcast ([`double_binary_tree_broadcast`]:
//! the two halves as two collectives down two complementary trees), and recursive-doubling
//! allreduce
//! ([`recursive_doubling_allreduce`]: the SeqID counts the stages, as the spec describes for
//! recursive algorithms; member counts that are not powers of two fold pairs first) and
//! Rabenseifner allreduce ([`rabenseifner_allreduce`]: recursive halving then doubling over
//! parts of the vector) and the spec's reduce ([`halving_reduce`]: vector halving and distance
//! doubling, then a binomial-tree gather to the root). Trees are those of the software algorithms: ranks relative to the
//! root, child `r + 2^k` for every `2^k` below `r`'s lowest set bit. Every packet carries SeqID
//! 0 in the trees: one trigger per member suffices.
//!
//! Members are given in communicator order as the (node, virtual port) their offload unit
//! knows them by (a communicator created with `CommConfig::offload` opens one VP per member on
//! its NIC, `World::trig_open_vp`). Each sequence
//! is checked as the walker would check it, so field widths (JobID 8 bits, NodeID 24, VP 11)
//! and malformed input are errors here, naming the member.
//!
//! Cost: O(p log p) descriptors' worth of work for p members (each member's sequence is checked
//! once); a member has at most ⌈log2 p⌉ children.

use crate::error::CollError;
use crate::types::{check_op, Datatype, ReduceOp};
use hpcnet_nic::triggered::{CollDescriptor, DescError, Payload, Source, Walker};
use hpcnet_nic::{CollOp, CollType};

/// A member as its offload unit knows it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Member {
    pub node: u32,
    pub vp: u32,
}

/// Why no sequences could be generated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OffloadError {
    #[error("{0}")]
    Call(CollError),
    #[error("{call}: members {a} and {b} share node {node} VP {vp}")]
    SharedEndpoint {
        call: &'static str,
        a: usize,
        b: usize,
        node: u32,
        vp: u32,
    },
    #[error("{call}: member {member}: {source}")]
    Descriptor {
        call: &'static str,
        member: usize,
        source: DescError,
    },
}

fn coll_type(d: Datatype) -> CollType {
    match d {
        Datatype::F32 => CollType::F32,
        Datatype::F64 => CollType::F64,
        Datatype::I32 => CollType::I32,
        Datatype::I64 => CollType::I64,
    }
}

fn coll_op(o: ReduceOp) -> CollOp {
    match o {
        ReduceOp::Sum => CollOp::Sum,
        ReduceOp::Max => CollOp::Max,
        ReduceOp::Min => CollOp::Min,
        ReduceOp::Band => CollOp::Band,
        ReduceOp::Bor => CollOp::Bor,
        ReduceOp::Bxor => CollOp::Bxor,
    }
}

fn payload_len(p: &Payload) -> u64 {
    match p {
        Payload::Operands(v) => v.len() as u64,
        Payload::Address { len, .. } => *len,
    }
}

/// Children (increasing distance) and parent of member `i` in the binomial tree of `p` members
/// rooted at `root`.
pub fn binomial_tree(i: usize, p: usize, root: usize) -> (Vec<usize>, Option<usize>) {
    let rel = (i + p - root) % p;
    let abs = |r: usize| (r + root) % p;
    let mut children = Vec::new();
    let mut mask = 1;
    while mask < p {
        if rel & mask != 0 {
            return (children, Some(abs(rel - mask)));
        }
        if rel + mask < p {
            children.push(abs(rel + mask));
        }
        mask <<= 1;
    }
    (children, None)
}

fn check_members(call: &'static str, members: &[Member], root: usize) -> Result<(), OffloadError> {
    if root >= members.len() {
        return Err(OffloadError::Call(CollError::RankOutside {
            call,
            index: root,
            size: members.len(),
        }));
    }
    let mut seen = std::collections::BTreeMap::new();
    for (b, m) in members.iter().enumerate() {
        if let Some(a) = seen.insert(*m, b) {
            return Err(OffloadError::SharedEndpoint {
                call,
                a,
                b,
                node: m.node,
                vp: m.vp,
            });
        }
    }
    Ok(())
}

/// Check every generated sequence as the walker would; an empty one is a member whose
/// sequence was not asked for (see [`Only`]).
fn checked(
    call: &'static str,
    members: &[Member],
    seqs: Vec<Vec<CollDescriptor>>,
) -> Result<Vec<Vec<CollDescriptor>>, OffloadError> {
    for (member, (m, s)) in members.iter().zip(&seqs).enumerate() {
        if s.is_empty() {
            continue;
        }
        Walker::new(m.node, s.clone()).map_err(|source| OffloadError::Descriptor { call, member, source })?;
    }
    Ok(seqs)
}

/// Which members' sequences a generator builds: all, or one member's (the others are left
/// empty). A member posts its own sequence only, so building and checking the p − 1 others
/// (O(p log p) descriptors and p checks per member and call) is work for nothing.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Only {
    All,
    Member(usize),
}

impl Only {
    fn skips(self, i: usize) -> bool {
        matches!(self, Only::Member(m) if m != i)
    }
}

/// Binomial-tree reduce to `root`: `data[i]` is member i's contribution (operands, or address
/// and length in its memory; all of one length); the root's completion carries the result and
/// names `root_result` (an address for the result of the same length) if given.
pub fn binomial_reduce(
    job: u32,
    members: &[Member],
    root: usize,
    dtype: Datatype,
    op: ReduceOp,
    data: &[Payload],
    root_result: Option<u64>,
) -> Result<Vec<Vec<CollDescriptor>>, OffloadError> {
    const CALL: &str = "offload reduce";
    check_members(CALL, members, root)?;
    check_op(CALL, dtype, op).map_err(OffloadError::Call)?;
    let p = members.len();
    if data.len() != p {
        return Err(OffloadError::Call(CollError::BadBuffer {
            call: CALL,
            reason: format!("{} contributions for {p} members", data.len()),
        }));
    }
    let len = payload_len(&data[0]);
    if let Some(i) = data.iter().position(|d| payload_len(d) != len) {
        return Err(OffloadError::Call(CollError::BadBuffer {
            call: CALL,
            reason: format!("member {i} contributes {} bytes, member 0 {len}", payload_len(&data[i])),
        }));
    }
    let seqs = (0..p)
        .map(|i| {
            let (children, parent) = binomial_tree(i, p, root);
            let from: Vec<Source> = children
                .iter()
                .map(|&c| Source {
                    node: members[c].node,
                    vp: members[c].vp,
                })
                .collect();
            let mut d = CollDescriptor::new(job, coll_type(dtype), coll_op(op)).wait(0, &from);
            d.ch = true;
            d.swap_local_data = true;
            d.reduce_flag = !from.is_empty();
            d.source_vp = members[i].vp;
            d.payload = data[i].clone();
            if let Some(q) = parent {
                d = d.send(members[q].node, members[q].vp, 0);
            }
            let mut seq = vec![d];
            if let (None, Some(addr)) = (parent, root_result) {
                let mut end = CollDescriptor::new(job, coll_type(dtype), coll_op(op));
                end.source_vp = members[i].vp;
                end.payload = Payload::Address { addr, len };
                seq.push(end);
            }
            let last = seq.len() - 1;
            seq[last].ct = true;
            seq[last].coll_end_flag = true;
            seq
        })
        .collect();
    checked(CALL, members, seqs)
}

/// Recursive-doubling allreduce: `data[i]` is member i's contribution (all of one length);
/// every member's completion carries the result (and names `results[i]`, an address, if
/// given). With p' the largest power of two ≤ p and r = p − p', members 2j and 2j + 1 for
/// j < r first fold: 2j sends its data to 2j + 1 (SeqID 0), which combines its own data with
/// it; the p' remaining members exchange and combine with the member whose new index differs
/// in bit s at stage s (SeqID s + 1); at the end 2j + 1 sends the result back to 2j (SeqID
/// log2 p' + 1). A member combines its own partial result first, then its partner's; with a
/// commutative operator both partners compute the same bits.
pub fn recursive_doubling_allreduce(
    job: u32,
    members: &[Member],
    dtype: Datatype,
    op: ReduceOp,
    data: &[Payload],
    results: &[Option<u64>],
) -> Result<Vec<Vec<CollDescriptor>>, OffloadError> {
    const CALL: &str = "offload allreduce";
    check_members(CALL, members, 0)?;
    check_op(CALL, dtype, op).map_err(OffloadError::Call)?;
    let p = members.len();
    if data.len() != p || results.len() != p {
        return Err(OffloadError::Call(CollError::BadBuffer {
            call: CALL,
            reason: format!(
                "{} contributions and {} result buffers for {p} members",
                data.len(),
                results.len()
            ),
        }));
    }
    let len = payload_len(&data[0]);
    if let Some(i) = data.iter().position(|d| payload_len(d) != len) {
        return Err(OffloadError::Call(CollError::BadBuffer {
            call: CALL,
            reason: format!("member {i} contributes {} bytes, member 0 {len}", payload_len(&data[i])),
        }));
    }
    let pow = 1usize << (usize::BITS - 1 - p.leading_zeros());
    let rem = p - pow;
    let stages = pow.trailing_zeros();
    // Member of new index k, and new index of member i (None: folded into its odd partner).
    let member_of = |k: usize| if k < rem { 2 * k + 1 } else { k + rem };
    let new_index = |i: usize| {
        if i < 2 * rem {
            (i % 2 == 1).then_some(i / 2)
        } else {
            Some(i - rem)
        }
    };
    let src = |i: usize| Source {
        node: members[i].node,
        vp: members[i].vp,
    };
    let new = || CollDescriptor::new(job, coll_type(dtype), coll_op(op));
    let result_payload = |i: usize| results[i].map(|addr| Payload::Address { addr, len });
    let seqs = (0..p)
        .map(|i| {
            let mut seq = Vec::new();
            let mut first = new();
            first.swap_local_data = true;
            first.payload = data[i].clone();
            match new_index(i) {
                None => {
                    // Folded: send the data to the odd partner, wait for the result.
                    seq.push(first.send(members[i + 1].node, members[i + 1].vp, 0));
                    let mut last = new().wait(stages + 1, &[src(i + 1)]);
                    last.swap_remote_data = true;
                    if let Some(r) = result_payload(i) {
                        last.payload = r;
                    }
                    seq.push(last);
                }
                Some(k) => {
                    if i < 2 * rem {
                        first = first.wait(0, &[src(i - 1)]);
                        first.reduce_flag = true;
                    }
                    seq.push(first);
                    for s in 0..stages {
                        let partner = member_of(k ^ (1 << s));
                        let last = seq.len() - 1;
                        seq[last] = seq[last]
                            .clone()
                            .send(members[partner].node, members[partner].vp, s + 1);
                        let mut d = new().wait(s + 1, &[src(partner)]);
                        d.reduce_flag = true;
                        seq.push(d);
                    }
                    if i < 2 * rem {
                        let last = seq.len() - 1;
                        seq[last] = seq[last]
                            .clone()
                            .send(members[i - 1].node, members[i - 1].vp, stages + 1);
                    }
                    if let Some(r) = result_payload(i) {
                        let mut end = new();
                        end.payload = r;
                        seq.push(end);
                    }
                }
            }
            for d in &mut seq {
                d.source_vp = members[i].vp;
            }
            seq[0].ch = true;
            let last = seq.len() - 1;
            seq[last].ct = true;
            seq[last].coll_end_flag = true;
            seq
        })
        .collect();
    checked(CALL, members, seqs)
}

/// Rabenseifner allreduce (the spec's allreduce algorithm): reduce-scatter by recursive
/// halving, then allgather by recursive doubling, over p' (the largest power of two ≤ p)
/// members; with r = p − p', members 2j and 2j + 1 (j < r) fold first and unfold at the end as
/// in [`recursive_doubling_allreduce`]. At halving stage s a member exchanges with the member
/// whose new index differs in bit `log2 p' − 1 − s`: the lower index keeps the lower half of its
/// current element range, sends the upper half and reduces the partner's copy of the lower
/// half into its own (own data first); doubling stages undo the halving, copying the partner's
/// range in. SeqIDs: fold 0, halving 1 … L, doubling L + 1 … 2L, unfold 2L + 1 (L = log2 p').
/// Every element is reduced in one place per stage, so every member ends with the same bits.
pub fn rabenseifner_allreduce(
    job: u32,
    members: &[Member],
    dtype: Datatype,
    op: ReduceOp,
    data: &[Payload],
    results: &[Option<u64>],
) -> Result<Vec<Vec<CollDescriptor>>, OffloadError> {
    rabenseifner_allreduce_of(Only::All, job, members, (dtype, op), data, results)
}

/// [`rabenseifner_allreduce`] building only `which`'s sequences.
pub(crate) fn rabenseifner_allreduce_of(
    which: Only,
    job: u32,
    members: &[Member],
    (dtype, op): (Datatype, ReduceOp),
    data: &[Payload],
    results: &[Option<u64>],
) -> Result<Vec<Vec<CollDescriptor>>, OffloadError> {
    halving(
        "offload Rabenseifner allreduce",
        job,
        members,
        None,
        (dtype, op),
        data,
        results,
        which,
    )
}

/// Reduce to `root` by vector halving and distance doubling, then a binomial-tree gather (the
/// spec's reduce algorithm): the halving stages of [`rabenseifner_allreduce`] on ranks
/// relative to the root; then, for b = 1, 2, 4, …, the member whose new index has bit b set
/// (and no lower bit) sends its range to the one without it, so new index 0 ends with the
/// whole result; a root folded into its partner gets it back (SeqID 2L + 1). Only the root's
/// completion carries the result (naming `root_result`, if given).
pub fn halving_reduce(
    job: u32,
    members: &[Member],
    root: usize,
    dtype: Datatype,
    op: ReduceOp,
    data: &[Payload],
    root_result: Option<u64>,
) -> Result<Vec<Vec<CollDescriptor>>, OffloadError> {
    halving_reduce_of(Only::All, job, members, root, (dtype, op), data, root_result)
}

/// [`halving_reduce`] building only `which`'s sequences.
pub(crate) fn halving_reduce_of(
    which: Only,
    job: u32,
    members: &[Member],
    root: usize,
    (dtype, op): (Datatype, ReduceOp),
    data: &[Payload],
    root_result: Option<u64>,
) -> Result<Vec<Vec<CollDescriptor>>, OffloadError> {
    let results: Vec<Option<u64>> = (0..members.len())
        .map(|i| if i == root { root_result } else { None })
        .collect();
    halving(
        "offload halving reduce",
        job,
        members,
        Some(root),
        (dtype, op),
        data,
        &results,
        which,
    )
}

/// Halving reduce-scatter, then allgather by doubling (`root` None) or gather to `root`.
#[allow(clippy::too_many_arguments)]
fn halving(
    call: &'static str,
    job: u32,
    members: &[Member],
    root: Option<usize>,
    (dtype, op): (Datatype, ReduceOp),
    data: &[Payload],
    results: &[Option<u64>],
    which: Only,
) -> Result<Vec<Vec<CollDescriptor>>, OffloadError> {
    let gather = root.is_some();
    let root = root.unwrap_or(0);
    check_members(call, members, root)?;
    check_op(call, dtype, op).map_err(OffloadError::Call)?;
    let p = members.len();
    if data.len() != p || results.len() != p {
        return Err(OffloadError::Call(CollError::BadBuffer {
            call,
            reason: format!(
                "{} contributions and {} result buffers for {p} members",
                data.len(),
                results.len()
            ),
        }));
    }
    let len = payload_len(&data[0]);
    if let Some(i) = data.iter().position(|d| payload_len(d) != len) {
        return Err(OffloadError::Call(CollError::BadBuffer {
            call,
            reason: format!("member {i} contributes {} bytes, member 0 {len}", payload_len(&data[i])),
        }));
    }
    let size = dtype.size() as u64;
    let n = len / size;
    let pow = 1usize << (usize::BITS - 1 - p.leading_zeros());
    let rem = p - pow;
    let stages = pow.trailing_zeros();
    // Ranks relative to the root: `at(v)` is the member of relative rank v; `member_of(k)` the
    // member of new index k.
    let at = |v: usize| (v + root) % p;
    let member_of = |k: usize| at(if k < rem { 2 * k + 1 } else { k + rem });
    let src = |i: usize| Source {
        node: members[i].node,
        vp: members[i].vp,
    };
    let new = || CollDescriptor::new(job, coll_type(dtype), coll_op(op));
    let bytes = |(lo, hi): (u64, u64)| Some((lo * size, (hi - lo) * size));
    let seqs = (0..p)
        .map(|i| {
            if which.skips(i) {
                return Vec::new();
            }
            let v = (i + p - root) % p;
            let mut seq = Vec::new();
            let mut first = new();
            first.swap_local_data = true;
            first.payload = data[i].clone();
            if v < 2 * rem && v.is_multiple_of(2) {
                // Folded into v + 1; allreduce: every folded member gets the result back,
                // reduce: the root only.
                let to = at(v + 1);
                seq.push(first.send(members[to].node, members[to].vp, 0));
                if !gather || v == 0 {
                    let mut last = new().wait(2 * stages + 1, &[src(to)]);
                    last.swap_remote_data = true;
                    seq.push(last);
                }
            } else {
                let k = if v < 2 * rem { v / 2 } else { v - rem };
                if v < 2 * rem {
                    first = first.wait(0, &[src(at(v - 1))]);
                    first.reduce_flag = true;
                }
                seq.push(first);
                // Halving: ranges[s] is the element range held before stage s.
                let mut range = (0u64, n);
                let mut ranges = Vec::new();
                for s in 0..stages {
                    ranges.push(range);
                    let bit = pow >> (s + 1);
                    let partner = member_of(k ^ bit);
                    let mid = range.0 + (range.1 - range.0) / 2;
                    let (keep, give) = if k & bit == 0 {
                        ((range.0, mid), (mid, range.1))
                    } else {
                        ((mid, range.1), (range.0, mid))
                    };
                    let last = seq.len() - 1;
                    seq[last] = seq[last]
                        .clone()
                        .send(members[partner].node, members[partner].vp, s + 1);
                    seq[last].send_part = bytes(give);
                    let mut d = new().wait(s + 1, &[src(partner)]);
                    d.reduce_flag = true;
                    d.recv_part = bytes(keep);
                    seq.push(d);
                    range = keep;
                }
                // Doubling (allgather) or gather to new index 0: the stages in reverse.
                for (t, s) in (0..stages).rev().enumerate() {
                    let bit = pow >> (s + 1);
                    if gather && k & (bit - 1) != 0 {
                        // Its range went to a partner at a lower bit.
                        break;
                    }
                    let partner = member_of(k ^ bit);
                    let parent = ranges[s as usize];
                    let other = if range.0 == parent.0 {
                        (range.1, parent.1)
                    } else {
                        (parent.0, range.0)
                    };
                    let seq_id = stages + 1 + t as u32;
                    if !gather || k & bit != 0 {
                        let last = seq.len() - 1;
                        seq[last] = seq[last]
                            .clone()
                            .send(members[partner].node, members[partner].vp, seq_id);
                        seq[last].send_part = bytes(range);
                    }
                    if !gather || k & bit == 0 {
                        let mut d = new().wait(seq_id, &[src(partner)]);
                        d.swap_remote_data = true;
                        d.recv_part = bytes(other);
                        seq.push(d);
                    }
                    range = parent;
                }
                // Unfold: allreduce to every folded partner, reduce to a folded root.
                if v < 2 * rem && (!gather || v == 1) {
                    let to = at(v - 1);
                    let last = seq.len() - 1;
                    seq[last] = seq[last].clone().send(members[to].node, members[to].vp, 2 * stages + 1);
                }
            }
            if let Some(addr) = results[i] {
                let mut end = new();
                end.payload = Payload::Address { addr, len };
                seq.push(end);
            }
            for d in &mut seq {
                d.source_vp = members[i].vp;
            }
            seq[0].ch = true;
            let last = seq.len() - 1;
            seq[last].ct = true;
            seq[last].coll_end_flag = true;
            seq
        })
        .collect();
    checked(call, members, seqs)
}

/// Binomial-tree broadcast from `root`: `data` is the root's buffer (operands, or address and
/// length); `results[i]` is where member i's copy goes (an address; `None`: the completion only
/// carries it). The root's entry of `results` is ignored.
pub fn binomial_broadcast(
    job: u32,
    members: &[Member],
    root: usize,
    data: Payload,
    results: &[Option<u64>],
) -> Result<Vec<Vec<CollDescriptor>>, OffloadError> {
    const CALL: &str = "offload broadcast";
    check_members(CALL, members, root)?;
    check_results(CALL, members.len(), results)?;
    let p = members.len();
    let (parents, children): (Vec<_>, Vec<_>) = (0..p)
        .map(|i| {
            let (c, q) = binomial_tree(i, p, root);
            (q, c)
        })
        .unzip();
    tree_broadcast(CALL, job, members, &parents, &children, data, results, Only::All)
}

fn check_results(call: &'static str, p: usize, results: &[Option<u64>]) -> Result<(), OffloadError> {
    if results.len() != p {
        return Err(OffloadError::Call(CollError::BadBuffer {
            call,
            reason: format!("{} result buffers for {p} members", results.len()),
        }));
    }
    Ok(())
}

/// Double-binary-tree broadcast (the spec's broadcast algorithm; trees as the software
/// `Algorithm::DoubleBinaryTree`: the in-order binary tree on ranks relative to the root, and
/// the same tree moved by one rank) as two collectives: half 0 (the first ⌊len/2⌋ bytes) goes
/// down tree A as job `jobs[0]`, half 1 down tree B as job `jobs[1]`; each member runs one
/// sequence per job. Member i's halves land at `results[i]` and `results[i] + ⌊len/2⌋`.
pub fn double_binary_tree_broadcast(
    jobs: [u32; 2],
    members: &[Member],
    root: usize,
    data: Payload,
    results: &[Option<u64>],
) -> Result<[Vec<Vec<CollDescriptor>>; 2], OffloadError> {
    double_binary_tree_broadcast_of(Only::All, jobs, members, root, data, results)
}

/// [`double_binary_tree_broadcast`] building only `which`'s sequences.
pub(crate) fn double_binary_tree_broadcast_of(
    which: Only,
    jobs: [u32; 2],
    members: &[Member],
    root: usize,
    data: Payload,
    results: &[Option<u64>],
) -> Result<[Vec<Vec<CollDescriptor>>; 2], OffloadError> {
    const CALL: &str = "offload double-binary-tree broadcast";
    check_members(CALL, members, root)?;
    check_results(CALL, members.len(), results)?;
    if jobs[0] == jobs[1] {
        return Err(OffloadError::Call(CollError::BadBuffer {
            call: CALL,
            reason: format!("the two trees need two JobIDs, got {} twice", jobs[0]),
        }));
    }
    let p = members.len();
    let len = payload_len(&data);
    let half = len / 2;
    let halves = match &data {
        Payload::Operands(v) => [
            Payload::Operands(v[..half as usize].to_vec()),
            Payload::Operands(v[half as usize..].to_vec()),
        ],
        Payload::Address { addr, len } => [
            Payload::Address { addr: *addr, len: half },
            Payload::Address {
                addr: addr + half,
                len: len - half,
            },
        ],
    };
    let m = p - 1;
    let (parent, kids) = crate::algo::bcast::inorder_tree(m);
    let tree_root = (1..=m).find(|&q| parent[q].is_none());
    let abs = |rel: usize| (rel + root) % p;
    let mut out: [Vec<Vec<CollDescriptor>>; 2] = [Vec::new(), Vec::new()];
    for (tree, half_data) in halves.into_iter().enumerate() {
        // Relative rank at tree position q (1..=m).
        let rel = |q: usize| if tree == 0 { q } else { q % m + 1 };
        let mut parents = vec![None; p];
        let mut children = vec![Vec::new(); p];
        if let Some(tr) = tree_root {
            children[root].push(abs(rel(tr)));
        }
        for q in 1..=m {
            let me = abs(rel(q));
            parents[me] = Some(parent[q].map_or(root, |u| abs(rel(u))));
            children[me] = kids[q].iter().map(|&k| abs(rel(k))).collect();
        }
        let res: Vec<Option<u64>> = results
            .iter()
            .map(|r| r.map(|a| a + if tree == 0 { 0 } else { half }))
            .collect();
        out[tree] = tree_broadcast(CALL, jobs[tree], members, &parents, &children, half_data, &res, which)?;
    }
    Ok(out)
}

/// Broadcast down a tree given by each member's parent and children (in sending order).
#[allow(clippy::too_many_arguments)]
fn tree_broadcast(
    call: &'static str,
    job: u32,
    members: &[Member],
    parents: &[Option<usize>],
    children: &[Vec<usize>],
    data: Payload,
    results: &[Option<u64>],
    which: Only,
) -> Result<Vec<Vec<CollDescriptor>>, OffloadError> {
    let p = members.len();
    let len = payload_len(&data);
    let new = || CollDescriptor::new(job, CollType::I32, CollOp::Sum);
    let seqs = (0..p)
        .map(|i| {
            if which.skips(i) {
                return Vec::new();
            }
            let mut first = new();
            match parents[i] {
                Some(q) => {
                    first = first.wait(
                        0,
                        &[Source {
                            node: members[q].node,
                            vp: members[q].vp,
                        }],
                    );
                    first.swap_remote_data = true;
                }
                None => {
                    first.swap_local_data = true;
                    first.payload = data.clone();
                }
            }
            let mut seq = vec![first];
            for (k, &c) in children[i].iter().enumerate() {
                if k > 0 {
                    seq.push(new());
                }
                let last = seq.len() - 1;
                seq[last] = seq[last].clone().send(members[c].node, members[c].vp, 0);
            }
            if let (Some(_), Some(addr)) = (parents[i], results[i]) {
                // The copy lands at the member's result address when the sequence ends.
                let mut end = new();
                end.payload = Payload::Address { addr, len };
                seq.push(end);
            }
            for d in &mut seq {
                d.source_vp = members[i].vp;
            }
            seq[0].ch = true;
            let last = seq.len() - 1;
            seq[last].ct = true;
            seq[last].coll_end_flag = true;
            seq
        })
        .collect();
    checked(call, members, seqs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{reduce_into, to_bytes};
    use hpcnet_nic::triggered::{run_ideal, Endpoint, HashBufConfig};

    fn members(p: usize) -> Vec<Member> {
        // Two members per node, on VPs 3 and 4, so keys differ by VP as well as by node.
        (0..p)
            .map(|i| Member {
                node: (i / 2) as u32 * 7 + 1,
                vp: 3 + (i % 2) as u32,
            })
            .collect()
    }
    fn contribution(i: usize) -> Vec<f64> {
        (0..24)
            .map(|j| match (i + j) % 3 {
                0 => 1e16 + j as f64,
                1 => -1e16 + 0.25 * i as f64,
                _ => 0.1 * (i * j + 1) as f64,
            })
            .collect()
    }
    /// The reduce along the same tree, by the library's own reduction.
    fn reference(i: usize, p: usize, root: usize) -> Vec<u8> {
        let (children, _) = binomial_tree(i, p, root);
        let mut acc = to_bytes(&contribution(i));
        for c in children {
            reduce_into(Datatype::F64, ReduceOp::Sum, &mut acc, &reference(c, p, root)).unwrap();
        }
        acc
    }
    fn endpoints(ms: &[Member], seqs: Vec<Vec<CollDescriptor>>) -> Vec<Endpoint> {
        ms.iter()
            .zip(seqs)
            .map(|(m, seq)| Endpoint {
                node: m.node,
                vp: m.vp,
                seq,
            })
            .collect()
    }
    fn small_buffers() -> HashBufConfig {
        HashBufConfig {
            capacity: 4 * 256,
            slots: 4,
        }
    }

    #[test]
    fn trees_cover_every_member_once() {
        for p in 1..40 {
            for root in [0, p / 2, p - 1] {
                let mut parent_of = vec![None; p];
                for i in 0..p {
                    let (children, parent) = binomial_tree(i, p, root);
                    assert_eq!(parent.is_none(), i == root);
                    assert!(children.len() <= (p as f64).log2().ceil() as usize);
                    for c in children {
                        assert!(parent_of[c].replace(i).is_none());
                    }
                }
                for (i, &q) in parent_of.iter().enumerate() {
                    assert_eq!(q, binomial_tree(i, p, root).1);
                }
            }
        }
    }

    #[test]
    fn offloaded_reduce_equals_the_tree_reference_bit_for_bit() {
        for p in [1, 2, 3, 5, 8, 13] {
            for root in [0, p - 1, p / 2] {
                let ms = members(p);
                let data: Vec<Payload> = (0..p).map(|i| Payload::Operands(to_bytes(&contribution(i)))).collect();
                let want = reference(root, p, root);
                for seed in 0..8 {
                    let seqs =
                        binomial_reduce(9, &ms, root, Datatype::F64, ReduceOp::Sum, &data, Some(0x4000)).unwrap();
                    let r = run_ideal(endpoints(&ms, seqs), seed, small_buffers(), &mut |_, _, _| Vec::new()).unwrap();
                    assert_eq!(r.completions[root].data, want, "p {p} root {root} seed {seed}");
                    assert_eq!(r.completions[root].addr, Some(0x4000));
                    assert_eq!(r.packets, p as u64 - 1);
                }
            }
        }
    }

    #[test]
    fn integer_reduce_from_memory_equals_the_plain_sum() {
        let p = 6;
        let ms = members(p);
        let data: Vec<Payload> = (0..p)
            .map(|i| Payload::Address {
                addr: 0x100 * i as u64,
                len: 16,
            })
            .collect();
        let seqs = binomial_reduce(1, &ms, 2, Datatype::I64, ReduceOp::Sum, &data, None).unwrap();
        let r = run_ideal(endpoints(&ms, seqs), 3, small_buffers(), &mut |i, addr, len| {
            assert_eq!((addr, len), (0x100 * i as u64, 16));
            to_bytes(&[i as i64, 10 * i as i64])
        })
        .unwrap();
        assert_eq!(r.completions[2].data, to_bytes(&[15i64, 150]));
    }

    /// Recursive doubling as the offloaded sequences compute it, by the library's reduction.
    fn doubling_reference(p: usize) -> Vec<u8> {
        let add = |a: &[u8], b: &[u8]| {
            let mut acc = a.to_vec();
            reduce_into(Datatype::F64, ReduceOp::Sum, &mut acc, b).unwrap();
            acc
        };
        let pow = 1usize << (usize::BITS - 1 - p.leading_zeros());
        let rem = p - pow;
        let mut w: Vec<Vec<u8>> = (0..pow)
            .map(|k| {
                if k < rem {
                    add(&to_bytes(&contribution(2 * k + 1)), &to_bytes(&contribution(2 * k)))
                } else {
                    to_bytes(&contribution(k + rem))
                }
            })
            .collect();
        let mut s = 1;
        while s < pow {
            w = (0..pow).map(|k| add(&w[k], &w[k ^ s])).collect();
            s <<= 1;
        }
        assert!(w.iter().all(|x| *x == w[0]));
        w.swap_remove(0)
    }

    #[test]
    fn offloaded_allreduce_gives_every_member_the_reference_bits() {
        for p in 1..=12 {
            let ms = members(p);
            let data: Vec<Payload> = (0..p).map(|i| Payload::Operands(to_bytes(&contribution(i)))).collect();
            let results: Vec<Option<u64>> = (0..p).map(|i| (i % 3 == 0).then_some(0x5000 + i as u64)).collect();
            let want = doubling_reference(p);
            for seed in 0..6 {
                let seqs = recursive_doubling_allreduce(2, &ms, Datatype::F64, ReduceOp::Sum, &data, &results).unwrap();
                let r = run_ideal(endpoints(&ms, seqs), seed, small_buffers(), &mut |_, _, _| Vec::new()).unwrap();
                for (i, c) in r.completions.iter().enumerate() {
                    assert_eq!(c.data, want, "p {p} member {i} seed {seed}");
                    assert_eq!(c.addr, results[i]);
                }
                let pow = 1u64 << (63 - (p as u64).leading_zeros());
                let rem = p as u64 - pow;
                assert_eq!(r.packets, 2 * rem + pow * u64::from(pow.trailing_zeros()));
            }
        }
        let ms = members(3);
        let e = recursive_doubling_allreduce(2, &ms, Datatype::F64, ReduceOp::Sum, &[], &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "offload allreduce: 0 contributions and 0 result buffers for 3 members"
        );
    }

    #[test]
    fn offloaded_broadcast_reaches_every_member() {
        let data = to_bytes(&contribution(4));
        for p in [1, 2, 6, 9] {
            let ms = members(p);
            let root = p / 3;
            let results: Vec<Option<u64>> = (0..p).map(|i| (i % 2 == 0).then_some(0x9000 + i as u64)).collect();
            for seed in 0..5 {
                let seqs = binomial_broadcast(4, &ms, root, Payload::Operands(data.clone()), &results).unwrap();
                let r = run_ideal(endpoints(&ms, seqs), seed, small_buffers(), &mut |_, _, _| Vec::new()).unwrap();
                for (i, c) in r.completions.iter().enumerate() {
                    assert_eq!(c.data, data, "p {p} member {i}");
                    let want = if i == root { None } else { results[i] };
                    assert_eq!(c.addr, want);
                }
                assert_eq!(r.packets, p as u64 - 1);
            }
        }
    }

    /// Rabenseifner as the offloaded sequences compute it, by the library's reduction.
    /// `root`: ranks are taken relative to it (0 for the allreduce).
    fn rabenseifner_reference(p: usize, n: usize, root: usize) -> Vec<u8> {
        let add = |a: &mut [u8], b: &[u8]| reduce_into(Datatype::F64, ReduceOp::Sum, a, b).unwrap();
        let pow = 1usize << (usize::BITS - 1 - p.leading_zeros());
        let rem = p - pow;
        let c = |v: usize| to_bytes(&contribution((v + root) % p)[..n]);
        let mut w: Vec<Vec<u8>> = (0..pow)
            .map(|k| {
                if k < rem {
                    let mut x = c(2 * k + 1);
                    add(&mut x, &c(2 * k));
                    x
                } else {
                    c(k + rem)
                }
            })
            .collect();
        let mut ranges = vec![(0usize, n); pow];
        let mut bit = pow / 2;
        while bit > 0 {
            let old = w.clone();
            for k in 0..pow {
                let (lo, hi) = ranges[k];
                let mid = lo + (hi - lo) / 2;
                let keep = if k & bit == 0 { (lo, mid) } else { (mid, hi) };
                add(&mut w[k][keep.0 * 8..keep.1 * 8], &old[k ^ bit][keep.0 * 8..keep.1 * 8]);
                ranges[k] = keep;
            }
            bit /= 2;
        }
        let mut out = vec![0u8; n * 8];
        for k in 0..pow {
            let (lo, hi) = ranges[k];
            out[lo * 8..hi * 8].copy_from_slice(&w[k][lo * 8..hi * 8]);
        }
        out
    }

    #[test]
    fn offloaded_rabenseifner_gives_every_member_the_reference_bits() {
        for p in 1..=12 {
            // Element counts below, at and above the number of blocks.
            for n in [3, 8, 24] {
                let ms = members(p);
                let data: Vec<Payload> = (0..p)
                    .map(|i| Payload::Operands(to_bytes(&contribution(i)[..n])))
                    .collect();
                let results: Vec<Option<u64>> = (0..p).map(|i| (i % 2 == 1).then_some(0x6000 + i as u64)).collect();
                let want = rabenseifner_reference(p, n, 0);
                for seed in 0..4 {
                    let seqs = rabenseifner_allreduce(6, &ms, Datatype::F64, ReduceOp::Sum, &data, &results).unwrap();
                    let r = run_ideal(endpoints(&ms, seqs), seed, small_buffers(), &mut |_, _, _| Vec::new()).unwrap();
                    for (i, c) in r.completions.iter().enumerate() {
                        assert_eq!(c.data, want, "p {p} n {n} member {i} seed {seed}");
                        assert_eq!(c.addr, results[i]);
                    }
                }
            }
        }
        // The same sum as recursive doubling up to rounding; here with integers, exactly.
        let ms = members(6);
        let data: Vec<Payload> = (0..6)
            .map(|i| Payload::Operands(to_bytes(&[i as i64, 100, -(i as i64) * 3])))
            .collect();
        let seqs = rabenseifner_allreduce(6, &ms, Datatype::I64, ReduceOp::Sum, &data, &[None; 6]).unwrap();
        let r = run_ideal(endpoints(&ms, seqs), 1, small_buffers(), &mut |_, _, _| Vec::new()).unwrap();
        assert!(r.completions.iter().all(|c| c.data == to_bytes(&[15i64, 600, -45])));
    }

    #[test]
    fn offloaded_halving_reduce_gives_the_root_the_reference_bits() {
        for p in 1..=12 {
            for root in [0, 1, p / 2, p - 1].into_iter().filter(|&r| r < p) {
                for n in [3, 24] {
                    let ms = members(p);
                    let data: Vec<Payload> = (0..p)
                        .map(|i| Payload::Operands(to_bytes(&contribution(i)[..n])))
                        .collect();
                    let want = rabenseifner_reference(p, n, root);
                    for seed in 0..4 {
                        let seqs =
                            halving_reduce(8, &ms, root, Datatype::F64, ReduceOp::Sum, &data, Some(0x7000)).unwrap();
                        let r = run_ideal(endpoints(&ms, seqs.clone()), seed, small_buffers(), &mut |_, _, _| {
                            Vec::new()
                        })
                        .unwrap_or_else(|e| panic!("p {p} root {root}: {e}\n{seqs:#?}"));
                        let c = &r.completions[root];
                        assert_eq!(c.data, want, "p {p} root {root} n {n} seed {seed}");
                        assert_eq!(c.addr, Some(0x7000));
                        // Fold, halving, gather, and the unfold to a folded root.
                        let pow = 1u64 << (63 - (p as u64).leading_zeros());
                        let rem = p as u64 - pow;
                        let unfold = u64::from(rem > 0);
                        assert_eq!(
                            r.packets,
                            rem + pow * u64::from(pow.trailing_zeros()) + pow - 1 + unfold
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn double_binary_tree_broadcast_delivers_both_halves() {
        let data = to_bytes(&contribution(2));
        for p in [1, 2, 3, 4, 7, 8, 12] {
            let ms = members(p);
            let root = p / 2;
            let results: Vec<Option<u64>> = (0..p).map(|i| Some(0x8000 * (i as u64 + 1))).collect();
            for seed in 0..5 {
                let [a, b] =
                    double_binary_tree_broadcast([10, 11], &ms, root, Payload::Operands(data.clone()), &results)
                        .unwrap();
                let mut eps = endpoints(&ms, a);
                eps.extend(endpoints(&ms, b));
                let r = run_ideal(eps, seed, small_buffers(), &mut |_, _, _| Vec::new()).unwrap();
                let half = data.len() / 2;
                for (i, res) in results.iter().enumerate() {
                    let (ca, cb) = (&r.completions[i], &r.completions[p + i]);
                    assert_eq!((ca.job, cb.job), (10, 11));
                    assert_eq!(
                        [ca.data.as_slice(), cb.data.as_slice()].concat(),
                        data,
                        "p {p} member {i}"
                    );
                    if i != root {
                        assert_eq!((ca.addr, cb.addr), (*res, res.map(|x| x + half as u64)));
                    }
                }
                // Each half reaches the p − 1 other members once.
                assert_eq!(r.packets, 2 * (p as u64 - 1));
            }
        }
        let e = double_binary_tree_broadcast([3, 3], &members(2), 0, Payload::Operands(vec![]), &[None; 2]);
        assert_eq!(
            e.unwrap_err().to_string(),
            "offload double-binary-tree broadcast: the two trees need two JobIDs, got 3 twice"
        );
    }

    #[test]
    fn bad_calls_are_errors_naming_the_reason() {
        let ms = members(4);
        let data: Vec<Payload> = (0..4).map(|_| Payload::Operands(vec![0; 8])).collect();
        let e = binomial_reduce(1, &ms, 4, Datatype::F64, ReduceOp::Sum, &data, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "offload reduce: rank 4 is outside the communicator of 4 ranks"
        );
        let e = binomial_reduce(1, &ms, 0, Datatype::F64, ReduceOp::Bxor, &data, None).unwrap_err();
        assert!(e.to_string().contains("bitwise"), "{e}");
        let e = binomial_reduce(1, &ms, 0, Datatype::F64, ReduceOp::Sum, &data[..3], None).unwrap_err();
        assert_eq!(e.to_string(), "offload reduce: 3 contributions for 4 members");
        let mut uneven = data.clone();
        uneven[2] = Payload::Operands(vec![0; 16]);
        let e = binomial_reduce(1, &ms, 0, Datatype::F64, ReduceOp::Sum, &uneven, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "offload reduce: member 2 contributes 16 bytes, member 0 8"
        );
        let e = binomial_reduce(256, &ms, 0, Datatype::F64, ReduceOp::Sum, &data, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "offload reduce: member 0: descriptor 0: JobID = 256 does not fit in 8 bits (largest 255)"
        );
        let mut wide = ms.clone();
        wide[3].vp = 2048;
        let e = binomial_broadcast(1, &wide, 0, Payload::Operands(vec![1]), &[None; 4]).unwrap_err();
        assert!(e.to_string().contains("VP = 2048 does not fit in 11 bits"), "{e}");
        let mut shared = ms.clone();
        shared[3] = shared[1];
        let e = binomial_broadcast(1, &shared, 0, Payload::Operands(vec![1]), &[None; 4]).unwrap_err();
        assert_eq!(e.to_string(), "offload broadcast: members 1 and 3 share node 1 VP 4");
    }
}
