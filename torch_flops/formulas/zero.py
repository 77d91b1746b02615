"""Operations that are 0 FLOPs by definition: views, reshapes, copies, casts, indexing,
concatenation, creation and shape queries. They move or allocate data but do no arithmetic.
Everything here is an explicit, reviewed list: an op missing from every table is *unsupported*,
never silently zero."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torch_flops.formulas import Name, aten_ops, functions, methods, register, zero_flops

__all__ = ["ATEN_ZERO_OPS", "CREATES", "GATHERS", "INPLACE_OPERATORS", "METADATA_INPLACE", "OVERWRITES", "SCATTERS",
           "ZERO_FUNCTIONS", "ZERO_METHODS", "ZERO_MODULES"]

#: Indexed reads (and the bags of embedding.py): for the roofline's bytes they read the rows they
#: gather (their output's bytes) and their indices, never the whole table (plan.Traffic.GATHER).
#: Names as the table keys end: function/method/aten names and module classes.
GATHERS: frozenset[str] = frozenset({
    "embedding", "Embedding", "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only", "EmbeddingBag",
    "index_select", "gather", "take", "take_along_dim", "index", "_unsafe_index", "masked_select", "getitem",
})

#: In-place ops that write their tensor without reading it: they read only their other operands
#: (``copy_`` its source) and write the whole tensor (plan.Traffic.OVERWRITE). Other in-place ops
#: (a name ending in one ``_``: ``add_``, ``relu_``, ``masked_fill_``) read and write their tensor.
OVERWRITES: frozenset[str] = frozenset({
    "zero_", "fill_", "copy_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_", "cauchy_",
    "log_normal_", "geometric_", "setitem", "__setitem__",
})
#: Indexed in-place writes: they read their indices and source and write as many elements as
#: the source holds (the scalar forms: as many as there are indices), not the whole tensor; the
#: accumulating ones (``index_add_``, ``scatter_add_``, ``scatter_reduce_``, ``index_put_`` with
#: ``accumulate=True``) also read what they update (plan.Traffic.SCATTER).
SCATTERS: frozenset[str] = frozenset({
    "index_put_", "_index_put_impl_", "index_copy_", "scatter_", "scatter_add_", "scatter_reduce_", "index_add_",
    "index_reduce_", "masked_scatter_", "index_fill_", "put_",
})
#: Python's augmented assignments (``x += y`` traced as ``operator.iadd`` or ``__iadd__``): in place.
INPLACE_OPERATORS: frozenset[str] = frozenset(
    f"{prefix}{name}{suffix}" for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or",
                                           "xor", "lshift", "rshift", "matmul")
    for prefix, suffix in (("i", ""), ("__i", "__")))
#: In-place ops that change only a tensor's metadata (or autograd flags): they move no bytes.
METADATA_INPLACE: frozenset[str] = frozenset({
    "requires_grad_", "detach_", "squeeze_", "unsqueeze_", "t_", "transpose_", "resize_", "resize_as_",
    "as_strided_", "swapaxes_", "swapdims_", "share_memory_", "set_", "retain_grad",
})

_VIEWS = [
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "swapaxes", "swapdims",
    "movedim", "moveaxis", "expand", "expand_as", "broadcast_to", "flatten", "unflatten", "squeeze",
    "unsqueeze", "narrow", "select", "unfold", "as_strided", "diagonal", "split", "split_with_sizes",
    "chunk", "tensor_split", "unbind", "view_as_real", "view_as_complex", "real", "imag", "contiguous",
    "detach", "alias", "adjoint",
]
_COPIES = [
    "clone", "repeat", "repeat_interleave", "tile", "flip", "fliplr", "flipud", "roll", "rot90", "tril",
    "triu", "diag", "diag_embed", "index_select", "gather", "take", "take_along_dim", "masked_select",
    "scatter", "index_copy", "index_fill", "masked_scatter", "cat", "concat", "concatenate", "stack",
    "hstack", "vstack", "dstack", "column_stack", "pad", "one_hot", "pixel_shuffle", "pixel_unshuffle",
    "channel_shuffle", "native_channel_shuffle", "embedding", "nonzero", "nonzero_static", "argwhere",
    # packing a padded batch of sequences (nn.utils.rnn) and back, and unpacking an LU factorization
    # into P, L and U: copies (the permutation is integer work)
    "_pack_padded_sequence", "_pad_packed_sequence", "lu_unpack",
]
_CREATION = [
    "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "zeros_like", "ones_like",
    "empty_like", "full_like", "rand", "randn", "randint", "rand_like", "randn_like", "randint_like",
    "tensor", "as_tensor", "scalar_tensor", "triu_indices", "tril_indices", "meshgrid", "atleast_1d",
    "atleast_2d", "atleast_3d", "broadcast_tensors", "broadcast_shapes",
]
# Python-level plumbing that fx records as call_function nodes.
_PLUMBING = ["getitem", "setitem", "getattr", "is_tensor", "numel", "_assert", "_assert_is_none", "len", "sym_size",
             "contains"]
_METHOD_ONLY = [
    "to", "type", "type_as", "float", "half", "double", "bfloat16", "int", "long", "short", "bool", "byte",
    "char", "cpu", "cuda", "size", "dim", "ndimension", "numel", "nelement", "element_size", "stride", "storage_offset",
    "is_contiguous", "is_floating_point", "is_complex", "item", "tolist", "new_zeros", "new_ones",
    "new_empty", "new_full", "new_tensor", "zero_", "fill_", "copy_", "scatter_", "index_copy_",
    "index_fill_", "masked_scatter_", "requires_grad_", "detach_", "squeeze_", "unsqueeze_", "t_",
    "transpose_", "resize_", "resize_as_", "get_device", "__getitem__", "__setitem__", "__len__",
    "data_ptr", "untyped_storage",
]
_NOT_METHODS = ("cat", "stack", "concat", "concatenate", "hstack", "vstack", "dstack", "column_stack", "pad",
                "one_hot", "embedding", "meshgrid", "_pack_padded_sequence", "_pad_packed_sequence", "lu_unpack")

#: Creation ops read no tensor data (``zeros_like`` reads only its argument's shape): they write
#: their output (plan.Traffic.CREATE); those that return views of their inputs move nothing.
CREATES: frozenset[str] = frozenset(_CREATION) | {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}

ZERO_FUNCTIONS: list[str] = _VIEWS + _COPIES + _CREATION + _PLUMBING
ZERO_METHODS: list[str] = [m for m in _VIEWS + _COPIES if m not in _NOT_METHODS] + _METHOD_ONLY
ZERO_MODULES: list[type[nn.Module]] = [
    nn.Identity, nn.Flatten, nn.Unflatten, nn.Embedding, nn.PixelShuffle, nn.PixelUnshuffle,
    nn.ChannelShuffle, nn.ZeroPad1d, nn.ZeroPad2d, nn.ZeroPad3d, nn.ConstantPad1d, nn.ConstantPad2d,
    nn.ConstantPad3d, nn.ReflectionPad1d, nn.ReflectionPad2d, nn.ReflectionPad3d, nn.ReplicationPad1d,
    nn.ReplicationPad2d, nn.ReplicationPad3d, nn.CircularPad1d, nn.CircularPad2d, nn.CircularPad3d,
    nn.Unfold,
]
#: aten ops that are 0 FLOPs by definition: views, copies, casts, creation, indexing, checks.
ATEN_ZERO_OPS: list[str] = [
    "view", "_unsafe_view", "view_as", "reshape", "permute", "transpose", "t", "expand", "expand_as",
    "contiguous", "clone", "alias", "detach", "lift_fresh_copy", "lift_fresh", "_to_copy", "to",
    "type_as", "unsqueeze", "squeeze", "flatten", "unflatten", "slice", "select",
    "index", "index_select", "gather", "take", "cat", "concat", "stack", "split", "split_with_sizes",
    "tensor_split", "chunk", "unbind", "narrow", "repeat", "repeat_interleave", "tile", "flip", "roll", "tril",
    "triu", "diagonal", "diag", "unfold", "as_strided", "view_as_real", "view_as_complex", "arange", "zeros",
    "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like", "new_zeros", "new_ones",
    "new_empty", "new_full", "scalar_tensor", "rand", "randn", "rand_like", "randn_like", "randint",
    "linspace", "copy", "fill", "zero", "_assert_tensor_metadata", "_assert_scalar",
    "_assert_async", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "sym_constrain_range",
    "sym_constrain_range_for_size", "_local_scalar_dense", "item", "is_nonzero", "is_same_size", "_has_same_storage_numel",
    "_efficientzerotensor", "_make_dual", "_unpack_dual", "_fw_primal", "_make_dual_copy", "_fw_primal_copy", "pad", "constant_pad_nd",
    "reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d", "replication_pad2d",
    "replication_pad3d", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle",
    "one_hot", "embedding", "masked_select", "nonzero", "nonzero_static", "argwhere", "scatter", "index_copy",
    "index_fill", "masked_scatter", "_unsafe_index", "upsample_nearest1d", "upsample_nearest2d",
    "upsample_nearest3d", "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
    "resolve_conj", "resolve_neg", "set", "resize", "empty_strided", "new_empty_strided", "slice_scatter",
    "select_scatter", "diagonal_scatter", "as_strided_scatter", "unsafe_split", "unsafe_chunk", "movedim",
    "swapaxes", "swapdims", "broadcast_to", "broadcast_tensors", "atleast_1d", "atleast_2d", "atleast_3d",
    "_reshape_alias",
    "_empty_affine_quantized",
    "_pack_padded_sequence", "_pad_packed_sequence", "lu_unpack",  # copies (see _COPIES)
    "diag_embed",  # a copy of a vector into a matrix's diagonal (det's gradient runs it)
    "real", "imag",  # views of a complex tensor's components (export graphs keep them)
    "mT", "mH", "adjoint", "linalg_diagonal",  # views (transposes, a diagonal) export graphs keep
    "reshape_as",  # a view (or a copy where strides forbid one)
    # random fills and permutations: creation, as rand/randn are (dropout's mask multiply and
    # rescale are its own ops, counted)
    "bernoulli", "uniform", "normal", "exponential", "random", "cauchy", "log_normal", "geometric", "randperm",
    "randint_like",
    # checks: boolean reductions and error flags read by torch.export's guards and linalg
    # (``_assert_async(_is_all_true(mask))``, ``_linalg_check_errors(info)``), no float work
    "_is_all_true", "_is_any_true", "_linalg_check_errors",
    # functorch's batching (vmap) and forward-AD wrappers: they wrap a tensor, no arithmetic
    "_add_batch_dim", "_remove_batch_dim", "_make_dual", "_unpack_dual", "_wrap_for_grad", "_unwrap_for_grad",
    # a jagged nested tensor's parts and its making from them (views and metadata reads); a sparse or
    # nested tensor made dense (a copy into zeros)
    "_nested_get_values", "_nested_get_offsets", "_nested_get_lengths", "_nested_get_ragged_idx",
    "_nested_get_min_seqlen", "_nested_get_max_seqlen", "_nested_get_jagged_dummy", "_nested_view_from_jagged",
    "_nested_view_from_buffer", "_to_dense", "to_dense",
    "_to_sparse", "_to_sparse_csr", "_to_sparse_csc", "_to_sparse_bsr", "_to_sparse_bsc",  # layout conversions
]

register(*functions(*ZERO_FUNCTIONS, "linalg_diagonal"), *methods(*ZERO_METHODS), *ZERO_MODULES,
         *aten_ops(*ATEN_ZERO_OPS))(zero_flops)
# prims' metadata reads (a nested tensor's backward asks its gradient's layout)
register(*(op for op in (getattr(torch.ops.prim, "layout", None),) if op is not None))(zero_flops)


def _graph_plumbing() -> list[Any]:
    """The Python functions torch.export's graphs may call besides ops (the verifier's allow-list,
    ``torch/_export/verifier.py``): grad-mode and autocast switches, symbolic-int arithmetic on
    sizes, and functorch's vmap/jvp nesting and batching wrappers (``_vmap_increment_nesting``,
    ``_add_batch_dim``, ``lazy_load_decompositions``): bookkeeping, no tensor arithmetic."""
    found: list[Any] = [torch._C._set_grad_enabled]
    found += [getattr(torch, name) for name in ("sym_int", "sym_float", "sym_ite", "sym_max", "sym_min", "sym_not",
                                                "sym_sqrt", "sym_sum") if hasattr(torch, name)]
    autocast = getattr(torch.amp, "autocast_mode", None)
    found += [getattr(autocast, name) for name in ("_enter_autocast", "_exit_autocast") if hasattr(autocast, name)]
    try:
        from torch._functorch import predispatch
    except ImportError:  # an older torch: no such graph nodes either
        return found
    return found + [getattr(predispatch, name) for name in (
        "_add_batch_dim", "_remove_batch_dim", "_vmap_increment_nesting", "_vmap_decrement_nesting",
        "lazy_load_decompositions", "_make_dual", "_unpack_dual", "_jvp_increment_nesting", "_jvp_decrement_nesting",
        "_unwrap_for_grad", "_enter_dual_level", "_exit_dual_level") if hasattr(predispatch, name)]


#: export-graph plumbing functions (see :func:`_graph_plumbing`), all 0
GRAPH_PLUMBING: list[Any] = _graph_plumbing()
__all__ += ["GRAPH_PLUMBING"]
register(*GRAPH_PLUMBING)(zero_flops)

#: aten ops autograd runs in backward that only move gradients (their arithmetic ones are in
#: backward.py): the gradient of a view written into zeros (each element once), a masked gather,
#: a rotation, conj/sparse plumbing (an embedding's sparse gradient), im2col (nn.Fold's gradient,
#: nn.Unfold's forward).
ATEN_BACKWARD_ZERO_OPS: list[str] = [
    "select_backward", "slice_backward", "diagonal_backward", "masked_scatter_backward",
    "value_selecting_reduction_backward", "rot90", "_conj", "_indices", "_values",
    "_sparse_coo_tensor_with_dims_and_tensors", "im2col",
]
__all__ += ["ATEN_BACKWARD_ZERO_OPS"]

register(*aten_ops(*ATEN_BACKWARD_ZERO_OPS))(zero_flops)

#: FSDP2's copies into and out of its communication buffers (``torch.ops.fsdp``, registered when
#: ``torch.distributed.fsdp`` is imported, hence by name) and the functional collectives' autograd
#: wrapper: they move bytes or wrap a tensor, no arithmetic. (The collectives themselves are
#: communication nodes: torch_flops.comm.)
DISTRIBUTED_ZERO_OPS: list[str] = ["fsdp.all_gather_copy_in", "fsdp.split_with_sizes_copy", "fsdp.chunk_cat",
                                   "_c10d_functional._wrap_tensor_autograd"]
__all__ += ["DISTRIBUTED_ZERO_OPS"]

register(*(Name("aten", name) for name in DISTRIBUTED_ZERO_OPS))(zero_flops)
