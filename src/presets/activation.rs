//! The MLP activations of the language models (`transformers/activations.py` `ACT2FN`), as
//! ops: shared by the decoder layers and the experts of a mixture.

use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::ops::{Act, Pw};

/// The MLP activation (`transformers/activations.py` `ACT2FN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `gelu_new`: the tanh approximation written as eight Python-level ops.
    GeluNew,
    /// `gelu` (erf) or `gelu_pytorch_tanh`: one fused `gelu` op saving its input.
    Gelu,
    Relu,
    Silu,
    /// `quick_gelu` (`QuickGELUActivation`, CLIP's): `input * torch.sigmoid(1.702 * input)`,
    /// three ops: the scaled copy (saves nothing), the sigmoid (saves its output) and the
    /// product (saves both operands).
    QuickGelu,
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
        Activation::QuickGelu => {
            let dt = g.dtype(x);
            let scaled = g.pointwise(
                "mul",
                x,
                dt,
                Pw {
                    flops: 1.0,
                    ..Pw::default()
                },
            )?;
            let sig = g.act(scaled, Act::Sigmoid, false)?;
            g.mul_bc(x, sig)
        }
    }
}
