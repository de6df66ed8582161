//! Behaviours PyTorch's own allocator tests (`test/test_cuda.py`, PyTorch 2.15) and the
//! allocator's header comment (`c10/cuda/CUDACachingAllocator.cpp`) assert, replayed.

use super::caching::{CachingAllocator, Capacity};
use super::settings::AllocatorSettings;
use super::sizes::{LARGE_BUFFER, SMALL_BUFFER};
use super::trace::{replay, segment_map, AllocTrace};
use crate::estimator::units::Bytes;

const MIB: u64 = 1 << 20;

fn fresh() -> CachingAllocator {
    CachingAllocator::new(AllocatorSettings::default(), None)
}

/// Header comment: "Small requests are packed into 2MB buffers".
#[test]
fn one_byte_reserves_a_small_segment() {
    let mut a = fresh();
    let b = a.malloc(1, 0).unwrap();
    assert_eq!(a.block_size(b), 512);
    assert_eq!(a.reserved(), SMALL_BUFFER);
    // Further small requests split the same segment.
    a.malloc(1000, 0).unwrap();
    assert_eq!(a.reserved(), SMALL_BUFFER);
    assert_eq!(a.segments().len(), 1);
}

/// Header comment: "requests between 1MB and 10MB will allocate and split a 20MB block";
/// from 10 MiB on the segment is the request rounded up to 2 MiB.
#[test]
fn medium_requests_reserve_20_mib_and_large_ones_their_size() {
    let mut a = fresh();
    a.malloc(MIB + 1, 0).unwrap();
    assert_eq!(a.reserved(), LARGE_BUFFER);
    let seg = &a.segments()[0];
    assert_eq!(
        seg.blocks.len(),
        2,
        "split: the request and a free remainder"
    );
    assert_eq!(seg.blocks[0].size, MIB + 512);
    let mut a = fresh();
    a.malloc(11 * MIB, 0).unwrap();
    assert_eq!(a.reserved(), 12 * MIB);
    // 1 MiB left over is not more than kSmallSize: the block is not split, and
    // `allocated_bytes` counts all of it.
    assert_eq!(a.allocated(), 12 * MIB);
}

/// `test_memory_snapshot`: a freed small block is reused from the segment's start, so the third
/// tensor becomes the second block of the one segment.
#[test]
fn freed_small_blocks_are_reused_in_place() {
    let mut a = fresh();
    let first = a.malloc(2 * 311 * 411 * 4, 0).unwrap();
    a.free(first);
    let _unused = a.malloc(310 * 410 * 4, 0).unwrap();
    let _x = a.malloc(311 * 411 * 4, 0).unwrap();
    let segs = a.segments();
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].size, SMALL_BUFFER);
    assert_eq!(
        segs[0].blocks[1].size,
        (311 * 411 * 4u64).div_ceil(512) * 512
    );
    assert!(segs[0].blocks[1].allocated);
}

/// Freed neighbours merge back into one block that a larger request can use.
#[test]
fn free_neighbours_merge() {
    let mut a = fresh();
    let x = a.malloc(3 * MIB, 0).unwrap();
    let y = a.malloc(3 * MIB, 0).unwrap();
    a.free(x);
    a.free(y);
    assert_eq!(a.segments()[0].blocks.len(), 1);
    a.malloc(19 * MIB, 0).unwrap();
    assert_eq!(
        a.reserved(),
        LARGE_BUFFER,
        "served by the merged 20 MiB block"
    );
}

/// A cached large block serves a smaller request (best fit, split) unless it is oversize
/// (`max_split_size_mb`): then it only serves requests within `max_non_split_rounding` of it.
#[test]
fn oversize_blocks_are_not_split() {
    let mut a = fresh();
    let big = a.malloc(100 * MIB, 0).unwrap();
    a.free(big);
    a.malloc(50 * MIB, 0).unwrap();
    assert_eq!(a.reserved(), 100 * MIB, "reused and split");

    let capped = AllocatorSettings::parse("max_split_size_mb:64").unwrap();
    let mut a = CachingAllocator::new(capped, None);
    let big = a.malloc(100 * MIB, 0).unwrap();
    a.free(big);
    a.malloc(50 * MIB, 0).unwrap();
    assert_eq!(
        a.reserved(),
        150 * MIB,
        "an oversize block never serves a small request"
    );

    let mut a = CachingAllocator::new(capped, None);
    let big = a.malloc(100 * MIB, 0).unwrap();
    a.free(big);
    let near = a.malloc(90 * MIB, 0).unwrap();
    assert_eq!(a.reserved(), 100 * MIB);
    assert_eq!(a.block_size(near), 100 * MIB, "served whole, not split");
    a.free(near);
    a.malloc(80 * MIB, 0).unwrap();
    assert_eq!(
        a.reserved(),
        180 * MIB,
        "100 MiB is 20 MiB or more above 80 MiB"
    );
}

/// Best fit: of two cached blocks the smaller one that holds the request is used.
#[test]
fn best_fit_takes_the_smallest_block_that_holds() {
    let mut a = fresh();
    let x = a.malloc(40 * MIB, 0).unwrap();
    let y = a.malloc(30 * MIB, 0).unwrap();
    a.free(x);
    a.free(y);
    let z = a.malloc(25 * MIB, 0).unwrap();
    assert_eq!(a.reserved(), 70 * MIB);
    let segs = a.segments();
    let used = segs.iter().find(|s| s.blocks[0].allocated).unwrap();
    assert_eq!(used.size, 30 * MIB);
    assert_eq!(
        a.block_size(z),
        25 * MIB,
        "the 5 MiB left over is split off"
    );
    assert_eq!(used.blocks.len(), 2);
}

/// Streams have their own pools: a block freed on one stream does not serve another.
#[test]
fn pools_are_per_stream() {
    let mut a = fresh();
    let x = a.malloc(4 * MIB, 1).unwrap();
    a.free(x);
    a.malloc(4 * MIB, 0).unwrap();
    assert_eq!(a.reserved(), 2 * LARGE_BUFFER);
}

/// `torch.cuda.empty_cache()` returns only segments with nothing allocated.
#[test]
fn empty_cache_releases_only_free_segments() {
    let mut a = fresh();
    let s1 = a.malloc(1000, 0).unwrap();
    let _s2 = a.malloc(1000, 0).unwrap();
    let l = a.malloc(30 * MIB, 0).unwrap();
    a.free(l);
    a.free(s1);
    assert_eq!(a.reserved(), SMALL_BUFFER + 30 * MIB);
    a.empty_cache();
    assert_eq!(
        a.reserved(),
        SMALL_BUFFER,
        "the small segment still holds a tensor"
    );
    assert_eq!(a.peak_reserved(), SMALL_BUFFER + 30 * MIB);
}

/// `test_out_of_memory_retry`: half the device cannot be allocated twice, but once the first
/// tensor is freed the second fits; a request of another size fits after the cached segment is
/// released (the retry path).
#[test]
fn fits_after_release_and_retry() {
    // The CUDA context takes part of the device, which is why half of it fits only once.
    let total = 1000 * MIB;
    let cap = Some(Capacity {
        total,
        free: total - 100 * MIB,
    });
    let mut a = CachingAllocator::new(AllocatorSettings::default(), cap);
    let half = 500 * MIB;
    let x = a.malloc(half, 0).unwrap();
    assert!(a.malloc(half, 0).is_err());
    a.free(x);
    let retries = a.retries;
    let y = a.malloc(half, 0).unwrap();
    assert_eq!(a.retries, retries, "the cached block served it");
    a.free(y);
    a.malloc(600 * MIB, 0).unwrap();
    assert_eq!(a.retries, retries + 1);
    assert_eq!(a.reserved(), 600 * MIB);
}

/// `test_set_per_process_memory_fraction`: with a fraction of 0.5 just under half the device
/// fits and half of it does not.
#[test]
fn memory_fraction_bounds_the_allocator() {
    let total = 1 << 34;
    let s = AllocatorSettings {
        memory_fraction: Some(0.5),
        ..AllocatorSettings::default()
    };
    let mut a = CachingAllocator::new(s, Some(Capacity { total, free: total }));
    let ok = a.malloc((total as f64 * 0.499) as u64, 0).unwrap();
    a.free(ok);
    a.empty_cache();
    assert!(a.malloc(total / 2 + 1, 0).is_err());
}

/// `test_allocator_settings`: with `roundup_power2_divisions:4` an 84 MiB tensor takes 96 MiB.
#[test]
fn power2_divisions_round_blocks() {
    let s = AllocatorSettings::parse("roundup_power2_divisions:4").unwrap();
    let mut a = CachingAllocator::new(s, None);
    a.malloc(4 * 21 * MIB, 0).unwrap();
    assert_eq!(a.allocated(), 96 * MIB);
}

/// `garbage_collection_threshold` (with a memory fraction): above the threshold, cached unsplit
/// blocks go back before a new segment is taken, even though the device has room.
#[test]
fn garbage_collection_releases_old_blocks() {
    let total = 1000 * MIB;
    let cap = Some(Capacity { total, free: total });
    let run = |conf: &str| {
        let mut s = AllocatorSettings::parse(conf).unwrap();
        s.memory_fraction = Some(1.0);
        let mut a = CachingAllocator::new(s, cap);
        let xs: Vec<_> = (0..3).map(|_| a.malloc(100 * MIB, 0).unwrap()).collect();
        for x in xs {
            a.free(x);
        }
        a.malloc(150 * MIB, 0).unwrap();
        a.reserved()
    };
    assert_eq!(run(""), 450 * MIB);
    assert_eq!(run("garbage_collection_threshold:0.2"), 150 * MIB);
}

/// Note [Expandable Segments]: one segment per stream grows in place by 20 MiB pages, so two
/// 30 MiB tensors take 60 MiB in one segment instead of two segments of 30 MiB.
#[test]
fn expandable_segments_grow_in_place() {
    let s = AllocatorSettings::parse("expandable_segments:True").unwrap();
    let mut a = CachingAllocator::new(s, None);
    let x = a.malloc(30 * MIB, 0).unwrap();
    assert_eq!(a.reserved(), 40 * MIB);
    a.malloc(30 * MIB, 0).unwrap();
    assert_eq!(a.reserved(), 60 * MIB);
    let segs = a.segments();
    assert_eq!(segs.len(), 1);
    assert!(segs[0].expandable);
    assert_eq!(segs[0].size, 60 * MIB);
    // Freeing and emptying the cache unmaps the first tensor's whole pages only.
    a.free(x);
    a.empty_cache();
    assert_eq!(a.reserved(), 40 * MIB);
    // Small requests map 2 MiB pages of their own segment.
    a.malloc(1000, 0).unwrap();
    assert_eq!(a.reserved(), 40 * MIB + SMALL_BUFFER);
}

/// Expandable segments avoid the slivers the N+1 batch pattern leaves (the Note's rationale):
/// growing tensors tile one segment.
#[test]
fn expandable_segments_reserve_less_for_growing_sizes() {
    let mut t = AllocTrace::default();
    for n in 10..20u64 {
        let h = t.alloc(n * 3 * MIB);
        let k = t.alloc(n * 5 * MIB);
        t.free(h);
        t.free(k);
    }
    let plain = replay(&t, &[], AllocatorSettings::default(), None);
    let exp = replay(
        &t,
        &[],
        AllocatorSettings::parse("expandable_segments:True").unwrap(),
        None,
    );
    assert!(exp.max_reserved < plain.max_reserved);
}

/// The replay reports the peak, the fragmentation there and the segment map.
#[test]
fn replay_reports_the_peak() {
    let mut t = AllocTrace::default();
    let a = t.alloc(3 * MIB);
    let b = t.alloc(5 * MIB);
    t.free(a);
    let _c = t.alloc(30 * MIB);
    t.free(b);
    let r = replay(&t, &[MIB], AllocatorSettings::default(), None);
    // 2 MiB small segment (the resident 1 MiB), 20 MiB for 3 + 5 MiB, 30 MiB of its own.
    assert_eq!(r.max_reserved, Bytes(52 * MIB));
    assert_eq!(r.max_allocated, Bytes(MIB + 35 * MIB));
    assert_eq!(r.fragmentation_at_peak, Bytes(52 * MIB - 36 * MIB));
    assert!(r.out_of_memory.is_none());
    let map = segment_map(&t, &[MIB], AllocatorSettings::default(), None);
    assert_eq!(map.iter().map(|s| s.size).sum::<u64>(), 52 * MIB);
    let cap = Some(Capacity {
        total: 40 * MIB,
        free: 40 * MIB,
    });
    let r = replay(&t, &[MIB], AllocatorSettings::default(), cap);
    assert!(r.out_of_memory.is_some());
    assert_eq!(
        r.max_reserved,
        Bytes(52 * MIB),
        "carried on past the device"
    );
}

/// The bookkeeping holds over a long random stream: segments add up to the reserved bytes,
/// allocated blocks to the allocated bytes, no two free neighbours are left unmerged, and every
/// free block is findable in its pool.
#[test]
fn invariants_hold_over_a_random_stream() {
    for conf in ["", "expandable_segments:True", "max_split_size_mb:64"] {
        let mut a = CachingAllocator::new(AllocatorSettings::parse(conf).unwrap(), None);
        let mut live = Vec::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for step in 0..5000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if !x.is_multiple_of(3) || live.is_empty() {
                let size = match x % 4 {
                    0 => x % (1 << 20),
                    1 => x % (10 << 20),
                    _ => x % (200 << 20),
                };
                live.push(a.malloc(size + 1, 0).unwrap());
            } else {
                let i = (x >> 8) as usize % live.len();
                a.free(live.swap_remove(i));
            }
            if step.is_multiple_of(97) {
                let segs = a.segments();
                assert_eq!(
                    segs.iter().map(|s| s.size).sum::<u64>(),
                    a.reserved(),
                    "{conf}"
                );
                let alloc: u64 = segs
                    .iter()
                    .flat_map(|s| &s.blocks)
                    .filter(|b| b.allocated)
                    .map(|b| b.size)
                    .sum();
                assert_eq!(alloc, a.allocated(), "{conf}");
                for s in &segs {
                    for w in s.blocks.windows(2) {
                        assert!(w[0].allocated || w[1].allocated, "{conf}: unmerged");
                    }
                }
                let free: u64 = a.free.iter().flat_map(|s| s.iter()).map(|k| k.1).sum();
                assert_eq!(free, a.reserved() - a.allocated(), "{conf}");
            }
        }
        for b in live {
            a.free(b);
        }
        a.empty_cache();
        assert_eq!(a.reserved(), 0, "{conf}");
    }
}

/// Each pool's live blocks in whole segments, at the worst moment of the stream: 2 MiB for the
/// small block, 20 MiB for the 3 MiB one, the large one rounded to 2 MiB; freeing the large one
/// first leaves the peak where it was.
#[test]
fn packed_peak_rounds_each_pool_to_its_segments() {
    let mut t = AllocTrace::default();
    let _small = t.alloc(512);
    let _medium = t.alloc(3 << 20);
    let large = t.alloc((30 << 20) + 1);
    t.free(large);
    let _again = t.alloc(1 << 20);
    assert_eq!(
        super::packed_peak(&t).0,
        (2 << 20) + (20 << 20) + (32 << 20)
    );
}
