//! A row of the memory breakdown: what [`super::explain`] builds and the exports
//! ([`super::export`], [`super::json`]) write.

use serde::Serialize;

use crate::estimator::units::Bytes;

/// One row of the breakdown.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// Stable key for exports (`params`, `gradients`, …, `allocated_peak`, `device_total`).
    pub key: &'static str,
    pub label: String,
    pub bytes: Bytes,
    pub formula: String,
    /// A subtotal (allocated peak, reserved, device total).
    pub total: bool,
}
