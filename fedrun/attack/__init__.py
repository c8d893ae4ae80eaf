"""Attack options: one module per ``conf/attack/<name>.yaml``."""
