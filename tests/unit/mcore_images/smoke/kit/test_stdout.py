"""stdout.to_stderr: what is printed inside (by Python or straight to file descriptor 1) lands on stderr, and
standard output is back after, also when the block raises; a JSON report printed after is alone on stdout."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent("""
    import os, sys
    from mcore_images.smoke.kit import stdout
    try:
        with stdout.to_stderr():
            print("banner from python")
            os.write(1, b"banner from fd 1\\n")
            raise RuntimeError("inside")
    except RuntimeError:
        pass
    print('{"status": "passed"}')
""")


def test_inside_goes_to_stderr_and_stdout_comes_back() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, check=True)
    assert done.stdout == '{"status": "passed"}\n'
    assert "banner from python" in done.stderr and "banner from fd 1" in done.stderr
