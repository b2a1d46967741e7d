"""MSMQ vocabulary with no I/O: queue names, message classes, levels, message encoding."""
