//! LLaVA as transformers 5.24.0 trains it (`models/llava/modeling_llava.py`,
//! `LlavaForConditionalGeneration`): a CLIP vision tower (`models/clip/modeling_clip.py`,
//! `CLIPVisionModel`), the multimodal projector (`linear_1`, activation, `linear_2`) and a
//! LLaMA-family language model ([`super::text`]) whose input embeddings carry the projected image
//! features in place of the image tokens (`masked_scatter`).
//!
//! The batch: per sample, `n` images (the plan's `images`, default 1; `pixel_values`
//! `[B·n, 3, image_size, image_size]`) and `input_ids` of the plan's `seq` text tokens plus each
//! image's placeholder tokens, as many as the tower gives features (`(image_size /
//! patch_size)²`, plus the class token under the `"full"` strategy); `labels` are the input ids.
//! So the tower runs on `B·n` images and the language model on `seq + n · image tokens`
//! positions.
//!
//! The tower runs all its layers, but the loss depends only on the hidden states
//! `vision_feature_layer` selects: the layers past the deepest selected one and `post_layernorm`
//! (its pooled output is replaced by the image features) get no gradient, so their parameters
//! have no `.grad` and no optimizer state, and their activations live only until the forward
//! returns (the model's output holds the tower's last hidden state until then).
//!
//! LoRA (`mode: finetune` with `lora`) is peft's `get_peft_model` on the whole model: every
//! base weight frozen, the targets matched by name suffix, so the language model's `q`, `k`, `v`
//! also wrap the tower's `q_proj`, `k_proj`, `v_proj` ([`clip_layer`]). QLoRA (`quantization:
//! nf4`) makes every `nn.Linear` of the three parts but `lm_head` a 4-bit layer ([`check_weights`]).
//!
//! Serving (`mode: infer`, `serve`) runs the forward calls of `GenerationMixin._sample`
//! through [`super::generate`]'s language model: the prefill takes the pixels and the prompt
//! (each image's placeholder tokens and the plan's `context` text tokens), the decode steps one
//! new token each over the KV cache of the image and text tokens. `context` counts the text
//! alone, as `seq` does in training: a prompt of `context` tokens with `n` images has
//! `context + n · image tokens` positions (LLaVA-1.5: 576 per image).

use crate::estimator::config::{AttnImpl, BuildCtx, Checkpointing, Device};
use crate::estimator::error::EstimateError;
use crate::estimator::graph::{Graph, StorageKind, TensorId};
use crate::estimator::ops::{Conv, EagerOpts, MatmulCopies};
use crate::estimator::tune::{Frozen, InferStep, Mode, Quantization, Sparsity, Target, TuneCtx};
use crate::estimator::units::{Bytes, DType};

use super::activation::{activation, Activation};
use super::generate::{self, Embedded};
use super::text::{self, heads_view, Arch, TextConfig};

/// `CLIPVisionConfig`: the fields the tower's size and ops depend on.
#[derive(Clone, Debug, PartialEq)]
pub struct Clip {
    pub hidden: u64,
    pub intermediate: u64,
    pub layers: u64,
    pub heads: u64,
    pub channels: u64,
    pub image_size: u64,
    pub patch_size: u64,
    /// `hidden_act` (`quick_gelu`).
    pub act: Activation,
    /// `attention_dropout`.
    pub attn_dropout: f64,
}

impl Clip {
    /// Patches per image side (`Conv2d(kernel=stride=patch_size)` on the square image).
    pub fn grid(&self) -> u64 {
        self.image_size / self.patch_size
    }

    /// Positions of the tower's sequence: the patches and the class token.
    pub fn positions(&self) -> u64 {
        self.grid() * self.grid() + 1
    }

    /// Parameters of `CLIPVisionModel`.
    pub fn param_count(&self) -> u64 {
        let (d, i) = (self.hidden, self.intermediate);
        let embeddings =
            d + self.channels * self.patch_size * self.patch_size * d + self.positions() * d;
        let layer = 4 * (d * d + d) + 2 * 2 * d + (d * i + i) + (i * d + d);
        embeddings + 2 * d + self.layers * layer + 2 * d
    }
}

/// A LLaVA `config.json` (`LlavaConfig`).
#[derive(Clone, Debug, PartialEq)]
pub struct Llava {
    pub vision: Clip,
    /// The language model (`text_config`), a LLaMA-family decoder; its `tie_embeddings` is
    /// LLaVA's (`tie_word_embeddings` of either config).
    pub text: TextConfig,
    /// The selected hidden states of the tower (`vision_feature_layer`, one or several), as
    /// indices into its `L + 1` hidden states: 0 is the embeddings after `pre_layrnorm`, `j` the
    /// output of layer `j - 1`.
    pub feature_layers: Vec<u64>,
    /// `vision_feature_select_strategy == "default"`: the class token's feature is dropped.
    pub drop_cls: bool,
    /// `projector_hidden_act`.
    pub projector_act: Activation,
    /// `multimodal_projector_bias`.
    pub projector_bias: bool,
}

impl Llava {
    /// Image tokens per image: the tower's features (its patches, and the class token under the
    /// `"full"` strategy).
    pub fn image_tokens(&self) -> u64 {
        self.vision.positions() - u64::from(self.drop_cls)
    }

    /// Projector input width: the tower's width times the selected layers.
    fn projector_in(&self) -> u64 {
        self.vision.hidden * self.feature_layers.len() as u64
    }

    /// Parameters as `sum(p.numel() for p in model.parameters())` counts them.
    pub fn param_count(&self) -> u64 {
        let h = self.text.hidden;
        let b = if self.projector_bias { h } else { 0 };
        let projector = self.projector_in() * h + b + h * h + b;
        self.vision.param_count() + projector + self.text.param_count()
    }

    /// The deepest selected hidden state: the layers from it on feed nothing the loss reads.
    fn needed_layers(&self) -> u64 {
        self.feature_layers.iter().copied().max().unwrap_or(0)
    }
}

/// How LoRA targets name the modules of `m`'s language model ([`text::LoraFamily`]).
pub fn lora_family(m: &Llava) -> Option<text::LoraFamily> {
    text::LoraFamily::of(&m.text).map(text::LoraFamily::in_llava)
}

/// Refuses the weight formats LLaVA is not modelled in. QLoRA is: transformers 5.24's
/// `replace_with_bnb_linear` (`integrations/bitsandbytes.py`) swaps every `nn.Linear` outside
/// `get_modules_to_not_convert` (`quantizers/base.py` `get_keys_to_not_convert`: the output head;
/// `modeling_llava.py` sets no `_keep_in_fp32_modules`) for a `Linear4bit`, so the tower's
/// `q_proj`, `k_proj`, `v_proj`, `out_proj`, `fc1`, `fc2`, the projector's `linear_1`,
/// `linear_2` and the language model's projections are NF4, and the patch convolution, the
/// embeddings, the norms and `lm_head` are dense (measured: `tests/data/qlora-llava-steps.jsonl`).
/// NF4 serving and the other formats were not measured.
fn check_weights(tune: &TuneCtx, serving: bool) -> Result<(), EstimateError> {
    if tune.dense_linears() {
        return Ok(());
    }
    let qlora = tune.quant == Quantization::Nf4
        && tune.sparsity == Sparsity::None
        && tune.mode == Mode::Finetune
        && tune.lora.is_some();
    if qlora {
        return Ok(());
    }
    Err(EstimateError::Unsupported(if serving {
        "quantized or sparse weights are not modelled for llava serving: serve it in its own dtype (\"quantization\": \"none\")".into()
    } else {
        "of the quantized and sparse formats only QLoRA is modelled for llava: fine-tune it with LoRA and \"quantization\": \"nf4\", or in its own dtype (\"quantization\": \"none\")".into()
    }))
}

/// Builds the training step of `m` at `ctx` (`ctx.seq`: the text tokens per sample), or one
/// forward of its generation when `ctx.tune.infer` asks for one (`serve`).
pub fn build(m: &Llava, ctx: &BuildCtx) -> Result<Graph, EstimateError> {
    let serving = ctx.tune.infer.is_some();
    check_weights(&ctx.tune, serving)?;
    if ctx.tune.lora.as_ref().is_some_and(|l| l.is_all()) {
        return Err(EstimateError::Unsupported(
            "LoRA on `all` is not modelled for llava (peft's all-linear also wraps every linear layer of the vision tower and the projector): list the language model's targets, e.g. [\"q\", \"k\", \"v\", \"o\", \"gate\", \"up\", \"down\"]".into(),
        ));
    }
    if ctx.tp > 1 {
        return Err(EstimateError::Unsupported(
            "tensor parallelism is not modelled for llava: use a plain or fine-tuning step on one GPU".into(),
        ));
    }
    if matches!(ctx.ckpt, Checkpointing::Sqrt | Checkpointing::Segments(_)) {
        // Segments cut one stack of layers; LLaVA has two (the tower's and the language
        // model's).
        return Err(EstimateError::Unsupported(
            "checkpointing in segments is not modelled for llava's two stacks: use \"block\" (every layer of both)".into(),
        ));
    }
    if matches!(ctx.tune.frozen, Some(Frozen::Layers(_))) {
        return Err(EstimateError::Unsupported(
            "\"frozen\": N counts the blocks of one stack; for llava list module paths (e.g. [\"vision_tower\"] or [\"vision_tower\", \"language_model.layers.0\"])".into(),
        ));
    }
    // Several images per sample (`pixel_values` `[B·n, 3, S, S]`): the tower and the projector
    // run on every image, and each image's tokens add to its sample's sequence.
    let n = ctx.images.max(1);
    let image_tokens = m
        .image_tokens()
        .checked_mul(n)
        .ok_or(EstimateError::TooLarge)?;
    let tokens = image_tokens
        .checked_add(ctx.seq)
        .ok_or(EstimateError::TooLarge)?;
    let vision_ctx = BuildCtx {
        batch: ctx.batch.checked_mul(n).ok_or(EstimateError::TooLarge)?,
        ..ctx.clone()
    };
    if serving {
        return serve(m, ctx, &vision_ctx, image_tokens);
    }
    let text_ctx = BuildCtx {
        seq: tokens,
        ..ctx.clone()
    };
    text::check_lora(&m.text, lora_family(m), &text_ctx)?;
    text::check_variant(&m.text, &text_ctx)?;
    let mut g = Graph::for_build(ctx);
    let (ids, pixels) = batch(&mut g, m, (ctx.batch, n), tokens, image_tokens)?;
    // `LlavaModel.forward`: the text embeddings first, then the image features.
    let (embeds, embed_w) = g.scoped("language_model", |g| text::llama_embed(g, &m.text, ids))?;
    let mut tail = Vec::new();
    let merged = merge_images(&mut g, m, &vision_ctx, ids, embeds, pixels, &mut tail)?;
    let mut router_logits = Vec::new();
    let h = g.scoped("language_model", |g| {
        text::llama_decoder(g, &m.text, &text_ctx, merged.embeds, &mut router_logits)
    })?;
    text::llama_head(&mut g, &m.text, h, embed_w, ids, &router_logits)?;
    // The forward returns: the tower's unused tail is released with the model's output.
    g.hold(&tail);
    Ok(g)
}

/// The batch as the processor makes it, for `b` samples of `n` images each: `input_ids`
/// `[B, tokens]` (each sample's image placeholders and its text) and `pixel_values`
/// `[B·n, 3, S, S]` in the weights' dtype. Also records the images on the graph and, for a
/// mixture-of-experts language model, the parameters a token runs through.
fn batch(
    g: &mut Graph,
    m: &Llava,
    (b, n): (u64, u64),
    tokens: u64,
    image_tokens: u64,
) -> Result<(TensorId, TensorId), EstimateError> {
    let v = &m.vision;
    g.image_tokens = image_tokens;
    let ids = g.input(vec![b, tokens], DType::I64)?;
    let pixels = g.input(
        vec![
            b.checked_mul(n).ok_or(EstimateError::TooLarge)?,
            v.channels,
            v.image_size,
            v.image_size,
        ],
        g.precision.param_dtype(),
    )?;
    if m.text.variant.moe.is_some() {
        let rest = m.param_count() - m.text.param_count();
        g.active_params = Some(rest + m.text.active_param_count());
    }
    Ok((ids, pixels))
}

/// What [`merge_images`] made that Python still references after it.
struct Merged {
    /// The input embeddings with the image features in place of the placeholders.
    embeds: TensorId,
    /// `torch.cat(image_features)` and the placeholder mask, locals of `LlavaModel.forward`.
    features: TensorId,
    mask: TensorId,
    /// The tower's last hidden state and selected hidden states, and the projector's output:
    /// the image outputs the model's output carries.
    outputs: Vec<TensorId>,
}

/// `LlavaModel.forward` between the text embeddings `embeds` and the language model
/// (`models/llava/modeling_llava.py`, transformers 5.24): `get_image_features` (the tower on
/// `pixels`, the feature layer selection, the projector), `torch.cat(image_features,
/// dim=0).to(inputs_embeds.dtype)`, `get_placeholder_mask` (`input_ids == image_token_id` and
/// its count) and `inputs_embeds.masked_scatter(special_image_mask, image_features)`.
///
/// Without autograd (serving) Python's references decide what lives: `image_outputs.pooler_output
/// = image_features` drops the tower's pooled class token only once the projector has run, and
/// the caller holds what [`Merged`] lists.
#[allow(clippy::too_many_arguments)]
fn merge_images(
    g: &mut Graph,
    m: &Llava,
    vision_ctx: &BuildCtx,
    ids: TensorId,
    embeds: TensorId,
    pixels: TensorId,
    tail: &mut Vec<TensorId>,
) -> Result<Merged, EstimateError> {
    let tower = g.scoped("vision_tower", |g| {
        g.scoped("vision_model", |g| {
            vision_tower(g, m, vision_ctx, pixels, tail)
        })
    })?;
    let projected = g.scoped("multi_modal_projector", |g| {
        projector(g, m, vision_ctx, tower.selected.clone())
    })?;
    if g.inference {
        g.hold(&[tower.pooled]);
    }
    // `list(image_features)`, `torch.cat(image_features, dim=0).to(inputs_embeds.dtype)`.
    let per_image = g.unbind(projected)?;
    let features = g.cat(&per_image, 0)?;
    let features = g.cast(features, g.dtype(embeds))?;
    // `get_placeholder_mask`: `input_ids == image_token_id` and its count.
    let s = g.shape(ids);
    let mask = g.no_grad_op("eq", &[ids], s.clone(), DType::Bool, Bytes::ZERO)?;
    g.no_grad_op("sum", &[mask], vec![], DType::I64, Bytes::ZERO)?;
    let mask3 = g.alias(mask, vec![s[0], s[1], 1], false);
    let embeds = g.masked_scatter(embeds, mask3, features)?;
    let mut outputs = vec![tower.last];
    outputs.extend(tower.selected);
    outputs.push(projected);
    Ok(Merged {
        embeds,
        features,
        mask,
        outputs,
    })
}

/// One forward of LLaVA's generation, as `GenerationMixin._sample` calls
/// `LlavaForConditionalGeneration.forward` under `torch.no_grad()` (transformers 5.24): the
/// prefill on the pixels and the whole prompt (`[B, image_tokens + context]` ids), a decode
/// step on the one new token per sequence, the language model's KV cache holding the image
/// and text tokens ([`generate::forward`]).
///
/// What lives besides the language model's own tensors, from an allocation trace of the
/// prefill (`tests/data/oracle/serving_steps.py`'s LLaVA cases):
/// - the prefill's image outputs: `LlavaModel.forward` keeps `get_image_features`' output in
///   `mm_encoder_outputs` and returns it in the model's output (`image_outputs`), which the
///   caller drops only after copying the logits: the tower's `last_hidden_state`, the hidden
///   states `vision_feature_layer` selects (`select_hidden_states` records only those) and the
///   projected features (`pooler_output`, a list of views);
/// - `image_features` (the `cat`) and `special_image_mask`, until `LlavaModel.forward`
///   returns, after the language model's last norm;
/// - in a decode step, the caller's batch: the prompt's `input_ids` and `pixel_values` (the
///   processor's output the request was made from) stay resident while `forward` takes only
///   the new token.
///
/// `generate` itself in transformers 5.24 encodes the images before the prefill
/// (`_prepare_multimodal_encoder_kwargs_for_generation`) and passes them as
/// `mm_encoder_outputs`, which `model_kwargs` then keeps through the decode steps; this models
/// the forward given the pixels, as the measurements ran it.
fn serve(
    m: &Llava,
    ctx: &BuildCtx,
    vision_ctx: &BuildCtx,
    image_tokens: u64,
) -> Result<Graph, EstimateError> {
    let step = generate::infer_step(ctx)?;
    let prompt = image_tokens
        .checked_add(ctx.seq)
        .ok_or(EstimateError::TooLarge)?;
    // The language model's step counts the image placeholders with the text: the prefill runs
    // over all of them, and a decode step's cache holds them.
    let lm_step = if step.is_prefill() {
        InferStep {
            tokens: prompt,
            ..step
        }
    } else {
        InferStep {
            past: step
                .past
                .checked_add(image_tokens)
                .ok_or(EstimateError::TooLarge)?,
            ..step
        }
    };
    let text_ctx = BuildCtx {
        seq: prompt,
        tune: TuneCtx {
            infer: Some(lm_step),
            ..ctx.tune.clone()
        },
        ..ctx.clone()
    };
    text::check_positions(&m.text, &text_ctx)?;
    text::check_variant(&m.text, &text_ctx)?;
    let mut g = Graph::for_build(ctx);
    let n = ctx.images.max(1);
    let (prompt_ids, pixels) = batch(&mut g, m, (ctx.batch, n), prompt, image_tokens)?;
    if !step.is_prefill() {
        vision_weights(&mut g, m, vision_ctx)?;
        let ids = g.input(vec![ctx.batch, step.tokens], DType::I64)?;
        generate::forward(&mut g, &m.text, &text_ctx, ids, |_, x| {
            Ok(Embedded {
                x,
                held: Vec::new(),
            })
        })?;
        return Ok(g);
    }
    generate::forward(&mut g, &m.text, &text_ctx, prompt_ids, |g, embeds| {
        let merged = merge_images(
            g,
            m,
            vision_ctx,
            prompt_ids,
            embeds,
            pixels,
            &mut Vec::new(),
        )?;
        for &t in &merged.outputs {
            g.keep(t);
        }
        Ok(Embedded {
            x: merged.embeds,
            held: vec![merged.features, merged.mask],
        })
    })?;
    Ok(g)
}

/// The tower's and the projector's parameters and buffers, resident through a decode step that
/// does not run them: those that building both on one image makes.
fn vision_weights(g: &mut Graph, m: &Llava, ctx: &BuildCtx) -> Result<(), EstimateError> {
    let one = BuildCtx {
        batch: 1,
        ..ctx.clone()
    };
    let mut scratch = Graph::for_build(&one);
    let v = &m.vision;
    let pixels = scratch.input(
        vec![1, v.channels, v.image_size, v.image_size],
        scratch.precision.param_dtype(),
    )?;
    let tower = scratch.scoped("vision_tower", |g| {
        g.scoped("vision_model", |g| {
            vision_tower(g, m, &one, pixels, &mut Vec::new())
        })
    })?;
    scratch.scoped("multi_modal_projector", |g| {
        projector(g, m, &one, tower.selected)
    })?;
    let mut seen = vec![false; scratch.storages.len()];
    for t in &scratch.tensors {
        let kind = scratch.storages[t.storage].kind;
        if std::mem::replace(&mut seen[t.storage], true) {
            continue;
        }
        if t.is_param {
            g.param_of(t.shape.clone(), t.dtype)?;
        } else if kind == StorageKind::Buffer {
            g.buffer(t.shape.clone(), t.dtype)?;
        }
    }
    Ok(())
}

/// The tensors of the tower's output ([`vision_tower`]).
struct Tower {
    /// The hidden states [`Llava::feature_layers`] selects, `[B, positions, D]` each.
    selected: Vec<TensorId>,
    /// `last_hidden_state`: the last layer's output.
    last: TensorId,
    /// `pooler_output`: `post_layernorm` of the class token.
    pooled: TensorId,
}

/// `CLIPVisionModel.forward` (`models/clip/modeling_clip.py`, transformers 5.24) up to the
/// selected hidden states. The ops past them run too; in training what they would save for
/// backward goes to `tail` instead, for the caller to hold until the forward returns.
///
/// Without autograd (serving), Python's references keep what the ops no longer read:
/// `CLIPVisionEmbeddings.forward` binds the convolution's output (`patch_embeds`, a view of it)
/// until it returns, and `CLIPVisionModel.forward` (`hidden_states`) and `CLIPEncoder.forward`
/// (`inputs_embeds`) bind `pre_layrnorm`'s output until the tower returns.
fn vision_tower(
    g: &mut Graph,
    m: &Llava,
    ctx: &BuildCtx,
    pixels: TensorId,
    tail: &mut Vec<TensorId>,
) -> Result<Tower, EstimateError> {
    let v = &m.vision;
    let cpu = ctx.device == Device::Cpu;
    let (b, d, n) = (ctx.batch, v.hidden, v.positions());
    // Parameters past the selected layers never receive a gradient: to the optimizer they are
    // frozen.
    let needed = m.needed_layers();
    g.frozen.extend(
        (needed..v.layers).map(|i| format!("vision_tower.vision_model.encoder.layers.{i}")),
    );
    g.frozen
        .push("vision_tower.vision_model.post_layernorm".into());
    // `position_ids` buffer `[1, positions]`.
    let pos = g.buffer(vec![1, n], DType::I64)?;
    let x = g.scoped("embeddings", |g| {
        let cls = g.scoped("class_embedding", |g| g.param(vec![d]))?;
        // `pixel_values.to(patch_embedding.weight.dtype)` is the identity: the batch is
        // already in the weights' dtype.
        let p = g.conv2d(
            "patch_embedding",
            pixels,
            Conv::new(v.channels, d, v.patch_size, v.patch_size, 0),
        )?;
        let grid = v.grid();
        let p = g.view(p, vec![b, d, grid * grid])?;
        let p = g.view(p, vec![b, grid * grid, d])?;
        let cls = g.expand(cls, vec![b, 1, d])?;
        // The class embedding (an fp32 parameter) goes first: the concatenation is fp32 under
        // autocast, as torchvision's ViT's.
        let x = g.cat(&[cls, p], 1)?;
        let (pe, _) = g.embedding("position_embedding", pos, n, d)?;
        let x = g.add(x, pe, false)?;
        if g.inference {
            g.hold(&[p]);
        }
        Ok::<_, EstimateError>(x)
    })?;
    let x = g.layer_norm_on("pre_layrnorm", x, true, cpu)?;
    let mut hidden = vec![x];
    let first_tail = std::cell::Cell::new(None);
    let first_tail_tensor = std::cell::Cell::new(None);
    let mut h = x;
    g.scoped("encoder", |g| {
        for (range, ck) in g.checkpoint_runs(ctx.ckpt, v.layers as usize, "layers", true)? {
            h = g.checkpointed(ck, |g| {
                let mut h = h;
                for i in range {
                    if i as u64 == needed && first_tail.get().is_none() {
                        first_tail.set(Some(g.ops.len()));
                        first_tail_tensor.set(Some(g.tensors.len()));
                    }
                    h = g.scoped(format!("layers.{i}"), |g| clip_layer(g, v, ctx, h))?;
                    hidden.push(h);
                }
                Ok::<_, EstimateError>(h)
            })?;
        }
        Ok::<_, EstimateError>(())
    })?;
    if first_tail.get().is_none() {
        first_tail.set(Some(g.ops.len()));
    }
    // `last_hidden_state[:, 0, :]` and `post_layernorm`.
    let pooled = g.select(h, vec![b, d])?;
    let pooled = g.layer_norm_on("post_layernorm", pooled, true, cpu)?;
    if g.inference {
        g.hold(&[x]);
    }
    let start = first_tail.get().unwrap_or(g.ops.len());
    for op in &mut g.ops[start..] {
        tail.append(&mut op.saved);
        op.grads.clear();
    }
    // LoRA adapters past the selected layers are created and stay in the model, but backward
    // never reaches them: AdamW skips a parameter whose `.grad` is None, so they have no state.
    let first = first_tail_tensor.get().unwrap_or(g.tensors.len());
    for t in &mut g.tensors[first..] {
        if t.is_param {
            t.requires_grad = false;
        }
    }
    Ok(Tower {
        selected: m
            .feature_layers
            .iter()
            .map(|&i| hidden[i as usize])
            .collect(),
        last: h,
        pooled,
    })
}

/// `CLIPEncoderLayer.forward`: `layer_norm1`, self-attention (`q_proj`, `k_proj`, `v_proj`,
/// SDPA or eager without a mask, `out_proj`), residual; `layer_norm2`, `fc1`, activation,
/// `fc2`, residual.
///
/// Without autograd (serving), Python's references keep what the ops no longer read:
/// `CLIPAttention.forward` binds its input and `queries`, `keys`, `values` until `out_proj` has
/// run, the layer binds `layer_norm2`'s output until the MLP returns, eager attention's weights
/// (`hidden_states, _ = self.self_attn(...)`) and the layer's input (the encoder's loop
/// variable) until the layer returns.
fn clip_layer(
    g: &mut Graph,
    v: &Clip,
    ctx: &BuildCtx,
    x: TensorId,
) -> Result<TensorId, EstimateError> {
    let cpu = ctx.device == Device::Cpu;
    let (d, nh) = (v.hidden, v.heads);
    let hd = d / nh;
    // `dropout=0.0 if not self.training else self.dropout`.
    let dropout = if g.inference { 0.0 } else { v.attn_dropout };
    let a = g.layer_norm_on("layer_norm1", x, true, cpu)?;
    let (o, weights) = g.scoped("self_attn", |g| {
        // peft matches a listed target by the module name's suffix
        // (`peft/tuners/tuners_utils.py` `check_target_module_exists`): the language model's
        // `q_proj`, `k_proj`, `v_proj` targets wrap the tower's projections of the same names
        // too. Its `out_proj` matches no target the plan can name (`o` is `o_proj`).
        let q = text::adapted_linear(g, "q_proj", a, d, d, true, Target::Q, ctx)?;
        let k = text::adapted_linear(g, "k_proj", a, d, d, true, Target::K, ctx)?;
        let vv = text::adapted_linear(g, "v_proj", a, d, d, true, Target::V, ctx)?;
        let q = heads_view(g, q, nh, hd)?;
        let k = heads_view(g, k, nh, hd)?;
        let vv = heads_view(g, vv, nh, hd)?;
        let (o, weights) = match ctx.attn {
            AttnImpl::Sdpa => (g.sdpa(q, k, vv, None, dropout, cpu)?, None),
            AttnImpl::Eager => {
                // `torch.matmul` copies the strided head views of all three.
                let copies = MatmulCopies {
                    q: true,
                    k: true,
                    v: true,
                };
                let opts = EagerOpts {
                    dropout,
                    fp32_softmax: true,
                    cpu,
                    softcap: false,
                };
                let (o, p) = g.eager_attention_weights(q, k, vv, None, opts, copies)?;
                (o, Some(p))
            }
        };
        let o = g.weight_linear("out_proj", o, d, d, true, &ctx.tune)?;
        if g.inference {
            g.hold(&[a, q, k, vv]);
        }
        Ok::<_, EstimateError>((o, weights))
    })?;
    let r = g.add(x, o, false)?;
    let m = g.layer_norm_on("layer_norm2", r, true, cpu)?;
    let y = g.scoped("mlp", |g| {
        let y = g.weight_linear("fc1", m, d, v.intermediate, true, &ctx.tune)?;
        let y = activation(g, y, v.act, cpu)?;
        g.weight_linear("fc2", y, v.intermediate, d, true, &ctx.tune)
    })?;
    if g.inference {
        g.hold(&[m]);
    }
    let out = g.add(r, y, false)?;
    if g.inference {
        g.hold(&[x]);
        if let Some(p) = weights {
            g.hold(&[p]);
        }
    }
    Ok(out)
}

/// `get_image_features`' selection and `LlavaMultiModalProjector.forward`: each selected hidden
/// state without its class token under the default strategy (`[:, 1:]`, a view), several of them
/// concatenated on the features, then `linear_1`, activation, `linear_2`.
fn projector(
    g: &mut Graph,
    m: &Llava,
    ctx: &BuildCtx,
    selected: Vec<TensorId>,
) -> Result<TensorId, EstimateError> {
    let cpu = ctx.device == Device::Cpu;
    let (b, d, h) = (ctx.batch, m.vision.hidden, m.text.hidden);
    let t = m.image_tokens();
    let views = selected
        .into_iter()
        .map(|x| {
            if m.drop_cls {
                g.slice_view(x, vec![b, t, d])
            } else {
                Ok(x)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (x, strided) = if views.len() == 1 {
        (views[0], m.drop_cls)
    } else {
        (g.cat(&views, 2)?, false)
    };
    let din = m.projector_in();
    // `aten::linear` on a 3-D input that is not contiguous (the `[:, 1:]` slice of more than one
    // image) takes the `matmul` path, whose reshape copies it; autocast's cast to the
    // low-precision dtype already makes a contiguous copy, and so does `Linear4bit`'s cast to its
    // compute dtype.
    let dense = ctx.tune.dense_linears();
    let y = if strided && b > 1 && g.precision.autocast().is_none() && dense {
        let flat = g.copy(x, vec![b * t, din], false)?;
        let y = g.linear("linear_1", flat, din, h, m.projector_bias)?;
        g.view(y, vec![b, t, h])?
    } else {
        g.weight_linear("linear_1", x, din, h, m.projector_bias, &ctx.tune)?
    };
    let y = activation(g, y, m.projector_act, cpu)?;
    g.weight_linear("linear_2", y, h, h, m.projector_bias, &ctx.tune)
}

/// Whether `tc` can be LLaVA's language model.
pub fn is_language_model(tc: &TextConfig) -> bool {
    tc.arch == Arch::Llama
}
