//! `expandable_segments:True` (Note [Expandable Segments] in `c10/cuda/CUDACachingAllocator.cpp`,
//! PyTorch 2.15): one segment of reserved address space per stream and pool, backed by physical
//! pages (2 MiB in the small pool, 20 MiB in the large one) only as far as needed. A request
//! that no cached block holds maps more pages at the lowest address where free and unmapped
//! space together fit it (`find_expandable_block`, `try_allocate_expandable_block`,
//! `map_block`); releasing unmaps the whole pages of free blocks (`unmap_block`).

use super::caching::{pool_of, Block, BlockId, CachingAllocator};
use super::sizes::{LARGE_BUFFER, SMALL_BUFFER};

/// Address space each expandable segment reserves: PyTorch reserves about the device's memory;
/// any size larger than what a replay maps behaves the same.
const ADDRESS_SPACE: u64 = 1 << 44;

fn page(small: bool) -> u64 {
    if small {
        SMALL_BUFFER
    } else {
        LARGE_BUFFER
    }
}

impl CachingAllocator {
    fn allocatable(&self, b: Option<BlockId>) -> Option<BlockId> {
        b.filter(|&i| {
            let b = &self.blocks[i as usize];
            b.live && !b.allocated
        })
    }

    /// `find_expandable_block`: the lowest unmapped range of the stream's segment that, with the
    /// free block just before it, has room for `size`; else a new segment.
    fn find_expandable_block(&mut self, small: bool, stream: u32, size: u64) -> BlockId {
        let p = pool_of(small);
        let candidates: Vec<BlockId> = self.unmapped[p]
            .from((stream, 0, 0, 0))
            .take_while(|k| k.0 == stream)
            .map(|k| k.3)
            .collect();
        for u in candidates {
            let c = self.allocatable(self.blocks[u as usize].prev).unwrap_or(u);
            let mut bytes = 0u64;
            let mut cur = Some(c);
            while bytes < size {
                match self.allocatable(cur) {
                    Some(i) => {
                        bytes += self.blocks[i as usize].size;
                        cur = self.blocks[i as usize].next;
                    }
                    None => break,
                }
            }
            if bytes >= size {
                return c;
            }
        }
        let ps = page(small);
        let addr = self.next_addr.div_ceil(ps) * ps;
        self.next_addr = addr + ADDRESS_SPACE;
        let id = self.new_block(Block {
            stream,
            size: ADDRESS_SPACE,
            addr,
            small,
            allocated: false,
            mapped: false,
            expandable: true,
            prev: None,
            next: None,
            gc_base: 0,
            live: true,
        });
        self.unmapped[p].insert((stream, addr, 0, id));
        id
    }

    /// `try_allocate_expandable_block`: maps pages until the candidate holds `size`; the block is
    /// taken out of the pool.
    pub(super) fn try_allocate_expandable_block(
        &mut self,
        small: bool,
        stream: u32,
        size: u64,
    ) -> Option<BlockId> {
        let mut candidate = self.find_expandable_block(small, stream, size);
        if !self.blocks[candidate as usize].mapped {
            let want = self.blocks[candidate as usize].size.min(size);
            candidate = self.map_block(candidate, want)?;
        }
        while self.blocks[candidate as usize].size < size {
            let remaining = size - self.blocks[candidate as usize].size;
            let next = self.blocks[candidate as usize].next?;
            let want = remaining.min(self.blocks[next as usize].size);
            candidate = self.map_block(next, want)?;
        }
        self.remove_free(candidate);
        Some(candidate)
    }

    /// `map_block`: backs the first `size` bytes of an unmapped block (whole pages), merges them
    /// with free neighbours and puts the result in the pool. Fails past the capacity.
    fn map_block(&mut self, to_map: BlockId, size: u64) -> Option<BlockId> {
        let b = self.blocks[to_map as usize].clone();
        let mapped = size.div_ceil(page(b.small)) * page(b.small);
        if self.reserved.saturating_add(mapped) > self.limit() {
            return None;
        }
        let p = pool_of(b.small);
        self.unmapped[p].remove(&(b.stream, b.addr, 0, to_map));
        self.blocks[to_map as usize].mapped = true;
        if mapped < b.size {
            let rest = self.new_block(Block {
                size: b.size - mapped,
                addr: b.addr + mapped,
                mapped: false,
                prev: Some(to_map),
                next: b.next,
                ..b.clone()
            });
            if let Some(n) = b.next {
                self.blocks[n as usize].prev = Some(rest);
            }
            self.blocks[to_map as usize].next = Some(rest);
            self.blocks[to_map as usize].size = mapped;
            self.unmapped[p].insert((b.stream, b.addr + mapped, 0, rest));
        }
        for n in [
            self.blocks[to_map as usize].prev,
            self.blocks[to_map as usize].next,
        ]
        .into_iter()
        .flatten()
        {
            self.try_merge(to_map, n);
        }
        self.insert_free(to_map);
        self.reserved += mapped;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        Some(to_map)
    }

    /// `unmap_block`: returns the whole pages inside a free block; its unaligned ends stay
    /// mapped as free blocks.
    pub(super) fn unmap_block(&mut self, i: BlockId) {
        let b = self.blocks[i as usize].clone();
        let ps = page(b.small);
        let begin = b.addr.div_ceil(ps) * ps;
        let end = (b.addr + b.size) / ps * ps;
        if end <= begin {
            return;
        }
        self.remove_free(i);
        if begin > b.addr {
            let before = self.new_block(Block {
                size: begin - b.addr,
                prev: b.prev,
                next: Some(i),
                ..b.clone()
            });
            if let Some(p) = b.prev {
                self.blocks[p as usize].next = Some(before);
            }
            self.blocks[i as usize].prev = Some(before);
            self.insert_free(before);
        }
        if b.addr + b.size > end {
            let after = self.new_block(Block {
                size: b.addr + b.size - end,
                addr: end,
                prev: Some(i),
                next: b.next,
                ..b.clone()
            });
            if let Some(n) = b.next {
                self.blocks[n as usize].prev = Some(after);
            }
            self.blocks[i as usize].next = Some(after);
            self.insert_free(after);
        }
        {
            let blk = &mut self.blocks[i as usize];
            blk.addr = begin;
            blk.size = end - begin;
            blk.mapped = false;
        }
        for n in [self.blocks[i as usize].prev, self.blocks[i as usize].next]
            .into_iter()
            .flatten()
        {
            self.try_merge(i, n);
        }
        let blk = &self.blocks[i as usize];
        self.unmapped[pool_of(blk.small)].insert((blk.stream, blk.addr, 0, i));
        self.reserved -= end - begin;
    }
}
