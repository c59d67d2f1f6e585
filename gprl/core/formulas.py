"""A tree as formulas: sympy expressions over raw input units, their reading form, and the source of
NumPy-only modules that evaluate the tree exactly as the kernels do.

Shared by the policy export (:mod:`gprl.rl.export`) and the model export (:mod:`gprl.sr.export`). The exact
expression of output ``k`` is the tree's output ``k`` (``Population.to_sympy``, protected forms) with every
input replaced by ``(x_i - mean_i) / std_i``. The *reading* form prints protected division/log plainly,
simplifies with sympy and rounds constants to ``digits`` significant digits.
"""

from __future__ import annotations

import inspect
import keyword
import os
import re
import signal
import threading
from collections.abc import Sequence
from string import Template
from typing import Any

import numpy as np
import sympy
from sympy.printing.numpy import NumPyPrinter

from gprl.core import functions as F
from gprl.core.population import Population

SIMPLIFY_MAX_OPS = 80  # sympy.simplify is super-linear; larger formulas are shown as folded
SIMPLIFY_SECONDS = 5.0  # per formula: some small tanh/Min forms keep sympy.simplify busy for many minutes


def safe_names(names: Sequence[str] | None, n: int, prefix: str) -> list[str]:
    """Distinct Python identifiers from the environment's names (``prefix{i}`` where a name is missing)."""
    out: list[str] = []
    for i in range(n):
        raw = names[i] if names is not None and i < len(names) else ""
        name = re.sub(r"\W", "_", str(raw)).strip("_") or f"{prefix}{i}"
        if name[0].isdigit() or keyword.iskeyword(name) or name in ("numpy", "np", "obs", "act"):
            name = f"{prefix}_{name}"
        while name in out:
            name = f"{name}_{i}"
        out.append(name)
    return out


def tree_expressions(tree: Population, mean: Sequence[float], std: Sequence[float],
                     names: Sequence[str]) -> list[sympy.Expr]:
    """Exact expressions (protected forms) of every output of a one-tree population over raw inputs: each
    input ``x_i`` replaced by ``(x_i - mean_i) / std_i``."""
    if len(tree) != 1:
        raise ValueError(f"tree must be a Population holding one tree, got {len(tree)}")
    outs = tree.to_sympy(0, names=list(names), protected=True)
    subs = {}
    for i, name in enumerate(names):
        s = sympy.Symbol(name, real=True)
        m, sd = float(mean[i]), float(std[i])
        subs[s] = s if (m == 0.0 and sd == 1.0) else (s - sympy.Float(m)) / sympy.Float(sd)
    return [e.xreplace(subs) for e in outs]


def round_floats(expr: sympy.Expr, digits: int = 4) -> sympy.Expr:
    """Every float constant rounded to ``digits`` significant digits (integers stay integers)."""
    reps = {}
    for f in expr.atoms(sympy.Float):
        r = float(f"{float(f):.{digits}g}")
        reps[f] = sympy.Integer(int(r)) if r == int(r) and abs(r) < 1e6 else sympy.Float(r, digits)
    return expr.xreplace(reps)


def readable(expr: sympy.Expr, digits: int = 4) -> sympy.Expr:
    """The reading form: plain division/log, numbers evaluated, simplified (when small enough) and rounded."""
    e = round_floats(_evaluate_numbers(plain(expr)), digits)
    if sympy.count_ops(e) <= SIMPLIFY_MAX_OPS:
        try:
            s = simplify_within(e, SIMPLIFY_SECONDS)
            if s is not None:
                s = round_floats(_evaluate_numbers(s), digits)
                # keep simplify's result only when shorter and still plain algebra (no ITE inside conditions)
                if sympy.count_ops(s) <= sympy.count_ops(e) and not s.has(sympy.ITE):
                    e = s
        except (Exception, _OutOfTime):  # noqa: BLE001, S110  (simplify may fail on exotic forms, or its
            # alarm land while sympy raises; the folded form is still right)
            pass
    return e


class _OutOfTime(BaseException):  # not an Exception: sympy's own ``except Exception`` must not swallow it
    pass


def simplify_within(expr: sympy.Expr, seconds: float) -> sympy.Expr | None:
    """``sympy.simplify(expr)``, or None when it takes longer than ``seconds`` (a SIGALRM timer: in the main
    thread; elsewhere, or where the platform has no timer, it is not tried)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return None
    armed = True  # an alarm landing once simplify has returned (before the disarm) is ignored

    def out_of_time(signum, frame):
        if armed:
            raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, out_of_time)
    try:  # the timer starts inside: a short bound can fire before sympy is even called
        signal.setitimer(signal.ITIMER_REAL, seconds)
        result = sympy.simplify(expr)
        armed = False
        return result
    except _OutOfTime:
        return None
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def plain(expr: sympy.Expr) -> sympy.Expr:
    """Protected division/inverse/log shown plainly; comparisons stay gt/lt/ifpos functions (nested
    Piecewise conditions fold into unreadable ITE terms)."""
    return expr.replace(F.pdiv, lambda a, b: a / b).replace(F.pinv, lambda a: 1 / a).replace(
        F.plog, lambda a: sympy.log(sympy.Abs(a)))


def _evaluate_numbers(expr: sympy.Expr) -> sympy.Expr:
    """Closed numeric subexpressions (tanh(1), sqrt(2), ...) as floats."""
    reps = {a: sympy.Float(a.evalf()) for a in expr.atoms(sympy.Function, sympy.Pow)
            if a.is_number and not a.is_Rational and a.is_extended_real}
    return expr.xreplace(reps) if reps else expr


class _Printer(NumPyPrinter):
    """NumPy code with the kernels' semantics: fmax/fmin, where() for two-way branches, protected calls."""

    def __init__(self):
        super().__init__({"allow_unknown_functions": True, "fully_qualified_modules": True})

    def _nested(self, fn: str, args) -> str:
        code = self._print(args[0])
        for a in args[1:]:
            code = f"numpy.{fn}({code}, {self._print(a)})"
        return code

    def _print_Max(self, expr):
        return self._nested("fmax", expr.args)

    def _print_Min(self, expr):
        return self._nested("fmin", expr.args)

    def _print_Piecewise(self, expr):
        if len(expr.args) == 2 and expr.args[1].cond == sympy.true:
            (a, cond), (b, _) = expr.args
            return f"numpy.where({self._print(cond)}, {self._print(a)}, {self._print(b)})"
        return super()._print_Piecewise(expr)

    def _print_lt(self, expr):
        a, b = (self._print(x) for x in expr.args)
        return f"numpy.where(numpy.less({a}, {b}), 1.0, -1.0)"

    def _print_gt(self, expr):
        a, b = (self._print(x) for x in expr.args)
        return f"numpy.where(numpy.greater({a}, {b}), 1.0, -1.0)"

    def _print_ifpos(self, expr):
        a, b, c = (self._print(x) for x in expr.args)
        return f"numpy.where(numpy.greater({a}, 0), {b}, {c})"

    def _print_Float(self, expr):
        return repr(float(expr))


PROTECTED_SOURCE = "\n\n".join(inspect.getsource(f) for f in (F.np_pdiv, F.np_pinv, F.np_plog)).replace(
    "np_pdiv", "pdiv").replace("np_pinv", "pinv").replace("np_plog", "plog").replace("np.", "numpy.")

# what every exported module defines first: the kernels' constants, also as float32
KERNEL_CONSTANTS = Template("""EPS = $eps
BOUND = $bound
EPS32, BOUND32 = numpy.float32(EPS), numpy.float32(BOUND)
ZERO, ONE = numpy.float32(0.0), numpy.float32(1.0)""").substitute(eps=repr(F.EPS), bound=repr(F.BOUND))

PROTECTED_FUNCTIONS = ("# protected functions: the exact semantics of gprl's kernels "
                       "(gprl/core/functions.py)\n" + PROTECTED_SOURCE.strip())

# Generated-module source: the C library's float32 transcendental functions, so exported NumPy code follows
# the kernels' float32 arithmetic: equal to the CPU kernels except the last bit of a few sin/cos/tan values
# (the kernels' own vectorised versions, kernels/trig_cpu.h); float64 rounded once where no libm loads.
LIBM_SOURCE = """def _libm_functions():
    import ctypes, ctypes.util
    try:
        lib = ctypes.CDLL(ctypes.util.find_library('m') or 'libm.so.6')
    except OSError:
        lib = None
    out = {}
    for name, arity, fallback in (('sinf', 1, numpy.sin), ('cosf', 1, numpy.cos), ('tanf', 1, numpy.tan),
                                  ('expf', 1, numpy.exp), ('logf', 1, numpy.log), ('tanhf', 1, numpy.tanh),
                                  ('powf', 2, numpy.power)):
        cfn = getattr(lib, name, None) if lib is not None else None
        if cfn is None:
            out[name] = (lambda f: lambda *a: f(*(numpy.asarray(v, numpy.float64) for v in a)).astype(
                numpy.float32))(fallback)
            continue
        cfn.restype, cfn.argtypes = ctypes.c_float, [ctypes.c_float] * arity
        vec = numpy.frompyfunc(cfn, arity, 1)
        out[name] = (lambda v: lambda *a: numpy.asarray(v(*(numpy.asarray(x, numpy.float32) for x in a)),
                                                        numpy.float32))(vec)
    return out


_LIBM = _libm_functions()
sinf, cosf, tanf, expf, logf, tanhf, powf = (_LIBM[k] for k in ('sinf', 'cosf', 'tanf', 'expf', 'logf',
                                                              'tanhf', 'powf'))"""


# float32 NumPy code per kernel function (kernels/nodes.h); every result is then saturated like clampv
_F32 = {
    "add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}",
    "div": "numpy.where(numpy.abs({b}) < EPS32, ONE, {a} / {b})",
    "sin": "sinf({a})", "cos": "cosf({a})", "tan": "tanf({a})", "exp": "expf({a})",
    "log": "numpy.where(numpy.abs({a}) < EPS32, ZERO, logf(numpy.abs({a})))",
    "sqrt": "numpy.sqrt(numpy.abs({a}))", "abs": "numpy.abs({a})", "neg": "-{a}",
    "inv": "numpy.where(numpy.abs({a}) < EPS32, ONE, ONE / {a})", "pow": "powf(numpy.abs({a}), {b})",
    "max": "numpy.fmax({a}, {b})", "min": "numpy.fmin({a}, {b})", "tanh": "tanhf({a})",
    "sigmoid": "ONE / (ONE + expf(-{a}))", "lt": "numpy.where({a} < {b}, ONE, -ONE)",
    "gt": "numpy.where({a} > {b}, ONE, -ONE)", "if": "numpy.where({a} > ZERO, {b}, {c})",
}


def _f32(v: float) -> str:
    return f"numpy.float32({float(np.float32(v))!r})"


def kernel_order_lines(record: dict[str, Any], indent: str = "        ") -> list[str]:
    """float32 statements that evaluate the tree node by node exactly as the CPU kernel does (reverse prefix
    order, the same operations and saturation, Modi outputs accumulated in emission order) into ``y0..``."""
    from gprl.core.population import CONST, FUNC, KIND_MASK, OUTPUT_FLAG, VAR

    lines = [f"{indent}y{k} = ZERO" for k in range(record["n_out"])]
    stack: list[str] = []
    kinds, codes, outs, values = record["kind"], record["code"], record["out"], record["value"]
    for i in range(record["length"] - 1, -1, -1):
        kind = kinds[i] & KIND_MASK
        if kind == VAR:
            stack.append(f"x[..., {codes[i]}]")
        elif kind == CONST:
            stack.append(_f32(values[i]))
        elif kind == FUNC:
            fn = F.FUNCTIONS[codes[i]]
            args = [stack.pop() for _ in range(fn.arity)]  # the first child is on top
            names = dict(zip("abc", args))
            lines.append(f"{indent}n{i} = numpy.clip({_F32[fn.name].format(**names)}, -BOUND32, BOUND32)")
            if kinds[i] & OUTPUT_FLAG:
                lines.append(f"{indent}y{outs[i]} = y{outs[i]} + n{i}")
                stack.append(args[-1])  # Modi: the last child's value passes up
            else:
                stack.append(f"n{i}")
    if record["length"] and not kinds[0] & OUTPUT_FLAG:
        lines.append(f"{indent}y0 = y0 + {stack[-1]}")
    return lines


# an exported module's formula_scores (the folded formulas, float64) and scores (the tree in float32 in the
# kernels' order); $columns, $formulas and $kernel are generated lines
SCORES_TEMPLATE = Template('''def formula_scores($arg):
    """$formula_doc"""
    $arg = _check($arg, numpy.float64)
$columns
    with numpy.errstate(all='ignore'):
        out = [
$formulas
        ]
    return numpy.stack(out, axis=-1)


def scores($arg):
    """$scores_doc"""
    obs = _check($arg, numpy.float32)
    with numpy.errstate(all='ignore'):
        x = (obs - MEAN) / STD
$kernel
    return numpy.stack([numpy.broadcast_to(numpy.float32(v), obs.$batch) for v in ($outs,)], axis=-1)''')


def scores_source(arg: str, names: Sequence[str], exprs: Sequence[sympy.Expr], record: dict[str, Any],
                  n_out: int, column: str, batch: str, formula_doc: str, scores_doc: str) -> str:
    """Source of an exported module's ``formula_scores(arg)`` and ``scores(arg)`` (:data:`SCORES_TEMPLATE`).
    ``column`` reads input ``{i}`` of ``arg``; ``batch`` is the outputs' batch shape as an attribute of the
    input array (``"shape[:-1]"``)."""
    printer = _Printer()
    return SCORES_TEMPLATE.substitute(
        arg=arg, formula_doc=formula_doc, scores_doc=scores_doc, batch=batch,
        columns="\n".join(f"    {name} = {column.format(i=i)}" for i, name in enumerate(names)),
        formulas="\n".join(f"            numpy.broadcast_to({printer.doprint(e)}, {arg}.{batch}),"
                           for e in exprs),
        kernel="\n".join(kernel_order_lines(record)), outs=", ".join(f"y{k}" for k in range(n_out)))


def float32_array(values: Sequence[float]) -> str:
    """Source of a float32 NumPy array of ``values``."""
    return "numpy.array([" + ", ".join(repr(float(np.float32(v))) for v in values) + "], numpy.float32)"


def tree_record(tree: Population) -> dict[str, Any]:
    """The tree as JSON-able lists (its length only) plus the function table it refers to."""
    n = int(tree.size[0, 0])
    t = tree.to("cpu")
    return {"n_in": tree.n_in, "n_out": tree.n_out, "length": n,
            "kind": t.kind[0, :n].tolist(), "code": t.code[0, :n].tolist(), "out": t.out[0, :n].tolist(),
            "value": t.value[0, :n].tolist(), "size": t.size[0, :n].tolist(),
            "functions": {f.id: f.name for f in F.FUNCTIONS}}


def tree_from_record(record: dict[str, Any], max_len: int | None = None) -> Population:
    """The inverse of :func:`tree_record` (a one-tree Population on the CPU, validated)."""
    import torch

    n = int(record["length"])
    L = max_len or n
    cols = {k: np.zeros(L, dt) for k, dt in (("kind", np.uint8), ("code", np.int16), ("out", np.uint8),
                                              ("value", np.float32), ("size", np.int16))}
    for k, col in cols.items():
        col[:n] = record[k]
    pop = Population(*(torch.from_numpy(cols[k])[None] for k in ("kind", "code", "out", "value", "size")),
                     n_in=int(record["n_in"]), n_out=int(record["n_out"]))
    return pop.check()


def write_atomic(path: str | os.PathLike, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
