"""``python -m torch_flops``: the ``torch-flops`` command line (see :mod:`torch_flops.cli`)."""

from torch_flops.cli import main

raise SystemExit(main())
