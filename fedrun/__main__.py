"""``python -m fedrun`` (and ``torchrun --nproc_per_node=N -m fedrun ...``): the ``fedrun`` command."""

from fedrun.app.entry import main

main()
