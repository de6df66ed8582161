//! The page's one [`Workbench`]: a thread-local, because its models are `Rc`s and Leptos's
//! signals want `Send` values.

use std::cell::RefCell;

use crate::ui::logic::workbench::Workbench;

thread_local! {
    static WB: RefCell<Workbench> = RefCell::new(Workbench::new());
}

/// Runs `f` on the page's workbench.
///
/// Never panics, even when re-entered: memos call this, and a memo read inside `f` (directly,
/// or through a signal whose subscribers recompute at once) would run another memo's `wb`
/// while this one holds the workbench. A plain `borrow_mut` would then panic, and with
/// `panic = "abort"` the page would die. Here the inner call finds the workbench busy and runs
/// on a scratch workbench instead: the workbench is a cache of deterministic simulations, so
/// the scratch gives the same numbers, only without the cached models (it simulates again), and
/// what the scratch learns is dropped. A `StoredValue` would not help: its lock, re-entered,
/// fails the same way.
pub fn wb<R>(f: impl FnOnce(&mut Workbench) -> R) -> R {
    WB.with(|w| match w.try_borrow_mut() {
        Ok(mut shared) => f(&mut shared),
        Err(_) => f(&mut Workbench::new()),
    })
}
