"""What a measurement leaves: where a study keeps its files (paths), the request and result
documents (request, result), and how they are written and read (store)."""
