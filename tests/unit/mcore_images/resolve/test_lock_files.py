"""A lock's pins, as the other modules read them."""

from __future__ import annotations

import pytest

from mcore_images.resolve import lock_files


@pytest.mark.parametrize("line,expected", [("megatron-core==0.16.1 \\", ("megatron-core", "0.16.1")),
                                           ("mbridge[megatron]==0.15.1 \\", ("mbridge", "0.15.1"))])
def test_pins_parser(line: str, expected: tuple[str, str]) -> None:
    assert lock_files.pins(line) == {expected[0]: expected[1]}
