"""Cross-field checks that need the loaded data: run after loading, before any training.

Single-field checks live in each option's Config; these compare fields with each other
and with the data (clients per round vs. clients, rating losses vs. rating data, ...).
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedrun.backbone.base import Backbone
from fedrun.data.splits import Split
from fedrun.errors import ConfigError, DataError, check
from fedrun.kernels.config import DEFAULT_MAX_SLOTS, SimConfig

if TYPE_CHECKING:
    from fedrun.eval.base import Evaluator

log = logging.getLogger("fedrun")
BYTES_PER_SLOT_FACTOR = 8  # a padded slot's item copy, its gradient, two Adam moments, scores, slack


def check_run(dataset: str, split: Split, backbone: Backbone, sim: SimConfig, method_config: Any,
              eval_kind: str) -> None:
    _check_parts(dataset, split)
    n_clients = int((split.train.user_counts() > 0).sum())
    check(sim.round_size(n_clients) <= n_clients, "sim.clients_per_round", sim.clients_per_round,
          f"at most the {n_clients} clients with training data in {dataset}, or all")
    has_ratings = split.train.rating is not None
    if backbone.config.loss == "mse" and not has_ratings:
        if "bpr" not in backbone.losses:
            raise ConfigError("dataset", dataset, f"a dataset with ratings: backbone {type(backbone).__name__} "
                                                  "fits explicit ratings")
        raise ConfigError("backbone.loss", "mse", f"a ranking loss (bpr, bce): {dataset} has no ratings")
    if eval_kind == "rating" and not has_ratings:
        raise ConfigError("eval.kind", "rating", f"ranking or auto: {dataset} has no ratings")
    negatives = getattr(method_config, "num_negatives", None)
    if negatives == 0 and backbone.config.loss == "bpr":
        raise ConfigError("method.num_negatives", 0, "an integer >= 1 with backbone.loss=bpr (it ranks each "
                                                     "positive above sampled negatives)")
    negatives = negatives or 0
    largest = int(split.train.user_counts().max())
    check(negatives < split.n_items, "method.num_negatives", negatives,
          f"fewer than the catalogue's {split.n_items} items")
    candidates = split.n_items - largest  # the fewest items a client does not hold
    if negatives > candidates > 0:
        log.warning(
            "method.num_negatives=%d is more than the %d items the largest client of %s does not hold: its negatives "
            "repeat (each is drawn with replacement), and each local step scores %d items per positive", negatives,
            candidates, dataset, 1 + negatives)
    if negatives and largest >= split.n_items:
        raise DataError(f"A client of {dataset} has every item as a positive ({largest} rows, {split.n_items} "
                        "items): no negatives can be drawn for it. Filter it out (dataset.min_user_count / dedup).")
    _check_memory(sim, backbone)  # (may lower the default budget: before it is compared with the largest client)
    slots = largest * (1 + negatives)  # the largest client's scored items in one local step
    check(sim.max_slots >= slots, "sim.max_slots", sim.max_slots,
          f"at least {slots}: the largest client of {dataset} scores {largest} positives x (1 + {negatives} "
          "negatives) in one local step, and a bucket holds at least one client (a smaller budget runs every "
          "client alone, one at a time)")
    _check_checkpoint_dir(sim)


def check_selection(sim: SimConfig, evaluator: Evaluator) -> None:
    """eval.monitor must be a metric the evaluator returns (the progress bar, the learning curve, the floor
    verdict read it); sim.patience / sim.keep_best need validations as well."""
    names = evaluator.metric_names()
    check(evaluator.monitor in names, "eval.monitor", evaluator.config.monitor,
          f"auto or a metric this evaluation returns: {', '.join(names)}")
    if not sim.selects_on_validation:
        return
    name, value = ("sim.patience", sim.patience) if sim.patience is not None else ("sim.keep_best", True)
    if evaluator.split.valid is None:
        raise ConfigError(name, value, "null / false: this split has no validation part "
                                       "(dataset.split.valid for loo, dataset.split.valid_ratio otherwise)")
    if not sim.eval_every:
        raise ConfigError(name, value, "null / false with sim.eval_every=0 (no validation is run)")


def _check_checkpoint_dir(sim: SimConfig) -> None:
    if sim.checkpoint_dir is None:
        return
    folder = Path(sim.checkpoint_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError("sim.checkpoint_dir", sim.checkpoint_dir,
                          f"a folder that can be created ({err.strerror})") from None
    check(os.access(folder, os.W_OK), "sim.checkpoint_dir", sim.checkpoint_dir, "a writable folder")


def _check_parts(dataset: str, split: Split) -> None:
    for name in ("train", "test"):
        if len(getattr(split, name)) == 0:
            raise DataError(f"The {name} part of {dataset} is empty after filtering and the "
                            f"'{split.protocol}' split: relax dataset.min_user_count / min_item_count or pick "
                            "another dataset.split.protocol.")


def _check_memory(sim: SimConfig, backbone: Backbone) -> None:
    """A full bucket's working set must fit this machine's memory. At the default budget a wide backbone
    (backbone.dim=512) lowers it to what fits, said in the log (the run records run.max_slots); a budget set by
    hand that does not fit is refused."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return
    per_slot = max(backbone.item_width, 1) * 4 * BYTES_PER_SLOT_FACTOR
    need = sim.max_slots * per_slot
    if need < physical:
        return
    fits = 1 << max(0, int(math.log2(physical // per_slot)) - 1)  # a power of two, half the memory at most
    if sim.max_slots == DEFAULT_MAX_SLOTS:
        log.info("sim.max_slots lowered from %d to %d: a full bucket at width %d needs ~%.1f GiB, this machine has "
                 "%.1f GiB", sim.max_slots, fits, backbone.item_width, need / 2**30, physical / 2**30)
        sim.max_slots = fits
        return
    raise ConfigError("sim.max_slots", sim.max_slots,
                      f"at most {fits} at width {backbone.item_width}: a full bucket's working set "
                      f"(~{need / 2**30:.1f} GiB) does not fit this machine's {physical / 2**30:.1f} GiB")
