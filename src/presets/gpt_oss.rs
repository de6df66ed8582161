//! What gpt-oss adds to the LLaMA-family decoder, as transformers 5.24.0 runs it
//! (`models/gpt_oss/modeling_gpt_oss.py`): attention with a learned sink logit per head
//! (`eager_attention_forward`: the sinks are concatenated to the scores as one more column,
//! the row maximum subtracted, the softmax taken over both and the sink column dropped), its
//! rotary rotation of the halves (`_apply_rotary_emb` with `cos`/`sin` of `head_dim / 2`), the
//! router (`GptOssTopKRouter`: a bias, `topk` of the logits, a softmax over the chosen ones) and
//! the experts (`GptOssExperts`: transposed weights with biases, gate and up interleaved in
//! `gate_up_proj`, the clamped SwiGLU `(clamp(up) + 1) · g · sigmoid(α g)` with
//! `g = clamp(gate, max=limit)`; those two live with the other routers and experts in
//! [`super::moe`]). Its sliding-window layers are [`super::text::Sliding`].
//!
//! `GptOssPreTrainedModel` sets `_supports_sdpa = False`: training runs the eager attention
//! whatever the plan asks (flash and flex kernels need packages the estimate does not assume).

use crate::estimator::error::EstimateError;
use crate::estimator::graph::{GradFlow, Graph, StorageKind, TensorId};
use crate::estimator::ops::Pw;
use crate::estimator::units::DType;

fn scalar() -> Pw {
    Pw {
        flops: 1.0,
        ..Pw::default()
    }
}

/// `x * cos ∓ x' * sin` on the two halves of `x` and their concatenation: gpt-oss's
/// `_apply_rotary_emb` (`torch.chunk` into the first and second half; `strided = false`) and
/// DeepSeek's `apply_rotary_pos_emb_interleave` (`x[..., 0::2]`, `x[..., 1::2]`; `strided =
/// true`), with `cos`/`sin` half the last dimension wide. The four products save only the
/// tables; the difference, the sum and the `cat` (a new contiguous tensor) save nothing. In
/// backward `chunk` concatenates the halves' gradients into one new tensor, each strided slice
/// makes its own zero-filled full-size gradient (`slice_backward`).
pub(crate) fn rotate_halves(
    g: &mut Graph,
    x: TensorId,
    cos: TensorId,
    sin: TensorId,
    strided: bool,
) -> Result<TensorId, EstimateError> {
    let mut half = g.shape(x);
    let last = half.len() - 1;
    half[last] /= 2;
    let (x1, x2) = if strided {
        (
            g.slice_view(x, half.clone())?,
            g.slice_view(x, half.clone())?,
        )
    } else {
        let p = g.split(x, vec![half.clone(), half])?;
        (p[0], p[1])
    };
    let a = g.mul_bc(x1, cos)?;
    let b = g.mul_bc(x2, sin)?;
    let first = g.add(a, b, false)?;
    let c = g.mul_bc(x2, cos)?;
    let d = g.mul_bc(x1, sin)?;
    let second = g.add(c, d, false)?;
    g.cat(&[first, second], last)
}

/// gpt-oss's `eager_attention_forward` on rotated `q` (`[B, H, S, D]`, contiguous: the rotation
/// ends in a `cat`), `k` and `v` (`[B, KV, T, D]`), the float mask and the `sinks` parameter
/// (`[H]`): `repeat_kv`, `matmul(q, kᵀ)` (the transposed key is a view the batched product
/// takes as is), `* scaling`, `+ mask`, the sinks reshaped and expanded to `[B, H, S, 1]`
/// (a view; their gradient is summed back), `cat` into `[B, H, S, T + 1]` (promoted to fp32
/// under autocast, the sinks being fp32), minus the row maximum (`max(dim=-1)` keeps its
/// indices for backward), `softmax` in that dtype (saves its output), the sink column dropped
/// (a slice view: the product saves it, keeping the whole probabilities alive), dropout, the
/// cast to the values' dtype, `matmul` with the values (copied when they are still the
/// transposed projection) and the head merge (`transpose(1, 2).contiguous()`). Returns
/// `[B, S, H·D]` and the attention weights the function returns beside it (the probabilities
/// without the sink column, a view of the softmax's output), which `GptOssDecoderLayer.forward`
/// binds to `_` until the MLP's output replaces them.
///
/// Without autograd (generation), the function's locals decide what lives: `key_states` and
/// `value_states` (the repeated heads) and `combined_logits` (the shifted logits) until it
/// returns, the masked scores bound to `attn_weights` until `dropout(scores).to(...)`
/// replaces them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sink_attention(
    g: &mut Graph,
    q: TensorId,
    k: TensorId,
    v: TensorId,
    mask: Option<TensorId>,
    sinks: TensorId,
    n_rep: u64,
    dropout: f64,
    cpu: bool,
) -> Result<(TensorId, TensorId), EstimateError> {
    let qs = g.shape(q);
    let (b, h, s, d) = (qs[0], qs[1], qs[2], qs[3]);
    let k = g.repeat_kv(k, n_rep)?;
    let v = g.repeat_kv(v, n_rep)?;
    let t = g.shape(k)[2];
    let kt = g.view(k, vec![b, h, d, t])?;
    let scores = g.matmul(q, kt)?;
    let sdt = g.dtype(scores);
    let mut w = g.pointwise("mul", scores, sdt, scalar())?;
    if let Some(m) = mask {
        w = g.add(w, m, false)?;
    }
    let sk = g.view(sinks, vec![1, h, 1, 1])?;
    let sk = g.expand(sk, vec![b, h, s, 1])?;
    let wdt = g.dtype(w);
    let cdt = wdt.promote(g.dtype(sk));
    let rg = g.requires_grad(&[w, sk]);
    let comb = g.alloc(vec![b, h, s, t + 1], cdt, StorageKind::Activation, rg)?;
    let mut op = g.op("cat", "");
    op.inputs = vec![w, sk];
    op.outputs = vec![comb];
    for x in [w, sk] {
        if g.t(x).requires_grad {
            // A narrowed view of the output gradient, cast to the operand's dtype if it differs.
            let flow = if g.dtype(x) == cdt {
                GradFlow::Alias
            } else {
                GradFlow::Alloc
            };
            op.grads.push((x, flow));
        }
    }
    g.record(op);
    let mx = g.alloc(vec![b, h, s, 1], cdt, StorageKind::Activation, rg)?;
    let mi = g.alloc(vec![b, h, s, 1], DType::I64, StorageKind::Activation, false)?;
    g.record_simple(
        "max",
        vec![comb],
        vec![mx, mi],
        vec![mi],
        (b * h * s) as f64,
    );
    let shifted = g.add(comb, mx, false)?;
    let probs = g.softmax_to(shifted, cdt)?;
    let p = g.slice_view(probs, vec![b, h, s, t])?;
    let p = g.dropout_on(p, dropout, cpu)?;
    let vdt = g.dtype(v);
    let p = g.cast(p, vdt)?;
    if g.inference {
        g.hold(&[w]);
    }
    let vc = if n_rep > 1 {
        v
    } else {
        let vs = g.shape(v);
        g.contiguous(v, vs)?
    };
    let o = g.matmul(p, vc)?;
    let ot = g.view(o, vec![b, s, h, d])?;
    let out = g.contiguous(ot, vec![b, s, h * d])?;
    if g.inference {
        g.hold(&[k, v, shifted]);
    }
    Ok((out, p))
}
