"""A uniform average of several policies' weights (a "model soup" of one lineage).

Co-evolution rounds fine-tune each policy from the one before, so their weights stay close, and the rounds' real
success scatters by about ±0.01 around a plateau (session 87's rounds 4-10). Averaging such checkpoints is a
common way to score above each of them. On session 85's gated line it did once and not again
(``docs/rl_in_imagination.md``, session 88): the average of rounds 6-10 scored 0.538 held out against round 10's
0.523, that of rounds 4-8 0.521 against round 8's 0.525, and averaging inside the loop from round 6 on
(``coevolution.average_rounds``) was level with the plain rounds. :func:`average_policies` computes the average
with ``torch.optim.swa_utils.AveragedModel`` (parameters and buffers, a running mean) and saves it as a policy
folder.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from wmrl.errors import CheckpointError


def average_policies(folders: Sequence[str | os.PathLike], out: str | os.PathLike) -> Path:
    """Save the uniform average of the weights of the policies in ``folders`` (each written by
    ``save_pretrained``, all of one architecture and config) to ``out``, with that config.

    Every parameter and buffer is averaged; buffers the policies share (the normalisation statistics)
    stay as they are. One folder copies that policy. A folder of another architecture or config is a
    one-line :class:`CheckpointError` naming it; ``out`` is then not written."""
    from torch.optim.swa_utils import AveragedModel

    from policies import load_policy

    folders = [Path(f) for f in folders]
    if not folders:
        raise CheckpointError("average_policies needs at least one policy folder; got none")
    first = load_policy(folders[0])
    avg = AveragedModel(first, use_buffers=True)
    avg.update_parameters(first)  # the first update copies the weights in; each later one takes a running mean
    for folder in folders[1:]:
        other = load_policy(folder)  # a folder that is no policy: load_policy's own one-line error
        if other.name != first.name or other.config != first.config:
            raise CheckpointError(
                f"{folder} is not a policy of {folders[0]}'s architecture and config "
                f"({first.name!r}); only one lineage's weights can be averaged"
            )
        avg.update_parameters(other)
    return avg.module.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m policies.weight_average --out DIR FOLDER [FOLDER ...]``: save the folders' weight average."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m policies.weight_average", description=main.__doc__)
    p.add_argument("folders", nargs="+", help="policy folders written by save_pretrained, of one architecture and config")
    p.add_argument("--out", required=True, help="the policy folder to write")
    a = p.parse_args(argv)
    print(average_policies(a.folders, a.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
