// viv_browser.mjs: what Viv (the loaders of vizarr and Fractal's viewer) reads of `roifs serve`
// (tests/e2e/test_serve_browser.py): Debian's chromium, driven by playwright-core (never a
// browser download), opens a page of another origin (VIEWER: a loopback server of this
// script's own) with @vivjs/loaders bundled by esbuild, in which Viv's loadOmeZarr opens
// served OME-Zarr multiscale images over HTTP (CORS) and reads whole levels with getRaster.
//   node viv_browser.mjs SERVER_URL '[{"path": "labels/seg", "level": 1}, ...]'
// prints one JSON line, a list of {"shape", "data", "dtype", "levels"}: what Viv read in the
// page, level `level` of the image at each path ("levels": how many levels Viv found).
import { createServer } from "node:http";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { chromium } from "playwright-core";

const [server, spec] = process.argv.slice(2);
if (!server || !spec) {
	console.error("usage: node viv_browser.mjs SERVER_URL IMAGES_JSON");
	process.exit(2);
}
const VIEWER_PORT = 8998;
const VIEWER = `http://localhost:${VIEWER_PORT}`;
const here = fileURLToPath(new URL(".", import.meta.url));
const bundle = (
	await build({
		stdin: {
			contents: 'import { loadOmeZarr } from "@vivjs/loaders"; window.loadOmeZarr = loadOmeZarr;',
			resolveDir: here,
			loader: "js",
		},
		bundle: true,
		format: "esm",
		platform: "browser",
		write: false,
		logLevel: "error",
	})
).outputFiles[0].text;
const page_html = `<!DOCTYPE html><html><head>
<script type="module" src="/viv.js"></script>
<script type="module">
try {
	const out = [];
	for (const { path, level } of ${JSON.stringify(JSON.parse(spec))}) {
		const url = ${JSON.stringify(server)} + (path ? "/" + path : "");
		const { data } = await window.loadOmeZarr(url, { type: "multiscales" });
		const source = data[level];
		const selection = {};
		for (const label of source.labels)
			if (label !== "y" && label !== "x") selection[label] = 0;
		const raster = await source.getRaster({ selection });
		out.push({
			data: Array.from(raster.data),
			shape: [raster.height, raster.width],
			dtype: source.dtype,
			levels: data.length,
		});
	}
	window.result = out;
} catch (e) {
	window.result = { error: String(e && e.stack || e) };
}
</script></head><body>viewer</body></html>`;

const viewer = createServer((req, res) => {
	const path = new URL(req.url, VIEWER).pathname;
	if (path === "/index.html") {
		res.writeHead(200, { "Content-Type": "text/html" });
		return res.end(page_html);
	}
	if (path === "/viv.js") {
		res.writeHead(200, { "Content-Type": "text/javascript" });
		return res.end(bundle);
	}
	res.writeHead(404);
	res.end();
});
await new Promise((ok) => viewer.listen(VIEWER_PORT, "127.0.0.1", ok));
const browser = await chromium.launch({
	executablePath: "/usr/bin/chromium",
	args: ["--no-sandbox", "--disable-gpu"],
});
try {
	const page = await browser.newPage();
	await page.goto(`${VIEWER}/index.html`);
	await page.waitForFunction(() => window.result !== undefined, null, { timeout: 30000 });
	const result = await page.evaluate(() => window.result);
	if (result.error) throw new Error(`Viv in the page: ${result.error}`);
	console.log(JSON.stringify(result));
} finally {
	await browser.close();
	viewer.close();
}
