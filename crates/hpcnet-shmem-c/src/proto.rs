//! The wire format between a PE process and the simulator (mirrored in
//! `runtime/shmem_rt.c`): a fixed request header, optional payload bytes; a fixed reply
//! header, optional payload bytes. All fields are native-endian (both ends run on one host).

/// Request operations.
pub mod op {
    pub const INIT: u32 = 1;
    pub const FINALIZE: u32 = 2;
    pub const ABORT: u32 = 3;
    pub const GLOBAL_EXIT: u32 = 4;
    pub const MALLOC: u32 = 10;
    pub const CALLOC: u32 = 11;
    pub const ALIGN: u32 = 12;
    pub const FREE: u32 = 13;
    pub const REALLOC: u32 = 14;
    pub const PUT: u32 = 20;
    pub const PUT_SYM_NBI: u32 = 21;
    pub const GET: u32 = 22;
    pub const GET_SYM_NBI: u32 = 23;
    pub const IPUT: u32 = 24;
    pub const IGET: u32 = 25;
    pub const PUT_SIGNAL: u32 = 26;
    pub const AMO: u32 = 30;
    pub const FENCE: u32 = 40;
    pub const QUIET: u32 = 41;
    pub const BARRIER_ALL: u32 = 42;
    pub const BARRIER: u32 = 43;
    pub const SYNC_ALL: u32 = 44;
    pub const SYNC: u32 = 45;
    pub const WAIT: u32 = 50;
    pub const WAIT_VEC: u32 = 51;
    pub const SIGNAL_WAIT: u32 = 52;
    pub const LOCK_SET: u32 = 60;
    pub const LOCK_CLEAR: u32 = 61;
    pub const LOCK_TEST: u32 = 62;
    pub const BCAST: u32 = 70;
    pub const COLLECT: u32 = 71;
    pub const FCOLLECT: u32 = 72;
    pub const ALLTOALL: u32 = 73;
    pub const REDUCE: u32 = 74;
    /// The PE's simulated time (the program read a wall clock); reply v0 = picoseconds.
    pub const TIME: u32 = 80;
}

/// Atomic operations (low byte of `aux` of [`op::AMO`]; the width in bytes is the next byte).
pub mod amo {
    pub const FETCH: u32 = 0;
    pub const SET: u32 = 1;
    pub const SWAP: u32 = 2;
    pub const CSWAP: u32 = 3;
    pub const ADD: u32 = 4;
    pub const FADD: u32 = 5;
    pub const AND: u32 = 6;
    pub const FAND: u32 = 7;
    pub const OR: u32 = 8;
    pub const FOR: u32 = 9;
    pub const XOR: u32 = 10;
    pub const FXOR: u32 = 11;
}

/// Reply status: success.
pub const OK: i64 = 0;
/// Reply status: the call is invalid (payload: the reason); the PE stops with exit code 2.
pub const BAD_CALL: i64 = 1;
/// Reply status: the job is ending (another PE failed); the PE stops quietly.
pub const ENDING: i64 = 2;

/// A request header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Req {
    pub op: u32,
    pub aux: u32,
    /// Host CPU time the program spent since the previous reply (ns).
    pub cpu_ns: u64,
    pub a: [u64; 7],
    /// Payload bytes following the header.
    pub len: u64,
}

/// Bytes of a request header.
pub const REQ_BYTES: usize = 80;
/// Bytes of a reply header.
pub const REP_BYTES: usize = 32;

impl Req {
    pub fn decode(b: &[u8; REQ_BYTES]) -> Req {
        let u = |i: usize| u64::from_ne_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let mut a = [0; 7];
        for (k, v) in a.iter_mut().enumerate() {
            *v = u(16 + 8 * k);
        }
        Req {
            op: u32::from_ne_bytes(b[0..4].try_into().expect("4 bytes")),
            aux: u32::from_ne_bytes(b[4..8].try_into().expect("4 bytes")),
            cpu_ns: u(8),
            a,
            len: u(72),
        }
    }

    pub fn encode(&self) -> [u8; REQ_BYTES] {
        let mut b = [0u8; REQ_BYTES];
        b[0..4].copy_from_slice(&self.op.to_ne_bytes());
        b[4..8].copy_from_slice(&self.aux.to_ne_bytes());
        b[8..16].copy_from_slice(&self.cpu_ns.to_ne_bytes());
        for (k, v) in self.a.iter().enumerate() {
            b[16 + 8 * k..24 + 8 * k].copy_from_slice(&v.to_ne_bytes());
        }
        b[72..80].copy_from_slice(&self.len.to_ne_bytes());
        b
    }
}

/// A reply header followed by `payload_len` bytes.
pub fn encode_reply(status: i64, v: [u64; 2], payload_len: u64) -> [u8; REP_BYTES] {
    let mut b = [0u8; REP_BYTES];
    b[0..8].copy_from_slice(&status.to_ne_bytes());
    b[8..16].copy_from_slice(&v[0].to_ne_bytes());
    b[16..24].copy_from_slice(&v[1].to_ne_bytes());
    b[24..32].copy_from_slice(&payload_len.to_ne_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let r = Req {
            op: op::AMO,
            aux: amo::FADD | 8 << 8,
            cpu_ns: 12345,
            a: [1, 2, 3, u64::MAX, 5, 6, 7],
            len: 99,
        };
        assert_eq!(Req::decode(&r.encode()), r);
        let b = encode_reply(BAD_CALL, [7, 8], 3);
        assert_eq!(i64::from_ne_bytes(b[0..8].try_into().unwrap()), 1);
        assert_eq!(u64::from_ne_bytes(b[24..32].try_into().unwrap()), 3);
    }
}
