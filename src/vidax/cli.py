"""The ``vidax`` command line: parse, find the family, preset and task through the registry, call the pipeline, write
the outputs. No model logic and no family here: every family-specific flag, default, check and hook comes from its
record in :mod:`vidax.models.registry`, so a flag no family declares cannot be silently ignored, and a new family
needs no change in this file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from vidax.core import arg_types
from vidax.models import registry

#: The flags every family takes, besides its own settings: (flag, argparse attribute, call keyword).
COMMON_FLAGS = (("--height", "height", "height"), ("--width", "width", "width"),
                ("--num-frames", "num_frames", "num_frames"), ("--steps", "steps", "num_inference_steps"),
                ("--guidance-scale", "guidance_scale", "guidance_scale"),
                ("--negative-prompt", "negative_prompt", "negative_prompt"))

#: Runtime flags only some families take: (flag, attribute, what the family record must offer).
_OFFLOAD_FLAGS = (("--offload-chunk", "offload_chunk"), ("--offload-serial", "offload_serial"))
_PLANNER_FLAGS = (("--auto-split", "auto_split"), ("--memory-gb", "memory_gb"), ("--reserve-gb", "reserve_gb"))


_an = registry._an  # ``word`` with its indefinite article, as spoken (an MP4, a video)


def _by_family(values: dict[str, Any], unit: str = "") -> str:
    """``"A 480, B 512"`` from ``{"A": 480, "B": 512}`` (the families' display names and their values)."""
    return ", ".join(f"{name} {value}{unit}" for name, value in values.items())


def _family_defaults(key: str) -> str:
    return _by_family({f.display: f.defaults.get(key) for f in registry.families() if f.defaults.get(key) is not None})


def _settings_table() -> dict[str, list[tuple[registry.Family, registry.Setting]]]:
    """Each family setting's name -> the families declaring it (one CLI flag per name)."""
    table: dict[str, list] = {}
    for fam in registry.families():
        for s in fam.settings:
            table.setdefault(s.name, []).append((fam, s))
    for name, decls in table.items():
        flags = {s.flag for _, s in decls}
        kinds = {s.type is None for _, s in decls}
        if len(flags) > 1 or len(kinds) > 1:
            raise RuntimeError(f"families declare setting {name!r} differently: {sorted(flags)}")
    return table


def _add_family_settings(g: argparse.ArgumentParser, at_load: bool = False) -> None:
    """One flag per family setting (``at_load``: only the settings that choose what is loaded, for ``convert``)."""
    group = g.add_argument_group("family settings", "taken by the families named; refused for the others")
    for name, decls in _settings_table().items():
        if at_load and not all(s.at_load for _, s in decls):
            continue
        fam0, s0 = decls[0]
        who = ", ".join(f.display for f, _ in decls)
        helps = "; ".join(f"{f.display}: {s.help}" + (f" ({'/'.join(s.choices)})" if s.choices else "")
                          for f, s in decls) if len(decls) > 1 else s0.help
        text = f"[{who}] {helps}"
        if s0.type is None:
            group.add_argument(s0.flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=text)
            continue
        choices = None
        if all(s.choices for _, s in decls):
            choices = sorted({c for _, s in decls for c in s.choices})
        group.add_argument(s0.flag, dest=name, type=s0.type, choices=choices, default=None, metavar=s0.metavar,
                           help=text)


def _add_runtime_flags(g: argparse.ArgumentParser) -> None:
    r = g.add_argument_group("devices and memory")
    r.add_argument("--dtype", choices=["bfloat16", "float32"], default=None,
                   help="transformer weight dtype (default: the preset's, else bfloat16); norms, embedders and AdaLN "
                        "tables stay float32")
    r.add_argument("--attention", choices=["auto", "xla", "chunked", "cudnn", "splash", "cpu_flash"], default="auto",
                   help="attention kernel (default auto: cudnn on GPU, splash on TPU, cpu_flash on CPU)")
    r.add_argument("--dp", type=arg_types.positive_int, default=1, help="data-parallel size (CFG halves split over it)")
    r.add_argument("--tp", type=arg_types.positive_int, default=1, help="tensor-parallel size (divides the head count)")
    r.add_argument("--sp", type=arg_types.positive_int, default=1,
                   help="sequence-parallel size (Ulysses); dp*tp*sp = device count (default 1 each: one device)")
    r.add_argument("--offload-chunk", type=int, default=None, metavar="N",
                   help="keep the transformer blocks in host memory and stream them to the devices N at a time "
                        "(default: resident)")
    r.add_argument("--offload-serial", action="store_true",
                   help="with --offload-chunk: copy each chunk, then compute (no copy/compute overlap; the paper's "
                        "mode)")
    r.add_argument("--block-loop", choices=["auto", "scan", "host"], default="auto",
                   help="run the transformer blocks under one scan (scan) or as one block program called per block "
                        "from the host (host); default auto: host on CPU, scan on accelerators")
    r.add_argument("--text-encoder-residency", choices=["auto", "resident", "free"], default="auto",
                   help="free the float32 text encoder after encoding (default auto: on accelerators, not on CPU)")
    planned = ", ".join(f.display for f in registry.families() if f.plan is not None)
    r.add_argument("--auto-split", action="store_true",
                   help=f"[{planned}] choose --dp/--tp/--sp/--offload-chunk with the memory planner (see `vidax plan`)")
    r.add_argument("--memory-gb", type=arg_types.positive_float, default=None,
                   help="with --auto-split: per-device memory budget in GiB (default: what the device reports; on CPU "
                        "the host's memory divided by the device count)")
    r.add_argument("--reserve-gb", type=arg_types.non_negative_float, default=None,
                   help="with --auto-split: GiB per device kept free for the text encoder and the VAE (default 0)")
    r.add_argument("--distributed", action="store_true",
                   help="several hosts: call jax.distributed.initialize() first (arguments from the flags below or the "
                        "cluster environment); each process reads only its devices' shards, process 0 writes the "
                        "outputs")
    r.add_argument("--coordinator-address", default=None, help="with --distributed: host:port of process 0")
    r.add_argument("--num-processes", type=int, default=None, help="with --distributed: number of processes")
    r.add_argument("--process-id", type=int, default=None, help="with --distributed: this process's index")


def _add_output_flags(g: argparse.ArgumentParser, out_default: str | None) -> None:
    o = g.add_argument_group("outputs")
    if out_default is not None:
        o.add_argument("--out", default=None,
                       help=f"mp4 path, written to a temporary file and renamed (default: {out_default}); its folder "
                            "must exist unless --mkdir")
        o.add_argument("--metrics-json", default=None, help="also write timings, memory and settings as JSON here")
        o.add_argument("--mkdir", action="store_true", help="create the folders of --out and --metrics-json")
    o.add_argument("--no-progress", action="store_true", help="no progress display (the summary line stays)")
    o.add_argument("--quiet", action="store_true", help="print nothing but warnings and errors")
    cache = o.add_mutually_exclusive_group()
    cache.add_argument("--compile-cache", type=arg_types.directory, default=None, metavar="DIR",
                       help="keep compiled programs here for later runs (default: $VIDAX_COMPILE_CACHE, else "
                            "$XDG_CACHE_HOME/vidax/jax or ~/.cache/vidax/jax)")
    cache.add_argument("--no-compile-cache", action="store_true", help="compile everything afresh, write no cache")


def _generate_epilog() -> str:
    lines = ["Without --preset a family's reference defaults apply (diffusers' pipeline defaults):"]
    for f in registry.families():
        d = f.defaults
        lines.append(f"  {f.display}: {d['width']}x{d['height']}, {d['num_frames']} frames, {d['num_inference_steps']} "
                     f"steps, guidance {d['guidance_scale']}; {f.size_rule}")
    lines.append("At those sizes a full-size model takes minutes per step on a CPU: pass small sizes and few steps to "
                 "try a checkpoint, or use a GPU/TPU. `vidax presets` lists the presets; `vidax demo` runs a tiny one.")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose command-line errors are one ``vidax: error:`` line (argparse prints its whole usage
    block first), naming the flag and where the flags are listed; exit status 2 as argparse's."""

    commands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str):
        self.exit(2, f"vidax: error: {_bounded(message)} (`{self.prog} --help` lists the options)\n")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an unknown option is reported by the command's parser (its ``--help`` named) with the
        nearest option it takes (``--stps``: did you mean ``--steps``?)."""
        import difflib

        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            parser = self.commands.get(getattr(ns, "command", None), self)
            flags = [a.split("=", 1)[0] for a in extra if a.startswith("--")]
            near = difflib.get_close_matches(flags[0], list(parser._option_string_actions), n=1) if flags else []
            parser.error(f"unrecognized arguments: {' '.join(extra)}"
                         + (f"; did you mean {near[0]}?" if near else ""))
        return ns


def _parser() -> argparse.ArgumentParser:
    fams = registry.families()
    p = _Parser(prog="vidax", description="JAX inference for open video generation models.")
    sub = p.add_subparsers(dest="command", required=True)
    names = ", ".join(f.display for f in fams)
    g = sub.add_parser("generate", help="generate a video from a prompt (and images)", epilog=_generate_epilog(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("--checkpoint", required=True, help=f"a checkpoint folder ({names}; diffusers layout, vidax-"
                   "converted, or an original release)")
    g.add_argument("--prompt", required=True)
    own = ", ".join(f.display for f in fams if f.defaults.get("negative_prompt"))
    g.add_argument("--negative-prompt", default=None,
                   help="default: the preset's, else the family's reference negative prompt"
                        + (f" ({own}; the others: none)" if own else " (none)"))
    g.add_argument("--image", default=None, help="the first frame (image-to-video); the task follows the inputs")
    g.add_argument("--last-image", default=None, help="the last frame too (first-last-frame-to-video)")
    g.add_argument("--video", default=None, help="a video to continue (video-to-world: its last frames condition the "
                   "start)")
    g.add_argument("--preset", choices=sorted(registry.presets()), default=None, metavar="PRESET",
                   help="reference settings of a benchmark row (size, frames, steps, guidance, dtype; `vidax presets`)")
    s = g.add_argument_group("generation", "each default: the preset's, else the family's reference (see below)")
    s.add_argument("--height", type=int, default=None, help=f"pixels (default: {_family_defaults('height')})")
    s.add_argument("--width", type=int, default=None, help=f"pixels (default: {_family_defaults('width')})")
    s.add_argument("--num-frames", type=int, default=None, help=f"frames (default: {_family_defaults('num_frames')})")
    s.add_argument("--steps", type=arg_types.positive_int, default=None,
                   help=f"sampler steps (default: {_family_defaults('num_inference_steps')})")
    s.add_argument("--guidance-scale", type=arg_types.finite_float, default=None,
                   help=f"CFG scale; 1 or below turns CFG off (default: {_family_defaults('guidance_scale')})")
    s.add_argument("--seed", type=arg_types.seed, default=0, help="noise seed, 0 to 2**32 - 1 (default 0)")
    told = ", ".join(f.display for f in fams if f.fps_setting)
    s.add_argument("--fps", type=arg_types.fps, default=None,
                   help="frames per second of the mp4 (default: the preset's, else the model's)"
                        + (f"; {told} models are told the rate too" if told else ""))
    _add_family_settings(g)
    _add_runtime_flags(g)
    _add_output_flags(g, "outputs/video.mp4")

    i = sub.add_parser("inspect", help="describe a checkpoint folder or file (reads headers only)")
    i.add_argument("path", help=f"a checkpoint folder ({names}; any layout), a component folder, or a weights file")

    planned = {n: (f, pr) for n, (f, pr) in registry.presets().items() if f.plan is not None}
    pl = sub.add_parser("plan", help="per-device memory of every (dp, tp, sp, offload) split, compiled without weights")
    pl.add_argument("--preset", choices=sorted(planned), required=True, metavar="PRESET",
                    help="the generation settings to plan (" + ", ".join(sorted(planned)) + ")")
    pl.add_argument("--checkpoint", default=None, help="take the transformer architecture from this checkpoint "
                    "(default: the preset's model)")
    pl.add_argument("--devices", type=arg_types.device_count, default=None,
                    help="devices of the run (default: this machine's; more are simulated on the CPU to plan for "
                         "another machine)")
    pl.add_argument("--memory-gb", type=arg_types.positive_float, default=None,
                    help="per-device memory budget in GiB (default: what this machine's device reports, else its host "
                         "memory divided by the device count)")
    pl.add_argument("--reserve-gb", type=arg_types.non_negative_float, default=0.0,
                    help="GiB per device kept free for the text encoder and VAE (default 0)")
    pl.add_argument("--height", type=arg_types.positive_int, default=None)
    pl.add_argument("--width", type=arg_types.positive_int, default=None)
    pl.add_argument("--num-frames", type=arg_types.positive_int, default=None)
    pl.add_argument("--dtype", choices=["bfloat16", "float32"], default=None)
    pl.add_argument("--chunks", type=arg_types.chunk_sizes, default=None,
                    help="offload chunk sizes to try, comma-separated, or 'none' (default: divisors of the layer "
                         "count)")
    pl.add_argument("--serial", action="store_true", help="plan offloading without copy/compute overlap (one buffer)")
    pl.add_argument("--json", default=None, help="also write the estimates as JSON here")

    c = sub.add_parser("convert", help="translate a checkpoint once into the vidax layout (loads as a plain copy)")
    c.add_argument("src", help=f"a checkpoint folder ({names}; diffusers layout or an original release)")
    c.add_argument("dst", help="output folder (must not exist)")
    c.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                   help="transformer weight dtype written (default bfloat16; fp32-pinned leaves stay float32)")
    c.add_argument("--text-encoder-dtype", choices=["bfloat16", "float32"], default="float32",
                   help="default float32 (paper fault 2)")
    c.add_argument("--vae-dtype", choices=["bfloat16", "float32"], default="float32", help="default float32")
    _add_family_settings(c, at_load=True)

    demo_names = ", ".join(registry.demos())
    d = sub.add_parser("demo", help="write a tiny random-weight checkpoint and generate a small video from it",
                       description="NAME is a family or a model within one (" + demo_names + "); TASK one of "
                                   + ", ".join(dict.fromkeys(t for _, d in registry.demos().values() for t in d.tasks))
                                   + ". The checkpoint is written under --checkpoint-dir "
                                   "if absent, the video to --out-dir. Random weights: the video is structured noise.")
    d.add_argument("name", nargs="?", default=fams[0].demos[0].name if fams and fams[0].demos else None,
                   metavar="NAME[/TASK]", help=f"default: {fams[0].demos[0].name if fams and fams[0].demos else ''}")
    d.add_argument("--checkpoint-dir", default="checkpoints",
                   help="where demo checkpoints are kept (default checkpoints)")
    d.add_argument("--out-dir", default="outputs", help="where the video and metrics go (default outputs)")
    d.add_argument("--seed", type=arg_types.seed, default=0)
    d.add_argument("--no-audio", action="store_true",
                   help="video only: no audio track (the demos that generate sound: "
                        + ", ".join(n for n, (f, _) in registry.demos().items() if f.setting("return_audio")) + ")")
    _add_output_flags(d, None)

    sub.add_parser("presets", help="every preset with its settings, as a table")
    p.commands = dict(sub.choices)
    return p


# -- generate ------------------------------------------------------------------------


def _preset_for(args, fam: registry.Family):
    """``--preset`` as a record of ``fam``; a preset of another family is a preset problem, reported as one."""
    if args.preset is None:
        return None
    other, preset = registry.preset(args.preset)
    if other is not fam:
        raise ValueError(f"--preset {args.preset} is not {_an(fam.display)} preset (it is {_an(other.display)} "
                         "preset), "
                         f"and {args.checkpoint} is {_an(fam.display)} checkpoint; {fam.display} presets: "
                         + ", ".join(sorted(fam.presets())))
    return preset


def _refuse_flags(args, fam: registry.Family) -> None:
    """Raise ValueError naming every given flag ``fam`` does not take (rather than ignoring it)."""
    given = [s.flag for name, decls in _settings_table().items() for _, s in decls[:1]
             if getattr(args, name, None) is not None and fam.setting(name) is None]
    if not fam.offload:
        given += [flag for flag, attr in _OFFLOAD_FLAGS if getattr(args, attr) not in (None, False)]
    if fam.plan is None:
        given += [flag for flag, attr in _PLANNER_FLAGS if getattr(args, attr) not in (None, False)]
    if given:
        own = [s.flag for s in fam.settings] + [f for f, _ in _PLANNER_FLAGS if fam.plan is not None]
        raise ValueError(f"{' '.join(given)}: not used by {fam.display}; leave {'them' if len(given) > 1 else 'it'} "
                         "out" + (f" ({fam.display}'s own settings: {', '.join(own)})" if own else ""))
    if not args.auto_split and (args.memory_gb is not None or args.reserve_gb is not None):
        raise ValueError("--memory-gb and --reserve-gb set the budget of --auto-split; pass --auto-split too, or leave "
                         "them out")
    for s in fam.settings:
        value = getattr(args, s.name, None)
        if value is not None and s.choices and value not in s.choices:
            raise ValueError(f"{s.flag} {value} is not {_an(fam.display)} {s.name.replace('_', ' ')}; choose "
                             + " or ".join(s.choices))


def _call_settings(args, fam: registry.Family, preset, folder: Path, task: str) -> tuple[dict, dict]:
    """The pipeline call's settings: the family's reference defaults, then the preset's, then the flags given.

    Returns:
      ``(call, given)``: the call keywords, and those the flags set explicitly.
    """
    given = {key: getattr(args, attr) for _, attr, key in COMMON_FLAGS if getattr(args, attr) is not None}
    given.update({s.name: getattr(args, s.name) for s in fam.settings if getattr(args, s.name, None) is not None})
    if fam.fps_setting and args.fps is not None:
        given[fam.fps_setting] = args.fps
    call = {k: v for k, v in fam.defaults.items() if k not in ("fps", "dtype")}
    if preset is not None:
        call.update(preset.settings())
    call.update(given)
    if fam.resolve is not None:
        call = fam.resolve(folder, task, preset, given, call)
    return call, given


def _task(args, preset) -> str:
    for flag, value in (("--image", args.image), ("--last-image", args.last_image), ("--video", args.video)):
        if value is not None and not value.strip():  # (an empty --image was skipped, yet chose the i2v task)
            raise ValueError(f"{flag} is empty; pass a file path, or leave the flag out")
    if args.video and (args.image or args.last_image):
        raise ValueError("--video continues a video: pass it without --image / --last-image")
    if args.last_image and not args.image:
        raise ValueError("--last-image needs --image (the first frame) as well")
    if preset is not None and preset.task in ("i2v", "flf2v") and not args.image:
        raise ValueError(f"--preset {preset.name} is an image-to-video setting: pass --image (the first frame)"
                         + (" and --last-image" if preset.task == "flf2v" else ""))
    return registry.task_for_inputs(args.image, args.last_image, args.video)


def generate(args) -> int:
    """``vidax generate``: every check that needs no weights first (flags, sizes, images, output paths), then load,
    generate, write, and print one summary line."""
    from vidax.core.images import load_image
    from vidax.core.progress import Progress

    from vidax.core.inputs import check_text

    check_text(args.prompt, "--prompt")
    if args.negative_prompt is not None:
        check_text(args.negative_prompt, "--negative-prompt")
    enable_compile_cache(args)
    folder = Path(args.checkpoint).expanduser()
    fam = registry.family_of(folder)
    preset = _preset_for(args, fam)
    _refuse_flags(args, fam)
    task = _task(args, preset)
    call, given = _call_settings(args, fam, preset, folder, task)
    if task == "v2v":
        registry.check_task(fam, folder, task)
        from vidax.core.images import load_video

        call["video"] = load_video(args.video, "--video", keep_last=fam.video_keep_last)
    if fam.check is not None:
        fam.check(folder, task, call)
    registry.check_task(fam, folder, task)
    image = load_image(args.image, "--image") if args.image else None
    last = load_image(args.last_image, "--last-image") if args.last_image else None
    out = check_outputs(args)
    dtype = args.dtype or (preset.dtype if preset is not None else fam.defaults.get("dtype", "bfloat16"))

    if args.distributed:
        init_distributed(args)
    if args.auto_split:
        args.dp, args.tp, args.sp, args.offload_chunk = auto_split(args, fam, folder, call, dtype)
    progress = Progress(enabled=not (args.no_progress or args.quiet))
    t0 = time.perf_counter()
    pipe = fam.pipeline_class(task).from_pretrained(
        folder, dtype=dtype, attention=args.attention, dp=args.dp, tp=args.tp, sp=args.sp,
        offload_chunk=args.offload_chunk, offload_overlap=not args.offload_serial, block_loop=args.block_loop,
        text_encoder_residency=args.text_encoder_residency, progress=progress, compile_cache=False,
        **fam.load_settings(call))
    negative = call.pop("negative_prompt", None)
    result = pipe(args.prompt, negative, image=image, last_image=last, seed=args.seed, progress=progress, **call)
    fps = args.fps or (preset.fps if preset is not None and preset.fps else None) or result.fps
    m = dict(result.metrics, total_s=time.perf_counter() - t0, family=fam.name, task=task, preset=args.preset,
             seed=args.seed, dtype=dtype, steps=result.metrics["num_inference_steps"], fps=fps, out=str(out))
    audio, rate = _audio_track(result)
    if audio is not None:
        m.update(audio_sample_rate=rate, audio_channels=int(audio.shape[0]), audio_samples=int(audio.shape[1]))
    if not write_outputs(result.frames[0], m, out, args.metrics_json, fps, audio=audio, sample_rate=rate):
        return 0  # not process 0 of a multi-host run: nothing to print or write
    if not args.quiet:
        print(summary_line(m))
    return 0


def _audio_track(result) -> tuple[Any, int | None]:
    """The first sample's audio track and its rate (``VideoOutput.audio`` / ``sample_rate``), or ``(None, None)``."""
    audio = getattr(result, "audio", None)
    if audio is None:
        return None, None
    return audio[0], int(result.sample_rate)


def summary_line(m: dict) -> str:
    """The one line ``vidax generate`` and ``vidax demo`` print, the same for every family."""
    device = "n/a" if m.get("peak_device_bytes") is None else f"{m['peak_device_bytes'] / 2**30:.2f} GiB"
    return (f"wrote {m['out']}: {m['num_frames']} frames {m['width']}x{m['height']} at {m['fps']:g} fps "
            f"({m['family']} {m['task']}) | load {m['load_s']:.1f}s, text encoder {m['text_encoder_s']:.2f}s, "
            f"VAE encode {m['vae_encode_s']:.2f}s, compile {m['compile_s']:.1f}s, {m['step_s']:.3f}s/step x "
            f"{m['num_inference_steps']}, VAE decode {m['vae_decode_s']:.2f}s, total {m['total_s']:.1f}s | peak host "
            f"memory {m['peak_host_rss_bytes'] / 2**30:.2f} GiB, peak device memory {device} | attention "
            f"{m['attention']}")


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


def write_outputs(frames, metrics: dict, out: Path, metrics_json: str | None, fps: float, audio=None,
                  sample_rate: int | None = None) -> bool:
    """Write the video (and metrics JSON) on process 0 only; other processes of a multi-host run
    write nothing. Both are written to temporary files and published together (:class:`vidax.core.files.staged`):
    a failure or a signal leaves neither, and an existing file of either name untouched. ``audio`` (float
    ``(channels, samples)`` at ``sample_rate`` Hz; LTX-2's generated track) is muxed into the mp4 as AAC. Returns
    whether this process wrote."""
    import jax

    from vidax.core import signals
    from vidax.core.files import staged
    from vidax.video import check_frames, encode_video

    if jax.process_index() != 0:
        return False
    check_frames(frames, fps)
    paths = [out] + ([Path(metrics_json)] if metrics_json else [])
    # A signal recorded during the run (even one Python discarded) stops it here, before anything is published.
    with staged(*paths, before_publish=signals.check, after_publish=signals.published) as tmps:
        encode_video(frames, tmps[0], fps, audio=audio, sample_rate=sample_rate)
        if metrics_json:
            tmps[1].write_text(json.dumps(metrics, indent=2))
    return True


def check_outputs(args, default: str = "outputs/video.mp4") -> Path:
    """Check ``--out`` and ``--metrics-json`` before anything is loaded; return the video's path.

    ``~`` is expanded in both (``args.metrics_json`` is updated). A probe file is written and removed in each
    folder, so a path that cannot be written fails now rather than after the generation. A folder that does not
    exist is an error unless ``--mkdir`` (or it is the default ``outputs/``, which is created).

    Raises:
      ValueError: ``--out`` not ending in ``.mp4``, either path an existing folder or inside a file, a missing or
        unwritable folder, or both flags naming the same file.
    """
    if args.out is not None and not args.out.strip():
        raise ValueError(f"--out is empty; pass an mp4 path, e.g. {default}")
    out = Path(args.out if args.out is not None else default).expanduser()
    mkdir = args.mkdir or args.out is None
    if out.suffix.lower() != ".mp4":  # (".mp4" alone is a hidden file without a suffix)
        raise ValueError(f"--out {out} must be a file name ending in .mp4, e.g. {out.with_name('video.mp4')}")
    _check_writable(out, "--out", mkdir)
    if args.metrics_json:
        metrics = Path(args.metrics_json).expanduser()
        if metrics.resolve() == out.resolve():
            raise ValueError(f"--metrics-json {metrics} is the --out video itself; pick another file, e.g. "
                             f"{out.with_suffix('.json')}")
        _check_writable(metrics, "--metrics-json", args.mkdir)
        args.metrics_json = str(metrics)
    return out


#: Folders this run created for its outputs, deepest first per call; a failed run removes those left empty.
_CREATED: list[Path] = []


def _remove_created_folders() -> None:
    for folder in sorted(set(_CREATED), key=lambda p: len(p.parts), reverse=True):
        try:
            folder.rmdir()  # only if empty: an output or another run's file keeps it
        except OSError:
            pass
    _CREATED.clear()


def _check_writable(path: Path, flag: str, mkdir: bool = True) -> None:
    """Raise ValueError naming ``flag`` and ``path`` unless a file can be written at ``path`` (its folder created
    first with ``mkdir``)."""
    if path.is_dir():
        example = path / {"--metrics-json": "metrics.json", "--json": "plan.json"}.get(flag, "video.mp4")
        raise ValueError(f"{flag} {path} is a folder; pass a file path inside it, e.g. {example}")
    parent = path.parent
    try:
        if not parent.is_dir():
            if parent.exists() or any(p.exists() and not p.is_dir() for p in parent.parents):
                raise NotADirectoryError(path)
            if not mkdir:
                raise ValueError(f"{flag} {path}: the folder {parent} does not exist; create it or pass --mkdir")
            missing = [parent, *(p for p in parent.parents if not p.exists())]
            parent.mkdir(parents=True, exist_ok=True)
            _CREATED.extend(missing)  # removed again if the run fails (main)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        reason = e.strerror or str(e)
        if isinstance(e, (FileExistsError, NotADirectoryError)):
            reason = "a file stands where a folder of the path should be"
        raise ValueError(f"{flag} {path}: cannot write there ({reason}); choose another path") from None


def enable_compile_cache(args):
    """JAX's persistent compilation cache for this run (:mod:`vidax.core.compile_cache`), unless
    ``--no-compile-cache``; returns the directory in use or ``None``."""
    from vidax.core import compile_cache

    return None if args.no_compile_cache else compile_cache.enable(args.compile_cache)


def auto_split(args, fam: registry.Family, folder: Path, call: dict, dtype: str) -> tuple[int, int, int, int | None]:
    """``(dp, tp, sp, offload_chunk)`` for ``generate --auto-split``: the family planner's recommendation for this
    checkpoint, these settings and every device of the run.

    Raises:
      ValueError: mesh flags passed as well, settings the planner cannot size (an image's size), or no split fits
        the budget (the message holds the report).
    """
    import jax

    from vidax.core.planner import device_memory_bytes, format_bytes, host_memory_bytes

    if (args.dp, args.tp, args.sp, args.offload_chunk) != (1, 1, 1, None):
        raise ValueError("--auto-split chooses --dp/--tp/--sp/--offload-chunk itself; pass either, not both")
    if call.get("height") is None or call.get("width") is None:
        raise ValueError("--auto-split plans a known size: pass --height and --width with --image")
    cfg = fam.plan.architecture(None, folder)
    n = jax.device_count()
    budget = _gib(args.memory_gb) if args.memory_gb is not None else device_memory_bytes()
    if budget is None:  # the CPU backend reports no limit: its devices share the host's memory
        budget = host_memory_bytes() // jax.local_device_count()
    plan = fam.plan.plan(cfg, height=call["height"], width=call["width"], num_frames=call["num_frames"], dtype=dtype,
                         devices=n, memory_bytes=budget, reserve_bytes=_gib(args.reserve_gb or 0.0),
                         guided=call["guidance_scale"] > 1.0, attention=args.attention,
                         overlap=not args.offload_serial, offload_if_needed=True, call=call)
    if plan.recommended is None:
        raise ValueError("--auto-split: no split fits the memory budget\n" + plan.report())
    split = plan.recommended.split
    if jax.process_index() == 0 and not args.quiet:
        print(f"auto split: {split.label()} (planned peak {format_bytes(plan.recommended.peak_bytes)} of "
              f"{format_bytes(budget)} per device; {len(plan.estimates)} candidates in {plan.seconds:.1f}s)")
    return split.dp, split.tp, split.sp, split.offload


def _gib(x: float) -> int:
    return int(x * (1 << 30))


# -- plan, inspect, convert, presets, demo ------------------------------------------------------------------------


def _prepare_devices(n: int) -> None:
    """Before JAX starts: let the CPU backend offer ``n`` devices (``XLA_FLAGS``), so that a plan for
    ``n`` devices can compile on a host with fewer accelerators (or none)."""
    if "jax" in sys.modules:  # already started (tests, an embedding program): use what exists
        return
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    flags.append(f"--xla_force_host_platform_device_count={n}")
    os.environ["XLA_FLAGS"] = " ".join(flags)


def plan(args) -> int:
    """``vidax plan``: compile the preset's step for every split on abstract shapes and print per-device memory. By
    default for this machine (its device count and memory); ``--devices`` / ``--memory-gb`` plan for another."""
    fam, preset = registry.preset(args.preset)
    if fam.plan is None:
        raise ValueError(f"--preset {args.preset}: vidax has no memory planner for {fam.display} yet")
    if args.devices is not None:
        _prepare_devices(args.devices)
    import jax

    from vidax.core.planner import Split, device_memory_bytes, format_bytes, host_memory_bytes

    devices = args.devices if args.devices is not None else jax.device_count()
    json_path = Path(args.json).expanduser() if args.json else None
    if json_path is not None:  # before planning: a path that cannot be written fails now, naming the flag
        _check_writable(json_path, "--json")
    folder = Path(args.checkpoint).expanduser() if args.checkpoint else None
    cfg = fam.plan.architecture(preset, folder)
    chunks = args.chunks  # (parsed: a list, [] for 'none')
    if args.memory_gb is not None:
        budget, note = _gib(args.memory_gb), ""
    else:
        budget = device_memory_bytes()
        note = f" (what this machine's {jax.devices()[0].platform} device reports)"
        if budget is None:  # the CPU backend reports no limit: its devices share the host's memory
            budget = host_memory_bytes() // jax.local_device_count()
            note = f" (this host's memory over its {jax.local_device_count()} device(s); --memory-gb for another)"
    settings = preset.settings()
    print(f"planning {preset.name} on {devices} device{'s' if devices > 1 else ''}, budget {format_bytes(budget)} "
          f"per device{note} ...", flush=True)
    result = fam.plan.plan(cfg, height=args.height or settings["height"], width=args.width or settings["width"],
                           num_frames=args.num_frames or settings["num_frames"], dtype=args.dtype or preset.dtype,
                           devices=devices, memory_bytes=budget, reserve_bytes=_gib(args.reserve_gb),
                           guided=settings["guidance_scale"] > 1.0, chunks=chunks, overlap=not args.serial,
                           model=preset.model, log=lambda line: print(line, flush=True), call=settings)
    print(result.report())
    print(getattr(result, "scope", "(the transformer step only: the text encoder and the VAE are not counted; keep "
                                   "room for them with --reserve-gb, or free the text encoder: "
                                   "--text-encoder-residency free)"))
    paper = Split(1, preset.tp, preset.sp, getattr(preset, "offload_chunk", None))
    row = next((e for e in result.estimates if e.split == paper and e.error is None), None)
    if row is not None and devices == preset.tp * preset.sp:
        print(f"the paper's split for this row: {paper.label()}: peak {row.peak_bytes / 2**30:.2f} GiB per device")
    elif devices != preset.tp * preset.sp:
        n = preset.tp * preset.sp
        print(f"(the paper ran this row on {n} devices: --devices {n} plans that)")
    if args.json:
        data = {"settings": result.settings, "budget_bytes": budget, "reserve_bytes": result.reserve_bytes,
                "target": result.target, "seconds": result.seconds,
                "recommended": None if result.recommended is None else vars(result.recommended.split),
                "estimates": [{"split": vars(e.split), "peak_bytes": e.peak_bytes, "phases": e.phases,
                               "comm_bytes": e.comm_bytes, "transfer_bytes": e.transfer_bytes, "launches": e.launches,
                               "fits": e.fits, "error": e.error} for e in result.estimates]}
        from vidax.core.files import staged

        with staged(json_path) as (tmp,):
            tmp.write_text(json.dumps(data, indent=2))
    return 0


def inspect(args) -> int:
    """``vidax inspect``: the family's report; exit 1 if any component would not load."""
    from vidax.checkpoint.inspect import MISMATCH

    lines = registry.inspect(args.path)
    print("\n".join(lines))
    if any(MISMATCH in line for line in lines):
        print(f"vidax: {args.path}: a component {MISMATCH} (details above); it will not load", file=sys.stderr)
        return 1
    return 0


def convert(args) -> int:
    src = Path(args.src).expanduser()
    fam = registry.family_of(src)
    dst = Path(args.dst).expanduser()
    if not dst.exists():  # (an existing one: the converter's own error)
        _check_writable(dst, "destination")
    from vidax.checkpoint.inspect import MISMATCH

    # The settings that choose what is loaded (a release's transformer variant) choose what is converted.
    table = _settings_table()
    settings = {name: getattr(args, name) for name, decls in table.items()
                if decls[0][1].at_load and getattr(args, name, None) is not None}
    refused = [table[name][0][1].flag for name in settings if fam.setting(name) is None]
    if refused:
        raise ValueError(f"{' '.join(refused)}: not used by {fam.display}; leave "
                         + ("them" if len(refused) > 1 else "it") + " out")
    problems = [line.strip() for line in fam.inspect(src, **settings) if MISMATCH in line]
    if problems:  # the converted folder would not load either (a corrupt tokenizer is copied, not translated)
        raise ValueError(f"{src} would not load, so it is not converted (`vidax inspect {src}` details it): "
                         + "; ".join(problems[:3]))
    try:
        s = fam.convert(src, dst, dtype=args.dtype, text_encoder_dtype=args.text_encoder_dtype,
                        vae_dtype=args.vae_dtype, **settings)
    except OSError as e:
        if isinstance(e, FileExistsError):
            raise
        raise ValueError(f"{dst}: writing the converted checkpoint failed ({e.strerror or e}"
                         + (f": {e.filename}" if e.filename else "") + "); nothing was left there") from None
    sizes = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in s["bytes"].items())
    dtypes = ", ".join(f"{k} {v}" for k, v in s["dtypes"].items())
    variant = f" (variant {s['variant']})" if s.get("variant") else ""
    copied = "".join(f"; {k} {v}" for k, v in s.items() if isinstance(v, str) and v.startswith("copied"))
    print(f"wrote {dst} ({fam.display}) from the {s['source_layout']} layout{variant} in {s['seconds']:.1f}s: "
          f"{sizes}; dtypes: {dtypes}{copied}")
    return 0


def presets(args) -> int:
    """``vidax presets``: one row per preset, the same columns for every family (its own settings last)."""
    rows = [("preset", "family", "model", "task", "size", "frames", "steps", "guidance", "dtype", "fps", "mesh",
             "other settings")]
    common = {"height", "width", "num_frames", "num_inference_steps", "guidance_scale", "negative_prompt"}
    for name, (fam, p) in sorted(registry.presets().items(), key=lambda kv: (registry.families().index(kv[1][0]),
                                                                             kv[0])):
        s = p.settings()
        mesh = f"tp{p.tp} sp{p.sp}" + (f" offload {p.offload_chunk}" if getattr(p, "offload_chunk", None) else "")
        hidden = common | {"max_area", fam.fps_setting}  # shown in their own columns
        other = ", ".join(f"{k}={_short(v)}" for k, v in s.items() if k not in hidden and v is not None)
        # Image rows take the image's aspect ratio at an area (their width x height is an example image's).
        size = f"image at {s['max_area']:,} px" if s.get("max_area") else f"{s['width']}x{s['height']}"
        rows.append((name, fam.name, p.model, p.task, size, str(s["num_frames"]), str(s["num_inference_steps"]),
                     f"{s['guidance_scale']:g}", p.dtype, f"{p.fps:g}", mesh, other))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    return 0


def _short(v: Any) -> str:
    if isinstance(v, tuple):
        return ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def demo(args) -> int:
    """``vidax demo [NAME[/TASK]]``: write the demo checkpoint if absent, generate a small video from it, print the
    summary line."""
    from vidax.checkpoint.demo import demo_frames
    from vidax.checkpoint.errors import CheckpointError
    from vidax.core.images import load_image
    from vidax.core.progress import Progress

    if args.name is None:
        raise ValueError("no demo is registered")
    fam, spec, task = registry.find_demo(args.name)
    if getattr(args, "no_audio", False) and fam.setting("return_audio") is None:
        raise ValueError(f"--no-audio: the {spec.name} demo generates no audio; leave it out")
    enable_compile_cache(args)
    ckpt_dir = Path(args.checkpoint_dir).expanduser()
    folder = ckpt_dir / spec.folder(task)
    out_dir = Path(args.out_dir).expanduser()
    stem = f"{spec.name}-{task}"
    out, args.metrics_json = out_dir / f"{stem}.mp4", str(out_dir / f"{stem}.json")
    for path in (out, Path(args.metrics_json)):
        _check_writable(path, "--out-dir")
    say = (lambda text: None) if args.quiet else print
    if folder.exists():
        if not (folder / "model_index.json").is_file():
            raise ValueError(f"{folder} exists but holds no checkpoint (no model_index.json); remove it")
        try:
            claimed = registry.family_of(folder)
        except CheckpointError as e:
            raise ValueError(f"{folder} holds something else than the {spec.name} demo ({e}); remove it") from None
        if claimed is not fam or task not in fam.folder_tasks(folder):
            raise ValueError(f"{folder} holds {registry._an(claimed.display)} checkpoint that is not the {spec.name} "
                             f"{task} demo; remove it, or pass another --checkpoint-dir")
        say(f"{folder}: demo checkpoint present")
    else:
        try:
            _check_writable(ckpt_dir / ".probe", "--checkpoint-dir")
            spec.write(folder, task)
        except OSError as e:
            raise ValueError(f"--checkpoint-dir {ckpt_dir}: cannot write the demo checkpoint there "
                             f"({e.strerror or e}); choose another folder") from None
        say(f"{folder}: wrote the {spec.name} demo checkpoint (tiny, RANDOM weights: the video is structured noise)")
    if spec.note:
        say(f"{spec.name}: {spec.note}")
    settings = dict(spec.settings(task))
    if getattr(args, "no_audio", False):
        settings["return_audio"] = False
    dtype = settings.pop("dtype", "float32")
    image = last = None
    if task in ("i2v", "flf2v"):
        paths = demo_frames(out_dir, stem, 2 if task == "flf2v" else 1)
        image = load_image(paths[0], "demo image")
        last = load_image(paths[1], "demo last image") if task == "flf2v" else None
    if task == "v2v":
        from vidax.checkpoint.demo import demo_video
        from vidax.core.images import load_video

        settings["video"] = load_video(demo_video(out_dir, stem), "demo video", keep_last=fam.video_keep_last)
    registry.check_task(fam, folder, task)
    if fam.check is not None:
        fam.check(folder, task, {**fam.defaults, **settings})
    progress = Progress(enabled=not (args.no_progress or args.quiet))
    t0 = time.perf_counter()
    pipe = fam.pipeline_class(task).from_pretrained(folder, dtype=dtype, progress=progress, compile_cache=False,
                                                    **fam.load_settings(settings))
    result = pipe("A majestic red panda climbing a bamboo tree in the snow, 4k", image=image, last_image=last,
                  seed=args.seed, progress=progress, **settings)
    m = dict(result.metrics, total_s=time.perf_counter() - t0, family=fam.name, task=task, preset=None, seed=args.seed,
             dtype=dtype, steps=result.metrics["num_inference_steps"], out=str(out), demo=spec.name)
    audio, rate = _audio_track(result)
    if audio is not None:
        m.update(audio_sample_rate=rate, audio_channels=int(audio.shape[0]), audio_samples=int(audio.shape[1]))
    write_outputs(result.frames[0], m, out, args.metrics_json, result.fps, audio=audio, sample_rate=rate)
    if not args.quiet:
        print(summary_line(m))
    return 0


# -- main ------------------------------------------------------------------------


def _quiet_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one ``vidax: warning:`` line (no source line of the library that raised them)."""
    print(f"vidax: warning: {message}", file=file or sys.stderr)


#: The longest error message printed (a message never echoes a file's contents at length).
MAX_ERROR_CHARS = 4000


def _bounded(message: str) -> str:
    return message if len(message) <= MAX_ERROR_CHARS else message[:MAX_ERROR_CHARS] + " ... (message cut)"


def _end_progress_lines() -> None:
    # Progress bars are open only if vidax.core.progress was imported (a run started); close what is open.
    progress = sys.modules.get("vidax.core.progress")
    if progress is not None:
        progress.end_lines()


def main(argv: list[str] | None = None) -> int:
    """Run a ``vidax`` command. Returns the exit status: 0 done, 1 ``inspect`` found a mismatch, 2 an error
    (one ``vidax: error:`` line naming the fix), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 141 the output
    pipe closed."""
    from vidax.core import signals

    # SIGINT / SIGTERM end the run cleanly from here on (the `vidax` entry point installs them even earlier).
    owned = not signals.installed() and signals.install()
    shown = warnings.showwarning
    warnings.showwarning = _show_warning
    status = 2
    try:
        args = _parser().parse_args(argv)
        commands = {"generate": generate, "inspect": inspect, "plan": plan, "convert": convert, "demo": demo,
                    "presets": presets}
        if args.command == "plan" and args.devices is not None:
            _prepare_devices(args.devices)  # before JAX starts
        if args.command != "presets":
            with signals.deferred():  # native modules load uninterrupted (a signal there could crash the import)
                import jax
                import numpy  # noqa: F401

                if args.command in ("generate", "demo") and not getattr(args, "distributed", False):
                    # The backend starts uninterrupted too: JAX arms a non-daemon timer thread around the TPU
                    # client's creation, and a signal raised between the two left the exit waiting 60 s for it.
                    # (Several hosts: jax.distributed.initialize() must come first; it runs in the command.)
                    jax.devices()
        status = commands[args.command](args)
        return status
    except SystemExit as e:  # argparse: --help printed, or its one error line (_Parser.error)
        status = e.code if isinstance(e.code, int) else 2
        raise
    except BrokenPipeError:  # the reader of our output went away (`vidax inspect ... | head`)
        _quiet_stdout()
        status = 141
        return status
    # CheckpointError is a ValueError; OSError: missing or existing files; FloatingPointError: a NaN video.
    except (ValueError, OSError, FloatingPointError) as e:
        _end_progress_lines()  # the message starts a line of its own, never the tail of a bar
        print(f"vidax: error: {_bounded(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # nothing half-written: every output goes to a temporary file first
        _end_progress_lines()
        print("vidax: interrupted; no output was written", file=sys.stderr)
        return 130
    except signals.Terminated:
        _end_progress_lines()
        print("vidax: terminated; no output was written", file=sys.stderr)
        return 143
    finally:
        if status != 0:
            _remove_created_folders()
        _CREATED.clear()
        warnings.showwarning = shown
        if owned:
            signals.uninstall()


if __name__ == "__main__":
    sys.exit(main())
