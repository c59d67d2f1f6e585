"""docs/options.md is the schema's reference: regenerated here and compared, so the two cannot drift."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from gprl.train import config

ROOT = Path(__file__).resolve().parents[2]


def test_the_options_reference_is_the_schema():
    text = (ROOT / "docs" / "options.md").read_text()
    assert text == config.options_reference(), f"docs/options.md is stale: run `{config.REFERENCE_COMMAND}`"


def test_every_option_is_in_the_reference_with_its_default():
    text = (ROOT / "docs" / "options.md").read_text()
    assert "| `gp.population_size` | int \\| null | `null` (sr: `2000`; classification: `2000`) |" in text
    assert "| `wandb.mode` | str | `offline` |" in text
    for group, cls in config.GROUPS.items():
        for name in config.field_docs(cls if cls is not config.GPSchema else config.StoppingRules):
            if name not in config.GROUPS:
                assert f"| `{name if group == 'top level' else f'{group}.{name}'}` |" in text


def test_an_option_without_a_meaning_is_refused(monkeypatch):
    @dataclass
    class Extra:
        documented: int = 1
        """Says what it does."""
        silent: int = 2

    assert config.field_docs(Extra) == {"documented": "Says what it does."}
    monkeypatch.setitem(config.GROUPS, "extra", Extra)
    with pytest.raises(ValueError, match="Extra.silent has no docstring"):
        config.options_reference()
