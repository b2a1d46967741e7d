"""``make torture``: long reliability runs (crash loop, damaged files, disk full) that write a
JSON report; short versions of each run in the default test suite."""
