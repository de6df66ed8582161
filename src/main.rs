//! On wasm32 this binary mounts the planner page; natively it is the `vram-planner` CLI.

#[cfg(target_arch = "wasm32")]
fn main() {
    vram_planner::ui::mount();
}

#[cfg(not(target_arch = "wasm32"))]
#[global_allocator]
static HEAP: vram_planner::cli::heap::Heap = vram_planner::cli::heap::Heap {};

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    vram_planner::cli::heap::keep_freed_pages();
    std::process::exit(vram_planner::cli::main());
}
