"""The POSIX mount: pyfuse3 under trio."""
