//! Dense layers and matrix products: `nn.Linear`, GPT-2's `Conv1D`, `mm`, `matmul` and the
//! `bmm` inside composite ops.

use super::R;
use crate::estimator::device::Reduction;
use crate::estimator::graph::{Graph, StorageKind, TensorId};

impl Graph {
    /// `nn.Linear` (`addmm`/`mm` on the flattened input, autocast low-precision list): saves the
    /// input and the (cast) weight.
    pub fn linear(&mut self, leaf: &str, x: TensorId, fin: u64, fout: u64, bias: bool) -> R {
        self.push(leaf);
        let r = (|| {
            let w = self.param(vec![fout, fin])?;
            let b = if bias {
                Some(self.param(vec![fout])?)
            } else {
                None
            };
            self.linear_with(x, w, b)
        })();
        self.pop();
        r
    }

    /// A linear map with existing weights (`[out, in]`, e.g. a tied embedding).
    pub fn linear_with(&mut self, x: TensorId, w: TensorId, b: Option<TensorId>) -> R {
        let mut s = self.shape(x);
        let ws = self.shape(w);
        if s.last() != Some(&ws[1]) {
            return Err(self.bad_shape(format!("linear expects last dim {}, got {:?}", ws[1], s)));
        }
        let xc = self.lowp(x)?;
        let wc = self.lowp(w)?;
        let mut ins = vec![xc, wc];
        if let Some(b) = b {
            ins.push(self.lowp(b)?);
        }
        let rows: u64 = s[..s.len() - 1].iter().product();
        *s.last_mut().unwrap() = ws[0];
        let y = self.out_like(s, self.dtype(xc), &ins)?;
        let mut op = self.op("linear", "");
        op.flops = 2.0 * rows as f64 * (ws[0] * ws[1]) as f64;
        op.inputs = ins.clone();
        op.outputs = vec![y];
        op.saved = [xc, wc].into_iter().filter(|_| true).collect();
        // mm saves each operand only if the other one needs a gradient.
        if !self.t(wc).requires_grad {
            op.saved.retain(|&t| t != xc);
        }
        if !self.t(xc).requires_grad {
            op.saved.retain(|&t| t != wc);
        }
        op.grads = self.grads_alloc(&ins);
        if let Some(&bc) = ins.get(2) {
            op.bwd_reductions = self.bias_grad_sum(bc, rows, ws[0], y);
        }
        self.record(op);
        Ok(y)
    }

    /// The bias gradient of `y = x @ w.T + b` with `rows` rows: the engine sums the incoming
    /// `[rows, out]` gradient to the bias's shape (`validate_outputs`' `sum_to`, an
    /// `aten.sum.dim_IntList` over the leading dims), when the bias needs a gradient.
    fn bias_grad_sum(&self, b: TensorId, rows: u64, out: u64, y: TensorId) -> Vec<Reduction> {
        if !self.t(b).requires_grad {
            return Vec::new();
        }
        vec![Reduction {
            outputs: out,
            inputs: rows,
            innermost: false,
            dtype: self.dtype(y),
        }]
    }

    /// GPT-2's `Conv1D(nf, nx)`: `torch.addmm(bias, x.view(-1, nx), weight)` with the weight stored
    /// `[nx, nf]` (`transformers/pytorch_utils.py`). Saves the (cast) input and weight like
    /// `nn.Linear`; the bias is not saved.
    pub fn conv1d(&mut self, leaf: &str, x: TensorId, nx: u64, nf: u64) -> R {
        self.push(leaf);
        let r = (|| {
            let w = self.param(vec![nx, nf])?;
            let b = self.param(vec![nf])?;
            let mut s = self.shape(x);
            if s.last() != Some(&nx) {
                return Err(self.bad_shape(format!("Conv1D expects last dim {nx}, got {s:?}")));
            }
            let xc = self.lowp(x)?;
            let wc = self.lowp(w)?;
            let bc = self.lowp(b)?;
            let rows: u64 = s[..s.len() - 1].iter().product();
            *s.last_mut().unwrap_or(&mut 0) = nf;
            let ins = vec![xc, wc, bc];
            let rg = self.requires_grad(&ins);
            let y = self.alloc(s, self.dtype(xc), StorageKind::Activation, rg)?;
            self.record_simple(
                "addmm",
                ins.clone(),
                vec![y],
                vec![xc, wc],
                2.0 * rows as f64 * (nx * nf) as f64,
            );
            let sums = self.bias_grad_sum(bc, rows, nf, y);
            if let Some(op) = self.ops.last_mut().filter(|o| !o.grads.is_empty()) {
                op.bwd_reductions = sums;
            }
            Ok(y)
        })();
        self.pop();
        r
    }

    /// Batched matrix product `a @ b` (`[.., m, k] @ [.., k, n]`, autocast low-precision list):
    /// saves each operand whose partner needs a gradient, as `mm`/`bmm` do (their formulas in
    /// `derivatives.yaml` are separate per input, so the generated autograd node keeps `self` only
    /// when `mat2` needs a gradient and `mat2` only when `self` does): a frozen expert's weight
    /// keeps its input out of the saved tensors.
    pub fn matmul(&mut self, a: TensorId, b: TensorId) -> R {
        let sa = self.shape(a);
        let sb = self.shape(b);
        let (m, k, n) = (sa[sa.len() - 2], sa[sa.len() - 1], sb[sb.len() - 1]);
        if sb[sb.len() - 2] != k {
            return Err(self.bad_shape(format!("matmul {:?} @ {:?}", sa, sb)));
        }
        let ac = self.lowp(a)?;
        let bc = self.lowp(b)?;
        let mut s = sa.clone();
        *s.last_mut().unwrap() = n;
        let batch: u64 = sa[..sa.len() - 2].iter().product();
        let y = self.out_like(s, self.dtype(ac), &[ac, bc])?;
        let mut op = self.op("matmul", "");
        // In f64: the product of four dimensions can exceed 64 bits even when every tensor fits.
        op.flops = 2.0 * batch as f64 * (m * k) as f64 * n as f64;
        op.inputs = vec![ac, bc];
        op.outputs = vec![y];
        op.saved = [(ac, bc), (bc, ac)]
            .into_iter()
            .filter(|&(_, partner)| self.t(partner).requires_grad)
            .map(|(t, _)| t)
            .collect();
        op.grads = self.grads_alloc(&[ac, bc]);
        self.record(op);
        Ok(y)
    }

    /// `torch._grouped_mm` as transformers' `_grouped_linear` calls it (`integrations/moe.py`):
    /// the rows of `x` (`[S, in]`, sorted by group) times their group's slice of the 3-D weight,
    /// into a new `[S, out]` tensor of `x`'s dtype. The weight is `[G, out, in]`, passed as
    /// `w.transpose(-2, -1)`, or with `in_out` stored `[G, in, out]` and passed as it is (the
    /// experts' `is_transposed`, gpt-oss). Saves the offsets when given and each operand whose
    /// partner needs a gradient (`GroupedMmBackward0` holds `self_`, `mat2_` and `offs_`, torch
    /// 2.15 `autograd/generated/Functions.h`; measured with frozen experts in
    /// `moe-lora-steps.jsonl`); its backward allocates one gradient of the whole 3-D
    /// weight, then the rows' gradient.
    pub fn grouped_mm(
        &mut self,
        x: TensorId,
        w: TensorId,
        offs: Option<TensorId>,
        in_out: bool,
    ) -> R {
        let (sx, ws) = (self.shape(x), self.shape(w));
        let (k, n) = if in_out {
            (ws.get(1), ws.get(2))
        } else {
            (ws.get(2), ws.get(1))
        };
        if sx.len() != 2 || ws.len() != 3 || k != Some(&sx[1]) {
            return Err(self.bad_shape(format!("grouped_mm {sx:?} @ {ws:?} (in_out {in_out})")));
        }
        let out = *n.unwrap_or(&0);
        let rg = self.requires_grad(&[x, w]);
        let y = self.alloc(vec![sx[0], out], self.dtype(x), StorageKind::Activation, rg)?;
        let mut inputs = vec![x, w];
        inputs.extend(offs);
        let mut op = self.op("grouped_mm", "");
        op.flops = 2.0 * sx[0] as f64 * (sx[1] * out) as f64;
        op.grads = self.grads_alloc(&[w, x]);
        op.inputs = inputs.clone();
        op.outputs = vec![y];
        // As for `mm`: the rows only when the weight needs a gradient (frozen experts under
        // LoRA keep none), the weight only when the rows do.
        let keep = [self.t(w).requires_grad, self.t(x).requires_grad];
        op.saved = inputs
            .into_iter()
            .enumerate()
            .filter(|&(i, _)| keep.get(i).copied().unwrap_or(true))
            .map(|(_, t)| t)
            .collect();
        self.record(op);
        Ok(y)
    }

    /// A batched matrix product outside autocast's reach (inside a composite op): saves both
    /// operands.
    pub(super) fn bmm_raw(&mut self, a: TensorId, b: TensorId) -> R {
        let (sa, sb) = (self.shape(a), self.shape(b));
        let (m, k, n) = (sa[sa.len() - 2], sa[sa.len() - 1], sb[sb.len() - 1]);
        let mut s = sa.clone();
        *s.last_mut().unwrap_or(&mut 0) = n;
        let batch: u64 = sa[..sa.len() - 2].iter().product();
        let rg = self.requires_grad(&[a, b]);
        let y = self.alloc(
            s,
            self.dtype(a).promote(self.dtype(b)),
            StorageKind::Activation,
            rg,
        )?;
        self.record_simple(
            "bmm",
            vec![a, b],
            vec![y],
            vec![a, b],
            2.0 * batch as f64 * (m * k) as f64 * n as f64,
        );
        Ok(y)
    }

    /// `mm(x, wᵀ)` of a 2-D input with an already cast (or fp32) weight view `w` `[out, in]`:
    /// `linear` without bias as the LSTM runs it. Saves each operand whose partner needs a
    /// gradient (`derivatives.yaml` `mm`).
    pub fn mm(&mut self, x: TensorId, w: TensorId) -> R {
        self.linear_with(x, w, None)
    }
}
