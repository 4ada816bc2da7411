"""HunyuanVideo-1.5 transformer key maps, as data: the diffusers layout and the original release.

Both fill the spec tree of :func:`vidax.models.hunyuanvideo15.transformer.transformer_specs`, whose paths are
diffusers' module names with three differences:

* the final ``norm_out.linear`` (``AdaLayerNormContinuous``: ``scale`` then ``shift``) is read as
  ``norm_out/scale_linear`` and ``norm_out/shift_linear`` (views of the one tensor), so that the original release,
  which stores ``shift`` first, maps exactly without reordering data;
* the feed-forward pairs are ``ff/up``, ``ff/down`` (diffusers ``ff.net.0.proj``, ``ff.net.2``);
* ``cond_type_embed.weight`` (an ``nn.Embedding``) is ``cond_type_embed/embedding``.

Loading is strict (:func:`vidax.checkpoint.loader.load_params`): an unknown, missing or doubly-set key fails, and every
tensor's shape is checked against the spec. Fused tensors of the original layout are split by
:class:`vidax.checkpoint.reader.TensorViews` (views, no copy); error messages name the view keys
(``...self_attn_qkv.weight[k]``), which point at the real tensor.

The original release (``tencent/HunyuanVideo-1.5``, ``transformer/<variant>/diffusion_pytorch_model*.safetensors``,
e.g. ``480p_t2v``, ``720p_i2v_distilled``, ``480p_i2v_step_distilled``) names its modules as the
Tencent-Hunyuan/HunyuanVideo-1.5 repository's ``HunyuanVideo_1_5_DiffusionTransformer``
(``hyvideo/models/transformers/hunyuanvideo_1_5_transformer.py`` and ``modules/``). The renames agree with diffusers'
``scripts/convert_hunyuan_video1_5_to_diffusers.py`` (``convert_hyvideo15_transformer_to_diffusers``):

=============================================  ====================================================
original                                       diffusers
=============================================  ====================================================
``img_in.proj``                                ``x_embedder.proj``
``time_in.mlp.{0,2}``                          ``time_embed.timestep_embedder.linear_{1,2}``
``time_r_in.mlp.{0,2}`` (MeanFlow)             ``time_embed.timestep_embedder_r.linear_{1,2}``
``txt_in.input_embedder``                      ``context_embedder.proj_in``
``txt_in.t_embedder.mlp.{0,2}``                ``context_embedder.time_text_embed.timestep_embedder.*``
``txt_in.c_embedder.linear_{1,2}``             ``context_embedder.time_text_embed.text_embedder.*``
``txt_in.individual_token_refiner.blocks.N``   ``context_embedder.token_refiner.refiner_blocks.N``
  ``.norm1``, ``.norm2``                         ``.norm1``, ``.norm2``
  ``.self_attn_qkv`` (q, k, v fused)             ``.attn.to_q``, ``.attn.to_k``, ``.attn.to_v``
  ``.self_attn_proj``                            ``.attn.to_out.0``
  ``.mlp.fc1``, ``.mlp.fc2``                     ``.ff.net.0.proj``, ``.ff.net.2``
  ``.adaLN_modulation.1``                        ``.norm_out.linear``
``byt5_in.layernorm``, ``.fc{1,2,3}``          ``context_embedder_2.norm``, ``.linear_{1,2,3}``
``vision_in.proj.{0,1,3,4}``                   ``image_embedder.norm_in``, ``.linear_1``, ``.linear_2``, ``.norm_out``
``cond_type_embedding``                        ``cond_type_embed``
``double_blocks.N``                            ``transformer_blocks.N``
  ``.img_mod.linear``, ``.txt_mod.linear``       ``.norm1.linear``, ``.norm1_context.linear``
  ``.img_attn_{q,k,v}``                          ``.attn.to_{q,k,v}``
  ``.txt_attn_{q,k,v}``                          ``.attn.add_{q,k,v}_proj``
  ``.img_attn_{q,k}_norm``                       ``.attn.norm_{q,k}``
  ``.txt_attn_{q,k}_norm``                       ``.attn.norm_added_{q,k}``
  ``.img_attn_proj``, ``.txt_attn_proj``         ``.attn.to_out.0``, ``.attn.to_add_out``
  ``.img_mlp.fc{1,2}``, ``.txt_mlp.fc{1,2}``     ``.ff.net.{0.proj,2}``, ``.ff_context.net.{0.proj,2}``
``final_layer.linear``                         ``proj_out``
``final_layer.adaLN_modulation.1``             ``norm_out.linear`` with its halves swapped (shift, scale ->
                                               scale, shift)
=============================================  ====================================================

Unlike HunyuanVideo 13B's release, the dual-stream blocks store q, k and v separately; only the refiner's are fused.
The LayerNorms without affine parameters (``img_norm1``, ``final_layer.norm_final``, ...) have no tensors.
"""

from __future__ import annotations

import os
from pathlib import Path

from vidax.checkpoint.keymap import KeyMap, Rule, conv, linear, norm, rules
from vidax.checkpoint.reader import TensorViews
from vidax.models.hunyuanvideo15.config import HunyuanVideo15TransformerConfig

DIFFUSERS, ORIGINAL = "diffusers", "original"

_REFINER = "context_embedder/token_refiner/refiner_blocks"
_DOUBLE = "transformer_blocks"


def _embedder(key: str, path: str, first: str = "linear_1", second: str = "linear_2") -> list[Rule]:
    """A two-linear embedder -> ``{path}/linear_{1,2}``."""
    return rules(linear(f"{key}.{first}", f"{path}/linear_1"), linear(f"{key}.{second}", f"{path}/linear_2"))


def transformer_views(cfg: HunyuanVideo15TransformerConfig) -> TensorViews:
    """The diffusers layout's views: ``norm_out.linear.{weight,bias}`` split into ``[scale]``, ``[shift]``."""
    return TensorViews(split={r"norm_out\.linear\.(weight|bias)": ("scale", "shift")})


def _norm_out(key: str) -> list[Rule]:
    return [Rule(f"{key}.weight[scale]", "norm_out/scale_linear/kernel", "linear"),
            Rule(f"{key}.bias[scale]", "norm_out/scale_linear/bias"),
            Rule(f"{key}.weight[shift]", "norm_out/shift_linear/kernel", "linear"),
            Rule(f"{key}.bias[shift]", "norm_out/shift_linear/bias")]


def transformer_keymap(cfg: HunyuanVideo15TransformerConfig) -> KeyMap:
    """Key map of a diffusers ``HunyuanVideo15Transformer3DModel`` (``transformer/*.safetensors``), read through
    :func:`transformer_views` (every variant; ``time_embed.timestep_embedder_r`` with ``use_meanflow``)."""
    r, d = "context_embedder.token_refiner.refiner_blocks.{i}", "transformer_blocks.{i}"
    cte = "context_embedder.time_text_embed"
    qkv = ("to_q", "to_k", "to_v")
    return KeyMap(rules(
        conv("x_embedder.proj", "x_embedder/proj", dims=3),
        norm("image_embedder.norm_in", "image_embedder/norm_in"),
        linear("image_embedder.linear_1", "image_embedder/linear_1"),
        linear("image_embedder.linear_2", "image_embedder/linear_2"),
        norm("image_embedder.norm_out", "image_embedder/norm_out"),
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
        norm("context_embedder_2.norm", "context_embedder_2/norm"),
        rules(*[linear(f"context_embedder_2.linear_{n}", f"context_embedder_2/linear_{n}") for n in (1, 2, 3)]),
        _embedder("time_embed.timestep_embedder", "time_embed/timestep_embedder"),
        _embedder("time_embed.timestep_embedder_r", "time_embed/timestep_embedder_r") if cfg.use_meanflow else [],
        Rule("cond_type_embed.weight", "cond_type_embed/embedding"),
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
        _norm_out("norm_out.linear"),
        linear("proj_out", "proj_out"),
    ))


def transformer_views_original(cfg: HunyuanVideo15TransformerConfig) -> TensorViews:
    """The original release's views: the refiner's fused q/k/v, and the final modulation's halves (``shift`` first,
    as stored)."""
    return TensorViews(split={
        r"txt_in\.individual_token_refiner\.blocks\.\d+\.self_attn_qkv\.(weight|bias)": ("q", "k", "v"),
        r"final_layer\.adaLN_modulation\.1\.(weight|bias)": ("shift", "scale"),
    })


def _split_linear(key: str, part: str, path: str) -> list[Rule]:
    return [Rule(f"{key}.weight[{part}]", f"{path}/kernel", "linear"), Rule(f"{key}.bias[{part}]", f"{path}/bias")]


def transformer_keymap_original(cfg: HunyuanVideo15TransformerConfig) -> KeyMap:
    """Key map of the original release's ``HunyuanVideo_1_5_DiffusionTransformer`` state dict, read through
    :func:`transformer_views_original`; the table in this module's docstring lists every rename."""
    r, d = "txt_in.individual_token_refiner.blocks.{i}", "double_blocks.{i}"
    return KeyMap(rules(
        conv("img_in.proj", "x_embedder/proj", dims=3),
        norm("vision_in.proj.0", "image_embedder/norm_in"),
        linear("vision_in.proj.1", "image_embedder/linear_1"),
        linear("vision_in.proj.3", "image_embedder/linear_2"),
        norm("vision_in.proj.4", "image_embedder/norm_out"),
        _embedder("txt_in.t_embedder", "context_embedder/time_text_embed/timestep_embedder", "mlp.0", "mlp.2"),
        _embedder("txt_in.c_embedder", "context_embedder/time_text_embed/text_embedder"),
        linear("txt_in.input_embedder", "context_embedder/proj_in"),
        norm(f"{r}.norm1", f"{_REFINER}/norm1"),
        rules(*[_split_linear(f"{r}.self_attn_qkv", n, f"{_REFINER}/attn/to_{n}") for n in ("q", "k", "v")]),
        linear(f"{r}.self_attn_proj", f"{_REFINER}/attn/to_out"),
        norm(f"{r}.norm2", f"{_REFINER}/norm2"),
        linear(f"{r}.mlp.fc1", f"{_REFINER}/ff/up"),
        linear(f"{r}.mlp.fc2", f"{_REFINER}/ff/down"),
        linear(f"{r}.adaLN_modulation.1", f"{_REFINER}/norm_out/linear"),
        norm("byt5_in.layernorm", "context_embedder_2/norm"),
        rules(*[linear(f"byt5_in.fc{n}", f"context_embedder_2/linear_{n}") for n in (1, 2, 3)]),
        _embedder("time_in", "time_embed/timestep_embedder", "mlp.0", "mlp.2"),
        _embedder("time_r_in", "time_embed/timestep_embedder_r", "mlp.0", "mlp.2") if cfg.use_meanflow else [],
        Rule("cond_type_embedding.weight", "cond_type_embed/embedding"),
        linear(f"{d}.img_mod.linear", f"{_DOUBLE}/norm1/linear"),
        linear(f"{d}.txt_mod.linear", f"{_DOUBLE}/norm1_context/linear"),
        rules(*[linear(f"{d}.img_attn_{n}", f"{_DOUBLE}/attn/to_{n}") for n in ("q", "k", "v")]),
        rules(*[linear(f"{d}.txt_attn_{n}", f"{_DOUBLE}/attn/add_{n}_proj") for n in ("q", "k", "v")]),
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
        _split_linear("final_layer.adaLN_modulation.1", "scale", "norm_out/scale_linear"),
        _split_linear("final_layer.adaLN_modulation.1", "shift", "norm_out/shift_linear"),
        linear("final_layer.linear", "proj_out"),
    ))


def transformer_checkpoint(reader, cfg: HunyuanVideo15TransformerConfig, layout: str = DIFFUSERS):
    """A transformer checkpoint ready for :func:`vidax.checkpoint.loader.load_params`: ``(viewed reader, key map)``.

    Args:
      reader: the checkpoint's tensors (``CheckpointReader`` of the diffusers ``transformer/`` folder, or of the
        original release's ``transformer/<variant>/`` folder).
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
    raise ValueError(f"unknown HunyuanVideo-1.5 transformer layout {layout!r}; known: {DIFFUSERS!r}, {ORIGINAL!r}")


def original_transformer_config(folder: str | os.PathLike) -> HunyuanVideo15TransformerConfig:
    """The configuration of an original-release variant folder (``transformer/<variant>/config.json``, the
    ``HunyuanVideo_1_5_DiffusionTransformer`` keys; :meth:`HunyuanVideo15TransformerConfig.from_original_dict`).

    Raises:
      CheckpointError: no readable ``config.json`` (named; :func:`vidax.core.config_values.read_json`).
      ValueError: a configuration diffusers' architecture cannot represent (named).
    """
    from vidax.checkpoint.errors import CheckpointError
    from vidax.core.config_values import read_json

    path = Path(folder) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: missing; an original HunyuanVideo-1.5 transformer folder "
                              "(transformer/<variant>/) holds its config.json beside the weights")
    return HunyuanVideo15TransformerConfig.from_original_dict(read_json(path))
