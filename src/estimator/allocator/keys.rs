//! The ordered sets of the allocator's pools (`std::set<Block*, Comparison>` in
//! `c10/cuda/CUDACachingAllocator.cpp`). A large model's step leaves many thousands of cached
//! blocks in a pool, so one sorted vector, whose inserts and removals move the whole tail, made
//! the replay quadratic (an unrolled LSTM over 16k steps took a minute); a B-tree weighs about
//! 3.5 KB gzip on the page. The keys are kept in sorted runs of at most `2 × RUN` instead: a
//! search bisects the runs, then one run, and an insert or removal moves at most one run.

/// Four ordered fields: `(stream, size, address, block)` for free blocks (`BlockComparatorSize`),
/// `(stream, address, 0, block)` for unmapped ranges (`BlockComparatorAddress`). The first three
/// are packed into one `u128` (16, 56 and 56 bits), so that the searches, which dominate the
/// replay of a large step, compare two words instead of a tuple field by field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    ord: u128,
    /// The block (never needed to order: addresses are unique within a pool).
    pub block: u32,
}

/// The largest size or address a key holds (64 PiB: far beyond any device's address space).
const FIELD: u64 = (1 << 56) - 1;

impl Key {
    pub fn new(stream: u32, first: u64, second: u64, block: u32) -> Key {
        debug_assert!(stream <= u16::MAX as u32 && first <= FIELD && second <= FIELD);
        Key {
            ord: (u128::from(stream.min(u16::MAX as u32)) << 112)
                | (u128::from(first.min(FIELD)) << 56)
                | u128::from(second.min(FIELD)),
            block,
        }
    }
    pub fn stream(&self) -> u32 {
        (self.ord >> 112) as u32
    }
    /// The size (free blocks) or the address (unmapped ranges).
    pub fn first(&self) -> u64 {
        ((self.ord >> 56) as u64) & FIELD
    }
}

/// Half the longest run: a full run splits in two.
const RUN: usize = 128;

/// Sorted, non-empty runs in order: every key of a run is below every key of the next. `last`
/// holds each run's largest key, contiguous, so a search bisects it without touching the runs.
#[derive(Clone, Debug, Default)]
pub struct SortedSet {
    runs: Vec<Vec<Key>>,
    last: Vec<Key>,
}

impl SortedSet {
    /// The run that holds `k` or would (the first whose last key is not below `k`; the last run
    /// when `k` is above them all), and `k`'s lower bound in it.
    fn locate(&self, k: &Key) -> (usize, usize) {
        let r = self
            .last
            .partition_point(|x| x < k)
            .min(self.runs.len().saturating_sub(1));
        let i = self
            .runs
            .get(r)
            .map_or(0, |run| run.partition_point(|x| x < k));
        (r, i)
    }
    pub fn insert(&mut self, k: Key) {
        if self.runs.is_empty() {
            self.runs.push(vec![k]);
            self.last.push(k);
            return;
        }
        let (r, i) = self.locate(&k);
        let run = &mut self.runs[r];
        if run.get(i) == Some(&k) {
            return;
        }
        run.insert(i, k);
        if run.len() > 2 * RUN {
            let tail = run.split_off(RUN);
            self.last[r] = run[RUN - 1];
            self.last.insert(r + 1, tail[tail.len() - 1]);
            self.runs.insert(r + 1, tail);
        } else {
            self.last[r] = run[run.len() - 1];
        }
    }
    pub fn remove(&mut self, k: &Key) -> bool {
        let (r, i) = self.locate(k);
        let Some(run) = self.runs.get_mut(r) else {
            return false;
        };
        if run.get(i) != Some(k) {
            return false;
        }
        run.remove(i);
        match run.last() {
            Some(&l) => self.last[r] = l,
            None => {
                self.runs.remove(r);
                self.last.remove(r);
            }
        }
        true
    }
    pub fn contains(&self, k: &Key) -> bool {
        let (r, i) = self.locate(k);
        self.runs.get(r).and_then(|run| run.get(i)) == Some(k)
    }
    /// The keys from `k` on (`lower_bound(k)` to the end), in order.
    pub fn from(&self, k: Key) -> impl DoubleEndedIterator<Item = &Key> {
        let (r, i) = self.locate(&k);
        let head = self.runs.get(r).map_or(&[][..], |run| &run[i..]);
        let rest = self.runs.get(r + 1..).unwrap_or(&[]);
        head.iter().chain(rest.iter().flatten())
    }
    /// The keys before `k`, in order.
    pub fn below(&self, k: Key) -> impl DoubleEndedIterator<Item = &Key> {
        let (r, i) = self.locate(&k);
        let tail = self.runs.get(r).map_or(&[][..], |run| &run[..i]);
        self.runs[..r].iter().flatten().chain(tail.iter())
    }
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Key> {
        self.runs.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a B-tree over many inserts and removals that split and empty runs.
    #[test]
    fn runs_behave_as_one_ordered_set() {
        use std::collections::BTreeSet;
        let mut s = SortedSet::default();
        let mut b = BTreeSet::new();
        let mut x: u64 = 12345;
        for step in 0..20_000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = Key::new((x >> 60) as u32 % 2, (x >> 20) % 700, x % 5, step % 7);
            if x.is_multiple_of(3) {
                assert_eq!(s.remove(&k), b.remove(&k), "{step}");
            } else {
                s.insert(k);
                b.insert(k);
            }
            if step.is_multiple_of(997) {
                assert!(s.iter().copied().eq(b.iter().copied()));
                let probe = Key::new(1, 350, 2, 3);
                assert!(s.from(probe).copied().eq(b.range(probe..).copied()));
                assert!(s
                    .below(probe)
                    .rev()
                    .copied()
                    .eq(b.range(..probe).rev().copied()));
                assert_eq!(s.contains(&probe), b.contains(&probe));
            }
        }
        assert!(s
            .runs
            .iter()
            .all(|run| !run.is_empty() && run.len() <= 2 * RUN));
        assert!(s
            .runs
            .iter()
            .zip(&s.last)
            .all(|(run, l)| run.last() == Some(l)));
    }

    #[test]
    fn keeps_keys_ordered_and_unique() {
        let k = Key::new;
        let mut s = SortedSet::default();
        for key in [
            k(0, 5, 1, 0),
            k(0, 3, 2, 1),
            k(1, 1, 0, 2),
            k(0, 5, 0, 3),
            k(0, 3, 2, 1),
        ] {
            s.insert(key);
        }
        let all: Vec<Key> = s.iter().copied().collect();
        assert_eq!(
            all,
            [k(0, 3, 2, 1), k(0, 5, 0, 3), k(0, 5, 1, 0), k(1, 1, 0, 2)]
        );
        assert_eq!(s.from(k(0, 4, 0, 0)).next(), Some(&k(0, 5, 0, 3)));
        assert_eq!(
            s.below(k(0, 5, 0, 0)).copied().collect::<Vec<_>>(),
            [k(0, 3, 2, 1)]
        );
        assert!(s.remove(&k(0, 5, 0, 3)));
        assert!(!s.remove(&k(0, 5, 0, 3)));
        assert!(!s.contains(&k(0, 5, 0, 3)));
    }
}
