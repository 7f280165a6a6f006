//! Teams, active sets and the SHMEM collectives (broadcast, collect, fcollect, alltoall,
//! reductions) through `hpcnet-coll` communicators, made when a team first uses them.

use crate::pe::Pe;
use crate::{ShmemError, Sym};
use hpcnet_coll::{Algorithm, Comm, Element, ReduceOp};
use std::rc::Rc;

/// A team: an ordered set of PEs (`shmem_team_t`). [`Team::world`] holds every PE; others come
/// from [`Team::split_strided`] or active sets (start, log2 stride, size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Team {
    members: Rc<[usize]>,
}

/// Reduction operators of the SHMEM reductions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ShmemOp {
    Sum,
    Prod,
    Min,
    Max,
    And,
    Or,
    Xor,
}

impl Team {
    /// `SHMEM_TEAM_WORLD`.
    pub fn world(pe: &Pe) -> Team {
        Team {
            members: pe.world_members(),
        }
    }

    /// The PEs of the team, in team order.
    pub fn members(&self) -> &Rc<[usize]> {
        &self.members
    }

    /// `shmem_team_n_pes`.
    pub fn n_pes(&self) -> usize {
        self.members.len()
    }

    /// `shmem_team_my_pe`: `pe`'s index in the team, None when it is not a member.
    pub fn my_pe(&self, pe: &Pe) -> Option<usize> {
        self.members.iter().position(|&p| p == pe.my_pe())
    }

    /// `shmem_team_split_strided`: members `start`, `start + stride`, … (`size` of them) of
    /// this team.
    pub fn split_strided(&self, start: usize, stride: usize, size: usize) -> Result<Team, ShmemError> {
        let call = "shmem_team_split_strided";
        if size == 0 || stride == 0 {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!("size {size} and stride {stride} must be positive"),
            });
        }
        let last = start + stride * (size - 1);
        if last >= self.members.len() {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!(
                    "member {last} (start {start}, stride {stride}, size {size}) is outside the parent team of {}",
                    self.members.len()
                ),
            });
        }
        Ok(Team {
            members: (0..size).map(|i| self.members[start + i * stride]).collect(),
        })
    }

    /// An OpenSHMEM 1.0 active set: PEs `start + i · 2^log_stride` for `i < size`.
    pub fn active_set(
        pe: &Pe,
        call: &'static str,
        start: usize,
        log_stride: u32,
        size: usize,
    ) -> Result<Team, ShmemError> {
        let n = pe.n_pes();
        let stride = 1usize.checked_shl(log_stride).filter(|&s| s < (1 << 30));
        let Some(stride) = stride.filter(|_| size > 0) else {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!("active set with log2 stride {log_stride} and size {size}"),
            });
        };
        let last = start + stride * (size - 1);
        if last >= n {
            return Err(ShmemError::NoSuchPe {
                call,
                pe: last,
                npes: n,
            });
        }
        let members: Rc<[usize]> = (0..size).map(|i| start + i * stride).collect();
        if !members.contains(&pe.my_pe()) {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!("PE {} is not in the active set it calls on", pe.my_pe()),
            });
        }
        Ok(Team { members })
    }
}

impl Pe {
    /// This PE's communicator of `members`, made for all members when the first one needs it.
    pub(crate) fn comm(&mut self, members: &Rc<[usize]>) -> Result<&mut Comm, ShmemError> {
        if !self.comms.contains_key(members) {
            let mut all = self.shared.comms.borrow_mut();
            let handles = match all.get_mut(members) {
                Some(h) => h,
                None => {
                    let ctxs = members
                        .iter()
                        .map(|&p| self.context().peer(hpcnet_msg::verbs::Rank(p as u32)))
                        .collect();
                    let made =
                        Comm::create_from_contexts(ctxs, &self.shared.cfg.coll).map_err(|source| ShmemError::Coll {
                            call: "shmem_team",
                            source,
                        })?;
                    all.entry(members.clone())
                        .or_insert(made.into_iter().map(Some).collect())
                }
            };
            let i = members
                .iter()
                .position(|&p| p == self.me)
                .ok_or(ShmemError::BadArgument {
                    call: "shmem_team",
                    reason: format!("PE {} is not a member of the team", self.me),
                })?;
            let c = handles[i].take().expect("each member takes its handle once");
            self.comms.insert(members.clone(), c);
        }
        Ok(self.comms.get_mut(members).expect("inserted above"))
    }

    fn team_index(&self, call: &'static str, team: &Team) -> Result<usize, ShmemError> {
        team.my_pe(self).ok_or(ShmemError::BadArgument {
            call,
            reason: format!("PE {} is not a member of the team", self.me),
        })
    }

    fn load<T: Element>(&self, call: &'static str, src: Sym, n: u64) -> Result<Vec<T>, ShmemError> {
        let size = T::DATATYPE.size() as u64;
        self.check_sym(call, src.offset(), n * size)?;
        let b = self.read_bytes(src.with_len(n * size))?;
        Ok(b.chunks(size as usize).map(T::get).collect())
    }

    fn store<T: Element>(&self, call: &'static str, dest: Sym, v: &[T]) -> Result<(), ShmemError> {
        let mut b = Vec::with_capacity(v.len() * T::DATATYPE.size());
        for &x in v {
            x.put(&mut b);
        }
        self.check_sym(call, dest.offset(), b.len() as u64)?;
        self.write_bytes(dest, &b)
    }

    fn coll_err(call: &'static str) -> impl Fn(hpcnet_coll::CollError) -> ShmemError {
        move |source| ShmemError::Coll { call, source }
    }

    /// `shmem_broadcast`: `nelems` elements of the root's `source` into every member's `dest`
    /// (the root's too, as in OpenSHMEM 1.5); `root` is a team index.
    pub async fn broadcast<T: Element>(
        &mut self,
        team: &Team,
        dest: Sym,
        source: Sym,
        nelems: u64,
        root: usize,
    ) -> Result<(), ShmemError> {
        let call = "shmem_broadcast";
        let me = self.team_index(call, team)?;
        if root >= team.n_pes() {
            return Err(ShmemError::BadArgument {
                call,
                reason: format!("root {root} is outside the team of {}", team.n_pes()),
            });
        }
        self.enter(0).await;
        let mut buf: Vec<T> = if me == root {
            self.load(call, source, nelems)?
        } else {
            self.load::<T>(call, dest, nelems)?
        };
        self.comm(team.members())?
            .broadcast(&mut buf, root, Algorithm::Auto)
            .await
            .map_err(Self::coll_err(call))?;
        self.store(call, dest, &buf)
    }

    /// `shmem_fcollect`: every member's `nelems` elements, concatenated in team order.
    pub async fn fcollect<T: Element>(
        &mut self,
        team: &Team,
        dest: Sym,
        source: Sym,
        nelems: u64,
    ) -> Result<(), ShmemError> {
        let call = "shmem_fcollect";
        self.team_index(call, team)?;
        self.enter(0).await;
        let mine: Vec<T> = self.load(call, source, nelems)?;
        let all = self
            .comm(team.members())?
            .allgather(&mine, Algorithm::Auto)
            .await
            .map_err(Self::coll_err(call))?;
        self.store(call, dest, &all)
    }

    /// `shmem_collect`: every member's elements (counts may differ), concatenated in team
    /// order; the total number of elements.
    pub async fn collect<T: Element>(
        &mut self,
        team: &Team,
        dest: Sym,
        source: Sym,
        nelems: u64,
    ) -> Result<u64, ShmemError> {
        let call = "shmem_collect";
        self.team_index(call, team)?;
        self.enter(0).await;
        let mine: Vec<T> = self.load(call, source, nelems)?;
        let comm = self.comm(team.members())?;
        let counts = comm
            .allgather(&[nelems as i64], Algorithm::Auto)
            .await
            .map_err(Self::coll_err(call))?;
        let max = counts.iter().copied().max().unwrap_or(0) as usize;
        let mut padded = mine.clone();
        padded.resize(
            max,
            mine.first()
                .copied()
                .unwrap_or_else(|| T::get(&vec![0; T::DATATYPE.size()])),
        );
        let all = comm
            .allgather(&padded, Algorithm::Auto)
            .await
            .map_err(Self::coll_err(call))?;
        let out: Vec<T> = counts
            .iter()
            .enumerate()
            .flat_map(|(i, &c)| all[i * max..i * max + c as usize].to_vec())
            .collect();
        self.store(call, dest, &out)?;
        Ok(out.len() as u64)
    }

    /// `shmem_alltoall`: block j of this member's `source` (`nelems` elements) goes to member
    /// j's `dest` block of this member's index.
    pub async fn alltoall<T: Element>(
        &mut self,
        team: &Team,
        dest: Sym,
        source: Sym,
        nelems: u64,
    ) -> Result<(), ShmemError> {
        let call = "shmem_alltoall";
        self.team_index(call, team)?;
        self.enter(0).await;
        let mine: Vec<T> = self.load(call, source, nelems * team.n_pes() as u64)?;
        let out = self
            .comm(team.members())?
            .alltoall(&mine, Algorithm::Auto)
            .await
            .map_err(Self::coll_err(call))?;
        self.store(call, dest, &out)
    }

    /// `shmem_<op>_reduce` (and the 1.0 `shmem_<type>_<op>_to_all`): element-wise reduction of
    /// every member's `nreduce` elements into every member's `dest`. Bitwise operators take
    /// integers only. `Prod`, which the collectives layer lacks, is an allgather followed by the
    /// product in team order (bit-identical on every member).
    pub async fn reduce<T: Element>(
        &mut self,
        team: &Team,
        dest: Sym,
        source: Sym,
        nreduce: u64,
        op: ShmemOp,
    ) -> Result<(), ShmemError> {
        let call = "shmem_reduce";
        self.team_index(call, team)?;
        self.enter(0).await;
        let mine: Vec<T> = self.load(call, source, nreduce)?;
        let comm = self.comm(team.members())?;
        let rop = match op {
            ShmemOp::Sum => Some(ReduceOp::Sum),
            ShmemOp::Min => Some(ReduceOp::Min),
            ShmemOp::Max => Some(ReduceOp::Max),
            ShmemOp::And => Some(ReduceOp::Band),
            ShmemOp::Or => Some(ReduceOp::Bor),
            ShmemOp::Xor => Some(ReduceOp::Bxor),
            ShmemOp::Prod => None,
        };
        let out = match rop {
            Some(rop) => comm
                .allreduce(&mine, rop, Algorithm::Auto)
                .await
                .map_err(Self::coll_err(call))?,
            None => {
                let all = comm
                    .allgather(&mine, Algorithm::Auto)
                    .await
                    .map_err(Self::coll_err(call))?;
                let n = nreduce as usize;
                let mut acc = mine.clone();
                for (k, a) in acc.iter_mut().enumerate() {
                    let mut p = all[k];
                    for m in 1..team.n_pes() {
                        p = mul(p, all[m * n + k]);
                    }
                    *a = p;
                }
                acc
            }
        };
        self.store(call, dest, &out)
    }
}

/// Product of two elements of one type, through its bytes (wrapping for integers).
fn mul<T: Element>(a: T, b: T) -> T {
    use hpcnet_coll::Datatype;
    let (mut x, mut y) = (Vec::new(), Vec::new());
    a.put(&mut x);
    b.put(&mut y);
    let out = match T::DATATYPE {
        Datatype::F32 => (f32::from_le_bytes(x[..4].try_into().expect("4"))
            * f32::from_le_bytes(y[..4].try_into().expect("4")))
        .to_le_bytes()
        .to_vec(),
        Datatype::F64 => (f64::from_le_bytes(x[..8].try_into().expect("8"))
            * f64::from_le_bytes(y[..8].try_into().expect("8")))
        .to_le_bytes()
        .to_vec(),
        Datatype::I32 => i32::from_le_bytes(x[..4].try_into().expect("4"))
            .wrapping_mul(i32::from_le_bytes(y[..4].try_into().expect("4")))
            .to_le_bytes()
            .to_vec(),
        Datatype::I64 => i64::from_le_bytes(x[..8].try_into().expect("8"))
            .wrapping_mul(i64::from_le_bytes(y[..8].try_into().expect("8")))
            .to_le_bytes()
            .to_vec(),
    };
    T::get(&out)
}
