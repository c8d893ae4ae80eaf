"""Min-max scaling of explicit ratings to [0, 1] over the training ratings — what LightFR's
authors do before fitting (and what fedrun's FCF uses to turn ratings into confidences)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.errors import ConfigError


def require_rating_model(env, method: str) -> None:
    """A named error unless the backbone fits ratings (squared loss) and the data has them."""
    if env.backbone.config.loss != "mse" or env.split.train.rating is None:
        raise ConfigError("backbone", type(env.backbone).__name__,
                          f"backbone=pmf (explicit ratings, squared loss) and a rated dataset for method={method}")


@dataclass(frozen=True)
class RatingScale:
    low: float
    high: float

    @classmethod
    def of_training(cls, env, method: str) -> "RatingScale":
        """The range of ``env``'s training ratings; a named error for implicit-feedback data."""
        if env.split.train.rating is None:
            raise ConfigError("dataset", "(implicit feedback)", f"a dataset with explicit ratings for method={method}")
        rating = torch.as_tensor(env.split.train.rating)
        return cls(float(rating.min()), float(rating.max()))

    def __call__(self, ratings: torch.Tensor) -> torch.Tensor:
        """Ratings → [0, 1] (a constant rating maps to 0)."""
        return (ratings - self.low) / max(self.high - self.low, 1e-12)

    def inverse(self, scaled: torch.Tensor) -> torch.Tensor:
        """[0, 1] → the training ratings' range (predictions back on the data's scale)."""
        return self.low + scaled * (self.high - self.low)

    def __str__(self) -> str:
        return f"[{self.low:g}, {self.high:g}] -> [0, 1]"
