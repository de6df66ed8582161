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

/// How a loop's first step differs from the steady step [`StepStream::two_steps`] replays.
#[derive(Clone, Copy, Debug)]
pub enum StepOne<'a> {
    /// One micro-batch per step, `.grad` set to None before each: every step is the same, and
    /// the gradients its backward steals into `.grad` go at the next step's `zero_grad`.
    Same,
    /// A loop that zeroes `.grad` in place: step one (this stream) has no `.grad` yet, so its
    /// backward steals the gradients among the activations' blocks, and they stay.
    Whole(&'a StepStream),
    /// Gradient accumulation: a step's first micro-batch (`first`, no optimizer) finds no
    /// `.grad`, steals its gradients and keeps them; the later ones (the steady stream) add
    /// into them in place. With `every_step` (`set_to_none=True`) every step begins so; else
    /// (zeroed in place) only the loop's first.
    FirstMicroBatch {
        first: &'a StepStream,
        every_step: bool,
    },
}

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

    /// The whole loop's stream: `start` (what came before the loop, e.g. the model's
    /// initialisation), then the `resident` blocks (parameters, buffers, the batch), then two
    /// steps of which this stream is the steady one. `state` is the optimizer state the first
    /// step creates, in the order `_init_group` creates it; `one` says how step one differs.
    pub fn two_steps(
        &self,
        one: StepOne<'_>,
        start: AllocTrace,
        resident: &[u64],
        state: &[u64],
    ) -> AllocTrace {
        let mut t = start;
        for &b in resident {
            t.alloc(b);
        }
        match one {
            StepOne::Same => {
                let h = self.replay_into(&mut t, Some(state));
                for &id in &self.grads {
                    t.free(h[id as usize]);
                }
            }
            StepOne::Whole(first) => {
                first.replay_into(&mut t, Some(state));
            }
            StepOne::FirstMicroBatch { first, every_step } => {
                let h = first.replay_into(&mut t, None);
                self.replay_into(&mut t, Some(state));
                if every_step {
                    for &id in &first.grads {
                        t.free(h[id as usize]);
                    }
                    first.replay_into(&mut t, None);
                }
            }
        }
        self.replay_into(&mut t, None);
        t
    }

    /// Appends a pass that holds nothing past itself (a validation forward under
    /// `torch.no_grad()`): its `inputs` are allocated first and freed last.
    pub fn append_pass(&self, t: &mut AllocTrace, inputs: &[u64]) {
        let held: Vec<Handle> = inputs.iter().map(|&b| t.alloc(b)).collect();
        self.replay_into(t, None);
        for h in held {
            t.free(h);
        }
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
        let t = s.two_steps(
            StepOne::Same,
            AllocTrace::default(),
            &[4 << 20],
            &[4 << 20, 4 << 20],
        );
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
        assert!(s
            .two_steps(StepOne::Same, AllocTrace::default(), &[], &[])
            .is_empty());
    }
}
