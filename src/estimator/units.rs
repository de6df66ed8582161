//! Units as types: byte counts, element counts and dtypes, so that a size can never be confused
//! with a count. Memory is shown in binary units (KiB, MiB, GiB), counts in decimal (K, M, B).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use super::error::EstimateError;

/// A number of bytes. Arithmetic saturates nowhere: sizes are built with the checked helpers,
/// which report [`EstimateError::TooLarge`] instead of wrapping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Bytes(pub u64);

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
    /// Rounds up to a multiple of `align` (the CUDA caching allocator rounds every block to 512 B).
    pub fn round_up(self, align: u64) -> Bytes {
        Bytes(self.0.div_ceil(align).saturating_mul(align))
    }
    pub fn checked_add(self, o: Bytes) -> Result<Bytes, EstimateError> {
        self.0.checked_add(o.0).map(Bytes).ok_or(EstimateError::TooLarge)
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
        write!(f, "{v:.1} {}", UNITS[u])
    } else {
        write!(f, "{v:.2} {}", UNITS[u])
    }
}

/// A count of tensor elements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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
            write!(f, "{:.2} B", v / 1e9)
        } else if v >= 1e6 {
            write!(f, "{:.1} M", v / 1e6)
        } else if v >= 1e3 {
            write!(f, "{:.1} K", v / 1e3)
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
    I8,
    U8,
    Bool,
    I4,
}

impl DType {
    pub fn bits(self) -> u64 {
        match self {
            DType::F32 | DType::I32 => 32,
            DType::F16 | DType::BF16 => 16,
            DType::I64 => 64,
            DType::I8 | DType::U8 | DType::Bool => 8,
            DType::I4 => 4,
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "fp32",
            DType::F16 => "fp16",
            DType::BF16 => "bf16",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::Bool => "bool",
            DType::I4 => "int4",
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
    }
}
