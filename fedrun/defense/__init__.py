"""Defense options: one module per ``conf/defense/<name>.yaml``."""
