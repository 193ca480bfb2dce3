"""Generate the Grafana dashboard, the Prometheus alert rules and the Grafana alert provisioning.

    python dashboards/build.py          # write the files (what `make dashboards` runs)
    python dashboards/build.py --check  # exit 1 and name the stale files if the committed ones differ

The generated files are committed, so users import plain JSON/YAML and never need this script or its
dev-only dependency (grafana-foundation-sdk, pinned to the Grafana 11.6 build in pyproject.toml).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # run as a script or loaded by path from the tests
    sys.path.insert(0, str(HERE))

from llmdash.render import render  # noqa: E402


def stale_files(root: Path = HERE) -> list[str]:
    """Generated files whose committed content differs from what the code produces now."""
    return [rel for rel, text in render().items() if not (root / rel).is_file() or (root / rel).read_text() != text]


def write(root: Path = HERE) -> list[str]:
    """Write every generated file; returns the paths written."""
    written = []
    for rel, text in render().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(rel)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that the committed files are current")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for rel in stale:
            print(f"stale: dashboards/{rel} (run `make dashboards` and commit the result)", file=sys.stderr)
        return 1 if stale else 0
    for rel in write():
        print(f"wrote dashboards/{rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
