"""`hifi bench`: the benchmarks, one module each, printing figures (plots need the `plot` extra:
`pip install '.[plot]'`)."""
