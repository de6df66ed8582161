//! The ordered sets of the allocator's pools (`std::set<Block*, Comparison>` in
//! `c10/cuda/CUDACachingAllocator.cpp`): keys kept sorted in a vector, searched by bisection.

/// Four ordered fields: `(stream, size, address, block)` for free blocks (`BlockComparatorSize`),
/// `(stream, address, 0, block)` for unmapped ranges (`BlockComparatorAddress`).
pub type Key = (u32, u64, u64, u32);

#[derive(Clone, Debug, Default)]
pub struct SortedSet(Vec<Key>);

impl SortedSet {
    fn lower_bound(&self, k: &Key) -> usize {
        self.0.partition_point(|x| x < k)
    }
    pub fn insert(&mut self, k: Key) {
        let i = self.lower_bound(&k);
        if self.0.get(i) != Some(&k) {
            self.0.insert(i, k);
        }
    }
    pub fn remove(&mut self, k: &Key) -> bool {
        match self.0.binary_search(k) {
            Ok(i) => {
                self.0.remove(i);
                true
            }
            Err(_) => false,
        }
    }
    pub fn contains(&self, k: &Key) -> bool {
        self.0.binary_search(k).is_ok()
    }
    /// The keys from `k` on (`lower_bound(k)` to the end), in order.
    pub fn from(&self, k: Key) -> impl DoubleEndedIterator<Item = &Key> {
        self.0[self.lower_bound(&k)..].iter()
    }
    /// The keys before `k`, in order.
    pub fn below(&self, k: Key) -> impl DoubleEndedIterator<Item = &Key> {
        self.0[..self.lower_bound(&k)].iter()
    }
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Key> {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_keys_ordered_and_unique() {
        let mut s = SortedSet::default();
        for k in [
            (0, 5, 1, 0),
            (0, 3, 2, 1),
            (1, 1, 0, 2),
            (0, 5, 0, 3),
            (0, 3, 2, 1),
        ] {
            s.insert(k);
        }
        let all: Vec<Key> = s.iter().copied().collect();
        assert_eq!(
            all,
            [(0, 3, 2, 1), (0, 5, 0, 3), (0, 5, 1, 0), (1, 1, 0, 2)]
        );
        assert_eq!(s.from((0, 4, 0, 0)).next(), Some(&(0, 5, 0, 3)));
        assert_eq!(
            s.below((0, 5, 0, 0)).copied().collect::<Vec<_>>(),
            [(0, 3, 2, 1)]
        );
        assert!(s.remove(&(0, 5, 0, 3)));
        assert!(!s.remove(&(0, 5, 0, 3)));
        assert!(!s.contains(&(0, 5, 0, 3)));
    }
}
