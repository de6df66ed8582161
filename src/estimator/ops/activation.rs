//! Activations: the elementwise nonlinearities (in place or not), GPT-2's Python `gelu_new`,
//! and softmax.

use super::{Pw, R};
use crate::estimator::graph::{GradFlow, Graph, StorageKind, TensorId};
use crate::estimator::units::DType;

/// Elementwise activations: what each saves for its backward (`derivatives.yaml`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// `threshold_backward(grad, result)`: saves its output.
    Relu,
    /// `hardtanh_backward(grad, self)`: ReLU6 saves its input (in place: a clone of it).
    Relu6,
    /// Saves its input.
    Gelu,
    /// Saves its input.
    Silu,
    /// Saves its input.
    Hardswish,
    /// Saves its input.
    Hardsigmoid,
    /// Saves its output.
    Sigmoid,
    /// Saves its output.
    Tanh,
}

impl Act {
    fn saves_output(self) -> bool {
        matches!(self, Act::Relu | Act::Sigmoid | Act::Tanh)
    }
    fn kind(self) -> &'static str {
        match self {
            Act::Relu => "relu",
            Act::Relu6 => "relu6",
            Act::Gelu => "gelu",
            Act::Silu => "silu",
            Act::Hardswish => "hardswish",
            Act::Hardsigmoid => "hardsigmoid",
            Act::Sigmoid => "sigmoid",
            Act::Tanh => "tanh",
        }
    }
}

impl Graph {
    /// An activation, in place (`inplace=True` modules) or not.
    pub fn act(&mut self, x: TensorId, a: Act, inplace: bool) -> R {
        if inplace && self.clones_in_place(a) && self.t(x).requires_grad {
            return self.act_inplace(x, a);
        }
        let s = self.shape(x);
        let rg = self.t(x).requires_grad;
        let y = if inplace {
            self.alias(x, s, rg)
        } else {
            self.out_like(s, self.dtype(x), &[x])?
        };
        self.record_simple(
            a.kind(),
            vec![x],
            vec![y],
            vec![if a.saves_output() || inplace { y } else { x }],
            self.numel(x) as f64,
        );
        Ok(y)
    }

    /// Whether `a` in place first clones its input: its backward reads the input, which the
    /// op overwrites.
    fn clones_in_place(&self, a: Act) -> bool {
        !(a.saves_output() || a == Act::Relu6 && self.rules.hardtanh_saves_result)
    }

    /// An activation module with `inplace=True` (`Conv2dNormActivation`'s default).
    ///
    /// ReLU, sigmoid and tanh differentiate through their result (`threshold_backward(grad,
    /// result, 0)`, `sigmoid_backward(grad, result)` in `derivatives.yaml`), so the in-place op
    /// allocates nothing. ReLU6 (`hardtanh_`, which has no in-place entry and so uses
    /// `hardtanh_backward(grad, self, ..)`), Hardswish, SiLU, GELU and Hardsigmoid differentiate
    /// through their input: the autograd kernel of an in-place op whose formula reads the
    /// original `self` first saves `self.clone()` (seen as `aten::clone` before `aten::hardtanh_`
    /// / `aten::hardswish_` in the trace), then overwrites the input's storage. Before PyTorch
    /// 1.10 `hardtanh_` had its own entry reading `result`
    /// ([`super::super::releases::TorchVersion::HARDTANH_INPLACE_CLONES`]): no clone.
    pub fn act_inplace(&mut self, x: TensorId, a: Act) -> R {
        if !self.clones_in_place(a) || !self.t(x).requires_grad {
            return self.act(x, a, true);
        }
        let s = self.shape(x);
        // The clone is a plain tensor held by the node, outside the autograd graph.
        let orig = self.alloc(s.clone(), self.dtype(x), StorageKind::Activation, false)?;
        let mut op = self.op("clone", "");
        op.inputs = vec![x];
        op.outputs = vec![orig];
        self.record(op);
        let y = self.alias(x, s, true);
        let kind = match a {
            Act::Relu6 => "hardtanh_",
            Act::Hardswish => "hardswish_",
            Act::Silu => "silu_",
            Act::Gelu => "gelu_",
            _ => "hardsigmoid_",
        };
        let mut op = self.op(kind, "");
        op.flops = self.numel(x) as f64;
        op.inputs = vec![x];
        op.outputs = vec![y];
        op.saved = vec![orig];
        op.grads = vec![(x, GradFlow::Alloc)];
        self.record(op);
        Ok(y)
    }

    /// `NewGELUActivation` (GPT-2's `gelu_new`), written in Python as
    /// `0.5 * x * (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`: eight aten ops. Saved: x (by `pow`),
    /// `0.5·x` and `1 + tanh(·)` (by the final product) and the tanh output.
    pub fn gelu_new(&mut self, x: TensorId, cpu: bool) -> R {
        let dt = self.dtype(x);
        let scalar = Pw {
            flops: 1.0,
            ..Pw::default()
        };
        let half = self.pointwise("mul", x, dt, scalar)?;
        // `pow` is on CUDA autocast's fp32 list (not on the CPU's): under autocast x is cast to
        // fp32 and everything after it promotes to fp32.
        let xf = if cpu { x } else { self.fp32(x)? };
        let cube = self.pointwise(
            "pow",
            xf,
            self.dtype(xf),
            Pw {
                save_input: true,
                bwd_temps: 2,
                flops: 2.0,
                ..Pw::default()
            },
        )?;
        let c = self.pointwise("mul", cube, self.dtype(cube), scalar)?;
        let inner = self.add(x, c, false)?;
        let idt = self.dtype(inner);
        let arg = self.pointwise("mul", inner, idt, scalar)?;
        let t = self.pointwise(
            "tanh",
            arg,
            idt,
            Pw {
                save_output: true,
                flops: 4.0,
                ..Pw::default()
            },
        )?;
        let one_t = self.pointwise(
            "add",
            t,
            idt,
            Pw {
                alias_grad: true,
                flops: 1.0,
                ..Pw::default()
            },
        )?;
        self.mul_bc(half, one_t)
    }

    /// `softmax` over the last dimension (autocast fp32 list): saves its output.
    pub fn softmax(&mut self, x: TensorId) -> R {
        let xc = self.fp32(x)?;
        let y = self.out_like(self.shape(xc), self.dtype(xc), &[xc])?;
        // Before PyTorch 1.11 the input was saved too (`StackRules::softmax_saves_input`).
        let saved = if self.rules.softmax_saves_input {
            vec![y, xc]
        } else {
            vec![y]
        };
        self.record_unary("softmax", xc, y, saved, 5.0 * self.numel(x) as f64);
        Ok(y)
    }

    /// Softmax over the last dimension producing `out_dtype`: saves its output. Autocast's
    /// `fp32_set_opt_dtype` policy and an explicit `dtype=float32` both call
    /// `softmax(x, dim, dtype)`, which (`aten/src/ATen/native/SoftMax.cpp`, torch 2.15) fuses the
    /// cast only for a CUDA fp16 input (`_softmax(x, dim, half_to_float=true)`); any other input
    /// of another dtype is first converted (`input_.toType(dtype)`), a copy alive while
    /// `_softmax` runs and freed when it returns (bf16 scores in the measured serving steps).
    pub fn softmax_to(&mut self, x: TensorId, out_dtype: DType) -> R {
        let rg = self.t(x).requires_grad;
        let y = self.alloc(self.shape(x), out_dtype, StorageKind::Activation, rg)?;
        let mut op = self.op("softmax", "");
        op.flops = 5.0 * self.numel(x) as f64;
        op.inputs = vec![x];
        op.outputs = vec![y];
        op.saved = vec![y];
        if self.rules.softmax_saves_input {
            op.saved.push(x);
        }
        let xdt = self.dtype(x);
        if xdt != out_dtype && !(xdt == DType::F16 && out_dtype == DType::F32) {
            op.fwd_scratch = self.bytes(y);
        }
        op.grads = self.grads_alloc(&[x]);
        if rg && self.dtype(x) != out_dtype {
            op.bwd_scratch = self.bytes(y);
        }
        self.record(op);
        Ok(y)
    }
}
