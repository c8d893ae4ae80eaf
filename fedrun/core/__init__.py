"""The ground floor: utilities every layer may import (counter-based RNG, seeded streams, where
``conf/`` lives). Nothing here imports from the rest of fedrun."""
