"""``python -m gateway`` is the ``entrepot`` command."""

from gateway.cli import main

raise SystemExit(main())
