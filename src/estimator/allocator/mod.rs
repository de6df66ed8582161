//! PyTorch's CUDA caching allocator, replayed: the malloc/free stream of a step goes through the
//! same pools, rounding, best-fit search, splitting, merging and release-and-retry rules as
//! `c10/cuda/CUDACachingAllocator.cpp` of PyTorch 2.15 (`DeviceCachingAllocator`), so what the
//! device reserves (`torch.cuda.max_memory_reserved()`), the fragmentation at the peak and the
//! segment map come from the mechanism rather than from a margin.
//!
//! The step simulation records the loop's stream ([`crate::estimator::step_stream`]) and
//! [`crate::estimator::estimate`] replays it here for `Estimate::reserved`.
//!
//! [`settings`] holds the `PYTORCH_CUDA_ALLOC_CONF` options, [`sizes`] the size rules,
//! [`caching`] the allocator's state and its malloc/free, [`expandable`] the
//! `expandable_segments:True` mapping, [`keys`] the pools' ordered sets, and [`trace`] the
//! recorded stream and its replay.

pub mod caching;
pub mod expandable;
pub mod keys;
pub mod settings;
pub mod sizes;
pub mod trace;

#[cfg(test)]
mod tests;

pub use caching::{BlockView, CachingAllocator, Capacity, OutOfMemory, SegmentView};
pub use settings::{AllocConf, AllocatorSettings, SettingsError};
pub use trace::{packed_peak, replay, segment_map, AllocTrace, AllocatorReport, Handle, Replay};
