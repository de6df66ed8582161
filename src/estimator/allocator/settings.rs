//! The allocator's options as users set them in `PYTORCH_CUDA_ALLOC_CONF`
//! (`c10/cuda/CUDAAllocatorConfig.cpp`, PyTorch 2.15) plus
//! `torch.cuda.set_per_process_memory_fraction`, which garbage collection depends on.

use thiserror::Error;

use super::sizes::LARGE_BUFFER;

/// One process's allocator configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AllocatorSettings {
    /// `max_split_size_mb`, in bytes: cached blocks this large are never split. `None`: no limit
    /// (PyTorch's `SIZE_MAX` default).
    pub max_split_size: Option<u64>,
    /// `max_non_split_rounding_mb`, in bytes: how much larger than an oversize request a cached
    /// oversize block may be and still serve it (default `kLargeBuffer`, 20 MiB).
    pub max_non_split_rounding: u64,
    /// `roundup_power2_divisions`: requests rounded to this many steps per power-of-two interval
    /// (0 or 1: plain 512-byte rounding).
    pub roundup_power2_divisions: u32,
    /// `garbage_collection_threshold`: fraction of the allowed memory above which cached,
    /// unsplit large blocks are released, oldest first. Only active together with
    /// [`AllocatorSettings::memory_fraction`] (PyTorch checks `set_fraction`).
    pub garbage_collection_threshold: Option<f64>,
    /// `expandable_segments:True`: one growing segment per stream and pool.
    pub expandable_segments: bool,
    /// `torch.cuda.set_per_process_memory_fraction`: the share of the device this process may
    /// reserve.
    pub memory_fraction: Option<f64>,
}

impl Default for AllocatorSettings {
    fn default() -> Self {
        AllocatorSettings {
            max_split_size: None,
            max_non_split_rounding: LARGE_BUFFER,
            roundup_power2_divisions: 0,
            garbage_collection_threshold: None,
            expandable_segments: false,
            memory_fraction: None,
        }
    }
}

/// `PYTORCH_CUDA_ALLOC_CONF` as a plan writes it, checked when the plan is read (so that a page
/// holds its reader with the plan reader, in the chunk fetched with a link's JSON) and kept as
/// written so that the plan writes it back unchanged.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocConf {
    pub text: String,
    pub settings: AllocatorSettings,
}

impl AllocConf {
    pub fn parse(text: &str) -> Result<AllocConf, SettingsError> {
        Ok(AllocConf {
            text: text.to_string(),
            settings: AllocatorSettings::parse(text)?,
        })
    }
}

impl serde::Serialize for AllocConf {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for AllocConf {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AllocConf, D::Error> {
        let text = String::deserialize(d)?;
        AllocConf::parse(&text)
            .map_err(|e| serde::de::Error::custom(format!("PYTORCH_CUDA_ALLOC_CONF: {e}")))
    }
}

/// A `PYTORCH_CUDA_ALLOC_CONF` string that PyTorch would reject or that this replay cannot follow.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum SettingsError {
    #[error("allocator option `{0}` is not `key:value`; write e.g. `expandable_segments:True`")]
    NotKeyValue(String),
    #[error("allocator option `{key}` has value `{value}`: {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: &'static str,
    },
    #[error("unknown allocator option `{0}`; known: max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions, garbage_collection_threshold, expandable_segments")]
    Unknown(String),
}

impl AllocatorSettings {
    /// The split limit in bytes (`SIZE_MAX` when unset).
    pub fn max_split_size(&self) -> u64 {
        self.max_split_size.unwrap_or(u64::MAX)
    }

    /// Whether garbage collection runs: PyTorch only collects when a memory fraction is set and
    /// the threshold is positive (`set_fraction && garbage_collection_threshold() > 0.0`).
    pub fn collects_garbage(&self) -> bool {
        self.memory_fraction.is_some() && self.garbage_collection_threshold.is_some_and(|t| t > 0.0)
    }

    /// Reads `PYTORCH_CUDA_ALLOC_CONF` (`key:value` pairs separated by commas), with the limits
    /// `CUDAAllocatorConfig::parseArgs` enforces: `max_split_size_mb` above 20 MiB, the
    /// threshold strictly between 0 and 1, divisions a power of two.
    pub fn parse(conf: &str) -> Result<AllocatorSettings, SettingsError> {
        let mut s = AllocatorSettings::default();
        for item in conf.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item
                .split_once(':')
                .ok_or_else(|| SettingsError::NotKeyValue(item.to_string()))?;
            let (key, value) = (key.trim(), value.trim());
            let bad = |expected| SettingsError::BadValue {
                key: key.to_string(),
                value: value.to_string(),
                expected,
            };
            match key {
                "max_split_size_mb" => {
                    let mb: u64 = value.parse().map_err(|_| bad("a whole number of MiB"))?;
                    if mb <= LARGE_BUFFER >> 20 {
                        return Err(bad("must be more than 20 (MiB)"));
                    }
                    s.max_split_size = Some(mb << 20);
                }
                "max_non_split_rounding_mb" => {
                    let mb: u64 = value.parse().map_err(|_| bad("a whole number of MiB"))?;
                    s.max_non_split_rounding = mb << 20;
                }
                "roundup_power2_divisions" => {
                    let d: u32 = value
                        .parse()
                        .map_err(|_| bad("one power of two for all sizes, e.g. 4"))?;
                    if d != 0 && !d.is_power_of_two() {
                        return Err(bad("a power of two"));
                    }
                    s.roundup_power2_divisions = d;
                }
                "garbage_collection_threshold" => {
                    let t = decimal_fraction(value).ok_or_else(|| bad("a number"))?;
                    if !(t > 0.0 && t < 1.0) {
                        return Err(bad("strictly between 0 and 1"));
                    }
                    s.garbage_collection_threshold = Some(t);
                }
                "expandable_segments" => {
                    s.expandable_segments = match value {
                        "True" | "true" => true,
                        "False" | "false" => false,
                        _ => return Err(bad("True or False")),
                    };
                }
                _ => return Err(SettingsError::Unknown(key.to_string())),
            }
        }
        Ok(s)
    }
}

/// A plain decimal such as `0.8` or `1` (what the option takes), read without the float parser
/// that would weigh on the page's first load.
fn decimal_fraction(v: &str) -> Option<f64> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() && frac.is_empty() || !digits(int) || !digits(frac) || frac.len() > 9 {
        return None;
    }
    let whole: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let part: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    Some(whole as f64 + part as f64 / 10f64.powi(frac.len() as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_options_users_set() {
        let s = AllocatorSettings::parse(
            "expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6,roundup_power2_divisions:4",
        )
        .unwrap();
        assert!(s.expandable_segments);
        assert_eq!(s.max_split_size, Some(128 << 20));
        assert_eq!(s.garbage_collection_threshold, Some(0.6));
        assert_eq!(s.roundup_power2_divisions, 4);
        assert!(!s.collects_garbage(), "no memory fraction set");
        assert_eq!(
            AllocatorSettings::parse("").unwrap(),
            AllocatorSettings::default()
        );
    }

    #[test]
    fn rejects_what_pytorch_rejects() {
        assert!(matches!(
            AllocatorSettings::parse("max_split_size_mb:20"),
            Err(SettingsError::BadValue { .. })
        ));
        assert!(matches!(
            AllocatorSettings::parse("garbage_collection_threshold:1.0"),
            Err(SettingsError::BadValue { .. })
        ));
        assert!(matches!(
            AllocatorSettings::parse("roundup_power2_divisions:3"),
            Err(SettingsError::BadValue { .. })
        ));
        assert!(matches!(
            AllocatorSettings::parse("expandable"),
            Err(SettingsError::NotKeyValue(_))
        ));
        assert!(matches!(
            AllocatorSettings::parse("pinned_use_cuda_host_register:True"),
            Err(SettingsError::Unknown(_))
        ));
    }
}
