//! The settings of one step ([`Setup`]), the choices they are made of (checkpointing,
//! attention kernel, causal mask, device) and what a model builder is given ([`BuildCtx`]).
//! Fine-tuning and inference settings are described in [`super::tune`].

use serde::{Deserialize, Serialize};

use super::error::EstimateError;
use super::graph::Graph;
pub use super::graph::Precision;
pub use super::hardware::Device;
pub use super::optimizer::{OptimizerImpl, OptimizerKind};
use super::tune::{unsupported, LoraSpec, INT4_GROUP, NF4_BLOCK};
pub use super::tune::{Frozen, KvDtype, LoraConfig, Mode, Quantization, Recipe, Sparsity, TuneCtx};
use super::units::DType;

/// Gradient checkpointing policy (non-reentrant `torch.utils.checkpoint`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "CkptRepr", into = "CkptRepr")]
pub enum Checkpointing {
    #[default]
    None,
    /// Each stage of a staged CNN (ResNet `layer1..4`).
    Stage,
    /// Each block: residual block, transformer layer, child of `features`, conv block.
    Block,
    /// `checkpoint_sequential` with round(√N) segments (Chen et al. 2016).
    Sqrt,
    /// `checkpoint_sequential` with k segments.
    Segments(u32),
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum CkptRepr {
    Name(String),
    K(u32),
}

impl TryFrom<CkptRepr> for Checkpointing {
    type Error = String;
    fn try_from(r: CkptRepr) -> Result<Self, String> {
        match r {
            CkptRepr::K(0) => Err("checkpoint segments must be at least 1".into()),
            CkptRepr::K(k) => Ok(Checkpointing::Segments(k)),
            CkptRepr::Name(s) => Checkpointing::parse(&s),
        }
    }
}

impl From<Checkpointing> for CkptRepr {
    fn from(c: Checkpointing) -> Self {
        match c {
            Checkpointing::Segments(k) => CkptRepr::K(k),
            other => CkptRepr::Name(other.name()),
        }
    }
}

impl Checkpointing {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Checkpointing::None),
            "stage" => Ok(Checkpointing::Stage),
            "block" | "layer" => Ok(Checkpointing::Block),
            "sqrt" => Ok(Checkpointing::Sqrt),
            _ => match s.strip_prefix("k").or(Some(s)).and_then(|k| k.parse::<u32>().ok()) {
                Some(k) if k >= 1 => Ok(Checkpointing::Segments(k)),
                _ => Err(format!("unknown checkpointing '{s}': use none, stage, block, layer, sqrt or a number of segments")),
            },
        }
    }
    pub fn name(self) -> String {
        match self {
            Checkpointing::None => "none".into(),
            Checkpointing::Stage => "stage".into(),
            Checkpointing::Block => "block".into(),
            Checkpointing::Sqrt => "sqrt".into(),
            Checkpointing::Segments(k) => format!("k{k}"),
        }
    }
}

/// Attention implementation of transformer models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnImpl {
    /// `torch.nn.functional.scaled_dot_product_attention` (memory-efficient or cuDNN kernel).
    #[default]
    Sdpa,
    /// Explicit `softmax(QKᵀ/√d)V` with the score matrix materialised.
    Eager,
}

/// Whether transformers materialises the causal mask of a language model
/// (`transformers/masking_utils.py`, 5.24). `Materialized`: a `[B, 1, S, S]` mask is built and passed
/// to attention — for a batch with padding (`attention_mask` with zeros), packed sequences
/// (position ids that restart), under `torch.compile`/export, and under the FakeTensorMode the
/// reference set was measured with (`find_packed_sequence_indices` cannot prove the batch
/// unpacked); SDPA then converts it to an additive float mask per call and keeps it for
/// backward, and grouped-query attention repeats k/v (`use_gqa_in_sdpa` needs no mask).
/// `Skipped`: an unpadded batch of sequential positions on a GPU — `sdpa_mask` returns `None`
/// (`_ignore_causal_mask_sdpa`), SDPA runs with `is_causal=True` and `enable_gqa=True`. Eager
/// attention always materialises its mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CausalMask {
    #[default]
    Materialized,
    Skipped,
}

/// The settings of one step, every name already resolved: what the core simulates. The plan
/// layer (`crate::plan::Plan`) reads them from the user's keys.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// Micro-batch size.
    pub batch: u64,
    /// Square image side in pixels (vision models); `None`: the model's default.
    pub res: Option<u64>,
    /// Sequence length in tokens (text models); `None`: the model's default.
    pub seq: Option<u64>,
    pub dtype: Precision,
    pub opt: OptimizerKind,
    /// How the optimizer step runs; `None`: PyTorch's own choice ([`Setup::optimizer_impl`]).
    pub optimizer_impl: Option<OptimizerImpl>,
    pub ckpt: Checkpointing,
    pub attn: AttnImpl,
    pub causal_mask: CausalMask,
    /// LSTM: whether the cuDNN RNN kernel runs; `None`: on CUDA only.
    pub cudnn: Option<bool>,
    pub device: Device,
    /// Gradient-accumulation micro-batches per optimizer step.
    pub accumulation: u32,
    pub mode: Mode,
    pub lora: Option<LoraConfig>,
    pub quantization: Quantization,
    pub double_quant: bool,
    pub group_size: Option<u64>,
    pub kv_cache_dtype: Option<KvDtype>,
    pub sparsity: Sparsity,
    pub frozen: Option<Frozen>,
    /// Inference: prompt tokens per sequence.
    pub context: Option<u64>,
    /// Inference: tokens generated per sequence.
    pub new_tokens: Option<u64>,
    /// Multi-GPU layout; `None`: one GPU.
    pub parallel: Option<super::parallel::Parallel>,
    /// What lives in host memory instead of on the GPU.
    pub offload: Option<super::parallel::Offload>,
    /// The caching allocator's options (`PYTORCH_CUDA_ALLOC_CONF`) for its replay.
    pub allocator: super::allocator::AllocatorSettings,
    /// The CUDA toolkit and module loading, for the context ([`super::context`]).
    pub stack: super::context::Stack,
    /// The busiest expert's share of a sparse layer's tokens, as a multiple of the balanced one.
    pub expert_skew: Option<f64>,
    /// How a mixture of experts runs its experts; `None`: the eager loop.
    pub experts_impl: Option<ExpertsImpl>,
    /// Images per sample of a vision-language model; `None`: one.
    pub images: Option<u64>,
    /// Whether the step runs under a `TorchDispatchMode` ([`super::simulate::StepOptions`]).
    pub dispatch_mode: bool,
    /// What the loop's `zero_grad` does to `.grad` between steps.
    pub zero_grad: ZeroGrad,
    /// A validation pass after the training steps, at this batch (`None`: none).
    pub validation_batch: Option<u64>,
    /// Whose training loop builds the model and runs the step.
    pub recipe: Recipe,
}

/// What the training loop's `zero_grad()` does to the parameters' gradients before the next
/// backward (`torch/optim/optimizer.py` `Optimizer.zero_grad`, `torch/nn/modules/module.py`
/// `Module.zero_grad`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZeroGrad {
    /// `set_to_none=True`, the default since PyTorch 2.0: `.grad` is dropped, and the next
    /// backward allocates it again, so gradients live from the backward to the next step only.
    #[default]
    SetToNone,
    /// `set_to_none=False`, the default before PyTorch 2.0 (and what the HF Trainer's
    /// `model.zero_grad()` did with it): `.grad` is zeroed in place and kept, so the gradients
    /// are resident through the whole next step, forward included, and the backward adds into
    /// them in place, as in a later micro-batch of gradient accumulation.
    Zero,
}

/// transformers' `experts_implementation` for the routed experts of a mixture of experts
/// (`integrations/moe.py`, `ExpertsInterface`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertsImpl {
    /// The modeling file's own per-expert Python loop (`experts_implementation="eager"`).
    #[default]
    Eager,
    /// `grouped_mm_experts_forward`: the token-expert pairs sorted by expert, two
    /// `torch._grouped_mm` calls over all of them.
    GroupedMm,
}

impl ExpertsImpl {
    /// The name a plan gives it.
    pub fn key(self) -> &'static str {
        match self {
            ExpertsImpl::Eager => "eager",
            ExpertsImpl::GroupedMm => "grouped_mm",
        }
    }
}

/// How the tokens of a sparse layer meet its experts: the router's skew and the experts'
/// implementation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Routing {
    pub skew: f64,
    pub experts: ExpertsImpl,
    /// The expert-parallel dispatch's capacity, if any (dropless otherwise).
    pub capacity: Option<Capacity>,
}

/// Megatron-Core's expert capacity (`moe_expert_capacity_factor`,
/// `moe_pad_expert_input_to_capacity`): each rank sends an expert at most
/// `⌈T·k / E · factor⌉` of its tokens (`get_capacity` in `megatron/core/transformer/moe/
/// moe_utils.py`), dropping the rest; padded, it sends exactly that many.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    pub factor: f64,
    pub pad: bool,
}

impl Capacity {
    /// Tokens a rank sends each expert at most, of its `tokens · top_k` assignments over
    /// `experts`.
    pub fn per_expert(&self, tokens: u64, top_k: u64, experts: u64) -> u64 {
        let share = tokens.saturating_mul(top_k) as f64 / experts.max(1) as f64;
        (share * self.factor).ceil() as u64
    }
}

impl Setup {
    /// The optimizer implementation that runs: the setting, else PyTorch's default
    /// (`torch/optim/optimizer.py` `_default_to_fused_or_foreach`): foreach when all parameters
    /// are on CUDA, the per-parameter for-loop on the CPU.
    /// Adafactor always loops over its parameters ([`OptimizerKind::loops_over_parameters`]).
    pub fn optimizer_impl(&self) -> OptimizerImpl {
        if self.opt.loops_over_parameters() {
            return OptimizerImpl::ForLoop;
        }
        self.optimizer_impl.unwrap_or(match self.device {
            Device::Cuda => OptimizerImpl::Foreach,
            Device::Cpu => OptimizerImpl::ForLoop,
        })
    }
}

/// What a model builder needs, resolved from the setup.
#[derive(Clone, Debug)]
pub struct BuildCtx {
    pub batch: u64,
    pub res: u64,
    pub seq: u64,
    pub precision: Precision,
    pub ckpt: Checkpointing,
    pub attn: AttnImpl,
    pub causal_mask: CausalMask,
    pub cudnn: bool,
    pub device: Device,
    /// Fine-tuning and inference settings (plain training: the default).
    pub tune: TuneCtx,
    /// Tensor-parallel degree the builder shards attention and MLP over (Megatron-LM); 1 = none.
    /// Builders apply it through the hook in [`super::parallel::tp`].
    pub tp: u64,
    /// Megatron sequence parallelism: the non-tensor-parallel regions (norms, dropout, residual)
    /// hold 1/tp of the sequence.
    pub sequence_parallel: bool,
    /// Expert-parallel degree: each rank holds `E/ep` routed experts of a sparse layer and
    /// exchanges tokens with the others (see `presets::moe`); 1 = none.
    pub ep: u64,
    /// The busiest expert's tokens as a multiple of the balanced share (1: balanced routing).
    pub expert_skew: f64,
    pub experts_impl: ExpertsImpl,
    pub expert_capacity: Option<Capacity>,
    /// Images per sample of a vision-language model.
    pub images: u64,
    /// What an older PyTorch release keeps differently
    /// ([`super::releases::TorchVersion::rules`]).
    pub rules: super::releases::StackRules,
}

impl BuildCtx {
    /// A context with the given sizes and every option at its default (no checkpointing,
    /// SDPA, cuDNN, CUDA, no tensor parallelism).
    pub fn new(batch: u64, res: u64, seq: u64, precision: Precision) -> Self {
        BuildCtx {
            batch,
            res,
            seq,
            precision,
            ckpt: Checkpointing::None,
            attn: AttnImpl::Sdpa,
            causal_mask: CausalMask::Materialized,
            cudnn: true,
            device: Device::Cuda,
            tp: 1,
            sequence_parallel: false,
            tune: TuneCtx::default(),
            ep: 1,
            expert_skew: 1.0,
            experts_impl: ExpertsImpl::Eager,
            expert_capacity: None,
            images: 1,
            rules: Default::default(),
        }
    }

    /// The routing a sparse layer is built with.
    pub fn routing(&self) -> Routing {
        Routing {
            skew: self.expert_skew,
            experts: self.experts_impl,
            capacity: self.expert_capacity,
        }
    }
}

/// The fine-tuning and inference settings checked against the step's mode (here, beside
/// [`Setup`], so that `tune` depends on nothing above it).
impl TuneCtx {
    /// Checks the plan's fine-tuning/inference keys against its mode; refuses keys that would
    /// change nothing (a LoRA config in a training plan, a KV-cache dtype when training, ...).
    pub fn from_plan(plan: &Setup) -> Result<TuneCtx, EstimateError> {
        let mode = plan.mode;
        let name = mode.key();
        if plan.lora.is_some() && mode != Mode::Finetune {
            return Err(unsupported(format!(
                "\"lora\" needs \"mode\": \"finetune\" (the plan's mode is {name})"
            )));
        }
        if plan.frozen.is_some() && mode != Mode::Finetune {
            return Err(unsupported(format!(
                "\"frozen\" needs \"mode\": \"finetune\" (the plan's mode is {name})"
            )));
        }
        if mode != Mode::Infer {
            for (set, key) in [
                (plan.kv_cache_dtype.is_some(), "kv_cache_dtype"),
                (plan.context.is_some(), "context"),
                (plan.new_tokens.is_some(), "new_tokens"),
                (plan.sparsity != Sparsity::None, "sparsity"),
            ] {
                if set {
                    return Err(unsupported(format!(
                        "\"{key}\" applies to \"mode\": \"infer\" (the plan's mode is {name})"
                    )));
                }
            }
        }
        match (mode, plan.quantization) {
            (_, Quantization::None) => {}
            (Mode::Train, q) => return Err(unsupported(format!("quantization '{}' applies to fine-tuning (nf4 with LoRA) or inference, not to pre-training", q.key()))),
            (Mode::Finetune, Quantization::Nf4) if plan.lora.is_some() => {}
            (Mode::Finetune, Quantization::Nf4) => return Err(unsupported("NF4 base weights cannot be trained: add \"lora\" (QLoRA)")),
            (Mode::Finetune, q) => return Err(unsupported(format!("fine-tuning supports nf4 (QLoRA) only, not '{}'", q.key()))),
            (Mode::Infer, _) => {}
        }
        if plan.opt == OptimizerKind::Adafactor
            && (plan.parallel.is_some() || plan.offload.is_some())
        {
            return Err(unsupported("Adafactor is estimated on one GPU without offload: the multi-GPU and offload layouts count optimizer state in parameter-sized states, and Adafactor's factored state is not; remove \"parallel\" and \"offload\", or use adamw"));
        }
        if let Some(par) = &plan.parallel {
            if mode == Mode::Infer {
                return Err(unsupported(
                    "inference plans are estimated on one GPU: remove \"parallel\"",
                ));
            }
            if plan.opt.is_bnb() && (par.zero.unwrap_or(0) > 0 || par.fsdp) {
                return Err(unsupported("bitsandbytes optimizers with ZeRO/FSDP sharding are not modelled: use DDP (zero 0) or a PyTorch optimizer"));
            }
        }
        if plan.double_quant && plan.quantization != Quantization::Nf4 {
            return Err(unsupported("\"double_quant\" applies to nf4 quantization"));
        }
        let group_size = match (plan.quantization, plan.group_size) {
            (Quantization::Nf4, g) => {
                let g = g.unwrap_or(NF4_BLOCK);
                if ![32, 64, 128, 256, 512, 1024, 2048, 4096].contains(&g) {
                    return Err(unsupported(format!(
                        "NF4 block size {g} is not one bitsandbytes supports (32, 64, ..., 4096)"
                    )));
                }
                g
            }
            (Quantization::Int4, g) => {
                let g = g.unwrap_or(INT4_GROUP);
                if g == 0 || !g.is_power_of_two() || g > 4096 {
                    return Err(unsupported(format!(
                        "INT4 group size {g} must be a power of two up to 4096"
                    )));
                }
                g
            }
            (_, Some(_)) => {
                return Err(unsupported(
                    "\"group_size\" applies to int4 and nf4 quantization",
                ))
            }
            (_, None) => 0,
        };
        if plan.sparsity == Sparsity::TwoFour
            && !matches!(
                plan.quantization,
                Quantization::None | Quantization::Int8 | Quantization::W8a8
            )
        {
            return Err(unsupported(
                "2:4 sparsity is supported for 16-bit and INT8 weights, not 4-bit or FP8 ones",
            ));
        }
        let lora = match &plan.lora {
            None => None,
            Some(l) => {
                if l.rank == 0 || l.rank > 1 << 16 {
                    return Err(unsupported(format!(
                        "LoRA rank must be between 1 and 65536, got {}",
                        l.rank
                    )));
                }
                if !l.alpha.is_finite() || l.alpha <= 0.0 {
                    return Err(unsupported("LoRA alpha must be a positive number"));
                }
                if !(0.0..1.0).contains(&l.dropout) {
                    return Err(unsupported("LoRA dropout must be in [0, 1)"));
                }
                if l.targets.is_empty() {
                    return Err(unsupported("LoRA needs at least one target module"));
                }
                Some(LoraSpec {
                    rank: l.rank,
                    scaling: l.alpha / l.rank as f64,
                    targets: l.targets.clone(),
                    dropout: l.dropout,
                })
            }
        };
        if let Some(Frozen::Modules(m)) = &plan.frozen {
            if m.iter().any(|s| s.is_empty()) {
                return Err(unsupported("\"frozen\" module paths must not be empty"));
            }
        }
        let nf4_compute = match plan.dtype {
            super::graph::Precision::Fp16 | super::graph::Precision::AmpFp16 => DType::F16,
            _ => DType::BF16,
        };
        Ok(TuneCtx {
            mode,
            lora,
            quant: plan.quantization,
            double_quant: plan.double_quant,
            group_size,
            sparsity: plan.sparsity,
            frozen: plan.frozen.clone(),
            infer: None,
            nf4_compute,
            recipe: plan.recipe,
        })
    }
}

impl Graph {
    /// A new tape for a model builder: the precision, and the fine-tuning/inference settings
    /// that decide which parameters train ([`Graph::frozen`], [`Graph::inference`]). Here,
    /// beside [`BuildCtx`], so that the tape depends on nothing above it.
    ///
    pub fn for_build(ctx: &BuildCtx) -> Self {
        let mut g = Graph::new(ctx.precision);
        g.rules = ctx.rules;
        g.inference = ctx.tune.mode == Mode::Infer;
        g.ep = ctx.ep.max(1);
        if ctx.tune.lora.is_some() {
            g.frozen.push("*".into());
        }
        if let Some(Frozen::Modules(m)) = &ctx.tune.frozen {
            g.frozen.extend(m.iter().cloned());
        }
        g
    }
}
