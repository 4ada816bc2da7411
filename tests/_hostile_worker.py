"""Reads hostile checkpoints for tests/test_hostile_checkpoints.py in a process of its own (not collected by pytest).

Usage:
  python tests/_hostile_worker.py LIMIT_MIB read PATH
  python tests/_hostile_worker.py LIMIT_MIB fuzz DIR SEED CASES

The address space is capped at LIMIT_MIB (``RLIMIT_AS``) before anything is imported, so a reader
that allocates without a bound fails here with MemoryError instead of taking the machine with it;
the test gives the process a timeout too. Prints one JSON line:

* ``read``: ``CheckpointReader(PATH)``, then every key's shape and dtype, every tensor read whole
  (its bytes' CRC-32), and ``vidax.checkpoint.inspect.summarize`` (what ``vidax inspect`` prints):
  ``{"outcome": "ok" | "CheckpointError" | <other exception type>, "message", "keys", "crc",
  "seconds", "peak_rss_mib"}``.
* ``fuzz``: CASES seeded mutations each of ``DIR/base.safetensors`` and ``DIR/base.pth``
  (truncations, byte flips, header edits, pickle edits, zip field edits), each read as above:
  ``{"counts": {kind: {outcome: n}}, "failures": [first 5 cases ending in anything but success or
  CheckpointError], "slowest": seconds, "seconds", "peak_rss_mib"}``.
"""

import io
import json
import os
import random
import resource
import struct
import sys
import time
import traceback
import zipfile
import zlib
from pathlib import Path


def _peak_rss_mib() -> float:
    # VmHWM, not getrusage's ru_maxrss: that one is kept across execve, so it reports the parent's (pytest's,
    # with PyTorch and JAX loaded) peak at the fork.
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def read_all(path: Path) -> dict:
    """Everything a user of the reader touches; returns the outcome (never raises)."""
    from vidax.checkpoint.errors import CheckpointError
    from vidax.checkpoint.inspect import summarize
    from vidax.checkpoint.reader import CheckpointReader

    t0 = time.perf_counter()
    try:
        reader = CheckpointReader(path)
        crc = 0
        keys = reader.keys()
        for k in keys:
            shape, dtype = tuple(reader.shape(k)), reader.dtype(k)
            a = reader.get(k)
            if a.shape != shape or a.dtype != dtype:
                raise AssertionError(f"{k}: get() gave {a.shape} {a.dtype}, shape()/dtype() say {shape} {dtype}")
            crc = zlib.crc32(a.tobytes(), crc)
        summarize(reader)
        out = {"outcome": "ok", "message": "", "keys": keys[:20], "n_keys": len(keys), "crc": crc}
    except CheckpointError as e:
        out = {"outcome": "CheckpointError", "message": str(e)[:4000], "message_chars": len(str(e))}
    except BaseException as e:  # noqa: BLE001 - what a hostile file may raise is what is being tested
        out = {"outcome": type(e).__name__, "message": str(e)[:4000], "message_chars": len(str(e)),
               "traceback": traceback.format_exc()[-3000:]}
    out["seconds"] = time.perf_counter() - t0
    return out


# --------------------------------------------------------------------------- mutations


_HOSTILE_VALUES = [
    2**70, -1, -(2**63), 2**64, 2**48, 1e400, -0.0, 0.5, "x" * 300, "", None, True, [], {}, [[1]], [1] * 40,
    [2**62, 2**62], [0, 2**63], [2**70, 0], ["1"], [True], [1e400], "F4", "BF16", "I64", 7,
]


def _mutate_safetensors(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(["truncate", "flip", "flip_header", "edit_field", "edit_entry", "length", "splice"])
    n = int.from_bytes(data[:8], "little")
    if kind == "truncate":
        cut = rng.randrange(len(data))
        return f"truncate {cut}", data[:cut]
    if kind in ("flip", "flip_header"):
        b = bytearray(data)
        hi = 8 + n if kind == "flip_header" else len(b)
        spots = [rng.randrange(hi) for _ in range(rng.randint(1, 8))]
        for i in spots:
            b[i] = rng.randrange(256)
        return f"{kind} {spots}", bytes(b)
    if kind == "length":
        v = rng.choice([0, n - 1, n + 1, len(data), 2**64 - 1, 2**63, rng.randrange(2**64)])
        return f"length {v}", struct.pack("<Q", v) + data[8:]
    if kind == "splice":
        i, j = sorted(rng.randrange(len(data)) for _ in range(2))
        return f"splice {i}:{j}", data[:i] + bytes(rng.randrange(256) for _ in range(rng.randint(0, 16))) + data[j:]
    header = json.loads(data[8 : 8 + n])
    names = [k for k in header if k != "__metadata__"]
    name = rng.choice(names)
    value = rng.choice(_HOSTILE_VALUES)
    if kind == "edit_field":
        field = rng.choice(["dtype", "shape", "data_offsets", "extra"])
        header[name][field] = value
        desc = f"{name}.{field} = {value!r:.60}"
    else:
        target = rng.choice(["entry", "metadata", "rename"])
        if target == "entry":
            header[name] = value
        elif target == "metadata":
            header["__metadata__"] = value
        else:
            header["y" * rng.choice([0, 1, 5000])] = header.pop(name)
        desc = f"{target} {name} = {value!r:.60}"
    raw = json.dumps(header).encode()
    return f"edit {desc}", struct.pack("<Q", len(raw)) + raw + data[8 + n :]


def _rezip(data: bytes, replace: dict[str, bytes]) -> bytes:
    """The zip ``data`` with some records' contents replaced (stored, as torch writes them)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as zi, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zo:
        for info in zi.infolist():
            zo.writestr(info.filename, replace.get(info.filename, zi.read(info.filename)))
    return out.getvalue()


def _mutate_pickle(pkl: bytes, rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(["flip", "truncate", "insert", "int"])
    b = bytearray(pkl)
    if kind == "flip":
        spots = [rng.randrange(len(b)) for _ in range(rng.randint(1, 4))]
        for i in spots:
            b[i] = rng.randrange(256)
        return f"flip {spots}", bytes(b)
    if kind == "truncate":
        cut = rng.randrange(len(b))
        return f"truncate {cut}", bytes(b[:cut])
    if kind == "insert":
        i = rng.randrange(len(b))
        ops = bytes(rng.choice(b"()tlduae0h2qjrKJMXN\x85\x86\x87\x8a\x8b\x94\x95R]}") for _ in range(rng.randint(1, 6)))
        return f"insert {ops!r} at {i}", bytes(b[:i]) + ops + bytes(b[i:])
    # A small integer argument (sizes, strides, offsets, numel are BININT1 'K' in a small pickle) made hostile.
    spots = [i for i in range(len(b) - 1) if b[i] == ord("K")]
    i = rng.choice(spots)
    value = rng.choice([-1, 2**31 - 1, -(2**31), 255])
    return f"int at {i} = {value}", bytes(b[:i]) + b"J" + struct.pack("<i", value) + bytes(b[i + 2 :])


def _mutate_pth(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(["truncate", "flip", "flip_directory", "pickle", "pickle", "pickle", "zip_field", "byteorder"])
    if kind == "truncate":
        cut = rng.randrange(len(data))
        return f"truncate {cut}", data[:cut]
    if kind in ("flip", "flip_directory"):
        b = bytearray(data)
        lo = max(data.find(b"PK\x01\x02"), 0) if kind == "flip_directory" else 0  # the central directory
        spots = [rng.randrange(lo, len(b)) for _ in range(rng.randint(1, 8))]
        for i in spots:
            b[i] = rng.randrange(256)
        return f"{kind} {spots}", bytes(b)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = z.namelist()
        pkl_name = next(n for n in names if n.endswith("/data.pkl"))
        pkl = z.read(pkl_name)
    if kind == "pickle":
        desc, new = _mutate_pickle(pkl, rng)
        return f"pickle {desc}", _rezip(data, {pkl_name: new})
    if kind == "byteorder":
        value = rng.choice([b"big", b"", b"\xff" * 70, b"little\n", b"x" * 64])
        return f"byteorder {value!r:.40}", _rezip(data, {pkl_name.replace("data.pkl", "byteorder"): value})
    # A 16- or 32-bit field of a central or local header set to an extreme.
    b = bytearray(data)
    sig = rng.choice([b"PK\x01\x02", b"PK\x03\x04", b"PK\x05\x06"])
    starts = [i for i in range(len(b)) if b.startswith(sig, i)]
    at = rng.choice(starts) + rng.randrange(4, 28)
    width = rng.choice([2, 4])
    value = rng.choice([0, 1, 2**(8 * width) - 1, 2**(8 * width - 1), rng.randrange(2**(8 * width))])
    b[at : at + width] = value.to_bytes(width, "little")
    return f"zip field {sig!r}+{at} = {value}", bytes(b[: len(data)])


def fuzz(folder: Path, seed: int, cases: int) -> dict:
    rng = random.Random(seed)
    t0 = time.perf_counter()
    counts: dict[str, dict[str, int]] = {}
    failures: list[dict] = []
    slowest = 0.0
    for ext, mutate in ((".safetensors", _mutate_safetensors), (".pth", _mutate_pth)):
        base = (folder / f"base{ext}").read_bytes()
        for i in range(cases):
            desc, data = mutate(base, rng)
            # A fresh name per case: a file mapped by an earlier reader is never rewritten under it.
            path = folder / f"case{i}{ext}"
            path.write_bytes(data)
            out = read_all(path)
            path.unlink()
            slowest = max(slowest, out["seconds"])
            counts.setdefault(ext, {})
            counts[ext][out["outcome"]] = counts[ext].get(out["outcome"], 0) + 1
            if out["outcome"] not in ("ok", "CheckpointError") and len(failures) < 5:
                failures.append({"file": ext, "case": i, "mutation": desc[:300], **out})
    return {"counts": counts, "failures": failures, "slowest": slowest, "seconds": time.perf_counter() - t0}


def main() -> int:
    limit = int(sys.argv[1]) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    mode = sys.argv[2]
    if mode == "read":
        result = read_all(Path(sys.argv[3]))
    elif mode == "fuzz":
        result = fuzz(Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        raise SystemExit(f"unknown mode {mode}")
    result["peak_rss_mib"] = _peak_rss_mib()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.exit(main())
