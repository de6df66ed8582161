//! Recurrent models: the reference harness's word-level LSTM language model
//! (`harness/models.py` `LSTMLM`: `Embedding(10000, 512)` → 2-layer `nn.LSTM(512, 512,
//! batch_first=True)` → `Linear(512, 10000)`, loss `F.cross_entropy(logits.view(-1, V), ids.view(-1))`).
//!
//! Three LSTM implementations. On CUDA the plan's `cudnn` chooses (default true, as PyTorch
//! picks cuDNN whenever it is available): PyTorch's native LSTM, unrolled here step by step as
//! `aten/src/ATen/native/RNN.cpp` runs it (the reference's `cudnn: false` cases), or the cuDNN
//! RNN as one op (see [`Graph::lstm_cudnn`] for what of it is modelled rather than measured).
//! On the CPU `_VF.lstm` runs oneDNN's LSTM, one op per layer ([`Graph::lstm_mkldnn_layer`]).

use crate::estimator::config::{BuildCtx, Checkpointing, Device, Precision};
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::units::DType;

use super::vision::Built;

/// The LSTM language model's dimensions.
#[derive(Clone, Copy, Debug)]
pub struct LstmLmConfig {
    pub vocab: u64,
    pub embed: u64,
    pub hidden: u64,
    pub layers: u64,
}

pub const LSTM_LM: LstmLmConfig = LstmLmConfig {
    vocab: 10_000,
    embed: 512,
    hidden: 512,
    layers: 2,
};

/// One layer's parameters in `nn.LSTM` order: `weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`, `bias_hh_l{k}`.
struct LayerParams {
    w_ih: TensorId,
    w_hh: TensorId,
    b_ih: TensorId,
    b_hh: TensorId,
}

/// Longest sequence the native LSTM is unrolled for: the tape holds about a dozen records per
/// step and layer, so this bounds an estimate to well under a second and a few hundred MiB.
pub const MAX_NATIVE_STEPS: u64 = 16_384;

pub fn lstm_lm(ctx: &BuildCtx, cfg: LstmLmConfig) -> Built {
    if ctx.ckpt != Checkpointing::None {
        return Err(EstimateError::Unsupported(format!(
            "activation checkpointing ({}) is not modelled for the LSTM language model: use ckpt: none",
            ctx.ckpt.name()
        )));
    }
    let cpu = ctx.device == Device::Cpu;
    if cpu && ctx.cudnn {
        return Err(EstimateError::Unsupported("cuDNN is a CUDA library: on device cpu the LSTM runs oneDNN's kernel; leave cudnn out or set it to false".into()));
    }
    if cpu && ctx.precision == Precision::Fp16 {
        // `use_mkldnn` refuses fp16 when autograd is on: `_VF.lstm` falls back to the native
        // cell of separate aten ops, which is not modelled.
        return Err(EstimateError::Unsupported(
            "an fp16 LSTM trained on the CPU runs PyTorch's unfused cell, which is not modelled: use fp32, bf16 or amp_bf16 on device cpu".into(),
        ));
    }
    if !cpu && !ctx.cudnn && ctx.seq > MAX_NATIVE_STEPS {
        return Err(EstimateError::Unsupported(format!(
            "the native (cudnn: false) LSTM is simulated step by step and supports at most {MAX_NATIVE_STEPS} steps, got {}: use cudnn: true or truncate backpropagation through time",
            ctx.seq
        )));
    }
    let mut g = Graph::for_build(ctx);
    let (b, l) = (ctx.batch, ctx.seq);
    let ids = g.input(vec![b, l], DType::I64)?;
    let (emb, _) = g.embedding("emb", ids, cfg.vocab, cfg.embed)?;
    let params: Vec<LayerParams> = g.scoped("lstm", |g| {
        (0..cfg.layers)
            .map(|k| {
                let fin = if k == 0 { cfg.embed } else { cfg.hidden };
                Ok(LayerParams {
                    w_ih: g.scoped(format!("weight_ih_l{k}"), |g| {
                        g.param(vec![4 * cfg.hidden, fin])
                    })?,
                    w_hh: g.scoped(format!("weight_hh_l{k}"), |g| {
                        g.param(vec![4 * cfg.hidden, cfg.hidden])
                    })?,
                    b_ih: g.scoped(format!("bias_ih_l{k}"), |g| g.param(vec![4 * cfg.hidden]))?,
                    b_hh: g.scoped(format!("bias_hh_l{k}"), |g| g.param(vec![4 * cfg.hidden]))?,
                })
            })
            .collect::<Result<_, EstimateError>>()
    })?;
    let (y, finals) = g.scoped("lstm", |g| {
        if cpu {
            mkldnn_lstm(g, emb, &params, cfg)
        } else if ctx.cudnn {
            let flat: Vec<TensorId> = params
                .iter()
                .flat_map(|p| [p.w_ih, p.w_hh, p.b_ih, p.b_hh])
                .collect();
            let w = g.lstm_cudnn_weights(&flat)?;
            let (y, finals) = g.lstm_cudnn(emb, &w, cfg.layers, cfg.hidden)?;
            // The module's input (and, under autocast, the fp32 weights' flat copy's source)
            // is referenced until `nn.LSTM.forward` returns.
            g.hold(&[emb]);
            Ok((y, finals))
        } else {
            native_lstm(g, emb, &params, cfg)
        }
    })?;
    // `head(y)` on the transposed `[B, L, H]` output: `aten::linear` → `matmul`, whose reshape
    // copies the non-contiguous input (saved by `mm`); the bias is added in place. With one row
    // or one step the transposed view is contiguous: `linear` runs `addmm` on a flattened view.
    let yc = g.lowp(y)?;
    let yc = if b > 1 && l > 1 {
        g.copy(yc, vec![b * l, cfg.hidden], false)?
    } else {
        g.view(yc, vec![b * l, cfg.hidden])?
    };
    let logits = g.linear("head", yc, cfg.hidden, cfg.vocab, true)?;
    // `forward`'s `y` (and the unused final states bound to `_`) live until it returns.
    g.hold(&[y, finals.0, finals.1]);
    let target = g.view(ids, vec![b * l])?;
    g.cross_entropy_on(logits, target, cpu)?;
    // `loss_fn`'s `logits` lives until the loss is computed.
    g.hold(&[logits]);
    Ok(g)
}

/// Autocast casts `weight.t()` (a view, not a leaf) for every step's `mm`, so unlike a module's
/// weight it is not served from the autocast cache: one new copy per step, saved by the `mm`.
fn cast_uncached(g: &mut Graph, w: TensorId) -> Result<TensorId, EstimateError> {
    match g.precision.autocast() {
        Some(dt) if g.dtype(w) != dt => g.cast(w, dt),
        _ => Ok(w),
    }
}

/// `_lstm_impl` without cuDNN: zero initial states `[layers, B, H]` unbound per layer; per layer
/// the input is unbound into steps, each step runs `mm(x_t, W_ihᵀ)`, `mm(h, W_hhᵀ)` and the fused
/// cell ([`Graph::lstm_fused_cell`]), and the step outputs are stacked into the next layer's
/// input. Returns the `[B, L, H]` output view and the final `(h_n, c_n)` stacks (unused).
fn native_lstm(
    g: &mut Graph,
    emb: TensorId,
    params: &[LayerParams],
    cfg: LstmLmConfig,
) -> Result<(TensorId, (TensorId, TensorId)), EstimateError> {
    let s = g.shape(emb);
    let (b, l) = (s[0], s[1]);
    let pdt = g.precision.param_dtype();
    let h0 = g.zeros(vec![cfg.layers, b, cfg.hidden], pdt)?;
    let c0 = g.zeros(vec![cfg.layers, b, cfg.hidden], pdt)?;
    let h0s = g.unbind(h0)?;
    let c0s = g.unbind(c0)?;
    // batch_first: the input is transposed to `[L, B, E]` (a view) and unbound into steps.
    let xt = g.view(emb, vec![l, b, cfg.embed])?;
    let mut steps = g.unbind(xt)?;
    let (mut last_h, mut last_c) = (Vec::new(), Vec::new());
    let mut out = None;
    for (k, p) in params.iter().enumerate() {
        let (mut h, mut c) = (h0s[k], c0s[k]);
        let mut hs = Vec::with_capacity(steps.len());
        g.push(format!("l{k}"));
        for &x in &steps {
            let xc = g.lowp(x)?;
            let wi = cast_uncached(g, p.w_ih)?;
            let ig = g.mm(xc, wi)?;
            let hc = g.lowp(h)?;
            let wh = cast_uncached(g, p.w_hh)?;
            let hg = g.mm(hc, wh)?;
            (h, c) = g.lstm_fused_cell(ig, hg, c, p.b_ih, p.b_hh)?;
            hs.push(h);
        }
        g.pop();
        let ys = g.stack(&hs)?;
        last_h.push(h);
        last_c.push(c);
        if k + 1 < params.len() {
            steps = g.unbind(ys)?;
        }
        out = Some(ys);
    }
    let finals = (g.stack(&last_h)?, g.stack(&last_c)?);
    let out =
        out.ok_or_else(|| EstimateError::Unsupported("an LSTM needs at least one layer".into()))?;
    let y = g.view(out, vec![b, l, cfg.hidden])?;
    // The module's input and the zero initial states are referenced until `forward` returns.
    g.hold(&[emb, h0, c0]);
    Ok((y, finals))
}

/// `nn.LSTM` on the CPU (`mkldnn_rnn` in `aten/src/ATen/native/mkldnn/RNN.cpp`): the
/// batch-first input is transposed and made contiguous (a copy `[L, B, E]` unless B or L is 1),
/// each layer runs one
/// [`Graph::lstm_mkldnn_layer`] on its slices `hx[k]`, `cx[k]` of the zero initial states
/// (views: the layer saves them, so the zeros live until its backward), the last layer's output
/// is transposed back (a view) and the per-layer final states are stacked (unused). Returns the
/// `[B, L, H]` output view and the final `(h_n, c_n)` stacks.
fn mkldnn_lstm(
    g: &mut Graph,
    emb: TensorId,
    params: &[LayerParams],
    cfg: LstmLmConfig,
) -> Result<(TensorId, (TensorId, TensorId)), EstimateError> {
    let s = g.shape(emb);
    let (b, l) = (s[0], s[1]);
    let pdt = g.precision.param_dtype();
    let h0 = g.zeros(vec![cfg.layers, b, cfg.hidden], pdt)?;
    let c0 = g.zeros(vec![cfg.layers, b, cfg.hidden], pdt)?;
    let xt = g.view(emb, vec![l, b, cfg.embed])?;
    // `contiguous()` copies unless the transposed view already is contiguous (one row or step).
    let x0 = if b > 1 && l > 1 {
        g.copy(xt, vec![l, b, cfg.embed], false)?
    } else {
        xt
    };
    let mut x = x0;
    let (mut last_h, mut last_c) = (Vec::new(), Vec::new());
    for (k, p) in params.iter().enumerate() {
        let hx = g.select(h0, vec![b, cfg.hidden])?;
        let cx = g.select(c0, vec![b, cfg.hidden])?;
        let (y, hy, cy) = g.scoped(format!("l{k}"), |g| {
            g.lstm_mkldnn_layer(x, p.w_ih, p.w_hh, p.b_ih, p.b_hh, hx, cx)
        })?;
        last_h.push(hy);
        last_c.push(cy);
        x = y;
    }
    if params.is_empty() {
        return Err(EstimateError::Unsupported(
            "an LSTM needs at least one layer".into(),
        ));
    }
    let finals = (g.stack(&last_h)?, g.stack(&last_c)?);
    let y = g.view(x, vec![b, l, cfg.hidden])?;
    // The module's input, `mkldnn_rnn`'s contiguous copy of it and the zero initial states are
    // referenced until `forward` returns (under autocast the layer saved casts of the latter two).
    g.hold(&[emb, x0, h0, c0]);
    Ok((y, finals))
}
