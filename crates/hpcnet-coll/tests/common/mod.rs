//! Helpers shared by the collectives' integration tests: deterministic inputs whose bits show
//! the order of floating-point additions, and a reference `a op b` independent of the crate's.

use hpcnet_coll::{from_bytes, to_bytes, Datatype, ReduceOp};

/// Deterministic pseudo-random words.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut x = a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_add(0xD1B5_4A32_D192_ED03);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

/// Input bytes of member `m` for `count` elements of `dt` (floats of varied magnitude and sign,
/// so the order of additions shows in the bits).
pub fn input(dt: Datatype, m: usize, count: usize, salt: u64) -> Vec<u8> {
    let w = |j: usize| mix(m as u64 * 7919 + salt, j as u64);
    match dt {
        Datatype::I32 => to_bytes(&(0..count).map(|j| w(j) as i32).collect::<Vec<_>>()),
        Datatype::I64 => to_bytes(&(0..count).map(|j| w(j) as i64).collect::<Vec<_>>()),
        Datatype::F32 => to_bytes(
            &(0..count)
                .map(|j| ((w(j) % 2_000_001) as f32 - 1e6) * 10f32.powi((w(j) >> 40) as i32 % 7 - 3))
                .collect::<Vec<_>>(),
        ),
        Datatype::F64 => to_bytes(
            &(0..count)
                .map(|j| ((w(j) % 2_000_001) as f64 - 1e6) * 10f64.powi((w(j) >> 40) as i32 % 13 - 6))
                .collect::<Vec<_>>(),
        ),
    }
}

/// `a op b` by the reference implementation (independent of the crate's).
pub fn op2(dt: Datatype, op: ReduceOp, a: &[u8], b: &[u8]) -> Vec<u8> {
    macro_rules! go {
        ($t:ty, $f:expr) => {{
            let f: fn($t, $t) -> $t = $f;
            let x = from_bytes::<$t>(a);
            let y = from_bytes::<$t>(b);
            to_bytes(&x.iter().zip(&y).map(|(&p, &q)| f(p, q)).collect::<Vec<$t>>())
        }};
    }
    use ReduceOp::*;
    match (dt, op) {
        (Datatype::F32, Sum) => go!(f32, |p, q| p + q),
        (Datatype::F32, Max) => go!(f32, |p, q| if q > p { q } else { p }),
        (Datatype::F32, Min) => go!(f32, |p, q| if q < p { q } else { p }),
        (Datatype::F64, Sum) => go!(f64, |p, q| p + q),
        (Datatype::F64, Max) => go!(f64, |p, q| if q > p { q } else { p }),
        (Datatype::F64, Min) => go!(f64, |p, q| if q < p { q } else { p }),
        (Datatype::I32, Sum) => go!(i32, |p, q| p.wrapping_add(q)),
        (Datatype::I32, Max) => go!(i32, |p, q| p.max(q)),
        (Datatype::I32, Min) => go!(i32, |p, q| p.min(q)),
        (Datatype::I32, Band) => go!(i32, |p, q| p & q),
        (Datatype::I32, Bor) => go!(i32, |p, q| p | q),
        (Datatype::I32, Bxor) => go!(i32, |p, q| p ^ q),
        (Datatype::I64, Sum) => go!(i64, |p, q| p.wrapping_add(q)),
        (Datatype::I64, Max) => go!(i64, |p, q| p.max(q)),
        (Datatype::I64, Min) => go!(i64, |p, q| p.min(q)),
        (Datatype::I64, Band) => go!(i64, |p, q| p & q),
        (Datatype::I64, Bor) => go!(i64, |p, q| p | q),
        (Datatype::I64, Bxor) => go!(i64, |p, q| p ^ q),
        _ => unreachable!("bitwise on floats is not a reference case"),
    }
}

/// Every (datatype, operator) pair the collectives support: the bitwise operators on integers
/// only.
#[allow(dead_code)] // not every test file uses every helper
pub const ALL_CASES: &[(Datatype, ReduceOp)] = &[
    (Datatype::I32, ReduceOp::Sum),
    (Datatype::I32, ReduceOp::Max),
    (Datatype::I32, ReduceOp::Min),
    (Datatype::I32, ReduceOp::Band),
    (Datatype::I32, ReduceOp::Bor),
    (Datatype::I32, ReduceOp::Bxor),
    (Datatype::I64, ReduceOp::Sum),
    (Datatype::I64, ReduceOp::Max),
    (Datatype::I64, ReduceOp::Min),
    (Datatype::I64, ReduceOp::Band),
    (Datatype::I64, ReduceOp::Bor),
    (Datatype::I64, ReduceOp::Bxor),
    (Datatype::F32, ReduceOp::Sum),
    (Datatype::F32, ReduceOp::Max),
    (Datatype::F32, ReduceOp::Min),
    (Datatype::F64, ReduceOp::Sum),
    (Datatype::F64, ReduceOp::Max),
    (Datatype::F64, ReduceOp::Min),
];
