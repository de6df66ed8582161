//! `--hf ID` against a stand-in for the Hugging Face Hub on 127.0.0.1 (no internet here or in
//! CI): a published config.json, a gated model, a missing one, a page that is not JSON, an
//! unsupported model_type; then the cache with the server gone.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

/// The Qwen3 config.json transformers 5.24 wrote for the measured steps of
/// `tests/data/variant-steps.jsonl` (two layers of Qwen3-8B), and that record's plan.
fn published() -> (serde_json::Value, serde_json::Value) {
    let text = include_str!("data/variant-steps.jsonl");
    let plan = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|r| r["plan"].clone())
        .find(|p| p["hf_config"]["model_type"] == "qwen3")
        .expect("a Qwen3 record");
    (plan["hf_config"].clone(), plan)
}

const TOKEN: &str = "hf_test_token";

/// A stand-in Hub: answers each `GET /<id>/resolve/main/config.json` as the real one would, and
/// records the requests' `Authorization` headers.
struct Hub {
    endpoint: String,
    auth_seen: Arc<Mutex<Vec<Option<String>>>>,
}

fn start_hub() -> Hub {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let auth_seen = Arc::new(Mutex::new(Vec::new()));
    let seen = auth_seen.clone();
    let config = published().0.to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = answer(stream, &config, &seen);
        }
    });
    Hub {
        endpoint,
        auth_seen,
    }
}

fn answer(
    mut stream: TcpStream,
    config: &str,
    seen: &Mutex<Vec<Option<String>>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut auth = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("authorization") {
                auth = Some(v.trim().to_string());
            }
        }
    }
    seen.lock().unwrap().push(auth.clone());
    let (status, body): (&str, String) = match path.as_str() {
        "/Qwen/Qwen3-8B/resolve/main/config.json" => ("200 OK", config.into()),
        "/meta-llama/Llama-Gated/resolve/main/config.json" => {
            if auth.as_deref() == Some(&format!("Bearer {TOKEN}")) {
                ("200 OK", config.into())
            } else {
                (
                    "401 Unauthorized",
                    "{\"error\":\"Access restricted\"}".into(),
                )
            }
        }
        "/captive/portal/resolve/main/config.json" => {
            ("200 OK", "<html><body>Sign in</body></html>".into())
        }
        "/google-t5/t5-small/resolve/main/config.json" => {
            ("200 OK", r#"{"model_type": "t5", "d_model": 512}"#.into())
        }
        _ => ("404 Not Found", "{\"error\":\"Entry not found\"}".into()),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A port nothing listens on: bound, then let go.
fn closed_endpoint() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

/// A fresh cache folder for one test.
fn cache_home(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vram-planner-hub-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the CLI with only the Hub variables given here (none inherited from the user's shell).
fn run(args: &[&str], stdin: &str, cache: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vram-planner"));
    cmd.env("XDG_CACHE_HOME", cache);
    for k in ["HF_ENDPOINT", "HF_TOKEN", "HF_HUB_OFFLINE"] {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    common::run_cli_in(cmd, args, stdin)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The plan of the record without its model: what `--hf` completes.
fn settings() -> String {
    let (_, mut plan) = published();
    let m = plan.as_object_mut().unwrap();
    m.remove("hf_config");
    m.remove("model");
    plan.to_string()
}

#[test]
fn a_fetched_config_estimates_exactly_as_the_same_file_and_is_cached() {
    let hub = start_hub();
    let cache = cache_home("fetch");
    let fetched = run(
        &["estimate", "--format", "json", "--hf", "Qwen/Qwen3-8B"],
        &settings(),
        &cache,
        &[("HF_ENDPOINT", &hub.endpoint)],
    );
    assert!(fetched.status.success(), "{}", text(&fetched.stderr));
    assert!(fetched.stderr.is_empty(), "{}", text(&fetched.stderr));

    // The same plan with the config in the file itself.
    let (cfg, _) = published();
    let mut plan: serde_json::Value = serde_json::from_str(&settings()).unwrap();
    plan["model"] = "Qwen/Qwen3-8B".into();
    plan["hf_config"] = cfg.clone();
    let file = cache.join("plan.json");
    std::fs::write(&file, plan.to_string()).unwrap();
    let local = common::run_cli(
        &[
            "estimate",
            "--format",
            "json",
            "--config",
            file.to_str().unwrap(),
        ],
        "",
    );
    assert!(local.status.success(), "{}", text(&local.stderr));
    assert_eq!(text(&fetched.stdout), text(&local.stdout));
    let v: serde_json::Value = serde_json::from_slice(&fetched.stdout).unwrap();
    assert!(v["peak_allocated_bytes"].as_u64().unwrap() > 0);

    // Remembered where the cache folder says, as fetched.
    let kept = cache.join("vram-planner/hf/Qwen/Qwen3-8B/config.json");
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(kept).unwrap()).unwrap();
    assert_eq!(kept, cfg);

    // --hf-endpoint wins over HF_ENDPOINT; no token, no Authorization header.
    let flag = run(
        &[
            "estimate",
            "--format",
            "json",
            "--hf",
            "Qwen/Qwen3-8B",
            "--hf-endpoint",
            &hub.endpoint,
        ],
        &settings(),
        &cache,
        &[("HF_ENDPOINT", "http://127.0.0.1:1")],
    );
    assert!(flag.status.success(), "{}", text(&flag.stderr));
    assert_eq!(text(&flag.stdout), text(&local.stdout));
    assert!(hub.auth_seen.lock().unwrap().iter().all(Option::is_none));

    // The server gone: the cached copy answers, with a note; HF_HUB_OFFLINE asks nothing.
    for env in [
        vec![("HF_ENDPOINT", closed_endpoint())],
        vec![
            ("HF_ENDPOINT", closed_endpoint()),
            ("HF_HUB_OFFLINE", "1".into()),
        ],
    ] {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = run(
            &["estimate", "--format", "json", "--hf", "Qwen/Qwen3-8B"],
            &settings(),
            &cache,
            &env,
        );
        let err = text(&out.stderr);
        assert!(out.status.success(), "{env:?}: {err}");
        assert_eq!(text(&out.stdout), text(&local.stdout), "{env:?}");
        assert!(err.starts_with("note: ") && err.contains("cached"), "{err}");
    }
}

#[test]
fn a_plan_is_optional_and_search_takes_the_id_too() {
    let hub = start_hub();
    let cache = cache_home("search");
    let env = [("HF_ENDPOINT", hub.endpoint.as_str())];
    let table = run(&["estimate", "--hf", "Qwen/Qwen3-8B"], "", &cache, &env);
    assert!(table.status.success(), "{}", text(&table.stderr));
    assert!(
        text(&table.stdout).starts_with("Qwen/Qwen3-8B: "),
        "{}",
        text(&table.stdout)
    );
    let found = run(
        &["search", "--hf", "Qwen/Qwen3-8B", "--max-gpus", "8"],
        r#"{"seq": 512, "dtype": "bf16", "gpu": "a100-80"}"#,
        &cache,
        &env,
    );
    assert!(found.status.success(), "{}", text(&found.stderr));
    let v: serde_json::Value = serde_json::from_slice(&found.stdout).unwrap();
    assert!(!v.as_array().unwrap().is_empty());
}

#[test]
fn a_gated_model_takes_the_token() {
    let hub = start_hub();
    let cache = cache_home("gated");
    let args = ["estimate", "--hf", "meta-llama/Llama-Gated"];
    let without = run(&args, "", &cache, &[("HF_ENDPOINT", &hub.endpoint)]);
    assert_eq!(without.status.code(), Some(1));
    let with = run(
        &args,
        "",
        &cache,
        &[("HF_ENDPOINT", &hub.endpoint), ("HF_TOKEN", TOKEN)],
    );
    assert!(with.status.success(), "{}", text(&with.stderr));
    let seen = hub.auth_seen.lock().unwrap();
    assert_eq!(
        seen.last().unwrap().as_deref(),
        Some("Bearer hf_test_token")
    );
}

/// Arguments after `estimate`, environment, exit status, what stderr says.
type Case<'a> = (&'a [&'a str], Vec<(&'a str, &'a str)>, i32, &'a [&'a str]);

/// Each failure: exit 1 (2 for clap's usage errors), one line on stderr naming what to do.
#[test]
fn every_hub_failure_is_one_actionable_line() {
    let hub = start_hub();
    let cache = cache_home("errors");
    let gone = closed_endpoint();
    let cases: [Case; 10] = [
        (
            &["--hf", "not a/model id"],
            vec![],
            1,
            &["not a Hugging Face model id", "owner/name"],
        ),
        (&["--hf", "a/b/c"], vec![], 1, &["owner/name"]),
        (
            &["--hf", "meta-llama/Llama-Gated"],
            vec![("HF_ENDPOINT", &hub.endpoint)],
            1,
            &["gated", "licence", "HF_TOKEN", "/meta-llama/Llama-Gated"],
        ),
        (
            &["--hf", "nobody/nothing"],
            vec![("HF_ENDPOINT", &hub.endpoint)],
            1,
            &["nobody/nothing", "404", "check the id"],
        ),
        (
            &["--hf", "captive/portal"],
            vec![("HF_ENDPOINT", &hub.endpoint)],
            1,
            &["not a JSON object"],
        ),
        (
            &["--hf", "google-t5/t5-small"],
            vec![("HF_ENDPOINT", &hub.endpoint)],
            1,
            &["model_type 't5' is not supported", "qwen3"],
        ),
        (
            &["--hf", "Qwen/Qwen3-8B"],
            vec![("HF_ENDPOINT", &gone)],
            1,
            &["cannot reach", "--config FILE"],
        ),
        (
            &["--hf", "Qwen/Qwen3-8B"],
            vec![("HF_HUB_OFFLINE", "1")],
            1,
            &["HF_HUB_OFFLINE", "--config FILE"],
        ),
        (
            &["--hf", "Qwen/Qwen3-8B", "--hf-endpoint", "ftp://mirror"],
            vec![],
            1,
            &["not an http(s) URL"],
        ),
        (
            &["--hf-endpoint", "https://hf-mirror.com"],
            vec![],
            2,
            &["--hf"],
        ),
    ];
    for (args, env, code, says) in cases {
        let args: Vec<&str> = ["estimate"].iter().chain(args).copied().collect();
        let out = run(&args, "", &cache, &env);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: not one line:\n{err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        for s in says {
            assert!(err.contains(s), "{args:?}: {err} lacks {s}");
        }
        assert!(out.stdout.is_empty(), "{args:?}: wrote to stdout");
    }
    // A plan that brings its own config and names another is ambiguous.
    let out = run(
        &["estimate", "--hf", "Qwen/Qwen3-8B"],
        r#"{"model":"x","hf_config":{"model_type":"gpt2"}}"#,
        &cache,
        &[("HF_ENDPOINT", &hub.endpoint)],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("drop one"),
        "{}",
        text(&out.stderr)
    );
}
