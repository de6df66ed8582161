// A tiny static server for dist/, mounted under a sub-path as GitHub Pages serves a project
// site (https://user.github.io/vram-planner/). Only GET/HEAD of files inside the root. Like Pages
// it sends text and wasm gzipped to a browser that accepts it.
import { createServer } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import { extname, join, normalize, resolve, sep } from 'node:path';

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.wasm': 'application/wasm',
  '.json': 'application/json',
  '.webmanifest': 'application/manifest+json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
};

/**
 * Serves `root` at http://127.0.0.1:<port, a free one by default><base>. Resolves to
 * { origin, url, port, deploy, close }. `deploy(dir)` serves another folder from then on, as a
 * deploy replaces every file. `close()` also drops kept-alive connections, so a stopped server
 * really is gone.
 */
export async function serve(root, base = '/vram-planner/', port = 0) {
  let top = resolve(root);
  const server = createServer(async (req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'method not allowed');
    if (path === base.slice(0, -1)) return send(res, 301, '', { location: base });
    if (!path.startsWith(base)) return send(res, 404, 'not found');
    let file = normalize(join(top, path.slice(base.length)));
    if (file !== top && !file.startsWith(top + sep)) return send(res, 403, 'forbidden');
    try {
      if ((await stat(file)).isDirectory()) file = join(file, 'index.html');
      const type = TYPES[extname(file)] ?? 'application/octet-stream';
      const gzip = /\bgzip\b/.test(req.headers['accept-encoding'] ?? '') && !type.startsWith('image/png');
      const body = gzip ? await gzipped(file) : await readFile(file);
      send(res, 200, req.method === 'HEAD' ? '' : body, {
        'content-type': type,
        'cache-control': 'no-cache',
        // As GitHub Pages sends: a sandboxed frame (an opaque origin) may then load the page's
        // module scripts and wasm, which are fetched in CORS mode.
        'access-control-allow-origin': '*',
        ...(gzip ? { 'content-encoding': 'gzip', vary: 'accept-encoding' } : {}),
      });
    } catch {
      send(res, 404, 'not found');
    }
  });
  await new Promise((ok) => server.listen(port, '127.0.0.1', ok));
  const origin = `http://127.0.0.1:${server.address().port}`;
  return {
    origin,
    url: origin + base,
    port: server.address().port,
    deploy: (dir) => {
      top = resolve(dir);
    },
    close: () =>
      new Promise((ok) => {
        server.close(ok);
        server.closeAllConnections();
      }),
  };
}

/** Serves one HTML page at http://`host`:<free port>/: another origin than `serve`'s. Resolves to
 * { url, close }. */
export async function servePage(html, host = '127.0.0.2') {
  const server = createServer((req, res) => send(res, 200, req.method === 'HEAD' ? '' : html, { 'content-type': 'text/html; charset=utf-8' }));
  await new Promise((ok) => server.listen(0, host, ok));
  return {
    url: `http://${host}:${server.address().port}/`,
    close: () =>
      new Promise((ok) => {
        server.close(ok);
        server.closeAllConnections();
      }),
  };
}

/** A file gzipped (level 6, as servers use on the fly), kept while the file is unchanged. */
const zipped = new Map();
async function gzipped(file) {
  const { mtimeMs, size } = await stat(file);
  const key = `${file}:${mtimeMs}:${size}`;
  if (!zipped.has(key)) zipped.set(key, gzipSync(await readFile(file), { level: 6 }));
  return zipped.get(key);
}

function send(res, status, body, headers = {}) {
  res.writeHead(status, headers);
  res.end(body);
}
