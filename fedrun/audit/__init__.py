"""``audit``: an honest-but-curious server's inference attacks on what it receives (issue #65)."""
