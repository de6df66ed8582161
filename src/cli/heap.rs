//! The command-line tool's heap. A layout search builds and drops dozens of graphs, each some
//! 100,000 small vectors (a 128-expert model: 60,000 op records with their tensor lists); under
//! glibc's malloc a third of the search went to freeing them (consolidating free chunks, giving
//! pages back and faulting them in again). mimalloc frees small blocks into per-page lists;
//! with its purging off, freed pages stay mapped for the next graph of the same size, as a short
//! run of the tool wants. Built without transparent huge pages (the `no_thp` feature): the
//! kernel's zeroing of 2 MiB pages made a search's time vary by half again from run to run.
//! The CLI and the benchmarks that time it install the same heap.

/// The allocator the binaries install (`#[global_allocator] static H: Heap = Heap;`).
pub type Heap = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (the position of `mi_option_purge_delay` in
/// `enum mi_option_e`, `include/mimalloc.h` of mimalloc 3, vendored by libmimalloc-sys 0.1.49):
/// milliseconds before freed pages go back to the system, `-1` for never.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps freed pages for the rest of the run: with mimalloc's default (purged after a second),
/// the search spent more time in the kernel than glibc did.
pub fn keep_freed_pages() {
    // SAFETY: `mi_option_set` only stores an option value; any value is valid for this option.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option at that position is the purge delay: it reads mimalloc 3's default (1000 ms,
    /// `src/options.c`), and it holds the value set (a libmimalloc-sys that renumbered the enum fails here).
    #[test]
    fn the_purge_delay_is_the_option_set() {
        // SAFETY: reads an option value.
        let get = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(get(), 1000);
        keep_freed_pages();
        assert_eq!(get(), -1);
    }
}
