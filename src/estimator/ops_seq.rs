//! Ops of the sequence models: the LSTM (PyTorch's native fused cell and the cuDNN RNN) and the
//! view/copy ops the LSTM and the vision transformer's `nn.MultiheadAttention` path are built
//! from (expand, select, layout copies, stack, unbind, mixed-dtype add, zeros). The attention
//! kernel itself is [`Graph::sdpa_heads`] (`ops_text`), shared with the language models.
//!
//! What each op allocates and saves was read off the aten ops PyTorch 2.15 dispatches on a
//! (faked) sm_90 device: the reference harness (`shared/reference/harness`) with a per-op log of
//! new and freed storages added to a copy of its `tracker.py`, checked against
//! `tools/autograd/derivatives.yaml` (shipped as `torchgen/packaged/autograd/derivatives.yaml`).
//! Where the fake device hides a real-GPU behaviour (an in-place `add_` that a fake tensor runs
//! out of place because it is a tensor subclass), the real behaviour is modelled and said so.

use super::error::EstimateError;
use super::graph::{GradFlow, Graph, StorageKind, TensorId};
use super::units::{Bytes, DType};

type R = Result<TensorId, EstimateError>;

impl Graph {
    fn seq_bad(&self, what: &str) -> EstimateError {
        EstimateError::Unsupported(format!("{}: {what}", self.name("")))
    }

    /// The end of a Python reference: a module's local variable or argument keeps its tensor
    /// alive until the function returns, past the tensor's last use by an op (e.g. the query of
    /// `MultiheadAttention` until the output projection ran). Allocates and saves nothing.
    pub fn seq_hold(&mut self, ts: &[TensorId]) {
        let mut op = self.op("python_ref", "");
        op.inputs = ts.to_vec();
        self.record(op);
    }

    /// A factory tensor (`torch.zeros`) that needs no gradient: the initial LSTM states.
    pub fn seq_zeros(&mut self, shape: Vec<u64>, dtype: DType) -> R {
        let z = self.alloc(shape, dtype, StorageKind::Activation, false)?;
        let mut op = self.op("zeros", "");
        op.outputs = vec![z];
        self.record(op);
        Ok(z)
    }

    /// `expand` of a parameter over a batch (the ViT class token): a view; its backward sums the
    /// gradient back to the parameter's shape (`derivatives.yaml` `expand`: `at::sum_to`), a new
    /// tensor of the parameter's size.
    pub fn seq_expand(&mut self, x: TensorId, shape: Vec<u64>) -> R {
        let rg = self.t(x).requires_grad;
        let y = self.alias(x, shape, rg);
        self.record_simple("expand", vec![x], vec![y], vec![], 0.0);
        Ok(y)
    }

    /// `select`/`unflatten`/`transpose` chains that pick a smaller view (`x[:, 0]`, one of q/k/v
    /// out of the packed projection): shares `x`'s storage, so whoever saves the view keeps all of
    /// `x` alive. Backward is `select_backward`: a zero-filled gradient of `x`'s full size.
    pub fn seq_select(&mut self, x: TensorId, shape: Vec<u64>) -> R {
        if shape.iter().product::<u64>() > self.numel(x) {
            return Err(self.seq_bad(&format!("select {:?} out of {:?}", shape, self.shape(x))));
        }
        let rg = self.t(x).requires_grad;
        let y = self.alias(x, shape, rg);
        self.record_simple("select", vec![x], vec![y], vec![], 0.0);
        Ok(y)
    }

    /// A materialising copy (`.contiguous()`, or the `clone` that `reshape`/`matmul` make of a
    /// non-contiguous input). Saves nothing. `grad_copy`: the gradient comes back through a view
    /// chain that is not contiguous either, so backward copies it again (a new tensor of the
    /// input's size, e.g. `unflatten → transpose → squeeze` after MHA's packed projection);
    /// otherwise the gradient passes through.
    pub fn seq_copy(&mut self, x: TensorId, shape: Vec<u64>, grad_copy: bool) -> R {
        if shape.iter().product::<u64>() != self.numel(x) {
            return Err(self.seq_bad(&format!("copy {:?} -> {:?}", self.shape(x), shape)));
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

    /// `a + b` out of place with type promotion (a residual add of an autocast bf16 branch onto
    /// the fp32 stream gives fp32) and broadcasting of `b`. Saves nothing (`derivatives.yaml`
    /// `add.Tensor`). The gradient passes through to an operand of the result's dtype and shape;
    /// for an operand of another dtype or a broadcast shape the autograd engine
    /// (`torch/csrc/autograd/engine.cpp` `validate_outputs`) makes a new tensor: a cast to the
    /// operand's dtype, a `sum_to` its shape.
    pub fn seq_add(&mut self, a: TensorId, b: TensorId) -> R {
        let (da, db) = (self.dtype(a), self.dtype(b));
        let dt = if da == DType::F32 || db == DType::F32 {
            DType::F32
        } else {
            da
        };
        let s = self.shape(a);
        let y = self.seq_out(s.clone(), dt, &[a, b])?;
        let mut op = self.op("add", "");
        op.flops = self.numel(a) as f64;
        op.inputs = vec![a, b];
        op.outputs = vec![y];
        op.grads = [a, b]
            .iter()
            .filter(|&&t| self.t(t).requires_grad)
            .map(|&t| {
                let same = self.dtype(t) == dt && self.numel(t) == self.numel(y);
                (
                    t,
                    if same {
                        GradFlow::Alias
                    } else {
                        GradFlow::Alloc
                    },
                )
            })
            .collect();
        self.record(op);
        Ok(y)
    }

    fn seq_out(&mut self, shape: Vec<u64>, dtype: DType, inputs: &[TensorId]) -> R {
        let rg = self.requires_grad(inputs);
        self.alloc(shape, dtype, StorageKind::Activation, rg)
    }

    /// `torch.stack(xs)`: a new tensor; saves nothing; each input's gradient is a view of the
    /// output gradient (`derivatives.yaml` `stack`: `stack_tensors_backward` → `unbind`), so the
    /// whole stacked gradient lives until the last piece is consumed.
    pub fn seq_stack(&mut self, xs: &[TensorId]) -> R {
        let Some(&first) = xs.first() else {
            return Err(self.seq_bad("stack of nothing"));
        };
        let mut s = vec![xs.len() as u64];
        s.extend(self.shape(first));
        let y = self.seq_out(s, self.dtype(first), xs)?;
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
    pub fn seq_unbind(&mut self, x: TensorId) -> Result<Vec<TensorId>, EstimateError> {
        let s = self.shape(x);
        let Some((&n, rest)) = s.split_first() else {
            return Err(self.seq_bad("unbind of a scalar"));
        };
        let rg = self.t(x).requires_grad;
        let outs: Vec<TensorId> = (0..n).map(|_| self.alias(x, rest.to_vec(), rg)).collect();
        self.record_simple("unbind", vec![x], outs.clone(), vec![], 0.0);
        Ok(outs)
    }

    /// `mm(x, wᵀ)` of a 2-D input with an already cast (or fp32) weight view `w` `[out, in]`:
    /// `linear` without bias as the LSTM runs it. Saves each operand whose partner needs a
    /// gradient (`derivatives.yaml` `mm`).
    pub fn seq_mm(&mut self, x: TensorId, w: TensorId) -> R {
        self.linear_with(x, w, None)
    }

    // ------------------------------------------------------------------ LSTM (native cell)

    /// One step of PyTorch's native LSTM on CUDA (`aten/src/ATen/native/RNN.cpp` `LSTMCell` with
    /// the fused kernel): `igates = x·W_ihᵀ` and `hgates = h·W_hhᵀ` are plain `mm`s (given here),
    /// then `_thnn_fused_lstm_cell(igates, hgates, cx, b_ih, b_hh)` returns `hy`, `cy` and a
    /// `[B, 4H]` workspace. `derivatives.yaml` (`_thnn_fused_lstm_cell`) keeps both gate inputs,
    /// the biases, `cx`, `cy` and the workspace for backward, whose
    /// `_thnn_fused_lstm_cell_backward_impl` returns one `[B, 4H]` gate gradient used for both
    /// `igates` and `hgates`, `grad_cx [B, H]` (always computed) and the bias gradient.
    ///
    /// The shared gate gradient is modelled by summing the gates into one view first (no memory):
    /// its gradient flows unchanged to both `mm`s, exactly one `[B, 4H]` tensor as in PyTorch.
    /// Returns `(hy, cy)`.
    pub fn lstm_fused_cell(
        &mut self,
        ig: TensorId,
        hg: TensorId,
        cx: TensorId,
        b_ih: TensorId,
        b_hh: TensorId,
    ) -> Result<(TensorId, TensorId), EstimateError> {
        let gs = self.shape(ig);
        if gs.len() != 2 || self.shape(hg) != gs || !gs[1].is_multiple_of(4) {
            return Err(self.seq_bad(&format!("LSTM gates must be [B, 4H], got {:?}", gs)));
        }
        let (b, hid) = (gs[0], gs[1] / 4);
        let cxc = self.lowp(cx)?;
        let bic = self.lowp(b_ih)?;
        let bhc = self.lowp(b_hh)?;
        let dt = self.dtype(ig);
        // The view that carries the shared gate gradient.
        let rg = self.requires_grad(&[ig, hg]);
        let gates = self.alias(ig, gs.clone(), rg);
        let mut op = self.op("lstm_gates", "");
        op.inputs = vec![ig, hg];
        op.outputs = vec![gates];
        op.grads = [ig, hg]
            .iter()
            .filter(|&&t| self.t(t).requires_grad)
            .map(|&t| (t, GradFlow::Alias))
            .collect();
        self.record(op);

        let ins = [gates, cxc, bic, bhc];
        let hy = self.seq_out(vec![b, hid], dt, &ins)?;
        let cy = self.seq_out(vec![b, hid], dt, &ins)?;
        let ws = self.alloc(vec![b, 4 * hid], dt, StorageKind::Activation, false)?;
        let mut op = self.op("lstm_cell", "");
        op.flops = 10.0 * (b * hid) as f64;
        op.inputs = ins.to_vec();
        op.outputs = vec![hy, cy, ws];
        op.saved = vec![ig, hg, cxc, cy, ws, bic, bhc];
        op.grads = self.grads_alloc(&ins);
        if !self.t(cxc).requires_grad {
            // grad_cx is computed even when the initial cell state needs none; it dies at once.
            op.bwd_scratch = self.bytes(cxc);
        }
        self.record(op);
        Ok((hy, cy))
    }

    // ------------------------------------------------------------------ LSTM (cuDNN)

    /// The whole multi-layer LSTM as one `_cudnn_rnn` call (`batch_first` input `[B, L, E]`,
    /// zero initial states `hx`/`cx` `[layers, B, H]`, flat weights `w_flat`), as
    /// `aten/src/ATen/native/cudnn/RNN.cpp` (`_cudnn_rnn`, `_cudnn_rnn_backward_input`,
    /// `_cudnn_rnn_backward_weight`) allocates:
    /// - forward: `output [L, B, H]` (returned transposed), `hy`, `cy` `[layers, B, H]`, the byte
    ///   `reserve` kept for backward, and two temporaries freed at the end: `x = input.contiguous()`
    ///   (the batch-first input is a transposed view, so this copies it) and the cuDNN workspace.
    /// - saved (`derivatives.yaml` `_cudnn_rnn`): input, weights, hx, cx, output, reserve and
    ///   the weight buffer.
    /// - backward: `dx` (the input gradient), `dhx`/`dcx` (computed unconditionally, dropped since
    ///   the zero states need none), `dw = zeros(weight_buf)` (one flat buffer whose views become
    ///   the parameter gradients), temporaries `dy = grad_output.contiguous()` (a copy: the output
    ///   gradient arrives transposed), zero `grad_hy`/`grad_cy` for the unused final states, a
    ///   fresh `x` copy and the workspace.
    ///
    /// The reserve and workspace sizes come from `cudnnGetRNNTempSpaceSizes` and are opaque to
    /// PyTorch; they cannot be measured on the reference's fake device (cuDNN RNN does not run
    /// there, hence its `cudnn: false` cases). Modelled: the reserve holds per layer and step the
    /// four gate activations, the cell state and the hidden output (`6H` per row, the state the
    /// backward pass needs); the workspace holds one layer's input projection for all steps
    /// (`4H` per row and step: cuDNN runs the input GEMM of all steps as one GEMM, Appleyard et
    /// al., "Optimizing Recurrent Neural Networks in cuDNN 5", NVIDIA 2016).
    /// Returns the output as a `[B, L, H]` view and the final states `(hy, cy)`.
    pub fn lstm_cudnn(
        &mut self,
        x: TensorId,
        w_flat: &[TensorId],
        layers: u64,
        hidden: u64,
    ) -> Result<(TensorId, (TensorId, TensorId)), EstimateError> {
        let s = self.shape(x);
        if s.len() != 3 {
            return Err(self.seq_bad(&format!("LSTM input must be [B, L, E], got {:?}", s)));
        }
        let (b, l, e) = (s[0], s[1], s[2]);
        // Autocast casts the input (`cached_cast`: a plain cast of a non-leaf).
        let x = self.lowp(x)?;
        let dt = self.dtype(x);
        let pdt = self.precision.param_dtype();
        let hx = self.seq_zeros(vec![layers, b, hidden], pdt)?;
        let cx = self.seq_zeros(vec![layers, b, hidden], pdt)?;
        let hxc = self.lowp(hx)?;
        let cxc = self.lowp(cx)?;
        let mut ins = vec![x];
        ins.extend_from_slice(w_flat);
        let out = self.seq_out(vec![l, b, hidden], dt, &ins)?;
        let hy = self.seq_out(vec![layers, b, hidden], dt, &ins)?;
        let cy = self.seq_out(vec![layers, b, hidden], dt, &ins)?;
        let reserve = self.alloc(
            vec![layers, l, b, 6 * hidden],
            dt,
            StorageKind::Activation,
            false,
        )?;
        let elt = |n: u64| Bytes(n * dt.bits() / 8);
        let workspace = elt(l * b * 4 * hidden);
        let mut op = self.op("cudnn_rnn", "");
        op.flops = 2.0
            * (l * b) as f64
            * (4 * hidden) as f64
            * ((e + hidden) + (layers - 1) * 2 * hidden) as f64;
        op.inputs = [ins.as_slice(), &[hxc, cxc]].concat();
        op.outputs = vec![out, hy, cy, reserve];
        op.saved = [ins.as_slice(), &[hxc, cxc, out, reserve]].concat();
        op.grads = self.grads_alloc(&ins);
        op.fwd_scratch = elt(l * b * e) + workspace;
        // `_cudnn_rnn_backward_input` (with `dy`) runs before `_cudnn_rnn_backward_weight` (with
        // `dw`, allocated here as the weights' gradients), each with its own `x` copy and
        // workspace: the node's peak holds the larger of `dy` and `dw`.
        let dw: u64 = w_flat.iter().map(|&w| self.bytes(w).0).sum();
        op.bwd_scratch = elt(2 * layers * b * hidden) // dhx, dcx
            + elt(2 * layers * b * hidden) // zero grad_hy, grad_cy
            + Bytes(elt(l * b * hidden).0.saturating_sub(dw)) // dy
            + elt(l * b * e) // x
            + workspace;
        self.record(op);
        let y = self.view(out, vec![b, l, hidden])?;
        // The initial states are referenced until `nn.LSTM.forward` returns.
        self.seq_hold(&[hx, cx]);
        Ok((y, (hy, cy)))
    }

    /// Autocast's reflattening for cuDNN RNNs (`aten/src/ATen/native/cudnn/AutocastRNN.cpp`
    /// `_cudnn_rnn_cast_reflatten`): every forward copies the fp32 weights into one new
    /// low-precision flat buffer (`copy_weights_to_flat_buf_views`, autograd-visible), which
    /// `_cudnn_rnn` saves. Backward casts each parameter's slice of the flat gradient back to
    /// the parameter's dtype (a new tensor per parameter). Without autocast the parameters are
    /// already views of the module's flat buffer (`flatten_parameters`): nothing is copied.
    pub fn lstm_cudnn_weights(
        &mut self,
        params: &[TensorId],
    ) -> Result<Vec<TensorId>, EstimateError> {
        let Some(dt) = self.precision.autocast() else {
            return Ok(params.to_vec());
        };
        let n: u64 = params.iter().map(|&p| self.numel(p)).sum();
        let flat = self.seq_out(vec![n], dt, params)?;
        let mut op = self.op("flatten_weights", "");
        op.inputs = params.to_vec();
        op.outputs = vec![flat];
        op.grads = self.grads_alloc(params);
        self.record(op);
        Ok(vec![flat])
    }
}
