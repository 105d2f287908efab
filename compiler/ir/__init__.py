"""The Pipeline IR, the contract every back end reads, and its resource report."""
