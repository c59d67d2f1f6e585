"""Independent pure-Python references the kernels are checked against: evaluator (tree evaluation, from the
documented semantics) and variation (tree rows as node lists, subtree splicing and sizes)."""
