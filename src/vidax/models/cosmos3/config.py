"""Cosmos3 transformer configuration: a diffusers ``transformer/config.json`` (``Cosmos3OmniTransformer``).

:class:`Cosmos3TransformerConfig` mirrors ``Cosmos3OmniTransformer.__init__`` (diffusers 0.42.1
``models/transformers/transformer_cosmos3.py``); its defaults are diffusers' (the Nano architecture), so a
``config.json`` that leaves a key out means what it means to diffusers.

The two releases, as their published ``transformer/config.json`` declare them (nvidia/Cosmos3-Nano and
nvidia/Cosmos3-Edge; quoted verbatim by public test suites of Cosmos3 runtimes found with the code search, not read
from the hub here): :data:`RELEASE_CONFIGS`.

=========================  ===================  =====================
                           Nano                 Edge
=========================  ===================  =====================
backbone                   Qwen3-VL (dense)     Nemotron (dense)
hidden / MLP width         4096 / 12288         2048 / 9216
layers                     36                   28
heads / kv heads x width   32 / 8 x 128         16 / 8 x 128
hidden_act                 silu (gated)         relu2 (up, relu^2)
norms                      RMSNorm, eps 1e-6    Nemotron RMSNorm, 1e-5
text q/k norms             yes                  no (``k_norm_und_for_gen``)
rope_theta                 5e6                  1e8
mrope_section              24, 20, 20           24, 20, 20
vocab                      151936               131072
latent ch. / patch         48 / 2 (192)         48 / 2 (192)
sound / action heads       yes / yes            no / yes
=========================  ===================  =====================

Each layer holds both streams' weights, so a release has about twice its backbone's layer parameters: counted from
:func:`vidax.models.cosmos3.transformer.transformer_specs` (video generation: no ``lm_head``, sound or action heads),
Nano 14.53 billion, Edge 3.09 billion (the paper's counts may count otherwise).

Sound and action generation (``sound_gen``, ``action_gen`` and their sizes) are accepted and kept for
:meth:`Cosmos3TransformerConfig.to_dict`, but vidax generates video only: their heads' weights are ignored by name at
loading (:mod:`vidax.models.cosmos3.keymap`), and nothing reads those fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vidax.core.config_values import check_class_name, config_values

#: The diffusers class of a transformer ``config.json``.
DIFFUSERS_CLASS = "Cosmos3OmniTransformer"
#: The activations of the two backbones (``Cosmos3VLTextMLP``).
HIDDEN_ACTS = ("silu", "relu2")

_MAX_WIDTH = 1 << 16
_MAX_LAYERS = 1024
_MAX_HEADS = 1024
_MAX_VOCAB = 1 << 22
_MAX_CHANNELS = 4096
_MAX_PATCH = 16

_COMMON = dict(
    attention_bias=False, base_fps=24, enable_fps_modulation=True, head_dim=128, latent_channel=48,
    latent_patch_size=2, patch_latent_dim=192, num_key_value_heads=8, rope_scaling={"mrope_section": [24, 20, 20]},
    timestep_scale=0.001, unified_3d_mrope_reset_spatial_ids=True, unified_3d_mrope_temporal_modality_margin=15000,
    action_gen=True, action_dim=64, num_embodiment_domains=32,
)
#: The released architectures (their ``transformer/config.json``, the keys diffusers reads).
RELEASE_CONFIGS: dict[str, dict[str, Any]] = {
    "Cosmos3-Nano": dict(_COMMON, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                         num_attention_heads=32, rms_norm_eps=1e-6, rope_theta=5000000.0, vocab_size=151936,
                         hidden_act="silu", qk_norm_for_text=True, use_und_k_norm_for_gen=False, sound_gen=True,
                         sound_dim=64, sound_latent_fps=25.0),
    "Cosmos3-Edge": dict(_COMMON, hidden_size=2048, intermediate_size=9216, num_hidden_layers=28,
                         num_attention_heads=16, rms_norm_eps=1e-5, rope_theta=100000000.0, vocab_size=131072,
                         hidden_act="relu2", qk_norm_for_text=False, use_und_k_norm_for_gen=True, sound_gen=False,
                         sound_dim=None, sound_latent_fps=25.0),
}


@dataclass(frozen=True)
class Cosmos3TransformerConfig:
    """``Cosmos3OmniTransformer``'s constructor arguments (diffusers' names and defaults).

    Raises (at construction):
      ValueError: every unsupported or out-of-bounds setting at once, named (an unknown ``hidden_act``; a head
        count kv heads do not divide; ``patch_latent_dim`` other than ``latent_patch_size**2 * latent_channel``; an
        mRoPE section that does not fit ``head_dim / 2``; sizes past the bounds that keep a hostile config from
        allocating).
    """

    attention_bias: bool = False
    attention_dropout: float = 0.0
    head_dim: int = 128
    hidden_size: int = 4096
    intermediate_size: int = 12288
    base_fps: int = 24
    enable_fps_modulation: bool = True
    latent_channel: int = 48
    unified_3d_mrope_reset_spatial_ids: bool = True
    unified_3d_mrope_temporal_modality_margin: int = 15000
    latent_patch_size: int = 2
    num_attention_heads: int = 32
    num_hidden_layers: int = 36
    num_key_value_heads: int = 8
    patch_latent_dim: int = 192
    rms_norm_eps: float = 1e-6
    rope_scaling: dict | None = None
    rope_theta: float = 5000000.0
    action_dim: int | None = None
    action_gen: bool = False
    num_embodiment_domains: int = 32
    sound_dim: int | None = None
    sound_gen: bool = False
    sound_latent_fps: float = 25.0
    timestep_scale: float = 0.001
    vocab_size: int = 151936
    hidden_act: str = "silu"
    qk_norm_for_text: bool = True
    use_und_k_norm_for_gen: bool = False
    rope_axes_dim: tuple[int, ...] | None = None

    def __post_init__(self):
        if isinstance(self.rope_axes_dim, list):
            object.__setattr__(self, "rope_axes_dim", tuple(self.rope_axes_dim))
        if isinstance(self.rope_scaling, dict):  # hashable (the config is a static jit argument)
            object.__setattr__(self, "rope_scaling", _FrozenDict(self.rope_scaling))
        problems = []
        for name, hi in (("hidden_size", _MAX_WIDTH), ("intermediate_size", 4 * _MAX_WIDTH), ("head_dim", 1024),
                         ("num_hidden_layers", _MAX_LAYERS), ("num_attention_heads", _MAX_HEADS),
                         ("num_key_value_heads", _MAX_HEADS), ("vocab_size", _MAX_VOCAB),
                         ("latent_channel", _MAX_CHANNELS), ("latent_patch_size", _MAX_PATCH),
                         ("patch_latent_dim", _MAX_PATCH ** 2 * _MAX_CHANNELS), ("base_fps", 1000)):
            value = getattr(self, name)
            if not 1 <= value <= hi:
                problems.append(f"{name}={value} (between 1 and {hi})")
        if self.hidden_act not in HIDDEN_ACTS:
            problems.append(f"hidden_act={self.hidden_act!r} (Cosmos3 has {' and '.join(HIDDEN_ACTS)})")
        if self.num_key_value_heads >= 1 and self.num_attention_heads % self.num_key_value_heads:
            problems.append(f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                            f"num_key_value_heads={self.num_key_value_heads}")
        if self.head_dim % 2:
            problems.append(f"head_dim={self.head_dim} (even: rotary pairs)")
        if self.patch_latent_dim != self.latent_patch_size ** 2 * self.latent_channel:
            problems.append(f"patch_latent_dim={self.patch_latent_dim} (latent_patch_size**2 * latent_channel = "
                            f"{self.latent_patch_size ** 2 * self.latent_channel}: what proj_in reads)")
        section = self.mrope_section
        if len(section) != 3 or any(not isinstance(s, int) or s < 0 for s in section):
            problems.append(f"mrope_section={list(section)} (three non-negative integers)")
        elif max(3 * section[1] - 2, 3 * section[2] - 1) > self.head_dim // 2:
            problems.append(f"mrope_section={list(section)} (the height and width sections interleave every third "
                            f"of head_dim / 2 = {self.head_dim // 2} rotary frequencies)")
        for name in ("rms_norm_eps",):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 < value < 1):
                problems.append(f"{name}={value} (a small positive number)")
        for name in ("rope_theta", "timestep_scale"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 < value <= 1e12):
                problems.append(f"{name}={value} (positive and finite)")
        if not 0 <= self.unified_3d_mrope_temporal_modality_margin <= 1 << 24:
            problems.append(f"unified_3d_mrope_temporal_modality_margin={self.unified_3d_mrope_temporal_modality_margin}"
                            " (between 0 and 2**24: positions stay exact in float32)")
        if problems:
            raise ValueError("Cosmos3TransformerConfig: unsupported " + "; ".join(problems))

    # ---------------------------------------------------------------- derived

    @property
    def mrope_section(self) -> tuple[int, ...]:
        """The rotary frequencies driven by the temporal, height and width positions (``rope_axes_dim``, else
        ``rope_scaling["mrope_section"]``, else ``[24, 20, 20]``; as ``Cosmos3OmniTransformer.__init__``)."""
        if self.rope_axes_dim is not None:
            return tuple(self.rope_axes_dim)
        if self.rope_scaling is not None:
            return tuple(self.rope_scaling.get("mrope_section", (24, 20, 20)))
        return (24, 20, 20)

    @property
    def num_key_value_groups(self) -> int:
        """Query heads per key/value head."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def nemotron(self) -> bool:
        """The Nemotron backbone (Edge): ``hidden_act="relu2"``, ``Cosmos3NemotronRMSNorm`` everywhere."""
        return self.hidden_act == "relu2"

    @property
    def has_k_norm_und_for_gen(self) -> bool:
        """Whether the layers hold ``k_norm_und_for_gen`` (``use_und_k_norm_for_gen`` without text q/k norms)."""
        return self.use_und_k_norm_for_gen and not self.qk_norm_for_text

    # ---------------------------------------------------------------- constructors

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> Cosmos3TransformerConfig:
        """Build from a diffusers ``transformer/config.json`` dict.

        Keys that are not constructor arguments are ignored, as diffusers ignores them (the releases carry
        ``model_type``, ``freeze_und``, ``qk_norm``, ``use_moe``, ``temporal_compression_factor`` and others the
        diffusers class never reads). ``dtype`` is diffusers' load-time hint, not architecture.

        Raises:
          ValueError: ``_class_name`` is not ``Cosmos3OmniTransformer``; a value of the wrong type (named); an
            unsupported or out-of-bounds setting (named).
        """
        check_class_name(config, DIFFUSERS_CLASS, "transformer")
        if "rope_scaling" in config and config["rope_scaling"] is not None and not isinstance(
                config["rope_scaling"], dict):
            raise ValueError(f"{cls.__name__} (config.json): rope_scaling={config['rope_scaling']!r} should be an "
                             "object or null (fix this value in its config.json)")
        values = config_values(cls, config, f"{cls.__name__} (config.json)")
        if isinstance(values.get("rope_scaling"), dict):
            values["rope_scaling"] = dict(values["rope_scaling"])
        return cls(**values)

    @classmethod
    def from_release(cls, name: str) -> Cosmos3TransformerConfig:
        """A release's architecture (:data:`RELEASE_CONFIGS`; ``"nano"``, ``"edge"`` or the full name).

        Raises:
          ValueError: an unknown name (the known ones listed).
        """
        full = {"nano": "Cosmos3-Nano", "edge": "Cosmos3-Edge"}.get(name.lower(), name)
        if full not in RELEASE_CONFIGS:
            raise ValueError(f"unknown Cosmos3 release {name!r}; known: nano, edge, {', '.join(RELEASE_CONFIGS)}")
        return cls.from_dict(RELEASE_CONFIGS[full])

    def to_dict(self) -> dict[str, Any]:
        """The diffusers ``config.json`` keys of this configuration (``_class_name`` included)."""
        out: dict[str, Any] = {"_class_name": DIFFUSERS_CLASS}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, _FrozenDict):
                value = {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
            out[name] = value
        return out


class _FrozenDict(dict):
    """A dict that hashes by its items (``rope_scaling`` in a frozen, hashable configuration); lists become
    tuples."""

    def __init__(self, d: dict):
        super().__init__({k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    def __hash__(self):
        return hash(tuple(sorted((k, repr(v)) for k, v in self.items())))

    def _readonly(self, *args, **kwargs):
        raise TypeError("Cosmos3TransformerConfig.rope_scaling is read-only")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _readonly


__all__ = ["DIFFUSERS_CLASS", "HIDDEN_ACTS", "RELEASE_CONFIGS", "Cosmos3TransformerConfig"]
