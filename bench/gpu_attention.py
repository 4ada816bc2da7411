"""cuDNN flash attention against the XLA reference on one NVIDIA GPU: correctness, then TFLOP/s.

Run on a GPU machine (the CPU CI cannot run cuDNN)::

    .venv/bin/python -m bench.gpu_attention --json outputs/gpu_attention.json

What it does, through the engine's one entry point ``vidax.core.attention.attention``:

1. **Dispatch check**: the compiled HLO of ``implementation="cudnn"`` must contain a cuDNN
   fused-attention custom call (``__cudnn$fmha``), and no ``AttentionFallbackWarning`` may be
   raised; otherwise the run says so and the cuDNN numbers below are not cuDNN's.
2. **Correctness** (bf16 and fp16, right-padded keys, one sample with 1000 padded keys): cuDNN
   against ``xla`` at a size where the full score matrix fits (default 4096 tokens); relative L2
   error must be below 1e-2. At full size it is compared against ``chunked`` (the same math as
   ``xla`` per query chunk; ``xla``'s (B, H, S, S) float32 scores would be 51 GiB at 32,760 tokens).
3. **Speed** at Wan2.1 1.3B 480p self-attention: B=1, S=32,760 tokens (21 x 30 x 52 latent
   patches), 12 heads of 128, bf16: mean wall time of ``--iters`` calls after a warm-up, and
   TFLOP/s = 4 * B * H * S^2 * D / time, for ``cudnn``, ``chunked`` and ``xla`` (``xla`` reports
   OOM if the device cannot hold its score matrix). Also the 512-key text cross-attention.

``--smoke`` shrinks every size so the script itself can be checked on CPU (cuDNN then falls back
and the report says so). No numbers from this script are claimed in the docs until a GPU run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path


def _time(fn, args, iters):
    import jax

    jax.block_until_ready(fn(*args))  # warm-up (compile excluded)
    t0 = time.perf_counter()
    for _ in range(iters):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / iters


def _inputs(b, sq, sk, h, d, dtype, seed=0):
    import jax
    import jax.numpy as jnp

    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    return (jax.random.normal(kq, (b, sq, h, d), jnp.float32).astype(dtype),
            jax.random.normal(kk, (b, sk, h, d), jnp.float32).astype(dtype),
            jax.random.normal(kv, (b, sk, h, d), jnp.float32).astype(dtype))


def _rel(a, b):
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _call(impl, lengths):
    import jax

    from vidax.core.attention import attention

    return jax.jit(lambda q, k, v: attention(q, k, v, implementation=impl, kv_lengths=lengths))


def dispatch_check(b, s, h, d, dtype) -> dict:
    """Whether ``cudnn`` really lowers to cuDNN (HLO custom call, no fallback warning)."""
    import jax.numpy as jnp

    from vidax.core.attention import AttentionFallbackWarning

    q, k, v = _inputs(b, s, s, h, d, dtype)
    lengths = jnp.full((b,), s - 7, jnp.int32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hlo = _call("cudnn", lengths).lower(q, k, v).compile().as_text()
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, AttentionFallbackWarning)]
    return {"cudnn_custom_call": "__cudnn$fmha" in hlo, "fallback_warnings": fallbacks}


def correctness(b, s, h, d, dtypes, reference) -> list[dict]:
    """cuDNN vs ``reference`` with padded keys (sample 0 full, the others 1000 keys short)."""
    import jax.numpy as jnp

    rows = []
    for dtype in dtypes:
        q, k, v = _inputs(b, s, s, h, d, dtype, seed=1)
        lengths = jnp.array([s] + [max(1, s - 1000)] * (b - 1), jnp.int32)
        ref = _call(reference, lengths)(q, k, v)
        out = _call("cudnn", lengths)(q, k, v)
        err = _rel(out, ref)
        rows.append({"dtype": jnp.dtype(dtype).name, "tokens": s, "reference": reference, "rel_l2": err,
                     "ok": err < 1e-2})
    return rows


def speed(b, sq, sk, h, d, dtype, impls, iters) -> list[dict]:
    import jax.numpy as jnp

    from vidax.core.attention import AttentionFallbackWarning, attention_flops

    q, k, v = _inputs(b, sq, sk, h, d, dtype, seed=2)
    flops = attention_flops(b, sq, sk, h, d)
    rows = []
    for impl in impls:
        row = {"impl": impl, "batch": b, "q_tokens": sq, "kv_tokens": sk, "heads": h, "head_dim": d,
               "dtype": jnp.dtype(dtype).name}
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                sec = _time(_call(impl, None), (q, k, v), iters)
            row.update(ms=sec * 1e3, tflops=flops / sec / 1e12)
            fell = [str(w.message) for w in caught if issubclass(w.category, AttentionFallbackWarning)]
            if fell:
                row["fell_back"] = fell[0]
        except Exception as e:  # noqa: BLE001 - an OOM of the xla reference is a result, not a crash
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            row.update(error=("OOM: " if "RESOURCE_EXHAUSTED" in str(e) or "out of memory" in str(e).lower() else "")
                       + msg[:300])
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=32760, help="self-attention tokens (Wan2.1 480p x 81 frames: 32760)")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--text-tokens", type=int, default=512)
    p.add_argument("--check-tokens", type=int, default=4096, help="size of the cudnn-vs-xla correctness check")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--impls", default="cudnn,chunked,xla")
    p.add_argument("--smoke", action="store_true", help="tiny sizes; runs anywhere (cuDNN falls back off GPU)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp

    if args.smoke:
        args.tokens, args.check_tokens, args.text_tokens, args.heads, args.head_dim, args.iters = 600, 300, 64, 2, 64, 2
    backend = jax.default_backend()
    if backend != "gpu" and not args.smoke:
        print(f"bench.gpu_attention: backend is {backend!r}; run on an NVIDIA GPU (or pass --smoke)", file=sys.stderr)
        return 2
    dev = jax.devices()[0]
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    h, d = args.heads, args.head_dim
    result = {
        "device": getattr(dev, "device_kind", str(dev)), "backend": backend, "jax": jax.__version__,
        "dispatch": dispatch_check(2, min(args.check_tokens, 1024), h, d, jnp.bfloat16),
        "correctness": correctness(2, args.check_tokens, h, d, [jnp.bfloat16, jnp.float16], "xla")
        + correctness(2, args.tokens, h, d, [jnp.bfloat16], "chunked"),
        "self_attention": speed(args.batch, args.tokens, args.tokens, h, d, jnp.bfloat16, impls, args.iters),
        "cross_attention": speed(args.batch, args.tokens, args.text_tokens, h, d, jnp.bfloat16,
                                 [i for i in impls if i != "xla"], args.iters),
    }
    print(f"device {result['device']} ({backend}), jax {result['jax']}")
    disp = result["dispatch"]
    print(f"cudnn lowers to cuDNN fused attention: {disp['cudnn_custom_call']}"
          + ("" if not disp["fallback_warnings"] else f"; FELL BACK: {disp['fallback_warnings'][0]}"))
    for row in result["correctness"]:
        print(f"correctness {row['dtype']:8s} S={row['tokens']:6d} vs {row['reference']:7s}: rel L2 {row['rel_l2']:.2e} "
              f"{'ok' if row['ok'] else 'FAIL'}")
    for part in ("self_attention", "cross_attention"):
        for row in result[part]:
            what = f"{part:15s} {row['impl']:8s} B={row['batch']} Sq={row['q_tokens']} Sk={row['kv_tokens']} H={h} D={d}"
            print(what + (f": {row['ms']:9.2f} ms  {row['tflops']:7.1f} TFLOP/s" if "ms" in row else f": {row['error']}")
                  + (" (FELL BACK to chunked)" if "fell_back" in row else ""))
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.part")
        tmp.write_text(json.dumps(result, indent=2))
        tmp.replace(out)
    ok = all(r["ok"] for r in result["correctness"])
    return 0 if ok and (args.smoke or disp["cudnn_custom_call"]) else 1


if __name__ == "__main__":
    sys.exit(main())
