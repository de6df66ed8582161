//! Ops of PyTorch's CPU kernels where they allocate or save other tensors than the CUDA kernels
//! the other op files model: the oneDNN (mkldnn) LSTM layer that `nn.LSTM` runs on the CPU, and
//! `F.cross_entropy` under the CPU's autocast policy.
//! (The CPU attention kernels live with the CUDA ones in [`Graph::sdpa_heads`], the CPU dropout
//! in [`Graph::dropout_on`].)
//!
//! What each op allocates and saves was read off the aten ops PyTorch 2.15 dispatches under
//! `FakeTensorMode` on the CPU, the way the reference harness measures its CPU records
//! (`shared/reference/harness/measure.py`, a per-op log of new and freed storages added to a copy
//! of its `tracker.py`), checked against `derivatives.yaml` and the kernels' meta functions
//! (`torch/_meta_registrations.py`).

use super::error::EstimateError;
use super::graph::{Graph, StorageKind, TensorId};
use super::units::{Bytes, DType};

/// Bytes of `numel` elements of `dt`, rounded to the allocator's 512-byte blocks as the
/// simulator rounds each storage.
fn block_bytes(numel: u64, dt: DType) -> u64 {
    Bytes(numel.saturating_mul(dt.bits()) / 8)
        .round_up(super::simulate::BLOCK)
        .0
}

impl Graph {
    /// One layer of `nn.LSTM` on the CPU: `mkldnn_rnn_layer(input, w_ih, w_hh, b_ih, b_hh, hx,
    /// cx)` over the whole sequence (`aten/src/ATen/native/mkldnn/RNN.cpp`, which `_VF.lstm`
    /// takes when `use_mkldnn` holds: CPU tensors of fp32, or of bf16 where the host CPU passes
    /// `mkldnn_bf16_device_check`, as AVX-512 machines do; fp16 only without autograd). `x` is
    /// `[L, B, E]` (the caller made it contiguous), `hx`/`cx` `[B, H]`.
    ///
    /// - Autocast (CPU) has `mkldnn_rnn_layer` on its lower-precision list: every float argument
    ///   is cast, right to left as the C++ arguments are evaluated (`cx`, `hx`, the biases, the
    ///   weights — cached casts of leaves — then the input, observed in that order).
    /// - Outputs: `output [L, B, H]`, `hy`, `cy [B, H]` and a `uint8` workspace. Under the fake
    ///   device the reference measures with, the meta function allocates the workspace empty
    ///   (`torch.empty(0)`); a real CPU run holds oneDNN's training workspace there (measured
    ///   with the harness in real CPU mode, H = E = 512: 31 232·L·B + 20 480·B + 12 288 bytes
    ///   per layer, about 15 H floats per step and row), which this model, like the reference,
    ///   leaves out.
    /// - Saved (`derivatives.yaml` `mkldnn_rnn_layer`): the seven inputs and all four results.
    /// - Backward, `mkldnn_rnn_layer_backward`: its meta function returns all seven input
    ///   gradients in **fp32** whatever the inputs' dtype, `diff_hx`/`diff_cx` too (dropped at
    ///   once when the states need no gradient). The autograd engine's `validate_outputs`
    ///   (`torch/csrc/autograd/engine.cpp`) then casts each gradient of a low-precision input to
    ///   that input's dtype, input first, each fp32 source dying as its cast is made. The
    ///   node's peak is all fp32 results together, or, after the dropped ones, the first cast
    ///   beside the remaining fp32 results; it is modelled as the (cast) input gradients plus
    ///   the difference as scratch.
    ///
    /// Returns `(output, hy, cy)`.
    #[allow(clippy::too_many_arguments)]
    pub fn lstm_mkldnn_layer(
        &mut self,
        x: TensorId,
        w_ih: TensorId,
        w_hh: TensorId,
        b_ih: TensorId,
        b_hh: TensorId,
        hx: TensorId,
        cx: TensorId,
    ) -> Result<(TensorId, TensorId, TensorId), EstimateError> {
        let (xs, ws, hs) = (self.shape(x), self.shape(w_ih), self.shape(hx));
        let bad =
            |g: &Self, what: String| EstimateError::Unsupported(format!("{}: {what}", g.name("")));
        if xs.len() != 3
            || ws.len() != 2
            || hs.len() != 2
            || ws[1] != xs[2]
            || hs[0] != xs[1]
            || ws[0] != 4 * hs[1]
            || self.shape(cx) != hs
        {
            return Err(bad(self, format!("LSTM layer expects input [L, B, E], W_ih [4H, E], hx/cx [B, H]; got {xs:?}, {ws:?}, {hs:?}")));
        }
        let (l, b, e, h) = (xs[0], xs[1], xs[2], hs[1]);
        let cx = self.lowp(cx)?;
        let hx = self.lowp(hx)?;
        let b_hh = self.lowp(b_hh)?;
        let b_ih = self.lowp(b_ih)?;
        let w_hh = self.lowp(w_hh)?;
        let w_ih = self.lowp(w_ih)?;
        let x = self.lowp(x)?;
        let ins = [x, w_ih, w_hh, b_ih, b_hh, hx, cx];
        let rg = self.requires_grad(&ins);
        let out = self.alloc(vec![l, b, h], self.dtype(x), StorageKind::Activation, rg)?;
        let hy = self.alloc(vec![b, h], self.dtype(hx), StorageKind::Activation, rg)?;
        let cy = self.alloc(vec![b, h], self.dtype(cx), StorageKind::Activation, rg)?;
        let mut op = self.op("mkldnn_rnn_layer", "");
        // Four gate GEMMs per step (input and recurrent) plus the cell's pointwise work.
        op.flops =
            2.0 * (l * b) as f64 * (4 * h) as f64 * (e + h) as f64 + 10.0 * (l * b * h) as f64;
        op.inputs = ins.to_vec();
        op.outputs = vec![out, hy, cy];
        op.saved = [ins.as_slice(), &[out, hy, cy]].concat();
        op.grads = self.grads_alloc(&ins);
        // The fp32 results of the backward kernel and what the engine makes of them.
        let f32_all: u64 = ins
            .iter()
            .map(|&t| block_bytes(self.numel(t), DType::F32))
            .sum();
        let dropped: u64 = ins
            .iter()
            .filter(|&&t| !self.t(t).requires_grad)
            .map(|&t| block_bytes(self.numel(t), DType::F32))
            .sum();
        let grads: u64 = op
            .grads
            .iter()
            .map(|&(t, _)| block_bytes(self.numel(t), self.dtype(t)))
            .sum();
        let first_cast = op
            .grads
            .iter()
            .find(|&&(t, _)| self.dtype(t) != DType::F32)
            .map(|&(t, _)| block_bytes(self.numel(t), self.dtype(t)));
        let peak = f32_all + first_cast.map_or(0, |c| c.saturating_sub(dropped));
        op.bwd_scratch = Bytes(peak.saturating_sub(grads));
        self.record(op);
        Ok((out, hy, cy))
    }

    /// `F.cross_entropy(logits, target)` on the chosen device. On CUDA, and without autocast,
    /// [`Graph::cross_entropy`]. CPU autocast has `cross_entropy_loss` itself on its fp32 list
    /// (traced under CPU bf16 autocast: `_to_copy` fp32 → `_log_softmax` fp32 →
    /// `nll_loss_forward`, where CUDA runs `_log_softmax` in bf16 and casts its output): the
    /// logits are cast first — an argument of the composite, so the copy lives until the loss is
    /// computed — and the saved log-probabilities are fp32. The cast's backward gives the
    /// logits a low-precision gradient.
    pub fn cross_entropy_on(
        &mut self,
        logits: TensorId,
        target: TensorId,
        cpu: bool,
    ) -> Result<TensorId, EstimateError> {
        if !cpu || self.precision.autocast().is_none() {
            return self.cross_entropy(logits, target);
        }
        let x = self.fp32(logits)?;
        let loss = self.cross_entropy(x, target)?;
        self.seq_hold(&[x]);
        Ok(loss)
    }
}
