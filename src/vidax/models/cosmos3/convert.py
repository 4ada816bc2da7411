"""``vidax convert`` for Cosmos3: a diffusers folder (its transformer in diffusers or release names) or a converted
one, into the vidax layout::

    vidax_index.json     format vidax, family cosmos3, the pipeline's settings (default_use_system_prompt,
                         use_native_flow_schedule), dtypes, sizes, source
    transformer/         params.safetensors (every parameter under its tree path, layers stacked) + config.json
    vae/                 params.safetensors + config.json (the Wan2.2 VAE)
    text_tokenizer/      the tokenizer files, copied
    scheduler/           scheduler_config.json, copied

Everything is checked before anything is written; the output is assembled under a temporary name and renamed into
place when complete.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.writer import VIDAX_INDEX, VIDAX_WEIGHTS, assembled_folder, write_component, write_json
from vidax.core import wan_vae
from vidax.core.config_values import read_json

FAMILY = "cosmos3"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
                   "added_tokens.json", "chat_template.json", "chat_template.jinja")


def transformer_source(ckpt):
    """``(cfg, reader, keymap, specs, layout)`` of the folder's transformer (no tensor data read)."""
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.models.cosmos3.keymap import detect_layout, transformer_checkpoint
    from vidax.models.cosmos3.layout import VIDAX
    from vidax.models.cosmos3.loading import transformer_config
    from vidax.models.cosmos3.transformer import transformer_specs

    cfg = transformer_config(ckpt)
    specs = transformer_specs(cfg)
    if ckpt.layout == VIDAX:
        return cfg, CheckpointReader(ckpt.transformer / VIDAX_WEIGHTS), identity_keymap(specs), specs, "vidax"
    reader = CheckpointReader(ckpt.transformer)
    layout = detect_layout(reader)
    reader, keymap = transformer_checkpoint(reader, cfg, layout)
    return cfg, reader, keymap, specs, layout


def vae_source(ckpt):
    """``(cfg, reader, keymap, specs)`` of the folder's VAE."""
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.models.cosmos3.layout import VIDAX

    cfg = wan_vae.WanVAEConfig.from_dict(read_json(ckpt.vae / "config.json"))
    specs = wan_vae.vae_specs(cfg)
    if ckpt.layout == VIDAX:
        return cfg, CheckpointReader(ckpt.vae / VIDAX_WEIGHTS), identity_keymap(specs), specs
    return cfg, CheckpointReader(ckpt.vae), wan_vae.vae_keymap(cfg), specs


def _copy_files(src: Path, dst: Path, names) -> None:
    dst.mkdir(parents=True)
    for name in names:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)


def convert_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, *, dtype: Any = "bfloat16",
                       vae_dtype: Any = "float32", text_encoder_dtype: Any = None) -> dict:
    """Translate a Cosmos3 folder into the vidax layout at ``dst`` (see the module docstring).

    Args:
      src: the source folder (:func:`vidax.models.cosmos3.layout.resolve_checkpoint`).
      dst: the output folder; must not exist.
      dtype: the transformer's weights (``"bfloat16"`` or ``"float32"``; the time embedder stays float32).
      vae_dtype: the VAE's weights.
      text_encoder_dtype: ignored (Cosmos3 has no separate text encoder; accepted for the common interface).

    Returns:
      a summary: ``format``, ``version``, ``family``, ``pipeline_class``, the pipeline settings, ``source``,
      ``source_layout``, ``transformer_layout``, ``dtypes`` and ``bytes`` per component, ``seconds``.

    Raises:
      FileExistsError: ``dst`` exists.
      ValueError: an unsupported dtype, configuration or sampler.
      CheckpointError: the source is incomplete, the tokenizer is missing, the components belong to different
        models, or weights do not match their configuration (all named).
      OSError: writing ``dst`` failed (the partial output is removed).
    """
    from vidax.core.inputs import check_dtype
    from vidax.models.cosmos3 import loading
    from vidax.models.cosmos3.layout import PIPELINE_CLASS, check_tokenizer, resolve_checkpoint

    t0 = time.perf_counter()
    dtype = check_dtype(dtype)
    vae_dtype = check_dtype(vae_dtype, "vae_dtype")
    if Path(dst).exists():
        raise FileExistsError(f"{dst} exists; choose a new output folder")
    ckpt = resolve_checkpoint(src)
    check_tokenizer(ckpt)
    tcfg, treader, tkeymap, tspecs, tlayout = transformer_source(ckpt)
    vcfg, vreader, vkeymap, vspecs = vae_source(ckpt)
    loading.check_components(ckpt, tcfg, vcfg, loading.load_tokenizer(ckpt))
    loading.make_scheduler(ckpt)  # a sampler vidax runs
    with assembled_folder(dst) as tmp:
        sizes = {
            "transformer": write_component(tmp / "transformer", treader, tkeymap, tspecs, dtype, tcfg.to_dict(),
                                           str(ckpt.transformer)),
            "vae": write_component(tmp / "vae", vreader, vkeymap, vspecs, vae_dtype,
                                   read_json(ckpt.vae / "config.json"), str(ckpt.vae)),
        }
        _copy_files(ckpt.text_tokenizer, tmp / "text_tokenizer", TOKENIZER_FILES)
        (tmp / "scheduler").mkdir()
        write_json(tmp / "scheduler" / "scheduler_config.json", ckpt.scheduler_config())
        summary = {
            "format": "vidax", "version": 1, "family": FAMILY, "pipeline_class": PIPELINE_CLASS,
            "default_use_system_prompt": ckpt.default_use_system_prompt,
            "use_native_flow_schedule": ckpt.use_native_flow_schedule,
            "distilled_sigmas": list(ckpt.distilled_sigmas) if ckpt.is_distilled else None,
            "source": str(Path(src).resolve()), "source_layout": ckpt.layout, "transformer_layout": tlayout,
            "dtypes": {"transformer": dtype.name, "vae": vae_dtype.name}, "bytes": sizes,
        }
        write_json(tmp / VIDAX_INDEX, summary)
    if not (Path(dst) / VIDAX_INDEX).is_file():
        raise CheckpointError(f"{dst}: the conversion did not complete")
    summary["seconds"] = time.perf_counter() - t0
    return summary
