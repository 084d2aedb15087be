"""`mcore-images report --out DIR [INPUT ...]`: a static site of what ships — every stack and layer with its
tags, digest and newest certificate, a page per certificate (runs, loss curves, parity against the
tolerances, wall time, checkpoint round trips, bench against its baselines), the compatibility matrix and
the build-efficiency chart. Plain HTML, one stylesheet and inline SVG: it opens from a file:// URL, offline.
"""
