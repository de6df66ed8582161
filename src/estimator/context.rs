//! The CUDA context by software stack: what a PyTorch process holds on the device outside the
//! caching allocator (driver state and the loaded kernel images), which `nvidia-smi` counts and
//! `torch.cuda.memory_reserved()` does not. Its size is set less by the model than by how the
//! CUDA runtime loads kernels: since CUDA 11.7 a module is loaded when a kernel of it first runs
//! (`CUDA_MODULE_LOADING=LAZY`, which PyTorch 1.13 and later set by default, and the default of
//! CUDA 12.2 and later: CUDA C++ Programming Guide, "Lazy Loading"); before, every kernel image
//! of every library was loaded when the context was made.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::releases::{major_minor, TorchVersion, TransformersVersion};
use super::units::Bytes;

const MIB: u64 = 1 << 20;

/// How the CUDA runtime loads kernel images (`CUDA_MODULE_LOADING`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleLoading {
    /// When a kernel first runs (CUDA ≥ 11.7).
    Lazy,
    /// Every image when the context is made.
    Eager,
}

/// A CUDA toolkit version as `major.minor` (the `+cu121` of a PyTorch wheel is 12.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CudaVersion {
    pub major: u32,
    pub minor: u32,
}

/// A stack the context figures cannot be given for.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum StackError {
    #[error("CUDA version `{0}` is not `major.minor`; write e.g. \"12.4\" (a wheel's +cu124)")]
    NotAVersion(String),
    #[error("CUDA {0} is outside the 10.0 to 13.x the context figures cover")]
    OutOfRange(String),
    #[error("lazy module loading needs CUDA 11.7 or later (the stack names CUDA {0})")]
    LazyTooEarly(String),
}

impl CudaVersion {
    /// The first toolkit with lazy loading.
    pub const LAZY_FROM: CudaVersion = CudaVersion {
        major: 11,
        minor: 7,
    };

    pub fn parse(text: &str) -> Result<CudaVersion, StackError> {
        let (major, minor) =
            major_minor(text).ok_or_else(|| StackError::NotAVersion(text.to_string()))?;
        let v = CudaVersion { major, minor };
        if !(10..=13).contains(&major) {
            return Err(StackError::OutOfRange(v.to_string()));
        }
        Ok(v)
    }
}

impl std::fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Serialize for CudaVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CudaVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CudaVersion, D::Error> {
        let text = String::deserialize(d)?;
        CudaVersion::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The software stack of a run, as far as it changes memory: the CUDA toolkit PyTorch was
/// built with and `CUDA_MODULE_LOADING` (absent: lazy from CUDA 11.7 on, as PyTorch sets it),
/// which set the context, and the PyTorch and transformers releases (absent: current ones), which
/// change what a step holds ([`super::releases::StackRules`]). Checked when made ([`Stack::new`], and so when a plan is
/// read): lazy loading before CUDA 11.7 does not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StackFields")]
pub struct Stack {
    cuda: CudaVersion,
    #[serde(skip_serializing_if = "Option::is_none")]
    module_loading: Option<ModuleLoading>,
    #[serde(skip_serializing_if = "Option::is_none")]
    torch: Option<TorchVersion>,
    #[serde(skip_serializing_if = "Option::is_none")]
    transformers: Option<TransformersVersion>,
}

/// A stack as a plan writes it, before it is checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StackFields {
    cuda: CudaVersion,
    #[serde(default)]
    module_loading: Option<ModuleLoading>,
    #[serde(default)]
    torch: Option<TorchVersion>,
    #[serde(default)]
    transformers: Option<TransformersVersion>,
}

impl TryFrom<StackFields> for Stack {
    type Error = StackError;
    fn try_from(f: StackFields) -> Result<Stack, StackError> {
        Ok(Stack {
            torch: f.torch,
            transformers: f.transformers,
            ..Stack::new(f.cuda, f.module_loading)?
        })
    }
}

impl Default for Stack {
    /// A current PyTorch wheel: CUDA 12.8, lazy loading.
    fn default() -> Self {
        Stack {
            cuda: CudaVersion {
                major: 12,
                minor: 8,
            },
            module_loading: None,
            torch: None,
            transformers: None,
        }
    }
}

impl Stack {
    pub fn new(
        cuda: CudaVersion,
        module_loading: Option<ModuleLoading>,
    ) -> Result<Stack, StackError> {
        if module_loading == Some(ModuleLoading::Lazy) && cuda < CudaVersion::LAZY_FROM {
            return Err(StackError::LazyTooEarly(cuda.to_string()));
        }
        Ok(Stack {
            cuda,
            module_loading,
            torch: None,
            transformers: None,
        })
    }

    /// What the stack's PyTorch and transformers releases change in a step.
    pub fn rules(&self) -> super::releases::StackRules {
        super::releases::StackRules::of(self.torch, self.transformers)
    }

    pub fn cuda(&self) -> CudaVersion {
        self.cuda
    }

    /// The loading the run gets.
    pub fn loading(&self) -> ModuleLoading {
        match self.module_loading {
            Some(m) => m,
            None if self.cuda < CudaVersion::LAZY_FROM => ModuleLoading::Eager,
            None => ModuleLoading::Lazy,
        }
    }
}

/// What eager loading adds to a lazily loaded PyTorch process on a toolkit with both (CUDA ≥
/// 11.7): `torch.cuda.mem_get_info` after a first small tensor, 666,632,192 B eager against
/// 287,047,680 B lazy (pytorch/pytorch#86509, PyTorch 1.13 with CUDA 11.7).
pub const EAGER_OVER_LAZY: Bytes = Bytes(666_632_192 - 287_047_680);

/// A PyTorch process's context when its toolkit loads every image at start-up (before CUDA
/// 11.7): the median of the published `nvidia-smi` readings after a first tiny tensor, per
/// toolkit generation. CUDA 11.0–11.6 (fat binaries for sm_80/86 as well): 1,486 MiB (RTX 3090,
/// PyTorch 1.7.1+cu110, pytorch/pytorch#49877, less its 156 MiB tensor), 1,687 MB (RTX 3090,
/// 1.8.2+cu111, #55277) and 1,001 MiB (RTX 3090, CUDA 11.1, #54564). CUDA 10.x: 877 MiB (RTX 2080
/// Ti, 1.6.0+cu101, #49877, less its tensor), 721 MB (GTX 1080, 1.8.2+cu101, #55277) and
/// 1,008 MB (Titan V, PyTorch 1.3, #28394). The readings do not separate the card's share from
/// the kernels', so these replace the per-card figure rather than add to it.
fn eager_era(cuda: CudaVersion) -> Bytes {
    if cuda.major >= 11 {
        Bytes(1_486 * MIB)
    } else {
        Bytes(877 * MIB)
    }
}

/// The context under `stack` on a card whose context with a current, lazily loading stack is
/// `lazy` (`Gpu::context`). Lazy loading keeps that figure; eager loading on a toolkit that
/// could be lazy adds [`EAGER_OVER_LAZY`]; a toolkit before 11.7 gives its generation's
/// whole-process figure.
pub fn context(stack: &Stack, lazy: Bytes) -> Bytes {
    match stack.loading() {
        ModuleLoading::Lazy => lazy,
        ModuleLoading::Eager if stack.cuda >= CudaVersion::LAZY_FROM => lazy + EAGER_OVER_LAZY,
        ModuleLoading::Eager => eager_era(stack.cuda),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(cuda: &str, m: Option<ModuleLoading>) -> Stack {
        Stack::new(CudaVersion::parse(cuda).unwrap(), m).unwrap()
    }

    #[test]
    fn versions_read_as_major_dot_minor() {
        assert_eq!(
            CudaVersion::parse("11.2"),
            Ok(CudaVersion {
                major: 11,
                minor: 2
            })
        );
        assert!(CudaVersion::parse("11.10").unwrap() > CudaVersion::parse("11.7").unwrap());
        for bad in [
            "12", "12.", ".4", "12.4.1", "cu121", "12.x", "-1.2", "1234.1",
        ] {
            assert!(
                matches!(CudaVersion::parse(bad), Err(StackError::NotAVersion(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            CudaVersion::parse("9.2"),
            Err(StackError::OutOfRange(_))
        ));
    }

    /// pytorch/pytorch#86509's two readings, 20 MiB apart in the allocator's first segment
    /// alike, differ by 379,584,512 B (0.35 GiB, to the byte).
    #[test]
    fn eager_loading_on_a_lazy_capable_toolkit_adds_the_measured_difference() {
        let card = Bytes(450 << 20);
        let lazy = context(&Stack::default(), card);
        assert_eq!(lazy, card);
        let eager = context(&stack("12.1", Some(ModuleLoading::Eager)), card);
        assert_eq!(eager - lazy, Bytes(379_584_512));
    }

    #[test]
    fn toolkits_before_11_7_load_eagerly_and_refuse_lazy() {
        let card = Bytes(400 << 20);
        assert_eq!(context(&stack("11.2", None), card), Bytes(1_486 << 20));
        assert_eq!(context(&stack("10.2", None), card), Bytes(877 << 20));
        assert_eq!(
            Stack::new(
                CudaVersion::parse("11.6").unwrap(),
                Some(ModuleLoading::Lazy)
            ),
            Err(StackError::LazyTooEarly("11.6".into()))
        );
        // 11.7 is the first toolkit that loads lazily unless told otherwise.
        assert_eq!(stack("11.7", None).loading(), ModuleLoading::Lazy);
        assert_eq!(stack("11.6", None).loading(), ModuleLoading::Eager);
    }

    #[test]
    fn a_stack_reads_and_writes_back_as_json() {
        let s: Stack = serde_json::from_str(r#"{"cuda":"11.2","module_loading":"eager"}"#).unwrap();
        assert_eq!(s, stack("11.2", Some(ModuleLoading::Eager)));
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"cuda":"11.2","module_loading":"eager"}"#
        );
        for bad in [
            r#"{"cuda":"11"}"#,
            r#"{"cuda":"11.2","loading":"eager"}"#,
            r#"{"cuda":"11.2","module_loading":"sometimes"}"#,
            r#"{"module_loading":"eager"}"#,
            r#"{"cuda":"11.2","module_loading":"lazy"}"#,
        ] {
            assert!(serde_json::from_str::<Stack>(bad).is_err(), "{bad}");
        }
    }
}
