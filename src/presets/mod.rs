//! Presets as data: models (built op by op from their reference definitions), GPUs.

pub mod cnn;
pub mod generate;
pub mod gpus;
pub mod hf;
pub mod lazy;
pub mod links;
pub mod models;
pub mod rnn;
pub mod text;
pub mod vision;
pub mod vit;
