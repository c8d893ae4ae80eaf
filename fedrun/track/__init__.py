"""Track options: one module per ``conf/track/<name>.yaml``."""
