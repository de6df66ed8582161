//! The page's URL query (anyone can send a link): any string is read without a panic, and the
//! plan it gives is written back into a query that reads as the same plan and view (as a link
//! keeps the view: [`url::View::linked`]).

#![no_main]

use libfuzzer_sys::fuzz_target;
use vram_planner::ui::logic::url;

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    let _ = url::wants_json(query);
    let _ = url::wants_lazy_models(query);
    let parsed = url::parse_query(query);
    if let Ok(q) = url::to_query(&parsed.plan, &parsed.view) {
        let again = url::parse_query(&q);
        assert_eq!(
            again.plan, parsed.plan,
            "the plan changed through the query {q}"
        );
        assert_eq!(
            again.view,
            parsed.view.linked(),
            "the view changed through the query {q}"
        );
    }
});
