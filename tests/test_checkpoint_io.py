"""Safetensors reading (single, sharded, bf16), strict key-map loading, and clear errors for bad files."""

import json

import ml_dtypes
import numpy as np
import pytest
import torch
from safetensors.torch import save_file as torch_save_file

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap, Rule, conv, linear, rules, to_layout
from vidax.checkpoint.loader import DictReader, load_params
from vidax.checkpoint.safetensors_io import CheckpointReader, SafetensorsFile
from vidax.checkpoint.writer import to_state_dict
from vidax.core.params import ParamSpec


def _torch_tensors():
    g = torch.Generator().manual_seed(0)
    return {
        "a.weight": torch.randn(5, 3, generator=g),
        "b.bf16": torch.randn(4, 6, generator=g).to(torch.bfloat16),
        "c.half": torch.randn(7, generator=g).to(torch.float16),
        "d.int": torch.arange(6, dtype=torch.int64).reshape(2, 3),
    }


def test_reader_matches_torch_bit_exactly_including_bf16(tmp_path):
    tensors = _torch_tensors()
    torch_save_file(tensors, tmp_path / "model.safetensors")
    reader = CheckpointReader(tmp_path)
    assert sorted(reader.keys()) == sorted(tensors)
    for k, t in tensors.items():
        got = reader.get(k)
        if t.dtype == torch.bfloat16:
            assert got.dtype == ml_dtypes.bfloat16
            np.testing.assert_array_equal(got.view(np.uint16), t.view(torch.int16).numpy().view(np.uint16))
        else:
            np.testing.assert_array_equal(got, t.numpy())


def test_sharded_index_and_missing_shard(tmp_path):
    tensors = _torch_tensors()
    names = sorted(tensors)
    torch_save_file({k: tensors[k] for k in names[:2]}, tmp_path / "m-00001-of-00002.safetensors")
    torch_save_file({k: tensors[k] for k in names[2:]}, tmp_path / "m-00002-of-00002.safetensors")
    weight_map = {k: ("m-00001-of-00002.safetensors" if k in names[:2] else "m-00002-of-00002.safetensors") for k in names}
    (tmp_path / "m.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    reader = CheckpointReader(tmp_path)
    np.testing.assert_array_equal(reader.get("a.weight"), tensors["a.weight"].numpy())
    (tmp_path / "m-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="m-00002-of-00002.safetensors.*missing"):
        CheckpointReader(tmp_path)


def test_corrupt_and_truncated_files_name_the_file(tmp_path):
    torch_save_file(_torch_tensors(), tmp_path / "ok.safetensors")
    data = (tmp_path / "ok.safetensors").read_bytes()
    (tmp_path / "trunc.safetensors").write_bytes(data[: len(data) - 10])
    with pytest.raises(CheckpointError, match="trunc.safetensors.*(truncated|corrupt)"):
        SafetensorsFile(tmp_path / "trunc.safetensors")
    bad = bytearray(data)
    bad[8:12] = b"\xff\xfe{["
    (tmp_path / "bad.safetensors").write_bytes(bytes(bad))
    with pytest.raises(CheckpointError, match="bad.safetensors.*corrupt"):
        SafetensorsFile(tmp_path / "bad.safetensors")
    (tmp_path / "tiny.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(CheckpointError, match="tiny.safetensors"):
        SafetensorsFile(tmp_path / "tiny.safetensors")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="no \\*.safetensors"):
        CheckpointReader(empty)


def test_layouts_fill_every_slot_once_and_cast_on_host():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 4)
    cv = torch.nn.Conv3d(2, 5, (1, 2, 3))
    sd = {"blocks.0.fc.weight": lin.weight, "blocks.0.fc.bias": lin.bias,
          "blocks.1.fc.weight": 2 * lin.weight, "blocks.1.fc.bias": lin.bias,
          "conv.weight": cv.weight, "conv.bias": cv.bias, "table": torch.randn(1, 2, 4)}
    sd = {k: v.detach().numpy() for k, v in sd.items()}
    km = KeyMap(rules(linear("blocks.{i}.fc", "blocks/fc"), conv("conv", "conv"), Rule("table", "table")))
    specs = {"blocks": {"fc": {"kernel": ParamSpec((2, 3, 4), axes=("layers", None, None)),
                               "bias": ParamSpec((2, 4), axes=("layers", None))}},
             "conv": {"kernel": ParamSpec((1, 2, 3, 2, 5)), "bias": ParamSpec((5,))},
             "table": ParamSpec((1, 2, 4), fp32=True)}
    p = load_params(DictReader(sd), km, specs, ml_dtypes.bfloat16, place=False)
    np.testing.assert_array_equal(p["blocks"]["fc"]["kernel"][1], (2 * sd["blocks.0.fc.weight"]).T.astype(ml_dtypes.bfloat16))
    assert p["table"].dtype == np.float32 and p["conv"]["kernel"].dtype == ml_dtypes.bfloat16
    # The conv kernel as a channels-last DHWIO conv gives torch's result.
    x = torch.randn(1, 2, 1, 4, 5)
    ref = torch.nn.functional.conv3d(x, cv.weight, cv.bias).detach().numpy()
    import jax

    p32 = load_params(DictReader(sd), km, specs, np.float32, place=False)
    k32 = p32["conv"]
    out = jax.lax.conv_general_dilated(x.numpy().transpose(0, 2, 3, 4, 1), k32["kernel"], (1, 1, 1), "VALID",
                                       dimension_numbers=("NDHWC", "DHWIO", "NDHWC")) + k32["bias"]
    np.testing.assert_allclose(np.asarray(out).transpose(0, 4, 1, 2, 3), ref, rtol=1e-5, atol=1e-5)
    # The writer is the exact inverse of the loader.
    back = to_state_dict(p32, km, specs)
    assert sorted(back) == sorted(sd)
    for k in sd:
        np.testing.assert_array_equal(back[k], sd[k])


def test_block_index_past_the_model_is_unexpected():
    km = KeyMap(linear("blocks.{i}.fc", "blocks/fc", bias=False))
    specs = {"blocks": {"fc": {"kernel": ParamSpec((1, 2, 2), axes=("layers", None, None))}}}
    sd = {"blocks.0.fc.weight": np.zeros((2, 2), np.float32), "blocks.3.fc.weight": np.zeros((2, 2), np.float32)}
    with pytest.raises(CheckpointError, match="blocks.3.fc.weight \\(block 3, but the model has 1 blocks\\)"):
        load_params(DictReader(sd), km, specs)


def test_parts_read_only_their_tensors_and_still_check_the_whole_checkpoint():
    """``load_params(parts=...)`` (a VAE's decoder side): only those subtrees are read and returned, yet a
    checkpoint that does not match the whole model still raises, and an unknown part is named."""
    rng = np.random.default_rng(0)
    sd = {f"{m}.fc.{n}": rng.standard_normal(s).astype(np.float32)
          for m in ("enc", "dec") for n, s in (("weight", (4, 3)), ("bias", (4,)))}
    km = KeyMap(rules(linear("enc.fc", "encoder/fc"), linear("dec.fc", "decoder/fc")))
    specs = {m: {"fc": {"kernel": ParamSpec((3, 4)), "bias": ParamSpec((4,))}} for m in ("encoder", "decoder")}

    class Recording(DictReader):
        read: list = []

        def get(self, key):
            self.read.append(key)
            return super().get(key)

    reader = Recording(sd)
    p = load_params(reader, km, specs, np.float32, place=False, parts=("decoder",))
    assert list(p) == ["decoder"] and sorted(reader.read) == ["dec.fc.bias", "dec.fc.weight"]
    np.testing.assert_array_equal(p["decoder"]["fc"]["kernel"], sd["dec.fc.weight"].T)
    with pytest.raises(CheckpointError, match="stray"):
        load_params(DictReader({**sd, "stray": np.zeros(1, np.float32)}), km, specs, parts=("decoder",))
    with pytest.raises(CheckpointError, match="enc.fc.bias"):
        load_params(DictReader({k: v for k, v in sd.items() if k != "enc.fc.bias"}), km, specs, parts=("decoder",))
    with pytest.raises(ValueError, match=r"parts \['dcoder'\] are not top-level parts"):
        load_params(DictReader(sd), km, specs, parts=("dcoder",))


@pytest.mark.parametrize("src_dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("dst_dtype", [np.float32, ml_dtypes.bfloat16])
def test_native_and_numpy_conversion_equal_ml_dtypes_bit_for_bit(src_dtype, dst_dtype, monkeypatch):
    """The native transpose-cast (built by the package) and the NumPy fallback both equal ml_dtypes' cast."""
    from concurrent.futures import ThreadPoolExecutor

    from vidax.checkpoint import loader

    assert loader._native is not None, "the native helper was not built: install the package (pip install -e .)"
    rng = np.random.default_rng(0)
    src = (rng.standard_normal((300, 70)) * 10).astype(np.float32)
    src[0, :6] = [np.nan, np.inf, -np.inf, -0.0, 1e-40, 3.3895314e38]
    src[1, :3] = [1.00390625, 1.01171875, -1.00390625]  # bf16 ties: round half to even
    src[2, :3] = [3e-5, -1e-6, 6e-8]  # float16 subnormals
    src = src.astype(src_dtype)
    want = src.T.astype(dst_dtype)
    with ThreadPoolExecutor(2) as pool:
        for native in (loader._native, None):
            monkeypatch.setattr(loader, "_native", native)
            out = np.empty(want.shape, dst_dtype)
            loader.convert_into(pool, src, "linear", out)
            np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), want.view(f"u{want.itemsize}"))
            # Convolution kernels (O, I, kt, kh, kw) -> (kt, kh, kw, I, O) and (O, I, kh, kw) -> (kh, kw, I, O),
            # converted in output-channel tasks (the native path: a transpose-cast, then an axis swap).
            for layout, shape in (("conv3d", (70, 10, 3, 1, 10)), ("conv2d", (300, 7, 1, 10))):
                kernel = src.reshape(shape)
                ref = np.ascontiguousarray(to_layout(layout, kernel)).astype(dst_dtype)
                got = np.empty(ref.shape, dst_dtype)
                monkeypatch.setattr(loader, "_TASK_BYTES", 1024)  # several tasks per kernel
                loader.convert_into(pool, kernel, layout, got)
                np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), ref.view(f"u{ref.itemsize}"))


def _cpu_has_avx2() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx2" in flags and "f16c" in flags


@pytest.mark.parametrize("src_dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("dst_dtype", [np.float32, ml_dtypes.bfloat16])
def test_native_kernels_equal_the_reference_on_every_edge(src_dtype, dst_dtype):
    """Both native kernels (AVX2 where the CPU has it, and the portable one) write exactly the reference
    transpose-cast: shapes with and without whole 8 x 8 blocks and 64-byte destination lines, row ranges
    starting off a multiple of 8 (no streaming stores), a destination one element off alignment, conv
    kernels (volume > 1: source column i * volume + k lands in row k * I + i), and nothing outside the
    row range is written."""
    from vidax.checkpoint import _convert

    if _cpu_has_avx2():
        assert _convert.isa() == "avx2", "the AVX2 kernel was not built into vidax.checkpoint._convert"
    rng = np.random.default_rng(3)
    cases = [  # (rows, cols, volume, lo, hi)
        (64, 48, 1, 0, 64), (96, 40, 1, 32, 96), (70, 37, 1, 0, 70), (70, 37, 1, 3, 61), (33, 8, 1, 0, 33),
        (8, 1, 1, 0, 8), (1, 9, 1, 0, 1), (48, 5 * 27, 27, 0, 48), (40, 3 * 27, 27, 8, 40), (37, 7 * 9, 9, 5, 30),
    ]
    itemsize = np.dtype(dst_dtype).itemsize
    bits = f"u{itemsize}"
    for rows, cols, volume, lo, hi in cases:
        src = (rng.standard_normal((rows, cols)) * 10).astype(np.float32)
        src.flat[:6] = [np.nan, np.inf, -np.inf, -0.0, 1e-40, 3.3895314e38]
        src.flat[6:9] = [1.00390625, 1.01171875, -1.00390625]  # bf16 ties: round half to even
        src = src.astype(src_dtype)
        # reference: column i * volume + k of rows lo:hi -> row k * I + i, columns lo:hi
        inner = cols // volume
        want = np.full((cols, rows), 0x5A5A, np.dtype(bits)).view(dst_dtype)
        moved = src[lo:hi].reshape(hi - lo, inner, volume).transpose(2, 1, 0).reshape(cols, hi - lo)
        want[:, lo:hi] = moved.astype(dst_dtype)
        for simd in (True, False):
            for offset in (0, 1):  # an aligned buffer, and one element past alignment
                raw = np.empty(rows * cols + 64 // itemsize, dst_dtype)
                start = (-raw.ctypes.data % 64) // itemsize + offset
                out = raw[start : start + rows * cols].reshape(cols, rows)
                out.view(bits)[...] = 0x5A5A
                s = src.view(np.uint16) if src.dtype == ml_dtypes.bfloat16 else src
                o = out.view(np.uint16) if out.dtype == ml_dtypes.bfloat16 else out
                _convert.transpose_cast(s, o, lo, hi, out.dtype == ml_dtypes.bfloat16, volume, simd)
                np.testing.assert_array_equal(
                    out.view(bits), want.view(bits), err_msg=f"{rows}x{cols} volume {volume} rows {lo}:{hi} simd {simd} offset {offset}")
    with pytest.raises(ValueError, match="volume must divide"):
        _convert.transpose_cast(np.zeros((4, 6), np.float32), np.zeros((6, 4), np.float32), 0, 4, False, 4)


def test_convert_isa_environment_variable_selects_the_portable_kernel():
    """``VIDAX_CONVERT_ISA=portable`` (bench.load's comparison) switches the loader off the AVX2 kernel."""
    import os
    import subprocess
    import sys

    code = "from vidax.checkpoint import loader; print(loader._SIMD)"
    for value, want in (("portable", "False"), ("", "True")):
        env = {**os.environ, "VIDAX_CONVERT_ISA": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want


def _vm_flags(address: int) -> list[str]:
    """The kernel's VmFlags of the mapping holding ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.parametrize("shape", [(3, 5), (512, 1024)])  # below and above the mapped-buffer threshold
def test_host_buffers_are_aligned_and_adopted_without_a_copy(shape):
    """``aligned_empty`` buffers (NumPy or anonymous mapping) are 64-byte aligned and not huge-page
    marked; the CPU backend's ``device_put`` adopts them (same data pointer)."""
    import jax

    from vidax.checkpoint.loader import _MAPPED_BYTES, aligned_empty

    host = aligned_empty(shape, np.float32)
    assert host.ctypes.data % 64 == 0 and host.flags.writeable and host.shape == shape
    assert (host.nbytes >= _MAPPED_BYTES) == (shape == (512, 1024))
    if host.nbytes >= _MAPPED_BYTES:
        assert "nh" in _vm_flags(host.ctypes.data), "large host buffers must be marked MADV_NOHUGEPAGE"
    host[...] = np.arange(host.size, dtype=np.float32).reshape(shape)
    placed = jax.device_put(host, jax.devices("cpu")[0])
    assert placed.unsafe_buffer_pointer() == host.ctypes.data
    np.testing.assert_array_equal(np.asarray(placed), np.arange(host.size, dtype=np.float32).reshape(shape))


def test_stacked_layers_convert_together_bit_exactly():
    """All layers of a stacked parameter go to the pool as one batch of row tasks; the result equals
    the per-layer reference cast (fp32 -> bf16, round to nearest even) layer for layer."""
    km = KeyMap(linear("blocks.{i}.fc", "blocks/fc", bias=False))
    specs = {"blocks": {"fc": {"kernel": ParamSpec((5, 96, 40), axes=("layers", None, None))}}}
    rng = np.random.default_rng(1)
    sd = {f"blocks.{i}.fc.weight": rng.standard_normal((40, 96)).astype(np.float32) for i in range(5)}
    out = load_params(DictReader(sd), km, specs, ml_dtypes.bfloat16, place=False, workers=2)
    got = out["blocks"]["fc"]["kernel"]
    for i in range(5):
        want = sd[f"blocks.{i}.fc.weight"].T.astype(ml_dtypes.bfloat16)
        np.testing.assert_array_equal(got[i].view(np.uint16), want.view(np.uint16))


def _mapped_rss_kib(path) -> int:
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and ":" not in parts[0]:
                inside = len(parts) >= 6 and parts[-1] == str(path)
            elif inside and parts[0] == "Rss:":
                total += int(parts[1])
    return total


@pytest.mark.parametrize("placement", ["whole", "chunks", "stacked-file-chunks"])
def test_loader_releases_each_mapped_tensor_after_converting_it(tmp_path, placement):
    """After loading, none of the checkpoint file's pages stay resident in this process: each
    tensor's pages are dropped (MADV_DONTNEED) once converted, and re-reading still works. Also for
    a stack placed as layer chunks (offloading, the host block loop), from per-layer tensors or from
    one stacked tensor (vidax's own layout)."""
    from safetensors.numpy import save_file

    from vidax.checkpoint.keymap import Rule
    from vidax.checkpoint.loader import LayerChunks

    rng = np.random.default_rng(0)
    sd = {f"blocks.{i}.fc.weight": rng.standard_normal((512, 1024)).astype(np.float32) for i in range(4)}
    path = tmp_path / "model.safetensors"
    save_file(sd, str(path))
    km = KeyMap(linear("blocks.{i}.fc", "blocks/fc", bias=False))
    specs = {"blocks": {"fc": {"kernel": ParamSpec((4, 1024, 512), axes=("layers", None, None))}}}
    stacked = np.ascontiguousarray(np.stack([sd[f"blocks.{i}.fc.weight"].T for i in range(4)]))  # our layout
    want = stacked.astype(ml_dtypes.bfloat16)
    if placement == "stacked-file-chunks":
        save_file({"blocks.fc.kernel": stacked}, str(path))  # (safetensors.numpy writes raw buffers: contiguous)
        km = KeyMap([Rule("blocks.fc.kernel", "blocks/fc/kernel", "none")])
    reader = CheckpointReader(path)
    first = "blocks.fc.kernel" if placement == "stacked-file-chunks" else "blocks.0.fc.weight"
    reader.get(first).sum()  # touch a tensor: its pages are resident now
    assert _mapped_rss_kib(path) >= 2048
    shardings = None if placement == "whole" else (lambda path, spec: LayerChunks(None, 3))
    out = load_params(reader, km, specs, ml_dtypes.bfloat16, place=placement != "whole", workers=2, shardings=shardings)
    assert _mapped_rss_kib(path) < 64, "converted tensors' file pages are still resident"
    got = out["blocks"]["fc"]["kernel"]
    if placement != "whole":  # two chunks of 3 layers: the last one zero-padded
        assert [c.shape for c in got] == [(3, 1024, 512)] * 2 and not np.asarray(got[1][1:]).view(np.uint16).any()
        got = np.concatenate(got)[:4]
    np.testing.assert_array_equal(np.asarray(got).view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(reader.get(first), stacked if placement == "stacked-file-chunks"
                                  else sd["blocks.0.fc.weight"])  # the mapping is still valid


def test_outputs_get_default_permissions_not_temp_file_ones(tmp_path):
    """Videos, component files and assembled folders are written under temporary names (created 0600 / 0700)
    and renamed: after the rename they have the permissions a plain open / mkdir gives (umask applied)."""
    import os

    from vidax.checkpoint.writer import assembled_folder
    from vidax.video import write_video

    umask = os.umask(0o022)
    os.umask(umask)
    video = write_video(np.zeros((3, 16, 16, 3), np.uint8), tmp_path / "v.mp4", fps=8)
    assert video.stat().st_mode & 0o777 == 0o666 & ~umask
    with assembled_folder(tmp_path / "out") as tmp:
        (tmp / "x.txt").write_text("x")
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o777 & ~umask
    from vidax.checkpoint.writer import save_component

    save_component(tmp_path / "c", "w.safetensors", {"x": np.zeros(2, np.float32)}, None)
    assert (tmp_path / "c" / "w.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask
