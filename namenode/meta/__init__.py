"""The NameNode's state by subject; MetaStore (namenode/metastore.py) puts them together behind one `execute`."""
