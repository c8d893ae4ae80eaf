"""Server-side retrieval for federated negative sampling: clustering of uploaded embeddings
(``cluster``) and top-R% item search per query vector (``search``)."""
