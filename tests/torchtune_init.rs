//! torchtune 0.1's model initialisation replayed through the caching allocator, against the same
//! initialisation run by torchtune 0.1.1 and torchao 0.1 through PyTorch's real allocator on the
//! allocator-mode fake device (`tests/data/reserved/torchtune-steps.jsonl` and the recorded
//! stream `torchtune-init-qlora-2layers.stream`, both from `tests/data/oracle/torchtune_steps.py`;
//! see `tests/data/PROVENANCE.md`).

use serde_json::Value;
use vram_planner::estimator::allocator::{replay, AllocTrace, AllocatorSettings};
use vram_planner::estimator::device::ReduceDevice;
use vram_planner::estimator::model_init::TorchtuneLlama;

fn llama2_7b(layers: u64, qlora: bool) -> TorchtuneLlama {
    TorchtuneLlama {
        layers,
        dim: 4096,
        hidden: 11008,
        heads: 32,
        kv_heads: 32,
        head_dim: 128,
        vocab: 32000,
        max_seq_len: 4096,
        rank: 8,
        // q, k, v, output, gate, down, up
        adapted: if qlora {
            [true; 7]
        } else {
            [true, false, true, false, false, false, false]
        },
        quantize: qlora,
    }
}

/// The fake device's H100 (sm_90, 132 SMs) for the reductions' staging blocks.
fn device() -> Option<ReduceDevice> {
    ReduceDevice::of(90, 132)
}

fn records() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/reserved/torchtune-steps.jsonl"
    ))
    .expect("torchtune-steps.jsonl");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON record"))
        .collect()
}

/// Every event of the 2-layer QLoRA initialisation, in order, as PyTorch's allocator recorded it.
#[test]
fn qlora_initialisation_stream_is_pytorchs_event_for_event() {
    let recorded = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/reserved/torchtune-init-qlora-2layers.stream"
    ))
    .expect("the recorded stream");
    let mut t = AllocTrace::default();
    llama2_7b(2, true).replay(&mut t, device());
    let ours = t.describe();
    let theirs: Vec<&str> = recorded.lines().collect();
    assert_eq!(ours.len(), theirs.len());
    for (k, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "event {k}");
    }
}

/// The initialisation's max allocated and max reserved, to the byte, and what it leaves.
#[test]
fn initialisation_reserves_what_pytorch_reserves() {
    for r in records() {
        let layers = r["layers"].as_u64().unwrap();
        let qlora = r["quantize_base"].as_bool().unwrap();
        let m = llama2_7b(layers, qlora);
        let mut t = AllocTrace::default();
        m.replay(&mut t, device());
        let rep = replay(&t, &[], AllocatorSettings::default(), None);
        let init = &r["init"];
        assert_eq!(
            (rep.max_allocated.0, rep.max_reserved.0),
            (
                init["max_allocated"].as_u64().unwrap(),
                init["max_reserved"].as_u64().unwrap()
            ),
            "{}",
            r["case_id"]
        );
        // What the model keeps: the requested bytes, each block rounded to 512 B, are at most
        // what the allocator counts (it hands out whole blocks whose remainder is too small to split:
        // 0.6 % more for the QLoRA model).
        let kept: u64 = m.kept_blocks().iter().map(|b| b.div_ceil(512) * 512).sum();
        let allocated = init["allocated"].as_u64().unwrap();
        assert!(
            kept <= allocated && allocated - kept < allocated / 100,
            "{} kept {kept} vs {allocated}",
            r["case_id"]
        );
    }
}
