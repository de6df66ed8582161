//! Optimizers as PyTorch implements them on CUDA: which state they keep per parameter and which
//! temporaries their step allocates.
//!
//! Source: `torch/optim/adam.py` (`_multi_tensor_adam`), `torch/optim/sgd.py`
//! (`_multi_tensor_sgd`), PyTorch 2.x. The foreach Adam/AdamW step computes
//! `exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)`: one parameter-sized temporary per dtype
//! group, live together with params, grads and both moments (the step's peak when activations are
//! small). `fused=True` runs one kernel per group with no temporary. Adam's step counters live
//! on the CPU (`capturable=False`) and cost no device memory, except with `fused=True` or when
//! the step runs on the CPU ([`OptimizerKind::step_counter_bytes`]).

use serde::{Deserialize, Serialize};

use super::config::Device;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    Sgd,
    SgdMomentum,
    #[default]
    Adam,
    Adamw,
}

/// Which implementation runs the step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerImpl {
    /// PyTorch's default on CUDA: `_foreach_*` ops over all tensors of a dtype group.
    #[default]
    Foreach,
    /// `fused=True`: one fused kernel, no temporaries.
    Fused,
    /// `foreach=False`: a Python loop over parameters; temporaries are one parameter at a time.
    ForLoop,
}

impl OptimizerKind {
    /// State tensors per parameter, each of the parameter's size and dtype
    /// (Adam: `exp_avg`, `exp_avg_sq`; SGD with momentum: `momentum_buffer`).
    pub fn states_per_param(self) -> u64 {
        match self {
            OptimizerKind::Sgd => 0,
            OptimizerKind::SgdMomentum => 1,
            OptimizerKind::Adam | OptimizerKind::Adamw => 2,
        }
    }
    /// Bytes of the step counter kept per parameter in the training device's memory.
    /// `torch/optim/adam.py` `_init_group` makes `state["step"]` a 0-d float32 tensor: with
    /// `fused` (or `capturable`) on the parameter's device, otherwise on the CPU. On a CUDA run
    /// the latter costs no device memory; on a CPU run everything is device memory. SGD keeps
    /// no counter.
    pub fn step_counter_bytes(self, imp: OptimizerImpl, device: Device) -> u64 {
        match self {
            OptimizerKind::Adam | OptimizerKind::Adamw if imp == OptimizerImpl::Fused || device == Device::Cpu => 4,
            _ => 0,
        }
    }
    /// Parameter-sized temporaries the step holds at once: per dtype group (foreach), or per
    /// parameter (for-loop, `_single_tensor_adam`: `denom = (exp_avg_sq.sqrt() /
    /// bias_correction2_sqrt).add_(eps)` makes the square root and the quotient; besides them
    /// the previous parameter's `denom` is alive until the name is rebound, see
    /// [`OptimizerKind::for_loop_peak`]). SGD updates in place.
    pub fn step_temporaries(self, imp: OptimizerImpl) -> u64 {
        match (self, imp) {
            (OptimizerKind::Adam | OptimizerKind::Adamw, OptimizerImpl::Foreach) => 1,
            (OptimizerKind::Adam | OptimizerKind::Adamw, OptimizerImpl::ForLoop) => 2,
            _ => 0,
        }
    }
    /// Peak temporary bytes of a for-loop step over parameters of these (rounded) sizes, in the
    /// optimizer's parameter order: while parameter `i`'s temporaries exist, the previous
    /// parameter's `denom` (one of its temporaries) is still referenced.
    pub fn for_loop_peak(self, sizes: &[u64]) -> u64 {
        let k = self.step_temporaries(OptimizerImpl::ForLoop);
        if k == 0 {
            return 0;
        }
        let mut prev = 0u64;
        let mut peak = 0u64;
        for &b in sizes {
            peak = peak.max(prev.saturating_add(b.saturating_mul(k)));
            prev = b;
        }
        peak
    }
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::SgdMomentum => "sgd_momentum",
            OptimizerKind::Adam => "adam",
            OptimizerKind::Adamw => "adamw",
        }
    }
    pub const ALL: [OptimizerKind; 4] = [OptimizerKind::Sgd, OptimizerKind::SgdMomentum, OptimizerKind::Adam, OptimizerKind::Adamw];
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ZeRO (Rajbhandari et al. 2020, §3.1): mixed-precision Adam keeps 16 bytes per parameter:
    /// fp16 weights and gradients (2 + 2) and fp32 master weights, momentum and variance (4+4+4).
    #[test]
    fn zero_paper_sixteen_bytes_per_param() {
        let fp16_copy = 2 + 2;
        let master_and_states = 4 * (1 + OptimizerKind::Adam.states_per_param());
        assert_eq!(fp16_copy + master_and_states, 16);
    }
}
