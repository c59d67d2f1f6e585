"""C++ and CUDA sources of the gprl custom ops, compiled on first use by gprl.backend.build (every ``*.cpp``
here, and every ``*.cu`` where torch has CUDA and a toolkit is found). Each source registers its own
implementations (TORCH_LIBRARY_IMPL), so a CPU-only build simply leaves the ``*.cu`` files out.

By concept:

* shared definitions: ``nodes.h`` (node encoding, function table, protected arithmetic, random numbers),
  ``trees.h`` (per-tree generation, node depths and validation, run by both backends), ``ops.h`` (argument
  checks, loss metrics), ``strategy.h`` (the CUDA evaluation strategies' ids)
* registration: ``ops.cpp`` (the schemas of the structure and evaluation ops)
* structure (``generate``, ``node_depth``, ``validate``): ``structure_cpu.cpp``, ``structure_cuda.cu``
* evaluation (``forward``, ``forward_batched``, ``fitness``): ``eval_cpu.cpp`` (with ``trig_cpu.h``, its
  vectorised sin/cos/tan); ``eval_cuda.cu`` (the interpreter kernels: hybrid, warp and batched, and the host
  dispatch over strategies), ``eval_level_cuda.cu`` (the level strategy), ``eval_cuda.h`` (what both share)
* variation (``vary``, ``uniform``): ``variation.h`` (per-child operators), ``variation_ops.h``,
  ``variation.cpp``, ``variation_cuda.cu``
* generation (``tournament``, ``archive_update``): ``generation.h``, ``generation.cpp``,
  ``generation_cuda.cu``
"""
