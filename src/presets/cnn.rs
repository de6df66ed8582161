//! The CNN presets besides ResNet, built op by op as torchvision 0.29 defines them
//! (`torchvision/models/{mobilenetv2,mobilenetv3,efficientnet,vgg,convnext}.py`,
//! `torchvision/ops/misc.py`), plus the two custom conv nets of the reference harness
//! (`PlainConv128` and `UNet` in `harness/models.py`).
//!
//! Checkpointing follows the harness's `apply_vision_ckpt`: for the `features`-based models
//! `block` wraps each child of `model.features` in `torch.utils.checkpoint`, `sqrt` and
//! `Segments(k)` run `torch.utils.checkpoint.checkpoint_sequential(model.features, k)`; for the
//! custom nets `block` wraps each conv block.

use crate::estimator::config::{BuildCtx, Checkpointing};
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::ops::{Act, Conv};
use crate::estimator::units::DType;

use super::vision::{image_batch, Built};

type R = Result<TensorId, EstimateError>;

/// One child of an `nn.Sequential`, applied to its input.
type Child<'a> = Box<dyn FnOnce(&mut Graph, TensorId) -> R + 'a>;

/// Runs `model.features` (an `nn.Sequential` of `children`) under the plan's checkpointing.
fn features(g: &mut Graph, ctx: &BuildCtx, x: TensorId, children: Vec<Child<'_>>) -> R {
    let n = children.len();
    let runs = g.checkpoint_runs(ctx.ckpt, n, "feature blocks", false)?;
    g.push("features");
    let mut queue = children.into_iter().enumerate();
    let mut h = x;
    let r = (|| {
        for (run, ckpt) in runs {
            let chunk: Vec<(usize, Child<'_>)> = queue.by_ref().take(run.len()).collect();
            h = g.checkpointed(ckpt, |g| {
                let mut h = h;
                for (j, f) in chunk {
                    h = g.scoped(j.to_string(), |g| f(g, h))?;
                }
                Ok::<_, EstimateError>(h)
            })?;
        }
        Ok(h)
    })();
    g.pop();
    r
}

/// `Conv2dNormActivation`: conv (no bias when a norm follows), BatchNorm2d, an optional
/// activation with `inplace=True`.
fn conv_bn_act(g: &mut Graph, x: TensorId, c: Conv, act: Option<Act>) -> R {
    let y = g.conv2d("0", x, c)?;
    let y = g.batch_norm("1", y)?;
    match act {
        Some(a) => g.scoped("2", |g| g.act_inplace(y, a)),
        None => Ok(y),
    }
}

/// `torchvision.models._utils._make_divisible(v, 8)`.
fn make_divisible(v: f64, divisor: u64) -> u64 {
    let d = divisor as f64;
    let mut new_v = (((v + d / 2.0) as u64) / divisor * divisor).max(divisor);
    if (new_v as f64) < 0.9 * v {
        new_v += divisor;
    }
    new_v
}

/// Same padding of a k×k conv (`Conv2dNormActivation`'s default `(k - 1) / 2 * dilation`).
fn same(cin: u64, cout: u64, k: u64, stride: u64) -> Conv {
    Conv::new(cin, cout, k, stride, (k - 1) / 2)
}

/// Global average pool (`adaptive_avg_pool2d(1)`, a `mean` over H and W on CUDA), then flatten.
fn pool_flatten(g: &mut Graph, h: TensorId) -> R {
    let h = g.scoped("avgpool", |g| g.adaptive_avg_pool2d(h, 1))?;
    let s = g.shape(h);
    g.view(h, vec![s[0], s[1]])
}

// ------------------------------------------------------------------------- MobileNetV2

/// MobileNetV2 (Sandler et al. 2018), `torchvision/models/mobilenetv2.py`, width 1.0: inverted
/// residuals with ReLU6, the residual as `x + conv(x)` (out of place), classifier
/// `Dropout(0.2)` (not in place) + `Linear(1280, 1000)`.
pub fn mobilenet_v2(ctx: &BuildCtx) -> Built {
    let mut g = Graph::for_build(ctx);
    let (x, y) = image_batch(&mut g, ctx)?;
    let setting: [(u64, u64, u64, u64); 7] = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    let mut children: Vec<Child> = Vec::new();
    children.push(Box::new(|g, h| {
        conv_bn_act(g, h, same(3, 32, 3, 2), Some(Act::Relu6))
    }));
    let mut cin = 32;
    for &(t, c, n, s) in &setting {
        for i in 0..n {
            let stride = if i == 0 { s } else { 1 };
            let inp = cin;
            children.push(Box::new(move |g, h| {
                let hidden = inp * t;
                let mut o = h;
                g.push("conv");
                let r = (|| {
                    let mut idx = 0;
                    if t != 1 {
                        o = g.scoped(idx.to_string(), |g| {
                            conv_bn_act(g, o, Conv::new(inp, hidden, 1, 1, 0), Some(Act::Relu6))
                        })?;
                        idx += 1;
                    }
                    o = g.scoped(idx.to_string(), |g| {
                        conv_bn_act(
                            g,
                            o,
                            same(hidden, hidden, 3, stride).groups(hidden),
                            Some(Act::Relu6),
                        )
                    })?;
                    o = g.conv2d(&(idx + 1).to_string(), o, Conv::new(hidden, c, 1, 1, 0))?;
                    g.batch_norm(&(idx + 2).to_string(), o)
                })();
                g.pop();
                o = r?;
                if stride == 1 && inp == c {
                    o = g.add(h, o, false)?;
                }
                Ok(o)
            }));
            cin = c;
        }
    }
    children.push(Box::new(move |g, h| {
        conv_bn_act(g, h, Conv::new(cin, 1280, 1, 1, 0), Some(Act::Relu6))
    }));
    let h = features(&mut g, ctx, x, children)?;
    let h = pool_flatten(&mut g, h)?;
    let h = g.scoped("classifier", |g| {
        let h = g.dropout(h, 0.2)?;
        g.linear("1", h, 1280, 1000, true)
    })?;
    g.cross_entropy(h, y)?;
    Ok(g)
}

// ------------------------------------------------------------------------- MobileNetV3

/// One `InvertedResidualConfig` row: input, kernel, expanded, output channels, SE, Hardswish, stride.
type V3Row = (u64, u64, u64, u64, bool, bool, u64);

const V3_LARGE: [V3Row; 15] = [
    (16, 3, 16, 16, false, false, 1),
    (16, 3, 64, 24, false, false, 2),
    (24, 3, 72, 24, false, false, 1),
    (24, 5, 72, 40, true, false, 2),
    (40, 5, 120, 40, true, false, 1),
    (40, 5, 120, 40, true, false, 1),
    (40, 3, 240, 80, false, true, 2),
    (80, 3, 200, 80, false, true, 1),
    (80, 3, 184, 80, false, true, 1),
    (80, 3, 184, 80, false, true, 1),
    (80, 3, 480, 112, true, true, 1),
    (112, 3, 672, 112, true, true, 1),
    (112, 5, 672, 160, true, true, 2),
    (160, 5, 960, 160, true, true, 1),
    (160, 5, 960, 160, true, true, 1),
];

const V3_SMALL: [V3Row; 11] = [
    (16, 3, 16, 16, true, false, 2),
    (16, 3, 72, 24, false, false, 2),
    (24, 3, 88, 24, false, false, 1),
    (24, 5, 96, 40, true, true, 2),
    (40, 5, 240, 40, true, true, 1),
    (40, 5, 240, 40, true, true, 1),
    (40, 5, 120, 48, true, true, 1),
    (48, 5, 144, 48, true, true, 1),
    (48, 5, 288, 96, true, true, 2),
    (96, 5, 576, 96, true, true, 1),
    (96, 5, 576, 96, true, true, 1),
];

/// MobileNetV3 (Howard et al. 2019), `torchvision/models/mobilenetv3.py`: inverted residuals
/// with ReLU or Hardswish, squeeze-excitation (`ReLU` then `Hardsigmoid`), the residual added in
/// place (`result += input`); classifier `Linear`, `Hardswish(inplace)`, `Dropout(0.2,
/// inplace)`, `Linear`.
pub fn mobilenet_v3(ctx: &BuildCtx, large: bool) -> Built {
    let rows: &[V3Row] = if large { &V3_LARGE } else { &V3_SMALL };
    let last_channel = if large { 1280 } else { 1024 };
    let mut g = Graph::for_build(ctx);
    let (x, y) = image_batch(&mut g, ctx)?;
    let mut children: Vec<Child> = Vec::new();
    children.push(Box::new(|g, h| {
        conv_bn_act(g, h, same(3, 16, 3, 2), Some(Act::Hardswish))
    }));
    for &(cin, k, exp, cout, se, hs, stride) in rows {
        children.push(Box::new(move |g, h| {
            let act = if hs { Act::Hardswish } else { Act::Relu };
            g.push("block");
            let r = (|| {
                let mut o = h;
                let mut idx = 0;
                if exp != cin {
                    o = g.scoped(idx.to_string(), |g| {
                        conv_bn_act(g, o, Conv::new(cin, exp, 1, 1, 0), Some(act))
                    })?;
                    idx += 1;
                }
                o = g.scoped(idx.to_string(), |g| {
                    conv_bn_act(g, o, same(exp, exp, k, stride).groups(exp), Some(act))
                })?;
                idx += 1;
                if se {
                    o = g.squeeze_excitation(
                        &idx.to_string(),
                        o,
                        make_divisible((exp / 4) as f64, 8),
                        Act::Relu,
                        false,
                        Act::Hardsigmoid,
                    )?;
                    idx += 1;
                }
                g.scoped(idx.to_string(), |g| {
                    conv_bn_act(g, o, Conv::new(exp, cout, 1, 1, 0), None)
                })
            })();
            g.pop();
            let o = r?;
            if stride == 1 && cin == cout {
                g.add(o, h, true)
            } else {
                Ok(o)
            }
        }));
    }
    let last_in = rows[rows.len() - 1].3;
    let last_out = 6 * last_in;
    children.push(Box::new(move |g, h| {
        conv_bn_act(
            g,
            h,
            Conv::new(last_in, last_out, 1, 1, 0),
            Some(Act::Hardswish),
        )
    }));
    let h = features(&mut g, ctx, x, children)?;
    let h = pool_flatten(&mut g, h)?;
    let h = g.scoped("classifier", |g| {
        let h = g.linear("0", h, last_out, last_channel, true)?;
        let h = g.scoped("1", |g| g.act_inplace(h, Act::Hardswish))?;
        let h = g.scoped("2", |g| g.dropout_inplace(h, 0.2))?;
        g.linear("3", h, last_channel, 1000, true)
    })?;
    g.cross_entropy(h, y)?;
    Ok(g)
}

// ------------------------------------------------------------------------- EfficientNet-B0

/// EfficientNet-B0 (Tan & Le 2019), `torchvision/models/efficientnet.py` (width and depth 1.0,
/// dropout 0.2, stochastic depth 0.2): MBConv blocks with SiLU, squeeze-excitation
/// (`SiLU(inplace)` then `Sigmoid`, squeeze = input channels / 4), stochastic depth on the
/// residual branch with probability `0.2 * block_id / 16`, the residual added in place;
/// classifier `Dropout(0.2, inplace)` + `Linear(1280, 1000)`.
pub fn efficientnet_b0(ctx: &BuildCtx) -> Built {
    // (expand ratio, kernel, stride, input channels, output channels, layers)
    let setting: [(u64, u64, u64, u64, u64, u64); 7] = [
        (1, 3, 1, 32, 16, 1),
        (6, 3, 2, 16, 24, 2),
        (6, 5, 2, 24, 40, 2),
        (6, 3, 2, 40, 80, 3),
        (6, 5, 1, 80, 112, 3),
        (6, 5, 2, 112, 192, 4),
        (6, 3, 1, 192, 320, 1),
    ];
    let total: u64 = setting.iter().map(|s| s.5).sum();
    let mut g = Graph::for_build(ctx);
    let (x, y) = image_batch(&mut g, ctx)?;
    let mut children: Vec<Child> = Vec::new();
    children.push(Box::new(|g, h| {
        conv_bn_act(g, h, same(3, 32, 3, 2), Some(Act::Silu))
    }));
    let mut block_id = 0u64;
    for &(t, k, s, cin0, cout, n) in &setting {
        let first_id = block_id;
        block_id += n;
        children.push(Box::new(move |g, h| {
            let mut h = h;
            for i in 0..n {
                let (cin, stride) = if i == 0 { (cin0, s) } else { (cout, 1) };
                let sd_prob = 0.2 * (first_id + i) as f64 / total as f64;
                h = g.scoped(i.to_string(), |g| {
                    mbconv(g, h, t, k, stride, cin, cout, sd_prob)
                })?;
            }
            Ok(h)
        }));
    }
    children.push(Box::new(|g, h| {
        conv_bn_act(g, h, Conv::new(320, 1280, 1, 1, 0), Some(Act::Silu))
    }));
    let h = features(&mut g, ctx, x, children)?;
    let h = pool_flatten(&mut g, h)?;
    let h = g.scoped("classifier", |g| {
        let h = g.scoped("0", |g| g.dropout_inplace(h, 0.2))?;
        g.linear("1", h, 1280, 1000, true)
    })?;
    g.cross_entropy(h, y)?;
    Ok(g)
}

/// `torchvision.models.efficientnet.MBConv`.
#[allow(clippy::too_many_arguments)]
fn mbconv(
    g: &mut Graph,
    x: TensorId,
    t: u64,
    k: u64,
    stride: u64,
    cin: u64,
    cout: u64,
    sd_prob: f64,
) -> R {
    let exp = make_divisible((cin * t) as f64, 8);
    g.push("block");
    let r = (|| {
        let mut o = x;
        let mut idx = 0;
        if exp != cin {
            o = g.scoped(idx.to_string(), |g| {
                conv_bn_act(g, o, Conv::new(cin, exp, 1, 1, 0), Some(Act::Silu))
            })?;
            idx += 1;
        }
        o = g.scoped(idx.to_string(), |g| {
            conv_bn_act(g, o, same(exp, exp, k, stride).groups(exp), Some(Act::Silu))
        })?;
        o = g.squeeze_excitation(
            &(idx + 1).to_string(),
            o,
            (cin / 4).max(1),
            Act::Silu,
            true,
            Act::Sigmoid,
        )?;
        g.scoped((idx + 2).to_string(), |g| {
            conv_bn_act(g, o, Conv::new(exp, cout, 1, 1, 0), None)
        })
    })();
    g.pop();
    let o = r?;
    if stride == 1 && cin == cout {
        let o = g.stochastic_depth(o, sd_prob)?;
        g.add(o, x, true)
    } else {
        Ok(o)
    }
}

// ------------------------------------------------------------------------- VGG-16

/// VGG-16 (Simonyan & Zisserman 2014), `torchvision/models/vgg.py` configuration "D" without
/// batch norm: each conv (with bias), `ReLU(inplace=True)` and max-pool is its own child of
/// `features`; `AdaptiveAvgPool2d(7)`; classifier `Linear, ReLU(inplace), Dropout(0.5)` twice
/// and `Linear(4096, 1000)`. Under `checkpoint_sequential` the feature ReLUs run out of place,
/// as the harness sets them (an in-place ReLU opening a segment would overwrite the previous
/// segment's output).
pub fn vgg16(ctx: &BuildCtx) -> Built {
    const CFG: [u64; 18] = [
        64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0,
    ];
    let relu_inplace = ctx.ckpt == Checkpointing::None;
    let mut g = Graph::for_build(ctx);
    let (x, y) = image_batch(&mut g, ctx)?;
    let mut children: Vec<Child> = Vec::new();
    let mut cin = 3;
    for &v in &CFG {
        if v == 0 {
            children.push(Box::new(|g, h| g.max_pool2d(h, 2, 2, 0)));
        } else {
            let c = cin;
            children.push(Box::new(move |g, h| {
                g.conv2d("", h, Conv::new(c, v, 3, 1, 1).bias(true))
            }));
            children.push(Box::new(move |g, h| g.act(h, Act::Relu, relu_inplace)));
            cin = v;
        }
    }
    let h = features(&mut g, ctx, x, children)?;
    let h = g.scoped("avgpool", |g| g.adaptive_avg_pool2d(h, 7))?;
    let s = g.shape(h);
    let h = g.view(h, vec![s[0], s[1] * s[2] * s[3]])?;
    let h = g.scoped("classifier", |g| {
        let h = g.linear("0", h, 512 * 7 * 7, 4096, true)?;
        let h = g.act(h, Act::Relu, true)?;
        let h = g.dropout(h, 0.5)?;
        let h = g.linear("3", h, 4096, 4096, true)?;
        let h = g.act(h, Act::Relu, true)?;
        let h = g.dropout(h, 0.5)?;
        g.linear("6", h, 4096, 1000, true)
    })?;
    g.cross_entropy(h, y)?;
    Ok(g)
}

// ------------------------------------------------------------------------- ConvNeXt-T

/// ConvNeXt-T (Liu et al. 2022), `torchvision/models/convnext.py`: a 4×4/4 stem conv with
/// `LayerNorm2d`; stages of 3, 3, 9, 3 `CNBlock`s (7×7 depthwise conv, permute to channels-last,
/// LayerNorm, Linear ×4, GELU, Linear, permute back, layer scale, stochastic depth with
/// probability `0.1 * block_id / 17`, residual added in place), each but the last followed by
/// `LayerNorm2d` + a 2×2/2 conv; classifier `LayerNorm2d`, flatten, `Linear(768, 1000)`.
pub fn convnext_tiny(ctx: &BuildCtx) -> Built {
    let stages: [(u64, Option<u64>, u64); 4] = [
        (96, Some(192), 3),
        (192, Some(384), 3),
        (384, Some(768), 9),
        (768, None, 3),
    ];
    let total: u64 = stages.iter().map(|s| s.2).sum();
    let mut g = Graph::for_build(ctx);
    let (x, y) = image_batch(&mut g, ctx)?;
    let mut children: Vec<Child> = Vec::new();
    children.push(Box::new(|g, h| {
        let h = g.conv2d("0", h, Conv::new(3, 96, 4, 4, 0).bias(true))?;
        g.layer_norm_2d("1", h)
    }));
    let mut block_id = 0u64;
    for &(dim, out, n) in &stages {
        let first_id = block_id;
        block_id += n;
        children.push(Box::new(move |g, h| {
            let mut h = h;
            for i in 0..n {
                let sd_prob = 0.1 * (first_id + i) as f64 / (total - 1) as f64;
                h = g.scoped(i.to_string(), |g| cn_block(g, h, dim, sd_prob))?;
            }
            Ok(h)
        }));
        if let Some(out) = out {
            children.push(Box::new(move |g, h| {
                let h = g.layer_norm_2d("0", h)?;
                g.conv2d("1", h, Conv::new(dim, out, 2, 2, 0).bias(true))
            }));
        }
    }
    let h = features(&mut g, ctx, x, children)?;
    let h = g.scoped("avgpool", |g| g.adaptive_avg_pool2d(h, 1))?;
    let h = g.scoped("classifier", |g| {
        let h = g.layer_norm_2d("0", h)?;
        let s = g.shape(h);
        let h = g.view(h, vec![s[0], s[1]])?;
        g.linear("2", h, 768, 1000, true)
    })?;
    g.cross_entropy(h, y)?;
    Ok(g)
}

/// `torchvision.models.convnext.CNBlock`.
fn cn_block(g: &mut Graph, x: TensorId, dim: u64, sd_prob: f64) -> R {
    let h = g.scoped("block", |g| {
        let h = g.conv2d("0", x, same(dim, dim, 7, 1).groups(dim).bias(true))?;
        let h = g.permute(h, &[0, 2, 3, 1])?;
        let h = g.layer_norm("2", h, true)?;
        let h = g.linear("3", h, dim, 4 * dim, true)?;
        let h = g.act(h, Act::Gelu, false)?;
        let h = g.linear("5", h, 4 * dim, dim, true)?;
        g.permute(h, &[0, 3, 1, 2])
    })?;
    let h = g.layer_scale("layer_scale", h)?;
    let h = g.stochastic_depth(h, sd_prob)?;
    g.add(h, x, true)
}

// ------------------------------------------------------------------------- custom conv nets

/// The harness's `_cbr`: conv3x3 (no bias), BatchNorm2d, `ReLU(inplace=True)`.
fn cbr(g: &mut Graph, x: TensorId, cin: u64, cout: u64) -> R {
    let h = g.conv2d("0", x, Conv::new(cin, cout, 3, 1, 1))?;
    let h = g.batch_norm("1", h)?;
    g.act(h, Act::Relu, true)
}

/// Checkpointing of the custom nets: the harness wraps every conv block whatever the mode
/// (`model.use_ckpt = True`); only `block` names that.
fn custom_block_ckpt(ctx: &BuildCtx, model: &str) -> Result<bool, EstimateError> {
    match ctx.ckpt {
        Checkpointing::None => Ok(false),
        Checkpointing::Block => Ok(true),
        _ => Err(EstimateError::Unsupported(format!(
            "{model} supports checkpointing of each conv block only: use block"
        ))),
    }
}

/// `PlainConv128` of the reference harness: a `_cbr(3, 128)` stem and four `_cbr(128, 128)` at
/// full resolution, global average pool, `Linear(128, 10)`.
pub fn plainconv128(ctx: &BuildCtx) -> Built {
    let ckpt = custom_block_ckpt(ctx, "plainconv128")?;
    let mut g = Graph::for_build(ctx);
    let (x, y) = image_batch(&mut g, ctx)?;
    let mut h = g.scoped("stem", |g| g.checkpointed(ckpt, |g| cbr(g, x, 3, 128)))?;
    for i in 0..4 {
        h = g.scoped(format!("blocks.{i}"), |g| {
            g.checkpointed(ckpt, |g| cbr(g, h, 128, 128))
        })?;
    }
    let h = g.adaptive_avg_pool2d(h, 1)?;
    let h = g.view(h, vec![ctx.batch, 128])?;
    let logits = g.linear("head", h, 128, 10, true)?;
    g.cross_entropy(logits, y)?;
    Ok(g)
}

/// `UNet` of the reference harness (Ronneberger et al. 2015 widths 64…1024, padded convs with
/// batch norm): four encoder double-convs each followed by a 2×2 max-pool, a bottleneck, four
/// decoder steps (`ConvTranspose2d(2, stride 2)`, `cat([skip, up], 1)`, double conv), a 1×1
/// conv to 2 classes and a per-pixel cross entropy against `[N, H, W]` labels. The resolution
/// must be a multiple of 16, or the skip and the upsampled maps differ in size and `cat` fails.
pub fn unet(ctx: &BuildCtx) -> Built {
    if !ctx.res.is_multiple_of(16) {
        return Err(EstimateError::Unsupported(format!(
            "unet needs a resolution divisible by 16 (four 2×2 poolings), got {}",
            ctx.res
        )));
    }
    let ckpt = custom_block_ckpt(ctx, "unet")?;
    let c = [64u64, 128, 256, 512, 1024];
    let mut g = Graph::for_build(ctx);
    let dt = g.precision.param_dtype();
    let x = g.input(vec![ctx.batch, 3, ctx.res, ctx.res], dt)?;
    let y = g.input(vec![ctx.batch, ctx.res, ctx.res], DType::I64)?;
    let dbl = |g: &mut Graph, h: TensorId, i: u64, o: u64| -> R {
        let h = g.scoped("0", |g| cbr(g, h, i, o))?;
        g.scoped("1", |g| cbr(g, h, o, o))
    };
    let mut h = x;
    let mut skips = Vec::new();
    let mut cin = 3;
    for (i, &co) in c[..4].iter().enumerate() {
        h = g.scoped(format!("enc.{i}"), |g| {
            g.checkpointed(ckpt, |g| dbl(g, h, cin, co))
        })?;
        skips.push(h);
        h = g.max_pool2d(h, 2, 2, 0)?;
        cin = co;
    }
    h = g.scoped("bottleneck", |g| {
        g.checkpointed(ckpt, |g| dbl(g, h, c[3], c[4]))
    })?;
    for (j, i) in (0..4).rev().enumerate() {
        h = g.conv_transpose2d(
            &format!("up.{j}"),
            h,
            Conv::new(c[i + 1], c[i], 2, 2, 0).bias(true),
        )?;
        let cat = g.cat(&[skips[i], h], 1)?;
        h = g.scoped(format!("dec.{j}"), |g| {
            g.checkpointed(ckpt, |g| dbl(g, cat, c[i] * 2, c[i]))
        })?;
    }
    let logits = g.conv2d("out", h, Conv::new(c[0], 2, 1, 1, 0).bias(true))?;
    g.cross_entropy(logits, y)?;
    Ok(g)
}
