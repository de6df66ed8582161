//! Normalisation layers: batch norm, layer norm (CUDA and CPU statistics, and ConvNeXt's
//! channels-last `LayerNorm2d`) and LLaMA's RMSNorm.

use super::{Pw, R};
use crate::estimator::graph::{Graph, StorageKind, TensorId};
use crate::estimator::units::DType;

/// Where an RMSNorm applies its weight: LLaMA multiplies the normalised tensor cast back to the
/// input dtype; OLMo 2 multiplies in fp32 and casts the product; Gemma multiplies by `1 + w` in
/// fp32 and casts the product.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RmsWeight {
    Llama,
    Olmo2,
    Gemma,
}

impl Graph {
    /// `nn.BatchNorm2d` in training (cuDNN `cudnn_batch_norm`): the output in the input's dtype plus
    /// fp32 `save_mean` and `save_invstd` of C elements; saves input, weight, running stats and the
    /// two statistics. Not on any autocast list.
    pub fn batch_norm(&mut self, leaf: &str, x: TensorId) -> R {
        self.push(leaf);
        let r = (|| {
            let s = self.shape(x);
            let c = s[1];
            let w = self.param(vec![c])?;
            let b = self.param(vec![c])?;
            let pdt = self.precision.param_dtype();
            let rm = self.buffer(vec![c], pdt)?;
            let rv = self.buffer(vec![c], pdt)?;
            // num_batches_tracked: one int64.
            self.buffer(vec![1], DType::I64)?;
            let ins = vec![x, w, b];
            let y = self.out_like(s.clone(), self.dtype(x), &ins)?;
            if self.inference {
                // Eval mode normalises with the running statistics: the output alone.
                let mut op = self.op("batch_norm", "");
                op.flops = 2.0 * self.numel(x) as f64;
                op.inputs = vec![x, w, b, rm, rv];
                op.outputs = vec![y];
                self.record(op);
                return Ok(y);
            }
            let mean = self.alloc(vec![c], DType::F32, StorageKind::Activation, false)?;
            let invstd = self.alloc(vec![c], DType::F32, StorageKind::Activation, false)?;
            let mut op = self.op("batch_norm", "");
            op.flops = 8.0 * self.numel(x) as f64;
            op.inputs = vec![x, w, b, rm, rv];
            op.outputs = vec![y, mean, invstd];
            op.saved = vec![x, w, rm, rv, mean, invstd];
            op.grads = self.grads_alloc(&ins);
            self.record(op);
            Ok(y)
        })();
        self.pop();
        r
    }

    /// `nn.LayerNorm` over the last dimension (`native_layer_norm`, autocast fp32 list): output,
    /// fp32 mean and rstd per row; saves input, weight, bias, mean and rstd.
    pub fn layer_norm(&mut self, leaf: &str, x: TensorId, bias: bool) -> R {
        self.layer_norm_on(leaf, x, bias, false)
    }

    /// [`Graph::layer_norm`] on the chosen device. The CPU kernel (`layer_norm_cpu`,
    /// `param_scalar_type`) keeps mean and rstd in the input's dtype unless input and weight
    /// dtypes differ (traced: bf16 statistics for a pure-bf16 model on the CPU); CUDA's are fp32.
    pub fn layer_norm_on(&mut self, leaf: &str, x: TensorId, bias: bool, cpu: bool) -> R {
        self.push(leaf);
        let r = (|| {
            let s = self.shape(x);
            let h = *s
                .last()
                .ok_or_else(|| self.bad_shape("layer_norm on a scalar"))?;
            let w = self.param(vec![h])?;
            let b = if bias {
                Some(self.param(vec![h])?)
            } else {
                None
            };
            let xc = self.fp32(x)?;
            let mut ins = vec![xc, w];
            ins.extend(b);
            let y = self.out_like(s.clone(), self.dtype(xc), &ins)?;
            let rows: Vec<u64> = s[..s.len() - 1].to_vec();
            let mut stat_shape = rows.clone();
            stat_shape.push(1);
            let sdt = if cpu && self.dtype(xc) == self.dtype(w) {
                self.dtype(xc)
            } else {
                DType::F32
            };
            let mean = self.alloc(stat_shape.clone(), sdt, StorageKind::Activation, false)?;
            let rstd = self.alloc(stat_shape, sdt, StorageKind::Activation, false)?;
            let mut op = self.op("layer_norm", "");
            op.flops = 8.0 * self.numel(x) as f64;
            op.inputs = ins.clone();
            op.outputs = vec![y, mean, rstd];
            op.saved = ins.clone();
            op.saved.extend([mean, rstd]);
            op.grads = self.grads_alloc(&ins);
            self.record(op);
            Ok(y)
        })();
        self.pop();
        r
    }

    /// `torchvision.models.convnext.LayerNorm2d`: `permute(0, 2, 3, 1)`, `F.layer_norm` over
    /// channels, `permute(0, 3, 1, 2)`. `native_layer_norm` saves its (non-contiguous) input, so
    /// the NCHW tensor stays alive; its own contiguous copy happens inside the kernel.
    pub fn layer_norm_2d(&mut self, leaf: &str, x: TensorId) -> R {
        let h = self.permute(x, &[0, 2, 3, 1])?;
        let h = self.layer_norm(leaf, h, true)?;
        self.permute(h, &[0, 3, 1, 2])
    }

    /// `LlamaRMSNorm` (also Mistral/Qwen2): `x.to(fp32)`, `pow(2).mean(-1, keepdim)`,
    /// `x * rsqrt(var + eps)`, `.to(input_dtype)`, `weight * ·`. Saves the fp32 input (pow, mul),
    /// the rsqrt, the normalised fp32 tensor (or its low-precision cast) and the weight.
    pub fn rms_norm(&mut self, leaf: &str, x: TensorId) -> R {
        self.rms_norm_with(leaf, x, RmsWeight::Llama)
    }

    /// `Olmo2RMSNorm` (`models/olmo2/modeling_olmo2.py`): `(self.weight * x_normed).to(input_dtype)`,
    /// the weight applied in fp32 before the cast, so the product saves the fp32 normalised
    /// tensor.
    pub fn olmo2_rms_norm(&mut self, leaf: &str, x: TensorId) -> R {
        self.rms_norm_with(leaf, x, RmsWeight::Olmo2)
    }

    /// `Gemma2RMSNorm` / `Gemma3RMSNorm` (`models/gemma2/modeling_gemma2.py`): the same
    /// normalisation in fp32, then `output * (1.0 + self.weight.float())` in fp32 and
    /// `.type_as(x)` last. Unlike LLaMA's norm the product saves the fp32 normalised tensor
    /// (and the `[h]` sum `1 + w`), and the cast to the input dtype comes after the weight.
    pub fn gemma_rms_norm(&mut self, leaf: &str, x: TensorId) -> R {
        self.rms_norm_with(leaf, x, RmsWeight::Gemma)
    }

    fn rms_norm_with(&mut self, leaf: &str, x: TensorId, weight: RmsWeight) -> R {
        self.push(leaf);
        let r = (|| {
            let h = *self
                .shape(x)
                .last()
                .ok_or_else(|| self.bad_shape("rms_norm on a scalar"))?;
            let w = self.param(vec![h])?;
            let in_dt = self.dtype(x);
            let xf = self.cast(x, DType::F32)?;
            let sq = self.pointwise(
                "pow",
                xf,
                DType::F32,
                Pw {
                    save_input: true,
                    bwd_temps: 2,
                    flops: 1.0,
                    ..Pw::default()
                },
            )?;
            let var = self.mean_last(sq)?;
            let ve = self.pointwise(
                "add",
                var,
                DType::F32,
                Pw {
                    alias_grad: true,
                    flops: 1.0,
                    ..Pw::default()
                },
            )?;
            // `pow` and `rsqrt` are on autocast's fp32 list; their inputs are fp32 here already.
            let inv = self.pointwise(
                "rsqrt",
                ve,
                DType::F32,
                Pw {
                    save_output: true,
                    bwd_temps: 2,
                    flops: 1.0,
                    ..Pw::default()
                },
            )?;
            let n = self.mul_bc(xf, inv)?;
            // Without autograd the locals decide: `variance` and the normalised
            // `hidden_states` live until `forward` returns, through the weight's product and
            // the cast (`LlamaRMSNorm.forward`, `Olmo2RMSNorm.forward`, `GptOssRMSNorm.forward`).
            // Gemma's `_norm(x.float())` binds neither.
            let held = |g: &mut Self, y: TensorId| {
                if g.inference {
                    g.hold(&[var, n]);
                }
                Ok(y)
            };
            if weight == RmsWeight::Olmo2 {
                let y = self.mul_bc(w, n)?;
                let y = self.cast(y, in_dt)?;
                return held(self, y);
            }
            if weight == RmsWeight::Gemma {
                let wf = self.cast(w, DType::F32)?;
                let w1 = self.pointwise(
                    "add",
                    wf,
                    DType::F32,
                    Pw {
                        alias_grad: true,
                        flops: 1.0,
                        ..Pw::default()
                    },
                )?;
                let y = self.mul_bc(n, w1)?;
                return self.cast(y, in_dt);
            }
            let nc = self.cast(n, in_dt)?;
            let y = self.mul_bc(w, nc)?;
            held(self, y)
        })();
        self.pop();
        r
    }
}
