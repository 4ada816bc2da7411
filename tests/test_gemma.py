"""Parity of the Gemma 4 unified text tower (LTX-2.5's text encoder) with transformers'
Gemma4UnifiedForConditionalGeneration: every hidden state, left-padded batches, fp32 and bf16."""

import copy

import numpy as np
import pytest
import torch
from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration

from vidax.encoders.gemma import GemmaConfig, encode, load_gemma, rope_inv_freq

PERIOD = ["sliding_attention", "sliding_attention", "full_attention"]
TEXT = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=6, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, global_head_dim=16, num_global_key_value_heads=1, sliding_window=4,
            layer_types=PERIOD * 2,
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                "rope_theta": 1e6}})
VARIANTS = {
    # Gemma 4 12B in miniature: periodic 2 sliding + 1 full, keys reused as values on full layers.
    "k_eq_v": dict(attention_k_eq_v=True),
    # A non-periodic sequence (one scan step), separate value projections, biases.
    "v_proj_bias": dict(attention_k_eq_v=False, attention_bias=True, num_hidden_layers=4,
                        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"]),
}


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _perturb(model):
    # Random norm scales, layer scalars and biases (initialised to 1 and 0, which would hide a missed one).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.2 * torch.randn_like(p))
        for layer in model.model.language_model.layers:
            layer.layer_scalar.fill_(float(0.5 + torch.rand(())))


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def saved(request, tmp_path_factory):
    torch.manual_seed(0)
    text = dict(TEXT, **VARIANTS[request.param])
    model = Gemma4UnifiedForConditionalGeneration(Gemma4UnifiedConfig(text_config=text)).eval()
    _perturb(model)
    path = tmp_path_factory.mktemp("gemma4")
    model.save_pretrained(path)
    return model, path


def _batch(length=12):
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 300, (3, length))
    lengths = np.array([length, 5, 1])  # full, partial, one token
    mask = (np.arange(length)[None] >= (length - lengths)[:, None]).astype(np.int64)  # left padding
    ids = np.where(mask == 1, ids, 0)
    return ids, mask, lengths


def _reference(model, ids, mask):
    with torch.no_grad():
        hs = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                   output_hidden_states=True).hidden_states
    return np.stack([h.float().numpy() for h in hs])


def _check_valid(out, ref, lengths, tol):
    """Per hidden state, the relative error over the valid positions (rows of padding attend to nothing: the
    reference's values there are not compared)."""
    L = out.shape[2]
    assert out.shape == ref.shape
    valid = np.arange(L)[None] >= (L - np.asarray(lengths))[:, None]
    errs = [_rel(out[layer][valid], ref[layer][valid]) for layer in range(out.shape[0])]
    assert max(errs) < tol, errs
    return max(errs)


def test_hidden_states_match_transformers(saved):
    model, path = saved
    params, cfg = load_gemma(path)
    ids, mask, lengths = _batch()
    ref = _reference(model, ids, mask)
    out = np.asarray(encode(params, cfg, ids, mask))
    assert out.shape == (cfg.num_hidden_layers + 1, 3, 12, 32)
    _check_valid(out, ref, lengths, 1e-5)
    assert np.isfinite(out).all()


def test_rope_and_config(saved):
    model, path = saved
    _, cfg = load_gemma(path)
    rotary = model.model.language_model.rotary_emb
    for t in ("sliding_attention", "full_attention"):
        np.testing.assert_allclose(rope_inv_freq(cfg, t), getattr(rotary, f"{t}_inv_freq").numpy(), rtol=1e-6)
    text = model.config.text_config
    for i, t in enumerate(cfg.layer_types):
        attn = model.model.language_model.layers[i].self_attn
        assert (cfg.head(t), cfg.kv_heads(t)) == (attn.head_dim, text.per_layer_config[i].num_key_value_heads)
        assert cfg.k_eq_v(t) == (attn.v_proj is None)


def test_bfloat16_weights(saved):
    model, path = saved
    params, cfg = load_gemma(path, dtype="bfloat16")
    assert params["sliding"]["self_attn"]["q_proj"]["kernel"].dtype == "bfloat16"
    assert params["norm"]["scale"].dtype == np.float32
    ids, mask, lengths = _batch()
    # The reference runs in float32 on the same bf16-rounded matrices (norm scales and layer scalars stay float32,
    # as ours): the error measured is our bf16 computation's, not the rounding of the random tiny weights.
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in rounded.named_parameters():
            if p.ndim == 2:
                p.copy_(p.to(torch.bfloat16).float())
    ref = _reference(rounded, ids, mask)
    out = np.asarray(encode(params, cfg, ids, mask))
    theirs = _reference(copy.deepcopy(model).to(torch.bfloat16), ids, mask)  # transformers' own bf16 run
    L = ids.shape[1]
    valid = np.arange(L)[None] >= (L - lengths)[:, None]
    ours_err = np.array([_rel(out[i][valid], ref[i][valid]) for i in range(len(out))])
    their_err = np.array([_rel(theirs[i][valid], ref[i][valid]) for i in range(len(out))])
    # bf16 rounding of the activations compounds over the layers of a random tiny model (about 0.3% a layer):
    # the first layers are held to 1e-2, every layer to no more than transformers' own bf16 error.
    assert ours_err[:3].max() < 1e-2, ours_err
    assert (ours_err <= their_err).all() and ours_err.max() < 3e-2, (ours_err, their_err)


def test_bad_inputs(saved):
    _, path = saved
    params, cfg = load_gemma(path)
    ids, mask, _ = _batch()
    with pytest.raises(ValueError, match="left padding"):
        encode(params, cfg, ids, mask[:, ::-1])
    with pytest.raises(ValueError, match="vocabulary"):
        encode(params, cfg, ids + 300, mask)
    with pytest.raises(ValueError, match="num_kv_shared_layers"):
        GemmaConfig.from_dict(dict(TEXT, num_kv_shared_layers=2))


def test_flat_release_layout(saved, tmp_path):
    """LTX-2.5's released text-encoder file keeps the language model flat (``model.layers.*``, upstream
    ``_flatten_gemma4_unified_keys_for_comfy``) and renames the towers; it loads to the same parameters."""
    import shutil

    from safetensors.numpy import load_file, save_file

    _, path = saved
    state = load_file(str(path / "model.safetensors"))
    flat = {("model." + k.removeprefix("model.language_model.")) if k.startswith("model.language_model.") else k: v
            for k, v in state.items()}
    flat["vision_model.patch_embedder.weight"] = np.zeros((2, 2), np.float32)
    save_file(flat, str(tmp_path / "model.safetensors"))
    shutil.copy(path / "config.json", tmp_path / "config.json")
    ours, _ = load_gemma(tmp_path)
    ref, _ = load_gemma(path)
    for (ka, a), (kb, b) in zip(sorted(_leaves(ours)), sorted(_leaves(ref))):
        assert ka == kb
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _leaves(tree, prefix=""):
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from _leaves(v, f"{prefix}{k}/")
        else:
            yield f"{prefix}{k}", v


@pytest.mark.parametrize("k_eq_v", [True, False])
def test_config_forms(k_eq_v):
    """gemma-4-12B's config.json (written by transformers 5.10: global_head_dim / num_global_key_value_heads keys)
    and transformers 5.24's own serialisation of it (per_layer_config) give the same architecture."""
    legacy = dict(TEXT, model_type="gemma4_unified_text", attention_k_eq_v=k_eq_v, enable_moe_block=False,
                  num_experts=None, hidden_size_per_layer_input=0, final_logit_softcapping=30.0)
    text = Gemma4UnifiedConfig(text_config={k: v for k, v in legacy.items()
                                            if k not in ("enable_moe_block", "num_experts",
                                                         "hidden_size_per_layer_input")}).to_dict()
    a, b = GemmaConfig.from_dict({"model_type": "gemma4_unified", "text_config": legacy}), GemmaConfig.from_dict(text)
    assert a == b
    assert (a.head("full_attention"), a.kv_heads("full_attention")) == (16, 1 if k_eq_v else 2)
    with pytest.raises(ValueError, match="enable_moe_block"):
        GemmaConfig.from_dict(dict(legacy, enable_moe_block=True))
