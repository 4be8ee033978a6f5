"""The layering docs/design.md ("Modules and layering") states, read from the sources: the
cache (src/cache/) includes nothing of the engine; the engine reads no configuration (no file
of src/engine/ names `cfg` or includes config.h: [labels] comes resolved as the task's struct
label_rules, mask_input as the mask's value), and the values task_open composes (channel.c,
mask.c, codeid.c, provenance.c, labels/) know nothing of struct task, so that no call loop
runs through task.c. Nothing here needs a build or a mount."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"


def code(path):
    """path's text without comments and string literals."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", path.read_text(), flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def includes(path):
    return re.findall(r'#include\s+"([^"]+)"', path.read_text())


def test_the_engine_reads_no_configuration():
    files = sorted((SRC / "engine").glob("*.[ch]"))
    assert len(files) > 20, files  # the engine is still where this test looks
    cfg = [f"{f.name}:{n}" for f in files for n, line in enumerate(code(f).splitlines(), 1)
           if re.search(r"\bcfg\b", line)]
    assert cfg == [], f"the engine reads the configuration at {cfg}: resolve it in task_open"
    config_h = [f.name for f in files if any(Path(i).name == "config.h" for i in includes(f))]
    assert config_h == [], config_h


def test_values_task_open_composes_know_no_task():
    files = [SRC / n for n in ("channel.c", "channel.h", "mask.c", "mask.h", "codeid.c", "codeid.h",
                               "provenance.c", "provenance.h")]
    files += sorted((SRC / "labels").glob("*.[ch]"))
    for f in files:
        assert f.exists(), f
        assert "task.h" not in [Path(i).name for i in includes(f)], f"{f.name} includes task.h"
        assert not re.search(r"\bstruct task\b", code(f)), f"{f.name} names struct task"


def test_the_cache_includes_nothing_of_the_engine():
    """src/cache/ (the cache directory and the result store) sits under the engine, beside
    task.c: its files include only each other, the base utilities and zarr/ (below task.c),
    never src/engine/, task.h or anything above, and only src/cache/ includes its private
    headers."""
    files = sorted((SRC / "cache").glob("*.[ch]"))
    assert len(files) > 10, files  # the cache is still where this test looks
    own = {f.name for f in files}
    base = {"../key.h", "../util.h", "../idlru.h", "../crc32c.h", "../map.h", "../atomic_file.h",
            "../zarr/zarr.h"}
    bad = [f"{f.name}: {i}" for f in files for i in includes(f) if i not in own and i not in base]
    assert bad == [], f"src/cache/ includes what is above it: {bad}"
    private = {"cache_internal.h", "store_internal.h"}
    outside = [f"{f.relative_to(REPO)}: {i}" for d in (SRC, REPO / "tests", REPO / "fuzz")
               for f in d.rglob("*.[ch]") if f.parent != SRC / "cache"
               for i in includes(f) if Path(i).name in private]
    assert outside == [], f"private headers of src/cache/ included from outside: {outside}"


def test_measure_knows_no_engine_nor_tree():
    """src/measure/ ([measure]'s feature tables) sits between arrays/ and task.c: it includes
    nothing of src/engine/, src/arrays/, src/tree/ or src/fs/ (docs/design.md, Modules and
    layering), so that a plate layer can drive it per image."""
    files = sorted((SRC / "measure").glob("*.[ch]"))
    assert len(files) >= 4, files
    above = ("engine/", "arrays/", "tree/", "fs/", "cli/")
    bad = [f"{f.name}: {i}" for f in files for i in includes(f) if i.startswith(tuple(
        "../" + a for a in above))]
    assert bad == [], f"src/measure/ includes what is above it: {bad}"


def defined(path):
    """The functions path defines that other files can call (not static)."""
    names = set()
    for line in code(path).splitlines():
        m = re.match(r"(?!static\b)[A-Za-z_][\w \*]*?\b(\w+)\(", line)
        if m and not line.rstrip().endswith(";"):
            names.add(m.group(1))
    return names


def test_the_array_set_and_the_table_call_one_way():
    """src/arrays/'s pairs run one way (docs/design.md, src/arrays/): arrayset.c over
    arrayset_plate_status.c over arrayset_plate.c over arrayset_state.c, and otable.c over otable_measure.c. A lower file
    includes no header of a file above it and calls no function one defines (a lower piece
    that must tell the upper one something is handed the upper one's callback)."""
    arrays = SRC / "arrays"
    above = {  # lower file: the files above it
        "arrayset_state.c": ("arrayset.c", "arrayset_plate.c"),
        "arrayset_state.h": ("arrayset.c", "arrayset_plate.c"),
        "array.h": ("arrayset.c", "arrayset_plate.c", "arrayset_state.c"),
        "arrayset_plate.c": ("arrayset.c", "arrayset_plate_status.c"),
        "arrayset_plate_status.c": ("arrayset.c",),
        "arrayset_plate.h": ("arrayset.c",),
        "otable_measure.c": ("otable.c",),
        "otable_measure.h": ("otable.c",),
    }
    bad = []
    for low, highs in above.items():
        f = arrays / low
        assert f.exists(), f
        headers = {Path(h).with_suffix(".h").name for h in highs}
        bad += [f"{low} includes {i}" for i in includes(f) if Path(i).name in headers]
        calls = set(re.findall(r"\b(\w+)\s*\(", code(f)))
        for h in highs:
            bad += [f"{low} calls {n} of {h}" for n in sorted(calls & defined(arrays / h))]
    assert bad == [], f"a lower file of src/arrays/ reaches a file above it: {bad}"
