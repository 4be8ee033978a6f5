// serve_browser.mjs: what a browser viewer does with `roifs serve` (tests/e2e/test_serve_browser.py):
// Debian's chromium, driven by playwright-core (never a browser download), opens a page of
// another origin (VIEWER: a loopback server of this script's own, serving this directory's
// node_modules with an import map) in which zarrita.js reads served arrays over HTTP (CORS);
// then, given GRID_PNG, it opens the status page and takes a screenshot of its chunk grid.
//   node serve_browser.mjs SERVER_URL '[{"path": "labels/seg/0", "row0": 0}, ...]' [GRID_PNG [PORT]]
// prints one JSON line, a list of {"shape", "data", "stride"}: what zarrita read in the page,
// rows row0.. of the array at each path. The page's origin is http://localhost:PORT (8999).
// A spec entry {"path", "tiles": [[cy, cx], ...], "pending": [[cy, cx], ...]} (2-d) asks for
// all those chunks at once, as a viewer asks for its tiles, draws each into a canvas when it
// arrives, and is done once the "tiles" are drawn (the "pending" ones need not arrive): its
// result is {"drawn": [{"tile", "at" (Date.now() once drawn), "data", "shape"}], "pending":
// the "pending" tiles not drawn by then}.
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { chromium } from "playwright-core";

const [server, spec, png, port] = process.argv.slice(2);
if (!server || !spec) {
	console.error("usage: node serve_browser.mjs SERVER_URL ARRAYS_JSON [GRID_PNG [PORT]]");
	process.exit(2);
}
const VIEWER_PORT = Number(port || 8999);
const VIEWER = `http://localhost:${VIEWER_PORT}`;
const modules = new URL("./node_modules/", import.meta.url);
const importmap = {
	imports: {
		zarrita: "/m/zarrita/dist/src/index.js",
		"@zarrita/storage/fetch": "/m/@zarrita/storage/dist/src/fetch.js",
		numcodecs: "/m/numcodecs/dist/index.js",
		"numcodecs/blosc": "/m/numcodecs/dist/blosc.js",
		"numcodecs/lz4": "/m/numcodecs/dist/lz4.js",
		"numcodecs/zstd": "/m/numcodecs/dist/zstd.js",
		fflate: "/m/fflate/esm/browser.js",
	},
};
const page_html = `<!DOCTYPE html><html><head>
<script type="importmap">${JSON.stringify(importmap)}</script>
<script type="module">
import * as zarr from "zarrita";
// one chunk [cy, cx] of a 2-d array, drawn (grey, one pixel a voxel) once it arrives
async function tile(arr, [cy, cx]) {
	const [h, w] = arr.chunks;
	const sel = [zarr.slice(cy * h, (cy + 1) * h), zarr.slice(cx * w, (cx + 1) * w)];
	const { data, shape } = await zarr.get(arr, sel);
	const canvas = document.createElement("canvas");
	[canvas.height, canvas.width] = shape;
	const rgba = new Uint8ClampedArray(4 * data.length);
	data.forEach((v, i) => rgba.set([v & 255, v & 255, v & 255, 255], 4 * i));
	canvas.getContext("2d").putImageData(new ImageData(rgba, shape[1], shape[0]), 0, 0);
	document.body.append(canvas);
	return { tile: [cy, cx], at: Date.now(), data: Array.from(data), shape };
}
try {
	const out = [];
	for (const { path, row0, tiles, pending } of ${JSON.stringify(JSON.parse(spec))}) {
		const url = ${JSON.stringify(server)} + (path ? "/" + path : "");
		const arr = await zarr.open(new zarr.FetchStore(url), { kind: "array" });
		if (tiles) {
			const late = new Set((pending || []).map(String));
			(pending || []).forEach((t) => tile(arr, t).then(() => late.delete(String(t)), () => {}));
			const drawn = await Promise.all(tiles.map((t) => tile(arr, t)));
			out.push({ drawn, pending: Array.from(late, (t) => t.split(",").map(Number)) });
			continue;
		}
		const sel = [zarr.slice(row0, null), ...arr.shape.slice(1).map(() => null)];
		const { data, shape, stride } = await zarr.get(arr, sel);
		out.push({ data: Array.from(data), shape, stride });
	}
	window.result = out;
} catch (e) {
	window.result = { error: String(e && e.stack || e) };
}
</script></head><body>viewer</body></html>`;

const viewer = createServer((req, res) => {
	const path = new URL(req.url, VIEWER).pathname;
	try {
		if (path === "/index.html") {
			res.writeHead(200, { "Content-Type": "text/html" });
			return res.end(page_html);
		}
		if (path.startsWith("/m/") && !path.includes("..")) {
			const body = readFileSync(new URL(path.slice(3), modules));
			res.writeHead(200, { "Content-Type": "text/javascript" });
			return res.end(body);
		}
	} catch {}
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
	await page.waitForFunction(() => window.result !== undefined, null, { timeout: 20000 });
	const result = await page.evaluate(() => window.result);
	if (result.error) throw new Error(`zarrita in the page: ${result.error}`);
	if (png) {
		const status = await browser.newPage();
		await status.goto(`${server}/`);
		await status.locator("#grid").screenshot({ path: png });
	}
	console.log(JSON.stringify(result));
} finally {
	await browser.close();
	viewer.close();
}
