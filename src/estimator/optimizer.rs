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
//!
//! bitsandbytes 0.50 (`bitsandbytes/optim/optimizer.py`, `Optimizer2State.init_state`): 8-bit
//! Adam keeps both moments as uint8 (1 byte each per element) with one fp32 absmax per block of
//! 256 elements each, for every parameter of at least `min_8bit_size` = 4096 elements; smaller
//! ones keep fp32 moments. The quantization maps (`dynamic`, `udynamic`: 256 fp32 each) are shared
//! by all parameters. Its update is one fused kernel per parameter, with no temporaries, and its
//! step counter is a Python int. Paged variants allocate the state with `F.get_paged` in CUDA
//! managed memory, outside PyTorch's caching allocator, which the driver evicts to host memory
//! when the device runs short.
//!
//! Adafactor as transformers implements it (`transformers/optimization.py` `Adafactor.step`,
//! unchanged from v4.16 to v5; Shazeer & Stern 2018, arXiv:1804.04235): a Python loop over the
//! parameters, in fp32 whatever the parameter's dtype. A parameter of two or more dimensions keeps
//! the factored second moment, `exp_avg_sq_row` (`shape[:-1]`) and `exp_avg_sq_col`
//! (`shape[:-2] + shape[-1:]`); a vector keeps a full `exp_avg_sq`. Each keeps `state["RMS"]`, a
//! 0-d tensor on the device, and no first moment under HF Trainer's `optim="adafactor"`
//! (`beta1=None`). The step counter is a Python int. See [`OptimizerKind::adafactor_peak`] for
//! the step's temporaries.

use serde::{Deserialize, Serialize};

use super::hardware::Device;
use super::units::DType;

/// bitsandbytes `min_8bit_size`: smaller parameters keep 32-bit state.
pub const BNB_MIN_8BIT_SIZE: u64 = 4096;
/// bitsandbytes' block size of 8-bit optimizer state.
pub const BNB_STATE_BLOCK: u64 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    Sgd,
    SgdMomentum,
    #[default]
    Adam,
    Adamw,
    /// `bnb.optim.Adam8bit`.
    #[serde(rename = "adam8bit", alias = "adam_8bit")]
    Adam8bit,
    /// `bnb.optim.AdamW8bit`.
    #[serde(rename = "adamw8bit", alias = "adamw_8bit")]
    Adamw8bit,
    /// `bnb.optim.PagedAdamW8bit` (QLoRA's `paged_adamw_8bit`).
    #[serde(rename = "paged_adamw8bit", alias = "paged_adamw_8bit")]
    PagedAdamw8bit,
    /// `bnb.optim.PagedAdamW` (32-bit state, paged; `paged_adamw_32bit`).
    #[serde(rename = "paged_adamw", alias = "paged_adamw_32bit")]
    PagedAdamw,
    /// `transformers.optimization.Adafactor` (HF Trainer's `optim="adafactor"`).
    Adafactor,
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
    /// (Adam: `exp_avg`, `exp_avg_sq`; SGD with momentum: `momentum_buffer`). Adafactor's state
    /// is not parameter-sized ([`OptimizerKind::state_storages`]): 0.
    pub fn states_per_param(self) -> u64 {
        match self {
            OptimizerKind::Sgd | OptimizerKind::Adafactor => 0,
            OptimizerKind::SgdMomentum => 1,
            _ => 2,
        }
    }
    /// The state storages kept for one parameter of this shape stored in `dtype`, in exact
    /// bytes, in the order they are made (PyTorch: `zeros_like(param)` per state; bitsandbytes
    /// and Adafactor: see the module doc).
    pub fn state_storages(self, shape: &[u64], dtype: DType) -> Vec<u64> {
        let numel = shape.iter().fold(1u64, |a, &d| a.saturating_mul(d));
        let param_bytes = (numel.saturating_mul(dtype.bits())).div_ceil(8);
        let fp32 = numel.saturating_mul(4);
        match self {
            OptimizerKind::Adafactor => match *shape {
                [.., rows, cols] if rows > 0 && cols > 0 => {
                    vec![numel / cols * 4, numel / rows * 4, 4]
                }
                _ => vec![fp32, 4],
            },
            OptimizerKind::Sgd
            | OptimizerKind::SgdMomentum
            | OptimizerKind::Adam
            | OptimizerKind::Adamw => vec![param_bytes; self.states_per_param() as usize],
            OptimizerKind::Adam8bit | OptimizerKind::Adamw8bit | OptimizerKind::PagedAdamw8bit
                if numel >= BNB_MIN_8BIT_SIZE =>
            {
                let absmax = numel.div_ceil(BNB_STATE_BLOCK) * 4;
                vec![numel, numel, absmax, absmax]
            }
            _ => vec![fp32, fp32],
        }
    }
    /// State shared by every parameter (bitsandbytes' two 256-entry fp32 quantization maps), in
    /// exact bytes; present once any parameter keeps 8-bit state.
    pub fn shared_state(self, any_8bit: bool) -> Vec<u64> {
        match self {
            OptimizerKind::Adam8bit | OptimizerKind::Adamw8bit | OptimizerKind::PagedAdamw8bit
                if any_8bit =>
            {
                vec![1024, 1024]
            }
            _ => vec![],
        }
    }
    /// The state lives in CUDA managed memory (paged), not in PyTorch's allocator.
    pub fn is_paged(self) -> bool {
        matches!(
            self,
            OptimizerKind::PagedAdamw8bit | OptimizerKind::PagedAdamw
        )
    }
    /// The step is a Python loop over parameters whatever `optimizer_impl` says (transformers'
    /// Adafactor has no foreach or fused variant).
    pub fn loops_over_parameters(self) -> bool {
        self == OptimizerKind::Adafactor
    }
    /// A bitsandbytes optimizer (fused per-parameter update kernels).
    pub fn is_bnb(self) -> bool {
        matches!(
            self,
            OptimizerKind::Adam8bit
                | OptimizerKind::Adamw8bit
                | OptimizerKind::PagedAdamw8bit
                | OptimizerKind::PagedAdamw
        )
    }
    /// Bytes of the step counter kept per parameter in the training device's memory.
    /// `torch/optim/adam.py` `_init_group` makes `state["step"]` a 0-d float32 tensor: with
    /// `fused` (or `capturable`) on the parameter's device, otherwise on the CPU. On a CUDA run
    /// the latter costs no device memory; on a CPU run everything is device memory. SGD keeps
    /// no counter.
    pub fn step_counter_bytes(self, imp: OptimizerImpl, device: Device) -> u64 {
        match self {
            OptimizerKind::Adam | OptimizerKind::Adamw
                if imp == OptimizerImpl::Fused || device == Device::Cpu =>
            {
                4
            }
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
            (OptimizerKind::Adafactor, _) => 2,
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
    /// Peak temporary bytes of Adafactor's step over parameters given as (fp32 bytes of the
    /// parameter, whether it is stored in 16 bits), in the optimizer's order. Per parameter
    /// (`Adafactor.step`): `grad.float()` and `p.float()` copies when 16-bit; `update = grad**2 +
    /// eps` (two fp32 temporaries at once); the factored `_approx_sq_grad(row, col)` or
    /// `exp_avg_sq.rsqrt()` (made while the old `update` is held); `p.add_(-update)` (one more).
    /// Python names outlive the iteration: the previous parameter's `update` (and copies, until
    /// rebound first) is alive while `grad**2 + eps` is made, so the peak is `f(i−1) + (2 + c)
    /// f(i)` with `c` the copies. The row- and column-sized means and the 0-d norms are left
    /// out (a row or column of one parameter, next to its full-size temporaries).
    pub fn adafactor_peak(params: &[(u64, bool)]) -> u64 {
        let mut prev = 0u64;
        let mut peak = 0u64;
        for &(f, half) in params {
            let copies = if half { 2 } else { 0 };
            peak = peak.max(prev.saturating_add(f.saturating_mul(2 + copies)));
            prev = f;
        }
        peak
    }
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::Sgd => "sgd",
            OptimizerKind::SgdMomentum => "sgd_momentum",
            OptimizerKind::Adam => "adam",
            OptimizerKind::Adamw => "adamw",
            OptimizerKind::Adam8bit => "adam8bit",
            OptimizerKind::Adamw8bit => "adamw8bit",
            OptimizerKind::PagedAdamw8bit => "paged_adamw8bit",
            OptimizerKind::PagedAdamw => "paged_adamw",
            OptimizerKind::Adafactor => "adafactor",
        }
    }
    /// PyTorch's optimizers first (the reference set's), then bitsandbytes', then transformers'.
    pub const ALL: [OptimizerKind; 9] = [
        OptimizerKind::Sgd,
        OptimizerKind::SgdMomentum,
        OptimizerKind::Adam,
        OptimizerKind::Adamw,
        OptimizerKind::Adam8bit,
        OptimizerKind::Adamw8bit,
        OptimizerKind::PagedAdamw8bit,
        OptimizerKind::PagedAdamw,
        OptimizerKind::Adafactor,
    ];
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

    /// Dettmers et al. 2022 (8-bit optimizers): 2 bytes of state per parameter instead of 8,
    /// plus one fp32 absmax per 256 values of each state.
    #[test]
    fn eight_bit_adam_keeps_two_bytes_per_parameter() {
        let n = 4096 * 256;
        let s: u64 = OptimizerKind::Adamw8bit
            .state_storages(&[n], DType::BF16)
            .iter()
            .sum();
        assert_eq!(s, 2 * n + 2 * 4 * n / 256);
        // Small tensors (norm weights) keep fp32 state.
        assert_eq!(
            OptimizerKind::Adamw8bit.state_storages(&[4095], DType::BF16),
            vec![4095 * 4; 2]
        );
        assert_eq!(
            OptimizerKind::Adamw.state_storages(&[10], DType::BF16),
            vec![20, 20]
        );
    }

    /// Shazeer & Stern 2018 (arXiv:1804.04235, §3): an `n × m` matrix keeps `n + m` second-moment
    /// values instead of `n·m`, in fp32 whatever the weight's dtype; a vector keeps all of its own.
    /// Each parameter adds its 0-d `RMS` (4 B). Exact.
    #[test]
    fn adafactor_keeps_a_row_and_a_column_per_matrix() {
        let bert_word_embeddings = [30522, 1024];
        assert_eq!(
            OptimizerKind::Adafactor.state_storages(&bert_word_embeddings, DType::BF16),
            vec![30522 * 4, 1024 * 4, 4]
        );
        // A convolution's `[O, I, kh, kw]`: rows over `shape[:-1]`, columns over
        // `shape[:-2] + shape[-1:]`.
        assert_eq!(
            OptimizerKind::Adafactor.state_storages(&[64, 3, 7, 7], DType::F32),
            vec![64 * 3 * 7 * 4, 64 * 3 * 7 * 4, 4]
        );
        assert_eq!(
            OptimizerKind::Adafactor.state_storages(&[1024], DType::F32),
            vec![1024 * 4, 4]
        );
        assert_eq!(OptimizerKind::Adafactor.states_per_param(), 0);
    }

    /// The step's temporaries (`Adafactor.step`): two fp32 parameter-sized tensors at once, plus
    /// the previous parameter's `update`, plus the fp32 copies of a 16-bit parameter and its
    /// gradient. Exact.
    #[test]
    fn adafactor_step_peaks_at_the_largest_parameter_after_its_neighbour() {
        let f32 = [(400, false), (100, false), (40, false)];
        assert_eq!(OptimizerKind::adafactor_peak(&f32), 2 * 400);
        let f = [(100, false), (400, false)];
        assert_eq!(OptimizerKind::adafactor_peak(&f), 100 + 2 * 400);
        let half = [(100, true), (400, true)];
        assert_eq!(OptimizerKind::adafactor_peak(&half), 100 + 4 * 400);
        assert_eq!(
            OptimizerKind::Adafactor.step_temporaries(OptimizerImpl::Foreach),
            2
        );
        assert!(OptimizerKind::Adafactor.loops_over_parameters());
    }
}
