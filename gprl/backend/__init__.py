"""The compiled kernels: their build, the op wrappers and the CUDA evaluation strategies."""
