"""Benchmarks (not tests): ``python -m bench --quick --json FILE``. See bench/README.md."""
