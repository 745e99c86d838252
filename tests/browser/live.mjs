// The live page in a real browser (run.sh starts it): a scripted OpenAI-compatible upstream in this
// process, tokentap (debug build) in front of it with a 1 s snapshot interval, a fixed burst of streamed
// requests for two models, then Debian's chromium (driven with playwright-core over DevTools) opens the
// page. Once the page shows every request, its figures must equal what /metrics says for the same
// window (two scrapes: before the burst and after it; quantiles by Prometheus's histogram_quantile rule
// on the bucket deltas), the fleet table must show what a stand-in Prometheus answered, the browser
// console must have no error, and the page must fit a phone's width.
// Screenshots: target/browser/live.png (1280x800), live-dark.png, live-phone.png.
import { spawn } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
const OUT = path.join(ROOT, "target/browser");
const BINARY = process.env.TOKENTAP_BIN || path.join(ROOT, "target/debug/tokentap");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const MODELS = { "llama-8b": { ttft: [40, 620], gap: [8, 30] }, "qwen-32b": { ttft: [150, 900], gap: [20, 48] } };
const REQUESTS = 48;
const deadline = Date.now() + 150_000;

function fail(message) {
  console.error("FAIL: " + message);
  process.exitCode = 1;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A small deterministic generator: the same burst every run.
let seed = 0x2545f491;
function rand(lo, hi) {
  seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5;
  return lo + ((seed >>> 0) % (hi - lo + 1));
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

// The scripted upstream: /v1/chat/completions streams `tokens` chunks, the first after `ttft` ms, then one
// every `gap` ms, a usage chunk and [DONE]; the plan rides in the request body. GET /v1/models lists the
// two models, as a model server does (tokentap asks for the list in the background to admit model labels).
function upstream() {
  const server = http.createServer((req, res) => {
    if (req.method === "GET") {
      req.resume();
      if (req.url === "/v1/models") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ object: "list", data: Object.keys(MODELS).map((id) => ({ id, object: "model" })) }));
      } else {
        res.writeHead(404);
        res.end();
      }
      return;
    }
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", async () => {
      const r = JSON.parse(body);
      const plan = r.plan;
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      const chunk = (delta, extra) => "data: " + JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: r.model,
        choices: delta ? [{ index: 0, delta, finish_reason: null }] : [], ...extra }) + "\n\n";
      res.write(chunk({ role: "assistant", content: "" }));
      await sleep(plan.ttft);
      for (let i = 0; i < plan.tokens; i++) {
        if (i > 0) await sleep(plan.gaps[i - 1]);
        res.write(chunk({ content: " tok" + i }));
      }
      res.write(chunk(null, { usage: { prompt_tokens: 12, completion_tokens: plan.tokens, total_tokens: 12 + plan.tokens } }));
      res.end("data: [DONE]\n\n");
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

// A stand-in Prometheus for the page's fleet table (ui.prometheus): every instant query answers
// llama-8b worth 0.875 and a model whose name is markup, which the table must show as text.
const HOSTILE = '<img src=x onerror="document.body.dataset.owned=1">';
function prometheus() {
  const server = http.createServer((req, res) => {
    req.resume();
    const result = ["llama-8b", HOSTILE].map((model) => ({ metric: { model }, value: [1764752442.5, "0.875"] }));
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ status: "success", data: { resultType: "vector", result } }));
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

function send(proxyPort, model, plan) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ model, stream: true, stream_options: { include_usage: true }, messages: [{ role: "user", content: "hi" }], plan });
    const req = http.request({ host: "127.0.0.1", port: proxyPort, path: "/v1/chat/completions", method: "POST",
      headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) } }, (res) => {
      res.resume();
      res.on("end", () => (res.statusCode === 200 ? resolve() : reject(new Error("status " + res.statusCode))));
    });
    req.on("error", reject);
    req.end(body);
  });
}

async function get(url) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(url + ": " + res.status);
  return res.text();
}

// Sums a family's samples per model (over every other label but `le`): {model: {le: value}} for buckets,
// {model: value} otherwise.
function parse(text, name, byLe) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line.startsWith(name + "{")) continue;
    const m = line.match(/^[^{]+\{(.*)\} (\S+)$/);
    if (!m) continue;
    const labels = Object.fromEntries([...m[1].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    const v = Number(m[2]);
    if (byLe) {
      const model = (out[labels.model] ||= {});
      model[labels.le] = (model[labels.le] || 0) + v;
    } else {
      out[labels.model] = (out[labels.model] || 0) + v;
    }
  }
  return out;
}

// Prometheus's histogram_quantile (promql/quantile.go bucketQuantile) on {le: cumulative} deltas.
function histogramQuantile(q, cumulative) {
  const buckets = Object.entries(cumulative).map(([le, c]) => [le === "+Inf" ? Infinity : Number(le), c]).sort((a, b) => a[0] - b[0]);
  if (buckets.length < 2 || buckets[buckets.length - 1][0] !== Infinity) return null;
  const total = buckets[buckets.length - 1][1];
  if (total === 0) return null;
  const rank = q * total;
  let b = buckets.findIndex(([, c], i) => i < buckets.length - 1 && c >= rank);
  if (b < 0) b = buckets.length - 1;
  if (b === buckets.length - 1) return buckets[buckets.length - 2][0];
  if (b === 0 && buckets[0][0] <= 0) return buckets[0][0];
  let start = 0, count = buckets[b][1], r = rank;
  if (b > 0) { start = buckets[b - 1][0]; count -= buckets[b - 1][1]; r -= buckets[b - 1][1]; }
  return start + (buckets[b][0] - start) * (r / count);
}

function minus(after, before) {
  const out = {};
  for (const [k, v] of Object.entries(after)) out[k] = typeof v === "object" ? minus(v, before[k] || {}) : v - (before[k] || 0);
  return out;
}

function close(label, got, want, tolerance = 1e-9) {
  const ok = got != null && want != null && Math.abs(got - want) <= tolerance * Math.max(1, Math.abs(want));
  // (sums print with 17 significant digits; 1e-9 relative is far below any figure shown)
  console.log(`${ok ? "ok  " : "FAIL"} ${label}: page ${got}, /metrics ${want}`);
  if (!ok) process.exitCode = 1;
}

async function main() {
  mkdirSync(OUT, { recursive: true });
  const up = await upstream();
  const prom = await prometheus();
  const [proxyPort, metricsPort] = [await freePort(), await freePort()];
  const config = path.join(os.tmpdir(), `tokentap-browser-${process.pid}.yaml`);
  writeFileSync(config, [
    `listen: 127.0.0.1:${proxyPort}`, `metrics_listen: 127.0.0.1:${metricsPort}`,
    `upstream: http://127.0.0.1:${up.address().port}`, "tokenizer_dirs: []",
    "slo: {ttft: 500ms, itl: 50ms, models: {qwen-32b: {ttft: 750ms}}}",
    `ui: {interval: 1s, history: 5m, window: 5m, prometheus: "http://127.0.0.1:${prom.address().port}"}`, ""].join("\n"));
  const proc = spawn(BINARY, ["--config", config], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  proc.stderr.on("data", (d) => (log += d));
  const base = `http://127.0.0.1:${metricsPort}`;
  let browser;
  try {
    while (true) {
      try { await get(base + "/healthz"); break; } catch { if (Date.now() > deadline - 120_000) throw new Error("tokentap did not start:\n" + log); await sleep(100); }
    }
    const before = await get(base + "/metrics");
    // The burst: four clients, each request's plan drawn from its model's ranges.
    const plans = [];
    for (let i = 0; i < REQUESTS; i++) {
      const model = i % 3 === 2 ? "qwen-32b" : "llama-8b";
      const m = MODELS[model];
      const tokens = rand(6, 16);
      plans.push([model, { ttft: rand(...m.ttft), tokens, gaps: Array.from({ length: tokens }, () => rand(...m.gap)) }]);
    }
    const sent = {};
    for (const [model] of plans) sent[model] = (sent[model] || 0) + 1;
    const queue = plans.slice();
    await Promise.all([0, 1, 2, 3].map(async () => { while (queue.length) { const [model, plan] = queue.shift(); await send(proxyPort, model, plan); } }));

    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
    const errors = [];
    const watch = (page) => {
      page.on("console", (msg) => { if (msg.type() === "error") errors.push(msg.text()); });
      page.on("pageerror", (err) => errors.push(String(err)));
      page.on("requestfailed", (r) => errors.push("request failed: " + r.url()));
    };
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    watch(page);
    await page.goto(base + "/", { waitUntil: "load" });
    // Charts fill as snapshots arrive: wait until the page counts every request, and a few points more.
    const figure = (model, key) => page.locator(`section[data-model="${model}"][data-tenant=""] [data-figure="${key}"]`).getAttribute("data-value");
    for (;;) {
      const counts = await Promise.all(Object.keys(sent).map((m) => figure(m, "requests").catch(() => null)));
      const points = Number(await page.locator("body").getAttribute("data-points"));
      if (Object.keys(sent).every((m, i) => Number(counts[i]) === sent[m]) && points >= 3) break;
      if (Date.now() > deadline) throw new Error("the page never showed every request: " + JSON.stringify(counts));
      await sleep(500);
    }
    const after = await get(base + "/metrics");
    // Every figure of the page read at one instant (one task of the page's event loop), so no refresh
    // falls between two of them.
    const shown = await page.evaluate(() => {
      const out = {};
      for (const section of document.querySelectorAll('section[data-tenant=""]')) {
        const figures = { seconds: section.dataset.seconds };
        for (const n of section.querySelectorAll("[data-figure]")) figures[n.dataset.figure] = n.dataset.value;
        out[section.dataset.model] = figures;
      }
      return out;
    });

    const ttftAfter = minus(parse(after, "tokentap_time_to_first_token_seconds_bucket", true), parse(before, "tokentap_time_to_first_token_seconds_bucket", true));
    const itlAfter = minus(parse(after, "tokentap_inter_token_latency_seconds_bucket", true), parse(before, "tokentap_inter_token_latency_seconds_bucket", true));
    const requests = minus(parse(after, "tokentap_requests_total"), parse(before, "tokentap_requests_total"));
    const goodput = minus(parse(after, "tokentap_goodput_requests_total"), parse(before, "tokentap_goodput_requests_total"));
    const output = minus(parse(after, "tokentap_output_tokens_total"), parse(before, "tokentap_output_tokens_total"));
    for (const model of Object.keys(sent)) {
      const num = (key) => { const v = (shown[model] || {})[key]; return v === "" || v == null ? null : Number(v); };
      const seconds = num("seconds");
      close(`${model} requests in window`, num("requests"), requests[model]);
      close(`${model} requests`, requests[model], sent[model]);
      close(`${model} TTFT p50`, num("ttft_p50"), histogramQuantile(0.5, ttftAfter[model]));
      close(`${model} TTFT p99`, num("ttft_p99"), histogramQuantile(0.99, ttftAfter[model]));
      close(`${model} time to first answer p50`, num("ttfa_p50"), histogramQuantile(0.5, minus(parse(after, "tokentap_time_to_first_answer_token_seconds_bucket", true), parse(before, "tokentap_time_to_first_answer_token_seconds_bucket", true))[model]));
      close(`${model} ITL p50`, num("itl_p50"), histogramQuantile(0.5, itlAfter[model]));
      close(`${model} TPOT p50`, num("tpot_p50"), histogramQuantile(0.5, minus(parse(after, "tokentap_time_per_output_token_seconds_bucket", true), parse(before, "tokentap_time_per_output_token_seconds_bucket", true))[model]));
      const sum = (name) => minus(parse(after, name), parse(before, name))[model];
      close(`${model} TTFT mean`, num("ttft_mean"), sum("tokentap_time_to_first_token_seconds_sum") / sum("tokentap_time_to_first_token_seconds_count"));
      close(`${model} goodput ratio`, num("goodput_ratio"), goodput[model] / requests[model]);
      // Rates: the window's count over the seconds its two snapshots lie apart (the page says how many).
      close(`${model} requests/s`, num("requests_per_second"), requests[model] / seconds);
      close(`${model} output tokens/s`, num("output_tokens_per_second"), output[model] / seconds);
    }
    // The window selector asks for another window and keeps it in the address.
    await page.selectOption("#window", "60s");
    await page.waitForFunction(() => document.body.dataset.window === "60" && location.search.includes("window=60s"), null, { timeout: 10_000 });
    console.log("ok   window selector: figures over 60 s, kept in the address");
    // The fleet's table, from the stand-in Prometheus: a row a model, each figure in its unit, and a
    // name that is markup shown as text.
    await page.waitForFunction(() => document.body.dataset.fleet === "2", null, { timeout: 15_000 });
    const fleet = await page.evaluate(() => {
      const rows = [...document.querySelectorAll("#fleet tbody tr")].map((tr) => [...tr.cells].map((td) => td.textContent));
      const header = [...document.querySelectorAll("#fleet thead th")].map((th) => th.textContent);
      return { rows, header, meta: document.getElementById("fleet-meta").textContent,
        markup: document.querySelectorAll("#fleet img").length, owned: document.body.dataset.owned || "" };
    });
    const llama = fleet.rows.find((r) => r[0] === "llama-8b") || [];
    const cell = (h) => llama[fleet.header.indexOf(h)];
    const fleetOk = fleet.rows.length === 2 && cell("GOODPUT") === "87.5%" && cell("TTFT99") === "875 ms" && cell("REQ/S") === "0.88" &&
      fleet.rows.some((r) => r[0] === HOSTILE) && fleet.markup === 0 && fleet.owned === "" && fleet.meta.startsWith("0.875/0.875 targets up");
    console.log(`${fleetOk ? "ok  " : "FAIL"} fleet table: ${JSON.stringify(fleet)}`);
    if (!fleetOk) process.exitCode = 1;
    const canvases = await page.locator("canvas").count();
    console.log(`${canvases >= 23 ? "ok  " : "FAIL"} charts drawn: ${canvases} canvases`);
    if (canvases < 23) process.exitCode = 1;
    await page.screenshot({ path: path.join(OUT, "live.png") });
    await page.screenshot({ path: path.join(OUT, "live-full.png"), fullPage: true });

    const dark = await browser.newPage({ viewport: { width: 1280, height: 800 }, colorScheme: "dark" });
    watch(dark);
    await dark.goto(base + "/", { waitUntil: "load" });
    await dark.locator('[data-figure="requests"]').first().waitFor();
    await sleep(1500);
    await dark.screenshot({ path: path.join(OUT, "live-dark.png") });
    // Both schemes: a dark page under prefers-color-scheme: dark, a light one otherwise.
    const brightness = (p) => p.evaluate(() => getComputedStyle(document.body).backgroundColor.match(/\d+/g).slice(0, 3).reduce((a, b) => a + Number(b), 0));
    const [lightBg, darkBg] = [await brightness(page), await brightness(dark)];
    const schemes = lightBg > 600 && darkBg < 150;
    console.log(`${schemes ? "ok  " : "FAIL"} colour schemes: light background ${lightBg}, dark ${darkBg} (sum of RGB)`);
    if (!schemes) process.exitCode = 1;

    const phone = await browser.newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
    watch(phone);
    await phone.goto(base + "/", { waitUntil: "load" });
    await phone.locator('[data-figure="requests"]').first().waitFor();
    await sleep(1500);
    const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    console.log(`${overflow <= 0 ? "ok  " : "FAIL"} phone: no sideways scrolling (overflow ${overflow}px)`);
    if (overflow > 0) process.exitCode = 1;
    await phone.screenshot({ path: path.join(OUT, "live-phone.png") });

    console.log(`${errors.length === 0 ? "ok  " : "FAIL"} browser console: ${errors.length} error(s)${errors.length ? "\n  " + errors.join("\n  ") : ""}`);
    if (errors.length) process.exitCode = 1;
    console.log("screenshots: " + OUT);
  } finally {
    if (browser) await browser.close();
    proc.kill("SIGTERM");
    up.close();
    prom.close();
    rmSync(config, { force: true });
  }
}

const guard = setTimeout(() => { fail("timed out"); process.exit(1); }, 170_000);
main().then(() => clearTimeout(guard), (err) => { clearTimeout(guard); fail(err.stack || String(err)); process.exit(1); });
