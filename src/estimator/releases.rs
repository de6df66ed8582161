//! The PyTorch and transformers releases a run uses, where they change what a step holds. The
//! estimator models current releases (PyTorch 2.x, transformers 5.x); a plan names older ones in
//! its `"stack"` (`"torch": "1.10"`, `"transformers": "4.16"`) to reproduce a run on them. Each
//! PyTorch difference is read from the releases' generated autograd nodes
//! (`torch/csrc/autograd/generated/Functions.h` of the wheels: the `SavedVariable` members of
//! each backward node), compared for every op the builders record; each transformers difference
//! from the modeling files of the wheels.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A release a plan cannot use.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum ReleaseError {
    #[error("PyTorch version `{0}` is not `major.minor`; write e.g. \"1.10\"")]
    NotATorchVersion(String),
    #[error("PyTorch {0} is outside the 1.x and 2.x releases modelled")]
    TorchOutOfRange(String),
    #[error("transformers version `{0}` is not `major.minor`; write e.g. \"4.16\"")]
    NotATransformersVersion(String),
    #[error("transformers {0} is outside the 4.x and 5.x releases modelled")]
    TransformersOutOfRange(String),
}

/// `major.minor` with at most three digits each, as a wheel's version starts.
pub fn major_minor(text: &str) -> Option<(u32, u32)> {
    let (ma, mi) = text.trim().split_once('.')?;
    let num = |s: &str| {
        (!s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    Some((num(ma)?, num(mi)?))
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
    /// memory lost from 1.10 on). 1.5.1's nodes are 1.9.1's here.
    pub const HARDTANH_INPLACE_CLONES: TorchVersion = TorchVersion {
        major: 1,
        minor: 10,
    };

    pub fn parse(text: &str) -> Result<TorchVersion, ReleaseError> {
        let (major, minor) =
            major_minor(text).ok_or_else(|| ReleaseError::NotATorchVersion(text.to_string()))?;
        let v = TorchVersion { major, minor };
        if !(1..=2).contains(&major) {
            return Err(ReleaseError::TorchOutOfRange(v.to_string()));
        }
        Ok(v)
    }
}

/// A transformers release as `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TransformersVersion {
    pub major: u32,
    pub minor: u32,
}

impl TransformersVersion {
    pub fn parse(text: &str) -> Result<TransformersVersion, ReleaseError> {
        let (major, minor) = major_minor(text)
            .ok_or_else(|| ReleaseError::NotATransformersVersion(text.to_string()))?;
        let v = TransformersVersion { major, minor };
        if !(4..=5).contains(&major) {
            return Err(ReleaseError::TransformersOutOfRange(format!(
                "{major}.{minor}"
            )));
        }
        Ok(v)
    }
}

/// What the releases of a stack change in a step, as facts a builder reads (the default:
/// current releases).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackRules {
    /// Before PyTorch 1.11 `softmax` and `log_softmax` kept their input beside their output.
    pub softmax_saves_input: bool,
    /// Before PyTorch 1.10 the in-place `hardtanh_` kept its result, with no clone of its input.
    pub hardtanh_saves_result: bool,
    /// transformers 4.x's BERT and RoBERTa (4.16.2 to 4.57.3 alike, `BertModel.forward`) make an
    /// all-ones `attention_mask` when none is passed and turn it into the extended mask
    /// (`get_extended_attention_mask`: `[B, 1, 1, S]` in `self.dtype`, the parameters' dtype, so
    /// fp32 under autocast), which the eager attention adds to the scores: under fp16 or bf16
    /// autocast that promotes the scores, and what the softmax keeps, to fp32. SDPA (from 4.41)
    /// drops an all-ones mask (`_prepare_4d_attention_mask_for_sdpa`). 5.0's
    /// `create_bidirectional_mask` makes none.
    pub encoder_mask_always: bool,
}

impl StackRules {
    pub fn of(torch: Option<TorchVersion>, transformers: Option<TransformersVersion>) -> Self {
        let torch_before = |v| torch.is_some_and(|t| t < v);
        StackRules {
            softmax_saves_input: torch_before(TorchVersion::SOFTMAX_KEEPS_OUTPUT_ONLY),
            hardtanh_saves_result: torch_before(TorchVersion::HARDTANH_INPLACE_CLONES),
            encoder_mask_always: transformers.is_some_and(|t| t.major < 5),
        }
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

impl std::fmt::Display for TransformersVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Serialize for TransformersVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TransformersVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TransformersVersion, D::Error> {
        let text = String::deserialize(d)?;
        TransformersVersion::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_change_at_their_releases() {
        let v = |s| StackRules::of(Some(TorchVersion::parse(s).unwrap()), None);
        assert!(v("1.10").softmax_saves_input);
        assert!(v("1.5").softmax_saves_input);
        assert!(!v("1.11").softmax_saves_input);
        assert!(!v("2.5").softmax_saves_input);
        assert!(v("1.9").hardtanh_saves_result);
        assert!(v("1.5").hardtanh_saves_result);
        assert!(!v("1.10").hardtanh_saves_result);
        assert_eq!(v("2.5"), StackRules::default());
        let t = |s| StackRules::of(None, Some(TransformersVersion::parse(s).unwrap()));
        assert!(t("4.16").encoder_mask_always && t("4.57").encoder_mask_always);
        assert_eq!(t("5.0"), StackRules::default());
        assert!(TorchVersion::parse("1").is_err());
        assert!(TorchVersion::parse("3.0").is_err());
        assert!(TorchVersion::parse("1.x").is_err());
        assert!(TransformersVersion::parse("3.5").is_err());
        assert!(TransformersVersion::parse("4").is_err());
    }
}
