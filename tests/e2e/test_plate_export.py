"""`roifs export --into PLATE` of an `ome = labels` plate (docs/plates.md): every selected
image's labels/NAME and tables/NAME and the plate's tables/NAME, written as the mount presents
them, staged first and renamed into place only when every image's are complete."""
import shutil

import pytest

from conftest import mounted, run_roifs
from test_overlay import files_of
from test_plate import added_files, attrs, make_plate, plate_config, validate, without_provenance


def snapshot(root):
    return {f: (root / f).read_bytes() for f in files_of(root)}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_export_into_plate_writes_what_the_mount_presents(tmp_path, roifs_bin, version):
    """Into a copy of a Fractal-style plate: each image's labels/seg and tables/seg_table and
    the plate's tables/seg_table as the mount presents them (but the provenance), the lists
    naming them, valid against the official schemas; a second export refuses the taken names
    (exit 2, nothing written) and --overwrite writes them again."""
    plate, images = make_plate(tmp_path, version, "fractal")
    dest = tmp_path / "dest.zarr"
    shutil.copytree(plate, dest)
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache")
    r = run_roifs(roifs_bin, "export", "-j", "2", "--into", dest, config, timeout=90)
    assert r.returncode == 0, r.stderr
    with mounted(roifs_bin, config) as m:
        for p in images:
            want = {f: (m.path / p / f).read_bytes() for f in added_files(m.path / p)}
            got = {f: (dest / p / f).read_bytes() for f in added_files(dest / p)}
            assert sorted(got) == sorted(want) and any("tables/" in f for f in got), p
            for f in want:
                assert without_provenance(got[f], f) == without_provenance(want[f], f), (p, f)
            for g in ("labels", "tables"):
                assert attrs(dest / p / g, version) == attrs(m.path / p / g, version), (p, g)
            validate(attrs(dest / p / "labels/seg", version), version, "label")
        mine = m.path / "tables/seg_table"
        want = {f: (mine / f).read_bytes() for f in files_of(mine)}
        assert want and snapshot(dest / "tables/seg_table") == want
        assert attrs(dest / "tables", version) == attrs(m.path / "tables", version)
    validate(attrs(dest, version), version, "plate")
    if version == "0.4":
        import zarr
        for p in images:
            z = zarr.open_group(str(dest / p / "labels/seg"), mode="r")
            assert z["0"].shape[-2:] == zarr.open(str(dest / p / "0"), mode="r").shape[-2:]
            assert z["0"][:].max() > 0, p
    before = snapshot(dest)
    r = run_roifs(roifs_bin, "export", "--into", dest, config, timeout=60)
    assert r.returncode == 2 and "already has a label 'seg'" in r.stderr, r.stderr
    assert snapshot(dest) == before
    r = run_roifs(roifs_bin, "export", "--into", dest, "--overwrite", config, timeout=60)
    assert r.returncode == 0, r.stderr
    assert snapshot(dest) == before


@pytest.mark.timeout(120)
def test_export_into_plate_failing_image_leaves_every_image_as_it_was(tmp_path, roifs_bin):
    """An image whose input chunk is corrupt (its ROIs fail) fails the export (exit 1, the
    reason said): the images staged before it get nothing either (no label, no table, no list
    changed, no temporary left), nor does the plate; with --wells narrowed to the good images,
    the same plate gets theirs and the plate table over them. A PLATE missing an image, and an
    ome = true plate, are refused (exit 2) with nothing written."""
    plate, images = make_plate(tmp_path, "0.4", "fractal")
    bad = images["C/05/0"] / "0"
    chunk = next(f for f in sorted(bad.iterdir()) if not f.name.startswith("."))
    chunk.write_bytes(b"xyz")
    config = plate_config(tmp_path / "p.ini", plate, tmp_path / "cache")
    other = tmp_path / "other.zarr"  # not the same layout: an image missing
    shutil.copytree(plate, other)
    shutil.rmtree(other / "B/03/1")
    kept = snapshot(other)
    r = run_roifs(roifs_bin, "export", "--into", other, config, timeout=60)
    assert r.returncode == 2 and "B/03/1" in r.stderr, r.stderr
    assert snapshot(other) == kept
    new = tmp_path / "new.ini"
    new.write_text(config.read_text().replace("ome = labels", "ome = true"))
    r = run_roifs(roifs_bin, "export", "--into", other, new, timeout=60)
    assert r.returncode == 2 and "ome = labels" in r.stderr, r.stderr
    before = snapshot(plate)
    r = run_roifs(roifs_bin, "export", "--into", plate, config, timeout=90)
    assert r.returncode == 1 and "C/05/0" in r.stderr, r.stderr
    assert snapshot(plate) == before
    assert not [d for d in plate.rglob(".roifs-*")], list(plate.rglob(".roifs-*"))
    r = run_roifs(roifs_bin, "export", "--wells", "B/03", "--into", plate, config, timeout=90)
    assert r.returncode == 0, r.stderr
    for p in ("B/03/0", "B/03/1"):
        assert (plate / p / "labels/seg/.zattrs").is_file()
        assert (plate / p / "tables/seg_table").is_dir()
    assert not (plate / "C/05/0/labels/seg").exists()
    assert (plate / "tables/seg_table").is_dir()
    assert attrs(plate / "tables", "0.4")["tables"] == ["seg_table"]
