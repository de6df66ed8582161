// VRAM Planner's service worker: keeps the app usable offline after one visit, and keeps a tab
// working across deploys.
// Trunk content-hashes the wasm, JS and CSS, so the page itself names every asset: the worker
// reads index.html and caches what it links to, one cache per build (a build is named by its
// page's hash). Navigations go to the network first (a new deploy shows at once) and fall back
// to the newest cached page; assets are served from the cache first, since a hashed name never
// changes content. A deploy replaces every file on the server, while a tab opened before it still
// fetches its own build's lazily loaded chunks: so a build's cache is dropped only once no open
// tab uses it (each tab's build is remembered from its page or the first asset it fetched), and
// a tab on an older build is told a newer one is ready ('update', see index.html).
const PREFIX = 'vram-planner';
const STATE = 'vram-planner:state';
const INDEX = new URL('./', self.registration.scope).href;
// The state's key in its cache (never fetched).
const STATE_KEY = new URL('sw-state', INDEX).href;
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

/** The cache of the build whose page is `html`. */
async function buildOf(html) {
  const hash = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(html));
  return `${PREFIX}@${[...new Uint8Array(hash, 0, 8)].map((b) => b.toString(16).padStart(2, '0')).join('')}`;
}

// What the worker remembers across restarts: the newest build and each tab's build.
let state;
function load() {
  state ??= caches
    .open(STATE)
    .then((c) => c.match(STATE_KEY))
    .then((r) => (r ? r.json() : null))
    .then((s) => s ?? { current: null, clients: {} });
  return state;
}
async function save() {
  await (await caches.open(STATE)).put(STATE_KEY, new Response(JSON.stringify(await load())));
}
async function assign(clientId, build) {
  const s = await load();
  if (!clientId || s.clients[clientId] === build) return;
  s.clients[clientId] = build;
  await save();
}

/** Caches the page `res` of build `build` and every asset it links to, then makes it the newest. */
async function keep(res, build) {
  const html = await res.clone().text();
  const cache = await caches.open(build);
  const missing = [];
  for (const url of assetsOf(html)) {
    if (url === INDEX || (await cache.match(url))) continue;
    // The files a deploy did not change (icons, manifest) come from an older build's cache.
    const old = await caches.match(url);
    if (old) await cache.put(url, old);
    else missing.push(url);
  }
  await cache.addAll(missing);
  // The page last: a cache with a page holds the whole build.
  await cache.put(INDEX, res);
  (await load()).current = build;
  await save();
  await prune();
  await notify(build);
}

/** Drops the caches of builds no open tab uses (all are kept while a tab's build is unknown). */
async function prune() {
  const s = await load();
  const open = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  const ids = new Set(open.map((c) => c.id));
  for (const id of Object.keys(s.clients)) if (!ids.has(id)) delete s.clients[id];
  await save();
  if (open.some((c) => !s.clients[c.id])) return;
  const used = new Set([s.current, ...Object.values(s.clients)]);
  for (const name of await caches.keys()) {
    if (name.startsWith(PREFIX) && name !== STATE && !used.has(name)) await caches.delete(name);
  }
}

/** Tells each tab on a build older than `build` that `build` is ready. */
async function notify(build) {
  const s = await load();
  for (const c of await self.clients.matchAll({ type: 'window' })) {
    if (s.clients[c.id] && s.clients[c.id] !== build) c.postMessage('update');
  }
}

/** Fetches the page; caches its build if it is a new one, else drops builds no tab uses. */
async function check() {
  const res = await fetch(INDEX, { cache: 'no-cache' });
  if (!res.ok) return;
  const build = await buildOf(await res.clone().text());
  if (build !== (await load()).current || !(await (await caches.open(build)).match(INDEX))) await keep(res, build);
  else await prune();
}

/** The cached response for `req`: from the build of the tab that asks first, else any build. */
async function cached(req, clientId) {
  const own = (await load()).clients[clientId];
  const names = await caches.keys();
  for (const name of own ? [own, ...names] : names) {
    if (!name.startsWith(PREFIX) || name === STATE) continue;
    const hit = await (await caches.open(name)).match(req, { ignoreSearch: true });
    if (hit) {
      if (!own) await assign(clientId, name);
      return hit;
    }
  }
  return null;
}

self.addEventListener('install', (event) => {
  event.waitUntil(check().then(() => self.skipWaiting()));
});

self.addEventListener('activate', (event) => {
  event.waitUntil(self.clients.claim());
});

// From a page (index.html): the URL of its main module, which names its build, and whether to
// look for a new deploy.
self.addEventListener('message', (event) => {
  const { page, check: look } = event.data ?? {};
  if (typeof page !== 'string' || !event.source) return;
  event.waitUntil(
    cached(new Request(page), event.source.id)
      .then(() => look && check())
      .catch(() => {}),
  );
});

async function navigate(event) {
  const req = event.request;
  try {
    const res = await fetch(req);
    if (res.ok && INDEX_PATHS.includes(new URL(req.url).pathname)) {
      const build = await buildOf(await res.clone().text());
      await assign(event.resultingClientId, build);
      event.waitUntil(keep(res.clone(), build).catch(() => {}));
    }
    return res;
  } catch (e) {
    const s = await load();
    const page = s.current && (await (await caches.open(s.current)).match(INDEX));
    if (!page) return Response.error();
    await assign(event.resultingClientId, s.current);
    return page;
  }
}

async function asset(event) {
  const req = event.request;
  const hit = await cached(req, event.clientId);
  if (hit) return hit;
  const res = await fetch(req);
  if (res.ok) {
    const s = await load();
    const build = s.clients[event.clientId] ?? s.current;
    if (build) await (await caches.open(build)).put(req, res.clone());
  }
  return res;
}

self.addEventListener('fetch', (event) => {
  const req = event.request;
  if (req.method !== 'GET' || new URL(req.url).origin !== self.location.origin) return;
  event.respondWith(req.mode === 'navigate' ? navigate(event) : asset(event));
});
