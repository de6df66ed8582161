//! Tensor parallelism as a builder hook: Megatron-LM's sharding of attention and MLP
//! (Shoeybi et al. 2019, "Megatron-LM", §3, Fig. 3) and sequence parallelism (Korthikanti et al.
//! 2022, "Reducing Activation Recomputation in Large Transformer Models", §4.2.2, Fig. 5).
//!
//! A builder opts in by calling [`Graph::set_tensor_parallel`] once with its [`BuildCtx`], then
//! builds each transformer layer with the constructors below instead of the plain ones. Every
//! constructor is exactly the plain op (`linear`, `embedding`, `cross_entropy`) when the degree is 1,
//! so switching a builder over never moves a single-GPU estimate. With degree `t`:
//!
//! * [`Graph::tp_attention_heads`] checks that `t` divides the heads (and the key/value heads) and
//!   returns the heads of one rank; it also tells the estimator that the graph is sharded.
//! * [`Graph::column_parallel_linear`] (QKV, MLP up/gate, LM head): weight `[out/t, in]`. Without
//!   sequence parallelism its input is replicated and the backward all-reduces the input gradient
//!   (Megatron's `f` operator); with it the sequence-sharded input is all-gathered in forward,
//!   only the shard is saved (re-gathered in backward) and the input gradient is reduce-scattered
//!   (`LinearWithGradAccumulationAndAsyncCommunication` in `megatron/core/tensor_parallel/layers.py`).
//! * [`Graph::row_parallel_linear`] (attention output, MLP down): weight `[out, in/t]`, its partial
//!   outputs all-reduced in forward (Megatron's `g`), or reduce-scattered to a sequence shard with
//!   sequence parallelism (the backward all-gathers the gradient); the bias is added after the
//!   reduction, replicated.
//! * [`Graph::vocab_parallel_embedding`] and [`Graph::vocab_parallel_cross_entropy`]: the
//!   vocabulary split over ranks (`VocabParallelEmbedding`, `_VocabParallelCrossEntropy`).
//! * [`Graph::tp_seq`]: the sequence length a rank holds in the non-tensor-parallel regions
//!   (norms, dropout, residual adds): `s/t` with sequence parallelism, `s` without.
//!
//! The collectives are recorded in [`TpState::comm`] with the op they belong to, so the
//! communication volume of a step comes from the same tape as its memory.

use crate::estimator::config::BuildCtx;
use crate::estimator::error::EstimateError;
pub use crate::estimator::graph::{Collective, CommGroup, CommRecord, TpState};
use crate::estimator::graph::{GradFlow, Graph, StorageKind, TensorId};
use crate::estimator::units::DType;

type R = Result<TensorId, EstimateError>;

fn divisors(n: u64) -> String {
    (1..=n)
        .filter(|d| n.is_multiple_of(*d))
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl Graph {
    /// Opts this graph into tensor parallelism as `ctx` asks (degree `ctx.tp`, sequence parallelism).
    pub fn set_tensor_parallel(&mut self, ctx: &BuildCtx) {
        self.tp.size = ctx.tp.max(1);
        self.tp.sequence_parallel = ctx.sequence_parallel && ctx.tp > 1;
    }

    pub fn tp_size(&self) -> u64 {
        self.tp.size.max(1)
    }

    /// Whether sequence parallelism shards the non-tensor-parallel regions.
    pub fn sp(&self) -> bool {
        self.tp.sequence_parallel && self.tp_size() > 1
    }

    /// Records a tensor-parallel collective of `bytes` per rank, belonging to the last op.
    pub(crate) fn tp_comm(&mut self, backward: bool, collective: Collective, bytes: u64) {
        let op = self.ops.len().saturating_sub(1);
        self.tp.comm.push(CommRecord {
            group: CommGroup::Tp,
            op,
            backward,
            collective,
            bytes,
        });
    }

    /// Checks that the degree divides the attention heads and the key/value heads (grouped-query
    /// attention replicates a key/value head when the degree exceeds their number, as Megatron's
    /// `num_query_groups` does); returns one rank's `(heads, kv_heads)`.
    pub fn tp_attention_heads(
        &mut self,
        heads: u64,
        kv_heads: u64,
    ) -> Result<(u64, u64), EstimateError> {
        let t = self.tp_size();
        self.tp.heads = Some(heads);
        if !heads.is_multiple_of(t) {
            return Err(EstimateError::BadLayout(format!(
                "tensor parallelism tp = {t} does not divide the {heads} attention heads: use tp among {}",
                divisors(heads)
            )));
        }
        if !kv_heads.is_multiple_of(t) && !t.is_multiple_of(kv_heads) {
            return Err(EstimateError::BadLayout(format!(
                "tensor parallelism tp = {t} neither divides nor is a multiple of the {kv_heads} key/value heads: use tp among {}",
                divisors(kv_heads)
            )));
        }
        Ok((heads / t, (kv_heads / t).max(1)))
    }

    /// One rank's share of a dimension the scheme splits (MLP width, vocabulary).
    pub fn tp_local(&self, dim: u64, what: &str) -> Result<u64, EstimateError> {
        let t = self.tp_size();
        if !dim.is_multiple_of(t) {
            return Err(EstimateError::BadLayout(format!(
                "tensor parallelism tp = {t} does not divide the {what} ({dim}): use tp among {}",
                divisors(dim)
            )));
        }
        Ok(dim / t)
    }

    /// The sequence length one rank holds outside the tensor-parallel regions.
    pub fn tp_seq(&self, s: u64) -> Result<u64, EstimateError> {
        if !self.sp() {
            return Ok(s);
        }
        self.tp_local(s, "sequence length (sequence parallelism shards it)")
    }

    fn gathered_shape(&self, x: TensorId) -> Vec<u64> {
        let mut s = self.shape(x);
        let d = self.tp.seq_dim.min(s.len().saturating_sub(1));
        if let Some(v) = s.get_mut(d) {
            *v *= self.tp_size();
        }
        s
    }

    /// All-gathers a sequence-sharded activation (`gather_from_sequence_parallel_region`); the
    /// backward reduce-scatters its gradient into a new shard-sized tensor.
    pub fn sp_all_gather(&mut self, x: TensorId) -> R {
        let shape = self.gathered_shape(x);
        self.all_gather_to(x, shape, true)
    }

    /// [`Graph::sp_all_gather`] along the first dimension: a token-major `[T/t, ·]` tensor
    /// (a mixture's routing weights and choices) gathered to `[T, ·]`.
    pub fn sp_all_gather_rows(&mut self, x: TensorId) -> R {
        let mut shape = self.shape(x);
        if let Some(rows) = shape.first_mut() {
            *rows *= self.tp_size();
        }
        let rg = self.t(x).requires_grad;
        self.all_gather_to(x, shape, rg)
    }

    /// The gather of `x` into `shape`; `backward`: record the gradient's reduce-scatter.
    fn all_gather_to(&mut self, x: TensorId, shape: Vec<u64>, backward: bool) -> R {
        let rg = self.t(x).requires_grad;
        let y = self.alloc(shape, self.dtype(x), StorageKind::Activation, rg)?;
        self.record_simple("sp_all_gather", vec![x], vec![y], vec![], 0.0);
        let b = self.bytes(y).0;
        self.tp_comm(false, Collective::AllGather, b);
        if backward {
            self.tp_comm(true, Collective::ReduceScatter, b);
        }
        Ok(y)
    }

    /// Reduce-scatters partial sums to a sequence shard (`reduce_scatter_to_sequence_parallel_region`);
    /// the backward all-gathers the gradient into a new full-size tensor.
    pub fn sp_reduce_scatter(&mut self, x: TensorId) -> R {
        let mut shape = self.shape(x);
        let d = self.tp.seq_dim.min(shape.len().saturating_sub(1));
        let t = self.tp_size();
        if !shape[d].is_multiple_of(t) {
            return Err(EstimateError::BadLayout(format!(
                "sequence parallelism: tp = {t} does not divide the sequence length {}",
                shape[d]
            )));
        }
        shape[d] /= t;
        let rg = self.t(x).requires_grad;
        let y = self.alloc(shape, self.dtype(x), StorageKind::Activation, rg)?;
        self.record_simple("sp_reduce_scatter", vec![x], vec![y], vec![], 0.0);
        let b = self.bytes(x).0;
        self.tp_comm(false, Collective::ReduceScatter, b);
        self.tp_comm(true, Collective::AllGather, b);
        Ok(y)
    }

    /// Gathers a column-parallel output `[.., n/t]` into the whole `[.., n]` on every rank
    /// (transformers' `colwise_gather_output`, Megatron's `gather_output=True`: an all-gather
    /// along the last dimension); the backward keeps the rank's own columns of the gradient, a
    /// new shard-sized tensor, without communication (`_GatherFromModelParallelRegion.backward`
    /// is `_split_along_last_dim` in `megatron/core/tensor_parallel/mappings.py`).
    pub fn tp_gather_output(&mut self, x: TensorId) -> R {
        if self.tp_size() == 1 {
            return Ok(x);
        }
        let mut shape = self.shape(x);
        if let Some(last) = shape.last_mut() {
            *last *= self.tp_size();
        }
        let rg = self.t(x).requires_grad;
        let y = self.alloc(shape, self.dtype(x), StorageKind::Activation, rg)?;
        self.record_simple("tp_gather_output", vec![x], vec![y], vec![], 0.0);
        let b = self.bytes(y).0;
        self.tp_comm(false, Collective::AllGather, b);
        Ok(y)
    }

    /// Keeps a rank's `[.., n/t]` columns of a replicated `[.., n]` input of a row-parallel
    /// linear (transformers' `rowwise_split_input`, Megatron's `input_is_parallel=False`:
    /// `scatter_to_tensor_model_parallel_region`), a new contiguous tensor; the backward
    /// all-gathers the gradient back to the whole width.
    pub fn tp_split_input(&mut self, x: TensorId) -> R {
        if self.tp_size() == 1 {
            return Ok(x);
        }
        let mut shape = self.shape(x);
        if let Some(last) = shape.last_mut() {
            *last = self.tp_local(*last, "input width of a row-parallel linear")?;
        }
        let rg = self.t(x).requires_grad;
        let y = self.alloc(shape, self.dtype(x), StorageKind::Activation, rg)?;
        self.record_simple("tp_split_input", vec![x], vec![y], vec![], 0.0);
        if rg {
            let b = self.bytes(x).0;
            self.tp_comm(true, Collective::AllGather, b);
        }
        Ok(y)
    }

    /// Column-parallel linear (`ColumnParallelLinear`, `gather_output=False`): `fout` is the full
    /// output width; one rank computes `fout/t` columns.
    pub fn column_parallel_linear(
        &mut self,
        leaf: &str,
        x: TensorId,
        fin: u64,
        fout: u64,
        bias: bool,
    ) -> R {
        if self.tp_size() == 1 {
            return self.linear(leaf, x, fin, fout, bias);
        }
        let local = self.tp_local(fout, "output width of a column-parallel linear")?;
        self.push(leaf);
        let r = (|| {
            let w = self.param(vec![local, fin])?;
            let b = if bias {
                Some(self.param(vec![local])?)
            } else {
                None
            };
            self.column_parallel_linear_with(x, w, b)
        })();
        self.pop();
        r
    }

    /// Column-parallel linear with existing local weights `[out/t, in]` (a tied LM head).
    pub fn column_parallel_linear_with(
        &mut self,
        x: TensorId,
        w: TensorId,
        b: Option<TensorId>,
    ) -> R {
        if self.tp_size() == 1 {
            return self.linear_with(x, w, b);
        }
        if !self.sp() {
            // `f`: identity forward, all-reduce of the input gradient in backward (in place),
            // once per input however many GEMMs read it.
            let y = self.linear_with(x, w, b)?;
            let gb = self.bytes(x).0;
            if self.t(x).requires_grad && !self.tp.f_inputs.contains(&x) {
                self.tp.f_inputs.push(x);
                self.tp_comm(true, Collective::AllReduce, gb);
            }
            return Ok(y);
        }
        // Sequence parallel: gather the (low-precision) shard once, run the GEMM on the gathered
        // input but keep only the shard for backward, which re-gathers it (once per input).
        let xc = self.lowp(x)?;
        let (gathered, first) = match self.tp.gathered.iter().find(|(s, _)| *s == xc) {
            Some(&(_, g)) => (g, false),
            None => {
                let g = self.sp_all_gather(xc)?;
                self.tp.gathered.push((xc, g));
                (g, true)
            }
        };
        let y = self.linear_with(gathered, w, b)?;
        let gbytes = self.bytes(gathered);
        let mut saves_shard = false;
        if let Some(op) = self.ops.last_mut() {
            for s in op.saved.iter_mut() {
                if *s == gathered {
                    *s = xc;
                }
            }
            if op.saved.contains(&xc) {
                op.bwd_scratch += gbytes;
                saves_shard = true;
            }
        }
        if saves_shard && first {
            self.tp_comm(true, Collective::AllGather, gbytes.0);
        }
        Ok(y)
    }

    /// Row-parallel linear (`RowParallelLinear`, `input_is_parallel=True`): `fin` is the full input
    /// width; the input holds `fin/t` of it. The partial outputs are all-reduced (or reduce-scattered
    /// to a sequence shard), then the replicated bias is added.
    pub fn row_parallel_linear(
        &mut self,
        leaf: &str,
        x: TensorId,
        fin: u64,
        fout: u64,
        bias: bool,
    ) -> R {
        if self.tp_size() == 1 {
            return self.linear(leaf, x, fin, fout, bias);
        }
        let local = self.tp_local(fin, "input width of a row-parallel linear")?;
        self.push(leaf);
        let r = (|| {
            let w = self.param(vec![fout, local])?;
            let b = if bias {
                Some(self.param(vec![fout])?)
            } else {
                None
            };
            let mut y = self.linear_with(x, w, None)?;
            if self.sp() {
                y = self.sp_reduce_scatter(y)?;
            } else {
                // `g`: all-reduce in place in forward, identity in backward.
                let yb = self.bytes(y).0;
                self.tp_comm(false, Collective::AllReduce, yb);
            }
            match b {
                Some(b) => {
                    let bc = self.lowp(b)?;
                    self.add(y, bc, false)
                }
                None => Ok(y),
            }
        })();
        self.pop();
        r
    }

    /// Vocabulary-parallel embedding: each rank holds `vocab/t` rows, looks up its own tokens and
    /// zeroes the others (Megatron keeps an int64 copy of the shifted ids and a bool mask), then
    /// the partial embeddings are all-reduced (reduce-scattered with sequence parallelism).
    /// Returns the output and the local weight (for a tied head).
    pub fn vocab_parallel_embedding(
        &mut self,
        leaf: &str,
        ids: TensorId,
        vocab: u64,
        dim: u64,
    ) -> Result<(TensorId, TensorId), EstimateError> {
        if self.tp_size() == 1 {
            return self.embedding(leaf, ids, vocab, dim);
        }
        let local = self.tp_local(vocab, "vocabulary size")?;
        self.push(leaf);
        let r = (|| {
            let w = self.param(vec![local, dim])?;
            let mut y = self.embedding_with(ids, w)?;
            if self.sp() {
                y = self.sp_reduce_scatter(y)?;
            } else {
                let yb = self.bytes(y).0;
                self.tp_comm(false, Collective::AllReduce, yb);
            }
            Ok((y, w))
        })();
        self.pop();
        r
    }

    /// Vocabulary-parallel cross-entropy over logits `[N, vocab/t]` (`_VocabParallelCrossEntropy`
    /// in `megatron/core/tensor_parallel/cross_entropy.py`): the fp32 softmax of the local shard is
    /// saved for backward, three `[N]` all-reduces (max, predicted logit, sum of exponentials)
    /// make it global. Returns the loss (kept by the loop).
    pub fn vocab_parallel_cross_entropy(&mut self, logits: TensorId, target: TensorId) -> R {
        if self.tp_size() == 1 {
            return self.cross_entropy(logits, target);
        }
        let x = self.fp32(logits)?;
        let sm = self.alloc(
            self.shape(x),
            DType::F32,
            StorageKind::Activation,
            self.t(x).requires_grad,
        )?;
        let mut op = self.op("vocab_parallel_softmax", "loss");
        op.flops = 5.0 * self.numel(x) as f64;
        op.inputs = vec![x];
        op.outputs = vec![sm];
        op.saved = vec![sm];
        op.grads = self.grads_alloc(&[x]);
        self.record(op);
        let rows: u64 = self.shape(x).iter().rev().skip(1).product();
        for _ in 0..3 {
            self.tp_comm(false, Collective::AllReduce, rows * 4);
        }
        let loss = self.alloc(
            vec![],
            DType::F32,
            StorageKind::Activation,
            self.t(sm).requires_grad,
        )?;
        let mut op = self.op("vocab_parallel_nll", "loss");
        op.inputs = vec![sm, target];
        op.outputs = vec![loss];
        op.saved = vec![target];
        op.grads = self
            .t(sm)
            .requires_grad
            .then_some((sm, GradFlow::Alias))
            .into_iter()
            .collect();
        self.record(op);
        self.keep(loss);
        Ok(loss)
    }
}
