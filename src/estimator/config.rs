//! The plan: what the user asks about. Its keys are those of the reference records
//! (`model`, `hf_config`, `batch`, `res`, `seq`, `dtype`, `opt`, `ckpt`, `attn`, `cudnn`) plus
//! further options; unknown keys are refused so a typo never silently changes nothing.
//! Fine-tuning and inference keys (`mode`, `lora`, `quantization`, `kv_cache_dtype`,
//! `sparsity`, `frozen`, `context`, `new_tokens`) are described in [`super::tune`].

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

fn one() -> u64 {
    1
}
fn one32() -> u32 {
    1
}

/// A training set-up to estimate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Preset name (`vram-planner models`), or a label when `hf_config` is given.
    pub model: String,
    /// A Hugging Face `config.json` (GPT-2, BERT, LLaMA, Mistral, Qwen2) defining the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hf_config: Option<serde_json::Value>,
    /// Micro-batch size.
    #[serde(default = "one")]
    pub batch: u64,
    /// Square image side in pixels (vision models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub res: Option<u64>,
    /// Sequence length in tokens (text models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(default)]
    pub dtype: Precision,
    #[serde(default, alias = "optimizer")]
    pub opt: OptimizerKind,
    /// How the optimizer step runs; default: PyTorch's own choice for the device
    /// ([`Plan::optimizer_impl`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_impl: Option<OptimizerImpl>,
    #[serde(default)]
    pub ckpt: Checkpointing,
    #[serde(default)]
    pub attn: AttnImpl,
    /// Language models: whether the causal mask is materialised (a padded or packed batch, and
    /// the reference set) or skipped (an unpadded batch: SDPA's `is_causal`). See [`CausalMask`].
    #[serde(default, skip_serializing_if = "is_default_mask")]
    pub causal_mask: CausalMask,
    /// LSTM: whether the cuDNN RNN kernel runs (the reference cases use PyTorch's native cell).
    /// Defaults to true on CUDA; the CPU has no cuDNN (oneDNN's LSTM runs there), so it
    /// defaults to false and true is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cudnn: Option<bool>,
    #[serde(default)]
    pub device: Device,
    /// Gradient-accumulation micro-batches per optimizer step.
    #[serde(default = "one32")]
    pub accumulation: u32,
    /// GPU preset name for the fit verdict and the device-level numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Pre-training (`train`), fine-tuning (`finetune`: frozen layers, LoRA, QLoRA) or serving
    /// (`infer`: forward only, KV cache).
    #[serde(default)]
    pub mode: Mode,
    /// LoRA adapters (peft `LoraConfig`); fine-tuning only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
    /// Weight format of the transformer blocks' linear layers.
    #[serde(default)]
    pub quantization: Quantization,
    /// NF4: quantize the absmax constants again (bitsandbytes `compress_statistics`).
    #[serde(default)]
    pub double_quant: bool,
    /// Elements per quantization block (NF4 default 64, INT4 default 128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_size: Option<u64>,
    /// Element type of the KV cache (default: the activations' dtype).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_dtype: Option<KvDtype>,
    /// Structured sparsity of the transformer blocks' linear weights (inference).
    #[serde(default)]
    pub sparsity: Sparsity,
    /// Frozen parameters for partial fine-tuning: the embeddings and the first N blocks, or a
    /// list of module paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen: Option<Frozen>,
    /// Inference: prompt tokens per sequence (default: `seq`, then the model's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<u64>,
    /// Inference: tokens generated per sequence (`generate(max_new_tokens)`, default 1: the
    /// prefill alone produces the first one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tokens: Option<u64>,
    /// Multi-GPU layout (data, tensor and pipeline parallelism, ZeRO/FSDP). Absent: one GPU,
    /// estimated exactly as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<super::parallel::Parallel>,
    /// What lives in host memory instead of on the GPU (ZeRO-Offload / ZeRO-Infinity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<super::parallel::Offload>,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            model: "resnet50".into(),
            hf_config: None,
            batch: 32,
            res: None,
            seq: None,
            dtype: Precision::Fp32,
            opt: OptimizerKind::Adam,
            optimizer_impl: None,
            ckpt: Checkpointing::None,
            attn: AttnImpl::Sdpa,
            causal_mask: CausalMask::Materialized,
            cudnn: None,
            device: Device::Cuda,
            accumulation: 1,
            gpu: None,
            mode: Mode::Train,
            lora: None,
            quantization: Quantization::None,
            double_quant: false,
            group_size: None,
            kv_cache_dtype: None,
            sparsity: Sparsity::None,
            frozen: None,
            context: None,
            new_tokens: None,
            parallel: None,
            offload: None,
        }
    }
}

fn is_default_mask(m: &CausalMask) -> bool {
    *m == CausalMask::Materialized
}

impl Plan {
    pub fn new(model: &str) -> Self {
        Plan {
            model: model.into(),
            ..Plan::default()
        }
    }
    /// Whether the plan spreads over GPUs or host memory (a `parallel` or `offload` key): the
    /// per-GPU estimate (`parallel::estimate_parallel`) answers it.
    pub fn is_parallel(&self) -> bool {
        self.parallel.is_some() || self.offload.is_some()
    }
    /// The optimizer implementation that runs: the plan's, else PyTorch's default
    /// (`torch/optim/optimizer.py` `_default_to_fused_or_foreach`): foreach when all parameters
    /// are on CUDA, the per-parameter for-loop on the CPU.
    pub fn optimizer_impl(&self) -> OptimizerImpl {
        self.optimizer_impl.unwrap_or(match self.device {
            Device::Cuda => OptimizerImpl::Foreach,
            Device::Cpu => OptimizerImpl::ForLoop,
        })
    }
}

/// What a model builder needs, resolved from the plan.
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
