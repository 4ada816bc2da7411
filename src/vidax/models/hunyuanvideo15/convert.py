"""``vidax convert`` for HunyuanVideo-1.5: translate a checkpoint once, load it later as a plain copy.

From any layout of :mod:`vidax.models.hunyuanvideo15.layout` (a diffusers folder such as
``hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v``, the official release's ``ckpts`` folder with one of
its transformer variants, or a converted folder; text-to-video or image-to-video) the output is the ``"vidax"``
layout::

    vidax_index.json                  {"format": "vidax", "family": "hunyuanvideo-1.5", "pipeline_class": ...,
                                       "variant": ..., "source_layout": ..., "dtypes": ..., "bytes": ...}
    transformer/config.json           HunyuanVideo15Transformer3DModel's keys (the release's read by from_original_dict)
    transformer/params.safetensors    our parameter paths ("transformer_blocks/attn/to_q/kernel"), the refiner's fused
                                      q/k/v already split, blocks stacked, cast by the dtype policy
    vae/config.json                   AutoencoderKLHunyuanVideo15's keys (the release's AutoencoderKLConv3D renamed)
    vae/params.safetensors
    text_encoder/                     Qwen2.5-VL's language model as a transformers Qwen2_5_VLTextModel
    tokenizer/                        its tokenizer
    text_encoder_2/                   the byT5 glyph encoder as a transformers T5EncoderModel (the release's
                                      Glyph-SDXL-v2 byt5_model.pt on byt5-small's config, its rows the glyph tokens')
    tokenizer_2/                      its ByT5Tokenizer (the release's: byt5-small's with the glyph tokens added)
    scheduler/scheduler_config.json   the source's (the release without one: the variant's shift)
    guider/config.json                the source's (without one: the variant's guidance scale)
    image_encoder/                    image-to-video: SigLIP's vision tower as a transformers SiglipVisionModel
    feature_extractor/                image-to-video: its preprocessor_config.json

The transformer and the VAE load with the identity key map and no transposes; the encoders stay in the transformers
layouts the diffusers folders use (the encoders read transformers folders), holding only the tensors they use (the
release's Qwen2.5-VL vision tower and LM head, SigLIP's pooling head are left out). Qwen2.5-VL and byT5 are cast to
``text_encoder_dtype`` tensor by tensor (norms stay float32); SigLIP is kept in its stored dtype (the pipelines load
it at their ``image_encoder_dtype``). Loading the result gives exactly the parameters loading the source gives at
the dtypes it was converted to, and the official release's ``variant`` is recorded, so its sampler defaults follow.
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

#: Files of a transformers tokenizer, copied from a folder that also holds weights (the official release keeps the
#: Qwen2.5-VL tokenizer beside the model in ``text_encoder/llm``).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "chat_template.json", "chat_template.jinja")
#: Weights file of the encoders in the converted folder (what transformers' ``save_pretrained`` names it).
ENCODER_WEIGHTS = "model.safetensors"
TRANSFORMER_CLASS, VAE_CLASS = "HunyuanVideo15Transformer3DModel", "AutoencoderKLHunyuanVideo15"


def config_dict(cfg: Any, class_name: str) -> dict:
    """A configuration dataclass as the diffusers ``config.json`` it reads (tuples as lists, ``_class_name``)."""
    d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}
    return {"_class_name": class_name, **d}


def resolve(src: str | os.PathLike, variant: str | None = None):
    """The folder resolved as the pipelines resolve it (:func:`vidax.models.hunyuanvideo15.layout.resolve_checkpoint`),
    with ``variant`` refused where it chooses nothing.

    Raises:
      CheckpointError: see ``resolve_checkpoint`` (a missing variant names those present); a ``variant`` for a
        diffusers or converted folder, which holds one transformer.
    """
    from vidax.models.hunyuanvideo15.layout import ORIGINAL, resolve_checkpoint

    ckpt = resolve_checkpoint(src, variant=variant)
    if variant is not None and ckpt.layout != ORIGINAL:
        raise CheckpointError(f"{ckpt.folder}: a {ckpt.layout} folder holds one transformer; variant (--variant) "
                              "chooses among the official release's transformer/<variant> folders: leave it out")
    return ckpt


def transformer_source(ckpt):
    """``(cfg, reader, keymap, specs)`` of a resolved folder's transformer, in its layout (headers only).

    Raises:
      CheckpointError: an unreadable ``config.json`` or weights file. ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.keymap import identity_keymap
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.checkpoint.writer import VIDAX_WEIGHTS
    from vidax.models.hunyuanvideo15.keymap import transformer_checkpoint
    from vidax.models.hunyuanvideo15.layout import VIDAX
    from vidax.models.hunyuanvideo15.loading import transformer_config
    from vidax.models.hunyuanvideo15.transformer import transformer_specs

    cfg = transformer_config(ckpt)
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
    from vidax.models.hunyuanvideo15.layout import VIDAX
    from vidax.models.hunyuanvideo15.loading import vae_config
    from vidax.models.hunyuanvideo15.vae_keymap import vae_checkpoint, vae_specs

    if ckpt.layout == VIDAX:
        cfg = vae_config(ckpt)
        specs = vae_specs(cfg)
        return cfg, CheckpointReader(ckpt.vae / VIDAX_WEIGHTS), identity_keymap(specs), specs
    cfg, reader, keymap = vae_checkpoint(ckpt.vae)
    return cfg, reader, keymap, vae_specs(cfg)


@dataclasses.dataclass(frozen=True)
class EncoderSource:
    """One encoder read as its loader reads it (headers only), and what the converted folder names it.

    Attributes:
      name: its folder in the converted checkpoint (``"text_encoder"``, ``"text_encoder_2"``, ``"image_encoder"``).
      source: the folder (or, for the release's glyph encoder, the ``.pt`` file) it is read from.
      cfg: the parsed configuration.
      reader, keymap, specs: as :func:`vidax.checkpoint.loader.load_params` takes them.
      target: the key map of the converted folder (the transformers class of the diffusers folders).
      config: the converted folder's ``config.json``.
      cast: whether ``text_encoder_dtype`` applies (Qwen2.5-VL, byT5); SigLIP is kept as stored.
    """

    name: str
    source: Path
    cfg: Any
    reader: Any
    keymap: Any
    specs: Any
    target: Any
    config: dict
    cast: bool


def qwen_source(ckpt) -> EncoderSource:
    """The Qwen2.5-VL language model (diffusers: ``Qwen2_5_VLTextModel``; the release: the whole
    ``Qwen2_5_VLForConditionalGeneration``, whose vision tower and LM head are left out), converted to a
    ``Qwen2_5_VLTextModel`` folder (``layers.*`` names, a ``qwen2_5_vl_text`` config).

    Raises:
      CheckpointError: a missing ``config.json``, no known layout, unreadable weights; a tokenizer with more tokens
        than the embedding has rows. ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.encoders import llama, qwen2_5_vl
    from vidax.encoders.qwen2_tokenizer import Qwen2Tokenizer

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
    vocab = Qwen2Tokenizer.from_folder(ckpt.tokenizer).vocab_size
    if vocab > cfg.vocab_size:
        raise CheckpointError(f"{ckpt.tokenizer}: the tokenizer has {vocab} tokens, more than the text encoder's "
                              f"{cfg.vocab_size} embeddings ({folder}); use the tokenizer of the same release")
    return EncoderSource("text_encoder", folder, cfg, reader, keymap, llama.llama_specs(cfg), llama.llama_keymap(cfg),
                         target, True)


def glyph_source(ckpt):
    """``(EncoderSource, ByT5Tokenizer)`` of the byT5 glyph encoder: diffusers' ``text_encoder_2`` /
    ``tokenizer_2``, or the release's ``Glyph-SDXL-v2/checkpoints/byt5_model.pt`` on byt5-small's configuration with
    the glyph tokenizer (:func:`vidax.encoders.byt5.glyph_checkpoint_original`), converted to a ``T5EncoderModel``
    folder (``shared.weight``, ``encoder.block.*``) whose ``vocab_size`` is the checkpoint's rows.

    Raises:
      CheckpointError: a missing file, a tokenizer that does not fit the embedding (named). ValueError: an
        unsupported configuration.
    """
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.encoders import byt5, t5
    from vidax.models.hunyuanvideo15.layout import ORIGINAL

    if ckpt.layout == ORIGINAL:
        byt5_folder = ckpt.text_encoder_2
        cfg, tokenizer, reader, keymap = byt5.glyph_checkpoint_original(ckpt.glyph_weights.parent.parent, byt5_folder)
        path = byt5_folder / "config.json"
        config = {**read_json(path), "vocab_size": cfg.vocab_size, "architectures": ["T5EncoderModel"]}
        if t5.T5Config.from_dict(config) != cfg:  # a defect here, never the file's
            raise AssertionError(f"{path}: byT5's settings do not survive the T5EncoderModel config")
        source = ckpt.glyph_weights
    else:
        source = ckpt.text_encoder_2
        path = source / "config.json"
        config = read_json(path)
        cfg = t5.T5Config.from_dict(config)
        if cfg.model_type != "t5":
            raise ValueError(f"{path}: model_type {cfg.model_type!r}; byT5 is a 't5' encoder")
        reader = CheckpointReader(source)
        keymap = t5.t5_keymap(cfg, reader.keys())
        tokenizer = byt5.ByT5Tokenizer.from_folder(ckpt.tokenizer_2)
        if len(tokenizer) > cfg.vocab_size:
            raise CheckpointError(f"{ckpt.tokenizer_2}: {len(tokenizer):,} tokens for the {cfg.vocab_size:,} "
                                  f"embedding rows of {source}; the two folders do not belong together")
    return EncoderSource("text_encoder_2", source, cfg, reader, keymap, t5.t5_specs(cfg), t5.t5_keymap(cfg), config,
                         True), tokenizer


def siglip_source(ckpt) -> EncoderSource:
    """Image-to-video's SigLIP vision tower (``image_encoder/``; the release: FLUX.1-Redux-dev's), converted to a
    ``SiglipVisionModel`` folder (``vision_model.*`` names) without the pooling head.

    Raises:
      CheckpointError: a missing ``config.json`` or unreadable weights. ValueError: an unsupported configuration.
    """
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.encoders import siglip

    folder = ckpt.image_encoder
    path = folder / "config.json"
    cfg = siglip.SiglipVisionConfig.from_dict(read_json(path), str(path))
    reader = CheckpointReader(folder)
    return EncoderSource("image_encoder", folder, cfg, reader, siglip.siglip_keymap(cfg, reader.keys()),
                         siglip.siglip_specs(cfg), siglip.siglip_keymap(cfg), siglip.siglip_config_dict(cfg), False)


def processor_config(ckpt) -> tuple[Path | None, dict]:
    """Image-to-video: SigLIP's ``preprocessor_config.json`` where :func:`vidax.encoders.siglip.load_siglip_processor`
    finds it, as ``(path, dict)``; ``(None, HunyuanVideo-1.5's)`` when the folder has none (checked as the pipeline
    reads it).

    Raises:
      CheckpointError: a file that is not a JSON object. ValueError: values the pipeline refuses (named).
    """
    from vidax.encoders import siglip

    folder = ckpt.feature_extractor
    for candidate in (folder, folder / "feature_extractor", folder.parent / "feature_extractor"):
        path = candidate / "preprocessor_config.json"
        if path.is_file():
            config = read_json(path)
            try:
                siglip.siglip_processor_config(config)
            except ValueError as e:
                raise ValueError(f"{path}: {e}") from None
            return path, config
    return None, {"image_processor_type": "SiglipImageProcessor", **siglip.HUNYUANVIDEO15_PROCESSOR}


def component_problems(ckpt, tcfg, vcfg) -> list[str]:
    """What makes the folder's components unfit for each other, as the pipelines check it before any weight
    (:func:`vidax.models.hunyuanvideo15.loading.check_components`); empty when they fit."""
    from vidax.models.hunyuanvideo15.loading import check_components

    try:
        check_components(ckpt, tcfg, vcfg)
    except CheckpointError as e:
        return [str(e)]
    return []


def sampler_configs(ckpt) -> tuple[dict, dict]:
    """``(scheduler config, guider config)`` of a resolved folder (the variant's where the folder has none), each
    checked as the pipelines build them.

    Raises:
      CheckpointError: a configuration the pipelines refuse, naming its file.
    """
    from vidax.models.hunyuanvideo15.pipeline import Guider
    from vidax.schedulers import scheduler_from_config

    scheduler, guider = ckpt.scheduler_config(), ckpt.guider_config()
    try:
        scheduler_from_config(dict(scheduler))
    except ValueError as e:
        raise CheckpointError(f"{ckpt.scheduler}: {e}") from None
    try:
        Guider(guider)
    except CheckpointError as e:
        raise CheckpointError(f"{ckpt.guider}: {e}") from None
    return scheduler, guider


def write_encoder(folder: Path, src: EncoderSource, dtype: Any | None) -> tuple[int, str]:
    """Write an encoder's used tensors into ``folder`` (``config.json`` + ``model.safetensors``) under the names of
    ``src.target``, one tensor in memory at a time.

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

    plan = plan_load(src.reader, src.keymap, src.specs, source=str(src.source))
    target = {rule.path: rule for rule in src.target.rules}
    entries, keys = [], []
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
            keys.append(key)

    def arrays():
        for (name, _, want), key in zip(entries, keys):
            yield name, cast_on_host(np.asarray(src.reader.get(key)), np.dtype(want))

    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors_stream(folder / ENCODER_WEIGHTS, entries, arrays(), metadata={"format": "pt"})
    write_json(folder / "config.json", src.config)
    written = sorted({np.dtype(e[2]).name for e in entries
                      if np.issubdtype(np.dtype(e[2]), np.floating) or np.dtype(e[2]).kind == "V"})
    return (folder / ENCODER_WEIGHTS).stat().st_size, "/".join(written)


def _copy_tokenizer(src: Path, dst: Path, beside_weights: bool) -> None:
    if not beside_weights:
        shutil.copytree(src, dst)
        return
    dst.mkdir()
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)


def convert_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, *, dtype: Any = "bfloat16",
                       text_encoder_dtype: Any = "float32", vae_dtype: Any = "float32",
                       variant: str | None = None) -> dict:
    """Translate a HunyuanVideo-1.5 folder (diffusers, the official release or vidax layout; T2V or I2V) into the
    vidax layout at ``dst`` (see the module docstring).

    Everything is checked before anything is written: the folder's parts and variant, both tokenizers, the sampler
    configurations, the components' fit to each other, and every component's tensors against its configuration
    (all mismatches listed). The output is assembled under a temporary name beside ``dst`` and renamed into place
    when complete: a failed or interrupted conversion leaves nothing.

    Args:
      src: the source folder (:func:`vidax.models.hunyuanvideo15.layout.resolve_checkpoint`).
      dst: the output folder; must not exist.
      dtype: the transformer's weights (``"bfloat16"`` or ``"float32"``); its fp32-pinned leaves (modulation
        tables, embedders, norms) stay float32.
      text_encoder_dtype: Qwen2.5-VL's and byT5's weights (norms stay float32). SigLIP is kept as stored.
      vae_dtype: the VAE's weights (its RMS-norm scales stay float32).
      variant: the official release's transformer to convert (``"480p_t2v"``, ``"720p_i2v_distilled"``, ...;
        None: the one the pipelines take without a variant, the 720p T2V one or the first present); refused for a
        diffusers or converted folder, which holds one transformer.

    Returns:
      a summary: ``format``, ``version``, ``family``, ``pipeline_class``, ``variant``, ``model``, ``source``,
      ``source_layout``, ``dtypes`` and ``bytes`` per component, ``seconds``.

    Raises:
      FileExistsError: ``dst`` exists.
      ValueError: an unsupported dtype or configuration.
      CheckpointError: the source is incomplete, lacks the variant (those present named), a tokenizer is missing or
        does not fit its encoder, the components belong to different models, or weights do not match their
        configuration (the file and the fix named).
      OSError: writing ``dst`` failed (the partial output is removed).
    """
    from vidax.checkpoint.loader import plan_load
    from vidax.core.inputs import check_dtype
    from vidax.models.hunyuanvideo15.layout import check_tokenizers

    t0 = time.perf_counter()
    dtype = check_dtype(dtype)
    text_encoder_dtype = check_dtype(text_encoder_dtype, "text_encoder_dtype")
    vae_dtype = check_dtype(vae_dtype, "vae_dtype")
    if Path(dst).exists():
        raise FileExistsError(f"{dst} exists; choose a new output folder")
    ckpt = resolve(src, variant)
    check_tokenizers(ckpt)
    tcfg, treader, tkeymap, tspecs = transformer_source(ckpt)
    vcfg, vreader, vkeymap, vspecs = vae_source(ckpt)
    problems = component_problems(ckpt, tcfg, vcfg)
    if problems:
        raise CheckpointError("; ".join(problems))
    scheduler, guider = sampler_configs(ckpt)
    qwen = qwen_source(ckpt)
    glyph, glyph_tokenizer = glyph_source(ckpt)
    encoders = [qwen, glyph]
    processor = None
    if ckpt.image_encoder is not None:
        encoders.append(siglip_source(ckpt))
        processor = processor_config(ckpt)[1]
    for part in encoders:  # every tensor matched before anything is written (write_component checks its own)
        plan_load(part.reader, part.keymap, part.specs, source=str(part.source))
    with assembled_folder(dst) as tmp:
        sizes = {
            "transformer": write_component(tmp / "transformer", treader, tkeymap, tspecs, dtype,
                                           config_dict(tcfg, TRANSFORMER_CLASS), str(ckpt.transformer)),
            "vae": write_component(tmp / "vae", vreader, vkeymap, vspecs, vae_dtype, config_dict(vcfg, VAE_CLASS),
                                   str(ckpt.vae)),
        }
        dtypes = {"transformer": dtype.name, "vae": vae_dtype.name}
        for part in encoders:  # the dtype asked for (norms stay float32), or SigLIP's as stored
            sizes[part.name], stored = write_encoder(tmp / part.name, part, text_encoder_dtype if part.cast else None)
            dtypes[part.name] = text_encoder_dtype.name if part.cast else stored
        _copy_tokenizer(ckpt.tokenizer, tmp / "tokenizer", ckpt.tokenizer == ckpt.text_encoder)
        (tmp / "tokenizer_2").mkdir()
        if ckpt.glyph_weights is None:
            shutil.copytree(ckpt.tokenizer_2, tmp / "tokenizer_2", dirs_exist_ok=True)
        else:  # the release's: byt5-small's tokenizer with the glyph tokens, as diffusers' converter saves it
            write_json(tmp / "tokenizer_2" / "tokenizer_config.json", glyph_tokenizer.to_config())
        for part, name, config in (("scheduler", "scheduler_config.json", scheduler), ("guider", "config.json", guider),
                                   ("feature_extractor", "preprocessor_config.json", processor)):
            if config is not None:
                (tmp / part).mkdir()
                write_json(tmp / part / name, config)
        summary = {
            "format": "vidax", "version": 1, "family": "hunyuanvideo-1.5", "pipeline_class": ckpt.pipeline_class,
            "variant": ckpt.variant,
            "model": f"HunyuanVideo-1.5 {ckpt.variant or ckpt.task.upper()} ({ckpt.pipeline_class})",
            "source": str(Path(src).resolve()), "source_layout": ckpt.layout, "dtypes": dtypes, "bytes": sizes,
        }
        write_json(tmp / VIDAX_INDEX, summary)
    summary["seconds"] = time.perf_counter() - t0
    return summary
