"""Sharding rules of the HunyuanVideo transformer, and the mesh sizes it can run.

Megatron 1D tensor parallelism over ``tensor``, in both block kinds:

* ``heads``: q/k/v output features of the video and the text stream (``to_q``..., ``add_q_proj``...) and
  the input features of ``to_out`` / ``to_add_out``; the per-head RMS q/k norms (over ``head_dim``) are
  replicated and need no collective.
* ``mlp``: the hidden width of the feed-forwards (``ff``, ``ff_context``) and of the single-stream
  blocks' ``proj_mlp``.
* The single-stream block's fused input projection (the original release's ``linear1``: q, k, v and
  MLP-in as one ``dim -> 3 dim + mlp_dim`` matrix) and its output projection (``linear2`` / diffusers'
  ``proj_out`` over ``[attention; MLP]``) are *declared split*: ``attn/to_q, to_k, to_v`` (``heads``),
  ``proj_mlp`` (``mlp``), ``proj_out/attn`` (``heads`` rows) and ``proj_out/mlp`` (``mlp`` rows), read
  from the fused tensors as views at load (:mod:`vidax.models.hunyuanvideo.keymap`). Each shard then
  holds its heads' q/k/v and its slice of the MLP, and the one row-parallel output projection is the
  sum of two partial products, reduced once, bias added once. A contiguous split of the fused
  matrix would instead hand shard 0 all the queries and shard 1 keys, values and MLP.
* ``adaln``: the output features of the blocks' AdaLN projections (``norm1.linear``,
  ``norm1_context.linear``: ``dim -> 6 dim``; ``norm.linear``: ``dim -> 3 dim``; float32, 3.4 billion
  parameters in the 13B model, 13.6 GB), gathered inside the block (a ``(B, 6 dim)`` exchange).

The model width ``embed``, the token refiner (two small blocks over the text, run before the block
stack) and everything else outside the block stacks are replicated.

Activations: ``batch`` over ``data`` (CFG halves, prompts); ``tokens`` over ``sequence``
(DeepSpeed-Ulysses): the video tokens and the text tokens are each split over ``sequence`` (each
padded to a multiple of sp), so every shard holds a slice of the joint sequence, and attention runs
over the whole joint sequence (see :mod:`vidax.models.hunyuanvideo.transformer`).
"""

from __future__ import annotations

from jax.sharding import Mesh

from vidax.core.sharding import DATA, SEQUENCE, TENSOR, ShardingRules, axis_size, check_divisible, divisors
from vidax.models.hunyuanvideo.config import HunyuanVideoTransformerConfig

HUNYUAN_VIDEO_RULES = ShardingRules.of({
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


def check_parallel(cfg: HunyuanVideoTransformerConfig, mesh: Mesh | None,
                   rules: ShardingRules = HUNYUAN_VIDEO_RULES, batch: int | None = None) -> None:
    """Check that ``cfg`` (and a batch) can run on ``mesh`` under ``rules``, before anything is traced or loaded.

    Any sp runs: both token streams are padded to a multiple of sp (padded video rows are left out of the keys,
    padded text rows are masked with the text padding), and where sp does not divide the heads per tensor shard,
    attention all-gathers keys and values instead of Ulysses' ``all_to_all``
    (:func:`vidax.core.parallel.sequence_mode`).

    Raises:
      ValueError: tp does not divide the head count (lists the valid tp: for the 24 heads of the 13B model 1, 2, 3,
        4, 6, 8, 12, 24) or the MLP width; ``heads``, ``mlp`` and ``adaln`` on different mesh axes; a rule naming a
        mesh axis the mesh lacks; dp does not divide ``batch`` (lists the valid dp).
    """
    if mesh is None:
        return
    rules.check_mesh(mesh)
    axes = {name: rules.mesh_axes(name) for name in ("heads", "mlp", "adaln")}
    if len(set(axes.values())) != 1:
        raise ValueError("HunyuanVideo blocks reduce attention and MLP outputs together (the single-stream output "
                         f"projection reads both) and gather the AdaLN vectors over one tensor axis; rules map {axes}")
    tp = axis_size(mesh, axes["heads"])
    check_divisible("attention heads of this HunyuanVideo transformer (Megatron splits whole heads)",
                    cfg.num_attention_heads, tp, "tp")
    check_divisible("MLP width (int(dim * mlp_ratio)) of this HunyuanVideo transformer", cfg.mlp_dim, tp, "tp")
    dp = axis_size(mesh, rules.mesh_axes("batch"))
    if batch is not None and batch % dp:
        raise ValueError(f"dp={dp} does not divide the transformer batch of {batch} (with true CFG: 2 x prompts); "
                         "valid dp: " + ", ".join(map(str, divisors(batch))))
