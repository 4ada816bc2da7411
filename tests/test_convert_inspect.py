"""`vidax convert` (translate once, load as a plain copy) and `vidax inspect` (headers only)."""

import json
import shutil

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from vidax.checkpoint.errors import CheckpointError
from vidax.cli import main
from vidax.models.wan.convert import convert_checkpoint
from vidax.models.wan.demo import write_demo_checkpoint
from vidax.models.wan.pipeline import WanPipeline


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return write_demo_checkpoint(tmp_path_factory.mktemp("conv") / "demo", seed=5)


def _same_params(a, b):
    la, lb = jax.tree.leaves_with_path(a), jax.tree.leaves_with_path(b)
    assert [p for p, _ in la] == [p for p, _ in lb]
    for (path, x), (_, y) in zip(la, lb):
        assert x.dtype == y.dtype, path
        np.testing.assert_array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8), err_msg=str(path))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_converted_loads_exactly_like_the_source(demo, tmp_path, dtype):
    summary = convert_checkpoint(demo, tmp_path / "out", dtype=dtype)
    assert summary["source_layout"] == "diffusers"
    src = WanPipeline.from_pretrained(demo, dtype=dtype)
    out = WanPipeline.from_pretrained(tmp_path / "out", dtype=dtype)
    assert out.layout == "vidax"
    _same_params(src.transformer_tree(), out.transformer_tree())
    _same_params(src.vae_params, out.vae_params)
    _same_params(src.text_params, out.text_params)
    assert out.scheduler_config == src.scheduler_config
    # Stored already cast: the bf16 file holds bf16 blocks and fp32-pinned AdaLN tables.
    meta = json.loads((tmp_path / "out" / "vidax_index.json").read_text())
    assert meta["dtypes"]["transformer"] == dtype


def _mapped_ranges(path):
    """The address ranges of this process's memory mappings of ``path`` (from /proc/self/maps)."""
    out = []
    for line in open("/proc/self/maps"):
        fields = line.split()
        if len(fields) >= 6 and fields[5] == str(path):
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            out.append((lo, hi))
    return out


def _in_file(array, ranges):
    ptr = array.unsafe_buffer_pointer()
    return any(lo <= ptr and ptr + array.nbytes <= hi for lo, hi in ranges)


@pytest.mark.parametrize("block_loop", ["host", "scan"])
def test_converted_checkpoint_at_its_own_dtype_loads_without_a_copy(demo, tmp_path, block_loop):
    from vidax.checkpoint.safetensors_io import SafetensorsFile

    convert_checkpoint(demo, tmp_path / "out", dtype="float32")
    weights = tmp_path / "out" / "transformer" / "params.safetensors"
    # Every tensor whose size is a multiple of 64 bytes starts 64-byte aligned in the file, and the
    # reference library still reads the file (a header padded with spaces is valid safetensors).
    st = SafetensorsFile(weights)
    assert st._data_start % 64 == 0
    aligned = [k for k in st.keys() if st.get(k).nbytes % 64 == 0]
    assert len(aligned) == len(st.keys())  # all of the demo's tensors: the writer puts odd sizes last
    assert all((st._data_start + st._entries[k][2]) % 64 == 0 for k in aligned)
    np.testing.assert_array_equal(load_file(weights)["blocks/attn1/to_q/kernel"], st.get("blocks/attn1/to_q/kernel"))

    pipe = WanPipeline.from_pretrained(tmp_path / "out", dtype="float32", block_loop=block_loop)
    assert pipe.block_loop == block_loop
    ranges = _mapped_ranges(weights.resolve())
    assert ranges, "the converted weights are not memory-mapped"
    leaves = jax.tree.leaves(pipe.transformer_params)
    if pipe.offload is not None:
        leaves += jax.tree.leaves(pipe.offload.chunks)
    assert leaves and all(_in_file(x, ranges) for x in leaves)
    # The VAE's and the text encoder's arrays are the mapped files too.
    for part, tree in (("vae", pipe.vae_params), ("text_encoder", pipe.text_params)):
        part_ranges = _mapped_ranges((tmp_path / "out" / part / "params.safetensors").resolve())
        assert all(_in_file(x, part_ranges) for x in jax.tree.leaves(tree)), part
    # The same values as a copying load of the source.
    _same_params(WanPipeline.from_pretrained(demo, dtype="float32", block_loop=block_loop).transformer_tree(),
                 pipe.transformer_tree())
    # Loaded at another dtype, every tensor is converted into buffers of its own.
    cast = WanPipeline.from_pretrained(tmp_path / "out", dtype="bfloat16", block_loop=block_loop)
    blocks = cast.offload.chunks[0] if cast.offload is not None else cast.transformer_params["blocks"]
    assert not _in_file(blocks["attn1"]["to_q"]["kernel"], ranges)


def test_converted_original_layout_and_generate(tmp_path):
    from vidax.models.wan.original_fixture import write_original_checkpoint

    orig = write_original_checkpoint(tmp_path / "orig", seed=1)
    convert_checkpoint(orig, tmp_path / "out", dtype="float32")
    a = WanPipeline.from_pretrained(orig, dtype="float32")
    b = WanPipeline.from_pretrained(tmp_path / "out", dtype="float32")
    _same_params(a.transformer_tree(), b.transformer_tree())
    _same_params(a.vae_params, b.vae_params)
    _same_params(a.text_params, b.text_params)
    assert b.scheduler_config["flow_shift"] == a.scheduler_config["flow_shift"] == 5.0
    assert main(["generate", "--checkpoint", str(tmp_path / "out"), "--prompt", "a fox", "--height", "32", "--width",
                 "32", "--num-frames", "5", "--steps", "2", "--dtype", "float32", "--no-progress",
                 "--out", str(tmp_path / "fox.mp4")]) == 0
    assert (tmp_path / "fox.mp4").stat().st_size > 0


def test_convert_refuses_existing_output_and_leaves_nothing_on_error(demo, tmp_path, capsys):
    (tmp_path / "exists").mkdir()
    assert main(["convert", str(demo), str(tmp_path / "exists")]) == 2
    assert "exists" in capsys.readouterr().err
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(demo, broken)
    sd = load_file(str(broken / "vae" / "diffusion_pytorch_model.safetensors"))
    sd.pop(sorted(sd)[0])
    save_file(sd, str(broken / "vae" / "diffusion_pytorch_model.safetensors"))
    with pytest.raises(CheckpointError, match="missing keys"):
        convert_checkpoint(broken, tmp_path / "never")
    assert not (tmp_path / "never").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".never")] == []


def test_inspect_reports_layout_counts_and_unknown_keys(demo, tmp_path, capsys):
    assert main(["inspect", str(demo)]) == 0
    out = capsys.readouterr().out
    assert "Wan2.1 text-to-video, diffusers layout" in out
    assert "every parameter filled exactly once" in out
    n = sum(int(np.prod(v.shape)) for v in load_file(str(demo / "transformer" / "diffusion_pytorch_model.safetensors")).values())
    assert f"({n:,})" in out
    sd = load_file(str(demo / "transformer" / "diffusion_pytorch_model.safetensors"))
    sd["blocks.0.attn1.surprise.weight"] = np.zeros((2, 2), np.float32)
    save_file(sd, str(tmp_path / "t.safetensors"))
    assert main(["inspect", str(tmp_path / "t.safetensors")]) == 0
    out = capsys.readouterr().out
    assert "Wan2.1 transformer (diffusers layout)" in out
    assert "keys our map does not know: 1" in out and "blocks.0.attn1.surprise.weight" in out


def test_inspect_exits_nonzero_on_a_checkpoint_that_will_not_load(demo, tmp_path, capsys):
    """A renamed tensor: the report lists the missing and unexpected keys, and the exit status says it fails."""
    broken = tmp_path / "broken"
    shutil.copytree(demo, broken)
    path = broken / "transformer" / "diffusion_pytorch_model.safetensors"
    sd = load_file(str(path))
    sd["blocks.0.attn1.renamed.weight"] = sd.pop("blocks.0.attn1.to_q.weight")
    save_file(sd, str(path))
    assert main(["inspect", str(broken)]) == 1
    captured = capsys.readouterr()
    assert "does not match its configuration" in captured.out and "blocks.0.attn1.to_q.weight" in captured.out
    assert "will not load" in captured.err


def test_inspect_original_i2v_release_and_its_clip_file(tmp_path, capsys):
    """An original Wan2.1 I2V folder: the model named, every component (the CLIP .pth through its fused-q/k/v
    views) filled exactly once; the CLIP file alone is recognised, its text tower not counted as unknown."""
    from vidax.models.wan.demo import write_demo_checkpoint
    from vidax.models.wan.layout import ORIGINAL_CLIP
    from vidax.models.wan.original_fixture import write_original_from_diffusers

    diff = write_demo_checkpoint(tmp_path / "diff", seed=2, task="i2v",
                                 image_encoder_overrides=dict(hidden_size=160, num_attention_heads=2))
    orig = write_original_from_diffusers(diff, tmp_path / "orig")
    assert main(["inspect", str(orig)]) == 0
    out = capsys.readouterr().out
    assert "Wan2.1 image-to-video, original layout" in out and f"image_encoder: {orig / ORIGINAL_CLIP}" in out
    assert out.count("every parameter filled exactly once") == 4
    assert main(["inspect", str(orig / ORIGINAL_CLIP)]) == 0
    out = capsys.readouterr().out
    assert "CLIP image encoder (Wan original layout) (100% of keys mapped)" in out
    assert "keys our map does not know: 0" in out


@pytest.mark.parametrize("task", ["i2v", "ti2v", "t2v-a14b", "i2v-original"])
def test_every_wan_model_converts_and_loads_like_its_source(task, tmp_path):
    """I2V (CLIP from the diffusers folder or from the original .pth), TI2V-5B (Wan2.2 VAE, per-token timesteps)
    and A14B (both experts, boundary): the converted folder's parameters are bit-identical to the source's and
    its frames equal the source's."""
    from PIL import Image

    from vidax.models.wan.original_fixture import write_original_from_diffusers

    if task == "i2v-original":
        diff = write_demo_checkpoint(tmp_path / "diff", seed=3, task="i2v",
                                     image_encoder_overrides=dict(hidden_size=160, num_attention_heads=2))
        src = write_original_from_diffusers(diff, tmp_path / "src")
    else:
        src = write_demo_checkpoint(tmp_path / "src", seed=3, task=task)
    summary = convert_checkpoint(src, tmp_path / "out", dtype="float32")
    index = json.loads((tmp_path / "out" / "vidax_index.json").read_text())
    want_parts = {"t2v-a14b": ["transformer_2"], "ti2v": []}.get(task, ["image_encoder", "image_processor"])
    assert index["parts"] == summary["parts"] == want_parts
    assert index["pipeline"].get("expand_timesteps", False) == (task == "ti2v")
    assert index["pipeline"].get("boundary_ratio") == (0.875 if task == "t2v-a14b" else None)
    a = WanPipeline.from_pretrained(src, dtype="float32")
    b = WanPipeline.from_pretrained(tmp_path / "out", dtype="float32")
    assert b.layout == "vidax" and type(b) is type(a)
    for i in a.experts.resident():
        _same_params(a.transformer_tree(i), b.transformer_tree(i))
    if a.image_encoder is not None:
        _same_params(a.image_encoder[0], b.image_encoder[0])
        assert a.image_encoder[1] == b.image_encoder[1] and a.image_processor == b.image_processor
    image = Image.fromarray((np.random.default_rng(0).random((70, 100, 3)) * 255).astype(np.uint8))
    kw = dict(height=32, width=64 if task == "ti2v" else 32, num_frames=5, num_inference_steps=3, flow_shift=3.0,
              output_type="float", progress=False, image=None if task == "t2v-a14b" else image)
    np.testing.assert_array_equal(b("a cat", "blurry", **kw).frames, a("a cat", "blurry", **kw).frames)


@pytest.mark.parametrize("variant", ["2b", "1.5-i2v"])
def test_cogvideox_converts_inspects_and_loads_like_its_source(variant, tmp_path, capsys):
    """CogVideoX (2B: sin-cos positions; 1.5 I2V: temporal patches, ofs): `vidax convert` writes the vidax layout,
    whose parameters are bit-identical to the source's; `vidax inspect` describes both; generation routes to it."""
    from vidax.models.cogvideox.demo import write_demo_checkpoint as write_cog
    from vidax.models.cogvideox.pipeline import CogVideoXImageToVideoPipeline, CogVideoXPipeline

    src = write_cog(tmp_path / "src", seed=4, variant=variant)
    assert main(["convert", str(src), str(tmp_path / "out"), "--dtype", "float32"]) == 0
    index = json.loads((tmp_path / "out" / "vidax_index.json").read_text())
    assert index["family"] == "cogvideox" and index["source_layout"] == "diffusers"
    cls = CogVideoXImageToVideoPipeline if variant.endswith("-i2v") else CogVideoXPipeline
    a = cls.from_pretrained(src, dtype="float32")
    b = cls.from_pretrained(tmp_path / "out", dtype="float32")
    for x, y in ((a.transformer_tree(), b.transformer_tree()), (a.vae_params, b.vae_params),
                 (a.text_params, b.text_params)):
        _same_params(x, y)
    assert a.scheduler_config == b.scheduler_config
    capsys.readouterr()
    for folder, layout in ((src, "diffusers"), (tmp_path / "out", "vidax")):
        assert main(["inspect", str(folder)]) == 0
        out = capsys.readouterr().out
        assert f"CogVideoX {index['pipeline_class']}, {layout} layout" in out
        assert out.count("every parameter filled exactly once") == 3
    if not variant.endswith("-i2v"):
        assert main(["generate", "--checkpoint", str(tmp_path / "out"), "--prompt", "a panda", "--height", "32",
                     "--width", "32", "--num-frames", "9", "--steps", "2", "--dtype", "float32", "--no-progress",
                     "--out", str(tmp_path / "p.mp4")]) == 0
        assert (tmp_path / "p.mp4").stat().st_size > 0
