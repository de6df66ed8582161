// Gives the main module's imports from wasm-bindgen's glue short names, in the module and in the
// glue's import object alike: wasm-bindgen names each one after its JavaScript member and a hash
// (`__wbg_addEventListener_847fd86b8c33ec43`), and each name is written twice, once in the wasm's
// import section and once as the glue's key, where the hashes barely compress. Imports from any
// other module (the split loader's) keep their names.
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

// Walk to the import section (id 2).
let at = 8;
let start = -1, end = -1;
while (at < wasm.length) {
  const id = wasm[at];
  const [size, body] = leb(at + 1);
  if (id === 2) {
    start = at;
    end = body + size;
    at = body;
    break;
  }
  at = body + size;
}
if (start < 0) fail(`${wasmPath} has no import section`);

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

const body = Buffer.concat([encodeLeb(count), ...entries]);
const section = Buffer.concat([Buffer.from([2]), encodeLeb(body.length), body]);
fs.writeFileSync(wasmPath, Buffer.concat([wasm.subarray(0, start), section, wasm.subarray(end)]));
fs.writeFileSync(jsPath, js);
console.log(`short-imports: ${renamed} imports renamed`);
