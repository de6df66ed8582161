//! The plan JSON the CLI reads (`estimate`, `search`) and the page's `x=` settings: any bytes
//! are parsed as the CLI parses them, and an accepted plan must survive a round trip through its
//! own JSON unchanged and have its names resolved or refused, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vram_planner::plan::{self, resolve, Plan};
use vram_planner::ui::logic::json;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = plan::parse_json(text) {
        let again = serde_json::to_string(&p).expect("a parsed plan serialises");
        let back: Plan = serde_json::from_str(&again).expect("a plan reads its own JSON");
        assert_eq!(back, p, "the plan changed in a round trip through {again}");
        let _ = resolve::model(&p);
        if let Ok(gpu) = resolve::gpu(&p) {
            let _ = resolve::layout_links(&p, gpu.as_ref());
        }
        let _ = plan::layout(&p);
    }
    // The page's `x=`: the same keys laid over the page's default plan.
    let base = Plan::default();
    if let Ok(Some(p)) = json::apply_extra(&base, text) {
        let again = serde_json::to_string(&p).expect("a parsed plan serialises");
        let back: Plan = serde_json::from_str(&again).expect("a plan reads its own JSON");
        assert_eq!(
            back, p,
            "the x= plan changed in a round trip through {again}"
        );
    }
});
