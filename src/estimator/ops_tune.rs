//! Ops of fine-tuning and inference: the linear layers of a transformer block in every weight
//! format ([`Graph::block_linear`]: dense, NF4, INT8, W8A8, INT4, 2:4 sparse), peft's LoRA
//! adapters around them, the KV-cache update and attention over the cache.
//!
//! What each op allocates and saves was read off the aten ops PyTorch 2.15 dispatches on the
//! faked sm_90 device (a copy of `shared/reference/harness` with a per-op log of new and freed
//! storages) with peft 0.21 and bitsandbytes 0.50 installed, and from their sources:
//! `peft/tuners/lora/layer.py` (`Linear.forward`), `peft/tuners/lora/bnb.py`
//! (`Linear4bit.forward`), `bitsandbytes/nn/modules.py` (`Linear4bit.forward`),
//! `bitsandbytes/autograd/_functions.py` (`MatMul4Bit`), `bitsandbytes/backends/cuda/ops.py`
//! (`gemm_4bit`, `_dequant_linear_fallback`), `transformers/cache_utils.py` (`DynamicLayer`).

use super::error::EstimateError;
use super::graph::{GradFlow, Graph, StorageKind, TensorId};
use super::ops_text::{Pw, SdpaKernel};
use super::tune::{nf4_storages, LoraSpec, Quantization, Sparsity, Target, TuneCtx};
use super::units::{Bytes, DType};

type R = Result<TensorId, EstimateError>;

/// `bitsandbytes::gemm_4bit` runs its own kernel up to this many rows
/// (`_GEMM_4BIT_CUSTOM_FLOOR_M`); above it the CUDA backend may fall back to dequantizing the
/// weight and calling `F.linear` (always above 1536 rows, by an architecture heuristic between).
/// The fallback is modelled for every larger product: it is the one that allocates.
pub const GEMM_4BIT_CUSTOM_ROWS: u64 = 4;

fn r512(b: u64) -> u64 {
    b.div_ceil(512) * 512
}

impl Graph {
    fn tune_err(&self, what: String) -> EstimateError {
        EstimateError::Unsupported(format!("{}: {what}", self.name("")))
    }

    /// One projection of a transformer block (`q_proj`, ..., `down_proj`) in the plan's weight
    /// format, wrapped in LoRA adapters when the plan targets it.
    /// Plain dense layers go through the tensor-parallel constructors (column-parallel for q, k,
    /// v, gate, up; row-parallel for o, down), which are `linear` itself on one GPU.
    pub fn block_linear(
        &mut self,
        leaf: &str,
        x: TensorId,
        fin: u64,
        fout: u64,
        bias: bool,
        target: Target,
        tune: &TuneCtx,
    ) -> R {
        let adapted = tune.lora.as_ref().is_some_and(|l| l.wraps(target));
        if tune.dense_linears() && !adapted {
            return match target {
                Target::O | Target::Down => self.row_parallel_linear(leaf, x, fin, fout, bias),
                _ => self.column_parallel_linear(leaf, x, fin, fout, bias),
            };
        }
        if self.tp_size() > 1 {
            return Err(self.tune_err(
                "LoRA adapters and quantized weights are not modelled with tensor parallelism"
                    .into(),
            ));
        }
        self.push(leaf);
        let r = (|| {
            let nf4 = tune.quant == Quantization::Nf4;
            let y = if tune.dense_linears() {
                let w = self.param(vec![fout, fin])?;
                let b = if bias {
                    Some(self.param(vec![fout])?)
                } else {
                    None
                };
                self.linear_with(x, w, b)?
            } else if nf4 {
                self.linear_nf4(x, fin, fout, bias, tune)?
            } else {
                self.linear_packed(x, fin, fout, bias, tune)?
            };
            match &tune.lora {
                Some(l) if l.wraps(target) => self.lora_branch(x, y, fin, fout, l, nf4),
                _ => Ok(y),
            }
        })();
        self.pop();
        r
    }

    /// peft's LoRA around a base layer's output `result` (`lora.Linear.forward`):
    /// `result + lora_B(lora_A(dropout(x))) * scaling`, with fp32 adapters. The plain layer casts
    /// `x` to the adapters' dtype first (`_cast_input_dtype`, a new fp32 copy of a bf16 input
    /// that `lora_A` then saves: one per targeted projection, even when they share `x`), adds in
    /// the promoted dtype and casts the sum back (`result.to(torch_result_dtype)`). The 4-bit
    /// layer (`lora.bnb.Linear4bit.forward`) first clones `result` ("defensively", for backprop
    /// through views), casts only outside autocast, casts the adapters' output to the result's
    /// dtype and adds. `lora_A` saves its input, `lora_B` the rank-sized `lora_A` output; the
    /// product with the Python scalar `scaling` saves nothing.
    fn lora_branch(
        &mut self,
        x: TensorId,
        result: TensorId,
        fin: u64,
        fout: u64,
        l: &LoraSpec,
        bnb: bool,
    ) -> R {
        let adt = DType::F32;
        let a_w = self.scoped("lora_A", |g| g.adapter_param(vec![l.rank, fin], adt))?;
        let b_w = self.scoped("lora_B", |g| g.adapter_param(vec![fout, l.rank], adt))?;
        let res_dt = self.dtype(result);
        let autocast = self.precision.autocast().is_some();
        let result = if bnb {
            self.contiguous(result, self.shape(result))?
        } else {
            result
        };
        let xa = if bnb && autocast {
            x
        } else {
            self.cast(x, adt)?
        };
        let xa = self.scoped("lora_dropout", |g| g.dropout(xa, l.dropout))?;
        let a = self.scoped("lora_A", |g| g.linear_with(xa, a_w, None))?;
        let b = self.scoped("lora_B", |g| g.linear_with(a, b_w, None))?;
        let s = self.pointwise(
            "mul",
            b,
            self.dtype(b),
            Pw {
                flops: 1.0,
                ..Pw::default()
            },
        )?;
        if bnb {
            let s = if autocast { s } else { self.cast(s, res_dt)? };
            self.add_bc(result, s)
        } else {
            let sum = self.add_bc(result, s)?;
            self.cast(sum, res_dt)
        }
    }

    /// bitsandbytes `Linear4bit(quant_type="nf4")`: the packed 4-bit weight (a frozen
    /// `Params4bit`) and its quantization state; `forward` casts `x` to the compute dtype (bf16,
    /// or fp16 under an fp16 plan), runs `gemm_4bit` through `MatMul4Bit` and casts the output
    /// back to `x`'s dtype. `MatMul4Bit` saves only the packed weight (no activation). Above
    /// [`GEMM_4BIT_CUSTOM_ROWS`] rows `gemm_4bit` dequantizes: the absmax values (with double
    /// quantization: `empty_like` fp32, then `+ offset`, both live) and the whole weight in the
    /// compute dtype exist during the product. Backward dequantizes again
    /// (`dequantize_4bit(B, state)`: the fp32 absmax when nested, the weight in the compute dtype)
    /// to form the input gradient.
    fn linear_nf4(&mut self, x: TensorId, fin: u64, fout: u64, bias: bool, tune: &TuneCtx) -> R {
        let s = self.shape(x);
        if s.last() != Some(&fin) {
            return Err(self.tune_err(format!("linear expects last dim {fin}, got {s:?}")));
        }
        let compute = tune.nf4_compute;
        let n = fout.checked_mul(fin).ok_or(EstimateError::TooLarge)?;
        let storages = nf4_storages(n, tune.group_size, tune.double_quant);
        let w = self.param_of(vec![fout, fin], DType::I4)?;
        self.tensors[w].requires_grad = false;
        let mut consts = Vec::new();
        for &(e, dt) in &storages[1..] {
            consts.push(self.weight_constant(vec![e], dt)?);
        }
        // `bias.data = bias.data.to(x.dtype)`: the bias is kept in the compute dtype.
        let b = if bias {
            Some(self.param_of(vec![fout], compute)?)
        } else {
            None
        };
        let in_dt = self.dtype(x);
        let xc = self.cast(x, compute)?;
        let rows: u64 = s[..s.len() - 1].iter().product();
        let blocks = n.div_ceil(tune.group_size);
        let w_dq = r512(n.saturating_mul(compute.bits() / 8));
        let absmax_dq = if tune.double_quant {
            r512(blocks * 4)
        } else {
            0
        };
        let mut out_shape = s.clone();
        *out_shape.last_mut().unwrap_or(&mut 0) = fout;
        let mut ins = vec![xc];
        ins.extend(b);
        let rg = self.requires_grad(&ins);
        let y = self.alloc(out_shape, compute, StorageKind::Activation, rg)?;
        let mut op = self.op("gemm_4bit", "");
        op.flops = 2.0 * rows as f64 * n as f64;
        op.inputs = vec![xc, w];
        op.inputs.extend(consts);
        op.inputs.extend(b);
        op.outputs = vec![y];
        op.saved = vec![w];
        op.grads = self.grads_alloc(&ins);
        if rows > GEMM_4BIT_CUSTOM_ROWS {
            op.fwd_scratch = Bytes(w_dq + 2 * absmax_dq);
        }
        op.bwd_scratch = Bytes(w_dq + absmax_dq);
        self.record(op);
        self.cast(y, in_dt)
    }

    /// Inference weights other than NF4 (see [`super::tune`] for each format): INT8 weight-only,
    /// W8A8 with a calibrated per-tensor activation scale (the input is quantized to an int8
    /// tensor before the int8 GEMM), INT4 groups with fp16 scales and 4-bit zeros, and 2:4
    /// sparse values plus metadata. The weight keeps its logical `[out, in]` shape as the
    /// parameter; a sparse weight's storage holds only the kept half. The fused kernels write the
    /// output in the activation dtype and allocate nothing else.
    fn linear_packed(&mut self, x: TensorId, fin: u64, fout: u64, bias: bool, tune: &TuneCtx) -> R {
        if !self.inference {
            return Err(self.tune_err(format!(
                "{} weights are modelled for inference only",
                tune.quant.key()
            )));
        }
        let x = self.lowp(x)?;
        let s = self.shape(x);
        if s.last() != Some(&fin) {
            return Err(self.tune_err(format!("linear expects last dim {fin}, got {s:?}")));
        }
        let act = self.dtype(x);
        let n = fout.checked_mul(fin).ok_or(EstimateError::TooLarge)?;
        let (wdt, scale) = match tune.quant {
            Quantization::None => (self.precision.param_dtype(), None),
            Quantization::Int8 => (DType::I8, Some((vec![fout], act))),
            Quantization::W8a8 => (DType::I8, Some((vec![fout], DType::F32))),
            Quantization::Int4 => (DType::I4, None),
            Quantization::Nf4 => return Err(self.tune_err("nf4 goes through linear_nf4".into())),
        };
        let w = self.param_of(vec![fout, fin], wdt)?;
        let mut consts = Vec::new();
        if tune.sparsity == Sparsity::TwoFour {
            if !fin.is_multiple_of(16) {
                return Err(self.tune_err(format!(
                    "2:4 sparsity needs input features divisible by 16, got {fin}"
                )));
            }
            // Kept values: half the row; metadata: 1 bit per dense element (an int16 per 16
            // 16-bit elements, an int32 per 32 int8 elements).
            let st = self.tensors[w].storage;
            self.storages[st].bytes = Bytes((n / 2 * wdt.bits()).div_ceil(8));
            consts.push(self.weight_constant(vec![fout, fin / 8], DType::U8)?);
        }
        if let Some((shape, dt)) = scale {
            consts.push(self.weight_constant(shape, dt)?);
        }
        if tune.quant == Quantization::Int4 {
            let groups = fin.div_ceil(tune.group_size);
            consts.push(self.weight_constant(vec![groups, fout], DType::F16)?);
            consts.push(self.weight_constant(vec![groups, fout], DType::I4)?);
        }
        let b = if bias {
            Some(self.param_of(vec![fout], act)?)
        } else {
            None
        };
        let mut input = x;
        if tune.quant == Quantization::W8a8 {
            // Static (calibrated) per-tensor activation scale, a weight-side constant.
            consts.push(self.weight_constant(vec![1], DType::F32)?);
            input = self.no_grad_op(
                "quantize_per_tensor",
                &[x],
                s.clone(),
                DType::I8,
                Bytes::ZERO,
            )?;
        }
        let rows: u64 = s[..s.len() - 1].iter().product();
        let mut out_shape = s.clone();
        *out_shape.last_mut().unwrap_or(&mut 0) = fout;
        let y = self.alloc(out_shape, act, StorageKind::Activation, false)?;
        let mut op = self.op(
            if tune.sparsity == Sparsity::TwoFour {
                "sparse_mm"
            } else {
                "quantized_mm"
            },
            "",
        );
        let dense_flops = 2.0 * rows as f64 * n as f64;
        op.flops = if tune.sparsity == Sparsity::TwoFour {
            dense_flops / 2.0
        } else {
            dense_flops
        };
        op.inputs = vec![input, w];
        op.inputs.extend(consts);
        op.inputs.extend(b);
        op.outputs = vec![y];
        self.record(op);
        Ok(y)
    }

    /// `DynamicLayer.update`: `torch.cat([cache, new], dim=-2)` makes a new cache tensor (in
    /// prefill the cat with an empty tensor is a copy of the new keys), and the old one is freed
    /// once the new one is written: during the copy both exist. The cache is modelled as one
    /// persistent storage at its final length; the old tensor is the op's scratch. Returns the
    /// whole cache `[B, KV, T, D]` for the attention. A cache of another dtype than the keys
    /// (fp8/int8) is written by a quantizing copy.
    pub fn kv_update(&mut self, new: TensorId, cache: TensorId, past: u64) -> R {
        let cs = self.shape(cache);
        let ns = self.shape(new);
        if cs.len() != 4 || ns.len() != 4 || cs[0] != ns[0] || cs[1] != ns[1] || cs[3] != ns[3] {
            return Err(self.tune_err(format!("cache {cs:?} does not take keys {ns:?}")));
        }
        let old = super::units::tensor_bytes(
            super::units::Elems::of_shape(&[cs[0], cs[1], past, cs[3]])?,
            self.dtype(cache),
        )?;
        let all = self.alias(cache, cs, false);
        let mut op = self.op("kv_cache_update", "");
        op.inputs = vec![new, cache];
        op.outputs = vec![all];
        op.fwd_scratch = if past > 0 {
            old.round_up(512)
        } else {
            Bytes::ZERO
        };
        self.record(op);
        Ok(all)
    }

    /// `F.scaled_dot_product_attention` in inference: no mask (an unpadded batch: transformers
    /// 5.24 skips the mask, `_ignore_causal_mask_sdpa`, and passes `is_causal` in prefill) and
    /// grouped-query heads without `repeat_kv` (`use_gqa_in_sdpa` with no mask: `enable_gqa`; a
    /// single query with a mask: `pack_gqa`). The fused kernel's outputs are those of
    /// [`Graph::sdpa`] and are freed at once (nothing is saved). Returns `[B, S, H·D]`.
    pub fn sdpa_infer(&mut self, q: TensorId, k: TensorId, v: TensorId) -> R {
        let q = self.lowp(q)?;
        let k = self.lowp(k)?;
        let v = self.lowp(v)?;
        let (qs, ks) = (self.shape(q), self.shape(k));
        if qs.len() != 4
            || ks.len() != 4
            || ks[1] == 0
            || !qs[1].is_multiple_of(ks[1])
            || self.shape(v) != ks
        {
            return Err(self.tune_err(format!(
                "attention expects [B, H, S, D] queries and [B, KV, T, D] keys, got {qs:?}, {ks:?}"
            )));
        }
        let (b, h, s, d) = (qs[0], qs[1], qs[2], qs[3]);
        let t = ks[2];
        let dt = self.dtype(q);
        let kernel = SdpaKernel::select(false, dt, false, 0.0, d);
        let out = self.alloc(vec![b, h, s, d], dt, StorageKind::Activation, false)?;
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
        op.flops = 4.0 * (b * h) as f64 * d as f64 * pairs;
        op.inputs = vec![q, k, v];
        op.outputs = outs;
        self.record(op);
        self.view(out, vec![b, s, h * d])
    }

    /// The 256-entry fp32 dynamic map all double-quantized NF4 weights share
    /// (`name2qmap["dynamic"]` of `quantize_blockwise`), once per model.
    pub fn nf4_shared_constants(&mut self, tune: &TuneCtx) -> Result<(), EstimateError> {
        if tune.quant == Quantization::Nf4 && tune.double_quant {
            self.weight_constant(vec![256], DType::F32)?;
        }
        Ok(())
    }

    /// A basic slice (`hidden_states[:, -n:, :]`): a view, no memory.
    pub fn slice_view(&mut self, x: TensorId, shape: Vec<u64>) -> R {
        let rg = self.t(x).requires_grad;
        let y = self.alias(x, shape, rg);
        let mut op = self.op("slice", "");
        op.inputs = vec![x];
        op.outputs = vec![y];
        op.grads = if rg {
            vec![(x, GradFlow::Alloc)]
        } else {
            vec![]
        };
        self.record(op);
        Ok(y)
    }
}
