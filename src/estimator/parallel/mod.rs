//! Scale-out: per-GPU memory, communication and step time of a training step spread over many
//! GPUs — data parallelism (DDP), ZeRO stages 1–3 and FSDP, tensor parallelism (Megatron-LM),
//! pipeline parallelism (1F1B and interleaved), expert parallelism for mixtures of experts, their
//! combinations, and offload to host memory.
//!
//! Everything is derived from the simulated single-GPU step, so activations stay op-accurate:
//! the model is built once with the tensor- and expert-parallel degrees (builders shard through
//! the hook in [`tp`]; a sparse layer keeps its rank's `E/ep` experts behind an all-to-all token
//! dispatch, `presets::moe`); pipeline stages are slices of that tape ([`pipeline`]), each replayed by the
//! simulator; each event of a stage's timeline is then rewritten for the data-parallel sharding
//! ([`zero`]) and the micro-batches a stage holds in flight. Communication is counted from the same
//! tape and sizes ([`comm`]); offload moves bytes to the host ([`offload`]); the plan layer's search finds the
//! cheapest layouts that fit.
//!
//! Step time: each rank's compute is its FLOPs at the GPU's peak times an assumed MFU
//! ([`comm::DEFAULT_MFU`]); a pipeline adds its bubble, `(p − 1)/v` micro-batch times (Narayanan
//! et al. 2021, §2.2). Overlap: DDP's buckets are all-reduced as they fill during the last
//! backward; FSDP/ZeRO-3 gathers and reduce-scatters overlap forward and backward except the first
//! gather and the last reduce-scatter (the experts' over their own `dp/ep` group); tensor-parallel
//! collectives, expert-parallel all-to-alls, pipeline sends, parameter
//! broadcasts after the step and `save_on_cpu` copies are on the critical path. Ranks wait for the
//! slowest every step. Not modelled: NCCL's own buffers (outside PyTorch's allocator), the CPU
//! optimizer's compute time under offload, and compute slowed by concurrent NCCL kernels.
//!
//! Files: [`settings`] (the keys), [`layout`] (validated), [`piece`] (the model cut and
//! simulated), [`evaluate`] (per-rank memory and time), [`traffic`] (what each rank sends),
//! [`report`] (the answer), over the mechanisms [`zero`], [`tp`], [`pipeline`], [`offload`] and
//! [`comm`]; [`megatron`] holds Korthikanti et al.'s closed forms for comparison.

pub mod comm;
pub mod evaluate;
pub mod layout;
pub mod megatron;
pub mod offload;
pub mod piece;
pub mod pipeline;
pub mod report;
pub mod resident;
pub mod settings;
pub mod tp;
pub mod traffic;
pub mod zero;

pub use comm::{CommItem, Traffic};
pub use evaluate::{
    estimate_parallel_with, evaluate, floor_over, single_gpu_step_seconds, surely_over,
};
pub use layout::{Layout, Links, Scheme};
pub use piece::{
    layout_graph, prepare, prepare_built, prepare_graph, prepare_reusing, Piece, Prepared,
    SavedFloor,
};
pub use report::{single_gpu, OffloadReport, ParallelEstimate, PerGpu, RankReport};
pub use resident::{resident_over, ResidentFloor};
pub use settings::{MixedPrecision, MpDtype, Offload, Parallel};
