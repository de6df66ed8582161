//! The allocations and frees of one steady-state step, as the step simulation makes them, and
//! the two-step stream a training loop hands the CUDA caching allocator: the model and the
//! batch first, then the loop's first step (no `.grad`, no optimizer state until
//! `optimizer.step()` creates it after backward has freed the activations), then the steady
//! state every later step repeats. The first step matters because the allocator never returns
//! segments: where the optimizer state lands in step one decides what step two finds cached.

use super::allocator::{AllocTrace, Handle};

/// One block of a step: its id is the order of its `alloc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Alloc(u64),
    Free(u32),
}

/// A zero-byte tensor gets no block (PyTorch does not call `malloc` for it).
pub const NO_BLOCK: u32 = u32::MAX;

/// The stream of one step, with what it leaves open at its end.
#[derive(Clone, Debug, Default)]
pub struct StepStream {
    events: Vec<Ev>,
    allocs: u32,
    /// Event index where `optimizer.step()` starts (the first step creates its state there).
    optimizer_at: Option<usize>,
    /// Gradients stolen into `.grad`: alive until the next step's `zero_grad(set_to_none=True)`.
    grads: Vec<u32>,
    /// Blocks the loop holds past the step (the loss), dropped by its `del loss`.
    kept: Vec<u32>,
}

impl StepStream {
    pub fn alloc(&mut self, bytes: u64) -> u32 {
        if bytes == 0 {
            return NO_BLOCK;
        }
        self.events.push(Ev::Alloc(bytes));
        self.allocs += 1;
        self.allocs - 1
    }
    pub fn free(&mut self, id: u32) {
        if id != NO_BLOCK {
            self.events.push(Ev::Free(id));
        }
    }
    /// Marks where the optimizer step begins.
    pub fn optimizer_starts(&mut self) {
        self.optimizer_at = Some(self.events.len());
    }
    pub fn keep_as_grad(&mut self, id: u32) {
        if id != NO_BLOCK {
            self.grads.push(id);
        }
    }
    pub fn keep_past_step(&mut self, id: u32) {
        if id != NO_BLOCK {
            self.kept.push(id);
        }
    }

    /// The whole loop's stream: `resident` blocks (parameters, buffers, the batch) allocated
    /// before it, then two steps. `state` is the optimizer state the first step creates, in
    /// the order `_init_group` creates it; `grads` the parameters' `.grad` blocks when they
    /// persist across micro-batches (gradient accumulation: present from the first backward on,
    /// so allocated ahead of it here). `first`, when the loop's first step differs from this
    /// one: a loop that zeroes `.grad` in place, whose first backward steals the gradients into
    /// `.grad` and keeps them.
    pub fn two_steps(
        &self,
        first: Option<&StepStream>,
        resident: &[u64],
        state: &[u64],
        grads: Option<&[u64]>,
    ) -> AllocTrace {
        let mut t = AllocTrace::default();
        for &b in resident.iter().chain(grads.unwrap_or(&[])) {
            t.alloc(b);
        }
        let one = first.unwrap_or(self);
        let h = one.replay_into(&mut t, Some(state));
        if grads.is_none() && first.is_none() {
            for &id in &self.grads {
                t.free(h[id as usize]);
            }
        }
        self.replay_into(&mut t, None);
        t
    }

    /// Appends one step to `t`; returns the trace handle of each of its blocks.
    fn replay_into(&self, t: &mut AllocTrace, state: Option<&[u64]>) -> Vec<Handle> {
        let mut h: Vec<Handle> = Vec::with_capacity(self.allocs as usize);
        for (k, e) in self.events.iter().enumerate() {
            if self.optimizer_at == Some(k) {
                for &b in state.unwrap_or(&[]) {
                    t.alloc(b);
                }
            }
            match *e {
                Ev::Alloc(b) => h.push(t.alloc(b)),
                Ev::Free(id) => t.free(h[id as usize]),
            }
        }
        if self.optimizer_at.is_none_or(|k| k >= self.events.len()) {
            for &b in state.unwrap_or(&[]) {
                t.alloc(b);
            }
        }
        for &id in &self.kept {
            t.free(h[id as usize]);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::allocator::{replay, AllocatorSettings};

    /// A 4 MiB parameter's 20 MiB segment takes the first step's gradient, optimizer state and
    /// temporary; the 30 MiB activation gets its own segment, which the second step finds
    /// cached: nothing new is reserved after the first step.
    #[test]
    fn first_step_state_lands_in_freed_activations() {
        let mut s = StepStream::default();
        let act = s.alloc(30 << 20);
        let grad = s.alloc(4 << 20);
        s.keep_as_grad(grad);
        s.free(act);
        s.optimizer_starts();
        let tmp = s.alloc(4 << 20);
        s.free(tmp);
        let t = s.two_steps(None, &[4 << 20], &[4 << 20, 4 << 20], None);
        let r = replay(&t, &[], AllocatorSettings::default(), None);
        assert_eq!(r.max_reserved.0, (20 << 20) + (30 << 20));
        // The parameter; the first step with its two state blocks; `.grad` set to None; the
        // second step.
        assert_eq!(t.len(), 1 + (5 + 2) + 1 + 5);
    }

    #[test]
    fn zero_bytes_make_no_block() {
        let mut s = StepStream::default();
        assert_eq!(s.alloc(0), NO_BLOCK);
        s.free(NO_BLOCK);
        s.keep_as_grad(NO_BLOCK);
        assert!(s.two_steps(None, &[], &[], None).is_empty());
    }
}
