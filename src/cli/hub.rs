//! `--hf ID`: the model's `config.json` from the Hugging Face Hub (or the mirror `HF_ENDPOINT`
//! names), remembered in the user's cache so the same command works offline afterwards. What
//! ids, endpoints and answers mean is [`crate::ui::logic::hub`]'s; this file does the I/O.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::ui::logic::hub::{self, Endpoint, HubError, RepoId};

/// Where the config came from, for the note the CLI prints when it did not come fresh.
pub enum Source {
    Hub,
    /// The cache, with why the Hub was not asked (or could not be reached).
    Cache(String),
}

/// The environment the fetch reads, gathered once so tests of [`fetch`]'s callers can see it.
pub struct Env {
    pub endpoint: Option<String>,
    pub token: Option<String>,
    pub offline: bool,
    pub cache_dir: Option<PathBuf>,
}

impl Env {
    /// `HF_ENDPOINT`, `HF_TOKEN`, `HF_HUB_OFFLINE`, `XDG_CACHE_HOME` and `HOME`, as
    /// huggingface_hub and the XDG spec read them (empty values count as unset).
    pub fn from_process() -> Env {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        Env {
            endpoint: var("HF_ENDPOINT"),
            token: var("HF_TOKEN"),
            offline: hub::offline_flag(var("HF_HUB_OFFLINE").as_deref()),
            cache_dir: hub::cache_dir(var("XDG_CACHE_HOME").as_deref(), var("HOME").as_deref()),
        }
    }
}

/// `id`'s config.json: from the cache when offline, else from the endpoint (`--hf-endpoint`,
/// else `HF_ENDPOINT`, else the Hub), cached on success; from the cache again when the endpoint
/// cannot be reached.
pub fn config(id: &str, endpoint: Option<&str>, env: &Env) -> Result<(Value, Source), HubError> {
    let id = RepoId::parse(id)?;
    let endpoint = match endpoint.or(env.endpoint.as_deref()) {
        Some(e) => Endpoint::parse(e)?,
        None => Endpoint::default(),
    };
    let cached = env.cache_dir.as_ref().map(|d| hub::cache_path(d, &id));
    let read_cache = || -> Option<Value> {
        let text = std::fs::read_to_string(cached.as_ref()?).ok()?;
        serde_json::from_str(&text).ok().filter(Value::is_object)
    };
    if env.offline {
        let v = read_cache().ok_or_else(|| HubError::NotCached { id: id.to_string() })?;
        return Ok((v, Source::Cache("HF_HUB_OFFLINE is set".into())));
    }
    let url = endpoint.config_url(&id);
    let text = match get(&url, env.token.as_deref()) {
        Ok((status, body)) => hub::answer_text(&endpoint, &id, &url, status, body)?,
        Err(detail) => {
            return match read_cache() {
                Some(v) => Ok((
                    v,
                    Source::Cache(format!("cannot reach {} ({detail})", endpoint.as_str())),
                )),
                None => Err(HubError::Unreachable {
                    endpoint: endpoint.as_str().into(),
                    detail,
                }),
            }
        }
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| HubError::NotJson {
        url: url.clone(),
        detail: e.to_string(),
    })?;
    hub::check_config(&url, &v)?;
    if let Some(path) = &cached {
        // The cache only saves a later fetch: an estimate never fails for want of it (a
        // read-only home, a full disk).
        let _ = write_atomically(path, &text);
    }
    Ok((v, Source::Hub))
}

/// Writes through a temporary file and a rename, so a reader never sees half a config.
fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// One GET: the status and the body as text (Err inside: why it is not text), or why no answer
/// came (DNS, refused connection, TLS, timeout).
fn get(url: &str, token: Option<&str>) -> Result<(u16, Result<String, String>), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        // 4xx and 5xx are answers to explain, not transport failures.
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .timeout_connect(Some(Duration::from_secs(10)))
        // The Hub redirects renamed repositories within itself; the token must follow those,
        // and never a redirect to another host.
        .redirect_auth_headers(ureq::config::RedirectAuthHeaders::SameHost)
        .user_agent(concat!("vram-planner/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let mut req = agent.get(url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let mut resp = req.call().map_err(|e| transport_error(&e))?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(hub::MAX_CONFIG_BYTES as u64)
        .read_to_string()
        .map_err(|e| e.to_string());
    Ok((status, body))
}

/// ureq's error in a few words: its messages for I/O errors carry the OS's text already.
fn transport_error(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}
