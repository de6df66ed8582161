//! What ModernBERT adds to the text models' config and ops; its forward is
//! [`super::text`]'s `modernbert`. ModernBERT as transformers 5.24.0 trains it (`models/modernbert/modeling_modernbert.py`,
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

use crate::estimator::config::{AttnImpl, BuildCtx};
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::units::{tensor_bytes, Bytes, DType, Elems};

use super::activation::Activation;

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

/// `ForMaskedLMLoss` (`transformers/loss/loss_utils.py`): `logits.float()` (a new fp32 copy
/// unless already fp32), `view(-1, vocab)`, `cross_entropy` with mean reduction. The model's
/// output keeps the logits until the forward returns, past the loss.
pub(crate) fn masked_lm_loss(
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

/// `apply_rotary_pos_emb` of `modeling_modernbert.py`: `(q.float() * cos) +
/// (rotate_half(q.float()) * sin)`, then `.to(original_dtype)`. The two `float()` calls copy a
/// low-precision query twice, but each copy dies after its one use, so one copy alive at a time
/// is the same memory.
pub(crate) fn rotate_fp32(
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
pub(crate) fn sliding_mask(
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
