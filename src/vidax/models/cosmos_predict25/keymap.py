"""Cosmos-Predict2.5 transformer key maps, as data (the diffusers layout and the original release's EMA ``.pt``), and
the transformer's loader.

Both maps fill the spec tree of :func:`vidax.models.cosmos_predict25.transformer.transformer_specs`, whose paths are
diffusers' module names except ``ff/up`` / ``ff/down`` (``ff.net.0.proj`` / ``ff.net.2``), ``to_out``
(``to_out.0``), ``crossattn_proj`` (``crossattn_proj.0``) and norm weights read as ``scale``.

The original release (nvidia/Cosmos-Predict2.5-2B / -14B, ``base/{pre,post}-trained/<uuid>_ema_bf16.pt``: a
``torch.save`` of the ``MiniTrainDIT`` state dict with ``net.``-prefixed names, read by vidax's restricted unpickler,
:mod:`vidax.checkpoint.torch_pickle`) names its modules as nvidia-cosmos/cosmos-predict2.5's
``_src/predict2/networks/minimal_v4_dit.py``. The renames are diffusers' ``scripts/convert_cosmos_to_diffusers.py``
(``TRANSFORMER_KEYS_RENAME_DICT_COSMOS_2_0``, substring replacements after the ``net.`` prefix is removed):

==============================================  ==========================================
original (after ``net.``)                       diffusers
==============================================  ==========================================
``x_embedder.proj.1``                           ``patch_embed.proj``
``extra_pos_embedder.pos_emb_{t,h,w}``          ``learnable_pos_embed.pos_emb_{t,h,w}`` (1)
``t_embedder.1.linear_{1,2}``                   ``time_embed.t_embedder.linear_{1,2}``
``t_embedding_norm``                            ``time_embed.norm``
``blocks.N``                                    ``transformer_blocks.N``
  ``.adaln_modulation_self_attn.{1,2}``           ``.norm1.linear_{1,2}``
  ``.adaln_modulation_cross_attn.{1,2}``          ``.norm2.linear_{1,2}``
  ``.adaln_modulation_mlp.{1,2}``                 ``.norm3.linear_{1,2}``
  ``.self_attn`` / ``.cross_attn``                ``.attn1`` / ``.attn2``
    ``.{q,k,v}_proj``, ``.output_proj``             ``.to_{q,k,v}``, ``.to_out.0``
    ``.{q,k}_norm``                                 ``.norm_{q,k}``
  ``.mlp.layer1``, ``.mlp.layer2``                ``.ff.net.0.proj``, ``.ff.net.2``
``final_layer.adaln_modulation.{1,2}``          ``norm_out.linear_{1,2}``
``final_layer.linear``                          ``proj_out``
``crossattn_proj.0``                            ``crossattn_proj.0``
==============================================  ==========================================

(1) No Predict2.5 release has the extra position embedding, and the 2.0 rename table has no entry for it (the 1.0
table's ``"extra_pos_embedder": "learnable_pos_embed"``); the original module's name is mapped.

Keys the converter drops (``TRANSFORMER_SPECIAL_KEYS_REMAP_COSMOS_2_0``: buffers the network recomputes and training
counters) are ignored by name: :data:`ORIGINAL_IGNORED`. Every other key must map (strict loading:
:func:`vidax.checkpoint.loader.load_params`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from vidax.checkpoint.errors import CheckpointError, excerpt
from vidax.checkpoint.keymap import KeyMap, Rule, linear, norm, rules
from vidax.core.sharding import ShardingRules
from vidax.models.cosmos_predict25.config import ORIGINAL_CONFIGS, ORIGINAL_QK_NORM_EPS, CosmosTransformerConfig
from vidax.models.cosmos_predict25.sharding import COSMOS_PREDICT25_RULES

DIFFUSERS, ORIGINAL = "diffusers", "original"
#: The original state dict's prefix (``MiniTrainDIT`` as the model's ``net``); keys without it are read too.
ORIGINAL_PREFIX = "net."
#: Substrings of the original keys diffusers' converter removes (``TRANSFORMER_SPECIAL_KEYS_REMAP_COSMOS_2_0``), as
#: ignore patterns: the training counters, the RoPE module's recomputed buffers, Transformer Engine's extra state.
ORIGINAL_DROPPED = ("accum_video_sample_counter", "accum_image_sample_counter", "accum_iteration",
                    "accum_train_in_hours", "pos_embedder.seq", "pos_embedder.dim_spatial_range",
                    "pos_embedder.dim_temporal_range", "_extra_state")
ORIGINAL_IGNORED = [r".*" + name.replace(".", r"\.") for name in ORIGINAL_DROPPED]

_BLOCK = "transformer_blocks"


def _weight(key: str, path: str) -> list[Rule]:
    """A bias-free ``nn.Linear``."""
    return linear(key, path, bias=False)


def _block_rules(key: str, names: dict[str, str]) -> list[Rule]:
    """One block's rules; ``names`` gives the layout's module names."""
    b = _BLOCK
    out = []
    for n, mod in (("norm1", names["norm1"]), ("norm2", names["norm2"]), ("norm3", names["norm3"])):
        out += _weight(f"{key}.{mod}{names['lora_1']}", f"{b}/{n}/linear_1")
        out += _weight(f"{key}.{mod}{names['lora_2']}", f"{b}/{n}/linear_2")
    for n, mod in (("attn1", names["attn1"]), ("attn2", names["attn2"])):
        for ours, theirs in (("to_q", names["q"]), ("to_k", names["k"]), ("to_v", names["v"]),
                             ("to_out", names["out"])):
            out += _weight(f"{key}.{mod}.{theirs}", f"{b}/{n}/{ours}")
        out += norm(f"{key}.{mod}.{names['norm_q']}", f"{b}/{n}/norm_q", bias=False)
        out += norm(f"{key}.{mod}.{names['norm_k']}", f"{b}/{n}/norm_k", bias=False)
    out += _weight(f"{key}.{names['ff_up']}", f"{b}/ff/up")
    out += _weight(f"{key}.{names['ff_down']}", f"{b}/ff/down")
    return out


def transformer_keymap(cfg: CosmosTransformerConfig) -> KeyMap:
    """Key map of a diffusers ``CosmosTransformer3DModel`` (``transformer/*.safetensors``)."""
    names = {"norm1": "norm1", "norm2": "norm2", "norm3": "norm3", "lora_1": ".linear_1", "lora_2": ".linear_2",
             "attn1": "attn1", "attn2": "attn2", "q": "to_q", "k": "to_k", "v": "to_v", "out": "to_out.0",
             "norm_q": "norm_q", "norm_k": "norm_k", "ff_up": "ff.net.0.proj", "ff_down": "ff.net.2"}
    return KeyMap(rules(
        _weight("patch_embed.proj", "patch_embed/proj"),
        [Rule(f"learnable_pos_embed.pos_emb_{a}", f"learnable_pos_embed/pos_emb_{a}") for a in "thw"]
        if cfg.extra_pos_embed_type == "learnable" else [],
        _weight("time_embed.t_embedder.linear_1", "time_embed/t_embedder/linear_1"),
        _weight("time_embed.t_embedder.linear_2", "time_embed/t_embedder/linear_2"),
        norm("time_embed.norm", "time_embed/norm", bias=False),
        _block_rules(f"{_BLOCK}.{{i}}", names),
        _weight("norm_out.linear_1", "norm_out/linear_1"),
        _weight("norm_out.linear_2", "norm_out/linear_2"),
        _weight("proj_out", "proj_out"),
        linear("crossattn_proj.0", "crossattn_proj") if cfg.use_crossattn_projection else [],
    ))


def transformer_keymap_original(cfg: CosmosTransformerConfig, prefix: str = ORIGINAL_PREFIX) -> KeyMap:
    """Key map of the original release's ``MiniTrainDIT`` state dict (the table in this module's docstring), with
    ``prefix`` before every name; the converter's dropped keys ignored (:data:`ORIGINAL_IGNORED`)."""
    p = prefix
    names = {"norm1": "adaln_modulation_self_attn", "norm2": "adaln_modulation_cross_attn",
             "norm3": "adaln_modulation_mlp", "lora_1": ".1", "lora_2": ".2", "attn1": "self_attn",
             "attn2": "cross_attn", "q": "q_proj", "k": "k_proj", "v": "v_proj", "out": "output_proj",
             "norm_q": "q_norm", "norm_k": "k_norm", "ff_up": "mlp.layer1", "ff_down": "mlp.layer2"}
    return KeyMap(rules(
        _weight(f"{p}x_embedder.proj.1", "patch_embed/proj"),
        [Rule(f"{p}extra_pos_embedder.pos_emb_{a}", f"learnable_pos_embed/pos_emb_{a}") for a in "thw"]
        if cfg.extra_pos_embed_type == "learnable" else [],
        _weight(f"{p}t_embedder.1.linear_1", "time_embed/t_embedder/linear_1"),
        _weight(f"{p}t_embedder.1.linear_2", "time_embed/t_embedder/linear_2"),
        norm(f"{p}t_embedding_norm", "time_embed/norm", bias=False),
        _block_rules(f"{p}blocks.{{i}}", names),
        _weight(f"{p}final_layer.adaln_modulation.1", "norm_out/linear_1"),
        _weight(f"{p}final_layer.adaln_modulation.2", "norm_out/linear_2"),
        _weight(f"{p}final_layer.linear", "proj_out"),
        linear(f"{p}crossattn_proj.0", "crossattn_proj") if cfg.use_crossattn_projection else [],
    ), ignore=ORIGINAL_IGNORED)


def original_prefix(reader) -> str:
    """``"net."`` when the state dict's names carry it (the releases), else ``""``."""
    keys = set(reader.keys())
    bare = f"{ORIGINAL_PREFIX}x_embedder.proj.1.weight" not in keys and "x_embedder.proj.1.weight" in keys
    return "" if bare else ORIGINAL_PREFIX


def detect_layout(reader) -> str:
    """``"original"`` for a state dict with the original module names (``[net.]x_embedder.proj.1.weight``),
    else ``"diffusers"``."""
    keys = set(reader.keys())
    return ORIGINAL if {f"{ORIGINAL_PREFIX}x_embedder.proj.1.weight", "x_embedder.proj.1.weight"} & keys else DIFFUSERS


def transformer_checkpoint(reader, cfg: CosmosTransformerConfig, layout: str = DIFFUSERS):
    """A transformer checkpoint ready for :func:`vidax.checkpoint.loader.load_params`: ``(reader, key map)``.

    Args:
      reader: the checkpoint's tensors (``CheckpointReader`` of a diffusers ``transformer/`` folder or file, or of
        the original release's ``.pt``).
      layout: ``"diffusers"`` or ``"original"`` (:func:`detect_layout`).

    Raises:
      ValueError: an unknown layout.
    """
    if layout == DIFFUSERS:
        return reader, transformer_keymap(cfg)
    if layout == ORIGINAL:
        return reader, transformer_keymap_original(cfg, original_prefix(reader))
    raise ValueError(f"unknown Cosmos-Predict2.5 transformer layout {layout!r}; known: {DIFFUSERS!r}, {ORIGINAL!r}")


def original_config(reader, source: str = "checkpoint") -> CosmosTransformerConfig:
    """The released architecture (:data:`vidax.models.cosmos_predict25.config.ORIGINAL_CONFIGS`) whose width and
    block count an original state dict has (the ``.pt`` files carry no configuration).

    Raises:
      CheckpointError: no ``x_embedder`` weight, or a width / block count of no release (named, with the releases').
    """
    prefix = original_prefix(reader)
    key = f"{prefix}x_embedder.proj.1.weight"
    if key not in reader.keys():
        raise CheckpointError(f"{source}: no {key}: not an original Cosmos-Predict2.5 network state dict")
    width = reader.shape(key)[0]
    blocks = {k[len(prefix) + 7:].split(".", 1)[0] for k in reader.keys() if k.startswith(f"{prefix}blocks.")}
    for name, values in ORIGINAL_CONFIGS.items():
        if values["num_attention_heads"] * values["attention_head_dim"] == width and len(blocks) == values[
                "num_layers"]:
            return CosmosTransformerConfig.from_original(name)
    known = ", ".join(f"{n}: width {v['num_attention_heads'] * v['attention_head_dim']}, {v['num_layers']} blocks"
                      for n, v in ORIGINAL_CONFIGS.items())
    raise CheckpointError(f"{source}: width {excerpt(width)} with {len(blocks)} blocks is no Cosmos-Predict2.5 release "
                          f"({known}); pass its CosmosTransformerConfig explicitly")



class LoadedTransformer(NamedTuple):
    """What :func:`load_transformer` returns.

    Attributes:
      cfg: the configuration (given, from the folder's ``config.json``, or the release's).
      params: the parameter tree (without ``transformer_blocks`` when ``stacks`` holds it).
      stacks: ``{"transformer_blocks": OffloadedStack}`` (host block loop or offloading), or ``{}`` (the blocks in
        ``params``, stacked, for ``lax.scan``).
      layout: ``"diffusers"`` or ``"original"``.
    """

    cfg: CosmosTransformerConfig
    params: dict
    stacks: dict
    layout: str


def load_transformer(source: str | os.PathLike | Sequence[str | os.PathLike],
                     cfg: CosmosTransformerConfig | None = None, dtype: Any = np.float32, *, mesh=None,
                     rules: ShardingRules = COSMOS_PREDICT25_RULES,
                     offload_chunk: int | None = None, block_loop: str = "scan", layout: str | None = None,
                     by_shards: bool | None = None) -> LoadedTransformer:
    """Load a Cosmos-Predict2.5 transformer, placed once (already sharded on a mesh; with offloading or the host block
    loop its blocks read straight into chunks, :mod:`vidax.core.offload`).

    Args:
      source: a diffusers ``transformer/`` folder (``config.json`` and safetensors shards), one weights file
        (``.safetensors``, or the original release's ``*_ema_bf16.pt``), or a list of weight files.
      cfg: the architecture; None: the folder's (or the file's folder's) ``config.json`` for the diffusers layout, the
        release matching the weights' width and block count for the original one (:func:`original_config`).
      dtype: compute dtype of the weights not pinned to float32 (``float32`` or ``bfloat16``; cast on the host).
      mesh, rules: the transformer's mesh (None: one device) and sharding rules.
      offload_chunk: blocks per chunk kept in host memory and streamed each step (None: resident).
      block_loop: ``"scan"``, ``"host"`` or ``"auto"`` (:func:`vidax.core.offload.block_plan`).
      layout: ``"diffusers"``, ``"original"`` or None (:func:`detect_layout`).
      by_shards: see :func:`vidax.checkpoint.loader.load_params` (multi-host: each process reads its shards).

    Returns:
      :class:`LoadedTransformer`.

    Raises:
      CheckpointError: a missing or unreadable file, no configuration to be found, weights that do not match the
        configuration (every mismatch listed), an unsafe pickle (:mod:`vidax.checkpoint.torch_pickle`).
      ValueError: a mesh the model cannot use, an ``offload_chunk`` outside 1 .. ``num_layers``, an unknown
        ``block_loop`` or layout.
    """
    from vidax.checkpoint.loader import load_params
    from vidax.checkpoint.reader import CheckpointReader
    from vidax.core.config_values import read_json
    from vidax.core.offload import block_placement, block_plans, split_stacks
    from vidax.models.cosmos_predict25.sharding import check_parallel
    from vidax.models.cosmos_predict25.transformer import STACK, transformer_specs

    if isinstance(source, (str, os.PathLike)):
        reader = CheckpointReader(source)
        where = Path(source)
    else:
        if not source:
            raise CheckpointError("load_transformer: an empty list of weight files")
        reader = CheckpointReader.from_files(source)
        where = Path(source[0])
    layout = layout or detect_layout(reader)
    if layout not in (DIFFUSERS, ORIGINAL):
        raise ValueError(f"unknown Cosmos-Predict2.5 transformer layout {layout!r}; known: {DIFFUSERS!r}, "
                         f"{ORIGINAL!r}")
    if cfg is None:
        if layout == ORIGINAL:
            cfg = original_config(reader, str(where))
        else:
            config = (where if where.is_dir() else where.parent) / "config.json"
            if not config.is_file():
                raise CheckpointError(f"{config}: missing; a diffusers transformer folder holds its config.json beside "
                                      "the weights (or pass cfg)")
            cfg = CosmosTransformerConfig.from_dict(read_json(config))
    elif layout == ORIGINAL and cfg.qk_norm_eps != ORIGINAL_QK_NORM_EPS:
        import warnings

        warnings.warn(f"{where}: an original-layout checkpoint with qk_norm_eps={cfg.qk_norm_eps}; the original "
                      f"network normalises q and k with {ORIGINAL_QK_NORM_EPS} (CosmosTransformerConfig.from_original)",
                      stacklevel=2)
    check_parallel(cfg, mesh, rules)
    plans = block_plans({STACK: cfg.num_layers}, offload_chunk, block_loop)
    specs = transformer_specs(cfg)
    reader, keymap = transformer_checkpoint(reader, cfg, layout)
    params = load_params(reader, keymap, specs, np.dtype(dtype), source=str(where),
                         shardings=block_placement(plans, mesh, rules), by_shards=by_shards)
    params, stacks = split_stacks(params, specs, plans, mesh, rules)
    return LoadedTransformer(cfg, params, stacks, layout)


__all__ = ["DIFFUSERS", "ORIGINAL", "ORIGINAL_DROPPED", "ORIGINAL_IGNORED", "ORIGINAL_PREFIX", "LoadedTransformer",
           "detect_layout", "load_transformer", "original_config", "original_prefix", "transformer_checkpoint",
           "transformer_keymap", "transformer_keymap_original"]
