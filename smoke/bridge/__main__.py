"""`python -m smoke.bridge`: check the HF <-> Megatron-Core bridge(s) of this environment."""

from smoke.bridge.cli import main

raise SystemExit(main())
