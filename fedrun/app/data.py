"""``fedrun data``: every dataset option, its files, and where they come from.

  fedrun data                     one line per dataset: its files present, to download, or to put by hand
  fedrun data <name>              each file: state (checksum verified), size, sha256, public address; the source
  fedrun data <name> --download   fetch the files that have a public address and are missing, then verify them

Files live under ``$FEDRUN_DATA_DIR/<name>/`` (default: the OS cache folder); a run downloads what it needs by
itself, so ``--download`` is for fetching ahead (a cluster node without network, ``FEDRUN_OFFLINE=1``).
Imports neither torch nor MLflow.
"""

from __future__ import annotations

import argparse
import importlib
import textwrap
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from fedrun.core.choices import check_group_choices, option_file, options
from fedrun.data.files import DataFile, data_dir, resolve, sha256_of
from fedrun.dataset.base import Dataset
from fedrun.errors import DataError

PRESENT, MISMATCH, DOWNLOADABLE, BY_HAND = "present", "checksum mismatch", "downloadable", "put by hand"


@dataclass(frozen=True)
class FileState:
    spec: DataFile
    path: Path
    state: str  # PRESENT | MISMATCH | DOWNLOADABLE | BY_HAND
    size: int  # bytes on disk (0 when missing)


def dataset_class(name: str) -> type[Dataset]:
    target = str(OmegaConf.select(OmegaConf.load(option_file("dataset", name)), "_target_"))
    module, cls = target.rsplit(".", 1)
    return getattr(importlib.import_module(module), cls)


def states(name: str, root: Path | None = None) -> list[FileState]:
    """The state of every file dataset ``name`` can read (checksums computed for the present ones)."""
    folder = (root or data_dir()) / name
    out = []
    for spec in dataset_class(name).catalogue():
        path = folder / spec.path
        if path.is_file():
            state = PRESENT if spec.sha256 is None or sha256_of(path) == spec.sha256 else MISMATCH
            out.append(FileState(spec, path, state, path.stat().st_size))
        else:
            out.append(FileState(spec, path, DOWNLOADABLE if spec.url or spec.derive else BY_HAND, 0))
    return out


def size_text(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"


def overview(root: Path | None = None) -> str:
    root = root or data_dir()
    lines = [f"datasets under {root} (FEDRUN_DATA_DIR); `fedrun data <name>` for one of them", "",
             f"  {'name':<16} {'files':>5} {'present':>8} {'download':>9} {'by hand':>8} {'bad':>4}  on disk"]
    for name in options("dataset"):
        found = states(name, root)
        count = {state: sum(f.state == state for f in found) for state in (PRESENT, DOWNLOADABLE, BY_HAND, MISMATCH)}
        disk = sum(f.size for f in found)
        lines.append(f"  {name:<16} {len(found):>5} {count[PRESENT]:>8} {count[DOWNLOADABLE]:>9} {count[BY_HAND]:>8} "
                     f"{count[MISMATCH]:>4}  {size_text(disk) if disk else '-'}")
    lines += ["", "download: missing, fetched with its checksum by the first run that needs it (or --download); "
              "by hand: no public address, `fedrun data <name>` says where it comes from; bad: checksum mismatch"]
    return "\n".join(lines)


def detail(name: str, root: Path | None = None) -> str:
    cls = dataset_class(name)
    found = states(name, root)
    folder = (root or data_dir()) / name
    source = textwrap.fill(cls.source or "not recorded", width=116, initial_indent="  source: ",
                           subsequent_indent="          ")
    lines = [f"{name}: {folder}", source, ""]
    for f in found:
        size = size_text(f.size) if f.size else "-"
        checksum = (f"sha256 {f.spec.sha256}" if f.spec.sha256 else
                    f"archive md5 {f.spec.archive_md5}; checked by what is derived from it (source above)")
        lines.append(f"  {f.spec.path:<38} {f.state:<18} {size:>9}  {checksum}")
        if f.spec.url:
            lines.append(f"  {'':<38} from {f.spec.url}" + (f" (member {f.spec.member})" if f.spec.member else ""))
        elif f.spec.derive:
            lines.append(f"  {'':<38} derived from the files above that have an address (source above)")
    if not found:
        lines.append("  (no files)")
    return "\n".join(lines)


def download(name: str, root: Path | None = None) -> tuple[list[str], list[str]]:
    """Fetch and verify every missing file with an address: (what was fetched, what failed, each with why)."""
    fetched, failed = [], []
    for f in states(name, root):
        if f.state != DOWNLOADABLE:
            continue
        try:
            resolve(name, f.spec, root)
            fetched.append(f.spec.path)
        except DataError as error:
            failed.append(f"{f.spec.path}: {error}")
    return fetched, failed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fedrun data", description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", help="a dataset option (fedrun data lists them)")
    parser.add_argument("--download", action="store_true", help="fetch the missing files that have an address")
    args = parser.parse_args(argv)
    if args.name is None:
        if args.download:
            parser.error("--download needs a dataset name")
        print(overview())
        return 0
    check_group_choices([f"dataset={args.name}"])  # a misspelt name: the options and the closest ones
    if args.download:
        fetched, failed = download(args.name)
        for path in fetched:
            print(f"fetched and verified {args.name}/{path}")
        for line in failed:
            print(f"failed {line}")
        print(detail(args.name))
        return 1 if failed else 0
    print(detail(args.name))
    return 0
