"""Checkpoints (minigrad.serialization): nested objects saved and loaded exactly, keys that trouble np.savez,
files that are not ours refused with the file's name, untrusted files that run no code, and a training run
that resumes in a new process exactly where it stopped."""
import io
import json
import math
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import minigrad as mg
from minigrad import nn, optim
from minigrad.tools.serialization import CheckpointError

ROOT = Path(__file__).resolve().parent.parent


def same(a, b, where="root"):
    """Equal values of the same types, all the way down (arrays: same dtype, shape and bits)."""
    if isinstance(a, dict):  # an OrderedDict (a state dict) comes back as a dict, in the same order
        assert type(b) is dict, f"{where}: {type(a).__name__} vs {type(b).__name__}"
        assert list(a) == list(b), f"{where}: keys {list(a)} vs {list(b)}"
        assert [type(k) for k in a] == [type(k) for k in b], where
        for k in a:
            same(a[k], b[k], f"{where}/{k!r}")
        return
    assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}/{i}")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, mg.Tensor):
        assert a.requires_grad == b.requires_grad, where
        same(a.data, b.data, where)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"
        if isinstance(a, np.generic):
            assert a.dtype == b.dtype, where


def test_nested_checkpoint_round_trips_exactly(tmp_path):
    mg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)
    for p in model.parameters():
        p.grad = np.ones(p.shape, p.dtype)
    opt.step()
    obj = {
        "model": model.state_dict(), "optim": opt.state_dict(), "step": 1200, "lr": 0.1, "third": 1 / 3,
        "name": "run-α", "flags": [True, False], "nothing": None, "pair": (1, 2.5), "nan": float("nan"),
        "inf": -math.inf, "big": 2 ** 70, "np32": np.float32(1.5), "i8": np.int8(-3),
        "tensor": mg.tensor(np.arange(3.0), requires_grad=True), "empty": {}, "none_list": [], "unit": (),
        "strings": np.array(["a", "bc"]), "bools": np.array([True, False]), "0d": np.array(2.5, np.float32),
        "nested": [{"a": [np.zeros((0, 3))]}, [[], [1, [2, [3]]]]],
    }
    mg.save(obj, tmp_path / "ckpt.npz")
    same(obj, mg.load(tmp_path / "ckpt.npz"))
    with np.load(tmp_path / "ckpt.npz", allow_pickle=False) as z:  # arrays under their flattened keys
        assert "model/0.weight" in z.files and "optim/state/0/exp_avg" in z.files
        np.testing.assert_array_equal(z["model/2.bias"], model.state_dict()["2.bias"])


@pytest.mark.parametrize("keys", [
    ["file", "allow_pickle", "fix_imports", "arr_0", "kwds", "args"],  # np.savez's own parameter names
    [0, "0", 1, "1"],                      # keys that collide after str()
    ["a/b", "a%2Fb", "a", "a/b/c", ""],    # the separator and the escape itself
    ["__minigrad__", "data", "x.npy", "x"],  # the manifest's name, the root's name, the .npy suffix
])
def test_keys_that_trouble_savez_round_trip_exactly(tmp_path, keys):
    obj = {k: np.full(2, i, np.int16) for i, k in enumerate(keys)}
    obj["nested"] = {k: i for i, k in enumerate(keys)}
    mg.save(obj, tmp_path / "k.npz")
    same(obj, mg.load(tmp_path / "k.npz"))


@pytest.mark.parametrize("key", [(1, 2), 1.5, True, None])
def test_keys_of_other_types_are_refused_before_anything_is_written(tmp_path, key):
    path = tmp_path / "bad.npz"
    with pytest.raises(TypeError, match=re.escape(f"save: the dict at 'outer' has a key {key!r} of type "
                                                  f"{type(key).__name__}; keys must be str or int")):
        mg.save({"outer": {key: 1}}, path)
    assert os.listdir(tmp_path) == []  # no file, no temporary left behind


def test_save_deep_or_cyclic_structure(tmp_path):
    deep = []
    for _ in range(5000):
        deep = [deep]
    cyc = []
    cyc.append(cyc)
    for obj in (deep, cyc):
        with pytest.raises((TypeError, ValueError), match="save"):
            mg.save(obj, tmp_path / "d.npz")


def test_a_failed_save_leaves_an_existing_file_untouched(tmp_path):
    path = tmp_path / "c.npz"
    mg.save({"a": np.ones(2)}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match=r"save: cannot store function at 'b/0'"):
        mg.save({"a": np.zeros(2), "b": [lambda: 0]}, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["c.npz"]
    with pytest.raises(TypeError, match=r"save: the array at 'o' holds Python objects"):
        mg.save({"o": np.array([{}, 1], dtype=object)}, path)


def test_save_file_handling(tmp_path):
    old = os.umask(0o022)
    try:
        mg.save({"a": np.ones(2)}, tmp_path / "p.npz")
    finally:
        os.umask(old)
    assert (os.stat(tmp_path / "p.npz").st_mode & 0o777) == 0o644
    target = tmp_path / "target.npz"
    mg.save({"a": np.zeros(1)}, target)
    link = tmp_path / "link.npz"
    os.symlink(target, link)
    mg.save({"a": np.ones(1)}, link)
    assert os.path.islink(link)
    np.testing.assert_array_equal(mg.load(target)["a"], [1.])
    buf = io.BytesIO()
    mg.save({"a": np.arange(3.)}, buf)
    buf.seek(0)
    np.testing.assert_array_equal(mg.load(buf)["a"], np.arange(3.))


def test_modules_are_saved_as_state_dicts_and_plain_npz_loads(tmp_path):
    net = nn.Linear(2, 3)
    mg.save({"net": net}, tmp_path / "m.npz")
    same(dict(net.state_dict()), mg.load(tmp_path / "m.npz")["net"])
    np.savez(tmp_path / "plain.npz", w=np.arange(3), b=np.ones(2))
    d = mg.load(tmp_path / "plain.npz")
    assert sorted(d) == ["b", "w"]
    np.testing.assert_array_equal(d["w"], np.arange(3))
    np.savez(tmp_path / "old.npz", __tensor__=np.ones(3))  # a single tensor as the previous minigrad.save wrote it
    np.testing.assert_array_equal(mg.load(tmp_path / "old.npz"), np.ones(3))
    assert nn.save is mg.save and nn.load is mg.load


def test_files_that_are_not_checkpoints_are_refused_naming_the_file(tmp_path):
    torch = pytest.importorskip("torch")
    pt = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, pt)
    with pytest.raises(CheckpointError, match=rf"load: {pt} is not a minigrad checkpoint \(it is a PyTorch "
                                              r"torch.save zip: load it with torch.load"):
        mg.load(pt)
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match=rf"load: {legacy} .*Python pickle.*minigrad never unpickles"):
        mg.load(legacy)
    npy = tmp_path / "a.npy"
    np.save(npy, np.arange(3))
    with pytest.raises(CheckpointError, match=rf"load: {npy} is not a minigrad checkpoint \(it is a bare .npy"):
        mg.load(npy)
    txt = tmp_path / "notes.txt"
    txt.write_text("hello")
    with pytest.raises(CheckpointError, match=rf"load: {txt} is not a minigrad checkpoint \(it is not a zip"):
        mg.load(txt)
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("readme.md", "hi")
    with pytest.raises(CheckpointError, match=r"holds something other than .npy arrays: 'readme.md'"):
        mg.load(other)


def _damaged(tmp_path, how):
    path = tmp_path / "c.npz"
    mg.save({"w": np.arange(1000.)}, path)
    raw = bytearray(path.read_bytes())
    if how == "crc":
        i = raw.find(b"\x93NUMPY", 200) + 200
        raw[i] ^= 0xFF
        path.write_bytes(bytes(raw))
    elif how == "huge":
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("__minigrad__.npy", _npy(np.array(json.dumps(
                {"format": "minigrad-checkpoint", "version": 1, "root": {"t": "array", "e": "a"}}))))
            hdr = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }"
            hdr = hdr + " " * (63 - len(hdr) % 64) + "\n"
            z.writestr("a.npy", b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode() + b"\0" * 64)
        path.write_bytes(buf.getvalue())
    elif how == "deep":
        deep = '{"t": "list", "v": [' * 100000 + ']}' * 100000
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("__minigrad__.npy", _npy(np.array(
                '{"format": "minigrad-checkpoint", "version": 1, "root": ' + deep + '}')))
        path.write_bytes(buf.getvalue())
    return path


def _npy(arr):
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, allow_pickle=False)
    return b.getvalue()


@pytest.mark.parametrize("how", ["crc", "huge", "deep"])
def test_load_damaged_files_gives_checkpoint_error(tmp_path, how):
    with pytest.raises(CheckpointError, match="c.npz"):
        mg.load(_damaged(tmp_path, how))


def _with_manifest(path, root, extra=()):
    with zipfile.ZipFile(path, "w") as z:
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.array(json.dumps({"format": "minigrad-checkpoint", "version": 1,
                                                            "root": root})))
        z.writestr("__minigrad__.npy", buf.getvalue())
        for name, data in extra:
            z.writestr(name, data)


class _Evil:
    def __reduce__(self):  # unpickling this would create a directory
        return (os.mkdir, (str(Path(os.environ["MG_EVIL_DIR"]) / "pwned"),))


def test_an_untrusted_file_runs_no_code(tmp_path, monkeypatch):
    monkeypatch.setenv("MG_EVIL_DIR", str(tmp_path))
    buf = io.BytesIO()
    np.save(buf, np.array([_Evil()], dtype=object), allow_pickle=True)
    for root in [{"t": "array", "e": "x"}, {"t": "scalar", "e": "x"}, {"t": "tensor", "e": "x"}]:
        path = tmp_path / "evil.npz"
        _with_manifest(path, root, [("x.npy", buf.getvalue())])
        with pytest.raises(CheckpointError, match=r"entry 'x' is not a plain .npy array"):
            mg.load(path)
        assert not (tmp_path / "pwned").exists()
    np.savez(tmp_path / "evil2.npz", x=np.array([_Evil()], dtype=object))  # a plain .npz with a pickle inside
    with pytest.raises(CheckpointError, match=r"entry 'x' is not a plain .npy array"):
        mg.load(tmp_path / "evil2.npz")
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("root,pattern", [
    ({"t": "array", "e": "missing"}, r"the manifest names an entry 'missing' that the file lacks"),
    ({"t": "pickle", "v": "x"}, r"malformed manifest at '<root>'"),
    ({"t": "dict", "k": [["float", 1.5, {"t": "none"}]]}, r"malformed manifest at '<root>'"),
    ({"t": "int", "v": "12"}, r"malformed manifest"),
    ({"t": "list", "v": [{"t": "float", "v": "not a number"}]}, r"malformed manifest at '<root>/0'"),
    ("not a node", r"malformed manifest"),
])
def test_a_malformed_manifest_is_a_clear_error(tmp_path, root, pattern):
    path = tmp_path / "m.npz"
    _with_manifest(path, root)
    with pytest.raises(CheckpointError, match=rf"load: {path}: {pattern}"):
        mg.load(path)


def test_manifest_bool_key_refused(tmp_path):
    path = tmp_path / "b.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__minigrad__.npy", _npy(np.array(json.dumps(
            {"format": "minigrad-checkpoint", "version": 1, "root": {"t": "dict", "k": [["int", True, {"t": "none"}]]}}))))
    with pytest.raises(CheckpointError):
        mg.load(path)


RESUME = r'''
import sys
import numpy as np
import minigrad as mg
from minigrad import nn, optim, functional as F

mode, path, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
mg.manual_seed(0)
model = nn.Sequential(nn.Embedding(7, 5, padding_idx=0), nn.Dropout(0.2), nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 3))
opt = optim.AdamW([{"params": model[0].parameters(), "lr": 3e-3},
                   {"params": list(model[2].parameters()) + list(model[4].parameters()), "weight_decay": 0.05}],
                  lr=1e-2, amsgrad=True)
sched = optim.OneCycleLR(opt, max_lr=[5e-3, 2e-2], total_steps=2 * steps)
start = 0
if mode.startswith("resume"):
    ck = mg.load(path)
    model.load_state_dict(ck["model"])
    if mode == "resume":  # (resume-model-only: the control that shows what the optimizer state is worth)
        opt.load_state_dict(ck["optim"])
        sched.load_state_dict(ck["sched"])
    mg.random.get_rng().bit_generator.state = ck["rng"]
    start = ck["step"]
end = steps if mode == "first" else 2 * steps
for step in range(start, end):
    data = np.random.default_rng(step)  # each step's batch depends on the step only
    x = data.integers(0, 7, size=(16,))
    y = data.integers(0, 3, size=(16,))
    loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    opt.zero_grad()
    loss.backward()
    optim.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
if mode == "first":
    mg.save({"model": model.state_dict(), "optim": opt.state_dict(), "sched": sched.state_dict(),
             "rng": mg.random.get_rng().bit_generator.state, "step": end}, out)
else:
    mg.save({"model": model.state_dict(), "optim": opt.state_dict(), "lr": sched.get_last_lr()}, out)
'''


def test_training_resumes_in_a_new_process_exactly(tmp_path):
    """N steps, save, resume in a fresh interpreter for N more: bit-for-bit the uninterrupted 2N-step run."""
    script = tmp_path / "train.py"
    script.write_text(RESUME)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))

    def run(*args):
        subprocess.run([sys.executable, str(script), *args], cwd=ROOT, env=env, check=True, timeout=120)
    ck = str(tmp_path / "half.npz")
    run("full", "-", "8", str(tmp_path / "full.npz"))
    run("first", "-", "8", ck)
    run("resume", ck, "8", str(tmp_path / "resumed.npz"))
    full, resumed = mg.load(tmp_path / "full.npz"), mg.load(tmp_path / "resumed.npz")
    same(full, resumed)  # every weight, every optimizer buffer, the lrs: equal to the last bit
    assert full["optim"]["state"][0]["step"] == 16
    half = mg.load(ck)["model"]
    assert all(not np.array_equal(half[k], v) for k, v in full["model"].items())  # the last 8 steps moved them
    # the control: the same weights without the optimizer and schedule state do not resume the run
    run("resume-model-only", ck, "8", str(tmp_path / "control.npz"))
    control = mg.load(tmp_path / "control.npz")["model"]
    assert all(not np.array_equal(control[k], v) for k, v in full["model"].items())
