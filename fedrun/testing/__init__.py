"""References the vectorized paths are checked against and timed against (DESIGN.md, principle 6): plain
per-client loops written the way the papers' code trains, one ``deepcopy`` of the model per client, from the
protocols' definitions and not from fedrun's code (they import nothing from the package). The tests use them
as oracles and ``scripts/bench/`` as the baseline; nothing in the package imports them."""
