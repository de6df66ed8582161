//! The measured evaluation forwards of `data/image-infer-steps.jsonl` (`data/PROVENANCE.md`):
//! `model.eval()` and a forward under `torch.no_grad()` of torchvision's ViT-B/16 and ResNet-50
//! on the faked CUDA device, which a validation pass after training runs.

mod common;

use vram_planner::plan::build_graph;

/// The forwards peak within 0.01 %: every module's argument alive until the module returns (in
/// training autograd saves them anyway), `nn.MultiheadAttention`'s fast path in fp32 and bf16
/// and its Python path under autocast, whose weight casts stay cached under `no_grad`.
#[test]
fn measured_eval_forwards() {
    let cases = common::IMAGE_INFER.replay();
    assert_eq!(cases.len(), 6);
    common::assert_within(&cases, 1e-4);
}

/// The driver saw `torch._native_multi_head_attention` once per encoder layer wherever the
/// estimate takes the fast path (one `[B, S, 3D]` projection, no copies of the query or of the
/// packed projection), and the SDPA kernel of the Python path under autocast.
#[test]
fn vit_attention_takes_the_fast_path_unless_under_autocast() {
    for r in common::IMAGE_INFER.records() {
        let id = r["case_id"].as_str().unwrap();
        if r["plan"]["model"] != "vit_b_16" {
            continue;
        }
        let fast = r["plan"]["dtype"] != "amp_bf16";
        let seen = &r["kernel_ops_seen"]["aten._native_multi_head_attention"];
        assert_eq!(seen.as_u64(), fast.then_some(12), "{id}");
        let g = build_graph(&common::plan_of(&r)).unwrap();
        let copies = g
            .ops
            .iter()
            .filter(|o| o.name.contains("self_attention") && o.kind == "clone")
            .count();
        assert_eq!(copies == 0, fast, "{id}: {copies} copies in attention");
    }
}
