"""HunyuanVideo's three folder layouts end to end: the original release gives exactly the diffusers folder's frames,
`vidax convert` of either gives exactly the source's frames, `vidax inspect` reports every layout (and names what a
broken folder lacks), and a conversion that fails or is interrupted leaves nothing.

One tiny diffusers demo folder per task (text-to-video; image-to-video ``latent_concat``) with one 128-wide head, so
that the original release's fixed RoPE axes (16, 56, 56) apply to it, and the original ``ckpts`` folder written from
the same weights by the reference classes under the names :mod:`_hunyuanvideo_original` restates. Every pipeline runs
in float32 at 64 x 64 pixels, 9 frames, 2 steps, and its float frames are compared bit for bit.
"""

import errno
import json
import shutil

import ml_dtypes
import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from _hunyuanvideo_original import ORIGINAL_MODELS, ORIGINAL_TRANSFORMER, write_original_from_diffusers
from vidax.checkpoint.errors import CheckpointError
from vidax.cli import main
from vidax.core.params import flatten
from vidax.models.hunyuanvideo import convert as hconvert
from vidax.models.hunyuanvideo.convert import convert_checkpoint
from vidax.models.hunyuanvideo.demo import write_demo_checkpoint
from vidax.models.hunyuanvideo.layout import resolve_checkpoint
from vidax.models.hunyuanvideo.pipeline import HunyuanVideoImageToVideoPipeline, HunyuanVideoPipeline

#: One head of 128 features: the width the original release's RoPE axes (16, 56, 56) are fixed for.
HEAD = {"num_attention_heads": 1, "attention_head_dim": 128, "rope_axes_dim": [16, 56, 56]}
PROMPT = "a red fox runs through snow"
IMAGE = np.random.default_rng(3).integers(0, 256, (64, 64, 3), dtype=np.uint8)
PIPELINES = {"t2v": HunyuanVideoPipeline, "i2v": HunyuanVideoImageToVideoPipeline}


def _frames(folder, task):
    pipe = PIPELINES[task].from_pretrained(folder, dtype="float32", progress=False)
    image = {"image": IMAGE} if task == "i2v" else {}
    out = pipe(PROMPT, height=64, width=64, num_frames=9, num_inference_steps=2, seed=0, output_type="float",
               progress=False, **image)
    return np.asarray(out.frames)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``folders(model)``: ``(diffusers folder, original folder, the diffusers folder's frames)``, built once per
    model: ``"t2v"``, ``"i2v"`` (the first I2V release: ``latent_concat``) or ``"i2v-token_replace"``."""
    cache = {}

    def get(model):
        if model not in cache:
            task, _, variant = model.partition("-")
            root = tmp_path_factory.mktemp(f"hunyuanvideo_{model}")
            diffusers = write_demo_checkpoint(root / "diffusers", task=task, variant=variant or "latent_concat",
                                              seed=1, transformer_overrides=HEAD)
            original = write_original_from_diffusers(diffusers, root / "ckpts")
            cache[model] = diffusers, original, _frames(diffusers, task)
        return cache[model]

    return get


@pytest.mark.parametrize("model, condition", [("t2v", None), ("i2v", "latent_concat"),
                                              ("i2v-token_replace", "token_replace")])
def test_original_release_gives_exactly_the_diffusers_frames(folders, model, condition):
    task = model[:3]
    diffusers, original, frames = folders(model)
    ckpt = resolve_checkpoint(original)
    assert (ckpt.layout, ckpt.task) == ("original", task)
    assert ckpt.transformer == original / ORIGINAL_MODELS[task] / ORIGINAL_TRANSFORMER
    assert ckpt.transformer_config().image_condition_type == condition
    assert frames.shape[-3:] == (64, 64, 3) and np.ptp(frames) > 0.1  # a video, not a constant
    np.testing.assert_array_equal(_frames(original, task), frames)


@pytest.mark.parametrize("source", ["diffusers", "original"])
@pytest.mark.parametrize("model", ["t2v", "i2v", "i2v-token_replace"])
def test_converted_folder_gives_exactly_the_source_frames(folders, model, source, tmp_path, capsys):
    task = model[:3]
    diffusers, original, frames = folders(model)
    src = diffusers if source == "diffusers" else original
    assert main(["convert", str(src), str(tmp_path / "out"), "--dtype", "float32"]) == 0
    assert f"from the {source} layout" in capsys.readouterr().out
    ckpt = resolve_checkpoint(tmp_path / "out")
    assert (ckpt.layout, ckpt.task) == ("vidax", task)
    index = json.loads((tmp_path / "out" / "vidax_index.json").read_text())
    assert (index["family"], index["source_layout"]) == ("hunyuanvideo", source)
    assert index["pipeline_class"] == PIPELINES[task].__name__
    np.testing.assert_array_equal(_frames(tmp_path / "out", task), frames)


def _leaves(tree):
    return {path: np.asarray(v) for path, v in flatten(tree)}


def _assert_same(a, b):
    a, b = _leaves(a), _leaves(b)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k].view(np.uint8), b[k].view(np.uint8), err_msg=k)


def test_bf16_conversion_stores_what_loading_the_source_gives(folders, tmp_path):
    """The original release converted to bf16 (transformer and Llama): each converted component loads bit for bit
    as the source does at those dtypes, fp32-pinned leaves stored in fp32; CLIP is kept as stored."""
    from vidax.models.hunyuanvideo.loading import load_transformer, load_vae
    from vidax.models.hunyuanvideo.text import load_text_encoders

    _, original, _ = folders("t2v")
    summary = convert_checkpoint(original, tmp_path / "out", dtype="bfloat16", text_encoder_dtype="bfloat16")
    assert summary["dtypes"] == {"transformer": "bfloat16", "vae": "float32", "text_encoder": "bfloat16",
                                 "text_encoder_2": "float32"}
    src, out = resolve_checkpoint(original), resolve_checkpoint(tmp_path / "out")
    assert out.transformer_config() == src.transformer_config() and out.vae_config() == src.vae_config()
    assert out.scheduler_config() == src.scheduler_config()
    tcfg = src.transformer_config()
    _assert_same(load_transformer(src, tcfg, "bfloat16"), load_transformer(out, tcfg, "bfloat16"))
    _assert_same(load_vae(src, src.vae_config(), "float32"), load_vae(out, src.vae_config(), "float32"))
    a, b = load_text_encoders(src, "bfloat16"), load_text_encoders(out, "bfloat16")
    _assert_same(a.text_encoder, b.text_encoder)
    _assert_same(a.text_encoder_2, b.text_encoder_2)
    with safe_open(str(tmp_path / "out" / "transformer" / "params.safetensors"), "np") as f:
        stored = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert stored["transformer_blocks/attn/to_q/kernel"] == "BF16"
    assert stored["transformer_blocks/norm1/linear/kernel"] == "F32"  # the modulation tables stay fp32
    with safe_open(str(tmp_path / "out" / "text_encoder" / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}  # transformers reads it
    llama = load_file(str(tmp_path / "out" / "text_encoder" / "model.safetensors"))
    assert "lm_head.weight" not in llama and "model.embed_tokens.weight" not in llama  # a LlamaModel's names
    assert llama["layers.0.self_attn.q_proj.weight"].dtype == ml_dtypes.bfloat16
    assert llama["norm.weight"].dtype == np.float32
    clip = json.loads((tmp_path / "out" / "text_encoder_2" / "config.json").read_text())
    assert clip["model_type"] == "clip_text_model"  # the text tower of the release's whole CLIPModel
    assert not any(k.startswith("vision_model.") for k in load_file(str(tmp_path / "out" / "text_encoder_2" /
                                                                         "model.safetensors")))


@pytest.mark.parametrize("task", ["t2v", "i2v"])
def test_inspect_reports_every_layout(folders, task, tmp_path, capsys):
    diffusers, original, _ = folders(task)
    convert_checkpoint(original, tmp_path / "vidax", dtype="float32")
    weights = load_file(str(diffusers / "transformer" / "diffusion_pytorch_model.safetensors"))
    count = sum(v.size for v in weights.values())
    for folder, layout in ((diffusers, "diffusers"), (original, "original"), (tmp_path / "vidax", "vidax")):
        assert main(["inspect", str(folder)]) == 0, layout
        out = capsys.readouterr().out
        assert f"HunyuanVideo {'image' if task == 'i2v' else 'text'}-to-video" in out and f"{layout} layout" in out
        assert out.count("every parameter filled exactly once") == 4, out
        assert "keys our map does not know: 0" in out and "components: fit each other" in out
        assert f"({count:,})" in out  # the transformer's parameters, whatever the layout
        assert "1 heads x 128" in out and ("image condition latent_concat" in out) == (task == "i2v")
        assert ("image_processor:" in out) == (task == "i2v")


def _drop_from_pt(path, key):
    state = torch.load(path, map_location="cpu", weights_only=True)
    del state["module"][key]
    torch.save(state, path)


@pytest.mark.parametrize("layout", ["diffusers", "original", "vidax"])
def test_inspect_names_a_missing_tensor_and_exits_1(folders, layout, tmp_path, capsys):
    diffusers, original, _ = folders("t2v")
    if layout == "vidax":
        convert_checkpoint(diffusers, tmp_path / "broken", dtype="float32")
    else:
        shutil.copytree(diffusers if layout == "diffusers" else original, tmp_path / "broken")
    broken = tmp_path / "broken"
    if layout == "diffusers":
        path = broken / "transformer" / "diffusion_pytorch_model.safetensors"
        sd = load_file(str(path))
        del sd["transformer_blocks.1.attn.add_k_proj.weight"]
        save_file(sd, str(path))
        name = "transformer_blocks.1.attn.add_k_proj.weight"
    elif layout == "original":
        _drop_from_pt(broken / ORIGINAL_MODELS["t2v"] / ORIGINAL_TRANSFORMER, "double_blocks.1.txt_attn_qkv.weight")
        name = "double_blocks.1.txt_attn_qkv.weight[k]"  # the fused tensor, named through its view
    else:
        path = broken / "vae" / "params.safetensors"
        sd = load_file(str(path))
        del sd["decoder/conv_out/conv/kernel"]
        save_file(sd, str(path))
        name = "decoder/conv_out/conv/kernel"
    assert main(["inspect", str(broken)]) == 1
    captured = capsys.readouterr()
    assert "does not match its configuration" in captured.out and name in captured.out
    assert "missing keys (1)" in captured.out or "missing keys (3)" in captured.out
    assert "will not load" in captured.err
    # ... and `vidax convert` refuses it, writing nothing.
    assert main(["convert", str(broken), str(tmp_path / "never")]) == 2
    assert "would not load" in capsys.readouterr().err and not (tmp_path / "never").exists()


def _leftovers(folder, name):
    return [p.name for p in folder.iterdir() if p.name.startswith(f".{name}")]


def test_convert_refuses_an_existing_output_and_leaves_nothing_on_failure(folders, tmp_path, capsys, monkeypatch):
    diffusers, original, _ = folders("t2v")
    (tmp_path / "exists").mkdir()
    assert main(["convert", str(diffusers), str(tmp_path / "exists")]) == 2
    assert "exists; choose a new output folder" in capsys.readouterr().err
    assert list((tmp_path / "exists").iterdir()) == []
    # A source that would not load: every mismatch named before anything is written.
    broken = tmp_path / "broken"
    shutil.copytree(original, broken)
    vae = broken / ORIGINAL_MODELS["t2v"] / "vae" / "pytorch_model.pt"
    state = torch.load(vae, weights_only=True)
    del state["decoder.conv_in.conv.bias"]
    torch.save(state, vae)
    with pytest.raises(CheckpointError, match=r"missing keys \(1\):\n    decoder\.conv_in\.conv\.bias"):
        convert_checkpoint(broken, tmp_path / "never")
    (broken / "text_encoder" / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match=r"text_encoder: the Llama text encoder's tokenizer is missing"):
        convert_checkpoint(broken, tmp_path / "never")
    assert not (tmp_path / "never").exists() and _leftovers(tmp_path, "never") == []

    # The disk fills up after the transformer and VAE are written: the error names dst, nothing is left.
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hconvert, "write_text_encoder", full)
    assert main(["convert", str(diffusers), str(tmp_path / "full")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'full'}: writing the converted checkpoint failed (No space left on device" in err
    assert not (tmp_path / "full").exists() and _leftovers(tmp_path, "full") == []

    # Interrupted (Ctrl-C) halfway: nothing is left either.
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(hconvert, "write_text_encoder", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert_checkpoint(diffusers, tmp_path / "stopped")
    assert not (tmp_path / "stopped").exists() and _leftovers(tmp_path, "stopped") == []


@pytest.mark.parametrize("part, problem", [
    ("transformer/config.json", "num_attention_heads"),
    ("tokenizer/tokenizer.json", "tokenizer"),
    ("scheduler/scheduler_config.json", "scheduler"),
    ("text_encoder_2/config.json", "pooled_projection_dim"),
])
def test_inspect_flags_configurations_that_would_not_load(folders, part, problem, tmp_path, capsys):
    diffusers, _, _ = folders("t2v")
    broken = tmp_path / "broken"
    shutil.copytree(diffusers, broken)
    path = broken / part
    if part.startswith("tokenizer"):
        path.write_text('{"version": 1, 2: 3}')
    else:
        config = json.loads(path.read_text())
        config.update({"transformer/config.json": {"num_attention_heads": "two"},
                       "scheduler/scheduler_config.json": {"_class_name": "DDIMScheduler"},
                       "text_encoder_2/config.json": {"hidden_size": 48}}[part])
        path.write_text(json.dumps(config))
    assert main(["inspect", str(broken)]) == 1
    out = capsys.readouterr().out
    flagged = [line for line in out.splitlines() if "does not match its configuration" in line]
    assert any(problem in line for line in flagged), out


def test_convert_checks_its_dtypes(folders, tmp_path):
    diffusers, _, _ = folders("t2v")
    with pytest.raises(ValueError, match="text_encoder_dtype='float16' is not supported"):
        convert_checkpoint(diffusers, tmp_path / "out", text_encoder_dtype="float16")
    assert not (tmp_path / "out").exists()
