// Another build of the page, derived from dist/ for the upgrade test: every content-hashed file
// gets different content (a custom section appended to each wasm module, which the engine
// ignores; a comment in each script and stylesheet), hence a new hashed name; the files that
// name them (the split loader, the main module, index.html) are rewritten to the new names in
// dependency order and index.html is sealed again (scripts/seal.mjs). What the service worker
// sees is what two deploys give it: a page whose every hashed asset has a new name and content.
// A second `trunk build` would take minutes; this takes well under a second.
import { copyFileSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { seal } from '../../scripts/seal.mjs';

const HASHED = /^(.+)-([0-9a-f]{8,})((?:_bg)?\.(?:wasm|js|css))$/;

/** LEB128 of a non-negative integer. */
function leb(n) {
  const out = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return Buffer.from(out);
}

/** `wasm` with a custom section `name` holding `text` appended (https://webassembly.github.io/spec/core/binary/modules.html#custom-section). */
function withSection(wasm, name, text) {
  const body = Buffer.concat([leb(Buffer.byteLength(name)), Buffer.from(name), Buffer.from(text)]);
  return Buffer.concat([wasm, Buffer.from([0]), leb(body.length), body]);
}

/** Writes into `out` the build `dist` would be with `marker` in every hashed file; returns the
 * map of old to new file names. */
export function variant(dist, out, marker) {
  mkdirSync(out, { recursive: true });
  const files = readdirSync(dist);
  const renamed = new Map();
  const named = (f, bytes) => {
    const [, stem, hash, ext] = HASHED.exec(f);
    return `${stem}-${createHash('sha256').update(bytes).digest('hex').slice(0, hash.length)}${ext}`;
  };
  const rename = (f, bytes, name = named(f, bytes)) => {
    writeFileSync(join(out, name), bytes);
    renamed.set(f, name);
  };
  const retarget = (text) => {
    for (const [from, to] of renamed) text = text.split(from).join(to);
    return text;
  };
  // Leaves first: the modules and the stylesheet name nothing.
  for (const f of files.filter((f) => HASHED.test(f))) {
    if (f.endsWith('.wasm')) rename(f, withSection(readFileSync(join(dist, f)), 'vp-build', marker));
    else if (f.endsWith('.css')) rename(f, Buffer.from(`${readFileSync(join(dist, f), 'utf8')}\n/* ${marker} */\n`));
  }
  // The main module and the loader import each other: as in the build (scripts/split-wasm.sh),
  // the main module's name is fixed first (Trunk names it before the split), then the loader,
  // which names it and the chunks, is hashed, then the main module is rewritten to name the loader.
  const main = files.find((f) => HASHED.test(f) && f.endsWith('.js') && !f.startsWith('__wasm_split'));
  const loader = files.find((f) => HASHED.test(f) && f.startsWith('__wasm_split'));
  renamed.set(main, named(main, Buffer.from(`${main}\n${marker}`)));
  rename(loader, Buffer.from(`${retarget(readFileSync(join(dist, loader), 'utf8'))}\n// ${marker}\n`));
  rename(main, Buffer.from(`${retarget(readFileSync(join(dist, main), 'utf8'))}\n// ${marker}\n`), renamed.get(main));
  const rest = files.filter((f) => HASHED.test(f) && !renamed.has(f));
  if (rest.length) throw new Error(`variant: no rule for ${rest.join(', ')}`);
  for (const f of files.filter((f) => !HASHED.test(f))) {
    if (f === 'index.html') writeFileSync(join(out, f), retarget(readFileSync(join(dist, f), 'utf8')));
    else copyFileSync(join(dist, f), join(out, f));
  }
  seal(out);
  return renamed;
}
