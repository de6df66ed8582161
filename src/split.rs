//! Synchronous calls into lazily fetched WebAssembly chunks. A page built with the `lazy-chunks`
//! feature moves code that the default page does not need into chunks (`make split-wasm`); a
//! `#[wasm_split]` function is async because its first call fetches its chunk. Once that fetch
//! has been awaited, its future completes on its first poll (the loader is an initialised
//! once-cell and the call an indirect call into the chunk), so synchronous code such as the
//! estimator can call it through [`poll_now`] without becoming async.

use std::future::Future;
use std::task::{Context, Poll, Waker};

/// Polls `f` once; `Some` when it completed. Only for split functions whose preload has been
/// awaited: polling one whose chunk is not in would start a fetch and abandon it.
pub fn poll_now<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ready_futures_complete_at_once_and_pending_ones_do_not() {
        assert_eq!(super::poll_now(async { 7 }), Some(7));
        assert_eq!(super::poll_now(std::future::pending::<u8>()), None);
    }
}

/// The code behind a [`lazy_chunk!`] has not been fetched yet: await its `load` and retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotLoaded;

#[cfg(all(target_arch = "wasm32", feature = "lazy-chunks"))]
impl From<wasm_split_helpers::SplitLoaderError> for NotLoaded {
    fn from(_: wasm_split_helpers::SplitLoaderError) -> Self {
        NotLoaded
    }
}

/// Puts `run` (one entry point taking a request `Op` and answering `Out`) behind a chunk: it
/// declares, in the calling module, `call(op) -> Result<Out, NotLoaded>`, `loaded()` and
/// `async load() -> bool`. In a `lazy-chunks` build (wasm32) `run` and all that only it reaches move
/// to the chunk named `chunk`, fetched by `load`, then called synchronously with [`poll_now`];
/// elsewhere `call` runs `run` directly and `loaded` is always true. `split` and `preload` name
/// the generated split function and its preload (the names must be unique in the crate).
#[macro_export]
macro_rules! lazy_chunk {
    ($chunk:ident, $split:ident, $preload:ident, fn $run:ident($op:ty) -> $out:ty) => {
        #[cfg(not(all(target_arch = "wasm32", feature = "lazy-chunks")))]
        mod chunk_imp {
            use super::*;

            pub(super) fn call(op: $op) -> Result<$out, $crate::split::NotLoaded> {
                Ok($run(op))
            }

            /// Always: the code is linked in.
            pub fn loaded() -> bool {
                true
            }

            /// Nothing to fetch.
            pub async fn load() -> bool {
                true
            }
        }

        #[cfg(all(target_arch = "wasm32", feature = "lazy-chunks"))]
        mod chunk_imp {
            use super::*;
            use std::sync::atomic::{AtomicBool, Ordering};

            static LOADED: AtomicBool = AtomicBool::new(false);

            #[wasm_split_helpers::wasm_split($chunk, fallible, preload($preload))]
            fn $split(op: $op) -> Result<$out, $crate::split::NotLoaded> {
                Ok($run(op))
            }

            pub(super) fn call(op: $op) -> Result<$out, $crate::split::NotLoaded> {
                if !loaded() {
                    return Err($crate::split::NotLoaded);
                }
                $crate::split::poll_now($split(op)).unwrap_or(Err($crate::split::NotLoaded))
            }

            /// Whether the chunk has been fetched.
            pub fn loaded() -> bool {
                LOADED.load(Ordering::Relaxed)
            }

            /// Fetches the chunk (at most once; a failed fetch is tried again on the next
            /// call); false when it failed.
            pub async fn load() -> bool {
                if loaded() {
                    return true;
                }
                let ok = $preload().await.is_ok();
                LOADED.store(ok, Ordering::Relaxed);
                ok
            }
        }

        use chunk_imp::call;
        pub use chunk_imp::{load, loaded};
    };
}
