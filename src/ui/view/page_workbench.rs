//! The page's one workbench: a thread-local, because its models are `Rc`s and Leptos's signals
//! want `Send` values.

use crate::ui::logic::shared_workbench::SharedWorkbench;
use crate::ui::logic::workbench::Workbench;

thread_local! {
    static WB: SharedWorkbench = SharedWorkbench::new();
}

/// Runs `f` on the page's workbench. Never panics, even when re-entered (from a memo read
/// inside `f`): see [`SharedWorkbench::with`].
pub fn wb<R>(f: impl FnOnce(&mut Workbench) -> R) -> R {
    WB.with(|w| w.with(f))
}
