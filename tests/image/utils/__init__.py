"""Helpers of the image tests: docker, facts from inside the image, the layer scan."""
