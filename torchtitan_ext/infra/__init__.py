"""torchtitan's parallelize and pipeline functions for BOOST models.

The train spec's ``parallelize_fn`` and ``pipelining_fn``.
"""
