//! The connection allocator: which connections a process opens, what each one allocates, and
//! the memory account that follows from those allocations.
//!
//! One [`Allocator`] per process decides, under a [`Policy`], the process's static connections
//! (opened at start) and the resources every connection needs — queue pairs with their send
//! WQEs, own receive queues with pre-posted buffers (RC), shared receive queues growing by one
//! buffer per connection (RC+SRQ, XRC), a UD queue pair — and records each allocation in a
//! [`MemoryAccount`]. The simulated message layer ([`crate::p2p`]) executes the same decisions as
//! verbs calls ([`Allocator::take_actions`]); memory studies at 10⁴–10⁶ processes run the
//! allocator alone for one representative process per class (no NIC is simulated). The spec's
//! memory formulas are not used here: they are the oracle of the tests.
//!
//! Cost: building the static connection set of a process is O(k log k) for k static
//! connections (N − 1 under full RC, group size + number of groups under group connection);
//! opening one connection on demand is O(log k).

use crate::policy::{ConnError, ConnParams, Layout, Policy, Transport};
use serde::Serialize;
use std::collections::BTreeSet;

/// The far end of a connection: a process (RC) or a node (XRC).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Target {
    Peer(u64),
    Node(u64),
}

/// One allocation, in the order the library makes it. The simulated layer turns each into verbs
/// calls; the memory account has already counted it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create shared receive queue `class` for buffers of `buffer` bytes.
    Srq { class: u32, buffer: u64 },
    /// Post `count` more buffers of `buffer` bytes to shared receive queue `class`.
    SrqBuffers { class: u32, buffer: u64, count: u64 },
    /// Create a queue pair to `target`; `own_rq`: with its own receive queue of `count` buffers
    /// of `buffer` bytes (RC without SRQ).
    Qp { target: Target, own_rq: Option<(u64, u64)> },
    /// Create the one UD queue pair with a receive queue of `count` buffers of `buffer` bytes.
    UdQp { buffer: u64, count: u64 },
}

/// Bytes and objects a process has allocated for communication.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemoryAccount {
    /// Pre-posted receive buffers (own receive queues, SRQs, UD receive queue).
    pub recv_buffers: u64,
    /// Send-queue WQEs (sd per QP).
    pub send_wqes: u64,
    /// Receive WQEs (rd per own receive queue; one per buffer of an SRQ).
    pub recv_wqes: u64,
    /// QP context (`qp_context` per QP).
    pub qp_context: u64,
    /// Completion-queue entries (`cqe` bytes per WQE).
    pub cq: u64,
    pub qps: u64,
    pub srqs: u64,
    pub buffers: u64,
    /// Connections open (static and on demand).
    pub connections: u64,
}

impl MemoryAccount {
    pub fn total(&self) -> u64 {
        self.recv_buffers + self.send_wqes + self.recv_wqes + self.qp_context + self.cq
    }

    /// Sum of two accounts (e.g. the processes of a node).
    pub fn add(&mut self, o: &MemoryAccount) {
        self.recv_buffers += o.recv_buffers;
        self.send_wqes += o.send_wqes;
        self.recv_wqes += o.recv_wqes;
        self.qp_context += o.qp_context;
        self.cq += o.cq;
        self.qps += o.qps;
        self.srqs += o.srqs;
        self.buffers += o.buffers;
        self.connections += o.connections;
    }
}

/// How a message to a peer travels under a policy.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// To itself: no network.
    SelfLoop,
    /// Over connection `Target` (open, or to be opened on demand).
    Conn(Target),
    /// Over the UD queue pair.
    Datagram,
}

/// The connection decisions and allocations of one process.
#[derive(Clone, Debug)]
pub struct Allocator {
    policy: Policy,
    params: ConnParams,
    layout: Layout,
    rank: u64,
    /// Static connections (opened at start; [`Allocator::is_static`] says which targets they
    /// are, so they need no record each) and those opened on demand since.
    static_conns: u64,
    on_demand_conns: BTreeSet<Target>,
    /// Buffers posted to each SRQ class so far.
    srq_buffers: Vec<u64>,
    /// Connections whose SRQ buffer has been posted (XRC_M assigns the i-th to a class).
    srq_slots: u64,
    account: MemoryAccount,
    on_demand: u64,
    actions: Option<Vec<Action>>,
}

impl Allocator {
    /// The allocations of process `rank` at start: its completion queue, shared receive queues
    /// and static connections. `record`: keep the [`Action`]s for a simulated layer to execute.
    pub fn new(
        policy: Policy,
        params: ConnParams,
        layout: Layout,
        rank: u64,
        record: bool,
    ) -> Result<Allocator, ConnError> {
        policy.check()?;
        params.check()?;
        if rank >= layout.ranks {
            return Err(ConnError::Param(
                "rank".into(),
                format!("rank {rank} is outside a job of {} ranks", layout.ranks),
            ));
        }
        let mut a = Allocator {
            policy,
            params,
            layout,
            rank,
            static_conns: 0,
            on_demand_conns: BTreeSet::new(),
            srq_buffers: Vec::new(),
            srq_slots: 0,
            account: MemoryAccount::default(),
            on_demand: 0,
            actions: record.then(Vec::new),
        };
        match policy.transport {
            Transport::Ud => {
                let (b, n) = (params.ud_mtu, params.ud_recv_depth);
                a.qp(params.send_depth);
                a.account.recv_wqes += n * params.wqe;
                a.account.recv_buffers += n * b;
                a.account.buffers += n;
                a.account.cq += n * params.cqe;
                a.push(Action::UdQp { buffer: b, count: n });
            }
            Transport::RcSrq | Transport::XrcS => a.srqs(1),
            Transport::XrcM => a.srqs(params.xrc_classes),
            Transport::Rc => {}
        }
        let targets = a.static_targets();
        let n = targets.len() as u64;
        for t in targets {
            debug_assert!(a.is_static(t));
            a.static_conns += 1;
            a.open(t, false);
        }
        a.post_srq_buffers(n);
        Ok(a)
    }

    fn push(&mut self, act: Action) {
        if let Some(v) = &mut self.actions {
            v.push(act);
        }
    }

    fn srqs(&mut self, classes: u32) {
        for k in 0..classes {
            self.srq_buffers.push(0);
            self.account.srqs += 1;
            let buffer = self.class_buffer(k);
            self.push(Action::Srq { class: k, buffer });
        }
    }

    fn class_buffer(&self, k: u32) -> u64 {
        match self.policy.transport {
            Transport::XrcM => self.params.class_buffer(k),
            _ => self.params.buffer,
        }
    }

    /// One QP with `sd` send WQEs.
    fn qp(&mut self, send_depth: u64) {
        let p = &self.params;
        self.account.qps += 1;
        self.account.qp_context += p.qp_context;
        self.account.send_wqes += send_depth * p.wqe;
        self.account.cq += send_depth * p.cqe;
    }

    /// Opens a connection to `t` (its QP and, for RC, its own receive queue). SRQ buffers are
    /// posted by the caller (one per connection).
    fn open(&mut self, t: Target, on_demand: bool) {
        if on_demand && !self.on_demand_conns.insert(t) {
            return;
        }
        self.account.connections += 1;
        if on_demand {
            self.on_demand += 1;
        }
        let p = self.params;
        self.qp(p.send_depth);
        let own_rq = (self.policy.transport == Transport::Rc).then(|| {
            self.account.recv_wqes += p.recv_depth * p.wqe;
            self.account.recv_buffers += p.prepost * p.buffer;
            self.account.buffers += p.prepost;
            self.account.cq += p.recv_depth * p.cqe;
            (p.buffer, p.prepost)
        });
        self.push(Action::Qp { target: t, own_rq });
    }

    /// Posts one SRQ buffer per connection for `n` new connections: one class under XRC_S and
    /// RC+SRQ; under XRC_M the i-th connection's buffer goes to class k − 1 − (i mod k), so the
    /// counts stay equal and a remainder goes to the smallest buffers.
    fn post_srq_buffers(&mut self, n: u64) {
        if !self.policy.transport.shared_rq() || n == 0 {
            return;
        }
        let classes = self.srq_buffers.len() as u64;
        let mut add = vec![0u64; classes as usize];
        for i in self.srq_slots..self.srq_slots + n {
            add[(classes - 1 - i % classes) as usize] += 1;
        }
        self.srq_slots += n;
        let p = self.params;
        for (k, &count) in add.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let buffer = self.class_buffer(k as u32);
            self.srq_buffers[k] += count;
            self.account.recv_buffers += count * buffer;
            self.account.recv_wqes += count * p.wqe;
            self.account.buffers += count;
            self.account.cq += count * p.cqe;
            self.push(Action::SrqBuffers {
                class: k as u32,
                buffer,
                count,
            });
        }
    }

    /// The connection target of a message to `peer` under the policy.
    pub fn route(&self, peer: u64) -> Route {
        if peer == self.rank {
            Route::SelfLoop
        } else if self.policy.transport == Transport::Ud {
            Route::Datagram
        } else if self.policy.transport.per_node() {
            Route::Conn(Target::Node(self.layout.node(peer)))
        } else {
            Route::Conn(Target::Peer(peer))
        }
    }

    /// Whether a message to `peer` can leave now (no connection to open first).
    pub fn connected(&self, peer: u64) -> bool {
        match self.route(peer) {
            Route::Conn(t) => self.is_open(t),
            _ => true,
        }
    }

    /// Whether `peer` is one of this process's static partners under group connection (same
    /// group, or same index in its group): the links a handshake travels over.
    pub fn is_static_peer(&self, peer: u64) -> bool {
        match self.policy.group {
            None => true,
            Some(g) => self.rank / g == peer / g || self.rank % g == peer % g,
        }
    }

    /// Whether connection `t` is open (static or opened on demand). O(per_node + log k).
    fn is_open(&self, t: Target) -> bool {
        self.is_static(t) || self.on_demand_conns.contains(&t)
    }

    /// Whether `t` is one of the static targets ([`Self::static_targets`]): a peer (RC) or a
    /// node holding a peer (XRC) that is not this process and is in its group or at its index
    /// in another group. O(processes per node).
    fn is_static(&self, t: Target) -> bool {
        if self.policy.transport == Transport::Ud {
            return false;
        }
        let partner = |p: u64| p != self.rank && p < self.layout.ranks && self.is_static_peer(p);
        match t {
            Target::Peer(p) => !self.policy.transport.per_node() && partner(p),
            Target::Node(m) => {
                let first = m.saturating_mul(self.layout.per_node);
                self.policy.transport.per_node() && (first..first.saturating_add(self.layout.per_node)).any(partner)
            }
        }
    }

    /// Opens the connection a message to `peer` needs, on demand; false when it was open
    /// already (a connection is created once and reused).
    pub fn connect(&mut self, peer: u64) -> bool {
        let Route::Conn(t) = self.route(peer) else {
            return false;
        };
        if self.is_open(t) {
            return false;
        }
        self.open(t, true);
        self.post_srq_buffers(1);
        true
    }

    /// The allocations recorded since the last call (empty when not recording).
    pub fn take_actions(&mut self) -> Vec<Action> {
        self.actions.as_mut().map(std::mem::take).unwrap_or_default()
    }

    pub fn account(&self) -> &MemoryAccount {
        &self.account
    }

    /// Connections opened on demand so far.
    pub fn on_demand(&self) -> u64 {
        self.on_demand
    }

    pub fn connections(&self) -> u64 {
        self.static_conns + self.on_demand_conns.len() as u64
    }

    /// Buffers posted to each SRQ class (largest buffer first).
    pub fn srq_buffers(&self) -> &[u64] {
        &self.srq_buffers
    }

    pub fn rank(&self) -> u64 {
        self.rank
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn params(&self) -> &ConnParams {
        &self.params
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The static connections of this process, sorted, without duplicates: every other
    /// process (or its node, under XRC) under full connection; under group connection the
    /// members of its own group and the processes with its index in every other group.
    fn static_targets(&self) -> Vec<Target> {
        if self.policy.transport == Transport::Ud {
            return Vec::new();
        }
        let (r, n) = (self.rank, self.layout.ranks);
        let mut peers: Vec<u64> = match self.policy.group {
            None => (0..n).filter(|&p| p != r).collect(),
            Some(g) => {
                let start = r / g * g;
                let own = (start..(start + g).min(n)).filter(|&p| p != r);
                let same_index = (0..n.div_ceil(g)).map(|h| h * g + r % g).filter(|&p| p < n && p != r);
                own.chain(same_index).collect()
            }
        };
        let mut t: Vec<Target> = if self.policy.transport.per_node() {
            peers.iter().map(|&p| Target::Node(self.layout.node(p))).collect()
        } else {
            peers.drain(..).map(Target::Peer).collect()
        };
        t.sort_unstable();
        t.dedup();
        t
    }
}

/// Memory of one process and of the node holding it, from the allocators of the node's
/// processes at start (static connections only).
pub fn node_account(policy: Policy, params: ConnParams, layout: Layout, node: u64) -> Result<MemoryAccount, ConnError> {
    let mut sum = MemoryAccount::default();
    let first = node * layout.per_node;
    for r in first..(first + layout.per_node).min(layout.ranks) {
        sum.add(Allocator::new(policy, params, layout, r, false)?.account());
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spec 05 example values with s1 = 8 KB.
    fn p() -> ConnParams {
        ConnParams::default()
    }

    fn account(policy: Policy, ranks: u64, per_node: u64, rank: u64) -> MemoryAccount {
        *Allocator::new(policy, p(), Layout::new(ranks, per_node).unwrap(), rank, false)
            .unwrap()
            .account()
    }

    // The oracles below are spec 05's formulas ("Memory models"), with n, s1, sd, rd, s2 of
    // `ConnParams::default()`.
    const N5: u64 = 5;
    const S1: u64 = 8192;
    const SD: u64 = 16;
    const RD: u64 = 16;
    const S2: u64 = 64;

    /// The static-target predicate (which spares a record per static connection) names exactly
    /// the targets opened at start, for every transport, with and without groups, full and
    /// short last groups and nodes, and the on-demand connections add to the count once each.
    #[test]
    fn static_predicate_matches_the_static_targets() {
        for t in Transport::ALL {
            for group in [None, Some(1), Some(3), Some(4), Some(8)] {
                for (ranks, per_node) in [(2u64, 1u64), (13, 4), (24, 4), (17, 3)] {
                    let policy = Policy { transport: t, group };
                    if policy.check().is_err() {
                        continue;
                    }
                    let layout = Layout::new(ranks, per_node).unwrap();
                    for rank in 0..ranks {
                        let mut a = Allocator::new(policy, p(), layout, rank, false).unwrap();
                        let st = a.static_targets();
                        for x in 0..ranks + 2 {
                            for target in [Target::Peer(x), Target::Node(x)] {
                                assert_eq!(
                                    a.is_static(target),
                                    st.contains(&target),
                                    "{policy:?} {ranks}/{per_node} rank {rank} {target:?}"
                                );
                            }
                        }
                        assert_eq!(a.connections(), st.len() as u64);
                        let mut opened = 0;
                        for peer in 0..ranks {
                            let before = a.connected(peer);
                            assert_eq!(a.connect(peer), !before, "{policy:?} rank {rank} peer {peer}");
                            opened += u64::from(!before);
                            assert!(a.connected(peer));
                            assert!(!a.connect(peer));
                        }
                        assert_eq!(a.on_demand(), opened);
                        assert_eq!(a.connections(), st.len() as u64 + opened);
                    }
                }
            }
        }
    }

    #[test]
    fn rc_matches_the_formula() {
        for n in [2u64, 17, 1000] {
            let a = account(Policy::full(Transport::Rc), n, 4, 1);
            assert_eq!(a.total(), (N5 * S1) * (n - 1) + (SD + RD) * S2 * (n - 1), "N = {n}");
            assert_eq!(
                (a.qps, a.connections, a.srqs, a.buffers),
                (n - 1, n - 1, 0, N5 * (n - 1))
            );
        }
    }

    #[test]
    fn rc_srq_matches_the_formula() {
        for n in [2u64, 17, 10_000] {
            let a = account(Policy::full(Transport::RcSrq), n, 4, 0);
            assert_eq!(a.total(), S1 * (n - 1) + SD * S2 * (n - 1) + S2 * (n - 1), "N = {n}");
            assert_eq!((a.qps, a.srqs, a.buffers), (n - 1, 1, n - 1));
        }
    }

    #[test]
    fn xrc_s_matches_the_formula_per_process_and_per_node() {
        for (m, c) in [(10u64, 8u64), (1000, 16)] {
            let l = Layout::new(m * c, c).unwrap();
            let a = account(Policy::full(Transport::XrcS), m * c, c, 3);
            let per_proc = m * S1 + SD * S2 * m + S2 * m;
            assert_eq!(a.total(), per_proc);
            assert_eq!(a.connections, m, "one connection per node");
            let node = node_account(Policy::full(Transport::XrcS), p(), l, 1).unwrap();
            assert_eq!(node.total(), c * per_proc);
            assert_eq!(node.connections, m * c);
        }
    }

    #[test]
    fn xrc_m_matches_the_formula_when_classes_divide_the_connections() {
        // ((1 + ½ + … + 1/32)/6)·s1·m + sd·s2·m + s2·m, exact when 6 | m.
        for m in [6u64, 600, 1200] {
            let a = account(Policy::full(Transport::XrcM), m * 4, 4, 0);
            let bufs: u64 = (0..6).map(|k| S1 >> k).sum::<u64>() * m / 6;
            assert_eq!(a.total(), bufs + SD * S2 * m + S2 * m, "m = {m}");
            assert_eq!(a.srqs, 6);
        }
        // m = 1000: counts 166/167, the remainder to the smallest buffers.
        let mut al = Allocator::new(
            Policy::full(Transport::XrcM),
            p(),
            Layout::new(4000, 4).unwrap(),
            0,
            false,
        )
        .unwrap();
        assert_eq!(al.srq_buffers(), &[166, 166, 167, 167, 167, 167]);
        // An on-demand-free policy opens nothing more.
        assert!(!al.connect(4));
    }

    #[test]
    fn ud_memory_is_independent_of_n() {
        let a = account(Policy::full(Transport::Ud), 8, 4, 0);
        let b = account(Policy::full(Transport::Ud), 100_000, 4, 0);
        assert_eq!(a, b);
        assert_eq!(a.total(), 512 * 2048 + 512 * 64 + SD * S2);
        assert_eq!(a.connections, 0);
    }

    #[test]
    fn group_connection_counts_the_papers_examples() {
        // Spec 05: XRC, 4 cores per node, group = 4096 processes (1024 nodes): 320 000 cores →
        // 1024 + 78 connections; 1 M cores → 1024 + 244.
        let g = Policy::grouped(Transport::XrcS, 4096);
        assert_eq!(account(g, 320_000, 4, 0).connections, 1102);
        assert_eq!(account(g, 1_000_000, 4, 0).connections, 1268);
        // The same-index partner exists only in full groups for a high index.
        assert_eq!(account(g, 320_000, 4, 4000).connections, 1024 + 77);
        let a = account(g, 320_000, 4, 0);
        assert_eq!(a.total(), 1102 * (S1 + SD * S2 + S2));
    }

    #[test]
    fn on_demand_connections_are_created_once_and_reused() {
        let g = Policy::grouped(Transport::RcSrq, 4);
        let mut a = Allocator::new(g, p(), Layout::new(16, 2).unwrap(), 0, true).unwrap();
        // Rank 0: group 0 = 0..4 (3 peers), same index 4, 8, 12.
        assert_eq!(a.connections(), 6);
        assert!(a.connected(3) && a.connected(8) && !a.connected(5));
        let before = *a.account();
        a.take_actions();
        assert!(a.connect(5));
        assert!(!a.connect(5), "reused");
        assert_eq!(a.on_demand(), 1);
        let after = *a.account();
        assert_eq!(after.total() - before.total(), S1 + SD * S2 + S2);
        assert_eq!(
            a.take_actions(),
            vec![
                Action::Qp {
                    target: Target::Peer(5),
                    own_rq: None
                },
                Action::SrqBuffers {
                    class: 0,
                    buffer: S1,
                    count: 1
                }
            ]
        );
        // XRC group: a connection to a node serves every process on it.
        let gx = Policy::grouped(Transport::XrcS, 4);
        let mut x = Allocator::new(gx, p(), Layout::new(16, 2).unwrap(), 0, false).unwrap();
        assert!(x.connect(6));
        assert!(!x.connect(7), "rank 7 shares node 3 with rank 6");
        assert_eq!(x.on_demand(), 1);
    }

    #[test]
    fn bad_rank_is_an_error() {
        let e = Allocator::new(Policy::full(Transport::Rc), p(), Layout::new(4, 1).unwrap(), 4, false).unwrap_err();
        assert!(e.to_string().contains("rank 4"));
    }
}
