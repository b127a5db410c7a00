"""The mount's block cache: what each eviction policy keeps when an epoch's data does not fit."""
from epochfs.frontends.fuse.cache import BlockCache


def epoch(cache: BlockCache, n: int, order) -> int:
    """Read chunks 0..n-1 in `order`, filling misses; returns the hits."""
    hits = 0
    for i in order:
        key = (1, '"e"', i)
        if cache.get(key) is not None:
            hits += 1
        else:
            cache.put(key, bytes(100))
    return hits


def test_none_keeps_what_fits_and_lru_churns_on_cyclic_epochs():
    order = list(range(10))  # ten chunks of 100 B, room for six
    keep = BlockCache("none", mem_bytes=600)
    lru = BlockCache("lru", mem_bytes=600)
    epoch(keep, 10, order)
    epoch(lru, 10, order)
    assert epoch(keep, 10, order) == 6  # the first six stay, epoch after epoch
    assert epoch(lru, 10, order) == 0   # each chunk was evicted just before it was needed again


def test_disk_tier_takes_what_memory_cannot(tmp_path):
    c = BlockCache("none", mem_bytes=200, disk_bytes=300, disk_dir=tmp_path)
    epoch(c, 10, range(10))
    assert epoch(c, 10, range(10)) == 5
    assert len(list(tmp_path.iterdir())) == 3
    c.drop(1)  # the file changed: its chunks go from both tiers
    assert not list(tmp_path.iterdir())
    assert epoch(c, 10, range(10)) == 0


def test_off_caches_nothing():
    c = BlockCache("off")
    epoch(c, 3, range(3))
    assert epoch(c, 3, range(3)) == 0 and not c.enabled


def test_has_room_only_without_evicting():
    for policy in ("none", "lru"):
        c = BlockCache(policy, mem_bytes=300)
        c.put((1, '"e"', 0), bytes(200))
        assert (1, '"e"', 0) in c and (1, '"e"', 1) not in c
        assert c.has_room(100) and not c.has_room(101)
    assert not BlockCache("off").has_room(1)
