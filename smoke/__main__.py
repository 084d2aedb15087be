"""`python -m smoke`: plan, launch (under torchrun) and certify the smoke runs."""

from smoke.cli import main

raise SystemExit(main())
