"""The dashboard (/admin/ui) rendered by headless Chromium (Debian's chromium, driven by Playwright)."""
from __future__ import annotations

import shutil

import pytest

from cluster import MAIN

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not shutil.which("chromium"):
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def test_dashboard_shows_live_cluster(cluster, browser, tmp_path):
    s3 = cluster.s3()
    s3.create_bucket(Bucket="dashboard-data")
    ids = sorted(cluster.node_ids().values())
    page = browser.new_page(http_credentials={"username": MAIN[0], "password": MAIN[1]})
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(f"{cluster.endpoint}/admin/ui")
    page.wait_for_selector("tr.node", timeout=15_000)
    assert page.inner_text("#health") == "ok"
    rows = page.query_selector_all("tr.node")
    assert sorted(int(r.get_attribute("data-id")) for r in rows) == ids
    for r in rows:
        cells = [c.inner_text() for c in r.query_selector_all("td")]
        assert cells[1].startswith("127.0.0.1:") and cells[2] == "alive" and "s ago" in cells[6]
        assert "/" in cells[4] and "B" in cells[4]
    # traffic between two refreshes shows as a throughput line
    for i in range(20):
        s3.put_object(Bucket="dashboard-data", Key=f"k{i}", Body=b"z" * 50_000)
    page.wait_for_function("document.getElementById('line-in').getAttribute('points').split(' ').length >= 2",
                           timeout=15_000)
    page.wait_for_function("document.getElementById('rates').textContent.includes('req/s')", timeout=15_000)
    assert "objects" in page.inner_text("#summary")
    # the NameNode of this (embedded) cluster: one row, the gateway's, no etcd table
    page.wait_for_selector("tr.namenode", timeout=15_000)
    nns = page.query_selector_all("tr.namenode")
    assert len(nns) == 1 and nns[0].get_attribute("data-role") == "embedded"
    assert "this gateway's" in nns[0].inner_text() and page.inner_text("#ha-mode") == "(embedded)"
    assert not page.is_visible("#etcd-table") and page.inner_text("#ha-err") == ""
    assert page.inner_text("#err") == ""
    shot = tmp_path / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert all(u.startswith(cluster.endpoint) for u in requests)  # self-contained: nothing fetched elsewhere
    page.close()

