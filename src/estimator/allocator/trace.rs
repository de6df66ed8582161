//! The malloc/free stream of a step, recorded by the step simulation, and its replay through
//! [`CachingAllocator`]: the largest reserved bytes, the fragmentation when allocated bytes peak,
//! and whether it fitted (after release-and-retry).

use super::caching::{CachingAllocator, Capacity, OutOfMemory, SegmentView};
use super::settings::AllocatorSettings;
use super::sizes::{LARGE_BUFFER, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER, SMALL_SIZE};
use crate::estimator::units::Bytes;

/// Names one allocation of a trace: the n-th `alloc` is handle n.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handle(u32);

impl Handle {
    /// A zero-byte tensor: PyTorch hands out no block for it (`malloc` is not called).
    pub const NONE: Handle = Handle(u32::MAX);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Alloc { bytes: u64, stream: u32 },
    Free(u32),
}

/// The allocations and frees of one step, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocTrace {
    events: Vec<Event>,
    allocs: u32,
    /// The requests plus 20 MiB each, saturating ([`AllocTrace::fits_address_space`]).
    bound: u64,
}

impl AllocTrace {
    /// `bytes` requested on the default stream.
    pub fn alloc(&mut self, bytes: u64) -> Handle {
        self.alloc_on(bytes, 0)
    }
    pub fn alloc_on(&mut self, bytes: u64, stream: u32) -> Handle {
        if bytes == 0 {
            return Handle::NONE;
        }
        self.events.push(Event::Alloc { bytes, stream });
        self.allocs += 1;
        self.bound = self
            .bound
            .saturating_add(bytes.saturating_add(super::sizes::LARGE_BUFFER));
        Handle(self.allocs - 1)
    }
    pub fn free(&mut self, h: Handle) {
        if h != Handle::NONE {
            self.events.push(Event::Free(h.0));
        }
    }
    pub fn len(&self) -> usize {
        self.events.len()
    }
    /// Whether every segment the replay could create fits 64-bit addresses: a segment is at
    /// most its request rounded to 2 MiB, or the 20 MiB buffer of a mid-sized one, so the sum
    /// of requests plus 20 MiB each bounds the address space the replay hands out.
    pub fn fits_address_space(&self) -> bool {
        self.bound < u64::MAX
    }
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
    /// Each event as `A <bytes>` or `F <bytes>` (the freed block's request), the form of a
    /// stream recorded from `torch.cuda.memory._snapshot()`'s device traces.
    pub fn describe(&self) -> Vec<String> {
        let mut sizes = Vec::with_capacity(self.allocs as usize);
        self.events
            .iter()
            .map(|e| match *e {
                Event::Alloc { bytes, .. } => {
                    sizes.push(bytes);
                    format!("A {bytes}")
                }
                Event::Free(id) => format!("F {}", sizes[id as usize]),
            })
            .collect()
    }
}

/// What the allocator did over a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocatorReport {
    /// `torch.cuda.max_memory_reserved()`.
    pub max_reserved: Bytes,
    /// `torch.cuda.max_memory_allocated()` as the allocator counts it (whole blocks).
    pub max_allocated: Bytes,
    /// Reserved bytes not allocated at the moment allocated bytes peaked.
    pub fragmentation_at_peak: Bytes,
    /// Index into the trace's events of that moment.
    pub peak_event: usize,
    /// The first request that did not fit even after releasing the cache; the replay carries on
    /// past the capacity so the figures say what the step would need.
    pub out_of_memory: Option<OutOfMemory>,
    /// Allocations that needed cached blocks released first.
    pub retries: u64,
}

fn run(
    trace: &AllocTrace,
    resident: &[u64],
    settings: AllocatorSettings,
    capacity: Option<Capacity>,
    stop_at: Option<usize>,
) -> (CachingAllocator, AllocatorReport) {
    let mut r = Replay::new(trace, resident, settings, capacity);
    r.advance(trace, usize::MAX, stop_at);
    r.finish()
}

/// A replay of a trace under way: the allocator's state, the blocks handed out so far and the
/// moment allocated bytes peaked. A caller that must answer input between slices of work (the
/// page) replays a long stream a slice of events at a time; [`replay`] runs it in one go.
#[derive(Clone, Debug)]
pub struct Replay {
    a: CachingAllocator,
    report: AllocatorReport,
    ids: Vec<u32>,
    /// Allocated and reserved bytes when allocated bytes peaked, and the event.
    peak: (u64, u64, usize),
    /// The next event to replay.
    next: usize,
}

impl Replay {
    /// The allocator after the `resident` allocations (made before the step and kept: library
    /// workspaces), before the trace's first event.
    pub fn new(
        trace: &AllocTrace,
        resident: &[u64],
        settings: AllocatorSettings,
        capacity: Option<Capacity>,
    ) -> Replay {
        let mut r = Replay {
            a: CachingAllocator::new(settings, capacity),
            report: AllocatorReport::default(),
            ids: Vec::with_capacity(trace.allocs as usize),
            peak: (0, 0, 0),
            next: 0,
        };
        for &b in resident {
            r.malloc(b, 0);
        }
        r.peak = (r.a.allocated(), r.a.reserved(), 0);
        r
    }

    fn malloc(&mut self, bytes: u64, stream: u32) -> u32 {
        self.a.malloc(bytes, stream).unwrap_or_else(|oom| {
            self.report.out_of_memory.get_or_insert(oom);
            self.a.unbounded = true;
            // An unbounded device always has room (and the error's Debug text would weigh on
            // the page).
            self.a
                .malloc(bytes, stream)
                .unwrap_or_else(|_| unreachable!())
        })
    }

    /// Replays up to `events` more events of `trace` (the one it was made for), stopping after
    /// event `stop_at`; whether the trace is done.
    pub fn advance(&mut self, trace: &AllocTrace, events: usize, stop_at: Option<usize>) -> bool {
        let end = self.next.saturating_add(events).min(trace.events.len());
        for k in self.next..end {
            match trace.events[k] {
                Event::Alloc { bytes, stream } => {
                    let id = self.malloc(bytes, stream);
                    self.ids.push(id);
                    if self.a.allocated() > self.peak.0 {
                        self.peak = (self.a.allocated(), self.a.reserved(), k);
                    }
                }
                Event::Free(h) => self.a.free(self.ids[h as usize]),
            }
            if stop_at == Some(k) {
                self.next = trace.events.len();
                return true;
            }
        }
        self.next = end;
        end == trace.events.len()
    }

    /// The allocator's state and what it did, once [`Replay::advance`] says the trace is done.
    pub fn finish(self) -> (CachingAllocator, AllocatorReport) {
        let Replay {
            a,
            mut report,
            peak,
            ..
        } = self;
        report.max_reserved = Bytes(a.peak_reserved());
        report.max_allocated = Bytes(a.peak_allocated());
        report.fragmentation_at_peak = Bytes(peak.1 - peak.0);
        report.peak_event = peak.2;
        report.retries = a.retries;
        (a, report)
    }
}

/// The segments the trace's live blocks would need at its worst moment if each pool packed them
/// perfectly: blocks up to 1 MiB in 2 MiB segments, up to 10 MiB in 20 MiB ones, larger ones
/// rounded to 2 MiB. A lower bound of what the allocator reserves, with no fragmentation, for
/// streams that are not replayed (a multi-GPU rank's).
pub fn packed_peak(trace: &AllocTrace) -> Bytes {
    let mut sizes: Vec<u64> = Vec::with_capacity(trace.allocs as usize);
    // Live bytes of the small, medium and large pools (the large ones already rounded).
    let mut live = [0u64; 3];
    let mut peak = 0u64;
    for e in &trace.events {
        let (b, add) = match *e {
            Event::Alloc { bytes, .. } => {
                sizes.push(bytes);
                (bytes, true)
            }
            Event::Free(h) => (sizes[h as usize], false),
        };
        let (pool, b) = match b {
            _ if b <= SMALL_SIZE => (0, b),
            _ if b <= MIN_LARGE_ALLOC => (1, b),
            _ => (2, b.div_ceil(ROUND_LARGE) * ROUND_LARGE),
        };
        live[pool] = if add { live[pool] + b } else { live[pool] - b };
        peak = peak.max(
            live[0].div_ceil(SMALL_BUFFER) * SMALL_BUFFER
                + live[1].div_ceil(LARGE_BUFFER) * LARGE_BUFFER
                + live[2],
        );
    }
    Bytes(peak)
}

/// Replays `trace` after the `resident` allocations (made before the step and kept: library
/// workspaces) on a device of `capacity` (`None`: unlimited).
pub fn replay(
    trace: &AllocTrace,
    resident: &[u64],
    settings: AllocatorSettings,
    capacity: Option<Capacity>,
) -> AllocatorReport {
    run(trace, resident, settings, capacity, None).1
}

/// The segment map when allocated bytes peak (a second replay up to that event, so the fast
/// path keeps no snapshots).
pub fn segment_map(
    trace: &AllocTrace,
    resident: &[u64],
    settings: AllocatorSettings,
    capacity: Option<Capacity>,
) -> Vec<SegmentView> {
    let peak = run(trace, resident, settings, capacity, None).1.peak_event;
    run(trace, resident, settings, capacity, Some(peak))
        .0
        .segments()
}
