"""LTX-2 / LTX-2.5 checkpoint folders: which layout, where each component is, how each is read.

Three layouts, one interface (:class:`LTX2Checkpoint`: ``.load(name, dtype) -> (params, cfg)`` for every component
name of :data:`COMPONENTS`, ``.tokenizer()``, ``.scheduler_config``, ``.tasks``, ``.has_audio``,
``.has_diffusion_decoder``):

* ``"diffusers"``: written by ``LTX2Pipeline.save_pretrained`` (diffusers' ``scripts/convert_ltx2_to_diffusers.py
  --full_pipeline``)::

      model_index.json   _class_name LTX2Pipeline (or LTX2ImageToVideoPipeline)
      text_encoder/      Gemma 4 unified (transformers' Gemma4UnifiedForConditionalGeneration)
      tokenizer/         tokenizer.json + tokenizer_config.json
      connectors/        LTX2TextConnectors      transformer/  LTX2VideoTransformer3DModel
      vae/               AutoencoderKLLTX2Video  audio_vae/    AutoencoderKLLTX2Audio
      vocoder/           LTX2Vocoder(WithBWE)    scheduler/    FlowMatchEulerDiscreteScheduler
      diffusion_decoder/ (optional) LTX2VideoDiffusionDecoderModel (the converter's ``--diffusion_vae``)

* ``"release"``: Lightricks' single file (``ltx-2.5-22b-dev.safetensors``, ``...-distilled.safetensors``) holding
  ``model.diffusion_model.*`` (the transformer and the text connectors), ``text_embedding_projection.*``, ``vae.*``,
  ``audio_vae.*`` and ``vocoder.*``, with the models' configuration in its safetensors metadata (``config``: a JSON
  string with ``transformer``, ``vae``, ``audio_vae``, ``vocoder`` sub-dicts; ``model_version``: ``"2.5.x"``;
  :mod:`vidax.models.ltx2.release` translates it), plus, in the same folder, the Gemma text encoder folder (a
  transformers folder with ``config.json`` of a ``gemma4_unified`` model and its ``tokenizer.json``; named
  ``text_encoder/`` or anything else). The scheduler is the one diffusers' converter writes for such a file (dev:
  dynamic shifting, terminal 0.1; a file named ``*distilled*``: the distilled one).

* ``"vidax"``: written by ``vidax convert`` (``vidax_index.json`` with ``family: ltx2``; each component folder holds
  ``params.safetensors`` in vidax's own layout and the diffusers ``config.json``; :mod:`vidax.models.ltx2.convert`).

Resolving reads index, configuration and safetensors headers only (no weights, no JAX).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vidax.checkpoint.errors import CheckpointError, excerpt
from vidax.checkpoint.writer import VIDAX_INDEX, VIDAX_WEIGHTS
from vidax.core.config_values import read_json

DIFFUSERS, RELEASE, VIDAX = "diffusers", "release", "vidax"
PIPELINE_CLASSES = ("LTX2Pipeline", "LTX2ImageToVideoPipeline")
FAMILY_NAME = "ltx2"
EXAMPLE = "Lightricks/LTX-2.5"
#: Every component name :meth:`LTX2Checkpoint.load` takes.
COMPONENTS = ("text_encoder", "connectors", "transformer", "vae", "audio_vae", "vocoder", "diffusion_decoder")
#: The components every checkpoint has (the audio ones and the diffusion decoder are optional).
REQUIRED = ("text_encoder", "connectors", "transformer", "vae")
#: The largest ``config.json`` / scheduler file read (they are a few kB).
MAX_CONFIG_BYTES = 1 << 20

#: The schedulers diffusers' ``scripts/convert_ltx2_to_diffusers.py`` writes for a release file (``--full_pipeline``;
#: ``"distilled" in combined_filename`` picks the second), as ``FlowMatchEulerDiscreteScheduler`` 0.42.1 saves them.
_SCHEDULER_COMMON = {"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.42.1",
                     "base_image_seq_len": 1024, "base_shift": 0.95, "invert_sigmas": False,
                     "max_image_seq_len": 4096, "max_shift": 2.05, "num_train_timesteps": 1000, "shift": 1.0,
                     "stochastic_sampling": False, "time_shift_type": "exponential", "use_beta_sigmas": False,
                     "use_exponential_sigmas": False, "use_karras_sigmas": False}
DEV_SCHEDULER = {**_SCHEDULER_COMMON, "shift_terminal": 0.1, "use_dynamic_shifting": True}
DISTILLED_SCHEDULER = {**_SCHEDULER_COMMON, "shift_terminal": None, "use_dynamic_shifting": False}


def _read_config(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise CheckpointError(f"{path}: {path.stat().st_size} bytes is not a configuration file (over "
                              f"{MAX_CONFIG_BYTES}); download it again")
    data = read_json(path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: not a JSON object")
    return data


@dataclass(frozen=True)
class ComponentSource:
    """Where one component's tensors are and how they map onto its parameter tree (no tensor read yet).

    Attributes:
      name: the component (:data:`COMPONENTS`).
      cfg: its configuration object (``LTX2TransformerConfig``, ``ConnectorsConfig``, ...).
      config: its diffusers ``config.json`` dict (what ``vidax convert`` writes beside the parameters).
      reader: the tensor reader (a ``CheckpointReader``, or a renaming view of one).
      keymap, specs: the layout's key map and the component's spec tree.
      source: the folder or file, for messages.
    """

    name: str
    cfg: Any
    config: dict
    reader: Any
    keymap: Any
    specs: Any
    source: str


@dataclass(frozen=True)
class LTX2Checkpoint:
    """A resolved LTX-2 checkpoint (see the module docstring; every path checked to exist).

    Attributes:
      folder: the checkpoint folder.
      layout: ``"diffusers"``, ``"release"`` or ``"vidax"``.
      pipeline_class: ``model_index.json``'s class (``LTX2Pipeline`` for a release file).
      folders: component name -> its folder (diffusers / vidax layouts; the release's text encoder and tokenizer).
      weights: the release single file, else None.
      metadata: the release file's parsed metadata (``config`` dict, ``model_version`` ...), else None.
      scheduler_config: the ``FlowMatchEulerDiscreteScheduler`` config dict.
      version: the release's ``model_version`` components (``(2, 5, 1)``), else ``()``.
    """

    folder: Path
    layout: str
    pipeline_class: str
    folders: dict[str, Path]
    scheduler_config: dict
    weights: Path | None = None
    metadata: dict | None = None
    version: tuple[int, ...] = ()
    _reader: list = field(default_factory=list, repr=False, compare=False)

    @property
    def tasks(self) -> tuple[str, ...]:
        """Text- and image-to-video (the same weights run both; the first frame is a latent condition)."""
        return ("t2v", "i2v")

    @property
    def has_audio(self) -> bool:
        """The audio VAE and the vocoder are present (the audio track can be decoded)."""
        if self.layout == RELEASE:
            keys = self.release_reader().keys()
            return any(k.startswith("audio_vae.") for k in keys) and any(k.startswith("vocoder.") for k in keys)
        return "audio_vae" in self.folders and "vocoder" in self.folders

    @property
    def has_diffusion_decoder(self) -> bool:
        """LTX-2.5's diffusion VAE decoder is present: a ``diffusion_decoder/`` folder (diffusers' converter's
        ``--diffusion_vae``, or a converted folder's copy of the release file), or beside a release file Lightricks'
        diffusion VAE file (``config["vae"]["_class_name"]`` other than ``CausalVideoAutoencoder``)."""
        return "diffusion_decoder" in self.folders

    def diffusion_decoder_config(self):
        """The diffusion decoder's :class:`~vidax.models.ltx2.diffusion_decoder.LTX2DiffusionDecoderConfig`, read
        from its ``config.json`` or its release file's metadata (no tensor read), or None when there is none.

        Raises:
          CheckpointError: an unreadable configuration or header. ValueError: an unsupported configuration.
        """
        from vidax.models.ltx2 import diffusion_decoder

        if not self.has_diffusion_decoder:
            return None
        return diffusion_decoder.read_config(self.folders["diffusion_decoder"])

    @property
    def is_distilled(self) -> bool:
        """The scheduler is the distilled one (no dynamic shifting): a fixed few-step schedule, no guidance."""
        return not self.scheduler_config.get("use_dynamic_shifting", False)

    def release_reader(self):
        """The release file's tensor reader (one, shared by every component; opened on first use)."""
        from vidax.checkpoint.reader import CheckpointReader

        if self.weights is None:
            raise CheckpointError(f"{self.folder}: not a release single-file checkpoint")
        if not self._reader:
            self._reader.append(CheckpointReader(self.weights))
        return self._reader[0]

    def tokenizer(self):
        """The Gemma tokenizer (:class:`vidax.encoders.gemma_tokenizer.GemmaTokenizer`).

        Raises:
          CheckpointError: no ``tokenizer.json`` (the folder named, with the fix).
        """
        from vidax.encoders.gemma_tokenizer import GemmaTokenizer

        folder = self.folders["tokenizer"]
        if not (folder / "tokenizer.json").is_file():
            raise CheckpointError(f"{folder}: the Gemma tokenizer is missing (no tokenizer.json); copy the text "
                                  "encoder's tokenizer files into it")
        return GemmaTokenizer.from_folder(folder)

    def source(self, name: str) -> ComponentSource:
        """Where component ``name``'s tensors are and how they map (reads configuration and headers only).

        Raises:
          ValueError: an unknown component name, or an unsupported configuration.
          CheckpointError: the component is absent from this checkpoint, or its configuration unreadable.
        """
        from vidax.models.ltx2 import release

        if name not in COMPONENTS:
            raise ValueError(f"unknown LTX-2 component {name!r}; components: {', '.join(COMPONENTS)}")
        if name == "diffusion_decoder":
            return self._diffusion_decoder_source()
        if self.layout == RELEASE and name != "text_encoder":
            return release.release_source(self, name)
        if name not in self.folders:
            raise CheckpointError(f"{self.folder}: this checkpoint has no {name} (no {name}/ folder)")
        folder = self.folders[name]
        config = _read_config(folder / "config.json")
        cfg, specs, keymap = component_spec(name, config)
        from vidax.checkpoint.reader import CheckpointReader

        if self.layout == VIDAX:
            from vidax.checkpoint.keymap import identity_keymap

            return ComponentSource(name, cfg, config, CheckpointReader(folder / VIDAX_WEIGHTS),
                                   identity_keymap(specs), specs, str(folder))
        reader = CheckpointReader(folder)
        if name == "text_encoder":
            from vidax.encoders.gemma import GEMMA_KEY_PREFIXES, LayerTypeReader, gemma_keymap

            keys = set(reader.keys())
            prefix = next((p for p in GEMMA_KEY_PREFIXES if f"{p}embed_tokens.weight" in keys), "model.language_model.")
            reader, keymap = LayerTypeReader(reader, cfg, prefix), gemma_keymap(cfg, prefix)
        return ComponentSource(name, cfg, config, reader, keymap, specs, str(folder))

    def _diffusion_decoder_location(self) -> Path:
        if not self.has_diffusion_decoder:
            raise CheckpointError(f"{self.folder}: this checkpoint has no diffusion decoder (no diffusion_decoder/ "
                                  "folder, as diffusers' converter writes it with --diffusion_vae, and no release "
                                  "diffusion VAE file beside the model)")
        return self.folders["diffusion_decoder"]

    def _diffusion_decoder_source(self) -> ComponentSource:
        """The diffusion decoder's source: a diffusers folder under diffusers' names, or the release VAE file through
        :class:`~vidax.models.ltx2.diffusion_decoder.ReleaseDiffusionDecoderReader` (``config``: empty; what
        ``vidax inspect`` and ``vidax convert`` check)."""
        from vidax.checkpoint.reader import CheckpointReader
        from vidax.models.ltx2 import diffusion_decoder as dd

        where = self._diffusion_decoder_location()
        cfg = dd.read_config(where)
        release_file = diffusion_decoder_file(where)
        reader = CheckpointReader(release_file or where)
        if release_file is not None:
            reader = dd.ReleaseDiffusionDecoderReader(reader)
        return ComponentSource("diffusion_decoder", cfg, {}, reader, dd.diffusion_decoder_keymap(cfg),
                               dd.diffusion_decoder_specs(cfg), str(release_file or where))

    def load(self, name: str, dtype: Any = np.float32, **kw) -> tuple[Any, Any]:
        """Load component ``name`` strictly: ``(params, cfg)``.

        Args:
          name: one of :data:`COMPONENTS`.
          dtype: weight dtype of the unpinned leaves (the vocoder is float32 whatever it).
          kw: passed to :func:`vidax.checkpoint.loader.load_params` (``parts``, ``shardings``, ...); the video and
            audio VAEs read their decoder parts by default (``parts=None``: all).

        Raises:
          ValueError, CheckpointError: see :meth:`source`; weights that do not match their configuration.
        """
        from vidax.checkpoint.loader import load_params

        if name == "diffusion_decoder":
            from vidax.models.ltx2 import diffusion_decoder

            where = self._diffusion_decoder_location()
            release_file = diffusion_decoder_file(where)
            if release_file is not None:  # Lightricks' diffusion VAE file (its config metadata)
                return diffusion_decoder.load_release_diffusion_decoder(release_file, dtype, **kw)
            return diffusion_decoder.load_diffusion_decoder(where, dtype, **kw)
        src = self.source(name)
        if name in ("vae", "audio_vae"):
            kw.setdefault("parts", ("decoder", "latents_mean", "latents_std"))
        if name == "vocoder":
            dtype = np.float32
        params = load_params(src.reader, src.keymap, src.specs, dtype, source=src.source, **kw)
        return params, src.cfg


def diffusion_decoder_file(where: Path) -> Path | None:
    """The release diffusion VAE file of a ``diffusion_decoder`` location (the file itself, or a folder without
    ``config.json`` holding one ``*.safetensors`` whose metadata has a ``config``: a converted folder's copy), else
    None (a diffusers folder, which needs its ``config.json``).

    Raises:
      CheckpointError: that file's header is unreadable.
    """
    from vidax.checkpoint.safetensors_io import SafetensorsFile

    if where.is_file():
        return where
    if (where / "config.json").exists():
        return None
    files = sorted(where.glob("*.safetensors"))[:2]
    if len(files) == 1 and files[0].is_file() and "config" in SafetensorsFile(files[0]).metadata:
        return files[0]
    return None


def component_spec(name: str, config: dict) -> tuple[Any, Any, Any]:
    """``(cfg, specs, diffusers keymap)`` of a component from its diffusers ``config.json`` dict.

    Raises:
      ValueError: an unsupported configuration (named).
    """
    if name == "text_encoder":
        from vidax.encoders.gemma import GemmaConfig, gemma_keymap, gemma_specs

        cfg = GemmaConfig.from_dict(config)
        return cfg, gemma_specs(cfg), gemma_keymap(cfg)
    if name == "connectors":
        from vidax.models.ltx2.connectors import ConnectorsConfig, connectors_keymap, connectors_specs

        cfg = ConnectorsConfig.from_dict(config)
        return cfg, connectors_specs(cfg), connectors_keymap(cfg)
    if name == "transformer":
        from vidax.models.ltx2.config import LTX2TransformerConfig
        from vidax.models.ltx2.keymap import transformer_keymap
        from vidax.models.ltx2.transformer import transformer_specs

        cfg = LTX2TransformerConfig.from_dict(config)
        return cfg, transformer_specs(cfg), transformer_keymap(cfg)
    if name == "vae":
        from vidax.checkpoint.keymap import KeyMap
        from vidax.models.ltx2.vae import LTX2VideoVAEConfig, vae_specs_and_rules

        cfg = LTX2VideoVAEConfig.from_dict(config)
        specs, rules = vae_specs_and_rules(cfg)
        return cfg, specs, KeyMap(rules)
    if name == "audio_vae":
        from vidax.checkpoint.keymap import KeyMap
        from vidax.models.ltx2.audio_vae import LTX2AudioVAEConfig, audio_vae_specs_and_rules

        cfg = LTX2AudioVAEConfig.from_dict(config)
        specs, rules = audio_vae_specs_and_rules(cfg)
        return cfg, specs, KeyMap(rules)
    if name == "vocoder":
        from vidax.models.ltx2.vocoder import vocoder_config_from_dict, vocoder_specs_and_rules

        cfg = vocoder_config_from_dict(config)
        specs, keymap = vocoder_specs_and_rules(cfg)
        return cfg, specs, keymap
    if name == "diffusion_decoder":
        from vidax.models.ltx2 import diffusion_decoder as dd

        cfg = dd.LTX2DiffusionDecoderConfig.from_dict(config)
        return cfg, dd.diffusion_decoder_specs(cfg), dd.diffusion_decoder_keymap(cfg)
    raise ValueError(f"no key-mapped component {name!r}")


def _present(index: dict, name: str) -> bool:
    """A ``model_index.json`` entry naming a class (``[null, null]``: the component is absent)."""
    entry = index.get(name)
    return not (isinstance(entry, list) and len(entry) == 2 and entry[1] is None)


def _folders(folder: Path, index: dict | None) -> dict[str, Path]:
    out = {}
    for name in COMPONENTS + ("tokenizer",):
        path = folder / name
        if path.is_dir() and (index is None or _present(index, name) or name == "diffusion_decoder"):
            out[name] = path
    missing = [n for n in REQUIRED + ("tokenizer",) if n not in out]
    if missing:
        raise CheckpointError(f"{folder}: the LTX-2 folder is missing {', '.join(m + '/' for m in missing)}; download "
                              "it again (or run `vidax convert` again for a converted folder)")
    return out


def _scheduler(folder: Path) -> dict:
    path = folder / "scheduler" / "scheduler_config.json"
    config = _read_config(path)
    if config.get("_class_name", "FlowMatchEulerDiscreteScheduler") != "FlowMatchEulerDiscreteScheduler":
        raise CheckpointError(f"{path}: {excerpt(config.get('_class_name'))} is not the "
                              "FlowMatchEulerDiscreteScheduler LTX-2 samples with")
    return config


def is_ltx2_folder(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` is an LTX-2 checkpoint: a release folder (its single file's metadata), or a diffusers /
    vidax folder of this family (index files only). A folder whose safetensors header or release metadata cannot be
    read is claimed too, so that :func:`resolve_checkpoint` reports the file and the problem."""
    folder = Path(folder)
    try:
        if (folder / VIDAX_INDEX).is_file():
            return read_json(folder / VIDAX_INDEX).get("family") == FAMILY_NAME
        if (folder / "model_index.json").is_file():
            return read_json(folder / "model_index.json").get("_class_name") in PIPELINE_CLASSES
    except CheckpointError:
        return False
    from vidax.models.ltx2.release import release_files

    try:
        return bool(release_files(folder))
    except CheckpointError:  # a corrupt safetensors header or release metadata: claimed, so that
        return True          # resolve_checkpoint names the file and the problem


def resolve_checkpoint(folder: str | os.PathLike) -> LTX2Checkpoint:
    """Check an LTX-2 folder and return where everything is (index, configuration and header reads only).

    Raises:
      CheckpointError: the folder is missing, is not an LTX-2 folder (what it is said), lacks parts (all named,
        with the fix), or its release metadata is unreadable or too large.
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: checkpoint folder not found")
    if (folder / VIDAX_INDEX).is_file():
        index = _read_config(folder / VIDAX_INDEX)
        if index.get("format") != "vidax" or index.get("family") != FAMILY_NAME:
            raise CheckpointError(f"{folder / VIDAX_INDEX}: not a vidax-converted LTX-2 checkpoint (format/family)")
        folders = _folders(folder, None)
        return LTX2Checkpoint(folder, VIDAX, str(index.get("pipeline_class", "LTX2Pipeline")), folders,
                              _scheduler(folder))
    if (folder / "model_index.json").is_file():
        index = _read_config(folder / "model_index.json")
        name = index.get("_class_name")
        if name not in PIPELINE_CLASSES:
            raise CheckpointError(f"{folder / 'model_index.json'}: describes {excerpt(name)}, not "
                                  f"{' or '.join(PIPELINE_CLASSES)}")
        return LTX2Checkpoint(folder, DIFFUSERS, name, _folders(folder, index), _scheduler(folder))
    from vidax.models.ltx2.release import resolve_release

    ckpt = resolve_release(folder)
    if ckpt is not None:
        return ckpt
    raise CheckpointError(f"{folder}: not an LTX-2 folder: expected model_index.json (diffusers' LTX2Pipeline), "
                          "vidax_index.json (vidax convert), or a release single file (ltx-2.5-22b-dev.safetensors, "
                          "with its config metadata) beside the Gemma text encoder folder")


__all__ = ["COMPONENTS", "ComponentSource", "DEV_SCHEDULER", "DISTILLED_SCHEDULER", "LTX2Checkpoint",
           "component_spec", "is_ltx2_folder", "resolve_checkpoint"]
