"""fsspec's own abstract test suites (copy, get, put, pipe, open) against a live cluster through epochfs://."""
from __future__ import annotations

import uuid

import fsspec
import fsspec.tests.abstract as abstract
import pytest

from cluster import MAIN

pytestmark = pytest.mark.integration


class EpochFixtures(abstract.AbstractFixtures):
    @pytest.fixture
    def fs(self, cluster):
        return fsspec.filesystem("epochfs", endpoint_url=cluster.endpoint, key=MAIN[0], secret=MAIN[1],
                                 skip_instance_cache=True)

    @pytest.fixture
    def fs_path(self, fs):
        name = f"abs-{uuid.uuid4().hex[:12]}"
        fs.mkdir(name)
        yield name
        fs.rm(name, recursive=True)

    @pytest.fixture
    def supports_empty_directories(self):
        return False  # S3 semantics: a directory below a bucket exists while it holds a file


class TestEpochCopy(abstract.AbstractCopyTests, EpochFixtures):
    pass


class TestEpochGet(abstract.AbstractGetTests, EpochFixtures):
    pass


class TestEpochPut(abstract.AbstractPutTests, EpochFixtures):
    pass


class TestEpochPipe(abstract.AbstractPipeTests, EpochFixtures):
    pass


class TestEpochOpen(abstract.AbstractOpenTests, EpochFixtures):
    pass
