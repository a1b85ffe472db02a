"""The ``wmrl`` command: subcommands dispatch lazily to ``module:function(argv) -> int``."""

from __future__ import annotations

import importlib
import sys

from wmrl.errors import WmrlError

COMMANDS: dict[str, tuple[str, str]] = {
    "collect": ("wmrl.collect:main", "record scripted-expert demos as a LeRobotDataset"),
    "train-world-model": ("worldmodels.train:main", "train an action-conditioned video world model"),
    "train-policy": ("policies.train:main", "supervised fine-tuning (behaviour cloning) of a VLA policy"),
    "train-rewards": ("rewards.train:main", "train the IDM and success reward models"),
    "imagine": ("imagination.cli:imagine_main", "RL of a policy inside a world model"),
    "evaluate": ("benchmarks.policy_eval:main", "evaluate a policy in the real simulator"),
    "run": (
        "imagination.pipeline:main",
        "the full loop: collect, train, SFT, RL in imagination, evaluate, co-evolve",
    ),
}


def _usage() -> str:
    lines = ["usage: wmrl <command> [args]", "", "commands:"]
    lines += [f"  {name:<18} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"error: unknown command {cmd!r}; valid commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module, func = COMMANDS[cmd][0].split(":")
    try:
        fn = getattr(importlib.import_module(module), func)
        return int(fn(rest) or 0)
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (ModuleNotFoundError, AttributeError) as e:
        if getattr(e, "name", "") and str(getattr(e, "name", "")).split(".")[0] == module.split(".")[0]:
            print(f"error: command {cmd!r} is not available in this installation ({e})", file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt:
        print("interrupted; the run folder keeps its last checkpoint (run again to resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
