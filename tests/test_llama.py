"""Parity of the Llama decoder text tower with transformers' LlamaModel (fp32 and bf16, tiny configs)."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig as HFConfig
from transformers import LlamaForCausalLM, LlamaModel

from vidax.checkpoint.errors import CheckpointError
from vidax.encoders.llama import LlamaConfig, encode, load_llama, rope_inv_freq


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


VARIANTS = {
    # GQA (2 query heads per key/value head), Llama-3's theta, no biases: HunyuanVideo's text tower in miniature.
    "gqa": dict(num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
    # One key/value head, every bias, llama3 RoPE scaling with all three frequency bands present.
    "mqa_bias_llama3": dict(num_key_value_heads=1, attention_bias=True, mlp_bias=True, head_dim=16,
                            rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                             "original_max_position_embeddings": 64}),
}


def hf_config(**kw):
    cfg = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
               rms_norm_eps=1e-5, max_position_embeddings=128)
    cfg.update(kw)
    return HFConfig(**cfg)


def _perturb(model):
    # Random norm scales and biases (the reference initialises them to 1 and 0, which would hide a missed one).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def saved(request, tmp_path_factory):
    torch.manual_seed(0)
    model = LlamaModel(hf_config(**VARIANTS[request.param])).eval()
    _perturb(model)
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path, max_shard_size="40KB")  # sharded, with an index, as the 8B release
    return model, path


def _batch(seed=0, length=24):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 300, (2, length))
    mask = np.ones((2, length), np.int64)
    mask[1, 15:] = 0  # the second prompt is shorter: right padding
    return ids, mask


def test_hidden_states_match_transformers(saved):
    model, path = saved
    assert json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
    params, cfg = load_llama(path)
    ids, mask = _batch()
    with torch.no_grad():
        hs = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                   output_hidden_states=True).hidden_states
    for skip in (0, 2):
        ref = hs[-(skip + 1)].numpy()
        out = np.asarray(encode(params, cfg, ids, mask, num_hidden_layers_to_skip=skip))
        assert out.shape == ref.shape == (2, 24, 32)
        assert _rel(out, ref) < 1e-5, skip
        assert _rel(out[1, :15], ref[1, :15]) < 1e-5  # the padded row's valid positions
    # skip 0 is the normed last layer, skip 2 the un-normed output of layer 2 of 4: they differ.
    assert _rel(hs[-3].numpy(), hs[-1].numpy()) > 0.1


def test_rope_inv_freq_matches_transformers(saved):
    model, path = saved
    _, cfg = load_llama(path)
    np.testing.assert_allclose(rope_inv_freq(cfg), model.rotary_emb.inv_freq.numpy(), rtol=1e-6)


def test_inputs_embeds_and_position_ids(saved):
    model, path = saved
    params, cfg = load_llama(path)
    ids, mask = _batch(1, length=12)
    rng = np.random.default_rng(2)
    embeds = rng.standard_normal((2, 12, 32)).astype(np.float32)
    positions = np.stack([np.arange(12), np.r_[np.arange(7), np.ones(5, int)]])  # as HunyuanVideo I2V builds them
    mask[1, 7:] = 0
    with torch.no_grad():
        ref = model(inputs_embeds=torch.from_numpy(embeds), attention_mask=torch.from_numpy(mask),
                    position_ids=torch.from_numpy(positions), output_hidden_states=True).hidden_states[-2].numpy()
    out = encode(params, cfg, attention_mask=mask, inputs_embeds=embeds, position_ids=positions,
                 num_hidden_layers_to_skip=1)
    assert _rel(out, ref) < 1e-5


def test_bfloat16_weights(saved):
    model, path = saved
    params, cfg = load_llama(path, dtype="bfloat16")
    assert params["layers"]["self_attn"]["q_proj"]["kernel"].dtype == "bfloat16"
    assert params["norm"]["scale"].dtype == np.float32
    ids, mask = _batch()
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                    output_hidden_states=True).hidden_states[-3].numpy()
    assert _rel(encode(params, cfg, ids, mask, num_hidden_layers_to_skip=2), ref) < 1e-2


def test_causal_lm_layout_lm_head_ignored(tmp_path):
    """LlamaForCausalLM folders (``model.`` prefix, ``lm_head.weight``) load the same decoder."""
    torch.manual_seed(1)
    model = LlamaForCausalLM(hf_config(num_hidden_layers=2, num_key_value_heads=2)).eval()
    _perturb(model)
    model.save_pretrained(tmp_path)
    params, cfg = load_llama(tmp_path)
    ids, mask = _batch(3, length=10)
    with torch.no_grad():
        ref = model.model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state
    assert _rel(encode(params, cfg, ids, mask), ref.numpy()) < 1e-5


def test_unknown_tensor_refused(tmp_path):
    torch.manual_seed(2)
    model = LlamaModel(hf_config(num_hidden_layers=1))
    model.save_pretrained(tmp_path)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    state["layers.0.self_attn.extra.weight"] = torch.zeros(2, 2)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="extra"):
        load_llama(tmp_path)


def test_config_forms():
    legacy = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2,
              "rope_theta": 500000.0, "rope_scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                       "high_freq_factor": 4.0,
                                                       "original_max_position_embeddings": 8192},
              "attention_bias": True}
    cfg = LlamaConfig.from_dict(legacy)
    assert (cfg.rope_type, cfg.rope_theta, cfg.rope_factor, cfg.head_dim) == ("llama3", 500000.0, 8.0, 8)
    assert cfg.qkv_bias and cfg.o_bias and cfg.num_key_value_groups == 4
    # transformers' defaults fill a partial LLaVA text_config (the HunyuanVideo-I2V one gives no hidden_size).
    llava = {"model_type": "llava", "text_config": {"model_type": "llama", "num_key_value_heads": 8,
                                                    "rope_theta": 500000.0, "vocab_size": 128320}}
    cfg = LlamaConfig.from_dict(llava)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.head_dim, cfg.vocab_size) == (4096, 32, 128, 128320)
    with pytest.raises(ValueError, match="yarn"):
        LlamaConfig.from_dict({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}})
    with pytest.raises(ValueError, match="not a Llama"):
        LlamaConfig.from_dict({"model_type": "t5"})
    with pytest.raises(ValueError, match="num_hidden_layers"):
        LlamaConfig.from_dict({"num_hidden_layers": "four"})


def test_bad_inputs(saved):
    _, path = saved
    params, cfg = load_llama(path)
    ids, mask = _batch()
    with pytest.raises(ValueError, match="right padding"):
        encode(params, cfg, ids, mask[:, ::-1])
    with pytest.raises(ValueError, match="vocabulary"):
        encode(params, cfg, ids + 300)
    with pytest.raises(ValueError, match="num_hidden_layers_to_skip"):
        encode(params, cfg, ids, num_hidden_layers_to_skip=5)
    with pytest.raises(ValueError, match="exactly one"):
        encode(params, cfg)
    with pytest.raises(CheckpointError, match="config.json"):
        load_llama(path / "nowhere")
