"""roifs serve in a browser (docs/serve.md): Debian's chromium, driven by playwright-core from
npm (tests/js/serve_browser.mjs), reads the served array with zarrita.js in a page of another
origin (CORS) while one ROI computes and another has failed, compared with numpy; the status
page's chunk grid, in a screenshot, shows each chunk in its state's colour. Viv
(tests/js/viv_browser.mjs) reads and draws a served image, its label overlay and a pyramid
level. Issue 36's stall case: with a ROI of 100 s running, the page draws each
other tile within 2 s of its 1 s ROI's end."""
import json
import shutil
import socket
import subprocess
import threading
import time

import fsspec
import numpy as np
import pytest
import zarr
from PIL import Image

from conftest import PY, REPO, make_task, zarrita_node
from serving import served
from test_serve import calls, job

# docs/serve.md, The status page
COLOURS = {"idle": (0xc8, 0xc8, 0xc8), "busy": (0xf2, 0xb7, 0x05), "done": (0x2e, 0x9e, 0x44),
           "failed": (0xd6, 0x28, 0x28), "none": (0xff, 0xff, 0xff)}
CELL = 12


def browser_node():
    """node with tests/js installed (playwright-core too), and Debian's chromium."""
    node = zarrita_node()
    js = REPO / "tests" / "js"
    if not all((js / "node_modules" / m).is_dir()
               for m in ("playwright-core", "@vivjs/loaders", "@vivjs/layers", "esbuild",
                         "neuroglancer")):
        r = subprocess.run([shutil.which("npm"), "ci", "--prefix", str(js), "--no-audit",
                            "--no-fund"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"npm ci failed:\n{r.stdout}\n{r.stderr}"
    if not shutil.which("chromium"):
        pytest.fail("Debian's chromium is needed (scripts/install-deps.sh)")
    return node


def in_the_page(node, s, spec, png=None):
    """The arrays zarrita.js read in chromium (tests/js/serve_browser.mjs), as numpy arrays."""
    r = subprocess.run([node, str(REPO / "tests/js/serve_browser.mjs"), s.url, json.dumps(spec)]
                       + ([str(png)] if png else []), capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{s.log_text()}"
    out = []
    for a in json.loads(r.stdout.strip().splitlines()[-1]):
        data = np.array(a["data"])
        out.append(np.lib.stride_tricks.as_strided(
            data, a["shape"], [k * data.itemsize for k in a["stride"]]).copy())
    return out


@pytest.mark.timeout(120)
def test_zarrita_in_chromium_and_the_status_picture(tmp_path, roifs_bin):
    node = browser_node()
    task, want = job(tmp_path)
    # no read-ahead: the chunks not asked for stay "not computed" for the picture
    text = task.config.read_text().replace("[process]\n", "[process]\nreadahead = 0\n")
    task.config.write_text(text)
    (tmp_path / "slow").touch()  # ROI 0 (chunk 0.0) takes 20 s
    (tmp_path / "fail").touch()  # ROI 1 (chunk 0.1) fails
    png = tmp_path / "grid.png"
    with served(roifs_bin, task.config, ["--cors", "http://localhost:8999"]) as s:
        waiting = []
        t = threading.Thread(target=lambda: waiting.append(s.request("/0.0", timeout=40)[0]))
        t.start()
        assert s.request("/0.1")[0] == 500
        got, = in_the_page(node, s, [{"path": "", "row0": 2}], png)
        np.testing.assert_array_equal(got, want[2:])
        assert "0" in calls(tmp_path) and "2" not in calls(tmp_path)
        assert not waiting
    t.join(10)
    assert waiting == [503]
    # the grid: 4 columns of 12 px squares (11 px painted), rows in chunk order
    img = np.asarray(Image.open(png).convert("RGB"))
    states = {}
    for cy in range(4):
        for cx in range(4):
            cell = img[cy * CELL + 3, cx * CELL + 3]
            states[(cy, cx)] = next((k for k, c in COLOURS.items()
                                     if np.abs(cell.astype(int) - c).max() <= 8), tuple(cell))
    want_states = {(0, 0): "busy", (0, 1): "failed", (0, 2): "idle", (0, 3): "idle"}
    want_states.update({(y, x): "done" for y in (1, 2) for x in range(4)})
    want_states.update({(3, x): "none" for x in range(4)})
    assert states == want_states


@pytest.mark.timeout(120)
def test_zarrita_in_chromium_reads_a_label_overlay_and_its_levels(tmp_path, roifs_bin):
    """ome = labels over a 3-level image: zarrita.js in chromium reads the label image's
    levels 0 and 1 (the computed labels and their nearest-neighbour level) and the input's own
    level 2 through roifs serve, equal to numpy's labels, their nearest level, and the input."""
    from test_overlay import expected_labels, make_image, nearest, overlay_config
    node = browser_node()
    img, levels = make_image(tmp_path, "0.4")
    config = overlay_config(tmp_path, img)
    with served(roifs_bin, config, ["--cors", "http://localhost:8999"]) as s:
        l0, l1, in2 = in_the_page(node, s, [{"path": "labels/seg/0", "row0": 0},
                                             {"path": "labels/seg/1", "row0": 0},
                                             {"path": "2", "row0": 0}])
    want0 = expected_labels(levels[0])
    np.testing.assert_array_equal(l0, want0)
    np.testing.assert_array_equal(l1, nearest(want0, levels[1].shape))
    np.testing.assert_array_equal(in2, levels[2])


@pytest.mark.timeout(120)
def test_viv_in_chromium_reads_and_draws_an_image_its_labels_and_a_level(tmp_path, roifs_bin):
    """ome = labels over a 3-level image, served. Viv in chromium (tests/js/viv_browser.mjs),
    from a page of another origin, finds the 3 levels of the image and of the label image, and
    reads (loadOmeZarr, getRaster) and draws (its ImageLayer in deck.gl, WebGL2, 4 pixels a
    voxel) the image's levels 0 and 2 (the input's own), and the label image's levels 0 and 1
    (computed: the labels and their nearest level): what it reads equals numpy, in its dtype,
    and each voxel's square in the picture is the grey its value makes under the contrast
    limits [0, max] (within 1 of 255 * value / max)."""
    from test_overlay import expected_labels, make_image, nearest, overlay_config
    node = browser_node()
    img, levels = make_image(tmp_path, "0.4")
    config = overlay_config(tmp_path, img)
    want0 = expected_labels(levels[0])
    wants = [levels[0], levels[2], want0, nearest(want0, levels[1].shape)]
    top = int(want0.max())
    assert top > 1  # labels, not a blank image
    spec = [{"path": "", "level": 0, "max": 1000}, {"path": "", "level": 2, "max": 1000},
            {"path": "labels/seg", "level": 0, "max": top},
            {"path": "labels/seg", "level": 1, "max": top}]
    with socket.socket() as free:  # the viewer page's port: a free one
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with served(roifs_bin, config, ["--cors", f"http://localhost:{port}"]) as s:
        r = subprocess.run([node, str(REPO / "tests/js/viv_browser.mjs"), s.url, json.dumps(spec),
                            str(tmp_path), str(port)], capture_output=True, text=True, timeout=100)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{s.log_text()}"
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(got) == len(spec)
    for g, want, sp in zip(got, wants, spec):
        assert g["levels"] == 3, sp
        assert g["dtype"] == ("Uint16" if sp["path"] == "" else "Uint32"), (sp, g["dtype"])
        np.testing.assert_array_equal(np.array(g["data"]).reshape(g["shape"]), want, err_msg=str(sp))
        k = g["scale"]
        pic = np.asarray(Image.open(g["png"]).convert("RGB")).astype(int)
        assert pic.shape[:2] == (want.shape[0] * k, want.shape[1] * k), sp
        centres = pic[k // 2::k, k // 2::k]  # each voxel's square, at its centre
        grey = np.clip(want / sp["max"], 0, 1) * 255
        for ch in range(3):
            bad = np.abs(centres[..., ch] - grey) > 1
            assert not bad.any(), (sp, ch, np.argwhere(bad)[:5].tolist())


def drawn_voxels(png, scale, shape):
    """The colour at the centre of each voxel's square in a screenshot of Neuroglancer's data
    panel (tests/js/ng_browser.mjs): the image is the rectangle around the panel's centre (where
    Neuroglancer puts the array's centre) that is not the magenta background, its first
    dimension across; returned in the array's order (shape)."""
    pic = np.asarray(Image.open(png).convert("RGB")).astype(int)
    bg = (pic[..., 0] > 250) & (pic[..., 1] < 5) & (pic[..., 2] > 250)
    cy, cx = bg.shape[0] // 2, bg.shape[1] // 2
    assert not bg[cy, cx], f"{png}: nothing drawn"
    x0, x1, y0, y1 = cx, cx, cy, cy
    while x0 > 0 and not bg[cy, x0 - 1]:
        x0 -= 1
    while x1 < bg.shape[1] and not bg[cy, x1]:
        x1 += 1
    while y0 > 0 and not bg[y0 - 1, cx]:
        y0 -= 1
    while y1 < bg.shape[0] and not bg[y1, cx]:
        y1 += 1
    assert (y1 - y0, x1 - x0) == (shape[1] * scale, shape[0] * scale), (png, y1 - y0, x1 - x0)
    return pic[y0 + scale // 2:y1:scale, x0 + scale // 2:x1:scale].transpose(1, 0, 2)


@pytest.mark.timeout(150)
def test_neuroglancer_in_chromium_draws_an_image_its_labels_and_a_level(tmp_path, roifs_bin):
    """ome = labels over a 3-level image, served. Neuroglancer 2.41 in chromium
    (tests/js/ng_browser.mjs: WebGL2, 4 pixels a voxel), from a page of another origin, draws
    zarr2:// layers of the image's levels 0 and 2 (the input's own) and of the label image's
    levels 0 and 1 (computed: the labels and their nearest level): each voxel's square is the
    grey its numpy value makes under the shader's range [0, max] (within 1 of
    255 * value / max)."""
    from test_overlay import expected_labels, make_image, nearest, overlay_config
    node = browser_node()
    img, levels = make_image(tmp_path, "0.4")
    config = overlay_config(tmp_path, img)
    want0 = expected_labels(levels[0])
    wants = [levels[0], levels[2], want0, nearest(want0, levels[1].shape)]
    top = int(want0.max())
    spec = [{"path": "0", "max": 1000}, {"path": "2", "max": 1000},
            {"path": "labels/seg/0", "max": top}, {"path": "labels/seg/1", "max": top}]
    with socket.socket() as free:  # the viewer page's port: a free one
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with served(roifs_bin, config, ["--cors", f"http://localhost:{port}"]) as s:
        for sp in spec:  # computed first: the picture is taken once it stops changing
            assert zarr.open(fsspec.get_mapper(f"{s.url}/{sp['path']}"), mode="r")[...].size
        r = subprocess.run([node, str(REPO / "tests/js/ng_browser.mjs"), s.url, json.dumps(spec),
                            str(tmp_path), str(port)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{s.log_text()}"
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(got) == len(spec)
    for g, want, sp in zip(got, wants, spec):
        voxels = drawn_voxels(g["png"], g["scale"], want.shape)
        grey = np.clip(want / sp["max"], 0, 1) * 255
        for ch in range(3):
            bad = np.abs(voxels[..., ch] - grey) > 1
            assert not bad.any(), (sp, ch, np.argwhere(bad)[:5].tolist())


# Multiplies <i4 input by 10: ROI 0 in 100 s, every other ROI in 1 s; each ROI writes the
# time its sleep ended (time.time(), before its output: "ready" no later than that) to ends/ROI.
STALL = """\
import array, os, sys, time
data = sys.stdin.buffer.read()
roi = os.environ["ROIFS_ROI"]
time.sleep(100 if roi == "0" else 1)
with open(os.path.join(sys.argv[1], "ends", roi), "w") as f:
    f.write(repr(time.time()))
a = array.array("i")
a.frombytes(data)
sys.stdout.buffer.write(array.array("i", (10 * x for x in a)).tobytes())
"""


@pytest.mark.timeout(90)
def test_a_100_s_roi_stalls_no_tile_in_chromium(tmp_path, roifs_bin):
    """Issue 36's stall case: 4 ROIs, one a chunk each (4x4 in 2x2), on 4 compute threads, no
    read-ahead: ROI 0 takes 100 s, the others 1 s. With ROI 0 running, a zarrita page in
    chromium (opened before any other tile is computed: its own requests wait on the server)
    asks for the 4 tiles at once, ROI 0's first, and draws each as it arrives: each other tile
    is drawn within 2 s of its ROI's end (the processor's clock, before its output is even
    read), equal to numpy, while ROI 0's tile is still missing; SIGTERM then answers the
    request still waiting for it 503. Well under 100 s in all."""
    node = browser_node()
    script = tmp_path / "stall.py"
    script.write_text(STALL)
    (tmp_path / "ends").mkdir()
    data = np.arange(1, 17, dtype="<i4").reshape(4, 4)
    rois = [((2 * (i // 2), 2 * (i // 2) + 2), (2 * (i % 2), 2 * (i % 2) + 2)) for i in range(4)]
    task = make_task(tmp_path, data, (2, 2), rois=rois,
                     process={"command": f"{PY} {script} {tmp_path}", "threads": 4,
                              "readahead": 0},
                     output={"compressor": "blosc", "fill_value": 0})
    with socket.socket() as free:  # the viewer page's port: a free one
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    others = [[0, 1], [1, 0], [1, 1]]
    with served(roifs_bin, task.config, ["--cors", f"http://localhost:{port}"]) as s:
        waiting = []
        t = threading.Thread(target=lambda: waiting.append(s.request("/0.0", timeout=60)[0]))
        t.start()
        deadline = time.monotonic() + 10
        while json.loads(s.request("/.roifs/status")[2])["rois"]["running"] < 1:
            assert time.monotonic() < deadline, "ROI 0 never started"
            time.sleep(0.05)
        r = subprocess.run([node, str(REPO / "tests/js/serve_browser.mjs"), s.url,
                            json.dumps([{"path": "", "tiles": others, "pending": [[0, 0]]}]),
                            "", str(port)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{s.log_text()}"
        got, = json.loads(r.stdout.strip().splitlines()[-1])
        ends = {p.name: float(p.read_text()) for p in (tmp_path / "ends").iterdir()}
        assert "0" not in ends and not waiting  # ROI 0 still runs
        assert json.loads(s.request("/.roifs/status")[2])["rois"]["running"] == 1
    t.join(10)
    assert waiting == [503]
    assert got["pending"] == [[0, 0]]
    assert sorted(d["tile"] for d in got["drawn"]) == others
    for d in got["drawn"]:
        cy, cx = d["tile"]
        np.testing.assert_array_equal(np.array(d["data"]).reshape(d["shape"]),
                                      data[2 * cy:2 * cy + 2, 2 * cx:2 * cx + 2] * 10)
        late = d["at"] / 1000 - ends[str(2 * cy + cx)]
        assert 0 < late < 2, f"tile {d['tile']} drawn {late:.2f} s after its ROI ended"
