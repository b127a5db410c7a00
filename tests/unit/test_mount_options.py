"""`epochfs mount`'s command line (frontends/fuse/options.py): what the options become, and bad values refused."""
from __future__ import annotations

import argparse

import pytest

from epochfs.frontends.fuse.options import add_arguments, options


def _parse(*argv: str):
    p = argparse.ArgumentParser()
    add_arguments(p)
    return options(p.parse_args(["bkt/pre", "/mnt", *argv]))


def test_files_report_the_kernels_largest_write_as_their_block_size_unless_told():
    o = _parse()
    assert (o.bucket, o.prefix, o.blksize) == ("bkt", "pre", 1 << 20)
    assert _parse("--blksize", "4K").blksize == 4096  # for tools that scale offsets by it (fsstress)
    assert _parse("--blksize", "16M").blksize == 16 << 20


@pytest.mark.parametrize("bad", ["1000", "2K", "32M", "3M", "0", "-4K"])
def test_a_block_size_that_is_no_power_of_two_from_4k_to_16m_is_refused(bad, capsys):
    with pytest.raises(SystemExit):
        _parse(f"--blksize={bad}")
    assert "a power of two from 4K to 16M" in capsys.readouterr().err
