//! The breakdown's formulas in both languages: each row's arithmetic with the plan's numbers
//! substituted. Sizes and counts come in formatted; `Formula::text` (in [`super`], which picks
//! the language) writes the sentence.

/// One formula of the breakdown (or a piece of one).
#[derive(Clone, Copy, Debug)]
pub enum Formula<'a> {
    /// A category that does not grow with the batch.
    Unscaled {
        total: &'a str,
    },
    /// The head of a category that grows with the batch: samples × bytes per sample.
    Samples {
        batch: u64,
        per: &'a str,
    },
    /// Parameters: count × bytes each, when every parameter has the same size.
    Params {
        count: &'a str,
        bytes_each: Option<u64>,
        total: &'a str,
    },
    Buffers {
        total: &'a str,
    },
    /// Activations, around their [`Formula::Samples`] line.
    SavedForBackward {
        scaled: &'a str,
    },
    /// A part of a mixture of experts: its weights and what it saves for the backward.
    MoePart {
        weights: &'a str,
        saved: &'a str,
    },
    BackwardTemps {
        scaled: &'a str,
    },
    /// Gradients, one per parameter of the same size.
    Grads {
        count: &'a str,
        bytes_each: u64,
        total: &'a str,
    },
    GradsPerTrainable {
        total: &'a str,
    },
    /// Gradients when only some are live at the peak.
    GradsLive {
        full: &'a str,
        live: &'a str,
        phase: &'a str,
    },
    PlainSgdState,
    OptimizerStates {
        states: u64,
        names: &'a str,
        count: &'a str,
        bytes_each: u64,
        total: &'a str,
    },
    StatesPerParam {
        states: u64,
        total: &'a str,
    },
    /// Adafactor: a row and a column of fp32 second moments per matrix, a full one per vector.
    FactoredStates {
        total: &'a str,
    },
    FusedStep {
        total: &'a str,
    },
    NoTemporaries {
        total: &'a str,
    },
    ForeachStep {
        temporary: &'a str,
        peak: &'a str,
    },
    /// Adafactor's per-parameter loop in fp32.
    AdafactorStep {
        peak: &'a str,
    },
    KvCache {
        scaled: &'a str,
    },
    /// The allocated peak: the phase and, when known, the op it happens at.
    PeakSum {
        phase: &'a str,
        op: Option<&'a str>,
    },
    AllocatorCache,
    NoCublas,
    /// The cuBLAS workspace of one matrix multiply: its size rule (sm_90 on or before) and bytes.
    Cublas {
        sm_90: bool,
        total: &'a str,
    },
    Reserved,
    Context {
        gpu: &'a str,
        /// The CUDA toolkit, `major.minor`.
        cuda: &'a str,
        /// Every kernel image loaded at start-up (`CUDA_MODULE_LOADING=EAGER`, or CUDA < 11.7).
        eager: bool,
    },
    DeviceTotal,
}

impl Formula<'_> {
    /// The sentence in English.
    pub fn english(&self) -> String {
        use Formula::*;
        match *self {
            Unscaled { total } => format!("does not grow with the batch = {total}"),
            Samples { batch, per } => format!("{batch} samples × {per}"),
            Params { count, bytes_each: Some(k), total } => {
                format!("{count} params × {k} B = {total}")
            }
            Params { count, bytes_each: None, total } => format!("{count} params = {total}"),
            Buffers { total } => format!(
                "running statistics of normalisation layers and other buffers = {total}"
            ),
            SavedForBackward { scaled } => format!("saved for backward: {scaled}"),
            MoePart { weights, saved } => {
                format!("weights {weights} + saved for backward {saved}")
            }
            BackwardTemps { scaled } => {
                format!("activation gradients and recomputed segments: {scaled}")
            }
            Grads { count, bytes_each: k, total } => format!("{count} grads × {k} B = {total}"),
            GradsPerTrainable { total } => format!("one per trainable parameter = {total}"),
            GradsLive { full, live, phase } => {
                format!("{full} once all exist; {live} live at the peak ({phase})")
            }
            PlainSgdState => "plain SGD keeps no state = 0 B".into(),
            OptimizerStates { states, names, count, bytes_each: k, total } => {
                format!("{states} states ({names}) × {count} × {k} B = {total}")
            }
            StatesPerParam { states, total } => {
                format!("{states} states per parameter = {total}")
            }
            FactoredStates { total } => format!(
                "fp32 second moments: a row and a column per matrix (exp_avg_sq_row, exp_avg_sq_col), a full exp_avg_sq per vector, plus each parameter's RMS = {total}"
            ),
            AdafactorStep { peak } => format!(
                "a loop over parameters in fp32: grad**2 + eps and the new update, two temporaries, beside the previous parameter's update (16-bit parameters add fp32 copies of the weight and its gradient); at the peak {peak}"
            ),
            FusedStep { total } => format!("fused step: no temporaries = {total}"),
            NoTemporaries { total } => format!("no parameter-sized temporaries = {total}"),
            ForeachStep { temporary, peak } => format!(
                "foreach step: sqrt(exp_avg_sq), one parameter-sized temporary ({temporary}), live only during the step; at the peak {peak}"
            ),
            KvCache { scaled } => {
                format!("keys and values of every layer for the context so far: {scaled}")
            }
            PeakSum { phase, op: Some(op) } => format!(
                "sum of the rows above, during {phase} at {op}; each tensor rounded to 512 B"
            ),
            PeakSum { phase, op: None } => {
                format!("sum of the rows above, during {phase}; each tensor rounded to 512 B")
            }
            AllocatorCache => "the caching allocator replayed over two steps: 2 MiB segments up to 1 MiB, 20 MiB up to 10 MiB, larger rounded to 2 MiB; freed blocks stay cached".into(),
            NoCublas => "no cuBLAS on this device = 0 B".into(),
            Cublas { sm_90, total } => format!(
                "cuBLAS workspace taken and freed by each matrix multiply ({}) = {total}",
                if sm_90 { "32 MiB from sm_90 on" } else { "2 × 4 MiB + 8 × 16 KiB" }
            ),
            Reserved => "allocated peak + allocator cache + workspaces".into(),
            Context { gpu, cuda, eager } => format!(
                "driver state and loaded kernels, typical for {gpu} (CUDA {cuda}, {}); not allocated through PyTorch",
                if eager { "every kernel loaded at start-up" } else { "kernels loaded when first run" }
            ),
            DeviceTotal => "reserved + CUDA context: what nvidia-smi shows".into(),
        }
    }
    /// The sentence in Chinese, read only by [`super::chinese`] (its chunk).
    pub fn chinese(&self) -> String {
        use Formula::*;
        match *self {
            Unscaled { total } => format!("不随批大小变化 = {total}"),
            Samples { batch, per } => format!("{batch} 个样本 × {per}"),
            Params { count, bytes_each: Some(k), total } => {
                format!("{count} 个参数 × {k} B = {total}")
            }
            Params { count, bytes_each: None, total } => format!("{count} 个参数 = {total}"),
            Buffers { total } => format!("归一化层的运行统计量等缓冲区 = {total}"),
            SavedForBackward { scaled } => format!("为反向保存：{scaled}"),
            MoePart { weights, saved } => format!("权重 {weights} + 为反向保存 {saved}"),
            BackwardTemps { scaled } => format!("激活梯度与重计算的段：{scaled}"),
            Grads { count, bytes_each: k, total } => {
                format!("{count} 个梯度 × {k} B = {total}")
            }
            GradsPerTrainable { total } => format!("每个可训练参数一个 = {total}"),
            GradsLive { full, live, phase } => {
                format!("全部生成后 {full}；峰值时（{phase}）存活 {live}")
            }
            PlainSgdState => "普通 SGD 不保存状态 = 0 B".into(),
            OptimizerStates { states, names, count, bytes_each: k, total } => {
                format!("{states} 个状态（{names}）× {count} × {k} B = {total}")
            }
            StatesPerParam { states, total } => format!("每个参数 {states} 个状态 = {total}"),
            FactoredStates { total } => format!(
                "矩阵只存一行一列的 fp32 二阶矩（exp_avg_sq_row、exp_avg_sq_col），向量存完整的 exp_avg_sq，另加每个参数的 RMS = {total}"
            ),
            AdafactorStep { peak } => format!(
                "逐参数循环，fp32：grad**2 + eps 与新的 update 两个临时张量，加上一参数的 update（16 位参数另有参数与梯度的 fp32 副本）；峰值时 {peak}"
            ),
            FusedStep { total } => format!("融合实现：无临时张量 = {total}"),
            NoTemporaries { total } => format!("无与参数同大小的临时张量 = {total}"),
            ForeachStep { temporary, peak } => format!(
                "foreach 实现：sqrt(exp_avg_sq)，一个与参数同大小的临时张量（{temporary}），仅在更新时存活；峰值时 {peak}"
            ),
            KvCache { scaled } => format!("各层截至当前上下文的键和值：{scaled}"),
            PeakSum { phase, op: Some(op) } => {
                format!("以上各项之和，出现在{phase}（{op}）；每个张量按 512 B 取整")
            }
            PeakSum { phase, op: None } => {
                format!("以上各项之和，出现在{phase}；每个张量按 512 B 取整")
            }
            AllocatorCache => "重放缓存分配器两步：2 MiB 段（≤1 MiB）、20 MiB 段（≤10 MiB）、更大按 2 MiB 取整；释放的块留在缓存".into(),
            NoCublas => "此设备无 cuBLAS = 0 B".into(),
            Cublas { sm_90, total } => format!(
                "每次矩阵乘法申请并释放的 cuBLAS 工作空间（{}）= {total}",
                if sm_90 { "sm_90 起 32 MiB" } else { "2 × 4 MiB + 8 × 16 KiB" }
            ),
            Reserved => "已分配峰值 + 分配器缓存 + 工作空间".into(),
            Context { gpu, cuda, eager } => format!(
                "驱动状态与已加载的内核，{gpu} 的典型值（CUDA {cuda}，{}）；不经 PyTorch 分配",
                if eager { "启动时加载全部内核" } else { "内核在首次运行时加载" }
            ),
            DeviceTotal => "已预留 + CUDA 上下文：即 nvidia-smi 显示的用量".into(),
        }
    }
}
