"""wmrl: action-conditioned video world models as simulators for post-training robot VLA policies.

The ``wmrl`` package is the thin application layer: CLI, errors, run folders, dataset I/O and
video writing shared by the top-level packages (``envs``, ``worldmodels``, ``policies``,
``rewards``, ``imagination``, ``kernels``, ``benchmarks``).
"""

__version__ = "0.1.0"
