//! The model IR: a forward tape of ops over tensors with shapes, as PyTorch's autograd records it.
//!
//! Each op is one plain record ([`OpRecord`]) of what it reads, what it allocates, what autograd
//! saves for backward, how gradients flow back through it and its FLOPs. Tensors live in
//! storages, so views and in-place ops share memory exactly as they do in PyTorch. The op
//! constructors (`ops/`) append records; [`crate::estimator::simulate`] replays the tape.

use super::error::EstimateError;
use super::units::{tensor_bytes, Bytes, DType, Elems};

pub type TensorId = usize;
pub type StorageId = usize;

/// A stack of children a builder cuts with [`Graph::checkpoint_runs`] (a model's layers): how
/// many, and whether `Stage` means `Block` for it. A graph that noted exactly one tells what
/// every checkpointing policy would make of the model without building it under each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CkptStack {
    pub children: usize,
    pub stage_is_block: bool,
}

/// What a storage is, for the breakdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageKind {
    Param,
    Buffer,
    Input,
    Activation,
    /// Keys and values kept for later decode steps; persistent like the weights.
    KvCache,
}

#[derive(Clone, Debug)]
pub struct Storage {
    pub bytes: Bytes,
    pub kind: StorageKind,
}

#[derive(Clone, Debug)]
pub struct Tensor {
    pub shape: Vec<u64>,
    pub dtype: DType,
    pub storage: StorageId,
    pub requires_grad: bool,
    /// A leaf parameter: its gradient accumulates into `.grad`.
    pub is_param: bool,
    /// A routed expert's weight: split over the expert-parallel group, its gradient reduced over
    /// the data-parallel ranks that hold the same experts.
    pub expert: bool,
}

impl Tensor {
    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// How the gradient of one input is produced by an op's backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradFlow {
    /// A new tensor of the input's size and dtype is allocated (the usual case).
    Alloc,
    /// The incoming gradient is passed on unchanged (add, views, in-place ops): no allocation.
    Alias,
}

/// One op of the forward tape: the plain record of its quantities.
#[derive(Clone, Debug)]
pub struct OpRecord {
    /// Module path, e.g. `layer1.0.conv1`.
    pub name: String,
    /// The op kind, e.g. `conv2d`, `batch_norm`.
    pub kind: &'static str,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
    /// Tensors autograd keeps until this op's backward ran (outputs, inputs or extra tensors such
    /// as dropout masks and normalisation statistics).
    pub saved: Vec<TensorId>,
    /// Gradient produced for each input that requires grad.
    pub grads: Vec<(TensorId, GradFlow)>,
    /// Scratch memory allocated and freed inside the forward op.
    pub fwd_scratch: Bytes,
    /// Tensors allocated inside the backward node besides the input gradients, freed at its end.
    pub bwd_scratch: Bytes,
    /// Reductions the backward node runs through PyTorch's CUDA reduction kernel, whose staging
    /// blocks (`device::reduction_blocks`) only the caching allocator sees: the measured steps
    /// count tensors.
    pub bwd_reductions: Vec<crate::estimator::device::Reduction>,
    /// Forward FLOPs (multiply-add = 2).
    pub flops: f64,
    /// Checkpoint segment this op belongs to (its saved tensors are recomputed in backward).
    pub segment: Option<usize>,
    /// The part of a mixture-of-experts layer the op belongs to, as its builder tags it.
    pub moe: Option<MoePart>,
}

impl OpRecord {
    /// `op`'s quantities without its name and tensors, for a copy whose tensors are renumbered
    /// (a pipeline chunk), which so allocates no vector twice.
    pub fn of_kind(op: &OpRecord) -> OpRecord {
        OpRecord {
            name: String::new(),
            kind: op.kind,
            inputs: Vec::new(),
            outputs: Vec::new(),
            saved: Vec::new(),
            grads: Vec::new(),
            fwd_scratch: op.fwd_scratch,
            bwd_scratch: op.bwd_scratch,
            bwd_reductions: op.bwd_reductions.clone(),
            flops: op.flops,
            segment: op.segment,
            moe: op.moe,
        }
    }
}

/// The parts of a sparse mixture-of-experts layer (`estimator::moe_parts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoePart {
    /// The experts' computation: projections, activations, weighting.
    Experts,
    /// The router: logits, probabilities, the top-k choices.
    Router,
    /// Moving tokens to the experts and back: gathers, indices, masks, exchanges.
    Dispatch,
    /// Shared experts, run on every token.
    Shared,
}

/// Numeric precision of the training step.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// Everything in fp32.
    #[default]
    Fp32,
    /// `torch.autocast(dtype=bfloat16)` over fp32 weights.
    AmpBf16,
    /// `torch.autocast(dtype=float16)` over fp32 weights (with a GradScaler).
    AmpFp16,
    /// Weights, buffers, inputs and optimizer state in bf16.
    Bf16,
    /// Weights, buffers, inputs and optimizer state in fp16.
    Fp16,
}

impl Precision {
    /// dtype of parameters, buffers and float inputs.
    pub fn param_dtype(self) -> DType {
        match self {
            Precision::Fp32 | Precision::AmpBf16 | Precision::AmpFp16 => DType::F32,
            Precision::Bf16 => DType::BF16,
            Precision::Fp16 => DType::F16,
        }
    }
    /// The autocast dtype, if autocast is on.
    pub fn autocast(self) -> Option<DType> {
        match self {
            Precision::AmpBf16 => Some(DType::BF16),
            Precision::AmpFp16 => Some(DType::F16),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::AmpBf16 => "amp_bf16",
            Precision::AmpFp16 => "amp_fp16",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        }
    }
}

/// The forward tape being recorded, with the autocast state and the checkpoint segment in force.
#[derive(Clone, Debug)]
pub struct Graph {
    pub storages: Vec<Storage>,
    pub tensors: Vec<Tensor>,
    pub ops: Vec<OpRecord>,
    pub precision: Precision,
    /// Segment that new ops join (`None`: not checkpointed).
    pub current_segment: Option<usize>,
    pub segments: usize,
    /// Autocast's cache of low-precision weight copies (param tensor → cast tensor), kept for the
    /// whole forward as `torch.autocast` does.
    pub(crate) cast_cache: Vec<(TensorId, TensorId)>,
    /// Tensors the training loop keeps alive after forward (the loss).
    pub kept: Vec<TensorId>,
    /// Tensor parallelism the builder applies and the collectives it recorded
    /// (`estimator::parallel::tp`); size 1 unless a builder opts in.
    pub tp: TpState,
    /// Module path of the module being built (`layers.3.mlp`), and its length before each of
    /// its parts: kept joined, as every op's name starts with it (joining the parts for each
    /// op was a tenth of building a 128-expert model).
    path: String,
    path_lens: Vec<usize>,
    /// `model.eval()` under `torch.no_grad()`: parameters need no gradient, nothing is saved,
    /// dropout is the identity, no loss is taken (the caller keeps the logits) and the step
    /// ends after the forward.
    pub inference: bool,
    /// Module paths whose parameters are created frozen (`requires_grad=False`), each with
    /// everything below it; `"*"` freezes every parameter except those made with
    /// [`Graph::adapter_param`] (LoRA's frozen base model).
    pub frozen: Vec<String>,
    /// Parameters one token runs through, when fewer than all of them (a mixture of experts:
    /// the builder knows the routing, the tape does not); `None`: every parameter.
    pub active_params: Option<u64>,
    /// Expert-parallel degree the builder splits routed experts over; 1 = every expert here.
    pub ep: u64,
    /// Placeholder tokens the images of a vision-language model put in each sample's sequence,
    /// beside the plan's text tokens (`seq`, or `context` when serving): the language model and
    /// its KV cache run over both (0: the model takes no images).
    pub image_tokens: u64,
    /// How the parameters and buffers came onto the device, when that is not one allocation
    /// each in their final form: the caching allocator's replay starts with this stream
    /// instead ([`super::model_init`]).
    pub init: Option<super::model_init::ModelInit>,
    /// What autograd keeps where an older PyTorch release differs from a current one.
    pub rules: super::releases::StackRules,
    /// The stacks cut by [`Graph::checkpoint_runs`], in build order.
    pub ckpt_stacks: Vec<CkptStack>,
}

impl Graph {
    pub fn new(precision: Precision) -> Self {
        Graph {
            storages: Vec::new(),
            tensors: Vec::new(),
            ops: Vec::new(),
            precision,
            current_segment: None,
            segments: 0,
            cast_cache: Vec::new(),
            kept: Vec::new(),
            tp: Default::default(),
            path: String::new(),
            path_lens: Vec::new(),
            inference: false,
            frozen: Vec::new(),
            active_params: None,
            ep: 1,
            image_tokens: 0,
            init: None,
            rules: Default::default(),
            ckpt_stacks: Vec::new(),
        }
    }

    /// Whether a parameter created in the current module is frozen.
    fn is_frozen_here(&self) -> bool {
        if self.frozen.is_empty() {
            return false;
        }
        let path = self.name("");
        self.frozen.iter().any(|f| {
            f == "*"
                || path == *f
                || (path.starts_with(f.as_str()) && path.as_bytes().get(f.len()) == Some(&b'.'))
        })
    }

    pub fn t(&self, id: TensorId) -> &Tensor {
        &self.tensors[id]
    }
    pub fn shape(&self, id: TensorId) -> Vec<u64> {
        self.tensors[id].shape.clone()
    }
    pub fn dtype(&self, id: TensorId) -> DType {
        self.tensors[id].dtype
    }
    pub fn numel(&self, id: TensorId) -> u64 {
        self.tensors[id].numel()
    }
    pub fn bytes(&self, id: TensorId) -> Bytes {
        // Shapes were checked when the tensor was made.
        Bytes(self.tensors[id].numel() * self.tensors[id].dtype.bits()).round_up(8) / 8
    }

    /// Enters a named submodule for op names (`layer1`, `0`, `conv1` → `layer1.0.conv1`).
    pub fn push(&mut self, name: impl Into<String>) {
        self.path_lens.push(self.path.len());
        if self.path_lens.len() > 1 {
            self.path.push('.');
        }
        self.path.push_str(&name.into());
    }
    pub fn pop(&mut self) {
        if let Some(n) = self.path_lens.pop() {
            self.path.truncate(n);
        }
    }
    pub fn scoped<R>(&mut self, name: impl Into<String>, f: impl FnOnce(&mut Graph) -> R) -> R {
        self.push(name);
        let r = f(self);
        self.pop();
        r
    }
    pub fn name(&self, leaf: &str) -> String {
        let mut s = String::with_capacity(self.path.len() + 1 + leaf.len());
        s.push_str(&self.path);
        if !leaf.is_empty() {
            if !s.is_empty() {
                s.push('.');
            }
            s.push_str(leaf);
        }
        s
    }

    /// Runs `f` as one checkpointed region (`torch.utils.checkpoint`, non-reentrant) when `on`.
    pub fn checkpointed<R>(&mut self, on: bool, f: impl FnOnce(&mut Graph) -> R) -> R {
        let opened = on && self.begin_region();
        let r = f(self);
        self.end_region(opened);
        r
    }

    /// Opens a checkpointed region; returns whether it did (inside a region it does nothing:
    /// the outer one already holds these ops). [`Graph::end_region`] with that answer closes it.
    /// For `checkpoint_sequential` segments that cross module boundaries (a ResNet's residual
    /// blocks run over its four stages), where one closure cannot hold the segment.
    pub fn begin_region(&mut self) -> bool {
        if self.current_segment.is_some() {
            return false;
        }
        self.current_segment = Some(self.segments);
        self.segments += 1;
        true
    }
    /// Closes the region [`Graph::begin_region`] opened, if it opened one.
    pub fn end_region(&mut self, opened: bool) {
        if opened {
            self.current_segment = None;
        }
    }

    fn new_storage(
        &mut self,
        shape: &[u64],
        dtype: DType,
        kind: StorageKind,
    ) -> Result<StorageId, EstimateError> {
        let bytes = tensor_bytes(Elems::of_shape(shape)?, dtype)?;
        self.storages.push(Storage { bytes, kind });
        Ok(self.storages.len() - 1)
    }

    fn push_tensor(
        &mut self,
        shape: Vec<u64>,
        dtype: DType,
        storage: StorageId,
        requires_grad: bool,
        is_param: bool,
    ) -> TensorId {
        self.tensors.push(Tensor {
            shape,
            dtype,
            storage,
            requires_grad,
            is_param,
            expert: false,
        });
        self.tensors.len() - 1
    }

    /// A new tensor with its own storage.
    pub fn alloc(
        &mut self,
        shape: Vec<u64>,
        dtype: DType,
        kind: StorageKind,
        requires_grad: bool,
    ) -> Result<TensorId, EstimateError> {
        let s = self.new_storage(&shape, dtype, kind)?;
        Ok(self.push_tensor(shape, dtype, s, requires_grad, false))
    }

    /// A trainable parameter in the precision's parameter dtype.
    pub fn param(&mut self, shape: Vec<u64>) -> Result<TensorId, EstimateError> {
        let dt = self.precision.param_dtype();
        self.param_of(shape, dt)
    }
    pub fn param_of(&mut self, shape: Vec<u64>, dtype: DType) -> Result<TensorId, EstimateError> {
        let trains = !self.inference && !self.is_frozen_here();
        let s = self.new_storage(&shape, dtype, StorageKind::Param)?;
        Ok(self.push_tensor(shape, dtype, s, trains, true))
    }
    /// A parameter that trains even under a frozen base model (LoRA's `lora_A`/`lora_B`).
    pub fn adapter_param(
        &mut self,
        shape: Vec<u64>,
        dtype: DType,
    ) -> Result<TensorId, EstimateError> {
        let s = self.new_storage(&shape, dtype, StorageKind::Param)?;
        Ok(self.push_tensor(shape, dtype, s, !self.inference, true))
    }
    /// A weight-format constant that is not an `nn.Parameter` (quantization scales and codes):
    /// stored with the weights, never trained, not counted as a parameter.
    pub fn weight_constant(
        &mut self,
        shape: Vec<u64>,
        dtype: DType,
    ) -> Result<TensorId, EstimateError> {
        self.alloc(shape, dtype, StorageKind::Param, false)
    }
    /// A KV-cache tensor: allocated before the step and kept after it.
    pub fn kv_cache(&mut self, shape: Vec<u64>, dtype: DType) -> Result<TensorId, EstimateError> {
        self.alloc(shape, dtype, StorageKind::KvCache, false)
    }
    /// A non-trainable buffer (batch-norm running statistics).
    pub fn buffer(&mut self, shape: Vec<u64>, dtype: DType) -> Result<TensorId, EstimateError> {
        let s = self.new_storage(&shape, dtype, StorageKind::Buffer)?;
        Ok(self.push_tensor(shape, dtype, s, false, false))
    }
    /// A model input (images, token ids, labels).
    pub fn input(&mut self, shape: Vec<u64>, dtype: DType) -> Result<TensorId, EstimateError> {
        let s = self.new_storage(&shape, dtype, StorageKind::Input)?;
        Ok(self.push_tensor(shape, dtype, s, false, false))
    }
    /// A view or in-place result: a new tensor sharing `of`'s storage.
    pub fn alias(&mut self, of: TensorId, shape: Vec<u64>, requires_grad: bool) -> TensorId {
        let (dt, st) = (self.tensors[of].dtype, self.tensors[of].storage);
        self.push_tensor(shape, dt, st, requires_grad, false)
    }

    pub fn requires_grad(&self, ids: &[TensorId]) -> bool {
        ids.iter().any(|&i| self.tensors[i].requires_grad)
    }

    /// Gradient rules for `inputs`: `Alloc` for each one that requires grad.
    pub fn grads_alloc(&self, inputs: &[TensorId]) -> Vec<(TensorId, GradFlow)> {
        inputs
            .iter()
            .filter(|&&i| self.tensors[i].requires_grad)
            .map(|&i| (i, GradFlow::Alloc))
            .collect()
    }

    /// Appends an op record. Saved tensors are dropped when nothing requires grad: autograd
    /// records no node then.
    pub fn record(&mut self, mut op: OpRecord) {
        if op.grads.is_empty() {
            op.saved.clear();
            op.bwd_scratch = Bytes::ZERO;
            op.bwd_reductions.clear();
        }
        op.segment = self.current_segment;
        self.ops.push(op);
    }

    /// Starts a record with this module's name.
    pub fn op(&self, kind: &'static str, leaf: &str) -> OpRecord {
        OpRecord {
            name: self.name(leaf),
            kind,
            inputs: Vec::new(),
            outputs: Vec::new(),
            saved: Vec::new(),
            grads: Vec::new(),
            fwd_scratch: Bytes::ZERO,
            bwd_scratch: Bytes::ZERO,
            bwd_reductions: Vec::new(),
            flops: 0.0,
            segment: None,
            moe: None,
        }
    }

    /// Tags the ops recorded since `from` that have no part yet as `part` of a mixture of
    /// experts; `dispatch` names the kinds among them that move tokens rather than compute.
    pub fn tag_moe(&mut self, from: usize, part: MoePart, dispatch: &[&str]) {
        for op in self.ops.iter_mut().skip(from).filter(|o| o.moe.is_none()) {
            op.moe = Some(if dispatch.contains(&op.kind) {
                MoePart::Dispatch
            } else {
                part
            });
        }
    }

    /// Marks a tensor as kept alive by the training loop after forward (the loss).
    pub fn keep(&mut self, t: TensorId) {
        self.kept.push(t);
    }

    pub fn param_count(&self) -> u64 {
        self.tensors
            .iter()
            .filter(|t| t.is_param)
            .map(|t| t.numel())
            .sum()
    }
    /// Parameters that receive gradients and optimizer state.
    pub fn trainable_count(&self) -> u64 {
        self.tensors
            .iter()
            .filter(|t| t.is_param && t.requires_grad)
            .map(|t| t.numel())
            .sum()
    }
    /// Exact bytes (no allocator rounding) of all storages of one kind.
    pub fn storage_bytes(&self, kind: StorageKind) -> Bytes {
        self.storages
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| s.bytes)
            .sum()
    }
}

/// A collective operation of NCCL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    /// Point-to-point send of a tensor to a neighbour (pipeline stages).
    SendRecv,
    /// Every rank sends a part of its buffer to every other (expert parallelism's token
    /// dispatch and combine).
    AllToAll,
}

/// The process group a recorded collective runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommGroup {
    /// The tensor-parallel group.
    Tp,
    /// The expert-parallel group.
    Ep,
}

/// One collective of a model-parallel group recorded on the tape.
#[derive(Clone, Debug, PartialEq)]
pub struct CommRecord {
    pub group: CommGroup,
    /// Index of the op it accompanies in `Graph::ops`.
    pub op: usize,
    /// Runs in the op's backward (otherwise in its forward).
    pub backward: bool,
    pub collective: Collective,
    /// The full, unsharded buffer (all-reduce: the tensor; all-gather: the gathered output;
    /// reduce-scatter: the input; all-to-all: what one rank sends, its own share included), bytes.
    pub bytes: u64,
}

/// The tensor-parallel layout of a graph.
#[derive(Clone, Debug, PartialEq)]
pub struct TpState {
    pub size: u64,
    pub sequence_parallel: bool,
    /// Which dimension of an activation is the sequence (1 for Hugging Face's `[batch, seq, hidden]`,
    /// 0 for Megatron's `[seq, batch, hidden]`).
    pub seq_dim: usize,
    /// Attention heads of the model, once a builder sharded an attention block.
    pub heads: Option<u64>,
    pub comm: Vec<CommRecord>,
    /// Inputs whose gradient all-reduce (`f`) is already recorded, and sequence shards already
    /// gathered: several column-parallel GEMMs reading one activation (separate q/k/v or
    /// gate/up projections) share them, as Megatron's fused QKV and fc1 GEMMs do.
    pub(crate) f_inputs: Vec<TensorId>,
    pub(crate) gathered: Vec<(TensorId, TensorId)>,
}

impl Default for TpState {
    fn default() -> Self {
        TpState {
            size: 1,
            sequence_parallel: false,
            seq_dim: 1,
            heads: None,
            comm: Vec::new(),
            f_inputs: Vec::new(),
            gathered: Vec::new(),
        }
    }
}
