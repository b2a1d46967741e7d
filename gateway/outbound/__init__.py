"""What leaves the gateway: links to remote queue managers, landings, receipts."""
