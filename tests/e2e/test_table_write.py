"""The masking ROI table encoder (src/table_write.c,
docs/ome-fractal.md#masking-roi-tables-written-by-roifs) read back by independent readers:
anndata.read_zarr and zarr-python for AnnData on Zarr v2, pandas for the csv back end, and
zarrita.js for AnnData on Zarr v3 (nothing on this machine reads v3 AnnData as AnnData: zarr-python
is version 2, anndata 0.8), whose tree must equal the v2 one node for node.

tests/unit/table_write_tool.c writes the files table_encode returns to a directory."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr

from conftest import zarrita_node

REPO = Path(__file__).resolve().parents[2]
JS = REPO / "tests" / "js"
COLUMNS = ["x_micrometer", "y_micrometer", "z_micrometer",
           "len_x_micrometer", "len_y_micrometer", "len_z_micrometer"]
REGION = "../labels/nuclei"
MASKING = {"type": "masking_roi_table", "table_version": "1", "region": {"path": REGION},
           "instance_key": "label", "index_key": "label", "index_type": "int"}
ANNDATA_ATTRS = dict(MASKING, backend="anndata", fractal_table_version="1",
                     **{"encoding-type": "anndata", "encoding-version": "0.1.0"})
CSV_ATTRS = dict(MASKING, backend="csv")


@pytest.fixture(scope="session")
def tool():
    build = Path(os.environ["ROIFS_BIN"]).parent if "ROIFS_BIN" in os.environ else \
        REPO / os.environ.get("ROIFS_BUILD", "build")
    exe = build / "tests" / "table_write_tool"
    assert exe.exists(), f"{exe} is not built: run scripts/build.sh"
    return exe


def make_rows(n, seed=17):
    """n objects with distinct labels in random order: label, (z, y, x) starts and lengths.
    Every third one is 2-D (z 0, length 1, as docs/ome-fractal.md has it)."""
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.unique(rng.integers(1, 2**40, 2 * n + 8))[:n])
    rows = []
    for i, label in enumerate(labels):
        start = rng.uniform(-50, 5000, 3) * rng.choice([1e-3, 1, 1e3], 3)
        length = rng.uniform(0.01, 300, 3)
        if i % 3 == 0:
            start[0], length[0] = 0.0, 1.0
        rows.append((int(label), tuple(float(v) for v in start), tuple(float(v) for v in length)))
    return rows


def run_tool(tool, out, fmt, backend, rows):
    # repr() is the shortest string that reads back as the same double (strtod in the tool)
    text = "".join(f"{l} {' '.join(map(repr, s))} {' '.join(map(repr, n))}\n" for l, s, n in rows)
    return subprocess.run([str(tool), str(fmt), backend, REGION, str(out)], input=text,
                          capture_output=True, text=True, timeout=60)


def write_table(tool, tmp_path, fmt, backend, rows):
    out = tmp_path / f"table-{backend}-{fmt}-{len(rows)}"
    r = run_tool(tool, out, fmt, backend, rows)
    assert r.returncode == 0, r.stderr
    return out


def expected(rows):
    """Labels sorted, and the columns in X's order (x, y, z, len_x, len_y, len_z) as doubles."""
    rows = sorted(rows)
    labels = np.array([l for l, _, _ in rows], dtype=np.uint64)
    values = np.array([[s[2], s[1], s[0], n[2], n[1], n[0]] for _, s, n in rows],
                      dtype=np.float64).reshape(len(rows), 6)
    return labels, values


SIZES = [0, 1, 1000]


# ---------------------------------------------------------------- AnnData on Zarr v2


@pytest.mark.parametrize("n", SIZES)
def test_anndata_v2_read_by_anndata(tool, tmp_path, n):
    import anndata
    rows = make_rows(n)
    path = write_table(tool, tmp_path, 2, "anndata", rows)
    labels, values = expected(rows)
    a = anndata.read_zarr(str(path))
    assert a.shape == (n, 6)
    assert list(a.obs_names) == [str(l) for l in labels]
    assert a.obs.index.name is None
    assert list(a.var_names) == COLUMNS
    assert list(a.obs.columns) == ["label"]
    assert a.obs["label"].dtype == np.int64
    assert np.array_equal(a.obs["label"].to_numpy(), labels.astype(np.int64))
    assert a.X.dtype == np.float32
    assert np.array_equal(a.X, values.astype(np.float32))
    assert a.uns == {} and not a.obsm and not a.varm and not a.obsp and not a.varp \
        and not a.layers and a.raw is None
    assert dict(zarr.open_group(str(path), mode="r").attrs) == ANNDATA_ATTRS
    # fractal-tasks-core's masked loading: obs[instance_key] at a ROI's position is its label
    for i in range(min(n, 5)):
        assert int(a.obs[ANNDATA_ATTRS["instance_key"]][i]) == labels[i]
    # ngio: X and obs joined, then the index_key column made the (int) index
    df = a.to_df()
    df[a.obs.columns.to_list()] = a.obs
    df = df.set_index(ANNDATA_ATTRS["index_key"])
    assert list(df.columns) == COLUMNS and list(df.index) == [int(l) for l in labels]


@pytest.mark.parametrize("n", SIZES)
def test_anndata_v2_arrays_open_with_zarr(tool, tmp_path, n):
    rows = make_rows(n)
    path = write_table(tool, tmp_path, 2, "anndata", rows)
    labels, values = expected(rows)
    g = zarr.open_group(str(path), mode="r")
    assert sorted(g.group_keys()) == ["layers", "obs", "obsm", "obsp", "uns", "var", "varm",
                                      "varp"]
    assert list(g.array_keys()) == ["X"]
    x = g["X"]
    assert x.dtype == np.float32 and x.shape == (n, 6)
    assert np.array_equal(x[...], values.astype(np.float32))
    assert list(g["obs/_index"][...]) == [str(l) for l in labels]
    assert g["obs/label"].dtype == np.int64
    assert np.array_equal(g["obs/label"][...], labels.astype(np.int64))
    assert list(g["var/_index"][...]) == COLUMNS
    assert dict(g["obs"].attrs) == {"_index": "_index", "column-order": ["label"],
                                    "encoding-type": "dataframe", "encoding-version": "0.2.0"}
    assert dict(g["var"].attrs) == {"_index": "_index", "column-order": [],
                                    "encoding-type": "dataframe", "encoding-version": "0.2.0"}
    for k in ["obs/_index", "var/_index"]:
        assert dict(g[k].attrs) == {"encoding-type": "string-array", "encoding-version": "0.2.0"}
    for k in ["X", "obs/label"]:
        assert dict(g[k].attrs) == {"encoding-type": "array", "encoding-version": "0.2.0"}
    for k in ["layers", "obsm", "obsp", "uns", "varm", "varp"]:
        assert dict(g[k].attrs) == {"encoding-type": "dict", "encoding-version": "0.1.0"}
        assert not list(g[k].keys())


def test_labels_beyond_int64_are_uint64(tool, tmp_path):
    import anndata
    rows = [(2**63 + 5, (0.0, 1.0, 2.0), (1.0, 3.0, 4.0)), (7, (0.0, 0.5, 0.25), (1.0, 1.0, 1.0))]
    a = anndata.read_zarr(str(write_table(tool, tmp_path, 2, "anndata", rows)))
    assert list(a.obs_names) == ["7", str(2**63 + 5)]
    assert a.obs["label"].dtype == np.uint64
    assert list(a.obs["label"]) == [7, 2**63 + 5]
    df = pd.read_csv(write_table(tool, tmp_path, 2, "csv", rows) / "table.csv")
    assert df["label"].dtype == np.uint64 and list(df["label"]) == [7, 2**63 + 5]


# ---------------------------------------------------------------- csv back end


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("n", SIZES)
def test_csv_read_by_pandas(tool, tmp_path, fmt, n):
    rows = make_rows(n)
    path = write_table(tool, tmp_path, fmt, "csv", rows)
    labels, values = expected(rows)
    if fmt == 2:
        assert sorted(os.listdir(path)) == [".zattrs", ".zgroup", "table.csv"]
        assert dict(zarr.open_group(str(path), mode="r").attrs) == CSV_ATTRS
    else:
        assert sorted(os.listdir(path)) == ["table.csv", "zarr.json"]
        meta = json.loads((path / "zarr.json").read_text())
        assert meta == {"zarr_format": 3, "node_type": "group", "attributes": CSV_ATTRS}
    # The text is the shortest that reads back as each double; pandas' default float parser
    # is not correctly rounded (measured: up to ~100 ulp off for 1e-3-sized values), its
    # round_trip one is.
    exact = pd.read_csv(path / "table.csv", float_precision="round_trip")
    df = pd.read_csv(path / "table.csv")
    assert list(df.columns) == list(exact.columns) == ["label"] + COLUMNS
    assert len(df) == n
    if n:  # (an empty table has no values to give its columns a dtype)
        assert df["label"].dtype == np.int64
    assert np.array_equal(df["label"].to_numpy(), labels.astype(np.int64))
    for i, c in enumerate(COLUMNS):
        assert np.array_equal(exact[c].to_numpy(), values[:, i]), c
        if n:
            assert df[c].dtype == exact[c].dtype == np.float64, c
            assert np.allclose(df[c].to_numpy(), values[:, i], rtol=1e-13, atol=0), c
    # ngio's csv back end: read, then the index_key column becomes the index of index_type
    df = df.set_index(CSV_ATTRS["index_key"])
    assert list(df.columns) == COLUMNS and list(df.index) == [int(l) for l in labels]


# ---------------------------------------------------------------- AnnData on Zarr v3

ZARRITA_DUMP = r"""
import FileSystemStore from "@zarrita/storage/fs";
import * as zarr from "zarrita";
const [dir, ...nodes] = process.argv.slice(1);
const root = zarr.root(new FileSystemStore(dir));
const out = {};
for (const p of nodes) {
  const node = await zarr.open(p ? root.resolve(p) : root);
  if (node instanceof zarr.Array) {
    // zarrita.js 0.7 cannot get() an array with an empty dimension (its index iterator)
    const data = node.shape.includes(0) ? [] : Array.from((await zarr.get(node)).data,
      (v) => (typeof v === "bigint" ? v.toString() : v));
    out[p] = { kind: "array", dtype: node.dtype, shape: node.shape, attrs: node.attrs, data };
  } else {
    out[p] = { kind: "group", attrs: node.attrs };
  }
}
console.log(JSON.stringify(out));
"""

V2_DTYPES = {"<f4": "float32", "<i8": "int64", "<u8": "uint64", "|O": "string"}


@pytest.fixture(scope="session")
def zarrita_js():
    return zarrita_node()


def nodes(path, marker_files):
    """Relative paths of the Zarr nodes under path ('' for the root)."""
    found = set()
    for dirpath, _, files in os.walk(path):
        if any(m in files for m in marker_files):
            rel = os.path.relpath(dirpath, path)
            found.add("" if rel == "." else rel)
    return sorted(found)


def dump_v3(node, path):
    r = subprocess.run([node, "--input-type=module", "-e", ZARRITA_DUMP, str(path),
                        *nodes(path, ["zarr.json"])],
                       capture_output=True, text=True, timeout=60, cwd=str(JS))
    assert r.returncode == 0, f"zarrita.js could not read {path}:\n{r.stderr[-3000:]}"
    return json.loads(r.stdout)


def dump_v2(path):
    out = {}
    for p in nodes(path, [".zgroup", ".zarray"]):
        node = zarr.open(str(path / p) if p else str(path), mode="r")
        if isinstance(node, zarr.Array):
            data = node[...].ravel().tolist()
            if node.dtype.kind in "iu":
                data = [str(v) for v in data]
            out[p] = {"kind": "array", "dtype": V2_DTYPES[node.dtype.str],
                      "shape": list(node.shape), "attrs": dict(node.attrs), "data": data}
        else:
            out[p] = {"kind": "group", "attrs": dict(node.attrs)}
    return out


@pytest.mark.parametrize("n", SIZES)
def test_anndata_v3_equals_v2_node_for_node(tool, tmp_path, zarrita_js, n):
    rows = make_rows(n)
    v2 = dump_v2(write_table(tool, tmp_path, 2, "anndata", rows))
    v3 = dump_v3(zarrita_js, write_table(tool, tmp_path, 3, "anndata", rows))
    assert sorted(v3) == sorted(v2) == ["", "X", "layers", "obs", "obs/_index", "obs/label",
                                        "obsm", "obsp", "uns", "var", "var/_index", "varm",
                                        "varp"]
    for p in v2:
        assert v3[p] == v2[p], p
    # and the values themselves, independently of the v2 flavour
    labels, values = expected(rows)
    assert v3[""]["attrs"] == ANNDATA_ATTRS
    assert v3["X"]["shape"] == [n, 6]
    assert np.array_equal(np.array(v3["X"]["data"], dtype=np.float64).reshape(n, 6),
                          values.astype(np.float32).astype(np.float64))
    assert v3["obs/_index"]["data"] == [str(l) for l in labels]
    assert v3["obs/label"]["data"] == [str(l) for l in labels]
    assert v3["var/_index"]["data"] == COLUMNS


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("rows, message", [
    ([(0, (0.0, 1.0, 2.0), (1.0, 1.0, 1.0))], "label 0 is the background"),
    ([(4, (0.0, 1.0, 2.0), (1.0, 1.0, 1.0))] * 2, "label 4 has two rows"),
    ([(4, (0.0, 1.0, float("nan")), (1.0, 1.0, 1.0))], "x_micrometer is nan"),
])
def test_refused(tool, tmp_path, rows, message):
    r = run_tool(tool, tmp_path / "t", 2, "anndata", rows)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "t").exists()
