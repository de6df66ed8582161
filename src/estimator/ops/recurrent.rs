//! The LSTM as PyTorch runs it: the native fused cell on CUDA, the whole-stack cuDNN RNN (with
//! autocast's weight reflattening) and oneDNN's (mkldnn) layer on the CPU.

use crate::estimator::error::EstimateError;
use crate::estimator::graph::{GradFlow, Graph, StorageKind, TensorId};
use crate::estimator::units::{Bytes, DType};

/// Bytes of `numel` elements of `dt` as the caching allocator hands them out (the simulator
/// rounds each storage the same way).
fn block_bytes(numel: u64, dt: DType) -> u64 {
    Bytes(numel.saturating_mul(dt.bits()) / 8)
        .allocator_block()
        .0
}

impl Graph {
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
            return Err(self.bad_shape(format!("LSTM gates must be [B, 4H], got {:?}", gs)));
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
        let hy = self.out_like(vec![b, hid], dt, &ins)?;
        let cy = self.out_like(vec![b, hid], dt, &ins)?;
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
            return Err(self.bad_shape(format!("LSTM input must be [B, L, E], got {:?}", s)));
        }
        let (b, l, e) = (s[0], s[1], s[2]);
        // Autocast casts the input (`cached_cast`: a plain cast of a non-leaf).
        let x = self.lowp(x)?;
        let dt = self.dtype(x);
        let pdt = self.precision.param_dtype();
        let hx = self.zeros(vec![layers, b, hidden], pdt)?;
        let cx = self.zeros(vec![layers, b, hidden], pdt)?;
        let hxc = self.lowp(hx)?;
        let cxc = self.lowp(cx)?;
        let mut ins = vec![x];
        ins.extend_from_slice(w_flat);
        let out = self.out_like(vec![l, b, hidden], dt, &ins)?;
        let hy = self.out_like(vec![layers, b, hidden], dt, &ins)?;
        let cy = self.out_like(vec![layers, b, hidden], dt, &ins)?;
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
        self.hold(&[hx, cx]);
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
        let flat = self.out_like(vec![n], dt, params)?;
        let mut op = self.op("flatten_weights", "");
        op.inputs = params.to_vec();
        op.outputs = vec![flat];
        op.grads = self.grads_alloc(params);
        self.record(op);
        Ok(vec![flat])
    }

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
        if xs.len() != 3
            || ws.len() != 2
            || hs.len() != 2
            || ws[1] != xs[2]
            || hs[0] != xs[1]
            || ws[0] != 4 * hs[1]
            || self.shape(cx) != hs
        {
            return Err(self.bad_shape(format!("LSTM layer expects input [L, B, E], W_ih [4H, E], hx/cx [B, H]; got {xs:?}, {ws:?}, {hs:?}")));
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
}
