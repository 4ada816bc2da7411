"""The checkpoint transpose-cast kernels (``vidax.checkpoint._convert``) against NumPy and PyTorch.

    .venv/bin/python -m bench.convert [--repeats 7]

Each call moves one PyTorch tensor into vidax's layout, cast on the way: an ``nn.Linear`` weight
``(out, in)`` into ``(in, out)``, a ``Conv3d`` kernel ``(O, I, kt, kh, kw)`` into ``(kt, kh, kw, I, O)``.
Contenders, one thread each, same source and a destination that is already resident (the kernels
are compared, not the kernel's page faults): vidax's AVX2 kernel and its portable kernel (the
loader's native path), the loader's NumPy fallback (row tiles cast, then transposed), and PyTorch
(``w.t().contiguous()`` / ``w.permute(...).contiguous()``, then ``.to(dtype)``: what a PyTorch-side
converter does). Rounds alternated, median (min-max) GB/s of source. One more column writes into a
fresh destination (the loader's case: every page of a new parameter buffer is faulted in by the
first write). Regenerates the "Checkpoint transpose-cast" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time

from bench._report import machine, publish, versions

# name, source shape, layout, source dtype, destination dtype
CASES = [
    ("Wan2.1 1.3B FFN up (8960, 1536)", (8960, 1536), "linear", "float32", "float32"),
    ("Wan2.1 1.3B FFN down (1536, 8960)", (1536, 8960), "linear", "float32", "float32"),
    ("Wan2.1 1.3B attention (1536, 1536)", (1536, 1536), "linear", "float32", "float32"),
    ("Wan2.1 1.3B FFN up, to bf16", (8960, 1536), "linear", "float32", "bfloat16"),
    ("Wan2.1 1.3B FFN up, bf16 checkpoint", (8960, 1536), "linear", "bfloat16", "bfloat16"),
    ("Wan VAE conv3d (384, 384, 3, 3, 3)", (384, 384, 3, 3, 3), "conv3d", "float32", "float32"),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = ap.parse_args(argv)

    import ml_dtypes
    import numpy as np
    import torch

    from vidax.checkpoint import _convert, loader
    from vidax.checkpoint.keymap import to_layout

    torch.set_num_threads(1)
    t_start = time.perf_counter()
    rows = []
    for name, shape, layout, src_name, dst_name in CASES:
        src_dt = np.dtype(ml_dtypes.bfloat16) if src_name == "bfloat16" else np.dtype(src_name)
        dst_dt = np.dtype(ml_dtypes.bfloat16) if dst_name == "bfloat16" else np.dtype(dst_name)
        src = np.random.default_rng(0).standard_normal(shape, dtype=np.float32).astype(src_dt)
        want = np.ascontiguousarray(to_layout(layout, src)).astype(dst_dt)
        out = loader.aligned_empty(want.shape, dst_dt)
        out[...] = 0  # resident
        tsrc = torch.from_numpy(src.view(np.int16)).view(torch.bfloat16) if src_name == "bfloat16" else torch.from_numpy(src)
        tdt = getattr(torch, dst_name)
        perm = (1, 0) if layout == "linear" else (2, 3, 4, 1, 0)

        def loader_path(native=True, simd=True, dst=None):
            """The loader's own row conversion (``_convert_rows``), on the native kernel asked for or NumPy."""
            o = out if dst is None else dst
            saved = loader._native, loader._SIMD
            loader._native, loader._SIMD = (saved[0] if native else None), simd
            try:
                loader._convert_rows(src, layout, o, 0, shape[0])
            finally:
                loader._native, loader._SIMD = saved
            return o

        runs = {
            "avx2": lambda: loader_path(simd=True),
            "portable": lambda: loader_path(simd=False),
            "numpy": lambda: loader_path(native=False),
            "torch": lambda: tsrc.permute(*perm).contiguous().to(tdt),
            "avx2, fresh destination": lambda: loader_path(dst=loader.aligned_empty(want.shape, dst_dt)),
        }
        if _convert.isa() != "avx2":
            runs.pop("avx2"), runs.pop("avx2, fresh destination")
        for key, fn in runs.items():  # correctness, and a warm-up
            got = fn()
            got = got.view(torch.int16).numpy() if isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16 else np.asarray(got)
            assert np.array_equal(got.view(f"u{dst_dt.itemsize}"), want.view(f"u{dst_dt.itemsize}")), (name, key)
        times = {key: [] for key in runs}
        keys = [k for k in runs if "fresh" not in k]
        for r in range(args.repeats):
            for key in (keys if r % 2 == 0 else keys[::-1]):
                t0 = time.perf_counter()
                runs[key]()
                times[key].append(time.perf_counter() - t0)
        for key in (k for k in runs if "fresh" in k):
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                runs[key]()
                times[key].append(time.perf_counter() - t0)
        gbs = {key: [src.nbytes / t / 1e9 for t in ts] for key, ts in times.items()}
        rows.append((name, src_name, dst_name, src.nbytes, {k: (statistics.median(v), min(v), max(v)) for k, v in gbs.items()}))
        print(name, {k: round(statistics.median(v), 2) for k, v in gbs.items()}, flush=True)

    vs = versions(("numpy", "torch", "ml_dtypes"))
    keys = [k for k in rows[0][4]]
    lines = [
        "## Checkpoint transpose-cast",
        "",
        f"Generated by `python -m bench.convert --repeats {args.repeats}` on {datetime.date.today()} ({machine()}; "
        + ", ".join(f"{k} {v}" for k, v in vs.items()) + f"); {time.perf_counter() - t_start:.0f} s. "
        f"vidax's native kernel on this CPU: `{_convert.isa()}`.",
        "",
        "One thread, GB/s of source, median (min-max) over "
        f"{args.repeats} alternated rounds after a warm-up; every contender's output equals the reference "
        "transpose-cast bit for bit. vidax's kernels and the NumPy path write into a resident destination, "
        "except in the 'fresh destination' column, which writes into a new buffer as the loader does (every "
        "page faulted in by its first write); PyTorch allocates its result on every call (malloc, which may "
        "hand back the pages of the previous call's freed result).",
        "",
        "| tensor | dtype | " + " | ".join(keys) + " |",
        "|---|---|" + "---|" * len(keys),
    ]
    for name, s, d, _, g in rows:
        cells = [f"{g[k][0]:.2f} ({g[k][1]:.2f}-{g[k][2]:.2f})" for k in keys]
        lines.append(f"| {name} | {s} -> {d} | " + " | ".join(cells) + " |")
    lines += ["", "The loader runs these per row range on a thread pool (`vidax.checkpoint.loader.convert_all`); "
              "docs/design.md, 'Checkpoint translation', says why the kernel is shaped as it is.", ""]
    publish(lines, write=not args.no_write)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    raise SystemExit(main())
