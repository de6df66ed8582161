//! The page's one [`Workbench`] as everything that reads it shares it: memos, the background
//! pump, the suggestions list. Any of them may be re-entered (a memo read inside another's
//! closure recomputes at once), so a shared borrow must never be assumed free.

use std::cell::RefCell;

use super::workbench::Workbench;

/// A [`Workbench`] that [`SharedWorkbench::with`] lends without ever panicking.
#[derive(Default)]
pub struct SharedWorkbench(RefCell<Workbench>);

impl SharedWorkbench {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `f` on the shared workbench, or, when a caller further up the stack holds it, on a
    /// scratch one. A plain `borrow_mut` would panic in that case, and with `panic = "abort"`
    /// the page would die; a lock (a `StoredValue`) would fail the same way. The workbench is a
    /// cache of deterministic simulations, so the scratch gives the same numbers, only without
    /// the cached models (it simulates again), and what it learns is dropped.
    pub fn with<R>(&self, f: impl FnOnce(&mut Workbench) -> R) -> R {
        match self.0.try_borrow_mut() {
            Ok(mut shared) => f(&mut shared),
            Err(_) => f(&mut Workbench::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;

    #[test]
    fn a_nested_call_gets_the_same_numbers_from_a_scratch_workbench() {
        let shared = SharedWorkbench::new();
        let plan = Plan::new("resnet18");
        let (outer, inner) = shared.with(|w| {
            let _ = w.model(&plan);
            let outer = w.numbers(&plan);
            // Re-entered while held: no panic, and the scratch knows no cached model.
            let inner = shared.with(|scratch| {
                assert_eq!(scratch.numbers(&plan), None);
                let _ = scratch.model(&plan);
                scratch.numbers(&plan)
            });
            (outer, inner)
        });
        assert!(outer.is_some());
        assert_eq!(outer, inner);
        // What the scratch simulated stayed with it; the shared one kept its own model.
        assert_eq!(shared.with(|w| w.simulations), 2);
    }
}
