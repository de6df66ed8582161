//! A model as the core takes it: what it consumes, which settings apply to it, and how to build
//! its forward tape. The core never looks a model up by name; the plan layer turns a preset name
//! or a `config.json` into a [`ModelSpec`].

use std::rc::Rc;

use super::config::BuildCtx;
use super::error::EstimateError;
use super::graph::Graph;

/// What the model consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// Square images; the default side and the smallest side the architecture accepts.
    Image { default_res: u64, min_res: u64 },
    /// Token sequences; the default length and the position limit (`None`: unbounded, e.g. RoPE).
    Tokens {
        default_seq: u64,
        max_seq: Option<u64>,
    },
}

impl InputKind {
    /// Whether the model reads token sequences (a language model or an RNN over tokens).
    pub fn is_tokens(self) -> bool {
        matches!(self, InputKind::Tokens { .. })
    }
}

/// Which settings apply to the model: checked by the core instead of the model's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// A transformer language model: frozen blocks counted by number, LoRA adapters, weight
    /// quantization, sparsity and the KV cache are modelled for it.
    pub language_model: bool,
    /// Serving (`mode: infer`) is modelled.
    pub inference: bool,
    /// It has attention heads and MLPs that tensor parallelism can split (Megatron-LM).
    pub attention: bool,
}

/// Builds a model's forward tape for one [`BuildCtx`].
pub type Builder = Rc<dyn Fn(&BuildCtx) -> Result<Graph, EstimateError>>;

/// A model, by value.
#[derive(Clone)]
pub struct ModelSpec {
    /// What the answers call it (a preset id, or the label given with a `config.json`).
    pub label: String,
    pub input: InputKind,
    pub caps: Capabilities,
    pub build: Builder,
}

impl std::fmt::Debug for ModelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSpec")
            .field("label", &self.label)
            .field("input", &self.input)
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}
