"""Cosmos3 transformer key maps, as data (the diffusers layout and the release layout), and the transformer's loader.

Both maps fill the spec tree of :func:`vidax.models.cosmos3.transformer.transformer_specs`, whose paths are diffusers'
module names with linear weights as ``kernel`` (transposed), norm weights as ``scale`` and ``embed_tokens.weight`` as
``embed_tokens/embedding``.

The release layout is the state of NVIDIA's Cosmos3 network before diffusers'
``scripts/convert_cosmos3_to_diffusers.py`` (huggingface/diffusers) re-keys it: the language model's state dict (a
Qwen3-VL / Nemotron text model: its stack under ``model.``, ``lm_head`` beside it) and the network's ``vae2llm``,
``llm2vae`` and ``time_embedder`` modules. The converter strips the leading ``model.``, renames the attention's modules
(first match wins, the ``*_moe_gen`` ones first) and maps the three modules:

==============================================  ==========================================
release                                         diffusers
==============================================  ==========================================
``model.embed_tokens`` / ``model.layers.N``     ``embed_tokens`` / ``layers.N``
  ``.self_attn.{q,k,v}_proj_moe_gen``             ``.self_attn.add_{q,k,v}_proj``
  ``.self_attn.o_proj_moe_gen``                   ``.self_attn.to_add_out``
  ``.self_attn.{q,k}_norm_moe_gen``               ``.self_attn.norm_added_{q,k}``
  ``.self_attn.{q,k,v}_proj``, ``.o_proj``        ``.self_attn.to_{q,k,v}``, ``.to_out``
  ``.self_attn.{q,k}_norm``                       ``.self_attn.norm_{q,k}``
  ``.self_attn.k_norm_und_for_gen``, norms,       unchanged
  ``.mlp.*``, ``.mlp_moe_gen.*``
``model.norm``, ``model.norm_moe_gen``          ``norm``, ``norm_moe_gen``
``vae2llm`` / ``llm2vae``                       ``proj_in`` / ``proj_out``
``time_embedder.mlp.{0,2}``                     ``time_embedder.linear_{1,2}``
==============================================  ==========================================

The release keys may sit under a further prefix (the network as a module of a model: ``net.`` and the language model
as ``net.language_model.``); :func:`release_prefixes` finds both from the keys.

Ignored by name (strict loading otherwise: every other key must map, every parameter be filled): ``lm_head`` (the
und stream's next-token head: video generation reads no text logits), the sound heads (``audio_proj_in``,
``audio_proj_out``, ``audio_modality_embed``; release ``sound2llm``, ``llm2sound``, ``sound_modality_embed``) and the
action heads (``action_proj_in``, ``action_proj_out``, ``action_modality_embed``): vidax generates video only, and the
reference runs those heads only when sound or action tokens are given (the published Nano has both, Edge the action
heads).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import KeyMap, Rule, linear, norm, rules
from vidax.core.sharding import ShardingRules
from vidax.models.cosmos3.config import Cosmos3TransformerConfig
from vidax.models.cosmos3.sharding import COSMOS3_RULES

DIFFUSERS, RELEASE = "diffusers", "release"
#: Unused heads, ignored by name (the module docstring says why).
UNUSED_HEADS = ("lm_head", "audio_proj_in", "audio_proj_out", "audio_modality_embed", "action_proj_in",
                "action_proj_out", "action_modality_embed", "sound2llm", "llm2sound", "sound_modality_embed")
IGNORED = [rf"(.*\.)?{name}(\..*)?\Z" for name in UNUSED_HEADS]

#: The release's attention module names -> diffusers' (``_ATTN_KEY_REMAP`` of the converter, in its order).
RELEASE_ATTENTION = (("q_proj_moe_gen", "add_q_proj"), ("k_proj_moe_gen", "add_k_proj"),
                     ("v_proj_moe_gen", "add_v_proj"), ("o_proj_moe_gen", "to_add_out"),
                     ("q_norm_moe_gen", "norm_added_q"), ("k_norm_moe_gen", "norm_added_k"),
                     ("q_proj", "to_q"), ("k_proj", "to_k"), ("v_proj", "to_v"), ("o_proj", "to_out"),
                     ("q_norm", "norm_q"), ("k_norm", "norm_k"), ("k_norm_und_for_gen", "k_norm_und_for_gen"))
#: The release's top-level modules -> diffusers'.
RELEASE_MODULES = (("vae2llm", "proj_in"), ("llm2vae", "proj_out"), ("time_embedder.mlp.0", "time_embedder.linear_1"),
                   ("time_embedder.mlp.2", "time_embedder.linear_2"))

_LINEARS = ("to_q", "to_k", "to_v", "to_out", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
_HEAD_NORMS = ("norm_q", "norm_k", "norm_added_q", "norm_added_k", "k_norm_und_for_gen")
_LAYER_NORMS = ("input_layernorm", "input_layernorm_moe_gen", "post_attention_layernorm",
                "post_attention_layernorm_moe_gen")


def _layer_rules(cfg: Cosmos3TransformerConfig, key: str, attention_names: dict[str, str]) -> list[Rule]:
    from vidax.models.cosmos3.transformer import STACK, transformer_specs

    attn = transformer_specs(cfg)[STACK]["self_attn"]
    out: list[Rule] = []
    for name in _LAYER_NORMS:
        out += norm(f"{key}.{name}", f"{STACK}/{name}", bias=False)
    for name in _LINEARS:
        out += linear(f"{key}.self_attn.{attention_names[name]}", f"{STACK}/self_attn/{name}",
                      bias=cfg.attention_bias)
    for name in _HEAD_NORMS:
        if name in attn:
            out += norm(f"{key}.self_attn.{attention_names[name]}", f"{STACK}/self_attn/{name}", bias=False)
    for m in ("mlp", "mlp_moe_gen"):
        for proj in ("gate_proj", "up_proj", "down_proj") if not cfg.nemotron else ("up_proj", "down_proj"):
            out += linear(f"{key}.{m}.{proj}", f"{STACK}/{m}/{proj}", bias=False)
    return out


def _top_rules(lm: str, top: str, names: dict[str, str]) -> list[Rule]:
    return rules(
        Rule(f"{lm}embed_tokens.weight", "embed_tokens/embedding"),
        norm(f"{lm}norm", "norm", bias=False),
        norm(f"{lm}norm_moe_gen", "norm_moe_gen", bias=False),
        linear(f"{top}{names['proj_in']}", "proj_in"),
        linear(f"{top}{names['proj_out']}", "proj_out"),
        linear(f"{top}{names['time_embedder.linear_1']}", "time_embedder/linear_1"),
        linear(f"{top}{names['time_embedder.linear_2']}", "time_embedder/linear_2"),
    )


def transformer_keymap(cfg: Cosmos3TransformerConfig) -> KeyMap:
    """Key map of a diffusers ``Cosmos3OmniTransformer`` (``transformer/*.safetensors``)."""
    same = {name: name for name in (*_LINEARS, *_HEAD_NORMS)}
    top = {d: d for _, d in RELEASE_MODULES}
    return KeyMap(rules(_top_rules("", "", top), _layer_rules(cfg, "layers.{i}", same)), ignore=IGNORED)


def transformer_keymap_release(cfg: Cosmos3TransformerConfig, lm_prefix: str = "model.", prefix: str = "") -> KeyMap:
    """Key map of the release layout (the table in this module's docstring): the language model's keys under
    ``lm_prefix`` (its stack; ``lm_head`` beside it), the network's modules under ``prefix``."""
    names = {d: r for r, d in RELEASE_ATTENTION}
    top = {d: r for r, d in RELEASE_MODULES}
    return KeyMap(rules(_top_rules(lm_prefix, prefix, top), _layer_rules(cfg, f"{lm_prefix}layers.{{i}}", names)),
                  ignore=IGNORED)


def release_prefixes(keys) -> tuple[str, str]:
    """``(lm_prefix, prefix)`` of a release-layout state dict: what precedes ``embed_tokens.weight`` (``"model."`` in
    the language model's own state dict) and ``vae2llm.weight``.

    Raises:
      CheckpointError: either key missing or found twice.
    """
    found = {}
    for end in ("embed_tokens.weight", "vae2llm.weight"):
        hits = [k[: -len(end)] for k in keys if k.endswith(end) and (k == end or k[-len(end) - 1] == ".")]
        if len(hits) != 1:
            raise CheckpointError(f"a Cosmos3 release-layout checkpoint holds one *{end} tensor; found {len(hits)}")
        found[end] = hits[0]
    return found["embed_tokens.weight"], found["vae2llm.weight"]


def detect_layout(reader) -> str:
    """``"release"`` for a state dict with the release's module names (a ``vae2llm.weight``), else ``"diffusers"``."""
    return RELEASE if any(k.endswith("vae2llm.weight") for k in reader.keys()) else DIFFUSERS


def transformer_checkpoint(reader, cfg: Cosmos3TransformerConfig, layout: str = DIFFUSERS):
    """``(reader, key map)`` of a transformer checkpoint for :func:`vidax.checkpoint.loader.load_params`.

    Raises:
      ValueError: an unknown layout. CheckpointError: release prefixes not found.
    """
    if layout == DIFFUSERS:
        return reader, transformer_keymap(cfg)
    if layout == RELEASE:
        return reader, transformer_keymap_release(cfg, *release_prefixes(reader.keys()))
    raise ValueError(f"unknown Cosmos3 transformer layout {layout!r}; known: {DIFFUSERS!r}, {RELEASE!r}")


class LoadedTransformer(NamedTuple):
    """What :func:`load_transformer` returns.

    Attributes:
      cfg: the configuration; params: the parameter tree (without ``layers`` when ``stacks`` holds it);
      stacks: ``{"layers": OffloadedStack}`` (host block loop or offloading) or ``{}`` (stacked, for ``lax.scan``);
      layout: ``"diffusers"`` or ``"release"``.
    """

    cfg: Cosmos3TransformerConfig
    params: dict
    stacks: dict
    layout: str


def _reader(source):
    from vidax.checkpoint.reader import CheckpointReader

    if isinstance(source, (str, os.PathLike)):
        return CheckpointReader(source), Path(source)
    if not source:
        raise CheckpointError("load_transformer: an empty list of weight files")
    return CheckpointReader.from_files(source), Path(source[0])



def load_transformer(source: str | os.PathLike | Sequence[str | os.PathLike],
                     cfg: Cosmos3TransformerConfig | None = None, dtype: Any = np.float32, *, mesh=None,
                     rules: ShardingRules = COSMOS3_RULES, offload_chunk: int | None = None,
                     block_loop: str = "scan", layout: str | None = None,
                     by_shards: bool | None = None) -> LoadedTransformer:
    """Load a Cosmos3 transformer, placed once (already sharded on a mesh; with offloading or the host block loop its
    layers read straight into chunks, :mod:`vidax.core.offload`).

    Args:
      source: a diffusers ``transformer/`` folder (``config.json`` and safetensors shards), one weights file, or a
        list of weight files (diffusers or release layout).
      cfg: the architecture; None: the folder's (or the file's folder's) ``config.json``.
      dtype: compute dtype of the weights not pinned to float32 (``float32`` or ``bfloat16``; cast on the host). The
        time embedder stays float32.
      mesh, rules: the transformer's mesh (None: one device) and sharding rules.
      offload_chunk: layers per chunk kept in host memory and streamed each step (None: resident).
      block_loop: ``"scan"``, ``"host"`` or ``"auto"`` (:func:`vidax.core.offload.block_plan`).
      layout: ``"diffusers"``, ``"release"`` or None (:func:`detect_layout`).
      by_shards: see :func:`vidax.checkpoint.loader.load_params`.

    Returns:
      :class:`LoadedTransformer`.

    Raises:
      CheckpointError: a missing or unreadable file, no configuration, weights that do not match the configuration
        (every missing, unexpected and mis-shaped key listed).
      ValueError: a mesh the model cannot use, an ``offload_chunk`` outside 1 .. ``num_hidden_layers``, an unknown
        ``block_loop`` or layout.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.core.config_values import read_json
    from vidax.core.offload import block_placement, block_plans, split_stacks
    from vidax.models.cosmos3.sharding import check_parallel
    from vidax.models.cosmos3.transformer import STACK, transformer_specs

    reader, where = _reader(source)
    layout = layout or detect_layout(reader)
    if layout not in (DIFFUSERS, RELEASE):
        raise ValueError(f"unknown Cosmos3 transformer layout {layout!r}; known: {DIFFUSERS!r}, {RELEASE!r}")
    if cfg is None:
        config = (where if where.is_dir() else where.parent) / "config.json"
        if not config.is_file():
            raise CheckpointError(f"{config}: missing; a Cosmos3 transformer folder holds its config.json beside the "
                                  "weights (or pass cfg)")
        cfg = Cosmos3TransformerConfig.from_dict(read_json(config))
    check_parallel(cfg, mesh, rules)
    plans = block_plans({STACK: cfg.num_hidden_layers}, offload_chunk, block_loop)
    specs = transformer_specs(cfg)
    reader, keymap = transformer_checkpoint(reader, cfg, layout)
    params = load_params(reader, keymap, specs, np.dtype(dtype), source=str(where),
                         shardings=block_placement(plans, mesh, rules), by_shards=by_shards)
    params, stacks = split_stacks(params, specs, plans, mesh, rules)
    return LoadedTransformer(cfg, params, stacks, layout)


__all__ = ["DIFFUSERS", "IGNORED", "RELEASE", "RELEASE_ATTENTION", "RELEASE_MODULES", "UNUSED_HEADS",
           "LoadedTransformer", "detect_layout", "load_transformer", "release_prefixes", "transformer_checkpoint",
           "transformer_keymap", "transformer_keymap_release"]
