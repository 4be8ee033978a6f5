"""roifs serve in a browser (docs/serve.md): Debian's chromium, driven by playwright-core from
npm (tests/js/serve_browser.mjs), reads the served array with zarrita.js in a page of another
origin (CORS) while one ROI computes and another has failed, compared with numpy; the status
page's chunk grid, in a screenshot, shows each chunk in its state's colour."""
import json
import shutil
import subprocess
import threading

import numpy as np
import pytest
from PIL import Image

from conftest import REPO, zarrita_node
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
    if not (js / "node_modules" / "playwright-core").is_dir():
        r = subprocess.run([shutil.which("npm"), "ci", "--prefix", str(js), "--no-audit",
                            "--no-fund"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"npm ci failed:\n{r.stdout}\n{r.stderr}"
    if not shutil.which("chromium"):
        pytest.fail("Debian's chromium is needed (scripts/install-deps.sh)")
    return node


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
        r = subprocess.run([node, str(REPO / "tests/js/serve_browser.mjs"), s.url, "2", str(png)],
                           capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{s.log_text()}"
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert got["shape"] == [6, 8]
        data = np.array(got["data"], "<i4")
        stride = got["stride"]
        view = np.lib.stride_tricks.as_strided(data, (6, 8), (stride[0] * 4, stride[1] * 4))
        np.testing.assert_array_equal(view, want[2:])
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
