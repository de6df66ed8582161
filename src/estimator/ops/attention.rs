//! Attention: the causal mask, the fused `scaled_dot_product_attention` kernels (training and
//! inference), the math fallback, eager attention and grouped-query `repeat_kv`.

use super::{Pw, R};
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, StorageKind, TensorId};
use crate::estimator::units::{tensor_bytes, Bytes, DType, Elems};

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
        Self::select_dims(cpu, dtype, has_mask, dropout, head_dim, head_dim)
    }

    /// [`SdpaKernel::select`] when the values' head dim `v_head_dim` may differ from the
    /// queries' and keys' (multi-head latent attention: 192 and 128 in DeepSeek-V3). The flash
    /// kernels need one head dim for all three (`check_head_dim_size_flash`,
    /// `check_head_dim_size_cpp` in torch 2.15 `sdp_utils*.cpp`): observed, the CPU then runs
    /// the math path and sm_90 the efficient kernel (fp32) or cuDNN (bf16, q/k 96 or 192 with
    /// v 64 or 128, the fake sm_90 device).
    pub fn select_dims(
        cpu: bool,
        dtype: DType,
        has_mask: bool,
        dropout: f64,
        head_dim: u64,
        v_head_dim: u64,
    ) -> Self {
        let same = head_dim == v_head_dim;
        if cpu {
            if dropout > 0.0 || !same {
                SdpaKernel::Math
            } else {
                SdpaKernel::FlashCpu
            }
        } else if dtype == DType::F32 {
            SdpaKernel::Efficient
        } else if dropout <= 0.0 && (head_dim <= 128 || !same) {
            SdpaKernel::Cudnn
        } else if !has_mask && head_dim <= 256 && same {
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

    /// Whether the kernel's `[B, H, S, D]` output is laid out heads-major (`[B, H, S, D]`
    /// contiguous), so that the models' `attn_output.transpose(1, 2).contiguous()`
    /// (`sdpa_attention_forward`, transformers 5.24 `integrations/sdpa_attention.py`) copies it.
    /// cuDNN and flash allocate their output in the query's dimension order
    /// (`alloc_with_matching_layout` in `meta__scaled_dot_product_cudnn_attention` and
    /// `meta__scaled_dot_product_flash_attention`, torch 2.15 `_meta_registrations.py`); the
    /// efficient kernel allocates `[B, S, H, D]` and transposes it
    /// (`meta__scaled_dot_product_efficient_attention`), as the CPU flash kernel does
    /// (`_scaled_dot_product_flash_attention_cpu`); the math path's last `bmm` is heads-major.
    pub fn output_heads_major(self, query: QueryOrder) -> bool {
        match self {
            SdpaKernel::Math => true,
            SdpaKernel::Cudnn | SdpaKernel::Flash => query == QueryOrder::HeadsMajor,
            SdpaKernel::Efficient | SdpaKernel::FlashCpu => false,
        }
    }
}

/// The memory order of the query that reaches `scaled_dot_product_attention` (its `[B, H, S, D]`
/// shape is the same either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryOrder {
    /// `[B, S, H, D]` in memory: a projection's output viewed into heads and transposed, and any
    /// pointwise op or cast after it (TensorIterator and `_to_copy` keep their input's strides),
    /// as LLaMA's rotary embedding.
    SeqMajor,
    /// `[B, H, S, D]`-contiguous: a `torch.cat` of the heads view (its output is contiguous), as
    /// Phi-3's `apply_rotary_pos_emb` makes.
    HeadsMajor,
}

/// Which operands of eager attention's two `torch.matmul` calls are copied to fold `[B, H]`:
/// the query, the transposed keys, the values.
#[derive(Clone, Copy, Debug)]
pub struct MatmulCopies {
    pub q: bool,
    pub k: bool,
    pub v: bool,
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
    /// Gemma 2's `attn_logit_softcapping` (`eager_attention_forward` in
    /// `models/gemma2/modeling_gemma2.py`): the scaled scores go through `/ cap`, `tanh`, `* cap`
    /// before the mask, three more score-sized tensors, the `tanh` output saved.
    pub softcap: bool,
}

impl Graph {
    /// The causal mask transformers builds once per forward (`masking_utils.sdpa_mask`):
    /// `[B, 1, S, S]` bool. Under FakeTensorMode `find_packed_sequence_indices` cannot prove the
    /// batch unpacked (`is_tracing` is true for fake tensors), so the mask is materialised and
    /// `is_causal` is not used; the reference measurements were taken that way. Two bool
    /// intermediates of the same size (`le`, `eq`) exist while it is built.
    pub fn causal_mask(&mut self, batch: u64, seq: u64) -> R {
        let s = vec![batch, 1, seq, seq];
        let scratch = crate::estimator::units::tensor_bytes(
            crate::estimator::units::Elems::of_shape(&s)?,
            DType::Bool,
        )?;
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
    /// scalar; CPU flash: none) and the mask (all but flash). The query is laid out `[B, S, H, D]`
    /// ([`QueryOrder::SeqMajor`]), so every fused kernel's output is too and the merge is a view.
    /// Backward allocates the three input gradients.
    pub fn sdpa(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        bool_mask: Option<TensorId>,
        dropout: f64,
        cpu: bool,
    ) -> R {
        self.sdpa_ordered(q, k, v, bool_mask, dropout, cpu, QueryOrder::SeqMajor)
    }

    /// [`Graph::sdpa`] for a query laid out `query` in memory. A heads-major output
    /// ([`SdpaKernel::output_heads_major`]) makes the merge a copy of the output, the tensor
    /// `o_proj` then saves, while SDPA keeps its own output saved too.
    #[allow(clippy::too_many_arguments)]
    pub fn sdpa_ordered(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        bool_mask: Option<TensorId>,
        dropout: f64,
        cpu: bool,
        query: QueryOrder,
    ) -> R {
        let (o, kernel) = self.sdpa_heads(q, k, v, bool_mask, dropout, cpu)?;
        let s = self.shape(o);
        let (b, h, sq, d) = (s[0], s[1], s[2], s[3]);
        if kernel.output_heads_major(query) {
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
        let vs = self.shape(v);
        if qs.len() != 4
            || ks.len() != 4
            || (qs[1] != ks[1] && !gqa_ok)
            || qs[3] != ks[3]
            || vs.len() != 4
            || vs[..3] != ks[..3]
        {
            return Err(self.bad_shape(format!(
                "sdpa expects [B, H, S, D] q/k/v, got {qs:?}, {ks:?}, {vs:?}"
            )));
        }
        let (b, h, s, d) = (qs[0], qs[1], qs[2], qs[3]);
        let (kv_s, dv) = (ks[2], vs[3]);
        let dt = self.dtype(q);
        let kernel = SdpaKernel::select_dims(cpu, dt, bool_mask.is_some(), dropout, d, dv);
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
        let out = self.alloc(vec![b, h, s, dv], dt, StorageKind::Activation, rg)?;
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
        op.flops = 2.0 * (b * h) as f64 * (s * (d + dv)) as f64 * kv_s as f64;
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
            Some(m) => self.add(scores, m, false)?,
            None => scores,
        };
        let p = self.softmax_to(w, DType::F32)?;
        let p = self.dropout_on(p, dropout, true)?;
        let vc = self.contiguous(v, self.shape(v))?;
        let o = self.bmm_raw(p, vc)?;
        self.cast(o, orig)
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
        let copies = MatmulCopies {
            q: true,
            k: true,
            v: true,
        };
        self.eager_attention_copying(q, k, v, float_mask, o, copies)
    }

    /// [`Graph::eager_attention`] where `copies` says which operands `torch.matmul` copies:
    /// it folds `[B, H]` into one batch dimension with `reshape`, a copy only when the strides
    /// do not merge.
    pub fn eager_attention_copying(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        float_mask: Option<TensorId>,
        o: EagerOpts,
        copies: MatmulCopies,
    ) -> R {
        self.eager_attention_weights(q, k, v, float_mask, o, copies)
            .map(|(out, _)| out)
    }

    /// [`Graph::eager_attention_copying`], also returning the attention weights
    /// `eager_attention_forward` returns beside its output (the probabilities in the values'
    /// dtype, after dropout), which the decoder layer's `_` keeps.
    ///
    /// Without autograd, the function's locals decide what lives (`eager_attention_forward` in
    /// `models/llama/modeling_llama.py`, Gemma 2's with its soft-capping): `key_states` and
    /// `value_states` (the keys and values passed in, repeated by the caller) live until it
    /// returns, past the products that read them, and the masked scores stay bound to
    /// `attn_weights` until `softmax(...).to(query.dtype)` has replaced them.
    pub fn eager_attention_weights(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        float_mask: Option<TensorId>,
        o: EagerOpts,
        copies: MatmulCopies,
    ) -> Result<(TensorId, TensorId), EstimateError> {
        let (k_in, v_in) = (k, v);
        let EagerOpts {
            dropout,
            fp32_softmax,
            cpu,
            softcap,
        } = o;
        let q = self.lowp(q)?;
        let k = self.lowp(k)?;
        let v = self.lowp(v)?;
        let qs = self.shape(q);
        let ks = self.shape(k);
        if qs.len() != 4 || ks.len() != 4 || qs[1] != ks[1] {
            return Err(self.bad_shape(format!(
                "attention expects [B, H, S, D] q/k/v, got {qs:?}, {ks:?}"
            )));
        }
        let (b, h, s, d) = (qs[0], qs[1], qs[2], qs[3]);
        let kv_s = ks[2];
        let qc = if copies.q {
            self.contiguous(q, qs.clone())?
        } else {
            q
        };
        let kt = self.view(k, vec![b, h, d, kv_s])?;
        let ktc = if copies.k {
            self.contiguous(kt, vec![b, h, d, kv_s])?
        } else {
            kt
        };
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
        if softcap {
            w = self.softcap(w)?;
        }
        if let Some(m) = float_mask {
            w = self.add(w, m, false)?;
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
        if self.inference {
            self.hold(&[w]);
        }
        p = self.dropout_on(p, dropout, cpu)?;
        let vc = if copies.v {
            self.contiguous(v, self.shape(v))?
        } else {
            v
        };
        let o = self.matmul(p, vc)?;
        // The values' head dim (multi-head latent attention's may differ from the keys').
        let dv = self.shape(vc)[3];
        let ot = self.view(o, vec![b, s, h, dv])?;
        let out = self.contiguous(ot, vec![b, s, h * dv])?;
        if self.inference {
            self.hold(&[k_in, v_in]);
        }
        Ok((out, p))
    }

    /// Logit soft-capping, `cap * tanh(x / cap)` as Gemma 2 writes it (`x / cap`, `torch.tanh`,
    /// `* cap`): the division and the product save nothing (scalar operands), `tanh` saves its
    /// output.
    pub fn softcap(&mut self, x: TensorId) -> R {
        let dt = self.dtype(x);
        let scalar = Pw {
            flops: 1.0,
            ..Pw::default()
        };
        let y = self.pointwise("div", x, dt, scalar)?;
        let y = self.pointwise(
            "tanh",
            y,
            dt,
            Pw {
                save_output: true,
                flops: 4.0,
                ..Pw::default()
            },
        )?;
        self.pointwise("mul", y, dt, scalar)
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
            return Err(self.bad_shape(format!("repeat_kv expects [b, kv, s, d], got {s:?}")));
        }
        s[1] = s[1].checked_mul(n_rep).ok_or(EstimateError::TooLarge)?;
        let rg = self.t(x).requires_grad;
        let y = self.alloc(s, self.dtype(x), StorageKind::Activation, rg)?;
        self.record_simple("repeat_kv", vec![x], vec![y], vec![], 0.0);
        Ok(y)
    }

    /// `F.scaled_dot_product_attention` in inference: no mask (an unpadded batch: transformers
    /// 5.24 skips the mask, `_ignore_causal_mask_sdpa`, and passes `is_causal` in prefill) and
    /// grouped-query heads without `repeat_kv` (`use_gqa_in_sdpa` with no mask: `enable_gqa`; a
    /// single query with a mask: `pack_gqa`). The fused kernel's outputs are those of
    /// [`Graph::sdpa`] and are freed at once (nothing is saved). Returns `[B, S, H·D]`.
    pub fn sdpa_infer(&mut self, q: TensorId, k: TensorId, v: TensorId) -> R {
        self.sdpa_infer_on(q, k, v, false, false)
    }

    /// [`Graph::sdpa_infer`] with the kernel the device picks (`cpu`): on the CPU a value head
    /// dim unlike the queries' (multi-head latent attention) leaves the flash kernel for the
    /// math path ([`Graph::sdpa_math_infer`]; `copy_v`: whether its `matmul` copies the values
    /// to fold `[B, H]`).
    pub fn sdpa_infer_on(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        cpu: bool,
        copy_v: bool,
    ) -> R {
        let q = self.lowp(q)?;
        let k = self.lowp(k)?;
        let v = self.lowp(v)?;
        let (qs, ks, vs) = (self.shape(q), self.shape(k), self.shape(v));
        if qs.len() != 4
            || ks.len() != 4
            || ks[1] == 0
            || !qs[1].is_multiple_of(ks[1])
            || qs[3] != ks[3]
            || vs.len() != 4
            || vs[..3] != ks[..3]
        {
            return Err(self.bad_shape(format!(
                "attention expects [B, H, S, D] queries and [B, KV, T, D] keys, got {qs:?}, {ks:?}"
            )));
        }
        let (b, h, s, d) = (qs[0], qs[1], qs[2], qs[3]);
        let (t, dv) = (ks[2], vs[3]);
        let dt = self.dtype(q);
        let kernel = SdpaKernel::select_dims(cpu, dt, false, 0.0, d, dv);
        if kernel == SdpaKernel::Math {
            let (k, v) = if h != ks[1] {
                (self.repeat_kv(k, h / ks[1])?, self.repeat_kv(v, h / ks[1])?)
            } else {
                (k, v)
            };
            return self.sdpa_math_infer(q, k, v, copy_v);
        }
        let out = self.alloc(vec![b, h, s, dv], dt, StorageKind::Activation, false)?;
        let stats = match kernel {
            SdpaKernel::Efficient => vec![b, h, s.div_ceil(32) * 32],
            SdpaKernel::Cudnn => vec![b, h, s, 1],
            _ => vec![b, h, s],
        };
        let mut outs = vec![
            out,
            self.alloc(stats, DType::F32, StorageKind::Activation, false)?,
        ];
        let rng: Vec<Vec<u64>> = match kernel {
            SdpaKernel::Flash => vec![vec![2], vec![]],
            SdpaKernel::FlashCpu => vec![],
            _ => vec![vec![], vec![]],
        };
        for shape in rng {
            outs.push(self.alloc(shape, DType::I64, StorageKind::Activation, false)?);
        }
        let mut op = self.op(kernel.op_name(), "attn");
        // Causal prefill computes about half the scores; decode reads the whole cache.
        let pairs = if s == t {
            (s * (s + 1) / 2) as f64
        } else {
            (s * t) as f64
        };
        op.flops = 2.0 * (b * h) as f64 * (d + dv) as f64 * pairs;
        op.inputs = vec![q, k, v];
        op.outputs = outs;
        self.record(op);
        self.view(out, vec![b, s, h * dv])
    }

    /// `_scaled_dot_product_attention_math` (torch 2.15 `aten/src/ATen/native/transformers/
    /// attention.cpp`) under `torch.no_grad()`, as the tracker saw it op by op on the CPU:
    /// half-precision q, k and v are first copied to fp32 (`query_acc`, `key_acc`,
    /// `value_acc`: `to(kFloat)`, which keeps each input's memory order), so a bf16 model runs
    /// the whole attention in fp32. Then `q·√scale`; with `is_causal` (transformers'
    /// `sdpa_attention_forward` sets it for a prompt of more than one token) a `[S, T]` bool
    /// `ones(…).tril()` turned into an additive mask of the scaled query's dtype by
    /// `convert_boolean_attn_mask` (`where` over two 0-dim tensors); `kᵀ·√scale`, whose
    /// transposed view `matmul` folds into a `bmm` without a copy; the fp32 scores, `+ mask`
    /// (a new tensor), `_safe_softmax`; the probabilities cast back to the input dtype (the
    /// second output, which `F.scaled_dot_product_attention` drops); the values copied when
    /// `matmul` cannot fold their `[B, H]` as a view (`copy_v`); the second `bmm` in fp32 and
    /// its cast back. Every local lives until the function returns: the fp32 copies, the
    /// scaled query, the mask and both probability tensors are freed only after the output's
    /// cast, while the fp32 output of the `bmm` goes with it. The output is `[B, H, S, D]`
    /// contiguous, so `sdpa_attention_forward`'s `transpose(1, 2).contiguous()` copies it
    /// unless one of `H` and `S` is 1. Returns `[B, S, H·D]`.
    fn sdpa_math_infer(&mut self, q: TensorId, k: TensorId, v: TensorId, copy_v: bool) -> R {
        let orig = self.dtype(q);
        let (qs, ks, vs) = (self.shape(q), self.shape(k), self.shape(v));
        let (b, h, s, d) = (qs[0], qs[1], qs[2], qs[3]);
        let (t, dv) = (ks[2], vs[3]);
        let q32 = self.cast(q, DType::F32)?;
        let k32 = self.cast(k, DType::F32)?;
        let v32 = self.cast(v, DType::F32)?;
        let scale = Pw {
            flops: 1.0,
            ..Pw::default()
        };
        let qsc = self.pointwise("mul", q32, DType::F32, scale)?;
        let mask = if s > 1 {
            // `ones` is freed once `tril` exists; `tril` and the two 0-dim operands of `where`
            // live while the float mask is written.
            let tril = tensor_bytes(Elems::of_shape(&[s, t])?, DType::Bool)?;
            let scalar = tensor_bytes(Elems(1), DType::F32)?;
            let scratch = Bytes(tril.allocator_block().0 + 2 * scalar.allocator_block().0);
            Some(self.no_grad_op("causal_mask", &[], vec![s, t], DType::F32, scratch)?)
        } else {
            None
        };
        let kt = self.view(k32, vec![b, h, d, t])?;
        let kts = self.pointwise("mul", kt, DType::F32, scale)?;
        let scores = self.bmm_raw(qsc, kts)?;
        let w = match mask {
            Some(m) => self.add(scores, m, false)?,
            None => scores,
        };
        let p = self.softmax_to(w, DType::F32)?;
        let weights = self.cast(p, orig)?;
        let vc = if copy_v {
            self.contiguous(v32, vec![b, h, t, dv])?
        } else {
            v32
        };
        let o32 = self.bmm_raw(p, vc)?;
        let o = self.cast(o32, orig)?;
        let mut locals = vec![q32, k32, v32, qsc, p, weights];
        locals.extend(mask);
        self.hold(&locals);
        let ot = self.view(o, vec![b, s, h, dv])?;
        if s > 1 && h > 1 {
            self.contiguous(ot, vec![b, s, h * dv])
        } else {
            self.view(ot, vec![b, s, h * dv])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unequal_value_head_dims_leave_the_flash_kernels() {
        // Observed with torch 2.15: the CPU runs the math path for q/k 96 and v 64; the fake
        // sm_90 device runs cuDNN in bf16 (q/k 192, v 128) and the efficient kernel in fp32.
        assert_eq!(
            SdpaKernel::select_dims(true, DType::F32, true, 0.0, 96, 64),
            SdpaKernel::Math
        );
        assert_eq!(
            SdpaKernel::select_dims(false, DType::BF16, false, 0.0, 192, 128),
            SdpaKernel::Cudnn
        );
        assert_eq!(
            SdpaKernel::select_dims(false, DType::F32, true, 0.0, 192, 128),
            SdpaKernel::Efficient
        );
        assert_eq!(
            SdpaKernel::select_dims(false, DType::BF16, false, 0.1, 192, 128),
            SdpaKernel::Efficient
        );
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
