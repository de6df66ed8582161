//! The MLP activations of the language models (`transformers/activations.py` `ACT2FN`), as
//! ops: shared by the decoder layers and the experts of a mixture.

use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::ops::Act;

/// The MLP activation (`transformers/activations.py` `ACT2FN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `gelu_new`: the tanh approximation written as eight Python-level ops.
    GeluNew,
    /// `gelu` (erf) or `gelu_pytorch_tanh`: one fused `gelu` op saving its input.
    Gelu,
    Relu,
    Silu,
}

pub(crate) fn activation(
    g: &mut Graph,
    x: TensorId,
    a: Activation,
    cpu: bool,
) -> Result<TensorId, EstimateError> {
    match a {
        Activation::GeluNew => g.gelu_new(x, cpu),
        Activation::Gelu => g.act(x, Act::Gelu, false),
        Activation::Relu => g.act(x, Act::Relu, false),
        Activation::Silu => g.act(x, Act::Silu, false),
    }
}
