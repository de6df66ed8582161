//! The settings of one step ([`Setup`]), the choices they are made of (checkpointing,
//! attention kernel, causal mask, device) and what a model builder is given ([`BuildCtx`]).
//! Fine-tuning and inference settings are described in [`super::tune`].

use serde::{Deserialize, Serialize};

pub use super::graph::Precision;
pub use super::optimizer::{OptimizerImpl, OptimizerKind};
pub use super::tune::{Frozen, KvDtype, LoraConfig, Mode, Quantization, Sparsity, TuneCtx};

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

/// Which kernels run: the CUDA ones (the product's subject) or PyTorch's CPU kernels, which save
/// different tensors (float dropout masks, the math attention path). CPU is there to replay the
/// reference set's CPU records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Device {
    #[default]
    Cuda,
    Cpu,
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
}

impl Setup {
    /// The optimizer implementation that runs: the setting, else PyTorch's default
    /// (`torch/optim/optimizer.py` `_default_to_fused_or_foreach`): foreach when all parameters
    /// are on CUDA, the per-parameter for-loop on the CPU.
    pub fn optimizer_impl(&self) -> OptimizerImpl {
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
        }
    }
}
