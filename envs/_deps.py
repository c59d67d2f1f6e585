"""Lazy imports of the optional simulators, with an error that names the pip extra to install."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise an ImportError telling which extra of gprl provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"the {extra!r} environment backend needs the Python package {module.split('.')[0]!r}, which is "
            f'not installed ({exc}). Install it with: pip install -e ".[{extra}]" '
            f'(or pip install "gprl[{extra}]")'
        ) from exc


def available(module: str) -> bool:
    """Whether ``module`` can be found, without importing it."""
    return importlib.util.find_spec(module) is not None
