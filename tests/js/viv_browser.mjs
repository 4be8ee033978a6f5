// viv_browser.mjs: what Viv (vizarr's and Fractal's viewer's image layers) reads and draws of
// `roifs serve` (tests/e2e/test_serve_browser.py). Debian's chromium, driven by playwright-core
// (never a browser download; WebGL2 on its software renderer, SwiftShader), opens a page of
// another origin (VIEWER: a loopback server of this script's own) with Viv bundled by esbuild:
// for each served OME-Zarr multiscale image asked for, Viv's loadOmeZarr opens it over HTTP
// (CORS), getRaster reads a whole level, and Viv's ImageLayer in a deck.gl orthographic view
// draws that level, SCALE screen pixels a voxel, grey from 0 to `max` (contrast limits), into
// a canvas whose screenshot is written to OUT_DIR/viv-N.png.
//   node viv_browser.mjs SERVER_URL '[{"path": "labels/seg", "level": 1, "max": 9}, ...]' OUT_DIR [PORT]
// (PORT: the viewer's, 8998 unless given; the page's origin is http://localhost:PORT)
// prints one JSON line, a list of {"shape", "data", "dtype", "levels", "png", "scale"}: the
// level read ("levels": how many Viv found) and the picture drawn.
import { createServer } from "node:http";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { chromium } from "playwright-core";

const [server, spec, outdir, port] = process.argv.slice(2);
if (!server || !spec || !outdir) {
	console.error("usage: node viv_browser.mjs SERVER_URL IMAGES_JSON OUT_DIR [PORT]");
	process.exit(2);
}
const SCALE = 4;
const VIEWER_PORT = Number(port || 8998);
const VIEWER = `http://localhost:${VIEWER_PORT}`;
const here = fileURLToPath(new URL(".", import.meta.url));
// The page's module: window.read and window.draw, over one loadOmeZarr each.
const entry = `
import { Deck, OrthographicView } from "@deck.gl/core";
import { ImageLayer } from "@vivjs/layers";
import { loadOmeZarr } from "@vivjs/loaders";
async function open(url, level) {
	const { data } = await loadOmeZarr(url, { type: "multiscales" });
	const loader = data[level];
	const selection = {};
	for (const label of loader.labels) if (label !== "y" && label !== "x") selection[label] = 0;
	return { levels: data.length, loader, selection };
}
window.read = async (url, level) => {
	const { levels, loader, selection } = await open(url, level);
	const raster = await loader.getRaster({ selection });
	return { data: Array.from(raster.data), shape: [raster.height, raster.width],
		dtype: loader.dtype, levels };
};
window.draw = async (url, level, max, scale) => {
	const { loader, selection } = await open(url, level);
	const [height, width] = loader.shape.slice(-2);
	const canvas = document.createElement("canvas");
	canvas.id = "view";
	canvas.style.width = width * scale + "px";
	canvas.style.height = height * scale + "px";
	if (window.vivDeck) window.vivDeck.finalize();
	document.body.replaceChildren(canvas);
	await new Promise((done, fail) => {
		window.vivDeck = new Deck({
			canvas, width: width * scale, height: height * scale, useDevicePixels: false,
			views: [new OrthographicView({ id: "ortho", controller: false })],
			initialViewState: { target: [width / 2, height / 2, 0], zoom: Math.log2(scale) },
			layers: [new ImageLayer({ id: "image", loader, selections: [selection],
				contrastLimits: [[0, max]], colors: [[255, 255, 255]], channelsVisible: [true],
				onViewportLoad: () => setTimeout(done, 300) })],
			onError: fail,
		});
	});
	return [height, width];
};
window.ready = true;
`;
const bundle = (
	await build({
		stdin: { contents: entry, resolveDir: here, loader: "js" },
		bundle: true,
		format: "esm",
		platform: "browser",
		write: false,
		logLevel: "error",
	})
).outputFiles[0].text;
const page_html = `<!DOCTYPE html><html><head><style>body { margin: 0; background: #f0f }</style>
<script type="module" src="/viv.js"></script></head><body></body></html>`;

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
	args: ["--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--ignore-gpu-blocklist"],
});
try {
	const page = await browser.newPage();
	const errors = [];
	page.on("pageerror", (e) => errors.push(String(e)));
	await page.goto(`${VIEWER}/index.html`);
	await page.waitForFunction(() => window.ready === true, null, { timeout: 30000 });
	const out = [];
	for (const [i, { path, level, max }] of JSON.parse(spec).entries()) {
		const url = server + (path ? "/" + path : "");
		const got = await page.evaluate(([u, l]) => window.read(u, l), [url, level]);
		const drawn = await page.evaluate(([u, l, m, s]) => window.draw(u, l, m, s), [url, level, max, SCALE]);
		got.png = `${outdir}/viv-${i}.png`;
		got.scale = SCALE;
		if (drawn.join() !== got.shape.join()) throw new Error(`drew ${drawn}, read ${got.shape}`);
		await page.locator("#view").screenshot({ path: got.png });
		out.push(got);
	}
	if (errors.length) throw new Error(`errors in the page: ${errors.join("; ")}`);
	console.log(JSON.stringify(out));
} finally {
	await browser.close();
	viewer.close();
}
