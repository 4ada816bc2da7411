"""Hostile and broken checkpoint files: every reader ends in success or one short CheckpointError, within bounds.

A checkpoint from the internet is untrusted input (docs/design.md, "Threat model"). Each test builds
its hostile file itself, byte by byte where the format allows it. Files that could exhaust memory or
time on a reader without bounds are read in a separate process (tests/_hostile_worker.py) under an
address-space limit (``RLIMIT_AS``) and a timeout, so a regression fails the test instead of taking
the machine: the numbers in the comments are what the readers did before these bounds (measured on
the project's 2-core, 23 GB machine).
"""

import json
import os
import pickle
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from safetensors.numpy import save_file as save_safetensors
from safetensors.torch import save_file as torch_save_safetensors

from vidax.checkpoint.errors import CheckpointError, excerpt, name_excerpt
from vidax.checkpoint.keymap import KeyMap, Rule, rules
from vidax.checkpoint.loader import DictReader, load_params
from vidax.checkpoint.pickle_scan import MAX_KEY_COST, scan_pickle
from vidax.checkpoint.reader import CheckpointReader
from vidax.checkpoint.safetensors_io import SafetensorsFile
from vidax.checkpoint.torch_pickle import MAX_CENTRAL_DIRECTORY, MAX_PICKLE_BYTES, TorchCheckpointFile
from vidax.core.params import ParamSpec

WORKER = Path(__file__).with_name("_hostile_worker.py")
LIMIT_MIB = 2048  # address space of a worker; importing NumPy and the readers takes ~150 MiB of it
PEAK_RSS_MIB = 200  # resident memory a worker may reach reading any file below (it starts at ~40)


def _worker(*args, timeout: float = 30) -> dict:
    """Run tests/_hostile_worker.py under the address-space limit; its JSON result."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(WORKER), str(LIMIT_MIB), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _read_bounded(path: Path, timeout: float = 30) -> dict:
    out = _worker("read", path, timeout=timeout)
    assert out["peak_rss_mib"] < PEAK_RSS_MIB, out
    return out


def _refused(out: dict, *fragments: str) -> str:
    """``out`` is a short CheckpointError containing ``fragments``; returns the message."""
    assert out["outcome"] == "CheckpointError", out
    message = out["message"]
    assert out["message_chars"] < 600, f"error line of {out['message_chars']} characters"
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


# --------------------------------------------------------------------------- building files by hand


def _ustr(s: str) -> bytes:
    raw = s.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _pint(v: int) -> bytes:
    if -(2**31) <= v < 2**31:
        return b"J" + struct.pack("<i", v)
    raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _ptuple(values) -> bytes:
    return b"(" + b"".join(_pint(v) for v in values) + b"t"


def _tensor_ops(key: str = "0", numel: int = 6, offset: int = 0, size=(6,), stride=(1,)) -> bytes:
    """Opcodes pushing ``_rebuild_tensor_v2(<FloatStorage data/key of numel>, offset, size, stride, False, None)``."""
    pid = b"(" + _ustr("storage") + b"ctorch\nFloatStorage\n" + _ustr(key) + _ustr("cpu") + _pint(numel) + b"tQ"
    return (b"ctorch._utils\n_rebuild_tensor_v2\n(" + pid + _pint(offset) + _ptuple(size) + _ptuple(stride)
            + b"\x89Nt" + b"R")


def _pth(path: Path, pkl: bytes, storages: dict[str, bytes] | None = None, byteorder: bytes = b"little") -> Path:
    """A zip in torch.save's layout (stored records under ``archive/``) around ``pkl``."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", byteorder)
        for key, raw in (storages or {}).items():
            z.writestr(f"archive/data/{key}", raw)
        z.writestr("archive/version", "3\n")
    return path


SIX = np.arange(6, dtype=np.float32).tobytes()


def _raw_zip(path: Path, records) -> Path:
    """A zip written field by field: ``records`` of (name, payload as stored, method, declared size, crc),
    so that declared sizes can lie. Method 8 payloads are raw deflate streams."""
    out, central = bytearray(), bytearray()
    for name, payload, method, size, crc in records:
        nb = name.encode()
        offset = len(out)
        out += struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, method, 0, 0, crc, len(payload), size, len(nb), 0)
        out += nb + payload
        central += struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, 0, method, 0, 0, crc, len(payload), size,
                               len(nb), 0, 0, 0, 0, 0, offset) + nb
    start = len(out)
    out += central + struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, len(records), len(records), len(central), start, 0)
    path.write_bytes(bytes(out))
    return path


def _deflate(parts) -> tuple[bytes, int, int]:
    """A raw deflate stream of the concatenated ``parts`` (an iterable of bytes), its size and CRC-32,
    without ever holding the whole text."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    out, size, crc = [], 0, 0
    for part in parts:
        out.append(c.compress(part))
        size += len(part)
        crc = zlib.crc32(part, crc)
    out.append(c.flush())
    return b"".join(out), size, crc


BOMB = 256 * 2**20  # inflated bytes of the deflate bombs below (~255 KB compressed)


def _st(path: Path, header: dict | bytes, data: bytes = b"", length: int | None = None) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


# --------------------------------------------------------------------------- 1. zip records inflated without a bound


def test_deflated_byteorder_bomb_is_refused_without_inflating(tmp_path):
    # Before: the record was inflated whole and quoted into the error: a 255 KB file took 3.6 GB and printed a
    # 1 GB line; a 3 MB one (3 GiB of zeros) took 19.5 GB (OOM) in `vidax inspect`.
    stream, size, crc = _deflate(bytes(2**20) for _ in range(BOMB // 2**20))
    pkl = b"\x80\x02}."
    honest = _raw_zip(tmp_path / "honest.pth", [
        ("archive/data.pkl", pkl, 0, len(pkl), zlib.crc32(pkl)), ("archive/byteorder", stream, 8, size, crc)])
    assert honest.stat().st_size < 300_000
    msg = _refused(_read_bounded(honest), "honest.pth", "archive/byteorder", f"declares {BOMB} bytes", "more than the 64")
    assert "\\x00" not in msg  # no file contents in the message
    # A header that lies (declares 6 bytes): inflating stops at the bound all the same.
    lying = _raw_zip(tmp_path / "lying.pth", [
        ("archive/data.pkl", pkl, 0, len(pkl), zlib.crc32(pkl)), ("archive/byteorder", stream, 8, 6, crc)])
    msg = _refused(_read_bounded(lying), "lying.pth")
    assert "\\x00" not in msg
    # A byteorder record of junk is named by its size, never quoted.
    junk = _pth(tmp_path / "junk.pth", pkl, byteorder=b"\xff\xfe\n<b>")
    with pytest.raises(CheckpointError, match=r"junk.pth: tensors were saved in a byteorder record of 6 bytes;") as e:
        TorchCheckpointFile(junk)
    assert "<b>" not in str(e.value)


def test_deflated_data_pkl_bomb_is_refused_without_inflating(tmp_path):
    # A pickle of 256 Mi `None`s in a list, deflated to ~255 KB. Before: inflated and unpickled whole (a 3.1 MB
    # one took 6.5 GB and 48 s; this one, under the worker's 2 GiB limit, MemoryError after ~2 GB).
    stream, size, crc = _deflate([b"\x80\x02(", *(b"N" * 2**20 for _ in range(BOMB // 2**20)), b"l."])
    order = b"little"
    records = [("archive/data.pkl", stream, 8, size, crc), ("archive/byteorder", order, 0, 6, zlib.crc32(order))]
    out = _read_bounded(_raw_zip(tmp_path / "bomb.pth", records))
    _refused(out, "bomb.pth", "archive/data.pkl", f"declares {size} bytes", f"more than the {MAX_PICKLE_BYTES} read")
    assert out["seconds"] < 5
    records[0] = ("archive/data.pkl", stream, 8, 1000, crc)  # declares 1000 bytes, inflates to 256 MiB
    out = _read_bounded(_raw_zip(tmp_path / "lying.pth", records))
    _refused(out, "lying.pth")
    assert out["seconds"] < 5


def test_central_directory_is_bounded_before_zipfile_parses_it(tmp_path):
    # 120,000 records of 70-character names (~14 MB of directory, no local data): zipfile would build a ZipInfo
    # (~500 bytes) for each before any check of ours; a directory 100 times larger is the same file pattern.
    name = b"archive/data/" + b"n" * 51
    entry = struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0, len(name) + 6, 0, 0, 0, 0, 0, 0)
    central = b"".join(entry + name + b"%06d" % i for i in range(120_000))
    assert len(central) > MAX_CENTRAL_DIRECTORY
    end = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, len(central), 4, 0)
    path = tmp_path / "wide.pth"
    path.write_bytes(b"PK\x03\x04" + central + end)
    with pytest.raises(CheckpointError, match=f"wide.pth: the zip central directory is {len(central)} bytes, more than"):
        TorchCheckpointFile(path)


def test_storages_are_checked_against_the_pickle_before_mapping(tmp_path):
    # A negative element count passed the record-size check (a negative byte count is "not more than the record").
    with pytest.raises(CheckpointError, match=r"neg.pth: storage archive/data/0 has -1 elements"):
        TorchCheckpointFile(_pth(tmp_path / "neg.pth", b"\x80\x02" + _tensor_ops(numel=-1, size=(0,)) + b".",
                                 {"0": SIX}))
    # Sizes and strides past 2**48 (each a single comparison here); before: OverflowError / ValueError from NumPy.
    cases = {
        "huge_empty": dict(size=(2**62, 0), stride=(0, 1)),
        "wide_empty": dict(size=(2**40, 2**40, 0), stride=(0, 0, 1)),
        "huge_stride": dict(size=(1, 6), stride=(2**62, 1)),
        "many_dims": dict(size=(1,) * 40, stride=(1,) * 40),
        "negative": dict(size=(-2, -3), stride=(1, 1)),
    }
    for name, kw in cases.items():
        path = _pth(tmp_path / f"{name}.pth", b"\x80\x02" + _tensor_ops(**kw) + b".", {"0": SIX})
        with pytest.raises(CheckpointError, match=f"{name}.pth: archive/data.pkl: .*tensor") as e:
            TorchCheckpointFile(path)
        assert len(str(e.value)) < 600
    # The bounds leave real tensors alone: a size-1 axis with any stride below 2**48, and an empty tensor.
    f = TorchCheckpointFile(_pth(tmp_path / "ok.pth", b"\x80\x02}(" + _ustr("a") + _tensor_ops(size=(1, 6), stride=(
        2**40, 1)) + _ustr("e") + _tensor_ops(size=(0, 2**20), stride=(2**20, 1)) + b"u.", {"0": SIX}))
    np.testing.assert_array_equal(f.get("a"), np.arange(6, dtype=np.float32)[None])
    assert f.get("e").shape == (0, 2**20)


# --------------------------------------------------------------------------- 2. pickle memo sharing


def _laughs(levels: int, leaf: bytes) -> bytes:
    """Opcodes pushing ``t_levels`` where ``t_0 = leaf`` and ``t_i = (t_{i-1}, t_{i-1})``: ``levels`` objects,
    ``2**levels`` paths. Memo slots 0..levels; each level is memoized and popped, so only the last stays."""
    ops = leaf + b"q\x000"
    for i in range(1, levels + 1):
        ops += b"h" + bytes([i - 1]) + b"h" + bytes([i - 1]) + b"\x86q" + bytes([i]) + b"0"
    return ops + b"h" + bytes([levels])


def test_billion_laughs_with_a_tensor_is_refused(tmp_path):
    # 1.3 KB: before, loading walked 2**60 paths (5.5 GB after 60 s, never finishing).
    path = _pth(tmp_path / "laughs.pth", b"\x80\x02" + _laughs(60, _tensor_ops()) + b".", {"0": SIX})
    assert path.stat().st_size < 1500
    out = _read_bounded(path, timeout=20)
    _refused(out, "laughs.pth", "the same container holds tensors under", "shared reference")
    assert out["seconds"] < 2


def test_billion_laughs_without_tensors_is_walked_once(tmp_path):
    # {"model": <2**60 paths to one int>, "w": tensor}: before, `vidax inspect` searched every path for a tensor.
    pkl = b"\x80\x02}(" + _ustr("model") + _laughs(60, b"K\x07") + _ustr("w") + _tensor_ops() + b"u."
    out = _read_bounded(_pth(tmp_path / "laughs.pth", pkl, {"0": SIX}), timeout=20)
    assert out["outcome"] == "ok" and out["keys"] == ["w"], out
    assert out["crc"] == zlib.crc32(SIX) and out["seconds"] < 2


def test_memo_index_bomb_is_refused(tmp_path):
    # LONG_BINPUT 2**25 makes CPython's C unpickler grow and zero its memo to 2**26 slots: 512 MiB resident
    # for 5 bytes (2**30 would be 16 GiB); before, the file then loaded.
    pkl = b"\x80\x02]r" + struct.pack("<I", 2**25) + b"0" + _tensor_ops() + b"."
    out = _read_bounded(_pth(tmp_path / "memo.pth", pkl, {"0": SIX}))
    _refused(out, "memo.pth", "unsafe or corrupt pickle at byte", "memo index 33554432 after 0 memo writes")


def _colliding_int_keys(n: int) -> list[int]:
    return [k * (2**61 - 1) for k in range(1, n + 1)]  # CPython hashes an int modulo 2**61 - 1, unseeded


def _colliding_tuple_keys(n: int) -> list[tuple[int, int]]:
    """``n`` pairs of 64-bit ints whose tuple hashes are all equal, by inverting CPython's tuple hash
    (``Objects/tupleobject.c``, xxHash-style lanes since 3.8) for the second item."""
    m, p1, p2, p5 = 2**64, 11400714785074694791, 14029467366897019727, 2870177450012600261

    def rotl(x, r):
        return ((x << r) | (x >> (64 - r))) % m

    def lane(acc, h):
        return rotl((acc + (h % m) * p2) % m, 31) * p1 % m

    target = lane(lane(p5, 1), 1)  # the hash accumulator of (1, 1) before the length is mixed in
    inv1, inv2 = pow(p1, -1, m), pow(p2, -1, m)
    pairs, a = [], 1
    while len(pairs) < n:
        acc1 = lane(p5, a)
        hb = ((rotl(target * inv1 % m, 33) - acc1) * inv2) % m  # rotr 31 == rotl 33
        b = hb if hb < 2**61 - 1 else hb - m if hb > m - (2**61 - 1) else None
        if b is not None and b != -1:
            pairs.append((a, b))
        a += 1
    return pairs


def test_hash_collision_keys_are_refused(tmp_path):
    tuples = _colliding_tuple_keys(40)
    assert len({hash(t) for t in tuples}) == 1 and len(set(tuples)) == 40  # the reference: really colliding
    ints = _colliding_int_keys(40)
    assert len({hash(k) for k in ints}) == 1
    # 60,000 colliding keys build a dict in ~1.8e9 comparisons: before, ~20 s for 800 KB (500,000 keys in the
    # 8 MiB pickle cap: ~25 min), inside one SETITEMS opcode. Int keys wider than 64 bits are refused...
    pkl = b"\x80\x02}(" + b"".join(_pint(k) + b"N" for k in _colliding_int_keys(60_000)) + b"u."
    out = _read_bounded(_pth(tmp_path / "ints.pth", pkl), timeout=20)
    _refused(out, "ints.pth", "an integer of 9 bytes (at most 8)")
    # ... and keys other than scalars (tuples of 64-bit ints collide as well) past a hashing cost of MAX_KEY_COST
    # per file, a pair costing 3.
    pkl = b"\x80\x02}(" + b"".join(_pint(a) + _pint(b) + b"\x86N" for a, b in _colliding_tuple_keys(60_000)) + b"u."
    out = _read_bounded(_pth(tmp_path / "tuples.pth", pkl), timeout=20)
    _refused(out, "tuples.pth", f"dict keys or set items other than plain scalars cost more than {MAX_KEY_COST}")
    # set(), frozenset() and OrderedDict(pairs) charge the items they hash the same way.
    over = _colliding_tuple_keys(MAX_KEY_COST // 3 + 1)
    for name, call in (("set", b"c__builtin__\nset\n"), ("frozenset", b"c__builtin__\nfrozenset\n")):
        items = b"](" + b"".join(_pint(a) + _pint(b) + b"\x86" for a, b in over) + b"e"
        with pytest.raises(CheckpointError, match=f"{name}.pth: .*cost more than {MAX_KEY_COST} to hash"):
            TorchCheckpointFile(_pth(tmp_path / f"{name}.pth", b"\x80\x02" + call + items + b"\x85R."))
    pairs = b"](" + b"".join(_pint(a) + _pint(b) + b"\x86N\x86" for a, b in over) + b"e"
    with pytest.raises(CheckpointError, match=f"od.pth: .*cost more than {MAX_KEY_COST} to hash"):
        TorchCheckpointFile(_pth(tmp_path / "od.pth", b"\x80\x02ccollections\nOrderedDict\n" + pairs + b"\x85R."))
    # A few non-scalar keys are fine (a dtype- or tuple-keyed dict in a training checkpoint).
    few = b"\x80\x02}(" + b"".join(_pint(a) + _pint(b) + b"\x86N" for a, b in _colliding_tuple_keys(10)) + b"u."
    assert TorchCheckpointFile(_pth(tmp_path / "few.pth", few)).keys() == []


def test_keys_hashed_through_shared_tuples_are_refused(tmp_path):
    # One key: a tuple of 60 levels of shared halves (~350 bytes). CPython caches no tuple hash, so hashing
    # it visits 2**60 items: before, the unpickler hung on it as a dict key or set item.
    for name, pkl in [
        ("key", b"\x80\x02}(" + _laughs(60, b"K\x07") + b"Nu."),
        ("item", b"\x80\x02\x8f(" + _laughs(60, b"K\x07") + b"\x90."),
        ("frozen", b"\x80\x02(" + _laughs(60, b"K\x07") + b"\x91."),
        ("set", b"\x80\x02c__builtin__\nset\n](" + _laughs(60, b"K\x07") + b"e\x85R."),
    ]:
        out = _read_bounded(_pth(tmp_path / f"{name}.pth", pkl), timeout=20)
        _refused(out, f"{name}.pth", f"cost more than {MAX_KEY_COST} to hash")
        assert out["seconds"] < 2


def test_shared_containers_copied_by_callables_exhaust_a_budget(tmp_path):
    # A 100,000-int list passed to torch.Size 100,000 times by memo reference (900 KB): before, 1e10 element
    # checks. The allow-listed callables charge what they copy to a budget of len(data.pkl).
    pkl = (b"\x80\x02](" + b"K\x01" * 100_000 + b"eq\x00ctorch\nSize\nq\x01" + b"h\x01h\x00\x85R0" * 100_000
           + b"}.")
    out = _read_bounded(_pth(tmp_path / "sizes.pth", pkl), timeout=20)
    _refused(out, "sizes.pth", "builds more than its size allows")
    assert out["seconds"] < 2
    # Names: a 1 MiB string as the key of 64 nested dicts above 100,000 references to one tensor (1.8 MB) named
    # 100,000 tensors with 64 MiB names each (6.4 TB); the names are charged to 4 x len(data.pkl) + 1 MiB.
    pkl = b"\x80\x02" + _tensor_ops() + b"q\x00" + _ustr("s" * 2**20) + b"q\x01"
    pkl += b"}(h\x01" * 63 + b"}(" + b"".join(_pint(i) + b"h\x00" for i in range(100_000)) + b"u" + b"u" * 63 + b"."
    out = _read_bounded(_pth(tmp_path / "names.pth", pkl, {"0": SIX}), timeout=20)
    _refused(out, "names.pth", "tensor names total more than")


def test_flatten_rules_for_shared_and_odd_containers(tmp_path):
    t = torch.arange(6.0)
    sd = {"a": t, "b": t}  # tied weights: one tensor object, two names
    torch.save({"model": sd, "cfg": {"betas": (0.9, 0.99)}, "cfg2": {"betas": (0.9, 0.99)}}, tmp_path / "tied.pth")
    f = TorchCheckpointFile(tmp_path / "tied.pth")
    assert f.keys() == ["a", "b"] and np.shares_memory(f.get("a"), f.get("b"))
    # One dict of tensors saved under two names: refused, not silently named once.
    torch.save({"model": sd, "ema": sd}, tmp_path / "twice.pth")
    with pytest.raises(CheckpointError, match="twice.pth: the same container holds tensors under 'model' and 'ema'"):
        TorchCheckpointFile(tmp_path / "twice.pth")
    # A list that contains itself, beside a tensor: the cycle is refused where it holds the tensor...
    loop: list = [t]
    loop.append(loop)
    torch.save({"loop": loop}, tmp_path / "loop.pth")
    with pytest.raises(CheckpointError, match="loop.pth: the same container holds tensors under 'loop' and 'loop.1'"):
        TorchCheckpointFile(tmp_path / "loop.pth")
    # ... and ignored where it holds none.
    empty_loop: list = []
    empty_loop.append(empty_loop)
    torch.save({"loop": empty_loop, "w": t}, tmp_path / "empty_loop.pth")
    assert TorchCheckpointFile(tmp_path / "empty_loop.pth").keys() == ["w"]
    # Dict keys above a tensor are scalars; a tuple key is refused (its str() has no bound).
    torch.save({(1, 2): t}, tmp_path / "tuple_key.pth")
    with pytest.raises(CheckpointError, match="tuple_key.pth: a tuple dict key above a tensor"):
        TorchCheckpointFile(tmp_path / "tuple_key.pth")


def test_pickle_scan_refuses_what_the_unpickler_would_trust():
    # Reference pickles from the standard library pass, every protocol.
    obj = {"a": [1, 2.5, -(2**63), "s", b"b", None, True, (1, 2)], "b": {3: frozenset({4})}, "c": bytearray(b"x")}
    for proto in range(6):
        scan_pickle(pickle.dumps(obj, protocol=proto), "ok")
    for data, why in [
        (b"\x80\x02}", "ends without a STOP opcode"),
        (b"\x80\x02X\xff\xff\xff\x7f.", "runs past the end of the data"),
        (b"\x80\x05\x95\xff\xff\xff\xff\x00\x00\x00\x00N.", "frame of 4294967295 bytes"),
        (b"\x80\x02\x8b\x00\x01\x00\x00" + bytes(256) + b".", "unknown pickle opcode 0x8b"),
        (b"\x80\x02h\x05.", "memo index 5 was never written"),
        (b"N" + b"p99\n.", "memo index 99 after 0 memo writes"),
        (b"\x80\x02I" + b"9" * 30 + b"\n.", "an integer literal of 30 characters"),
        (b"\x80\x02R.", "stack underflow"),
        (b"\x80\x02(Nu.", "no MARK before|odd number of items"),
        (b"\x80\x09N.", "unsupported pickle protocol"),
    ]:
        with pytest.raises(CheckpointError, match=f"where: unsafe or corrupt pickle at byte \\d+: .*({why})"):
            scan_pickle(data, "where")


def test_error_lines_quote_no_more_than_a_few_dozen_characters_of_the_file(tmp_path):
    # A 1 MiB global name (before: quoted whole into the refusal).
    pkl = b"\x80\x02c" + b"m" * 2**20 + b"\nsystem\n."
    with pytest.raises(CheckpointError, match=r"evil.pth: refusing to load global m{100}\.\.\. \(1048576 characters\)"
                                              r"\.system from the pickle") as e:
        TorchCheckpointFile(_pth(tmp_path / "evil.pth", pkl))
    assert len(str(e.value)) < 600
    assert excerpt("x" * 10**6) == repr("x" * 80) + "... (1000000 characters)"
    assert excerpt(b"\x00" * 5) == repr(b"\x00" * 5) and excerpt(10**100) == "an integer of 333 bits"
    assert excerpt([[1]] * 10**6) == "a list of length 1000000" and excerpt(("a" * 30, 2)) == f"({'a' * 20!r}... (30 characters), 2)"
    assert name_excerpt("a\nb") == "a\\nb"  # a name cannot start a new line
    # A tensor name of 1 MiB in two files of a folder.
    twice = tmp_path / "twice"
    twice.mkdir()
    for name in ("a", "b"):
        save_safetensors({"n" * 2**20: np.zeros(1, np.float32)}, str(twice / f"{name}.safetensors"))
    with pytest.raises(CheckpointError, match=r"tensor 'n{80}'\.\.\. \(1048576 characters\) appears in both") as e:
        CheckpointReader(twice)
    assert len(str(e.value)) < 600
    # The loader lists at most 40 unexpected keys, now each cut to 300 characters (50 keys of 100 KB: 4 MB before).
    names = {"w": np.zeros(2, np.float32), **{f"{i:02d}" + "k" * 100_000: np.zeros(1, np.float32) for i in range(50)}}
    with pytest.raises(CheckpointError, match=r"unexpected keys \(50\):\n    00k{298}\.\.\. \(100002 characters\)\n") as e:
        load_params(DictReader(names), KeyMap(rules(Rule("w", "w"))), {"w": ParamSpec((2,))}, np.float32, place=False)
    assert len(str(e.value)) < 40 * 400


# --------------------------------------------------------------------------- 3, 4. safetensors and index problems


@pytest.mark.parametrize("case, header, fragment", [
    ("inf_dim", {"w": {"dtype": "F32", "shape": [1e400], "data_offsets": [0, 4]}}, "shape [inf] is not a list"),
    ("huge_dim", {"w": {"dtype": "F32", "shape": [2**70], "data_offsets": [0, 4]}},
     "shape [1180591620717411303424] is not a list of at most 32 integers in [0, 2**48)"),
    ("product", {"w": {"dtype": "F32", "shape": [2**32, 2**32], "data_offsets": [0, 0]}},
     "has inconsistent offsets 0..0 for 18446744073709551616 x F32"),
    ("empty_huge", {"w": {"dtype": "F32", "shape": [2**47, 2**47, 0], "data_offsets": [0, 0]}},
     "larger than NumPy can represent"),
    ("negative", {"w": {"dtype": "F32", "shape": [-2, -3], "data_offsets": [0, 24]}}, "shape [-2, -3]"),
    ("string_dim", {"w": {"dtype": "F32", "shape": ["6"], "data_offsets": [0, 24]}}, "shape ['6']"),
    ("float_offset", {"w": {"dtype": "F32", "shape": [6], "data_offsets": [0.0, 24]}}, "data_offsets [0.0, 24]"),
    ("bool_offset", {"w": {"dtype": "F32", "shape": [6], "data_offsets": [False, 24]}}, "data_offsets [False, 24]"),
    ("entry_list", {"w": [1, 2]}, "[1, 2], not an object"),
    ("dtype_list", {"w": {"dtype": ["F32"], "shape": [6], "data_offsets": [0, 24]}}, "dtype ['F32'] is not one of"),
    ("metadata", {"__metadata__": {"format": 1}}, "__metadata__ must map strings to strings"),
    ("nested", b'{"w":' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested too deeply"),
    ("long_int", b'{"w":{"dtype":"F32","shape":[' + b"9" * 5000 + b'],"data_offsets":[0,24]}}', "invalid JSON"),
    ("not_utf8", b'{"w\xff":{}}', "not UTF-8 text (byte 0xff at offset 3)"),
])
def test_safetensors_header_problems_name_the_file_and_the_problem(tmp_path, case, header, fragment):
    path = _st(tmp_path / f"{case}.safetensors", header, SIX)
    with pytest.raises(CheckpointError) as e:
        SafetensorsFile(path)
    message = str(e.value)
    assert message.startswith(f"{path}: ") and fragment in message and len(message) < 600, message


def test_safetensors_bounds_leave_real_files_alone(tmp_path):
    # The reference writer's file, with an empty tensor and bf16; read back value for value.
    tensors = {"a": torch.arange(6.0).reshape(2, 3), "e": torch.zeros(0, 7, dtype=torch.float16),
               "b": torch.arange(4.0).bfloat16()}
    torch_save_safetensors(tensors, tmp_path / "ok.safetensors", metadata={"format": "pt"})
    f = SafetensorsFile(tmp_path / "ok.safetensors")
    assert f.metadata == {"format": "pt"} and sorted(f.keys()) == ["a", "b", "e"]
    np.testing.assert_array_equal(f.get("a"), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert f.get("e").shape == (0, 7) and f.get("b").dtype == ml_dtypes.bfloat16
    assert f.get("b").astype(np.float32).tolist() == [0.0, 1.0, 2.0, 3.0]


def _index(folder: Path, weight_map, name="model.safetensors.index.json") -> Path:
    (folder / name).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder / name


def test_index_problems_name_the_index(tmp_path):
    save_safetensors({"w": np.arange(6, dtype=np.float32)}, str(tmp_path / "s.safetensors"))
    for case, weight_map, fragment in [
        ("list", ["s.safetensors"], "a weight_map of ['s.safetensors']"),
        ("number", {"w": 3}, "weight_map maps 'w' to 3, not a file name"),
        ("nested", {"w": [["s.safetensors"]]}, "weight_map maps 'w' to a list of length 1, not a file name"),
    ]:
        index = _index(tmp_path, weight_map)
        with pytest.raises(CheckpointError, match=f"{index}: corrupt index file") as e:
            CheckpointReader(tmp_path)
        assert fragment in str(e.value), (case, str(e.value))
    # Invalid UTF-8 (before: "'utf-8' codec can't decode byte 0xff", naming no file) and invalid JSON.
    index.write_bytes(b'{"weight_map": {"w": "s.safetensors\xff"}}')
    with pytest.raises(CheckpointError, match=f"{index}: corrupt index file: not UTF-8 text \\(byte 0xff at offset 35\\)"):
        CheckpointReader(tmp_path)
    index.write_bytes(b'{"weight_map": ' + b"[" * 100_000)
    with pytest.raises(CheckpointError, match=f"{index}: corrupt index file: invalid JSON"):
        CheckpointReader(tmp_path)
    index.write_text("[]")
    with pytest.raises(CheckpointError, match=f"{index}: corrupt index file \\(no JSON object"):
        CheckpointReader(tmp_path)
    # The same for a PyTorch index.
    (tmp_path / "model.safetensors.index.json").unlink()
    (tmp_path / "s.safetensors").unlink()
    torch.save({"w": torch.arange(6.0)}, tmp_path / "pytorch_model-1.bin")
    bin_index = _index(tmp_path, {"w": 1.5}, "pytorch_model.bin.index.json")
    with pytest.raises(CheckpointError, match=f"{bin_index}: corrupt index file \\(weight_map maps 'w' to 1.5"):
        CheckpointReader(tmp_path)


def test_index_shards_stay_inside_the_folder(tmp_path):
    outside = tmp_path / "other"
    outside.mkdir()
    save_safetensors({"secret": np.full(3, 7, np.float32)}, str(outside / "x.safetensors"))
    ckpt = tmp_path / "ckpt" / "transformer"
    ckpt.mkdir(parents=True)
    save_safetensors({"w": np.arange(6, dtype=np.float32)}, str(ckpt / "a.safetensors"))
    for shard in ["../../other/x.safetensors", str(outside / "x.safetensors"), "sub/../../../other/x.safetensors",
                  "", "a.safetensors\0"]:
        _index(ckpt, {"w": "a.safetensors", "secret": shard})
        with pytest.raises(CheckpointError, match="is not a file inside the checkpoint folder"):
            CheckpointReader(ckpt)
    # `..` is refused even where it would stay inside: through a linked folder the system resolves it elsewhere.
    (ckpt / "sub").symlink_to(outside / "deeper", target_is_directory=True)
    (outside / "deeper").mkdir()
    _index(ckpt, {"w": "a.safetensors", "secret": "sub/../x.safetensors"})
    assert (ckpt / "sub/../x.safetensors").is_file()  # what the system would open: other/x.safetensors
    with pytest.raises(CheckpointError, match="'sub/../x.safetensors' is not a file inside the checkpoint folder"):
        CheckpointReader(ckpt)
    # A link inside the folder is followed wherever it points (the Hugging Face cache's snapshots/ -> blobs/).
    (ckpt / "b.safetensors").symlink_to(outside / "x.safetensors")
    _index(ckpt, {"w": "a.safetensors", "secret": "./b.safetensors"})
    r = CheckpointReader(ckpt)
    assert sorted(r.keys()) == ["secret", "w"] and r.get("secret").tolist() == [7.0, 7.0, 7.0]
    # Spellings of one file are one shard, opened once (an index can list a file under 100,000 names).
    _index(ckpt, {"w": "a.safetensors", "secret": "b.safetensors", **{f"k{i}": "./" * i + "a.safetensors"
                                                                      for i in range(1, 4)}})
    with pytest.raises(CheckpointError, match="a.safetensors: index model.safetensors.index.json says it holds 'k1'"):
        CheckpointReader(ckpt)
    _index(ckpt, {"w": "a.safetensors", "secret": "b.safetensors", "w2": "b.safetensors"})
    with pytest.raises(CheckpointError, match="says it holds 'w2'"):
        CheckpointReader(ckpt)
    _index(ckpt, {"w": ".//a.safetensors", "secret": "b.safetensors"})
    assert len(CheckpointReader(ckpt).files) == 2
    (ckpt / "c.safetensors").symlink_to(ckpt / "a.safetensors")
    _index(ckpt, {"w": "c.safetensors", "secret": "b.safetensors"})
    r = CheckpointReader(ckpt)
    assert len(r.files) == 2 and r.get("w").tolist() == list(range(6))


# --------------------------------------------------------------------------- 6. fuzz


FUZZ_CASES = 500  # per file kind


def test_fuzzed_checkpoints_end_in_success_or_a_checkpoint_error(tmp_path):
    torch.manual_seed(0)
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    torch.save({"model": {"w": base, "t": base.t(), "row": base[1], "h": torch.ones(2, 2, dtype=torch.float16),
                          "bf": torch.full((3,), 1.5, dtype=torch.bfloat16), "i": torch.arange(3),
                          "n": torch.zeros(0, 2), "p": torch.nn.Parameter(torch.ones(2))},
                "epoch": 3, "names": ["a", "b"]}, tmp_path / "base.pth")
    save_safetensors({"w": np.arange(12, dtype=np.float32).reshape(3, 4), "e": np.zeros((0, 2), np.float16),
                      "i": np.arange(3, dtype=np.int64), "b": np.ones(3, np.uint8)}, str(tmp_path / "base.safetensors"))
    # The unmutated files read in full (the reference the mutations depart from).
    assert _worker("read", tmp_path / "base.pth")["n_keys"] == 8
    assert _worker("read", tmp_path / "base.safetensors")["n_keys"] == 4
    t0 = time.perf_counter()
    out = _worker("fuzz", tmp_path, 20250917, FUZZ_CASES, timeout=120)
    assert out["failures"] == [], json.dumps(out["failures"], indent=1)
    for ext in (".safetensors", ".pth"):
        counts = out["counts"][ext]
        assert set(counts) <= {"ok", "CheckpointError"} and sum(counts.values()) == FUZZ_CASES, counts
        # Mutations that are harmless (data bytes) and mutations that are caught both occur: the fuzz is not vacuous.
        assert counts.get("ok", 0) >= FUZZ_CASES // 20 and counts.get("CheckpointError", 0) >= FUZZ_CASES // 3, counts
    assert out["slowest"] < 2 and out["peak_rss_mib"] < PEAK_RSS_MIB, out
    assert time.perf_counter() - t0 < 60
