//! Offload to host memory: optimizer state and parameters (ZeRO-Offload, Ren et al. 2021;
//! ZeRO-Infinity, Rajbhandari et al. 2021) and saved activations
//! (`torch.autograd.graph.save_on_cpu(pin_memory=True)`).
//!
//! * Optimizer offload: the optimizer state and the fp32 step run on the CPU. Each step the
//!   reduced gradients (this rank's shard) go to the host and the updated parameters come back;
//!   the host keeps the state, a gradient buffer and the parameters it updates, all pinned for
//!   DMA. The gradient copy overlaps the backward, as ZeRO-Offload schedules it (§4.2); the
//!   parameter copy follows the CPU step.
//! * Parameter offload (stage 3 only): parameter shards stay on the host and are copied in before
//!   each all-gather, forward and backward, overlapping compute through prefetch.
//! * Activation offload: every tensor autograd saves outside checkpointed regions is packed to
//!   pinned host memory in forward and copied back in the backward of the op that saved it
//!   (`pack_to_cpu` / `unpack_from_cpu` in `torch/autograd/graph.py`). Both copies are issued on the
//!   current (compute) stream, so they do not hide behind compute.
//!
//! Unified memory (GH200 over NVLink-C2C, Apple silicon) is one more host link with its own
//! bandwidth (the `presets` links table); on Apple silicon the host is the same memory pool.

use crate::estimator::graph::{Graph, StorageKind};
use crate::estimator::units::Bytes;

/// Rewrites `g` as `save_on_cpu` runs it: saved activations of ops outside checkpointed
/// segments are no longer held on the GPU; each op's backward allocates its copies back as
/// scratch. Returns the bytes packed to the host per micro-batch (one copy per saved reference,
/// as each pack call makes its own copy).
pub fn offload_activations(g: &mut Graph) -> u64 {
    let mut total = 0u64;
    let storages = g.storages.clone();
    let tensors = g.tensors.clone();
    for op in g.ops.iter_mut() {
        if op.segment.is_some() || op.saved.is_empty() {
            continue;
        }
        let mut moved: Vec<usize> = Vec::new();
        let mut bytes = 0u64;
        op.saved.retain(|&t| {
            let s = tensors[t].storage;
            if storages[s].kind != StorageKind::Activation {
                return true;
            }
            if !moved.contains(&s) {
                moved.push(s);
                bytes += storages[s].bytes.allocator_block().0;
            }
            false
        });
        op.bwd_scratch += Bytes(bytes);
        total += bytes;
    }
    total
}
