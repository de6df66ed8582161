//! The slowest inputs the planner accepts, timed natively in release mode (run with
//! `cargo bench --bench slowest`): each case sits at a limit of what a plan may ask for (the
//! largest model, the longest sequence, batch 4096, the most checkpoint segments, the deepest
//! pipeline, the biggest layout search, the longest generation, the largest config.json) and
//! is answered the way the CLI answers it. Every case prints its time as a ratio to a reference
//! plan measured in the same run (ResNet-50 at batch 32) and in seconds; a case the planner
//! refuses prints the refusal and its (short) time. The promise is that every accepted input is
//! answered within 1 s; the run exits non-zero when one is not.

use std::time::{Duration, Instant};

use vram_planner::plan::{self, fit, parse_json, search, Plan};

/// How a case is answered: as `vram-planner estimate --format json` does (the estimate, the
/// multi-GPU estimate when the plan has a layout, and what fits its GPU), or as `search` does.
enum Ask {
    Estimate,
    Search(search::SearchOptions),
}

fn answer(plan: &Plan, ask: &Ask) -> Result<(), String> {
    match ask {
        Ask::Estimate => {
            let e = plan::estimate(plan).map_err(|e| e.to_string())?;
            if plan.is_parallel() {
                plan::estimate_parallel(plan).map_err(|e| e.to_string())?;
            }
            if let Some(g) = plan::resolve::gpu(plan).map_err(|e| e.to_string())? {
                use vram_planner::estimator::tune::Mode;
                if plan.mode != Mode::Train {
                    fit::max_batch(plan, g.memory).map_err(|e| e.to_string())?;
                }
                if plan.mode == Mode::Infer {
                    fit::max_context(plan, g.memory).map_err(|e| e.to_string())?;
                }
            }
            std::hint::black_box(e);
            Ok(())
        }
        Ask::Search(opts) => search::search(plan, opts)
            .map(|f| {
                std::hint::black_box(f);
            })
            .map_err(|e| e.to_string()),
    }
}

/// The median of `reps` runs (one run when the first is already slow).
fn time(plan: &Plan, ask: &Ask, reps: u32) -> (Duration, Result<(), String>) {
    let t = Instant::now();
    let first = answer(plan, ask);
    let once = t.elapsed();
    if once > Duration::from_millis(200) {
        return (once, first);
    }
    let mut v: Vec<Duration> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            let _ = answer(plan, ask);
            t.elapsed()
        })
        .collect();
    v.sort();
    (v[v.len() / 2], first)
}

fn llama_config(layers: u64, hidden: u64, vocab: u64) -> String {
    format!(
        r#"{{"model_type":"llama","hidden_size":{hidden},"intermediate_size":{},"num_hidden_layers":{layers},"num_attention_heads":{},"num_key_value_heads":{},"vocab_size":{vocab},"max_position_embeddings":16777216}}"#,
        hidden * 4,
        hidden / 128,
        hidden / 128
    )
}

/// The command-line tool's heap ([`vram_planner::cli::heap`]), so the figures are the tool's.
#[global_allocator]
static HEAP: vram_planner::cli::heap::Heap = vram_planner::cli::heap::Heap {};

fn main() {
    vram_planner::cli::heap::keep_freed_pages();
    let big_search = search::SearchOptions {
        max_gpus: std::env::var("SEARCH_GPUS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(search::MAX_SEARCH_GPUS),
        gpus_per_node: 8,
        top: 10,
        offload: true,
        ..Default::default()
    };
    let cli_search = search::SearchOptions {
        offload: true,
        ..Default::default()
    };
    let cases: Vec<(&str, String, Ask)> = vec![
        ("search, CLI defaults + offload, llama-3-70b b4096", r#"{"model":"llama-3-70b","seq":4096,"batch":4096,"dtype":"bf16","gpu":"h100-80"}"#.into(), Ask::Search(cli_search.clone())),
        ("search, CLI defaults + offload, gpt2 batch 2^28", r#"{"model":"gpt2","batch":268435456,"gpu":"a100-40"}"#.into(), Ask::Search(cli_search.clone())),
        ("search, CLI defaults + offload, qwen3-30b-a3b b64 (experts)", r#"{"model":"qwen3-30b-a3b","seq":4096,"batch":64,"dtype":"amp_bf16","gpu":"h100-80"}"#.into(), Ask::Search(cli_search)),
        ("largest preset (llama-3-70b), seq 8192", r#"{"model":"llama-3-70b","seq":8192,"dtype":"bf16","gpu":"h100-80"}"#.into(), Ask::Estimate),
        ("batch 4096, llama-3-70b seq 8192", r#"{"model":"llama-3-70b","seq":8192,"batch":4096,"dtype":"bf16"}"#.into(), Ask::Estimate),
        ("batch 4096, resnet152 res 1024", r#"{"model":"resnet152","res":1024,"batch":4096}"#.into(), Ask::Estimate),
        ("longest sequence, 2-layer config seq 2^24", format!(r#"{{"model":"cfg","hf_config":{},"seq":16777216}}"#, llama_config(2, 256, 32000)), Ask::Estimate),
        ("largest preset (llama-3.1-405b), seq 131072", r#"{"model":"llama-3.1-405b","seq":131072,"dtype":"bf16","gpu":"h200-141"}"#.into(), Ask::Estimate),
        ("gpt-oss-120b (sinks, sliding window), seq 131072", r#"{"model":"gpt-oss-120b","seq":131072,"dtype":"bf16","gpu":"h200-141"}"#.into(), Ask::Estimate),
        ("gpt-oss-120b in MXFP4 serving, 128k context", r#"{"model":"gpt-oss-120b","mode":"infer","quantization":"mxfp4","context":131072,"new_tokens":1024,"batch":64,"gpu":"h100-80"}"#.into(), Ask::Estimate),
        ("Adafactor, llama-3.1-405b seq 8192", r#"{"model":"llama-3.1-405b","seq":8192,"dtype":"bf16","opt":"adafactor","gpu":"h200-141"}"#.into(), Ask::Estimate),
        ("largest MoE preset (deepseek-v3), seq 4096", r#"{"model":"deepseek-v3","seq":4096,"dtype":"bf16","gpu":"h200-141"}"#.into(), Ask::Estimate),
        ("deepseek-v3 over 256 GPUs, ep 256, FSDP, seq 4096", r#"{"model":"deepseek-v3","seq":4096,"dtype":"bf16","gpu":"h200-141","parallel":{"gpus_per_node":8,"nodes":32,"ep":256,"fsdp":true}}"#.into(), Ask::Estimate),
        ("grouped_mm experts, skewed, capped, ep 8: qwen3-30b-a3b b64", r#"{"model":"qwen3-30b-a3b","seq":8192,"batch":64,"dtype":"bf16","experts_impl":"grouped_mm","expert_skew":4,"gpu":"h100-80","parallel":{"gpus_per_node":8,"ep":8,"zero":1,"capacity_factor":1.25}}"#.into(), Ask::Estimate),
        ("most expert blocks (qwen3_moe 128 layers x 128 experts)", r#"{"model":"cfg","hf_config":{"model_type":"qwen3_moe","hidden_size":256,"moe_intermediate_size":64,"num_hidden_layers":128,"num_attention_heads":4,"num_key_value_heads":4,"head_dim":64,"vocab_size":32000},"seq":4096}"#.into(), Ask::Estimate),
        ("largest config.json (2048 layers)", format!(r#"{{"model":"cfg","hf_config":{},"seq":4096}}"#, llama_config(2048, 8192, 128256)), Ask::Estimate),
        ("lstm-lm, seq 16384 unrolled, batch 4096", r#"{"model":"lstm-lm","seq":16384,"batch":4096,"cudnn":false}"#.into(), Ask::Estimate),
        ("most checkpoint segments (k = max)", format!(r#"{{"model":"llama-3-70b","seq":4096,"ckpt":"k{}"}}"#, u32::MAX), Ask::Estimate),
        ("checkpoint segments, resnet152 k1000", r#"{"model":"resnet152","ckpt":"k1000","batch":64}"#.into(), Ask::Estimate),
        ("deepest pipeline, llama-3-70b pp 80", r#"{"model":"llama-3-70b","seq":4096,"dtype":"bf16","parallel":{"gpus_per_node":8,"nodes":10,"pp":80,"micro_batches":65536}}"#.into(), Ask::Estimate),
        ("deepest pipeline, 2048-layer config pp 2048", format!(r#"{{"model":"cfg","hf_config":{},"seq":4096,"parallel":{{"pp":2048,"gpus_per_node":1,"nodes":2048,"micro_batches":65536}}}}"#, llama_config(2048, 256, 32000)), Ask::Estimate),
        ("3-D layout, llama-3-70b tp8 pp8 dp16 zero3 offload", r#"{"model":"llama-3-70b","seq":4096,"dtype":"bf16","gpu":"h100-80","parallel":{"gpus_per_node":8,"nodes":128,"tp":8,"pp":8,"zero":3,"sequence_parallel":true,"micro_batches":64},"offload":{"optimizer":true,"params":true}}"#.into(), Ask::Estimate),
        ("serving, llama-3-70b 128k context 32k new tokens", r#"{"model":"llama-3-70b","mode":"infer","context":131072,"new_tokens":32768,"batch":64,"gpu":"h100-80"}"#.into(), Ask::Estimate),
        ("fine-tuning fit, llama-2-70b QLoRA", r#"{"model":"llama-2-70b","mode":"finetune","quantization":"nf4","lora":{"rank":64,"targets":["q","k","v","o"]},"seq":4096,"gpu":"a100-80"}"#.into(), Ask::Estimate),
        ("search at the GPU cap, llama-3-70b b4096", r#"{"model":"llama-3-70b","seq":4096,"batch":4096,"dtype":"bf16","gpu":"h100-80"}"#.into(), Ask::Search(big_search.clone())),
        ("search at the GPU cap, gpt2 batch 2^28", r#"{"model":"gpt2","batch":268435456,"gpu":"a100-40"}"#.into(), Ask::Search(big_search)),
    ];
    let reference = Plan::new("resnet50");
    let (ref_t, ref_r) = time(&reference, &Ask::Estimate, 20);
    ref_r.expect("the reference plan estimates");
    println!(
        "reference: resnet50 batch 32, one estimate: {:.3} ms",
        ref_t.as_secs_f64() * 1e3
    );
    let mut rows = Vec::new();
    for (name, text, ask) in &cases {
        let plan = parse_json(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (t, r) = time(&plan, ask, 5);
        rows.push((*name, t, r));
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    println!(
        "{:<52} {:>10} {:>12}  answer",
        "case (slowest first)", "× ref", "seconds"
    );
    let mut over = 0;
    for (name, t, r) in &rows {
        let verdict = match r {
            Ok(()) if *t >= Duration::from_secs(1) => {
                over += 1;
                "estimated, OVER 1 s".to_string()
            }
            Ok(()) => "estimated".to_string(),
            Err(e) => format!("refused: {e}"),
        };
        println!(
            "{name:<52} {:>10.1} {:>12.4}  {verdict}",
            t.as_secs_f64() / ref_t.as_secs_f64(),
            t.as_secs_f64()
        );
    }
    if over > 0 {
        eprintln!("{over} accepted input(s) took 1 s or more");
        std::process::exit(1);
    }
}
