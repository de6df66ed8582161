//! Losses: `F.cross_entropy` (CUDA and CPU autocast policies) and transformers' causal-LM loss.

use super::R;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, StorageKind, TensorId};
use crate::estimator::units::{Bytes, DType};

impl Graph {
    /// `F.cross_entropy(logits [N, C], target [N])` with mean reduction: `log_softmax` (its output
    /// saved), then `nll_loss` (a scalar and `total_weight`; saves its input, the target and
    /// `total_weight`, `derivatives.yaml` `nll_loss_forward`). `cross_entropy_loss` passes the
    /// logits' dtype to `log_softmax` explicitly, which autocast's `fp32_set_opt_dtype` policy
    /// leaves alone, so log-probabilities stay in the logits' dtype; `nll_loss` is on the fp32
    /// list and casts them (traced under bf16 autocast: `_log_softmax` bf16 → `_to_copy` fp32 →
    /// `nll_loss_forward`). Returns the loss.
    pub fn cross_entropy(&mut self, logits: TensorId, target: TensorId) -> R {
        // Inference: no labels, no loss; the caller holds the logits.
        if self.inference {
            self.keep(logits);
            return Ok(logits);
        }
        let x = logits;
        let ls = self.out_like(self.shape(x), self.dtype(x), &[x])?;
        let mut op = self.op("log_softmax", "loss");
        op.flops = 5.0 * self.numel(x) as f64;
        op.inputs = vec![x];
        op.outputs = vec![ls];
        op.saved = vec![ls];
        if self.rules.softmax_saves_input {
            op.saved.push(x);
        }
        op.grads = self.grads_alloc(&[x]);
        self.record(op);
        let lsc = self.fp32(ls)?;
        let loss = self.out_like(vec![], self.dtype(lsc), &[lsc])?;
        let tw = self.alloc(vec![], self.dtype(lsc), StorageKind::Activation, false)?;
        let mut op = self.op("nll_loss", "loss");
        op.inputs = vec![lsc, target];
        op.outputs = vec![loss, tw];
        op.saved = vec![lsc, target, tw];
        op.grads = self.grads_alloc(&[lsc]);
        self.record(op);
        self.keep(loss);
        Ok(loss)
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
        self.hold(&[x]);
        Ok(loss)
    }

    /// A loop that takes fp32 logits from the model and keeps them: torchtune's
    /// `TransformerDecoder.forward` returns `self.output(h).float()` (`modules/transformer.py`)
    /// and its recipe computes `self._loss_fn(logits.transpose(1, 2), labels)`
    /// (`CrossEntropyLoss`; the transpose is a view). Unlike transformers' loss, whose fp32 copy
    /// dies once `log_softmax` has read it, the recipe's `logits` is a local of its training
    /// loop: the fp32 logits stay alive through the backward and the optimizer step.
    pub fn held_fp32_logits_loss(&mut self, logits: TensorId, labels: TensorId) -> R {
        let s = self.shape(logits);
        let [b, t, v] = s[..] else {
            return Err(self.bad_shape(format!("logits must be [B, S, V], got {s:?}")));
        };
        let lf = self.cast(logits, DType::F32)?;
        let loss = self.scoped("loss", |g| {
            let l2 = g.view(lf, vec![b * t, v])?;
            let y = g.view(labels, vec![b * t])?;
            g.cross_entropy(l2, y)
        })?;
        self.keep(lf);
        Ok(loss)
    }

    /// `ForCausalLMLoss` (`transformers/loss/loss_utils.py`): `logits.float()` (a new fp32 copy
    /// unless already fp32), labels padded with -100 and shifted (`pad`, `[..., 1:].contiguous()`),
    /// then `cross_entropy` with mean reduction (`num_items_in_batch` is None). The logits stay
    /// alive through the loss: the model's forward returns them beside it.
    pub fn causal_lm_loss(&mut self, logits: TensorId, labels: TensorId) -> R {
        // Inference: `model(input_ids).logits`, no loss; the caller holds the logits.
        if self.inference {
            self.keep(logits);
            return Ok(logits);
        }
        self.push("loss");
        let r = (|| {
            let s = self.shape(logits);
            let (b, t, v) = match s[..] {
                [b, t, v] => (b, t, v),
                _ => return Err(self.bad_shape(format!("logits must be [B, S, V], got {s:?}"))),
            };
            let lf = self.cast(logits, DType::F32)?;
            let padded = self.no_grad_op(
                "constant_pad_nd",
                &[labels],
                vec![b, t + 1],
                DType::I64,
                Bytes::ZERO,
            )?;
            let shifted =
                self.no_grad_op("clone", &[padded], vec![b, t], DType::I64, Bytes::ZERO)?;
            let l2 = self.view(lf, vec![b * t, v])?;
            let y = self.view(shifted, vec![b * t])?;
            let loss = self.vocab_parallel_cross_entropy(l2, y)?;
            // The model's forward holds its `logits` (the low-precision ones under autocast)
            // until it returns them with the loss.
            self.hold(&[logits]);
            Ok(loss)
        })();
        self.pop();
        r
    }
}
