//! What Gemma 2 and Gemma 3 (text) add to the LLaMA-family decoder, as transformers runs them
//! (`models/gemma2/modeling_gemma2.py`, `models/gemma3/modeling_gemma3.py`): `GemmaRMSNorm`
//! (`(1 + w)` in fp32, [`Graph::gemma_rms_norm`]), four norms per layer (before and after
//! attention and MLP), embeddings scaled by `√hidden`, local layers attending through a sliding
//! window alternating with global ones, logit soft-capping, and Gemma 3's second rotary table
//! for the local layers.

use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::units::Bytes;

/// The Gemma part of a config (its sliding-window layers are [`super::text::Sliding`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma {
    /// 2 or 3.
    pub version: u8,
    /// `attn_logit_softcapping` is set (Gemma 2: 50.0): applied by eager attention only
    /// (`sdpa_attention_forward` has no soft-capping argument).
    pub attn_softcap: bool,
    /// `final_logit_softcapping` is set (Gemma 2: 30.0).
    pub final_softcap: bool,
}

/// The embeddings times `√hidden`: Gemma 2 multiplies by `torch.tensor(hidden_size**0.5,
/// dtype=hidden_states.dtype)` (a 0-d tensor made each forward), Gemma 3's
/// `Gemma3TextScaledWordEmbedding` by its `embed_scale` buffer cast to the weight's dtype.
/// The product saves only the scalar (the embedding output needs no saving).
pub fn scale_embeddings(
    g: &mut Graph,
    x: TensorId,
    version: u8,
) -> Result<TensorId, EstimateError> {
    let dt = g.dtype(x);
    let scale = if version == 2 {
        g.no_grad_op("scalar_tensor", &[], vec![], dt, Bytes::ZERO)?
    } else {
        let pdt = g.precision.param_dtype();
        let buf = g.buffer(vec![], pdt)?;
        g.cast(buf, dt)?
    };
    g.mul_bc(x, scale)
}
