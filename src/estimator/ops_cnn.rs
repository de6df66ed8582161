//! Op constructors that the CNN presets need beyond `ops.rs`: in-place activations whose
//! backward needs the original input (autograd clones it first), in-place dropout, stochastic
//! depth (`torchvision.ops.StochasticDepth`), squeeze-and-excitation
//! (`torchvision.ops.misc.SqueezeExcitation`), ConvNeXt's layer scale and channels-last
//! `LayerNorm2d`, and permutes.
//!
//! What each op allocates and saves was read off PyTorch's autograd formulas
//! (`tools/autograd/derivatives.yaml`) and checked op by op with the reference harness's
//! dispatch tracker on the faked CUDA device.

use super::error::EstimateError;
use super::graph::{GradFlow, Graph, StorageKind, TensorId};
use super::ops::{Act, Conv};
use super::units::{Bytes, DType};

type R = Result<TensorId, EstimateError>;

impl Graph {
    fn cnn_err(&self, what: &str) -> EstimateError {
        EstimateError::Unsupported(format!("{}: {what}", self.name("")))
    }

    /// A new activation tensor that requires grad when any of `inputs` does.
    fn cnn_out(&mut self, shape: Vec<u64>, dtype: DType, inputs: &[TensorId]) -> R {
        let rg = self.requires_grad(inputs);
        self.alloc(shape, dtype, StorageKind::Activation, rg)
    }

    /// An activation module with `inplace=True` (`Conv2dNormActivation`'s default).
    ///
    /// ReLU, sigmoid and tanh differentiate through their result (`threshold_backward(grad,
    /// result, 0)`, `sigmoid_backward(grad, result)` in `derivatives.yaml`), so the in-place op
    /// allocates nothing. ReLU6 (`hardtanh_`, which has no in-place entry and so uses
    /// `hardtanh_backward(grad, self, ..)`), Hardswish, SiLU, GELU and Hardsigmoid differentiate
    /// through their input: the autograd kernel of an in-place op whose formula reads the
    /// original `self` first saves `self.clone()` (seen as `aten::clone` before `aten::hardtanh_`
    /// / `aten::hardswish_` in the trace), then overwrites the input's storage.
    pub fn act_inplace(&mut self, x: TensorId, a: Act) -> R {
        let needs_original = matches!(
            a,
            Act::Relu6 | Act::Hardswish | Act::Silu | Act::Gelu | Act::Hardsigmoid
        );
        if !needs_original || !self.t(x).requires_grad {
            return self.act(x, a, true);
        }
        let s = self.shape(x);
        // The clone is a plain tensor held by the node, outside the autograd graph.
        let orig = self.alloc(s.clone(), self.dtype(x), StorageKind::Activation, false)?;
        let mut op = self.op("clone", "");
        op.inputs = vec![x];
        op.outputs = vec![orig];
        self.record(op);
        let y = self.alias(x, s, true);
        let kind = match a {
            Act::Relu6 => "hardtanh_",
            Act::Hardswish => "hardswish_",
            Act::Silu => "silu_",
            Act::Gelu => "gelu_",
            _ => "hardsigmoid_",
        };
        let mut op = self.op(kind, "");
        op.flops = self.numel(x) as f64;
        op.inputs = vec![x];
        op.outputs = vec![y];
        op.saved = vec![orig];
        op.grads = vec![(x, GradFlow::Alloc)];
        self.record(op);
        Ok(y)
    }

    /// `nn.Dropout(p, inplace=True)` (`F.dropout(..., inplace=True)` → `aten::dropout_`): the
    /// composite kernel draws the mask with `empty_like` + `bernoulli_` + `div_` in the input's
    /// dtype (not the 1-byte mask of `native_dropout`) and multiplies in place; `mul_` saves the
    /// mask (`self: grad * other`). `p = 0` records nothing.
    pub fn dropout_inplace(&mut self, x: TensorId, p: f64) -> R {
        if p <= 0.0 || self.inference {
            return Ok(x);
        }
        let s = self.shape(x);
        let mask = self.alloc(s.clone(), self.dtype(x), StorageKind::Activation, false)?;
        let mut op = self.op("bernoulli_", "");
        op.outputs = vec![mask];
        self.record(op);
        let rg = self.t(x).requires_grad;
        let y = self.alias(x, s, rg);
        let mut op = self.op("dropout_", "");
        op.flops = self.numel(x) as f64;
        op.inputs = vec![x, mask];
        op.outputs = vec![y];
        op.saved = vec![mask];
        op.grads = self.grads_alloc(&[x]);
        self.record(op);
        Ok(y)
    }

    /// `torchvision.ops.stochastic_depth(x, p, "row")` in training: a noise tensor `[N, 1, .., 1]`
    /// in x's dtype (`torch.empty` + `bernoulli_` + `div_`), then `x * noise`, a new tensor that
    /// saves only the noise (the noise needs no gradient, so `x` is not kept for it).
    /// `p = 0` returns the input unchanged, as torchvision does.
    pub fn stochastic_depth(&mut self, x: TensorId, p: f64) -> R {
        if p <= 0.0 || self.inference {
            return Ok(x);
        }
        let s = self.shape(x);
        let mut ns = vec![1; s.len()];
        ns[0] = s[0];
        let noise = self.alloc(ns, self.dtype(x), StorageKind::Activation, false)?;
        let mut op = self.op("bernoulli_", "stochastic_depth");
        op.outputs = vec![noise];
        self.record(op);
        self.scoped("stochastic_depth", |g| g.mul(x, noise, false))
    }

    /// `torchvision.ops.misc.SqueezeExcitation`: `avgpool` (a 1×1 mean that saves nothing),
    /// `fc1` (1×1 conv with bias), `delta`, `fc2`, `sigma`, then `scale * input`, which saves both
    /// operands; its backward materialises `grad * input` at full size before reducing it to
    /// the scale's shape. `delta_inplace`: EfficientNet passes `SiLU(inplace=True)`,
    /// MobileNetV3 a plain `ReLU()`.
    pub fn squeeze_excitation(
        &mut self,
        leaf: &str,
        x: TensorId,
        squeeze: u64,
        delta: Act,
        delta_inplace: bool,
        sigma: Act,
    ) -> R {
        self.push(leaf);
        let r = (|| {
            let s = self.shape(x);
            let c = s[1];
            let p = self.scoped("avgpool", |g| g.adaptive_avg_pool2d(x, 1))?;
            let h = self.conv2d("fc1", p, Conv::new(c, squeeze, 1, 1, 0).bias(true))?;
            let h = self.scoped("activation", |g| {
                if delta_inplace {
                    g.act_inplace(h, delta)
                } else {
                    g.act(h, delta, false)
                }
            })?;
            let h = self.conv2d("fc2", h, Conv::new(squeeze, c, 1, 1, 0).bias(true))?;
            let scale = self.scoped("scale_activation", |g| g.act(h, sigma, false))?;
            self.mul(x, scale, false)
        })();
        self.pop();
        r
    }

    /// ConvNeXt's layer scale: `gamma * x` with a `[C, 1, 1]` parameter. Both operands are saved
    /// (`mul`: `self: grad * other`, `other: grad * self`); gamma's gradient first materialises
    /// `grad * x` at full size, then `sum_to_size`. Type promotion follows the operands, so under
    /// autocast an fp32 gamma times a bf16 `x` gives an fp32 result (mul is on no autocast list).
    pub fn layer_scale(&mut self, leaf: &str, x: TensorId) -> R {
        self.push(leaf);
        let r = (|| {
            let s = self.shape(x);
            if s.len() != 4 {
                return Err(self.cnn_err("layer scale expects [N, C, H, W]"));
            }
            let gamma = self.param(vec![s[1], 1, 1])?;
            let dt = promote(self.dtype(x), self.dtype(gamma));
            let y = self.cnn_out(s.clone(), dt, &[x, gamma])?;
            let mut op = self.op("mul", "");
            op.flops = self.numel(x) as f64;
            op.inputs = vec![gamma, x];
            op.outputs = vec![y];
            op.saved = vec![gamma, x];
            op.grads = self.grads_alloc(&[gamma, x]);
            // `MulBackward0` computes both products at the result dtype before the engine
            // reduces gamma's (`sum_to_size`) and casts x's to x's dtype (`validate_outputs`):
            // at its peak the node holds two full result-dtype products. Counted here as the
            // part beyond the cast gradient of x that outlives the node.
            let full = self.bytes(y);
            op.bwd_scratch = if self.dtype(x) == dt {
                full
            } else {
                Bytes(2 * full.0).saturating_sub(self.bytes(x))
            };
            self.record(op);
            Ok(y)
        })();
        self.pop();
        r
    }

    /// `torch.permute`: a view with permuted sizes (no memory); the gradient is permuted back.
    pub fn permute(&mut self, x: TensorId, dims: &[usize]) -> R {
        let s = self.shape(x);
        let mut seen = vec![false; s.len()];
        if dims.len() != s.len()
            || dims
                .iter()
                .any(|&d| d >= s.len() || std::mem::replace(&mut seen[d], true))
        {
            return Err(self.cnn_err(&format!("permute {dims:?} of a {}-d tensor", s.len())));
        }
        let shape = dims.iter().map(|&d| s[d]).collect();
        let rg = self.t(x).requires_grad;
        let y = self.alias(x, shape, rg);
        let mut op = self.op("permute", "");
        op.inputs = vec![x];
        op.outputs = vec![y];
        op.grads = if rg {
            vec![(x, GradFlow::Alias)]
        } else {
            vec![]
        };
        self.record(op);
        Ok(y)
    }

    /// `torchvision.models.convnext.LayerNorm2d`: `permute(0, 2, 3, 1)`, `F.layer_norm` over
    /// channels, `permute(0, 3, 1, 2)`. `native_layer_norm` saves its (non-contiguous) input, so
    /// the NCHW tensor stays alive; its own contiguous copy happens inside the kernel.
    pub fn layer_norm_2d(&mut self, leaf: &str, x: TensorId) -> R {
        let h = self.permute(x, &[0, 2, 3, 1])?;
        let h = self.layer_norm(leaf, h, true)?;
        self.permute(h, &[0, 3, 1, 2])
    }
}

/// Result dtype of a binary op between two float tensors (`torch.result_type`): the wider one;
/// bf16 with fp16 gives fp32.
fn promote(a: DType, b: DType) -> DType {
    match (a, b) {
        _ if a == b => a,
        _ if a.bits() != b.bits() => {
            if a.bits() > b.bits() {
                a
            } else {
                b
            }
        }
        _ => DType::F32,
    }
}
