"""epochfs frontends/cli."""
