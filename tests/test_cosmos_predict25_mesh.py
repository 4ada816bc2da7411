"""Tensor and sequence parallelism, the host block loop and weight offloading of the Cosmos-Predict2.5 transformer on 8
simulated CPU devices (tests/conftest.py sets ``--xla_force_host_platform_device_count=8``).

Float32, a tiny configuration with 4 heads of 16, 3 blocks (so chunks of 2 pad the last chunk with a zero block) and
the learnable extra position embedding (the one thing a zero block adds: taken off in the epilogue); a batch of two
samples conditioned on 1 and 2 latent frames with per-frame timesteps (the token -> frame index is split over
``sequence`` with the tokens), whose texts keep 3 and 5 of 5 tokens. 27 video tokens (3 x 3 x 3): sp does not divide
them, so they are padded and the padded keys masked. The reference of every run is the same transformer on one device
with its blocks under ``lax.scan`` (itself at diffusers parity: tests/test_cosmos_predict25_transformer.py).
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from vidax.checkpoint.writer import save_component, to_state_dict
from vidax.core.offload import OffloadedStack
from vidax.core.params import random_params
from vidax.core.placement import mesh_context
from vidax.core.sharding import ShardingRules, make_mesh
from vidax.models.cosmos_predict25 import block_loop
from vidax.models.cosmos_predict25.config import CosmosTransformerConfig
from vidax.models.cosmos_predict25.keymap import load_transformer, transformer_keymap
from vidax.models.cosmos_predict25.sharding import COSMOS_PREDICT25_RULES, check_parallel
from vidax.models.cosmos_predict25.transformer import STACK, forward, transformer_specs

CFG = CosmosTransformerConfig(in_channels=5, out_channels=4, num_attention_heads=4, attention_head_dim=16, num_layers=3,
                              mlp_ratio=2.0, text_embed_dim=16, adaln_lora_dim=4, max_size=(8, 32, 32),
                              patch_size=(1, 2, 2), rope_scale=(1.0, 3.0, 3.0), extra_pos_embed_type="learnable",
                              use_crossattn_projection=True, crossattn_proj_in_channels=24,
                              encoder_hidden_states_channels=16)
SHAPE = (2, 4, 3, 6, 6)


def _rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return np.linalg.norm(out - ref) / np.linalg.norm(ref)


def _mesh(dp, tp, sp):
    return make_mesh(dp, tp, sp, devices=jax.devices()[: dp * tp * sp])


_PARAMS: dict = {}


def _params():
    if not _PARAMS:
        params = random_params(transformer_specs(CFG), seed=0, scale=0.2)
        rng = np.random.default_rng(1)

        # A bias large enough that a row-parallel bias added tp times would show (crossattn_proj's is the only one,
        # outside the blocks); norm scales ~1; learnable tables of unit size.
        def perturb(path, a):
            key = path[-1].key
            if key == "bias":
                return a + 0.5 * rng.standard_normal(a.shape, dtype=np.float32)
            return a + 1.0 if key == "scale" else (a * 5.0 if key.startswith("pos_emb") else a)

        _PARAMS.update(jax.tree_util.tree_map_with_path(perturb, params))
    return _PARAMS


def _inputs():
    rng = np.random.default_rng(2)
    b, _, t, h, w = SHAPE
    condition = np.zeros((b, 1, t, h, w), np.float32)
    timestep = np.broadcast_to(np.array([0.937, 0.3125], np.float32)[:, None, None, None, None], (b, 1, t, 1, 1)).copy()
    for i, n in enumerate((1, 2)):
        condition[i, :, :n] = 1.0
        timestep[i, :, :n] = 0.0001
    return (rng.standard_normal(SHAPE, dtype=np.float32), timestep,
            rng.standard_normal((b, 5, 24), dtype=np.float32), condition, None, np.array([3, 5], np.int32))


_REFERENCE: list = []


def _reference():
    if not _REFERENCE:
        _REFERENCE.append(np.asarray(forward(jax.tree.map(jnp.asarray, _params()), *_inputs(), cfg=CFG)))
    return _REFERENCE[0]


def _placed(mesh):
    return jax.tree.map(jax.device_put, _params(), COSMOS_PREDICT25_RULES.param_shardings(transformer_specs(CFG), mesh))


def test_rules_give_megatron_shardings():
    pspecs = COSMOS_PREDICT25_RULES.param_specs(transformer_specs(CFG), _mesh(2, 2, 2))
    blocks = pspecs[STACK]
    column, row = P(None, None, "tensor"), P(None, "tensor", None)
    for attn in ("attn1", "attn2"):
        for name in ("to_q", "to_k", "to_v"):
            assert blocks[attn][name]["kernel"] == column
        assert blocks[attn]["to_out"]["kernel"] == row and blocks[attn]["norm_q"]["scale"] == P(None, None)
    assert blocks["ff"]["up"]["kernel"] == column and blocks["ff"]["down"]["kernel"] == row
    for norm in ("norm1", "norm2", "norm3"):  # AdaLN-LoRA: the up-projection's outputs split, the down one replicated
        assert blocks[norm]["linear_2"]["kernel"] == column
        assert blocks[norm]["linear_1"]["kernel"] == P(None, None, None)
    for outside in (pspecs["crossattn_proj"]["kernel"], pspecs["time_embed"]["t_embedder"]["linear_2"]["kernel"],
                    pspecs["norm_out"]["linear_2"]["kernel"], pspecs["patch_embed"]["proj"]["kernel"],
                    pspecs["learnable_pos_embed"]["pos_emb_t"], pspecs["proj_out"]["kernel"]):
        assert all(axis is None for axis in outside)  # replicated, outside the block stack


# (dp, tp, sp): Ulysses' all_to_all (sp divides the 4 / tp local heads), and at tp 2 x sp 4 the other mode (2 local
# heads over 4 sequence shards: keys and values all-gathered).
SPLITS = [(1, 2, 1), (1, 1, 2), (2, 2, 2), (1, 2, 4)]


@pytest.mark.parametrize("split", SPLITS, ids=[f"dp{d}-tp{t}-sp{s}" for d, t, s in SPLITS])
def test_parallel_transformer_equals_single_device(split):
    mesh = _mesh(*split)
    with mesh_context(mesh):
        out = np.asarray(forward(_placed(mesh), *_inputs(), cfg=CFG, mesh=mesh))
    ref = _reference()
    assert out.shape == ref.shape == SHAPE
    assert _rel(out, ref) < 1e-5


def test_the_cpu_kernel_runs_per_shard():
    """cpu_flash (an FFI call GSPMD cannot partition) inside the blocks' shard_map: the self-attention's calls see one
    sample and the heads of one shard (paper Table 4 fault 7)."""
    from vidax.core.attention import resolve_implementation

    if resolve_implementation("auto", "cpu").value != "cpu_flash":  # `make test` installs (and builds) the package
        pytest.fail("the native CPU attention module is not built: reinstall vidax (make install-test)")
    mesh = _mesh(2, 2, 2)
    params, inputs = _placed(mesh), _inputs()
    compiled = forward.lower(params, *inputs, cfg=CFG, mesh=mesh, attention_impl="cpu_flash").compile()
    assert _rel(compiled(params, *inputs), _reference()) < 1e-5
    # Ulysses: 28 padded tokens, 4 heads / tp 2 / sp 2 = 1 head per call, one sample per data shard.
    calls = [line for line in compiled.as_text().splitlines() if "vidax_attention_f32" in line and "= f32[" in line]
    assert calls and any(re.search(r"= f32\[1,28,1,16\]", line) for line in calls), calls


def _stacks(chunk, mesh=None, memory_kind="auto"):
    params = _params() if mesh is None else _placed(mesh)
    shardings = None if mesh is None else COSMOS_PREDICT25_RULES.param_shardings(transformer_specs(CFG), mesh)[STACK]
    rest = {k: v for k, v in params.items() if k != STACK}
    return jax.tree.map(jnp.asarray, rest) if mesh is None else rest, {
        STACK: OffloadedStack.from_stacked(params[STACK], chunk, shardings, memory_kind)}


CHUNKS = [(1, "auto", True, None), (2, "auto", True, None), (1, "device", True, None), (2, "auto", False, (2, 2, 2))]


@pytest.mark.parametrize("chunk,memory,overlap,split", CHUNKS,
                         ids=["chunk1", "chunk2-padded", "host-loop", "chunk2-dp2tp2sp2"])
def test_offloaded_and_host_loop_steps_equal_the_resident_forward(chunk, memory, overlap, split):
    """Chunks of 1 and 2 blocks in host memory (the last chunk of 2 padded with a zero block, its position embedding
    taken off in the epilogue), streamed with overlap on one device and serially on a dp 2 x tp 2 x sp 2 mesh, and the
    host block loop (one-block chunks in device memory)."""
    mesh = None if split is None else _mesh(*split)
    params, stacks = _stacks(chunk, mesh, memory)
    assert block_loop.loop_name(stacks) == ("host" if memory == "device" else "offload")
    assert stacks[STACK].plan.padded_layers == (4 if chunk == 2 else 3)
    args = _inputs()
    timings = [] if not overlap else None
    step = block_loop.compile_step(params, stacks, args, cfg=CFG, mesh=mesh, overlap=overlap, timings=timings)
    out = np.asarray(step(params, args))
    assert _rel(out, _reference()) < 1e-5
    if timings is not None:
        assert len(timings) == stacks[STACK].num_chunks
    np.testing.assert_array_equal(np.asarray(step(params, args)), out)  # a second step reuses the programs


def test_padded_chunk_without_the_correction_is_wrong():
    """The zero block adds the learnable position embedding: without the epilogue's correction the padded chunk's
    result is off (so the test above could not pass without it)."""
    params, stacks = _stacks(2)
    args = _inputs()
    pro, program, _ = block_loop.compile_pieces(params, stacks[STACK].abstract_chunk(), args, cfg=CFG)
    from vidax.core.offload import stream
    from vidax.models.cosmos_predict25.transformer import forward_epilogue

    x, inputs = pro(params, args)
    x = stream(stacks[STACK], lambda chunk, x: program(chunk, x, inputs), x)
    out = forward_epilogue(params, x, inputs, cfg=CFG, latent_shape=SHAPE)
    assert _rel(out, _reference()) > 1e-3


def test_prepare_and_finish_run_inside_the_step():
    """The pipeline's work around the transformer: a CFG batch built in the prologue (``prepare``: the same latents,
    mask and timesteps for two texts) and the guided combination in the epilogue (``finish``), resident and
    offloaded, equal to doing it outside."""
    latents, timestep, text, condition, _, _ = _inputs()

    def prepare(latents, timestep, text, condition):
        return block_loop.TransformerInputs(jnp.concatenate([latents, latents]),
                                            jnp.concatenate([timestep, timestep]), text,
                                            jnp.concatenate([condition, condition]))

    def finish(out, scale):
        pos, neg = jnp.split(out, 2)
        return pos + scale * (pos - neg)

    args = (latents[:1], timestep[:1], text, condition[:1])
    want = np.asarray(finish(forward(jax.tree.map(jnp.asarray, _params()), *prepare(*args), cfg=CFG), 7.0))
    for params, stacks in (_stacks(1, memory_kind="device"), (jax.tree.map(jnp.asarray, _params()), None)):
        step = block_loop.compile_step(params, stacks, args, (np.float32(7.0),), cfg=CFG, prepare=prepare,
                                       finish=finish)
        out = np.asarray(step(params, args, (np.float32(7.0),)))
        assert out.shape == (1, *SHAPE[1:])
        assert _rel(out, want) < 1e-6


def test_load_transformer_places_the_mesh_and_the_chunks(tmp_path):
    """A diffusers-layout checkpoint (written from the parameters through the key map run backwards) loaded straight
    into host-memory chunks of 2 sharded over dp 2 x tp 2 x sp 2; the step equals the reference."""
    save_component(tmp_path, "diffusion_pytorch_model.safetensors",
                   to_state_dict(_params(), transformer_keymap(CFG), transformer_specs(CFG)), CFG.to_dict())
    mesh = _mesh(2, 2, 2)
    loaded = load_transformer(tmp_path, mesh=mesh, offload_chunk=2)
    assert loaded.cfg == CFG and block_loop.loop_name(loaded.stacks) == "offload"
    chunk = loaded.stacks[STACK].chunks[0]["attn1"]["to_q"]["kernel"]
    assert chunk.sharding.memory_kind == "pinned_host" and chunk.sharding.spec == P(None, None, "tensor")
    args = _inputs()
    step = block_loop.compile_step(loaded.params, loaded.stacks, args, cfg=CFG, mesh=mesh)
    assert _rel(step(loaded.params, args), _reference()) < 1e-5


def test_offload_chunk_and_mesh_errors_are_clear():
    with pytest.raises(ValueError, match="offload chunk must be an integer between 1 and 3"):
        block_loop.plans_for(CFG, 4)
    assert block_loop.plans_for(CFG, None, "scan") is None
    assert block_loop.plans_for(CFG, 2)[STACK].chunk == 2
    release = CosmosTransformerConfig.from_original("14B")  # 40 heads
    with pytest.raises(ValueError, match=re.escape("tp=3 does not divide the 40 attention heads") +
                       ".*valid tp: 1, 2, 4, 5, 8, 10, 20, 40$"):
        check_parallel(release, _mesh(1, 3, 1))
    check_parallel(release, _mesh(1, 8, 1))
    check_parallel(release, _mesh(1, 1, 7))  # any sp: the tokens are padded
    with pytest.raises(ValueError, match="dp=2 does not divide the transformer batch of 3.*valid dp: 1, 3"):
        check_parallel(release, _mesh(2, 1, 1), batch=3)
    split = ShardingRules.of({**dict(COSMOS_PREDICT25_RULES.rules), "mlp": "sequence"})
    with pytest.raises(ValueError, match="over one tensor axis"):
        check_parallel(release, _mesh(1, 2, 2), split)
    with pytest.raises(ValueError, match="tp=8 does not divide the 4 attention heads"):
        forward(_placed(_mesh(1, 1, 1)), *_inputs(), cfg=CFG, mesh=_mesh(1, 8, 1))
