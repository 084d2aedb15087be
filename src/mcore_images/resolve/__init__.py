"""From pins to something buildable: the compatibility rules, the locks resolved with uv, what PyPI says about
each release (pypi.py holds the index readers and the settings every reader and resolver shares), the build plan
and `outdated`. Imports the catalogue, never build or release."""
