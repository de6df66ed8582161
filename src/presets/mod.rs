//! Presets as data: models (built op by op from their reference definitions), GPUs and links.
//! The plan layer (`crate::plan::resolve`) looks them up by name.

pub mod activation;
pub mod cnn;
pub mod gemma;
pub mod generate;
pub mod gpt_oss;
pub mod gpus;
pub mod hf;
pub mod links;
pub mod llava;
pub mod mla;
pub mod models;
pub mod modernbert;
pub mod moe;
pub mod rnn;
pub mod text;
pub mod torchtune;
pub mod vision;
pub mod vit;
