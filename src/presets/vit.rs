//! Vision transformers (Dosovitskiy et al. 2021) as torchvision 0.29 builds them
//! (`torchvision/models/vision_transformer.py`): `vit_b_16(weights=None, image_size=res)` and
//! `vit_l_16`, op by op, with `nn.MultiheadAttention` in training mode as
//! `torch.nn.functional.multi_head_attention_forward` runs it with `need_weights=False`, and in
//! eval mode under `torch.no_grad()` as its fast path, `torch._native_multi_head_attention`.

use crate::estimator::config::{AttnImpl, BuildCtx, Device};
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::ops::SdpaKernel;
use crate::estimator::ops::{Act, Conv};

use super::vision::{image_batch, Built};

/// The architecture of one ViT variant (`_vision_transformer(...)` arguments).
#[derive(Clone, Copy, Debug)]
pub struct VitConfig {
    pub patch: u64,
    pub layers: u64,
    pub heads: u64,
    pub hidden: u64,
    pub mlp: u64,
}

pub const VIT_B_16: VitConfig = VitConfig {
    patch: 16,
    layers: 12,
    heads: 12,
    hidden: 768,
    mlp: 3072,
};
pub const VIT_L_16: VitConfig = VitConfig {
    patch: 16,
    layers: 24,
    heads: 16,
    hidden: 1024,
    mlp: 4096,
};

/// torchvision's classifier head size.
const CLASSES: u64 = 1000;

/// Builds a ViT classifier step: patchify conv, class token, position embedding (sized for the
/// plan's resolution, as `image_size=res` makes it), the encoder blocks, the final LayerNorm and
/// the head on the class token, then `F.cross_entropy`. Dropout is 0 in every torchvision ViT,
/// so `nn.Dropout` is the identity and allocates nothing.
pub fn vit(ctx: &BuildCtx, cfg: VitConfig) -> Built {
    if !ctx.res.is_multiple_of(cfg.patch) {
        // torchvision asserts `image_size % patch_size == 0` when building the model.
        return Err(EstimateError::Unsupported(format!(
            "ViT with {p}×{p} patches needs a resolution divisible by {p}; {r} is not (use {lo} or {hi})",
            p = cfg.patch,
            r = ctx.res,
            lo = (ctx.res / cfg.patch).max(1) * cfg.patch,
            hi = (ctx.res / cfg.patch + 1) * cfg.patch,
        )));
    }
    if ctx.attn == AttnImpl::Eager {
        return Err(EstimateError::Unsupported(
            "torchvision's ViT calls nn.MultiheadAttention with need_weights=False, which always runs F.scaled_dot_product_attention: use attn: sdpa".into(),
        ));
    }
    if !cfg.hidden.is_multiple_of(cfg.heads) {
        return Err(EstimateError::Unsupported(format!(
            "ViT hidden size {} is not divisible by {} heads",
            cfg.hidden, cfg.heads
        )));
    }
    let mut g = Graph::for_build(ctx);
    let (x, y) = image_batch(&mut g, ctx)?;
    let (b, d) = (ctx.batch, cfg.hidden);
    let n = (ctx.res / cfg.patch) * (ctx.res / cfg.patch);
    let s = n + 1;

    // `_process_input`: conv → reshape → permute, all views of the conv output.
    let mut h = g.conv2d(
        "conv_proj",
        x,
        Conv::new(3, d, cfg.patch, cfg.patch, 0).bias(true),
    )?;
    h = g.view(h, vec![b, d, n])?;
    h = g.view(h, vec![b, n, d])?;
    let cls = g.scoped("class_token", |g| g.param(vec![1, 1, d]))?;
    let cls = g.expand(cls, vec![b, 1, d])?;
    // The class token (an fp32 parameter) goes first, so the concatenation is fp32 under autocast.
    h = g.cat(&[cls, h], 1)?;

    let tokens = h;
    h = g.scoped("encoder", |g| {
        let pos = g.scoped("pos_embedding", |g| g.param(vec![1, s, d]))?;
        let mut h = g.add(h, pos, false)?;
        let encoder_input = h;
        // `block`: each layer alone (the reference harness wraps every `EncoderBlock`); a ViT
        // has no stages.
        for (layers, ckpt) in
            g.checkpoint_runs(ctx.ckpt, cfg.layers as usize, "encoder layers", false)?
        {
            h = g.checkpointed(ckpt, |g| {
                let mut h = h;
                for i in layers {
                    h = g.scoped(format!("layers.encoder_layer_{i}"), |g| {
                        encoder_block(g, h, ctx, cfg)
                    })?;
                }
                Ok::<_, EstimateError>(h)
            })?;
        }
        let out = g.layer_norm_on("ln", h, true, ctx.device == Device::Cpu)?;
        // `Encoder.forward`'s `input` (the position-embedded tokens) is referenced until
        // `self.ln(self.layers(...))` returns. Training saves it for backward anyway.
        if g.inference {
            g.hold(&[encoder_input]);
        }
        Ok::<_, EstimateError>(out)
    })?;
    // `forward`'s `x` holds the concatenated tokens until `self.encoder(x)` returns.
    g.hold(&[tokens]);

    // `x[:, 0]`: a view, so the head's saved input keeps the whole LayerNorm output alive.
    let cls_out = g.select(h, vec![b, d])?;
    let logits = g.scoped("heads", |g| g.linear("head", cls_out, d, CLASSES, true))?;
    g.cross_entropy_on(logits, y, ctx.device == Device::Cpu)?;
    // The logits are an argument of `F.cross_entropy` until it returns.
    g.hold(&[logits]);
    Ok(g)
}

/// `EncoderBlock.forward`: `x = ln_1(input); x = self_attention(x, x, x); x = x + input;
/// y = mlp(ln_2(x)); return x + y`.
fn encoder_block(
    g: &mut Graph,
    input: TensorId,
    ctx: &BuildCtx,
    cfg: VitConfig,
) -> Result<TensorId, EstimateError> {
    let cpu = ctx.device == Device::Cpu;
    let h = g.layer_norm_on("ln_1", input, true, cpu)?;
    let a = g.scoped("self_attention", |g| self_attention(g, h, ctx, cfg))?;
    // The attention output is low precision under autocast: the sum is promoted to fp32.
    let x = g.add(a, input, false)?;
    let y = g.layer_norm_on("ln_2", x, true, cpu)?;
    let y = g.scoped("mlp", |g| {
        let z = g.linear("0", y, cfg.hidden, cfg.mlp, true)?;
        let z = g.act(z, Act::Gelu, false)?;
        let z = g.linear("3", z, cfg.mlp, cfg.hidden, true)?;
        // `Sequential.forward`'s argument holds the LayerNorm output until the MLP returns.
        g.hold(&[y]);
        Ok::<_, EstimateError>(z)
    })?;
    let out = g.add(x, y, false)?;
    // The block's `input` argument (and `nn.Sequential.forward`'s, which called it) is referenced
    // until the block returns; training saves it for backward anyway.
    if g.inference {
        g.hold(&[input]);
    }
    Ok(out)
}

/// Whether `MultiheadAttention.forward` (torch/nn/modules/activation.py) takes its fast path,
/// `torch._native_multi_head_attention`: it does when not training and under `torch.no_grad()`
/// (an eval forward here), for self-attention on a batched input (`EncoderBlock` calls
/// `self_attention(x, x, x, need_weights=False)`) with `batch_first=True`, an even number of
/// heads, packed in-projection weights with a bias, and the query in the weights' dtype, which
/// autocast breaks (`"autocast is enabled"`). The fast path as modelled is CUDA's.
fn mha_fast_path(g: &Graph, ctx: &BuildCtx, cfg: VitConfig) -> bool {
    g.inference
        && g.precision.autocast().is_none()
        && cfg.heads.is_multiple_of(2)
        && ctx.device != Device::Cpu
}

/// `torch._native_multi_head_attention` on CUDA with `need_weights=False`, no mask and a head
/// dim divisible by 8 (`native_multi_head_attention_cuda`,
/// aten/src/ATen/native/transformers/cuda/attention.cu): `x = at::linear(query, qkv_weight,
/// qkv_bias)` on the contiguous `[B, S, D]` query (one `[B, S, 3D]` block), q/k/v as
/// `x.chunk(3, -1)` viewed `[B, S, H, hd]` and transposed (views), `scaled_dot_product_attention`
/// (its kernel picked as for the training path), `y.transpose(1, 2).reshape(B, S, D)` and the
/// output projection. The kernels' output is laid out `[B, S, H, hd]` (cuDNN's like the packed
/// query, the efficient kernel's always), so the reshape is a view. Every temporary is a C++
/// local, freed when the op returns, after the output projection.
fn native_self_attention(
    g: &mut Graph,
    h: TensorId,
    ctx: &BuildCtx,
    cfg: VitConfig,
) -> Result<TensorId, EstimateError> {
    let (b, s) = (ctx.batch, g.shape(h)[1]);
    let (d, heads) = (cfg.hidden, cfg.heads);
    let hd = d / heads;
    let w_in = g.scoped("in_proj_weight", |g| g.param(vec![3 * d, d]))?;
    let b_in = g.scoped("in_proj_bias", |g| g.param(vec![3 * d]))?;
    let qkv = g.linear_with(h, w_in, Some(b_in))?;
    let q = g.select(qkv, vec![b, heads, s, hd])?;
    let k = g.select(qkv, vec![b, heads, s, hd])?;
    let v = g.select(qkv, vec![b, heads, s, hd])?;
    let (o, kernel) = g.sdpa_heads(q, k, v, None, 0.0, false)?;
    let oc = match kernel {
        SdpaKernel::Cudnn | SdpaKernel::Efficient | SdpaKernel::FlashCpu => {
            g.view(o, vec![b, s, d])?
        }
        SdpaKernel::Flash | SdpaKernel::Math => g.copy(o, vec![b, s, d], false)?,
    };
    let out = g.linear("out_proj", oc, d, d, true)?;
    g.hold(&[qkv, o, oc]);
    // `MultiheadAttention.forward`'s `query` (the LayerNorm output) is referenced until it
    // returns.
    g.hold(&[h]);
    Ok(out)
}

/// `nn.MultiheadAttention(batch_first=True)`: in training (the fast path is off when training,
/// and under autocast), `multi_head_attention_forward` on `query.transpose(1, 0)`.
fn self_attention(
    g: &mut Graph,
    h: TensorId,
    ctx: &BuildCtx,
    cfg: VitConfig,
) -> Result<TensorId, EstimateError> {
    if mha_fast_path(g, ctx, cfg) {
        return native_self_attention(g, h, ctx, cfg);
    }
    let (b, s) = (ctx.batch, g.shape(h)[1]);
    let (d, heads) = (cfg.hidden, cfg.heads);
    let hd = d / heads;
    let w_in = g.scoped("in_proj_weight", |g| g.param(vec![3 * d, d]))?;
    let b_in = g.scoped("in_proj_bias", |g| g.param(vec![3 * d]))?;
    // `_in_projection_packed`: `linear(q, w, b)` on the `[S, B, D]` transposed view. `aten::linear`
    // takes the `matmul` path for a non-contiguous 3-D input, whose reshape copies the (cast)
    // input; that copy is what `mm` saves. The bias is then added in place (`add_`).
    let ht = g.view(h, vec![s, b, d])?;
    let ht = g.lowp(ht)?;
    let hc = g.copy(ht, vec![s * b, d], false)?;
    let proj = g.linear_with(hc, w_in, Some(b_in))?;
    // `unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()`; backward
    // reshapes the non-contiguous gradient of that view chain back with another copy.
    let qkv = g.copy(proj, vec![3, s, b, d], true)?;
    // q, k, v: `select` then `view(S, B·H, hd).transpose(0, 1)` and `view(B, H, S, hd)`.
    let q = g.select(qkv, vec![b, heads, s, hd])?;
    let k = g.select(qkv, vec![b, heads, s, hd])?;
    let v = g.select(qkv, vec![b, heads, s, hd])?;
    // `F.scaled_dot_product_attention(q, k, v, None, dropout_p=0.0)`: the kernel as for the
    // language models (sm_90: efficient for fp32, cuDNN for fp16/bf16; CPU: its flash kernel).
    let (o, kernel) = g.sdpa_heads(q, k, v, None, 0.0, ctx.device == Device::Cpu)?;
    // `attn_output.permute(2, 0, 1, 3).contiguous().view(S·B, E)`: cuDNN's and the CPU flash
    // kernel's output is laid out like the packed query, `[S, B, H, hd]` in memory (CPU: the
    // kernel's meta function allocates `empty_like(query)`, and a real CPU call returns the
    // query's strides), so this stays a view; the efficient kernel allocates `[B, S, H, hd]`, so
    // this copies. Flash and math need dropout to be picked, which torchvision's ViT never has;
    // they are counted as copying.
    let oc = match kernel {
        SdpaKernel::Cudnn | SdpaKernel::FlashCpu => g.view(o, vec![s * b, d])?,
        SdpaKernel::Efficient | SdpaKernel::Flash | SdpaKernel::Math => {
            g.copy(o, vec![s * b, d], false)?
        }
    };
    let out = g.linear("out_proj", oc, d, d, true)?;
    // Its gradient arrives as a transposed view of the residual's gradient: backward reshapes it
    // to `[S·B, E]` with a copy that lives through the node.
    let scratch = g.bytes(out);
    g.add_scratch(Default::default(), scratch);
    // `query` (the LayerNorm output) is referenced until `multi_head_attention_forward` returns.
    g.hold(&[h]);
    g.view(out, vec![b, s, d])
}
