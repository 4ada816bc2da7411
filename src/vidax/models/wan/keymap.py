"""Wan checkpoint key maps, one per layout.

``transformer_keymap_diffusers``: diffusers ``WanTransformer3DModel``
(``transformer/diffusion_pytorch_model*.safetensors``). Parameter paths follow
the diffusers module names, except the feed-forward pair, named ``ffn/up`` and
``ffn/down`` after their Megatron roles (diffusers ``ffn.net.0.proj``, ``ffn.net.2``).

``transformer_keymap_original``: the Wan repository's ``WanModel``
(``wan/modules/model.py``) as released in ``Wan-AI/Wan2.1-T2V-*``
(``diffusion_pytorch_model*.safetensors`` beside ``config.json``). Same
parameter paths, so both maps fill the same spec tree. The renames agree with
diffusers' ``convert_wan_transformer_to_diffusers``
(``diffusers/loaders/single_file_utils.py``); no tensor needs a reshape:

==================================  ============================================
original (``WanModel``)             diffusers (``WanTransformer3DModel``)
==================================  ============================================
``patch_embedding``                 ``patch_embedding``
``text_embedding.0`` / ``.2``       ``condition_embedder.text_embedder.linear_1`` / ``_2``
``time_embedding.0`` / ``.2``       ``condition_embedder.time_embedder.linear_1`` / ``_2``
``time_projection.1``               ``condition_embedder.time_proj``
``blocks.N.self_attn.{q,k,v,o}``    ``blocks.N.attn1.{to_q,to_k,to_v,to_out.0}``
``blocks.N.self_attn.norm_{q,k}``   ``blocks.N.attn1.norm_{q,k}``
``blocks.N.cross_attn.*``           ``blocks.N.attn2.*`` (same sub-names as above)
``blocks.N.norm3`` (affine)         ``blocks.N.norm2`` (the cross-attention norm)
``blocks.N.ffn.0`` / ``.2``         ``blocks.N.ffn.net.0.proj`` / ``ffn.net.2``
``blocks.N.modulation`` (1, 6, D)   ``blocks.N.scale_shift_table`` (1, 6, D)
``head.head``                       ``proj_out``
``head.modulation`` (1, 2, D)       ``scale_shift_table`` (1, 2, D)
==================================  ============================================

The original ``norm1``/``norm2`` and ``head.norm`` are LayerNorms without
affine parameters (no tensors); the original ``norm2`` is the pre-FFN norm,
which is why the cross-attention norm is ``norm3`` there and ``norm2`` in
diffusers. ``freqs`` (RoPE) is a plain attribute of ``WanModel``, not saved.
"""

from __future__ import annotations

from vidax.checkpoint.keymap import KeyMap, Rule, conv, linear, norm, rules
from vidax.models.wan.config import WanTransformerConfig


def _image_rules_diffusers(cfg: WanTransformerConfig) -> list[Rule]:
    """I2V / FLF2V additions (diffusers): image embedder, image keys/values of every cross-attention."""
    if cfg.image_dim is None:
        return []
    e, b = "condition_embedder.image_embedder", "blocks.{i}.attn2"
    return rules(
        norm(f"{e}.norm1", f"{_IMG}/norm1"),
        linear(f"{e}.ff.net.0.proj", f"{_IMG}/ff/up"),
        linear(f"{e}.ff.net.2", f"{_IMG}/ff/down"),
        norm(f"{e}.norm2", f"{_IMG}/norm2"),
        [Rule(f"{e}.pos_embed", f"{_IMG}/pos_embed")] if cfg.pos_embed_seq_len is not None else [],
        linear(f"{b}.add_k_proj", "blocks/attn2/add_k_proj"),
        linear(f"{b}.add_v_proj", "blocks/attn2/add_v_proj"),
        norm(f"{b}.norm_added_k", "blocks/attn2/norm_added_k", bias=False),
    )


def _image_rules_original(cfg: WanTransformerConfig) -> list[Rule]:
    """I2V / FLF2V additions in the original ``WanModel`` names (``MLPProj`` ``img_emb``, ``WanI2VCrossAttention``)."""
    if cfg.image_dim is None:
        return []
    b = "blocks.{i}.cross_attn"
    return rules(
        norm("img_emb.proj.0", f"{_IMG}/norm1"),
        linear("img_emb.proj.1", f"{_IMG}/ff/up"),
        linear("img_emb.proj.3", f"{_IMG}/ff/down"),
        norm("img_emb.proj.4", f"{_IMG}/norm2"),
        [Rule("img_emb.emb_pos", f"{_IMG}/pos_embed")] if cfg.pos_embed_seq_len is not None else [],
        linear(f"{b}.k_img", "blocks/attn2/add_k_proj"),
        linear(f"{b}.v_img", "blocks/attn2/add_v_proj"),
        norm(f"{b}.norm_k_img", "blocks/attn2/norm_added_k", bias=False),
    )


_IMG = "condition_embedder/image_embedder"


def transformer_keymap_diffusers(cfg: WanTransformerConfig) -> KeyMap:
    """Key map for a diffusers-layout Wan transformer (Wan2.1 T2V / I2V / FLF2V, Wan2.2).

    Image-to-video configurations add ``condition_embedder.image_embedder.{norm1, ff.net.0.proj,
    ff.net.2, norm2[, pos_embed]}`` and ``blocks.N.attn2.{add_k_proj, add_v_proj, norm_added_k}``.
    """

    def attn(name: str) -> list[Rule]:
        k, p = f"blocks.{{i}}.{name}", f"blocks/{name}"
        return rules(
            linear(f"{k}.to_q", f"{p}/to_q"),
            linear(f"{k}.to_k", f"{p}/to_k"),
            linear(f"{k}.to_v", f"{p}/to_v"),
            linear(f"{k}.to_out.0", f"{p}/to_out"),
            norm(f"{k}.norm_q", f"{p}/norm_q", bias=False),
            norm(f"{k}.norm_k", f"{p}/norm_k", bias=False),
        )

    ce = "condition_embedder"
    return KeyMap(
        rules(
            conv("patch_embedding", "patch_embedding", dims=3),
            linear(f"{ce}.time_embedder.linear_1", f"{ce}/time_embedder/linear_1"),
            linear(f"{ce}.time_embedder.linear_2", f"{ce}/time_embedder/linear_2"),
            linear(f"{ce}.time_proj", f"{ce}/time_proj"),
            linear(f"{ce}.text_embedder.linear_1", f"{ce}/text_embedder/linear_1"),
            linear(f"{ce}.text_embedder.linear_2", f"{ce}/text_embedder/linear_2"),
            attn("attn1"),
            attn("attn2"),
            norm("blocks.{i}.norm2", "blocks/norm2") if cfg.cross_attn_norm else [],
            linear("blocks.{i}.ffn.net.0.proj", "blocks/ffn/up"),
            linear("blocks.{i}.ffn.net.2", "blocks/ffn/down"),
            Rule("blocks.{i}.scale_shift_table", "blocks/scale_shift_table"),
            linear("proj_out", "proj_out"),
            Rule("scale_shift_table", "scale_shift_table"),
            _image_rules_diffusers(cfg),
        ),
        # diffusers lists this key as safe to ignore (older conversions carried an unused norm).
        ignore=[r".*norm_added_q\..*"],
    )


def transformer_keymap_original(cfg: WanTransformerConfig) -> KeyMap:
    """Key map for a Wan2.1 transformer in the original release layout (``WanModel`` state dict).

    Fills exactly the spec tree of :func:`vidax.models.wan.transformer.transformer_specs`
    (same parameter paths as :func:`transformer_keymap_diffusers`); the table in this
    module's docstring lists every rename. Image-to-video configurations add ``img_emb.proj.{0,1,3,4}``
    (``MLPProj``: LayerNorm, Linear, GELU, Linear, LayerNorm; FLF2V also ``img_emb.emb_pos``) and
    ``blocks.N.cross_attn.{k_img, v_img, norm_k_img}``, renamed as diffusers'
    ``convert_wan_transformer_to_diffusers`` does.

    Args:
      cfg: the architecture (``cross_attn_norm`` decides whether ``blocks.N.norm3`` exists).

    Returns:
      the :class:`~vidax.checkpoint.keymap.KeyMap`.
    """

    def attn(name: str, path: str) -> list[Rule]:
        k, p = f"blocks.{{i}}.{name}", f"blocks/{path}"
        return rules(
            linear(f"{k}.q", f"{p}/to_q"),
            linear(f"{k}.k", f"{p}/to_k"),
            linear(f"{k}.v", f"{p}/to_v"),
            linear(f"{k}.o", f"{p}/to_out"),
            norm(f"{k}.norm_q", f"{p}/norm_q", bias=False),
            norm(f"{k}.norm_k", f"{p}/norm_k", bias=False),
        )

    ce = "condition_embedder"
    return KeyMap(
        rules(
            conv("patch_embedding", "patch_embedding", dims=3),
            linear("time_embedding.0", f"{ce}/time_embedder/linear_1"),
            linear("time_embedding.2", f"{ce}/time_embedder/linear_2"),
            linear("time_projection.1", f"{ce}/time_proj"),
            linear("text_embedding.0", f"{ce}/text_embedder/linear_1"),
            linear("text_embedding.2", f"{ce}/text_embedder/linear_2"),
            attn("self_attn", "attn1"),
            attn("cross_attn", "attn2"),
            norm("blocks.{i}.norm3", "blocks/norm2") if cfg.cross_attn_norm else [],
            linear("blocks.{i}.ffn.0", "blocks/ffn/up"),
            linear("blocks.{i}.ffn.2", "blocks/ffn/down"),
            Rule("blocks.{i}.modulation", "blocks/scale_shift_table"),
            linear("head.head", "proj_out"),
            Rule("head.modulation", "scale_shift_table"),
            _image_rules_original(cfg),
        )
    )
