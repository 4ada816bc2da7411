"""Parity of the HunyuanVideo-1.5 transformer with diffusers ``HunyuanVideo15Transformer3DModel`` (fp32 and bf16), its
key maps (diffusers layout and the original release), its configuration and its input checks.

Tiny configurations: 2 heads of 16 (RoPE axes 4 + 6 + 6), 2 dual-stream blocks, the 2-block token refiner and the
1472-wide byT5 input of the original architecture (its ``SingleTokenRefiner(depth=2)`` and ``ByT5Mapper(in_dim=1472)``
are hard-coded), 16-wide Qwen states, 10-wide image features, 4 latent channels (9 in: latents, condition latents,
mask). Three variants: text-to-video (zero image embeddings, zero condition latents and mask), image-to-video (image
embeddings, condition latents on the first frame, mask 1 there) and the MeanFlow (step-distilled) model with
``timestep_r`` and 2 x 2 spatial patches. Every batch has two samples whose Qwen texts keep 5 and 7 of 7 tokens and
whose byT5 texts keep 3 and 0 of 5 (an all-zero byT5 mask). Weights are written by ``save_pretrained`` and read by the
strict loader.
"""

import json
import math
import re
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import HunyuanVideo15Transformer3DModel
from safetensors.torch import save_file

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.loader import load_params
from vidax.checkpoint.reader import CheckpointReader
from vidax.checkpoint.writer import to_state_dict
from vidax.core import mmdit
from vidax.core.params import flatten
from vidax.models.hunyuanvideo15.config import HunyuanVideo15TransformerConfig
from vidax.models.hunyuanvideo15.keymap import (
    original_transformer_config,
    transformer_checkpoint,
    transformer_keymap,
    transformer_views,
)
from vidax.models.hunyuanvideo15.transformer import (
    STACK,
    byt5_projection,
    check_inputs,
    embed_context,
    forward,
    forward_epilogue,
    forward_prologue,
    image_projection,
    num_tokens,
    run_blocks,
    transformer_specs,
)

TEXT, TEXT_2, IMAGE = 7, 5, 4  # Qwen, byT5 and image tokens
TINY = dict(in_channels=9, out_channels=4, num_attention_heads=2, attention_head_dim=16, num_layers=2,
            num_refiner_layers=2, text_embed_dim=16, text_embed_2_dim=1472, image_embed_dim=10,
            rope_axes_dim=(4, 6, 6))
# name -> (config overrides, latent shape (B, C, T, H, W))
VARIANTS = {
    "t2v": ({}, (2, 9, 2, 3, 4)),
    "i2v": ({}, (2, 9, 3, 2, 3)),
    "meanflow": ({"use_meanflow": True, "patch_size": 2}, (2, 9, 2, 4, 6)),
}


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _save(kwargs, path):
    torch.manual_seed(0)
    model = HunyuanVideo15Transformer3DModel(**{**TINY, **kwargs}).eval()
    with torch.no_grad():
        # Norm weights start at 1 and biases at 0: randomise them so a wrong mapping shows.
        for name, prm in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                prm.add_(0.1 * torch.randn_like(prm))
    model.save_pretrained(path)
    cfg = HunyuanVideo15TransformerConfig.from_dict(json.loads((path / "config.json").read_text()))
    return model, cfg


def _masks(b, n, valid, seed=None):
    mask = np.zeros((b, n), np.int64)
    for i, k in enumerate(valid[:b]):
        mask[i, :k] = 1
    return mask


def _inputs(name, cfg, shape, seed=1):
    rng = np.random.default_rng(seed)
    b, _, t, h, w = shape
    c = cfg.out_channels
    latents = np.zeros(shape, np.float32)
    latents[:, :c] = rng.standard_normal((b, c, t, h, w), dtype=np.float32)
    image = np.zeros((b, IMAGE, cfg.image_embed_dim), np.float32)
    if name != "t2v":  # the condition latents and the mask on the first frame, the image's SigLIP features
        latents[:, c:2 * c, :1] = rng.standard_normal((b, c, 1, h, w), dtype=np.float32)
        latents[:, 2 * c, :1] = 1.0
        image = rng.standard_normal(image.shape, dtype=np.float32)
    inputs = dict(
        latents=latents,
        timestep=np.array([937.0, 312.0][:b], np.float32),
        encoder_hidden_states=rng.standard_normal((b, TEXT, cfg.text_embed_dim), dtype=np.float32),
        encoder_attention_mask=_masks(b, TEXT, (5, TEXT)),
        encoder_hidden_states_2=rng.standard_normal((b, TEXT_2, cfg.text_embed_2_dim), dtype=np.float32),
        encoder_attention_mask_2=_masks(b, TEXT_2, (3, 0)),
        image_embeds=image,
    )
    if cfg.use_meanflow:
        inputs["timestep_r"] = np.array([812.0, 0.0][:b], np.float32)  # the next step's timestep (0 at the last)
    return inputs


def _reference(model, inputs):
    with torch.no_grad():
        args = {k: torch.from_numpy(v) for k, v in inputs.items()}
        return model(hidden_states=args.pop("latents"), **args, return_dict=False)[0].numpy()


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    """``variants(name)``: the saved reference model of a variant, built once per module (one reference run)."""
    cache = {}

    def get(name):
        if name not in cache:
            kwargs, shape = VARIANTS[name]
            path = tmp_path_factory.mktemp(f"hunyuanvideo15_{name}")
            model, cfg = _save(kwargs, path)
            inputs = _inputs(name, cfg, shape)
            cache[name] = (name, model, cfg, path, inputs, _reference(model, inputs))
        return cache[name]

    return get


_LOADED: dict = {}


def _load(cfg, path, dtype=jnp.float32, layout="diffusers"):
    key = (str(path), np.dtype(dtype).name, layout)
    if key not in _LOADED:
        _LOADED[key] = load_params(*transformer_checkpoint(CheckpointReader(path), cfg, layout), transformer_specs(cfg),
                                   dtype, source=str(path))
    return _LOADED[key]


def _run(params, cfg, inputs, **kw):
    return np.asarray(forward(params, **inputs, cfg=cfg, **kw))


# -- parity -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_transformer_matches_diffusers_fp32(variants, variant):
    name, _, cfg, path, inputs, ref = variants(variant)
    assert not np.isnan(ref).any()
    out = _run(_load(cfg, path), cfg, inputs)
    assert out.shape == ref.shape == (2, cfg.out_channels, *inputs["latents"].shape[2:])
    assert out.dtype == np.float32
    assert _rel(out, ref) < 1e-5


@pytest.mark.parametrize("variant", ["t2v", "i2v"])
def test_transformer_bf16_close_to_fp32_reference(variants, variant):
    name, _, cfg, path, inputs, ref = variants(variant)
    assert _rel(_run(_load(cfg, path, jnp.bfloat16), cfg, inputs), ref) < 1e-2


def test_the_conditioning_streams_all_reach_the_output(variants):
    """Each stream changes the reference's output (so the parity above covers it): the byT5 text of sample 0 (its
    sample 1 has none), the image, and MeanFlow's ``timestep_r``; sample 1's all-zero byT5 mask hides its byT5
    states."""
    rng = np.random.default_rng(5)
    for name, key, sample in (("i2v", "encoder_hidden_states_2", 0), ("i2v", "image_embeds", 0),
                              ("meanflow", "timestep_r", 1)):
        _, model, cfg, path, inputs, ref = variants(name)
        # (a random change: the projections' LayerNorms remove a constant shift)
        changed = dict(inputs, **{key: inputs[key] + 100 * rng.standard_normal(inputs[key].shape, dtype=np.float32)})
        out = _reference(model, changed)
        assert _rel(out[sample], ref[sample]) > 1e-3, key
        assert _rel(_run(_load(cfg, path), cfg, changed), out) < 1e-5
    _, model, cfg, path, inputs, ref = variants("i2v")
    hidden = dict(inputs, encoder_hidden_states_2=inputs["encoder_hidden_states_2"].copy())
    hidden["encoder_hidden_states_2"][1] += 5.0  # sample 1: mask all zero
    np.testing.assert_allclose(_reference(model, hidden)[1], ref[1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(_run(_load(cfg, path), cfg, hidden)[1], _run(_load(cfg, path), cfg, inputs)[1],
                               rtol=0, atol=1e-6)


def test_text_to_video_without_the_image_stream_is_the_same(variants):
    """``image_embeds=None`` (no image tokens) gives the zero-image reference: zeroed, masked image tokens are keys
    that contribute nothing."""
    name, _, cfg, path, inputs, ref = variants("t2v")
    assert _rel(_run(_load(cfg, path), cfg, dict(inputs, image_embeds=None)), ref) < 1e-5


def test_masks_of_any_pattern_match_the_reference(variants):
    """Masks with holes (the reference indexes tokens by the mask, and masks its refiner densely): our valid-first
    reordering, before the refiner too, gives the same output."""
    name, model, cfg, path, inputs, _ = variants("i2v")
    holes = dict(inputs, encoder_attention_mask=np.array([[1, 0, 1, 1, 0, 0, 1], [1, 1, 1, 1, 1, 1, 0]]),
                 encoder_attention_mask_2=np.array([[0, 1, 0, 1, 1], [1, 0, 0, 0, 0]]))
    ref = _reference(model, holes)
    assert _rel(_run(_load(cfg, path), cfg, holes), ref) < 1e-5


def test_text_to_video_rule_is_per_sample(variants):
    """A text-to-video sample (zero image features) batched with an image-to-video one: each gives its own result
    (the reference applies the rule to the whole batch, so it is run per sample here)."""
    name, model, cfg, path, inputs, _ = variants("i2v")
    mixed = dict(inputs, image_embeds=inputs["image_embeds"].copy())
    mixed["image_embeds"][0] = 0.0
    out = _run(_load(cfg, path), cfg, mixed)
    for i in range(2):
        ref = _reference(model, {k: v[i:i + 1] for k, v in mixed.items()})
        assert _rel(out[i:i + 1], ref) < 1e-5


def _original_reorder(a, b, a_mask, b_mask, zero_feat):
    """``HunyuanVideo_1_5_DiffusionTransformer.reorder_txt_token`` (Tencent-Hunyuan/HunyuanVideo-1.5
    ``hyvideo/models/transformers/hunyuanvideo_1_5_transformer.py``), restated in NumPy."""
    out, masks = [], []
    for i in range(a.shape[0]):
        am, bm = a_mask[i].astype(bool), b_mask[i].astype(bool)
        if zero_feat:
            rows = [a[i][am], b[i][bm], np.zeros_like(a[i][~am]), np.zeros_like(b[i][~bm])]
        else:
            rows = [a[i][am], b[i][bm], a[i][~am], b[i][~bm]]
        out.append(np.concatenate(rows))
        masks.append(np.concatenate([am[am], bm[bm], am[~am], bm[~bm]]))
    return np.stack(out), np.stack(masks).astype(np.int64)


@pytest.mark.parametrize("variant", ["t2v", "i2v"])
def test_context_order_is_the_original_repositorys(variants, variant):
    """The context stream equals the original's: byT5 and Qwen reordered with their padding zeroed, then the image
    tokens in front (``mask_type="t2v"`` with zero features: masked and zeroed), each stream plus its
    ``cond_type_embedding`` row."""
    name, _, cfg, path, inputs, _ = variants(variant)
    params = _load(cfg, path)
    t = jnp.asarray(inputs["timestep"])
    cond = np.asarray(params["cond_type_embed"]["embedding"])
    refine = jax.jit(mmdit.refine_text, static_argnums=4)
    txt = np.asarray(refine(params["context_embedder"], inputs["encoder_hidden_states"],
                            inputs["encoder_attention_mask"], t, cfg.attention_head_dim)) + cond[0]
    byt5 = np.asarray(jax.jit(byt5_projection)(params, inputs["encoder_hidden_states_2"])) + cond[1]
    txt, mask = _original_reorder(byt5, txt, inputs["encoder_attention_mask_2"], inputs["encoder_attention_mask"],
                                  zero_feat=True)
    vision = inputs["image_embeds"]
    image = np.asarray(jax.jit(image_projection)(params, vision))
    if name == "t2v":
        assert not vision.any()
        image_mask, image = np.zeros(image.shape[:2], np.int64), image * 0.0
    else:
        image_mask = np.ones(image.shape[:2], np.int64)
    want, want_mask = _original_reorder(image + cond[2], txt, image_mask, mask, zero_feat=False)
    c, valid = jax.jit(embed_context, static_argnums=7)(params, *(jnp.asarray(inputs[k]) for k in (
        "encoder_hidden_states", "encoder_attention_mask", "encoder_hidden_states_2", "encoder_attention_mask_2",
        "image_embeds")), t, cfg)
    np.testing.assert_allclose(np.asarray(c), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(valid), want_mask.sum(1))
    assert (want_mask == (np.arange(want_mask.shape[1]) < want_mask.sum(1, keepdims=True))).all()  # valid first


def test_prologue_blocks_epilogue_compose_and_zero_blocks_are_identities(variants):
    """The offloading hook: forward = prologue, the stack, epilogue; a chunk padded with an all-zero block (its AdaLN
    gates are zero) gives the same streams."""
    name, _, cfg, path, inputs, ref = variants("meanflow")
    params = _load(cfg, path)
    x, c, block_inputs = jax.jit(partial(forward_prologue, cfg=cfg))(params, **inputs)
    s = num_tokens(cfg, inputs["latents"].shape)
    padded = jax.tree.map(lambda a: jnp.concatenate([a, jnp.zeros_like(a[:1])]), params[STACK])
    blocks = jax.jit(partial(run_blocks, cfg=cfg, video_tokens=s))
    x1, c1 = blocks(params[STACK], x, c, block_inputs)
    x2, c2 = blocks(padded, x, c, block_inputs)
    np.testing.assert_array_equal(np.asarray(x2), np.asarray(x1))
    np.testing.assert_array_equal(np.asarray(c2), np.asarray(c1))
    out = forward_epilogue(params, x1, block_inputs.temb, cfg=cfg, latent_shape=inputs["latents"].shape)
    assert _rel(out, ref) < 1e-5


def test_fp32_leaves_stay_fp32_in_bf16(variants):
    name, _, cfg, path, _, _ = variants("meanflow")
    p = _load(cfg, path, jnp.bfloat16)
    fp32 = [p[STACK]["norm1"]["linear"]["kernel"], p[STACK]["norm1_context"]["linear"]["bias"],
            p["norm_out"]["scale_linear"]["kernel"], p["time_embed"]["timestep_embedder_r"]["linear_1"]["kernel"],
            p["context_embedder"]["time_text_embed"]["text_embedder"]["linear_2"]["kernel"],
            p["context_embedder"]["token_refiner"]["refiner_blocks"]["norm_out"]["linear"]["kernel"],
            p["context_embedder_2"]["linear_3"]["kernel"], p["image_embedder"]["norm_out"]["scale"],
            p["image_embedder"]["linear_1"]["kernel"], p["cond_type_embed"]["embedding"],
            p[STACK]["attn"]["norm_added_q"]["scale"], p["x_embedder"]["proj"]["kernel"]]
    assert all(a.dtype == jnp.float32 for a in fp32)
    bf16 = [p[STACK]["attn"]["to_q"]["kernel"], p[STACK]["ff_context"]["up"]["kernel"],
            p[STACK]["attn"]["to_add_out"]["kernel"], p["context_embedder"]["proj_in"]["kernel"],
            p["proj_out"]["kernel"]]
    assert all(a.dtype == jnp.bfloat16 for a in bf16)


@pytest.mark.parametrize("variant", ["meanflow"])
def test_views_and_keymap_write_back_the_diffusers_state_dict(variants, variant):
    """Our tree written back through the key map and merged through the views is the reference's state dict."""
    name, model, cfg, path, _, _ = variants(variant)
    host = jax.tree.map(np.asarray, _load(cfg, path))
    back = transformer_views(cfg).merge(to_state_dict(host, transformer_keymap(cfg), transformer_specs(cfg)), {})
    ref = {k: v.numpy() for k, v in model.state_dict().items()}
    assert sorted(back) == sorted(ref)
    for k, v in ref.items():
        np.testing.assert_array_equal(back[k], v, err_msg=k)


def test_diffusers_layout_is_strict(variants, tmp_path):
    """A missing tensor, an unknown one and a wrong shape are each named."""
    name, model, cfg, path, _, _ = variants("t2v")
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    del sd["transformer_blocks.1.attn.norm_added_k.weight"]
    sd["transformer_blocks.0.attn.extra.weight"] = torch.zeros(2)
    sd["image_embedder.linear_1.weight"] = torch.zeros(10, 9)
    save_file(sd, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    with pytest.raises(CheckpointError) as e:
        load_params(*transformer_checkpoint(CheckpointReader(tmp_path), cfg), transformer_specs(cfg))
    message = str(e.value)
    for what in ("transformer_blocks.1.attn.norm_added_k.weight", "transformer_blocks.0.attn.extra.weight",
                 "image_embedder.linear_1.weight"):
        assert what in message, (what, message)


# -- the original release's layout ----------------------------------------------------------------------------------


def _original_state_dict(sd: dict, cfg) -> dict:
    """The original ``HunyuanVideo_1_5_DiffusionTransformer`` names of a diffusers state dict: diffusers'
    ``scripts/convert_hunyuan_video1_5_to_diffusers.py`` (``convert_hyvideo15_transformer_to_diffusers``) run
    backwards, restated here: the refiner's q/k/v fused, the final modulation's halves swapped back to (shift,
    scale)."""
    sd = {k: v.clone() for k, v in sd.items()}
    out = {}

    def rename(src, dst):
        for suffix in ("weight", "bias"):
            if f"{src}.{suffix}" in sd:
                out[f"{dst}.{suffix}"] = sd.pop(f"{src}.{suffix}")

    rename("time_embed.timestep_embedder.linear_1", "time_in.mlp.0")
    rename("time_embed.timestep_embedder.linear_2", "time_in.mlp.2")
    rename("time_embed.timestep_embedder_r.linear_1", "time_r_in.mlp.0")
    rename("time_embed.timestep_embedder_r.linear_2", "time_r_in.mlp.2")
    ce = "context_embedder"
    rename(f"{ce}.time_text_embed.timestep_embedder.linear_1", "txt_in.t_embedder.mlp.0")
    rename(f"{ce}.time_text_embed.timestep_embedder.linear_2", "txt_in.t_embedder.mlp.2")
    rename(f"{ce}.time_text_embed.text_embedder.linear_1", "txt_in.c_embedder.linear_1")
    rename(f"{ce}.time_text_embed.text_embedder.linear_2", "txt_in.c_embedder.linear_2")
    rename(f"{ce}.proj_in", "txt_in.input_embedder")
    for i in range(cfg.num_refiner_layers):
        src, dst = f"{ce}.token_refiner.refiner_blocks.{i}", f"txt_in.individual_token_refiner.blocks.{i}"
        rename(f"{src}.norm1", f"{dst}.norm1")
        for s in ("weight", "bias"):
            out[f"{dst}.self_attn_qkv.{s}"] = torch.cat([sd.pop(f"{src}.attn.to_{n}.{s}") for n in "qkv"])
        rename(f"{src}.attn.to_out.0", f"{dst}.self_attn_proj")
        rename(f"{src}.norm2", f"{dst}.norm2")
        rename(f"{src}.ff.net.0.proj", f"{dst}.mlp.fc1")
        rename(f"{src}.ff.net.2", f"{dst}.mlp.fc2")
        rename(f"{src}.norm_out.linear", f"{dst}.adaLN_modulation.1")
    rename("context_embedder_2.norm", "byt5_in.layernorm")
    for n in (1, 2, 3):
        rename(f"context_embedder_2.linear_{n}", f"byt5_in.fc{n}")
    for src, n in (("norm_in", 0), ("linear_1", 1), ("linear_2", 3), ("norm_out", 4)):
        rename(f"image_embedder.{src}", f"vision_in.proj.{n}")
    rename("x_embedder.proj", "img_in.proj")
    out["cond_type_embedding.weight"] = sd.pop("cond_type_embed.weight")
    for i in range(cfg.num_layers):
        src, dst = f"transformer_blocks.{i}", f"double_blocks.{i}"
        rename(f"{src}.norm1.linear", f"{dst}.img_mod.linear")
        rename(f"{src}.norm1_context.linear", f"{dst}.txt_mod.linear")
        for n in "qkv":
            rename(f"{src}.attn.to_{n}", f"{dst}.img_attn_{n}")
            rename(f"{src}.attn.add_{n}_proj", f"{dst}.txt_attn_{n}")
        rename(f"{src}.attn.norm_q", f"{dst}.img_attn_q_norm")
        rename(f"{src}.attn.norm_k", f"{dst}.img_attn_k_norm")
        rename(f"{src}.attn.norm_added_q", f"{dst}.txt_attn_q_norm")
        rename(f"{src}.attn.norm_added_k", f"{dst}.txt_attn_k_norm")
        rename(f"{src}.attn.to_out.0", f"{dst}.img_attn_proj")
        rename(f"{src}.attn.to_add_out", f"{dst}.txt_attn_proj")
        rename(f"{src}.ff.net.0.proj", f"{dst}.img_mlp.fc1")
        rename(f"{src}.ff.net.2", f"{dst}.img_mlp.fc2")
        rename(f"{src}.ff_context.net.0.proj", f"{dst}.txt_mlp.fc1")
        rename(f"{src}.ff_context.net.2", f"{dst}.txt_mlp.fc2")
    for s in ("weight", "bias"):
        scale, shift = sd.pop(f"norm_out.linear.{s}").chunk(2)
        out[f"final_layer.adaLN_modulation.1.{s}"] = torch.cat([shift, scale])
    rename("proj_out", "final_layer.linear")
    assert not sd, sorted(sd)
    return out


def _original_config(cfg) -> dict:
    """The release's ``transformer/<variant>/config.json`` keys for ``cfg`` (Tencent-Hunyuan/HunyuanVideo-1.5's
    ``HunyuanVideo_1_5_DiffusionTransformer``; the released values but the sizes)."""
    return {"_class_name": "HunyuanVideo_1_5_DiffusionTransformer", "attn_mode": "flash", "attn_param": None,
            "concat_condition": True, "glyph_byT5_v2": True, "guidance_embed": False,
            "heads_num": cfg.num_attention_heads, "hidden_size": cfg.dim, "ideal_resolution": "480p",
            "ideal_task": "i2v", "in_channels": cfg.out_channels, "is_reshape_temporal_channels": False,
            "mlp_act_type": "gelu_tanh", "mlp_width_ratio": 4, "mm_double_blocks_depth": cfg.num_layers,
            "mm_single_blocks_depth": 0, "out_channels": cfg.out_channels,
            "patch_size": [cfg.patch_size_t, cfg.patch_size, cfg.patch_size], "qk_norm": True, "qk_norm_type": "rms",
            "qkv_bias": True, "rope_dim_list": list(cfg.rope_axes_dim), "rope_theta": 256,
            "text_pool_type": None, "text_projection": "single_refiner", "text_states_dim": cfg.text_embed_dim,
            "text_states_dim_2": None, "use_attention_mask": True, "use_cond_type_embedding": True,
            "use_meanflow": cfg.use_meanflow, "vision_projection": "linear",
            "vision_states_dim": cfg.image_embed_dim}


@pytest.fixture(scope="module")
def original(variants, tmp_path_factory):
    saved = variants("meanflow")
    name, model, cfg, path, inputs, ref = saved
    folder = tmp_path_factory.mktemp("original") / "transformer" / "480p_i2v_step_distilled"
    folder.mkdir(parents=True)
    save_file(_original_state_dict(model.state_dict(), cfg), str(folder / "diffusion_pytorch_model.safetensors"))
    (folder / "config.json").write_text(json.dumps(_original_config(cfg)))
    return saved, folder


def test_original_layout_gives_exactly_the_diffusers_output(original):
    (name, _, cfg, path, inputs, ref), folder = original
    assert original_transformer_config(folder) == cfg  # 9 = 2 x 4 + 1 input channels, patch [1, 2, 2], MeanFlow
    diffusers_params = _load(cfg, path)
    original_params = _load(cfg, folder, layout="original")
    flat_d, flat_o = dict(flatten(diffusers_params)), dict(flatten(original_params))
    assert flat_d.keys() == flat_o.keys()
    for k in flat_d:
        np.testing.assert_array_equal(np.asarray(flat_o[k]), np.asarray(flat_d[k]), err_msg=k)
    out = _run(original_params, cfg, inputs)
    np.testing.assert_array_equal(out, _run(diffusers_params, cfg, inputs))
    assert _rel(out, ref) < 1e-5


def test_original_layout_strict_errors_name_the_fused_tensor(original, tmp_path):
    (name, model, cfg, _, _, _), folder = original
    sd = _original_state_dict(model.state_dict(), cfg)
    sd["txt_in.individual_token_refiner.blocks.1.self_attn_qkv.weight"] = sd[
        "txt_in.individual_token_refiner.blocks.1.self_attn_qkv.weight"][:-1]
    del sd["double_blocks.0.txt_attn_v.bias"]
    save_file(sd, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    qkv = "txt_in.individual_token_refiner.blocks.1.self_attn_qkv.weight"
    with pytest.raises(CheckpointError, match=re.escape(f"{qkv}: shape (95, 32) cannot be split into 3 equal parts")):
        _load(cfg, tmp_path, layout="original")
    sd["txt_in.individual_token_refiner.blocks.1.self_attn_qkv.weight"] = torch.zeros(96, 32)
    save_file(sd, str(tmp_path / "diffusion_pytorch_model.safetensors"))
    with pytest.raises(CheckpointError, match="double_blocks.0.txt_attn_v.bias"):
        _load(cfg, tmp_path, layout="original")


# -- configuration, inputs --------------------------------------------------------------------------------------------


def test_config_defaults_are_the_released_model():
    cfg = HunyuanVideo15TransformerConfig()
    assert (cfg.dim, cfg.mlp_dim, cfg.num_layers, cfg.in_channels, cfg.out_channels) == (2048, 8192, 54, 65, 32)
    n = sum(math.prod(s.shape) for _, s in flatten(transformer_specs(cfg)))
    assert 8.2e9 < n < 8.4e9  # "8.3B"
    release = {**_original_config(cfg), "in_channels": 32, "ideal_task": "t2v", "ideal_resolution": "720p"}
    assert HunyuanVideo15TransformerConfig.from_original_dict(release) == HunyuanVideo15TransformerConfig(
        target_size=960, task_type="t2v")
    step = HunyuanVideo15TransformerConfig.from_original_dict({**release, "use_meanflow": True})
    assert step.use_meanflow and "timestep_embedder_r" in transformer_specs(step)["time_embed"]


@pytest.mark.parametrize("bad, message", [
    ({"num_attention_heads": "two"}, "num_attention_heads='two' should be an integer"),
    ({"use_meanflow": 1}, "use_meanflow=1 should be true or false"),
    ({"rope_axes_dim": [16, "56", 56]}, "rope_axes_dim=\\[16, '56', 56\\] should be a list of integers"),
    ({"mlp_ratio": "4"}, "mlp_ratio='4' should be a number"),
    ({"num_layers": 0}, "num_layers=0 should be a positive integer"),
    ({"text_embed_2_dim": 0}, "text_embed_2_dim=0 \\(must be at least 1\\)"),
    ({"qk_norm": "layer_norm"}, "qk_norm='layer_norm' \\(only 'rms_norm'\\)"),
    ({"task_type": "v2v"}, "task_type='v2v'"),
    ({"rope_axes_dim": [16, 56, 48]}, "sums to 120, not attention_head_dim=128"),
    ({"_class_name": "HunyuanVideoTransformer3DModel"}, "is for 'HunyuanVideoTransformer3DModel'"),
    ({"_class_name": "HunyuanVideo_1_5_DiffusionTransformer"}, "read it with .*from_original_dict"),
])
def test_config_errors_name_the_field(bad, message):
    with pytest.raises(ValueError, match=message):
        HunyuanVideo15TransformerConfig.from_dict({"_class_name": "HunyuanVideo15Transformer3DModel", **bad})


@pytest.mark.parametrize("bad, message", [
    ({"mm_single_blocks_depth": 40}, "mm_single_blocks_depth=40 \\(HunyuanVideo-1.5's architecture has 0\\)"),
    ({"guidance_embed": True}, "guidance_embed=True"),
    ({"glyph_byT5_v2": False}, "glyph_byT5_v2=False"),
    ({"patch_size": [1, 1, 2]}, "patch_size=\\[1, 1, 2\\]"),
    ({"hidden_size": 2050}, "hidden_size=2050 is not a multiple of heads_num=16"),
    ({"heads_num": "16"}, "heads_num='16' should be an integer"),
    ({"_class_name": "HunyuanVideo15Transformer3DModel"}, "not the original release's"),
])
def test_original_config_errors_name_the_key(bad, message):
    with pytest.raises(ValueError, match=message):
        release = _original_config(HunyuanVideo15TransformerConfig())
        HunyuanVideo15TransformerConfig.from_original_dict({**release, **bad})


def test_input_errors_are_named():
    cfg = HunyuanVideo15TransformerConfig(**TINY)
    good = dict(latent_shape=(2, 9, 3, 4, 4), timestep_shape=(2,), text_shape=(2, 7, 16), mask_shape=(2, 7),
                text_2_shape=(2, 5, 1472), mask_2_shape=(2, 5), image_shape=(2, 4, 10), timestep_r_shape=None)
    check_inputs(cfg, **good)
    check_inputs(cfg, **{**good, "image_shape": None, "timestep_shape": ()})
    cases = [
        (dict(latent_shape=(2, 4, 3, 4, 4)), "latents have 4 channels, the transformer takes in_channels=9"),
        (dict(latent_shape=(2, 9, 3, 4)), "latents must be \\(B, C, T, H, W\\)"),
        (dict(text_shape=(2, 7, 12)), "encoder_hidden_states shape \\(2, 7, 12\\) \\(expected \\(2, L, 16\\)\\)"),
        (dict(mask_shape=(2, 6)), "encoder_attention_mask shape \\(2, 6\\) \\(expected \\(2, 7\\)\\)"),
        (dict(text_2_shape=(1, 5, 1472)), "encoder_hidden_states_2 shape \\(1, 5, 1472\\)"),
        (dict(mask_2_shape=(2, 4)), "encoder_attention_mask_2 shape \\(2, 4\\) \\(expected \\(2, 5\\)\\)"),
        (dict(image_shape=(2, 4, 11)), "image_embeds shape \\(2, 4, 11\\)"),
        (dict(timestep_shape=(3,)), "timestep shape \\(3,\\)"),
        (dict(timestep_r_shape=(2,)), "timestep_r was given, but this transformer has no MeanFlow embedder"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            check_inputs(cfg, **{**good, **change})
    patch2 = HunyuanVideo15TransformerConfig(**{**TINY, "patch_size": 2})
    with pytest.raises(ValueError, match=re.escape("must be divisible by (patch_size_t, patch_size, patch_size) = "
                                                   "(1, 2, 2)")):
        check_inputs(patch2, **{**good, "latent_shape": (2, 9, 3, 5, 4)})
