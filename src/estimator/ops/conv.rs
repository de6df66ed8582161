//! Convolutions: `nn.Conv2d` and `nn.ConvTranspose2d` (cuDNN), and their output geometry.

use super::R;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, TensorId};

/// Geometry of a 2-D convolution.
#[derive(Clone, Copy, Debug)]
pub struct Conv {
    pub cin: u64,
    pub cout: u64,
    pub k: u64,
    pub stride: u64,
    pub pad: u64,
    pub dilation: u64,
    pub groups: u64,
    pub bias: bool,
}

impl Conv {
    pub fn new(cin: u64, cout: u64, k: u64, stride: u64, pad: u64) -> Self {
        Conv {
            cin,
            cout,
            k,
            stride,
            pad,
            dilation: 1,
            groups: 1,
            bias: false,
        }
    }
    pub fn groups(mut self, g: u64) -> Self {
        self.groups = g;
        self
    }
    pub fn bias(mut self, b: bool) -> Self {
        self.bias = b;
        self
    }
    pub fn dilation(mut self, d: u64) -> Self {
        self.dilation = d;
        self
    }
}

pub(super) fn conv_out(size: u64, c: &Conv) -> Option<u64> {
    let span = c.dilation * (c.k - 1) + 1;
    (size + 2 * c.pad)
        .checked_sub(span)
        .map(|v| v / c.stride + 1)
}

impl Graph {
    /// `nn.Conv2d` (cuDNN `convolution`): saves input and weight; backward allocates the input,
    /// weight and bias gradients (`convolution_backward`).
    pub fn conv2d(&mut self, leaf: &str, x: TensorId, c: Conv) -> R {
        self.push(leaf);
        let r = self.conv2d_inner(x, c);
        self.pop();
        r
    }

    fn conv2d_inner(&mut self, x: TensorId, c: Conv) -> R {
        let s = self.shape(x);
        if s.len() != 4 || s[1] != c.cin {
            return Err(self.bad_shape(format!("conv2d expects [N,{},H,W], got {:?}", c.cin, s)));
        }
        let w = self.param(vec![c.cout, c.cin / c.groups, c.k, c.k])?;
        let b = if c.bias {
            Some(self.param(vec![c.cout])?)
        } else {
            None
        };
        let (ho, wo) = match (conv_out(s[2], &c), conv_out(s[3], &c)) {
            (Some(h), Some(w)) if h > 0 && w > 0 => (h, w),
            _ => {
                return Err(EstimateError::Unsupported(format!(
                    "{}: the feature map shrinks to nothing; raise the resolution",
                    self.name("")
                )))
            }
        };
        let xc = self.lowp(x)?;
        let wc = self.lowp(w)?;
        let bc = match b {
            Some(b) => Some(self.lowp(b)?),
            None => None,
        };
        let mut ins = vec![xc, wc];
        ins.extend(bc);
        let y = self.out_like(vec![s[0], c.cout, ho, wo], self.dtype(xc), &ins)?;
        self.record_simple(
            "conv2d",
            ins.clone(),
            vec![y],
            vec![xc, wc],
            2.0 * (s[0] * c.cout * ho * wo) as f64 * ((c.cin / c.groups) * c.k * c.k) as f64,
        );
        Ok(y)
    }

    /// `nn.ConvTranspose2d(k, stride)` with `output_padding = 0`: the same saving as conv2d.
    pub fn conv_transpose2d(&mut self, leaf: &str, x: TensorId, c: Conv) -> R {
        self.push(leaf);
        let r = (|| {
            let s = self.shape(x);
            if s.len() != 4 || s[1] != c.cin {
                return Err(self.bad_shape("conv_transpose2d input"));
            }
            let w = self.param(vec![c.cin, c.cout / c.groups, c.k, c.k])?;
            let b = if c.bias {
                Some(self.param(vec![c.cout])?)
            } else {
                None
            };
            let o =
                |n: u64| ((n - 1) * c.stride + c.dilation * (c.k - 1) + 1).checked_sub(2 * c.pad);
            let (ho, wo) = match (o(s[2]), o(s[3])) {
                (Some(h), Some(w)) if h > 0 && w > 0 => (h, w),
                _ => return Err(self.bad_shape("conv_transpose2d output is empty")),
            };
            let xc = self.lowp(x)?;
            let wc = self.lowp(w)?;
            let mut ins = vec![xc, wc];
            if let Some(b) = b {
                ins.push(self.lowp(b)?);
            }
            let y = self.out_like(vec![s[0], c.cout, ho, wo], self.dtype(xc), &ins)?;
            self.record_simple(
                "conv_transpose2d",
                ins.clone(),
                vec![y],
                vec![xc, wc],
                2.0 * (s[0] * c.cin * s[2] * s[3]) as f64
                    * ((c.cout / c.groups) * c.k * c.k) as f64,
            );
            Ok(y)
        })();
        self.pop();
        r
    }
}
