"""``python -m gateway`` is the ``entrepot`` command."""

from gateway.cli.main import main

raise SystemExit(main())
