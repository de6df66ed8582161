//! The allocator's size rules (`c10/cuda/CUDACachingAllocator.cpp`, PyTorch 2.15): request
//! rounding (`round_size`, `roundup_power2_next_division`), pool choice (`get_pool`), segment
//! size (`get_allocation_size`) and when a cached block is split (`should_split`).

use crate::estimator::units::ALLOCATOR_BLOCK;

/// `kMinBlockSize`: every size is rounded to at least 512 bytes.
pub const MIN_BLOCK: u64 = ALLOCATOR_BLOCK;
/// `kSmallSize`: the largest request served by the small pool (1 MiB).
pub const SMALL_SIZE: u64 = 1 << 20;
/// `kSmallBuffer`: small requests are packed into 2 MiB segments.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// `kLargeBuffer`: requests between 1 and 10 MiB are packed into 20 MiB segments.
pub const LARGE_BUFFER: u64 = 20 << 20;
/// `kMinLargeAlloc`: from 10 MiB on a request gets its own segment.
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// `kRoundLarge`: own segments are rounded up to 2 MiB.
pub const ROUND_LARGE: u64 = 2 << 20;

/// `roundup_power2_next_division`: the interval between two powers of two is cut into
/// `divisions` equal steps and the size rounded up to the next step.
pub fn roundup_power2_next_division(size: u64, divisions: u32) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    // `power2_floor >> (63 - countLeadingZeros(divisions))`: divisions rounded down to a power
    // of two.
    let step = floor >> (31 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let round_floor = size & !(step - 1);
    if round_floor == size {
        size
    } else {
        round_floor + step
    }
}

/// `round_size`: what a request of `size` bytes occupies in a block, with `divisions` from
/// `roundup_power2_divisions`.
pub fn round_size(size: u64, divisions: u32) -> u64 {
    if size < MIN_BLOCK {
        return MIN_BLOCK;
    }
    if divisions > 1 && size > MIN_BLOCK * divisions as u64 {
        roundup_power2_next_division(size, divisions)
    } else {
        size.div_ceil(MIN_BLOCK) * MIN_BLOCK
    }
}

/// `get_pool`: rounded requests up to 1 MiB come from the small pool.
pub fn is_small(rounded: u64) -> bool {
    rounded <= SMALL_SIZE
}

/// `get_allocation_size`: the segment `cudaMalloc` is asked for when no cached block fits.
pub fn allocation_size(rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

/// `should_split`: whether a block of `block` bytes handed out for `rounded` bytes keeps its
/// remainder as a free block. Small-pool and expandable blocks split down to 512 bytes; a large
/// block only when the request is below `max_split_size` and more than 1 MiB is left over.
pub fn should_split(
    block: u64,
    rounded: u64,
    small_or_expandable: bool,
    max_split_size: u64,
) -> bool {
    let remaining = block - rounded;
    if small_or_expandable {
        remaining >= MIN_BLOCK
    } else {
        rounded < max_split_size && remaining > SMALL_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_to_512_bytes() {
        assert_eq!(round_size(1, 0), 512);
        assert_eq!(round_size(512, 0), 512);
        assert_eq!(round_size(513, 0), 1024);
    }

    /// The PyTorch documentation's example (CUDA semantics, "roundup_power2_divisions"): with 4
    /// divisions a 1200 MiB request lands on the 1280 MiB step of [1024, 2048).
    #[test]
    fn power2_divisions_round_to_the_next_step() {
        assert_eq!(round_size(1200 << 20, 4), 1280 << 20);
        assert_eq!(round_size(1024 << 20, 4), 1024 << 20);
        // Below 512 B × divisions the plain 512-byte rounding applies.
        assert_eq!(round_size(1500, 4), 1536);
    }

    #[test]
    fn segments_by_request_size() {
        assert_eq!(allocation_size(512), SMALL_BUFFER);
        assert_eq!(allocation_size(SMALL_SIZE), SMALL_BUFFER);
        assert_eq!(allocation_size(SMALL_SIZE + 512), LARGE_BUFFER);
        assert_eq!(allocation_size((10 << 20) - 512), LARGE_BUFFER);
        assert_eq!(allocation_size(10 << 20), 10 << 20);
        assert_eq!(allocation_size((10 << 20) + 512), 12 << 20);
    }

    #[test]
    fn large_blocks_keep_remainders_over_1_mib() {
        assert!(should_split(LARGE_BUFFER, 2 << 20, false, u64::MAX));
        // 12 MiB segment for an 11 MiB request: 1 MiB left, not more, so no split.
        assert!(!should_split(12 << 20, 11 << 20, false, u64::MAX));
        assert!(should_split(SMALL_BUFFER, 512, true, u64::MAX));
        assert!(!should_split(LARGE_BUFFER, 5 << 20, false, 4 << 20));
    }
}
