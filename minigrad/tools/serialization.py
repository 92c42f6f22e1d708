"""Checkpoints: save(obj, path) / load(path) for nested dicts, lists and tuples of arrays, Tensors, numbers,
strings, bools and None, in one .npz file, never pickled.

The file is an ordinary .npz (a zip of .npy arrays): each array sits under its flattened key ("model/0.weight",
"optim/state/0/exp_avg"; '/' and '%' inside a key are written %2F and %25), and the entry "__minigrad__" holds
a JSON manifest of the tree: container kinds, key types (so 0 and "0" stay apart), and the numbers, strings
and bools themselves (a float's repr is exact, so it comes back bit for bit). Loading reads arrays with
allow_pickle=False and the manifest with json: an untrusted file cannot run code.

    minigrad.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 1200}, "ckpt.npz")
    ckpt = minigrad.load("ckpt.npz")
"""
import json
import math
import os
import tempfile
import zipfile
import zlib

import numpy as np

from ..tensor import Tensor

MANIFEST = "__minigrad__"
FORMAT = "minigrad-checkpoint"
VERSION = 1
_PLAIN = {"bool": bool, "int": int, "str": str}  # kept as themselves in the manifest (bool first: a bool is an int)


class CheckpointError(ValueError):
    """A file that is not a minigrad checkpoint, or one whose contents do not fit the format."""


# ---- save --------------------------------------------------------------------------------------------

def _component(key):
    return str(key).replace("%", "%25").replace("/", "%2F")


def _where(path):
    return "/".join(_component(k) for k in path) or "<root>"


class _Writer:
    def __init__(self):
        self.arrays = {}  # entry name -> ndarray, in order
        self.open = set()  # ids of the containers on the current path (a cycle would recurse forever)

    def entry(self, path, arr):
        name = "/".join(_component(k) for k in path) or "data"
        base, n = name, 1
        while name in self.arrays or name == MANIFEST:  # unique names; the manifest says which is which
            n += 1
            name = f"{base}~{n}"
        if arr.dtype == object:
            raise TypeError(f"save: the array at '{_where(path)}' holds Python objects (dtype object); only "
                            f"numeric, bool and string arrays can be saved without pickle")
        self.arrays[name] = arr
        return name

    def node(self, obj, path):
        if hasattr(obj, "named_parameters") and hasattr(obj, "state_dict"):  # a Module (duck-typed: nn is above)
            obj = obj.state_dict()  # a module is saved as its state dict (as the README says)
        if isinstance(obj, Tensor):
            return {"t": "tensor", "e": self.entry(path, obj.data), "rg": obj.requires_grad}
        if isinstance(obj, np.ndarray):
            return {"t": "array", "e": self.entry(path, obj)}
        if isinstance(obj, np.generic):  # a NumPy scalar keeps its dtype
            return {"t": "scalar", "e": self.entry(path, np.asarray(obj))}
        if obj is None:
            return {"t": "none"}
        for t, kind in _PLAIN.items():
            if isinstance(obj, kind):
                return {"t": t, "v": obj}
        if isinstance(obj, float):
            return {"t": "float", "v": repr(obj)}  # repr round-trips exactly, inf and nan included
        if isinstance(obj, (dict, list, tuple)):
            if id(obj) in self.open:
                raise ValueError(f"save: the container at '{_where(path)}' contains itself (a cycle), which a "
                                 f"checkpoint cannot hold")
            self.open.add(id(obj))
            try:
                return self.container(obj, path)
            finally:
                self.open.discard(id(obj))
        raise TypeError(f"save: cannot store {type(obj).__name__} at '{_where(path)}' without pickle; expected "
                        f"arrays, Tensors, numbers, strings, bools, None, or dicts/lists/tuples of them "
                        f"(a Module is saved as its state_dict; for an optimizer save opt.state_dict())")

    def container(self, obj, path):
        if isinstance(obj, dict):
            items = []
            for k, v in obj.items():
                if isinstance(k, bool) or not isinstance(k, (str, int, np.integer)):
                    raise TypeError(f"save: the dict at '{_where(path)}' has a key {k!r} of type {type(k).__name__}; "
                                    f"keys must be str or int")
                kind = "str" if isinstance(k, str) else "int"
                k = k if kind == "str" else int(k)
                items.append([kind, k, self.node(v, path + (k,))])
            return {"t": "dict", "k": items}
        return {"t": "list" if isinstance(obj, list) else "tuple",
                "v": [self.node(v, path + (i,)) for i, v in enumerate(obj)]}


def save(obj, path):
    """Write obj (a Module's state dict, a Tensor, an array, or nested dicts/lists of those and of numbers,
    strings, bools) to `path` as one .npz, written to a temporary file first so a failure leaves no half file."""
    w = _Writer()
    try:
        root = w.node(obj, ())
        manifest = json.dumps({"format": FORMAT, "version": VERSION, "root": root})
    except RecursionError:
        raise ValueError("save: the structure is nested too deeply to store (Python's recursion limit); "
                         "flatten it (e.g. a dict of arrays)") from None
    entries = [(MANIFEST, np.array(manifest))] + list(w.arrays.items())
    if hasattr(path, "write"):  # a file-like object (io.BytesIO, an open file): written in place
        _write_zip(path, entries)
        return
    path = os.path.realpath(os.fspath(path))  # through a symlink: its target gets the new contents
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".minigrad-", suffix=".tmp", dir=folder)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # the mode an ordinary open() gives (mkstemp's is 0600)
        with os.fdopen(fd, "wb") as f:
            _write_zip(f, entries)
        os.replace(tmp, path)  # no suffix is added behind the caller's back
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _write_zip(f, entries):
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, arr in entries:
            with z.open(name + ".npy", "w", force_zip64=True) as out:
                np.lib.format.write_array(out, arr, allow_pickle=False)


# ---- load --------------------------------------------------------------------------------------------

def _not_ours(path, why):
    return CheckpointError(f"load: {path} is not a minigrad checkpoint ({why}); expected an .npz written by "
                           f"minigrad.save (or numpy.savez)")


def _read(z, name, path):
    try:
        info = z.getinfo(name + ".npy")
        with z.open(info) as f:  # the header first: a declared shape larger than the entry is refused
            fmt = np.lib.format
            header = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(fmt.read_magic(f))
            shape, _, dtype = header(f) if header else ((), False, np.dtype(np.uint8))
            if dtype.itemsize and math.prod(shape) * dtype.itemsize > info.file_size:
                raise CheckpointError(f"load: {path}: entry '{name}' declares shape {shape} of {dtype}, more "
                                      f"data than its {info.file_size} bytes (a damaged file)")
        with z.open(info) as f:
            return np.lib.format.read_array(f, allow_pickle=False)
    except KeyError:
        raise CheckpointError(f"load: {path}: the manifest names an entry '{name}' that the file lacks") from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        raise CheckpointError(f"load: {path}: entry '{name}' is damaged ({e})") from None
    except ValueError as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"load: {path}: entry '{name}' is not a plain .npy array ({e})") from None


def _build(node, z, path, where="<root>"):
    bad = CheckpointError(f"load: {path}: malformed manifest at '{where}': {str(node)[:80]}")
    if not isinstance(node, dict) or "t" not in node:
        raise bad
    t = node["t"]
    try:
        if t == "dict":
            out = {}
            for kind, k, v in node["k"]:
                if kind not in ("str", "int") or type(k) is not (str if kind == "str" else int):  # not a bool
                    raise bad
                out[k] = _build(v, z, path, f"{where}/{k}")
            return out
        if t in ("list", "tuple"):
            items = [_build(v, z, path, f"{where}/{i}") for i, v in enumerate(node["v"])]
            return items if t == "list" else tuple(items)
        if t == "array":
            return _read(z, node["e"], path)
        if t == "tensor":
            arr = _read(z, node["e"], path)
            return Tensor(arr, requires_grad=bool(node.get("rg")) and arr.dtype.kind == "f")
        if t == "scalar":
            return _read(z, node["e"], path)[()]
        if t == "none":
            return None
        if t in _PLAIN:
            v = node["v"]
            if type(v) is not _PLAIN[t]:
                raise bad
            return v
        if t == "float":
            return float(node["v"])
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise bad from None
    raise bad


def load(path):
    """Read what save() wrote and return it as it was saved (dicts, lists, tuples, arrays, Tensors, numbers,
    strings). A plain NumPy .npz comes back as a dict of arrays. Anything else is refused with an error that
    names the file, before any data is returned."""
    if hasattr(path, "read"):  # a file-like object (io.BytesIO, an open file)
        return _load(path, getattr(path, "name", "<file object>"))
    path = os.fspath(path)
    return _load(path, path)


def _load(source, path):
    if not zipfile.is_zipfile(source):
        if hasattr(source, "read"):
            source.seek(0)
            head = source.read(8)
        else:
            with open(source, "rb") as f:
                head = f.read(8)
        if head.startswith(b"\x93NUMPY"):
            raise _not_ours(path, "it is a bare .npy array: read it with numpy.load")
        if head[:1] == b"\x80":
            raise _not_ours(path, "it is a Python pickle (e.g. an old-style torch.save file); minigrad never "
                                  "unpickles, since that can run code")
        raise _not_ours(path, "it is not a zip archive")
    if hasattr(source, "seek"):
        source.seek(0)
    try:
        with zipfile.ZipFile(source) as z:
            return _load_zip(z, path)
    except zipfile.BadZipFile as e:
        raise CheckpointError(f"load: {path}: the zip archive is damaged ({e})") from None
    except RecursionError:
        raise CheckpointError(f"load: {path}: the manifest is nested too deeply to read") from None


def _load_zip(z, path):
    names = z.namelist()
    if any(n.endswith("data.pkl") or "/data/" in n for n in names):
        raise _not_ours(path, "it is a PyTorch torch.save zip: load it with torch.load, convert the tensors "
                              "with .numpy(), and pass the arrays to load_state_dict")
    if not names or not all(n.endswith(".npy") for n in names):
        odd = next((n for n in names if not n.endswith(".npy")), "no entries")
        raise _not_ours(path, f"its zip holds something other than .npy arrays: {odd!r}")
    if MANIFEST + ".npy" not in names:  # a NumPy .npz (or one from an older minigrad): a dict of arrays
        d = {n[:-4]: _read(z, n[:-4], path) for n in names}
        return d["__tensor__"] if list(d) == ["__tensor__"] else d
    raw = _read(z, MANIFEST, path)
    try:
        manifest = json.loads(str(raw[()]))
    except (ValueError, TypeError):
        raise CheckpointError(f"load: {path}: the manifest is not valid JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or "root" not in manifest:
        raise CheckpointError(f"load: {path}: the manifest is not a minigrad checkpoint manifest")
    if manifest.get("version") != VERSION:
        raise CheckpointError(f"load: {path}: checkpoint format version {manifest.get('version')!r}; this "
                              f"minigrad reads version {VERSION}")
    return _build(manifest["root"], z, path)
