"""NameNode high availability: the journal that makes each applied command durable before it is acknowledged
(journal.py: the local WAL in the embedded mode, etcd's log in HA mode), undo of unconfirmed commands (undo.py), the
etcd client wrapper (etcd.py), leader election and log replication (etcd_journal.py), checkpoints (checkpoint.py)."""
