"""Where the shipped ``conf/`` tree lives."""

from __future__ import annotations

from pathlib import Path


def config_dir() -> str:
    """The ``conf/`` tree shipped next to the package (source checkout or editable install)."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package.parent / "conf", package / "conf"):
        if (candidate / "config.yaml").exists():
            return str(candidate)
    raise SystemExit(f"fedrun: cannot find the config tree 'conf/' next to {package}; reinstall with `make install`.")
