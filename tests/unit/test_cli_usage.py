"""`epochfs` and `epochfs admin` without a command print what they can do (exit 2), not argparse's one-line
complaint about a missing argument."""
from __future__ import annotations

import pytest

from epochfs.frontends.cli.main import main


@pytest.mark.parametrize("argv, shows", [
    ([], ["run a local cluster", "copy a file or folder", "mount buckets", "cluster status"]),
    (["admin"], ["cluster summary", "drain a DataNode", "--endpoint"]),
])
def test_no_command_prints_the_help(argv, shows, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "required" not in err
    for s in shows:
        assert s in err
