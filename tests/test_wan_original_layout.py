"""The original Wan2.1 release layout (``Wan-AI/Wan2.1-T2V-*``), detected and loaded beside the diffusers layout.

The same tiny random weights are written in both layouts (``original_fixture``); loading either
through the real pipeline code must give the same parameters and outputs. Independent references
for the original names: diffusers' single-file converters (``convert_wan_transformer_to_diffusers``,
``convert_wan_vae_to_diffusers``) and models, and a rename of the Wan ``T5Encoder`` names onto
transformers' ``UMT5EncoderModel`` written here from ``wan/modules/t5.py``'s module structure.
"""

import json
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.checkpoint.errors import CheckpointError
from vidax.checkpoint.keymap import from_layout
from vidax.checkpoint.loader import plan_load
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.core.params import flatten
from vidax.encoders.t5 import UMT5_XXL, encode, t5_config_from_wan_original_shapes, t5_keymap_wan_original, t5_specs
from vidax.core import wan_vae
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.keymap import transformer_keymap_original
from vidax.models.wan.layout import detect_layout, resolve_checkpoint
from vidax.models.wan.original_fixture import tiny_wan_weights, write_diffusers_twin, write_original_checkpoint
from vidax.models.wan.pipeline import WanPipeline, check_checkpoint_dir
from vidax.models.wan.transformer import forward, rope_tables, transformer_specs

jax.config.update("jax_default_matmul_precision", "highest")

LATENT = (1, 16, 2, 4, 6)  # video 5 x 32 x 48


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan_layouts")
    w = tiny_wan_weights(seed=5)
    return w, write_original_checkpoint(root / "Wan2.1-T2V-tiny", weights=w), write_diffusers_twin(root / "diffusers", w)


@pytest.fixture(scope="module")
def pipes(folders):
    _, orig, diff = folders
    return WanPipeline.from_pretrained(orig, dtype="float32"), WanPipeline.from_pretrained(diff, dtype="float32")


def _inputs(cfg, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(LATENT, dtype=np.float32), np.array([731.0], np.float32),
            rng.standard_normal((1, 9, cfg.text_dim), dtype=np.float32))


def _ours_transformer(pipe, latents, t, context):
    cfg = pipe.transformer_cfg
    cos, sin = rope_tables(cfg, latents.shape)
    return np.asarray(forward(pipe.transformer_tree(), jnp.asarray(latents), jnp.asarray(t), jnp.asarray(context),
                              cos, sin, cfg=cfg))


# ----------------------------------------------------------------------------- both layouts, same weights


def test_both_layouts_load_identical_parameters(pipes):
    orig, diff = pipes
    assert (orig.layout, diff.layout) == ("original", "diffusers")
    assert orig.transformer_cfg == diff.transformer_cfg
    assert orig.vae_cfg == diff.vae_cfg
    assert orig.text_cfg == diff.text_cfg
    for name, a, b in (("transformer", orig.transformer_tree(), diff.transformer_tree()),
                       ("vae", orig.vae_params, diff.vae_params), ("text encoder", orig.text_params, diff.text_params)):
        a, b = dict(flatten(a)), dict(flatten(b))
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and np.array_equal(np.asarray(a[k]), np.asarray(b[k])), (name, k)
    # Wan's generate.py samples T2V with shift 5.0 when none is given; diffusers' folder says 3.0.
    assert orig.scheduler_config["flow_shift"] == 5.0 and diff.scheduler_config["flow_shift"] == 3.0
    # With the shift and diffusers' grid given, the original layout samples exactly as the diffusers folder's
    # UniPC; by default it uses the Wan repository's grid (tests/test_wan_schedule.py), which differs at 6 steps.
    a = orig.make_scheduler(flow_shift=3.0, schedule="diffusers").set_timesteps(6)
    b = diff.make_scheduler().set_timesteps(6)
    assert type(a) is type(b) and np.array_equal(np.asarray(a.timesteps), np.asarray(b.timesteps))
    assert not np.array_equal(np.asarray(orig.make_scheduler(flow_shift=3.0).set_timesteps(6).timesteps),
                              np.asarray(b.timesteps))
    assert not np.array_equal(np.asarray(orig.make_scheduler().set_timesteps(6).timesteps), np.asarray(b.timesteps))


def test_outputs_equal_between_layouts(pipes):
    orig, diff = pipes
    latents, t, context = _inputs(orig.transformer_cfg)
    assert _rel(_ours_transformer(orig, latents, t, context), _ours_transformer(diff, latents, t, context)) <= 1e-6
    z = np.random.default_rng(1).standard_normal(LATENT, dtype=np.float32)
    video_o = wan_vae.decode(orig.vae_params, orig.vae_cfg, jnp.asarray(z))
    video_d = wan_vae.decode(diff.vae_params, diff.vae_cfg, jnp.asarray(z))
    assert _rel(video_o, video_d) <= 1e-6
    text_o, text_d = orig.encode_prompt(["a red panda in the snow"]), diff.encode_prompt(["a red panda in the snow"])
    assert _rel(text_o, text_d) <= 1e-6 and float(jnp.abs(text_o).max()) > 0


def test_sharded_original_transformer(folders, tmp_path):
    w, orig, _ = folders
    sharded = write_original_checkpoint(tmp_path / "sharded", weights=w, shards=3)
    assert len(list(sharded.glob("diffusion_pytorch_model-0000?-of-00003.safetensors"))) == 3
    ckpt = resolve_checkpoint(sharded)
    a = CheckpointReader(resolve_checkpoint(orig).transformer_weights)
    b = ckpt.transformer_reader()
    assert sorted(a.keys()) == sorted(b.keys())
    assert all(np.array_equal(a.get(k), b.get(k)) for k in a.keys())


# ----------------------------------------------------------------------------- independent references


def _torch_sd(path):
    if str(path).endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(path, map_location="cpu", weights_only=True)


def _assert_same_tensors(converted: dict, expected_file):
    expected = _torch_sd(expected_file)
    assert sorted(converted) == sorted(expected)
    for k, v in expected.items():
        assert torch.equal(converted[k].float(), v.float()), k


def test_transformer_matches_diffusers_single_file(folders, pipes):
    from diffusers import WanTransformer3DModel
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    _, orig, diff = folders
    original_sd = _torch_sd(orig / "diffusion_pytorch_model.safetensors")
    assert "blocks.0.norm3.weight" in original_sd and "head.modulation" in original_sd
    assert original_sd["blocks.1.modulation"].shape == (1, 6, 64) and original_sd["head.modulation"].shape == (1, 2, 64)
    # diffusers' converter maps our original names onto exactly the diffusers file's tensors.
    _assert_same_tensors(convert_wan_transformer_to_diffusers(dict(original_sd)),
                         diff / "transformer" / "diffusion_pytorch_model.safetensors")
    # And diffusers' model loaded from the original file computes what we compute from it.
    model = WanTransformer3DModel.from_single_file(
        str(orig / "diffusion_pytorch_model.safetensors"), config=str(diff), subfolder="transformer",
        torch_dtype=torch.float32,
    ).eval()
    latents, t, context = _inputs(pipes[0].transformer_cfg, seed=2)
    with torch.no_grad():
        ref = model(torch.from_numpy(latents), torch.from_numpy(t), torch.from_numpy(context), return_dict=False)[0].numpy()
    assert _rel(_ours_transformer(pipes[0], latents, t, context), ref) < 1e-5


def test_vae_matches_diffusers_single_file(folders, pipes):
    from diffusers import AutoencoderKLWan
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

    _, orig, diff = folders
    original_sd = _torch_sd(orig / "Wan2.1_VAE.pth")
    assert {"encoder.conv1.weight", "conv1.weight", "conv2.weight", "decoder.middle.0.residual.0.gamma",
            "decoder.upsamples.4.shortcut.weight", "decoder.upsamples.3.time_conv.weight"} <= set(original_sd)
    assert original_sd["decoder.middle.0.residual.0.gamma"].shape == (64, 1, 1, 1)
    assert original_sd["decoder.middle.1.norm.gamma"].shape == (64, 1, 1)
    _assert_same_tensors(convert_wan_vae_to_diffusers(dict(original_sd)), diff / "vae" / "diffusion_pytorch_model.safetensors")
    model = AutoencoderKLWan.from_single_file(str(orig / "Wan2.1_VAE.pth"), config=str(diff), subfolder="vae",
                                              torch_dtype=torch.float32).eval()
    z = np.random.default_rng(3).standard_normal(LATENT, dtype=np.float32)
    with torch.no_grad():
        ref = model.decode(torch.from_numpy(z)).sample.numpy()
    out = wan_vae.decode(pipes[0].vae_params, pipes[0].vae_cfg, jnp.asarray(z))
    assert _rel(out, ref) < 1e-5


# Wan ``T5Encoder`` (wan/modules/t5.py) -> transformers ``UMT5EncoderModel``: T5SelfAttention has
# norm1, attn(q, k, v, o), norm2, ffn(gate=[Linear, GELU], fc1, fc2), pos_embedding(embedding);
# the encoder has token_embedding and a final norm.
_WAN_T5_BLOCK = {
    "norm1.weight": "layer.0.layer_norm.weight",
    "attn.q.weight": "layer.0.SelfAttention.q.weight",
    "attn.k.weight": "layer.0.SelfAttention.k.weight",
    "attn.v.weight": "layer.0.SelfAttention.v.weight",
    "attn.o.weight": "layer.0.SelfAttention.o.weight",
    "pos_embedding.embedding.weight": "layer.0.SelfAttention.relative_attention_bias.weight",
    "norm2.weight": "layer.1.layer_norm.weight",
    "ffn.gate.0.weight": "layer.1.DenseReluDense.wi_0.weight",
    "ffn.fc1.weight": "layer.1.DenseReluDense.wi_1.weight",
    "ffn.fc2.weight": "layer.1.DenseReluDense.wo.weight",
}


def _wan_t5_to_transformers(key):
    if key == "token_embedding.weight":
        return "shared.weight"
    if key == "norm.weight":
        return "encoder.final_layer_norm.weight"
    m = re.fullmatch(r"blocks\.(\d+)\.(.+)", key)
    return f"encoder.block.{m.group(1)}.{_WAN_T5_BLOCK[m.group(2)]}"


def test_t5_original_names_map_onto_transformers_umt5(folders, pipes):
    from transformers import UMT5Config, UMT5EncoderModel

    _, orig, diff = folders
    original_sd = _torch_sd(orig / "models_t5_umt5-xxl-enc-bf16.pth")
    assert all(v.dtype == torch.bfloat16 for v in original_sd.values())  # as the released file
    renamed = {_wan_t5_to_transformers(k): v.float() for k, v in original_sd.items()}
    _assert_same_tensors(renamed, diff / "text_encoder" / "model.safetensors")
    model = UMT5EncoderModel(UMT5Config.from_pretrained(diff / "text_encoder")).eval()
    assert set(model.state_dict()) - set(renamed) == {"encoder.embed_tokens.weight"}  # tied to shared.weight
    model.load_state_dict(renamed, strict=False)
    # The Wan feed-forward is fc2(fc1(x) * gelu_tanh(gate.0(x))): gate.0 is the GELU branch (wi_0).
    x = torch.randn(2, 5, 64)
    ffn = {k.split(".", 3)[-1]: v.float() for k, v in original_sd.items() if k.startswith("blocks.0.ffn.")}
    wan_ffn = torch.nn.functional.gelu(x @ ffn["gate.0.weight"].T, approximate="tanh") * (x @ ffn["fc1.weight"].T)
    with torch.no_grad():
        assert torch.allclose(model.encoder.block[0].layer[1].DenseReluDense(x), wan_ffn @ ffn["fc2.weight"].T, atol=1e-5)
    ids, mask = pipes[0].tokenizer(["a dog walking on the beach", "a cat"], max_length=16)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask).long()).last_hidden_state
    ours = encode(pipes[0].text_params, pipes[0].text_cfg, ids, mask)
    assert _rel(ours, ref.numpy()) < 1e-5
    assert _rel(ours, encode(pipes[1].text_params, pipes[1].text_cfg, ids, mask)) <= 1e-6


# ----------------------------------------------------------------------------- released sizes, no weights


class _ShapeReader:
    def __init__(self, shapes):
        self._s = shapes

    def keys(self):
        return list(self._s)

    def shape(self, k):
        return self._s[k]


def _checkpoint_shapes(keymap, specs):
    flat = dict(flatten(specs))
    out = {}
    for r in keymap.rules:
        shape = flat[r.path].shape[1:] if "{i}" in r.key else flat[r.path].shape
        ckpt_shape = from_layout(r.layout, np.broadcast_to(np.int8(0), shape)).shape
        for i in range(flat[r.path].shape[0]) if "{i}" in r.key else [None]:
            out[r.key if i is None else r.key.replace("{i}", str(i))] = ckpt_shape
    return out


def test_released_sizes_are_covered_and_inferred():
    """The 1.3B / 14B configs, the hard-coded VAE and umt5-xxl: maps cover the specs, sizes read back exactly."""
    for config in (dict(dim=1536, ffn_dim=8960, num_heads=12, num_layers=30),
                   dict(dim=5120, ffn_dim=13824, num_heads=40, num_layers=40)):
        cfg = WanTransformerConfig.from_original_dict(
            {"_class_name": "WanModel", "_diffusers_version": "0.30.0", "eps": 1e-06, "freq_dim": 256, "in_dim": 16,
             "model_type": "t2v", "out_dim": 16, "text_len": 512, **config})
        assert (cfg.dim, cfg.text_dim, cfg.patch_size, cfg.cross_attn_norm, cfg.attention_head_dim) == (
            config["dim"], 4096, (1, 2, 2), True, 128)
        specs, km = transformer_specs(cfg), transformer_keymap_original(cfg)
        shapes = _checkpoint_shapes(km, specs)
        assert len(shapes) == 2 + 10 + 27 * cfg.num_layers + 3  # patch, embedders, blocks, head (825 for 1.3B)
        plan_load(_ShapeReader(shapes), km, specs)
    vae = wan_vae.WAN21_VAE_ORIGINAL
    shapes = _checkpoint_shapes(wan_vae.vae_keymap_original(vae), wan_vae.vae_specs(vae))
    assert wan_vae.vae_config_from_original_shapes(shapes) == vae == wan_vae.WanVAEConfig()
    assert len(shapes) == 194 and max(int(k.split(".")[2]) for k in shapes if k.startswith("decoder.upsamples")) == 14
    shapes = _checkpoint_shapes(t5_keymap_wan_original(UMT5_XXL), t5_specs(UMT5_XXL))
    assert t5_config_from_wan_original_shapes(shapes) == UMT5_XXL
    assert shapes["token_embedding.weight"] == (256384, 4096) and shapes["blocks.23.ffn.gate.0.weight"] == (10240, 4096)


def test_original_config_rejects_other_model_types():
    for model_type in ("vace", "s2v"):
        with pytest.raises(ValueError, match=f"model_type='{model_type}' is not supported.*t2v"):
            WanTransformerConfig.from_original_dict({"_class_name": "WanModel", "model_type": model_type, "dim": 64,
                                                     "num_heads": 2, "ffn_dim": 128, "num_layers": 1})


def test_original_image_model_types():
    """Wan2.1 I2V / FLF2V (CLIP img_emb) and Wan2.2 I2V A14B (same keys, no img_emb) from the original config."""
    base = {"_class_name": "WanModel", "dim": 64, "num_heads": 2, "ffn_dim": 128, "num_layers": 1, "in_dim": 36,
            "out_dim": 16}
    i2v = WanTransformerConfig.from_original_dict({**base, "model_type": "i2v"})
    assert (i2v.image_dim, i2v.added_kv_proj_dim, i2v.pos_embed_seq_len, i2v.in_channels) == (1280, 64, None, 36)
    assert WanTransformerConfig.from_original_dict({**base, "model_type": "flf2v"}).pos_embed_seq_len == 514
    a14b = WanTransformerConfig.from_original_dict({**base, "model_type": "i2v"}, image_embedder=False)
    assert a14b.image_dim is None and a14b.in_channels == 36


# ----------------------------------------------------------------------------- detection and errors


def test_detection_and_missing_parts(folders, tmp_path):
    _, orig, diff = folders
    assert detect_layout(orig) == "original" and detect_layout(diff) == "diffusers"
    assert check_checkpoint_dir(orig) == orig and check_checkpoint_dir(diff) == diff

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="model_index.json.*Wan2.1_VAE.pth"):
        check_checkpoint_dir(empty)

    no_vae = tmp_path / "no_vae"
    shutil.copytree(orig, no_vae)
    (no_vae / "Wan2.1_VAE.pth").unlink()
    with pytest.raises(CheckpointError, match="original-layout Wan folder is missing Wan2.1_VAE.pth"):
        check_checkpoint_dir(no_vae)
    shutil.rmtree(no_vae / "google")
    with pytest.raises(CheckpointError, match="missing Wan2.1_VAE.pth, google/umt5-xxl/tokenizer.json"):
        WanPipeline.from_pretrained(no_vae)

    # config.json without a class name: the transformer's tensor names decide.
    anon = tmp_path / "anon"
    shutil.copytree(orig, anon)
    config = json.loads((anon / "config.json").read_text())
    del config["_class_name"]
    (anon / "config.json").write_text(json.dumps(config))
    (anon / "Wan2.1_VAE.pth").unlink()
    (anon / "models_t5_umt5-xxl-enc-bf16.pth").unlink()
    shutil.rmtree(anon / "google")
    assert detect_layout(anon) == "original"

    with pytest.raises(CheckpointError, match="single diffusers transformer folder"):
        detect_layout(diff / "transformer")
    with pytest.raises(CheckpointError, match="not found"):
        detect_layout(tmp_path / "nowhere")


def test_cli_generates_from_original_layout(folders, tmp_path):
    from vidax.cli import main
    from vidax.video import read_video

    _, orig, _ = folders
    out = tmp_path / "cat.mp4"
    assert main(["generate", "--checkpoint", str(orig), "--prompt", "a cat", "--height", "32", "--width", "48",
                 "--num-frames", "5", "--steps", "2", "--dtype", "float32", "--no-progress", "--out", str(out)]) == 0
    frames, fps = read_video(out)
    assert frames.shape == (5, 32, 48, 3) and fps == 16


# ----------------------------------------------------------------------------- Wan2.2 A14B (two experts)


def test_original_a14b_release_loads_like_the_diffusers_layout(tmp_path):
    """high_noise_model/ + low_noise_model/ (original WanModel names), Wan2.1_VAE.pth, the T5 .pth: the same
    frames as the same weights in the diffusers layout (transformer/, transformer_2/, boundary_ratio 0.875)."""
    from vidax.checkpoint.writer import save_component, to_state_dict, write_json
    from vidax.models.wan.demo import random_params
    from vidax.models.wan.keymap import transformer_keymap_diffusers

    w = tiny_wan_weights(seed=8)
    cfg, specs = w.transformer_cfg, transformer_specs(w.transformer_cfg)
    low = random_params(specs, np.random.default_rng(9))
    orig = write_original_checkpoint(tmp_path / "orig", weights=w)
    (orig / "high_noise_model").mkdir()
    for name in ("config.json", "diffusion_pytorch_model.safetensors"):
        shutil.move(orig / name, orig / "high_noise_model" / name)
    save_component(orig / "low_noise_model", "diffusion_pytorch_model.safetensors",
                   to_state_dict(low, transformer_keymap_original(cfg), specs), w.transformer_json)
    diff = write_diffusers_twin(tmp_path / "diff", w)
    save_component(diff / "transformer_2", "diffusion_pytorch_model.safetensors",
                   to_state_dict(low, transformer_keymap_diffusers(cfg), specs),
                   json.loads((diff / "transformer" / "config.json").read_text()))
    index = json.loads((diff / "model_index.json").read_text())
    write_json(diff / "model_index.json", {**index, "boundary_ratio": 0.875,
                                           "transformer_2": ["diffusers", "WanTransformer3DModel"]})

    a, b = (WanPipeline.from_pretrained(f, dtype="float32") for f in (orig, diff))
    assert a.layout == "original" and a.boundary_ratio == 0.875 and a.scheduler_config["flow_shift"] == 12.0
    # schedule="diffusers": the same sigma grid for both layouts (the original's default is the Wan repository's).
    kw = dict(height=32, width=32, num_frames=1, num_inference_steps=4, flow_shift=3.0, guidance_scale=4.0,
              guidance_scale_2=3.0, output_type="float", progress=False, schedule="diffusers")
    out_a, out_b = a("a red panda", "blurry", **kw), b("a red panda", "blurry", **kw)
    assert out_a.metrics["expert_switch_step"] == out_b.metrics["expert_switch_step"] == 2
    np.testing.assert_allclose(out_a.frames, out_b.frames, atol=1e-6)


# ----------------------------------------------------------------------------- image and Wan2.2 TI2V releases


@pytest.mark.parametrize("task", ["i2v", "flf2v", "ti2v"])
def test_image_and_ti2v_releases_load_like_the_diffusers_layout(task, tmp_path):
    """Wan2.1 I2V / FLF2V (with the CLIP .pth) and Wan2.2 TI2V-5B (Wan2.2_VAE.pth) in the original layout give
    the same frames as the same weights in the diffusers layout, whose pipelines match diffusers' (tests
    test_wan_i2v, test_wan22). The TI2V folder carries the release's hard-coded latent statistics, which
    the original layout cannot store."""
    from PIL import Image

    from vidax.models.wan.demo import write_demo_checkpoint
    from vidax.models.wan.layout import ORIGINAL_CLIP, ORIGINAL_VAE_22
    from vidax.models.wan.original_fixture import write_original_from_diffusers

    v22 = wan_vae.WAN22_VAE_ORIGINAL
    over = (dict(vae_overrides=dict(latents_mean=list(v22.latents_mean), latents_std=list(v22.latents_std)))
            if task == "ti2v" else dict(image_encoder_overrides=dict(hidden_size=160, num_attention_heads=2)))
    diff = write_demo_checkpoint(tmp_path / "diff", seed=3, task=task, **over)
    orig = write_original_from_diffusers(diff, tmp_path / "orig")
    assert (orig / (ORIGINAL_VAE_22 if task == "ti2v" else ORIGINAL_CLIP)).is_file()
    assert detect_layout(orig) == "original"
    a, b = (WanPipeline.from_pretrained(f, dtype="float32") for f in (diff, orig))
    assert b.layout == "original" and b.condition_mode == a.condition_mode == ("expand" if task == "ti2v" else "concat")
    assert b.vae_cfg == a.vae_cfg and b.transformer_cfg == a.transformer_cfg
    image = Image.fromarray((np.random.default_rng(0).random((70, 100, 3)) * 255).astype(np.uint8))
    kw = dict(height=32, width=64 if task == "ti2v" else 32, num_frames=5, num_inference_steps=3, flow_shift=3.0,
              output_type="float", progress=False, image=image, last_image=image if task == "flf2v" else None,
              schedule="diffusers")  # one sigma grid for both layouts (the original's default is Wan's)
    out_a, out_b = a("a cat surfing", "blurry", **kw), b("a cat surfing", "blurry", **kw)
    assert out_a.frames.std() > 0.01
    np.testing.assert_allclose(out_b.frames, out_a.frames, atol=1e-6)


def test_original_i2v_release_without_its_clip_file_names_it(tmp_path):
    from vidax.models.wan.demo import write_demo_checkpoint
    from vidax.models.wan.layout import ORIGINAL_CLIP
    from vidax.models.wan.original_fixture import write_original_from_diffusers

    diff = write_demo_checkpoint(tmp_path / "diff", seed=1, task="i2v",
                                 image_encoder_overrides=dict(hidden_size=160, num_attention_heads=2))
    orig = write_original_from_diffusers(diff, tmp_path / "orig")
    (orig / ORIGINAL_CLIP).unlink()
    with pytest.raises(CheckpointError, match=f"missing {ORIGINAL_CLIP} \\(the image encoder\\).*Wan2.1-I2V"):
        resolve_checkpoint(orig)


def test_released_wan22_vae_size_is_inferred():
    """The TI2V-5B VAE as the release hard-codes it (Wan2_2_VAE: c_dim 160, dec_dim 256, z_dim 48) reads back
    exactly from its tensor shapes."""
    vae = wan_vae.WAN22_VAE_ORIGINAL
    shapes = _checkpoint_shapes(wan_vae.vae_keymap_original(vae), wan_vae.vae_specs(vae))
    assert wan_vae.vae_config_from_original_shapes(shapes) == vae
    assert shapes["encoder.conv1.weight"] == (160, 12, 3, 3, 3) and shapes["decoder.conv1.weight"] == (1024, 48, 3, 3, 3)
    assert shapes["conv2.weight"] == (48, 48, 1, 1, 1) and shapes["decoder.head.2.weight"] == (12, 256, 3, 3, 3)


def _diffusers_vae22_name(key: str) -> str:
    """diffusers' ``convert_vae_22`` (scripts/convert_wan_to_diffusers.py) renames of a Wan2.2 VAE key, restated."""
    fixed = {"encoder.conv1": "encoder.conv_in", "decoder.conv1": "decoder.conv_in", "conv1": "quant_conv",
             "conv2": "post_quant_conv", "encoder.head.0": "encoder.norm_out", "encoder.head.2": "encoder.conv_out",
             "decoder.head.0": "decoder.norm_out", "decoder.head.2": "decoder.conv_out"}
    stem, leaf = key.rsplit(".", 1)
    if stem in fixed:
        return f"{fixed[stem]}.{leaf}"
    residual = {"residual.0": "norm1", "residual.2": "conv1", "residual.3": "norm2", "residual.6": "conv2",
                "shortcut": "conv_shortcut"}

    def block(name):
        for old, new in residual.items():
            if name.endswith("." + old):
                return name[: -len(old)] + new
        return name

    m = re.fullmatch(r"(encoder|decoder)\.middle\.(\d)\.(.*)", stem)
    if m:
        where, i, rest = m.groups()
        part = {"0": "resnets.0", "1": "attentions.0", "2": "resnets.1"}[i]
        return f"{block(f'{where}.mid_block.{part}.{rest}')}.{leaf}"
    # encoder.downsamples.I.downsamples.J -> encoder.down_blocks.I.{resnets.J | downsampler}, and up for the decoder
    m = re.fullmatch(r"(encoder\.down|decoder\.up)samples\.(\d+)\.(?:down|up)samples\.(\d+)\.(.*)", stem)
    if m:
        where, i, j, rest = m.groups()
        if rest.startswith(("residual", "shortcut")):
            return f"{block(f'{where}_blocks.{i}.resnets.{j}.{rest}')}.{leaf}"
        return f"{where}_blocks.{i}.{where.split('.')[1]}sampler.{rest}.{leaf}"
    raise AssertionError(f"unexpected Wan2.2 VAE key {key}")


def test_wan22_vae_original_names_follow_diffusers_converter():
    """Every Wan2.2_VAE.pth key our map knows, renamed as diffusers' convert_vae_22 renames it, is the diffusers
    key of the same parameter; and the original names follow wan/modules/vae2_2.py's module tree."""
    vae = wan_vae.WAN22_VAE_ORIGINAL
    original = {r.key: r.path for r in wan_vae.vae_keymap_original(vae).rules}
    diffusers = {r.key: r.path for r in wan_vae.vae_keymap(vae).rules}
    assert len(original) == len(diffusers)
    for key, path in original.items():
        assert diffusers[_diffusers_vae22_name(key)] == path, key
    # Down_ResidualBlock 0: two residual blocks then the (2D) resample; Up_ResidualBlock 1: three then a 3D upsample.
    for key in ("encoder.downsamples.0.downsamples.1.residual.6.weight", "encoder.downsamples.0.downsamples.2.resample.1.weight",
                "encoder.downsamples.1.downsamples.2.time_conv.weight", "decoder.upsamples.1.upsamples.2.residual.0.gamma",
                "decoder.upsamples.1.upsamples.3.time_conv.weight", "decoder.upsamples.2.upsamples.0.shortcut.weight",
                "encoder.downsamples.1.downsamples.0.shortcut.weight"):
        assert key in original, key
