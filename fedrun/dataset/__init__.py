"""Dataset options: one module per ``conf/dataset/<name>.yaml``."""
