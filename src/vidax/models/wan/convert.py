"""``vidax convert`` for Wan: translate a checkpoint once, load it later as a plain copy.

Every Wan model converts (T2V, I2V / FLF2V with their CLIP, TI2V-5B, A14B with both experts).

The output folder holds every component already translated (our parameter names, our
layout, stacked blocks stored whole) and cast by the dtype policy::

    vidax_index.json                  {"format": "vidax", "family": "wan", ...}
    transformer/config.json           the architecture (diffusers field names)
    transformer/params.safetensors    tensors named by parameter path, e.g. "blocks/attn1/to_q/kernel"
    vae/config.json, vae/params.safetensors
    text_encoder/config.json, text_encoder/params.safetensors
    tokenizer/                        copied from the source
    scheduler/scheduler_config.json   the sampler the source implies
    transformer_2/, image_encoder/, image_processor/   where the model has them

Loading it (:func:`vidax.models.wan.layout.resolve_checkpoint` detects the layout) needs no
renaming and no transposes, and gives exactly the parameters loading the source gives.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from vidax.checkpoint.writer import assembled_folder, write_component, write_json
from vidax.encoders.clip import clip_config_dict, clip_specs
from vidax.encoders.t5 import t5_specs
from vidax.core import wan_vae
from vidax.models.wan.demo import image_processor_config
from vidax.models.wan.layout import VIDAX_INDEX, resolve_checkpoint
from vidax.models.wan.pipeline import ORIGINAL_T2V_FLOW_SHIFT, WAN_UNIPC
from vidax.models.wan.transformer import transformer_specs


def _config_dict(cfg: Any, class_name: str | None) -> dict:
    d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}
    if class_name:
        d["_class_name"] = class_name
    return d


def convert_checkpoint(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    dtype: Any = "bfloat16",
    text_encoder_dtype: Any = "float32",
    vae_dtype: Any = "float32",
    image_encoder_dtype: Any = "float32",
) -> dict:
    """Translate a Wan checkpoint folder (any model, any layout) into the vidax layout at ``dst``.

    Besides the three components every Wan model has, the output holds what the model needs:
    ``transformer_2/`` (Wan2.2 A14B's low-noise expert), ``image_encoder/`` (Wan2.1 I2V / FLF2V CLIP,
    from the diffusers folder or the original ``.pth``; transformers-style ``config.json``) and
    ``image_processor/preprocessor_config.json``; ``vidax_index.json`` lists them under ``parts`` and
    keeps the sampling settings (``boundary_ratio``, ``expand_timesteps``, the original A14B release's
    flow shift) under ``pipeline``.

    Args:
      src: a diffusers-layout or original-release Wan folder.
      dst: the output folder; must not exist. Assembled under a temporary name beside it and
        renamed when complete.
      dtype: transformer weight dtype (both experts); fp32-pinned leaves (norms, timestep embedders,
        AdaLN tables) stay fp32.
      text_encoder_dtype, vae_dtype, image_encoder_dtype: dtypes of those components (fp32 by default,
        as the pipelines).

    Returns:
      a summary dict: layout of the source, seconds, bytes written per component.

    Raises:
      CheckpointError: the source is incomplete or does not match its configuration.
      FileExistsError: ``dst`` exists.
    """
    t0 = time.perf_counter()
    if Path(dst).exists():
        raise FileExistsError(f"{dst} exists; choose a new output folder")
    ckpt = resolve_checkpoint(src)
    maps = ckpt.maps
    with assembled_folder(dst) as tmp:
        sizes = {}
        tcfg = ckpt.transformer_config()
        tconfig = _config_dict(tcfg, "WanTransformer3DModel")
        sizes["transformer"] = write_component(
            tmp / "transformer", ckpt.transformer_reader(), maps.transformer_keymap(tcfg), transformer_specs(tcfg),
            np.dtype(dtype), tconfig, str(ckpt.transformer_weights))
        vreader = ckpt.vae_reader()
        vcfg = ckpt.vae_config(vreader)
        sizes["vae"] = write_component(
            tmp / "vae", vreader, maps.vae_keymap(vcfg), wan_vae.vae_specs(vcfg), np.dtype(vae_dtype),
            _config_dict(vcfg, "AutoencoderKLWan"), str(ckpt.vae_weights))
        ereader = ckpt.text_encoder_reader()
        ecfg = ckpt.text_encoder_config(ereader)
        sizes["text_encoder"] = write_component(
            tmp / "text_encoder", ereader, maps.text_encoder_keymap(ecfg), t5_specs(ecfg), np.dtype(text_encoder_dtype),
            _config_dict(ecfg, None), str(ckpt.text_encoder_weights))
        parts = []
        if ckpt.transformer_2_weights is not None:
            tcfg2 = ckpt.transformer_2_config()
            sizes["transformer_2"] = write_component(
                tmp / "transformer_2", ckpt.transformer_2_reader(), maps.transformer_keymap(tcfg2),
                transformer_specs(tcfg2), np.dtype(dtype), _config_dict(tcfg2, "WanTransformer3DModel"),
                str(ckpt.transformer_2_weights))
            parts.append("transformer_2")
        if ckpt.image_encoder is not None:
            creader, ckeymap, ccfg = ckpt.image_encoder_source()
            sizes["image_encoder"] = write_component(
                tmp / "image_encoder", creader, ckeymap, clip_specs(ccfg), np.dtype(image_encoder_dtype),
                clip_config_dict(ccfg), str(ckpt.image_encoder))
            (tmp / "image_processor").mkdir()
            if ckpt.image_processor is not None:
                shutil.copy(ckpt.image_processor / "preprocessor_config.json", tmp / "image_processor")
            else:  # the original release: CLIP's settings at the encoder's input size, as the pipeline uses
                write_json(tmp / "image_processor" / "preprocessor_config.json", image_processor_config(ccfg.image_size))
            parts += ["image_encoder", "image_processor"]
        shutil.copytree(ckpt.tokenizer, tmp / "tokenizer")
        pipeline = {k: v for k, v in ckpt.pipeline_config.items() if k != "_class_name"}
        sched = ckpt.scheduler_config()
        if sched is None:
            shift = pipeline.pop("original_flow_shift", ORIGINAL_T2V_FLOW_SHIFT)
            sched = {"_class_name": "UniPCMultistepScheduler", **WAN_UNIPC, "flow_shift": shift}
        (tmp / "scheduler").mkdir()
        write_json(tmp / "scheduler" / "scheduler_config.json", sched)
        summary = {
            "format": "vidax", "version": 1, "family": "wan", "model": ckpt.describe(tcfg),
            "source": str(Path(src).resolve()), "source_layout": ckpt.layout,
            "parts": parts, "pipeline": pipeline,
            "dtypes": {"transformer": str(np.dtype(dtype)), "vae": str(np.dtype(vae_dtype)),
                       "text_encoder": str(np.dtype(text_encoder_dtype)),
                       **({"image_encoder": str(np.dtype(image_encoder_dtype))} if "image_encoder" in parts else {})},
            "bytes": sizes,
        }
        write_json(tmp / VIDAX_INDEX, summary)
    summary["seconds"] = time.perf_counter() - t0
    return summary
