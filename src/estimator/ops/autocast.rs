//! Autocast's casts (`aten/src/ATen/autocast_mode.cpp`): to the low-precision dtype with the
//! weight-cast cache, and to fp32.

use super::R;
use crate::estimator::graph::{Graph, StorageKind, TensorId};
use crate::estimator::units::DType;

impl Graph {
    /// `aten::_to_copy`: a new tensor in `dtype`; its backward casts the gradient back (new tensor).
    pub fn cast(&mut self, x: TensorId, dtype: DType) -> R {
        if self.dtype(x) == dtype {
            return Ok(x);
        }
        let rg = self.t(x).requires_grad;
        let y = self.alloc(self.shape(x), dtype, StorageKind::Activation, rg)?;
        self.record_simple("to_copy", vec![x], vec![y], vec![], 0.0);
        Ok(y)
    }

    /// Casts for an op on autocast's low-precision list. Weights (leaf params) are cast once per
    /// autocast region and the copy is cached; only leaves that require grad are cached
    /// (`cached_cast` in `autocast_mode.cpp`), so a frozen weight is cast again at every use.
    /// `cached_cast` does not look at grad mode: an inference forward under `torch.no_grad()`
    /// caches its weights' casts too, the parameters still requiring grad.
    pub fn lowp(&mut self, x: TensorId) -> R {
        let Some(dt) = self.precision.autocast() else {
            return Ok(x);
        };
        if !self.dtype(x).is_float() || self.dtype(x) == dt {
            return Ok(x);
        }
        if self.t(x).is_param && (self.t(x).requires_grad || self.inference) {
            if let Some(&(_, c)) = self.cast_cache.iter().find(|(p, _)| *p == x) {
                return Ok(c);
            }
            let c = self.cast(x, dt)?;
            self.cast_cache.push((x, c));
            return Ok(c);
        }
        self.cast(x, dt)
    }

    /// Casts for an op on autocast's fp32 list.
    pub fn fp32(&mut self, x: TensorId) -> R {
        if self.precision.autocast().is_some()
            && self.dtype(x).is_float()
            && self.dtype(x) != DType::F32
        {
            self.cast(x, DType::F32)
        } else {
            Ok(x)
        }
    }
}
