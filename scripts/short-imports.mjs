// Gives the main module's imports from wasm-bindgen's glue short names, in the module and in the
// glue's import object alike: wasm-bindgen names each one after its JavaScript member and a hash
// (`__wbg_addEventListener_847fd86b8c33ec43`), and each name is written twice, once in the wasm's
// import section and once as the glue's key, where the hashes barely compress. Imports from any
// other module (the split loader's) keep their names. Likewise the exports that keep their mangled
// Rust names (closure shims the glue calls as `wasm._ZN…E(`); the others (memory, the table, the
// split loader's and wasm-bindgen's own) keep theirs.
//
//   node scripts/short-imports.mjs MODULE.wasm GLUE.js
import fs from "node:fs";

const [wasmPath, jsPath] = process.argv.slice(2);
const wasm = fs.readFileSync(wasmPath);
let js = fs.readFileSync(jsPath, "utf8");
const fail = (why) => {
  console.error(`short-imports: ${why}`);
  process.exit(1);
};

function leb(at) {
  let value = 0, shift = 0, byte;
  do {
    byte = wasm[at++];
    value += (byte & 0x7f) * 2 ** shift;
    shift += 7;
  } while (byte & 0x80);
  return [value, at];
}
function encodeLeb(n) {
  const out = [];
  do {
    let byte = n & 0x7f;
    n = Math.floor(n / 128);
    if (n) byte |= 0x80;
    out.push(byte);
  } while (n);
  return Buffer.from(out);
}
const str = (s) => Buffer.concat([encodeLeb(Buffer.byteLength(s)), Buffer.from(s)]);
const shortName = (i) => {
  const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  let s = "";
  do {
    s = letters[i % 52] + s;
    i = Math.floor(i / 52) - 1;
  } while (i >= 0);
  return s;
};

// The byte range of section `want` (its id byte to its end) and where its body starts.
function section(want) {
  let at = 8;
  while (at < wasm.length) {
    const id = wasm[at];
    const [size, body] = leb(at + 1);
    if (id === want) return [at, body, body + size];
    at = body + size;
  }
  fail(`${wasmPath} has no section ${want}`);
}
const [start, importBody, end] = section(2);
let at = importBody;

const [count, first] = leb(at);
at = first;
const entries = [];
let renamed = 0;
for (let i = 0; i < count; i++) {
  const [mlen, m0] = leb(at);
  const module = wasm.toString("utf8", m0, m0 + mlen);
  const [nlen, n0] = leb(m0 + mlen);
  const name = wasm.toString("utf8", n0, n0 + nlen);
  const descStart = n0 + nlen;
  // The import's description: a kind byte, then its type.
  let descEnd;
  const kind = wasm[descStart];
  if (kind === 0) descEnd = leb(descStart + 1)[1];
  else if (kind === 1) {
    const [flags, lim] = leb(descStart + 2);
    descEnd = leb(lim)[1];
    if (flags & 1) descEnd = leb(descEnd)[1];
  } else if (kind === 2) {
    const [flags, lim] = leb(descStart + 1);
    descEnd = leb(lim)[1];
    if (flags & 1) descEnd = leb(descEnd)[1];
  } else if (kind === 3) descEnd = descStart + 3;
  else fail(`import ${module}.${name} has an unknown kind ${kind}`);
  const desc = wasm.subarray(descStart, descEnd);
  at = descEnd;
  if (module.endsWith("_bg.js") && kind === 0) {
    const key = `${name}:`;
    const found = js.split(key).length - 1;
    if (found !== 1) fail(`${jsPath} names ${name} ${found} times, not once as a key`);
    const short = shortName(renamed++);
    js = js.replace(key, `${short}:`);
    entries.push(Buffer.concat([str(module), str(short), desc]));
  } else {
    entries.push(Buffer.concat([str(module), str(name), desc]));
  }
}
if (at !== end) fail("the import section did not parse to its end");
if (!renamed) fail(`${wasmPath} imports nothing from wasm-bindgen's glue`);

// The export section (id 7) comes after the import section: both are rebuilt from the bytes read.
const [xStart, exportBody, xEnd] = section(7);
const [xCount, xFirst] = leb(exportBody);
at = xFirst;
const exports = [];
let shortened = 0;
for (let i = 0; i < xCount; i++) {
  const [nlen, n0] = leb(at);
  const name = wasm.toString("utf8", n0, n0 + nlen);
  const kind = wasm[n0 + nlen];
  const indexEnd = leb(n0 + nlen + 1)[1];
  const rest = wasm.subarray(n0 + nlen, indexEnd);
  at = indexEnd;
  if (kind === 0 && name.startsWith("_ZN")) {
    const call = `wasm.${name}(`;
    const found = js.split(call).length - 1;
    if (found !== 1) fail(`${jsPath} calls ${name} ${found} times, not once`);
    const short = shortName(shortened++);
    js = js.replace(call, `wasm.${short}(`);
    exports.push(Buffer.concat([str(short), rest]));
  } else {
    exports.push(Buffer.concat([str(name), rest]));
  }
}
if (at !== xEnd) fail("the export section did not parse to its end");

const rebuilt = (id, count, items) => {
  const body = Buffer.concat([encodeLeb(count), ...items]);
  return Buffer.concat([Buffer.from([id]), encodeLeb(body.length), body]);
};
fs.writeFileSync(
  wasmPath,
  Buffer.concat([
    wasm.subarray(0, start),
    rebuilt(2, count, entries),
    wasm.subarray(end, xStart),
    rebuilt(7, xCount, exports),
    wasm.subarray(xEnd),
  ]),
);
fs.writeFileSync(jsPath, js);
console.log(`short-imports: ${renamed} imports and ${shortened} exports renamed`);
