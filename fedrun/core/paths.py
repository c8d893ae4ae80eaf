"""Where the shipped ``conf/`` tree lives."""

from __future__ import annotations

from pathlib import Path


def cache_dir() -> Path:
    """fedrun's cache folder (parsed datasets, popularity floors): $FEDRUN_CACHE_DIR or ~/.cache/fedrun/parsed."""
    import os

    return Path(os.environ.get("FEDRUN_CACHE_DIR", Path.home() / ".cache" / "fedrun" / "parsed")).expanduser()


def config_dir() -> str:
    """The ``conf/`` tree shipped next to the package (source checkout or editable install)."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package.parent / "conf", package / "conf"):
        if (candidate / "config.yaml").exists():
            return str(candidate)
    raise SystemExit(f"fedrun: cannot find the config tree 'conf/' next to {package}; reinstall with `make install`.")
