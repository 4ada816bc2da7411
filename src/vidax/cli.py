"""The ``vidax`` command line: parse, call the pipeline, write the file. No model logic here."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from vidax.models.wan.config import PRESETS, WAN_NEGATIVE_PROMPT

# Defaults when neither a flag nor a preset sets a value (diffusers WanPipeline's defaults).
_DEFAULTS = dict(height=480, width=832, num_frames=81, steps=50, guidance_scale=5.0, flow_shift=None,
                 dtype="bfloat16", negative_prompt=WAN_NEGATIVE_PROMPT, fps=16)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = _finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = _finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or positive, got {text}")
    return value


def _fps(text: str) -> int:
    value = _positive_int(text)
    if value > 1000:
        raise argparse.ArgumentTypeError(f"must be at most 1000 frames per second, got {text}")
    return value


def _seed(text: str) -> int:
    from vidax.core.inputs import check_seed

    value = int(text)  # (a ValueError here: argparse's "invalid seed value")
    try:
        return check_seed(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _directory(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: pass a directory, or --no-compile-cache to turn the cache off")
    return text


def _timesteps(text: str) -> tuple[float, ...]:
    values = tuple(float(v) for v in text.split(",") if v.strip())
    if not values or not all(math.isfinite(v) and 0 <= v <= 1000 for v in values):
        raise argparse.ArgumentTypeError(f"must be comma-separated numbers in [0, 1000], got {text!r}")
    return values


# argparse reports a type function's ValueError as "invalid <name> value"; these names read as the expected type.
_positive_int.__name__ = "positive integer"
_finite_float.__name__ = _positive_float.__name__ = _non_negative_float.__name__ = "number"
_seed.__name__ = "seed"
_fps.__name__ = "frame rate"
_timesteps.__name__ = "timesteps"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vidax", description="JAX inference for open video generation models.")
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate a video from a prompt")
    g.add_argument("--checkpoint", required=True,
                   help="Wan (diffusers layout or the original release), CogVideoX or LTX-Video checkpoint folder")
    g.add_argument("--prompt", required=True)
    g.add_argument("--negative-prompt", default=None, help="default: the Wan reference negative prompt")
    g.add_argument("--image", default=None,
                   help="first frame (image-to-video: Wan2.1 I2V/FLF2V, Wan2.2, LTX-Video)")
    g.add_argument("--last-image", default=None,
                   help="last frame (first-last-frame: Wan2.1 FLF2V, Wan2.2 I2V A14B, LTX-Video 0.9.5+)")
    g.add_argument("--max-area", type=int, default=None,
                   help="with --image and no --height/--width: output pixels (the image's aspect ratio is kept)")
    g.add_argument("--guidance-scale-2", type=_finite_float, default=None,
                   help="Wan2.2 A14B: guidance of the low-noise expert (default: --guidance-scale)")
    g.add_argument("--preset", choices=sorted(PRESETS) + sorted(_cogvideox_presets()) + sorted(_ltx_presets()), default=None,
                   help="reference settings of a benchmark row (size, frames, steps, shift, dtype)")
    g.add_argument("--height", type=int, default=None, help="pixels, multiple of 16 (32 for LTX-Video)")
    g.add_argument("--width", type=int, default=None, help="pixels, multiple of 16 (32 for LTX-Video)")
    g.add_argument("--num-frames", type=int, default=None, help="4k+1 frames (Wan), 8k+1 (CogVideoX, LTX-Video)")
    g.add_argument("--steps", type=_positive_int, default=None, help="sampler steps")
    g.add_argument("--guidance-scale", type=_finite_float, default=None, help="CFG scale; 1 or below turns CFG off")
    g.add_argument("--flow-shift", type=_positive_float, default=None, help="default: the checkpoint scheduler's shift")
    g.add_argument("--sampler", choices=["unipc", "euler", "ddim", "dpm"], default=None,
                   help="default: the checkpoint's (UniPC for Wan, DDIM for CogVideoX; ddim/dpm are CogVideoX samplers)")
    g.add_argument("--guidance-rescale", type=_finite_float, default=None,
                   help="LTX-Video: rescale of the guided prediction, 0 to 1 (0.7 for the dev presets; 0: off)")
    g.add_argument("--timesteps", type=_timesteps, default=None,
                   help="LTX-Video: explicit timesteps, comma-separated (the distilled presets' list)")
    g.add_argument("--decode-timestep", type=_non_negative_float, default=None,
                   help="LTX-Video: the timestep-conditioned VAE's decode timestep (presets: 0.05)")
    g.add_argument("--decode-noise-scale", type=_non_negative_float, default=None,
                   help="LTX-Video: noise mixed into the latents before decoding (default: --decode-timestep)")
    g.add_argument("--seed", type=_seed, default=0, help="noise seed, 0 to 2**32 - 1")
    g.add_argument("--dtype", choices=["bfloat16", "float32"], default=None, help="transformer weight dtype")
    g.add_argument("--attention", choices=["auto", "xla", "chunked", "cudnn", "splash", "cpu_flash"],
                   default="auto", help="attention kernel; auto: cudnn on GPU, splash on TPU, cpu_flash on CPU")
    g.add_argument("--dp", type=_positive_int, default=1, help="data-parallel size (CFG halves split over it)")
    g.add_argument("--tp", type=_positive_int, default=1, help="tensor-parallel size (divides the head count)")
    g.add_argument("--sp", type=_positive_int, default=1, help="sequence-parallel size (Ulysses); dp*tp*sp = device count")
    g.add_argument("--offload-chunk", type=int, default=None, metavar="N",
                   help="keep the transformer blocks in host memory and stream them to the devices N at a time")
    g.add_argument("--offload-serial", action="store_true",
                   help="with --offload-chunk: copy each chunk, then compute (no copy/compute overlap; the paper's mode)")
    g.add_argument("--block-loop", choices=["auto", "scan", "host"], default="auto",
                   help="run the transformer blocks under one scan (scan) or as one block program called per "
                        "block from the host (host); auto: host on CPU, scan on accelerators")
    g.add_argument("--text-encoder-residency", choices=["auto", "resident", "free"], default="auto",
                   help="free the float32 text encoder after encoding (auto: on accelerators, not on CPU)")
    g.add_argument("--auto-split", action="store_true",
                   help="choose --dp/--tp/--sp/--offload-chunk with the memory planner (see `vidax plan`) for all devices")
    g.add_argument("--memory-gb", type=_positive_float, default=None,
                   help="with --auto-split: per-device memory budget in GiB (default: what the device reports; on "
                        "CPU the host's memory divided by the device count)")
    g.add_argument("--reserve-gb", type=_non_negative_float, default=0.0,
                   help="with --auto-split: GiB per device kept free for the text encoder and the VAE")
    g.add_argument("--distributed", action="store_true",
                   help="several hosts: call jax.distributed.initialize() first (arguments from the flags below or the "
                        "cluster environment); each process reads only its devices' shards, process 0 writes the outputs")
    g.add_argument("--coordinator-address", default=None, help="with --distributed: host:port of process 0")
    g.add_argument("--num-processes", type=int, default=None, help="with --distributed: number of processes")
    g.add_argument("--process-id", type=int, default=None, help="with --distributed: this process's index")
    g.add_argument("--fps", type=_fps, default=None,
                   help="frames per second of the mp4 (default: the model's)")
    g.add_argument("--out", default="outputs/video.mp4", help="mp4 path (written to a temp file, then renamed)")
    g.add_argument("--metrics-json", default=None, help="also write timings and memory as JSON here")
    g.add_argument("--no-progress", action="store_true")
    cache = g.add_mutually_exclusive_group()
    cache.add_argument("--compile-cache", type=_directory, default=None, metavar="DIR",
                       help="keep compiled programs here for later runs (default: $VIDAX_COMPILE_CACHE, else "
                            "$XDG_CACHE_HOME/vidax/jax or ~/.cache/vidax/jax)")
    cache.add_argument("--no-compile-cache", action="store_true", help="compile everything afresh, write no cache")

    i = sub.add_parser("inspect", help="describe a checkpoint folder or file (reads headers only)")
    i.add_argument("path", help="a Wan, CogVideoX or LTX-Video checkpoint folder (any layout), a component folder, "
                                "or a weights file")

    pl = sub.add_parser("plan", help="per-device memory of every (dp, tp, sp, offload) split, compiled without weights")
    pl.add_argument("--preset", choices=sorted(PRESETS), required=True, help="the generation settings to plan")
    pl.add_argument("--checkpoint", default=None, help="take the transformer architecture from this checkpoint "
                    "(default: the preset's model)")
    pl.add_argument("--devices", type=_positive_int, default=None,
                    help="devices of the run (default: the preset's tp x sp, the paper's chip count)")
    pl.add_argument("--memory-gb", type=_positive_float, default=None,
                    help="per-device memory budget in GiB (default: what the device reports, else 30.75: the usable "
                         "HBM of a TPU v4 chip, the paper's budget)")
    pl.add_argument("--reserve-gb", type=_non_negative_float, default=0.0,
                    help="GiB per device kept free for the text encoder and VAE")
    pl.add_argument("--height", type=int, default=None)
    pl.add_argument("--width", type=int, default=None)
    pl.add_argument("--num-frames", type=int, default=None)
    pl.add_argument("--dtype", choices=["bfloat16", "float32"], default=None)
    pl.add_argument("--chunks", default=None,
                    help="offload chunk sizes to try, comma-separated, or 'none' (default: divisors of the layer count)")
    pl.add_argument("--serial", action="store_true", help="plan offloading without copy/compute overlap (one buffer)")
    pl.add_argument("--json", default=None, help="also write the estimates as JSON here")

    c = sub.add_parser("convert", help="translate a checkpoint once into the vidax layout (loads as a plain copy)")
    c.add_argument("src", help="Wan (diffusers layout or the original release), CogVideoX or LTX-Video checkpoint folder")
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


def init_distributed(args) -> None:
    """``jax.distributed.initialize`` from ``--coordinator-address/--num-processes/--process-id``
    (each optional: JAX reads the rest from the cluster environment, e.g. TPU pods, SLURM). Must run
    before anything touches a JAX backend. On the CPU backend the cross-process collectives are gloo
    (``jax_cpu_collectives_implementation``)."""
    import jax

    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, ValueError):  # a JAX without the option
        pass
    kw = {k: v for k, v in (("coordinator_address", args.coordinator_address), ("num_processes", args.num_processes),
                            ("process_id", args.process_id)) if v is not None}
    jax.distributed.initialize(**kw)


def write_outputs(frames, metrics: dict, out: Path, metrics_json: str | None, fps: int) -> bool:
    """Write the video (and metrics JSON) on process 0 only; other processes of a multi-host run
    write nothing. Returns whether this process wrote."""
    import jax

    from vidax.video import write_video

    if jax.process_index() != 0:
        return False
    write_video(frames, out, fps=fps)
    if metrics_json:
        path = Path(metrics_json)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.part")
        tmp.write_text(json.dumps(metrics, indent=2))
        os.replace(tmp, path)
    return True


def check_outputs(args) -> Path:
    """Check ``--out`` and ``--metrics-json`` before anything is loaded; return the video's path.

    ``~`` is expanded in both (``args.metrics_json`` is updated). Each file's folder is created and a probe file
    written and removed there, so a path that cannot be written fails now rather than after the generation.

    Raises:
      ValueError: ``--out`` not ending in ``.mp4``, either path an existing folder or inside a file, a folder
        that cannot be written, or both flags naming the same file.
    """
    out = Path(args.out).expanduser()
    if out.suffix.lower() != ".mp4":  # (".mp4" alone is a hidden file without a suffix)
        raise ValueError(f"--out {out} must be a file name ending in .mp4, e.g. {out.with_name('video.mp4')}")
    _check_writable(out, "--out")
    if args.metrics_json:
        metrics = Path(args.metrics_json).expanduser()
        if metrics.resolve() == out.resolve():
            raise ValueError(f"--metrics-json {metrics} is the --out video itself; pick another file, e.g. "
                             f"{out.with_suffix('.json')}")
        _check_writable(metrics, "--metrics-json")
        args.metrics_json = str(metrics)
    return out


def _check_writable(path: Path, flag: str) -> None:
    """Raise ValueError naming ``flag`` and ``path`` unless a file can be written at ``path``."""
    if path.is_dir():
        example = path / ("metrics.json" if flag == "--metrics-json" else "video.mp4")
        raise ValueError(f"{flag} {path} is a folder; pass a file path inside it, e.g. {example}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        reason = e.strerror or str(e)
        if isinstance(e, (FileExistsError, NotADirectoryError)):
            reason = "a file stands where a folder of the path should be"
        raise ValueError(f"{flag} {path}: cannot write there ({reason}); choose another path") from None


def _cogvideox_presets() -> dict:
    from vidax.models.cogvideox.config import PRESETS as COGVIDEOX_PRESETS

    return COGVIDEOX_PRESETS


def _is_cogvideox(args) -> bool:
    """A CogVideoX preset, or a CogVideoX checkpoint (diffusers or vidax-converted layout)."""
    from vidax.models.cogvideox.layout import is_cogvideox_folder

    return args.preset in _cogvideox_presets() or is_cogvideox_folder(args.checkpoint)


def generate_cogvideox(args) -> int:
    """``vidax generate`` for a CogVideoX text-to-video folder (presets ``cogvideox-*``)."""
    from vidax.models.cogvideox.pipeline import CogVideoXPipeline

    if args.image or args.last_image:
        raise ValueError("vidax generate runs CogVideoX text-to-video; for image-to-video use "
                         "vidax.models.cogvideox.pipeline.CogVideoXImageToVideoPipeline from Python")
    _refuse_flags(args, "CogVideoX", _WAN_ONLY_FLAGS + (("--offload-chunk", "offload_chunk", None),
                                                        ("--offload-serial", "offload_serial", False)))
    pr = _family_preset(args, _cogvideox_presets(), "CogVideoX")
    height = args.height or (pr.height if pr else 480)
    width = args.width or (pr.width if pr else 720)
    num_frames = args.num_frames or (pr.num_frames if pr else 49)
    steps = args.steps or (pr.num_inference_steps if pr else 50)
    guidance = args.guidance_scale if args.guidance_scale is not None else (pr.guidance_scale if pr else 6.0)
    sampler = args.sampler or (pr.sampler if pr else None)
    if sampler not in (None, "ddim", "dpm"):
        raise ValueError(f"--sampler {sampler} is not a CogVideoX sampler; choose ddim or dpm")
    out = check_outputs(args)
    if args.distributed:
        init_distributed(args)
    t0 = time.perf_counter()
    pipe = CogVideoXPipeline.from_pretrained(args.checkpoint, dtype=args.dtype or (pr.dtype if pr else "bfloat16"),
                                             attention=args.attention, dp=args.dp, tp=args.tp, sp=args.sp,
                                             text_encoder_residency=args.text_encoder_residency,
                                             block_loop=args.block_loop)
    result = pipe(args.prompt, args.negative_prompt, height=height, width=width, num_frames=num_frames,
                  num_inference_steps=steps, guidance_scale=guidance,
                  use_dynamic_cfg=pr.use_dynamic_cfg if pr else False, sampler=sampler, seed=args.seed,
                  vae_tiling=pr.vae_tiling if pr else None, progress=not args.no_progress)
    m = dict(result.metrics, total_s=time.perf_counter() - t0, height=height, width=width, num_frames=num_frames,
             steps=steps, out=str(out))
    if write_outputs(result.frames[0], m, out, args.metrics_json, args.fps or result.fps):
        print(f"wrote {out}: {num_frames} frames {width}x{height} in {m['total_s']:.1f}s")
    return 0


#: Flags of the Wan pipelines that the other families do not take (flag, attribute, value when not given).
_WAN_ONLY_FLAGS = (("--flow-shift", "flow_shift", None), ("--guidance-scale-2", "guidance_scale_2", None),
                   ("--max-area", "max_area", None), ("--auto-split", "auto_split", False),
                   ("--memory-gb", "memory_gb", None))


def _refuse_flags(args, family: str, flags) -> None:
    """Raise ValueError naming every given flag that ``family`` does not use (rather than ignoring it)."""
    given = [flag for flag, attr, unset in flags if getattr(args, attr) != unset]
    if given:
        raise ValueError(f"{' '.join(given)}: not used by {family} (Wan-only settings); leave them out")


def _family_preset(args, presets: dict, family: str):
    """The ``--preset`` of this family, or None; a preset of another family is an error."""
    if args.preset is None:
        return None
    if args.preset not in presets:
        raise ValueError(f"--preset {args.preset} is not a {family} preset, and {args.checkpoint} is a {family} checkpoint; "
                         f"{family} presets: {', '.join(sorted(presets))}")
    return presets[args.preset]


def _ltx_presets() -> dict:
    from vidax.models.ltx.config import PRESETS as LTX_PRESETS

    return LTX_PRESETS


def _is_ltx(args) -> bool:
    """An LTX-Video preset, or an LTX-Video checkpoint (diffusers layout)."""
    from vidax.models.ltx.layout import is_ltx_folder

    return args.preset in _ltx_presets() or is_ltx_folder(args.checkpoint)


def generate_ltx(args) -> int:
    """``vidax generate`` for an LTX-Video folder (presets ``ltx-video-*``): text-to-video, or with ``--image`` (the
    first frame) and ``--last-image`` (the last frame, ``LTXConditionPipeline`` folders) image-to-video."""
    from vidax.core.images import load_image
    from vidax.models.ltx.conditioning import LTXVideoCondition
    from vidax.models.ltx.pipeline import LTXPipeline, check_inputs
    from vidax.models.ltx.vae import LTXVideoVAEConfig

    if args.sampler not in (None, "euler"):
        raise ValueError(f"--sampler {args.sampler} is not an LTX-Video sampler; LTX-Video samples with euler")
    _refuse_flags(args, "LTX-Video", _WAN_ONLY_FLAGS)
    pr = _family_preset(args, _ltx_presets(), "LTX-Video")

    def pick(flag, preset_value, default):
        return flag if flag is not None else (preset_value if pr else default)

    height, width = pick(args.height, pr and pr.height, 512), pick(args.width, pr and pr.width, 704)
    num_frames = pick(args.num_frames, pr and pr.num_frames, 161)
    timesteps = pick(args.timesteps, pr and pr.timesteps, None)
    steps = len(timesteps) if timesteps is not None and args.steps is None else pick(args.steps, pr and pr.num_inference_steps, 50)
    frame_rate = pick(args.fps, pr and pr.frame_rate, 25)
    settings = dict(
        height=height, width=width, num_frames=num_frames, num_inference_steps=steps, timesteps=timesteps,
        frame_rate=frame_rate, guidance_scale=pick(args.guidance_scale, pr and pr.guidance_scale, 3.0),
        guidance_rescale=pick(args.guidance_rescale, pr and pr.guidance_rescale, 0.0),
        decode_timestep=pick(args.decode_timestep, pr and pr.decode_timestep, 0.0),
        decode_noise_scale=pick(args.decode_noise_scale, pr and pr.decode_noise_scale, None),
    )
    # Checks before anything is loaded (every released LTX-Video VAE compresses 32x space, 8x time).
    check_inputs(LTXVideoVAEConfig(), height, width, num_frames, frame_rate)
    if timesteps is not None and args.steps is not None and args.steps != len(timesteps):
        if args.timesteps is None:
            raise ValueError(f"--preset {args.preset} samples its {len(timesteps)} distilled timesteps; to sample other "
                             "ones pass them with --timesteps (e.g. --timesteps 1000,975,909,725), not --steps")
        raise ValueError(f"--steps {args.steps} and {len(timesteps)} timesteps disagree; pass one of them")
    if args.last_image:
        from vidax.models.ltx.layout import resolve_checkpoint

        if not args.image:
            raise ValueError("--last-image needs --image (the first frame) as well")
        if num_frames < 2:
            raise ValueError("--last-image needs a video of more than one frame (e.g. --num-frames 121)")
        ckpt = resolve_checkpoint(args.checkpoint)  # index files only
        if ckpt.pipeline_class != "LTXConditionPipeline":
            raise ValueError(f"--last-image needs an LTXConditionPipeline checkpoint (LTX-Video 0.9.5+); "
                             f"{args.checkpoint} is an {ckpt.pipeline_class} folder, which takes --image only")
    image = load_image(args.image, "--image") if args.image else None
    last = load_image(args.last_image, "--last-image") if args.last_image else None
    if last is not None:
        settings["conditions"] = [LTXVideoCondition(image=image), LTXVideoCondition(image=last, frame_index=num_frames - 1)]
    elif image is not None:
        settings["image"] = image
    out = check_outputs(args)
    if args.distributed:
        init_distributed(args)
    t0 = time.perf_counter()
    pipe = LTXPipeline.from_pretrained(args.checkpoint, dtype=args.dtype or (pr.dtype if pr else "bfloat16"),
                                       attention=args.attention, dp=args.dp, tp=args.tp, sp=args.sp,
                                       text_encoder_residency=args.text_encoder_residency, block_loop=args.block_loop,
                                       offload_chunk=args.offload_chunk, offload_overlap=not args.offload_serial)
    negative = args.negative_prompt if args.negative_prompt is not None else (pr.negative_prompt if pr else None)
    result = pipe(args.prompt, negative, seed=args.seed, progress=not args.no_progress, **settings)
    m = dict(result.metrics, total_s=time.perf_counter() - t0, height=height, width=width, num_frames=num_frames,
             steps=steps, out=str(out))
    if write_outputs(result.frames[0], m, out, args.metrics_json, frame_rate):
        print(f"wrote {out}: {num_frames} frames {width}x{height} | load {m['load_s']:.1f}s, text encoder "
              f"{m['text_encoder_s']:.2f}s" + (f", VAE encode {m['vae_encode_s']:.2f}s" if "vae_encode_s" in m else "")
              + f", compile {m['compile_s']:.1f}s, {m['step_s']:.3f}s/step, VAE decode {m['vae_decode_s']:.2f}s")
    return 0


def enable_compile_cache(args):
    """JAX's persistent compilation cache for this run (:mod:`vidax.core.compile_cache`), unless
    ``--no-compile-cache``; returns the directory in use or ``None``."""
    from vidax.core import compile_cache

    return None if args.no_compile_cache else compile_cache.enable(args.compile_cache)


def generate(args) -> int:
    from vidax.models.wan.pipeline import WanPipeline, check_checkpoint_dir, check_inputs

    enable_compile_cache(args)
    if _is_cogvideox(args):
        return generate_cogvideox(args)
    if _is_ltx(args):
        return generate_ltx(args)

    if _general_task(args):
        if args.auto_split:
            raise ValueError("--auto-split plans the Wan2.1 text-to-video step; pass --dp/--tp/--sp/--offload-chunk "
                             "for image-conditioned or Wan2.2 runs")
        return generate_general(args)
    s = _settings(args)
    # Every check that needs no weights runs before anything is loaded or computed.
    check_inputs(s["height"], s["width"], s["num_frames"])
    check_checkpoint_dir(args.checkpoint)
    out = check_outputs(args)

    if args.distributed:
        init_distributed(args)
    if args.auto_split:
        args.dp, args.tp, args.sp, args.offload_chunk = auto_split(args, s)
    t0 = time.perf_counter()
    pipe = WanPipeline.from_pretrained(args.checkpoint, dtype=s["dtype"], attention=args.attention,
                                       text_encoder_residency=args.text_encoder_residency,
                                       dp=args.dp, tp=args.tp, sp=args.sp, offload_chunk=args.offload_chunk,
                                       offload_overlap=not args.offload_serial, block_loop=args.block_loop)
    result = pipe(
        args.prompt, s["negative_prompt"], height=s["height"], width=s["width"], num_frames=s["num_frames"],
        num_inference_steps=s["steps"], guidance_scale=s["guidance_scale"], flow_shift=s["flow_shift"],
        sampler=args.sampler, seed=args.seed, progress=not args.no_progress,
    )
    m = dict(result.metrics)
    m["total_s"] = time.perf_counter() - t0
    m.update(height=s["height"], width=s["width"], num_frames=s["num_frames"], steps=s["steps"], out=str(out))
    if not write_outputs(result.frames[0], m, out, args.metrics_json, s["fps"]):
        return 0  # not process 0 of a multi-host run: nothing to print or write
    print(
        f"wrote {out}: {s['num_frames']} frames {s['width']}x{s['height']} | load {m['load_s']:.1f}s, "
        f"text encoder {m['text_encoder_s']:.2f}s, compile {m['compile_s']:.1f}s, {m['step_s']:.3f}s/step, "
        f"VAE decode {m['vae_decode_s']:.2f}s, peak host memory {m['peak_host_rss_bytes'] / 2**30:.2f} GiB"
        + (f", peak device memory {m['peak_device_bytes'] / 2**30:.2f} GiB" if "peak_device_bytes" in m else "")
    )
    return 0


def _general_task(args) -> bool:
    """Image conditioning, a second expert's guidance, a non-T2V-2.1 preset, or a checkpoint that
    only :class:`~vidax.models.wan.pipeline_i2v.WanImageToVideoPipeline` runs."""
    from vidax.models.wan.pipeline_i2v import needs_general_pipeline

    preset = PRESETS[args.preset] if args.preset else None
    if args.image or args.last_image or args.guidance_scale_2 is not None or args.max_area is not None:
        return True
    if preset is not None and (preset.task != "t2v" or preset.model.startswith("Wan2.2")):
        return True
    try:
        return needs_general_pipeline(args.checkpoint)
    except (ValueError, OSError):  # an unusable folder: the T2V path reports it, after its size checks
        return False


def generate_general(args) -> int:
    """``generate`` for every Wan task (I2V, FLF2V, TI2V-5B, A14B): image and checkpoint checked first."""
    from vidax.models.wan.pipeline import check_checkpoint_dir
    from vidax.models.wan.pipeline_i2v import WanImageToVideoPipeline, load_image

    s = _settings(args)
    preset = PRESETS[args.preset] if args.preset else None
    # Checks that need no weights: the checkpoint folder, the images, the output path.
    check_checkpoint_dir(args.checkpoint)
    if preset is not None and preset.task in ("i2v", "flf2v") and not args.image:
        raise ValueError(f"--preset {preset.name} is an image-to-video setting: pass --image (the first frame)"
                         + (" and --last-image" if preset.task == "flf2v" else ""))
    image = load_image(args.image, "--image") if args.image else None
    last = load_image(args.last_image, "--last-image") if args.last_image else None
    out = check_outputs(args)
    # Explicit --height/--width win; with an image a preset gives the area, not the size.
    height, width, max_area = args.height, args.width, args.max_area
    if height is None and width is None:
        if image is not None:
            max_area = max_area or (preset.max_area if preset and preset.max_area else None)
        else:
            height, width = s["height"], s["width"]
    g2 = args.guidance_scale_2 if args.guidance_scale_2 is not None else (preset.guidance_scale_2 if preset else None)
    if args.distributed:
        init_distributed(args)
    t0 = time.perf_counter()
    pipe = WanImageToVideoPipeline.from_pretrained(args.checkpoint, dtype=s["dtype"], attention=args.attention,
                                                   text_encoder_residency=args.text_encoder_residency,
                                                   dp=args.dp, tp=args.tp, sp=args.sp,
                                                   offload_chunk=args.offload_chunk,
                                                   offload_overlap=not args.offload_serial, block_loop=args.block_loop)
    if pipe.boundary_ratio is None:
        g2 = None
    result = pipe(
        args.prompt, s["negative_prompt"], image=image, last_image=last, height=height, width=width,
        max_area=max_area, num_frames=s["num_frames"], num_inference_steps=s["steps"],
        guidance_scale=s["guidance_scale"], guidance_scale_2=g2, flow_shift=s["flow_shift"], sampler=args.sampler,
        seed=args.seed, progress=not args.no_progress,
    )
    m = dict(result.metrics)
    m["total_s"] = time.perf_counter() - t0
    m.update(steps=s["steps"], out=str(out))
    if not write_outputs(result.frames[0], m, out, args.metrics_json, s["fps"]):
        return 0
    print(
        f"wrote {out}: {m['num_frames']} frames {m['width']}x{m['height']} | load {m['load_s']:.1f}s, "
        f"text encoder {m['text_encoder_s']:.2f}s, image encoder {m['image_encoder_s']:.2f}s, VAE encode "
        f"{m['vae_encode_s']:.2f}s, compile {m['compile_s']:.1f}s, {m['step_s']:.3f}s/step"
        + (f" (expert switch at step {m['expert_switch_step']})" if m.get("expert_switch_step") is not None else "")
        + f", VAE decode {m['vae_decode_s']:.2f}s, peak host memory {m['peak_host_rss_bytes'] / 2**30:.2f} GiB"
    )
    return 0


def auto_split(args, s: dict) -> tuple[int, int, int, int | None]:
    """``(dp, tp, sp, offload_chunk)`` for ``generate --auto-split``: the planner's recommendation for
    this checkpoint, these settings and every device of the run (:mod:`vidax.models.wan.planner`).

    Raises:
      ValueError: mesh flags passed as well, or no split fits the budget (the message holds the report).
    """
    import jax

    from vidax.core.planner import device_memory_bytes, format_bytes, host_memory_bytes
    from vidax.models.wan.layout import resolve_checkpoint
    from vidax.models.wan.planner import plan_wan

    if (args.dp, args.tp, args.sp, args.offload_chunk) != (1, 1, 1, None):
        raise ValueError("--auto-split chooses --dp/--tp/--sp/--offload-chunk itself; pass either, not both")
    cfg = resolve_checkpoint(args.checkpoint).transformer_config()
    n = jax.device_count()
    budget = _gib(args.memory_gb) if args.memory_gb is not None else device_memory_bytes()
    if budget is None:  # the CPU backend reports no limit: its devices share the host's memory
        budget = host_memory_bytes() // jax.local_device_count()
    plan = plan_wan(cfg, height=s["height"], width=s["width"], num_frames=s["num_frames"], dtype=s["dtype"], devices=n,
                    memory_bytes=budget, reserve_bytes=_gib(args.reserve_gb), guided=s["guidance_scale"] > 1.0,
                    attention=args.attention, overlap=not args.offload_serial, offload_if_needed=True)
    if plan.recommended is None:
        raise ValueError("--auto-split: no split fits the memory budget\n" + plan.report())
    split = plan.recommended.split
    if jax.process_index() == 0:
        print(f"auto split: {split.label()} (planned peak {format_bytes(plan.recommended.peak_bytes)} of "
              f"{format_bytes(budget)} per device; {len(plan.estimates)} candidates in {plan.seconds:.1f}s)")
    return split.dp, split.tp, split.sp, split.offload


def _gib(x: float) -> int:
    return int(x * (1 << 30))


def _prepare_devices(n: int) -> None:
    """Before JAX starts: let the CPU backend offer ``n`` devices (``XLA_FLAGS``), so that a plan for
    ``n`` devices can compile on a host with fewer accelerators (or none)."""
    if "jax" in sys.modules:  # already started (tests, an embedding program): use what exists
        return
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    flags.append(f"--xla_force_host_platform_device_count={n}")
    os.environ["XLA_FLAGS"] = " ".join(flags)


def plan(args) -> int:
    """``vidax plan``: compile the preset's step for every split on abstract shapes and print per-device memory."""
    preset = PRESETS[args.preset]
    devices = args.devices if args.devices is not None else preset.tp * preset.sp
    _prepare_devices(devices)
    from vidax.core.planner import Split, device_memory_bytes
    from vidax.models.wan.layout import resolve_checkpoint
    from vidax.models.wan.planner import plan_wan, preset_architecture

    cfg = resolve_checkpoint(args.checkpoint).transformer_config() if args.checkpoint else preset_architecture(preset)
    chunks = None
    if args.chunks is not None:
        chunks = [] if args.chunks.strip().lower() == "none" else [int(c) for c in args.chunks.split(",") if c.strip()]
    budget = _gib(args.memory_gb) if args.memory_gb is not None else device_memory_bytes()
    note = ""
    if budget is None:
        budget, note = _gib(30.75), " (the device reports no limit: TPU v4's usable 30.75 GiB, the paper's budget)"
    print(f"planning {preset.name} on {devices} devices, budget {budget / 2**30:.2f} GiB per device{note} ...", flush=True)
    result = plan_wan(cfg, height=args.height or preset.height, width=args.width or preset.width,
                      num_frames=args.num_frames or preset.num_frames, dtype=args.dtype or preset.dtype,
                      devices=devices, memory_bytes=budget, reserve_bytes=_gib(args.reserve_gb),
                      guided=preset.guidance_scale > 1.0, chunks=chunks, overlap=not args.serial, model=preset.model,
                      log=lambda line: print(line, flush=True))
    print(result.report())
    paper = Split(1, preset.tp, preset.sp, preset.offload_chunk)
    row = next((e for e in result.estimates if e.split == paper and e.error is None), None)
    if row is not None and devices == preset.tp * preset.sp:
        print(f"the paper's split for this row: {paper.label()}: peak {row.peak_bytes / 2**30:.2f} GiB per device")
    if args.json:
        data = {"settings": result.settings, "budget_bytes": budget, "reserve_bytes": result.reserve_bytes,
                "target": result.target, "seconds": result.seconds,
                "recommended": None if result.recommended is None else vars(result.recommended.split),
                "estimates": [{"split": vars(e.split), "peak_bytes": e.peak_bytes, "phases": e.phases,
                               "comm_bytes": e.comm_bytes, "transfer_bytes": e.transfer_bytes, "launches": e.launches,
                               "fits": e.fits, "error": e.error} for e in result.estimates]}
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2))
    return 0


def inspect(args) -> int:
    from vidax.models.cogvideox.layout import is_cogvideox_folder
    from vidax.models.ltx.layout import is_ltx_folder

    if is_cogvideox_folder(args.path):
        from vidax.models.cogvideox.inspection import inspect_checkpoint
    elif is_ltx_folder(args.path):
        from vidax.models.ltx.layout import inspect_checkpoint
    else:
        from vidax.models.wan.inspection import inspect_checkpoint
    from vidax.checkpoint.inspect import MISMATCH

    lines = inspect_checkpoint(args.path)
    print("\n".join(lines))
    if any(MISMATCH in line for line in lines):
        print(f"vidax: {args.path}: a component {MISMATCH} (details above); it will not load", file=sys.stderr)
        return 1
    return 0


def convert(args) -> int:
    from vidax.models.cogvideox.layout import is_cogvideox_folder
    from vidax.models.ltx.layout import is_ltx_folder

    if is_cogvideox_folder(args.src):
        from vidax.models.cogvideox.convert import convert_checkpoint
    elif is_ltx_folder(args.src):
        from vidax.models.ltx.layout import convert_checkpoint
    else:
        from vidax.models.wan.convert import convert_checkpoint

    dst = Path(args.dst).expanduser()
    if not dst.exists():  # (an existing one: convert_checkpoint's own error)
        _check_writable(dst, "destination")
    s = convert_checkpoint(args.src, dst, dtype=args.dtype, text_encoder_dtype=args.text_encoder_dtype,
                           vae_dtype=args.vae_dtype)
    sizes = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in s["bytes"].items())
    print(f"wrote {dst} from the {s['source_layout']} layout in {s['seconds']:.1f}s: {sizes}")
    return 0


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one ``vidax: warning:`` line (no source line of the library that raised them)."""
    print(f"vidax: warning: {message}", file=file or sys.stderr)


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that ``finally`` blocks remove temporary outputs."""


def _terminated(signum, frame) -> None:
    raise _Terminated()


def main(argv: list[str] | None = None) -> int:
    """Run a ``vidax`` command. Returns the exit status: 0 done, 1 ``inspect`` found a mismatch, 2 an error
    (one ``vidax: error:`` line naming the fix), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 141 the output
    pipe closed."""
    args = _parser().parse_args(argv)
    commands = {"generate": generate, "inspect": inspect, "plan": plan, "convert": convert}
    shown = warnings.showwarning
    warnings.showwarning = _show_warning
    handler = None
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (a job scheduler, `kill`) unwinds like Ctrl-C, so temporary output files are removed.
        handler = signal.signal(signal.SIGTERM, _terminated)
    try:
        return commands[args.command](args)
    # CheckpointError is a ValueError; OSError: missing or existing files; FloatingPointError: a NaN video.
    except (ValueError, OSError, FloatingPointError) as e:
        print(f"vidax: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # nothing half-written: every output goes to a temporary file first
        print("vidax: interrupted; no output was written", file=sys.stderr)
        return 130
    except _Terminated:
        print("vidax: terminated; no output was written", file=sys.stderr)
        return 143
    except BrokenPipeError:  # the reader of our output went away (`vidax inspect ... | head`)
        sys.stderr.close()
        return 141
    finally:
        warnings.showwarning = shown
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)


if __name__ == "__main__":
    sys.exit(main())
