//! torchtune 0.1's single-device LoRA/QLoRA recipe (`"recipe": "torchtune"`) for the LLaMA
//! decoders: what the plan may ask of it, and the model initialisation it attaches to the graph
//! ([`crate::estimator::model_init::TorchtuneLlama`]). torchtune 0.1.1's `lora_llama2`
//! (`models/llama2/_component_builders.py`) is a plain LLaMA decoder: no biases, untied
//! embeddings, SiLU-gated MLP, rotary tables per attention module (`RotaryPositionalEmbeddings`,
//! fp32 `theta` and `cache` buffers of `max_seq_len` rows), LoRA on any of `q_proj`, `k_proj`,
//! `v_proj`, `output_proj` and, with `apply_lora_to_mlp`, on all three MLP projections at once.

use super::activation::Activation;
use super::text::{Arch, TextConfig, Variant};
use crate::estimator::config::BuildCtx;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, Precision};
use crate::estimator::model_init::{ModelInit, Proj, TorchtuneLlama};
use crate::estimator::tune::{Quantization, Target};
use crate::estimator::units::DType;

fn refuse(why: impl std::fmt::Display) -> EstimateError {
    EstimateError::Unsupported(format!("\"recipe\": \"torchtune\" {why}"))
}

/// The torchtune model of `cfg` (whose `config.json` gives `positions` as
/// `max_position_embeddings`) under `ctx`, or why the recipe cannot run it.
pub fn model(
    cfg: &TextConfig,
    positions: u64,
    ctx: &BuildCtx,
) -> Result<TorchtuneLlama, EstimateError> {
    let plain = cfg.arch == Arch::Llama
        && cfg.variant == Variant::default()
        && cfg.act == Activation::Silu
        && !cfg.tie_embeddings
        && !(cfg.qkv_bias || cfg.o_bias || cfg.mlp_bias);
    if !plain {
        return Err(refuse(format!(
            "is modelled for the plain LLaMA decoders torchtune 0.1 builds (lora_llama2: no biases, untied embeddings, SiLU MLP), not {}",
            cfg.model_type
        )));
    }
    let Some(lora) = &ctx.tune.lora else {
        return Err(refuse(
            "is its LoRA/QLoRA recipe (lora_finetune_single_device): add \"lora\"",
        ));
    };
    if ctx.precision != Precision::Bf16 {
        return Err(refuse(
            "runs in bf16 here (its QLoRA's NF4Tensor takes bf16 weights): set \"dtype\": \"bf16\"",
        ));
    }
    if !matches!(ctx.tune.quant, Quantization::None | Quantization::Nf4) {
        return Err(refuse(format!(
            "quantizes with torchao's NF4 only, not {}",
            ctx.tune.quant.key()
        )));
    }
    if ctx.tp > 1 || ctx.ep > 1 {
        return Err(refuse(
            "is a single-device recipe: no tensor or expert parallelism",
        ));
    }
    let adapted = Proj::ALL.map(|p| {
        lora.wraps(match p {
            Proj::Q => Target::Q,
            Proj::K => Target::K,
            Proj::V => Target::V,
            Proj::Output => Target::O,
            Proj::Gate => Target::Gate,
            Proj::Down => Target::Down,
            Proj::Up => Target::Up,
        })
    });
    let mlp = &adapted[4..];
    if mlp.iter().any(|&a| a) && !mlp.iter().all(|&a| a) {
        return Err(refuse(
            "adapts the MLP as a whole (apply_lora_to_mlp): target gate, up and down together or none of them",
        ));
    }
    // `RotaryPositionalEmbeddings` caches `max_seq_len` rows (the builders pass the model's
    // `max_position_embeddings`) and slices the cache by the sequence: a longer one fails.
    let max_seq_len = positions;
    if ctx.seq > max_seq_len {
        return Err(refuse(format!(
            "builds its rotary cache for max_seq_len = {max_seq_len} positions; a sequence of {} does not fit it",
            ctx.seq
        )));
    }
    Ok(TorchtuneLlama {
        layers: cfg.layers,
        dim: cfg.hidden,
        hidden: cfg.intermediate,
        heads: cfg.heads,
        kv_heads: cfg.kv_heads,
        head_dim: cfg.head_dim,
        vocab: cfg.vocab,
        max_seq_len,
        rank: lora.rank,
        adapted,
        quantize: ctx.tune.quant == Quantization::Nf4,
    })
}

/// Attaches torchtune's initialisation to a built LLaMA graph, with the rotary buffers each of
/// its attention modules keeps (`theta` `[d/2]` and `cache` `[max_seq_len, d/2, 2]`, fp32).
pub fn attach(
    g: &mut Graph,
    cfg: &TextConfig,
    positions: u64,
    ctx: &BuildCtx,
) -> Result<(), EstimateError> {
    let m = model(cfg, positions, ctx)?;
    let half = m.head_dim / 2;
    for _ in 0..m.layers {
        g.buffer(vec![half], DType::F32)?;
        g.buffer(vec![m.max_seq_len, half, 2], DType::F32)?;
    }
    g.init = Some(ModelInit::of(m));
    Ok(())
}
