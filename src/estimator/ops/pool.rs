//! Pooling and resampling of `[N, C, H, W]` feature maps: max, average and adaptive average
//! pooling, nearest and bilinear upsampling.

use super::conv::{conv_out, Conv};
use super::R;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, StorageKind, TensorId};
use crate::estimator::units::DType;

impl Graph {
    /// `max_pool2d_with_indices`: output plus int64 indices; saves input and indices.
    pub fn max_pool2d(&mut self, x: TensorId, k: u64, stride: u64, pad: u64) -> R {
        let s = self.shape(x);
        let c = Conv::new(s[1], s[1], k, stride, pad);
        let (ho, wo) = match (conv_out(s[2], &c), conv_out(s[3], &c)) {
            (Some(h), Some(w)) if h > 0 && w > 0 => (h, w),
            _ => {
                return Err(EstimateError::Unsupported(format!(
                    "{}: max-pool input too small; raise the resolution",
                    self.name("")
                )))
            }
        };
        let y = self.out_like(vec![s[0], s[1], ho, wo], self.dtype(x), &[x])?;
        let idx = self.alloc(
            vec![s[0], s[1], ho, wo],
            DType::I64,
            StorageKind::Activation,
            false,
        )?;
        self.record_simple(
            "max_pool2d",
            vec![x],
            vec![y, idx],
            vec![x, idx],
            (s[0] * s[1] * ho * wo * k * k) as f64,
        );
        Ok(y)
    }

    /// `adaptive_avg_pool2d` to `out`×`out`: saves its input (`_adaptive_avg_pool2d_backward(grad, self)`).
    /// Output 1×1 on a CUDA tensor runs as `mean(dim=(-2,-1), keepdim)`, which saves nothing.
    pub fn adaptive_avg_pool2d(&mut self, x: TensorId, out: u64) -> R {
        let s = self.shape(x);
        let y = self.out_like(vec![s[0], s[1], out, out], self.dtype(x), &[x])?;
        let saved = if out != 1 { vec![x] } else { vec![] };
        self.record_unary("adaptive_avg_pool2d", x, y, saved, self.numel(x) as f64);
        Ok(y)
    }

    /// `avg_pool2d(k, stride)`: saves its input.
    pub fn avg_pool2d(&mut self, x: TensorId, k: u64, stride: u64) -> R {
        let s = self.shape(x);
        let c = Conv::new(s[1], s[1], k, stride, 0);
        let (ho, wo) = (
            conv_out(s[2], &c).unwrap_or(0),
            conv_out(s[3], &c).unwrap_or(0),
        );
        if ho == 0 || wo == 0 {
            return Err(self.bad_shape("avg_pool2d input too small"));
        }
        let y = self.out_like(vec![s[0], s[1], ho, wo], self.dtype(x), &[x])?;
        self.record_unary("avg_pool2d", x, y, vec![x], self.numel(x) as f64);
        Ok(y)
    }

    /// `F.interpolate(x, scale_factor=k, mode="nearest" | "bilinear")` (`upsample_nearest2d`,
    /// `upsample_bilinear2d`): a new `[N, C, kH, kW]` tensor. Both backward kernels need only the
    /// sizes (`derivatives.yaml`: `upsample_*_backward(grad, output_size, input_size, ...)`), so
    /// nothing is saved. On CUDA autocast's fp32 list (`autocast_mode.cpp`).
    pub fn upsample2d(&mut self, x: TensorId, k: u64, bilinear: bool) -> R {
        let s = self.shape(x);
        if s.len() != 4 || k == 0 {
            return Err(self.bad_shape("upsample2d expects [N,C,H,W] and a positive scale"));
        }
        let xc = self.fp32(x)?;
        let y = self.out_like(vec![s[0], s[1], s[2] * k, s[3] * k], self.dtype(xc), &[xc])?;
        let flops = if bilinear { 4.0 } else { 1.0 } * self.numel(y) as f64;
        self.record_unary(
            if bilinear {
                "upsample_bilinear2d"
            } else {
                "upsample_nearest2d"
            },
            xc,
            y,
            vec![],
            flops,
        );
        Ok(y)
    }
}
