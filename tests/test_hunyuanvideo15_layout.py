"""HunyuanVideo-1.5 folders, variants and size buckets (vidax.models.hunyuanvideo15.layout / presets): the buckets
against diffusers' HunyuanVideo15ImageProcessor, the variant settings against the original release's table, and the
three layouts resolved (or refused with the fix named) from index and configuration files only."""

import json
import random

import pytest

from vidax.checkpoint.errors import CheckpointError
from vidax.models.hunyuanvideo15 import layout
from vidax.models.hunyuanvideo15.presets import PRESETS, VARIANTS, closest_size, crop_size_buckets

# The original release's sampler settings per transformer variant, restated from Tencent-Hunyuan/HunyuanVideo-1.5
# hyvideo/commons/__init__.py PIPELINE_CONFIGS (guidance_scale, flow_shift, num_inference_steps if set).
RELEASE_CONFIGS = {
    "480p_t2v": (6.0, 5.0, None), "480p_i2v": (6.0, 5.0, None), "720p_t2v": (6.0, 9.0, None),
    "720p_i2v": (6.0, 7.0, None), "480p_t2v_distilled": (1.0, 5.0, None), "480p_i2v_distilled": (1.0, 5.0, None),
    "720p_t2v_distilled": (1.0, 9.0, None), "720p_i2v_distilled": (1.0, 7.0, None),
    "720p_t2v_distilled_sparse": (1.0, 9.0, None), "720p_i2v_distilled_sparse": (1.0, 7.0, None),
    "480p_i2v_step_distilled": (1.0, 7.0, 12),
}


def test_variants_follow_the_release():
    assert set(VARIANTS) == set(RELEASE_CONFIGS)
    for name, (guidance, shift, steps) in RELEASE_CONFIGS.items():
        v = VARIANTS[name]
        assert (v.guidance_scale, v.flow_shift, v.num_inference_steps) == (guidance, shift, steps or 50), name
        assert v.task in ("t2v", "i2v") and v.resolution in ("480p", "720p")


def test_buckets_match_diffusers():
    from diffusers.pipelines.hunyuan_video1_5.image_processor import (HunyuanVideo15ImageProcessor,
                                                                      generate_crop_size_list)

    processor = HunyuanVideo15ImageProcessor()
    rng = random.Random(0)
    for base in (640, 960):
        assert crop_size_buckets(base) == [tuple(s) for s in generate_crop_size_list(base, 16)]
        sizes = [(9, 16), (16, 9), (1, 1), (1104, 832), (720, 544), (3, 4)]
        sizes += [(rng.randint(64, 3000), rng.randint(64, 3000)) for _ in range(60)]
        for h, w in sizes:
            if max(h / w, w / h) > 3.9:  # beyond the widest bucket the reference has no answer
                continue
            assert closest_size(h, w, base) == tuple(processor.calculate_default_height_width(h, w, base)), (h, w)
    with pytest.raises(ValueError, match="positive"):
        closest_size(0, 16, 640)


def test_presets_are_the_paper_rows():
    rows = {(p.variant, p.width, p.height, p.num_frames, p.num_inference_steps, p.dtype, p.tp)
            for p in PRESETS.values()}
    assert rows == {("720p_t2v", 1280, 720, 121, 30, "bfloat16", 4), ("720p_i2v", 832, 1104, 121, 30, "bfloat16", 4),
                    ("480p_t2v", 832, 480, 121, 30, "bfloat16", 4), ("480p_i2v", 544, 720, 121, 30, "bfloat16", 4)}
    p = PRESETS["hunyuanvideo-1.5-720p-i2v"]
    assert p.task == "i2v" and p.settings()["flow_shift"] == 7.0 and p.settings()["guidance_scale"] == 6.0
    assert PRESETS["hunyuanvideo-1.5-720p-t2v"].settings()["flow_shift"] == 9.0


def _touch(path, text="{}"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _official(root, variants=("480p_t2v", "720p_i2v"), siglip=True):
    for v in variants:
        _touch(root / "transformer" / v / "config.json")
    _touch(root / "vae" / "config.json")
    _touch(root / "text_encoder" / "llm" / "config.json")
    _touch(root / "text_encoder" / "llm" / "tokenizer.json")
    _touch(root / "text_encoder" / "byt5-small" / "config.json")
    _touch(root / layout.GLYPH_WEIGHTS, "")
    _touch(root / layout.GLYPH_ASSETS / "color_idx.json")
    _touch(root / layout.GLYPH_ASSETS / "multilingual_10-lang_idx.json")
    if siglip:
        _touch(root / "vision_encoder" / "siglip" / "image_encoder" / "config.json")
        _touch(root / "vision_encoder" / "siglip" / "feature_extractor" / "preprocessor_config.json")
    return root


def test_official_release_variants(tmp_path):
    root = _official(tmp_path / "ckpts")
    assert layout.original_variants(root) == ("480p_t2v", "720p_i2v")
    ckpt = layout.resolve_checkpoint(root, variant="480p_t2v")
    assert (ckpt.layout, ckpt.task, ckpt.variant) == ("original", "t2v", "480p_t2v")
    assert ckpt.transformer == root / "transformer" / "480p_t2v" and ckpt.image_encoder is None
    assert ckpt.tokenizer == ckpt.text_encoder == root / "text_encoder" / "llm"
    assert ckpt.scheduler_config()["shift"] == 5.0 and ckpt.guider_config()["guidance_scale"] == 6.0
    i2v = layout.resolve_checkpoint(root, task="i2v")  # the task's default variant
    assert (i2v.variant, i2v.task) == ("720p_i2v", "i2v")
    assert i2v.image_encoder == root / "vision_encoder" / "siglip" / "image_encoder"
    assert i2v.scheduler_config()["shift"] == 7.0
    assert layout.resolve_checkpoint(root, task="t2v").variant == "480p_t2v"  # 720p_t2v absent: the one present
    layout.check_tokenizers(ckpt)

    with pytest.raises(CheckpointError, match=r"720p_t2v transformer is not in this folder \(found: 480p_t2v, "
                                              r"720p_i2v\).*--include 'transformer/720p_t2v/\*'"):
        layout.resolve_checkpoint(root, variant="720p_t2v")
    with pytest.raises(CheckpointError, match="not a HunyuanVideo-1.5 transformer variant; expected one of 480p_t2v"):
        layout.resolve_checkpoint(root, variant="1080p_t2v")
    with pytest.raises(CheckpointError, match="variant 480p_t2v runs t2v, not i2v"):
        layout.resolve_checkpoint(root, variant="480p_t2v", task="i2v")


def test_official_release_missing_parts_are_named(tmp_path):
    root = _official(tmp_path / "ckpts", variants=("480p_i2v",), siglip=False)
    with pytest.raises(CheckpointError, match=r"vision_encoder/siglip/config.json.*FLUX.1-Redux-dev"):
        layout.resolve_checkpoint(root)
    (root / layout.GLYPH_WEIGHTS).unlink()
    with pytest.raises(CheckpointError, match="Glyph-SDXL-v2/checkpoints/byt5_model.pt"):
        layout.resolve_checkpoint(root)
    t2v_only = _official(tmp_path / "t2v", variants=("480p_t2v",))
    with pytest.raises(CheckpointError, match=r"no I2V transformer variant here \(found: 480p_t2v\)"):
        layout.resolve_checkpoint(t2v_only, task="i2v")
    (t2v_only / "text_encoder" / "llm" / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer is missing.*Qwen2.5-VL-7B-Instruct"):
        layout.check_tokenizers(layout.resolve_checkpoint(t2v_only))


def _diffusers_folder(root, cls=layout.T2V_CLASS, guider=6.0):
    _touch(root / "model_index.json", json.dumps({"_class_name": cls}))
    for part in ("transformer", "vae", "text_encoder", "text_encoder_2", "image_encoder"):
        _touch(root / part / "config.json")
    for part in ("tokenizer", "tokenizer_2", "feature_extractor"):
        (root / part).mkdir(parents=True, exist_ok=True)
    _touch(root / "scheduler" / "scheduler_config.json", json.dumps({"shift": 5.0}))
    if guider is not None:
        _touch(root / "guider" / "guider_config.json", json.dumps({"guidance_scale": guider}))
    return root


def test_diffusers_layout(tmp_path):
    ckpt = layout.resolve_checkpoint(_diffusers_folder(tmp_path / "t2v", guider=1.0))
    assert (ckpt.layout, ckpt.task, ckpt.variant) == ("diffusers", "t2v", None)
    assert ckpt.scheduler_config()["shift"] == 5.0 and ckpt.guider_config()["guidance_scale"] == 1.0
    i2v = layout.resolve_checkpoint(_diffusers_folder(tmp_path / "i2v", layout.I2V_CLASS, guider=None))
    assert i2v.task == "i2v" and i2v.image_encoder == tmp_path / "i2v" / "image_encoder"
    assert i2v.guider_config()["guidance_scale"] == 6.0  # no guider folder: the 720p i2v variant's
    (tmp_path / "i2v" / "feature_extractor").rmdir()
    with pytest.raises(CheckpointError, match="HunyuanVideo15ImageToVideoPipeline folder is missing feature_extractor"):
        layout.resolve_checkpoint(tmp_path / "i2v")
    other = tmp_path / "other"
    _touch(other / "model_index.json", json.dumps({"_class_name": "HunyuanVideoPipeline"}))
    with pytest.raises(CheckpointError, match="describes 'HunyuanVideoPipeline', not a HunyuanVideo-1.5 pipeline"):
        layout.resolve_checkpoint(other)
    with pytest.raises(CheckpointError, match="not a HunyuanVideo-1.5 folder"):
        layout.resolve_checkpoint(tmp_path)


def test_cli_names_the_variants_of_an_official_release_before_loading(tmp_path, capsys, monkeypatch):
    """`vidax generate --variant` on an official-release folder that lacks it: one `vidax: error:` line naming the
    variants present and the download, before any weight is read."""
    from vidax.cli import main
    from vidax.models import registry

    def refuse(self, task):
        raise AssertionError("a pipeline was loaded before the checks")

    monkeypatch.setattr(registry.Family, "pipeline_class", refuse)
    root = _official(tmp_path / "ckpts")
    args = ["generate", "--checkpoint", str(root), "--prompt", "a cat", "--out", str(tmp_path / "x.mp4")]
    assert main([*args, "--variant", "720p_t2v"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vidax: error: ") and "720p_t2v transformer is not in this folder " \
        "(found: 480p_t2v, 720p_i2v)" in err[0] and "--include 'transformer/720p_t2v/*'" in err[0], err
    assert main([*args, "--variant", "720p_i2v"]) == 2  # an image-to-video variant without --image
    assert "runs i2v, not t2v" in capsys.readouterr().err
    assert registry.family_of(root).name == "hunyuanvideo-1.5"
    assert registry.family_of(root).folder_tasks(root) == ("t2v", "i2v")
