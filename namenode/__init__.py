"""The NameNode: namespace (inodes + directory entries), block maps, placement and membership."""
