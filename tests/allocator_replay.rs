//! The reserved figure is the loop's malloc/free stream replayed through the caching allocator
//! (`estimator::allocator`): the options a run sets in `PYTORCH_CUDA_ALLOC_CONF` change it the
//! way PyTorch's allocator would, and an option PyTorch rejects is refused with its name.

use vram_planner::plan::{estimate, Plan};

fn with_conf(model: &str, conf: Option<&str>) -> Plan {
    let mut p = Plan::new(model);
    p.batch = 8;
    p.alloc_conf = conf.map(str::to_string);
    p
}

/// `expandable_segments:True` maps pages into one segment per pool instead of a `cudaMalloc` per
/// request size class, so freed blocks of one size can serve another: less reserved, never less
/// than what the tensors hold.
#[test]
fn expandable_segments_reserve_less_than_fixed_segments() {
    for model in ["gpt2", "resnet50"] {
        let fixed = estimate(&with_conf(model, None)).unwrap();
        let exp = estimate(&with_conf(model, Some("expandable_segments:True"))).unwrap();
        assert_eq!(fixed.peak_allocated, exp.peak_allocated, "{model}");
        assert!(
            exp.reserved < fixed.reserved,
            "{model}: {} vs {}",
            exp.reserved,
            fixed.reserved
        );
        assert!(
            exp.reserved >= exp.peak_allocated + exp.workspaces,
            "{model}"
        );
        assert!(fixed.fragmentation_at_peak.0 > 0, "{model}");
    }
}

/// The figures PyTorch's allocator keeps: what a tensor does not use at the peak is reserved, so
/// reserved is at least the allocated peak, the workspaces and the fragmentation together.
#[test]
fn reserved_holds_the_peak_the_workspaces_and_the_free_blocks() {
    for model in ["gpt2", "resnet50", "vit_b_16", "lstm-lm"] {
        let e = estimate(&with_conf(model, None)).unwrap();
        assert!(
            e.reserved >= e.peak_allocated + e.workspaces + e.fragmentation_at_peak,
            "{model}: {} < {} + {} + {}",
            e.reserved,
            e.peak_allocated,
            e.workspaces,
            e.fragmentation_at_peak
        );
    }
}

#[test]
fn options_pytorch_rejects_are_refused_by_name() {
    for (conf, says) in [
        ("max_split_size_mb:8", "more than 20"),
        ("expandable_segments:yes", "True or False"),
        (
            "pinned_use_cuda_host_register:True",
            "unknown allocator option",
        ),
        ("garbage_collection_threshold", "key:value"),
    ] {
        let err = estimate(&with_conf("gpt2", Some(conf)))
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{conf}: {err}");
        assert!(err.contains("PYTORCH_CUDA_ALLOC_CONF"), "{conf}: {err}");
    }
}
