//! ModernBERT as transformers 5.24.0 trains it (`models/modernbert/modeling_modernbert.py`,
//! `ModernBertForMaskedLM`): token embeddings, LayerNorm and dropout (no positions: rotary), then
//! pre-norm encoder layers — `attn_norm` (the identity in layer 0), one fused `Wqkv` unbound into
//! query, key and value, rotary embeddings applied in fp32, bidirectional attention (global
//! layers see every token; local layers, every `global_attn_every_n_layers`-th excepted, only
//! tokens within `local_attention / 2`), `Wo`, then `mlp_norm` and the GeGLU MLP (one `Wi` chunked
//! into input and gate, `act(input) * gate`, `Wo`) — a final norm, the prediction head (`dense`,
//! activation, norm) and the decoder tied to the token embeddings, with `ForMaskedLMLoss`.
//!
//! The batch is `{"input_ids": ids, "labels": ids}` with no `attention_mask`: the default
//! eager/SDPA path on a batch without padding. transformers 5.24 no longer unpads in
//! ModernBERT's own code (that is the flash-attention integration's business), so the global
//! layers run without a mask (`create_bidirectional_mask` returns `None`) and the local layers
//! with the sliding-window mask, built once per forward unless the sequence is shorter than the
//! half-window (`_ignore_bidirectional_mask_sdpa`).

use crate::estimator::config::{AttnImpl, BuildCtx, Device};
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::ops::EagerOpts;
use crate::estimator::units::{tensor_bytes, Bytes, DType, Elems};

use super::activation::{activation, Activation};
use super::text::{heads_view, run_layers, tied_grad_sum, TextConfig};

/// What ModernBERT's config adds to the fields every text model has (`ModernBertConfig`).
#[derive(Clone, Debug, PartialEq)]
pub struct ModernBert {
    /// `norm_bias`: whether the LayerNorms carry a bias (false in the published models).
    pub norm_bias: bool,
    /// `decoder_bias`: the decoder's own `[vocab]` bias.
    pub decoder_bias: bool,
    /// `classifier_bias`: the prediction head's `dense` bias.
    pub classifier_bias: bool,
    /// `classifier_activation`: the prediction head's activation.
    pub classifier_act: Activation,
    /// `mlp_dropout`: dropout on `act(input) * gate`.
    pub mlp_dropout: f64,
    /// `sliding_window` = `local_attention // 2`: a local layer's query sees keys at most this
    /// far away on either side.
    pub half_window: u64,
    /// Per layer: whether it attends locally (`layer_types[i] == "sliding_attention"`).
    pub local: Vec<bool>,
}

/// Parameters as `sum(p.numel() for p in model.parameters())` counts them: the decoder weight is
/// the token embedding's when tied; layer 0 has no `attn_norm`.
pub fn param_count(cfg: &TextConfig, mb: &ModernBert) -> u64 {
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

/// `ModernBertForMaskedLM.forward` on `ids` `[B, S]`.
pub(crate) fn build(
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
        if cfg.tie_embeddings {
            tied_grad_sum(g, word);
        }
        let x = g.layer_norm("norm", x, mb.norm_bias)?;
        Ok::<_, EstimateError>((g.dropout_on(x, cfg.embd_dropout, cpu)?, word))
    })?;
    let mask = sliding_mask(g, mb, ctx)?;
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
            let qkv = g.linear("Wqkv", a, h_dim, 3 * h_dim, cfg.qkv_bias)?;
            // `qkv.view(B, S, 3, H, D).unbind(dim=-3)`: three views whose gradients backward
            // stacks into one `[B, S, 3·H·D]` tensor.
            let parts = g.split(qkv, vec![vec![b, s, h_dim]; 3])?;
            let q = heads_view(g, parts[0], nh, d)?;
            let k = heads_view(g, parts[1], nh, d)?;
            let v = heads_view(g, parts[2], nh, d)?;
            let q = rotate_fp32(g, q, cos, sin)?;
            let k = rotate_fp32(g, k, cos, sin)?;
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
            let o = g.linear("Wo", o, h_dim, h_dim, cfg.o_bias)?;
            // `out_drop`: `nn.Dropout(attention_dropout)`, the identity at 0.
            g.dropout_on(o, cfg.attn_dropout, cpu)
        })?;
        let r = g.add(h, o, false)?;
        let m = g.layer_norm("mlp_norm", r, mb.norm_bias)?;
        let y = g.scoped("mlp", |g| {
            let wi = g.linear("Wi", m, h_dim, 2 * cfg.intermediate, cfg.mlp_bias)?;
            let half = vec![b, s, cfg.intermediate];
            let parts = g.split(wi, vec![half.clone(), half])?;
            let act = activation(g, parts[0], cfg.act, cpu)?;
            let y = g.mul_bc(act, parts[1])?;
            let y = g.dropout_on(y, mb.mlp_dropout, cpu)?;
            g.linear("Wo", y, cfg.intermediate, h_dim, cfg.mlp_bias)
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
    masked_lm_loss(g, logits, ids, cfg.vocab)
}

/// `ForMaskedLMLoss` (`transformers/loss/loss_utils.py`): `logits.float()` (a new fp32 copy
/// unless already fp32), `view(-1, vocab)`, `cross_entropy` with mean reduction. The model's
/// output keeps the logits until the forward returns, past the loss.
fn masked_lm_loss(
    g: &mut Graph,
    logits: TensorId,
    ids: TensorId,
    vocab: u64,
) -> Result<(), EstimateError> {
    if g.inference {
        // `model(input_ids).logits`: no labels, no loss.
        g.keep(logits);
        return Ok(());
    }
    let n: u64 = g.shape(ids).iter().product();
    let f = g.cast(logits, DType::F32)?;
    let f = g.view(f, vec![n, vocab])?;
    let labels = g.view(ids, vec![n])?;
    g.scoped("loss", |g| g.cross_entropy(f, labels))?;
    g.hold(&[logits]);
    Ok(())
}

/// `apply_rotary_pos_emb` of `modeling_modernbert.py`: `q.float() * cos + rotate_half(q.float())
/// * sin`, then `.to(original_dtype)`. The two `float()` calls copy a low-precision query twice,
/// but each copy dies after its one use, so one copy alive at a time is the same memory.
fn rotate_fp32(
    g: &mut Graph,
    x: TensorId,
    cos: TensorId,
    sin: TensorId,
) -> Result<TensorId, EstimateError> {
    let dt = g.dtype(x);
    let xf = g.cast(x, DType::F32)?;
    let y = g.rotary(xf, cos, sin)?;
    g.cast(y, dt)
}

/// `create_bidirectional_sliding_window_mask` under the plan's attention: `None` while the
/// sequence is shorter than the half-window (`_ignore_bidirectional_mask_sdpa`, for eager too:
/// `eager_mask` asks `sdpa_mask`). Otherwise `sdpa_mask` evaluates `abs(q_idx - kv_idx) <= w`
/// over broadcast `arange`s: `[1, 1, S, S]` int64 differences and their absolute values (both
/// alive at once), then the bool mask, expanded (a view) to `[B, 1, S, S]`. Eager turns it into
/// the float mask of the embeddings' dtype (`torch.where(mask, 0, finfo.min)`, `[B, 1, S, S]`),
/// kept for the whole forward; SDPA gets the bool mask. Returns `(bool mask, float mask)`.
fn sliding_mask(
    g: &mut Graph,
    mb: &ModernBert,
    ctx: &BuildCtx,
) -> Result<Option<(TensorId, Option<TensorId>)>, EstimateError> {
    let (b, s) = (ctx.batch, ctx.seq);
    if s < mb.half_window {
        return Ok(None);
    }
    let square = vec![1, 1, s, s];
    let diffs = tensor_bytes(Elems::of_shape(&square)?, DType::I64)?;
    let m = g.no_grad_op(
        "sliding_window_mask",
        &[],
        square,
        DType::Bool,
        Bytes(diffs.0.saturating_mul(2)),
    )?;
    let m = g.alias(m, vec![b, 1, s, s], false);
    let float = match ctx.attn {
        AttnImpl::Sdpa => None,
        AttnImpl::Eager => {
            let dt = g.precision.param_dtype();
            Some(g.no_grad_op("where", &[m], vec![b, 1, s, s], dt, Bytes::ZERO)?)
        }
    };
    Ok(Some((m, float)))
}
