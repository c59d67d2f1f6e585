"""The search: selection, variation, constant fitting and the generation loop."""
