//! Serving a LLaMA-family model as transformers 5.24 `generate` runs it: `model.eval()` under
//! `torch.no_grad()`, a `DynamicCache`, no attention mask (one unpadded batch), and
//! `logits_to_keep=1` so the output head sees only the last position. One graph is one forward:
//! the prefill of the prompt (`past = 0`) or one decode step (one token per sequence over a
//! cache of `past` tokens). [`crate::estimator::estimate`] builds both and reports each peak.
//!
//! Python references decide when tensors die in a forward without autograd (checked op by op
//! against the oracle's per-op log): `LlamaModel.forward` holds `inputs_embeds` and the rotary
//! `cos`/`sin` until the last norm. The decoder layers are the training step's
//! (`text::LlamaLayer`) with the cached attention, which also records the references the
//! layer's modules hold (see `LlamaLayer::build`). `generate` then copies the last logits to
//! fp32 (`outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32)`) while the output is
//! alive. LLaVA ([`super::llava`]) runs the same forward (`forward`) with its image features
//! scattered into the embeddings before the language model.

use crate::estimator::config::AttnImpl;
use crate::estimator::config::BuildCtx;
use crate::estimator::config::Device;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::tune::InferStep;
use crate::estimator::units::Bytes;
use crate::estimator::units::DType;

use super::gemma;
use super::text::{self, Built, LlamaAttention, LlamaLayer, TextConfig};

/// One forward of generation (`ctx.tune.infer` says which) for a LLaMA-family `cfg`.
pub fn llama_step(cfg: &TextConfig, ctx: &BuildCtx) -> Built {
    let step = infer_step(ctx)?;
    let mut g = Graph::for_build(ctx);
    let ids = g.input(vec![ctx.batch, step.tokens], DType::I64)?;
    if cfg.variant.moe.is_some() {
        g.active_params = Some(cfg.active_param_count());
    }
    forward(&mut g, cfg, ctx, ids, |_, x| {
        Ok(Embedded {
            x,
            held: Vec::new(),
        })
    })?;
    Ok(g)
}

/// The forward `ctx.tune.infer` asks for.
pub(crate) fn infer_step(ctx: &BuildCtx) -> Result<InferStep, EstimateError> {
    ctx.tune
        .infer
        .ok_or_else(|| EstimateError::Unsupported("an inference graph needs its step".into()))
}

/// The language model's input embeddings as a multimodal model hands them over, and what its
/// `forward` binds besides them until it returns (after the language model's last norm).
pub(crate) struct Embedded {
    pub x: TensorId,
    pub held: Vec<TensorId>,
}

/// `*ForCausalLM.forward` of generation on the token ids `ids` (`[B, step.tokens]`, made by
/// the caller with whatever else it holds): the KV cache, `embed_tokens`, then `merge` (what a
/// vision-language model does between the text embeddings and its language model; the identity
/// for a text model), `LlamaModel.forward` on the embeddings it returns, the last position's
/// logits and `generate`'s fp32 copy of them.
pub(crate) fn forward(
    g: &mut Graph,
    cfg: &TextConfig,
    ctx: &BuildCtx,
    ids: TensorId,
    merge: impl FnOnce(&mut Graph, TensorId) -> Result<Embedded, EstimateError>,
) -> Result<(), EstimateError> {
    let step = infer_step(ctx)?;
    let tune = &ctx.tune;
    let (b, s) = (ctx.batch, step.tokens);
    let t = step.past.checked_add(s).ok_or(EstimateError::TooLarge)?;
    let (h_dim, nh, nkv, d) = (cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim);
    let pdt = g.precision.param_dtype();
    // Keys and values come out of the projections in the autocast dtype when autocast is on.
    let act = g.precision.autocast().unwrap_or(pdt);
    let kv_dt = step.kv_dtype.unwrap_or(act);
    g.nf4_shared_constants(tune)?;
    let sl = cfg.variant.sliding.as_ref();
    let mut caches = Vec::with_capacity(cfg.layers as usize);
    for i in 0..cfg.layers {
        // A local layer's cache (`DynamicSlidingWindowLayer`) keeps the last `window - 1`
        // tokens of the previous steps: this step's keys are cat to those, and the whole
        // concatenation is what the attention reads and what the cached view keeps alive.
        let (len, past) = match sl {
            Some(sl) if sl.is_local(i) => {
                let kept = step.past.min(sl.window.saturating_sub(1));
                (kept + s, kept)
            }
            _ => (t, step.past),
        };
        // MLA ([`super::mla`]): the latent and the rotary key, or the expanded heads.
        let [ks, vs] = match &cfg.variant.mla {
            Some(m) => m.cache_shapes(m.cache, b, nh, len),
            None => [vec![b, nkv, len, d], vec![b, nkv, len, d]],
        };
        let k = g.kv_cache(ks, kv_dt)?;
        let v = g.kv_cache(vs, kv_dt)?;
        caches.push((k, v, past));
    }
    let (x, embed) = g.embedding("embed_tokens", ids, cfg.vocab, h_dim)?;
    let gm = cfg.variant.gemma.as_ref();
    let x = match gm {
        Some(gm) => gemma::scale_embeddings(g, x, gm.version)?,
        None => x,
    };
    let Embedded { x, held } = merge(g, x)?;
    let (inv_len, table) = text::rope_dims(cfg);
    let inv_freq = g.buffer(vec![inv_len], pdt)?;
    g.buffer(vec![inv_len], pdt)?;
    let (cos, sin) = g.scoped("rotary_emb", |g| g.rotary_tables(inv_freq, s, table, pdt))?;
    let local_rope = match gm {
        Some(gm) if gm.version == 3 => {
            let inv = g.buffer(vec![d / 2], pdt)?;
            g.buffer(vec![d / 2], pdt)?;
            Some(g.scoped("rotary_emb_local", |g| g.rotary_tables(inv, s, d, pdt))?)
        }
        _ => None,
    };
    let eager =
        ctx.attn == AttnImpl::Eager || gm.is_some_and(|gm| gm.version == 2) || cfg.variant.sinks;
    let any = |local: bool| (0..cfg.layers).any(|i| sl.is_some_and(|sl| sl.is_local(i)) == local);
    // The masks `create_causal_mask` and `create_sliding_window_causal_mask` build once per
    // forward, each only if a layer takes it; `causal_mask_mapping` holds them until the model
    // returns. Keys are the whole cache: `t` tokens for the global layers, what the window kept
    // plus this step's for the local ones.
    let local_len = sl.map_or(t, |sl| step.past.min(sl.window.saturating_sub(1)) + s);
    let global_mask = if any(false) {
        generation_mask(g, b, s, t, false, eager)?
    } else {
        None
    };
    let local_mask = match sl {
        Some(sl) if any(true) => generation_mask(g, b, s, local_len, s > sl.window, eager)?,
        _ => None,
    };
    // The plan's device picks the kernels: on the CPU, MLA's unequal head dims send SDPA to its
    // math path, whose fp32 copies and scores a fused GPU kernel does not make.
    let layer = LlamaLayer {
        cfg,
        tune,
        routing: ctx.routing(),
        heads: (nh, nkv),
        cos,
        sin,
        local_rope,
        cpu: ctx.device == Device::Cpu,
    };
    let mut h = x;
    let mut router_logits = Vec::new();
    for (i, &(k_cache, v_cache, past)) in caches.iter().enumerate() {
        h = g.scoped(format!("layers.{i}"), |g| {
            layer.build(
                g,
                h,
                i as u64,
                LlamaAttention::Cached {
                    k_cache,
                    v_cache,
                    past,
                    mask: match sl {
                        Some(sl) if sl.is_local(i as u64) => local_mask,
                        _ => global_mask,
                    },
                    eager,
                },
                &mut router_logits,
            )
        })?;
    }
    let h = layer.norm(g, "norm", h)?;
    g.hold(&[x, cos, sin]);
    let masks: Vec<TensorId> = [global_mask, local_mask].into_iter().flatten().collect();
    g.hold(&masks);
    if !held.is_empty() {
        g.hold(&held);
    }
    let last = g.slice_view(h, vec![b, 1, h_dim])?;
    let logits = if cfg.tie_embeddings {
        g.scoped("lm_head", |g| g.linear_with(last, embed, None))?
    } else {
        g.linear("lm_head", last, h_dim, cfg.vocab, false)?
    };
    let logits = if gm.is_some_and(|gm| gm.final_softcap) {
        g.softcap(logits)?
    } else {
        logits
    };
    g.keep(logits);
    // `.to(copy=True, dtype=float32)` copies even fp32 logits.
    let next = if g.dtype(logits) == DType::F32 {
        g.contiguous(logits, vec![b, cfg.vocab])?
    } else {
        g.cast(logits, DType::F32)?
    };
    g.keep(next);
    Ok(())
}

/// The mask one forward of generation builds for `s` queries over `len` keys
/// (`masking_utils`, transformers 5.24): eager attention always gets the float mask of
/// `eager_mask` (`torch.where(bool_mask, 0, finfo.min)` in the embeddings' dtype, `[B, 1, S, T]`;
/// the bool mask dies once it is converted). SDPA gets none (`_ignore_causal_mask_sdpa`: an
/// unpadded batch is causal, or a single query) unless a sliding window `cuts` the prompt, when
/// `sdpa_mask` returns the bool mask itself.
fn generation_mask(
    g: &mut Graph,
    b: u64,
    s: u64,
    len: u64,
    cuts: bool,
    eager: bool,
) -> Result<Option<TensorId>, EstimateError> {
    if !eager && !cuts {
        return Ok(None);
    }
    let shape = vec![b, 1, s, len];
    let m = g.no_grad_op("causal_mask", &[], shape.clone(), DType::Bool, Bytes::ZERO)?;
    if !eager {
        return Ok(Some(m));
    }
    let dt = g.precision.param_dtype();
    g.no_grad_op("where", &[m], shape, dt, Bytes::ZERO)
        .map(Some)
}
