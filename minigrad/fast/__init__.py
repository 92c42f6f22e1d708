"""Speed helpers that change no result: read them last (each caller says what plain NumPy call they replace).

    blas.py     row sums, row max, column sums as BLAS products; cached constants
    memory.py   glibc's allocator told to keep freed memory for reuse (applied on import)
"""
