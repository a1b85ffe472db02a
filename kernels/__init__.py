"""Hot-path kernels: each with a plain reference and a fast implementation, tested against each other."""
