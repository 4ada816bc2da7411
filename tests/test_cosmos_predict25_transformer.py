"""Parity of the Cosmos-Predict2.5 transformer with diffusers ``CosmosTransformer3DModel`` (fp32 and bf16), its key maps
(diffusers layout and the original release's EMA ``.pt``), its configuration and its input checks.

Tiny Predict2.5-shaped configurations (``use_crossattn_projection`` from 24-wide "Qwen" states to a 16-wide context,
AdaLN-LoRA width 4, RoPE NTK scale (1, 3, 3), a condition-mask channel and the padding-mask channel): 2 heads of 16
(RoPE widths t 8, h 4, w 4), 2 blocks, 4 latent channels, batch 2, 5 text tokens. Weights are written by the reference
class (``save_pretrained``: safetensors + config.json) with every norm scale, learnable table and bias randomised, and
read by the strict loader; the original-layout ``.pt`` is a ``torch.save`` of the same tensors under the original
network's names, restated here from ``minimal_v4_dit.py``.

The paper's porting faults for this model each have a regression test: the output is the network's velocity as is
(every parity test compares it with the reference's raw output: no EDM preconditioning); the patch element order
(:func:`test_patchify_and_unpatchify_follow_the_reference_orders`); the timestep scale
(:func:`test_original_layout_runs_the_original_network`, which feeds the reference the original's
``timestep_scale * timesteps``).
"""

import dataclasses
import json

import _torchvision_restated
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import CosmosTransformer3DModel

from vidax.core.embeddings import patchify as patchify_channels_last
from vidax.core.params import flatten
from vidax.models.cosmos_predict25.config import (ORIGINAL_QK_NORM_EPS, ORIGINAL_TIMESTEP_SCALE,
                                                  CosmosTransformerConfig)
from vidax.models.cosmos_predict25.keymap import (ORIGINAL, detect_layout, load_transformer, original_config,
                                                  transformer_keymap_original)
from vidax.models.cosmos_predict25.transformer import check_inputs, forward, patchify, transformer_specs, unpatchify

TEXT_WIDTH, TEXT = 24, 5  # the "Qwen" states' width and token count
TINY = dict(in_channels=5, out_channels=4, num_attention_heads=2, attention_head_dim=16, num_layers=2, mlp_ratio=2.0,
            text_embed_dim=16, adaln_lora_dim=4, max_size=(8, 32, 32), patch_size=(1, 2, 2), rope_scale=(1.0, 3.0, 3.0),
            concat_padding_mask=True, extra_pos_embed_type=None, use_crossattn_projection=True,
            crossattn_proj_in_channels=TEXT_WIDTH, encoder_hidden_states_channels=16)
# name -> (config overrides, latent shape (B, C, T, H, W), timestep kind)
VARIANTS = {
    "t2w": ({}, (2, 4, 3, 4, 6), "sample"),
    "t2w-per-frame": ({}, (2, 4, 3, 4, 6), "frame"),
    "v2w": ({}, (2, 4, 4, 6, 4), "conditioned"),
    "learnable": ({"extra_pos_embed_type": "learnable"}, (2, 4, 2, 6, 8), "conditioned"),
    "pt2": ({"patch_size": (2, 2, 2), "extra_pos_embed_type": "learnable"}, (2, 4, 4, 4, 6), "sample"),
}
SIGMAS = np.array([0.937, 0.3125], np.float32)
CONDITIONAL_FRAME_SIGMA = 0.0001  # diffusers' conditional_frame_timestep (the pipeline's default)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _model(overrides, seed=0):
    torch.manual_seed(seed)
    model = CosmosTransformer3DModel(**{**TINY, **overrides}).eval()
    with torch.no_grad():
        # Norm weights start at 1, the learnable tables at 0: randomise them (and the projection's bias) so a wrong
        # mapping or a missing term shows.
        for name, prm in model.named_parameters():
            if "norm" in name or "pos_emb" in name or name.endswith("bias"):
                prm.add_(0.3 * torch.randn_like(prm))
    return model


_SAVED: dict = {}


def _saved(name, tmp_path_factory):
    """``(model, folder)``: the reference model of a variant and its ``save_pretrained`` folder (once per variant)."""
    if name not in _SAVED:
        model = _model(VARIANTS[name][0])
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        _SAVED[name] = (model, folder)
    return _SAVED[name]


def _inputs(shape, kind, seed=1):
    """Latents, timestep, text states and condition mask: ``kind`` ``"sample"`` (a (B,) timestep, no conditioning),
    ``"frame"`` (the same sigmas as (B, 1, T, 1, 1)) or ``"conditioned"`` (1 and 2 conditioning latent frames at
    0.0001, as the pipeline builds them)."""
    rng = np.random.default_rng(seed)
    b, _, t, h, w = shape
    condition = np.zeros((b, 1, t, h, w), np.float32)
    timestep = SIGMAS[:b]
    if kind != "sample":
        per_frame = np.broadcast_to(SIGMAS[:b, None, None, None, None], (b, 1, t, 1, 1)).copy()
        if kind == "conditioned":
            for i, n in enumerate((1, 2)[:b]):
                condition[i, :, :n] = 1.0
                per_frame[i, :, :n] = CONDITIONAL_FRAME_SIGMA
        timestep = per_frame
    return dict(latents=rng.standard_normal(shape, dtype=np.float32), timestep=timestep,
                encoder_hidden_states=rng.standard_normal((b, TEXT, TEXT_WIDTH), dtype=np.float32),
                condition_mask=condition)


def _reference(model, inputs, padding_mask=None, attention_mask=None, timestep=None):
    _torchvision_restated.install()
    b, _, _, h, w = inputs["latents"].shape
    padding = np.zeros((1, 1, 8 * h, 8 * w), np.float32) if padding_mask is None else padding_mask
    with torch.no_grad():
        out = model(hidden_states=torch.from_numpy(inputs["latents"]),
                    timestep=torch.from_numpy(inputs["timestep"]) if timestep is None else timestep,
                    encoder_hidden_states=torch.from_numpy(inputs["encoder_hidden_states"]),
                    condition_mask=torch.from_numpy(inputs["condition_mask"]), padding_mask=torch.from_numpy(padding),
                    attention_mask=None if attention_mask is None else torch.from_numpy(attention_mask),
                    return_dict=False)[0]
    return out.numpy()


def _ours(loaded, inputs, **kwargs):
    return np.asarray(forward(loaded.params, inputs["latents"], inputs["timestep"], inputs["encoder_hidden_states"],
                              inputs["condition_mask"], cfg=loaded.cfg, **kwargs))


@pytest.mark.parametrize("name", list(VARIANTS))
def test_forward_matches_diffusers(name, tmp_path_factory):
    model, folder = _saved(name, tmp_path_factory)
    loaded = load_transformer(folder)
    assert loaded.layout == "diffusers" and loaded.stacks == {}
    assert loaded.cfg == CosmosTransformerConfig(**{**TINY, **VARIANTS[name][0]})
    inputs = _inputs(*VARIANTS[name][1:])
    ref = _reference(model, inputs)
    out = _ours(loaded, inputs)
    assert out.shape == ref.shape == inputs["latents"].shape
    assert _rel(out, ref) < 1e-5


def test_condition_mask_none_is_zeros_and_conditioning_matters(tmp_path_factory):
    """``condition_mask=None`` is the zero mask of text-to-world; the mask channel and the per-frame timesteps both
    change the result (so the conditioned parity tests could not pass with either dropped)."""
    model, folder = _saved("v2w", tmp_path_factory)
    loaded = load_transformer(folder)
    inputs = _inputs(VARIANTS["v2w"][1], "conditioned")
    zero = dict(inputs, condition_mask=np.zeros_like(inputs["condition_mask"]))
    ours_none = np.asarray(forward(loaded.params, inputs["latents"], inputs["timestep"],
                                   inputs["encoder_hidden_states"], cfg=loaded.cfg))
    assert _rel(ours_none, _reference(model, zero)) < 1e-5
    ref = _reference(model, inputs)
    assert _rel(ours_none, ref) > 1e-3
    per_sample = dict(inputs, timestep=SIGMAS)
    assert _rel(_ours(loaded, per_sample), ref) > 1e-3


def test_padding_mask_and_text_lengths(tmp_path_factory):
    """A nonzero padding mask at pixel size (nearest-resized as torchvision resizes it: an integer factor and a
    fractional one) and per-sample text lengths (the reference with a boolean right-padded ``attention_mask``)."""
    model, folder = _saved("learnable", tmp_path_factory)
    loaded = load_transformer(folder)
    inputs = _inputs(VARIANTS["learnable"][1], "conditioned")
    rng = np.random.default_rng(5)
    lengths = np.array([3, 5], np.int32)
    mask = np.arange(TEXT)[None, :] < lengths[:, None]
    for size in ((48, 64), (13, 21)):
        padding = (rng.random((1, 1, *size)) < 0.5).astype(np.float32)
        ref = _reference(model, inputs, padding_mask=padding, attention_mask=mask)
        out = _ours(loaded, inputs, padding_mask=padding, encoder_lengths=lengths)
        assert _rel(out, ref) < 1e-5
        assert _rel(out, _reference(model, inputs, attention_mask=mask)) > 1e-3  # the padding channel matters


def test_bf16_weights_are_close(tmp_path_factory):
    model, folder = _saved("v2w", tmp_path_factory)
    loaded = load_transformer(folder, dtype=jnp.bfloat16)
    blocks = loaded.params["transformer_blocks"]
    assert blocks["attn1"]["to_q"]["kernel"].dtype == jnp.bfloat16
    assert loaded.params["proj_out"]["kernel"].dtype == jnp.bfloat16
    for leaf in (blocks["norm1"]["linear_2"]["kernel"], loaded.params["time_embed"]["t_embedder"]["linear_2"]["kernel"],
                 loaded.params["time_embed"]["norm"]["scale"], loaded.params["patch_embed"]["proj"]["kernel"],
                 blocks["attn2"]["norm_k"]["scale"]):
        assert leaf.dtype == jnp.float32  # AdaLN tables, timestep embedder, norms, patch embedding pinned
    inputs = _inputs(VARIANTS["v2w"][1], "conditioned")
    err = _rel(_ours(loaded, inputs), _reference(model, inputs))
    assert 1e-5 < err < 1e-2


# --------------------------------------------------------------------------------------------
# The patch orders (paper fault: "a swapped channel order in patchify")
# --------------------------------------------------------------------------------------------


def test_patchify_and_unpatchify_follow_the_reference_orders():
    """Patch (2, 2, 2) over 3 channels: tokens ``(t, h, w)``, patch features ``(c, p_t, p_h, p_w)``
    (``CosmosPatchEmbed``, restated from its ``forward`` with an identity ``proj``); the output features
    ``(p_h, p_w, p_t, c)`` (the reference's unflatten / permute, restated from ``CosmosTransformer3DModel.forward``)."""
    rng = np.random.default_rng(0)
    patch = (2, 2, 2)
    x = rng.standard_normal((2, 3, 4, 6, 4), dtype=np.float32)
    embed = CosmosTransformer3DModel(**{**TINY, "patch_size": patch}).patch_embed
    with torch.no_grad():
        embed.proj = torch.nn.Identity()
        ref = embed(torch.from_numpy(x)).flatten(1, 3).numpy()
    ours = np.asarray(patchify(jnp.asarray(x), patch))
    np.testing.assert_array_equal(ours, ref)
    # The (p_t, p_h, p_w, c) order of a channels-last convolution kernel is another matrix: the test tells them apart.
    assert np.abs(np.asarray(patchify_channels_last(jnp.asarray(x), patch)) - ref).max() > 0.1

    grid, c = (2, 3, 2), 3
    tokens = rng.standard_normal((2, 12, 8 * c), dtype=np.float32)
    t = torch.from_numpy(tokens).unflatten(2, (2, 2, 2, -1)).unflatten(1, grid)
    ref = t.permute(0, 7, 1, 6, 2, 4, 3, 5).flatten(6, 7).flatten(4, 5).flatten(2, 3).numpy()
    np.testing.assert_array_equal(np.asarray(unpatchify(jnp.asarray(tokens), grid, patch, c)), ref)
    # Unpatchify is not patchify's inverse: the inverse would put the features back in (c, p_t, p_h, p_w) order.
    assert np.abs(np.asarray(patchify(jnp.asarray(ref), patch)) - tokens).max() > 0.1


# --------------------------------------------------------------------------------------------
# The original release's layout
# --------------------------------------------------------------------------------------------

# diffusers' scripts/convert_cosmos_to_diffusers.py (TRANSFORMER_KEYS_RENAME_DICT_COSMOS_2_0 and the keys its
# TRANSFORMER_SPECIAL_KEYS_REMAP_COSMOS_2_0 removes), restated: the test checks the original names below against it.
RENAME_COSMOS_2_0 = {
    "t_embedder.1": "time_embed.t_embedder", "t_embedding_norm": "time_embed.norm", "blocks": "transformer_blocks",
    "adaln_modulation_self_attn.1": "norm1.linear_1", "adaln_modulation_self_attn.2": "norm1.linear_2",
    "adaln_modulation_cross_attn.1": "norm2.linear_1", "adaln_modulation_cross_attn.2": "norm2.linear_2",
    "adaln_modulation_mlp.1": "norm3.linear_1", "adaln_modulation_mlp.2": "norm3.linear_2", "self_attn": "attn1",
    "cross_attn": "attn2", "q_proj": "to_q", "k_proj": "to_k", "v_proj": "to_v", "output_proj": "to_out.0",
    "q_norm": "norm_q", "k_norm": "norm_k", "mlp.layer1": "ff.net.0.proj", "mlp.layer2": "ff.net.2",
    "x_embedder.proj.1": "patch_embed.proj", "final_layer.adaln_modulation.1": "norm_out.linear_1",
    "final_layer.adaln_modulation.2": "norm_out.linear_2", "final_layer.linear": "proj_out",
}
REMOVED_COSMOS_2_0 = ("accum_video_sample_counter", "accum_image_sample_counter", "accum_iteration",
                      "accum_train_in_hours", "pos_embedder.seq", "pos_embedder.dim_spatial_range",
                      "pos_embedder.dim_temporal_range", "_extra_state")


def _converted_name(key):
    """diffusers' converter on one original key (None: removed)."""
    key = key.removeprefix("net.")
    for old, new in RENAME_COSMOS_2_0.items():
        key = key.replace(old, new)
    return None if any(r in key for r in REMOVED_COSMOS_2_0) else key


def _original_state_dict(model):
    """The original ``MiniTrainDIT``'s state dict of the same weights, under ``net.`` (the module names of
    ``minimal_v4_dit.py``: ``x_embedder.proj.1`` after its ``Rearrange``, ``t_embedder.1`` after ``Timesteps``, the
    blocks' ``adaln_modulation_*`` ``Sequential(SiLU, Linear, Linear)``, ``self_attn`` / ``cross_attn`` with
    ``{q,k,v,output}_proj`` and ``{q,k}_norm``, ``mlp.layer{1,2}``, ``final_layer``, ``crossattn_proj.0``) with the
    buffers and counters the release carries besides (``pos_embedder`` ranges, ``accum_*``, Transformer Engine's
    ``_extra_state``)."""
    sd = model.state_dict()
    out = {"net.x_embedder.proj.1.weight": sd["patch_embed.proj.weight"],
           "net.t_embedder.1.linear_1.weight": sd["time_embed.t_embedder.linear_1.weight"],
           "net.t_embedder.1.linear_2.weight": sd["time_embed.t_embedder.linear_2.weight"],
           "net.t_embedding_norm.weight": sd["time_embed.norm.weight"],
           "net.t_embedding_norm._extra_state": torch.zeros(0, dtype=torch.uint8),
           "net.final_layer.adaln_modulation.1.weight": sd["norm_out.linear_1.weight"],
           "net.final_layer.adaln_modulation.2.weight": sd["norm_out.linear_2.weight"],
           "net.final_layer.linear.weight": sd["proj_out.weight"],
           "net.crossattn_proj.0.weight": sd["crossattn_proj.0.weight"],
           "net.crossattn_proj.0.bias": sd["crossattn_proj.0.bias"],
           "net.pos_embedder.seq": torch.arange(16, dtype=torch.float32),
           "net.pos_embedder.dim_spatial_range": torch.arange(0, 4, 2, dtype=torch.float32) / 4,
           "net.pos_embedder.dim_temporal_range": torch.arange(0, 8, 2, dtype=torch.float32) / 8,
           "net.accum_video_sample_counter": torch.tensor(7), "net.accum_image_sample_counter": torch.tensor(3),
           "net.accum_iteration": torch.tensor(1000), "net.accum_train_in_hours": torch.tensor(12.5)}
    if model.config.extra_pos_embed_type == "learnable":
        for a in "thw":
            out[f"net.extra_pos_embedder.pos_emb_{a}"] = sd[f"learnable_pos_embed.pos_emb_{a}"]
    for i in range(model.config.num_layers):
        o, d = f"net.blocks.{i}", f"transformer_blocks.{i}"
        for ours, norm in (("self_attn", "norm1"), ("cross_attn", "norm2"), ("mlp", "norm3")):
            for j in (1, 2):
                out[f"{o}.adaln_modulation_{ours}.{j}.weight"] = sd[f"{d}.{norm}.linear_{j}.weight"]
        for ours, attn in (("self_attn", "attn1"), ("cross_attn", "attn2")):
            for q, t in (("q_proj", "to_q"), ("k_proj", "to_k"), ("v_proj", "to_v"), ("output_proj", "to_out.0"),
                         ("q_norm", "norm_q"), ("k_norm", "norm_k")):
                out[f"{o}.{ours}.{q}.weight"] = sd[f"{d}.{attn}.{t}.weight"]
            out[f"{o}.{ours}.q_norm._extra_state"] = torch.zeros(0, dtype=torch.uint8)
        out[f"{o}.mlp.layer1.weight"] = sd[f"{d}.ff.net.0.proj.weight"]
        out[f"{o}.mlp.layer2.weight"] = sd[f"{d}.ff.net.2.weight"]
    return out


def _original_file(name, tmp_path_factory):
    model, folder = _saved(name, tmp_path_factory)
    path = folder / "original_ema_bf16.pt"
    if not path.exists():
        sd = _original_state_dict(model)
        # The restatement converts to exactly the diffusers state dict (every original name accounted for).
        converted = {_converted_name(k): k for k in sd if _converted_name(k) is not None}
        if model.config.extra_pos_embed_type == "learnable":  # the 2.0 table lacks it (keymap docstring, note 1)
            converted = {k.replace("extra_pos_embedder", "learnable_pos_embed"): v for k, v in converted.items()}
        assert set(converted) == set(model.state_dict())
        torch.save({k: v.clone() for k, v in sd.items()}, path)
    return model, folder, path


@pytest.mark.parametrize("name", ["v2w", "learnable"])
def test_original_layout_loads_the_same_parameters(name, tmp_path_factory):
    model, folder, path = _original_file(name, tmp_path_factory)
    diffusers_layout = load_transformer(folder)
    cfg = dataclasses.replace(diffusers_layout.cfg, qk_norm_eps=ORIGINAL_QK_NORM_EPS)
    original = load_transformer(path, cfg)
    assert original.layout == ORIGINAL
    a, b = dict(flatten(diffusers_layout.params)), dict(flatten(original.params))
    assert a.keys() == b.keys() == dict(flatten(transformer_specs(cfg))).keys()
    for key in a:
        np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)


def test_original_layout_runs_the_original_network(tmp_path_factory):
    """The original network differs from diffusers' in one number, the q/k RMSNorms' epsilon (Transformer Engine's
    ``RMSNorm(eps=1e-6)`` against ``Attention``'s default 1e-5; restated by setting the reference's), and in its
    timestep: the sampler's ``timesteps`` (sigma x 1000) times ``timestep_scale`` 0.001 (restated: the reference is
    fed that product), which vidax takes as the sigma it is."""
    model, _, path = _original_file("v2w", tmp_path_factory)
    cfg = CosmosTransformerConfig(**{**TINY, "qk_norm_eps": ORIGINAL_QK_NORM_EPS})
    loaded = load_transformer(path, cfg)
    inputs = _inputs(VARIANTS["v2w"][1], "conditioned")
    scaled = torch.from_numpy(inputs["timestep"] * np.float32(1000)) * ORIGINAL_TIMESTEP_SCALE
    original = _model({})
    original.load_state_dict(model.state_dict())
    for block in original.transformer_blocks:
        for attn in (block.attn1, block.attn2):
            attn.norm_q.eps = attn.norm_k.eps = ORIGINAL_QK_NORM_EPS
    ref = _reference(original, inputs, timestep=scaled)
    assert _rel(_ours(loaded, inputs), ref) < 1e-5
    # With diffusers' epsilon the same weights give diffusers' output (the epsilon is what differs, and it shows).
    assert _rel(_reference(model, inputs), ref) > 1e-6
    # Timesteps left unscaled (sigma x 1000 into the network) are another model altogether.
    unscaled = dict(inputs, timestep=inputs["timestep"] * np.float32(1000))
    assert _rel(_ours(loaded, unscaled), ref) > 0.1


def test_original_layout_is_detected_and_its_release_inferred(tmp_path_factory):
    _, _, path = _original_file("v2w", tmp_path_factory)
    from vidax.checkpoint.reader import CheckpointReader

    reader = CheckpointReader(path)
    assert detect_layout(reader) == ORIGINAL
    with pytest.raises(ValueError, match="is no Cosmos-Predict2.5 release"):
        original_config(reader)
    with pytest.raises(ValueError, match="is no Cosmos-Predict2.5 release"):
        load_transformer(path)  # the tiny network is not a release: the configuration must be passed
    # The releases' key map covers a 2B state dict's names (shapes aside): every key maps or is a dropped one.
    cfg = CosmosTransformerConfig.from_original("2B")
    keymap = transformer_keymap_original(cfg)
    names = [k.replace("blocks.1.", "blocks.27.") for k in _original_state_dict(_model({})).keys()]
    assert all(keymap.match(k) is not None or keymap.ignored(k) for k in names)


def test_original_layout_refuses_an_unknown_key(tmp_path_factory):
    model, folder, _ = _original_file("v2w", tmp_path_factory)
    sd = _original_state_dict(model)
    sd["net.blocks.0.self_attn.q_proj.bias"] = torch.zeros(32)
    path = folder / "extra.pt"
    torch.save(sd, path)
    with pytest.raises(ValueError, match=r"unexpected keys[\s\S]*net\.blocks\.0\.self_attn\.q_proj\.bias"):
        load_transformer(path, CosmosTransformerConfig(**TINY, qk_norm_eps=ORIGINAL_QK_NORM_EPS))


# --------------------------------------------------------------------------------------------
# Configuration and input checks
# --------------------------------------------------------------------------------------------


def test_release_configurations():
    for name, heads, layers in (("2B", 16, 28), ("14B", 40, 36)):
        cfg = CosmosTransformerConfig.from_original(name)
        assert (cfg.num_attention_heads, cfg.attention_head_dim, cfg.num_layers) == (heads, 128, layers)
        assert cfg == CosmosTransformerConfig.from_original(f"Cosmos-2.5-Predict-Base-{name}")
        assert (cfg.in_channels, cfg.out_channels, cfg.patch_embed_in_channels) == (17, 16, 18)
        assert cfg.context_in_channels == 100352 and cfg.rope_dims == (44, 42, 42) and cfg.max_grid == (128, 120, 120)
        assert cfg.rope_scale == (1.0, 3.0, 3.0) and cfg.extra_pos_embed_type is None and cfg.qk_norm_eps == 1e-6
        # A diffusers config.json of the release (the converter's TRANSFORMER_CONFIGS) reads to the same network.
        assert dataclasses.replace(CosmosTransformerConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))),
                                   qk_norm_eps=1e-6) == cfg
    with pytest.raises(ValueError, match="unknown Cosmos-Predict2.5 release"):
        CosmosTransformerConfig.from_original("7B")


@pytest.mark.parametrize("bad,match", [
    ({"num_layers": 100000}, "num_layers=100000"),
    ({"attention_head_dim": 10}, "attention_head_dim=10"),
    ({"num_attention_heads": 512, "attention_head_dim": 512}, "at most 65536"),
    ({"mlp_ratio": 1e9}, "mlp_ratio"),
    ({"crossattn_proj_in_channels": 1 << 30}, "crossattn_proj_in_channels"),
    ({"max_size": [8, 32, 1 << 20]}, "max_size"),
    ({"patch_size": [1, 0, 2]}, "patch_size"),
    ({"rope_scale": [1.0, -3.0, 3.0]}, "rope_scale"),
    ({"extra_pos_embed_type": "sincos"}, "extra_pos_embed_type"),
    ({"in_channels": 9}, "in_channels=9"),
    ({"img_context_dim_in": 1152}, "Cosmos-Transfer2.5"),
    ({"num_attention_heads": "two"}, "num_attention_heads='two'"),
    ({"_class_name": "WanTransformer3DModel"}, "WanTransformer3DModel"),
])
def test_config_refuses(bad, match):
    with pytest.raises(ValueError, match=match):
        CosmosTransformerConfig.from_dict({**TINY, **bad})


def test_input_checks():
    cfg = CosmosTransformerConfig(**TINY)
    good = ((2, 4, 3, 4, 6), (2,), (2, TEXT, TEXT_WIDTH))
    check_inputs(cfg, *good)
    check_inputs(cfg, good[0], (2, 1, 3, 1, 1), good[2], (2, 1, 3, 4, 6), (1, 1, 32, 48), (2,))
    for args, match in [
        (((2, 5, 3, 4, 6), *good[1:]), "5 channels"),
        (((2, 4, 3, 4, 5), *good[1:]), "multiples of patch_size"),
        (((2, 4, 9, 4, 6), *good[1:]), "beyond the transformer's max_size"),
        ((good[0], (2, 1, 2, 1, 1), good[2]), "timestep shape"),
        ((good[0], (3,), good[2]), "timestep shape"),
        ((good[0], good[1], (2, TEXT, 16)), "encoder_hidden_states shape"),
        ((*good, (2, 2, 3, 4, 6)), "condition_mask shape"),
        ((*good, None, (2, 2, 8, 8)), "padding_mask shape"),
        ((*good, None, None, (3,)), "encoder_lengths shape"),
    ]:
        with pytest.raises(ValueError, match=match):
            check_inputs(cfg, *args)
    with pytest.raises(ValueError, match="per-frame timesteps"):
        check_inputs(dataclasses.replace(cfg, patch_size=(2, 2, 2)), (2, 4, 4, 4, 6), (2, 1, 4, 1, 1), good[2])
    with pytest.raises(ValueError, match="no condition-mask channel"):
        check_inputs(dataclasses.replace(cfg, in_channels=4), *good, (2, 1, 3, 4, 6))


def test_forward_compiles_once_per_shape(tmp_path_factory):
    """The step for the same shapes is one compilation (static shapes, no retrace from the host)."""
    _, folder = _saved("t2w", tmp_path_factory)
    loaded = load_transformer(folder)
    inputs = _inputs(VARIANTS["t2w"][1], "sample")
    _ours(loaded, inputs)
    before = forward._cache_size()
    _ours(loaded, dict(inputs, timestep=inputs["timestep"] * 0.5))
    assert forward._cache_size() == before
