//! A model named by its Hugging Face Hub id (`Qwen/Qwen3-8B`): which ids and endpoints are
//! accepted, the address of the model's `config.json`, what each HTTP answer means, and where a
//! fetched config is remembered for offline use. Shared by the CLI (`--hf`, which fetches with a
//! blocking client) and the page (the model-id box, which uses the browser's fetch); neither the
//! fetching nor the storage is here, so all of it is tested natively.

use serde_json::Value;

use crate::presets::hf;

/// The Hub huggingface_hub talks to unless `HF_ENDPOINT` names a mirror.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// The longest id the Hub accepts (huggingface_hub's `validate_repo_id`).
pub const MAX_ID: usize = 96;

/// The longest endpoint URL accepted: a mirror's address, not a document.
const MAX_ENDPOINT: usize = 256;

/// The largest config.json read: published ones are a few KiB; a plan holding it must stay under
/// the plan reader's limit.
pub const MAX_CONFIG_BYTES: usize = crate::plan::MAX_PLAN_TEXT / 2;

/// Why a model could not be had from the Hub. The messages are the CLI's (they name its flags
/// and environment); the page words each case in both languages ([`super::i18n::hub`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HubError {
    #[error("'{0}' is not a Hugging Face model id: write it as in the model page's address, owner/name (e.g. Qwen/Qwen3-8B), with letters, digits, '-', '_' and '.' only")]
    BadId(String),
    #[error("the Hub endpoint '{0}' is not an http(s) URL such as https://huggingface.co (from --hf-endpoint or HF_ENDPOINT)")]
    BadEndpoint(String),
    #[error("{id} is gated or private (HTTP {status}): accept its licence at {page} while signed in, then set HF_TOKEN to an access token of that account (and check the id)")]
    Gated {
        id: String,
        status: u16,
        page: String,
    },
    #[error("{id} has no config.json on the Hub (HTTP 404 for {url}): check the id as written in the model page's address")]
    Missing { id: String, url: String },
    #[error("the Hub answered HTTP {status} for {url}: try again later, or give the plan with its hf_config in --config FILE")]
    Http { status: u16, url: String },
    #[error("cannot reach {endpoint} ({detail}): offline, --config FILE works (a plan whose hf_config holds the config.json), and a model fetched once is cached for offline use")]
    Unreachable { endpoint: String, detail: String },
    #[error("HF_HUB_OFFLINE is set and {id} has no cached config.json: fetch it once online, or give the plan with its hf_config in --config FILE")]
    NotCached { id: String },
    #[error("what {url} returned is not a JSON object ({detail}): is the endpoint a Hugging Face Hub or mirror?")]
    NotJson { url: String, detail: String },
    #[error("unsupported config.json: {0}")]
    Unsupported(String),
    /// The page's Content-Security-Policy (index.html) lets it connect to its own origin and
    /// huggingface.co only; the CLI never reports this.
    #[error("the page may fetch only from huggingface.co or its own site, not {0}")]
    Blocked(String),
}

/// A model id as the Hub writes it: `name` or `owner/name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoId(String);

impl RepoId {
    /// Accepts what huggingface_hub's `validate_repo_id` accepts: one or two parts of ASCII
    /// letters, digits, `-`, `_` and `.`, each starting and ending with a letter, digit or `_`,
    /// with no `--` or `..`, at most [`MAX_ID`] characters in all. Surrounding space is dropped
    /// (pasted ids often carry it). This also keeps the id safe as a path below the CLI's cache.
    pub fn parse(text: &str) -> Result<RepoId, HubError> {
        let id = text.trim();
        let bad = || HubError::BadId(text.chars().take(MAX_ID + 4).collect());
        if id.is_empty() || id.len() > MAX_ID || id.contains("--") || id.contains("..") {
            return Err(bad());
        }
        let parts: Vec<&str> = id.split('/').collect();
        let edge = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let part_ok = |p: &&str| {
            p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                && p.starts_with(edge)
                && p.ends_with(edge)
        };
        if parts.len() > 2 || !parts.iter().all(part_ok) {
            return Err(bad());
        }
        Ok(RepoId(id.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id's parts (`owner`, `name`, or `name` alone), as the CLI's cache lays them out.
    pub fn parts(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

impl std::fmt::Display for RepoId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The Hub's address: `http(s)://host[:port][/path]`, without a trailing `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint(String);

impl Default for Endpoint {
    fn default() -> Self {
        Endpoint(DEFAULT_ENDPOINT.into())
    }
}

impl Endpoint {
    /// An http or https URL with a host, no user name, query or fragment, and nothing a URL
    /// would have to escape (so the config's address is this text followed by the id's path).
    pub fn parse(text: &str) -> Result<Endpoint, HubError> {
        let bad = || HubError::BadEndpoint(text.chars().take(MAX_ENDPOINT).collect());
        let t = text.trim().trim_end_matches('/');
        let rest = t
            .strip_prefix("https://")
            .or_else(|| t.strip_prefix("http://"))
            .ok_or_else(bad)?;
        let host = rest.split('/').next().unwrap_or_default();
        let allowed = |c: char| c.is_ascii_alphanumeric() || "-._~/:%[]".contains(c);
        let host_ok = !host.is_empty()
            && !host.starts_with(':')
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c));
        if t.len() > MAX_ENDPOINT || !host_ok || !rest.chars().all(allowed) {
            return Err(bad());
        }
        Ok(Endpoint(t.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `scheme://host[:port]`, what a Content-Security-Policy source matches.
    pub fn origin(&self) -> &str {
        let after_scheme = self.0.find("://").map_or(0, |i| i + 3);
        match self.0[after_scheme..].find('/') {
            Some(i) => &self.0[..after_scheme + i],
            None => &self.0,
        }
    }

    /// The address of `id`'s `config.json` on its main branch (huggingface_hub's
    /// `hf_hub_url`).
    pub fn config_url(&self, id: &RepoId) -> String {
        format!("{}/{id}/resolve/main/config.json", self.0)
    }

    /// The model's page, where a gated model's licence is accepted.
    pub fn model_page(&self, id: &RepoId) -> String {
        format!("{}/{id}", self.0)
    }
}

/// Whether a value of `HF_HUB_OFFLINE` turns the network off, as huggingface_hub reads it.
pub fn offline_flag(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        matches!(
            v.trim().to_ascii_uppercase().as_str(),
            "1" | "ON" | "YES" | "TRUE"
        )
    })
}

/// What an HTTP status means for `id`'s config.json: 2xx is the file; 401 and 403 are the Hub's
/// answers for a gated or private model (and, to someone not signed in, for a model that does
/// not exist: the Hub does not say which); 404 is no such model or file.
pub fn check_status(endpoint: &Endpoint, id: &RepoId, status: u16) -> Result<(), HubError> {
    match status {
        200..=299 => Ok(()),
        401 | 403 => Err(HubError::Gated {
            id: id.to_string(),
            status,
            page: endpoint.model_page(id),
        }),
        404 => Err(HubError::Missing {
            id: id.to_string(),
            url: endpoint.config_url(id),
        }),
        _ => Err(HubError::Http {
            status,
            url: endpoint.config_url(id),
        }),
    }
}

/// The config.json's text from the Hub's answer to `url`: its status judged by [`check_status`],
/// then its body, which did not read as text (`Err` with why) where it is not one.
pub fn answer_text(
    endpoint: &Endpoint,
    id: &RepoId,
    url: &str,
    status: u16,
    body: Result<String, String>,
) -> Result<String, HubError> {
    check_status(endpoint, id, status)?;
    body.map_err(|detail| HubError::NotJson {
        url: url.to_string(),
        detail,
    })
}

/// Checks a fetched config.json's shape: a JSON object whose `model_type` the importer reads
/// (its own message names the supported ones). Everything else is judged by the estimator, as
/// for a pasted config.
pub fn check_config(url: &str, v: &Value) -> Result<(), HubError> {
    if !v.is_object() {
        return Err(HubError::NotJson {
            url: url.to_string(),
            detail: "not an object".into(),
        });
    }
    match v.get("model_type") {
        Some(Value::String(t)) if hf::SUPPORTED.contains(&t.as_str()) => Ok(()),
        Some(Value::String(t)) => Err(HubError::Unsupported(format!(
            "model_type '{t}' is not supported: use {}",
            hf::supported_list()
        ))),
        _ => Err(HubError::Unsupported(format!(
            "'model_type' is missing: expected one of {}",
            hf::supported_list()
        ))),
    }
}

/// The page's localStorage key for `id`'s remembered config.json.
pub fn storage_key(id: &RepoId) -> String {
    format!("vram-planner.hf.{id}")
}

/// The CLI's cache file for `id`, below its cache folder: `hf/<owner>/<name>/config.json`
/// (huggingface_hub's own cache needs its refs and snapshots layout; this one is ours alone).
pub fn cache_path(cache_dir: &std::path::Path, id: &RepoId) -> std::path::PathBuf {
    let mut p = cache_dir.join("hf");
    for part in id.parts() {
        p.push(part);
    }
    p.join("config.json")
}

/// The CLI's cache folder: `$XDG_CACHE_HOME/vram-planner`, else `$HOME/.cache/vram-planner`
/// (the XDG default); `None` without either.
pub fn cache_dir(xdg_cache_home: Option<&str>, home: Option<&str>) -> Option<std::path::PathBuf> {
    // The XDG spec says a relative XDG_CACHE_HOME is invalid and to be ignored.
    let base = match xdg_cache_home.filter(|v| v.starts_with('/')) {
        Some(x) => std::path::PathBuf::from(x),
        None => std::path::PathBuf::from(home.filter(|h| !h.is_empty())?).join(".cache"),
    };
    Some(base.join("vram-planner"))
}

/// Whether the page (at `page_origin`) may fetch from `endpoint` under its
/// Content-Security-Policy (`connect-src 'self' https://huggingface.co`): asked before a fetch,
/// since a refused one is only an opaque network error (and a console error) to the page.
pub fn page_may_fetch(endpoint: &Endpoint, page_origin: &str) -> bool {
    let o = endpoint.origin();
    o == DEFAULT_ENDPOINT || o == page_origin.trim_end_matches('/')
}

/// Where the page's model-id box stands after its Fetch button was pressed.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum PageStatus {
    /// Nothing asked yet (the page has made no request for it).
    #[default]
    Idle,
    Fetching(String),
    /// The config is the plan's, fresh from the Hub or (`cached`) as remembered offline.
    Applied {
        id: String,
        cached: bool,
    },
    Failed {
        id: String,
        error: HubError,
    },
}

impl PageStatus {
    /// The `data-testid` of the status line, one per outcome.
    pub fn test_id(&self) -> &'static str {
        match self {
            PageStatus::Idle => "hf-status",
            PageStatus::Fetching(_) => "hf-fetching",
            PageStatus::Applied { cached: false, .. } => "hf-fetched",
            PageStatus::Applied { cached: true, .. } => "hf-cached",
            PageStatus::Failed { error, .. } => match error {
                HubError::BadId(_) => "hf-bad-id",
                HubError::BadEndpoint(_) => "hf-bad-endpoint",
                HubError::Gated { .. } => "hf-gated",
                HubError::Missing { .. } => "hf-missing",
                HubError::Http { .. } => "hf-http-error",
                HubError::Unreachable { .. } | HubError::NotCached { .. } => "hf-offline",
                HubError::NotJson { .. } => "hf-not-json",
                HubError::Unsupported(_) => "hf-unsupported",
                HubError::Blocked(_) => "hf-blocked",
            },
        }
    }

    /// Whether the line reports a failure (an alert for assistive technology).
    pub fn failed(&self) -> bool {
        matches!(self, PageStatus::Failed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_page_outcome_has_its_own_test_id() {
        let id = || "a/b".to_string();
        let errors = [
            HubError::BadId(id()),
            HubError::BadEndpoint(id()),
            check_status(&Endpoint::default(), &RepoId::parse("a/b").unwrap(), 401).unwrap_err(),
            check_status(&Endpoint::default(), &RepoId::parse("a/b").unwrap(), 404).unwrap_err(),
            check_status(&Endpoint::default(), &RepoId::parse("a/b").unwrap(), 502).unwrap_err(),
            HubError::Unreachable {
                endpoint: id(),
                detail: id(),
            },
            HubError::NotJson {
                url: id(),
                detail: id(),
            },
            HubError::Unsupported(id()),
            HubError::Blocked(id()),
        ];
        let mut ids: Vec<&str> = errors
            .into_iter()
            .map(|error| PageStatus::Failed { id: id(), error }.test_id())
            .collect();
        ids.extend([
            PageStatus::Idle.test_id(),
            PageStatus::Fetching(id()).test_id(),
            PageStatus::Applied {
                id: id(),
                cached: false,
            }
            .test_id(),
            PageStatus::Applied {
                id: id(),
                cached: true,
            }
            .test_id(),
        ]);
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n, "{ids:?}");
    }

    #[test]
    fn ids_follow_the_hubs_rules() {
        for ok in [
            "Qwen/Qwen3-8B",
            "gpt2",
            "meta-llama/Llama-3.1-8B",
            " openai-community/gpt2 ",
            "a_b/c.d_1",
        ] {
            assert_eq!(RepoId::parse(ok).unwrap().as_str(), ok.trim(), "{ok}");
        }
        for bad in [
            "",
            "a/b/c",
            "/gpt2",
            "gpt2/",
            "../etc",
            "a/..",
            "a--b/c",
            "-a/b",
            "a/b.",
            "a b/c",
            "Qwen/Qwen3-8B?x=1",
            "https://huggingface.co/Qwen/Qwen3-8B",
            "名/字",
            &"x".repeat(97),
        ] {
            assert!(
                matches!(RepoId::parse(bad), Err(HubError::BadId(_))),
                "{bad}"
            );
        }
        let id = RepoId::parse("Qwen/Qwen3-8B").unwrap();
        assert_eq!(id.parts().collect::<Vec<_>>(), ["Qwen", "Qwen3-8B"]);
    }

    #[test]
    fn endpoints_are_http_urls_and_build_the_config_address() {
        let id = RepoId::parse("Qwen/Qwen3-8B").unwrap();
        assert_eq!(
            Endpoint::default().config_url(&id),
            "https://huggingface.co/Qwen/Qwen3-8B/resolve/main/config.json"
        );
        let mirror = Endpoint::parse("https://hf-mirror.com/").unwrap();
        assert_eq!(
            mirror.config_url(&id),
            "https://hf-mirror.com/Qwen/Qwen3-8B/resolve/main/config.json"
        );
        let local = Endpoint::parse("http://127.0.0.1:8123/fake-hub").unwrap();
        assert_eq!(local.origin(), "http://127.0.0.1:8123");
        assert_eq!(
            local.config_url(&id),
            "http://127.0.0.1:8123/fake-hub/Qwen/Qwen3-8B/resolve/main/config.json"
        );
        assert_eq!(
            Endpoint::parse("http://[::1]:80").unwrap().origin(),
            "http://[::1]:80"
        );
        for bad in [
            "",
            "huggingface.co",
            "ftp://huggingface.co",
            "javascript:alert(1)",
            "https://",
            "https://:443",
            "https://user@host",
            "https://host/?q=1",
            "https://host/#x",
            "https://host/a b",
            "https://host\"/",
        ] {
            assert!(
                matches!(Endpoint::parse(bad), Err(HubError::BadEndpoint(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn statuses_map_to_what_the_user_does_next() {
        let e = Endpoint::default();
        let id = RepoId::parse("meta-llama/Llama-3.1-8B").unwrap();
        assert_eq!(check_status(&e, &id, 200), Ok(()));
        for s in [401, 403] {
            let err = check_status(&e, &id, s).unwrap_err();
            assert!(matches!(err, HubError::Gated { .. }));
            let m = err.to_string();
            assert!(m.contains("HF_TOKEN") && m.contains("licence"), "{m}");
            assert!(m.contains("https://huggingface.co/meta-llama/Llama-3.1-8B"));
        }
        let m = check_status(&e, &id, 404).unwrap_err();
        assert!(matches!(m, HubError::Missing { .. }), "{m}");
        let m = check_status(&e, &id, 500).unwrap_err().to_string();
        assert!(m.contains("500") && m.contains("--config FILE"), "{m}");
    }

    #[test]
    fn a_config_is_an_object_with_a_supported_model_type() {
        assert_eq!(check_config("u", &json!({"model_type": "qwen3"})), Ok(()));
        assert!(matches!(
            check_config("u", &json!([1])),
            Err(HubError::NotJson { .. })
        ));
        for bad in [json!({"model_type": "t5"}), json!({"hidden_size": 8})] {
            let m = check_config("u", &bad).unwrap_err().to_string();
            assert!(
                m.starts_with("unsupported config.json: ") && m.contains("gpt2, bert"),
                "{m}"
            );
        }
    }

    #[test]
    fn cache_places_stay_below_their_folder() {
        let id = RepoId::parse("Qwen/Qwen3-8B").unwrap();
        assert_eq!(storage_key(&id), "vram-planner.hf.Qwen/Qwen3-8B");
        let dir = cache_dir(Some("/c"), Some("/home/u")).unwrap();
        assert_eq!(dir, std::path::Path::new("/c/vram-planner"));
        assert_eq!(
            cache_path(&dir, &id),
            std::path::Path::new("/c/vram-planner/hf/Qwen/Qwen3-8B/config.json")
        );
        assert_eq!(
            cache_dir(Some("relative"), Some("/home/u")).unwrap(),
            std::path::Path::new("/home/u/.cache/vram-planner")
        );
        assert_eq!(cache_dir(None, None), None);
    }

    #[test]
    fn offline_flag_reads_as_huggingface_hub_does() {
        for on in ["1", "true", "ON", "yes"] {
            assert!(offline_flag(Some(on)), "{on}");
        }
        for off in [None, Some("0"), Some(""), Some("false")] {
            assert!(!offline_flag(off), "{off:?}");
        }
    }

    #[test]
    fn the_page_fetches_only_where_its_policy_allows() {
        let page = "http://127.0.0.1:8080";
        assert!(page_may_fetch(&Endpoint::default(), page));
        assert!(page_may_fetch(
            &Endpoint::parse("http://127.0.0.1:8080/fake-hub").unwrap(),
            page
        ));
        assert!(!page_may_fetch(
            &Endpoint::parse("https://hf-mirror.com").unwrap(),
            page
        ));
        assert!(!page_may_fetch(
            &Endpoint::parse("http://huggingface.co").unwrap(),
            page
        ));
    }
}
