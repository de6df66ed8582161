//! The allocator's state and its `malloc`/`free` (`DeviceCachingAllocator` in
//! `c10/cuda/CUDACachingAllocator.cpp`, PyTorch 2.15): free blocks in two pools ordered by
//! (stream, size, address) for best fit, blocks of one segment linked so freed neighbours merge,
//! segments returned to the device only by [`CachingAllocator::empty_cache`], garbage collection
//! or the out-of-memory path (free one cached block large enough, then every unsplit one, and
//! retry).

use thiserror::Error;

use super::keys::{Key, SortedSet};
use super::settings::AllocatorSettings;
use super::sizes::{allocation_size, is_small, round_size, should_split, ROUND_LARGE};

/// Index of a block in the allocator's arena.
pub type BlockId = u32;

#[derive(Clone, Debug)]
pub(super) struct Block {
    pub stream: u32,
    pub size: u64,
    pub addr: u64,
    pub small: bool,
    pub allocated: bool,
    /// Backed by physical pages (always, outside expandable segments).
    pub mapped: bool,
    pub expandable: bool,
    pub prev: Option<BlockId>,
    pub next: Option<BlockId>,
    /// The pool's `get_free_blocks_call_count` when the block entered the pool.
    pub gc_base: i64,
    pub live: bool,
}

/// How much device memory the allocator may reserve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// The device's memory (what a memory fraction is a share of).
    pub total: u64,
    /// What `cudaMalloc` can still get: the device minus the CUDA context and other processes.
    pub free: u64,
}

/// A request that did not fit even after releasing every cached block.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
#[error("CUDA out of memory: tried to allocate {requested} bytes with {reserved} reserved ({allocated} allocated) of {limit} the allocator may use")]
pub struct OutOfMemory {
    pub requested: u64,
    pub reserved: u64,
    pub allocated: u64,
    pub limit: u64,
}

/// One block of a segment in the segment map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BlockView {
    pub size: u64,
    pub allocated: bool,
}

/// One segment (one `cudaMalloc`, or the mapped part of an expandable segment) and its blocks in
/// address order, as `torch.cuda.memory_snapshot()` lists them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SegmentView {
    pub stream: u32,
    pub small: bool,
    pub expandable: bool,
    /// Reserved bytes of the segment (mapped bytes for an expandable one).
    pub size: u64,
    pub blocks: Vec<BlockView>,
}

/// The caching allocator of one device.
#[derive(Clone, Debug)]
pub struct CachingAllocator {
    pub(super) settings: AllocatorSettings,
    pub(super) capacity: Option<Capacity>,
    pub(super) blocks: Vec<Block>,
    spare: Vec<BlockId>,
    /// Free mapped blocks: `[large, small]`.
    pub(super) free: [SortedSet; 2],
    /// Unmapped address space of expandable segments by (stream, address): `[large, small]`.
    pub(super) unmapped: [SortedSet; 2],
    gc_calls: [i64; 2],
    pub(super) next_addr: u64,
    /// `total_allocated_memory`: bytes held from the device.
    pub(super) reserved: u64,
    /// Bytes of allocated blocks (PyTorch counts the whole block, `allocated_bytes`).
    allocated: u64,
    pub(super) peak_reserved: u64,
    peak_allocated: u64,
    /// `num_alloc_retries`: allocations that needed cached blocks released first.
    pub retries: u64,
    /// Past the capacity on purpose after an out-of-memory, so a replay can say how much it
    /// would need.
    pub(super) unbounded: bool,
}

pub(super) fn pool_of(small: bool) -> usize {
    small as usize
}

impl CachingAllocator {
    pub fn new(settings: AllocatorSettings, capacity: Option<Capacity>) -> Self {
        CachingAllocator {
            settings,
            capacity,
            blocks: Vec::new(),
            spare: Vec::new(),
            free: [SortedSet::default(), SortedSet::default()],
            unmapped: [SortedSet::default(), SortedSet::default()],
            gc_calls: [0; 2],
            next_addr: 1 << 32,
            reserved: 0,
            allocated: 0,
            peak_reserved: 0,
            peak_allocated: 0,
            retries: 0,
            unbounded: false,
        }
    }

    pub fn reserved(&self) -> u64 {
        self.reserved
    }
    pub fn allocated(&self) -> u64 {
        self.allocated
    }
    /// `max_memory_reserved()`.
    pub fn peak_reserved(&self) -> u64 {
        self.peak_reserved
    }
    /// `max_memory_allocated()`.
    pub fn peak_allocated(&self) -> u64 {
        self.peak_allocated
    }
    /// The size of an allocated block (its rounded request, or more when not split).
    pub fn block_size(&self, b: BlockId) -> u64 {
        self.blocks[b as usize].size
    }

    /// What the allocator may hold: the device's free memory, and the memory fraction's share.
    pub(super) fn limit(&self) -> u64 {
        if self.unbounded {
            return u64::MAX;
        }
        let Some(c) = self.capacity else {
            return u64::MAX;
        };
        match self.settings.memory_fraction {
            Some(f) => c.free.min((c.total as f64 * f) as u64),
            None => c.free,
        }
    }

    pub(super) fn new_block(&mut self, b: Block) -> BlockId {
        match self.spare.pop() {
            Some(i) => {
                self.blocks[i as usize] = b;
                i
            }
            None => {
                self.blocks.push(b);
                (self.blocks.len() - 1) as BlockId
            }
        }
    }
    pub(super) fn drop_block(&mut self, i: BlockId) {
        self.blocks[i as usize].live = false;
        self.spare.push(i);
    }
    pub(super) fn key(&self, i: BlockId) -> Key {
        let b = &self.blocks[i as usize];
        (b.stream, b.size, b.addr, i)
    }
    /// `insert_into_blocks`: the block enters its pool and its garbage-collection age restarts.
    pub(super) fn insert_free(&mut self, i: BlockId) {
        let p = pool_of(self.blocks[i as usize].small);
        self.blocks[i as usize].gc_base = self.gc_calls[p];
        let k = self.key(i);
        self.free[p].insert(k);
    }
    pub(super) fn remove_free(&mut self, i: BlockId) {
        let p = pool_of(self.blocks[i as usize].small);
        let k = self.key(i);
        self.free[p].remove(&k);
    }

    /// `malloc`: a block of at least `size` bytes on `stream`.
    pub fn malloc(&mut self, size: u64, stream: u32) -> Result<BlockId, OutOfMemory> {
        let rounded = round_size(size, self.settings.roundup_power2_divisions);
        let small = is_small(rounded);
        let alloc_size = allocation_size(rounded);
        let found = match self.get_free_block(small, stream, rounded) {
            Some(b) => Some(b),
            None => {
                if self.settings.collects_garbage() {
                    self.garbage_collect();
                }
                self.alloc_block(small, stream, rounded, alloc_size)
                    .or_else(|| {
                        if self.release_available_cached_blocks(small, stream, rounded) {
                            self.retries += 1;
                            self.alloc_block(small, stream, rounded, alloc_size)
                        } else {
                            None
                        }
                    })
                    .or_else(|| {
                        self.release_cached_blocks();
                        self.retries += 1;
                        self.alloc_block(small, stream, rounded, alloc_size)
                    })
            }
        };
        let Some(block) = found else {
            return Err(OutOfMemory {
                requested: rounded,
                reserved: self.reserved,
                allocated: self.allocated,
                limit: self.limit(),
            });
        };
        let block = self.split(block, rounded);
        self.blocks[block as usize].allocated = true;
        self.allocated += self.blocks[block as usize].size;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        Ok(block)
    }

    /// Hands out the first `rounded` bytes of a block taken from the pool, putting the rest back
    /// as a free block when [`should_split`] says so.
    fn split(&mut self, block: BlockId, rounded: u64) -> BlockId {
        let b = self.blocks[block as usize].clone();
        let whole_bytes = b.small || self.settings.expandable_segments;
        if !should_split(b.size, rounded, whole_bytes, self.settings.max_split_size()) {
            return block;
        }
        // PyTorch keeps the old block as the remainder and makes a new one for the request.
        let front = self.new_block(Block {
            size: rounded,
            prev: b.prev,
            next: Some(block),
            allocated: false,
            ..b.clone()
        });
        if let Some(p) = b.prev {
            self.blocks[p as usize].next = Some(front);
        }
        let rest = &mut self.blocks[block as usize];
        rest.prev = Some(front);
        rest.addr += rounded;
        rest.size -= rounded;
        self.insert_free(block);
        front
    }

    /// `get_free_block`: the smallest cached block of the stream that holds the request, unless
    /// the oversize rules refuse it.
    fn get_free_block(&mut self, small: bool, stream: u32, rounded: u64) -> Option<BlockId> {
        let p = pool_of(small);
        if self.settings.collects_garbage() {
            self.gc_calls[p] += 1;
        }
        let mut it = self.free[p].from((stream, rounded, 0, 0));
        let mut cur = *it.next()?;
        if cur.0 != stream {
            return None;
        }
        if self.blocks[cur.3 as usize].expandable && self.settings.expandable_segments {
            // Best fit counts an expandable block as the size it can grow to.
            let grow = |a: &Self, i: BlockId| {
                let b = &a.blocks[i as usize];
                b.size
                    + b.next
                        .map(|n| &a.blocks[n as usize])
                        .filter(|n| !n.mapped)
                        .map_or(0, |n| n.size)
            };
            for next in it.by_ref() {
                if !self.blocks[cur.3 as usize].expandable
                    || next.0 != stream
                    || grow(self, next.3) >= grow(self, cur.3)
                {
                    break;
                }
                cur = *next;
            }
        }
        drop(it);
        let max_split = self.settings.max_split_size();
        let size = cur.1;
        // An oversize block never serves a small request, and serves an oversize one only
        // within `max_non_split_rounding` of its size.
        if rounded < max_split && size >= max_split {
            return None;
        }
        if rounded >= max_split
            && size >= rounded.saturating_add(self.settings.max_non_split_rounding)
        {
            return None;
        }
        self.free[p].remove(&cur);
        Some(cur.3)
    }

    /// `alloc_block`: a new segment from the device (`cudaMalloc`), or more pages of an
    /// expandable segment.
    fn alloc_block(
        &mut self,
        small: bool,
        stream: u32,
        rounded: u64,
        alloc_size: u64,
    ) -> Option<BlockId> {
        if self.settings.expandable_segments {
            return self.try_allocate_expandable_block(small, stream, rounded);
        }
        if self.reserved.saturating_add(alloc_size) > self.limit() {
            return None;
        }
        let addr = self.next_addr;
        self.next_addr += alloc_size.div_ceil(ROUND_LARGE) * ROUND_LARGE;
        self.reserved += alloc_size;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        Some(self.new_block(Block {
            stream,
            size: alloc_size,
            addr,
            small,
            allocated: false,
            mapped: true,
            expandable: false,
            prev: None,
            next: None,
            gc_base: 0,
            live: true,
        }))
    }

    /// `release_block`: a whole cached segment goes back to the device (`cudaFree`).
    fn release_block(&mut self, i: BlockId) {
        self.remove_free(i);
        self.reserved -= self.blocks[i as usize].size;
        self.drop_block(i);
    }

    /// `release_available_cached_blocks`: with `max_split_size` set, free one cached oversize
    /// block that holds the request, else the largest ones of the stream until enough is freed.
    fn release_available_cached_blocks(&mut self, small: bool, stream: u32, rounded: u64) -> bool {
        let max_split = self.settings.max_split_size();
        if max_split == u64::MAX {
            return false;
        }
        let p = pool_of(small);
        let want = rounded.max(max_split);
        let hit = self.free[p].from((stream, want, 0, 0)).next().copied();
        match hit {
            Some(k) if k.0 == stream && !self.blocks[k.3 as usize].expandable => {
                self.release_block(k.3);
                true
            }
            _ => {
                let mut released = 0u64;
                let below: Vec<Key> = self.free[p]
                    .below((stream, want, 0, 0))
                    .rev()
                    .take_while(|k| k.0 == stream && k.1 >= max_split)
                    .copied()
                    .collect();
                for k in below {
                    if released >= want {
                        break;
                    }
                    if !self.blocks[k.3 as usize].expandable {
                        released += k.1;
                        self.release_block(k.3);
                    }
                }
                released >= want
            }
        }
    }

    /// `release_cached_blocks` (also `torch.cuda.empty_cache()`): every cached block that is a
    /// whole segment goes back; free pages of expandable segments are unmapped.
    pub fn release_cached_blocks(&mut self) {
        for p in 0..2 {
            let keys: Vec<Key> = self.free[p].iter().copied().collect();
            for k in keys {
                let b = &self.blocks[k.3 as usize];
                if !b.live || b.allocated || !self.free[p].contains(&k) {
                    continue;
                }
                if b.expandable {
                    self.unmap_block(k.3);
                } else if b.prev.is_none() && b.next.is_none() {
                    self.release_block(k.3);
                }
            }
        }
    }

    /// `torch.cuda.empty_cache()`.
    pub fn empty_cache(&mut self) {
        self.release_cached_blocks();
    }

    /// `garbage_collect_cached_blocks`: above `threshold × allowed memory`, release unsplit large
    /// blocks whose age (pool searches since they were freed) is at least the average, until
    /// the excess is reclaimed.
    fn garbage_collect(&mut self) {
        let Some(threshold) = self.settings.garbage_collection_threshold else {
            return;
        };
        let gc_threshold = (threshold * self.limit() as f64) as u64;
        if self.reserved <= gc_threshold {
            return;
        }
        let target = self.reserved - gc_threshold;
        let age = |a: &Self, i: BlockId| (a.gc_calls[0] - a.blocks[i as usize].gc_base) as f64;
        let freeable = |a: &Self, k: &Key| {
            let b = &a.blocks[k.3 as usize];
            b.prev.is_none() && b.next.is_none()
        };
        let mut total_age = 0.0;
        let mut count = 0usize;
        for k in self.free[0].iter().filter(|k| freeable(self, k)) {
            total_age += age(self, k.3);
            count += 1;
        }
        let mut reclaimed = 0u64;
        let mut freed = true;
        while reclaimed < target && freed && count > 0 {
            let age_threshold = total_age / count as f64;
            freed = false;
            let keys: Vec<Key> = self.free[0].iter().copied().collect();
            for k in keys {
                let b = &self.blocks[k.3 as usize];
                if freeable(self, &k) && !b.expandable && age(self, k.3) >= age_threshold {
                    freed = true;
                    reclaimed += k.1;
                    total_age -= age(self, k.3);
                    count -= 1;
                    self.release_block(k.3);
                }
            }
        }
    }

    /// `free` / `free_block`: the block returns to its pool, merged with free neighbours of the
    /// same segment.
    pub fn free(&mut self, i: BlockId) {
        let size = self.blocks[i as usize].size;
        self.blocks[i as usize].allocated = false;
        self.allocated -= size;
        let (prev, next) = (self.blocks[i as usize].prev, self.blocks[i as usize].next);
        for n in [prev, next].into_iter().flatten() {
            self.try_merge(i, n);
        }
        self.insert_free(i);
    }

    /// `try_merge_blocks`: `src`, a free neighbour in the same mapping state, is folded into
    /// `dst` (which is out of the pool).
    pub(super) fn try_merge(&mut self, dst: BlockId, src: BlockId) -> u64 {
        let s = self.blocks[src as usize].clone();
        if s.allocated || s.mapped != self.blocks[dst as usize].mapped {
            return 0;
        }
        if s.mapped {
            self.remove_free(src);
        } else {
            self.unmapped[pool_of(s.small)].remove(&(s.stream, s.addr, 0, src));
        }
        if self.blocks[dst as usize].prev == Some(src) {
            self.blocks[dst as usize].addr = s.addr;
            self.blocks[dst as usize].prev = s.prev;
            if let Some(p) = s.prev {
                self.blocks[p as usize].next = Some(dst);
            }
        } else {
            self.blocks[dst as usize].next = s.next;
            if let Some(n) = s.next {
                self.blocks[n as usize].prev = Some(dst);
            }
        }
        self.blocks[dst as usize].size += s.size;
        self.drop_block(src);
        s.size
    }

    /// The segments and their blocks, like `torch.cuda.memory_snapshot()` (unmapped address
    /// space of expandable segments left out).
    pub fn segments(&self) -> Vec<SegmentView> {
        let mut heads: Vec<(u64, BlockId)> = self
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.live && b.prev.is_none())
            .map(|(i, b)| (b.addr, i as BlockId))
            .collect();
        heads.sort_unstable();
        let mut out = Vec::new();
        for (_, h) in heads {
            let head = &self.blocks[h as usize];
            let mut seg = SegmentView {
                stream: head.stream,
                small: head.small,
                expandable: head.expandable,
                size: 0,
                blocks: Vec::new(),
            };
            let mut cur = Some(h);
            while let Some(i) = cur {
                let b = &self.blocks[i as usize];
                if b.mapped {
                    seg.size += b.size;
                    seg.blocks.push(BlockView {
                        size: b.size,
                        allocated: b.allocated,
                    });
                }
                cur = b.next;
            }
            if seg.size > 0 {
                out.push(seg);
            }
        }
        out
    }
}
