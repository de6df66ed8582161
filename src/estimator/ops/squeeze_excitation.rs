//! `torchvision.ops.misc.SqueezeExcitation`, the channel gate of EfficientNet and MobileNetV3.

use super::{Act, Conv, R};
use crate::estimator::graph::{Graph, TensorId};

impl Graph {
    /// `torchvision.ops.misc.SqueezeExcitation`: `avgpool` (a 1×1 mean that saves nothing),
    /// `fc1` (1×1 conv with bias), `delta`, `fc2`, `sigma`, then `scale * input`, which saves both
    /// operands; its backward materialises `grad * input` at full size before reducing it to
    /// the scale's shape. `delta_inplace`: EfficientNet passes `SiLU(inplace=True)`,
    /// MobileNetV3 a plain `ReLU()`.
    pub fn squeeze_excitation(
        &mut self,
        leaf: &str,
        x: TensorId,
        squeeze: u64,
        delta: Act,
        delta_inplace: bool,
        sigma: Act,
    ) -> R {
        self.push(leaf);
        let r = (|| {
            let s = self.shape(x);
            let c = s[1];
            let p = self.scoped("avgpool", |g| g.adaptive_avg_pool2d(x, 1))?;
            let h = self.conv2d("fc1", p, Conv::new(c, squeeze, 1, 1, 0).bias(true))?;
            let h = self.scoped("activation", |g| {
                if delta_inplace {
                    g.act_inplace(h, delta)
                } else {
                    g.act(h, delta, false)
                }
            })?;
            let h = self.conv2d("fc2", h, Conv::new(squeeze, c, 1, 1, 0).bias(true))?;
            let scale = self.scoped("scale_activation", |g| g.act(h, sigma, false))?;
            self.mul(x, scale, false)
        })();
        self.pop();
        r
    }
}
