//! The model catalogue: each preset names its family, its input and its builder.

use crate::estimator::config::BuildCtx;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::Graph;
pub use crate::estimator::model::InputKind;

use super::{hf, vision};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Cnn,
    VisionTransformer,
    Language,
    Rnn,
}

impl Family {
    pub fn label(self) -> &'static str {
        match self {
            Family::Cnn => "CNNs",
            Family::VisionTransformer => "Vision transformers",
            Family::Language => "Language models",
            Family::Rnn => "RNN",
        }
    }
}

/// Where the model picker lists a preset: the families, with the language models split by
/// architecture (a user looks for "an MoE" or "an encoder" before a name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    Cnn,
    VisionTransformer,
    Decoder,
    MixtureOfExperts,
    Encoder,
    VisionLanguage,
    Rnn,
}

impl Group {
    /// The picker's order.
    pub const ALL: [Group; 7] = [
        Group::Cnn,
        Group::VisionTransformer,
        Group::Decoder,
        Group::MixtureOfExperts,
        Group::Encoder,
        Group::VisionLanguage,
        Group::Rnn,
    ];
}

pub struct ModelPreset {
    pub id: &'static str,
    pub name: &'static str,
    pub family: Family,
    pub group: Group,
    pub input: InputKind,
    /// Exact parameter count (torchvision / transformers), checked against the built graph.
    pub params: u64,
    /// The builder, when the page's first load carries it (the ResNets: the default plan is
    /// ResNet-50). `None`: the plan layer's lazy seam (`crate::plan::lazy`) builds it, from
    /// code the page fetches on first use.
    pub build: Option<BuildFn>,
}

/// A builder the first load links in.
pub type BuildFn = fn(&BuildCtx) -> Result<Graph, EstimateError>;

const fn tokens(default_seq: u64, max_seq: Option<u64>) -> InputKind {
    InputKind::Tokens {
        default_seq,
        max_seq,
    }
}

const fn img(default_res: u64, min_res: u64) -> InputKind {
    InputKind::Image {
        default_res,
        min_res,
    }
}

pub static MODELS: &[ModelPreset] = &[
    ModelPreset {
        id: "resnet18",
        name: "ResNet-18",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(224, 1),
        params: 11_689_512,
        build: Some(|c| vision::resnet(c, [2, 2, 2, 2], false, 64)),
    },
    ModelPreset {
        id: "resnet34",
        name: "ResNet-34",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(224, 1),
        params: 21_797_672,
        build: Some(|c| vision::resnet(c, [3, 4, 6, 3], false, 64)),
    },
    ModelPreset {
        id: "resnet50",
        name: "ResNet-50",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(224, 1),
        params: 25_557_032,
        build: Some(|c| vision::resnet(c, [3, 4, 6, 3], true, 64)),
    },
    ModelPreset {
        id: "resnet101",
        name: "ResNet-101",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(224, 1),
        params: 44_549_160,
        build: Some(|c| vision::resnet(c, [3, 4, 23, 3], true, 64)),
    },
    ModelPreset {
        id: "resnet152",
        name: "ResNet-152",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(224, 1),
        params: 60_192_808,
        build: Some(|c| vision::resnet(c, [3, 8, 36, 3], true, 64)),
    },
    ModelPreset {
        id: "wide_resnet50_2",
        name: "Wide ResNet-50-2",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(224, 1),
        params: 68_883_240,
        build: Some(|c| vision::resnet(c, [3, 4, 6, 3], true, 128)),
    },
    ModelPreset {
        id: "vit_b_16",
        name: "ViT-B/16",
        family: Family::VisionTransformer,
        group: Group::VisionTransformer,
        input: img(224, 16),
        params: 86_567_656,
        build: None,
    },
    ModelPreset {
        id: "vit_l_16",
        name: "ViT-L/16",
        family: Family::VisionTransformer,
        group: Group::VisionTransformer,
        input: img(224, 16),
        params: 304_326_632,
        build: None,
    },
    ModelPreset {
        id: "lstm-lm",
        name: "2-layer LSTM LM (h512, vocab 10k)",
        family: Family::Rnn,
        group: Group::Rnn,
        input: tokens(512, None),
        params: 14_452_496,
        build: None,
    },
    ModelPreset {
        id: "mobilenet_v2",
        name: "MobileNetV2",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(224, 1),
        params: 3_504_872,
        build: None,
    },
    ModelPreset {
        id: "mobilenet_v3_small",
        name: "MobileNetV3-Small",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(224, 1),
        params: 2_542_856,
        build: None,
    },
    ModelPreset {
        id: "mobilenet_v3_large",
        name: "MobileNetV3-Large",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(224, 1),
        params: 5_483_032,
        build: None,
    },
    ModelPreset {
        id: "efficientnet_b0",
        name: "EfficientNet-B0",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(224, 1),
        params: 5_288_548,
        build: None,
    },
    ModelPreset {
        id: "vgg16",
        name: "VGG-16",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(224, 32),
        params: 138_357_544,
        build: None,
    },
    ModelPreset {
        id: "convnext_tiny",
        name: "ConvNeXt-T",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(224, 32),
        params: 28_589_128,
        build: None,
    },
    ModelPreset {
        id: "plainconv128",
        name: "Plain conv net (128 ch, full resolution)",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(512, 1),
        params: 595_850,
        build: None,
    },
    ModelPreset {
        id: "unet",
        name: "U-Net",
        family: Family::Cnn,
        group: Group::Cnn,
        input: img(512, 16),
        params: 31_037_698,
        build: None,
    },
    ModelPreset {
        id: "gpt2",
        name: "GPT-2 (124M)",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(1024, Some(1024)),
        params: 124_439_808,
        build: None,
    },
    ModelPreset {
        id: "gpt2-medium",
        name: "GPT-2 Medium (355M)",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(1024, Some(1024)),
        params: 354_823_168,
        build: None,
    },
    ModelPreset {
        id: "gpt2-large",
        name: "GPT-2 Large (774M)",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(1024, Some(1024)),
        params: 774_030_080,
        build: None,
    },
    ModelPreset {
        id: "gpt2-xl",
        name: "GPT-2 XL (1.5B)",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(1024, Some(1024)),
        params: 1_557_611_200,
        build: None,
    },
    ModelPreset {
        id: "bert-base",
        name: "BERT-base (MLM)",
        family: Family::Language,
        group: Group::Encoder,
        input: tokens(512, Some(512)),
        params: 109_514_298,
        build: None,
    },
    ModelPreset {
        id: "bert-large",
        name: "BERT-large (MLM)",
        family: Family::Language,
        group: Group::Encoder,
        input: tokens(512, Some(512)),
        params: 335_174_458,
        build: None,
    },
    ModelPreset {
        id: "roberta-base",
        name: "RoBERTa-base (MLM)",
        family: Family::Language,
        group: Group::Encoder,
        input: tokens(512, Some(512)),
        params: 124_697_433,
        build: None,
    },
    ModelPreset {
        id: "modernbert-base",
        name: "ModernBERT-base (MLM)",
        family: Family::Language,
        group: Group::Encoder,
        input: tokens(1024, None),
        params: 149_655_232,
        build: None,
    },
    ModelPreset {
        id: "llama-small",
        name: "LLaMA small (h1024 × 8)",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(1024, None),
        params: 168_313_856,
        build: None,
    },
    ModelPreset {
        id: "llama-7b",
        name: "LLaMA 7B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(2048, None),
        params: 6_738_415_616,
        build: None,
    },
    ModelPreset {
        id: "llama-2-7b",
        name: "Llama 2 7B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(4096, None),
        params: 6_738_415_616,
        build: None,
    },
    ModelPreset {
        id: "llama-2-13b",
        name: "Llama 2 13B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(4096, None),
        params: 13_015_864_320,
        build: None,
    },
    ModelPreset {
        id: "llama-2-70b",
        name: "Llama 2 70B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(4096, None),
        params: 68_976_648_192,
        build: None,
    },
    ModelPreset {
        id: "llama-3-8b",
        name: "Llama 3 8B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(8192, None),
        params: 8_030_261_248,
        build: None,
    },
    ModelPreset {
        id: "llama-3-70b",
        name: "Llama 3 70B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(8192, None),
        params: 70_553_706_496,
        build: None,
    },
    ModelPreset {
        id: "mistral-7b",
        name: "Mistral 7B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(4096, None),
        params: 7_241_732_096,
        build: None,
    },
    ModelPreset {
        id: "qwen2-0.5b",
        name: "Qwen2 0.5B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(2048, None),
        params: 494_032_768,
        build: None,
    },
    ModelPreset {
        id: "llama-3.1-8b",
        name: "Llama 3.1 8B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(8192, None),
        params: 8_030_261_248,
        build: None,
    },
    ModelPreset {
        id: "llama-3.1-70b",
        name: "Llama 3.1 70B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(8192, None),
        params: 70_553_706_496,
        build: None,
    },
    ModelPreset {
        id: "llama-3.1-405b",
        name: "Llama 3.1 405B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(8192, None),
        params: 405_853_388_800,
        build: None,
    },
    ModelPreset {
        id: "qwen2.5-7b",
        name: "Qwen2.5 7B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(4096, None),
        params: 7_615_616_512,
        build: None,
    },
    ModelPreset {
        id: "qwen3-8b",
        name: "Qwen3 8B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(4096, None),
        params: 8_190_735_360,
        build: None,
    },
    ModelPreset {
        id: "qwen3-30b-a3b",
        name: "Qwen3 30B-A3B (MoE)",
        family: Family::Language,
        group: Group::MixtureOfExperts,
        input: tokens(4096, None),
        params: 30_532_122_624,
        build: None,
    },
    ModelPreset {
        id: "mixtral-8x7b",
        name: "Mixtral 8x7B (MoE)",
        family: Family::Language,
        group: Group::MixtureOfExperts,
        input: tokens(4096, None),
        params: 46_702_792_704,
        build: None,
    },
    ModelPreset {
        id: "deepseek-v3",
        name: "DeepSeek-V3 671B (MLA, MoE)",
        family: Family::Language,
        group: Group::MixtureOfExperts,
        input: tokens(4096, None),
        params: 671_026_404_352,
        build: None,
    },
    ModelPreset {
        id: "gpt-oss-20b",
        name: "gpt-oss-20b (MoE)",
        family: Family::Language,
        group: Group::MixtureOfExperts,
        input: tokens(4096, None),
        params: 20_914_757_184,
        build: None,
    },
    ModelPreset {
        id: "gpt-oss-120b",
        name: "gpt-oss-120b (MoE)",
        family: Family::Language,
        group: Group::MixtureOfExperts,
        input: tokens(4096, None),
        params: 116_829_156_672,
        build: None,
    },
    ModelPreset {
        id: "gemma-2-9b",
        name: "Gemma 2 9B",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(8192, None),
        params: 9_241_705_984,
        build: None,
    },
    ModelPreset {
        id: "gemma-3-12b",
        name: "Gemma 3 12B (text)",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(8192, None),
        params: 11_766_034_176,
        build: None,
    },
    ModelPreset {
        id: "phi-3-mini",
        name: "Phi-3-mini (3.8B, 4k)",
        family: Family::Language,
        group: Group::Decoder,
        input: tokens(4096, None),
        params: 3_821_079_552,
        build: None,
    },
    ModelPreset {
        id: "llava-1.5-7b",
        name: "LLaVA-1.5 7B (text + 1 image)",
        family: Family::Language,
        group: Group::VisionLanguage,
        input: tokens(1024, None),
        params: 7_063_427_072,
        build: None,
    },
];

/// The `config.json` of a language-model preset: the published configs' architecture fields
/// (Hugging Face hub `openai-community/gpt2*`, `google-bert/bert-*-uncased`, `meta-llama/*`
/// (`Llama-3.1-{8B,70B,405B}` among them), `mistralai/Mistral-7B-v0.1`,
/// `mistralai/Mixtral-8x7B-v0.1`, `Qwen/Qwen2-0.5B`, `Qwen/Qwen2.5-7B`, `Qwen/Qwen3-8B`,
/// `Qwen/Qwen3-30B-A3B`, `microsoft/Phi-3-mini-4k-instruct`, `google/gemma-2-9b`,
/// `deepseek-ai/DeepSeek-V3`, `openai/gpt-oss-20b`, `openai/gpt-oss-120b`, and the
/// `text_config` of `google/gemma-3-12b-pt`, `FacebookAI/roberta-base`,
/// `answerdotai/ModernBERT-base`, `llava-hf/llava-1.5-7b-hf`); `llama-small` and `llama-7b`
/// exactly as the reference harness defines them (`harness/models.py` `hf_config`).
pub fn text_config(id: &str) -> Option<serde_json::Value> {
    use serde_json::json;
    let gpt2 = |e: u64, l: u64, h: u64| json!({"model_type": "gpt2", "n_embd": e, "n_layer": l, "n_head": h, "n_positions": 1024, "vocab_size": 50257});
    let bert = |e: u64, l: u64, h: u64, i: u64| json!({"model_type": "bert", "hidden_size": e, "num_hidden_layers": l, "num_attention_heads": h, "intermediate_size": i, "vocab_size": 30522, "max_position_embeddings": 512});
    let llama = |e: u64, i: u64, l: u64, h: u64, kv: u64, v: u64, pos: u64| json!({"model_type": "llama", "hidden_size": e, "intermediate_size": i, "num_hidden_layers": l, "num_attention_heads": h, "num_key_value_heads": kv, "vocab_size": v, "max_position_embeddings": pos, "tie_word_embeddings": false});
    Some(match id {
        "gpt2" => gpt2(768, 12, 12),
        "gpt2-medium" => gpt2(1024, 24, 16),
        "gpt2-large" => gpt2(1280, 36, 20),
        "gpt2-xl" => gpt2(1600, 48, 25),
        "bert-base" => bert(768, 12, 12, 3072),
        "bert-large" => bert(1024, 24, 16, 4096),
        "roberta-base" => {
            json!({"model_type": "roberta", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1})
        }
        "modernbert-base" => {
            json!({"model_type": "modernbert", "hidden_size": 768, "intermediate_size": 1152, "num_hidden_layers": 22, "num_attention_heads": 12, "vocab_size": 50368, "max_position_embeddings": 8192, "global_attn_every_n_layers": 3, "local_attention": 128, "norm_bias": false, "attention_bias": false, "mlp_bias": false, "decoder_bias": true, "classifier_activation": "gelu", "hidden_activation": "gelu", "tie_word_embeddings": true})
        }
        "llava-1.5-7b" => {
            json!({"model_type": "llava", "image_token_index": 32000, "image_seq_length": 576, "projector_hidden_act": "gelu", "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
                   "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16, "image_size": 336, "patch_size": 14, "projection_dim": 768, "hidden_act": "quick_gelu"},
                   "text_config": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096, "tie_word_embeddings": false}})
        }
        "llama-small" => llama(1024, 2816, 8, 16, 16, 32000, 4096),
        "llama-7b" | "llama-2-7b" => llama(4096, 11008, 32, 32, 32, 32000, 4096),
        "llama-2-13b" => llama(5120, 13824, 40, 40, 40, 32000, 4096),
        "llama-2-70b" => llama(8192, 28672, 80, 64, 8, 32000, 4096),
        "llama-3-8b" => llama(4096, 14336, 32, 32, 8, 128256, 8192),
        "llama-3-70b" => llama(8192, 28672, 80, 64, 8, 128256, 8192),
        "mistral-7b" => {
            json!({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": null, "tie_word_embeddings": false})
        }
        "qwen2-0.5b" => {
            json!({"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768, "tie_word_embeddings": true})
        }
        "llama-3.1-8b" => llama(4096, 14336, 32, 32, 8, 128256, 131072),
        "llama-3.1-70b" => llama(8192, 28672, 80, 64, 8, 128256, 131072),
        "llama-3.1-405b" => llama(16384, 53248, 126, 128, 8, 128256, 131072),
        "qwen2.5-7b" => {
            json!({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072, "tie_word_embeddings": false})
        }
        "qwen3-8b" => {
            json!({"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960, "attention_bias": false, "tie_word_embeddings": false})
        }
        "qwen3-30b-a3b" => {
            json!({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": false, "vocab_size": 151936, "max_position_embeddings": 40960, "attention_bias": false, "tie_word_embeddings": false})
        }
        "deepseek-v3" => {
            json!({"model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256, "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "norm_topk_prob": true, "hidden_act": "silu", "max_position_embeddings": 163840, "attention_bias": false, "attention_dropout": 0.0, "tie_word_embeddings": false})
        }
        "gpt-oss-20b" | "gpt-oss-120b" => {
            let (layers, experts) = if id == "gpt-oss-20b" {
                (24, 32)
            } else {
                (36, 128)
            };
            let types: Vec<&str> = (0..layers)
                .map(|i| {
                    if i % 2 == 0 {
                        "sliding_attention"
                    } else {
                        "full_attention"
                    }
                })
                .collect();
            json!({"model_type": "gpt_oss", "vocab_size": 201088, "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": layers, "num_local_experts": experts, "num_experts_per_tok": 4, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128, "layer_types": types, "attention_bias": true, "attention_dropout": 0.0, "swiglu_limit": 7.0, "max_position_embeddings": 131072, "output_router_logits": false, "tie_word_embeddings": false})
        }
        "mixtral-8x7b" => {
            json!({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "output_router_logits": false, "router_aux_loss_coef": 0.02, "vocab_size": 32000, "max_position_embeddings": 32768, "tie_word_embeddings": false})
        }
        "gemma-2-9b" => {
            json!({"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192, "query_pre_attn_scalar": 256, "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true})
        }
        "gemma-3-12b" => {
            json!({"model_type": "gemma3_text", "hidden_size": 3840, "intermediate_size": 15360, "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 262208, "max_position_embeddings": 131072, "query_pre_attn_scalar": 256, "sliding_window": 1024, "sliding_window_pattern": 6, "attn_logit_softcapping": null, "final_logit_softcapping": null, "hidden_activation": "gelu_pytorch_tanh", "rope_local_base_freq": 10000.0, "tie_word_embeddings": true})
        }
        "phi-3-mini" => {
            json!({"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0, "hidden_act": "silu", "tie_word_embeddings": false})
        }
        _ => return None,
    })
}

/// The `model_type` of a language-model preset's config.json, without building the JSON (the
/// page asks on every plan; [`text_config`] lives with the builders in the page's lazy chunk).
pub fn text_model_type(id: &str) -> Option<&'static str> {
    // Preset id prefixes, the more specific first.
    const TYPES: [(&str, &str); 16] = [
        ("qwen3-30b", "qwen3_moe"),
        ("deepseek-v3", "deepseek_v3"),
        ("gpt-oss", "gpt_oss"),
        ("mixtral", "mixtral"),
        ("phi-3", "phi3"),
        ("gemma-2", "gemma2"),
        ("gemma-3", "gemma3_text"),
        ("gpt2", "gpt2"),
        ("bert", "bert"),
        ("roberta", "roberta"),
        ("modernbert", "modernbert"),
        ("llava", "llava"),
        ("llama", "llama"),
        ("mistral", "mistral"),
        ("qwen2", "qwen2"),
        ("qwen3", "qwen3"),
    ];
    let preset = find(id).filter(|m| m.family == Family::Language)?;
    TYPES
        .iter()
        .find(|(p, _)| preset.id.starts_with(p))
        .map(|(_, t)| *t)
}

/// Builds a language-model preset through the `config.json` import.
pub(crate) fn text_preset(id: &str, ctx: &BuildCtx) -> Result<Graph, EstimateError> {
    let cfg = text_config(id)
        .ok_or_else(|| EstimateError::Unsupported(format!("the preset {id} has no config.json")))?;
    hf::build_from_config(&cfg, ctx)
}

pub fn find(id: &str) -> Option<&'static ModelPreset> {
    MODELS.iter().find(|m| m.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_types_match_the_configs() {
        for m in MODELS.iter().filter(|m| m.family == Family::Language) {
            let cfg = text_config(m.id).unwrap();
            assert_eq!(
                text_model_type(m.id),
                cfg["model_type"].as_str(),
                "{}",
                m.id
            );
        }
        assert_eq!(text_model_type("resnet50"), None);
        assert_eq!(text_model_type("lstm-lm"), None);
    }
}
