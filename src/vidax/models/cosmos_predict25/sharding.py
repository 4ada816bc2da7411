"""Sharding rules of the Cosmos-Predict2.5 transformer, the mesh sizes it can run, and its block inputs' shardings.

Megatron 1D tensor parallelism over ``tensor`` in the blocks:

* ``heads``: q/k/v output features of the self- and the cross-attention (``attn1``, ``attn2``; the cross-attention's
  keys and values are projected from the 1024-wide text context) and the input features of their ``to_out``; the
  per-head RMS q/k norms (over ``head_dim``) are replicated and need no collective;
* ``mlp``: the hidden width of the GELU feed-forward;
* ``adaln``: the output features of the blocks' AdaLN-LoRA up-projections (``norm{1,2,3}.linear_2``: ``256 -> 3 dim``,
  float32; 0.4 billion parameters, 1.7 GB, in the 14B), gathered inside the block (each shard writes its slice, then a
  ``psum``), where the timestep's ``3 dim`` AdaLN-LoRA vector is added.

The width ``embed``, the AdaLN-LoRA down-projections (``dim -> 256``), the patch and time embeddings, the learnable
position tables, ``crossattn_proj`` (the 100352 -> 1024 text projection, run once per step outside the blocks) and the
head are replicated.

Activations: ``batch`` over ``data`` (CFG halves, prompts); ``tokens`` over ``sequence`` (DeepSpeed-Ulysses): the
video tokens are split over ``sequence`` (zero-padded to a multiple of sp) through the whole block; self-attention
trades the token split for a head split with ``all_to_all`` (or all-gathers keys and values where sp does not divide
the heads per tensor shard: :func:`vidax.core.parallel.sequence_mode`); the cross-attention's queries stay split and
every shard attends to the whole (replicated) text context for its heads.
"""

from __future__ import annotations

from jax.sharding import Mesh

from vidax.core.sharding import DATA, SEQUENCE, TENSOR, ShardingRules, axis_size, check_divisible, divisors
from vidax.models.cosmos_predict25.config import CosmosTransformerConfig

COSMOS_PREDICT25_RULES = ShardingRules.of({
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


def check_parallel(cfg: CosmosTransformerConfig, mesh: Mesh | None, rules: ShardingRules = COSMOS_PREDICT25_RULES,
                   batch: int | None = None) -> None:
    """Check that ``cfg`` (and a batch) can run on ``mesh`` under ``rules``, before anything is traced or loaded.

    Any sp runs: the tokens are padded to a multiple of sp (the padded keys masked), and where sp does not divide the
    heads per tensor shard, self-attention all-gathers keys and values instead of Ulysses' ``all_to_all``.

    Raises:
      ValueError: tp does not divide the head count (lists the valid tp: 1, 2, 4, 8, 16 for the 2B's 16 heads; 1, 2,
        4, 5, 8, 10, 20, 40 for the 14B's 40) or the MLP width; ``heads``, ``mlp`` and ``adaln`` on different mesh
        axes; a rule naming a mesh axis the mesh lacks; dp does not divide ``batch`` (lists the valid dp).
    """
    if mesh is None:
        return
    rules.check_mesh(mesh)
    axes = {name: rules.mesh_axes(name) for name in ("heads", "mlp", "adaln")}
    if len(set(axes.values())) != 1:
        raise ValueError("Cosmos-Predict2.5 blocks reduce attention and MLP outputs and gather the AdaLN vectors over "
                         f"one tensor axis; rules map {axes}")
    tp = axis_size(mesh, axes["heads"])
    check_divisible("attention heads of this Cosmos-Predict2.5 transformer (Megatron splits whole heads)",
                    cfg.num_attention_heads, tp, "tp")
    check_divisible("MLP width (int(dim * mlp_ratio)) of this Cosmos-Predict2.5 transformer", cfg.mlp_dim, tp, "tp")
    dp = axis_size(mesh, rules.mesh_axes("batch"))
    if batch is not None and batch % dp:
        raise ValueError(f"dp={dp} does not divide the transformer batch of {batch} (with CFG: 2 x prompts); "
                         "valid dp: " + ", ".join(map(str, divisors(batch))))


def block_io_specs(rules: ShardingRules) -> dict:
    """``PartitionSpec`` of each block-stack input on a mesh (the ``shard_map`` in-specs and the block program's
    shardings).

    Returns:
      ``{"stream": (batch, tokens, embed)`` (the residual stream ``x``), ``"frames": (batch, None, None)`` (the
      per-frame time embeddings), ``"tokens": (tokens,)`` (the token -> frame index), ``"table": (tokens, None)``
      (RoPE cos / sin, the learnable position embedding), ``"context": (batch, None, None)`` (the projected text),
      ``"lengths": (batch,)}`` under ``rules``.
    """
    return {"stream": rules.spec(("batch", "tokens", "embed")), "frames": rules.spec(("batch", None, None)),
            "tokens": rules.spec(("tokens",)), "table": rules.spec(("tokens", None)),
            "context": rules.spec(("batch", None, None)), "lengths": rules.spec(("batch",))}


__all__ = ["COSMOS_PREDICT25_RULES", "block_io_specs", "check_parallel"]
