"""``vidax convert`` for HunyuanVideo: translate a checkpoint once, load it later as a plain copy.

From either source layout (a diffusers folder such as ``hunyuanvideo-community/HunyuanVideo``, or the original
release's ``ckpts`` folder; text-to-video or image-to-video) the output is the ``"vidax"`` layout of
:mod:`vidax.models.hunyuanvideo.layout`::

    vidax_index.json                  {"format": "vidax", "family": "hunyuanvideo", "pipeline_class": ..., ...}
    transformer/config.json           HunyuanVideoTransformer3DModel's keys (the original release's: from its shapes)
    transformer/params.safetensors    our parameter paths ("transformer_blocks/attn/to_q/kernel"), fused tensors
                                      already split, blocks stacked, cast by the dtype policy
    vae/config.json                   AutoencoderKLHunyuanVideo's keys (the original AutoencoderKLCausal3D's renamed)
    vae/params.safetensors
    text_encoder/                     the Llama as a transformers LlamaModel (I2V: the LlavaForConditionalGeneration)
    tokenizer/                        its tokenizer
    text_encoder_2/                   CLIP-L's text tower as a transformers CLIPTextModel
    tokenizer_2/                      its tokenizer
    scheduler/scheduler_config.json   the source's (the original release: flow matching with shift 7.0)
    image_processor/                  image-to-video: the LLaVA's preprocessor_config.json

The transformer and the VAE load with the identity key map and no transposes; the text encoders stay in their
transformers layout (the text side reads transformers folders), holding only the tensors the encoders use (the
LM head, CLIPModel's image side are left out), the Llama / LLaVA cast to ``text_encoder_dtype`` tensor by tensor,
CLIP kept in its stored dtype (the pipelines load CLIP in float32 whatever ``text_encoder_dtype`` is). Loading the
result gives exactly the parameters loading the source gives at the dtypes it was converted to.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.writer import (VIDAX_INDEX, assembled_folder, write_component, write_json,
                                    write_safetensors_stream)
from vidax.core.config_values import read_json

#: Files of a transformers tokenizer, copied from a folder that also holds weights (the original release keeps each
#: tokenizer beside its model).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "tokenizer.model", "chat_template.json", "chat_template.jinja")
TEXT_WEIGHTS = "model.safetensors"


def config_dict(cfg: Any, class_name: str) -> dict:
    """A configuration dataclass as the diffusers ``config.json`` it reads (tuples as lists, ``_class_name``)."""
    d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}
    return {"_class_name": class_name, **d}


def transformer_source(ckpt):
    """``(cfg, reader, keymap, specs)`` of a resolved folder's transformer, in its layout (headers only).

    Raises:
      CheckpointError: an unreadable configuration or weights file (the original release's configuration comes
        from its tensor shapes: a missing tensor is named). ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import VIDAX_WEIGHTS
    from vidax.models.hunyuanvideo.keymap import transformer_checkpoint
    from vidax.models.hunyuanvideo.layout import VIDAX
    from vidax.models.hunyuanvideo.transformer import transformer_specs

    cfg = ckpt.transformer_config()
    specs = transformer_specs(cfg)
    if ckpt.layout == VIDAX:
        return cfg, CheckpointReader(ckpt.transformer / VIDAX_WEIGHTS), identity_keymap(specs), specs
    return (cfg, *transformer_checkpoint(CheckpointReader(ckpt.transformer), cfg, ckpt.layout), specs)


def vae_source(ckpt):
    """``(cfg, reader, keymap, specs)`` of a resolved folder's VAE, in its layout (headers only).

    Raises:
      CheckpointError: an unreadable ``config.json`` or weights file. ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import VIDAX_WEIGHTS
    from vidax.models.hunyuanvideo.layout import VIDAX
    from vidax.models.hunyuanvideo.vae import vae_checkpoint, vae_specs

    if ckpt.layout == VIDAX:
        cfg = ckpt.vae_config()
        specs = vae_specs(cfg)
        return cfg, CheckpointReader(ckpt.vae / VIDAX_WEIGHTS), identity_keymap(specs), specs
    cfg, reader, keymap = vae_checkpoint(ckpt.vae)
    return cfg, reader, keymap, vae_specs(cfg)


@dataclasses.dataclass(frozen=True)
class TextEncoderSource:
    """One text encoder folder read as its loader reads it (headers only).

    Attributes:
      kind: ``"llama"``, ``"llava"`` or ``"clip"``.
      folder: the folder. config: its ``config.json``. cfg: the parsed configuration.
      reader, keymap, specs: as :func:`vidax.checkpoint.loader.load_params` takes them.
    """

    kind: str
    folder: Path
    config: dict
    cfg: Any
    reader: Any
    keymap: Any
    specs: Any


def text_encoder_source(folder: Path, kind: str) -> TextEncoderSource:
    """Read a text encoder folder's configuration and weight headers as :mod:`vidax.encoders` loads it.

    Raises:
      CheckpointError: a missing ``config.json`` or unreadable weights. ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.encoders import clip_text, llama, llava

    config = read_json(folder / "config.json")
    if kind == "llama":
        cfg = llama.LlamaConfig.from_dict(config)
        reader = CheckpointReader(folder)
        return TextEncoderSource(kind, folder, config, cfg, reader, llama.llama_keymap(cfg, reader.keys()),
                                 llama.llama_specs(cfg))
    if kind == "llava":
        cfg = llava.LlavaConfig.from_dict(config)
        reader = CheckpointReader(folder)
        return TextEncoderSource(kind, folder, config, cfg, reader, llava.llava_keymap(cfg, reader.keys()),
                                 llava.llava_specs(cfg))
    cfg = clip_text.CLIPTextConfig.from_dict(config)
    reader = CheckpointReader(folder)
    return TextEncoderSource(kind, folder, config, cfg, reader, clip_text.clip_text_keymap(cfg, reader.keys()),
                             clip_text.clip_text_specs(cfg))


def text_width(src: TextEncoderSource) -> int:
    """The hidden width of a text encoder (the LLaVA's language model's)."""
    return src.cfg.text.hidden_size if src.kind == "llava" else src.cfg.hidden_size


def component_problems(task: str, tcfg, vcfg, text: TextEncoderSource, clip: TextEncoderSource) -> list[str]:
    """What makes the components of one folder unfit for each other, as the pipelines check it when loading: the
    text encoder's width against the transformer's ``text_embed_dim``, CLIP's against ``pooled_projection_dim``, the
    VAE's latent channels against the transformer's output, the text encoder's kind (LLaVA for I2V) against the
    task. Empty when they fit."""
    problems = []
    if text_width(text) != tcfg.text_embed_dim:
        problems.append(f"the text encoder is {text_width(text)} wide but the transformer's text_embed_dim is "
                        f"{tcfg.text_embed_dim}")
    if text_width(clip) != tcfg.pooled_projection_dim:
        problems.append(f"CLIP's pooled output is {text_width(clip)} wide but the transformer's "
                        f"pooled_projection_dim is {tcfg.pooled_projection_dim}")
    if vcfg.latent_channels != tcfg.out_channels:
        problems.append(f"the VAE has {vcfg.latent_channels} latent channels but the transformer predicts "
                        f"{tcfg.out_channels}")
    if (text.kind == "llava") != (task == "i2v"):
        problems.append(f"the text encoder is a {text.kind} but the folder is {task}")
    return problems


def _text_target(src: TextEncoderSource):
    """The converted folder's key map and ``config.json``: the diffusers folders' classes (``LlamaModel`` names
    without ``model.``; ``CLIPTextModel`` under ``text_model.``, its config the ``text_config`` of a whole
    ``CLIPModel``); a LLaVA keeps its names."""
    from vidax.encoders import clip_text, llama

    if src.kind == "llama":
        return llama.llama_keymap(src.cfg), {**src.config, "architectures": ["LlamaModel"]}
    if src.kind == "clip":
        text = src.config.get("text_config") if ("text_config" in src.config
                                                  or src.config.get("model_type") == "clip") else src.config
        config = {**(text or {}), "architectures": ["CLIPTextModel"], "model_type": "clip_text_model"}
        return clip_text.clip_text_keymap(src.cfg), config
    return src.keymap, src.config


def write_text_encoder(folder: Path, src: TextEncoderSource, dtype: Any | None) -> tuple[int, str]:
    """Write a text encoder's used tensors into ``folder`` (``config.json`` + ``model.safetensors``), renamed to
    the diffusers folders' classes (:func:`_text_target`), one tensor in memory at a time.

    Args:
      dtype: floating tensors' dtype (fp32-pinned parameters, the norms, stay float32); None: as stored.

    Returns:
      ``(bytes written, the floating dtypes written, e.g. "float32")``.

    Raises:
      CheckpointError: the weights do not match the configuration (every mismatch listed, before anything is
        written).
    """
    from vidax.checkpoint.loader import cast_on_host, plan_load
    from vidax.core.params import flatten

    plan = plan_load(src.reader, src.keymap, src.specs, source=str(src.folder))
    keymap, config = _text_target(src)
    target = {rule.path: rule for rule in keymap.rules}
    entries, sources = [], []
    for path, spec in flatten(src.specs):
        rule = target[path]
        for key, layout, index in sorted(plan[path], key=lambda e: -1 if e[2] is None else e[2]):
            if layout != rule.layout:  # both are transformers layouts; a mismatch is a key map defect
                raise AssertionError(f"{path}: layout {layout} -> {rule.layout}")
            stored = np.dtype(src.reader.dtype(key))
            floating = np.issubdtype(stored, np.floating) or stored.kind == "V"
            want = spec.dtype(np.dtype(dtype)) if floating and dtype is not None else stored
            name = rule.key if index is None else rule.key.replace("{i}", str(index))
            entries.append((name, tuple(src.reader.shape(key)), want))
            sources.append(key)

    def arrays():
        for (name, _, want), key in zip(entries, sources):
            yield name, cast_on_host(np.asarray(src.reader.get(key)), np.dtype(want))

    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors_stream(folder / TEXT_WEIGHTS, entries, arrays(), metadata={"format": "pt"})
    write_json(folder / "config.json", config)
    written = sorted({np.dtype(e[2]).name for e in entries if np.issubdtype(np.dtype(e[2]), np.floating)
                      or np.dtype(e[2]).kind == "V"})
    return (folder / TEXT_WEIGHTS).stat().st_size, "/".join(written)


def _copy_tokenizer(src: Path, dst: Path, beside_weights: bool) -> None:
    if not beside_weights:
        shutil.copytree(src, dst)
        return
    dst.mkdir()
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)


def convert_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, *, dtype: Any = "bfloat16",
                       text_encoder_dtype: Any = "float32", vae_dtype: Any = "float32") -> dict:
    """Translate a HunyuanVideo folder (diffusers or original layout, T2V or I2V) into the vidax layout at ``dst``
    (see the module docstring).

    Everything is checked before anything is written: the folder's parts, both tokenizers, every component's
    tensors against its configuration (all mismatches listed). The output is assembled under a temporary name
    beside ``dst`` and renamed into place when complete: a failed or interrupted conversion leaves nothing.

    Args:
      src: the source folder (:func:`vidax.models.hunyuanvideo.layout.resolve_checkpoint`).
      dst: the output folder; must not exist.
      dtype: the transformer's weights (``"bfloat16"`` or ``"float32"``); its fp32-pinned leaves (modulation
        tables, embedders, norms) stay float32.
      text_encoder_dtype: the Llama's / LLaVA's weights (norms stay float32). CLIP is kept as stored.
      vae_dtype: the VAE's weights (GroupNorms stay float32).

    Returns:
      a summary: ``format``, ``family``, ``pipeline_class``, ``model``, ``source``, ``source_layout``, ``dtypes``
      and ``bytes`` per component, ``seconds``.

    Raises:
      FileExistsError: ``dst`` exists.
      ValueError: an unsupported dtype.
      CheckpointError: the source is incomplete, a tokenizer is missing, or weights do not match their
        configuration (the file and the fix named).
      OSError: writing ``dst`` failed (the partial output is removed).
    """
    from vidax.checkpoint.loader import plan_load
    from vidax.core.inputs import check_dtype
    from vidax.models.hunyuanvideo.layout import check_tokenizers, resolve_checkpoint
    from vidax.models.hunyuanvideo.text import text_encoder_folders

    t0 = time.perf_counter()
    dtype = check_dtype(dtype)
    text_encoder_dtype = check_dtype(text_encoder_dtype, "text_encoder_dtype")
    vae_dtype = check_dtype(vae_dtype, "vae_dtype")
    if Path(dst).exists():
        raise FileExistsError(f"{dst} exists; choose a new output folder")
    ckpt = resolve_checkpoint(src)
    check_tokenizers(ckpt)
    folders = text_encoder_folders(ckpt)
    tcfg, treader, tkeymap, tspecs = transformer_source(ckpt)
    vcfg, vreader, vkeymap, vspecs = vae_source(ckpt)
    text = text_encoder_source(folders.text_encoder, folders.kind)
    clip = text_encoder_source(folders.text_encoder_2, "clip")
    problems = component_problems(ckpt.task, tcfg, vcfg, text, clip)
    if problems:
        raise CheckpointError(f"{ckpt.folder}: " + "; ".join(problems) + ": the components belong to different "
                              "models")
    for part in (text, clip):  # every tensor matched before anything is written (write_component checks its own)
        plan_load(part.reader, part.keymap, part.specs, source=str(part.folder))
    with assembled_folder(dst) as tmp:
        sizes = {
            "transformer": write_component(tmp / "transformer", treader, tkeymap, tspecs, dtype,
                                           config_dict(tcfg, "HunyuanVideoTransformer3DModel"),
                                           str(ckpt.transformer)),
            "vae": write_component(tmp / "vae", vreader, vkeymap, vspecs, vae_dtype,
                                   config_dict(vcfg, "AutoencoderKLHunyuanVideo"), str(ckpt.vae)),
        }
        sizes["text_encoder"], _ = write_text_encoder(tmp / "text_encoder", text, text_encoder_dtype)
        sizes["text_encoder_2"], clip_dtype = write_text_encoder(tmp / "text_encoder_2", clip, None)
        _copy_tokenizer(folders.tokenizer, tmp / "tokenizer", folders.tokenizer == folders.text_encoder)
        _copy_tokenizer(folders.tokenizer_2, tmp / "tokenizer_2", folders.tokenizer_2 == folders.text_encoder_2)
        (tmp / "scheduler").mkdir()
        write_json(tmp / "scheduler" / "scheduler_config.json", ckpt.scheduler_config())
        if folders.image_processor is not None:
            (tmp / "image_processor").mkdir()
            shutil.copy(folders.image_processor / "preprocessor_config.json", tmp / "image_processor")
        summary = {
            "format": "vidax", "version": 1, "family": "hunyuanvideo", "pipeline_class": ckpt.pipeline_class,
            "model": f"HunyuanVideo ({ckpt.pipeline_class})", "source": str(Path(src).resolve()),
            "source_layout": ckpt.layout,
            "dtypes": {"transformer": dtype.name, "vae": vae_dtype.name, "text_encoder": text_encoder_dtype.name,
                       "text_encoder_2": clip_dtype},
            "bytes": sizes,
        }
        write_json(tmp / VIDAX_INDEX, summary)
    summary["seconds"] = time.perf_counter() - t0
    return summary
