//! The architecture, checked on the source: the estimator core imports nothing from the layers
//! above it (presets, the plan layer, the page, the lazy-loading machinery, the CLI) nor any web
//! crate, and no folder of the crate has an import cycle between its files, so each reads
//! top-down.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// Every `.rs` file under `dir`, with its module path (`estimator::parallel::layout`).
fn modules(dir: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let rel = p.strip_prefix(SRC).unwrap().with_extension("");
                let mut parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if parts.last().is_some_and(|l| l == "mod") {
                    parts.pop();
                }
                out.insert(parts.join("::"), p);
            }
        }
    }
    out
}

/// The file's code without its comments; without its unit tests too unless `tests`.
fn code(path: &Path, tests: bool) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) if !tests => &text[..i],
        _ => &text[..],
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The paths starting at `crate::`, `super::` or `self::` in `code`, brace groups expanded
/// (`crate::a::{b, c::d}` gives `crate::a::b` and `crate::a::c::d`).
fn paths(code: &str) -> Vec<String> {
    fn read(bytes: &[u8], mut i: usize, prefix: &str, out: &mut Vec<String>) -> usize {
        let mut path = prefix.to_string();
        loop {
            let start = i;
            while i < bytes.len() && is_ident(bytes[i]) {
                i += 1;
            }
            if i > start {
                if !path.is_empty() && !path.ends_with("::") {
                    break;
                }
                path.push_str(std::str::from_utf8(&bytes[start..i]).unwrap());
            }
            if bytes[i..].starts_with(b"::{") {
                i += 3;
                let base = format!("{path}::");
                loop {
                    while i < bytes.len() && (bytes[i] as char).is_whitespace() {
                        i += 1;
                    }
                    if i >= bytes.len() || bytes[i] == b'}' {
                        return i + 1;
                    }
                    i = read(bytes, i, &base, out);
                    while i < bytes.len() && bytes[i] != b',' && bytes[i] != b'}' {
                        i += 1;
                    }
                    if i < bytes.len() && bytes[i] == b',' {
                        i += 1;
                    }
                }
            }
            if bytes[i..].starts_with(b"::") {
                path.push_str("::");
                i += 2;
                continue;
            }
            break;
        }
        out.push(path.trim_end_matches("::").to_string());
        i
    }
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let boundary = i == 0 || !is_ident(bytes[i - 1]);
        let head = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|h| bytes[i..].starts_with(h.as_bytes()));
        match head {
            Some(_) if boundary => i = read(bytes, i, "", &mut out),
            _ => i += 1,
        }
    }
    out
}

/// The module a path names, resolved from module `cur` (the longest prefix that is a module).
fn target(mods: &BTreeMap<String, PathBuf>, cur: &str, path: &str) -> Option<String> {
    let mut segs: Vec<&str> = path.split("::").collect();
    let mut base: Vec<&str> = cur.split("::").collect();
    match segs[0] {
        "crate" => base.clear(),
        "self" => {}
        "super" => {
            // A file's module path is already its folder's for `mod.rs`: one `super` is one level.
            base.pop();
            segs.remove(0);
            while segs.first() == Some(&"super") {
                base.pop();
                segs.remove(0);
            }
            segs.insert(0, "self");
        }
        _ => return None,
    }
    segs.remove(0);
    let full: Vec<&str> = base.into_iter().chain(segs).collect();
    (1..=full.len())
        .rev()
        .map(|k| full[..k].join("::"))
        .find(|m| mods.contains_key(m))
}

/// The file-level import graph of the modules under `dir`.
fn graph(dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let all = modules(Path::new(SRC));
    let prefix = format!("{dir}::");
    let mut g = BTreeMap::new();
    for (m, p) in all
        .iter()
        .filter(|(m, _)| *m == dir || m.starts_with(&prefix))
    {
        let deps: BTreeSet<String> = paths(&code(p, false))
            .iter()
            .filter_map(|path| target(&all, m, path))
            .filter(|t| t != m && (t == dir || t.starts_with(&prefix)))
            .collect();
        g.insert(m.clone(), deps);
    }
    g
}

/// The import cycles of a graph (strongly connected components of more than one file).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = Tarjan {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn the_path_reader_expands_brace_groups() {
    let got = paths("use crate::a::{b, c::{d, e}};\nlet x = super::f::g(self::h);");
    assert_eq!(
        got,
        [
            "crate::a::b",
            "crate::a::c::d",
            "crate::a::c::e",
            "super::f::g",
            "self::h"
        ]
    );
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let g: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), BTreeSet::from([v.to_string()])))
        .collect();
    assert_eq!(cycles(&g), vec![vec!["a", "b", "c"]]);
}

#[test]
fn the_estimator_core_imports_nothing_above_it() {
    let forbidden = [
        "crate::presets",
        "crate::plan",
        "crate::ui",
        "crate::split",
        "crate::cli",
        "crate::plots",
        "lazy_chunk!",
        "leptos",
        "web_sys",
        "js_sys",
        "wasm_bindgen",
        "wasm_split",
        "plotters",
        "clap",
    ];
    let mut found = Vec::new();
    for (m, p) in modules(Path::new(SRC)) {
        if !(m == "estimator" || m.starts_with("estimator::")) {
            continue;
        }
        let text = code(&p, true);
        for f in forbidden {
            if text.contains(f) {
                found.push(format!("{m} mentions {f}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the core reaches above itself:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_folder_has_an_import_cycle_between_its_files() {
    let mut found = Vec::new();
    for dir in ["estimator", "plan", "presets", "plots", "ui", "cli"] {
        let g = graph(dir);
        assert!(g.len() > 1 || dir == "cli", "{dir}: no files found");
        for c in cycles(&g) {
            found.push(format!("{dir}: {}", c.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}
