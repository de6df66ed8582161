//! Dropout in its three PyTorch forms (CUDA's fused `native_dropout`, the CPU's composite, the
//! in-place `dropout_`) and torchvision's stochastic depth.

use super::R;
use crate::estimator::graph::{Graph, StorageKind, TensorId};
use crate::estimator::units::DType;

impl Graph {
    /// `nn.Dropout(p)` in training on CUDA (`native_dropout`): output plus a 1-byte mask, saves the
    /// mask. `p = 0` and eval mode are the identity and record nothing.
    pub fn dropout(&mut self, x: TensorId, p: f64) -> R {
        if p <= 0.0 || self.inference {
            return Ok(x);
        }
        let s = self.shape(x);
        let y = self.out_like(s.clone(), self.dtype(x), &[x])?;
        let mask = self.alloc(s, DType::Bool, StorageKind::Activation, false)?;
        self.record_simple(
            "dropout",
            vec![x],
            vec![y, mask],
            vec![mask],
            self.numel(x) as f64,
        );
        Ok(y)
    }

    /// `nn.Dropout(p)` in training on the chosen device. CUDA runs the fused `native_dropout`
    /// (a 1-byte mask, [`Graph::dropout`]); the CPU runs `_dropout_impl`: `empty_like(x)
    /// .bernoulli_(1 - p).div_(1 - p)` and `x * noise`, so the saved mask has `x`'s dtype.
    pub fn dropout_on(&mut self, x: TensorId, p: f64, cpu: bool) -> R {
        if !cpu || p <= 0.0 || self.inference {
            return self.dropout(x, p);
        }
        let s = self.shape(x);
        let dt = self.dtype(x);
        let rg = self.t(x).requires_grad;
        let y = self.alloc(s.clone(), dt, StorageKind::Activation, rg)?;
        let noise = self.alloc(s, dt, StorageKind::Activation, false)?;
        self.record_simple(
            "dropout",
            vec![x],
            vec![y, noise],
            vec![noise],
            2.0 * self.numel(x) as f64,
        );
        Ok(y)
    }

    /// `nn.Dropout(p, inplace=True)` (`F.dropout(..., inplace=True)` → `aten::dropout_`): the
    /// composite kernel draws the mask with `empty_like` + `bernoulli_` + `div_` in the input's
    /// dtype (not the 1-byte mask of `native_dropout`) and multiplies in place; `mul_` saves the
    /// mask (`self: grad * other`). `p = 0` records nothing.
    pub fn dropout_inplace(&mut self, x: TensorId, p: f64) -> R {
        if p <= 0.0 || self.inference {
            return Ok(x);
        }
        let s = self.shape(x);
        let mask = self.alloc(s.clone(), self.dtype(x), StorageKind::Activation, false)?;
        let mut op = self.op("bernoulli_", "");
        op.outputs = vec![mask];
        self.record(op);
        let rg = self.t(x).requires_grad;
        let y = self.alias(x, s, rg);
        let mut op = self.op("dropout_", "");
        op.flops = self.numel(x) as f64;
        op.inputs = vec![x, mask];
        op.outputs = vec![y];
        op.saved = vec![mask];
        op.grads = self.grads_alloc(&[x]);
        self.record(op);
        Ok(y)
    }

    /// `torchvision.ops.stochastic_depth(x, p, "row")` in training: a noise tensor `[N, 1, .., 1]`
    /// in x's dtype (`torch.empty` + `bernoulli_` + `div_`), then `x * noise`, a new tensor that
    /// saves only the noise (the noise needs no gradient, so `x` is not kept for it).
    /// `p = 0` returns the input unchanged, as torchvision does.
    pub fn stochastic_depth(&mut self, x: TensorId, p: f64) -> R {
        if p <= 0.0 || self.inference {
            return Ok(x);
        }
        let s = self.shape(x);
        let mut ns = vec![1; s.len()];
        ns[0] = s[0];
        let noise = self.alloc(ns, self.dtype(x), StorageKind::Activation, false)?;
        let mut op = self.op("bernoulli_", "stochastic_depth");
        op.outputs = vec![noise];
        self.record(op);
        self.scoped("stochastic_depth", |g| g.mul(x, noise, false))
    }
}
