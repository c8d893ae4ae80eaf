"""Dataset base: files + checksums → parsed interactions (cached) → filtering → split."""

from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from fedrun.core.paths import cache_dir
from fedrun.data import filtering, splits
from fedrun.data.files import DataFile, digest, resolve, sha256_of
from fedrun.data.interactions import Interactions
from fedrun.data.splits import Split
from fedrun.errors import check, check_choice, check_fraction, check_seed

log = logging.getLogger("fedrun")

PROTOCOLS = ("loo", "temporal_ratio", "random_ratio", "kfold", "predefined")
CACHE_VERSION = "1"


@dataclass
class SplitConfig:
    protocol: str = "loo"  # loo | temporal_ratio | random_ratio | kfold | predefined
    valid: bool = True  # loo: hold out the second-last item for validation
    test_ratio: float = 0.2  # temporal_ratio / random_ratio: test share per user
    valid_ratio: float = 0.0  # validation share (ratio protocols; carved from train for kfold/predefined)
    per_user: bool = True  # random_ratio: split each user's rows (true) or all rows at once
    n_folds: int = 5  # kfold: number of folds
    fold: int = 0  # kfold / predefined k-fold: which fold is the test set (0-based)
    seed: int = 0  # the data-split seed, separate from the training seed (sim.seed)

    def __post_init__(self) -> None:
        check_choice("split.protocol", self.protocol, PROTOCOLS)
        check_fraction("split.test_ratio", self.test_ratio, closed_low=False)
        check_fraction("split.valid_ratio", self.valid_ratio)
        check(self.test_ratio + self.valid_ratio < 1, "split.valid_ratio", self.valid_ratio,
              f"test_ratio + valid_ratio < 1 (test_ratio is {self.test_ratio})")
        check(self.n_folds >= 2, "split.n_folds", self.n_folds, "an integer >= 2")
        check(0 <= self.fold < self.n_folds, "split.fold", self.fold, f"an integer in [0, {self.n_folds})")
        check_seed("split.seed", self.seed)


@dataclass
class DatasetConfig:
    split: SplitConfig = field(default_factory=SplitConfig)
    min_user_count: int = 0  # drop users with fewer interactions
    min_item_count: int = 0  # drop items with fewer interactions
    k_core: bool = False  # repeat both filters until they hold together
    implicit_threshold: float | None = None  # ratings >= threshold become implicit positives; others dropped
    dedup: bool = False  # keep one row per (user, item) pair (the earliest)

    def __post_init__(self) -> None:
        check(self.min_user_count >= 0, "min_user_count", self.min_user_count, "an integer >= 0")
        check(self.min_item_count >= 0, "min_item_count", self.min_item_count, "an integer >= 0")


class Dataset:
    """A dataset option. Subclasses declare ``name``, ``files()`` and ``read()``.

    ``read`` returns either ``{"all": Interactions}`` or the dataset's own parts
    (``train``/``valid``/``test``) for ``split.protocol=predefined``, and beside them the sampled
    negatives the split's files list, if any (``negatives/valid``, ``negatives/test``: user, item rows).
    """

    Config: ClassVar[type] = DatasetConfig
    name: ClassVar[str] = ""
    has_predefined_split: ClassVar[bool] = False
    # where the files come from, for ``fedrun data``: the public source, or how to obtain or derive a file that
    # has no public address
    source: ClassVar[str] = ""

    def __init__(self, config: DatasetConfig):
        self.config = config
        if config.split.protocol == "predefined":
            check(self.has_predefined_split, "dataset.split.protocol", "predefined",
                  f"a generic protocol ({', '.join(PROTOCOLS[:-1])}): {self.name} has no predefined split")

    def files(self) -> list[DataFile]:
        raise NotImplementedError

    @classmethod
    def catalogue(cls) -> list[DataFile]:
        """Every file this dataset can read, in any variant or split (``fedrun data``); by default the files of
        its default configuration."""
        return cls(cls.Config()).files()

    def read(self, paths: dict[str, Path]) -> dict[str, Interactions]:
        raise NotImplementedError

    def digest(self) -> str:
        return digest(self.files())

    def load_parts(self) -> dict[str, Interactions]:
        """Parsed parts, verified against their checksums and cached keyed by them."""
        paths = {spec.path: resolve(self.name, spec) for spec in self.files()}
        # a file with no pinned digest is cached under its own (its dataset's read checks what it holds)
        unpinned = "".join(sha256_of(paths[spec.path]) for spec in self.files() if spec.sha256 is None)
        cache = _cache_path(self.name, self.digest() + self._read_key() + unpinned)
        if cache.exists():
            cached = _load_cache(cache)
            if cached is not None:
                return cached
            log.warning("%s: the parse cache %s is unreadable; parsing the files again", self.name, cache)
        parts = dict(sorted(self.read(paths).items()))  # a fixed part order, cached or not
        _save_cache(cache, parts)
        return parts

    def _read_key(self) -> str:
        """Config fields that change what ``read`` returns (e.g. a predefined fold)."""
        return ""

    def load(self) -> Split:
        parts = self.load_parts()
        negatives = {name.split("/", 1)[1]: parts.pop(name) for name in list(parts) if name.startswith("negatives/")}
        cfg = self.config
        if cfg.min_user_count or cfg.min_item_count:  # the filters renumber ids: the listed negatives would not match
            negatives = {}
        return self._split(self._prepare(parts), negatives or None)

    def _prepare(self, parts: dict[str, Interactions]) -> dict[str, Interactions]:
        cfg = self.config
        if cfg.implicit_threshold is not None:
            parts = {k: filtering.to_implicit(v, cfg.implicit_threshold) for k, v in parts.items()}
        if cfg.dedup:
            parts = {k: _dedup(v) for k, v in parts.items()}
        if cfg.min_user_count or cfg.min_item_count:
            union = _concat(list(parts.values()))
            keep = filtering.filter_counts(union, cfg.min_user_count, cfg.min_item_count, cfg.k_core)
            bounds = np.cumsum([0] + [len(p) for p in parts.values()])
            parts = {k: p.take(np.flatnonzero(keep[bounds[i]:bounds[i + 1]])) for i, (k, p) in enumerate(parts.items())}
            parts = filtering.compact(parts)
        return parts

    def _split(self, parts: dict[str, Interactions], negatives: dict[str, Interactions] | None = None) -> Split:
        cfg = self.config.split
        rng = np.random.default_rng(cfg.seed)
        if cfg.protocol == "predefined":
            split = Split(parts["train"], parts.get("valid"), parts["test"], "predefined", negatives)
            return splits.with_carved_valid(split, cfg.valid_ratio, rng)
        data = _concat(list(parts.values()))
        if cfg.protocol == "loo":
            return splits.leave_one_out(data, cfg.valid)
        if cfg.protocol == "temporal_ratio":
            return splits.temporal_ratio(data, cfg.test_ratio, cfg.valid_ratio)
        if cfg.protocol == "random_ratio":
            return splits.random_ratio(data, cfg.test_ratio, cfg.valid_ratio, cfg.per_user, rng)
        return splits.kfold(data, cfg.n_folds, cfg.fold, cfg.valid_ratio, rng)


def _concat(parts: list[Interactions]) -> Interactions:
    if len(parts) == 1:
        return parts[0]
    rating = None if any(p.rating is None for p in parts) else np.concatenate([p.rating for p in parts])
    order = None if any(p.order is None for p in parts) else np.concatenate([p.order for p in parts])
    return Interactions(
        np.concatenate([p.user for p in parts]), np.concatenate([p.item for p in parts]),
        max(p.n_users for p in parts), max(p.n_items for p in parts), rating, order,
    )


def _dedup(data: Interactions) -> Interactions:
    key = data.user * data.n_items + data.item
    order = data.order if data.order is not None else np.arange(len(data))
    first = np.lexsort((order, key))
    keep = first[np.concatenate([[True], np.diff(key[first]) != 0])] if len(data) else first
    return data.take(np.sort(keep))


def _cache_path(name: str, key: str) -> Path:
    root = cache_dir()
    tag = hashlib.sha256((key + CACHE_VERSION).encode()).hexdigest()[:16]
    return root / f"{name}-{tag}.npz"


def _save_cache(path: Path, parts: dict[str, Interactions]) -> None:
    arrays: dict[str, np.ndarray] = {}
    for name, part in parts.items():
        arrays[f"{name}.user"], arrays[f"{name}.item"] = part.user, part.item
        arrays[f"{name}.shape"] = np.asarray([part.n_users, part.n_items])
        if part.rating is not None:
            arrays[f"{name}.rating"] = part.rating
        if part.order is not None:
            arrays[f"{name}.order"] = part.order
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp.npz")
        np.savez(tmp, **arrays)  # type: ignore[arg-type]  # (numpy's stub reads **arrays as allow_pickle)
        tmp.replace(path)
    except OSError:  # a read-only cache directory only costs a re-parse next time
        pass


def _load_cache(path: Path) -> dict[str, Interactions] | None:
    """The cached parts, or None when the file is truncated or corrupt (it is then deleted and rebuilt)."""
    try:
        with np.load(path) as arrays:
            names = sorted({key.split(".")[0] for key in arrays.files})
            parts = {}
            for name in names:
                n_users, n_items = arrays[f"{name}.shape"].tolist()
                parts[name] = Interactions(
                    arrays[f"{name}.user"], arrays[f"{name}.item"], int(n_users), int(n_items),
                    arrays[f"{name}.rating"] if f"{name}.rating" in arrays.files else None,
                    arrays[f"{name}.order"] if f"{name}.order" in arrays.files else None,
                )
        if not parts:
            raise ValueError("no parts")
        return parts
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        path.unlink(missing_ok=True)
        return None
