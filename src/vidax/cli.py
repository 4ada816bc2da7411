"""The ``vidax`` command line: parse, call the pipeline, write the file. No model logic here."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from vidax.models.wan.config import PRESETS, WAN_NEGATIVE_PROMPT

# Defaults when neither a flag nor a preset sets a value (diffusers WanPipeline's defaults).
_DEFAULTS = dict(height=480, width=832, num_frames=81, steps=50, guidance_scale=5.0, flow_shift=None,
                 dtype="bfloat16", negative_prompt=WAN_NEGATIVE_PROMPT, fps=16)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vidax", description="JAX inference for open video generation models.")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate a video from a prompt")
    g.add_argument("--checkpoint", required=True, help="Wan checkpoint folder (diffusers layout or the original release)")
    g.add_argument("--prompt", required=True)
    g.add_argument("--negative-prompt", default=None, help="default: the Wan reference negative prompt")
    g.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="reference settings of a benchmark row (size, frames, steps, shift, dtype)")
    g.add_argument("--height", type=int, default=None, help="pixels, multiple of 16")
    g.add_argument("--width", type=int, default=None, help="pixels, multiple of 16")
    g.add_argument("--num-frames", type=int, default=None, help="4k+1 frames")
    g.add_argument("--steps", type=int, default=None, help="sampler steps")
    g.add_argument("--guidance-scale", type=float, default=None)
    g.add_argument("--flow-shift", type=float, default=None, help="default: the checkpoint scheduler's shift")
    g.add_argument("--sampler", choices=["unipc", "euler"], default=None, help="default: the checkpoint's (UniPC)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--dtype", choices=["bfloat16", "float32"], default=None, help="transformer weight dtype")
    g.add_argument("--attention", choices=["auto", "xla", "chunked", "cudnn", "splash"], default="auto",
                   help="attention kernel; auto: cudnn on GPU, splash on TPU, chunked on CPU")
    g.add_argument("--dp", type=int, default=1, help="data-parallel size (CFG halves split over it)")
    g.add_argument("--tp", type=int, default=1, help="tensor-parallel size (divides the head count)")
    g.add_argument("--sp", type=int, default=1, help="sequence-parallel size (Ulysses); dp*tp*sp = device count")
    g.add_argument("--fps", type=int, default=None)
    g.add_argument("--out", default="outputs/video.mp4", help="mp4 path (written to a temp file, then renamed)")
    g.add_argument("--metrics-json", default=None, help="also write timings and memory as JSON here")
    g.add_argument("--no-progress", action="store_true")

    i = sub.add_parser("inspect", help="describe a checkpoint folder or file (reads headers only)")
    i.add_argument("path", help="a Wan checkpoint folder (any layout), a component folder, or a weights file")

    c = sub.add_parser("convert", help="translate a checkpoint once into the vidax layout (loads as a plain copy)")
    c.add_argument("src", help="Wan checkpoint folder (diffusers layout or the original release)")
    c.add_argument("dst", help="output folder (must not exist)")
    c.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16", help="transformer weight dtype")
    c.add_argument("--text-encoder-dtype", choices=["bfloat16", "float32"], default="float32")
    c.add_argument("--vae-dtype", choices=["bfloat16", "float32"], default="float32")
    return p


def _settings(args) -> dict:
    s = dict(_DEFAULTS)
    if args.preset:
        pr = PRESETS[args.preset]
        s.update(height=pr.height, width=pr.width, num_frames=pr.num_frames, steps=pr.num_inference_steps,
                 guidance_scale=pr.guidance_scale, flow_shift=pr.flow_shift, dtype=pr.dtype,
                 negative_prompt=pr.negative_prompt, fps=pr.fps)
    for key in ("height", "width", "num_frames", "steps", "guidance_scale", "flow_shift", "dtype", "negative_prompt", "fps"):
        v = getattr(args, key)
        if v is not None:
            s[key] = v
    return s


def generate(args) -> int:
    from vidax.models.wan.pipeline import WanPipeline, check_checkpoint_dir, check_inputs
    from vidax.video import write_video

    s = _settings(args)
    # Every check that needs no weights runs before anything is loaded or computed.
    check_inputs(s["height"], s["width"], s["num_frames"])
    check_checkpoint_dir(args.checkpoint)
    out = Path(args.out)
    if out.suffix.lower() != ".mp4":
        raise ValueError(f"--out {out} must end in .mp4")

    t0 = time.perf_counter()
    pipe = WanPipeline.from_pretrained(args.checkpoint, dtype=s["dtype"], attention=args.attention,
                                       dp=args.dp, tp=args.tp, sp=args.sp)
    result = pipe(
        args.prompt, s["negative_prompt"], height=s["height"], width=s["width"], num_frames=s["num_frames"],
        num_inference_steps=s["steps"], guidance_scale=s["guidance_scale"], flow_shift=s["flow_shift"],
        sampler=args.sampler, seed=args.seed, progress=not args.no_progress,
    )
    write_video(result.frames[0], out, fps=s["fps"])
    m = dict(result.metrics)
    m["total_s"] = time.perf_counter() - t0
    m.update(height=s["height"], width=s["width"], num_frames=s["num_frames"], steps=s["steps"], out=str(out))
    print(
        f"wrote {out}: {s['num_frames']} frames {s['width']}x{s['height']} | load {m['load_s']:.1f}s, "
        f"text encoder {m['text_encoder_s']:.2f}s, compile {m['compile_s']:.1f}s, {m['step_s']:.3f}s/step, "
        f"VAE decode {m['vae_decode_s']:.2f}s, peak host memory {m['peak_host_rss_bytes'] / 2**30:.2f} GiB"
        + (f", peak device memory {m['peak_device_bytes'] / 2**30:.2f} GiB" if "peak_device_bytes" in m else "")
    )
    if args.metrics_json:
        path = Path(args.metrics_json)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.part")
        tmp.write_text(json.dumps(m, indent=2))
        os.replace(tmp, path)
    return 0


def inspect(args) -> int:
    from vidax.models.wan.inspection import inspect_checkpoint

    print("\n".join(inspect_checkpoint(args.path)))
    return 0


def convert(args) -> int:
    from vidax.models.wan.convert import convert_checkpoint

    s = convert_checkpoint(args.src, args.dst, dtype=args.dtype, text_encoder_dtype=args.text_encoder_dtype,
                           vae_dtype=args.vae_dtype)
    sizes = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in s["bytes"].items())
    print(f"wrote {args.dst} from the {s['source_layout']} layout in {s['seconds']:.1f}s: {sizes}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "generate":
            return generate(args)
        if args.command == "inspect":
            return inspect(args)
        if args.command == "convert":
            return convert(args)
    except (ValueError, OSError) as e:  # CheckpointError is a ValueError; OSError: missing or existing files
        print(f"vidax: error: {e}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
