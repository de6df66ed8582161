//! The PyTorch release a run uses, where it changes what autograd keeps. The estimator models a
//! current PyTorch (2.x); a plan names an older release in its `"stack"` (`"torch": "1.10"`) to
//! reproduce a run on it. Each difference is read from the releases' generated autograd nodes
//! (`torch/csrc/autograd/generated/Functions.h` of the wheels: the `SavedVariable` members of
//! each backward node), compared for every op the builders record.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A PyTorch version a plan cannot use.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum TorchVersionError {
    #[error("PyTorch version `{0}` is not `major.minor`; write e.g. \"1.10\"")]
    NotAVersion(String),
    #[error("PyTorch {0} is outside the 1.x and 2.x releases modelled")]
    OutOfRange(String),
}

/// A PyTorch release as `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TorchVersion {
    pub major: u32,
    pub minor: u32,
}

impl TorchVersion {
    /// The first release whose `softmax` and `log_softmax` keep only their output for backward:
    /// torch 1.10.2's `SoftmaxBackward0` and `LogSoftmaxBackward0` hold `self_` and `result_`,
    /// 1.11.0's `result_` and the input's scalar type (pytorch/pytorch#65242, "Avoid saving self
    /// for `softmax` and `log_softmax`").
    pub const SOFTMAX_KEEPS_OUTPUT_ONLY: TorchVersion = TorchVersion {
        major: 1,
        minor: 11,
    };

    pub fn parse(text: &str) -> Result<TorchVersion, TorchVersionError> {
        let bad = || TorchVersionError::NotAVersion(text.to_string());
        let (ma, mi) = text.trim().split_once('.').ok_or_else(bad)?;
        let num = |s: &str| {
            (!s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u32>().ok())
                .flatten()
        };
        let v = TorchVersion {
            major: num(ma).ok_or_else(bad)?,
            minor: num(mi).ok_or_else(bad)?,
        };
        if !(1..=2).contains(&v.major) {
            return Err(TorchVersionError::OutOfRange(v.to_string()));
        }
        Ok(v)
    }

    /// Whether `softmax` and `log_softmax` save their input beside their output.
    pub fn softmax_saves_input(self) -> bool {
        self < Self::SOFTMAX_KEEPS_OUTPUT_ONLY
    }
}

impl std::fmt::Display for TorchVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Serialize for TorchVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TorchVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TorchVersion, D::Error> {
        let text = String::deserialize(d)?;
        TorchVersion::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_saves_its_input_before_1_11() {
        let v = |s| TorchVersion::parse(s).unwrap();
        assert!(v("1.10").softmax_saves_input());
        assert!(v("1.5").softmax_saves_input());
        assert!(!v("1.11").softmax_saves_input());
        assert!(!v("2.5").softmax_saves_input());
        assert!(TorchVersion::parse("1").is_err());
        assert!(TorchVersion::parse("3.0").is_err());
        assert!(TorchVersion::parse("1.x").is_err());
    }
}
