// VRAM Planner's service worker: keeps the app usable offline after one visit.
// Trunk content-hashes the wasm, JS and CSS, so the page itself names every asset: at install the
// worker reads index.html and caches what it links to. Navigations go to the network first (a
// new deploy shows at once) and fall back to the cached page; assets are served from the cache
// first, since a hashed name never changes content. After each fresh page the cache is pruned to
// what that page links, so old builds do not pile up.
const CACHE = 'vram-planner';
const INDEX = new URL('./', self.registration.scope).href;
const INDEX_PATHS = [new URL(INDEX).pathname, new URL('index.html', INDEX).pathname];
const EXTRA = ['manifest.webmanifest', 'icon.svg', 'icon-192.png', 'icon-512.png'];

/** Same-origin URLs that `html` links to (href/src attributes), plus the page and the extras. */
function assetsOf(html) {
  const urls = new Set([INDEX]);
  for (const path of EXTRA) urls.add(new URL(path, INDEX).href);
  for (const m of html.matchAll(/\b(?:href|src)\s*=\s*["']([^"'#?]+)["']/g)) {
    const url = new URL(m[1], INDEX);
    if (url.origin === self.location.origin) urls.add(url.href);
  }
  return urls;
}

/** Caches the page `res` and every asset it links to; drops what it no longer links to. */
async function keep(res) {
  const html = await res.clone().text();
  const cache = await caches.open(CACHE);
  const wanted = assetsOf(html);
  await cache.put(INDEX, res);
  const missing = [];
  for (const url of wanted) {
    if (url !== INDEX && !(await cache.match(url))) missing.push(url);
  }
  await cache.addAll(missing);
  for (const req of await cache.keys()) {
    if (!wanted.has(req.url)) await cache.delete(req);
  }
}

self.addEventListener('install', (event) => {
  event.waitUntil(fetch(INDEX, { cache: 'no-cache' }).then(keep).then(() => self.skipWaiting()));
});

self.addEventListener('activate', (event) => {
  event.waitUntil(self.clients.claim());
});

self.addEventListener('fetch', (event) => {
  const req = event.request;
  if (req.method !== 'GET' || new URL(req.url).origin !== self.location.origin) return;
  if (req.mode === 'navigate') {
    event.respondWith(
      fetch(req)
        .then((res) => {
          const page = INDEX_PATHS.includes(new URL(req.url).pathname);
          if (res.ok && page) event.waitUntil(keep(res.clone()).catch(() => {}));
          return res;
        })
        .catch(async () => (await caches.match(INDEX)) || Response.error()),
    );
    return;
  }
  event.respondWith(
    caches.match(req, { ignoreSearch: true }).then(
      (hit) =>
        hit ||
        fetch(req).then(async (res) => {
          if (res.ok) await (await caches.open(CACHE)).put(req, res.clone());
          return res;
        }),
    ),
  );
});
