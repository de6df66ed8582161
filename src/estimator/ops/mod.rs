//! The op constructors: one per op kind, each appending a plain [`OpRecord`] of what the op
//! allocates, what autograd saves for backward (dtype-exact, as PyTorch's
//! `tools/autograd/derivatives.yaml` and the CUDA kernels' outputs say), how its gradients flow
//! back and its FLOPs, and returning the output tensor. The files are named by what the ops are.
//!
//! Autocast follows `aten/src/ATen/autocast_mode.cpp` (CUDA): convolutions, linear layers,
//! matmuls and SDPA run in the low-precision dtype ("lower_precision_fp" list); layer norm,
//! softmax, log-softmax and the losses run in fp32 ("fp32" list); everything else runs in its
//! input's dtype, binary ops in the promoted dtype ([`DType::promote`]). Weight casts are
//! cached for the whole autocast region.
//!
//! What each op allocates and saves was read off the aten ops PyTorch 2.15 dispatches on a
//! (faked) sm_90 device, and on the CPU under `FakeTensorMode`: the reference harness
//! (`shared/reference/harness`) with a per-op log of new and freed storages added to a copy of
//! its `tracker.py`, checked against `derivatives.yaml` (shipped as
//! `torchgen/packaged/autograd/derivatives.yaml`) and the kernels' meta functions
//! (`torch/_meta_registrations.py`); the fine-tuning ops with peft 0.21 and bitsandbytes 0.50
//! installed. Where the fake device hides a real-GPU behaviour, the real behaviour is modelled
//! and said so where it is.
//!
//! [`OpRecord`]: crate::estimator::graph::OpRecord
//! [`DType::promote`]: crate::estimator::units::DType::promote

mod activation;
mod attention;
mod autocast;
mod conv;
mod dropout;
mod elementwise;
mod embedding;
mod kv_cache;
mod linear;
mod lora;
mod loss;
mod memory;
mod norm;
mod pool;
mod quantized;
mod recurrent;
mod squeeze_excitation;

pub use activation::Act;
pub use attention::{EagerOpts, MatmulCopies, QueryOrder, SdpaKernel};
pub use conv::Conv;
pub use elementwise::Pw;
pub use quantized::GEMM_4BIT_CUSTOM_ROWS;

use super::error::EstimateError;
use super::graph::{Graph, StorageKind, TensorId};
use super::units::{Bytes, DType};

type R = Result<TensorId, EstimateError>;

impl Graph {
    /// The error for operands an op cannot take, naming the module being built so the user
    /// knows which layer of the configuration to change.
    fn bad_shape(&self, what: impl std::fmt::Display) -> EstimateError {
        EstimateError::Unsupported(format!("{}: {what}", self.name("")))
    }

    /// A new activation tensor that requires grad when any of `inputs` does (autograd records
    /// a node for the op then).
    fn out_like(&mut self, shape: Vec<u64>, dtype: DType, inputs: &[TensorId]) -> R {
        let rg = self.requires_grad(inputs);
        self.alloc(shape, dtype, StorageKind::Activation, rg)
    }

    /// Records an op that reads `inputs`, creates `outputs`, saves `saved` and whose backward
    /// allocates a gradient for each input that requires one: the shape most op kinds share.
    pub fn record_simple(
        &mut self,
        kind: &'static str,
        inputs: Vec<TensorId>,
        outputs: Vec<TensorId>,
        saved: Vec<TensorId>,
        flops: f64,
    ) {
        let mut op = self.op(kind, "");
        op.flops = flops;
        op.grads = self.grads_alloc(&inputs);
        op.inputs = inputs;
        op.outputs = outputs;
        op.saved = saved;
        self.record(op);
    }

    /// Records a one-input op producing `y` that saves `saved` and allocates its input's gradient
    /// (the common shape of pooling, normalisation-free elementwise and reduction ops).
    pub fn record_unary(
        &mut self,
        kind: &'static str,
        x: TensorId,
        y: TensorId,
        saved: Vec<TensorId>,
        flops: f64,
    ) {
        self.record_simple(kind, vec![x], vec![y], saved, flops);
    }

    /// Extra scratch inside the op just recorded (forward and backward).
    pub fn add_scratch(&mut self, fwd: Bytes, bwd: Bytes) {
        if let Some(op) = self.ops.last_mut() {
            op.fwd_scratch += fwd;
            op.bwd_scratch += bwd;
        }
    }
}
