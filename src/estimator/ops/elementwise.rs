//! Elementwise arithmetic: one-tensor pointwise ops, `add` and `mul` with broadcasting and type
//! promotion, ConvNeXt's layer scale and the last-dimension mean.

use super::R;
use crate::estimator::graph::{GradFlow, Graph, StorageKind, TensorId};
use crate::estimator::units::{Bytes, DType};

/// How a pointwise op with one tensor operand (the others are Python scalars) behaves in
/// autograd.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pw {
    /// The backward formula reads the input (`pow`, `silu`, `gelu`).
    pub save_input: bool,
    /// The backward formula reads the output (`tanh`, `rsqrt`, `exp`).
    pub save_output: bool,
    /// Input-sized temporaries the backward formula materialises besides its result
    /// (`pow_backward`: `pow(x, e-1)` and `e * ...`).
    pub bwd_temps: u64,
    /// The gradient passes through unchanged (`x + 1`).
    pub alias_grad: bool,
    /// Forward FLOPs per element.
    pub flops: f64,
}

/// Broadcast shape of two operands (right-aligned, as `TensorIterator` computes it).
fn broadcast(a: &[u64], b: &[u64]) -> Option<Vec<u64>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

impl Graph {
    /// A pointwise op on `x` (scalar operands are constants) with output dtype `dtype`.
    pub fn pointwise(&mut self, kind: &'static str, x: TensorId, dtype: DType, p: Pw) -> R {
        let s = self.shape(x);
        let rg = self.t(x).requires_grad;
        let y = self.alloc(s, dtype, StorageKind::Activation, rg)?;
        let mut op = self.op(kind, "");
        op.flops = p.flops * self.numel(x) as f64;
        op.inputs = vec![x];
        op.outputs = vec![y];
        if p.save_input {
            op.saved.push(x);
        }
        if p.save_output {
            op.saved.push(y);
        }
        let same = self.dtype(x) == dtype;
        op.grads = match (rg, p.alias_grad && same) {
            (false, _) => vec![],
            (true, true) => vec![(x, GradFlow::Alias)],
            (true, false) => vec![(x, GradFlow::Alloc)],
        };
        op.bwd_scratch = Bytes(self.bytes(x).0.saturating_mul(p.bwd_temps));
        if !same && rg {
            // The formula runs in the output dtype; the engine then casts to the input dtype.
            op.bwd_scratch += self.bytes(y);
        }
        self.record(op);
        Ok(y)
    }

    /// `a + b` with broadcasting and type promotion ([`DType::promote`]), or `a += b` in place
    /// (`add_`: the result is `a`'s storage, shape and dtype). Saves nothing (`derivatives.yaml`
    /// `add.Tensor`: `self: handle_r_to_c(self, grad)`, `other: grad * alpha`). The gradient
    /// passes through to an operand of the result's shape and dtype; for the others the autograd
    /// engine (`torch/csrc/autograd/engine.cpp` `validate_outputs`) makes a new tensor: a
    /// `sum_to` the operand's shape, a cast to its dtype.
    pub fn add(&mut self, a: TensorId, b: TensorId, inplace: bool) -> R {
        let (sa, sb) = (self.shape(a), self.shape(b));
        let s =
            broadcast(&sa, &sb).ok_or_else(|| self.bad_shape(format!("add {sa:?} + {sb:?}")))?;
        if inplace && s != sa {
            return Err(self.bad_shape(format!("in-place add {sa:?} += {sb:?} would broadcast")));
        }
        let rg = self.requires_grad(&[a, b]);
        let (y, dt) = if inplace {
            (self.alias(a, s.clone(), rg), self.dtype(a))
        } else {
            let dt = self.dtype(a).promote(self.dtype(b));
            (self.out_like(s.clone(), dt, &[a, b])?, dt)
        };
        let mut op = self.op("add", "");
        op.flops = self.numel(y) as f64;
        op.inputs = vec![a, b];
        op.outputs = vec![y];
        for t in [a, b] {
            if self.t(t).requires_grad && !op.grads.iter().any(|&(g, _)| g == t) {
                let pass = self.shape(t) == s && self.dtype(t) == dt;
                let flow = if pass {
                    GradFlow::Alias
                } else {
                    GradFlow::Alloc
                };
                op.grads.push((t, flow));
            }
        }
        self.record(op);
        Ok(y)
    }

    /// `a * b` with `b` broadcast over `a` (or the same shape). Saves both operands (each one's
    /// gradient needs the other); the gradient of a broadcast operand is reduced (a new, small tensor).
    pub fn mul(&mut self, a: TensorId, b: TensorId, inplace: bool) -> R {
        let s = self.shape(a);
        let dt = self.dtype(a);
        let rg = self.requires_grad(&[a, b]);
        let y = if inplace {
            self.alias(a, s, rg)
        } else {
            self.out_like(s, dt, &[a, b])?
        };
        let mut op = self.op("mul", "");
        op.flops = self.numel(a) as f64;
        op.inputs = vec![a, b];
        op.outputs = vec![y];
        let mut saved = Vec::new();
        if self.t(b).requires_grad {
            saved.push(a);
        }
        if self.t(a).requires_grad {
            saved.push(b);
        }
        op.saved = saved;
        op.grads = self.grads_alloc(&[a, b]);
        // Reducing a broadcast gradient first materialises the full-size product.
        if self.t(b).requires_grad && self.numel(b) < self.numel(a) {
            op.bwd_scratch = self.bytes(a);
        }
        self.record(op);
        Ok(y)
    }

    /// `a * b` with broadcasting and type promotion (`mul.Tensor`): saves each operand whose
    /// partner needs a gradient (`derivatives.yaml`: `grad * other`, `grad * self`). The gradient
    /// of a broadcast or narrower operand is first formed at the output's size, then reduced or
    /// cast: that full-size product is backward scratch.
    pub fn mul_bc(&mut self, a: TensorId, b: TensorId) -> R {
        let (sa, sb) = (self.shape(a), self.shape(b));
        let s =
            broadcast(&sa, &sb).ok_or_else(|| self.bad_shape(format!("mul {sa:?} * {sb:?}")))?;
        let dt = self.dtype(a).promote(self.dtype(b));
        let rg = self.requires_grad(&[a, b]);
        let y = self.alloc(s, dt, StorageKind::Activation, rg)?;
        let mut op = self.op("mul", "");
        op.flops = self.numel(y) as f64;
        op.inputs = vec![a, b];
        op.outputs = vec![y];
        if self.t(b).requires_grad {
            op.saved.push(a);
        }
        if self.t(a).requires_grad {
            op.saved.push(b);
        }
        op.grads = self.grads_alloc(&[a, b]);
        for t in [a, b] {
            if self.t(t).requires_grad && (self.numel(t) < self.numel(y) || self.dtype(t) != dt) {
                op.bwd_scratch += self.bytes(y);
            }
        }
        self.record(op);
        Ok(y)
    }

    /// ConvNeXt's layer scale: `gamma * x` with a `[C, 1, 1]` parameter. Both operands are saved
    /// (`mul`: `self: grad * other`, `other: grad * self`); gamma's gradient first materialises
    /// `grad * x` at full size, then `sum_to_size`. Type promotion follows the operands, so under
    /// autocast an fp32 gamma times a bf16 `x` gives an fp32 result (mul is on no autocast list).
    pub fn layer_scale(&mut self, leaf: &str, x: TensorId) -> R {
        self.push(leaf);
        let r = (|| {
            let s = self.shape(x);
            if s.len() != 4 {
                return Err(self.bad_shape("layer scale expects [N, C, H, W]"));
            }
            let gamma = self.param(vec![s[1], 1, 1])?;
            let dt = self.dtype(x).promote(self.dtype(gamma));
            let y = self.out_like(s.clone(), dt, &[x, gamma])?;
            let mut op = self.op("mul", "");
            op.flops = self.numel(x) as f64;
            op.inputs = vec![gamma, x];
            op.outputs = vec![y];
            op.saved = vec![gamma, x];
            op.grads = self.grads_alloc(&[gamma, x]);
            // `MulBackward0` computes both products at the result dtype before the engine
            // reduces gamma's (`sum_to_size`) and casts x's to x's dtype (`validate_outputs`):
            // at its peak the node holds two full result-dtype products. Counted here as the
            // part beyond the cast gradient of x that outlives the node.
            let full = self.bytes(y);
            op.bwd_scratch = if self.dtype(x) == dt {
                full
            } else {
                Bytes(2 * full.0).saturating_sub(self.bytes(x))
            };
            self.record(op);
            Ok(y)
        })();
        self.pop();
        r
    }

    /// `x.mean(-1, keepdim=True)`: saves nothing (only sizes); the gradient is the incoming one
    /// expanded and divided (`div.Scalar`): a new input-sized tensor.
    pub fn mean_last(&mut self, x: TensorId) -> R {
        let mut s = self.shape(x);
        let last = s
            .last_mut()
            .ok_or_else(|| self.bad_shape("mean of a scalar"))?;
        *last = 1;
        let rg = self.t(x).requires_grad;
        let y = self.alloc(s, self.dtype(x), StorageKind::Activation, rg)?;
        self.record_unary("mean", x, y, vec![], self.numel(x) as f64);
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_right_aligned() {
        assert_eq!(broadcast(&[2, 3, 4], &[4]), Some(vec![2, 3, 4]));
        assert_eq!(
            broadcast(&[2, 12, 8, 8], &[2, 1, 8, 8]),
            Some(vec![2, 12, 8, 8])
        );
        assert_eq!(broadcast(&[2, 3], &[4]), None);
    }
}
