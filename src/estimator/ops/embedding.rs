//! Token and position embeddings: `nn.Embedding` and the rotary tables and rotation of
//! LLaMA-style models.

use super::R;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{GradFlow, Graph, StorageKind, TensorId};
use crate::estimator::units::{Bytes, DType};

impl Graph {
    /// `nn.Embedding`: gathers rows; saves the indices (already alive); backward
    /// (`embedding_dense_backward`) allocates a full-size weight gradient.
    pub fn embedding(
        &mut self,
        leaf: &str,
        ids: TensorId,
        vocab: u64,
        dim: u64,
    ) -> Result<(TensorId, TensorId), EstimateError> {
        self.push(leaf);
        let r = (|| {
            let w = self.param(vec![vocab, dim])?;
            let y = self.embedding_with(ids, w)?;
            Ok((y, w))
        })();
        self.pop();
        r
    }

    pub fn embedding_with(&mut self, ids: TensorId, w: TensorId) -> R {
        let mut s = self.shape(ids);
        s.push(self.shape(w)[1]);
        let y = self.out_like(s, self.dtype(w), &[w])?;
        let mut op = self.op("embedding", "");
        op.inputs = vec![ids, w];
        op.outputs = vec![y];
        op.saved = vec![ids];
        op.grads = self.grads_alloc(&[w]);
        self.record(op);
        Ok(y)
    }

    /// The rotary tables (`LlamaRotaryEmbedding.forward`): `inv_freq ⊗ positions`, `cat`, `cos`,
    /// `sin` in fp32 with autocast disabled, then `.to(x.dtype)`. `[1, S, D]` each, no gradient.
    pub fn rotary_tables(
        &mut self,
        inv_freq: TensorId,
        seq: u64,
        head_dim: u64,
        dtype: DType,
    ) -> Result<(TensorId, TensorId), EstimateError> {
        let emb = self.no_grad_op(
            "rotary_freqs",
            &[inv_freq],
            vec![1, seq, head_dim],
            DType::F32,
            Bytes::ZERO,
        )?;
        let mut cos = self.no_grad_op(
            "cos",
            &[emb],
            vec![1, seq, head_dim],
            DType::F32,
            Bytes::ZERO,
        )?;
        let mut sin = self.no_grad_op(
            "sin",
            &[emb],
            vec![1, seq, head_dim],
            DType::F32,
            Bytes::ZERO,
        )?;
        if dtype != DType::F32 {
            cos = self.cast(cos, dtype)?;
            sin = self.cast(sin, dtype)?;
        }
        let cos = self.view(cos, vec![1, 1, seq, head_dim])?;
        let sin = self.view(sin, vec![1, 1, seq, head_dim])?;
        Ok((cos, sin))
    }

    /// `apply_rotary_pos_emb` for one of q/k: `x * cos + rotate_half(x) * sin` with
    /// `rotate_half(x) = cat(-x2, x1)`. The products save only cos/sin; `neg` and `cat` save
    /// nothing. In backward each slice of `x` becomes a full-size `slice_backward` tensor.
    pub fn rotary(&mut self, x: TensorId, cos: TensorId, sin: TensorId) -> R {
        let s = self.shape(x);
        let d = *s.last().unwrap_or(&0);
        let dt = self.dtype(x);
        let rg = self.t(x).requires_grad;
        let a = self.mul_bc(x, cos)?;
        let mut half = s.clone();
        *half.last_mut().unwrap_or(&mut 0) = d / 2;
        let neg = self.alloc(half, dt, StorageKind::Activation, rg)?;
        self.record_simple("neg", vec![x], vec![neg], vec![], 0.0);
        let rot = self.alloc(s, dt, StorageKind::Activation, rg)?;
        let mut op = self.op("cat", "");
        op.inputs = vec![neg, x];
        op.outputs = vec![rot];
        if rg {
            op.grads = vec![(neg, GradFlow::Alias), (x, GradFlow::Alloc)];
        }
        self.record(op);
        let b = self.mul_bc(rot, sin)?;
        self.add(a, b, false)
    }
}
