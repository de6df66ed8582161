//! Ops of the transformer language models (GPT-2, BERT, LLaMA/Mistral/Qwen2) at the granularity
//! of the aten ops transformers 5.24 dispatches on CUDA: pointwise ops with broadcasting and type
//! promotion, GPT-2's `Conv1D`, fused-QKV splits, grouped-query `repeat_kv`, the three fused SDPA
//! kernels and eager attention, RMSNorm, rotary embeddings, the Python `gelu_new`, the causal mask
//! and the causal-LM loss.
//!
//! What each op saves follows `tools/autograd/derivatives.yaml` (torch 2.15) and was checked op by
//! op against the oracle (`harness/tracker.py` with per-op logging) on a faked sm_90 device.

use super::error::EstimateError;
use super::graph::{GradFlow, Graph, StorageKind, TensorId};
use super::units::{Bytes, DType};

type R = Result<TensorId, EstimateError>;

/// `torch.result_type` of two floating tensors (neither a 0-dim scalar): the wider type wins,
/// so bf16 × fp32 gives fp32 (e.g. rotary `q * cos` under autocast, the RMSNorm weight product).
pub fn promote(a: DType, b: DType) -> DType {
    if a == b {
        a
    } else if a == DType::F32 || b == DType::F32 {
        DType::F32
    } else if a.is_float() {
        a
    } else {
        b
    }
}

/// Broadcast shape of two operands (right-aligned, as `TensorIterator` computes it).
fn broadcast(a: &[u64], b: &[u64]) -> Option<Vec<u64>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// The kernel `scaled_dot_product_attention` runs (torch 2.15,
/// `aten/src/ATen/native/transformers/{cuda,}/sdp_utils*.cpp`), as the oracle observed it
/// (`kernel_ops_seen` of the reference records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SdpaKernel {
    /// `_scaled_dot_product_efficient_attention` (CUTLASS): any dtype, any mask.
    Efficient,
    /// `_scaled_dot_product_flash_attention`: fp16/bf16, no mask, head dim ≤ 256.
    Flash,
    /// `_scaled_dot_product_cudnn_attention`: fp16/bf16, no dropout, head dim ≤ 128.
    Cudnn,
    /// CPU `_scaled_dot_product_flash_attention_for_cpu`: no dropout; takes a mask.
    FlashCpu,
    /// `_scaled_dot_product_attention_math`: the decomposed fallback (CPU with dropout).
    Math,
}

impl SdpaKernel {
    /// On sm_90 (priority cuDNN → flash → efficient): fp32 always runs the efficient kernel
    /// (flash and cuDNN need fp16/bf16); in half precision cuDNN wins when there is no dropout
    /// (LLaMA, mask or not); with dropout it is rejected and flash runs unless a mask is present
    /// (BERT: flash; GPT-2 with its mask: efficient). On the CPU the flash kernel runs without
    /// dropout, the math path with it.
    pub fn select(cpu: bool, dtype: DType, has_mask: bool, dropout: f64, head_dim: u64) -> Self {
        if cpu {
            if dropout > 0.0 {
                SdpaKernel::Math
            } else {
                SdpaKernel::FlashCpu
            }
        } else if dtype == DType::F32 {
            SdpaKernel::Efficient
        } else if dropout <= 0.0 && head_dim <= 128 {
            SdpaKernel::Cudnn
        } else if !has_mask && head_dim <= 256 {
            SdpaKernel::Flash
        } else {
            SdpaKernel::Efficient
        }
    }
    pub fn op_name(self) -> &'static str {
        match self {
            SdpaKernel::Efficient => "sdpa_efficient",
            SdpaKernel::Flash => "sdpa_flash",
            SdpaKernel::Cudnn => "sdpa_cudnn",
            SdpaKernel::FlashCpu => "sdpa_flash_cpu",
            SdpaKernel::Math => "sdpa_math",
        }
    }
}

/// Settings of [`Graph::eager_attention`].
#[derive(Clone, Copy, Debug)]
pub struct EagerOpts {
    /// Dropout on the attention probabilities.
    pub dropout: f64,
    /// LLaMA's `softmax(..., dtype=torch.float32)` (GPT-2/BERT take the softmax in the scores' dtype).
    pub fp32_softmax: bool,
    /// CPU kernels (float dropout masks).
    pub cpu: bool,
}

/// How a pointwise op with one tensor operand (the others are Python scalars) behaves in
/// autograd.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pw {
    /// The backward formula reads the input (`pow`, `silu`, `gelu`).
    pub save_input: bool,
    /// The backward formula reads the output (`tanh`, `rsqrt`, `exp`).
    pub save_output: bool,
    /// Input-sized temporaries the backward formula materialises besides its result
    /// (`pow_backward`: `pow(x, e-1)` and `e * ...`).
    pub bwd_temps: u64,
    /// The gradient passes through unchanged (`x + 1`).
    pub alias_grad: bool,
    /// Forward FLOPs per element.
    pub flops: f64,
}

impl Graph {
    fn shape_err(&self, what: String) -> EstimateError {
        EstimateError::Unsupported(format!("{}: {what}", self.name("")))
    }

    /// A pointwise op on `x` (scalar operands are constants) with output dtype `dtype`.
    pub fn pointwise(&mut self, kind: &'static str, x: TensorId, dtype: DType, p: Pw) -> R {
        let s = self.shape(x);
        let rg = self.t(x).requires_grad;
        let y = self.alloc(s, dtype, StorageKind::Activation, rg)?;
        let mut op = self.op(kind, "");
        op.flops = p.flops * self.numel(x) as f64;
        op.inputs = vec![x];
        op.outputs = vec![y];
        if p.save_input {
            op.saved.push(x);
        }
        if p.save_output {
            op.saved.push(y);
        }
        let same = self.dtype(x) == dtype;
        op.grads = match (rg, p.alias_grad && same) {
            (false, _) => vec![],
            (true, true) => vec![(x, GradFlow::Alias)],
            (true, false) => vec![(x, GradFlow::Alloc)],
        };
        op.bwd_scratch = Bytes(self.bytes(x).0.saturating_mul(p.bwd_temps));
        if !same && rg {
            // The formula runs in the output dtype; the engine then casts to the input dtype.
            op.bwd_scratch += self.bytes(y);
        }
        self.record(op);
        Ok(y)
    }

    /// `a * b` with broadcasting and type promotion (`mul.Tensor`): saves each operand whose
    /// partner needs a gradient (`derivatives.yaml`: `grad * other`, `grad * self`). The gradient
    /// of a broadcast or narrower operand is first formed at the output's size, then reduced or
    /// cast: that full-size product is backward scratch.
    pub fn mul_bc(&mut self, a: TensorId, b: TensorId) -> R {
        let (sa, sb) = (self.shape(a), self.shape(b));
        let s =
            broadcast(&sa, &sb).ok_or_else(|| self.shape_err(format!("mul {sa:?} * {sb:?}")))?;
        let dt = promote(self.dtype(a), self.dtype(b));
        let rg = self.requires_grad(&[a, b]);
        let y = self.alloc(s, dt, StorageKind::Activation, rg)?;
        let mut op = self.op("mul", "");
        op.flops = self.numel(y) as f64;
        op.inputs = vec![a, b];
        op.outputs = vec![y];
        if self.t(b).requires_grad {
            op.saved.push(a);
        }
        if self.t(a).requires_grad {
            op.saved.push(b);
        }
        op.grads = self.grads_alloc(&[a, b]);
        for t in [a, b] {
            if self.t(t).requires_grad && (self.numel(t) < self.numel(y) || self.dtype(t) != dt) {
                op.bwd_scratch += self.bytes(y);
            }
        }
        self.record(op);
        Ok(y)
    }

    /// `a + b` with broadcasting and type promotion: saves nothing; the gradient passes through
    /// to an operand of the output's shape and dtype and is reduced or cast (a new tensor) for the
    /// others.
    pub fn add_bc(&mut self, a: TensorId, b: TensorId) -> R {
        let (sa, sb) = (self.shape(a), self.shape(b));
        let s =
            broadcast(&sa, &sb).ok_or_else(|| self.shape_err(format!("add {sa:?} + {sb:?}")))?;
        let dt = promote(self.dtype(a), self.dtype(b));
        let rg = self.requires_grad(&[a, b]);
        let y = self.alloc(s.clone(), dt, StorageKind::Activation, rg)?;
        let mut op = self.op("add", "");
        op.flops = self.numel(y) as f64;
        op.inputs = vec![a, b];
        op.outputs = vec![y];
        let mut grads = Vec::new();
        for t in [a, b] {
            if self.t(t).requires_grad && !grads.iter().any(|&(g, _)| g == t) {
                let pass = self.shape(t) == s && self.dtype(t) == dt;
                grads.push((
                    t,
                    if pass {
                        GradFlow::Alias
                    } else {
                        GradFlow::Alloc
                    },
                ));
            }
        }
        op.grads = grads;
        self.record(op);
        Ok(y)
    }

    /// `x.mean(-1, keepdim=True)`: saves nothing (only sizes); the gradient is the incoming one
    /// expanded and divided (`div.Scalar`): a new input-sized tensor.
    pub fn mean_last(&mut self, x: TensorId) -> R {
        let mut s = self.shape(x);
        let last = s
            .last_mut()
            .ok_or_else(|| self.shape_err("mean of a scalar".into()))?;
        *last = 1;
        let rg = self.t(x).requires_grad;
        let y = self.alloc(s, self.dtype(x), StorageKind::Activation, rg)?;
        self.record_unary("mean", x, y, vec![], self.numel(x) as f64);
        Ok(y)
    }

    /// `repeat_kv` (`x[:, :, None].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)`):
    /// the reshape of an expanded tensor copies; its backward sums over the repeats into a new
    /// tensor of `x`'s size. `n_rep == 1` returns `x` itself.
    pub fn repeat_kv(&mut self, x: TensorId, n_rep: u64) -> R {
        if n_rep <= 1 {
            return Ok(x);
        }
        let mut s = self.shape(x);
        if s.len() != 4 {
            return Err(self.shape_err(format!("repeat_kv expects [b, kv, s, d], got {s:?}")));
        }
        s[1] = s[1].checked_mul(n_rep).ok_or(EstimateError::TooLarge)?;
        let rg = self.t(x).requires_grad;
        let y = self.alloc(s, self.dtype(x), StorageKind::Activation, rg)?;
        self.record_simple("repeat_kv", vec![x], vec![y], vec![], 0.0);
        Ok(y)
    }

    /// An integer/bool tensor computed without autograd (positions, shifted labels, masks).
    pub fn no_grad_op(
        &mut self,
        kind: &'static str,
        inputs: &[TensorId],
        shape: Vec<u64>,
        dtype: DType,
        fwd_scratch: Bytes,
    ) -> R {
        let y = self.alloc(shape, dtype, StorageKind::Activation, false)?;
        let mut op = self.op(kind, "");
        op.inputs = inputs.to_vec();
        op.outputs = vec![y];
        op.fwd_scratch = fwd_scratch;
        self.record(op);
        Ok(y)
    }

    // ---------------------------------------------------------------- dense layers

    /// GPT-2's `Conv1D(nf, nx)`: `torch.addmm(bias, x.view(-1, nx), weight)` with the weight stored
    /// `[nx, nf]` (`transformers/pytorch_utils.py`). Saves the (cast) input and weight like
    /// `nn.Linear`; the bias is not saved.
    pub fn conv1d(&mut self, leaf: &str, x: TensorId, nx: u64, nf: u64) -> R {
        self.push(leaf);
        let r = (|| {
            let w = self.param(vec![nx, nf])?;
            let b = self.param(vec![nf])?;
            let mut s = self.shape(x);
            if s.last() != Some(&nx) {
                return Err(self.shape_err(format!("Conv1D expects last dim {nx}, got {s:?}")));
            }
            let xc = self.lowp(x)?;
            let wc = self.lowp(w)?;
            let bc = self.lowp(b)?;
            let rows: u64 = s[..s.len() - 1].iter().product();
            *s.last_mut().unwrap_or(&mut 0) = nf;
            let ins = vec![xc, wc, bc];
            let rg = self.requires_grad(&ins);
            let y = self.alloc(s, self.dtype(xc), StorageKind::Activation, rg)?;
            self.record_simple(
                "addmm",
                ins.clone(),
                vec![y],
                vec![xc, wc],
                2.0 * rows as f64 * (nx * nf) as f64,
            );
            Ok(y)
        })();
        self.pop();
        r
    }

    // ---------------------------------------------------------------- attention

    /// The causal mask transformers builds once per forward (`masking_utils.sdpa_mask`):
    /// `[B, 1, S, S]` bool. Under FakeTensorMode `find_packed_sequence_indices` cannot prove the
    /// batch unpacked (`is_tracing` is true for fake tensors), so the mask is materialised and
    /// `is_causal` is not used; the reference measurements were taken that way. Two bool
    /// intermediates of the same size (`le`, `eq`) exist while it is built.
    pub fn causal_mask(&mut self, batch: u64, seq: u64) -> R {
        let s = vec![batch, 1, seq, seq];
        let scratch = super::units::tensor_bytes(super::units::Elems::of_shape(&s)?, DType::Bool)?;
        self.no_grad_op(
            "causal_mask",
            &[],
            s,
            DType::Bool,
            Bytes(scratch.0.saturating_mul(2)),
        )
    }

    /// `F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p)` followed by the models'
    /// `transpose(1, 2).reshape(B, S, H·D)`; returns that `[B, S, H·D]` tensor. SDPA is on
    /// autocast's low-precision list. A bool mask is first turned into an additive float mask of
    /// the query dtype by `torch.where` (`convert_boolean_attn_mask`), once per call. The fused
    /// kernels save (`derivatives.yaml`) q, k, v, the output, the softmax statistics (efficient:
    /// logsumexp `[B, H, ⌈S/32⌉·32]` fp32; flash and CPU flash: `[B, H, S]` fp32; cuDNN:
    /// `[B, H, S, 1]` fp32), the RNG seed/offset (int64 scalars; flash: a `[2]` state and a
    /// scalar; CPU flash: none) and the mask (all but flash); their output is laid out
    /// `[B, S, H, D]`, so the merge is a view. Backward allocates the three input gradients.
    pub fn sdpa(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        bool_mask: Option<TensorId>,
        dropout: f64,
        cpu: bool,
    ) -> R {
        let (o, kernel) = self.sdpa_heads(q, k, v, bool_mask, dropout, cpu)?;
        let s = self.shape(o);
        let (b, h, sq, d) = (s[0], s[1], s[2], s[3]);
        if kernel == SdpaKernel::Math {
            // The math path's `[B, H, S, D]`-contiguous output: the merge copies.
            let ot = self.view(o, vec![b, sq, h, d])?;
            return self.contiguous(ot, vec![b, sq, h * d]);
        }
        self.view(o, vec![b, sq, h * d])
    }

    /// The kernel part of [`Graph::sdpa`] without the models' head merge, shared with
    /// `nn.MultiheadAttention` (ViT), which merges the heads in another order: the `[B, H, S, D]`
    /// output and the kernel that ran (its memory layout decides whether a merge copies).
    pub fn sdpa_heads(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        bool_mask: Option<TensorId>,
        dropout: f64,
        cpu: bool,
    ) -> Result<(TensorId, SdpaKernel), EstimateError> {
        let q = self.lowp(q)?;
        let k = self.lowp(k)?;
        let v = self.lowp(v)?;
        let qs = self.shape(q);
        let ks = self.shape(k);
        // Grouped-query heads reach SDPA only without a mask (`enable_gqa`); with one, the models
        // repeat k/v first.
        let gqa_ok = bool_mask.is_none()
            && ks.len() == 4
            && ks[1] > 0
            && qs.len() == 4
            && qs[1].is_multiple_of(ks[1]);
        if qs.len() != 4 || ks.len() != 4 || (qs[1] != ks[1] && !gqa_ok) || self.shape(v) != ks {
            return Err(self.shape_err(format!(
                "sdpa expects [B, H, S, D] q/k/v, got {qs:?}, {ks:?}"
            )));
        }
        let (b, h, s, d) = (qs[0], qs[1], qs[2], qs[3]);
        let kv_s = ks[2];
        let dt = self.dtype(q);
        let kernel = SdpaKernel::select(cpu, dt, bool_mask.is_some(), dropout, d);
        let fmask = match bool_mask {
            Some(m) => {
                Some(self.no_grad_op("where", &[m], vec![b, 1, s, kv_s], dt, Bytes::ZERO)?)
            }
            None => None,
        };
        if kernel == SdpaKernel::Math {
            // The math path repeats grouped heads itself (`repeat_interleave`, a copy each).
            let (k, v) = if h != ks[1] {
                (self.repeat_kv(k, h / ks[1])?, self.repeat_kv(v, h / ks[1])?)
            } else {
                (k, v)
            };
            return Ok((self.sdpa_math(q, k, v, fmask, dropout)?, kernel));
        }
        let ins = vec![q, k, v];
        let rg = self.requires_grad(&ins);
        let out = self.alloc(vec![b, h, s, d], dt, StorageKind::Activation, rg)?;
        let mut outs = vec![out];
        let stats = match kernel {
            SdpaKernel::Efficient => vec![b, h, s.div_ceil(32) * 32],
            SdpaKernel::Cudnn => vec![b, h, s, 1],
            _ => vec![b, h, s],
        };
        outs.push(self.alloc(stats, DType::F32, StorageKind::Activation, false)?);
        let rng: Vec<Vec<u64>> = match kernel {
            SdpaKernel::Flash => vec![vec![2], vec![]],
            SdpaKernel::FlashCpu => vec![],
            _ => vec![vec![], vec![]],
        };
        for shape in rng {
            outs.push(self.alloc(shape, DType::I64, StorageKind::Activation, false)?);
        }
        let mut op = self.op(kernel.op_name(), "attn");
        op.flops = 4.0 * (b * h) as f64 * (s * d) as f64 * kv_s as f64;
        op.inputs = ins.clone();
        op.inputs.extend(fmask);
        op.outputs = outs.clone();
        op.saved = ins.clone();
        op.saved.extend(outs);
        if kernel != SdpaKernel::Flash {
            op.saved.extend(fmask);
        }
        op.grads = self.grads_alloc(&ins);
        self.record(op);
        Ok((out, kernel))
    }

    /// `_scaled_dot_product_attention_math` (CPU with dropout): low-precision inputs are upcast
    /// to fp32; `q·√scale` and `kᵀ·√scale`, contiguous copies of both (saved by the bmm), scores,
    /// `+ mask`, `_safe_softmax` (saves its output), dropout, a contiguous copy of v, `bmm`, the
    /// output cast back (`[B, H, S, D]`-contiguous, so a head merge copies). Autocast does not
    /// reach inside it (it runs below the autocast key), so the bmms run in fp32.
    fn sdpa_math(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        fmask: Option<TensorId>,
        dropout: f64,
    ) -> R {
        let orig = self.dtype(q);
        let (qs, ks) = (self.shape(q), self.shape(k));
        let (b, h, s, d) = (qs[0], qs[1], qs[2], qs[3]);
        let kv_s = ks[2];
        let q = self.cast(q, DType::F32)?;
        let k = self.cast(k, DType::F32)?;
        let v = self.cast(v, DType::F32)?;
        let scale = Pw {
            flops: 1.0,
            ..Pw::default()
        };
        let qs_ = self.pointwise("mul", q, DType::F32, scale)?;
        let kt = self.view(k, vec![b, h, d, kv_s])?;
        let kts = self.pointwise("mul", kt, DType::F32, scale)?;
        let qc = self.contiguous(qs_, vec![b, h, s, d])?;
        let ktc = self.contiguous(kts, vec![b, h, d, kv_s])?;
        let scores = self.bmm_raw(qc, ktc)?;
        let w = match fmask {
            Some(m) => self.add_bc(scores, m)?,
            None => scores,
        };
        let p = self.softmax_to(w, DType::F32)?;
        let p = self.dropout_on(p, dropout, true)?;
        let vc = self.contiguous(v, vec![b, h, kv_s, d])?;
        let o = self.bmm_raw(p, vc)?;
        self.cast(o, orig)
    }

    /// A batched matrix product outside autocast's reach (inside a composite op): saves both
    /// operands.
    fn bmm_raw(&mut self, a: TensorId, b: TensorId) -> R {
        let (sa, sb) = (self.shape(a), self.shape(b));
        let (m, k, n) = (sa[sa.len() - 2], sa[sa.len() - 1], sb[sb.len() - 1]);
        let mut s = sa.clone();
        *s.last_mut().unwrap_or(&mut 0) = n;
        let batch: u64 = sa[..sa.len() - 2].iter().product();
        let rg = self.requires_grad(&[a, b]);
        let y = self.alloc(
            s,
            promote(self.dtype(a), self.dtype(b)),
            StorageKind::Activation,
            rg,
        )?;
        self.record_simple(
            "bmm",
            vec![a, b],
            vec![y],
            vec![a, b],
            2.0 * batch as f64 * (m * k) as f64 * n as f64,
        );
        Ok(y)
    }

    /// `nn.Dropout(p)` in training on the chosen device. CUDA runs the fused `native_dropout`
    /// (a 1-byte mask, [`Graph::dropout`]); the CPU runs `_dropout_impl`: `empty_like(x)
    /// .bernoulli_(1 - p).div_(1 - p)` and `x * noise`, so the saved mask has `x`'s dtype.
    pub fn dropout_on(&mut self, x: TensorId, p: f64, cpu: bool) -> R {
        if !cpu || p <= 0.0 || self.inference {
            return self.dropout(x, p);
        }
        let s = self.shape(x);
        let dt = self.dtype(x);
        let rg = self.t(x).requires_grad;
        let y = self.alloc(s.clone(), dt, StorageKind::Activation, rg)?;
        let noise = self.alloc(s, dt, StorageKind::Activation, false)?;
        self.record_simple(
            "dropout",
            vec![x],
            vec![y, noise],
            vec![noise],
            2.0 * self.numel(x) as f64,
        );
        Ok(y)
    }

    /// Softmax over the last dimension producing `out_dtype` (`_softmax(x, dim, half_to_float)`):
    /// saves its output. Autocast's `fp32_set_opt_dtype` policy and an explicit `dtype=float32`
    /// both run it this way, without a separate cast of the input.
    pub fn softmax_to(&mut self, x: TensorId, out_dtype: DType) -> R {
        let rg = self.t(x).requires_grad;
        let y = self.alloc(self.shape(x), out_dtype, StorageKind::Activation, rg)?;
        let mut op = self.op("softmax", "");
        op.flops = 5.0 * self.numel(x) as f64;
        op.inputs = vec![x];
        op.outputs = vec![y];
        op.saved = vec![y];
        op.grads = self.grads_alloc(&[x]);
        if rg && self.dtype(x) != out_dtype {
            op.bwd_scratch = self.bytes(y);
        }
        self.record(op);
        Ok(y)
    }

    /// Eager attention as `eager_attention_forward` of GPT-2/BERT/LLaMA writes it:
    /// `matmul(q, kᵀ) * scale (+ mask)`, softmax, cast to v's dtype, dropout, `matmul(·, v)`,
    /// `transpose(1, 2).contiguous()`. `torch.matmul` on the strided head views copies q, kᵀ and v
    /// to contiguous tensors first (`expand` + `clone`); the bmm saves those copies. Returns
    /// `[B, S, H·D]`.
    pub fn eager_attention(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        float_mask: Option<TensorId>,
        o: EagerOpts,
    ) -> R {
        let EagerOpts {
            dropout,
            fp32_softmax,
            cpu,
        } = o;
        let q = self.lowp(q)?;
        let k = self.lowp(k)?;
        let v = self.lowp(v)?;
        let qs = self.shape(q);
        let ks = self.shape(k);
        if qs.len() != 4 || ks.len() != 4 || qs[1] != ks[1] {
            return Err(self.shape_err(format!(
                "attention expects [B, H, S, D] q/k/v, got {qs:?}, {ks:?}"
            )));
        }
        let (b, h, s, d) = (qs[0], qs[1], qs[2], qs[3]);
        let kv_s = ks[2];
        let qc = self.contiguous(q, qs.clone())?;
        let kt = self.view(k, vec![b, h, d, kv_s])?;
        let ktc = self.contiguous(kt, vec![b, h, d, kv_s])?;
        let scores = self.matmul(qc, ktc)?;
        let dt = self.dtype(scores);
        let mut w = self.pointwise(
            "mul",
            scores,
            dt,
            Pw {
                flops: 1.0,
                ..Pw::default()
            },
        )?;
        if let Some(m) = float_mask {
            w = self.add_bc(w, m)?;
        }
        let sm_dt = if fp32_softmax
            || (self.precision.autocast().is_some() && self.dtype(w) != DType::F32)
        {
            DType::F32
        } else {
            self.dtype(w)
        };
        let mut p = self.softmax_to(w, sm_dt)?;
        let vdt = self.dtype(v);
        p = self.cast(p, vdt)?;
        p = self.dropout_on(p, dropout, cpu)?;
        let vc = self.contiguous(v, self.shape(v))?;
        let o = self.matmul(p, vc)?;
        let ot = self.view(o, vec![b, s, h, d])?;
        self.contiguous(ot, vec![b, s, h * d])
    }

    // ---------------------------------------------------------------- normalisation, rotary, activations

    /// `LlamaRMSNorm` (also Mistral/Qwen2): `x.to(fp32)`, `pow(2).mean(-1, keepdim)`,
    /// `x * rsqrt(var + eps)`, `.to(input_dtype)`, `weight * ·`. Saves the fp32 input (pow, mul),
    /// the rsqrt, the normalised fp32 tensor (or its low-precision cast) and the weight.
    pub fn rms_norm(&mut self, leaf: &str, x: TensorId) -> R {
        self.push(leaf);
        let r = (|| {
            let h = *self
                .shape(x)
                .last()
                .ok_or_else(|| self.shape_err("rms_norm on a scalar".into()))?;
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
            let nc = self.cast(n, in_dt)?;
            self.mul_bc(w, nc)
        })();
        self.pop();
        r
    }

    /// The rotary tables (`LlamaRotaryEmbedding.forward`): `inv_freq ⊗ positions`, `cat`, `cos`,
    /// `sin` in fp32 with autocast disabled, then `.to(x.dtype)`. `[1, S, D]` each, no gradient.
    pub fn rotary_tables(
        &mut self,
        inv_freq: TensorId,
        seq: u64,
        head_dim: u64,
        dtype: DType,
    ) -> Result<(TensorId, TensorId), EstimateError> {
        let emb = self.no_grad_op(
            "rotary_freqs",
            &[inv_freq],
            vec![1, seq, head_dim],
            DType::F32,
            Bytes::ZERO,
        )?;
        let mut cos = self.no_grad_op(
            "cos",
            &[emb],
            vec![1, seq, head_dim],
            DType::F32,
            Bytes::ZERO,
        )?;
        let mut sin = self.no_grad_op(
            "sin",
            &[emb],
            vec![1, seq, head_dim],
            DType::F32,
            Bytes::ZERO,
        )?;
        if dtype != DType::F32 {
            cos = self.cast(cos, dtype)?;
            sin = self.cast(sin, dtype)?;
        }
        let cos = self.view(cos, vec![1, 1, seq, head_dim])?;
        let sin = self.view(sin, vec![1, 1, seq, head_dim])?;
        Ok((cos, sin))
    }

    /// `apply_rotary_pos_emb` for one of q/k: `x * cos + rotate_half(x) * sin` with
    /// `rotate_half(x) = cat(-x2, x1)`. The products save only cos/sin; `neg` and `cat` save
    /// nothing. In backward each slice of `x` becomes a full-size `slice_backward` tensor.
    pub fn rotary(&mut self, x: TensorId, cos: TensorId, sin: TensorId) -> R {
        let s = self.shape(x);
        let d = *s.last().unwrap_or(&0);
        let dt = self.dtype(x);
        let rg = self.t(x).requires_grad;
        let a = self.mul_bc(x, cos)?;
        let mut half = s.clone();
        *half.last_mut().unwrap_or(&mut 0) = d / 2;
        let neg = self.alloc(half, dt, StorageKind::Activation, rg)?;
        self.record_simple("neg", vec![x], vec![neg], vec![], 0.0);
        let rot = self.alloc(s, dt, StorageKind::Activation, rg)?;
        let mut op = self.op("cat", "");
        op.inputs = vec![neg, x];
        op.outputs = vec![rot];
        if rg {
            op.grads = vec![(neg, GradFlow::Alias), (x, GradFlow::Alloc)];
        }
        self.record(op);
        let b = self.mul_bc(rot, sin)?;
        self.add_bc(a, b)
    }

    /// `NewGELUActivation` (GPT-2's `gelu_new`), written in Python as
    /// `0.5 * x * (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`: eight aten ops. Saved: x (by `pow`),
    /// `0.5·x` and `1 + tanh(·)` (by the final product) and the tanh output.
    pub fn gelu_new(&mut self, x: TensorId, cpu: bool) -> R {
        let dt = self.dtype(x);
        let scalar = Pw {
            flops: 1.0,
            ..Pw::default()
        };
        let half = self.pointwise("mul", x, dt, scalar)?;
        // `pow` is on CUDA autocast's fp32 list (not on the CPU's): under autocast x is cast to
        // fp32 and everything after it promotes to fp32.
        let xf = if cpu { x } else { self.fp32(x)? };
        let cube = self.pointwise(
            "pow",
            xf,
            self.dtype(xf),
            Pw {
                save_input: true,
                bwd_temps: 2,
                flops: 2.0,
                ..Pw::default()
            },
        )?;
        let c = self.pointwise("mul", cube, self.dtype(cube), scalar)?;
        let inner = self.add_bc(x, c)?;
        let idt = self.dtype(inner);
        let arg = self.pointwise("mul", inner, idt, scalar)?;
        let t = self.pointwise(
            "tanh",
            arg,
            idt,
            Pw {
                save_output: true,
                flops: 4.0,
                ..Pw::default()
            },
        )?;
        let one_t = self.pointwise(
            "add",
            t,
            idt,
            Pw {
                alias_grad: true,
                flops: 1.0,
                ..Pw::default()
            },
        )?;
        self.mul_bc(half, one_t)
    }

    // ---------------------------------------------------------------- loss

    /// `ForCausalLMLoss` (`transformers/loss/loss_utils.py`): `logits.float()` (a new fp32 copy
    /// unless already fp32), labels padded with -100 and shifted (`pad`, `[..., 1:].contiguous()`),
    /// then `cross_entropy` with mean reduction (`num_items_in_batch` is None).
    pub fn causal_lm_loss(&mut self, logits: TensorId, labels: TensorId) -> R {
        // Inference: `model(input_ids).logits`, no loss; the caller holds the logits.
        if self.inference {
            self.keep(logits);
            return Ok(logits);
        }
        self.push("loss");
        let r = (|| {
            let s = self.shape(logits);
            let (b, t, v) = match s[..] {
                [b, t, v] => (b, t, v),
                _ => return Err(self.shape_err(format!("logits must be [B, S, V], got {s:?}"))),
            };
            let lf = self.cast(logits, DType::F32)?;
            let padded = self.no_grad_op(
                "constant_pad_nd",
                &[labels],
                vec![b, t + 1],
                DType::I64,
                Bytes::ZERO,
            )?;
            let shifted =
                self.no_grad_op("clone", &[padded], vec![b, t], DType::I64, Bytes::ZERO)?;
            let l2 = self.view(lf, vec![b * t, v])?;
            let y = self.view(shifted, vec![b * t])?;
            self.vocab_parallel_cross_entropy(l2, y)
        })();
        self.pop();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_and_broadcast() {
        assert_eq!(promote(DType::BF16, DType::F32), DType::F32);
        assert_eq!(promote(DType::BF16, DType::BF16), DType::BF16);
        assert_eq!(broadcast(&[2, 3, 4], &[4]), Some(vec![2, 3, 4]));
        assert_eq!(
            broadcast(&[2, 12, 8, 8], &[2, 1, 8, 8]),
            Some(vec![2, 12, 8, 8])
        );
        assert_eq!(broadcast(&[2, 3], &[4]), None);
    }

    #[test]
    fn kernel_choice_matches_the_oracle() {
        // GPT-2 (mask + dropout): efficient in every dtype; BERT bf16 (dropout, no mask): flash;
        // LLaMA bf16 (mask, no dropout): cuDNN; fp32: efficient.
        assert_eq!(
            SdpaKernel::select(false, DType::BF16, true, 0.1, 64),
            SdpaKernel::Efficient
        );
        assert_eq!(
            SdpaKernel::select(false, DType::BF16, false, 0.1, 64),
            SdpaKernel::Flash
        );
        assert_eq!(
            SdpaKernel::select(false, DType::BF16, true, 0.0, 128),
            SdpaKernel::Cudnn
        );
        assert_eq!(
            SdpaKernel::select(false, DType::F32, false, 0.0, 64),
            SdpaKernel::Efficient
        );
    }
}
