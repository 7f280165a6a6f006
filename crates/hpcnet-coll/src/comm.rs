//! Communicators: an ordered group of ranks, each member holding its end of the transport, and
//! the typed collective calls rank programs make on them.
//!
//! Communicators are built for all their members at once, outside rank programs
//! ([`Comm::create`], [`Comm::split`]), the way a job launcher exchanges connection data before
//! the program starts; every member's handle is then moved into its rank program.

use crate::algo::{self, implements, select, select_on_nodes, Algorithm, Collective};
use crate::offload::{
    double_binary_tree_broadcast_of, halving_reduce_of, rabenseifner_allreduce_of, Member, OffloadError, Only,
};
use crate::transport::{Call, Transport, TransportConfig};
use crate::types::{check_len, check_op, from_bytes, to_bytes};
use crate::{CollError, Datatype, Element, HostCosts, ReduceOp};
use hpcnet_msg::verbs::{Context, Cq, Machine, Mr};
use hpcnet_msg::NicBackend;
use hpcnet_nic::triggered::{CollDescriptor, Payload, TrigPost, TrigPulse, TrigRun};
use hpcnet_nic::{CollDesc, CollKind, CollOp, CollType, CqeStatus, GroupId, Rank};
use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;

/// Members per node when every node in `nodes` appears equally often, else 1.
pub(crate) fn per_node(nodes: &[u32]) -> usize {
    let mut sorted = nodes.to_vec();
    sorted.sort_unstable();
    let counts: Vec<usize> = sorted.chunk_by(|a, b| a == b).map(<[u32]>::len).collect();
    match counts.first() {
        Some(&k) if counts.iter().all(|&c| c == k) => k,
        _ => 1,
    }
}

/// Members exist, appear once, and the transport parameters are usable.
fn check_members(ranks: &[Rank], world: usize, cfg: &CommConfig) -> Result<(), CollError> {
    let mut seen = HashSet::new();
    for &r in ranks {
        if r.0 as usize >= world {
            return Err(CollError::BadComm(format!(
                "rank {r} does not exist (the machine has {world} ranks)"
            )));
        }
        if !seen.insert(r) {
            return Err(CollError::BadComm(format!("rank {r} is listed twice")));
        }
    }
    let tc = &cfg.transport;
    if tc.chunk == 0 || tc.chunk > u32::MAX as usize || tc.window == 0 {
        return Err(CollError::BadComm(format!(
            "transport chunk {} B and window {} must both be positive (chunk below 4 GiB)",
            tc.chunk, tc.window
        )));
    }
    Ok(())
}

/// How communicators are built: transport parameters and host costs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommConfig {
    pub transport: TransportConfig,
    pub costs: HostCosts,
    /// Create a hardware collective group for the communicator ([`Algorithm::Hardware`]): the
    /// NICs' logical tree and the routers' multicast tables are set up at creation; a multicast
    /// table overflow makes creation fail with [`CollError::BadComm`].
    pub hardware: bool,
    /// Open a virtual port of the triggered offload unit for every member
    /// ([`Algorithm::Offload`]); creation fails with [`CollError::BadComm`] on a machine whose
    /// NICs have no offload unit.
    pub offload: bool,
}

/// A member's end of the communicator's triggered offload collectives.
struct Off {
    /// Every member as its offload unit knows it (NodeID, VP).
    members: Rc<[Member]>,
    cq: Cq,
    /// Contribution at offset 0 and result at the call's length, grown to the largest call.
    mr: Option<Mr>,
    /// Serial of the next pulse sequence (the pulse field beside the packet key); its JobID
    /// is the serial modulo 256.
    serial: u64,
}

/// A member's end of the communicator's hardware collective group.
struct Hw {
    group: GroupId,
    cq: Cq,
    /// Contribution and result buffer, grown to the largest call.
    mr: Option<Mr>,
}

/// One member's handle on a communicator.
pub struct Comm {
    t: Transport,
    hw: Option<Hw>,
    off: Option<Off>,
    /// The node (NIC) of each member, for the two-level algorithms.
    nodes: Rc<[u32]>,
    /// Members per node (see [`Comm::per_node`]).
    per_node: usize,
    /// Collective calls started on this communicator (numbers the messages of each call).
    calls: u32,
    poisoned: bool,
}

impl Comm {
    /// A communicator of `ranks` (member i is `ranks[i]`); one handle per member, in that order.
    /// Every member counts as its own node (see [`Comm::create_on_nodes`]).
    pub fn create<B: NicBackend + 'static>(
        m: &Machine<B>,
        ranks: &[Rank],
        cfg: &CommConfig,
    ) -> Result<Vec<Comm>, CollError> {
        Comm::create_on_nodes(m, ranks, |r| r.0, cfg)
    }

    /// [`Comm::create`], saying which node (NIC) each rank lives on, for the two-level
    /// algorithms; with the simulated world: `|r| world.placement().node_of(r).0`.
    pub fn create_on_nodes<B: NicBackend + 'static>(
        m: &Machine<B>,
        ranks: &[Rank],
        node_of: impl Fn(Rank) -> u32,
        cfg: &CommConfig,
    ) -> Result<Vec<Comm>, CollError> {
        let Some(&first) = ranks.first() else {
            return Err(CollError::BadComm("no ranks given".into()));
        };
        check_members(ranks, m.context(first).size(), cfg)?;
        let group = if cfg.hardware {
            Some(m.coll_group(ranks).map_err(CollError::BadComm)?)
        } else {
            None
        };
        let members: Option<Rc<[Member]>> = if cfg.offload {
            let v: Result<Vec<Member>, CollError> = ranks
                .iter()
                .map(|&r| {
                    m.trig_open_vp(r)
                        .map(|(node, vp)| Member { node, vp })
                        .map_err(|e| CollError::BadComm(format!("offload: rank {r}: {e}")))
                })
                .collect();
            Some(v?.into())
        } else {
            None
        };
        Comm::build(
            ranks.iter().map(|&r| m.context(r)).collect(),
            node_of,
            group,
            members,
            cfg,
        )
    }

    /// A communicator of the ranks whose contexts are given (member i is `contexts[i]`), made
    /// by one member for all while the programs run — as SHMEM teams and active sets are
    /// created collectively on first use. Software algorithms only: hardware groups and offload
    /// virtual ports are set up before the run ([`Comm::create`] with [`CommConfig::hardware`]
    /// or [`CommConfig::offload`]).
    pub fn create_from_contexts(contexts: Vec<Context>, cfg: &CommConfig) -> Result<Vec<Comm>, CollError> {
        if cfg.hardware || cfg.offload {
            return Err(CollError::BadComm(
                "hardware groups and offload virtual ports are set up before the run; create the communicator with Comm::create".into(),
            ));
        }
        Comm::build(contexts, |r| r.0, None, None, cfg)
    }

    fn build(
        contexts: Vec<Context>,
        node_of: impl Fn(Rank) -> u32,
        group: Option<GroupId>,
        members: Option<Rc<[Member]>>,
        cfg: &CommConfig,
    ) -> Result<Vec<Comm>, CollError> {
        let Some(first) = contexts.first() else {
            return Err(CollError::BadComm("no ranks given".into()));
        };
        let ranks: Vec<Rank> = contexts.iter().map(Context::rank).collect();
        check_members(&ranks, first.size(), cfg)?;
        let nodes: Rc<[u32]> = ranks.iter().map(|&r| node_of(r)).collect();
        let k = per_node(&nodes);
        Ok(Transport::group(contexts, &cfg.transport, &cfg.costs)
            .into_iter()
            .map(|t| Comm {
                off: members.clone().map(|members| Off {
                    members,
                    cq: t.ctx.create_cq(),
                    mr: None,
                    serial: 0,
                }),
                hw: group.map(|group| Hw {
                    group,
                    cq: t.ctx.create_cq(),
                    mr: None,
                }),
                t,
                nodes: nodes.clone(),
                per_node: k,
                calls: 0,
                poisoned: false,
            })
            .collect())
    }

    /// Split the group `parent` (MPI_Comm_split): member i of the parent gives `colours[i]` =
    /// (colour, key); members of one colour form a communicator ordered by key, then by their
    /// index in the parent. A `None` colour takes no part. Returns, per parent member, its
    /// handle on its new communicator. Every member counts as its own node
    /// ([`Comm::split_on_nodes`] says otherwise).
    pub fn split<B: NicBackend + 'static>(
        m: &Machine<B>,
        parent: &[Rank],
        colours: &[(Option<u32>, i64)],
        cfg: &CommConfig,
    ) -> Result<Vec<Option<Comm>>, CollError> {
        Comm::split_on_nodes(m, parent, colours, |r| r.0, cfg)
    }

    /// [`Comm::split`], saying which node (NIC) each rank lives on (see
    /// [`Comm::create_on_nodes`]).
    pub fn split_on_nodes<B: NicBackend + 'static>(
        m: &Machine<B>,
        parent: &[Rank],
        colours: &[(Option<u32>, i64)],
        node_of: impl Fn(Rank) -> u32,
        cfg: &CommConfig,
    ) -> Result<Vec<Option<Comm>>, CollError> {
        if colours.len() != parent.len() {
            return Err(CollError::BadComm(format!(
                "split: {} colours for {} members",
                colours.len(),
                parent.len()
            )));
        }
        let mut groups: BTreeMap<u32, Vec<(i64, usize)>> = BTreeMap::new();
        for (i, &(c, key)) in colours.iter().enumerate() {
            if let Some(c) = c {
                groups.entry(c).or_default().push((key, i));
            }
        }
        let mut out: Vec<Option<Comm>> = parent.iter().map(|_| None).collect();
        for (_, mut members) in groups {
            members.sort();
            let ranks: Vec<Rank> = members.iter().map(|&(_, i)| parent[i]).collect();
            for (comm, (_, i)) in Comm::create_on_nodes(m, &ranks, &node_of, cfg)?
                .into_iter()
                .zip(members)
            {
                out[i] = Some(comm);
            }
        }
        Ok(out)
    }

    /// Members per node when every node of the communicator holds the same number of them, else
    /// 1 (what [`select_on_nodes`] is given).
    pub fn per_node(&self) -> usize {
        self.per_node
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.t.members()
    }

    /// This member's index in the communicator.
    pub fn rank(&self) -> usize {
        self.t.member()
    }

    /// The machine ranks of the members, in communicator order.
    pub fn ranks(&self) -> &[Rank] {
        &self.t.ranks
    }

    /// The device context of this member's rank.
    pub fn context(&self) -> &Context {
        &self.t.ctx
    }

    /// Start a call (`root`: of a broadcast or reduce): refuse it if this communicator failed
    /// before or the algorithm does not fit, charge the per-call cost and number it.
    async fn begin(
        &mut self,
        c: Collective,
        (dtype, op, root): (Option<Datatype>, Option<ReduceOp>, Option<usize>),
        alg: Algorithm,
        bytes: usize,
    ) -> Result<(Call, Algorithm), CollError> {
        let name = c.name();
        if self.poisoned {
            return Err(CollError::Poisoned { call: name });
        }
        if !implements(alg, c) {
            return Err(CollError::Unsupported {
                call: name,
                algorithm: alg,
            });
        }
        let alg = match alg {
            Algorithm::Auto => select_on_nodes(c, bytes, self.size(), self.per_node()),
            a => a,
        };
        let signature = (c as u32) << 16 | dtype.map_or(0xff, Datatype::code) << 8 | op.map_or(0xff, ReduceOp::code);
        let call = Call {
            name,
            number: self.calls,
            signature,
            root,
            // Broadcast, allgather and alltoall deliver data as it is; the reductions mark
            // their gather and result-distribution steps themselves (`Call::kept`).
            keep: matches!(c, Collective::Broadcast | Collective::Allgather | Collective::Alltoall),
        };
        self.calls = self.calls.wrapping_add(1);
        // Charged with the host time that follows, before this member's next post or its
        // return (see `Transport::owe`).
        self.t.owe(self.t.costs.per_call);
        Ok((call, alg))
    }

    /// End a call: spend the host time still owed, then, after a failed exchange (the pairs'
    /// sequence numbers no longer agree), refuse later calls and (unless the failure is another
    /// member's abort) tell the other members, so none of them waits forever for this one.
    async fn finish<T>(&mut self, r: Result<T, CollError>) -> Result<T, CollError> {
        self.t.settle().await;
        if let Err(e) = &r {
            self.poisoned = true;
            // Every member of a hardware collective learns of a mismatch from its NIC.
            if !matches!(e, CollError::Aborted { .. } | CollError::HardwareMismatch { .. }) {
                self.t.abort();
            }
        }
        r
    }

    fn check_root(&self, call: &'static str, root: usize) -> Result<(), CollError> {
        if root >= self.size() {
            return Err(CollError::RankOutside {
                call,
                index: root,
                size: self.size(),
            });
        }
        Ok(())
    }

    /// Wait until every member has entered the barrier.
    pub async fn barrier(&mut self, alg: Algorithm) -> Result<(), CollError> {
        let (call, alg) = self.begin(Collective::Barrier, (None, None, None), alg, 0).await?;
        let r = match alg {
            Algorithm::Dissemination => algo::barrier::dissemination(&mut self.t, &call).await,
            Algorithm::BinomialTree => algo::barrier::binomial_tree(&mut self.t, &call).await,
            Algorithm::Hardware => {
                let k = CollKind::Barrier;
                hardware(
                    &mut self.hw,
                    &self.t,
                    &call,
                    k,
                    Datatype::I64,
                    ReduceOp::Sum,
                    Vec::new(),
                )
                .await
                .map(drop)
            }
            a => Err(CollError::Unsupported {
                call: call.name,
                algorithm: a,
            }),
        };
        self.finish(r).await
    }

    /// Broadcast `buf` of member `root` into `buf` of every member (all pass the same length).
    pub async fn broadcast<T: Element>(&mut self, buf: &mut [T], root: usize, alg: Algorithm) -> Result<(), CollError> {
        self.check_root("broadcast", root)?;
        let mut bytes = to_bytes(buf);
        let (call, alg) = self
            .begin(
                Collective::Broadcast,
                (Some(T::DATATYPE), None, Some(root)),
                alg,
                bytes.len(),
            )
            .await?;
        let r = match alg {
            Algorithm::Binomial => algo::bcast::binomial(&mut self.t, &call, &mut bytes, root).await,
            Algorithm::ScatterAllgather => algo::bcast::scatter_allgather(&mut self.t, &call, &mut bytes, root).await,
            Algorithm::DoubleBinaryTree => {
                let segment = self.t.chunk();
                algo::bcast::double_binary_tree(&mut self.t, &call, &mut bytes, root, segment).await
            }
            Algorithm::Chain => {
                let segment = self.t.chunk();
                algo::bcast::chain(&mut self.t, &call, &mut bytes, root, segment).await
            }
            Algorithm::Hardware => {
                let k = CollKind::Broadcast { root: root as u32 };
                let data = std::mem::take(&mut bytes);
                hardware(&mut self.hw, &self.t, &call, k, T::DATATYPE, ReduceOp::Sum, data)
                    .await
                    .map(|out| bytes = out)
            }
            Algorithm::Offload => {
                let k = OffKind::Broadcast(root);
                let data = std::mem::take(&mut bytes);
                let me = self.rank();
                offload(&mut self.off, me, &self.t, &call, k, T::DATATYPE, ReduceOp::Sum, data)
                    .await
                    .map(|out| bytes = out)
            }
            a => Err(CollError::Unsupported {
                call: call.name,
                algorithm: a,
            }),
        };
        self.finish(r).await?;
        for (x, b) in buf.iter_mut().zip(bytes.chunks_exact(T::DATATYPE.size())) {
            *x = T::get(b);
        }
        Ok(())
    }

    /// Reduce `data` of all members element-wise with `op`; the root gets `Some(result)`.
    pub async fn reduce<T: Element>(
        &mut self,
        data: &[T],
        op: ReduceOp,
        root: usize,
        alg: Algorithm,
    ) -> Result<Option<Vec<T>>, CollError> {
        check_op("reduce", T::DATATYPE, op)?;
        self.check_root("reduce", root)?;
        let bytes = to_bytes(data);
        let (call, alg) = self
            .begin(
                Collective::Reduce,
                (Some(T::DATATYPE), Some(op), Some(root)),
                alg,
                bytes.len(),
            )
            .await?;
        let r = match alg {
            Algorithm::Binomial => algo::reduce::binomial(&mut self.t, &call, T::DATATYPE, op, bytes, root).await,
            Algorithm::Rabenseifner => {
                algo::reduce::rabenseifner(&mut self.t, &call, T::DATATYPE, op, bytes, root).await
            }
            Algorithm::Hardware => {
                let k = CollKind::Reduce { root: root as u32 };
                let me = self.rank();
                hardware(&mut self.hw, &self.t, &call, k, T::DATATYPE, op, bytes)
                    .await
                    .map(|out| (me == root).then_some(out))
            }
            Algorithm::Offload => {
                let me = self.rank();
                offload(
                    &mut self.off,
                    me,
                    &self.t,
                    &call,
                    OffKind::Reduce(root),
                    T::DATATYPE,
                    op,
                    bytes,
                )
                .await
                .map(|out| (me == root).then_some(out))
            }
            a => Err(CollError::Unsupported {
                call: call.name,
                algorithm: a,
            }),
        };
        Ok(self.finish(r).await?.map(|b| from_bytes(&b)))
    }

    /// Reduce `data` of all members element-wise with `op`; every member gets the result.
    pub async fn allreduce<T: Element>(
        &mut self,
        data: &[T],
        op: ReduceOp,
        alg: Algorithm,
    ) -> Result<Vec<T>, CollError> {
        let out = self.allreduce_bytes(T::DATATYPE, op, to_bytes(data), alg).await?;
        Ok(from_bytes(&out))
    }

    /// [`Comm::allreduce`] on little-endian bytes of `dtype` elements.
    pub async fn allreduce_bytes(
        &mut self,
        dtype: Datatype,
        op: ReduceOp,
        data: Vec<u8>,
        alg: Algorithm,
    ) -> Result<Vec<u8>, CollError> {
        check_op("allreduce", dtype, op)?;
        check_len("allreduce", dtype, data.len())?;
        let (call, alg) = self
            .begin(Collective::Allreduce, (Some(dtype), Some(op), None), alg, data.len())
            .await?;
        let r = match alg {
            Algorithm::RecursiveDoubling => {
                algo::allreduce::recursive_doubling(&mut self.t, &call, dtype, op, data).await
            }
            Algorithm::Rabenseifner => algo::allreduce::rabenseifner(&mut self.t, &call, dtype, op, data).await,
            Algorithm::Ring => algo::allreduce::ring(&mut self.t, &call, dtype, op, data).await,
            Algorithm::TwoLevel => {
                let nodes = self.nodes.clone();
                let mut leaders = nodes.to_vec();
                leaders.sort_unstable();
                leaders.dedup();
                let inner = select(Collective::Allreduce, data.len(), leaders.len());
                algo::allreduce::two_level(&mut self.t, &call, dtype, op, data, &nodes, inner).await
            }
            Algorithm::Hardware => hardware(&mut self.hw, &self.t, &call, CollKind::Allreduce, dtype, op, data).await,
            Algorithm::Offload => {
                let me = self.rank();
                offload(&mut self.off, me, &self.t, &call, OffKind::Allreduce, dtype, op, data).await
            }
            a => Err(CollError::Unsupported {
                call: call.name,
                algorithm: a,
            }),
        };
        self.finish(r).await
    }

    /// Concatenate `data` of every member (all pass the same length), in member order.
    pub async fn allgather<T: Element>(&mut self, data: &[T], alg: Algorithm) -> Result<Vec<T>, CollError> {
        let bytes = to_bytes(data);
        let (call, alg) = self
            .begin(Collective::Allgather, (Some(T::DATATYPE), None, None), alg, bytes.len())
            .await?;
        let r = match alg {
            Algorithm::Ring => algo::allgather::ring(&mut self.t, &call, &bytes).await,
            Algorithm::Bruck => algo::allgather::bruck(&mut self.t, &call, &bytes).await,
            Algorithm::RecursiveDoubling => algo::allgather::recursive_doubling(&mut self.t, &call, &bytes).await,
            a => Err(CollError::Unsupported {
                call: call.name,
                algorithm: a,
            }),
        };
        Ok(from_bytes(&self.finish(r).await?))
    }

    /// Personalised exchange: `data` is `size` equal blocks, block j for member j; the result
    /// holds, at block i, what member i sent to this member.
    pub async fn alltoall<T: Element>(&mut self, data: &[T], alg: Algorithm) -> Result<Vec<T>, CollError> {
        if !data.len().is_multiple_of(self.size()) {
            return Err(CollError::BadBuffer {
                call: "alltoall",
                reason: format!("{} elements do not split into {} equal blocks", data.len(), self.size()),
            });
        }
        let bytes = to_bytes(data);
        let (call, alg) = self
            .begin(Collective::Alltoall, (Some(T::DATATYPE), None, None), alg, bytes.len())
            .await?;
        let r = match alg {
            Algorithm::Pairwise => algo::alltoall::pairwise(&mut self.t, &call, &bytes).await,
            Algorithm::Bruck => algo::alltoall::bruck(&mut self.t, &call, &bytes).await,
            a => Err(CollError::Unsupported {
                call: call.name,
                algorithm: a,
            }),
        };
        Ok(from_bytes(&self.finish(r).await?))
    }

    /// Reduce `data` (`size` equal blocks) of all members element-wise with `op` and return
    /// block i of the result to member i (`MPI_Reduce_scatter_block`).
    pub async fn reduce_scatter<T: Element>(
        &mut self,
        data: &[T],
        op: ReduceOp,
        alg: Algorithm,
    ) -> Result<Vec<T>, CollError> {
        check_op("reduce_scatter", T::DATATYPE, op)?;
        if !data.len().is_multiple_of(self.size()) {
            return Err(CollError::BadBuffer {
                call: "reduce_scatter",
                reason: format!("{} elements do not split into {} equal blocks", data.len(), self.size()),
            });
        }
        if alg == Algorithm::RecursiveHalving && !self.size().is_power_of_two() {
            return Err(CollError::AlgorithmLimit {
                call: "reduce_scatter",
                algorithm: alg,
                reason: format!(
                    "needs a power-of-two number of members, the communicator has {}",
                    self.size()
                ),
            });
        }
        let bytes = to_bytes(data);
        let (call, alg) = self
            .begin(
                Collective::ReduceScatter,
                (Some(T::DATATYPE), Some(op), None),
                alg,
                bytes.len(),
            )
            .await?;
        let r = match alg {
            Algorithm::Ring => algo::reduce_scatter::ring(&mut self.t, &call, T::DATATYPE, op, bytes).await,
            Algorithm::RecursiveHalving => {
                algo::reduce_scatter::recursive_halving(&mut self.t, &call, T::DATATYPE, op, bytes).await
            }
            Algorithm::Pairwise => algo::reduce_scatter::pairwise(&mut self.t, &call, T::DATATYPE, op, bytes).await,
            a => Err(CollError::Unsupported {
                call: call.name,
                algorithm: a,
            }),
        };
        Ok(from_bytes(&self.finish(r).await?))
    }
}

/// One hardware collective: write the contribution, post the descriptor, wait for the NIC's
/// completion, read the result (host costs: one post, one poll).
async fn hardware(
    hw: &mut Option<Hw>,
    t: &Transport,
    call: &Call,
    kind: CollKind,
    dtype: Datatype,
    op: ReduceOp,
    data: Vec<u8>,
) -> Result<Vec<u8>, CollError> {
    let Some(hw) = hw.as_mut() else {
        return Err(CollError::AlgorithmLimit {
            call: call.name,
            algorithm: Algorithm::Hardware,
            reason: "needs a communicator created with hardware collectives (CommConfig::hardware)".into(),
        });
    };
    let ctx = &t.ctx;
    let len = data.len() as u64;
    // Contribution at offset 0, result at `len` (a broadcast uses one buffer).
    let bcast = matches!(kind, CollKind::Broadcast { .. });
    let need = if bcast { len } else { 2 * len }.max(8);
    if hw.mr.as_ref().is_none_or(|m| m.len < need) {
        hw.mr = Some(ctx.reg_mr(need));
    }
    let mr = hw.mr.as_ref().expect("registered");
    ctx.write_local(mr, 0, &data)
        .map_err(|e| CollError::verbs(call.name, e))?;
    let dst = if bcast { mr.addr } else { mr.addr + len };
    let desc = CollDesc {
        group: hw.group,
        kind,
        dtype: match dtype {
            Datatype::F32 => CollType::F32,
            Datatype::F64 => CollType::F64,
            Datatype::I32 => CollType::I32,
            Datatype::I64 => CollType::I64,
        },
        op: match op {
            ReduceOp::Sum => CollOp::Sum,
            ReduceOp::Max => CollOp::Max,
            ReduceOp::Min => CollOp::Min,
            ReduceOp::Band => CollOp::Band,
            ReduceOp::Bor => CollOp::Bor,
            ReduceOp::Bxor => CollOp::Bxor,
        },
        count: len / dtype.size() as u64,
        src: mr.addr,
        dst,
        cq: hw.cq.id(),
        wr_id: call.number as u64,
    };
    t.spend(t.costs.per_post).await;
    ctx.post_coll(desc).map_err(|e| CollError::verbs(call.name, e))?;
    let cqe = hw.cq.next().await;
    t.spend(t.costs.per_poll).await;
    if cqe.status == CqeStatus::CollMismatch {
        return Err(CollError::HardwareMismatch { call: call.name });
    }
    if cqe.status != CqeStatus::Ok {
        return Err(CollError::Transport {
            call: call.name,
            reason: format!("hardware collective completed with {:?}", cqe.status),
        });
    }
    let mr = hw.mr.as_ref().expect("registered");
    let off = if bcast { 0 } else { len };
    ctx.read_local(mr, off, len).map_err(|e| CollError::verbs(call.name, e))
}

/// Which offloaded collective a member runs.
#[derive(Copy, Clone, Debug)]
enum OffKind {
    Broadcast(usize),
    Reduce(usize),
    Allreduce,
}

/// The sequence shape of one pulse of `elements` elements at offset 0 of the buffers (JobID
/// 0): one sequence per tree (two for the double binary tree).
fn offload_shape(
    kind: OffKind,
    members: &[Member],
    me: usize,
    (dtype, op): (Datatype, ReduceOp),
    (src, dst): (u64, u64),
    bytes: u64,
) -> Result<Vec<Vec<CollDescriptor>>, OffloadError> {
    let p = members.len();
    let data = vec![Payload::Address { addr: src, len: bytes }; p];
    let results = vec![Some(dst); p];
    // Only this member's sequences are built: it posts nothing else.
    let only = Only::Member(me);
    Ok(match kind {
        OffKind::Allreduce => {
            vec![rabenseifner_allreduce_of(only, 0, members, (dtype, op), &data, &results)?.swap_remove(me)]
        }
        OffKind::Reduce(root) => {
            vec![halving_reduce_of(only, 0, members, root, (dtype, op), &data, Some(dst))?.swap_remove(me)]
        }
        OffKind::Broadcast(root) => {
            let [mut a, mut b] = double_binary_tree_broadcast_of(
                only,
                [0, 1],
                members,
                root,
                Payload::Address { addr: src, len: bytes },
                &results,
            )?;
            vec![a.swap_remove(me), b.swap_remove(me)]
        }
    })
}

/// One offloaded collective: write the contribution, cut it into pulses of the NIC's pulse
/// size, post every pulse's sequences at once, wait for the NIC's completion, read the result
/// (host costs: one post, one poll).
#[allow(clippy::too_many_arguments)]
async fn offload(
    off: &mut Option<Off>,
    me: usize,
    t: &Transport,
    call: &Call,
    kind: OffKind,
    dtype: Datatype,
    op: ReduceOp,
    data: Vec<u8>,
) -> Result<Vec<u8>, CollError> {
    let Some(off) = off.as_mut() else {
        return Err(CollError::AlgorithmLimit {
            call: call.name,
            algorithm: Algorithm::Offload,
            reason: "needs a communicator created with offload collectives (CommConfig::offload)".into(),
        });
    };
    let ctx = &t.ctx;
    let len = data.len() as u64;
    if len == 0 {
        return Ok(data);
    }
    let elem = dtype.size() as u64;
    let count = len / elem;
    let ct = match dtype {
        Datatype::F32 => CollType::F32,
        Datatype::F64 => CollType::F64,
        Datatype::I32 => CollType::I32,
        Datatype::I64 => CollType::I64,
    };
    let per = ctx
        .trig_pulse_elements(ct)
        .map_err(|e| CollError::verbs(call.name, e))?
        .max(1);
    let need = 2 * len;
    if off.mr.as_ref().is_none_or(|m| m.len < need) {
        off.mr = Some(ctx.reg_mr(need));
    }
    let mr = off.mr.as_ref().expect("registered");
    ctx.write_local(mr, 0, &data)
        .map_err(|e| CollError::verbs(call.name, e))?;
    let (src, dst) = (mr.addr, mr.addr + len);
    let bad = |e: OffloadError| CollError::Transport {
        call: call.name,
        reason: e.to_string(),
    };
    // Pulses of equal size share a shape, built once: the full pulses are one run of it,
    // repeated over the vector (the NIC moves each repetition to its offset and JobID when
    // it starts), the shorter last pulse a run of its own.
    let mut runs = Vec::new();
    let full = count / per;
    for (n, times) in [(per, full), (count % per, 1)] {
        if n == 0 || times == 0 {
            continue;
        }
        let at = if n == per { 0 } else { full * per };
        let shape = offload_shape(kind, &off.members, me, (dtype, op), (src, dst), n * elem).map_err(bad)?;
        let trees = shape.len() as u64;
        let group: Vec<TrigPulse> = shape
            .into_iter()
            .enumerate()
            .map(|(j, mut seq)| {
                let serial = off.serial + j as u64;
                for d in &mut seq {
                    d.job = (serial % 256) as u32;
                    if let Payload::Address { addr, .. } = &mut d.payload {
                        *addr += at * elem;
                    }
                }
                TrigPulse {
                    serial,
                    elements: n.div_ceil(trees).max(1),
                    descriptors: seq,
                }
            })
            .collect();
        off.serial += times * trees;
        runs.push(TrigRun {
            group,
            times,
            stride: per * elem,
        });
    }
    t.spend(t.costs.per_post).await;
    ctx.post_trig(TrigPost {
        vp: off.members[me].vp,
        runs,
        cq: off.cq.id(),
        wr_id: call.number as u64,
    })
    .map_err(|e| CollError::verbs(call.name, e))?;
    let cqe = off.cq.next().await;
    t.spend(t.costs.per_poll).await;
    if cqe.status != CqeStatus::Ok {
        return Err(CollError::Transport {
            call: call.name,
            reason: format!("offloaded collective completed with {:?}", cqe.status),
        });
    }
    let mr = off.mr.as_ref().expect("registered");
    let result_at = match kind {
        OffKind::Broadcast(root) if root == me => 0,
        _ => len,
    };
    ctx.read_local(mr, result_at, len)
        .map_err(|e| CollError::verbs(call.name, e))
}
