"""The ``defense`` group's settings, one dataclass per aggregation rule (``defense=krum`` → ``KrumConfig``).
Torch-free at import: ``fedrun.app.preflight`` refuses a bad value before torch loads. The rules are in
``fedrun/defense/<option>.py``."""

from __future__ import annotations

from dataclasses import dataclass

from fedrun.errors import check, check_choice, check_positive


@dataclass
class RobustConfig:
    reduce: str = "mean"  # mean: the robust estimate | sum: estimate × uploaders (servers that sum)
    scope: str = "all"  # all: item rows and shared weights | rows: item rows only, shared weights plainly

    def __post_init__(self) -> None:
        check_choice("reduce", self.reduce, ("mean", "sum"))
        check_choice("scope", self.scope, ("all", "rows"))


@dataclass
class SumConfig:
    pass


@dataclass
class MeanConfig:
    weighting: str = "uniform"  # uniform | data_size

    def __post_init__(self) -> None:
        check_choice("weighting", self.weighting, ("uniform", "data_size"))


@dataclass
class TrimmedMeanConfig(RobustConfig):
    beta: float = 0.1  # fraction trimmed from each side of every row
    trim: int | None = None  # or: this many values trimmed from each side (overrides beta)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(0 <= self.beta < 0.5, "beta", self.beta, "a fraction per side in [0, 0.5)")
        check(self.trim is None or self.trim >= 0, "trim", self.trim, "an integer >= 0 or null")


@dataclass
class KrumConfig(RobustConfig):
    f: int = 1  # Byzantine uploads tolerated per row
    variant: str = "nearest"  # nearest (Krum's score) | closest_to_mean (rCL4FedRec's reading)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.f >= 0, "f", self.f, "an integer >= 0")
        check_choice("variant", self.variant, ("nearest", "closest_to_mean"))


@dataclass
class MultiKrumConfig(KrumConfig):
    m: int = 5  # uploads averaged per row after scoring

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.m >= 1, "m", self.m, "an integer >= 1")


@dataclass
class NormBoundConfig(RobustConfig):
    tau: float = 1.0  # τ, the largest L2 norm an upload of one row may have

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("tau", self.tau)


@dataclass
class HiCSConfig:
    quantile: float = 0.9  # q: bounds are this quantile of the round's norms
    scale: float = 1.0  # bound = scale × that quantile
    min_uploaders: int = 2  # sparsified updating: rows with fewer uploaders in the round are not updated
    reduce: str = "mean"  # mean | sum (servers that sum)

    def __post_init__(self) -> None:
        check(0 < self.quantile <= 1, "quantile", self.quantile, "a quantile in (0, 1]")
        check_positive("scale", self.scale)
        check(self.min_uploaders >= 1, "min_uploaders", self.min_uploaders, "an integer >= 1")
        check_choice("reduce", self.reduce, ("mean", "sum"))
