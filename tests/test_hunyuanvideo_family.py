"""HunyuanVideo's family record: presets, the original release's image-to-video size buckets, weightless checks and
folder resolution (no weights: configuration and index files only)."""

import json

import numpy as np
import pytest

from vidax.checkpoint.errors import CheckpointError
from vidax.models.hunyuanvideo import layout
from vidax.models.hunyuanvideo.family import FAMILY, check_sizes
from vidax.models.hunyuanvideo.presets import PRESETS, crop_size_buckets, size_for_image


# -- the reference, restated from HunyuanVideo-I2V hyvideo/utils/data_utils.py and hyvideo/inference.py -------------
def _ref_generate_crop_size_list(base_size=256, patch_size=32, max_ratio=4.0):
    num_patches = round((base_size / patch_size) ** 2)
    assert max_ratio >= 1.0
    crop_size_list = []
    wp, hp = num_patches, 1
    while wp > 0:
        if max(wp, hp) / min(wp, hp) <= max_ratio:
            crop_size_list.append((wp * patch_size, hp * patch_size))
        if (hp + 1) * wp <= num_patches:
            hp += 1
        else:
            wp -= 1
    return crop_size_list


def _ref_get_closest_ratio(height, width, ratios, buckets):
    aspect_ratio = float(height) / float(width)
    diff_ratios = ratios - aspect_ratio
    if aspect_ratio >= 1:
        indices = [(index, x) for index, x in enumerate(diff_ratios) if x <= 0]
    else:
        indices = [(index, x) for index, x in enumerate(diff_ratios) if x > 0]
    closest_ratio_id = min(indices, key=lambda pair: abs(pair[1]))[0]
    return buckets[closest_ratio_id], ratios[closest_ratio_id]


def _ref_size(image_width, image_height, base):
    crop_size_list = _ref_generate_crop_size_list(base, 32)
    aspect_ratios = np.array([round(float(h) / float(w), 5) for h, w in crop_size_list])
    closest_size, _ = _ref_get_closest_ratio(image_height, image_width, aspect_ratios, crop_size_list)
    return tuple(closest_size)


@pytest.mark.parametrize("base", [960, 720, 480])
def test_buckets_match_the_original_release(base):
    assert crop_size_buckets(base, 32) == _ref_generate_crop_size_list(base, 32)


@pytest.mark.parametrize("size", [(832, 1088), (1280, 720), (720, 1280), (1000, 1000), (640, 480), (333, 1211),
                                  (1920, 800), (512, 513)])
@pytest.mark.parametrize("base", [960, 480])
def test_size_for_image_matches_the_original_release(size, base):
    assert size_for_image(*size, base_size=base) == _ref_size(*size, base)


def test_the_paper_rows_are_presets():
    t2v, i2v = PRESETS["hunyuanvideo-t2v-720p"], PRESETS["hunyuanvideo-i2v-720p"]
    assert (t2v.width, t2v.height, t2v.num_frames, t2v.num_inference_steps, t2v.dtype) == (1280, 720, 129, 50,
                                                                                         "bfloat16")
    assert (i2v.width, i2v.height, i2v.task) == (832, 1088, "i2v")
    # the table's I2V size is the bucket of its portrait example image
    assert size_for_image(832, 1088) == (i2v.height, i2v.width)
    assert t2v.settings()["flow_shift"] == 7.0 and t2v.settings()["guidance_scale"] == 6.0


@pytest.mark.parametrize("h, w, f, fix", [
    (720, 1280, 128, "use 125 or 129"), (721, 1280, 129, "use 720 or 736"), (8, 64, 9, "use 16"),
    (720, 1280, 0, r"4k\+1"), (720.5, 1280, 9, "integer"),
])
def test_sizes_are_checked_with_the_fix(h, w, f, fix):
    with pytest.raises(ValueError, match=fix):
        check_sizes(h, w, f)


def _write(folder, files):
    for rel, content in files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(content) if isinstance(content, dict) else content)


DIFFUSERS_FILES = {
    "model_index.json": {"_class_name": "HunyuanVideoPipeline"},
    "transformer/config.json": {}, "vae/config.json": {}, "text_encoder/config.json": {},
    "tokenizer/tokenizer.json": "{}", "text_encoder_2/config.json": {}, "tokenizer_2/tokenizer.json": "{}",
    "scheduler/scheduler_config.json": {"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 7.0},
}


def test_diffusers_folder_resolves(tmp_path):
    _write(tmp_path, DIFFUSERS_FILES)
    ckpt = layout.resolve_checkpoint(tmp_path)
    assert (ckpt.layout, ckpt.task, ckpt.image_processor) == ("diffusers", "t2v", None)
    assert FAMILY.folder_tasks(tmp_path) == ("t2v",)
    layout.check_tokenizers(ckpt)


def test_i2v_folder_needs_its_image_processor(tmp_path):
    _write(tmp_path, {**DIFFUSERS_FILES, "model_index.json": {"_class_name": "HunyuanVideoImageToVideoPipeline"}})
    with pytest.raises(CheckpointError, match="image_processor"):
        layout.resolve_checkpoint(tmp_path)
    (tmp_path / "image_processor").mkdir()
    assert layout.resolve_checkpoint(tmp_path).task == "i2v"


def test_a_llama_folder_without_its_tokenizer_is_named(tmp_path):
    _write(tmp_path, DIFFUSERS_FILES)
    (tmp_path / "tokenizer" / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match=r"tokenizer.*Llama.*tokenizer.json"):
        FAMILY.check(tmp_path, "t2v", dict(height=64, width=64, num_frames=9))


def test_the_original_release_is_claimed(tmp_path):
    files = {"hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states.pt": "x",
             "hunyuan-video-t2v-720p/vae/config.json": {}, "hunyuan-video-t2v-720p/vae/pytorch_model.pt": "x",
             "text_encoder/config.json": {}, "text_encoder_2/config.json": {}}
    _write(tmp_path, files)
    assert FAMILY.claims_folder(tmp_path)
    ckpt = layout.resolve_checkpoint(tmp_path)
    assert (ckpt.layout, ckpt.task, ckpt.tokenizer) == ("original", "t2v", tmp_path / "text_encoder")
    assert ckpt.scheduler_config()["shift"] == 7.0
    (tmp_path / "text_encoder_2" / "config.json").unlink()
    with pytest.raises(CheckpointError, match="text_encoder_2"):
        layout.resolve_checkpoint(tmp_path)


def test_other_folders_are_refused(tmp_path):
    _write(tmp_path, {"model_index.json": {"_class_name": "WanPipeline"}})
    with pytest.raises(CheckpointError, match="not a HunyuanVideo pipeline"):
        layout.resolve_checkpoint(tmp_path)
    assert not FAMILY.claims_folder(tmp_path)


@pytest.fixture(scope="module")
def demo_folders(tmp_path_factory):
    from vidax.models.hunyuanvideo.demo import write_demo_checkpoint

    root = tmp_path_factory.mktemp("hv_cli")
    return {task: write_demo_checkpoint(root / task, task=task, variant="token_replace") for task in ("t2v", "i2v")}


@pytest.mark.parametrize("case", ["frames", "size", "i2v-without-image", "no-tokenizer"])
def test_bad_input_is_one_error_line_before_the_transformer_loads(demo_folders, case, tmp_path, monkeypatch, capsys):
    import shutil

    from vidax.cli import main
    from vidax.models.hunyuanvideo import loading

    def never(*a, **k):
        raise AssertionError("the transformer was loaded")

    monkeypatch.setattr(loading, "load_transformer", never)
    folder, extra, expect = demo_folders["t2v"], [], ""
    if case == "frames":
        extra, expect = ["--num-frames", "8"], r"num_frames=8 must be of the form 4k\+1.*use 5 or 9"
    elif case == "size":
        extra, expect = ["--height", "40"], "height=40 must be a positive multiple of 16: use 32 or 48"
    elif case == "i2v-without-image":
        folder, expect = demo_folders["i2v"], r"image-to-video checkpoint.*--image"
    else:
        folder = tmp_path / "copy"
        shutil.copytree(demo_folders["t2v"], folder)
        shutil.rmtree(folder / "tokenizer")
        expect = "tokenizer"
    out = tmp_path / "x.mp4"
    args = ["generate", "--checkpoint", str(folder), "--prompt", "a dog", "--height", "32", "--width", "32",
            "--num-frames", "5", "--steps", "1", "--no-progress", "--out", str(out), *extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vidax: error:"), err
    import re

    assert re.search(expect, err[0]), err[0]
    assert not out.exists()
