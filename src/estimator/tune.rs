//! Fine-tuning and inference settings: the plan keys `mode`, `lora`, `quantization`,
//! `double_quant`, `group_size`, `kv_cache_dtype`, `sparsity`, `frozen`, `context`,
//! `new_tokens`, their validation, and the closed forms of the quantities they add (adapter
//! parameters, quantized weight bytes, KV-cache bytes) that the tests and the UI use beside the
//! simulated step.
//!
//! What each setting means is what the libraries do:
//! - LoRA: peft 0.21 `LoraConfig(r, lora_alpha, target_modules, lora_dropout)`; adapters are
//!   created in fp32 (`autocast_adapter_dtype=True` upcasts bf16/fp16 adapters), the base
//!   model is frozen (`_mark_only_adapters_as_trainable`).
//! - NF4 (QLoRA): bitsandbytes 0.50 `Linear4bit(quant_type="nf4")` with `compute_dtype` bf16,
//!   blocks of 64 weights with an fp32 absmax each; `double_quant` (`compress_statistics`)
//!   quantizes those absmax values again to 8 bits in blocks of 256 with an fp32 absmax per block
//!   and one fp32 offset (`functional.quantize_4bit`). Fine-tuning follows peft's
//!   `prepare_model_for_kbit_training`: every parameter that is not 4-bit is upcast to fp32.
//! - INT8 weight-only (W8A16): int8 weights and one scale per output channel in the activation
//!   dtype, a fused dequantizing GEMM (TensorRT-LLM weight-only kernels, torchao `int8_weight_only`).
//! - W8A8 (TensorRT/SmoothQuant style, calibrated activations): int8 weights with an fp32 scale
//!   per output channel; each linear input is quantized to int8 with a static, calibrated
//!   per-tensor scale before an int8 GEMM whose epilogue writes the activation dtype.
//! - INT4 (AWQ/GPTQ style): 4-bit weights in groups of `group_size` input elements, each group
//!   with an fp16 scale and a 4-bit zero point; fused dequantizing kernels (Marlin).
//! - FP8 block-wise (DeepSeek-V3 and the `*-FP8` checkpoints: `quantization_config`
//!   `{"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
//!   "activation_scheme": "dynamic"}`), as transformers' `integrations/finegrained_fp8.py` runs
//!   it: every `nn.Linear` of the blocks becomes `FP8Linear` (an e4m3 weight and an fp32
//!   `weight_scale_inv` per 128×128 tile) and every experts module `FP8Expert` (the same per
//!   expert); each forward quantizes its input per token in groups of 128 (`act_quant`: an e4m3
//!   copy and an fp32 scale per group) before the block-scaled GEMM writes the activation dtype.
//!   Routers, embeddings and the output head keep the model dtype.
//! - MXFP4 (gpt-oss's checkpoints; OCP Microscaling Formats v1.0): the experts' weights as FP4
//!   E2M1 values in blocks of 32 with one E8M0 (uint8) scale per block, their biases in fp32
//!   (`integrations/mxfp4.py` `Mxfp4GptOssExperts`); attention, router, embeddings and head
//!   keep the model dtype (`modules_to_not_convert`).
//! - 2:4 sparsity (`torch.sparse.to_sparse_semi_structured`, cuSPARSELt/CUTLASS): half the values
//!   are kept, plus 1 bit of metadata per dense element (`meta`: one int16 per 16 fp16/bf16
//!   elements, one int32 per 32 int8 elements). Activations stay dense.
//! - Quantization and sparsity apply to the linear layers of the transformer blocks (attention
//!   and MLP projections; in a mixture of experts only its `nn.Linear`s, not the fused experts
//!   or the router; in LLaVA the vision tower's and the projector's too); embeddings, norms and
//!   the output head stay in the model dtype, as
//!   bitsandbytes (`llm_int8_skip_modules` = the output head), AWQ and GPTQ leave them.

use serde::{Deserialize, Serialize};

use super::error::EstimateError;
use super::units::{Bytes, DType};

/// What the step is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// One training step of every parameter.
    #[default]
    Train,
    /// One training step with frozen parameters (`frozen`), LoRA adapters or QLoRA.
    Finetune,
    /// Serving: `model.eval()` under `torch.no_grad()`, the prompt's prefill and the decode steps.
    Infer,
}

impl Mode {
    pub fn key(self) -> &'static str {
        match self {
            Mode::Train => "train",
            Mode::Finetune => "finetune",
            Mode::Infer => "infer",
        }
    }
}

fn default_rank() -> u64 {
    8
}
fn default_alpha() -> f64 {
    8.0
}
fn default_targets() -> Vec<String> {
    vec!["q".into(), "v".into()]
}

/// LoRA adapters as peft's `LoraConfig` takes them (its defaults: `r=8`, `lora_alpha=8`,
/// `lora_dropout=0`, targets `q_proj, v_proj` for LLaMA-family models).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    #[serde(default = "default_rank")]
    pub rank: u64,
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// `q`, `k`, `v`, `o`, `gate`, `up`, `down`, the fused `qkv` and `gate_up` (or their module
    /// names `q_proj`, `query`, `qkv_proj`, `Wqkv`, `Wi`, ...; `all`).
    #[serde(default = "default_targets")]
    pub targets: Vec<String>,
    #[serde(default)]
    pub dropout: f64,
}

impl Default for LoraConfig {
    fn default() -> Self {
        LoraConfig {
            rank: default_rank(),
            alpha: default_alpha(),
            targets: default_targets(),
            dropout: 0.0,
        }
    }
}

/// A linear layer of a transformer block that LoRA can wrap. Which of them a model has is the
/// builder's (`presets::text::check_lora`): LLaMA-family blocks have the seven separate
/// projections, Phi-3 and ModernBERT the fused `Qkv` and `GateUp` (`qkv_proj`/`Wqkv`,
/// `gate_up_proj`/`Wi`), BERT and RoBERTa `query`, `key`, `value`, DeepSeek-V3's latent
/// attention `QA`, `QB` (or one `Q`), `KvA`, `KvB` and `O` (`q_a_proj`, `q_b_proj`,
/// `kv_a_proj_with_mqa`, `kv_b_proj`, `o_proj`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
    Qkv,
    GateUp,
    QA,
    QB,
    KvA,
    KvB,
}

impl Target {
    /// What `all` (peft's `all-linear`) expands to before the model narrows it to its own.
    pub const ALL: [Target; 13] = [
        Target::Q,
        Target::K,
        Target::V,
        Target::O,
        Target::Gate,
        Target::Up,
        Target::Down,
        Target::Qkv,
        Target::GateUp,
        Target::QA,
        Target::QB,
        Target::KvA,
        Target::KvB,
    ];
    /// The module name peft matches (`q_proj`, ...).
    pub fn module(self) -> &'static str {
        match self {
            Target::Q => "q_proj",
            Target::K => "k_proj",
            Target::V => "v_proj",
            Target::O => "o_proj",
            Target::Gate => "gate_proj",
            Target::Up => "up_proj",
            Target::Down => "down_proj",
            Target::Qkv => "qkv_proj",
            Target::GateUp => "gate_up_proj",
            Target::QA => "q_a_proj",
            Target::QB => "q_b_proj",
            Target::KvA => "kv_a_proj_with_mqa",
            Target::KvB => "kv_b_proj",
        }
    }
    pub fn key(self) -> &'static str {
        match self {
            Target::Q => "q",
            Target::K => "k",
            Target::V => "v",
            Target::O => "o",
            Target::Gate => "gate",
            Target::Up => "up",
            Target::Down => "down",
            Target::Qkv => "qkv",
            Target::GateUp => "gate_up",
            Target::QA => "q_a",
            Target::QB => "q_b",
            Target::KvA => "kv_a",
            Target::KvB => "kv_b",
        }
    }
    /// A plan's target, by short name or by the module name peft matches, as peft spells it (a
    /// name matches every module whose path ends in it: ModernBERT's `Wo` is both the attention's
    /// and the MLP's output projection).
    pub(crate) fn parse(s: &str) -> Result<Vec<Target>, EstimateError> {
        // DeepSeek-V3's `kv_a_proj_with_mqa` is `kv_a`.
        let t = match s.trim_end_matches("_with_mqa").trim_end_matches("_proj") {
            "q" | "query" => Target::Q,
            "k" | "key" => Target::K,
            "v" | "value" => Target::V,
            "o" | "attn.Wo" => Target::O,
            "gate" => Target::Gate,
            "up" => Target::Up,
            "down" | "mlp.Wo" => Target::Down,
            "qkv" | "Wqkv" => Target::Qkv,
            "gate_up" | "Wi" => Target::GateUp,
            "q_a" => Target::QA,
            "q_b" => Target::QB,
            "kv_a" => Target::KvA,
            "kv_b" => Target::KvB,
            "Wo" => return Ok(vec![Target::O, Target::Down]),
            "all" | "all-linear" | "all_linear" => return Ok(Target::ALL.to_vec()),
            _ => return Err(EstimateError::Unsupported(format!("LoRA target '{s}' is not a block projection: use q, k, v, o, gate, up, down, qkv, gate_up, q_a, ... (or their module names) or all"))),
        };
        Ok(vec![t])
    }
}

/// Whether two lists of LoRA targets wrap the same projections (`q_proj, v_proj` is `q, v`, in
/// any order); false when either names something [`Target::parse`] refuses.
pub fn same_targets<A: AsRef<str>, B: AsRef<str>>(a: &[A], b: &[B]) -> bool {
    fn set<S: AsRef<str>>(l: &[S]) -> Option<Vec<Target>> {
        let mut v = Vec::new();
        for s in l {
            v.extend(Target::parse(s.as_ref()).ok()?);
        }
        v.sort_by_key(|t| *t as u8);
        v.dedup();
        Some(v)
    }
    matches!((set(a), set(b)), (Some(x), Some(y)) if x == y)
}

/// Validated LoRA settings.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraSpec {
    pub rank: u64,
    /// `lora_alpha / r` (peft's `scaling` without rsLoRA).
    pub scaling: f64,
    /// The plan's target names, read by [`Target::parse`] where a language model is built: what a
    /// name means depends on the model (`presets::text::check_lora`), and only the language
    /// models' builders, fetched when first needed, read them.
    pub targets: Vec<String>,
    pub dropout: f64,
}

impl LoraSpec {
    pub fn wraps(&self, t: Target) -> bool {
        self.targets
            .iter()
            .any(|n| Target::parse(n).is_ok_and(|v| v.contains(&t)))
    }
    /// Whether the plan asked for `all`: every projection the model has, whatever it names them.
    pub fn is_all(&self) -> bool {
        Target::ALL.iter().all(|&t| self.wraps(t))
    }
}

/// Whose code builds the model and runs the fine-tuning step. The library's own layers decide
/// what a step allocates, and the way it builds the model decides what the caching allocator has
/// reserved before the first step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recipe {
    /// transformers' model (`from_pretrained`: each weight allocated once, in its final form),
    /// peft's LoRA and bitsandbytes' NF4.
    #[default]
    Transformers,
    /// torchtune 0.1's `lora_finetune_single_device` (torchtune 0.1.1, torchao 0.1): the model
    /// built on the device one layer at a time by deep copies, QLoRA's NF4 weights torchao's
    /// `NF4Tensor` (see [`crate::estimator::model_init`] and [`crate::estimator::torchao_nf4`]).
    Torchtune,
}

impl Recipe {
    /// The name a plan gives it.
    pub fn key(self) -> &'static str {
        match self {
            Recipe::Transformers => "transformers",
            Recipe::Torchtune => "torchtune",
        }
    }
}

/// Weight format of the blocks' linear layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantization {
    #[default]
    None,
    /// INT8 weight-only (W8A16).
    Int8,
    /// INT8 weights and calibrated INT8 activations (W8A8, TensorRT/SmoothQuant style).
    #[serde(alias = "int8_calibrated")]
    W8a8,
    /// INT4 group-wise weight-only (W4A16, AWQ/GPTQ style).
    Int4,
    /// bitsandbytes NF4 (QLoRA's 4-bit NormalFloat).
    Nf4,
    /// FP8 E4M3 weights with 128×128 block scales and dynamically quantized activations
    /// (DeepSeek-V3's checkpoint format).
    Fp8,
    /// MXFP4 experts (gpt-oss's checkpoint format); everything else dense.
    Mxfp4,
}

impl Quantization {
    pub fn key(self) -> &'static str {
        match self {
            Quantization::None => "none",
            Quantization::Int8 => "int8",
            Quantization::W8a8 => "w8a8",
            Quantization::Int4 => "int4",
            Quantization::Nf4 => "nf4",
            Quantization::Fp8 => "fp8",
            Quantization::Mxfp4 => "mxfp4",
        }
    }
    /// Whether the blocks' plain linear layers keep the model dtype under this format (MXFP4
    /// converts only the experts).
    pub fn keeps_linears_dense(self) -> bool {
        matches!(self, Quantization::None | Quantization::Mxfp4)
    }
}

/// Structured sparsity of the blocks' linear weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Sparsity {
    #[default]
    #[serde(rename = "none")]
    None,
    /// 2 of every 4 consecutive weights kept (NVIDIA Ampere sparse tensor cores).
    #[serde(rename = "2:4")]
    TwoFour,
}

/// Element type of the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvDtype {
    Fp32,
    Fp16,
    Bf16,
    /// FP8 E4M3 with a per-tensor scale (vLLM `kv_cache_dtype="fp8"`).
    Fp8,
    /// INT8 with a per-tensor scale.
    Int8,
}

impl KvDtype {
    pub fn dtype(self) -> DType {
        match self {
            KvDtype::Fp32 => DType::F32,
            KvDtype::Fp16 => DType::F16,
            KvDtype::Bf16 => DType::BF16,
            KvDtype::Fp8 => DType::U8,
            KvDtype::Int8 => DType::I8,
        }
    }
}

/// Frozen parameters: `N` freezes the embeddings and the first N transformer blocks (the usual
/// partial fine-tuning), a list freezes the named modules and everything below them
/// (`["embed_tokens", "layers.0"]`, `["conv1", "layer1"]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Frozen {
    Layers(u64),
    Modules(Vec<String>),
}

/// Which forward of a generation the inference graph records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InferStep {
    /// Tokens already in the KV cache before this forward.
    pub past: u64,
    /// Tokens this forward processes per sequence (the prompt in prefill, 1 in decode).
    pub tokens: u64,
    /// The cache's element type (`None`: the activations' dtype).
    pub kv_dtype: Option<DType>,
}

impl InferStep {
    pub fn is_prefill(&self) -> bool {
        self.past == 0
    }
}

/// Fine-tuning and inference settings resolved from the plan, for the builders.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneCtx {
    pub mode: Mode,
    pub lora: Option<LoraSpec>,
    pub quant: Quantization,
    pub double_quant: bool,
    /// Elements per quantization block/group (resolved default).
    pub group_size: u64,
    pub sparsity: Sparsity,
    pub frozen: Option<Frozen>,
    /// Set for the inference graphs (prefill or decode).
    pub infer: Option<InferStep>,
    /// `bnb_4bit_compute_dtype` of NF4 layers: bf16, or fp16 under an fp16 plan.
    pub nf4_compute: DType,
    /// Whose layers run the step (torchtune's NF4 weights are torchao's).
    pub recipe: Recipe,
}

/// bitsandbytes' NF4 block size (`Linear4bit` default `blocksize=64`).
pub const NF4_BLOCK: u64 = 64;
/// Block size of the second-level (double) quantization of the NF4 absmax values.
pub const NF4_BLOCK2: u64 = 256;
/// AWQ/GPTQ default group size.
pub const INT4_GROUP: u64 = 128;
/// FP8 weight tiles are `FP8_BLOCK × FP8_BLOCK` and activation groups `1 × FP8_BLOCK`
/// (DeepSeek-V3 `weight_block_size: [128, 128]`; `act_quant(x, block_size=128)`).
pub const FP8_BLOCK: u64 = 128;
/// Elements sharing one E8M0 scale in an MX block (OCP Microscaling Formats v1.0, §5: k = 32).
pub const MX_BLOCK: u64 = 32;

pub(crate) fn unsupported(msg: impl Into<String>) -> EstimateError {
    EstimateError::Unsupported(msg.into())
}

impl Default for TuneCtx {
    fn default() -> Self {
        TuneCtx {
            mode: Mode::Train,
            lora: None,
            quant: Quantization::None,
            double_quant: false,
            group_size: 0,
            sparsity: Sparsity::None,
            frozen: None,
            infer: None,
            nf4_compute: DType::BF16,
            recipe: Recipe::Transformers,
        }
    }
}

impl TuneCtx {
    /// Whether the blocks' linear layers keep their plain dense weights.
    pub fn dense_linears(&self) -> bool {
        self.quant == Quantization::None && self.sparsity == Sparsity::None
    }
}

// ---------------------------------------------------------------- closed forms

/// Parameters of LoRA adapters on a `[fout, fin]` linear: `A` is `[r, fin]`, `B` is `[fout, r]`
/// (peft `lora_A = nn.Linear(in, r, bias=False)`, `lora_B = nn.Linear(r, out, bias=False)`).
pub fn lora_params(fin: u64, fout: u64, rank: u64) -> u64 {
    rank * (fin + fout)
}

/// The storages of one NF4 weight of `n` elements (bitsandbytes `quantize_4bit`), exact bytes:
/// the packed weight (`(n + 1) / 2` uint8), the 16-entry fp32 NF4 code, and either the fp32
/// absmax per block or, with double quantization, the uint8 absmax, an fp32 absmax per 256 of
/// them, the fp32 offset and the second level's own copy of the 256-entry fp32 dynamic map
/// (`quantize_blockwise` stores `code.to(A.device, copy=True)`). The cached original of that map
/// (`name2qmap["dynamic"]`) exists once per process ([`nf4_shared_bytes`]).
pub fn nf4_storages(n: u64, block: u64, double_quant: bool) -> Vec<(u64, DType)> {
    let blocks = n.div_ceil(block);
    let mut v = vec![(n, DType::I4), (16, DType::F32)];
    if double_quant {
        v.push((blocks, DType::U8));
        v.push((blocks.div_ceil(NF4_BLOCK2), DType::F32));
        v.push((1, DType::F32));
        v.push((256, DType::F32));
    } else {
        v.push((blocks, DType::F32));
    }
    v
}

/// `name2qmap["dynamic"]` of `quantize_blockwise`: one 256-entry fp32 map shared by every
/// double-quantized weight.
pub fn nf4_shared_bytes(double_quant: bool) -> u64 {
    if double_quant {
        256 * 4
    } else {
        0
    }
}

/// Exact bytes of one NF4 weight of `n` elements (no allocator rounding).
pub fn nf4_weight_bytes(n: u64, block: u64, double_quant: bool) -> u64 {
    nf4_storages(n, block, double_quant)
        .iter()
        .map(|&(e, d)| (e * d.bits()).div_ceil(8))
        .sum()
}

/// Exact bytes of one block-scaled FP8 weight `[fout, fin]`: one byte per element and an fp32
/// `weight_scale_inv` per started 128×128 tile (`FP8Linear.__init__`).
pub fn fp8_weight_bytes(fout: u64, fin: u64) -> u64 {
    fout * fin + 4 * fout.div_ceil(FP8_BLOCK) * fin.div_ceil(FP8_BLOCK)
}

/// `weight_scale_inv` of an FP8 weight `[out, in]`: one fp32 per started 128×128 tile.
pub fn fp8_scale_shape(fout: u64, fin: u64) -> Vec<u64> {
    vec![fout.div_ceil(FP8_BLOCK), fin.div_ceil(FP8_BLOCK)]
}

/// Exact bytes of MXFP4 weights of `n` elements (`n` a multiple of [`MX_BLOCK`]): 16 bytes of
/// packed E2M1 pairs and one E8M0 scale byte per block of 32, i.e. 4.25 bits per weight.
pub fn mxfp4_weight_bytes(n: u64) -> u64 {
    n / 2 + n / MX_BLOCK
}

/// KV-cache bytes: keys and values of every layer, `kv_heads × head_dim` per token each
/// (grouped-query and multi-query attention store only the shared heads).
pub fn kv_cache_bytes(
    layers: u64,
    kv_heads: u64,
    head_dim: u64,
    batch: u64,
    tokens: u64,
    dtype: DType,
) -> Result<Bytes, EstimateError> {
    let elems = [2, layers, kv_heads, head_dim, batch, tokens]
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or(EstimateError::TooLarge)?;
    elems
        .checked_mul(dtype.bits())
        .map(|b| Bytes(b.div_ceil(8)))
        .ok_or(EstimateError::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nf4_is_four_and_a_half_bits_or_about_4_127_with_double_quantization() {
        // Dettmers et al. 2023 (QLoRA §3): 32/64 = 0.5 bit of constants per parameter, and
        // 8/64 + 32/(64·256) = 0.127 bit with double quantization.
        let n = 64 * 256 * 1000;
        let plain = nf4_weight_bytes(n, 64, false) - 64;
        let dq = nf4_weight_bytes(n, 64, true) - 64 - 4 - 1024;
        assert_eq!(plain * 8, n * 4 + n / 2);
        assert_eq!(dq * 8, n * 4 + n / 8 + n / 512);
    }

    #[test]
    fn fp8_blocks_add_an_fp32_scale_per_tile_and_mxfp4_is_4_25_bits() {
        // DeepSeek-V3 `q_b_proj` [24576, 1536]: 192 × 12 tiles of 128 × 128.
        assert_eq!(fp8_weight_bytes(24576, 1536), 24576 * 1536 + 4 * 192 * 12);
        // A ragged edge starts a tile of its own.
        assert_eq!(fp8_weight_bytes(129, 128), 129 * 128 + 4 * 2);
        // OCP MX v1.0: 32 × 4 bits + 8 bits of scale per block = 4.25 bits per element.
        let n = 32 * 1000;
        assert_eq!(mxfp4_weight_bytes(n) * 8 * 4, n * 17);
    }

    #[test]
    fn targets_parse_with_and_without_suffix() {
        assert_eq!(Target::parse("q_proj").unwrap(), vec![Target::Q]);
        assert_eq!(Target::parse("all").unwrap().len(), 13);
        assert_eq!(
            Target::parse("kv_a_proj_with_mqa").unwrap(),
            vec![Target::KvA]
        );
        assert_eq!(Target::parse("kv_a").unwrap(), vec![Target::KvA]);
        assert_eq!(Target::parse("q_b_proj").unwrap(), vec![Target::QB]);
        assert_eq!(Target::parse("Wqkv").unwrap(), vec![Target::Qkv]);
        assert_eq!(Target::parse("gate_up_proj").unwrap(), vec![Target::GateUp]);
        assert_eq!(Target::parse("Wo").unwrap(), vec![Target::O, Target::Down]);
        assert!(Target::parse("c_attn").is_err());
    }
}
