//! Hardware as values: a GPU and the links around it. The tables of real cards and links live
//! in `presets`; the core only reads the figures it is given.

use serde::{Deserialize, Serialize};

use super::units::Bytes;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gpu {
    pub id: &'static str,
    pub name: &'static str,
    pub memory: Bytes,
    /// Memory bandwidth, GB/s.
    pub bandwidth_gbs: f64,
    /// CUDA compute capability × 10 (0 for non-NVIDIA).
    pub sm: u32,
    /// Streaming multiprocessors (`cudaDeviceProp::multiProcessorCount`, the data sheet's SM
    /// count; 0 for non-NVIDIA): PyTorch's reduction kernels size their grids by it.
    pub sms: u32,
    /// Dense bf16/fp16 tensor TFLOPS.
    pub tflops_bf16: f64,
    /// Dense fp32 (non-tensor-core) TFLOPS from the data sheet: PyTorch runs fp32 matmuls in full
    /// fp32 by default (`torch.backends.cuda.matmul.allow_tf32 = False`).
    pub tflops_fp32: f64,
    /// CUDA context and loaded kernels (measured with `nvidia-smi` minus PyTorch's reserved, typical).
    pub context: Bytes,
}

/// Where a link sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkKind {
    /// Between GPUs of one node (NVLink, PCIe through a switch, Infinity Fabric).
    IntraNode,
    /// Between nodes: one port (NIC) per GPU in rail-optimised clusters.
    InterNode,
    /// Between a GPU and host memory (offload).
    Host,
}

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Link {
    pub id: &'static str,
    pub name: &'static str,
    pub kind: LinkKind,
    /// Bandwidth per direction, GB/s. For [`Link::shared_memory`] links it is resolved against
    /// the GPU (see [`Link::for_gpu`]).
    pub gbs_per_direction: f64,
    /// Per-message start-up time (α of the α–β model), microseconds: one ring step pays it once.
    /// Typical small-message latencies of NCCL over each fabric (nccl-tests at 8 B is 10–20 µs per
    /// collective across a few steps).
    pub latency_us: f64,
    /// Host and GPU share one physical memory (Apple unified memory): "offload" is a copy inside
    /// the same DRAM and frees nothing of the machine's total.
    pub shared_memory: bool,
    /// The data-sheet figure the bandwidth comes from.
    pub source: &'static str,
}

impl Link {
    /// The link with a shared-memory bandwidth resolved against `gpu`: half its memory
    /// bandwidth, since a copy inside one DRAM reads and writes every byte.
    pub fn for_gpu(mut self, gpu: Option<&Gpu>) -> Link {
        if self.shared_memory {
            self.gbs_per_direction = gpu.map(|g| g.bandwidth_gbs / 2.0).unwrap_or(200.0);
        }
        self
    }
    /// Bytes per second per direction.
    pub fn bytes_per_s(&self) -> f64 {
        self.gbs_per_direction * 1e9
    }
}

/// Which kernels run: the CUDA ones (the product's subject) or PyTorch's CPU kernels, which save
/// different tensors (float dropout masks, the math attention path). CPU is there to replay the
/// reference set's CPU records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Device {
    #[default]
    Cuda,
    Cpu,
}

/// The compute capability assumed when the plan names no GPU: a Hopper card, the most common
/// training GPU, so the workspaces are the larger sm_90 ones (see
/// [`super::device::cublas_workspace`]).
pub const DEFAULT_SM: u32 = 90;

/// The multiprocessors of that card when the plan names none: the H100 SXM's 132 (NVIDIA H100
/// data sheet; what the faked device of `tests/data/reserved/` reports).
pub const DEFAULT_SMS: u32 = 132;

/// Device memory a step holds outside the model's tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceOverhead {
    /// The cuBLAS workspace each matrix multiply allocates through PyTorch's caching allocator
    /// and frees ([`super::device::cublas_workspace`]).
    pub workspaces: Bytes,
    /// The CUDA context and loaded kernels, outside PyTorch's allocator.
    pub context: Bytes,
}

impl DeviceOverhead {
    /// The overhead on `gpu`, or on the default card ([`DEFAULT_SM`],
    /// [`super::device::DEFAULT_CONTEXT`]) when none is given, under the software `stack`
    /// ([`super::context`]). Non-NVIDIA devices (`sm` 0) have no cuBLAS.
    pub fn of(gpu: Option<&Gpu>, stack: &super::context::Stack) -> DeviceOverhead {
        let sm = gpu.map_or(DEFAULT_SM, |g| g.sm);
        DeviceOverhead {
            workspaces: if sm == 0 {
                Bytes::ZERO
            } else {
                super::device::cublas_workspace(sm)
            },
            context: super::context::context(
                stack,
                gpu.map_or(super::device::DEFAULT_CONTEXT, |g| g.context),
            ),
        }
    }
}
