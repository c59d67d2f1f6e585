"""The Feynman symbolic-regression equations (Udrescu & Tegmark 2020, the AI Feynman database).

Each entry is the database's formula (its ``Formula`` column, sympy syntax) and its variables with their
sampling ranges; as in the database, every variable is drawn independently and uniformly from its range.
``gprl.datasets.load("feynman_I_9_18")`` generates rows from this table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy


@dataclass(frozen=True)
class FeynmanEquation:
    name: str  # the database's file name, e.g. "I.9.18"
    output: str
    formula: str
    variables: tuple[tuple[str, float, float], ...]  # (name, low, high), in the database's column order

    @property
    def key(self) -> str:
        """The dataset name: ``feynman_`` + the file name with dots as underscores."""
        return "feynman_" + self.name.replace(".", "_")

    def expression(self) -> sympy.Expr:
        symbols = {v: sympy.Symbol(v, real=True) for v, _, _ in self.variables}
        return sympy.sympify(self.formula, locals=symbols)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` rows: X [n, n_vars] uniform in the ranges, y [n] from the formula (float64)."""
        X = np.stack([rng.uniform(lo, hi, n) for _, lo, hi in self.variables], axis=1)
        names = [v for v, _, _ in self.variables]
        fn = sympy.lambdify([sympy.Symbol(v, real=True) for v in names], self.expression(), modules="numpy")
        y = np.broadcast_to(np.asarray(fn(*X.T), dtype=np.float64), (n,)).copy()
        return X, y


def _eq(name: str, output: str, formula: str, *variables: tuple[str, float, float]) -> FeynmanEquation:
    return FeynmanEquation(name, output, formula, tuple(variables))


def _same(lo: float, hi: float, *names: str) -> tuple[tuple[str, float, float], ...]:
    return tuple((n, lo, hi) for n in names)


EQUATIONS: tuple[FeynmanEquation, ...] = (
    _eq("I.6.2a", "f", "exp(-theta**2/2)/sqrt(2*pi)", ("theta", 1, 3)),
    _eq("I.6.2", "f", "exp(-(theta/sigma)**2/2)/(sqrt(2*pi)*sigma)", *_same(1, 3, "sigma", "theta")),
    _eq("I.6.2b", "f", "exp(-((theta-theta1)/sigma)**2/2)/(sqrt(2*pi)*sigma)",
        *_same(1, 3, "sigma", "theta", "theta1")),
    _eq("I.8.14", "d", "sqrt((x2-x1)**2+(y2-y1)**2)", *_same(1, 5, "x1", "x2", "y1", "y2")),
    _eq("I.9.18", "F", "G*m1*m2/((x2-x1)**2+(y2-y1)**2+(z2-z1)**2)",
        ("m1", 1, 2), ("m2", 1, 2), ("G", 1, 2), ("x1", 3, 4), ("x2", 1, 2), ("y1", 3, 4), ("y2", 1, 2),
        ("z1", 3, 4), ("z2", 1, 2)),
    _eq("I.10.7", "m", "m_0/sqrt(1-v**2/c**2)", ("m_0", 1, 5), ("v", 1, 2), ("c", 3, 10)),
    _eq("I.11.19", "A", "x1*y1+x2*y2+x3*y3", *_same(1, 5, "x1", "x2", "x3", "y1", "y2", "y3")),
    _eq("I.12.1", "F", "mu*Nn", *_same(1, 5, "mu", "Nn")),
    _eq("I.12.2", "F", "q1*q2*r/(4*pi*epsilon*r**3)", *_same(1, 5, "q1", "q2", "epsilon", "r")),
    _eq("I.12.4", "Ef", "q1*r/(4*pi*epsilon*r**3)", *_same(1, 5, "q1", "epsilon", "r")),
    _eq("I.12.5", "F", "q2*Ef", *_same(1, 5, "q2", "Ef")),
    _eq("I.12.11", "F", "q*(Ef+B*v*sin(theta))", *_same(1, 5, "q", "Ef", "B", "v", "theta")),
    _eq("I.13.4", "K", "1/2*m*(v**2+u**2+w**2)", *_same(1, 5, "m", "v", "u", "w")),
    _eq("I.13.12", "U", "G*m1*m2*(1/r2-1/r1)", *_same(1, 5, "m1", "m2", "r1", "r2", "G")),
    _eq("I.14.3", "U", "m*g*z", *_same(1, 5, "m", "g", "z")),
    _eq("I.14.4", "U", "1/2*k_spring*x**2", *_same(1, 5, "k_spring", "x")),
    _eq("I.15.3x", "x1", "(x-u*t)/sqrt(1-u**2/c**2)", ("x", 5, 10), ("u", 1, 2), ("c", 3, 20), ("t", 1, 2)),
    _eq("I.15.3t", "t1", "(t-u*x/c**2)/sqrt(1-u**2/c**2)", ("x", 1, 5), ("c", 3, 10), ("u", 1, 2),
        ("t", 1, 5)),
    _eq("I.15.10", "p", "m_0*v/sqrt(1-v**2/c**2)", ("m_0", 1, 5), ("v", 1, 2), ("c", 3, 10)),
    _eq("I.16.6", "v1", "(u+v)/(1+u*v/c**2)", *_same(1, 5, "c", "v", "u")),
    _eq("I.18.4", "r", "(m1*r1+m2*r2)/(m1+m2)", *_same(1, 5, "m1", "m2", "r1", "r2")),
    _eq("I.25.13", "Volt", "q/C", *_same(1, 5, "q", "C")),
    _eq("I.27.6", "foc", "1/(1/d1+n/d2)", *_same(1, 5, "d1", "d2", "n")),
    _eq("I.29.4", "k", "omega/c", *_same(1, 10, "omega", "c")),
    _eq("I.32.5", "Pwr", "q**2*a**2/(6*pi*epsilon*c**3)", *_same(1, 5, "q", "a", "epsilon", "c")),
    _eq("I.34.8", "omega", "q*v*B/p", *_same(1, 5, "q", "v", "B", "p")),
    _eq("I.39.10", "E_n", "3/2*pr*V", *_same(1, 5, "pr", "V")),
    _eq("I.39.11", "E_n", "1/(gamma-1)*pr*V", ("gamma", 2, 5), ("pr", 1, 5), ("V", 1, 5)),
    _eq("I.39.22", "pr", "n*kb*T/V", *_same(1, 5, "n", "T", "V", "kb")),
    _eq("I.43.31", "D", "mob*kb*T", *_same(1, 5, "mob", "T", "kb")),
    _eq("I.47.23", "c", "sqrt(gamma*pr/rho)", *_same(1, 5, "gamma", "pr", "rho")),
    _eq("II.2.42", "Pwr", "kappa*(T2-T1)*A/d", *_same(1, 5, "kappa", "T1", "T2", "A", "d")),
    _eq("II.3.24", "flux", "Pwr/(4*pi*r**2)", *_same(1, 5, "Pwr", "r")),
    _eq("II.4.23", "Volt", "q/(4*pi*epsilon*r)", *_same(1, 5, "q", "epsilon", "r")),
    _eq("II.8.31", "E_den", "epsilon*Ef**2/2", *_same(1, 5, "epsilon", "Ef")),
    _eq("II.27.18", "E_den", "epsilon*Ef**2", *_same(1, 5, "epsilon", "Ef")),
    _eq("II.34.2a", "I", "q*v/(2*pi*r)", *_same(1, 5, "q", "v", "r")),
    _eq("II.38.14", "mu_S", "Y/(2*(1+sigma))", *_same(1, 5, "Y", "sigma")),
    _eq("III.12.43", "L", "n*(h/(2*pi))", *_same(1, 5, "n", "h")),
    _eq("III.15.27", "k", "2*pi*alpha/(n*d)", *_same(1, 5, "alpha", "n", "d")),
)
BY_KEY: dict[str, FeynmanEquation] = {e.key: e for e in EQUATIONS}
