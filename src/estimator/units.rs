//! Units as types: byte counts, element counts and dtypes, so that a size can never be confused
//! with a count. Memory is shown in binary units (KiB, MiB, GiB), counts in decimal (K, M, B).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use super::decimal::Fixed;
use super::error::EstimateError;

/// The CUDA caching allocator rounds every request up to a multiple of 512 bytes
/// (`kMinBlockSize` in `c10/cuda/CUDACachingAllocator.cpp`, `round_size`), which is what
/// `torch.cuda.max_memory_allocated` counts.
pub const ALLOCATOR_BLOCK: u64 = 512;

/// A number of bytes. Arithmetic saturates nowhere: sizes are built with the checked helpers,
/// which report [`EstimateError::TooLarge`] instead of wrapping.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

/// Puts `x` into the ascending `v` unless it is there. For the handful of values the step's
/// bookkeeping orders (an op's saved storages, the envelope's lines): no sort means no copy of
/// the standard library's sorting code in the page's first load.
pub fn insert_sorted(v: &mut Vec<usize>, x: usize) {
    let at = v.partition_point(|&y| y < x);
    if v.get(at) != Some(&x) {
        v.insert(at, x);
    }
}

impl Bytes {
    pub const ZERO: Bytes = Bytes(0);
    pub const KIB: u64 = 1 << 10;
    pub const MIB: u64 = 1 << 20;
    pub const GIB: u64 = 1 << 30;

    pub fn get(self) -> u64 {
        self.0
    }
    pub fn gib(self) -> f64 {
        self.0 as f64 / Self::GIB as f64
    }
    pub fn mib(self) -> f64 {
        self.0 as f64 / Self::MIB as f64
    }
    /// Rounds up to a multiple of `align`.
    pub fn round_up(self, align: u64) -> Bytes {
        Bytes(self.0.div_ceil(align).saturating_mul(align))
    }
    /// The bytes the CUDA caching allocator hands out for a request of this size: rounded up
    /// to its [`ALLOCATOR_BLOCK`].
    pub fn allocator_block(self) -> Bytes {
        self.round_up(ALLOCATOR_BLOCK)
    }
    pub fn checked_add(self, o: Bytes) -> Result<Bytes, EstimateError> {
        self.0
            .checked_add(o.0)
            .map(Bytes)
            .ok_or(EstimateError::TooLarge)
    }
    pub fn saturating_sub(self, o: Bytes) -> Bytes {
        Bytes(self.0.saturating_sub(o.0))
    }
    /// Decimal gigabytes, for users who think in GB (10⁹ B).
    pub fn gb(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl Add for Bytes {
    type Output = Bytes;
    fn add(self, o: Bytes) -> Bytes {
        // Totals of live tensors are bounded by the checked per-tensor sizes and the tensor count;
        // saturating keeps a pathological sum from wrapping to a small, wrong number.
        Bytes(self.0.saturating_add(o.0))
    }
}
impl AddAssign for Bytes {
    fn add_assign(&mut self, o: Bytes) {
        *self = *self + o;
    }
}
impl Sub for Bytes {
    type Output = Bytes;
    fn sub(self, o: Bytes) -> Bytes {
        Bytes(self.0.saturating_sub(o.0))
    }
}
impl std::ops::Div<u64> for Bytes {
    type Output = Bytes;
    fn div(self, d: u64) -> Bytes {
        Bytes(self.0 / d)
    }
}
impl std::iter::Sum for Bytes {
    fn sum<I: Iterator<Item = Bytes>>(it: I) -> Bytes {
        it.fold(Bytes::ZERO, |a, b| a + b)
    }
}

impl fmt::Display for Bytes {
    /// Binary units, about three significant digits: "97.5 MiB", "1.23 GiB", "123.4 GiB".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        format_binary(self.0, f)
    }
}

fn format_binary(b: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if b < 1024 {
        return write!(f, "{b} B");
    }
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if v >= 10.0 {
        write!(f, "{} {}", Fixed(v, 1), UNITS[u])
    } else {
        write!(f, "{} {}", Fixed(v, 2), UNITS[u])
    }
}

/// A count of tensor elements.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Elems(pub u64);

impl Elems {
    /// Product of a shape, or [`EstimateError::TooLarge`] when it does not fit 64 bits.
    pub fn of_shape(shape: &[u64]) -> Result<Elems, EstimateError> {
        shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .map(Elems)
            .ok_or(EstimateError::TooLarge)
    }
}

impl fmt::Display for Elems {
    /// Decimal: "25.6 M", "7.00 B".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0 as f64;
        if v >= 1e9 {
            write!(f, "{} B", Fixed(v / 1e9, 2))
        } else if v >= 1e6 {
            write!(f, "{} M", Fixed(v / 1e6, 1))
        } else if v >= 1e3 {
            write!(f, "{} K", Fixed(v / 1e3, 1))
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// Element types, stored as bits so sub-byte types (INT4, NF4) are exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
    I4,
    /// FP8 E4M3 (`torch.float8_e4m3fn`): block-scaled FP8 weights and activations.
    F8e4m3,
    /// FP4 E2M1, the element type of an MXFP4 block (OCP Microscaling Formats v1.0).
    F4e2m1,
}

impl DType {
    pub fn bits(self) -> u64 {
        match self {
            DType::F32 | DType::I32 => 32,
            DType::F16 | DType::BF16 | DType::I16 => 16,
            DType::I64 => 64,
            DType::I8 | DType::U8 | DType::Bool | DType::F8e4m3 => 8,
            DType::I4 | DType::F4e2m1 => 4,
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }
    /// The result dtype of a binary op on two tensors of these dtypes (neither a 0-dim
    /// scalar), as PyTorch's `promoteTypes` table gives it (`c10/core/ScalarType.cpp`, the
    /// rule `torch.result_type` and `torch/_prims_common` follow): a dtype with itself is
    /// itself; bool loses to everything; a float beats any integer; between floats the wider
    /// wins, and bf16 with fp16, neither able to hold the other, gives fp32; between integers
    /// the wider wins, and uint8 with a narrower or equal signed type gives int16.
    /// `I4` (packed 4-bit weights, not a torch scalar type) ranks as a signed integer of 4 bits;
    /// the block-scaled FP8 and FP4 storages only ever meet their own kernels, never promotion.
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        let (a, b) = (self, other);
        if a == b {
            return a;
        }
        match (a.is_float(), b.is_float()) {
            (true, true) if a.bits() == b.bits() => F32,
            (true, true) => {
                if a.bits() > b.bits() {
                    a
                } else {
                    b
                }
            }
            (true, false) => a,
            (false, true) => b,
            (false, false) if a == Bool => b,
            (false, false) if b == Bool => a,
            (false, false) if a == U8 || b == U8 => {
                let signed = if a == U8 { b } else { a };
                if signed.bits() > 8 {
                    signed
                } else {
                    I16
                }
            }
            (false, false) => {
                if a.bits() > b.bits() {
                    a
                } else {
                    b
                }
            }
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "fp32",
            DType::F16 => "fp16",
            DType::BF16 => "bf16",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::I16 => "int16",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::Bool => "bool",
            DType::I4 => "int4",
            DType::F8e4m3 => "fp8",
            DType::F4e2m1 => "fp4",
        }
    }
}

/// Bytes of a tensor: `(numel * bits).div_ceil(8)`, checked.
pub fn tensor_bytes(numel: Elems, dtype: DType) -> Result<Bytes, EstimateError> {
    numel
        .0
        .checked_mul(dtype.bits())
        .map(|b| Bytes(b.div_ceil(8)))
        .ok_or(EstimateError::TooLarge)
}

/// Reads a plain non-negative decimal typed by a user ("24", "23.5", ".5"): digits with at most
/// one point, no sign or exponent, at most 18 significant digits; `None` otherwise.
///
/// Why not `str::parse::<f64>`: it links core's correctly rounded parser and its 10 KiB table of
/// powers of five, incompressible bytes in the page's first load, for the one capacity box. The
/// result is the same: the mantissa is below 2^63 and, for at most 22 decimals, both it (up to
/// 2^53) and 10^k are exact doubles, so the one division is correctly rounded (IEEE 754).
pub fn parse_decimal(s: &str) -> Option<f64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.len() + frac.len() == 0 || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = int.bytes().chain(frac.bytes()).skip_while(|b| *b == b'0');
    let mut mantissa: u64 = 0;
    let mut n = 0;
    for d in digits {
        n += 1;
        if n > 18 {
            return None;
        }
        mantissa = mantissa * 10 + (d - b'0') as u64;
    }
    if frac.len() > 22 || mantissa >= 1 << 53 {
        return None;
    }
    Some(mantissa as f64 / 10f64.powi(frac.len() as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_display_binary() {
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(Bytes(25_557_032 * 4).to_string(), "97.5 MiB");
        assert_eq!(Bytes(8 * Bytes::GIB).to_string(), "8.00 GiB");
    }

    #[test]
    fn sub_byte_dtypes_round_up() {
        assert_eq!(tensor_bytes(Elems(3), DType::I4).unwrap(), Bytes(2));
        assert_eq!(tensor_bytes(Elems(3), DType::BF16).unwrap(), Bytes(6));
    }

    #[test]
    fn overflow_is_an_error() {
        assert!(Elems::of_shape(&[u64::MAX, 2]).is_err());
        assert!(tensor_bytes(Elems(u64::MAX / 4), DType::F32).is_err());
    }

    #[test]
    fn round_to_allocator_blocks() {
        assert_eq!(Bytes(1).round_up(512), Bytes(512));
        assert_eq!(Bytes(1024).round_up(512), Bytes(1024));
        assert_eq!(Bytes(0).allocator_block(), Bytes(0));
        assert_eq!(Bytes(513).allocator_block(), Bytes(1024));
    }

    /// Pairs from PyTorch's `promoteTypes` table (`torch.promote_types`).
    #[test]
    fn promotion_follows_torch() {
        use DType::*;
        let table = [
            (BF16, F16, F32),
            (BF16, F32, F32),
            (F16, F32, F32),
            (BF16, BF16, BF16),
            (F16, F16, F16),
            (F32, F32, F32),
            (I64, BF16, BF16),
            (I64, F32, F32),
            (Bool, F16, F16),
            (Bool, I8, I8),
            (U8, I8, I16),
            (U8, I32, I32),
            (I8, I32, I32),
            (I32, I64, I64),
            (U8, Bool, U8),
        ];
        for (a, b, want) in table {
            assert_eq!(a.promote(b), want, "{a:?} with {b:?}");
            assert_eq!(b.promote(a), want, "{b:?} with {a:?}");
        }
    }

    /// Golden against std's correctly rounded parser, and nonsense refused.
    #[test]
    fn decimals_parse_like_std() {
        for s in [
            "24",
            "23.5",
            "0.1",
            ".5",
            "5.",
            "80.000",
            "0.3",
            "141.0",
            "1048576",
            "0.000123456789",
            "9007199254740991",
            "1234567.891011",
        ] {
            assert_eq!(parse_decimal(s), Some(s.parse::<f64>().unwrap()), "{s}");
        }
        // Any mantissa below 2^53 with up to 22 decimals (a fixed pseudo-random sample).
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let (m, k) = ((x >> 11) % (1 << 53), (x % 23) as usize);
            let digits = format!("{m:0>width$}", width = k + 1);
            let s = format!(
                "{}.{}",
                &digits[..digits.len() - k],
                &digits[digits.len() - k..]
            );
            assert_eq!(parse_decimal(&s), Some(s.parse::<f64>().unwrap()), "{s}");
        }
        for s in [
            "",
            ".",
            "-1",
            "+1",
            "1e3",
            "1.2.3",
            " 1",
            "inf",
            "NaN",
            "1,5",
            "12345678901234567890",
            "0.00000000000000000000001",
        ] {
            assert_eq!(parse_decimal(s), None, "{s}");
        }
    }
}
