//! The plan as the user writes it: the JSON the CLI reads, the page keeps in its URL and the
//! reference records carry. Its keys are those of the reference records (`model`, `hf_config`,
//! `batch`, `res`, `seq`, `dtype`, `opt`, `ckpt`, `attn`, `cudnn`) plus further options;
//! unknown keys are refused so a typo never silently changes nothing. Names (`model`, `gpu`,
//! links) are resolved by [`super::resolve`]; everything else is the core's [`Setup`].

use crate::estimator::allocator::AllocConf;
use crate::estimator::context::Stack;
use serde::{Deserialize, Serialize};

use crate::estimator::config::{
    AttnImpl, CausalMask, Checkpointing, Device, ExpertsImpl, Frozen, KvDtype, LoraConfig, Mode,
    OptimizerImpl, OptimizerKind, Precision, Quantization, Recipe, Setup, Sparsity, ZeroGrad,
};
use crate::estimator::parallel::{Offload, Parallel};

use super::PlanError;

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
    /// Inference: prompt tokens per sequence (default: `seq`, then the model's default). They
    /// are text tokens: a vision-language model's images add their placeholder tokens to the
    /// prompt beside them (LLaVA-1.5: `images` × 576), and the KV cache holds both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<u64>,
    /// Inference: tokens generated per sequence (`generate(max_new_tokens)`, default 1: the
    /// prefill alone produces the first one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tokens: Option<u64>,
    /// Multi-GPU layout (data, tensor and pipeline parallelism, ZeRO/FSDP). Absent: one GPU,
    /// estimated exactly as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<Parallel>,
    /// What lives in host memory instead of on the GPU (ZeRO-Offload / ZeRO-Infinity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<Offload>,
    /// `PYTORCH_CUDA_ALLOC_CONF` as the run sets it (e.g. `expandable_segments:True`), for the
    /// caching allocator's replay. Absent: PyTorch's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_conf: Option<AllocConf>,
    /// The CUDA toolkit PyTorch was built with and `CUDA_MODULE_LOADING`, e.g.
    /// `{"cuda": "11.2"}`, for the CUDA context. Absent: a current PyTorch with CUDA 12.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<Stack>,
    /// Mixture of experts: tokens the busiest expert of each sparse layer receives, as a
    /// multiple of the balanced share `T·k / E`; absent or 1: balanced routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_skew: Option<f64>,
    /// Mixture of experts: `"eager"` (the per-expert loop, the default) or `"grouped_mm"`
    /// (transformers' grouped GEMMs over all token-expert pairs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts_impl: Option<ExpertsImpl>,
    /// Vision-language models: images per sample (default 1), each adding its image tokens to
    /// the sequence (training: to `seq`'s text tokens; serving: to `context`'s, in the prefill
    /// and the KV cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<u64>,
    /// The step ran under a `TorchDispatchMode` (the reference harness's tracker, or
    /// FakeTensorMode): autograd then sums a tensor's gradients out of place (see
    /// [`crate::estimator::simulate::StepOptions::dispatch_mode`]). Off for a real training loop.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dispatch_mode: bool,
    /// What the loop's `zero_grad()` does: `"set_to_none"` (the default since PyTorch 2.0) or
    /// `"zero"` (`set_to_none=False`: the gradients stay resident through the next forward).
    #[serde(default, skip_serializing_if = "is_default_zero_grad")]
    pub zero_grad: ZeroGrad,
    /// A validation pass after the training steps (`model.eval()`, a forward under
    /// `torch.no_grad()`) at this batch, as training scripts run after each epoch: the caching
    /// allocator keeps what it grew for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_batch: Option<u64>,
    /// Whose fine-tuning loop runs: `"transformers"` (the default: transformers' model, peft,
    /// bitsandbytes) or `"torchtune"` (torchtune 0.1's single-device LoRA/QLoRA recipe, whose
    /// model construction on the device and torchao NF4 weights decide the reserved memory).
    #[serde(default, skip_serializing_if = "is_default_recipe")]
    pub recipe: Recipe,
}

fn is_default_recipe(r: &Recipe) -> bool {
    *r == Recipe::Transformers
}

fn is_default_zero_grad(z: &ZeroGrad) -> bool {
    *z == ZeroGrad::SetToNone
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
            alloc_conf: None,
            stack: None,
            expert_skew: None,
            experts_impl: None,
            images: None,
            dispatch_mode: false,
            zero_grad: ZeroGrad::SetToNone,
            validation_batch: None,
            recipe: Recipe::Transformers,
            parallel: None,
            offload: None,
        }
    }
}

fn is_default_mask(m: &CausalMask) -> bool {
    *m == CausalMask::Materialized
}

/// The longest plan text read (a plan with a pasted `config.json` is a few KiB): longer text is
/// refused before parsing, so a huge file costs no time.
pub const MAX_PLAN_TEXT: usize = 1 << 20;

/// Reads a plan from its JSON text, as the CLI and the fuzz targets do.
pub fn parse_json(text: &str) -> Result<Plan, PlanError> {
    if text.len() > MAX_PLAN_TEXT {
        return Err(PlanError::InvalidPlan(format!(
            "the text is {} bytes, above the limit of {MAX_PLAN_TEXT}",
            text.len()
        )));
    }
    serde_json::from_str(text).map_err(|e| PlanError::InvalidPlan(e.to_string()))
}

impl Plan {
    /// The software stack the plan names, or the default one (a current PyTorch, CUDA 12).
    pub fn stack(&self) -> Stack {
        self.stack.unwrap_or_default()
    }

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
    /// The optimizer implementation that runs ([`Setup::optimizer_impl`]).
    pub fn optimizer_impl(&self) -> OptimizerImpl {
        self.setup().optimizer_impl()
    }
    /// The step's settings, for the core: every key but the names (`model`, `hf_config`,
    /// `gpu`), which [`super::resolve`] turns into values.
    pub fn setup(&self) -> Setup {
        Setup {
            batch: self.batch,
            res: self.res,
            seq: self.seq,
            dtype: self.dtype,
            opt: self.opt,
            optimizer_impl: self.optimizer_impl,
            ckpt: self.ckpt,
            attn: self.attn,
            causal_mask: self.causal_mask,
            cudnn: self.cudnn,
            device: self.device,
            accumulation: self.accumulation,
            mode: self.mode,
            lora: self.lora.clone(),
            quantization: self.quantization,
            double_quant: self.double_quant,
            group_size: self.group_size,
            kv_cache_dtype: self.kv_cache_dtype,
            sparsity: self.sparsity,
            frozen: self.frozen.clone(),
            context: self.context,
            new_tokens: self.new_tokens,
            parallel: self.parallel.clone(),
            offload: self.offload.clone(),
            allocator: self
                .alloc_conf
                .as_ref()
                .map(|c| c.settings)
                .unwrap_or_default(),
            stack: self.stack(),
            expert_skew: self.expert_skew,
            experts_impl: self.experts_impl,
            images: self.images,
            dispatch_mode: self.dispatch_mode,
            zero_grad: self.zero_grad,
            validation_batch: self.validation_batch,
            recipe: self.recipe,
        }
    }
}
