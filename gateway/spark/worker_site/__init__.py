"""A directory put on the path of the Python processes Spark starts (see sitecustomize)."""
