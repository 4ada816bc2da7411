"""Checkpoint folders of the T5-conditioned families (CogVideoX, LTX-Video): resolution, inspection, conversion.

Both publish diffusers pipeline folders of the same shape::

    model_index.json            _class_name: one of the family's pipeline classes
    transformer/                config.json + diffusion_pytorch_model*.safetensors
    vae/                        config.json + diffusion_pytorch_model*.safetensors
    text_encoder/               transformers T5EncoderModel (google t5-v1_1-xxl)
    tokenizer/                  T5 tokenizer (vidax reads tokenizer.json or spiece.model)
    scheduler/                  scheduler_config.json

and ``vidax convert`` writes a second layout, ``"vidax"``: ``vidax_index.json`` (``format: vidax``, ``family``,
``pipeline_class``), each component's ``config.json`` (diffusers keys) and ``params.safetensors`` (our parameter
names and layout, cast by the dtype policy), loaded with the identity key maps: a plain copy. The tokenizer and
scheduler folders are copied.

What differs per family (configurations, key maps, parameter declarations, names) is a :class:`T5Family`;
:func:`resolve`, :func:`inspect_lines` and :func:`convert` are written once over it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vidax.checkpoint.demo import DEMO_MARKER, TRANSFORMERS_VERSION, demo_marker_text, random_state_dict
from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap, identity_keymap
from vidax.checkpoint.writer import VIDAX_INDEX, VIDAX_WEIGHTS, assembled_folder, write_component, write_json
from vidax.core.config_values import read_json
from vidax.encoders.t5 import T5Config, t5_keymap, t5_specs

PARTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")
DIFFUSERS, VIDAX = "diffusers", "vidax"


@dataclass(frozen=True)
class T5Family:
    """What a T5-conditioned family's folders need that the others' do not.

    Attributes:
      family: the ``vidax_index.json`` family name (``"cogvideox"``, ``"ltx"``).
      display: the name in messages (``"CogVideoX"``).
      pipeline_classes: ``model_index.json`` classes of the family; the first is the default.
      example: a published folder, for messages.
      transformer_config, vae_config: ``config.json`` dict -> configuration.
      transformer_keymap, vae_keymap: configuration -> diffusers key map.
      transformer_specs, vae_specs: configuration -> spec tree.
    """

    family: str
    display: str
    pipeline_classes: tuple[str, ...]
    example: str
    transformer_config: Callable[[dict], Any]
    vae_config: Callable[[dict], Any]
    transformer_keymap: Callable[[Any], KeyMap]
    vae_keymap: Callable[[Any], KeyMap]
    transformer_specs: Callable[[Any], dict]
    vae_specs: Callable[[Any], dict]


@dataclass(frozen=True)
class T5Checkpoint:
    """A resolved folder of a :class:`T5Family` (every path exists).

    Attributes:
      folder: the checkpoint folder.
      pipeline_class: ``model_index.json``'s ``_class_name`` (the vidax layout keeps it in its index).
      layout: ``"diffusers"`` or ``"vidax"`` (converted).
      family: the family.
    """

    folder: Path
    pipeline_class: str
    layout: str
    family: T5Family

    def part(self, name: str) -> Path:
        """The folder of component ``name`` (``transformer``, ``vae``, ...)."""
        return self.folder / name

    def transformer_config(self):
        """The transformer's configuration (``transformer/config.json``; ValueError on unsupported settings)."""
        return self.family.transformer_config(read_json(self.folder / "transformer" / "config.json"))

    def vae_config(self):
        """The VAE's configuration (``vae/config.json``; ValueError on unsupported settings)."""
        return self.family.vae_config(read_json(self.folder / "vae" / "config.json"))

    def text_encoder_config(self) -> T5Config:
        """The T5 encoder's configuration (``text_encoder/config.json``)."""
        return T5Config.from_dict(read_json(self.folder / "text_encoder" / "config.json"))

    def scheduler_config(self) -> dict:
        """``scheduler/scheduler_config.json`` as a dict."""
        return read_json(self.folder / "scheduler" / "scheduler_config.json")

    def reader(self, part: str):
        """A :class:`~vidax.checkpoint.safetensors_io.CheckpointReader` over one component's weights."""
        from vidax.checkpoint.safetensors_io import CheckpointReader

        return CheckpointReader(self.folder / part / VIDAX_WEIGHTS if self.layout == VIDAX else self.folder / part)

    def transformer_keymap(self, cfg) -> KeyMap:
        """The transformer's key map in this folder's layout (diffusers, or the identity for vidax)."""
        f = self.family
        return identity_keymap(f.transformer_specs(cfg)) if self.layout == VIDAX else f.transformer_keymap(cfg)

    def vae_keymap(self, cfg) -> KeyMap:
        """The VAE's key map in this folder's layout."""
        f = self.family
        return identity_keymap(f.vae_specs(cfg)) if self.layout == VIDAX else f.vae_keymap(cfg)

    def text_encoder_keymap(self, cfg: T5Config, keys=None) -> KeyMap:
        """The T5 encoder's key map in this folder's layout (``keys``: the checkpoint's, for its shared embedding)."""
        return identity_keymap(t5_specs(cfg)) if self.layout == VIDAX else t5_keymap(cfg, keys)

    def load_transformer(self, cfg, dtype: Any, shardings=None) -> dict:
        """The transformer's parameters (:func:`vidax.checkpoint.loader.load_params`; ``shardings`` as there).

        Raises:
          CheckpointError: weights that do not match ``cfg`` (every mismatch listed).
        """
        from vidax.checkpoint.loader import load_params

        return load_params(self.reader("transformer"), self.transformer_keymap(cfg), self.family.transformer_specs(cfg),
                           np.dtype(dtype), source=str(self.part("transformer")), shardings=shardings)

    def load_vae(self, cfg, dtype: Any, parts: tuple[str, ...] | None = None) -> dict:
        """The VAE's parameters, or only its top-level ``parts`` (e.g. the decoder side).

        Raises:
          CheckpointError: weights that do not match ``cfg``.
        """
        from vidax.checkpoint.loader import load_params

        return load_params(self.reader("vae"), self.vae_keymap(cfg), self.family.vae_specs(cfg), np.dtype(dtype),
                           source=str(self.part("vae")), parts=parts)

    def load_text_encoder(self, cfg: T5Config, dtype: Any) -> dict:
        """The T5 encoder's parameters.

        Raises:
          CheckpointError: weights that do not match ``cfg``.
        """
        from vidax.checkpoint.loader import load_params

        reader = self.reader("text_encoder")
        return load_params(reader, self.text_encoder_keymap(cfg, reader.keys()), t5_specs(cfg), np.dtype(dtype),
                           source=str(self.part("text_encoder")))

    def load_components(self, tcfg, vcfg, ecfg: T5Config, *, dtype: Any, vae_dtype: Any, text_encoder_dtype: Any,
                        plan, mesh, rules, decoder_parts: tuple[str, ...], progress) -> tuple:
        """Everything a pipeline loads, shown as one ``loading`` stage: the transformer placed once (resident on
        ``mesh``, or its blocks chunked by ``plan``: :func:`vidax.core.offload.split_blocks`), the VAE's decoder side,
        the T5 encoder and the tokenizer; all ready when it returns.

        Returns:
          ``(transformer params, chunked blocks or None, VAE params, T5 params, tokenizer)``.

        Raises:
          CheckpointError: weights that do not match their configuration.
        """
        import jax

        from vidax.core.offload import block_placement, split_blocks
        from vidax.core.progress import as_progress
        from vidax.encoders.tokenizer import Tokenizer

        with as_progress(progress).stage("loading", total=3, unit="part") as stage:
            tparams = self.load_transformer(tcfg, dtype, shardings=block_placement(plan, mesh, rules))
            tparams, chunks = split_blocks(tparams, self.family.transformer_specs(tcfg), plan, mesh, rules)
            stage.update()
            vparams = self.load_vae(vcfg, vae_dtype, decoder_parts)
            stage.update()
            eparams = self.load_text_encoder(ecfg, text_encoder_dtype)
            tokenizer = Tokenizer.from_folder(self.part("tokenizer"))
            jax.block_until_ready((tparams, vparams, eparams, None if chunks is None else chunks.chunks))
            stage.update()
        return tparams, chunks, vparams, eparams, tokenizer


def resolve(folder: str | os.PathLike, family: T5Family) -> T5Checkpoint:
    """Check a ``family`` folder (diffusers or vidax layout) and return where everything is.

    Raises:
      CheckpointError: the folder is missing; it has no ``model_index.json`` or one for another pipeline;
        parts, ``config.json`` files or ``scheduler_config.json`` are missing (all named); a ``vidax_index.json``
        of another family or incomplete converted folder.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    if (folder / VIDAX_INDEX).is_file():
        return _resolve_vidax(folder, family)
    index = folder / "model_index.json"
    if not index.is_file():
        if (folder / "config.json").is_file():
            raise CheckpointError(f"{folder}: this is a single component folder; pass the pipeline folder that holds "
                                  "it (with model_index.json)")
        raise CheckpointError(f"{folder}: no model_index.json; pass a diffusers-layout {family.display} checkpoint "
                              f"folder (e.g. {family.example})")
    name = read_json(index).get("_class_name")
    if name not in family.pipeline_classes:
        raise CheckpointError(f"{folder}: model_index.json describes {name!r}, not a {family.display} pipeline "
                              f"({', '.join(family.pipeline_classes)})")
    missing = [p for p in PARTS if not (folder / p).is_dir()]
    if missing:
        raise CheckpointError(f"{folder}: checkpoint is missing its {', '.join(missing)} folder(s); re-download them")
    absent = [str(folder / p / "config.json") for p in ("transformer", "vae", "text_encoder")
              if not (folder / p / "config.json").is_file()]
    if not (folder / "scheduler" / "scheduler_config.json").is_file():
        absent.append(str(folder / "scheduler" / "scheduler_config.json"))
    if absent:
        raise CheckpointError(f"{folder}: missing {', '.join(absent)}")
    return T5Checkpoint(folder=folder, pipeline_class=name, layout=DIFFUSERS, family=family)


def _resolve_vidax(folder: Path, family: T5Family) -> T5Checkpoint:
    index = read_json(folder / VIDAX_INDEX)
    if index.get("format") != "vidax" or index.get("family") != family.family:
        raise CheckpointError(f"{folder / VIDAX_INDEX}: not a vidax-converted {family.display} checkpoint "
                              "(format/family)")
    missing = [f"{part}/{name}" for part in ("transformer", "vae", "text_encoder")
               for name in ("config.json", VIDAX_WEIGHTS) if not (folder / part / name).is_file()]
    missing += [p for p in ("tokenizer", "scheduler/scheduler_config.json") if not (folder / p).exists()]
    if missing:
        raise CheckpointError(f"{folder}: converted {family.display} folder is missing {', '.join(missing)}; "
                              "run `vidax convert` again")
    return T5Checkpoint(folder=folder, pipeline_class=index.get("pipeline_class", family.pipeline_classes[0]),
                        layout=VIDAX, family=family)


def is_family_folder(folder: str | os.PathLike, family: T5Family) -> bool:
    """Whether ``folder`` holds a ``family`` checkpoint (``model_index.json`` naming one of its pipelines, or a
    vidax-converted one of that family); reads only those index files."""
    folder = Path(folder)
    try:
        if (folder / VIDAX_INDEX).is_file():
            return read_json(folder / VIDAX_INDEX).get("family") == family.family
        if (folder / "model_index.json").is_file():
            return read_json(folder / "model_index.json").get("_class_name") in family.pipeline_classes
    except CheckpointError:
        return False
    return False


def inspect_lines(ckpt: T5Checkpoint, summary: str) -> list[str]:
    """``vidax inspect`` of a resolved folder, reading headers only.

    Args:
      summary: the family's one-line description of the transformer (after ``"  transformer: "``).

    Returns:
      report lines: the pipeline class and layout, the transformer summary, and per component its tensors, the
      keys our maps do not know and whether the maps fill the model exactly.
    """
    from vidax.checkpoint.inspect import checked, component_lines, scheduler_lines, tokenizer_lines

    f = ckpt.family
    lines = [f"{ckpt.folder}: {f.display} {ckpt.pipeline_class}, {ckpt.layout} layout", f"  transformer: {summary}"]

    def transformer():
        tcfg = ckpt.transformer_config()
        return component_lines("transformer", ckpt.reader("transformer"), ckpt.transformer_keymap(tcfg),
                               f.transformer_specs(tcfg), str(ckpt.part("transformer")))

    def vae():
        vcfg = ckpt.vae_config()
        return component_lines("vae", ckpt.reader("vae"), ckpt.vae_keymap(vcfg), f.vae_specs(vcfg),
                               str(ckpt.part("vae")))

    def text_encoder():
        ecfg = ckpt.text_encoder_config()
        ereader = ckpt.reader("text_encoder")
        return component_lines("text_encoder", ereader, ckpt.text_encoder_keymap(ecfg, ereader.keys()), t5_specs(ecfg),
                               str(ckpt.part("text_encoder")))

    lines += checked("transformer", transformer) + checked("vae", vae) + checked("text_encoder", text_encoder)
    lines += tokenizer_lines(ckpt.part("tokenizer"))
    lines += scheduler_lines(ckpt.scheduler_config(), ckpt.part("scheduler") / "scheduler_config.json")
    return lines


def convert(ckpt: T5Checkpoint, dst: str | os.PathLike, *, dtype: Any = "bfloat16", text_encoder_dtype: Any = "float32",
            vae_dtype: Any = "float32") -> dict:
    """Translate a resolved folder into the vidax layout at ``dst`` (see the module docstring).

    Loading the result gives exactly the parameters loading the source gives (the transformer cast to ``dtype`` on
    the way, its fp32-pinned leaves kept fp32).

    Args:
      dst: the output folder; must not exist. Assembled under a temporary name beside it and renamed when complete.
      dtype, text_encoder_dtype, vae_dtype: component dtypes (the pipelines' defaults: bf16 transformer, fp32 others).

    Returns:
      a summary: family, pipeline class, source layout, dtypes, bytes written per component, seconds.

    Raises:
      CheckpointError: weights that do not match their configuration. FileExistsError: ``dst`` exists.
    """
    t0 = time.perf_counter()
    if Path(dst).exists():
        raise FileExistsError(f"{dst} exists; choose a new output folder")
    f = ckpt.family
    with assembled_folder(dst) as tmp:
        tcfg, vcfg, ecfg = ckpt.transformer_config(), ckpt.vae_config(), ckpt.text_encoder_config()
        configs = {p: json.loads((ckpt.part(p) / "config.json").read_text())
                   for p in ("transformer", "vae", "text_encoder")}
        ereader = ckpt.reader("text_encoder")
        sizes = {
            "transformer": write_component(tmp / "transformer", ckpt.reader("transformer"),
                                           ckpt.transformer_keymap(tcfg), f.transformer_specs(tcfg), dtype,
                                           configs["transformer"], str(ckpt.part("transformer"))),
            "vae": write_component(tmp / "vae", ckpt.reader("vae"), ckpt.vae_keymap(vcfg), f.vae_specs(vcfg), vae_dtype,
                                   configs["vae"], str(ckpt.part("vae"))),
            "text_encoder": write_component(tmp / "text_encoder", ereader,
                                            ckpt.text_encoder_keymap(ecfg, ereader.keys()), t5_specs(ecfg),
                                            text_encoder_dtype, configs["text_encoder"],
                                            str(ckpt.part("text_encoder"))),
        }
        shutil.copytree(ckpt.part("tokenizer"), tmp / "tokenizer")
        shutil.copytree(ckpt.part("scheduler"), tmp / "scheduler")
        summary = {
            "format": "vidax", "version": 1, "family": f.family, "pipeline_class": ckpt.pipeline_class,
            "model": f"{f.display} ({ckpt.pipeline_class})", "source": str(ckpt.folder.resolve()),
            "source_layout": ckpt.layout,
            "dtypes": {"transformer": str(np.dtype(dtype)), "vae": str(np.dtype(vae_dtype)),
                       "text_encoder": str(np.dtype(text_encoder_dtype))},
            "bytes": sizes,
        }
        write_json(tmp / VIDAX_INDEX, summary)
    summary["seconds"] = time.perf_counter() - t0
    return summary


def demo_text_encoder_config(vocab_size: int, **overrides) -> dict:
    """A tiny transformers ``T5EncoderModel`` config.json (T5 v1.1: gated GELU, shared relative bias), the demo
    checkpoints' text encoder."""
    cfg = {
        "architectures": ["T5EncoderModel"], "classifier_dropout": 0.0, "d_ff": 64, "d_kv": 8, "d_model": 32,
        "dense_act_fn": "gelu_new", "dropout_rate": 0.1, "dtype": "float32", "eos_token_id": 1,
        "feed_forward_proj": "gated-gelu", "initializer_factor": 1.0, "is_decoder": False, "is_encoder_decoder": False,
        "is_gated_act": True, "layer_norm_epsilon": 1e-06, "model_type": "t5", "num_decoder_layers": 2, "num_heads": 4,
        "num_layers": 2, "pad_token_id": 0, "relative_attention_max_distance": 128,
        "relative_attention_num_buckets": 32, "scale_decoder_outputs": True, "tie_word_embeddings": True,
        "transformers_version": TRANSFORMERS_VERSION, "use_cache": False, "vocab_size": vocab_size,
    }
    cfg.update(overrides)
    return cfg


def write_demo(folder: str | os.PathLike, family: T5Family, *, seed: int, name: str,
               text_encoder_config: Callable[[int], dict], transformer_config: Callable[[int], dict], vae_config: dict,
               scheduler_config: dict, model_index: dict,
               vae_tensors: Callable[[dict, np.random.Generator], None] | None = None) -> Path:
    """Write a tiny random-weight ``family`` folder in the diffusers layout, without PyTorch (the families' demos).

    Assembled under a temporary name beside ``folder`` and renamed into place when complete.

    Args:
      name: what the marker file calls the model (e.g. ``"CogVideoX (5b)"``).
      text_encoder_config: vocabulary size -> T5 ``config.json``; transformer_config: text width -> its config.json.
      vae_config, scheduler_config, model_index: the other JSON files.
      vae_tensors: ``(state_dict, rng)`` -> None, to set VAE tensors the random weights would make meaningless.

    Returns:
      ``folder``.

    Raises:
      FileExistsError: ``folder`` exists.
    """
    from vidax.checkpoint.writer import save_component
    from vidax.encoders.tokenizer import Tokenizer, write_demo_tokenizer

    folder = Path(folder)
    if folder.exists():
        raise FileExistsError(f"{folder} exists; remove it to write a fresh demo checkpoint")
    with assembled_folder(folder) as tmp:
        rng = np.random.default_rng(seed)
        ecfg_json = text_encoder_config(Tokenizer.from_folder(write_demo_tokenizer(tmp / "tokenizer")).vocab_size)
        ecfg = T5Config.from_dict(ecfg_json)
        save_component(tmp / "text_encoder", "model.safetensors",
                       random_state_dict(t5_keymap(ecfg), t5_specs(ecfg), rng), ecfg_json)
        tcfg_json = transformer_config(ecfg_json["d_model"])
        tcfg = family.transformer_config(tcfg_json)
        tensors = random_state_dict(family.transformer_keymap(tcfg), family.transformer_specs(tcfg), rng)
        save_component(tmp / "transformer", "diffusion_pytorch_model.safetensors", tensors, tcfg_json)
        vcfg = family.vae_config(vae_config)
        vae = random_state_dict(family.vae_keymap(vcfg), family.vae_specs(vcfg), rng)
        if vae_tensors is not None:
            vae_tensors(vae, rng)
        save_component(tmp / "vae", "diffusion_pytorch_model.safetensors", vae, vae_config)
        (tmp / "scheduler").mkdir()
        write_json(tmp / "scheduler" / "scheduler_config.json", scheduler_config)
        write_json(tmp / "model_index.json", model_index)
        (tmp / DEMO_MARKER).write_text(demo_marker_text(name))
    return folder
