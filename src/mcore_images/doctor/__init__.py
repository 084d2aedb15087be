"""`mcore-images doctor`: diagnose a Megatron-Core environment and name the fix for each problem.

Runs anywhere with Python >= 3.10 and the standard library: on a laptop, in our images, in
someone else's. Nothing here imports torch or megatron-core at module level; each check imports
what it inspects when it runs, so one broken package shows up as one finding. The checks that
import, load libraries or ask the driver run in a worker interpreter with a per-check timeout
(isolate.py), so a package that segfaults or hangs on import is one finding too.
"""
