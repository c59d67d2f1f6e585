"""C++ and CUDA sources of the gprl custom ops (compiled on first use by gprl.backend.build)."""
