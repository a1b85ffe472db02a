"""``--variant NAME key=value ...`` (repeatable) on the benchmark command lines."""

from __future__ import annotations

from wmrl.errors import ConfigError


def parse_variants(
    tokens: list[list[str]] | None, taken: tuple[str, ...] = (), flag: str = "--variant"
) -> dict[str, list[str]]:
    """``[["it128", "rl.iterations=128"], ...]`` (argparse ``nargs="+", action="append"``) ->
    ``{"it128": ["rl.iterations=128"], ...}``. A name must be new (not in ``taken`` nor given
    twice) and contain no ``=``; every override must be key=value (``flag`` names the option in errors)."""
    variants: dict[str, list[str]] = {}
    for t in tokens or []:
        name, ov = t[0], t[1:]
        if "=" in name or name in variants or name in taken or any("=" not in o for o in ov):
            raise ConfigError(f"{flag} {t!r}: expected a new NAME then key=value overrides")
        variants[name] = ov
    return variants
