//! The page's words in English and 中文, and how it writes numbers and sizes (GiB or GB). Every
//! text the page shows is built here, so both languages stay complete: [`Msg`] is one enum of
//! fixed texts, [`Label`] names an option either by a [`Msg`] or by a name that reads the same in
//! every language, and the functions below and in the submodules (one per part of the page) build
//! the texts that carry numbers from facts the logic modules hand them.

use crate::estimator::config::{AttnImpl, CausalMask, OptimizerImpl, OptimizerKind, Precision};
use crate::estimator::decimal::Fixed;
use crate::estimator::timeline::{Category, Phase};
use crate::estimator::units::Bytes;

pub mod charts;
pub mod chinese;
pub mod comparison;
pub mod formulas;
pub mod hub;
pub mod inference;
pub mod parallelism;
pub mod suggestions;

/// The page's language.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Lang {
    #[default]
    En,
    Zh,
}

impl Lang {
    pub const ALL: [Lang; 2] = [Lang::En, Lang::Zh];
    /// The code used in the URL and in localStorage.
    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh",
        }
    }
    /// The BCP 47 tag for `<html lang>`.
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh-CN",
        }
    }
    /// The language's own name, as the language picker shows it.
    pub fn name(self) -> &'static str {
        match self {
            Lang::En => "English",
            Lang::Zh => "中文",
        }
    }
    pub fn parse(s: &str) -> Option<Lang> {
        match s {
            "en" => Some(Lang::En),
            "zh" => Some(Lang::Zh),
            _ => None,
        }
    }
    /// The language for a browser's `navigator.language` (Chinese variants → 中文).
    pub fn from_browser(tag: &str) -> Lang {
        if tag.to_ascii_lowercase().starts_with("zh") {
            Lang::Zh
        } else {
            Lang::En
        }
    }
}

/// How sizes are written: binary units (GiB, what PyTorch and `nvidia-smi` count in) or decimal
/// units (GB, what GPU data sheets print).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Units {
    #[default]
    Binary,
    Decimal,
}

impl Units {
    pub const ALL: [Units; 2] = [Units::Binary, Units::Decimal];
    pub fn code(self) -> &'static str {
        match self {
            Units::Binary => "gib",
            Units::Decimal => "gb",
        }
    }
    pub fn parse(s: &str) -> Option<Units> {
        match s {
            "gib" => Some(Units::Binary),
            "gb" => Some(Units::Decimal),
            _ => None,
        }
    }
    /// The unit charts use on their memory axis.
    pub fn axis_unit(self) -> &'static str {
        match self {
            Units::Binary => "GiB",
            Units::Decimal => "GB",
        }
    }
}

/// A size in the chosen units, about three significant digits: "97.5 MiB" or "102 MB".
pub fn fmt_bytes(b: Bytes, units: Units) -> String {
    match units {
        Units::Binary => b.to_string(),
        Units::Decimal => {
            const U: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
            if b.0 < 1000 {
                return format!("{} B", b.0);
            }
            let mut v = b.0 as f64;
            let mut u = 0;
            while v >= 1000.0 && u < U.len() - 1 {
                v /= 1000.0;
                u += 1;
            }
            if v >= 100.0 {
                format!("{} {}", Fixed(v, 0), U[u])
            } else if v >= 10.0 {
                format!("{} {}", Fixed(v, 1), U[u])
            } else {
                format!("{} {}", Fixed(v, 2), U[u])
            }
        }
    }
}

/// A count in decimal units ("25.6 M", "7.00 B"); Chinese uses 万 and 亿.
pub fn fmt_count(n: u64, lang: Lang) -> String {
    let v = n as f64;
    match lang {
        Lang::En => crate::estimator::units::Elems(n).to_string(),
        Lang::Zh => {
            if v >= 1e8 {
                format!("{} 亿", Fixed(v / 1e8, 2))
            } else if v >= 1e4 {
                format!("{} 万", Fixed(v / 1e4, 1))
            } else {
                n.to_string()
            }
        }
    }
}

/// A percentage with no more digits than it needs: "33 %", "4.5 %", "0.2 %".
pub fn fmt_pct(frac: f64) -> String {
    let p = frac * 100.0;
    if !p.is_finite() {
        return "–".into();
    }
    if p.abs() >= 10.0 || p == 0.0 {
        format!("{} %", Fixed(p, 0))
    } else {
        format!("{} %", Fixed(p, 1))
    }
}

/// A duration with a sensible unit (the same in both languages).
pub fn fmt_seconds(s: f64) -> String {
    if !s.is_finite() {
        "–".into()
    } else if s <= 0.0 {
        // Also −0.0, which a layout with nothing to communicate computes.
        "0 s".into()
    } else if s >= 1.0 {
        format!("{} s", Fixed(s, 2))
    } else if s >= 1e-3 {
        format!("{} ms", Fixed(s * 1e3, 1))
    } else {
        format!("{} µs", Fixed(s * 1e6, 0))
    }
}

macro_rules! messages {
    ($($name:ident => $en:expr, $zh:expr;)*) => {
        /// Every fixed text of the page.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Msg { $($name),* }
        impl Msg {
            pub const ALL: &'static [Msg] = &[$(Msg::$name),*];
            /// The English texts in the enum's order: a table read by index is a fraction of
            /// the code a match with an arm per message compiles to.
            const EN: &'static [&'static str] = &[$($en),*];
            /// The text in `lang`. Chinese comes from its own chunk ([`chinese`]), which the page
            /// fetches before it shows Chinese; should that fetch have failed, English stands in.
            pub fn t(self, lang: Lang) -> &'static str {
                let en = Self::EN[self as usize];
                match lang {
                    Lang::En => en,
                    Lang::Zh => chinese::text(self).unwrap_or(en),
                }
            }
        }
        /// The Chinese texts in the enum's order, read only by [`chinese`].
        static ZH: &[&str] = &[$($zh),*];
    };
}

impl formulas::Formula<'_> {
    /// The sentence in `lang`. The Chinese sentences come from the Chinese texts' chunk
    /// ([`chinese`]); until it is fetched, the English one.
    pub fn text(&self, lang: Lang) -> String {
        match lang {
            Lang::Zh => chinese::formula(self).unwrap_or_else(|| self.english()),
            Lang::En => self.english(),
        }
    }
}

messages! {
    Title => "VRAM Planner", "显存规划器";
    Tagline => "GPU memory of one PyTorch training step, simulated op by op.", "逐算子模拟 PyTorch 一次训练步的显存占用。";
    PlanSection => "Plan", "训练设置";
    ResultsSection => "Estimate", "估算结果";
    Model => "Model", "模型";
    HubModel => "Hugging Face model: its id or config.json", "Hugging Face 模型：ID 或 config.json";
    HubId => "Model id on the Hub (owner/name)", "Hub 上的模型 ID（owner/name）";
    HubFetch => "Fetch", "获取";
    HubFetching => "Fetching the config.json…", "正在获取 config.json…";
    HubUnavailable => "The Hub cannot be reached (offline?): paste the config.json below.", "无法连接 Hub（是否离线？）：请在下方粘贴 config.json。";
    PasteConfig => "Or paste its config.json", "或粘贴其 config.json";
    PasteHint => "A model's config.json from Hugging Face.", "Hugging Face 上模型的 config.json。";
    UseConfig => "Use this config", "使用此配置";
    CustomConfig => "Custom config.json", "自定义 config.json";
    ConfigNotJson => "This is not a JSON object.", "这不是一个 JSON 对象。";
    Batch => "Batch size", "批大小";
    Resolution => "Resolution (px)", "分辨率（像素）";
    SeqLen => "Sequence length (tokens)", "序列长度（token）";
    Precision => "Precision", "精度";
    Optimizer => "Optimizer", "优化器";
    OptimizerImpl => "Optimizer implementation", "优化器实现";
    Checkpointing => "Gradient checkpointing", "梯度检查点";
    Segments => "Segments k", "分段数 k";
    Accumulation => "Gradient accumulation steps", "梯度累积步数";
    Attention => "Attention kernel", "注意力算子";
    CausalMaskLabel => "Batch padding (causal mask)", "批次填充（因果掩码）";
    MaskMaterialized => "Padded or packed: the mask is built", "有填充或打包：构建掩码";
    MaskSkipped => "Unpadded: is_causal, no mask", "无填充：is_causal，不建掩码";
    Gpu => "GPU", "GPU";
    CustomGpu => "Custom capacity…", "自定义容量…";
    CustomCapacity => "Capacity (GiB)", "容量（GiB）";
    Language => "Language", "语言";
    UnitsLabel => "Units", "单位";
    UnitsBinary => "GiB (binary)", "GiB（二进制）";
    UnitsDecimal => "GB (decimal)", "GB（十进制）";
    Peak => "Allocated peak", "已分配峰值";
    Reserved => "Reserved", "已预留";
    DeviceTotal => "Device total", "设备总用量";
    MaxBatch => "Largest batch that fits", "可容纳的最大批大小";
    NoBatchFits => "none: even batch 1 does not fit", "无：批大小 1 也放不下";
    Computing => "computing…", "计算中…";
    PeakPhase => "Peak during", "峰值出现于";
    Breakdown => "Where the memory goes (at the peak)", "显存去向（峰值时刻）";
    Component => "Component", "组成";
    Memory => "Memory", "显存";
    Formula => "How it is computed", "计算方式";
    MoeExperts => "MoE: routed experts", "MoE：路由专家";
    MoeRouter => "MoE: router", "MoE：路由器";
    MoeDispatch => "MoE: token dispatch", "MoE：token 分发";
    MoeShared => "MoE: shared experts", "MoE：共享专家";
    ChartBatch => "Memory against batch size", "显存随批大小变化";
    ChartLength => "Memory against input size", "显存随输入尺寸变化";
    ChartCheckpoint => "Gradient checkpointing: memory and compute", "梯度检查点：显存与计算量";
    ChartTimeline => "Memory during one training step", "一次训练步中的显存";
    ChartLayers => "Saved activations per layer", "各层保存的激活";
    CapBatch => "Allocated peak against batch size, stacked by what the memory holds. Black line: GPU capacity; dashed: device total; red: your batch; green: the largest batch that fits.", "已分配峰值随批大小变化，按用途堆叠。黑线：GPU 容量；虚线：设备总用量；红色：当前批大小；绿色：可容纳的最大批大小。";
    CapLength => "Allocated peak against the input size at your batch size, stacked by what the memory holds.", "当前批大小下，已分配峰值随输入尺寸变化，按用途堆叠。";
    CapCheckpoint => "checkpoint_sequential with k segments: activation memory at the peak (left axis) and extra forward compute for recomputation (right axis).", "checkpoint_sequential 分为 k 段：峰值时的激活显存（左轴）与重计算带来的额外计算量（右轴）。";
    CapTimeline => "Live memory after every op of one step: forward rises, backward falls, then the optimizer step, like PyTorch's memory viewer.", "一次训练步中每个算子之后的存活显存：前向上升，反向下降，随后是优化器更新，如同 PyTorch 的显存查看器。";
    CapLayers => "Activations each block of the model (a layer, a stage, a top-level module) keeps for backward at the end of forward.", "前向结束时模型各块（层、阶段或顶层模块）为反向保存的激活。";
    DataTable => "Data table", "数据表";
    Loading => "Computing…", "计算中…";
    Suggestions => "What would make it fit", "如何放得下";
    ItFits => "It fits: nothing has to change.", "放得下：无需改动。";
    NoSuggestion => "No single change found that saves memory here.", "没有找到能节省显存的单项改动。";
    Apply => "Apply", "应用";
    FitsTag => "fits", "放得下";
    StillOver => "still over", "仍然超出";
    Share => "Share", "分享";
    CopyLink => "Copy link", "复制链接";
    Copied => "Link copied", "链接已复制";
    CopyManually => "Copy the link from this box", "请从此框复制链接";
    Embed => "Embed", "嵌入";
    EmbedHelp => "Paste this into a web page or documentation:", "将以下代码粘贴到网页或文档中：";
    Close => "Close", "关闭";
    OpenFull => "Open in VRAM Planner", "在显存规划器中打开";
    Export => "Export", "导出";
    Notice => "Some settings in the link could not be used and were reset to their defaults:", "链接中的部分设置无法使用，已恢复默认值：";
    Dismiss => "Dismiss", "关闭";
    NewVersion => "A new version is ready.", "新版本已就绪。";
    Reload => "Reload", "重新加载";
    Footer => "Runs entirely in your browser; works offline once loaded. Every number comes from simulating the step's tensors as PyTorch allocates and frees them.", "完全在浏览器中运行，加载一次后可离线使用。所有数字均来自按 PyTorch 分配与释放张量的方式对训练步的模拟。";
    CannotEstimate => "Cannot estimate this plan", "无法估算此设置";
    Simulating => "Simulating this large model…", "正在模拟这个大模型…";
    Segment => "segments k", "分段数 k";
    ExtraCompute => "extra compute", "额外计算量";
    ActivationMemory => "activation memory", "激活显存";
    Layer => "Layer", "层";
    Step => "step events", "训练步事件";
    Batchs => "batch", "批大小";
    EveryBlock => "every block", "每个块";
    Capacity => "GPU capacity", "GPU 容量";
    DeviceLine => "device total", "设备总用量";
    Largest => "largest that fits", "最大可容纳";
    Total => "Total", "合计";
    MorePanels => "Mode, parallelism and comparison", "模式、并行与对比";
    ModelCodeLoading => "Fetching this model family's code (once)…", "正在获取该模型系列的代码（仅一次）…";
    ModelCodeUnavailable => "This model's code could not be fetched: check the connection and pick it again.", "无法获取该模型的代码：请检查网络连接后重新选择。";
    PanelsLoading => "Loading this section…", "正在加载此部分…";
    ChunkUnavailable => "This section could not be fetched: check the connection, then close and reopen it.", "无法下载此部分：请检查网络连接，然后关闭并重新打开。";
    // The mode panel.
    ModeHeading => "Mode", "模式";
    ModeWhat => "What the GPU does", "GPU 的任务";
    ModeTrain => "Train", "训练";
    ModeFinetune => "Fine-tune", "微调";
    ModeInfer => "Infer", "推理";
    LoraRank => "LoRA rank (empty: full fine-tuning)", "LoRA 秩（留空：全参数微调）";
    PlaceholderNone => "none", "无";
    LoraTargets => "LoRA targets", "LoRA 目标模块";
    LoraPeftDefault => "peft default", "peft 默认";
    LoraAll => "all linear layers", "全部线性层";
    Weights => "Weights", "权重";
    QuantNoneTrain => "None (model dtype)", "不量化（模型原精度）";
    QuantNoneTune => "None (LoRA or full)", "不量化（LoRA 或全参数）";
    QuantQlora => "NF4, QLoRA", "NF4（QLoRA）";
    QuantInt8 => "INT8 weight-only", "INT8 仅权重量化";
    QuantW8a8 => "INT8 weights and activations", "INT8 权重与激活量化";
    QuantInt4 => "INT4 group-wise", "INT4 分组量化";
    QuantFp8 => "FP8 block-wise (DeepSeek-V3)", "FP8 分块量化（DeepSeek-V3）";
    QuantMxfp4 => "MXFP4 experts (gpt-oss)", "MXFP4 专家（gpt-oss）";
    KvCache => "KV cache", "KV 缓存";
    KvActivationDtype => "Activation dtype", "与激活相同的数据类型";
    ContextTokens => "Context (prompt tokens)", "上下文（提示词 token 数）";
    NewTokens => "New tokens", "新生成 token 数";
    KvPerToken => "KV cache per token", "每个 token 的 KV 缓存";
    ContextNewTokens => "Context / new tokens", "上下文 / 新 token";
    ImageTokens => "Image tokens", "图像 token";
    PrefillPeak => "Prefill peak", "预填充峰值";
    DecodePeak => "Decode peak", "解码峰值";
    ContextLength => "Context length (tokens)", "上下文长度（token）";
    DeviceTotalLine => "Device total (reserved + CUDA context)", "设备总用量（已预留 + CUDA 上下文）";
    NoContextChart => "No context length can be estimated for this plan", "此设置下没有可估算的上下文长度";
    ContextChartAria => "Memory against context length, the KV cache as its own band", "显存随上下文长度变化，KV 缓存单独成带";
    ContextChartCaption => "Memory against prompt length, by what it holds; the KV cache is the top band. The red line marks your context, the black line the GPU's capacity.", "显存随提示词长度变化，按用途堆叠；KV 缓存是最上层的色带。红线标出当前上下文，黑线为 GPU 容量。";
    // The parallelism panel.
    ParallelHeading => "Parallelism", "并行策略";
    InferOneGpu => "Inference plans are estimated on one GPU; switch the mode to train or fine-tune to plan a multi-GPU layout.", "推理按单张 GPU 估算；将模式切换为训练或微调即可规划多 GPU 布局。";
    GpusPerNode => "GPUs per node", "每节点 GPU 数";
    PlaceholderAuto => "auto", "自动";
    Nodes => "Nodes", "节点数";
    DataParallel => "Data parallel (dp)", "数据并行（dp）";
    TensorParallel => "Tensor parallel (tp)", "张量并行（tp）";
    PipelineParallel => "Pipeline parallel (pp)", "流水线并行（pp）";
    ExpertParallel => "Expert parallel (ep, of dp)", "专家并行（ep，取自 dp）";
    Sharding => "Sharding", "切分方案";
    Zero0 => "DDP (ZeRO-0)", "DDP（ZeRO-0，不切分）";
    Zero1 => "ZeRO-1 (optimizer state sharded)", "ZeRO-1（切分优化器状态）";
    Zero2 => "ZeRO-2 (+ gradients)", "ZeRO-2（再切分梯度）";
    Zero3 => "ZeRO-3 (+ parameters)", "ZeRO-3（再切分参数）";
    OffloadLegend => "Offload to host memory", "卸载到主机内存";
    OffloadParams => "Parameters (ZeRO-3)", "参数（ZeRO-3）";
    MixedPrecisionBox => "bf16 mixed precision (FSDP MixedPrecisionPolicy: fp32 master weights and Adam state)", "bf16 混合精度（FSDP MixedPrecisionPolicy：fp32 主权重与 Adam 状态）";
    LinkIntra => "Link inside a node", "节点内互联";
    LinkInter => "Link between nodes", "节点间互联";
    GpuDefault => "GPU's default", "GPU 默认";
    CannotEstimateLayout => "Cannot estimate this layout", "无法估算此布局";
    NoZeroChart => "No ZeRO chart", "无法绘制 ZeRO 图";
    ZeroChartAria => "Per-GPU memory against the number of GPUs for each ZeRO stage", "各 ZeRO 阶段下单卡显存随 GPU 数量的变化";
    ZeroChartCaption => "Per-GPU device memory against the number of GPUs (dp × tp × pp) for each sharding scheme; the black line is the GPU's capacity, the red ring your layout.", "各切分方案下单卡设备显存随 GPU 数量（dp × tp × pp）的变化；黑线为 GPU 容量，红圈为当前布局。";
    RankChartAria => "Memory of each pipeline rank, by what it holds", "各流水线阶段的显存，按用途划分";
    RankChartCaption => "Memory of each pipeline rank at its peak; the outlined bar is the rank that limits the layout.", "各流水线阶段在峰值时的显存；描边的柱子是限制该布局的阶段。";
    Gpus => "GPUs", "GPU 数量";
    PerGpuMemory => "Per-GPU memory", "单卡显存";
    NoLayoutChart => "No layout of this plan can be estimated", "此设置下没有可估算的布局";
    PipelineRank => "Pipeline rank", "流水线阶段";
    NoRank => "No rank to show", "没有可显示的阶段";
    RankOther => "Buffers, temporaries, comm. buffers", "缓冲区、临时张量、通信缓冲区";
    EveryGpu => "every GPU", "每张 GPU";
    FindLayouts => "Find the cheapest layouts that fit", "查找放得下的最省布局";
    NoLayoutFits => "No layout up to 64 GPUs fits this GPU.", "64 张 GPU 以内没有能放进此 GPU 的布局。";
    Layout => "Layout", "布局";
    Parameters => "Parameters", "参数";
    Gradients => "Gradients", "梯度";
    OptimizerState => "Optimizer state", "优化器状态";
    Activations => "Activations", "激活";
    OtherMemory => "Other (buffers, temporaries, comm. buffers)", "其他（缓冲区、临时张量、通信缓冲区）";
    HostPerGpu => "Host memory per GPU", "每张 GPU 占用的主机内存";
    CommPerStep => "Communication per step", "每步通信量";
    StepTime => "Step time", "单步耗时";
    ScalingEfficiency => "Scaling efficiency", "扩展效率";
    Offload => "Offload", "卸载";
    FitsGpu => "Fits the GPU", "能否放入 GPU";
    Yes => "yes", "是";
    No => "no", "否";
    // The comparison view.
    CompareHeading => "Compare configurations", "配置对比";
    CompareAria => "Comparison", "对比";
    CompareAdd => "Add the current plan", "添加当前设置";
    Configuration => "Configuration", "配置";
    Edit => "Edit", "编辑";
    ModeBatch => "Mode, batch", "模式、批大小";
    Trainable => "Trainable", "可训练参数";
    ActivationsAtPeak => "Activations at the peak", "峰值时的激活";
    ActivationsPerByte => "Activations per parameter byte", "激活与参数字节数之比";
    MessageRow => "Message", "错误信息";
    CkptYourChoiceStage => "your choice: every stage", "当前选择：每个阶段";
    CkptYourChoice => "your choice", "当前选择";
    YourChoice => "Your choice", "当前选择";
    SqrtSegments => "√N segments", "√N 段";
    CheckpointingShort => "Checkpointing", "检查点";
    ExtraComputeAxis => "Extra compute (%)", "额外计算量（%）";
    ActivationMemoryLegend => "Activation memory", "激活显存";
    ExtraComputeLegend => "Extra compute", "额外计算量";
    LiveMemory => "Live memory", "存活显存";
    PeakWord => "peak", "峰值";
    SavedActivations => "Saved activations", "保存的激活";
    PhaseColumn => "Phase", "阶段";
    HighestLiveMemory => "Highest live memory", "最高存活显存";
    LiveMemoryAtEnd => "Live memory at its end", "结束时存活显存";
    CkptNone => "None", "不使用";
    CkptEveryStage => "Every stage", "每个阶段";
    CkptEveryBlock => "Every block", "每个块";
    CkptKSegments => "k segments", "k 段";
    FixAutocastBf16 => "bf16 autocast", "bf16 自动混合精度";
    FixAutocastFp16 => "fp16 autocast", "fp16 自动混合精度";
    FixPureBf16 => "Pure bf16 weights and optimizer state", "纯 bf16 权重与优化器状态";
    FixPureFp16 => "Pure fp16 weights and optimizer state", "纯 fp16 权重与优化器状态";
    FixCkptBlock => "Checkpoint every block", "每个块做检查点";
    FixCkptStage => "Checkpoint every stage", "每个阶段做检查点";
    FixCkptSqrt => "Checkpoint √N segments", "检查点分 √N 段";
    FixCkptNone => "No checkpointing", "不做检查点";
    FixFusedOptimizer => "Fused optimizer (fused=True)", "融合优化器（fused=True）";
    FixSgdMomentum => "SGD with momentum instead of Adam", "用带动量的 SGD 代替 Adam";
    FixPlainSgd => "Plain SGD, no momentum", "不带动量的 SGD";
    FixAdamw8bit => "8-bit AdamW (bitsandbytes)", "8 位 AdamW（bitsandbytes）";
    CostFusedOptimizer => "no cost: the same update in one kernel", "无代价：同样的计算，一个内核完成";
    CostAutocast => "usually free: matmuls in 16 bits, weights stay fp32", "通常无代价：矩阵乘以 16 位计算，权重仍为 fp32";
    CostPure16Bit => "16-bit weights and optimizer state: watch convergence", "权重与优化器状态降为 16 位：注意收敛";
    CostEightBitOptimizer => "needs bitsandbytes; 8-bit moments, usually the same accuracy", "需要 bitsandbytes；8 位矩估计，通常精度相当";
    CostOtherOptimizer => "another optimizer: retune the learning rate", "换了优化器：需重新调学习率";
    CostInputSize => "changes what the model sees", "改变了输入数据";
    AllocatorCache => "Allocator cache", "分配器缓存";
    Workspaces => "Workspaces", "工作空间";
    CudaContext => "CUDA context", "CUDA 上下文";
    NoBatchInRange => "No batch size in range can be estimated for this plan", "此设置下没有可估算的批大小";
    NoInputSizeInRange => "No input size in range can be estimated for this plan", "此设置下没有可估算的输入尺寸";
    CheckpointSegmentsAxis => "Checkpoint segments k (1 = none)", "检查点分段数 k（1 = 不使用）";
    NoCheckpointingToCompare => "This model has no checkpointing to compare", "此模型没有可比较的检查点方案";
    StepEventsAxis => "Events of one training step (ops, frees, optimizer)", "一次训练步中的事件（算子、释放、优化器）";
    ModelBlockAxis => "Block of the model, forward order", "模型的块（前向顺序）";
    NoSavedActivations => "No activations are saved for backward", "没有为反向保存的激活";
}

/// An option's text: a [`Msg`], or a name that reads the same in every language (a dtype, an
/// API identifier such as FSDP's `FULL_SHARD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    T(Msg),
    Name(&'static str),
}

impl Label {
    pub fn t(self, lang: Lang) -> &'static str {
        match self {
            Label::T(m) => m.t(lang),
            Label::Name(n) => n,
        }
    }
}

/// A select's (value, label) options in `lang`.
pub fn option_texts(
    options: &[(&'static str, Label)],
    lang: Lang,
) -> Vec<(&'static str, &'static str)> {
    options.iter().map(|&(v, l)| (v, l.t(lang))).collect()
}

/// What goes between a label and its text: Chinese uses the full-width colon.
pub fn colon(lang: Lang) -> &'static str {
    match lang {
        Lang::En => ": ",
        Lang::Zh => "：",
    }
}

/// "Cannot estimate this plan: <the estimator's message>" (the message stays as it is).
pub fn prefixed(prefix: Msg, message: &str, lang: Lang) -> String {
    format!("{}{}{message}", prefix.t(lang), colon(lang))
}

pub fn precision_label(p: Precision, lang: Lang) -> &'static str {
    match (p, lang) {
        (Precision::Fp32, Lang::En) => "fp32",
        (Precision::Fp32, Lang::Zh) => "fp32（单精度）",
        (Precision::AmpBf16, Lang::En) => "Mixed bf16 (autocast)",
        (Precision::AmpBf16, Lang::Zh) => "混合精度 bf16（autocast）",
        (Precision::AmpFp16, Lang::En) => "Mixed fp16 (autocast + GradScaler)",
        (Precision::AmpFp16, Lang::Zh) => "混合精度 fp16（autocast + GradScaler）",
        (Precision::Bf16, Lang::En) => "Pure bf16",
        (Precision::Bf16, Lang::Zh) => "纯 bf16",
        (Precision::Fp16, Lang::En) => "Pure fp16",
        (Precision::Fp16, Lang::Zh) => "纯 fp16",
    }
}

pub fn optimizer_label(o: OptimizerKind, lang: Lang) -> &'static str {
    match (o, lang) {
        (OptimizerKind::Sgd, Lang::En) => "SGD",
        (OptimizerKind::Sgd, Lang::Zh) => "SGD",
        (OptimizerKind::SgdMomentum, Lang::En) => "SGD with momentum",
        (OptimizerKind::SgdMomentum, Lang::Zh) => "带动量的 SGD",
        (OptimizerKind::Adam, _) => "Adam",
        (OptimizerKind::Adamw, _) => "AdamW",
        (OptimizerKind::Adam8bit, _) => "Adam 8-bit (bitsandbytes)",
        (OptimizerKind::Adamw8bit, _) => "AdamW 8-bit (bitsandbytes)",
        (OptimizerKind::PagedAdamw8bit, _) => "Paged AdamW 8-bit (bitsandbytes)",
        (OptimizerKind::PagedAdamw, _) => "Paged AdamW (bitsandbytes)",
        (OptimizerKind::Adafactor, _) => "Adafactor (transformers)",
    }
}

pub fn optimizer_impl_label(o: OptimizerImpl, lang: Lang) -> &'static str {
    match (o, lang) {
        (OptimizerImpl::Foreach, Lang::En) => "foreach (PyTorch's default)",
        (OptimizerImpl::Foreach, Lang::Zh) => "foreach（PyTorch 默认）",
        (OptimizerImpl::Fused, Lang::En) => "fused=True",
        (OptimizerImpl::Fused, Lang::Zh) => "fused=True（融合）",
        (OptimizerImpl::ForLoop, Lang::En) => "for-loop (foreach=False)",
        (OptimizerImpl::ForLoop, Lang::Zh) => "逐参数循环（foreach=False）",
    }
}

/// A causal-mask choice's value in the page's picker (its plan key's word).
pub fn causal_mask_name(m: CausalMask) -> &'static str {
    match m {
        CausalMask::Materialized => "materialized",
        CausalMask::Skipped => "skipped",
    }
}

pub fn causal_mask_label(m: CausalMask, lang: Lang) -> &'static str {
    match m {
        CausalMask::Materialized => Msg::MaskMaterialized.t(lang),
        CausalMask::Skipped => Msg::MaskSkipped.t(lang),
    }
}

pub fn attention_label(a: AttnImpl, lang: Lang) -> &'static str {
    match (a, lang) {
        (AttnImpl::Sdpa, Lang::En) => "SDPA (fused, memory-efficient)",
        (AttnImpl::Sdpa, Lang::Zh) => "SDPA（融合、省显存）",
        (AttnImpl::Eager, Lang::En) => "Eager (scores materialised)",
        (AttnImpl::Eager, Lang::Zh) => "Eager（显式计算注意力分数）",
    }
}

pub fn category_label(c: Category, lang: Lang) -> &'static str {
    match lang {
        Lang::En => c.label(),
        Lang::Zh => match c {
            Category::Params => "参数",
            Category::Buffers => "缓冲区",
            Category::Inputs => "输入批次",
            Category::Activations => "激活",
            Category::BackwardTemps => "反向临时张量",
            Category::Gradients => "梯度",
            Category::OptimizerState => "优化器状态",
            Category::OptimizerTemps => "优化器临时张量",
            Category::KvCache => "KV 缓存",
        },
    }
}

pub fn phase_label(p: Phase, lang: Lang) -> &'static str {
    match (p, lang) {
        (Phase::ZeroGrad, Lang::En) => "zero_grad",
        (Phase::ZeroGrad, Lang::Zh) => "清零梯度",
        (Phase::Forward, Lang::En) => "forward",
        (Phase::Forward, Lang::Zh) => "前向",
        (Phase::Backward, Lang::En) => "backward",
        (Phase::Backward, Lang::Zh) => "反向",
        (Phase::Optimizer, Lang::En) => "optimizer step",
        (Phase::Optimizer, Lang::Zh) => "优化器更新",
    }
}

pub fn group_label(g: crate::presets::models::Group, lang: Lang) -> &'static str {
    use crate::presets::models::Group;
    match (g, lang) {
        (Group::Cnn, Lang::En) => "CNNs",
        (Group::Cnn, Lang::Zh) => "卷积网络",
        (Group::VisionTransformer, Lang::En) => "Vision transformers",
        (Group::VisionTransformer, Lang::Zh) => "视觉 Transformer",
        (Group::Decoder, Lang::En) => "Language models",
        (Group::Decoder, Lang::Zh) => "语言模型",
        (Group::MixtureOfExperts, Lang::En) => "Mixture of experts",
        (Group::MixtureOfExperts, Lang::Zh) => "混合专家模型",
        (Group::Encoder, Lang::En) => "Encoders",
        (Group::Encoder, Lang::Zh) => "编码器",
        (Group::VisionLanguage, Lang::En) => "Vision-language",
        (Group::VisionLanguage, Lang::Zh) => "视觉语言模型",
        (Group::Rnn, Lang::En) => "RNN",
        (Group::Rnn, Lang::Zh) => "循环网络",
    }
}

/// The verdict: fits with headroom, or over by how much.
pub fn verdict(fits: bool, margin: &str, capacity: &str, gpu: &str, lang: Lang) -> String {
    match (fits, lang) {
        (true, Lang::En) => format!("Fits on {gpu} ({capacity}): {margin} headroom"),
        (true, Lang::Zh) => format!("可以放入 {gpu}（{capacity}）：剩余 {margin}"),
        (false, Lang::En) => format!("Does not fit on {gpu} ({capacity}): {margin} over"),
        (false, Lang::Zh) => format!("放不下 {gpu}（{capacity}）：超出 {margin}"),
    }
}

/// "of 80.0 GiB" after the device total.
pub fn of_capacity(capacity: &str, lang: Lang) -> String {
    match lang {
        Lang::En => format!("of {capacity}"),
        Lang::Zh => format!("/ {capacity}"),
    }
}

/// The notice for one setting of the link that was not used.
pub fn notice_item(key: &str, lang: Lang) -> String {
    match lang {
        Lang::En => format!("'{key}'"),
        Lang::Zh => format!("“{key}”"),
    }
}

/// The notice for parameters the page does not know.
pub fn notice_unknown(n: usize, lang: Lang) -> String {
    match lang {
        Lang::En => format!(
            "{n} unknown parameter{} ignored",
            if n == 1 { "" } else { "s" }
        ),
        Lang::Zh => format!("忽略了 {n} 个未知参数"),
    }
}

/// The layout search's progress: the size of the layouts it is trying.
pub fn searching_layouts(gpus: u64, lang: Lang) -> String {
    match lang {
        Lang::En => format!(
            "Searching: layouts of {gpus} GPU{}…",
            if gpus == 1 { "" } else { "s" }
        ),
        Lang::Zh => format!("正在搜索：{gpus} 张 GPU 的布局……"),
    }
}

pub fn notice_too_long(lang: Lang) -> &'static str {
    match lang {
        Lang::En => "the link is too long to read",
        Lang::Zh => "链接过长，无法读取",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_has_both_languages() {
        for m in Msg::ALL {
            assert!(!m.t(Lang::En).is_empty(), "{m:?} has no English");
            assert!(!m.t(Lang::Zh).is_empty(), "{m:?} has no Chinese");
            // "GPU" is the one word Chinese writes as English does; names that read the same in
            // both languages are `Label::Name`, not messages.
            if *m != Msg::Gpu {
                assert_ne!(m.t(Lang::En), m.t(Lang::Zh), "{m:?} is not translated");
            }
        }
    }

    #[test]
    fn options_and_prefixes_follow_the_language() {
        let opts = [("a", Label::T(Msg::ModeTrain)), ("b", Label::Name("FP8"))];
        assert_eq!(
            option_texts(&opts, Lang::Zh),
            vec![("a", "训练"), ("b", "FP8")]
        );
        assert_eq!(
            option_texts(&opts, Lang::En),
            vec![("a", "Train"), ("b", "FP8")]
        );
        assert_eq!(
            prefixed(Msg::CannotEstimate, "x", Lang::En),
            "Cannot estimate this plan: x"
        );
        assert_eq!(
            prefixed(Msg::CannotEstimateLayout, "x", Lang::Zh),
            "无法估算此布局：x"
        );
    }

    #[test]
    fn sizes_in_both_unit_systems() {
        assert_eq!(fmt_bytes(Bytes(25_557_032 * 4), Units::Binary), "97.5 MiB");
        assert_eq!(fmt_bytes(Bytes(25_557_032 * 4), Units::Decimal), "102 MB");
        assert_eq!(fmt_bytes(Bytes(80 << 30), Units::Decimal), "85.9 GB");
        assert_eq!(fmt_bytes(Bytes(999), Units::Decimal), "999 B");
        assert_eq!(fmt_bytes(Bytes(1_500), Units::Decimal), "1.50 kB");
    }

    #[test]
    fn counts_and_percentages() {
        assert_eq!(fmt_count(25_557_032, Lang::En), "25.6 M");
        assert_eq!(fmt_count(25_557_032, Lang::Zh), "2555.7 万");
        assert_eq!(fmt_count(7_000_000_000, Lang::Zh), "70.00 亿");
        assert_eq!(fmt_pct(0.333), "33 %");
        assert_eq!(fmt_pct(0.045), "4.5 %");
        assert_eq!(fmt_pct(f64::NAN), "–");
    }

    #[test]
    fn codes_round_trip() {
        for l in Lang::ALL {
            assert_eq!(Lang::parse(l.code()), Some(l));
        }
        for u in Units::ALL {
            assert_eq!(Units::parse(u.code()), Some(u));
        }
        assert_eq!(Lang::from_browser("zh-TW"), Lang::Zh);
        assert_eq!(Lang::from_browser("en-GB"), Lang::En);
    }
}
