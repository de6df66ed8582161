#!/usr/bin/env bash
# Trunk's post-build hook (Trunk.toml → `make split-wasm`). Trunk has built the page with the
# `lazy-chunks` feature and run wasm-bindgen on it; this redoes that step on the split wasm:
#  1. wasm-split-cli moves each split point (`split_point!` in src/ui/view/panels.rs and
#     src/ui/view/canvas.rs, `lazy_chunk!` in src/plan/lazy.rs, src/ui/logic/json.rs and
#     src/ui/logic/suggest.rs) and everything only it reaches into its own chunk (split_<name>.wasm),
#     code that only split points share into chunk_<n>.wasm (fetched with any of them), leaving
#     the main module and a loader (__wasm_split.js);
#  2. wasm-bindgen processes the main module in place of Trunk's output (the same file names);
#  3. the readable and writable stream adapters that wasm-streams (a dependency of Leptos's server
#     functions, which the page never calls) exports through wasm-bindgen leave the main module
#     and the glue: nothing on the page makes a stream, and exports are kept however dead;
#  4. in release, wasm-opt shrinks each module (Trunk's own wasm-opt is off in index.html), the
#     main module's imports from wasm-bindgen's glue get short names on both sides
#     (scripts/short-imports.mjs), and esbuild minifies the JavaScript (wasm-bindgen's glue, the
#     loader, the service worker) and the stylesheet;
#  5. the loader and the chunks get content-hashed names (the service worker caches by name), and
#     index.html names them: the loader as a module preload (the main module imports it), each
#     chunk as <link rel="vp-lazy"> — a rel browsers do not fetch, which public/sw.js reads to cache
#     the chunk for offline use in the background; the page's module script is made `async`.
set -euo pipefail
staging="${TRUNK_STAGING_DIR:?runs as the post-build hook of Trunk}"
profile="${TRUNK_PROFILE:-debug}"
root="$(cd "$(dirname "$0")/.." && pwd)"
# index.html's `data-cargo-profile-release` builds the release page with Cargo's `wasm-release`
# profile (size-optimised; `release` is the command-line tool's, speed-optimised).
cargo_profile="$profile"
[ "$profile" = release ] && cargo_profile=wasm-release
raw="${CARGO_TARGET_DIR:-$root/target}/wasm32-unknown-unknown/$cargo_profile/vram-planner.wasm"
js="$(ls "$staging"/vram-planner-*.js)"
name="$(basename "$js" .js)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Flattening and re-looping the control flow before -Oz, then repeating -Oz until it converges,
# gives about 1 % less gzip than -Oz alone (measured on the main module); merging functions that
# differ only in constants and folding identical code tails then takes another 0.3 KB.
# --low-memory-unused lets wasm-opt fold a constant added to an address into the load's or
# store's offset (the two differ only for an address that wraps past 4 GiB into the lowest KiB):
# Rust's wasm32 linker puts the 1 MiB stack first and the data above it, so nothing lives in that
# KiB unless the stack has overflowed; 0.6 KB less gzip on the main module.
# WASM_OPT_EXTRA=-g keeps function names, for a profile of the release build.
opt() {
  if [ "$profile" = release ]; then
    wasm-opt "${@:2}" --flatten --rereloop -Oz --converge --merge-similar-functions --code-folding -Oz --strip-producers --strip-target-features --low-memory-unused ${WASM_OPT_EXTRA:-} --enable-bulk-memory --enable-reference-types --enable-nontrapping-float-to-int \
      --enable-sign-ext --enable-multivalue --enable-mutable-globals "$1" -o "$1"
  fi
}
hash() { sha256sum "$1" | cut -c1-16; }
# Whitespace and local names only: exported and imported names, which tie the glue to the wasm
# modules, are kept.
minify() {
  if [ "$profile" = release ]; then
    esbuild "$1" --minify --log-level=warning --outfile="$1.min" && mv "$1.min" "$1"
  fi
}

wasm-split-cli --out-name "$name" "$raw" "$tmp" >/dev/null
wasm-bindgen --target web --keep-lld-exports --no-demangle --out-dir "$tmp" --out-name "$name" "$tmp/$name.wasm"
# wasm-streams' classes in the glue (each with its finalization registry, the byte source's type
# enum): their wasm exports go in the main module's wasm-opt run below (a debug build, not
# optimised, keeps them unused).
perl -0pi -e 's/^export class IntoUnderlying\w+ \{\n.*?^\}\nif \(Symbol\.dispose\) IntoUnderlying\w+\.prototype\[Symbol\.dispose\] = [^\n]*\n//gms; s/^const IntoUnderlying\w+Finalization = .*?;\n//gms; s/^const __wbindgen_enum_ReadableStreamType = [^\n]*\n//gm' "$tmp/$name.js"
! grep -qi 'intounderlying\|ReadableStreamType' "$tmp/$name.js" || { echo "split-wasm: wasm-streams' glue is still in $name.js" >&2; exit 1; }

links=""
for chunk in "$tmp"/split_*.wasm "$tmp"/chunk_*.wasm; do
  [ -e "$chunk" ] || continue
  opt "$chunk"
  base="$(basename "$chunk" .wasm)"
  hashed="$base-$(hash "$chunk").wasm"
  mv "$chunk" "$staging/$hashed"
  sed -i "s|\"\./$base\.wasm\"|\"./$hashed\"|" "$tmp/__wasm_split.js"
  grep -q "\"./$hashed\"" "$tmp/__wasm_split.js" || { echo "split-wasm: the loader does not name $base.wasm" >&2; exit 1; }
  links="$links<link rel=\"vp-lazy\" href=\"./$hashed\">"
done

minify "$tmp/__wasm_split.js"
loader="__wasm_split-$(hash "$tmp/__wasm_split.js").js"
mv "$tmp/__wasm_split.js" "$staging/$loader"
sed -i "/^import /s|from \"\./__wasm_split\.js\"|from \"./$loader\"|" "$tmp/$name.js"
grep -q "\"./$loader\"" "$tmp/$name.js" || { echo "split-wasm: $name.js does not import the loader" >&2; exit 1; }
opt "$tmp/${name}_bg.wasm" --remove-exports --pass-arg='remove-exports@*intounderlying*'
if [ "$profile" = release ]; then
  if grep -qa intounderlying "$tmp/${name}_bg.wasm"; then
    echo "split-wasm: the main module still exports wasm-streams' adapters" >&2
    exit 1
  fi
  # After wasm-opt, which may drop imports, and before esbuild, which keeps the keys as written.
  node "$root/scripts/short-imports.mjs" "$tmp/${name}_bg.wasm" "$tmp/$name.js"
fi
minify "$tmp/$name.js"
for f in "$staging"/*.css "$staging/sw.js"; do
  [ -e "$f" ] && minify "$f"
done
mv "$tmp/$name.js" "$tmp/${name}_bg.wasm" "$staging/"
sed -i "s|</head>|<link rel=\"modulepreload\" href=\"./$loader\" crossorigin=\"anonymous\">$links</head>|" "$staging/index.html"
grep -q "$loader" "$staging/index.html" || { echo "split-wasm: index.html has no </head>" >&2; exit 1; }
# Trunk's module script waits for the parser and the stylesheet; `async`, it starts the wasm as
# soon as its code is here. The page mounts on <body>: should the code come before the parser
# has reached it (cached, on a slow parse), it waits for the document first.
sed -i 's|<script type="module">|<script type="module" async>if (!document.body) await new Promise((r) => addEventListener("DOMContentLoaded", r, { once: true }));|' "$staging/index.html"
grep -q '<script type="module" async>' "$staging/index.html" || { echo "split-wasm: index.html has no module script to start early" >&2; exit 1; }
# What index.html says to its reader (HTML comments, the inline script's comment lines) is not
# sent to the browser.
if [ "$profile" = release ]; then
  perl -0pi -e 's/<!--.*?-->//gs; s/^[ \t]*\/\/[^\n]*\n//gm; s/^\s+//gm; s/ data-integrity="none"//g' "$staging/index.html"
  # The web manifest without its indentation.
  if [ -e "$staging/manifest.webmanifest" ]; then
    node -e 'const f = process.argv[1], fs = require("fs"); fs.writeFileSync(f, JSON.stringify(JSON.parse(fs.readFileSync(f, "utf8"))))' "$staging/manifest.webmanifest"
  fi
fi
echo "split-wasm: $name + $loader$(cd "$staging" && for f in split_*.wasm chunk_*.wasm; do [ -e "$f" ] && printf ' + %s' "$f"; done)"
# Integrity attributes and the policy's inline-script hashes, over the files as served.
node "$root/scripts/seal.mjs" "$staging"
