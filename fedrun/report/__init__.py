"""Reports: metric tables of one run and mean ± std tables over an experiment's runs."""
