"""Wan checkpoint folder layouts: which files hold which component, and which key maps read them.

Two layouts of the same Wan2.1 T2V weights are published:

``"diffusers"`` (e.g. ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers``; what ``WanPipeline.save_pretrained`` writes)
    ``model_index.json``; ``transformer/`` (``config.json`` + safetensors, diffusers names);
    ``vae/`` (``config.json`` + safetensors); ``text_encoder/`` (transformers ``UMT5EncoderModel``);
    ``tokenizer/``; ``scheduler/scheduler_config.json``.

``"original"`` (e.g. ``Wan-AI/Wan2.1-T2V-1.3B``; what the Wan repository's ``generate.py`` reads)
    ``config.json`` (``_class_name: "WanModel"``) + ``diffusion_pytorch_model.safetensors``
    (or ``diffusion_pytorch_model-0000N-of-0000M.safetensors`` + ``...safetensors.index.json``)
    with the ``WanModel`` names; ``Wan2.1_VAE.pth`` (a ``torch.save`` state dict of ``WanVAE_``);
    ``models_t5_umt5-xxl-enc-bf16.pth`` (the Wan repository's own T5 encoder names, bfloat16);
    ``google/umt5-xxl/`` (the tokenizer). No VAE, text-encoder or scheduler config: the Wan
    repository hard-codes them (``wan/modules/vae.py``, ``wan/modules/t5.py``,
    ``wan/text2video.py``), and so do we (:data:`~vidax.core.wan_vae.WAN21_VAE_ORIGINAL`,
    :data:`~vidax.encoders.t5.UMT5_XXL`; the sizes are read back from the tensor shapes, which
    for the released files gives exactly those). The image and Wan2.2 releases add or swap files:
    Wan2.1 I2V / FLF2V (``model_type`` ``i2v`` / ``flf2v``) add
    ``models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth`` (the CLIP image encoder, read by
    :func:`vidax.encoders.clip.load_clip_vision_wan_original`); Wan2.2 TI2V-5B (``ti2v``) has
    ``Wan2.2_VAE.pth`` instead of ``Wan2.1_VAE.pth`` and per-token timesteps; Wan2.2 A14B keeps its
    two experts in ``high_noise_model/`` and ``low_noise_model/``.

:func:`detect_layout` tells them apart by the files present (``model_index.json`` =>
diffusers; ``config.json`` naming ``WanModel``, or the original ``.pth`` files, => original),
and by the transformer's tensor names when ``config.json`` does not say.
:func:`resolve_checkpoint` returns a :class:`WanCheckpoint`: the path of every component
and the :class:`WanLayout` (config readers and key maps, one set per layout, as data) to read
them with; it names every missing file of the detected layout.

A later model family adds its layouts the same way: a ``LAYOUTS`` table of key maps and a
resolver naming the files.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap, identity_keymap
from vidax.checkpoint.writer import VIDAX_INDEX, VIDAX_WEIGHTS
from vidax.core.config_values import read_json
from vidax.encoders.t5 import (
    T5Config,
    t5_config_from_wan_original_shapes,
    t5_keymap,
    t5_keymap_wan_original,
    t5_specs,
)
from vidax.core import wan_vae
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.keymap import transformer_keymap_diffusers, transformer_keymap_original
from vidax.models.wan.transformer import transformer_specs

DIFFUSERS = "diffusers"
ORIGINAL = "original"
VIDAX = "vidax"

#: The parts (sub-folders) of a diffusers-layout Wan pipeline folder.
DIFFUSERS_PARTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")

#: File names of the original Wan2.1 T2V release (``wan/configs/wan_t2v_*.py``).
ORIGINAL_CONFIG = "config.json"
ORIGINAL_TRANSFORMER = "diffusion_pytorch_model.safetensors"
ORIGINAL_TRANSFORMER_INDEX = "diffusion_pytorch_model.safetensors.index.json"
ORIGINAL_VAE = "Wan2.1_VAE.pth"
#: The Wan2.2 VAE of the TI2V-5B release (``Wan-AI/Wan2.2-TI2V-5B``; 48 latent channels).
ORIGINAL_VAE_22 = "Wan2.2_VAE.pth"
ORIGINAL_T5 = "models_t5_umt5-xxl-enc-bf16.pth"
ORIGINAL_TOKENIZER = "google/umt5-xxl"
#: The CLIP of the Wan2.1 I2V / FLF2V releases (``wan/modules/clip.py``: ``XLMRobertaCLIP``; its
#: ViT-H/14 ``visual`` tower is the image encoder, the XLM-RoBERTa text tower is unused).
ORIGINAL_CLIP = "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth"

#: Flow shift the Wan repository samples T2V with when none is given (``generate.py``,
#: ``_validate_args``: ``sample_shift = 5.0`` for t2v); an explicit ``flow_shift`` / preset overrides it.
ORIGINAL_T2V_FLOW_SHIFT = 5.0

# Tensor names that only one transformer layout has (used when config.json does not say).
_ORIGINAL_MARK = ".self_attn.q.weight"
_DIFFUSERS_MARK = ".attn1.to_q.weight"


@dataclass(frozen=True)
class WanLayout:
    """How one layout is read: config parsers and key maps (data, one set per layout).

    Attributes:
      name: ``"diffusers"`` or ``"original"``.
      transformer_config: ``config.json`` dict -> :class:`WanTransformerConfig`.
      transformer_keymap, vae_keymap, text_encoder_keymap: config -> :class:`KeyMap`.
    """

    name: str
    transformer_config: Callable[[dict], WanTransformerConfig]
    transformer_keymap: Callable[[WanTransformerConfig], KeyMap]
    vae_keymap: Callable[[wan_vae.WanVAEConfig], KeyMap]
    text_encoder_keymap: Callable[[T5Config], KeyMap]


def _identity(specs_fn):
    return lambda cfg: identity_keymap(specs_fn(cfg))


LAYOUTS: dict[str, WanLayout] = {
    DIFFUSERS: WanLayout(
        DIFFUSERS, WanTransformerConfig.from_dict, transformer_keymap_diffusers, wan_vae.vae_keymap, t5_keymap
    ),
    ORIGINAL: WanLayout(
        ORIGINAL, WanTransformerConfig.from_original_dict, transformer_keymap_original, wan_vae.vae_keymap_original,
        t5_keymap_wan_original,
    ),
    # Written by `vidax convert`: our names and layout, so loading is a plain copy (no renaming or transposes).
    VIDAX: WanLayout(
        VIDAX, WanTransformerConfig.from_dict, _identity(transformer_specs), _identity(wan_vae.vae_specs),
        _identity(t5_specs),
    ),
}


def _reader(path: Path):
    from vidax.checkpoint.safetensors_io import CheckpointReader

    return CheckpointReader(path)


def _shapes(reader: Any) -> dict[str, tuple[int, ...]]:
    return {k: tuple(reader.shape(k)) for k in reader.keys()}


@dataclass(frozen=True)
class WanCheckpoint:
    """A resolved Wan2.1 T2V checkpoint folder: where each component is, and how to read it.

    Paths are absolute-or-as-given :class:`~pathlib.Path` s that exist (checked by
    :func:`resolve_checkpoint`). ``*_weights`` is what
    :class:`~vidax.checkpoint.safetensors_io.CheckpointReader` takes (a file, or a folder).
    ``*_config`` is ``None`` where the layout stores no config (the original release
    hard-codes it; see :meth:`vae_config` / :meth:`text_encoder_config`).

    Attributes:
      folder: the checkpoint folder.
      layout: ``"diffusers"`` or ``"original"``.
      transformer_config_path, transformer_weights, vae_weights, vae_config_path,
      text_encoder_weights, text_encoder_config_path, tokenizer, scheduler_config_path: paths.
      transformer_2_config_path, transformer_2_weights: the low-noise expert of a Wan2.2 A14B
        checkpoint (diffusers ``transformer_2/``, original ``low_noise_model/``), else None.
      image_encoder: the CLIP vision folder (diffusers ``image_encoder/``; Wan2.1 I2V / FLF2V), or the original
        release's CLIP file (:data:`ORIGINAL_CLIP`), else None.
      image_processor: the folder holding ``preprocessor_config.json`` (diffusers ``image_processor/``), else None.
      pipeline_config: ``model_index.json`` settings that change sampling: ``boundary_ratio`` (two
        experts), ``expand_timesteps`` (Wan2.2 TI2V per-token timesteps), ``_class_name``.
      source_layout: for a converted (``"vidax"``) folder, the layout it was converted from
        (``vidax_index.json``'s ``source_layout``), else None.
    """

    folder: Path
    layout: str
    transformer_config_path: Path
    transformer_weights: Path
    vae_weights: Path
    vae_config_path: Path | None
    text_encoder_weights: Path
    text_encoder_config_path: Path | None
    tokenizer: Path
    scheduler_config_path: Path | None
    transformer_2_config_path: Path | None = None
    transformer_2_weights: Path | None = None
    image_encoder: Path | None = None
    image_processor: Path | None = None
    pipeline_config: dict = field(default_factory=dict)
    source_layout: str | None = None

    @property
    def maps(self) -> WanLayout:
        """The config readers and key maps of this layout."""
        return LAYOUTS[self.layout]

    def transformer_config(self) -> WanTransformerConfig:
        """The transformer architecture from its ``config.json`` (diffusers or ``WanModel`` keys).

        Raises:
          CheckpointError: the file is not valid JSON. ValueError: an unsupported configuration.
        """
        return self._transformer_config(self.transformer_config_path, self.transformer_weights)

    def _transformer_config(self, config_path: Path, weights: Path) -> WanTransformerConfig:
        config = read_json(config_path)
        if self.layout == ORIGINAL:
            # Wan2.1 I2V and Wan2.2 I2V A14B share config keys; only Wan2.1's has the CLIP embedder img_emb.*
            # (its first LayerNorm gives the CLIP width; FLF2V's img_emb.emb_pos the token count).
            reader = _reader(weights)
            embedder = any(k.startswith("img_emb.") for k in reader.keys())
            extra = {}
            if "img_emb.proj.0.weight" in reader:
                extra["image_dim"] = reader.shape("img_emb.proj.0.weight")[0]
            cfg = WanTransformerConfig.from_original_dict(config, image_embedder=embedder, **extra)
            if "img_emb.emb_pos" in reader and cfg.pos_embed_seq_len != reader.shape("img_emb.emb_pos")[1]:
                cfg = dataclasses.replace(cfg, pos_embed_seq_len=reader.shape("img_emb.emb_pos")[1])
            return cfg
        return self.maps.transformer_config(config)

    def transformer_reader(self):
        """A :class:`~vidax.checkpoint.safetensors_io.CheckpointReader` over the transformer weights."""
        return _reader(self.transformer_weights)

    def transformer_2_config(self) -> WanTransformerConfig | None:
        """The low-noise expert's architecture (Wan2.2 A14B), or None for a one-transformer checkpoint."""
        if self.transformer_2_config_path is None:
            return None
        return self._transformer_config(self.transformer_2_config_path, self.transformer_2_weights)

    def transformer_2_reader(self):
        """A reader over the low-noise expert's weights (requires ``transformer_2_weights``)."""
        return _reader(self.transformer_2_weights)

    @property
    def boundary_ratio(self) -> float | None:
        """``model_index.json`` ``boundary_ratio`` (Wan2.2 A14B: 0.875 T2V, 0.9 I2V), or None."""
        v = self.pipeline_config.get("boundary_ratio")
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1):
            raise CheckpointError(f"{self.folder / 'model_index.json'}: boundary_ratio={v!r} must be a number between "
                                  "0 and 1 (0.875 for Wan2.2 T2V A14B, 0.9 for I2V), or null")
        return None if v is None else float(v)

    @property
    def expand_timesteps(self) -> bool:
        """``model_index.json`` ``expand_timesteps`` (Wan2.2 TI2V-5B: per-token timesteps)."""
        v = self.pipeline_config.get("expand_timesteps", False)
        if not isinstance(v, bool) and v is not None:  # "yes" or 1 are not taken for true
            raise CheckpointError(f"{self.folder / 'model_index.json'}: expand_timesteps={v!r} must be true or false")
        return bool(v)

    @property
    def schedule_default(self) -> str:
        """The sigma grid this checkpoint's own reference samples on: ``"original"`` (the Wan repository's
        ``FlowUniPCMultistepScheduler``) for the original release and folders converted from it,
        ``"diffusers"`` (diffusers' ``UniPCMultistepScheduler``) otherwise."""
        return ORIGINAL if ORIGINAL in (self.layout, self.source_layout) else DIFFUSERS

    def vae_reader(self):
        """A reader over the VAE weights (safetensors folder, or ``Wan2.1_VAE.pth`` / ``Wan2.2_VAE.pth``)."""
        return _reader(self.vae_weights)

    def text_encoder_reader(self):
        """A reader over the text-encoder weights (safetensors folder, or the Wan T5 ``.pth``)."""
        return _reader(self.text_encoder_weights)

    def vae_config(self, reader: Any = None) -> wan_vae.WanVAEConfig:
        """The VAE configuration: ``vae/config.json`` (diffusers), or read from the tensor shapes (original).

        Args:
          reader: the VAE reader, if already open (original layout only; opened otherwise).
        """
        if self.vae_config_path is not None:
            return wan_vae.WanVAEConfig.from_dict(read_json(self.vae_config_path))
        return wan_vae.vae_config_from_original_shapes(_shapes(reader if reader is not None else self.vae_reader()))

    def text_encoder_config(self, reader: Any = None) -> T5Config:
        """The text encoder: ``text_encoder/config.json`` (diffusers), or read from the tensor shapes (original).

        Args:
          reader: the text-encoder reader, if already open (original layout only).
        """
        if self.text_encoder_config_path is not None:
            return T5Config.from_dict(read_json(self.text_encoder_config_path))
        return t5_config_from_wan_original_shapes(_shapes(reader if reader is not None else self.text_encoder_reader()))

    def describe(self, tcfg: WanTransformerConfig | None = None) -> str:
        """The model this checkpoint holds, in words (e.g. ``"Wan2.2 TI2V-5B text/image-to-video"``)."""
        tcfg = tcfg or self.transformer_config()
        if self.transformer_2_weights is not None:
            task = "image-to-video" if tcfg.in_channels != tcfg.out_channels else "text-to-video"
            return f"Wan2.2 A14B {task} (two experts, boundary {self.boundary_ratio})"
        if self.expand_timesteps:
            return "Wan2.2 TI2V-5B text/image-to-video"
        if tcfg.pos_embed_seq_len is not None:
            return "Wan2.1 first-last-frame-to-video"
        if tcfg.in_channels != tcfg.out_channels:
            return "Wan2.1 image-to-video"
        return "Wan2.1 text-to-video"

    def image_encoder_source(self):
        """``(reader, keymap, CLIPVisionConfig)`` of the image encoder (requires ``image_encoder``).

        Diffusers ``image_encoder/`` and the original CLIP file through
        :func:`vidax.encoders.clip.image_encoder_source`; the vidax layout's ``image_encoder/`` (our
        names, ``config.json`` in transformers' keys) with the identity map.
        """
        from vidax.encoders.clip import (
            CLIPVisionConfig,
            clip_specs,
            image_encoder_source,
        )

        if self.layout == VIDAX:
            cfg = CLIPVisionConfig.from_dict(read_json(self.image_encoder / "config.json"))
            return _reader(self.image_encoder / VIDAX_WEIGHTS), identity_keymap(clip_specs(cfg)), cfg
        return image_encoder_source(self.image_encoder)

    def scheduler_config(self) -> dict | None:
        """``scheduler/scheduler_config.json`` (diffusers), or ``None``: the original layout has none
        (the pipeline then uses the Wan repository's UniPC settings with :data:`ORIGINAL_T2V_FLOW_SHIFT`)."""
        return None if self.scheduler_config_path is None else read_json(self.scheduler_config_path)


def _transformer_key_layout(folder: Path) -> str | None:
    """``"original"`` / ``"diffusers"`` from the transformer's tensor names in ``folder``, or ``None``."""
    weights = _original_transformer_weights(folder)
    if weights is None:
        return None
    try:
        keys = _reader(weights).keys()
    except CheckpointError:
        return None
    if any(k.endswith(_ORIGINAL_MARK) for k in keys):
        return ORIGINAL
    if any(k.endswith(_DIFFUSERS_MARK) for k in keys):
        return DIFFUSERS
    return None


def _original_transformer_weights(folder: Path) -> Path | None:
    if (folder / ORIGINAL_TRANSFORMER_INDEX).is_file():
        return folder
    if (folder / ORIGINAL_TRANSFORMER).is_file():
        return folder / ORIGINAL_TRANSFORMER
    return None


_EXPECTED = (
    "expected either a diffusers-layout Wan folder (model_index.json with transformer/, vae/, text_encoder/, "
    "tokenizer/, scheduler/; e.g. Wan-AI/Wan2.1-T2V-1.3B-Diffusers) or an original-layout Wan2.1 release folder "
    f"({ORIGINAL_CONFIG} of a WanModel, {ORIGINAL_TRANSFORMER} (or its sharded index), {ORIGINAL_VAE}, "
    f"{ORIGINAL_T5}, {ORIGINAL_TOKENIZER}/; e.g. Wan-AI/Wan2.1-T2V-1.3B)"
)


def detect_layout(folder: str | os.PathLike) -> str:
    """Which layout a Wan checkpoint folder is in, from the files present (no tensor data is read).

    Rules, in order: ``model_index.json`` => ``"diffusers"``; a ``config.json`` whose
    ``_class_name`` is ``WanModel`` => ``"original"``; a ``config.json`` without a class name
    => decided by the transformer tensor names (``blocks.N.self_attn.q.weight`` original,
    ``blocks.N.attn1.to_q.weight`` diffusers) or, failing that, by the presence of the
    original ``.pth`` files / tokenizer folder; diffusers part folders without
    ``model_index.json`` => ``"diffusers"`` (resolving then names the missing index);
    original ``.pth`` files without ``config.json`` => ``"original"`` (likewise).

    Returns:
      ``"diffusers"`` or ``"original"``.

    Raises:
      CheckpointError: the folder does not exist; it is a single diffusers component folder
        (``WanTransformer3DModel`` config: pass its parent); or it matches neither layout
        (the message lists what each layout needs).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    if (folder / VIDAX_INDEX).is_file():
        return VIDAX
    if (folder / "model_index.json").is_file():
        return DIFFUSERS
    original_files = [n for n in (ORIGINAL_VAE, ORIGINAL_VAE_22, ORIGINAL_T5, ORIGINAL_TOKENIZER) if (folder / n).exists()]
    config_path = folder / ORIGINAL_CONFIG
    if config_path.is_file():
        config = read_json(config_path)
        class_name = config.get("_class_name")
        if class_name == "WanModel":
            return ORIGINAL
        by_keys = _transformer_key_layout(folder) if class_name is None else None
        if class_name == "WanTransformer3DModel" or by_keys == DIFFUSERS:
            raise CheckpointError(
                f"{folder}: this is a single diffusers transformer folder (WanTransformer3DModel); pass the pipeline "
                "folder that holds it (with model_index.json)"
            )
        if by_keys == ORIGINAL or (class_name is None and original_files):
            return ORIGINAL
        raise CheckpointError(f"{folder}: {config_path.name} describes {class_name or 'an unknown model'}; {_EXPECTED}")
    if any((folder / p).is_dir() for p in DIFFUSERS_PARTS):
        return DIFFUSERS
    if original_files:
        return ORIGINAL
    raise CheckpointError(f"{folder}: not a Wan checkpoint folder; {_EXPECTED}")


def _resolve_diffusers(folder: Path) -> WanCheckpoint:
    # Messages as check_checkpoint_dir has always given them for this layout.
    if not (folder / "model_index.json").is_file():
        raise CheckpointError(f"{folder}: no model_index.json; pass a diffusers-layout Wan checkpoint folder")
    missing = [p for p in DIFFUSERS_PARTS if not (folder / p).is_dir()]
    if missing:
        raise CheckpointError(f"{folder}: checkpoint is missing its {', '.join(missing)} folder(s); re-download them")
    for part in ("transformer", "vae", "text_encoder"):
        if not (folder / part / "config.json").is_file():
            raise CheckpointError(f"{folder / part}: config.json is missing")
    if not (folder / "scheduler" / "scheduler_config.json").is_file():
        raise CheckpointError(f"{folder / 'scheduler'}: scheduler_config.json is missing")
    index = read_json(folder / "model_index.json")
    name = index.get("_class_name")
    if not (isinstance(name, str) and name.startswith("Wan")):
        raise CheckpointError(
            f"{folder / 'model_index.json'}: " + (f"describes {name!r}, which vidax does not run" if name else
                                                  "has no _class_name, so the pipeline it holds is unknown")
            + "; vidax runs diffusers folders of Wan, CogVideoX and LTX-Video pipelines (not LTX's latent upsampler)")
    optional = _diffusers_optional_parts(folder, index)
    return WanCheckpoint(
        folder=folder, layout=DIFFUSERS,
        transformer_config_path=folder / "transformer" / "config.json", transformer_weights=folder / "transformer",
        vae_weights=folder / "vae", vae_config_path=folder / "vae" / "config.json",
        text_encoder_weights=folder / "text_encoder", text_encoder_config_path=folder / "text_encoder" / "config.json",
        tokenizer=folder / "tokenizer", scheduler_config_path=folder / "scheduler" / "scheduler_config.json",
        **optional,
    )


def _named_in_index(index: dict, part: str) -> bool:
    entry = index.get(part)
    return isinstance(entry, (list, tuple)) and len(entry) == 2 and entry[1] is not None


def _diffusers_optional_parts(folder: Path, index: dict) -> dict:
    """``transformer_2/``, ``image_encoder/``, ``image_processor/`` and the sampling settings of ``model_index.json``.

    A part ``model_index.json`` names (``["diffusers", "WanTransformer3DModel"]``, not ``[null, null]``)
    must be present; one it does not name is not loaded even if its folder exists.

    Raises:
      CheckpointError: a named part's folder or ``config.json`` is missing; ``boundary_ratio`` without
        ``transformer_2`` or the reverse.
    """
    out: dict = {"pipeline_config": {k: index[k] for k in ("boundary_ratio", "expand_timesteps", "_class_name")
                                     if k in index}}
    missing = []
    if _named_in_index(index, "transformer_2"):
        if not (folder / "transformer_2" / "config.json").is_file():
            missing.append("transformer_2/config.json")
        out["transformer_2_config_path"] = folder / "transformer_2" / "config.json"
        out["transformer_2_weights"] = folder / "transformer_2"
    if _named_in_index(index, "image_encoder"):
        if not (folder / "image_encoder" / "config.json").is_file():
            missing.append("image_encoder/config.json")
        out["image_encoder"] = folder / "image_encoder"
    if _named_in_index(index, "image_processor"):
        if not (folder / "image_processor" / "preprocessor_config.json").is_file():
            missing.append("image_processor/preprocessor_config.json")
        out["image_processor"] = folder / "image_processor"
    if missing:
        raise CheckpointError(f"{folder}: model_index.json names parts that are missing: {', '.join(missing)}; "
                              "re-download them")
    two = "transformer_2_weights" in out
    if two != (index.get("boundary_ratio") is not None):
        raise CheckpointError(
            f"{folder}: model_index.json has boundary_ratio={index.get('boundary_ratio')} but "
            f"{'a' if two else 'no'} transformer_2; a two-expert (Wan2.2 A14B) checkpoint needs both"
        )
    return out


#: The two expert folders of an original Wan2.2 A14B release, and the boundary its configs hard-code
#: per model type (Wan2.2 ``wan/configs/wan_t2v_A14B.py`` 0.875, ``wan_i2v_A14B.py`` 0.900).
ORIGINAL_HIGH_NOISE, ORIGINAL_LOW_NOISE = "high_noise_model", "low_noise_model"
ORIGINAL_A14B_BOUNDARY = {"t2v": 0.875, "i2v": 0.9}
#: Flow shift of the Wan2.2 A14B ``generate.py`` defaults (``sample_shift``): T2V 12.0, I2V 5.0.
ORIGINAL_A14B_FLOW_SHIFT = {"t2v": 12.0, "i2v": 5.0}


def _resolve_original_experts(folder: Path) -> WanCheckpoint:
    """An original Wan2.2 A14B release: ``high_noise_model/`` and ``low_noise_model/`` (each ``config.json`` +
    ``diffusion_pytorch_model*.safetensors``), ``Wan2.1_VAE.pth``, the T5 ``.pth`` and its tokenizer."""
    missing, weights = [], {}
    for name in (ORIGINAL_HIGH_NOISE, ORIGINAL_LOW_NOISE):
        if not (folder / name / ORIGINAL_CONFIG).is_file():
            missing.append(f"{name}/{ORIGINAL_CONFIG}")
        weights[name] = _original_transformer_weights(folder / name)
        if weights[name] is None:
            missing.append(f"{name}/{ORIGINAL_TRANSFORMER} (or its sharded index)")
    for name in (ORIGINAL_VAE, ORIGINAL_T5):
        if not (folder / name).is_file():
            missing.append(name)
    if not (folder / ORIGINAL_TOKENIZER / "tokenizer.json").is_file():
        missing.append(f"{ORIGINAL_TOKENIZER}/tokenizer.json")
    if missing:
        raise CheckpointError(f"{folder}: original-layout Wan2.2 A14B folder is missing {', '.join(missing)}; "
                              "re-download the complete release (e.g. Wan-AI/Wan2.2-T2V-A14B)")
    model_type = read_json(folder / ORIGINAL_HIGH_NOISE / ORIGINAL_CONFIG).get("model_type", "t2v")
    if model_type not in ORIGINAL_A14B_BOUNDARY:
        raise CheckpointError(f"{folder}: two-expert release of model_type {model_type!r}; expected 't2v' or 'i2v'")
    return WanCheckpoint(
        folder=folder, layout=ORIGINAL,
        transformer_config_path=folder / ORIGINAL_HIGH_NOISE / ORIGINAL_CONFIG,
        transformer_weights=weights[ORIGINAL_HIGH_NOISE],
        vae_weights=folder / ORIGINAL_VAE, vae_config_path=None,
        text_encoder_weights=folder / ORIGINAL_T5, text_encoder_config_path=None,
        tokenizer=folder / ORIGINAL_TOKENIZER, scheduler_config_path=None,
        transformer_2_config_path=folder / ORIGINAL_LOW_NOISE / ORIGINAL_CONFIG,
        transformer_2_weights=weights[ORIGINAL_LOW_NOISE],
        pipeline_config={"boundary_ratio": ORIGINAL_A14B_BOUNDARY[model_type],
                         "original_flow_shift": ORIGINAL_A14B_FLOW_SHIFT[model_type]},
    )


def _resolve_original(folder: Path) -> WanCheckpoint:
    """An original single-transformer release: Wan2.1 T2V / I2V / FLF2V, or Wan2.2 TI2V-5B.

    ``model_type`` in ``config.json`` says which files belong: ``ti2v`` takes ``Wan2.2_VAE.pth`` and
    per-token timesteps; ``i2v`` / ``flf2v`` take the CLIP file (``models_clip_...pth``) when the
    transformer has a CLIP embedder; everything else ``Wan2.1_VAE.pth``.
    """
    if (folder / ORIGINAL_HIGH_NOISE).is_dir() and not (folder / ORIGINAL_CONFIG).is_file():
        return _resolve_original_experts(folder)
    missing = []
    model_type = "t2v"
    if not (folder / ORIGINAL_CONFIG).is_file():
        missing.append(ORIGINAL_CONFIG)
    else:
        model_type = read_json(folder / ORIGINAL_CONFIG).get("model_type", "t2v")
    weights = _original_transformer_weights(folder)
    if weights is None:
        missing.append(f"{ORIGINAL_TRANSFORMER} (or {ORIGINAL_TRANSFORMER_INDEX} with its shards)")
    vae = ORIGINAL_VAE_22 if model_type == "ti2v" else ORIGINAL_VAE
    for name in (vae, ORIGINAL_T5):
        if not (folder / name).is_file():
            missing.append(name)
    if not (folder / ORIGINAL_TOKENIZER / "tokenizer.json").is_file():
        missing.append(f"{ORIGINAL_TOKENIZER}/tokenizer.json")
    clip = None
    if model_type in ("i2v", "flf2v") and weights is not None and any(
            k.startswith("img_emb.") for k in _reader(weights).keys()):
        clip = folder / ORIGINAL_CLIP
        if not clip.is_file():
            missing.append(f"{ORIGINAL_CLIP} (the image encoder)")
    if missing:
        example = {"ti2v": "Wan-AI/Wan2.2-TI2V-5B", "i2v": "Wan-AI/Wan2.1-I2V-14B-480P",
                   "flf2v": "Wan-AI/Wan2.1-FLF2V-14B-720P"}.get(model_type, "Wan-AI/Wan2.1-T2V-1.3B")
        raise CheckpointError(
            f"{folder}: original-layout Wan folder is missing {', '.join(missing)}; re-download "
            f"the complete release (e.g. {example})"
        )
    return WanCheckpoint(
        folder=folder, layout=ORIGINAL,
        transformer_config_path=folder / ORIGINAL_CONFIG, transformer_weights=weights,
        vae_weights=folder / vae, vae_config_path=None,
        text_encoder_weights=folder / ORIGINAL_T5, text_encoder_config_path=None,
        tokenizer=folder / ORIGINAL_TOKENIZER, scheduler_config_path=None,
        image_encoder=clip,
        pipeline_config={"expand_timesteps": True} if model_type == "ti2v" else {},
    )


#: Optional parts of a converted (vidax-layout) Wan folder and the WanCheckpoint fields they fill.
_VIDAX_OPTIONAL = ("transformer_2", "image_encoder", "image_processor")


def _resolve_vidax(folder: Path) -> WanCheckpoint:
    index = read_json(folder / VIDAX_INDEX)
    if index.get("format") != "vidax" or index.get("family") != "wan":
        raise CheckpointError(f"{folder / VIDAX_INDEX}: not a vidax-converted Wan checkpoint (format/family)")
    parts = [p for p in _VIDAX_OPTIONAL if p in index.get("parts", ())]
    weighted = ["transformer", "vae", "text_encoder"] + [p for p in parts if p != "image_processor"]
    missing = [f"{part}/{name}" for part in weighted for name in ("config.json", VIDAX_WEIGHTS)
               if not (folder / part / name).is_file()]
    missing += [p for p in ("tokenizer/tokenizer.json", "scheduler/scheduler_config.json") if not (folder / p).is_file()]
    if "image_processor" in parts and not (folder / "image_processor" / "preprocessor_config.json").is_file():
        missing.append("image_processor/preprocessor_config.json")
    if missing:
        raise CheckpointError(f"{folder}: converted Wan folder is missing {', '.join(missing)}; run `vidax convert` again")
    optional = {}
    if "transformer_2" in parts:
        optional.update(transformer_2_config_path=folder / "transformer_2" / "config.json",
                        transformer_2_weights=folder / "transformer_2" / VIDAX_WEIGHTS)
    if "image_encoder" in parts:
        optional["image_encoder"] = folder / "image_encoder"
    if "image_processor" in parts:
        optional["image_processor"] = folder / "image_processor"
    return WanCheckpoint(
        **optional, pipeline_config=dict(index.get("pipeline", {})), source_layout=index.get("source_layout"),
        folder=folder, layout=VIDAX,
        transformer_config_path=folder / "transformer" / "config.json",
        transformer_weights=folder / "transformer" / VIDAX_WEIGHTS,
        vae_weights=folder / "vae" / VIDAX_WEIGHTS, vae_config_path=folder / "vae" / "config.json",
        text_encoder_weights=folder / "text_encoder" / VIDAX_WEIGHTS,
        text_encoder_config_path=folder / "text_encoder" / "config.json",
        tokenizer=folder / "tokenizer", scheduler_config_path=folder / "scheduler" / "scheduler_config.json",
    )


def resolve_checkpoint(folder: str | os.PathLike) -> WanCheckpoint:
    """Detect the layout of ``folder`` and check that every component file is there.

    Only file existence (and ``config.json`` when detection needs it) is checked; weights are
    opened when loaded.

    Returns:
      the :class:`WanCheckpoint`.

    Raises:
      CheckpointError: see :func:`detect_layout`; or a part of the detected layout is missing,
        every missing part named (e.g. ``original-layout Wan folder is missing Wan2.1_VAE.pth``,
        ``checkpoint is missing its text_encoder folder(s)``).
    """
    folder = Path(folder)
    layout = detect_layout(folder)
    return {DIFFUSERS: _resolve_diffusers, ORIGINAL: _resolve_original, VIDAX: _resolve_vidax}[layout](folder)
