//! The ordered sets of the allocator's pools (`std::set<Block*, Comparison>` in
//! `c10/cuda/CUDACachingAllocator.cpp`). A large model's step leaves many thousands of cached
//! blocks in a pool, so one sorted vector, whose inserts and removals move the whole tail, made
//! the replay quadratic (an unrolled LSTM over 16k steps took a minute); a B-tree weighs about
//! 3.5 KB gzip on the page. The keys are kept in sorted runs of at most `2 × RUN` instead: a
//! search bisects the runs, then one run, and an insert or removal moves at most one run.

/// Four ordered fields: `(stream, size, address, block)` for free blocks (`BlockComparatorSize`),
/// `(stream, address, 0, block)` for unmapped ranges (`BlockComparatorAddress`).
pub type Key = (u32, u64, u64, u32);

/// Half the longest run: a full run splits in two. Measured against 16, 64 and 128 on the
/// largest mixtures of experts' replays (DeepSeek-V3 and Qwen3-30B-A3B at 4096 tokens): 32
/// moves the least, 10 % less time than 128; an unrolled LSTM is the same at each.
const RUN: usize = 32;

/// Sorted, non-empty runs in order: every key of a run is below every key of the next. `last`
/// holds each run's largest key, contiguous, so a search bisects it without touching the runs.
#[derive(Clone, Debug, Default)]
pub struct SortedSet {
    runs: Vec<Vec<Key>>,
    last: Vec<Key>,
}

/// `a < b` in the tuple's order. Written out because the size-optimised builds (the page's and
/// the CLI's) call the standard library's tuple comparison out of line, once per probe of every
/// search: a third of a large model's replay.
#[inline(always)]
fn below(a: &Key, b: &Key) -> bool {
    if a.0 != b.0 {
        return a.0 < b.0;
    }
    if a.1 != b.1 {
        return a.1 < b.1;
    }
    if a.2 != b.2 {
        return a.2 < b.2;
    }
    a.3 < b.3
}

/// The number of leading keys of sorted `keys` below `k` (`partition_point`).
fn lower_bound(keys: &[Key], k: &Key) -> usize {
    let (mut lo, mut hi) = (0, keys.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(&keys[mid], k) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

impl SortedSet {
    /// The run that holds `k` or would (the first whose last key is not below `k`; the last run
    /// when `k` is above them all), and `k`'s lower bound in it.
    fn locate(&self, k: &Key) -> (usize, usize) {
        let r = lower_bound(&self.last, k).min(self.runs.len().saturating_sub(1));
        let i = self.runs.get(r).map_or(0, |run| lower_bound(run, k));
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
            let k: Key = ((x >> 60) as u32 % 2, (x >> 20) % 700, x % 5, step % 7);
            if x.is_multiple_of(3) {
                assert_eq!(s.remove(&k), b.remove(&k), "{step}");
            } else {
                s.insert(k);
                b.insert(k);
            }
            if step.is_multiple_of(997) {
                assert!(s.iter().copied().eq(b.iter().copied()));
                let probe: Key = (1, 350, 2, 3);
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
