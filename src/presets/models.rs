//! The model catalogue: each preset names its family, its input and its builder.

use crate::estimator::config::BuildCtx;
use crate::estimator::error::EstimateError;
use crate::estimator::graph::Graph;

use super::{cnn, rnn, vision, vit};

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

/// What the model consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// Square images; the default side and the smallest side the architecture accepts.
    Image { default_res: u64, min_res: u64 },
    /// Token sequences; the default length and the position limit (`None`: unbounded, e.g. RoPE).
    Tokens { default_seq: u64, max_seq: Option<u64> },
}

pub struct ModelPreset {
    pub id: &'static str,
    pub name: &'static str,
    pub family: Family,
    pub input: InputKind,
    /// Exact parameter count (torchvision / transformers), checked against the built graph.
    pub params: u64,
    pub build: fn(&BuildCtx) -> Result<Graph, EstimateError>,
}

const fn tokens(default_seq: u64, max_seq: Option<u64>) -> InputKind {
    InputKind::Tokens { default_seq, max_seq }
}

const fn img(default_res: u64, min_res: u64) -> InputKind {
    InputKind::Image { default_res, min_res }
}

pub static MODELS: &[ModelPreset] = &[
    ModelPreset { id: "resnet18", name: "ResNet-18", family: Family::Cnn, input: img(224, 32), params: 11_689_512, build: |c| vision::resnet(c, [2, 2, 2, 2], false, 64) },
    ModelPreset { id: "resnet34", name: "ResNet-34", family: Family::Cnn, input: img(224, 32), params: 21_797_672, build: |c| vision::resnet(c, [3, 4, 6, 3], false, 64) },
    ModelPreset { id: "resnet50", name: "ResNet-50", family: Family::Cnn, input: img(224, 32), params: 25_557_032, build: |c| vision::resnet(c, [3, 4, 6, 3], true, 64) },
    ModelPreset { id: "resnet101", name: "ResNet-101", family: Family::Cnn, input: img(224, 32), params: 44_549_160, build: |c| vision::resnet(c, [3, 4, 23, 3], true, 64) },
    ModelPreset { id: "resnet152", name: "ResNet-152", family: Family::Cnn, input: img(224, 32), params: 60_192_808, build: |c| vision::resnet(c, [3, 8, 36, 3], true, 64) },
    ModelPreset { id: "wide_resnet50_2", name: "Wide ResNet-50-2", family: Family::Cnn, input: img(224, 32), params: 68_883_240, build: |c| vision::resnet(c, [3, 4, 6, 3], true, 128) },
    ModelPreset { id: "vit_b_16", name: "ViT-B/16", family: Family::VisionTransformer, input: img(224, 16), params: 86_567_656, build: |c| vit::vit(c, vit::VIT_B_16) },
    ModelPreset { id: "vit_l_16", name: "ViT-L/16", family: Family::VisionTransformer, input: img(224, 16), params: 304_326_632, build: |c| vit::vit(c, vit::VIT_L_16) },
    ModelPreset { id: "lstm-lm", name: "2-layer LSTM LM (h512, vocab 10k)", family: Family::Rnn, input: tokens(512, None), params: 14_452_496, build: |c| rnn::lstm_lm(c, rnn::LSTM_LM) },
    ModelPreset { id: "mobilenet_v2", name: "MobileNetV2", family: Family::Cnn, input: img(224, 1), params: 3_504_872, build: cnn::mobilenet_v2 },
    ModelPreset { id: "mobilenet_v3_small", name: "MobileNetV3-Small", family: Family::Cnn, input: img(224, 1), params: 2_542_856, build: |c| cnn::mobilenet_v3(c, false) },
    ModelPreset { id: "mobilenet_v3_large", name: "MobileNetV3-Large", family: Family::Cnn, input: img(224, 1), params: 5_483_032, build: |c| cnn::mobilenet_v3(c, true) },
    ModelPreset { id: "efficientnet_b0", name: "EfficientNet-B0", family: Family::Cnn, input: img(224, 1), params: 5_288_548, build: cnn::efficientnet_b0 },
    ModelPreset { id: "vgg16", name: "VGG-16", family: Family::Cnn, input: img(224, 32), params: 138_357_544, build: cnn::vgg16 },
    ModelPreset { id: "convnext_tiny", name: "ConvNeXt-T", family: Family::Cnn, input: img(224, 32), params: 28_589_128, build: cnn::convnext_tiny },
    ModelPreset { id: "plainconv128", name: "Plain conv net (128 ch, full resolution)", family: Family::Cnn, input: img(512, 1), params: 595_850, build: cnn::plainconv128 },
    ModelPreset { id: "unet", name: "U-Net", family: Family::Cnn, input: img(512, 16), params: 31_037_698, build: cnn::unet },
];

pub fn find(id: &str) -> Option<&'static ModelPreset> {
    MODELS.iter().find(|m| m.id == id)
}
