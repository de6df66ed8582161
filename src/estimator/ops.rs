//! One constructor per op kind. Each appends a plain record of what the op allocates, what
//! autograd saves for backward (dtype-exact, as in PyTorch's `tools/autograd/derivatives.yaml`
//! and the CUDA kernels' outputs) and its FLOPs, and returns the output tensor.
//!
//! Autocast follows `aten/src/ATen/autocast_mode.cpp` (CUDA): convolutions, linear layers,
//! matmuls and SDPA run in the low-precision dtype ("lower_precision_fp" list); layer norm,
//! softmax, log-softmax and the losses run in fp32 ("fp32" list); everything else runs in its
//! input's dtype. Weight casts are cached for the whole autocast region.

use super::error::EstimateError;
use super::graph::{GradFlow, Graph, StorageKind, TensorId};
use super::units::{Bytes, DType};

type R = Result<TensorId, EstimateError>;

/// Elementwise activations: what each saves for its backward (`derivatives.yaml`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// `threshold_backward(grad, result)`: saves its output.
    Relu,
    /// `hardtanh_backward(grad, self)`: ReLU6 saves its input (in place: a clone of it).
    Relu6,
    /// Saves its input.
    Gelu,
    /// Saves its input.
    Silu,
    /// Saves its input.
    Hardswish,
    /// Saves its input.
    Hardsigmoid,
    /// Saves its output.
    Sigmoid,
    /// Saves its output.
    Tanh,
}

impl Act {
    fn saves_output(self) -> bool {
        matches!(self, Act::Relu | Act::Sigmoid | Act::Tanh)
    }
    fn kind(self) -> &'static str {
        match self {
            Act::Relu => "relu",
            Act::Relu6 => "relu6",
            Act::Gelu => "gelu",
            Act::Silu => "silu",
            Act::Hardswish => "hardswish",
            Act::Hardsigmoid => "hardsigmoid",
            Act::Sigmoid => "sigmoid",
            Act::Tanh => "tanh",
        }
    }
}

/// Geometry of a 2-D convolution.
#[derive(Clone, Copy, Debug)]
pub struct Conv {
    pub cin: u64,
    pub cout: u64,
    pub k: u64,
    pub stride: u64,
    pub pad: u64,
    pub dilation: u64,
    pub groups: u64,
    pub bias: bool,
}

impl Conv {
    pub fn new(cin: u64, cout: u64, k: u64, stride: u64, pad: u64) -> Self {
        Conv {
            cin,
            cout,
            k,
            stride,
            pad,
            dilation: 1,
            groups: 1,
            bias: false,
        }
    }
    pub fn groups(mut self, g: u64) -> Self {
        self.groups = g;
        self
    }
    pub fn bias(mut self, b: bool) -> Self {
        self.bias = b;
        self
    }
    pub fn dilation(mut self, d: u64) -> Self {
        self.dilation = d;
        self
    }
}

fn conv_out(size: u64, c: &Conv) -> Option<u64> {
    let span = c.dilation * (c.k - 1) + 1;
    (size + 2 * c.pad)
        .checked_sub(span)
        .map(|v| v / c.stride + 1)
}

impl Graph {
    fn bad_shape(&self, what: &str) -> EstimateError {
        EstimateError::Unsupported(format!("{}: {what}", self.name("")))
    }

    // ---------------------------------------------------------------- autocast casts

    /// `aten::_to_copy`: a new tensor in `dtype`; its backward casts the gradient back (new tensor).
    pub fn cast(&mut self, x: TensorId, dtype: DType) -> R {
        if self.dtype(x) == dtype {
            return Ok(x);
        }
        let rg = self.t(x).requires_grad;
        let y = self.alloc(self.shape(x), dtype, StorageKind::Activation, rg)?;
        self.record_simple("to_copy", vec![x], vec![y], vec![], 0.0);
        Ok(y)
    }

    /// Casts for an op on autocast's low-precision list. Weights (leaf params) are cast once per
    /// autocast region and the copy is cached; only leaves that require grad are cached
    /// (`cached_cast` in `autocast_mode.cpp`), so a frozen weight is cast again at every use.
    pub fn lowp(&mut self, x: TensorId) -> R {
        let Some(dt) = self.precision.autocast() else {
            return Ok(x);
        };
        if !self.dtype(x).is_float() || self.dtype(x) == dt {
            return Ok(x);
        }
        if self.t(x).is_param && self.t(x).requires_grad {
            if let Some(&(_, c)) = self.cast_cache.iter().find(|(p, _)| *p == x) {
                return Ok(c);
            }
            let c = self.cast(x, dt)?;
            self.cast_cache.push((x, c));
            return Ok(c);
        }
        self.cast(x, dt)
    }

    /// Casts for an op on autocast's fp32 list.
    pub fn fp32(&mut self, x: TensorId) -> R {
        if self.precision.autocast().is_some()
            && self.dtype(x).is_float()
            && self.dtype(x) != DType::F32
        {
            self.cast(x, DType::F32)
        } else {
            Ok(x)
        }
    }

    fn out_like(&mut self, shape: Vec<u64>, dtype: DType, inputs: &[TensorId]) -> R {
        let rg = self.requires_grad(inputs);
        self.alloc(shape, dtype, StorageKind::Activation, rg)
    }

    /// Records an op that reads `inputs`, creates `outputs`, saves `saved` and whose backward
    /// allocates a gradient for each input that requires one: the shape most op kinds share.
    pub fn record_simple(
        &mut self,
        kind: &'static str,
        inputs: Vec<TensorId>,
        outputs: Vec<TensorId>,
        saved: Vec<TensorId>,
        flops: f64,
    ) {
        let mut op = self.op(kind, "");
        op.flops = flops;
        op.grads = self.grads_alloc(&inputs);
        op.inputs = inputs;
        op.outputs = outputs;
        op.saved = saved;
        self.record(op);
    }

    /// Records a one-input op producing `y` that saves `saved` and allocates its input's gradient
    /// (the common shape of pooling, normalisation-free elementwise and reduction ops).
    pub fn record_unary(
        &mut self,
        kind: &'static str,
        x: TensorId,
        y: TensorId,
        saved: Vec<TensorId>,
        flops: f64,
    ) {
        self.record_simple(kind, vec![x], vec![y], saved, flops);
    }

    // ---------------------------------------------------------------- convolutions

    /// `nn.Conv2d` (cuDNN `convolution`): saves input and weight; backward allocates the input,
    /// weight and bias gradients (`convolution_backward`).
    pub fn conv2d(&mut self, leaf: &str, x: TensorId, c: Conv) -> R {
        self.push(leaf);
        let r = self.conv2d_inner(x, c);
        self.pop();
        r
    }

    fn conv2d_inner(&mut self, x: TensorId, c: Conv) -> R {
        let s = self.shape(x);
        if s.len() != 4 || s[1] != c.cin {
            return Err(self.bad_shape(&format!("conv2d expects [N,{},H,W], got {:?}", c.cin, s)));
        }
        let w = self.param(vec![c.cout, c.cin / c.groups, c.k, c.k])?;
        let b = if c.bias {
            Some(self.param(vec![c.cout])?)
        } else {
            None
        };
        let (ho, wo) = match (conv_out(s[2], &c), conv_out(s[3], &c)) {
            (Some(h), Some(w)) if h > 0 && w > 0 => (h, w),
            _ => {
                return Err(EstimateError::Unsupported(format!(
                    "{}: the feature map shrinks to nothing; raise the resolution",
                    self.name("")
                )))
            }
        };
        let xc = self.lowp(x)?;
        let wc = self.lowp(w)?;
        let bc = match b {
            Some(b) => Some(self.lowp(b)?),
            None => None,
        };
        let mut ins = vec![xc, wc];
        ins.extend(bc);
        let y = self.out_like(vec![s[0], c.cout, ho, wo], self.dtype(xc), &ins)?;
        self.record_simple(
            "conv2d",
            ins.clone(),
            vec![y],
            vec![xc, wc],
            2.0 * (s[0] * c.cout * ho * wo) as f64 * ((c.cin / c.groups) * c.k * c.k) as f64,
        );
        Ok(y)
    }

    /// `nn.ConvTranspose2d(k, stride)` with `output_padding = 0`: the same saving as conv2d.
    pub fn conv_transpose2d(&mut self, leaf: &str, x: TensorId, c: Conv) -> R {
        self.push(leaf);
        let r = (|| {
            let s = self.shape(x);
            if s.len() != 4 || s[1] != c.cin {
                return Err(self.bad_shape("conv_transpose2d input"));
            }
            let w = self.param(vec![c.cin, c.cout / c.groups, c.k, c.k])?;
            let b = if c.bias {
                Some(self.param(vec![c.cout])?)
            } else {
                None
            };
            let o =
                |n: u64| ((n - 1) * c.stride + c.dilation * (c.k - 1) + 1).checked_sub(2 * c.pad);
            let (ho, wo) = match (o(s[2]), o(s[3])) {
                (Some(h), Some(w)) if h > 0 && w > 0 => (h, w),
                _ => return Err(self.bad_shape("conv_transpose2d output is empty")),
            };
            let xc = self.lowp(x)?;
            let wc = self.lowp(w)?;
            let mut ins = vec![xc, wc];
            if let Some(b) = b {
                ins.push(self.lowp(b)?);
            }
            let y = self.out_like(vec![s[0], c.cout, ho, wo], self.dtype(xc), &ins)?;
            self.record_simple(
                "conv_transpose2d",
                ins.clone(),
                vec![y],
                vec![xc, wc],
                2.0 * (s[0] * c.cin * s[2] * s[3]) as f64
                    * ((c.cout / c.groups) * c.k * c.k) as f64,
            );
            Ok(y)
        })();
        self.pop();
        r
    }

    // ---------------------------------------------------------------- normalisation

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

    // ---------------------------------------------------------------- elementwise

    /// An activation, in place (`inplace=True` modules) or not.
    pub fn act(&mut self, x: TensorId, a: Act, inplace: bool) -> R {
        // In place, an activation whose backward reads its input first saves a clone of it.
        if inplace && !a.saves_output() && self.t(x).requires_grad {
            return self.act_inplace(x, a);
        }
        let s = self.shape(x);
        let rg = self.t(x).requires_grad;
        let y = if inplace {
            self.alias(x, s, rg)
        } else {
            self.out_like(s, self.dtype(x), &[x])?
        };
        self.record_simple(
            a.kind(),
            vec![x],
            vec![y],
            vec![if a.saves_output() { y } else { x }],
            self.numel(x) as f64,
        );
        Ok(y)
    }

    /// `a + b` (same shapes), or `a += b` in place. Saves nothing; the gradient passes through
    /// to both operands unchanged.
    pub fn add(&mut self, a: TensorId, b: TensorId, inplace: bool) -> R {
        let s = self.shape(a);
        let rg = self.requires_grad(&[a, b]);
        let y = if inplace {
            self.alias(a, s, rg)
        } else {
            self.out_like(s, self.dtype(a), &[a, b])?
        };
        let mut op = self.op("add", "");
        op.flops = self.numel(a) as f64;
        op.inputs = vec![a, b];
        op.outputs = vec![y];
        op.grads = [a, b]
            .iter()
            .filter(|&&t| self.t(t).requires_grad)
            .map(|&t| (t, GradFlow::Alias))
            .collect();
        self.record(op);
        Ok(y)
    }

    /// `a * b` with `b` broadcast over `a` (or the same shape). Saves both operands (each one's
    /// gradient needs the other); the gradient of a broadcast operand is reduced (a new, small tensor).
    pub fn mul(&mut self, a: TensorId, b: TensorId, inplace: bool) -> R {
        let s = self.shape(a);
        let dt = self.dtype(a);
        let rg = self.requires_grad(&[a, b]);
        let y = if inplace {
            self.alias(a, s, rg)
        } else {
            self.out_like(s, dt, &[a, b])?
        };
        let mut op = self.op("mul", "");
        op.flops = self.numel(a) as f64;
        op.inputs = vec![a, b];
        op.outputs = vec![y];
        let mut saved = Vec::new();
        if self.t(b).requires_grad {
            saved.push(a);
        }
        if self.t(a).requires_grad {
            saved.push(b);
        }
        op.saved = saved;
        op.grads = self.grads_alloc(&[a, b]);
        // Reducing a broadcast gradient first materialises the full-size product.
        if self.t(b).requires_grad && self.numel(b) < self.numel(a) {
            op.bwd_scratch = self.bytes(a);
        }
        self.record(op);
        Ok(y)
    }

    /// A reshape/flatten/transpose that PyTorch serves as a view: no memory, gradient passes through.
    pub fn view(&mut self, x: TensorId, shape: Vec<u64>) -> R {
        let rg = self.t(x).requires_grad;
        let n: u64 = shape.iter().product();
        if n != self.numel(x) {
            return Err(self.bad_shape(&format!("view {:?} -> {:?}", self.shape(x), shape)));
        }
        let y = self.alias(x, shape, rg);
        let mut op = self.op("view", "");
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

    /// `split`/`chunk`/`narrow` into views of `x` with the given shapes (no memory). Backward
    /// (`split_backward`) concatenates the pieces' gradients into one new full-size gradient.
    pub fn split(
        &mut self,
        x: TensorId,
        shapes: Vec<Vec<u64>>,
    ) -> Result<Vec<TensorId>, EstimateError> {
        let rg = self.t(x).requires_grad;
        let total: u64 = shapes.iter().map(|s| s.iter().product::<u64>()).sum();
        if total > self.numel(x) {
            return Err(self.bad_shape(&format!("split of {:?} into {:?}", self.shape(x), shapes)));
        }
        let outs: Vec<TensorId> = shapes.into_iter().map(|s| self.alias(x, s, rg)).collect();
        self.record_simple("split", vec![x], outs.clone(), vec![], 0.0);
        Ok(outs)
    }

    /// A materialising copy (`.contiguous()` after a transpose, `permute(...).reshape`).
    pub fn contiguous(&mut self, x: TensorId, shape: Vec<u64>) -> R {
        let y = self.out_like(shape, self.dtype(x), &[x])?;
        let mut op = self.op("clone", "");
        op.inputs = vec![x];
        op.outputs = vec![y];
        op.grads = self
            .t(x)
            .requires_grad
            .then_some((x, GradFlow::Alias))
            .into_iter()
            .collect();
        self.record(op);
        Ok(y)
    }

    /// `nn.Dropout(p)` in training on CUDA (`native_dropout`): output plus a 1-byte mask, saves the
    /// mask. `p = 0` and eval mode are the identity and record nothing.
    pub fn dropout(&mut self, x: TensorId, p: f64) -> R {
        if p <= 0.0 || self.inference {
            return Ok(x);
        }
        let s = self.shape(x);
        let y = self.out_like(s.clone(), self.dtype(x), &[x])?;
        let mask = self.alloc(s, DType::Bool, StorageKind::Activation, false)?;
        self.record_simple(
            "dropout",
            vec![x],
            vec![y, mask],
            vec![mask],
            self.numel(x) as f64,
        );
        Ok(y)
    }

    // ---------------------------------------------------------------- pooling

    /// `max_pool2d_with_indices`: output plus int64 indices; saves input and indices.
    pub fn max_pool2d(&mut self, x: TensorId, k: u64, stride: u64, pad: u64) -> R {
        let s = self.shape(x);
        let c = Conv::new(s[1], s[1], k, stride, pad);
        let (ho, wo) = match (conv_out(s[2], &c), conv_out(s[3], &c)) {
            (Some(h), Some(w)) if h > 0 && w > 0 => (h, w),
            _ => {
                return Err(EstimateError::Unsupported(format!(
                    "{}: max-pool input too small; raise the resolution",
                    self.name("")
                )))
            }
        };
        let y = self.out_like(vec![s[0], s[1], ho, wo], self.dtype(x), &[x])?;
        let idx = self.alloc(
            vec![s[0], s[1], ho, wo],
            DType::I64,
            StorageKind::Activation,
            false,
        )?;
        self.record_simple(
            "max_pool2d",
            vec![x],
            vec![y, idx],
            vec![x, idx],
            (s[0] * s[1] * ho * wo * k * k) as f64,
        );
        Ok(y)
    }

    /// `adaptive_avg_pool2d` to `out`×`out`: saves its input (`_adaptive_avg_pool2d_backward(grad, self)`).
    /// Output 1×1 on a CUDA tensor runs as `mean(dim=(-2,-1), keepdim)`, which saves nothing.
    pub fn adaptive_avg_pool2d(&mut self, x: TensorId, out: u64) -> R {
        let s = self.shape(x);
        let y = self.out_like(vec![s[0], s[1], out, out], self.dtype(x), &[x])?;
        let saved = if out != 1 { vec![x] } else { vec![] };
        self.record_unary("adaptive_avg_pool2d", x, y, saved, self.numel(x) as f64);
        Ok(y)
    }

    /// `avg_pool2d(k, stride)`: saves its input.
    pub fn avg_pool2d(&mut self, x: TensorId, k: u64, stride: u64) -> R {
        let s = self.shape(x);
        let c = Conv::new(s[1], s[1], k, stride, 0);
        let (ho, wo) = (
            conv_out(s[2], &c).unwrap_or(0),
            conv_out(s[3], &c).unwrap_or(0),
        );
        if ho == 0 || wo == 0 {
            return Err(self.bad_shape("avg_pool2d input too small"));
        }
        let y = self.out_like(vec![s[0], s[1], ho, wo], self.dtype(x), &[x])?;
        self.record_unary("avg_pool2d", x, y, vec![x], self.numel(x) as f64);
        Ok(y)
    }

    /// `F.interpolate(x, scale_factor=k, mode="nearest" | "bilinear")` (`upsample_nearest2d`,
    /// `upsample_bilinear2d`): a new `[N, C, kH, kW]` tensor. Both backward kernels need only the
    /// sizes (`derivatives.yaml`: `upsample_*_backward(grad, output_size, input_size, ...)`), so
    /// nothing is saved. On CUDA autocast's fp32 list (`autocast_mode.cpp`).
    pub fn upsample2d(&mut self, x: TensorId, k: u64, bilinear: bool) -> R {
        let s = self.shape(x);
        if s.len() != 4 || k == 0 {
            return Err(self.bad_shape("upsample2d expects [N,C,H,W] and a positive scale"));
        }
        let xc = self.fp32(x)?;
        let y = self.out_like(vec![s[0], s[1], s[2] * k, s[3] * k], self.dtype(xc), &[xc])?;
        let flops = if bilinear { 4.0 } else { 1.0 } * self.numel(y) as f64;
        self.record_unary(
            if bilinear {
                "upsample_bilinear2d"
            } else {
                "upsample_nearest2d"
            },
            xc,
            y,
            vec![],
            flops,
        );
        Ok(y)
    }

    /// `torch.cat` along channels: a new tensor; saves nothing (only sizes); gradients are
    /// narrowed views of the output gradient.
    pub fn cat(&mut self, xs: &[TensorId], dim: usize) -> R {
        let mut s = self.shape(xs[0]);
        s[dim] = xs.iter().map(|&x| self.shape(x)[dim]).sum();
        let dt = self.dtype(xs[0]);
        let y = self.out_like(s, dt, xs)?;
        let mut op = self.op("cat", "");
        op.inputs = xs.to_vec();
        op.outputs = vec![y];
        op.grads = xs
            .iter()
            .filter(|&&t| self.t(t).requires_grad)
            .map(|&t| (t, GradFlow::Alias))
            .collect();
        self.record(op);
        Ok(y)
    }

    // ---------------------------------------------------------------- dense layers

    /// `nn.Linear` (`addmm`/`mm` on the flattened input, autocast low-precision list): saves the
    /// input and the (cast) weight.
    pub fn linear(&mut self, leaf: &str, x: TensorId, fin: u64, fout: u64, bias: bool) -> R {
        self.push(leaf);
        let r = (|| {
            let w = self.param(vec![fout, fin])?;
            let b = if bias {
                Some(self.param(vec![fout])?)
            } else {
                None
            };
            self.linear_with(x, w, b)
        })();
        self.pop();
        r
    }

    /// A linear map with existing weights (`[out, in]`, e.g. a tied embedding).
    pub fn linear_with(&mut self, x: TensorId, w: TensorId, b: Option<TensorId>) -> R {
        let mut s = self.shape(x);
        let ws = self.shape(w);
        if s.last() != Some(&ws[1]) {
            return Err(self.bad_shape(&format!("linear expects last dim {}, got {:?}", ws[1], s)));
        }
        let xc = self.lowp(x)?;
        let wc = self.lowp(w)?;
        let mut ins = vec![xc, wc];
        if let Some(b) = b {
            ins.push(self.lowp(b)?);
        }
        let rows: u64 = s[..s.len() - 1].iter().product();
        *s.last_mut().unwrap() = ws[0];
        let y = self.out_like(s, self.dtype(xc), &ins)?;
        let mut op = self.op("linear", "");
        op.flops = 2.0 * rows as f64 * (ws[0] * ws[1]) as f64;
        op.inputs = ins.clone();
        op.outputs = vec![y];
        op.saved = [xc, wc].into_iter().filter(|_| true).collect();
        // mm saves each operand only if the other one needs a gradient.
        if !self.t(wc).requires_grad {
            op.saved.retain(|&t| t != xc);
        }
        if !self.t(xc).requires_grad {
            op.saved.retain(|&t| t != wc);
        }
        op.grads = self.grads_alloc(&ins);
        self.record(op);
        Ok(y)
    }

    /// `nn.Embedding`: gathers rows; saves the indices (already alive); backward
    /// (`embedding_dense_backward`) allocates a full-size weight gradient.
    pub fn embedding(
        &mut self,
        leaf: &str,
        ids: TensorId,
        vocab: u64,
        dim: u64,
    ) -> Result<(TensorId, TensorId), EstimateError> {
        self.push(leaf);
        let r = (|| {
            let w = self.param(vec![vocab, dim])?;
            let y = self.embedding_with(ids, w)?;
            Ok((y, w))
        })();
        self.pop();
        r
    }

    pub fn embedding_with(&mut self, ids: TensorId, w: TensorId) -> R {
        let mut s = self.shape(ids);
        s.push(self.shape(w)[1]);
        let y = self.out_like(s, self.dtype(w), &[w])?;
        let mut op = self.op("embedding", "");
        op.inputs = vec![ids, w];
        op.outputs = vec![y];
        op.saved = vec![ids];
        op.grads = self.grads_alloc(&[w]);
        self.record(op);
        Ok(y)
    }

    /// Batched matrix product `a @ b` (`[.., m, k] @ [.., k, n]`, autocast low-precision list):
    /// saves both operands.
    pub fn matmul(&mut self, a: TensorId, b: TensorId) -> R {
        let sa = self.shape(a);
        let sb = self.shape(b);
        let (m, k, n) = (sa[sa.len() - 2], sa[sa.len() - 1], sb[sb.len() - 1]);
        if sb[sb.len() - 2] != k {
            return Err(self.bad_shape(&format!("matmul {:?} @ {:?}", sa, sb)));
        }
        let ac = self.lowp(a)?;
        let bc = self.lowp(b)?;
        let mut s = sa.clone();
        *s.last_mut().unwrap() = n;
        let batch: u64 = sa[..sa.len() - 2].iter().product();
        let y = self.out_like(s, self.dtype(ac), &[ac, bc])?;
        let mut op = self.op("matmul", "");
        // In f64: the product of four dimensions can exceed 64 bits even when every tensor fits.
        op.flops = 2.0 * batch as f64 * (m * k) as f64 * n as f64;
        op.inputs = vec![ac, bc];
        op.outputs = vec![y];
        op.saved = vec![ac, bc];
        op.grads = self.grads_alloc(&[ac, bc]);
        self.record(op);
        Ok(y)
    }

    /// `softmax` over the last dimension (autocast fp32 list): saves its output.
    pub fn softmax(&mut self, x: TensorId) -> R {
        let xc = self.fp32(x)?;
        let y = self.out_like(self.shape(xc), self.dtype(xc), &[xc])?;
        self.record_unary("softmax", xc, y, vec![y], 5.0 * self.numel(x) as f64);
        Ok(y)
    }

    /// `F.cross_entropy(logits [N, C], target [N])` with mean reduction: `log_softmax` (its output
    /// saved), then `nll_loss` (a scalar and `total_weight`; saves its input, the target and
    /// `total_weight`, `derivatives.yaml` `nll_loss_forward`). `cross_entropy_loss` passes the
    /// logits' dtype to `log_softmax` explicitly, which autocast's `fp32_set_opt_dtype` policy
    /// leaves alone, so log-probabilities stay in the logits' dtype; `nll_loss` is on the fp32
    /// list and casts them (traced under bf16 autocast: `_log_softmax` bf16 → `_to_copy` fp32 →
    /// `nll_loss_forward`). Returns the loss.
    pub fn cross_entropy(&mut self, logits: TensorId, target: TensorId) -> R {
        // Inference: no labels, no loss; the caller holds the logits.
        if self.inference {
            self.keep(logits);
            return Ok(logits);
        }
        let x = logits;
        let ls = self.out_like(self.shape(x), self.dtype(x), &[x])?;
        let mut op = self.op("log_softmax", "loss");
        op.flops = 5.0 * self.numel(x) as f64;
        op.inputs = vec![x];
        op.outputs = vec![ls];
        op.saved = vec![ls];
        op.grads = self.grads_alloc(&[x]);
        self.record(op);
        let lsc = self.fp32(ls)?;
        let loss = self.out_like(vec![], self.dtype(lsc), &[lsc])?;
        let tw = self.alloc(vec![], self.dtype(lsc), StorageKind::Activation, false)?;
        let mut op = self.op("nll_loss", "loss");
        op.inputs = vec![lsc, target];
        op.outputs = vec![loss, tw];
        op.saved = vec![lsc, target, tw];
        op.grads = self.grads_alloc(&[lsc]);
        self.record(op);
        self.keep(loss);
        Ok(loss)
    }

    /// Extra scratch inside the op just recorded (forward and backward).
    pub fn add_scratch(&mut self, fwd: Bytes, bwd: Bytes) {
        if let Some(op) = self.ops.last_mut() {
            op.fwd_scratch += fwd;
            op.bwd_scratch += bwd;
        }
    }
}
