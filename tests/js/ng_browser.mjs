// ng_browser.mjs: what Neuroglancer draws of `roifs serve` (tests/e2e/test_serve_browser.py).
// Neuroglancer 2.41 from npm (its viewer, its chunk worker and its async computation worker,
// each bundled by esbuild into OUT_DIR) runs in Debian's chromium, driven by playwright-core
// (never a browser download; WebGL2 on SwiftShader), in a page of another origin (VIEWER: a
// loopback server of this script's own). For each served array asked for, a zarr2:// image
// layer in an xy cross-section, 4 screen pixels a voxel (crossSectionScale 0.25), grey from 0 to
// `max` (an invlerp shader) on a magenta background; the data panel's screenshot, once it no
// longer changes, is written to OUT_DIR/ng-N.png.
//   node ng_browser.mjs SERVER_URL '[{"path": "labels/seg/1", "max": 9}, ...]' OUT_DIR PORT
// prints one JSON line, a list of {"png", "scale"}. Neuroglancer shows an array's first
// dimension across the screen and its second down it.
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { chromium } from "playwright-core";

const [server, spec, outdir, port] = process.argv.slice(2);
if (!server || !spec || !outdir || !port) {
	console.error("usage: node ng_browser.mjs SERVER_URL ARRAYS_JSON OUT_DIR PORT");
	process.exit(2);
}
const SCALE = 4;
const VIEWER = `http://localhost:${port}`;
const here = fileURLToPath(new URL(".", import.meta.url));
const require = createRequire(import.meta.url);
// Neuroglancer imports its icons as `NAME.svg?raw` (its own bundler's convention): their text;
// the three that ikonate from npm lacks (its build takes them from GitHub) are drawn blank.
const raw = {
	name: "raw",
	setup(b) {
		b.onResolve({ filter: /\?raw$/ }, (a) => ({
			path: a.path.slice(0, -4),
			namespace: "raw",
			pluginData: a.resolveDir,
		}));
		b.onLoad({ filter: /.*/, namespace: "raw" }, (a) => {
			let text = '<svg xmlns="http://www.w3.org/2000/svg"></svg>';
			try {
				text = readFileSync(require.resolve(a.path, { paths: [a.pluginData] }), "utf8");
			} catch {}
			return { contents: text, loader: "text" };
		});
	},
};
const entries = ["main.bundle", "chunk_worker.bundle", "async_computation.bundle"];
await build({
	entryPoints: Object.fromEntries(entries.map((e) => [e, `neuroglancer/unstable/${e}.js`])),
	absWorkingDir: here,
	bundle: true,
	format: "esm",
	platform: "browser",
	outdir,
	logLevel: "error",
	plugins: [raw],
	loader: { ".svg": "text", ".wasm": "file", ".png": "file" },
});
const page_html = `<!DOCTYPE html><html><head><link rel="stylesheet" href="/main.bundle.css">
<style>body { margin: 0 }</style></head><body><div id="neuroglancer-container"></div>
<script type="module" src="/main.bundle.js"></script></body></html>`;

const viewer = createServer((req, res) => {
	const path = new URL(req.url, VIEWER).pathname;
	if (path === "/" || path === "/index.html") {
		res.writeHead(200, { "Content-Type": "text/html" });
		return res.end(page_html);
	}
	// the workers are asked for next to the main bundle, or one directory up
	const name = path.split("/").pop();
	if (/^[a-z_]+\.bundle\.(js|css)$/.test(name)) {
		try {
			const body = readFileSync(`${outdir}/${name}`);
			res.writeHead(200, { "Content-Type": name.endsWith(".css") ? "text/css" : "text/javascript" });
			return res.end(body);
		} catch {}
	}
	res.writeHead(404);
	res.end();
});
await new Promise((ok) => viewer.listen(Number(port), "127.0.0.1", ok));
const browser = await chromium.launch({
	executablePath: "/usr/bin/chromium",
	args: ["--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--ignore-gpu-blocklist"],
});
try {
	const page = await browser.newPage({ viewport: { width: 600, height: 500 } });
	const errors = [];
	page.on("pageerror", (e) => errors.push(String(e)));
	const out = [];
	for (const [i, { path, max }] of JSON.parse(spec).entries()) {
		const state = {
			layers: [
				{
					type: "image",
					name: "served",
					source: `zarr2://${server}/${path}`,
					shader: `#uicontrol invlerp grey(range=[0, ${max}])\nvoid main() { emitGrayscale(grey()); }`,
				},
			],
			layout: "xy",
			crossSectionScale: 1 / SCALE,
			crossSectionBackgroundColor: "#ff00ff",
			showAxisLines: false,
			showScaleBar: false,
			showDefaultAnnotations: false,
		};
		await page.goto(`${VIEWER}/?n=${i}#!${encodeURIComponent(JSON.stringify(state))}`);
		const panel = page.locator(".neuroglancer-rendered-data-panel").first();
		await panel.waitFor({ timeout: 30000 });
		// drawn once three screenshots 0.75 s apart are the same (chunks arrive one by one)
		const png = `${outdir}/ng-${i}.png`;
		let last = null,
			same = 0;
		const until = Date.now() + 40000;
		while (same < 2) {
			if (Date.now() > until) throw new Error(`${path}: the picture never settled`);
			await page.waitForTimeout(750);
			const shot = await panel.screenshot({ path: png });
			same = last && shot.equals(last) ? same + 1 : 0;
			last = shot;
		}
		out.push({ png, scale: SCALE });
	}
	if (errors.length) throw new Error(`errors in the page: ${errors.join("; ")}`);
	console.log(JSON.stringify(out));
} finally {
	await browser.close();
	viewer.close();
}
