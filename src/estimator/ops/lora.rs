//! peft's LoRA adapters around a base layer (`peft/tuners/lora/layer.py` `Linear.forward`,
//! `peft/tuners/lora/bnb.py` `Linear4bit.forward`).

use super::{Pw, R};
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::tune::LoraSpec;
use crate::estimator::units::DType;

impl Graph {
    /// peft's LoRA around a base layer's output `result` (`lora.Linear.forward`):
    /// `result + lora_B(lora_A(dropout(x))) * scaling`, with fp32 adapters. The plain layer casts
    /// `x` to the adapters' dtype first (`_cast_input_dtype`, a new fp32 copy of a bf16 input
    /// that `lora_A` then saves: one per targeted projection, even when they share `x`), adds in
    /// the promoted dtype and casts the sum back (`result.to(torch_result_dtype)`). The 4-bit
    /// layer (`lora.bnb.Linear4bit.forward`) first clones `result` ("defensively", for backprop
    /// through views), casts only outside autocast, casts the adapters' output to the result's
    /// dtype and adds. `lora_A` saves its input, `lora_B` the rank-sized `lora_A` output; the
    /// product with the Python scalar `scaling` saves nothing. `lora_dropout` is an
    /// `nn.Dropout`: on the CPU its composite saves a noise tensor in the input's dtype, and only
    /// where the input needs a gradient (LoRA in the first layer sees inputs that need none:
    /// the frozen embeddings and norms), see [`Graph::dropout_on`]. The 4-bit layer asks
    /// `torch.is_autocast_enabled()` without a device, which torch 2.x answers for CUDA alone:
    /// under the CPU's autocast it casts as outside autocast (a bf16 input becomes an fp32 copy,
    /// which `lora_A`'s autocast then casts to a saved bf16 copy of its own).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn lora_branch(
        &mut self,
        x: TensorId,
        result: TensorId,
        fin: u64,
        fout: u64,
        l: &LoraSpec,
        bnb: bool,
        cpu: bool,
    ) -> R {
        let adt = DType::F32;
        let a_w = self.scoped("lora_A", |g| g.adapter_param(vec![l.rank, fin], adt))?;
        let b_w = self.scoped("lora_B", |g| g.adapter_param(vec![fout, l.rank], adt))?;
        let res_dt = self.dtype(result);
        let autocast = self.precision.autocast().is_some() && !cpu;
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
        let xa = self.scoped("lora_dropout", |g| g.dropout_on(xa, l.dropout, cpu))?;
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
            self.add(result, s, false)
        } else {
            let sum = self.add(result, s, false)?;
            self.cast(sum, res_dt)
        }
    }

    /// torchtune 0.1's `LoRALinear.forward` (`modules/peft/lora.py`): the adapters are built in
    /// the model's dtype (under `set_default_dtype(bf16)`), and nothing is cast:
    /// `out + (alpha / rank) * lora_b(lora_a(dropout(x)))`.
    pub(super) fn torchtune_lora_branch(
        &mut self,
        x: TensorId,
        result: TensorId,
        fin: u64,
        fout: u64,
        l: &LoraSpec,
        cpu: bool,
    ) -> R {
        let dt = self.dtype(x);
        let a_w = self.scoped("lora_a", |g| g.adapter_param(vec![l.rank, fin], dt))?;
        let b_w = self.scoped("lora_b", |g| g.adapter_param(vec![fout, l.rank], dt))?;
        let xa = self.scoped("dropout", |g| g.dropout_on(x, l.dropout, cpu))?;
        let a = self.scoped("lora_a", |g| g.linear_with(xa, a_w, None))?;
        let b = self.scoped("lora_b", |g| g.linear_with(a, b_w, None))?;
        let s = self.pointwise(
            "mul",
            b,
            dt,
            Pw {
                flops: 1.0,
                ..Pw::default()
            },
        )?;
        self.add(result, s, false)
    }
}
