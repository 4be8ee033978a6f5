// read_zarr.mjs: reads a whole Zarr array (v2 or v3, from a directory) with zarrita.js, the
// independent implementation the roifs end-to-end tests compare against.
//   node read_zarr.mjs ARRAY_DIR OUT_FILE
// prints one JSON line {"shape", "stride", "data_type", "chunks", "zarrita"} and writes the
// array's elements to OUT_FILE as raw little-endian bytes, laid out as "stride" (in elements)
// says: zarrita.js may hand back a transposed layout rather than C order.
import { readFileSync, writeFileSync } from "node:fs";
import FileSystemStore from "@zarrita/storage/fs";
import * as zarr from "zarrita";

const [dir, out] = process.argv.slice(2);
if (!dir || !out) {
	console.error("usage: node read_zarr.mjs ARRAY_DIR OUT_FILE");
	process.exit(2);
}
const version = JSON.parse(
	readFileSync(new URL("./node_modules/zarrita/package.json", import.meta.url)),
).version;
const arr = await zarr.open(zarr.root(new FileSystemStore(dir)), { kind: "array" });
const { data, shape, stride } = await zarr.get(arr);
writeFileSync(out, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
console.log(
	JSON.stringify({ shape, stride, data_type: arr.dtype, chunks: arr.chunks, zarrita: version }),
);
