"""Thin access to the custom ops (``torch.ops.gprl.*``) plus their fake implementations.

The fake (meta) implementations give output shapes without computing, so the ops trace under
torch.compile and pass ``torch.library.opcheck``.
"""

from __future__ import annotations

import torch

from gprl.backend import build as _build

_build.load()
ops = torch.ops.gprl


@torch.library.register_fake("gprl::generate")
def _generate_fake(func_weights, pop_size, max_len, n_in, n_out, method, min_depth, max_depth, leaf_prob,
                   const_prob, const_low, const_high, output_prob, seed):
    shape, dev = (pop_size, max_len), func_weights.device
    return (torch.empty(shape, dtype=torch.uint8, device=dev),
            torch.empty(shape, dtype=torch.int16, device=dev),
            torch.empty(shape, dtype=torch.uint8, device=dev),
            torch.empty(shape, dtype=torch.float32, device=dev),
            torch.empty(shape, dtype=torch.int16, device=dev))


@torch.library.register_fake("gprl::node_depth")
def _node_depth_fake(size):
    return torch.empty_like(size)


@torch.library.register_fake("gprl::validate")
def _validate_fake(kind, code, out, value, size, n_in, n_out):
    return kind.new_empty((kind.shape[0],), dtype=torch.int32)


@torch.library.register_fake("gprl::forward")
def _forward_fake(kind, code, out, value, size, Xt, n_out, max_stack, strategy=-1):
    return Xt.new_empty((kind.shape[0], Xt.shape[1], n_out))


@torch.library.register_fake("gprl::forward_batched")
def _forward_batched_fake(kind, code, out, value, size, X, n_out, max_stack):
    return X.new_empty((kind.shape[0], X.shape[1], n_out))


@torch.library.register_fake("gprl::fitness")
def _fitness_fake(kind, code, out, value, size, Xt, yt, weight, metric, max_stack, strategy=-1):
    return Xt.new_empty((kind.shape[0],))


def _children_fake(kind, n):
    shape = (n, kind.shape[1])
    return (kind.new_empty(shape), kind.new_empty(shape, dtype=torch.int16), kind.new_empty(shape),
            kind.new_empty(shape, dtype=torch.float32), kind.new_empty(shape, dtype=torch.int16))


@torch.library.register_fake("gprl::vary")
def _vary_fake(kind, code, out, value, size, donor_kind, donor_code, donor_out, donor_value, donor_size,
               parent, donor, op, node, donor_node, func_weights, n_in, n_out, max_depth, subtree_depth,
               xo_leaf_prob, multi_prob, const_sigma, const_prob, const_low, const_high, output_prob,
               leaf_prob, seed):
    return _children_fake(kind, parent.shape[0])


@torch.library.register_fake("gprl::tournament")
def _tournament_fake(loss, n, size, seed):
    return loss.new_empty((n,), dtype=torch.int64)


@torch.library.register_fake("gprl::archive_update")
def _archive_update_fake(akind, acode, aout, avalue, asize, aloss, kind, code, out, value, size, loss):
    return tuple(torch.empty_like(t) for t in (akind, acode, aout, avalue, asize, aloss))


@torch.library.register_fake("gprl::uniform")
def _uniform_fake(like, n, seed):
    return like.new_empty((n,), dtype=torch.float32)
