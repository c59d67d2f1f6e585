"""The function set: one table of every node function with its exact semantics.

The kernels implement the same table in ``kernels/nodes.h`` (ids, arities, protection); this module gives
each function its sympy form (for export and parsing) and its NumPy form (for exported policies and the
lambdified formulas). Exact semantics, in float32, with EPS = 1e-6 and BOUND = 3.40282347e38:

=========  =====  ==========================================  =====================================
name       arity  value                                       sympy form
=========  =====  ==========================================  =====================================
add        2      a + b                                        a + b
sub        2      a - b                                        a - b
mul        2      a * b                                        a*b
div        2      1 if |b| < EPS else a / b                    pdiv(a, b)
sin/cos    1      sin a, cos a                                 sin(a), cos(a)
tan        1      tan a                                        tan(a)
exp        1      e**a                                         exp(a)
log        1      0 if |a| < EPS else ln|a|                    plog(a)
sqrt       1      sqrt(|a|)                                    sqrt(Abs(a))
abs, neg   1      |a|, -a                                      Abs(a), -a
inv        1      1 if |a| < EPS else 1 / a                    pinv(a)
pow        2      |a| ** b                                     Abs(a)**b
max, min   2      max(a, b), min(a, b)                         Max(a, b), Min(a, b)
tanh       1      tanh a                                       tanh(a)
sigmoid    1      1 / (1 + e**-a)                              1/(1 + exp(-a))
lt, gt     2      +1 if a < b (a > b) else -1                  lt(a, b), gt(a, b)
if         3      b if a > 0 else c                            ifpos(a, b, c)
=========  =====  ==========================================  =====================================

Every result that overflows to +-inf saturates at +-BOUND (float32's largest finite value); NaN arises only
from NaN inputs, which the public API rejects. Exported formulas evaluate in float64 and so reproduce the
kernels up to float32 rounding wherever no intermediate value overflows float32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import sympy

EPS = 1e-6
BOUND = float(np.finfo(np.float32).max)


# ---- protected functions as sympy functions: they print compactly and evaluate exactly ----
def _floats(*args):
    """The arguments as floats when all are numeric expressions (sin(2), 1/3, ...), else None."""
    if not all(x.is_number for x in args):
        return None
    try:
        return [float(x) for x in args]
    except TypeError:  # e.g. complex-valued
        return None


class _RealFunction(sympy.Function):
    """Real for real arguments, so sympy keeps Abs/sqrt of them real instead of splitting re/im."""

    def _eval_is_extended_real(self):
        return all(a.is_extended_real for a in self.args) or None


class pdiv(_RealFunction):
    """Protected division: 1 where |b| < 1e-6."""

    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if b.is_zero:  # exact even for a symbolic a: the kernels return 1 wherever |b| < EPS
            return sympy.Integer(1)
        if (f := _floats(a, b)) is not None:
            return sympy.Integer(1) if abs(f[1]) < EPS else a / b
        return None

    def _latex(self, printer):
        a, b = (printer._print(x) for x in self.args)
        return rf"\frac{{{a}}}{{{b}}}"


class pinv(_RealFunction):
    """Protected inverse: 1 where |a| < 1e-6."""

    nargs = 1

    @classmethod
    def eval(cls, a):
        if a.is_zero:
            return sympy.Integer(1)
        if (f := _floats(a)) is not None:
            return sympy.Integer(1) if abs(f[0]) < EPS else 1 / a
        return None

    def _latex(self, printer):
        return rf"\frac{{1}}{{{printer._print(self.args[0])}}}"


class plog(_RealFunction):
    """Protected logarithm: ln|a|, 0 where |a| < 1e-6."""

    nargs = 1

    @classmethod
    def eval(cls, a):
        if a.is_zero:
            return sympy.Integer(0)
        if (f := _floats(a)) is not None:
            return sympy.Integer(0) if abs(f[0]) < EPS else sympy.log(sympy.Abs(a))
        return None

    def _latex(self, printer):
        return rf"\ln\left|{printer._print(self.args[0])}\right|"


class lt(_RealFunction):
    """+1 where a < b, else -1 (a function, not a Piecewise: sympy folds nested Piecewise conditions)."""

    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if (f := _floats(a, b)) is not None:
            return sympy.Integer(1 if f[0] < f[1] else -1)
        if a == b:  # a < a never holds
            return sympy.Integer(-1)
        return None

    def _latex(self, printer):
        a, b = (printer._print(x) for x in self.args)
        return rf"\operatorname{{sign}}_{{<}}\left({a}, {b}\right)"


class gt(_RealFunction):
    """+1 where a > b, else -1."""

    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if (f := _floats(a, b)) is not None:
            return sympy.Integer(1 if f[0] > f[1] else -1)
        if a == b:  # a > a never holds
            return sympy.Integer(-1)
        return None

    def _latex(self, printer):
        a, b = (printer._print(x) for x in self.args)
        return rf"\operatorname{{sign}}_{{>}}\left({a}, {b}\right)"


class ifpos(_RealFunction):
    """b where a > 0, else c."""

    nargs = 3

    @classmethod
    def eval(cls, a, b, c):
        if (f := _floats(a)) is not None:
            return b if f[0] > 0 else c
        return None

    def _latex(self, printer):
        a, b, c = (printer._print(x) for x in self.args)
        return rf"\begin{{cases}} {b} & {a} > 0 \\ {c} & \text{{otherwise}} \end{{cases}}"


def np_pdiv(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    small = np.abs(b) < EPS
    return np.clip(np.where(small, 1.0, a / np.where(small, 1.0, b)), -BOUND, BOUND)


def np_pinv(a):
    return np_pdiv(1.0, a)


def np_plog(a):
    a = np.abs(np.asarray(a, dtype=np.float64))
    small = a < EPS
    return np.where(small, 0.0, np.log(np.where(small, 1.0, a)))


# Names lambdify needs beyond NumPy's own: pass ``modules=[NUMPY_FUNCTIONS, "numpy"]``.
NUMPY_FUNCTIONS: dict[str, Callable] = {
    "pdiv": np_pdiv, "pinv": np_pinv, "plog": np_plog,
    "lt": lambda a, b: np.where(np.less(a, b), 1.0, -1.0),
    "gt": lambda a, b: np.where(np.greater(a, b), 1.0, -1.0),
    "ifpos": lambda a, b, c: np.where(np.greater(a, 0), b, c),
}
SYMPY_FUNCTIONS: dict[str, type] = {
    "pdiv": pdiv, "pinv": pinv, "plog": plog, "lt": lt, "gt": gt, "ifpos": ifpos,
}


def _np_clip(v):
    return np.clip(v, -BOUND, BOUND)


@dataclass(frozen=True)
class Function:
    name: str
    id: int  # the kernels' id (kernels/nodes.h, enum Fn)
    arity: int
    sympy: Callable  # sympy args -> sympy expression
    numpy: Callable  # float64 arrays -> array, same semantics as the kernel (saturation included)


def _sigmoid_np(a):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-a))


def _pow_np(a, b):
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return _np_clip(np.power(np.abs(a), b))


def _exp_np(a):
    with np.errstate(over="ignore"):
        return _np_clip(np.exp(a))


FUNCTIONS: tuple[Function, ...] = (
    Function("add", 0, 2, lambda a, b: a + b, lambda a, b: _np_clip(a + b)),
    Function("sub", 1, 2, lambda a, b: a - b, lambda a, b: _np_clip(a - b)),
    Function("mul", 2, 2, lambda a, b: a * b, lambda a, b: _np_clip(a * b)),
    Function("div", 3, 2, pdiv, np_pdiv),
    Function("sin", 4, 1, sympy.sin, np.sin),
    Function("cos", 5, 1, sympy.cos, np.cos),
    Function("tan", 6, 1, sympy.tan, lambda a: _np_clip(np.tan(a))),
    Function("exp", 7, 1, sympy.exp, _exp_np),
    Function("log", 8, 1, plog, np_plog),
    Function("sqrt", 9, 1, lambda a: sympy.sqrt(sympy.Abs(a)), lambda a: np.sqrt(np.abs(a))),
    Function("abs", 10, 1, sympy.Abs, np.abs),
    Function("neg", 11, 1, lambda a: -a, np.negative),
    Function("inv", 12, 1, pinv, np_pinv),
    Function("pow", 13, 2, lambda a, b: sympy.Abs(a) ** b, _pow_np),
    Function("max", 14, 2, sympy.Max, np.fmax),
    Function("min", 15, 2, sympy.Min, np.fmin),
    Function("tanh", 16, 1, sympy.tanh, np.tanh),
    Function("sigmoid", 17, 1, lambda a: 1 / (1 + sympy.exp(-a)), _sigmoid_np),
    Function("lt", 18, 2, lt, NUMPY_FUNCTIONS["lt"]),
    Function("gt", 19, 2, gt, NUMPY_FUNCTIONS["gt"]),
    Function("if", 20, 3, ifpos, NUMPY_FUNCTIONS["ifpos"]),
)
BY_NAME: dict[str, Function] = {f.name: f for f in FUNCTIONS}
NUM_FUNCTIONS = len(FUNCTIONS)
ARITY = tuple(f.arity for f in FUNCTIONS)

# Aliases users type; each maps to one table entry.
ALIASES = {"+": "add", "-": "sub", "*": "mul", "/": "div", "protected_div": "div", "ifgt": "if", "ite": "if"}

DEFAULT_FUNCTIONS = ("add", "sub", "mul", "div")


def default_leaf_prob(n_in: int, const_prob: float, weights: Sequence[float]) -> float:
    """Koza's share of terminals among all primitives: the grow method's leaf probability by default."""
    n_terms = n_in + (1 if const_prob > 0 else 0)
    return n_terms / (n_terms + sum(w > 0 for w in weights))


def function_weights(functions: Sequence[str] | dict[str, float] | None = None) -> list[float]:
    """Per-id sampling weights for a user's choice: a list of names (equal weights) or {name: weight}."""
    if functions is None:
        functions = DEFAULT_FUNCTIONS
    items = functions.items() if isinstance(functions, dict) else ((name, 1.0) for name in functions)
    weights = [0.0] * NUM_FUNCTIONS
    for name, w in items:
        key = ALIASES.get(name, name)
        if key not in BY_NAME:
            raise ValueError(f"functions: unknown function {name!r}; choose from {sorted(BY_NAME)}")
        if not (float(w) >= 0.0) or not np.isfinite(float(w)):
            raise ValueError(f"functions: weight of {name!r} must be a finite number >= 0, got {w!r}")
        weights[BY_NAME[key].id] += float(w)
    if sum(weights) <= 0:
        raise ValueError("functions: choose at least one function with a positive weight")
    return weights
