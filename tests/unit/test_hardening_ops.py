"""Operations hardening (issue 18), in-process: the restart delays of `epochfs up`, the cluster-secret check and
the /metrics token."""
from __future__ import annotations

from epochfs.frontends.cli.main import RestartDelay


def test_restart_delay_doubles_to_its_cap_and_starts_over_after_a_stable_run():
    d = RestartDelay(first_s=0.5, max_s=30.0, stable_s=30.0)
    assert [d.after_exit(ran_s=1.0) for _ in range(9)] == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert d.after_exit(ran_s=30.0) == 0.5  # it stayed up a while: the next crash is restarted quickly again
    assert d.after_exit(ran_s=0.1) == 1
