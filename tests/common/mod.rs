//! Helpers shared by the integration tests (each test file that needs one says `mod common;`).

/// Replays measured steps (JSON lines in the `cli::reference` format, with their provenance in
/// tests/data/PROVENANCE.md) and asserts there are `count` of them, each predicted within the
/// relative tolerance `tol`.
pub fn assert_replays(jsonl: &str, count: usize, tol: f64) {
    let cases = vram_planner::cli::reference::replay(jsonl)
        .unwrap_or_else(|(id, why)| panic!("{id}: {why}"));
    assert_eq!(cases.len(), count);
    for c in cases {
        assert!(
            c.rel_err.abs() < tol,
            "{}: {} predicted, {} measured",
            c.case_id,
            c.predicted,
            c.measured
        );
    }
}
