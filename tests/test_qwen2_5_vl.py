"""Parity of Qwen2.5-VL's language model with transformers' Qwen2_5_VLTextModel (fp32 and bf16, a tiny config with
GQA, q/k/v biases and multimodal RoPE), in the three checkpoint layouts the reference classes write."""

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from transformers import Qwen2_5_VLConfig as HFConfig
from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLTextModel
from transformers import Qwen2_5_VLTextConfig as HFTextConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLRotaryEmbedding, rotate_half

from vidax.checkpoint.errors import CheckpointError
from vidax.encoders import llama
from vidax.encoders.qwen2_5_vl import QWEN2_5_VL_LAYOUTS, config_from_dict, encode, load_qwen2_5_vl

VOCAB, LAYERS = 300, 4
# head_dim 16: 8 frequencies, split 2 + 3 + 3 between the temporal, height and width rows.
TEXT = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=LAYERS, num_attention_heads=4,
            num_key_value_heads=2, rms_norm_eps=1e-6, max_position_embeddings=256,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]})
VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=64, fullatt_block_indexes=[0])


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _perturb(model):
    # Random norm scales and biases (the reference initialises them to 1 and 0, which would hide a missed one).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def _batch(seed=0, length=20):
    """Two prompts, the second shorter: right padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, (2, length))
    mask = np.ones((2, length), np.int64)
    mask[1, 13:] = 0
    return ids, mask


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return _perturb(Qwen2_5_VLTextModel(HFTextConfig(**TEXT)).eval())


@pytest.fixture(scope="module")
def folders(model, tmp_path_factory):
    """The same language model in the three layouts.

    text: ``Qwen2_5_VLTextModel.save_pretrained``, sharded with an index (diffusers' ``text_encoder/``).
    released: ``Qwen2_5_VLForConditionalGeneration.save_pretrained`` (transformers 5 writes the released names,
      ``model.layers.*``, ``visual.*``, ``lm_head.weight``) with the released top-level config form.
    state_dict: the same class's state dict as transformers 5 holds it (``model.language_model.*``, ``model.visual.*``).
    """
    root = tmp_path_factory.mktemp("qwen")
    model.save_pretrained(root / "text", max_shard_size="40KB")
    torch.manual_seed(1)
    full = _perturb(Qwen2_5_VLForConditionalGeneration(HFConfig(text_config=TEXT, vision_config=VISION)).eval())
    full.model.language_model.load_state_dict(model.state_dict())
    full.save_pretrained(root / "released")
    # The release's config.json keeps the text settings at the top level, RoPE as rope_scaling {"type": "mrope"}.
    saved = json.loads((root / "released" / "config.json").read_text())
    text = {k: v for k, v in saved.pop("text_config").items() if k not in ("rope_parameters", "model_type")}
    legacy = {**saved, **text, "rope_theta": 1000000.0, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}
    (root / "released" / "config.json").write_text(json.dumps(legacy))
    (root / "state_dict").mkdir()
    save_file({k: v.contiguous() for k, v in full.state_dict().items()}, str(root / "state_dict" / "model.safetensors"))
    (root / "state_dict" / "config.json").write_text(json.dumps(full.config.to_dict()))
    return root, full


def test_layouts_hold_what_the_docstring_says(folders):
    root, _ = folders
    index = json.loads((root / "text" / "model.safetensors.index.json").read_text())["weight_map"]
    assert "embed_tokens.weight" in index and len(set(index.values())) > 1
    from vidax.checkpoint.reader import CheckpointReader

    released = set(CheckpointReader(root / "released").keys())
    assert {"model.embed_tokens.weight", "lm_head.weight", "visual.patch_embed.proj.weight"} <= released
    state = set(CheckpointReader(root / "state_dict").keys())
    assert {"model.language_model.embed_tokens.weight", "model.visual.patch_embed.proj.weight"} <= state


def test_hidden_states_match_transformers(model, folders):
    root, _ = folders
    params, cfg = load_qwen2_5_vl(root / "text")
    assert (cfg.qkv_bias, cfg.o_bias, cfg.mrope_section, cfg.num_key_value_groups) == (True, False, (2, 3, 3), 2)
    ids, mask = _batch()
    with torch.no_grad():
        hs = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                   output_hidden_states=True).hidden_states
    assert len(hs) == LAYERS + 1
    for index in (-3, -1, 0, 2, -5):  # -3: HunyuanVideo-1.5's; -1: the normed last layer; 0 and -5: embeddings
        out = np.asarray(encode(params, cfg, ids, mask, hidden_state_index=index))
        assert out.shape == (2, 20, 64)
        assert _rel(out, hs[index].numpy()) < 1e-5, index
        assert _rel(out[1, :13], hs[index].numpy()[1, :13]) < 1e-5  # the padded prompt's tokens
    every = np.asarray(encode(params, cfg, ids, mask, hidden_state_index=None))  # Cosmos-Predict2.5 takes them all
    assert every.shape == (LAYERS + 1, 2, 20, 64)
    for k in range(LAYERS + 1):
        assert _rel(every[k], hs[k].numpy()) < 1e-5, k
    assert _rel(hs[-3].numpy(), hs[-1].numpy()) > 0.1  # the indices select different states


@pytest.mark.parametrize("layout", ["released", "state_dict"])
def test_whole_model_layouts(model, folders, layout):
    """The released Qwen2_5_VLForConditionalGeneration and transformers 5's state dict: the same language model,
    the vision tower and LM head named and left unread."""
    root, full = folders
    params, cfg = load_qwen2_5_vl(root / layout)
    reference, _ = load_qwen2_5_vl(root / "text")
    for a, b in zip(llama_leaves(params), llama_leaves(reference)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ids, mask = _batch(1)
    with torch.no_grad():
        ref = full.model.language_model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                                        output_hidden_states=True).hidden_states[-3].numpy()
    assert _rel(encode(params, cfg, ids, mask, hidden_state_index=-3), ref) < 1e-5


def llama_leaves(tree):
    import jax

    return jax.tree.leaves(tree)


def test_the_release_config_is_read_as_transformers_reads_it(folders):
    root, _ = folders
    legacy = json.loads((root / "released" / "config.json").read_text())
    ours = config_from_dict(legacy)
    ref = HFConfig(**{k: v for k, v in legacy.items() if k not in ("model_type", "architectures")}).text_config
    assert (ours.hidden_size, ours.num_hidden_layers, ours.num_attention_heads, ours.num_key_value_heads,
            ours.rms_norm_eps, ours.rope_theta, list(ours.mrope_section)) == (
        ref.hidden_size, ref.num_hidden_layers, ref.num_attention_heads, ref.num_key_value_heads, ref.rms_norm_eps,
        ref.rope_parameters["rope_theta"], ref.rope_parameters["mrope_section"])
    # Qwen/Qwen2.5-VL-7B-Instruct's config.json (its text keys): the 7B's architecture.
    release = {"model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"],
               "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
               "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "vocab_size": 152064,
               "max_position_embeddings": 128000, "max_window_layers": 28, "sliding_window": 32768,
               "use_sliding_window": False, "tie_word_embeddings": False, "hidden_act": "silu",
               "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "vision_config": {"depth": 32}}
    cfg = config_from_dict(release)
    assert (cfg.head_dim, cfg.num_key_value_groups, cfg.mrope_section, cfg.rope_type) == (128, 7, (16, 24, 24),
                                                                                          "default")
    text_only = config_from_dict({**TEXT, "model_type": "qwen2_5_vl_text"})
    assert (text_only.hidden_size, text_only.mrope_section, text_only.rope_theta) == (64, (2, 3, 3), 1000000.0)


@pytest.mark.parametrize("change, match", [
    ({"model_type": "qwen2_vl"}, "not a Qwen2.5-VL"),
    ({"use_sliding_window": True}, "sliding-window"),
    ({"layer_types": ["sliding_attention"] * LAYERS}, "full_attention"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, "yarn"),
    ({"rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 4]}}, "summing to head_dim / 2 = 8"),
    ({"rope_parameters": {"rope_type": "default", "mrope_section": "2,3,3"}}, "mrope_section"),
    ({"num_hidden_layers": "four"}, "num_hidden_layers"),
    ({"num_attention_heads": 5}, "not divisible"),
    ({"head_dim": 32}, "head_dim 32"),
    ({"num_attention_heads": 4, "num_key_value_heads": 3}, "key/value heads"),
])
def test_bad_configs_are_named(change, match):
    with pytest.raises(ValueError, match=match):
        config_from_dict({**TEXT, "model_type": "qwen2_5_vl_text", **change})


def test_unknown_tensors_are_refused(folders, tmp_path):
    root, full = folders
    state = {k: v.contiguous() for k, v in full.state_dict().items()}
    # A vision tensor in a text-only checkpoint is not one of that layout's ignored names: an error, not a skip.
    text_state = {k.removeprefix("model.language_model."): v for k, v in state.items()
                  if k.startswith("model.language_model.")}
    for name, extra in (("text", {"visual.blocks.0.norm1.weight": torch.zeros(4)}),
                        ("whole", {**state, "model.language_model.layers.0.mlp.extra.weight": torch.zeros(2)})):
        (tmp_path / name).mkdir()
        save_file(text_state | extra if name == "text" else extra, str(tmp_path / name / "model.safetensors"))
        shutil.copy(root / "state_dict" / "config.json", tmp_path / name)
        with pytest.raises(CheckpointError, match="visual.blocks.0.norm1|mlp.extra"):
            load_qwen2_5_vl(tmp_path / name)
    assert QWEN2_5_VL_LAYOUTS[""] == (r".*rotary_emb\.inv_freq\Z",)
    (tmp_path / "none").mkdir()
    save_file({"visual.x": torch.zeros(2)}, str(tmp_path / "none" / "model.safetensors"))
    shutil.copy(root / "state_dict" / "config.json", tmp_path / "none")
    with pytest.raises(CheckpointError, match="no Qwen2.5-VL language model"):
        load_qwen2_5_vl(tmp_path / "none")
    with pytest.raises(CheckpointError, match="config.json"):
        load_qwen2_5_vl(tmp_path / "nowhere")


def test_bfloat16_weights(model, folders):
    root, _ = folders
    params, cfg = load_qwen2_5_vl(root / "text", dtype="bfloat16")
    assert params["layers"]["self_attn"]["q_proj"]["bias"].dtype == "bfloat16"
    assert params["norm"]["scale"].dtype == np.float32
    ids, mask = _batch()
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                    output_hidden_states=True).hidden_states[-3].numpy()
    err = _rel(encode(params, cfg, ids, mask, hidden_state_index=-3), ref)
    assert 0 < err < 1e-2


# --------------------------------------------------------------------------- multimodal RoPE


def _positions(seed=3, length=20):
    """(3, B, L) positions with distinct temporal, height and width rows (as an image's tokens have)."""
    rng = np.random.default_rng(seed)
    return np.stack([np.cumsum(rng.integers(0, 3, (2, length)), axis=-1) for _ in range(3)])


def apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    """transformers 4.5x ``modeling_qwen2_5_vl.apply_multimodal_rotary_pos_emb`` (the release the original
    HunyuanVideo-1.5 pins), restated: sections taken from the full-width cos/sin of every row."""
    mrope_section = mrope_section * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(mrope_section, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(mrope_section, dim=-1))], dim=-1).unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def test_multimodal_rope_matches_transformers(model, folders):
    root, _ = folders
    params, cfg = load_qwen2_5_vl(root / "text")
    positions = _positions()
    assert not np.array_equal(positions[0], positions[1])
    cos, sin = llama.rope_cos_sin(cfg, positions)
    x = torch.zeros(1, dtype=torch.float32)
    ref_cos, ref_sin = Qwen2_5_VLRotaryEmbedding(model.config)(x, torch.from_numpy(positions))
    np.testing.assert_allclose(np.asarray(cos), ref_cos.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(sin), ref_sin.numpy(), rtol=1e-5, atol=1e-5)
    # transformers 4.5x's form: every row's full-width table, sections picked per half.
    rotary = Qwen2_5_VLRotaryEmbedding(model.config)
    freqs = torch.from_numpy(positions).float()[..., None] * rotary.inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    q = torch.randn(2, 4, 20, 16)
    ref_q, _ = apply_multimodal_rotary_pos_emb(q, q, emb.cos(), emb.sin(), [2, 3, 3])
    ours = llama.apply_rope(np.asarray(q.permute(0, 2, 1, 3)), cos, sin)
    assert _rel(ours, ref_q.permute(0, 2, 1, 3).numpy()) < 1e-6
    # The whole model with (3, B, L) positions.
    ids, mask = _batch(2)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                    position_ids=torch.from_numpy(positions), output_hidden_states=True).hidden_states[-1].numpy()
    out = encode(params, cfg, ids, mask, position_ids=positions)
    assert _rel(out, ref) < 1e-5
    # Equal rows are plain RoPE: the default positions.
    plain = encode(params, cfg, ids, mask)
    same = encode(params, cfg, ids, mask, position_ids=np.broadcast_to(np.arange(20), (3, 2, 20)))
    assert _rel(same, plain) < 1e-6 and _rel(out, plain) > 1e-3


def test_bad_inputs(folders):
    root, _ = folders
    params, cfg = load_qwen2_5_vl(root / "text")
    ids, mask = _batch()
    with pytest.raises(ValueError, match="hidden_state_index"):
        encode(params, cfg, ids, mask, hidden_state_index=LAYERS + 1)
    with pytest.raises(ValueError, match="hidden_state_index"):
        encode(params, cfg, ids, mask, hidden_state_index=True)
    with pytest.raises(ValueError, match=r"\(3, 2, 20\)"):
        encode(params, cfg, ids, mask, position_ids=np.zeros((2, 2, 20), np.int32))
    with pytest.raises(ValueError, match="right padding"):
        encode(params, cfg, ids, mask[:, ::-1])
    with pytest.raises(ValueError, match="vocabulary"):
        encode(params, cfg, ids + VOCAB)
