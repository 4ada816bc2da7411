"""HunyuanVideo transformer key maps, as data: the diffusers layout and the original release.

Both fill the spec tree of :func:`vidax.models.hunyuanvideo.transformer.transformer_specs`, whose paths
are diffusers' module names with three differences, each because tensor parallelism needs the pieces
of a fused tensor as separate parameters (:mod:`vidax.models.hunyuanvideo.sharding`):

* the single-stream blocks' ``proj_out`` reads the concatenation ``[attention (dim); MLP (mlp_dim)]``:
  its ``(dim, dim + mlp_dim)`` weight is read as two kernels, ``proj_out/attn`` and ``proj_out/mlp``
  (input features ``[0, dim)`` and ``[dim, dim + mlp_dim)``), and one bias;
* the final ``norm_out.linear`` (``AdaLayerNormContinuous``: ``scale`` then ``shift``) is read as
  ``norm_out/scale_linear`` and ``norm_out/shift_linear``, so that the original release, which stores
  ``shift`` first, maps exactly without reordering data;
* the feed-forward pairs are ``ff/up``, ``ff/down`` (diffusers ``ff.net.0.proj``, ``ff.net.2``), and the
  stacked block lists keep diffusers' names (``transformer_blocks``, ``single_transformer_blocks``,
  ``context_embedder/token_refiner/refiner_blocks``).

Fused tensors are split by :class:`vidax.checkpoint.reader.TensorViews` (memory-map views, no copy); a
layout is its views plus its key map, and :func:`transformer_checkpoint` applies both. Error messages name
the view keys (``...proj_out.weight[mlp]``), which point at the real tensor.

The original release (``hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states.pt``, the state dict
under ``"module"``, which the reader unwraps) names its modules as the Tencent-Hunyuan/HunyuanVideo
repository's ``HYVideoDiffusionTransformer`` (``hyvideo/modules/models.py``, ``token_refiner.py``,
``embed_layers.py``, ``mlp_layers.py``). The renames agree with diffusers'
``scripts/convert_hunyuan_video_to_diffusers.py``:

=============================================  ====================================================
original                                       diffusers
=============================================  ====================================================
``img_in.proj``                                ``x_embedder.proj``
``time_in.mlp.{0,2}``                          ``time_text_embed.timestep_embedder.linear_{1,2}``
``guidance_in.mlp.{0,2}``                      ``time_text_embed.guidance_embedder.linear_{1,2}``
``vector_in.{in_layer,out_layer}``             ``time_text_embed.text_embedder.linear_{1,2}``
``txt_in.input_embedder``                      ``context_embedder.proj_in``
``txt_in.t_embedder.mlp.{0,2}``                ``context_embedder.time_text_embed.timestep_embedder.*``
``txt_in.c_embedder.linear_{1,2}``             ``context_embedder.time_text_embed.text_embedder.*``
``txt_in.individual_token_refiner.blocks.N``   ``context_embedder.token_refiner.refiner_blocks.N``
  ``.norm1``, ``.norm2``                         ``.norm1``, ``.norm2``
  ``.self_attn_qkv`` (q, k, v fused)             ``.attn.to_q``, ``.attn.to_k``, ``.attn.to_v``
  ``.self_attn_proj``                            ``.attn.to_out.0``
  ``.mlp.fc1``, ``.mlp.fc2``                     ``.ff.net.0.proj``, ``.ff.net.2``
  ``.adaLN_modulation.1``                        ``.norm_out.linear``
``double_blocks.N``                            ``transformer_blocks.N``
  ``.img_mod.linear``, ``.txt_mod.linear``       ``.norm1.linear``, ``.norm1_context.linear``
  ``.img_attn_qkv`` (q, k, v fused)              ``.attn.to_q``, ``.attn.to_k``, ``.attn.to_v``
  ``.txt_attn_qkv`` (q, k, v fused)              ``.attn.add_q_proj``, ``.attn.add_k_proj``, ``.attn.add_v_proj``
  ``.img_attn_{q,k}_norm``                       ``.attn.norm_{q,k}``
  ``.txt_attn_{q,k}_norm``                       ``.attn.norm_added_{q,k}``
  ``.img_attn_proj``, ``.txt_attn_proj``         ``.attn.to_out.0``, ``.attn.to_add_out``
  ``.img_mlp.fc{1,2}``, ``.txt_mlp.fc{1,2}``     ``.ff.net.{0.proj,2}``, ``.ff_context.net.{0.proj,2}``
``single_blocks.N``                            ``single_transformer_blocks.N``
  ``.linear1`` (q, k, v, MLP-in fused)           ``.attn.to_q``, ``.attn.to_k``, ``.attn.to_v``, ``.proj_mlp``
  ``.linear2``                                   ``.proj_out``
  ``.q_norm``, ``.k_norm``                       ``.attn.norm_q``, ``.attn.norm_k``
  ``.modulation.linear``                         ``.norm.linear``
``final_layer.linear``                         ``proj_out``
``final_layer.adaLN_modulation.1``             ``norm_out.linear`` with its halves swapped (shift, scale ->
                                               scale, shift)
=============================================  ====================================================

The original's LayerNorms without affine parameters (``img_norm1``, ``pre_norm``, ``final_layer.norm_final``,
...) have no tensors, as in diffusers.
"""

from __future__ import annotations

import os

from vidax.checkpoint.keymap import KeyMap, Rule, conv, linear, norm, rules
from vidax.checkpoint.reader import Split, TensorViews
from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig

DIFFUSERS, ORIGINAL = "diffusers", "original"

_REFINER = "context_embedder/token_refiner/refiner_blocks"
_DOUBLE, _SINGLE = "transformer_blocks", "single_transformer_blocks"


def _embedder(key: str, path: str, first: str = "linear_1", second: str = "linear_2") -> list[Rule]:
    """A two-linear embedder (``TimestepEmbedding`` / ``PixArtAlphaTextProjection``) -> ``{path}/linear_{1,2}``."""
    return rules(linear(f"{key}.{first}", f"{path}/linear_1"), linear(f"{key}.{second}", f"{path}/linear_2"))


def transformer_views(cfg: HunyuanVideoTransformerConfig) -> TensorViews:
    """The diffusers layout's views: ``single_transformer_blocks.N.proj_out.weight`` split by its input features
    into ``[attn]`` (``dim``) and ``[mlp]`` (``mlp_dim``); ``norm_out.linear.{weight,bias}`` into ``[scale]``,
    ``[shift]``."""
    return TensorViews(split={
        r"single_transformer_blocks\.\d+\.proj_out\.weight": Split(("attn", "mlp"), (cfg.dim, cfg.mlp_dim), axis=1),
        r"norm_out\.linear\.(weight|bias)": ("scale", "shift"),
    })


def transformer_keymap(cfg: HunyuanVideoTransformerConfig) -> KeyMap:
    """Key map of a diffusers ``HunyuanVideoTransformer3DModel`` (``transformer/*.safetensors``), read through
    :func:`transformer_views` (every variant: T2V with guidance, ``latent_concat`` and ``token_replace`` I2V).

    The ``token_replace`` blocks (``HunyuanVideoTokenReplace*``) hold the same parameters under the same names.
    """
    r = "context_embedder.token_refiner.refiner_blocks.{i}"
    d, s = "transformer_blocks.{i}", "single_transformer_blocks.{i}"
    cte, tte = "context_embedder.time_text_embed", "time_text_embed"
    qkv = ("to_q", "to_k", "to_v")
    return KeyMap(rules(
        conv("x_embedder.proj", "x_embedder/proj", dims=3),
        _embedder(f"{cte}.timestep_embedder", "context_embedder/time_text_embed/timestep_embedder"),
        _embedder(f"{cte}.text_embedder", "context_embedder/time_text_embed/text_embedder"),
        linear("context_embedder.proj_in", "context_embedder/proj_in"),
        norm(f"{r}.norm1", f"{_REFINER}/norm1"),
        rules(*[linear(f"{r}.attn.{n}", f"{_REFINER}/attn/{n}") for n in qkv]),
        linear(f"{r}.attn.to_out.0", f"{_REFINER}/attn/to_out"),
        norm(f"{r}.norm2", f"{_REFINER}/norm2"),
        linear(f"{r}.ff.net.0.proj", f"{_REFINER}/ff/up"),
        linear(f"{r}.ff.net.2", f"{_REFINER}/ff/down"),
        linear(f"{r}.norm_out.linear", f"{_REFINER}/norm_out/linear"),
        _embedder(f"{tte}.timestep_embedder", "time_text_embed/timestep_embedder"),
        _embedder(f"{tte}.guidance_embedder", "time_text_embed/guidance_embedder") if cfg.guidance_embeds else [],
        _embedder(f"{tte}.text_embedder", "time_text_embed/text_embedder"),
        linear(f"{d}.norm1.linear", f"{_DOUBLE}/norm1/linear"),
        linear(f"{d}.norm1_context.linear", f"{_DOUBLE}/norm1_context/linear"),
        rules(*[linear(f"{d}.attn.{n}", f"{_DOUBLE}/attn/{n}")
                 for n in (*qkv, "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")]),
        linear(f"{d}.attn.to_out.0", f"{_DOUBLE}/attn/to_out"),
        rules(*[norm(f"{d}.attn.{n}", f"{_DOUBLE}/attn/{n}", bias=False)
                 for n in ("norm_q", "norm_k", "norm_added_q", "norm_added_k")]),
        linear(f"{d}.ff.net.0.proj", f"{_DOUBLE}/ff/up"),
        linear(f"{d}.ff.net.2", f"{_DOUBLE}/ff/down"),
        linear(f"{d}.ff_context.net.0.proj", f"{_DOUBLE}/ff_context/up"),
        linear(f"{d}.ff_context.net.2", f"{_DOUBLE}/ff_context/down"),
        linear(f"{s}.norm.linear", f"{_SINGLE}/norm/linear"),
        rules(*[linear(f"{s}.attn.{n}", f"{_SINGLE}/attn/{n}") for n in qkv]),
        rules(*[norm(f"{s}.attn.{n}", f"{_SINGLE}/attn/{n}", bias=False) for n in ("norm_q", "norm_k")]),
        linear(f"{s}.proj_mlp", f"{_SINGLE}/proj_mlp"),
        Rule(f"{s}.proj_out.weight[attn]", f"{_SINGLE}/proj_out/attn/kernel", "linear"),
        Rule(f"{s}.proj_out.weight[mlp]", f"{_SINGLE}/proj_out/mlp/kernel", "linear"),
        Rule(f"{s}.proj_out.bias", f"{_SINGLE}/proj_out/bias"),
        Rule("norm_out.linear.weight[scale]", "norm_out/scale_linear/kernel", "linear"),
        Rule("norm_out.linear.bias[scale]", "norm_out/scale_linear/bias"),
        Rule("norm_out.linear.weight[shift]", "norm_out/shift_linear/kernel", "linear"),
        Rule("norm_out.linear.bias[shift]", "norm_out/shift_linear/bias"),
        linear("proj_out", "proj_out"),
    ))


def transformer_views_original(cfg: HunyuanVideoTransformerConfig) -> TensorViews:
    """The original release's views: fused q/k/v (refiner, both streams of the dual-stream blocks), the single-stream
    ``linear1`` (q, k, v, MLP-in: ``dim, dim, dim, mlp_dim`` output features) and ``linear2`` (input features
    ``attn``, ``mlp``), and the final modulation's halves (``shift`` first, as stored)."""
    qkv = ("q", "k", "v")
    d, m = cfg.dim, cfg.mlp_dim
    return TensorViews(split={
        r"txt_in\.individual_token_refiner\.blocks\.\d+\.self_attn_qkv\.(weight|bias)": qkv,
        r"double_blocks\.\d+\.(img|txt)_attn_qkv\.(weight|bias)": qkv,
        r"single_blocks\.\d+\.linear1\.(weight|bias)": Split((*qkv, "mlp"), (d, d, d, m)),
        r"single_blocks\.\d+\.linear2\.weight": Split(("attn", "mlp"), (d, m), axis=1),
        r"final_layer\.adaLN_modulation\.1\.(weight|bias)": ("shift", "scale"),
    })


def _split_linear(key: str, part: str, path: str) -> list[Rule]:
    return [Rule(f"{key}.weight[{part}]", f"{path}/kernel", "linear"), Rule(f"{key}.bias[{part}]", f"{path}/bias")]


def transformer_keymap_original(cfg: HunyuanVideoTransformerConfig) -> KeyMap:
    """Key map of the original release's ``HYVideoDiffusionTransformer`` state dict, read through
    :func:`transformer_views_original`; the table in this module's docstring lists every rename."""
    r, d, s = "txt_in.individual_token_refiner.blocks.{i}", "double_blocks.{i}", "single_blocks.{i}"
    qkv = ("q", "k", "v")
    return KeyMap(rules(
        conv("img_in.proj", "x_embedder/proj", dims=3),
        _embedder("txt_in.t_embedder", "context_embedder/time_text_embed/timestep_embedder", "mlp.0", "mlp.2"),
        _embedder("txt_in.c_embedder", "context_embedder/time_text_embed/text_embedder"),
        linear("txt_in.input_embedder", "context_embedder/proj_in"),
        norm(f"{r}.norm1", f"{_REFINER}/norm1"),
        rules(*[_split_linear(f"{r}.self_attn_qkv", n, f"{_REFINER}/attn/to_{n}") for n in qkv]),
        linear(f"{r}.self_attn_proj", f"{_REFINER}/attn/to_out"),
        norm(f"{r}.norm2", f"{_REFINER}/norm2"),
        linear(f"{r}.mlp.fc1", f"{_REFINER}/ff/up"),
        linear(f"{r}.mlp.fc2", f"{_REFINER}/ff/down"),
        linear(f"{r}.adaLN_modulation.1", f"{_REFINER}/norm_out/linear"),
        _embedder("time_in", "time_text_embed/timestep_embedder", "mlp.0", "mlp.2"),
        _embedder("guidance_in", "time_text_embed/guidance_embedder", "mlp.0", "mlp.2") if cfg.guidance_embeds else [],
        _embedder("vector_in", "time_text_embed/text_embedder", "in_layer", "out_layer"),
        linear(f"{d}.img_mod.linear", f"{_DOUBLE}/norm1/linear"),
        linear(f"{d}.txt_mod.linear", f"{_DOUBLE}/norm1_context/linear"),
        rules(*[_split_linear(f"{d}.img_attn_qkv", n, f"{_DOUBLE}/attn/to_{n}") for n in qkv]),
        rules(*[_split_linear(f"{d}.txt_attn_qkv", n, f"{_DOUBLE}/attn/add_{n}_proj") for n in qkv]),
        norm(f"{d}.img_attn_q_norm", f"{_DOUBLE}/attn/norm_q", bias=False),
        norm(f"{d}.img_attn_k_norm", f"{_DOUBLE}/attn/norm_k", bias=False),
        norm(f"{d}.txt_attn_q_norm", f"{_DOUBLE}/attn/norm_added_q", bias=False),
        norm(f"{d}.txt_attn_k_norm", f"{_DOUBLE}/attn/norm_added_k", bias=False),
        linear(f"{d}.img_attn_proj", f"{_DOUBLE}/attn/to_out"),
        linear(f"{d}.txt_attn_proj", f"{_DOUBLE}/attn/to_add_out"),
        linear(f"{d}.img_mlp.fc1", f"{_DOUBLE}/ff/up"),
        linear(f"{d}.img_mlp.fc2", f"{_DOUBLE}/ff/down"),
        linear(f"{d}.txt_mlp.fc1", f"{_DOUBLE}/ff_context/up"),
        linear(f"{d}.txt_mlp.fc2", f"{_DOUBLE}/ff_context/down"),
        linear(f"{s}.modulation.linear", f"{_SINGLE}/norm/linear"),
        rules(*[_split_linear(f"{s}.linear1", n, f"{_SINGLE}/attn/to_{n}") for n in qkv]),
        _split_linear(f"{s}.linear1", "mlp", f"{_SINGLE}/proj_mlp"),
        norm(f"{s}.q_norm", f"{_SINGLE}/attn/norm_q", bias=False),
        norm(f"{s}.k_norm", f"{_SINGLE}/attn/norm_k", bias=False),
        Rule(f"{s}.linear2.weight[attn]", f"{_SINGLE}/proj_out/attn/kernel", "linear"),
        Rule(f"{s}.linear2.weight[mlp]", f"{_SINGLE}/proj_out/mlp/kernel", "linear"),
        Rule(f"{s}.linear2.bias", f"{_SINGLE}/proj_out/bias"),
        _split_linear("final_layer.adaLN_modulation.1", "scale", "norm_out/scale_linear"),
        _split_linear("final_layer.adaLN_modulation.1", "shift", "norm_out/shift_linear"),
        linear("final_layer.linear", "proj_out"),
    ))


def transformer_checkpoint(reader, cfg: HunyuanVideoTransformerConfig, layout: str = DIFFUSERS):
    """A transformer checkpoint ready for :func:`vidax.checkpoint.loader.load_params`: ``(viewed reader, key map)``.

    Args:
      reader: the checkpoint's tensors (``CheckpointReader`` of the diffusers ``transformer/`` folder, or of the
        original ``mp_rank_00_model_states.pt``; its ``{"module": ...}`` wrapper is unwrapped by the reader).
      layout: ``"diffusers"`` or ``"original"``.

    Returns:
      ``(reader through the layout's views, KeyMap)``; use as
      ``load_params(*transformer_checkpoint(reader, cfg, layout), transformer_specs(cfg), dtype)``.

    Raises:
      ValueError: an unknown layout.
      CheckpointError: a fused tensor that does not divide as the configuration says (named).
    """
    if layout == DIFFUSERS:
        return transformer_views(cfg).reader(reader), transformer_keymap(cfg)
    if layout == ORIGINAL:
        return transformer_views_original(cfg).reader(reader), transformer_keymap_original(cfg)
    raise ValueError(f"unknown HunyuanVideo transformer layout {layout!r}; known: {DIFFUSERS!r}, {ORIGINAL!r}")


#: ``rope_dim_list`` of the original ``HYVideoDiffusionTransformer`` (hard-coded in the repository's model configs,
#: not stored in the weights), for its 128-wide heads.
ORIGINAL_ROPE_AXES_DIM = (16, 56, 56)


def original_transformer_config(path: str | os.PathLike, task: str | None = None,
                                rope_axes_dim: tuple[int, ...] = ORIGINAL_ROPE_AXES_DIM,
                                ) -> HunyuanVideoTransformerConfig:
    """The configuration of an original-release transformer (``mp_rank_00_model_states.pt``), from its tensor shapes.

    The file stores no configuration. Width, patch and channels come from ``img_in.proj.weight``; the head width
    from ``double_blocks.0.img_attn_q_norm.weight``; depths from the block indices; the MLP ratio from
    ``double_blocks.0.img_mlp.fc1``; text and pooled widths from ``txt_in.input_embedder`` and
    ``vector_in.in_layer``; ``guidance_embeds`` from the presence of ``guidance_in``; RoPE as the repository's
    (theta 256, ``rope_axes_dim``). ``image_condition_type``: ``"latent_concat"`` for
    ``2 * out_channels + 1`` input channels (noise, image latents, mask); ``"token_replace"`` for an image-to-video
    model (``task="i2v"``, or a file inside ``hunyuan-video-i2v-720p``) with as many input as output channels.

    Args:
      path: the ``.pt`` file (or a folder holding it).
      task: ``"t2v"`` or ``"i2v"``; None: from the path's model folder (``hunyuan-video-i2v-720p``: ``"i2v"``).
      rope_axes_dim: the repository's ``rope_dim_list`` (not stored in the file): :data:`ORIGINAL_ROPE_AXES_DIM` for
        the released 128-wide heads.

    Raises:
      CheckpointError: the file is not a HunyuanVideo transformer (a tensor the inference needs is missing, named),
        or any read error of :class:`vidax.checkpoint.reader.CheckpointReader`.
    """
    from pathlib import Path

    from vidax.checkpoint.errors import CheckpointError
    from vidax.checkpoint.reader import CheckpointReader

    reader = CheckpointReader(path)
    shapes = {k: tuple(reader.shape(k)) for k in reader.keys()}

    def need(key: str) -> tuple[int, ...]:
        if key not in shapes:
            raise CheckpointError(f"{path}: not an original HunyuanVideo transformer (HYVideoDiffusionTransformer "
                                  f"state dict): tensor {key!r} is missing")
        return shapes[key]

    def count(prefix: str) -> int:
        return 1 + max((int(k.split(".")[len(prefix.split("."))]) for k in shapes if k.startswith(prefix + ".")),
                       default=-1)

    dim, in_channels, pt, p, _ = need("img_in.proj.weight")
    head_dim = need("double_blocks.0.img_attn_q_norm.weight")[0]
    if dim % head_dim:
        raise CheckpointError(f"{path}: width {dim} is not a multiple of the head width {head_dim}")
    if head_dim != sum(rope_axes_dim):
        raise CheckpointError(f"{path}: head width {head_dim}, but the RoPE axes {list(rope_axes_dim)} (the original "
                              f"repository's rope_dim_list) cover {sum(rope_axes_dim)} features")
    out_channels = need("final_layer.linear.weight")[0] // (pt * p * p)
    if task is None:
        # The folder names as given: a link into the Hugging Face cache's blobs resolves to a hash.
        task = "i2v" if any(part.startswith("hunyuan-video-i2v") for part in Path(path).absolute().parts) else "t2v"
    condition = None
    if in_channels == 2 * out_channels + 1:
        condition = "latent_concat"
    elif task == "i2v":
        condition = "token_replace"
    return HunyuanVideoTransformerConfig(
        in_channels=in_channels, out_channels=out_channels, num_attention_heads=dim // head_dim,
        attention_head_dim=head_dim, num_layers=count("double_blocks"), num_single_layers=count("single_blocks"),
        num_refiner_layers=count("txt_in.individual_token_refiner.blocks"),
        mlp_ratio=need("double_blocks.0.img_mlp.fc1.weight")[0] / dim, patch_size=p, patch_size_t=pt,
        guidance_embeds="guidance_in.mlp.0.weight" in shapes, text_embed_dim=need("txt_in.input_embedder.weight")[1],
        pooled_projection_dim=need("vector_in.in_layer.weight")[1], rope_theta=256.0,
        rope_axes_dim=tuple(rope_axes_dim), image_condition_type=condition,
    )
