//! Language models built op by op as transformers 5.24 runs them in training
//! (`transformers/models/{gpt2,bert,roberta,modernbert,llama,mistral,qwen2}/modeling_*.py`):
//! `GPT2LMHeadModel`, `BertForMaskedLM`, `RobertaForMaskedLM`, `ModernBertForMaskedLM` and the
//! LLaMA family's `*ForCausalLM` (Mistral and Qwen2 are LLaMA with other defaults and biases).
//! The batch is `{"input_ids": ids, "labels": ids}` (one int64 tensor), the loss
//! `model(**batch).loss`, `use_cache=False`.
//!
//! Op names follow the module paths below the model's base (`h.3.attn.c_attn`, `layer.3.output`,
//! `layers.3.self_attn.q_proj`), so the per-layer activation chart groups them by layer.
//!
//! A model is described by a [`TextConfig`] (parsed from a `config.json` in [`super::hf`]); the
//! presets are configs too, so both paths share this builder. Generation ([`super::generate`])
//! runs the same LLaMA decoder layer (`LlamaLayer`) with its KV cache instead of the mask.

use crate::estimator::config::{AttnImpl, BuildCtx, CausalMask, Device, Routing};
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::ops::{Act, EagerOpts, MatmulCopies, QueryOrder};
use crate::estimator::tune::{Mode, Quantization, Sparsity, Target, TuneCtx};
use crate::estimator::units::{Bytes, DType};

use super::activation::activation;
pub use super::activation::Activation;
use super::gemma::{self, Gemma};
use super::gpt_oss;
use super::mla::{self, Mla, MlaKv};
use super::modernbert::{self, ModernBert};
use super::moe::{self, Moe, MoeKind};

pub type Built = Result<Graph, EstimateError>;

/// The architecture family (which `modeling_*.py` forward runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// `GPT2LMHeadModel`: learned positions, pre-LayerNorm, fused `c_attn`, `Conv1D` layers.
    Gpt2,
    /// `BertForMaskedLM`: learned positions and token types, post-LayerNorm, MLM head.
    Bert,
    /// `RobertaForMaskedLM` (`models/roberta/modeling_roberta.py`): BERT's encoder and head with
    /// positions counted from the input ids past the padding index, and the head named `lm_head`.
    Roberta,
    /// `ModernBertForMaskedLM` ([`super::modernbert`]): pre-norm, rotary, alternating global
    /// and sliding-window bidirectional attention, GeGLU MLP.
    ModernBert,
    /// `LlamaForCausalLM` / `MistralForCausalLM` / `Qwen2ForCausalLM`: RMSNorm, rotary
    /// positions, grouped-query attention, SiLU-gated MLP.
    Llama,
}

/// Everything the builder needs from a `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct TextConfig {
    pub arch: Arch,
    /// `model_type` as written in the config (for messages).
    pub model_type: String,
    pub vocab: u64,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    /// Key/value heads (grouped-query attention); equals `heads` without GQA.
    pub kv_heads: u64,
    pub head_dim: u64,
    pub intermediate: u64,
    /// Learned position embeddings (GPT-2, BERT): the longest sequence the model accepts.
    pub max_positions: Option<u64>,
    /// BERT token-type vocabulary.
    pub type_vocab: u64,
    /// Rows of the learned position table a sequence never reaches: RoBERTa numbers positions
    /// from `pad_token_id + 1` (`create_position_ids_from_input_ids`); 0 elsewhere.
    pub position_offset: u64,
    /// The output projection reuses the input embedding (counted once).
    pub tie_embeddings: bool,
    pub qkv_bias: bool,
    pub o_bias: bool,
    pub mlp_bias: bool,
    pub act: Activation,
    /// Dropout after the embeddings (GPT-2 `embd_pdrop`, BERT `hidden_dropout_prob`).
    pub embd_dropout: f64,
    /// Dropout on the attention probabilities (passed to SDPA as `dropout_p`).
    pub attn_dropout: f64,
    /// Dropout on the residual branches (GPT-2 `resid_pdrop`, BERT `hidden_dropout_prob`).
    pub resid_dropout: f64,
    /// What a LLaMA-family variant changes in the decoder layer (nothing for LLaMA, Mistral,
    /// Qwen2, GPT-2 and BERT).
    pub variant: Variant,
}

/// The decoder-layer differences of the LLaMA-family variants.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Variant {
    pub qk_norm: QkNorm,
    /// Phi-3 (`models/phi3/modeling_phi3.py`): one `qkv_proj` whose output is sliced into the
    /// query, key and value, and one `gate_up_proj` chunked into gate and up. Under tensor
    /// parallelism both are column-parallel with each rank holding its own heads' (its own
    /// columns') rows of every part, as Megatron-Core's fused `linear_qkv` and gated `linear_fc1`
    /// ([`check_variant_tp`]); transformers' own plan (`Phi3Config.base_model_tp_plan`,
    /// `colwise_gather_output`) instead gathers their outputs, which is not modelled.
    pub fused: bool,
    /// OLMo 2 (`models/olmo2/modeling_olmo2.py`): no norm before attention and MLP;
    /// `post_attention_layernorm` and `post_feedforward_layernorm` normalise their outputs
    /// before the residual add.
    pub norm_after: bool,
    /// Sparse mixture-of-experts MLPs (Mixtral, Qwen2-MoE, Qwen3-MoE).
    pub moe: Option<Moe>,
    /// Gemma 2 / Gemma 3 ([`super::gemma`]).
    pub gemma: Option<Gemma>,
    /// Layers that attend through a sliding window (Gemma's local layers, Mistral with
    /// `sliding_window`, gpt-oss).
    pub sliding: Option<Sliding>,
    /// ModernBERT's own fields (set exactly for [`Arch::ModernBert`]).
    pub modernbert: Option<ModernBert>,
    /// DeepSeek-V3's multi-head latent attention ([`super::mla`]) in place of q/k/v.
    pub mla: Option<Mla>,
    /// gpt-oss ([`super::gpt_oss`]): attention sinks, its rotation and norms.
    pub sinks: bool,
    /// BERT's and RoBERTa's sequence-classification head in place of the masked-LM one
    /// (`architectures` `BertForSequenceClassification`, `RobertaForSequenceClassification`), with
    /// this many labels.
    pub classifier: Option<u64>,
}

/// The sliding-window layers of a decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct Sliding {
    /// `sliding_window`: the tokens a local layer's query sees, itself included.
    pub window: u64,
    /// Per layer: whether it attends locally (`layer_types[i] == "sliding_attention"`). Gemma 2
    /// alternates (even layers local); Gemma 3 has five local layers per global one
    /// (`sliding_window_pattern` 6); Mistral with a window has only local layers.
    pub local: Vec<bool>,
}

impl Sliding {
    pub fn is_local(&self, layer: u64) -> bool {
        self.local.get(layer as usize).copied().unwrap_or(false)
    }
}

/// RMSNorm on the queries and keys before the rotary embedding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QkNorm {
    #[default]
    None,
    /// Qwen3 (`Qwen3Attention`: `q_norm(q_proj(x).view(..., head_dim))`): a `[head_dim]`
    /// weight over each head.
    PerHead,
    /// OLMo 2 (`Olmo2Attention`: `q_norm(q_proj(x))`): a weight over the whole projection.
    /// Under tensor parallelism the projections' outputs are gathered and the norms and the
    /// attention run over every head on every rank (transformers' `Olmo2Config.base_model_tp_plan`).
    Full,
}

impl TextConfig {
    /// Parameters as `sum(p.numel() for p in model.parameters())` counts them (tied weights
    /// once), from the module definitions.
    pub fn param_count(&self) -> u64 {
        let (h, v, l, i) = (self.hidden, self.vocab, self.layers, self.intermediate);
        let b = |on: bool, n: u64| if on { n } else { 0 };
        match self.arch {
            Arch::Gpt2 => {
                let p = self.max_positions.unwrap_or(0);
                let layer =
                    2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h);
                v * h + p * h + l * layer + 2 * h + b(!self.tie_embeddings, v * h)
            }
            Arch::Bert | Arch::Roberta => {
                let p = self.max_positions.unwrap_or(0);
                let emb = v * h + p * h + self.type_vocab * h + 2 * h;
                let layer = 4 * (h * h + h) + 2 * 2 * h + (h * i + i) + (i * h + h);
                let head = match self.variant.classifier {
                    // BERT: pooler and classifier; RoBERTa: `dense` and `out_proj`.
                    Some(n) => (h * h + h) + (h * n + n),
                    None => (h * h + h) + 2 * h + v + b(!self.tie_embeddings, v * h),
                };
                emb + l * layer + head
            }
            Arch::ModernBert => match &self.variant.modernbert {
                Some(mb) => self.modernbert_params(mb),
                None => 0,
            },
            Arch::Llama => self.llama_params(false),
        }
    }

    /// Parameters one token runs through: all of them for a dense model; for a mixture of
    /// experts the router, the `top_k` routed experts and the shared expert of each sparse
    /// layer, besides everything outside the experts.
    pub fn active_param_count(&self) -> u64 {
        match self.arch {
            Arch::Llama => self.llama_params(true),
            _ => self.param_count(),
        }
    }

    /// Parameters as `sum(p.numel() for p in model.parameters())` counts them: the decoder weight is
    /// the token embedding's when tied; layer 0 has no `attn_norm`.
    fn modernbert_params(&self, mb: &ModernBert) -> u64 {
        let cfg = self;
        let (h, v, i) = (cfg.hidden, cfg.vocab, cfg.intermediate);
        let b = |on: bool, n: u64| if on { n } else { 0 };
        let norm = h + b(mb.norm_bias, h);
        let attn = 3 * h * h + b(cfg.qkv_bias, 3 * h) + h * h + b(cfg.o_bias, h);
        let mlp = 2 * h * i + b(cfg.mlp_bias, 2 * i) + i * h + b(cfg.mlp_bias, h);
        let layers = cfg.layers * (attn + mlp + 2 * norm) - norm;
        let head = h * h + b(mb.classifier_bias, h) + norm;
        let decoder = b(!cfg.tie_embeddings, v * h) + b(mb.decoder_bias, v);
        v * h + norm + layers + norm + head + decoder
    }

    fn llama_params(&self, active: bool) -> u64 {
        let (h, v, i) = (self.hidden, self.vocab, self.intermediate);
        let b = |on: bool, n: u64| if on { n } else { 0 };
        let (q, kv) = (self.heads * self.head_dim, self.kv_heads * self.head_dim);
        let qk_norm = match self.variant.qk_norm {
            QkNorm::None => 0,
            QkNorm::PerHead => 2 * self.head_dim,
            QkNorm::Full => q + kv,
        };
        let attn = match &self.variant.mla {
            Some(m) => m.params(h, self.heads),
            None => h * q + 2 * h * kv + q * h + b(self.qkv_bias, q + 2 * kv) + b(self.o_bias, h),
        };
        // gpt-oss: one sink logit per head.
        let attn = attn + b(self.variant.sinks, self.heads);
        let dense = 3 * h * i + b(self.mlp_bias, 2 * i + h);
        let layers: u64 = (0..self.layers)
            .map(|l| {
                let mlp = match &self.variant.moe {
                    Some(m) if m.is_sparse(l) && active => m.active_block_params(h),
                    Some(m) if m.is_sparse(l) => m.block_params(h),
                    _ => dense,
                };
                let norms = if self.variant.gemma.is_some() { 4 } else { 2 };
                attn + qk_norm + mlp + norms * h
            })
            .sum();
        v * h + layers + h + b(!self.tie_embeddings, v * h)
    }
}

/// Runs `layer` over all layers, wrapping the checkpointed groups.
fn run_layers(
    g: &mut Graph,
    cfg: &TextConfig,
    ctx: &BuildCtx,
    prefix: &str,
    mut h: TensorId,
    mut layer: impl FnMut(&mut Graph, TensorId, u64) -> Result<TensorId, EstimateError>,
) -> Result<TensorId, EstimateError> {
    // `Block` (HF `gradient_checkpointing_enable`, non-reentrant) wraps every layer; a uniform
    // stack has no stages, so `Stage` means the same.
    for (range, ck) in g.checkpoint_runs(ctx.ckpt, cfg.layers as usize, "layers", true)? {
        h = g.checkpointed(ck, |g| {
            let mut h = h;
            for i in range {
                h = g.scoped(format!("{prefix}.{i}"), |g| layer(g, h, i as u64))?;
            }
            Ok::<_, EstimateError>(h)
        })?;
    }
    Ok(h)
}

/// `[B, S, heads·d]` → `[B, heads, S, d]` (`view` + `transpose(1, 2)`: no copy).
pub(crate) fn heads_view(
    g: &mut Graph,
    x: TensorId,
    heads: u64,
    d: u64,
) -> Result<TensorId, EstimateError> {
    let s = g.shape(x);
    g.view(x, vec![s[0], heads, s[1], d])
}

/// Builds the training step's forward tape of `cfg` at `ctx` (batch, sequence, precision,
/// checkpointing, attention implementation).
/// Serving a LLaMA-family model is [`super::generate`]'s.
pub fn build(cfg: &TextConfig, ctx: &BuildCtx) -> Built {
    check_positions(cfg, ctx)?;
    // transformers 5.24 has no SDPA path for Gemma 2 (`_supports_sdpa` is off; its attention
    // soft-capping needs the scores): the model runs eager attention whatever was asked.
    // Nor for gpt-oss (`_supports_sdpa = False`: its sinks need the scores).
    let eager;
    let eager_only =
        cfg.variant.gemma.as_ref().is_some_and(|gm| gm.version == 2) || cfg.variant.sinks;
    let ctx = if eager_only && ctx.attn != AttnImpl::Eager {
        eager = BuildCtx {
            attn: AttnImpl::Eager,
            ..ctx.clone()
        };
        &eager
    } else {
        ctx
    };
    if let Some(step) = ctx.tune.infer {
        // GPT-2 and BERT: one forward of the prompt without a cache (`model(input_ids).logits`).
        if !step.is_prefill() || step.kv_dtype.is_some() {
            return Err(EstimateError::Unsupported(format!(
                "generation with a KV cache is modelled for LLaMA-family models, not {}",
                cfg.model_type
            )));
        }
    }
    if cfg.arch != Arch::Llama && !ctx.tune.dense_linears() {
        return Err(EstimateError::Unsupported(format!("quantized weights are modelled for LLaMA-family decoders (llama, mistral, qwen2, phi3, ...), not {}: keep its model dtype", cfg.model_type)));
    }
    check_lora(cfg, LoraFamily::of(cfg), ctx)?;
    check_variant(cfg, ctx)?;
    let mut g = Graph::for_build(ctx);
    g.set_tensor_parallel(ctx);
    freeze_layers(&mut g, cfg, ctx)?;
    let ids = g.input(vec![ctx.batch, ctx.seq], DType::I64)?;
    if cfg.variant.moe.is_some() {
        g.active_params = Some(cfg.active_param_count());
    }
    match cfg.arch {
        Arch::Gpt2 => gpt2(&mut g, cfg, ctx, ids)?,
        Arch::Bert | Arch::Roberta => bert(&mut g, cfg, ctx, ids)?,
        Arch::ModernBert => match &cfg.variant.modernbert {
            Some(mb) => modernbert(&mut g, cfg, mb, ctx, ids)?,
            None => {
                return Err(EstimateError::Unsupported(
                    "a ModernBERT model needs its ModernBERT fields".into(),
                ))
            }
        },
        Arch::Llama => llama(&mut g, cfg, ctx, ids)?,
    }
    Ok(g)
}

/// How a language model names the linear layers LoRA can wrap: what peft's LoRA matches by
/// name in each family (`inject_adapter` raises when a target matches nothing). LLaMA's seven
/// projections; Phi-3's and ModernBERT's fused `qkv_proj`/`Wqkv` and `gate_up_proj`/`Wi`, each
/// one `nn.Linear` and so one adapter whose `lora_B` spans the fused width; BERT's and RoBERTa's
/// `query`, `key`, `value`; DeepSeek-V3's latent attention (`DeepseekV3Attention.__init__`):
/// `q_a_proj`, `q_b_proj` (one `q_proj` without `q_lora_rank`), `kv_a_proj_with_mqa`,
/// `kv_b_proj` and `o_proj`. The same table gives [`check_lora`]'s refusals and the page's menu
/// ([`lora_menu`]), so the menu offers nothing the builder refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoraFamily {
    /// A LLaMA-family decoder with separate projections.
    Separate,
    /// A mixture of experts with separate attention projections: its experts are refused
    /// ([`check_moe_lora`]), so only the attention is offered.
    Moe,
    /// LLaVA's language model: `all` would also wrap the vision tower and the projector, which
    /// `llava::build` refuses.
    Llava,
    /// Phi-3's fused `qkv_proj` and `gate_up_proj`.
    Fused,
    /// BERT and RoBERTa: `query`, `key`, `value` (their MLP's `dense` layers are not modelled
    /// as targets, and `all` would also wrap the MLM head's `dense`).
    Encoder,
    /// ModernBERT's `Wqkv`, `attn.Wo`, `Wi`, `mlp.Wo`.
    ModernBert,
    /// DeepSeek-V3's latent attention with a `q_lora_rank`: `q_a_proj` and `q_b_proj`.
    Mla,
    /// Latent attention whose `q_lora_rank` is null: one `q_proj`.
    MlaOneQ,
}

impl LoraFamily {
    /// The family of `cfg`; `None` where LoRA is not modelled (GPT-2). A mixture of experts
    /// with latent attention is [`LoraFamily::Mla`]: its targets are the attention's already.
    pub fn of(cfg: &TextConfig) -> Option<LoraFamily> {
        Some(match (cfg.arch, &cfg.variant) {
            (Arch::Gpt2, _) => return None,
            (Arch::Bert | Arch::Roberta, _) => LoraFamily::Encoder,
            (Arch::ModernBert, _) => LoraFamily::ModernBert,
            (Arch::Llama, v) => match (&v.mla, &v.moe) {
                (Some(m), _) if m.q_lora_rank.is_some() => LoraFamily::Mla,
                (Some(_), _) => LoraFamily::MlaOneQ,
                (None, Some(_)) => LoraFamily::Moe,
                (None, None) if v.fused => LoraFamily::Fused,
                (None, None) => LoraFamily::Separate,
            },
        })
    }

    /// The same model as LLaVA's language model.
    pub fn in_llava(self) -> LoraFamily {
        match self {
            LoraFamily::Separate => LoraFamily::Llava,
            f => f,
        }
    }

    /// The projections the model has. A mixture of experts keeps its `gate`, `up`, `down` here
    /// (DeepSeek-V3's shared experts and dense layers are `nn.Linear`s) so that
    /// [`check_moe_lora`] refuses them with its reason.
    fn has(self) -> &'static [Target] {
        use Target::*;
        match self {
            LoraFamily::Separate | LoraFamily::Moe | LoraFamily::Llava => {
                &[Q, K, V, O, Gate, Up, Down]
            }
            LoraFamily::Fused | LoraFamily::ModernBert => &[Qkv, O, GateUp, Down],
            LoraFamily::Encoder => &[Q, K, V],
            LoraFamily::Mla => &[QA, QB, KvA, KvB, O, Gate, Up, Down],
            LoraFamily::MlaOneQ => &[Q, KvA, KvB, O, Gate, Up, Down],
        }
    }

    /// What a refusal offers instead: only targets the model accepts (no `all` where it is
    /// refused, no expert projections in a mixture of experts).
    pub fn names(self) -> &'static str {
        match self {
            LoraFamily::Separate => "q, k, v, o, gate, up, down or all",
            LoraFamily::Moe => "q, k, v, o",
            LoraFamily::Llava => "q, k, v, o, gate, up, down",
            LoraFamily::Fused => "qkv (qkv_proj), o, gate_up (gate_up_proj), down or all",
            LoraFamily::Encoder => "q, k, v (query, key, value)",
            LoraFamily::ModernBert => "qkv (Wqkv), o (attn.Wo), gate_up (Wi), down (mlp.Wo)",
            LoraFamily::Mla => {
                "q_a (q_a_proj), q_b (q_b_proj), kv_a (kv_a_proj_with_mqa), kv_b (kv_b_proj), o"
            }
            LoraFamily::MlaOneQ => "q (q_proj), kv_a (kv_a_proj_with_mqa), kv_b (kv_b_proj), o",
        }
    }
}

/// What the page's menu adds to a choice's module names, in the page's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoraNote {
    None,
    /// peft's own targets for the model type (used when `target_modules` is not given).
    PeftDefault,
    /// peft's `all-linear`.
    AllLinear,
}

/// One choice of the page's LoRA targets menu.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoraChoice {
    /// The select's value (and the option's test id): unique within a model's menu.
    pub key: &'static str,
    /// The plan's `lora.targets`.
    pub targets: &'static [&'static str],
    /// The modules peft wraps, as the model names them (the same in every language); empty
    /// where the note says it all.
    pub modules: &'static str,
    pub note: LoraNote,
}

const fn choice(
    key: &'static str,
    targets: &'static [&'static str],
    modules: &'static str,
) -> LoraChoice {
    LoraChoice {
        key,
        targets,
        modules,
        note: LoraNote::None,
    }
}

const QV: LoraChoice = choice("qv", &["q", "v"], "q_proj, v_proj");
const QV_PEFT: LoraChoice = LoraChoice {
    note: LoraNote::PeftDefault,
    ..QV
};
const QKVO: LoraChoice = choice(
    "qkvo",
    &["q", "k", "v", "o"],
    "q_proj, k_proj, v_proj, o_proj",
);
const ALL: LoraChoice = LoraChoice {
    note: LoraNote::AllLinear,
    ..choice("all", &["all"], "")
};
const SEPARATE_PEFT: &[LoraChoice] = &[QV_PEFT, QKVO, ALL];
const SEPARATE: &[LoraChoice] = &[QV, QKVO, ALL];
const MOE_PEFT: &[LoraChoice] = &[QV_PEFT, QKVO];
const MOE: &[LoraChoice] = &[QV, QKVO];
const LLAVA: &[LoraChoice] = &[
    QV,
    QKVO,
    choice(
        "qkvo-mlp",
        &["q", "k", "v", "o", "gate", "up", "down"],
        "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj",
    ),
];
const FUSED: &[LoraChoice] = &[
    choice("qkv", &["qkv"], "qkv_proj"),
    choice("qkv-o", &["qkv", "o"], "qkv_proj, o_proj"),
    ALL,
];
const ENCODER: &[LoraChoice] = &[
    LoraChoice {
        note: LoraNote::PeftDefault,
        ..choice("qv", &["q", "v"], "query, value")
    },
    choice("qkv", &["q", "k", "v"], "query, key, value"),
];
const MODERNBERT: &[LoraChoice] = &[
    choice("qkv", &["qkv"], "Wqkv"),
    choice("qkv-o", &["qkv", "o"], "Wqkv, attn.Wo"),
    choice(
        "qkv-o-mlp",
        &["qkv", "o", "gate_up", "down"],
        "Wqkv, Wo, Wi",
    ),
];
const MLA: &[LoraChoice] = &[choice(
    "qkvo",
    &["q_a", "q_b", "kv_a", "kv_b", "o"],
    "q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj",
)];
const MLA_ONE_Q: &[LoraChoice] = &[choice(
    "qkvo",
    &["q", "kv_a", "kv_b", "o"],
    "q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj",
)];

/// Whether peft 0.21.2 has default targets for `model_type`
/// (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING` in `peft/utils/constants.py`: `q_proj`,
/// `v_proj` for these decoders, `query`, `value` for BERT and RoBERTa); it has none for phi3,
/// olmo2, qwen2_moe, qwen3_moe, gpt_oss, deepseek_v3, modernbert or llava.
fn peft_has_default(model_type: &str) -> bool {
    matches!(
        model_type,
        "llama"
            | "mistral"
            | "mixtral"
            | "gemma2"
            | "gemma3_text"
            | "qwen2"
            | "qwen3"
            | "bert"
            | "roberta"
    )
}

/// The page's LoRA targets menu for `cfg` as `family` (LLaVA's language model is
/// [`LoraFamily::in_llava`]): peft's default where it has one, the attention's projections and
/// every linear layer of the blocks, each in the model's own module names, and only what
/// [`check_lora`] and [`check_variant`] accept. Empty where LoRA is not modelled.
pub fn lora_menu(cfg: &TextConfig, family: Option<LoraFamily>) -> &'static [LoraChoice] {
    let peft = peft_has_default(&cfg.model_type);
    let Some(family) = family else {
        return &[];
    };
    match family {
        LoraFamily::Separate if peft => SEPARATE_PEFT,
        LoraFamily::Separate => SEPARATE,
        LoraFamily::Moe if peft => MOE_PEFT,
        LoraFamily::Moe => MOE,
        LoraFamily::Llava => LLAVA,
        LoraFamily::Fused => FUSED,
        LoraFamily::Encoder => ENCODER,
        LoraFamily::ModernBert => MODERNBERT,
        LoraFamily::Mla => MLA,
        LoraFamily::MlaOneQ => MLA_ONE_Q,
    }
}

/// Refuses LoRA targets the model has no module for, as peft does (`inject_adapter` raises when a
/// target matches nothing), naming only what the model accepts ([`LoraFamily`]); LLaVA's
/// language model is checked as [`LoraFamily::in_llava`]. peft's default for BERT and RoBERTa
/// (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING` in `peft/utils/constants.py`) is
/// `query`, `value`, the plan's default `q`, `v`; peft 0.21 has no default for phi3, modernbert
/// or deepseek_v3: their plans name the modules. DeepSeek-V3's `gate_proj`, `up_proj`,
/// `down_proj` (the shared experts' and the dense layers') are `check_moe_lora`'s to refuse. An
/// encoder's `all` is refused: peft's `all-linear` also wraps the MLM head's `dense`, which is
/// not modelled.
pub fn check_lora(
    cfg: &TextConfig,
    family: Option<LoraFamily>,
    ctx: &BuildCtx,
) -> Result<(), EstimateError> {
    let Some(l) = &ctx.tune.lora else {
        return Ok(());
    };
    let mla = cfg.variant.mla.as_ref();
    let Some(family) = family else {
        return Err(EstimateError::Unsupported(
            "LoRA is not modelled for gpt2 (its projections are `Conv1D`, which peft wraps with `fan_in_fan_out`): use full fine-tuning or \"frozen\"".into(),
        ));
    };
    let (has, names) = (family.has(), family.names());
    let mut targets = Vec::new();
    for name in &l.targets {
        targets.extend(Target::parse(name)?);
    }
    if l.is_all() {
        return match cfg.arch {
            Arch::Llama => Ok(()),
            _ => Err(EstimateError::Unsupported(format!(
                "LoRA on `all` is not modelled for {} (peft's all-linear also wraps its MLM head's dense layer): target {names}",
                cfg.model_type
            ))),
        };
    }
    match targets.iter().find(|t| !has.contains(t)) {
        Some(t) => Err(EstimateError::Unsupported(format!(
            "LoRA target '{}' names no {} module{}: target {names}",
            t.key(),
            cfg.model_type,
            match mla.map(|m| m.q_lora_rank) {
                Some(Some(_)) => " (multi-head latent attention projects the queries through q_a_proj and q_b_proj, the keys and values through kv_a_proj_with_mqa and kv_b_proj; peft has no default targets for it)",
                Some(None) => " (its q_lora_rank is null: the queries have one q_proj; the keys and values go through kv_a_proj_with_mqa and kv_b_proj)",
                None if cfg.variant.fused || cfg.arch == Arch::ModernBert => " (its q, k, v and gate, up are fused projections, and peft has no default targets for it)",
                None => "",
            }
        ))),
        None => Ok(()),
    }
}

/// Refuses the settings a variant's layer is not modelled under: the tensor-parallel layouts of
/// [`check_variant_tp`], LoRA on what peft cannot wrap in a mixture of
/// experts ([`check_moe_lora`]), and weight formats other than the checkpoints' own on experts
/// (bitsandbytes swaps `nn.Linear`s, and the experts are one batched parameter; FP8 converts
/// every linear and `FP8Expert` the bias-free experts; MXFP4 exists for
/// gpt-oss's experts only).
pub fn check_variant(cfg: &TextConfig, ctx: &BuildCtx) -> Result<(), EstimateError> {
    let v = &cfg.variant;
    let gpt_oss = v.moe.as_ref().is_some_and(|m| m.kind == MoeKind::GptOss);
    let quant = ctx.tune.quant;
    if quant == Quantization::Mxfp4 && !gpt_oss {
        return Err(EstimateError::Unsupported(format!(
            "MXFP4 is the format of gpt-oss's experts (transformers converts only `GptOssExperts`); {} has none: use fp8 or the model dtype",
            cfg.model_type
        )));
    }
    if quant == Quantization::Fp8 && gpt_oss {
        return Err(EstimateError::Unsupported(
            "FP8 experts (`FP8Expert`) carry no biases, and gpt-oss's do: serve gpt-oss in mxfp4 or its model dtype".into(),
        ));
    }
    check_variant_tp(cfg, ctx)?;
    let own_format = matches!(quant, Quantization::Fp8 | Quantization::Mxfp4)
        && ctx.tune.sparsity == Sparsity::None;
    if v.moe.is_some() {
        check_moe_lora(cfg, ctx)?;
    }
    if let Some(moe) = &v.moe {
        check_moe_weights(cfg, moe, ctx, own_format)?;
    }
    Ok(())
}

/// Refuses the weight formats a mixture of experts is not modelled in. transformers 5.24's
/// `replace_with_bnb_linear` (`integrations/bitsandbytes.py`) swaps for a `bnb.nn.Linear4bit`
/// every module whose type is `nn.Linear`, outside `get_modules_to_not_convert`
/// (`quantizers/base.py`: the output head, and `_keep_in_fp32_modules`, gpt-oss's norms). In
/// Mixtral, Qwen3-MoE and gpt-oss that is the attention's `q_proj` ... `o_proj`; in Qwen2-MoE
/// also the shared expert's `gate_proj`, `up_proj`, `down_proj` and its `shared_expert_gate`
/// ([`Graph::weight_linear`]). The routers (`*TopKRouter`, a bare `weight` parameter) and the
/// fused 3-D experts are no `nn.Linear` and stay dense, upcast to fp32 with every other
/// parameter by `prepare_model_for_kbit_training`. QLoRA (NF4 with LoRA, fine-tuning) was
/// measured for these four (`tests/data/qlora-moe-steps.jsonl`); NF4 serving, INT8/INT4 and
/// DeepSeek-V3 (whose latent attention, shared experts and dense layers bitsandbytes would
/// quantize) were not.
fn check_moe_weights(
    cfg: &TextConfig,
    moe: &Moe,
    ctx: &BuildCtx,
    own_format: bool,
) -> Result<(), EstimateError> {
    let tune = &ctx.tune;
    if tune.dense_linears() || own_format {
        return Ok(());
    }
    let model = &cfg.model_type;
    if tune.quant != Quantization::Nf4 || tune.sparsity != Sparsity::None {
        return Err(EstimateError::Unsupported(format!(
            "int8/int4 weights and 2:4 sparsity are not modelled for {model} (mixture-of-experts layers; its fused experts are no nn.Linear): fine-tune it with QLoRA (\"quantization\": \"nf4\" with LoRA), serve it in fp8 or its model dtype"
        )));
    }
    if matches!(moe.kind, MoeKind::DeepseekV3 { .. }) {
        return Err(EstimateError::Unsupported(format!(
            "NF4 weights are not modelled for {model} (bitsandbytes would also quantize its latent attention's, shared experts' and dense layers' nn.Linears; not measured): use LoRA in the model dtype or fp8"
        )));
    }
    if tune.mode != Mode::Finetune || tune.lora.is_none() {
        return Err(EstimateError::Unsupported(format!(
            "NF4 weights are modelled for {model} in QLoRA fine-tuning only (\"mode\": \"finetune\" with \"lora\"): serve it in fp8 or its model dtype"
        )));
    }
    Ok(())
}

/// Refuses the tensor-parallel layouts a variant's layer is not modelled under, with the reason.
///
/// * Fused projections (Phi-3): the fused `qkv_proj` is sharded as Megatron-Core's fused
///   column-parallel `linear_qkv` (`megatron/core/transformer/attention.py`, `SelfAttention`:
///   each rank holds `num_query_groups / tp` groups' query, key and value rows), so the degree
///   must divide the key/value heads (Megatron replicates a key/value head past that, which a
///   single fused weight cannot express); the fused `gate_up_proj` as the gated `linear_fc1`
///   (`megatron/core/transformer/mlp.py`, `apply_swiglu_sharded_factory`: each rank holds
///   matching gate and up rows), so the degree must divide the intermediate size.
/// * Mixtures of experts: gpt-oss's biased, interleaved experts are not sharded. Under sequence
///   parallelism the block is Megatron-Core's all-gather dispatcher ([`moe::sparse_block`]); not
///   modelled with expert parallelism (the all-to-all dispatcher then gathers each expert's
///   received tokens over the tensor-parallel group,
///   `megatron/core/transformer/moe/token_dispatcher.py`) nor with DeepSeek-V3's latent
///   attention (Megatron-Core gathers its latents and shared rotary key).
fn check_variant_tp(cfg: &TextConfig, ctx: &BuildCtx) -> Result<(), EstimateError> {
    let (v, t) = (&cfg.variant, ctx.tp);
    if t <= 1 {
        return Ok(());
    }
    let model = &cfg.model_type;
    if v.fused {
        if !cfg.kv_heads.is_multiple_of(t) {
            return Err(EstimateError::BadLayout(format!(
                "tensor parallelism tp = {t} does not divide the {} key/value heads of {model}'s fused qkv_proj (each rank holds its heads' query, key and value rows): use tp among {}",
                cfg.kv_heads,
                divisors_of(cfg.kv_heads)
            )));
        }
        if !cfg.intermediate.is_multiple_of(t) {
            return Err(EstimateError::BadLayout(format!(
                "tensor parallelism tp = {t} does not divide the intermediate size {} of {model}'s fused gate_up_proj (each rank holds matching gate and up rows): use tp among {}",
                cfg.intermediate,
                divisors_of(cfg.intermediate)
            )));
        }
    }
    let Some(moe) = &v.moe else {
        return Ok(());
    };
    if moe.kind == MoeKind::GptOss {
        return Err(EstimateError::Unsupported(format!(
            "tensor parallelism is not modelled for {model}'s experts (biased, with gate and up interleaved): use tp = 1 with expert parallelism (ep), data parallelism or ZeRO"
        )));
    }
    if ctx.sequence_parallel && v.mla.is_some() {
        return Err(EstimateError::Unsupported(format!(
            "sequence parallelism is not modelled for {model}'s multi-head latent attention (its latents and shared rotary key would be gathered over the tensor-parallel group): turn sequence_parallel off"
        )));
    }
    if ctx.sequence_parallel && ctx.ep > 1 {
        return Err(EstimateError::Unsupported(format!(
            "sequence parallelism with expert parallelism is not modelled for {model} (Megatron-Core's all-to-all dispatcher would gather each expert's received tokens over the tensor-parallel group): turn sequence_parallel off, or use ep = 1"
        )));
    }
    let check = |dim: u64, what: &str| {
        if dim.is_multiple_of(t) {
            return Ok(());
        }
        Err(EstimateError::BadLayout(format!(
            "tensor parallelism tp = {t} does not divide {model}'s {what} ({dim}): each expert's gate and up are split by columns and its down by rows over the tp ranks; use tp among {}",
            divisors_of(dim)
        )))
    };
    check(moe.expert_intermediate, "expert intermediate size")?;
    if let Some(si) = moe.shared_intermediate {
        check(si, "shared expert intermediate size")?;
    }
    Ok(())
}

fn divisors_of(n: u64) -> String {
    (1..=n)
        .filter(|d| n.is_multiple_of(*d))
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Refuses the LoRA targets peft cannot wrap in a mixture of experts. In transformers 5.24 the
/// routed experts are one module of fused 3-D parameters (`Qwen3MoeExperts.gate_up_proj` and
/// `down_proj`, `MixtralExperts`, ...) and the router a bare `weight` parameter
/// (`Qwen3MoeTopKRouter`), not `nn.Linear` modules, which are what peft's LoRA replaces
/// (`peft/tuners/lora/model.py` `_create_new_module`); peft 0.21's `target_parameters`
/// (`ParamWrapper`, a low-rank delta on the whole 3-D parameter) is not modelled. The attention
/// projections `q_proj` ... `o_proj` (DeepSeek-V3's `q_a_proj` ... `o_proj`) are `nn.Linear` and go
/// through the dense LoRA layer. DeepSeek-V3's shared experts and dense layers
/// (`DeepseekV3MLP`) are `nn.Linear`s too, but LoRA on them alone, beside frozen fused experts, is
/// not modelled.
fn check_moe_lora(cfg: &TextConfig, ctx: &BuildCtx) -> Result<(), EstimateError> {
    let Some(lora) = &ctx.tune.lora else {
        return Ok(());
    };
    if ctx.ep > 1 {
        return Err(EstimateError::Unsupported(format!(
            "LoRA with expert parallelism is not modelled for {}: use ep = 1 (the frozen experts then need no gradient exchange) with data parallelism or ZeRO",
            cfg.model_type
        )));
    }
    let mut targets = Vec::new();
    for name in &lora.targets {
        targets.extend(Target::parse(name)?);
    }
    if let Some(t) = targets
        .iter()
        .find(|t| matches!(t, Target::Gate | Target::Up | Target::Down | Target::GateUp))
    {
        return Err(EstimateError::Unsupported(format!(
            "LoRA target '{}' is not modelled for {}: transformers fuses its experts into 3-D parameters (gate_up_proj, down_proj), which peft's LoRA cannot wrap as nn.Linear modules; target the attention projections {}",
            t.module(),
            cfg.model_type,
            match cfg.variant.mla.as_ref().map(|m| m.q_lora_rank) {
                Some(Some(_)) => "q_a, q_b, kv_a, kv_b, o",
                Some(None) => "q, kv_a, kv_b, o",
                None => "q, k, v, o",
            }
        )));
    }
    Ok(())
}

/// Refuses a sequence longer than the model's learned positions (for RoBERTa the table's rows
/// past its offset).
pub fn check_positions(cfg: &TextConfig, ctx: &BuildCtx) -> Result<(), EstimateError> {
    match cfg.max_positions {
        Some(rows) if ctx.seq > rows.saturating_sub(cfg.position_offset) => {
            Err(EstimateError::SequenceTooLong {
                model: cfg.model_type.clone(),
                seq: ctx.seq,
                max: rows.saturating_sub(cfg.position_offset),
            })
        }
        _ => Ok(()),
    }
}

/// `"frozen": N`: the embeddings and the first `N` blocks of the stack (module names as the
/// builders scope them, which are transformers' module paths below the base model).
fn freeze_layers(g: &mut Graph, cfg: &TextConfig, ctx: &BuildCtx) -> Result<(), EstimateError> {
    let Some(crate::estimator::tune::Frozen::Layers(n)) = ctx.tune.frozen else {
        return Ok(());
    };
    if n > cfg.layers {
        return Err(EstimateError::Unsupported(format!(
            "\"frozen\": {n} is more than the model's {} layers",
            cfg.layers
        )));
    }
    let (embeds, stack): (&[&str], &str) = match cfg.arch {
        Arch::Gpt2 => (&["wte", "wpe"], "h"),
        Arch::Bert | Arch::Roberta => (&["embeddings"], "layer"),
        Arch::ModernBert => (&["embeddings"], "layers"),
        Arch::Llama => (&["embed_tokens"], "layers"),
    };
    g.frozen.extend(embeds.iter().map(|e| e.to_string()));
    g.frozen.extend((0..n).map(|i| format!("{stack}.{i}")));
    Ok(())
}

/// A second causal mask for the sliding-window layers, built like [`causal_masks`]'s but never
/// skipped (the window is a real restriction).
fn sliding_mask(g: &mut Graph, ctx: &BuildCtx) -> Result<Option<TensorId>, EstimateError> {
    attention_mask(g, ctx).map(Some)
}

/// The bool causal mask, and for eager attention the float mask built from it once per forward
/// (`torch.where(mask, 0, finfo.min)` in the embeddings' dtype, `masking_utils.eager_mask`).
fn attention_mask(g: &mut Graph, ctx: &BuildCtx) -> Result<TensorId, EstimateError> {
    let m = g.causal_mask(ctx.batch, ctx.seq)?;
    match ctx.attn {
        AttnImpl::Sdpa => Ok(m),
        AttnImpl::Eager => {
            let dt = g.precision.param_dtype();
            g.no_grad_op(
                "where",
                &[m],
                vec![ctx.batch, 1, ctx.seq, ctx.seq],
                dt,
                Bytes::ZERO,
            )
        }
    }
}

/// The causal mask for the chosen attention: SDPA gets the bool mask (converted per call), or
/// none when the plan's batch is unpadded ([`CausalMask::Skipped`]: `is_causal`); eager adds a
/// float mask built once per forward (`torch.where(mask, 0, finfo.min)` in the embeddings' dtype,
/// `masking_utils.eager_mask`), always.
fn causal_masks(g: &mut Graph, ctx: &BuildCtx) -> Result<Option<TensorId>, EstimateError> {
    if ctx.attn == AttnImpl::Sdpa && ctx.causal_mask == CausalMask::Skipped {
        return Ok(None);
    }
    attention_mask(g, ctx).map(Some)
}

/// `GPT2LMHeadModel.forward` (`models/gpt2/modeling_gpt2.py`).
fn gpt2(
    g: &mut Graph,
    cfg: &TextConfig,
    ctx: &BuildCtx,
    ids: TensorId,
) -> Result<(), EstimateError> {
    let cpu = ctx.device == Device::Cpu;
    let (h_dim, nh, d) = (cfg.hidden, cfg.heads, cfg.head_dim);
    let p = cfg.max_positions.unwrap_or(ctx.seq);
    let (x, wte) = g.embedding("wte", ids, cfg.vocab, h_dim)?;
    let pos = g.no_grad_op("arange", &[], vec![1, ctx.seq], DType::I64, Bytes::ZERO)?;
    let (pe, _) = g.embedding("wpe", pos, p, h_dim)?;
    let mut h = g.add(x, pe, false)?;
    let mask = causal_masks(g, ctx)?;
    h = g.scoped("drop", |g| g.dropout_on(h, cfg.embd_dropout, cpu))?;
    h = run_layers(g, cfg, ctx, "h", h, |g, h, _| {
        let a = g.layer_norm("ln_1", h, true)?;
        let qkv = g.scoped("attn", |g| g.conv1d("c_attn", a, h_dim, 3 * h_dim))?;
        let (b, s) = (ctx.batch, ctx.seq);
        let parts = g.split(qkv, vec![vec![b, s, h_dim]; 3])?;
        let q = heads_view(g, parts[0], nh, d)?;
        let k = heads_view(g, parts[1], nh, d)?;
        let v = heads_view(g, parts[2], nh, d)?;
        let o = match ctx.attn {
            AttnImpl::Sdpa => g.scoped("attn", |g| g.sdpa(q, k, v, mask, cfg.attn_dropout, cpu))?,
            AttnImpl::Eager => g.scoped("attn", |g| {
                g.eager_attention(
                    q,
                    k,
                    v,
                    mask,
                    EagerOpts {
                        dropout: cfg.attn_dropout,
                        fp32_softmax: false,
                        cpu,
                        softcap: false,
                    },
                )
            })?,
        };
        let o = g.scoped("attn", |g| g.conv1d("c_proj", o, h_dim, h_dim))?;
        let o = g.dropout_on(o, cfg.resid_dropout, cpu)?;
        let h = g.add(o, h, false)?;
        let m = g.layer_norm("ln_2", h, true)?;
        let m = g.scoped("mlp", |g| g.conv1d("c_fc", m, h_dim, cfg.intermediate))?;
        let m = g.scoped("mlp", |g| activation(g, m, cfg.act, cpu))?;
        let m = g.scoped("mlp", |g| g.conv1d("c_proj", m, cfg.intermediate, h_dim))?;
        let m = g.dropout_on(m, cfg.resid_dropout, cpu)?;
        g.add(h, m, false)
    })?;
    h = g.layer_norm("ln_f", h, true)?;
    let logits = if cfg.tie_embeddings {
        g.scoped("lm_head", |g| g.linear_with(h, wte, None))?
    } else {
        g.linear("lm_head", h, h_dim, cfg.vocab, false)?
    };
    g.causal_lm_loss(logits, ids)?;
    Ok(())
}

/// An encoder's `nn.Linear`: peft's `lora.Linear` around it when the plan's LoRA targets it
/// ([`Graph::block_linear`], the same adapters as a decoder's), the plain layer otherwise; under
/// a quantized format the quantized layer either way (bitsandbytes swaps it before peft wraps it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn adapted_linear(
    g: &mut Graph,
    leaf: &str,
    x: TensorId,
    fin: u64,
    fout: u64,
    bias: bool,
    target: Target,
    ctx: &BuildCtx,
) -> Result<TensorId, EstimateError> {
    if ctx.tune.lora.as_ref().is_some_and(|l| l.wraps(target)) || !ctx.tune.dense_linears() {
        let cpu = ctx.device == Device::Cpu;
        g.block_linear(leaf, x, fin, fout, bias, target, &ctx.tune, cpu)
    } else {
        g.linear(leaf, x, fin, fout, bias)
    }
}

/// transformers 4.x's `BertModel.forward` without an `attention_mask`
/// ([`crate::estimator::releases::StackRules::encoder_mask_always`]): `torch.ones((B, S))`
/// (fp32, the default dtype), then `get_extended_attention_mask`'s
/// `(1.0 - mask[:, None, None, :].to(self.dtype)) * min` in the parameters' dtype `pdt`.
/// Returns the ones and the `[B, 1, 1, S]` extended mask.
fn extended_mask(
    g: &mut Graph,
    b: u64,
    s: u64,
    pdt: DType,
) -> Result<(TensorId, TensorId), EstimateError> {
    let shape = vec![b, 1, 1, s];
    let ones = g.no_grad_op("ones", &[], vec![b, s], DType::F32, Bytes::ZERO)?;
    let mut m = g.view(ones, shape.clone())?;
    if pdt != DType::F32 {
        m = g.no_grad_op("_to_copy", &[m], shape.clone(), pdt, Bytes::ZERO)?;
    }
    let inv = g.no_grad_op("rsub", &[m], shape.clone(), pdt, Bytes::ZERO)?;
    let m = g.no_grad_op("mul", &[inv], shape, pdt, Bytes::ZERO)?;
    Ok((ones, m))
}

/// `BertForMaskedLM.forward` (`models/bert/modeling_bert.py`): embeddings (word + token type +
/// position, LayerNorm, dropout), post-LN encoder layers, the MLM head (dense, activation,
/// LayerNorm, decoder tied to the word embeddings plus its own bias) and `CrossEntropyLoss` on
/// the raw scores.
///
/// `RobertaForMaskedLM.forward` (`models/roberta/modeling_roberta.py`, transformers 5.24.0) runs
/// the same code but for two places: its embeddings number the positions from the input ids
/// ([`roberta_position_ids`]), so the position and token-type lookups are per sample
/// (`[B, S]`, where BERT's are `[1, S]` views of its buffers), and its head
/// (`RobertaLMHead`: `dense`, `gelu`, `layer_norm`, `decoder`) always uses the erf GELU.
fn bert(
    g: &mut Graph,
    cfg: &TextConfig,
    ctx: &BuildCtx,
    ids: TensorId,
) -> Result<(), EstimateError> {
    let cpu = ctx.device == Device::Cpu;
    let (h_dim, nh, d) = (cfg.hidden, cfg.heads, cfg.head_dim);
    let p = cfg.max_positions.unwrap_or(ctx.seq);
    let (b, s) = (ctx.batch, ctx.seq);
    // Buffers `position_ids` and `token_type_ids`, `[1, max_positions]` int64 each.
    let pos_buf = g.buffer(vec![1, p], DType::I64)?;
    let tt_buf = g.buffer(vec![1, p], DType::I64)?;
    let roberta = cfg.arch == Arch::Roberta;
    let mask = if ctx.rules.encoder_mask_always && ctx.attn == AttnImpl::Eager {
        Some(extended_mask(g, b, s, ctx.precision.param_dtype())?)
    } else {
        None
    };
    let (mut e, word) = g.scoped("embeddings", |g| {
        let pos = if roberta {
            roberta_position_ids(g, ids)?
        } else {
            g.alias(pos_buf, vec![1, s], false)
        };
        let (x, word) = g.embedding("word_embeddings", ids, cfg.vocab, h_dim)?;
        // `torch.gather(token_type_ids.expand(position_ids.shape[0], -1), 1, position_ids)`,
        // expanded to `[B, S]`.
        let rows = g.shape(pos)[0];
        let tt = g.no_grad_op(
            "gather",
            &[tt_buf, pos],
            vec![rows, s],
            DType::I64,
            Bytes::ZERO,
        )?;
        let tt = g.alias(tt, vec![b, s], false);
        let (te, _) = g.embedding("token_type_embeddings", tt, cfg.type_vocab, h_dim)?;
        let e = g.add(x, te, false)?;
        let (pe, _) = g.embedding("position_embeddings", pos, p, h_dim)?;
        let e = g.add(e, pe, false)?;
        let e = g.layer_norm("LayerNorm", e, true)?;
        Ok::<_, EstimateError>((g.dropout_on(e, cfg.embd_dropout, cpu)?, word))
    })?;
    e = run_layers(g, cfg, ctx, "layer", e, |g, h, _| {
        let a = g.scoped("attention", |g| {
            let (q, k, v) = g.scoped("self", |g| {
                let q = adapted_linear(g, "query", h, h_dim, nh * d, cfg.qkv_bias, Target::Q, ctx)?;
                let k = adapted_linear(g, "key", h, h_dim, nh * d, cfg.qkv_bias, Target::K, ctx)?;
                let v = adapted_linear(g, "value", h, h_dim, nh * d, cfg.qkv_bias, Target::V, ctx)?;
                Ok::<_, EstimateError>((
                    heads_view(g, q, nh, d)?,
                    heads_view(g, k, nh, d)?,
                    heads_view(g, v, nh, d)?,
                ))
            })?;
            let o = match ctx.attn {
                AttnImpl::Sdpa => {
                    g.scoped("self", |g| g.sdpa(q, k, v, None, cfg.attn_dropout, cpu))?
                }
                AttnImpl::Eager => g.scoped("self", |g| {
                    g.eager_attention(
                        q,
                        k,
                        v,
                        mask.map(|(_, m)| m),
                        EagerOpts {
                            dropout: cfg.attn_dropout,
                            fp32_softmax: false,
                            cpu,
                            softcap: false,
                        },
                    )
                })?,
            };
            g.scoped("output", |g| {
                let o = g.linear("dense", o, nh * d, h_dim, cfg.o_bias)?;
                let o = g.dropout_on(o, cfg.resid_dropout, cpu)?;
                let o = g.add(o, h, false)?;
                g.layer_norm("LayerNorm", o, true)
            })
        })?;
        let i = g.scoped("intermediate", |g| {
            let i = g.linear("dense", a, h_dim, cfg.intermediate, cfg.mlp_bias)?;
            activation(g, i, cfg.act, cpu)
        })?;
        g.scoped("output", |g| {
            let o = g.linear("dense", i, cfg.intermediate, h_dim, cfg.mlp_bias)?;
            let o = g.dropout_on(o, cfg.resid_dropout, cpu)?;
            let o = g.add(o, a, false)?;
            g.layer_norm("LayerNorm", o, true)
        })
    })?;
    // `BertModel.forward`'s locals, alive until it returns.
    if let Some((ones, m)) = mask {
        g.hold(&[ones, m]);
    }
    if let Some(labels) = cfg.variant.classifier {
        return sequence_classification(g, cfg, ctx, e, roberta, labels);
    }
    // BERT: `cls.predictions.transform.{dense, LayerNorm}`, `cls.predictions.decoder`;
    // RoBERTa: `lm_head.{dense, layer_norm, decoder}`.
    let (head, transform, norm, act) = if roberta {
        ("lm_head", None, "layer_norm", Activation::Gelu)
    } else {
        ("cls", Some("transform"), "LayerNorm", cfg.act)
    };
    let scores = g.scoped(head, |g| {
        let transform_ops = |g: &mut Graph| {
            let t = g.linear("dense", e, h_dim, h_dim, true)?;
            let t = activation(g, t, act, cpu)?;
            g.layer_norm(norm, t, true)
        };
        let t = match transform {
            Some(scope) => g.scoped(scope, transform_ops)?,
            None => transform_ops(g)?,
        };
        g.scoped("decoder", |g| {
            let bias = g.param(vec![cfg.vocab])?;
            if cfg.tie_embeddings {
                g.linear_with(t, word, Some(bias))
            } else {
                let w = g.param(vec![cfg.vocab, h_dim])?;
                g.linear_with(t, w, Some(bias))
            }
        })
    })?;
    if g.inference {
        // Without autograd only Python references keep tensors: `BertForMaskedLM.forward` and
        // `RobertaForMaskedLM.forward` (transformers 5.24) bind `sequence_output = outputs[0]`
        // and hold it while the head runs (`self.cls(sequence_output)`,
        // `self.lm_head(sequence_output)`), so it is alive beside the decoder's logits.
        g.hold(&[e]);
    }
    let scores = g.view(scores, vec![b * s, cfg.vocab])?;
    let labels = g.view(ids, vec![b * s])?;
    g.scoped("loss", |g| g.cross_entropy(scores, labels))?;
    Ok(())
}

/// The sequence-classification heads on the encoder's output `e` `[B, S, H]`, with
/// `CrossEntropyLoss` over `num_labels` logits (`problem_type` "single_label_classification":
/// more than one label and integer labels). `BertForSequenceClassification`
/// (`models/bert/modeling_bert.py`): `BertPooler` (`dense` on the first token's state, `tanh`),
/// `dropout`, `classifier`. `RobertaForSequenceClassification` (`models/roberta/modeling_roberta.py`,
/// no pooler): `RobertaClassificationHead` — the first token's state, `dropout`, `dense`, `tanh`,
/// `dropout`, `out_proj`. The first token is a view (`hidden_states[:, 0]`): the linear reads it
/// in place and saves the view, which keeps the encoder's output alive, as autograd does.
fn sequence_classification(
    g: &mut Graph,
    cfg: &TextConfig,
    ctx: &BuildCtx,
    e: TensorId,
    roberta: bool,
    labels: u64,
) -> Result<(), EstimateError> {
    let cpu = ctx.device == Device::Cpu;
    let (b, h) = (ctx.batch, cfg.hidden);
    let first = g.select(e, vec![b, h])?;
    let logits = if roberta {
        g.scoped("classifier", |g| {
            let x = g.dropout_on(first, cfg.resid_dropout, cpu)?;
            let x = g.linear("dense", x, h, h, true)?;
            let x = g.act(x, Act::Tanh, false)?;
            let x = g.dropout_on(x, cfg.resid_dropout, cpu)?;
            g.linear("out_proj", x, h, labels, true)
        })?
    } else {
        let pooled = g.scoped("bert", |g| {
            g.scoped("pooler", |g| {
                let x = g.linear("dense", first, h, h, true)?;
                g.act(x, Act::Tanh, false)
            })
        })?;
        let x = g.dropout_on(pooled, cfg.resid_dropout, cpu)?;
        g.linear("classifier", x, h, labels, true)?
    };
    if g.inference {
        g.keep(logits);
        return Ok(());
    }
    let target = g.input(vec![b], DType::I64)?;
    g.scoped("loss", |g| g.cross_entropy(logits, target))?;
    Ok(())
}

/// `ModernBertForMaskedLM.forward` (`models/modernbert/modeling_modernbert.py`, transformers
/// 5.24.0; [`super::modernbert`]) on `ids` `[B, S]`.
fn modernbert(
    g: &mut Graph,
    cfg: &TextConfig,
    mb: &ModernBert,
    ctx: &BuildCtx,
    ids: TensorId,
) -> Result<(), EstimateError> {
    let cpu = ctx.device == Device::Cpu;
    let (h_dim, nh, d) = (cfg.hidden, cfg.heads, cfg.head_dim);
    let (b, s) = (ctx.batch, ctx.seq);
    let pdt = g.precision.param_dtype();
    let (x, word) = g.scoped("embeddings", |g| {
        let (x, word) = g.embedding("tok_embeddings", ids, cfg.vocab, h_dim)?;
        let x = g.layer_norm("norm", x, mb.norm_bias)?;
        Ok::<_, EstimateError>((g.dropout_on(x, cfg.embd_dropout, cpu)?, word))
    })?;
    let mask = modernbert::sliding_mask(g, mb, ctx)?;
    // One rotary embedding per layer type present, each with its `{type}_inv_freq` and
    // `{type}_original_inv_freq` buffers, computed once per forward (global and local layers
    // differ only in `rope_theta`, which changes no size).
    let has = |local: bool| mb.local.contains(&local);
    let tables = |g: &mut Graph, on: bool| -> Result<Option<(TensorId, TensorId)>, EstimateError> {
        if !on {
            return Ok(None);
        }
        let inv = g.buffer(vec![d / 2], DType::F32)?;
        g.buffer(vec![d / 2], DType::F32)?;
        g.scoped("rotary_emb", |g| g.rotary_tables(inv, s, d, pdt))
            .map(Some)
    };
    let global_rope = tables(g, has(false))?;
    let local_rope = tables(g, has(true))?;
    let x = run_layers(g, cfg, ctx, "layers", x, |g, h, i| {
        let local = mb.local.get(i as usize).copied().unwrap_or(false);
        let (cos, sin) = match (local, local_rope, global_rope) {
            (true, Some(t), _) | (false, _, Some(t)) => t,
            _ => {
                return Err(EstimateError::Unsupported(
                    "a layer without its rotary table".into(),
                ))
            }
        };
        let a = if i == 0 {
            h
        } else {
            g.layer_norm("attn_norm", h, mb.norm_bias)?
        };
        let o = g.scoped("attn", |g| {
            let qkv = adapted_linear(
                g,
                "Wqkv",
                a,
                h_dim,
                3 * h_dim,
                cfg.qkv_bias,
                Target::Qkv,
                ctx,
            )?;
            // `qkv.view(B, S, 3, H, D).unbind(dim=-3)`: three views whose gradients backward
            // stacks into one `[B, S, 3·H·D]` tensor.
            let parts = g.split(qkv, vec![vec![b, s, h_dim]; 3])?;
            let q = heads_view(g, parts[0], nh, d)?;
            let k = heads_view(g, parts[1], nh, d)?;
            let v = heads_view(g, parts[2], nh, d)?;
            let q = modernbert::rotate_fp32(g, q, cos, sin)?;
            let k = modernbert::rotate_fp32(g, k, cos, sin)?;
            let m = if local { mask } else { None };
            let o = match ctx.attn {
                AttnImpl::Sdpa => g.sdpa(q, k, v, m.map(|m| m.0), cfg.attn_dropout, cpu)?,
                AttnImpl::Eager => g.eager_attention(
                    q,
                    k,
                    v,
                    m.and_then(|m| m.1),
                    EagerOpts {
                        dropout: cfg.attn_dropout,
                        fp32_softmax: true,
                        cpu,
                        softcap: false,
                    },
                )?,
            };
            let o = adapted_linear(g, "Wo", o, h_dim, h_dim, cfg.o_bias, Target::O, ctx)?;
            // `out_drop`: `nn.Dropout(attention_dropout)`, the identity at 0.
            g.dropout_on(o, cfg.attn_dropout, cpu)
        })?;
        let r = g.add(h, o, false)?;
        let m = g.layer_norm("mlp_norm", r, mb.norm_bias)?;
        let y = g.scoped("mlp", |g| {
            let wi = adapted_linear(
                g,
                "Wi",
                m,
                h_dim,
                2 * cfg.intermediate,
                cfg.mlp_bias,
                Target::GateUp,
                ctx,
            )?;
            let half = vec![b, s, cfg.intermediate];
            let parts = g.split(wi, vec![half.clone(), half])?;
            let act = activation(g, parts[0], cfg.act, cpu)?;
            let y = g.mul_bc(act, parts[1])?;
            let y = g.dropout_on(y, mb.mlp_dropout, cpu)?;
            adapted_linear(
                g,
                "Wo",
                y,
                cfg.intermediate,
                h_dim,
                cfg.mlp_bias,
                Target::Down,
                ctx,
            )
        })?;
        g.add(r, y, false)
    })?;
    let x = g.layer_norm("final_norm", x, mb.norm_bias)?;
    let t = g.scoped("head", |g| {
        let t = g.linear("dense", x, h_dim, h_dim, mb.classifier_bias)?;
        let t = activation(g, t, mb.classifier_act, cpu)?;
        g.layer_norm("norm", t, mb.norm_bias)
    })?;
    let logits = g.scoped("decoder", |g| {
        let bias = if mb.decoder_bias {
            Some(g.param(vec![cfg.vocab])?)
        } else {
            None
        };
        let w = if cfg.tie_embeddings {
            word
        } else {
            g.param(vec![cfg.vocab, h_dim])?
        };
        g.linear_with(t, w, bias)
    })?;
    if g.inference {
        // `ModernBertForMaskedLM.forward` binds `last_hidden_state = outputs[0]` and holds it
        // through `self.decoder(self.head(last_hidden_state))`: without autograd that reference
        // is what keeps it alive beside the logits.
        g.hold(&[x]);
    }
    modernbert::masked_lm_loss(g, logits, ids, cfg.vocab)
}

/// `RobertaEmbeddings.create_position_ids_from_input_ids` (transformers 5.24.0): `mask =
/// input_ids.ne(padding_idx).int()`, `(torch.cumsum(mask, dim=1).type_as(mask) + cache_length) *
/// mask`, `.long() + padding_idx`: `[B, S]` integer tensors without autograd (the cumsum of an
/// int32 tensor is int64), of which only the last, the position ids, outlives the embeddings (the
/// position and token-type lookups save it).
fn roberta_position_ids(g: &mut Graph, ids: TensorId) -> Result<TensorId, EstimateError> {
    let shape = g.shape(ids);
    let step = |g: &mut Graph, kind: &'static str, ins: &[TensorId], dt: DType| {
        g.no_grad_op(kind, ins, shape.clone(), dt, Bytes::ZERO)
    };
    let ne = step(g, "ne", &[ids], DType::Bool)?;
    let mask = step(g, "to_int", &[ne], DType::I32)?;
    let sum = step(g, "cumsum", &[mask], DType::I64)?;
    let sum = step(g, "type_as", &[sum], DType::I32)?;
    let sum = step(g, "add", &[sum], DType::I32)?;
    let inc = step(g, "mul", &[sum, mask], DType::I32)?;
    let long = step(g, "to_long", &[inc], DType::I64)?;
    step(g, "add", &[long], DType::I64)
}

/// The rotary embedding's `inv_freq` length and its tables' width: `head_dim / 2` and
/// `head_dim` (`cat((freqs, freqs))`); DeepSeek-V3 rotates only `qk_rope_head_dim` (its config
/// sets `head_dim` to it); gpt-oss's tables are the frequencies themselves (`emb = freqs`).
pub(crate) fn rope_dims(cfg: &TextConfig) -> (u64, u64) {
    let d = match &cfg.variant.mla {
        Some(m) => m.qk_rope_head_dim,
        None => cfg.head_dim,
    };
    if cfg.variant.sinks {
        (d / 2, d / 2)
    } else {
        (d / 2, d)
    }
}

/// `LlamaForCausalLM.forward` (`models/llama/modeling_llama.py`; Mistral and Qwen2 identical up
/// to biases and defaults).
fn llama(
    g: &mut Graph,
    cfg: &TextConfig,
    ctx: &BuildCtx,
    ids: TensorId,
) -> Result<(), EstimateError> {
    g.nf4_shared_constants(&ctx.tune)?;
    let (x, embed) = llama_embed(g, cfg, ids)?;
    let mut router_logits = Vec::new();
    let h = llama_decoder(g, cfg, ctx, x, &mut router_logits)?;
    if ctx.tune.recipe == crate::estimator::tune::Recipe::Torchtune {
        // torchtune's `TransformerDecoder` names its head `output` and returns
        // `output(h).float()`, which the recipe's loop holds.
        let logits = g.column_parallel_linear("output", h, cfg.hidden, cfg.vocab, false)?;
        return g.held_fp32_logits_loss(logits, ids).map(|_| ());
    }
    llama_head(g, cfg, h, embed, ids, &router_logits)
}

/// `embed_tokens(input_ids)` of a LLaMA-family model (Gemma's scaled): the embeddings and the
/// embedding weight.
pub(crate) fn llama_embed(
    g: &mut Graph,
    cfg: &TextConfig,
    ids: TensorId,
) -> Result<(TensorId, TensorId), EstimateError> {
    let (x, embed) = g.vocab_parallel_embedding("embed_tokens", ids, cfg.vocab, cfg.hidden)?;
    let x = match cfg.variant.gemma.as_ref() {
        Some(gm) => gemma::scale_embeddings(g, x, gm.version)?,
        None => x,
    };
    Ok((x, embed))
}

/// `LlamaModel.forward` from the input embeddings `x` (`[B, ctx.seq, hidden]`): the masks, the
/// rotary tables, the decoder layers and the final norm. A sparse block's router logits are
/// appended to `router_logits`.
pub(crate) fn llama_decoder(
    g: &mut Graph,
    cfg: &TextConfig,
    ctx: &BuildCtx,
    x: TensorId,
    router_logits: &mut Vec<TensorId>,
) -> Result<TensorId, EstimateError> {
    let cpu = ctx.device == Device::Cpu;
    let d = cfg.head_dim;
    let pdt = g.precision.param_dtype();
    let (nhl, nkvl) = g.tp_attention_heads(cfg.heads, cfg.kv_heads)?;
    let gm = cfg.variant.gemma.as_ref();
    // `inv_freq` and `original_inv_freq` buffers of the rotary embedding (`[d / 2]`).
    let (inv_len, table) = rope_dims(cfg);
    let inv_freq = g.buffer(vec![inv_len], pdt)?;
    g.buffer(vec![inv_len], pdt)?;
    let sl = cfg.variant.sliding.as_ref();
    // Global layers take the causal mask; local layers their sliding-window mask
    // (`create_sliding_window_causal_mask`), skipped like the causal one only while the window
    // covers the whole sequence. Each mask is built once, and only if a layer takes it.
    let any_global = sl.is_none_or(|sl| sl.local.iter().any(|&l| !l));
    let mask = if any_global {
        causal_masks(g, ctx)?
    } else {
        None
    };
    let local_mask = match sl {
        Some(sl) if sl.local.iter().any(|&l| l) => {
            if ctx.attn == AttnImpl::Sdpa
                && ctx.causal_mask == CausalMask::Skipped
                && ctx.seq <= sl.window
            {
                None
            } else {
                sliding_mask(g, ctx)?
            }
        }
        _ => None,
    };
    let (cos, sin) = g.scoped("rotary_emb", |g| {
        g.rotary_tables(inv_freq, ctx.seq, table, pdt)
    })?;
    // Gemma 3's local layers rotate with `rope_local_base_freq`: a second rotary embedding.
    let local_rope = match gm {
        Some(gm) if gm.version == 3 => {
            let inv = g.buffer(vec![d / 2], pdt)?;
            g.buffer(vec![d / 2], pdt)?;
            Some(g.scoped("rotary_emb_local", |g| {
                g.rotary_tables(inv, ctx.seq, d, pdt)
            })?)
        }
        _ => None,
    };
    let layer = LlamaLayer {
        cfg,
        tune: &ctx.tune,
        routing: ctx.routing(),
        heads: (nhl, nkvl),
        cos,
        sin,
        local_rope,
        cpu,
    };
    let h = run_layers(g, cfg, ctx, "layers", x, |g, h, i| {
        let local = sl.is_some_and(|sl| sl.is_local(i));
        layer.build(
            g,
            h,
            i,
            LlamaAttention::Masked {
                mask: if local { local_mask } else { mask },
                attn: ctx.attn,
            },
            router_logits,
        )
    })?;
    layer.norm(g, "norm", h)
}

/// `*ForCausalLM`'s `lm_head` (the embedding weight when tied), Gemma 2's final soft-capping,
/// `ForCausalLMLoss` against `ids`, and a mixture's load-balancing loss.
pub(crate) fn llama_head(
    g: &mut Graph,
    cfg: &TextConfig,
    h: TensorId,
    embed: TensorId,
    ids: TensorId,
    router_logits: &[TensorId],
) -> Result<(), EstimateError> {
    let gm = cfg.variant.gemma.as_ref();
    let logits = if cfg.tie_embeddings {
        g.scoped("lm_head", |g| g.column_parallel_linear_with(h, embed, None))?
    } else {
        g.column_parallel_linear("lm_head", h, cfg.hidden, cfg.vocab, false)?
    };
    // `final_logit_softcapping`: `logits / cap`, `tanh`, `* cap` over the whole vocabulary.
    let logits = if gm.is_some_and(|gm| gm.final_softcap) {
        g.softcap(logits)?
    } else {
        logits
    };
    let loss = g.causal_lm_loss(logits, ids)?;
    if let Some(moe) = cfg.variant.moe.as_ref().filter(|m| m.aux_loss) {
        if !g.inference {
            moe::aux_loss(g, moe, router_logits, loss)?;
        }
    }
    Ok(())
}

/// How a LLaMA decoder layer's attention gets its keys and values and which kernel runs: the
/// part of the layer that differs between a training step and one forward of generation.
pub(crate) enum LlamaAttention {
    /// Training (`use_cache=False`): this forward's keys and values under the causal `mask` (SDPA
    /// or eager, with the config's attention dropout), repeated to every query head when a mask
    /// is present; without one (an unpadded batch) SDPA takes the grouped heads (`enable_gqa`).
    Masked {
        mask: Option<TensorId>,
        attn: AttnImpl,
    },
    /// Generation under `torch.no_grad()` ([`super::generate`]): the keys and values go into
    /// the layer's cache (`k_cache`, `v_cache`, holding `past` tokens before this forward) and
    /// the attention reads the whole cache; Python references decide when tensors die. Eager
    /// attention (`eager`: Gemma 2 and gpt-oss always) repeats the cached heads and adds the
    /// layer's float `mask`; SDPA takes the grouped heads and no mask.
    Cached {
        k_cache: TensorId,
        v_cache: TensorId,
        past: u64,
        mask: Option<TensorId>,
        eager: bool,
    },
}

/// The parts of a LLaMA decoder layer that are the same in every layer of one forward.
pub(crate) struct LlamaLayer<'a> {
    pub cfg: &'a TextConfig,
    pub tune: &'a TuneCtx,
    /// The router's skew ([`Moe::tokens_of`]) and the experts' implementation.
    pub routing: Routing,
    /// One rank's `(heads, kv_heads)` (all of them without tensor parallelism).
    pub heads: (u64, u64),
    /// The rotary tables of this forward.
    pub cos: TensorId,
    pub sin: TensorId,
    /// Gemma 3's local layers' rotary tables (`rotary_emb_local`).
    pub local_rope: Option<(TensorId, TensorId)>,
    /// CPU kernels for the activation and the masked attention.
    pub cpu: bool,
}

impl LlamaLayer<'_> {
    /// The model's RMSNorm: Gemma's (`(1 + w)` in fp32), OLMo 2's and gpt-oss's (the weight in
    /// fp32, `GptOssRMSNorm`: `(self.weight * hidden_states).to(input_dtype)`) or LLaMA's.
    pub fn norm(&self, g: &mut Graph, leaf: &str, x: TensorId) -> Result<TensorId, EstimateError> {
        if self.cfg.variant.gemma.is_some() {
            g.gemma_rms_norm(leaf, x)
        } else if self.cfg.variant.norm_after || self.cfg.variant.sinks {
            g.olmo2_rms_norm(leaf, x)
        } else {
            g.rms_norm(leaf, x)
        }
    }

    /// `LlamaDecoderLayer.forward` on the layer input `h`, inside the layer's scope
    /// (`layers.{i}`): input RMSNorm, self-attention, residual add, post-attention RMSNorm,
    /// gated MLP, residual add.
    ///
    /// Without autograd nothing is saved, so Python references decide when tensors die (checked
    /// op by op against the oracle's per-op log): the decoder layer holds its input until it
    /// returns (`LlamaModel.forward` reassigns the loop variable only then);
    /// `LlamaAttention.forward` holds its input (the norm output) and the query until `o_proj`
    /// has run (keys and values are replaced by the cache tensors `update` returns);
    /// `LlamaMLP.forward` holds its input until `down_proj` has run. Only generation records
    /// these holds; the training step never has, and adding them would change its estimates.
    ///
    /// The variants ([`Variant`]) change the layer where their modeling files do: q/k norms after
    /// the projections, fused projections, norms after the sublayers, a sparse MoE block in
    /// place of the MLP. `index` is the layer's position (MoE layers may alternate with dense
    /// ones); a sparse block's router logits are appended to `router_logits`.
    pub fn build(
        &self,
        g: &mut Graph,
        h: TensorId,
        index: u64,
        attention: LlamaAttention,
        router_logits: &mut Vec<TensorId>,
    ) -> Result<TensorId, EstimateError> {
        let (cfg, tune) = (self.cfg, self.tune);
        let var = &cfg.variant;
        let (h_dim, nh, nkv, d) = (cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim);
        let hold = matches!(attention, LlamaAttention::Cached { .. });
        let gm = var.gemma.as_ref();
        let local = var.sliding.as_ref().is_some_and(|sl| sl.is_local(index));
        let (cos, sin) = match self.local_rope {
            Some(rope) if local => rope,
            _ => (self.cos, self.sin),
        };
        let a = if var.norm_after {
            h
        } else {
            self.norm(g, "input_layernorm", h)?
        };
        if let Some(m) = &var.mla {
            let kv = match attention {
                LlamaAttention::Masked { mask, attn } => MlaKv::Masked {
                    mask,
                    attn,
                    dropout: cfg.attn_dropout,
                    cpu: self.cpu,
                },
                LlamaAttention::Cached {
                    k_cache,
                    v_cache,
                    past,
                    ..
                } => MlaKv::Cached {
                    first: k_cache,
                    second: v_cache,
                    past,
                    cpu: self.cpu,
                },
            };
            let o = g.scoped("self_attn", |g| {
                mla::attention(g, m, cfg.heads, a, cos, sin, kv, tune)
            })?;
            let hold = Hold {
                layer: hold,
                weights: None,
            };
            return self.finish_layer(g, h, o, index, hold, router_logits);
        }
        // OLMo 2's q/k norms over the whole projection under tensor parallelism (below).
        let replicated = var.qk_norm == QkNorm::Full && g.tp_size() > 1;
        // One rank's key/value rows: its `kv_heads / t` heads, or the one head it shares with
        // other ranks when the degree exceeds them (Megatron-Core's `SelfAttention`,
        // `num_query_groups < world_size`: each rank produces one key/value head); the
        // column-parallel layers take the width summed over ranks. OLMo 2's gathered
        // projections split plain columns.
        let kv_out = if replicated {
            nkv * d
        } else {
            self.heads.1 * d * g.tp_size()
        };
        let (o, weights) = g.scoped("self_attn", |g| {
            let (q, k, v) = if var.fused {
                let qkv = g.block_linear(
                    "qkv_proj",
                    a,
                    h_dim,
                    (nh + 2 * nkv) * d,
                    cfg.qkv_bias,
                    Target::Qkv,
                    tune,
                    self.cpu,
                )?;
                // One rank's rows are its heads' queries, keys and values ([`check_variant`]
                // makes the degree divide the key/value heads), so the slices are its own.
                let s = g.shape(qkv);
                let (nhl, nkvl) = self.heads;
                let parts = g.split(
                    qkv,
                    vec![
                        vec![s[0], s[1], nhl * d],
                        vec![s[0], s[1], nkvl * d],
                        vec![s[0], s[1], nkvl * d],
                    ],
                )?;
                (parts[0], parts[1], parts[2])
            } else {
                let q = g.block_linear(
                    "q_proj",
                    a,
                    h_dim,
                    nh * d,
                    cfg.qkv_bias,
                    Target::Q,
                    tune,
                    self.cpu,
                )?;
                let k = g.block_linear(
                    "k_proj",
                    a,
                    h_dim,
                    kv_out,
                    cfg.qkv_bias,
                    Target::K,
                    tune,
                    self.cpu,
                )?;
                let v = g.block_linear(
                    "v_proj",
                    a,
                    h_dim,
                    kv_out,
                    cfg.qkv_bias,
                    Target::V,
                    tune,
                    self.cpu,
                )?;
                (q, k, v)
            };
            // OLMo 2's norms span the whole projection: transformers' plan
            // (`Olmo2Config.base_model_tp_plan`, `models/olmo2/configuration_olmo2.py`,
            // transformers commit 008e574) gathers the column-parallel q, k and v outputs
            // (`colwise_gather_output`, "we need to replicate here due to the added norm on q
            // and k"): every rank norms and attends over all heads, and `o_proj` takes its
            // columns of the replicated output (`rowwise_split_input`).
            let (q, k, v) = if replicated {
                (
                    g.tp_gather_output(q)?,
                    g.tp_gather_output(k)?,
                    g.tp_gather_output(v)?,
                )
            } else {
                (q, k, v)
            };
            let heads = if replicated { (nh, nkv) } else { self.heads };
            let (q, k) = match var.qk_norm {
                QkNorm::None => (q, k),
                QkNorm::Full => (self.norm(g, "q_norm", q)?, self.norm(g, "k_norm", k)?),
                QkNorm::PerHead => {
                    let s = g.shape(q);
                    let qh = g.view(q, vec![s[0], s[1], self.heads.0, d])?;
                    let kh = g.view(k, vec![s[0], s[1], self.heads.1, d])?;
                    let qn = self.norm(g, "q_norm", qh)?;
                    let kn = self.norm(g, "k_norm", kh)?;
                    (
                        g.view(qn, vec![s[0], s[1], self.heads.0 * d])?,
                        g.view(kn, vec![s[0], s[1], self.heads.1 * d])?,
                    )
                }
            };
            let q = heads_view(g, q, heads.0, d)?;
            let k = heads_view(g, k, heads.1, d)?;
            let v = heads_view(g, v, heads.1, d)?;
            let sinks = if var.sinks {
                Some(g.scoped("sinks", |g| g.param(vec![self.heads.0]))?)
            } else {
                None
            };
            let (q, k) = if sinks.is_some() {
                (
                    gpt_oss::rotate_halves(g, q, cos, sin, false)?,
                    gpt_oss::rotate_halves(g, k, cos, sin, false)?,
                )
            } else {
                (g.rotary(q, cos, sin)?, g.rotary(k, cos, sin)?)
            };
            // Phi-3's `apply_rotary_pos_emb` rotates `q[..., :rotary_dim]` and cats the rest
            // back on (`torch.cat([rotated, q_pass], dim=-1)`, `q_pass` empty at the full
            // rotary factor): a copy of the rotated queries and keys whose gradient passes back
            // as views. `cat` writes it contiguous in its `[B, H, S, D]` shape (heads-major),
            // where LLaMA's `q * cos + rotate_half(q) * sin` keeps the projection's
            // `[B, S, H, D]` strides. That order is the query's memory order in attention.
            let (q, k, order) = if var.fused {
                let (qs, ks) = (g.shape(q), g.shape(k));
                let (q, k) = (g.contiguous(q, qs)?, g.contiguous(k, ks)?);
                (q, k, QueryOrder::HeadsMajor)
            } else {
                (q, k, QueryOrder::SeqMajor)
            };
            // The attention weights the decoder layer keeps in its `_` (eager generation).
            let mut weights = None;
            let o = match (attention, sinks) {
                (LlamaAttention::Masked { mask, .. }, Some(sinks)) => {
                    gpt_oss::sink_attention(
                        g,
                        q,
                        k,
                        v,
                        mask,
                        sinks,
                        heads.0 / heads.1,
                        cfg.attn_dropout,
                        self.cpu,
                    )?
                    .0
                }
                (
                    LlamaAttention::Cached {
                        k_cache,
                        v_cache,
                        past,
                        mask,
                        ..
                    },
                    Some(sinks),
                ) => {
                    let k_all = g.kv_update(k, k_cache, past)?;
                    let v_all = g.kv_update(v, v_cache, past)?;
                    let (o, p) = gpt_oss::sink_attention(
                        g,
                        q,
                        k_all,
                        v_all,
                        mask,
                        sinks,
                        heads.0 / heads.1,
                        0.0,
                        false,
                    )?;
                    weights = Some(p);
                    o
                }
                (LlamaAttention::Masked { mask, attn }, None) => {
                    // With a mask present, `sdpa_attention_forward` cannot use `enable_gqa` and
                    // repeats k/v (`use_gqa_in_sdpa`); eager always repeats.
                    let (k, v) = if mask.is_some() {
                        (
                            g.repeat_kv(k, heads.0 / heads.1)?,
                            g.repeat_kv(v, heads.0 / heads.1)?,
                        )
                    } else {
                        (k, v)
                    };
                    // Phi-3's query is that `cat`'s heads-major output (`apply_rotary_pos_emb`
                    // in `models/phi3/modeling_phi3.py`): cuDNN and flash lay their output out
                    // in the query's order, so `sdpa_attention_forward`'s
                    // `transpose(1, 2).contiguous()` copies it.
                    match attn {
                        AttnImpl::Sdpa => {
                            g.sdpa_ordered(q, k, v, mask, cfg.attn_dropout, self.cpu, order)?
                        }
                        AttnImpl::Eager => g.eager_attention(
                            q,
                            k,
                            v,
                            mask,
                            EagerOpts {
                                dropout: cfg.attn_dropout,
                                fp32_softmax: true,
                                cpu: self.cpu,
                                softcap: gm.is_some_and(|gm| gm.attn_softcap),
                            },
                        )?,
                    }
                }
                (
                    LlamaAttention::Cached {
                        k_cache,
                        v_cache,
                        past,
                        mask,
                        eager,
                    },
                    None,
                ) => {
                    let k_all = g.kv_update(k, k_cache, past)?;
                    let v_all = g.kv_update(v, v_cache, past)?;
                    if eager {
                        // `eager_attention_forward` (Gemma 2's with its soft-capping) repeats
                        // the cached heads (`repeat_kv`) and materialises the scores over the
                        // whole cache. The keys and values are contiguous `[B, H, T, D]` (the
                        // cache's `torch.cat`, or `repeat_kv`'s `reshape`), so `torch.matmul`
                        // folds `[B, H]` as views; the rotated query keeps the projection's
                        // `[B, S, H, D]` strides, which fold only for one sequence or one token.
                        let k_all = g.repeat_kv(k_all, heads.0 / heads.1)?;
                        let v_all = g.repeat_kv(v_all, heads.0 / heads.1)?;
                        let qs = g.shape(q);
                        let copies = MatmulCopies {
                            q: qs[0] > 1 && qs[2] > 1,
                            k: false,
                            v: false,
                        };
                        let (o, p) = g.eager_attention_weights(
                            q,
                            k_all,
                            v_all,
                            mask,
                            EagerOpts {
                                dropout: 0.0,
                                fp32_softmax: true,
                                cpu: false,
                                softcap: gm.is_some_and(|gm| gm.attn_softcap),
                            },
                            copies,
                        )?;
                        weights = Some(p);
                        o
                    } else {
                        g.sdpa_infer(q, k_all, v_all)?
                    }
                }
            };
            let o = if replicated { g.tp_split_input(o)? } else { o };
            let o = g.block_linear(
                "o_proj",
                o,
                nh * d,
                h_dim,
                cfg.o_bias,
                Target::O,
                tune,
                self.cpu,
            )?;
            if hold {
                g.hold(&[a, q]);
            }
            Ok::<_, EstimateError>((o, weights))
        })?;
        let hold = Hold {
            layer: hold,
            weights,
        };
        self.finish_layer(g, h, o, index, hold, router_logits)
    }

    /// The rest of the decoder layer after the attention output `o`: the optional norm after
    /// it, the residual add, the MLP (dense, fused or a sparse block) with its norms, and the
    /// second residual add.
    fn finish_layer(
        &self,
        g: &mut Graph,
        h: TensorId,
        o: TensorId,
        index: u64,
        refs: Hold,
        router_logits: &mut Vec<TensorId>,
    ) -> Result<TensorId, EstimateError> {
        let hold = refs.layer;
        let (cfg, tune) = (self.cfg, self.tune);
        let var = &cfg.variant;
        let h_dim = cfg.hidden;
        let sandwich = var.gemma.is_some();
        let o = if var.norm_after || sandwich {
            self.norm(g, "post_attention_layernorm", o)?
        } else {
            o
        };
        let r = g.add(h, o, false)?;
        let m = if sandwich {
            self.norm(g, "pre_feedforward_layernorm", r)?
        } else if var.norm_after {
            r
        } else {
            self.norm(g, "post_attention_layernorm", r)?
        };
        let sparse = var.moe.as_ref().filter(|moe| moe.is_sparse(index));
        let y = g.scoped("mlp", |g| {
            let y = if let Some(moe) = sparse {
                let out = moe::sparse_block(g, moe, m, cfg.act, self.cpu, tune, self.routing)?;
                router_logits.push(out.router_logits);
                out.out
            } else if var.fused {
                let gu = g.block_linear(
                    "gate_up_proj",
                    m,
                    h_dim,
                    2 * cfg.intermediate,
                    cfg.mlp_bias,
                    Target::GateUp,
                    tune,
                    self.cpu,
                )?;
                // Each rank holds matching gate and up rows, so its output chunks into its
                // own gate and up halves.
                let s = g.shape(gu);
                let half = vec![
                    s[0],
                    s[1],
                    g.tp_local(cfg.intermediate, "intermediate size")?,
                ];
                let parts = g.split(gu, vec![half.clone(), half])?;
                let gt = activation(g, parts[0], cfg.act, self.cpu)?;
                // `up_states * self.activation_fn(gate)`
                let y = g.mul_bc(parts[1], gt)?;
                g.block_linear(
                    "down_proj",
                    y,
                    cfg.intermediate,
                    h_dim,
                    cfg.mlp_bias,
                    Target::Down,
                    tune,
                    self.cpu,
                )?
            } else {
                let gt = g.block_linear(
                    "gate_proj",
                    m,
                    h_dim,
                    cfg.intermediate,
                    cfg.mlp_bias,
                    Target::Gate,
                    tune,
                    self.cpu,
                )?;
                let gt = activation(g, gt, cfg.act, self.cpu)?;
                let up = g.block_linear(
                    "up_proj",
                    m,
                    h_dim,
                    cfg.intermediate,
                    cfg.mlp_bias,
                    Target::Up,
                    tune,
                    self.cpu,
                )?;
                let y = g.mul_bc(gt, up)?;
                g.block_linear(
                    "down_proj",
                    y,
                    cfg.intermediate,
                    h_dim,
                    cfg.mlp_bias,
                    Target::Down,
                    tune,
                    self.cpu,
                )?
            };
            if hold {
                g.hold(&[m]);
            }
            Ok::<_, EstimateError>(y)
        })?;
        // gpt-oss's layer rebinds `_` to the router scores the MLP returns
        // (`hidden_states, _ = self.mlp(hidden_states)`, `GptOssDecoderLayer.forward`); the
        // others keep the attention weights until the layer returns.
        let sinks = var.sinks;
        if let Some(p) = refs.weights.filter(|_| sinks) {
            g.hold(&[p]);
        }
        let y = if var.norm_after || sandwich {
            self.norm(g, "post_feedforward_layernorm", y)?
        } else {
            y
        };
        let out = g.add(r, y, false)?;
        if hold {
            g.hold(&[h]);
        }
        if let Some(p) = refs.weights.filter(|_| !sinks) {
            g.hold(&[p]);
        }
        Ok(out)
    }
}

/// The Python references a decoder layer holds in generation (see [`LlamaLayer::build`]).
struct Hold {
    /// The layer's input, the attention's input and query, and the MLP's input.
    layer: bool,
    /// The attention weights eager attention returns (`eager_attention_forward`'s second
    /// output), bound to `_` by the decoder layer (`hidden_states, _ = self.self_attn(...)`,
    /// Phi-3's `self_attn_weights`): the probabilities stay alive through the MLP. SDPA returns
    /// no weights.
    weights: Option<TensorId>,
}
