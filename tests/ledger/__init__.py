"""Slot ledger invariants."""
