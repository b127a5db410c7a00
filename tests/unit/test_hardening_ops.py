"""Operations hardening (issue 18), in-process: the restart delays of `epochfs up`, the cluster-secret check and
the /metrics token."""
from __future__ import annotations

from epochfs.frontends.cli.main import RestartDelay


def test_restart_delay_doubles_to_its_cap_and_starts_over_after_a_stable_run():
    d = RestartDelay(first_s=0.5, max_s=30.0, stable_s=30.0)
    assert [d.after_exit(ran_s=1.0) for _ in range(9)] == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert d.after_exit(ran_s=30.0) == 0.5  # it stayed up a while: the next crash is restarted quickly again
    assert d.after_exit(ran_s=0.1) == 1


def test_loopback_addresses():
    from epochfs.common.config import is_loopback
    assert is_loopback("127.0.0.1") and is_loopback("127.8.9.10") and is_loopback("::1") and is_loopback("localhost")
    for host in ("0.0.0.0", "::", "", "10.1.2.3", "no-such-host.invalid"):
        assert not is_loopback(host), host


def test_metrics_token_in_authorization_header():
    import base64
    from epochfs.common.metrics import token_presented

    def basic(user_password: str) -> str:
        return "Basic " + base64.b64encode(user_password.encode()).decode()
    assert token_presented("Bearer tok-1", "tok-1") and token_presented("bearer tok-1", "tok-1")
    assert token_presented(basic("prometheus:tok-1"), "tok-1") and token_presented(basic(":tok-1"), "tok-1")
    for header in ("", "Bearer", "Bearer tok-2", "Bearer tok-1x", "tok-1", basic("tok-1"), basic("u:tok-2"),
                   "Basic !!!notbase64", "Basic " + base64.b64encode(b"u:\xff").decode(), "AWS4-HMAC-SHA256 tok-1"):
        assert not token_presented(header, "tok-1"), header
