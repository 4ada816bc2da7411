"""``vidax convert`` for Cosmos-Predict2.5: translate a checkpoint once, load it later as a plain copy.

From any layout of :mod:`vidax.models.cosmos_predict25.layout` (a diffusers ``Cosmos2_5_PredictBasePipeline``
folder, the release's folder with one of its transformers, or a converted folder) the output is the ``"vidax"``
layout::

    vidax_index.json                  {"format": "vidax", "family": "cosmos-predict2.5", "pipeline_class": ...,
                                       "variant": ..., "source_layout": ..., "dtypes": ..., "bytes": ...}
    transformer/config.json           CosmosTransformer3DModel's keys, plus vidax's qk_norm_eps (the original
                                      network's 1e-6 for a release, diffusers' 1e-5 otherwise)
    transformer/params.safetensors    our parameter paths ("transformer_blocks/attn1/to_q/kernel"), blocks stacked,
                                      cast by the dtype policy
    vae/config.json                   AutoencoderKLWan's keys (the release's tokenizer.pth: read back from its shapes)
    vae/params.safetensors
    text_encoder/                     Qwen2.5-VL's language model as a transformers Qwen2_5_VLTextModel
    tokenizer/                        its tokenizer files
    scheduler/scheduler_config.json   the source's; for a release, its variant's sampler
                                      (:meth:`vidax.models.cosmos_predict25.presets.Variant.scheduler_config`)

The transformer and the VAE load with the identity key map and no transposes; the text encoder is written in the
transformers layout diffusers' HunyuanVideo-1.5 folders use (the loader reads transformers folders), holding only
the tensors the text path reads (Cosmos-Reason1-7B's vision tower and LM head are left out) and cast to
``text_encoder_dtype`` tensor by tensor (norms stay float32). The release's ``variant`` is recorded in
``vidax_index.json``: the pipeline takes the variant's conditioning-frame timestep and default step count from it, and
the written scheduler reproduces its sampler, so a converted release gives the release's frames bit for bit (at the
dtypes it was converted to).
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
from vidax.checkpoint.writer import VIDAX_INDEX, assembled_folder, write_component, write_json, write_safetensors_stream
from vidax.core.config_values import read_json

#: Files of a transformers tokenizer, copied from a folder that also holds weights (Cosmos-Reason1-7B keeps
#: Qwen2.5-VL's tokenizer beside the model).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "chat_template.json", "chat_template.jinja")
#: Weights file of the text encoder in the converted folder (what transformers' ``save_pretrained`` names it).
ENCODER_WEIGHTS = "model.safetensors"
FAMILY, VAE_CLASS = "cosmos-predict2.5", "AutoencoderKLWan"


def resolve(src: str | os.PathLike, variant: str | None = None):
    """The folder resolved as the pipeline resolves it (:func:`vidax.models.cosmos_predict25.layout.
    resolve_checkpoint`), with ``variant`` refused where it chooses nothing.

    Raises:
      CheckpointError: see ``resolve_checkpoint`` (an unknown variant, or one the folder lacks: those present
        named); a ``variant`` for a diffusers or converted folder, which holds one transformer.
    """
    from vidax.models.cosmos_predict25.layout import ORIGINAL, resolve_checkpoint

    ckpt = resolve_checkpoint(src, variant=variant)
    if variant is not None and ckpt.layout != ORIGINAL:
        raise CheckpointError(f"{ckpt.folder}: a {ckpt.layout} folder holds one transformer; variant (--variant) "
                              "chooses among the release's base/<variant> transformers: leave it out")
    return ckpt


def transformer_config_dict(cfg) -> dict:
    """A transformer configuration as the converted folder's ``config.json``: diffusers' keys plus ``qk_norm_eps``
    (read back by :func:`vidax.models.cosmos_predict25.loading.transformer_config`)."""
    return {**cfg.to_dict(), "qk_norm_eps": cfg.qk_norm_eps}


def vae_config_dict(cfg) -> dict:
    """A :class:`~vidax.core.wan_vae.WanVAEConfig` as diffusers' ``AutoencoderKLWan`` ``config.json``."""
    d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}
    return {"_class_name": VAE_CLASS, **d}


def transformer_source(ckpt):
    """``(cfg, reader, keymap, specs)`` of a resolved folder's transformer, in its layout (headers only).

    Raises:
      CheckpointError: an unreadable ``config.json`` or weights file, weights of no release without a
        ``config.json`` beside them. ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import VIDAX_WEIGHTS
    from vidax.models.cosmos_predict25.keymap import transformer_checkpoint
    from vidax.models.cosmos_predict25.layout import VIDAX
    from vidax.models.cosmos_predict25.loading import transformer_config
    from vidax.models.cosmos_predict25.transformer import transformer_specs

    cfg = transformer_config(ckpt)
    specs = transformer_specs(cfg)
    if ckpt.layout == VIDAX:
        return cfg, CheckpointReader(ckpt.transformer / VIDAX_WEIGHTS), identity_keymap(specs), specs
    return (cfg, *transformer_checkpoint(CheckpointReader(ckpt.transformer), cfg, ckpt.layout), specs)


def vae_source(ckpt):
    """``(cfg, reader, keymap, specs)`` of a resolved folder's Wan2.1 VAE, in its layout (headers only).

    Raises:
      CheckpointError: an unreadable file, a ``tokenizer.pth`` that is no Wan2.1 VAE. ValueError: an unsupported
        configuration.
    """
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import VIDAX_WEIGHTS
    from vidax.core import wan_vae
    from vidax.models.cosmos_predict25.layout import ORIGINAL, VIDAX
    from vidax.models.cosmos_predict25.loading import vae_config

    cfg = vae_config(ckpt)
    specs = wan_vae.vae_specs(cfg)
    if ckpt.layout == VIDAX:
        return cfg, CheckpointReader(ckpt.vae / VIDAX_WEIGHTS), identity_keymap(specs), specs
    keymap = wan_vae.vae_keymap_original(cfg) if ckpt.layout == ORIGINAL else wan_vae.vae_keymap(cfg)
    return cfg, CheckpointReader(ckpt.vae), keymap, specs


@dataclasses.dataclass(frozen=True)
class TextSource:
    """The Qwen2.5-VL text encoder read as its loader reads it (headers only).

    Attributes:
      folder: its folder (diffusers' ``text_encoder/``, the release's ``Cosmos-Reason1-7B/``).
      cfg: the language model's :class:`~vidax.encoders.llama.LlamaConfig`.
      reader, keymap, specs: as :func:`vidax.checkpoint.loader.load_params` takes them.
      target: the key map of the converted folder (``Qwen2_5_VLTextModel``: ``layers.*``).
      config: the converted folder's ``config.json`` (a ``qwen2_5_vl_text`` config of the same settings).
      vocab_size: the tokenizer's.
    """

    folder: Path
    cfg: Any
    reader: Any
    keymap: Any
    specs: Any
    target: Any
    config: dict
    vocab_size: int


def text_source(ckpt) -> TextSource:
    """The Qwen2.5-VL language model of a resolved folder (whichever transformers layout it is in) and its
    tokenizer, checked against each other.

    Raises:
      CheckpointError: a missing ``config.json`` or tokenizer, no known layout, unreadable weights, a tokenizer
        with more tokens than the embedding has rows. ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.encoders import llama, qwen2_5_vl
    from vidax.encoders.qwen2_tokenizer import Qwen2Tokenizer
    from vidax.models.cosmos_predict25.layout import check_tokenizer

    folder = ckpt.text_encoder
    path = folder / "config.json"
    config = read_json(path)
    cfg = qwen2_5_vl.config_from_dict(config, str(path))
    reader = CheckpointReader(folder)
    try:
        keymap = qwen2_5_vl.qwen2_5_vl_keymap(cfg, reader.keys())
    except CheckpointError as e:
        raise CheckpointError(f"{folder}: {e}") from None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    target = {k: v for k, v in text.items() if k not in ("text_config", "vision_config")}
    target.update(model_type="qwen2_5_vl_text", architectures=["Qwen2_5_VLTextModel"])
    if qwen2_5_vl.config_from_dict(target, str(path)) != cfg:  # a defect here, never the file's
        raise AssertionError(f"{path}: the language model's settings do not survive the text-model config")
    check_tokenizer(ckpt)
    vocab = Qwen2Tokenizer.from_folder(ckpt.tokenizer).vocab_size
    if vocab > cfg.vocab_size:
        raise CheckpointError(f"{ckpt.tokenizer}: the tokenizer has {vocab} tokens, more than the text encoder's "
                              f"{cfg.vocab_size} embeddings ({folder}); use the tokenizer of the same release")
    return TextSource(folder, cfg, reader, keymap, llama.llama_specs(cfg), llama.llama_keymap(cfg), target, vocab)


def component_problems(ckpt, tcfg, vcfg) -> list[str]:
    """What makes the folder's components unfit for each other, as the pipeline checks it before any weight
    (:func:`vidax.models.cosmos_predict25.loading.check_components`: the text encoder's layers x width against the
    transformer's ``crossattn_proj_in_channels``, the VAE's latent channels); empty when they fit."""
    from vidax.models.cosmos_predict25.loading import check_components

    try:
        check_components(ckpt, tcfg, vcfg)
    except CheckpointError as e:
        return [str(e)]
    return []


def scheduler_config(ckpt) -> dict:
    """The ``scheduler_config.json`` of a resolved folder (a release: its variant's sampler), checked as the
    pipeline builds it (:func:`vidax.models.cosmos_predict25.loading.make_scheduler`).

    Raises:
      CheckpointError: a configuration the pipeline refuses, naming its file.
    """
    from vidax.models.cosmos_predict25.layout import ORIGINAL
    from vidax.models.cosmos_predict25.loading import make_scheduler
    from vidax.models.cosmos_predict25.presets import VARIANTS

    try:
        make_scheduler(ckpt)
    except ValueError as e:
        raise CheckpointError(f"{ckpt.scheduler or f'the {ckpt.variant} sampler'}: {e}") from None
    return VARIANTS[ckpt.variant].scheduler_config() if ckpt.layout == ORIGINAL else ckpt.scheduler_config()


def model_size(ckpt, tcfg) -> str | None:
    """``"2B"`` / ``"14B"``: the release's size where the ``.pt`` file's name or the architecture tells, else None."""
    from vidax.models.cosmos_predict25.config import ORIGINAL_ALIASES, ORIGINAL_CONFIGS

    if ckpt.size is not None:
        return ckpt.size
    for short, full in ORIGINAL_ALIASES.items():
        c = ORIGINAL_CONFIGS[full]
        if (c["num_attention_heads"], c["attention_head_dim"], c["num_layers"]) == (
                tcfg.num_attention_heads, tcfg.attention_head_dim, tcfg.num_layers):
            return short
    return None


def model_name(ckpt, tcfg) -> str:
    """``"Cosmos-Predict2.5 2B post-trained"``: the size (:func:`model_size`) and the release's variant where
    known."""
    return " ".join(p for p in ("Cosmos-Predict2.5", model_size(ckpt, tcfg), ckpt.variant) if p)


def write_text_encoder(folder: Path, src: TextSource, dtype: Any) -> int:
    """Write the language model's tensors into ``folder`` (``config.json`` + ``model.safetensors``) under the
    ``Qwen2_5_VLTextModel`` names, one tensor in memory at a time; floating tensors in ``dtype`` (the norms, pinned
    to float32, stay float32).

    Returns:
      the bytes written.

    Raises:
      CheckpointError: the weights do not match the configuration (every mismatch listed, before anything is
        written).
    """
    from vidax.checkpoint.loader import cast_on_host, plan_load
    from vidax.core.params import flatten

    plan = plan_load(src.reader, src.keymap, src.specs, source=str(src.folder))
    target = {rule.path: rule for rule in src.target.rules}
    entries, keys = [], []
    for path, spec in flatten(src.specs):
        rule = target[path]
        for key, layout, index in sorted(plan[path], key=lambda e: -1 if e[2] is None else e[2]):
            if layout != rule.layout:  # both are transformers layouts; a mismatch is a key map defect
                raise AssertionError(f"{path}: layout {layout} -> {rule.layout}")
            stored = np.dtype(src.reader.dtype(key))
            floating = np.issubdtype(stored, np.floating) or stored.kind == "V"
            want = spec.dtype(np.dtype(dtype)) if floating else stored
            name = rule.key if index is None else rule.key.replace("{i}", str(index))
            entries.append((name, tuple(src.reader.shape(key)), want))
            keys.append(key)

    def arrays():
        for (name, _, want), key in zip(entries, keys):
            yield name, cast_on_host(np.asarray(src.reader.get(key)), np.dtype(want))

    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors_stream(folder / ENCODER_WEIGHTS, entries, arrays(), metadata={"format": "pt"})
    write_json(folder / "config.json", src.config)
    return (folder / ENCODER_WEIGHTS).stat().st_size


def _copy_tokenizer(src: Path, dst: Path, beside_weights: bool) -> None:
    if not beside_weights:
        shutil.copytree(src, dst)
        return
    dst.mkdir()
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)


def convert_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, *, variant: str | None = None,
                       dtype: Any = "bfloat16", text_encoder_dtype: Any = "float32",
                       vae_dtype: Any = "float32") -> dict:
    """Translate a Cosmos-Predict2.5 folder (diffusers, the release or vidax layout) into the vidax layout at ``dst``
    (see the module docstring).

    Everything is checked before anything is written: the folder's parts and variant, the tokenizer against the
    text encoder's embedding, the sampler, the components' fit to each other, and every component's tensors against
    its configuration (all mismatches listed). The output is assembled under a temporary name beside ``dst`` and
    renamed into place when complete: a failed or interrupted conversion leaves nothing.

    Args:
      src: the source folder (:func:`vidax.models.cosmos_predict25.layout.resolve_checkpoint`).
      dst: the output folder; must not exist.
      variant: the release's transformer to convert (``"post-trained"``, ``"pre-trained"``; None: post-trained, or
        the one present); refused for a diffusers or converted folder, which holds one transformer.
      dtype: the transformer's weights (``"bfloat16"`` or ``"float32"``); its fp32-pinned leaves (modulation,
        timestep embedder, norms, patch embedding) stay float32.
      text_encoder_dtype: Qwen2.5-VL's weights (norms stay float32).
      vae_dtype: the VAE's weights.

    Returns:
      a summary: ``format``, ``version``, ``family``, ``pipeline_class``, ``variant``, ``model``, ``source``,
      ``source_layout``, ``dtypes`` and ``bytes`` per component, ``seconds``.

    Raises:
      FileExistsError: ``dst`` exists.
      ValueError: an unsupported dtype or configuration.
      CheckpointError: the source is incomplete, lacks the variant (those present named), the tokenizer is missing
        or does not fit the text encoder, the components belong to different models, or weights do not match their
        configuration (the file and the fix named).
      OSError: writing ``dst`` failed (the partial output is removed).
    """
    from vidax.checkpoint.loader import plan_load
    from vidax.core.inputs import check_dtype
    from vidax.models.cosmos_predict25.layout import PIPELINE_CLASS

    t0 = time.perf_counter()
    dtype = check_dtype(dtype)
    text_encoder_dtype = check_dtype(text_encoder_dtype, "text_encoder_dtype")
    vae_dtype = check_dtype(vae_dtype, "vae_dtype")
    if Path(dst).exists():
        raise FileExistsError(f"{dst} exists; choose a new output folder")
    ckpt = resolve(src, variant)
    text = text_source(ckpt)
    tcfg, treader, tkeymap, tspecs = transformer_source(ckpt)
    vcfg, vreader, vkeymap, vspecs = vae_source(ckpt)
    problems = component_problems(ckpt, tcfg, vcfg)
    if problems:
        raise CheckpointError("; ".join(problems))
    scheduler = scheduler_config(ckpt)
    plan_load(text.reader, text.keymap, text.specs, source=str(text.folder))  # (write_component checks its own)
    with assembled_folder(dst) as tmp:
        sizes = {
            "transformer": write_component(tmp / "transformer", treader, tkeymap, tspecs, dtype,
                                           transformer_config_dict(tcfg), str(ckpt.transformer)),
            "vae": write_component(tmp / "vae", vreader, vkeymap, vspecs, vae_dtype, vae_config_dict(vcfg),
                                   str(ckpt.vae)),
            "text_encoder": write_text_encoder(tmp / "text_encoder", text, text_encoder_dtype),
        }
        _copy_tokenizer(ckpt.tokenizer, tmp / "tokenizer", ckpt.tokenizer == ckpt.text_encoder)
        (tmp / "scheduler").mkdir()
        write_json(tmp / "scheduler" / "scheduler_config.json", scheduler)
        summary = {
            "format": "vidax", "version": 1, "family": FAMILY, "pipeline_class": PIPELINE_CLASS,
            "variant": ckpt.variant, "model": model_name(ckpt, tcfg), "source": str(Path(src).resolve()),
            "source_layout": ckpt.layout,
            "dtypes": {"transformer": dtype.name, "vae": vae_dtype.name, "text_encoder": text_encoder_dtype.name},
            "bytes": sizes,
        }
        write_json(tmp / VIDAX_INDEX, summary)
    summary["seconds"] = time.perf_counter() - t0
    return summary
