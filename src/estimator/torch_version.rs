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

    /// The first release whose in-place `hardtanh_` (so `ReLU6(inplace=True)`) differentiates
    /// through its input: 1.9.1's generated `HardtanhBackward1` (the in-place entry) holds
    /// `result_`, 1.10.2 has only `HardtanhBackward0` holding `self_`, so the in-place op first
    /// clones its input (pytorch/pytorch#62329 made the formula read `self`; #95432 reports the
    /// memory lost from 1.10 on).
    pub const HARDTANH_INPLACE_CLONES: TorchVersion = TorchVersion {
        major: 1,
        minor: 10,
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

    /// What autograd keeps on this release where it differs from a current one.
    pub fn rules(self) -> AutogradRules {
        AutogradRules {
            softmax_saves_input: self < Self::SOFTMAX_KEEPS_OUTPUT_ONLY,
            hardtanh_saves_result: self < Self::HARDTANH_INPLACE_CLONES,
        }
    }
}

/// The differences in what autograd saves between the PyTorch releases modelled, as facts a
/// builder reads (the default: a current release).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AutogradRules {
    /// Before 1.11 `softmax` and `log_softmax` kept their input beside their output.
    pub softmax_saves_input: bool,
    /// Before 1.10 the in-place `hardtanh_` kept its result, with no clone of its input.
    pub hardtanh_saves_result: bool,
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
    fn rules_change_at_their_releases() {
        let v = |s| TorchVersion::parse(s).unwrap().rules();
        assert!(v("1.10").softmax_saves_input);
        assert!(v("1.5").softmax_saves_input);
        assert!(!v("1.11").softmax_saves_input);
        assert!(!v("2.5").softmax_saves_input);
        assert!(v("1.9").hardtanh_saves_result);
        assert!(v("1.5").hardtanh_saves_result);
        assert!(!v("1.10").hardtanh_saves_result);
        assert_eq!(v("2.5"), AutogradRules::default());
        assert!(TorchVersion::parse("1").is_err());
        assert!(TorchVersion::parse("3.0").is_err());
        assert!(TorchVersion::parse("1.x").is_err());
    }
}
