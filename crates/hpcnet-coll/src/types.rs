//! Datatypes and reduction operators, applied to little-endian bytes as they lie in memory.
//!
//! Integer sums wrap (two's complement), as `MPI_SUM` on fixed-width integers does in practice.
//! Floating-point `max`/`min` follow IEEE 754 `maxNum`/`minNum` (`f64::max`): a NaN operand loses
//! to a number. The order of operands is fixed by each algorithm, so a floating-point result is
//! bit-identical from run to run for a given algorithm and communicator size.

use crate::CollError;

/// Element type of a reduction buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Datatype {
    F32,
    F64,
    I32,
    I64,
}

impl Datatype {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            Datatype::F32 | Datatype::I32 => 4,
            Datatype::F64 | Datatype::I64 => 8,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Datatype::F32 => "f32",
            Datatype::F64 => "f64",
            Datatype::I32 => "i32",
            Datatype::I64 => "i64",
        }
    }
    fn is_float(self) -> bool {
        matches!(self, Datatype::F32 | Datatype::F64)
    }
    pub(crate) fn code(self) -> u32 {
        self as u32
    }
}

/// Reduction operator.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    /// Bitwise and (integers only).
    Band,
    /// Bitwise or (integers only).
    Bor,
    /// Bitwise exclusive or (integers only).
    Bxor,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Band => "band",
            ReduceOp::Bor => "bor",
            ReduceOp::Bxor => "bxor",
        }
    }
    fn is_bitwise(self) -> bool {
        matches!(self, ReduceOp::Band | ReduceOp::Bor | ReduceOp::Bxor)
    }
    pub(crate) fn code(self) -> u32 {
        self as u32
    }
}

/// An element type rank programs pass to the typed collectives.
pub trait Element: Copy + 'static {
    const DATATYPE: Datatype;
    fn put(self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
    /// Write the little-endian bytes into `out` (exactly [`Datatype::size`] bytes).
    fn put_into(self, out: &mut [u8]) {
        let mut v = Vec::with_capacity(8);
        self.put(&mut v);
        out.copy_from_slice(&v);
    }
}

macro_rules! element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DATATYPE: Datatype = $d;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
            #[inline]
            fn put_into(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
        }
    };
}
element!(f32, Datatype::F32);
element!(f64, Datatype::F64);
element!(i32, Datatype::I32);
element!(i64, Datatype::I64);

/// Little-endian bytes of a slice of elements.
pub fn to_bytes<T: Element>(v: &[T]) -> Vec<u8> {
    let s = T::DATATYPE.size();
    let mut out = vec![0u8; v.len() * s];
    for (&x, b) in v.iter().zip(out.chunks_exact_mut(s)) {
        x.put_into(b);
    }
    out
}

/// Elements from little-endian bytes (a trailing partial element is ignored; callers check).
pub fn from_bytes<T: Element>(b: &[u8]) -> Vec<T> {
    b.chunks_exact(T::DATATYPE.size()).map(T::get).collect()
}

/// Check that `op` is defined on `dtype`.
pub fn check_op(call: &'static str, dtype: Datatype, op: ReduceOp) -> Result<(), CollError> {
    if op.is_bitwise() && dtype.is_float() {
        return Err(CollError::OpOnType {
            call,
            op: op.name(),
            dtype: dtype.name(),
        });
    }
    Ok(())
}

/// Check that `len` bytes are a whole number of `dtype` elements.
pub(crate) fn check_len(call: &'static str, dtype: Datatype, len: usize) -> Result<(), CollError> {
    if !len.is_multiple_of(dtype.size()) {
        return Err(CollError::BadBuffer {
            call,
            reason: format!("{len} bytes is not a whole number of {} elements", dtype.name()),
        });
    }
    Ok(())
}

macro_rules! fold {
    ($t:ty, $out:expr, $other:expr, $out_left:expr, $f:expr) => {{
        const S: usize = std::mem::size_of::<$t>();
        let f: fn($t, $t) -> $t = $f;
        for (x, y) in $out.chunks_exact_mut(S).zip($other.chunks_exact(S)) {
            let o = <$t>::from_le_bytes(x[..].try_into().expect("element"));
            let p = <$t>::from_le_bytes(y[..].try_into().expect("element"));
            let v = if $out_left { f(o, p) } else { f(p, o) };
            x.copy_from_slice(&v.to_le_bytes());
        }
    }};
}

/// `left[i] = left[i] op right[i]` over little-endian elements; `left` is the first operand.
/// Both slices must have the same length, a whole number of elements, and `op` must be defined on
/// `dtype` ([`check_op`]); the collectives check this before they reduce.
pub fn reduce_into(dtype: Datatype, op: ReduceOp, left: &mut [u8], right: &[u8]) -> Result<(), CollError> {
    fold_into(dtype, op, left, right, true)
}

/// `right[i] = left[i] op right[i]`: [`reduce_into`] with the result in the second operand
/// (the same values, without copying a result from one buffer into the other). Floating-point
/// `max` and `min` leave the choice between equal-comparing operands (signed zeros) to the
/// code generated for them, so they go through [`reduce_into`] itself and a copy, which keeps
/// their bits those of [`reduce_into`].
pub fn reduce_into_right(dtype: Datatype, op: ReduceOp, left: &[u8], right: &mut [u8]) -> Result<(), CollError> {
    if matches!(dtype, Datatype::F32 | Datatype::F64) && matches!(op, ReduceOp::Max | ReduceOp::Min) {
        let mut l = left.to_vec();
        reduce_into(dtype, op, &mut l, right)?;
        right.copy_from_slice(&l);
        return Ok(());
    }
    fold_into(dtype, op, right, left, false)
}

/// `out[i] = out[i] op other[i]` when `out_left`, else `out[i] = other[i] op out[i]`.
fn fold_into(dtype: Datatype, op: ReduceOp, out: &mut [u8], other: &[u8], out_left: bool) -> Result<(), CollError> {
    check_op("reduce", dtype, op)?;
    let (l, r) = if out_left {
        (out.len(), other.len())
    } else {
        (other.len(), out.len())
    };
    if l != r {
        return Err(CollError::BadBuffer {
            call: "reduce",
            reason: format!("operands of {l} and {r} bytes"),
        });
    }
    check_len("reduce", dtype, out.len())?;
    use ReduceOp::*;
    let ol = out_left;
    match (dtype, op) {
        (Datatype::F32, Sum) => fold!(f32, out, other, ol, |a, b| a + b),
        (Datatype::F32, Max) => fold!(f32, out, other, ol, f32::max),
        (Datatype::F32, Min) => fold!(f32, out, other, ol, f32::min),
        (Datatype::F64, Sum) => fold!(f64, out, other, ol, |a, b| a + b),
        (Datatype::F64, Max) => fold!(f64, out, other, ol, f64::max),
        (Datatype::F64, Min) => fold!(f64, out, other, ol, f64::min),
        (Datatype::I32, Sum) => fold!(i32, out, other, ol, i32::wrapping_add),
        (Datatype::I32, Max) => fold!(i32, out, other, ol, std::cmp::max),
        (Datatype::I32, Min) => fold!(i32, out, other, ol, std::cmp::min),
        (Datatype::I32, Band) => fold!(i32, out, other, ol, |a, b| a & b),
        (Datatype::I32, Bor) => fold!(i32, out, other, ol, |a, b| a | b),
        (Datatype::I32, Bxor) => fold!(i32, out, other, ol, |a, b| a ^ b),
        (Datatype::I64, Sum) => fold!(i64, out, other, ol, i64::wrapping_add),
        (Datatype::I64, Max) => fold!(i64, out, other, ol, std::cmp::max),
        (Datatype::I64, Min) => fold!(i64, out, other, ol, std::cmp::min),
        (Datatype::I64, Band) => fold!(i64, out, other, ol, |a, b| a & b),
        (Datatype::I64, Bor) => fold!(i64, out, other, ol, |a, b| a | b),
        (Datatype::I64, Bxor) => fold!(i64, out, other, ol, |a, b| a ^ b),
        (Datatype::F32 | Datatype::F64, Band | Bor | Bxor) => {
            return Err(CollError::OpOnType {
                call: "reduce",
                op: op.name(),
                dtype: dtype.name(),
            })
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_ops_on_bytes() {
        let mut a = to_bytes(&[5i32, -3, i32::MAX]);
        let b = to_bytes(&[7i32, 2, 1]);
        reduce_into(Datatype::I32, ReduceOp::Sum, &mut a, &b).unwrap();
        assert_eq!(from_bytes::<i32>(&a), vec![12, -1, i32::MIN]);
        let mut a = to_bytes(&[0b1100i64, 9]);
        reduce_into(Datatype::I64, ReduceOp::Bxor, &mut a, &to_bytes(&[0b1010i64, 9])).unwrap();
        assert_eq!(from_bytes::<i64>(&a), vec![0b0110, 0]);
    }

    /// The result in the second operand is bit for bit the result in the first (float sums of
    /// mixed magnitudes and a NaN, max and min with a NaN and signed zeros).
    #[test]
    fn reducing_into_the_right_operand_gives_the_same_bits() {
        let l = to_bytes(&[1e16f64, -0.0, f64::NAN, 3.0, 0.1]);
        let r = to_bytes(&[1.0f64, 0.0, 2.0, f64::NAN, 0.2]);
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
            let mut a = l.clone();
            reduce_into(Datatype::F64, op, &mut a, &r).unwrap();
            let mut b = r.clone();
            reduce_into_right(Datatype::F64, op, &l, &mut b).unwrap();
            assert_eq!(a, b, "{op:?}");
        }
        let mut b = to_bytes(&[1i32, 2]);
        reduce_into_right(Datatype::I32, ReduceOp::Sum, &to_bytes(&[5i32, 6]), &mut b).unwrap();
        assert_eq!(from_bytes::<i32>(&b), vec![6, 8]);
        let mut short = vec![0u8; 4];
        assert!(reduce_into_right(Datatype::I32, ReduceOp::Sum, &[0u8; 8], &mut short).is_err());
        assert!(reduce_into_right(Datatype::F32, ReduceOp::Bxor, &[0u8; 4], &mut short).is_err());
    }

    #[test]
    fn float_ops_and_bitwise_refused() {
        let mut a = to_bytes(&[1.5f64, -2.0]);
        reduce_into(Datatype::F64, ReduceOp::Max, &mut a, &to_bytes(&[1.0f64, 3.0])).unwrap();
        assert_eq!(from_bytes::<f64>(&a), vec![1.5, 3.0]);
        let mut a = to_bytes(&[1.0f32]);
        let e = reduce_into(Datatype::F32, ReduceOp::Bor, &mut a, &to_bytes(&[2.0f32])).unwrap_err();
        assert!(matches!(e, CollError::OpOnType { dtype: "f32", .. }));
    }
}
