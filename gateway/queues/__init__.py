"""The queue domain: queues, messages, transactions and the one send path; no HTTP."""
