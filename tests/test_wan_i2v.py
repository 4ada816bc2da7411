"""Wan2.1 image-to-video (I2V) and first-last-frame (FLF2V): transformer and pipeline parity with diffusers.

Transformer: ``WanTransformer3DModel`` with ``image_dim`` / ``added_kv_proj_dim`` (and ``pos_embed_seq_len``
for FLF2V), fp32, tiny sizes. Pipeline: diffusers ``WanImageToVideoPipeline`` on a tiny checkpoint folder
written by our own writer (:func:`vidax.models.wan.demo.write_demo_checkpoint` with ``task="i2v"``).
"""

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers import WanTransformer3DModel

from vidax.checkpoint.loader import DictReader, load_params
from vidax.checkpoint.safetensors_io import CheckpointReader
from vidax.models.wan.config import WanTransformerConfig
from vidax.models.wan.keymap import transformer_keymap_diffusers, transformer_keymap_original
from vidax.models.wan.transformer import TEXT_CONTEXT_LEN, forward, rope_tables, transformer_specs


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _tiny(**kw):
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=36, out_channels=16,
               text_dim=24, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True,
               qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=64, image_dim=20, added_kv_proj_dim=32)
    cfg.update(kw)
    return cfg


@pytest.fixture(scope="module", params=["i2v", "flf2v"])
def saved(request, tmp_path_factory):
    torch.manual_seed(0)
    kw = {"pos_embed_seq_len": 10} if request.param == "flf2v" else {}
    model = WanTransformer3DModel(**_tiny(**kw)).eval()
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if "norm" in name or name.endswith("bias") or "pos_embed" in name:
                prm.add_(0.1 * torch.randn_like(prm))
    path = tmp_path_factory.mktemp(f"wan_{request.param}")
    model.save_pretrained(path)
    cfg = WanTransformerConfig.from_dict(json.loads((path / "config.json").read_text()))
    return request.param, model, cfg, path


@pytest.mark.parametrize("shape", [(1, 36, 1, 4, 4), (2, 36, 3, 4, 6)], ids=str)
def test_i2v_transformer_matches_diffusers_fp32(saved, shape):
    task, model, cfg, path = saved
    rng = np.random.default_rng(1)
    b = shape[0]
    latents = rng.standard_normal(shape, dtype=np.float32)
    timestep = np.array([937.0, 312.5][:b], np.float32)
    context = rng.standard_normal((b, TEXT_CONTEXT_LEN, cfg.text_dim), dtype=np.float32)
    n_img = 10 if task == "flf2v" else 5
    image = rng.standard_normal((b, n_img, cfg.image_dim), dtype=np.float32)
    # diffusers' FLF2V input is (2B, L, e), viewed as (B, 2L, e) inside the image embedder.
    ref_image = image.reshape(2 * b, n_img // 2, cfg.image_dim) if task == "flf2v" else image
    with torch.no_grad():
        ref = model(torch.from_numpy(latents), torch.from_numpy(timestep), torch.from_numpy(context),
                    encoder_hidden_states_image=torch.from_numpy(ref_image), return_dict=False)[0].numpy()
    params = load_params(CheckpointReader(path), transformer_keymap_diffusers(cfg), transformer_specs(cfg), jnp.float32)
    cos, sin = rope_tables(cfg, shape)
    out = forward(params, jnp.asarray(latents), jnp.asarray(timestep), jnp.asarray(context), cos, sin, cfg=cfg,
                  image_context=jnp.asarray(image))
    assert out.shape == ref.shape == (b, 16, *shape[2:])
    assert _rel(out, ref) < 1e-5
    # The image tokens matter (the comparison would not notice a dropped image branch otherwise).
    no_image = forward(params, jnp.asarray(latents), jnp.asarray(timestep), jnp.asarray(context), cos, sin, cfg=cfg,
                       image_context=jnp.zeros_like(jnp.asarray(image)))
    assert _rel(no_image, ref) > 1e-3


def test_original_layout_keys_fill_the_same_parameters(saved):
    """The original WanModel I2V names (img_emb.proj.*, cross_attn.k_img ...) load the same tree, via
    diffusers' own renaming table (convert_wan_transformer_to_diffusers run backwards on the tensors)."""
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers
    from safetensors.numpy import load_file

    from vidax.checkpoint.writer import to_state_dict

    task, _, cfg, path = saved
    specs = transformer_specs(cfg)
    diffusers_sd = load_file(str(path / "diffusion_pytorch_model.safetensors"))
    params = load_params(DictReader(diffusers_sd), transformer_keymap_diffusers(cfg), specs, np.float32, place=False)
    original = to_state_dict(params, transformer_keymap_original(cfg), specs)
    if task == "flf2v":
        original.pop("img_emb.emb_pos")  # diffusers' converter has no rule for it (it keeps the name)
    converted = convert_wan_transformer_to_diffusers({k: torch.from_numpy(v) for k, v in original.items()})
    want = {k: v for k, v in diffusers_sd.items() if not k.endswith("pos_embed")}
    assert set(converted) == set(want)
    for k, v in converted.items():
        np.testing.assert_array_equal(v.numpy(), want[k], err_msg=k)


def test_config_validation():
    base = _tiny()
    assert WanTransformerConfig.from_dict(base).has_image_input
    with pytest.raises(ValueError, match="must be set together"):
        WanTransformerConfig.from_dict({**base, "added_kv_proj_dim": None})
    with pytest.raises(ValueError, match="must equal the model width 32"):
        WanTransformerConfig.from_dict({**base, "added_kv_proj_dim": 16})
    with pytest.raises(ValueError, match="pos_embed_seq_len"):
        WanTransformerConfig.from_dict({**base, "image_dim": None, "added_kv_proj_dim": None, "pos_embed_seq_len": 4})


def test_forward_checks_the_image_inputs(saved):
    _, _, cfg, path = saved
    params = load_params(CheckpointReader(path), transformer_keymap_diffusers(cfg), transformer_specs(cfg), jnp.float32)
    shape = (1, 36, 1, 4, 4)
    cos, sin = rope_tables(cfg, shape)
    args = (jnp.zeros(shape), jnp.zeros((1,)), jnp.zeros((1, TEXT_CONTEXT_LEN, cfg.text_dim)), cos, sin)
    with pytest.raises(ValueError, match="pass image_context"):
        forward(params, *args, cfg=cfg)
    with pytest.raises(ValueError, match="text context must have 512 tokens"):
        forward(params, args[0], args[1], jnp.zeros((1, 7, cfg.text_dim)), cos, sin, cfg=cfg,
                image_context=jnp.zeros((1, 10, cfg.image_dim)))


# -- the pipeline -------------------------------------------------------------------------------

PROMPT = "a red panda climbing a tree"
NEGATIVE = "blurry, static"
H, W, F = 32, 48, 5


def _image(h, w, seed):
    from PIL import Image

    rng = np.random.default_rng(seed)
    # Smooth content (a gradient plus noise) so resizing is not dominated by aliasing.
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], -1)
    return Image.fromarray(np.clip(base + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8))


@pytest.fixture(scope="module", params=["i2v", "flf2v"])
def checkpoint(request, tmp_path_factory):
    from vidax.models.wan.demo import write_demo_checkpoint

    return request.param, write_demo_checkpoint(tmp_path_factory.mktemp("wan_i2v") / request.param, seed=5,
                                                task=request.param)


def _without_ftfy():
    """diffusers' I2V ``basic_clean`` calls ftfy even when it is not installed (the T2V pipeline checks);
    without ftfy both sides clean prompts the same way (vidax's ``clean_prompt`` skips it too)."""
    import types

    from diffusers.pipelines.wan import pipeline_wan_i2v

    if not hasattr(pipeline_wan_i2v, "ftfy"):
        pipeline_wan_i2v.ftfy = types.SimpleNamespace(fix_text=lambda text: text)


@pytest.fixture(scope="module")
def pipelines(checkpoint):
    from diffusers import WanImageToVideoPipeline as Reference
    from transformers import CLIPVisionModelWithProjection
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    from vidax.models.wan.pipeline_i2v import WanImageToVideoPipeline

    _without_ftfy()
    task, ckpt = checkpoint
    ours = WanImageToVideoPipeline.from_pretrained(ckpt, dtype="float32")
    proc = json.loads((ckpt / "image_processor" / "preprocessor_config.json").read_text())
    proc.pop("image_processor_type")
    ref = Reference.from_pretrained(
        ckpt, torch_dtype=torch.float32, image_processor=CLIPImageProcessorPil(**proc),
        image_encoder=CLIPVisionModelWithProjection.from_pretrained(ckpt / "image_encoder"))
    ref.set_progress_bar_config(disable=True)
    return task, ours, ref


def test_pipeline_frames_match_diffusers_after_4_steps(pipelines):
    task, ours, ref = pipelines
    image = _image(80, 120, 1)
    last = _image(80, 120, 2) if task == "flf2v" else None
    latents = np.random.default_rng(0).standard_normal((1, 16, (F - 1) // 4 + 1, H // 8, W // 8), dtype=np.float32)
    with torch.no_grad():
        expected = ref(image=image, prompt=PROMPT, negative_prompt=NEGATIVE, height=H, width=W, num_frames=F,
                       num_inference_steps=4, guidance_scale=5.0, latents=torch.from_numpy(latents),
                       last_image=last, output_type="np").frames
    out = ours(PROMPT, NEGATIVE, image=image, last_image=last, height=H, width=W, num_frames=F, num_inference_steps=4,
               guidance_scale=5.0, latents=latents, output_type="float", progress=False)
    assert out.frames.shape == expected.shape == (1, F, H, W, 3)
    assert np.abs(out.frames - expected).max() < 2 / 255
    assert expected.std() > 0.01


def test_condition_mask_follows_the_frame_count():
    from vidax.models.wan.pipeline_i2v import frame_mask

    for frames, last in [(9, False), (13, True), (1, False)]:
        ref = torch.ones(1, 1, frames, 2, 3)
        ref[:, :, list(range(1, frames - 1 if last else frames))] = 0
        first = torch.repeat_interleave(ref[:, :, 0:1], dim=2, repeats=4)
        ref = torch.concat([first, ref[:, :, 1:]], dim=2).view(1, -1, 4, 2, 3).transpose(1, 2).numpy()
        out = frame_mask(frames, 2, 3, last)
        assert out.shape == (1, 4, (frames - 1) // 4 + 1, 2, 3)
        np.testing.assert_array_equal(out, ref)


def test_output_size_follows_the_image_aspect_ratio():
    from vidax.models.wan.pipeline_i2v import size_for_image

    # The reference example: round(sqrt(max_area * h / w)) // 16 * 16.
    for (ih, iw), area in [((720, 544), 480 * 832), ((1104, 832), 720 * 1280), ((480, 832), 480 * 832),
                           ((1000, 1000), 480 * 832)]:
        ar = ih / iw
        want = (round(np.sqrt(area * ar)) // 16 * 16, round(np.sqrt(area / ar)) // 16 * 16)
        assert size_for_image(ih, iw, area, 16) == want
    assert size_for_image(1104, 832, 720 * 1280, 16) == (1104, 832)  # the paper's 832x1104 row
    assert size_for_image(704, 1280, 704 * 1280, 32) == (704, 1280)  # TI2V-5B: multiples of 32


def test_size_from_image_and_frame_rounding(pipelines):
    task, ours, _ = pipelines
    image = _image(60, 100, 3)
    assert ours.output_size(image, max_area=48 * 80) == (48, 80)  # 60x100 at 48*80 pixels: exactly 48 x 80
    assert ours.output_size(image) == (480, 816)  # default 480*832 area: round(489.5), round(815.8) down to 16s
    assert ours.output_size(None, 64, 96) == (64, 96)
    with pytest.warns(UserWarning, match="rounding num_frames=7 down to 5"):
        assert ours.check_size(48, 80, 7) == (48, 80, 5)
    with pytest.warns(UserWarning, match=r"adjusting \(40, 70\) -> \(32, 64\)"):
        assert ours.check_size(40, 70, 9) == (32, 64, 9)
    with pytest.raises(ValueError, match="at least 16"):
        ours.check_size(8, 70, 9)
    if task == "flf2v":
        with pytest.raises(ValueError, match="num_frames must be at least 5"):
            ours(PROMPT, image=image, last_image=image, num_frames=1, num_inference_steps=1)


def test_bad_images_are_clear_errors(pipelines, tmp_path):
    from vidax.models.wan.pipeline_i2v import ImageError

    _, ours, _ = pipelines
    with pytest.raises(ImageError, match="file not found"):
        ours(PROMPT, image=tmp_path / "missing.png", num_inference_steps=1)
    (tmp_path / "broken.png").write_bytes(b"not an image")
    with pytest.raises(ImageError, match="broken.png: not a readable image"):
        ours(PROMPT, image=tmp_path / "broken.png", num_inference_steps=1)
    with pytest.raises(ImageError, match="is 8x12 pixels; at least 16"):
        ours(PROMPT, image=np.zeros((12, 8, 3), np.uint8), num_inference_steps=1)
    with pytest.raises(ValueError, match="pass image="):
        ours(PROMPT, num_inference_steps=1)


def test_cli_image_flags(checkpoint, tmp_path, capsys):
    from vidax.cli import main

    task, ckpt = checkpoint
    rc = main(["generate", "--checkpoint", str(ckpt), "--prompt", "x", "--image", str(tmp_path / "nope.png"),
               "--out", str(tmp_path / "v.mp4")])
    assert rc == 2 and "--image" in capsys.readouterr().err
    _image(40, 60, 4).save(tmp_path / "first.png")
    last = ["--last-image", str(tmp_path / "first.png")] if task == "flf2v" else []
    rc = main(["generate", "--checkpoint", str(ckpt), "--prompt", "x", "--image", str(tmp_path / "first.png"), *last,
               "--max-area", str(32 * 48), "--num-frames", "5" if last else "1", "--steps", "1", "--dtype", "float32",
               "--out", str(tmp_path / "v.mp4"), "--metrics-json", str(tmp_path / "m.json"), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    m = json.loads((tmp_path / "m.json").read_text())
    assert (m["width"], m["height"], m["num_frames"]) == (48, 32, 5 if last else 1) and (tmp_path / "v.mp4").is_file()
