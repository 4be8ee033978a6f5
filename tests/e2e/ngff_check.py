"""A checker of OME-NGFF image groups (0.4 in Zarr v2, 0.5 in Zarr v3), written from the
rules of the specifications (https://ngff.openmicroscopy.org/0.4/ and /0.5/, "multiscales",
"axes", "coordinateTransformations") and of the Zarr formats' dimension names (Zarr v3
"dimension_names", the `_ARRAY_DIMENSIONS` attribute xarray reads from Zarr v2). It checks
the MUST rules, plus, with strict=True, the SHOULD rules the official strict schemas require
(name, type, metadata, and for 0.4 version). check_image(path) returns the violations as
sentences; an empty list means conforming."""
import json
from pathlib import Path

SPACE, TIME, CHANNEL = "space", "time", "channel"


def _load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        return e


def _is_number_list(v, n):
    return (isinstance(v, list) and len(v) == n
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v))


def check_axes(axes, out):
    """The "axes" rules: 2 to 5 entries, each a dict with a unique string "name"; 2 or 3 of
    type space, at most one of type time and one of type channel or a custom (or no) type;
    ordered time, then channel or custom, then space. Returns the names."""
    if not isinstance(axes, list) or not 2 <= len(axes) <= 5:
        out.append(f"axes must be a list of 2 to 5 entries, not {axes!r}")
        return None
    names, kinds = [], []
    for i, a in enumerate(axes):
        if not isinstance(a, dict) or not isinstance(a.get("name"), str):
            out.append(f"axes[{i}] must be an object with a string \"name\": {a!r}")
            return None
        names.append(a["name"])
        t = a.get("type")
        if t is not None and not isinstance(t, str):
            out.append(f"axes[{i}] \"type\" must be a string: {t!r}")
        kinds.append(t if t in (SPACE, TIME) else "other")
    if len(set(names)) != len(names):
        out.append(f"axis names must be unique: {names}")
    nspace = kinds.count(SPACE)
    if not 2 <= nspace <= 3:
        out.append(f"axes must have 2 or 3 entries of type space, not {nspace}: {axes}")
    if kinds.count(TIME) > 1:
        out.append(f"axes may have at most one entry of type time: {axes}")
    if kinds.count("other") > 1:
        out.append(f"axes may have at most one entry of type channel or a custom type: {axes}")
    rank = {TIME: 0, "other": 1, SPACE: 2}
    if [rank[k] for k in kinds] != sorted(rank[k] for k in kinds):
        out.append(f"axes must be ordered time, channel (or custom), space: {names}")
    return names


def check_transforms(cts, ndim, where, out):
    """A coordinateTransformations list: exactly one scale, at most one translation after it,
    each with ndim numbers."""
    if not isinstance(cts, list) or not cts:
        out.append(f"{where}: coordinateTransformations must be a non-empty list")
        return None
    types = [c.get("type") if isinstance(c, dict) else None for c in cts]
    if types.count("scale") != 1:
        out.append(f"{where}: coordinateTransformations must hold exactly one scale: {types}")
    if types.count("translation") > 1 or any(t not in ("scale", "translation") for t in types):
        out.append(f"{where}: only one scale and at most one translation allowed: {types}")
    if "translation" in types and "scale" in types and \
            types.index("translation") < types.index("scale"):
        out.append(f"{where}: the translation must come after the scale")
    scale = None
    for c, t in zip(cts, types):
        if t in ("scale", "translation") and not _is_number_list(c.get(t), ndim):
            out.append(f"{where}: {t} must be a list of {ndim} numbers: {c.get(t)!r}")
        elif t == "scale":
            scale = c["scale"]
    return scale


def _array_meta(path, zarr_format, out):
    """(shape, dimension names or None) of the array at path, in the given Zarr format."""
    if zarr_format == 2:
        meta = _load(path / ".zarray")
        if not isinstance(meta, dict) or meta.get("zarr_format") != 2:
            out.append(f"{path.name}: not a Zarr v2 array ({meta!r})")
            return None, None
        attrs = _load(path / ".zattrs") if (path / ".zattrs").exists() else {}
        names = attrs.get("_ARRAY_DIMENSIONS") if isinstance(attrs, dict) else None
        return meta.get("shape"), names
    meta = _load(path / "zarr.json")
    if not isinstance(meta, dict) or meta.get("zarr_format") != 3 or \
            meta.get("node_type") != "array":
        out.append(f"{path.name}: not a Zarr v3 array ({meta!r})")
        return None, None
    return meta.get("shape"), meta.get("dimension_names", "absent")


def check_multiscale(root, ms, version, zarr_format, strict, dimension_names, out):
    """One multiscales entry: its axes, datasets (arrays of len(axes) dimensions, ordered
    from the highest resolution to the lowest) and transformations."""
    if not isinstance(ms, dict):
        out.append(f"a multiscales entry must be an object: {ms!r}")
        return
    for key in ("axes", "datasets"):
        if key not in ms:
            out.append(f"multiscales must contain {key!r}")
    if strict:
        for key in ("name", "type", "metadata") + (("version",) if version == "0.4" else ()):
            if key not in ms:
                out.append(f"multiscales should contain {key!r} (the strict schema requires it)")
        if "metadata" in ms and not isinstance(ms["metadata"], dict):
            out.append(f"multiscales \"metadata\" must be an object: {ms['metadata']!r}")
    if version == "0.4" and "version" in ms and ms["version"] != "0.4":
        out.append(f"multiscales version must be \"0.4\", not {ms['version']!r}")
    names = check_axes(ms.get("axes"), out)
    if names is None:
        return
    nd = len(names)
    if "coordinateTransformations" in ms:
        check_transforms(ms["coordinateTransformations"], nd, "multiscales", out)
    datasets = ms.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        out.append("datasets must be a non-empty list")
        return
    prev_shape = prev_scale = None
    for i, ds in enumerate(datasets):
        where = f"datasets[{i}]"
        if not isinstance(ds, dict) or not isinstance(ds.get("path"), str):
            out.append(f"{where} must be an object with a string \"path\"")
            continue
        scale = check_transforms(ds.get("coordinateTransformations"), nd, where, out)
        shape, dims = _array_meta(root / ds["path"], zarr_format, out)
        if shape is None:
            continue
        if len(shape) != nd:
            out.append(f"{where}: the array has {len(shape)} dimensions, the axes {nd}")
            continue
        check_dimension_names(dims, names, zarr_format, version, dimension_names, where, out)
        if prev_shape and any(a > b for a, b in zip(shape, prev_shape)):
            out.append(f"{where}: datasets must go from the highest resolution to the lowest: "
                       f"shape {shape} after {prev_shape}")
        if prev_scale and scale and any(a < b for a, b in zip(scale, prev_scale)):
            out.append(f"{where}: scale {scale} is finer than the one before, {prev_scale}")
        prev_shape, prev_scale = shape, scale or prev_scale


def check_dimension_names(dims, names, zarr_format, version, required, where, out):
    """0.5: dimension_names MUST be in each level's zarr.json and match the axes names. Zarr
    v3 and xarray's v2 convention: a list of ndim names. With required (roifs's own rule),
    v2 levels must carry _ARRAY_DIMENSIONS equal to the axes names too."""
    if zarr_format == 3:
        if dims == "absent":
            if version == "0.5":
                out.append(f"{where}: zarr.json has no dimension_names (0.5: MUST)")
            return
        if dims != names:
            out.append(f"{where}: dimension_names {dims} do not match the axes {names}")
        return
    if dims is None:
        if required:
            out.append(f"{where}: .zattrs has no _ARRAY_DIMENSIONS")
        return
    if dims != names:
        out.append(f"{where}: _ARRAY_DIMENSIONS {dims} do not match the axes {names}")


def check_image(path, strict=True, dimension_names=True):
    """The violations of the image group at path (0.5 when it has zarr.json, else 0.4)."""
    root, out = Path(path), []
    if (root / "zarr.json").exists():
        meta = _load(root / "zarr.json")
        if not isinstance(meta, dict) or meta.get("zarr_format") != 3 or \
                meta.get("node_type") != "group":
            return [f"zarr.json is not a Zarr v3 group: {meta!r}"]
        ome = (meta.get("attributes") or {}).get("ome")
        if not isinstance(ome, dict):
            return ["zarr.json attributes have no \"ome\" object"]
        if ome.get("version") != "0.5":
            out.append(f"attributes.ome.version must be \"0.5\", not {ome.get('version')!r}")
        version, zarr_format, multiscales = "0.5", 3, ome.get("multiscales")
    else:
        if not isinstance(_load(root / ".zgroup"), dict):
            return ["neither zarr.json nor .zgroup: not a Zarr group"]
        attrs = _load(root / ".zattrs")
        if not isinstance(attrs, dict):
            return [f".zattrs is not a JSON object: {attrs!r}"]
        version, zarr_format, multiscales = "0.4", 2, attrs.get("multiscales")
    if not isinstance(multiscales, list) or not multiscales:
        return out + ["multiscales must be a non-empty list"]
    for ms in multiscales:
        check_multiscale(root, ms, version, zarr_format, strict, dimension_names, out)
    return out
