"""Privacy options: one module per ``conf/privacy/<name>.yaml``."""
