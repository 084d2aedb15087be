"""From pins to something buildable: the compatibility rules, the locks resolved with uv, what PyPI says about
each release (pypi.py, the only module here that reads the network), the build plan and `outdated`. Imports the
catalogue, never build or release."""
