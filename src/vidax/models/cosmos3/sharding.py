"""Sharding rules of the Cosmos3 transformer and the mesh sizes it can run.

Megatron 1D tensor parallelism over ``tensor``, for both streams of every layer:

* ``heads``: the query output features of ``to_q`` / ``add_q_proj`` and the input features of ``to_out`` /
  ``to_add_out`` (row-parallel);
* ``kv_heads``: the key/value output features of ``to_k``, ``to_v``, ``add_k_proj``, ``add_v_proj`` (the grouped
  query heads of a tensor shard read exactly its key/value heads: query head ``j`` reads key/value head ``j //
  groups``, so tp must divide the key/value head count); the und cache is split the same way;
* ``mlp``: the hidden width of both MLPs (gate/up column-parallel, down row-parallel).

The per-head q/k norms (over ``head_dim``) are replicated and need no collective. ``embed_tokens`` (read once per
prompt), the norms, ``proj_in`` / ``proj_out`` and the time embedder are replicated.

Activations: ``batch`` over ``data`` (CFG halves, prompts); the gen stream's ``tokens`` over ``sequence``
(DeepSpeed-Ulysses: the vision tokens split everywhere except inside attention, zero-padded to a multiple of sp; an
``all_to_all`` trades the token split for a head split, and each sequence shard attends with its slice of the und
cache's heads; where sp does not divide the heads per tensor shard, keys and values are all-gathered instead,
:func:`vidax.core.parallel.sequence_mode`). The und prefill (the prompts, once) is tensor-parallel only.
"""

from __future__ import annotations

from jax.sharding import Mesh

from vidax.core.sharding import DATA, SEQUENCE, TENSOR, ShardingRules, axis_size, check_divisible, divisors
from vidax.models.cosmos3.config import Cosmos3TransformerConfig

COSMOS3_RULES = ShardingRules.of({
    # weights (transformer_specs)
    "layers": None,
    "embed": None,
    "vocab": None,
    "heads": TENSOR,
    "kv_heads": TENSOR,
    "mlp": TENSOR,
    # activations
    "batch": DATA,
    "tokens": SEQUENCE,
})


def check_parallel(cfg: Cosmos3TransformerConfig, mesh: Mesh | None, rules: ShardingRules = COSMOS3_RULES,
                   batch: int | None = None) -> None:
    """Check that ``cfg`` (and a batch) can run on ``mesh`` under ``rules``, before anything is traced or loaded.

    Raises:
      ValueError: ``heads``, ``kv_heads`` and ``mlp`` on different mesh axes; tp does not divide the key/value head
        count (8 in both releases: tp 1, 2, 4, 8) or the MLP width; a rule naming a mesh axis the mesh lacks; dp does
        not divide ``batch`` (the valid dp listed).
    """
    if mesh is None:
        return
    rules.check_mesh(mesh)
    axes = {name: rules.mesh_axes(name) for name in ("heads", "kv_heads", "mlp")}
    if len(set(axes.values())) != 1:
        raise ValueError(f"Cosmos3 layers reduce attention and MLP outputs over one tensor axis; rules map {axes}")
    tp = axis_size(mesh, axes["heads"])
    check_divisible("key/value heads of this Cosmos3 transformer (Megatron splits whole grouped-query heads)",
                    cfg.num_key_value_heads, tp, "tp")
    check_divisible("MLP width (intermediate_size) of this Cosmos3 transformer", cfg.intermediate_size, tp, "tp")
    dp = axis_size(mesh, rules.mesh_axes("batch"))
    if batch is not None and batch % dp:
        raise ValueError(f"dp={dp} does not divide the transformer batch of {batch} (with CFG: 2 x prompts); "
                         "valid dp: " + ", ".join(map(str, divisors(batch))))


def io_specs(rules: ShardingRules) -> dict:
    """``PartitionSpec`` s of the layer programs' inputs on a mesh: ``"stream"`` the gen stream ``(batch, tokens,
    embed)``, ``"und"`` the und stream ``(batch, None, embed)``, ``"table"`` the gen RoPE tables ``(batch, tokens,
    None)``, ``"und_table"`` the und ones, ``"cache"`` the und cache ``(layers, batch, None, kv_heads, None)``,
    ``"lengths"`` ``(batch,)``."""
    return {"stream": rules.spec(("batch", "tokens", "embed")), "und": rules.spec(("batch", None, "embed")),
            "table": rules.spec(("batch", "tokens", None)), "und_table": rules.spec(("batch", None, None)),
            "cache": rules.spec(("layers", "batch", None, "kv_heads", None)), "lengths": rules.spec(("batch",))}


__all__ = ["COSMOS3_RULES", "check_parallel", "io_specs"]
