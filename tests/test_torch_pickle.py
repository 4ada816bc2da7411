"""PyTorch zip checkpoints read without PyTorch: bit-exact against torch.load, memory-mapped, hostile pickles refused."""

import gc
import json
import mmap
import os
import pickle
import subprocess
import zipfile

import ml_dtypes
import numpy as np
import psutil
import pytest
import torch
from safetensors.torch import save_file as torch_save_file

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap, Rule, conv, linear, rules
from vidax.checkpoint.loader import load_params
from vidax.checkpoint.reader import CheckpointReader
from vidax.checkpoint.torch_pickle import TorchCheckpointFile
from vidax.core.params import ParamSpec

_NP = {
    torch.float32: np.float32, torch.float16: np.float16, torch.bfloat16: ml_dtypes.bfloat16,
    torch.float64: np.float64, torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16,
    torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_,
    torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn, torch.uint16: np.uint16,
}


def _bytes(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _assert_same(got: np.ndarray, ref: torch.Tensor):
    """Same shape, same dtype, same bits (bf16 and NaNs included)."""
    assert got.shape == tuple(ref.shape)
    assert got.dtype == np.dtype(_NP[ref.dtype]), (got.dtype, ref.dtype)
    assert np.ascontiguousarray(got).tobytes() == _bytes(ref)


def _roundtrip(obj, path, expected: dict):
    """Save with torch, read with vidax, compare to torch.load(weights_only=True)."""
    torch.save(obj, path)
    ref = torch.load(path, weights_only=True)
    f = TorchCheckpointFile(path)
    assert f.keys() == list(expected)
    for k, pick in expected.items():
        assert f.shape(k) == tuple(pick(ref).shape) and f.dtype(k) == _NP[pick(ref).dtype]
        _assert_same(f.get(k), pick(ref))
    return f


def test_every_dtype_bit_exact(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, generator=g) * 100
    x[0, 0] = float("nan")
    tensors = {
        "f32": x, "f16": x.half(), "bf16": x.bfloat16(), "f64": x.double(),
        "i64": x.long(), "i32": x.int(), "i16": x.short(), "i8": x.to(torch.int8),
        "u8": torch.randint(0, 256, (4, 2), generator=g, dtype=torch.uint8), "bool": x > 0,
        # Dtypes without a legacy storage class go through _rebuild_tensor_v3 with an untyped storage.
        "f8": (x / 100).to(torch.float8_e4m3fn), "u16": torch.randint(0, 60000, (7,), generator=g).to(torch.uint16),
    }
    f = _roundtrip(tensors, tmp_path / "all.pth", {k: (lambda r, k=k: r[k]) for k in tensors})
    # bf16 explicitly bitwise, as uint16 words.
    np.testing.assert_array_equal(f.get("bf16").view(np.uint16), tensors["bf16"].view(torch.int16).numpy().view(np.uint16))
    assert f.get("bf16").dtype == ml_dtypes.bfloat16


def test_views_shared_storage_scalars_and_empty(tmp_path):
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    obj = {
        "t": base.t(),                      # transpose: strides (1, 10)
        "step": base[::2, 1::3],            # slice with steps, storage offset 1
        "row1": base[1],                    # shares the storage, offset 10
        "rows": base[2:4],                  # shares the storage, offset 20
        "bcast": torch.ones(3, 1).expand(3, 4),  # stride 0
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.empty(0, 3),
        "empty_i": torch.zeros(2, 0, dtype=torch.int32),
    }
    f = _roundtrip(obj, tmp_path / "views.pt", {k: (lambda r, k=k: r[k]) for k in obj})
    for k in ("t", "step", "bcast"):
        assert not f.get(k).flags.c_contiguous and not f.get(k).flags.writeable
    # One storage for all views of `base`: the arrays overlap in the mapping, at different offsets.
    assert np.shares_memory(f.get("t"), f.get("row1")) and np.shares_memory(f.get("t"), f.get("rows"))
    assert not np.shares_memory(f.get("row1"), f.get("rows"))
    assert f.get("rows").ctypes.data - f.get("row1").ctypes.data == 10 * 4
    assert len(zipfile.ZipFile(tmp_path / "views.pt").namelist()) < 12  # base stored once, not per view
    assert f.get("scalar").shape == () and f.get("scalar")[()] == 2.5


def test_module_state_dict_and_wrappers(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(), torch.nn.Linear(4, 3))
    model[0].weight.data = model[0].weight.data.to(torch.bfloat16).float()
    sd = model.state_dict()  # OrderedDict of Parameters and buffers (num_batches_tracked: int64 0-d)
    picks = {k: (lambda r, k=k: r[k]) for k in sd}
    _roundtrip(sd, tmp_path / "sd.pth", picks)
    # The wrapper chain is unwrapped; non-tensor leaves are ignored.
    nested = {"model": {"state_dict": sd}, "epoch": 3, "name": "run", "lrs": [0.1, 0.01], "dtype": torch.float32}
    _roundtrip(nested, tmp_path / "wrapped.pth", {k: (lambda r, k=k: r["model"]["state_dict"][k]) for k in sd})
    # Parameters saved directly, and a tensor with a Python attribute (_rebuild_from_type_v2).
    p = torch.nn.Parameter(torch.randn(3))
    t = torch.randn(2)
    t.note = "x"
    picks = {"p": lambda r: r["ema"]["p"], "t": lambda r: r["ema"]["t"]}
    _roundtrip({"ema": {"p": p, "t": t}}, tmp_path / "params.pth", picks)
    # Two tensor-bearing entries: nothing is unwrapped, nested containers become dotted keys.
    both = {"model": sd, "optimizer": {"state": {0: {"exp_avg": torch.ones(2)}}, "param_groups": [{"lr": 0.1}]},
            "extra": [torch.zeros(1), (torch.ones(1),)]}
    f = TorchCheckpointFile(_save(both, tmp_path / "both.pth"))
    assert f.keys() == [f"model.{k}" for k in sd] + ["optimizer.state.0.exp_avg", "extra.0", "extra.1.0"]
    # A wrapper name holding a tensor (not a dict) is a tensor name, not a wrapper.
    f = TorchCheckpointFile(_save({"model": torch.ones(2), "epoch": 1}, tmp_path / "m.pth"))
    assert f.keys() == ["model"]


def _save(obj, path):
    torch.save(obj, path)
    return path


def _reaches_mmap(arr) -> bool:
    a = arr
    while a is not None:
        if isinstance(a, (np.memmap, mmap.mmap)):
            return True
        a = getattr(a, "base", None)
    return False


def test_memory_mapped_no_copy(tmp_path):
    obj = {"w": torch.arange(1000, dtype=torch.float32), "v": torch.arange(20.0).reshape(4, 5).t()}
    path = _save(obj, tmp_path / "m.pt")
    f = TorchCheckpointFile(path)
    w = f.get("w")
    assert not w.flags.owndata and not w.flags.writeable and _reaches_mmap(w)
    assert _reaches_mmap(f.get("v")) and not f.get("v").flags.owndata
    # get() is a view: two calls share memory.
    assert np.shares_memory(f.get("w"), f.get("w"))


def test_large_file_does_not_raise_rss(tmp_path):
    n = 16 * 2**20  # 64 MB of float32
    path = tmp_path / "big.pth"
    big = torch.full((n,), 1.5)
    torch.save({"model": {"big": big}, "step": 1}, path)
    del big
    gc.collect()
    proc = psutil.Process()
    before = proc.memory_info().rss
    f = CheckpointReader(path)
    arr = f.get("big")
    assert arr.shape == (n,) and float(arr[123]) == 1.5 and float(arr[-1]) == 1.5
    grown = proc.memory_info().rss - before
    assert grown < 24 * 2**20, f"opening a 64 MB checkpoint grew RSS by {grown / 2**20:.1f} MB"


# --------------------------------------------------------------------------- hostile pickles


class _Evil:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _global_call(module: str, name: str, arg: str) -> bytes:
    """Protocol-2 pickle of ``module.name(arg)``, written opcode by opcode."""
    a = arg.encode()
    return b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"X" + len(a).to_bytes(4, "little") + a + b"\x85R."


def _torch_like_zip(path, data_pkl: bytes, storages: dict | None = None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", data_pkl)
        z.writestr("archive/byteorder", "little")
        for key, raw in (storages or {}).items():
            z.writestr(f"archive/data/{key}", raw)
        z.writestr("archive/version", "3\n")
    return path


def _payloads(marker):
    touch = f"touch {marker}"
    py = f"open({str(marker)!r}, 'w').close()"
    return {
        "posix.system": pickle.dumps(_Evil(os.system, (touch,)), protocol=2),
        "os.system": _global_call("os", "system", touch),
        "builtins.exec": pickle.dumps(_Evil(exec, (py,)), protocol=2),
        "builtins.eval": _global_call("builtins", "eval", py),
        "subprocess.Popen": pickle.dumps(_Evil(subprocess.Popen, (["touch", str(marker)],)), protocol=2),
        "posix.system  ": pickle.dumps(_Evil(os.system, (touch,)), protocol=0),  # text protocol, no \x80 header
        # Hidden inside an ordinary-looking checkpoint dict.
        "posix.system ": pickle.dumps({"epoch": 1, "model": {"w": _Evil(os.system, (touch,))}}, protocol=2),
    }


def test_payloads_are_live(tmp_path):
    """The hostile pickles below really run their command under a plain unpickler (so refusing them means something)."""
    marker = tmp_path / "MARKER"
    pickle.loads(_payloads(marker)["posix.system"])
    assert marker.exists()


@pytest.mark.parametrize("bare", [False, True], ids=["zip", "bare"])
def test_hostile_pickles_refused_before_running(tmp_path, bare):
    marker = tmp_path / "MARKER"
    for name, payload in _payloads(marker).items():
        path = tmp_path / f"evil_{name.strip().replace('.', '_')}.pth"
        if bare:
            path.write_bytes(payload)
        else:
            _torch_like_zip(path, payload)
        with pytest.raises(CheckpointError) as e:
            TorchCheckpointFile(path)
        assert path.name in str(e.value) and f"global {name.strip()}" in str(e.value)
        assert not marker.exists(), f"{name}: the payload ran"
    # Through the folder reader too.
    folder = tmp_path / "folder"
    folder.mkdir()
    _torch_like_zip(folder / "pytorch_model.bin", _payloads(marker)["os.system"])
    with pytest.raises(CheckpointError, match="pytorch_model.bin.*global os.system"):
        CheckpointReader(folder)
    assert not marker.exists()


def test_allowed_globals_misused_are_corrupt_not_crashes(tmp_path):
    # BUILD on a storage-class marker (tries to set attributes), and a rebuild with nonsense arguments.
    build = b"\x80\x02ctorch\nFloatStorage\n}X\x01\x00\x00\x00aK\x01sb."
    rebuild = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nK\x01K\x02K\x03K\x04\x89NtR."
    for i, payload in enumerate([build, rebuild]):
        with pytest.raises(CheckpointError, match=f"m{i}.pth"):
            TorchCheckpointFile(_torch_like_zip(tmp_path / f"m{i}.pth", payload))


def _one_tensor_pkl(numel: int, offset: int, size: int) -> bytes:
    """``_rebuild_tensor_v2(<FloatStorage data/0 of numel>, offset, (size,), (1,), False, None)``, by hand."""
    return (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
            b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpuK" + bytes([numel]) + b"tQK" + bytes([offset]) + b"K"
            + bytes([size]) + b"\x85K\x01\x85\x89NtR.")


def test_tensor_or_storage_beyond_its_record_is_refused(tmp_path):
    six = np.arange(6, dtype=np.float32).tobytes()
    ok = TorchCheckpointFile(_torch_like_zip(tmp_path / "ok.pth", _one_tensor_pkl(6, 2, 4), {"0": six}))
    np.testing.assert_array_equal(ok.get(""), [2, 3, 4, 5])  # a bare tensor gets the key ""
    with pytest.raises(CheckpointError, match="short.pth.*data/0 holds 16 bytes"):
        TorchCheckpointFile(_torch_like_zip(tmp_path / "short.pth", _one_tensor_pkl(6, 2, 4), {"0": six[:16]}))
    with pytest.raises(CheckpointError, match="past.pth.*reaches byte 28 of storage data/0"):
        TorchCheckpointFile(_torch_like_zip(tmp_path / "past.pth", _one_tensor_pkl(6, 2, 5), {"0": six}))


# --------------------------------------------------------------------------- corrupt files


def _rewrite_zip(src, dst, drop):
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zo:
        for info in zi.infolist():
            if not drop(info.filename):
                zo.writestr(info.filename, zi.read(info.filename))
    return dst


def test_corrupt_files_name_the_file_and_the_fix(tmp_path):
    good = _save({"a": torch.ones(3), "b": torch.zeros(2, dtype=torch.int64)}, tmp_path / "good.pth")
    data = good.read_bytes()
    (tmp_path / "trunc.pth").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="trunc.pth.*(truncated|corrupt)"):
        TorchCheckpointFile(tmp_path / "trunc.pth")
    _rewrite_zip(good, tmp_path / "nopkl.pth", lambda n: n.endswith("data.pkl"))
    with pytest.raises(CheckpointError, match="nopkl.pth.*data.pkl"):
        TorchCheckpointFile(tmp_path / "nopkl.pth")
    _rewrite_zip(good, tmp_path / "nostorage.pth", lambda n: n.endswith("data/1"))
    with pytest.raises(CheckpointError, match="nostorage.pth.*data/1 is missing"):
        TorchCheckpointFile(tmp_path / "nostorage.pth")
    _rewrite_zip(good, tmp_path / "big_endian.pth", lambda n: False)
    with zipfile.ZipFile(tmp_path / "big_endian.pth", "a") as z, pytest.warns(UserWarning):
        z.writestr("good/byteorder", "big")  # a second, later record wins in zipfile's name table
    with pytest.raises(CheckpointError, match="big_endian.pth.*'big'-endian.*little-endian"):
        TorchCheckpointFile(tmp_path / "big_endian.pth")
    torch.save({"a": torch.ones(3)}, tmp_path / "legacy.pth", _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match="legacy.pth: legacy .*non-zip.*torch.save.*safetensors"):
        TorchCheckpointFile(tmp_path / "legacy.pth")
    (tmp_path / "plain.pkl").write_bytes(pickle.dumps({"a": [1, 2, 3]}, protocol=2))
    with pytest.raises(CheckpointError, match="plain.pkl: a plain pickle"):
        TorchCheckpointFile(tmp_path / "plain.pkl")
    with pytest.raises(CheckpointError, match="missing.pth: file not found"):
        TorchCheckpointFile(tmp_path / "missing.pth")


# --------------------------------------------------------------------------- the reader and the loader


def _model_sd():
    torch.manual_seed(0)
    lin, cv = torch.nn.Linear(3, 4), torch.nn.Conv3d(2, 5, (1, 2, 3))
    return {"blocks.0.fc.weight": lin.weight, "blocks.0.fc.bias": lin.bias,
            "blocks.1.fc.weight": torch.nn.Parameter(2 * lin.weight.detach()), "blocks.1.fc.bias": lin.bias,
            "conv.weight": cv.weight, "conv.bias": cv.bias, "table": torch.randn(1, 2, 4).bfloat16()}


def test_load_params_from_pth_equals_safetensors(tmp_path):
    sd = _model_sd()
    km = KeyMap(rules(linear("blocks.{i}.fc", "blocks/fc"), conv("conv", "conv"), Rule("table", "table")))
    specs = {"blocks": {"fc": {"kernel": ParamSpec((2, 3, 4), axes=("layers", None, None)),
                               "bias": ParamSpec((2, 4), axes=("layers", None))}},
             "conv": {"kernel": ParamSpec((1, 2, 3, 2, 5)), "bias": ParamSpec((5,))},
             "table": ParamSpec((1, 2, 4), fp32=True)}
    (tmp_path / "st").mkdir()
    (tmp_path / "pt").mkdir()
    torch_save_file({k: v.detach().clone() for k, v in sd.items()}, tmp_path / "st" / "model.safetensors")
    torch.save({"state_dict": sd, "epoch": 7}, tmp_path / "pt" / "diffusion_pytorch_model.bin")
    for dtype in (np.float32, ml_dtypes.bfloat16):
        a = load_params(CheckpointReader(tmp_path / "st"), km, specs, dtype, place=False)
        b = load_params(CheckpointReader(tmp_path / "pt"), km, specs, dtype, place=False)
        for x, y in zip(_leaves(a), _leaves(b)):
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def _leaves(tree):
    return [tree] if not isinstance(tree, dict) else [x for k in sorted(tree) for x in _leaves(tree[k])]


def test_reader_folders_sharded_and_ambiguous(tmp_path):
    sd = {k: v.detach() for k, v in _model_sd().items()}
    names = list(sd)
    shard = tmp_path / "sharded"
    shard.mkdir()
    torch.save({k: sd[k] for k in names[:3]}, shard / "pytorch_model-00001-of-00002.bin")
    torch.save({k: sd[k] for k in names[3:]}, shard / "pytorch_model-00002-of-00002.bin")
    weight_map = {k: f"pytorch_model-0000{1 if i < 3 else 2}-of-00002.bin" for i, k in enumerate(names)}
    (shard / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    # Training state next to the weights is not read (it would be refused: it pickles arbitrary objects).
    (shard / "training_args.bin").write_bytes(pickle.dumps(_Evil(os.system, ("true",)), protocol=2))
    r = CheckpointReader(shard)
    assert sorted(r.keys()) == sorted(names)
    for k in names:
        _assert_same(r.get(k), sd[k])
    (shard / "pytorch_model-00002-of-00002.bin").unlink()
    with pytest.raises(CheckpointError, match="pytorch_model-00002-of-00002.bin.*missing"):
        CheckpointReader(shard)
    # Single named weights file beside training state; a single .pt file given directly.
    single = tmp_path / "single"
    single.mkdir()
    torch.save(sd, single / "pytorch_model.bin")
    (single / "training_args.bin").write_bytes(b"junk")
    assert CheckpointReader(single).keys() == names
    assert CheckpointReader(single / "pytorch_model.bin").keys() == names
    # Two unnamed torch files and no index: ambiguous.
    amb = tmp_path / "amb"
    amb.mkdir()
    torch.save(sd, amb / "a.pt")
    torch.save(sd, amb / "b.pt")
    with pytest.raises(CheckpointError, match="several PyTorch files"):
        CheckpointReader(amb)
    # The old import path still works and is the same class.
    from vidax.checkpoint.safetensors_io import CheckpointReader as Old

    assert Old is CheckpointReader


def test_bytes_and_odd_values_are_plain_leaves(tmp_path):
    obj = {"w": torch.ones(2), "blob": b"\x00\xffbytes", "s": {1, 2}, "size": torch.Size([2, 3]), "c": 1 + 2j,
           "dev": torch.device("cpu"), "ba": bytearray(b"ab")}
    f = _roundtrip(obj, tmp_path / "odd.pth", {"w": lambda r: r["w"]})
    assert f.keys() == ["w"]
