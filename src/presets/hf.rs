//! Models defined by a Hugging Face `config.json`: GPT-2, BERT and the LLaMA-family decoders
//! (LLaMA, Mistral, Qwen2, Qwen3, Phi-3, OLMo 2, Gemma 2, Gemma 3 text, and the mixtures of
//! experts Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V3 and gpt-oss), read
//! with the defaults and attribute aliases of their transformers 5.24 config classes
//! (`models/*/configuration_*.py`). The task head is the language-modelling one
//! (`GPT2LMHeadModel`, `BertForMaskedLM`, `*ForCausalLM`), but for BERT's and RoBERTa's
//! sequence classification (`architectures`: `*ForSequenceClassification`).
//! Anything the builder cannot model is refused with a message naming the field, never guessed.

use serde_json::Value;

use super::gemma::Gemma;
use super::generate;
use super::llava::{self, Clip, Llava};
use super::mla::{Mla, MlaCache};
use super::modernbert::ModernBert;
use super::moe::{Moe, MoeKind};
use super::text::{self, Activation, Arch, QkNorm, Sliding, TextConfig, Variant};
use super::torchtune;
use crate::estimator::config::BuildCtx;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::Graph;

/// Largest sizes accepted from a config: far beyond any published model, small enough that the
/// op tape stays quick to build.
const MAX_LAYERS: u64 = 2048;
const MAX_DIM: u64 = 1 << 22;
const MAX_VOCAB: u64 = 1 << 24;
/// Labels of a sequence-classification head (a million classes is beyond any benchmark).
const MAX_LABELS: u64 = 1 << 20;
/// Most expert blocks (routed experts × sparse layers) a step may run. The transformers loop
/// runs each expert as ops of its own, so the op tape grows with this product, and the simulation
/// with it: DeepSeek-V3's 256 experts in 58 sparse layers (14,848) estimate in about 0.6 s
/// natively (`cargo bench --bench slowest`), and an input just under this cap within the
/// planner's 1 s promise. Every published model the importer reads is below it (Qwen3-235B-A22B:
/// 12,032; gpt-oss-120b: 4,608).
pub const MAX_EXPERT_BLOCKS: u64 = 16_384;

fn bad(msg: impl Into<String>) -> EstimateError {
    EstimateError::BadHfConfig(msg.into())
}

/// Reads the first present key of `keys` (a field and its aliases) as a positive integer.
fn uint(cfg: &Value, keys: &[&str], default: Option<u64>, max: u64) -> Result<u64, EstimateError> {
    let found = keys
        .iter()
        .find_map(|k| cfg.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)));
    let v = match found {
        Some((k, v)) => {
            let n = v.as_u64().or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            });
            n.ok_or_else(|| bad(format!("'{k}' must be a non-negative integer, got {v}")))?
        }
        None => default.ok_or_else(|| bad(format!("'{}' is missing", keys[0])))?,
    };
    if v == 0 {
        return Err(bad(format!("'{}' must be at least 1", keys[0])));
    }
    if v > max {
        return Err(bad(format!(
            "'{}' = {v} is above the supported {max}",
            keys[0]
        )));
    }
    Ok(v)
}

fn opt_uint(cfg: &Value, key: &str, max: u64) -> Result<Option<u64>, EstimateError> {
    match cfg.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => uint(cfg, &[key], None, max).map(Some),
    }
}

fn boolean(cfg: &Value, key: &str, default: bool) -> Result<bool, EstimateError> {
    match cfg.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_bool()
            .ok_or_else(|| bad(format!("'{key}' must be true or false, got {v}"))),
    }
}

fn prob(cfg: &Value, key: &str, default: f64) -> Result<f64, EstimateError> {
    match cfg.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => match v.as_f64() {
            Some(p) if (0.0..1.0).contains(&p) => Ok(p),
            _ => Err(bad(format!(
                "'{key}' must be a dropout probability in [0, 1), got {v}"
            ))),
        },
    }
}

fn activation(cfg: &Value, key: &str, default: &str) -> Result<Activation, EstimateError> {
    let name = match cfg.get(key) {
        None | Some(Value::Null) => default,
        Some(v) => v
            .as_str()
            .ok_or_else(|| bad(format!("'{key}' must be a string, got {v}")))?,
    };
    match name {
        "gelu_new" => Ok(Activation::GeluNew),
        "gelu" | "gelu_pytorch_tanh" => Ok(Activation::Gelu),
        "relu" => Ok(Activation::Relu),
        "silu" | "swish" => Ok(Activation::Silu),
        "quick_gelu" => Ok(Activation::QuickGelu),
        other => Err(bad(format!("activation '{other}' is not modelled (use gelu_new, gelu, gelu_pytorch_tanh, quick_gelu, relu or silu)"))),
    }
}

fn divide(what: &str, a: u64, b: u64) -> Result<u64, EstimateError> {
    if !a.is_multiple_of(b) {
        return Err(bad(format!("{what}: {a} is not divisible by {b}")));
    }
    Ok(a / b)
}

/// The model a `config.json` describes.
#[derive(Clone, Debug, PartialEq)]
pub enum HfModel {
    /// A language model ([`super::text`]).
    Text(TextConfig),
    /// A vision-language model ([`super::llava`]).
    Llava(Llava),
}

/// Parses a `config.json` of any supported `model_type`.
pub fn parse_model(cfg: &Value) -> Result<HfModel, EstimateError> {
    match cfg.get("model_type") {
        Some(Value::String(s)) if s == "llava" => llava(cfg).map(HfModel::Llava),
        _ => parse(cfg).map(HfModel::Text),
    }
}

/// Parses a language model's `config.json` into the builder's [`TextConfig`] (LLaVA's is read
/// by [`parse_model`]).
pub fn parse(cfg: &Value) -> Result<TextConfig, EstimateError> {
    if !cfg.is_object() {
        return Err(bad("expected a JSON object (the contents of config.json)"));
    }
    let mt = match cfg.get("model_type") {
        Some(Value::String(s)) => s.as_str(),
        Some(v) => return Err(bad(format!("'model_type' must be a string, got {v}"))),
        None => {
            return Err(bad(format!(
                "'model_type' is missing: expected one of {}",
                supported_list()
            )))
        }
    };
    if classifies(cfg) && !matches!(mt, "bert" | "roberta") {
        return Err(bad(format!(
            "a sequence-classification head is modelled for bert and roberta, not {mt}: remove 'architectures' for the language-modelling head"
        )));
    }
    match mt {
        "gpt2" => gpt2(cfg),
        "bert" | "roberta" => bert(cfg, mt),
        "modernbert" => modernbert(cfg),
        "llava" => Err(bad(
            "model_type 'llava' is a vision-language model, not a language model: its language model is 'text_config'",
        )),
        _ if SUPPORTED.contains(&mt) => llama(cfg, mt),
        other => Err(bad(format!(
            "model_type '{other}' is not supported: use {}",
            supported_list()
        ))),
    }
}

/// `GPT2Config`: `n_embd`/`hidden_size`, `n_layer`, `n_head`, `n_inner` (None → 4·n_embd),
/// `n_positions`, `activation_function` (gelu_new), dropouts 0.1, tied embeddings.
fn gpt2(cfg: &Value) -> Result<TextConfig, EstimateError> {
    let hidden = uint(cfg, &["n_embd", "hidden_size"], Some(768), MAX_DIM)?;
    let heads = uint(cfg, &["n_head", "num_attention_heads"], Some(12), MAX_DIM)?;
    let head_dim = divide("n_embd must be divisible by n_head", hidden, heads)?;
    if boolean(cfg, "reorder_and_upcast_attn", false)? {
        return Err(bad("'reorder_and_upcast_attn' = true is not modelled"));
    }
    if boolean(cfg, "add_cross_attention", false)? {
        return Err(bad(
            "'add_cross_attention' = true (encoder-decoder GPT-2) is not modelled",
        ));
    }
    Ok(TextConfig {
        arch: Arch::Gpt2,
        model_type: "gpt2".into(),
        vocab: uint(cfg, &["vocab_size"], Some(50257), MAX_VOCAB)?,
        hidden,
        layers: uint(cfg, &["n_layer", "num_hidden_layers"], Some(12), MAX_LAYERS)?,
        heads,
        kv_heads: heads,
        head_dim,
        intermediate: match opt_uint(cfg, "n_inner", MAX_DIM)? {
            Some(n) => n,
            None => 4 * hidden,
        },
        max_positions: Some(uint(
            cfg,
            &["n_positions", "max_position_embeddings"],
            Some(1024),
            MAX_DIM,
        )?),
        type_vocab: 0,
        position_offset: 0,
        tie_embeddings: boolean(cfg, "tie_word_embeddings", true)?,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        act: activation(cfg, "activation_function", "gelu_new")?,
        embd_dropout: prob(cfg, "embd_pdrop", 0.1)?,
        attn_dropout: prob(cfg, "attn_pdrop", 0.1)?,
        resid_dropout: prob(cfg, "resid_pdrop", 0.1)?,
        variant: Variant::default(),
    })
}

/// `BertConfig` for `BertForMaskedLM` and `RobertaConfig` for `RobertaForMaskedLM`
/// (`models/roberta/configuration_roberta.py`, transformers 5.24.0: vocabulary 50265,
/// `pad_token_id` 1, whose positions start at `pad_token_id + 1`): absolute positions only.
fn bert(cfg: &Value, mt: &str) -> Result<TextConfig, EstimateError> {
    let roberta = mt == "roberta";
    let hidden = uint(cfg, &["hidden_size"], Some(768), MAX_DIM)?;
    let heads = uint(cfg, &["num_attention_heads"], Some(12), MAX_DIM)?;
    let head_dim = divide(
        "hidden_size must be divisible by num_attention_heads",
        hidden,
        heads,
    )?;
    match cfg.get("position_embedding_type").and_then(|v| v.as_str()) {
        None | Some("absolute") => {}
        Some(other) => {
            return Err(bad(format!(
                "position_embedding_type '{other}' is not modelled (only 'absolute')"
            )))
        }
    }
    if boolean(cfg, "is_decoder", false)? {
        return Err(bad(format!("'is_decoder' = true (a causal LM head) is not modelled; {mt} is estimated as its masked-LM model")));
    }
    if boolean(cfg, "add_cross_attention", false)? {
        return Err(bad(format!(
            "'add_cross_attention' = true (an encoder-decoder {mt}) is not modelled"
        )));
    }
    let hidden_dropout = prob(cfg, "hidden_dropout_prob", 0.1)?;
    let max_positions = uint(cfg, &["max_position_embeddings"], Some(512), MAX_DIM)?;
    let position_offset = if roberta {
        let pad = match cfg.get("pad_token_id") {
            None => 1,
            Some(v) => v.as_u64().ok_or_else(|| {
                bad(format!(
                    "'pad_token_id' must be a non-negative integer (RoBERTa's positions start after it), got {v}"
                ))
            })?,
        };
        if pad + 1 >= max_positions {
            return Err(bad(format!("'max_position_embeddings' = {max_positions} leaves no position past 'pad_token_id' = {pad}")));
        }
        pad + 1
    } else {
        0
    };
    let (arch, vocab) = if roberta {
        (Arch::Roberta, 50265)
    } else {
        (Arch::Bert, 30522)
    };
    Ok(TextConfig {
        arch,
        model_type: mt.into(),
        vocab: uint(cfg, &["vocab_size"], Some(vocab), MAX_VOCAB)?,
        hidden,
        layers: uint(cfg, &["num_hidden_layers"], Some(12), MAX_LAYERS)?,
        heads,
        kv_heads: heads,
        head_dim,
        intermediate: uint(cfg, &["intermediate_size"], Some(3072), MAX_DIM)?,
        max_positions: Some(max_positions),
        type_vocab: uint(cfg, &["type_vocab_size"], Some(2), MAX_VOCAB)?,
        position_offset,
        tie_embeddings: boolean(cfg, "tie_word_embeddings", true)?,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        act: activation(cfg, "hidden_act", "gelu")?,
        embd_dropout: hidden_dropout,
        attn_dropout: prob(cfg, "attention_probs_dropout_prob", 0.1)?,
        resid_dropout: hidden_dropout,
        variant: Variant {
            classifier: sequence_classifier(cfg)?,
            ..Variant::default()
        },
    })
}

/// The labels of a sequence-classification head, when `architectures` names one
/// (`BertForSequenceClassification`, `RobertaForSequenceClassification`): `num_labels`, else
/// the length of `id2label`, else `PretrainedConfig`'s default 2.
fn sequence_classifier(cfg: &Value) -> Result<Option<u64>, EstimateError> {
    if !classifies(cfg) {
        return Ok(None);
    }
    let labels = match cfg.get("id2label") {
        Some(Value::Object(m)) if !m.is_empty() => m.len() as u64,
        _ => 2,
    };
    uint(cfg, &["num_labels"], Some(labels), MAX_LABELS).map(Some)
}

/// Whether `architectures` names a sequence-classification model (`*ForSequenceClassification`).
fn classifies(cfg: &Value) -> bool {
    match cfg.get("architectures") {
        Some(Value::Array(a)) => a
            .first()
            .and_then(Value::as_str)
            .is_some_and(|s| s.ends_with("ForSequenceClassification")),
        _ => false,
    }
}

/// `ModernBertConfig` (`models/modernbert/configuration_modernbert.py`, transformers 5.24.0):
/// vocabulary 50368, 768 wide, 22 layers of 12 heads, `intermediate_size` 1152 (the GeGLU `Wi`
/// is twice that), `hidden_activation` and `classifier_activation` gelu, no biases but the
/// decoder's (`norm_bias`, `attention_bias`, `mlp_bias`, `classifier_bias` false,
/// `decoder_bias` true), dropouts 0, tied decoder, `local_attention` 128 with every
/// `global_attn_every_n_layers` = 3rd layer global (`layer_types`, when listed, decides).
/// Positions are rotary: no length limit.
fn modernbert(cfg: &Value) -> Result<TextConfig, EstimateError> {
    let hidden = uint(cfg, &["hidden_size"], Some(768), MAX_DIM)?;
    let heads = uint(cfg, &["num_attention_heads"], Some(12), MAX_DIM)?;
    // `ModernBertAttention` raises unless the heads divide the width.
    let head_dim = divide(
        "hidden_size must be divisible by num_attention_heads",
        hidden,
        heads,
    )?;
    if !head_dim.is_multiple_of(2) {
        return Err(bad(format!(
            "head_dim must be even for rotary embeddings, got {head_dim}"
        )));
    }
    let layers = uint(cfg, &["num_hidden_layers"], Some(22), MAX_LAYERS)?;
    if boolean(cfg, "sparse_prediction", false)? {
        return Err(bad(
            "'sparse_prediction' = true (the head on the masked tokens only) is not modelled",
        ));
    }
    let local_attention = uint(cfg, &["local_attention"], Some(128), MAX_DIM)?;
    let local = match cfg.get("layer_types") {
        None | Some(Value::Null) => {
            let every = uint(cfg, &["global_attn_every_n_layers"], Some(3), MAX_LAYERS)?;
            (0..layers).map(|i| i % every != 0).collect()
        }
        Some(v) => listed_layer_types(v, layers)?,
    };
    let attention_bias = boolean(cfg, "attention_bias", false)?;
    let mb = ModernBert {
        norm_bias: boolean(cfg, "norm_bias", false)?,
        decoder_bias: boolean(cfg, "decoder_bias", true)?,
        classifier_bias: boolean(cfg, "classifier_bias", false)?,
        classifier_act: activation(cfg, "classifier_activation", "gelu")?,
        mlp_dropout: prob(cfg, "mlp_dropout", 0.0)?,
        half_window: local_attention / 2,
        local,
    };
    Ok(TextConfig {
        arch: Arch::ModernBert,
        model_type: "modernbert".into(),
        vocab: uint(cfg, &["vocab_size"], Some(50368), MAX_VOCAB)?,
        hidden,
        layers,
        heads,
        kv_heads: heads,
        head_dim,
        intermediate: uint(cfg, &["intermediate_size"], Some(1152), MAX_DIM)?,
        max_positions: None,
        type_vocab: 0,
        position_offset: 0,
        tie_embeddings: boolean(cfg, "tie_word_embeddings", true)?,
        qkv_bias: attention_bias,
        o_bias: attention_bias,
        mlp_bias: boolean(cfg, "mlp_bias", false)?,
        act: activation(cfg, "hidden_activation", "gelu")?,
        embd_dropout: prob(cfg, "embedding_dropout", 0.0)?,
        attn_dropout: prob(cfg, "attention_dropout", 0.0)?,
        resid_dropout: 0.0,
        variant: Variant {
            modernbert: Some(mb),
            ..Variant::default()
        },
    })
}

/// `layer_types`: one `"sliding_attention"` or `"full_attention"` per layer; whether each is local.
fn listed_layer_types(v: &Value, layers: u64) -> Result<Vec<bool>, EstimateError> {
    match v {
        Value::Array(xs) if xs.len() as u64 == layers => xs
            .iter()
            .map(|x| match x.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(bad(format!(
                    "'layer_types' entries must be \"sliding_attention\" or \"full_attention\", got {x}"
                ))),
            })
            .collect(),
        _ => Err(bad(format!(
            "'layer_types' must list one type per layer ({layers}), got {v}"
        ))),
    }
}

/// `LlavaConfig` (`models/llava/configuration_llava.py`, transformers 5.24.0): `vision_config`
/// a `CLIPVisionConfig` (its class defaults when given, LLaVA's own when absent: CLIP ViT-L/14 at
/// 336 pixels, 24 layers), `text_config` a LLaMA-family config (LLaMA's defaults when absent),
/// `vision_feature_layer` -2, `vision_feature_select_strategy` "default" (the class token
/// dropped), `projector_hidden_act` gelu, `multimodal_projector_bias` true, untied unless either
/// config ties. `image_seq_length`, when given, must be the tower's feature count: the forward
/// refuses a mismatch.
fn llava(cfg: &Value) -> Result<Llava, EstimateError> {
    let sub = |key: &str| -> Result<Option<&Value>, EstimateError> {
        match cfg.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) if v.is_object() => Ok(Some(v)),
            Some(v) => Err(bad(format!("'{key}' must be an object, got {v}"))),
        }
    };
    let vision = match sub("vision_config")? {
        None => Clip {
            hidden: 1024,
            intermediate: 4096,
            layers: 24,
            heads: 16,
            channels: 3,
            image_size: 336,
            patch_size: 14,
            act: Activation::QuickGelu,
            attn_dropout: 0.0,
        },
        Some(v) => clip_vision(v)?,
    };
    let text_cfg = match sub("text_config")? {
        None => serde_json::json!({"model_type": "llama"}),
        Some(t) if t.get("model_type").is_none() => {
            let mut t = t.clone();
            t["model_type"] = "llama".into();
            t
        }
        Some(t) => t.clone(),
    };
    let mut text = parse(&text_cfg).map_err(|e| match e {
        EstimateError::BadHfConfig(m) => bad(format!("text_config: {m}")),
        other => other,
    })?;
    if !llava::is_language_model(&text) {
        return Err(bad(format!(
            "text_config: model_type '{}' is not modelled as LLaVA's language model (use a LLaMA-family one: llama, mistral, qwen2, ...)",
            text.model_type
        )));
    }
    text.tie_embeddings |= boolean(cfg, "tie_word_embeddings", false)?;
    let all = vision.layers as i64 + 1;
    let index = |v: &Value| -> Result<u64, EstimateError> {
        match v.as_i64() {
            Some(i) if (-all..all).contains(&i) => Ok(if i < 0 { (all + i) as u64 } else { i as u64 }),
            _ => Err(bad(format!(
                "'vision_feature_layer' must index the tower's {all} hidden states (-{all} to {}), got {v}",
                all - 1
            ))),
        }
    };
    let feature_layers = match cfg.get("vision_feature_layer") {
        None | Some(Value::Null) => vec![all as u64 - 2],
        Some(Value::Array(xs)) if !xs.is_empty() => {
            xs.iter().map(index).collect::<Result<_, _>>()?
        }
        Some(v) => vec![index(v)?],
    };
    let drop_cls = match cfg
        .get("vision_feature_select_strategy")
        .and_then(Value::as_str)
    {
        None => match cfg.get("vision_feature_select_strategy") {
            None | Some(Value::Null) => true,
            Some(v) => {
                return Err(bad(format!(
                    "'vision_feature_select_strategy' must be \"default\" or \"full\", got {v}"
                )))
            }
        },
        Some("default") => true,
        Some("full") => false,
        Some(other) => {
            return Err(bad(format!(
                "'vision_feature_select_strategy' must be \"default\" or \"full\", got \"{other}\""
            )))
        }
    };
    let m = Llava {
        vision,
        text,
        feature_layers,
        drop_cls,
        projector_act: activation(cfg, "projector_hidden_act", "gelu")?,
        projector_bias: boolean(cfg, "multimodal_projector_bias", true)?,
    };
    if let Some(n) = opt_uint(cfg, "image_seq_length", MAX_DIM)? {
        if n != m.image_tokens() {
            return Err(bad(format!(
                "'image_seq_length' = {n} but the vision tower gives {} features per image ({}×{} patches{}): set it to {}",
                m.image_tokens(),
                m.vision.grid(),
                m.vision.grid(),
                if m.drop_cls { "" } else { " and the class token" },
                m.image_tokens()
            )));
        }
    }
    Ok(m)
}

/// `CLIPVisionConfig` (`models/clip/configuration_clip.py`, transformers 5.24.0): 768 wide, 12
/// layers of 12 heads, `intermediate_size` 3072, 3 channels, 224-pixel images in 32-pixel
/// patches, `hidden_act` quick_gelu, `attention_dropout` 0.
fn clip_vision(v: &Value) -> Result<Clip, EstimateError> {
    match v.get("model_type").and_then(Value::as_str) {
        None | Some("clip_vision_model") => {}
        Some(other) => {
            return Err(bad(format!(
                "vision_config: model_type '{other}' is not modelled (use clip_vision_model)"
            )))
        }
    }
    let hidden = uint(v, &["hidden_size"], Some(768), MAX_DIM)?;
    let heads = uint(v, &["num_attention_heads"], Some(12), MAX_DIM)?;
    divide(
        "vision_config: hidden_size must be divisible by num_attention_heads",
        hidden,
        heads,
    )?;
    // Far above any published tower's 336 or 448 pixels, and small enough that the patch count
    // stays a sane sequence.
    let image_size = uint(v, &["image_size"], Some(224), 1 << 14)?;
    let patch_size = uint(v, &["patch_size"], Some(32), 1 << 14)?;
    if patch_size > image_size {
        return Err(bad(format!(
            "vision_config: patch_size {patch_size} is larger than image_size {image_size}"
        )));
    }
    Ok(Clip {
        hidden,
        intermediate: uint(v, &["intermediate_size"], Some(3072), MAX_DIM)?,
        layers: uint(v, &["num_hidden_layers"], Some(12), MAX_LAYERS)?,
        heads,
        channels: uint(v, &["num_channels"], Some(3), 64)?,
        image_size,
        patch_size,
        act: activation(v, "hidden_act", "quick_gelu")?,
        attn_dropout: prob(v, "attention_dropout", 0.0)?,
    })
}

/// The `model_type`s this reader accepts, in the order messages list them.
pub const SUPPORTED: &[&str] = &[
    "gpt2",
    "bert",
    "roberta",
    "modernbert",
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "phi3",
    "olmo2",
    "gemma2",
    "gemma3_text",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "llava",
    "deepseek_v3",
    "gpt_oss",
];

/// [`SUPPORTED`] as a message lists them: "gpt2, bert, ... or gpt_oss".
pub fn supported_list() -> String {
    let (last, rest) = SUPPORTED.split_last().unwrap_or((&"", &[]));
    format!("{} or {last}", rest.join(", "))
}

/// The LLaMA-family decoders, each with its config class's defaults (`configuration_*.py`):
/// `LlamaConfig`, `MistralConfig`, `Qwen2Config`, `Qwen3Config`, `Phi3Config`, `Olmo2Config`,
/// `MixtralConfig`, `Qwen2MoeConfig`, `Qwen3MoeConfig`. Biases: Llama `attention_bias`/`mlp_bias`;
/// Qwen2 and Qwen2-MoE q/k/v bias without o bias; Qwen3, Qwen3-MoE and OLMo 2
/// `attention_bias`; Mistral, Mixtral and Phi-3 none. Positions are rotary: no length limit.
fn llama(cfg: &Value, mt: &str) -> Result<TextConfig, EstimateError> {
    // (vocab, hidden, intermediate, layers, heads, kv heads (None: = heads), head_dim)
    let (vocab, hidden, inter, layers, heads, kv_default, hd_default) = match mt {
        "llama" => (32000, 4096, 11008, 32, 32, None, None),
        "mistral" => (32000, 4096, 14336, 32, 32, Some(8), None),
        "qwen2" => (151936, 4096, 22016, 32, 32, Some(32), None),
        "qwen3" => (151936, 4096, 22016, 32, 32, Some(32), Some(128)),
        "phi3" => (32064, 3072, 8192, 32, 32, None, None),
        "olmo2" => (50304, 4096, 11008, 32, 32, None, None),
        "gemma2" => (256000, 2304, 9216, 26, 8, Some(4), Some(256)),
        "gemma3_text" => (262208, 2304, 9216, 26, 8, Some(4), Some(256)),
        "mixtral" => (32000, 4096, 14336, 32, 32, Some(8), None),
        "qwen2_moe" => (151936, 2048, 5632, 24, 16, Some(16), None),
        "deepseek_v3" => (129280, 7168, 18432, 61, 128, None, None),
        "gpt_oss" => (201088, 2880, 2880, 36, 64, Some(8), Some(64)),
        _ => (151936, 2048, 6144, 24, 32, Some(4), None),
    };
    let hidden = uint(cfg, &["hidden_size"], Some(hidden), MAX_DIM)?;
    let heads = uint(cfg, &["num_attention_heads"], Some(heads), MAX_DIM)?;
    let kv_heads = uint(
        cfg,
        &["num_key_value_heads"],
        Some(kv_default.unwrap_or(heads)),
        MAX_DIM,
    )?;
    divide(
        "num_attention_heads must be a multiple of num_key_value_heads",
        heads,
        kv_heads,
    )?;
    // `DeepseekV3Config.__post_init__` sets `head_dim` to `qk_rope_head_dim` (the rotary width).
    let mla = if mt == "deepseek_v3" {
        if kv_heads != heads {
            return Err(bad(format!(
                "deepseek_v3: num_key_value_heads ({kv_heads}) must equal num_attention_heads ({heads}): the latent is expanded to every head"
            )));
        }
        Some(mla_config(cfg)?)
    } else {
        None
    };
    let head_dim = match mla
        .as_ref()
        .map(|m| m.qk_rope_head_dim)
        .or(opt_uint(cfg, "head_dim", MAX_DIM)?)
        .or(hd_default)
    {
        Some(d) => d,
        None => divide(
            "hidden_size must be divisible by num_attention_heads (or give head_dim)",
            hidden,
            heads,
        )?,
    };
    if !head_dim.is_multiple_of(2) {
        return Err(bad(format!(
            "head_dim must be even for rotary embeddings, got {head_dim}"
        )));
    }
    let (qkv_bias, o_bias, mlp_bias) = match mt {
        "llama" => {
            let ab = boolean(cfg, "attention_bias", false)?;
            (ab, ab, boolean(cfg, "mlp_bias", false)?)
        }
        "qwen3" | "qwen3_moe" | "olmo2" | "gemma2" | "gemma3_text" | "deepseek_v3" => {
            let ab = boolean(cfg, "attention_bias", false)?;
            (ab, ab, false)
        }
        "gpt_oss" => {
            let ab = boolean(cfg, "attention_bias", true)?;
            (ab, ab, false)
        }
        "qwen2" | "qwen2_moe" => (true, false, false),
        _ => (false, false, false),
    };
    let mut variant = Variant::default();
    match mt {
        "qwen3" | "qwen3_moe" => variant.qk_norm = QkNorm::PerHead,
        "olmo2" => {
            variant.qk_norm = QkNorm::Full;
            variant.norm_after = true;
        }
        "phi3" => {
            variant.fused = true;
            // `Phi3RotaryEmbedding` rotates `head_dim · partial_rotary_factor` dims.
            if let Some(f) = cfg.get("partial_rotary_factor").and_then(Value::as_f64) {
                if f != 1.0 {
                    return Err(bad(format!(
                        "'partial_rotary_factor' = {f} is not modelled (only 1.0)"
                    )));
                }
            }
            for key in ["resid_pdrop", "embd_pdrop"] {
                if prob(cfg, key, 0.0)? > 0.0 {
                    return Err(bad(format!(
                        "'{key}' above 0 is not modelled for phi3 (its published configs use 0.0)"
                    )));
                }
            }
        }
        _ => {}
    }
    let layers = uint(cfg, &["num_hidden_layers"], Some(layers), MAX_LAYERS)?;
    if matches!(mt, "mixtral" | "qwen2_moe" | "qwen3_moe") {
        variant.moe = Some(moe_config(cfg, mt, layers)?);
    }
    if mt == "deepseek_v3" {
        variant.moe = Some(deepseek_moe(cfg, layers)?);
        variant.mla = mla;
    }
    if mt == "gpt_oss" {
        let (moe, sliding) = gpt_oss_config(cfg, layers)?;
        variant.moe = Some(moe);
        variant.sliding = Some(sliding);
        variant.sinks = true;
    }
    if let Some(moe) = &variant.moe {
        let sparse = (0..layers).filter(|&l| moe.is_sparse(l)).count() as u64;
        let blocks = sparse * moe.experts;
        if blocks > MAX_EXPERT_BLOCKS {
            return Err(bad(format!(
                "{} routed experts in each of {sparse} sparse layers make {blocks} expert blocks per step; the planner simulates at most {MAX_EXPERT_BLOCKS} (DeepSeek-V3 has 14,848): lower 'num_hidden_layers' or the expert count",
                moe.experts
            )));
        }
    }
    let gemma = matches!(mt, "gemma2" | "gemma3_text");
    if gemma {
        let (g, sliding) = gemma_config(cfg, mt, layers)?;
        if g.version == 3 {
            variant.qk_norm = QkNorm::PerHead;
        }
        variant.gemma = Some(g);
        variant.sliding = Some(sliding);
    } else if matches!(mt, "mistral" | "mixtral") {
        // `create_sliding_window_causal_mask` and `DynamicSlidingWindowLayer` for every layer
        // once `sliding_window` is set.
        if let Some(window) = opt_uint(cfg, "sliding_window", MAX_DIM)? {
            variant.sliding = Some(Sliding {
                window,
                local: vec![true; layers as usize],
            });
        }
    }
    let act = if gemma {
        let key = if cfg.get("hidden_activation").is_some_and(|v| !v.is_null()) {
            "hidden_activation"
        } else {
            "hidden_act"
        };
        activation(cfg, key, "gelu_pytorch_tanh")?
    } else {
        activation(cfg, "hidden_act", "silu")?
    };
    Ok(TextConfig {
        arch: Arch::Llama,
        model_type: mt.into(),
        vocab: uint(cfg, &["vocab_size"], Some(vocab), MAX_VOCAB)?,
        hidden,
        layers,
        heads,
        kv_heads,
        head_dim,
        intermediate: uint(cfg, &["intermediate_size"], Some(inter), MAX_DIM)?,
        max_positions: None,
        type_vocab: 0,
        position_offset: 0,
        tie_embeddings: boolean(cfg, "tie_word_embeddings", gemma)?,
        qkv_bias,
        o_bias,
        mlp_bias,
        act,
        embd_dropout: 0.0,
        attn_dropout: prob(cfg, "attention_dropout", 0.0)?,
        resid_dropout: 0.0,
        variant,
    })
}

/// `Gemma2Config` (`sliding_window` 4096 on even layers, `attn_logit_softcapping` 50.0,
/// `final_logit_softcapping` 30.0) and `Gemma3TextConfig` (`sliding_window` 4096 with
/// `sliding_window_pattern` 6: every sixth layer global; no soft-capping; q/k norms);
/// `layer_types`, when the config lists it, decides each layer.
fn gemma_config(cfg: &Value, mt: &str, layers: u64) -> Result<(Gemma, Sliding), EstimateError> {
    let version = if mt == "gemma2" { 2 } else { 3 };
    let window = uint(cfg, &["sliding_window"], Some(4096), MAX_DIM)?;
    let pattern = if version == 2 {
        2
    } else {
        uint(cfg, &["sliding_window_pattern"], Some(6), MAX_LAYERS)?
    };
    let local = layer_types(cfg, layers, pattern)?;
    let capped = |key: &str, default: Option<f64>| -> Result<bool, EstimateError> {
        match cfg.get(key) {
            None => Ok(default.is_some()),
            Some(Value::Null) => Ok(false),
            Some(v) => match v.as_f64() {
                Some(c) if c > 0.0 => Ok(true),
                _ => Err(bad(format!(
                    "'{key}' must be a positive number or null, got {v}"
                ))),
            },
        }
    };
    let (attn_default, final_default) = if version == 2 {
        (Some(50.0), Some(30.0))
    } else {
        (None, None)
    };
    Ok((
        Gemma {
            version,
            attn_softcap: capped("attn_logit_softcapping", attn_default)?,
            final_softcap: capped("final_logit_softcapping", final_default)?,
        },
        Sliding { window, local },
    ))
}

/// `layer_types` when the config lists it (one `"sliding_attention"` or `"full_attention"` per
/// layer), else every `pattern`-th layer global: whether each layer attends locally.
fn layer_types(cfg: &Value, layers: u64, pattern: u64) -> Result<Vec<bool>, EstimateError> {
    match cfg.get("layer_types") {
        None | Some(Value::Null) => Ok((0..layers).map(|i| (i + 1) % pattern != 0).collect()),
        Some(v) => listed_layer_types(v, layers),
    }
}

/// The attention fields of `DeepseekV3Config` (transformers 5.24.0
/// `models/deepseek_v3/configuration_deepseek_v3.py`): `q_lora_rank` 1536 (null: one
/// `q_proj`), `kv_lora_rank` 512, `qk_nope_head_dim` 128, `qk_rope_head_dim` 64, `v_head_dim`
/// 128, `rope_interleave` true, `attention_bias` false. `mla_cache` (not a transformers field)
/// picks the serving cache: `"latent"` (default, what transformers and vLLM/SGLang keep) or
/// `"expanded"` (per-head keys and values).
fn mla_config(cfg: &Value) -> Result<Mla, EstimateError> {
    let q_lora_rank = match cfg.get("q_lora_rank") {
        Some(Value::Null) => None,
        _ => Some(uint(cfg, &["q_lora_rank"], Some(1536), MAX_DIM)?),
    };
    let qk_rope_head_dim = uint(cfg, &["qk_rope_head_dim"], Some(64), MAX_DIM)?;
    if !qk_rope_head_dim.is_multiple_of(2) {
        return Err(bad(format!(
            "'qk_rope_head_dim' must be even for rotary embeddings, got {qk_rope_head_dim}"
        )));
    }
    let cache = match cfg.get("mla_cache") {
        None | Some(Value::Null) => MlaCache::Latent,
        Some(v) => match v.as_str() {
            Some("latent") => MlaCache::Latent,
            Some("expanded") => MlaCache::Expanded,
            _ => {
                return Err(bad(format!(
                    "'mla_cache' must be \"latent\" or \"expanded\", got {v}"
                )))
            }
        },
    };
    Ok(Mla {
        q_lora_rank,
        kv_lora_rank: uint(cfg, &["kv_lora_rank"], Some(512), MAX_DIM)?,
        qk_nope_head_dim: uint(cfg, &["qk_nope_head_dim"], Some(128), MAX_DIM)?,
        qk_rope_head_dim,
        v_head_dim: uint(cfg, &["v_head_dim"], Some(128), MAX_DIM)?,
        rope_interleave: boolean(cfg, "rope_interleave", true)?,
        bias: boolean(cfg, "attention_bias", false)?,
        cache,
    })
}

/// The expert fields of `DeepseekV3Config`: `n_routed_experts` 256 (alias
/// `num_local_experts`), `num_experts_per_tok` 8, `moe_intermediate_size` 2048,
/// `n_shared_experts` 1, `n_group` 8, `topk_group` 4, `norm_topk_prob` true,
/// `first_k_dense_replace` 3 (those first layers run the dense `intermediate_size` MLP).
/// `DeepseekV3ForCausalLM` adds no auxiliary loss.
fn deepseek_moe(cfg: &Value, layers: u64) -> Result<Moe, EstimateError> {
    let experts = uint(
        cfg,
        &["n_routed_experts", "num_local_experts"],
        Some(256),
        MAX_DIM,
    )?;
    let top_k = uint(cfg, &["num_experts_per_tok"], Some(8), MAX_DIM)?;
    let groups = uint(cfg, &["n_group"], Some(8), MAX_DIM)?;
    let topk_group = uint(cfg, &["topk_group"], Some(4), MAX_DIM)?;
    let per_group = divide(
        "n_routed_experts must be divisible by n_group",
        experts,
        groups,
    )?;
    // `topk(2)` inside each group, `topk(topk_group)` over the groups, `topk(top_k)` over the
    // experts of the chosen groups.
    if per_group < 2 || topk_group > groups || top_k > topk_group * per_group {
        return Err(bad(format!(
            "deepseek_v3 routing needs at least 2 experts per group, topk_group ({topk_group}) <= n_group ({groups}) and num_experts_per_tok ({top_k}) <= the {} experts of the chosen groups",
            topk_group * per_group
        )));
    }
    let inter = uint(cfg, &["moe_intermediate_size"], Some(2048), MAX_DIM)?;
    let shared = match cfg.get("n_shared_experts") {
        Some(Value::Null) => None,
        _ => Some(uint(cfg, &["n_shared_experts"], Some(1), MAX_DIM)?),
    };
    let first_dense = match cfg.get("first_k_dense_replace") {
        Some(v) if v.as_u64() == Some(0) => 0,
        Some(Value::Null) => 0,
        _ => uint(cfg, &["first_k_dense_replace"], Some(3), MAX_LAYERS)?,
    };
    Ok(Moe {
        kind: MoeKind::DeepseekV3 { groups, topk_group },
        experts,
        top_k,
        expert_intermediate: inter,
        norm_topk: boolean(cfg, "norm_topk_prob", true)?,
        shared_intermediate: shared.map(|n| n * inter),
        sparse_step: 1,
        dense_layers: (0..first_dense.min(layers)).collect(),
        aux_loss: false,
    })
}

/// `GptOssConfig` (transformers 5.24.0 `models/gpt_oss/configuration_gpt_oss.py`):
/// `num_local_experts` 128 (alias `num_experts`), `num_experts_per_tok` 4, the experts as wide
/// as `intermediate_size`, `sliding_window` 128 on the even layers unless `layer_types` says
/// otherwise, `output_router_logits` false.
fn gpt_oss_config(cfg: &Value, layers: u64) -> Result<(Moe, Sliding), EstimateError> {
    let experts = uint(
        cfg,
        &["num_local_experts", "num_experts"],
        Some(128),
        MAX_DIM,
    )?;
    let top_k = uint(cfg, &["num_experts_per_tok"], Some(4), MAX_DIM)?;
    if top_k > experts {
        return Err(bad(format!(
            "'num_experts_per_tok' = {top_k} is more than the {experts} experts"
        )));
    }
    let moe = Moe {
        kind: MoeKind::GptOss,
        experts,
        top_k,
        expert_intermediate: uint(cfg, &["intermediate_size"], Some(2880), MAX_DIM)?,
        norm_topk: false,
        shared_intermediate: None,
        sparse_step: 1,
        dense_layers: Vec::new(),
        aux_loss: boolean(cfg, "output_router_logits", false)?,
    };
    let sliding = Sliding {
        window: uint(cfg, &["sliding_window"], Some(128), MAX_DIM)?,
        local: layer_types(cfg, layers, 2)?,
    };
    Ok((moe, sliding))
}

/// The expert fields of `MixtralConfig` (`num_local_experts` 8, `num_experts_per_tok` 2, the
/// experts as wide as `intermediate_size`), `Qwen2MoeConfig` (60 experts, top 4,
/// `moe_intermediate_size` 1408, `shared_expert_intermediate_size` 5632, `norm_topk_prob`
/// false) and `Qwen3MoeConfig` (128 experts, top 8, `moe_intermediate_size` 768,
/// `norm_topk_prob` false); `decoder_sparse_step` 1, `mlp_only_layers` [],
/// `output_router_logits` false.
fn moe_config(cfg: &Value, mt: &str, layers: u64) -> Result<Moe, EstimateError> {
    // transformers 5.24 stores either spelling as `num_local_experts` (`attribute_map`).
    let (kind, experts_keys, experts, top_k, width) = match mt {
        "mixtral" => (
            MoeKind::Mixtral,
            ["num_local_experts", "num_experts"],
            8,
            2,
            None,
        ),
        "qwen2_moe" => (
            MoeKind::Qwen2,
            ["num_experts", "num_local_experts"],
            60,
            4,
            Some(1408),
        ),
        _ => (
            MoeKind::Qwen3,
            ["num_experts", "num_local_experts"],
            128,
            8,
            Some(768),
        ),
    };
    let experts = uint(cfg, &experts_keys, Some(experts), MAX_DIM)?;
    let top_k = uint(cfg, &["num_experts_per_tok"], Some(top_k), MAX_DIM)?;
    if top_k > experts {
        return Err(bad(format!(
            "'num_experts_per_tok' = {top_k} is more than the {experts} experts"
        )));
    }
    let expert_intermediate = match width {
        None => uint(cfg, &["intermediate_size"], Some(14336), MAX_DIM)?,
        Some(w) => uint(cfg, &["moe_intermediate_size"], Some(w), MAX_DIM)?,
    };
    if mt == "mixtral" {
        if let Some(j) = cfg.get("router_jitter_noise").and_then(Value::as_f64) {
            if j != 0.0 {
                return Err(bad(
                    "'router_jitter_noise' above 0 is not modelled (its published configs use 0.0)",
                ));
            }
        }
    }
    let (sparse_step, dense_layers) = if mt == "mixtral" {
        (1, Vec::new())
    } else {
        let step = uint(cfg, &["decoder_sparse_step"], Some(1), MAX_LAYERS)?;
        let dense = match cfg.get("mlp_only_layers") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(xs)) => xs
                .iter()
                .map(|x| {
                    x.as_u64().filter(|&i| i < layers).ok_or_else(|| {
                        bad(format!(
                            "'mlp_only_layers' must list layer indices below {layers}, got {x}"
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(v) => return Err(bad(format!("'mlp_only_layers' must be a list, got {v}"))),
        };
        (step, dense)
    };
    Ok(Moe {
        kind,
        experts,
        top_k,
        expert_intermediate,
        norm_topk: mt == "mixtral" || boolean(cfg, "norm_topk_prob", false)?,
        shared_intermediate: if mt == "qwen2_moe" {
            Some(uint(
                cfg,
                &["shared_expert_intermediate_size"],
                Some(5632),
                MAX_DIM,
            )?)
        } else {
            None
        },
        sparse_step,
        dense_layers,
        aux_loss: boolean(cfg, "output_router_logits", false)?,
    })
}

/// The page's LoRA targets menu for the model a `config.json` defines ([`text::lora_menu`]);
/// empty where LoRA is not modelled or the config is not one this reader takes (the plan's
/// estimate then says why).
pub fn lora_menu(cfg: &Value) -> &'static [text::LoraChoice] {
    match parse_model(cfg) {
        Ok(HfModel::Text(tc)) => text::lora_menu(&tc, text::LoraFamily::of(&tc)),
        Ok(HfModel::Llava(m)) => text::lora_menu(&m.text, llava::lora_family(&m)),
        Err(_) => &[],
    }
}

/// Builds the step of the model a `config.json` defines: training, or serving (a LLaMA-family
/// model generates with its KV cache, [`generate`]; the others run the prompt's forward).
pub fn build_from_config(cfg: &Value, ctx: &BuildCtx) -> Result<Graph, EstimateError> {
    let tc = match parse_model(cfg)? {
        HfModel::Text(tc) => tc,
        HfModel::Llava(m) => return llava::build(&m, ctx),
    };
    if ctx.tune.infer.is_some() && tc.arch == Arch::Llama {
        text::check_positions(&tc, ctx)?;
        text::check_variant(&tc, ctx)?;
        return generate::llama_step(&tc, ctx);
    }
    let mut g = text::build(&tc, ctx)?;
    if ctx.tune.recipe == crate::estimator::tune::Recipe::Torchtune {
        // `LlamaConfig`'s default; torchtune's builders pass the checkpoint's own.
        let positions = uint(cfg, &["max_position_embeddings"], Some(2048), MAX_DIM)?;
        torchtune::attach(&mut g, &tc, positions, ctx)?;
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_match_the_config_classes() {
        let g = parse(&json!({"model_type": "gpt2"})).unwrap();
        assert_eq!(
            (g.hidden, g.layers, g.heads, g.intermediate, g.max_positions),
            (768, 12, 12, 3072, Some(1024))
        );
        assert_eq!(g.param_count(), 124_439_808);
        let m = parse(&json!({"model_type": "mistral"})).unwrap();
        assert_eq!((m.kv_heads, m.head_dim), (8, 128));
        let q = parse(&json!({"model_type": "qwen2"})).unwrap();
        assert!(q.qkv_bias && !q.o_bias);
    }

    #[test]
    fn malformed_configs_are_errors() {
        for bad_cfg in [
            json!([1, 2]),
            json!({}),
            json!({"model_type": "t5"}),
            json!({"model_type": 3}),
            json!({"model_type": "gpt2", "n_embd": 770, "n_head": 12}),
            json!({"model_type": "gpt2", "n_layer": "twelve"}),
            json!({"model_type": "gpt2", "n_layer": 0}),
            json!({"model_type": "gpt2", "n_layer": -1}),
            json!({"model_type": "gpt2", "resid_pdrop": 1.5}),
            json!({"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 5}),
            json!({"model_type": "llama", "hidden_act": "mish"}),
            json!({"model_type": "bert", "position_embedding_type": "relative_key"}),
            json!({"model_type": "llama", "num_hidden_layers": 1e12}),
        ] {
            assert!(
                matches!(parse(&bad_cfg), Err(EstimateError::BadHfConfig(_))),
                "{bad_cfg}"
            );
        }
    }
}
