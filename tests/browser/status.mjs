// The status page in headless Chromium (Debian's package), driven with
// playwright-core: it must show every provider and charts with live
// numbers, on a wide and a narrow screen. Screenshots go to OUT_DIR.
//
// Usage: node status.mjs BASE_URL OUT_DIR
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const [base, outDir] = process.argv.slice(2);
if (!base || !outDir) {
  console.error("usage: node status.mjs BASE_URL OUT_DIR");
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });
const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const browser = await chromium.launch({
  executablePath,
  args: ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});

function check(cond, what) {
  if (!cond) {
    console.error("FAILED: " + what);
    process.exitCode = 1;
  } else {
    console.log("ok: " + what);
  }
}

try {
  for (const [name, viewport] of [["wide", { width: 1280, height: 900 }], ["narrow", { width: 390, height: 844 }]]) {
    const page = await browser.newPage({ viewport });
    await page.goto(base + "/", { waitUntil: "load" });
    await page.waitForSelector("body[data-ready='1']", { timeout: 15000 });
    // Let a couple of refreshes happen while the demo sends traffic.
    await page.waitForTimeout(4500);
    const providers = await page.$$eval(".provider", (els) => els.map((e) => e.dataset.provider));
    check(["groq", "gemini", "claude"].every((p) => providers.includes(p)), `${name}: providers rendered (${providers.join(", ")})`);
    const outcomes = await page.$$eval(".provider .outcomes", (els) => els.map((e) => e.textContent));
    check(outcomes.some((t) => /\d+ ok/.test(t) && !t.startsWith("0 ok")), `${name}: live outcome counts (${outcomes.join(" | ")})`);
    const points = await page.$eval("#rate", (svg) => Number(svg.dataset.points || "0"));
    check(points > 0, `${name}: the request-rate chart has data (${points} points)`);
    const lines = await page.$$eval("#rate path", (ps) => ps.length);
    check(lines > 0, `${name}: one line per serving provider (${lines})`);
    const fallback = await page.$eval("#fallback-now", (e) => e.textContent);
    check(/^\d+%$/.test(fallback), `${name}: the fallback rate is a live number (${fallback})`);
    const ready = await page.$$eval("#readiness tr", (rs) => rs.map((r) => r.textContent));
    check(ready.length > 0 && ready.every((t) => !/not ready/.test(t)), `${name}: each target's readiness is shown (${ready.join(" | ")})`);
    const rows = await page.$$eval("#events tr", (rs) => rs.length);
    check(rows > 0, `${name}: the last events are listed (${rows})`);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(overflow <= 1, `${name}: no horizontal overflow (${overflow}px)`);
    await page.screenshot({ path: `${outDir}/status-${name}.png`, fullPage: true });
    console.log(`screenshot: ${outDir}/status-${name}.png`);
    await page.close();
  }
} finally {
  await browser.close();
}
