"""benchmarks.batch_invariance: reading the same starts played in several batchings."""

from __future__ import annotations

import numpy as np

from benchmarks.batch_invariance import compare_batchings


def test_compare_batchings_names_each_start_that_differs_from_the_largest_batch():
    tasks = ["PushCube-v0", "LiftCube-v0"]
    ref = {"PushCube-v0": (np.array([True, False, True]), np.array([30, 60, 41])),
           "LiftCube-v0": (np.array([False, True, True]), np.array([60, 22, 25]))}
    alone = {"PushCube-v0": (np.array([False, False, True]), np.array([60, 60, 40])),  # start 0 flips, 2 is longer
             "LiftCube-v0": ref["LiftCube-v0"]}
    out = compare_batchings({20: ref, 1: alone, 3: ref}, tasks, seed=7000)
    assert out["20"] == {"successes": 4, "steps": 238}
    assert out["3"]["outcomes_differ"] == 0 and out["3"]["lengths_differ"] == 0 and out["3"]["against"] == 20
    one = out["1"]
    assert (one["successes"], one["steps"], one["outcomes_differ"], one["lengths_differ"]) == (3, 267, 1, 2)
    assert [(d["task"], d["start"], d["seed"]) for d in one["differ"]] == [("PushCube-v0", 0, 7000), ("PushCube-v0", 2, 7002)]
    assert one["differ"][0] == {"task": "PushCube-v0", "start": 0, "seed": 7000, "success": False, "length": 60,
                                "success_at_20": True, "length_at_20": 30}
    assert list(out) == ["1", "3", "20"]
