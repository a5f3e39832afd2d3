"""What travels between tiers and every layer shares: the records' wire format (codec), the
topic names (topics), the window boundaries all tiers agree on (windows) and the Kafka client
that carries them (bus)."""
