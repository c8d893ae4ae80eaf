"""Method options: one module per ``conf/method/<name>.yaml``."""
