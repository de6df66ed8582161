// The last step of the page's build (scripts/split-wasm.sh runs it on Trunk's staging folder, and
// the e2e run on the copies it derives): after every rewrite of the files, so the hashes match
// what is served.
//  - Subresource integrity (sha384, https://www.w3.org/TR/SRI/) on the stylesheet and the module
//    preloads, with crossorigin="anonymous" (integrity needs a CORS response: the page may run in a
//    sandboxed frame, where every fetch is cross-origin). The main module is imported by the page's
//    module script and the split loader by the main module: both come from the module map their
//    preload filled, so the checked copies are the ones that run.
//  - The Content-Security-Policy <meta> of index.html gets the sha256 of each inline script in its
//    script-src (https://www.w3.org/TR/CSP3/#grammardef-hash-source), so no other inline code runs.
//    The policy: only this origin's code runs (the inline scripts by hash, the wasm by
//    'wasm-unsafe-eval'), no <style> element, no plugins, no <base>, no form posts; Hugging Face only
//    to fetch a model's config.json. A <meta> policy can neither report nor set frame-ancestors:
//    the e2e run fails on any violation instead, and the embed card is meant to work anywhere.
//    Style attributes stay allowed (style-src-attr): plotters measures a text for the SVG export
//    by giving a <span> its font in one (plotters' web font backend), and an attribute can load
//    nothing beyond what default-src allows.
//   node scripts/seal.mjs DIR
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const digest = (algo, bytes) => `${algo}-${createHash(algo).update(bytes).digest('base64')}`;

/** Seals `dir`/index.html; returns the number of integrity attributes and inline-script hashes. */
export function seal(dir) {
  const page = join(dir, 'index.html');
  let html = readFileSync(page, 'utf8');
  let sri = 0;
  html = html.replace(/<link\b[^>]*>/g, (tag) => {
    if (!/\brel="(stylesheet|modulepreload)"/.test(tag)) return tag;
    const href = /\bhref="\.?\/?([^"?#]+)"/.exec(tag)?.[1];
    if (!href) throw new Error(`seal: ${tag} has no local href`);
    sri++;
    const bare = tag.replace(/\s+(integrity|crossorigin|data-integrity)="[^"]*"/g, '').replace(/\s*\/?>$/, '');
    return `${bare} crossorigin="anonymous" integrity="${digest('sha384', readFileSync(join(dir, href)))}">`;
  });
  const hashes = [...html.matchAll(/<script\b(?![^>]*\bsrc=)[^>]*>([\s\S]*?)<\/script>/g)].map((m) => `'${digest('sha256', Buffer.from(m[1], 'utf8'))}'`);
  let policies = 0;
  html = html.replace(/(<meta http-equiv="Content-Security-Policy" content="[^"]*script-src 'self')((?: 'sha256-[^']+')*)/g, (_, head) => {
    policies++;
    return `${head} ${hashes.join(' ')}`;
  });
  if (policies !== 1) throw new Error(`seal: index.html has ${policies} Content-Security-Policy metas with script-src 'self', not 1`);
  if (/<meta http-equiv="Content-Security-Policy"/.test(html.slice(html.search(/<script\b/)))) {
    throw new Error('seal: the Content-Security-Policy meta must come before the first script');
  }
  writeFileSync(page, html);
  return { sri, scripts: hashes.length };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { sri, scripts } = seal(process.argv[2] ?? 'dist');
  console.log(`seal: integrity on ${sri} files, ${scripts} inline scripts hashed`);
}
