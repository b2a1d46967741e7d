"""The SRMP receive pipeline: parsing off the loop, delivery, streams, forwarding."""
