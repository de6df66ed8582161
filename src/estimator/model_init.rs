//! How a model's weights come onto the device before the training loop, when that leaves the
//! caching allocator something to remember. By default each parameter is allocated once, in its
//! final form (`from_pretrained`, `model.to("cuda")`), and the replay simply starts with them.
//! torchtune 0.1's single-device LoRA/QLoRA recipe (`recipes/lora_finetune_single_device.py`
//! `_setup_model`, torchtune 0.1.1) is different, and its QLoRA peak reserved memory comes from
//! it:
//!
//! 1. the model is built on the GPU (`with set_default_dtype(bf16), self._device:`), and
//!    `lora_llama2` (`models/llama2/_component_builders.py`) builds ONE decoder layer: each
//!    projection an `nn.Linear` in bf16, which `LoRALinear` (`modules/peft/lora.py`) quantizes
//!    with torchao's `to_nf4` when `quantize_base` and then drops, its adapters, the rotary
//!    tables, the two norms; then the embeddings, the output projection and the final norm;
//! 2. `TransformerDecoder` (`modules/transformer.py` `_get_clones`) deep-copies that layer once
//!    per layer; torchtune registers `clone` for `NF4Tensor` as
//!    `to_nf4(t.get_original_weight())` (`utils/_register_nf4_dispatch_ops.py`), so every copy of
//!    every quantized weight is dequantized and quantized again on the device; the template
//!    layer is dropped when the builder returns;
//! 3. `model.load_state_dict(checkpoint)` copies each weight in; for an `NF4Tensor`, torchtune's
//!    `copy_` moves the bf16 checkpoint tensor to the device, quantizes it there and replaces the
//!    weight's pieces.
//!
//! Each quantization briefly holds 68 bytes per weight element ([`torchao_nf4::quantize`]), and
//! the pieces it keeps are carved from the blocks those temporaries leave free: the reserved
//! memory after initialisation (9.13 GB for Llama-2-7B QLoRA in torchtune's tutorial) is more
//! than twice what the model keeps.

use super::allocator::{AllocTrace, Handle};
use super::device::ReduceDevice;
use super::torchao_nf4::{self as nf4, Kept};

/// A model's initialisation as the graph carries it: the model and the function that replays
/// its stream. The function is a pointer set by the builder that makes the model, so a page
/// that never builds one never loads the replay's code (it sits in the lazily fetched models
/// chunk with the builder).
#[derive(Clone, Debug)]
pub struct ModelInit {
    pub model: TorchtuneLlama,
    pub replay: fn(&TorchtuneLlama, &mut AllocTrace, Option<ReduceDevice>),
}

impl ModelInit {
    pub fn of(model: TorchtuneLlama) -> ModelInit {
        ModelInit {
            model,
            replay: TorchtuneLlama::replay,
        }
    }
}

/// torchtune 0.1's Llama-2 family as `lora_llama2` builds it, with what its weights are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TorchtuneLlama {
    pub layers: u64,
    pub dim: u64,
    /// The MLP's hidden size.
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub vocab: u64,
    /// `max_seq_len` of the rotary tables (`RotaryPositionalEmbeddings` caches that many rows).
    pub max_seq_len: u64,
    /// LoRA rank (the adapters' `lora_a` and `lora_b`, bf16).
    pub rank: u64,
    /// Which projections carry adapters, in construction order [`Proj::ALL`].
    pub adapted: [bool; 7],
    /// `quantize_base`: the adapted projections' weights are torchao `NF4Tensor`s.
    pub quantize: bool,
}

/// The projections of a layer in the order `lora_llama2` constructs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proj {
    Q,
    K,
    V,
    Output,
    Gate,
    Down,
    Up,
}

impl Proj {
    pub const ALL: [Proj; 7] = [
        Proj::Q,
        Proj::K,
        Proj::V,
        Proj::Output,
        Proj::Gate,
        Proj::Down,
        Proj::Up,
    ];
}

/// One projection's blocks: a quantized weight's pieces or a bf16 weight, and its adapters.
#[derive(Clone, Copy, Debug)]
enum Weight {
    Nf4(Kept),
    Dense(Handle),
}

#[derive(Clone, Copy, Debug)]
struct Linear {
    weight: Weight,
    lora: Option<(Handle, Handle)>,
}

/// A layer's blocks, in the order its module tree lists them (what `deepcopy` and
/// `load_state_dict` walk): `sa_norm`, `attn` (q, k, v, output, rotary tables), `mlp_norm`,
/// `mlp` (w1 = gate, w2 = down, w3 = up).
struct Layer {
    sa_norm: Handle,
    attn: [Linear; 4],
    rope: (Handle, Handle),
    mlp_norm: Handle,
    mlp: [Linear; 3],
}

impl Layer {
    fn free(self, t: &mut AllocTrace) {
        let free_linear = |t: &mut AllocTrace, l: &Linear| {
            match l.weight {
                Weight::Nf4(k) => k.free(t),
                Weight::Dense(h) => t.free(h),
            }
            if let Some((a, b)) = l.lora {
                t.free(a);
                t.free(b);
            }
        };
        t.free(self.sa_norm);
        for l in &self.attn {
            free_linear(t, l);
        }
        t.free(self.rope.0);
        t.free(self.rope.1);
        t.free(self.mlp_norm);
        for l in &self.mlp {
            free_linear(t, l);
        }
    }
}

impl TorchtuneLlama {
    /// `(in, out)` features of a projection.
    fn shape(&self, p: Proj) -> (u64, u64) {
        let (q, kv) = (self.heads * self.head_dim, self.kv_heads * self.head_dim);
        match p {
            Proj::Q => (self.dim, q),
            Proj::K | Proj::V => (self.dim, kv),
            Proj::Output => (q, self.dim),
            Proj::Gate | Proj::Up => (self.dim, self.hidden),
            Proj::Down => (self.hidden, self.dim),
        }
    }
    fn adapted(&self, p: Proj) -> bool {
        // `Proj`'s variants are declared in `Proj::ALL`'s order.
        self.adapted[p as usize]
    }
    fn quantized(&self, p: Proj) -> bool {
        self.quantize && self.adapted(p)
    }

    /// A projection's `lora_a` and `lora_b` (`[r, in]`, `[out, r]`, bf16), made or cloned in
    /// that order, when it carries adapters.
    fn adapters(&self, t: &mut AllocTrace, p: Proj) -> Option<(Handle, Handle)> {
        let (fin, fout) = self.shape(p);
        self.adapted(p)
            .then(|| (t.alloc(2 * self.rank * fin), t.alloc(2 * fout * self.rank)))
    }

    /// `LoRALinear(...)` or `nn.Linear(...)` built on the device: the bf16 weight (quantized and
    /// dropped under `quantize_base`), then the adapters.
    fn new_linear(&self, t: &mut AllocTrace, p: Proj, dev: Option<ReduceDevice>) -> Linear {
        let (fin, fout) = self.shape(p);
        let n = fin * fout;
        let w = t.alloc(2 * n);
        let weight = if self.quantized(p) {
            let k = nf4::quantize(t, n, dev);
            t.free(w);
            Weight::Nf4(k)
        } else {
            Weight::Dense(w)
        };
        Linear {
            weight,
            lora: self.adapters(t, p),
        }
    }

    /// `copy.deepcopy` of a projection: a bf16 tensor is cloned; an `NF4Tensor` is dequantized and
    /// quantized again (torchtune's `clone`), after which `Tensor.__deepcopy__` deep-copies the
    /// subclass's `__dict__` onto the clone ([`nf4::deepcopy_pieces`]); then the adapters are
    /// cloned.
    fn clone_linear(&self, t: &mut AllocTrace, p: Proj, dev: Option<ReduceDevice>) -> Linear {
        let (fin, fout) = self.shape(p);
        let n = fin * fout;
        let weight = if self.quantized(p) {
            let full = nf4::dequantize(t, n);
            let cloned = nf4::quantize(t, n, dev);
            t.free(full);
            Weight::Nf4(nf4::deepcopy_pieces(t, n, cloned))
        } else {
            Weight::Dense(t.alloc(2 * n))
        };
        Linear {
            weight,
            lora: self.adapters(t, p),
        }
    }

    /// `RotaryPositionalEmbeddings._rope_init` (`modules/position_embeddings.py`): `theta` from
    /// an int64 `arange` through `.float()`, `/ dim`, `base **` (a scalar tensor), `1.0 /`
    /// (reciprocal, then the product); then `build_rope_cache`: the fp32 positions, their outer
    /// product with `theta`, its `cos` and `sin` stacked into the kept `[max_seq_len, d/2, 2]`.
    fn new_rope(&self, t: &mut AllocTrace) -> (Handle, Handle) {
        let half = self.head_dim / 2;
        let arange = t.alloc(8 * half);
        let float = t.alloc(4 * half);
        t.free(arange);
        let scaled = t.alloc(4 * half);
        t.free(float);
        let pow = t.alloc(4 * half);
        let base = t.alloc(8);
        t.free(base);
        t.free(scaled);
        let reciprocal = t.alloc(4 * half);
        let theta = t.alloc(4 * half);
        t.free(reciprocal);
        t.free(pow);
        let rows = self.max_seq_len;
        let positions = t.alloc(4 * rows);
        let angles = t.alloc(4 * rows * half);
        let cos = t.alloc(4 * rows * half);
        let sin = t.alloc(4 * rows * half);
        let cache = t.alloc(8 * rows * half);
        for h in [cos, sin, positions, angles] {
            t.free(h);
        }
        (theta, cache)
    }

    fn norm(&self, t: &mut AllocTrace) -> Handle {
        t.alloc(2 * self.dim)
    }

    /// The template layer, in construction order: the attention's four projections and its
    /// rotary tables, the MLP's three, then the two norms.
    fn new_layer(&self, t: &mut AllocTrace, dev: Option<ReduceDevice>) -> Layer {
        let [q, k, v, o, gate, down, up] = Proj::ALL;
        let attn = [q, k, v, o].map(|p| self.new_linear(t, p, dev));
        let rope = self.new_rope(t);
        let mlp = [gate, down, up].map(|p| self.new_linear(t, p, dev));
        let sa_norm = self.norm(t);
        let mlp_norm = self.norm(t);
        Layer {
            sa_norm,
            attn,
            rope,
            mlp_norm,
            mlp,
        }
    }

    /// One `deepcopy` of the template, in module-tree order.
    fn clone_layer(&self, t: &mut AllocTrace, dev: Option<ReduceDevice>) -> Layer {
        let [q, k, v, o, gate, down, up] = Proj::ALL;
        let sa_norm = self.norm(t);
        let attn = [q, k, v, o].map(|p| self.clone_linear(t, p, dev));
        // Buffers are plain tensors: a storage deepcopy each, with a one-element fp32 temporary.
        let half = self.head_dim / 2;
        let buffer = |t: &mut AllocTrace, bytes: u64| {
            let h = t.alloc(bytes);
            let one = t.alloc(4);
            t.free(one);
            h
        };
        let rope = (buffer(t, 4 * half), buffer(t, 8 * self.max_seq_len * half));
        let mlp_norm = self.norm(t);
        let mlp = [gate, down, up].map(|p| self.clone_linear(t, p, dev));
        Layer {
            sa_norm,
            attn,
            rope,
            mlp_norm,
            mlp,
        }
    }

    /// The whole initialisation's malloc/free stream, appended to `t`; what it leaves allocated
    /// is the model's parameters and buffers.
    pub fn replay(&self, t: &mut AllocTrace, dev: Option<ReduceDevice>) {
        let template = self.new_layer(t, dev);
        let embed = 2 * self.vocab * self.dim;
        t.alloc(embed); // tok_embeddings
        t.alloc(embed); // output
        t.alloc(2 * self.dim); // norm
        let mut layers: Vec<Layer> = (0..self.layers).map(|_| self.clone_layer(t, dev)).collect();
        template.free(t);
        // load_state_dict: only the quantized weights allocate (`to_nf4(src.to(device))`).
        for layer in &mut layers {
            let linears = layer.attn.iter_mut().chain(layer.mlp.iter_mut());
            for (l, p) in linears.zip(Proj::ALL) {
                if let Weight::Nf4(old) = l.weight {
                    let (fin, fout) = self.shape(p);
                    let n = fin * fout;
                    let src = t.alloc(2 * n);
                    let k = nf4::quantize(t, n, dev);
                    t.free(src);
                    old.free(t);
                    l.weight = Weight::Nf4(k);
                }
            }
        }
    }

    /// Bytes the initialisation leaves allocated, each block as the caching allocator rounds
    /// it (for checking that the graph holds the same parameters).
    pub fn kept_blocks(&self) -> Vec<u64> {
        let mut v = Vec::new();
        let mut push = |b: u64| v.push(b);
        for _ in 0..self.layers {
            push(2 * self.dim);
            for p in Proj::ALL {
                let (fin, fout) = self.shape(p);
                let n = fin * fout;
                if self.quantized(p) {
                    for (e, d) in nf4::storages(n) {
                        push((e * d.bits()).div_ceil(8));
                    }
                } else {
                    push(2 * n);
                }
                if self.adapted(p) {
                    push(2 * self.rank * fin);
                    push(2 * fout * self.rank);
                }
            }
            push(4 * (self.head_dim / 2));
            push(8 * self.max_seq_len * (self.head_dim / 2));
            push(2 * self.dim);
        }
        push(2 * self.vocab * self.dim);
        push(2 * self.vocab * self.dim);
        push(2 * self.dim);
        v
    }
}
