//! Vision models, built op by op as torchvision defines them (`torchvision/models/*.py`).

use crate::estimator::checkpoint;
use crate::estimator::config::{BuildCtx, Checkpointing};
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, TensorId};
use crate::estimator::ops::{Act, Conv};
use crate::estimator::units::DType;

pub type Built = Result<Graph, EstimateError>;

/// The batch of a classifier: images in the parameter dtype and int64 labels.
pub fn image_batch(g: &mut Graph, ctx: &BuildCtx) -> Result<(TensorId, TensorId), EstimateError> {
    let dt = g.precision.param_dtype();
    let x = g.input(vec![ctx.batch, 3, ctx.res, ctx.res], dt)?;
    let y = g.input(vec![ctx.batch], DType::I64)?;
    Ok((x, y))
}

/// conv → batch norm → optional in-place activation, the torchvision building block.
pub fn conv_bn(
    g: &mut Graph,
    x: TensorId,
    c: Conv,
    act: Option<Act>,
) -> Result<TensorId, EstimateError> {
    let y = g.conv2d("conv", x, c)?;
    let y = g.batch_norm("bn", y)?;
    match act {
        Some(a) => g.act(y, a, true),
        None => Ok(y),
    }
}

/// ResNet (He et al. 2016) as in `torchvision/models/resnet.py`: `layers` blocks per stage,
/// `bottleneck` blocks with expansion 4, `width_per_group` 64 (128 for wide_resnet50_2).
/// Checkpointing: `stage` wraps each of `layer1..4`, `block` each residual block (the shared
/// harness's `apply_vision_ckpt`), `sqrt` and `Segments(k)` segment the blocks in order.
pub fn resnet(ctx: &BuildCtx, layers: [u64; 4], bottleneck: bool, width_per_group: u64) -> Built {
    let mut g = Graph::for_build(ctx);
    let (x, y) = image_batch(&mut g, ctx)?;
    let mut h = g.conv2d("conv1", x, Conv::new(3, 64, 7, 2, 3))?;
    h = g.scoped("bn1", |g| g.batch_norm("", h))?;
    h = g.act(h, Act::Relu, true)?;
    h = g.max_pool2d(h, 3, 2, 1)?;
    let exp = if bottleneck { 4 } else { 1 };
    // `sqrt` and `Segments(k)`: `checkpoint_sequential` over the residual blocks in order
    // (`nn.Sequential(*layer1, *layer2, *layer3, *layer4)`), the stem run before it.
    let blocks = layers.iter().sum::<u64>() as usize;
    let seq =
        checkpoint::sequential_ranges(ctx.ckpt, blocks, "residual blocks")?.unwrap_or_default();
    let mut gb = 0;
    let mut opened = false;
    let mut inplanes = 64;
    for (si, &n) in layers.iter().enumerate() {
        let planes = 64u64 << si;
        let stage_stride = if si == 0 { 1 } else { 2 };
        let stage_ckpt = ctx.ckpt == Checkpointing::Stage;
        h = g.scoped(format!("layer{}", si + 1), |g| {
            g.checkpointed(stage_ckpt, |g| {
                let stage_input = h;
                let mut h = h;
                for bi in 0..n {
                    let stride = if bi == 0 { stage_stride } else { 1 };
                    let block_ckpt = ctx.ckpt == Checkpointing::Block;
                    let cin = inplanes;
                    if seq.iter().any(|r| r.start == gb) {
                        opened = g.begin_region();
                    }
                    h = g.scoped(bi.to_string(), |g| {
                        g.checkpointed(block_ckpt, |g| {
                            let identity = h;
                            let mut o;
                            if bottleneck {
                                let width = planes * width_per_group / 64;
                                o = g.conv2d("conv1", h, Conv::new(cin, width, 1, 1, 0))?;
                                o = g.batch_norm("bn1", o)?;
                                o = g.act(o, Act::Relu, true)?;
                                o = g.conv2d("conv2", o, Conv::new(width, width, 3, stride, 1))?;
                                o = g.batch_norm("bn2", o)?;
                                o = g.act(o, Act::Relu, true)?;
                                o =
                                    g.conv2d("conv3", o, Conv::new(width, planes * exp, 1, 1, 0))?;
                                o = g.batch_norm("bn3", o)?;
                            } else {
                                o = g.conv2d("conv1", h, Conv::new(cin, planes, 3, stride, 1))?;
                                o = g.batch_norm("bn1", o)?;
                                o = g.act(o, Act::Relu, true)?;
                                o = g.conv2d("conv2", o, Conv::new(planes, planes, 3, 1, 1))?;
                                o = g.batch_norm("bn2", o)?;
                            }
                            let idn = if stride != 1 || cin != planes * exp {
                                g.scoped("downsample", |g| {
                                    let d = g.conv2d(
                                        "0",
                                        identity,
                                        Conv::new(cin, planes * exp, 1, stride, 0),
                                    )?;
                                    g.batch_norm("1", d)
                                })?
                            } else {
                                identity
                            };
                            o = g.add(o, idn, true)?;
                            let o = g.act(o, Act::Relu, true)?;
                            // The block's `x` argument (and `nn.Sequential.forward`'s `input`,
                            // which called it) is referenced until the block returns, past the
                            // downsample's last use. Training saves it for backward anyway.
                            if g.inference {
                                g.hold(&[identity]);
                            }
                            Ok::<_, EstimateError>(o)
                        })
                    })?;
                    gb += 1;
                    if seq.iter().any(|r| r.end == gb) {
                        g.end_region(opened);
                    }
                    inplanes = planes * exp;
                }
                // `_forward_impl`'s `x` holds the stage's input until `x = self.layerN(x)`
                // rebinds it, after the stage's last block.
                if g.inference {
                    g.hold(&[stage_input]);
                }
                Ok::<_, EstimateError>(h)
            })
        })?;
    }
    h = g.adaptive_avg_pool2d(h, 1)?;
    let s = g.shape(h);
    h = g.view(h, vec![s[0], s[1]])?;
    let logits = g.linear("fc", h, 512 * exp, 1000, true)?;
    g.cross_entropy(logits, y)?;
    Ok(g)
}
