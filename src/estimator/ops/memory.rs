//! Ops that move, view or keep memory without arithmetic: views (`view`, `permute`, `expand`,
//! `select`, slices, `split`, `unbind`), materialising copies, joins (`cat`, `stack`), factory
//! tensors, tensors made without autograd, and the Python references that keep a tensor alive
//! past its last op.

use super::R;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{GradFlow, Graph, StorageKind, TensorId};
use crate::estimator::units::{Bytes, DType};

impl Graph {
    /// A reshape/flatten/transpose that PyTorch serves as a view: no memory, gradient passes through.
    pub fn view(&mut self, x: TensorId, shape: Vec<u64>) -> R {
        let rg = self.t(x).requires_grad;
        let n: u64 = shape.iter().product();
        if n != self.numel(x) {
            return Err(self.bad_shape(format!("view {:?} -> {:?}", self.shape(x), shape)));
        }
        let y = self.alias(x, shape, rg);
        let mut op = self.op("view", "");
        op.inputs = vec![x];
        op.outputs = vec![y];
        op.grads = if rg {
            vec![(x, GradFlow::Alias)]
        } else {
            vec![]
        };
        self.record(op);
        Ok(y)
    }

    /// `split`/`chunk`/`narrow` into views of `x` with the given shapes (no memory). Backward
    /// (`split_backward`) concatenates the pieces' gradients into one new full-size gradient.
    pub fn split(
        &mut self,
        x: TensorId,
        shapes: Vec<Vec<u64>>,
    ) -> Result<Vec<TensorId>, EstimateError> {
        let rg = self.t(x).requires_grad;
        let total: u64 = shapes.iter().map(|s| s.iter().product::<u64>()).sum();
        if total > self.numel(x) {
            return Err(self.bad_shape(format!("split of {:?} into {:?}", self.shape(x), shapes)));
        }
        let outs: Vec<TensorId> = shapes.into_iter().map(|s| self.alias(x, s, rg)).collect();
        self.record_simple("split", vec![x], outs.clone(), vec![], 0.0);
        Ok(outs)
    }

    /// A materialising copy whose gradient passes straight back (`.contiguous()` after a
    /// transpose, `permute(...).reshape`): [`Graph::copy`] without `grad_copy`.
    pub fn contiguous(&mut self, x: TensorId, shape: Vec<u64>) -> R {
        self.copy(x, shape, false)
    }

    /// A materialising copy (`.contiguous()`, or the `clone` that `reshape`/`matmul` make of a
    /// non-contiguous input). Saves nothing. `grad_copy`: the gradient comes back through a view
    /// chain that is not contiguous either, so backward copies it again (a new tensor of the
    /// input's size, e.g. `unflatten → transpose → squeeze` after MHA's packed projection);
    /// otherwise the gradient passes through.
    pub fn copy(&mut self, x: TensorId, shape: Vec<u64>, grad_copy: bool) -> R {
        if shape.iter().product::<u64>() != self.numel(x) {
            return Err(self.bad_shape(format!("copy {:?} -> {:?}", self.shape(x), shape)));
        }
        let rg = self.t(x).requires_grad;
        let y = self.alloc(shape, self.dtype(x), StorageKind::Activation, rg)?;
        let mut op = self.op("clone", "");
        op.inputs = vec![x];
        op.outputs = vec![y];
        op.grads = if !rg {
            vec![]
        } else if grad_copy {
            vec![(x, GradFlow::Alloc)]
        } else {
            vec![(x, GradFlow::Alias)]
        };
        self.record(op);
        Ok(y)
    }

    /// `torch.permute`: a view with permuted sizes (no memory); the gradient is permuted back.
    pub fn permute(&mut self, x: TensorId, dims: &[usize]) -> R {
        let s = self.shape(x);
        let mut seen = vec![false; s.len()];
        if dims.len() != s.len()
            || dims
                .iter()
                .any(|&d| d >= s.len() || std::mem::replace(&mut seen[d], true))
        {
            return Err(self.bad_shape(format!("permute {dims:?} of a {}-d tensor", s.len())));
        }
        let shape = dims.iter().map(|&d| s[d]).collect();
        let rg = self.t(x).requires_grad;
        let y = self.alias(x, shape, rg);
        let mut op = self.op("permute", "");
        op.inputs = vec![x];
        op.outputs = vec![y];
        op.grads = if rg {
            vec![(x, GradFlow::Alias)]
        } else {
            vec![]
        };
        self.record(op);
        Ok(y)
    }

    /// `torch.cat` along channels: a new tensor; saves nothing (only sizes); gradients are
    /// narrowed views of the output gradient.
    pub fn cat(&mut self, xs: &[TensorId], dim: usize) -> R {
        let mut s = self.shape(xs[0]);
        s[dim] = xs.iter().map(|&x| self.shape(x)[dim]).sum();
        let dt = self.dtype(xs[0]);
        let y = self.out_like(s, dt, xs)?;
        let mut op = self.op("cat", "");
        op.inputs = xs.to_vec();
        op.outputs = vec![y];
        op.grads = xs
            .iter()
            .filter(|&&t| self.t(t).requires_grad)
            .map(|&t| (t, GradFlow::Alias))
            .collect();
        self.record(op);
        Ok(y)
    }

    /// `torch.stack(xs)`: a new tensor; saves nothing; each input's gradient is a view of the
    /// output gradient (`derivatives.yaml` `stack`: `stack_tensors_backward` → `unbind`), so the
    /// whole stacked gradient lives until the last piece is consumed.
    pub fn stack(&mut self, xs: &[TensorId]) -> R {
        let Some(&first) = xs.first() else {
            return Err(self.bad_shape("stack of nothing"));
        };
        let mut s = vec![xs.len() as u64];
        s.extend(self.shape(first));
        let y = self.out_like(s, self.dtype(first), xs)?;
        let mut op = self.op("stack", "");
        op.inputs = xs.to_vec();
        op.outputs = vec![y];
        op.grads = xs
            .iter()
            .filter(|&&t| self.t(t).requires_grad)
            .map(|&t| (t, GradFlow::Alias))
            .collect();
        self.record(op);
        Ok(y)
    }

    /// `unbind(0)`: views of each slice. Its backward node waits for all slices' gradients, then
    /// stacks them into one new full-size gradient (`derivatives.yaml` `unbind.int`:
    /// `unbind_backward`), so the per-slice gradients pile up until then.
    pub fn unbind(&mut self, x: TensorId) -> Result<Vec<TensorId>, EstimateError> {
        let s = self.shape(x);
        let Some((&n, rest)) = s.split_first() else {
            return Err(self.bad_shape("unbind of a scalar"));
        };
        let rg = self.t(x).requires_grad;
        let outs: Vec<TensorId> = (0..n).map(|_| self.alias(x, rest.to_vec(), rg)).collect();
        self.record_simple("unbind", vec![x], outs.clone(), vec![], 0.0);
        Ok(outs)
    }

    /// `expand` of a parameter over a batch (the ViT class token): a view; its backward sums the
    /// gradient back to the parameter's shape (`derivatives.yaml` `expand`: `at::sum_to`), a new
    /// tensor of the parameter's size.
    pub fn expand(&mut self, x: TensorId, shape: Vec<u64>) -> R {
        let rg = self.t(x).requires_grad;
        let y = self.alias(x, shape, rg);
        self.record_simple("expand", vec![x], vec![y], vec![], 0.0);
        Ok(y)
    }

    /// `select`/`unflatten`/`transpose` chains that pick a smaller view (`x[:, 0]`, one of q/k/v
    /// out of the packed projection): shares `x`'s storage, so whoever saves the view keeps all of
    /// `x` alive. Backward is `select_backward`: a zero-filled gradient of `x`'s full size.
    pub fn select(&mut self, x: TensorId, shape: Vec<u64>) -> R {
        if shape.iter().product::<u64>() > self.numel(x) {
            return Err(self.bad_shape(format!("select {:?} out of {:?}", shape, self.shape(x))));
        }
        let rg = self.t(x).requires_grad;
        let y = self.alias(x, shape, rg);
        self.record_simple("select", vec![x], vec![y], vec![], 0.0);
        Ok(y)
    }

    /// A basic slice (`hidden_states[:, -n:, :]`): a view, no memory.
    pub fn slice_view(&mut self, x: TensorId, shape: Vec<u64>) -> R {
        let rg = self.t(x).requires_grad;
        let y = self.alias(x, shape, rg);
        let mut op = self.op("slice", "");
        op.inputs = vec![x];
        op.outputs = vec![y];
        op.grads = if rg {
            vec![(x, GradFlow::Alloc)]
        } else {
            vec![]
        };
        self.record(op);
        Ok(y)
    }

    /// The end of a Python reference: a module's local variable or argument keeps its tensor
    /// alive until the function returns, past the tensor's last use by an op (e.g. the query of
    /// `MultiheadAttention` until the output projection ran). Allocates and saves nothing.
    pub fn hold(&mut self, ts: &[TensorId]) {
        let mut op = self.op("python_ref", "");
        op.inputs = ts.to_vec();
        self.record(op);
    }

    /// A factory tensor (`torch.zeros`) that needs no gradient: the initial LSTM states.
    pub fn zeros(&mut self, shape: Vec<u64>, dtype: DType) -> R {
        let z = self.alloc(shape, dtype, StorageKind::Activation, false)?;
        let mut op = self.op("zeros", "");
        op.outputs = vec![z];
        self.record(op);
        Ok(z)
    }

    /// `x.masked_scatter(mask, source)` (LLaVA writes the image features over the image tokens'
    /// embeddings): a new tensor of `x`'s size. Autograd saves the mask (`derivatives.yaml`
    /// `masked_scatter`: `self: grad.masked_fill(mask, 0)`, `source:
    /// masked_scatter_backward(grad, mask, source.sizes())`), so backward allocates one gradient
    /// of each input's size.
    pub fn masked_scatter(&mut self, x: TensorId, mask: TensorId, source: TensorId) -> R {
        let y = self.out_like(self.shape(x), self.dtype(x), &[x, source])?;
        let mut op = self.op("masked_scatter", "");
        op.inputs = vec![x, mask, source];
        op.outputs = vec![y];
        op.saved = vec![mask];
        op.grads = self.grads_alloc(&[x, source]);
        self.record(op);
        Ok(y)
    }

    /// An integer/bool tensor computed without autograd (positions, shifted labels, masks).
    pub fn no_grad_op(
        &mut self,
        kind: &'static str,
        inputs: &[TensorId],
        shape: Vec<u64>,
        dtype: DType,
        fwd_scratch: Bytes,
    ) -> R {
        let y = self.alloc(shape, dtype, StorageKind::Activation, false)?;
        let mut op = self.op(kind, "");
        op.inputs = inputs.to_vec();
        op.outputs = vec![y];
        op.fwd_scratch = fwd_scratch;
        self.record(op);
        Ok(y)
    }
}
