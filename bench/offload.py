"""Per-layer weight offloading benchmark: transformer step time against chunk size, overlapped and serial.

A Wan2.1-1.3B-width transformer (dim 1536 = 12 x 128, ffn 8960, text_dim 4096; random float32
weights, ``--layers`` blocks) runs one guided step's transformer evaluation (batch 2 = both CFG
halves, 64 tokens each: few tokens, so that copying weights is a visible share of the step) on
one device:

- ``resident``: every block in device memory (``vidax.models.wan.transformer.forward``);
- ``offload N``: blocks in host memory (``pinned_host``) in chunks of N, streamed through the one
  compiled chunk function (``vidax.models.wan.offload.forward_offloaded``), with the copy of the
  next chunk overlapping the current chunk's compute (``overlap``) or not (``serial``, the
  paper's mode). In serial mode the time spent waiting for copies and computing is also recorded.

Each configuration is compiled and run once untimed, then timed ``--repeats`` times (median,
min-max). Device-resident block memory is analytical: two chunk buffers with overlap, one
serial, the whole stack resident.

On the CPU backend "device" and "host" memory are the same RAM, so a copy is a ``memcpy`` that
competes with compute for the same cores and memory bandwidth; on accelerators the copy runs on a
DMA engine over PCIe/host links. Read the CPU numbers as the cost of the machinery (launches,
synchronisation, copies), not as a prediction for a TPU or GPU.

Usage: ``python -m bench.offload [--layers 8] [--chunks 1,2,4] [--repeats 3]``. Writes
``docs/benchmarks/offload.json`` and the "Offloading" section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

from bench._report import DOCS, ROOT, machine, replace_section, versions

WAN_1_3B_WIDTH = dict(num_attention_heads=12, attention_head_dim=128, ffn_dim=8960, text_dim=4096, freq_dim=256)
LATENT = (1, 16, 1, 16, 16)  # 1 x 8 x 8 = 64 tokens per sample; the step runs 2 samples (CFG)
TEXT_LEN = 512


def _time(fn, repeats: int) -> tuple[float, float, float]:
    fn()  # compile + warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def run(layers: int, chunks: list[int], repeats: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from vidax.core.offload import host_memory_kind
    from vidax.core.params import random_params
    from vidax.models.wan.config import WanTransformerConfig
    from vidax.models.wan.offload import forward_offloaded, offload_blocks
    from vidax.models.wan.transformer import forward, rope_tables, transformer_specs

    cfg = WanTransformerConfig(num_layers=layers, **WAN_1_3B_WIDTH)
    specs = transformer_specs(cfg)
    params = jax.tree.map(jnp.asarray, random_params(specs, seed=0))
    rng = np.random.default_rng(1)
    shape = (2, *LATENT[1:])
    inputs = (jnp.asarray(rng.standard_normal(shape, dtype=np.float32)), jnp.asarray([900.0, 900.0], jnp.float32),
              jnp.asarray(rng.standard_normal((2, TEXT_LEN, cfg.text_dim), dtype=np.float32)),
              *(jnp.asarray(a) for a in rope_tables(cfg, shape)))
    block_bytes = sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in jax.tree.leaves(params["blocks"]))
    layer_bytes = block_bytes // layers
    rows = []

    ref = None

    def resident():
        nonlocal ref
        ref = jax.block_until_ready(forward(params, *inputs, cfg=cfg))

    med, lo, hi = _time(resident, repeats)
    rows.append(dict(config="resident", chunk=None, overlap=None, median_s=med, min_s=lo, max_s=hi,
                     device_block_bytes=block_bytes))
    print(f"resident: {med:.3f}s", flush=True)
    ref = np.asarray(ref)
    params = jax.tree.map(np.asarray, params)  # the offloaded runs need no resident copy of the blocks
    for chunk in chunks:
        resident_params, stack = offload_blocks(params, chunk, cfg)
        resident_params = jax.tree.map(jnp.asarray, resident_params)
        for overlap in (True, False):
            out = None
            timings: list = []

            def offloaded():
                nonlocal out
                timings.append([])
                out = jax.block_until_ready(forward_offloaded(resident_params, stack, *inputs, cfg=cfg, overlap=overlap,
                                                              timings=timings[-1]))

            med, lo, hi = _time(offloaded, repeats)
            err = float(np.max(np.abs(np.asarray(out) - ref)))
            row = dict(config=f"offload {chunk}", chunk=chunk, overlap=overlap, median_s=med, min_s=lo, max_s=hi,
                       chunks=stack.num_chunks, device_block_bytes=(2 if overlap else 1) * chunk * layer_bytes,
                       max_abs_diff=err)
            if not overlap:  # serial: the timed runs' time waiting for copies and computing (medians)
                runs = timings[1:]  # the first call compiled
                row["copy_s"] = statistics.median(sum(t for t, _ in r) for r in runs)
                row["compute_s"] = statistics.median(sum(c for _, c in r) for r in runs)
            rows.append(row)
            print(f"offload {chunk} {'overlap' if overlap else 'serial'}: {med:.3f}s (max |diff| {err:.1e})", flush=True)
        del stack
    return dict(layers=layers, layer_bytes=layer_bytes, block_bytes=block_bytes, tokens=64, batch=2,
                host_memory_kind=host_memory_kind(), rows=rows)


def write_report(result: dict, argv: list[str], seconds: float) -> None:
    (ROOT / "docs" / "benchmarks").mkdir(parents=True, exist_ok=True)
    (ROOT / "docs" / "benchmarks" / "offload.json").write_text(json.dumps(result, indent=2))
    v = versions(("jax", "jaxlib", "numpy"))
    res = next(r for r in result["rows"] if r["chunk"] is None)
    lines = [
        "## Offloading",
        "",
        f"Generated by `python -m bench.offload {' '.join(argv)}`".rstrip() + f" on {datetime.date.today()} "
        f"({machine()}; {', '.join(f'{k} {x}' for k, x in v.items())}); {seconds / 60:.1f} min.",
        "",
        f"Transformer step (both CFG halves, 2 x {result['tokens']} tokens) of a Wan2.1-1.3B-width model with {result['layers']} blocks "
        f"(dim 1536, ffn 8960), float32: {result['layer_bytes'] / 2**20:.0f} MiB per block, "
        f"{result['block_bytes'] / 2**30:.2f} GiB of blocks. Offloaded blocks live in `{result['host_memory_kind']}` "
        "memory and stream through one compiled chunk function. Median (min-max) of the timed runs after one "
        "untimed run. CPU backend: host and device memory are the same RAM, so copies compete with compute for "
        "the same two cores; the machine was shared with other jobs.",
        "",
        "| configuration | step s | vs resident | blocks in device memory | copy s / compute s (serial) |",
        "|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        name = r["config"] if r["chunk"] is None else f"{r['config']}, {'overlap' if r['overlap'] else 'serial'}"
        split = f"{r['copy_s']:.3f} / {r['compute_s']:.3f}" if "copy_s" in r else ""
        lines.append(f"| {name} | {r['median_s']:.3f} ({r['min_s']:.3f}-{r['max_s']:.3f}) | "
                     f"{r['median_s'] / res['median_s']:.2f}x | {r['device_block_bytes'] / 2**20:.0f} MiB | {split} |")
    worst = max((r.get("max_abs_diff", 0.0) for r in result["rows"]), default=0.0)
    lines += ["", f"Offloaded outputs equal the resident output to {worst:.1e} (max absolute difference).", ""]
    replace_section("## Offloading", "\n".join(lines), DOCS)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--chunks", default="1,2,4")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    result = run(args.layers, [int(c) for c in args.chunks.split(",")], args.repeats)
    write_report(result, argv, time.perf_counter() - t0)
    print(f"wrote {DOCS} (## Offloading) and docs/benchmarks/offload.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
