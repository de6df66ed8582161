//! The linear layers of a transformer block in every weight format ([`Graph::block_linear`]:
//! dense, NF4, INT8, W8A8, INT4, FP8 block-wise, 2:4 sparse), from `bitsandbytes/nn/modules.py`
//! (`Linear4bit.forward`), `bitsandbytes/autograd/_functions.py` (`MatMul4Bit`),
//! `bitsandbytes/backends/cuda/ops.py` (`gemm_4bit`, `_dequant_linear_fallback`) and
//! transformers' `integrations/finegrained_fp8.py` (`FP8Linear`, `FP8Expert.linear`).

use super::R;
use crate::estimator::config::Recipe;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, StorageKind, TensorId};
use crate::estimator::torchao_nf4;
use crate::estimator::tune::{
    fp8_scale_shape, nf4_storages, Quantization, Sparsity, Target, TuneCtx, FP8_BLOCK,
};
use crate::estimator::units::{Bytes, DType};

/// `bitsandbytes::gemm_4bit` runs its own kernel up to this many rows
/// (`_GEMM_4BIT_CUSTOM_FLOOR_M`); above it the CUDA backend may fall back to dequantizing the
/// weight and calling `F.linear` (always above 1536 rows, by an architecture heuristic between).
/// The fallback is modelled for every larger product: it is the one that allocates.
pub const GEMM_4BIT_CUSTOM_ROWS: u64 = 4;

impl Graph {
    /// One projection of a transformer block (`q_proj`, ..., `down_proj`) in the plan's weight
    /// format, wrapped in LoRA adapters when the plan targets it.
    /// Plain dense layers go through the tensor-parallel constructors (column-parallel for q, k,
    /// v, gate, up; row-parallel for o, down), which are `linear` itself on one GPU. `cpu`: the
    /// step runs on the CPU's kernels (the adapters' dropout is the CPU's composite).
    #[allow(clippy::too_many_arguments)]
    pub fn block_linear(
        &mut self,
        leaf: &str,
        x: TensorId,
        fin: u64,
        fout: u64,
        bias: bool,
        target: Target,
        tune: &TuneCtx,
        cpu: bool,
    ) -> R {
        let adapted = tune.lora.as_ref().is_some_and(|l| l.wraps(target));
        let dense = tune.quant.keeps_linears_dense() && tune.sparsity == Sparsity::None;
        if dense && !adapted {
            return match target {
                Target::O | Target::Down => self.row_parallel_linear(leaf, x, fin, fout, bias),
                _ => self.column_parallel_linear(leaf, x, fin, fout, bias),
            };
        }
        if self.tp_size() > 1 {
            return Err(self.bad_shape(
                "LoRA adapters and quantized weights are not modelled with tensor parallelism",
            ));
        }
        self.push(leaf);
        let r = (|| {
            let y = if dense {
                let w = self.param(vec![fout, fin])?;
                let b = if bias {
                    Some(self.param(vec![fout])?)
                } else {
                    None
                };
                self.linear_with(x, w, b)?
            } else {
                self.quantized_linear(x, fin, fout, bias, tune)?
            };
            match &tune.lora {
                Some(l) if l.wraps(target) && tune.recipe == Recipe::Torchtune => {
                    self.torchtune_lora_branch(x, y, fin, fout, l, cpu)
                }
                Some(l) if l.wraps(target) => {
                    self.lora_branch(x, y, fin, fout, l, tune.quant == Quantization::Nf4, cpu)
                }
                _ => Ok(y),
            }
        })();
        self.pop();
        r
    }

    /// An `nn.Linear` of a block that no LoRA target names (the MoE shared experts and their
    /// gate): the plan's weight format replaces it as it replaces
    /// [`Graph::block_linear`]'s layers (transformers converts every `nn.Linear` outside
    /// `modules_to_not_convert`).
    pub fn weight_linear(
        &mut self,
        leaf: &str,
        x: TensorId,
        fin: u64,
        fout: u64,
        bias: bool,
        tune: &TuneCtx,
    ) -> R {
        if tune.quant.keeps_linears_dense() && tune.sparsity == Sparsity::None {
            return self.linear(leaf, x, fin, fout, bias);
        }
        self.push(leaf);
        let r = self.quantized_linear(x, fin, fout, bias, tune);
        self.pop();
        r
    }

    fn quantized_linear(
        &mut self,
        x: TensorId,
        fin: u64,
        fout: u64,
        bias: bool,
        tune: &TuneCtx,
    ) -> R {
        if tune.quant == Quantization::Nf4 {
            self.linear_nf4(x, fin, fout, bias, tune)
        } else {
            self.linear_packed(x, fin, fout, bias, tune)
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
        if tune.recipe == Recipe::Torchtune {
            return self.linear_torchao_nf4(x, fin, fout, bias);
        }
        let s = self.shape(x);
        if s.last() != Some(&fin) {
            return Err(self.bad_shape(format!("linear expects last dim {fin}, got {s:?}")));
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
        let w_dq = Bytes(n.saturating_mul(compute.bits() / 8))
            .allocator_block()
            .0;
        let absmax_dq = if tune.double_quant {
            Bytes(blocks * 4).allocator_block().0
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

    /// torchtune 0.1's quantized `LoRALinear` base: `linear_nf4(x, weight)` (torchao 0.1
    /// `LinearNF4`), an autograd function that saves only the `NF4Tensor` and computes
    /// `F.linear(x, weight.to(x.dtype))` forward and `grad @ weight.to(grad.dtype)` backward,
    /// each `to` a whole [`torchao_nf4::dequantize`]: 14 bytes per weight element at its peak,
    /// before the product, then the bf16 weight (2 bytes per element) during it. torchtune
    /// quantizes no bias (`LoRALinear` refuses one under `quantize_base`).
    fn linear_torchao_nf4(&mut self, x: TensorId, fin: u64, fout: u64, bias: bool) -> R {
        let s = self.shape(x);
        if s.last() != Some(&fin) {
            return Err(self.bad_shape(format!("linear expects last dim {fin}, got {s:?}")));
        }
        if bias {
            return Err(self.bad_shape(
                "torchtune's quantized LoRALinear has no bias (NotImplementedError in LoRALinear)",
            ));
        }
        let n = fout.checked_mul(fin).ok_or(EstimateError::TooLarge)?;
        if !n.is_multiple_of(torchao_nf4::BLOCK * torchao_nf4::SCALER_BLOCK) {
            return Err(self.bad_shape(format!(
                "torchao's NF4 needs a weight of a multiple of {} elements; [{fout}, {fin}] is not",
                torchao_nf4::BLOCK * torchao_nf4::SCALER_BLOCK
            )));
        }
        let [table, mean, factor, scalers, data] = torchao_nf4::storages(n);
        let w = self.param_of(vec![fout, fin], data.1)?;
        self.tensors[w].requires_grad = false;
        let mut consts = Vec::new();
        for (e, dt) in [table, mean, factor, scalers] {
            consts.push(self.weight_constant(vec![e], dt)?);
        }
        let dt = self.dtype(x);
        let mut out_shape = s.clone();
        *out_shape.last_mut().unwrap_or(&mut 0) = fout;
        let rg = self.requires_grad(&[x]);
        let y = self.alloc(out_shape, dt, StorageKind::Activation, rg)?;
        let rows: u64 = s[..s.len() - 1].iter().product();
        let (y_bytes, x_bytes) = (self.bytes(y).0, self.bytes(x).0);
        // The dequantization's temporaries are gone before the product's output (or input
        // gradient) exists; the bf16 weight is live beside it.
        let weight = 2 * n;
        let peak = torchao_nf4::dequantize_peak(n);
        let mut op = self.op("linear_nf4", "");
        op.flops = 2.0 * rows as f64 * n as f64;
        op.inputs = vec![x, w];
        op.inputs.extend(consts);
        op.outputs = vec![y];
        op.saved = vec![w];
        op.grads = self.grads_alloc(&[x]);
        op.fwd_scratch = Bytes(peak.saturating_sub(y_bytes).max(weight));
        op.bwd_scratch = Bytes(peak.saturating_sub(x_bytes).max(weight));
        self.record(op);
        Ok(y)
    }

    /// Inference weights other than NF4 (see [`crate::estimator::tune`] for each format): INT8 weight-only,
    /// W8A8 with a calibrated per-tensor activation scale (the input is quantized to an int8
    /// tensor before the int8 GEMM), INT4 groups with fp16 scales and 4-bit zeros, and 2:4
    /// sparse values plus metadata. The weight keeps its logical `[out, in]` shape as the
    /// parameter; a sparse weight's storage holds only the kept half. The fused kernels write the
    /// output in the activation dtype and allocate nothing else.
    fn linear_packed(&mut self, x: TensorId, fin: u64, fout: u64, bias: bool, tune: &TuneCtx) -> R {
        if !self.inference {
            return Err(self.bad_shape(format!(
                "{} weights are modelled for inference only",
                tune.quant.key()
            )));
        }
        let x = self.lowp(x)?;
        let s = self.shape(x);
        if s.last() != Some(&fin) {
            return Err(self.bad_shape(format!("linear expects last dim {fin}, got {s:?}")));
        }
        let act = self.dtype(x);
        let n = fout.checked_mul(fin).ok_or(EstimateError::TooLarge)?;
        if tune.quant == Quantization::Fp8 {
            let w = self.param_of(vec![fout, fin], DType::F8e4m3)?;
            let scale_inv = self.weight_constant(fp8_scale_shape(fout, fin), DType::F32)?;
            let b = if bias {
                Some(self.param_of(vec![fout], act)?)
            } else {
                None
            };
            let y = self.fp8_matmul(x, w, scale_inv)?;
            // `output = output + self.bias`: out of place, after the GEMM.
            return match b {
                Some(b) => self.add(y, b, false),
                None => Ok(y),
            };
        }
        let (wdt, scale) = match tune.quant {
            Quantization::None => (self.precision.param_dtype(), None),
            Quantization::Int8 => (DType::I8, Some((vec![fout], act))),
            Quantization::W8a8 => (DType::I8, Some((vec![fout], DType::F32))),
            Quantization::Int4 => (DType::I4, None),
            Quantization::Nf4 | Quantization::Fp8 | Quantization::Mxfp4 => {
                return Err(self.bad_shape(format!(
                    "{} weights are not packed by linear_packed",
                    tune.quant.key()
                )))
            }
        };
        let w = self.param_of(vec![fout, fin], wdt)?;
        let mut consts = Vec::new();
        if tune.sparsity == Sparsity::TwoFour {
            if !fin.is_multiple_of(16) {
                return Err(self.bad_shape(format!(
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

    /// `FP8Linear.forward` / `FP8Expert.linear` with dynamic activations: `act_quant(x, 128)`
    /// (an e4m3 copy of `x` and an fp32 scale per token and group of 128 input features, from
    /// DeepSeek-V3's `inference/kernel.py`; it asserts the features divide by 128), then
    /// `w8a8_block_fp8_matmul` of that copy with the e4m3 weight `[out, in]` and its
    /// `weight_scale_inv` tiles, into a new tensor in `x`'s dtype. The copy and its scales die
    /// with the call.
    pub fn fp8_matmul(&mut self, x: TensorId, w: TensorId, scale_inv: TensorId) -> R {
        let s = self.shape(x);
        let fin = s.last().copied().unwrap_or(0);
        let fout = self.shape(w)[0];
        if fin == 0 || !fin.is_multiple_of(FP8_BLOCK) {
            return Err(self.bad_shape(format!(
                "FP8 activation quantization works in groups of {FP8_BLOCK} input features; this layer has {fin}"
            )));
        }
        let act = self.dtype(x);
        let rows: u64 = s[..s.len() - 1].iter().product();
        let mut group_shape = s.clone();
        *group_shape.last_mut().unwrap_or(&mut 0) = fin / FP8_BLOCK;
        let q = self.alloc(s.clone(), DType::F8e4m3, StorageKind::Activation, false)?;
        let qs = self.alloc(group_shape, DType::F32, StorageKind::Activation, false)?;
        let mut op = self.op("act_quant", "");
        op.flops = 3.0 * (rows * fin) as f64;
        op.inputs = vec![x];
        op.outputs = vec![q, qs];
        self.record(op);
        let mut out_shape = s;
        *out_shape.last_mut().unwrap_or(&mut 0) = fout;
        let y = self.alloc(out_shape, act, StorageKind::Activation, false)?;
        let mut op = self.op("fp8_block_mm", "");
        op.flops = 2.0 * rows as f64 * (fin * fout) as f64;
        op.inputs = vec![q, qs, w, scale_inv];
        op.outputs = vec![y];
        self.record(op);
        Ok(y)
    }

    /// The 256-entry fp32 dynamic map all double-quantized NF4 weights share
    /// (`name2qmap["dynamic"]` of `quantize_blockwise`), once per model.
    pub fn nf4_shared_constants(&mut self, tune: &TuneCtx) -> Result<(), EstimateError> {
        // torchao's `NF4Tensor` keeps no shared map.
        if tune.quant == Quantization::Nf4 && tune.double_quant && tune.recipe != Recipe::Torchtune
        {
            self.weight_constant(vec![256], DType::F32)?;
        }
        Ok(())
    }
}
