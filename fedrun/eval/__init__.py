"""Eval options: one module per ``conf/eval/<name>.yaml``."""
