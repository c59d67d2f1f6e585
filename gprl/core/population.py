"""A population of expression trees held as five ``[P, max_len]`` tensors on one device (the encoding:
:mod:`gprl.core.encoding`)."""

from __future__ import annotations

import ast
import os
import pickle
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import sympy
import torch

from gprl.backend import strategy as _strategy
from gprl.core import functions as F
from gprl.core.dataset import Dataset, as_float_tensor
from gprl.core.devices import canonical_device
from gprl.core.encoding import (  # noqa: F401 - the encoding's names, re-exported
    CONST,
    FUNC,
    KIND_MASK,
    MAX_DEPTH_LIMIT,
    MAX_LEN_LIMIT,
    MAX_OUTPUTS,
    METHODS,
    METRICS,
    OUTPUT_FLAG,
    PAD,
    SCALED_METRICS,
    TREE_ERRORS,
    VAR,
    arities,
    stack_depth,
)
from gprl.core.seeds import seed_from


@dataclass
class Population:
    kind: torch.Tensor
    code: torch.Tensor
    out: torch.Tensor
    value: torch.Tensor
    size: torch.Tensor
    n_in: int
    n_out: int = 1

    def __post_init__(self):
        self._stack_cache: tuple | None = None
        names = ("kind", "code", "out", "value", "size")
        dtypes = (torch.uint8, torch.int16, torch.uint8, torch.float32, torch.int16)
        for name, dtype in zip(names, dtypes):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.dim() != 2:
                raise TypeError(f"Population.{name} must be a 2-D {dtype} tensor")
            if t.shape != self.kind.shape or t.device != self.kind.device:
                raise ValueError(f"Population.{name} must match kind's shape {tuple(self.kind.shape)} "
                                 "and device")
            setattr(self, name, t.contiguous())
        _check_dims(self.n_in, self.n_out, self.kind.shape[1])

    # ---- construction ----
    @classmethod
    def random(
        cls,
        pop_size: int,
        n_in: int,
        n_out: int = 1,
        *,
        max_len: int = 64,
        functions: Sequence[str] | dict[str, float] | None = None,
        method: str = "ramped",
        min_depth: int = 1,
        max_depth: int = 6,
        leaf_prob: float | None = None,
        const_prob: float = 0.2,
        const_range: tuple[float, float] = (-1.0, 1.0),
        output_prob: float = 0.3,
        every_output: bool = False,
        seed: int | torch.Generator | None = None,
        device: str | torch.device | None = None,
    ) -> Population:
        """Random trees by ``grow``, ``full`` or ``ramped`` half-and-half (depths min..max, half each).

        ``functions`` names the function set (``gprl.functions``) or maps names to sampling weights.
        Leaves are constants with probability ``const_prob`` (uniform in ``const_range``), else a uniformly
        drawn variable. ``grow`` places a leaf with probability ``leaf_prob`` at depths ``>= min_depth``
        (default: Koza's share of terminals among all primitives). With ``n_out > 1`` each function node
        becomes a Modi node with probability ``output_prob``, writing to a uniformly drawn output.

        ``every_output=True`` (``n_out > 1``) writes every output from the start: each tree is the chain
        ``F_0(A_0, F_1(A_1, ... F_{n-1}(A_{n-1}, B)))`` of Modi nodes ``F_k`` (``add`` where the function
        set has it, else its first binary function) writing output k, so output k is ``F_k(A_k, B)``, with
        random subtrees ``A_k`` and ``B`` (as above, without Modi nodes) that share the length budget.
        """
        _check_int("pop_size", pop_size, 0)
        _check_dims(n_in, n_out, max_len)
        if method not in METHODS:
            raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
        _check_int("min_depth", min_depth, 0)
        _check_int("max_depth", max_depth, min_depth)
        if max_depth > MAX_DEPTH_LIMIT:
            raise ValueError(f"max_depth must be <= {MAX_DEPTH_LIMIT}, got {max_depth}")
        weights = F.function_weights(functions)
        if leaf_prob is None:
            leaf_prob = F.default_leaf_prob(n_in, const_prob, weights)
        for name, p in (("leaf_prob", leaf_prob), ("const_prob", const_prob), ("output_prob", output_prob)):
            if not 0.0 <= float(p) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {p}")
        lo, hi = (float(c) for c in const_range)
        if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
            raise ValueError(f"const_range must be finite (low, high) with low <= high, got {const_range}")
        if n_in == 0 and const_prob == 0:
            raise ValueError("n_in is 0 and const_prob is 0: trees would have no leaves; allow constants")
        device = canonical_device(device)
        w = torch.tensor(weights, dtype=torch.float32, device=device)
        if every_output and n_out > 1:
            binary = [i for i, a in enumerate(F.ARITY) if a == 2 and weights[i] > 0]
            if not binary:
                raise ValueError("every_output=True needs a binary function (e.g. add) in functions")
            sub_len = (max_len - n_out) // (n_out + 1)
            if sub_len < 1:
                raise ValueError(f"every_output=True with {n_out} outputs needs max_len >= {2 * n_out + 1}, "
                                 f"got {max_len}")
            link = F.BY_NAME["add"].id if weights[F.BY_NAME["add"].id] > 0 else binary[0]
            parts = _kernels().generate(w, (n_out + 1) * pop_size, sub_len, n_in, 1, METHODS[method],
                                        min_depth, max_depth, float(leaf_prob), float(const_prob), lo, hi,
                                        0.0, seed_from(seed))
            return cls(*_output_chain(parts, pop_size, n_out, max_len, link), n_in=n_in, n_out=n_out)
        tensors = _kernels().generate(w, pop_size, max_len, n_in, n_out, METHODS[method], min_depth,
                                      max_depth, float(leaf_prob), float(const_prob), lo, hi,
                                      float(output_prob), seed_from(seed))
        return cls(*tensors, n_in=n_in, n_out=n_out)

    @classmethod
    def empty(cls, n_in: int, n_out: int = 1, max_len: int = 64, device=None) -> Population:
        z = {"device": device}
        return cls(torch.zeros(0, max_len, dtype=torch.uint8, **z),
                   torch.zeros(0, max_len, dtype=torch.int16, **z),
                   torch.zeros(0, max_len, dtype=torch.uint8, **z), torch.zeros(0, max_len, **z),
                   torch.zeros(0, max_len, dtype=torch.int16, **z), n_in, n_out)

    # ---- shape, device, indexing ----
    def __len__(self) -> int:
        return self.kind.shape[0]

    @property
    def max_len(self) -> int:
        return self.kind.shape[1]

    @property
    def device(self) -> torch.device:
        return self.kind.device

    def _map(self, fn) -> Population:
        return Population(*(fn(t) for t in self.tensors()), n_in=self.n_in, n_out=self.n_out)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.kind, self.code, self.out, self.value, self.size

    def __getitem__(self, index) -> Population:
        """Trees by int, slice, index tensor/list or boolean mask; always returns a Population."""
        if isinstance(index, (int, np.integer)):
            if not -len(self) <= index < len(self):
                raise IndexError(f"tree index {index} out of range for a population of {len(self)}")
            index = slice(int(index) % len(self), int(index) % len(self) + 1)
        if isinstance(index, (list, tuple, np.ndarray)):
            index = torch.as_tensor(np.asarray(index), device=self.device)
        if isinstance(index, torch.Tensor):
            index = index.to(self.device)
        return self._map(lambda t: t[index])

    def to(self, device) -> Population:
        return self._map(lambda t: t.to(device))

    def clone(self) -> Population:
        return self._map(torch.clone)

    @staticmethod
    def cat(populations: Sequence[Population]) -> Population:
        """Concatenates populations of the same n_in/n_out and device; shorter max_len is zero-padded."""
        if not populations:
            raise ValueError("populations must hold at least one Population")
        first = populations[0]
        for p in populations:
            if (p.n_in, p.n_out, p.device) != (first.n_in, first.n_out, first.device):
                raise ValueError("populations must share n_in, n_out and device to be concatenated")
        L = max(p.max_len for p in populations)
        parts = [[torch.nn.functional.pad(t, (0, L - p.max_len)) for t in p.tensors()] for p in populations]
        return Population(*(torch.cat(ts) for ts in zip(*parts)), n_in=first.n_in, n_out=first.n_out)

    def equal(self, other: Population) -> bool:
        return (self.n_in, self.n_out) == (other.n_in, other.n_out) and all(
            torch.equal(a, b) for a, b in zip(self.tensors(), other.tensors()))

    # ---- structure ----
    def lengths(self) -> torch.Tensor:
        """Number of nodes of every tree, [P] int64."""
        return self.size[:, 0].long()

    def node_depths(self) -> torch.Tensor:
        """Depth of every node (root 0, padding -1), [P, max_len] int16."""
        return _kernels().node_depth(self.size)

    def depths(self) -> torch.Tensor:
        """Depth of every tree (a single leaf has depth 0), [P] int64."""
        return self.node_depths().amax(dim=1).long() if len(self) else torch.zeros(0, dtype=torch.long)

    def arities(self) -> torch.Tensor:
        """Number of children of every node, [P, max_len] int32 (0 for leaves and padding)."""
        return arities(self.kind, self.code)

    def max_stack(self) -> int:
        """Evaluation stack depth the population needs (one host sync, then cached until a tensor changes)."""
        key = (self.kind.data_ptr(), self.code.data_ptr(), self.kind._version, self.code._version, len(self))
        if self._stack_cache is None or self._stack_cache[0] != key:
            need = stack_depth(self.kind, self.code)
            self._stack_cache = (key, need)
        return self._stack_cache[1]

    def _stack_bound(self) -> int:
        """The ``max_stack`` the evaluation kernels get. CUDA: the exact depth (it picks the kernels'
        register-held stack). CPU: ``max_len``, which bounds it (a stack holds at most one value per leaf)
        and only sizes each thread's scratch: computing the exact depth took half of a generation's time on
        2,000 trees of 64 nodes and 7,500 rows."""
        return max(1, self.kind.shape[1]) if self.kind.device.type == "cpu" else self.max_stack()

    def validate(self) -> torch.Tensor:
        """Per-tree error code, [P] int32 (0 = valid; meanings in ``TREE_ERRORS``)."""
        return _kernels().validate(*self.tensors(), self.n_in, self.n_out)

    def check(self) -> Population:
        """Raises ValueError naming the first invalid tree and why; returns self when all are valid."""
        errors = self.validate()
        bad = torch.nonzero(errors).flatten()
        if len(bad):
            i = int(bad[0])
            raise ValueError(f"{len(bad)} invalid tree(s); "
                             f"tree {i}: {TREE_ERRORS.get(int(errors[i]), 'unknown')}")
        return self

    # ---- evaluation ----
    def forward(self, X, strategy: str | None = None, check_finite: bool = True) -> torch.Tensor:
        """Outputs of every tree.

        ``X[B, n_in]`` is shared by all trees; ``X[P, B, n_in]`` gives tree i its own rows ``X[i]`` (the
        policy case). Returns ``[P, B, n_out]`` float32. ``strategy`` forces a CUDA evaluation strategy of
        shared rows (``gprl.strategy``; default: the calibrated automatic choice); per-tree rows have one.
        ``check_finite=False`` skips the scan of X for NaN and inf, which on a GPU waits for the device (a
        policy's step loop skips it): a row with NaN or inf inputs then gives NaN or inf outputs.
        """
        ops = _kernels()
        X = as_float_tensor(X, "X", self.device, check_finite)
        if X.dim() not in (2, 3) or X.shape[-1] != self.n_in:
            raise ValueError(f"X must be [B, n_in] or [P, B, n_in] with n_in={self.n_in}, "
                             f"got {tuple(X.shape)}")
        if X.dim() == 3:
            if X.shape[0] != len(self):
                raise ValueError(f"X is [P, B, n_in] with P={X.shape[0]} "
                                 f"but the population has {len(self)} trees")
            if strategy is not None and strategy != "auto":
                raise ValueError(f"strategy={strategy!r}: per-tree rows X[P, B, n_in] have one evaluation "
                                 "mapping; pass strategy=None or 'auto'")
            return ops.forward_batched(*self.tensors(), X, self.n_out, self._stack_bound())
        sid = _strategy.choose("forward", strategy, X.device, len(self), X.shape[0], self.n_out, self.max_len)
        return ops.forward(*self.tensors(), X.t().contiguous(), self.n_out, self._stack_bound(), sid)

    __call__ = forward

    def fitness(self, X, y=None, metric: str = "mse", weight=None,
                strategy: str | None = None, scaling: bool = False) -> torch.Tensor:
        """Regression loss of every tree, [P] float32, without materialising predictions.

        Pass ``X[D, n_in]`` and ``y`` (``[D]`` or ``[D, n_out]``), or a prepared :class:`gprl.Dataset` as
        ``X`` (validated once: the fast path for repeated calls). Multi-output losses are the mean over
        outputs; ``weight`` ([D], >= 0) weights rows. ``strategy`` forces a CUDA evaluation strategy
        (``gprl.strategy``; default: the calibrated automatic choice).

        ``scaling=True`` (``mse`` / ``rmse``): the loss of each output ``f`` after its least-squares linear
        scaling ``a + b * f`` (Keijzer 2003; ``gprl.sr.scaling.fit_linear_scaling`` gives ``a`` and ``b``),
        gathered in the same pass; an output flat within float32 rounding is fitted by y's mean alone.
        """
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {list(METRICS)}, got {metric!r}")
        if scaling and metric == "mae":
            raise ValueError("scaling=True fits a + b * f by least squares: use metric='mse' or 'rmse'")
        if isinstance(X, Dataset):
            if y is not None or weight is not None:
                raise ValueError("pass y and weight inside the Dataset, not beside it")
            data = X
        else:
            if y is None:
                raise ValueError("y is required unless X is a gprl.Dataset")
            if isinstance(X, torch.Tensor) and X.device != self.device:
                as_float_tensor(X, "X", self.device)  # raises the device message
            data = Dataset(X, y, weight, device=self.device)
        Xt, yt = data.Xt, data.yt  # [n_in, D], [n_out, D]: shape and device read once (a per-generation call)
        device, (n_in, D), n_out = Xt.device, Xt.shape, yt.shape[0]
        if device != self.kind.device:
            raise ValueError(f"the dataset is on {device} but the population is on {self.device}; "
                             f"use dataset.to('{self.device}')")
        if n_in != self.n_in:
            raise ValueError(f"X must be [D, n_in] with n_in={self.n_in}, got {tuple(data.X.shape)}")
        if n_out != self.n_out:
            raise ValueError(f"y must be [D] or [D, n_out] with n_out={self.n_out}, "
                             f"got {tuple(data.y.shape)}")
        sid = _strategy.choose("fitness", strategy, device, len(self), D, n_out, self.kind.shape[1])
        metric_id = SCALED_METRICS[metric] if scaling else METRICS[metric]
        return _kernels().fitness(*self.tensors(), Xt, yt, data.weight, metric_id, self._stack_bound(), sid)

    # ---- persistence ----
    def save(self, path: str | os.PathLike) -> None:
        """Writes the population atomically (a crash never leaves a half-written file)."""
        state = {"format": "gprl.population", "version": 1, "n_in": self.n_in, "n_out": self.n_out,
                 **{k: t.cpu() for k, t in zip(("kind", "code", "out", "value", "size"), self.tensors())}}
        atomic_torch_save(state, path)

    @classmethod
    def load(cls, path: str | os.PathLike, device=None) -> Population:
        """Reads a file written by :meth:`save`; a damaged or foreign file raises ValueError naming it."""
        with open(path, "rb") as f:  # a missing or unreadable file: the OS error names the path
            try:
                state = torch.load(f, map_location="cpu", weights_only=True)
            except Exception as err:  # noqa: BLE001 - any failure reading an open file is about its content
                # from None: torch's message advises weights_only=False, unsafe for a file that is not ours
                cause = _load_cause(err)
                raise ValueError(f"cannot load population file {os.fspath(path)}: {cause}") from None
        if not isinstance(state, dict) or state.get("format") != "gprl.population":
            raise ValueError(f"{os.fspath(path)} is not a gprl population file")
        try:
            if state.get("version") != 1:
                raise ValueError(f"format version {state.get('version')!r} is not 1 (a newer gprl wrote it?)")
            missing = [k for k in _STATE_KEYS if k not in state]
            if missing:
                raise ValueError(f"it lacks the entries {missing}")
            for k in ("n_in", "n_out"):
                if isinstance(state[k], bool) or not isinstance(state[k], int):
                    raise TypeError(f"{k} is {state[k]!r}, not an int")
            pop = cls(*(state[k] for k in _STATE_KEYS[:5]), n_in=state["n_in"], n_out=state["n_out"])
            pop.check()
        except (TypeError, ValueError) as err:
            raise ValueError(f"population file {os.fspath(path)}: {err}") from None
        return pop.to(device) if device is not None else pop

    # ---- symbolic form ----
    def to_sympy(self, i: int, names: Sequence[str] | None = None,
                 protected: bool = True) -> list[sympy.Expr]:
        """One sympy expression per output of tree ``i``.

        ``protected=True`` gives the exact semantics (``pdiv``/``pinv``/``plog`` and ``Abs`` where the kernels
        protect; lambdify with ``modules=[gprl.functions.NUMPY_FUNCTIONS, "numpy"]``); ``protected=False``
        replaces them by plain ``/``, ``log`` for reading.
        """
        names = _variable_names(names, self.n_in)
        symbols = [sympy.Symbol(n, real=True) for n in names]
        tree = self[i].to("cpu")
        length = int(tree.size[0, 0])
        kind, code, out, value = (t[0, :length].tolist()
                                  for t in (tree.kind, tree.code, tree.out, tree.value))
        outputs: list[sympy.Expr] = [sympy.Integer(0)] * self.n_out
        stack: list[sympy.Expr] = []
        for j in range(length - 1, -1, -1):
            k = kind[j] & KIND_MASK
            if k == VAR:
                stack.append(symbols[code[j]])
            elif k == CONST:
                stack.append(sympy.Float(value[j]))
            else:
                fn = F.FUNCTIONS[code[j]]
                args = [stack.pop() for _ in range(fn.arity)]
                v = fn.sympy(*args)
                if kind[j] & OUTPUT_FLAG:
                    outputs[out[j]] += v
                    stack.append(args[-1])
                else:
                    stack.append(v)
        if length and not kind[0] & OUTPUT_FLAG:
            outputs[0] += stack[0]
        if not protected:
            outputs = [unprotect(e) for e in outputs]
        return outputs

    @classmethod
    def from_expressions(cls, expressions, names: Sequence[str] | None = None, n_in: int | None = None,
                         max_len: int | None = None, device=None) -> Population:
        """Trees from sympy expressions or strings: one per tree, or a sequence of ``n_out`` per tree.

        Variables are ``names`` (their order gives the input index) or ``x0, x1, ...``. Division, ``log``,
        ``sqrt`` and ``pow`` parse to the protected functions of ``gprl.functions``; integer powers of any
        size become products (negative ones the inverse of one), which must fit ``max_len``. Multi-output
        trees are built as a chain of Modi ``add`` nodes (``o_k = e_k + 0``).

        Strings are parsed, never evaluated: numbers, variables, ``pi``, ``E``, ``+ - * / **`` (``^`` is
        ``**``), calls of the function table's names (``sin``, ``max``, ``ifpos``/``ite`` ...) and their sympy
        forms (``pdiv``, ``plog``, ``Abs``, ``Piecewise`` with ``<``/``>`` conditions ...); anything else is
        a ValueError naming the piece.
        """
        if isinstance(expressions, (str, sympy.Basic)):
            raise TypeError("expressions must be a list with one entry per tree")
        trees, n_out = [], None
        for e in expressions:
            outs = [e] if isinstance(e, (str, sympy.Basic)) else list(e)
            if n_out is not None and len(outs) != n_out:
                raise ValueError("every tree must have the same number of output expressions")
            n_out = len(outs)
            trees.append(outs)
        if n_out is None:
            raise ValueError("expressions must hold at least one tree")
        parsed = [[_parse(o, names) for o in outs] for outs in trees]
        if names is None:
            used = [int(m.group(1)) for outs in parsed for o in outs for s in o.free_symbols
                    for m in [re.fullmatch(r"x(\d+)", s.name)] if m]
            n_in = n_in if n_in is not None else (max(used) + 1 if used else 0)
        else:
            n_in = len(names) if n_in is None else n_in
        index = {n: k for k, n in enumerate(_variable_names(names, n_in))}
        limit = MAX_LEN_LIMIT if max_len is None else max_len
        encoded = [_encode_outputs(outs, index, limit) for outs in parsed]
        longest = max(len(t) for t in encoded)
        max_len = longest if max_len is None else max_len
        if longest > max_len:
            raise ValueError(f"an expression needs {longest} nodes but max_len is {max_len}; raise max_len")
        _check_dims(n_in, n_out, max_len)
        arrays = _nodes_to_arrays(encoded, max_len)
        return cls(*(torch.from_numpy(a) for a in arrays), n_in=n_in, n_out=n_out).to(device or "cpu")


# ---- helpers ----
def _output_chain(parts: Sequence[torch.Tensor], pop_size: int, n_out: int, max_len: int,
                  link: int) -> tuple[torch.Tensor, ...]:
    """Trees ``F_0(A_0, F_1(A_1, ... F_{n-1}(A_{n-1}, B)))`` from ``(n_out + 1) * pop_size`` subtrees
    (``A_k`` of tree p is row ``k * pop_size + p``, ``B`` the last block); ``F_k``: Modi node of function
    ``link`` writing output k. Built by one scatter per tensor, no loop over trees."""
    P, S, dev = pop_size, parts[0].shape[1], parts[0].device
    length = parts[4][:, 0].long().view(n_out + 1, P)  # subtree lengths
    # piece j of tree p: F_0, A_0, F_1, A_1, ..., F_{n-1}, A_{n-1}, B, laid out one after the other
    piece_len = torch.stack([torch.ones_like(length[0])] * n_out + [length[n_out]])  # F_k and B
    widths = torch.cat([torch.stack([piece_len[:n_out], length[:n_out]], 1).flatten(0, 1), length[n_out:]])
    start = torch.cumsum(widths, 0) - widths  # [2 n_out + 1, P]
    total = widths.sum(0)
    pos = torch.arange(S, device=dev)
    sub_start = torch.cat([start[1:2 * n_out:2], start[2 * n_out:]])  # where A_0..A_{n-1}, B begin
    target = sub_start[:, :, None] + pos  # [n_out + 1, P, S]
    keep = pos < length[:, :, None]
    row = torch.arange(P, device=dev)[None, :, None].expand_as(target)
    flat = (row * max_len + target)[keep]
    out = []
    for t in parts:
        o = torch.zeros(P * max_len, dtype=t.dtype, device=dev)
        o[flat] = t.view(n_out + 1, P, S)[keep]
        out.append(o.view(P, max_len))
    kind, code, outs, value, size = out
    f_start = start[0:2 * n_out:2].T  # [P, n_out]: where F_k sits
    ks = torch.arange(n_out, device=dev).expand(P, -1)
    kind.scatter_(1, f_start, torch.full_like(f_start, FUNC | OUTPUT_FLAG, dtype=kind.dtype))
    code.scatter_(1, f_start, torch.full_like(f_start, link, dtype=code.dtype))
    outs.scatter_(1, f_start, ks.to(outs.dtype))
    size.scatter_(1, f_start, (total[:, None] - f_start).to(size.dtype))
    return kind, code, outs, value, size


def atomic_torch_save(obj, path: str | os.PathLike) -> None:
    """torch.save to a temporary file in the same folder, then an atomic rename.

    The temporary file is created with mode 0o666 like any new file, so the umask applies (mkstemp would
    force 0o600).
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = os.path.join(folder, f".tmp-{secrets.token_hex(8)}.pt")
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


_STATE_KEYS = ("kind", "code", "out", "value", "size", "n_in", "n_out")


def _load_cause(err: Exception) -> str:
    """A short reason for a failed torch.load, without torch's advice to load unsafely."""
    if isinstance(err, EOFError):
        return "the file is empty or cut short"
    if isinstance(err, pickle.UnpicklingError):
        return "it holds objects other than tensors and plain data (not a gprl file, or damaged)"
    first = str(err).split(". ")[0].strip()[:200]
    return f"the file is damaged or not a torch file ({type(err).__name__}: {first})"


def _check_int(name: str, v, low: int) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")


_ops_module = None


def _kernels():
    """``torch.ops.gprl``, the kernels built and loaded on first use. Evaluation runs every generation and,
    for policies, every environment step: this costs ~0.1 us a call where an import statement costs ~0.5."""
    global _ops_module
    if _ops_module is None:
        from gprl.backend import ops as module

        _ops_module = module
    return _ops_module.ops


def _check_dims(n_in, n_out, max_len) -> None:
    _check_int("n_in", n_in, 0)
    _check_int("n_out", n_out, 1)
    _check_int("max_len", max_len, 1)
    if n_out > MAX_OUTPUTS:
        raise ValueError(f"n_out must be <= {MAX_OUTPUTS}, got {n_out}")
    if max_len > MAX_LEN_LIMIT:
        raise ValueError(f"max_len must be <= {MAX_LEN_LIMIT}, got {max_len}")
    if n_in > 32767:
        raise ValueError(f"n_in must be <= 32767, got {n_in}")


def _variable_names(names, n_in: int) -> list[str]:
    if names is None:
        return [f"x{k}" for k in range(n_in)]
    names = [str(n) for n in names]
    if len(names) != n_in:
        raise ValueError(f"names must hold n_in={n_in} variable names, got {len(names)}")
    if len(set(names)) != len(names):
        raise ValueError("names must be distinct")
    return names


def unprotect(expr: sympy.Expr) -> sympy.Expr:
    """Plain reading form: protected division/inverse/log shown as ordinary ones, comparisons as Piecewise."""
    return (expr.replace(F.pdiv, lambda a, b: a / b).replace(F.pinv, lambda a: 1 / a)
            .replace(F.plog, lambda a: sympy.log(sympy.Abs(a)))
            .replace(F.lt, lambda a, b: sympy.Piecewise((1, a < b), (-1, True)))
            .replace(F.gt, lambda a, b: sympy.Piecewise((1, a > b), (-1, True)))
            .replace(F.ifpos, lambda a, b, c: sympy.Piecewise((b, a > 0), (c, True))))


def _parse(e, names) -> sympy.Expr:
    if isinstance(e, sympy.Basic):
        return e
    if not isinstance(e, str):
        raise TypeError(f"an expression must be a string or sympy expression, got {type(e).__name__}")
    text = e.strip().replace("^", "**")  # ^ is a power, as in sympify (with **'s precedence, not xor's)
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as err:
        raise ValueError(f"cannot parse expression {_shown(e)}: {_shown(str(err), quote=False)}") from None
    try:
        return _ExpressionBuilder(e, names).build(tree.body)
    except RecursionError:
        raise ValueError(f"cannot parse expression {_shown(e)}: nested too deeply") from None
    except TypeError as err:  # sympy refusing arguments, e.g. Piecewise()
        raise ValueError(f"cannot parse expression {_shown(e)}: {err}") from None


def _shown(text: str, limit: int = 80, quote: bool = True) -> str:
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return repr(text) if quote else text


# Callable names in expression strings, each naming a function-table entry: the table's names, its sympy
# forms and the aliases that are identifiers (``if`` is a keyword: write ``ifpos`` or ``ite``). Anything
# else is rejected, never looked up.
_STRING_FUNCTIONS: dict[str, str] = {
    **{f.name: f.name for f in F.FUNCTIONS if f.name != "if"},
    **{a: n for a, n in F.ALIASES.items() if a.isidentifier()},
    "pdiv": "div", "pinv": "inv", "plog": "log", "lt": "lt", "gt": "gt", "ifpos": "if",
    "Abs": "abs", "Max": "max", "Min": "min",
}
_STRING_CONSTANTS = {"pi": sympy.pi, "E": sympy.E}
_ADDITIVE, _MULTIPLICATIVE = (ast.Add, ast.Sub), (ast.Mult, ast.Div)
_COMPARISONS = {ast.Lt: sympy.Lt, ast.Gt: sympy.Gt, ast.LtE: sympy.Le, ast.GtE: sympy.Ge}
_MAX_NUMBER_BITS = 1 << 16  # exact rational powers larger than this only stall (float32 holds < 2**128)


class _ExpressionBuilder:
    """A sympy expression from a parsed string, walking a whitelist of syntax nodes. Nothing is evaluated
    as Python and names are looked up only in the function table, the constants and the variables."""

    def __init__(self, text: str, names: Sequence[str] | None):
        self.text, self.names = text, None if names is None else [str(n) for n in names]

    def fail(self, node: ast.AST, why: str) -> ValueError:
        return ValueError(f"expression {_shown(self.text)}: {_shown(ast.unparse(node), 60)} {why}")

    def not_allowed(self, node: ast.AST, what: str) -> ValueError:
        return self.fail(node, f"({what}) is not allowed; use numbers, variables, + - * / ** and the "
                               f"functions {', '.join(sorted(_STRING_FUNCTIONS))}")

    def build(self, node: ast.AST) -> sympy.Expr:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise self.not_allowed(node, f"a {type(node.value).__name__} constant")
            return sympy.Integer(node.value) if isinstance(node.value, int) else sympy.Float(node.value)
        if isinstance(node, ast.Name):
            return self.variable(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            v = self.build(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and isinstance(node.op, _ADDITIVE + _MULTIPLICATIVE):
            return self.chain(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            return self.power(node, self.build(node.left), self.build(node.right))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.BinOp, ast.UnaryOp)):
            raise self.not_allowed(node, f"the {type(node.op).__name__} operator")
        if isinstance(node, ast.Compare):
            raise self.not_allowed(node, "a comparison outside Piecewise; use lt, gt or ifpos")
        raise self.not_allowed(node, f"Python {type(node).__name__} syntax")

    def chain(self, node: ast.BinOp) -> sympy.Expr:
        # a + b - c ... is a left-leaning chain: walk it in a loop (long sums would exhaust the recursion
        # limit) and let sympy combine all terms at once
        group = _ADDITIVE if isinstance(node.op, _ADDITIVE) else _MULTIPLICATIVE
        right: list[tuple[ast.operator, ast.AST]] = []
        while isinstance(node, ast.BinOp) and isinstance(node.op, group):
            right.append((node.op, node.right))
            node = node.left
        terms = [self.build(node)]
        for op, r in reversed(right):
            v = self.build(r)
            terms.append(-v if isinstance(op, ast.Sub) else 1 / v if isinstance(op, ast.Div) else v)
        return sympy.Add(*terms) if group is _ADDITIVE else sympy.Mul(*terms)

    def variable(self, node: ast.Name) -> sympy.Expr:
        name = node.id
        known = re.fullmatch(r"x\d+", name) if self.names is None else name in self.names
        if known:
            return sympy.Symbol(name, real=True)
        if name in _STRING_CONSTANTS:
            return _STRING_CONSTANTS[name]
        variables = "x0, x1, ... (or pass names)" if self.names is None else ", ".join(self.names)
        raise self.fail(node, f"is an unknown variable; variables are {variables}")

    def power(self, node: ast.AST, base: sympy.Expr, ex: sympy.Expr) -> sympy.Expr:
        # sympy evaluates rational powers exactly, also inside a product base ((3*x)**n -> 3**n * x**n):
        # bound the size of those numbers before asking for them
        if ex.is_Rational:
            bits = max((max(abs(r.p), r.q).bit_length() - 1 for r in base.atoms(sympy.Rational)), default=0)
            if bits * abs(ex) > _MAX_NUMBER_BITS:
                raise self.fail(node, "makes a number too large to compute exactly")
            if not base.is_number and ex.is_Integer and abs(ex) > MAX_LEN_LIMIT:
                raise self.fail(node, f"is a product of more than {MAX_LEN_LIMIT} factors: longer than any "
                                      f"max_len (at most {MAX_LEN_LIMIT} nodes)")
        return base**ex

    def call(self, node: ast.Call) -> sympy.Expr:
        if not isinstance(node.func, ast.Name):
            raise self.not_allowed(node.func, "only named functions can be called")
        name = node.func.id
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.not_allowed(node, "keyword or starred arguments")
        if name == "Piecewise":
            return sympy.Piecewise(*(self.piece(a) for a in node.args))
        if name not in _STRING_FUNCTIONS:
            raise self.fail(node.func, "is not a gprl function (cannot encode it); functions: "
                                       f"{', '.join(sorted(_STRING_FUNCTIONS))}")
        args = [self.build(a) for a in node.args]
        fn = F.BY_NAME[_STRING_FUNCTIONS[name]]
        if fn.name in ("max", "min"):  # any number of arguments, chained into binary nodes
            if len(args) < 2:
                raise self.fail(node, f"has {len(args)} argument(s); {name} takes 2 or more")
            return (sympy.Max if fn.name == "max" else sympy.Min)(*args)
        if len(args) != fn.arity:
            s = "s" if fn.arity > 1 else ""
            raise self.fail(node, f"has {len(args)} argument(s); {name} takes {fn.arity} argument{s}")
        return fn.sympy(*args)

    def piece(self, node: ast.AST) -> tuple:
        if not isinstance(node, ast.Tuple) or len(node.elts) != 2:
            raise self.not_allowed(node, "a Piecewise argument must be a pair (value, condition)")
        value, cond = node.elts
        if isinstance(cond, ast.Constant) and cond.value is True:
            return self.build(value), sympy.true
        if isinstance(cond, ast.Compare) and len(cond.ops) == 1 and type(cond.ops[0]) in _COMPARISONS:
            rel = _COMPARISONS[type(cond.ops[0])](self.build(cond.left), self.build(cond.comparators[0]))
            return self.build(value), rel
        raise self.not_allowed(cond, "a condition must be True or one comparison < > <= >=")


Node = tuple  # (kind, code, out, value)


def _encode_outputs(outs: list[sympy.Expr], index: dict[str, int], limit: int) -> list[Node]:
    if len(outs) == 1:
        return _encode(outs[0], index, limit)
    # o_k = e_k + 0: a chain of Modi adds whose last child passes the 0 up; the root is Modi for output 0.
    nodes: list[Node] = []
    for k, e in enumerate(outs):
        nodes += [(FUNC | OUTPUT_FLAG, F.BY_NAME["add"].id, k, 0.0)] + _encode(e, index, limit)
    return nodes + [(CONST, 0, 0, 0.0)]


def _fn(name: str, *children: list[Node]) -> list[Node]:
    nodes = [(FUNC, F.BY_NAME[name].id, 0, 0.0)]
    for c in children:
        nodes += c
    return nodes


def _chain(name: str, parts: list[list[Node]]) -> list[Node]:
    acc = parts[0]
    for p in parts[1:]:
        acc = _fn(name, acc, p)
    return acc


def _strip_abs(e: sympy.Expr) -> sympy.Expr:
    return e.args[0] if isinstance(e, sympy.Abs) else e


def _integer_power(e: sympy.Pow, enc, limit: int) -> list[Node]:
    base, ex = e.args
    n, negative = abs(int(ex)), int(ex) < 0
    factor = enc(base)
    need = n * len(factor) + n - 1 + negative
    if need > limit:
        raise ValueError(f"{e} needs {need} nodes as a product of {n} factors, more than max_len={limit}; "
                         f"raise max_len (at most {MAX_LEN_LIMIT})")
    product = _chain("mul", [factor] * n)
    return _fn("inv", product) if negative else product


def _encode(e: sympy.Expr, index: dict[str, int], limit: int = MAX_LEN_LIMIT) -> list[Node]:
    """Prefix nodes of ``e``; ``limit`` (max_len) bounds integer powers before their products are built."""
    enc = lambda x: _encode(x, index, limit)
    if e.is_Symbol:
        if e.name not in index:
            raise ValueError(f"unknown variable {e.name!r}; known: {list(index)}")
        return [(VAR, index[e.name], 0, 0.0)]
    if e.is_number:
        v = complex(e)
        if v.imag != 0 or not np.isfinite(v.real):
            raise ValueError(f"constant {e} is not a finite real number")
        return [(CONST, 0, 0, float(np.float32(v.real)))]
    if isinstance(e, sympy.Add):
        terms = list(e.args)
        terms.sort(key=lambda t: t.could_extract_minus_sign())  # positive terms first
        acc = enc(terms[0])
        for t in terms[1:]:
            acc = _fn("sub", acc, enc(-t)) if t.could_extract_minus_sign() else _fn("add", acc, enc(t))
        return acc
    if isinstance(e, sympy.Mul):
        if e.args[0] == -1:
            return _fn("neg", enc(-e))
        num = [a for a in e.args if not (a.is_Pow and a.exp.is_number and a.exp < 0)]
        den = [1 / a for a in e.args if a.is_Pow and a.exp.is_number and a.exp < 0]
        if not den:
            return _chain("mul", [enc(a) for a in num])
        d = enc(sympy.Mul(*den))
        return _fn("div", enc(sympy.Mul(*num)), d) if num else _fn("inv", d)
    if isinstance(e, sympy.Pow):
        base, ex = e.args
        if ex == -1:
            return _fn("inv", enc(base))
        if ex == sympy.Rational(1, 2):
            return _fn("sqrt", enc(_strip_abs(base)))
        if ex.is_Integer:  # products keep the sign of odd powers; the kernels' pow is |a|**b
            return _integer_power(e, enc, limit)
        return _fn("pow", enc(_strip_abs(base)), enc(ex))
    if isinstance(e, sympy.re):  # tree values are real: re(v) = v, im(v) = 0
        return enc(e.args[0])
    if isinstance(e, sympy.im):
        return [(CONST, 0, 0, 0.0)]
    unary = {sympy.sin: "sin", sympy.cos: "cos", sympy.tan: "tan", sympy.exp: "exp", sympy.tanh: "tanh",
             sympy.Abs: "abs", sympy.log: "log", F.plog: "log", F.pinv: "inv"}
    if e.func in unary:
        arg = e.args[0]
        if e.func in (sympy.log, F.plog):
            arg = _strip_abs(arg)
        return _fn(unary[e.func], enc(arg))
    named = {F.pdiv: "div", F.lt: "lt", F.gt: "gt", F.ifpos: "if"}
    if e.func in named:
        return _fn(named[e.func], *(enc(a) for a in e.args))
    if isinstance(e, (sympy.Max, sympy.Min)):
        return _chain("max" if isinstance(e, sympy.Max) else "min", [enc(a) for a in e.args])
    if isinstance(e, sympy.Piecewise) and len(e.args) == 2 and e.args[1].cond == sympy.true:
        (v1, cond), (v2, _) = e.args
        if isinstance(cond, (sympy.StrictGreaterThan, sympy.StrictLessThan)):
            hi, lo = ((cond.lhs, cond.rhs) if isinstance(cond, sympy.StrictGreaterThan)
                      else (cond.rhs, cond.lhs))
            if v1 == 1 and v2 == -1:  # (1 if hi > lo else -1)
                return _fn("gt", enc(hi), enc(lo))
            return _fn("if", enc(hi - lo if lo != 0 else hi), enc(v1), enc(v2))
    raise ValueError(f"cannot encode {e} (type {type(e).__name__}) with the gprl function set")


def _nodes_to_arrays(trees: list[list[Node]], max_len: int) -> tuple[np.ndarray, ...]:
    P = len(trees)
    kind = np.zeros((P, max_len), np.uint8)
    code = np.zeros((P, max_len), np.int16)
    out = np.zeros((P, max_len), np.uint8)
    value = np.zeros((P, max_len), np.float32)
    size = np.zeros((P, max_len), np.int16)
    for t, nodes in enumerate(trees):
        for i, (k, c, o, v) in enumerate(nodes):
            kind[t, i], code[t, i], out[t, i], value[t, i] = k, c, o, v
        # sizes from the end: a node's subtree is itself plus its children's subtrees
        stack: list[int] = []
        for i in range(len(nodes) - 1, -1, -1):
            k = nodes[i][0] & KIND_MASK
            n = 1 + sum(stack.pop() for _ in range(F.ARITY[nodes[i][1]] if k == FUNC else 0))
            size[t, i] = n
            stack.append(n)
    return kind, code, out, value, size
