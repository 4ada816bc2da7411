"""Sharding rules of the HunyuanVideo-1.5 transformer, and the mesh sizes it can run.

Megatron 1D tensor parallelism over ``tensor`` in the dual-stream blocks (the model has no single-stream blocks):

* ``heads``: q/k/v output features of the video and the context stream (``to_q``..., ``add_q_proj``...) and the
  input features of ``to_out`` / ``to_add_out``; the per-head RMS q/k norms (over ``head_dim``) are replicated and
  need no collective;
* ``mlp``: the hidden width of the feed-forwards (``ff``, ``ff_context``);
* ``adaln``: the output features of the AdaLN projections (``norm1.linear``, ``norm1_context.linear``: ``dim -> 6
  dim``, float32: 2.7 billion of the model's 8.3 billion parameters, 10.9 GB), gathered inside the block.

The width ``embed``, the token refiner, the byT5 and image projections, the embedders and the head are replicated:
they run outside the block stack, per sample, on a ``(B, L, dim)`` context of ~2,000 tokens.

Activations: ``batch`` over ``data`` (CFG halves, prompts); ``tokens`` over ``sequence`` (DeepSpeed-Ulysses): the
video tokens and the context tokens are each split over ``sequence`` (each zero-padded to a multiple of sp), and
attention runs over the whole joint sequence (:func:`vidax.core.mmdit.joint_attention`).

Kernels outside the block stack's ``shard_map`` (paper Table 4 fault 7): the token refiner's attention, which GSPMD
cannot partition when it is a Pallas / cuDNN / FFI call, runs inside an explicit ``shard_map`` over the whole mesh,
split over ``data`` and replicated over ``tensor`` and ``sequence``
(:func:`vidax.core.mmdit.replicated_shard_map`).
"""

from __future__ import annotations

from jax.sharding import Mesh

from vidax.core.sharding import DATA, SEQUENCE, TENSOR, ShardingRules, axis_size, check_divisible, divisors
from vidax.models.hunyuanvideo15.config import HunyuanVideo15TransformerConfig

HUNYUAN_VIDEO15_RULES = ShardingRules.of({
    # weights (transformer_specs)
    "layers": None,
    "embed": None,
    "heads": TENSOR,
    "mlp": TENSOR,
    "adaln": TENSOR,
    # activations
    "batch": DATA,
    "tokens": SEQUENCE,
})


def check_parallel(cfg: HunyuanVideo15TransformerConfig, mesh: Mesh | None,
                   rules: ShardingRules = HUNYUAN_VIDEO15_RULES, batch: int | None = None) -> None:
    """Check that ``cfg`` (and a batch) can run on ``mesh`` under ``rules``, before anything is traced or loaded.

    Any sp runs: both token streams are padded to a multiple of sp (padded video rows are left out of the keys,
    padded context rows are masked with the context padding), and where sp does not divide the heads per tensor
    shard, attention all-gathers keys and values instead of Ulysses' ``all_to_all``
    (:func:`vidax.core.parallel.sequence_mode`).

    Raises:
      ValueError: tp does not divide the head count (lists the valid tp: for the 16 heads of the release 1, 2, 4, 8,
        16) or the MLP width; ``heads``, ``mlp`` and ``adaln`` on different mesh axes; a rule naming a mesh axis the
        mesh lacks; dp does not divide ``batch`` (lists the valid dp).
    """
    if mesh is None:
        return
    rules.check_mesh(mesh)
    axes = {name: rules.mesh_axes(name) for name in ("heads", "mlp", "adaln")}
    if len(set(axes.values())) != 1:
        raise ValueError("HunyuanVideo-1.5 blocks reduce attention and MLP outputs and gather the AdaLN vectors over "
                         f"one tensor axis; rules map {axes}")
    tp = axis_size(mesh, axes["heads"])
    check_divisible("attention heads of this HunyuanVideo-1.5 transformer (Megatron splits whole heads)",
                    cfg.num_attention_heads, tp, "tp")
    check_divisible("MLP width (int(dim * mlp_ratio)) of this HunyuanVideo-1.5 transformer", cfg.mlp_dim, tp, "tp")
    dp = axis_size(mesh, rules.mesh_axes("batch"))
    if batch is not None and batch % dp:
        raise ValueError(f"dp={dp} does not divide the transformer batch of {batch} (with CFG: 2 x prompts); "
                         "valid dp: " + ", ".join(map(str, divisors(batch))))
