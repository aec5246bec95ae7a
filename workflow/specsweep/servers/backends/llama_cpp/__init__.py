"""llama.cpp's llama-server and its models, obtained through PyPI: the embedded CPU default's
provisioning (the server's wire format is ``llama_server.py``; the cache they land in is
``cache.py``). One module per act: ``build`` (the server compiled for a portable CPU target, or
with CUDA, and the node check), ``cuda`` (this machine's CUDA compiler, cuBLAS and driver library
found by full path), ``source`` (the source from the pinned sdist, and the cut of it that travels
to a machine without the package index), ``models`` (the SmolLM2 GGUF from its wheel, and a tiny
GGUF written by llama.cpp's own gguf-py)."""
