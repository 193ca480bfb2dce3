"""Print the oldest release of each supported client range as pip requirements (``anthropic==2.10 openai==3.50
redis==5.2.1``).

The ranges have one home, the ``anthropic``, ``openai`` and ``redis`` extras of ``pyproject.toml``; this reads
them from the installed project's metadata (run it with the project's virtualenv), so ``make test-oldest-sdks``
always tests the lower bounds the project declares. redis-py is among them because the shared state store
leans on its connection classes (the newest release of its range is the dev pin, which ``make test`` runs):
its tests run on both ends of the range, at no cost in CI time (the oldest-SDK run runs them anyway).
"""

from __future__ import annotations

from importlib.metadata import requires

from packaging.requirements import Requirement

SDKS = ("anthropic", "openai", "redis")


def oldest() -> list[str]:
    pins: dict[str, str] = {}
    for text in requires("otel-context") or []:
        requirement = Requirement(text)
        if requirement.name not in SDKS or requirement.marker is None:
            continue
        if not requirement.marker.evaluate({"extra": requirement.name}):
            continue  # the same SDK in another extra (demo, dev): the range is the SDK's own extra
        lower = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        if len(lower) != 1:
            raise SystemExit(f"oldest_sdks: {text!r} has no single lower bound (>=)")
        pins[requirement.name] = f"{requirement.name}=={lower[0]}"
    missing = [name for name in SDKS if name not in pins]
    if missing:
        raise SystemExit(f"oldest_sdks: no supported range declared for {', '.join(missing)}")
    return [pins[name] for name in SDKS]


if __name__ == "__main__":
    print(" ".join(oldest()))
