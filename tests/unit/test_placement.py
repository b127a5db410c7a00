from epochfs.namenode.placement import ClusterView, NodeView, choose_targets


def view(*nodes):
    return ClusterView(tuple(NodeView(i, alive, free) for i, alive, free in nodes))


FIVE = view(*[(i, True, 10**12) for i in range(1, 6)])


def test_same_input_same_targets():
    assert choose_targets(FIVE, 42, 3, 3) == choose_targets(FIVE, 42, 3, 3)


def test_replicas_are_distinct():
    for seed in range(200):
        t = choose_targets(FIVE, seed, seed % 7, 3)
        assert len(t) == len(set(t)) == 3


def test_blocks_of_a_file_stripe_over_all_nodes():
    assert {choose_targets(FIVE, 7, i, 3)[0] for i in range(5)} == {1, 2, 3, 4, 5}


def test_never_dead_or_full_nodes():
    v = view((1, True, 10**12), (2, False, 10**12), (3, True, 0), (4, True, 10**12))
    for i in range(20):
        assert set(choose_targets(v, 9, i, 3)) == {1, 4}


def test_no_live_node_gives_nothing():
    assert choose_targets(view((1, False, 10**12)), 1, 0, 3) == []
